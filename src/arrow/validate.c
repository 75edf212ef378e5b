/* validate.c -- full validation of arrays and record batches against their
 * fields, per the Arrow columnar format: buffer counts and sizes, null
 * counts, offsets, child lengths, union type ids and offsets, dictionary
 * indices and (optionally) the UTF-8 of string values.
 *
 * Validation never trusts a length, offset or buffer before checking it, so
 * it is safe to run on arrays decoded from untrusted IPC input: once it
 * returns 0, every offset, index and child reference read through the
 * array's field stays inside the buffers. It reads but never modifies the
 * array (an unknown null count is computed, not cached). */
#include <flightshuffle/arrow.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Fields nest at most this deep: recursion is bounded for hostile input. */
#define MAX_DEPTH 64
/* Room for a field path ("a.b[0].c"); longer paths are truncated. */
#define PATH_SIZE 256

typedef struct vctx {
  bool check_utf8;
  fsh_error *err;
} vctx;

/* One node under validation: its field, array and printable path. */
typedef struct vnode {
  const fsh_field *f;
  const fsh_array *a;
  const char *path;
  int64_t end; /* offset + length, checked not to overflow */
} vnode;

/* "field 'path' (type): <detail>" with EINVAL. The type is the plain type
 * name, or dictionary<index type> for dictionary-encoded fields. */
static int fail(const vctx *c, const vnode *n, const char *fmt, ...) FSH_PRINTF(3, 4);
static int fail(const vctx *c, const vnode *n, const char *fmt, ...) {
  if (!c->err) return EINVAL;
  char detail[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  char type[64];
  if (n->f->dictionary)
    snprintf(type, sizeof type, "dictionary<%s>", fsh_type_name(n->f->type));
  else
    snprintf(type, sizeof type, "%s", fsh_type_name(n->f->type));
  return fsh_error_set(c->err, EINVAL, "field '%s' (%s): %s", n->path, type, detail);
}

/* ---- reading values without alignment assumptions ---------------------- */

static const uint8_t *buf_data(const fsh_buffer *b) { return b ? b->data : NULL; }
static int64_t buf_size(const fsh_buffer *b) { return b ? b->size : 0; }

static int64_t read_i32(const uint8_t *p, int64_t i) {
  int32_t v;
  memcpy(&v, p + i * 4, 4);
  return v;
}
static int64_t read_i64(const uint8_t *p, int64_t i) {
  int64_t v;
  memcpy(&v, p + i * 8, 8);
  return v;
}

/* Reads integer index i of an integer-typed buffer as int64; unsigned 64-bit
 * values above INT64_MAX come back as -1 (out of range for any dictionary). */
static int64_t read_index(fsh_type_id t, const uint8_t *p, int64_t i) {
  switch (t) {
    case FSH_TYPE_INT8: return (int8_t)p[i];
    case FSH_TYPE_UINT8: return p[i];
    case FSH_TYPE_INT16: { int16_t v; memcpy(&v, p + i * 2, 2); return v; }
    case FSH_TYPE_UINT16: { uint16_t v; memcpy(&v, p + i * 2, 2); return v; }
    case FSH_TYPE_INT32: return read_i32(p, i);
    case FSH_TYPE_UINT32: { uint32_t v; memcpy(&v, p + i * 4, 4); return v; }
    case FSH_TYPE_INT64: return read_i64(p, i);
    case FSH_TYPE_UINT64: {
      uint64_t v;
      memcpy(&v, p + i * 8, 8);
      return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
    }
    default: return -1;
  }
}

/* ---- UTF-8 ------------------------------------------------------------- */

/* Checks s[0, n) is well-formed UTF-8 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF, no truncated sequence). Returns -1 when
 * valid, else the byte position of the first bad sequence, with *why set. */
static int64_t utf8_check(const uint8_t *s, int64_t n, const char **why) {
  int64_t i = 0;
  while (i < n) {
    /* ASCII fast path, eight bytes at a time. */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    uint8_t b = s[i];
    if (b < 0x80) {
      i++;
      continue;
    }
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0; /* below: overlong */
      if (b == 0xED) hi = 0x9F; /* above: UTF-16 surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90; /* below: overlong */
      if (b == 0xF4) hi = 0x8F; /* above: beyond U+10FFFF */
    } else {
      *why = b >= 0x80 && b <= 0xBF ? "unexpected continuation byte"
             : b <= 0xC1            ? "overlong encoding"
                                    : "byte above U+10FFFF range";
      return i;
    }
    if (i + len > n) {
      *why = "truncated sequence";
      return i;
    }
    uint8_t b1 = s[i + 1];
    if (b1 < lo || b1 > hi) {
      if (b1 < 0x80 || b1 > 0xBF)
        *why = "truncated sequence";
      else if (b == 0xED)
        *why = "UTF-16 surrogate";
      else if (b == 0xF4)
        *why = "code point above U+10FFFF";
      else
        *why = "overlong encoding";
      return i;
    }
    for (int k = 2; k < len; k++) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) {
        *why = "truncated sequence";
        return i;
      }
    }
    i += len;
  }
  return -1;
}

