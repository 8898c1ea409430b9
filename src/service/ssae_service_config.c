/* The service configuration (see the header). The document is first walked
 * against the libcyaml schema with libyaml's events (ssae_config_yaml.c:
 * exact lines), then loaded by libcyaml, then turned into ssae_config with
 * the defaults applied and every value checked.
 *
 * Thread context: main thread only (start-up and SIGHUP reload). */
#include "ssae_service_config.h"

#include "ssae_config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssae_config_schema.h"
#include "ssae_config_yaml.h"

struct ssae_config_lines;

/* ---- small helpers ---- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int set_str(char **dst, const char *s) {
  char *d = dup_or_null(s);
  if (s && !d) return -1;
  free(*dst);
  *dst = d;
  return 0;
}

/* "FILE:LINE: KEY: reason" (or "KEY: reason" without a line). */
static int bad(const ssae_config *c, ssae_err *err, const char *key,
               const char *fmt, ...) SSAE_PRINTF(4, 5);
static int bad(const ssae_config *c, ssae_err *err, const char *key,
               const char *fmt, ...) {
  char reason[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  int line = ssae_config_line(c, key);
  if (c->path && line > 0)
    return ssae_err_set(err, "%s:%d: %s: %s", c->path, line, key, reason);
  if (c->path)
    return ssae_err_set(err, "%s: %s: %s", c->path, key, reason);
  return ssae_err_set(err, "%s: %s", key, reason);
}

int ssae_config_line(const ssae_config *c, const char *key_path) {
  return c ? ssae_config_lines_find(c->lines, key_path) : 0;
}

/* Topic levels, metric labels, file names: one safe alphabet. */
static int name_ok(const char *s) {
  if (!s || !*s || strlen(s) > 64) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
      return 0;
  return 1;
}

static int prefix_ok(const char *s) {
  if (!s || !*s || s[0] == '/' || s[strlen(s) - 1] == '/') return 0;
  for (; *s; s++)
    if (*s == '+' || *s == '#' || (unsigned char)*s < 0x21) return 0;
  return 1;
}

int ssae_config_parse_hostport(const char *s, char **host, int *port,
                               ssae_err *err) {
  *host = NULL;
  const char *colon = s ? strrchr(s, ':') : NULL;
  const char *ps = colon ? colon + 1 : s;
  char *end;
  if (!s || !*ps) return ssae_err_set(err, "'%s' is not HOST:PORT", s ? s : "");
  errno = 0;
  long p = strtol(ps, &end, 10);
  if (*end || p < 0 || p > 65535 || errno)
    return ssae_err_set(err, "'%s': port must be 0..65535 (0: any free one)", s);
  if (colon && colon > s) {
    const char *h = s, *he = colon;
    if (*h == '[' && he[-1] == ']') h++, he--; /* [::1]:9464 */
    *host = strndup(h, (size_t)(he - h));
  } else {
    *host = strdup("127.0.0.1");
  }
  if (!*host) return ssae_err_set(err, "out of memory");
  *port = (int)p;
  return 0;
}

/* mqtt://HOST[:PORT] or mqtts://HOST[:PORT], nothing after. */
static int mqtt_url_ok(const char *u, char *why, size_t n) {
  const char *h;
  if (strncmp(u, "mqtt://", 7) == 0)
    h = u + 7;
  else if (strncmp(u, "mqtts://", 8) == 0)
    h = u + 8;
  else
    return snprintf(why, n, "'%s' must start with mqtt:// or mqtts://", u), 0;
  if (!*h || *h == ':' || *h == '/')
    return snprintf(why, n, "'%s' has no host", u), 0;
  const char *slash = strchr(h, '/');
  if (slash && slash[1])
    return snprintf(why, n, "'%s': a path is not allowed", u), 0;
  const char *colon = strrchr(h, ':');
  if (colon && (!slash || colon < slash) && !strchr(colon, ']')) {
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if ((*end && *end != '/') || p < 1 || p > 65535)
      return snprintf(why, n, "'%s': port must be 1..65535", u), 0;
  }
  return 1;
}

/* ---- defaults ---- */

static void machine_default(ssae_config_machine *m) {
  memset(m, 0, sizeof *m);
  m->threshold = NAN;
  m->smoothing_s = 0.1;
  m->on_count = 3;
  m->off_count = 5;
}

static ssae_config *config_alloc(void) {
  ssae_config *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->lines = calloc(1, sizeof *c->lines);
  c->status_every_s = 1.0;
  c->input.realtime = 1;
  c->mqtt.discovery = 1;
  c->mqtt.queue = 4096;
  c->mqtt.keepalive_s = 30;
  c->mqtt.reconnect_min_s = 0.5;
  c->mqtt.reconnect_max_s = 30;
  c->clips.flac = 1;
  c->clips.pre_roll_s = 5;
  c->clips.post_roll_s = 5;
  c->clips.max_length_s = 120;
  c->clips.keep_count = 500;
  c->clips.keep_age_s = 30 * 86400.0;
  c->clips.keep_bytes = 2ull << 30;
  if (!c->lines || set_str(&c->node, "ssae") || set_str(&c->backend, "auto") ||
      set_str(&c->mqtt.prefix, "ssae") ||
      set_str(&c->mqtt.discovery_prefix, "homeassistant")) {
    ssae_config_free(c);
    return NULL;
  }
  return c;
}

static int set_machines(ssae_config *c, int n) {
  ssae_config_machine *m = calloc((size_t)n, sizeof *m);
  if (!m) return -1;
  for (int i = 0; i < n; i++) machine_default(&m[i]);
  c->machines = m;
  c->n_machines = n;
  return 0;
}

ssae_config *ssae_config_new_default(int channels, ssae_err *err) {
  if (channels < 1 || channels > 4096) {
    ssae_err_set(err, "channels must be 1..4096");
    return NULL;
  }
  ssae_config *c = config_alloc();
  if (!c || set_machines(c, channels)) goto oom;
  for (int i = 0; i < channels; i++) {
    char name[32];
    snprintf(name, sizeof name, "ch%d", i);
    if (set_str(&c->machines[i].name, name)) goto oom;
  }
  return c;
oom:
  ssae_config_free(c);
  ssae_err_set(err, "out of memory");
  return NULL;
}

void ssae_config_free(ssae_config *c) {
  if (!c) return;
  for (int i = 0; i < c->n_machines; i++) {
    free(c->machines[i].name);
    free(c->machines[i].model);
  }
  free(c->machines);
  free(c->path);
  free(c->node);
  free(c->backend);
  free(c->input.device);
  free(c->input.channels);
  for (int i = 0; i < c->input.n_ports; i++) free(c->input.ports[i]);
  free(c->input.ports);
  free(c->input.file);
  free(c->events);
  free(c->mqtt.url);
  free(c->mqtt.prefix);
  free(c->mqtt.client_id);
  free(c->mqtt.username);
  if (c->mqtt.password) {
    memset(c->mqtt.password, 0, strlen(c->mqtt.password));
    free(c->mqtt.password);
  }
  free(c->mqtt.ca_file);
  free(c->mqtt.cert_file);
  free(c->mqtt.key_file);
  free(c->mqtt.discovery_prefix);
  free(c->metrics_host);
  free(c->clips.dir);
  ssae_config_lines_free(c->lines);
  free(c->lines);
  free(c);
}

/* ---- file -> config ---- */

/* A relative model path is taken from the config file's folder. */
static char *beside(const char *cfg_path, const char *p) {
  if (!cfg_path || p[0] == '/' || !strchr(cfg_path, '/')) return strdup(p);
  size_t dl = (size_t)(strrchr(cfg_path, '/') - cfg_path);
  char *r = malloc(dl + strlen(p) + 2);
  if (r) sprintf(r, "%.*s/%s", (int)dl, cfg_path, p);
  return r;
}

/* A secret from a regular file (a FIFO, a terminal or a device would hold
 * the start-up, or the reload, for as long as nobody writes to it): opened
 * without waiting, checked, then read up to 1023 bytes. */
static int read_secret_file(ssae_config *c, const char *key, const char *path,
                            char **out, ssae_err *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return bad(c, err, key, "cannot read '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return bad(c, err, key, "'%s' is not a regular file", path);
  }
  char buf[1024];
  size_t n = 0;
  while (n < sizeof buf - 1) {
    ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int e = errno;
      close(fd);
      return bad(c, err, key, "cannot read '%s': %s", path, strerror(e));
    }
    if (k == 0) break;
    n += (size_t)k;
  }
  close(fd);
  buf[n] = 0;
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
  if (n == 0) return bad(c, err, key, "'%s' is empty", path);
  *out = strdup(buf);
  memset(buf, 0, sizeof buf);
  return *out ? 0 : ssae_err_set(err, "out of memory");
}

