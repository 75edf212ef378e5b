/* expr_arith.c -- arithmetic (+ - * / %) and numeric casts over vectors:
 * int64 with checked overflow and division by zero (errors, or nulls for a
 * node marked null_on_error), float64 with IEEE semantics. */
#include "exec/exec_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

/* x op y into *out; true when the row is an error (overflow, /0). */
static inline bool i64_op(fsh_expr_op op, int64_t x, int64_t y, int64_t *out) {
  switch (op) {
  case FSH_EXPR_ADD: return __builtin_add_overflow(x, y, out);
  case FSH_EXPR_SUB: return __builtin_sub_overflow(x, y, out);
  case FSH_EXPR_MUL: return __builtin_mul_overflow(x, y, out);
  case FSH_EXPR_DIV:
    if (y == 0 || (x == INT64_MIN && y == -1)) {
      *out = 0;
      return true;
    }
    *out = x / y;
    return false;
  default: /* MOD */
    if (y == 0) {
      *out = 0;
      return true;
    }
    *out = y == -1 ? 0 : x % y;
    return false;
  }
}

static inline double f64_op(fsh_expr_op op, double x, double y) {
  switch (op) {
  case FSH_EXPR_ADD: return x + y;
  case FSH_EXPR_SUB: return x - y;
  case FSH_EXPR_MUL: return x * y;
  case FSH_EXPR_DIV: return x / y;
  default: return fmod(x, y);
  }
}

/* The loop over n rows in three shapes (vector-vector, vector-scalar,
 * scalar-vector); BODY reads x, y and row k. */
#define BIN_LOOP(T, X, XS, XSCALAR, Y, YS, YSCALAR, N, BODY) \
  do {                                                       \
    if (!(XSCALAR) && !(YSCALAR)) {                          \
      for (int64_t k = 0; k < (N); k++) {                    \
        T x = (X)[k], y = (Y)[k];                            \
        BODY;                                                \
      }                                                      \
    } else if (!(XSCALAR)) {                                 \
      T y = (YS);                                            \
      for (int64_t k = 0; k < (N); k++) {                    \
        T x = (X)[k];                                        \
        BODY;                                                \
      }                                                      \
    } else {                                                 \
      T x = (XS);                                            \
      for (int64_t k = 0; k < (N); k++) {                    \
        T y = (Y)[k];                                        \
        BODY;                                                \
      }                                                      \
    }                                                        \
  } while (0)

/* Makes r->valid a bitmap r owns alone (copying a shared one, or all ones). */
static int own_valid(ev_vec *r, int64_t n, fsh_error *err) {
  fsh_buffer *buf;
  uint8_t *bits;
  FSH_RETURN_NOT_OK(ev_bitmap_new(n, &buf, &bits, err));
  if (r->valid)
    memcpy(bits, r->valid, (size_t)fsh_bytes_for_bits(n));
  else
    memset(bits, 0xff, (size_t)fsh_bytes_for_bits(n));
  fsh_buffer_unref(r->valid_buf);
  r->valid_buf = buf;
  r->valid = bits;
  return 0;
}

static int arith_error(const fsh_expr *e, int64_t row, int64_t x, int64_t y, fsh_error *err) {
  char text[256];
  bool div0 = (e->op == FSH_EXPR_DIV || e->op == FSH_EXPR_MOD) && y == 0;
  return fsh_error_set(err, div0 ? EDOM : EOVERFLOW,
                       "%s: %s at row %" PRId64 " (%" PRId64 " %s %" PRId64
                       "); mark the expression null_on_error (\"on_error\": \"null\") to get "
                       "nulls instead",
                       fsh_expr_format(e, text, sizeof text),
                       div0 ? "division by zero" : "int64 overflow", row, x,
                       expr_op_name(e->op), y);
}

