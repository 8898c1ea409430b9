#include "ssae_audio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int ssae_audio_parse_channel(const char *s, int *channel, ssae_err *err) {
  if (!s || !*s) return ssae_err_set(err, "empty channel: give an index from 0, 'mix' or 'all'");
  if (!strcasecmp(s, "mix")) {
    *channel = SSAE_CHANNEL_MIX;
    return 0;
  }
  if (!strcasecmp(s, "all")) {
    *channel = SSAE_CHANNEL_ALL;
    return 0;
  }
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 0 || v > 1023)
    return ssae_err_set(err, "channel '%s' is not an index from 0, 'mix' or 'all'", s);
  *channel = (int)v;
  return 0;
}

void ssae_audio_release(ssae_audio *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* Grows the planar output (streams x cap) to hold at least `need` frames. */
static int grow(float **data, size_t *cap, int streams, size_t used, size_t need) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 65536;
  while (nc < need) nc *= 2;
  float *d = malloc(sizeof *d * nc * (size_t)streams);
  if (!d) return -1;
  for (int c = 0; c < streams; c++)
    if (used) memcpy(d + (size_t)c * nc, *data + (size_t)c * *cap, used * sizeof *d);
  free(*data);
  *data = d;
  *cap = nc;
  return 0;
}

static int resample(const char *path, float **data, size_t *frames, int streams, int from,
                    int to, ssae_err *err) {
  size_t olen = (size_t)((double)*frames * to / from + 0.5);
  if (olen == 0) olen = 1;
  float *out = malloc(sizeof *out * olen * (size_t)streams);
  if (!out) return ssae_err_set(err, "%s: out of memory resampling", path);
  soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  size_t done = olen;
  for (int c = 0; c < streams; c++) {
    size_t odone = 0;
    soxr_error_t e = soxr_oneshot(from, to, 1, *data + (size_t)c * *frames, *frames, NULL,
                                  out + (size_t)c * olen, olen, &odone, NULL, &q, NULL);
    if (e) {
      free(out);
      return ssae_err_set(err, "%s: resampling %d Hz to %d Hz failed: %s", path, from, to, e);
    }
    if (odone < done) done = odone;
  }
  /* Every channel gets the same length (soxr gives each the same anyway). */
  if (done < olen)
    for (int c = 1; c < streams; c++)
      memmove(out + (size_t)c * done, out + (size_t)c * olen, done * sizeof *out);
  free(*data);
  *data = out;
  *frames = done;
  return 0;
}

/* libsndfile reads a file in pieces of a few kilobytes, one system call
 * each (about 50 for a 10 s clip, plus seeks); system calls are a large
 * part of decoding a small PCM file. This reader gives it the file through
 * 64 KiB reads at explicit offsets instead. Regular files only. */
#define VIO_BUF (64 * 1024)
typedef struct {
  int fd;
  sf_count_t size, pos;
  unsigned char *buf; /* bytes buf_at .. buf_at + buf_len of the file */
  sf_count_t buf_at;
  size_t buf_len;
} vio_file;

static sf_count_t vio_len(void *u) { return ((vio_file *)u)->size; }
static sf_count_t vio_tell(void *u) { return ((vio_file *)u)->pos; }
static sf_count_t vio_write(const void *p, sf_count_t n, void *u) {
  (void)p, (void)n, (void)u;
  return 0;
}

static sf_count_t vio_seek(sf_count_t off, int whence, void *u) {
  vio_file *v = u;
  sf_count_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? v->pos + off : v->size + off;
  if (p < 0) return -1;
  v->pos = p;
  return p;
}

static sf_count_t vio_read(void *ptr, sf_count_t count, void *u) {
  vio_file *v = u;
  unsigned char *dst = ptr;
  sf_count_t done = 0;
  while (done < count && v->pos < v->size) {
    if (v->pos >= v->buf_at && v->pos < v->buf_at + (sf_count_t)v->buf_len) {
      sf_count_t k = v->buf_at + (sf_count_t)v->buf_len - v->pos;
      if (k > count - done) k = count - done;
      memcpy(dst + done, v->buf + (v->pos - v->buf_at), (size_t)k);
      v->pos += k;
      done += k;
      continue;
    }
    /* Large requests go straight to the caller's memory. */
    const int direct = count - done >= VIO_BUF;
    ssize_t r = pread(v->fd, direct ? dst + done : v->buf,
                      direct ? (size_t)(count - done) : VIO_BUF, (off_t)v->pos);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (direct) {
      v->pos += r;
      done += r;
    } else {
      v->buf_at = v->pos;
      v->buf_len = (size_t)r;
    }
  }
  return done;
}

/* Closes the file and, when it was read through vio_file, its reader. */
static void close_reader(SNDFILE *sf, vio_file *vf) {
  if (sf) sf_close(sf);
  if (vf->fd >= 0) close(vf->fd);
  free(vf->buf);
}