/* ---- layout facts ------------------------------------------------------ */



static bool is_nested(fsh_type_id t) {
  return t == FSH_TYPE_LIST || t == FSH_TYPE_LARGE_LIST || t == FSH_TYPE_FIXED_SIZE_LIST ||
         t == FSH_TYPE_STRUCT || t == FSH_TYPE_MAP || fsh_type_is_union(t);
}

/* Buffer i must hold at least `needed` bytes. A NULL buffer counts as empty. */
static int check_buffer_size(const vctx *c, const vnode *n, int i, const char *what,
                             int64_t needed) {
  const fsh_buffer *b = n->a->buffers[i];
  if (needed <= 0) return 0;
  if (!b) return fail(c, n, "buffer %d (%s) is missing but %lld bytes are needed", i, what,
                      (long long)needed);
  if (b->size < needed || !b->data)
    return fail(c, n, "buffer %d (%s) has %lld bytes but offset %lld + length %lld needs %lld", i,
                what, (long long)b->size, (long long)n->a->offset, (long long)n->a->length,
                (long long)needed);
  return 0;
}

/* Same for buffers read only at rows [offset, offset + length): an empty
 * array needs none of their bytes, whatever its offset (as Arrow C++). */
static int check_buffer(const vctx *c, const vnode *n, int i, const char *what, int64_t needed) {
  return n->a->length == 0 ? 0 : check_buffer_size(c, n, i, what, needed);
}

/* needed = count * width bytes, or an error on overflow. */
static int bytes_needed(const vctx *c, const vnode *n, const char *what, int64_t count,
                        int64_t width, int64_t *needed) {
  if (__builtin_mul_overflow(count, width, needed))
    return fail(c, n, "%s size overflows: %lld x %lld bytes", what, (long long)count,
                (long long)width);
  return 0;
}

/* ---- per-layout checks ------------------------------------------------- */

/* Checks the offsets buffer (buffers[1], 4 or 8 bytes per entry) of a
 * variable-size layout: length+1 entries from `offset`, first >= 0, non
 * decreasing, last <= limit. Returns the first and last offsets in *first
 * and *last. An empty array may have an empty offsets buffer; a non-empty
 * buffer must hold its offset+1 entries even for length 0 (as Arrow C++). */
static int check_offsets(const vctx *c, const vnode *n, int width, int64_t limit,
                         const char *limit_what, int64_t *first, int64_t *last) {
  const fsh_array *a = n->a;
  *first = *last = 0;
  if (a->length == 0 && buf_size(a->buffers[1]) == 0) return 0;
  int64_t needed;
  FSH_RETURN_NOT_OK(bytes_needed(c, n, "offsets buffer", n->end + 1, width, &needed));
  FSH_RETURN_NOT_OK(check_buffer_size(c, n, 1, "offsets", needed));
  const uint8_t *p = a->buffers[1]->data;
  int64_t prev = width == 4 ? read_i32(p, a->offset) : read_i64(p, a->offset);
  if (prev < 0) return fail(c, n, "offset[0] = %lld is negative", (long long)prev);
  *first = prev;
  for (int64_t i = 1; i <= a->length; i++) {
    int64_t o = width == 4 ? read_i32(p, a->offset + i) : read_i64(p, a->offset + i);
    if (o < prev)
      return fail(c, n, "offset[%lld] = %lld < offset[%lld] = %lld (offsets must not decrease)",
                  (long long)i, (long long)o, (long long)(i - 1), (long long)prev);
    prev = o;
  }
  *last = prev;
  if (prev > limit)
    return fail(c, n, "offset[%lld] = %lld is beyond the end of the %s (%lld)",
                (long long)a->length, (long long)prev, limit_what, (long long)limit);
  return 0;
}

