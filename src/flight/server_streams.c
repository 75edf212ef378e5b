/* server_streams.c -- the FlightData streams: DoGet (a source pulled one
 * message per completed send), DoPut (a sink fed one message per completed
 * receive; once the handler opened the sink, the next receive starts as
 * the sink is handed a message (srv_handle_event), so at most one more
 * message waits while the sink works) and DoExchange (both at once on one call; its next receive starts
 * after the sink returned, which may pause it). */
#include "flight/server_internal.h"

#include <errno.h>
#include <string.h>

static void srv_stream_unimplemented(fsh_flight_call *c) {
  char msg[128];
  snprintf(msg, sizeof msg, "%s is not implemented by this server", srv_method_name(c->method));
  srv_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, msg);
}

/* Pulls one message from the call's source and encodes it as FlightData
 * (an app_metadata in pieces -- next_pieces -- as slices on the pieces'
 * buffers, encoded before the source is called again). */
static int srv_source_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done,
                              fsh_error *err) {
  fsh_ipc_payload p;
  memset(&p, 0, sizeof p);
  fsh_buffer *app = NULL;
  bool end = false;
  if (c->source->next_pieces) {
    const fsh_flight_piece *pieces = NULL;
    int64_t n_pieces = 0;
    int rc = c->source->next_pieces(c->source, &p, &pieces, &n_pieces, &end, err);
    if (rc == 0 && end)
      *done = true;
    else if (rc == 0)
      rc = fsh_flight_data_encode_pieces(p.metadata ? &p : NULL, pieces, n_pieces, NULL, out, err);
    fsh_ipc_payload_reset(&p);
    return rc;
  }
  int rc = c->source->next(c->source, &p, &app, &end, err);
  if (rc == 0 && end) {
    *done = true;
  } else if (rc == 0) {
    rc = fsh_flight_data_encode(p.metadata ? &p : NULL, app, NULL, out, err);
  }
  fsh_ipc_payload_reset(&p);
  fsh_buffer_unref(app);
  return rc;
}

/* Decodes a received FlightData; on error ends the call (INVALID_ARGUMENT). */
static int srv_decode_message(fsh_flight_call *c, grpc_byte_buffer *bb, fsh_flight_message *m) {
  fsh_error err;
  err.message[0] = '\0';
  memset(m, 0, sizeof *m);
  int rc = fsh_flight_data_decode(bb, m, &err);
  grpc_byte_buffer_destroy(bb);
  if (rc != 0) {
    fsh_flight_message_reset(m);
    (void)fsh_error_prefix(&err, rc, "%s: invalid FlightData: ", srv_method_name(c->method));
    srv_call_finish_errno(c, rc == ENOMEM ? ENOMEM : EINVAL, &err);
  }
  return rc;
}

/* ---- DoGet ---------------------------------------------------------------- */

static int srv_do_get_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done,
                              fsh_error *err) {
  int rc = srv_source_produce(c, out, done, err);
  if (rc == EAGAIN)
    return fsh_error_set(err, EIO, "DoGet: the source returned EAGAIN (only DoExchange may wait)");
  return rc;
}

static const srv_call_ops srv_do_get_ops = {NULL, NULL, srv_do_get_produce};

void srv_dispatch_do_get(fsh_flight_call *c) {
  const fsh_flight_handlers *h = &c->server->handlers;
  c->ops = &srv_do_get_ops;
  c->recv_done = true;
  if (!h->do_get) {
    srv_stream_unimplemented(c);
    return;
  }
  fsh_error err;
  err.message[0] = '\0';
  fsh_bytes ticket = {NULL, 0};
  int rc = c->initial_payload
               ? fsh_flight_wire_decode_bytes(FSH_WIRE_TICKET, c->initial_payload, &ticket, &err)
               : fsh_error_set(&err, EINVAL, "no request message");
  if (rc != 0) {
    fsh_bytes_reset(&ticket);
    (void)fsh_error_prefix(&err, rc, "DoGet: invalid Ticket: ");
    srv_call_finish_errno(c, rc == ENOMEM ? ENOMEM : EINVAL, &err);
    return;
  }
  rc = h->do_get(h->ctx, c, &ticket, &c->source, &err);
  fsh_bytes_reset(&ticket);
  if (rc == 0 && !c->source) rc = fsh_error_set(&err, EIO, "DoGet: the handler returned no source");
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  srv_call_pump(c);
}

/* ---- DoPut ----------------------------------------------------------------- */

