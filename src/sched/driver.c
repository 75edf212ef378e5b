/* driver.c -- the driver: a Flight server that keeps the cluster's
 * membership (DoActions "register", "heartbeat", "workers"; contracts in
 * sched.h) and a checker thread that declares silent workers dead. The
 * handlers run on Flight pool threads and only take the driver's mutex. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/sched_internal.h"

static int64_t interval_ms(const fsh_sched_driver *d) {
  int64_t i = d->timeout_ms / 3;
  return i > 0 ? i : 1;
}

/* Index of the worker with that id, or -1. mu held. */
static int64_t find_id(const fsh_sched_driver *d, uint64_t id) {
  for (int64_t i = 0; i < d->n; i++)
    if (d->workers[i].id == id) return i;
  return -1;
}

static void remove_at(fsh_sched_driver *d, int64_t i) {
  fsh_free(d->workers[i].uri);
  memmove(&d->workers[i], &d->workers[i + 1], (size_t)(d->n - i - 1) * sizeof *d->workers);
  d->n--;
}

/* ---- actions ----------------------------------------------------------- */

static int action_register(fsh_sched_driver *d, const fsh_flight_action *a,
                           fsh_flight_result_list *out, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__Register *m = flightshuffle__sched__register__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: register: malformed Register body "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  fsh_flight_location loc;
  int rc = 0;
  if (!m->uri || !m->uri[0])
    rc = fsh_error_set(err, EINVAL, "driver %s: register: no worker uri", d->uri);
  else if (fsh_flight_location_parse(m->uri, &loc, err) != 0)
    rc = fsh_error_prefix(err, EINVAL, "driver %s: register: ", d->uri);
  char *uri = rc == 0 ? fsh_strdup(m->uri) : NULL;
  flightshuffle__sched__register__free_unpacked(m, &fsh_sched_pb_allocator);
  if (rc) return rc;
  if (!uri) return fsh_error_set(err, ENOMEM, "driver %s: register: out of memory", d->uri);

  pthread_mutex_lock(&d->mu);
  bool replaced = false;
  uint64_t old_id = 0;
  for (int64_t i = 0; i < d->n; i++)
    if (strcmp(d->workers[i].uri, uri) == 0) {
      replaced = true;
      old_id = d->workers[i].id;
      if (!d->workers[i].lost_handled)
        fsh_sched_jobs_worker_lost(d, old_id, uri, "the worker restarted (registered again)");
      remove_at(d, i);
      break;
    }
  if (d->n == d->cap) {
    int64_t cap = d->cap ? d->cap * 2 : 8;
    driver_worker *w = fsh_malloc((size_t)cap * sizeof *w);
    if (!w) {
      pthread_mutex_unlock(&d->mu);
      fsh_free(uri);
      return fsh_error_set(err, ENOMEM, "driver %s: register: out of memory", d->uri);
    }
    if (d->n) memcpy(w, d->workers, (size_t)d->n * sizeof *w);
    fsh_free(d->workers);
    d->workers = w;
    d->cap = cap;
  }
  uint64_t id = d->next_id++;
  d->workers[d->n++] = (driver_worker){.id = id, .uri = uri, .state = FSH_SCHED_WORKER_ALIVE,
                                       .last_ms = fsh_sched_now_ms()};
  pthread_mutex_unlock(&d->mu);
  if (d->log) {
    if (replaced)
      fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s registered (restart of "
              "worker %" PRIu64 ")\n", id, uri, old_id);
    else
      fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s registered\n", id, uri);
  }

  Flightshuffle__Sched__RegisterReply r = FLIGHTSHUFFLE__SCHED__REGISTER_REPLY__INIT;
  r.worker_id = id;
  r.heartbeat_interval_ms = interval_ms(d);
  r.replaced = replaced;
  return fsh_sched_push_message(out, &r.base, "driver: register", err);
}

