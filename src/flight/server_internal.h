/* server_internal.h -- what the Flight server's files share: the server
 * (gRPC server, one completion queue per pool thread), the per-call state
 * machine, and the auth helpers. Nothing outside src/flight/server*.c
 * includes this.
 *
 * Model. Each pool thread owns one completion queue and is the only thread
 * that waits on it; the pool's queues never poll sockets. A few poller
 * threads (one per 2 CPUs) do all socket I/O, each waiting in gRPC's
 * poller on a queue of its own, and run no handler: every request for a
 * new call is armed on a poller's queue (gRPC offers a new call to those
 * first, as they are registered first) and bound to a pool queue, round
 * robin per poller and method; the poller re-arms and hands the call to
 * its pool thread (an empty batch: its tag comes out of the call's
 * queue). So all of a call's events -- and therefore all handler, source
 * and sink callbacks for it -- run on one pool thread, one at a time, with
 * no lock, and a handler that blocks its pool thread holds up only the
 * calls bound there: new calls still arrive, other calls' bytes still
 * move, and a client's cancel still reaches it (fsh_flight_call_cancelled).
 * A call is a small state machine: at most one RECV_MESSAGE, one
 * SEND_MESSAGE (or SEND_STATUS_FROM_SERVER) and the RECV_CLOSE_ON_SERVER
 * batch are outstanding at any time; the call is freed when its last
 * outstanding batch has completed. */
#ifndef FSH_FLIGHT_SERVER_INTERNAL_H
#define FSH_FLIGHT_SERVER_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "flight/wire.h"

typedef enum srv_method {
  SRV_HANDSHAKE,
  SRV_LIST_FLIGHTS,
  SRV_GET_FLIGHT_INFO,
  SRV_POLL_FLIGHT_INFO,
  SRV_GET_SCHEMA,
  SRV_DO_GET,
  SRV_DO_PUT,
  SRV_DO_EXCHANGE,
  SRV_DO_ACTION,
  SRV_LIST_ACTIONS,
  SRV_N_METHODS
} srv_method;

/* "DoGet", ... and whether the request is a single message that gRPC reads
 * for us before announcing the call (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER)
 * or a client stream we read ourselves (GRPC_SRM_PAYLOAD_NONE). */
const char *srv_method_name(srv_method m);
bool srv_method_reads_initial(srv_method m);

typedef enum srv_tag_kind {
  SRV_TAG_NEW,      /* a requested call arrived (or the request was cancelled) */
  SRV_TAG_BEGIN,    /* on the call's own queue: start serving it (srv_handle_event) */
  SRV_TAG_RECV,     /* RECV_MESSAGE completed */
  SRV_TAG_SEND,     /* SEND_MESSAGE completed */
  SRV_TAG_STATUS,   /* SEND_STATUS_FROM_SERVER completed */
  SRV_TAG_MD,       /* an early SEND_INITIAL_METADATA completed */
  SRV_TAG_CLOSE,    /* RECV_CLOSE_ON_SERVER completed: the call is over */
  SRV_TAG_SHUTDOWN  /* grpc_server_shutdown_and_notify completed */
} srv_tag_kind;

typedef struct srv_tag {
  srv_tag_kind kind;
  struct fsh_flight_call *call; /* NULL for SRV_TAG_SHUTDOWN */
} srv_tag;

typedef struct srv_worker {
  fsh_flight_server *server;
  grpc_completion_queue *cq;
  pthread_t thread;
  bool started;
  bool poller; /* a poller (polling queue, requests armed here), else a pool thread */
  int index;   /* in server->workers or server->pollers */
  /* Requests armed here so far, per method: the next one is bound to pool
   * queue (index + next_bind[m]) % n_workers. */
  atomic_uint next_bind[SRV_N_METHODS];
  /* Request slots that could not be armed (out of memory), per method:
   * the worker's thread retries them, so a failed allocation never leaves
   * a method unserved on this queue. Atomic: start() arms from its own
   * thread while the workers already run. */
  atomic_int unarmed[SRV_N_METHODS];
} srv_worker;

