/* expr_logic.c -- AND, OR, NOT with SQL three-valued logic, and IS [NOT]
 * NULL, a byte (eight rows) at a time over value and validity bitmaps. */
#include "exec/exec_internal.h"

/* Byte i of an operand as two masks: rows known true, rows known false. */
static inline void tf_byte(const ev_vec *v, int64_t i, uint8_t *t, uint8_t *f) {
  if (v->kind == EV_NULL) {
    *t = *f = 0;
  } else if (v->scalar) {
    *t = v->sbool ? 0xff : 0;
    *f = v->sbool ? 0 : 0xff;
  } else {
    uint8_t vb = v->valid ? v->valid[i] : 0xff;
    *t = v->bits[i] & vb;
    *f = (uint8_t)~v->bits[i] & vb;
  }
}

int ev_logic(fsh_expr_op op, const ev_vec *a, const ev_vec *b, ev_vec *r, fsh_error *err) {
  int64_t n = a->n;
  r->n = n;
  bool scalar = (a->kind == EV_NULL || a->scalar) && (!b || b->kind == EV_NULL || b->scalar);
  if (scalar) {
    /* Constant result: one byte of masks decides it. */
    uint8_t ta, fa, tb = 0, fb = 0;
    tf_byte(a, 0, &ta, &fa);
    if (b) tf_byte(b, 0, &tb, &fb);
    uint8_t t = op == FSH_EXPR_NOT ? fa : op == FSH_EXPR_AND ? ta & tb : ta | tb;
    uint8_t f = op == FSH_EXPR_NOT ? ta : op == FSH_EXPR_AND ? fa | fb : fa & fb;
    r->scalar = true;
    r->kind = (t | f) & 1 ? EV_BOOL : EV_NULL;
    r->sbool = t & 1;
    return 0;
  }
  r->kind = EV_BOOL;
  int rc = ev_bitmap_new(n, &r->bits_buf, &r->bits, err);
  if (rc == 0) rc = ev_bitmap_new(n, &r->valid_buf, &r->valid, err);
  if (rc != 0) {
    ev_vec_reset(r);
    return rc;
  }
  int64_t nb = fsh_bytes_for_bits(n);
  switch (op) {
  case FSH_EXPR_NOT:
    for (int64_t i = 0; i < nb; i++) {
      uint8_t t, f;
      tf_byte(a, i, &t, &f);
      r->bits[i] = f;
      r->valid[i] = t | f;
    }
    break;
  case FSH_EXPR_AND:
    for (int64_t i = 0; i < nb; i++) {
      uint8_t ta, fa, tb, fb;
      tf_byte(a, i, &ta, &fa);
      tf_byte(b, i, &tb, &fb);
      uint8_t t = ta & tb, f = fa | fb;
      r->bits[i] = t;
      r->valid[i] = t | f;
    }
    break;
  default: /* OR */
    for (int64_t i = 0; i < nb; i++) {
      uint8_t ta, fa, tb, fb;
      tf_byte(a, i, &ta, &fa);
      tf_byte(b, i, &tb, &fb);
      uint8_t t = ta | tb, f = fa & fb;
      r->bits[i] = t;
      r->valid[i] = t | f;
    }
    break;
  }
  if (n & 7) {
    r->bits[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
    r->valid[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
  }
  return 0;
}

int ev_is_null(bool negate, const ev_vec *a, ev_vec *r, fsh_error *err) {
  int64_t n = a->n;
  r->n = n;
  r->kind = EV_BOOL;
  if (a->kind == EV_NULL || a->scalar || !a->valid) {
    r->scalar = true;
    bool is_null = a->kind == EV_NULL;
    r->sbool = negate ? !is_null : is_null;
    return 0;
  }
  FSH_RETURN_NOT_OK(ev_bitmap_new(n, &r->bits_buf, &r->bits, err));
  int64_t nb = fsh_bytes_for_bits(n);
  for (int64_t i = 0; i < nb; i++) r->bits[i] = negate ? a->valid[i] : (uint8_t)~a->valid[i];
  if (n & 7) r->bits[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
  return 0;
}
