/* ipc.h -- Arrow IPC: encapsulated messages, the stream and file formats,
 * dictionary batches, and LZ4_FRAME / ZSTD body compression.
 *
 * Layers, bottom up:
 *  - byte sources and sinks (fsh_input / fsh_output): small vtables over a
 *    file descriptor or memory, so that tests can inject failures;
 *  - the message codec: fsh_ipc_decoder turns (metadata flatbuffer, body)
 *    pairs into schemas and batches, verifying every flatbuffer offset and
 *    buffer range first; fsh_ipc_encoder turns schemas and batches into
 *    payloads whose body segments reference the arrays' own buffers (no copy
 *    unless compressing). Neither does I/O;
 *  - stream and file readers and writers on top.
 * Decoding an uncompressed body is zero-copy: arrays slice the refcounted
 * body buffer. Errors name the message index and the field path.
 *
 * Trust: decoding runs every check whose cost does not grow with the data
 * (flatbuffer structure, buffer ranges against the body and the node
 * lengths), so a decoded batch never makes us read outside its buffers'
 * declared sizes. Checks that must read the data -- offsets increasing,
 * dictionary indices in range, UTF-8 -- are fsh_batch_validate's: callers
 * that take bytes from outside (CLI, Flight peers) run it on each batch. */
#ifndef FLIGHTSHUFFLE_IPC_H
#define FLIGHTSHUFFLE_IPC_H

#include <flightshuffle/arrow.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- byte sources and sinks -------------------------------------------- */

typedef struct fsh_input fsh_input;
struct fsh_input {
  /* Reads up to n bytes at the current position into *out (a new reference:
   * a slice for memory inputs, a fresh 64-byte-aligned buffer otherwise).
   * Fewer than n bytes only at end of input ((*out)->size tells). */
  int (*read)(fsh_input *in, int64_t n, fsh_buffer **out, fsh_error *err);
  /* Same, at an absolute offset; position unchanged. ENOTSUP if unseekable. */
  int (*read_at)(fsh_input *in, int64_t offset, int64_t n, fsh_buffer **out, fsh_error *err);
  /* Total size in bytes, or -1 if unknown (a pipe). */
  int64_t (*size)(fsh_input *in);
  void (*close)(fsh_input *in); /* frees the input itself */
  void *ctx;
  const char *name; /* for error messages: a path or "<memory>" */
};

typedef struct fsh_output fsh_output;
struct fsh_output {
  /* Writes all of iov[0..n) or fails. */
  int (*writev)(fsh_output *out, const struct iovec *iov, int n, fsh_error *err);
  /* Flushes and finishes (fsync + rename for atomic files); frees itself.
   * After an earlier error, abort=true discards what was written. */
  int (*close)(fsh_output *out, bool abort, fsh_error *err);
  void *ctx;
  const char *name;
  int64_t position; /* bytes written so far; maintained by writev */
};

FSH_NODISCARD int fsh_input_open_path(const char *path, fsh_input **out, fsh_error *err);
FSH_NODISCARD int fsh_input_from_fd(int fd, bool owns_fd, const char *name, fsh_input **out,
                                    fsh_error *err);
/* Reads from buf (a reference is taken); reads return slices, no copies. */
FSH_NODISCARD int fsh_input_from_buffer(fsh_buffer *buf, fsh_input **out, fsh_error *err);

/* Writes to path.tmp, then fsync + rename on successful close. */
FSH_NODISCARD int fsh_output_open_path(const char *path, fsh_output **out, fsh_error *err);
FSH_NODISCARD int fsh_output_from_fd(int fd, bool owns_fd, const char *name, fsh_output **out,
                                     fsh_error *err);
/* Accumulates into memory. On a successful close (abort false) *result,
 * if not NULL, receives the bytes (the sink's own buffer: no copy); on abort
 * they are freed. `reuse` (optional; the sink takes the reference) is an
 * owned, unshared buffer written from its start, keeping its capacity. */
FSH_NODISCARD int fsh_output_to_memory(fsh_buffer *reuse, fsh_buffer **result, fsh_output **out,
                                       fsh_error *err);

/* ---- message codec ----------------------------------------------------- */

