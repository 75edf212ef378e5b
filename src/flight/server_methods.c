/* server_methods.c -- the Flight methods whose request is one message:
 * GetFlightInfo, PollFlightInfo, GetSchema (one response), ListFlights,
 * DoAction, ListActions (a stream of responses encoded one at a time from
 * the handler's list), and Handshake (credentials in, token out). */
#include "flight/server_internal.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

static void srv_unimplemented(fsh_flight_call *c) {
  char msg[128];
  snprintf(msg, sizeof msg, "%s is not implemented by this server", srv_method_name(c->method));
  srv_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, msg);
}

/* The request message (read by gRPC before the call was announced). */
static grpc_byte_buffer *srv_request(fsh_flight_call *c) { return c->initial_payload; }

/* Prefixes err with what failed to decode and ends the call. */
static void srv_bad_request(fsh_flight_call *c, const char *what, int rc, fsh_error *err) {
  (void)fsh_error_prefix(err, rc, "%s: invalid %s: ", srv_method_name(c->method), what);
  srv_call_finish_errno(c, rc == ENOMEM ? ENOMEM : EINVAL, err);
}

/* One queued reply, then done (unary methods, PutResult, Handshake). */
int srv_reply_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done,
                             fsh_error *err) {
  (void)err;
  if (c->reply) {
    *out = c->reply;
    c->reply = NULL;
    return 0;
  }
  if (!c->recv_done) return EAGAIN;
  *done = true;
  return 0;
}

static const srv_call_ops srv_reply_ops = {NULL, NULL, srv_reply_produce};

/* ---- GetFlightInfo, PollFlightInfo, GetSchema ---------------------------- */

void srv_dispatch_unary(fsh_flight_call *c) {
  const fsh_flight_handlers *h = &c->server->handlers;
  c->ops = &srv_reply_ops;
  c->recv_done = true;
  if ((c->method == SRV_GET_FLIGHT_INFO && !h->get_flight_info) ||
      (c->method == SRV_POLL_FLIGHT_INFO && !h->poll_flight_info) ||
      (c->method == SRV_GET_SCHEMA && !h->get_schema)) {
    srv_unimplemented(c);
    return;
  }
  fsh_error err;
  err.message[0] = '\0';
  fsh_flight_descriptor d;
  memset(&d, 0, sizeof d);
  int rc = srv_request(c) ? fsh_flight_wire_decode_descriptor(srv_request(c), &d, &err)
                          : fsh_error_set(&err, EINVAL, "no request message");
  if (rc != 0) {
    fsh_flight_descriptor_reset(&d);
    srv_bad_request(c, "FlightDescriptor", rc, &err);
    return;
  }
  if (c->method == SRV_GET_SCHEMA) {
    fsh_schema *schema = NULL;
    rc = h->get_schema(h->ctx, c, &d, &schema, &err);
    if (rc == 0 && !schema) rc = fsh_error_set(&err, EINVAL, "GetSchema: the handler returned no schema");
    fsh_bytes b = {NULL, 0};
    if (rc == 0) rc = fsh_flight_schema_to_bytes(schema, &b, &err);
    if (rc == 0) rc = fsh_flight_wire_encode_bytes(FSH_WIRE_SCHEMA_RESULT, b.data, b.size, &c->reply, &err);
    fsh_bytes_reset(&b);
    fsh_schema_unref(schema);
  } else {
    fsh_flight_info info;
    memset(&info, 0, sizeof info);
    info.total_records = -1;
    info.total_bytes = -1;
    if (c->method == SRV_GET_FLIGHT_INFO) {
      rc = h->get_flight_info(h->ctx, c, &d, &info, &err);
      if (rc == 0) rc = fsh_flight_wire_encode_info(&info, &c->reply, &err);
    } else {
      double progress = -1;
      bool done = false;
      rc = h->poll_flight_info(h->ctx, c, &d, &info, &progress, &done, &err);
      if (rc == 0) rc = fsh_flight_wire_encode_poll_info(&info, progress, done, &c->reply, &err);
    }
    fsh_flight_info_reset(&info);
  }
  fsh_flight_descriptor_reset(&d);
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  srv_call_pump(c);
}

/* ---- ListFlights, DoAction, ListActions ---------------------------------- */

