#include "ssae_audio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

/* libsndfile keeps a failed open's reason in process-wide variables.
 * Opens run side by side under the read side of this lock; an open that
 * fails is made again under the write side, alone, so that the reason read
 * is its own. (One mutex around every open made the decoding threads of
 * `ssae score` queue: 10,000 opens took 6-7 s of their time, summed.) */
static pthread_rwlock_t open_lock = PTHREAD_RWLOCK_INITIALIZER;

/* An open made alone (the write side of open_lock): a file by its path
 * (path not NULL) or a descriptor; a failure's reason goes into why (n
 * bytes) before any other open can replace it. */
static SNDFILE *open_alone(const char *path, int fd, int mode, SF_INFO *info, int close_desc,
                           char *why, size_t n) {
  pthread_rwlock_wrlock(&open_lock);
  SNDFILE *sf = path ? sf_open(path, mode, info) : sf_open_fd(fd, mode, info, close_desc);
  if (!sf && why && n) snprintf(why, n, "%s", sf_strerror(NULL));
  pthread_rwlock_unlock(&open_lock);
  return sf;
}

SNDFILE *ssae_audio_sf_open_fd(int fd, int mode, SF_INFO *info, int close_desc, char *why,
                               size_t n) {
  return open_alone(NULL, fd, mode, info, close_desc, why, n);
}

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

/* libsndfile reads a file in pieces of a few kilobytes, one system call
 * each (about 50 for a 10 s clip, plus seeks); system calls are a large
 * part of decoding a small PCM file. This reader gives it the file through
 * 64 KiB reads at explicit offsets instead. Regular files only. The first
 * read, for the header, is VIO_HEAD: most headers fit, and the samples
 * after it then go straight to the caller's memory instead of through the
 * buffer (at 64 KiB, a fifth of a ten-second clip was read and copied
 * twice). */
#define VIO_BUF (64 * 1024)
#define VIO_HEAD (4 * 1024)
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
    const size_t fill = v->pos == 0 && !v->buf_len ? VIO_HEAD : VIO_BUF;
    ssize_t r = pread(v->fd, direct ? dst + done : v->buf,
                      direct ? (size_t)(count - done) : fill, (off_t)v->pos);
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

size_t ssae_audio_find_nonfinite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return n;
}

/* File frames per read: the reader's memory is a few blocks whatever the
 * file's length. */
#define BLOCK 4096

struct ssae_audio_stream {
  char *path;
  SNDFILE *sf;
  vio_file vf;
  ssae_audio_opts opts;
  ssae_audio_info info;
  int channel, ch, streams;
  int format;
  float *in;       /* BLOCK x ch, interleaved as the file has them */
  float *sel;      /* streams x BLOCK, planar: the selected or mixed input */
  size_t sel_n, sel_pos; /* input in sel, and how much the resamplers took */
  soxr_t *rs;      /* one resampler per stream; NULL at the file's rate */
  float *out;      /* streams x pcap, planar: resampled output (or sel) */
  size_t pcap, pend_n, pend_pos;
  int drain;       /* the last resampler call filled out: it may hold more */
  int eof, flushed, ended;
  int read_float, read_i16; /* which reader this stream is read with */
  unsigned long long in_frames, out_frames, out_limit;
  ssae_err warning;
};

static void stream_warn(ssae_audio_stream *s, const char *fmt, const char *detail) {
  if (!s->warning.msg[0]) ssae_err_set(&s->warning, fmt, s->path, detail);
}

void ssae_audio_close(ssae_audio_stream *s) {
  if (!s) return;
  if (s->rs)
    for (int c = 0; c < s->streams; c++)
      if (s->rs[c]) soxr_delete(s->rs[c]);
  free(s->rs);
  close_reader(s->sf, &s->vf);
  if (s->out != s->sel) free(s->out);
  free(s->sel);
  free(s->in);
  free(s->path);
  free(s);
}

