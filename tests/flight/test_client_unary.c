/* test_client_unary.c -- the Flight client's calls with one request
 * (DoAction, GetFlightInfo, ListActions: client.c's unary batch) against a
 * scripted server written directly on gRPC's C core, not our Flight
 * server: it answers exactly the sequence a test asks for -- 0, 1 or many
 * results, a status after 0 or after 1 result, with or without initial
 * metadata before it (a trailers-only answer), a result of more than
 * 4 MiB, a message that is not a Result, 0 or 2 answers to a unary
 * method, an answer later than the client's deadline -- and counts the
 * calls it saw cancelled. Expected results are generated here. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include <flightshuffle/flight.h>

#include "flight/wire.h"
#include "test.h"

/* ---- the scripted server ------------------------------------------------------ */

/* DoAction "results", body "<k> [<status> [<early>]]": k Results "r0".."r<k-1>",
 * then the status (default OK; details "after <k> results"); early = 1
 * sends the initial metadata before the status even with k = 0 (else a
 * call without results is answered trailers-only). "echo": one Result,
 * the body. "sleep", body "<ms>": no result after ms (cut short when the
 * client cancels). "garbage": one message that is not a Result.
 * GetFlightInfo: info_answers FlightInfos. ListActions: n_action_types. */
typedef struct raw_server {
  grpc_server *srv;
  grpc_completion_queue *cq;
  pthread_t thread;
  char uri[64];
  atomic_int info_answers;
  atomic_int n_action_types;
  atomic_int calls;     /* calls handled */
  atomic_int cancelled; /* of which the client cancelled */
  atomic_bool stop;
  /* the call being handled (server thread only) */
  grpc_call *call;
  bool sent_initial, close_done;
  int close_cancelled;
  bool shutdown_seen;
} raw_server;

static char tag_new, tag_op, tag_close, tag_shutdown;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Takes one event (the call's close and the shutdown are noted); true if
 * it was `want` and succeeded. With timeout_ms >= 0 gives up after it
 * (returns false, *timed_out set). */
static bool rs_event(raw_server *s, void *want, int timeout_ms, bool *timed_out) {
  gpr_timespec until = timeout_ms < 0 ? gpr_inf_future(GPR_CLOCK_REALTIME)
                                      : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                     gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      if (timed_out) *timed_out = true;
      return false;
    }
    if (ev.type != GRPC_OP_COMPLETE) abort();
    if (ev.tag == &tag_close) s->close_done = true;
    if (ev.tag == &tag_shutdown) s->shutdown_seen = true;
    if (ev.tag == want) return ev.success != 0;
  }
}

/* One batch of the current call, waited for. */
static bool rs_batch(raw_server *s, grpc_op *ops, size_t n) {
  if (grpc_call_start_batch(s->call, ops, n, &tag_op, NULL) != GRPC_CALL_OK) abort();
  return rs_event(s, &tag_op, -1, NULL);
}

/* Sends one message (bb taken), with the initial metadata if not yet. */
static bool rs_send(raw_server *s, grpc_byte_buffer *bb) {
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->sent_initial) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  s->sent_initial = true;
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = bb;
  bool ok = rs_batch(s, ops, n);
  grpc_byte_buffer_destroy(bb);
  return ok;
}

static bool rs_send_bytes(raw_server *s, fsh_flight_bytes_msg kind, const void *p, int64_t n) {
  grpc_byte_buffer *bb = NULL;
  fsh_error err;
  if (fsh_flight_wire_encode_bytes(kind, p, n, &bb, &err)) abort();
  return rs_send(s, bb);
}

static void rs_status(raw_server *s, grpc_status_code st, const char *details) {
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->sent_initial) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA; /* trailers-only */
  s->sent_initial = true;
  grpc_slice d = grpc_slice_from_copied_string(details);
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = st;
  ops[n++].data.send_status_from_server.status_details = details[0] ? &d : NULL;
  (void)rs_batch(s, ops, n);
  grpc_slice_unref(d);
}

/* Sleeps ms, or until the client cancels the call (its close arrives). */
static void rs_sleep(raw_server *s, int ms) {
  double until = now_s() + ms / 1000.0;
  while (!s->close_done && !atomic_load(&s->stop) && now_s() < until) {
    bool timed_out = false;
    (void)rs_event(s, &tag_close, 10, &timed_out);
  }
}

