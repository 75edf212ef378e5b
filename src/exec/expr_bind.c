/* expr_bind.c -- binding an expression tree to a schema: column names to
 * indices, type checking of every operator, result types, LIKE patterns
 * compiled. Errors name the node at fault, its operands and the root. */
#include "exec/exec_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* "column 'x' (utf8)" or "(a + 1) (int64)" for messages. */
static const char *describe(const fsh_expr *e, char *buf, size_t size) {
  char text[160];
  if (e->op == FSH_EXPR_COLUMN)
    snprintf(buf, size, "column '%s' is %s", e->name, fsh_type_name(e->type));
  else
    snprintf(buf, size, "%s is %s", fsh_expr_format(e, text, sizeof text), fsh_type_name(e->type));
  return buf;
}

static int bind_error(const fsh_expr *e, fsh_error *err, const char *what) {
  char text[256];
  return fsh_error_set(err, EINVAL, "%s: operator '%s': %s", fsh_expr_format(e, text, sizeof text),
                       expr_op_name(e->op), what);
}

/* Two operands that cannot go together: names both. */
static int mismatch(const fsh_expr *e, const fsh_expr *a, const fsh_expr *b, const char *need,
                    fsh_error *err) {
  char da[200], db[200], text[256], what[700];
  if (b)
    snprintf(what, sizeof what, "type mismatch (%s): %s, %s", need, describe(a, da, sizeof da),
             describe(b, db, sizeof db));
  else
    snprintf(what, sizeof what, "%s: %s", need, describe(a, da, sizeof da));
  return fsh_error_set(err, EINVAL, "%s: %s", fsh_expr_format(e, text, sizeof text), what);
}

static bool comparable(const fsh_expr *a, const fsh_expr *b) {
  fsh_type_id x = a->type, y = b->type;
  if (x == FSH_TYPE_NA || y == FSH_TYPE_NA) return true;
  if (expr_type_numeric(x) && expr_type_numeric(y)) return true;
  if (expr_type_string(x) && expr_type_string(y)) return true;
  if (x == FSH_TYPE_BOOL && y == FSH_TYPE_BOOL) return true;
  if ((x == FSH_TYPE_DATE32 || x == FSH_TYPE_DATE64) && x == y) return true;
  return x == FSH_TYPE_TIMESTAMP && y == FSH_TYPE_TIMESTAMP && a->unit == b->unit;
}

static int bind_literal(fsh_expr *e, fsh_error *err) {
  fsh_type_id t = e->lit_type;
  static const int64_t lo[] = {[FSH_TYPE_INT8] = INT8_MIN,   [FSH_TYPE_INT16] = INT16_MIN,
                               [FSH_TYPE_INT32] = INT32_MIN, [FSH_TYPE_INT64] = INT64_MIN,
                               [FSH_TYPE_UINT8] = 0,         [FSH_TYPE_UINT16] = 0,
                               [FSH_TYPE_UINT32] = 0,        [FSH_TYPE_UINT64] = 0,
                               [FSH_TYPE_DATE32] = INT32_MIN};
  static const int64_t hi[] = {[FSH_TYPE_INT8] = INT8_MAX,   [FSH_TYPE_INT16] = INT16_MAX,
                               [FSH_TYPE_INT32] = INT32_MAX, [FSH_TYPE_INT64] = INT64_MAX,
                               [FSH_TYPE_UINT8] = UINT8_MAX, [FSH_TYPE_UINT16] = UINT16_MAX,
                               [FSH_TYPE_UINT32] = UINT32_MAX, [FSH_TYPE_UINT64] = INT64_MAX,
                               [FSH_TYPE_DATE32] = INT32_MAX};
  bool ok = t == FSH_TYPE_NA || t == FSH_TYPE_BOOL || expr_type_numeric(t) ||
            t == FSH_TYPE_STRING || t == FSH_TYPE_DATE32 || t == FSH_TYPE_DATE64 ||
            t == FSH_TYPE_TIMESTAMP;
  if (!ok)
    return fsh_error_set(err, EINVAL, "literal of type %s: not supported in expressions",
                         fsh_type_name(t));
  if (t == FSH_TYPE_TIMESTAMP && (unsigned)e->lit_unit > FSH_NANO)
    return fsh_error_set(err, EINVAL, "timestamp literal: bad unit %d", (int)e->lit_unit);
  if (!e->lit_null && (fsh_type_is_integer(t) || t == FSH_TYPE_DATE32) &&
      (e->i < lo[t] || e->i > hi[t]))
    return fsh_error_set(err, EINVAL, "literal %" PRId64 " out of range for %s", e->i,
                         fsh_type_name(t));
  e->type = t;
  e->unit = t == FSH_TYPE_TIMESTAMP ? e->lit_unit : FSH_SECOND;
  return 0;
}