typedef enum fsh_compression {
  FSH_COMPRESSION_NONE = 0,
  FSH_COMPRESSION_LZ4_FRAME = 1,
  FSH_COMPRESSION_ZSTD = 2
} fsh_compression;

const char *fsh_compression_name(fsh_compression c);
/* Parses "none", "lz4", "lz4_frame", "zstd". */
FSH_NODISCARD int fsh_compression_parse(const char *s, fsh_compression *out, fsh_error *err);

typedef enum fsh_ipc_message_type {
  FSH_IPC_NONE = 0,
  FSH_IPC_SCHEMA = 1,
  FSH_IPC_DICTIONARY_BATCH = 2,
  FSH_IPC_RECORD_BATCH = 3
} fsh_ipc_message_type;

/* One encapsulated message ready to send: the flatbuffer Message bytes and
 * the body as segments (the arrays' own buffers, padding, or compressed
 * copies), each a reference held by the payload. */
typedef struct fsh_ipc_payload {
  fsh_ipc_message_type type;
  fsh_buffer *metadata; /* Message flatbuffer, size a multiple of 8 */
  int64_t body_length;  /* sum of body segment sizes, a multiple of 8 */
  int32_t n_body;
  fsh_buffer **body;
} fsh_ipc_payload;

void fsh_ipc_payload_reset(fsh_ipc_payload *p);

typedef struct fsh_ipc_write_options {
  fsh_compression compression;
  int32_t compression_level; /* 0 = codec default */
  /* A buffer that compression does not shrink is stored uncompressed, with
   * the -1 length prefix the format defines. */
  /* Stream format: when a batch's dictionary is the previous one plus new
   * values at the end, send only those as a delta dictionary batch instead
   * of a replacement. The file format always does this (it cannot replace
   * a dictionary). Default false: replacements are what every reader
   * understands. */
  bool emit_dictionary_deltas;
} fsh_ipc_write_options;

void fsh_ipc_write_options_init(fsh_ipc_write_options *o);

/* Encoder: keeps the dictionaries already emitted (by id) so that a batch
 * whose dictionary changed emits a replacement dictionary batch first. */
typedef struct fsh_ipc_encoder fsh_ipc_encoder;
FSH_NODISCARD int fsh_ipc_encoder_new(fsh_schema *schema, const fsh_ipc_write_options *opts,
                                      fsh_ipc_encoder **out, fsh_error *err);
void fsh_ipc_encoder_free(fsh_ipc_encoder *e);
FSH_NODISCARD int fsh_ipc_encode_schema(fsh_ipc_encoder *e, fsh_ipc_payload *out, fsh_error *err);
/* Encodes a batch: first any dictionary batches it needs (new or changed
 * dictionaries), then the record batch. *out is an array of *n_out payloads
 * allocated with fsh_malloc; the caller resets each and frees the array. */
FSH_NODISCARD int fsh_ipc_encode_batch(fsh_ipc_encoder *e, fsh_batch *batch,
                                       fsh_ipc_payload **out, int32_t *n_out, fsh_error *err);

/* Decoder: holds the schema and the dictionaries (by id). */
typedef struct fsh_ipc_decoder fsh_ipc_decoder;
FSH_NODISCARD int fsh_ipc_decoder_new(fsh_ipc_decoder **out, fsh_error *err);
void fsh_ipc_decoder_free(fsh_ipc_decoder *d);
/* Reads the message type and body length of a Message flatbuffer (verified). */
FSH_NODISCARD int fsh_ipc_peek_message(const fsh_buffer *metadata, fsh_ipc_message_type *type,
                                       int64_t *body_length, fsh_error *err);
/* Decodes one message. A schema message sets the decoder's schema; a
 * dictionary batch updates its dictionaries (replacement or delta); a
 * record batch sets *batch (a new reference). *batch is NULL otherwise.
 * The body buffer is referenced, not copied, when uncompressed. */
FSH_NODISCARD int fsh_ipc_decode_message(fsh_ipc_decoder *d, fsh_buffer *metadata,
                                         fsh_buffer *body, fsh_batch **batch, fsh_error *err);
/* Decodes the framed message at buf[off, off + avail) -- FFFFFFFF, its
 * int32 metadata length, the Message flatbuffer, the body -- as
 * fsh_ipc_decode_message would decode that metadata and body, without a
 * buffer of either: a stored block's messages are decoded where they lie
 * (the batch's buffers are views of buf). *framed: the bytes the message
 * takes (8 + metadata + body), within avail. EINVAL when the framing or
 * the body does not fit in avail. */
