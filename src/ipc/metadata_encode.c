/* metadata_encode.c -- fsh_schema / fsh_field to the Arrow flatbuffer
 * metadata: Schema.fbs (Schema, Field, every type table, dictionary
 * encodings, custom metadata), Message.fbs (Message, RecordBatch,
 * DictionaryBatch, BodyCompression) and File.fbs (Footer). Metadata
 * version V5. Field ids below follow the declaration order in the .fbs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ipc/writer_internal.h"

/* Schema.fbs: the Type union tags. */
enum {
  TYPE_NULL = 1,
  TYPE_INT = 2,
  TYPE_FLOATING_POINT = 3,
  TYPE_BINARY = 4,
  TYPE_UTF8 = 5,
  TYPE_BOOL = 6,
  TYPE_DECIMAL = 7,
  TYPE_DATE = 8,
  TYPE_TIME = 9,
  TYPE_TIMESTAMP = 10,
  TYPE_INTERVAL = 11,
  TYPE_LIST = 12,
  TYPE_STRUCT = 13,
  TYPE_UNION = 14,
  TYPE_FIXED_SIZE_BINARY = 15,
  TYPE_FIXED_SIZE_LIST = 16,
  TYPE_MAP = 17,
  TYPE_DURATION = 18,
  TYPE_LARGE_BINARY = 19,
  TYPE_LARGE_UTF8 = 20,
  TYPE_LARGE_LIST = 21
};

#define METADATA_V5 4
#define MAX_DEPTH 64

/* Field ids of the tables used. */
enum { FIELD_NAME, FIELD_NULLABLE, FIELD_TYPE_TYPE, FIELD_TYPE, FIELD_DICTIONARY, FIELD_CHILDREN,
       FIELD_CUSTOM_METADATA };
enum { SCHEMA_ENDIANNESS, SCHEMA_FIELDS, SCHEMA_CUSTOM_METADATA };
enum { MESSAGE_VERSION, MESSAGE_HEADER_TYPE, MESSAGE_HEADER, MESSAGE_BODY_LENGTH };
enum { RB_LENGTH, RB_NODES, RB_BUFFERS, RB_COMPRESSION };
enum { DB_ID, DB_DATA, DB_IS_DELTA };
enum { FOOTER_VERSION, FOOTER_SCHEMA, FOOTER_DICTIONARIES, FOOTER_RECORD_BATCHES };

static fsh_fb_ref empty_table(fsh_fbb *b) {
  fsh_fbb_start_table(b);
  return fsh_fbb_end_table(b);
}

static fsh_fb_ref int_table(fsh_fbb *b, int bit_width, bool is_signed) {
  fsh_fbb_start_table(b);
  fsh_fbb_add_i32(b, 0, bit_width);
  fsh_fbb_add_u8(b, 1, is_signed);
  return fsh_fbb_end_table(b);
}

static fsh_fb_ref one_i16_table(fsh_fbb *b, int16_t v) {
  fsh_fbb_start_table(b);
  fsh_fbb_add_i16(b, 0, v);
  return fsh_fbb_end_table(b);
}

static fsh_fb_ref one_i32_table(fsh_fbb *b, int32_t v) {
  fsh_fbb_start_table(b);
  fsh_fbb_add_i32(b, 0, v);
  return fsh_fbb_end_table(b);
}

static int int_params(fsh_type_id t, int *bits, bool *is_signed) {
  switch (t) {
    case FSH_TYPE_INT8: *bits = 8; *is_signed = true; return 0;
    case FSH_TYPE_INT16: *bits = 16; *is_signed = true; return 0;
    case FSH_TYPE_INT32: *bits = 32; *is_signed = true; return 0;
    case FSH_TYPE_INT64: *bits = 64; *is_signed = true; return 0;
    case FSH_TYPE_UINT8: *bits = 8; *is_signed = false; return 0;
    case FSH_TYPE_UINT16: *bits = 16; *is_signed = false; return 0;
    case FSH_TYPE_UINT32: *bits = 32; *is_signed = false; return 0;
    case FSH_TYPE_UINT64: *bits = 64; *is_signed = false; return 0;
    default: return EINVAL;
  }
}

