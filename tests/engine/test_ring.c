/* SPSC ring: single-thread semantics, then a multi-million-item two-thread
 * stress run (also run under ThreadSanitizer) checking order and content. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_ring.h"

#define CHECK(c)                                                   \
  do {                                                             \
    if (!(c)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      exit(1);                                                     \
    }                                                              \
  } while (0)

typedef struct item {
  uint64_t seq;
  uint64_t check;
  uint32_t words[6];
} item;

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static void fill(item *it, uint64_t seq) {
  it->seq = seq;
  it->check = mix(seq);
  for (int i = 0; i < 6; i++) it->words[i] = (uint32_t)(seq * 7 + (uint64_t)i);
}

static int valid(const item *it, uint64_t seq) {
  if (it->seq != seq || it->check != mix(seq)) return 0;
  for (int i = 0; i < 6; i++)
    if (it->words[i] != (uint32_t)(seq * 7 + (uint64_t)i)) return 0;
  return 1;
}

static uint64_t n_items;
static uint64_t producer_full;

static void *producer(void *arg) {
  ssae_ring *r = arg;
  item it;
  for (uint64_t s = 0; s < n_items;) {
    if (s & 1) {
      /* zero-copy path */
      item *slot = ssae_ring_write_slot(r);
      if (!slot) {
        /* Spin a little (real contention), then let the other side run:
         * the machine may have fewer free cores than threads. */
        if (++producer_full % 32 == 0) sched_yield();
        continue;
      }
      fill(slot, s);
      ssae_ring_commit(r);
    } else {
      fill(&it, s);
      if (ssae_ring_push(r, &it)) {
        /* Spin a little (real contention), then let the other side run:
         * the machine may have fewer free cores than threads. */
        if (++producer_full % 32 == 0) sched_yield();
        continue;
      }
    }
    s++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  n_items = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000000;
  ssae_err err;

  /* Single thread: capacity rounding, full, empty, wrap-around. */
  CHECK(!ssae_ring_new(8, 0, &err));
  ssae_ring *r = ssae_ring_new(5, sizeof(item), &err);
  CHECK(r);
  CHECK(ssae_ring_capacity(r) == 8);
  CHECK(ssae_ring_item_size(r) == sizeof(item));
  item it;
  CHECK(ssae_ring_pop(r, &it) == -1);
  CHECK(ssae_ring_read_slot(r) == NULL);
  for (uint64_t round = 0; round < 5; round++) {
    for (uint64_t i = 0; i < 8; i++) {
      fill(&it, round * 100 + i);
      CHECK(ssae_ring_push(r, &it) == 0);
    }
    CHECK(ssae_ring_count(r) == 8);
    fill(&it, 999);
    CHECK(ssae_ring_push(r, &it) == -1); /* full: nothing written */
    CHECK(ssae_ring_write_slot(r) == NULL);
    for (uint64_t i = 0; i < 8; i++) {
      CHECK(ssae_ring_pop(r, &it) == 0);
      CHECK(valid(&it, round * 100 + i));
    }
    CHECK(ssae_ring_count(r) == 0);
    /* Leave the indices off zero so that the next round wraps. */
    fill(&it, 7);
    CHECK(ssae_ring_push(r, &it) == 0);
    CHECK(ssae_ring_pop(r, &it) == 0 && valid(&it, 7));
  }
  /* Items kept in place past later reads (peek), released together. */
  for (uint64_t i = 0; i < 6; i++) {
    fill(&it, 40 + i);
    CHECK(ssae_ring_push(r, &it) == 0);
  }
  for (uint64_t i = 0; i < 6; i++) CHECK(valid(ssae_ring_peek(r, i), 40 + i));
  CHECK(ssae_ring_peek(r, 6) == NULL);
  CHECK(ssae_ring_peek(r, 0) == ssae_ring_read_slot(r));
  ssae_ring_release_n(r, 0);
  CHECK(ssae_ring_count(r) == 6);
  ssae_ring_release_n(r, 4);
  CHECK(ssae_ring_count(r) == 2 && valid(ssae_ring_peek(r, 0), 44));
  for (uint64_t i = 0; i < 6; i++) { /* the freed slots are writable again */
    fill(&it, 50 + i);
    CHECK(ssae_ring_push(r, &it) == 0);
  }
  CHECK(ssae_ring_push(r, &it) == -1);
  CHECK(valid(ssae_ring_peek(r, 7), 55) && ssae_ring_peek(r, 8) == NULL);
  ssae_ring_release_n(r, 8);
  CHECK(ssae_ring_count(r) == 0 && ssae_ring_peek(r, 0) == NULL);
  size_t bytes = 0, stride = 0;
  unsigned char *mem = ssae_ring_memory(r, &bytes, &stride);
  CHECK(mem && stride >= sizeof(item) && stride % 64 == 0 && bytes == 8 * stride);
  ssae_ring_free(r);
  ssae_ring_free(NULL);

  /* Two threads, a small ring so that it is full and empty often. */
  r = ssae_ring_new(64, sizeof(item), &err);
  CHECK(r);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, producer, r) == 0);
  uint64_t expect = 0, empty = 0;
  while (expect < n_items) {
    if ((expect & 12) == 12) {
      /* In place, several at once (as the GPU worker takes windows). */
      uint64_t k = 0;
      const item *slot;
      while (k < 5 && expect + k < n_items && (slot = ssae_ring_peek(r, k))) {
        if (!valid(slot, expect + k)) {
          fprintf(stderr, "item %llu corrupt or out of order (peeked seq %llu)\n",
                  (unsigned long long)(expect + k), (unsigned long long)slot->seq);
          return 1;
        }
        k++;
      }
      if (!k) {
        if (++empty % 32 == 0) sched_yield();
        continue;
      }
      ssae_ring_release_n(r, k);
      expect += k;
      continue;
    }
    if (expect & 2) {
      const item *slot = ssae_ring_read_slot(r);
      if (!slot) {
        if (++empty % 32 == 0) sched_yield();
        continue;
      }
      if (!valid(slot, expect)) {
        fprintf(stderr, "item %llu corrupt or out of order (got seq %llu)\n",
                (unsigned long long)expect, (unsigned long long)slot->seq);
        return 1;
      }
      ssae_ring_release(r);
    } else {
      if (ssae_ring_pop(r, &it)) {
        if (++empty % 32 == 0) sched_yield();
        continue;
      }
      if (!valid(&it, expect)) {
        fprintf(stderr, "item %llu corrupt or out of order (got seq %llu)\n",
                (unsigned long long)expect, (unsigned long long)it.seq);
        return 1;
      }
    }
    expect++;
  }
  pthread_join(th, NULL);
  CHECK(ssae_ring_count(r) == 0);
  ssae_ring_free(r);
  printf("ring: %llu items through a 64-slot ring in order (producer saw full "
         "%llu times, consumer saw empty %llu times)\n",
         (unsigned long long)n_items, (unsigned long long)producer_full,
         (unsigned long long)empty);
  return 0;
}