const ssae_audio_info *ssae_audio_stream_info(const ssae_audio_stream *s) { return &s->info; }
const char *ssae_audio_stream_warning(const ssae_audio_stream *s) { return s->warning.msg; }

/* libsndfile corrects a WAV/AIFF data chunk that claims more bytes than
 * the file has and logs "data : CLAIMED (should be PRESENT)". The log is
 * the only place that says the file was cut. */
static void check_cut_header(ssae_audio_stream *s) {
  char log[4096];
  if (sf_command(s->sf, SFC_GET_LOG_INFO, log, sizeof log) <= 0) return;
  log[sizeof log - 1] = '\0';
  for (char *line = log; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    while (*line == ' ') line++;
    if ((!strncmp(line, "data", 4) || !strncmp(line, "SSND", 4)) && strstr(line, "(should be")) {
      stream_warn(s, s->opts.strict ? "%s: the data chunk is shorter than its header says "
                                      "(%s bytes): the file was cut; refused (strict)"
                                    : "%s: the data chunk is shorter than its header says "
                                      "(%s bytes): the file was cut; reading the frames present",
                  line);
      return;
    }
    line = nl ? nl + 1 : NULL;
  }
}

ssae_audio_stream *ssae_audio_open(const char *path, int channel, int target_rate,
                                   const ssae_audio_opts *opts, ssae_err *err) {
  if (!path || !*path) {
    ssae_err_set(err, "no file name given");
    return NULL;
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    ssae_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  if (S_ISDIR(st.st_mode)) {
    ssae_err_set(err, "%s: is a directory, not an audio file", path);
    return NULL;
  }
  if (S_ISREG(st.st_mode) && st.st_size == 0) {
    ssae_err_set(err, "%s: empty file (0 bytes), not audio", path);
    return NULL;
  }
  if (target_rate < 0 || channel < SSAE_CHANNEL_ALL) {
    ssae_err_set(err, "%s: bad request (channel %d, rate %d)", path, channel, target_rate);
    return NULL;
  }
  ssae_audio_stream *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    ssae_err_set(err, "%s: out of memory", path);
    return NULL;
  }
  s->vf.fd = -1;
  if (opts) s->opts = *opts;
  SF_INFO info;
  memset(&info, 0, sizeof info);
  if (S_ISREG(st.st_mode)) {
    s->vf.size = (sf_count_t)st.st_size;
    s->vf.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->vf.fd < 0) {
      ssae_err_set(err, "%s: cannot open: %s", path, strerror(errno));
      goto fail;
    }
    if (!(s->vf.buf = malloc(VIO_BUF))) goto oom;
    SF_VIRTUAL_IO io = {vio_len, vio_seek, vio_read, vio_write, vio_tell};
    pthread_rwlock_rdlock(&open_lock);
    s->sf = sf_open_virtual(&io, SFM_READ, &info, &s->vf);
    pthread_rwlock_unlock(&open_lock);
    if (!s->sf) {
      /* again, alone, for the reason (the file read from its start) */
      s->vf.pos = s->vf.buf_at = 0;
      s->vf.buf_len = 0;
      memset(&info, 0, sizeof info);
      pthread_rwlock_wrlock(&open_lock);
      s->sf = sf_open_virtual(&io, SFM_READ, &info, &s->vf);
      if (!s->sf) ssae_err_set(err, "%s: not a readable audio file: %s", path, sf_strerror(NULL));
      pthread_rwlock_unlock(&open_lock);
    }
  } else {
    /* a pipe or a device is read once: opened alone */
    char why[SSAE_ERR_LEN];
    s->sf = open_alone(path, -1, SFM_READ, &info, 0, why, sizeof why);
    if (!s->sf) ssae_err_set(err, "%s: not a readable audio file: %s", path, why);
  }
  if (!s->sf) goto fail;
  const int ch = info.channels;
  if (ch < 1 || ch > 1024) {
    ssae_err_set(err, "%s: bad audio header (%d channels)", path, ch);
    goto fail;
  }
  /* A rate out of range is a broken or hostile header: 1 Hz would make the
   * resampler turn every file sample into 16000. */
  if (info.samplerate < SSAE_AUDIO_RATE_MIN || info.samplerate > SSAE_AUDIO_RATE_MAX) {
    ssae_err_set(err, "%s: sample rate %d Hz is outside %d Hz to %d Hz: a broken header", path,
                 info.samplerate, SSAE_AUDIO_RATE_MIN, SSAE_AUDIO_RATE_MAX);
    goto fail;
  }
  if (channel >= ch) {
    ssae_err_set(err, "%s: channel %d asked for, file has %d channel%s (0 to %d)", path, channel,
                 ch, ch == 1 ? "" : "s", ch - 1);
    goto fail;
  }
  s->ch = ch;
  s->channel = channel;
  s->format = info.format;
  s->streams = channel == SSAE_CHANNEL_ALL ? ch : 1;
  s->info.channels = s->streams;
  s->info.file_channels = ch;
  s->info.file_rate = info.samplerate;
  s->info.rate = target_rate > 0 ? target_rate : info.samplerate;
  s->info.header_frames = info.frames >= 0 && info.frames != SF_COUNT_MAX ? (long long)info.frames
                                                                          : -1;
  check_cut_header(s);
  if (s->warning.msg[0] && s->opts.strict) {
    if (err) *err = s->warning;
    goto fail;
  }
  if (!(s->in = malloc(sizeof *s->in * BLOCK * (size_t)ch)) ||
      !(s->sel = malloc(sizeof *s->sel * BLOCK * (size_t)s->streams)))
    goto oom;
  if (s->info.rate == s->info.file_rate) {
    s->out = s->sel;
    s->pcap = BLOCK;
  } else {
    s->pcap = (size_t)((double)BLOCK * s->info.rate / s->info.file_rate) + 1024;
    if (!(s->out = malloc(sizeof *s->out * s->pcap * (size_t)s->streams)) ||
        !(s->rs = calloc((size_t)s->streams, sizeof *s->rs)))
      goto oom;
    /* The quality soxr_oneshot was given before the reader streamed: the
     * same filter, so the same samples. */
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    for (int c = 0; c < s->streams; c++) {
      soxr_error_t e = NULL;
      s->rs[c] = soxr_create(s->info.file_rate, s->info.rate, 1, &e, NULL, &q, NULL);
      if (!s->rs[c] || e) {
        ssae_err_set(err, "%s: resampling %d Hz to %d Hz: %s", path, s->info.file_rate,
                     s->info.rate, e ? e : "cannot create the resampler");
        goto fail;
      }
    }
  }
  return s;
