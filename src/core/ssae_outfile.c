/* fopencookie is how every write made through the FILE * handed out (by
 * the library's own writers, by cairo's stream callback, by the
 * safetensors writer) reaches one checked write() that keeps the errno. */
#define _GNU_SOURCE
#include "ssae_outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ssae_outfile {
  char *path;    /* the target as given (for messages) */
  char *target;  /* what is renamed over: path, or a symlink's destination */
  char *tmp;     /* the temporary; NULL when writing a non-regular target in place */
  int fd;
  FILE *fp;
  int err_no;    /* first failure */
  const char *what; /* the step that failed first */
};

static pthread_once_t umask_once = PTHREAD_ONCE_INIT;
static mode_t file_mode = 0644;

/* mkstemp creates 0600; a committed file gets the mode an ordinary
 * creat(path, 0666) would have. umask can only be read by setting it, so
 * this is done once, before any thread of ours writes files. */
static void read_umask(void) {
  mode_t m = umask(022);
  umask(m);
  file_mode = 0666 & ~m;
}

static void fail(ssae_outfile *f, int e, const char *what) {
  if (f->err_no) return;
  f->err_no = e ? e : EIO;
  f->what = what;
}

static ssize_t cookie_write(void *c, const char *buf, size_t n) {
  ssae_outfile *f = c;
  if (f->err_no) {
    errno = f->err_no;
    return -1;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(f->fd, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      fail(f, w < 0 ? errno : ENOSPC, "write failed");
      errno = f->err_no;
      return -1;
    }
    done += (size_t)w;
  }
  return (ssize_t)n;
}

static int cookie_close(void *c) {
  (void)c; /* the fd is closed by commit/abort, where its error is checked */
  return 0;
}

static void outfile_free(ssae_outfile *f) {
  free(f->path);
  free(f->target);
  free(f->tmp);
  free(f);
}

ssae_outfile *ssae_outfile_open(const char *path, ssae_err *err) {
  if (!path || !*path) {
    ssae_err_set(err, "no output file name given");
    return NULL;
  }
  pthread_once(&umask_once, read_umask);
  ssae_outfile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    ssae_err_set(err, "%s: out of memory", path);
    return NULL;
  }
  f->fd = -1;
  struct stat st;
  int exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    ssae_err_set(err, "%s: is a directory", path);
    outfile_free(f);
    return NULL;
  }
  if (exists && !S_ISREG(st.st_mode)) {
    /* A device, FIFO or terminal: written in place; renaming over it would
     * replace it (and /dev/null is not ours to replace). */
    f->fd = open(path, O_WRONLY | O_CLOEXEC);
    if (f->fd < 0) {
      ssae_err_set(err, "%s: cannot write: %s", path, strerror(errno));
      outfile_free(f);
      return NULL;
    }
  } else {
    /* Through a symlink the file it points to is replaced, not the link. */
    struct stat lst;
    char *real = NULL;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) real = realpath(path, NULL);
    f->target = real ? real : strdup(path);
    size_t n = f->target ? strlen(f->target) : 0;
    char *dcopy = f->target ? strdup(f->target) : NULL;
    char *bcopy = f->target ? strdup(f->target) : NULL;
    if (dcopy && bcopy && (f->tmp = malloc(n + 32))) {
      const char *dir = dirname(dcopy), *base = basename(bcopy);
      snprintf(f->tmp, n + 32, "%s/.%s.tmp.XXXXXX", dir, base);
    }
    free(dcopy);
    free(bcopy);
    if (!f->tmp) {
      ssae_err_set(err, "%s: out of memory", path);
      outfile_free(f);
      return NULL;
    }
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
      ssae_err_set(err, "%s: cannot create it (temporary file in its directory): %s", path,
                   strerror(errno));
      outfile_free(f);
      return NULL;
    }
    /* An existing file keeps its mode; a new one gets the umask's. */
    if (fchmod(f->fd, exists ? (st.st_mode & 07777) : file_mode) != 0) {
      ssae_err_set(err, "%s: cannot set the file mode: %s", path, strerror(errno));
      close(f->fd);
      unlink(f->tmp);
      outfile_free(f);
      return NULL;
    }
  }
  cookie_io_functions_t io = {NULL, cookie_write, NULL, cookie_close};
  f->fp = fopencookie(f, "w", io);
  if (!f->fp) {
    ssae_err_set(err, "%s: %s", path, strerror(errno));
    close(f->fd);
    if (f->tmp) unlink(f->tmp);
    outfile_free(f);
    return NULL;
  }
  return f;
}

FILE *ssae_outfile_fp(ssae_outfile *f) { return f->fp; }
const char *ssae_outfile_path(const ssae_outfile *f) { return f->path; }
int ssae_outfile_failed(const ssae_outfile *f) { return f->err_no != 0 || ferror(f->fp); }

int ssae_outfile_write(ssae_outfile *f, const void *p, size_t n) {
  if (f->err_no) return -1;
  if (n && fwrite(p, 1, n, f->fp) != n) {
    fail(f, errno, "write failed");
    return -1;
  }
  return 0;
}

