/* common.c -- helpers shared by the driver and the heartbeat: the
 * protobuf-c allocator over fsh_malloc, the clock, timed waits, the worker
 * list (reset, count, WorkerList decoding) and the "workers" client call. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "sched/sched_internal.h"

static void *pb_alloc(void *ctx, size_t size) {
  (void)ctx;
  return fsh_malloc(size ? size : 1);
}
static void pb_free(void *ctx, void *p) {
  (void)ctx;
  fsh_free(p);
}
ProtobufCAllocator fsh_sched_pb_allocator = {.alloc = pb_alloc, .free = pb_free};

int64_t fsh_sched_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fsh_sched_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  int rc = pthread_condattr_init(&a);
  if (rc) return rc;
  rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc;
}

void fsh_sched_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
  ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  while (!*stop && pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT) {
  }
}

int fsh_sched_push_message(fsh_flight_result_list *out, const ProtobufCMessage *m,
                           const char *what, fsh_error *err) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = fsh_malloc(n ? n : 1);
  if (!buf) return fsh_error_set(err, ENOMEM, "%s: out of memory", what);
  protobuf_c_message_pack(m, buf);
  int rc = fsh_flight_result_list_push(out, buf, (int64_t)n);
  fsh_free(buf);
  if (rc) return fsh_error_set(err, ENOMEM, "%s: out of memory", what);
  return 0;
}

const char *fsh_sched_worker_state_name(fsh_sched_worker_state s) {
  switch (s) {
  case FSH_SCHED_WORKER_ALIVE: return "alive";
  case FSH_SCHED_WORKER_DEAD: return "dead";
  default: return "unknown";
  }
}

void fsh_sched_worker_list_reset(fsh_sched_worker_list *l) {
  if (!l) return;
  for (int64_t i = 0; i < l->n; i++) fsh_free(l->items[i].uri);
  fsh_free(l->items);
  memset(l, 0, sizeof *l);
}

int64_t fsh_sched_worker_list_alive(const fsh_sched_worker_list *l) {
  int64_t n = 0;
  for (int64_t i = 0; i < l->n; i++) n += l->items[i].state == FSH_SCHED_WORKER_ALIVE;
  return n;
}

int fsh_sched_worker_list_decode(const void *data, int64_t size, fsh_sched_worker_list *out,
                                 fsh_error *err) {
  memset(out, 0, sizeof *out);
  static const uint8_t empty[1];
  Flightshuffle__Sched__WorkerList *m = flightshuffle__sched__worker_list__unpack(
      &fsh_sched_pb_allocator, (size_t)size, data ? data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "workers: malformed WorkerList (%lld bytes)",
                               (long long)size);
  int rc = 0;
  out->heartbeat_timeout_ms = m->heartbeat_timeout_ms;
  if (m->n_workers && !(out->items = fsh_calloc(m->n_workers, sizeof *out->items)))
    rc = fsh_error_set(err, ENOMEM, "workers: out of memory");
  for (size_t i = 0; rc == 0 && i < m->n_workers; i++) {
    const Flightshuffle__Sched__WorkerInfo *w = m->workers[i];
    fsh_sched_worker_info *o = &out->items[out->n];
    if (!(o->uri = fsh_strdup(w->uri ? w->uri : "")))
      rc = fsh_error_set(err, ENOMEM, "workers: out of memory");
    else out->n++;
    o->id = w->worker_id;
    switch (w->state) {
    case FLIGHTSHUFFLE__SCHED__WORKER_STATE__WORKER_STATE_ALIVE:
      o->state = FSH_SCHED_WORKER_ALIVE;
      break;
    case FLIGHTSHUFFLE__SCHED__WORKER_STATE__WORKER_STATE_DEAD:
      o->state = FSH_SCHED_WORKER_DEAD;
      break;
    default:
      o->state = FSH_SCHED_WORKER_UNKNOWN;
    }
    o->last_heartbeat_age_ms = w->last_heartbeat_age_ms;
  }
  flightshuffle__sched__worker_list__free_unpacked(m, &fsh_sched_pb_allocator);
  if (rc) fsh_sched_worker_list_reset(out);
  return rc;
}

int fsh_sched_list_workers(const char *driver_uri, const char *auth_token, int64_t timeout_ms,
                           fsh_sched_worker_list *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  fsh_flight_client_options co = {.uri = driver_uri, .auth_token = auth_token,
                                  .timeout_ms = timeout_ms};
  fsh_flight_client *c = NULL;
  int rc = fsh_flight_client_open(&co, &c, err);
  if (rc) return rc;
  fsh_flight_action a = {.type = (char *)"workers"};
  fsh_flight_result_list res = {0};
  rc = fsh_flight_do_action(c, &a, &res, err);
  if (rc == 0 && res.n != 1)
    rc = fsh_error_set(err, EPROTO, "driver %s: workers: %lld results, expected 1", driver_uri,
                       (long long)res.n);
  if (rc == 0) rc = fsh_sched_worker_list_decode(res.items[0].data, res.items[0].size, out, err);
  fsh_flight_result_list_reset(&res);
  fsh_flight_client_close(c);
  return rc;
}
