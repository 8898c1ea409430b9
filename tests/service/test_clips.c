/* Alarm clips with libsndfile: the clip holds exactly the samples fed from
 * pre-roll before alarm_on to post-roll after alarm_off (WAV and FLAC, read
 * back and compared sample by sample), a long alarm's clip is capped at the
 * maximum length, the file appears only complete (atomic rename: no
 * temporary file is left), the audio-thread feed allocates nothing, and
 * retention deletes the oldest clips by count, age and total size while
 * files that are not clips stay. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sndfile.h>

/* Allocations by the thread inside ssae_clips_feed (the writer thread
 * allocates at the same time, legitimately). Linked with --wrap. */
static _Thread_local int in_feed;
#define SSAE_TEST_COUNT_ALLOCS
#define SSAE_TEST_ALLOC_COUNTS in_feed
#include "../ssae_test.h"
#include "ssae_clips.h"

#define RATE 8000
#define CH 2

static atomic_int written;
static char last_path[CH][512];

static void on_clip(void *user, int channel, const char *id, const char *path,
                    double seconds, int ok, const char *msg) {
  (void)user;
  (void)id;
  (void)seconds;
  CHECK(ok, "clip failed: %s", msg ? msg : "");
  snprintf(last_path[channel], sizeof last_path[channel], "%s", path);
  atomic_fetch_add(&written, 1);
}

/* Sample i of channel c: exact in 16 bits, different per channel. */
static float sig(int c, uint64_t i) {
  int v = (int)((i * 7 + (uint64_t)c * 1000) % 65536) - 32768;
  return (float)v / 32768.0f;
}

static uint64_t fed;

static void feed_to(ssae_clips *cl, double t) {
  enum { BLOCK = 100 };
  float buf[CH][BLOCK];
  const float *in[CH] = {buf[0], buf[1]};
  uint64_t end = (uint64_t)llround(t * RATE);
  while (fed < end) {
    size_t n = end - fed < BLOCK ? (size_t)(end - fed) : BLOCK;
    for (int c = 0; c < CH; c++)
      for (size_t i = 0; i < n; i++) buf[c][i] = sig(c, fed + i);
    in_feed = 1;
    ssae_clips_feed(cl, in, n);
    in_feed = 0;
    CHECK(atomic_load(&n_allocs) == 0, "the audio-thread feed allocated");
    fed += n;
    /* Real time would be slower still: the writer (50 ms poll) keeps up
     * with a ring of pre-roll + 3 s. */
    if (fed % 1000 == 0) usleep(20000);
  }
}

static void wait_written(int n) {
  for (int i = 0; i < 500 && atomic_load(&written) < n; i++) usleep(10000);
  CHECK(atomic_load(&written) >= n, "clip %d not written", n);
}

/* The clip holds samples [from, to) of channel c. */
static void check_clip(const char *path, int c, uint64_t from, uint64_t to) {
  SF_INFO info = {0};
  SNDFILE *sf = sf_open(path, SFM_READ, &info);
  CHECK(sf != NULL, "cannot open clip %s: %s", path, sf_strerror(NULL));
  if (!sf) return;
  CHECK(info.samplerate == RATE && info.channels == 1, "clip format %d Hz %d ch",
        info.samplerate, info.channels);
  CHECK((uint64_t)info.frames == to - from, "%s: %lld samples, expected %llu",
        path, (long long)info.frames, (unsigned long long)(to - from));
  short *got = malloc(sizeof(short) * (size_t)(info.frames + 1));
  sf_count_t n = sf_read_short(sf, got, info.frames);
  uint64_t bad = 0, first_bad = 0;
  for (sf_count_t i = 0; i < n; i++) {
    short want = (short)lrintf(sig(c, from + (uint64_t)i) * 32768.0f);
    if (got[i] != want && bad++ == 0) first_bad = (uint64_t)i;
  }
  CHECK(bad == 0, "%s: %llu samples differ from the input (first at %llu)", path,
        (unsigned long long)bad, (unsigned long long)first_bad);
  const char *comment = sf_get_string(sf, SF_STR_COMMENT);
  CHECK(comment && strncmp(comment, "id-", 3) == 0, "alarm id in the clip: %s",
        comment ? comment : "(none)");
  free(got);
  sf_close(sf);
}

static int count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
  if (d) closedir(d);
  return n;
}

