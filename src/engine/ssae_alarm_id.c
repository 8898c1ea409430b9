/* Alarm ids and wall-clock times (see the header). Any thread but the
 * audio thread. */
#include "ssae_alarm_id.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

double ssae_wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ssae_iso_time(double unix_s, char out[SSAE_ISO_TIME_LEN]) {
  time_t s = (time_t)floor(unix_s);
  int ms = (int)((unix_s - (double)s) * 1000.0);
  if (ms > 999) ms = 999;
  if (ms < 0) ms = 0;
  struct tm tm;
  gmtime_r(&s, &tm);
  char date[24];
  if (strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0) date[0] = 0;
  snprintf(out, SSAE_ISO_TIME_LEN, "%.20s.%03dZ", date, ms);
}

void ssae_alarm_new_id(char out[SSAE_ALARM_ID_LEN]) {
  static atomic_uint_fast64_t seq;
  unsigned char b[16];
  if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
    /* No entropy yet (early boot): the time and a counter are unique
     * enough within this host. */
    uint64_t a = (uint64_t)(ssae_wall_now() * 1e6), c = atomic_fetch_add(&seq, 1) + 1;
    for (int i = 0; i < 8; i++) {
      b[i] = (unsigned char)(a >> (8 * i));
      b[8 + i] = (unsigned char)(c >> (8 * i));
    }
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, SSAE_ALARM_ID_LEN,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
}
