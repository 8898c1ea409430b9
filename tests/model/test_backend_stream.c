/* The backend's streams (ssae_backend_stream_open / _submit, the real-time
 * engine's one path) on the CPU, as the engine drives them: batches of the
 * next windows of random channels, in random order, now and then a
 * channel's second window in one batch, a dropped window (no continuity),
 * laid out in one span or where they lie (runs at a wider pitch, as in the
 * engine's rings). Every score must equal ssae_backend_run's on the same
 * windows bit for bit; the caches must really be used (a continuity flag
 * that is not true of the data changes the score); a forced failure falls
 * back with no window lost and the scores still equal; warming forgets
 * what it scored; a collect on the CPU allocates nothing; bad arguments
 * are refused. */
#define SSAE_TEST_COUNT_ALLOCS
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_backend.h"
#include "ssae_model.h"
#include "../ssae_test.h"

#define NC 11     /* channels */
#define BATCH 24  /* the backend's batch bound */
#define ROUNDS 200

typedef struct {
  float *win; /* the channel's current window: F frames of M */
  int fresh;  /* win does not follow the last window submitted */
} chan;

static void new_frame(float *f, size_t M) {
  for (size_t m = 0; m < M; m++) f[m] = (float)(-100.0 + 120.0 * urand());
}

static void advance(chan *c, size_t M, size_t F) {
  memmove(c->win, c->win + M, (F - 1) * M * sizeof *c->win);
  new_frame(c->win + (F - 1) * M, M);
}

static int fallbacks;
static void on_fallback(void *user, const char *msg) {
  (void)user;
  (void)msg;
  fallbacks++;
}

