/* One output discipline for every file the program writes (models,
 * pictures, .npy, TSV, clips) and every stream it writes to (stdout, an
 * events file).
 *
 * A file is written to a temporary file in the target's directory; every
 * write is checked (the first failure is kept with its errno), and commit
 * flushes, fsyncs, closes, renames the temporary over the target and fsyncs
 * the directory. When anything fails the previous file is untouched, no
 * temporary is left, and the message names the file and the reason. A
 * target that exists and is not a regular file (/dev/null, a FIFO, a
 * terminal) is written in place, with the same checks.
 *
 * A stream is a FILE the caller owns (stdout, a live events file that
 * others read while it grows): every write is checked, the first failure is
 * kept with its errno, later writes are counted as lost, and
 * ssae_stream_check() reports it once.
 *
 * Not for the audio thread. */
#ifndef SSAE_OUTFILE_H
#define SSAE_OUTFILE_H

#include <stdint.h>
#include <stdio.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_outfile ssae_outfile;

/* Creates the temporary file next to path (or opens a non-regular target).
 * NULL with a message naming path when that is impossible (no such
 * directory, no permission, read-only file system). */
ssae_outfile *ssae_outfile_open(const char *path, ssae_err *err);

/* The stream to write through (fwrite, fprintf, or a library writer that
 * takes a FILE *). Every write it makes reaches the file through the
 * outfile's checked writer, so commit knows of any failure and its errno.
 * Do not fclose it. */
FILE *ssae_outfile_fp(ssae_outfile *f);

/* Checked writes; -1 once any write has failed (the first failure is what
 * commit reports). */
int ssae_outfile_write(ssae_outfile *f, const void *p, size_t n);
int ssae_outfile_printf(ssae_outfile *f, const char *fmt, ...) SSAE_PRINTF(2, 3);

/* 1 when a write has failed so far. */
int ssae_outfile_failed(const ssae_outfile *f);

/* The target's path. */
const char *ssae_outfile_path(const ssae_outfile *f);

/* Finishes the file: flush, fsync, close, rename over the target, fsync
 * the directory. Frees f whatever happens. -1 with "PATH: write failed:
 * REASON" (or the step that failed); the target is then unchanged and the
 * temporary removed. */
int ssae_outfile_commit(ssae_outfile *f, ssae_err *err);

/* Drops the file: the temporary is removed, the target unchanged. Frees f;
 * NULL is allowed. */
void ssae_outfile_abort(ssae_outfile *f);

/* Writes a whole file in one go (data of n bytes) through the discipline
 * above. */
int ssae_outfile_write_all(const char *path, const void *data, size_t n, ssae_err *err);

/* ---- streams ---- */

typedef struct ssae_stream {
  FILE *fp;
  char name[256];  /* "stdout", or the file's path, for messages */
  int flush_each;  /* 1: fflush after every write (line-by-line output
                      that others read live) */
  int err_no;      /* errno of the first failure; 0 while none */
  int failed;
  int reported;    /* ssae_stream_check has reported the failure */
  uint64_t lost;   /* writes dropped: the failed one and every one after */
} ssae_stream;

/* fp: an open stream the caller keeps owning (stdout, or one from fopen);
 * name: how messages call it. */
void ssae_stream_init(ssae_stream *s, FILE *fp, const char *name, int flush_each);

/* Writes n bytes (and flushes when flush_each). -1 when this or an earlier
 * write failed: after a failure nothing more is written and every call is
 * counted in lost. */
int ssae_stream_write(ssae_stream *s, const void *p, size_t n);
int ssae_stream_printf(ssae_stream *s, const char *fmt, ...) SSAE_PRINTF(2, 3);

/* Flushes and checks the stream. 0 when everything written so far arrived.
 * Otherwise -1; the first time after a failure err says "NAME: write
 * failed: REASON (K writes lost)", later calls leave err empty, so that a
 * caller printing a non-empty err reports the failure once:
 *   if (ssae_stream_check(&s, &e)) { status = 1; if (e.msg[0]) print(e); } */
int ssae_stream_check(ssae_stream *s, ssae_err *err);

/* ssae_stream_check for the process's stdout, written with printf and
 * friends, for a command's exit: 0, or -1 with "stdout: write failed:
 * REASON" (the first time; later calls leave err empty). */
int ssae_stdout_check(ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