static int check_binary(const vctx *c, const vnode *n, int width) {
  const fsh_array *a = n->a;
  int64_t first, last;
  int64_t data_size = buf_size(a->buffers[2]);
  FSH_RETURN_NOT_OK(check_offsets(c, n, width, data_size, "data buffer", &first, &last));
  if (last > first && !buf_data(a->buffers[2]))
    return fail(c, n, "buffer 2 (data) has no memory but %lld bytes are referenced",
                (long long)last);
  bool is_string = n->f->type == FSH_TYPE_STRING || n->f->type == FSH_TYPE_LARGE_STRING;
  if (!is_string || !c->check_utf8 || last == first) return 0;
  const uint8_t *off = a->buffers[1]->data, *data = a->buffers[2]->data;
  const fsh_buffer *validity = a->buffers[0];
  for (int64_t i = 0; i < a->length; i++) {
    if (validity && !fsh_bit_get(validity->data, a->offset + i)) continue;
    int64_t s = width == 4 ? read_i32(off, a->offset + i) : read_i64(off, a->offset + i);
    int64_t e = width == 4 ? read_i32(off, a->offset + i + 1) : read_i64(off, a->offset + i + 1);
    const char *why = "";
    int64_t at = utf8_check(data + s, e - s, &why);
    if (at >= 0)
      return fail(c, n, "invalid UTF-8 at row %lld (%s at byte %lld of %lld: 0x%02x)",
                  (long long)i, why, (long long)at, (long long)(e - s), data[s + at]);
  }
  return 0;
}

/* Maps union type codes to child indices (-1 = not a code of this union);
 * also checks the field's codes are in [0, 127] and distinct. A field
 * without type_codes uses 0 .. n_children-1. */
static int union_code_map(const vctx *c, const vnode *n, int8_t map[128]) {
  const fsh_field *f = n->f;
  memset(map, -1, 128);
  if (f->n_children > 128)
    return fail(c, n, "%lld children, a union has at most 128", (long long)f->n_children);
  for (int64_t k = 0; k < f->n_children; k++) {
    int32_t code = f->type_codes ? f->type_codes[k] : (int32_t)k;
    if (code < 0 || code > 127)
      return fail(c, n, "type code %d of child %lld is outside [0, 127]", code, (long long)k);
    if (map[code] >= 0)
      return fail(c, n, "type code %d is used by children %d and %lld", code, map[code],
                  (long long)k);
    map[code] = (int8_t)k;
  }
  return 0;
}

static int check_union(const vctx *c, const vnode *n) {
  const fsh_array *a = n->a;
  int8_t map[128];
  FSH_RETURN_NOT_OK(union_code_map(c, n, map));
  FSH_RETURN_NOT_OK(check_buffer(c, n, 0, "type ids", n->end));
  bool dense = n->f->type == FSH_TYPE_DENSE_UNION;
  if (dense) {
    int64_t needed;
    FSH_RETURN_NOT_OK(bytes_needed(c, n, "offsets buffer", n->end, 4, &needed));
    FSH_RETURN_NOT_OK(check_buffer(c, n, 1, "offsets", needed));
  } else {
    for (int64_t k = 0; k < a->n_children; k++)
      if (a->children[k]->length < n->end)
        return fail(c, n, "child %lld ('%s') has length %lld, less than offset %lld + length %lld",
                    (long long)k, n->f->children[k].name, (long long)a->children[k]->length,
                    (long long)a->offset, (long long)a->length);
  }
  const uint8_t *ids = buf_data(a->buffers[0]);
  const uint8_t *offs = dense ? buf_data(a->buffers[1]) : NULL;
  for (int64_t i = 0; i < a->length; i++) {
    int8_t id = (int8_t)ids[a->offset + i];
    if (id < 0 || map[id] < 0)
      return fail(c, n, "type id %d at row %lld is not one of the union's type codes", id,
                  (long long)i);
    if (!dense) continue;
    int64_t o = read_i32(offs, a->offset + i);
    const fsh_array *child = a->children[map[id]];
    if (o < 0 || o >= child->length)
      return fail(c, n,
                  "offset %lld at row %lld is out of range for child %d ('%s') of length %lld",
                  (long long)o, (long long)i, map[id], n->f->children[map[id]].name,
                  (long long)child->length);
  }
  return 0;
}