static int from_raw(ssae_config *c, const cfg_top *t, ssae_err *err) {
  int oom = 0;
  if (t->node) oom |= set_str(&c->node, t->node);
  if (t->engine) {
    if (t->engine->backend) oom |= set_str(&c->backend, t->engine->backend);
    if (t->engine->gpu) c->gpu = *t->engine->gpu;
    if (t->engine->status_every) c->status_every_s = *t->engine->status_every;
  }
  if (t->machines_count) {
    if (set_machines(c, (int)t->machines_count)) return ssae_err_set(err, "out of memory");
    for (unsigned i = 0; i < t->machines_count; i++) {
      const cfg_machine *r = &t->machines[i];
      ssae_config_machine *m = &c->machines[i];
      oom |= set_str(&m->name, r->name);
      if (r->model) {
        m->model = beside(c->path, r->model);
        oom |= !m->model;
      }
      if (r->threshold) m->threshold = *r->threshold;
      if (r->smoothing) m->smoothing_s = *r->smoothing;
      if (r->hysteresis && r->hysteresis->on) m->on_count = *r->hysteresis->on;
      if (r->hysteresis && r->hysteresis->off) m->off_count = *r->hysteresis->off;
    }
  }
  const cfg_input *in = t->input;
  if (in) {
    int kinds = !!in->portaudio + !!in->jack + !!in->file;
    if (kinds > 1)
      return bad(c, err, "input", "give one of portaudio, jack, file");
    if (in->portaudio) {
      c->input.kind = SSAE_CONFIG_INPUT_PORTAUDIO;
      oom |= set_str(&c->input.device, in->portaudio->device);
      if (in->portaudio->channels_count) {
        c->input.n_channels = (int)in->portaudio->channels_count;
        c->input.channels = malloc(sizeof(int) * in->portaudio->channels_count);
        if (!c->input.channels) return ssae_err_set(err, "out of memory");
        memcpy(c->input.channels, in->portaudio->channels,
               sizeof(int) * in->portaudio->channels_count);
      }
    } else if (in->jack) {
      c->input.kind = SSAE_CONFIG_INPUT_JACK;
      c->input.ports = calloc(in->jack->ports_count, sizeof(char *));
      if (!c->input.ports) return ssae_err_set(err, "out of memory");
      c->input.n_ports = (int)in->jack->ports_count;
      for (unsigned i = 0; i < in->jack->ports_count; i++)
        oom |= set_str(&c->input.ports[i], in->jack->ports[i]);
    } else if (in->file) {
      c->input.kind = SSAE_CONFIG_INPUT_FILE;
      c->input.file = beside(c->path, in->file->path);
      oom |= !c->input.file;
      if (in->file->realtime) c->input.realtime = *in->file->realtime;
    }
  }
  const cfg_outputs *o = t->outputs;
  if (!o) return oom ? ssae_err_set(err, "out of memory") : 0;
  if (o->events) oom |= set_str(&c->events, o->events);
  if (o->mqtt) {
    const cfg_mqtt *q = o->mqtt;
    ssae_config_mqtt *m = &c->mqtt;
    oom |= set_str(&m->url, q->url);
    if (q->prefix) oom |= set_str(&m->prefix, q->prefix);
    oom |= set_str(&m->client_id, q->client_id);
    oom |= set_str(&m->username, q->username);
    if (q->tls) {
      oom |= set_str(&m->ca_file, q->tls->ca_file);
      oom |= set_str(&m->cert_file, q->tls->cert_file);
      oom |= set_str(&m->key_file, q->tls->key_file);
      if (q->tls->insecure) m->tls_insecure = *q->tls->insecure;
    }
    if (q->homeassistant) {
      if (q->homeassistant->discovery) m->discovery = *q->homeassistant->discovery;
      if (q->homeassistant->prefix)
        oom |= set_str(&m->discovery_prefix, q->homeassistant->prefix);
    }
    if (q->queue) m->queue = *q->queue;
    if (q->keepalive) m->keepalive_s = *q->keepalive;
    if (q->reconnect_min) m->reconnect_min_s = *q->reconnect_min;
    if (q->reconnect_max) m->reconnect_max_s = *q->reconnect_max;
    if (q->password_env && q->password_file)
      return bad(c, err, "outputs.mqtt.password_file",
                 "give password_env or password_file, not both");
    if (q->password_env) {
      const char *v = getenv(q->password_env);
      if (!v || !*v)
        return bad(c, err, "outputs.mqtt.password_env",
                   "environment variable %s is not set", q->password_env);
      oom |= set_str(&m->password, v);
    } else if (q->password_file) {
      if (read_secret_file(c, "outputs.mqtt.password_file", q->password_file,
                           &m->password, err))
        return -1;
    }
    if (m->password && !m->username)
      return bad(c, err, "outputs.mqtt", "a password needs a username");
  }
  if (o->metrics) {
    if (ssae_config_parse_hostport(o->metrics->listen, &c->metrics_host,
                                   &c->metrics_port, err))
      return bad(c, err, "outputs.metrics.listen", "%s", err ? err->msg : "bad");
  }
  if (o->clips) {
    const cfg_clips *k = o->clips;
    oom |= set_str(&c->clips.dir, k->dir);
    if (k->format) c->clips.flac = *k->format == CFG_CLIP_FLAC;
    if (k->pre_roll) c->clips.pre_roll_s = *k->pre_roll;
    if (k->post_roll) c->clips.post_roll_s = *k->post_roll;
    if (k->max_length) c->clips.max_length_s = *k->max_length;
    if (k->picture) c->clips.picture = *k->picture;
    if (k->keep) {
      if (k->keep->count) c->clips.keep_count = *k->keep->count;
      if (k->keep->age_days) c->clips.keep_age_s = *k->keep->age_days * 86400.0;
      if (k->keep->size_mb) {
        if (*k->keep->size_mb < 0 || *k->keep->size_mb > 1e9)
          return bad(c, err, "outputs.clips.keep.size_mb", "must be 0..1e9");
        c->clips.keep_bytes = (uint64_t)(*k->keep->size_mb * 1048576.0);
      }
    }
  }
  return oom ? ssae_err_set(err, "out of memory") : 0;
}

