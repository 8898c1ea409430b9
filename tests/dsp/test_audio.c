/* Audio input: an 8-channel WAVE_FORMAT_EXTENSIBLE file (16-bit, 48 kHz)
 * with a different sine in each channel. Channel selection picks the right
 * sine, the mix-down is the mean of the channels, and after resampling to
 * 16 kHz each sine lands in its mel band at the level of the same sine
 * generated at 16 kHz. Mono 16-bit WAV, FLAC and AIFF files longer than the
 * reader's 64 KiB buffer read back exactly (as floats and as they are),
 * OGG/Vorbis to its sine's band and level. Also: 16-bit samples read as
 * k/32768 (and as they are, ssae_audio_read_i16), bad channel index and
 * zero-length audio give clear errors. */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "ssae_logmel.h"
#include "../ssae_test.h"
#include "../ssae_test_wav.h"

#define CH 8
static const double freqs[CH] = {250, 500, 1000, 1500, 2500, 3500, 5000, 7000};
static const double amp = 0.25;

static int write_wavex(const char *path, int rate, size_t frames) {
  short *buf = malloc(sizeof *buf * frames * CH);
  if (!buf) return -1;
  for (size_t i = 0; i < frames; i++)
    for (int c = 0; c < CH; c++)
      buf[i * CH + (size_t)c] =
          (short)lrint(32768 * amp * sin(2 * M_PI * freqs[c] * (double)i / rate));
  int rc = test_write_sf_short(path, SF_FORMAT_WAVEX | SF_FORMAT_PCM_16, rate, CH, buf, frames);
  free(buf);
  return rc;
}

/* A mono 16-bit sine at 1 kHz, amplitude amp. */
static short mono_sample(size_t i, int rate) {
  return (short)lrint(32768 * amp * sin(2 * M_PI * 1000.0 * (double)i / rate));
}

static int write_mono(const char *path, int format, int rate, size_t frames) {
  short *buf = malloc(sizeof *buf * frames);
  if (!buf) return -1;
  for (size_t i = 0; i < frames; i++) buf[i] = mono_sample(i, rate);
  int rc = test_write_sf_short(path, format, rate, 1, buf, frames);
  free(buf);
  return rc;
}

/* Mean log-mel frame over the middle of the signal (away from the edges
 * and the resampler's start-up). */
static void mean_frame(const float *x, size_t n, float *out) {
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  ssae_err err = {{0}};
  float *f;
  size_t nf;
  if (ssae_logmel_compute(&cfg, x, n, &f, &nf, &err)) {
    CHECK(0, "logmel: %s", err.msg);
    return;
  }
  for (int m = 0; m < 64; m++) {
    double s = 0;
    for (size_t t = 4; t + 4 < nf; t++) s += f[t * 64 + (size_t)m];
    out[m] = (float)(s / (double)(nf - 8));
  }
  free(f);
}

static int argmax(const float *v) {
  int b = 0;
  for (int m = 1; m < 64; m++)
    if (v[m] > v[b]) b = m;
  return b;
}

