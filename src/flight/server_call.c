/* server_call.c -- the per-call state machine every Flight method runs on:
 * requesting calls, dispatching completion-queue events, the receive and
 * send pumps (one message in flight each way), finishing with a status, and
 * freeing the call once its last batch has completed. */
#include "flight/server_internal.h"

#include <errno.h>
#include <grpc/support/alloc.h>
#include <string.h>

/* ---- facts handlers can ask for ------------------------------------------ */

const char *fsh_flight_call_peer(const fsh_flight_call *c) {
  return c && c->peer ? c->peer : "";
}
const char *fsh_flight_call_identity(const fsh_flight_call *c) {
  return c && c->identity ? c->identity : "";
}
/* failed is the call's thread's own; close_cancelled is written by gRPC on
 * a poller thread (when the client's cancel is read), possibly while a
 * handler on the call's thread polls this: an atomic load. */
bool fsh_flight_call_cancelled(const fsh_flight_call *c) {
  return c && (c->failed || __atomic_load_n(&c->close_cancelled, __ATOMIC_ACQUIRE));
}

void srv_call_set_identity(fsh_flight_call *c, const char *identity) {
  fsh_free(c->identity);
  c->identity = identity && *identity ? fsh_strdup(identity) : NULL;
}

/* ---- lifetime --------------------------------------------------------------- */

static void srv_call_destroy(fsh_flight_call *c) {
  srv_call_release_state(c);
  if (c->call) grpc_call_unref(c->call);
  grpc_metadata_array_destroy(&c->request_md);
  if (c->initial_payload) grpc_byte_buffer_destroy(c->initial_payload);
  if (c->recv_buf) grpc_byte_buffer_destroy(c->recv_buf);
  if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
  for (size_t i = 0; i < c->n_out_md; i++) {
    grpc_slice_unref(c->out_md[i].key);
    grpc_slice_unref(c->out_md[i].value);
  }
  if (c->peer) gpr_free(c->peer);
  fsh_free(c->identity);
  fsh_free(c->final_details);
  atomic_fetch_sub(&c->server->live, 1);
  fsh_free(c);
}

int srv_request_call(srv_worker *w, srv_method m) {
  fsh_flight_server *s = w->server;
  if (atomic_load(&s->stopping)) return ECANCELED;
  fsh_flight_call *c = fsh_calloc(1, sizeof *c);
  if (!c) return ENOMEM;
  c->server = s;
  c->requester = w;
  unsigned k = (unsigned)w->index + atomic_fetch_add(&w->next_bind[m], 1);
  c->worker = &s->workers[k % (unsigned)s->n_workers];
  c->method = m;
  srv_tag *tags[] = {&c->tag_new,    &c->tag_begin, &c->tag_recv, &c->tag_send,
                     &c->tag_status, &c->tag_md,    &c->tag_close};
  srv_tag_kind kinds[] = {SRV_TAG_NEW,    SRV_TAG_BEGIN, SRV_TAG_RECV, SRV_TAG_SEND,
                          SRV_TAG_STATUS, SRV_TAG_MD,    SRV_TAG_CLOSE};
  for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
    tags[i]->kind = kinds[i];
    tags[i]->call = c;
  }
  grpc_metadata_array_init(&c->request_md);
  atomic_fetch_add(&s->live, 1);
  grpc_call_error e = grpc_server_request_registered_call(
      s->server, s->methods[m], &c->call, &c->deadline, &c->request_md,
      srv_method_reads_initial(m) ? &c->initial_payload : NULL, c->worker->cq, w->cq,
      &c->tag_new);
  if (e != GRPC_CALL_OK) {
    srv_call_destroy(c);
    return EINVAL;
  }
  return 0;
}

void srv_arm(srv_worker *w, srv_method m) {
  if (srv_request_call(w, m) == ENOMEM) atomic_fetch_add(&w->unarmed[m], 1);
}

bool srv_rearm_missing(srv_worker *w) {
  bool missing = false;
  for (int m = 0; m < SRV_N_METHODS; m++) {
    while (atomic_load(&w->unarmed[m]) > 0 && srv_request_call(w, (srv_method)m) == 0)
      atomic_fetch_sub(&w->unarmed[m], 1);
    if (atomic_load(&w->server->stopping)) atomic_store(&w->unarmed[m], 0);
    missing |= atomic_load(&w->unarmed[m]) > 0;
  }
  return missing;
}

/* An op failed or the call was cancelled: start nothing more; cancelling
 * makes every outstanding batch complete so the call can be freed. */
static void srv_call_fail(fsh_flight_call *c) {
  if (c->failed) return;
  c->failed = true;
  if (c->call) grpc_call_cancel(c->call, NULL);
}

static bool srv_start_batch(fsh_flight_call *c, const grpc_op *ops, size_t n, srv_tag *tag) {
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (e != GRPC_CALL_OK) {
    srv_call_fail(c);
    return false;
  }
  c->pending++;
  return true;
}

