/* MQTT publisher (see the header). One thread owns the libmosquitto handle:
 * it connects, runs mosquitto_loop (whose callbacks therefore run on it
 * too) and moves messages from the queue to the connection; callers only
 * take the queue's mutex for a few pointer moves.
 *
 * Thread context: the module's thread for everything that touches the
 * mosquitto handle; the public calls from any non-audio thread. */
#include "ssae_mqtt.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mosquitto.h>

/* QoS 1 messages given to libmosquitto and not yet acknowledged; more wait
 * in our bounded queue, so that libmosquitto's own (unbounded) queue stays
 * small. */
#define MAX_INFLIGHT 64

typedef struct msg {
  char *topic, *payload;
  int qos, retain;
} msg;

typedef struct slot {
  char *topic, *payload;
  int dirty;
} slot;

struct ssae_mqtt {
  ssae_mqtt_cfg cfg;
  char *host, *url, *client_id, *username, *password, *ca_file, *cert_file,
      *key_file, *status_topic, *resend_topic;
  int port, tls;

  pthread_mutex_t mu;
  int mu_ok;
  msg *q;
  size_t cap, head, len;
  slot *slots;
  int n_slots;
  msg *births;
  int n_births;
  int births_due; /* set on connect and on "online" from the resend topic */
  int births_pos; /* next to send: 0 the status, i > 0 births[i - 1] */
  int stop;       /* free() asked the thread to end */

  /* Owned by the thread. */
  struct mosquitto *mosq;
  int inflight[MAX_INFLIGHT];
  int n_inflight;

  /* Set by on_connect and on_message (which run inside libmosquitto with
   * its own lock held, so they take no lock of ours): send the status,
   * births and retained states again. Applied by send_pending. */
  atomic_int resend;
  atomic_int connected;
  atomic_ullong dropped, published, acked, connects, unacked_now;
  /* Its own lock: on_disconnect may run inside mosquitto_publish, which
   * send_pending calls with mu held. */
  pthread_mutex_t err_mu;
  int err_mu_ok;
  char last_error[128];

  pthread_t thread;
  int thread_ok;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void set_error(ssae_mqtt *m, const char *what, int rc) {
  pthread_mutex_lock(&m->err_mu);
  snprintf(m->last_error, sizeof m->last_error, "%s: %s", what,
           rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc));
  pthread_mutex_unlock(&m->err_mu);
}

static void msg_clear(msg *x) {
  free(x->topic);
  free(x->payload);
  memset(x, 0, sizeof *x);
}

/* ---- libmosquitto callbacks (the module's thread) ---- */

static void on_connect(struct mosquitto *mosq, void *user, int rc) {
  ssae_mqtt *m = user;
  if (rc != 0) {
    pthread_mutex_lock(&m->err_mu);
    snprintf(m->last_error, sizeof m->last_error, "broker refused: %s",
             mosquitto_connack_string(rc));
    pthread_mutex_unlock(&m->err_mu);
    return;
  }
  atomic_store(&m->connected, 1);
  atomic_fetch_add(&m->connects, 1);
  atomic_store(&m->resend, 1);
  if (m->resend_topic) mosquitto_subscribe(mosq, NULL, m->resend_topic, 1);
}

static void on_disconnect(struct mosquitto *mosq, void *user, int rc) {
  (void)mosq;
  ssae_mqtt *m = user;
  /* After a refused CONNACK the refusal is the news, not the close. */
  if (atomic_exchange(&m->connected, 0) && rc != 0)
    set_error(m, "connection lost", MOSQ_ERR_CONN_LOST);
}

static void on_publish(struct mosquitto *mosq, void *user, int mid) {
  (void)mosq;
  ssae_mqtt *m = user;
  for (int i = 0; i < m->n_inflight; i++) {
    if (m->inflight[i] == mid) {
      m->inflight[i] = m->inflight[--m->n_inflight];
      atomic_store(&m->unacked_now, (unsigned long long)m->n_inflight);
      atomic_fetch_add(&m->acked, 1);
      return;
    }
  }
}

