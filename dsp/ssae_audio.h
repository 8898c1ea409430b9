/* Audio files in (libsndfile: WAV incl. WAVE_FORMAT_EXTENSIBLE, FLAC,
 * OGG/Vorbis, AIFF, ...), channel selection and resampling (libsoxr) to the
 * model's sample rate. Not for the audio thread.
 *
 * Files come from anyone, so the reader trusts no header: sample rates
 * outside SSAE_AUDIO_RATE_MIN..MAX are refused, a header's frame count
 * never sizes an allocation beyond what the file's bytes can hold, a data
 * chunk shorter than its header says is a warning (an error when strict),
 * and NaN or infinite samples are an error naming the file and the time of
 * the first one. Files are read in bounded blocks: the streaming reader
 * (ssae_audio_open/read/close) holds a fixed amount of memory whatever the
 * file's length, and the whole-file loader is that reader run to the end. */
#ifndef SSAE_AUDIO_H
#define SSAE_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_CHANNEL_MIX (-1) /* mean of all channels */
#define SSAE_CHANNEL_ALL (-2) /* every channel as its own stream */

/* Sample rates a file may have. */
#define SSAE_AUDIO_RATE_MIN 1000
#define SSAE_AUDIO_RATE_MAX 768000

typedef struct ssae_audio_opts {
  int strict;       /* 1: a data chunk shorter than its header says (a cut
                       file) is an error; 0: a warning, and the frames
                       present are read */
  int allow_nonfinite; /* 1: NaN/Inf samples are passed on (the caller
                       deals with them); 0: an error */
} ssae_audio_opts;

typedef struct ssae_audio {
  float *data;       /* planar: channel c at data + c * frames */
  size_t frames;     /* samples per channel, after resampling */
  int channels;      /* streams in data (1 unless SSAE_CHANNEL_ALL) */
  int file_channels; /* channels in the file */
  int file_rate;     /* the file's sample rate */
  int rate;          /* rate of data */
  ssae_err warning;  /* empty, or a warning naming the file (a data chunk
                        shorter than its header says) */
} ssae_audio;

/* Reads a whole file. channel: an index (0-based), SSAE_CHANNEL_MIX or
 * SSAE_CHANNEL_ALL. target_rate: resample to it when the file differs (0
 * keeps the file's rate). Messages name the file and the reason. */
int ssae_audio_load(const char *path, int channel, int target_rate,
                    ssae_audio *out, ssae_err *err);
/* The same with options (NULL: the defaults, as ssae_audio_load). */
int ssae_audio_load_opts(const char *path, int channel, int target_rate,
                         const ssae_audio_opts *opts, ssae_audio *out, ssae_err *err);
void ssae_audio_release(ssae_audio *a);

/* ---- streaming reader ---- */

typedef struct ssae_audio_stream ssae_audio_stream;

typedef struct ssae_audio_info {
  int channels;      /* streams each read gives (1 unless SSAE_CHANNEL_ALL) */
  int file_channels;
  int file_rate;
  int rate;          /* rate of what read gives */
  long long header_frames; /* frames the header declares (-1: unknown);
                        information only, never trusted for sizes */
} ssae_audio_info;

/* Opens path for reading in blocks; arguments as ssae_audio_load. Checks
 * the header (rate, channels, a cut data chunk) before returning. */
ssae_audio_stream *ssae_audio_open(const char *path, int channel, int target_rate,
                                   const ssae_audio_opts *opts, ssae_err *err);
const ssae_audio_info *ssae_audio_stream_info(const ssae_audio_stream *s);

/* Reads the next frames (at most max > 0 per stream, resampled and selected or
 * mixed exactly as ssae_audio_load does) into out, planar: stream c at
 * out + c * max. Returns the frames written, 0 at the end of the file, -1
 * with a message naming the file. The frames of successive reads joined
 * are bit-identical to ssae_audio_load's data. */
long long ssae_audio_read(ssae_audio_stream *s, float *out, size_t max, ssae_err *err);

/* 1 when s can be read as 16-bit samples with ssae_audio_read_i16: a
 * 16-bit PCM file at the target rate, one stream (a channel picked, or a
 * mono file). */
int ssae_audio_stream_i16(const ssae_audio_stream *s);
/* As ssae_audio_read, the samples as the file holds them (v / 32768 is what
 * ssae_audio_read gives, exactly): no conversion to float and back for a
 * caller that moves 16-bit PCM on (the GPU front end). A stream is read
 * with one of the two; -1 with the reason when ssae_audio_stream_i16 says
 * 0 or the stream was read as floats. */
long long ssae_audio_read_i16(ssae_audio_stream *s, int16_t *out, size_t max, ssae_err *err);

/* Empty, or the warning about this file so far (see ssae_audio.warning). */
const char *ssae_audio_stream_warning(const ssae_audio_stream *s);

/* Accepts NULL. */
void ssae_audio_close(ssae_audio_stream *s);

/* Index of the first NaN or infinite value of x[0..n), or n when all are
 * finite. */
size_t ssae_audio_find_nonfinite(const float *x, size_t n);

/* libsndfile's sf_open_fd for writing (mode SFM_WRITE or SFM_RDWR) made
 * alone under the lock the reader's opens take: libsndfile keeps a failed
 * open's reason in process-wide variables, which other threads' opens
 * would overwrite. Returns the SNDFILE, or NULL with that open's own reason
 * in why (n bytes; why may be NULL). Arguments otherwise as sf_open_fd's. */
struct sf_private_tag;
struct SF_INFO;
struct sf_private_tag *ssae_audio_sf_open_fd(int fd, int mode, struct SF_INFO *info,
                                             int close_desc, char *why, size_t n);

/* Parses a --channel argument ("0", "3", "mix", "all"). */
int ssae_audio_parse_channel(const char *s, int *channel, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
