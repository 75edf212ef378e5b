/* expr.c -- expression nodes: constructors, copy, release, the SQL-like
 * text form used in messages, and type facts the other files share. */
#include "exec/exec_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

static const char *const op_names[FSH_EXPR_OP_COUNT_] = {
    [FSH_EXPR_COLUMN] = "col",         [FSH_EXPR_LITERAL] = "lit",
    [FSH_EXPR_ADD] = "+",              [FSH_EXPR_SUB] = "-",
    [FSH_EXPR_MUL] = "*",              [FSH_EXPR_DIV] = "/",
    [FSH_EXPR_MOD] = "%",              [FSH_EXPR_EQ] = "=",
    [FSH_EXPR_NE] = "!=",              [FSH_EXPR_LT] = "<",
    [FSH_EXPR_LE] = "<=",              [FSH_EXPR_GT] = ">",
    [FSH_EXPR_GE] = ">=",              [FSH_EXPR_AND] = "and",
    [FSH_EXPR_OR] = "or",              [FSH_EXPR_NOT] = "not",
    [FSH_EXPR_IS_NULL] = "is_null",    [FSH_EXPR_IS_NOT_NULL] = "is_not_null",
    [FSH_EXPR_IN] = "in",              [FSH_EXPR_BETWEEN] = "between",
    [FSH_EXPR_LIKE] = "like",          [FSH_EXPR_CAST] = "cast",
};

const char *expr_op_name(fsh_expr_op op) {
  return (unsigned)op < FSH_EXPR_OP_COUNT_ ? op_names[op] : "?";
}

bool expr_type_numeric(fsh_type_id t) {
  return fsh_type_is_integer(t) || t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT64;
}

bool expr_type_string(fsh_type_id t) {
  return t == FSH_TYPE_STRING || t == FSH_TYPE_LARGE_STRING || t == FSH_TYPE_BINARY ||
         t == FSH_TYPE_LARGE_BINARY;
}

ev_kind expr_kind_of(fsh_type_id t) {
  if (t == FSH_TYPE_NA) return EV_NULL;
  if (t == FSH_TYPE_BOOL) return EV_BOOL;
  if (fsh_type_is_integer(t) || t == FSH_TYPE_DATE32 || t == FSH_TYPE_DATE64 ||
      t == FSH_TYPE_TIMESTAMP)
    return EV_I64;
  if (t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT64) return EV_F64;
  if (expr_type_string(t)) return EV_STR;
  return EV_OTHER;
}

static fsh_expr *node_new(fsh_expr_op op) {
  fsh_expr *e = fsh_calloc(1, sizeof *e);
  if (e) {
    e->op = op;
    e->col = -1;
  }
  return e;
}

fsh_expr *fsh_expr_col(const char *name) {
  if (!name) return NULL;
  fsh_expr *e = node_new(FSH_EXPR_COLUMN);
  if (!e) return NULL;
  e->name = fsh_strdup(name);
  if (!e->name) {
    fsh_free(e);
    return NULL;
  }
  return e;
}

static fsh_expr *lit_new(fsh_type_id t) {
  fsh_expr *e = node_new(FSH_EXPR_LITERAL);
  if (e) e->lit_type = t;
  return e;
}

fsh_expr *fsh_expr_null(fsh_type_id type) {
  fsh_expr *e = lit_new(type);
  if (e) e->lit_null = true;
  return e;
}

fsh_expr *fsh_expr_bool(bool v) {
  fsh_expr *e = lit_new(FSH_TYPE_BOOL);
  if (e) e->b = v;
  return e;
}

fsh_expr *fsh_expr_int(fsh_type_id type, int64_t v) {
  fsh_expr *e = lit_new(type);
  if (e) e->i = v;
  return e;
}

fsh_expr *fsh_expr_float(fsh_type_id type, double v) {
  fsh_expr *e = lit_new(type);
  if (e) e->f = v;
  return e;
}