static void on_message(struct mosquitto *mosq, void *user,
                       const struct mosquitto_message *msg_in) {
  (void)mosq;
  ssae_mqtt *m = user;
  if (!m->resend_topic || strcmp(msg_in->topic, m->resend_topic) != 0) return;
  if (msg_in->payloadlen == 6 && memcmp(msg_in->payload, "online", 6) == 0)
    atomic_store(&m->resend, 1);
}

/* ---- sending (the module's thread) ---- */

static int send_one(ssae_mqtt *m, const char *topic, const char *payload,
                    int qos, int retain) {
  int mid = 0;
  size_t n = payload ? strlen(payload) : 0;
  int rc = mosquitto_publish(m->mosq, &mid, topic, (int)n, payload, qos,
                             retain != 0);
  if (rc != MOSQ_ERR_SUCCESS) {
    set_error(m, "publish", rc);
    return -1;
  }
  atomic_fetch_add(&m->published, 1);
  if (qos > 0) {
    m->inflight[m->n_inflight++] = mid;
    atomic_store(&m->unacked_now, (unsigned long long)m->n_inflight);
  }
  return 0;
}

/* Births, retained slots, then the queue; stops at the first failure (the
 * connection went away: what is left is sent after the reconnect). */
static void send_pending(ssae_mqtt *m) {
  pthread_mutex_lock(&m->mu);
  if (atomic_exchange(&m->resend, 0)) {
    m->births_due = 1;
    m->births_pos = 0;
    for (int i = 0; i < m->n_slots; i++)
      if (m->slots[i].payload) m->slots[i].dirty = 1;
  }
  /* The status, then the births, as room for QoS 1 messages in flight
   * allows (hundreds of machines have hundreds of discovery configs). */
  while (m->births_due) {
    if (m->n_inflight >= MAX_INFLIGHT) {
      pthread_mutex_unlock(&m->mu);
      return;
    }
    int pos = m->births_pos;
    int r = 0;
    if (pos == 0 && m->status_topic)
      r = send_one(m, m->status_topic, "online", 1, 1);
    else if (pos > 0)
      r = send_one(m, m->births[pos - 1].topic, m->births[pos - 1].payload, 1, 1);
    if (r) {
      pthread_mutex_unlock(&m->mu);
      return;
    }
    if (++m->births_pos > m->n_births) m->births_due = 0;
  }
  for (int i = 0; i < m->n_slots; i++) {
    slot *s = &m->slots[i];
    if (!s->dirty) continue;
    if (send_one(m, s->topic, s->payload, 0, 1)) {
      pthread_mutex_unlock(&m->mu);
      return;
    }
    s->dirty = 0;
  }
  while (m->len > 0) {
    msg *x = &m->q[m->head];
    if (x->qos > 0 && m->n_inflight >= MAX_INFLIGHT) break;
    if (send_one(m, x->topic, x->payload, x->qos, x->retain)) break;
    msg_clear(x);
    m->head = (m->head + 1) % m->cap;
    m->len--;
  }
  pthread_mutex_unlock(&m->mu);
}

static int stopping(ssae_mqtt *m) {
  pthread_mutex_lock(&m->mu);
  int s = m->stop;
  pthread_mutex_unlock(&m->mu);
  return s;
}

/* The outputs' threads yield to the audio and scoring threads when the
 * cores are busy: a nice of 10 for this thread alone (Linux threads have
 * their own nice value). Without the permission it stays as it is. */
static void run_in_background(void) {
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
}

