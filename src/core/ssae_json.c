/* JSON strings (ssae_json.h). */
#include "ssae_json.h"

#include <stdio.h>
#include <string.h>

int ssae_utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return n;
}

int ssae_json_escape(char *buf, size_t len, size_t used, const char *str) {
  const unsigned char *s = (const unsigned char *)(str ? str : "");
  while (*s) {
    const unsigned char c = *s;
    const int n = ssae_utf8_len(s);
    char tmp[8];
    const char *out = tmp;
    size_t k;
    if (!n) {
      out = "\\ufffd";
      k = 6;
    } else if (c == '"' || c == '\\') {
      tmp[0] = '\\';
      tmp[1] = (char)c;
      k = 2;
    } else if (c < 0x20 || c == 0x7f) {
      k = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", c);
    } else {
      out = (const char *)s;
      k = (size_t)n;
    }
    if (used + k + 1 > len) return -1;
    memcpy(buf + used, out, k);
    used += k;
    s += n ? n : 1;
  }
  if (used + 1 > len) return -1;
  buf[used] = 0;
  return (int)used;
}
