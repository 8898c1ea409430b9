/* ssae_cpu_score_cached against ssae_cpu_forward, as the real-time engine
 * would drive it: many streams of log-mel frames, calls with the next
 * window of random streams in random order, windows dropped (a gap, so the
 * cache no longer applies) and streams restarted. Every score must equal
 * ssae_cpu_forward's on the same batch bit for bit, every cache must hold
 * what encoding its window afresh gives, the cache must really be used
 * (a stale one changes the score), and no call may allocate. On several
 * model shapes (F = 1 included), with the kernels capped by argv[1]
 * (avx2|generic) as test_model does. */
#define SSAE_TEST_COUNT_ALLOCS
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cpu.h"
#include "ssae_model.h"
#include "../ssae_test.h"

/* More streams than two blocks of windows (32), so calls cross blocks. */
#define NS 75
#define CALLS 300

typedef struct {
  float *win;  /* the stream's current window: F frames of M */
  double *codes;
  int valid;   /* codes hold the codes of win's predecessor */
} stream;

/* A log-mel frame: -100 ... +20 dB, now and then digital silence (a
 * constant frame, the hardest case for the LayerNorm) or a loud tone. */
static void new_frame(float *f, size_t M) {
  double kind = urand();
  for (size_t m = 0; m < M; m++) f[m] = (float)(-100.0 + 120.0 * urand());
  if (kind < 0.05)
    for (size_t m = 0; m < M; m++) f[m] = -100.0f;
  else if (kind < 0.1)
    f[rnd() % M] = 20.0f;
}

/* The stream's next window is `advance` frames on (1: the successor). */
static void advance(stream *st, size_t M, size_t F, size_t by) {
  for (size_t k = 0; k < by; k++) {
    memmove(st->win, st->win + M, (F - 1) * M * sizeof *st->win);
    new_frame(st->win + (F - 1) * M, M);
  }
}

static int same(const void *a, const void *b, size_t bytes) { return !memcmp(a, b, bytes); }

