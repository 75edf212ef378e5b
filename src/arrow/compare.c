/* compare.c -- logical equality of arrays, fields, schemas and batches, with
 * a message naming the first difference (path, row, both values).
 *
 * Arrays are compared slot by slot as values, never as buffers: offsets
 * (slices), padding and the contents of null slots do not matter; floats are
 * equal when bitwise equal or both NaN; variable-length values are compared
 * through their offsets; nested values through the child range each slot
 * owns; dictionary-encoded values through the dictionary value the index
 * points at. The arrays are assumed valid for the field (fsh_array_validate)
 * apart from light structural checks that report instead of crashing. */
#include <flightshuffle/arrow.h>

#include "arrow/numeric.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- the diff context --------------------------------------------------- */

typedef struct cmp_ctx {
  fsh_error *diff;
  const char *kind;       /* "column" or "array" */
  char path[512];         /* field names joined by '.' */
  int depth;              /* 0 while comparing the top-level array's own slots */
  int64_t top_row;        /* the top-level row being compared */
  const char *index_kind; /* "child" or "dictionary", at depth > 0 */
} cmp_ctx;

/* Formats "<kind> '<path>' row R[ (<index_kind> index i[ vs j])]: <msg>"
 * into the diff, if any; returns false so callers can `return report(...)`. */
static bool report(cmp_ctx *c, int64_t ia, int64_t ib, const char *fmt, ...) FSH_PRINTF(4, 5);
static bool report(cmp_ctx *c, int64_t ia, int64_t ib, const char *fmt, ...) {
  if (!c->diff) return false;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->depth == 0)
    fsh_error_set(c->diff, 0, "%s '%s' row %" PRId64 ": %s", c->kind, c->path, c->top_row, msg);
  else if (ia == ib)
    fsh_error_set(c->diff, 0, "%s '%s' row %" PRId64 " (%s index %" PRId64 "): %s", c->kind,
                  c->path, c->top_row, c->index_kind, ia, msg);
  else
    fsh_error_set(c->diff, 0, "%s '%s' row %" PRId64 " (%s index %" PRId64 " vs %" PRId64 "): %s",
                  c->kind, c->path, c->top_row, c->index_kind, ia, ib, msg);
  return false;
}

/* Appends ".name" to the path; returns the previous length for path_pop. */
static size_t path_push(cmp_ctx *c, const char *name) {
  size_t len = strlen(c->path);
  snprintf(c->path + len, sizeof c->path - len, "%s%s", len ? "." : "", name);
  return len;
}

static void path_pop(cmp_ctx *c, size_t len) { c->path[len] = '\0'; }

/* ---- reading slots ------------------------------------------------------ */


/* Byte width of one fixed-width value; 0 for bool, variable and nested. */
static int64_t byte_width(const fsh_field *f) {
  if (f->type == FSH_TYPE_BOOL) return 0;
  return fsh_type_bit_width(f) / 8;
}

static const uint8_t *buf_data(const fsh_array *a, int i) {
  return i < a->n_buffers && a->buffers[i] ? a->buffers[i]->data : NULL;
}

static int64_t read_int(fsh_type_id t, const uint8_t *p, int64_t i);

/* Whether slot i (relative to a->offset) holds a value. Logical: a
 * dictionary slot whose index points at a null dictionary value is null,
 * as the hash kernels see it too. */
static bool slot_valid(const fsh_field *f, const fsh_array *a, int64_t i) {
  if (f->type == FSH_TYPE_NA) return false;
  if (fsh_type_is_union(f->type)) return true; /* unions have no validity of their own */
  const uint8_t *v = buf_data(a, 0);
  if (v && !fsh_bit_get(v, a->offset + i)) return false;
  if (f->dictionary && a->dictionary && buf_data(a, 1)) {
    int64_t k = read_int(f->type, buf_data(a, 1), a->offset + i);
    return k >= 0 && k < a->dictionary->length && slot_valid(&f->dictionary->value, a->dictionary, k);
  }
  return true;
}

