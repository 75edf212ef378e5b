/* plan_json.c -- the JSON plan format: parsed with jansson into the plan
 * builder calls of plan.c (which check every operator against its input).
 * Every error names the operator by position and id. */
#include "exec/plan_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>

typedef struct jctx {
  fsh_plan *p;
  int pos;            /* the operator's position in "nodes" */
  const char *op;
  const char *label;
  fsh_error *err;
  int n_labels;
  char **labels;      /* [pos] its id or NULL */
  int *ids;           /* [pos] its node id */
} jctx;

static int jfail(jctx *c, int code, const char *fmt, ...) FSH_PRINTF(3, 4);
static int jfail(jctx *c, int code, const char *fmt, ...) {
  char msg[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->label)
    return fsh_error_set(c->err, code, "plan operator %d (%s '%s'): %s", c->pos,
                         c->op ? c->op : "?", c->label, msg);
  return fsh_error_set(c->err, code, "plan operator %d (%s): %s", c->pos, c->op ? c->op : "?", msg);
}

/* Every member of o is one of the allowed names (NULL-terminated). */
static int check_members(jctx *c, json_t *o, const char *const *allowed) {
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    bool ok = false;
    for (int i = 0; allowed[i] && !ok; i++) ok = strcmp(allowed[i], key) == 0;
    if (!ok) return jfail(c, EINVAL, "unknown field '%s'", key);
  }
  return 0;
}

static int get_int(jctx *c, json_t *o, const char *name, int64_t def, int64_t lo, int64_t hi,
                   int64_t *out) {
  json_t *v = json_object_get(o, name);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!json_is_integer(v)) return jfail(c, EINVAL, "'%s' must be an integer", name);
  int64_t x = (int64_t)json_integer_value(v);
  if (x < lo || x > hi)
    return jfail(c, EINVAL, "'%s' is %lld, must be in [%lld, %lld]", name, (long long)x,
                 (long long)lo, (long long)hi);
  *out = x;
  return 0;
}

static int get_bool(jctx *c, json_t *o, const char *name, bool *out) {
  json_t *v = json_object_get(o, name);
  if (!v) {
    *out = false;
    return 0;
  }
  if (!json_is_boolean(v)) return jfail(c, EINVAL, "'%s' must be true or false", name);
  *out = json_is_true(v);
  return 0;
}

static int get_real(jctx *c, json_t *o, const char *name, double *out) {
  json_t *v = json_object_get(o, name);
  if (!v) {
    *out = 0;
    return 0;
  }
  if (!json_is_number(v)) return jfail(c, EINVAL, "'%s' must be a number", name);
  *out = json_number_value(v);
  return 0;
}

/* An optional string member (NULL when absent). */
static int get_str(jctx *c, json_t *o, const char *name, const char **out) {
  json_t *v = json_object_get(o, name);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_string(v)) return jfail(c, EINVAL, "'%s' must be a string", name);
  *out = json_string_value(v);
  return 0;
}

static int pick(jctx *c, const char *field, const char *value, const char *const *names, int n,
                int def, int *out) {
  if (!value) {
    *out = def;
    return 0;
  }
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], value) == 0) {
      *out = i;
      return 0;
    }
  char list[300] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof list; i++) {
    int w = snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", names[i]);
    if (w > 0) used += (size_t)w;
  }
  return jfail(c, EINVAL, "unknown %s '%s' (one of %s)", field, value, list);
}

/* The node id of an input named by `field` (a string: an operator's id),
 * or the previous operator when absent and def_previous. */
static int get_input(jctx *c, json_t *o, const char *field, bool def_previous, int *out) {
  json_t *v = json_object_get(o, field);
  if (!v) {
    if (!def_previous || c->pos == 0)
      return jfail(c, EINVAL, "needs '%s' (the id of an earlier operator)", field);
    *out = c->ids[c->pos - 1];
    return 0;
  }
  if (!json_is_string(v)) return jfail(c, EINVAL, "'%s' must be the id of an earlier operator", field);
  const char *name = json_string_value(v);
  for (int i = c->pos - 1; i >= 0; i--)
    if (c->labels[i] && strcmp(c->labels[i], name) == 0) {
      *out = c->ids[i];
      return 0;
    }
  return jfail(c, EINVAL, "'%s': no earlier operator has id '%s'", field, name);
}

