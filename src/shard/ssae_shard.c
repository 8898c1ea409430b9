/* Input list, partition, the shard from the environment, output headers
 * and lines. */
#include "ssae_shard.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ssae_sha256.h"

/* ---- the list ---- */

static int cmp_path_ptr(const void *a, const void *b) {
  return ssae_path_cmp(**(char **const *)a, **(char **const *)b);
}

void ssae_shard_list_free(ssae_shard_list *l) {
  if (!l) return;
  ssae_paths_free(l->paths, l->n);
  free(l->sizes);
  free(l);
}

static void list_digest(ssae_shard_list *l) {
  ssae_sha256 s;
  ssae_sha256_init(&s);
  for (size_t i = 0; i < l->n; i++) {
    char num[32];
    int len = l->sizes[i] == SSAE_SIZE_MISSING
                  ? snprintf(num, sizeof num, "-\n")
                  : snprintf(num, sizeof num, "%" PRIu64 "\n", l->sizes[i]);
    ssae_sha256_update(&s, l->paths[i], strlen(l->paths[i]) + 1);
    ssae_sha256_update(&s, num, (size_t)len);
  }
  unsigned char d[32];
  ssae_sha256_final(&s, d);
  for (int i = 0; i < SSAE_SHARD_DIGEST_HEX / 2; i++)
    snprintf(l->digest + 2 * i, 3, "%02x", d[i]);
}

/* Sorts (path, size) pairs together and drops repeated paths. */
static ssae_shard_list *list_build(char *const *paths, const uint64_t *sizes, size_t n,
                                   ssae_err *err) {
  ssae_shard_list *l = calloc(1, sizeof *l);
  char ***order = calloc(n ? n : 1, sizeof *order);
  char **copy = calloc(n ? n : 1, sizeof *copy);
  uint64_t *sz = calloc(n ? n : 1, sizeof *sz);
  if (l) l->paths = calloc(n ? n : 1, sizeof *l->paths);
  if (l) l->sizes = calloc(n ? n : 1, sizeof *l->sizes);
  if (!l || !order || !copy || !sz || !l->paths || !l->sizes) goto oom;
  for (size_t i = 0; i < n; i++) {
    if (!(copy[i] = strdup(paths[i]))) goto oom;
    order[i] = &copy[i];
  }
  qsort(order, n, sizeof *order, cmp_path_ptr);
  for (size_t k = 0; k < n; k++) {
    size_t i = (size_t)(order[k] - copy);
    if (l->n && !strcmp(l->paths[l->n - 1], copy[i])) continue;
    if (!(l->paths[l->n] = strdup(copy[i]))) goto oom;
    l->sizes[l->n] = sizes[i];
    l->n++;
  }
  list_digest(l);
  ssae_paths_free(copy, n);
  free(order);
  free(sz);
  return l;
oom:
  ssae_err_set(err, "out of memory for a list of %zu inputs", n);
  if (copy) ssae_paths_free(copy, n);
  free(order);
  free(sz);
  ssae_shard_list_free(l);
  return NULL;
}

ssae_shard_list *ssae_shard_list_new_sized(char *const *paths, const uint64_t *sizes,
                                           size_t n, ssae_err *err) {
  return list_build(paths, sizes, n, err);
}

ssae_shard_list *ssae_shard_list_new(char *const *paths, size_t n, ssae_err *err) {
  uint64_t *sizes = calloc(n ? n : 1, sizeof *sizes);
  if (!sizes) {
    ssae_err_set(err, "out of memory for a list of %zu inputs", n);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    sizes[i] = stat(paths[i], &st) == 0 ? (uint64_t)st.st_size : SSAE_SIZE_MISSING;
  }
  ssae_shard_list *l = list_build(paths, sizes, n, err);
  free(sizes);
  return l;
}

