/* A shard's output file: written to PATH.partial as it goes, renamed to
 * PATH when complete; and reading a previous one back for --resume. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssae_outfile.h"
#include "ssae_shard.h"

int ssae_shard_partial_path(const char *path, char *buf, size_t cap) {
  int n = snprintf(buf, cap, "%s.partial", path);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

void ssae_shard_resume_release(ssae_shard_resume *r) {
  if (!r) return;
  free(r->done);
  free(r->kept);
  memset(r, 0, sizeof *r);
}

static int kept_add(ssae_shard_resume *r, size_t *cap, const char *line, size_t len) {
  if (r->kept_len + len + 1 > *cap) {
    size_t c = *cap ? *cap * 2 : 1 << 16;
    while (c < r->kept_len + len + 1) c *= 2;
    char *k = realloc(r->kept, c);
    if (!k) return -1;
    r->kept = k;
    *cap = c;
  }
  memcpy(r->kept + r->kept_len, line, len);
  r->kept_len += len;
  r->kept[r->kept_len] = '\0';
  return 0;
}

static long member_pos(const size_t *members, size_t n, size_t li) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (members[mid] == li) return (long)mid;
    if (members[mid] < li) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

static int header_mismatch(const char *file, const ssae_shard_header *got,
                           const ssae_shard_header *want, ssae_err *err) {
  return ssae_err_set(err,
                      "%s was written for shard %zu/%zu of a list of %zu inputs (digest %s); "
                      "this run is shard %zu/%zu of %zu inputs (digest %s): not mixing them "
                      "(remove it, or run without --resume)",
                      file, got->index, got->count, got->inputs, got->digest, want->index,
                      want->count, want->inputs, want->digest);
}

int ssae_shard_resume_read(const char *path, ssae_shard_format fmt, const ssae_shard_header *h,
                           const ssae_shard_list *l, const size_t *members, size_t n_members,
                           const unsigned char *only_done, ssae_shard_resume *r,
                           ssae_err *err) {
  memset(r, 0, sizeof *r);
  if (!(r->done = calloc(n_members ? n_members : 1, 1)))
    return ssae_err_set(err, "out of memory");
  char partial[sizeof r->from];
  if (ssae_shard_partial_path(path, partial, sizeof partial))
    return ssae_err_set(err, "%s: path too long", path);
  const char *from = path;
  FILE *f = fopen(path, "r");
  if (!f && errno == ENOENT) f = fopen(from = partial, "r");
  if (!f) {
    if (errno == ENOENT) return 0; /* nothing done yet */
    int e = errno;
    ssae_shard_resume_release(r);
    return ssae_err_set(err, "%s: cannot read: %s", from, strerror(e));
  }
  snprintf(r->from, sizeof r->from, "%s", from);
  char *line = NULL;
  size_t cap = 0, kcap = 0, lineno = 0;
  ssize_t len;
  int rc = 0, want_columns = fmt == SSAE_SHARD_WINDOWS;
  while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
    lineno++;
    if (line[len - 1] != '\n') break; /* cut short by a kill: not done */
    line[len - 1] = '\0';
    if (lineno == 1) {
      ssae_shard_header got;
      int json;
      if (ssae_shard_header_parse(line, &got, &json, err)) {
        rc = ssae_err_prefix(err, "%s", from);
      } else if (json != (fmt == SSAE_SHARD_JSON)) {
        rc = ssae_err_set(err, "%s holds %s results, this run writes %s (not mixing them)",
                          from, json ? "JSON" : "TSV", json ? "TSV" : "JSON");
      } else if (got.index != h->index || got.count != h->count || got.inputs != h->inputs ||
                 got.files != h->files || strcmp(got.digest, h->digest)) {
        rc = header_mismatch(from, &got, h, err);
      }
      continue;
    }
    ssae_line_kind kind;
    char *p;
    if (ssae_shard_line_parse(line, (size_t)len - 1, fmt, &kind, &p, err)) {
      rc = ssae_err_prefix(err, "%s line %zu", from, lineno);
      break;
    }
    if (kind == SSAE_LINE_COLUMNS) {
      if (!want_columns) rc = ssae_err_set(err, "%s line %zu: a second column line", from, lineno);
      want_columns = 0;
      free(p);
      continue;
    }
    if (want_columns) {
      rc = ssae_err_set(err, "%s: no column line after the header", from);
      free(p);
      break;
    }
    long li = ssae_shard_list_find(l, p);
    long m = li < 0 ? -1 : member_pos(members, n_members, (size_t)li);
    if (m < 0) {
      rc = ssae_err_set(err, "%s line %zu: %s is not one of the inputs of shard %zu/%zu", from,
                        lineno, p, h->index, h->count);
    } else if (kind == SSAE_LINE_RESULT) {
      if (fmt == SSAE_SHARD_WINDOWS) {
        if (only_done && only_done[m]) {
          if (!r->done[m]) r->n_done++;
          r->done[m] = 1;
          line[len - 1] = '\n';
          if (kept_add(r, &kcap, line, (size_t)len)) rc = ssae_err_set(err, "out of memory");
        }
      } else if (r->done[m]) {
        rc = ssae_err_set(err, "%s line %zu: %s a second time", from, lineno, p);
      } else {
        r->done[m] = 1;
        r->n_done++;
        line[len - 1] = '\n';
        if (kept_add(r, &kcap, line, (size_t)len)) rc = ssae_err_set(err, "out of memory");
      }
    }
    /* Failure records are not kept: those files are tried again. */
    free(p);
  }
  if (rc == 0 && ferror(f)) rc = ssae_err_set(err, "%s: read failed", from);
  free(line);
  fclose(f);
  if (rc) ssae_shard_resume_release(r);
  return rc;
}