/* Every value's range; the key named is the one to fix. */
static int check_values(const ssae_config *c, ssae_err *err) {
  char key[96];
  if (!name_ok(c->node))
    return bad(c, err, "node", "'%s': use letters, digits, '_', '-', '.' (at most 64)",
               c->node);
  if (!(c->status_every_s > 0 && c->status_every_s <= SSAE_CONFIG_STATUS_EVERY_MAX))
    return bad(c, err, "engine.status_every", "must be in (0, %g] seconds",
               SSAE_CONFIG_STATUS_EVERY_MAX);
  if (strcmp(c->backend, "auto") && strcmp(c->backend, "cpu") &&
      strcmp(c->backend, "cuda"))
    return bad(c, err, "engine.backend", "'%s' is not auto, cpu or cuda",
               c->backend);
  /* The host's devices are the engine's to check when it starts (a file
   * may be written for another machine); here what no host could run. */
  if (c->gpu < 0 || c->gpu > 255)
    return bad(c, err, "engine.gpu", "%d: a CUDA device index is 0..255", c->gpu);
  if (c->gpu && !strcmp(c->backend, "cpu"))
    return bad(c, err, "engine.gpu", "%d names a GPU: not with engine.backend cpu", c->gpu);
  for (int i = 0; i < c->n_machines; i++) {
    const ssae_config_machine *m = &c->machines[i];
#define MKEY(k) (snprintf(key, sizeof key, "machines[%d]%s", i, k), key)
    if (!name_ok(m->name))
      return bad(c, err, MKEY(".name"),
                 "'%s': use letters, digits, '_', '-', '.' (at most 64)", m->name);
    for (int j = 0; j < i; j++)
      if (strcmp(c->machines[j].name, m->name) == 0)
        return bad(c, err, MKEY(".name"),
                   "machine name '%s' is used twice (also machines[%d])",
                   m->name, j);
    if (!isnan(m->threshold) && !(m->threshold > 0))
      return bad(c, err, MKEY(".threshold"), "must be > 0");
    if (m->smoothing_s < 0 || m->smoothing_s > 3600)
      return bad(c, err, MKEY(".smoothing"), "must be 0..3600 seconds");
    if (m->on_count < 1 || m->on_count > 100000)
      return bad(c, err, MKEY(".hysteresis.on"), "must be 1..100000");
    if (m->off_count < 1 || m->off_count > 100000)
      return bad(c, err, MKEY(".hysteresis.off"), "must be 1..100000");
#undef MKEY
  }
  if (c->input.kind == SSAE_CONFIG_INPUT_PORTAUDIO && c->input.n_channels) {
    if (c->n_machines && c->input.n_channels != c->n_machines)
      return bad(c, err, "input.portaudio.channels",
                 "%d channels for %d machines", c->input.n_channels,
                 c->n_machines);
    for (int i = 0; i < c->input.n_channels; i++)
      if (c->input.channels[i] < 0)
        return bad(c, err, "input.portaudio.channels", "channel %d is negative",
                   c->input.channels[i]);
  }
  if (c->input.kind == SSAE_CONFIG_INPUT_JACK && c->n_machines &&
      c->input.n_ports != c->n_machines)
    return bad(c, err, "input.jack.ports", "%d ports for %d machines",
               c->input.n_ports, c->n_machines);
  const ssae_config_mqtt *q = &c->mqtt;
  if (q->url) {
    char why[256];
    if (!mqtt_url_ok(q->url, why, sizeof why))
      return bad(c, err, "outputs.mqtt.url", "%s", why);
    if (!prefix_ok(q->prefix))
      return bad(c, err, "outputs.mqtt.prefix",
                 "'%s': no '+', '#', spaces, or '/' at either end", q->prefix);
    if (!prefix_ok(q->discovery_prefix))
      return bad(c, err, "outputs.mqtt.homeassistant.prefix",
                 "'%s': no '+', '#', spaces, or '/' at either end",
                 q->discovery_prefix);
    if (q->queue < 16 || q->queue > 1000000)
      return bad(c, err, "outputs.mqtt.queue", "must be 16..1000000 messages");
    if (q->keepalive_s < 5 || q->keepalive_s > 3600)
      return bad(c, err, "outputs.mqtt.keepalive", "must be 5..3600 seconds");
    if (!(q->reconnect_min_s > 0) || q->reconnect_min_s > 3600)
      return bad(c, err, "outputs.mqtt.reconnect_min", "must be in (0, 3600]");
    if (q->reconnect_max_s < q->reconnect_min_s || q->reconnect_max_s > 3600)
      return bad(c, err, "outputs.mqtt.reconnect_max",
                 "must be reconnect_min..3600");
    int tls = strncmp(q->url, "mqtts://", 8) == 0;
    if (!tls && (q->ca_file || q->cert_file || q->key_file))
      return bad(c, err, "outputs.mqtt.tls", "TLS files need an mqtts:// url");
    if (!!q->cert_file != !!q->key_file)
      return bad(c, err, "outputs.mqtt.tls",
                 "cert_file and key_file go together");
    const char *files[] = {q->ca_file, q->cert_file, q->key_file};
    const char *fkeys[] = {"outputs.mqtt.tls.ca_file", "outputs.mqtt.tls.cert_file",
                           "outputs.mqtt.tls.key_file"};
    for (int i = 0; i < 3; i++)
      if (files[i] && access(files[i], R_OK) != 0)
        return bad(c, err, fkeys[i], "cannot read '%s': %s", files[i],
                   strerror(errno));
  }
  const ssae_config_clips *k = &c->clips;
  if (k->dir) {
    if (k->pre_roll_s < 0 || k->pre_roll_s > 600)
      return bad(c, err, "outputs.clips.pre_roll", "must be 0..600 seconds");
    if (k->post_roll_s < 0 || k->post_roll_s > 600)
      return bad(c, err, "outputs.clips.post_roll", "must be 0..600 seconds");
    if (!(k->max_length_s > 0) || k->max_length_s > 86400)
      return bad(c, err, "outputs.clips.max_length", "must be in (0, 86400] seconds");
    if (k->keep_count < 0)
      return bad(c, err, "outputs.clips.keep.count", "must be >= 0 (0: no limit)");
    if (k->keep_age_s < 0)
      return bad(c, err, "outputs.clips.keep.age_days", "must be >= 0 (0: no limit)");
  }
  if (k->picture && !SSAE_HAVE_CAIRO)
    return bad(c, err, "outputs.clips.picture",
               "this ssae was built without cairo (libcairo2-dev): no pictures");
  if (k->picture && !k->dir)
    return bad(c, err, "outputs.clips.picture", "pictures go beside clips: give clips.dir");
  return 0;
}

