/* test_server_lifecycle.c -- the Flight server's machinery under ASan:
 * start/stop/restart on one port, UNIMPLEMENTED for missing handlers,
 * errno -> status mapping, bearer-token auth, a DoGet stream, 256
 * concurrent DoGet streams on a 4-thread pool, and stop() while streams are
 * still open. The client side is raw gRPC (one pluck queue), so these tests
 * depend on nothing but the server and the wire codecs. */
#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdatomic.h>
#include <time.h>

#include "flight/wire.h"
#include "test.h"

/* ---- a test server: DoGet sources of app_metadata-only messages ---------- */

static atomic_long g_live_sources, g_max_sources, g_released;

typedef struct count_source {
  fsh_flight_source base;
  int64_t left; /* -1 = endless */
  int64_t sent;
  int64_t size; /* bytes per message */
} count_source;

static int count_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app, bool *done,
                      fsh_error *err) {
  count_source *c = s->ctx;
  memset(out, 0, sizeof *out);
  if (c->left == 0) {
    *done = true;
    return 0;
  }
  *app = fsh_buffer_new(c->size, true);
  if (!*app) return fsh_error_set(err, ENOMEM, "out of memory");
  snprintf((char *)(*app)->data, (size_t)c->size, "message %lld", (long long)c->sent);
  c->sent++;
  if (c->left > 0) c->left--;
  return 0;
}

static void count_release(fsh_flight_source *s) {
  atomic_fetch_sub(&g_live_sources, 1);
  atomic_fetch_add(&g_released, 1);
  fsh_free(s->ctx);
}

/* Ticket "N" or "N:SIZE": N messages (of SIZE bytes, default 32); "inf"
 * or "inf:SIZE": endless; "missing": ENOENT. */
static int test_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                       fsh_flight_source **out, fsh_error *err) {
  (void)ctx;
  CHECK(fsh_flight_call_peer(call)[0] != '\0');
  char t[32] = {0};
  if (ticket->size <= 0 || ticket->size >= (int64_t)sizeof t)
    return fsh_error_set(err, EINVAL, "bad ticket");
  memcpy(t, ticket->data, (size_t)ticket->size);
  if (strcmp(t, "missing") == 0) return fsh_error_set(err, ENOENT, "no flight for ticket 'missing'");
  count_source *c = fsh_calloc(1, sizeof *c);
  if (!c) return ENOMEM;
  c->left = strncmp(t, "inf", 3) == 0 ? -1 : atoll(t);
  const char *colon = strchr(t, ':');
  c->size = colon ? atoll(colon + 1) : 32;
  c->base.next = count_next;
  c->base.release = count_release;
  c->base.ctx = c;
  long live = atomic_fetch_add(&g_live_sources, 1) + 1;
  long max = atomic_load(&g_max_sources);
  while (live > max && !atomic_compare_exchange_weak(&g_max_sources, &max, live)) {
  }
  *out = &c->base;
  return 0;
}

static int test_list_actions(void *ctx, fsh_flight_call *call, fsh_flight_action_type_list *out,
                             fsh_error *err) {
  (void)ctx;
  (void)err;
  if (strcmp(fsh_flight_call_identity(call), "") != 0) return EINVAL;
  return fsh_flight_action_type_list_push(out, "ping", "answers pong");
}

static int test_poll(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                     fsh_flight_info *out, double *progress, bool *done, fsh_error *err) {
  (void)ctx;
  (void)call;
  if (d->type != FSH_FLIGHT_DESCRIPTOR_CMD) return fsh_error_set(err, EINVAL, "want a CMD");
  out->total_records = 42;
  *progress = 0.5;
  *done = false;
  return fsh_bytes_set(&out->app_metadata, d->cmd.data, d->cmd.size);
}

static fsh_flight_server *start_server(const char *listen, const char *token, bool handlers_on) {
  fsh_flight_server_options o;
  memset(&o, 0, sizeof o);
  o.listen = listen;
  o.n_threads = 4;
  o.auth_token = token;
  fsh_flight_handlers h;
  memset(&h, 0, sizeof h);
  if (handlers_on) {
    h.do_get = test_do_get;
    h.list_actions = test_list_actions;
    h.poll_flight_info = test_poll;
  }
  fsh_flight_server *s = NULL;
  fsh_error err;
  CHECK_OK(fsh_flight_server_start(&o, &h, &s, &err));
  return s;
}

