/* The fork-join pool (src/core/ssae_pool.h): every slot runs once per run,
 * the owner's writes before a run are seen by every slot and the slots'
 * writes by the owner after it, start/wait leaves the owner free meanwhile,
 * runs back to back, far apart and with one slot much slower than the
 * others (the owner's or a helper's) all work, a pool without helpers runs
 * on its owner, and free takes what new made.
 * Runs under ThreadSanitizer (tools/test-sanitizers.sh). */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "../ssae_test.h"
#include "ssae_pool.h"

#define MAX_SLOTS 64

typedef struct {
  int round;               /* written by the owner before each run */
  int seen[MAX_SLOTS];     /* each slot writes its own: the round it saw */
  int calls[MAX_SLOTS];    /* plain counters, one writer each */
  atomic_int total;        /* calls in all */
  atomic_size_t next;      /* a shared counter of parts, as the library's loops use */
  int slow_slot;           /* this slot sleeps first (-1: none) */
  long long parts[1000];
} shared;

static void each_slot(void *arg, int slot) {
  shared *s = arg;
  s->seen[slot] = s->round;
  s->calls[slot]++;
  atomic_fetch_add(&s->total, 1);
}

static void sleep_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

/* each_slot, with s->slow_slot (if any) 2 ms later than the others. */
static void each_slot_slow_one(void *arg, int slot) {
  shared *s = arg;
  if (slot == s->slow_slot) sleep_us(2000);
  each_slot(arg, slot);
}

static void take_parts(void *arg, int slot) {
  shared *s = arg;
  (void)slot;
  for (;;) {
    size_t i = atomic_fetch_add(&s->next, 1);
    if (i >= 1000) break;
    s->parts[i] = (long long)i * s->round;
  }
}

/* Round r on every slot (s->slow_slot's late), and what each slot saw. */
static void run_round(ssae_pool *p, shared *s, int r, int h) {
  s->round = r;
  atomic_store(&s->total, 0);
  ssae_pool_run(p, each_slot_slow_one, s);
  CHECK(atomic_load(&s->total) == h + 1, "run %d: %d calls for %d slots", r,
        atomic_load(&s->total), h + 1);
  for (int k = 0; k <= h; k++)
    CHECK(s->seen[k] == r && s->calls[k] == r, "run %d: slot %d saw round %d, %d calls", r, k,
          s->seen[k], s->calls[k]);
}

static void check_pool(int helpers_asked) {
  ssae_pool *p = ssae_pool_new(helpers_asked);
  CHECK(p, "ssae_pool_new(%d) returned NULL", helpers_asked);
  if (!p) return;
  const int h = ssae_pool_helpers(p);
  CHECK(h >= 0 && h <= (helpers_asked > 0 ? helpers_asked : 0), "%d helpers for %d asked", h,
        helpers_asked);
  shared *s = calloc(1, sizeof *s);
  s->slow_slot = -1;
  for (int r = 1; r <= 200; r++) {
    run_round(p, s, r, h);
    for (int k = h + 1; k < MAX_SLOTS; k++) CHECK(s->calls[k] == 0, "slot %d ran", k);
    /* shared parts, then the owner reads every part */
    atomic_store(&s->next, 0);
    ssae_pool_run(p, take_parts, s);
    long long sum = 0;
    for (int i = 0; i < 1000; i++) sum += s->parts[i];
    CHECK(sum == 499500LL * r, "run %d: parts sum %lld", r, sum);
  }
  /* runs far apart (the helpers asleep when the next comes) and back to
   * back, some with one slot slow: the owner's (the helpers done first) or
   * the last helper's (the owner waiting for it) */
  for (int r = 201; r <= 260; r++) {
    s->slow_slot = r % 3 == 0 ? h : r % 5 == 0 ? 0 : -1;
    run_round(p, s, r, h);
    if (r % 4 < 2) sleep_us(r % 4 ? 300 : 1500);
  }
  /* start / wait: the helpers alone (or the owner, slot 0, when none), the
   * owner free in between */
  memset(s->calls, 0, sizeof s->calls);
  atomic_store(&s->total, 0);
  s->round = 1000;
  for (int r = 0; r < 100; r++) {
    ssae_pool_start(p, each_slot, s);
    /* The owner busy meanwhile (read back so that no compiler drops it). */
    volatile int owner_work = 0;
    for (int i = 0; i < 1000; i++) owner_work += i;
    CHECK(owner_work == 499500, "the owner's own work: %d", owner_work);
    ssae_pool_wait(p);
  }
  const int per = h ? h : 1;
  CHECK(atomic_load(&s->total) == 100 * per, "start/wait: %d calls, want %d",
        atomic_load(&s->total), 100 * per);
  if (h) {
    CHECK(s->calls[0] == 0, "start/wait ran on the owner's slot with %d helpers", h);
    for (int k = 1; k <= h; k++) CHECK(s->calls[k] == 100, "slot %d: %d calls", k, s->calls[k]);
  } else {
    CHECK(s->calls[0] == 100, "no helpers: the owner ran %d of 100", s->calls[0]);
  }
  free(s);
  ssae_pool_free(p);
}

int main(void) {
  int sizes[] = {0, 1, 3, 16, MAX_SLOTS - 1, -5};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) check_pool(sizes[i]);
  /* made and freed without a run; NULL */
  ssae_pool_free(ssae_pool_new(4));
  ssae_pool_free(NULL);
  CHECK(ssae_pool_helpers(NULL) == 0, "helpers of NULL");
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("pool: every slot once a run, shared parts, start/wait, 0 to %d helpers: ok\n",
         MAX_SLOTS - 1);
  return 0;
}
