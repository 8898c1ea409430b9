/* Error reporting shared by every ssae object.
 *
 * Constructors take an `ssae_err *` and return NULL with a message in it;
 * other calls return -1 with a message. A NULL `ssae_err *` is allowed
 * everywhere: the message is then dropped. The library never prints,
 * exits or aborts on bad input; the caller decides what the user sees. */
#ifndef SSAE_ERR_H
#define SSAE_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_ERR_LEN 512

typedef struct ssae_err {
  char msg[SSAE_ERR_LEN];
} ssae_err;

#if defined(__GNUC__)
#define SSAE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SSAE_PRINTF(a, b)
#endif

/* Records a message (printf format). Returns -1 so that callers can write
 * `return ssae_err_set(err, "...")`. */
int ssae_err_set(ssae_err *err, const char *fmt, ...) SSAE_PRINTF(2, 3);

/* Puts context in front of the message already recorded: "ctx: old".
 * Returns -1. */
int ssae_err_prefix(ssae_err *err, const char *fmt, ...) SSAE_PRINTF(2, 3);

/* Clears the message. */
void ssae_err_clear(ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