/* Integer value of slot i of an integer-typed array (dictionary indices). */
static int64_t read_int(fsh_type_id t, const uint8_t *p, int64_t i) {
  switch (t) {
    case FSH_TYPE_INT8: return ((const int8_t *)p)[i];
    case FSH_TYPE_UINT8: return p[i];
    case FSH_TYPE_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case FSH_TYPE_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case FSH_TYPE_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case FSH_TYPE_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case FSH_TYPE_INT64: case FSH_TYPE_UINT64: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    default: return -1;
  }
}

/* Offsets pair [start, end) of a variable-length slot (absolute index j). */
static void read_offsets(const fsh_array *a, int buffer, bool large, int64_t j, int64_t *start,
                         int64_t *end) {
  const uint8_t *p = buf_data(a, buffer);
  if (large) {
    memcpy(start, p + 8 * j, 8);
    memcpy(end, p + 8 * (j + 1), 8);
  } else {
    int32_t s, e;
    memcpy(&s, p + 4 * j, 4);
    memcpy(&e, p + 4 * (j + 1), 4);
    *start = s;
    *end = e;
  }
}

static bool is_large(fsh_type_id t) {
  return t == FSH_TYPE_LARGE_BINARY || t == FSH_TYPE_LARGE_STRING || t == FSH_TYPE_LARGE_LIST;
}

static void fmt_bytes(const uint8_t *p, int64_t n, bool text, char *out, size_t size) {
  size_t w = 0;
  const int64_t limit = text ? 48 : 24;
  if (text && w + 1 < size) out[w++] = '"';
  for (int64_t k = 0; k < n && k < limit && w + 5 < size; k++) {
    if (!text)
      w += (size_t)snprintf(out + w, size - w, "%02X", p[k]);
    else if (p[k] == '"' || p[k] == '\\')
      w += (size_t)snprintf(out + w, size - w, "\\%c", p[k]);
    else if (p[k] < 0x20 || p[k] == 0x7f)
      w += (size_t)snprintf(out + w, size - w, "\\x%02X", p[k]);
    else
      out[w++] = (char)p[k];
  }
  if (n > limit && w + 4 < size) w += (size_t)snprintf(out + w, size - w, "...");
  if (text && w + 1 < size) out[w++] = '"';
  if (!text && n == 0 && w + 3 < size) w += (size_t)snprintf(out + w, size - w, "<empty>");
  out[w < size ? w : size - 1] = '\0';
}

/* Printable form of slot i (relative to a->offset) of a non-dictionary
 * array; nested values get a short description. */