oom:
  ssae_err_set(err, "%s: out of memory", path);
fail:
  ssae_audio_close(s);
  return NULL;
}

/* The next block of file frames into sel. Returns the frames, 0 at the
 * end, -1 on an error or a non-finite sample. */
static long read_block(ssae_audio_stream *s, ssae_err *err) {
  const int ch = s->ch;
  sf_count_t got = sf_readf_float(s->sf, s->in, BLOCK);
  if (got <= 0) {
    if (sf_error(s->sf))
      return ssae_err_set(err, "%s: error reading audio: %s", s->path, sf_strerror(s->sf));
    return 0;
  }
  if (!s->opts.allow_nonfinite) {
    size_t n = (size_t)got * (size_t)ch, i = ssae_audio_find_nonfinite(s->in, n);
    if (i < n) {
      unsigned long long frame = s->in_frames + i / (size_t)ch;
      float v = s->in[i];
      return ssae_err_set(err, "%s: sample at %.6f s (frame %llu, channel %d) is %s: the file "
                          "holds non-finite samples", s->path, (double)frame / s->info.file_rate,
                          frame, (int)(i % (size_t)ch), isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
    }
  }
  for (sf_count_t i = 0; i < got; i++) {
    const float *fr = s->in + (size_t)i * (size_t)ch;
    if (s->channel >= 0) {
      s->sel[i] = fr[s->channel];
    } else if (s->channel == SSAE_CHANNEL_MIX) {
      double sum = 0.0;
      for (int c = 0; c < ch; c++) sum += fr[c];
      s->sel[i] = (float)(sum / ch);
    } else {
      for (int c = 0; c < ch; c++) s->sel[(size_t)c * BLOCK + (size_t)i] = fr[c];
    }
  }
  s->in_frames += (unsigned long long)got;
  return (long)got;
}

/* Runs every stream's resampler once on the same input (in: NULL flushes)
 * into out. The streams are alike, so they take and give the same counts. */
static int resample_step(ssae_audio_stream *s, int flush, size_t *idone, size_t *odone,
                         ssae_err *err) {
  size_t id0 = 0, od0 = 0;
  for (int c = 0; c < s->streams; c++) {
    size_t id = 0, od = 0;
    const float *in = flush ? NULL : s->sel + (size_t)c * BLOCK + s->sel_pos;
    soxr_error_t e = soxr_process(s->rs[c], in, flush ? 0 : s->sel_n - s->sel_pos,
                                  flush ? NULL : &id, s->out + (size_t)c * s->pcap, s->pcap, &od);
    if (e)
      return ssae_err_set(err, "%s: resampling %d Hz to %d Hz failed: %s", s->path,
                          s->info.file_rate, s->info.rate, e);
    if (c == 0) {
      id0 = id;
      od0 = od;
    } else if (id != id0 || od != od0) {
      return ssae_err_set(err, "%s: resampling: the channels' resamplers disagree", s->path);
    }
  }
  *idone = id0;
  *odone = od0;
  return 0;
}

/* Puts the next output in out[0 .. pend_n). 1: some, 0: the end, -1. */
static int refill(ssae_audio_stream *s, ssae_err *err) {
  s->pend_n = s->pend_pos = 0;
  for (;;) {
    if (s->rs && (s->sel_pos < s->sel_n || s->drain)) {
      size_t id = 0, od = 0;
      if (resample_step(s, 0, &id, &od, err)) return -1;
      s->sel_pos += id;
      s->drain = od == s->pcap;
      if (od) {
        s->pend_n = od;
        return 1;
      }
      if (!id && s->sel_pos < s->sel_n)
        return ssae_err_set(err, "%s: the resampler took no input", s->path);
      continue;
    }
    if (!s->eof) {
      long got = read_block(s, err);
      if (got < 0) return -1;
      if (got == 0) {
        s->eof = 1;
        /* The length soxr_oneshot gave, which the loader always had. */
        if (s->rs && s->in_frames) {
          s->out_limit = (unsigned long long)((double)s->in_frames * s->info.rate /
                                                  s->info.file_rate + 0.5);
          if (!s->out_limit) s->out_limit = 1;
        }
        continue;
      }
      if (!s->rs) {
        s->pend_n = (size_t)got;
        return 1;
      }
      s->sel_n = (size_t)got;
      s->sel_pos = 0;
      continue;
    }
    if (!s->rs || s->flushed || !s->in_frames) return 0;
    size_t id = 0, od = 0;
    if (resample_step(s, 1, &id, &od, err)) return -1;
    if (!od) {
      s->flushed = 1;
      return 0;
    }
    s->pend_n = od;
    return 1;
  }
}

/* At the end: fewer frames than the header declared means a cut file
 * (FLAC, CAF, ...; WAV and AIFF say so at open). Not for formats whose
 * count is an estimate. */
static int check_count(ssae_audio_stream *s, ssae_err *err) {
  int major = s->format & SF_FORMAT_TYPEMASK;
  if (major == SF_FORMAT_OGG) return 0;
#ifdef SF_FORMAT_MPEG
  if (major == SF_FORMAT_MPEG) return 0;
#endif
  if (s->info.header_frames < 0 || (unsigned long long)s->info.header_frames <= s->in_frames)
    return 0;
  char d[96];
  snprintf(d, sizeof d, "%lld declared, %llu present", s->info.header_frames, s->in_frames);
  stream_warn(s, "%s: the file holds fewer frames than its header says (%s): the file was cut",
              d);
  if (s->opts.strict) {
    if (err) *err = s->warning;
    return -1;
  }
  return 0;
}

int ssae_audio_stream_i16(const ssae_audio_stream *s) {
  return (s->format & SF_FORMAT_SUBMASK) == SF_FORMAT_PCM_16 && !s->rs && s->streams == 1 &&
         (s->channel >= 0 || s->ch == 1) && !s->read_float;
}

long long ssae_audio_read_i16(ssae_audio_stream *s, int16_t *out, size_t max, ssae_err *err) {
  if (!ssae_audio_stream_i16(s))
    return ssae_err_set(err, "%s: not readable as 16-bit samples as they are", s->path);
  s->read_i16 = 1;
  /* Frames of several channels land in s->in (BLOCK x ch floats hold
   * BLOCK x ch shorts), the channel picked from them. */
  short *buf = (short *)(void *)s->in;
  const int ch = s->ch, pick = s->channel >= 0 ? s->channel : 0;
  size_t got = 0;
  while (got < max && !s->ended) {
    /* One channel: straight into out, all at once, so that the reader's
     * file reads of at least VIO_BUF go to out with no copy between
     * (libsndfile passes 16-bit frames of the host's order through). */
    const sf_count_t want =
        (sf_count_t)(ch == 1 || max - got < BLOCK ? max - got : BLOCK);
    const sf_count_t k = sf_readf_short(s->sf, ch == 1 ? out + got : buf, want);
    if (k <= 0) {
      if (sf_error(s->sf))
        return ssae_err_set(err, "%s: error reading audio: %s", s->path, sf_strerror(s->sf));
      s->ended = s->eof = 1;
      if (check_count(s, err)) return -1;
      break;
    }
    if (ch > 1)
      for (sf_count_t i = 0; i < k; i++)
        out[got + (size_t)i] = buf[(size_t)i * (size_t)ch + (size_t)pick];
    s->in_frames += (unsigned long long)k;
    s->out_frames += (unsigned long long)k;
    got += (size_t)k;
  }
  return (long long)got;
}

long long ssae_audio_read(ssae_audio_stream *s, float *out, size_t max, ssae_err *err) {
  if (s->read_i16)
    return ssae_err_set(err, "%s: read as 16-bit samples: not as floats too", s->path);
  s->read_float = 1;
  size_t got = 0;
  while (got < max && !s->ended) {
    if (s->pend_pos == s->pend_n) {
      int r = refill(s, err);
      if (r < 0) return -1;
      if (r == 0) {
        s->ended = 1;
        if (check_count(s, err)) return -1;
        break;
      }
    }
    size_t k = s->pend_n - s->pend_pos;
    if (k > max - got) k = max - got;
    if (s->rs && s->eof && s->out_frames + k >= s->out_limit) {
      k = s->out_frames < s->out_limit ? (size_t)(s->out_limit - s->out_frames) : 0;
      s->ended = 1;
      if (check_count(s, err)) return -1;
    }
    for (int c = 0; c < s->streams; c++)
      memcpy(out + (size_t)c * max + got, s->out + (size_t)c * s->pcap + s->pend_pos,
             k * sizeof *out);
    s->pend_pos += k;
    s->out_frames += k;
    got += k;
  }
  return (long long)got;
}

/* Bytes per frame of the uncompressed encodings; 0 for compressed ones. */
static size_t pcm_frame_bytes(int format, int ch) {
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8: case SF_FORMAT_PCM_U8: case SF_FORMAT_ULAW: case SF_FORMAT_ALAW:
      return (size_t)ch;
    case SF_FORMAT_PCM_16: return 2 * (size_t)ch;
    case SF_FORMAT_PCM_24: return 3 * (size_t)ch;
    case SF_FORMAT_PCM_32: case SF_FORMAT_FLOAT: return 4 * (size_t)ch;
    case SF_FORMAT_DOUBLE: return 8 * (size_t)ch;
    default: return 0;
  }
}

