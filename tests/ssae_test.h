/* What the C tests share: a failure counter with CHECK (a test reports
 * every failed check, then exits 1), FAIL for a failure the test cannot go
 * on after, a seeded xorshift generator (the same
 * inputs every run, so a failure can be replayed), and, for tests linked
 * with -Wl,--wrap=malloc,calloc,realloc (define SSAE_TEST_COUNT_ALLOCS
 * first), the wrappers that count allocations to prove a call allocates
 * nothing. They count every allocation, or only those for which the
 * expression SSAE_TEST_ALLOC_COUNTS (defined first, e.g. a thread-local
 * flag) is true: where other threads allocate at the same time,
 * legitimately. */
#ifndef SSAE_TEST_H
#define SSAE_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SSAE_TEST_SEED
#define SSAE_TEST_SEED 0x9E3779B97F4A7C15ull
#endif

static int failures __attribute__((unused));

#define CHECK(c, ...)                                      \
  do {                                                     \
    if (!(c)) {                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
      failures++;                                          \
    }                                                      \
  } while (0)

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, "FAIL: ");    \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    exit(1);                      \
  } while (0)

static uint64_t rng_state __attribute__((unused)) = SSAE_TEST_SEED;
static inline uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
/* Uniform in [0, 1) with 53 random bits. */
static inline double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* Writes the text s to path; a failure shows in the checks that read it
 * back. */
static inline void test_write_text(const char *path, const char *s) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fputs(s, f);
  fclose(f);
}

/* The first cap - 1 bytes of path in buf, NUL-terminated: their count, or
 * -1 where it cannot be read. */
static inline long test_read_text(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  return (long)n;
}

/* The first 64 KiB - 1 bytes of path in a new NUL-terminated string (to
 * free), or NULL where it cannot be read. */
static inline char *test_slurp(const char *path) {
  char *b = malloc(1 << 16);
  if (b && test_read_text(path, b, 1 << 16) < 0) {
    free(b);
    return NULL;
  }
  return b;
}

/* The end of a test's main: the failure count on stderr and exit status 1,
 * or the line saying that every check passed and 0. */
static inline int test_done(const char *passed) {
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("%s\n", passed);
  return 0;
}

#ifdef SSAE_TEST_COUNT_ALLOCS
#include <stdatomic.h>
#ifndef SSAE_TEST_ALLOC_COUNTS
#define SSAE_TEST_ALLOC_COUNTS 1
#endif
static atomic_size_t n_allocs;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) {
  if (SSAE_TEST_ALLOC_COUNTS) n_allocs++;
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
  if (SSAE_TEST_ALLOC_COUNTS) n_allocs++;
  return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
  if (SSAE_TEST_ALLOC_COUNTS) n_allocs++;
  return __real_realloc(p, n);
}
#endif

#endif