static void fmt_slot(const fsh_field *f, const fsh_array *a, int64_t i, char *out, size_t size) {
  if (!slot_valid(f, a, i)) {
    snprintf(out, size, "null");
    return;
  }
  int64_t j = a->offset + i;
  const uint8_t *p = buf_data(a, 1);
  if (!p && f->type != FSH_TYPE_NA && f->type != FSH_TYPE_STRUCT &&
      f->type != FSH_TYPE_FIXED_SIZE_LIST && !fsh_type_is_union(f->type)) {
    snprintf(out, size, "<missing buffer>");
    return;
  }
  switch (f->type) {
    case FSH_TYPE_BOOL: snprintf(out, size, "%s", fsh_bit_get(p, j) ? "true" : "false"); return;
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32:
      snprintf(out, size, "%" PRId64, read_int(f->type, p, j));
      return;
    case FSH_TYPE_UINT64: { uint64_t v; memcpy(&v, p + 8 * j, 8);
      snprintf(out, size, "%" PRIu64, v); return; }
    case FSH_TYPE_DATE32: case FSH_TYPE_TIME32: case FSH_TYPE_INTERVAL_MONTHS:
      snprintf(out, size, "%" PRId64, read_int(FSH_TYPE_INT32, p, j));
      return;
    case FSH_TYPE_DATE64: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION:
      snprintf(out, size, "%" PRId64, read_int(FSH_TYPE_INT64, p, j));
      return;
    case FSH_TYPE_FLOAT16: { uint16_t h; memcpy(&h, p + 2 * j, 2);
      snprintf(out, size, "%.9g (0x%04X)", (double)fsh_half_to_float(h), h); return; }
    case FSH_TYPE_FLOAT32: { float v; memcpy(&v, p + 4 * j, 4);
      snprintf(out, size, "%.9g", (double)v); return; }
    case FSH_TYPE_FLOAT64: { double v; memcpy(&v, p + 8 * j, 8);
      snprintf(out, size, "%.17g", v); return; }
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256: {
      int w = f->type == FSH_TYPE_DECIMAL128 ? 16 : 32;
      char digits[96];
      fsh_decimal_format(p + (int64_t)w * j, w, digits, sizeof digits);
      snprintf(out, size, "%s (scale %d)", digits, f->scale);
      return;
    }
    case FSH_TYPE_INTERVAL_DAY_TIME: { int32_t v[2]; memcpy(v, p + 8 * j, 8);
      snprintf(out, size, "{days %d, ms %d}", v[0], v[1]); return; }
    case FSH_TYPE_INTERVAL_MONTH_DAY_NANO: { int32_t md[2]; int64_t ns;
      memcpy(md, p + 16 * j, 8); memcpy(&ns, p + 16 * j + 8, 8);
      snprintf(out, size, "{months %d, days %d, ns %" PRId64 "}", md[0], md[1], ns); return; }
    case FSH_TYPE_FIXED_SIZE_BINARY:
      fmt_bytes(p + (int64_t)f->byte_width * j, f->byte_width, false, out, size);
      return;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      int64_t s, e;
      const uint8_t *data = buf_data(a, 2);
      read_offsets(a, 1, is_large(f->type), j, &s, &e);
      if (!data && e > s) {
        snprintf(out, size, "<missing data buffer>");
        return;
      }
      bool text = f->type == FSH_TYPE_STRING || f->type == FSH_TYPE_LARGE_STRING;
      fmt_bytes(data ? data + s : NULL, e - s, text, out, size);
      return;
    }
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP: {
      int64_t s, e;
      read_offsets(a, 1, is_large(f->type), j, &s, &e);
      snprintf(out, size, "<%s of %" PRId64 ">", f->type == FSH_TYPE_MAP ? "map" : "list", e - s);
      return;
    }
    case FSH_TYPE_FIXED_SIZE_LIST: snprintf(out, size, "<list of %d>", f->list_size); return;
    case FSH_TYPE_STRUCT: snprintf(out, size, "<struct>"); return;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: {
      const uint8_t *ids = buf_data(a, 0);
      snprintf(out, size, "<union type id %d>", ids ? ((const int8_t *)ids)[j] : -1);
      return;
    }
    default: snprintf(out, size, "<%s>", fsh_type_name(f->type)); return;
  }
}

/* Like fmt_slot, but decodes a dictionary-encoded slot to its value. */
static void fmt_logical(const fsh_field *f, const fsh_array *a, int64_t i, char *out, size_t size) {
  if (!f->dictionary) {
    fmt_slot(f, a, i, out, size);
    return;
  }
  if (!slot_valid(f, a, i)) {
    snprintf(out, size, "null");
    return;
  }
  const uint8_t *p = buf_data(a, 1);
  int64_t idx = p ? read_int(f->type, p, a->offset + i) : -1;
  if (!a->dictionary || idx < 0 || idx >= a->dictionary->length) {
    snprintf(out, size, "<index %" PRId64 " out of dictionary>", idx);
    return;
  }
  fmt_logical(&f->dictionary->value, a->dictionary, idx, out, size);
}

/* ---- array comparison --------------------------------------------------- */

