/* The CPU vector-Jacobian products (ssae_vjp.h) give the same bits
 * whoever runs them: the calling thread alone, ssae's own threads, or a
 * host's OpenMP team lent through ssae_vjp_set_team (here libgomp's
 * GOMP_parallel, the runtime PyTorch's CPU operators run on; POSIX threads
 * under ThreadSanitizer), and a team
 * larger than the object's scratch slots; batches of one chunk, of a few,
 * and of more chunks than units (several chunks summed per unit). The team
 * really runs the work: the wrapper counts the distinct threads that
 * entered. The fused MSE loss (ssae_vjp_loss) gives the gradient of the
 * backward from the loss's dy, bit for bit, and the loss of the forward's
 * output. */
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_model.h"
#include "ssae_train.h"
#include "ssae_vjp.h"
#include "../ssae_test.h"

/* Under ThreadSanitizer the team is one of POSIX threads with the same
 * signature: libgomp is not instrumented, and its barriers would hide
 * every ordering between the team and the caller from the sanitizer. */
#if defined(__SANITIZE_THREAD__)
#define TEAM_PTHREADS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEAM_PTHREADS 1
#endif
#endif

/* The team's entry (GOMP_parallel's signature), noting which of its
 * threads entered. */
static atomic_uint entered_mask;
typedef struct wrapped {
  void (*fn)(void *);
  void *data;
} wrapped;
static void note(int t) {
  if (t >= 0 && t < 32) atomic_fetch_or(&entered_mask, 1u << t);
}

#ifdef TEAM_PTHREADS
#include <pthread.h>

typedef struct member {
  wrapped *w;
  int t;
} member;
static void *member_main(void *p) {
  member *m = p;
  note(m->t);
  m->w->fn(m->w->data);
  return NULL;
}
static void team(void (*fn)(void *), void *data, unsigned n, unsigned flags) {
  (void)flags;
  wrapped w = {fn, data};
  pthread_t tid[32];
  member m[32];
  unsigned k = 1;
  for (; k < n && k < 32; k++) {
    m[k] = (member){&w, (int)k};
    if (pthread_create(&tid[k], NULL, member_main, &m[k])) break;
  }
  note(0);
  fn(data);
  for (unsigned j = 1; j < k; j++) pthread_join(tid[j], NULL);
}
#else
void GOMP_parallel(void (*fn)(void *), void *data, unsigned n, unsigned flags);

static void note_and_run(void *p) {
  wrapped *w = p;
  note(omp_get_thread_num());
  w->fn(w->data);
}
static void team(void (*fn)(void *), void *data, unsigned n, unsigned flags) {
  wrapped w = {fn, data};
  GOMP_parallel(note_and_run, &w, n, flags);
}
#endif

static int popcount(unsigned v) {
  int c = 0;
  for (; v; v &= v - 1) c++;
  return c;
}

typedef struct result {
  float *y, *dp, *dx, *dp_saved, *dx_saved, *dp_loss;
  double loss;
} result;

/* Forward, backward (recomputing) and forward_save + backward_saved of n
 * windows on v, the parameters (v's) set again between the last two (the
 * same values: the backward's phase makes the folded decoder again while
 * its chunks run, ThreadSanitizer's case). */
