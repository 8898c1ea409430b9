/* The audio reader against files made to hurt it, and its streaming form.
 *
 * - Streaming: the blocks of ssae_audio_read (any block size) joined are
 *   bit-identical to ssae_audio_load, which is bit-identical to the loader
 *   it replaced (the whole file resampled by soxr_oneshot, SOXR_HQ, to
 *   round(n * to / from) frames), for down- and up-sampling, mono, mix and
 *   every channel, lengths around the reader's block size.
 * - Rates: 1 Hz (a 200 KB WAV that the old reader resampled to 12 GB) and
 *   402 MHz are refused naming the file and the rate; 999 Hz refused,
 *   1 kHz and 768 kHz read.
 * - A 52-byte FLAC whose STREAMINFO claims ~1.06 billion frames: no
 *   allocation of ours above 16 MB (the old reader asked for 4 GiB).
 * - A WAV whose data chunk claims twice the bytes present: read with a
 *   warning naming the file; an error with strict.
 * - NaN and Inf in a float WAV: an error naming the file and the first bad
 *   sample's time; read with allow_nonfinite.
 * Built with -Wl,--wrap=malloc to see the largest allocation. */
#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "../ssae_test.h"
#include "../ssae_test_wav.h"

static size_t largest_alloc;
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_malloc(size_t n) {
  if (n > largest_alloc) largest_alloc = n;
  return __real_malloc(n);
}

static char dir[] = "/tmp/ssae_test_hostile_XXXXXX";

/* A 16-bit PCM WAV written byte by byte: rate and the data chunk's size
 * are whatever the test says, not what the samples need. */
static int write_raw_wav(const char *path, uint32_t rate, uint16_t ch, size_t frames,
                         uint32_t data_claim) {
  size_t bytes = frames * ch * 2;
  unsigned char *b = calloc(1, 44 + bytes);
  if (!b) return -1;
  test_wav_header(b, rate, ch, (uint32_t)(36 + bytes), data_claim);
  for (size_t i = 0; i < frames * ch; i++)
    test_le16(b + 44 + 2 * i, (uint16_t)(int16_t)lrint(8000 * sin(0.01 * (double)i)));
  FILE *f = fopen(path, "wb");
  size_t w = f ? fwrite(b, 1, 44 + bytes, f) : 0;
  if (f) fclose(f);
  free(b);
  return w == 44 + bytes ? 0 : -1;
}

/* The loader before streaming: the whole stream resampled at once. */
static float *oneshot(const float *x, size_t n, int from, int to, size_t *out_n) {
  size_t olen = (size_t)((double)n * to / from + 0.5);
  if (!olen) olen = 1;
  float *y = malloc(sizeof *y * olen);
  soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  size_t done = 0;
  if (soxr_oneshot(from, to, 1, x, n, NULL, y, olen, &done, NULL, &q, NULL)) {
    free(y);
    return NULL;
  }
  *out_n = done;
  return y;
}

static void test_streaming_identity(void) {
  static const int rates[] = {48000, 44100, 22050, 8000};
  static const size_t lengths[] = {100, 4095, 4097, 50000, 123457};
  char p[256];
  ssae_err err = {{0}};
  for (size_t ri = 0; ri < sizeof rates / sizeof *rates; ri++)
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
      const int rate = rates[ri], ch = 3;
      const size_t n = lengths[li];
      float *x = malloc(sizeof *x * n * ch);
      for (size_t i = 0; i < n * ch; i++)
        x[i] = (float)(0.5 * sin(0.001 * (double)(i * (i % 7 + 1))));
      snprintf(p, sizeof p, "%s/s.wav", dir);
      if (test_write_sf(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, rate, ch, x, n)) {
        CHECK(0, "cannot write %s", p);
        free(x);
        continue;
      }
      free(x);
      ssae_audio native;
      if (ssae_audio_load(p, SSAE_CHANNEL_ALL, 0, &native, &err)) {
        CHECK(0, "native: %s", err.msg);
        continue;
      }
      for (int sel = SSAE_CHANNEL_ALL; sel < ch; sel++) {
        ssae_audio a;
        if (ssae_audio_load(p, sel, 16000, &a, &err)) {
          CHECK(0, "%d Hz, %zu frames, channel %d: %s", rate, n, sel, err.msg);
          continue;
        }
        /* Reference: the old loader's streams, resampled at once. */
        int streams = sel == SSAE_CHANNEL_ALL ? ch : 1;
        for (int c = 0; c < streams; c++) {
          float *src = malloc(sizeof *src * n);
          for (size_t i = 0; i < n; i++) {
            if (sel == SSAE_CHANNEL_MIX) {
              double s = 0;
              for (int k = 0; k < ch; k++) s += native.data[(size_t)k * n + i];
              src[i] = (float)(s / ch);
            } else {
              src[i] = native.data[(size_t)(sel >= 0 ? sel : c) * n + i];
            }
          }
          size_t rn = 0;
          float *ref = oneshot(src, n, rate, 16000, &rn);
          CHECK(ref && rn == a.frames &&
                    !memcmp(ref, a.data + (size_t)c * a.frames, rn * sizeof *ref),
                "%d Hz, %zu frames, channel %d stream %d: %zu frames, oneshot %zu, or samples "
                "differ", rate, n, sel, c, a.frames, rn);
          free(ref);
          free(src);
        }
        /* Streaming in odd block sizes gives the same frames. */
        static const size_t blocks[] = {1, 7, 1000, 100000};
        for (size_t bi = 0; bi < sizeof blocks / sizeof *blocks; bi++) {
          if (blocks[bi] == 1 && n > 5000) continue;
          ssae_audio_stream *s = ssae_audio_open(p, sel, 16000, NULL, &err);
          if (!s) {
            CHECK(0, "open: %s", err.msg);
            continue;
          }
          const size_t b = blocks[bi];
          float *buf = malloc(sizeof *buf * b * (size_t)streams);
          size_t at = 0;
          int same = 1;
          long long got;
          while ((got = ssae_audio_read(s, buf, b, &err)) > 0) {
            for (int c = 0; c < streams; c++)
              if (at + (size_t)got > a.frames ||
                  memcmp(buf + (size_t)c * b, a.data + (size_t)c * a.frames + at,
                         (size_t)got * sizeof *buf))
                same = 0;
            at += (size_t)got;
          }
          CHECK(got == 0 && same && at == a.frames,
                "%d Hz, %zu frames, channel %d, blocks of %zu: %zu frames of %zu, same %d (%s)",
                rate, n, sel, b, at, a.frames, same, got < 0 ? err.msg : "");
          CHECK(ssae_audio_read(s, buf, b, &err) == 0, "read after the end");
          free(buf);
          ssae_audio_close(s);
        }
        ssae_audio_release(&a);
      }
      ssae_audio_release(&native);
      unlink(p);
    }
}

