/* Input lists: directories expanded the way `ssae score` expands them, and
 * --files-from lists. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ssae_shard.h"

typedef struct {
  char **v;
  size_t n, cap;
} pathlist;

static int pl_add_owned(pathlist *pl, char *p, ssae_err *err) {
  if (!p) return ssae_err_set(err, "out of memory listing files");
  if (pl->n == pl->cap) {
    size_t cap = pl->cap ? pl->cap * 2 : 64;
    char **v = realloc(pl->v, cap * sizeof *v);
    if (!v) {
      free(p);
      return ssae_err_set(err, "out of memory listing files");
    }
    pl->v = v;
    pl->cap = cap;
  }
  pl->v[pl->n++] = p;
  return 0;
}

static int pl_add(pathlist *pl, const char *p, ssae_err *err) {
  return pl_add_owned(pl, strdup(p), err);
}

static int is_audio_name(const char *name) {
  static const char *const ext[] = {"wav", "wave", "flac", "ogg", "oga", "opus",
                                    "aif", "aiff", "aifc", "mp3", "au",  "caf",
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
  size_t dl = strlen(dir);
  const char *sep = dl && dir[dl - 1] == '/' ? "" : "/";
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    size_t len = dl + strlen(e->d_name) + 2;
    char *p = malloc(len);
    if (!p) {
      rc = ssae_err_set(err, "out of memory listing files");
      break;
    }
    snprintf(p, len, "%s%s%s", dir, sep, e->d_name);
    struct stat st;
    if (stat(p, &st) == 0 && (S_ISDIR(st.st_mode) || is_audio_name(e->d_name)))
      rc = pl_add_owned(&here, p, err);
    else
      free(p);
  }
  closedir(d);
  if (here.n) qsort(here.v, here.n, sizeof *here.v, cmp_str);
  for (size_t i = 0; i < here.n; i++) {
    struct stat st;
    if (rc == 0) {
      if (stat(here.v[i], &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = walk(here.v[i], pl, err);
      } else {
        rc = pl_add_owned(pl, here.v[i], err);
        here.v[i] = NULL;
      }
    }
    free(here.v[i]);
  }
  free(here.v);
  return rc;
}

int ssae_paths_expand(char *const *args, size_t n, char ***paths, size_t *count,
                      ssae_err *err) {
  pathlist pl = {0};
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    int rc = (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) ? walk(args[i], &pl, err)
                                                              : pl_add(&pl, args[i], err);
    if (rc) {
      ssae_paths_free(pl.v, pl.n);
      return -1;
    }
  }
  *paths = pl.v;
  *count = pl.n;
  return 0;
}

int ssae_paths_read_list(const char *file, char ***paths, size_t *count, ssae_err *err) {
  int std = !strcmp(file, "-");
  FILE *f = std ? stdin : fopen(file, "r");
  if (!f) return ssae_err_set(err, "%s: cannot open: %s", file, strerror(errno));
  pathlist pl = {0};
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0;
  errno = 0;
  while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
    if (len && line[len - 1] == '\n') line[--len] = '\0';
    if (len && line[len - 1] == '\r') line[--len] = '\0';
    if (!len) continue;
    if (memchr(line, '\0', (size_t)len))
      rc = ssae_err_set(err, "%s: a line holds a NUL byte", std ? "stdin" : file);
    else
      rc = pl_add(&pl, line, err);
  }
  if (rc == 0 && ferror(f))
    rc = ssae_err_set(err, "%s: read failed: %s", std ? "stdin" : file, strerror(errno));
  free(line);
  if (!std) fclose(f);
  if (rc) {
    ssae_paths_free(pl.v, pl.n);
    return -1;
  }
  *paths = pl.v;
  *count = pl.n;
  return 0;
}

void ssae_paths_free(char **paths, size_t count) {
  if (!paths) return;
  for (size_t i = 0; i < count; i++) free(paths[i]);
  free(paths);
}

int ssae_path_cmp(const char *a, const char *b) {
  const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
  while (*x && *x == *y) x++, y++;
  if (*x == *y) return 0;
  /* End of string below '/', '/' below every other byte: components in turn. */
  unsigned cx = *x == '/' ? 1u : *x ? (unsigned)*x + 1u : 0u;
  unsigned cy = *y == '/' ? 1u : *y ? (unsigned)*y + 1u : 0u;
  return cx < cy ? -1 : 1;
}
