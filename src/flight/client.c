/* client.c -- the Flight client: one gRPC channel per client (plain or TLS,
 * mutual TLS, unlimited message sizes), one call per RPC (the bulk
 * streams' socket I/O and completions on client_poller.c's threads, the
 * other methods' on the calling thread), and the unary and
 * server-streaming methods (Handshake, ListFlights, GetFlightInfo,
 * PollFlightInfo, GetSchema, DoAction, ListActions). The streaming DoGet /
 * DoPut / DoExchange are in client_stream.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "flight/client_internal.h"

#define FSH_FLIGHT_SERVICE "/arrow.flight.protocol.FlightService/"

const char *fsh_flight_status_name(grpc_status_code s) {
  static const char *const names[] = {
      "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if ((int)s >= 0 && (size_t)s < sizeof names / sizeof names[0]) return names[s];
  return "UNKNOWN_STATUS";
}

/* ---- the channel ------------------------------------------------------------ */

/* Reads a whole (PEM) file into a NUL-terminated fsh_malloc'd string. */
static int read_pem(const char *path, const char *what, char **out, fsh_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return fsh_error_set(err, errno, "%s %s: %s", what, path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = fsh_malloc(cap);
  int rc = buf ? 0 : ENOMEM;
  while (rc == 0) {
    if (n + 1 == cap) {
      char *bigger = fsh_realloc(buf, cap * 2);
      if (!bigger) {
        rc = ENOMEM;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) rc = EIO;
      break;
    }
  }
  fclose(f);
  if (rc) {
    fsh_free(buf);
    return fsh_error_set(err, rc, "%s %s: %s", what, path,
                         rc == ENOMEM ? "out of memory" : "read error");
  }
  buf[n] = '\0';
  *out = buf;
  return 0;
}

static int make_credentials(const fsh_flight_client_options *o, grpc_channel_credentials **out,
                            fsh_error *err) {
  char *roots = NULL, *cert = NULL, *key = NULL;
  int rc = 0;
  if ((o->tls_cert_path != NULL) != (o->tls_key_path != NULL))
    return fsh_error_set(err, EINVAL, "mutual TLS needs both a client certificate and a key");
  if (o->tls_ca_path) rc = read_pem(o->tls_ca_path, "TLS CA", &roots, err);
  if (rc == 0 && o->tls_cert_path) rc = read_pem(o->tls_cert_path, "TLS certificate", &cert, err);
  if (rc == 0 && o->tls_key_path) rc = read_pem(o->tls_key_path, "TLS key", &key, err);
  if (rc == 0) {
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    *out = grpc_ssl_credentials_create(roots, cert ? &pair : NULL, NULL, NULL);
    if (!*out) rc = fsh_error_set(err, EINVAL, "gRPC refused the TLS credentials");
  }
  fsh_free(roots);
  fsh_free(cert);
  if (key) {
    memset(key, 0, strlen(key)); /* do not leave the private key lying around */
    fsh_free(key);
  }
  return rc;
}

int fsh_flight_client_open(const fsh_flight_client_options *opts, fsh_flight_client **out,
                           fsh_error *err) {
  *out = NULL;
  if (!opts || !opts->uri) return fsh_error_set(err, EINVAL, "Flight client: no URI");
  fsh_flight_location loc;
  FSH_RETURN_NOT_OK(fsh_flight_location_parse(opts->uri, &loc, err));
  if (!loc.tls && (opts->tls_cert_path || opts->tls_key_path || opts->tls_ca_path))
    return fsh_error_set(err, EINVAL, "%s: TLS options need a grpc+tls:// URI", opts->uri);

  fsh_flight_client *c = fsh_calloc(1, sizeof *c);
  if (!c) return fsh_error_set(err, ENOMEM, "Flight client: out of memory");
  c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 0;
  c->stall_ms = opts->stall_timeout_ms > 0 ? opts->stall_timeout_ms : 0;
  c->uri = fsh_strdup(opts->uri);
  if (opts->auth_token) {
    size_t n = strlen(opts->auth_token) + sizeof "Bearer ";
    c->auth_header = fsh_malloc(n);
    if (c->auth_header) snprintf(c->auth_header, n, "Bearer %s", opts->auth_token);
  }
  if (!c->uri || (opts->auth_token && !c->auth_header)) {
    fsh_free(c->uri);
    fsh_free(c->auth_header);
    fsh_free(c);
    return fsh_error_set(err, ENOMEM, "Flight client: out of memory");
  }
  pthread_mutex_init(&c->mu, NULL);
  grpc_init();

  int rc = fsh_flight_poller_acquire(err);
  c->has_poller = rc == 0;
  grpc_channel_credentials *creds = NULL;
  if (rc == 0 && loc.tls)
    rc = make_credentials(opts, &creds, err);
  else if (rc == 0)
    creds = grpc_insecure_credentials_create();
  if (rc == 0) {
    /* No message size limits either way (Arrow batches of hundreds of MB),
     * no retries (they would buffer what we send). */
    grpc_arg args[16];
    size_t n = 0;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[n++].value.integer = -1;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[n++].value.integer = -1;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = (char *)GRPC_ARG_ENABLE_RETRIES;
    args[n++].value.integer = 0;
    if (loc.tls && opts->tls_override_hostname) {
      args[n].type = GRPC_ARG_STRING;
      args[n].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
      args[n++].value.string = (char *)opts->tls_override_hostname;
    }
    /* Every client its own TCP connection (gRPC otherwise shares one
     * between channels to the same target): 4 concurrent DoGets on 4
     * clients went from ~3.2 to ~3.6 GB/s (bench_flight). Arrow C++'s
     * Flight client does the same. */
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[n++].value.integer = 1;
    n += fsh_flight_transport_args(args + n, 16 - n, fsh_flight_keepalive_ms(opts->keepalive_ms),
                                   true);
    grpc_channel_args ch_args = {.num_args = n, .args = args};
    char target[300];
    if (strchr(loc.host, ':'))
      snprintf(target, sizeof target, "[%s]:%d", loc.host, loc.port);
    else
      snprintf(target, sizeof target, "%s:%d", loc.host, loc.port);
    c->channel = grpc_channel_create(target, creds, &ch_args);
    grpc_channel_credentials_release(creds);
    if (!c->channel) rc = fsh_error_set(err, EIO, "%s: cannot create a gRPC channel", opts->uri);
  }
  if (rc) {
    fsh_flight_client_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void fsh_flight_client_close(fsh_flight_client *c) {
  if (!c) return;
  if (c->channel) grpc_channel_destroy(c->channel);
  if (c->has_poller) fsh_flight_poller_release();
  pthread_mutex_destroy(&c->mu);
  fsh_free(c->uri);
  if (c->auth_header) {
    memset(c->auth_header, 0, strlen(c->auth_header));
    fsh_free(c->auth_header);
  }
  fsh_free(c);
  grpc_shutdown();
}

/* ---- one call ---------------------------------------------------------------- */

int fsh_flight_rpc_error(fsh_flight_rpc *r, int code, fsh_error *err) {
  return fsh_error_prefix(err, code, "%s %s: ", r->method, r->client->uri);
}

/* Asks for the initial metadata in a batch of its own (tag_initial),
 * unless it was asked for already: gRPC 1.51 completes the status only
 * once it was. If the batch cannot start, there is nothing to collect. */
static grpc_call_error request_initial_md(fsh_flight_rpc *r) {
  if (r->initial_md_requested) return GRPC_CALL_OK;
  r->initial_md_requested = true;
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_INITIAL_METADATA;
  op.data.recv_initial_metadata.recv_initial_metadata = &r->initial_md;
  grpc_call_error ce = grpc_call_start_batch(r->call, &op, 1, &r->tag_initial, NULL);
  if (ce != GRPC_CALL_OK) r->initial_md_done = true; /* nothing to collect */
  return ce;
}

int fsh_flight_rpc_start(fsh_flight_client *c, const char *method, const char *auth_override,
                         fsh_flight_rpc **out, fsh_error *err) {
  *out = NULL;
  fsh_flight_rpc *r = fsh_calloc(1, sizeof *r);
  if (!r) return fsh_error_set(err, ENOMEM, "%s %s: out of memory", method, c->uri);
  r->client = c;
  r->method = method;
  r->prefetch = true; /* measured: ~10% more DoGet throughput (bench_flight) */
  atomic_init(&r->refs, 1);
  pthread_mutex_init(&r->status_mu, NULL);
  pthread_mutex_init(&r->wait_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->wait_cv, &ca);
  pthread_condattr_destroy(&ca);
  r->tag_send.rpc = r->tag_recv.rpc = r->tag_status.rpc = r->tag_initial.rpc = r;
  grpc_metadata_array_init(&r->initial_md);
  grpc_metadata_array_init(&r->trailing_md);
  r->details = grpc_empty_slice();

  /* The authorization header is copied now: a Handshake may replace the
   * client's token while this call runs. */
  pthread_mutex_lock(&c->mu);
  const char *auth = auth_override ? auth_override : c->auth_header;
  if (auth) {
    r->send_md[0].key = grpc_slice_from_static_string("authorization");
    r->send_md[0].value = grpc_slice_from_copied_string(auth);
    r->n_send_md = 1;
  }
  pthread_mutex_unlock(&c->mu);

  /* The bulk streams on the shared poller (fewer futex calls and context
   * switches per GB: client_poller.c); the other methods -- small control
   * calls whose latency matters (DoAction: the scheduler's task launches,
   * heartbeats, task-done) -- poll their own queue: no hand-over from
   * another thread. Measured round trip of a 1-byte DoAction on loopback
   * (2 CPUs, median of 2000): 80-90 us handed over by the poller, 37-38 us
   * on its own queue with the pollers parked (as without a poller); under
   * CPU load the hand-over's second wake-up made timing-sensitive tests
   * (tests/sched test_jobs) flakier. */
  r->own_cq = strcmp(method, "DoGet") != 0 && strcmp(method, "DoPut") != 0 &&
              strcmp(method, "DoExchange") != 0;
  r->cq = r->own_cq ? grpc_completion_queue_create_for_pluck(NULL) : fsh_flight_call_queue();
  if (!r->own_cq && r->cq) {
    fsh_flight_poller_call_begin();
    r->poller_call = true;
    r->readahead = true;
  }
  char path[128];
  snprintf(path, sizeof path, FSH_FLIGHT_SERVICE "%s", method);
  gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_REALTIME);
  if (c->timeout_ms > 0)
    deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                            gpr_time_from_millis(c->timeout_ms, GPR_TIMESPAN));
  if (r->cq) {
    /* A copied slice: a static one would be kept by reference past here. */
    grpc_slice method_slice = grpc_slice_from_copied_string(path);
    r->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq,
                                       method_slice, NULL, deadline, NULL);
    grpc_slice_unref(method_slice);
  }
  if (!r->call) {
    fsh_flight_rpc_unref(r);
    return fsh_error_set(err, EIO, "%s %s: cannot create the gRPC call", method, c->uri);
  }
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &r->trailing_md;
  op.data.recv_status_on_client.status = &r->status;
  op.data.recv_status_on_client.status_details = &r->details;
  grpc_call_error ce = grpc_call_start_batch(r->call, &op, 1, &r->tag_status, NULL);
  if (ce != GRPC_CALL_OK) {
    r->status_done = r->initial_md_done = r->initial_md_requested = true; /* nothing to collect */
  } else if (!r->own_cq) {
    ce = request_initial_md(r);
  } /* else it goes with the first send: fsh_flight_rpc_send */
  if (ce != GRPC_CALL_OK) {
    fsh_flight_rpc_unref(r);
    return fsh_error_set(err, EIO, "%s %s: gRPC: %s", method, c->uri,
                         grpc_call_error_to_string(ce));
  }
  *out = r;
  return 0;
}

