/* json_read_data.c -- the data part of an integration JSON document:
 * FieldData objects (VALIDITY, OFFSET, TYPE_ID, DATA, children) into
 * arrays, the "dictionaries" section into dictionary arrays attached to the
 * arrays that use them, and the "batches" section into record batches. */
#include "json/json_internal.h"

#include "arrow/numeric.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define perr fsh_json_path_error

/* One entry of the "dictionaries" section, decoded on first use. */
typedef struct dict_entry {
  int64_t id;
  size_t index;          /* position in "dictionaries", for messages */
  json_t *j;             /* borrowed from the document */
  const fsh_field *value; /* the value field of a schema field with this id */
  fsh_array *array;      /* decoded dictionary, one reference */
  bool busy;             /* being decoded: a use now is a cycle */
} dict_entry;

typedef struct reader {
  fsh_schema *schema;
  dict_entry *dicts;
  size_t n_dicts;
} reader;

static int read_array(reader *r, const fsh_field *f, json_t *j, const char *path,
                      fsh_array **out, fsh_error *err);

/* ---- small helpers ------------------------------------------------------ */

/* A short JSON rendering of v for messages. */
static void show(const json_t *v, char *out, size_t size) {
  char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  snprintf(out, size, "%.40s%s", s ? s : "missing", s && strlen(s) > 40 ? "..." : "");
  free(s); /* jansson's allocation */
}

static int new_buffer(int64_t size, const char *path, fsh_buffer **out, fsh_error *err) {
  *out = fsh_buffer_new(size, true);
  if (!*out) return perr(err, ENOMEM, path, "out of memory for a %" PRId64 "-byte buffer", size);
  return 0;
}

/* The array member `key` of FieldData j with exactly `n` entries. */
static int get_list_n(json_t *j, const char *key, const char *path, int64_t n,
                      bool n_is_count_plus_one, json_t **out, fsh_error *err) {
  json_t *v = json_object_get(j, key);
  if (!json_is_array(v))
    return perr(err, EINVAL, path, "%s is %s, expected an array", key,
                v ? fsh_json_kind(v) : "missing");
  if ((int64_t)json_array_size(v) != n) {
    if (n_is_count_plus_one)
      return perr(err, EINVAL, path, "%s has %zu values, expected count + 1 = %" PRId64, key,
                  json_array_size(v), n);
    return perr(err, EINVAL, path, "%s has %zu values, count is %" PRId64, key,
                json_array_size(v), n);
  }
  *out = v;
  return 0;
}

static int get_list(json_t *j, const char *key, const char *path, int64_t n, json_t **out,
                    fsh_error *err) {
  return get_list_n(j, key, path, n, false, out, err);
}

/* VALIDITY (1/0 or true/false) into a bitmap, or NULL when all are valid
 * or the member is absent. */