static int action_heartbeat(fsh_sched_driver *d, const fsh_flight_action *a,
                            fsh_flight_result_list *out, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__Heartbeat *m = flightshuffle__sched__heartbeat__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: heartbeat: malformed Heartbeat body "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  int rc = 0;
  uint64_t id = m->worker_id;
  if (id == 0) {
    rc = fsh_error_set(err, EINVAL, "driver %s: heartbeat: no worker id", d->uri);
  } else {
    pthread_mutex_lock(&d->mu);
    int64_t i = find_id(d, id);
    if (i < 0 || (m->uri && m->uri[0] && strcmp(m->uri, d->workers[i].uri) != 0))
      rc = fsh_error_set(err, ENOENT, "driver %s: heartbeat: unknown worker %" PRIu64
                         " (%s): register again", d->uri, id, m->uri ? m->uri : "");
    else if (d->workers[i].state == FSH_SCHED_WORKER_DEAD)
      rc = fsh_error_set(err, ENOENT, "driver %s: heartbeat: worker %" PRIu64 " (%s) was "
                         "declared dead: register again", d->uri, id, d->workers[i].uri);
    else {
      d->workers[i].last_ms = fsh_sched_now_ms();
      if (d->workers[i].suspect_ms) { /* it answers again: tasks may go to it */
        d->workers[i].suspect_ms = 0;
        d->kick = true;
        pthread_cond_broadcast(&d->sched_cv);
      }
    }
    pthread_mutex_unlock(&d->mu);
  }
  flightshuffle__sched__heartbeat__free_unpacked(m, &fsh_sched_pb_allocator);
  if (rc) return rc;
  Flightshuffle__Sched__HeartbeatReply r = FLIGHTSHUFFLE__SCHED__HEARTBEAT_REPLY__INIT;
  r.heartbeat_interval_ms = interval_ms(d);
  return fsh_sched_push_message(out, &r.base, "driver: heartbeat", err);
}

/* "deregister": the worker is dead now (a clean shutdown). */
static int action_deregister(fsh_sched_driver *d, const fsh_flight_action *a,
                             fsh_flight_result_list *out, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__Heartbeat *m = flightshuffle__sched__heartbeat__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: deregister: malformed Heartbeat body "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  int rc = 0;
  uint64_t id = m->worker_id;
  if (id == 0) {
    rc = fsh_error_set(err, EINVAL, "driver %s: deregister: no worker id", d->uri);
  } else {
    pthread_mutex_lock(&d->mu);
    int64_t i = find_id(d, id);
    if (i < 0 || (m->uri && m->uri[0] && strcmp(m->uri, d->workers[i].uri) != 0) ||
        d->workers[i].state != FSH_SCHED_WORKER_ALIVE) {
      rc = fsh_error_set(err, ENOENT, "driver %s: deregister: no alive worker %" PRIu64 " (%s)",
                         d->uri, id, m->uri ? m->uri : "");
    } else {
      fsh_sched_worker_dead(d, &d->workers[i], "deregistered", "it deregistered (shutting down)");
    }
    pthread_mutex_unlock(&d->mu);
  }
  flightshuffle__sched__heartbeat__free_unpacked(m, &fsh_sched_pb_allocator);
  if (rc) return rc;
  Flightshuffle__Sched__HeartbeatReply r = FLIGHTSHUFFLE__SCHED__HEARTBEAT_REPLY__INIT;
  r.heartbeat_interval_ms = interval_ms(d);
  return fsh_sched_push_message(out, &r.base, "driver: deregister", err);
}

