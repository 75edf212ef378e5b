/* test_client_stall.c -- the client's per-message stall timeout
 * (fsh_flight_client_options.stall_timeout_ms) against our own server
 * stalling mid-stream (client_fixture.h "stall": 2 batches, then a pause
 * of FX_STALL_MS before the end; a DoPut to "stall" pauses before
 * reading): the reader / writer fails with ETIMEDOUT and a message naming
 * the call after about the stall timeout, not the pause; the server sees
 * the call cancelled; off (the default), the same streams complete; a
 * stream that keeps moving never hits it; a unary call (DoAction "stall")
 * times out the same way. */
#include <time.h>
#include <unistd.h>

#include "flight/client_fixture.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static fsh_flight_client *stall_client(const char *uri, int64_t stall_ms) {
  fsh_flight_client_options o = {.uri = uri, .stall_timeout_ms = stall_ms};
  fsh_flight_client *c = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_flight_client_open(&o, &c, &err));
  return c;
}

/* Waits (up to 8 s) for the server's stall to end; its count. */
static int stalls_done(fx_server *fx, int want) {
  for (int i = 0; i < 800 && atomic_load(&fx->stalls_done) < want; i++) usleep(10000);
  return atomic_load(&fx->stalls_done);
}

/* Reads a DoGet to its end or first error; batches counted in *n. */
static int read_all(fsh_flight_client *c, const char *ticket, int64_t *n, fsh_error *err) {
  fsh_bytes t = {(uint8_t *)ticket, (int64_t)strlen(ticket)};
  fsh_flight_reader *r = NULL;
  *n = 0;
  int rc = fsh_flight_do_get(c, &t, &r, err);
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = fsh_flight_reader_next(r, &b, err);
    if (rc == 0 && !b) break;
    fsh_batch_unref(b);
    if (rc == 0) ++*n;
  }
  fsh_flight_reader_free(r);
  return rc;
}

static void test_reader_stall(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = stall_client(fx->uri, 300);
  fsh_error err = {{0}};
  int64_t n = 0;
  double t0 = now_s();
  CHECK_EQ_INT(read_all(c, "stall", &n, &err), ETIMEDOUT);
  double dt = now_s() - t0;
  CHECK_EQ_INT(n, 2); /* what came before the stall */
  CHECK_MSG(dt >= 0.3 && dt < 0.3 + FX_STALL_MS / 2000.0, "failed after %.2f s", dt);
  char want[128];
  snprintf(want, sizeof want, "DoGet %s: DEADLINE_EXCEEDED: no message within 300 ms", fx->uri);
  CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);
  /* the server saw the call cancelled (before its pause ended) */
  CHECK_EQ_INT(stalls_done(fx, 1), 1);
  CHECK_EQ_INT(atomic_load(&fx->stalls_cancelled), 1);
  /* the channel still works */
  CHECK_OK(read_all(c, "all", &n, &err));
  CHECK_EQ_INT(n, 3);
  fsh_flight_client_close(c);

  /* off (the default): the stream waits out the pause and ends normally */
  c = stall_client(fx->uri, 0);
  t0 = now_s();
  CHECK_OK(read_all(c, "stall", &n, &err));
  CHECK_EQ_INT(n, 2);
  CHECK(now_s() - t0 >= FX_STALL_MS / 1000.0 - 0.05);
  CHECK_EQ_INT(stalls_done(fx, 2), 2);
  CHECK_EQ_INT(atomic_load(&fx->stalls_cancelled), 1);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

/* A stream that keeps moving for longer than the stall timeout: 60
 * batches of 1 MiB read 20 ms apart (>= 1.2 s) under a 500 ms stall
 * timeout, then abandoned by the reader. */