/* Every non-null index must be in [0, dictionary length). */
static int check_dictionary_indices(const vctx *c, const vnode *n) {
  const fsh_array *a = n->a;
  int64_t dict_len = a->dictionary->length;
  const uint8_t *idx = buf_data(a->buffers[1]);
  const fsh_buffer *validity = a->buffers[0];
  for (int64_t i = 0; i < a->length; i++) {
    if (validity && !fsh_bit_get(validity->data, a->offset + i)) continue;
    int64_t v = read_index(n->f->type, idx, a->offset + i);
    if (v < 0 || v >= dict_len) {
      if (n->f->type == FSH_TYPE_UINT64 && v < 0)
        return fail(c, n, "index above INT64_MAX at row %lld out of range for dictionary of length %lld",
                    (long long)i, (long long)dict_len);
      return fail(c, n, "index %lld at row %lld out of range for dictionary of length %lld",
                  (long long)v, (long long)i, (long long)dict_len);
    }
  }
  return 0;
}

/* Map keys may not be null: no null among entries [first, last) of the
 * entries struct, whose own offset applies to its key child too. */
static int check_map_keys(const vctx *c, const vnode *n, int64_t first, int64_t last) {
  const fsh_array *entries = n->a->children[0];
  const fsh_array *keys = entries->children[0];
  if (last <= first || keys->n_buffers == 0) {
    if (last > first) return fail(c, n, "map keys are null (key type is null)");
    return 0;
  }
  const fsh_buffer *validity = keys->buffers[0];
  if (!validity || fsh_type_is_union(n->f->children[0].children[0].type)) return 0;
  for (int64_t i = first; i < last; i++)
    if (!fsh_bit_get(validity->data, keys->offset + entries->offset + i))
      return fail(c, n, "key at entry %lld is null (map keys must not be null)", (long long)i);
  return 0;
}

/* ---- the recursive walk ------------------------------------------------ */

static int validate_node(const vctx *c, const fsh_field *f, const fsh_array *a, const char *path,
                         int depth);

/* Path of child k: "parent.name", or "parent[k]" when the name is empty. */
static void child_path(char *out, const char *parent, const fsh_field *child, int64_t k) {
  if (child->name && child->name[0])
    snprintf(out, PATH_SIZE, "%s.%s", parent, child->name);
  else
    snprintf(out, PATH_SIZE, "%s[%lld]", parent, (long long)k);
}

/* The field's own shape: type id in range, child counts and parameters the
 * layout depends on. */
static int check_field_shape(const vctx *c, const vnode *n) {
  const fsh_field *f = n->f;
  if ((unsigned)f->type >= FSH_TYPE_COUNT_)
    return fail(c, n, "invalid type id %d", (int)f->type);
  if (f->n_children < 0 || (f->n_children > 0 && !f->children))
    return fail(c, n, "field has a bad child list (%lld children)", (long long)f->n_children);
  switch (f->type) {
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_FIXED_SIZE_LIST:
    case FSH_TYPE_MAP:
      if (f->n_children != 1)
        return fail(c, n, "field has %lld children, expected 1", (long long)f->n_children);
      break;
    case FSH_TYPE_STRUCT: case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: break;
    default:
      if (f->n_children != 0)
        return fail(c, n, "field has %lld children, expected none", (long long)f->n_children);
  }
  if (f->type == FSH_TYPE_MAP) {
    const fsh_field *e = &f->children[0];
    if (e->type != FSH_TYPE_STRUCT || e->dictionary || e->n_children != 2)
      return fail(c, n, "map entries must be a struct of exactly 2 fields (key, value)");
  }
  if (f->type == FSH_TYPE_FIXED_SIZE_BINARY && f->byte_width < 0)
    return fail(c, n, "negative byte width %d", f->byte_width);
  if (f->type == FSH_TYPE_FIXED_SIZE_LIST && f->list_size < 0)
    return fail(c, n, "negative list size %d", f->list_size);
  if (f->dictionary && !fsh_type_is_integer(f->type))
    return fail(c, n, "dictionary index type must be an integer type");
  return 0;
}

