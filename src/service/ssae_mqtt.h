/* MQTT publisher (libmosquitto) with its own thread.
 *
 * Callers hand messages over without ever waiting for the network: events
 * go into a bounded queue (a message is dropped, and counted, only when the
 * queue is full); retained state goes into per-topic "latest value" slots
 * (a newer state replaces an unsent older one: a broker that is away for an
 * hour costs one message per machine, not an hour of states). The thread
 * connects, reconnects with exponential backoff when the broker is down at
 * start or goes away, and delivers what is queued once it is back (QoS 1
 * messages not yet acknowledged when a connection drops are sent again by
 * libmosquitto after the reconnect). On every connect it publishes the
 * retained status "online" (the last will says "offline") and the birth
 * messages (Home Assistant discovery), and again whenever a message on the
 * resend topic says "online" (Home Assistant restarted).
 *
 * Thread context: ssae_mqtt_publish / _set_retained / _stats from any
 * thread except the audio thread (a short mutex, an allocation); the
 * network I/O and the libmosquitto callbacks run on the module's thread;
 * new/free on the main thread. */
#ifndef SSAE_MQTT_H
#define SSAE_MQTT_H

#include <stdint.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_mqtt ssae_mqtt;

typedef struct ssae_mqtt_cfg {
  const char *url;          /* mqtt://HOST[:PORT] (1883) or mqtts:// (8883) */
  const char *client_id;    /* NULL: libmosquitto picks one */
  const char *username;     /* NULL: none */
  const char *password;
  const char *ca_file;      /* mqtts: NULL: the system's CAs */
  const char *cert_file, *key_file; /* client certificate (optional) */
  int tls_insecure;         /* 1: skip the host name check */
  int keepalive_s;          /* 0: 30 */
  double reconnect_min_s;   /* 0: 0.5 */
  double reconnect_max_s;   /* 0: 30 */
  int queue;                /* event queue capacity (0: 4096) */
  int retained_slots;       /* latest-value slots (one per machine) */
  const char *status_topic; /* retained online/offline; NULL: none */
  const char *resend_topic; /* "homeassistant/status"; NULL: none */
  double drain_timeout_s;   /* at free: wait this long for the queue (0: 3) */
} ssae_mqtt_cfg;

typedef struct ssae_mqtt_stats {
  uint64_t queued;    /* messages in the queue now */
  uint64_t capacity;  /* its capacity */
  uint64_t dropped;   /* messages refused because the queue was full */
  uint64_t published; /* messages handed to the broker connection */
  uint64_t acked;     /* QoS 1 messages the broker acknowledged */
  uint64_t unacked;   /* QoS 1 messages awaiting acknowledgement */
  uint64_t connects;  /* successful connections */
  int connected;      /* 1 while connected */
  char last_error[128];
} ssae_mqtt_stats;

/* Checks the config and starts the thread; the broker need not be up. */
ssae_mqtt *ssae_mqtt_new(const ssae_mqtt_cfg *cfg, ssae_err *err);
/* Delivers what is queued (up to drain_timeout_s), publishes the retained
 * "offline" status, disconnects cleanly, stops the thread. Accepts NULL. */
void ssae_mqtt_free(ssae_mqtt *m);

/* ssae_mqtt_free, with the final counts once the thread has stopped
 * (queued: messages never delivered). */
void ssae_mqtt_close(ssae_mqtt *m, ssae_mqtt_stats *final);

/* Queues a message (copied). 0, or -1 when the queue is full (dropped and
 * counted). Never waits for the network. */
int ssae_mqtt_publish(ssae_mqtt *m, const char *topic, const char *payload,
                      int qos, int retain);

/* The latest retained value of slot (0 .. retained_slots-1): sent QoS 0,
 * retained, as soon as connected; a newer value replaces an unsent one;
 * sent again after each reconnect. 0 or -1 (bad slot, no memory). */
int ssae_mqtt_set_retained(ssae_mqtt *m, int slot, const char *topic,
                           const char *payload);

/* Messages published (retained, QoS 1) after every connect and when the
 * resend topic says "online": the Home Assistant discovery configs.
 * set_births replaces the whole list (a reload renames machines); an
 * empty payload removes a retained config from the broker. */
int ssae_mqtt_set_births(ssae_mqtt *m, int n, const char *const *topics,
                         const char *const *payloads);

void ssae_mqtt_stats_get(ssae_mqtt *m, ssae_mqtt_stats *s);

/* Waits until the queue is empty and every QoS 1 message is acknowledged,
 * or timeout_s passes. 0 when done, -1 on timeout. */
int ssae_mqtt_flush(ssae_mqtt *m, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif
