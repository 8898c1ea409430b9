#include "ssae_io_jack.h"

#include <errno.h>
#include <jack/jack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Threads of libjack's that ran the thread-init callback: its message
 * thread (while the callback is installed), then on activation its process
 * thread and its notification thread (on the server's activation notice),
 * whose end ssae_io_jack_close waits for after a shutdown. */
#define JACK_THREADS_MAX 8

/* After a shutdown, how long closing waits at most for libjack's
 * notification thread to end by itself (it ends once the server's socket
 * is closed, normally milliseconds after the server has gone). */
#define NOTIFY_END_WAIT_S 2.0

/* How long ssae_io_jack_stop waits at most for a callback under way. */
#define STOP_WAIT_S 2.0

struct ssae_io_jack {
  jack_client_t *client;
  int n, passthrough;
  int first; /* the engine channel of this client's first input */
  int group; /* the engine's input group fed here, -1: all of it */
  jack_port_t **in, **out, **score, **alarm;
  const float **inbuf; /* per-callback input pointers, allocated once */
  ssae_engine *e;
  ssae_io_audio_hook hook; /* beside the engine (set before start) */
  void *hook_user;
  _Atomic unsigned rate_now;   /* from the sample-rate callback */
  _Atomic unsigned rate_engine; /* the rate the engine runs at */
  _Atomic unsigned bufsize;
  _Atomic int shutdown;
  int active; /* between start and stop (main thread) */
  char reason[256];
  /* Callbacks that use the engine or the hook (process, xrun) count
   * themselves in busy and leave both alone once detached is set: after
   * ssae_io_jack_stop the engine may go even while libjack, stuck, still
   * runs them. */
  _Atomic int busy;
  _Atomic int detached;
  _Atomic uint64_t cycles; /* process callbacks so far */
  /* The watchdog (main thread): no process cycle for watchdog_s seconds
   * while active counts as the server gone. */
  double watchdog_s;
  uint64_t cycles_seen;
  double cycle_t; /* when cycles last moved (CLOCK_MONOTONIC, s) */
  int stalled;
  char stall_reason[200];
  _Atomic int nthreads;
  int threads_activation; /* threads[] from here on came with the activation */
  struct {
    _Atomic int set;
    pid_t tid;
    pthread_t self;
  } threads[JACK_THREADS_MAX];
  char name[128]; /* the client's name, for messages after the server has gone */
};

static double mono_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_s(double s) {
  struct timespec d = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&d, NULL);
}

/* Audio thread: analysis, passthrough, control outputs. No allocation, no
 * locks, no system calls. */
static int on_process(jack_nframes_t nframes, void *arg) {
  ssae_io_jack *j = arg;
  atomic_fetch_add_explicit(&j->cycles, 1, memory_order_relaxed);
  atomic_fetch_add(&j->busy, 1);
  if (atomic_load(&j->detached)) {
    /* Stopped: silence out, nothing of the engine's touched. */
    for (int c = 0; c < j->n; c++) {
      if (j->passthrough)
        memset(jack_port_get_buffer(j->out[c], nframes), 0, nframes * sizeof(float));
      memset(jack_port_get_buffer(j->score[c], nframes), 0, nframes * sizeof(float));
      memset(jack_port_get_buffer(j->alarm[c], nframes), 0, nframes * sizeof(float));
    }
    atomic_fetch_sub(&j->busy, 1);
    return 0;
  }
  for (int c = 0; c < j->n; c++)
    j->inbuf[c] = jack_port_get_buffer(j->in[c], nframes);
  if (atomic_load_explicit(&j->rate_now, memory_order_relaxed) ==
      atomic_load_explicit(&j->rate_engine, memory_order_acquire)) {
    if (j->group >= 0)
      ssae_engine_process_group(j->e, j->group, j->inbuf, nframes);
    else
      ssae_engine_process(j->e, j->inbuf, nframes);
    if (j->hook) j->hook(j->hook_user, j->first, j->n, j->inbuf, nframes);
  }
  for (int c = 0; c < j->n; c++) {
    if (j->passthrough) {
      float *o = jack_port_get_buffer(j->out[c], nframes);
      memcpy(o, j->inbuf[c], nframes * sizeof(float));
    }
    ssae_channel_state st;
    ssae_engine_channel_get(j->e, j->first + c, &st);
    float *s = jack_port_get_buffer(j->score[c], nframes);
    float *a = jack_port_get_buffer(j->alarm[c], nframes);
    float sv = st.smoothed, av = st.alarm ? 1.0f : 0.0f;
    for (jack_nframes_t i = 0; i < nframes; i++) {
      s[i] = sv;
      a[i] = av;
    }
  }
  atomic_fetch_sub(&j->busy, 1);
  return 0;
}