int ssae_outfile_printf(ssae_outfile *f, const char *fmt, ...) {
  if (f->err_no) return -1;
  va_list ap;
  va_start(ap, fmt);
  int r = vfprintf(f->fp, fmt, ap);
  va_end(ap);
  if (r < 0) {
    fail(f, errno, "write failed");
    return -1;
  }
  return 0;
}

static void drop(ssae_outfile *f) {
  if (f->fp) fclose(f->fp); /* cookie_close leaves the fd */
  f->fp = NULL;
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  if (f->tmp) unlink(f->tmp);
}

void ssae_outfile_abort(ssae_outfile *f) {
  if (!f) return;
  drop(f);
  outfile_free(f);
}

/* fsync of the directory makes the rename itself durable. File systems
 * that cannot sync a directory say EINVAL; that is not a failed write. */
static int sync_dir(const char *target) {
  char *d = strdup(target);
  if (!d) return ENOMEM;
  int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(d);
  if (fd < 0) return errno;
  int e = fsync(fd) != 0 && errno != EINVAL && errno != EROFS ? errno : 0;
  close(fd);
  return e;
}

int ssae_outfile_commit(ssae_outfile *f, ssae_err *err) {
  if (!f) return ssae_err_set(err, "no output file");
  if (!f->err_no && fflush(f->fp) != 0) fail(f, errno, "write failed");
  if (!f->err_no && ferror(f->fp)) fail(f, EIO, "write failed");
  /* Devices (/dev/null, a terminal) cannot be synced; regular files must. */
  if (!f->err_no && f->tmp && fsync(f->fd) != 0) fail(f, errno, "write failed (fsync)");
  fclose(f->fp);
  f->fp = NULL;
  if (close(f->fd) != 0) fail(f, errno, "write failed (close)");
  f->fd = -1;
  if (!f->err_no && f->tmp) {
    if (rename(f->tmp, f->target) != 0) {
      fail(f, errno, "cannot replace the file");
    } else {
      free(f->tmp);
      f->tmp = NULL;
      int e = sync_dir(f->target);
      if (e) fail(f, e, "written, but its directory could not be synced");
    }
  }
  int rc = 0;
  if (f->err_no) {
    rc = ssae_err_set(err, "%s: %s: %s", f->path, f->what, strerror(f->err_no));
    if (f->tmp) unlink(f->tmp);
  }
  outfile_free(f);
  return rc;
}

int ssae_outfile_write_all(const char *path, const void *data, size_t n, ssae_err *err) {
  ssae_outfile *f = ssae_outfile_open(path, err);
  if (!f) return -1;
  ssae_outfile_write(f, data, n);
  return ssae_outfile_commit(f, err);
}

/* ---- streams ---- */

void ssae_stream_init(ssae_stream *s, FILE *fp, const char *name, int flush_each) {
  memset(s, 0, sizeof *s);
  s->fp = fp;
  s->flush_each = flush_each;
  snprintf(s->name, sizeof s->name, "%s", name ? name : "output");
}

static int stream_fail(ssae_stream *s, int e) {
  if (!s->failed) {
    s->failed = 1;
    s->err_no = e ? e : EIO;
  }
  s->lost++;
  return -1;
}

int ssae_stream_write(ssae_stream *s, const void *p, size_t n) {
  if (s->failed || !s->fp) return stream_fail(s, s->fp ? 0 : EBADF);
  errno = 0;
  if ((n && fwrite(p, 1, n, s->fp) != n) || (s->flush_each && fflush(s->fp) != 0) ||
      ferror(s->fp))
    return stream_fail(s, errno);
  return 0;
}

int ssae_stream_printf(ssae_stream *s, const char *fmt, ...) {
  if (s->failed || !s->fp) return stream_fail(s, s->fp ? 0 : EBADF);
  va_list ap;
  va_start(ap, fmt);
  errno = 0;
  int r = vfprintf(s->fp, fmt, ap);
  va_end(ap);
  if (r < 0 || (s->flush_each && fflush(s->fp) != 0) || ferror(s->fp))
    return stream_fail(s, errno);
  return 0;
}

int ssae_stream_check(ssae_stream *s, ssae_err *err) {
  if (!s->failed && s->fp) {
    errno = 0;
    if (fflush(s->fp) != 0 || ferror(s->fp)) {
      stream_fail(s, errno);
      s->lost--; /* the flush was not a write of the caller's */
    }
  }
  if (!s->failed) return 0;
  ssae_err_clear(err);
  if (!s->reported) {
    s->reported = 1;
    if (s->lost)
      ssae_err_set(err, "%s: write failed: %s (%llu write%s lost)", s->name, strerror(s->err_no),
                   (unsigned long long)s->lost, s->lost == 1 ? "" : "s");
    else
      ssae_err_set(err, "%s: write failed: %s", s->name, strerror(s->err_no));
  }
  return -1;
}

int ssae_stdout_check(ssae_err *err) {
  static int reported;
  errno = 0;
  int bad = fflush(stdout) != 0;
  int e = errno;
  if (!bad && !ferror(stdout)) return 0;
  ssae_err_clear(err);
  if (!reported) {
    reported = 1;
    if (bad && e)
      ssae_err_set(err, "stdout: write failed: %s", strerror(e));
    else
      ssae_err_set(err, "stdout: write failed (an earlier write to it failed)");
  }
  return -1;
}
