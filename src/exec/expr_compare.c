/* expr_compare.c -- comparisons (= != < <= > >=) and IN lists over
 * vectors: int64, float64 (with numeric promotion), bool, and strings
 * compared bytewise; results packed eight rows per byte. */
#include "exec/exec_internal.h"

/* OUT gets bit k = COND (which reads k) for k in [0, M). */
#define PACK_LOOP(M, OUT, COND)                                         \
  do {                                                                  \
    int64_t full_ = (M) / 8;                                            \
    for (int64_t q_ = 0; q_ < full_; q_++) {                            \
      uint8_t byte_ = 0;                                                \
      for (int j_ = 0; j_ < 8; j_++) {                                  \
        int64_t k = q_ * 8 + j_;                                        \
        byte_ |= (uint8_t)((COND) ? 1u : 0u) << j_;                     \
      }                                                                 \
      (OUT)[q_] = byte_;                                                \
    }                                                                   \
    if ((M) & 7) {                                                      \
      uint8_t byte_ = 0;                                                \
      for (int j_ = 0; j_ < (int)((M) & 7); j_++) {                     \
        int64_t k = full_ * 8 + j_;                                     \
        byte_ |= (uint8_t)((COND) ? 1u : 0u) << j_;                     \
      }                                                                 \
      (OUT)[full_] = byte_;                                             \
    }                                                                   \
  } while (0)

#define CMP_OPS(M, OUT, XV, YV)                                          \
  switch (op) {                                                          \
  case FSH_EXPR_EQ: PACK_LOOP(M, OUT, (XV) == (YV)); break;              \
  case FSH_EXPR_NE: PACK_LOOP(M, OUT, (XV) != (YV)); break;              \
  case FSH_EXPR_LT: PACK_LOOP(M, OUT, (XV) < (YV)); break;               \
  case FSH_EXPR_LE: PACK_LOOP(M, OUT, (XV) <= (YV)); break;              \
  case FSH_EXPR_GT: PACK_LOOP(M, OUT, (XV) > (YV)); break;               \
  default: PACK_LOOP(M, OUT, (XV) >= (YV)); break;                       \
  }

#define CMP_SHAPES(T, M, OUT, XP, XS, XSC, YP, YS, YSC)                 \
  do {                                                                  \
    if (!(XSC) && !(YSC)) {                                             \
      CMP_OPS(M, OUT, (XP)[k], (YP)[k])                                 \
    } else if (!(XSC)) {                                                \
      const T ys_ = (YS);                                               \
      CMP_OPS(M, OUT, (XP)[k], ys_)                                     \
    } else {                                                            \
      const T xs_ = (XS);                                               \
      CMP_OPS(M, OUT, xs_, (YP)[k])                                     \
    }                                                                   \
  } while (0)

static inline int str_cmp(const char *a, int64_t an, const char *b, int64_t bn) {
  int64_t m = an < bn ? an : bn;
  int c = m > 0 ? memcmp(a, b, (size_t)m) : 0;
  if (c != 0) return c;
  return an < bn ? -1 : an > bn;
}

static inline bool str_eq(const ev_vec *a, const ev_vec *b, int64_t k) {
  const char *p, *q;
  int64_t pn, qn;
  ev_str_at(a, k, &p, &pn);
  ev_str_at(b, k, &q, &qn);
  return pn == qn && (pn == 0 || memcmp(p, q, (size_t)pn) == 0);
}

static inline int str_cmp_at(const ev_vec *a, const ev_vec *b, int64_t k) {
  const char *p, *q;
  int64_t pn, qn;
  ev_str_at(a, k, &p, &pn);
  ev_str_at(b, k, &q, &qn);
  return str_cmp(p, pn, q, qn);
}

static inline bool bool_at(const ev_vec *v, int64_t k) {
  return v->scalar ? v->sbool : fsh_bit_get(v->bits, k);
}