int fsh_sched_driver_workers(fsh_sched_driver *d, fsh_sched_worker_list *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  out->heartbeat_timeout_ms = d->timeout_ms;
  int rc = 0;
  pthread_mutex_lock(&d->mu);
  int64_t now = fsh_sched_now_ms();
  if (d->n && !(out->items = fsh_calloc((size_t)d->n, sizeof *out->items)))
    rc = fsh_error_set(err, ENOMEM, "driver: workers: out of memory");
  for (int64_t i = 0; rc == 0 && i < d->n; i++) {
    fsh_sched_worker_info *o = &out->items[i];
    if (!(o->uri = fsh_strdup(d->workers[i].uri))) {
      rc = fsh_error_set(err, ENOMEM, "driver: workers: out of memory");
      break;
    }
    out->n++;
    o->id = d->workers[i].id;
    o->state = d->workers[i].state;
    o->last_heartbeat_age_ms = now - d->workers[i].last_ms;
  }
  pthread_mutex_unlock(&d->mu);
  if (rc) fsh_sched_worker_list_reset(out);
  return rc;
}

static int action_workers(fsh_sched_driver *d, fsh_flight_result_list *out, fsh_error *err) {
  fsh_sched_worker_list l;
  FSH_RETURN_NOT_OK(fsh_sched_driver_workers(d, &l, err));
  int rc = 0;
  Flightshuffle__Sched__WorkerInfo *infos = l.n ? fsh_calloc((size_t)l.n, sizeof *infos) : NULL;
  Flightshuffle__Sched__WorkerInfo **ptrs = l.n ? fsh_calloc((size_t)l.n, sizeof *ptrs) : NULL;
  if (l.n && (!infos || !ptrs)) rc = fsh_error_set(err, ENOMEM, "driver: workers: out of memory");
  for (int64_t i = 0; rc == 0 && i < l.n; i++) {
    Flightshuffle__Sched__WorkerInfo wi = FLIGHTSHUFFLE__SCHED__WORKER_INFO__INIT;
    wi.worker_id = l.items[i].id;
    wi.uri = l.items[i].uri;
    wi.state = l.items[i].state == FSH_SCHED_WORKER_ALIVE
                   ? FLIGHTSHUFFLE__SCHED__WORKER_STATE__WORKER_STATE_ALIVE
                   : FLIGHTSHUFFLE__SCHED__WORKER_STATE__WORKER_STATE_DEAD;
    wi.last_heartbeat_age_ms = l.items[i].last_heartbeat_age_ms;
    infos[i] = wi;
    ptrs[i] = &infos[i];
  }
  if (rc == 0) {
    Flightshuffle__Sched__WorkerList m = FLIGHTSHUFFLE__SCHED__WORKER_LIST__INIT;
    m.n_workers = (size_t)l.n;
    m.workers = ptrs;
    m.heartbeat_timeout_ms = d->timeout_ms;
    rc = fsh_sched_push_message(out, &m.base, "driver: workers", err);
  }
  fsh_free(infos);
  fsh_free(ptrs);
  fsh_sched_worker_list_reset(&l);
  return rc;
}

static int do_action(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                     fsh_flight_result_list *out, fsh_error *err) {
  (void)call;
  fsh_sched_driver *d = ctx;
  if (strcmp(a->type, "register") == 0) return action_register(d, a, out, err);
  if (strcmp(a->type, "heartbeat") == 0) return action_heartbeat(d, a, out, err);
  if (strcmp(a->type, "deregister") == 0) return action_deregister(d, a, out, err);
  if (strcmp(a->type, "workers") == 0) return action_workers(d, out, err);
  if (strcmp(a->type, "submit") == 0) return fsh_sched_action_submit(d, a, out, err);
  if (strcmp(a->type, "task-done") == 0) return fsh_sched_action_task_done(d, a, out, err);
  if (strcmp(a->type, "job-status") == 0) return fsh_sched_action_job_status(d, a, out, err);
  if (strcmp(a->type, "map-outputs") == 0) return fsh_sched_action_map_outputs(d, a, out, err);
  return fsh_error_set(err, ENOTSUP, "driver %s: unknown action '%s' (known: register, "
                       "heartbeat, deregister, workers, submit, task-done, job-status, map-outputs)", d->uri, a->type);
}

