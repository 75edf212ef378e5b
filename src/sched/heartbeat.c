/* heartbeat.c -- a worker's membership in a driver's cluster: a thread of
 * its own that registers, heartbeats every interval the driver asks for,
 * registers again on NOT_FOUND, and retries an unreachable driver on a
 * fresh channel (contracts in sched.h). Never on a Flight pool thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched_internal.h"

struct fsh_sched_heartbeat {
  char *driver_uri, *worker_uri, *auth_token; /* owned */
  int64_t retry_ms;
  bool log;
  bool deregister; /* "deregister" when stopped */
  pthread_t thread;
  pthread_mutex_t mu; /* guards stop, id, registrations */
  pthread_cond_t cv;
  bool stop;
  uint64_t id;
  int64_t registrations;
};

/* One DoAction with a protobuf body; the single result in *res. */
static int call(fsh_flight_client *c, const char *type, const ProtobufCMessage *m,
                fsh_flight_result_list *res, fsh_error *err) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = fsh_malloc(n ? n : 1);
  if (!buf) return fsh_error_set(err, ENOMEM, "%s: out of memory", type);
  protobuf_c_message_pack(m, buf);
  fsh_flight_action a = {.type = (char *)type, .body = {.data = buf, .size = (int64_t)n}};
  int rc = fsh_flight_do_action(c, &a, res, err);
  fsh_free(buf);
  if (rc == 0 && res->n != 1)
    rc = fsh_error_set(err, EPROTO, "%s: %lld results, expected 1", type, (long long)res->n);
  return rc;
}

/* Registers; on success *id and *interval are set. */
static int do_register(fsh_sched_heartbeat *h, fsh_flight_client *c, uint64_t *id,
                       int64_t *interval, fsh_error *err) {
  Flightshuffle__Sched__Register m = FLIGHTSHUFFLE__SCHED__REGISTER__INIT;
  m.uri = h->worker_uri;
  fsh_flight_result_list res = {0};
  int rc = call(c, "register", &m.base, &res, err);
  if (rc == 0) {
    Flightshuffle__Sched__RegisterReply *r = flightshuffle__sched__register_reply__unpack(
        &fsh_sched_pb_allocator, (size_t)res.items[0].size, res.items[0].data);
    if (!r || r->worker_id == 0) {
      rc = fsh_error_set(err, EPROTO, "register: malformed RegisterReply");
    } else {
      *id = r->worker_id;
      if (r->heartbeat_interval_ms > 0) *interval = r->heartbeat_interval_ms;
    }
    if (r) flightshuffle__sched__register_reply__free_unpacked(r, &fsh_sched_pb_allocator);
  }
  fsh_flight_result_list_reset(&res);
  return rc;
}

static int do_heartbeat(fsh_sched_heartbeat *h, fsh_flight_client *c, uint64_t id,
                        int64_t *interval, fsh_error *err) {
  Flightshuffle__Sched__Heartbeat m = FLIGHTSHUFFLE__SCHED__HEARTBEAT__INIT;
  m.worker_id = id;
  m.uri = h->worker_uri;
  fsh_flight_result_list res = {0};
  int rc = call(c, "heartbeat", &m.base, &res, err);
  if (rc == 0) {
    Flightshuffle__Sched__HeartbeatReply *r = flightshuffle__sched__heartbeat_reply__unpack(
        &fsh_sched_pb_allocator, (size_t)res.items[0].size, res.items[0].data);
    if (!r) rc = fsh_error_set(err, EPROTO, "heartbeat: malformed HeartbeatReply");
    else if (r->heartbeat_interval_ms > 0) *interval = r->heartbeat_interval_ms;
    if (r) flightshuffle__sched__heartbeat_reply__free_unpacked(r, &fsh_sched_pb_allocator);
  }
  fsh_flight_result_list_reset(&res);
  return rc;
}