static void clips_roundtrip(const char *dir, int flac) {
  static const char *const names[CH] = {"press-1", "pump.2"};
  ssae_clips_cfg cfg = {0};
  cfg.dir = dir;
  cfg.channels = CH;
  cfg.rate = RATE;
  cfg.names = names;
  cfg.flac = flac;
  cfg.pre_roll_s = 0.5;
  cfg.post_roll_s = 0.25;
  cfg.max_length_s = 2.0;
  cfg.on_clip = on_clip;
  ssae_err err = {{0}};
  ssae_clips *cl = ssae_clips_new(&cfg, &err);
  CHECK(cl != NULL, "clips: %s", err.msg);
  if (!cl) return;
  atomic_store(&written, 0);
  fed = 0;
  char path[512];
  /* Alarm on channel 0 from 1.0 s to 1.5 s; the events come late (the
   * detector's delay): the ring still holds the pre-roll. */
  feed_to(cl, 1.2);
  CHECK(ssae_clips_alarm_on(cl, 0, 1.0, "id-a", path, sizeof path) == 0, "on");
  const char *ext = flac ? ".flac" : ".wav";
  CHECK(strncmp(path, dir, strlen(dir)) == 0 && strstr(path, "/ssae_press-1_") &&
            strcmp(path + strlen(path) - strlen(ext), ext) == 0,
        "clip path %s", path);
  feed_to(cl, 1.6);
  CHECK(ssae_clips_alarm_off(cl, 0, 1.5, "id-a") == 0, "off");
  /* A long alarm on channel 1: on at 3.0 s, never off: capped at 2 s. */
  feed_to(cl, 3.1);
  char path1[512];
  CHECK(ssae_clips_alarm_on(cl, 1, 3.0, "id-b", path1, sizeof path1) == 0, "on 1");
  feed_to(cl, 6.0);
  wait_written(2);
  CHECK(strcmp(last_path[0], path) == 0, "reported path %s vs %s", last_path[0],
        path);
  check_clip(path, 0, (uint64_t)(0.5 * RATE), (uint64_t)(1.75 * RATE));
  check_clip(path1, 1, (uint64_t)(2.5 * RATE), (uint64_t)(4.5 * RATE));
  ssae_clips_stats st;
  ssae_clips_stats_get(cl, &st);
  CHECK(st.written == 2 && st.failed == 0 && st.lost_samples == 0 && st.open == 0,
        "stats written %llu failed %llu lost %llu open %d",
        (unsigned long long)st.written, (unsigned long long)st.failed,
        (unsigned long long)st.lost_samples, st.open);
  /* An alarm still on at exit: its clip holds what arrived. */
  CHECK(ssae_clips_alarm_on(cl, 0, 6.0, "id-c", path, sizeof path) == 0, "on 2");
  feed_to(cl, 6.5);
  ssae_clips_free(cl);
  check_clip(path, 0, (uint64_t)(5.5 * RATE), (uint64_t)(6.5 * RATE));
  CHECK(count_files(dir, ".ssae_clip_") == 0, "temporary files left behind");
  printf("ok  %s clips: pre-roll, post-roll, cap, exit\n", flac ? "FLAC" : "WAV");
}

static void make(const char *dir, const char *name, long age_s, size_t size) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  for (size_t i = 0; f && i < size; i++) fputc(0, f);
  if (f) fclose(f);
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= age_s;
  ts[1] = ts[0];
  utimensat(AT_FDCWD, p, ts, 0);
}

static int exists(const char *dir, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static void retention(const char *base) {
  for (int mode = 0; mode < 3; mode++) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/keep%d", base, mode);
    mkdir(dir, 0755);
    make(dir, "ssae_m_1.wav", 5000, 1000);
    make(dir, "ssae_m_2.flac", 4000, 1000);
    make(dir, "ssae_m_3.wav", 3000, 1000);
    make(dir, "ssae_m_4.flac", 10, 1000);
    make(dir, "notes.txt", 9000, 10);     /* not a clip */
    make(dir, "ssae_m_0.txt", 9000, 10);  /* not a clip either */
    /* a killed process's unfinished clip (idle for a day) goes; one
     * being written (touched a second ago) stays */
    make(dir, ".ssae_clip_dead01", 86400, 100);
    make(dir, ".ssae_clip_live01", 1, 100);
    ssae_clips_cfg cfg = {0};
    cfg.dir = dir;
    cfg.channels = 1;
    cfg.rate = RATE;
    cfg.max_length_s = 1;
    if (mode == 0) cfg.keep_count = 2;
    if (mode == 1) cfg.keep_age_s = 3500;
    if (mode == 2) cfg.keep_bytes = 2500;
    ssae_err err = {{0}};
    ssae_clips *cl = ssae_clips_new(&cfg, &err);
    CHECK(cl && ssae_clips_retain(cl, &err) == 0, "retain: %s", err.msg);
    ssae_clips_free(cl);
    const int want[3][4] = {{0, 0, 1, 1}, {0, 0, 1, 1}, {0, 0, 1, 1}};
    char name[32];
    for (int i = 0; i < 4; i++) {
      snprintf(name, sizeof name, "ssae_m_%d.%s", i + 1, i % 2 ? "flac" : "wav");
      CHECK(exists(dir, name) == want[mode][i], "mode %d: %s %s", mode, name,
            want[mode][i] ? "deleted" : "kept");
    }
    CHECK(exists(dir, "notes.txt") && exists(dir, "ssae_m_0.txt"),
          "mode %d: a file that is not a clip was deleted", mode);
    CHECK(!exists(dir, ".ssae_clip_dead01") && exists(dir, ".ssae_clip_live01"),
          "mode %d: temporary clips: a dead one %s, a live one %s", mode,
          exists(dir, ".ssae_clip_dead01") ? "kept" : "removed",
          exists(dir, ".ssae_clip_live01") ? "kept" : "removed");
  }
  printf("ok  retention by count, age, size: the oldest go, others stay; a dead process's "
         "temporary clip goes\n");
}

int main(void) {
  char base[] = "/tmp/ssae_test_clips_XXXXXX";
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 1;
  }
  char dir[400];
  snprintf(dir, sizeof dir, "%s/wav", base);
  clips_roundtrip(dir, 0);
  snprintf(dir, sizeof dir, "%s/flac", base);
  clips_roundtrip(dir, 1);
  retention(base);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
  return test_done("clips: all checks passed");
}
