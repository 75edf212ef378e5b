/* read_internal.h -- what the IPC read side's files share: the verified
 * Message header, metadata decoding into fields and schemas, body decoding
 * into arrays, and dictionary deltas. Nothing here does I/O. */
#ifndef FSH_IPC_READ_INTERNAL_H
#define FSH_IPC_READ_INTERNAL_H

#include "ipc/fb_reader.h"
#include "ipc/ipc_internal.h"

/* MetadataVersion values of Schema.fbs (V1 = 0). */
#define FSH_IPC_V4 3
#define FSH_IPC_V5 4

/* A verified Message flatbuffer. `fb` is referenced by `header`: keep the
 * struct where it was parsed (do not copy it). */
typedef struct fsh_ipc_msg {
  fsh_fb_reader fb;
  int16_t version;
  fsh_ipc_message_type type;
  int64_t body_length;
  fsh_fb_table header; /* the Schema, DictionaryBatch or RecordBatch table */
} fsh_ipc_msg;

/* Parses and verifies a Message flatbuffer in data[0..size): version V4 or
 * V5, a Schema / DictionaryBatch / RecordBatch header (Tensors: ENOTSUP),
 * a non-negative bodyLength. */
FSH_NODISCARD int fsh_ipc_msg_parse(const uint8_t *data, int64_t size, fsh_ipc_msg *out,
                                    fsh_error *err);

/* Decodes a Schema table into a new schema (one reference). */
FSH_NODISCARD int fsh_ipc_schema_decode(const fsh_fb_table *schema, fsh_schema **out,
                                        fsh_error *err);

/* A RecordBatch header: nodes are FieldNode structs {length, null_count},
 * buffers are Buffer structs {offset, length}, both 16 bytes, verified to
 * lie in the flatbuffer. */
typedef struct fsh_ipc_batch_header {
  int64_t length;
  fsh_fb_vector nodes;
  fsh_fb_vector buffers;
  fsh_compression compression;
} fsh_ipc_batch_header;

FSH_NODISCARD int fsh_ipc_batch_header_parse(const fsh_fb_table *rb, fsh_ipc_batch_header *out,
                                             fsh_error *err);

typedef struct fsh_ipc_dict_header {
  int64_t id;
  bool is_delta;
  fsh_ipc_batch_header data;
} fsh_ipc_dict_header;

FSH_NODISCARD int fsh_ipc_dict_header_parse(const fsh_fb_table *db, fsh_ipc_dict_header *out,
                                            fsh_error *err);

/* Body decoding state for one message: the header, the body (bytes beyond
 * body_length are ignored), the cursor into nodes and buffers, and the
 * dictionary lookup for dictionary-encoded fields. */
typedef struct fsh_ipc_body_ctx {
  const fsh_ipc_batch_header *h;
  fsh_buffer *body; /* may be NULL when body_length is 0 */
  int64_t body_off; /* where the body starts in `body` (a framed message's) */
  int64_t body_length;
  fsh_pack *pack; /* arrays and buffer views are carved from it (NULL: none) */
  int16_t version;
  int64_t node_i, buf_i;
  /* Returns the current dictionary for id (borrowed) or NULL. */
  fsh_array *(*find_dict)(void *ctx, int64_t id);
  void *find_ctx;
  char path[512];
} fsh_ipc_body_ctx;

/* Decodes n columns of `fields` from the body into out[0..n) (new
 * references). On error nothing is left in out and the message names the
 * field path and buffer. Checks every buffer range against the body and
 * that fixed-size buffers are large enough for their node lengths; deeper
 * checks (offsets, dictionary indices, UTF-8) are fsh_batch_validate's. */
FSH_NODISCARD int fsh_ipc_body_decode(fsh_ipc_body_ctx *c, const fsh_field *fields, int64_t n,
                                      fsh_array **out, fsh_error *err);

/* Concatenates b onto a (both of field f's type) into a new array: used for
 * dictionary deltas. */
FSH_NODISCARD int fsh_ipc_concat(const fsh_field *f, const fsh_array *a, const fsh_array *b,
                                 fsh_array **out, fsh_error *err);

/* Decoder internals for the readers. In file mode a second non-delta
 * dictionary batch for an id is an error (the file format forbids
 * replacement). The message index names messages in errors. */
void fsh_ipc_decoder_set_file_mode(fsh_ipc_decoder *d, bool file_mode);
void fsh_ipc_decoder_set_index(fsh_ipc_decoder *d, int64_t index);
/* Whether record batches are decoded into one pack each (arrow.h; the
 * default) or with an allocation per object (benchmarks compare). */
void fsh_ipc_decoder_set_packed(fsh_ipc_decoder *d, bool packed);
/* Takes a reference on schema as the decoder's schema (file footer). */
FSH_NODISCARD int fsh_ipc_decoder_set_schema(fsh_ipc_decoder *d, fsh_schema *schema,
                                             fsh_error *err);

/* Splits a framed message prefix at data[0..n): sets *meta_off and
 * *meta_len for the flatbuffer (continuation + int32 length, or the legacy
 * int32 length); *meta_len 0 means end of stream. */
FSH_NODISCARD int fsh_ipc_parse_prefix(const uint8_t *data, int64_t n, int64_t *meta_off,
                                       int64_t *meta_len, fsh_error *err);

/* fsh_input_from_buffer with a name (copied) for error messages. */
FSH_NODISCARD int fsh_input_from_buffer_named(fsh_buffer *buf, const char *name,
                                              fsh_input **out, fsh_error *err);

#endif
