#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ssae_config.h"
#include "ssae_cuda.h"
#include "ssae_features.h"
#include "ssae_json.h"
#include "ssae_melbank.h"
#include "ssae_shard.h"

/* One expansion for every command and for the shard list (ssae_shard.h), so
 * that `ssae score DIR` and a shard of DIR see the same files in the same
 * order. */
int ssae_cli_collect(char *const *args, int n, char ***paths, size_t *count,
                     ssae_err *err) {
  return ssae_paths_expand(args, n < 0 ? 0 : (size_t)n, paths, count, err);
}

void ssae_cli_free_paths(char **paths, size_t count) { ssae_paths_free(paths, count); }

void ssae_cli_json_str(FILE *f, const char *str) {
  /* Through ssae_json_escape in pieces (paths have no length bound), each
   * cut where no UTF-8 sequence is split. */
  enum { PIECE = 512 };
  char raw[PIECE + 1], esc[6 * PIECE + 1];
  size_t left = strlen(str);
  fputc('"', f);
  while (left) {
    size_t k = left < PIECE ? left : PIECE;
    if (k < left)
      while (k > PIECE - 3 && ((unsigned char)str[k] & 0xc0) == 0x80) k--;
    memcpy(raw, str, k);
    raw[k] = 0;
    const int n = ssae_json_escape(esc, sizeof esc, 0, raw);
    if (n > 0) fwrite(esc, 1, (size_t)n, f);
    str += k;
    left -= k;
  }
  fputc('"', f);
}

int ssae_cli_stdout_tty(void) { return isatty(STDOUT_FILENO); }
int ssae_cli_stderr_tty(void) { return isatty(STDERR_FILENO); }

void ssae_cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ssae %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void ssae_cli_one_cuda_queue(const char *backend) {
#if SSAE_HAVE_CUDA
  if (strcmp(backend, "cpu")) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 0);
#else
  (void)backend;
#endif
}

int ssae_cli_check_device(const char *cmd, const char *flag, int device,
                          const char *backend) {
  if (!strcmp(backend, "cpu")) {
    ssae_cli_error(cmd, "%s names a GPU: not with --backend cpu", flag);
    return SSAE_EXIT_USAGE;
  }
  ssae_err err = {{0}};
  if (ssae_cuda_check_device(device, &err)) {
    ssae_cli_error(cmd, "%s %d: %s", flag, device, err.msg);
    return SSAE_EXIT_USAGE;
  }
  return SSAE_EXIT_OK;
}

void ssae_cli_warn_empty_bands(const char *cmd, const ssae_feat_cfg *cfg) {
  int most = 0;
  ssae_err err = {{0}};
  const int n = ssae_feat_cfg_empty_bands(cfg, &most, &err);
  if (n > 0)
    ssae_cli_error(cmd, "warning: %d of the %d mel bands are narrower than one FFT bin (n_fft "
                        "%d) and stay at the floor in every frame; with %d bands or fewer none "
                        "is (fewer --n-mels, or a larger --n-fft)",
                   n, cfg->n_mels, cfg->n_fft, most);
}

int ssae_cli_use_device(const char *cmd, int device, const char *backend) {
  if (!device) return SSAE_EXIT_OK;
  int rc = ssae_cli_check_device(cmd, "--device", device, backend);
  ssae_err err = {{0}};
  if (rc == SSAE_EXIT_OK && ssae_cuda_use_device(device, &err)) {
    ssae_cli_error(cmd, "--device %d: %s", device, err.msg);
    rc = SSAE_EXIT_USAGE;
  }
  return rc;
}

void ssae_cli_test_pause(const char *cmd, const char *phase, volatile sig_atomic_t *stop) {
  const char *at = getenv("SSAE_TEST_PAUSE_AT");
  if (!at || strcmp(at, phase)) return;
  fprintf(stderr, "ssae %s: test pause at %s\n", cmd, phase);
  fflush(stderr);
  struct timespec ts = {0, 10000000};
  while (!*stop) nanosleep(&ts, NULL);
  for (int i = 0; i < 30; i++) nanosleep(&ts, NULL);
}
