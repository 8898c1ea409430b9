/* Files opened by many threads at once (the decoding threads of `ssae
 * score`): every good file opens, and every file that cannot be read fails
 * with its own reason, the one it gets opened alone, although libsndfile
 * keeps a failed open's reason in process-wide variables. Three kinds of
 * file: 16-bit WAVs, WAVs of an unknown codec, and text. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "../ssae_test.h"
#include "../ssae_test_wav.h"

enum { PER_KIND = 6, FILES = 3 * PER_KIND, THREADS = 8, ROUNDS = 30 };

static char dir[] = "/tmp/ssae_test_open_threads_XXXXXX";
static char paths[FILES][256];
static char alone[FILES][SSAE_ERR_LEN]; /* "" for a file that opens */

static int write_bytes(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  size_t w = f ? fwrite(b, 1, n, f) : 0;
  if (f && fclose(f)) w = 0;
  return w == n ? 0 : -1;
}

/* kind 0: a 16-bit WAV; 1: the same with the codec 0x7777; 2: text. */
static int write_file(const char *path, int kind, int i) {
  enum { FRAMES = 800 + 37 };
  unsigned char b[44 + 2 * FRAMES];
  if (kind == 2) {
    char t[64];
    snprintf(t, sizeof t, "this is not audio, just some words (%d)\n", i);
    return write_bytes(path, (const unsigned char *)t, strlen(t));
  }
  test_wav_header(b, 16000, 1, 36 + 2 * FRAMES, 2 * FRAMES);
  if (kind == 1) test_le16(b + 20, 0x7777);
  for (int k = 0; k < FRAMES; k++) test_le16(b + 44 + 2 * k, (uint16_t)(k * 31 + i));
  return write_bytes(path, b, sizeof b);
}

static void open_one(int f, char *msg) {
  ssae_err err = {{0}};
  ssae_audio_stream *s = ssae_audio_open(paths[f], 0, 16000, NULL, &err);
  if (s) {
    msg[0] = '\0';
    ssae_audio_close(s);
  } else {
    snprintf(msg, SSAE_ERR_LEN, "%s", err.msg[0] ? err.msg : "(no reason)");
  }
}

static int wrong[THREADS];

static void *opener(void *arg) {
  int t = (int)(intptr_t)arg;
  uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
  char msg[SSAE_ERR_LEN];
  for (int round = 0; round < ROUNDS; round++)
    for (int k = 0; k < FILES; k++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      int f = (int)(r % FILES);
      open_one(f, msg);
      if (strcmp(msg, alone[f])) {
        if (!wrong[t])
          fprintf(stderr, "FAIL: %s: \"%s\" with others opening, \"%s\" alone\n", paths[f], msg,
                  alone[f]);
        wrong[t]++;
      }
    }
  return NULL;
}

int main(void) {
  if (!mkdtemp(dir)) FAIL("mkdtemp");
  for (int f = 0; f < FILES; f++) {
    snprintf(paths[f], sizeof paths[f], "%s/file%02d.wav", dir, f);
    if (write_file(paths[f], f / PER_KIND, f)) FAIL("writing %s", paths[f]);
  }
  for (int f = 0; f < FILES; f++) open_one(f, alone[f]);
  /* the kinds: good files open, the others fail, with two different reasons */
  for (int f = 0; f < FILES; f++)
    CHECK((f / PER_KIND == 0) == !alone[f][0], "%s alone: \"%s\"", paths[f], alone[f]);
  const char *r1 = strstr(alone[PER_KIND], ": not a readable audio file: "),
             *r2 = strstr(alone[2 * PER_KIND], ": not a readable audio file: ");
  CHECK(r1 && r2 && strcmp(r1, r2), "two different reasons wanted: \"%s\", \"%s\"",
        alone[PER_KIND], alone[2 * PER_KIND]);

  pthread_t tid[THREADS];
  for (int t = 0; t < THREADS; t++)
    if (pthread_create(&tid[t], NULL, opener, (void *)(intptr_t)t)) FAIL("pthread_create");
  int total = 0;
  for (int t = 0; t < THREADS; t++) {
    pthread_join(tid[t], NULL);
    total += wrong[t];
  }
  CHECK(total == 0, "%d of %d opens differed from the file's open alone", total,
        THREADS * ROUNDS * FILES);

  for (int f = 0; f < FILES; f++) unlink(paths[f]);
  rmdir(dir);
  return failures ? 1 : 0;
}
