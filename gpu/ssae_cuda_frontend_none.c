/* The device half of the GPU front end in a build without CUDA: no device
 * is ever present, so the host half (ssae_cuda_frontend.c) runs its CPU
 * path only (cfg.cpu; the live engine's device front end mode on hosts
 * without a GPU). The rest is never reached: no object is ever made. */
#include <stddef.h>

#include "ssae_cuda_frontend_dev.h"

int ssae_fe_dev_present(void) { return 0; }

void ssae_fe_dev_warm(int device) { (void)device; }

ssae_fe_dev *ssae_fe_dev_new(const ssae_fe_dev_cfg *cfg, ssae_err *err) {
  (void)cfg;
  ssae_err_set(err, "the GPU front end needs CUDA: this build has none");
  return NULL;
}

void ssae_fe_dev_free(ssae_fe_dev *d) { (void)d; }

void *ssae_fe_dev_block(ssae_fe_dev *d, int ch) {
  (void)d;
  (void)ch;
  return NULL;
}

ssae_fe_desc *ssae_fe_dev_desc(ssae_fe_dev *d) {
  (void)d;
  return NULL;
}

int ssae_fe_dev_launch(ssae_fe_dev *d, int lo, int hi, int poison, ssae_err *err) {
  (void)d;
  (void)lo;
  (void)hi;
  (void)poison;
  return ssae_err_set(err, "the GPU front end needs CUDA: this build has none");
}

int ssae_fe_dev_wait(ssae_fe_dev *d, int lo, int hi, ssae_err *err) {
  (void)d;
  (void)lo;
  (void)hi;
  return ssae_err_set(err, "the GPU front end needs CUDA: this build has none");
}

int ssae_fe_dev_ready(ssae_fe_dev *d) {
  (void)d;
  return 1;
}

const float *ssae_fe_dev_scores(const ssae_fe_dev *d, int ch) {
  (void)d;
  (void)ch;
  return NULL;
}

const float *ssae_fe_dev_rows(const ssae_fe_dev *d, int ch) {
  (void)d;
  (void)ch;
  return NULL;
}
