/* The JACK client behind `ssae jack`: N input ports into the real-time
 * engine, optional passthrough outputs, and per channel two control-signal
 * outputs at audio rate: the smoothed score and the alarm gate (0/1).
 *
 * Threads: every function here is for the main thread. The client's
 * process callback runs on JACK's audio thread (it calls only the engine's
 * audio-thread-safe functions and fills the output ports); its sample-rate,
 * buffer-size and shutdown callbacks run on JACK's notification thread and
 * only set atomics that ssae_io_jack_poll reads (its thread-init callback
 * notes which threads libjack runs them on; closing is done on a thread of
 * its own, waited for within a bound). Lifecycle: new (ports
 * registered, not active) -> start (callbacks installed, client active) ->
 * stop (detached: the callbacks no longer touch the engine or the hook) ->
 * close or free (deactivated and closed, within a time bound: libjack can
 * block for good once the server has gone). */
#ifndef SSAE_IO_JACK_H
#define SSAE_IO_JACK_H

#include <stddef.h>

#include "ssae_engine.h"
#include "ssae_err.h"

typedef struct ssae_io_jack ssae_io_jack;

/* Opens the client (not yet active) and registers its ports for engine
 * channels first .. first + inputs - 1: in_N, [out_N], score_N, alarm_N for
 * N = first + 1 .. first + inputs (first 0 for a client of its own; several
 * clients can share one engine, one input group each). */
ssae_io_jack *ssae_io_jack_new(const char *name, int first, int inputs, int passthrough,
                          ssae_err *err);
/* The longest client name JACK takes, in bytes (jack_client_name_size()
 * less the terminating NUL); ssae_io_jack_new refuses longer ones. */
int ssae_io_jack_name_max(void);

/* How long closing the clients may take at most (ssae_io_jack_free; the
 * usual bound of ssae_io_jack_close), in seconds. */
#define SSAE_IO_JACK_CLOSE_S 5.0

/* The server's sample rate and the client's actual name. */
double ssae_io_jack_rate(const ssae_io_jack *j);
const char *ssae_io_jack_name(const ssae_io_jack *j);

/* Something else the audio thread feeds beside the engine (the plant
 * service's clips and heartbeat): fn(user, first, inputs, in, n) after the
 * engine took the block, on JACK's audio thread (fn must be audio-thread
 * safe); first and inputs as in ssae_io_jack_new. Set before start; NULL:
 * none. */
typedef void (*ssae_io_audio_hook)(void *user, int first, int count,
                                   const float *const *in, size_t n);
void ssae_io_jack_set_hook(ssae_io_jack *j, ssae_io_audio_hook fn, void *user);

/* Installs the callbacks and activates the client (server xruns are
 * counted in e's stats through ssae_engine_note_xrun, by the client of
 * group -1 or 0); the process callback
 * feeds e (audio-thread path): every channel (group -1), or input group
 * `group` of e, whose channels must be this client's. JACK runs clients
 * that do not depend on each other in parallel: one client per group spreads
 * the feature work over cores. */
int ssae_io_jack_start(ssae_io_jack *j, ssae_engine *e, int group, ssae_err *err);

/* Connects a source port to this client's input `index` (0-based). */
int ssae_io_jack_connect(ssae_io_jack *j, const char *port, int index, ssae_err *err);

/* Main-thread housekeeping, call every few tens of ms: applies sample-rate
 * changes to the engine. Returns 1 once the server has gone away
 * (ssae_io_jack_shutdown_reason then says why), 0 otherwise, -1 on an
 * error (in err). The server counts as gone when libjack says so, and
 * (with a watchdog) when the active client has had no process cycle for
 * the watchdog's seconds: a server that hung, or died without libjack
 * noticing. */
int ssae_io_jack_poll(ssae_io_jack *j, ssae_err *err);

/* The watchdog of ssae_io_jack_poll, in seconds; 0 (the default): none. A
 * server's longest period is well under a second; the main thread's
 * CLOCK_MONOTONIC does not run while the machine is suspended. */
void ssae_io_jack_set_watchdog(ssae_io_jack *j, double seconds);

/* Current buffer size (follows the server's changes). */
unsigned ssae_io_jack_buffer_size(const ssae_io_jack *j);
const char *ssae_io_jack_shutdown_reason(const ssae_io_jack *j);

/* Detaches the client from the engine, without a call to the server (which
 * may have gone, or hang): once this returns 0 the callbacks no longer
 * touch the engine or the hook (the process callback, until the client is
 * closed, writes silence) and the engine may go. -1: a callback under way
 * did not return within 2 s; the engine must stay. Accepts NULL. */
int ssae_io_jack_stop(ssae_io_jack *j);

/* Stops (when not yet done) and closes the n clients js[0..n) (NULL
 * entries skipped) within timeout_s seconds in all: 0 when all are closed
 * and freed. -1 when libjack blocked (a server that does not answer; after
 * a shutdown, a libjack lock left held): err names the client, which is
 * left open, detached, to the end of the process (nothing to free; the
 * engine may still go, unless its stop failed). After a server shutdown
 * the close first waits (at most 2 s) for libjack's notification thread to
 * end by itself: cancelled, as jack_client_close does, while it handled a
 * notification, it could leave a libjack lock held and the close hang. */
int ssae_io_jack_close(ssae_io_jack **js, int n, double timeout_s, ssae_err *err);

/* ssae_io_jack_close of one client, within SSAE_IO_JACK_CLOSE_S, quietly.
 * Accepts NULL and half-built clients. */
void ssae_io_jack_free(ssae_io_jack *j);

#endif
