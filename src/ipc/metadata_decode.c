/* metadata_decode.c -- decodes Arrow's Message.fbs / Schema.fbs tables
 * (through the verifying flatbuffer reader) into fsh_schema / fsh_field and
 * RecordBatch / DictionaryBatch headers. */
#include "ipc/read_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Vtable slots, in declaration order of the .fbs tables. */
enum { MSG_VERSION = 0, MSG_HEADER_TYPE = 1, MSG_BODY_LENGTH = 3 };
enum { SCHEMA_ENDIANNESS = 0, SCHEMA_FIELDS = 1, SCHEMA_METADATA = 2 };
enum { FIELD_NAME = 0, FIELD_NULLABLE = 1, FIELD_TYPE_TYPE = 2, FIELD_DICTIONARY = 4,
       FIELD_CHILDREN = 5, FIELD_METADATA = 6 };
enum { KV_KEY = 0, KV_VALUE = 1 };
enum { RB_LENGTH = 0, RB_NODES = 1, RB_BUFFERS = 2, RB_COMPRESSION = 3, RB_VARIADIC = 4 };
enum { DB_ID = 0, DB_DATA = 1, DB_IS_DELTA = 2 };
enum { DE_ID = 0, DE_INDEX_TYPE = 1, DE_ORDERED = 2 };

/* Type union members of Schema.fbs. */
enum {
  T_NULL = 1, T_INT, T_FLOAT, T_BINARY, T_UTF8, T_BOOL, T_DECIMAL, T_DATE, T_TIME,
  T_TIMESTAMP, T_INTERVAL, T_LIST, T_STRUCT, T_UNION, T_FIXED_SIZE_BINARY,
  T_FIXED_SIZE_LIST, T_MAP, T_DURATION, T_LARGE_BINARY, T_LARGE_UTF8, T_LARGE_LIST,
  T_RUN_END_ENCODED, T_BINARY_VIEW, T_UTF8_VIEW, T_LIST_VIEW, T_LARGE_LIST_VIEW
};

static const char *const unsupported_names[] = {
    [T_RUN_END_ENCODED] = "RunEndEncoded", [T_BINARY_VIEW] = "BinaryView",
    [T_UTF8_VIEW] = "Utf8View",            [T_LIST_VIEW] = "ListView",
    [T_LARGE_LIST_VIEW] = "LargeListView",
};

/* ---- Message ----------------------------------------------------------- */

int fsh_ipc_msg_parse(const uint8_t *data, int64_t size, fsh_ipc_msg *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  fsh_fb_table root;
  uint8_t htype;
  FSH_RETURN_NOT_OK(fsh_fb_root(&out->fb, data, size, &root, err));
  FSH_RETURN_NOT_OK(fsh_fb_i16(&root, MSG_VERSION, 0, &out->version, err));
  FSH_RETURN_NOT_OK(fsh_fb_i64(&root, MSG_BODY_LENGTH, 0, &out->body_length, err));
  FSH_RETURN_NOT_OK(fsh_fb_union(&root, MSG_HEADER_TYPE, &htype, &out->header, err));
  if (out->version < FSH_IPC_V4)
    return fsh_error_set(err, ENOTSUP, "metadata version V%d is not supported (V4 or V5 needed)",
                         out->version + 1);
  if (out->version > FSH_IPC_V5)
    return fsh_error_set(err, ENOTSUP, "unknown metadata version %d", out->version + 1);
  if (out->body_length < 0)
    return fsh_error_set(err, EINVAL, "negative body length %lld", (long long)out->body_length);
  switch (htype) {
    case 1: out->type = FSH_IPC_SCHEMA; break;
    case 2: out->type = FSH_IPC_DICTIONARY_BATCH; break;
    case 3: out->type = FSH_IPC_RECORD_BATCH; break;
    case 0: return fsh_error_set(err, EINVAL, "message has no header");
    case 4: case 5: return fsh_error_set(err, ENOTSUP, "tensor messages are not supported");
    default: return fsh_error_set(err, EINVAL, "unknown message header type %d", htype);
  }
  return 0;
}

