/* concat.c -- concatenation of two arrays of one field's type, for delta
 * dictionary batches (new values appended to an existing dictionary). Any
 * type, nested ones included; offsets and slicing of the inputs are
 * honoured; the result is a fresh array with offset 0. */
#include "ipc/read_internal.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

typedef struct part {
  fsh_array *a; /* borrowed */
  int64_t off, len;
} part;

static void copy_bits(uint8_t *dst, int64_t dst_off, const uint8_t *src, int64_t src_off,
                      int64_t n) {
  for (int64_t i = 0; i < n; i++) fsh_bit_set(dst, dst_off + i, fsh_bit_get(src, src_off + i));
}

static int oom(fsh_error *err) {
  return fsh_error_set(err, ENOMEM, "out of memory concatenating a dictionary delta");
}

/* Validity of the concatenation (NULL when neither part has nulls). */
static int concat_validity(const part p[2], fsh_array *r, fsh_error *err) {
  int64_t nulls = 0;
  for (int i = 0; i < 2; i++) nulls += fsh_array_null_count(p[i].a);
  r->null_count = nulls;
  if (nulls == 0) return 0;
  fsh_buffer *v = fsh_buffer_new(fsh_bytes_for_bits(r->length), true);
  if (!v) return oom(err);
  int64_t at = 0;
  for (int i = 0; i < 2; i++) {
    const fsh_buffer *src = p[i].a->buffers[0];
    if (src)
      copy_bits(v->data, at, src->data, p[i].off, p[i].len);
    else
      for (int64_t j = 0; j < p[i].len; j++) fsh_bit_set(v->data, at + j, true);
    at += p[i].len;
  }
  r->buffers[0] = v;
  return 0;
}

/* Fixed-width values (bits per value; bool when 1). */
static int concat_values(const part p[2], int64_t bits, int buf, fsh_array *r, fsh_error *err) {
  fsh_buffer *v = fsh_buffer_new(fsh_bytes_for_bits(r->length * bits), true);
  if (!v) return oom(err);
  int64_t at = 0;
  for (int i = 0; i < 2; i++) {
    const uint8_t *src = p[i].a->buffers[buf]->data;
    if (bits == 1)
      copy_bits(v->data, at, src, p[i].off, p[i].len);
    else if (p[i].len > 0)
      memcpy(v->data + at * bits / 8, src + p[i].off * bits / 8, (size_t)(p[i].len * bits / 8));
    at += p[i].len;
  }
  r->buffers[buf] = v;
  return 0;
}

static int64_t load_offset(const uint8_t *p, int w, int64_t i) {
  if (w == 4) {
    int32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, p + 8 * i, 8);
  return v;
}

static void store_offset(uint8_t *p, int w, int64_t i, int64_t v) {
  if (w == 4) {
    int32_t x = (int32_t)v;
    memcpy(p + 4 * i, &x, 4);
  } else {
    memcpy(p + 8 * i, &v, 8);
  }
}

/* Rebased offsets; ranges[i] gets the [first, last) each part covers. */
static int concat_offsets(const part p[2], int w, fsh_array *r, int64_t ranges[2][2],
                          fsh_error *err) {
  fsh_buffer *o = fsh_buffer_new((r->length + 1) * w, true);
  if (!o) return oom(err);
  int64_t at = 0, base = 0;
  for (int i = 0; i < 2; i++) {
    const uint8_t *src = p[i].a->buffers[1]->data;
    int64_t first = load_offset(src, w, p[i].off);
    for (int64_t j = 0; j < p[i].len; j++)
      store_offset(o->data, w, at + j, base + load_offset(src, w, p[i].off + j) - first);
    int64_t last = load_offset(src, w, p[i].off + p[i].len);
    ranges[i][0] = first;
    ranges[i][1] = last;
    base += last - first;
    at += p[i].len;
  }
  if (w == 4 && base > INT32_MAX) {
    fsh_buffer_unref(o);
    return fsh_error_set(err, EOVERFLOW, "dictionary delta overflows 32-bit offsets");
  }
  store_offset(o->data, w, at, base);
  r->buffers[1] = o;
  return 0;
}

static int concat_parts(const fsh_field *f, const part p[2], fsh_array **out, fsh_error *err);

/* Child k of the result: the parts' children over the given ranges. */
static int concat_child(const fsh_field *cf, const part p[2], int64_t k, int64_t ranges[2][2],
                        fsh_array *r, fsh_error *err) {
  part cp[2];
  for (int i = 0; i < 2; i++)
    cp[i] = (part){p[i].a->children[k], p[i].a->children[k]->offset + ranges[i][0],
                   ranges[i][1] - ranges[i][0]};
  return concat_parts(cf, cp, &r->children[k], err);
}

static int concat_binary(const part p[2], int w, fsh_array *r, fsh_error *err) {
  int64_t ranges[2][2];
  FSH_RETURN_NOT_OK(concat_offsets(p, w, r, ranges, err));
  fsh_buffer *d = fsh_buffer_new(ranges[0][1] - ranges[0][0] + ranges[1][1] - ranges[1][0], true);
  if (!d) return oom(err);
  int64_t at = 0;
  for (int i = 0; i < 2; i++) {
    int64_t n = ranges[i][1] - ranges[i][0];
    if (n > 0) memcpy(d->data + at, p[i].a->buffers[2]->data + ranges[i][0], (size_t)n);
    at += n;
  }
  r->buffers[2] = d;
  return 0;
}

