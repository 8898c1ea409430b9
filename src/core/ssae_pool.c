/* The fork-join team (ssae_pool.h). Each run bumps a generation under the
 * mutex and broadcasts it; a helper that sees a new generation runs the
 * function on its slot and the last one to finish signals the owner. The
 * mutex orders the owner's writes before the helpers' reads and their
 * writes before the owner's return. */
#include "ssae_pool.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
  ssae_pool *p;
  int slot;
} helper;

struct ssae_pool {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int sync_ok;           /* mu, go and done exist */
  unsigned long gen;     /* runs started */
  int pending;           /* helpers still on this run */
  int quit;
  ssae_pool_fn fn;
  void *arg;
  int started;           /* helper threads running */
  pthread_t *tid;
  helper *hp;
};

static void *helper_main(void *a) {
  const helper *h = a;
  ssae_pool *p = h->p;
  unsigned long seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) break;
    seen = p->gen;
    ssae_pool_fn fn = p->fn;
    void *arg = p->arg;
    pthread_mutex_unlock(&p->mu);
    fn(arg, h->slot);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

ssae_pool *ssae_pool_new(int helpers) {
  ssae_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (helpers <= 0) return p;
  p->tid = calloc((size_t)helpers, sizeof *p->tid);
  p->hp = calloc((size_t)helpers, sizeof *p->hp);
  if (!p->tid || !p->hp) {
    ssae_pool_free(p);
    return NULL;
  }
  /* Without the primitives the pool runs everything on its owner. */
  if (pthread_mutex_init(&p->mu, NULL)) return p;
  if (pthread_cond_init(&p->go, NULL)) {
    pthread_mutex_destroy(&p->mu);
    return p;
  }
  if (pthread_cond_init(&p->done, NULL)) {
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    return p;
  }
  p->sync_ok = 1;
  for (int k = 0; k < helpers; k++) {
    p->hp[k] = (helper){p, k + 1};
    if (pthread_create(&p->tid[k], NULL, helper_main, &p->hp[k])) break;
    p->started++;
  }
  return p;
}

int ssae_pool_helpers(const ssae_pool *p) { return p ? p->started : 0; }

void ssae_pool_start(ssae_pool *p, ssae_pool_fn fn, void *arg) {
  if (!p->started) {
    fn(arg, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->pending = p->started;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
}

void ssae_pool_wait(ssae_pool *p) {
  if (!p->started) return;
  pthread_mutex_lock(&p->mu);
  while (p->pending) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void ssae_pool_run(ssae_pool *p, ssae_pool_fn fn, void *arg) {
  if (!p->started) {
    fn(arg, 0);
    return;
  }
  ssae_pool_start(p, fn, arg);
  fn(arg, 0);
  ssae_pool_wait(p);
}

void ssae_pool_free(ssae_pool *p) {
  if (!p) return;
  if (p->sync_ok) {
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->started; k++) pthread_join(p->tid[k], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
  }
  free(p->tid);
  free(p->hp);
  free(p);
}