static void rs_do_action(raw_server *s, grpc_byte_buffer *req) {
  fsh_flight_action a;
  memset(&a, 0, sizeof a);
  fsh_error err;
  if (!req || fsh_flight_wire_decode_action(req, &a, &err)) {
    rs_status(s, GRPC_STATUS_INVALID_ARGUMENT, "bad Action");
    return;
  }
  char body[64] = {0};
  if (a.body.size < (int64_t)sizeof body && a.body.size > 0) memcpy(body, a.body.data, (size_t)a.body.size);
  if (strcmp(a.type, "results") == 0) {
    int k = 0, st = 0, early = 0;
    if (sscanf(body, "%d %d %d", &k, &st, &early) < 1) abort();
    if (early) {
      grpc_op op;
      memset(&op, 0, sizeof op);
      op.op = GRPC_OP_SEND_INITIAL_METADATA;
      (void)rs_batch(s, &op, 1);
      s->sent_initial = true;
    }
    bool ok = true;
    for (int i = 0; i < k && ok; i++) {
      char r[32];
      int n = snprintf(r, sizeof r, "r%d", i);
      ok = rs_send_bytes(s, FSH_WIRE_RESULT, r, n);
    }
    char details[64] = "";
    if (st) snprintf(details, sizeof details, "after %d results", k);
    rs_status(s, (grpc_status_code)st, details);
  } else if (strcmp(a.type, "echo") == 0) {
    (void)rs_send_bytes(s, FSH_WIRE_RESULT, a.body.data, a.body.size);
    rs_status(s, GRPC_STATUS_OK, "");
  } else if (strcmp(a.type, "sleep") == 0) {
    rs_sleep(s, atoi(body));
    rs_status(s, GRPC_STATUS_OK, "");
  } else if (strcmp(a.type, "garbage") == 0) {
    static const char junk[] = "\xff\xff\xff\xff";
    grpc_slice sl = grpc_slice_from_static_buffer(junk, 4);
    (void)rs_send(s, grpc_raw_byte_buffer_create(&sl, 1));
    rs_sleep(s, 5000); /* the client gives up on it: the close comes first */
    rs_status(s, GRPC_STATUS_OK, "");
  } else {
    rs_status(s, GRPC_STATUS_UNIMPLEMENTED, "no such action");
  }
  fsh_flight_action_reset(&a);
}

static void rs_get_flight_info(raw_server *s) {
  int n = atomic_load(&s->info_answers);
  for (int i = 0; i < n; i++) {
    fsh_flight_info info;
    memset(&info, 0, sizeof info);
    const char *path[] = {"x"};
    if (fsh_flight_descriptor_path(&info.descriptor, path, 1)) abort();
    info.total_records = 100 + i; /* the answer's index */
    info.total_bytes = -1;
    grpc_byte_buffer *bb = NULL;
    fsh_error err;
    if (fsh_flight_wire_encode_info(&info, &bb, &err)) abort();
    fsh_flight_info_reset(&info);
    (void)rs_send(s, bb);
  }
  rs_status(s, GRPC_STATUS_OK, "");
}

static void rs_list_actions(raw_server *s) {
  int n = atomic_load(&s->n_action_types);
  for (int i = 0; i < n; i++) {
    char type[32], desc[32];
    snprintf(type, sizeof type, "t%d", i);
    snprintf(desc, sizeof desc, "d%d", i * 7);
    fsh_flight_action_type t = {type, desc};
    grpc_byte_buffer *bb = NULL;
    fsh_error err;
    if (fsh_flight_wire_encode_action_type(&t, &bb, &err)) abort();
    (void)rs_send(s, bb);
  }
  rs_status(s, GRPC_STATUS_OK, "");
}

static void rs_handle(raw_server *s, const grpc_call_details *d) {
  s->sent_initial = s->close_done = false;
  s->close_cancelled = 0;
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &s->close_cancelled;
  if (grpc_call_start_batch(s->call, &op, 1, &tag_close, NULL) != GRPC_CALL_OK) abort();
  grpc_byte_buffer *req = NULL;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &req;
  (void)rs_batch(s, &op, 1);
  char method[128];
  snprintf(method, sizeof method, "%.*s", (int)GRPC_SLICE_LENGTH(d->method),
           (const char *)GRPC_SLICE_START_PTR(d->method));
  const char *m = strrchr(method, '/') ? strrchr(method, '/') + 1 : method;
  if (strcmp(m, "DoAction") == 0)
    rs_do_action(s, req);
  else if (strcmp(m, "GetFlightInfo") == 0)
    rs_get_flight_info(s);
  else if (strcmp(m, "ListActions") == 0)
    rs_list_actions(s);
  else
    rs_status(s, GRPC_STATUS_UNIMPLEMENTED, "not scripted");
  if (req) grpc_byte_buffer_destroy(req);
  if (!s->close_done) (void)rs_event(s, &tag_close, -1, NULL);
  if (s->close_cancelled) atomic_fetch_add(&s->cancelled, 1);
  atomic_fetch_add(&s->calls, 1);
  grpc_call_unref(s->call);
  s->call = NULL;
}