static void *heartbeat_main(void *arg) {
  fsh_sched_heartbeat *h = arg;
  fsh_flight_client *c = NULL;
  uint64_t id = 0;
  int64_t interval = h->retry_ms;
  bool trouble = false; /* the last attempt failed (log the first failure only) */
  fsh_error err;
  pthread_mutex_lock(&h->mu);
  while (!h->stop) {
    pthread_mutex_unlock(&h->mu);
    int rc = 0;
    int64_t wait = interval;
    if (!c) {
      /* The per-call deadline bounds how long stop() waits for a call. */
      fsh_flight_client_options co = {.uri = h->driver_uri, .auth_token = h->auth_token,
                                      .timeout_ms = interval < 1000 ? 1000 : interval};
      rc = fsh_flight_client_open(&co, &c, &err);
    }
    if (rc == 0 && id == 0) {
      rc = do_register(h, c, &id, &interval, &err);
      if (rc == 0) {
        if (h->log)
          fprintf(stderr, "flightshuffle: worker %s: registered with driver %s as worker "
                  "%" PRIu64 "\n", h->worker_uri, h->driver_uri, id);
        pthread_mutex_lock(&h->mu);
        h->id = id;
        h->registrations++;
        pthread_mutex_unlock(&h->mu);
        wait = interval;
      }
    } else if (rc == 0) {
      rc = do_heartbeat(h, c, id, &interval, &err);
      if (rc == ENOENT) {
        /* The driver forgot us (restarted) or declared us dead. */
        if (h->log)
          fprintf(stderr, "flightshuffle: worker %s: %s\n", h->worker_uri, err.message);
        id = 0;
        pthread_mutex_lock(&h->mu);
        h->id = 0;
        pthread_mutex_unlock(&h->mu);
        rc = 0;
        wait = 0;
      } else if (rc == 0) {
        wait = interval;
      }
    }
    if (rc != 0) {
      if (h->log && !trouble)
        fprintf(stderr, "flightshuffle: worker %s: driver %s: %s (retrying every %" PRId64
                " ms)\n", h->worker_uri, h->driver_uri, err.message, h->retry_ms);
      trouble = true;
      /* A fresh channel next time: gRPC's reconnect backoff would grow. */
      fsh_flight_client_close(c);
      c = NULL;
      wait = h->retry_ms;
    } else if (trouble) {
      if (h->log)
        fprintf(stderr, "flightshuffle: worker %s: driver %s reachable again\n", h->worker_uri,
                h->driver_uri);
      trouble = false;
    }
    pthread_mutex_lock(&h->mu);
    if (wait > 0) fsh_sched_wait_ms(&h->cv, &h->mu, &h->stop, wait);
  }
  pthread_mutex_unlock(&h->mu);
  if (h->deregister && c && id) {
    /* a clean shutdown: the driver drops us now, not at our heartbeat
     * timeout (its call has the client's deadline) */
    Flightshuffle__Sched__Heartbeat m = FLIGHTSHUFFLE__SCHED__HEARTBEAT__INIT;
    m.worker_id = id;
    m.uri = h->worker_uri;
    fsh_flight_result_list res = {0};
    int rc = call(c, "deregister", &m.base, &res, &err);
    fsh_flight_result_list_reset(&res);
    if (h->log)
      fprintf(stderr, "flightshuffle: worker %s: deregistering from driver %s: %s\n",
              h->worker_uri, h->driver_uri, rc ? err.message : "done");
  }
  fsh_flight_client_close(c);
  return NULL;
}

static void heartbeat_free(fsh_sched_heartbeat *h) {
  fsh_free(h->driver_uri);
  fsh_free(h->worker_uri);
  fsh_free(h->auth_token);
  fsh_free(h);
}

int fsh_sched_heartbeat_start(const fsh_sched_heartbeat_options *opts,
                              fsh_sched_heartbeat **out, fsh_error *err) {
  *out = NULL;
  fsh_flight_location loc;
  if (!opts || !opts->driver_uri || !opts->worker_uri)
    return fsh_error_set(err, EINVAL, "heartbeat: driver and worker URIs are required");
  if (fsh_flight_location_parse(opts->driver_uri, &loc, err) != 0)
    return fsh_error_prefix(err, EINVAL, "heartbeat: driver: ");
  if (fsh_flight_location_parse(opts->worker_uri, &loc, err) != 0)
    return fsh_error_prefix(err, EINVAL, "heartbeat: worker: ");
  fsh_sched_heartbeat *h = fsh_calloc(1, sizeof *h);
  if (!h) return fsh_error_set(err, ENOMEM, "heartbeat: out of memory");
  h->driver_uri = fsh_strdup(opts->driver_uri);
  h->worker_uri = fsh_strdup(opts->worker_uri);
  h->auth_token = opts->auth_token ? fsh_strdup(opts->auth_token) : NULL;
  h->retry_ms = opts->retry_ms > 0 ? opts->retry_ms : 1000;
  h->log = opts->log;
  h->deregister = opts->deregister_on_stop;
  if (!h->driver_uri || !h->worker_uri || (opts->auth_token && !h->auth_token)) {
    heartbeat_free(h);
    return fsh_error_set(err, ENOMEM, "heartbeat: out of memory");
  }
  pthread_mutex_init(&h->mu, NULL);
  if (fsh_sched_cond_init(&h->cv) != 0) {
    pthread_mutex_destroy(&h->mu);
    heartbeat_free(h);
    return fsh_error_set(err, ENOMEM, "heartbeat: cannot create a condition variable");
  }
  if (pthread_create(&h->thread, NULL, heartbeat_main, h) != 0) {
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    heartbeat_free(h);
    return fsh_error_set(err, EAGAIN, "heartbeat: cannot start its thread");
  }
  *out = h;
  return 0;
}

uint64_t fsh_sched_heartbeat_worker_id(fsh_sched_heartbeat *h) {
  pthread_mutex_lock(&h->mu);
  uint64_t id = h->id;
  pthread_mutex_unlock(&h->mu);
  return id;
}

int64_t fsh_sched_heartbeat_registrations(fsh_sched_heartbeat *h) {
  pthread_mutex_lock(&h->mu);
  int64_t n = h->registrations;
  pthread_mutex_unlock(&h->mu);
  return n;
}

void fsh_sched_heartbeat_stop(fsh_sched_heartbeat *h) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->stop = true;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->thread, NULL);
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
  heartbeat_free(h);
}
