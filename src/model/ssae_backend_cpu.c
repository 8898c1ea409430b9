/* The CPU entry of the backend table. impl is an ssae_cpu (ssae_backend.c
 * relies on that for ssae_backend_run_frames). */
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