static void cyaml_log_to_buf(cyaml_log_t level, void *ctx, const char *fmt,
                             va_list args) {
  char *buf = ctx;
  size_t u = strlen(buf);
  if (level >= CYAML_LOG_ERROR && u < 255) vsnprintf(buf + u, 256 - u, fmt, args);
}

ssae_config *ssae_config_load_mem(const char *text, size_t len,
                                  const char *name, ssae_err *err) {
  ssae_config *c = config_alloc();
  if (!c || set_str(&c->path, name)) {
    ssae_config_free(c);
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  if (ssae_config_yaml_check(text, len, name, &ssae_config_schema, c->lines, err)) {
    ssae_config_free(c);
    return NULL;
  }
  char log[256] = "";
  cyaml_config_t cy = {.log_fn = cyaml_log_to_buf, .log_ctx = log,
                       .mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR};
  cfg_top *t = NULL;
  cyaml_err_t e = cyaml_load_data((const uint8_t *)text, len, &cy,
                                  &ssae_config_schema, (cyaml_data_t **)&t, NULL);
  if (e != CYAML_OK) {
    /* The walk above accepts only what libcyaml loads; this is a bug. */
    for (char *p = log; *p; p++)
      if (*p == '\n') *p = ' ';
    ssae_err_set(err, "%s: %s (%s)", name, cyaml_strerror(e), log);
    ssae_config_free(c);
    return NULL;
  }
  int r = from_raw(c, t, err);
  cyaml_free(&cy, &ssae_config_schema, t, 0);
  if (r || check_values(c, err)) {
    ssae_config_free(c);
    return NULL;
  }
  return c;
}

ssae_config *ssae_config_load(const char *path, ssae_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ssae_err_set(err, "%s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (cap - len < 4096) {
      char *nb = realloc(buf, cap + 65536);
      if (!nb) break;
      buf = nb;
      cap += 65536;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0 || len > (1u << 24)) break;
  }
  const int read_errno = ferror(f) ? errno : 0;
  const int bad_read = ferror(f) || !buf || len > (1u << 24);
  fclose(f);
  if (bad_read) {
    free(buf);
    if (!buf) ssae_err_set(err, "%s: out of memory", path);
    else if (len > (1u << 24)) ssae_err_set(err, "%s: larger than 16 MiB, not a config", path);
    else ssae_err_set(err, "%s: cannot read: %s", path, strerror(read_errno ? read_errno : EIO));
    return NULL;
  }
  ssae_config *c = ssae_config_load_mem(buf, len, path, err);
  free(buf);
  return c;
}