static void test_moving_stream_never_stalls(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = stall_client(fx->uri, 500);
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"endless", 7};
  fsh_flight_reader *r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  for (int i = 0; r && i < 60; i++) {
    fsh_batch *b = NULL;
    CHECK_OK(fsh_flight_reader_next(r, &b, &err));
    CHECK(b != NULL);
    fsh_batch_unref(b);
    usleep(20000);
  }
  fsh_flight_reader_free(r);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

/* A DoPut whose server does not read on: the writer's send of a batch
 * larger than the stream's flow-control window cannot complete (the
 * write itself, not only the close: the server reads no message ahead of
 * a handler that has not opened its sink); with the stall timeout it
 * fails after ~300 ms naming the call. */
static void test_writer_stall(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = stall_client(fx->uri, 300);
  fsh_error err = {{0}};
  fsh_batch *big = fx_big_batch(48 << 20); /* > the 16 MiB window + socket buffers */
  const char *path[] = {"stall"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 1));
  fsh_flight_writer *w = NULL;
  double t0 = now_s();
  int rc = fsh_flight_do_put(c, &d, big->schema, NULL, &w, &err);
  CHECK_OK(rc);
  if (rc == 0) rc = fsh_flight_writer_write(w, big, &err);
  int write_rc = rc; /* the write itself stalls, not only the close */
  if (rc == 0) rc = fsh_flight_writer_close(w, NULL, &err);
  else fsh_flight_writer_cancel(w);
  double dt = now_s() - t0;
  CHECK_EQ_INT(write_rc, ETIMEDOUT);
  CHECK_EQ_INT(rc, ETIMEDOUT);
  CHECK_MSG(dt >= 0.3 && dt < 0.3 + FX_STALL_MS / 2000.0, "failed after %.2f s", dt);
  char want[128];
  snprintf(want, sizeof want, "DoPut %s: DEADLINE_EXCEEDED: no message within 300 ms", fx->uri);
  CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);
  CHECK_EQ_INT(stalls_done(fx, 1), 1);
  CHECK_EQ_INT(atomic_load(&fx->stalls_cancelled), 1);
  fsh_flight_client_close(c);
  fsh_flight_descriptor_reset(&d);
  fsh_batch_unref(big);
  fx_stop(fx);
}

/* A unary call (DoAction, on the calling thread's own queue, not the
 * poller's) whose answer does not come: the same timeout and message;
 * off, the answer comes after the pause. */
static void test_unary_stall(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = stall_client(fx->uri, 300);
  fsh_error err = {{0}};
  fsh_flight_action a = {.type = (char *)"stall"};
  fsh_flight_result_list res = {0};
  double t0 = now_s();
  CHECK_EQ_INT(fsh_flight_do_action(c, &a, &res, &err), ETIMEDOUT);
  double dt = now_s() - t0;
  CHECK_MSG(dt >= 0.3 && dt < 0.3 + FX_STALL_MS / 2000.0, "failed after %.2f s", dt);
  char want[128];
  snprintf(want, sizeof want, "DoAction %s: DEADLINE_EXCEEDED: no message within 300 ms",
           fx->uri);
  CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);
  /* the server's handler sees the cancel while it sleeps: its pool thread
   * is blocked, but the server's poller threads run no handlers and take
   * the client's RST_STREAM (before, when the handler ran on the one
   * polling thread, nothing read it until the pause was over) */
  CHECK_EQ_INT(stalls_done(fx, 1), 1);
  CHECK_EQ_INT(atomic_load(&fx->stalls_cancelled), 1);
  fsh_flight_client_close(c);
  c = stall_client(fx->uri, 0);
  CHECK_OK(fsh_flight_do_action(c, &a, &res, &err));
  CHECK(res.n == 1 && res.items[0].size == 4 && memcmp(res.items[0].data, "done", 4) == 0);
  fsh_flight_result_list_reset(&res);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

FSH_TEST_MAIN(TEST(test_reader_stall), TEST(test_moving_stream_never_stalls),
              TEST(test_writer_stall), TEST(test_unary_stall))