static bool cmp_range(cmp_ctx *c, const fsh_field *f, const fsh_array *a, int64_t ia,
                      const fsh_array *b, int64_t ib, int64_t n);

/* Compares child ranges under a child field, adjusting the diff context. */
static bool cmp_child(cmp_ctx *c, const fsh_field *cf, const char *index_kind, const fsh_array *a,
                      int64_t ia, const fsh_array *b, int64_t ib, int64_t n, bool push_name) {
  size_t saved = push_name ? path_push(c, cf->name) : strlen(c->path);
  const char *saved_kind = c->index_kind;
  c->depth++;
  c->index_kind = index_kind;
  bool eq = cmp_range(c, cf, a, ia, b, ib, n);
  c->depth--;
  c->index_kind = saved_kind;
  path_pop(c, saved);
  return eq;
}

static bool float_eq(fsh_type_id t, const uint8_t *pa, const uint8_t *pb) {
  switch (t) {
    case FSH_TYPE_FLOAT16: {
      uint16_t x, y;
      memcpy(&x, pa, 2);
      memcpy(&y, pb, 2);
      return x == y || ((x & 0x7c00) == 0x7c00 && (x & 0x3ff) && (y & 0x7c00) == 0x7c00 &&
                        (y & 0x3ff));
    }
    case FSH_TYPE_FLOAT32: {
      float x, y;
      memcpy(&x, pa, 4);
      memcpy(&y, pb, 4);
      return memcmp(pa, pb, 4) == 0 || (x != x && y != y);
    }
    default: {
      double x, y;
      memcpy(&x, pa, 8);
      memcpy(&y, pb, 8);
      return memcmp(pa, pb, 8) == 0 || (x != x && y != y);
    }
  }
}

static bool is_float(fsh_type_id t) {
  return t == FSH_TYPE_FLOAT16 || t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT64;
}

/* Reports two differing values of slots xa / xb. */
static bool report_values(cmp_ctx *c, const fsh_field *f, const fsh_array *a, int64_t xa,
                          const fsh_array *b, int64_t xb) {
  char va[160], vb[160];
  fmt_logical(f, a, xa, va, sizeof va);
  fmt_logical(f, b, xb, vb, sizeof vb);
  return report(c, xa, xb, "%s != %s", va, vb);
}