/* The stall timeout ran out: cancels the call with DEADLINE_EXCEEDED. */
static void stall_cancel(fsh_flight_rpc *r, int64_t stall_ms) {
  char details[128];
  snprintf(details, sizeof details,
           "no message within %lld ms (the client's stall timeout): call cancelled",
           (long long)stall_ms);
  (void)grpc_call_cancel_with_status(r->call, GRPC_STATUS_DEADLINE_EXCEEDED, details, NULL);
}

/* Waits for the completion of tag (plucked from the call's own queue, or
 * handed over by the poller) and collects it; returns its success flag.
 * With stall_ms > 0, a completion that has not come within stall_ms
 * cancels the call (stall_cancel); the wait then goes on until gRPC
 * completes the tag (promptly, with failure). */
static bool pluck_within(fsh_flight_rpc *r, fsh_flight_tag *tag, int64_t stall_ms) {
  if (r->own_cq) {
    gpr_timespec forever = gpr_inf_future(GPR_CLOCK_REALTIME);
    gpr_timespec until = stall_ms > 0 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                     gpr_time_from_millis(stall_ms, GPR_TIMESPAN))
                                      : forever;
    grpc_event ev = grpc_completion_queue_pluck(r->cq, tag, until, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      stall_cancel(r, stall_ms);
      ev = grpc_completion_queue_pluck(r->cq, tag, forever, NULL);
    }
    return ev.type == GRPC_OP_COMPLETE && ev.success;
  }
  pthread_mutex_lock(&r->wait_mu);
  if (stall_ms > 0 && !tag->done) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t ns = until.tv_nsec + (stall_ms % 1000) * 1000000;
    until.tv_sec += (time_t)(stall_ms / 1000 + ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    while (!tag->done)
      if (pthread_cond_timedwait(&r->wait_cv, &r->wait_mu, &until) == ETIMEDOUT) break;
    if (!tag->done) stall_cancel(r, stall_ms);
  }
  while (!tag->done) pthread_cond_wait(&r->wait_cv, &r->wait_mu);
  tag->done = false;
  bool ok = tag->ok;
  pthread_mutex_unlock(&r->wait_mu);
  return ok;
}

