/* json_write.c -- schema + batches as an integration JSON document: the
 * fields, each array's logical values (slices rebased to offset 0), and the
 * dictionaries the arrays use, collected by id. */
#include "json/json_internal.h"

#include "arrow/numeric.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* A dictionary met in the arrays, written once after the batches. */
typedef struct dict_ref {
  int64_t id;
  const fsh_field *value;
  const fsh_array *array;
} dict_ref;

typedef struct writer {
  dict_ref *dicts;
  int64_t n_dicts, cap_dicts;
  fsh_error *err;
} writer;

/* Ownership rule of this file: a new JSON value is attached to its parent
 * right away (put / append steal it, even on failure), so on any error only
 * the root is released. */

/* ---- small helpers ------------------------------------------------------ */

static int oom(writer *w) { return fsh_error_set(w->err, ENOMEM, "out of memory building JSON"); }

/* obj[key] = v (stolen, NULL accepted as a failed allocation). */
static int put(writer *w, json_t *obj, const char *key, json_t *v) {
  if (!v || json_object_set_new(obj, key, v) != 0) return oom(w);
  return 0;
}

static int append(writer *w, json_t *arr, json_t *v) {
  if (!v || json_array_append_new(arr, v) != 0) return oom(w);
  return 0;
}

static json_t *int64_string(int64_t v) {
  char s[32];
  snprintf(s, sizeof s, "%" PRId64, v);
  return json_string(s);
}

static json_t *uint64_string(uint64_t v) {
  char s[32];
  snprintf(s, sizeof s, "%" PRIu64, v);
  return json_string(s);
}

static json_t *real_value(double d) {
  if (isnan(d)) return json_string("NaN");
  if (isinf(d)) return json_string(d > 0 ? "Infinity" : "-Infinity");
  return json_real(d);
}

static json_t *hex_string(const uint8_t *p, int64_t n) {
  static const char digits[] = "0123456789ABCDEF";
  char small[256] = "";
  char *s = 2 * n + 1 <= (int64_t)sizeof small ? small : fsh_malloc((size_t)(2 * n + 1));
  if (!s) return NULL;
  for (int64_t k = 0; k < n; k++) {
    s[2 * k] = digits[p[k] >> 4];
    s[2 * k + 1] = digits[p[k] & 15];
  }
  json_t *v = json_stringn(s, (size_t)(2 * n));
  if (s != small) fsh_free(s);
  return v;
}

static const char *unit_json(fsh_time_unit u) {
  switch (u) {
    case FSH_SECOND: return "SECOND";
    case FSH_MILLI: return "MILLISECOND";
    case FSH_MICRO: return "MICROSECOND";
    default: return "NANOSECOND";
  }
}

/* ---- schema ------------------------------------------------------------- */

static json_t *int_type(fsh_type_id t) {
  int bits = t == FSH_TYPE_INT8 || t == FSH_TYPE_UINT8     ? 8
             : t == FSH_TYPE_INT16 || t == FSH_TYPE_UINT16 ? 16
             : t == FSH_TYPE_INT32 || t == FSH_TYPE_UINT32 ? 32
                                                           : 64;
  return json_pack("{s:s, s:b, s:i}", "name", "int", "isSigned", fsh_type_is_signed_integer(t),
                   "bitWidth", bits);
}

