/* Where engine events go for the command-line front ends (`ssae monitor`,
 * `ssae jack`): JSON lines to a file and/or stdout, window scores to a TSV,
 * backend reports to stderr. Runs on the engine's worker thread (never the
 * audio thread); every line is flushed so that a crash or a kill loses
 * nothing already reported. Every write is checked: lines that could not
 * be written are counted (ssae_evsink_lost) and the first failure, with
 * the file and the errno reason, is kept for ssae_evsink_check and
 * ssae_evsink_close. The TSV is written to a temporary file and renamed
 * over the target at close (src/core/ssae_outfile.h). */
#ifndef SSAE_EVSINK_H
#define SSAE_EVSINK_H

#include <stdint.h>

#include "ssae_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_evsink ssae_evsink;

typedef struct ssae_evsink_cfg {
  const char *events_path;  /* JSON lines; NULL: none ("-": stdout) */
  int events_stdout;        /* 1: also JSON lines on stdout */
  const char *windows_path; /* TSV like `ssae score --windows`: a header,
                               then path, window, time, score; NULL: none */
  const char *label;        /* first TSV column (the input's path) */
  int hop_length, sample_rate, frames; /* for the TSV time column: the
                               centre of the window's middle frame */
  const char *prog;         /* "ssae monitor": prefix of stderr reports */
  int channel_offset;       /* added to the events' channel numbers: the
                               input's channel when the engine runs on one
                               channel picked from a file (--channel 7) */
  /* The channel's machine name for the JSON lines (engine channel c, with
   * no offset; writes a NUL-terminated name into buf and returns it, or
   * NULL: "chN"). NULL: every channel "chN". Called on the worker. */
  const char *(*machine)(void *user, int channel, char *buf, size_t len);
  /* The clip path of engine channel c's alarm `id`, for its alarm lines'
   * "clip" (NULL: none). May be NULL. Same user. */
  const char *(*clip)(void *user, int channel, const char *id, char *buf, size_t len);
  void *machine_user;
  int channels;             /* the engine's channels: above 1, the TSV gets
                               a fifth column, the window's channel (with
                               channel_offset added); with one it is the
                               same four columns as `ssae score` */
} ssae_evsink_cfg;

ssae_evsink *ssae_evsink_new(const ssae_evsink_cfg *cfg, ssae_err *err);
/* Flushes and closes, commits the TSV, frees. -1 with the first failure
 * ("PATH: write failed: REASON (K writes lost)") when any write failed;
 * the caller reports it and exits with status 1. NULL is allowed. */
int ssae_evsink_close(ssae_evsink *s, ssae_err *err);
/* ssae_evsink_close without the message. */
int ssae_evsink_free(ssae_evsink *s);

/* -1 with the first failure's message once any write has failed (for a
 * report while running); 0 while all is well. */
int ssae_evsink_check(ssae_evsink *s, ssae_err *err);

/* Event lines (to the events file and to stdout) that were not written. */
uint64_t ssae_evsink_lost(ssae_evsink *s);

/* The engine callback: pass as cfg.on_event with the sink as user. */
void ssae_evsink_on_event(void *user, const ssae_event *ev);

/* Writes a free-form event (e.g. "device_lost") with a message. */
void ssae_evsink_note(ssae_evsink *s, double t, const char *event,
                      const char *msg);

/* alarm_on events seen so far, per channel c (c < 0: all). */
uint64_t ssae_evsink_alarms(const ssae_evsink *s, int c);

#ifdef __cplusplus
}
#endif
#endif
