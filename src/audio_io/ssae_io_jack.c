#include "ssae_io_jack.h"

#include <errno.h>
#include <jack/jack.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ssae_io_jack {
  jack_client_t *client;
  int n, passthrough;
  int first; /* the engine channel of this client's first input */
  int group; /* the engine's input group fed here, -1: all of it */
  jack_port_t **in, **out, **score, **alarm;
  const float **inbuf; /* per-callback input pointers, allocated once */
  ssae_engine *e;
  ssae_io_audio_hook hook; /* beside the engine (set before start) */
  void *hook_user;
  _Atomic unsigned rate_now;   /* from the sample-rate callback */
  _Atomic unsigned rate_engine; /* the rate the engine runs at */
  _Atomic unsigned bufsize;
  _Atomic int shutdown;
  int active; /* between start and stop (main thread) */
  char reason[256];
};

/* Audio thread: analysis, passthrough, control outputs. No allocation, no
 * locks, no system calls. */
static int on_process(jack_nframes_t nframes, void *arg) {
  ssae_io_jack *j = arg;
  for (int c = 0; c < j->n; c++)
    j->inbuf[c] = jack_port_get_buffer(j->in[c], nframes);
  if (atomic_load_explicit(&j->rate_now, memory_order_relaxed) ==
      atomic_load_explicit(&j->rate_engine, memory_order_acquire)) {
    if (j->group >= 0)
      ssae_engine_process_group(j->e, j->group, j->inbuf, nframes);
    else
      ssae_engine_process(j->e, j->inbuf, nframes);
    if (j->hook) j->hook(j->hook_user, j->first, j->n, j->inbuf, nframes);
  }
  for (int c = 0; c < j->n; c++) {
    if (j->passthrough) {
      float *o = jack_port_get_buffer(j->out[c], nframes);
      memcpy(o, j->inbuf[c], nframes * sizeof(float));
    }
    ssae_channel_state st;
    ssae_engine_channel_get(j->e, j->first + c, &st);
    float *s = jack_port_get_buffer(j->score[c], nframes);
    float *a = jack_port_get_buffer(j->alarm[c], nframes);
    float sv = st.smoothed, av = st.alarm ? 1.0f : 0.0f;
    for (jack_nframes_t i = 0; i < nframes; i++) {
      s[i] = sv;
      a[i] = av;
    }
  }
  return 0;
}

/* JACK's thread for server notifications (not the audio thread). */
static int on_srate(jack_nframes_t rate, void *arg) {
  ssae_io_jack *j = arg;
  atomic_store(&j->rate_now, (unsigned)rate);
  return 0;
}

static int on_bufsize(jack_nframes_t n, void *arg) {
  ssae_io_jack *j = arg;
  /* The engine splits large blocks itself: nothing to reallocate. */
  atomic_store(&j->bufsize, (unsigned)n);
  return 0;
}

/* JACK's notification thread: the server missed a deadline (an xrun):
 * audio was lost before it reached the engine. Counted once per engine
 * (the client feeding all of it, or its first group). */
static int on_xrun(void *arg) {
  ssae_io_jack *j = arg;
  ssae_engine_note_xrun(j->e, 1);
  return 0;
}

static void on_shutdown(jack_status_t code, const char *reason, void *arg) {
  ssae_io_jack *j = arg;
  (void)code;
  /* Called from a JACK thread; the main loop reports it. */
  snprintf(j->reason, sizeof j->reason, "%s", reason ? reason : "no reason given");
  atomic_store(&j->shutdown, 1);
}

static void jack_quiet(const char *msg) { (void)msg; }

int ssae_io_jack_name_max(void) { return jack_client_name_size() - 1; }

ssae_io_jack *ssae_io_jack_new(const char *name, int first, int inputs, int passthrough,
                          ssae_err *err) {
  if (inputs < 1 || inputs > 256 || first < 0) {
    ssae_err_set(err, "a JACK client has 1..256 inputs (got %d)", inputs);
    return NULL;
  }
  if (!name || !*name || strlen(name) > (size_t)ssae_io_jack_name_max()) {
    ssae_err_set(err, "a JACK client name has 1 to %d bytes (got %zu)", ssae_io_jack_name_max(),
                 name ? strlen(name) : (size_t)0);
    return NULL;
  }
  ssae_io_jack *j = calloc(1, sizeof *j);
  if (!j) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  j->n = inputs;
  j->first = first;
  j->group = -1;
  j->passthrough = passthrough;
  j->in = calloc((size_t)inputs, sizeof *j->in);
  j->out = calloc((size_t)inputs, sizeof *j->out);
  j->score = calloc((size_t)inputs, sizeof *j->score);
  j->alarm = calloc((size_t)inputs, sizeof *j->alarm);
  j->inbuf = calloc((size_t)inputs, sizeof *j->inbuf);
  if (!j->in || !j->out || !j->score || !j->alarm || !j->inbuf) {
    ssae_err_set(err, "out of memory");
    ssae_io_jack_free(j);
    return NULL;
  }
  /* libjack prints its own connection attempts; our message says it all. */
  jack_set_error_function(jack_quiet);
  jack_status_t status;
  j->client = jack_client_open(name, JackNoStartServer, &status);
  jack_set_error_function(NULL);
  if (!j->client) {
    ssae_err_set(err,
                 "cannot connect to a JACK server (status 0x%x)%s; start one "
                 "(e.g. jackd -d alsa, or jackd -d dummy) first",
                 (unsigned)status,
                 (status & JackServerFailed) ? ": no server running" : "");
    ssae_io_jack_free(j);
    return NULL;
  }
  char pn[64];
  for (int c = 0; c < inputs; c++) {
    const int num = first + c + 1;
    snprintf(pn, sizeof pn, "in_%d", num);
    j->in[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                  JackPortIsInput, 0);
    if (passthrough) {
      snprintf(pn, sizeof pn, "out_%d", num);
      j->out[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsOutput, 0);
    }
    snprintf(pn, sizeof pn, "score_%d", num);
    j->score[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsOutput, 0);
    snprintf(pn, sizeof pn, "alarm_%d", num);
    j->alarm[c] = jack_port_register(j->client, pn, JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsOutput, 0);
    if (!j->in[c] || !j->score[c] || !j->alarm[c] || (passthrough && !j->out[c])) {
      ssae_err_set(err, "cannot register JACK ports for channel %d (the server's port "
                        "limit? jackd -p)", num);
      ssae_io_jack_free(j);
      return NULL;
    }
  }
  unsigned r = (unsigned)jack_get_sample_rate(j->client);
  atomic_init(&j->rate_now, r);
  atomic_init(&j->rate_engine, r);
  atomic_init(&j->bufsize, (unsigned)jack_get_buffer_size(j->client));
  atomic_init(&j->shutdown, 0);
  return j;
}