static bool pluck(fsh_flight_rpc *r, fsh_flight_tag *tag) { return pluck_within(r, tag, 0); }

int fsh_flight_rpc_finish(fsh_flight_rpc *r, fsh_error *err) {
  pthread_mutex_lock(&r->status_mu);
  if (!r->status_done) {
    (void)request_initial_md(r); /* a small call that sent nothing */
    (void)pluck(r, &r->tag_status);
    r->status_done = true;
  }
  if (!r->initial_md_done) { /* complete once the status is */
    (void)pluck(r, &r->tag_initial);
    r->initial_md_done = true;
  }
  grpc_status_code st = r->status;
  pthread_mutex_unlock(&r->status_mu);
  if (st == GRPC_STATUS_OK) return 0;
  size_t n = GRPC_SLICE_LENGTH(r->details);
  int code = fsh_flight_errno_from_status(st);
  if (n == 0)
    return fsh_error_set(err, code, "%s %s: %s", r->method, r->client->uri,
                         fsh_flight_status_name(st));
  return fsh_error_set(err, code, "%s %s: %s: %.*s", r->method, r->client->uri,
                       fsh_flight_status_name(st), (int)(n > 900 ? 900 : n),
                       (const char *)GRPC_SLICE_START_PTR(r->details));
}

/* After a failed send or receive: the call's error, or, if the server
 * ended it with OK, that it closed the stream early. */
