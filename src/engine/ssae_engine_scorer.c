/* The models the engine scores with: WORKER THREAD (submit, collect,
 * warm), built and freed by the CONTROL THREAD (creation, model swap).
 *
 * Every channel has a model; channels that share a model share one backend
 * (ssae_backend, one stream over those channels). With one model, which
 * is the common case (and the LV2 plugin's, JACK's, the monitor's without a
 * config), the worker's batch goes to that backend as it is: in place in
 * the rings, asynchronously on the GPU. With several (one per machine in a
 * plant config), a batch is laid out by model (each model's windows
 * together, in arrival order within a model), each part goes to its
 * model's backend, and the scores come back to the batch's order: the
 * worker and the detector see one batch either way. The models must agree
 * on their features (one front end makes the windows for all of them):
 * ssae_engine_new and swap refuse models that do not. */
#include <stdlib.h>
#include <string.h>

#include "ssae_engine_internal.h"

/* The first feature setting in which a and b differ ("" when none). */
const char *engine_feature_diff(const ssae_model *a, const ssae_model *b) {
  const ssae_feat_cfg *x = &a->feat, *y = &b->feat;
  if (x->sample_rate != y->sample_rate) return "sample_rate";
  if (x->n_fft != y->n_fft) return "n_fft";
  if (x->hop_length != y->hop_length) return "hop_length";
  if (x->center != y->center) return "center";
  if (x->pad_mode != y->pad_mode) return "pad_mode";
  if (x->n_mels != y->n_mels || a->d.n_mels != b->d.n_mels) return "n_mels";
  if (x->fmin != y->fmin) return "fmin";
  if (x->fmax != y->fmax) return "fmax";
  if (x->mel_scale != y->mel_scale) return "mel_scale";
  if (x->mel_norm != y->mel_norm) return "mel_norm";
  if (x->power != y->power) return "power";
  if (x->frames != y->frames || a->d.frames != b->d.frames) return "frames";
  return "";
}

void engine_scorer_free(engine_scorer *sc) {
  if (!sc) return;
  for (int k = 0; sc->b && k < sc->K; k++) ssae_backend_free(sc->b[k]);
  free(sc->b);
  free(sc->model);
  free(sc->chan_model);
  free(sc->chan_local);
  for (int s = 0; s < 2; s++) {
    free(sc->px[s]);
    free(sc->pch[s]);
    free(sc->pcont[s]);
    free(sc->ppos[s]);
    free(sc->psc[s]);
    free(sc->off[s]);
    free(sc->psp[s]);
  }
  free(sc);
}

engine_scorer *engine_scorer_new(ssae_engine *e, const ssae_model *const *chan_models,
                                 const ssae_model *m, ssae_err *err) {
  const int C = e->C;
  engine_scorer *sc = calloc(1, sizeof *sc);
  if (!sc) goto oom;
  sc->chan_model = calloc((size_t)C, sizeof *sc->chan_model);
  sc->chan_local = calloc((size_t)C, sizeof *sc->chan_local);
  sc->model = calloc((size_t)C, sizeof *sc->model);
  if (!sc->chan_model || !sc->chan_local || !sc->model) goto oom;
  /* The distinct models, in the order of their first channel. */
  for (int c = 0; c < C; c++) {
    const ssae_model *mc = chan_models && chan_models[c] ? chan_models[c] : m;
    if (!mc) {
      ssae_err_set(err, "engine: channel %d has no model", c);
      goto fail;
    }
    int k = 0;
    while (k < sc->K && sc->model[k] != mc) k++;
    if (k == sc->K) {
      if (mc->feat.frames != mc->d.frames || mc->feat.n_mels != mc->d.n_mels) {
        ssae_err_set(err, "engine: channel %d's model: its features (%d frames x %d mels) "
                          "do not match its dimensions (%d x %d)", c, mc->feat.frames,
                     mc->feat.n_mels, mc->d.frames, mc->d.n_mels);
        goto fail;
      }
      const char *d = engine_feature_diff(mc, m ? m : sc->K ? sc->model[0] : mc);
      if (*d) {
        ssae_err_set(err, "engine: channel %d's model computes other features than "
                          "the engine's (%s differs): one front end makes the windows "
                          "of every channel", c, d);
        goto fail;
      }
      sc->model[sc->K++] = mc;
    }
    sc->chan_model[c] = k;
  }
  /* Each model's stream numbers its own channels 0, 1, ... */
  int *count = calloc((size_t)sc->K, sizeof *count);
  if (!count) goto oom;
  for (int c = 0; c < C; c++) sc->chan_local[c] = (uint32_t)count[sc->chan_model[c]]++;
  sc->b = calloc((size_t)sc->K, sizeof *sc->b);
  if (!sc->b) {
    free(count);
    goto oom;
  }
  for (int k = 0; k < sc->K; k++) {
    sc->b[k] = ssae_backend_new_threads(sc->model[k], e->cfg.backend, e->w.max_batch,
                                        e->cfg.cpu_threads, err);
    if (sc->b[k]) {
      ssae_backend_set_fallback_cb(sc->b[k], engine_on_fallback, e);
      if (ssae_backend_stream_open(sc->b[k], count[k], err)) {
        ssae_backend_free(sc->b[k]);
        sc->b[k] = NULL;
      }
    }
    if (!sc->b[k]) {
      if (sc->K > 1) {
        int c0 = 0;
        while (sc->chan_model[c0] != k) c0++;
        ssae_err_prefix(err, "engine: the model of channel %d", c0);
      }
      free(count);
      goto fail;
    }
  }
  free(count);
  if (sc->K > 1) {
    const size_t nb = e->w.max_batch, wf = (size_t)e->wf;
    for (int s = 0; s < 2; s++) {
      sc->px[s] = malloc(nb * wf * sizeof(float));
      sc->pch[s] = malloc(nb * sizeof(uint32_t));
      sc->pcont[s] = malloc(nb);
      sc->ppos[s] = malloc(nb * sizeof(uint32_t));
      sc->psc[s] = malloc(nb * sizeof(float));
      sc->off[s] = calloc((size_t)sc->K + 1, sizeof(size_t));
      sc->psp[s] = calloc((size_t)sc->K, sizeof(ssae_span));
      if (!sc->px[s] || !sc->pch[s] || !sc->pcont[s] || !sc->ppos[s] || !sc->psc[s] ||
          !sc->off[s] || !sc->psp[s])
        goto oom;
    }
  }
  return sc;
oom:
  ssae_err_set(err, "engine: out of memory for the models");
fail:
  engine_scorer_free(sc);
  return NULL;
}

