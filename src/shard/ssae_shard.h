/* Scoring an archive in parts on a cluster's scheduler (Slurm job arrays,
 * Kubernetes indexed jobs): the input list, its balanced partition into
 * shards, the shard's place from the environment, the header that ties
 * a shard's output to its input list, resuming a killed shard, and the
 * output file that a killed task leaves in a resumable state.
 *
 * Order. Every shard and `ssae merge` use one order, the canonical one:
 * paths compared byte by byte with '/' below every other byte, i.e. path
 * components compared in turn. A single directory walked the way
 * `ssae score DIR` walks it comes out in exactly this order, so a merged
 * result lines up with one plain run over the same directory.
 *
 * Weights. A file weighs its size in bytes on disk (stat; no file is
 * opened, so every task can list an archive of millions of files
 * quickly). Shards are balanced by total bytes, not by file count.
 *
 * Digest. The first 16 hex digits of SHA-256 over, for each input in
 * canonical order, its path bytes, a NUL, its size in decimal and '\n'
 * (a missing file has size "-"). A file that changes size between two
 * tasks changes the digest, and so cannot end up in two shards or none
 * unnoticed. Not for the audio thread. */
#ifndef SSAE_SHARD_H
#define SSAE_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- input lists ---- */

/* Expands files and directories into paths the way `ssae score` does:
 * directories recursively (audio file names only, hidden entries skipped,
 * each directory's entries in sorted order), other arguments kept as
 * given, so that a path that does not exist is still reported in order. */
int ssae_paths_expand(char *const *args, size_t n, char ***paths, size_t *count,
                      ssae_err *err);

/* Reads one path per line from file ("-": stdin); '\n' or "\r\n" line
 * ends, empty lines skipped, no other quoting. Directories are not
 * expanded here (pass the result to ssae_paths_expand). */
int ssae_paths_read_list(const char *file, char ***paths, size_t *count, ssae_err *err);

void ssae_paths_free(char **paths, size_t count);

/* <0, 0, >0 as strcmp, in the canonical order (see above). */
int ssae_path_cmp(const char *a, const char *b);

#define SSAE_SHARD_DIGEST_HEX 16
#define SSAE_SIZE_MISSING UINT64_MAX

typedef struct ssae_shard_list {
  char **paths;    /* canonical order, each path once */
  uint64_t *sizes; /* bytes; SSAE_SIZE_MISSING when stat failed */
  size_t n;
  char digest[SSAE_SHARD_DIGEST_HEX + 1];
} ssae_shard_list;

/* The list of paths (expanded already) sorted canonically, duplicates
 * dropped, with sizes and the digest. */
ssae_shard_list *ssae_shard_list_new(char *const *paths, size_t n, ssae_err *err);
/* The same with sizes given (no stat): for tests and callers that know. */
ssae_shard_list *ssae_shard_list_new_sized(char *const *paths, const uint64_t *sizes,
                                           size_t n, ssae_err *err);
void ssae_shard_list_free(ssae_shard_list *l);

/* Index of path in the list, or -1. */
long ssae_shard_list_find(const ssae_shard_list *l, const char *path);

/* ---- partition ---- */

/* Assigns every input of l to one of count shards: greedy, the largest
 * file first (equal sizes: canonical order) to the shard with the least
 * bytes so far (equal loads: the lowest index). shard_of: l->n entries. */
int ssae_shard_partition(const ssae_shard_list *l, size_t count, size_t *shard_of,
                         ssae_err *err);

/* The inputs of shard index of count: indices into l, ascending (so in
 * canonical order). *members is malloc'ed (NULL when empty). */
int ssae_shard_members(const ssae_shard_list *l, size_t index, size_t count,
                       size_t **members, size_t *n_members, ssae_err *err);

/* ---- which shard this task is ---- */

typedef struct ssae_shard_spec {
  size_t index, count; /* index from 0 */
  char source[64];     /* where it came from: "--shard", "Slurm array", ... */
} ssae_shard_spec;

#define SSAE_SHARD_MAX 1000000

/* "I/N" (I from 0 to N-1) or "auto". explicit_count: --shard-count, 0
 * when not given. For "auto" the environment decides:
 * - Slurm array: SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_MIN and
 *   SLURM_ARRAY_TASK_MAX (and SLURM_ARRAY_TASK_STEP), or with
 *   SLURM_ARRAY_TASK_COUNT; index = (ID - MIN) / STEP. An array whose
 *   indices are not MIN, MIN+STEP, ..., MAX (a list like 1,5,9 with
 *   COUNT disagreeing) is refused. With explicit_count the task IDs are
 *   the shard indices themselves (0 to count-1), so that a subset of the
 *   array can be submitted again (sbatch --array=2,5) to redo shards.
 * - Kubernetes indexed job: JOB_COMPLETION_INDEX, the count from
 *   explicit_count or SSAE_SHARD_COUNT.
 * Anything else is refused with a message saying what is missing. */
int ssae_shard_spec_parse(const char *s, size_t explicit_count, ssae_shard_spec *out,
                          ssae_err *err);