long ssae_shard_list_find(const ssae_shard_list *l, const char *path) {
  size_t lo = 0, hi = l->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = ssae_path_cmp(l->paths[mid], path);
    if (!c) return (long)mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/* ---- partition ---- */

typedef struct {
  uint64_t w;
  size_t i;
} item;

/* Largest first; equal sizes in canonical (list) order. */
static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

typedef struct {
  uint64_t load;
  size_t index;
} bin;

static int bin_less(const bin *a, const bin *b) {
  return a->load != b->load ? a->load < b->load : a->index < b->index;
}

static void sift_down(bin *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && bin_less(&h[l], &h[m])) m = l;
    if (r < n && bin_less(&h[r], &h[m])) m = r;
    if (m == i) return;
    bin t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

int ssae_shard_partition(const ssae_shard_list *l, size_t count, size_t *shard_of,
                         ssae_err *err) {
  if (count < 1 || count > SSAE_SHARD_MAX)
    return ssae_err_set(err, "shard count %zu: wants 1 to %d", count, SSAE_SHARD_MAX);
  item *order = malloc((l->n ? l->n : 1) * sizeof *order);
  bin *heap = malloc(count * sizeof *heap);
  if (!order || !heap) {
    free(order);
    free(heap);
    return ssae_err_set(err, "out of memory partitioning %zu inputs", l->n);
  }
  for (size_t i = 0; i < l->n; i++)
    order[i] = (item){l->sizes[i] == SSAE_SIZE_MISSING ? 0 : l->sizes[i], i};
  qsort(order, l->n, sizeof *order, cmp_item);
  /* Loads start equal, so index order is already a heap. */
  for (size_t s = 0; s < count; s++) heap[s] = (bin){0, s};
  for (size_t k = 0; k < l->n; k++) {
    shard_of[order[k].i] = heap[0].index;
    heap[0].load += order[k].w;
    sift_down(heap, count, 0);
  }
  free(order);
  free(heap);
  return 0;
}

int ssae_shard_members(const ssae_shard_list *l, size_t index, size_t count,
                       size_t **members, size_t *n_members, ssae_err *err) {
  *members = NULL;
  *n_members = 0;
  if (index >= count) return ssae_err_set(err, "shard %zu/%zu: the index runs from 0 to %zu",
                                          index, count, count ? count - 1 : 0);
  size_t *of = malloc((l->n ? l->n : 1) * sizeof *of);
  if (!of) return ssae_err_set(err, "out of memory partitioning %zu inputs", l->n);
  if (ssae_shard_partition(l, count, of, err)) {
    free(of);
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < l->n; i++)
    if (of[i] == index) of[k++] = i;
  if (k) {
    size_t *m = realloc(of, k * sizeof *m);
    *members = m ? m : of;
  } else {
    free(of);
  }
  *n_members = k;
  return 0;
}

/* ---- which shard ---- */

static int parse_size(const char *s, size_t *out) {
  if (!s || *s < '0' || *s > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > SIZE_MAX) return -1;
  *out = (size_t)v;
  return 0;
}

/* An environment variable as a number: 1 when set and valid, 0 unset. */
static int env_size(const char *name, size_t *out, ssae_err *err) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  if (parse_size(v, out)) return ssae_err_set(err, "%s is '%s', not a whole number", name, v);
  return 1;
}

static int from_slurm(size_t explicit_count, ssae_shard_spec *o, ssae_err *err) {
  size_t id, min = 0, max = 0, step = 1, cnt = 0;
  int has_min, has_max, has_cnt;
  if (env_size("SLURM_ARRAY_TASK_ID", &id, err) < 0) return -1;
  /* SSAE_SHARD_COUNT stands for --shard-count here too (the same word for
   * both schedulers) */
  size_t env_cnt = 0;
  const int has_env = env_size("SSAE_SHARD_COUNT", &env_cnt, err);
  if (has_env < 0) return -1;
  if (has_env && explicit_count && env_cnt != explicit_count)
    return ssae_err_set(err, "--shard-count %zu but SSAE_SHARD_COUNT is %zu", explicit_count,
                        env_cnt);
  if (has_env && !explicit_count) {
    if (!env_cnt) return ssae_err_set(err, "SSAE_SHARD_COUNT is 0");
    explicit_count = env_cnt;
  }
  if (explicit_count) {
    /* The task IDs are the shard indices: a subset of the array can be
     * submitted again (sbatch --array=2,5) to redo those shards. */
    if (id >= explicit_count)
      return ssae_err_set(err, "SLURM_ARRAY_TASK_ID %zu with --shard-count %zu: the array's "
                               "task IDs must run from 0 to %zu", id, explicit_count,
                          explicit_count - 1);
    o->index = id;
    o->count = explicit_count;
    snprintf(o->source, sizeof o->source, "Slurm array task %zu", id);
    return 0;
  }
  if ((has_min = env_size("SLURM_ARRAY_TASK_MIN", &min, err)) < 0 ||
      (has_max = env_size("SLURM_ARRAY_TASK_MAX", &max, err)) < 0 ||
      (has_cnt = env_size("SLURM_ARRAY_TASK_COUNT", &cnt, err)) < 0 ||
      env_size("SLURM_ARRAY_TASK_STEP", &step, err) < 0)
    return -1;
  if (!step) return ssae_err_set(err, "SLURM_ARRAY_TASK_STEP is 0");
  size_t count;
  if (has_min && has_max) {
    if (max < min || (max - min) % step)
      return ssae_err_set(err, "Slurm array from %zu to %zu by %zu is not a range", min, max,
                          step);
    count = (max - min) / step + 1;
    if (has_cnt && cnt != count)
      return ssae_err_set(err,
                          "this Slurm array has %zu tasks between %zu and %zu, not every index "
                          "of the range (a list like --array=1,5,9?): submit --array=0-%zu, "
                          "or give --shard I/N",
                          cnt, min, max, cnt ? cnt - 1 : 0);
  } else if (has_cnt) {
    count = cnt;
    min = has_min ? min : 0;
  } else {
    return ssae_err_set(err, "SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT "
                             "nor SLURM_ARRAY_TASK_MIN and _MAX: give --shard-count N (or set "
                             "SSAE_SHARD_COUNT)");
  }
  if (id < min || (id - min) % step || (id - min) / step >= count)
    return ssae_err_set(err, "SLURM_ARRAY_TASK_ID %zu is not in the array's %zu tasks from %zu "
                             "by %zu", id, count, min, step);
  o->index = (id - min) / step;
  o->count = count;
  snprintf(o->source, sizeof o->source, "Slurm array task %zu", id);
  return 0;
}