/* ---- command-line flags ---- */

int ssae_config_apply(ssae_config *c, const ssae_config_overrides *o,
                      ssae_err *err) {
  if (!o) return 0;
  if (o->node) {
    if (!name_ok(o->node))
      return ssae_err_set(err, "--node '%s': use letters, digits, '_', '-', '.'",
                          o->node);
    if (set_str(&c->node, o->node)) return ssae_err_set(err, "out of memory");
  }
  if (o->names) {
    int n = 1;
    for (const char *p = o->names; *p; p++) n += *p == ',';
    if (c->n_machines && n != c->n_machines)
      return ssae_err_set(err, "--names gives %d names for %d machines", n,
                          c->n_machines);
    if (!c->n_machines && (n > 4096 || set_machines(c, n)))
      return ssae_err_set(err, "--names: too many names");
    const char *p = o->names;
    for (int i = 0; i < n; i++) {
      const char *e = strchr(p, ',');
      size_t l = e ? (size_t)(e - p) : strlen(p);
      char *nm = strndup(p, l);
      if (!nm) return ssae_err_set(err, "out of memory");
      free(c->machines[i].name);
      c->machines[i].name = nm;
      if (!name_ok(nm))
        return ssae_err_set(err, "--names: '%s': use letters, digits, '_', '-', '.'",
                            nm);
      p = e ? e + 1 : p + l;
    }
  }
  if (o->mqtt_url) {
    char why[256];
    if (!mqtt_url_ok(o->mqtt_url, why, sizeof why))
      return ssae_err_set(err, "--mqtt: %s", why);
    if (set_str(&c->mqtt.url, o->mqtt_url)) return ssae_err_set(err, "out of memory");
  }
  if (o->metrics) {
    char *host;
    int port;
    if (ssae_config_parse_hostport(o->metrics, &host, &port, err))
      return ssae_err_prefix(err, "--metrics");
    free(c->metrics_host);
    c->metrics_host = host;
    c->metrics_port = port;
  }
  if (o->clips_dir && set_str(&c->clips.dir, o->clips_dir))
    return ssae_err_set(err, "out of memory");
  if (o->clip_pictures) c->clips.picture = 1;
  if (o->events && set_str(&c->events, o->events))
    return ssae_err_set(err, "out of memory");
  if (o->backend && set_str(&c->backend, o->backend))
    return ssae_err_set(err, "out of memory");
  if (o->gpu) c->gpu = *o->gpu;
  for (int i = 0; i < c->n_machines; i++) {
    if (o->model && set_str(&c->machines[i].model, o->model))
      return ssae_err_set(err, "out of memory");
    if (o->threshold > 0) c->machines[i].threshold = o->threshold;
  }
  return check_values(c, err);
}