static void test_dims(const ssae_dims *d, uint64_t seed) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_new(d, &err);
  CHECK(m, "model: %s", err.msg);
  if (!m) return;
  ssae_model_init(m, seed);
  /* LayerNorm affines away from 1/0, so that their folding counts. */
  size_t M = (size_t)d->n_mels, F = (size_t)d->frames, L = (size_t)d->latent, win = F * M;
  for (size_t i = 0; i < M; i++)
    m->ln_enc_w[i] = (float)(0.5 + urand()), m->ln_enc_b[i] = (float)(urand() - 0.5);
  for (size_t i = 0; i < L; i++)
    m->ln_bn_w[i] = (float)(0.5 + urand()), m->ln_bn_b[i] = (float)(urand() - 0.5);
  CHECK(!ssae_model_update(m, &err), "update: %s", err.msg);
  ssae_cpu *c = ssae_cpu_new(m, 1, &err), *c3 = ssae_cpu_new(m, 3, &err);
  CHECK(c && c3, "cpu_new: %s", err.msg);
  if (!c || !c3) {
    ssae_cpu_free(c);
    ssae_cpu_free(c3);
    ssae_model_free(m);
    return;
  }
  size_t clen = ssae_cpu_codes_len(c);
  CHECK(clen >= F * (size_t)d->slice_latent && clen == ssae_cpu_codes_len(c3),
        "codes_len %zu", clen);

  stream st[NS];
  for (size_t s = 0; s < NS; s++) {
    st[s].win = malloc(win * sizeof *st[s].win);
    st[s].codes = malloc(clen * sizeof *st[s].codes);
    st[s].valid = 0;
    for (size_t f = 0; f < F; f++) new_frame(st[s].win + f * M, M);
  }
  float *x = malloc(NS * win * sizeof *x), *sc = malloc(NS * sizeof *sc),
        *sf = malloc(NS * sizeof *sf), *s1 = malloc(sizeof *s1);
  double **codes = malloc(NS * sizeof *codes), *fresh = malloc(clen * sizeof *fresh);
  unsigned char *cont = malloc(NS), zero = 0;
  size_t order[NS], n_cont = 0, n_full = 0, n_bad = 0, n_stale = 0, allocs = 0;
  for (size_t s = 0; s < NS; s++) order[s] = s;

  for (int call = 0; call < CALLS; call++) {
    /* Mostly small calls (a few channels' hops), some of every size. */
    size_t n = call % 7 == 0 ? NS - rnd() % 3 : 1 + rnd() % (rnd() % 2 ? 8 : NS);
    for (size_t k = 0; k < NS; k++) {
      size_t j = k + rnd() % (NS - k), t = order[k];
      order[k] = order[j], order[j] = t;
    }
    for (size_t k = 0; k < n; k++) {
      stream *q = &st[order[k]];
      double e = urand();
      int succ = 1;
      if (e < 0.06) { /* windows dropped: a gap of 1 to F+1 windows */
        advance(q, M, F, 2 + rnd() % (F + 1));
        succ = 0;
      } else if (e < 0.09) { /* restart: nothing in common with before */
        for (size_t f = 0; f < F; f++) new_frame(q->win + f * M, M);
        succ = 0;
      } else {
        advance(q, M, F, 1);
      }
      /* Now and then a successor is encoded in full all the same. */
      cont[k] = (unsigned char)(succ && q->valid && urand() >= 0.03);
      n_cont += cont[k], n_full += !cont[k];
      memcpy(x + k * win, q->win, win * sizeof *x);
      codes[k] = q->codes;
    }
    memset(sc, 0xff, NS * sizeof *sc);
    size_t before = n_allocs;
    CHECK(!ssae_cpu_score_cached(c, x, n, codes, cont, sc), "score_cached");
    allocs += n_allocs - before;
    if (n < NS) {
      uint32_t u;
      memcpy(&u, sc + n, sizeof u);
      CHECK(u == 0xffffffffu, "call %d: wrote past %zu scores", call, n);
    }
    CHECK(!ssae_cpu_forward(call % 2 ? c : c3, x, n, sf, NULL), "forward");
    if (!same(sc, sf, n * sizeof *sc)) {
      n_bad++;
      for (size_t k = 0; k < n; k++)
        CHECK(same(sc + k, sf + k, sizeof *sc),
              "dims %d/%d/%d/%d call %d window %zu of %zu (cont %d): cached %.9g, forward %.9g",
              d->n_mels, d->frames, d->latent, d->slice_latent, call, k, n, cont[k], sc[k],
              sf[k]);
    }
    for (size_t k = 0; k < n; k++) st[order[k]].valid = 1;
    /* A few caches against a fresh encoding of their window (alone, in a
     * batch of one: another position in another batch), with the object
     * that ran the batch. */
    for (int t = 0; t < 2; t++) {
      size_t k = rnd() % n;
      double *one[1] = {fresh};
      CHECK(!ssae_cpu_score_cached(c, x + k * win, 1, one, &zero, s1), "fresh");
      CHECK(same(fresh, codes[k], clen * sizeof *fresh) && same(s1, sc + k, sizeof *s1),
            "call %d window %zu: the cache (cont %d) differs from encoding afresh", call, k,
            cont[k]);
    }
    /* The cache is what a continued window uses: a stream's next window
     * scored against another stream's codes no longer matches (unless the
     * frames coincide, which they do not with F > 1 random frames). */
    if (F > 1 && n >= 2 && call % 10 == 0) {
      memcpy(fresh, codes[1], clen * sizeof *fresh);
      advance(&st[order[0]], M, F, 1);
      double *one[1] = {fresh};
      unsigned char yes = 1;
      CHECK(!ssae_cpu_score_cached(c, st[order[0]].win, 1, one, &yes, s1), "stale");
      CHECK(!ssae_cpu_forward(c, st[order[0]].win, 1, sf, NULL), "forward");
      CHECK(!same(s1, sf, sizeof *s1), "call %d: a stale cache gave the right score %.9g",
            call, sf[0]);
      st[order[0]].valid = 0; /* its cache lags a window behind now */
      n_stale++;
    }
  }
  CHECK(allocs == 0, "%zu allocations in score_cached", allocs);
  CHECK(n_cont > n_full && n_full > CALLS / 10, "too few of a kind: %zu continued, %zu full",
        n_cont, n_full);
  printf("dims %d/%d/%d/%d, %s kernels: %zu continued and %zu full windows in %d calls, "
         "%zu stale checks, %zu calls differing\n",
         d->n_mels, d->frames, d->latent, d->slice_latent, ssae_cpu_isa(), n_cont, n_full,
         CALLS, n_stale, n_bad);

  /* Refusals, and an empty call. */
  CHECK(ssae_cpu_score_cached(NULL, x, 1, codes, cont, sc) == -1, "no object");
  CHECK(ssae_cpu_score_cached(c, NULL, 1, codes, cont, sc) == -1, "no input");
  CHECK(ssae_cpu_score_cached(c, x, 1, NULL, cont, sc) == -1, "no caches");
  CHECK(ssae_cpu_score_cached(c, x, 1, codes, cont, NULL) == -1, "no scores");
  codes[1] = NULL;
  memset(sc, 0, 2 * sizeof *sc);
  CHECK(ssae_cpu_score_cached(c, x, 2, codes, cont, sc) == -1 && sc[0] == 0.0f,
        "a NULL cache must be refused before anything is scored");
  CHECK(ssae_cpu_score_cached(c, NULL, 0, NULL, NULL, NULL) == 0, "empty call");
  CHECK(ssae_cpu_codes_len(NULL) == 0, "codes_len of NULL");

  for (size_t s = 0; s < NS; s++) {
    free(st[s].win);
    free(st[s].codes);
  }
  free(x);
  free(sc);
  free(sf);
  free(s1);
  free(codes);
  free(fresh);
  free(cont);
  ssae_cpu_free(c);
  ssae_cpu_free(c3);
  ssae_model_free(m);
}

int main(int argc, char **argv) {
  /* test_cpu_cached [avx2|generic]: caps the kernels' instruction set. */
  if (argc > 1) setenv("SSAE_CPU_KERNELS", argv[1], 1);
  static const ssae_dims dims[] = {{64, 5, 32, 64}, {40, 3, 16, 24}, {33, 7, 13, 21},
                                   {24, 1, 8, 8}};
  for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) test_dims(&dims[i], 100 + i);
  return test_done("all checks passed");
}