/* Compares the values of two valid slots xa / xb (relative to offsets). */
static bool cmp_slot(cmp_ctx *c, const fsh_field *f, const fsh_array *a, int64_t xa,
                     const fsh_array *b, int64_t xb) {
  int64_t ja = a->offset + xa, jb = b->offset + xb;
  if (f->dictionary) {
    const uint8_t *pa = buf_data(a, 1), *pb = buf_data(b, 1);
    if (!pa || !pb) return report(c, xa, xb, "missing index buffer");
    if (!a->dictionary || !b->dictionary)
      return report(c, xa, xb, "dictionary missing in %s array", a->dictionary ? "second" : "first");
    int64_t da = read_int(f->type, pa, ja), db = read_int(f->type, pb, jb);
    if (da < 0 || da >= a->dictionary->length || db < 0 || db >= b->dictionary->length)
      return report(c, xa, xb, "dictionary index %" PRId64 " / %" PRId64 " out of range", da, db);
    if (a->dictionary == b->dictionary && da == db) return true;
    return cmp_child(c, &f->dictionary->value, "dictionary", a->dictionary, da, b->dictionary, db,
                     1, false);
  }
  switch (f->type) {
    case FSH_TYPE_NA: return true;
    case FSH_TYPE_BOOL: {
      const uint8_t *pa = buf_data(a, 1), *pb = buf_data(b, 1);
      if (!pa || !pb) return report(c, xa, xb, "missing values buffer");
      if (fsh_bit_get(pa, ja) != fsh_bit_get(pb, jb)) return report_values(c, f, a, xa, b, xb);
      return true;
    }
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      if (!buf_data(a, 1) || !buf_data(b, 1)) return report(c, xa, xb, "missing offsets buffer");
      int64_t sa, ea, sb, eb;
      read_offsets(a, 1, is_large(f->type), ja, &sa, &ea);
      read_offsets(b, 1, is_large(f->type), jb, &sb, &eb);
      if (ea - sa != eb - sb) return report_values(c, f, a, xa, b, xb);
      if (ea == sa) return true;
      const uint8_t *da = buf_data(a, 2), *db = buf_data(b, 2);
      if (!da || !db) return report(c, xa, xb, "missing data buffer");
      if (memcmp(da + sa, db + sb, (size_t)(ea - sa)) != 0) return report_values(c, f, a, xa, b, xb);
      return true;
    }
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP: {
      if (!buf_data(a, 1) || !buf_data(b, 1)) return report(c, xa, xb, "missing offsets buffer");
      if (f->n_children != 1 || a->n_children < 1 || b->n_children < 1)
        return report(c, xa, xb, "list without a child");
      int64_t sa, ea, sb, eb;
      read_offsets(a, 1, is_large(f->type), ja, &sa, &ea);
      read_offsets(b, 1, is_large(f->type), jb, &sb, &eb);
      if (ea - sa != eb - sb)
        return report(c, xa, xb, "%s length %" PRId64 " != %" PRId64,
                      f->type == FSH_TYPE_MAP ? "map" : "list", ea - sa, eb - sb);
      return cmp_child(c, &f->children[0], "child", a->children[0], sa, b->children[0], sb,
                       ea - sa, true);
    }
    case FSH_TYPE_FIXED_SIZE_LIST: {
      if (f->n_children != 1 || a->n_children < 1 || b->n_children < 1)
        return report(c, xa, xb, "list without a child");
      int64_t n = f->list_size;
      return cmp_child(c, &f->children[0], "child", a->children[0], ja * n, b->children[0], jb * n,
                       n, true);
    }
    case FSH_TYPE_STRUCT: {
      if (a->n_children < f->n_children || b->n_children < f->n_children)
        return report(c, xa, xb, "struct has %" PRId64 " / %" PRId64 " children, field has %" PRId64,
                      a->n_children, b->n_children, f->n_children);
      for (int64_t k = 0; k < f->n_children; k++)
        if (!cmp_child(c, &f->children[k], "child", a->children[k], ja, b->children[k], jb, 1, true))
          return false;
      return true;
    }
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: {
      const uint8_t *ta = buf_data(a, 0), *tb = buf_data(b, 0);
      if (!ta || !tb) return report(c, xa, xb, "missing type ids buffer");
      int8_t ida = ((const int8_t *)ta)[ja], idb = ((const int8_t *)tb)[jb];
      if (ida != idb) return report(c, xa, xb, "union type id %d != %d", ida, idb);
      int64_t k = 0;
      while (k < f->n_children && (f->type_codes ? f->type_codes[k] : k) != ida) k++;
      if (k == f->n_children || a->n_children <= k || b->n_children <= k)
        return report(c, xa, xb, "union type id %d names no child", ida);
      int64_t ca = ja, cb = jb;
      if (f->type == FSH_TYPE_DENSE_UNION) {
        const uint8_t *oa = buf_data(a, 1), *ob = buf_data(b, 1);
        if (!oa || !ob) return report(c, xa, xb, "missing union offsets buffer");
        ca = read_int(FSH_TYPE_INT32, oa, ja);
        cb = read_int(FSH_TYPE_INT32, ob, jb);
      }
      return cmp_child(c, &f->children[k], "child", a->children[k], ca, b->children[k], cb, 1,
                       true);
    }
    default: {
      int64_t w = byte_width(f);
      const uint8_t *pa = buf_data(a, 1), *pb = buf_data(b, 1);
      if (w <= 0 && f->type == FSH_TYPE_FIXED_SIZE_BINARY) return true; /* zero-width */
      if (w <= 0) return report(c, xa, xb, "cannot compare type %s", fsh_type_name(f->type));
      if (!pa || !pb) return report(c, xa, xb, "missing values buffer");
      pa += w * ja;
      pb += w * jb;
      bool eq = is_float(f->type) ? float_eq(f->type, pa, pb) : memcmp(pa, pb, (size_t)w) == 0;
      return eq ? true : report_values(c, f, a, xa, b, xb);
    }
  }
}