/* The "type" object of a (non-dictionary or value) field, into *out. */
static int type_json(writer *w, const fsh_field *f, const char *path, json_t **out) {
  json_t *t = NULL;
  switch (f->type) {
    case FSH_TYPE_NA: t = json_pack("{s:s}", "name", "null"); break;
    case FSH_TYPE_BOOL: t = json_pack("{s:s}", "name", "bool"); break;
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32: case FSH_TYPE_UINT64:
      t = int_type(f->type);
      break;
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64:
      t = json_pack("{s:s, s:s}", "name", "floatingpoint", "precision",
                    f->type == FSH_TYPE_FLOAT16   ? "HALF"
                    : f->type == FSH_TYPE_FLOAT32 ? "SINGLE"
                                                  : "DOUBLE");
      break;
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256:
      t = json_pack("{s:s, s:i, s:i, s:i}", "name", "decimal", "precision", f->precision, "scale",
                    f->scale, "bitWidth", f->type == FSH_TYPE_DECIMAL128 ? 128 : 256);
      break;
    case FSH_TYPE_DATE32: case FSH_TYPE_DATE64:
      t = json_pack("{s:s, s:s}", "name", "date", "unit",
                    f->type == FSH_TYPE_DATE32 ? "DAY" : "MILLISECOND");
      break;
    case FSH_TYPE_TIME32: case FSH_TYPE_TIME64:
      t = json_pack("{s:s, s:s, s:i}", "name", "time", "unit", unit_json(f->unit), "bitWidth",
                    f->type == FSH_TYPE_TIME32 ? 32 : 64);
      break;
    case FSH_TYPE_TIMESTAMP:
      if (f->timezone)
        t = json_pack("{s:s, s:s, s:s}", "name", "timestamp", "unit", unit_json(f->unit),
                      "timezone", f->timezone);
      else
        t = json_pack("{s:s, s:s}", "name", "timestamp", "unit", unit_json(f->unit));
      break;
    case FSH_TYPE_DURATION:
      t = json_pack("{s:s, s:s}", "name", "duration", "unit", unit_json(f->unit));
      break;
    case FSH_TYPE_INTERVAL_MONTHS:
      t = json_pack("{s:s, s:s}", "name", "interval", "unit", "YEAR_MONTH");
      break;
    case FSH_TYPE_INTERVAL_DAY_TIME:
      t = json_pack("{s:s, s:s}", "name", "interval", "unit", "DAY_TIME");
      break;
    case FSH_TYPE_INTERVAL_MONTH_DAY_NANO:
      t = json_pack("{s:s, s:s}", "name", "interval", "unit", "MONTH_DAY_NANO");
      break;
    case FSH_TYPE_BINARY: t = json_pack("{s:s}", "name", "binary"); break;
    case FSH_TYPE_STRING: t = json_pack("{s:s}", "name", "utf8"); break;
    case FSH_TYPE_LARGE_BINARY: t = json_pack("{s:s}", "name", "largebinary"); break;
    case FSH_TYPE_LARGE_STRING: t = json_pack("{s:s}", "name", "largeutf8"); break;
    case FSH_TYPE_FIXED_SIZE_BINARY:
      t = json_pack("{s:s, s:i}", "name", "fixedsizebinary", "byteWidth", f->byte_width);
      break;
    case FSH_TYPE_LIST: t = json_pack("{s:s}", "name", "list"); break;
    case FSH_TYPE_LARGE_LIST: t = json_pack("{s:s}", "name", "largelist"); break;
    case FSH_TYPE_FIXED_SIZE_LIST:
      t = json_pack("{s:s, s:i}", "name", "fixedsizelist", "listSize", f->list_size);
      break;
    case FSH_TYPE_STRUCT: t = json_pack("{s:s}", "name", "struct"); break;
    case FSH_TYPE_MAP: t = json_pack("{s:s, s:b}", "name", "map", "keysSorted", f->keys_sorted); break;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: {
      t = json_pack("{s:s, s:s, s:[]}", "name", "union", "mode",
                    f->type == FSH_TYPE_SPARSE_UNION ? "SPARSE" : "DENSE", "typeIds");
      json_t *ids = json_object_get(t, "typeIds");
      for (int64_t k = 0; t && k < f->n_children; k++) {
        if (append(w, ids, json_integer(f->type_codes ? f->type_codes[k] : k)) != 0) {
          json_decref(t);
          return ENOMEM;
        }
      }
      break;
    }
    default:
      return fsh_error_set(w->err, ENOTSUP, "field '%s': cannot write type %s", path,
                           fsh_type_name(f->type));
  }
  *out = t;
  return t ? 0 : oom(w);
}