/* Builds the type table of `f` (its own type, dictionary ignored). */
static int build_type(fsh_fbb *b, const fsh_field *f, const char *path, uint8_t *tag,
                      fsh_fb_ref *out, fsh_error *err) {
  int bits;
  bool sgn;
  fsh_fb_ref r = 0, tz = 0, ids = 0;
  switch (f->type) {
    case FSH_TYPE_NA: *tag = TYPE_NULL; r = empty_table(b); break;
    case FSH_TYPE_BOOL: *tag = TYPE_BOOL; r = empty_table(b); break;
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32: case FSH_TYPE_UINT64:
      (void)int_params(f->type, &bits, &sgn);
      *tag = TYPE_INT;
      r = int_table(b, bits, sgn);
      break;
    case FSH_TYPE_FLOAT16: *tag = TYPE_FLOATING_POINT; r = one_i16_table(b, 0); break;
    case FSH_TYPE_FLOAT32: *tag = TYPE_FLOATING_POINT; r = one_i16_table(b, 1); break;
    case FSH_TYPE_FLOAT64: *tag = TYPE_FLOATING_POINT; r = one_i16_table(b, 2); break;
    case FSH_TYPE_DECIMAL128:
    case FSH_TYPE_DECIMAL256:
      *tag = TYPE_DECIMAL;
      fsh_fbb_start_table(b);
      fsh_fbb_add_i32(b, 0, f->precision);
      fsh_fbb_add_i32(b, 1, f->scale);
      fsh_fbb_add_i32(b, 2, f->type == FSH_TYPE_DECIMAL128 ? 128 : 256);
      r = fsh_fbb_end_table(b);
      break;
    case FSH_TYPE_DATE32: *tag = TYPE_DATE; r = one_i16_table(b, 0); break;
    case FSH_TYPE_DATE64: *tag = TYPE_DATE; r = one_i16_table(b, 1); break;
    case FSH_TYPE_TIME32:
    case FSH_TYPE_TIME64:
      *tag = TYPE_TIME;
      fsh_fbb_start_table(b);
      fsh_fbb_add_i16(b, 0, (int16_t)f->unit);
      fsh_fbb_add_i32(b, 1, f->type == FSH_TYPE_TIME32 ? 32 : 64);
      r = fsh_fbb_end_table(b);
      break;
    case FSH_TYPE_TIMESTAMP:
      *tag = TYPE_TIMESTAMP;
      if (f->timezone) tz = fsh_fbb_create_string(b, f->timezone, strlen(f->timezone));
      fsh_fbb_start_table(b);
      fsh_fbb_add_i16(b, 0, (int16_t)f->unit);
      fsh_fbb_add_offset(b, 1, tz);
      r = fsh_fbb_end_table(b);
      break;
    case FSH_TYPE_DURATION: *tag = TYPE_DURATION; r = one_i16_table(b, (int16_t)f->unit); break;
    case FSH_TYPE_INTERVAL_MONTHS: *tag = TYPE_INTERVAL; r = one_i16_table(b, 0); break;
    case FSH_TYPE_INTERVAL_DAY_TIME: *tag = TYPE_INTERVAL; r = one_i16_table(b, 1); break;
    case FSH_TYPE_INTERVAL_MONTH_DAY_NANO: *tag = TYPE_INTERVAL; r = one_i16_table(b, 2); break;
    case FSH_TYPE_BINARY: *tag = TYPE_BINARY; r = empty_table(b); break;
    case FSH_TYPE_STRING: *tag = TYPE_UTF8; r = empty_table(b); break;
    case FSH_TYPE_LARGE_BINARY: *tag = TYPE_LARGE_BINARY; r = empty_table(b); break;
    case FSH_TYPE_LARGE_STRING: *tag = TYPE_LARGE_UTF8; r = empty_table(b); break;
    case FSH_TYPE_FIXED_SIZE_BINARY:
      *tag = TYPE_FIXED_SIZE_BINARY;
      r = one_i32_table(b, f->byte_width);
      break;
    case FSH_TYPE_LIST: *tag = TYPE_LIST; r = empty_table(b); break;
    case FSH_TYPE_LARGE_LIST: *tag = TYPE_LARGE_LIST; r = empty_table(b); break;
    case FSH_TYPE_FIXED_SIZE_LIST:
      *tag = TYPE_FIXED_SIZE_LIST;
      r = one_i32_table(b, f->list_size);
      break;
    case FSH_TYPE_STRUCT: *tag = TYPE_STRUCT; r = empty_table(b); break;
    case FSH_TYPE_MAP:
      *tag = TYPE_MAP;
      fsh_fbb_start_table(b);
      fsh_fbb_add_u8(b, 0, f->keys_sorted);
      r = fsh_fbb_end_table(b);
      break;
    case FSH_TYPE_SPARSE_UNION:
    case FSH_TYPE_DENSE_UNION:
      *tag = TYPE_UNION;
      if (f->type_codes) {
        int32_t *le = fsh_malloc(sizeof(int32_t) * (size_t)(f->n_children ? f->n_children : 1));
        if (!le) return fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
        for (int64_t i = 0; i < f->n_children; i++)
          fsh_store_le32((uint8_t *)&le[i], (uint32_t)f->type_codes[i]);
        ids = fsh_fbb_create_vector(b, le, (size_t)f->n_children, 4, 4);
        fsh_free(le);
      }
      fsh_fbb_start_table(b);
      fsh_fbb_add_i16(b, 0, f->type == FSH_TYPE_SPARSE_UNION ? 0 : 1);
      fsh_fbb_add_offset(b, 1, ids);
      r = fsh_fbb_end_table(b);
      break;
    default:
      return fsh_error_set(err, ENOTSUP, "field '%s': type id %d cannot be written to IPC", path,
                           (int)f->type);
  }
  *out = r;
  return 0;
}

