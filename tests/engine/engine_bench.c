/* Real-time engine benchmark (not a test): feeds N channels of 16 kHz noise
 * at real-time pace (one block per period, like a JACK callback) for S
 * seconds and reports drops, window-to-score latency and memory.
 *
 *   engine_bench [--channels N[,N...]] [--seconds S] [--block B]
 *                [--backend cpu|cuda|auto] [--batch B] [--model M]
 *                [--deadline-ms D] [--cpu-threads T] [--spin-ms S]
 *
 * One line per channel count: channels, windows, dropped, batches, p50, p99,
 * max latency (ms), audio-thread time per block (mean, max, ms), the mean
 * audio-thread time of the blocks that complete a frame (every channel
 * computes an FFT and emits a window then: the floor under the latency of
 * the last channel's window), the share of the period the audio thread
 * used, max RSS (MB). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ssae_engine.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct bopts {
  double seconds, deadline, spin;
  int block, cpu_threads;
  long batch;
  const char *backend;
} bopts;

/* Frames completed by the first n samples (centred frames: the first needs
 * n_fft/2 samples, then one every hop). */
static uint64_t frames_after(const ssae_model *m, uint64_t n) {
  uint64_t half = (uint64_t)m->feat.n_fft / 2, hop = (uint64_t)m->feat.hop_length;
  return n < half ? 0 : (n - half) / hop + 1;
}

static int run(const ssae_model *m, int C, const bopts *o) {
  const double seconds = o->seconds;
  const int block = o->block;
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = C;
  cfg.backend = o->backend;
  cfg.max_batch = (size_t)o->batch;
  cfg.batch_deadline_ms = o->deadline;
  cfg.cpu_threads = o->cpu_threads;
  cfg.spin_ms = o->spin;
  cfg.params.threshold = 1e30;
  ssae_err err;
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (!e) {
    fprintf(stderr, "engine: %s\n", err.msg);
    return -1;
  }
  /* Distinct noise per channel (a few seconds, looped). */
  const size_t len = 16000 * 2;
  float *buf = malloc(len * (size_t)C * sizeof(float));
  const float **ptr = malloc((size_t)C * sizeof *ptr);
  uint32_t x = 1;
  for (size_t i = 0; i < len * (size_t)C; i++) {
    x = x * 1664525u + 1013904223u;
    buf[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  const double period = (double)block / 16000.0;
  const long blocks = (long)(seconds / period);
  double t_next = now_s(), busy = 0, busy_max = 0, fbusy = 0;
  long fblocks = 0;
  size_t pos = 0;
  for (long b = 0; b < blocks; b++) {
    t_next += period;
    for (int c = 0; c < C; c++) ptr[c] = buf + (size_t)c * len + pos;
    double t0 = now_s();
    ssae_engine_process(e, ptr, (size_t)block);
    double dt = now_s() - t0;
    busy += dt;
    if (dt > busy_max) busy_max = dt;
    if (frames_after(m, (uint64_t)(b + 1) * (uint64_t)block) >
        frames_after(m, (uint64_t)b * (uint64_t)block)) {
      fbusy += dt;
      fblocks++;
    }
    pos += (size_t)block;
    if (pos + (size_t)block > len) pos = 0;
    double wait = t_next - now_s();
    if (wait > 0) {
      struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  ssae_engine_drain(e);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("%6d %9llu %8llu %8llu %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %6.1f%% %7.1f %s\n", C,
         (unsigned long long)s.windows, (unsigned long long)s.dropped,
         (unsigned long long)s.batches, s.lat_p50_ms, s.lat_p99_ms, s.lat_max_ms,
         busy / (double)blocks * 1e3, busy_max * 1e3,
         fblocks ? fbusy / (double)fblocks * 1e3 : 0.0,
         100.0 * busy / (double)blocks / period, (double)ru.ru_maxrss / 1024.0,
         s.backend);
  fflush(stdout);
  ssae_engine_free(e);
  free(buf);
  free(ptr);
  return s.dropped ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *chans = "1,16,64,128,256,384,512";
  bopts o = {10, 0, 0, 256, 0, 0, "cpu"};
  const char *model_path = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--channels")) chans = argv[i + 1];
    else if (!strcmp(argv[i], "--seconds")) o.seconds = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--block")) o.block = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--backend")) o.backend = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) o.batch = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--deadline-ms")) o.deadline = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--cpu-threads")) o.cpu_threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--spin-ms")) o.spin = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--model")) model_path = argv[i + 1];
    else {
      fprintf(stderr, "engine_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  /* This thread plays the audio thread: real-time priority above the
   * engine's worker, as JACK and PortAudio give theirs (when permitted). */
  struct sched_param sp;
  memset(&sp, 0, sizeof sp);
  sp.sched_priority = sched_get_priority_min(SCHED_FIFO) + 10;
  int rt = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
  ssae_err err;
  ssae_model *m = ssae_model_open(model_path, &err);
  if (!m) {
    fprintf(stderr, "model: %s\n", err.msg);
    return 1;
  }
  printf("# engine_bench: %g s per run at real-time pace, blocks of %d samples "
         "(16 kHz), backend %s, max batch %ld, deadline %g ms, CPU threads %d, "
         "spin %g ms (0: none), feeding thread %s\n",
         o.seconds, o.block, o.backend, o.batch ? o.batch : 256, o.deadline,
         o.cpu_threads, o.spin == 0 ? 0.5 : o.spin < 0 ? 0.0 : o.spin, rt ? "SCHED_FIFO" : "normal priority");
  printf("# chans   windows  dropped  batches  p50(ms)  p99(ms)  max(ms) "
         "blk_mean  blk_max frameblk  audio%%  rss(MB) backend\n");
  char *list = strdup(chans);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    int C = atoi(tok);
    if (C < 1) continue;
    if (run(m, C, &o) < 0) break;
  }
  free(list);
  ssae_model_free(m);
  return 0;
}