static void *rs_main(void *arg) {
  raw_server *s = arg;
  while (!s->shutdown_seen) {
    grpc_call_details d;
    grpc_metadata_array md;
    grpc_call_details_init(&d);
    grpc_metadata_array_init(&md);
    if (grpc_server_request_call(s->srv, &s->call, &d, &md, s->cq, s->cq, &tag_new) !=
        GRPC_CALL_OK)
      abort();
    if (rs_event(s, &tag_new, -1, NULL)) rs_handle(s, &d);
    grpc_call_details_destroy(&d);
    grpc_metadata_array_destroy(&md);
    if (atomic_load(&s->stop)) break;
  }
  return NULL;
}

static raw_server *rs_start(void) {
  grpc_init();
  raw_server *s = fsh_calloc(1, sizeof *s);
  grpc_arg arg = {.type = GRPC_ARG_INTEGER,
                  .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                  .value.integer = -1};
  grpc_channel_args args = {.num_args = 1, .args = &arg};
  s->srv = grpc_server_create(&args, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->srv, s->cq, NULL);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(s->srv, "127.0.0.1:0", creds);
  grpc_server_credentials_release(creds);
  if (port <= 0) abort();
  grpc_server_start(s->srv);
  snprintf(s->uri, sizeof s->uri, "grpc://127.0.0.1:%d", port);
  atomic_store(&s->info_answers, 1);
  if (pthread_create(&s->thread, NULL, rs_main, s)) abort();
  return s;
}

static void rs_stop(raw_server *s) {
  atomic_store(&s->stop, true);
  grpc_server_shutdown_and_notify(s->srv, s->cq, &tag_shutdown);
  grpc_server_cancel_all_calls(s->srv);
  pthread_join(s->thread, NULL);
  while (!s->shutdown_seen) (void)rs_event(s, &tag_shutdown, -1, NULL);
  grpc_server_destroy(s->srv);
  grpc_completion_queue_shutdown(s->cq);
  while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(s->cq);
  fsh_free(s);
  grpc_shutdown();
}

/* ---- the client side -------------------------------------------------------------- */

static fsh_flight_client *open_client(const char *uri, int64_t timeout_ms) {
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = timeout_ms};
  fsh_flight_client *c = NULL;
  fsh_error err = {{0}};
  if (fsh_flight_client_open(&o, &c, &err)) {
    fprintf(stderr, "open_client: %s\n", err.message);
    abort();
  }
  return c;
}

static int action(fsh_flight_client *c, const char *type, const char *body,
                  fsh_flight_result_list *out, fsh_error *err) {
  fsh_flight_action a = {.type = (char *)type,
                         .body = {(uint8_t *)body, body ? (int64_t)strlen(body) : 0}};
  return fsh_flight_do_action(c, &a, out, err);
}

/* The results are exactly "r0".."r<k-1>". */
static bool results_are(const fsh_flight_result_list *l, int k) {
  if (l->n != k) return false;
  for (int i = 0; i < k; i++) {
    char want[32];
    int n = snprintf(want, sizeof want, "r%d", i);
    if (l->items[i].size != n || memcmp(l->items[i].data, want, (size_t)n) != 0) return false;
  }
  return true;
}

/* 0 (trailers-only and with initial metadata), 1, 2 and 1000 results, on
 * one client, each call's list exactly what the server sent. */
static void test_result_counts(void) {
  raw_server *s = rs_start();
  fsh_flight_client *c = open_client(s->uri, 10000);
  fsh_error err = {{0}};
  const char *bodies[] = {"0", "0 0 1", "1", "1 0 1", "2", "1000", "0", "1"};
  const int want[] = {0, 0, 1, 1, 2, 1000, 0, 1};
  for (int i = 0; i < 8; i++) {
    fsh_flight_result_list l = {.n = -1};
    CHECK_OK(action(c, "results", bodies[i], &l, &err));
    CHECK_MSG(results_are(&l, want[i]), "body '%s': %lld results", bodies[i], (long long)l.n);
    fsh_flight_result_list_reset(&l);
  }
  CHECK_EQ_INT(atomic_load(&s->cancelled), 0);
  fsh_flight_client_close(c);
  rs_stop(s);
}