int ssae_config_set_channels(ssae_config *c, int channels, ssae_err *err) {
  if (channels < 1 || channels > 4096)
    return ssae_err_set(err, "%d input channels: must be 1..4096", channels);
  if (c->n_machines == 0) {
    if (set_machines(c, channels)) return ssae_err_set(err, "out of memory");
    for (int i = 0; i < channels; i++) {
      char name[32];
      snprintf(name, sizeof name, "ch%d", i);
      if (set_str(&c->machines[i].name, name))
        return ssae_err_set(err, "out of memory");
    }
    return 0;
  }
  if (c->n_machines != channels)
    return bad(c, err, "machines", "%d machines for %d input channels (one machine "
               "per channel)", c->n_machines, channels);
  return 0;
}

/* ---- models ---- */

/* The first feature setting in which a and b differ, as "key a vs b". */
static int feature_diff(const ssae_model *a, const ssae_model *b, char *out,
                        size_t n) {
  for (size_t i = 0; ssae_feat_keys[i]; i++) {
    char va[64], vb[64];
    if (ssae_feat_cfg_get(&a->feat, ssae_feat_keys[i], va, sizeof va) ||
        ssae_feat_cfg_get(&b->feat, ssae_feat_keys[i], vb, sizeof vb))
      continue;
    if (strcmp(va, vb)) {
      snprintf(out, n, "%s %s vs %s", ssae_feat_keys[i], vb, va);
      return 1;
    }
  }
  if (a->d.n_mels != b->d.n_mels) {
    snprintf(out, n, "n_mels %d vs %d", b->d.n_mels, a->d.n_mels);
    return 1;
  }
  if (a->d.frames != b->d.frames) {
    snprintf(out, n, "frames %d vs %d", b->d.frames, a->d.frames);
    return 1;
  }
  return 0;
}