struct fsh_flight_server {
  fsh_flight_handlers handlers;
  /* Owned copies of the option strings that calls need. */
  char *auth_token;
  char *basic_user;
  char *basic_password;
  int port;

  grpc_server *server;
  void *methods[SRV_N_METHODS]; /* registered method handles */
  int n_workers;
  srv_worker *workers; /* the pool: runs the calls */
  int n_pollers;
  srv_worker *pollers; /* poll sockets, take new calls, run no handler */

  srv_tag shutdown_tag;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool shutdown_done;    /* the shutdown tag came back */
  atomic_bool stopping;  /* stop() began: no new requests */
  atomic_long live;      /* call structs alive (requests included) */
  atomic_long handoffs;  /* pollers between checking `stopping` and handing a
                          * new call to its pool queue (srv_free waits for 0) */
};

/* What a call does with its messages; set per method at dispatch. Every
 * hook runs on the call's thread. */
typedef struct srv_call_ops {
  /* A message arrived on a client stream (the call owns bb). */
  void (*on_message)(fsh_flight_call *c, grpc_byte_buffer *bb);
  /* The client half-closed. */
  void (*on_end)(fsh_flight_call *c);
  /* Next response: *out set, or *done, or EAGAIN (nothing ready: asked again
   * after the next incoming message). Other errors end the call with their
   * status. */
  int (*produce)(fsh_flight_call *c, grpc_byte_buffer **out, bool *done, fsh_error *err);
} srv_call_ops;

/* A produce op for calls that answer with at most one queued reply
 * (c->reply) once the client is done sending: unary methods, PutResult,
 * Handshake. */
int srv_reply_produce(fsh_flight_call *c, grpc_byte_buffer **out, bool *done, fsh_error *err);

struct fsh_flight_call {
  fsh_flight_server *server;
  srv_worker *worker;     /* the call's pool queue and thread */
  srv_worker *requester;  /* the poller whose queue the request's arrival comes to */
  srv_method method;
  const srv_call_ops *ops;

  /* Filled in by grpc_server_request_registered_call. */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array request_md;
  grpc_byte_buffer *initial_payload;

  srv_tag tag_new, tag_begin, tag_recv, tag_send, tag_status, tag_md, tag_close;
  int pending; /* batches started and not yet completed */

  /* Stream state. */
  grpc_byte_buffer *recv_buf;  /* target of the outstanding RECV_MESSAGE */
  grpc_byte_buffer *send_buf;  /* the outstanding SEND_MESSAGE's buffer */
  bool recv_pending, send_pending;
  bool recv_done;   /* no more client messages (half-close, or none expected) */
  bool recv_paused; /* DoExchange: the sink said EBUSY; read again after a send */
  bool produce_done; /* ops->produce said done: never called again */
  bool produce_last; /* ops->produce set it with a message: that message is the
                        stream's last, so the OK status goes out in its batch */
  bool initial_md_sent;
  bool status_started;
  bool failed;      /* an op failed or the call was cancelled */
  int close_cancelled;
  bool finish_deferred; /* finish() waiting for the outstanding send */
  grpc_status_code final_code;
  char *final_details;

  /* Response initial metadata (Handshake puts the bearer token there). */
  grpc_metadata out_md[1];
  size_t n_out_md;

  char *peer;          /* gpr_malloc'd by grpc_call_get_peer */
  char *identity;      /* fsh_malloc'd; NULL = "" */

  /* Per-method state. */
  grpc_byte_buffer *reply;     /* one queued response (unary, handshake, PutResult) */
  bool got_first;
  fsh_flight_source *source;
  fsh_flight_sink *sink;
  int64_t next_item;
  fsh_flight_info_list infos;
  fsh_flight_result_list results;
  fsh_flight_action_type_list action_types;
  bool authenticated;          /* Handshake: credentials accepted */
};