static result run(ssae_vjp *v, const float *params, const float *x, const float *dy, size_t n,
                  size_t P, size_t win) {
  ssae_err err = {{0}};
  result r = {malloc(n * win * sizeof(float)), malloc(P * sizeof(float)),
              malloc(n * win * sizeof(float)), malloc(P * sizeof(float)),
              malloc(n * win * sizeof(float)), malloc(P * sizeof(float)), 0};
  float *act = malloc(ssae_vjp_act_floats(v, n) * sizeof(float));
  float *y2 = malloc(n * win * sizeof(float));
  if (!r.y || !r.dp || !r.dx || !r.dp_saved || !r.dx_saved || !r.dp_loss || !act || !y2)
    FAIL("out of memory");
  CHECK(ssae_vjp_forward(v, x, n, r.y, &err) == 0, "forward: %s", err.msg);
  CHECK(ssae_vjp_backward(v, x, n, dy, r.dp, r.dx, &err) == 0, "backward: %s", err.msg);
  CHECK(ssae_vjp_forward_save(v, x, n, y2, act, &err) == 0, "forward_save: %s", err.msg);
  CHECK(ssae_vjp_set_params(v, params, &err) == 0, "set_params: %s", err.msg);
  CHECK(ssae_vjp_backward_saved(v, act, n, dy, r.dp_saved, r.dx_saved, &err) == 0,
        "backward_saved: %s", err.msg);
  CHECK(!memcmp(r.y, y2, n * win * sizeof(float)) &&
            !memcmp(r.dp, r.dp_saved, P * sizeof(float)) &&
            !memcmp(r.dx, r.dx_saved, n * win * sizeof(float)),
        "%zu windows: kept activations and recomputed ones give different results", n);
  /* the fused loss against the backward from its dy, as torch makes it */
  CHECK(ssae_vjp_loss(v, x, n, &r.loss, r.dp_loss, &err) == 0, "loss: %s", err.msg);
  const float scale = (float)(2.0 / ((double)n * (double)win));
  double sse = 0;
  for (size_t i = 0; i < n * win; i++) {
    float d = r.y[i] - x[i];
    sse += (double)d * d;
    y2[i] = d * scale;
  }
  float *dp_ref = malloc(P * sizeof(float));
  if (!dp_ref) FAIL("out of memory");
  CHECK(ssae_vjp_backward(v, x, n, y2, dp_ref, NULL, &err) == 0, "backward: %s", err.msg);
  CHECK(!memcmp(dp_ref, r.dp_loss, P * sizeof(float)),
        "%zu windows: the fused loss's gradient differs from the backward of its dy", n);
  double want = sse / ((double)n * (double)win);
  CHECK(fabs(r.loss - want) <= 1e-12 * want, "%zu windows: fused loss %.17g, from y %.17g", n,
        r.loss, want);
  free(dp_ref);
  free(act);
  free(y2);
  return r;
}

static void result_free(result *r) {
  free(r->y);
  free(r->dp);
  free(r->dx);
  free(r->dp_saved);
  free(r->dx_saved);
  free(r->dp_loss);
}

static void same(const result *a, const result *b, size_t n, size_t P, size_t win,
                 const char *what) {
  CHECK(!memcmp(a->y, b->y, n * win * sizeof(float)), "%s, %zu windows: forward differs", what,
        n);
  CHECK(!memcmp(a->dp, b->dp, P * sizeof(float)), "%s, %zu windows: parameter gradient differs",
        what, n);
  CHECK(!memcmp(a->dx, b->dx, n * win * sizeof(float)), "%s, %zu windows: input gradient differs",
        what, n);
  CHECK(!memcmp(a->dp_saved, b->dp_saved, P * sizeof(float)),
        "%s, %zu windows: parameter gradient from kept activations differs", what, n);
  CHECK(!memcmp(a->dx_saved, b->dx_saved, n * win * sizeof(float)),
        "%s, %zu windows: input gradient from kept activations differs", what, n);
  CHECK(!memcmp(a->dp_loss, b->dp_loss, P * sizeof(float)) && a->loss == b->loss,
        "%s, %zu windows: the fused loss or its gradient differs", what, n);
}