static bool cmp_range(cmp_ctx *c, const fsh_field *f, const fsh_array *a, int64_t ia,
                      const fsh_array *b, int64_t ib, int64_t n) {
  if (n <= 0) return true;
  if (a == b && ia == ib) return true;
  /* Fast path: fixed-width values with no nulls on either side, equal bytes. */
  int64_t w = f->dictionary ? 0 : byte_width(f);
  if (w > 0 && !buf_data(a, 0) && !buf_data(b, 0) && buf_data(a, 1) && buf_data(b, 1) &&
      memcmp(buf_data(a, 1) + w * (a->offset + ia), buf_data(b, 1) + w * (b->offset + ib),
             (size_t)(w * n)) == 0)
    return true;
  for (int64_t k = 0; k < n; k++) {
    int64_t xa = ia + k, xb = ib + k;
    if (c->depth == 0) c->top_row = xa;
    bool va = slot_valid(f, a, xa), vb = slot_valid(f, b, xb);
    if (va != vb) return report_values(c, f, a, xa, b, xb);
    if (va && !cmp_slot(c, f, a, xa, b, xb)) return false;
  }
  return true;
}

static bool array_equals(const char *kind, const fsh_field *f, const fsh_array *a,
                         const fsh_array *b, fsh_error *diff) {
  cmp_ctx c = {.diff = diff, .kind = kind, .index_kind = "child"};
  snprintf(c.path, sizeof c.path, "%s", f->name ? f->name : "");
  if (a == b) return true;
  if (!a || !b) {
    if (diff) fsh_error_set(diff, 0, "%s '%s': one array is NULL", kind, c.path);
    return false;
  }
  if (a->length != b->length) {
    if (diff)
      fsh_error_set(diff, 0, "%s '%s': length %" PRId64 " != %" PRId64, kind, c.path, a->length,
                    b->length);
    return false;
  }
  return cmp_range(&c, f, a, 0, b, 0, a->length);
}

bool fsh_array_equals(const fsh_field *f, const fsh_array *a, const fsh_array *b, fsh_error *diff) {
  return array_equals("array", f, a, b, diff);
}

/* ---- field comparison --------------------------------------------------- */

typedef struct field_ctx {
  fsh_error *diff;
  bool check_dict_ids;
  bool check_metadata;
  char path[512];
} field_ctx;

static bool field_report(field_ctx *c, const char *fmt, ...) FSH_PRINTF(2, 3);
static bool field_report(field_ctx *c, const char *fmt, ...) {
  if (!c->diff) return false;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fsh_error_set(c->diff, 0, "field '%s': %s", c->path, msg);
  return false;
}

static bool str_eq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

static bool kv_eq(const fsh_kv *a, const fsh_kv *b) {
  return strcmp(a->key, b->key) == 0 && a->value_len == b->value_len &&
         memcmp(a->value, b->value, (size_t)a->value_len) == 0;
}

