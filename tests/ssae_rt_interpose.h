/* The real-time tests' interposer: an executable that includes this (in
 * one file, after #define _GNU_SOURCE) defines malloc, calloc, realloc,
 * free, pthread_mutex_lock, nanosleep, clock_nanosleep, usleep, sleep and
 * write, which takes precedence over libc for every library in the
 * process. A call from a thread that has set in_audio (the test's audio
 * thread while it is inside the code under test) counts as a violation;
 * the test reads the count and the first call's name at the end. Link
 * with libdl.
 *
 * Under AddressSanitizer or ThreadSanitizer the sanitizer owns malloc:
 * then this header defines a main that skips (exit 77) and
 * SSAE_RT_SANITIZED, and the test leaves out its own code with
 * #ifndef SSAE_RT_SANITIZED. */
#ifndef SSAE_RT_INTERPOSE_H
#define SSAE_RT_INTERPOSE_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SSAE_RT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SSAE_RT_SANITIZED 1
#endif
#endif

#ifdef SSAE_RT_SANITIZED
int main(void) {
  printf("SKIP: the sanitizer owns malloc; interposition runs in plain builds\n");
  return 77;
}
#else

static _Thread_local int in_audio;
static atomic_int violations;
static const char *_Atomic first_violation;

static void violation(const char *what) {
  if (atomic_fetch_add(&violations, 1) == 0) atomic_store(&first_violation, what);
}

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

void *malloc(size_t n) {
  if (in_audio) violation("malloc");
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (in_audio) violation("calloc");
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (in_audio) violation("realloc");
  return __libc_realloc(p, n);
}
void free(void *p) {
  if (in_audio) violation("free");
  __libc_free(p);
}

static int (*real_lock)(pthread_mutex_t *);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static int (*real_clock_nanosleep)(clockid_t, int, const struct timespec *,
                                   struct timespec *);
static int (*real_usleep)(useconds_t);
static unsigned (*real_sleep)(unsigned);
static ssize_t (*real_write)(int, const void *, size_t);

/* Resolved on first use, not in a constructor: libraries' constructors
 * (gnutls under libmicrohttpd) lock mutexes before this executable's
 * would run. */
#define SSAE_RT_REAL(var, name)                        \
  do {                                                 \
    if (!var) *(void **)&var = dlsym(RTLD_NEXT, name); \
  } while (0)

int pthread_mutex_lock(pthread_mutex_t *m) {
  if (in_audio) violation("pthread_mutex_lock");
  SSAE_RT_REAL(real_lock, "pthread_mutex_lock");
  return real_lock(m);
}
int nanosleep(const struct timespec *a, struct timespec *b) {
  if (in_audio) violation("nanosleep");
  SSAE_RT_REAL(real_nanosleep, "nanosleep");
  return real_nanosleep(a, b);
}
int clock_nanosleep(clockid_t c, int f, const struct timespec *a, struct timespec *b) {
  if (in_audio) violation("clock_nanosleep");
  SSAE_RT_REAL(real_clock_nanosleep, "clock_nanosleep");
  return real_clock_nanosleep(c, f, a, b);
}
int usleep(useconds_t u) {
  if (in_audio) violation("usleep");
  SSAE_RT_REAL(real_usleep, "usleep");
  return real_usleep(u);
}
unsigned sleep(unsigned s) {
  if (in_audio) violation("sleep");
  SSAE_RT_REAL(real_sleep, "sleep");
  return real_sleep(s);
}
ssize_t write(int fd, const void *p, size_t n) {
  if (in_audio) violation("write");
  SSAE_RT_REAL(real_write, "write");
  return real_write(fd, p, n);
}

#endif /* SSAE_RT_SANITIZED */
#endif