static void *thread_main(void *arg) {
  run_in_background();
  ssae_mqtt *m = arg;
  double backoff = m->cfg.reconnect_min_s, next_try = 0;
  int ever = 0, stop_seen_at_empty = 0;
  double stop_since = 0;
  for (;;) {
    int stop = stopping(m);
    double t = now_s();
    if (stop) {
      if (stop_since == 0) stop_since = t;
      /* Deliver what is queued, then say goodbye (or give up). */
      pthread_mutex_lock(&m->mu);
      int empty = m->len == 0 && m->n_inflight == 0 && !m->births_due &&
                  !atomic_load(&m->resend);
      pthread_mutex_unlock(&m->mu);
      if (empty) stop_seen_at_empty = 1;
      if (stop_seen_at_empty || t - stop_since > m->cfg.drain_timeout_s)
        break;
    }
    if (!atomic_load(&m->connected)) {
      if (t < next_try) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
        continue;
      }
      int rc = ever ? mosquitto_reconnect(m->mosq)
                    : mosquitto_connect(m->mosq, m->host, m->port,
                                        m->cfg.keepalive_s);
      if (rc != MOSQ_ERR_SUCCESS) {
        set_error(m, "connect", rc);
        next_try = t + backoff;
        backoff = backoff * 2 > m->cfg.reconnect_max_s ? m->cfg.reconnect_max_s
                                                       : backoff * 2;
        continue;
      }
      ever = 1;
      /* Wait for the CONNACK; a silent broker counts as a failure. */
      double deadline = t + 5;
      while (!atomic_load(&m->connected) && now_s() < deadline &&
             !stopping(m)) {
        rc = mosquitto_loop(m->mosq, 50, 1);
        if (rc != MOSQ_ERR_SUCCESS) break;
      }
      if (!atomic_load(&m->connected)) {
        next_try = now_s() + backoff;
        backoff = backoff * 2 > m->cfg.reconnect_max_s ? m->cfg.reconnect_max_s
                                                       : backoff * 2;
        continue;
      }
      backoff = m->cfg.reconnect_min_s;
    }
    send_pending(m);
    int rc = mosquitto_loop(m->mosq, 20, 1);
    if (rc != MOSQ_ERR_SUCCESS) {
      if (atomic_exchange(&m->connected, 0)) set_error(m, "connection", rc);
      next_try = now_s() + backoff;
    }
  }
  if (atomic_load(&m->connected)) {
    if (m->status_topic && send_one(m, m->status_topic, "offline", 1, 1) == 0) {
      double deadline = now_s() + 2;
      while (m->n_inflight > 0 && now_s() < deadline &&
             mosquitto_loop(m->mosq, 20, 1) == MOSQ_ERR_SUCCESS) {
      }
    }
    mosquitto_disconnect(m->mosq);
    mosquitto_loop(m->mosq, 20, 1);
  }
  atomic_store(&m->connected, 0);
  return NULL;
}

/* ---- public ---- */

static char *dup_opt(const char *s, int *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = 1;
  return d;
}

static int parse_url(ssae_mqtt *m, const char *url, ssae_err *err) {
  const char *h;
  if (strncmp(url, "mqtt://", 7) == 0) {
    h = url + 7;
    m->port = 1883;
  } else if (strncmp(url, "mqtts://", 8) == 0) {
    h = url + 8;
    m->port = 8883;
    m->tls = 1;
  } else {
    return ssae_err_set(err, "mqtt: '%s' must start with mqtt:// or mqtts://", url);
  }
  size_t hl = strcspn(h, "/");
  const char *colon = memchr(h, ':', hl);
  const char *rb = memchr(h, ']', hl);
  if (colon && rb && colon < rb) colon = strchr(rb, ':');
  if (colon && colon < h + hl) {
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (end != h + hl || p < 1 || p > 65535)
      return ssae_err_set(err, "mqtt: '%s': bad port", url);
    m->port = (int)p;
    hl = (size_t)(colon - h);
  }
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2;
  if (hl == 0) return ssae_err_set(err, "mqtt: '%s' has no host", url);
  m->host = strndup(h, hl);
  return m->host ? 0 : ssae_err_set(err, "out of memory");
}