/* Metadata as [{"key", "value"}] into obj["metadata"]. */
static int put_metadata(writer *w, json_t *obj, const fsh_metadata *m, const char *path) {
  json_t *arr = json_array();
  FSH_RETURN_NOT_OK(put(w, obj, "metadata", arr));
  for (int64_t i = 0; i < m->n; i++) {
    json_t *v = json_stringn(m->items[i].value, (size_t)m->items[i].value_len);
    if (!v)
      return fsh_error_set(w->err, EINVAL, "%s: metadata '%s' is not valid UTF-8", path,
                           m->items[i].key);
    json_t *kv = json_pack("{s:s, s:o}", "key", m->items[i].key, "value", v);
    if (!kv) return fsh_error_set(w->err, EINVAL, "%s: metadata key '%s' is not valid UTF-8", path,
                                  m->items[i].key);
    FSH_RETURN_NOT_OK(append(w, arr, kv));
  }
  return 0;
}

/* Appends the Field object of f to `arr`. */
static int append_field(writer *w, json_t *arr, const fsh_field *f, const char *path) {
  const fsh_field *vt = f->dictionary ? &f->dictionary->value : f;
  json_t *j = json_object(), *type = NULL, *children = json_array();
  if (append(w, arr, j) != 0) {
    json_decref(children);
    return ENOMEM;
  }
  FSH_RETURN_NOT_OK(put(w, j, "children", children));
  FSH_RETURN_NOT_OK(type_json(w, vt, path, &type));
  FSH_RETURN_NOT_OK(put(w, j, "type", type));
  json_t *name = json_string(f->name);
  if (!name) return fsh_error_set(w->err, EINVAL, "field '%s': name is not valid UTF-8", path);
  FSH_RETURN_NOT_OK(put(w, j, "name", name));
  FSH_RETURN_NOT_OK(put(w, j, "nullable", json_boolean(f->nullable)));
  for (int64_t k = 0; k < vt->n_children; k++) {
    char cpath[FSH_JSON_PATH_MAX];
    fsh_json_path(cpath, "%s.%s", path, vt->children[k].name);
    FSH_RETURN_NOT_OK(append_field(w, children, &vt->children[k], cpath));
  }
  if (f->dictionary) {
    json_t *d = json_pack("{s:I, s:o, s:b}", "id", (json_int_t)f->dictionary->id, "indexType",
                          int_type(f->type), "isOrdered", f->dictionary->ordered);
    FSH_RETURN_NOT_OK(put(w, j, "dictionary", d));
  }
  if (f->metadata.n > 0) FSH_RETURN_NOT_OK(put_metadata(w, j, &f->metadata, path));
  return 0;
}

/* ---- data --------------------------------------------------------------- */

static int append_array(writer *w, json_t *arr, const fsh_field *f, const char *name,
                        const fsh_array *a, int64_t start, int64_t n, const char *parent);

/* Remembers the dictionary of a; the same id must always mean equal data. */
static int register_dict(writer *w, const fsh_field *f, const fsh_array *a, const char *path) {
  if (!a->dictionary)
    return fsh_error_set(w->err, EINVAL, "%s: dictionary-encoded array without a dictionary", path);
  for (int64_t i = 0; i < w->n_dicts; i++) {
    if (w->dicts[i].id != f->dictionary->id) continue;
    if (w->dicts[i].array == a->dictionary) return 0;
    fsh_error diff;
    if (fsh_array_equals(&f->dictionary->value, w->dicts[i].array, a->dictionary, &diff)) return 0;
    return fsh_error_set(w->err, ENOTSUP,
                         "%s: dictionary id %" PRId64
                         " differs between arrays (the JSON format holds one dictionary per id): %s",
                         path, f->dictionary->id, diff.message);
  }
  if (w->n_dicts == w->cap_dicts) {
    int64_t cap = w->cap_dicts ? 2 * w->cap_dicts : 8;
    dict_ref *d = fsh_realloc(w->dicts, (size_t)cap * sizeof *d);
    if (!d) return oom(w);
    w->dicts = d;
    w->cap_dicts = cap;
  }
  w->dicts[w->n_dicts++] = (dict_ref){f->dictionary->id, &f->dictionary->value, a->dictionary};
  return 0;
}

