/* take.c -- gather of rows by index for every type: the copy kernel behind
 * take, filter and scatter. Flat layouts (validity, fixed width, bool,
 * binary) are copied here with one loop per buffer; nested layouts recurse
 * through gather_nested.c. Results have offset 0 and an exact null count;
 * a validity bitmap is kept only when the result has nulls. */
#include "kernels/kernels_internal.h"


int64_t fsh_kern_read_int(fsh_type_id t, const uint8_t *p, int64_t i) {
  switch (t) {
    case FSH_TYPE_INT8: return (int8_t)p[i];
    case FSH_TYPE_UINT8: return p[i];
    case FSH_TYPE_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case FSH_TYPE_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case FSH_TYPE_INT32: return kern_read_i32(p, i);
    case FSH_TYPE_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    default: return kern_read_i64(p, i);
  }
}

void fsh_kern_union_map(const fsh_field *f, int8_t map[128]) {
  memset(map, -1, 128);
  for (int64_t k = 0; k < f->n_children && k < 128; k++) {
    int32_t code = f->type_codes ? f->type_codes[k] : (int32_t)k;
    if (code >= 0 && code < 128) map[code] = (int8_t)k;
  }
}

/* Bits src[off + idx[k]] into dst (whole bytes; the tail's unused bits are
 * zero). Returns how many were set. */
static int64_t gather_bits(const uint8_t *src, int64_t off, const int64_t *idx, int64_t n,
                           uint8_t *dst) {
  int64_t set = 0;
  for (int64_t k = 0; k < n; k += 8) {
    unsigned byte = 0;
    int m = n - k < 8 ? (int)(n - k) : 8;
    for (int b = 0; b < m; b++) {
      int64_t j = off + idx[k + b];
      unsigned bit = (unsigned)(src[j >> 3] >> (j & 7)) & 1u;
      byte |= bit << b;
      set += bit; /* no popcount: without -mpopcnt it is a libgcc call */
    }
    dst[k >> 3] = (uint8_t)byte;
  }
  return set;
}

/* Validity of the result: none when the gathered rows have no null. */
static int gather_validity(fsh_array *a, int64_t off, const int64_t *idx, int64_t n, fsh_array *r,
                           fsh_error *err) {
  r->null_count = 0;
  const fsh_buffer *v = a->buffers[0];
  if (!v || a->null_count == 0 || n == 0) return 0;
  fsh_buffer *bits = fsh_buffer_new(fsh_bytes_for_bits(n), false);
  if (!bits) return kern_oom(err);
  int64_t valid = gather_bits(v->data, off, idx, n, bits->data);
  if (valid == n) {
    fsh_buffer_unref(bits);
    return 0;
  }
  r->buffers[0] = bits;
  r->null_count = n - valid;
  return 0;
}

/* Values of `width` bytes each: one typed loop per common width. */
#define GATHER_LOOP(T)                                                                   \
  do {                                                                                   \
    T *d = (T *)(void *)dst;                                                             \
    for (int64_t k = 0; k < n; k++) memcpy(&d[k], src + sizeof(T) * (off + idx[k]), sizeof(T)); \
  } while (0)

void fsh_kern_gather_fixed(const uint8_t *src, int64_t off, const int64_t *idx, int64_t n,
                           int64_t width, uint8_t *dst) {
  switch (width) {
    case 1: for (int64_t k = 0; k < n; k++) dst[k] = src[off + idx[k]]; break;
    case 2: GATHER_LOOP(uint16_t); break;
    case 4: GATHER_LOOP(uint32_t); break;
    case 8: GATHER_LOOP(uint64_t); break;
    case 16:
      for (int64_t k = 0; k < n; k++) memcpy(dst + 16 * k, src + 16 * (off + idx[k]), 16);
      break;
    default:
      for (int64_t k = 0; k < n; k++)
        memcpy(dst + width * k, src + width * (off + idx[k]), (size_t)width);
  }
}

static int gather_values(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx,
                         int64_t n, fsh_array *r, fsh_error *err) {
  int64_t bits = fsh_type_bit_width(f);
  fsh_buffer *v = fsh_buffer_new(bits == 1 ? fsh_bytes_for_bits(n) : n * (bits / 8), false);
  if (!v) return kern_oom(err);
  const uint8_t *src = kern_buf(a, 1);
  if (n > 0 && bits == 1)
    gather_bits(src, off, idx, n, v->data);
  else if (n > 0 && bits > 0)
    fsh_kern_gather_fixed(src, off, idx, n, bits / 8, v->data);
  r->buffers[1] = v;
  return 0;
}

