/* Fuzz target for the readers of shard outputs (libFuzzer entry point;
 * tests/model/fuzz_replay.c replays a corpus through it in ordinary builds).
 * `--resume` and `ssae merge` read outputs that a killed task, a full disk
 * or a hand may have cut or changed: the first line of the input goes
 * through the header parser, every line (without its '\n', no NUL added)
 * through the line parser in each format. Each refusal must say why; a
 * header that parses must format back to itself. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  size_t at = 0;
  int first = 1;
  while (at < size) {
    const char *nl = memchr(text + at, '\n', size - at);
    const size_t len = nl ? (size_t)(nl - (text + at)) : size - at;
    if (first) {
      char *line = malloc(len + 1);
      if (!line) return 0;
      memcpy(line, text + at, len);
      line[len] = 0;
      ssae_shard_header h;
      int json = 0;
      ssae_err err = {{0}};
      if (ssae_shard_header_parse(line, &h, &json, &err)) {
        if (!err.msg[0]) abort();
      } else {
        char again[512];
        const int n = ssae_shard_header_format(&h, json ? SSAE_SHARD_JSON : SSAE_SHARD_TSV,
                                               again, sizeof again);
        const size_t sl = strlen(line); /* a NUL inside the line ends it for the parser */
        if (n < 1 || (size_t)n != sl + 1 || memcmp(again, line, sl)) abort();
      }
      free(line);
      first = 0;
    }
    for (int fmt = SSAE_SHARD_TSV; fmt <= SSAE_SHARD_WINDOWS; fmt++) {
      ssae_line_kind kind;
      char *path = NULL;
      ssae_err err = {{0}};
      if (ssae_shard_line_parse(text + at, len, (ssae_shard_format)fmt, &kind, &path, &err)) {
        if (!err.msg[0]) abort();
      } else if (!path) {
        abort();
      }
      free(path);
    }
    at += len + 1;
  }
  return 0;
}