static void srv_do_put_message(fsh_flight_call *c, grpc_byte_buffer *bb) {
  const fsh_flight_handlers *h = &c->server->handlers;
  fsh_flight_message m;
  if (srv_decode_message(c, bb, &m) != 0) return;
  fsh_error err;
  err.message[0] = '\0';
  int rc = 0;
  if (!c->got_first) {
    c->got_first = true;
    rc = h->do_put(h->ctx, c, &m, &c->sink, &err);
    if (rc == 0 && !c->sink) rc = fsh_error_set(&err, EIO, "DoPut: the handler returned no sink");
  }
  if (rc == 0) rc = c->sink->message(c->sink, &m, &err);
  fsh_flight_message_reset(&m);
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  srv_call_recv(c); /* started already (srv_handle_event) unless that failed */
}

static void srv_do_put_end(fsh_flight_call *c) {
  if (!c->got_first) {
    srv_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
                    "DoPut: the client sent no FlightData (the descriptor and schema come first)");
    return;
  }
  fsh_error err;
  err.message[0] = '\0';
  fsh_buffer *result = NULL;
  int rc = c->sink->finish(c->sink, &result, &err);
  if (rc == 0 && result)
    rc = fsh_flight_wire_encode_bytes(FSH_WIRE_PUT_RESULT, result->data, result->size, &c->reply,
                                      &err);
  fsh_buffer_unref(result);
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  srv_call_pump(c);
}

static const srv_call_ops srv_do_put_ops = {srv_do_put_message, srv_do_put_end,
                                            srv_reply_produce};

void srv_dispatch_do_put(fsh_flight_call *c) {
  c->ops = &srv_do_put_ops;
  if (!c->server->handlers.do_put) {
    srv_stream_unimplemented(c);
    return;
  }
  srv_call_send_initial_md(c);
  srv_call_recv(c);
}

/* ---- DoExchange ---------------------------------------------------------- */

/* Calls the handler with the first message (an empty one if the client
 * half-closed without sending anything). 0 or the call is finished. */
static int srv_exchange_open(fsh_flight_call *c, fsh_flight_message *first) {
  const fsh_flight_handlers *h = &c->server->handlers;
  fsh_error err;
  err.message[0] = '\0';
  c->got_first = true;
  int rc = h->do_exchange(h->ctx, c, first, &c->sink, &c->source, &err);
  if (rc == 0 && !c->sink && !c->source)
    rc = fsh_error_set(&err, EIO, "DoExchange: the handler returned neither a sink nor a source");
  if (rc != 0) srv_call_finish_errno(c, rc, &err);
  return rc;
}

static void srv_exchange_message(fsh_flight_call *c, grpc_byte_buffer *bb) {
  fsh_flight_message m;
  if (srv_decode_message(c, bb, &m) != 0) return;
  int rc = 0;
  if (!c->got_first) rc = srv_exchange_open(c, &m);
  if (rc == 0 && c->sink) {
    fsh_error err;
    err.message[0] = '\0';
    rc = c->sink->message(c->sink, &m, &err);
    if (rc == EBUSY) {
      rc = 0;
      c->recv_paused = true; /* srv_call_resume_recv after the next send */
    }
    if (rc != 0) srv_call_finish_errno(c, rc, &err);
  }
  fsh_flight_message_reset(&m);
  if (rc != 0) return;
  srv_call_pump(c); /* the source may have something now */
  if (!c->recv_paused) srv_call_recv(c);
}

static void srv_exchange_end(fsh_flight_call *c) {
  if (!c->got_first) {
    fsh_flight_message empty;
    memset(&empty, 0, sizeof empty);
    if (srv_exchange_open(c, &empty) != 0) return;
  }
  if (c->sink) {
    fsh_error err;
    err.message[0] = '\0';
    fsh_buffer *result = NULL;
    int rc = c->sink->finish(c->sink, &result, &err);
    fsh_buffer_unref(result); /* DoExchange has no PutResult */
    if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  }
  srv_call_pump(c);
}

static int srv_exchange_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done,
                                fsh_error *err) {
  if (!c->source) {
    if (!c->recv_done) return EAGAIN;
    *done = true;
    return 0;
  }
  return srv_source_produce(c, out, done, err);
}

static const srv_call_ops srv_exchange_ops = {srv_exchange_message, srv_exchange_end,
                                              srv_exchange_produce};

void srv_dispatch_do_exchange(fsh_flight_call *c) {
  c->ops = &srv_exchange_ops;
  if (!c->server->handlers.do_exchange) {
    srv_stream_unimplemented(c);
    return;
  }
  srv_call_send_initial_md(c);
  srv_call_recv(c);
}
