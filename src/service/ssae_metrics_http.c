/* Prometheus metrics and health over HTTP (see the header). Thread context:
 * requests on libmicrohttpd's own polling thread; heartbeat anywhere. */
#include "ssae_metrics_http.h"

#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

/* ---- text ---- */

void ssae_textbuf_printf(ssae_textbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = b->cap ? vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap) : -2;
    va_end(ap);
    if (n == -1) {
      b->oom = 1;
      return;
    }
    if (n >= 0 && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (n > 0 && cap - b->len <= (size_t)n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

void ssae_textbuf_free(ssae_textbuf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

void ssae_prom_family(ssae_textbuf *b, const char *name, const char *type,
                      const char *help) {
  ssae_textbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_value(ssae_textbuf *b, double v) {
  if (isnan(v))
    ssae_textbuf_printf(b, "NaN\n");
  else if (isinf(v))
    ssae_textbuf_printf(b, v > 0 ? "+Inf\n" : "-Inf\n");
  else
    ssae_textbuf_printf(b, "%.17g\n", v);
}

void ssae_prom_sample(ssae_textbuf *b, const char *name, const char *labels,
                      double value) {
  if (labels && *labels)
    ssae_textbuf_printf(b, "%s{%s} ", name, labels);
  else
    ssae_textbuf_printf(b, "%s ", name);
  put_value(b, value);
}

void ssae_prom_hist_init(ssae_prom_hist *h, const double *bounds, int n) {
  if (n > SSAE_PROM_HIST_MAX) n = SSAE_PROM_HIST_MAX;
  h->n = n;
  for (int i = 0; i < n; i++) h->bounds[i] = bounds[i];
  for (int i = 0; i <= SSAE_PROM_HIST_MAX; i++) atomic_init(&h->counts[i], 0);
  atomic_init(&h->sum_ns, 0);
}

void ssae_prom_hist_observe(ssae_prom_hist *h, double v) {
  if (!(v >= 0)) return;
  int i = 0;
  while (i < h->n && v > h->bounds[i]) i++;
  atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_ns, (unsigned long long)(v * 1e9),
                            memory_order_relaxed);
}

void ssae_prom_hist_write(ssae_textbuf *b, const char *name, const char *help,
                          const char *labels, const ssae_prom_hist *h) {
  ssae_prom_family(b, name, "histogram", help);
  const char *sep = labels && *labels ? "," : "";
  const char *lab = labels ? labels : "";
  unsigned long long acc = 0;
  for (int i = 0; i <= h->n; i++) {
    acc += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    if (i < h->n)
      ssae_textbuf_printf(b, "%s_bucket{%s%sle=\"%.17g\"} %llu\n", name, lab, sep,
                          h->bounds[i], acc);
    else
      ssae_textbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep,
                          acc);
  }
  double sum = atomic_load_explicit(&h->sum_ns, memory_order_relaxed) * 1e-9;
  if (*lab) {
    ssae_textbuf_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, lab, sum,
                        name, lab, acc);
  } else {
    ssae_textbuf_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, acc);
  }
}

/* ---- server ---- */

struct ssae_metrics_http {
  ssae_metrics_http_cfg cfg;
  struct MHD_Daemon *d;
  int port;
  atomic_llong beat_ns; /* monotonic ns of the last heartbeat; 0: none */
  atomic_int running;
};

static long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void ssae_metrics_http_heartbeat(ssae_metrics_http *m) {
  if (m) atomic_store_explicit(&m->beat_ns, mono_ns(), memory_order_relaxed);
}

void ssae_metrics_http_set_running(ssae_metrics_http *m, int running) {
  if (m) atomic_store(&m->running, running);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, char *body, size_t len,
                             int owned) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
  if (!r) {
    if (owned) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Cache-Control", "no-store");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload_data,
                              size_t *upload_size, void **req_cls) {
  (void)version;
  (void)upload_data;
  ssae_metrics_http *m = cls;
  /* The first call for a request only announces it. */
  if (!*req_cls) {
    *req_cls = (void *)1;
    return MHD_YES;
  }
  if (*upload_size) return MHD_NO;
  static char text_type[] = "text/plain; charset=utf-8";
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    static char msg[] = "only GET\n";
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text_type, msg, strlen(msg), 0);
  }
  if (strcmp(url, "/metrics") == 0) {
    ssae_textbuf b = {0};
    if (m->cfg.fn) m->cfg.fn(m->cfg.user, &b);
    if (b.oom) {
      ssae_textbuf_free(&b);
      static char msg[] = "out of memory\n";
      return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text_type, msg,
                   strlen(msg), 0);
    }
    if (!b.p) return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                           (char *)"", 0, 0);
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                 b.p, b.len, 1);
  }
  if (strcmp(url, "/healthz") == 0) {
    char msg[160];
    long long beat = atomic_load_explicit(&m->beat_ns, memory_order_relaxed);
    double age = beat ? (mono_ns() - beat) * 1e-9 : INFINITY;
    unsigned status = MHD_HTTP_SERVICE_UNAVAILABLE;
    if (!atomic_load(&m->running))
      snprintf(msg, sizeof msg, "engine not running\n");
    else if (!beat)
      snprintf(msg, sizeof msg, "no audio yet\n");
    else if (age > m->cfg.stale_s)
      snprintf(msg, sizeof msg, "no audio for %.1f s\n", age);
    else {
      snprintf(msg, sizeof msg, "ok\n");
      status = MHD_HTTP_OK;
    }
    return reply(c, status, text_type, msg, strlen(msg), 0);
  }
  static char nf[] = "not found (try /metrics or /healthz)\n";
  return reply(c, MHD_HTTP_NOT_FOUND, text_type, nf, strlen(nf), 0);
}

ssae_metrics_http *ssae_metrics_http_new(const ssae_metrics_http_cfg *cfg,
                                         ssae_err *err) {
  ssae_metrics_http *m = calloc(1, sizeof *m);
  if (!m) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  m->cfg = *cfg;
  if (m->cfg.stale_s <= 0) m->cfg.stale_s = 5;
  const char *host = cfg->host ? cfg->host : "127.0.0.1";
  if (cfg->port < 0 || cfg->port > 65535) {
    ssae_err_set(err, "metrics: port %d out of range", cfg->port);
    free(m);
    return NULL;
  }
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char port[16];
  snprintf(port, sizeof port, "%d", cfg->port);
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc != 0 || !ai) {
    ssae_err_set(err, "metrics: cannot resolve '%s': %s", host, gai_strerror(rc));
    free(m);
    return NULL;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  m->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handle, m,
                          MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                          MHD_OPTION_CONNECTION_LIMIT, 32u,
                          MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!m->d) {
    ssae_err_set(err, "metrics: cannot listen on %s:%d (in use, or not an "
                      "address of this host)", host, cfg->port);
    free(m);
    return NULL;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
  m->port = info ? info->port : cfg->port;
  return m;
}

void ssae_metrics_http_free(ssae_metrics_http *m) {
  if (!m) return;
  if (m->d) MHD_stop_daemon(m->d);
  free(m);
}

int ssae_metrics_http_port(const ssae_metrics_http *m) { return m ? m->port : 0; }