/* A status after 0 results (trailers-only, or after the initial metadata)
 * and after 1 and 3: the error is the status, exactly as the separate
 * steps reported it -- "DoAction <uri>: <CODE>: <details>", the mapped
 * errno -- and the list is empty. */
static void test_error_status(void) {
  raw_server *s = rs_start();
  fsh_flight_client *c = open_client(s->uri, 10000);
  const char *bodies[] = {"0 6", "0 6 1", "1 6", "1 5 1", "3 9"};
  const int codes[] = {EEXIST, EEXIST, EEXIST, ENOENT, EIO};
  const char *names[] = {"ALREADY_EXISTS", "ALREADY_EXISTS", "ALREADY_EXISTS", "NOT_FOUND",
                         "FAILED_PRECONDITION"};
  for (int i = 0; i < 5; i++) {
    fsh_error err = {{0}};
    fsh_flight_result_list l = {0};
    CHECK_EQ_INT(action(c, "results", bodies[i], &l, &err), codes[i]);
    char want[160];
    snprintf(want, sizeof want, "DoAction %s: %s: after %c results", s->uri, names[i],
             bodies[i][0]);
    CHECK_MSG(strcmp(err.message, want) == 0, "got '%s', want '%s'", err.message, want);
    CHECK(l.n == 0 && l.items == NULL);
  }
  /* and the client goes on working */
  fsh_error err = {{0}};
  fsh_flight_result_list l = {0};
  CHECK_OK(action(c, "results", "1", &l, &err));
  CHECK(results_are(&l, 1));
  fsh_flight_result_list_reset(&l);
  fsh_flight_client_close(c);
  rs_stop(s);
}

/* One result of 5 MiB + 3 bytes (above gRPC's default 4 MiB limit), the
 * request as large: the server echoes the body, byte for byte. */
static void test_large_result(void) {
  raw_server *s = rs_start();
  fsh_flight_client *c = open_client(s->uri, 20000);
  fsh_error err = {{0}};
  int64_t n = (5 << 20) + 3;
  uint8_t *body = fsh_malloc((size_t)n);
  for (int64_t i = 0; i < n; i++) body[i] = (uint8_t)(i * 131 + (i >> 16));
  fsh_flight_action a = {.type = (char *)"echo", .body = {body, n}};
  fsh_flight_result_list l = {0};
  CHECK_OK(fsh_flight_do_action(c, &a, &l, &err));
  CHECK_EQ_INT(l.n, 1);
  if (l.n == 1) {
    CHECK_EQ_INT(l.items[0].size, n);
    CHECK(l.items[0].size == n && memcmp(l.items[0].data, body, (size_t)n) == 0);
  }
  fsh_flight_result_list_reset(&l);
  fsh_free(body);
  fsh_flight_client_close(c);
  rs_stop(s);
}

/* The client's deadline runs out while the server holds the answer:
 * DEADLINE_EXCEEDED at the deadline, the server sees the cancel; the next
 * call on the same client has a deadline of its own and succeeds (a
 * client with a long deadline checks, after it, that the server saw the
 * cancel). */
static void test_deadline(void) {
  raw_server *s = rs_start();
  fsh_flight_client *c = open_client(s->uri, 500);
  fsh_error err = {{0}};
  fsh_flight_result_list l = {0};
  double t0 = now_s();
  CHECK_EQ_INT(action(c, "sleep", "5000", &l, &err), ETIMEDOUT);
  double dt = now_s() - t0;
  CHECK_MSG(dt >= 0.45 && dt < 3, "failed after %.2f s", dt);
  char want[128];
  snprintf(want, sizeof want, "DoAction %s: DEADLINE_EXCEEDED", s->uri);
  CHECK_MSG(strncmp(err.message, want, strlen(want)) == 0, "%s", err.message);
  CHECK(l.n == 0);
  CHECK_OK(action(c, "results", "2", &l, &err));
  CHECK(results_are(&l, 2));
  fsh_flight_result_list_reset(&l);
  fsh_flight_client *c2 = open_client(s->uri, 20000);
  CHECK_OK(action(c2, "results", "0", &l, &err)); /* handled after the cancelled call */
  CHECK_EQ_INT(atomic_load(&s->cancelled), 1);
  fsh_flight_client_close(c2);
  fsh_flight_client_close(c);
  rs_stop(s);
}