/* The "auto" case alone. */
int ssae_shard_spec_from_env(size_t explicit_count, ssae_shard_spec *out, ssae_err *err);

/* ---- the header of a shard's output ---- */

typedef enum { SSAE_SHARD_TSV = 0, SSAE_SHARD_JSON = 1, SSAE_SHARD_WINDOWS = 2 } ssae_shard_format;

typedef struct ssae_shard_header {
  size_t index, count;
  size_t inputs; /* the whole list */
  size_t files;  /* this shard's inputs */
  char digest[SSAE_SHARD_DIGEST_HEX + 1];
} ssae_shard_header;

void ssae_shard_header_init(ssae_shard_header *h, const ssae_shard_list *l, size_t index,
                            size_t count, size_t files);

/* The first line of a shard's output, '\n' included:
 *   TSV, windows:  # ssae-shard I/N inputs=COUNT files=K digest=HEX
 *   JSON:          {"ssae_shard":"I/N","inputs":COUNT,"files":K,"digest":"HEX"}
 * A windows file's own column line follows its header. Returns the
 * length, or -1 when cap is too small. */
int ssae_shard_header_format(const ssae_shard_header *h, ssae_shard_format fmt, char *buf,
                             size_t cap);
/* Parses such a line (without or with '\n'); *json: which form it was. */
int ssae_shard_header_parse(const char *line, ssae_shard_header *h, int *json, ssae_err *err);

/* A file that could not be scored, as a line of a shard's output (so that
 * a complete output accounts for every one of its inputs):
 *   TSV:  # ssae-failed<TAB>PATH<TAB>MESSAGE
 *   JSON: {"path":"PATH","error":"MESSAGE"}
 * Tabs and newlines in the message become spaces. */
int ssae_shard_write_failed(FILE *f, ssae_shard_format fmt, const char *path, const char *msg);

/* What a line of a shard's output is. */
typedef enum {
  SSAE_LINE_RESULT,  /* a scored file (TSV or JSON) or a window (windows) */
  SSAE_LINE_FAILED,  /* a failure record */
  SSAE_LINE_COLUMNS, /* the windows file's "path\twindow\ttime\tscore" */
} ssae_line_kind;

/* Classifies one complete line (no '\n') of an output in format fmt and
 * returns its path, malloc'ed in *path (JSON strings unescaped). */
int ssae_shard_line_parse(const char *line, size_t len, ssae_shard_format fmt,
                          ssae_line_kind *kind, char **path, ssae_err *err);

/* Appends s as a JSON string (quotes, escapes) to f. */
void ssae_json_write_str(FILE *f, const char *s);

/* ---- resuming ---- */

/* A shard's output is written to PATH.partial as it goes and renamed to
 * PATH when the shard is done. cap: room in buf. */
int ssae_shard_partial_path(const char *path, char *buf, size_t cap);

typedef struct ssae_shard_resume {
  unsigned char *done; /* per member: 1 when already scored */
  size_t n_done;
  char *kept; /* the done members' complete lines, in file order */
  size_t kept_len;
  char from[1024]; /* the file read; "" when none */
} ssae_shard_resume;

/* Reads the previous output of this shard: PATH when it exists, else
 * PATH.partial, else nothing is done (not an error, so that one command
 * line serves the first run and the reruns). A header that is not h
 * (another shard, count or input list) is an error naming both, never a
 * mix. A last line without '\n' (the task was killed while writing it)
 * does not count; failure records do not count (those files are tried
 * again); a path that is not one of members is an error. For windows
 * files pass the members done in the main output as only_done: only
 * their windows are kept (their windows are written before their line in
 * the main output). */
int ssae_shard_resume_read(const char *path, ssae_shard_format fmt, const ssae_shard_header *h,
                           const ssae_shard_list *l, const size_t *members, size_t n_members,
                           const unsigned char *only_done, ssae_shard_resume *r,
                           ssae_err *err);
void ssae_shard_resume_release(ssae_shard_resume *r);

/* ---- the output file of one shard ---- */

typedef struct ssae_shard_out ssae_shard_out;

/* Starts the output for final_path: header (and for windows the column
 * line), then kept (the lines a resume kept), all written to a new file
 * that replaces PATH.partial only once they are on disk, so a kill at any
 * moment leaves a resumable PATH.partial. Lines appended through
 * ssae_shard_out_file() should end with fflush (a kill loses at most the
 * line being written). */
ssae_shard_out *ssae_shard_out_new(const char *final_path, ssae_shard_format fmt,
                                   const ssae_shard_header *h, const char *kept,
                                   size_t kept_len, ssae_err *err);
FILE *ssae_shard_out_file(ssae_shard_out *o);
/* Flushes, syncs and renames PATH.partial to PATH (and syncs the
 * directory). */
int ssae_shard_out_commit(ssae_shard_out *o, ssae_err *err);
/* Without commit the .partial file stays for a later --resume. */
void ssae_shard_out_free(ssae_shard_out *o);

#ifdef __cplusplus
}
#endif
#endif
