#define _GNU_SOURCE /* memmem */
/* The library's writers under the output discipline: the model file, the
 * .npy writer, the pictures (when cairo is built) and the event sink. On a
 * full disk (a 64 KiB tmpfs mounted by the test, filled to a few KiB; the
 * case is skipped with a message where mounting is not allowed) and on
 * /dev/full each fails with a message naming the file and the errno
 * reason, leaves the previous file untouched and no temporary behind. The
 * event sink counts the event lines it could not write and reports the
 * first failure at close.
 * Also the threshold marker (SPEC section 3): a model without a threshold
 * is written with threshold "none" and reads back without one; a file
 * whose threshold is "nan" is refused. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssae_config.h"
#include "ssae_evsink.h"
#include "ssae_model.h"
#include "ssae_npy.h"
#include "ssae_plot.h"
#include "../ssae_test.h"

static char root[] = "/tmp/ssae_writers_XXXXXX";
static char small[300];
static int have_small;

/* Files in dir besides filler and keep. */
static int strays(const char *dir, const char *keep) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, ".."))) continue;
    if (!strcmp(e->d_name, "filler") || !strcmp(e->d_name, "small") ||
        (keep && !strcmp(e->d_name, keep)))
      continue;
    fprintf(stderr, "  stray file: %s/%s\n", dir, e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

/* A 64 KiB tmpfs with about 8 KiB left. */
static void mount_small(void) {
  snprintf(small, sizeof small, "%s/small", root);
  mkdir(small, 0755);
  if (mount("tmpfs", small, "tmpfs", 0, "size=64k") != 0) {
    printf("skipped: full-disk cases (cannot mount a small tmpfs: %s)\n", strerror(errno));
    return;
  }
  have_small = 1;
  char p[400];
  snprintf(p, sizeof p, "%s/filler", small);
  FILE *f = fopen(p, "wb");
  static char z[56 * 1024];
  if (f) {
    fwrite(z, 1, sizeof z, f);
    fclose(f);
  }
}

/* The previous content `old` of dir/name is intact and no temporary is
 * left; err names the file and ENOSPC. */
static void check_failed(const char *what, const char *dir, const char *name, const char *old,
                         const ssae_err *err) {
  char p[700], buf[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  CHECK(strstr(err->msg, p) && strstr(err->msg, strerror(ENOSPC)),
        "%s: message '%s' lacks the file or the reason", what, err->msg);
  CHECK(test_read_text(p, buf, sizeof buf) == (long)strlen(old) && !strcmp(buf, old),
        "%s: previous file changed", what);
  CHECK(strays(dir, name) == 0, "%s: temporary left", what);
}

static void test_model(void) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_default(&err);
  if (!m) {
    CHECK(0, "default model: %s", err.msg);
    return;
  }
  char p[400], q[400];
  /* No threshold: written as "none", read back as none. */
  m->threshold = NAN;
  snprintf(p, sizeof p, "%s/none.safetensors", root);
  CHECK(ssae_model_save(m, p, &err) == 0, "save: %s", err.msg);
  FILE *f = fopen(p, "rb");
  unsigned char *buf = malloc(1 << 20);
  size_t n = f ? fread(buf, 1, 1 << 20, f) : 0;
  if (f) fclose(f);
  unsigned char *key = n ? memmem(buf, n, "\"threshold\":\"none\"", 18) : NULL;
  CHECK(key, "the saved model has no \"threshold\":\"none\"");
  ssae_model *back = ssae_model_load(p, &err);
  CHECK(back && isnan(back->threshold), "reload of \"none\": %s",
        back ? "has a threshold" : err.msg);
  ssae_model_free(back);
  /* "nan" in its place (a space keeps the header's length) is refused. */
  if (key) {
    memcpy(key, "\"threshold\":\"nan\" ", 18);
    CHECK(!ssae_model_load_mem(buf, n, "nan-model", &err) && strstr(err.msg, "threshold") &&
              strstr(err.msg, "'nan'"),
          "threshold \"nan\" accepted: '%s'", err.msg);
  }
  free(buf);
  /* A threshold round-trips. */
  m->threshold = 0.125;
  CHECK(ssae_model_save(m, p, &err) == 0, "save: %s", err.msg);
  back = ssae_model_load(p, &err);
  CHECK(back && back->threshold == 0.125, "threshold 0.125 reloads as %g",
        back ? back->threshold : -1);
  ssae_model_free(back);
  CHECK(strays(root, "none.safetensors") == 0, "temporary left by the model save");
  unlink(p);

  snprintf(q, sizeof q, "%s/none.safetensors", root);
  if (have_small) {
    snprintf(p, sizeof p, "%s/model.safetensors", small);
    test_write_text(p, "previous model\n");
    CHECK(ssae_model_save(m, p, &err) == -1, "model saved onto a full disk");
    check_failed("model", small, "model.safetensors", "previous model\n", &err);
    unlink(p);
  }
  CHECK(ssae_model_save(m, "/dev/full", &err) == -1 && strstr(err.msg, "/dev/full") &&
            strstr(err.msg, strerror(ENOSPC)),
        "model on /dev/full: '%s'", err.msg);
  ssae_model_free(m);
}

static void test_npy(void) {
  static float x[4096 * 8];
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)i;
  size_t shape[2] = {4096, 8};
  ssae_err err = {{0}};
  char p[400];
  snprintf(p, sizeof p, "%s/a.npy", root);
  CHECK(ssae_npy_write_f32(p, x, shape, 2, &err) == 0, "npy: %s", err.msg);
  float *y = NULL;
  size_t sh[8];
  int nd = 0;
  CHECK(ssae_npy_read_f32(p, &y, sh, &nd, &err) == 0 && nd == 2 && sh[0] == 4096 && sh[1] == 8 &&
            !memcmp(x, y, sizeof x),
        "npy round trip: %s", err.msg);
  free(y);
  unlink(p);
  CHECK(ssae_npy_write_f32("/dev/full", x, shape, 2, &err) == -1 &&
            strstr(err.msg, "/dev/full") && strstr(err.msg, strerror(ENOSPC)),
        "npy on /dev/full: '%s'", err.msg);
  if (have_small) {
    snprintf(p, sizeof p, "%s/f.npy", small);
    test_write_text(p, "previous npy\n");
    CHECK(ssae_npy_write_f32(p, x, shape, 2, &err) == -1, "npy written onto a full disk");
    check_failed("npy", small, "f.npy", "previous npy\n", &err);
    unlink(p);
  }
}