/* Offsets of the result of a variable-size layout: out[k + 1] - out[k] is
 * the length of gathered slot k. Returns the total in *total; EOVERFLOW
 * when it does not fit 32-bit offsets. */
static inline __attribute__((always_inline)) int gather_offsets_w(
    const uint8_t *src, int64_t off, const int64_t *idx, int64_t n, int w, uint8_t *out,
    int64_t *total) {
  int64_t pos = 0;
  if (w == 4) {
    int32_t zero = 0;
    memcpy(out, &zero, 4);
  } else {
    memcpy(out, &pos, 8);
  }
  for (int64_t k = 0; k < n; k++) {
    int64_t j = off + idx[k];
    pos += kern_read_offset(src, j + 1, w) - kern_read_offset(src, j, w);
    if (w == 4) {
      int32_t p32 = (int32_t)pos;
      memcpy(out + 4 * (k + 1), &p32, 4);
    } else {
      memcpy(out + 8 * (k + 1), &pos, 8);
    }
  }
  *total = pos;
  return w == 4 && pos > INT32_MAX ? EOVERFLOW : 0;
}

int fsh_kern_gather_offsets(const uint8_t *src, int64_t off, const int64_t *idx, int64_t n, int w,
                            fsh_buffer **out, int64_t *total, fsh_error *err) {
  fsh_buffer *o = fsh_buffer_new((n + 1) * w, false);
  if (!o) return kern_oom(err);
  int rc = w == 4 ? gather_offsets_w(src, off, idx, n, 4, o->data, total)
                  : gather_offsets_w(src, off, idx, n, 8, o->data, total);
  if (rc != 0) {
    fsh_buffer_unref(o);
    return fsh_error_set(err, EOVERFLOW,
                         "%lld bytes or elements do not fit 32-bit offsets (use a large type)",
                         (long long)*total);
  }
  *out = o;
  return 0;
}

/* Copies the bytes of the gathered slots back to back. Short values move
 * in 16-byte chunks (no call per value) where both sides have 16 bytes of
 * room past the value: the source before data_size, the destination in
 * the 16 spare bytes it was allocated with. */
static inline __attribute__((always_inline)) void copy_binary_w(
    const uint8_t *offs, const uint8_t *data, int64_t data_size, int64_t off, const int64_t *idx,
    int64_t n, int w, uint8_t *dst) {
  int64_t pos = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t j = off + idx[k];
    int64_t s = kern_read_offset(offs, j, w), len = kern_read_offset(offs, j + 1, w) - s;
    if (len <= 32 && s + 32 <= data_size) {
      memcpy(dst + pos, data + s, 16);
      if (len > 16) memcpy(dst + pos + 16, data + s + 16, 16);
    } else {
      memcpy(dst + pos, data + s, (size_t)len);
    }
    pos += len;
  }
}

static int gather_binary(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx,
                         int64_t n, fsh_array *r, fsh_error *err) {
  int w = kern_offset_width(f->type);
  int64_t total = 0;
  const uint8_t *offs = kern_buf(a, 1);
  if (n == 0 || !offs) { /* an empty array: offsets [0] */
    r->buffers[1] = fsh_buffer_new(w, true);
    r->buffers[2] = fsh_buffer_new(0, false);
    return r->buffers[1] && r->buffers[2] ? 0 : kern_oom(err);
  }
  FSH_RETURN_NOT_OK(fsh_kern_gather_offsets(offs, off, idx, n, w, &r->buffers[1], &total, err));
  fsh_buffer *d = fsh_buffer_new(total + 32, false); /* room for copy_binary_w's chunks */
  if (!(r->buffers[2] = d)) return kern_oom(err);
  if (total > 0) {
    int64_t size = a->buffers[2]->size;
    if (w == 4)
      copy_binary_w(offs, kern_buf(a, 2), size, off, idx, n, 4, d->data);
    else
      copy_binary_w(offs, kern_buf(a, 2), size, off, idx, n, 8, d->data);
  }
  memset(d->data + total, 0, 32); /* padding stays zero */
  d->size = total;
  return 0;
}

