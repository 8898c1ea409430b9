#include "ssae_io_portaudio.h"

#include <fcntl.h>
#include <portaudio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ssae_io_pa {
  PaStream *st;
  PaStreamParameters ip;
  double rate;
  char name[256];
  ssae_engine *e;
  ssae_io_audio_hook hook; /* beside the engine (set before start) */
  void *hook_user;
  atomic_int closing; /* set before the engine goes away */
  atomic_int in_cb;   /* the callback is running */
  int lost;           /* stop saw the device gone */
  atomic_int cleaned; /* the bounded clean-up finished */
};

/* PortAudio's host APIs (ALSA, JACK) print diagnostics on stderr while
 * probing devices; they are noise for the user, so stderr points to
 * /dev/null meanwhile (main thread, before any stream runs). */
static int pa_init(ssae_err *err) {
  fflush(stderr);
  int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
  if (saved >= 0 && devnull >= 0) dup2(devnull, 2);
  int rc = Pa_Initialize();
  if (saved >= 0 && devnull >= 0) dup2(saved, 2);
  if (saved >= 0) close(saved);
  if (devnull >= 0) close(devnull);
  if (rc != paNoError) return ssae_err_set(err, "PortAudio: %s", Pa_GetErrorText(rc));
  return 0;
}

int ssae_io_pa_devices(void (*fn)(const ssae_io_pa_device *d, void *user), void *user,
                       ssae_err *err) {
  if (pa_init(err)) return -1;
  int n = Pa_GetDeviceCount(), def = Pa_GetDefaultInputDevice();
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *d = Pa_GetDeviceInfo(i);
    if (!d || d->maxInputChannels < 1) continue;
    const PaHostApiInfo *h = Pa_GetHostApiInfo(d->hostApi);
    ssae_io_pa_device info = {i, d->name, h ? h->name : "?", d->maxInputChannels,
                              d->defaultSampleRate, i == def};
    fn(&info, user);
  }
  Pa_Terminate();
  return 0;
}

/* The device's index; -2 when there is none such, -3 when it has no
 * inputs, paNoDevice when there is no default. */
static int find_device(const char *spec) {
  int n = Pa_GetDeviceCount();
  if (!spec) return Pa_GetDefaultInputDevice();
  char *end;
  long idx = strtol(spec, &end, 10);
  if (*spec && !*end) {
    if (idx < 0 || idx >= n) return -2;
    const PaDeviceInfo *d = Pa_GetDeviceInfo((int)idx);
    return d && d->maxInputChannels > 0 ? (int)idx : -3;
  }
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *d = Pa_GetDeviceInfo(i);
    if (d && d->maxInputChannels > 0 && strstr(d->name, spec)) return i;
  }
  return -2;
}

ssae_io_pa *ssae_io_pa_new(const char *device, int channels, double rate, int *bad_request,
                           ssae_err *err) {
  *bad_request = 0;
  if (pa_init(err)) return NULL;
  int dev = find_device(device);
  if (dev < 0) {
    if (dev == paNoDevice) ssae_err_set(err, "no input device (see --list-devices)");
    else if (dev == -3) ssae_err_set(err, "device %s has no inputs (see --list-devices)", device);
    else ssae_err_set(err, "no input device '%s' (see --list-devices)", device);
    Pa_Terminate();
    return NULL;
  }
  const PaDeviceInfo *di = Pa_GetDeviceInfo(dev);
  if (channels > di->maxInputChannels) {
    ssae_err_set(err, "device '%s' has %d input channel(s), --channels %d asked", di->name,
                 di->maxInputChannels, channels);
    *bad_request = 1;
    Pa_Terminate();
    return NULL;
  }
  ssae_io_pa *p = calloc(1, sizeof *p);
  if (!p) {
    ssae_err_set(err, "out of memory");
    Pa_Terminate();
    return NULL;
  }
  p->rate = rate > 0 ? rate : di->defaultSampleRate;
  snprintf(p->name, sizeof p->name, "%s", di->name);
  p->ip.device = dev;
  p->ip.channelCount = channels;
  p->ip.sampleFormat = paFloat32 | paNonInterleaved;
  p->ip.suggestedLatency = di->defaultLowInputLatency;
  atomic_init(&p->closing, 0);
  atomic_init(&p->in_cb, 0);
  atomic_init(&p->cleaned, 0);
  PaError pe = Pa_IsFormatSupported(&p->ip, NULL, p->rate);
  if (pe != paFormatIsSupported) {
    ssae_err_set(err, "device '%s' cannot record %d channel(s) at %.0f Hz: %s", di->name,
                 channels, p->rate, Pa_GetErrorText(pe));
    free(p);
    Pa_Terminate();
    return NULL;
  }
  return p;
}