ssae_mqtt *ssae_mqtt_new(const ssae_mqtt_cfg *cfg, ssae_err *err) {
  if (!cfg || !cfg->url) {
    ssae_err_set(err, "mqtt: no url");
    return NULL;
  }
  ssae_mqtt *m = calloc(1, sizeof *m);
  if (!m) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  m->cfg = *cfg;
  if (m->cfg.keepalive_s <= 0) m->cfg.keepalive_s = 30;
  if (m->cfg.reconnect_min_s <= 0) m->cfg.reconnect_min_s = 0.5;
  if (m->cfg.reconnect_max_s < m->cfg.reconnect_min_s) m->cfg.reconnect_max_s = 30;
  if (m->cfg.reconnect_max_s < m->cfg.reconnect_min_s)
    m->cfg.reconnect_max_s = m->cfg.reconnect_min_s;
  if (m->cfg.queue <= 0) m->cfg.queue = 4096;
  if (m->cfg.drain_timeout_s <= 0) m->cfg.drain_timeout_s = 3;
  m->mu_ok = pthread_mutex_init(&m->mu, NULL) == 0;
  m->err_mu_ok = pthread_mutex_init(&m->err_mu, NULL) == 0;
  int oom = !m->mu_ok || !m->err_mu_ok;
  m->url = dup_opt(cfg->url, &oom);
  m->client_id = dup_opt(cfg->client_id, &oom);
  m->username = dup_opt(cfg->username, &oom);
  m->password = dup_opt(cfg->password, &oom);
  m->ca_file = dup_opt(cfg->ca_file, &oom);
  m->cert_file = dup_opt(cfg->cert_file, &oom);
  m->key_file = dup_opt(cfg->key_file, &oom);
  m->status_topic = dup_opt(cfg->status_topic, &oom);
  m->resend_topic = dup_opt(cfg->resend_topic, &oom);
  m->cap = (size_t)m->cfg.queue;
  m->q = calloc(m->cap, sizeof *m->q);
  m->n_slots = cfg->retained_slots > 0 ? cfg->retained_slots : 0;
  m->slots = calloc((size_t)m->n_slots + 1, sizeof *m->slots);
  if (oom || !m->q || !m->slots) {
    ssae_err_set(err, "out of memory");
    goto fail;
  }
  if (parse_url(m, m->url, err)) goto fail;
  /* Process-wide and idempotent; never undone (other handles may live). */
  mosquitto_lib_init();
  m->mosq = mosquitto_new(m->client_id, true, m);
  if (!m->mosq) {
    ssae_err_set(err, "mqtt: mosquitto_new: %s", strerror(errno));
    goto fail;
  }
  mosquitto_connect_callback_set(m->mosq, on_connect);
  mosquitto_disconnect_callback_set(m->mosq, on_disconnect);
  mosquitto_publish_callback_set(m->mosq, on_publish);
  mosquitto_message_callback_set(m->mosq, on_message);
  int rc = MOSQ_ERR_SUCCESS;
  if (m->status_topic)
    rc = mosquitto_will_set(m->mosq, m->status_topic, 7, "offline", 1, true);
  if (rc == MOSQ_ERR_SUCCESS && m->username)
    rc = mosquitto_username_pw_set(m->mosq, m->username, m->password);
  if (rc == MOSQ_ERR_SUCCESS && m->tls) {
    rc = mosquitto_tls_set(m->mosq, m->ca_file,
                           m->ca_file ? NULL : "/etc/ssl/certs", m->cert_file,
                           m->key_file, NULL);
    if (rc == MOSQ_ERR_SUCCESS && cfg->tls_insecure)
      rc = mosquitto_tls_insecure_set(m->mosq, true);
  }
  if (rc != MOSQ_ERR_SUCCESS) {
    ssae_err_set(err, "mqtt: %s", mosquitto_strerror(rc));
    goto fail;
  }
  if (pthread_create(&m->thread, NULL, thread_main, m) != 0) {
    ssae_err_set(err, "mqtt: cannot start its thread");
    goto fail;
  }
  m->thread_ok = 1;
  return m;
fail:
  ssae_mqtt_free(m);
  return NULL;
}

void ssae_mqtt_free(ssae_mqtt *m) { ssae_mqtt_close(m, NULL); }

void ssae_mqtt_close(ssae_mqtt *m, ssae_mqtt_stats *final) {
  if (final) memset(final, 0, sizeof *final);
  if (!m) return;
  if (m->thread_ok) {
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
  }
  if (final) ssae_mqtt_stats_get(m, final);
  if (m->mosq) mosquitto_destroy(m->mosq);
  if (m->q)
    for (size_t i = 0; i < m->len; i++) msg_clear(&m->q[(m->head + i) % m->cap]);
  free(m->q);
  for (int i = 0; m->slots && i < m->n_slots; i++) {
    free(m->slots[i].topic);
    free(m->slots[i].payload);
  }
  free(m->slots);
  for (int i = 0; i < m->n_births; i++) msg_clear(&m->births[i]);
  free(m->births);
  if (m->password) memset(m->password, 0, strlen(m->password));
  free(m->host);
  free(m->url);
  free(m->client_id);
  free(m->username);
  free(m->password);
  free(m->ca_file);
  free(m->cert_file);
  free(m->key_file);
  free(m->status_topic);
  free(m->resend_topic);
  if (m->mu_ok) pthread_mutex_destroy(&m->mu);
  if (m->err_mu_ok) pthread_mutex_destroy(&m->err_mu);
  free(m);
}