static int list_actions(void *ctx, fsh_flight_call *call, fsh_flight_action_type_list *out,
                        fsh_error *err) {
  (void)call, (void)ctx;
  if (fsh_flight_action_type_list_push(out, "register",
                                       "a worker joins (body: Register; answers RegisterReply)") ||
      fsh_flight_action_type_list_push(out, "heartbeat",
                                       "a worker is alive (body: Heartbeat; NOT_FOUND: register "
                                       "again)") ||
      fsh_flight_action_type_list_push(out, "deregister",
                                       "a worker shuts down (body: Heartbeat; it is dead at once)") ||
      fsh_flight_action_type_list_push(out, "workers", "the membership (answers WorkerList)") ||
      fsh_flight_action_type_list_push(out, "submit", "run a job (body: JobPlan; answers "
                                       "SubmitReply)") ||
      fsh_flight_action_type_list_push(out, "task-done", "a worker's task ended (body: "
                                       "TaskDone)") ||
      fsh_flight_action_type_list_push(out, "job-status", "a job's progress or summary (body: "
                                       "JobStatusRequest; answers JobStatus)") ||
      fsh_flight_action_type_list_push(out, "map-outputs", "an incremental reduce's new inputs "
                                       "(body: MapOutputsRequest; answers MapOutputsReply)"))
    return fsh_error_set(err, ENOMEM, "driver: out of memory");
  return 0;
}

/* ---- the checker ------------------------------------------------------- */

static void *checker_main(void *arg) {
  fsh_sched_driver *d = arg;
  int64_t period = d->timeout_ms / 10;
  if (period < 5) period = 5;
  if (period > 500) period = 500;
  pthread_mutex_lock(&d->mu);
  while (!d->stop) {
    int64_t now = fsh_sched_now_ms();
    for (int64_t i = 0; i < d->n; i++) {
      driver_worker *w = &d->workers[i];
      if (w->state == FSH_SCHED_WORKER_ALIVE && now - w->last_ms > d->timeout_ms) {
        char why[96];
        snprintf(why, sizeof why, "no heartbeat for %" PRId64 " ms", now - w->last_ms);
        fsh_sched_worker_dead(d, w, "dead", why);
      }
    }
    fsh_sched_wait_ms(&d->cv, &d->mu, &d->stop, period);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

/* grpc://host:port for the listen address; a wildcard host becomes this
 * machine's name. */
static void make_uri(char *out, size_t size, const char *listen, int port) {
  char host[256] = "127.0.0.1";
  const char *colon = strrchr(listen, ':');
  size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
  if (n > 0 && n < sizeof host) {
    memcpy(host, listen, n);
    host[n] = '\0';
  }
  if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0 || n == 0) {
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';
  }
  snprintf(out, size, "grpc://%s:%d", host, port);
}

int fsh_sched_driver_start(const fsh_sched_driver_options *opts, fsh_sched_driver **out,
                           fsh_error *err) {
  *out = NULL;
  if (!opts || !opts->listen)
    return fsh_error_set(err, EINVAL, "driver: a listen address is required");
  if (opts->heartbeat_timeout_ms < 0)
    return fsh_error_set(err, EINVAL, "driver: heartbeat timeout %lld ms < 0",
                         (long long)opts->heartbeat_timeout_ms);
  if (opts->call_timeout_ms < 0)
    return fsh_error_set(err, EINVAL, "driver: call timeout %lld ms < 0",
                         (long long)opts->call_timeout_ms);
  fsh_sched_driver *d = fsh_calloc(1, sizeof *d);
  if (!d) return fsh_error_set(err, ENOMEM, "driver: out of memory");
  d->timeout_ms = opts->heartbeat_timeout_ms ? opts->heartbeat_timeout_ms : 10000;
  d->call_timeout_ms = opts->call_timeout_ms ? opts->call_timeout_ms : 5000;
  d->keep_jobs = opts->keep_jobs > 0 ? opts->keep_jobs : 64;
  d->log = opts->log;
  d->next_id = 1;
  d->next_job_id = 1;
  pthread_mutex_init(&d->mu, NULL);
  if (fsh_sched_cond_init(&d->cv) != 0) {
    pthread_mutex_destroy(&d->mu);
    fsh_free(d);
    return fsh_error_set(err, ENOMEM, "driver: cannot create a condition variable");
  }
  if (fsh_sched_cond_init(&d->job_cv) != 0 || fsh_sched_cond_init(&d->sched_cv) != 0 ||
      (opts->auth_token && !(d->auth_token = fsh_strdup(opts->auth_token)))) {
    /* (a cond that was initialised is destroyed in stop; keep it simple:
     * both are initialised before anything can fail here) */
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    fsh_free(d->auth_token);
    fsh_free(d);
    return fsh_error_set(err, ENOMEM, "driver: cannot create a condition variable");
  }
  fsh_flight_handlers h = {.ctx = d, .do_action = do_action, .list_actions = list_actions};
  fsh_flight_server_options fo = {.listen = opts->listen, .n_threads = opts->n_threads,
                                  .auth_token = opts->auth_token};
  int rc = fsh_flight_server_start(&fo, &h, &d->server, err);
  if (rc == 0) {
    make_uri(d->uri, sizeof d->uri, opts->listen, fsh_flight_server_port(d->server));
    if (pthread_create(&d->checker, NULL, checker_main, d) != 0)
      rc = fsh_error_set(err, EAGAIN, "driver: cannot start the checker thread");
    else
      d->checker_started = true;
    if (rc == 0 && pthread_create(&d->scheduler, NULL, fsh_sched_scheduler_main, d) != 0)
      rc = fsh_error_set(err, EAGAIN, "driver: cannot start the scheduler thread");
    else if (rc == 0)
      d->scheduler_started = true;
  }
  if (rc) {
    fsh_sched_driver_stop(d, 0);
    return rc;
  }
  *out = d;
  return 0;
}

void fsh_sched_worker_dead(fsh_sched_driver *d, driver_worker *w, const char *how,
                           const char *why) {
  w->state = FSH_SCHED_WORKER_DEAD;
  w->lost_handled = true;
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s %s (%s)\n", w->id, w->uri, how,
            why);
  fsh_sched_jobs_worker_lost(d, w->id, w->uri, why);
}