fsh_expr *fsh_expr_string(const char *s, int64_t len) {
  if (!s) return NULL;
  if (len < 0) len = (int64_t)strlen(s);
  fsh_expr *e = lit_new(FSH_TYPE_STRING);
  if (!e) return NULL;
  e->s = fsh_strndup(s, (size_t)len);
  if (!e->s) {
    fsh_free(e);
    return NULL;
  }
  e->s_len = len;
  return e;
}

fsh_expr *fsh_expr_timestamp(fsh_time_unit unit, int64_t v) {
  fsh_expr *e = lit_new(FSH_TYPE_TIMESTAMP);
  if (e) {
    e->i = v;
    e->lit_unit = unit;
  }
  return e;
}

fsh_expr *fsh_expr_call(fsh_expr_op op, int n, fsh_expr **args) {
  bool ok = n >= 0 && op > FSH_EXPR_LITERAL && op < FSH_EXPR_OP_COUNT_;
  for (int k = 0; k < n; k++) ok = ok && args[k];
  fsh_expr *e = ok ? node_new(op) : NULL;
  if (e && n > 0) {
    e->args = fsh_malloc(sizeof *e->args * (size_t)n);
    if (!e->args) {
      fsh_free(e);
      e = NULL;
    }
  }
  if (!e) {
    for (int k = 0; k < n; k++) fsh_expr_free(args[k]);
    return NULL;
  }
  e->n_args = n;
  if (n > 0) memcpy(e->args, args, sizeof *args * (size_t)n);
  return e;
}

fsh_expr *fsh_expr_call1(fsh_expr_op op, fsh_expr *a) { return fsh_expr_call(op, 1, &a); }

fsh_expr *fsh_expr_call2(fsh_expr_op op, fsh_expr *a, fsh_expr *b) {
  fsh_expr *args[2] = {a, b};
  return fsh_expr_call(op, 2, args);
}

fsh_expr *fsh_expr_call3(fsh_expr_op op, fsh_expr *a, fsh_expr *b, fsh_expr *c) {
  fsh_expr *args[3] = {a, b, c};
  return fsh_expr_call(op, 3, args);
}

fsh_expr *fsh_expr_cast(fsh_expr *a, fsh_type_id to) {
  fsh_expr *e = fsh_expr_call(FSH_EXPR_CAST, 1, &a);
  if (e) e->cast_to = to;
  return e;
}

fsh_expr *fsh_expr_null_on_error(fsh_expr *e) {
  if (e) e->null_on_error = true;
  return e;
}

void fsh_expr_free(fsh_expr *e) {
  if (!e) return;
  for (int k = 0; k < e->n_args; k++) fsh_expr_free(e->args[k]);
  fsh_free(e->args);
  fsh_free(e->name);
  fsh_free(e->s);
  fsh_free(e->like_lit);
  fsh_field_reset(&e->col_field);
  fsh_free(e);
}

fsh_expr *fsh_expr_clone(const fsh_expr *e) {
  if (!e) return NULL;
  fsh_expr *c = node_new(e->op);
  if (!c) return NULL;
  c->lit_type = e->lit_type;
  c->lit_unit = e->lit_unit;
  c->lit_null = e->lit_null;
  c->b = e->b;
  c->i = e->i;
  c->f = e->f;
  c->s_len = e->s_len;
  c->cast_to = e->cast_to;
  c->null_on_error = e->null_on_error;
  bool ok = true;
  if (e->name) ok = (c->name = fsh_strdup(e->name)) != NULL;
  if (ok && e->s) ok = (c->s = fsh_strndup(e->s, (size_t)e->s_len)) != NULL;
  if (ok && e->n_args > 0) {
    c->args = fsh_calloc((size_t)e->n_args, sizeof *c->args);
    ok = c->args != NULL;
    if (ok) c->n_args = e->n_args;
    for (int k = 0; ok && k < e->n_args; k++) ok = (c->args[k] = fsh_expr_clone(e->args[k])) != NULL;
  }
  if (!ok) {
    fsh_expr_free(c);
    return NULL;
  }
  return c;
}