/* A vector of KeyValue tables, or 0 when there is no metadata. */
static fsh_fb_ref build_metadata(fsh_fbb *b, const fsh_metadata *m) {
  if (m->n == 0) return 0;
  fsh_fb_ref *kvs = fsh_malloc(sizeof(fsh_fb_ref) * (size_t)m->n);
  if (!kvs) {
    b->error = ENOMEM;
    return 0;
  }
  for (int64_t i = 0; i < m->n; i++) {
    const fsh_kv *kv = &m->items[i];
    fsh_fb_ref k = fsh_fbb_create_string(b, kv->key, strlen(kv->key));
    fsh_fb_ref v = fsh_fbb_create_string(b, kv->value ? kv->value : "",
                                         kv->value ? (size_t)kv->value_len : 0);
    fsh_fbb_start_table(b);
    fsh_fbb_add_offset(b, 0, k);
    fsh_fbb_add_offset(b, 1, v);
    kvs[i] = fsh_fbb_end_table(b);
  }
  fsh_fb_ref r = b->error ? 0 : fsh_fbb_create_offset_vector(b, kvs, (size_t)m->n);
  fsh_free(kvs);
  return r;
}

static int build_field(fsh_fbb *b, const fsh_field *f, const char *parent, int depth,
                       fsh_fb_ref *out, fsh_error *err);

/* A vector of Field tables for f's children (0 when none). */
static int build_children(fsh_fbb *b, const fsh_field *f, const char *path, int depth,
                          fsh_fb_ref *out, fsh_error *err) {
  *out = 0;
  if (f->n_children == 0) {
    *out = fsh_fbb_create_vector(b, NULL, 0, 4, 4);
    return 0;
  }
  fsh_fb_ref *refs = fsh_malloc(sizeof(fsh_fb_ref) * (size_t)f->n_children);
  if (!refs) return fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
  int rc = 0;
  for (int64_t i = 0; i < f->n_children && rc == 0; i++)
    rc = build_field(b, &f->children[i], path, depth + 1, &refs[i], err);
  if (rc == 0) *out = fsh_fbb_create_offset_vector(b, refs, (size_t)f->n_children);
  fsh_free(refs);
  return rc;
}