static int parse_expr(jctx *c, json_t *j, const char *what, fsh_expr **out) {
  *out = NULL;
  if (!j) return jfail(c, EINVAL, "needs '%s' (an expression)", what);
  char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text) return jfail(c, ENOMEM, "out of memory");
  int rc = fsh_expr_from_json(text, -1, out, c->err);
  free(text);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", c->err->message);
    return jfail(c, rc, "%s: %s", what, msg);
  }
  return 0;
}

/* An array of strings (column names) into names[0, *n) (borrowed). */
static int get_names(jctx *c, json_t *o, const char *field, bool required, const char **names,
                     int max, int *n) {
  json_t *v = json_object_get(o, field);
  *n = 0;
  if (!v) return required ? jfail(c, EINVAL, "needs '%s' (a list of column names)", field) : 0;
  if (!json_is_array(v) || (int)json_array_size(v) > max)
    return jfail(c, EINVAL, "'%s' must be a list of at most %d column names", field, max);
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *e = json_array_get(v, i);
    if (!json_is_string(e)) return jfail(c, EINVAL, "'%s'[%zu] must be a column name", field, i);
    names[(*n)++] = json_string_value(e);
  }
  return 0;
}

/* Sort keys: ["col", {"column": "col", "descending": true, "nulls_first": true}]. */
static int get_sort_keys(jctx *c, json_t *o, const char *field, bool required,
                         fsh_plan_sort_key *keys, int *n) {
  json_t *v = json_object_get(o, field);
  *n = 0;
  if (!v) return required ? jfail(c, EINVAL, "needs '%s' (a list of sort keys)", field) : 0;
  if (!json_is_array(v) || json_array_size(v) > 64)
    return jfail(c, EINVAL, "'%s' must be a list of at most 64 keys", field);
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *e = json_array_get(v, i);
    fsh_plan_sort_key k = {0};
    if (json_is_string(e)) {
      k.column = json_string_value(e);
    } else if (json_is_object(e)) {
      static const char *const allowed[] = {"column", "descending", "nulls_first", NULL};
      int rc = check_members(c, e, allowed);
      if (!rc) rc = get_str(c, e, "column", &k.column);
      if (!rc) rc = get_bool(c, e, "descending", &k.descending);
      if (!rc) rc = get_bool(c, e, "nulls_first", &k.nulls_first);
      if (rc) return rc;
      if (!k.column) return jfail(c, EINVAL, "'%s'[%zu] needs 'column'", field, i);
    } else {
      return jfail(c, EINVAL, "'%s'[%zu] must be a column name or {\"column\": ...}", field, i);
    }
    keys[(*n)++] = k;
  }
  return 0;
}

static const char *const merge_names[] = {"auto", "on", "off"};

static int parse_scan(jctx *c, json_t *o, int *id) {
  static const char *const allowed[] = {"op", "id", "generate", "ipc", "columns", "rows",
                                        "batch_rows", "seed", "key_range", "with_nulls",
                                        "null_fraction", "skew", "groups", "partitions", NULL};
  int rc = check_members(c, o, allowed);
  if (rc) return rc;
  int64_t parts = 0;
  if ((rc = get_int(c, o, "partitions", 0, 0, 1 << 20, &parts)) != 0) return rc;
  const char *gen, *ipc;
  if ((rc = get_str(c, o, "generate", &gen)) != 0 || (rc = get_str(c, o, "ipc", &ipc)) != 0)
    return rc;
  if (!gen == !ipc) return jfail(c, EINVAL, "a scan needs exactly one of 'generate' and 'ipc'");
  if (ipc) {
    const char *cols[1024];
    int n_cols;
    if ((rc = get_names(c, o, "columns", false, cols, 1024, &n_cols)) != 0) return rc;
    return fsh_plan_scan_ipc(c->p, c->label, ipc, cols, n_cols, (int32_t)parts, id, c->err);
  }
  static const char *const gens[] = {"synthetic", "keyed"};
  int g;
  fsh_plan_gen_options opt = {0};
  int64_t batch_rows, seed, key_range, groups;
  if ((rc = pick(c, "generator", gen, gens, 2, 0, &g)) != 0 ||
      (rc = get_int(c, o, "rows", -1, 0, INT64_MAX / 2, &opt.rows)) != 0 ||
      (rc = get_int(c, o, "batch_rows", 8192, 1, 1 << 24, &batch_rows)) != 0 ||
      (rc = get_int(c, o, "seed", 1, 0, INT64_MAX, &seed)) != 0 ||
      (rc = get_int(c, o, "key_range", 0, 0, INT64_MAX, &key_range)) != 0 ||
      (rc = get_int(c, o, "groups", 0, 0, 1000000, &groups)) != 0 ||
      (rc = get_bool(c, o, "with_nulls", &opt.with_nulls)) != 0 ||
      (rc = get_real(c, o, "null_fraction", &opt.null_fraction)) != 0 ||
      (rc = get_real(c, o, "skew", &opt.skew)) != 0)
    return rc;
  if (opt.rows < 0) return jfail(c, EINVAL, "a generated scan needs 'rows'");
  opt.generator = g ? FSH_PLAN_GEN_KEYED : FSH_PLAN_GEN_SYNTHETIC;
  opt.batch_rows = (int32_t)batch_rows;
  opt.seed = (uint64_t)seed;
  opt.key_range = key_range;
  opt.groups = (int32_t)groups;
  return fsh_plan_scan_generated(c->p, c->label, &opt, (int32_t)parts, id, c->err);
}

