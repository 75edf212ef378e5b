/* expr_json.c -- the JSON form of expressions (grammar in exec.h): parsing
 * with errors that name the node's JSON path and operator, and printing.
 * The JSON tree is jansson's (its own allocator); nodes use fsh_malloc. */
#include "exec/exec_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static const struct {
  const char *name;
  fsh_type_id type;
} type_names[] = {
    {"null", FSH_TYPE_NA},         {"bool", FSH_TYPE_BOOL},       {"int8", FSH_TYPE_INT8},
    {"int16", FSH_TYPE_INT16},     {"int32", FSH_TYPE_INT32},     {"int64", FSH_TYPE_INT64},
    {"uint8", FSH_TYPE_UINT8},     {"uint16", FSH_TYPE_UINT16},   {"uint32", FSH_TYPE_UINT32},
    {"uint64", FSH_TYPE_UINT64},   {"float32", FSH_TYPE_FLOAT32}, {"float64", FSH_TYPE_FLOAT64},
    {"utf8", FSH_TYPE_STRING},     {"date32", FSH_TYPE_DATE32},   {"date64", FSH_TYPE_DATE64},
    {"timestamp", FSH_TYPE_TIMESTAMP},
};
static const char *const unit_names[] = {"s", "ms", "us", "ns"};

static const char *type_to_name(fsh_type_id t) {
  for (size_t k = 0; k < sizeof type_names / sizeof type_names[0]; k++)
    if (type_names[k].type == t) return type_names[k].name;
  return NULL;
}

/* Path-prefixed error. */
FSH_PRINTF(4, 5) static int perr(fsh_error *err, int code, const char *path, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return fsh_error_set(err, code, "expression JSON %s: %s", path, msg);
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static bool parse_date(const char *s, int64_t *days) {
  int y, m, d, used = 0;
  if (sscanf(s, "%5d-%2d-%2d%n", &y, &m, &d, &used) != 3 || s[used] != '\0') return false;
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || d < 1 || d > mdays[m - 1]) return false;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (m == 2 && d == 29 && !leap) return false;
  *days = days_from_civil(y, m, d);
  return true;
}

static int parse_literal(json_t *j, const char *path, fsh_expr **out, fsh_error *err) {
  json_t *v = json_object_get(j, "lit");
  json_t *jt = json_object_get(j, "type"), *ju = json_object_get(j, "unit");
  const char *key;
  json_t *val;
  json_object_foreach(j, key, val) {
    if (strcmp(key, "lit") != 0 && strcmp(key, "type") != 0 && strcmp(key, "unit") != 0)
      return perr(err, EINVAL, path, "literal: unknown key '%s'", key);
  }
  fsh_type_id t;
  if (!jt) {
    t = json_is_null(v) ? FSH_TYPE_NA : json_is_boolean(v) ? FSH_TYPE_BOOL
        : json_is_integer(v) ? FSH_TYPE_INT64 : json_is_real(v) ? FSH_TYPE_FLOAT64
        : FSH_TYPE_STRING;
    if (!json_is_null(v) && !json_is_boolean(v) && !json_is_number(v) && !json_is_string(v))
      return perr(err, EINVAL, path, "literal: a value must be null, a bool, a number or a string");
  } else {
    const char *tn = json_string_value(jt);
    bool found = false;
    for (size_t k = 0; tn && k < sizeof type_names / sizeof type_names[0]; k++)
      if (strcmp(tn, type_names[k].name) == 0) t = type_names[k].type, found = true;
    if (!found)
      return perr(err, EINVAL, path, "literal: unknown type %s%s%s", tn ? "'" : "",
                  tn ? tn : "(not a string)", tn ? "'" : "");
  }
  fsh_time_unit unit = FSH_MICRO;
  if (ju) {
    const char *un = json_string_value(ju);
    int found = -1;
    for (int k = 0; un && k < 4; k++)
      if (strcmp(un, unit_names[k]) == 0) found = k;
    if (t != FSH_TYPE_TIMESTAMP || found < 0)
      return perr(err, EINVAL, path, "literal: \"unit\" must be s, ms, us or ns, on a timestamp");
    unit = (fsh_time_unit)found;
  }
  fsh_expr *e = NULL;
  if (json_is_null(v)) {
    e = fsh_expr_null(t);
    if (e) e->lit_unit = unit;
  } else if (t == FSH_TYPE_BOOL) {
    if (!json_is_boolean(v)) return perr(err, EINVAL, path, "literal: a bool needs true or false");
    e = fsh_expr_bool(json_is_true(v));
  } else if (t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT64) {
    double d;
    const char *s = json_string_value(v);
    if (json_is_number(v))
      d = json_number_value(v);
    else if (s && strcmp(s, "NaN") == 0)
      d = NAN;
    else if (s && strcmp(s, "Infinity") == 0)
      d = INFINITY;
    else if (s && strcmp(s, "-Infinity") == 0)
      d = -INFINITY;
    else
      return perr(err, EINVAL, path, "literal: a %s needs a number", type_to_name(t));
    e = fsh_expr_float(t, d);
  } else if (t == FSH_TYPE_STRING) {
    if (!json_is_string(v)) return perr(err, EINVAL, path, "literal: utf8 needs a string");
    e = fsh_expr_string(json_string_value(v), (int64_t)json_string_length(v));
  } else if (t == FSH_TYPE_NA) {
    return perr(err, EINVAL, path, "literal: type null holds only null");
  } else {
    int64_t i;
    if (t == FSH_TYPE_DATE32 && json_is_string(v)) {
      if (!parse_date(json_string_value(v), &i))
        return perr(err, EINVAL, path, "literal: date32 '%s' is not a YYYY-MM-DD date",
                    json_string_value(v));
    } else if (json_is_integer(v)) {
      i = (int64_t)json_integer_value(v);
    } else {
      return perr(err, EINVAL, path, "literal: %s needs an integer", type_to_name(t));
    }
    e = t == FSH_TYPE_TIMESTAMP ? fsh_expr_timestamp(unit, i) : fsh_expr_int(t, i);
  }
  if (!e) return ev_oom(err);
  *out = e;
  return 0;
}