static int build_field(fsh_fbb *b, const fsh_field *f, const char *parent, int depth,
                       fsh_fb_ref *out, fsh_error *err) {
  char path[256];
  if (parent && parent[0])
    snprintf(path, sizeof path, "%s.%s", parent, f->name ? f->name : "");
  else
    snprintf(path, sizeof path, "%s", f->name ? f->name : "");
  if (depth > MAX_DEPTH)
    return fsh_error_set(err, EINVAL, "field '%s': nested deeper than %d levels", path, MAX_DEPTH);

  /* A dictionary-encoded field: the Field's type is the value type and its
   * children are the value type's; f->type is the index type. */
  const fsh_field *value = f->dictionary ? &f->dictionary->value : f;
  fsh_fb_ref name = fsh_fbb_create_string(b, f->name ? f->name : "", f->name ? strlen(f->name) : 0);
  uint8_t tag = 0;
  fsh_fb_ref type = 0, dict = 0, children = 0;
  FSH_RETURN_NOT_OK(build_type(b, value, path, &tag, &type, err));
  if (f->dictionary) {
    int bits;
    bool sgn;
    if (int_params(f->type, &bits, &sgn) != 0)
      return fsh_error_set(err, EINVAL,
                           "field '%s': dictionary index type must be an integer, not %s", path,
                           fsh_type_name(f->type));
    fsh_fb_ref index = int_table(b, bits, sgn);
    fsh_fbb_start_table(b);
    fsh_fbb_add_i64(b, 0, f->dictionary->id);
    fsh_fbb_add_offset(b, 1, index);
    fsh_fbb_add_u8(b, 2, f->dictionary->ordered);
    fsh_fbb_add_i16(b, 3, 0); /* DenseArray */
    dict = fsh_fbb_end_table(b);
  }
  FSH_RETURN_NOT_OK(build_children(b, value, path, depth, &children, err));
  fsh_fb_ref md = build_metadata(b, &f->metadata);

  fsh_fbb_start_table(b);
  fsh_fbb_add_offset(b, FIELD_NAME, name);
  fsh_fbb_add_u8(b, FIELD_NULLABLE, f->nullable);
  fsh_fbb_add_u8(b, FIELD_TYPE_TYPE, tag);
  fsh_fbb_add_offset(b, FIELD_TYPE, type);
  fsh_fbb_add_offset(b, FIELD_DICTIONARY, dict);
  fsh_fbb_add_offset(b, FIELD_CHILDREN, children);
  fsh_fbb_add_offset(b, FIELD_CUSTOM_METADATA, md);
  *out = fsh_fbb_end_table(b);
  return 0;
}

int fsh_ipc_build_schema(fsh_fbb *b, const fsh_schema *s, fsh_fb_ref *out, fsh_error *err) {
  fsh_fb_ref *refs = fsh_malloc(sizeof(fsh_fb_ref) * (size_t)(s->n_fields ? s->n_fields : 1));
  if (!refs) return fsh_error_set(err, ENOMEM, "schema: out of memory");
  int rc = 0;
  for (int64_t i = 0; i < s->n_fields && rc == 0; i++)
    rc = build_field(b, &s->fields[i], "", 0, &refs[i], err);
  fsh_fb_ref fields = 0;
  if (rc == 0) fields = fsh_fbb_create_offset_vector(b, refs, (size_t)s->n_fields);
  fsh_free(refs);
  if (rc) return rc;
  fsh_fb_ref md = build_metadata(b, &s->metadata);
  fsh_fbb_start_table(b);
  fsh_fbb_add_i16(b, SCHEMA_ENDIANNESS, 0); /* Little */
  fsh_fbb_add_offset(b, SCHEMA_FIELDS, fields);
  fsh_fbb_add_offset(b, SCHEMA_CUSTOM_METADATA, md);
  *out = fsh_fbb_end_table(b);
  return 0;
}

/* A vector of 16-byte structs of two int64 each (FieldNode, Buffer). */
static fsh_fb_ref pair_vector(fsh_fbb *b, const int64_t *pairs, int64_t n) {
  uint8_t *le = fsh_malloc((size_t)(n ? n : 1) * 16);
  if (!le) {
    b->error = ENOMEM;
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    fsh_store_le64(le + 16 * i, (uint64_t)pairs[2 * i]);
    fsh_store_le64(le + 16 * i + 8, (uint64_t)pairs[2 * i + 1]);
  }
  fsh_fb_ref r = fsh_fbb_create_vector(b, le, (size_t)n, 16, 8);
  fsh_free(le);
  return r;
}

fsh_fb_ref fsh_ipc_build_record_batch(fsh_fbb *b, int64_t length, const fsh_ipc_node *nodes,
                                      int64_t n_nodes, const fsh_ipc_range *buffers,
                                      int64_t n_buffers, fsh_compression compression) {
  _Static_assert(sizeof(fsh_ipc_node) == 16 && sizeof(fsh_ipc_range) == 16, "pairs of int64");
  fsh_fb_ref nv = pair_vector(b, (const int64_t *)nodes, n_nodes);
  fsh_fb_ref bv = pair_vector(b, (const int64_t *)buffers, n_buffers);
  fsh_fb_ref comp = 0;
  if (compression != FSH_COMPRESSION_NONE) {
    fsh_fbb_start_table(b);
    fsh_fbb_add_u8(b, 0, compression == FSH_COMPRESSION_LZ4_FRAME ? 0 : 1);
    fsh_fbb_add_u8(b, 1, 0); /* BUFFER */
    comp = fsh_fbb_end_table(b);
  }
  fsh_fbb_start_table(b);
  fsh_fbb_add_i64(b, RB_LENGTH, length);
  fsh_fbb_add_offset(b, RB_NODES, nv);
  fsh_fbb_add_offset(b, RB_BUFFERS, bv);
  fsh_fbb_add_offset(b, RB_COMPRESSION, comp);
  return fsh_fbb_end_table(b);
}