/* Length, offset, buffer count, children and dictionary presence. */
static int check_array_shape(const vctx *c, vnode *n) {
  const fsh_array *a = n->a;
  const fsh_field *f = n->f;
  if (a->length < 0) return fail(c, n, "negative length %lld", (long long)a->length);
  if (a->offset < 0) return fail(c, n, "negative offset %lld", (long long)a->offset);
  if (__builtin_add_overflow(a->offset, a->length, &n->end))
    return fail(c, n, "offset %lld + length %lld overflows", (long long)a->offset,
                (long long)a->length);
  if (a->null_count < -1 || a->null_count > a->length)
    return fail(c, n, "null count %lld is outside [0, length %lld]", (long long)a->null_count,
                (long long)a->length);
  int want = fsh_type_n_buffers(f->type);
  if (a->n_buffers != want)
    return fail(c, n, "%d buffers, expected %d", (int)a->n_buffers, want);
  for (int i = 0; i < a->n_buffers; i++)
    if (a->buffers[i] && a->buffers[i]->size < 0)
      return fail(c, n, "buffer %d has negative size", i);
  int64_t want_children = is_nested(f->type) ? f->n_children : 0;
  if (a->n_children != want_children)
    return fail(c, n, "%lld child arrays, expected %lld", (long long)a->n_children,
                (long long)want_children);
  for (int64_t k = 0; k < a->n_children; k++)
    if (!a->children || !a->children[k])
      return fail(c, n, "child array %lld is missing", (long long)k);
  if (f->dictionary && !a->dictionary)
    return fail(c, n, "dictionary-encoded but the array has no dictionary");
  if (!f->dictionary && a->dictionary)
    return fail(c, n, "array has a dictionary but the field is not dictionary-encoded");
  return 0;
}

/* Validity bitmap vs null count. Null type: null count is the length;
 * unions: no validity, null count 0. */
static int check_nulls(const vctx *c, const vnode *n) {
  const fsh_array *a = n->a;
  fsh_type_id t = n->f->type;
  if (t == FSH_TYPE_NA) {
    if (a->null_count != -1 && a->null_count != a->length)
      return fail(c, n, "null count %lld, but every slot of a null array is null (length %lld)",
                  (long long)a->null_count, (long long)a->length);
    return 0;
  }
  if (fsh_type_is_union(t)) {
    if (a->null_count != 0)
      return fail(c, n, "null count %lld, but unions have no validity (must be 0)",
                  (long long)a->null_count);
    return 0;
  }
  const fsh_buffer *validity = a->buffers[0];
  if (!validity) {
    if (a->null_count > 0)
      return fail(c, n, "null count %lld without a validity bitmap", (long long)a->null_count);
    return 0;
  }
  FSH_RETURN_NOT_OK(check_buffer(c, n, 0, "validity", fsh_bytes_for_bits(n->end)));
  if (a->length == 0) return 0;
  int64_t nulls = a->length - fsh_bitmap_count(validity->data, a->offset, a->length);
  if (a->null_count != -1 && a->null_count != nulls)
    return fail(c, n, "null count %lld, but the validity bitmap has %lld nulls",
                (long long)a->null_count, (long long)nulls);
  return 0;
}

/* Buffers, offsets and child lengths of the node's own layout. For lists
 * and maps, *first and *last receive the referenced child range. */