/* ---- key/value metadata ------------------------------------------------ */

static int decode_metadata(const fsh_fb_table *t, int slot, fsh_metadata *out, fsh_error *err) {
  fsh_fb_vector v;
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(t, slot, 4, &v, err));
  for (int64_t i = 0; i < v.n; i++) {
    fsh_fb_table kv;
    const char *key, *value;
    int64_t klen, vlen;
    FSH_RETURN_NOT_OK(fsh_fb_vector_table(&v, i, &kv, err));
    FSH_RETURN_NOT_OK(fsh_fb_string(&kv, KV_KEY, &key, &klen, err));
    FSH_RETURN_NOT_OK(fsh_fb_string(&kv, KV_VALUE, &value, &vlen, err));
    if (fsh_metadata_add(out, key ? key : "", value ? value : "", value ? vlen : 0) != 0)
      return fsh_error_set(err, ENOMEM, "out of memory decoding metadata");
  }
  return 0;
}

/* ---- fields ------------------------------------------------------------ */

typedef struct field_ctx {
  char path[512];
  fsh_error *err;
} field_ctx;

/* Sets an error naming the field being decoded. */
static int ferr(field_ctx *c, int code, const char *fmt, ...) FSH_PRINTF(3, 4);
static int ferr(field_ctx *c, int code, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return fsh_error_set(c->err, code, "field '%s': %s", c->path, msg);
}

/* Runs a flatbuffer access; on failure prefixes the field path. */
#define FB(c, expr)                                                          \
  do {                                                                       \
    int fb_rc_ = (expr);                                                     \
    if (fb_rc_ != 0) return fsh_error_prefix((c)->err, fb_rc_, "field '%s': ", (c)->path); \
  } while (0)

static int decode_int(field_ctx *c, const fsh_fb_table *t, fsh_type_id *out) {
  int32_t bits;
  bool is_signed;
  FB(c, fsh_fb_i32(t, 0, 0, &bits, c->err));
  FB(c, fsh_fb_bool(t, 1, false, &is_signed, c->err));
  switch (bits) {
    case 8: *out = is_signed ? FSH_TYPE_INT8 : FSH_TYPE_UINT8; return 0;
    case 16: *out = is_signed ? FSH_TYPE_INT16 : FSH_TYPE_UINT16; return 0;
    case 32: *out = is_signed ? FSH_TYPE_INT32 : FSH_TYPE_UINT32; return 0;
    case 64: *out = is_signed ? FSH_TYPE_INT64 : FSH_TYPE_UINT64; return 0;
  }
  return ferr(c, EINVAL, "integer bit width %d (expected 8, 16, 32 or 64)", bits);
}

static int check_time_unit(field_ctx *c, int16_t unit) {
  if (unit < FSH_SECOND || unit > FSH_NANO) return ferr(c, EINVAL, "bad time unit %d", unit);
  return 0;
}