/* ---- server_call.c: the generic machinery -------------------------------- */

/* Allocates a call struct and asks gRPC for the next call of method m,
 * announced on poller w's queue and bound to the next pool queue of w's
 * round robin for m. Returns 0, or nonzero when the server is stopping or out of
 * memory (the slot is then simply not re-armed). */
int srv_request_call(srv_worker *w, srv_method m);
/* srv_request_call, remembering the slot in w->unarmed on failure. */
void srv_arm(srv_worker *w, srv_method m);
/* Retries the slots of w->unarmed; true while some are still unarmed. */
bool srv_rearm_missing(srv_worker *w);
/* Dispatches one completion-queue event (the pool threads' loop body). */
void srv_handle_event(fsh_flight_server *s, srv_tag *tag, bool ok);

/* Starts RECV_MESSAGE (the next client message comes to ops->on_message). */
void srv_call_recv(fsh_flight_call *c);
/* Pulls ops->produce and starts SEND_MESSAGE when no send is outstanding;
 * finishes with OK once produce says done and the client stream ended. */
void srv_call_pump(fsh_flight_call *c);
/* Ends the call with a status (deferred while a send is outstanding);
 * later calls are ignored. details may be NULL. */
void srv_call_finish(fsh_flight_call *c, grpc_status_code code, const char *details);
/* Ends the call with the status that errno-style rc maps to, details from
 * err (or strerror when empty), prefixed with the method name. */
void srv_call_finish_errno(fsh_flight_call *c, int rc, const fsh_error *err);
/* Sets the response initial metadata (sent with the first response batch). */
int srv_call_set_out_md(fsh_flight_call *c, const char *key, const char *value);
/* Sends the initial metadata now (bidi streams, so clients see headers
 * before the first response). */
void srv_call_send_initial_md(fsh_flight_call *c);
void srv_call_set_identity(fsh_flight_call *c, const char *identity);

/* ---- server_methods.c / server_streams.c: per-method dispatch ------------ */

/* Starts serving a freshly arrived call (auth already checked). */
void srv_dispatch_unary(fsh_flight_call *c);  /* GetFlightInfo, Poll, GetSchema */
void srv_dispatch_list(fsh_flight_call *c);   /* ListFlights, DoAction, ListActions */
void srv_dispatch_do_get(fsh_flight_call *c);
void srv_dispatch_do_put(fsh_flight_call *c);
void srv_dispatch_do_exchange(fsh_flight_call *c);
void srv_dispatch_handshake(fsh_flight_call *c);
/* Frees per-method state (sources, sinks, lists, queued replies). */
void srv_call_release_state(fsh_flight_call *c);

/* ---- server_auth.c --------------------------------------------------------- */

/* Checks a non-Handshake call's credentials: "authorization: Bearer <token>"
 * (or the token in "auth-token-bin", which Arrow's older ClientAuthHandler
 * sends). true when no token is configured. Sets the identity. */
bool srv_auth_check_bearer(fsh_flight_call *c);
/* The value of request header key (lower case) as a borrowed slice, or NULL. */
const grpc_slice *srv_find_header(const fsh_flight_call *c, const char *key);
/* Fills identity from the TLS peer (mutual TLS), if any. */
void srv_auth_tls_identity(fsh_flight_call *c);
/* Builds the server credentials: insecure, TLS, or mutual TLS. */
int srv_auth_credentials(const fsh_flight_server_options *opts, grpc_server_credentials **out,
                         fsh_error *err);
/* Constant-time comparison of a byte string with a C string. */
bool srv_secret_equals(const void *a, size_t a_len, const char *b);
/* Decodes standard base64 (with or without padding) into a fresh
 * NUL-terminated string; EINVAL on bad input. */
int srv_base64_decode(const char *in, size_t n, char **out, size_t *out_len);

#endif