static int failed(fsh_flight_rpc *r, const char *what, fsh_error *err) {
  int rc = fsh_flight_rpc_finish(r, err);
  if (rc) return rc;
  return fsh_error_set(err, EPIPE, "%s %s: %s failed: the server ended the call", r->method,
                       r->client->uri, what);
}

/* fsh_flight_rpc_send of a small call's request: ONE batch sends the
 * initial metadata, msg and the half-close and receives the initial
 * metadata and the first response, one pluck. (The status stays in the
 * batch started with the call: chttp2 completes it only once every
 * received message was read, so with a stream of several responses a
 * batch holding both would never complete.) Per call, a DoAction that
 * answers nothing is 2 batches and 2 plucks, the second one already
 * complete, where separate steps took 4 and 4; one that answers one
 * result, 3 and 3, of which only the first waits when the status came
 * with the answer, where they took 5 and 5 (bench/shuffle/NOTIFY.md,
 * "Session 8"). */
static int send_unary(fsh_flight_rpc *r, grpc_byte_buffer *msg, fsh_error *err) {
  grpc_op ops[5];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = r->n_send_md;
  ops[0].data.send_initial_metadata.metadata = r->n_send_md ? r->send_md : NULL;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = msg;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &r->initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &r->recv_msg;
  r->sent_initial_md = r->sent_close = r->initial_md_requested = true;
  grpc_call_error ce = grpc_call_start_batch(r->call, ops, 5, &r->tag_send, NULL);
  if (ce != GRPC_CALL_OK) {
    grpc_byte_buffer_destroy(msg);
    r->initial_md_requested = false; /* fsh_flight_rpc_finish asks on its own */
    r->recv_done = true;
    return fsh_error_set(err, EIO, "%s %s: gRPC: %s", r->method, r->client->uri,
                         grpc_call_error_to_string(ce));
  }
  bool ok = pluck_within(r, &r->tag_send, r->client->stall_ms);
  grpc_byte_buffer_destroy(msg); /* only once the batch completed (grpc.h) */
  r->initial_md_done = true;     /* as every op of the batch */
  if (ok) {
    r->first_msg = r->recv_msg;
    r->recv_msg = NULL;
    r->first_ready = true;
    return 0;
  }
  /* The status says what failed (a deadline, the stall timeout, a refused
   * connection, the server's error); an OK one: the server ended the call
   * before it took the request, as when a separate send fails. */
  if (r->recv_msg) grpc_byte_buffer_destroy(r->recv_msg);
  r->recv_msg = NULL;
  r->recv_done = true;
  return failed(r, "sending", err);
}

int fsh_flight_rpc_send(fsh_flight_rpc *r, grpc_byte_buffer *msg, bool close, fsh_error *err) {
  if (r->own_cq && msg && close && !r->sent_initial_md && !r->initial_md_requested)
    return send_unary(r, msg, err);
  grpc_op ops[3];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (request_initial_md(r) != GRPC_CALL_OK) { /* a small call sending in steps */
    if (msg) grpc_byte_buffer_destroy(msg);
    return fsh_error_set(err, EIO, "%s %s: gRPC: cannot start receiving", r->method,
                         r->client->uri);
  }
  if (!r->sent_initial_md) {
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].data.send_initial_metadata.count = r->n_send_md;
    ops[n++].data.send_initial_metadata.metadata = r->n_send_md ? r->send_md : NULL;
  }
  if (msg) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = msg;
  }
  if (close && !r->sent_close) {
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    r->sent_close = true;
  }
  if (n == 0) return 0;
  r->sent_initial_md = true;
  grpc_call_error ce = grpc_call_start_batch(r->call, ops, n, &r->tag_send, NULL);
  bool ok = ce == GRPC_CALL_OK && pluck_within(r, &r->tag_send, r->client->stall_ms);
  if (msg) grpc_byte_buffer_destroy(msg);
  if (ce != GRPC_CALL_OK)
    return fsh_error_set(err, EIO, "%s %s: gRPC: %s", r->method, r->client->uri,
                         grpc_call_error_to_string(ce));
  return ok ? 0 : failed(r, "sending", err);
}

/* Starts receiving the next message into r->recv_msg. */
static grpc_call_error recv_start(fsh_flight_rpc *r) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &r->recv_msg;
  grpc_call_error ce = grpc_call_start_batch(r->call, &op, 1, &r->tag_recv, NULL);
  r->recv_pending = ce == GRPC_CALL_OK;
  return ce;
}

/* Starts the next receive of a read-ahead call unless one is in flight,
 * the stream ended or the call is being freed; wait_mu held. A receive
 * that cannot start ends the stream (the status tells why). */
static void readahead_start_locked(fsh_flight_rpc *r) {
  if (r->recv_pending || r->recv_end || r->recv_stop) return;
  if (recv_start(r) != GRPC_CALL_OK) r->recv_end = true;
}