/* JACK's thread for server notifications (not the audio thread). */
static int on_srate(jack_nframes_t rate, void *arg) {
  ssae_io_jack *j = arg;
  atomic_store(&j->rate_now, (unsigned)rate);
  return 0;
}

static int on_bufsize(jack_nframes_t n, void *arg) {
  ssae_io_jack *j = arg;
  /* The engine splits large blocks itself: nothing to reallocate. */
  atomic_store(&j->bufsize, (unsigned)n);
  return 0;
}

/* JACK's notification thread: the server missed a deadline (an xrun):
 * audio was lost before it reached the engine. Counted once per engine
 * (the client feeding all of it, or its first group). */
static int on_xrun(void *arg) {
  ssae_io_jack *j = arg;
  atomic_fetch_add(&j->busy, 1);
  if (!atomic_load(&j->detached)) ssae_engine_note_xrun(j->e, 1);
  atomic_fetch_sub(&j->busy, 1);
  return 0;
}

/* Called by libjack in each thread of its that will run callbacks: the
 * process thread, and (jack2) the notification thread when the server
 * confirms the activation. */
static void on_thread_init(void *arg) {
  ssae_io_jack *j = arg;
  int k = atomic_fetch_add(&j->nthreads, 1);
  if (k >= JACK_THREADS_MAX) return;
  j->threads[k].tid = (pid_t)syscall(SYS_gettid);
  j->threads[k].self = pthread_self();
  atomic_store(&j->threads[k].set, 1);
}

static void on_shutdown(jack_status_t code, const char *reason, void *arg) {
  ssae_io_jack *j = arg;
  (void)code;
  /* Called from a JACK thread; the main loop reports it. */
  snprintf(j->reason, sizeof j->reason, "%s", reason ? reason : "no reason given");
  atomic_store(&j->shutdown, 1);
}

static void jack_quiet(const char *msg) { (void)msg; }

int ssae_io_jack_name_max(void) { return jack_client_name_size() - 1; }

