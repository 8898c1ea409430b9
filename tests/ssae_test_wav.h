/* What the audio tests share to write their input files: the 44-byte
 * header of a 16-bit PCM WAV with the sizes the test gives (so that a test
 * can make them lie), and whole files through libsndfile from float or
 * 16-bit samples. */
#ifndef SSAE_TEST_WAV_H
#define SSAE_TEST_WAV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <sndfile.h>

static inline void test_le16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static inline void test_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* riff_len: the RIFF chunk's size field; data_len: the data chunk's. */
static inline void test_wav_header(unsigned char h[44], uint32_t rate, uint16_t ch,
                                   uint32_t riff_len, uint32_t data_len) {
  memcpy(h, "RIFF", 4);
  test_le32(h + 4, riff_len);
  memcpy(h + 8, "WAVEfmt ", 8);
  test_le32(h + 16, 16);
  test_le16(h + 20, 1);
  test_le16(h + 22, ch);
  test_le32(h + 24, rate);
  test_le32(h + 28, rate * ch * 2u);
  test_le16(h + 32, (uint16_t)(ch * 2));
  test_le16(h + 34, 16);
  memcpy(h + 36, "data", 4);
  test_le32(h + 40, data_len);
}

/* A new file of the given libsndfile format, for writing; NULL where it
 * cannot be made. */
static inline SNDFILE *test_sf_create(const char *path, int format, int rate, int ch) {
  SF_INFO info = {0};
  info.samplerate = rate;
  info.channels = ch;
  info.format = format;
  return sf_open(path, SFM_WRITE, &info);
}

/* frames interleaved frames of ch channels in a new file; 0, or -1 where
 * it cannot be written. */
static inline int test_write_sf(const char *path, int format, int rate, int ch, const float *x,
                                size_t frames) {
  SNDFILE *sf = test_sf_create(path, format, rate, ch);
  if (!sf) return -1;
  sf_count_t w = sf_writef_float(sf, x, (sf_count_t)frames);
  sf_close(sf);
  return w == (sf_count_t)frames ? 0 : -1;
}

/* The same from 16-bit samples (written as they are). */
static inline int test_write_sf_short(const char *path, int format, int rate, int ch,
                                      const short *x, size_t frames) {
  SNDFILE *sf = test_sf_create(path, format, rate, ch);
  if (!sf) return -1;
  sf_count_t w = sf_writef_short(sf, x, (sf_count_t)frames);
  sf_close(sf);
  return w == (sf_count_t)frames ? 0 : -1;
}

#endif
