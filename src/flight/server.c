/* server.c -- the Flight server's lifecycle: gRPC server creation, method
 * registration, the fixed pool of threads (one completion queue each) and
 * the poller threads that do their socket I/O, graceful stop (shutdown,
 * wait, cancel, drain, join, free). */
#include "flight/server_internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SRV_SERVICE "/arrow.flight.protocol.FlightService/"

static const struct {
  const char *name;
  bool reads_initial;
} srv_methods[SRV_N_METHODS] = {
    [SRV_HANDSHAKE] = {"Handshake", false},
    [SRV_LIST_FLIGHTS] = {"ListFlights", true},
    [SRV_GET_FLIGHT_INFO] = {"GetFlightInfo", true},
    [SRV_POLL_FLIGHT_INFO] = {"PollFlightInfo", true},
    [SRV_GET_SCHEMA] = {"GetSchema", true},
    [SRV_DO_GET] = {"DoGet", true},
    [SRV_DO_PUT] = {"DoPut", false},
    [SRV_DO_EXCHANGE] = {"DoExchange", false},
    [SRV_DO_ACTION] = {"DoAction", true},
    [SRV_LIST_ACTIONS] = {"ListActions", true},
};

const char *srv_method_name(srv_method m) { return srv_methods[m].name; }
bool srv_method_reads_initial(srv_method m) { return srv_methods[m].reads_initial; }

int fsh_flight_server_port(const fsh_flight_server *s) { return s->port; }

/* The loop of pool threads and pollers alike: a pool thread runs its
 * calls' events; a poller's queue only ever yields new calls (handed to
 * their pool thread) while the thread does socket I/O inside gRPC. */
static void *srv_worker_main(void *arg) {
  srv_worker *w = arg;
  bool missing = srv_rearm_missing(w);
  for (;;) {
    /* Wake up now and then to retry slots that failed to arm: soon while
     * some are missing, rarely otherwise (start() may add some). */
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                      gpr_time_from_millis(missing ? 50 : 1000, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(w->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) srv_handle_event(w->server, ev.tag, ev.success != 0);
    missing = srv_rearm_missing(w);
  }
  return NULL;
}

/* How many poller threads: one per 2 online CPUs, at least 1, at most n
 * (the pool size). gRPC's epoll poller lets one thread at a time
 * wait in epoll_wait and hands that role to another polling thread after
 * every batch of socket events (a futex wake and a context switch each);
 * with more polling threads than cores to run them those handoffs are pure
 * overhead. bench_flight on 2 shared cores, 4 polling threads vs 1, per GB
 * of 4 MiB batches: DoGet 1 stream ~3,000 -> ~35 futex calls, ~4,000 ->
 * ~2,400 context switches, CPU seconds (both ends) 0.28-0.42 -> 0.23-0.34;
 * DoPut 1 stream ~6,700 -> ~20 futex calls, 0.27-0.40 -> 0.23-0.26 s.
 * The pollers run no handlers (server_internal.h): before, the pool's
 * first queue polled and took nearly every call, and a handler blocking
 * its thread (a slow source, a sleeping DoAction) stopped every
 * connection's I/O and never saw its client cancel. */
static int srv_poller_count(int n) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long p = cpus > 0 ? cpus / 2 : 1;
  return p < 1 ? 1 : p > n ? n : (int)p;
}

/* A queue whose waiting threads do not poll (the pool's). */
static grpc_completion_queue *srv_non_polling_queue(void) {
  grpc_completion_queue_attributes attr = {GRPC_CQ_CURRENT_VERSION, GRPC_CQ_NEXT,
                                           GRPC_CQ_NON_POLLING, NULL};
  return grpc_completion_queue_create(grpc_completion_queue_factory_lookup(&attr), &attr, NULL);
}

static char *srv_dup_opt(const char *s, bool *oom) {
  if (!s) return NULL;
  char *d = fsh_strdup(s);
  if (!d) *oom = true;
  return d;
}

/* Frees what start() built, in the only order gRPC accepts: the server
 * (after its shutdown tag), then the queues (shut down and drained by their
 * threads), then the library reference. */