/* Temporal types: Date, Time, Timestamp, Interval, Duration. */
static int decode_temporal(field_ctx *c, uint8_t tt, const fsh_fb_table *t, fsh_field *f) {
  int16_t unit;
  int32_t bits;
  const char *tz;
  int64_t tzlen;
  switch (tt) {
    case T_DATE:
      FB(c, fsh_fb_i16(t, 0, 1, &unit, c->err));
      if (unit != 0 && unit != 1) return ferr(c, EINVAL, "bad date unit %d", unit);
      f->type = unit == 0 ? FSH_TYPE_DATE32 : FSH_TYPE_DATE64;
      return 0;
    case T_TIME:
      FB(c, fsh_fb_i16(t, 0, FSH_MILLI, &unit, c->err));
      FB(c, fsh_fb_i32(t, 1, 32, &bits, c->err));
      FSH_RETURN_NOT_OK(check_time_unit(c, unit));
      if (!((bits == 32 && unit <= FSH_MILLI) || (bits == 64 && unit >= FSH_MICRO)))
        return ferr(c, EINVAL, "time of bit width %d cannot have unit %d", bits, unit);
      f->type = bits == 32 ? FSH_TYPE_TIME32 : FSH_TYPE_TIME64;
      f->unit = (fsh_time_unit)unit;
      return 0;
    case T_TIMESTAMP:
      FB(c, fsh_fb_i16(t, 0, FSH_SECOND, &unit, c->err));
      FB(c, fsh_fb_string(t, 1, &tz, &tzlen, c->err));
      FSH_RETURN_NOT_OK(check_time_unit(c, unit));
      f->type = FSH_TYPE_TIMESTAMP;
      f->unit = (fsh_time_unit)unit;
      if (tz && tzlen > 0 && fsh_field_set_timezone(f, tz) != 0)
        return ferr(c, ENOMEM, "out of memory");
      return 0;
    case T_INTERVAL:
      FB(c, fsh_fb_i16(t, 0, 0, &unit, c->err));
      if (unit < 0 || unit > 2) return ferr(c, EINVAL, "bad interval unit %d", unit);
      f->type = unit == 0   ? FSH_TYPE_INTERVAL_MONTHS
                : unit == 1 ? FSH_TYPE_INTERVAL_DAY_TIME
                            : FSH_TYPE_INTERVAL_MONTH_DAY_NANO;
      return 0;
    default: /* T_DURATION */
      FB(c, fsh_fb_i16(t, 0, FSH_MILLI, &unit, c->err));
      FSH_RETURN_NOT_OK(check_time_unit(c, unit));
      f->type = FSH_TYPE_DURATION;
      f->unit = (fsh_time_unit)unit;
      return 0;
  }
}

/* Union: mode and typeIds (one per child, 0..127; default 0..n-1). */
static int decode_union(field_ctx *c, const fsh_fb_table *t, fsh_field *f) {
  int16_t mode;
  fsh_fb_vector ids;
  FB(c, fsh_fb_i16(t, 0, 0, &mode, c->err));
  FB(c, fsh_fb_vector_field(t, 1, 4, &ids, c->err));
  if (mode != 0 && mode != 1) return ferr(c, EINVAL, "bad union mode %d", mode);
  f->type = mode == 0 ? FSH_TYPE_SPARSE_UNION : FSH_TYPE_DENSE_UNION;
  if (f->n_children > 128) return ferr(c, EINVAL, "union with %lld children (at most 128)",
                                       (long long)f->n_children);
  if (ids.present && ids.n != f->n_children)
    return ferr(c, EINVAL, "union has %lld typeIds for %lld children", (long long)ids.n,
                (long long)f->n_children);
  f->type_codes = fsh_malloc((size_t)(f->n_children > 0 ? f->n_children : 1) * sizeof(int32_t));
  if (!f->type_codes) return ferr(c, ENOMEM, "out of memory");
  for (int64_t i = 0; i < f->n_children; i++) {
    int32_t code = ids.present ? fsh_fb_load_i32(fsh_fb_vector_elem(&ids, i)) : (int32_t)i;
    if (code < 0 || code > 127) return ferr(c, EINVAL, "union type id %d out of [0, 127]", code);
    for (int64_t j = 0; j < i; j++)
      if (f->type_codes[j] == code) return ferr(c, EINVAL, "duplicate union type id %d", code);
    f->type_codes[i] = code;
  }
  return 0;
}

static int expect_children(field_ctx *c, const fsh_field *f, int64_t n, const char *what) {
  if (f->n_children != n)
    return ferr(c, EINVAL, "%s must have %lld child field(s), has %lld", what, (long long)n,
                (long long)f->n_children);
  return 0;
}

