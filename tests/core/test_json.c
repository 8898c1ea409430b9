/* JSON strings (src/core/ssae_json.h): escapes, valid UTF-8 kept, every
 * byte that is not valid UTF-8 (stray continuation, truncated sequence,
 * overlong form, surrogate, past U+10FFFF) written as U+FFFD, the buffer
 * bound kept. */
#include <stdio.h>
#include <string.h>

#include "ssae_json.h"
#include "../ssae_test.h"

static void expect(const char *what, const char *in, const char *want) {
  char buf[256];
  int n = ssae_json_escape(buf, sizeof buf, 0, in);
  CHECK(n == (int)strlen(want) && strcmp(buf, want) == 0, "%s: got '%s', want '%s'", what,
        n < 0 ? "(too long)" : buf, want);
}

int main(void) {
  expect("ascii", "pump-2 ok", "pump-2 ok");
  expect("quotes and backslash", "a\"b\\c", "a\\\"b\\\\c");
  expect("controls", "a\nb\tc\x01\x7f", "a\\u000ab\\u0009c\\u0001\\u007f");
  expect("valid UTF-8", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  expect("latin-1 byte", "caf\xe9.wav", "caf\\ufffd.wav");
  expect("stray continuation", "a\x80z", "a\\ufffdz");
  expect("truncated sequence", "a\xe2\x82", "a\\ufffd\\ufffd");
  expect("overlong", "\xc0\xaf", "\\ufffd\\ufffd");
  expect("surrogate", "\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd");
  expect("past U+10FFFF", "\xf4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd");
  expect("NULL", NULL, "");
  char small[8];
  CHECK(ssae_json_escape(small, sizeof small, 0, "12345678") == -1, "8 chars in 8 bytes");
  CHECK(ssae_json_escape(small, sizeof small, 0, "1234567") == 7 && !strcmp(small, "1234567"),
        "7 chars and the NUL in 8 bytes");
  CHECK(ssae_json_escape(small, sizeof small, 2, "\"\"\"") == -1, "escapes past the end");
  /* Appending after what the buffer holds. */
  char b2[32] = "{\"k\":\"";
  int n = ssae_json_escape(b2, sizeof b2, strlen(b2), "\xff");
  CHECK(n == 12 && !strcmp(b2, "{\"k\":\"\\ufffd"), "append: '%s' (%d)", b2, n);
  return test_done("ok");
}
