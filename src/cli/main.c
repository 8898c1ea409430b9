#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ssae_config.h"
#include "ssae_outfile.h"

typedef struct {
  const char *name;
  ssae_cmd_fn fn;
  const char *summary;
} command;

/* One line per subcommand; SPEC section 4. */
static const command commands[] = {
    {"features", ssae_cmd_features, "log-mel frames of audio files as .npy arrays"},
    {"score", ssae_cmd_score, "anomaly scores of audio files (one line per file)"},
    {"info", ssae_cmd_info, "a model file's dimensions, features, threshold, provenance"},
    {"bench", ssae_cmd_bench, "throughput and latency of the backends (CPU, CUDA)"},
    {"train", ssae_cmd_train, "train a model on normal recordings, calibrate its threshold"},
    {"monitor", ssae_cmd_monitor,
     "live monitor (PortAudio), or a file through the real-time engine"},
    {"jack", ssae_cmd_jack, "the monitor as a JACK client"},
    {"eval", ssae_cmd_eval, "AUC, pAUC, precision, recall, F1 on labelled recordings"},
    {"report", ssae_cmd_report, "picture of one recording: spectrogram, scores, alarms"},
    {"merge", ssae_cmd_merge, "the outputs of ssae score --shard into one result"},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
  fprintf(f,
          "ssae %s: acoustic anomaly monitor (SpectralShapeAutoencoder)\n\n"
          "usage: ssae COMMAND [options]   (ssae COMMAND --help for each)\n\n"
          "commands:\n",
          SSAE_VERSION);
  for (const command *c = commands; c->name; c++)
    fprintf(f, "  %-9s %s\n", c->name, c->summary);
  fprintf(f, "\nWithout --model, the default model that ships with ssae is used.\n"
             "Exit status: 0 success, 1 some input failed, 2 usage error.\n");
}

/* Every command's stdout is checked once at its end: results that did not
 * arrive (a full disk, /dev/full, a closed pipe) are reported and make the
 * exit status 1, never 0. */
static int finish(const char *cmd, int status) {
  ssae_err err = {{0}};
  if (ssae_stdout_check(&err)) {
    if (err.msg[0]) fprintf(stderr, "ssae %s: %s\n", cmd, err.msg);
    if (status == SSAE_EXIT_OK) status = SSAE_EXIT_INPUT;
  }
  return status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return SSAE_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return finish("--help", SSAE_EXIT_OK);
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ssae %s\n", SSAE_VERSION);
    return finish("--version", SSAE_EXIT_OK);
  }
  for (const command *c = commands; c->name; c++)
    if (!strcmp(argv[1], c->name)) return finish(c->name, c->fn(argc - 1, argv + 1));
  fprintf(stderr, "ssae: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return SSAE_EXIT_USAGE;
}
