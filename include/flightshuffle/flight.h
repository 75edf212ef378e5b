/* flight.h -- Arrow Flight RPC on gRPC's C core: the Flight data types, a
 * server that dispatches to an application's handler vtable, and a client.
 *
 * The wire is standard Arrow Flight (package arrow.flight.protocol): any
 * Flight client or server (pyarrow.flight, Arrow C++/Java/Rust/Go) talks to
 * ours. FlightData -- the hot path -- is encoded by hand so that Arrow
 * bodies go out as gRPC slices that point at our buffers (no copy), and come
 * in with at most one copy into an aligned buffer. Every other message goes
 * through protobuf-c.
 *
 * Threading: the server runs a small fixed pool of threads over completion
 * queues; no call owns a thread. Streams are driven by callbacks:
 *  - a DoGet handler returns a *source* the server pulls one message from
 *    each time the previous one has been written (so a slow client holds at
 *    most one message per stream in memory);
 *  - a DoPut handler returns a *sink* the server pushes each received message
 *    into; the next read is only started when the sink has returned;
 *  - DoExchange gets both.
 * Callbacks run on pool threads, never two at once for the same call; they
 * must not block for long (reading a local file is fine, waiting on the
 * network is not): a blocked callback holds up the other calls bound to
 * its thread (calls are spread round robin). Socket I/O runs on separate
 * poller threads, so other threads' calls keep moving meanwhile and a
 * client's cancel still reaches the blocked callback
 * (fsh_flight_call_cancelled).
 *
 * Errors: as everywhere, 0 or an errno-style code plus fsh_error. On the
 * wire, handler errors become gRPC status codes: ENOENT -> NOT_FOUND,
 * EINVAL -> INVALID_ARGUMENT, EACCES -> UNAUTHENTICATED, EPERM ->
 * PERMISSION_DENIED, ENOTSUP -> UNIMPLEMENTED, ETIMEDOUT -> DEADLINE_EXCEEDED,
 * ECANCELED -> CANCELLED, EAGAIN -> UNAVAILABLE, ENOMEM -> RESOURCE_EXHAUSTED,
 * EEXIST -> ALREADY_EXISTS, anything else -> INTERNAL; the message is
 * fsh_error's. Clients map back the same way. */
#ifndef FLIGHTSHUFFLE_FLIGHT_H
#define FLIGHTSHUFFLE_FLIGHT_H

#include <flightshuffle/ipc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Flight data types ------------------------------------------------- */

/* Owned bytes (fsh_malloc'd; data may be NULL when size is 0). */
typedef struct fsh_bytes {
  uint8_t *data;
  int64_t size;
} fsh_bytes;

FSH_NODISCARD int fsh_bytes_set(fsh_bytes *b, const void *data, int64_t size);
void fsh_bytes_reset(fsh_bytes *b);

typedef enum fsh_flight_descriptor_type {
  FSH_FLIGHT_DESCRIPTOR_UNKNOWN = 0,
  FSH_FLIGHT_DESCRIPTOR_PATH = 1,
  FSH_FLIGHT_DESCRIPTOR_CMD = 2
} fsh_flight_descriptor_type;

typedef struct fsh_flight_descriptor {
  fsh_flight_descriptor_type type;
  fsh_bytes cmd;  /* CMD */
  int64_t n_path; /* PATH */
  char **path;
} fsh_flight_descriptor;

typedef struct fsh_flight_endpoint {
  fsh_bytes ticket;
  int64_t n_locations;
  char **locations; /* URIs: grpc://host:port, grpc+tls://..., ... */
  int64_t expiration_unix_ns; /* 0 = none */
  fsh_bytes app_metadata;
} fsh_flight_endpoint;

typedef struct fsh_flight_info {
  fsh_schema *schema; /* one reference; NULL if unknown */
  fsh_flight_descriptor descriptor;
  int64_t n_endpoints;
  fsh_flight_endpoint *endpoints;
  int64_t total_records; /* -1 = unknown */
  int64_t total_bytes;   /* -1 = unknown */
  bool ordered;
  fsh_bytes app_metadata;
} fsh_flight_info;

typedef struct fsh_flight_action {
  char *type;
  fsh_bytes body;
} fsh_flight_action;

