/* writer_internal.h -- what the IPC write side's files share: flatbuffer
 * encoding of Schema / Message / Footer, and the encoder's hooks for the
 * file writer. Private to src/ipc. */
#ifndef FSH_IPC_WRITER_INTERNAL_H
#define FSH_IPC_WRITER_INTERNAL_H

#include "ipc/fb_builder.h"
#include "ipc/ipc_internal.h"

/* A FieldNode and a Buffer of a RecordBatch message. */
typedef struct fsh_ipc_node {
  int64_t length;
  int64_t null_count;
} fsh_ipc_node;

typedef struct fsh_ipc_range {
  int64_t offset;
  int64_t length;
} fsh_ipc_range;

/* A File footer Block. */
typedef struct fsh_ipc_block {
  int64_t offset;
  int32_t metadata_length; /* framing prefix included */
  int64_t body_length;
} fsh_ipc_block;

/* Builds a Schema table (fields, custom metadata) in b. */
FSH_NODISCARD int fsh_ipc_build_schema(fsh_fbb *b, const fsh_schema *s, fsh_fb_ref *out,
                                       fsh_error *err);

/* Builds a RecordBatch table. compression NONE omits BodyCompression. */
fsh_fb_ref fsh_ipc_build_record_batch(fsh_fbb *b, int64_t length, const fsh_ipc_node *nodes,
                                      int64_t n_nodes, const fsh_ipc_range *buffers,
                                      int64_t n_buffers, fsh_compression compression);

/* Builds a DictionaryBatch table around a RecordBatch table. */
fsh_fb_ref fsh_ipc_build_dictionary_batch(fsh_fbb *b, int64_t id, fsh_fb_ref record_batch,
                                          bool is_delta);

/* Wraps a header table into a Message (version V5) and finishes the
 * flatbuffer into *out. header_type is the MessageHeader union tag. */
FSH_NODISCARD int fsh_ipc_finish_message(fsh_fbb *b, fsh_ipc_message_type header_type,
                                         fsh_fb_ref header, int64_t body_length, fsh_buffer **out,
                                         fsh_error *err);

/* The metadata of a record batch message of `length` rows with these
 * field nodes, buffers and body length, byte for byte what
 * fsh_ipc_encode_batch makes for a batch of that layout (from the
 * encoder's template of the last message's shape, or built: encoder.c).
 * For callers that lay out a body themselves (the map-output writer,
 * straight from partition builders). The bytes (*bytes, *size) are lent:
 * they belong to the encoder and hold until its next call or free (no
 * allocation per message once it has a template). ENOMEM only (then
 * *bytes is NULL). */
FSH_NODISCARD int fsh_ipc_encoder_batch_metadata(fsh_ipc_encoder *e, int64_t length,
                                                 const fsh_ipc_node *nodes, int64_t n_nodes,
                                                 const fsh_ipc_range *buffers, int64_t n_buffers,
                                                 int64_t body_length, const uint8_t **bytes,
                                                 int64_t *size, fsh_error *err);

/* Encodes a standalone Schema message (no body). */
FSH_NODISCARD int fsh_ipc_encode_schema_message(const fsh_schema *s, fsh_buffer **out,
                                                fsh_error *err);

/* Encodes the File format Footer flatbuffer. */
FSH_NODISCARD int fsh_ipc_encode_footer(const fsh_schema *s, const fsh_ipc_block *dicts,
                                        int64_t n_dicts, const fsh_ipc_block *batches,
                                        int64_t n_batches, fsh_buffer **out, fsh_error *err);

/* A message body under construction: field nodes, buffer ranges, and the
 * segments (references) that make up the body bytes, padding included. */
typedef struct fsh_ipc_body {
  fsh_compression compression;
  int32_t level;
  fsh_buffer *zeros; /* borrowed: >= 64 zero bytes for padding */
  /* NULL, or FSH_IPC_ALIGN slots (the encoder's) where a view of zeros of
   * each padding size is kept once made and referenced by every padding
   * segment of that size */
  fsh_buffer **pads;
  fsh_ipc_node *nodes;
  int64_t n_nodes, cap_nodes;
  fsh_ipc_range *buffers;
  int64_t n_buffers, cap_buffers;
  fsh_buffer **segments;
  int32_t n_segments, cap_segments;
  int64_t length; /* body bytes so far, a multiple of 8 */
} fsh_ipc_body;

/* Appends the field nodes and buffers of a[offset, offset+length) (offset
 * in a's own slots, i.e. a->offset included) in IPC pre-order. Buffers are
 * referenced, not copied, unless slicing needs it (bitmaps at a bit offset,
 * offsets that do not start at 0, dense union offsets) or compression is
 * on. On error the body is left partially filled: reset it. */
FSH_NODISCARD int fsh_ipc_body_append(fsh_ipc_body *body, const fsh_field *f, fsh_array *a,
                                      int64_t offset, int64_t length, fsh_error *err);
void fsh_ipc_body_reset(fsh_ipc_body *body);

/* A buffer of 64 zero bytes (static memory, wrapped); new reference. */
FSH_NODISCARD fsh_buffer *fsh_ipc_zeros_new(void);

/* File format: the encoder may not replace a dictionary already written
 * (only extend it with a delta, or re-send identical contents, which it
 * skips). */
void fsh_ipc_encoder_set_file_format(fsh_ipc_encoder *e, bool file_format);

#endif