int main(void) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_default(&err);
  CHECK(m, "default model: %s", err.msg);
  if (!m) return 1;
  const size_t M = (size_t)m->d.n_mels, F = (size_t)m->d.frames, wf = F * M;
  const size_t P = wf + 8; /* the pitch of windows where they lie */
  ssae_backend *b = ssae_backend_new(m, "cpu", BATCH, &err);
  CHECK(b, "cpu backend: %s", err.msg);
  if (!b) return 1;
  ssae_backend_set_fallback_cb(b, on_fallback, NULL);
  float *x = malloc(BATCH * wf * sizeof *x), *ring = malloc(BATCH * P * sizeof *ring);
  float *s = malloc(BATCH * sizeof *s), *s_ref = malloc(BATCH * sizeof *s_ref);
  uint32_t ch[BATCH];
  unsigned char cont[BATCH];
  ssae_span sp[BATCH];
  chan c[NC];
  for (int k = 0; k < NC; k++) {
    c[k].win = malloc(wf * sizeof *c[k].win);
    for (size_t f = 0; f < F; f++) new_frame(c[k].win + f * M, M);
    c[k].fresh = 1;
  }

  CHECK(ssae_backend_stream_submit(b, 0, sp, 0, 0, ch, cont, &err) == -1,
        "a stream submit before the stream is open");
  CHECK(ssae_backend_stream_open(b, 0, &err) == -1, "a stream of no channels");
  CHECK(!ssae_backend_stream_open(b, NC, &err), "stream_open: %s", err.msg);
  CHECK(ssae_backend_stream_open(b, NC, &err) == -1, "a second stream_open");

  /* Warming scores windows as channels 0, 1, ... and forgets them: a
   * window then claimed to follow is encoded afresh (else, its frames not
   * following, its score would differ). */
  for (size_t i = 0; i < BATCH * wf; i++) x[i] = (float)(-100.0 + 120.0 * urand());
  ssae_backend_warm(b, x, BATCH, s);
  for (int k = 0; k < 3; k++) {
    memcpy(x + (size_t)k * wf, c[k].win, wf * sizeof *x);
    ch[k] = (uint32_t)k;
    cont[k] = 1;
  }
  sp[0] = (ssae_span){x, 3, wf};
  CHECK(!ssae_backend_stream_submit(b, 0, sp, 1, 3, ch, cont, &err) &&
            !ssae_backend_collect(b, 0, s, &err),
        "after warming: %s", err.msg);
  CHECK(!ssae_backend_run(b, x, 3, s_ref, NULL, &err), "run: %s", err.msg);
  CHECK(!memcmp(s, s_ref, 3 * sizeof *s), "warming left the caches in use");
  for (int k = 0; k < 3; k++) c[k].fresh = 0;

  size_t n_cont = 0, allocs = 0, n_spans = 0;
  for (int r = 0; r < ROUNDS; r++) {
    const int fail = r == ROUNDS / 2;
    const int in_place = r % 3 == 1;
    size_t n = 1 + rnd() % BATCH;
    int seen[NC] = {0};
    for (size_t i = 0; i < n; i++) {
      int k = (int)(rnd() % NC);
      /* A dropped window now and then: the next one does not follow. */
      if (urand() < 0.1) {
        advance(&c[k], M, F);
        c[k].fresh = 1;
      }
      advance(&c[k], M, F);
      ch[i] = (uint32_t)k;
      cont[i] = (unsigned char)!c[k].fresh;
      n_cont += cont[i] && seen[k];
      seen[k] = 1;
      c[k].fresh = 0;
      memcpy(x + i * wf, c[k].win, wf * sizeof *x);
      memcpy(ring + i * P + 4, c[k].win, wf * sizeof *x);
    }
    /* Where they lie: runs of random length at pitch P (one window alone
     * at a pitch as well). */
    int nsp = 1;
    sp[0] = (ssae_span){x, n, wf};
    if (in_place) {
      nsp = 0;
      for (size_t i = 0; i < n;) {
        size_t len = 1 + rnd() % 5;
        if (len > n - i) len = n - i;
        sp[nsp++] = (ssae_span){ring + i * P + 4, len, P};
        i += len;
      }
      n_spans += (size_t)nsp;
    }
    if (fail) ssae_backend_fail_next(b);
    memset(s, 0, n * sizeof *s);
    const int slot = r & 1;
    size_t before = n_allocs;
    CHECK(!ssae_backend_stream_submit(b, slot, sp, nsp, n, ch, cont, &err),
          "round %d submit: %s", r, err.msg);
    CHECK(!ssae_backend_collect(b, slot, s, &err), "round %d collect: %s", r, err.msg);
    if (!fail && r > 0) allocs += n_allocs - before;
    CHECK(!ssae_backend_run(b, x, n, s_ref, NULL, &err), "run: %s", err.msg);
    CHECK(!memcmp(s, s_ref, n * sizeof *s), "round %d (%s%s): scores differ from the batch's",
          r, in_place ? "in place" : "laid out", fail ? ", forced failure" : "");
  }
  CHECK(fallbacks == 1, "the forced failure reported %d times", fallbacks);
  CHECK(n_cont > 0 && n_spans > 0, "the test made no second windows of a channel (%zu) or "
        "spans (%zu)", n_cont, n_spans);
  CHECK(allocs == 0, "stream submit + collect allocated %zu times", allocs);

  /* The caches are used: a window claimed to follow its channel's last one
   * while its frames do not (channel 0's window given as channel 1's) is
   * scored from channel 1's codes, not as the batch's. */
  for (int k = 0; k < 2; k++) {
    advance(&c[k], M, F);
    memcpy(x + (size_t)k * wf, c[k].win, wf * sizeof *x);
    ch[k] = (uint32_t)k;
    cont[k] = 1;
  }
  sp[0] = (ssae_span){x, 2, wf};
  CHECK(!ssae_backend_stream_submit(b, 0, sp, 1, 2, ch, cont, &err) &&
            !ssae_backend_collect(b, 0, s, &err), "cache round: %s", err.msg);
  advance(&c[0], M, F);
  memcpy(x, c[0].win, wf * sizeof *x);
  ch[0] = 1;
  sp[0] = (ssae_span){x, 1, wf};
  CHECK(!ssae_backend_stream_submit(b, 0, sp, 1, 1, ch, cont, &err) &&
            !ssae_backend_collect(b, 0, s, &err), "stale round: %s", err.msg);
  CHECK(!ssae_backend_run(b, x, 1, s_ref, NULL, &err), "run: %s", err.msg);
  CHECK(s[0] != s_ref[0], "a false continuity flag left the score unchanged: caches unused?");

  /* Bad arguments. */
  ch[0] = NC;
  cont[0] = 0;
  CHECK(ssae_backend_stream_submit(b, 0, sp, 1, 1, ch, cont, &err) == -1 &&
            strstr(err.msg, "channel"),
        "a channel past the stream's: %s", err.msg);
  ch[0] = 0;
  CHECK(ssae_backend_stream_submit(b, 0, sp, 1, 2, ch, cont, &err) == -1 &&
            strstr(err.msg, "not 2"),
        "a wrong total: %s", err.msg);
  CHECK(ssae_backend_stream_submit(b, 0, sp, 1, 1, NULL, cont, &err) == -1,
        "windows without channels");

  for (int k = 0; k < NC; k++) free(c[k].win);
  free(x);
  free(ring);
  free(s);
  free(s_ref);
  ssae_backend_free(b);
  ssae_model_free(m);
  if (failures) return 1;
  printf("backend streams: %d rounds, %zu second windows of a channel, %zu spans in place\n",
         ROUNDS, n_cont, n_spans);
  return 0;
}