/* ---- a raw gRPC client --------------------------------------------------- */

typedef struct rpc {
  grpc_call *call;
  grpc_metadata_array init_md, trail_md;
  grpc_status_code status;
  grpc_slice details;
  grpc_byte_buffer *recv;
  int n_msgs;
  bool flight_data; /* responses are FlightData (DoGet) */
  char last[64];
} rpc;

static grpc_completion_queue *g_cq;
static grpc_channel *g_channel;

static void *tag_of(rpc *r, int kind) { return (char *)r + kind; } /* kind 0..3 */

static void pluck(void *tag) {
  grpc_event ev = grpc_completion_queue_pluck(g_cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  CHECK(ev.type == GRPC_OP_COMPLETE);
}

/* The client holds its own gRPC library reference: it may outlive a server. */
static void client_open(int port) {
  grpc_init();
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  g_channel = grpc_channel_create(target, creds, NULL);
  grpc_channel_credentials_release(creds);
  g_cq = grpc_completion_queue_create_for_pluck(NULL);
}

static void client_close(void) {
  grpc_channel_destroy(g_channel);
  grpc_completion_queue_shutdown(g_cq);
  while (grpc_completion_queue_pluck(g_cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(g_cq);
  grpc_shutdown();
}

/* Starts a call: sends the request (may be NULL for a bidi call that then
 * only half-closes), the optional header, and arms the status. */
static void rpc_start(rpc *r, const char *method, grpc_byte_buffer *request, const char *md_key,
                      const char *md_value) {
  memset(r, 0, sizeof *r);
  char path[96];
  snprintf(path, sizeof path, "/arrow.flight.protocol.FlightService/%s", method);
  r->flight_data = strcmp(method, "DoGet") == 0;
  grpc_slice m = grpc_slice_from_copied_string(path);
  r->call = grpc_channel_create_call(g_channel, NULL, GRPC_PROPAGATE_DEFAULTS, g_cq, m, NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_slice_unref(m);
  grpc_metadata_array_init(&r->init_md);
  grpc_metadata_array_init(&r->trail_md);
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  if (md_key) {
    md.key = grpc_slice_from_static_string(md_key);
    md.value = grpc_slice_from_static_string(md_value);
  }
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n].data.send_initial_metadata.count = md_key ? 1 : 0;
  ops[n].data.send_initial_metadata.metadata = md_key ? &md : NULL;
  n++;
  if (request) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = request;
    n++;
  }
  ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  CHECK(grpc_call_start_batch(r->call, ops, n, tag_of(r, 0), NULL) == GRPC_CALL_OK);
  pluck(tag_of(r, 0));
  if (request) grpc_byte_buffer_destroy(request);
  /* The client must ask for the initial metadata, else the status never
   * completes. */
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[0].data.recv_initial_metadata.recv_initial_metadata = &r->init_md;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &r->trail_md;
  ops[1].data.recv_status_on_client.status = &r->status;
  ops[1].data.recv_status_on_client.status_details = &r->details;
  CHECK(grpc_call_start_batch(r->call, ops, 2, tag_of(r, 1), NULL) == GRPC_CALL_OK);
}

/* Receives one message into r->recv (kept for the caller); false at the end. */
static bool rpc_recv_keep(rpc *r) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &r->recv;
  CHECK(grpc_call_start_batch(r->call, &op, 1, tag_of(r, 2), NULL) == GRPC_CALL_OK);
  pluck(tag_of(r, 2));
  return r->recv != NULL;
}

/* Receives one message; false at the end of the stream. */
static bool rpc_recv(rpc *r) {
  grpc_op ops[1];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n].data.recv_message.recv_message = &r->recv;
  n++;
  CHECK(grpc_call_start_batch(r->call, ops, n, tag_of(r, 2), NULL) == GRPC_CALL_OK);
  pluck(tag_of(r, 2));
  if (!r->recv) return false;
  if (r->flight_data) {
    fsh_flight_message m;
    memset(&m, 0, sizeof m);
    fsh_error err;
    CHECK_OK(fsh_flight_data_decode(r->recv, &m, &err));
    if (m.app_metadata) snprintf(r->last, sizeof r->last, "%s", (const char *)m.app_metadata->data);
    fsh_flight_message_reset(&m);
  }
  grpc_byte_buffer_destroy(r->recv);
  r->recv = NULL;
  r->n_msgs++;
  return true;
}

