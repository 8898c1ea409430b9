#include "ssae_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ssae_err_set(ssae_err *err, const char *fmt, ...) {
  if (!err) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int ssae_err_prefix(ssae_err *err, const char *fmt, ...) {
  if (!err) return -1;
  char ctx[SSAE_ERR_LEN], old[SSAE_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  old[sizeof old - 1] = '\0';
  /* Truncation is fine: the front of a message says the most. */
  size_t n = strlen(ctx);
  if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
  memcpy(err->msg, ctx, n);
  memcpy(err->msg + n, ": ", 2);
  size_t room = sizeof err->msg - n - 3, o = strlen(old);
  if (o > room) o = room;
  memcpy(err->msg + n + 2, old, o);
  err->msg[n + 2 + o] = '\0';
  return -1;
}

void ssae_err_clear(ssae_err *err) {
  if (err) err->msg[0] = '\0';
}