ssae_io_jack *ssae_io_jack_new(const char *name, int first, int inputs, int passthrough,
                          ssae_err *err) {
  if (inputs < 1 || inputs > 256 || first < 0) {
    ssae_err_set(err, "a JACK client has 1..256 inputs (got %d)", inputs);
    return NULL;
  }
  if (!name || !*name || strlen(name) > (size_t)ssae_io_jack_name_max()) {
    ssae_err_set(err, "a JACK client name has 1 to %d bytes (got %zu)", ssae_io_jack_name_max(),
                 name ? strlen(name) : (size_t)0);
    return NULL;
  }
  ssae_io_jack *j = calloc(1, sizeof *j);
  if (!j) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  j->n = inputs;
  j->first = first;
  j->group = -1;
  j->passthrough = passthrough;
  j->in = calloc((size_t)inputs, sizeof *j->in);
  j->out = calloc((size_t)inputs, sizeof *j->out);
  j->score = calloc((size_t)inputs, sizeof *j->score);
  j->alarm = calloc((size_t)inputs, sizeof *j->alarm);
  j->inbuf = calloc((size_t)inputs, sizeof *j->inbuf);
  if (!j->in || !j->out || !j->score || !j->alarm || !j->inbuf) {
    ssae_err_set(err, "out of memory");
    ssae_io_jack_free(j);
    return NULL;
  }
  /* libjack prints its own connection attempts; our message says it all. */
  jack_set_error_function(jack_quiet);
  jack_status_t status;
  j->client = jack_client_open(name, JackNoStartServer, &status);
  jack_set_error_function(NULL);
  if (!j->client) {
    ssae_err_set(err,
                 "cannot connect to a JACK server (status 0x%x)%s; start one "
                 "(e.g. jackd -d alsa, or jackd -d dummy) first",
                 (unsigned)status,
                 (status & JackServerFailed) ? ": no server running" : "");
    ssae_io_jack_free(j);
    return NULL;
  }
  snprintf(j->name, sizeof j->name, "%s", jack_get_client_name(j->client));
  char pn[64];
  for (int c = 0; c < inputs; c++) {
    const int num = first + c + 1;
    snprintf(pn, sizeof pn, "in_%d", num);
    j->in[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                  JackPortIsInput, 0);
    if (passthrough) {
      snprintf(pn, sizeof pn, "out_%d", num);
      j->out[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsOutput, 0);
    }
    snprintf(pn, sizeof pn, "score_%d", num);
    j->score[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsOutput, 0);
    snprintf(pn, sizeof pn, "alarm_%d", num);
    j->alarm[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsOutput, 0);
    if (!j->in[c] || !j->score[c] || !j->alarm[c] || (passthrough && !j->out[c])) {
      ssae_err_set(err, "cannot register JACK ports for channel %d: each input takes %d "
                        "ports, and the server's limit (jackd --port-max N, before -d; jackd2 "
                        "allows at most 4096 a server) may be reached",
                   num, passthrough ? 4 : 3);
      ssae_io_jack_free(j);
      return NULL;
    }
  }
  unsigned r = (unsigned)jack_get_sample_rate(j->client);
  atomic_init(&j->rate_now, r);
  atomic_init(&j->rate_engine, r);
  atomic_init(&j->bufsize, (unsigned)jack_get_buffer_size(j->client));
  atomic_init(&j->shutdown, 0);
  return j;
}

void ssae_io_jack_set_watchdog(ssae_io_jack *j, double seconds) {
  j->watchdog_s = seconds > 0 ? seconds : 0;
}

double ssae_io_jack_rate(const ssae_io_jack *j) {
  return (double)atomic_load(&((ssae_io_jack *)j)->rate_engine);
}
const char *ssae_io_jack_name(const ssae_io_jack *j) { return j->name; }
unsigned ssae_io_jack_buffer_size(const ssae_io_jack *j) {
  return atomic_load(&((ssae_io_jack *)j)->bufsize);
}
const char *ssae_io_jack_shutdown_reason(const ssae_io_jack *j) {
  return j->stalled ? j->stall_reason : j->reason;
}

void ssae_io_jack_set_hook(ssae_io_jack *j, ssae_io_audio_hook fn, void *user) {
  j->hook = fn;
  j->hook_user = user;
}

int ssae_io_jack_start(ssae_io_jack *j, ssae_engine *e, int group, ssae_err *err) {
  if (group >= 0) {
    int first, count;
    ssae_engine_group_channels(e, group, &first, &count);
    if (first != j->first || count != j->n)
      return ssae_err_set(err, "JACK client: input group %d is channels %d..%d, the client's "
                               "ports %d..%d", group, first + 1, first + count, j->first + 1,
                          j->first + j->n);
  }
  j->group = group;
  j->e = e;
  if (jack_set_process_callback(j->client, on_process, j) ||
      jack_set_sample_rate_callback(j->client, on_srate, j) ||
      jack_set_buffer_size_callback(j->client, on_bufsize, j) ||
      (group <= 0 && jack_set_xrun_callback(j->client, on_xrun, j)))
    return ssae_err_set(err, "cannot install the JACK callbacks");
  jack_set_thread_init_callback(j->client, on_thread_init, j);
  j->threads_activation = atomic_load(&j->nthreads);
  jack_on_info_shutdown(j->client, on_shutdown, j);
  if (jack_activate(j->client))
    return ssae_err_set(err, "cannot activate the JACK client");
  j->active = 1;
  j->cycles_seen = atomic_load(&j->cycles);
  j->cycle_t = mono_s();
  return 0;
}

