/* `ssae merge`: the outputs of all shards of one input list into the one
 * result a single `ssae score` run over the list gives, in input
 * (canonical) order. Not for the audio thread. */
#ifndef SSAE_MERGE_H
#define SSAE_MERGE_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_merge_opts {
  /* Optional: the input list the shards were made from. Its digest must
   * be theirs, and every missing input is named (without it, an
   * incomplete part is named with the number of inputs it lacks). */
  const ssae_shard_list *list;
  /* Called once per problem found (a missing or duplicated input or
   * shard, an input that failed in its shard), before ssae_merge returns;
   * may be NULL. */
  void (*note)(void *user, const char *msg);
  void *user;
} ssae_merge_opts;

/* Reads the parts (TSV, JSON lines, or --windows files, all of one kind),
 * checks that they are the shards 0..N-1 of one input list (same digest,
 * count and number of inputs, each shard once, each part complete) and
 * that every input appears exactly once, and writes the result to out
 * ("-" or NULL: stdout; a path: a temporary file in its directory,
 * synced, then renamed). Results only, no shard headers; a windows result
 * starts with its column line. Returns 0 when all inputs were scored; 1
 * when the result was written but some inputs had failed in their shard
 * (each noted, as `ssae score` reports them); -1 with nothing written on
 * any other problem (err says what, note has the details). */
int ssae_merge(char *const *parts, size_t n_parts, const char *out, const ssae_merge_opts *o,
               ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