int ssae_config_check_models(const ssae_config *c, ssae_model **models_out,
                             ssae_err *err) {
  if (c->n_machines < 1) return ssae_err_set(err, "no machines configured");
  ssae_model **m = calloc((size_t)c->n_machines, sizeof *m);
  if (!m) return ssae_err_set(err, "out of memory");
  int r = 0;
  char key[64];
  for (int i = 0; i < c->n_machines && !r; i++) {
    const char *p = c->machines[i].model;
    snprintf(key, sizeof key, "machines[%d].model", i);
    if (p && access(p, R_OK) != 0) {
      r = bad(c, err, key, "model file '%s': %s", p, strerror(errno));
      break;
    }
    /* Machines sharing a file share one load. */
    for (int j = 0; j < i && !m[i]; j++) {
      const char *q = c->machines[j].model;
      if ((!p && !q) || (p && q && strcmp(p, q) == 0)) m[i] = m[j];
    }
    if (m[i]) continue;
    ssae_err e2 = {{0}};
    m[i] = ssae_model_open(p, &e2);
    if (!m[i]) {
      r = bad(c, err, key, "%s", e2.msg);
      break;
    }
    char diff[160];
    if (i > 0 && feature_diff(m[0], m[i], diff, sizeof diff))
      r = bad(c, err, key,
              "feature settings differ from machines[0]'s model (%s): one engine "
              "computes one set of features",
              diff);
  }
  for (int i = c->n_machines - 1; i >= 0; i--) {
    int shared = 0;
    for (int j = 0; j < i; j++) shared |= m[j] == m[i];
    if (r || !models_out) {
      if (!shared) ssae_model_free(m[i]);
    } else {
      models_out[i] = m[i];
    }
  }
  free(m);
  return r;
}

void ssae_config_free_models(ssae_model **models, int n) {
  if (!models) return;
  for (int i = n - 1; i >= 0; i--) {
    int shared = 0;
    for (int j = 0; j < i; j++) shared |= models[j] == models[i];
    if (!shared) ssae_model_free(models[i]);
    models[i] = NULL;
  }
}