static int srv_list_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done,
                            fsh_error *err) {
  int64_t i = c->next_item;
  switch (c->method) {
    case SRV_LIST_FLIGHTS:
      if (i >= c->infos.n) break;
      c->produce_last = ++c->next_item >= c->infos.n;
      return fsh_flight_wire_encode_info(&c->infos.items[i], out, err);
    case SRV_DO_ACTION:
      if (i >= c->results.n) break;
      c->produce_last = ++c->next_item >= c->results.n;
      return fsh_flight_wire_encode_bytes(FSH_WIRE_RESULT, c->results.items[i].data,
                                          c->results.items[i].size, out, err);
    case SRV_LIST_ACTIONS:
      if (i >= c->action_types.n) break;
      c->produce_last = ++c->next_item >= c->action_types.n;
      return fsh_flight_wire_encode_action_type(&c->action_types.items[i], out, err);
    default: break;
  }
  *done = true;
  return 0;
}

static const srv_call_ops srv_list_ops = {NULL, NULL, srv_list_produce};

void srv_dispatch_list(fsh_flight_call *c) {
  const fsh_flight_handlers *h = &c->server->handlers;
  c->ops = &srv_list_ops;
  c->recv_done = true;
  fsh_error err;
  err.message[0] = '\0';
  int rc = 0;
  if (c->method == SRV_LIST_FLIGHTS) {
    if (!h->list_flights) {
    srv_unimplemented(c);
    return;
  }
    fsh_bytes criteria = {NULL, 0};
    if (srv_request(c)) rc = fsh_flight_wire_decode_bytes(FSH_WIRE_CRITERIA, srv_request(c), &criteria, &err);
    if (rc != 0) {
      fsh_bytes_reset(&criteria);
      {
    srv_bad_request(c, "Criteria", rc, &err);
    return;
  }
    }
    rc = h->list_flights(h->ctx, c, &criteria, &c->infos, &err);
    fsh_bytes_reset(&criteria);
  } else if (c->method == SRV_DO_ACTION) {
    if (!h->do_action) {
    srv_unimplemented(c);
    return;
  }
    fsh_flight_action a;
    memset(&a, 0, sizeof a);
    rc = srv_request(c) ? fsh_flight_wire_decode_action(srv_request(c), &a, &err)
                        : fsh_error_set(&err, EINVAL, "no request message");
    if (rc == 0 && (!a.type || !a.type[0])) rc = fsh_error_set(&err, EINVAL, "the action has no type");
    if (rc != 0) {
      fsh_flight_action_reset(&a);
      {
    srv_bad_request(c, "Action", rc, &err);
    return;
  }
    }
    rc = h->do_action(h->ctx, c, &a, &c->results, &err);
    fsh_flight_action_reset(&a);
  } else {
    if (!h->list_actions) {
    srv_unimplemented(c);
    return;
  }
    rc = h->list_actions(h->ctx, c, &c->action_types, &err);
  }
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  srv_call_pump(c);
}

/* ---- Handshake -------------------------------------------------------------- */

/* Checks "user:password" bytes against the configured basic credentials. */
static bool srv_basic_matches(const fsh_flight_server *s, const char *user, size_t user_len,
                              const char *password, size_t password_len) {
  if (!s->basic_user || !s->basic_password) return false;
  bool u = srv_secret_equals(user, user_len, s->basic_user);
  bool p = srv_secret_equals(password, password_len, s->basic_password);
  return u && p;
}

static void srv_handshake_accept(fsh_flight_call *c, const char *user) {
  c->authenticated = true;
  if (user && *user) srv_call_set_identity(c, user);
}

static void srv_handshake_reject(fsh_flight_call *c) {
  srv_call_finish(c, GRPC_STATUS_UNAUTHENTICATED, "Handshake: invalid username or password");
}

static int srv_handshake_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done,
                                 fsh_error *err) {
  int rc = srv_reply_produce(c, out, done, err);
  if (rc == 0 && *out) srv_call_recv(c); /* the reply is on its way: read on */
  return rc;
}