static int bind_column(fsh_expr *e, const fsh_schema *s, fsh_error *err) {
  int64_t found = -1;
  for (int64_t c = 0; c < s->n_fields; c++) {
    if (strcmp(s->fields[c].name, e->name) != 0) continue;
    if (found >= 0)
      return fsh_error_set(err, EINVAL, "column '%s' is ambiguous: columns %" PRId64 " and %" PRId64
                                        " have that name", e->name, found, c);
    found = c;
  }
  if (found < 0) {
    char names[600] = "";
    size_t len = 0;
    for (int64_t c = 0; c < s->n_fields && len + 1 < sizeof names; c++) {
      int n = snprintf(names + len, sizeof names - len, "%s'%s'", c ? ", " : "", s->fields[c].name);
      if (n > 0) len += (size_t)n;
    }
    if (len >= sizeof names) len = sizeof names - 1;
    return fsh_error_set(err, EINVAL, "unknown column '%s' (the schema has %s)", e->name,
                         s->n_fields ? names : "no column");
  }
  fsh_field_reset(&e->col_field);
  if (fsh_field_copy(&e->col_field, &s->fields[found]) != 0) return ev_oom(err);
  const fsh_field *v = e->col_field.dictionary ? &e->col_field.dictionary->value : &e->col_field;
  e->col = found;
  e->type = v->type;
  e->unit = v->unit;
  return 0;
}

static int want_args(fsh_expr *e, int lo, int hi, fsh_error *err) {
  if (e->n_args >= lo && (hi < 0 || e->n_args <= hi)) return 0;
  char what[96];
  if (hi < 0)
    snprintf(what, sizeof what, "expected at least %d args, got %d", lo, e->n_args);
  else if (lo == hi)
    snprintf(what, sizeof what, "expected %d args, got %d", lo, e->n_args);
  else
    snprintf(what, sizeof what, "expected %d to %d args, got %d", lo, hi, e->n_args);
  return bind_error(e, err, what);
}

static int bind_node(fsh_expr *e, const fsh_schema *s, fsh_error *err);

static int bind_call(fsh_expr *e, const fsh_schema *s, fsh_error *err) {
  switch (e->op) {
  case FSH_EXPR_ADD: case FSH_EXPR_SUB: case FSH_EXPR_MUL: case FSH_EXPR_DIV: case FSH_EXPR_MOD:
  case FSH_EXPR_EQ: case FSH_EXPR_NE: case FSH_EXPR_LT: case FSH_EXPR_LE: case FSH_EXPR_GT:
  case FSH_EXPR_GE: case FSH_EXPR_LIKE:
    FSH_RETURN_NOT_OK(want_args(e, 2, 2, err));
    break;
  case FSH_EXPR_AND: case FSH_EXPR_OR:
    FSH_RETURN_NOT_OK(want_args(e, 2, -1, err));
    break;
  case FSH_EXPR_NOT: case FSH_EXPR_IS_NULL: case FSH_EXPR_IS_NOT_NULL: case FSH_EXPR_CAST:
    FSH_RETURN_NOT_OK(want_args(e, 1, 1, err));
    break;
  case FSH_EXPR_IN:
    FSH_RETURN_NOT_OK(want_args(e, 1, -1, err));
    break;
  case FSH_EXPR_BETWEEN:
    FSH_RETURN_NOT_OK(want_args(e, 3, 3, err));
    break;
  default:
    return fsh_error_set(err, EINVAL, "unknown operator %d", (int)e->op);
  }
  for (int k = 0; k < e->n_args; k++) FSH_RETURN_NOT_OK(bind_node(e->args[k], s, err));
  fsh_expr *a = e->args[0], *b = e->n_args > 1 ? e->args[1] : NULL;
  e->unit = FSH_SECOND;
  switch (e->op) {
  case FSH_EXPR_ADD: case FSH_EXPR_SUB: case FSH_EXPR_MUL: case FSH_EXPR_DIV: case FSH_EXPR_MOD: {
    bool na = a->type == FSH_TYPE_NA, nb = b->type == FSH_TYPE_NA;
    if ((!na && !expr_type_numeric(a->type)) || (!nb && !expr_type_numeric(b->type)))
      return mismatch(e, a, b, "arithmetic needs numbers", err);
    bool fl = a->type == FSH_TYPE_FLOAT32 || a->type == FSH_TYPE_FLOAT64 ||
              b->type == FSH_TYPE_FLOAT32 || b->type == FSH_TYPE_FLOAT64;
    e->type = fl ? FSH_TYPE_FLOAT64 : FSH_TYPE_INT64;
    return 0;
  }
  case FSH_EXPR_EQ: case FSH_EXPR_NE: case FSH_EXPR_LT: case FSH_EXPR_LE: case FSH_EXPR_GT:
  case FSH_EXPR_GE:
    if (a->kind == EV_OTHER || b->kind == EV_OTHER || !comparable(a, b))
      return mismatch(e, a, b, "not comparable", err);
    e->type = FSH_TYPE_BOOL;
    return 0;
  case FSH_EXPR_BETWEEN:
    if (a->kind == EV_OTHER || e->args[1]->kind == EV_OTHER || !comparable(a, e->args[1]))
      return mismatch(e, a, e->args[1], "not comparable", err);
    if (e->args[2]->kind == EV_OTHER || !comparable(a, e->args[2]))
      return mismatch(e, a, e->args[2], "not comparable", err);
    e->type = FSH_TYPE_BOOL;
    return 0;
  case FSH_EXPR_IN:
    if (a->kind == EV_OTHER) return mismatch(e, a, NULL, "not comparable", err);
    for (int k = 1; k < e->n_args; k++) {
      if (e->args[k]->op != FSH_EXPR_LITERAL)
        return mismatch(e, e->args[k], NULL, "the IN list must hold literals", err);
      if (!comparable(a, e->args[k])) return mismatch(e, a, e->args[k], "not comparable", err);
    }
    e->type = FSH_TYPE_BOOL;
    return 0;
  case FSH_EXPR_AND: case FSH_EXPR_OR: case FSH_EXPR_NOT:
    for (int k = 0; k < e->n_args; k++)
      if (e->args[k]->type != FSH_TYPE_BOOL && e->args[k]->type != FSH_TYPE_NA)
        return mismatch(e, e->args[k], NULL, "a boolean operand is needed", err);
    e->type = FSH_TYPE_BOOL;
    return 0;
  case FSH_EXPR_IS_NULL: case FSH_EXPR_IS_NOT_NULL:
    e->type = FSH_TYPE_BOOL;
    return 0;
  case FSH_EXPR_LIKE:
    if (a->type != FSH_TYPE_NA && !expr_type_string(a->type))
      return mismatch(e, a, NULL, "LIKE needs a string operand", err);
    if (b->op != FSH_EXPR_LITERAL || (b->type != FSH_TYPE_STRING && b->type != FSH_TYPE_NA))
      return mismatch(e, b, NULL, "the LIKE pattern must be a utf8 literal", err);
    e->type = FSH_TYPE_BOOL;
    return expr_like_compile(e, err);
  case FSH_EXPR_CAST:
    if (a->type != FSH_TYPE_NA && a->type != FSH_TYPE_BOOL && !expr_type_numeric(a->type))
      return mismatch(e, a, NULL, "CAST reads numbers or bool", err);
    if (e->cast_to != FSH_TYPE_BOOL && !expr_type_numeric(e->cast_to)) {
      char what[96];
      snprintf(what, sizeof what, "cannot cast to %s (numeric and bool targets only)",
               fsh_type_name(e->cast_to));
      return bind_error(e, err, what);
    }
    e->type = e->cast_to;
    return 0;
  default:
    return fsh_error_set(err, EINVAL, "unknown operator %d", (int)e->op);
  }
}

