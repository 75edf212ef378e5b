/* expr_eval.c -- evaluation of a bound expression: the operator dispatch
 * over vectors (string predicates on dictionaries once per entry), and the
 * public eval / select / filter / project entry points. */
#include "exec/exec_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* ---- dispatch ----------------------------------------------------------- */

static int eval_args(const fsh_expr *e, const ev_rows *b, ev_vec *v, fsh_error *err) {
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

static int eval_call(const fsh_expr *e, const ev_rows *b, ev_vec *r, fsh_error *err) {
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

int ev_eval(const fsh_expr *e, const ev_rows *rows, ev_vec *v, fsh_error *err) {
  memset(v, 0, sizeof *v);
  int rc;
  if (e->op == FSH_EXPR_COLUMN) {
    rc = ev_load_column(e, rows, v, err);
  } else if (e->op == FSH_EXPR_LITERAL) {
    ev_load_literal(e, rows->n, v);
    rc = 0;
  } else {
    rc = eval_call(e, rows, v, err);
    v->n = rows->n;
  }
  if (rc != 0) ev_vec_reset(v);
  else v->row0 = rows->row0;
  return rc;
}

/* ---- public entry points ------------------------------------------------ */

int64_t fsh_expr_select_rows = 1 << 20;

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
    FSH_RETURN_NOT_OK(ev_check_column(e, b, err));
    *out = fsh_array_ref(b->columns[e->col]);
    return 0;
  }
  ev_vec v;
  ev_rows rows = {b, 0, b->length};
  FSH_RETURN_NOT_OK(ev_eval(e, &rows, &v, err));
  int rc = ev_vec_to_array(&v, e->type, out, err);
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
  /* Slice by slice (a multiple of 64 rows, so each lands on whole bytes of
   * sel): intermediates stay bounded however long the batch. */
  int64_t n = b->length, step = fsh_expr_select_rows & ~(int64_t)63;
  if (step < 64) step = 64;
  for (int64_t row0 = 0; row0 < n || row0 == 0; row0 += step) {
    ev_rows rows = {b, row0, n - row0 < step ? n - row0 : step};
    ev_vec v;
    FSH_RETURN_NOT_OK(ev_eval(pred, &rows, &v, err));
    uint8_t *out = sel + row0 / 8;
    int64_t nb = fsh_bytes_for_bits(rows.n);
    if (v.kind == EV_NULL || (v.scalar && !v.sbool))
      memset(out, 0, (size_t)nb);
    else if (v.scalar)
      memset(out, 0xff, (size_t)nb);
    else
      for (int64_t i = 0; i < nb; i++) out[i] = v.bits[i] & (v.valid ? v.valid[i] : 0xff);
    ev_vec_reset(&v);
    if (n == 0) break;
  }
  int64_t nb = fsh_bytes_for_bits(n);
  if (n & 7) sel[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
  if (n_selected) *n_selected = fsh_bitmap_count(sel, 0, n);
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