int ssae_io_jack_connect(ssae_io_jack *j, const char *port, int index, ssae_err *err) {
  if (index < 0 || index >= j->n)
    return ssae_err_set(err, "--connect %s: only %d input(s) (--inputs)", port,
                        j->n);
  jack_port_t *src = jack_port_by_name(j->client, port);
  if (!src)
    return ssae_err_set(err, "--connect: no JACK port '%s'", port);
  if (!(jack_port_flags(src) & JackPortIsOutput))
    return ssae_err_set(err, "--connect: JACK port '%s' is not an output", port);
  int rc = jack_connect(j->client, port, jack_port_name(j->in[index]));
  if (rc && rc != EEXIST)
    return ssae_err_set(err, "--connect: cannot connect '%s' to '%s'", port,
                        jack_port_name(j->in[index]));
  return 0;
}

int ssae_io_jack_poll(ssae_io_jack *j, ssae_err *err) {
  if (atomic_load(&j->shutdown) || j->stalled) return 1;
  if (j->active && j->watchdog_s > 0) {
    /* The server can go without libjack saying so (hung, stopped, or a
     * notice lost): the process callback then stops coming. */
    const uint64_t c = atomic_load_explicit(&j->cycles, memory_order_relaxed);
    const double now = mono_s();
    if (c != j->cycles_seen) {
      j->cycles_seen = c;
      j->cycle_t = now;
    } else if (now - j->cycle_t >= j->watchdog_s) {
      snprintf(j->stall_reason, sizeof j->stall_reason,
               "no process cycle from the server for %.1f s: it hung, or died without notice",
               now - j->cycle_t);
      j->stalled = 1;
      return 1;
    }
  }
  unsigned r = atomic_load(&j->rate_now);
  if (r != atomic_load(&j->rate_engine) && r > 0) {
    /* process() skips analysis while the rates differ, so the engine can
     * be rebuilt for the new rate here. */
    if (ssae_engine_set_input_rate(j->e, (double)r, err)) return -1;
    atomic_store_explicit(&j->rate_engine, r, memory_order_release);
  }
  return 0;
}

int ssae_io_jack_stop(ssae_io_jack *j) {
  if (!j) return 0;
  j->active = 0;
  atomic_store(&j->detached, 1);
  /* A callback under way finishes with the engine; later ones leave it. */
  const double t0 = mono_s();
  while (atomic_load(&j->busy)) {
    if (mono_s() - t0 >= STOP_WAIT_S) return -1;
    sleep_s(0.0005);
  }
  return 0;
}

/* Whether the thread tid of this process has ended. */
static int thread_gone(pid_t tid) {
  return syscall(SYS_tgkill, (pid_t)getpid(), tid, 0) != 0 && errno == ESRCH;
}

/* After the server has gone, libjack's notification thread ends by itself
 * once it reads the end of the server's socket. jack_client_close cancels
 * that thread asynchronously (jack2: PTHREAD_CANCEL_ASYNCHRONOUS);
 * cancelled while it handled a client's arrival or departure (the server
 * closing its other clients as it goes), it leaves libjack's synchro mutex
 * locked, and jack_client_close then waits on that mutex forever. So the
 * close waits (until deadline) for the notification thread to end: each
 * thread that ran the init callback on activation but the process thread,
 * which stays blocked waiting for the server's next cycle. */
static void wait_notify_thread_end(const ssae_io_jack *j, double deadline) {
  pthread_t rt = jack_client_thread_id(j->client);
  int n = atomic_load(&((ssae_io_jack *)j)->nthreads);
  if (n > JACK_THREADS_MAX) n = JACK_THREADS_MAX;
  for (int k = j->threads_activation; k < n; k++) {
    if (!atomic_load(&((ssae_io_jack *)j)->threads[k].set)) continue;
    if (pthread_equal(j->threads[k].self, rt)) continue;
    while (!thread_gone(j->threads[k].tid) && mono_s() < deadline) sleep_s(0.002);
  }
}

static void destroy(ssae_io_jack *j, double notify_deadline) {
  if (j->client) {
    if (atomic_load(&j->shutdown)) wait_notify_thread_end(j, notify_deadline);
    jack_client_close(j->client);
  }
  free(j->in);
  free(j->out);
  free(j->score);
  free(j->alarm);
  free(j->inbuf);
  free(j);
}