int main(void) {
  ssae_err err = {{0}};
  ssae_dims d = {.n_mels = 64, .frames = 5, .latent = 32, .slice_latent = 64};
  ssae_vjp *one = ssae_vjp_new(&d, 1, &err), *own = ssae_vjp_new(&d, 3, &err),
           *lent = ssae_vjp_new(&d, 4, &err), *small = ssae_vjp_new(&d, 2, &err);
  if (!one || !own || !lent || !small) FAIL("ssae_vjp_new: %s", err.msg);
  const size_t P = ssae_vjp_param_count(one), win = 5 * 64;
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(&d, off);
  float *params = malloc(P * sizeof(float));
  if (!params) FAIL("out of memory");
  for (size_t i = 0; i < P; i++) params[i] = (float)(0.2 * (urand() - 0.5));
  for (int t = 0; t < SSAE_N_TENSORS; t++)
    if (t == 0 || t == 5) /* the LayerNorm weights near 1 */
      for (size_t i = off[t]; i < off[t + 1]; i++) params[i] += 1.0f;
  ssae_vjp *all[] = {one, own, lent, small};
  for (int i = 0; i < 4; i++)
    CHECK(ssae_vjp_set_params(all[i], params, &err) == 0, "set_params: %s", err.msg);
  ssae_vjp_set_team(lent, team, 4);
  ssae_vjp_set_team(small, team, 8); /* more threads than the object's two slots */

  /* one chunk; a few; more chunks than units (10000 windows: 313 chunks) */
  const size_t sizes[] = {1, 100, 10000};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    float *x = malloc(n * win * sizeof(float)), *dy = malloc(n * win * sizeof(float));
    if (!x || !dy) FAIL("out of memory");
    for (size_t i = 0; i < n * win; i++) {
      x[i] = (float)(-40 + 40 * (urand() - 0.5) - 0.3 * (double)(i % 64));
      dy[i] = (float)(urand() - 0.5);
    }
    result ref = run(one, params, x, dy, n, P, win);
    result r_own = run(own, params, x, dy, n, P, win);
    same(&ref, &r_own, n, P, win, "ssae's 3 threads");
    atomic_store(&entered_mask, 0);
    result r_lent = run(lent, params, x, dy, n, P, win);
    same(&ref, &r_lent, n, P, win, "an OpenMP team of 4");
    if (n >= 100)
      CHECK(popcount(atomic_load(&entered_mask)) > 1, "%zu windows: the team ran on %d thread(s)",
            n, popcount(atomic_load(&entered_mask)));
    result r_small = run(small, params, x, dy, n, P, win);
    same(&ref, &r_small, n, P, win, "a team of 8 on 2 slots");
    if (n == 10000) {
      /* several chunks to a unit: the sum of the two halves' gradients
       * (one chunk to a unit each) */
      size_t h = n / 2;
      result a = run(one, params, x, dy, h, P, win);
      result b = run(one, params, x + h * win, dy + h * win, h, P, win);
      size_t bad = 0;
      for (size_t i = 0; i < P; i++) {
        double want = (double)a.dp[i] + b.dp[i];
        if (fabs(ref.dp[i] - want) > 1e-4 * (fabs(a.dp[i]) + fabs(b.dp[i])) + 1e-6) bad++;
      }
      CHECK(bad == 0, "%zu of %zu parameter gradients differ from the halves' sum", bad, P);
      CHECK(!memcmp(ref.dx, a.dx, h * win * sizeof(float)) &&
                !memcmp(ref.dx + h * win, b.dx, h * win * sizeof(float)),
            "input gradients differ from the halves'");
      result_free(&a);
      result_free(&b);
    }
    result_free(&ref);
    result_free(&r_own);
    result_free(&r_lent);
    result_free(&r_small);
    free(x);
    free(dy);
  }
  /* back to its own threads */
  ssae_vjp_set_team(lent, NULL, 0);
  {
    size_t n = 300;
    float *x = calloc(n * win, sizeof(float)), *dy = calloc(n * win, sizeof(float));
    if (!x || !dy) FAIL("out of memory");
    for (size_t i = 0; i < n * win; i++) x[i] = (float)(i % 97) - 60, dy[i] = (float)(i % 5) - 2;
    atomic_store(&entered_mask, 0);
    result a = run(one, params, x, dy, n, P, win), b = run(lent, params, x, dy, n, P, win);
    same(&a, &b, n, P, win, "the team taken back");
    CHECK(atomic_load(&entered_mask) == 0, "the team ran after it was taken back");
    result_free(&a);
    result_free(&b);
    free(x);
    free(dy);
  }
  for (int i = 0; i < 4; i++) ssae_vjp_free(all[i]);
  free(params);
  return failures ? 1 : 0;
}