/* Nested types and those with width parameters. */
static int decode_nested(field_ctx *c, uint8_t tt, const fsh_fb_table *t, fsh_field *f) {
  switch (tt) {
    case T_LIST: case T_LARGE_LIST:
      f->type = tt == T_LIST ? FSH_TYPE_LIST : FSH_TYPE_LARGE_LIST;
      return expect_children(c, f, 1, "a list");
    case T_STRUCT: f->type = FSH_TYPE_STRUCT; return 0;
    case T_UNION: return decode_union(c, t, f);
    case T_FIXED_SIZE_LIST:
      FB(c, fsh_fb_i32(t, 0, 0, &f->list_size, c->err));
      if (f->list_size < 0) return ferr(c, EINVAL, "negative list size %d", f->list_size);
      f->type = FSH_TYPE_FIXED_SIZE_LIST;
      return expect_children(c, f, 1, "a fixed-size list");
    case T_MAP:
      FB(c, fsh_fb_bool(t, 0, false, &f->keys_sorted, c->err));
      f->type = FSH_TYPE_MAP;
      FSH_RETURN_NOT_OK(expect_children(c, f, 1, "a map"));
      if (f->children[0].type != FSH_TYPE_STRUCT || f->children[0].dictionary ||
          f->children[0].n_children != 2)
        return ferr(c, EINVAL, "a map's child must be a struct of key and value");
      return 0;
    case T_FIXED_SIZE_BINARY:
      FB(c, fsh_fb_i32(t, 0, 0, &f->byte_width, c->err));
      if (f->byte_width < 0 || f->byte_width > INT32_MAX / 8)
        return ferr(c, EINVAL, "fixed-size binary byte width %d out of range", f->byte_width);
      f->type = FSH_TYPE_FIXED_SIZE_BINARY;
      return 0;
    default: { /* T_DECIMAL */
      int32_t bits;
      FB(c, fsh_fb_i32(t, 0, 0, &f->precision, c->err));
      FB(c, fsh_fb_i32(t, 1, 0, &f->scale, c->err));
      FB(c, fsh_fb_i32(t, 2, 128, &bits, c->err));
      if (bits != 128 && bits != 256)
        return ferr(c, ENOTSUP, "decimal bit width %d is not supported (128 or 256)", bits);
      f->type = bits == 128 ? FSH_TYPE_DECIMAL128 : FSH_TYPE_DECIMAL256;
      return 0;
    }
  }
}

/* Sets f's type and parameters from the Type union (children decoded). */
static int decode_type(field_ctx *c, const fsh_fb_table *field_tbl, fsh_field *f) {
  uint8_t tt;
  fsh_fb_table t;
  FB(c, fsh_fb_union(field_tbl, FIELD_TYPE_TYPE, &tt, &t, c->err));
  if (tt != T_STRUCT && tt != T_UNION && tt != T_LIST && tt != T_LARGE_LIST &&
      tt != T_FIXED_SIZE_LIST && tt != T_MAP && f->n_children != 0)
    return ferr(c, EINVAL, "a field of type %d cannot have children", tt);
  switch (tt) {
    case 0: return ferr(c, EINVAL, "field has no type");
    case T_NULL: f->type = FSH_TYPE_NA; return 0;
    case T_INT: return decode_int(c, &t, &f->type);
    case T_FLOAT: {
      int16_t p;
      FB(c, fsh_fb_i16(&t, 0, 0, &p, c->err));
      if (p < 0 || p > 2) return ferr(c, EINVAL, "bad floating point precision %d", p);
      f->type = p == 0 ? FSH_TYPE_FLOAT16 : p == 1 ? FSH_TYPE_FLOAT32 : FSH_TYPE_FLOAT64;
      return 0;
    }
    case T_BINARY: f->type = FSH_TYPE_BINARY; return 0;
    case T_UTF8: f->type = FSH_TYPE_STRING; return 0;
    case T_LARGE_BINARY: f->type = FSH_TYPE_LARGE_BINARY; return 0;
    case T_LARGE_UTF8: f->type = FSH_TYPE_LARGE_STRING; return 0;
    case T_BOOL: f->type = FSH_TYPE_BOOL; return 0;
    case T_DATE: case T_TIME: case T_TIMESTAMP: case T_INTERVAL: case T_DURATION:
      return decode_temporal(c, tt, &t, f);
    case T_DECIMAL: case T_LIST: case T_LARGE_LIST: case T_STRUCT: case T_UNION:
    case T_FIXED_SIZE_BINARY: case T_FIXED_SIZE_LIST: case T_MAP:
      return decode_nested(c, tt, &t, f);
    case T_RUN_END_ENCODED: case T_BINARY_VIEW: case T_UTF8_VIEW: case T_LIST_VIEW:
    case T_LARGE_LIST_VIEW:
      return ferr(c, ENOTSUP, "type %s is not supported", unsupported_names[tt]);
  }
  return ferr(c, EINVAL, "unknown type union member %d", tt);
}