/* Offset j of buffer 1 (32- or 64-bit). */
static int64_t offset_at(const fsh_array *a, bool large, int64_t j) {
  const uint8_t *p = a->buffers[1]->data;
  if (large) {
    int64_t v;
    memcpy(&v, p + 8 * j, 8);
    return v;
  }
  int32_t v;
  memcpy(&v, p + 4 * j, 4);
  return v;
}

/* One DATA value of a fixed-width slot (absolute index j); NULL on ENOMEM. */
static json_t *fixed_value(const fsh_field *f, const uint8_t *p, int64_t j) {
  switch (f->type) {
    case FSH_TYPE_INT8: return json_integer(((const int8_t *)p)[j]);
    case FSH_TYPE_UINT8: return json_integer(p[j]);
    case FSH_TYPE_INT16: { int16_t v; memcpy(&v, p + 2 * j, 2); return json_integer(v); }
    case FSH_TYPE_UINT16: { uint16_t v; memcpy(&v, p + 2 * j, 2); return json_integer(v); }
    case FSH_TYPE_INT32: case FSH_TYPE_DATE32: case FSH_TYPE_TIME32:
    case FSH_TYPE_INTERVAL_MONTHS: { int32_t v; memcpy(&v, p + 4 * j, 4); return json_integer(v); }
    case FSH_TYPE_UINT32: { uint32_t v; memcpy(&v, p + 4 * j, 4); return json_integer(v); }
    case FSH_TYPE_INT64: case FSH_TYPE_DATE64: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP:
    case FSH_TYPE_DURATION: { int64_t v; memcpy(&v, p + 8 * j, 8); return int64_string(v); }
    case FSH_TYPE_UINT64: { uint64_t v; memcpy(&v, p + 8 * j, 8); return uint64_string(v); }
    case FSH_TYPE_FLOAT16: { uint16_t v; memcpy(&v, p + 2 * j, 2);
      return real_value((double)fsh_half_to_float(v)); }
    case FSH_TYPE_FLOAT32: { float v; memcpy(&v, p + 4 * j, 4); return real_value((double)v); }
    case FSH_TYPE_FLOAT64: { double v; memcpy(&v, p + 8 * j, 8); return real_value(v); }
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256: {
      int bw = f->type == FSH_TYPE_DECIMAL128 ? 16 : 32;
      char s[96];
      fsh_decimal_format(p + (int64_t)bw * j, bw, s, sizeof s);
      return json_string(s);
    }
    case FSH_TYPE_INTERVAL_DAY_TIME: {
      int32_t v[2];
      memcpy(v, p + 8 * j, 8);
      return json_pack("{s:i, s:i}", "days", v[0], "milliseconds", v[1]);
    }
    case FSH_TYPE_INTERVAL_MONTH_DAY_NANO: {
      int32_t md[2];
      int64_t ns;
      memcpy(md, p + 16 * j, 8);
      memcpy(&ns, p + 16 * j + 8, 8);
      return json_pack("{s:i, s:i, s:I}", "months", md[0], "days", md[1], "nanoseconds",
                       (json_int_t)ns);
    }
    case FSH_TYPE_FIXED_SIZE_BINARY:
      return hex_string(p + (int64_t)f->byte_width * j, f->byte_width);
    default: return NULL;
  }
}

