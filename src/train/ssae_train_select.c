/* The training backend by name: the one place that knows which training
 * backends this build has and what "auto" means. */
#include <string.h>

#include "ssae_config.h"
#include "ssae_train.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda_train.h"
#endif

int ssae_train_backend_built(const char *which) {
  if (!which) return 0;
  if (!strcmp(which, "auto") || !strcmp(which, "cpu")) return 1;
  return !strcmp(which, "cuda") && SSAE_HAVE_CUDA;
}

int ssae_train_backend_new(ssae_train_backend *be, const char *which, const ssae_dims *d,
                           int threads, ssae_err *note, ssae_err *err) {
  memset(be, 0, sizeof *be);
  if (note) note->msg[0] = 0;
  if (!ssae_train_backend_built(which))
    return ssae_err_set(err, "training backend '%s' is not built into this ssae (auto, cpu%s)",
                        which ? which : "(none)", SSAE_HAVE_CUDA ? ", cuda" : "");
#if SSAE_HAVE_CUDA
  const int any_gpu = ssae_cuda_train_available();
  /* auto without a device says so: the user of a CUDA build expects the GPU */
  if (!any_gpu && note && !strcmp(which, "auto")) ssae_err_set(note, "no CUDA device");
  if (!strcmp(which, "cuda") || (!strcmp(which, "auto") && any_gpu)) {
    if (ssae_train_backend_cuda(be, d, err) == 0 && ssae_train_backend_selftest(be, d, err) == 0)
      return 0;
    ssae_train_backend_free(be);
    memset(be, 0, sizeof *be);
    if (!strcmp(which, "cuda")) return -1;
    if (note) *note = *err;
    ssae_err_clear(err);
  }
#endif
  return ssae_train_backend_cpu(be, d, threads, err);
}