int main(void) {
  char dir[] = "/tmp/ssae_test_audio_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[256], empty[256], zero[256];
  snprintf(path, sizeof path, "%s/eight.wav", dir);
  snprintf(empty, sizeof empty, "%s/empty.wav", dir);
  snprintf(zero, sizeof zero, "%s/zero.wav", dir);
  const size_t frames48 = 48000 * 2;
  CHECK(!write_wavex(path, 48000, frames48), "cannot write %s", path);
  CHECK(!write_wavex(zero, 48000, 0), "cannot write %s", zero);
  FILE *e = fopen(empty, "wb");
  if (e) fclose(e);
  ssae_err err = {{0}};
  ssae_audio a, all, mix;

  /* Native rate: exact 16-bit values, channel order. */
  CHECK(!ssae_audio_load(path, SSAE_CHANNEL_ALL, 0, &all, &err), "load all: %s", err.msg);
  CHECK(all.channels == CH && all.file_channels == CH && all.frames == frames48 &&
            all.rate == 48000 && all.file_rate == 48000,
        "load all: %d channels, %zu frames, %d Hz", all.channels, all.frames, all.rate);
  for (int c = 0; c < CH && all.data; c++) {
    size_t i = 123 + (size_t)c;
    float want =
        (float)lrint(32768 * amp * sin(2 * M_PI * freqs[c] * (double)i / 48000)) / 32768.0f;
    CHECK(all.data[(size_t)c * all.frames + i] == want, "channel %d sample %zu: %g, want %g", c, i,
          all.data[(size_t)c * all.frames + i], want);
  }
  CHECK(!ssae_audio_load(path, SSAE_CHANNEL_MIX, 0, &mix, &err), "load mix: %s", err.msg);
  double worst = 0;
  for (size_t i = 0; i < mix.frames && all.data; i++) {
    double s = 0;
    for (int c = 0; c < CH; c++) s += all.data[(size_t)c * all.frames + i];
    double d = fabs(mix.data[i] - s / CH);
    if (d > worst) worst = d;
  }
  CHECK(mix.channels == 1 && worst < 1e-7, "mix-down is not the channel mean (off by %g)", worst);
  ssae_audio_release(&mix);
  for (int c = 0; c < CH; c++) {
    ssae_audio one;
    CHECK(!ssae_audio_load(path, c, 0, &one, &err), "load channel %d: %s", c, err.msg);
    CHECK(one.channels == 1 && one.frames == all.frames &&
              !memcmp(one.data, all.data + (size_t)c * all.frames, sizeof *one.data * one.frames),
          "channel %d differs from the same stream of 'all'", c);
    ssae_audio_release(&one);
  }
  ssae_audio_release(&all);

  /* Resampled to 16 kHz: the sine of each channel lands in the band where
   * a 16 kHz sine of that frequency lands, at the same level. */
  float got[64], want[64];
  float *ref = malloc(sizeof *ref * 32000);
  for (int c = 0; c < CH; c++) {
    ssae_audio r;
    if (ssae_audio_load(path, c, 16000, &r, &err)) {
      CHECK(0, "load channel %d at 16 kHz: %s", c, err.msg);
      continue;
    }
    CHECK(r.rate == 16000 && r.file_rate == 48000 && r.frames == 32000,
          "resampled channel %d: %zu frames at %d Hz", c, r.frames, r.rate);
    for (size_t i = 0; i < 32000; i++)
      ref[i] = (float)(amp * sin(2 * M_PI * freqs[c] * (double)i / 16000));
    mean_frame(r.data, r.frames, got);
    mean_frame(ref, 32000, want);
    int bg = argmax(got), bw = argmax(want);
    CHECK(bg == bw, "%g Hz: peak in mel band %d, expected %d", freqs[c], bg, bw);
    CHECK(fabsf(got[bw] - want[bw]) < 0.1f, "%g Hz: band %d at %.3f dB, expected %.3f dB",
          freqs[c], bw, got[bw], want[bw]);
    ssae_audio_release(&r);
  }
  free(ref);

  /* The mix at 16 kHz has every sine, each 20*log10(8) dB down. */
  CHECK(!ssae_audio_load(path, SSAE_CHANNEL_MIX, 16000, &mix, &err), "mix 16k: %s", err.msg);
  if (mix.data) {
    mean_frame(mix.data, mix.frames, got);
    float *one = malloc(sizeof *one * 32000);
    for (int c = 0; c < CH; c++) {
      for (size_t i = 0; i < 32000; i++)
        one[i] = (float)(amp / CH * sin(2 * M_PI * freqs[c] * (double)i / 16000));
      mean_frame(one, 32000, want);
      int b = argmax(want);
      CHECK(fabsf(got[b] - want[b]) < 0.5f, "mix: %g Hz band %d at %.2f dB, expected %.2f dB",
            freqs[c], b, got[b], want[b]);
    }
    free(one);
  }
  ssae_audio_release(&mix);

  /* Mono files of each format, 10 s at 16 kHz (320 kB of 16-bit samples:
   * several buffers of the reader, and reads large enough to go past its
   * buffer straight to the caller's memory). */
  static const struct {
    const char *ext;
    int format, exact;
  } fmts[] = {{"wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1},
              {"flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1},
              {"aiff", SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 1},
              {"ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 0}};
  const size_t n_mono = 160000;
  float *sine = malloc(sizeof *sine * n_mono);
  for (size_t i = 0; i < n_mono; i++) sine[i] = (float)mono_sample(i, 16000) / 32768.0f;
  mean_frame(sine, n_mono, want);
  const int band = argmax(want);
  for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++) {
    char mono[256];
    snprintf(mono, sizeof mono, "%s/mono.%s", dir, fmts[k].ext);
    if (write_mono(mono, fmts[k].format, 16000, n_mono)) {
      CHECK(0, "cannot write %s", mono);
      continue;
    }
    ssae_audio m;
    if (ssae_audio_load(mono, 0, 16000, &m, &err)) {
      CHECK(0, "%s: %s", fmts[k].ext, err.msg);
      unlink(mono);
      continue;
    }
    CHECK(m.frames == n_mono && m.rate == 16000, "%s: %zu frames at %d Hz", fmts[k].ext,
          m.frames, m.rate);
    if (fmts[k].exact)
      CHECK(m.frames == n_mono && !memcmp(m.data, sine, sizeof *sine * n_mono),
            "%s: samples differ from those written", fmts[k].ext);
    mean_frame(m.data, m.frames, got);
    CHECK(argmax(got) == band && fabsf(got[band] - want[band]) < 0.5f,
          "%s: peak in band %d at %.2f dB, expected band %d at %.2f dB", fmts[k].ext,
          argmax(got), got[argmax(got)], band, want[band]);
    ssae_audio_release(&m);
    /* As they are (ssae_audio_read_i16), in pieces larger than the
     * reader's buffer (one channel is read straight into the caller's
     * memory) and odd ones: the samples written, every one. */
    if (fmts[k].exact) {
      ssae_audio_stream *si = ssae_audio_open(mono, 0, 16000, NULL, &err);
      CHECK(si && ssae_audio_stream_i16(si), "%s: 16-bit stream: %s", fmts[k].ext, err.msg);
      int16_t *ib = malloc(sizeof *ib * n_mono);
      const size_t pieces[] = {70000, 3, 7997};
      size_t at = 0, bad = 0;
      for (size_t p = 0; si && ib && at < n_mono; p = (p + 1) % 3) {
        long long ki = ssae_audio_read_i16(si, ib + at, pieces[p] < n_mono - at ? pieces[p]
                                                                                : n_mono - at,
                                           &err);
        CHECK(ki > 0, "%s: 16-bit read at %zu: %lld (%s)", fmts[k].ext, at, ki, err.msg);
        if (ki <= 0) break;
        at += (size_t)ki;
      }
      for (size_t i = 0; ib && i < at; i++) bad += ib[i] != mono_sample(i, 16000);
      CHECK(at == n_mono && bad == 0, "%s: 16-bit: %zu of %zu samples, %zu differ",
            fmts[k].ext, at, n_mono, bad);
      CHECK(si && ib && ssae_audio_read_i16(si, ib, 10, &err) == 0, "%s: 16-bit past the end",
            fmts[k].ext);
      free(ib);
      ssae_audio_close(si);
    }
    unlink(mono);
  }
  free(sine);

  /* 16-bit samples as they are (ssae_audio_read_i16, the GPU front end's
   * reader): the float reader's samples times 32768, exactly, for a picked
   * channel of the 8-channel file read in odd pieces; not for a resampled
   * stream or a mix of several channels; one reader per stream. */
  {
    ssae_audio_stream *sf = ssae_audio_open(path, 5, 48000, NULL, &err);
    ssae_audio_stream *si = ssae_audio_open(path, 5, 48000, NULL, &err);
    CHECK(sf && si && ssae_audio_stream_i16(si), "i16 stream: %s", err.msg);
    size_t n = 0, bad = 0;
    float fb[777];
    int16_t ib[777];
    for (size_t piece = 1; sf && si;) {
      long long kf = ssae_audio_read(sf, fb, piece, &err);
      long long ki = ssae_audio_read_i16(si, ib, piece, &err);
      CHECK(kf == ki, "piece of %zu: %lld floats, %lld samples (%s)", piece, kf, ki, err.msg);
      if (kf <= 0 || kf != ki) break;
      for (long long i = 0; i < kf; i++) bad += fb[i] != (float)ib[i] / 32768.0f;
      n += (size_t)kf;
      piece = piece % 680 + 97; /* 1 ... 776: below the buffers' 777 */
    }
    CHECK(n == frames48 && bad == 0, "i16: %zu of %zu frames, %zu differ", n, frames48, bad);
    CHECK(sf && ssae_audio_read_i16(sf, ib, 10, &err) == -1 && strstr(err.msg, "16-bit"),
          "i16 after floats: '%s'", err.msg);
    ssae_audio_close(sf);
    ssae_audio_close(si);
    ssae_audio_stream *sr = ssae_audio_open(path, 0, 16000, NULL, &err);
    ssae_audio_stream *sm = ssae_audio_open(path, SSAE_CHANNEL_MIX, 48000, NULL, &err);
    CHECK(sr && !ssae_audio_stream_i16(sr), "resampled stream read as 16-bit");
    CHECK(sm && !ssae_audio_stream_i16(sm), "mix of 8 channels read as 16-bit");
    CHECK(sr && ssae_audio_read_i16(sr, ib, 10, &err) == -1 && strstr(err.msg, path),
          "i16 on a resampled stream: '%s'", err.msg);
    ssae_audio_close(sr);
    ssae_audio_close(sm);
  }

  /* Bad requests name the file and the reason. */
  CHECK(ssae_audio_load(path, 8, 0, &a, &err) == -1 && strstr(err.msg, path) &&
            strstr(err.msg, "channel 8 asked for, file has 8 channels"),
        "channel 8: '%s'", err.msg);
  CHECK(ssae_audio_load(zero, 0, 0, &a, &err) == -1 && strstr(err.msg, "zero-length"),
        "zero-length: '%s'", err.msg);
  CHECK(ssae_audio_load(empty, 0, 0, &a, &err) == -1 && strstr(err.msg, "empty"),
        "empty file: '%s'", err.msg);
  CHECK(ssae_audio_load("/nonexistent/x.wav", 0, 0, &a, &err) == -1 &&
            strstr(err.msg, "/nonexistent/x.wav") && strstr(err.msg, "No such file"),
        "missing file: '%s'", err.msg);
  int ch;
  CHECK(!ssae_audio_parse_channel("3", &ch, &err) && ch == 3, "parse 3");
  CHECK(!ssae_audio_parse_channel("mix", &ch, &err) && ch == SSAE_CHANNEL_MIX, "parse mix");
  CHECK(!ssae_audio_parse_channel("all", &ch, &err) && ch == SSAE_CHANNEL_ALL, "parse all");
  CHECK(ssae_audio_parse_channel("-1", &ch, &err) == -1, "parse -1 accepted");
  CHECK(ssae_audio_parse_channel("x", &ch, &err) == -1, "parse x accepted");

  unlink(path);
  unlink(empty);
  unlink(zero);
  rmdir(dir);
  return test_done("ok");
}
