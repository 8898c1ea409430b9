#include "ssae_ring.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RING_LINE 64

/* Indices count up forever (size_t wraps modulo a power of two, so
 * head - tail stays exact); slot = index & mask. The producer owns head, the
 * consumer owns tail; each side keeps its own index in a plain variable too,
 * and the last value it loaded of the other side's: it loads the other
 * side's index again (one acquire load) only when that cached value says
 * full (producer) or empty (consumer). While both sides are busy, a load per
 * item would move the other side's cache line across cores for every item;
 * with the cached value it moves once per run of items. Each operation
 * still makes one release store of its own index. */
struct ssae_ring {
  alignas(RING_LINE) _Atomic size_t head; /* written by the producer */
  size_t head_local;                      /* producer's own copy */
  size_t tail_cache;                      /* producer's last load of tail */
  alignas(RING_LINE) _Atomic size_t tail; /* written by the consumer */
  size_t tail_local;                      /* consumer's own copy */
  size_t head_cache;                      /* consumer's last load of head */
  alignas(RING_LINE) size_t mask;
  size_t item_size;   /* bytes the caller uses */
  size_t stride;      /* bytes per slot, multiple of RING_LINE */
  unsigned char *buf; /* aligned, touched at creation */
};

ssae_ring *ssae_ring_new(size_t capacity, size_t item_size, ssae_err *err) {
  if (item_size == 0) {
    ssae_err_set(err, "ring: item size must be positive");
    return NULL;
  }
  if (capacity < 2) capacity = 2;
  if (capacity > ((size_t)1 << 30)) {
    ssae_err_set(err, "ring: capacity %zu too large", capacity);
    return NULL;
  }
  size_t cap = 2;
  while (cap < capacity) cap <<= 1;
  size_t stride = (item_size + RING_LINE - 1) / RING_LINE * RING_LINE;
  if (item_size > SIZE_MAX / 2 || stride / RING_LINE > (SIZE_MAX / 2) / RING_LINE / cap) {
    ssae_err_set(err, "ring: %zu items of %zu bytes is too large", cap,
                 item_size);
    return NULL;
  }
  ssae_ring *r = aligned_alloc(RING_LINE, sizeof *r);
  if (!r) {
    ssae_err_set(err, "ring: out of memory");
    return NULL;
  }
  memset(r, 0, sizeof *r);
  /* Whole pages of its own: a device may page-lock exactly this memory
   * (ssae_ring_memory), which must share no page with other allocations. */
  const size_t page = 4096, bytes = (cap * stride + page - 1) / page * page;
  r->buf = aligned_alloc(page, bytes);
  if (!r->buf) {
    free(r);
    ssae_err_set(err, "ring: out of memory for %zu items of %zu bytes", cap,
                 item_size);
    return NULL;
  }
  /* Touch every page now: the audio thread must not take the first-touch
   * page faults. */
  memset(r->buf, 0, cap * stride);
  r->mask = cap - 1;
  r->item_size = item_size;
  r->stride = stride;
  atomic_init(&r->head, 0);
  atomic_init(&r->tail, 0);
  return r;
}

void ssae_ring_free(ssae_ring *r) {
  if (!r) return;
  free(r->buf);
  free(r);
}

size_t ssae_ring_capacity(const ssae_ring *r) { return r->mask + 1; }
size_t ssae_ring_item_size(const ssae_ring *r) { return r->item_size; }

void *ssae_ring_write_slot(ssae_ring *r) {
  size_t head = r->head_local;
  if (head - r->tail_cache > r->mask) {
    r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (head - r->tail_cache > r->mask) return NULL;
  }
  return r->buf + (head & r->mask) * r->stride;
}

void ssae_ring_commit(ssae_ring *r) {
  r->head_local++;
  atomic_store_explicit(&r->head, r->head_local, memory_order_release);
}

int ssae_ring_push(ssae_ring *r, const void *item) {
  void *slot = ssae_ring_write_slot(r);
  if (!slot) return -1;
  memcpy(slot, item, r->item_size);
  ssae_ring_commit(r);
  return 0;
}

const void *ssae_ring_read_slot(ssae_ring *r) {
  size_t tail = r->tail_local;
  if (tail == r->head_cache) {
    r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
    if (tail == r->head_cache) return NULL;
  }
  return r->buf + (tail & r->mask) * r->stride;
}

void ssae_ring_release(ssae_ring *r) {
  r->tail_local++;
  atomic_store_explicit(&r->tail, r->tail_local, memory_order_release);
}

const void *ssae_ring_peek(ssae_ring *r, size_t i) {
  const size_t tail = r->tail_local;
  if (i >= r->head_cache - tail) {
    r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
    if (i >= r->head_cache - tail) return NULL;
  }
  return r->buf + ((tail + i) & r->mask) * r->stride;
}

void ssae_ring_release_n(ssae_ring *r, size_t n) {
  if (!n) return;
  r->tail_local += n;
  atomic_store_explicit(&r->tail, r->tail_local, memory_order_release);
}

void *ssae_ring_memory(const ssae_ring *r, size_t *bytes, size_t *stride) {
  if (bytes) *bytes = (r->mask + 1) * r->stride;
  if (stride) *stride = r->stride;
  return r->buf;
}

int ssae_ring_pop(ssae_ring *r, void *item) {
  const void *slot = ssae_ring_read_slot(r);
  if (!slot) return -1;
  memcpy(item, slot, r->item_size);
  ssae_ring_release(r);
  return 0;
}

size_t ssae_ring_count(const ssae_ring *r) {
  size_t head = atomic_load_explicit(&r->head, memory_order_acquire);
  size_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
  return head - tail;
}
