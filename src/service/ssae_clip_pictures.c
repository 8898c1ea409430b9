/* A picture beside each alarm clip (ssae_clip_pictures.h): PICTURE THREAD,
 * but for new/add/free. */
#include "ssae_clip_pictures.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_config.h"

#if SSAE_HAVE_CAIRO
#include "ssae_backend.h"
#include "ssae_model.h"
#include "ssae_plot.h"
#include "ssae_report.h"
#endif

typedef struct pic_req {
  int channel;
  char id[64];
  char *clip;
} pic_req;

struct ssae_clip_pictures {
  ssae_clip_pictures_cfg cfg;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pic_req *q; /* ring of cfg.queue */
  int head, n, stop;
};

int ssae_clip_picture_path(const char *clip, char *out, size_t len) {
  const char *slash = strrchr(clip, '/'), *dot = strrchr(clip, '.');
  size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - clip) : strlen(clip);
  if (stem + 5 > len) return -1;
  memcpy(out, clip, stem);
  memcpy(out + stem, ".png", 5);
  return 0;
}

#if SSAE_HAVE_CAIRO
/* One picture: the machine's model on a one-thread CPU backend (the cores
 * belong to the engine), channel 0 of the clip. */
static void draw(ssae_clip_pictures *p, const pic_req *r) {
  char png[4096], msg[SSAE_ERR_LEN + 64] = "";
  ssae_err err = {{0}};
  char *model_file = NULL;
  ssae_detector_params dp;
  ssae_detector_params_default(&dp);
  ssae_model *m = NULL;
  ssae_backend *b = NULL;
  if (ssae_clip_picture_path(r->clip, png, sizeof png)) {
    snprintf(msg, sizeof msg, "the picture's path is too long");
  } else if (p->cfg.machine(p->cfg.user, r->channel, &model_file, &dp)) {
    snprintf(msg, sizeof msg, "the machine is gone");
  } else if (!(m = ssae_model_open(model_file, &err)) ||
             !(b = ssae_backend_new_threads(m, "cpu", 256, 1, &err))) {
    snprintf(msg, sizeof msg, "%s", err.msg);
  } else {
    const char *slash = model_file ? strrchr(model_file, '/') : NULL;
    ssae_report_opts o = {.channel = 0, .detector = dp,
                          .model_name = model_file ? (slash ? slash + 1 : model_file)
                                                   : "default"};
    if (ssae_report_make(m, b, r->clip, png, &o, NULL, &err))
      snprintf(msg, sizeof msg, "%s", err.msg);
  }
  ssae_backend_free(b);
  ssae_model_free(m);
  free(model_file);
  p->cfg.done(p->cfg.user, r->channel, r->id, r->clip, msg[0] ? NULL : png,
              msg[0] ? msg : NULL);
}

static void *picture_main(void *arg) {
  ssae_clip_pictures *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->n && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
    if (!p->n) break; /* stopping, nothing left */
    pic_req r = p->q[p->head];
    p->head = (p->head + 1) % p->cfg.queue;
    p->n--;
    pthread_mutex_unlock(&p->mu);
    draw(p, &r);
    free(r.clip);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  ssae_plot_cleanup();
  return NULL;
}
#endif

ssae_clip_pictures *ssae_clip_pictures_new(const ssae_clip_pictures_cfg *cfg, ssae_err *err) {
#if !SSAE_HAVE_CAIRO
  (void)cfg;
  ssae_err_set(err, "this ssae was built without cairo (libcairo2-dev): no clip pictures");
  return NULL;
#else
  if (!cfg || !cfg->machine || !cfg->done) {
    ssae_err_set(err, "clip pictures: no callbacks");
    return NULL;
  }
  ssae_clip_pictures *p = calloc(1, sizeof *p);
  if (!p) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  p->cfg = *cfg;
  if (p->cfg.queue <= 0) p->cfg.queue = 16;
  p->q = calloc((size_t)p->cfg.queue, sizeof *p->q);
  if (!p->q || pthread_mutex_init(&p->mu, NULL)) {
    free(p->q);
    free(p);
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  if (pthread_cond_init(&p->cv, NULL)) {
    pthread_mutex_destroy(&p->mu);
    free(p->q);
    free(p);
    ssae_err_set(err, "clip pictures: cannot make a condition variable");
    return NULL;
  }
  if (pthread_create(&p->thread, NULL, picture_main, p)) {
    ssae_err_set(err, "clip pictures: cannot start the thread");
    ssae_clip_pictures_free(p);
    return NULL;
  }
  p->started = 1;
  return p;
#endif
}

void ssae_clip_pictures_add(ssae_clip_pictures *p, int channel, const char *id,
                            const char *clip) {
  if (!p) return;
  char *copy = strdup(clip);
  pthread_mutex_lock(&p->mu);
  const int room = copy && p->n < p->cfg.queue && !p->stop;
  if (room) {
    pic_req *r = &p->q[(p->head + p->n) % p->cfg.queue];
    r->channel = channel;
    snprintf(r->id, sizeof r->id, "%s", id ? id : "");
    r->clip = copy;
    p->n++;
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  if (!room) {
    const char *why = copy ? "the picture queue is full: picture dropped (ssae report draws it)"
                           : "out of memory";
    free(copy);
    p->cfg.done(p->cfg.user, channel, id, clip, NULL, why);
  }
}

void ssae_clip_pictures_free(ssae_clip_pictures *p) {
  if (!p) return;
  if (p->started) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  for (int i = 0; i < p->n; i++) free(p->q[(p->head + i) % p->cfg.queue].clip);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->q);
  free(p);
}