/* Dense union: type ids copied, the second part's offsets shifted past the
 * first part's children, which are concatenated whole. */
static int concat_dense_union(const fsh_field *f, const part p[2], fsh_array *r, fsh_error *err) {
  FSH_RETURN_NOT_OK(concat_values(p, 8, 0, r, err));
  FSH_RETURN_NOT_OK(concat_values(p, 32, 1, r, err));
  int32_t *offs = (int32_t *)r->buffers[1]->data;
  const int8_t *ids = (const int8_t *)r->buffers[0]->data;
  for (int64_t j = p[0].len; j < r->length; j++) {
    int64_t k = 0;
    while (k < f->n_children && f->type_codes[k] != ids[j]) k++;
    if (k == f->n_children) return fsh_error_set(err, EINVAL, "bad union type id %d", ids[j]);
    int64_t shifted = (int64_t)offs[j] + p[0].a->children[k]->length;
    if (shifted > INT32_MAX)
      return fsh_error_set(err, EOVERFLOW, "dictionary delta overflows dense union offsets");
    offs[j] = (int32_t)shifted;
  }
  for (int64_t k = 0; k < f->n_children; k++) {
    int64_t ranges[2][2] = {{0, p[0].a->children[k]->length}, {0, p[1].a->children[k]->length}};
    FSH_RETURN_NOT_OK(concat_child(&f->children[k], p, k, ranges, r, err));
  }
  return 0;
}

/* Fills r (sized for f) from the two parts. */
static int concat_layout(const fsh_field *f, const part p[2], fsh_array *r, fsh_error *err) {
  int64_t ranges[2][2] = {{p[0].off, p[0].off + p[0].len}, {p[1].off, p[1].off + p[1].len}};
  switch (f->type) {
    case FSH_TYPE_NA: r->null_count = r->length; return 0;
    case FSH_TYPE_DENSE_UNION: r->null_count = 0; return concat_dense_union(f, p, r, err);
    case FSH_TYPE_SPARSE_UNION:
      r->null_count = 0;
      FSH_RETURN_NOT_OK(concat_values(p, 8, 0, r, err));
      for (int64_t k = 0; k < f->n_children; k++)
        FSH_RETURN_NOT_OK(concat_child(&f->children[k], p, k, ranges, r, err));
      return 0;
    default: break;
  }
  FSH_RETURN_NOT_OK(concat_validity(p, r, err));
  switch (f->type) {
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: return concat_binary(p, 4, r, err);
    case FSH_TYPE_LARGE_BINARY: case FSH_TYPE_LARGE_STRING: return concat_binary(p, 8, r, err);
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      FSH_RETURN_NOT_OK(concat_offsets(p, f->type == FSH_TYPE_LARGE_LIST ? 8 : 4, r, ranges, err));
      return concat_child(&f->children[0], p, 0, ranges, r, err);
    case FSH_TYPE_FIXED_SIZE_LIST:
      for (int i = 0; i < 2; i++) {
        ranges[i][0] *= f->list_size;
        ranges[i][1] *= f->list_size;
      }
      return concat_child(&f->children[0], p, 0, ranges, r, err);
    case FSH_TYPE_STRUCT:
      for (int64_t k = 0; k < f->n_children; k++)
        FSH_RETURN_NOT_OK(concat_child(&f->children[k], p, k, ranges, r, err));
      return 0;
    default: return concat_values(p, fsh_type_bit_width(f), 1, r, err);
  }
}

/* Concatenates p[0] and p[1] into a new array *out. */
static int concat_parts(const fsh_field *f, const part p[2], fsh_array **out, fsh_error *err) {
  int64_t n_children = f->dictionary ? 0 : f->n_children;
  fsh_array *r = fsh_array_new(fsh_type_n_buffers(f->type), n_children);
  if (!r) return oom(err);
  r->length = p[0].len + p[1].len;
  part q[2] = {p[0], p[1]};
  fsh_array *slices[2] = {NULL, NULL};
  int rc = 0;
  for (int i = 0; i < 2 && rc == 0; i++) { /* null counts relative to the part */
    if (p[i].off != p[i].a->offset || p[i].len != p[i].a->length) {
      slices[i] = fsh_array_slice(p[i].a, p[i].off - p[i].a->offset, p[i].len);
      if (!slices[i])
        rc = fsh_error_set(err, EINVAL, "dictionary delta: child range out of bounds");
      else
        q[i].a = slices[i];
    }
  }
  if (rc == 0) rc = concat_layout(f, q, r, err);
  fsh_array_unref(slices[0]);
  fsh_array_unref(slices[1]);
  if (rc == 0 && f->dictionary) r->dictionary = fsh_array_ref(p[1].a->dictionary);
  if (rc != 0) {
    fsh_array_unref(r);
    return rc;
  }
  *out = r;
  return 0;
}

int fsh_ipc_concat(const fsh_field *f, const fsh_array *a, const fsh_array *b, fsh_array **out,
                   fsh_error *err) {
  part p[2] = {{(fsh_array *)a, a->offset, a->length}, {(fsh_array *)b, b->offset, b->length}};
  return concat_parts(f, p, out, err);
}
