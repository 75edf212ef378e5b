/* expr_logic.c -- AND, OR, NOT with SQL three-valued logic, and IS [NOT]
 * NULL, a byte (eight rows) at a time over value and validity bitmaps. */
#include "exec/exec_internal.h"

/* Word i (64 rows) of an operand as two masks: rows known true, rows
 * known false. Bitmaps are read a word at a time: their buffers are padded
 * to 64 bytes, so the last partial word is in bounds. */
static inline uint64_t word_at(const uint8_t *p, int64_t i) {
  uint64_t w;
  memcpy(&w, p + 8 * i, 8);
  return w;
}

static inline void tf_word(const ev_vec *v, int64_t i, uint64_t *t, uint64_t *f) {
  if (v->kind == EV_NULL) {
    *t = *f = 0;
  } else if (v->scalar) {
    *t = v->sbool ? ~0ull : 0;
    *f = v->sbool ? 0 : ~0ull;
  } else {
    uint64_t vb = v->valid ? word_at(v->valid, i) : ~0ull, b = word_at(v->bits, i);
    *t = b & vb;
    *f = ~b & vb;
  }
}

int ev_logic(fsh_expr_op op, const ev_vec *a, const ev_vec *b, ev_vec *r, fsh_error *err) {
  int64_t n = a->n;
  r->n = n;
  bool scalar = (a->kind == EV_NULL || a->scalar) && (!b || b->kind == EV_NULL || b->scalar);
  if (scalar) {
    /* Constant result: one word of masks decides it. */
    uint64_t ta, fa, tb = 0, fb = 0;
    tf_word(a, 0, &ta, &fa);
    if (b) tf_word(b, 0, &tb, &fb);
    uint64_t t = op == FSH_EXPR_NOT ? fa : op == FSH_EXPR_AND ? ta & tb : ta | tb;
    uint64_t f = op == FSH_EXPR_NOT ? ta : op == FSH_EXPR_AND ? fa | fb : fa & fb;
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
  int64_t nw = (n + 63) / 64;
  for (int64_t i = 0; i < nw; i++) {
    uint64_t ta, fa, tb = 0, fb = 0, t, f;
    tf_word(a, i, &ta, &fa);
    if (b) tf_word(b, i, &tb, &fb);
    if (op == FSH_EXPR_NOT) t = fa, f = ta;
    else if (op == FSH_EXPR_AND) t = ta & tb, f = fa | fb;
    else t = ta | tb, f = fa & fb;
    uint64_t valid = t | f;
    memcpy(r->bits + 8 * i, &t, 8);
    memcpy(r->valid + 8 * i, &valid, 8);
  }
  /* Rows past n were written as garbage into the padding: clear them. */
  int64_t nb = fsh_bytes_for_bits(n);
  memset(r->bits + nb, 0, (size_t)(8 * nw - nb));
  memset(r->valid + nb, 0, (size_t)(8 * nw - nb));
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