const char *fsh_sched_driver_uri(const fsh_sched_driver *d) { return d->uri; }

int fsh_sched_driver_declare_dead(fsh_sched_driver *d, const char *uri, const char *why,
                                  fsh_error *err) {
  pthread_mutex_lock(&d->mu);
  int64_t i = 0;
  while (i < d->n && !(d->workers[i].state == FSH_SCHED_WORKER_ALIVE &&
                       strcmp(d->workers[i].uri, uri) == 0))
    i++;
  if (i == d->n) {
    pthread_mutex_unlock(&d->mu);
    return fsh_error_set(err, ENOENT, "driver %s: no alive worker %s", d->uri, uri);
  }
  fsh_sched_worker_dead(d, &d->workers[i], "declared dead", why);
  pthread_mutex_unlock(&d->mu);
  return 0;
}

void fsh_sched_driver_stop(fsh_sched_driver *d, int64_t deadline_ms) {
  if (!d) return;
  if (d->server) fsh_flight_server_stop(d->server, deadline_ms);
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  pthread_cond_broadcast(&d->cv);
  pthread_cond_broadcast(&d->sched_cv);
  pthread_cond_broadcast(&d->job_cv);
  pthread_mutex_unlock(&d->mu);
  if (d->checker_started) pthread_join(d->checker, NULL);
  if (d->scheduler_started) pthread_join(d->scheduler, NULL);
  fsh_sched_jobs_free(d);
  for (int64_t i = 0; i < d->n; i++) fsh_free(d->workers[i].uri);
  fsh_free(d->workers);
  fsh_free(d->auth_token);
  pthread_cond_destroy(&d->job_cv);
  pthread_cond_destroy(&d->sched_cv);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  fsh_free(d);
}