static void srv_free(fsh_flight_server *s) {
  if (s->server) grpc_server_destroy(s->server);
  /* `stopping` is set (or the server never started): no poller starts a
   * hand-off batch after this; wait for one that is starting it now. */
  atomic_store(&s->stopping, true);
  while (atomic_load(&s->handoffs) > 0) sched_yield();
  /* A pool thread finishing a call may still start batches on its queue
   * (a send completing just before cancel_all_calls pumps the next one),
   * and a batch on a shut-down queue aborts gRPC: the queues are shut
   * down only once every call struct is gone. The shutdown cancelled every
   * call, and the pollers (still running) free the void requests. */
  bool running = s->n_pollers > 0 && s->n_workers > 0;
  for (int i = 0; i < s->n_workers; i++) running &= s->workers[i].started;
  for (int i = 0; i < s->n_pollers; i++) running &= s->pollers[i].started;
  while (running && atomic_load(&s->live) > 0) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  for (int i = 0; i < s->n_workers; i++)
    if (s->workers[i].cq) grpc_completion_queue_shutdown(s->workers[i].cq);
  for (int i = 0; i < s->n_workers; i++) {
    srv_worker *w = &s->workers[i];
    if (w->started) {
      pthread_join(w->thread, NULL);
    } else if (w->cq) {
      /* Never polled: drain here. */
      while (grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
             GRPC_QUEUE_SHUTDOWN) {
      }
    }
  }
  /* The pollers last: the pool's queues may still need socket I/O to
   * drain; their own queues yield the void requests (freed). */
  for (int i = 0; i < s->n_pollers; i++)
    if (s->pollers[i].cq) grpc_completion_queue_shutdown(s->pollers[i].cq);
  for (int i = 0; i < s->n_pollers; i++) {
    srv_worker *p = &s->pollers[i];
    if (p->started) {
      pthread_join(p->thread, NULL);
    } else if (p->cq) {
      while (grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
             GRPC_QUEUE_SHUTDOWN) {
      }
    }
  }
  for (int i = 0; i < s->n_workers; i++)
    if (s->workers[i].cq) grpc_completion_queue_destroy(s->workers[i].cq);
  for (int i = 0; i < s->n_pollers; i++)
    if (s->pollers[i].cq) grpc_completion_queue_destroy(s->pollers[i].cq);
  fsh_free(s->workers);
  fsh_free(s->pollers);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  fsh_free(s->auth_token);
  fsh_free(s->basic_user);
  fsh_free(s->basic_password);
  fsh_free(s);
  grpc_shutdown();
}

/* Waits for the shutdown tag until abs (NULL = forever); true if it came. */
static bool srv_wait_shutdown(fsh_flight_server *s, const struct timespec *abs) {
  pthread_mutex_lock(&s->mu);
  while (!s->shutdown_done) {
    if (abs) {
      if (pthread_cond_timedwait(&s->cv, &s->mu, abs) == ETIMEDOUT) break;
    } else {
      pthread_cond_wait(&s->cv, &s->mu);
    }
  }
  bool done = s->shutdown_done;
  pthread_mutex_unlock(&s->mu);
  return done;
}