static bool has_validity(fsh_type_id t) {
  return t != FSH_TYPE_NA && t != FSH_TYPE_SPARSE_UNION && t != FSH_TYPE_DENSE_UNION;
}

/* Whether the layout of f's arrays has a buffer 1 that must be there. */
static bool needs_buffer1(const fsh_field *f) {
  switch (f->type) {
    case FSH_TYPE_NA: case FSH_TYPE_STRUCT: case FSH_TYPE_FIXED_SIZE_LIST:
    case FSH_TYPE_SPARSE_UNION: return false;
    default: return true;
  }
}

/* Writes the OFFSET member (rebased to 0) of slots [base, base + n). */
static int put_offsets(writer *w, json_t *j, const fsh_array *a, bool large, int64_t base,
                       int64_t n) {
  json_t *o = json_array();
  FSH_RETURN_NOT_OK(put(w, j, "OFFSET", o));
  int64_t first = n > 0 ? offset_at(a, large, base) : 0;
  for (int64_t i = 0; i <= n; i++) {
    int64_t rel = n > 0 ? offset_at(a, large, base + i) - first : 0;
    FSH_RETURN_NOT_OK(append(w, o, large ? int64_string(rel) : json_integer(rel)));
  }
  return 0;
}

/* Fills VALIDITY/OFFSET/TYPE_ID/DATA/children of FieldData j for slots
 * [start, start + n) of a (relative to a->offset). */