/* Double view of an I64 or F64 operand (converted into *tmp when I64). */
static int as_f64(const ev_vec *v, const double **out, double *scalar, fsh_buffer **tmp,
                  fsh_error *err) {
  *tmp = NULL;
  if (v->scalar) {
    *scalar = v->kind == EV_F64 ? v->sf : (double)v->si;
    *out = scalar;
    return 0;
  }
  if (v->kind == EV_F64) {
    *out = v->f64;
    return 0;
  }
  *tmp = fsh_buffer_new(8 * (v->n > 0 ? v->n : 1), false);
  if (!*tmp) return ev_oom(err);
  double *d = (double *)(*tmp)->data;
  for (int64_t k = 0; k < v->n; k++) d[k] = (double)v->i64[k];
  *out = d;
  return 0;
}

/* An operand's values buffer the result may take over: owned by this
 * temporary vector alone and of the result's kind. Each row is read before
 * it is written, at the same index, so computing in place is safe. */
static fsh_buffer *steal_values(ev_vec *v, ev_kind kind) {
  if (v->scalar || v->kind != kind || !v->vals_buf || atomic_load(&v->vals_buf->refcount) != 1)
    return NULL;
  const void *p = kind == EV_F64 ? (const void *)v->f64 : (const void *)v->i64;
  if (p != (const void *)v->vals_buf->data) return NULL;
  fsh_buffer *b = v->vals_buf;
  v->vals_buf = NULL; /* v still reads it until the caller resets v */
  return b;
}

#define ARITH_CHUNK 1024

int ev_arith(const fsh_expr *e, ev_vec *a, ev_vec *b, ev_vec *r, fsh_error *err) {
  int64_t n = a->n;
  r->n = n;
  if (a->kind == EV_NULL || b->kind == EV_NULL) {
    r->kind = EV_NULL;
    return 0;
  }
  bool scalar = a->scalar && b->scalar;
  int64_t m = scalar ? 1 : n; /* two scalars: one row, a scalar result */
  r->kind = e->kind;
  FSH_RETURN_NOT_OK(ev_valid_and(a, b, r, err));
  if (!scalar) r->vals_buf = steal_values(a, e->kind);
  if (!scalar && !r->vals_buf) r->vals_buf = steal_values(b, e->kind);
  if (!r->vals_buf) r->vals_buf = fsh_buffer_new(8 * (m > 0 ? m : 1), false);
  if (!r->vals_buf) {
    ev_vec_reset(r);
    return ev_oom(err);
  }
  fsh_expr_op op = e->op;
  if (e->kind == EV_F64) {
    const double *px, *py;
    double xs, ys;
    fsh_buffer *tx, *ty = NULL;
    int rc = as_f64(a, &px, &xs, &tx, err);
    if (rc == 0) rc = as_f64(b, &py, &ys, &ty, err);
    if (rc != 0) {
      fsh_buffer_unref(tx);
      ev_vec_reset(r);
      return rc;
    }
    double *o = (double *)r->vals_buf->data;
    bool xsc = a->scalar && !scalar, ysc = b->scalar && !scalar;
    switch (op) {
    case FSH_EXPR_ADD: BIN_LOOP(double, px, xs, xsc, py, ys, ysc, m, o[k] = x + y); break;
    case FSH_EXPR_SUB: BIN_LOOP(double, px, xs, xsc, py, ys, ysc, m, o[k] = x - y); break;
    case FSH_EXPR_MUL: BIN_LOOP(double, px, xs, xsc, py, ys, ysc, m, o[k] = x * y); break;
    case FSH_EXPR_DIV: BIN_LOOP(double, px, xs, xsc, py, ys, ysc, m, o[k] = x / y); break;
    default: BIN_LOOP(double, px, xs, xsc, py, ys, ysc, m, o[k] = f64_op(op, x, y)); break;
    }
    fsh_buffer_unref(tx);
    fsh_buffer_unref(ty);
    r->f64 = o;
    if (scalar) {
      r->scalar = true;
      r->sf = o[0];
      fsh_buffer_unref(r->vals_buf);
      r->vals_buf = NULL;
      r->f64 = NULL;
    }
    return 0;
  }
  const int64_t *px = scalar ? &a->si : a->i64, *py = scalar ? &b->si : b->i64;
  int64_t xs = a->si, ys = b->si;
  bool xsc = a->scalar && !scalar, ysc = b->scalar && !scalar;
  int64_t *o = (int64_t *)r->vals_buf->data;
  /* Chunks computed into tmp first: when a row fails, the chunk's inputs
   * are still intact (the output may be an input's buffer) to find the
   * rows that hold values. */
  int64_t tmp[ARITH_CHUNK];
  for (int64_t base = 0; base < m; base += ARITH_CHUNK) {
    int64_t len = m - base < ARITH_CHUNK ? m - base : ARITH_CHUNK;
    const int64_t *cx = xsc ? NULL : px + base, *cy = ysc ? NULL : py + base;
    bool bad = false;
    switch (op) {
    case FSH_EXPR_ADD:
      BIN_LOOP(int64_t, cx, xs, xsc, cy, ys, ysc, len, bad |= __builtin_add_overflow(x, y, &tmp[k]));
      break;
    case FSH_EXPR_SUB:
      BIN_LOOP(int64_t, cx, xs, xsc, cy, ys, ysc, len, bad |= __builtin_sub_overflow(x, y, &tmp[k]));
      break;
    case FSH_EXPR_MUL:
      BIN_LOOP(int64_t, cx, xs, xsc, cy, ys, ysc, len, bad |= __builtin_mul_overflow(x, y, &tmp[k]));
      break;
    case FSH_EXPR_DIV:
      BIN_LOOP(int64_t, cx, xs, xsc, cy, ys, ysc, len, bad |= i64_op(FSH_EXPR_DIV, x, y, &tmp[k]));
      break;
    default:
      BIN_LOOP(int64_t, cx, xs, xsc, cy, ys, ysc, len, bad |= i64_op(FSH_EXPR_MOD, x, y, &tmp[k]));
      break;
    }
    for (int64_t k = 0; bad && k < len; k++) {
      /* Only rows holding values count. */
      int64_t row = base + k, xv = xsc ? xs : cx[k], yv = ysc ? ys : cy[k], dummy;
      if (!i64_op(op, xv, yv, &dummy) || (!scalar && !ev_valid_at(r, row))) continue;
      if (!e->null_on_error) {
        ev_vec_reset(r);
        return arith_error(e, row, xv, yv, err);
      }
      if (scalar) {
        ev_vec_reset(r);
        r->kind = EV_NULL;
        r->n = n;
        return 0;
      }
      if (!r->valid || r->valid == a->valid || r->valid == b->valid) {
        int rc = own_valid(r, n, err);
        if (rc != 0) {
          ev_vec_reset(r);
          return rc;
        }
      }
      fsh_bit_set(r->valid, row, false);
    }
    memcpy(o + base, tmp, sizeof *tmp * (size_t)len);
  }
  r->i64 = o;
  if (scalar) {
    r->scalar = true;
    r->si = o[0];
    fsh_buffer_unref(r->vals_buf);
    r->vals_buf = NULL;
    r->i64 = NULL;
  }
  return 0;
}