static int parse_project(jctx *c, json_t *o, int input, int *id) {
  static const char *const allowed[] = {"op", "id", "input", "columns", NULL};
  int rc = check_members(c, o, allowed);
  if (rc) return rc;
  json_t *cols = json_object_get(o, "columns");
  if (!json_is_array(cols) || json_array_size(cols) == 0 || json_array_size(cols) > 4096)
    return jfail(c, EINVAL, "needs 'columns': a list of names or {\"name\": ..., \"expr\": ...}");
  int n = (int)json_array_size(cols);
  const char **names = fsh_calloc((size_t)n, sizeof *names);
  fsh_expr **exprs = fsh_calloc((size_t)n, sizeof *exprs);
  if (!names || !exprs) {
    fsh_free(names);
    fsh_free(exprs);
    return jfail(c, ENOMEM, "out of memory");
  }
  for (int i = 0; i < n && !rc; i++) {
    json_t *e = json_array_get(cols, (size_t)i);
    if (json_is_string(e)) {
      names[i] = json_string_value(e);
      if (!(exprs[i] = fsh_expr_col(names[i]))) rc = jfail(c, ENOMEM, "out of memory");
    } else if (json_is_object(e)) {
      static const char *const ok[] = {"name", "expr", NULL};
      rc = check_members(c, e, ok);
      if (!rc) rc = get_str(c, e, "name", &names[i]);
      if (!rc && !names[i]) rc = jfail(c, EINVAL, "'columns'[%d] needs 'name'", i);
      char what[64];
      snprintf(what, sizeof what, "'columns'[%d].expr", i);
      if (!rc) rc = parse_expr(c, json_object_get(e, "expr"), what, &exprs[i]);
    } else {
      rc = jfail(c, EINVAL, "'columns'[%d] must be a name or an object", i);
    }
  }
  if (!rc) {
    rc = fsh_plan_project(c->p, c->label, input, n, names, exprs, id, c->err);
  } else {
    for (int i = 0; i < n; i++) fsh_expr_free(exprs[i]);
  }
  fsh_free(names);
  fsh_free(exprs);
  return rc;
}

static int parse_aggregate(jctx *c, json_t *o, int input, int *id) {
  static const char *const allowed[] = {"op", "id", "input", "keys", "aggs", "local", NULL};
  int rc = check_members(c, o, allowed);
  if (rc) return rc;
  const char *keys[64];
  int n_keys;
  bool local = false;
  if ((rc = get_names(c, o, "keys", false, keys, 64, &n_keys)) != 0 ||
      (rc = get_bool(c, o, "local", &local)) != 0)
    return rc;
  json_t *aggs = json_object_get(o, "aggs");
  if (aggs && (!json_is_array(aggs) || json_array_size(aggs) > 256))
    return jfail(c, EINVAL, "'aggs' must be a list of at most 256 {\"fn\": ..., \"column\": ...}");
  fsh_plan_agg specs[256];
  int n_aggs = aggs ? (int)json_array_size(aggs) : 0;
  static const char *const fns[] = {"count_star", "count", "count_distinct", "sum", "avg", "min",
                                    "max"};
  for (int i = 0; i < n_aggs; i++) {
    json_t *a = json_array_get(aggs, (size_t)i);
    static const char *const ok[] = {"fn", "column", "name", NULL};
    const char *fn;
    int f = 0;
    if (!json_is_object(a)) return jfail(c, EINVAL, "'aggs'[%d] must be an object", i);
    if ((rc = check_members(c, a, ok)) != 0 || (rc = get_str(c, a, "fn", &fn)) != 0 ||
        (rc = get_str(c, a, "column", &specs[i].column)) != 0 ||
        (rc = get_str(c, a, "name", &specs[i].name)) != 0)
      return rc;
    if (!fn) return jfail(c, EINVAL, "'aggs'[%d] needs 'fn'", i);
    if ((rc = pick(c, "aggregate function", fn, fns, 7, 0, &f)) != 0) return rc;
    specs[i].fn = (fsh_agg_fn)f;
    if (f != FSH_AGG_COUNT_STAR && !specs[i].column)
      return jfail(c, EINVAL, "'aggs'[%d] (%s) needs 'column'", i, fn);
  }
  return fsh_plan_aggregate(c->p, c->label, input, keys, n_keys, specs, n_aggs, local, id, c->err);
}