/* Waits for the status; returns it. */
static grpc_status_code rpc_finish(rpc *r, char *details, size_t n) {
  pluck(tag_of(r, 1));
  if (details) {
    size_t len = GRPC_SLICE_LENGTH(r->details);
    if (len >= n) len = n - 1;
    memcpy(details, GRPC_SLICE_START_PTR(r->details), len);
    details[len] = '\0';
  }
  grpc_slice_unref(r->details);
  grpc_metadata_array_destroy(&r->init_md);
  grpc_metadata_array_destroy(&r->trail_md);
  grpc_call_unref(r->call);
  return r->status;
}

static grpc_byte_buffer *ticket(const char *t) {
  grpc_byte_buffer *bb = NULL;
  fsh_error err;
  CHECK_OK(fsh_flight_wire_encode_bytes(FSH_WIRE_TICKET, t, (int64_t)strlen(t), &bb, &err));
  return bb;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- cases ------------------------------------------------------------------- */

static void test_start_stop_restart(void) {
  fsh_flight_server *s = start_server("127.0.0.1:0", NULL, true);
  if (!s) return;
  int port = fsh_flight_server_port(s);
  CHECK(port > 0);
  fsh_flight_server_stop(s, 1000);
  char listen[64];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  for (int i = 0; i < 3; i++) { /* same port, right away */
    s = start_server(listen, NULL, true);
    if (!s) return;
    CHECK_EQ_INT(fsh_flight_server_port(s), port);
    client_open(port);
    rpc r;
    rpc_start(&r, "DoGet", ticket("2"), NULL, NULL);
    while (rpc_recv(&r)) {
    }
    CHECK_EQ_INT(r.n_msgs, 2);
    CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_OK);
    client_close();
    fsh_flight_server_stop(s, 1000);
  }
}

static void test_unimplemented(void) {
  fsh_flight_server *s = start_server("127.0.0.1:0", NULL, false);
  if (!s) return;
  client_open(fsh_flight_server_port(s));
  const char *methods[] = {"GetFlightInfo", "DoGet", "DoPut", "DoExchange", "ListActions",
                           "ListFlights", "GetSchema", "PollFlightInfo", "DoAction"};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    rpc r;
    grpc_byte_buffer *req = NULL;
    if (strcmp(methods[i], "DoPut") != 0 && strcmp(methods[i], "DoExchange") != 0)
      req = fsh_flight_wire_empty();
    rpc_start(&r, methods[i], req, NULL, NULL);
    char details[256];
    CHECK_EQ_INT(rpc_finish(&r, details, sizeof details), GRPC_STATUS_UNIMPLEMENTED);
    CHECK_MSG(strstr(details, methods[i]) != NULL, "details '%s'", details);
  }
  client_close();
  fsh_flight_server_stop(s, 1000);
}

static void test_poll_flight_info(void) {
  fsh_flight_server *s = start_server("127.0.0.1:0", NULL, true);
  if (!s) return;
  client_open(fsh_flight_server_port(s));
  fsh_error err;
  fsh_flight_descriptor d;
  memset(&d, 0, sizeof d);
  d.type = FSH_FLIGHT_DESCRIPTOR_CMD;
  CHECK_OK(fsh_bytes_set(&d.cmd, "job-7", 5));
  grpc_byte_buffer *req = NULL;
  CHECK_OK(fsh_flight_wire_encode_descriptor(&d, &req, &err));
  fsh_flight_descriptor_reset(&d);
  rpc r;
  rpc_start(&r, "PollFlightInfo", req, NULL, NULL);
  CHECK(rpc_recv_keep(&r));
  fsh_flight_info info;
  memset(&info, 0, sizeof info);
  double progress = 0;
  bool done = true;
  CHECK_OK(fsh_flight_wire_decode_poll_info(r.recv, &info, &progress, &done, &err));
  CHECK_EQ_INT(info.total_records, 42);
  CHECK(progress == 0.5 && !done);
  CHECK(info.app_metadata.size == 5 && memcmp(info.app_metadata.data, "job-7", 5) == 0);
  fsh_flight_info_reset(&info);
  grpc_byte_buffer_destroy(r.recv);
  r.recv = NULL;
  CHECK(!rpc_recv(&r));
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_OK);
  /* The handler's EINVAL, with its message. */
  req = NULL;
  const char *path[] = {"p"};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 1));
  CHECK_OK(fsh_flight_wire_encode_descriptor(&d, &req, &err));
  fsh_flight_descriptor_reset(&d);
  rpc_start(&r, "PollFlightInfo", req, NULL, NULL);
  char details[128];
  CHECK_EQ_INT(rpc_finish(&r, details, sizeof details), GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(strcmp(details, "want a CMD") == 0);
  client_close();
  fsh_flight_server_stop(s, 1000);
}