static void srv_fill_initial_md(fsh_flight_call *c, grpc_op *op) {
  memset(op, 0, sizeof *op);
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  op->data.send_initial_metadata.count = c->n_out_md;
  op->data.send_initial_metadata.metadata = c->n_out_md ? c->out_md : NULL;
  c->initial_md_sent = true;
}

int srv_call_set_out_md(fsh_flight_call *c, const char *key, const char *value) {
  if (c->n_out_md >= sizeof c->out_md / sizeof c->out_md[0] || c->initial_md_sent) return EINVAL;
  c->out_md[c->n_out_md].key = grpc_slice_from_copied_string(key);
  c->out_md[c->n_out_md].value = grpc_slice_from_copied_string(value);
  c->n_out_md++;
  return 0;
}

void srv_call_send_initial_md(fsh_flight_call *c) {
  if (c->initial_md_sent || c->failed || c->status_started) return;
  grpc_op op;
  srv_fill_initial_md(c, &op);
  (void)srv_start_batch(c, &op, 1, &c->tag_md);
}

/* ---- status ------------------------------------------------------------------ */

static void srv_call_send_status(fsh_flight_call *c) {
  grpc_op ops[2];
  size_t n = 0;
  if (!c->initial_md_sent) srv_fill_initial_md(c, &ops[n++]);
  grpc_slice details = grpc_empty_slice();
  if (c->final_details) details = grpc_slice_from_copied_string(c->final_details);
  memset(&ops[n], 0, sizeof ops[n]);
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = c->final_code;
  ops[n].data.send_status_from_server.status_details = c->final_details ? &details : NULL;
  n++;
  c->status_started = true;
  (void)srv_start_batch(c, ops, n, &c->tag_status);
  grpc_slice_unref(details); /* not retained past start_batch */
}

void srv_call_finish(fsh_flight_call *c, grpc_status_code code, const char *details) {
  if (c->status_started || c->finish_deferred || c->failed) return;
  c->final_code = code;
  c->final_details = details && *details ? fsh_strdup(details) : NULL;
  if (c->send_pending) {
    c->finish_deferred = true; /* one send at a time: status goes after it */
    return;
  }
  srv_call_send_status(c);
}

void srv_call_finish_errno(fsh_flight_call *c, int rc, const fsh_error *err) {
  char msg[1100];
  if (err && err->message[0])
    snprintf(msg, sizeof msg, "%s", err->message);
  else
    snprintf(msg, sizeof msg, "%s failed: %s", srv_method_name(c->method), strerror(rc));
  srv_call_finish(c, fsh_flight_status_from_errno(rc), msg);
}

/* ---- pumps ------------------------------------------------------------------- */

void srv_call_recv(fsh_flight_call *c) {
  if (c->failed || c->status_started || c->finish_deferred || c->recv_pending || c->recv_done)
    return;
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv_buf;
  if (srv_start_batch(c, &op, 1, &c->tag_recv)) c->recv_pending = true;
}

void srv_call_pump(fsh_flight_call *c) {
  if (c->failed || c->status_started || c->finish_deferred || c->send_pending) return;
  if (c->produce_done) {
    if (c->recv_done) srv_call_finish(c, GRPC_STATUS_OK, NULL);
    return;
  }
  grpc_byte_buffer *bb = NULL;
  bool done = false;
  fsh_error err;
  err.message[0] = '\0';
  int rc = c->ops->produce(c, &bb, &done, &err);
  if (rc == EAGAIN) {
    if (c->recv_done)
      srv_call_finish(c, GRPC_STATUS_INTERNAL,
                      "the server's source has nothing to send and nothing more will arrive");
    return;
  }
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  if (done || !bb) {
    if (bb) grpc_byte_buffer_destroy(bb);
    c->produce_done = true;
    if (c->recv_done) srv_call_finish(c, GRPC_STATUS_OK, NULL);
    return;
  }
  grpc_op ops[3];
  size_t n = 0;
  if (!c->initial_md_sent) srv_fill_initial_md(c, &ops[n++]);
  memset(&ops[n], 0, sizeof ops[n]);
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n].data.send_message.send_message = bb;
  n++;
  c->send_buf = bb;
  if (c->produce_last && c->recv_done) {
    /* a list's last message (DoAction's last result, ListFlights' last
     * info) with the OK status: one packet and one wake-up of the client
     * instead of two (bench/shuffle/NOTIFY.md, session 8: ~0.7x the
     * latency and CPU of a one-result call). The send's completion ends
     * the call: status_started stops the pump. */
    memset(&ops[n], 0, sizeof ops[n]);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
    n++;
    c->final_code = GRPC_STATUS_OK;
    c->produce_done = c->status_started = true;
  }
  if (srv_start_batch(c, ops, n, &c->tag_send)) c->send_pending = true;
}

/* ---- arrival ----------------------------------------------------------------- */

