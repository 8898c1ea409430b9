/* Real-time engine benchmark (not a test): feeds N channels of 16 kHz noise
 * at real-time pace (one block per period, like a JACK callback) for S
 * seconds and reports drops, window-to-score latency and memory.
 *
 *   engine_bench [--channels N[,N...]] [--seconds S] [--block B]
 *                [--backend cpu|cuda|auto] [--batch B] [--model M]
 *                [--deadline-ms D] [--cpu-threads T] [--spin-ms S]
 *                [--groups G] [--pin] [--nice N] [--no-in-place] [--no-warm]
 *                [--gpu-frontend] [--one-feeder] [--feeder-spin] [--dma-latency US]
 *
 * Exit status: 0, 1 when a channel count dropped windows, 3 when a run
 * could not start (its reason on stderr), 2 for a usage error.
 * --groups G: the channels in G input groups, each fed by its own thread
 * (as G sound cards or JACK clients would); the audio-thread columns are
 * then those of the busiest thread.
 * --one-feeder: with --groups G, one thread feeds every group in turn
 * through ssae_engine_process (one audio callback for every channel): with the
 * device front end the worker starts on a group's samples while the next
 * group is still being copied; latency counts from the start of the call.
 * --pin: feeding thread g runs on CPU 1 + g only, and the engine's own
 * threads (the worker, the CUDA runtime's) are made on the other cores, so
 * that the scheduler cannot put them on a feeding thread's CPU (a
 * real-time audio thread would preempt them; here they would preempt it)
 * nor on its hyperthread sibling (they would share its core's caches and
 * execution units, as an audio thread's isolated core does not).
 * --nice N: the feeding threads at nice N.
 * Both stand in for SCHED_FIFO where the system refuses it (containers
 * without a real-time budget): at normal priority the scheduler may queue
 * two feeding threads on one core while another idles, and the second waits
 * a time slice (3-25 ms) in the middle of its block, which JACK's or
 * PortAudio's real-time threads would not.
 * --no-in-place: on the GPU the worker copies the windows out of the rings
 * (ssae_engine_cfg.no_in_place), for comparison.
 * --no-warm: the worker starts cold (ssae_engine_cfg.no_warm), for
 * comparison: its first batch then takes the page faults.
 * --gpu-frontend: the device front end (ssae_engine_cfg.gpu_frontend): the
 * feeding threads only copy PCM; the worker makes every channel's frames,
 * windows and scores on the GPU (--backend cpu: its CPU path).
 * --feeder-spin: the feeding threads wait for their next period in a loop
 * reading the clock instead of sleeping (their cores never idle), to tell
 * the cost of a core waking from idle at each block from the block's work.
 * --dma-latency US: writes US to /dev/cpu_dma_latency for the run (the
 * kernel's PM QoS request: no idle state deeper than US microseconds on any
 * CPU, as tuned's latency-performance profile does); needs the right to
 * open it (root).
 *
 * One line per channel count: channels, windows, dropped, batches, p50, p99,
 * max latency (ms), audio-thread time per block (mean, max, ms), the mean
 * audio-thread time of the blocks that complete a frame (every channel
 * computes an FFT and emits a window then: the floor under the latency of
 * the last channel's window), the share of the period the audio thread
 * used, max RSS (MB). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include "ssae_engine.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct bopts {
  double seconds, deadline, spin;
  int block, cpu_threads, groups, pin, nice, no_in_place, no_warm, gpu_frontend, one_feeder;
  int feeder_spin, dma_latency; /* dma_latency < 0: not set */
  long batch;
  const char *backend;
} bopts;

/* Frames completed by the first n samples (centred frames: the first needs
 * n_fft/2 samples, then one every hop). */
static uint64_t frames_after(const ssae_model *m, uint64_t n) {
  uint64_t half = (uint64_t)m->feat.n_fft / 2, hop = (uint64_t)m->feat.hop_length;
  return n < half ? 0 : (n - half) / hop + 1;
}

/* One feeding (audio) thread: its group's channels, one block per period
 * from t0 on; its busy times. */