static void test_errors_and_auth(void) {
  fsh_flight_server *s = start_server("127.0.0.1:0", "s3cret", true);
  if (!s) return;
  client_open(fsh_flight_server_port(s));
  rpc r;
  char details[256];
  /* No token, a wrong token, then the right one. */
  rpc_start(&r, "ListActions", fsh_flight_wire_empty(), NULL, NULL);
  CHECK_EQ_INT(rpc_finish(&r, details, sizeof details), GRPC_STATUS_UNAUTHENTICATED);
  CHECK(strstr(details, "Bearer") != NULL);
  rpc_start(&r, "ListActions", fsh_flight_wire_empty(), "authorization", "Bearer wrong");
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_UNAUTHENTICATED);
  rpc_start(&r, "DoPut", NULL, "authorization", "Bearer s3cre");
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_UNAUTHENTICATED);
  rpc_start(&r, "ListActions", fsh_flight_wire_empty(), "authorization", "Bearer s3cret");
  CHECK(rpc_recv(&r));
  CHECK(!rpc_recv(&r));
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_OK);
  /* Handler errors map to statuses with their message. */
  rpc_start(&r, "DoGet", ticket("missing"), "authorization", "Bearer s3cret");
  CHECK(!rpc_recv(&r));
  CHECK_EQ_INT(rpc_finish(&r, details, sizeof details), GRPC_STATUS_NOT_FOUND);
  CHECK(strstr(details, "no flight for ticket") != NULL);
  /* A malformed request message. */
  grpc_slice junk = grpc_slice_from_static_string("\x0a\xff\xff\xff");
  rpc_start(&r, "DoGet", grpc_raw_byte_buffer_create(&junk, 1), "authorization", "Bearer s3cret");
  CHECK_EQ_INT(rpc_finish(&r, details, sizeof details), GRPC_STATUS_INVALID_ARGUMENT);
  /* Handshake without credentials. */
  rpc_start(&r, "Handshake", NULL, NULL, NULL);
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_UNAUTHENTICATED);
  client_close();
  fsh_flight_server_stop(s, 1000);
}

#define N_STREAMS 256

static void test_256_concurrent_streams(void) {
  atomic_store(&g_max_sources, 0);
  atomic_store(&g_live_sources, 0);
  fsh_flight_server *s = start_server("127.0.0.1:0", NULL, true);
  if (!s) return;
  client_open(fsh_flight_server_port(s));
  static rpc calls[N_STREAMS];
  /* Endless streams: every one has delivered a message before any is
   * cancelled, so all 256 are open at once on the 4 pool threads. */
  for (int i = 0; i < N_STREAMS; i++) rpc_start(&calls[i], "DoGet", ticket("inf:65536"), NULL, NULL);
  for (int i = 0; i < N_STREAMS; i++) CHECK(rpc_recv(&calls[i]));
  CHECK_EQ_INT(atomic_load(&g_max_sources), N_STREAMS);
  for (int i = 0; i < N_STREAMS; i++) {
    grpc_call_cancel(calls[i].call, NULL);
    while (rpc_recv(&calls[i])) {
    }
    CHECK_EQ_INT(rpc_finish(&calls[i], NULL, 0), GRPC_STATUS_CANCELLED);
  }
  /* And 256 finite streams at once, all complete. */
  for (int i = 0; i < N_STREAMS; i++) rpc_start(&calls[i], "DoGet", ticket("3:1000"), NULL, NULL);
  int ok = 0;
  for (int i = 0; i < N_STREAMS; i++) {
    while (rpc_recv(&calls[i])) {
    }
    CHECK_EQ_INT(calls[i].n_msgs, 3);
    ok += strcmp(calls[i].last, "message 2") == 0;
    CHECK_EQ_INT(rpc_finish(&calls[i], NULL, 0), GRPC_STATUS_OK);
  }
  CHECK_EQ_INT(ok, N_STREAMS);
  client_close();
  fsh_flight_server_stop(s, 1000);
  CHECK_EQ_INT(atomic_load(&g_live_sources), 0);
}