typedef struct fsh_flight_action_type {
  char *type;
  char *description;
} fsh_flight_action_type;

void fsh_flight_descriptor_reset(fsh_flight_descriptor *d);
FSH_NODISCARD int fsh_flight_descriptor_copy(fsh_flight_descriptor *dst,
                                             const fsh_flight_descriptor *src);
/* A PATH descriptor of n components (copied). */
FSH_NODISCARD int fsh_flight_descriptor_path(fsh_flight_descriptor *d, const char *const *path,
                                             int64_t n);
void fsh_flight_endpoint_reset(fsh_flight_endpoint *e);
void fsh_flight_info_reset(fsh_flight_info *i);
void fsh_flight_action_reset(fsh_flight_action *a);
void fsh_flight_action_type_reset(fsh_flight_action_type *t);

/* ---- URIs ---------------------------------------------------------------- */

typedef struct fsh_flight_location {
  bool tls;
  char host[256];
  int port;
} fsh_flight_location;

/* Parses grpc://host:port, grpc+tcp://host:port, grpc+tls://host:port
 * (IPv6 hosts in brackets). EINVAL with a message otherwise. */
FSH_NODISCARD int fsh_flight_location_parse(const char *uri, fsh_flight_location *out,
                                            fsh_error *err);

/* ---- streams of FlightData ---------------------------------------------- */

/* One FlightData message as received: the IPC Message flatbuffer
 * (data_header), the body (data_body, in one 64-byte-aligned buffer), the
 * app_metadata, and, on the first message of DoPut/DoExchange, the
 * descriptor. Each buffer may be NULL when absent. References owned by the
 * struct; release with fsh_flight_message_reset. */
typedef struct fsh_flight_message {
  fsh_buffer *metadata;
  fsh_buffer *body;
  fsh_buffer *app_metadata;
  bool has_descriptor;
  fsh_flight_descriptor descriptor;
} fsh_flight_message;

void fsh_flight_message_reset(fsh_flight_message *m);

/* A range [offset, offset + length) of a buffer: one piece of an
 * app_metadata sent without copying (fsh_flight_source.next_pieces). */
typedef struct fsh_flight_piece {
  fsh_buffer *buffer;
  int64_t offset, length;
} fsh_flight_piece;

/* What the server pulls a DoGet (or DoExchange) response from. */
typedef struct fsh_flight_source fsh_flight_source;
struct fsh_flight_source {
  /* Produces the next message into *out (payload buffers referenced until
   * sent; *app_metadata optional, may stay NULL) or sets *done at the end.
   * Returns EAGAIN when nothing is ready yet (DoExchange): the server calls
   * again after the next incoming message. */
  int (*next)(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app_metadata, bool *done,
              fsh_error *err);
  void (*release)(fsh_flight_source *s); /* frees the source itself */
  void *ctx;
  /* Optional; when set, the server calls it instead of next. The same,
   * except that the app_metadata is *n_pieces pieces sent back to back as
   * one field: each goes to gRPC as a slice pointing at the piece's buffer
   * (gRPC's own reference keeps that buffer alive until the bytes are
   * sent), so no large piece is copied (runs of small ones, a few hundred
   * bytes each, are copied once into one slice). *pieces (NULL when n is
   * 0) and the
   * buffer references in it stay the source's, valid until its next call
   * or its release: the server encodes the message before either. */
  int (*next_pieces)(fsh_flight_source *s, fsh_ipc_payload *out, const fsh_flight_piece **pieces,
                     int64_t *n_pieces, bool *done, fsh_error *err);
};

/* What the server pushes DoPut (or DoExchange) requests into. */
typedef struct fsh_flight_sink fsh_flight_sink;
struct fsh_flight_sink {
  /* One received message; the sink takes the references in *m (and resets
   * it). An error ends the call with that status. DoExchange only: EBUSY
   * means "taken, but hold further messages": the server reads nothing
   * more until the source has sent one message (so a sink that queues for
   * its source stays bounded while a client writes without reading). A
   * sink may answer EBUSY only while its source has something to send. */
  int (*message)(fsh_flight_sink *s, fsh_flight_message *m, fsh_error *err);
  /* The client finished sending. For DoPut, *put_result (optional) is
   * sent back as PutResult.app_metadata. */
  int (*finish)(fsh_flight_sink *s, fsh_buffer **put_result, fsh_error *err);
  void (*release)(fsh_flight_sink *s); /* frees the sink itself */
  void *ctx;
};

