/* The output discipline (src/core/ssae_outfile.h): a committed file holds
 * exactly what was written and no temporary is left; on a full disk (a
 * 64 KiB tmpfs the test mounts when it may), on /dev/full and in a
 * read-only directory the write fails with a message naming the file and
 * the errno reason, the previous file is untouched and no temporary is
 * left; abort leaves the target as it was; a symlink's destination is
 * replaced, not the link; a checked stream (and stdout at exit) reports
 * its first failure once and counts the writes lost. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ssae_outfile.h"
#include "../ssae_test.h"

static char root[256];

/* Files in dir other than the expected ones (a temporary left behind). */
static int stray_files(const char *dir, const char *keep1, const char *keep2) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "lost+found"))
      continue;
    if ((keep1 && !strcmp(e->d_name, keep1)) || (keep2 && !strcmp(e->d_name, keep2))) continue;
    fprintf(stderr, "  stray file in %s: %s\n", dir, e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

static void test_commit(void) {
  char p[512], buf[4096];
  snprintf(p, sizeof p, "%s/out.txt", root);
  ssae_err err = {{0}};
  ssae_outfile *f = ssae_outfile_open(p, &err);
  CHECK(f, "open: %s", err.msg);
  if (!f) return;
  /* The target does not exist until commit. */
  struct stat st;
  CHECK(stat(p, &st) != 0, "target visible before commit");
  CHECK(ssae_outfile_write(f, "one ", 4) == 0, "write");
  CHECK(ssae_outfile_printf(f, "%s %d\n", "two", 3) == 0, "printf");
  fprintf(ssae_outfile_fp(f), "via fp\n");
  CHECK(ssae_outfile_commit(f, &err) == 0, "commit: %s", err.msg);
  CHECK(test_read_text(p, buf, sizeof buf) == 17 && !strcmp(buf, "one two 3\nvia fp\n"),
        "content '%s'", buf);
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == (0666 & ~(mode_t)022), "mode %o",
        (unsigned)(st.st_mode & 0777));
  CHECK(stray_files(root, "out.txt", NULL) == 0, "temporary left after commit");

  /* Replacing keeps the existing file's mode. */
  chmod(p, 0600);
  CHECK(ssae_outfile_write_all(p, "new\n", 4, &err) == 0, "write_all: %s", err.msg);
  CHECK(test_read_text(p, buf, sizeof buf) == 4 && !strcmp(buf, "new\n"),
        "replaced content '%s'", buf);
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600, "mode kept %o",
        (unsigned)(st.st_mode & 0777));

  /* Abort: target as it was, no temporary. */
  f = ssae_outfile_open(p, &err);
  CHECK(f, "open: %s", err.msg);
  if (f) {
    ssae_outfile_write(f, "garbage", 7);
    ssae_outfile_abort(f);
  }
  CHECK(test_read_text(p, buf, sizeof buf) == 4 && !strcmp(buf, "new\n"), "abort changed the file");
  CHECK(stray_files(root, "out.txt", NULL) == 0, "temporary left after abort");
  ssae_outfile_abort(NULL);

  /* Through a symlink: the destination changes, the link stays a link. */
  char l[512];
  snprintf(l, sizeof l, "%s/link.txt", root);
  CHECK(symlink("out.txt", l) == 0, "symlink: %s", strerror(errno));
  CHECK(ssae_outfile_write_all(l, "via link\n", 9, &err) == 0, "write via link: %s", err.msg);
  CHECK(lstat(l, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
  CHECK(test_read_text(p, buf, sizeof buf) == 9 && !strcmp(buf, "via link\n"),
        "destination '%s'", buf);
  CHECK(stray_files(root, "out.txt", "link.txt") == 0, "temporary left (symlink)");
  unlink(l);
  unlink(p);

  /* No such directory: refused at open, naming the file. */
  snprintf(p, sizeof p, "%s/no/such/dir/x.npy", root);
  CHECK(!ssae_outfile_open(p, &err) && strstr(err.msg, p) && strstr(err.msg, strerror(ENOENT)),
        "missing dir: '%s'", err.msg);
  /* A directory is not a file. */
  CHECK(!ssae_outfile_open(root, &err) && strstr(err.msg, "directory"), "dir: '%s'", err.msg);
}

/* A write of n bytes to path fails with reason `why`; the previous content
 * `old` is untouched and dir holds only `keep`. */
static void expect_failed_write(const char *dir, const char *name, const char *old, size_t n,
                                int why) {
  char p[1024], buf[4096];
  snprintf(p, sizeof p, "%.500s/%.500s", dir, name);
  test_write_text(p, old);
  ssae_err err = {{0}};
  ssae_outfile *f = ssae_outfile_open(p, &err);
  CHECK(f, "open on %s: %s", dir, err.msg);
  if (!f) return;
  char *junk = malloc(n);
  memset(junk, 'x', n);
  /* In pieces, as writers do; later writes after the failure are dropped. */
  for (size_t i = 0; i < n; i += 1000) ssae_outfile_write(f, junk + i, n - i < 1000 ? n - i : 1000);
  free(junk);
  int rc = ssae_outfile_commit(f, &err);
  CHECK(rc == -1, "a %zu-byte write to %s succeeded", n, p);
  CHECK(strstr(err.msg, p) && strstr(err.msg, strerror(why)), "message '%s' lacks the file "
        "or '%s'", err.msg, strerror(why));
  CHECK(test_read_text(p, buf, sizeof buf) == (long)strlen(old) && !strcmp(buf, old),
        "previous file changed: '%s'", buf);
  CHECK(stray_files(dir, name, NULL) == 0, "temporary left in %s", dir);
}

static void test_full_disk(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/small", root);
  mkdir(dir, 0755);
  if (mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
    printf("skipped: full-disk case (cannot mount a small tmpfs: %s)\n", strerror(errno));
    rmdir(dir);
    return;
  }
  expect_failed_write(dir, "model.safetensors", "previous model\n", 200000, ENOSPC);
  /* The space is free again afterwards: a small file still commits. */
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  ssae_err err = {{0}};
  CHECK(ssae_outfile_write_all(p, "fits\n", 5, &err) == 0, "after full: %s", err.msg);
  umount(dir);
  rmdir(dir);
}

static void test_dev_full(void) {
  struct stat st;
  if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) {
    printf("skipped: /dev/full case (no /dev/full)\n");
    return;
  }
  ssae_err err = {{0}};
  ssae_outfile *f = ssae_outfile_open("/dev/full", &err);
  CHECK(f, "open /dev/full: %s", err.msg);
  if (f) {
    ssae_outfile_printf(f, "hello\n");
    CHECK(ssae_outfile_commit(f, &err) == -1 && strstr(err.msg, "/dev/full") &&
              strstr(err.msg, strerror(ENOSPC)),
          "/dev/full: '%s'", err.msg);
  }
  /* /dev/full is still the device (written in place, never renamed over). */
  CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode), "/dev/full replaced");
  /* /dev/null takes anything. */
  CHECK(ssae_outfile_write_all("/dev/null", "x", 1, &err) == 0, "/dev/null: %s", err.msg);

  /* A stream on /dev/full: the first failure is kept, later writes lost,
   * reported once. */
  FILE *fp = fopen("/dev/full", "w");
  if (!fp) return;
  ssae_stream s;
  ssae_stream_init(&s, fp, "events.jsonl", 1);
  CHECK(ssae_stream_write(&s, "{}\n", 3) == -1, "write to /dev/full succeeded");
  CHECK(ssae_stream_printf(&s, "{\"n\":%d}\n", 2) == -1, "second write succeeded");
  CHECK(s.lost == 2, "lost %llu, want 2", (unsigned long long)s.lost);
  CHECK(ssae_stream_check(&s, &err) == -1 && strstr(err.msg, "events.jsonl") &&
            strstr(err.msg, strerror(ENOSPC)) && strstr(err.msg, "2 writes lost"),
        "stream: '%s'", err.msg);
  CHECK(ssae_stream_check(&s, &err) == -1 && !err.msg[0], "reported twice: '%s'", err.msg);
  fclose(fp);
  /* Buffered (no flush per write): the failure shows at check. */
  fp = fopen("/dev/full", "w");
  if (!fp) return;
  ssae_stream_init(&s, fp, "out.tsv", 0);
  ssae_stream_printf(&s, "a\tb\n");
  CHECK(ssae_stream_check(&s, &err) == -1 && strstr(err.msg, strerror(ENOSPC)),
        "buffered stream: '%s'", err.msg);
  fclose(fp);
  /* A healthy stream checks clean. */
  fp = fopen("/dev/null", "w");
  if (!fp) return;
  ssae_stream_init(&s, fp, "null", 1);
  CHECK(ssae_stream_write(&s, "x\n", 2) == 0 && ssae_stream_check(&s, &err) == 0,
        "/dev/null stream failed");
  fclose(fp);
}

