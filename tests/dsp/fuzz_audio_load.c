/* Fuzz target for the audio path: bytes -> a file -> the streaming reader
 * (libsndfile, header checks, channel 0 and the mix, resampling to
 * 16 kHz) -> the log-mel front end. (The whole-file loader is this reader
 * run to the end; its memory grows with the audio, which a few KiB of FLAC
 * can make hours long, so it is not fuzzed on its own.)
 * libFuzzer entry point; ../model/fuzz_replay.c replays the seed corpus
 * (tests/dsp/fuzz_corpus, written by make_fuzz_corpus.py) through it in
 * ordinary builds. With -rss_limit_mb=512 (also libFuzzer's malloc limit)
 * and -timeout=10, a header that drives an allocation or the resampler
 * from its claims (a 1 Hz rate, a billion-frame count) is a finding. */
#define _GNU_SOURCE /* memfd_create */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "ssae_logmel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Audio the target turns into features per input at most (30 s at
 * 16 kHz): a few KiB of FLAC can hold hours of constant blocks; streaming
 * them is the reader's job, spending the run's time on them is not. */
#define MAX_SAMPLES ((size_t)16000 * 30)

/* Returns the file's channel count (0 when refused). */
static int stream_features(const char *path, int channel) {
  static ssae_logmel *lm;
  static float *frames;
  static float pcm[4096];
  ssae_err err = {{0}};
  if (!lm) {
    ssae_feat_cfg cfg;
    ssae_feat_cfg_default(&cfg);
    lm = ssae_logmel_new(&cfg, &err);
    if (!lm) abort();
    size_t most = ssae_logmel_max_frames(lm, 4096), fl = ssae_logmel_max_frames(lm, 0);
    frames = malloc(sizeof *frames * 64 * (most > fl ? most : fl));
    if (!frames) abort();
  }
  ssae_logmel_reset(lm);
  ssae_audio_stream *s = ssae_audio_open(path, channel, 16000, NULL, &err);
  if (!s) {
    if (!err.msg[0]) abort(); /* every refusal says why */
    return 0;
  }
  const int file_channels = ssae_audio_stream_info(s)->file_channels;
  size_t total = 0;
  long long got;
  while (total < MAX_SAMPLES && (got = ssae_audio_read(s, pcm, 4096, &err)) > 0) {
    total += (size_t)got;
    ssae_logmel_process(lm, pcm, (size_t)got, frames);
  }
  if (total < MAX_SAMPLES && got < 0 && !err.msg[0]) abort();
  ssae_logmel_flush(lm, frames);
  ssae_audio_close(s);
  return file_channels;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz-audio", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, data + done, size - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (stream_features(path, 0) > 1) stream_features(path, SSAE_CHANNEL_MIX);
  close(fd);
  return 0;
}
