#include "ssae_shard_job.h"

#include <stdlib.h>
#include <string.h>

struct ssae_shard_job {
  ssae_shard_list *list;
  ssae_shard_spec spec;
  size_t *members, n_members, done_before;
  char **pending; /* into list->paths */
  size_t n_pending;
  ssae_shard_out *out, *win;
  FILE *out_f; /* stdout when no output file */
  int json;
};

void ssae_shard_job_free(ssae_shard_job *j) {
  if (!j) return;
  ssae_shard_out_free(j->win);
  ssae_shard_out_free(j->out);
  free(j->pending);
  free(j->members);
  ssae_shard_list_free(j->list);
  free(j);
}

/* --files-from lines, then the arguments, directories expanded. */
static ssae_shard_list *gather(const ssae_shard_job_opts *o, ssae_err *err) {
  char **listed = NULL, **paths = NULL;
  size_t nl = 0, np = 0;
  if (o->files_from && ssae_paths_read_list(o->files_from, &listed, &nl, err)) return NULL;
  char **all = malloc((nl + o->n_args + 1) * sizeof *all);
  ssae_shard_list *l = NULL;
  if (!all) {
    ssae_err_set(err, "out of memory");
  } else {
    for (size_t i = 0; i < nl; i++) all[i] = listed[i];
    for (size_t i = 0; i < o->n_args; i++) all[nl + i] = o->args[i];
    if (ssae_paths_expand(all, nl + o->n_args, &paths, &np, err) == 0)
      l = ssae_shard_list_new(paths, np, err);
  }
  free(all);
  ssae_paths_free(listed, nl);
  ssae_paths_free(paths, np);
  return l;
}

ssae_shard_job *ssae_shard_job_new(const ssae_shard_job_opts *o, ssae_err *err) {
  if (o->resume && !o->out) {
    ssae_err_set(err, "--resume needs the output file (-o) of the earlier run");
    return NULL;
  }
  ssae_shard_job *j = calloc(1, sizeof *j);
  if (!j) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  j->json = o->json;
  ssae_shard_format fmt = o->json ? SSAE_SHARD_JSON : SSAE_SHARD_TSV;
  ssae_shard_resume r = {0}, rw = {0};
  if (ssae_shard_spec_parse(o->shard, o->shard_count, &j->spec, err) ||
      !(j->list = gather(o, err)) ||
      ssae_shard_members(j->list, j->spec.index, j->spec.count, &j->members, &j->n_members,
                         err))
    goto fail;
  ssae_shard_header h;
  ssae_shard_header_init(&h, j->list, j->spec.index, j->spec.count, j->n_members);
  if (o->resume) {
    if (ssae_shard_resume_read(o->out, fmt, &h, j->list, j->members, j->n_members, NULL, &r,
                               err))
      goto fail;
    if (o->windows && ssae_shard_resume_read(o->windows, SSAE_SHARD_WINDOWS, &h, j->list,
                                             j->members, j->n_members, r.done, &rw, err))
      goto fail;
    /* Every file done has windows (none is shorter than one), written
     * before its result line: fewer means another run's windows file. */
    if (o->windows && rw.n_done != r.n_done) {
      ssae_err_set(err, "--resume: %s has the windows of %zu of the %zu files done in %s "
                        "(written without --windows?); run again without --resume",
                   rw.from[0] ? rw.from : o->windows, rw.n_done, r.n_done,
                   r.from[0] ? r.from : o->out);
      goto fail;
    }
    j->done_before = r.n_done;
  }
  if (!(j->pending = malloc((j->n_members + 1) * sizeof *j->pending))) {
    ssae_err_set(err, "out of memory");
    goto fail;
  }
  for (size_t k = 0; k < j->n_members; k++)
    if (!r.done || !r.done[k]) j->pending[j->n_pending++] = j->list->paths[j->members[k]];
  /* The windows output first: a result line in the main output then
   * always has its windows written. */
  if (o->windows && !(j->win = ssae_shard_out_new(o->windows, SSAE_SHARD_WINDOWS, &h, rw.kept,
                                                  rw.kept_len, err)))
    goto fail;
  if (o->out) {
    if (!(j->out = ssae_shard_out_new(o->out, fmt, &h, r.kept, r.kept_len, err))) goto fail;
    j->out_f = ssae_shard_out_file(j->out);
  } else {
    char head[256];
    if (ssae_shard_header_format(&h, fmt, head, sizeof head) > 0) fputs(head, stdout);
    j->out_f = stdout;
  }
  ssae_shard_resume_release(&r);
  ssae_shard_resume_release(&rw);
  return j;
fail:
  ssae_shard_resume_release(&r);
  ssae_shard_resume_release(&rw);
  ssae_shard_job_free(j);
  return NULL;
}

char *const *ssae_shard_job_pending(const ssae_shard_job *j, size_t *n) {
  *n = j->n_pending;
  return j->pending;
}
size_t ssae_shard_job_files(const ssae_shard_job *j) { return j->n_members; }
const ssae_shard_spec *ssae_shard_job_spec(const ssae_shard_job *j) { return &j->spec; }
size_t ssae_shard_job_done_before(const ssae_shard_job *j) { return j->done_before; }
const ssae_shard_list *ssae_shard_job_list(const ssae_shard_job *j) { return j->list; }
FILE *ssae_shard_job_out(ssae_shard_job *j) { return j->out_f; }
FILE *ssae_shard_job_windows(ssae_shard_job *j) {
  return j->win ? ssae_shard_out_file(j->win) : NULL;
}

int ssae_shard_job_failed(ssae_shard_job *j, const char *path, const char *msg) {
  return ssae_shard_write_failed(j->out_f, j->json ? SSAE_SHARD_JSON : SSAE_SHARD_TSV, path, msg);
}

int ssae_shard_job_next(ssae_shard_job *j, ssae_err *err) {
  FILE *w = ssae_shard_job_windows(j);
  if ((w && fflush(w)) || fflush(j->out_f)) return ssae_err_set(err, "write failed");
  return 0;
}

int ssae_shard_job_finish(ssae_shard_job *j, ssae_err *err) {
  if (j->win && ssae_shard_out_commit(j->win, err)) return -1;
  if (j->out) return ssae_shard_out_commit(j->out, err);
  return fflush(j->out_f) ? ssae_err_set(err, "stdout: write failed") : 0;
}