/* Order-insensitive multiset equality of metadata; `what` names it. */
static bool metadata_eq(const fsh_metadata *a, const fsh_metadata *b, char *msg, size_t size) {
  if (a->n != b->n) {
    snprintf(msg, size, "metadata has %" PRId64 " entries != %" PRId64, a->n, b->n);
    return false;
  }
  if (a->n == 0) return true;
  bool used_small[64];
  bool *used = a->n <= 64 ? used_small : fsh_calloc((size_t)a->n, sizeof *used);
  if (!used) {
    snprintf(msg, size, "out of memory comparing metadata");
    return false;
  }
  memset(used, 0, (size_t)a->n * sizeof *used);
  bool eq = true;
  for (int64_t i = 0; i < a->n && eq; i++) {
    int64_t j = 0;
    while (j < b->n && (used[j] || !kv_eq(&a->items[i], &b->items[j]))) j++;
    if (j < b->n) {
      used[j] = true;
      continue;
    }
    eq = false;
    const fsh_kv *other = fsh_metadata_find(b, a->items[i].key);
    char va[96], vb[96];
    fmt_bytes((const uint8_t *)a->items[i].value, a->items[i].value_len, true, va, sizeof va);
    if (other) {
      fmt_bytes((const uint8_t *)other->value, other->value_len, true, vb, sizeof vb);
      snprintf(msg, size, "metadata '%s': %s != %s", a->items[i].key, va, vb);
    } else {
      snprintf(msg, size, "metadata key '%s' (%s) missing in second", a->items[i].key, va);
    }
  }
  if (used != used_small) fsh_free(used);
  return eq;
}

static bool field_eq(field_ctx *c, const fsh_field *a, const fsh_field *b, bool is_dict_value);

/* Type id and parameters (children compared by the caller). */
static bool type_params_eq(const fsh_field *a, const fsh_field *b) {
  if (a->type != b->type) return false;
  switch (a->type) {
    case FSH_TYPE_FIXED_SIZE_BINARY: return a->byte_width == b->byte_width;
    case FSH_TYPE_FIXED_SIZE_LIST: return a->list_size == b->list_size;
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256:
      return a->precision == b->precision && a->scale == b->scale;
    case FSH_TYPE_TIME32: case FSH_TYPE_TIME64: case FSH_TYPE_DURATION: return a->unit == b->unit;
    case FSH_TYPE_TIMESTAMP: return a->unit == b->unit && str_eq(a->timezone, b->timezone);
    case FSH_TYPE_MAP: return a->keys_sorted == b->keys_sorted;
    default: return true;
  }
}

/* Compares type, parameters and children; the dictionary value type goes
 * through here with is_dict_value (its name, nullability, metadata unused). */
static bool field_eq(field_ctx *c, const fsh_field *a, const fsh_field *b, bool is_dict_value) {
  if (!is_dict_value) {
    if (!str_eq(a->name, b->name))
      return field_report(c, "name '%s' != '%s'", a->name ? a->name : "", b->name ? b->name : "");
    if (a->nullable != b->nullable)
      return field_report(c, "nullable %s != %s", a->nullable ? "true" : "false",
                          b->nullable ? "true" : "false");
  }
  if ((a->dictionary != NULL) != (b->dictionary != NULL))
    return field_report(c, "%s dictionary-encoded", a->dictionary ? "only first is" : "only second is");
  if (a->dictionary) {
    if (a->type != b->type)
      return field_report(c, "dictionary index type %s != %s", fsh_type_name(a->type),
                          fsh_type_name(b->type));
    if (a->dictionary->ordered != b->dictionary->ordered)
      return field_report(c, "dictionary ordered %s != %s", a->dictionary->ordered ? "true" : "false",
                          b->dictionary->ordered ? "true" : "false");
    if (c->check_dict_ids && a->dictionary->id != b->dictionary->id)
      return field_report(c, "dictionary id %" PRId64 " != %" PRId64, a->dictionary->id,
                          b->dictionary->id);
    if (!field_eq(c, &a->dictionary->value, &b->dictionary->value, true)) return false;
  } else if (!type_params_eq(a, b)) {
    char ta[256], tb[256];
    fsh_field_type_to_string(a, ta, sizeof ta);
    fsh_field_type_to_string(b, tb, sizeof tb);
    return field_report(c, "type %s != %s", ta, tb);
  }
  if (a->n_children != b->n_children)
    return field_report(c, "%" PRId64 " children != %" PRId64, a->n_children, b->n_children);
  if (!a->dictionary && fsh_type_is_union(a->type)) {
    for (int64_t k = 0; k < a->n_children; k++) {
      int32_t ca = a->type_codes ? a->type_codes[k] : (int32_t)k;
      int32_t cb = b->type_codes ? b->type_codes[k] : (int32_t)k;
      if (ca != cb)
        return field_report(c, "union type code of child %" PRId64 ": %d != %d", k, ca, cb);
    }
  }
  if (c->check_metadata && !is_dict_value) {
    char msg[512];
    if (!metadata_eq(&a->metadata, &b->metadata, msg, sizeof msg))
      return field_report(c, "%s", msg);
  }
  for (int64_t k = 0; k < a->n_children; k++) {
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof c->path - len, "%s%s", len ? "." : "",
             a->children[k].name ? a->children[k].name : "");
    bool eq = field_eq(c, &a->children[k], &b->children[k], false);
    c->path[len] = '\0';
    if (!eq) return false;
  }
  return true;
}

