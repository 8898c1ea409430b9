/* A fork-join team of threads: the library's parallel loops (the CPU
 * backend's forward, the trainer's and the flat API's gradients, the GPU
 * front end's decoding threads) wake the same kind of team for each piece of
 * work and wait for it, so they share this one (internal, not installed).
 *
 * The team is made once: `helpers` threads besides the owner's, each with a
 * slot (1 to helpers; the owner's is 0). Each piece of work is one function
 * run once on every slot, with the caller's argument; the function tells its
 * part of the work from its slot, or takes parts from a shared counter (an
 * atomic the caller resets before each run). What a run leaves in memory is
 * visible to the owner once ssae_pool_run or ssae_pool_wait returns, and what
 * the owner wrote before it started is visible to every slot.
 *
 * Threads: one owner thread calls everything below (the object is not safe
 * for several callers at once); fn runs on the helpers and, in
 * ssae_pool_run, on the owner. Not for the audio thread: runs lock and wait. */
#ifndef SSAE_POOL_H
#define SSAE_POOL_H

typedef struct ssae_pool ssae_pool;
typedef void (*ssae_pool_fn)(void *arg, int slot);

/* A team of up to `helpers` threads (fewer when the system refuses some:
 * ssae_pool_helpers says how many started; 0 makes a pool that runs
 * everything on the owner). NULL only when out of memory. */
ssae_pool *ssae_pool_new(int helpers);

/* The helper threads that started (0 for NULL). */
int ssae_pool_helpers(const ssae_pool *p);

/* fn(arg, slot) on every slot, the owner's (0) included, and returns when
 * all are done. */
void ssae_pool_run(ssae_pool *p, ssae_pool_fn fn, void *arg);

/* fn(arg, slot) on the helpers alone (slots 1 to helpers), while the owner
 * goes on; ssae_pool_wait returns when they are done. With no helpers fn runs
 * on the owner, slot 0, before ssae_pool_start returns. Every start is
 * followed by a wait before the next start or run. */
void ssae_pool_start(ssae_pool *p, ssae_pool_fn fn, void *arg);
void ssae_pool_wait(ssae_pool *p);

/* Stops and joins the helpers (after the work under way); NULL is fine. */
void ssae_pool_free(ssae_pool *p);

#endif