static void srv_call_begin(fsh_flight_call *c) {
  c->peer = grpc_call_get_peer(c->call);
  srv_auth_tls_identity(c);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->close_cancelled;
  if (!srv_start_batch(c, &op, 1, &c->tag_close)) return;

  if (c->method != SRV_HANDSHAKE && !srv_auth_check_bearer(c)) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "%s: missing or invalid credentials (expected header "
             "'authorization: Bearer <token>')",
             srv_method_name(c->method));
    srv_call_finish(c, GRPC_STATUS_UNAUTHENTICATED, msg);
    return;
  }
  switch (c->method) {
    case SRV_HANDSHAKE: srv_dispatch_handshake(c); break;
    case SRV_GET_FLIGHT_INFO:
    case SRV_POLL_FLIGHT_INFO:
    case SRV_GET_SCHEMA: srv_dispatch_unary(c); break;
    case SRV_LIST_FLIGHTS:
    case SRV_DO_ACTION:
    case SRV_LIST_ACTIONS: srv_dispatch_list(c); break;
    case SRV_DO_GET: srv_dispatch_do_get(c); break;
    case SRV_DO_PUT: srv_dispatch_do_put(c); break;
    case SRV_DO_EXCHANGE: srv_dispatch_do_exchange(c); break;
    default: srv_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method"); break;
  }
}

void srv_handle_event(fsh_flight_server *s, srv_tag *tag, bool ok) {
  if (tag->kind == SRV_TAG_SHUTDOWN) {
    pthread_mutex_lock(&s->mu);
    s->shutdown_done = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  fsh_flight_call *c = tag->call;
  switch (tag->kind) {
    case SRV_TAG_NEW:
      if (!ok) { /* the server is shutting down: this request is void */
        srv_call_destroy(c);
        return;
      }
      srv_arm(c->requester, c->method); /* re-arm the slot first */
      if (c->worker != c->requester) {
        /* Another thread's call: an empty batch puts tag_begin on its
         * queue at once. From here on only that thread touches c. Once
         * stop() began the pool's queues may be shut down (a batch on one
         * aborts gRPC): the call is dropped instead, and `handoffs` lets
         * srv_free wait out a poller that checked `stopping` just before. */
        atomic_fetch_add(&s->handoffs, 1);
        if (!atomic_load(&s->stopping)) {
          c->pending++;
          if (grpc_call_start_batch(c->call, NULL, 0, &c->tag_begin, NULL) == GRPC_CALL_OK) {
            atomic_fetch_sub(&s->handoffs, 1);
            return;
          }
          c->pending--; /* not expected */
        }
        atomic_fetch_sub(&s->handoffs, 1);
        grpc_call_cancel(c->call, NULL); /* the client sees CANCELLED */
        break;
      }
      srv_call_begin(c);
      break;
    case SRV_TAG_BEGIN:
      c->pending--;
      srv_call_begin(c);
      break;
    case SRV_TAG_RECV: {
      c->pending--;
      c->recv_pending = false;
      grpc_byte_buffer *bb = c->recv_buf;
      c->recv_buf = NULL;
      if (!ok) {
        if (bb) grpc_byte_buffer_destroy(bb);
        srv_call_fail(c);
      } else if (c->failed || c->status_started || c->finish_deferred) {
        if (bb) grpc_byte_buffer_destroy(bb);
      } else if (!bb) {
        c->recv_done = true;
        c->ops->on_end(c);
      } else {
        /* DoPut: the next receive first, so that gRPC keeps the stream's
         * window open while the sink takes this message (one message read
         * ahead; a slow sink still stops the stream). Not before the
         * handler has opened the sink: a handler that takes its time (or
         * refuses the call) gets nothing past the window. (A pending
         * receive lets gRPC take in a whole message, however large.)
         * DoExchange decides after the sink (it may pause, EBUSY). */
        if (c->method == SRV_DO_PUT && c->got_first) srv_call_recv(c);
        c->ops->on_message(c, bb);
      }
      break;
    }
    case SRV_TAG_SEND:
      c->pending--;
      c->send_pending = false;
      if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
      c->send_buf = NULL;
      if (!ok)
        srv_call_fail(c);
      else if (c->finish_deferred) {
        c->finish_deferred = false;
        srv_call_send_status(c);
      } else {
        srv_call_pump(c);
        if (c->recv_paused) { /* the sink held reads until a send went out */
          c->recv_paused = false;
          srv_call_recv(c);
        }
      }
      break;
    case SRV_TAG_STATUS:
    case SRV_TAG_MD:
      c->pending--;
      if (!ok) srv_call_fail(c);
      break;
    case SRV_TAG_CLOSE:
      c->pending--;
      if (c->close_cancelled) srv_call_fail(c);
      break;
    case SRV_TAG_SHUTDOWN: break;
  }
  if (c->pending == 0) srv_call_destroy(c);
}