/* stdout on /dev/full, in a child: the exit check reports the failure
 * with its reason once. */
static void test_stdout(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/full", "w", stdout)) _exit(3);
    ssae_err err = {{0}};
    int ok = 1;
    printf("a line that cannot be written\n");
    if (!(ssae_stdout_check(&err) == -1 && strstr(err.msg, "stdout") &&
          strstr(err.msg, strerror(ENOSPC)))) {
      fprintf(stderr, "first stdout check: '%s'\n", err.msg);
      ok = 0;
    }
    if (!(ssae_stdout_check(&err) == -1 && !err.msg[0])) {
      fprintf(stderr, "second stdout check: '%s'\n", err.msg);
      ok = 0;
    }
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stdout on /dev/full: child status %d", st);
  ssae_err err = {{0}};
  CHECK(ssae_stdout_check(&err) == 0, "healthy stdout: '%s'", err.msg);
}

static void test_read_only(void) {
  char dir[300], p[512], buf[256];
  snprintf(dir, sizeof dir, "%s/ro", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/scores.tsv", dir);
  test_write_text(p, "old\n");
  int why;
  if (geteuid() == 0) {
    /* Root writes through mode bits: a read-only bind mount instead. */
    if (mount(dir, dir, "none", MS_BIND, NULL) != 0 ||
        mount("none", dir, "none", MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0) {
      printf("skipped: read-only directory case (cannot bind-mount read-only: %s)\n",
             strerror(errno));
      umount(dir);
      return;
    }
    why = EROFS;
  } else {
    chmod(dir, 0555);
    why = EACCES;
  }
  ssae_err err = {{0}};
  CHECK(!ssae_outfile_open(p, &err) && strstr(err.msg, p) && strstr(err.msg, strerror(why)),
        "read-only dir: '%s'", err.msg);
  CHECK(test_read_text(p, buf, sizeof buf) == 4 && !strcmp(buf, "old\n"), "file changed");
  CHECK(stray_files(dir, "scores.tsv", NULL) == 0, "temporary left in the read-only dir");
  if (geteuid() == 0)
    umount(dir);
  else
    chmod(dir, 0755);
}

int main(void) {
  umask(022);
  snprintf(root, sizeof root, "/tmp/ssae_outfile_XXXXXX");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  test_commit();
  test_full_disk();
  test_dev_full();
  test_stdout();
  test_read_only();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
  return test_done("outfile: all checks passed");
}
