/* The default model, embedded at build time from src/model/default.safetensors
 * (generated C array, see meson.build). Internal to libssae. */
#ifndef SSAE_MODEL_DEFAULT_H
#define SSAE_MODEL_DEFAULT_H

#include <stddef.h>

extern const unsigned char ssae_default_model_data[];
extern const size_t ssae_default_model_size;

#endif