static int from_k8s(size_t explicit_count, ssae_shard_spec *o, ssae_err *err) {
  size_t idx, cnt = 0;
  if (env_size("JOB_COMPLETION_INDEX", &idx, err) < 0) return -1;
  int has_cnt = env_size("SSAE_SHARD_COUNT", &cnt, err);
  if (has_cnt < 0) return -1;
  if (explicit_count && has_cnt && cnt != explicit_count)
    return ssae_err_set(err, "--shard-count %zu but SSAE_SHARD_COUNT is %zu", explicit_count,
                        cnt);
  if (explicit_count) cnt = explicit_count;
  else if (!has_cnt)
    return ssae_err_set(err, "JOB_COMPLETION_INDEX is set (a Kubernetes indexed job) but not "
                             "the number of shards: give --shard-count N or set "
                             "SSAE_SHARD_COUNT to the job's completions");
  if (!cnt) return ssae_err_set(err, "the number of shards is 0");
  if (idx >= cnt)
    return ssae_err_set(err, "JOB_COMPLETION_INDEX %zu is not below the %zu shards", idx, cnt);
  o->index = idx;
  o->count = cnt;
  snprintf(o->source, sizeof o->source, "Kubernetes completion index %zu", idx);
  return 0;
}

int ssae_shard_spec_from_env(size_t explicit_count, ssae_shard_spec *o, ssae_err *err) {
  const char *v;
  if ((v = getenv("SLURM_ARRAY_TASK_ID")) && *v) return from_slurm(explicit_count, o, err);
  if ((v = getenv("JOB_COMPLETION_INDEX")) && *v) return from_k8s(explicit_count, o, err);
  if ((v = getenv("SLURM_JOB_ID")) && *v)
    return ssae_err_set(err, "--shard auto: Slurm job %s is not a job array (no "
                             "SLURM_ARRAY_TASK_ID): submit with sbatch --array=0-<N-1>, or "
                             "give --shard I/N", v);
  return ssae_err_set(err, "--shard auto: neither a Slurm job array (SLURM_ARRAY_TASK_ID) "
                           "nor a Kubernetes indexed job (JOB_COMPLETION_INDEX) in the "
                           "environment; give --shard I/N");
}

int ssae_shard_spec_parse(const char *s, size_t explicit_count, ssae_shard_spec *o,
                          ssae_err *err) {
  memset(o, 0, sizeof *o);
  if (!strcmp(s, "auto")) return ssae_shard_spec_from_env(explicit_count, o, err);
  const char *slash = strchr(s, '/');
  char head[32];
  size_t i, n;
  if (!slash || (size_t)(slash - s) >= sizeof head)
    return ssae_err_set(err, "--shard wants I/N (I from 0 to N-1) or auto, not '%s'", s);
  memcpy(head, s, (size_t)(slash - s));
  head[slash - s] = '\0';
  if (parse_size(head, &i) || parse_size(slash + 1, &n) || !n || n > SSAE_SHARD_MAX)
    return ssae_err_set(err, "--shard wants I/N (I from 0 to N-1, N from 1 to %d) or auto, "
                             "not '%s'", SSAE_SHARD_MAX, s);
  if (i >= n)
    return ssae_err_set(err, "--shard %s: I runs from 0 to %zu", s, n - 1);
  if (explicit_count && explicit_count != n)
    return ssae_err_set(err, "--shard %s but --shard-count %zu", s, explicit_count);
  o->index = i;
  o->count = n;
  snprintf(o->source, sizeof o->source, "--shard");
  return 0;
}