void fsh_flight_rpc_recv_done(fsh_flight_rpc *r, bool ok) {
  pthread_mutex_lock(&r->wait_mu);
  r->recv_pending = false;
  grpc_byte_buffer *m = r->recv_msg;
  r->recv_msg = NULL;
  if (ok && m) {
    r->ahead[(r->ahead_head + r->ahead_n) % FSH_FLIGHT_READAHEAD] = m;
    r->ahead_bytes += grpc_byte_buffer_length(m);
    if (++r->ahead_n < FSH_FLIGHT_READAHEAD && r->ahead_bytes < FSH_FLIGHT_READAHEAD_BYTES)
      readahead_start_locked(r);
  } else {
    if (m) grpc_byte_buffer_destroy(m);
    r->recv_end = true;
  }
  /* The reader may free r as soon as it sees this: signal under the lock. */
  pthread_cond_broadcast(&r->wait_cv);
  pthread_mutex_unlock(&r->wait_mu);
}

/* fsh_flight_rpc_recv of a read-ahead call: takes the oldest queued
 * message, waiting for one (at most stall_ms, if set, then the call is
 * cancelled and the wait goes on until gRPC fails the receive); restarts
 * the receives if the queue was full. NULL at the end of the stream. */
static grpc_byte_buffer *readahead_take(fsh_flight_rpc *r, int64_t stall_ms) {
  pthread_mutex_lock(&r->wait_mu);
  if (r->ahead_n == 0) readahead_start_locked(r); /* the first receive */
  if (stall_ms > 0 && r->ahead_n == 0 && !r->recv_end) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t ns = until.tv_nsec + (stall_ms % 1000) * 1000000;
    until.tv_sec += (time_t)(stall_ms / 1000 + ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    while (r->ahead_n == 0 && !r->recv_end)
      if (pthread_cond_timedwait(&r->wait_cv, &r->wait_mu, &until) == ETIMEDOUT) break;
    if (r->ahead_n == 0 && !r->recv_end) stall_cancel(r, stall_ms);
  }
  while (r->ahead_n == 0 && !r->recv_end) pthread_cond_wait(&r->wait_cv, &r->wait_mu);
  grpc_byte_buffer *m = NULL;
  if (r->ahead_n > 0) {
    m = r->ahead[r->ahead_head];
    r->ahead_head = (r->ahead_head + 1) % FSH_FLIGHT_READAHEAD;
    r->ahead_n--;
    r->ahead_bytes -= grpc_byte_buffer_length(m);
    readahead_start_locked(r); /* if the poller left off (queue full) */
  }
  pthread_mutex_unlock(&r->wait_mu);
  return m;
}

/* One receive is kept in flight ahead of the caller, so that gRPC takes in
 * the next message while the caller decodes this one: on a read-ahead call
 * the poller restarts it as soon as a message is in (readahead_take), else
 * it is started as a message is handed out. */
int fsh_flight_rpc_recv(fsh_flight_rpc *r, grpc_byte_buffer **msg, fsh_error *err) {
  *msg = NULL;
  if (r->first_ready) { /* what the unary batch received */
    r->first_ready = false;
    *msg = r->first_msg;
    r->first_msg = NULL;
    if (*msg) {
      /* The next receive at once: when the status came with this answer,
       * it completes inside grpc_call_start_batch (end of stream) and the
       * next call here waits for nothing. (Looking first whether the
       * status is in, a pluck with a past deadline, saved this batch but
       * cost a non-blocking poll whenever the status came in a packet of
       * its own; it measured no better: NOTIFY.md, "Session 8".) */
      if (r->prefetch) (void)recv_start(r); /* a failure shows at the next receive */
      return 0;
    }
    r->recv_done = true;
    return fsh_flight_rpc_finish(r, err);
  }
  if (r->recv_done) return fsh_flight_rpc_finish(r, err);
  if (r->readahead) {
    *msg = readahead_take(r, r->client->stall_ms);
    if (*msg) return 0;
    r->recv_done = true;
    return fsh_flight_rpc_finish(r, err);
  }
  grpc_call_error ce = r->recv_pending ? GRPC_CALL_OK : recv_start(r);
  if (ce != GRPC_CALL_OK) {
    r->recv_done = true;
    return fsh_error_set(err, EIO, "%s %s: gRPC: %s", r->method, r->client->uri,
                         grpc_call_error_to_string(ce));
  }
  bool ok = pluck_within(r, &r->tag_recv, r->client->stall_ms);
  r->recv_pending = false;
  *msg = r->recv_msg;
  r->recv_msg = NULL;
  if (ok && *msg) {
    if (r->prefetch) (void)recv_start(r); /* a failure shows at the next receive */
    return 0;
  }
  if (*msg) {
    grpc_byte_buffer_destroy(*msg);
    *msg = NULL;
  }
  r->recv_done = true;
  return fsh_flight_rpc_finish(r, err);
}

void fsh_flight_rpc_cancel(fsh_flight_rpc *r) {
  if (r && r->call) (void)grpc_call_cancel(r->call, NULL);
}