/* Grows the planar output (streams x cap) to hold at least `need` frames. */
static int grow(float **data, size_t *cap, int streams, size_t used, size_t need) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 65536;
  while (nc < need) nc *= 2;
  if (nc > SIZE_MAX / sizeof **data / (size_t)streams) return -1;
  float *d = malloc(sizeof *d * nc * (size_t)streams);
  if (!d) return -1;
  for (int c = 0; c < streams; c++)
    if (used) memcpy(d + (size_t)c * nc, *data + (size_t)c * *cap, used * sizeof *d);
  free(*data);
  *data = d;
  *cap = nc;
  return 0;
}

int ssae_audio_load_opts(const char *path, int channel, int target_rate,
                         const ssae_audio_opts *opts, ssae_audio *out, ssae_err *err) {
  memset(out, 0, sizeof *out);
  ssae_audio_stream *s = ssae_audio_open(path, channel, target_rate, opts, err);
  if (!s) return -1;
  const int streams = s->streams;
  /* One allocation up front when the header's count is believable: never
   * more frames than the file's bytes can hold (a 52-byte file claiming a
   * billion frames gets the usual doubling from 64 Ki frames). */
  size_t cap = 0, n = 0;
  float *data = NULL;
  if (s->info.header_frames > 0 && s->vf.size > 0) {
    size_t fb = pcm_frame_bytes(s->format, s->ch);
    unsigned long long most = (unsigned long long)s->vf.size / (fb ? fb : 1);
    unsigned long long hint = (unsigned long long)s->info.header_frames;
    if (hint > most) hint = most;
    hint = (unsigned long long)((double)hint * s->info.rate / s->info.file_rate) + 1;
    if (hint < SIZE_MAX / 8 / (size_t)streams && grow(&data, &cap, streams, 0, (size_t)hint)) {
      ssae_audio_close(s);
      return ssae_err_set(err, "%s: out of memory for %llu frames", path, hint);
    }
  }
  const size_t step = 16384;
  float *tmp = malloc(sizeof *tmp * step * (size_t)streams);
  if (!tmp) {
    ssae_audio_close(s);
    free(data);
    return ssae_err_set(err, "%s: out of memory", path);
  }
  for (;;) {
    long long got = ssae_audio_read(s, tmp, step, err);
    if (got < 0) goto fail;
    if (got == 0) break;
    if (grow(&data, &cap, streams, n, n + (size_t)got)) {
      ssae_err_set(err, "%s: out of memory reading audio", path);
      goto fail;
    }
    for (int c = 0; c < streams; c++)
      memcpy(data + (size_t)c * cap + n, tmp + (size_t)c * step, (size_t)got * sizeof *tmp);
    n += (size_t)got;
  }
  free(tmp);
  tmp = NULL;
  if (s->in_frames == 0) {
    ssae_err_set(err, "%s: no audio samples (zero-length audio)", path);
    goto fail;
  }
  /* Pack the planar streams to n frames each. */
  if (streams > 1 && cap != n)
    for (int c = 1; c < streams; c++)
      memmove(data + (size_t)c * n, data + (size_t)c * cap, n * sizeof *data);
  out->data = data;
  out->frames = n;
  out->channels = streams;
  out->file_channels = s->ch;
  out->file_rate = s->info.file_rate;
  out->rate = s->info.rate;
  out->warning = s->warning;
  ssae_audio_close(s);
  return 0;
fail:
  free(tmp);
  free(data);
  ssae_audio_close(s);
  return -1;
}

int ssae_audio_load(const char *path, int channel, int target_rate, ssae_audio *out,
                    ssae_err *err) {
  return ssae_audio_load_opts(path, channel, target_rate, NULL, out, err);
}
