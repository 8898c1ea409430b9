/* A `ssae report` picture beside each alarm clip: a thread of its own
 * renders them one after another (decode, features and scores on the CPU,
 * the detector, cairo), so that neither the clip writer nor the engine
 * waits; a bounded queue, a picture dropped (and reported) when it is
 * full. Built with cairo only (SSAE_HAVE_CAIRO); ssae_clip_pictures_new
 * says so otherwise.
 *
 * Thread context: new/free on the service's main thread; add from the
 * clips' writer thread (any thread); the callbacks on the picture thread. */
#ifndef SSAE_CLIP_PICTURES_H
#define SSAE_CLIP_PICTURES_H

#include "ssae_detector.h"
#include "ssae_err.h"

typedef struct ssae_clip_pictures ssae_clip_pictures;

typedef struct ssae_clip_pictures_cfg {
  /* What channel's picture needs, at the time it is drawn (names and
   * models follow a reload): its model file (a malloc'd copy, or NULL for
   * the built-in model) and its detector settings. 0, or -1 (no picture). */
  int (*machine)(void *user, int channel, char **model_file, ssae_detector_params *dp);
  /* Done: picture is the PNG's path, or NULL with error saying why. */
  void (*done)(void *user, int channel, const char *id, const char *clip,
               const char *picture, const char *error);
  void *user;
  int queue; /* pictures waiting at most (0: 16) */
} ssae_clip_pictures_cfg;

ssae_clip_pictures *ssae_clip_pictures_new(const ssae_clip_pictures_cfg *cfg, ssae_err *err);
/* Queues the picture of a written clip (its path's extension becomes
 * .png). Never waits for a picture; when the queue is full, done() reports
 * the drop at once, on the calling thread. */
void ssae_clip_pictures_add(ssae_clip_pictures *p, int channel, const char *id,
                            const char *clip);
/* Draws what is queued, stops the thread, frees. Accepts NULL. */
void ssae_clip_pictures_free(ssae_clip_pictures *p);

/* clip's path with its extension replaced by .png, in out (len bytes);
 * -1 when it does not fit. */
int ssae_clip_picture_path(const char *clip, char *out, size_t len);

#endif
