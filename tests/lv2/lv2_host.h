/* A small LV2 host on lilv for the plugin tests: loads the bundle found
 * through LV2_PATH (the build tree's), instantiates with urid:map/unmap,
 * log (captured) and worker features, and runs the plugin block by block.
 *
 * The worker runs either on its own thread, as in a live host (requests and
 * responses go through queues; responses are delivered after run()), or
 * synchronously, as hosts do when freewheeling (work() is called inside
 * schedule_work()). */
#ifndef LV2_HOST_H
#define LV2_HOST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <lilv/lilv.h>
#include <lv2/atom/forge.h>
#include <lv2/log/log.h>
#include <lv2/urid/urid.h>
#include <lv2/worker/worker.h>

#define LV2H_MAX_PORTS 32
#define LV2H_ATOM_BUF 16384
#define LV2H_MAX_RESP 16
#define LV2H_MAX_REQ 16
#define LV2H_REQ_SIZE 8192

typedef struct lv2h {
  LilvWorld *world;
  const LilvPlugin *plugin;
  LilvInstance *inst;
  double rate;
  int n_ports;

  LV2_URID_Map map;
  LV2_URID_Unmap unmap;
  LV2_Log_Log log;
  LV2_Worker_Schedule sched;
  LV2_Feature f_map, f_unmap, f_log, f_sched;
  const LV2_Feature *features[5];
  const LV2_Worker_Interface *worker;

  pthread_mutex_t mu; /* URID table and log buffer */
  char **uris;
  size_t n_uris;
  char logbuf[65536];
  size_t loglen;
  int log_errors;
  int quiet; /* don't echo log lines to stderr */

  struct {
    uint32_t size;
    _Alignas(16) unsigned char data[256];
  } resp[LV2H_MAX_RESP];
  int n_resp; /* guarded by mu in threaded mode */

  /* Threaded worker. */
  int threaded;
  pthread_t thread;
  pthread_cond_t cv;
  int stop;
  struct {
    uint32_t size;
    _Alignas(16) unsigned char data[LV2H_REQ_SIZE];
  } *req; /* LV2H_MAX_REQ entries, guarded by mu */
  uint64_t *req_copy; /* the request being worked on (worker thread) */
  int n_req;

  float ctl[LV2H_MAX_PORTS];
  _Alignas(16) uint8_t control_buf[LV2H_ATOM_BUF];
  _Alignas(16) uint8_t notify_buf[LV2H_ATOM_BUF];
  LV2_Atom_Forge forge;
  LV2_Atom_Forge_Frame seq_frame;
  int control_open;

  LV2_URID u_patch_Set, u_patch_Get, u_patch_property, u_patch_value,
      u_model, u_backend, u_atom_Path, u_atom_String, u_atom_Object, u_atom_Sequence,
      u_atom_Chunk;
} lv2h;

/* LV2_PATH = dir (the build tree's directory holding ssae.lv2), then the
 * system's LV2 directories (for the specifications). */
void lv2h_set_path(const char *dir);

/* Loads the world (LV2_PATH), finds and instantiates plugin_uri, with a
 * worker thread when threaded. 0 or -1 (message on stderr). */
int lv2h_open(lv2h *h, const char *plugin_uri, double rate, int threaded);
void lv2h_close(lv2h *h);

/* Port index of a symbol (exits the test on an unknown one). */
uint32_t lv2h_port(lv2h *h, const char *symbol);
/* Control port value by symbol (inputs and outputs). */
float *lv2h_ctl(lv2h *h, const char *symbol);
void lv2h_connect(lv2h *h, const char *symbol, void *buf);

/* Queues events for the next run (frame 0). */
void lv2h_send_set_model(lv2h *h, const char *path);
void lv2h_send_get(lv2h *h); /* of the model */
/* patch:Get of one property (0: all of them). */
void lv2h_send_get_property(lv2h *h, LV2_URID property);
void lv2h_send_set_backend(lv2h *h, const char *value);
/* Any atom as a patch:Set value (for malformed messages). */
void lv2h_send_set_raw(lv2h *h, LV2_URID property, LV2_URID type,
                       const void *body, uint32_t size);

/* run(n), then delivers the worker's responses. */
void lv2h_run(lv2h *h, uint32_t n);

/* The path of the last patch:Set <model> in the notify output of the last
 * run, copied into buf. 1 when found, 0 when not. */
int lv2h_notified_model(lv2h *h, char *buf, size_t len);

/* patch:Get, run(0) and read the answer. 1 when answered. */
int lv2h_get_model(lv2h *h, char *buf, size_t len);

/* The same for the backend parameter (an atom:String). */
int lv2h_notified_backend(lv2h *h, char *buf, size_t len);
int lv2h_get_backend(lv2h *h, char *buf, size_t len);
/* patch:Set the backend and wait (up to 10 s) for the plugin to announce
 * it. 1 when it did. */
int lv2h_set_backend(lv2h *h, const char *value);

/* patch:Set the model and wait (up to 10 s, calling run(0)) for the plugin
 * to announce it. 1 when it did. */
int lv2h_load_model(lv2h *h, const char *path);

/* Waits up to 10 s (calling run(0)) for the worker to be idle. */
void lv2h_wait_worker(lv2h *h);

/* Log text captured since the last call, cleared; and error count. */
void lv2h_log_take(lv2h *h, char *buf, size_t len, int *errors);

/* ---- test helpers ---- */

/* Deterministic test signals at any rate: `normal` is a machine-like hum
 * (tones plus noise); with anomaly, a squeal (swept tone) and clicks are
 * added between t0 and t1 seconds. */
void sig_make(float *x, size_t n, double rate, uint64_t seed, int anomaly,
              double t0, double t1);
/* Writes mono 16-bit PCM WAV and reads it back as float (the exact samples
 * `ssae score` sees). -1 on error. */
int sig_write_wav(const char *path, float *x, size_t n, int rate);

/* Writes dir/template.safetensors, a model that flags what differs from
 * normal sound: its encoder and bottleneck are silenced and its decoder
 * bias is the mean log-mel spectrum of 10 s of normal sound, so a window's
 * score is its squared distance from that spectrum. (Deterministic and
 * instant, unlike training; the plugin runs any model the same way.) Its
 * path goes into path. 0, or -1 (message on stderr). */
int make_template_model(const char *dir, char *path, size_t len);

/* xorshift: the block sizes of a "host". */
uint32_t rnd_u32(uint64_t *s);

/* A scratch directory under $TMPDIR; the first one made is removed at exit
 * (also when a check fails). */
char *make_tmpdir(const char *tag);

/* The start of a test's main: its one argument is the directory holding
 * ssae.lv2 (lv2h_set_path); returns a scratch directory (make_tmpdir).
 * Exits with the reason on a wrong call or no directory. */
char *lv2h_test_start(int argc, char **argv, const char *tag);
void rm_rf(const char *path);

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                   \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#endif