fsh_fb_ref fsh_ipc_build_dictionary_batch(fsh_fbb *b, int64_t id, fsh_fb_ref record_batch,
                                          bool is_delta) {
  fsh_fbb_start_table(b);
  fsh_fbb_add_i64(b, DB_ID, id);
  fsh_fbb_add_offset(b, DB_DATA, record_batch);
  fsh_fbb_add_u8(b, DB_IS_DELTA, is_delta);
  return fsh_fbb_end_table(b);
}

int fsh_ipc_finish_message(fsh_fbb *b, fsh_ipc_message_type header_type, fsh_fb_ref header,
                           int64_t body_length, fsh_buffer **out, fsh_error *err) {
  fsh_fbb_start_table(b);
  fsh_fbb_add_i64(b, MESSAGE_BODY_LENGTH, body_length);
  fsh_fbb_add_offset(b, MESSAGE_HEADER, header);
  fsh_fbb_add_i16(b, MESSAGE_VERSION, METADATA_V5);
  fsh_fbb_add_u8(b, MESSAGE_HEADER_TYPE, (uint8_t)header_type);
  fsh_fb_ref msg = fsh_fbb_end_table(b);
  return fsh_fbb_finish(b, msg, out, err);
}

int fsh_ipc_encode_schema_message(const fsh_schema *s, fsh_buffer **out, fsh_error *err) {
  fsh_fbb b;
  fsh_fbb_init(&b);
  fsh_fb_ref schema = 0;
  int rc = fsh_ipc_build_schema(&b, s, &schema, err);
  if (rc == 0) rc = fsh_ipc_finish_message(&b, FSH_IPC_SCHEMA, schema, 0, out, err);
  fsh_fbb_reset(&b);
  return rc;
}

static fsh_fb_ref block_vector(fsh_fbb *b, const fsh_ipc_block *blocks, int64_t n) {
  /* struct Block { offset: long; metaDataLength: int; (pad 4) bodyLength: long } */
  uint8_t *le = fsh_calloc((size_t)(n ? n : 1), 24);
  if (!le) {
    b->error = ENOMEM;
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    fsh_store_le64(le + 24 * i, (uint64_t)blocks[i].offset);
    fsh_store_le32(le + 24 * i + 8, (uint32_t)blocks[i].metadata_length);
    fsh_store_le64(le + 24 * i + 16, (uint64_t)blocks[i].body_length);
  }
  fsh_fb_ref r = fsh_fbb_create_vector(b, le, (size_t)n, 24, 8);
  fsh_free(le);
  return r;
}

int fsh_ipc_encode_footer(const fsh_schema *s, const fsh_ipc_block *dicts, int64_t n_dicts,
                          const fsh_ipc_block *batches, int64_t n_batches, fsh_buffer **out,
                          fsh_error *err) {
  fsh_fbb b;
  fsh_fbb_init(&b);
  fsh_fb_ref schema = 0;
  int rc = fsh_ipc_build_schema(&b, s, &schema, err);
  if (rc == 0) {
    fsh_fb_ref dv = block_vector(&b, dicts, n_dicts);
    fsh_fb_ref bv = block_vector(&b, batches, n_batches);
    fsh_fbb_start_table(&b);
    fsh_fbb_add_i16(&b, FOOTER_VERSION, METADATA_V5);
    fsh_fbb_add_offset(&b, FOOTER_SCHEMA, schema);
    fsh_fbb_add_offset(&b, FOOTER_DICTIONARIES, dv);
    fsh_fbb_add_offset(&b, FOOTER_RECORD_BATCHES, bv);
    fsh_fb_ref footer = fsh_fbb_end_table(&b);
    rc = fsh_fbb_finish(&b, footer, out, err);
  }
  fsh_fbb_reset(&b);
  return rc;
}
