/* expr_eval.c -- evaluation of a bound expression over a batch: columns and
 * literals into vectors, the operator dispatch, vectors back into arrays,
 * and the public eval / filter / project entry points. */
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

/* Validity of slots [off, off + n) of a into v (NULL when no nulls). */
static int load_validity(fsh_array *a, int64_t n, ev_vec *v, fsh_error *err) {
  if (a->n_buffers < 1 || !a->buffers[0] || fsh_array_null_count(a) == 0) return 0;
  FSH_RETURN_NOT_OK(ev_bitmap_new(n, &v->valid_buf, &v->valid, err));
  ev_bitmap_copy(v->valid, a->buffers[0]->data, a->offset, n);
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
                             e->name, k, u[k]);
    break;
  }
  default: LOAD(int64_t, d); break;
  }
#undef LOAD
  return 0;
}

/* The batch's column e->col has the type e was bound to. */
static int check_column(const fsh_expr *e, fsh_batch *b, fsh_error *err) {
  if (e->col >= b->n_columns ||
      !fsh_field_type_equals(&b->schema->fields[e->col], &e->col_field, NULL))
    return fsh_error_set(err, EINVAL,
                         "column '%s': the batch's schema is not the one the expression was "
                         "bound to", e->name);
  return 0;
}

static int load_column(const fsh_expr *e, fsh_batch *b, ev_vec *v, fsh_error *err) {
  FSH_RETURN_NOT_OK(check_column(e, b, err));
  fsh_array *a = b->columns[e->col];
  const fsh_field *f = &e->col_field;
  v->kind = e->kind;
  v->n = b->length;
  if (f->type == FSH_TYPE_NA || e->kind == EV_NULL) {
    v->kind = EV_NULL;
    return 0;
  }
  if (fsh_type_is_union(f->type) && !f->dictionary) return 0;
  FSH_RETURN_NOT_OK(load_validity(a, v->n, v, err));
  if (e->kind == EV_OTHER) return 0;
  const fsh_field *vf = f;
  fsh_array *va = a;
  int64_t base = a->offset;
  if (f->dictionary) {
    vf = &f->dictionary->value;
    va = a->dictionary;
    v->idx_buf = fsh_buffer_new(8 * (v->n > 0 ? v->n : 1), false);
    if (!v->idx_buf) return ev_oom(err);
    int64_t *idx = (int64_t *)v->idx_buf->data;
    const uint8_t *ib = kern_buf(a, 1);
    for (int64_t k = 0; k < v->n; k++)
      idx[k] = ev_valid_at(v, k) ? fsh_kern_read_int(f->type, ib, a->offset + k) + va->offset
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

static void load_literal(const fsh_expr *e, int64_t n, ev_vec *v) {
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

/* ---- dispatch ----------------------------------------------------------- */

static int eval_args(const fsh_expr *e, fsh_batch *b, ev_vec *v, fsh_error *err) {
  for (int k = 0; k < e->n_args; k++) {
    int rc = ev_eval(e->args[k], b, &v[k], err);
    if (rc != 0) {
      for (int j = 0; j < k; j++) ev_vec_reset(&v[j]);
      return rc;
    }
  }
  return 0;
}

/* A string predicate (LIKE, IN, or a comparison with a string literal) over
 * a dictionary-encoded operand x with more rows than dictionary entries:
 * evaluated once per entry, then spread to the rows through the indices.
 * `other` is the literal operand of a comparison (NULL otherwise), on the
 * left when x_right. Returns 1 when it does not apply. */
static int dict_predicate(const fsh_expr *e, const ev_vec *x, const ev_vec *other, bool x_right,
                          ev_vec *r, fsh_error *err) {
  if (x->kind != EV_STR || !x->idx || x->scalar || x->n <= x->dict_n) return 1;
  if (other && (other->kind != EV_STR || !other->scalar)) return 1;
  ev_vec d = {.kind = EV_STR, .n = x->dict_n, .offsets = x->offsets, .owidth = x->owidth,
              .data = x->data, .soff = x->dict_off};
  ev_vec dr = {0}, lit = {0};
  if (other) {
    lit = *other; /* a shallow copy sized to the dictionary; never reset */
    lit.n = x->dict_n;
    other = &lit;
  }
  int rc;
  if (e->op == FSH_EXPR_LIKE) rc = ev_like(e, &d, &dr, err);
  else if (e->op == FSH_EXPR_IN) rc = ev_in(e, &d, &dr, err);
  else rc = x_right ? ev_compare(e->op, other, &d, &dr, err) : ev_compare(e->op, &d, other, &dr, err);
  if (rc != 0) return rc;
  /* dr: bits over the entries; nulls only from a null in an IN list. */
  r->n = x->n;
  r->kind = EV_BOOL;
  rc = ev_valid_and(x, NULL, r, err);
  if (rc == 0) rc = ev_bitmap_new(x->n, &r->bits_buf, &r->bits, err);
  if (rc == 0 && dr.kind == EV_BOOL && dr.valid && !(r->valid && r->valid != x->valid)) {
    /* per-entry nulls (IN with a null): the rows' validity must be owned */
    fsh_buffer *vb;
    uint8_t *bits;
    rc = ev_bitmap_new(x->n, &vb, &bits, err);
    if (rc == 0) {
      if (r->valid) memcpy(bits, r->valid, (size_t)fsh_bytes_for_bits(x->n));
      else memset(bits, 0xff, (size_t)fsh_bytes_for_bits(x->n));
      fsh_buffer_unref(r->valid_buf);
      r->valid_buf = vb;
      r->valid = bits;
    }
  }
  if (rc == 0 && dr.kind == EV_NULL) {
    ev_vec_reset(r);
    r->kind = EV_NULL;
    r->n = x->n;
  } else if (rc == 0) {
    for (int64_t k = 0; k < x->n; k++) {
      int64_t j = x->idx[k] - x->dict_off;
      bool v = dr.scalar ? dr.sbool : fsh_bit_get(dr.bits, j);
      if (v) fsh_bit_set(r->bits, k, true);
      if (dr.valid && !fsh_bit_get(dr.valid, j)) fsh_bit_set(r->valid, k, false);
    }
  }
  ev_vec_reset(&dr);
  if (rc != 0) ev_vec_reset(r);
  return rc;
}

static int eval_call(const fsh_expr *e, fsh_batch *b, ev_vec *r, fsh_error *err) {
  ev_vec v[3];
  memset(v, 0, sizeof v);
  int rc;
  switch (e->op) {
  case FSH_EXPR_AND: case FSH_EXPR_OR: {
    /* Folded left: acc = acc op arg[k]. */
    ev_vec acc = {0};
    FSH_RETURN_NOT_OK(ev_eval(e->args[0], b, &acc, err));
    for (int k = 1; k < e->n_args; k++) {
      ev_vec next = {0}, out = {0};
      rc = ev_eval(e->args[k], b, &next, err);
      if (rc == 0) rc = ev_logic(e->op, &acc, &next, &out, err);
      ev_vec_reset(&next);
      ev_vec_reset(&acc);
      if (rc != 0) return rc;
      acc = out;
    }
    *r = acc;
    return 0;
  }
  case FSH_EXPR_IN:
    FSH_RETURN_NOT_OK(ev_eval(e->args[0], b, &v[0], err));
    rc = dict_predicate(e, &v[0], NULL, false, r, err);
    if (rc == 1) rc = ev_in(e, &v[0], r, err);
    ev_vec_reset(&v[0]);
    return rc;
  default:
    break;
  }
  FSH_RETURN_NOT_OK(eval_args(e, b, v, err));
  switch (e->op) {
  case FSH_EXPR_ADD: case FSH_EXPR_SUB: case FSH_EXPR_MUL: case FSH_EXPR_DIV: case FSH_EXPR_MOD:
    rc = ev_arith(e, &v[0], &v[1], r, err);
    break;
  case FSH_EXPR_EQ: case FSH_EXPR_NE: case FSH_EXPR_LT: case FSH_EXPR_LE: case FSH_EXPR_GT:
  case FSH_EXPR_GE:
    rc = dict_predicate(e, &v[0], &v[1], false, r, err);
    if (rc == 1) rc = dict_predicate(e, &v[1], &v[0], true, r, err);
    if (rc == 1) rc = ev_compare(e->op, &v[0], &v[1], r, err);
    break;
  case FSH_EXPR_NOT:
    rc = ev_logic(e->op, &v[0], NULL, r, err);
    break;
  case FSH_EXPR_IS_NULL: case FSH_EXPR_IS_NOT_NULL:
    rc = ev_is_null(e->op == FSH_EXPR_IS_NOT_NULL, &v[0], r, err);
    break;
  case FSH_EXPR_BETWEEN: {
    ev_vec ge = {0}, le = {0};
    rc = ev_compare(FSH_EXPR_GE, &v[0], &v[1], &ge, err);
    if (rc == 0) rc = ev_compare(FSH_EXPR_LE, &v[0], &v[2], &le, err);
    if (rc == 0) rc = ev_logic(FSH_EXPR_AND, &ge, &le, r, err);
    ev_vec_reset(&ge);
    ev_vec_reset(&le);
    break;
  }
  case FSH_EXPR_LIKE:
    rc = dict_predicate(e, &v[0], NULL, false, r, err);
    if (rc == 1) rc = ev_like(e, &v[0], r, err);
    break;
  case FSH_EXPR_CAST:
    rc = ev_cast(e, &v[0], r, err);
    break;
  default:
    rc = fsh_error_set(err, EINVAL, "operator %d cannot be evaluated", (int)e->op);
  }
  for (int k = 0; k < e->n_args && k < 3; k++) ev_vec_reset(&v[k]);
  return rc;
}

int ev_eval(const fsh_expr *e, fsh_batch *b, ev_vec *v, fsh_error *err) {
  memset(v, 0, sizeof *v);
  int rc;
  if (e->op == FSH_EXPR_COLUMN) {
    rc = load_column(e, b, v, err);
  } else if (e->op == FSH_EXPR_LITERAL) {
    load_literal(e, b->length, v);
    rc = 0;
  } else {
    rc = eval_call(e, b, v, err);
    v->n = b->length;
  }
  if (rc != 0) ev_vec_reset(v);
  return rc;
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
static int vec_to_array(const ev_vec *v, fsh_type_id t, fsh_array **out, fsh_error *err) {
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

/* ---- public entry points ------------------------------------------------ */

static int check_bound(const fsh_expr *e, fsh_batch *b, fsh_error *err) {
  if (!e || !b) return fsh_error_set(err, EINVAL, "NULL expression or batch");
  if (!e->bound) {
    char text[256];
    return fsh_error_set(err, EINVAL, "%s: expression not bound to a schema",
                         fsh_expr_format(e, text, sizeof text));
  }
  return 0;
}

int fsh_expr_eval(const fsh_expr *e, fsh_batch *b, fsh_array **out, fsh_error *err) {
  *out = NULL;
  FSH_RETURN_NOT_OK(check_bound(e, b, err));
  if (e->op == FSH_EXPR_COLUMN) {
    FSH_RETURN_NOT_OK(check_column(e, b, err));
    *out = fsh_array_ref(b->columns[e->col]);
    return 0;
  }
  ev_vec v;
  FSH_RETURN_NOT_OK(ev_eval(e, b, &v, err));
  int rc = vec_to_array(&v, e->type, out, err);
  ev_vec_reset(&v);
  return rc;
}

int fsh_expr_select(const fsh_expr *pred, fsh_batch *b, uint8_t *sel, int64_t *n_selected,
                    fsh_error *err) {
  FSH_RETURN_NOT_OK(check_bound(pred, b, err));
  if (pred->type != FSH_TYPE_BOOL && pred->type != FSH_TYPE_NA) {
    char text[256];
    if (pred->op == FSH_EXPR_COLUMN) snprintf(text, sizeof text, "column '%s'", pred->name);
    else fsh_expr_format(pred, text, sizeof text);
    return fsh_error_set(err, EINVAL, "filter: predicate %s is %s, not bool", text,
                         fsh_type_name(pred->type));
  }
  ev_vec v;
  FSH_RETURN_NOT_OK(ev_eval(pred, b, &v, err));
  int64_t n = b->length, nb = fsh_bytes_for_bits(n);
  if (v.kind == EV_NULL || (v.scalar && !v.sbool)) {
    memset(sel, 0, (size_t)nb);
  } else if (v.scalar) {
    memset(sel, 0xff, (size_t)nb);
  } else {
    for (int64_t i = 0; i < nb; i++) sel[i] = v.bits[i] & (v.valid ? v.valid[i] : 0xff);
  }
  if (n & 7) sel[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
  if (n_selected) *n_selected = fsh_bitmap_count(sel, 0, n);
  ev_vec_reset(&v);
  return 0;
}

int fsh_expr_filter(const fsh_expr *pred, fsh_batch *b, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  FSH_RETURN_NOT_OK(check_bound(pred, b, err));
  uint8_t *sel = fsh_malloc((size_t)fsh_bytes_for_bits(b->length > 0 ? b->length : 1));
  if (!sel) return ev_oom(err);
  int rc = fsh_expr_select(pred, b, sel, NULL, err);
  if (rc == 0) rc = fsh_filter(b, sel, out, err);
  fsh_free(sel);
  return rc;
}

int fsh_project_schema(const fsh_schema *in, int64_t n, const char *const *names,
                       fsh_expr *const *exprs, fsh_schema **out, fsh_error *err) {
  *out = NULL;
  if (!in || n < 0 || (n > 0 && (!names || !exprs)))
    return fsh_error_set(err, EINVAL, "project: NULL schema, names or expressions");
  for (int64_t k = 0; k < n; k++) {
    if (!names[k] || !exprs[k])
      return fsh_error_set(err, EINVAL, "project: output %" PRId64 " has no name or expression", k);
    int rc = fsh_expr_bind(exprs[k], in, err);
    if (rc != 0) return fsh_error_prefix(err, rc, "project column '%s': ", names[k]);
  }
  fsh_schema *s = fsh_schema_new(n);
  if (!s) return ev_oom(err);
  for (int64_t k = 0; k < n; k++) {
    int rc = fsh_expr_field(exprs[k], names[k], &s->fields[k], err);
    if (rc != 0) {
      fsh_schema_unref(s);
      return rc;
    }
  }
  *out = s;
  return 0;
}

int fsh_project(fsh_batch *b, fsh_schema *out_schema, int64_t n, fsh_expr *const *exprs,
                fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (!b || !out_schema || out_schema->n_fields != n)
    return fsh_error_set(err, EINVAL, "project: the output schema has %" PRId64
                         " fields for %" PRId64 " expressions", out_schema ? out_schema->n_fields : -1, n);
  for (int64_t k = 0; k < n; k++) {
    const fsh_field *f = &out_schema->fields[k];
    const fsh_expr *e = exprs[k];
    FSH_RETURN_NOT_OK(check_bound(e, b, err));
    bool ok = e->op == FSH_EXPR_COLUMN ? fsh_field_type_equals(f, &e->col_field, NULL)
                                       : !f->dictionary && f->type == e->type;
    if (!ok)
      return fsh_error_set(err, EINVAL, "project column '%s': the output schema's type is not "
                           "the expression's (schema from other expressions?)", f->name);
  }
  fsh_batch *r = fsh_batch_new(out_schema, b->length);
  if (!r) return ev_oom(err);
  for (int64_t k = 0; k < n; k++) {
    int rc = fsh_expr_eval(exprs[k], b, &r->columns[k], err);
    if (rc != 0) {
      fsh_batch_unref(r);
      return fsh_error_prefix(err, rc, "project column '%s': ", out_schema->fields[k].name);
    }
  }
  *out = r;
  return 0;
}
