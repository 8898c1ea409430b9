/* Prometheus metrics and a health check over HTTP (libmicrohttpd):
 * GET /metrics (text exposition format 0.0.4, what the callback writes) and
 * GET /healthz (200 while the caller's heartbeat is fresh and the engine
 * runs, else 503 with the reason). Binds 127.0.0.1 unless told otherwise.
 * Also the small builders the metrics text is made with: a growing text
 * buffer, Prometheus HELP/TYPE/sample lines, and a lock-free histogram.
 *
 * Thread context: new/free on the main thread; requests and the callback on
 * libmicrohttpd's thread; ssae_metrics_http_heartbeat on any thread, the
 * audio thread included; ssae_prom_hist_observe on any thread. */
#ifndef SSAE_METRICS_HTTP_H
#define SSAE_METRICS_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_textbuf {
  char *p;
  size_t len, cap;
  int oom; /* an append failed: the text is incomplete */
} ssae_textbuf;

void ssae_textbuf_printf(ssae_textbuf *b, const char *fmt, ...) SSAE_PRINTF(2, 3);
void ssae_textbuf_free(ssae_textbuf *b);

/* "# HELP name help\n# TYPE name type\n". */
void ssae_prom_family(ssae_textbuf *b, const char *name, const char *type,
                      const char *help);
/* "name{labels} value\n" (labels: 'k="v",k2="v2"' or NULL); NaN and
 * infinities as Prometheus spells them. */
void ssae_prom_sample(ssae_textbuf *b, const char *name, const char *labels,
                      double value);

/* A cumulative histogram with fixed upper bounds (seconds). */
#define SSAE_PROM_HIST_MAX 24
typedef struct ssae_prom_hist {
  int n;
  double bounds[SSAE_PROM_HIST_MAX];
  atomic_ullong counts[SSAE_PROM_HIST_MAX + 1]; /* last: above every bound */
  atomic_ullong sum_ns;
} ssae_prom_hist;
void ssae_prom_hist_init(ssae_prom_hist *h, const double *bounds, int n);
void ssae_prom_hist_observe(ssae_prom_hist *h, double v) SSAE_REALTIME;
/* Family lines included. */
void ssae_prom_hist_write(ssae_textbuf *b, const char *name, const char *help,
                          const char *labels, const ssae_prom_hist *h);

/* Writes the whole /metrics text (families and samples). */
typedef void (*ssae_metrics_fn)(void *user, ssae_textbuf *out);

typedef struct ssae_metrics_http_cfg {
  const char *host;  /* NULL: 127.0.0.1 */
  int port;          /* 0: a free port (see ssae_metrics_http_port) */
  double stale_s;    /* /healthz: 503 after this long without a heartbeat
                        (0: 5 s) */
  ssae_metrics_fn fn;
  void *user;
} ssae_metrics_http_cfg;

typedef struct ssae_metrics_http ssae_metrics_http;

ssae_metrics_http *ssae_metrics_http_new(const ssae_metrics_http_cfg *cfg,
                                         ssae_err *err);
void ssae_metrics_http_free(ssae_metrics_http *m);
int ssae_metrics_http_port(const ssae_metrics_http *m);

/* Audio arrived (call it per block or per window): a relaxed atomic store
 * of a monotonic clock read (vDSO). */
void ssae_metrics_http_heartbeat(ssae_metrics_http *m) SSAE_REALTIME;
/* 1 once the engine runs, 0 when it stopped (healthz says 503). */
void ssae_metrics_http_set_running(ssae_metrics_http *m, int running);

#ifdef __cplusplus
}
#endif
#endif