fsh_flight_rpc *fsh_flight_rpc_ref(fsh_flight_rpc *r) {
  atomic_fetch_add(&r->refs, 1);
  return r;
}

void fsh_flight_rpc_unref(fsh_flight_rpc *r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
  if (r->call) {
    bool recv_pending = r->recv_pending;
    if (r->readahead) { /* the poller may be starting one */
      pthread_mutex_lock(&r->wait_mu);
      r->recv_stop = true;
      recv_pending = r->recv_pending;
      pthread_mutex_unlock(&r->wait_mu);
    }
    if (!r->status_done || !r->initial_md_done || recv_pending)
      (void)grpc_call_cancel(r->call, NULL);
    if (r->readahead) {
      pthread_mutex_lock(&r->wait_mu);
      while (r->recv_pending) pthread_cond_wait(&r->wait_cv, &r->wait_mu);
      for (; r->ahead_n > 0; r->ahead_n--, r->ahead_head = (r->ahead_head + 1) % FSH_FLIGHT_READAHEAD)
        grpc_byte_buffer_destroy(r->ahead[r->ahead_head]);
      pthread_mutex_unlock(&r->wait_mu);
    } else if (r->recv_pending) {
      (void)pluck(r, &r->tag_recv);
    }
    if (r->recv_msg) grpc_byte_buffer_destroy(r->recv_msg);
    if (r->first_msg) grpc_byte_buffer_destroy(r->first_msg);
    if (!r->status_done) {
      (void)request_initial_md(r); /* a small call that sent nothing */
      (void)pluck(r, &r->tag_status);
    }
    if (!r->initial_md_done) (void)pluck(r, &r->tag_initial);
    r->status_done = r->initial_md_done = true;
    grpc_call_unref(r->call);
  }
  if (r->own_cq && r->cq) grpc_completion_queue_destroy(r->cq); /* shuts it down first */
  if (r->poller_call) fsh_flight_poller_call_end(); /* every completion collected */
  grpc_metadata_array_destroy(&r->initial_md);
  grpc_metadata_array_destroy(&r->trailing_md);
  grpc_slice_unref(r->details);
  for (size_t i = 0; i < r->n_send_md; i++) {
    grpc_slice_unref(r->send_md[i].key);
    grpc_slice_unref(r->send_md[i].value);
  }
  pthread_mutex_destroy(&r->status_mu);
  pthread_cond_destroy(&r->wait_cv);
  pthread_mutex_destroy(&r->wait_mu);
  fsh_free(r);
}

char *fsh_flight_rpc_initial_md(fsh_flight_rpc *r, const char *key) {
  for (size_t i = 0; i < r->initial_md.count; i++) {
    grpc_slice k = r->initial_md.metadata[i].key;
    if (GRPC_SLICE_LENGTH(k) == strlen(key) &&
        strncasecmp((const char *)GRPC_SLICE_START_PTR(k), key, strlen(key)) == 0) {
      grpc_slice v = r->initial_md.metadata[i].value;
      return fsh_strndup((const char *)GRPC_SLICE_START_PTR(v), GRPC_SLICE_LENGTH(v));
    }
  }
  return NULL;
}

/* ---- unary and server-streaming calls ---------------------------------------- */

/* Called with each response message (the callback does not own it). */
typedef int (*on_message_fn)(void *ctx, grpc_byte_buffer *bb, fsh_error *err);

/* Sends request (taken; NULL = none), half-closes, and hands every response
 * to on_message until the end; the status decides. */
static int call_stream(fsh_flight_client *c, const char *method, grpc_byte_buffer *request,
                       on_message_fn on_message, void *ctx, int64_t *n_messages, fsh_error *err) {
  fsh_flight_rpc *r = NULL;
  int64_t n = 0;
  int rc = fsh_flight_rpc_start(c, method, NULL, &r, err);
  if (rc) {
    if (request) grpc_byte_buffer_destroy(request);
    return rc;
  }
  rc = fsh_flight_rpc_send(r, request, true, err);
  while (rc == 0) {
    grpc_byte_buffer *bb = NULL;
    if ((rc = fsh_flight_rpc_recv(r, &bb, err)) != 0 || !bb) break;
    n++;
    rc = on_message(ctx, bb, err);
    grpc_byte_buffer_destroy(bb);
    if (rc) rc = fsh_flight_rpc_error(r, rc, err); /* the call is cancelled below */
  }
  fsh_flight_rpc_unref(r);
  if (n_messages) *n_messages = n;
  return rc;
}

/* A unary call: exactly one response message wanted. */
static int call_unary(fsh_flight_client *c, const char *method, grpc_byte_buffer *request,
                      on_message_fn on_message, void *ctx, fsh_error *err) {
  int64_t n = 0;
  FSH_RETURN_NOT_OK(call_stream(c, method, request, on_message, ctx, &n, err));
  if (n != 1)
    return fsh_error_set(err, EPROTO, "%s %s: %lld responses to a unary call", method, c->uri,
                         (long long)n);
  return 0;
}