typedef struct feeder {
  ssae_engine *e;
  const ssae_model *m;
  const bopts *o;
  int g, rt;
  const float *buf;
  size_t len;
  double t0;
  double busy, busy_max, fbusy;
  long fblocks, blocks;
} feeder;

static void *feed(void *arg) {
  feeder *f = arg;
  if (f->rt) {
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    sp.sched_priority = sched_get_priority_min(SCHED_FIFO) + 10;
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
  }
  if (f->o->pin) {
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(ncpu > 1 ? 1 + f->g % (int)(ncpu - 1) : 0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) perror("engine_bench: --pin");
  }
  if (f->o->nice &&
      setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), f->o->nice) != 0)
    perror("engine_bench: --nice");
  const int block = f->o->block;
  int c0 = 0, nc = ssae_engine_channels(f->e);
  if (!f->o->one_feeder) ssae_engine_group_channels(f->e, f->g, &c0, &nc);
  const float **ptr = malloc((size_t)nc * sizeof *ptr);
  const double period = (double)block / 16000.0;
  f->blocks = (long)(f->o->seconds / period);
  double t_next = f->t0;
  size_t pos = 0;
  for (long b = 0; b < f->blocks; b++) {
    t_next += period;
    for (int i = 0; i < nc; i++) ptr[i] = f->buf + (size_t)(c0 + i) * f->len + pos;
    double t0 = now_s();
    if (f->o->one_feeder) ssae_engine_process(f->e, ptr, (size_t)block);
    else ssae_engine_process_group(f->e, f->g, ptr, (size_t)block);
    double dt = now_s() - t0;
    f->busy += dt;
    if (dt > f->busy_max) f->busy_max = dt;
    if (frames_after(f->m, (uint64_t)(b + 1) * (uint64_t)block) >
        frames_after(f->m, (uint64_t)b * (uint64_t)block)) {
      f->fbusy += dt;
      f->fblocks++;
    }
    pos += (size_t)block;
    if (pos + (size_t)block > f->len) pos = 0;
    double wait = t_next - now_s();
    if (f->o->feeder_spin) {
      while (now_s() < t_next) {
      }
    } else if (wait > 0) {
      struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  free(ptr);
  return NULL;
}

/* Clears from s CPU cpu and the other hardware threads of its core (as
 * the kernel lists them; only cpu itself where it does not). */
static void clear_core(cpu_set_t *s, int cpu) {
  CPU_CLR(cpu, s);
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[256]; /* "1,9" or "0-1" or "0-1,8-9" */
  const int got = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  for (char *p = line; got;) {
    const long a = strtol(p, &p, 10);
    long b = a;
    if (*p == '-') b = strtol(p + 1, &p, 10);
    for (long k = a; k <= b && k < CPU_SETSIZE; k++) CPU_CLR((int)k, s);
    if (*p++ != ',') break;
  }
}

static int run(const ssae_model *m, int C, const bopts *o, int rt) {
  const int block = o->block;
  const int G = o->groups > 1 ? (o->groups < C ? o->groups : C) : 1;
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = C;
  cfg.backend = o->backend;
  cfg.max_batch = (size_t)o->batch;
  cfg.batch_deadline_ms = o->deadline;
  cfg.cpu_threads = o->cpu_threads;
  cfg.spin_ms = o->spin;
  cfg.groups = G;
  cfg.no_in_place = o->no_in_place;
  cfg.no_warm = o->no_warm;
  cfg.gpu_frontend = o->gpu_frontend;
  cfg.params.threshold = 1e30;
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  const int feeders = o->one_feeder ? 1 : G;
  cpu_set_t was;
  const int keep_off = o->pin && ncpu > feeders + 1 &&
                       sched_getaffinity(0, sizeof was, &was) == 0;
  if (keep_off) {
    /* The engine's threads inherit this mask: every core but the feeders'. */
    cpu_set_t rest = was;
    for (int g = 0; g < feeders; g++) clear_core(&rest, 1 + g);
    if (CPU_COUNT(&rest) == 0) {
      rest = was;
      for (int g = 0; g < feeders; g++) CPU_CLR(1 + g, &rest);
    }
    if (sched_setaffinity(0, sizeof rest, &rest) != 0) perror("engine_bench: --pin");
  }
  ssae_err err;
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (keep_off) sched_setaffinity(0, sizeof was, &was);
  if (!e) {
    fprintf(stderr, "engine: %s\n", err.msg);
    return -1;
  }
  /* Distinct noise per channel (a few seconds, looped). */
  const size_t len = 16000 * 2;
  float *buf = malloc(len * (size_t)C * sizeof(float));
#ifdef MADV_HUGEPAGE
  /* In huge pages, as a capture driver's buffers are: with 4 KB pages each
   * channel's read is a TLB miss of the feeder's, not of the engine's. */
  if (getenv("BENCH_HUGE")) madvise((void *)((uintptr_t)buf & ~(uintptr_t)4095),
                                    len * (size_t)C * sizeof(float), MADV_HUGEPAGE);
#endif
  uint32_t x = 1;
  for (size_t i = 0; i < len * (size_t)C; i++) {
    x = x * 1664525u + 1013904223u;
    buf[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  const double period = (double)block / 16000.0;
  feeder *fd = calloc((size_t)G, sizeof *fd);
  pthread_t *th = calloc((size_t)G, sizeof *th);
  const double t0 = now_s();
  for (int g = 0; g < G; g++) {
    fd[g] = (feeder){.e = e, .m = m, .o = o, .g = g, .rt = rt, .buf = buf, .len = len, .t0 = t0};
    if (G == 1 || o->one_feeder) {
      feed(&fd[0]); /* this thread, as before */
      break;
    }
    else pthread_create(&th[g], NULL, feed, &fd[g]);
  }
  if (feeders > 1)
    for (int g = 0; g < G; g++) pthread_join(th[g], NULL);
  /* The busiest feeding thread's figures. */
  int w = 0;
  for (int g = 1; g < feeders; g++)
    if (fd[g].busy > fd[w].busy) w = g;
  const long blocks = fd[w].blocks, fblocks = fd[w].fblocks;
  const double busy = fd[w].busy, fbusy = fd[w].fbusy;
  double busy_max = 0;
  for (int g = 0; g < feeders; g++)
    if (fd[g].busy_max > busy_max) busy_max = fd[g].busy_max;
  free(fd);
  free(th);
  ssae_engine_drain(e);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  /* The worker's stages, ms per frame period (hop 512 at 16 kHz). */
  const double per = s.audio_s > 0 ? 1e3 * 0.032 / s.audio_s : 0;
  printf("%6d %9llu %8llu %8llu %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %6.1f%% %7.1f "
         "%5.3f/%5.3f/%5.3f %s\n",
         C, (unsigned long long)s.windows, (unsigned long long)s.dropped,
         (unsigned long long)s.batches, s.lat_p50_ms, s.lat_p99_ms, s.lat_max_ms,
         busy / (double)blocks * 1e3, busy_max * 1e3,
         fblocks ? fbusy / (double)fblocks * 1e3 : 0.0,
         100.0 * busy / (double)blocks / period, (double)ru.ru_maxrss / 1024.0,
         s.worker_take_s * per, s.worker_score_s * per, s.worker_publish_s * per, s.backend);
  fflush(stdout);
  ssae_engine_free(e);
  free(buf);
  return s.dropped ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *chans = "1,16,64,128,256,384,512";
  bopts o = {.seconds = 10, .block = 256, .groups = 1, .backend = "cpu", .dma_latency = -1};
  const char *model_path = NULL;
  for (int i = 1; i < argc; i += 2) {
    if (!strcmp(argv[i], "--pin") || !strcmp(argv[i], "--no-in-place") ||
        !strcmp(argv[i], "--no-warm") || !strcmp(argv[i], "--gpu-frontend") ||
        !strcmp(argv[i], "--one-feeder") || !strcmp(argv[i], "--feeder-spin")) {
      if (!strcmp(argv[i], "--pin")) o.pin = 1;
      else if (!strcmp(argv[i], "--feeder-spin")) o.feeder_spin = 1;
      else if (!strcmp(argv[i], "--one-feeder")) o.one_feeder = 1;
      else if (!strcmp(argv[i], "--no-warm")) o.no_warm = 1;
      else if (!strcmp(argv[i], "--gpu-frontend")) o.gpu_frontend = 1;
      else o.no_in_place = 1;
      i--; /* no value */
      continue;
    }
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      /* the comment at the top of this file */
      printf("engine_bench [--channels N[,N...]] [--seconds S] [--block B]\n"
             "             [--backend cpu|cuda|auto] [--batch B] [--model M]\n"
             "             [--deadline-ms D] [--cpu-threads T] [--spin-ms S]\n"
             "             [--groups G] [--pin] [--nice N] [--no-in-place] [--no-warm]\n"
             "             [--gpu-frontend] [--one-feeder] [--feeder-spin] [--dma-latency US]\n"
             "exit 0, 1 when a channel count dropped windows, 3 when a run could not start\n"
             "(see tools/bench/engine_bench.c and BENCHMARKS.md)\n");
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "engine_bench: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--channels")) chans = argv[i + 1];
    else if (!strcmp(argv[i], "--seconds")) o.seconds = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--block")) o.block = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--backend")) o.backend = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) o.batch = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--deadline-ms")) o.deadline = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--cpu-threads")) o.cpu_threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--spin-ms")) o.spin = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--groups")) o.groups = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--nice")) o.nice = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dma-latency")) o.dma_latency = atoi(argv[i + 1]);
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
  /* The PM QoS request holds while the file stays open (closed at exit). */
  if (o.dma_latency >= 0) {
    const int fd = open("/dev/cpu_dma_latency", O_WRONLY);
    const int32_t us = o.dma_latency;
    if (fd < 0 || write(fd, &us, sizeof us) != (ssize_t)sizeof us) {
      fprintf(stderr, "engine_bench: --dma-latency: /dev/cpu_dma_latency: %s\n", strerror(errno));
      return 1;
    }
  }
  ssae_err err;
  ssae_model *m = ssae_model_open(model_path, &err);
  if (!m) {
    fprintf(stderr, "model: %s\n", err.msg);
    return 1;
  }
  printf("# engine_bench: %g s per run at real-time pace, blocks of %d samples "
         "(16 kHz), backend %s, max batch %ld, deadline %g ms, CPU threads %d, "
         "spin %g ms (0: none), %d feeding thread(s) %s%s, nice %d%s%s%s%s%s\n",
         o.seconds, o.block, o.backend, o.batch ? o.batch : 256, o.deadline,
         o.cpu_threads, o.spin == 0 ? 0.5 : o.spin < 0 ? 0.0 : o.spin,
         o.groups > 1 && !o.one_feeder ? o.groups : 1,
         rt ? "SCHED_FIFO" : "normal priority", o.pin ? ", pinned" : "", o.nice,
         o.no_in_place ? ", windows copied out of the rings" : "",
         o.no_warm ? ", worker not warmed" : "",
         o.gpu_frontend ? ", device front end" : "",
         o.one_feeder && o.groups > 1 ? ", one thread feeding every group" : "",
         o.feeder_spin ? ", feeders spin between blocks" : "");
  if (o.dma_latency >= 0) printf("# /dev/cpu_dma_latency: %d us\n", o.dma_latency);
  printf("# chans   windows  dropped  batches  p50(ms)  p99(ms)  max(ms) "
         "blk_mean  blk_max frameblk  audio%%  rss(MB) take/score/publish backend\n");
  /* exit 1 when a channel count dropped windows, 3 when a run could not
   * start (the rest of the list is then skipped): a script sweeping the
   * counts sees which */
  int worst = 0;
  char *list = strdup(chans);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    int C = atoi(tok);
    if (C < 1) continue;
    const int r = run(m, C, &o, rt);
    if (r < 0) {
      worst = 3;
      break;
    }
    if (r > worst) worst = r;
  }
  free(list);
  ssae_model_free(m);
  return worst;
}
