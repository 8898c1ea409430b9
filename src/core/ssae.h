/* ssae: real-time acoustic anomaly detection with the SpectralShapeAutoencoder.
 * One header for library users; each module's header documents its objects. */
#ifndef SSAE_H
#define SSAE_H

#include "ssae_err.h"
#include "ssae_features.h"
#include "ssae_logmel.h"
#include "ssae_audio.h"
#include "ssae_model.h"
#include "ssae_cpu.h"
#include "ssae_backend.h"

#endif