static bool field_equals(const fsh_field *a, const fsh_field *b, bool check_dict_ids,
                         bool check_metadata, fsh_error *diff) {
  field_ctx c = {.diff = diff, .check_dict_ids = check_dict_ids, .check_metadata = check_metadata};
  snprintf(c.path, sizeof c.path, "%s", a->name ? a->name : "");
  return field_eq(&c, a, b, false);
}

bool fsh_field_equals(const fsh_field *a, const fsh_field *b, bool check_dict_ids, fsh_error *diff) {
  return field_equals(a, b, check_dict_ids, true, diff);
}

bool fsh_field_type_equals(const fsh_field *a, const fsh_field *b, fsh_error *diff) {
  field_ctx c = {.diff = diff};
  snprintf(c.path, sizeof c.path, "%s", a->name ? a->name : "");
  return field_eq(&c, a, b, true); /* as a dictionary value: name, nullability, metadata aside */
}

/* With check_metadata false, neither the schema's nor the fields' metadata
 * is compared. Dictionary ids are not compared. */
bool fsh_schema_equals(const fsh_schema *a, const fsh_schema *b, bool check_metadata,
                       fsh_error *diff) {
  if (a == b) return true;
  if (!a || !b) {
    if (diff) fsh_error_set(diff, 0, "schema: one schema is NULL");
    return false;
  }
  if (a->n_fields != b->n_fields) {
    if (diff)
      fsh_error_set(diff, 0, "schema: %" PRId64 " fields != %" PRId64, a->n_fields, b->n_fields);
    return false;
  }
  for (int64_t i = 0; i < a->n_fields; i++) {
    if (!field_equals(&a->fields[i], &b->fields[i], false, check_metadata, diff)) {
      if (diff) fsh_error_prefix(diff, 0, "schema field %" PRId64 ": ", i);
      return false;
    }
  }
  if (check_metadata) {
    char msg[512];
    if (!metadata_eq(&a->metadata, &b->metadata, msg, sizeof msg)) {
      if (diff) fsh_error_set(diff, 0, "schema: %s", msg);
      return false;
    }
  }
  return true;
}

/* Schemas (metadata included, dictionary ids not), lengths, then columns. */
bool fsh_batch_equals(const fsh_batch *a, const fsh_batch *b, fsh_error *diff) {
  if (a == b) return true;
  if (!a || !b) {
    if (diff) fsh_error_set(diff, 0, "batch: one batch is NULL");
    return false;
  }
  if (!fsh_schema_equals(a->schema, b->schema, true, diff)) return false;
  if (a->length != b->length) {
    if (diff)
      fsh_error_set(diff, 0, "batch: length %" PRId64 " != %" PRId64, a->length, b->length);
    return false;
  }
  for (int64_t i = 0; i < a->n_columns; i++)
    if (!array_equals("column", &a->schema->fields[i], a->columns[i], b->columns[i], diff))
      return false;
  return true;
}