static void test_rates(void) {
  char p[256];
  ssae_err err = {{0}};
  ssae_audio a;
  snprintf(p, sizeof p, "%s/one_hz.wav", dir);
  /* 200 KB at 1 Hz: 100000 frames, which the old reader resampled to 1.6
   * billion at 16 kHz. */
  CHECK(!write_raw_wav(p, 1, 1, 100000, 200000), "write");
  largest_alloc = 0;
  CHECK(ssae_audio_load(p, 0, 16000, &a, &err) == -1 && strstr(err.msg, p) &&
            strstr(err.msg, "sample rate 1 Hz"),
        "1 Hz: '%s'", err.msg);
  CHECK(largest_alloc < (16u << 20), "1 Hz: an allocation of %zu bytes", largest_alloc);
  snprintf(p, sizeof p, "%s/mhz.wav", dir);
  CHECK(!write_raw_wav(p, 402000000, 1, 1000, 2000), "write");
  CHECK(ssae_audio_load(p, 0, 16000, &a, &err) == -1 && strstr(err.msg, p) &&
            strstr(err.msg, "402000000 Hz"),
        "402 MHz: '%s'", err.msg);
  CHECK(!ssae_audio_open(p, 0, 16000, NULL, &err) && strstr(err.msg, "402000000"),
        "402 MHz stream: '%s'", err.msg);
  snprintf(p, sizeof p, "%s/r.wav", dir);
  CHECK(!write_raw_wav(p, 999, 1, 1000, 2000), "write");
  CHECK(ssae_audio_load(p, 0, 0, &a, &err) == -1 && strstr(err.msg, "999 Hz"), "999 Hz: '%s'",
        err.msg);
  static const uint32_t ok[] = {SSAE_AUDIO_RATE_MIN, SSAE_AUDIO_RATE_MAX};
  for (int i = 0; i < 2; i++) {
    CHECK(!write_raw_wav(p, ok[i], 1, 20000, 40000), "write");
    int rc = ssae_audio_load(p, 0, 16000, &a, &err);
    CHECK(rc == 0 && a.file_rate == (int)ok[i] && a.rate == 16000, "%u Hz: %s", ok[i],
          rc ? err.msg : "");
    if (!rc) ssae_audio_release(&a);
  }
  unlink(p);
  snprintf(p, sizeof p, "%s/one_hz.wav", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/mhz.wav", dir);
  unlink(p);
}

static void test_huge_flac(void) {
  /* fLaC, a last-block STREAMINFO (34 bytes) for 16 kHz mono 16-bit with
   * 2^30 - 1 samples (~1.07e9), then 10 bytes that are no frame. */
  unsigned char b[52] = {'f', 'L', 'a', 'C', 0x80, 0, 0, 34};
  unsigned char *si = b + 8;
  si[0] = 0x10; /* min block 4096 */
  si[2] = 0x10; /* max block 4096 */
  /* sample rate (20 bits) 16000, channels-1 (3 bits) 0, bps-1 (5 bits) 15,
   * total samples (36 bits) */
  const uint64_t rate = 16000, total = (1ull << 30) - 1;
  uint64_t v = rate << 44 | 0ull << 41 | 15ull << 36 | total;
  for (int i = 0; i < 8; i++) si[10 + i] = (unsigned char)(v >> (56 - 8 * i));
  memset(b + 42, 0xA5, 10);
  char p[256];
  snprintf(p, sizeof p, "%s/huge.flac", dir);
  FILE *f = fopen(p, "wb");
  if (f) {
    fwrite(b, 1, sizeof b, f);
    fclose(f);
  }
  ssae_err err = {{0}};
  ssae_audio a;
  largest_alloc = 0;
  int rc = ssae_audio_load(p, 0, 16000, &a, &err);
  CHECK(largest_alloc < (16u << 20), "52-byte FLAC: an allocation of %zu bytes", largest_alloc);
  CHECK(rc == -1 ? strstr(err.msg, p) != NULL : a.frames < 100000,
        "52-byte FLAC: rc %d, '%s'", rc, err.msg);
  if (!rc) ssae_audio_release(&a);
  unlink(p);
}

static void test_cut_data_chunk(void) {
  char p[256];
  snprintf(p, sizeof p, "%s/cut.wav", dir);
  const size_t frames = 16000;
  CHECK(!write_raw_wav(p, 16000, 1, frames, (uint32_t)(4 * frames)), "write");
  ssae_err err = {{0}};
  ssae_audio a;
  int rc = ssae_audio_load(p, 0, 16000, &a, &err);
  CHECK(rc == 0 && a.frames == frames, "cut WAV: rc %d frames %zu (%s)", rc, rc ? 0 : a.frames,
        err.msg);
  if (!rc) {
    CHECK(strstr(a.warning.msg, p) && strstr(a.warning.msg, "shorter than its header"),
          "cut WAV warning: '%s'", a.warning.msg);
    ssae_audio_release(&a);
  }
  ssae_audio_opts strict = {.strict = 1};
  CHECK(ssae_audio_load_opts(p, 0, 16000, &strict, &a, &err) == -1 && strstr(err.msg, p) &&
            strstr(err.msg, "shorter than its header"),
        "cut WAV strict: '%s'", err.msg);
  ssae_audio_stream *s = ssae_audio_open(p, 0, 0, NULL, &err);
  CHECK(s && strstr(ssae_audio_stream_warning(s), p), "stream warning");
  ssae_audio_close(s);
  /* An intact file has no warning. */
  CHECK(!write_raw_wav(p, 16000, 1, frames, (uint32_t)(2 * frames)), "write");
  rc = ssae_audio_load_opts(p, 0, 16000, &strict, &a, &err);
  CHECK(rc == 0 && !a.warning.msg[0], "intact WAV: rc %d '%s' '%s'", rc, err.msg,
        rc ? "" : a.warning.msg);
  if (!rc) ssae_audio_release(&a);
  unlink(p);
}

static void test_nonfinite(void) {
  char p[256];
  snprintf(p, sizeof p, "%s/nan.wav", dir);
  const size_t n = 40000;
  float *x = calloc(n, sizeof *x);
  x[24000] = NAN; /* 1.5 s at 16 kHz */
  x[30000] = INFINITY;
  CHECK(!test_write_sf(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, x, n), "write");
  ssae_err err = {{0}};
  ssae_audio a;
  CHECK(ssae_audio_load(p, 0, 16000, &a, &err) == -1 && strstr(err.msg, p) &&
            strstr(err.msg, "1.500000 s") && strstr(err.msg, "NaN"),
        "NaN WAV: '%s'", err.msg);
  ssae_audio_opts allow = {.allow_nonfinite = 1};
  int rc = ssae_audio_load_opts(p, 0, 0, &allow, &a, &err);
  CHECK(rc == 0 && a.frames == n && ssae_audio_find_nonfinite(a.data, a.frames) == 24000,
        "allow_nonfinite: rc %d (%s)", rc, err.msg);
  if (!rc) ssae_audio_release(&a);
  /* -Inf first, in the second channel of a stereo file. */
  float *st = calloc(2 * n, sizeof *st);
  st[2 * 8000 + 1] = -INFINITY;
  CHECK(!test_write_sf(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 2, st, n), "write");
  CHECK(ssae_audio_load(p, 0, 16000, &a, &err) == -1 && strstr(err.msg, "0.500000 s") &&
            strstr(err.msg, "channel 1") && strstr(err.msg, "-Inf"),
        "-Inf WAV: '%s'", err.msg);
  free(st);
  free(x);
  const float ok[3] = {0, 1, -1}, bad[3] = {0, 1, NAN};
  CHECK(ssae_audio_find_nonfinite(ok, 3) == 3 && ssae_audio_find_nonfinite(bad, 3) == 2 &&
            ssae_audio_find_nonfinite(ok, 0) == 0,
        "find_nonfinite");
  unlink(p);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  test_streaming_identity();
  test_rates();
  test_huge_flac();
  test_cut_data_chunk();
  test_nonfinite();
  rmdir(dir);
  return test_done("ok");
}