/* The clients are closed by a thread of their own, which the caller
 * leaves behind when libjack blocks: closer is freed by whichever of the
 * two is the last to need it. */
typedef struct closer {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, finished, abandoned;
  char closing[128]; /* the name of the client being closed */
  double notify_deadline;
  ssae_io_jack **js;
} closer;

/* The last closer left behind: what its thread holds stays reachable (leak
 * checkers) until the process ends. */
static closer *_Atomic left_behind;

static void closer_free(closer *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->js);
  free(c);
}

static void *closer_main(void *arg) {
  closer *c = arg;
  for (int i = 0; i < c->n; i++) {
    if (!c->js[i]) continue;
    pthread_mutex_lock(&c->mu);
    snprintf(c->closing, sizeof c->closing, "%s", c->js[i]->name);
    pthread_mutex_unlock(&c->mu);
    destroy(c->js[i], c->notify_deadline);
  }
  pthread_mutex_lock(&c->mu);
  c->finished = 1;
  const int abandoned = c->abandoned;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (abandoned) {
    closer *me = c;
    atomic_compare_exchange_strong(&left_behind, &me, NULL);
    closer_free(c);
  }
  return NULL;
}

int ssae_io_jack_close(ssae_io_jack **js, int n, double timeout_s, ssae_err *err) {
  if (!js || n <= 0) return 0;
  for (int i = 0; i < n; i++) ssae_io_jack_stop(js[i]);
  closer *c = calloc(1, sizeof *c);
  ssae_io_jack **copy = calloc((size_t)n, sizeof *copy);
  pthread_condattr_t ca;
  int ok = c && copy && pthread_condattr_init(&ca) == 0;
  if (ok) {
    ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
         pthread_cond_init(&c->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (ok && pthread_mutex_init(&c->mu, NULL) != 0) {
      pthread_cond_destroy(&c->cv);
      ok = 0;
    }
  }
  const double t0 = mono_s();
  pthread_t th;
  if (ok) {
    memcpy(copy, js, (size_t)n * sizeof *copy);
    c->js = copy;
    c->n = n;
    c->notify_deadline =
        t0 + (timeout_s / 2 < NOTIFY_END_WAIT_S ? timeout_s / 2 : NOTIFY_END_WAIT_S);
    if (pthread_create(&th, NULL, closer_main, c) != 0) {
      pthread_mutex_destroy(&c->mu);
      pthread_cond_destroy(&c->cv);
      ok = 0;
    }
  }
  if (!ok) {
    /* No thread for it: closed here, unbounded. */
    free(c);
    free(copy);
    for (int i = 0; i < n; i++)
      if (js[i]) destroy(js[i], t0 + NOTIFY_END_WAIT_S);
    return 0;
  }
  const double deadline = t0 + timeout_s;
  struct timespec dl = {(time_t)deadline, (long)((deadline - (double)(time_t)deadline) * 1e9)};
  pthread_mutex_lock(&c->mu);
  while (!c->finished) {
    if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT && !c->finished) break;
  }
  if (c->finished) {
    pthread_mutex_unlock(&c->mu);
    pthread_join(th, NULL);
    closer_free(c);
    return 0;
  }
  /* libjack blocks (on a server that does not answer, or on a lock one
   * of its cancelled threads left held): the client stays open, detached
   * from the engine, until the process ends. */
  char stuck[sizeof c->closing];
  snprintf(stuck, sizeof stuck, "%s", c->closing);
  c->abandoned = 1;
  atomic_store(&left_behind, c);
  pthread_mutex_unlock(&c->mu);
  pthread_detach(th);
  ssae_err_set(err,
               "closing the JACK client '%s' did not finish within %.0f s (libjack is blocked: "
               "the server does not answer, or it went away leaving libjack stuck); leaving "
               "the client open",
               stuck, timeout_s);
  return -1;
}

void ssae_io_jack_free(ssae_io_jack *j) {
  if (!j) return;
  ssae_io_jack_close(&j, 1, SSAE_IO_JACK_CLOSE_S, NULL);
}
