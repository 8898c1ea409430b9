/* Fuzz target for the service configuration (libFuzzer entry point;
 * tests/model/fuzz_replay.c replays a corpus through it in ordinary builds):
 * any text given as a config file is loaded (the YAML walk that names file
 * and line, libcyaml, the value checks) and either refused with a message or
 * loaded; a loaded one then takes a machine count as `--channels` would.
 * The text is passed without a terminating NUL, so a read past its end is
 * seen by AddressSanitizer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_service_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifdef SSAE_LIBFUZZER
/* A YAML-aware mutator for the libFuzzer build: byte edits alone mostly
 * break the syntax, and the walk stops at the first error, so half the
 * time a whole line is edited instead (deleted, repeated, swapped with
 * another, re-indented, or its value replaced by one of the values that
 * tests the schema's checks), which keeps most inputs YAML and reaches
 * the checks behind the parser. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

static const char *const fuzz_values[] = {
    "0", "-1", "1", "2", "65535", "65536", "2147483648", "-9223372036854775809", "1e309",
    ".nan", ".inf", "-0.0", "0.5", "1e-300", "\"\"", "''", "[]", "{}", "null", "~", "true",
    "no", "&a 3", "*a", "!!binary AAAA", "\"\\u0000\"", "[1, 2]", "{a: 1}", "- x",
    "localhost", "127.0.0.1:1883", "/dev/null", "/nonexistent/x", ".", "-40", "100000",
    "\"a\\nb\"", "|\n  two\n  lines", "ssae/#", "+", "x x", "0x10", "1_000"};

struct fuzz_line {
  size_t at, len; /* a line's bytes, its newline not counted */
};

static uint32_t fuzz_next(uint32_t *r) {
  *r ^= *r << 13;
  *r ^= *r >> 17;
  *r ^= *r << 5;
  return *r;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  uint32_t r = seed ? seed : 1u;
  enum { MAXL = 512 };
  struct fuzz_line ln[MAXL];
  size_t n = 0, at = 0;
  while (at < size && n < MAXL) {
    const uint8_t *nl = memchr(data + at, '\n', size - at);
    size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
    ln[n].at = at;
    ln[n++].len = len;
    at += len + 1;
  }
  if (fuzz_next(&r) % 2 || n == 0 || at < size) return LLVMFuzzerMutate(data, size, max_size);
  uint8_t *out = malloc(max_size ? max_size : 1);
  if (!out) return LLVMFuzzerMutate(data, size, max_size);
  const size_t a = fuzz_next(&r) % n, b = fuzz_next(&r) % n;
  const unsigned op = fuzz_next(&r) % 5;
  size_t o = 0;
  int ok = 1;
#define PUT(p, k)                                  \
  do {                                             \
    if (o + (k) > max_size) ok = 0;                \
    else memcpy(out + o, (p), (k)), o += (k);      \
  } while (0)
  for (size_t i = 0; i < n && ok; i++) {
    size_t li = op == 2 && i == a ? b : op == 2 && i == b ? a : i; /* 2: swap a and b */
    const uint8_t *l = data + ln[li].at;
    size_t len = ln[li].len;
    if (op == 0 && i == a) continue; /* 0: delete a */
    if (op == 3 && i == a) {         /* 3: a two spaces in or out */
      if (len >= 2 && l[0] == ' ' && l[1] == ' ' && fuzz_next(&r) % 2) l += 2, len -= 2;
      else PUT("  ", 2);
    }
    if (op == 4 && i == a) { /* 4: a's value replaced */
      const uint8_t *c = memchr(l, ':', len);
      size_t key = c ? (size_t)(c - l) + 1 : len;
      const char *v = fuzz_values[fuzz_next(&r) % (sizeof fuzz_values / sizeof *fuzz_values)];
      PUT(l, key);
      PUT(" ", 1);
      PUT(v, strlen(v));
    } else {
      PUT(l, len);
    }
    PUT("\n", 1);
    if (op == 1 && i == a) { /* 1: a repeated */
      PUT(l, len);
      PUT("\n", 1);
    }
  }
#undef PUT
  if (ok) memcpy(data, out, o);
  free(out);
  return ok ? o : LLVMFuzzerMutate(data, size, max_size);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ssae_err err = {{0}};
  ssae_config *c = ssae_config_load_mem((const char *)data, size, "fuzz.yaml", &err);
  if (!c) {
    /* Every refusal says why. */
    if (!err.msg[0]) abort();
    return 0;
  }
  ssae_err e2 = {{0}};
  if (ssae_config_set_channels(c, 3, &e2) && !e2.msg[0]) abort();
  ssae_config_free(c);
  return 0;
}
