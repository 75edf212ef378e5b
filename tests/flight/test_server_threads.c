/* test_server_threads.c -- how the Flight server spreads calls over its
 * pool: successive calls run on every pool thread in turn, not all on the
 * one whose queue gRPC offers new calls to first (before, 16 DoGets in a
 * row all ran on one thread); and a handler blocking its pool thread
 * neither stops the server's socket I/O nor misses its client's cancel
 * (the poller threads run no handlers): a stall-timed-out DoGet's source
 * sees the cancel while other clients' calls complete. */
#include <time.h>
#include <unistd.h>

#include "flight/client_fixture.h"

/* Reads the "all" flight (3 batches) through c. */
static bool read_all_flight(fsh_flight_client *c) {
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"all", 3};
  fsh_flight_reader *r = NULL;
  if (fsh_flight_do_get(c, &t, &r, &err)) return false;
  int n = 0;
  bool ok = true;
  for (;;) {
    fsh_batch *b = NULL;
    if (fsh_flight_reader_next(r, &b, &err)) {
      ok = false;
      break;
    }
    if (!b) break;
    fsh_batch_unref(b);
    n++;
  }
  fsh_flight_reader_free(r);
  return ok && n == 3;
}

/* How many distinct threads fx->get_threads holds. */
static int distinct_get_threads(fx_server *fx) {
  pthread_mutex_lock(&fx->mu);
  int distinct = 0;
  for (int i = 0; i < fx->n_get_threads; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = pthread_equal(fx->get_threads[i], fx->get_threads[j]);
    distinct += !seen;
  }
  pthread_mutex_unlock(&fx->mu);
  return distinct;
}

static void test_calls_spread_over_the_pool(void) {
  fsh_flight_server_options o = {.listen = "127.0.0.1:0", .n_threads = 4};
  fx_server *fx = fx_start(&o);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  for (int i = 0; i < 16; i++) CHECK(read_all_flight(c));
  CHECK_EQ_INT(fx->n_get_threads, 16);
  CHECK_EQ_INT(distinct_get_threads(fx), 4);
  /* none of them the calling thread (handlers run on the pool) */
  for (int i = 0; i < fx->n_get_threads; i++) CHECK(!pthread_equal(fx->get_threads[i], pthread_self()));
  fsh_flight_client_close(c);
  fx_stop(fx);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct stall_arg {
  const char *uri;
  int rc;
} stall_arg;

/* A DoGet of "stall" under a 300 ms stall timeout: 2 batches, then the
 * source blocks its pool thread (up to FX_STALL_MS, polling the cancel). */
static void *stall_reader(void *p) {
  stall_arg *a = p;
  fsh_flight_client_options o = {.uri = a->uri, .stall_timeout_ms = 300};
  fsh_flight_client *c = NULL;
  fsh_error err = {{0}};
  a->rc = fsh_flight_client_open(&o, &c, &err);
  fsh_bytes t = {(uint8_t *)"stall", 5};
  fsh_flight_reader *r = NULL;
  if (a->rc == 0) a->rc = fsh_flight_do_get(c, &t, &r, &err);
  while (a->rc == 0) {
    fsh_batch *b = NULL;
    a->rc = fsh_flight_reader_next(r, &b, &err);
    if (a->rc == 0 && !b) break;
    fsh_batch_unref(b);
  }
  fsh_flight_reader_free(r);
  fsh_flight_client_close(c);
  return NULL;
}

static void test_blocked_handler(void) {
  fsh_flight_server_options o = {.listen = "127.0.0.1:0", .n_threads = 4};
  fx_server *fx = fx_start(&o);
  stall_arg a = {.uri = fx->uri};
  pthread_t th;
  double t0 = now_s();
  CHECK_EQ_INT(pthread_create(&th, NULL, stall_reader, &a), 0);
  /* while the stall source blocks its thread, other calls arrive (a
   * poller takes them) and run (successive calls are bound to the pool
   * threads round robin: the next two are not the stall's) */
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  for (int i = 0; i < 2; i++) CHECK(read_all_flight(c));
  pthread_join(th, NULL);
  CHECK_EQ_INT(a.rc, ETIMEDOUT);
  /* the blocked source saw its client's cancel, long before its pause
   * would have ended */
  for (int i = 0; i < 300 && atomic_load(&fx->stalls_done) < 1; i++) usleep(10000);
  CHECK_EQ_INT(atomic_load(&fx->stalls_done), 1);
  CHECK_EQ_INT(atomic_load(&fx->stalls_cancelled), 1);
  CHECK_MSG(now_s() - t0 < FX_STALL_MS / 1000.0, "the stall ended after %.2f s", now_s() - t0);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

FSH_TEST_MAIN(TEST(test_calls_spread_over_the_pool), TEST(test_blocked_handler))
