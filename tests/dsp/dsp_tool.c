/* Test helper: lets the Python oracle tests feed ssae's front end.
 *   dsp_tool logmel IN.npy OUT.npy [key=value ...]   log-mel of a float32 signal
 *   dsp_tool load FILE OUT.npy RATE CHANNEL          samples as ssae_audio_load gives them
 *   dsp_tool bench REPEAT FILE...                    CPU time of log-mel on loaded files
 * Feature keys are the model-file metadata keys (ssae_feat_cfg_set). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_audio.h"
#include "ssae_logmel.h"
#include "ssae_npy.h"

static int logmel(int argc, char **argv) {
  ssae_err err = {{0}};
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  for (int i = 4; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) {
      fprintf(stderr, "dsp_tool: '%s' is not key=value\n", argv[i]);
      return 2;
    }
    *eq = '\0';
    if (ssae_feat_cfg_set(&cfg, argv[i], eq + 1, &err) != 1) {
      fprintf(stderr, "dsp_tool: %s\n", err.msg[0] ? err.msg : "unknown key");
      return 2;
    }
  }
  float *x, *f;
  size_t shape[8], nf;
  int nd;
  if (ssae_npy_read_f32(argv[2], &x, shape, &nd, &err) ||
      ssae_logmel_compute(&cfg, x, nd ? shape[0] : 0, &f, &nf, &err)) {
    fprintf(stderr, "dsp_tool: %s\n", err.msg);
    return 1;
  }
  size_t oshape[2] = {nf, (size_t)cfg.n_mels};
  int rc = ssae_npy_write_f32(argv[3], f, oshape, 2, &err);
  if (rc) fprintf(stderr, "dsp_tool: %s\n", err.msg);
  free(x);
  free(f);
  return rc ? 1 : 0;
}

static int load(char **argv) {
  ssae_err err = {{0}};
  ssae_audio a;
  int ch;
  if (ssae_audio_parse_channel(argv[5], &ch, &err) ||
      ssae_audio_load(argv[2], ch, atoi(argv[4]), &a, &err)) {
    fprintf(stderr, "dsp_tool: %s\n", err.msg);
    return 1;
  }
  size_t shape[2] = {(size_t)a.channels, a.frames};
  int rc = ssae_npy_write_f32(argv[3], a.data, shape, 2, &err);
  if (rc) fprintf(stderr, "dsp_tool: %s\n", err.msg);
  ssae_audio_release(&a);
  return rc ? 1 : 0;
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints "AUDIO_SECONDS CPU_SECONDS_REUSED CPU_SECONDS_COMPUTE" of the
 * log-mel stage alone (files decoded first, outside the timing):
 * REUSED feeds every clip through one front end (process + flush), as a
 * program that turns many files into features does, and as the torchaudio
 * side reuses its MelSpectrogram; COMPUTE calls ssae_logmel_compute per clip
 * (a new front end, its set-up and its fresh memory each time). */
static int bench(int argc, char **argv) {
  ssae_err err = {{0}};
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  int repeat = atoi(argv[2]), n = argc - 3;
  ssae_audio *a = calloc((size_t)n, sizeof *a);
  double audio = 0;
  size_t longest = 0;
  for (int i = 0; i < n; i++) {
    if (ssae_audio_load(argv[3 + i], 0, cfg.sample_rate, &a[i], &err)) {
      fprintf(stderr, "dsp_tool: %s\n", err.msg);
      return 1;
    }
    if (a[i].frames > longest) longest = a[i].frames;
  }
  ssae_logmel *lm = ssae_logmel_new(&cfg, &err);
  float *frames = lm ? malloc(sizeof *frames * (ssae_logmel_max_frames(lm, longest) + 2) *
                              (size_t)cfg.n_mels)
                     : NULL;
  if (!frames) {
    fprintf(stderr, "dsp_tool: %s\n", lm ? "out of memory" : err.msg);
    return 1;
  }
  double t0 = cpu_now();
  for (int r = 0; r < repeat; r++)
    for (int i = 0; i < n; i++) {
      size_t got = ssae_logmel_process(lm, a[i].data, a[i].frames, frames);
      ssae_logmel_flush(lm, frames + got * (size_t)cfg.n_mels);
      audio += (double)a[i].frames / a[i].rate;
    }
  double t1 = cpu_now();
  for (int r = 0; r < repeat; r++)
    for (int i = 0; i < n; i++) {
      float *f;
      size_t nf;
      if (ssae_logmel_compute(&cfg, a[i].data, a[i].frames, &f, &nf, &err)) {
        fprintf(stderr, "dsp_tool: %s\n", err.msg);
        return 1;
      }
      free(f);
    }
  double t2 = cpu_now();
  printf("%.6f %.6f %.6f\n", audio, t1 - t0, t2 - t1);
  ssae_logmel_free(lm);
  free(frames);
  for (int i = 0; i < n; i++) ssae_audio_release(&a[i]);
  free(a);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "bench")) return bench(argc, argv);
  if (argc >= 4 && !strcmp(argv[1], "logmel")) return logmel(argc, argv);
  if (argc == 6 && !strcmp(argv[1], "load")) return load(argv);
  fprintf(stderr, "usage: dsp_tool logmel IN.npy OUT.npy [key=value...]\n"
                  "       dsp_tool load FILE OUT.npy RATE CHANNEL\n"
                  "       dsp_tool bench REPEAT FILE...\n");
  return 2;
}
