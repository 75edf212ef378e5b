/* client_internal.h -- what the Flight client's files share: the client
 * (one gRPC channel) and one RPC in flight (a call whose completions either
 * a process-wide poller thread hands to the thread waiting for them -- the
 * bulk streams -- or the waiting thread plucks from the call's own queue),
 * with blocking send / receive / finish steps.
 * Private to src/flight/client*.c. */
#ifndef FSH_FLIGHT_CLIENT_INTERNAL_H
#define FSH_FLIGHT_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <grpc/grpc.h>

#include "flight/wire.h"

struct fsh_flight_client {
  grpc_channel *channel;
  char *uri;     /* for error messages */
  int64_t timeout_ms;
  int64_t stall_ms;   /* per-message stall timeout, 0 = off */
  pthread_mutex_t mu; /* guards auth_header (Handshake replaces it) */
  char *auth_header;  /* "Bearer <token>", or NULL */
  bool has_poller;    /* holds a reference on the process-wide poller */
};

/* One kind of batch of one call: its completion, handed over by the
 * poller. Its address is the batch's gRPC tag. */
typedef struct fsh_flight_tag {
  struct fsh_flight_rpc *rpc;
  bool done; /* completed, not yet collected (under rpc->wait_mu) */
  bool ok;   /* the completion's success flag */
} fsh_flight_tag;

/* Messages received ahead of a bulk call's reader, at most, and the bytes
 * queued beyond which the poller starts no further receive (the reader's
 * next take does). A pending receive takes in a whole message, however
 * large: with 4 MiB messages a slow reader holds up to 3 of them (the one
 * it decodes included) besides gRPC's window; with messages of 16 MiB and
 * more, 2, as without read-ahead. */
#define FSH_FLIGHT_READAHEAD 2
#define FSH_FLIGHT_READAHEAD_BYTES ((size_t)16 << 20)

/* One call. The status batch (RECV_STATUS_ON_CLIENT) is started with the
 * call, so the status is always there to collect, whatever happened.
 * Sends and receives may run on two threads (DoExchange's writer and
 * reader); everything else is single-threaded per call. Refcounted: the
 * writer and reader of one DoExchange share it. */
typedef struct fsh_flight_rpc {
  fsh_flight_client *client; /* borrowed: must outlive the call */
  const char *method;        /* "DoGet", static */
  /* DoGet / DoPut / DoExchange: one of the poller's queues (borrowed);
   * every other method: a pluck queue of its own (own_cq), polled by the
   * waiting thread itself: no hand-over, half the round-trip time of a
   * small unary call (see fsh_flight_rpc_start). */
  grpc_completion_queue *cq;
  bool own_cq;
  bool poller_call; /* counted by fsh_flight_poller_call_begin */
  grpc_call *call;
  atomic_int refs;
  /* tags, one per kind of batch; the poller signals wait_cv */
  fsh_flight_tag tag_send, tag_recv, tag_status, tag_initial;
  pthread_mutex_t wait_mu;
  pthread_cond_t wait_cv; /* on CLOCK_MONOTONIC (the stall timeout's waits) */
  /* sends */
  bool sent_initial_md;
  bool sent_close;
  grpc_metadata send_md[1];
  size_t n_send_md;
  /* receives; the initial metadata is asked for with the call's first
   * batch -- a bulk call's at its start, a small call's (own_cq) in its
   * unary batch (fsh_flight_rpc_send) -- because gRPC 1.51 completes the
   * status only once it was (a call whose sends fail before any receive
   * would otherwise never end); a bulk call collects it with the status */
  bool initial_md_requested;
  /* A small call's unary batch received the first response (first_msg;
   * NULL = the stream ended without one), not yet handed out by
   * fsh_flight_rpc_recv. */
  bool first_ready;
  grpc_byte_buffer *first_msg;
  bool recv_done; /* end of the response stream (or a failed receive) */
  bool prefetch;     /* keep a receive in flight ahead of the caller */
  bool recv_pending; /* a RECV_MESSAGE batch is in flight (under wait_mu if readahead) */
  grpc_byte_buffer *recv_msg;
  /* Read-ahead (the bulk calls, on the pollers' queues; fixed at start):
   * the poller that collects a received message queues it here and, while
   * fewer than FSH_FLIGHT_READAHEAD wait, starts the next receive at once,
   * without waiting for the caller's thread to wake up and take it. Under
   * wait_mu. See fsh_flight_rpc_recv_done. */
  bool readahead;
  grpc_byte_buffer *ahead[FSH_FLIGHT_READAHEAD];
  int ahead_head, ahead_n;
  size_t ahead_bytes; /* their size */
  bool recv_end;  /* a receive failed or found the end of the stream */
  bool recv_stop; /* being freed: no receive is started any more */
  bool initial_md_done;
  grpc_metadata_array initial_md;
  /* status */
  pthread_mutex_t status_mu;
  bool status_done;
  grpc_metadata_array trailing_md;
  grpc_status_code status;
  grpc_slice details;
} fsh_flight_rpc;