int ssae_audio_load(const char *path, int channel, int target_rate, ssae_audio *out,
                    ssae_err *err) {
  memset(out, 0, sizeof *out);
  if (!path || !*path) return ssae_err_set(err, "no file name given");
  struct stat st;
  if (stat(path, &st) != 0) return ssae_err_set(err, "%s: cannot open: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) return ssae_err_set(err, "%s: is a directory, not an audio file", path);
  if (S_ISREG(st.st_mode) && st.st_size == 0)
    return ssae_err_set(err, "%s: empty file (0 bytes), not audio", path);
  if (target_rate < 0 || channel < SSAE_CHANNEL_ALL)
    return ssae_err_set(err, "%s: bad request (channel %d, rate %d)", path, channel, target_rate);
  SF_INFO info;
  memset(&info, 0, sizeof info);
  SNDFILE *sf = NULL;
  vio_file vf = {.fd = -1};
  if (S_ISREG(st.st_mode)) {
    vf.size = (sf_count_t)st.st_size;
    vf.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (vf.fd < 0) return ssae_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    if (!(vf.buf = malloc(VIO_BUF))) {
      close(vf.fd);
      return ssae_err_set(err, "%s: out of memory", path);
    }
    SF_VIRTUAL_IO io = {vio_len, vio_seek, vio_read, vio_write, vio_tell};
    sf = sf_open_virtual(&io, SFM_READ, &info, &vf);
  } else {
    sf = sf_open(path, SFM_READ, &info);
  }
  if (!sf) {
    ssae_err_set(err, "%s: not a readable audio file: %s", path, sf_strerror(NULL));
    close_reader(NULL, &vf);
    return -1;
  }
  const int ch = info.channels;
  if (ch < 1 || info.samplerate < 1) {
    close_reader(sf, &vf);
    return ssae_err_set(err, "%s: bad audio header (%d channels, %d Hz)", path, ch,
                        info.samplerate);
  }
  if (channel >= ch) {
    close_reader(sf, &vf);
    return ssae_err_set(err, "%s: channel %d asked for, file has %d channel%s (0 to %d)", path,
                        channel, ch, ch == 1 ? "" : "s", ch - 1);
  }
  const int streams = channel == SSAE_CHANNEL_ALL ? ch : 1;
  const size_t block = 4096;
  float *buf = malloc(sizeof *buf * block * (size_t)ch);
  float *data = NULL;
  size_t cap = 0, n = 0;
  if (!buf) {
    close_reader(sf, &vf);
    return ssae_err_set(err, "%s: out of memory", path);
  }
  if (info.frames > 0 && info.frames < (sf_count_t)(SIZE_MAX / 8 / (size_t)streams) &&
      grow(&data, &cap, streams, 0, (size_t)info.frames)) {
    free(buf);
    close_reader(sf, &vf);
    return ssae_err_set(err, "%s: out of memory for %lld frames", path, (long long)info.frames);
  }
  for (;;) {
    if (ch == 1) { /* straight into the output */
      if (n == cap && grow(&data, &cap, 1, n, n + block)) {
        free(buf);
        free(data);
        close_reader(sf, &vf);
        return ssae_err_set(err, "%s: out of memory reading audio", path);
      }
      sf_count_t got = sf_readf_float(sf, data + n, (sf_count_t)(cap - n));
      if (got <= 0) break;
      n += (size_t)got;
      continue;
    }
    sf_count_t got = sf_readf_float(sf, buf, (sf_count_t)block);
    if (got <= 0) break;
    if (grow(&data, &cap, streams, n, n + (size_t)got)) {
      free(buf);
      free(data);
      close_reader(sf, &vf);
      return ssae_err_set(err, "%s: out of memory reading audio", path);
    }
    for (sf_count_t i = 0; i < got; i++) {
      const float *fr = buf + (size_t)i * (size_t)ch;
      if (channel >= 0) {
        data[n + (size_t)i] = fr[channel];
      } else if (channel == SSAE_CHANNEL_MIX) {
        double s = 0.0;
        for (int c = 0; c < ch; c++) s += fr[c];
        data[n + (size_t)i] = (float)(s / ch);
      } else {
        for (int c = 0; c < ch; c++) data[(size_t)c * cap + n + (size_t)i] = fr[c];
      }
    }
    n += (size_t)got;
  }
  int sferr = sf_error(sf);
  char sfmsg[256];
  snprintf(sfmsg, sizeof sfmsg, "%s", sf_strerror(sf));
  free(buf);
  close_reader(sf, &vf);
  if (sferr) {
    free(data);
    return ssae_err_set(err, "%s: error reading audio: %s", path, sfmsg);
  }
  if (n == 0) {
    free(data);
    return ssae_err_set(err, "%s: no audio samples (zero-length audio)", path);
  }
  /* Pack the planar streams to n frames each. */
  if (streams > 1 && cap != n)
    for (int c = 1; c < streams; c++)
      memmove(data + (size_t)c * n, data + (size_t)c * cap, n * sizeof *data);
  size_t frames = n;
  int rate = info.samplerate;
  if (target_rate > 0 && target_rate != rate) {
    if (resample(path, &data, &frames, streams, rate, target_rate, err)) {
      free(data);
      return -1;
    }
    rate = target_rate;
  }
  out->data = data;
  out->frames = frames;
  out->channels = streams;
  out->file_channels = ch;
  out->file_rate = info.samplerate;
  out->rate = rate;
  return 0;
}