/* Sources over our own data: the schema message first, then every batch
 * (dictionaries as needed). Take ownership of their inputs. */
FSH_NODISCARD int fsh_flight_source_from_batches(fsh_schema *schema, fsh_batch *const *batches,
                                                 int64_t n, const fsh_ipc_write_options *opts,
                                                 fsh_flight_source **out, fsh_error *err);
FSH_NODISCARD int fsh_flight_source_from_stream(fsh_batch_stream *stream,
                                                const fsh_ipc_write_options *opts,
                                                fsh_flight_source **out, fsh_error *err);
/* Forwards the stored messages of an IPC stream as they are, without
 * decoding bodies (for serving IPC files and spilled shuffle output). */
FSH_NODISCARD int fsh_flight_source_from_ipc_stream(fsh_input *in, fsh_flight_source **out,
                                                    fsh_error *err);

/* ---- server -------------------------------------------------------------- */

typedef struct fsh_flight_call fsh_flight_call;
/* Facts about the call a handler serves (borrowed strings). */
const char *fsh_flight_call_peer(const fsh_flight_call *c);
const char *fsh_flight_call_identity(const fsh_flight_call *c); /* authenticated user or "" */
/* Whether the client cancelled the call (or it failed); a handler that
 * waits may poll it, also while it blocks its pool thread. */
bool fsh_flight_call_cancelled(const fsh_flight_call *c);

/* Result lists that handlers fill (the server sends them as a stream). */
typedef struct fsh_flight_info_list {
  int64_t n;
  fsh_flight_info *items;
} fsh_flight_info_list;
typedef struct fsh_flight_result_list {
  int64_t n;
  fsh_bytes *items;
} fsh_flight_result_list;
typedef struct fsh_flight_action_type_list {
  int64_t n;
  fsh_flight_action_type *items;
} fsh_flight_action_type_list;

FSH_NODISCARD int fsh_flight_info_list_push(fsh_flight_info_list *l, fsh_flight_info *moved);
void fsh_flight_info_list_reset(fsh_flight_info_list *l);
FSH_NODISCARD int fsh_flight_result_list_push(fsh_flight_result_list *l, const void *data,
                                              int64_t size);
void fsh_flight_result_list_reset(fsh_flight_result_list *l);
FSH_NODISCARD int fsh_flight_action_type_list_push(fsh_flight_action_type_list *l,
                                                   const char *type, const char *description);
void fsh_flight_action_type_list_reset(fsh_flight_action_type_list *l);

/* The application's handlers. A NULL entry answers UNIMPLEMENTED. */
typedef struct fsh_flight_handlers {
  void *ctx;
  int (*list_flights)(void *ctx, fsh_flight_call *call, const fsh_bytes *criteria,
                      fsh_flight_info_list *out, fsh_error *err);
  int (*get_flight_info)(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                         fsh_flight_info *out, fsh_error *err);
  /* PollFlightInfo: *progress in [0,1] or -1; *done when complete. */
  int (*poll_flight_info)(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                          fsh_flight_info *out, double *progress, bool *done, fsh_error *err);
  int (*get_schema)(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                    fsh_schema **out, fsh_error *err);
  int (*do_get)(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                fsh_flight_source **out, fsh_error *err);
  /* The first message (with the descriptor and the schema) is in *first
   * (borrowed); it is then also the first message pushed into the sink, so
   * a sink sees the whole stream. DoExchange likewise (*in may be NULL for
   * a producer only; *first is empty if the client sent nothing). When the
   * call ends the server releases the sink, then the source. */
  int (*do_put)(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                fsh_flight_sink **out, fsh_error *err);
  int (*do_exchange)(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                     fsh_flight_sink **in, fsh_flight_source **out, fsh_error *err);
  int (*do_action)(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                   fsh_flight_result_list *out, fsh_error *err);
  int (*list_actions)(void *ctx, fsh_flight_call *call, fsh_flight_action_type_list *out,
                      fsh_error *err);
} fsh_flight_handlers;

