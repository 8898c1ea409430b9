/* systemd notification (see the header). Thread context: non-audio. */
#include "ssae_sdnotify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ssae_service_conf.h"

#if SSAE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

int ssae_sd_available(void) { return getenv("NOTIFY_SOCKET") != NULL; }

uint64_t ssae_sd_watchdog_usec(void) {
  uint64_t usec = 0;
  return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

static int notify(const char *s) { return sd_notify(0, s) < 0 ? -1 : 0; }

int ssae_sd_ready(const char *status) {
  if (!status) return notify("READY=1");
  return sd_notifyf(0, "READY=1\nSTATUS=%s", status) < 0 ? -1 : 0;
}
int ssae_sd_watchdog(void) { return notify("WATCHDOG=1"); }
int ssae_sd_stopping(void) { return notify("STOPPING=1"); }
int ssae_sd_reloading(void) { return notify("RELOADING=1"); }

int ssae_sd_status(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return sd_notifyf(0, "STATUS=%s", buf) < 0 ? -1 : 0;
}
#else
int ssae_sd_available(void) { return 0; }
uint64_t ssae_sd_watchdog_usec(void) { return 0; }
int ssae_sd_ready(const char *status) {
  (void)status;
  return 0;
}
int ssae_sd_watchdog(void) { return 0; }
int ssae_sd_stopping(void) { return 0; }
int ssae_sd_reloading(void) { return 0; }
int ssae_sd_status(const char *fmt, ...) {
  (void)fmt;
  return 0;
}
#endif