/* A response that is not a Result: the decoder's error, prefixed with the
 * call; the client cancels the call rather than wait for the rest. */
static void test_bad_message(void) {
  raw_server *s = rs_start();
  fsh_flight_client *c = open_client(s->uri, 10000);
  fsh_error err = {{0}};
  fsh_flight_result_list l = {0};
  double t0 = now_s();
  int rc = action(c, "garbage", NULL, &l, &err);
  CHECK(rc != 0);
  char want[128];
  snprintf(want, sizeof want, "DoAction %s: ", s->uri);
  CHECK_MSG(strncmp(err.message, want, strlen(want)) == 0 && strlen(err.message) > strlen(want),
            "%s", err.message);
  CHECK(l.n == 0);
  CHECK_OK(action(c, "results", "0", &l, &err)); /* after the server saw the cancel */
  CHECK_MSG(now_s() - t0 < 4, "the bad message's call was not cancelled: %.2f s",
            now_s() - t0);
  CHECK_EQ_INT(atomic_load(&s->cancelled), 1);
  fsh_flight_client_close(c);
  rs_stop(s);
}

/* GetFlightInfo wants exactly one answer: 1 is decoded, 0 and 2 are the
 * protocol errors they were; ListActions takes any number. */
static void test_unary_answers(void) {
  raw_server *s = rs_start();
  fsh_flight_client *c = open_client(s->uri, 10000);
  const char *path[] = {"x"};
  fsh_flight_descriptor d;
  memset(&d, 0, sizeof d);
  fsh_error err = {{0}};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 1));
  for (int n = 0; n <= 2; n++) {
    atomic_store(&s->info_answers, n);
    fsh_flight_info info;
    int rc = fsh_flight_get_flight_info(c, &d, &info, &err);
    if (n == 1) {
      CHECK_EQ_INT(rc, 0);
      CHECK_EQ_INT(info.total_records, 100);
      CHECK(info.descriptor.n_path == 1 && strcmp(info.descriptor.path[0], "x") == 0);
      fsh_flight_info_reset(&info);
    } else {
      CHECK_EQ_INT(rc, EPROTO);
      char want[128];
      snprintf(want, sizeof want, "GetFlightInfo %s: %d responses to a unary call", s->uri, n);
      CHECK_MSG(strcmp(err.message, want) == 0, "%s", err.message);
    }
  }
  const int counts[] = {0, 1, 500};
  for (int k = 0; k < 3; k++) {
    atomic_store(&s->n_action_types, counts[k]);
    fsh_flight_action_type_list l = {0};
    CHECK_OK(fsh_flight_list_actions(c, &l, &err));
    CHECK_EQ_INT(l.n, counts[k]);
    bool same = l.n == counts[k];
    for (int64_t i = 0; same && i < l.n; i++) {
      char t[32], dd[32];
      snprintf(t, sizeof t, "t%d", (int)i);
      snprintf(dd, sizeof dd, "d%d", (int)i * 7);
      same = strcmp(l.items[i].type, t) == 0 && strcmp(l.items[i].description, dd) == 0;
    }
    CHECK_MSG(same, "%d action types", counts[k]);
    fsh_flight_action_type_list_reset(&l);
  }
  fsh_flight_descriptor_reset(&d);
  fsh_flight_client_close(c);
  rs_stop(s);
}

/* Nobody listening: the status of the failed unary batch, as before. */
static void test_refused(void) {
  raw_server *s = rs_start();
  char uri[64];
  snprintf(uri, sizeof uri, "%s", s->uri);
  rs_stop(s); /* its port is free now */
  fsh_flight_client *c = open_client(uri, 5000);
  fsh_error err = {{0}};
  fsh_flight_result_list l = {0};
  CHECK_EQ_INT(action(c, "results", "1", &l, &err), EAGAIN);
  char want[128];
  snprintf(want, sizeof want, "DoAction %s: UNAVAILABLE", uri);
  CHECK_MSG(strncmp(err.message, want, strlen(want)) == 0, "%s", err.message);
  fsh_flight_client_close(c);
}

FSH_TEST_MAIN(TEST(test_result_counts), TEST(test_error_status), TEST(test_large_result),
              TEST(test_deadline), TEST(test_bad_message), TEST(test_unary_answers),
              TEST(test_refused))
