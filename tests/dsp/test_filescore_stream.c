/* Offline scoring reads files in blocks (src/eval/ssae_filescore.c):
 * - a 1-hour 48 kHz mono WAV (sparse, so the test writes 44 bytes) is
 *   scored with at most 100 MB resident (the whole-file loader held 900 MB
 *   of samples);
 * - for files at 48 kHz and 16 kHz, mono and mixed, of lengths around the
 *   batch boundaries, ssae_file_score (with and without frames) and
 *   ssae_file_frames give bit-identical frames, window scores and file
 *   score to the whole-file path: ssae_audio_load, ssae_logmel_compute and
 *   the backend on batch_max windows at a time, and no warning;
 * - a file shorter than a window and a file with a NaN give their errors;
 *   a cut data chunk is scored with the reader's warning. */
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_filescore.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "../ssae_test.h"
#include "../ssae_test_wav.h"

static char dir[] = "/tmp/ssae_test_fscore_XXXXXX";

/* A 16-bit mono WAV header for `frames` frames, then a hole of zeros. */
static int sparse_wav(const char *path, uint32_t rate, uint32_t frames) {
  unsigned char h[44];
  test_wav_header(h, rate, 1, 36 + 2 * frames, 2 * frames);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  int ok = write(fd, h, 44) == 44 && ftruncate(fd, 44 + 2 * (off_t)frames) == 0;
  close(fd);
  return ok ? 0 : -1;
}

static long rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

static void test_hour(const ssae_model *m, ssae_backend *b) {
  char p[256];
  snprintf(p, sizeof p, "%s/hour.wav", dir);
  const uint32_t frames = 48000u * 3600u;
  if (sparse_wav(p, 48000, frames)) {
    CHECK(0, "cannot write %s", p);
    return;
  }
  ssae_err err = {{0}};
  ssae_file_scores fs;
  int rc = ssae_file_score(m, b, 256, p, 0, 0, &fs, &err);
  long mb = rss_mb();
  CHECK(rc == 0, "1 hour: %s", err.msg);
  if (!rc) {
    CHECK(fabs(fs.seconds - 3600.0) < 1e-6 && fs.n_frames == 1 + 16000u * 3600u / 512 &&
              fs.n_windows == fs.n_frames - 4 && !fs.frames,
          "1 hour: %.3f s, %zu frames, %zu windows", fs.seconds, fs.n_frames, fs.n_windows);
    ssae_file_scores_release(&fs);
  }
  CHECK(mb <= 100, "1 hour at 48 kHz scored with %ld MB resident (at most 100)", mb);
  printf("1-hour 48 kHz file: peak resident %ld MB\n", mb);
  unlink(p);
}

