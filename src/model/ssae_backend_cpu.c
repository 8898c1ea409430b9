/* The CPU entry of the backend table, and the CPU's side of streams. impl
 * is an ssae_cpu (ssae_backend.c relies on that for ssae_backend_run_frames
 * and streams). */
#include "ssae_backend_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "ssae_backend.h"
#include "ssae_cpu.h"

static int cpu_available(void) { return 1; }

static void *cpu_create(const ssae_model *m, size_t max_batch, ssae_err *err) {
  (void)max_batch; /* the CPU path takes batches of any size */
  return ssae_cpu_new(m, 0, err);
}

static int cpu_run(void *impl, const float *x, size_t n, float *scores, float *recon,
                   ssae_err *err) {
  if (ssae_cpu_forward(impl, x, n, scores, recon))
    return ssae_err_set(err, "cpu: bad arguments to the forward pass");
  return 0;
}

static void cpu_destroy(void *impl) { ssae_cpu_free(impl); }

const ssae_backend_ops ssae_backend_cpu = {
    .name = "cpu",
    .available = cpu_available,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
};

/* ------------------------------------------------------------------ */
/* streams                                                             */

/* valid[c]: channel c's cache holds the codes of the last window of c
 * given to the stream (a window that continues it may then reuse them).
 * gen[c]: the call that channel c's window went to (one window per
 * channel and call). call_codes/call_cont: one call's arguments. */
struct ssae_cpu_streams {
  int channels;
  size_t call_max;
  double *codes;
  size_t codes_len;
  unsigned char *valid;
  uint32_t *gen, cur_gen;
  double **call_codes;
  unsigned char *call_cont;
};

ssae_cpu_streams *ssae_cpu_streams_new(int channels, size_t call_max, ssae_err *err) {
  if (channels < 1 || !call_max) {
    ssae_err_set(err, "backend: a stream needs channels (got %d)", channels);
    return NULL;
  }
  ssae_cpu_streams *s = calloc(1, sizeof *s);
  if (s) {
    s->channels = channels;
    s->call_max = call_max;
    s->valid = calloc((size_t)channels, 1);
    s->gen = calloc((size_t)channels, sizeof *s->gen);
    s->call_codes = calloc(call_max, sizeof *s->call_codes);
    s->call_cont = calloc(call_max, 1);
  }
  if (!s || !s->valid || !s->gen || !s->call_codes || !s->call_cont) {
    ssae_cpu_streams_free(s);
    ssae_err_set(err, "backend: out of memory for %d streams", channels);
    return NULL;
  }
  return s;
}

void ssae_cpu_streams_free(ssae_cpu_streams *s) {
  if (!s) return;
  free(s->codes);
  free(s->valid);
  free(s->gen);
  free(s->call_codes);
  free(s->call_cont);
  free(s);
}

int ssae_cpu_streams_channels(const ssae_cpu_streams *s) { return s->channels; }

int ssae_cpu_streams_fit(ssae_cpu_streams *s, const ssae_cpu *cpu) {
  const size_t len = ssae_cpu_codes_len(cpu);
  if (len == s->codes_len && s->codes) return 0;
  double *p = malloc((size_t)s->channels * len * sizeof *p);
  if (!p) return -1;
  memset(p, 0, (size_t)s->channels * len * sizeof *p);
  free(s->codes);
  s->codes = p;
  s->codes_len = len;
  memset(s->valid, 0, (size_t)s->channels);
  return 0;
}

void ssae_cpu_streams_forget(ssae_cpu_streams *s, const uint32_t *channel, size_t n) {
  if (!channel) {
    memset(s->valid, 0, (size_t)s->channels);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (channel[i] < (uint32_t)s->channels) s->valid[channel[i]] = 0;
}

int ssae_cpu_streams_score(ssae_cpu_streams *s, ssae_cpu *cpu, const ssae_span *sp, int nsp,
                           size_t n, const uint32_t *channel, const unsigned char *cont,
                           size_t wf, float *scores) {
  const float *x0 = NULL; /* the call being gathered: k windows from x0 on */
  size_t k = 0, i = 0;    /* i: windows assigned to calls so far */
  s->cur_gen++;
  for (int p = 0; p <= nsp; p++) {
    const size_t pn = p < nsp ? sp[p].n : 0;
    for (size_t j = 0; j <= pn; j++) {
      const int end = p == nsp; /* past the last window */
      if (j == pn && !end) break;
      const float *x = end ? NULL : sp[p].x + j * sp[p].pitch;
      const uint32_t c = end ? 0 : channel ? channel[i] : (uint32_t)i;
      if (!end && (i >= n || c >= (uint32_t)s->channels)) {
        ssae_cpu_streams_forget(s, channel, n);
        return -1;
      }
      /* A call ends at the last window, before a window that does not lie
       * right after the call's, before a channel's second window and at
       * call_max windows. */
      if (k && (end || x != x0 + k * wf || s->gen[c] == s->cur_gen || k == s->call_max)) {
        if (ssae_cpu_score_cached(cpu, x0, k, s->call_codes, s->call_cont, scores + i - k)) {
          ssae_cpu_streams_forget(s, channel, n);
          return -1;
        }
        k = 0;
        s->cur_gen++;
      }
      if (end) break;
      if (!k) x0 = x;
      s->gen[c] = s->cur_gen;
      s->call_codes[k] = s->codes + (size_t)c * s->codes_len;
      s->call_cont[k] = (unsigned char)(cont && cont[i] && s->valid[c]);
      s->valid[c] = 1;
      k++;
      i++;
    }
  }
  if (i != n) {
    ssae_cpu_streams_forget(s, channel, n);
    return -1;
  }
  return 0;
}