static int parse_join(jctx *c, json_t *o, int *id) {
  static const char *const allowed[] = {"op", "id", "left", "right", "keys", "left_keys",
                                        "right_keys", "type", "strategy", NULL};
  int rc = check_members(c, o, allowed);
  if (rc) return rc;
  int left, right;
  if ((rc = get_input(c, o, "left", false, &left)) != 0 ||
      (rc = get_input(c, o, "right", false, &right)) != 0)
    return rc;
  const char *lk[64], *rk[64];
  int nl, nr;
  if (json_object_get(o, "keys")) {
    if ((rc = get_names(c, o, "keys", true, lk, 64, &nl)) != 0) return rc;
    memcpy(rk, lk, sizeof lk);
    nr = nl;
  } else if ((rc = get_names(c, o, "left_keys", true, lk, 64, &nl)) != 0 ||
             (rc = get_names(c, o, "right_keys", true, rk, 64, &nr)) != 0) {
    return rc;
  }
  if (nl != nr)
    return jfail(c, EINVAL, "'left_keys' has %d columns, 'right_keys' %d", nl, nr);
  static const char *const types[] = {"inner", "left", "right", "full", "left_semi", "left_anti"};
  static const char *const strategies[] = {"auto", "partitioned", "broadcast"};
  const char *ts, *ss;
  int t, s;
  if ((rc = get_str(c, o, "type", &ts)) != 0 || (rc = get_str(c, o, "strategy", &ss)) != 0 ||
      (rc = pick(c, "join type", ts, types, 6, 0, &t)) != 0 ||
      (rc = pick(c, "join strategy", ss, strategies, 3, 0, &s)) != 0)
    return rc;
  return fsh_plan_join(c->p, c->label, left, right, lk, rk, nl, (fsh_join_type)t,
                       (fsh_plan_join_strategy)s, id, c->err);
}