/* Moves f's type, parameters and children into a dictionary value field and
 * makes f dictionary-encoded with the DictionaryEncoding table's index. */
static int decode_dictionary(field_ctx *c, const fsh_fb_table *de, fsh_field *f) {
  int64_t id;
  bool ordered, has_index;
  fsh_fb_table it;
  fsh_type_id index_type = FSH_TYPE_INT32;
  FB(c, fsh_fb_i64(de, DE_ID, 0, &id, c->err));
  FB(c, fsh_fb_bool(de, DE_ORDERED, false, &ordered, c->err));
  FB(c, fsh_fb_table_field(de, DE_INDEX_TYPE, &it, &has_index, c->err));
  if (has_index) FSH_RETURN_NOT_OK(decode_int(c, &it, &index_type));
  fsh_field value = *f; /* the value type: moved out of f */
  fsh_type_id value_type = f->type;
  int rc = fsh_field_set_dictionary(f, id, index_type, ordered);
  if (rc != 0) return ferr(c, rc, "cannot make the field dictionary-encoded");
  fsh_field *v = &f->dictionary->value;
  v->type = value_type;
  v->byte_width = value.byte_width;
  v->list_size = value.list_size;
  v->precision = value.precision;
  v->scale = value.scale;
  v->unit = value.unit;
  v->timezone = value.timezone;
  v->keys_sorted = value.keys_sorted;
  v->type_codes = value.type_codes;
  v->n_children = value.n_children;
  v->children = value.children;
  f->byte_width = f->list_size = f->precision = f->scale = 0;
  f->unit = FSH_SECOND;
  f->timezone = NULL;
  f->keys_sorted = false;
  f->type_codes = NULL;
  f->n_children = 0;
  f->children = NULL;
  return 0;
}

static int decode_field(field_ctx *c, const fsh_fb_table *t, fsh_field *f);

static int decode_children(field_ctx *c, const fsh_fb_table *t, fsh_field *f) {
  fsh_fb_vector v;
  FB(c, fsh_fb_vector_field(t, FIELD_CHILDREN, 4, &v, c->err));
  if (v.n == 0) return 0;
  if (fsh_field_alloc_children(f, v.n) != 0) return ferr(c, ENOMEM, "out of memory");
  size_t len = strlen(c->path);
  for (int64_t i = 0; i < v.n; i++) {
    fsh_fb_table ct;
    c->path[len] = 0;
    FB(c, fsh_fb_vector_table(&v, i, &ct, c->err));
    FSH_RETURN_NOT_OK(decode_field(c, &ct, &f->children[i]));
  }
  c->path[len] = 0;
  return 0;
}

/* Decodes one Field table into f (zeroed on entry). On error f may hold
 * partial state: the caller resets it. c->path names the parent on entry. */
static int decode_field(field_ctx *c, const fsh_fb_table *t, fsh_field *f) {
  const char *name;
  int64_t name_len;
  bool nullable, has_dict;
  fsh_fb_table de;
  FB(c, fsh_fb_string(t, FIELD_NAME, &name, &name_len, c->err));
  size_t len = strlen(c->path);
  snprintf(c->path + len, sizeof c->path - len, "%s%s", len ? "." : "", name ? name : "");
  FB(c, fsh_fb_bool(t, FIELD_NULLABLE, false, &nullable, c->err));
  if (fsh_field_init(f, name, FSH_TYPE_NA, nullable) != 0) return ferr(c, ENOMEM, "out of memory");
  FB(c, decode_metadata(t, FIELD_METADATA, &f->metadata, c->err));
  FSH_RETURN_NOT_OK(decode_children(c, t, f));
  FSH_RETURN_NOT_OK(decode_type(c, t, f));
  FB(c, fsh_fb_table_field(t, FIELD_DICTIONARY, &de, &has_dict, c->err));
  if (has_dict) FSH_RETURN_NOT_OK(decode_dictionary(c, &de, f));
  c->path[len] = 0;
  return 0;
}