static int read_validity(json_t *j, const char *path, int64_t count, fsh_buffer **out,
                         fsh_error *err) {
  *out = NULL;
  if (!json_object_get(j, "VALIDITY")) return 0;
  json_t *v;
  FSH_RETURN_NOT_OK(get_list(j, "VALIDITY", path, count, &v, err));
  int64_t nulls = 0;
  for (int64_t i = 0; i < count; i++) {
    json_t *x = json_array_get(v, (size_t)i);
    bool ok = json_is_boolean(x) ||
              (json_is_integer(x) && (json_integer_value(x) == 0 || json_integer_value(x) == 1));
    if (!ok) {
      char s[64];
      show(x, s, sizeof s);
      return perr(err, EINVAL, path, "VALIDITY[%" PRId64 "] is %s, expected 0 or 1", i, s);
    }
    nulls += json_is_false(x) || (json_is_integer(x) && json_integer_value(x) == 0);
  }
  if (nulls == 0) return 0;
  FSH_RETURN_NOT_OK(new_buffer(fsh_bytes_for_bits(count), path, out, err));
  for (int64_t i = 0; i < count; i++) {
    json_t *x = json_array_get(v, (size_t)i);
    if (json_is_true(x) || (json_is_integer(x) && json_integer_value(x) == 1))
      fsh_bit_set((*out)->data, i, true);
  }
  return 0;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Decodes hex s[0..2n) into dst[0..n); false on a bad digit. */
static bool unhex(const char *s, int64_t n, uint8_t *dst) {
  for (int64_t k = 0; k < n; k++) {
    int hi = hex_digit(s[2 * k]), lo = hex_digit(s[2 * k + 1]);
    if (hi < 0 || lo < 0) return false;
    dst[k] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

/* A double from a JSON number or one of "NaN", "Infinity", "-Infinity". */
static bool get_double(const json_t *v, double *out) {
  if (json_is_number(v)) {
    *out = json_number_value(v);
    return true;
  }
  if (!json_is_string(v)) return false;
  const char *s = json_string_value(v);
  if (strcmp(s, "NaN") == 0 || strcmp(s, "nan") == 0) *out = NAN;
  else if (strcmp(s, "Infinity") == 0 || strcmp(s, "inf") == 0) *out = INFINITY;
  else if (strcmp(s, "-Infinity") == 0 || strcmp(s, "-inf") == 0) *out = -INFINITY;
  else return false;
  return true;
}

static bool int_range(fsh_type_id t, int64_t *lo, int64_t *hi) {
  switch (t) {
    case FSH_TYPE_INT8: *lo = INT8_MIN; *hi = INT8_MAX; return true;
    case FSH_TYPE_UINT8: *lo = 0; *hi = UINT8_MAX; return true;
    case FSH_TYPE_INT16: *lo = INT16_MIN; *hi = INT16_MAX; return true;
    case FSH_TYPE_UINT16: *lo = 0; *hi = UINT16_MAX; return true;
    case FSH_TYPE_INT32: case FSH_TYPE_DATE32: case FSH_TYPE_TIME32:
    case FSH_TYPE_INTERVAL_MONTHS: *lo = INT32_MIN; *hi = INT32_MAX; return true;
    case FSH_TYPE_UINT32: *lo = 0; *hi = UINT32_MAX; return true;
    case FSH_TYPE_INT64: case FSH_TYPE_DATE64: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP:
    case FSH_TYPE_DURATION: *lo = INT64_MIN; *hi = INT64_MAX; return true;
    default: return false;
  }
}

static bool get_int32_member(const json_t *obj, const char *key, int32_t *out) {
  int64_t x;
  if (fsh_json_get_int64(json_object_get(obj, key), &x) != 0 || x < INT32_MIN || x > INT32_MAX)
    return false;
  *out = (int32_t)x;
  return true;
}

/* Stores DATA value v as slot i of a fixed-width buffer p of type f. On
 * failure writes what was expected into `want` and returns EINVAL. */
static int parse_fixed(const fsh_field *f, const json_t *v, uint8_t *p, int64_t i, const char **want) {
  int64_t lo, hi, x;
  if (f->type == FSH_TYPE_UINT64) {
    uint64_t u;
    *want = "a uint64 (as a decimal string)";
    if (fsh_json_get_uint64(v, &u) != 0) return EINVAL;
    memcpy(p + 8 * i, &u, 8);
    return 0;
  }
  if (int_range(f->type, &lo, &hi)) {
    *want = hi == INT64_MAX ? "a 64-bit integer (as a decimal string)" : "an integer in range";
    if (fsh_json_get_int64(v, &x) != 0 || x < lo || x > hi) return EINVAL;
    int w = fsh_type_bit_width(f) / 8;
    int8_t i8 = (int8_t)x; int16_t i16 = (int16_t)x; int32_t i32 = (int32_t)x;
    uint8_t u8 = (uint8_t)x; uint16_t u16 = (uint16_t)x; uint32_t u32 = (uint32_t)x;
    const void *src = &x;
    if (w == 1) src = lo < 0 ? (const void *)&i8 : (const void *)&u8;
    if (w == 2) src = lo < 0 ? (const void *)&i16 : (const void *)&u16;
    if (w == 4) src = lo < 0 ? (const void *)&i32 : (const void *)&u32;
    memcpy(p + w * i, src, (size_t)w);
    return 0;
  }
  switch (f->type) {
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64: {
      double d;
      *want = "a number";
      if (!get_double(v, &d)) return EINVAL;
      if (f->type == FSH_TYPE_FLOAT64) {
        memcpy(p + 8 * i, &d, 8);
      } else if (f->type == FSH_TYPE_FLOAT32) {
        float fl = (float)d;
        memcpy(p + 4 * i, &fl, 4);
      } else {
        uint16_t h = fsh_float_to_half((float)d);
        memcpy(p + 2 * i, &h, 2);
      }
      return 0;
    }
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256: {
      int w = f->type == FSH_TYPE_DECIMAL128 ? 16 : 32;
      *want = w == 16 ? "a decimal string fitting 128 bits" : "a decimal string fitting 256 bits";
      if (!json_is_string(v)) return EINVAL;
      return fsh_decimal_parse(json_string_value(v), json_string_length(v), p + (int64_t)w * i, w)
                 ? EINVAL
                 : 0;
    }
    case FSH_TYPE_INTERVAL_DAY_TIME: {
      int32_t dt[2];
      *want = "{\"days\": int32, \"milliseconds\": int32}";
      if (!json_is_object(v) || !get_int32_member(v, "days", &dt[0]) ||
          !get_int32_member(v, "milliseconds", &dt[1]))
        return EINVAL;
      memcpy(p + 8 * i, dt, 8);
      return 0;
    }
    case FSH_TYPE_INTERVAL_MONTH_DAY_NANO: {
      int32_t md[2];
      int64_t ns;
      *want = "{\"months\": int32, \"days\": int32, \"nanoseconds\": int64}";
      if (!json_is_object(v) || !get_int32_member(v, "months", &md[0]) ||
          !get_int32_member(v, "days", &md[1]) ||
          fsh_json_get_int64(json_object_get(v, "nanoseconds"), &ns) != 0)
        return EINVAL;
      memcpy(p + 16 * i, md, 8);
      memcpy(p + 16 * i + 8, &ns, 8);
      return 0;
    }
    case FSH_TYPE_FIXED_SIZE_BINARY: {
      int64_t w = f->byte_width;
      *want = "a hex string of byteWidth bytes";
      if (!json_is_string(v) || (int64_t)json_string_length(v) != 2 * w) return EINVAL;
      return unhex(json_string_value(v), w, p + w * i) ? 0 : EINVAL;
    }
    default:
      *want = "a value of a supported type";
      return EINVAL;
  }
}

/* ---- per-layout readers ------------------------------------------------- */

static int read_bool(json_t *j, const char *path, int64_t count, fsh_array *a, fsh_error *err) {
  json_t *data;
  FSH_RETURN_NOT_OK(get_list(j, "DATA", path, count, &data, err));
  FSH_RETURN_NOT_OK(new_buffer(fsh_bytes_for_bits(count), path, &a->buffers[1], err));
  for (int64_t i = 0; i < count; i++) {
    json_t *x = json_array_get(data, (size_t)i);
    bool ok = json_is_boolean(x) ||
              (json_is_integer(x) && (json_integer_value(x) == 0 || json_integer_value(x) == 1));
    if (!ok) {
      char s[64];
      show(x, s, sizeof s);
      return perr(err, EINVAL, path, "DATA[%" PRId64 "] is %s, expected a boolean", i, s);
    }
    if (json_is_true(x) || (json_is_integer(x) && json_integer_value(x) == 1))
      fsh_bit_set(a->buffers[1]->data, i, true);
  }
  return 0;
}

static int read_fixed(const fsh_field *f, json_t *j, const char *path, int64_t count,
                      fsh_array *a, fsh_error *err) {
  json_t *data;
  FSH_RETURN_NOT_OK(get_list(j, "DATA", path, count, &data, err));
  int64_t w = fsh_type_bit_width(f) / 8;
  if (count > 0 && w > INT64_MAX / count)
    return perr(err, EINVAL, path, "count %" PRId64 " is too large", count);
  FSH_RETURN_NOT_OK(new_buffer(w * count, path, &a->buffers[1], err));
  for (int64_t i = 0; i < count; i++) {
    const char *want = "";
    json_t *x = json_array_get(data, (size_t)i);
    if (parse_fixed(f, x, a->buffers[1]->data, i, &want) != 0) {
      char s[64];
      show(x, s, sizeof s);
      return perr(err, EINVAL, path, "DATA[%" PRId64 "] is %s, expected %s for %s", i, s, want,
                  fsh_type_name(f->type));
    }
  }
  return 0;
}

/* OFFSET with count + 1 entries (32- or 64-bit) into a new buffer, checked
 * to start at >= 0 and never decrease. *last gets the final offset. */
static int read_offsets(json_t *j, const char *path, int64_t count, bool large, fsh_buffer **out,
                        int64_t *last, fsh_error *err) {
  json_t *v;
  FSH_RETURN_NOT_OK(get_list_n(j, "OFFSET", path, count + 1, true, &v, err));
  FSH_RETURN_NOT_OK(new_buffer((count + 1) * (large ? 8 : 4), path, out, err));
  int64_t prev = 0;
  for (int64_t i = 0; i <= count; i++) {
    json_t *x = json_array_get(v, (size_t)i);
    int64_t o;
    if (fsh_json_get_int64(x, &o) != 0 || o < prev || (!large && o > INT32_MAX)) {
      char s[64];
      show(x, s, sizeof s);
      return perr(err, EINVAL, path, "OFFSET[%" PRId64 "] is %s, expected an offset >= %" PRId64,
                  i, s, prev);
    }
    if (large) {
      memcpy((*out)->data + 8 * i, &o, 8);
    } else {
      int32_t o32 = (int32_t)o;
      memcpy((*out)->data + 4 * i, &o32, 4);
    }
    prev = o;
  }
  *last = prev;
  return 0;
}

/* Binary / string values: data from DATA; offsets computed from the value
 * lengths (0-based) and, if OFFSET is present, checked against it. */
static int read_binary(const fsh_field *f, json_t *j, const char *path, int64_t count,
                       fsh_array *a, fsh_error *err) {
  bool large = f->type == FSH_TYPE_LARGE_BINARY || f->type == FSH_TYPE_LARGE_STRING;
  bool text = f->type == FSH_TYPE_STRING || f->type == FSH_TYPE_LARGE_STRING;
  json_t *data, *given = NULL;
  FSH_RETURN_NOT_OK(get_list(j, "DATA", path, count, &data, err));
  if (json_object_get(j, "OFFSET"))
    FSH_RETURN_NOT_OK(get_list_n(j, "OFFSET", path, count + 1, true, &given, err));
  int64_t total = 0;
  for (int64_t i = 0; i < count; i++) {
    json_t *x = json_array_get(data, (size_t)i);
    size_t len = json_string_length(x);
    if (!json_is_string(x) || (!text && len % 2 != 0)) {
      char s[64];
      show(x, s, sizeof s);
      return perr(err, EINVAL, path, "DATA[%" PRId64 "] is %s, expected %s", i, s,
                  text ? "a string" : "a hex string");
    }
    int64_t n = (int64_t)(text ? len : len / 2);
    if (given) {
      int64_t o0, o1;
      if (fsh_json_get_int64(json_array_get(given, (size_t)i), &o0) != 0 ||
          fsh_json_get_int64(json_array_get(given, (size_t)i + 1), &o1) != 0 || o1 - o0 != n)
        return perr(err, EINVAL, path,
                    "OFFSET[%" PRId64 "..%" PRId64 "] disagrees with DATA[%" PRId64
                    "] of %" PRId64 " bytes",
                    i, i + 1, i, n);
    }
    total += n;
    if (!large && total > INT32_MAX)
      return perr(err, EINVAL, path, "more than 2^31-1 bytes of data: use a large type");
  }
  FSH_RETURN_NOT_OK(new_buffer((count + 1) * (large ? 8 : 4), path, &a->buffers[1], err));
  FSH_RETURN_NOT_OK(new_buffer(total, path, &a->buffers[2], err));
  uint8_t *offs = a->buffers[1]->data, *bytes = a->buffers[2]->data;
  int64_t pos = 0;
  for (int64_t i = 0; i <= count; i++) {
    if (large) {
      memcpy(offs + 8 * i, &pos, 8);
    } else {
      int32_t p32 = (int32_t)pos;
      memcpy(offs + 4 * i, &p32, 4);
    }
    if (i == count) break;
    json_t *x = json_array_get(data, (size_t)i);
    const char *s = json_string_value(x);
    int64_t len = (int64_t)json_string_length(x);
    if (text) {
      memcpy(bytes + pos, s, (size_t)len);
      pos += len;
    } else {
      if (!unhex(s, len / 2, bytes + pos))
        return perr(err, EINVAL, path, "DATA[%" PRId64 "] is not a hex string", i);
      pos += len / 2;
    }
  }
  return 0;
}

/* Reads the FieldData children of j into a->children, one per field child. */
static int read_children(reader *r, const fsh_field *f, json_t *j, const char *path, fsh_array *a,
                         fsh_error *err) {
  json_t *children = json_object_get(j, "children");
  size_t n = json_is_array(children) ? json_array_size(children) : 0;
  if ((children && !json_is_array(children)) || (int64_t)n != f->n_children)
    return perr(err, EINVAL, path, "has %zu children, the %s field has %" PRId64, n,
                fsh_type_name(f->type), f->n_children);
  for (size_t i = 0; i < n; i++) {
    char cpath[FSH_JSON_PATH_MAX];
    fsh_json_path(cpath, "%s.children[%zu] ('%s')", path, i, f->children[i].name);
    FSH_RETURN_NOT_OK(read_array(r, &f->children[i], json_array_get(children, i), cpath,
                                 &a->children[i], err));
  }
  return 0;
}

static int read_union(reader *r, const fsh_field *f, json_t *j, const char *path, int64_t count,
                      fsh_array *a, fsh_error *err) {
  json_t *ids, *offs = NULL;
  FSH_RETURN_NOT_OK(get_list(j, "TYPE_ID", path, count, &ids, err));
  bool dense = f->type == FSH_TYPE_DENSE_UNION;
  if (dense) FSH_RETURN_NOT_OK(get_list(j, "OFFSET", path, count, &offs, err));
  FSH_RETURN_NOT_OK(read_children(r, f, j, path, a, err));
  FSH_RETURN_NOT_OK(new_buffer(count, path, &a->buffers[0], err));
  if (dense) FSH_RETURN_NOT_OK(new_buffer(4 * count, path, &a->buffers[1], err));
  for (int64_t i = 0; i < count; i++) {
    json_t *x = json_array_get(ids, (size_t)i);
    int64_t k = 0;
    while (k < f->n_children &&
           !(json_is_integer(x) && json_integer_value(x) == f->type_codes[k]))
      k++;
    if (k == f->n_children) {
      char s[64];
      show(x, s, sizeof s);
      return perr(err, EINVAL, path, "TYPE_ID[%" PRId64 "] is %s, not one of the union's typeIds",
                  i, s);
    }
    a->buffers[0]->data[i] = (uint8_t)(int8_t)f->type_codes[k];
    int64_t child_len = a->children[k]->length;
    if (!dense) {
      if (child_len < count)
        return perr(err, EINVAL, path, "child %" PRId64 " has %" PRId64 " values, count is %" PRId64,
                    k, child_len, count);
      continue;
    }
    int64_t o;
    json_t *y = json_array_get(offs, (size_t)i);
    if (fsh_json_get_int64(y, &o) != 0 || o < 0 || o >= child_len) {
      char s[64];
      show(y, s, sizeof s);
      return perr(err, EINVAL, path,
                  "OFFSET[%" PRId64 "] is %s, expected an index into child %" PRId64
                  " of %" PRId64 " values",
                  i, s, k, child_len);
    }
    int32_t o32 = (int32_t)o;
    memcpy(a->buffers[1]->data + 4 * i, &o32, 4);
  }
  return 0;
}

/* ---- dictionaries ------------------------------------------------------- */

/* The value field of the schema field (at any depth) encoded with `id`. */
static const fsh_field *find_dict_value(const fsh_field *fields, int64_t n, int64_t id) {
  for (int64_t i = 0; i < n; i++) {
    const fsh_field *f = &fields[i];
    if (f->dictionary) {
      if (f->dictionary->id == id) return &f->dictionary->value;
      const fsh_field *v = &f->dictionary->value;
      const fsh_field *found = find_dict_value(v->children, v->n_children, id);
      if (found) return found;
    }
    const fsh_field *found = find_dict_value(f->children, f->n_children, id);
    if (found) return found;
  }
  return NULL;
}

/* The decoded dictionary for `id` (borrowed), decoding it on first use. */
static int get_dict(reader *r, int64_t id, const char *path, fsh_array **out, fsh_error *err) {
  dict_entry *e = NULL;
  for (size_t i = 0; i < r->n_dicts && !e; i++)
    if (r->dicts[i].id == id) e = &r->dicts[i];
  if (!e) return perr(err, EINVAL, path, "dictionary id %" PRId64 " is not in \"dictionaries\"", id);
  if (e->array) {
    *out = e->array;
    return 0;
  }
  char dpath[FSH_JSON_PATH_MAX];
  fsh_json_path(dpath, "dictionaries[%zu] (id %" PRId64 ")", e->index, id);
  if (e->busy) return perr(err, EINVAL, dpath, "the dictionary's values use the dictionary itself");
  if (!e->value) return perr(err, EINVAL, dpath, "no schema field uses this dictionary id");
  json_t *data = json_object_get(e->j, "data");
  if (json_is_array(data) && json_array_size(data) == 1) data = json_array_get(data, 0);
  json_t *cols = json_is_object(data) ? json_object_get(data, "columns") : NULL;
  if (!json_is_array(cols) || json_array_size(cols) != 1)
    return perr(err, EINVAL, dpath, "\"data\" must be a record batch with exactly one column");
  int64_t count;
  if (fsh_json_get_int64(json_object_get(data, "count"), &count) != 0 || count < 0)
    return perr(err, EINVAL, dpath, "data.count is missing or not a non-negative integer");
  char cpath[FSH_JSON_PATH_MAX];
  fsh_json_path(cpath, "%s.data.columns[0]", dpath);
  e->busy = true;
  fsh_array *a;
  int rc = read_array(r, e->value, json_array_get(cols, 0), cpath, &a, err);
  e->busy = false;
  if (rc != 0) return rc;
  if (a->length != count) {
    rc = perr(err, EINVAL, cpath, "count is %" PRId64 ", data.count is %" PRId64, a->length, count);
    fsh_array_unref(a);
    return rc;
  }
  *out = e->array = a;
  return 0;
}

/* Attaches the dictionary to an index array and checks the valid indices. */
static int attach_dict(reader *r, const fsh_field *f, const char *path, fsh_array *a,
                       fsh_error *err) {
  fsh_array *dict;
  FSH_RETURN_NOT_OK(get_dict(r, f->dictionary->id, path, &dict, err));
  a->dictionary = fsh_array_ref(dict);
  const uint8_t *valid = a->buffers[0] ? a->buffers[0]->data : NULL;
  const uint8_t *p = a->buffers[1]->data;
  int w = fsh_type_bit_width(f) / 8;
  for (int64_t i = 0; i < a->length; i++) {
    if (valid && !fsh_bit_get(valid, i)) continue;
    int64_t idx = 0;
    bool is_signed = fsh_type_is_signed_integer(f->type);
    if (w == 1) idx = is_signed ? (int64_t)(int8_t)p[i] : (int64_t)p[i];
    if (w == 2) { int16_t s; uint16_t u; memcpy(&s, p + 2 * i, 2); memcpy(&u, p + 2 * i, 2);
                  idx = is_signed ? s : u; }
    if (w == 4) { int32_t s; uint32_t u; memcpy(&s, p + 4 * i, 4); memcpy(&u, p + 4 * i, 4);
                  idx = is_signed ? s : (int64_t)u; }
    if (w == 8) memcpy(&idx, p + 8 * i, 8);
    if (idx < 0 || idx >= dict->length)
      return perr(err, EINVAL, path,
                  "DATA[%" PRId64 "] is index %" PRId64 ", the dictionary (id %" PRId64
                  ") has %" PRId64 " values",
                  i, idx, f->dictionary->id, dict->length);
  }
  return 0;
}

/* ---- one FieldData ------------------------------------------------------ */

static int fill_array(reader *r, const fsh_field *f, json_t *j, const char *path, int64_t count,
                      fsh_array *a, fsh_error *err) {
  if (f->type != FSH_TYPE_NA && f->type != FSH_TYPE_SPARSE_UNION &&
      f->type != FSH_TYPE_DENSE_UNION)
    FSH_RETURN_NOT_OK(read_validity(j, path, count, &a->buffers[0], err));
  if (f->dictionary) {
    FSH_RETURN_NOT_OK(read_fixed(f, j, path, count, a, err));
    return attach_dict(r, f, path, a, err);
  }
  switch (f->type) {
    case FSH_TYPE_NA: return 0;
    case FSH_TYPE_BOOL: return read_bool(j, path, count, a, err);
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      return read_binary(f, j, path, count, a, err);
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP: {
      int64_t last = 0;
      FSH_RETURN_NOT_OK(read_offsets(j, path, count, f->type == FSH_TYPE_LARGE_LIST,
                                     &a->buffers[1], &last, err));
      FSH_RETURN_NOT_OK(read_children(r, f, j, path, a, err));
      if (last > a->children[0]->length)
        return perr(err, EINVAL, path, "OFFSET ends at %" PRId64 ", the child has %" PRId64 " values",
                    last, a->children[0]->length);
      return 0;
    }
    case FSH_TYPE_FIXED_SIZE_LIST: {
      FSH_RETURN_NOT_OK(read_children(r, f, j, path, a, err));
      int64_t need = f->list_size > 0 && count > INT64_MAX / f->list_size
                         ? INT64_MAX
                         : count * f->list_size;
      if (a->children[0]->length < need)
        return perr(err, EINVAL, path,
                    "the child has %" PRId64 " values, count %" PRId64 " x listSize %d needs %" PRId64,
                    a->children[0]->length, count, f->list_size, need);
      return 0;
    }
    case FSH_TYPE_STRUCT: {
      FSH_RETURN_NOT_OK(read_children(r, f, j, path, a, err));
      for (int64_t k = 0; k < f->n_children; k++)
        if (a->children[k]->length < count)
          return perr(err, EINVAL, path,
                      "child %" PRId64 " ('%s') has %" PRId64 " values, count is %" PRId64, k,
                      f->children[k].name, a->children[k]->length, count);
      return 0;
    }
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION:
      return read_union(r, f, j, path, count, a, err);
    default: return read_fixed(f, j, path, count, a, err);
  }
}

/* Reads FieldData j of field f into a new array *out (offset 0). */
static int read_array(reader *r, const fsh_field *f, json_t *j, const char *path,
                      fsh_array **out, fsh_error *err) {
  *out = NULL;
  if (!json_is_object(j))
    return perr(err, EINVAL, path, "is %s, expected a FieldData object", fsh_json_kind(j));
  int64_t count;
  if (fsh_json_get_int64(json_object_get(j, "count"), &count) != 0 || count < 0)
    return perr(err, EINVAL, path, "\"count\" is missing or not a non-negative integer");
  if ((size_t)count > SIZE_MAX / 64) return perr(err, EINVAL, path, "count %" PRId64 " is too large", count);
  fsh_array *a = fsh_array_new(fsh_type_n_buffers(f->type), f->n_children);
  if (!a) return perr(err, ENOMEM, path, "out of memory");
  a->length = count;
  a->null_count = -1;
  int rc = fill_array(r, f, j, path, count, a, err);
  if (rc != 0) {
    fsh_array_unref(a);
    return rc;
  }
  if (f->type == FSH_TYPE_SPARSE_UNION || f->type == FSH_TYPE_DENSE_UNION)
    a->null_count = 0;
  else
    fsh_array_null_count(a);
  *out = a;
  return 0;
}

/* ---- the document ------------------------------------------------------- */

static int read_batch(reader *r, json_t *jb, size_t bi, fsh_batch **out, fsh_error *err) {
  char path[FSH_JSON_PATH_MAX];
  fsh_json_path(path, "batches[%zu]", bi);
  *out = NULL;
  if (!json_is_object(jb)) return perr(err, EINVAL, path, "is %s, expected an object", fsh_json_kind(jb));
  int64_t count;
  if (fsh_json_get_int64(json_object_get(jb, "count"), &count) != 0 || count < 0)
    return perr(err, EINVAL, path, "\"count\" is missing or not a non-negative integer");
  json_t *cols = json_object_get(jb, "columns");
  if (!json_is_array(cols) || (int64_t)json_array_size(cols) != r->schema->n_fields)
    return perr(err, EINVAL, path, "\"columns\" has %zu entries, the schema has %" PRId64 " fields",
                json_is_array(cols) ? json_array_size(cols) : 0, r->schema->n_fields);
  fsh_batch *b = fsh_batch_new(r->schema, count);
  if (!b) return perr(err, ENOMEM, path, "out of memory");
  for (int64_t i = 0; i < r->schema->n_fields; i++) {
    const fsh_field *f = &r->schema->fields[i];
    char cpath[FSH_JSON_PATH_MAX];
    fsh_json_path(cpath, "batches[%zu].columns[%" PRId64 "] ('%s')", bi, i, f->name);
    int rc = read_array(r, f, json_array_get(cols, (size_t)i), cpath, &b->columns[i], err);
    if (rc == 0 && b->columns[i]->length != count)
      rc = perr(err, EINVAL, cpath, "count is %" PRId64 ", the batch count is %" PRId64,
                b->columns[i]->length, count);
    if (rc != 0) {
      fsh_batch_unref(b);
      return rc;
    }
  }
  *out = b;
  return 0;
}

/* Indexes the "dictionaries" section (decoding happens on first use). */
static int index_dictionaries(reader *r, json_t *jd, fsh_error *err) {
  if (!jd || json_is_null(jd)) return 0;
  if (!json_is_array(jd))
    return perr(err, EINVAL, "dictionaries", "is %s, expected an array", fsh_json_kind(jd));
  if (json_array_size(jd) == 0) return 0;
  r->dicts = fsh_calloc(json_array_size(jd), sizeof *r->dicts);
  if (!r->dicts) return perr(err, ENOMEM, "dictionaries", "out of memory");
  for (size_t i = 0; i < json_array_size(jd); i++) {
    json_t *e = json_array_get(jd, i);
    char path[FSH_JSON_PATH_MAX];
    fsh_json_path(path, "dictionaries[%zu]", i);
    int64_t id;
    if (!json_is_object(e) || fsh_json_get_int64(json_object_get(e, "id"), &id) != 0)
      return perr(err, EINVAL, path, "expected an object with an integer \"id\"");
    for (size_t k = 0; k < r->n_dicts; k++)
      if (r->dicts[k].id == id)
        return perr(err, EINVAL, path, "dictionary id %" PRId64 " appears twice", id);
    dict_entry *d = &r->dicts[r->n_dicts++];
    d->id = id;
    d->index = i;
    d->j = e;
    d->value = find_dict_value(r->schema->fields, r->schema->n_fields, id);
  }
  return 0;
}

static void reader_reset(reader *r) {
  for (size_t i = 0; i < r->n_dicts; i++) fsh_array_unref(r->dicts[i].array);
  fsh_free(r->dicts);
  fsh_schema_unref(r->schema);
  memset(r, 0, sizeof *r);
}

int fsh_json_parse_document(json_t *root, fsh_json_data *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(root))
    return fsh_error_set(err, EINVAL, "the document is %s, expected an object", fsh_json_kind(root));
  reader r = {0};
  fsh_json_data d = {0};
  int rc = fsh_json_parse_schema(json_object_get(root, "schema"), &r.schema, err);
  if (rc == 0) rc = index_dictionaries(&r, json_object_get(root, "dictionaries"), err);
  /* Decode every dictionary a field uses, so errors in unused-by-batches
   * dictionaries still surface. */
  for (size_t i = 0; rc == 0 && i < r.n_dicts; i++) {
    fsh_array *unused;
    if (r.dicts[i].value) rc = get_dict(&r, r.dicts[i].id, "dictionaries", &unused, err);
  }
  json_t *jb = json_object_get(root, "batches");
  if (rc == 0 && !json_is_array(jb))
    rc = perr(err, EINVAL, "batches", "is %s, expected an array", jb ? fsh_json_kind(jb) : "missing");
  if (rc == 0 && json_array_size(jb) > 0) {
    d.batches = fsh_calloc(json_array_size(jb), sizeof *d.batches);
    if (!d.batches) rc = perr(err, ENOMEM, "batches", "out of memory");
  }
  for (size_t i = 0; rc == 0 && i < json_array_size(jb); i++) {
    rc = read_batch(&r, json_array_get(jb, i), i, &d.batches[i], err);
    if (rc == 0) d.n_batches++;
  }
  if (rc == 0) d.schema = fsh_schema_ref(r.schema);
  reader_reset(&r);
  if (rc != 0) {
    fsh_json_data_reset(&d);
    return rc;
  }
  *out = d;
  return 0;
}

void fsh_json_data_reset(fsh_json_data *d) {
  if (!d) return;
  for (int64_t i = 0; i < d->n_batches; i++) fsh_batch_unref(d->batches[i]);
  fsh_free(d->batches);
  fsh_schema_unref(d->schema);
  memset(d, 0, sizeof *d);
}
