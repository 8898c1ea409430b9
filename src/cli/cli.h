/* The `ssae` program: one function per subcommand, each in its own file.
 * Exit status (SPEC section 4): 0 success, 1 some input failed (the rest was
 * still processed), 2 usage error. */
#ifndef SSAE_CLI_H
#define SSAE_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "ssae_err.h"

enum { SSAE_EXIT_OK = 0, SSAE_EXIT_INPUT = 1, SSAE_EXIT_USAGE = 2 };

typedef int (*ssae_cmd_fn)(int argc, char **argv);

/* Subcommands; argv[0] is the subcommand's name. */
int ssae_cmd_features(int argc, char **argv);
int ssae_cmd_score(int argc, char **argv);
int ssae_cmd_info(int argc, char **argv);
int ssae_cmd_train(int argc, char **argv);
int ssae_cmd_eval(int argc, char **argv);
int ssae_cmd_monitor(int argc, char **argv);
int ssae_cmd_jack(int argc, char **argv);
int ssae_cmd_report(int argc, char **argv);
int ssae_cmd_bench(int argc, char **argv);
int ssae_cmd_merge(int argc, char **argv);

/* Expands files and directories (recursively, audio files only, sorted
 * bytewise) into a list of paths. A path that does not exist is kept in the
 * list so that the caller reports it in order with the rest. */
int ssae_cli_collect(char *const *args, int n, char ***paths, size_t *count,
                     ssae_err *err);
void ssae_cli_free_paths(char **paths, size_t count);

/* 1 when stdout / stderr is a terminal (progress lines, meters). */
int ssae_cli_stdout_tty(void);
int ssae_cli_stderr_tty(void);

/* Writes s as a JSON string (quotes included). Bytes that are not valid
 * UTF-8 (a file name is any bytes) become \uFFFD, one per byte, so the
 * output is always valid JSON. */
void ssae_cli_json_str(FILE *f, const char *s);

/* Prints "ssae CMD: msg" on stderr. */
void ssae_cli_error(const char *cmd, const char *fmt, ...) SSAE_PRINTF(2, 3);

/* Test hook: with SSAE_TEST_PAUSE_AT=phase in the environment, "ssae CMD:
 * test pause at PHASE" on stderr, then a wait until *stop is set (by a
 * signal) and 0.3 s more, so that a test can send signals exactly in that
 * phase; nothing otherwise. */
void ssae_cli_test_pause(const char *cmd, const char *phase, volatile sig_atomic_t *stop);

/* A command's --device N (a GPU): 0 when it can run there, N then current
 * on this thread (the CUDA backend or trainer made next on it lives there);
 * else says why (with --backend cpu, a device this host lacks, a build
 * without CUDA) and returns SSAE_EXIT_USAGE, before any work. Device 0 is
 * taken as it is: checking it would cost the CUDA driver's start here,
 * which the commands overlap with other work. */
int ssae_cli_use_device(const char *cmd, int device, const char *backend);

struct ssae_feat_cfg;
/* Feature settings with mel bands narrower than one FFT bin (always at the
 * floor: --n-mels too large for --n-fft): a warning on stderr with their
 * count and the most bands these settings allow. Nothing otherwise. */
void ssae_cli_warn_empty_bands(const char *cmd, const struct ssae_feat_cfg *cfg);

/* A GPU named on the command line (flag: "--device", "--gpu"): SSAE_EXIT_OK
 * when this host has it and the backend is not cpu, else says why (with
 * --backend cpu, a device this host lacks, a build without CUDA) and
 * returns SSAE_EXIT_USAGE. Selects nothing. */
int ssae_cli_check_device(const char *cmd, const char *flag, int device,
                          const char *backend);

/* For a short job (score, eval, report): one hardware work queue for the
 * process's CUDA context instead of the driver's eight
 * (CUDA_DEVICE_MAX_CONNECTIONS=1, unless the user set it). Each queue costs
 * the context's creation and its teardown at exit time (BENCHMARKS.md:
 * about 90 ms of a 0.3 s CUDA start and exit on an H100 host). The backend
 * path's work is on one stream; the GPU front end's two lanes' streams then
 * share the queue (one lane's copy no longer overlaps the other's kernels),
 * which costs less than the queues did: the 10,000-clip job is 1.2x faster
 * with one. Call while the process has one thread, before any CUDA call. */
void ssae_cli_one_cuda_queue(const char *backend);

#endif
