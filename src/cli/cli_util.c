#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
  char **v;
  size_t n, cap;
} pathlist;

static int pl_add(pathlist *pl, const char *p, ssae_err *err) {
  if (pl->n == pl->cap) {
    size_t cap = pl->cap ? pl->cap * 2 : 64;
    char **v = realloc(pl->v, cap * sizeof *v);
    if (!v) return ssae_err_set(err, "out of memory listing files");
    pl->v = v;
    pl->cap = cap;
  }
  if (!(pl->v[pl->n] = strdup(p))) return ssae_err_set(err, "out of memory listing files");
  pl->n++;
  return 0;
}

static int is_audio_name(const char *name) {
  static const char *const ext[] = {"wav", "wave", "flac", "ogg", "oga", "opus",
                                    "aif", "aiff", "aifc", "mp3", "au", "caf",
                                    "w64", "rf64", NULL};
  const char *dot = strrchr(name, '.');
  if (!dot) return 0;
  for (int i = 0; ext[i]; i++)
    if (!strcasecmp(dot + 1, ext[i])) return 1;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk(const char *dir, pathlist *pl, ssae_err *err) {
  DIR *d = opendir(dir);
  if (!d) return ssae_err_set(err, "%s: cannot open directory: %s", dir, strerror(errno));
  pathlist here = {0};
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    char *p = malloc(len);
    if (!p) { rc = ssae_err_set(err, "out of memory listing files"); break; }
    snprintf(p, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
    struct stat st;
    if (stat(p, &st) == 0 && (S_ISDIR(st.st_mode) || is_audio_name(e->d_name)))
      rc = pl_add(&here, p, err);
    free(p);
  }
  closedir(d);
  if (here.n) qsort(here.v, here.n, sizeof *here.v, cmp_str);
  for (size_t i = 0; i < here.n; i++) {
    struct stat st;
    if (rc == 0) {
      if (stat(here.v[i], &st) == 0 && S_ISDIR(st.st_mode))
        rc = walk(here.v[i], pl, err);
      else
        rc = pl_add(pl, here.v[i], err);
    }
    free(here.v[i]);
  }
  free(here.v);
  return rc;
}

int ssae_cli_collect(char *const *args, int n, char ***paths, size_t *count,
                     ssae_err *err) {
  pathlist pl = {0};
  for (int i = 0; i < n; i++) {
    struct stat st;
    int rc = (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode))
                 ? walk(args[i], &pl, err)
                 : pl_add(&pl, args[i], err);
    if (rc) {
      ssae_cli_free_paths(pl.v, pl.n);
      return -1;
    }
  }
  *paths = pl.v;
  *count = pl.n;
  return 0;
}

void ssae_cli_free_paths(char **paths, size_t count) {
  if (!paths) return;
  for (size_t i = 0; i < count; i++) free(paths[i]);
  free(paths);
}

/* Length of the valid UTF-8 sequence at s (1-4), 0 when s does not start
 * one (overlong forms, surrogates and code points past U+10FFFF refused). */
static int utf8_len(const unsigned char *s) {
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

void ssae_cli_json_str(FILE *f, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  fputc('"', f);
  while (*s) {
    unsigned char c = *s;
    int n = utf8_len(s);
    if (!n) {
      fputs("\\ufffd", f);
      s++;
    } else if (c == '"' || c == '\\') {
      fprintf(f, "\\%c", c);
      s++;
    } else if (c < 0x20 || c == 0x7f) {
      fprintf(f, "\\u%04x", c);
      s++;
    } else {
      fwrite(s, 1, (size_t)n, f);
      s += n;
    }
  }
  fputc('"', f);
}

int ssae_cli_stdout_tty(void) { return isatty(STDOUT_FILENO); }
int ssae_cli_stderr_tty(void) { return isatty(STDERR_FILENO); }

void ssae_cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ssae %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}