typedef struct fsh_flight_server_options {
  const char *listen; /* "host:port"; port 0 picks a free port */
  int n_threads;      /* pool size (runs handlers); 0 = 4; plus 1 poller per 2 CPUs */
  /* Auth: when auth_token is set, every call must carry
   * "authorization: Bearer <auth_token>" (else UNAUTHENTICATED); Handshake
   * with basic credentials basic_user/basic_password answers the token. */
  const char *auth_token;
  const char *basic_user;
  const char *basic_password;
  /* TLS (PEM file paths): cert + key enable TLS; client_ca enables mutual
   * TLS (clients must present a certificate signed by it). */
  const char *tls_cert_path;
  const char *tls_key_path;
  const char *tls_client_ca_path;
  int64_t max_message_bytes; /* 0 = unlimited (well, 2 GiB as gRPC allows) */
  /* While calls are in flight, each side pings the other every keepalive_ms
   * and drops the connection (its calls fail UNAVAILABLE) when a ping goes
   * unanswered for keepalive_ms: a client that vanished mid-stream frees its
   * calls. 0 = 10000, -1 = off. */
  int64_t keepalive_ms;
} fsh_flight_server_options;

typedef struct fsh_flight_server fsh_flight_server;
FSH_NODISCARD int fsh_flight_server_start(const fsh_flight_server_options *opts,
                                          const fsh_flight_handlers *handlers,
                                          fsh_flight_server **out, fsh_error *err);
int fsh_flight_server_port(const fsh_flight_server *s);
/* Stops accepting calls, lets in-flight calls finish for up to deadline_ms,
 * then cancels the rest; joins the pool and frees everything. */
void fsh_flight_server_stop(fsh_flight_server *s, int64_t deadline_ms);

/* ---- client -------------------------------------------------------------- */

typedef struct fsh_flight_client_options {
  const char *uri;         /* grpc://, grpc+tcp://, grpc+tls:// */
  const char *auth_token;  /* sent as "authorization: Bearer <token>" */
  const char *tls_ca_path; /* PEM roots for grpc+tls; NULL = system roots */
  const char *tls_cert_path; /* client certificate for mutual TLS */
  const char *tls_key_path;
  const char *tls_override_hostname;
  int64_t timeout_ms; /* per-call deadline; 0 = none */
  /* Keepalive (as the server's): a server that stops answering (stopped,
   * hung, host gone, link cut) fails the calls waiting on it with
   * UNAVAILABLE within about 2 x keepalive_ms instead of hanging. At most
   * 2 pings go out between two messages received, so that gRPC servers
   * with default ping limits (pyarrow.flight's) never hang up on a stream
   * that pauses. 0 = 10000, -1 = off. */
  int64_t keepalive_ms;
  /* Per-message stall timeout: a call waiting longer than stall_timeout_ms
   * for one message to arrive (a reader's next message, a PutResult) or
   * for one message to be taken by the server (a writer's send under flow
   * control) is cancelled and fails with DEADLINE_EXCEEDED (ETIMEDOUT),
   * the message naming the call. Unlike timeout_ms it bounds each wait,
   * not the whole call: a long stream that keeps moving never hits it.
   * 0 = off. */
  int64_t stall_timeout_ms;
} fsh_flight_client_options;

typedef struct fsh_flight_client fsh_flight_client;
/* The keepalive interval that keepalive_ms = 0 stands for, in every client
 * and server opened afterwards in this process (10000 until set; 0 resets
 * it to 10000, < 0 turns keepalive off, else clamped to [100 ms, 1 day]).
 * For processes whose Flight endpoints are opened deep inside other layers
 * (the CLI's worker and driver: --keepalive-ms). Thread-safe. */
void fsh_flight_set_default_keepalive_ms(int64_t ms);
/* One channel, reused by every call; thread-safe. */
FSH_NODISCARD int fsh_flight_client_open(const fsh_flight_client_options *opts,
                                         fsh_flight_client **out, fsh_error *err);
void fsh_flight_client_close(fsh_flight_client *c);

/* Handshake with basic credentials; on success the client uses the
 * returned bearer token for later calls (and *token gets a copy, optional). */
FSH_NODISCARD int fsh_flight_handshake(fsh_flight_client *c, const char *user,
                                       const char *password, char **token, fsh_error *err);