double ssae_io_jack_rate(const ssae_io_jack *j) {
  return (double)atomic_load(&((ssae_io_jack *)j)->rate_engine);
}
const char *ssae_io_jack_name(const ssae_io_jack *j) {
  return jack_get_client_name(j->client);
}
unsigned ssae_io_jack_buffer_size(const ssae_io_jack *j) {
  return atomic_load(&((ssae_io_jack *)j)->bufsize);
}
const char *ssae_io_jack_shutdown_reason(const ssae_io_jack *j) { return j->reason; }

void ssae_io_jack_set_hook(ssae_io_jack *j, ssae_io_audio_hook fn, void *user) {
  j->hook = fn;
  j->hook_user = user;
}

int ssae_io_jack_start(ssae_io_jack *j, ssae_engine *e, int group, ssae_err *err) {
  if (group >= 0) {
    int first, count;
    ssae_engine_group_channels(e, group, &first, &count);
    if (first != j->first || count != j->n)
      return ssae_err_set(err, "JACK client: input group %d is channels %d..%d, the client's "
                               "ports %d..%d", group, first + 1, first + count, j->first + 1,
                          j->first + j->n);
  }
  j->group = group;
  j->e = e;
  if (jack_set_process_callback(j->client, on_process, j) ||
      jack_set_sample_rate_callback(j->client, on_srate, j) ||
      jack_set_buffer_size_callback(j->client, on_bufsize, j) ||
      (group <= 0 && jack_set_xrun_callback(j->client, on_xrun, j)))
    return ssae_err_set(err, "cannot install the JACK callbacks");
  jack_on_info_shutdown(j->client, on_shutdown, j);
  if (jack_activate(j->client))
    return ssae_err_set(err, "cannot activate the JACK client");
  j->active = 1;
  return 0;
}

int ssae_io_jack_connect(ssae_io_jack *j, const char *port, int index, ssae_err *err) {
  if (index < 0 || index >= j->n)
    return ssae_err_set(err, "--connect %s: only %d input(s) (--inputs)", port,
                        j->n);
  jack_port_t *src = jack_port_by_name(j->client, port);
  if (!src)
    return ssae_err_set(err, "--connect: no JACK port '%s'", port);
  if (!(jack_port_flags(src) & JackPortIsOutput))
    return ssae_err_set(err, "--connect: JACK port '%s' is not an output", port);
  int rc = jack_connect(j->client, port, jack_port_name(j->in[index]));
  if (rc && rc != EEXIST)
    return ssae_err_set(err, "--connect: cannot connect '%s' to '%s'", port,
                        jack_port_name(j->in[index]));
  return 0;
}

int ssae_io_jack_poll(ssae_io_jack *j, ssae_err *err) {
  if (atomic_load(&j->shutdown)) return 1;
  unsigned r = atomic_load(&j->rate_now);
  if (r != atomic_load(&j->rate_engine) && r > 0) {
    /* process() skips analysis while the rates differ, so the engine can
     * be rebuilt for the new rate here. */
    if (ssae_engine_set_input_rate(j->e, (double)r, err)) return -1;
    atomic_store_explicit(&j->rate_engine, r, memory_order_release);
  }
  return 0;
}

void ssae_io_jack_stop(ssae_io_jack *j) {
  if (!j || !j->active) return;
  /* After a server shutdown there is nothing to deactivate. */
  if (!atomic_load(&j->shutdown)) jack_deactivate(j->client);
  j->active = 0;
}

void ssae_io_jack_free(ssae_io_jack *j) {
  if (!j) return;
  ssae_io_jack_stop(j);
  if (j->client) jack_client_close(j->client);
  free(j->in);
  free(j->out);
  free(j->score);
  free(j->alarm);
  free(j->inbuf);
  free(j);
}
