/* wire.h -- the Flight layer's wire codecs, shared by the server and the
 * client: FlightData by hand (zero-copy bodies), every other Flight message
 * through protobuf-c (generated at build time from proto/Flight.proto), the
 * schema bytes Flight carries, and errno <-> gRPC status mapping. Nothing
 * outside src/flight includes this. */
#ifndef FSH_FLIGHT_WIRE_H
#define FSH_FLIGHT_WIRE_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/status.h>

#include <flightshuffle/flight.h>

/* ---- FlightData ---------------------------------------------------------- */

/* Encodes one FlightData message: field 1 (descriptor, optional), 2
 * (data_header = p->metadata), 3 (app_metadata, optional), 1000 (data_body
 * = p's body segments). The body segments become gRPC slices that reference
 * the fsh_buffers (a reference is taken and dropped by gRPC when sent): no
 * body byte is copied. p may be NULL (app_metadata-only message). */
FSH_NODISCARD int fsh_flight_data_encode(const fsh_ipc_payload *p, fsh_buffer *app_metadata,
                                         const fsh_flight_descriptor *d,
                                         grpc_byte_buffer **out, fsh_error *err);
/* The same with app_metadata given as n pieces (flight.h) sent back to
 * back, each a gRPC slice on the piece's buffer -- pieces of one root
 * buffer (a buffer or the buffer it is a slice of) share one gRPC slice
 * reference count, so a message of many pieces of a few buffers allocates
 * per buffer, not per piece: no large piece is copied (small ones:
 * FSH_FLIGHT_PIECE_SLICE_MIN below). The same
 * bytes on the wire as fsh_flight_data_encode of their concatenation. */
/* Pieces from this size on go out as slices on their buffers; shorter
 * ones side by side are copied into one slice (a slice per piece of a few
 * hundred bytes costs gRPC and the socket more than the copy). */
#define FSH_FLIGHT_PIECE_SLICE_MIN 2048
FSH_NODISCARD int fsh_flight_data_encode_pieces(const fsh_ipc_payload *p,
                                                const fsh_flight_piece *pieces, int64_t n_pieces,
                                                const fsh_flight_descriptor *d,
                                                grpc_byte_buffer **out, fsh_error *err);
/* Decodes a received FlightData: data_body lands in one 64-byte-aligned
 * buffer (at most one copy; none when it already is a single aligned slice
 * we can keep), data_header and app_metadata in small buffers. Unknown
 * fields are skipped; malformed varints/lengths are EINVAL. */
FSH_NODISCARD int fsh_flight_data_decode(grpc_byte_buffer *bb, fsh_flight_message *out,
                                         fsh_error *err);
/* The same over contiguous bytes (the fuzz target and tests use it). */
FSH_NODISCARD int fsh_flight_data_decode_bytes(const uint8_t *data, size_t size,
                                               fsh_flight_message *out, fsh_error *err);

/* A new buffer of size bytes (64-byte aligned, zeroed padding) for a
 * received body: from body_pool.c's recycled blocks when large. NULL on
 * ENOMEM. */
fsh_buffer *fsh_flight_body_buffer_new(int64_t size);

/* ---- other messages (protobuf-c) ---------------------------------------- */

/* Each encoder makes a new grpc_byte_buffer; each decoder reads one and
 * fills a zeroed struct (reset it on error too: it may be partly filled). */
FSH_NODISCARD int fsh_flight_wire_encode_descriptor(const fsh_flight_descriptor *d,
                                                    grpc_byte_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_descriptor(grpc_byte_buffer *bb,
                                                    fsh_flight_descriptor *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_encode_info(const fsh_flight_info *i, grpc_byte_buffer **out,
                                              fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_info(grpc_byte_buffer *bb, fsh_flight_info *out,
                                              fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_encode_poll_info(const fsh_flight_info *i, double progress,
                                                   bool done, grpc_byte_buffer **out,
                                                   fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_poll_info(grpc_byte_buffer *bb, fsh_flight_info *out,
                                                   double *progress, bool *done,
                                                   fsh_error *err);
/* Ticket, Criteria (expression), Result (body), PutResult (app_metadata),
 * SchemaResult (schema): single-bytes-field messages. */
typedef enum fsh_flight_bytes_msg {
  FSH_WIRE_TICKET,
  FSH_WIRE_CRITERIA,
  FSH_WIRE_RESULT,
  FSH_WIRE_PUT_RESULT,
  FSH_WIRE_SCHEMA_RESULT
} fsh_flight_bytes_msg;
FSH_NODISCARD int fsh_flight_wire_encode_bytes(fsh_flight_bytes_msg kind, const void *data,
                                               int64_t size, grpc_byte_buffer **out,
                                               fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_bytes(fsh_flight_bytes_msg kind, grpc_byte_buffer *bb,
                                               fsh_bytes *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_encode_action(const fsh_flight_action *a,
                                                grpc_byte_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_action(grpc_byte_buffer *bb, fsh_flight_action *out,
                                                fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_encode_action_type(const fsh_flight_action_type *t,
                                                     grpc_byte_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_action_type(grpc_byte_buffer *bb,
                                                     fsh_flight_action_type *out,
                                                     fsh_error *err);
/* HandshakeRequest / HandshakeResponse (protocol_version, payload). */
FSH_NODISCARD int fsh_flight_wire_encode_handshake(uint64_t version, const void *payload,
                                                   int64_t size, grpc_byte_buffer **out,
                                                   fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_handshake(grpc_byte_buffer *bb, uint64_t *version,
                                                   fsh_bytes *payload, fsh_error *err);
/* BasicAuth (username, password) as Handshake payload bytes. */
FSH_NODISCARD int fsh_flight_wire_encode_basic_auth(const char *user, const char *password,
                                                    fsh_bytes *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_wire_decode_basic_auth(const fsh_bytes *in, char **user,
                                                    char **password, fsh_error *err);
grpc_byte_buffer *fsh_flight_wire_empty(void); /* google.protobuf.Empty */

/* ---- schema bytes ---------------------------------------------------------- */

/* Flight carries schemas as an encapsulated IPC Schema message
 * (continuation, length, flatbuffer). */
FSH_NODISCARD int fsh_flight_schema_to_bytes(fsh_schema *s, fsh_bytes *out, fsh_error *err);
FSH_NODISCARD int fsh_flight_schema_from_bytes(const fsh_bytes *in, fsh_schema **out,
                                               fsh_error *err);

/* ---- status ---------------------------------------------------------------- */

grpc_status_code fsh_flight_status_from_errno(int code);
int fsh_flight_errno_from_status(grpc_status_code status);

/* Fills up to cap gRPC channel arguments (the transport tuning both the
 * client and the server use; static keys) and the keepalive settings for
 * keepalive_ms (fsh_flight_keepalive_ms: > 0, or -1 = off) of a client
 * (client true) or a server; returns how many. */
size_t fsh_flight_transport_args(grpc_arg *args, size_t cap, int64_t keepalive_ms, bool client);
/* The keepalive interval options ask for: 0 -> the process default (10 s
 * unless fsh_flight_set_default_keepalive_ms changed it), < 0 ->
 * -1 (off), else the value clamped to [100 ms, 1 day]. */
int64_t fsh_flight_keepalive_ms(int64_t option);

/* Contiguous copy of a byte buffer's bytes (for small messages). */
FSH_NODISCARD int fsh_flight_byte_buffer_bytes(grpc_byte_buffer *bb, fsh_bytes *out,
                                               fsh_error *err);

#endif