static int parse_node(jctx *c, json_t *o, int *id) {
  const char *op = NULL;
  json_t *jop = json_object_get(o, "op");
  if (!jop || !json_is_string(jop)) return jfail(c, EINVAL, "needs 'op' (a string)");
  op = json_string_value(jop);
  static const char *const ops[] = {"scan", "filter", "project", "aggregate", "join",
                                    "sort", "top_n", "limit", "into_batches", "repartition",
                                    "gather", "into_partitions"};
  int k = -1;
  for (int i = 0; i < 12; i++)
    if (strcmp(ops[i], op) == 0) k = i, c->op = ops[i];
  if (k < 0) {
    c->op = "?";
    return jfail(c, EINVAL, "unknown operator '%s' (one of scan, filter, project, aggregate, "
                            "join, sort, top_n, limit, into_batches, repartition, gather, "
                            "into_partitions)", op);
  }
  int rc, input = -1;
  if (k == 0) return parse_scan(c, o, id);
  if (k == 4) return parse_join(c, o, id);
  if ((rc = get_input(c, o, "input", true, &input)) != 0) return rc;
  if (k == 2) return parse_project(c, o, input, id);
  if (k == 3) return parse_aggregate(c, o, input, id);
  if (k == 1) {
    static const char *const allowed[] = {"op", "id", "input", "predicate", NULL};
    fsh_expr *e;
    if ((rc = check_members(c, o, allowed)) != 0 ||
        (rc = parse_expr(c, json_object_get(o, "predicate"), "predicate", &e)) != 0)
      return rc;
    return fsh_plan_filter(c->p, c->label, input, e, id, c->err);
  }
  if (k == 5 || k == 6) {
    static const char *const allowed[] = {"op", "id", "input", "keys", "n", "local", "sample_rows",
                                          NULL};
    fsh_plan_sort_key keys[64];
    int n_keys;
    bool local = false;
    int64_t n = 0, sample = 0;
    if ((rc = check_members(c, o, allowed)) != 0 ||
        (rc = get_sort_keys(c, o, "keys", true, keys, &n_keys)) != 0 ||
        (rc = get_bool(c, o, "local", &local)) != 0 ||
        (rc = get_int(c, o, "n", -1, 0, INT64_MAX, &n)) != 0 ||
        (rc = get_int(c, o, "sample_rows", 0, 0, 1 << 24, &sample)) != 0)
      return rc;
    if (k == 5) {
      if (json_object_get(o, "n")) return jfail(c, EINVAL, "a sort takes no 'n' (use top_n)");
      return fsh_plan_sort(c->p, c->label, input, keys, n_keys, local, sample, id, c->err);
    }
    if (n < 0) return jfail(c, EINVAL, "needs 'n'");
    return fsh_plan_top_n(c->p, c->label, input, keys, n_keys, n, local, id, c->err);
  }
  if (k == 7) {
    static const char *const allowed[] = {"op", "id", "input", "n", "local", NULL};
    int64_t n = 0;
    bool local = false;
    if ((rc = check_members(c, o, allowed)) != 0 ||
        (rc = get_int(c, o, "n", -1, 0, INT64_MAX, &n)) != 0 ||
        (rc = get_bool(c, o, "local", &local)) != 0)
      return rc;
    if (n < 0) return jfail(c, EINVAL, "needs 'n'");
    return fsh_plan_limit(c->p, c->label, input, n, local, id, c->err);
  }
  if (k == 8) {
    static const char *const allowed[] = {"op", "id", "input", "rows", NULL};
    int64_t rows = 0;
    if ((rc = check_members(c, o, allowed)) != 0 ||
        (rc = get_int(c, o, "rows", -1, 1, INT64_MAX, &rows)) != 0)
      return rc;
    if (rows < 0) return jfail(c, EINVAL, "needs 'rows'");
    return fsh_plan_into_batches(c->p, c->label, input, rows, id, c->err);
  }
  if (k == 9) {
    static const char *const allowed[] = {"op", "id", "input", "by", "keys", "partitions", "seed",
                                          "sample_rows", "pre_shuffle_merge", NULL};
    static const char *const bys[] = {"hash", "random", "range"};
    const char *by, *merge;
    int b = 0, m = 0;
    fsh_plan_sort_key keys[64];
    int n_keys;
    int64_t parts = 0, seed = 0, sample = 0;
    if ((rc = check_members(c, o, allowed)) != 0 || (rc = get_str(c, o, "by", &by)) != 0 ||
        (rc = get_str(c, o, "pre_shuffle_merge", &merge)) != 0)
      return rc;
    if (!by) return jfail(c, EINVAL, "needs 'by' (hash, random or range)");
    if ((rc = pick(c, "partitioning", by, bys, 3, 0, &b)) != 0 ||
        (rc = pick(c, "pre_shuffle_merge", merge, merge_names, 3, 0, &m)) != 0 ||
        (rc = get_sort_keys(c, o, "keys", false, keys, &n_keys)) != 0 ||
        (rc = get_int(c, o, "partitions", 0, 0, 1 << 20, &parts)) != 0 ||
        (rc = get_int(c, o, "seed", 0, 0, INT64_MAX, &seed)) != 0 ||
        (rc = get_int(c, o, "sample_rows", 0, 0, 1 << 24, &sample)) != 0)
      return rc;
    return fsh_plan_repartition(c->p, c->label, input, (fsh_plan_partitioning)b, keys, n_keys,
                                (int32_t)parts, (uint64_t)seed, sample, (fsh_plan_merge)m, id,
                                c->err);
  }
  if (k == 10) {
    static const char *const allowed[] = {"op", "id", "input", NULL};
    if ((rc = check_members(c, o, allowed)) != 0) return rc;
    return fsh_plan_gather(c->p, c->label, input, id, c->err);
  }
  static const char *const allowed[] = {"op", "id", "input", "partitions", NULL};
  int64_t parts = 0;
  if ((rc = check_members(c, o, allowed)) != 0 ||
      (rc = get_int(c, o, "partitions", -1, 1, 1 << 20, &parts)) != 0)
    return rc;
  if (parts < 0) return jfail(c, EINVAL, "needs 'partitions'");
  return fsh_plan_into_partitions(c->p, c->label, input, (int32_t)parts, id, c->err);
}