static void test_plot(void) {
#if SSAE_HAVE_CAIRO
  double s[40];
  int lab[40];
  for (int i = 0; i < 40; i++) {
    s[i] = 1.0 + i * 0.37 + (i % 2) * 5;
    lab[i] = i % 2;
  }
  ssae_evalplot_section sec = {"machine", s, lab, 40, 0.9, 0.7};
  ssae_err err = {{0}};
  static const char *const names[] = {"eval.png", "eval.svg"};
  for (int k = 0; k < 2; k++) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", root, names[k]);
    CHECK(ssae_evalplot_draw(&sec, 1, 5.0, 0.1, "t", p, 600, 400, NULL, &err) == 0, "%s: %s",
          names[k], err.msg);
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_size > 1000, "%s not written", names[k]);
    unlink(p);
    if (have_small) {
      snprintf(p, sizeof p, "%s/%s", small, names[k]);
      test_write_text(p, "previous picture\n");
      CHECK(ssae_evalplot_draw(&sec, 1, 5.0, 0.1, "t", p, 600, 400, NULL, &err) == -1,
            "%s drawn onto a full disk", names[k]);
      check_failed(names[k], small, names[k], "previous picture\n", &err);
      unlink(p);
    }
  }
  CHECK(strays(root, NULL) == 0, "temporary left by the pictures");
  ssae_plot_cleanup();