double ssae_io_pa_rate(const ssae_io_pa *p) { return p->rate; }
const char *ssae_io_pa_name(const ssae_io_pa *p) { return p->name; }

/* Audio thread (PortAudio's): the block into the engine, nothing else. */
static int on_audio(const void *input, void *output, unsigned long frames,
                    const PaStreamCallbackTimeInfo *ti, PaStreamCallbackFlags flags,
                    void *user) {
  (void)output;
  (void)ti;
  ssae_io_pa *p = user;
  /* Input lost before this block (the callback was late): counted. */
  if (flags & paInputOverflow) ssae_engine_note_xrun(p->e, 1);
  atomic_store(&p->in_cb, 1);
  if (atomic_load(&p->closing)) {
    atomic_store(&p->in_cb, 0);
    return paAbort;
  }
  ssae_engine_process(p->e, (const float *const *)input, frames);
  if (p->hook) p->hook(p->hook_user, 0, p->ip.channelCount, (const float *const *)input, frames);
  atomic_store(&p->in_cb, 0);
  return paContinue;
}

void ssae_io_pa_set_hook(ssae_io_pa *p, ssae_io_audio_hook fn, void *user) {
  p->hook = fn;
  p->hook_user = user;
}

int ssae_io_pa_start(ssae_io_pa *p, ssae_engine *e, ssae_err *err) {
  p->e = e;
  PaError pe = Pa_OpenStream(&p->st, &p->ip, NULL, p->rate, paFramesPerBufferUnspecified,
                             paNoFlag, on_audio, p);
  if (pe == paNoError) pe = Pa_StartStream(p->st);
  if (pe != paNoError) {
    if (p->st) Pa_CloseStream(p->st);
    p->st = NULL;
    return ssae_err_set(err, "cannot start device '%s': %s", p->name, Pa_GetErrorText(pe));
  }
  return 0;
}

int ssae_io_pa_active(const ssae_io_pa *p) { return p->st && Pa_IsStreamActive(p->st) == 1; }

void ssae_io_pa_stop(ssae_io_pa *p) {
  if (!p || !p->st) return;
  if (ssae_io_pa_active(p)) {
    Pa_StopStream(p->st);
    return;
  }
  /* After a device loss PortAudio's thread may still call back: make it
   * leave the engine alone (a Dekker pair with in_cb, seq_cst). */
  p->lost = 1;
  atomic_store(&p->closing, 1);
  for (int k = 0; k < 100 && atomic_load(&p->in_cb); k++) {
    struct timespec d = {0, 1000000L};
    nanosleep(&d, NULL);
  }
}

/* PortAudio's clean-up after a device loss, on its own thread: with a JACK
 * server that went away it may block on the dead connection. */
static void *cleanup_main(void *arg) {
  ssae_io_pa *p = arg;
  Pa_AbortStream(p->st);
  Pa_CloseStream(p->st);
  Pa_Terminate();
  atomic_store(&p->cleaned, 1);
  return NULL;
}

void ssae_io_pa_free(ssae_io_pa *p) {
  if (!p) return;
  if (!p->st) {
    Pa_Terminate();
    free(p);
    return;
  }
  if (!p->lost) {
    Pa_CloseStream(p->st);
    Pa_Terminate();
    free(p);
    return;
  }
  /* A callback still running, or a clean-up that does not finish: p stays
   * allocated for them (the process is ending). */
  if (atomic_load(&p->in_cb)) return;
  pthread_t th;
  if (pthread_create(&th, NULL, cleanup_main, p)) return;
  for (int k = 0; k < 500 && !atomic_load(&p->cleaned); k++) {
    struct timespec d = {0, 1000000L};
    nanosleep(&d, NULL);
  }
  if (atomic_load(&p->cleaned)) {
    pthread_join(th, NULL);
    free(p);
  } else {
    pthread_detach(th);
  }
}
