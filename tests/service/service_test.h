/* The service tests' engine: a real CPU engine (one thread) set up as the
 * service asks (ssae_service_engine_cfg), for channels machines fed at
 * input_rate (0: the model's rate). on_event, when given, replaces the
 * service's event callback (and must hand the events on to it). NULL, the
 * reason printed, when it cannot be made. */
#ifndef SERVICE_TEST_H
#define SERVICE_TEST_H

#include <stdio.h>

#include "ssae_engine.h"
#include "ssae_service.h"

static inline ssae_engine *service_test_engine(ssae_service *svc, ssae_model *m, int channels,
                                               double input_rate, ssae_event_fn on_event,
                                               void *user) {
  ssae_err err = {{0}};
  ssae_engine_cfg ec;
  ssae_engine_cfg_default(&ec);
  ec.channels = channels;
  ec.input_rate = input_rate;
  ec.backend = "cpu";
  ec.cpu_threads = 1;
  if (ssae_service_engine_cfg(svc, &ec, &err)) {
    fprintf(stderr, "engine cfg: %s\n", err.msg);
    return NULL;
  }
  if (on_event) {
    ec.on_event = on_event;
    ec.user = user;
  }
  ssae_engine *e = ssae_engine_new(m, &ec, &err);
  if (!e) fprintf(stderr, "engine: %s\n", err.msg);
  return e;
}

#endif