int engine_scorer_async(const engine_scorer *sc, size_t n) {
  return sc->K == 1 && ssae_backend_stream_async(sc->b[0], n);
}

int engine_scorer_spans_direct(const engine_scorer *sc) {
  return sc->K == 1 && ssae_backend_spans_direct(sc->b[0]);
}

float *engine_scorer_input_buffer(engine_scorer *sc, int slot) {
  size_t cap = 0;
  return sc->K == 1 ? ssae_backend_input_buffer(sc->b[0], slot, &cap) : NULL;
}

const char *engine_scorer_name(const engine_scorer *sc) { return ssae_backend_name(sc->b[0]); }

void engine_scorer_warm(engine_scorer *sc, const float *x, size_t n, float *scores) {
  for (int k = 0; k < sc->K; k++) ssae_backend_warm(sc->b[k], x, n, scores);
}

int engine_scorer_submit(engine_scorer *sc, int slot, const ssae_span *sp, int nsp, size_t n,
                         const uint32_t *chan, const unsigned char *cont, size_t wf,
                         ssae_err *err) {
  if (sc->K == 1)
    return ssae_backend_stream_submit(sc->b[0], slot, sp, nsp, n, chan, cont, err);
  size_t *off = sc->off[slot];
  memset(off, 0, ((size_t)sc->K + 1) * sizeof *off);
  for (size_t i = 0; i < n; i++) off[sc->chan_model[chan[i]] + 1]++;
  for (int k = 0; k < sc->K; k++) off[k + 1] += off[k];
  /* Each model's windows together, in arrival order; off[k] is model k's
   * next place while they are laid out, its end afterwards. */
  size_t i = 0;
  for (int j = 0; j < nsp; j++)
    for (size_t w = 0; w < sp[j].n; w++, i++) {
      const int k = sc->chan_model[chan[i]];
      const size_t at = off[k]++;
      memcpy(sc->px[slot] + at * wf, sp[j].x + w * sp[j].pitch, wf * sizeof(float));
      sc->pch[slot][at] = sc->chan_local[chan[i]];
      sc->pcont[slot][at] = cont[i];
      sc->ppos[slot][at] = (uint32_t)i;
    }
  int rc = 0;
  for (int k = 0; k < sc->K; k++) {
    const size_t a = k ? off[k - 1] : 0, cnt = off[k] - a;
    sc->psp[slot][k] = (ssae_span){sc->px[slot] + a * wf, cnt, wf};
    if (!rc && ssae_backend_stream_submit(sc->b[k], slot, &sc->psp[slot][k], 1, cnt,
                                          sc->pch[slot] + a, sc->pcont[slot] + a, err))
      rc = -1;
  }
  sc->n[slot] = n;
  return rc;
}

int engine_scorer_collect(engine_scorer *sc, int slot, float *scores, ssae_err *err) {
  if (sc->K == 1) return ssae_backend_collect(sc->b[0], slot, scores, err);
  const size_t *off = sc->off[slot];
  int rc = 0;
  /* Every model's part is collected, even after one failed (its slot
   * must be free for the next submit). */
  for (int k = 0; k < sc->K; k++) {
    const size_t a = k ? off[k - 1] : 0;
    ssae_err e = {{0}};
    if (ssae_backend_collect(sc->b[k], slot, sc->psc[slot] + a, &e) && !rc) {
      rc = -1;
      ssae_err_set(err, "%s", e.msg);
    }
  }
  for (size_t i = 0; i < sc->n[slot]; i++) scores[sc->ppos[slot][i]] = sc->psc[slot][i];
  return rc;
}

double engine_scorer_threshold(const engine_scorer *sc, int ch) {
  return sc->model[sc->chan_model[ch]]->threshold;
}