static int parse_node(json_t *j, const char *path, int depth, fsh_expr **out, fsh_error *err);

static int parse_call(json_t *j, const char *path, int depth, fsh_expr **out, fsh_error *err) {
  const char *opname = json_string_value(json_object_get(j, "op"));
  if (!opname) return perr(err, EINVAL, path, "\"op\" must be a string");
  int op = -1;
  for (int k = FSH_EXPR_ADD; k < FSH_EXPR_OP_COUNT_; k++)
    if (strcmp(opname, expr_op_name((fsh_expr_op)k)) == 0) op = k;
  if (op < 0) return perr(err, EINVAL, path, "unknown operator '%s'", opname);
  const char *key;
  json_t *val;
  json_object_foreach(j, key, val) {
    bool ok = strcmp(key, "op") == 0 || strcmp(key, "args") == 0 ||
              strcmp(key, "on_error") == 0 || (strcmp(key, "type") == 0 && op == FSH_EXPR_CAST);
    if (!ok) return perr(err, EINVAL, path, "operator '%s': unknown key '%s'", opname, key);
  }
  json_t *args = json_object_get(j, "args");
  if (!json_is_array(args))
    return perr(err, EINVAL, path, "operator '%s': \"args\" must be an array", opname);
  int n = (int)json_array_size(args), lo, hi;
  switch (op) {
  case FSH_EXPR_AND: case FSH_EXPR_OR: lo = 2, hi = 1 << 20; break;
  case FSH_EXPR_IN: lo = 1, hi = 1 << 20; break;
  case FSH_EXPR_NOT: case FSH_EXPR_IS_NULL: case FSH_EXPR_IS_NOT_NULL: case FSH_EXPR_CAST:
    lo = hi = 1;
    break;
  case FSH_EXPR_BETWEEN: lo = hi = 3; break;
  default: lo = hi = 2; break;
  }
  if (n < lo || n > hi) {
    if (lo == hi) return perr(err, EINVAL, path, "operator '%s': expected %d args, got %d", opname, lo, n);
    return perr(err, EINVAL, path, "operator '%s': expected at least %d args, got %d", opname, lo, n);
  }
  bool null_on_error = false;
  json_t *oe = json_object_get(j, "on_error");
  if (oe) {
    const char *s = json_string_value(oe);
    bool arith = op == FSH_EXPR_CAST || (op >= FSH_EXPR_ADD && op <= FSH_EXPR_MOD);
    if (!s || !arith || (strcmp(s, "null") != 0 && strcmp(s, "error") != 0))
      return perr(err, EINVAL, path, "operator '%s': \"on_error\" is \"error\" or \"null\", on "
                  "arithmetic and cast", opname);
    null_on_error = strcmp(s, "null") == 0;
  }
  fsh_type_id to = FSH_TYPE_NA;
  if (op == FSH_EXPR_CAST) {
    const char *tn = json_string_value(json_object_get(j, "type"));
    bool found = false;
    for (size_t k = 0; tn && k < sizeof type_names / sizeof type_names[0]; k++)
      if (strcmp(tn, type_names[k].name) == 0) to = type_names[k].type, found = true;
    if (!found) return perr(err, EINVAL, path, "operator 'cast': \"type\" must name a type");
  }
  fsh_expr **kids = fsh_calloc((size_t)n, sizeof *kids);
  if (!kids) return ev_oom(err);
  int rc = 0;
  for (int k = 0; k < n && rc == 0; k++) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s.args[%d]", path, k);
    rc = parse_node(json_array_get(args, (size_t)k), sub, depth + 1, &kids[k], err);
  }
  if (rc != 0) {
    for (int k = 0; k < n; k++) fsh_expr_free(kids[k]);
    fsh_free(kids);
    return rc;
  }
  fsh_expr *e = fsh_expr_call((fsh_expr_op)op, n, kids); /* takes the kids */
  fsh_free(kids);
  if (!e) return ev_oom(err);
  e->null_on_error = null_on_error;
  e->cast_to = to;
  *out = e;
  return 0;
}