/* ---- writing ---- */

/* The start of the output (header, kept lines) is written through
 * ssae_outfile: a temporary file that replaces PATH.partial only once it
 * is complete and synced. The lines that follow are appended to
 * PATH.partial itself, so that a kill leaves them for --resume; commit
 * syncs it and renames it to PATH. */
struct ssae_shard_out {
  char *final, *partial;
  FILE *f;
};

/* The rename of PATH.partial to PATH made durable. File systems that
 * cannot sync a directory say EINVAL; the rename still stands. */
static int sync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (fd < 0) return -1;
  int rc = fsync(fd) && errno != EINVAL && errno != EROFS && errno != ENOTSUP ? -1 : 0;
  close(fd);
  return rc;
}

void ssae_shard_out_free(ssae_shard_out *o) {
  if (!o) return;
  if (o->f) fclose(o->f);
  free(o->final);
  free(o->partial);
  free(o);
}

ssae_shard_out *ssae_shard_out_new(const char *final_path, ssae_shard_format fmt,
                                   const ssae_shard_header *h, const char *kept,
                                   size_t kept_len, ssae_err *err) {
  /* The part is renamed onto PATH at the end: onto a device or a FIFO
   * that would replace it (as root, /dev/null itself). A part must be a
   * file, which --resume and ssae merge read back. */
  struct stat st;
  if (stat(final_path, &st) == 0 && !S_ISREG(st.st_mode)) {
    ssae_err_set(err, "%s: %s: a shard's part must be a regular file (written to PATH.partial, "
                      "then renamed to PATH)",
                 final_path, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    return NULL;
  }
  ssae_shard_out *o = calloc(1, sizeof *o);
  size_t n = strlen(final_path);
  if (o) o->final = strdup(final_path);
  if (o) o->partial = malloc(n + 16);
  if (!o || !o->final || !o->partial) {
    ssae_shard_out_free(o);
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  snprintf(o->partial, n + 16, "%s.partial", final_path);
  char head[256];
  int hl = ssae_shard_header_format(h, fmt, head, sizeof head);
  ssae_outfile *start = hl > 0 ? ssae_outfile_open(o->partial, err) : NULL;
  if (!start) {
    if (hl <= 0) ssae_err_set(err, "%s: the shard header does not fit", o->partial);
    ssae_shard_out_free(o);
    return NULL;
  }
  ssae_outfile_write(start, head, (size_t)hl);
  if (fmt == SSAE_SHARD_WINDOWS) ssae_outfile_printf(start, "path\twindow\ttime\tscore\n");
  ssae_outfile_write(start, kept, kept_len);
  /* Only now does it replace the previous PATH.partial, whose lines it
   * holds: a kill at any moment leaves one that --resume can read. */
  if (ssae_outfile_commit(start, err)) {
    ssae_shard_out_free(o);
    return NULL;
  }
  if (!(o->f = fopen(o->partial, "a"))) {
    ssae_err_set(err, "%s: cannot append: %s", o->partial, strerror(errno));
    ssae_shard_out_free(o);
    return NULL;
  }
  return o;
}

FILE *ssae_shard_out_file(ssae_shard_out *o) { return o->f; }

int ssae_shard_out_commit(ssae_shard_out *o, ssae_err *err) {
  errno = 0;
  int ok = fflush(o->f) == 0 && !ferror(o->f) && fsync(fileno(o->f)) == 0;
  int e = errno;
  if (fclose(o->f) != 0 && ok) ok = 0, e = errno;
  o->f = NULL;
  if (!ok) return ssae_err_set(err, "%s: write failed: %s", o->partial, strerror(e ? e : EIO));
  if (rename(o->partial, o->final) || sync_dir_of(o->final))
    return ssae_err_set(err, "%s: cannot rename to %s: %s", o->partial, o->final,
                        strerror(errno));
  return 0;
}