int ssae_mqtt_publish(ssae_mqtt *m, const char *topic, const char *payload,
                      int qos, int retain) {
  if (!m || !topic) return -1;
  /* Copy before taking the lock: the lock is held for pointer moves only. */
  msg x = {strdup(topic), strdup(payload ? payload : ""), qos > 0 ? 1 : 0,
           retain};
  if (!x.topic || !x.payload) {
    msg_clear(&x);
    atomic_fetch_add(&m->dropped, 1);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int full = m->len == m->cap;
  if (!full) {
    m->q[(m->head + m->len) % m->cap] = x;
    m->len++;
  }
  pthread_mutex_unlock(&m->mu);
  if (full) {
    msg_clear(&x);
    atomic_fetch_add(&m->dropped, 1);
    return -1;
  }
  return 0;
}

int ssae_mqtt_set_retained(ssae_mqtt *m, int slot_i, const char *topic,
                           const char *payload) {
  if (!m || slot_i < 0 || slot_i >= m->n_slots || !topic) return -1;
  char *t = strdup(topic), *p = strdup(payload ? payload : "");
  if (!t || !p) {
    free(t);
    free(p);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  slot *s = &m->slots[slot_i];
  char *ot = s->topic, *op = s->payload;
  s->topic = t;
  s->payload = p;
  s->dirty = 1;
  pthread_mutex_unlock(&m->mu);
  free(ot);
  free(op);
  return 0;
}

int ssae_mqtt_set_births(ssae_mqtt *m, int n, const char *const *topics,
                         const char *const *payloads) {
  if (!m || n < 0) return -1;
  msg *b = calloc((size_t)n + 1, sizeof *b);
  if (!b) return -1;
  for (int i = 0; i < n; i++) {
    b[i].topic = strdup(topics[i]);
    b[i].payload = strdup(payloads[i] ? payloads[i] : "");
    b[i].qos = 1;
    b[i].retain = 1;
    if (!b[i].topic || !b[i].payload) {
      for (int k = 0; k <= i; k++) msg_clear(&b[k]);
      free(b);
      return -1;
    }
  }
  pthread_mutex_lock(&m->mu);
  msg *old = m->births;
  int n_old = m->n_births;
  m->births = b;
  m->n_births = n;
  m->births_due = 1;
  m->births_pos = 0;
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < n_old; i++) msg_clear(&old[i]);
  free(old);
  return 0;
}

void ssae_mqtt_stats_get(ssae_mqtt *m, ssae_mqtt_stats *s) {
  memset(s, 0, sizeof *s);
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  s->queued = m->len;
  s->capacity = m->cap;
  pthread_mutex_unlock(&m->mu);
  pthread_mutex_lock(&m->err_mu);
  memcpy(s->last_error, m->last_error, sizeof s->last_error);
  pthread_mutex_unlock(&m->err_mu);
  s->dropped = atomic_load(&m->dropped);
  s->published = atomic_load(&m->published);
  s->acked = atomic_load(&m->acked);
  s->unacked = atomic_load(&m->unacked_now);
  s->connects = atomic_load(&m->connects);
  s->connected = atomic_load(&m->connected);
}

int ssae_mqtt_flush(ssae_mqtt *m, double timeout_s) {
  if (!m) return 0;
  double deadline = now_s() + timeout_s;
  for (;;) {
    pthread_mutex_lock(&m->mu);
    int done = m->len == 0 && !m->births_due && !atomic_load(&m->resend) &&
               atomic_load(&m->unacked_now) == 0 && atomic_load(&m->connected);
    for (int i = 0; i < m->n_slots; i++) done &= !m->slots[i].dirty;
    pthread_mutex_unlock(&m->mu);
    if (done) return 0;
    if (now_s() > deadline) return -1;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
}
