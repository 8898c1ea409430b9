/* The JACK client behind `ssae jack`: N input ports into the real-time
 * engine, optional passthrough outputs, and per channel two control-signal
 * outputs at audio rate: the smoothed score and the alarm gate (0/1). */
#ifndef SSAE_JACK_CLIENT_H
#define SSAE_JACK_CLIENT_H

#include "ssae_engine.h"
#include "ssae_err.h"

typedef struct ssae_jack ssae_jack;

/* Opens the client (not yet active) and registers its ports for engine
 * channels first .. first + inputs - 1: in_N, [out_N], score_N, alarm_N for
 * N = first + 1 .. first + inputs (first 0 for a client of its own; several
 * clients can share one engine, one input group each). */
ssae_jack *ssae_jack_open(const char *name, int first, int inputs, int passthrough,
                          ssae_err *err);
/* The server's sample rate and the client's actual name. */
double ssae_jack_rate(const ssae_jack *j);
const char *ssae_jack_name(const ssae_jack *j);

/* Installs the callbacks and activates the client; the process callback
 * feeds e (audio-thread path): every channel (group -1), or input group
 * `group` of e, whose channels must be this client's. JACK runs clients
 * that do not depend on each other in parallel: one client per group spreads
 * the feature work over cores. */
int ssae_jack_start(ssae_jack *j, ssae_engine *e, int group, ssae_err *err);

/* Connects a source port to this client's input `index` (0-based). */
int ssae_jack_connect(ssae_jack *j, const char *port, int index, ssae_err *err);

/* Main-thread housekeeping, call every few tens of ms: applies sample-rate
 * changes to the engine. Returns 1 once the server has gone away (msg then
 * holds its reason), 0 otherwise, -1 on an error (in err). */
int ssae_jack_poll(ssae_jack *j, ssae_err *err);

/* Current buffer size (follows the server's changes). */
unsigned ssae_jack_buffer_size(const ssae_jack *j);
const char *ssae_jack_shutdown_reason(const ssae_jack *j);

/* Deactivates and closes (also after the server went away). Accepts NULL. */
void ssae_jack_close(ssae_jack *j);

#endif