static int parse_node(json_t *j, const char *path, int depth, fsh_expr **out, fsh_error *err) {
  *out = NULL;
  if (depth > 200) return perr(err, EINVAL, path, "expression nested deeper than 200 levels");
  if (!json_is_object(j)) return perr(err, EINVAL, path, "a node must be a JSON object");
  bool c = json_object_get(j, "col"), l = json_object_get(j, "lit") != NULL,
       o = json_object_get(j, "op");
  if (c + l + o != 1)
    return perr(err, EINVAL, path, "a node has exactly one of \"col\", \"lit\", \"op\"");
  if (l) return parse_literal(j, path, out, err);
  if (o) return parse_call(j, path, depth, out, err);
  if (json_object_size(j) != 1)
    return perr(err, EINVAL, path, "a column reference holds only \"col\"");
  const char *name = json_string_value(json_object_get(j, "col"));
  if (!name) return perr(err, EINVAL, path, "\"col\" must be a string");
  *out = fsh_expr_col(name);
  return *out ? 0 : ev_oom(err);
}

int fsh_expr_from_json(const char *text, int64_t len, fsh_expr **out, fsh_error *err) {
  *out = NULL;
  if (!text) return fsh_error_set(err, EINVAL, "expression JSON: NULL text");
  if (len < 0) len = (int64_t)strlen(text);
  json_error_t je;
  json_t *root = json_loadb(text, (size_t)len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return fsh_error_set(err, EINVAL, "expression JSON: line %d column %d: %s", je.line,
                         je.column, je.text);
  int rc = parse_node(root, "$", 0, out, err);
  json_decref(root);
  return rc;
}

/* ---- printing ------------------------------------------------------------ */

static json_t *lit_json(const fsh_expr *e) {
  json_t *j = json_object();
  if (!j) return NULL;
  json_t *v;
  fsh_type_id t = e->lit_type;
  bool default_type = false;
  if (e->lit_null) {
    v = json_null();
    default_type = t == FSH_TYPE_NA;
  } else if (t == FSH_TYPE_BOOL) {
    v = json_boolean(e->b);
    default_type = true;
  } else if (t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT64) {
    if (isnan(e->f))
      v = json_string("NaN");
    else if (isinf(e->f))
      v = json_string(e->f > 0 ? "Infinity" : "-Infinity");
    else
      v = json_real(e->f);
    default_type = t == FSH_TYPE_FLOAT64 && isfinite(e->f);
  } else if (t == FSH_TYPE_STRING) {
    v = json_stringn(e->s, (size_t)e->s_len);
    default_type = true;
  } else {
    v = json_integer(e->i);
    default_type = t == FSH_TYPE_INT64;
  }
  if (!v || json_object_set_new(j, "lit", v) != 0) {
    json_decref(j);
    return NULL;
  }
  const char *tn = type_to_name(t);
  if (!default_type && (!tn || json_object_set_new(j, "type", json_string(tn)) != 0)) {
    json_decref(j);
    return NULL;
  }
  if (t == FSH_TYPE_TIMESTAMP &&
      json_object_set_new(j, "unit", json_string(unit_names[e->lit_unit & 3])) != 0) {
    json_decref(j);
    return NULL;
  }
  return j;
}

static json_t *node_json(const fsh_expr *e) {
  if (e->op == FSH_EXPR_COLUMN) return json_pack("{s:s}", "col", e->name);
  if (e->op == FSH_EXPR_LITERAL) return lit_json(e);
  json_t *args = json_array();
  for (int k = 0; args && k < e->n_args; k++) {
    json_t *a = node_json(e->args[k]);
    if (!a || json_array_append_new(args, a) != 0) {
      json_decref(args);
      return NULL;
    }
  }
  if (!args) return NULL;
  json_t *j = json_pack("{s:s,s:o}", "op", expr_op_name(e->op), "args", args);
  if (!j) return NULL;
  int rc = 0;
  if (e->op == FSH_EXPR_CAST) {
    const char *tn = type_to_name(e->cast_to);
    rc = tn ? json_object_set_new(j, "type", json_string(tn)) : -1;
  }
  if (rc == 0 && e->null_on_error) rc = json_object_set_new(j, "on_error", json_string("null"));
  if (rc != 0) {
    json_decref(j);
    return NULL;
  }
  return j;
}

int fsh_expr_to_json(const fsh_expr *e, char **out, fsh_error *err) {
  *out = NULL;
  if (!e) return fsh_error_set(err, EINVAL, "expression JSON: NULL expression");
  json_t *j = node_json(e);
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  if (!s) return ev_oom(err);
  *out = fsh_strdup(s);
  free(s); /* jansson's allocation */
  return *out ? 0 : ev_oom(err);
}