static int fill_data(writer *w, const fsh_field *f, const fsh_array *a, int64_t start, int64_t n,
                     const char *path, json_t *j) {
  int64_t base = a->offset + start;
  if (has_validity(f->type)) {
    json_t *v = json_array();
    FSH_RETURN_NOT_OK(put(w, j, "VALIDITY", v));
    const uint8_t *bits = a->n_buffers > 0 && a->buffers[0] ? a->buffers[0]->data : NULL;
    for (int64_t i = 0; i < n; i++)
      FSH_RETURN_NOT_OK(append(w, v, json_integer(!bits || fsh_bit_get(bits, base + i))));
  }
  if (f->type == FSH_TYPE_NA) return 0;
  if (needs_buffer1(f) && n > 0 && (a->n_buffers < 2 || !a->buffers[1]))
    return fsh_error_set(w->err, EINVAL, "%s: missing buffer 1 of a %s array", path,
                         fsh_type_name(f->type));
  if (f->dictionary) FSH_RETURN_NOT_OK(register_dict(w, f, a, path));
  json_t *children = NULL;
  if (f->n_children > 0) {
    children = json_array();
    FSH_RETURN_NOT_OK(put(w, j, "children", children));
    if (a->n_children < f->n_children)
      return fsh_error_set(w->err, EINVAL, "%s: array has %" PRId64 " children, field %" PRId64,
                           path, a->n_children, f->n_children);
  }
  switch (f->type) {
    case FSH_TYPE_BOOL: {
      json_t *d = json_array();
      FSH_RETURN_NOT_OK(put(w, j, "DATA", d));
      for (int64_t i = 0; i < n; i++)
        FSH_RETURN_NOT_OK(append(w, d, json_boolean(fsh_bit_get(a->buffers[1]->data, base + i))));
      return 0;
    }
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      bool large = f->type == FSH_TYPE_LARGE_BINARY || f->type == FSH_TYPE_LARGE_STRING;
      bool text = f->type == FSH_TYPE_STRING || f->type == FSH_TYPE_LARGE_STRING;
      FSH_RETURN_NOT_OK(put_offsets(w, j, a, large, base, n));
      json_t *d = json_array();
      FSH_RETURN_NOT_OK(put(w, j, "DATA", d));
      const uint8_t *bytes = a->n_buffers > 2 && a->buffers[2] ? a->buffers[2]->data : NULL;
      for (int64_t i = 0; i < n; i++) {
        int64_t s = offset_at(a, large, base + i), e = offset_at(a, large, base + i + 1);
        if (e > s && !bytes) return fsh_error_set(w->err, EINVAL, "%s: missing data buffer", path);
        json_t *v = text ? json_stringn(e > s ? (const char *)bytes + s : "", (size_t)(e - s))
                         : hex_string(e > s ? bytes + s : NULL, e - s);
        if (!v && text)
          return fsh_error_set(w->err, EINVAL, "%s: slot %" PRId64 " is not valid UTF-8", path,
                               start + i);
        FSH_RETURN_NOT_OK(append(w, d, v));
      }
      return 0;
    }
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP: {
      bool large = f->type == FSH_TYPE_LARGE_LIST;
      FSH_RETURN_NOT_OK(put_offsets(w, j, a, large, base, n));
      int64_t first = n > 0 ? offset_at(a, large, base) : 0;
      int64_t last = n > 0 ? offset_at(a, large, base + n) : 0;
      return append_array(w, children, &f->children[0], f->children[0].name, a->children[0], first,
                          last - first, path);
    }
    case FSH_TYPE_FIXED_SIZE_LIST: {
      int64_t ls = f->list_size;
      return append_array(w, children, &f->children[0], f->children[0].name, a->children[0],
                          base * ls, n * ls, path);
    }
    case FSH_TYPE_STRUCT:
      for (int64_t k = 0; k < f->n_children; k++)
        FSH_RETURN_NOT_OK(append_array(w, children, &f->children[k], f->children[k].name,
                                       a->children[k], base, n, path));
      return 0;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: {
      bool dense = f->type == FSH_TYPE_DENSE_UNION;
      if (n > 0 && (a->n_buffers < 1 || !a->buffers[0]))
        return fsh_error_set(w->err, EINVAL, "%s: missing union type ids", path);
      json_t *ids = json_array(), *o = NULL;
      FSH_RETURN_NOT_OK(put(w, j, "TYPE_ID", ids));
      if (dense) {
        o = json_array();
        FSH_RETURN_NOT_OK(put(w, j, "OFFSET", o));
      }
      for (int64_t i = 0; i < n; i++) {
        int8_t id = ((const int8_t *)a->buffers[0]->data)[base + i];
        FSH_RETURN_NOT_OK(append(w, ids, json_integer(id)));
        if (dense) {
          int32_t v;
          memcpy(&v, a->buffers[1]->data + 4 * (base + i), 4);
          FSH_RETURN_NOT_OK(append(w, o, json_integer(v)));
        }
      }
      /* Dense children are written whole: the offsets index into them. */
      for (int64_t k = 0; k < f->n_children; k++) {
        const fsh_array *c = a->children[k];
        FSH_RETURN_NOT_OK(append_array(w, children, &f->children[k], f->children[k].name, c,
                                       dense ? 0 : base, dense ? (c ? c->length : 0) : n, path));
      }
      return 0;
    }
    default: {
      json_t *d = json_array();
      FSH_RETURN_NOT_OK(put(w, j, "DATA", d));
      for (int64_t i = 0; i < n; i++) {
        json_t *v = fixed_value(f, a->buffers[1]->data, base + i);
        if (!v && fsh_type_bit_width(f) == 0 && f->type != FSH_TYPE_FIXED_SIZE_BINARY)
          return fsh_error_set(w->err, ENOTSUP, "%s: cannot write type %s", path,
                               fsh_type_name(f->type));
        FSH_RETURN_NOT_OK(append(w, d, v));
      }
      return 0;
    }
  }
}

/* Appends the FieldData of slots [start, start + n) of a to `arr`.
 * `parent` is the path of the parent, for messages. */
