#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ssae_config.h"

typedef struct {
  const char *name;
  ssae_cmd_fn fn;
  const char *summary;
} command;

/* One line per subcommand; SPEC section 4. */
static const command commands[] = {
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

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return SSAE_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return SSAE_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ssae %s\n", SSAE_VERSION);
    return SSAE_EXIT_OK;
  }
  for (const command *c = commands; c->name; c++)
    if (!strcmp(argv[1], c->name)) return c->fn(argc - 1, argv + 1);
  fprintf(stderr, "ssae: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return SSAE_EXIT_USAGE;
}