/* Converts an I64 vector operand to doubles (into *tmp). */
static int to_f64(const ev_vec *v, const double **out, fsh_buffer **tmp, fsh_error *err) {
  *tmp = NULL;
  if (v->kind == EV_F64 || v->scalar) {
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

int ev_compare(fsh_expr_op op, const ev_vec *a, const ev_vec *b, ev_vec *r, fsh_error *err) {
  int64_t n = a->n;
  r->n = n;
  if (a->kind == EV_NULL || b->kind == EV_NULL) {
    r->kind = EV_NULL;
    return 0;
  }
  r->kind = EV_BOOL;
  bool scalar = a->scalar && b->scalar;
  int64_t m = scalar ? 1 : n;
  FSH_RETURN_NOT_OK(ev_valid_and(a, b, r, err));
  int rc = ev_bitmap_new(m, &r->bits_buf, &r->bits, err);
  if (rc != 0) {
    ev_vec_reset(r);
    return rc;
  }
  uint8_t *o = r->bits;
  bool xsc = a->scalar && !scalar, ysc = b->scalar && !scalar;
  if (a->kind == EV_I64 && b->kind == EV_I64) {
    const int64_t *x = scalar ? &a->si : a->i64, *y = scalar ? &b->si : b->i64;
    CMP_SHAPES(int64_t, m, o, x, a->si, xsc, y, b->si, ysc);
  } else if ((a->kind == EV_I64 || a->kind == EV_F64) && (b->kind == EV_I64 || b->kind == EV_F64)) {
    double xs = a->kind == EV_F64 ? a->sf : (double)a->si;
    double ys = b->kind == EV_F64 ? b->sf : (double)b->si;
    const double *x = &xs, *y = &ys;
    fsh_buffer *tx = NULL, *ty = NULL;
    if (!scalar) {
      rc = to_f64(a, &x, &tx, err);
      if (rc == 0) rc = to_f64(b, &y, &ty, err);
    }
    if (rc == 0) CMP_SHAPES(double, m, o, x, xs, xsc, y, ys, ysc);
    fsh_buffer_unref(tx);
    fsh_buffer_unref(ty);
  } else if (a->kind == EV_BOOL && b->kind == EV_BOOL) {
    CMP_OPS(m, o, bool_at(a, k), bool_at(b, k))
  } else if (a->kind == EV_STR && b->kind == EV_STR) {
    switch (op) {
    case FSH_EXPR_EQ: PACK_LOOP(m, o, str_eq(a, b, k)); break;
    case FSH_EXPR_NE: PACK_LOOP(m, o, !str_eq(a, b, k)); break;
    case FSH_EXPR_LT: PACK_LOOP(m, o, str_cmp_at(a, b, k) < 0); break;
    case FSH_EXPR_LE: PACK_LOOP(m, o, str_cmp_at(a, b, k) <= 0); break;
    case FSH_EXPR_GT: PACK_LOOP(m, o, str_cmp_at(a, b, k) > 0); break;
    default: PACK_LOOP(m, o, str_cmp_at(a, b, k) >= 0); break;
    }
  } else {
    rc = fsh_error_set(err, EINVAL, "comparison of incompatible vectors (kinds %d and %d)",
                       (int)a->kind, (int)b->kind);
  }
  if (rc != 0) {
    ev_vec_reset(r);
    return rc;
  }
  if (scalar) {
    r->scalar = true;
    r->sbool = fsh_bit_get(o, 0);
    fsh_buffer_unref(r->bits_buf);
    r->bits_buf = NULL;
    r->bits = NULL;
  }
  return 0;
}

/* ---- IN ------------------------------------------------------------------ */

/* Whether row k of x equals literal l (non-null, comparable). */
static inline bool in_eq(const ev_vec *x, int64_t k, const fsh_expr *l) {
  switch (x->kind) {
  case EV_I64: {
    int64_t v = x->scalar ? x->si : x->i64[k];
    if (l->kind == EV_F64) return (double)v == l->f;
    return v == l->i;
  }
  case EV_F64: {
    double v = x->scalar ? x->sf : x->f64[k];
    return v == (l->kind == EV_F64 ? l->f : (double)l->i);
  }
  case EV_BOOL:
    return bool_at(x, k) == l->b;
  default: {
    const char *p;
    int64_t pn;
    ev_str_at(x, k, &p, &pn);
    return pn == l->s_len && (pn == 0 || memcmp(p, l->s, (size_t)pn) == 0);
  }
  }
}

int ev_in(const fsh_expr *e, const ev_vec *x, ev_vec *r, fsh_error *err) {
  int64_t n = x->n;
  r->n = n;
  if (x->kind == EV_NULL) {
    r->kind = EV_NULL;
    return 0;
  }
  r->kind = EV_BOOL;
  bool has_null = false;
  for (int j = 1; j < e->n_args; j++) has_null |= e->args[j]->lit_null;
  int64_t m = x->scalar ? 1 : n;
  FSH_RETURN_NOT_OK(ev_valid_and(x, NULL, r, err));
  int rc = ev_bitmap_new(m, &r->bits_buf, &r->bits, err);
  if (rc != 0) {
    ev_vec_reset(r);
    return rc;
  }
  for (int64_t k = 0; k < m; k++) {
    bool match = false;
    for (int j = 1; j < e->n_args && !match; j++)
      match = !e->args[j]->lit_null && in_eq(x, k, e->args[j]);
    if (match) fsh_bit_set(r->bits, k, true);
  }
  if (has_null) {
    /* No match and a null in the list: unknown. */
    fsh_buffer *vb;
    uint8_t *valid;
    rc = ev_bitmap_new(m, &vb, &valid, err);
    if (rc != 0) {
      ev_vec_reset(r);
      return rc;
    }
    int64_t nb = fsh_bytes_for_bits(m);
    for (int64_t i = 0; i < nb; i++) valid[i] = r->bits[i] & (r->valid ? r->valid[i] : 0xff);
    fsh_buffer_unref(r->valid_buf);
    r->valid_buf = vb;
    r->valid = valid;
  }
  if (x->scalar) {
    bool valid = !r->valid || fsh_bit_get(r->valid, 0);
    bool v = fsh_bit_get(r->bits, 0);
    ev_vec_reset(r);
    r->n = n;
    r->kind = valid ? EV_BOOL : EV_NULL;
    r->scalar = true;
    r->sbool = v;
  }
  return 0;
}