static int check_layout(const vctx *c, const vnode *n, int64_t *first, int64_t *last) {
  const fsh_array *a = n->a;
  const fsh_field *f = n->f;
  int64_t needed;
  *first = *last = 0;
  switch (f->type) {
    case FSH_TYPE_NA: return 0;
    case FSH_TYPE_BOOL: return check_buffer(c, n, 1, "values", fsh_bytes_for_bits(n->end));
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: return check_binary(c, n, 4);
    case FSH_TYPE_LARGE_BINARY: case FSH_TYPE_LARGE_STRING: return check_binary(c, n, 8);
    case FSH_TYPE_LIST: case FSH_TYPE_MAP: case FSH_TYPE_LARGE_LIST:
      return check_offsets(c, n, f->type == FSH_TYPE_LARGE_LIST ? 8 : 4, a->children[0]->length,
                           "child array", first, last);
    case FSH_TYPE_FIXED_SIZE_LIST:
      FSH_RETURN_NOT_OK(bytes_needed(c, n, "child", n->end, f->list_size, &needed));
      if (a->children[0]->length < needed)
        return fail(c, n,
                    "child has length %lld, but offset %lld + length %lld with list size %d "
                    "needs %lld",
                    (long long)a->children[0]->length, (long long)a->offset,
                    (long long)a->length, f->list_size, (long long)needed);
      return 0;
    case FSH_TYPE_STRUCT:
      for (int64_t k = 0; k < a->n_children; k++)
        if (a->children[k]->length < n->end)
          return fail(c, n,
                      "child %lld ('%s') has length %lld, less than offset %lld + length %lld",
                      (long long)k, f->children[k].name, (long long)a->children[k]->length,
                      (long long)a->offset, (long long)a->length);
      return 0;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: return check_union(c, n);
    default:
      FSH_RETURN_NOT_OK(bytes_needed(c, n, "values buffer", n->end, fsh_type_bit_width(f) / 8, &needed));
      return check_buffer(c, n, 1, "values", needed);
  }
}

static int validate_node(const vctx *c, const fsh_field *f, const fsh_array *a, const char *path,
                         int depth) {
  vnode n = {f, a, path, 0};
  if (depth > MAX_DEPTH) return fail(c, &n, "nested more than %d levels deep", MAX_DEPTH);
  FSH_RETURN_NOT_OK(check_field_shape(c, &n));
  FSH_RETURN_NOT_OK(check_array_shape(c, &n));
  FSH_RETURN_NOT_OK(check_nulls(c, &n));
  /* Children first: the layout checks below trust their lengths. */
  char sub[PATH_SIZE];
  for (int64_t k = 0; k < a->n_children; k++) {
    child_path(sub, path, &f->children[k], k);
    FSH_RETURN_NOT_OK(validate_node(c, &f->children[k], a->children[k], sub, depth + 1));
  }
  int64_t first, last;
  FSH_RETURN_NOT_OK(check_layout(c, &n, &first, &last));
  if (f->type == FSH_TYPE_MAP) FSH_RETURN_NOT_OK(check_map_keys(c, &n, first, last));
  if (f->dictionary) {
    snprintf(sub, sizeof sub, "%s[dictionary]", path);
    FSH_RETURN_NOT_OK(validate_node(c, &f->dictionary->value, a->dictionary, sub, depth + 1));
    FSH_RETURN_NOT_OK(check_dictionary_indices(c, &n));
  }
  return 0;
}

int fsh_array_validate(const fsh_field *f, const fsh_array *a, bool check_utf8, fsh_error *err) {
  if (!f || !a) return fsh_error_set(err, EINVAL, "validate: NULL field or array");
  vctx c = {check_utf8, err};
  return validate_node(&c, f, a, f->name ? f->name : "", 0);
}

int fsh_batch_validate(const fsh_batch *b, bool check_utf8, fsh_error *err) {
  if (!b || !b->schema) return fsh_error_set(err, EINVAL, "validate: NULL batch or schema");
  if (b->length < 0)
    return fsh_error_set(err, EINVAL, "batch: negative length %lld", (long long)b->length);
  if (b->n_columns != b->schema->n_fields)
    return fsh_error_set(err, EINVAL, "batch: %lld columns but the schema has %lld fields",
                         (long long)b->n_columns, (long long)b->schema->n_fields);
  for (int64_t i = 0; i < b->n_columns; i++) {
    const fsh_field *f = &b->schema->fields[i];
    const fsh_array *col = b->columns[i];
    if (!col)
      return fsh_error_set(err, EINVAL, "batch: column %lld ('%s') is missing", (long long)i,
                           f->name);
    if (col->length != b->length)
      return fsh_error_set(err, EINVAL, "batch: column %lld ('%s') has length %lld, batch has %lld",
                           (long long)i, f->name, (long long)col->length, (long long)b->length);
    FSH_RETURN_NOT_OK(fsh_array_validate(f, col, check_utf8, err));
  }
  return 0;
}
