/* exec_internal.h -- what the expression files share: the node struct, the
 * column vectors evaluation passes between operators, and bitmap helpers. */
#ifndef FSH_EXEC_INTERNAL_H
#define FSH_EXEC_INTERNAL_H

#include <flightshuffle/exec.h>

#include <errno.h>
#include <string.h>

/* Physical kind a bound node evaluates to. */
typedef enum ev_kind {
  EV_NULL = 0, /* every slot null (the null type, a null literal, or an
                  all-null result: operators test for it first) */
  EV_BOOL,     /* bitmap values */
  EV_I64,      /* int64 values (integers, dates, timestamps) */
  EV_F64,      /* double values */
  EV_STR,      /* offsets + data, optionally through dictionary indices */
  EV_OTHER     /* a type no operator reads (nested, decimal, ...) */
} ev_kind;

/* LIKE pattern shapes (compiled at bind). */
typedef enum like_kind { LIKE_EQ, LIKE_PREFIX, LIKE_SUFFIX, LIKE_CONTAINS, LIKE_GENERAL } like_kind;

struct fsh_expr {
  fsh_expr_op op;
  int n_args;
  fsh_expr **args;
  /* FSH_EXPR_COLUMN */
  char *name;
  /* FSH_EXPR_LITERAL: lit_type with unit; null, or the value in one of
   * b / i / f / s (s_len bytes, NUL-terminated copy). */
  fsh_type_id lit_type;
  fsh_time_unit lit_unit;
  bool lit_null;
  bool b;
  int64_t i;
  double f;
  char *s;
  int64_t s_len;
  /* FSH_EXPR_CAST */
  fsh_type_id cast_to;
  /* arithmetic, cast */
  bool null_on_error;
  /* set by fsh_expr_bind */
  bool bound;
  int64_t col;           /* column index */
  fsh_field col_field;   /* copy of the bound column's field (COLUMN) */
  fsh_type_id type;      /* result (value) type */
  fsh_time_unit unit;    /* timestamps */
  ev_kind kind;
  like_kind like;        /* LIKE: shape, and its literal (unescaped) */
  char *like_lit;
  int64_t like_len;
};

/* A column of values during evaluation. Bitmaps are offset-0 and cover n
 * bits; `valid` NULL means no nulls. Numeric values may point into an input
 * array (views) or into owned buffers. A scalar (literal) holds one value
 * broadcast to n rows (then valid is NULL and `snull` says if it is null). */
typedef struct ev_vec {
  ev_kind kind;
  int64_t n;
  bool scalar;
  bool snull;
  uint8_t *valid;
  fsh_buffer *valid_buf;   /* owner of valid, or NULL */
  /* EV_BOOL */
  uint8_t *bits;
  fsh_buffer *bits_buf;
  bool sbool;
  /* EV_I64 / EV_F64 */
  const int64_t *i64;
  const double *f64;
  fsh_buffer *vals_buf;    /* owner when computed */
  int64_t si;
  double sf;
  /* EV_STR: value k's bytes are data[off(j), off(j+1)) with j = k + soff,
   * or j = idx[k] through a dictionary (idx owned, in idx_buf). */
  const uint8_t *offsets;
  int owidth;              /* 4 or 8 */
  const uint8_t *data;
  int64_t soff;
  const int64_t *idx;
  fsh_buffer *idx_buf;
  int64_t dict_n;          /* with idx: the dictionary's entries are j in */
  int64_t dict_off;        /* [dict_off, dict_off + dict_n) */
  const char *ss;          /* scalar string */
  int64_t ss_len;
} ev_vec;

void ev_vec_reset(ev_vec *v);

/* Evaluates a bound node over b into v (zeroed on entry, reset on error). */
FSH_NODISCARD int ev_eval(const fsh_expr *e, fsh_batch *b, ev_vec *v, fsh_error *err);

/* Operator kernels: operands evaluated, result into r (zeroed). */
/* ev_arith may take over a or b's values buffer (then computes in place). */
FSH_NODISCARD int ev_arith(const fsh_expr *e, ev_vec *a, ev_vec *b, ev_vec *r, fsh_error *err);
FSH_NODISCARD int ev_cast(const fsh_expr *e, const ev_vec *a, ev_vec *r, fsh_error *err);
FSH_NODISCARD int ev_compare(fsh_expr_op op, const ev_vec *a, const ev_vec *b, ev_vec *r,
                             fsh_error *err);
FSH_NODISCARD int ev_in(const fsh_expr *e, const ev_vec *x, ev_vec *r, fsh_error *err);
FSH_NODISCARD int ev_like(const fsh_expr *e, const ev_vec *x, ev_vec *r, fsh_error *err);
FSH_NODISCARD int ev_logic(fsh_expr_op op, const ev_vec *a, const ev_vec *b, ev_vec *r,
                           fsh_error *err);
FSH_NODISCARD int ev_is_null(bool negate, const ev_vec *a, ev_vec *r, fsh_error *err);

/* Whether LIKE pattern p (n bytes) matches s (len bytes); compiled shapes
 * aside, the general matcher. */
bool expr_like_match(const char *p, int64_t pn, const char *s, int64_t sn);
/* Compiles e->args[1]'s pattern into e->like / like_lit. */
FSH_NODISCARD int expr_like_compile(fsh_expr *e, fsh_error *err);

/* ---- helpers ----------------------------------------------------------- */

static inline int ev_oom(fsh_error *err) { return fsh_error_set(err, ENOMEM, "out of memory"); }

/* A new zeroed bitmap of n bits as a buffer; *bits its data. */
FSH_NODISCARD int ev_bitmap_new(int64_t n, fsh_buffer **buf, uint8_t **bits, fsh_error *err);
/* dst[0, n) = src[off, off + n) (bits). */
void ev_bitmap_copy(uint8_t *dst, const uint8_t *src, int64_t off, int64_t n);
/* r->valid = a->valid AND b->valid (b may be NULL); NULL when neither has
 * nulls. Scalars count as all-valid (callers handle null scalars). */
FSH_NODISCARD int ev_valid_and(const ev_vec *a, const ev_vec *b, ev_vec *r, fsh_error *err);
/* Whether slot i holds a value. */
static inline bool ev_valid_at(const ev_vec *v, int64_t i) {
  if (v->kind == EV_NULL) return false;
  return !v->valid || fsh_bit_get(v->valid, i);
}

/* String value k of v (v->kind == EV_STR). */
static inline void ev_str_at(const ev_vec *v, int64_t k, const char **p, int64_t *len) {
  if (v->scalar) {
    *p = v->ss;
    *len = v->ss_len;
    return;
  }
  int64_t j = v->idx ? v->idx[k] : k + v->soff;
  int64_t a, b;
  if (v->owidth == 4) {
    int32_t x, y;
    memcpy(&x, v->offsets + 4 * j, 4);
    memcpy(&y, v->offsets + 4 * j + 4, 4);
    a = x;
    b = y;
  } else {
    memcpy(&a, v->offsets + 8 * j, 8);
    memcpy(&b, v->offsets + 8 * j + 8, 8);
  }
  *p = (const char *)v->data + a;
  *len = b - a;
}

/* Type facts. */
bool expr_type_numeric(fsh_type_id t);
bool expr_type_string(fsh_type_id t);
ev_kind expr_kind_of(fsh_type_id t);
const char *expr_op_name(fsh_expr_op op);

#endif