static void test_identity(const ssae_model *m, ssae_backend *b) {
  static const int rates[] = {48000, 16000};
  static const size_t lengths[] = {3000, 16000 * 3 + 77, 160000};
  static const size_t batches[] = {7, 256};
  char p[256];
  snprintf(p, sizeof p, "%s/x.wav", dir);
  ssae_err err = {{0}};
  const size_t M = (size_t)m->d.n_mels, F = (size_t)m->d.frames;
  for (size_t ri = 0; ri < 2; ri++)
    for (size_t li = 0; li < 3; li++) {
      const size_t n = lengths[li] * (size_t)rates[ri] / 16000;
      float *x = malloc(sizeof *x * n * 2);
      for (size_t i = 0; i < 2 * n; i++)
        x[i] = (float)(0.3 * (urand() - 0.5) + 0.2 * sin(0.05 * (double)i));
      CHECK(!test_write_sf(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, rates[ri], 2, x, n), "write");
      free(x);
      for (int channel = SSAE_CHANNEL_MIX; channel <= 1; channel++) {
        /* The whole-file path. */
        ssae_audio a;
        float *ref_frames = NULL;
        size_t ref_nf = 0;
        if (ssae_audio_load(p, channel, m->feat.sample_rate, &a, &err) ||
            ssae_logmel_compute(&m->feat, a.data, a.frames, &ref_frames, &ref_nf, &err)) {
          CHECK(0, "reference: %s", err.msg);
          continue;
        }
        double seconds = (double)a.frames / a.rate;
        ssae_audio_release(&a);
        size_t nw = ref_nf - F + 1;
        ssae_file_scores ff;
        CHECK(!ssae_file_frames(m, p, channel, &ff, &err) && ff.n_frames == ref_nf &&
                  !memcmp(ff.frames, ref_frames, sizeof *ref_frames * ref_nf * M) &&
                  ff.n_windows == nw && ff.seconds == seconds && ff.file_rate == rates[ri] &&
                  ff.file_channels == 2 && !ff.warning.msg[0],
              "%d Hz %zu samples channel %d: ssae_file_frames differs (%s)", rates[ri], n,
              channel, err.msg);
        ssae_file_scores_release(&ff);
        for (size_t bi = 0; bi < 2; bi++) {
          const size_t bm = batches[bi];
          float *ref = malloc(sizeof *ref * nw);
          for (size_t i = 0; i < nw; i += bm) {
            size_t k = nw - i < bm ? nw - i : bm;
            if (ssae_backend_run_frames(b, ref_frames + i * M, k + F - 1, ref + i, &err))
              CHECK(0, "backend: %s", err.msg);
          }
          double sum = 0;
          for (size_t i = 0; i < nw; i++) sum += ref[i];
          for (int keep = 0; keep <= 1; keep++) {
            ssae_file_scores fs;
            int rc = ssae_file_score(m, b, bm, p, channel, keep, &fs, &err);
            CHECK(rc == 0 && fs.n_windows == nw && fs.n_frames == ref_nf &&
                      !memcmp(fs.scores, ref, sizeof *ref * nw) &&
                      fs.file_score == sum / (double)nw &&
                      fs.seconds == seconds && fs.n_mels == (int)M &&
                      (keep ? fs.frames && !memcmp(fs.frames, ref_frames,
                                                   sizeof *ref_frames * ref_nf * M)
                            : !fs.frames),
                  "%d Hz %zu samples channel %d batch %zu keep %d: differs from the whole-file "
                  "path (%s)", rates[ri], n, channel, bm, keep, rc ? err.msg : "");
            if (!rc) ssae_file_scores_release(&fs);
          }
          free(ref);
        }
        free(ref_frames);
      }
    }
  /* Shorter than a window: 3 frames. */
  float z[1100] = {0};
  CHECK(!test_write_sf(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, z, 1100), "write");
  ssae_file_scores fs;
  CHECK(ssae_file_score(m, b, 256, p, 0, 0, &fs, &err) == -1 && strstr(err.msg, "too short: 3 "
        "frames"), "short file: '%s'", err.msg);
  CHECK(ssae_file_frames(m, p, 0, &fs, &err) == -1 && strstr(err.msg, "too short"),
        "short file (frames): '%s'", err.msg);
  z[500] = NAN;
  CHECK(!test_write_sf(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, z, 1100), "write");
  CHECK(ssae_file_score(m, b, 256, p, 0, 0, &fs, &err) == -1 && strstr(err.msg, p) &&
            strstr(err.msg, "NaN"),
        "NaN file: '%s'", err.msg);
  /* A cut data chunk: scored, with the reader's warning. */
  CHECK(!sparse_wav(p, 16000, 32000) && truncate(p, 44 + 2 * 16000) == 0, "cut file");
  for (int keep = 0; keep <= 1; keep++) {
    int rc = ssae_file_score(m, b, 256, p, 0, keep, &fs, &err);
    CHECK(rc == 0 && fs.seconds == 1.0 && strstr(fs.warning.msg, p) &&
              strstr(fs.warning.msg, "shorter than its header"),
          "cut file (keep %d): rc %d, warning '%s' (%s)", keep, rc, rc ? "" : fs.warning.msg,
          err.msg);
    if (!rc) ssae_file_scores_release(&fs);
  }
  CHECK(ssae_file_score(m, b, 256, p, SSAE_CHANNEL_ALL, 0, &fs, &err) == -1 &&
            strstr(err.msg, "one stream"),
        "channel all: '%s'", err.msg);
  unlink(p);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_default(&err);
  ssae_backend *b = m ? ssae_backend_new_threads(m, "cpu", 256, 1, &err) : NULL;
  if (!b) {
    fprintf(stderr, "model/backend: %s\n", err.msg);
    return 1;
  }
  test_hour(m, b);
  test_identity(m, b);
  ssae_backend_free(b);
  ssae_model_free(m);
  rmdir(dir);
  return test_done("ok");
}