#else
  printf("skipped: picture cases (built without cairo)\n");
#endif
}

static void test_evsink(void) {
  ssae_err err = {{0}};
  char w[400];
  snprintf(w, sizeof w, "%s/windows.tsv", have_small ? small : root);
  test_write_text(w, "previous tsv\n");
  ssae_evsink_cfg cfg = {.events_path = "/dev/full", .windows_path = w, .label = "in.wav",
                         .hop_length = 512, .sample_rate = 16000, .frames = 5, .prog = "test"};
  ssae_evsink *s = ssae_evsink_new(&cfg, &err);
  CHECK(s, "sink: %s", err.msg);
  if (!s) return;
  ssae_event ev = {.type = SSAE_EVENT_ALARM_ON, .channel = 0, .t = 1.0, .score = 2,
                   .raw_score = 2, .threshold = 1};
  ssae_evsink_on_event(s, &ev);
  ev.type = SSAE_EVENT_ALARM_OFF;
  ssae_evsink_on_event(s, &ev);
  ssae_evsink_note(s, 2.0, "device_lost", "gone");
  /* Enough window lines to overflow what is left on the small tmpfs. */
  ev.type = SSAE_EVENT_WINDOW;
  for (int i = 0; i < 2000; i++) {
    ev.window = (uint64_t)i;
    ssae_evsink_on_event(s, &ev);
  }
  CHECK(ssae_evsink_lost(s) == 3, "lost %llu event lines, want 3",
        (unsigned long long)ssae_evsink_lost(s));
  CHECK(ssae_evsink_check(s, &err) == -1 && strstr(err.msg, "/dev/full") &&
            strstr(err.msg, strerror(ENOSPC)),
        "check: '%s'", err.msg);
  CHECK(ssae_evsink_alarms(s, 0) == 1, "alarm not counted");
  int rc = ssae_evsink_close(s, &err);
  CHECK(rc == -1 && strstr(err.msg, "/dev/full") && strstr(err.msg, "3 event lines lost"),
        "close: '%s'", err.msg);
  if (have_small) {
    /* The TSV did not fit: the previous one stays, no temporary. */
    char buf[64];
    CHECK(test_read_text(w, buf, sizeof buf) == 13 && !strcmp(buf, "previous tsv\n"),
          "windows TSV replaced on a full disk");
    CHECK(strays(small, "windows.tsv") == 0, "temporary TSV left");
  }
  unlink(w);
  /* All well: the TSV is committed, close says 0. */
  snprintf(w, sizeof w, "%s/ok.tsv", root);
  cfg.events_path = NULL;
  cfg.windows_path = w;
  s = ssae_evsink_new(&cfg, &err);
  if (s) {
    ev.window = 7;
    ssae_evsink_on_event(s, &ev);
    CHECK(ssae_evsink_check(s, &err) == 0, "check on a healthy sink");
    CHECK(ssae_evsink_close(s, &err) == 0, "close: %s", err.msg);
    char buf[256];
    CHECK(test_read_text(w, buf, sizeof buf) > 0 &&
              strstr(buf, "path\twindow\ttime\tscore\nin.wav\t7\t"),
          "TSV '%s'", buf);
  }
  unlink(w);
  /* An events file that cannot be created is refused, naming it. */
  cfg.events_path = "/nonexistent/dir/events.jsonl";
  CHECK(!ssae_evsink_new(&cfg, &err) && strstr(err.msg, "/nonexistent/dir/events.jsonl") &&
            strstr(err.msg, strerror(ENOENT)),
        "events file: '%s'", err.msg);
}

int main(void) {
  if (!mkdtemp(root)) return 1;
  mount_small();
  test_model();
  test_npy();
  test_plot();
  test_evsink();
  if (have_small) umount(small);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
  return test_done("writers: all checks passed");
}