int fsh_plan_from_json(const char *text, int64_t len, int32_t default_partitions, fsh_plan **out,
                       fsh_error *err) {
  *out = NULL;
  json_error_t jerr;
  json_t *root = json_loadb(text, len < 0 ? strlen(text) : (size_t)len, 0, &jerr);
  if (!root)
    return fsh_error_set(err, EINVAL, "plan JSON: line %d column %d: %s", jerr.line, jerr.column,
                         jerr.text);
  int rc = 0;
  jctx c = {.err = err};
  json_t *nodes = json_object_get(root, "nodes");
  const char *key;
  json_t *v;
  if (!json_is_object(root) || !json_is_array(nodes) || json_array_size(nodes) == 0) {
    rc = fsh_error_set(err, EINVAL, "plan JSON: expected an object with \"nodes\": [...] (at "
                                    "least one operator)");
    goto done;
  }
  json_object_foreach(root, key, v) {
    if (strcmp(key, "nodes") && strcmp(key, "partitions") && strcmp(key, "pre_shuffle_merge") &&
        strcmp(key, "merge_threshold") && strcmp(key, "comment") && strcmp(key, "name")) {
      rc = fsh_error_set(err, EINVAL, "plan JSON: unknown field '%s'", key);
      goto done;
    }
  }
  json_t *jp = json_object_get(root, "partitions");
  int64_t parts = 4;
  if (jp && (!json_is_integer(jp) || json_integer_value(jp) < 1 ||
             json_integer_value(jp) > (1 << 20))) {
    rc = fsh_error_set(err, EINVAL, "plan JSON: 'partitions' must be an integer in [1, 2^20]");
    goto done;
  }
  if (jp) parts = (int64_t)json_integer_value(jp);
  if (default_partitions > 0) parts = default_partitions;
  if ((rc = fsh_plan_new((int32_t)parts, &c.p, err)) != 0) goto done;
  json_t *jm = json_object_get(root, "pre_shuffle_merge");
  if (jm) {
    int m = -1;
    for (int i = 0; i < 3; i++)
      if (json_is_string(jm) && strcmp(json_string_value(jm), merge_names[i]) == 0) m = i;
    if (m < 0) {
      rc = fsh_error_set(err, EINVAL, "plan JSON: 'pre_shuffle_merge' must be auto, on or off");
      goto done;
    }
    c.p->merge = (fsh_plan_merge)m;
  }
  json_t *jt = json_object_get(root, "merge_threshold");
  if (jt) {
    if (!json_is_integer(jt) || json_integer_value(jt) < 1) {
      rc = fsh_error_set(err, EINVAL, "plan JSON: 'merge_threshold' must be an integer >= 1");
      goto done;
    }
    c.p->merge_threshold = (int64_t)json_integer_value(jt);
  }
  c.n_labels = (int)json_array_size(nodes);
  c.labels = fsh_calloc((size_t)c.n_labels, sizeof *c.labels);
  c.ids = fsh_calloc((size_t)c.n_labels, sizeof *c.ids);
  if (!c.labels || !c.ids) {
    rc = fsh_error_set(err, ENOMEM, "plan JSON: out of memory");
    goto done;
  }
  for (int i = 0; i < c.n_labels && !rc; i++) {
    json_t *o = json_array_get(nodes, (size_t)i);
    c.pos = i;
    c.op = NULL;
    c.label = NULL;
    if (!json_is_object(o)) {
      rc = fsh_error_set(err, EINVAL, "plan operator %d: expected an object", i);
      break;
    }
    json_t *jop = json_object_get(o, "op");
    c.op = json_is_string(jop) ? json_string_value(jop) : "?";
    json_t *jid = json_object_get(o, "id");
    if (jid && !json_is_string(jid)) {
      rc = jfail(&c, EINVAL, "'id' must be a string");
      break;
    }
    if (jid) {
      c.label = json_string_value(jid);
      for (int k = 0; k < i; k++)
        if (c.labels[k] && strcmp(c.labels[k], c.label) == 0) {
          rc = jfail(&c, EINVAL, "id '%s' is already operator %d's", c.label, k);
          break;
        }
      if (rc) break;
      if (!(c.labels[i] = fsh_strdup(c.label))) {
        rc = jfail(&c, ENOMEM, "out of memory");
        break;
      }
    }
    rc = parse_node(&c, o, &c.ids[i]);
  }
done:
  if (c.labels)
    for (int i = 0; i < c.n_labels; i++) fsh_free(c.labels[i]);
  fsh_free(c.labels);
  fsh_free(c.ids);
  json_decref(root);
  if (rc) {
    fsh_plan_free(c.p);
    return rc;
  }
  *out = c.p;
  return 0;
}