static int on_info(void *ctx, grpc_byte_buffer *bb, fsh_error *err) {
  fsh_flight_info *out = ctx;
  fsh_flight_info_reset(out); /* a repeated answer replaces the previous one */
  int rc = fsh_flight_wire_decode_info(bb, out, err);
  if (rc) fsh_flight_info_reset(out);
  return rc;
}

static int on_info_list(void *ctx, grpc_byte_buffer *bb, fsh_error *err) {
  fsh_flight_info info;
  memset(&info, 0, sizeof info);
  int rc = fsh_flight_wire_decode_info(bb, &info, err);
  if (rc == 0 && fsh_flight_info_list_push(ctx, &info) != 0)
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (rc) fsh_flight_info_reset(&info);
  return rc;
}

static int on_result(void *ctx, grpc_byte_buffer *bb, fsh_error *err) {
  fsh_bytes b = {0};
  int rc = fsh_flight_wire_decode_bytes(FSH_WIRE_RESULT, bb, &b, err);
  if (rc == 0 && fsh_flight_result_list_push(ctx, b.data, b.size) != 0)
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  fsh_bytes_reset(&b);
  return rc;
}

static int on_action_type(void *ctx, grpc_byte_buffer *bb, fsh_error *err) {
  fsh_flight_action_type t;
  memset(&t, 0, sizeof t);
  int rc = fsh_flight_wire_decode_action_type(bb, &t, err);
  if (rc == 0 && fsh_flight_action_type_list_push(ctx, t.type ? t.type : "",
                                                  t.description ? t.description : "") != 0)
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  fsh_flight_action_type_reset(&t);
  return rc;
}

typedef struct poll_ctx {
  fsh_flight_info *info;
  double *progress;
  bool *done;
} poll_ctx;

static int on_poll(void *ctx, grpc_byte_buffer *bb, fsh_error *err) {
  poll_ctx *p = ctx;
  fsh_flight_info_reset(p->info);
  int rc = fsh_flight_wire_decode_poll_info(bb, p->info, p->progress, p->done, err);
  if (rc) fsh_flight_info_reset(p->info);
  return rc;
}

static int on_schema(void *ctx, grpc_byte_buffer *bb, fsh_error *err) {
  fsh_schema **out = ctx;
  fsh_bytes b = {0};
  int rc = fsh_flight_wire_decode_bytes(FSH_WIRE_SCHEMA_RESULT, bb, &b, err);
  fsh_schema *s = NULL;
  if (rc == 0) rc = fsh_flight_schema_from_bytes(&b, &s, err);
  fsh_bytes_reset(&b);
  if (rc == 0) {
    fsh_schema_unref(*out);
    *out = s;
  }
  return rc;
}

static int encode_error(fsh_flight_client *c, const char *method, int rc, fsh_error *err) {
  return fsh_error_prefix(err, rc, "%s %s: encoding the request: ", method, c->uri);
}

int fsh_flight_list_flights(fsh_flight_client *c, const fsh_bytes *criteria,
                            fsh_flight_info_list *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_bytes(FSH_WIRE_CRITERIA, criteria ? criteria->data : NULL,
                                        criteria ? criteria->size : 0, &req, err);
  if (rc) return encode_error(c, "ListFlights", rc, err);
  rc = call_stream(c, "ListFlights", req, on_info_list, out, NULL, err);
  if (rc) fsh_flight_info_list_reset(out);
  return rc;
}

int fsh_flight_get_flight_info(fsh_flight_client *c, const fsh_flight_descriptor *d,
                               fsh_flight_info *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_descriptor(d, &req, err);
  if (rc) return encode_error(c, "GetFlightInfo", rc, err);
  rc = call_unary(c, "GetFlightInfo", req, on_info, out, err);
  if (rc) fsh_flight_info_reset(out);
  return rc;
}

int fsh_flight_poll_flight_info(fsh_flight_client *c, const fsh_flight_descriptor *d,
                                fsh_flight_info *out, double *progress, bool *done,
                                fsh_error *err) {
  memset(out, 0, sizeof *out);
  double prog = -1;
  bool fin = false;
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_descriptor(d, &req, err);
  if (rc) return encode_error(c, "PollFlightInfo", rc, err);
  poll_ctx p = {out, &prog, &fin};
  rc = call_unary(c, "PollFlightInfo", req, on_poll, &p, err);
  if (rc) {
    fsh_flight_info_reset(out);
    return rc;
  }
  if (progress) *progress = prog;
  if (done) *done = fin;
  return 0;
}

int fsh_flight_get_schema(fsh_flight_client *c, const fsh_flight_descriptor *d, fsh_schema **out,
                          fsh_error *err) {
  *out = NULL;
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_descriptor(d, &req, err);
  if (rc) return encode_error(c, "GetSchema", rc, err);
  fsh_schema *s = NULL;
  rc = call_unary(c, "GetSchema", req, on_schema, &s, err);
  if (rc) {
    fsh_schema_unref(s);
    return rc;
  }
  *out = s;
  return 0;
}

int fsh_flight_do_action(fsh_flight_client *c, const fsh_flight_action *a,
                         fsh_flight_result_list *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_action(a, &req, err);
  if (rc) return encode_error(c, "DoAction", rc, err);
  rc = call_stream(c, "DoAction", req, on_result, out, NULL, err);
  if (rc) fsh_flight_result_list_reset(out);
  return rc;
}

