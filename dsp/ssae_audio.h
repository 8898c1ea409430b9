/* Audio files in (libsndfile: WAV incl. WAVE_FORMAT_EXTENSIBLE, FLAC,
 * OGG/Vorbis, AIFF, ...), channel selection and resampling (libsoxr) to the
 * model's sample rate. Not for the audio thread. */
#ifndef SSAE_AUDIO_H
#define SSAE_AUDIO_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_CHANNEL_MIX (-1) /* mean of all channels */
#define SSAE_CHANNEL_ALL (-2) /* every channel as its own stream */

typedef struct ssae_audio {
  float *data;       /* planar: channel c at data + c * frames */
  size_t frames;     /* samples per channel, after resampling */
  int channels;      /* streams in data (1 unless SSAE_CHANNEL_ALL) */
  int file_channels; /* channels in the file */
  int file_rate;     /* the file's sample rate */
  int rate;          /* rate of data */
} ssae_audio;

/* Reads a whole file. channel: an index (0-based), SSAE_CHANNEL_MIX or
 * SSAE_CHANNEL_ALL. target_rate: resample to it when the file differs (0
 * keeps the file's rate). Messages name the file and the reason. */
int ssae_audio_load(const char *path, int channel, int target_rate,
                    ssae_audio *out, ssae_err *err);
void ssae_audio_release(ssae_audio *a);

/* Parses a --channel argument ("0", "3", "mix", "all"). */
int ssae_audio_parse_channel(const char *s, int *channel, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