/* Starts a call of /arrow.flight.protocol.FlightService/<method> with the
 * client's deadline and bearer token (or, if auth_override is set, that
 * "authorization" value instead). Nothing is sent yet. */
FSH_NODISCARD int fsh_flight_rpc_start(fsh_flight_client *c, const char *method,
                                       const char *auth_override, fsh_flight_rpc **out,
                                       fsh_error *err);
/* Sends one batch: the initial metadata (on the first send), then msg
 * (may be NULL; always destroyed), then, with close, the half-close.
 * Blocks until gRPC took it (at most the client's stall timeout, if set:
 * then the call is cancelled with DEADLINE_EXCEEDED). A failure reports
 * the call's status.
 * A small call's (own_cq) first send of a message with close is its
 * unary batch: the same batch also receives the initial metadata and the
 * first response, so it returns once that is in (or the stream ended,
 * within the stall timeout likewise); fsh_flight_rpc_recv hands it out. */
FSH_NODISCARD int fsh_flight_rpc_send(fsh_flight_rpc *r, grpc_byte_buffer *msg, bool close,
                                      fsh_error *err);
/* Receives the next message into *msg (the caller destroys it); *msg NULL
 * at the end of the stream, and then the status has been checked: a
 * non-OK status is the error returned. Waits at most the client's stall
 * timeout, if set (then the call is cancelled: DEADLINE_EXCEEDED). */
FSH_NODISCARD int fsh_flight_rpc_recv(fsh_flight_rpc *r, grpc_byte_buffer **msg,
                                      fsh_error *err);
/* Waits for the status and the initial metadata (once; later calls
 * return the same) and turns a non-OK status into an error:
 * "<Method> <uri>: <CODE>: <details>". */
FSH_NODISCARD int fsh_flight_rpc_finish(fsh_flight_rpc *r, fsh_error *err);
/* An error about this call: prefixes err with "<Method> <uri>: ". */
int fsh_flight_rpc_error(fsh_flight_rpc *r, int code, fsh_error *err);
/* Cancels the call (any thread); pending operations complete with failure. */
void fsh_flight_rpc_cancel(fsh_flight_rpc *r);
fsh_flight_rpc *fsh_flight_rpc_ref(fsh_flight_rpc *r);
/* Drops a reference; the last one cancels the call if its status has not
 * been received, collects it, and frees the call and its queue. */
void fsh_flight_rpc_unref(fsh_flight_rpc *r);
/* The value of initial metadata key (NUL-terminated copy, or NULL);
 * only after fsh_flight_rpc_finish. */
char *fsh_flight_rpc_initial_md(fsh_flight_rpc *r, const char *key);

/* The process-wide poller (client_poller.c): threads that wait in gRPC's
 * poller for the bulk streams of every client, each on its own completion
 * queue, and hand each completion to its fsh_flight_tag. Each open client holds
 * one reference (taken after grpc_init, released before grpc_shutdown);
 * the first starts the threads, the last stops and joins them. */
FSH_NODISCARD int fsh_flight_poller_acquire(fsh_error *err);
void fsh_flight_poller_release(void);
/* The completion queue for a new call (round robin over the pollers');
 * only while a poller reference is held. */
grpc_completion_queue *fsh_flight_call_queue(void);
/* A call on the pollers' queues begins / has collected its last
 * completion: the pollers wait in gRPC only while one is in flight. */
void fsh_flight_poller_call_begin(void);
void fsh_flight_poller_call_end(void);

/* The poller collected a read-ahead call's receive (tag_recv of an rpc
 * with readahead): queues the message, starts the next receive if there
 * is room, wakes the reader. */
void fsh_flight_rpc_recv_done(fsh_flight_rpc *r, bool ok);

/* "OK", "NOT_FOUND", ... */
const char *fsh_flight_status_name(grpc_status_code s);

#endif