int fsh_flight_list_actions(fsh_flight_client *c, fsh_flight_action_type_list *out,
                            fsh_error *err) {
  memset(out, 0, sizeof *out);
  int rc = call_stream(c, "ListActions", fsh_flight_wire_empty(), on_action_type, out, NULL, err);
  if (rc) fsh_flight_action_type_list_reset(out);
  return rc;
}

/* ---- Handshake ------------------------------------------------------------------ */

static char *base64(const uint8_t *in, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = fsh_malloc(4 * ((n + 2) / 3) + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < n) v |= in[i + 2];
    out[o++] = tab[(v >> 18) & 63];
    out[o++] = tab[(v >> 12) & 63];
    out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? tab[v & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

/* "authorization: Basic base64(user:password)" */
static char *basic_header(const char *user, const char *password) {
  size_t nu = strlen(user), np = strlen(password);
  char *plain = fsh_malloc(nu + np + 2);
  if (!plain) return NULL;
  snprintf(plain, nu + np + 2, "%s:%s", user, password);
  char *b64 = base64((const uint8_t *)plain, nu + np + 1);
  memset(plain, 0, nu + np + 1);
  fsh_free(plain);
  if (!b64) return NULL;
  size_t n = strlen(b64) + sizeof "Basic ";
  char *h = fsh_malloc(n);
  if (h) snprintf(h, n, "Basic %s", b64);
  fsh_free(b64);
  return h;
}

/* Both conventions at once: the credentials go as an "authorization: Basic"
 * header (Arrow C++ / pyarrow authenticate_basic_token: the token comes
 * back as an "authorization: Bearer" response header) and as a BasicAuth
 * HandshakeRequest payload (the older handshake: the token is the payload
 * of the HandshakeResponse). The header wins when both are answered. */
int fsh_flight_handshake(fsh_flight_client *c, const char *user, const char *password,
                         char **token, fsh_error *err) {
  if (token) *token = NULL;
  if (!user || !password)
    return fsh_error_set(err, EINVAL, "Handshake %s: no user or password", c->uri);
  char *basic = basic_header(user, password);
  if (!basic) return fsh_error_set(err, ENOMEM, "Handshake %s: out of memory", c->uri);
  fsh_bytes payload = {0};
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_basic_auth(user, password, &payload, err);
  if (rc == 0) rc = fsh_flight_wire_encode_handshake(0, payload.data, payload.size, &req, err);
  if (payload.data) memset(payload.data, 0, (size_t)payload.size);
  fsh_bytes_reset(&payload);
  if (rc) {
    fsh_free(basic);
    return encode_error(c, "Handshake", rc, err);
  }
  fsh_flight_rpc *r = NULL;
  rc = fsh_flight_rpc_start(c, "Handshake", basic, &r, err);
  memset(basic, 0, strlen(basic));
  fsh_free(basic);
  if (rc) {
    grpc_byte_buffer_destroy(req);
    return rc;
  }
  fsh_bytes answer = {0};
  rc = fsh_flight_rpc_send(r, req, true, err);
  while (rc == 0) {
    grpc_byte_buffer *bb = NULL;
    if ((rc = fsh_flight_rpc_recv(r, &bb, err)) != 0 || !bb) break;
    uint64_t version = 0;
    fsh_bytes_reset(&answer);
    rc = fsh_flight_wire_decode_handshake(bb, &version, &answer, err);
    grpc_byte_buffer_destroy(bb);
    if (rc) rc = fsh_flight_rpc_error(r, rc, err);
  }
  char *tok = NULL;
  if (rc == 0) {
    char *h = fsh_flight_rpc_initial_md(r, "authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
      tok = fsh_strdup(h + 7);
      if (!tok) rc = ENOMEM;
    } else if (answer.size > 0) {
      tok = fsh_strndup((const char *)answer.data, (size_t)answer.size);
      if (!tok) rc = ENOMEM;
    } else {
      rc = fsh_error_set(err, EPROTO, "Handshake %s: the server answered no token", c->uri);
    }
    fsh_free(h);
    if (rc == ENOMEM) fsh_error_set(err, rc, "Handshake %s: out of memory", c->uri);
  }
  fsh_bytes_reset(&answer);
  fsh_flight_rpc_unref(r);
  if (rc) return rc;

  size_t n = strlen(tok) + sizeof "Bearer ";
  char *header = fsh_malloc(n);
  char *copy = token ? fsh_strdup(tok) : NULL;
  if (!header || (token && !copy)) {
    fsh_free(header);
    fsh_free(copy);
    fsh_free(tok);
    return fsh_error_set(err, ENOMEM, "Handshake %s: out of memory", c->uri);
  }
  snprintf(header, n, "Bearer %s", tok);
  fsh_free(tok);
  pthread_mutex_lock(&c->mu);
  char *old = c->auth_header;
  c->auth_header = header;
  pthread_mutex_unlock(&c->mu);
  fsh_free(old);
  if (token) *token = copy;
  return 0;
}