FSH_NODISCARD int fsh_ipc_decode_framed(fsh_ipc_decoder *d, fsh_buffer *buf, int64_t off,
                                        int64_t avail, int64_t *framed, fsh_batch **batch,
                                        fsh_error *err);
fsh_schema *fsh_ipc_decoder_schema(const fsh_ipc_decoder *d); /* borrowed; NULL before */

/* Splicer: joins framed, uncompressed record-batch messages of one schema
 * into ONE record-batch message built straight from their bodies (no
 * decode into arrays): per column the parts' buffers concatenated --
 * fixed-width values appended, offsets rebased, validity and boolean
 * bitmaps shifted to the bit they land on (a bitmap made when some parts
 * have nulls and others none; null counts summed), struct, list, map and
 * fixed-size-list children recursively. The bytes are exactly what
 * fsh_ipc_encode_batch writes (uncompressed) for fsh_concat of the decoded
 * messages. Every part is checked as fsh_ipc_decode_framed checks it
 * (nodes, buffer ranges and sizes against the body), plus the offsets a
 * rebase reads, so a splice never reads outside a message. */
typedef struct fsh_ipc_splicer fsh_ipc_splicer;
/* ENOTSUP (message naming the field) when the schema has a column it does
 * not splice: dictionary-encoded fields and unions (callers decode and
 * concatenate those). */
FSH_NODISCARD int fsh_ipc_splicer_new(fsh_schema *schema, fsh_ipc_splicer **out,
                                      fsh_error *err);
void fsh_ipc_splicer_free(fsh_ipc_splicer *s); /* NULL accepted */
/* Holds the framed message at buf[off, off + avail) (a reference on buf
 * is kept until finish or clear): its framing and metadata verified, an
 * uncompressed record batch with the nodes and buffers the schema needs
 * (its body is checked by finish). *framed: the bytes it takes (8 +
 * metadata + body, within avail); *rows: its length. */
FSH_NODISCARD int fsh_ipc_splicer_add(fsh_ipc_splicer *s, fsh_buffer *buf, int64_t off,
                                      int64_t avail, int64_t *framed, int64_t *rows,
                                      fsh_error *err);
/* Messages held, their rows, and the sum of their body lengths. */
int32_t fsh_ipc_splicer_count(const fsh_ipc_splicer *s);
int64_t fsh_ipc_splicer_rows(const fsh_ipc_splicer *s);
int64_t fsh_ipc_splicer_body_bytes(const fsh_ipc_splicer *s);
/* Held message i (< count): its framed bytes and rows (borrowed). */
void fsh_ipc_splicer_message(const fsh_ipc_splicer *s, int32_t i, const uint8_t **data,
                             int64_t *length, int64_t *rows);
/* Writes the held messages (at least one) as one framed message:
 * *out[0, *length) (a multiple of 8) is lent -- the splicer's scratch,
 * valid until its next finish or free -- and *rows its rows; the messages
 * are let go. On error (EINVAL naming the message and field of a part
 * that does not fit the schema or its body; EOVERFLOW when the values of
 * a 32-bit-offset column add up past INT32_MAX; ENOMEM) *out is NULL and
 * the messages are still held (fsh_ipc_splicer_message gives them). */
FSH_NODISCARD int fsh_ipc_splicer_finish(fsh_ipc_splicer *s, const uint8_t **out,
                                         int64_t *length, int64_t *rows, fsh_error *err);
/* Lets every held message go. */
void fsh_ipc_splicer_clear(fsh_ipc_splicer *s);
/* Decodes a Schema flatbuffer table held standalone (the File footer's, or
 * Flight's GetSchema bytes which are an encapsulated Schema message). */
FSH_NODISCARD int fsh_ipc_decode_schema_message(fsh_buffer *metadata, fsh_schema **out,
                                                fsh_error *err);

/* ---- stream format ----------------------------------------------------- */

typedef struct fsh_ipc_stream_reader fsh_ipc_stream_reader;
/* Takes ownership of `in`. Reads the schema message before returning. */
FSH_NODISCARD int fsh_ipc_stream_reader_open(fsh_input *in, fsh_ipc_stream_reader **out,
                                             fsh_error *err);
