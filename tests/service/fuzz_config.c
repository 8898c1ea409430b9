/* Fuzz target for the service configuration (libFuzzer entry point;
 * tests/model/fuzz_replay.c replays a corpus through it in ordinary builds):
 * any text given as a config file is loaded (the YAML walk that names file
 * and line, libcyaml, the value checks) and either refused with a message or
 * loaded; a loaded one then takes a machine count as `--channels` would.
 * The text is passed without a terminating NUL, so a read past its end is
 * seen by AddressSanitizer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ssae_service_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ssae_err err = {{0}};
  ssae_config *c = ssae_config_load_mem((const char *)data, size, "fuzz.yaml", &err);
  if (!c) {
    /* Every refusal says why. */
    if (!err.msg[0]) abort();
    return 0;
  }
  ssae_err e2 = {{0}};
  if (ssae_config_set_channels(c, 3, &e2) && !e2.msg[0]) abort();
  ssae_config_free(c);
  return 0;
}