/* ---- casts -------------------------------------------------------------- */

static void int_range(fsh_type_id t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case FSH_TYPE_INT8: *lo = INT8_MIN, *hi = INT8_MAX; return;
  case FSH_TYPE_INT16: *lo = INT16_MIN, *hi = INT16_MAX; return;
  case FSH_TYPE_INT32: *lo = INT32_MIN, *hi = INT32_MAX; return;
  case FSH_TYPE_UINT8: *lo = 0, *hi = UINT8_MAX; return;
  case FSH_TYPE_UINT16: *lo = 0, *hi = UINT16_MAX; return;
  case FSH_TYPE_UINT32: *lo = 0, *hi = UINT32_MAX; return;
  case FSH_TYPE_UINT64: *lo = 0, *hi = INT64_MAX; return;
  default: *lo = INT64_MIN, *hi = INT64_MAX; return;
  }
}

/* Casts one value; true when out of the target's range. */
static inline bool cast_one(const ev_vec *a, int64_t k, fsh_type_id to, int64_t lo, int64_t hi,
                            int64_t *oi, double *of, bool *ob) {
  if (a->kind == EV_BOOL) {
    bool v = a->scalar ? a->sbool : fsh_bit_get(a->bits, k);
    *oi = v, *of = v, *ob = v;
    return false;
  }
  if (a->kind == EV_F64) {
    double v = a->scalar ? a->sf : a->f64[k];
    *of = to == FSH_TYPE_FLOAT32 ? (double)(float)v : v;
    *ob = v != 0;
    if (to == FSH_TYPE_FLOAT32 || to == FSH_TYPE_FLOAT64 || to == FSH_TYPE_BOOL) return false;
    /* [-2^63, 2^63) holds every int64; NaN fails both tests. */
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return true;
    *oi = (int64_t)v;
    return *oi < lo || *oi > hi;
  }
  int64_t v = a->scalar ? a->si : a->i64[k];
  *oi = v;
  *of = to == FSH_TYPE_FLOAT32 ? (double)(float)v : (double)v;
  *ob = v != 0;
  if (to == FSH_TYPE_FLOAT32 || to == FSH_TYPE_FLOAT64 || to == FSH_TYPE_BOOL) return false;
  return v < lo || v > hi;
}