static bool is_nested(fsh_type_id t) {
  return t == FSH_TYPE_LIST || t == FSH_TYPE_LARGE_LIST || t == FSH_TYPE_FIXED_SIZE_LIST ||
         t == FSH_TYPE_STRUCT || t == FSH_TYPE_MAP || fsh_type_is_union(t);
}

static int gather_into(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx,
                       int64_t n, fsh_array *r, fsh_error *err) {
  if (f->type == FSH_TYPE_NA) {
    r->null_count = n;
    return 0;
  }
  if (!fsh_type_is_union(f->type) || f->dictionary)
    FSH_RETURN_NOT_OK(gather_validity(a, off, idx, n, r, err));
  if (f->dictionary) {
    r->dictionary = fsh_array_ref(a->dictionary);
    return gather_values(f, a, off, idx, n, r, err);
  }
  switch (f->type) {
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      return gather_binary(f, a, off, idx, n, r, err);
    default:
      if (is_nested(f->type)) return fsh_kern_gather_nested(f, a, off, idx, n, r, err);
      return gather_values(f, a, off, idx, n, r, err);
  }
}

int fsh_kern_gather(const fsh_field *f, fsh_array *a, int64_t base, const int64_t *idx, int64_t n,
                    fsh_array **out, fsh_error *err) {
  *out = NULL;
  int64_t n_children = f->dictionary || !is_nested(f->type) ? 0 : f->n_children;
  fsh_array *r = fsh_array_new(fsh_type_n_buffers(f->type), n_children);
  if (!r) return kern_oom(err);
  r->length = n;
  int rc = gather_into(f, a, a->offset + base, idx, n, r, err);
  if (rc != 0) {
    fsh_array_unref(r);
    return rc;
  }
  *out = r;
  return 0;
}

/* ---- public take ------------------------------------------------------- */

static int check_indices(const int64_t *idx, int64_t n, int64_t length, fsh_error *err) {
  for (int64_t k = 0; k < n; k++)
    if ((uint64_t)idx[k] >= (uint64_t)length)
      return fsh_error_set(err, EINVAL, "index %lld at position %lld is outside [0, %lld)",
                           (long long)idx[k], (long long)k, (long long)length);
  return 0;
}

int fsh_array_take(const fsh_field *f, fsh_array *a, const int64_t *indices, int64_t n,
                   fsh_array **out, fsh_error *err) {
  *out = NULL;
  if (!f || !a || n < 0 || (n > 0 && !indices))
    return fsh_error_set(err, EINVAL, "take: NULL field, array or indices, or negative count");
  int rc = check_indices(indices, n, a->length, err);
  if (rc == 0) rc = fsh_kern_gather(f, a, 0, indices, n, out, err);
  if (rc != 0) fsh_error_prefix(err, rc, "take of column '%s': ", f->name);
  return rc;
}

/* Gathers every column of b at rows idx (trusted) into a new batch. */
int fsh_kern_gather_batch(fsh_batch *b, const int64_t *idx, int64_t n, fsh_batch **out,
                          fsh_error *err) {
  *out = NULL;
  fsh_batch *r = fsh_batch_new(b->schema, n);
  if (!r) return kern_oom(err);
  for (int64_t c = 0; c < b->n_columns; c++) {
    const fsh_field *f = &b->schema->fields[c];
    int rc = fsh_kern_gather(f, b->columns[c], 0, idx, n, &r->columns[c], err);
    if (rc != 0) {
      fsh_batch_unref(r);
      return fsh_error_prefix(err, rc, "column %lld ('%s'): ", (long long)c, f->name);
    }
  }
  *out = r;
  return 0;
}

int fsh_take(fsh_batch *b, const int64_t *indices, int64_t n, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (!b || n < 0 || (n > 0 && !indices))
    return fsh_error_set(err, EINVAL, "take: NULL batch or indices, or negative count");
  int rc = check_indices(indices, n, b->length, err);
  if (rc == 0) rc = fsh_kern_gather_batch(b, indices, n, out, err);
  if (rc != 0) fsh_error_prefix(err, rc, "take: ");
  return rc;
}