static int append_array(writer *w, json_t *arr, const fsh_field *f, const char *name,
                        const fsh_array *a, int64_t start, int64_t n, const char *parent) {
  char path[FSH_JSON_PATH_MAX];
  fsh_json_path(path, "%s%s%s", parent, parent[0] ? "." : "", name);
  if (!a) return fsh_error_set(w->err, EINVAL, "%s: array is NULL", path);
  if (start < 0 || n < 0 || start > a->length - n)
    return fsh_error_set(w->err, EINVAL,
                         "%s: slots [%" PRId64 ", %" PRId64 ") outside the array's %" PRId64, path,
                         start, start + n, a->length);
  json_t *j = json_object();
  FSH_RETURN_NOT_OK(append(w, arr, j));
  json_t *jname = json_string(name);
  if (!jname) return fsh_error_set(w->err, EINVAL, "%s: name is not valid UTF-8", path);
  FSH_RETURN_NOT_OK(put(w, j, "name", jname));
  FSH_RETURN_NOT_OK(put(w, j, "count", json_integer(n)));
  return fill_data(w, f, a, start, n, path, j);
}

/* ---- the document ------------------------------------------------------- */

static int fill_document(writer *w, json_t *root, const fsh_schema *schema,
                         fsh_batch *const *batches, int64_t n) {
  json_t *jschema = json_object(), *fields = json_array(), *jbatches = json_array();
  FSH_RETURN_NOT_OK(put(w, root, "schema", jschema));
  FSH_RETURN_NOT_OK(put(w, jschema, "fields", fields));
  FSH_RETURN_NOT_OK(put(w, root, "batches", jbatches));
  for (int64_t i = 0; i < schema->n_fields; i++)
    FSH_RETURN_NOT_OK(append_field(w, fields, &schema->fields[i], schema->fields[i].name));
  if (schema->metadata.n > 0) FSH_RETURN_NOT_OK(put_metadata(w, jschema, &schema->metadata, "schema"));
  for (int64_t b = 0; b < n; b++) {
    const fsh_batch *batch = batches[b];
    char bpath[FSH_JSON_PATH_MAX];
    fsh_json_path(bpath, "batch %" PRId64, b);
    if (batch->n_columns != schema->n_fields)
      return fsh_error_set(w->err, EINVAL, "%s: %" PRId64 " columns, the schema has %" PRId64
                           " fields", bpath, batch->n_columns, schema->n_fields);
    json_t *jb = json_object(), *cols = json_array();
    if (append(w, jbatches, jb) != 0) {
      json_decref(cols);
      return ENOMEM;
    }
    FSH_RETURN_NOT_OK(put(w, jb, "count", json_integer(batch->length)));
    FSH_RETURN_NOT_OK(put(w, jb, "columns", cols));
    for (int64_t i = 0; i < batch->n_columns; i++) {
      const fsh_field *f = &schema->fields[i];
      const fsh_array *c = batch->columns[i];
      if (!c || c->length != batch->length)
        return fsh_error_set(w->err, EINVAL, "%s.%s: length %" PRId64 ", the batch has %" PRId64,
                             bpath, f->name, c ? c->length : -1, batch->length);
      FSH_RETURN_NOT_OK(append_array(w, cols, f, f->name, c, 0, batch->length, bpath));
    }
  }
  if (w->n_dicts == 0) return 0;
  json_t *jd = json_array();
  FSH_RETURN_NOT_OK(put(w, root, "dictionaries", jd));
  /* Writing a dictionary may meet nested ones: w->n_dicts grows. */
  for (int64_t i = 0; i < w->n_dicts; i++) {
    char name[48], dpath[64];
    snprintf(name, sizeof name, "DICT%" PRId64, w->dicts[i].id);
    snprintf(dpath, sizeof dpath, "dictionary %" PRId64, w->dicts[i].id);
    const fsh_array *da = w->dicts[i].array;
    json_t *e = json_pack("{s:I, s:{s:I, s:[]}}", "id", (json_int_t)w->dicts[i].id, "data",
                          "count", (json_int_t)da->length, "columns");
    FSH_RETURN_NOT_OK(append(w, jd, e));
    json_t *cols = json_object_get(json_object_get(e, "data"), "columns");
    FSH_RETURN_NOT_OK(append_array(w, cols, w->dicts[i].value, name, da, 0, da->length, dpath));
  }
  return 0;
}