int ev_cast(const fsh_expr *e, const ev_vec *a, ev_vec *r, fsh_error *err) {
  int64_t n = a->n;
  r->n = n;
  if (a->kind == EV_NULL) {
    r->kind = EV_NULL;
    return 0;
  }
  fsh_type_id to = e->cast_to;
  int64_t lo, hi;
  int_range(to, &lo, &hi);
  r->kind = e->kind;
  int64_t m = a->scalar ? 1 : n;
  int rc = ev_valid_and(a, NULL, r, err);
  if (rc != 0) return rc;
  int64_t *oi = NULL;
  double *of = NULL;
  if (r->kind == EV_BOOL) {
    rc = ev_bitmap_new(m, &r->bits_buf, &r->bits, err);
  } else {
    r->vals_buf = fsh_buffer_new(8 * (m > 0 ? m : 1), false);
    if (!r->vals_buf) rc = ev_oom(err);
    else if (r->kind == EV_F64) r->f64 = of = (double *)r->vals_buf->data;
    else r->i64 = oi = (int64_t *)r->vals_buf->data;
  }
  for (int64_t k = 0; rc == 0 && k < m; k++) {
    int64_t vi = 0;
    double vf = 0;
    bool vb = false;
    bool bad = cast_one(a, k, to, lo, hi, &vi, &vf, &vb);
    if (bad && (a->scalar || ev_valid_at(a, k))) {
      if (!e->null_on_error) {
        char text[256], val[64];
        if (a->kind == EV_F64) snprintf(val, sizeof val, "%.17g", a->scalar ? a->sf : a->f64[k]);
        else snprintf(val, sizeof val, "%" PRId64, a->scalar ? a->si : a->i64[k]);
        rc = fsh_error_set(err, EOVERFLOW, "%s: value %s at row %" PRId64 " is out of the range "
                           "of %s; mark the expression null_on_error (\"on_error\": \"null\") to "
                           "get nulls instead", fsh_expr_format(e, text, sizeof text), val, k,
                           fsh_type_name(to));
        break;
      }
      if (a->scalar) {
        ev_vec_reset(r);
        r->kind = EV_NULL;
        r->n = n;
        return 0;
      }
      if (!r->valid || r->valid == a->valid) rc = own_valid(r, n, err);
      if (rc == 0) fsh_bit_set(r->valid, k, false);
      vi = 0;
    }
    if (oi) oi[k] = vi;
    else if (of) of[k] = vf;
    else if (vb) fsh_bit_set(r->bits, k, true);
  }
  if (rc != 0) {
    ev_vec_reset(r);
    return rc;
  }
  if (a->scalar) {
    r->scalar = true;
    r->si = oi ? oi[0] : 0;
    r->sf = of ? of[0] : 0;
    r->sbool = r->bits ? fsh_bit_get(r->bits, 0) : false;
    fsh_buffer_unref(r->vals_buf);
    fsh_buffer_unref(r->bits_buf);
    r->vals_buf = r->bits_buf = NULL;
    r->i64 = NULL;
    r->f64 = NULL;
    r->bits = NULL;
  }
  return 0;
}