fsh_schema *fsh_ipc_stream_reader_schema(fsh_ipc_stream_reader *r); /* borrowed */
/* Next batch (new reference), or *batch = NULL at the end of the stream. */
FSH_NODISCARD int fsh_ipc_stream_reader_next(fsh_ipc_stream_reader *r, fsh_batch **batch,
                                             fsh_error *err);
/* Next raw message without decoding it (for forwarding): *metadata NULL at
 * the end. */
FSH_NODISCARD int fsh_ipc_stream_reader_next_raw(fsh_ipc_stream_reader *r, fsh_buffer **metadata,
                                                 fsh_buffer **body, fsh_error *err);
void fsh_ipc_stream_reader_free(fsh_ipc_stream_reader *r);

typedef struct fsh_ipc_stream_writer fsh_ipc_stream_writer;
/* Takes ownership of `out`; writes the schema message. */
FSH_NODISCARD int fsh_ipc_stream_writer_open(fsh_output *out, fsh_schema *schema,
                                             const fsh_ipc_write_options *opts,
                                             fsh_ipc_stream_writer **w, fsh_error *err);
FSH_NODISCARD int fsh_ipc_stream_writer_write(fsh_ipc_stream_writer *w, fsh_batch *batch,
                                              fsh_error *err);
/* Writes the end-of-stream marker and closes the output; frees w. */
FSH_NODISCARD int fsh_ipc_stream_writer_close(fsh_ipc_stream_writer *w, fsh_error *err);
void fsh_ipc_stream_writer_abort(fsh_ipc_stream_writer *w); /* discards; frees w */

/* Writes one framed message (continuation, length, metadata, body). */
FSH_NODISCARD int fsh_ipc_write_payload(fsh_output *out, const fsh_ipc_payload *p, fsh_error *err);

/* ---- file format ------------------------------------------------------- */

typedef struct fsh_ipc_file_reader fsh_ipc_file_reader;
FSH_NODISCARD int fsh_ipc_file_reader_open(fsh_input *in, fsh_ipc_file_reader **out,
                                           fsh_error *err);
fsh_schema *fsh_ipc_file_reader_schema(fsh_ipc_file_reader *r); /* borrowed */
int64_t fsh_ipc_file_reader_num_batches(const fsh_ipc_file_reader *r);
FSH_NODISCARD int fsh_ipc_file_reader_read(fsh_ipc_file_reader *r, int64_t i, fsh_batch **batch,
                                           fsh_error *err);
void fsh_ipc_file_reader_free(fsh_ipc_file_reader *r);

typedef struct fsh_ipc_file_writer fsh_ipc_file_writer;
FSH_NODISCARD int fsh_ipc_file_writer_open(fsh_output *out, fsh_schema *schema,
                                           const fsh_ipc_write_options *opts,
                                           fsh_ipc_file_writer **w, fsh_error *err);
FSH_NODISCARD int fsh_ipc_file_writer_write(fsh_ipc_file_writer *w, fsh_batch *batch,
                                            fsh_error *err);
FSH_NODISCARD int fsh_ipc_file_writer_close(fsh_ipc_file_writer *w, fsh_error *err);
void fsh_ipc_file_writer_abort(fsh_ipc_file_writer *w);

/* ---- either format ----------------------------------------------------- */

/* Opens a path as file format (magic "ARROW1" at both ends) or stream and
 * returns all its batches in a stream interface. */
FSH_NODISCARD int fsh_ipc_open_path(const char *path, fsh_batch_stream *out, fsh_error *err);
FSH_NODISCARD int fsh_ipc_open_buffer(fsh_buffer *buf, const char *name, fsh_batch_stream *out,
                                      fsh_error *err);
/* Drains every batch of `s` into `out` in the stream format, or the file
 * format with file_format; opts NULL means defaults. Takes ownership of
 * `out` (closed on success, aborted on error); `s` stays the caller's to
 * release. */
FSH_NODISCARD int fsh_ipc_write_batch_stream(fsh_batch_stream *s, fsh_output *out,
                                             bool file_format, const fsh_ipc_write_options *opts,
                                             fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