int fsh_flight_server_start(const fsh_flight_server_options *opts,
                            const fsh_flight_handlers *handlers, fsh_flight_server **out,
                            fsh_error *err) {
  if (!opts || !opts->listen || !handlers || !out)
    return fsh_error_set(err, EINVAL, "flight server: options, listen address and handlers are required");
  if ((opts->tls_cert_path != NULL) != (opts->tls_key_path != NULL))
    return fsh_error_set(err, EINVAL, "flight server: TLS needs both a certificate and a key");
  if (opts->tls_client_ca_path && !opts->tls_cert_path)
    return fsh_error_set(err, EINVAL, "flight server: mutual TLS (client CA) needs a server certificate and key");
  if ((opts->basic_user != NULL) != (opts->basic_password != NULL))
    return fsh_error_set(err, EINVAL, "flight server: basic auth needs both a user and a password");
  if (opts->basic_user && !opts->auth_token)
    return fsh_error_set(err, EINVAL, "flight server: basic auth needs an auth token to hand out");

  grpc_init();
  fsh_flight_server *s = fsh_calloc(1, sizeof *s);
  if (!s) {
    grpc_shutdown();
    return fsh_error_set(err, ENOMEM, "flight server: out of memory");
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->handlers = *handlers;
  s->shutdown_tag.kind = SRV_TAG_SHUTDOWN;
  atomic_init(&s->stopping, false);
  atomic_init(&s->live, 0);
  atomic_init(&s->handoffs, 0);
  bool oom = false;
  s->auth_token = srv_dup_opt(opts->auth_token, &oom);
  s->basic_user = srv_dup_opt(opts->basic_user, &oom);
  s->basic_password = srv_dup_opt(opts->basic_password, &oom);
  s->n_workers = opts->n_threads > 0 ? opts->n_threads : 4;
  s->workers = fsh_calloc((size_t)s->n_workers, sizeof *s->workers);
  s->n_pollers = srv_poller_count(s->n_workers);
  s->pollers = fsh_calloc((size_t)s->n_pollers, sizeof *s->pollers);
  if (oom || !s->workers || !s->pollers) {
    s->n_workers = 0;
    s->n_pollers = 0;
    srv_free(s);
    return fsh_error_set(err, ENOMEM, "flight server: out of memory");
  }

  /* Message size limits: gRPC's default receive limit is 4 MiB, far below
   * the batches Flight moves. */
  int max_recv = -1;
  if (opts->max_message_bytes > 0 && opts->max_message_bytes < INT32_MAX)
    max_recv = (int)opts->max_message_bytes;
  grpc_arg args[16];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = max_recv;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  size_t n_args =
      2 + fsh_flight_transport_args(args + 2, 14, fsh_flight_keepalive_ms(opts->keepalive_ms),
                                    false);
  grpc_channel_args cargs = {n_args, args};
  s->server = grpc_server_create(&cargs, NULL);

  for (int m = 0; m < SRV_N_METHODS; m++) {
    char path[96];
    snprintf(path, sizeof path, SRV_SERVICE "%s", srv_methods[m].name);
    s->methods[m] = grpc_server_register_method(
        s->server, path, NULL,
        srv_methods[m].reads_initial ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                                     : GRPC_SRM_PAYLOAD_NONE,
        0);
  }
  /* The pollers' queues first (gRPC offers a new call to the queues in
   * this order, after the one whose poller accepted the connection). */
  for (int i = 0; i < s->n_pollers; i++) {
    s->pollers[i].server = s;
    s->pollers[i].poller = true;
    s->pollers[i].index = i;
    s->pollers[i].cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->pollers[i].cq, NULL);
  }
  for (int i = 0; i < s->n_workers; i++) {
    s->workers[i].server = s;
    s->workers[i].index = i;
    s->workers[i].cq = srv_non_polling_queue();
    grpc_server_register_completion_queue(s->server, s->workers[i].cq, NULL);
  }
  /* The threads run before the server starts: a failure here leaves a
   * server without listeners, which needs no shutdown. */
  for (int i = 0; i < s->n_pollers; i++) {
    if (pthread_create(&s->pollers[i].thread, NULL, srv_worker_main, &s->pollers[i]) != 0) {
      srv_free(s);
      return fsh_error_set(err, EAGAIN, "flight server: cannot start poller thread %d", i);
    }
    s->pollers[i].started = true;
  }
  for (int i = 0; i < s->n_workers; i++) {
    if (pthread_create(&s->workers[i].thread, NULL, srv_worker_main, &s->workers[i]) != 0) {
      srv_free(s);
      return fsh_error_set(err, EAGAIN, "flight server: cannot start pool thread %d", i);
    }
    s->workers[i].started = true;
  }

  grpc_server_credentials *creds = NULL;
  int rc = srv_auth_credentials(opts, &creds, err);
  if (rc != 0) {
    /* Never started: grpc_server_destroy needs no shutdown. */
    srv_free(s);
    return rc;
  }
  s->port = grpc_server_add_http2_port(s->server, opts->listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port == 0) {
    srv_free(s);
    return fsh_error_set(err, EADDRINUSE,
                         "flight server: cannot listen on %s (address in use or invalid%s)",
                         opts->listen, opts->tls_cert_path ? ", or unusable TLS certificate/key" : "");
  }
  grpc_server_start(s->server);

  /* Arm requests on the pollers' queues only: per method as many as the
   * pool has threads, spread over the pollers, so that a burst of new
   * calls finds them armed (each is re-armed as its call arrives). */
  for (int k = 0; k < s->n_workers; k++)
    for (int m = 0; m < SRV_N_METHODS; m++) srv_arm(&s->pollers[k % s->n_pollers], (srv_method)m);
  *out = s;
  return 0;
}

void fsh_flight_server_stop(fsh_flight_server *s, int64_t deadline_ms) {
  if (!s) return;
  atomic_store(&s->stopping, true);
  grpc_server_shutdown_and_notify(s->server, s->workers[0].cq, &s->shutdown_tag);
  struct timespec abs;
  clock_gettime(CLOCK_REALTIME, &abs);
  if (deadline_ms < 0) deadline_ms = 0;
  abs.tv_sec += (time_t)(deadline_ms / 1000);
  abs.tv_nsec += (long)(deadline_ms % 1000) * 1000000L;
  if (abs.tv_nsec >= 1000000000L) {
    abs.tv_sec++;
    abs.tv_nsec -= 1000000000L;
  }
  if (!srv_wait_shutdown(s, &abs)) {
    grpc_server_cancel_all_calls(s->server);
    (void)srv_wait_shutdown(s, NULL);
  }
  srv_free(s);
}
