/* Private to src/model: the CPU backend's side of streams
 * (ssae_backend_stream_open): one slice-code cache per channel, so that a
 * channel's window that follows its previous one has only its new frame
 * encoded (ssae_cpu_score_cached). ssae_backend.c drives it; it lives with
 * the CPU backend because only the CPU keeps codes between calls. */
#ifndef SSAE_BACKEND_CPU_H
#define SSAE_BACKEND_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_backend.h"
#include "ssae_cpu.h"

typedef struct ssae_cpu_streams ssae_cpu_streams;

/* channels streams; calls of at most call_max windows. No caches yet
 * (ssae_cpu_streams_fit). */
ssae_cpu_streams *ssae_cpu_streams_new(int channels, size_t call_max, ssae_err *err);
void ssae_cpu_streams_free(ssae_cpu_streams *s);
int ssae_cpu_streams_channels(const ssae_cpu_streams *s);

/* Caches of cpu's code size, allocated and touched (page faults now, not
 * at the first windows) when their size differs from the present ones;
 * every channel then starts afresh. 0, or -1 out of memory (the old
 * caches stay, unused). */
int ssae_cpu_streams_fit(ssae_cpu_streams *s, const ssae_cpu *cpu);

/* The channels of n windows (channel NULL: every channel) start afresh:
 * their windows went elsewhere (a device, the plain forward pass), so the
 * caches do not hold their codes. */
void ssae_cpu_streams_forget(ssae_cpu_streams *s, const uint32_t *channel, size_t n);

/* Scores the spans' windows (wf floats each; n in all, window i of
 * channel[i], cont[i] as in ssae_backend_stream_submit) on cpu through the
 * caches, after ssae_cpu_streams_fit with that cpu: windows that lie one
 * after another go in one call, cut before a channel's second window.
 * channel NULL: window i is channel i's (cont NULL: none continues).
 * Bit-identical to ssae_cpu_forward. -1 on bad arguments (the windows'
 * channels are then forgotten). */
int ssae_cpu_streams_score(ssae_cpu_streams *s, ssae_cpu *cpu, const ssae_span *sp, int nsp,
                           size_t n, const uint32_t *channel, const unsigned char *cont,
                           size_t wf, float *scores);

#endif