FSH_NODISCARD int fsh_flight_list_flights(fsh_flight_client *c, const fsh_bytes *criteria,
                                          fsh_flight_info_list *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_get_flight_info(fsh_flight_client *c, const fsh_flight_descriptor *d,
                                             fsh_flight_info *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_poll_flight_info(fsh_flight_client *c,
                                              const fsh_flight_descriptor *d,
                                              fsh_flight_info *out, double *progress,
                                              bool *done, fsh_error *err);
FSH_NODISCARD int fsh_flight_get_schema(fsh_flight_client *c, const fsh_flight_descriptor *d,
                                        fsh_schema **out, fsh_error *err);
FSH_NODISCARD int fsh_flight_do_action(fsh_flight_client *c, const fsh_flight_action *a,
                                       fsh_flight_result_list *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_list_actions(fsh_flight_client *c,
                                          fsh_flight_action_type_list *out, fsh_error *err);

/* A streaming DoGet (or the response side of DoExchange). The call's
 * deadline (timeout_ms) covers the whole stream. A status other than OK
 * (the server's, a deadline, a lost connection, a cancel) is the error of
 * the read that meets it: "DoGet grpc://h:p: NOT_FOUND: <details>". */
typedef struct fsh_flight_reader fsh_flight_reader;
FSH_NODISCARD int fsh_flight_do_get(fsh_flight_client *c, const fsh_bytes *ticket,
                                    fsh_flight_reader **out, fsh_error *err);
/* The schema (after the first message; read on demand: next_raw still
 * returns that message afterwards). */
FSH_NODISCARD int fsh_flight_reader_schema(fsh_flight_reader *r, fsh_schema **out,
                                           fsh_error *err); /* borrowed */
/* Next decoded batch, or *batch NULL at the end. */
FSH_NODISCARD int fsh_flight_reader_next(fsh_flight_reader *r, fsh_batch **batch, fsh_error *err);
/* Next raw message, undecoded (for forwarding); *done at the end. */
FSH_NODISCARD int fsh_flight_reader_next_raw(fsh_flight_reader *r, fsh_flight_message *m,
                                             bool *done, fsh_error *err);
void fsh_flight_reader_cancel(fsh_flight_reader *r);
void fsh_flight_reader_free(fsh_flight_reader *r);

/* A streaming DoPut (and the request side of DoExchange). The schema
 * message goes out at once, with the descriptor. With schema NULL the
 * writer only takes write_raw (forwarding a stream whose schema message is
 * among the raw payloads) and the descriptor rides on the first of them.
 * Errors the server ends the call with (a refused token, a handler error)
 * surface at the next write or at close. */
typedef struct fsh_flight_writer fsh_flight_writer;
FSH_NODISCARD int fsh_flight_do_put(fsh_flight_client *c, const fsh_flight_descriptor *d,
                                    fsh_schema *schema, const fsh_ipc_write_options *opts,
                                    fsh_flight_writer **out, fsh_error *err);
FSH_NODISCARD int fsh_flight_writer_write(fsh_flight_writer *w, fsh_batch *batch,
                                          fsh_error *err);
/* Sends a pre-encoded payload (forwarding). */
FSH_NODISCARD int fsh_flight_writer_write_raw(fsh_flight_writer *w, const fsh_ipc_payload *p,
                                              fsh_buffer *app_metadata, fsh_error *err);
/* Half-closes, waits for the server's status and its PutResults; the last
 * PutResult.app_metadata goes to *put_result if not NULL. Frees w. */
FSH_NODISCARD int fsh_flight_writer_close(fsh_flight_writer *w, fsh_buffer **put_result,
                                          fsh_error *err);
void fsh_flight_writer_cancel(fsh_flight_writer *w); /* aborts the call; frees w */

/* DoExchange: a writer for the requests and a reader for the responses,
 * over one call. Close the writer (half-close) before draining the reader,
 * or interleave. Free the reader last. */
FSH_NODISCARD int fsh_flight_do_exchange(fsh_flight_client *c, const fsh_flight_descriptor *d,
                                         fsh_schema *schema, const fsh_ipc_write_options *opts,
                                         fsh_flight_writer **w, fsh_flight_reader **r,
                                         fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
