/* expr_vec.c -- the vectors evaluation passes between operators: built
 * from a batch's columns (validity copied to offset-0 bitmaps, int64 and
 * float64 values viewed in place, other widths widened, dictionaries
 * resolved to indices) and from literals, bitmap helpers, and vectors
 * turned back into arrays. */
#include "exec/exec_internal.h"
#include "kernels/kernels_internal.h"

#include <inttypes.h>
#include <stdio.h>

void ev_vec_reset(ev_vec *v) {
  fsh_buffer_unref(v->valid_buf);
  fsh_buffer_unref(v->bits_buf);
  fsh_buffer_unref(v->vals_buf);
  fsh_buffer_unref(v->idx_buf);
  memset(v, 0, sizeof *v);
}

int ev_bitmap_new(int64_t n, fsh_buffer **buf, uint8_t **bits, fsh_error *err) {
  *buf = fsh_buffer_new(fsh_bytes_for_bits(n > 0 ? n : 1), true);
  if (!*buf) return ev_oom(err);
  *bits = (*buf)->data;
  return 0;
}

void ev_bitmap_copy(uint8_t *dst, const uint8_t *src, int64_t off, int64_t n) {
  int64_t nb = fsh_bytes_for_bits(n);
  if (n <= 0) return;
  const uint8_t *s = src + off / 8;
  int sh = (int)(off & 7);
  if (sh == 0) {
    memcpy(dst, s, (size_t)nb);
  } else {
    int64_t last = (off + n - 1) / 8 - off / 8; /* last source byte index */
    for (int64_t i = 0; i < nb; i++) {
      uint8_t lo = (uint8_t)(s[i] >> sh);
      uint8_t hi = i + 1 <= last ? (uint8_t)(s[i + 1] << (8 - sh)) : 0;
      dst[i] = lo | hi;
    }
  }
  if (n & 7) dst[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
}

int ev_valid_and(const ev_vec *a, const ev_vec *b, ev_vec *r, fsh_error *err) {
  const ev_vec *x = a->valid ? a : NULL, *y = b && b->valid ? b : NULL;
  if (!x) x = y, y = NULL;
  r->valid = NULL;
  r->valid_buf = NULL;
  if (!x) return 0;
  if (!y) {
    r->valid_buf = fsh_buffer_ref(x->valid_buf);
    r->valid = x->valid;
    return 0;
  }
  FSH_RETURN_NOT_OK(ev_bitmap_new(a->n, &r->valid_buf, &r->valid, err));
  int64_t nb = fsh_bytes_for_bits(a->n);
  for (int64_t i = 0; i < nb; i++) r->valid[i] = x->valid[i] & y->valid[i];
  return 0;
}

/* ---- loading ------------------------------------------------------------ */

/* Validity of slots [row0, row0 + n) of a into v (NULL when no nulls). */
static int load_validity(fsh_array *a, int64_t row0, int64_t n, ev_vec *v, fsh_error *err) {
  if (a->n_buffers < 1 || !a->buffers[0] || fsh_array_null_count(a) == 0) return 0;
  FSH_RETURN_NOT_OK(ev_bitmap_new(n, &v->valid_buf, &v->valid, err));
  ev_bitmap_copy(v->valid, a->buffers[0]->data, a->offset + row0, n);
  return 0;
}

/* Values of a plain column of (value) field f: slots j(k) = idx ? idx[k] :
 * base + k of the buffer `values`. */
static int load_numbers(const fsh_expr *e, const fsh_field *f, const uint8_t *values,
                        const int64_t *idx, int64_t base, ev_vec *v, fsh_error *err) {
  int64_t n = v->n;
  fsh_type_id t = f->type;
  if (!idx && (t == FSH_TYPE_INT64 || t == FSH_TYPE_DATE64 || t == FSH_TYPE_TIMESTAMP) &&
      ((uintptr_t)values & 7) == 0) {
    v->i64 = (const int64_t *)values + base;
    return 0;
  }
  if (!idx && t == FSH_TYPE_FLOAT64 && ((uintptr_t)values & 7) == 0) {
    v->f64 = (const double *)values + base;
    return 0;
  }
  v->vals_buf = fsh_buffer_new(8 * (n > 0 ? n : 1), false);
  if (!v->vals_buf) return ev_oom(err);
#define LOAD(T, DST)                                                              \
  do {                                                                            \
    if (idx) {                                                                    \
      for (int64_t k = 0; k < n; k++) {                                           \
        T x;                                                                      \
        memcpy(&x, values + sizeof(T) * (size_t)idx[k], sizeof x);                \
        DST[k] = x;                                                               \
      }                                                                           \
    } else {                                                                      \
      const uint8_t *p = values + sizeof(T) * (size_t)base;                      \
      for (int64_t k = 0; k < n; k++) {                                           \
        T x;                                                                      \
        memcpy(&x, p + sizeof(T) * (size_t)k, sizeof x);                          \
        DST[k] = x;                                                               \
      }                                                                           \
    }                                                                             \
  } while (0)
  if (v->kind == EV_F64) {
    double *d = (double *)v->vals_buf->data;
    v->f64 = d;
    if (t == FSH_TYPE_FLOAT32) LOAD(float, d);
    else LOAD(double, d);
    return 0;
  }
  int64_t *d = (int64_t *)v->vals_buf->data;
  v->i64 = d;
  switch (t) {
  case FSH_TYPE_INT8: LOAD(int8_t, d); break;
  case FSH_TYPE_INT16: LOAD(int16_t, d); break;
  case FSH_TYPE_INT32: case FSH_TYPE_DATE32: LOAD(int32_t, d); break;
  case FSH_TYPE_UINT8: LOAD(uint8_t, d); break;
  case FSH_TYPE_UINT16: LOAD(uint16_t, d); break;
  case FSH_TYPE_UINT32: LOAD(uint32_t, d); break;
  case FSH_TYPE_UINT64: {
    uint64_t *u = (uint64_t *)d;
    LOAD(uint64_t, u);
    for (int64_t k = 0; k < n; k++)
      if (u[k] > (uint64_t)INT64_MAX && ev_valid_at(v, k))
        return fsh_error_set(err, EOVERFLOW,
                             "column '%s' row %" PRId64 ": uint64 value %" PRIu64
                             " exceeds the int64 range expressions compute in",
                             e->name, v->row0 + k, u[k]);
    break;
  }
  default: LOAD(int64_t, d); break;
  }
#undef LOAD
  return 0;
}

/* The batch's column e->col has the type e was bound to. */
int ev_check_column(const fsh_expr *e, fsh_batch *b, fsh_error *err) {
  if (e->col >= b->n_columns ||
      !fsh_field_type_equals(&b->schema->fields[e->col], &e->col_field, NULL))
    return fsh_error_set(err, EINVAL,
                         "column '%s': the batch's schema is not the one the expression was "
                         "bound to", e->name);
  return 0;
}

int ev_load_column(const fsh_expr *e, const ev_rows *rows, ev_vec *v, fsh_error *err) {
  fsh_batch *b = rows->b;
  FSH_RETURN_NOT_OK(ev_check_column(e, b, err));
  fsh_array *a = b->columns[e->col];
  const fsh_field *f = &e->col_field;
  v->kind = e->kind;
  v->n = rows->n;
  v->row0 = rows->row0;
  if (f->type == FSH_TYPE_NA || e->kind == EV_NULL) {
    v->kind = EV_NULL;
    return 0;
  }
  if (fsh_type_is_union(f->type) && !f->dictionary) return 0;
  FSH_RETURN_NOT_OK(load_validity(a, rows->row0, v->n, v, err));
  if (e->kind == EV_OTHER) return 0;
  const fsh_field *vf = f;
  fsh_array *va = a;
  int64_t base = a->offset + rows->row0;
  if (f->dictionary) {
    vf = &f->dictionary->value;
    va = a->dictionary;
    v->idx_buf = fsh_buffer_new(8 * (v->n > 0 ? v->n : 1), false);
    if (!v->idx_buf) return ev_oom(err);
    int64_t *idx = (int64_t *)v->idx_buf->data;
    const uint8_t *ib = kern_buf(a, 1);
    for (int64_t k = 0; k < v->n; k++)
      idx[k] = ev_valid_at(v, k) ? fsh_kern_read_int(f->type, ib, base + k) + va->offset
                                 : va->offset; /* null slots point at a harmless entry */
    v->idx = idx;
    v->dict_n = va->length;
    v->dict_off = va->offset;
    /* Null dictionary entries make their rows null. */
    if (fsh_array_null_count(va) > 0 && va->length > 0) {
      if (!v->valid) {
        FSH_RETURN_NOT_OK(ev_bitmap_new(v->n, &v->valid_buf, &v->valid, err));
        memset(v->valid, 0xff, (size_t)fsh_bytes_for_bits(v->n));
      }
      for (int64_t k = 0; k < v->n; k++)
        if (!fsh_bit_get(va->buffers[0]->data, idx[k])) fsh_bit_set(v->valid, k, false);
    }
    if (va->length == 0) { /* every index is null then; keep idx away from entries */
      v->kind = EV_NULL;
      return 0;
    }
  }
  switch (e->kind) {
  case EV_BOOL: {
    FSH_RETURN_NOT_OK(ev_bitmap_new(v->n, &v->bits_buf, &v->bits, err));
    const uint8_t *src = kern_buf(va, 1);
    if (v->idx) {
      for (int64_t k = 0; k < v->n; k++)
        if (fsh_bit_get(src, v->idx[k])) fsh_bit_set(v->bits, k, true);
    } else {
      ev_bitmap_copy(v->bits, src, base, v->n);
    }
    return 0;
  }
  case EV_I64: case EV_F64:
    return load_numbers(e, vf, kern_buf(va, 1), v->idx, base, v, err);
  case EV_STR:
    v->offsets = kern_buf(va, 1);
    v->data = kern_buf(va, 2);
    v->owidth = kern_offset_width(vf->type);
    v->soff = base;
    if (!v->data) v->data = (const uint8_t *)"";
    return 0;
  default:
    return 0;
  }
}

void ev_load_literal(const fsh_expr *e, int64_t n, ev_vec *v) {
  v->n = n;
  v->scalar = true;
  v->kind = e->lit_null ? EV_NULL : e->kind;
  v->snull = e->lit_null;
  v->sbool = e->b;
  v->si = e->i;
  v->sf = e->f;
  if (e->kind == EV_F64 && e->lit_type != FSH_TYPE_FLOAT32 && e->lit_type != FSH_TYPE_FLOAT64)
    v->sf = (double)e->i;
  v->ss = e->s ? e->s : "";
  v->ss_len = e->s_len;
}

/* ---- vectors into arrays ------------------------------------------------ */

static int64_t value_width(fsh_type_id t) {
  switch (t) {
  case FSH_TYPE_INT8: case FSH_TYPE_UINT8: return 1;
  case FSH_TYPE_INT16: case FSH_TYPE_UINT16: return 2;
  case FSH_TYPE_INT32: case FSH_TYPE_UINT32: case FSH_TYPE_DATE32: case FSH_TYPE_FLOAT32: return 4;
  default: return 8;
  }
}

/* Numeric values of v (I64 or F64; scalar broadcast) as type t's buffer. */
static int numbers_buffer(const ev_vec *v, fsh_type_id t, fsh_buffer **out, fsh_error *err) {
  int64_t n = v->n, w = value_width(t);
  if (!v->scalar && v->vals_buf && w == 8 && (t == FSH_TYPE_FLOAT64) == (v->kind == EV_F64)) {
    *out = fsh_buffer_ref(v->vals_buf);
    return 0;
  }
  fsh_buffer *buf = fsh_buffer_new(w * (n > 0 ? n : 1), false);
  if (!buf) return ev_oom(err);
  uint8_t *d = buf->data;
#define STORE(T, SRC)                                                  \
  for (int64_t k = 0; k < n; k++) {                                    \
    T x = (T)(SRC);                                                    \
    memcpy(d + sizeof(T) * (size_t)k, &x, sizeof x);                   \
  }
#define STORE_ALL(SRC)                                                 \
  switch (t) {                                                         \
  case FSH_TYPE_INT8: STORE(int8_t, SRC) break;                        \
  case FSH_TYPE_UINT8: STORE(uint8_t, SRC) break;                      \
  case FSH_TYPE_INT16: STORE(int16_t, SRC) break;                      \
  case FSH_TYPE_UINT16: STORE(uint16_t, SRC) break;                    \
  case FSH_TYPE_INT32: case FSH_TYPE_DATE32: STORE(int32_t, SRC) break; \
  case FSH_TYPE_UINT32: STORE(uint32_t, SRC) break;                    \
  case FSH_TYPE_UINT64: STORE(uint64_t, SRC) break;                    \
  case FSH_TYPE_FLOAT32: STORE(float, SRC) break;                      \
  case FSH_TYPE_FLOAT64: STORE(double, SRC) break;                     \
  default: STORE(int64_t, SRC) break;                                  \
  }
  if (v->kind == EV_F64) {
    if (v->scalar) {
      STORE_ALL(v->sf)
    } else {
      STORE_ALL(v->f64[k])
    }
  } else {
    if (v->scalar) {
      STORE_ALL(v->si)
    } else {
      STORE_ALL(v->i64[k])
    }
  }
#undef STORE_ALL
#undef STORE
  *out = buf;
  return 0;
}

/* A new array of type t (unit aside) holding v's n rows. */
int ev_vec_to_array(const ev_vec *v, fsh_type_id t, fsh_array **out, fsh_error *err) {
  int64_t n = v->n;
  *out = NULL;
  fsh_array *a = fsh_array_new(fsh_type_n_buffers(t), 0);
  if (!a) return ev_oom(err);
  a->length = n;
  int rc = 0;
  if (t == FSH_TYPE_NA) {
    a->null_count = n;
    *out = a;
    return 0;
  }
  uint8_t *bits;
  if (v->kind == EV_NULL) {
    rc = ev_bitmap_new(n, &a->buffers[0], &bits, err);
    if (rc == 0 && expr_type_string(t)) {
      int64_t w = kern_offset_width(t);
      a->buffers[1] = fsh_buffer_new(w * (n + 1), true);
      a->buffers[2] = fsh_buffer_new(0, true);
      if (!a->buffers[1] || !a->buffers[2]) rc = ev_oom(err);
    } else if (rc == 0) {
      int64_t bytes = t == FSH_TYPE_BOOL ? fsh_bytes_for_bits(n) : value_width(t) * n;
      a->buffers[1] = fsh_buffer_new(bytes > 0 ? bytes : 1, true);
      if (!a->buffers[1]) rc = ev_oom(err);
    }
    a->null_count = n;
    if (rc != 0) fsh_array_unref(a);
    else *out = a;
    return rc;
  }
  if (v->valid) {
    a->buffers[0] = fsh_buffer_ref(v->valid_buf);
    a->null_count = n - fsh_bitmap_count(v->valid, 0, n);
    if (a->null_count == 0) {
      fsh_buffer_unref(a->buffers[0]);
      a->buffers[0] = NULL;
    }
  } else {
    a->null_count = 0;
  }
  switch (v->kind) {
  case EV_BOOL:
    if (!v->scalar) {
      a->buffers[1] = fsh_buffer_ref(v->bits_buf);
    } else {
      rc = ev_bitmap_new(n, &a->buffers[1], &bits, err);
      if (rc == 0 && v->sbool) {
        memset(bits, 0xff, (size_t)fsh_bytes_for_bits(n));
        if (n & 7) bits[fsh_bytes_for_bits(n) - 1] &= (uint8_t)((1u << (n & 7)) - 1);
      }
    }
    break;
  case EV_I64: case EV_F64:
    rc = numbers_buffer(v, t, &a->buffers[1], err);
    break;
  case EV_STR: {
    /* Only a literal reaches here (a column root is returned as is). */
    int64_t total = v->ss_len * n;
    if (t != FSH_TYPE_LARGE_STRING && t != FSH_TYPE_LARGE_BINARY && total > INT32_MAX) {
      rc = fsh_error_set(err, EOVERFLOW, "string literal repeated %" PRId64 " times "
                         "overflows 32-bit offsets", n);
      break;
    }
    a->buffers[1] = fsh_buffer_new(4 * (n + 1), false);
    a->buffers[2] = fsh_buffer_new(total > 0 ? total : 1, false);
    if (!a->buffers[1] || !a->buffers[2]) {
      rc = ev_oom(err);
      break;
    }
    int32_t *o = (int32_t *)a->buffers[1]->data;
    for (int64_t k = 0; k <= n; k++) o[k] = (int32_t)(k * v->ss_len);
    for (int64_t k = 0; k < n; k++)
      memcpy(a->buffers[2]->data + k * v->ss_len, v->ss, (size_t)v->ss_len);
    a->buffers[2]->size = total;
    break;
  }
  default:
    rc = fsh_error_set(err, ENOTSUP, "cannot build a %s array", fsh_type_name(t));
  }
  if (rc != 0) {
    fsh_array_unref(a);
    return rc;
  }
  *out = a;
  return 0;
}
