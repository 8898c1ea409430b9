/* PortAudio input feeding a real-time engine (`ssae monitor`): one
 * non-interleaved float32 input stream whose callback hands every block to
 * ssae_engine_process.
 *
 * Threads: everything here is called from the main thread, except the
 * stream callback, which PortAudio runs on its audio thread; that callback
 * only calls ssae_engine_process (audio-thread safe) and touches two
 * atomics. Lifecycle: new (opens PortAudio and checks the device) -> start
 * (the callback runs) -> stop (the callback no longer touches the engine;
 * the engine may then be freed) -> free. */
#ifndef SSAE_IO_PORTAUDIO_H
#define SSAE_IO_PORTAUDIO_H

#include <stddef.h>

#include "ssae_engine.h"
#include "ssae_err.h"

typedef struct ssae_io_pa ssae_io_pa;

typedef struct ssae_io_pa_device {
  int index;
  const char *name, *host_api;
  int inputs;          /* input channels */
  double default_rate;
  int is_default;      /* the default input device */
} ssae_io_pa_device;

/* Calls fn for every device with inputs. -1 when PortAudio cannot start. */
int ssae_io_pa_devices(void (*fn)(const ssae_io_pa_device *d, void *user), void *user,
                       ssae_err *err);

/* Opens input device `device` (an index, part of its name, or NULL for the
 * default) for `channels` channels at `rate` (0: the device's default) and
 * checks that it can record so. NULL with the reason; *bad_request is set
 * to 1 when the request cannot fit the device at all (more channels than
 * it has), 0 otherwise. */
ssae_io_pa *ssae_io_pa_new(const char *device, int channels, double rate, int *bad_request,
                           ssae_err *err);
double ssae_io_pa_rate(const ssae_io_pa *p);
const char *ssae_io_pa_name(const ssae_io_pa *p);

/* Something else the audio thread feeds beside the engine (the plant
 * service's clips and heartbeat): fn(user, 0, channels, in, n) after each
 * ssae_engine_process, on the audio thread (fn must be audio-thread safe).
 * Set before start; NULL: none. */
typedef void (*ssae_io_audio_hook)(void *user, int first, int count,
                                   const float *const *in, size_t n);
void ssae_io_pa_set_hook(ssae_io_pa *p, ssae_io_audio_hook fn, void *user);

/* Starts the stream; its callback feeds e, which must outlive stop. */
int ssae_io_pa_start(ssae_io_pa *p, ssae_engine *e, ssae_err *err);

/* 1 while the stream runs; 0 once the device went away (unplugged, its
 * server gone). */
int ssae_io_pa_active(const ssae_io_pa *p);

/* Stops the stream; afterwards the callback no longer touches the engine.
 * After a device loss this does not wait on PortAudio (which may hang on
 * the dead device): it only makes the callback leave the engine alone. */
void ssae_io_pa_stop(ssae_io_pa *p);

/* Closes the stream and PortAudio. After a device loss PortAudio's own
 * clean-up is given at most half a second on a thread of its own (the
 * process may then end without it; nothing is lost, the engine's output is
 * written before). Accepts NULL. */
void ssae_io_pa_free(ssae_io_pa *p);

#endif
