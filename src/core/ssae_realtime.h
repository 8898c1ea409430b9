/* SSAE_REALTIME marks a function that is safe on the audio thread (SPEC
 * section 5): no allocation, no locks, no waiting, no system calls other
 * than a vDSO clock read, bounded work. It goes on the declaration, so that
 * a reader of a header sees which calls an audio callback may make. Under
 * clang it is also an annotation that tools can check (as zix's
 * ZIX_REALTIME); elsewhere it expands to nothing. */
#ifndef SSAE_REALTIME_H
#define SSAE_REALTIME_H

#if defined(__clang__)
#define SSAE_REALTIME __attribute__((annotate("realtime")))
#else
#define SSAE_REALTIME
#endif

#endif
