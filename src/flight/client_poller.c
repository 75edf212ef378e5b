/* client_poller.c -- the process-wide socket poller of the Flight client:
 * a few threads (one per 2 online CPUs), started by the first open client
 * and joined when the last one closes, that wait in gRPC's poller for
 * every client's sockets. Every bulk stream (DoGet, DoPut, DoExchange)
 * is created on one of their completion queues; the poller hands each
 * completion to the call's thread (a condition variable), which never
 * does socket I/O itself. (The small control calls poll their own queue:
 * the hand-over doubles their round-trip time; client.c.)
 * (gRPC 1.51 refuses client calls on GRPC_CQ_NON_POLLING queues: a call
 * needs a pollset, hence this hand-over.) */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "flight/client_internal.h"

#define POLLER_MAX 8

/* While a poller waits in gRPC's poller it is, most of the time, the
 * thread that takes every socket event of the process (gRPC 1.51's epoll
 * engine: one epoll set, one waiting thread at a time), also those of the
 * calls on their own queues, which then reach their thread through a
 * hand-over. So the pollers wait in gRPC only while a bulk call is in
 * flight (poller_calls > 0, fsh_flight_poller_call_begin / _end), and
 * else sleep on poller_cv; they look again every POLLER_IDLE_MS. */
#define POLLER_IDLE_MS 50

static pthread_mutex_t poller_mu = PTHREAD_MUTEX_INITIALIZER; /* the set of pollers */
static int poller_refs;
static int poller_n;
/* what the pollers wait for (lock order: poller_mu, then poller_wait_mu) */
static pthread_mutex_t poller_wait_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t poller_cv = PTHREAD_COND_INITIALIZER;
static int poller_calls; /* bulk calls in flight */
static bool poller_stopping;
static pthread_t poller_threads[POLLER_MAX];
static grpc_completion_queue *poller_cqs[POLLER_MAX];
static atomic_uint poller_next; /* round robin for fsh_flight_call_queue */

void fsh_flight_poller_call_begin(void) {
  pthread_mutex_lock(&poller_wait_mu);
  if (poller_calls++ == 0) pthread_cond_broadcast(&poller_cv);
  pthread_mutex_unlock(&poller_wait_mu);
}

void fsh_flight_poller_call_end(void) {
  pthread_mutex_lock(&poller_wait_mu);
  poller_calls--;
  pthread_mutex_unlock(&poller_wait_mu);
}

/* Polls and hands completions over until its queue is shut down (only
 * when no client is open, so no call is left); parked while no bulk call
 * is in flight (then none of its queue's completions is pending). */
static void *poller_main(void *arg) {
  grpc_completion_queue *cq = arg;
  for (;;) {
    pthread_mutex_lock(&poller_wait_mu);
    while (poller_calls == 0 && !poller_stopping) pthread_cond_wait(&poller_cv, &poller_wait_mu);
    bool stopping = poller_stopping && poller_calls == 0;
    pthread_mutex_unlock(&poller_wait_mu);
    gpr_timespec until =
        stopping ? gpr_inf_future(GPR_CLOCK_REALTIME)
                 : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(POLLER_IDLE_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(cq, until, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    fsh_flight_tag *t = ev.tag;
    fsh_flight_rpc *r = t->rpc;
    if (t == &r->tag_recv && r->readahead) {
      fsh_flight_rpc_recv_done(r, ev.success != 0);
      continue;
    }
    /* The waiter may free r as soon as it sees done: signal under the lock. */
    pthread_mutex_lock(&r->wait_mu);
    t->done = true;
    t->ok = ev.success != 0;
    pthread_cond_broadcast(&r->wait_cv);
    pthread_mutex_unlock(&r->wait_mu);
  }
  return NULL;
}

/* How many poller threads: one per 2 online CPUs (as the server's
 * polling queues). gRPC's epoll poller lets one thread at a time wait in
 * epoll_wait and hands that role to another polling thread after each
 * batch of socket events (a futex wake and a context switch each). With
 * every client thread polling its own call's queue, perf stat of
 * bench_flight --only get4S (4 clients, 5 runs of 1 GB, both processes)
 * counted 37,194 futex calls and 32,357 context switches; with this
 * poller 4,843 and 9,000 (put4S: 14,416 -> 5,525 and 14,330 -> 9,735),
 * CPU seconds per GB (both ends) get4S 0.445 -> 0.396, get4L 0.596 ->
 * 0.490, put4S 0.35-0.38 -> 0.29-0.34 on 2 shared CPUs. 2 or 4 pollers
 * instead of 1 there: 0.46-0.55 s per GB for get4S. */
static int poller_count(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long p = cpus > 0 ? cpus / 2 : 1;
  return p < 1 ? 1 : p > POLLER_MAX ? POLLER_MAX : (int)p;
}

/* Stops and frees the first n pollers; poller_mu held. */
static void poller_stop(int n) {
  pthread_mutex_lock(&poller_wait_mu);
  poller_stopping = true;
  pthread_cond_broadcast(&poller_cv);
  pthread_mutex_unlock(&poller_wait_mu);
  for (int i = 0; i < n; i++) grpc_completion_queue_shutdown(poller_cqs[i]);
  for (int i = 0; i < n; i++) {
    pthread_join(poller_threads[i], NULL);
    grpc_completion_queue_destroy(poller_cqs[i]);
    poller_cqs[i] = NULL;
  }
  pthread_mutex_lock(&poller_wait_mu);
  poller_stopping = false;
  pthread_mutex_unlock(&poller_wait_mu);
}

int fsh_flight_poller_acquire(fsh_error *err) {
  int rc = 0;
  pthread_mutex_lock(&poller_mu);
  if (poller_refs == 0) {
    int n = poller_count(), started = 0;
    for (; started < n; started++) {
      poller_cqs[started] = grpc_completion_queue_create_for_next(NULL);
      if (!poller_cqs[started]) {
        rc = fsh_error_set(err, ENOMEM, "Flight client: cannot create the poller's completion queue");
        break;
      }
      int e = pthread_create(&poller_threads[started], NULL, poller_main, poller_cqs[started]);
      if (e) {
        grpc_completion_queue_shutdown(poller_cqs[started]);
        grpc_completion_queue_destroy(poller_cqs[started]);
        poller_cqs[started] = NULL;
        rc = fsh_error_set(err, e, "Flight client: cannot start the poller thread: %s", strerror(e));
        break;
      }
      /* Named before open returns (the tests count threads by name). */
      (void)pthread_setname_np(poller_threads[started], "fsh-client-poll");
    }
    if (rc) poller_stop(started);
    else poller_n = n;
  }
  if (rc == 0) poller_refs++;
  pthread_mutex_unlock(&poller_mu);
  return rc;
}

void fsh_flight_poller_release(void) {
  pthread_mutex_lock(&poller_mu);
  if (--poller_refs == 0) {
    poller_stop(poller_n);
    poller_n = 0;
  }
  pthread_mutex_unlock(&poller_mu);
}

grpc_completion_queue *fsh_flight_call_queue(void) {
  pthread_mutex_lock(&poller_mu);
  grpc_completion_queue *cq =
      poller_n > 0 ? poller_cqs[atomic_fetch_add(&poller_next, 1) % (unsigned)poller_n] : NULL;
  pthread_mutex_unlock(&poller_mu);
  return cq;
}