static void srv_handshake_message(fsh_flight_call *c, grpc_byte_buffer *bb) {
  const fsh_flight_server *s = c->server;
  fsh_error err;
  err.message[0] = '\0';
  uint64_t version = 0;
  fsh_bytes payload = {NULL, 0};
  int rc = fsh_flight_wire_decode_handshake(bb, &version, &payload, &err);
  grpc_byte_buffer_destroy(bb);
  if (rc != 0) {
    fsh_bytes_reset(&payload);
    {
    srv_bad_request(c, "HandshakeRequest", rc, &err);
    return;
  }
  }
  if (c->authenticated) { /* already answered (e.g. by header): ignore */
    fsh_bytes_reset(&payload);
    srv_call_recv(c);
    return;
  }
  const void *answer = payload.data;
  int64_t answer_size = payload.size;
  if (s->auth_token) {
    char *user = NULL, *password = NULL;
    fsh_error ignored;
    if (payload.size > 0 &&
        fsh_flight_wire_decode_basic_auth(&payload, &user, &password, &ignored) == 0 && user &&
        password && srv_basic_matches(s, user, strlen(user), password, strlen(password))) {
      srv_handshake_accept(c, user);
    } else if (srv_secret_equals(payload.data, (size_t)payload.size, s->auth_token)) {
      srv_handshake_accept(c, s->basic_user);
    }
    fsh_free(user);
    if (password) {
      memset(password, 0, strlen(password));
      fsh_free(password);
    }
    if (!c->authenticated) {
      fsh_bytes_reset(&payload);
      {
    srv_handshake_reject(c);
    return;
  }
    }
    answer = s->auth_token;
    answer_size = (int64_t)strlen(s->auth_token);
  }
  /* No auth configured: echo the payload, as Arrow's no-op handler does. */
  rc = fsh_flight_wire_encode_handshake(0, answer, answer_size, &c->reply, &err);
  fsh_bytes_reset(&payload);
  if (rc != 0) {
    srv_call_finish_errno(c, rc, &err);
    return;
  }
  srv_call_pump(c); /* produce re-arms the receive once the reply is out */
}

static void srv_handshake_end(fsh_flight_call *c) {
  if (c->server->auth_token && !c->authenticated) {
    srv_call_finish(c, GRPC_STATUS_UNAUTHENTICATED,
                    "Handshake: no credentials (send BasicAuth in the HandshakeRequest payload "
                    "or an 'authorization: Basic' header)");
    return;
  }
  srv_call_pump(c);
}

static const srv_call_ops srv_handshake_ops = {srv_handshake_message, srv_handshake_end,
                                               srv_handshake_produce};

void srv_dispatch_handshake(fsh_flight_call *c) {
  const fsh_flight_server *s = c->server;
  c->ops = &srv_handshake_ops;
  const grpc_slice *v = srv_find_header(c, "authorization");
  if (s->auth_token && v) {
    /* Arrow C++'s AuthenticateBasicToken: credentials in the header, the
     * token expected back in the "authorization" response header. */
    const char *p = (const char *)GRPC_SLICE_START_PTR(*v);
    size_t n = GRPC_SLICE_LENGTH(*v);
    if (n > 6 && strncasecmp(p, "Basic ", 6) == 0) {
      char *plain = NULL;
      size_t plain_len = 0;
      bool ok = false;
      if (srv_base64_decode(p + 6, n - 6, &plain, &plain_len) == 0) {
        char *colon = memchr(plain, ':', plain_len);
        if (colon) {
          *colon = '\0';
          ok = srv_basic_matches(s, plain, (size_t)(colon - plain), colon + 1,
                                 plain_len - (size_t)(colon - plain) - 1);
          if (ok) srv_handshake_accept(c, plain);
        }
        memset(plain, 0, plain_len);
        fsh_free(plain);
      }
      if (!ok) {
    srv_handshake_reject(c);
    return;
  }
    } else if (srv_auth_check_bearer(c)) {
      srv_handshake_accept(c, c->identity);
    }
    if (c->authenticated) {
      char bearer[1100];
      snprintf(bearer, sizeof bearer, "Bearer %s", s->auth_token);
      if (srv_call_set_out_md(c, "authorization", bearer) != 0)
        {
    srv_call_finish(c, GRPC_STATUS_INTERNAL, "Handshake: cannot set the response header");
    return;
  }
    }
  }
  srv_call_recv(c);
}

/* ---- per-method state --------------------------------------------------------- */

void srv_call_release_state(fsh_flight_call *c) {
  /* The sink first: an exchange's source may drain what its sink queued. */
  if (c->sink) c->sink->release(c->sink);
  c->sink = NULL;
  if (c->source) c->source->release(c->source);
  c->source = NULL;
  if (c->reply) grpc_byte_buffer_destroy(c->reply);
  c->reply = NULL;
  fsh_flight_info_list_reset(&c->infos);
  fsh_flight_result_list_reset(&c->results);
  fsh_flight_action_type_list_reset(&c->action_types);
}
