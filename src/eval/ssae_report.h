/* One recording to one picture (`ssae report`, and the plant service's
 * picture beside each alarm clip): decode, features, window scores on a
 * backend, the detector as the monitor runs it, ssae_report_draw. Any
 * thread; allocates. Built with cairo only (SSAE_HAVE_CAIRO). */
#ifndef SSAE_REPORT_H
#define SSAE_REPORT_H

#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_detector.h"
#include "ssae_err.h"
#include "ssae_filescore.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_report_opts {
  int channel;                  /* an index or SSAE_CHANNEL_MIX */
  ssae_audio_opts audio;        /* the reader's options */
  ssae_detector_params detector; /* threshold NAN: the model's */
  int width, height;            /* 0: 1200 x 800 */
  const char *model_name;       /* for the subtitle ("default" when NULL) */
} ssae_report_opts;

/* What the picture shows, for a caller that also says it in words. */
typedef struct ssae_report {
  ssae_file_scores fs;     /* frames kept */
  float *smoothed;         /* n_windows: the detector's line (NAN: none) */
  unsigned char *alarm;    /* n_windows: 1 while the alarm is on */
  double threshold;        /* the one used (NAN: none) */
} ssae_report;

/* Scores `in` with m on b and draws the picture at out (.png or .svg).
 * r (may be NULL) keeps what was drawn: release it with
 * ssae_report_release, also after a failure. -1 with the reason (file,
 * model, picture). */
int ssae_report_make(const ssae_model *m, ssae_backend *b, const char *in, const char *out,
                     const ssae_report_opts *o, ssae_report *r, ssae_err *err);
void ssae_report_release(ssae_report *r);

#ifdef __cplusplus
}
#endif
#endif
