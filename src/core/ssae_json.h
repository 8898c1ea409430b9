/* JSON strings for every output that writes them (event lines, MQTT
 * payloads, `ssae score --format json`): quotes, backslashes and control
 * characters escaped, and bytes that are not valid UTF-8 (a file name from
 * another encoding) written as U+FFFD, so that every line stays valid
 * JSON. Any thread; no allocation (SSAE_REALTIME). */
#ifndef SSAE_JSON_H
#define SSAE_JSON_H

#include <stddef.h>

#include "ssae_realtime.h"

/* Length of the valid UTF-8 sequence at s (1-4), 0 when s does not start
 * one (overlong forms, surrogates and code points past U+10FFFF refused). */
SSAE_REALTIME int ssae_utf8_len(const unsigned char *s);

/* Appends s escaped (without the quotes) to buf, which holds `used` bytes
 * of len, and NUL-terminates it. Returns the new length, or -1 when it
 * does not fit (buf then holds an unfinished string). */
SSAE_REALTIME int ssae_json_escape(char *buf, size_t len, size_t used, const char *s);

#endif