int fsh_ipc_schema_decode(const fsh_fb_table *t, fsh_schema **out, fsh_error *err) {
  int16_t endianness;
  fsh_fb_vector fields;
  FSH_RETURN_NOT_OK(fsh_fb_i16(t, SCHEMA_ENDIANNESS, 0, &endianness, err));
  if (endianness != 0)
    return fsh_error_set(err, ENOTSUP, "big-endian IPC data is not supported");
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(t, SCHEMA_FIELDS, 4, &fields, err));
  fsh_schema *s = fsh_schema_new(fields.n);
  if (!s) return fsh_error_set(err, ENOMEM, "out of memory for a schema of %lld fields",
                               (long long)fields.n);
  field_ctx c = {.err = err};
  int rc = decode_metadata(t, SCHEMA_METADATA, &s->metadata, err);
  for (int64_t i = 0; rc == 0 && i < fields.n; i++) {
    fsh_fb_table ft;
    c.path[0] = 0;
    rc = fsh_fb_vector_table(&fields, i, &ft, err);
    if (rc == 0) rc = decode_field(&c, &ft, &s->fields[i]);
  }
  if (rc != 0) {
    fsh_schema_unref(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* ---- RecordBatch and DictionaryBatch headers --------------------------- */

int fsh_ipc_batch_header_parse(const fsh_fb_table *rb, fsh_ipc_batch_header *out,
                               fsh_error *err) {
  fsh_fb_table comp;
  bool has_comp;
  fsh_fb_vector variadic;
  memset(out, 0, sizeof *out);
  FSH_RETURN_NOT_OK(fsh_fb_i64(rb, RB_LENGTH, 0, &out->length, err));
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(rb, RB_NODES, 16, &out->nodes, err));
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(rb, RB_BUFFERS, 16, &out->buffers, err));
  FSH_RETURN_NOT_OK(fsh_fb_table_field(rb, RB_COMPRESSION, &comp, &has_comp, err));
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(rb, RB_VARIADIC, 8, &variadic, err));
  if (out->length < 0)
    return fsh_error_set(err, EINVAL, "negative record batch length %lld",
                         (long long)out->length);
  if (variadic.n > 0)
    return fsh_error_set(err, ENOTSUP, "variadic buffers (view types) are not supported");
  out->compression = FSH_COMPRESSION_NONE;
  if (has_comp) {
    uint8_t codec, method;
    FSH_RETURN_NOT_OK(fsh_fb_u8(&comp, 0, 0, &codec, err));
    FSH_RETURN_NOT_OK(fsh_fb_u8(&comp, 1, 0, &method, err));
    if (method != 0)
      return fsh_error_set(err, ENOTSUP, "body compression method %d is not supported", method);
    if (codec > 1) return fsh_error_set(err, ENOTSUP, "unknown compression codec %d", codec);
    out->compression = codec == 0 ? FSH_COMPRESSION_LZ4_FRAME : FSH_COMPRESSION_ZSTD;
  }
  return 0;
}

int fsh_ipc_dict_header_parse(const fsh_fb_table *db, fsh_ipc_dict_header *out, fsh_error *err) {
  fsh_fb_table data;
  bool has_data;
  memset(out, 0, sizeof *out);
  FSH_RETURN_NOT_OK(fsh_fb_i64(db, DB_ID, 0, &out->id, err));
  FSH_RETURN_NOT_OK(fsh_fb_bool(db, DB_IS_DELTA, false, &out->is_delta, err));
  FSH_RETURN_NOT_OK(fsh_fb_table_field(db, DB_DATA, &data, &has_data, err));
  if (!has_data) return fsh_error_set(err, EINVAL, "dictionary batch %lld has no data",
                                      (long long)out->id);
  return fsh_ipc_batch_header_parse(&data, &out->data, err);
}
