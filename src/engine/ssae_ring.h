/* Single-producer single-consumer lock-free ring of fixed-size items
 * (SPEC section 5). One thread pushes (the audio thread), one thread pops
 * (the worker). C11 atomics with acquire/release ordering; the two indices
 * live on separate cache lines; the capacity is a power of two; all memory
 * is allocated and touched at creation, so that neither side page-faults.
 *
 * Each side makes one release store of its own index per operation and at
 * most one acquire load of the other side's (the zix ring discipline), and
 * only when the value it loaded last says full (producer) or empty
 * (consumer): while both sides are busy the other side's cache line then
 * crosses cores once per run of items, not once per item. */
#ifndef SSAE_RING_H
#define SSAE_RING_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_ring ssae_ring;

/* capacity: number of items, rounded up to a power of two (>= 2).
 * item_size: bytes per item; every slot is aligned to 64 bytes. */
ssae_ring *ssae_ring_new(size_t capacity, size_t item_size, ssae_err *err);
void ssae_ring_free(ssae_ring *r);

SSAE_REALTIME size_t ssae_ring_capacity(const ssae_ring *r);
SSAE_REALTIME size_t ssae_ring_item_size(const ssae_ring *r);

/* ---- producer side (one thread). Audio-thread safe: no allocation, no
 * locks, no system calls, O(1). ---- */

/* The slot the next item goes into, or NULL when the ring is full. Fill it,
 * then ssae_ring_commit(). */
SSAE_REALTIME void *ssae_ring_write_slot(ssae_ring *r);
SSAE_REALTIME void ssae_ring_commit(ssae_ring *r);
/* Copies item_size bytes in. Returns 0, or -1 when full (nothing written). */
SSAE_REALTIME int ssae_ring_push(ssae_ring *r, const void *item);

/* ---- consumer side (one thread). Also lock-free and allocation-free. ---- */

/* The oldest item, or NULL when empty. Read it, then ssae_ring_release(). */
SSAE_REALTIME const void *ssae_ring_read_slot(ssae_ring *r);
SSAE_REALTIME void ssae_ring_release(ssae_ring *r);
/* Item i after the oldest unreleased one (i = 0: that one), or NULL when
 * fewer than i + 1 are readable: a consumer may take items in place and
 * keep them (e.g. while a device copies them) past later reads, then
 * release the oldest n at once (one release store). */
SSAE_REALTIME const void *ssae_ring_peek(ssae_ring *r, size_t i);
SSAE_REALTIME void ssae_ring_release_n(ssae_ring *r, size_t n);
/* Copies the oldest item out. Returns 0, or -1 when empty. */
SSAE_REALTIME int ssae_ring_pop(ssae_ring *r, void *item);

/* The slot array (capacity x stride bytes, slot i of the index at
 * (index & (capacity-1)) * stride), e.g. to page-lock it for a device. */
void *ssae_ring_memory(const ssae_ring *r, size_t *bytes, size_t *stride);
/* Items readable now (exact for the consumer, a lower bound elsewhere). */
SSAE_REALTIME size_t ssae_ring_count(const ssae_ring *r);

#ifdef __cplusplus
}
#endif
#endif