fsh_type_id fsh_expr_type(const fsh_expr *e) { return e && e->bound ? e->type : FSH_TYPE_NA; }

/* ---- text form ---------------------------------------------------------- */

typedef struct fmt_buf {
  char *p;
  size_t size, len;
} fmt_buf;

FSH_PRINTF(2, 3) static void put(fmt_buf *f, const char *fmt, ...) {
  if (f->len + 1 >= f->size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(f->p + f->len, f->size - f->len, fmt, ap);
  va_end(ap);
  if (n > 0) f->len = f->len + (size_t)n < f->size ? f->len + (size_t)n : f->size - 1;
}

static void format_lit(const fsh_expr *e, fmt_buf *f) {
  if (e->lit_null) {
    put(f, "null");
  } else if (e->lit_type == FSH_TYPE_BOOL) {
    put(f, "%s", e->b ? "true" : "false");
  } else if (e->lit_type == FSH_TYPE_FLOAT32 || e->lit_type == FSH_TYPE_FLOAT64) {
    put(f, "%.17g", e->f);
  } else if (e->lit_type == FSH_TYPE_STRING) {
    put(f, "'%.*s'", (int)(e->s_len > 64 ? 64 : e->s_len), e->s);
  } else if (e->lit_type == FSH_TYPE_DATE32) {
    put(f, "date32 %" PRId64, e->i);
  } else if (e->lit_type == FSH_TYPE_TIMESTAMP) {
    static const char *u[] = {"s", "ms", "us", "ns"};
    put(f, "timestamp[%s] %" PRId64, u[e->lit_unit & 3], e->i);
  } else {
    put(f, "%" PRId64, e->i);
  }
}

static void format_node(const fsh_expr *e, fmt_buf *f) {
  switch (e->op) {
  case FSH_EXPR_COLUMN:
    put(f, "%s", e->name);
    return;
  case FSH_EXPR_LITERAL:
    format_lit(e, f);
    return;
  case FSH_EXPR_NOT:
  case FSH_EXPR_IS_NULL:
  case FSH_EXPR_IS_NOT_NULL:
  case FSH_EXPR_CAST:
    if (e->op == FSH_EXPR_NOT) put(f, "(not ");
    if (e->op == FSH_EXPR_CAST) put(f, "cast(");
    if (e->op == FSH_EXPR_IS_NULL || e->op == FSH_EXPR_IS_NOT_NULL) put(f, "(");
    if (e->n_args > 0) format_node(e->args[0], f);
    if (e->op == FSH_EXPR_IS_NULL) put(f, " is null");
    if (e->op == FSH_EXPR_IS_NOT_NULL) put(f, " is not null");
    if (e->op == FSH_EXPR_CAST) put(f, " as %s", fsh_type_name(e->cast_to));
    put(f, ")");
    return;
  case FSH_EXPR_IN:
    put(f, "(");
    if (e->n_args > 0) format_node(e->args[0], f);
    put(f, " in (");
    for (int k = 1; k < e->n_args; k++) {
      if (k > 1) put(f, ", ");
      format_node(e->args[k], f);
    }
    put(f, "))");
    return;
  case FSH_EXPR_BETWEEN:
    put(f, "(");
    for (int k = 0; k < e->n_args; k++) {
      if (k == 1) put(f, " between ");
      if (k == 2) put(f, " and ");
      format_node(e->args[k], f);
    }
    put(f, ")");
    return;
  default:
    put(f, "(");
    for (int k = 0; k < e->n_args; k++) {
      if (k > 0) put(f, " %s ", expr_op_name(e->op));
      format_node(e->args[k], f);
    }
    put(f, ")");
    return;
  }
}

const char *fsh_expr_format(const fsh_expr *e, char *buf, size_t size) {
  if (!buf || size == 0) return buf;
  buf[0] = '\0';
  fmt_buf f = {buf, size, 0};
  if (e) format_node(e, &f);
  if (f.len + 1 >= size && size > 4) memcpy(buf + size - 4, "...", 4);
  return buf;
}