static void test_stop_with_active_streams(void) {
  atomic_store(&g_live_sources, 0);
  fsh_flight_server *s = start_server("127.0.0.1:0", NULL, true);
  if (!s) return;
  client_open(fsh_flight_server_port(s));
  enum { N = 16 };
  static rpc calls[N];
  for (int i = 0; i < N; i++) {
    rpc_start(&calls[i], "DoGet", ticket("inf"), NULL, NULL);
    CHECK(rpc_recv(&calls[i]));
  }
  /* The client stops reading; the streams stall on flow control. */
  double t0 = now_s();
  fsh_flight_server_stop(s, 200);
  double took = now_s() - t0;
  CHECK_MSG(took < 5.0, "stop took %.2f s", took);
  CHECK_EQ_INT(atomic_load(&g_live_sources), 0);
  for (int i = 0; i < N; i++) {
    while (rpc_recv(&calls[i])) {
    }
    CHECK(rpc_finish(&calls[i], NULL, 0) != GRPC_STATUS_OK);
  }
  client_close();
}

static void test_client_cancels_mid_stream(void) {
  atomic_store(&g_live_sources, 0);
  atomic_store(&g_released, 0);
  fsh_flight_server *s = start_server("127.0.0.1:0", NULL, true);
  if (!s) return;
  client_open(fsh_flight_server_port(s));
  rpc r;
  rpc_start(&r, "DoGet", ticket("inf"), NULL, NULL);
  CHECK(rpc_recv(&r));
  grpc_call_cancel(r.call, NULL);
  while (rpc_recv(&r)) {
  }
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_CANCELLED);
  /* The server freed the call's source and keeps serving. */
  for (int i = 0; i < 200 && atomic_load(&g_released) < 1; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  CHECK_EQ_INT(atomic_load(&g_released), 1);
  rpc_start(&r, "DoGet", ticket("4"), NULL, NULL);
  while (rpc_recv(&r)) {
  }
  CHECK_EQ_INT(r.n_msgs, 4);
  CHECK_EQ_INT(rpc_finish(&r, NULL, 0), GRPC_STATUS_OK);
  client_close();
  fsh_flight_server_stop(s, 1000);
}

static void test_bad_options(void) {
  fsh_flight_server_options o;
  memset(&o, 0, sizeof o);
  fsh_flight_handlers h;
  memset(&h, 0, sizeof h);
  fsh_flight_server *s = NULL;
  fsh_error err;
  o.listen = "127.0.0.1:0";
  o.tls_cert_path = "/nonexistent/cert.pem";
  CHECK_EQ_INT(fsh_flight_server_start(&o, &h, &s, &err), EINVAL); /* no key */
  o.tls_key_path = "/nonexistent/key.pem";
  CHECK(fsh_flight_server_start(&o, &h, &s, &err) == ENOENT);
  CHECK(strstr(err.message, "/nonexistent/cert.pem") != NULL);
  memset(&o, 0, sizeof o);
  o.listen = "256.1.1.1:99999";
  CHECK(fsh_flight_server_start(&o, &h, &s, &err) != 0);
  CHECK(s == NULL);
}

FSH_TEST_MAIN(TEST(test_start_stop_restart), TEST(test_unimplemented), TEST(test_poll_flight_info), TEST(test_errors_and_auth),
              TEST(test_256_concurrent_streams), TEST(test_stop_with_active_streams),
              TEST(test_client_cancels_mid_stream), TEST(test_bad_options))
