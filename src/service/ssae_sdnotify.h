/* systemd service notification (sd_notify, libsystemd; without libsystemd
 * at build time these calls do nothing and return 0): READY=1 once the
 * engine runs, WATCHDOG=1 while audio arrives (the caller pings only when
 * it does, so that a stalled input makes systemd restart the service),
 * STATUS= lines for `systemctl status`, STOPPING=1 on the way out.
 *
 * Thread context: any thread except the audio thread (a datagram send). */
#ifndef SSAE_SDNOTIFY_H
#define SSAE_SDNOTIFY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when run by systemd with Type=notify ($NOTIFY_SOCKET set). */
int ssae_sd_available(void);
/* The watchdog period systemd asked for, in microseconds (0: none); ping
 * at least twice per period. */
uint64_t ssae_sd_watchdog_usec(void);

int ssae_sd_ready(const char *status);
int ssae_sd_watchdog(void);
int ssae_sd_status(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
int ssae_sd_stopping(void);
int ssae_sd_reloading(void);

#ifdef __cplusplus
}
#endif
#endif