/* Builds the whole document into *out (a new reference). */
static int document_json(const fsh_schema *schema, fsh_batch *const *batches, int64_t n,
                         json_t **out, fsh_error *err) {
  writer w = {.err = err};
  json_t *root = json_object();
  int rc = root ? fill_document(&w, root, schema, batches, n) : oom(&w);
  fsh_free(w.dicts);
  if (rc != 0) {
    json_decref(root);
    return rc;
  }
  *out = root;
  return 0;
}

#define DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))

int fsh_json_write(FILE *f, const fsh_schema *schema, fsh_batch *const *batches, int64_t n,
                   fsh_error *err) {
  json_t *root;
  FSH_RETURN_NOT_OK(document_json(schema, batches, n, &root, err));
  int rc = json_dumpf(root, f, DUMP_FLAGS);
  json_decref(root);
  if (rc != 0 || fputc('\n', f) == EOF || fflush(f) != 0)
    return fsh_error_set(err, EIO, "writing JSON: %s", strerror(errno));
  return 0;
}

int fsh_json_write_string(const fsh_schema *schema, fsh_batch *const *batches, int64_t n,
                          char **out, size_t *len, fsh_error *err) {
  *out = NULL;
  json_t *root;
  FSH_RETURN_NOT_OK(document_json(schema, batches, n, &root, err));
  char *s = json_dumps(root, DUMP_FLAGS);
  json_decref(root);
  if (!s) return fsh_error_set(err, ENOMEM, "out of memory serializing JSON");
  size_t l = strlen(s);
  char *copy = fsh_malloc(l + 1);
  if (copy) memcpy(copy, s, l + 1);
  free(s); /* jansson's allocation */
  if (!copy) return fsh_error_set(err, ENOMEM, "out of memory serializing JSON");
  *out = copy;
  *len = l;
  return 0;
}

static int gz_chunk(const char *buffer, size_t size, void *data) {
  return size == 0 || gzwrite((gzFile)data, buffer, (unsigned)size) == (int)size ? 0 : -1;
}

int fsh_json_write_path(const char *path, const fsh_schema *schema, fsh_batch *const *batches,
                        int64_t n, fsh_error *err) {
  json_t *root;
  FSH_RETURN_NOT_OK(document_json(schema, batches, n, &root, err));
  size_t plen = strlen(path);
  bool gz = plen > 3 && strcmp(path + plen - 3, ".gz") == 0;
  char *tmp = fsh_malloc(plen + 5);
  if (!tmp) {
    json_decref(root);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  snprintf(tmp, plen + 5, "%s.tmp", path);
  int rc = 0;
  errno = 0;
  if (gz) {
    gzFile g = gzopen(tmp, "wb");
    if (!g) {
      rc = fsh_error_set(err, errno ? errno : EIO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
      int drc = json_dump_callback(root, gz_chunk, g, DUMP_FLAGS);
      int crc = gzclose(g);
      if (drc != 0 || crc != Z_OK) rc = fsh_error_set(err, EIO, "%s: write failed", tmp);
    }
  } else {
    FILE *f = fopen(tmp, "wb");
    if (!f) {
      rc = fsh_error_set(err, errno, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
      bool ok = json_dumpf(root, f, DUMP_FLAGS) == 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
      if (fclose(f) != 0) ok = false;
      if (!ok) rc = fsh_error_set(err, EIO, "%s: write failed: %s", tmp, strerror(errno));
    }
  }
  json_decref(root);
  if (rc == 0 && rename(tmp, path) != 0)
    rc = fsh_error_set(err, errno, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
  if (rc != 0) unlink(tmp);
  fsh_free(tmp);
  return rc;
}