static int bind_node(fsh_expr *e, const fsh_schema *s, fsh_error *err) {
  e->bound = false;
  int rc;
  if (e->op == FSH_EXPR_COLUMN)
    rc = bind_column(e, s, err);
  else if (e->op == FSH_EXPR_LITERAL)
    rc = bind_literal(e, err);
  else
    rc = bind_call(e, s, err);
  if (rc != 0) return rc;
  e->kind = expr_kind_of(e->type);
  e->bound = true;
  return 0;
}

int fsh_expr_bind(fsh_expr *e, const fsh_schema *s, fsh_error *err) {
  if (!e || !s) return fsh_error_set(err, EINVAL, "bind: NULL expression or schema");
  int rc = bind_node(e, s, err);
  if (rc != 0 && rc != ENOMEM && err) {
    /* Names the root too, unless the node at fault is the root. */
    char text[256];
    fsh_expr_format(e, text, sizeof text);
    size_t len = strlen(text);
    if (strncmp(err->message, text, len) == 0 && err->message[len] == ':')
      fsh_error_prefix(err, rc, "bind of ");
    else
      fsh_error_prefix(err, rc, "bind of %s: ", text);
  }
  return rc;
}

int fsh_expr_bind_predicate(fsh_expr *e, const fsh_schema *s, fsh_error *err) {
  FSH_RETURN_NOT_OK(fsh_expr_bind(e, s, err));
  if (e->type == FSH_TYPE_BOOL || e->type == FSH_TYPE_NA) return 0;
  char text[256], what[300];
  fsh_expr_format(e, text, sizeof text);
  if (e->op == FSH_EXPR_COLUMN)
    snprintf(what, sizeof what, "column '%s'", e->name);
  else
    snprintf(what, sizeof what, "%s", text);
  return fsh_error_set(err, EINVAL, "predicate %s is %s, not bool", what, fsh_type_name(e->type));
}

int fsh_expr_field(const fsh_expr *e, const char *name, fsh_field *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!e || !e->bound) return fsh_error_set(err, EINVAL, "expression not bound");
  int rc;
  if (e->op == FSH_EXPR_COLUMN) {
    rc = fsh_field_copy(out, &e->col_field);
    if (rc == 0) {
      char *n = fsh_strdup(name);
      if (!n) {
        fsh_field_reset(out);
        return ev_oom(err);
      }
      fsh_free(out->name);
      out->name = n;
    }
  } else {
    rc = fsh_field_init(out, name, e->type, true);
    if (rc == 0) out->unit = e->unit;
  }
  return rc == 0 ? 0 : ev_oom(err);
}
