/* plan.c -- building plans: the C builder calls, which check every
 * operator against its input's schema as it is added and expand the
 * logical operators (aggregate, join, sort, top-N, limit) into physical
 * nodes and exchanges; the stage cut and fsh_plan_explain. */
#include "exec/plan_internal.h"
#include "exec/exec_internal.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* ---- nodes ----------------------------------------------------------------- */

static void strv_free(char **v, int64_t n) {
  if (!v) return;
  for (int64_t i = 0; i < n; i++) fsh_free(v[i]);
  fsh_free(v);
}

static void node_free(plan_node *n) {
  if (!n) return;
  fsh_free(n->label);
  fsh_schema_unref(n->schema);
  fsh_free(n->order_keys);
  strv_free(n->files, n->n_files);
  strv_free(n->columns, n->n_columns);
  if (n->column_exprs)
    for (int32_t i = 0; i < n->n_columns; i++) fsh_expr_free(n->column_exprs[i]);
  fsh_free(n->column_exprs);
  if (n->exprs)
    for (int32_t i = 0; i < n->n_exprs; i++) fsh_expr_free(n->exprs[i]);
  fsh_free(n->exprs);
  strv_free(n->names, n->n_exprs);
  fsh_schema_unref(n->agg_input);
  fsh_free(n->keys);
  fsh_free(n->keys2);
  fsh_free(n->sort_order);
  fsh_free(n->aggs);
  strv_free(n->agg_names, n->n_aggs);
  fsh_free(n);
}

const char *plan_exchange_name(px_kind k) {
  static const char *names[PX_KIND_COUNT_] = {"hash", "random", "range", "gather",
                                              "into_partitions"};
  return (unsigned)k < PX_KIND_COUNT_ ? names[k] : "?";
}

const char *plan_node_name(const plan_node *n, char *buf, size_t size) {
  if (n->label)
    snprintf(buf, size, "plan operator %d (%s '%s')", n->user_pos, n->user_op, n->label);
  else
    snprintf(buf, size, "plan operator %d (%s)", n->user_pos, n->user_op);
  return buf;
}

int fsh_plan_new(int32_t default_partitions, fsh_plan **out, fsh_error *err) {
  *out = NULL;
  if (default_partitions < 1)
    return fsh_error_set(err, EINVAL, "plan: default partitions must be >= 1, got %d",
                         (int)default_partitions);
  fsh_plan *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "plan: out of memory");
  p->default_partitions = default_partitions;
  p->merge_threshold = 200;
  *out = p;
  return 0;
}

void fsh_plan_free(fsh_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n_nodes; i++) node_free(p->nodes[i]);
  fsh_free(p->nodes);
  fsh_free(p);
}

void fsh_plan_set_default_partitions(fsh_plan *p, int32_t n) {
  if (n >= 1) p->default_partitions = n;
}

fsh_schema *fsh_plan_schema(const fsh_plan *p) {
  return p->n_nodes ? p->nodes[p->n_nodes - 1]->schema : NULL;
}

int32_t fsh_plan_output_partitions(const fsh_plan *p) {
  return p->n_nodes ? p->nodes[p->n_nodes - 1]->n_partitions : 0;
}

fsh_plan_order fsh_plan_output_order(const fsh_plan *p, int32_t *n_keys, const int32_t **key_cols,
                                     bool *rows_determined) {
  if (!p->n_nodes) {
    *n_keys = 0, *key_cols = NULL, *rows_determined = true;
    return FSH_PLAN_ORDER_NONE;
  }
  const plan_node *n = p->nodes[p->n_nodes - 1];
  *n_keys = n->n_order_keys;
  *key_cols = n->order_keys;
  *rows_determined = n->rows_determined;
  return n->order;
}

/* The builder of one user-level operator: its nodes are appended as they
 * are made; on failure everything it appended goes. */
typedef struct builder {
  fsh_plan *p;
  int first_node;
  int user_pos;
  const char *op;
  const char *label;
  fsh_error *err;
  char name[160];
} builder;

static void b_begin(builder *b, fsh_plan *p, const char *op, const char *label, fsh_error *err) {
  b->p = p;
  b->first_node = p->n_nodes;
  b->user_pos = p->n_user;
  b->op = op;
  b->label = label;
  b->err = err;
  if (label)
    snprintf(b->name, sizeof b->name, "plan operator %d (%s '%s')", b->user_pos, op, label);
  else
    snprintf(b->name, sizeof b->name, "plan operator %d (%s)", b->user_pos, op);
}

/* Fails the operator: drops its nodes, sets the message. */
static int b_fail(builder *b, int code, const char *fmt, ...) FSH_PRINTF(3, 4);
static int b_fail(builder *b, int code, const char *fmt, ...) {
  while (b->p->n_nodes > b->first_node) node_free(b->p->nodes[--b->p->n_nodes]);
  if (fmt) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fsh_error_set(b->err, code, "%s: %s", b->name, msg);
  }
  return fsh_error_prefix(b->err, code, "%s: ", b->name);
}

static int b_done(builder *b, int *id) {
  b->p->n_user++;
  *id = b->p->n_nodes - 1;
  return 0;
}

/* A new node appended to the plan (NULL on ENOMEM, message set). */
static plan_node *b_node(builder *b, pn_kind kind) {
  fsh_plan *p = b->p;
  if (p->n_nodes == p->cap_nodes) {
    int cap = p->cap_nodes ? p->cap_nodes * 2 : 16;
    plan_node **nodes = fsh_realloc(p->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) return NULL;
    p->nodes = nodes, p->cap_nodes = cap;
  }
  plan_node *n = fsh_calloc(1, sizeof *n);
  if (!n) return NULL;
  if (b->label && !(n->label = fsh_strdup(b->label))) {
    fsh_free(n);
    return NULL;
  }
  n->kind = kind;
  n->id = p->n_nodes;
  n->user_pos = b->user_pos;
  n->user_op = b->op;
  n->rows_determined = true;
  n->limit_hint = -1;
  p->nodes[p->n_nodes++] = n;
  return n;
}

static int b_input(builder *b, int input, const char *what, plan_node **out) {
  if (input < 0 || input >= b->p->n_nodes)
    return b_fail(b, EINVAL, "%s %d is not an operator added before this one", what, input);
  *out = b->p->nodes[input];
  return 0;
}

/* The index of column `name` in s, or an EINVAL naming it and s's columns. */
static int find_column(builder *b, const fsh_schema *s, const char *name, const char *role,
                       int32_t *out) {
  if (name)
    for (int64_t i = 0; i < s->n_fields; i++)
      if (strcmp(s->fields[i].name, name) == 0) {
        *out = (int32_t)i;
        return 0;
      }
  char have[600];
  size_t used = 0;
  have[0] = 0;
  for (int64_t i = 0; i < s->n_fields && used + 4 < sizeof have; i++) {
    int w = snprintf(have + used, sizeof have - used, "%s'%s'", i ? ", " : "", s->fields[i].name);
    if (w > 0) used += (size_t)w;
  }
  if (used >= sizeof have) used = sizeof have - 1;
  return b_fail(b, EINVAL, "%sunknown column '%s' (the schema has %s)", role, name ? name : "(null)",
                have);
}

/* Copies the input's order into n (the same schema). */
static int inherit_order(plan_node *n, const plan_node *in) {
  n->order = in->order;
  n->rows_determined = in->rows_determined;
  n->n_order_keys = 0;
  n->order_keys = NULL;
  if (in->n_order_keys) {
    if (!(n->order_keys = fsh_malloc((size_t)in->n_order_keys * sizeof *n->order_keys)))
      return ENOMEM;
    memcpy(n->order_keys, in->order_keys, (size_t)in->n_order_keys * sizeof *n->order_keys);
    n->n_order_keys = in->n_order_keys;
  }
  return 0;
}

static int set_keys_order(plan_node *n, const int32_t *keys, int32_t n_keys) {
  n->order = FSH_PLAN_ORDER_KEYS;
  if (!(n->order_keys = fsh_malloc((size_t)(n_keys ? n_keys : 1) * sizeof *n->order_keys)))
    return ENOMEM;
  memcpy(n->order_keys, keys, (size_t)n_keys * sizeof *keys);
  n->n_order_keys = n_keys;
  return 0;
}

/* An exchange of `in` appended (keys/order copied). */
static int b_exchange(builder *b, const plan_node *in, px_kind kind, int32_t n_out,
                      const int32_t *keys, const fsh_sort_key *order, int32_t n_keys,
                      plan_node **out) {
  plan_node *x = b_node(b, PN_EXCHANGE);
  if (!x) return b_fail(b, ENOMEM, "out of memory");
  x->xkind = kind;
  x->n_inputs = 1;
  x->inputs[0] = in->id;
  x->schema = fsh_schema_ref(in->schema);
  x->n_partitions = kind == PX_GATHER ? 1 : n_out;
  x->sample_rows = 1000;
  if (n_keys > 0) {
    x->keys = fsh_malloc((size_t)n_keys * sizeof *x->keys);
    x->sort_order = fsh_calloc((size_t)n_keys, sizeof *x->sort_order);
    if (!x->keys || !x->sort_order) return b_fail(b, ENOMEM, "out of memory");
    memcpy(x->keys, keys, (size_t)n_keys * sizeof *keys);
    if (order) memcpy(x->sort_order, order, (size_t)n_keys * sizeof *order);
    x->n_keys = n_keys;
  }
  if (kind == PX_GATHER || kind == PX_INTO_PARTITIONS) {
    if (inherit_order(x, in)) return b_fail(b, ENOMEM, "out of memory");
  } else {
    x->order = FSH_PLAN_ORDER_NONE;
    x->rows_determined = in->rows_determined;
  }
  *out = x;
  return 0;
}

/* ---- scans ----------------------------------------------------------------- */

int fsh_plan_scan_generated(fsh_plan *p, const char *label, const fsh_plan_gen_options *o,
                            int32_t partitions, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "scan", label, err);
  if (!o || o->rows < 0 || o->batch_rows < 1 || partitions < 0)
    return b_fail(&b, EINVAL, "a generated scan needs rows >= 0, batch_rows >= 1 and partitions "
                              ">= 0");
  if (o->generator != FSH_PLAN_GEN_SYNTHETIC && o->generator != FSH_PLAN_GEN_KEYED)
    return b_fail(&b, EINVAL, "unknown generator %d", (int)o->generator);
  if (o->skew < 0 || o->skew > 1 || o->null_fraction < 0 || o->null_fraction > 1 || o->groups < 0 ||
      o->key_range < 0)
    return b_fail(&b, EINVAL, "skew and null_fraction must be in [0, 1], groups and key_range >= 0");
  plan_node *n = b_node(&b, PN_SCAN_GEN);
  if (!n) return b_fail(&b, ENOMEM, "out of memory");
  n->gen = *o;
  n->n_partitions = partitions ? partitions : p->default_partitions;
  n->schema = o->generator == FSH_PLAN_GEN_SYNTHETIC ? fsh_synthetic_schema() : fsh_keyed_schema();
  if (!n->schema) return b_fail(&b, ENOMEM, "out of memory");
  n->order = FSH_PLAN_ORDER_EXACT;
  return b_done(&b, id);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The IPC files of path: itself, or a directory's regular files (not
 * starting with '.'), by name. */
static int list_files(builder *b, const char *path, char ***out, int64_t *n_out) {
  struct stat st;
  if (stat(path, &st) != 0) return b_fail(b, EINVAL, "cannot open '%s': %s", path, strerror(errno));
  char **v = NULL;
  int64_t n = 0, cap = 0;
  if (!S_ISDIR(st.st_mode)) {
    if (!(v = fsh_calloc(1, sizeof *v)) || !(v[0] = fsh_strdup(path))) {
      fsh_free(v);
      return b_fail(b, ENOMEM, "out of memory");
    }
    *out = v, *n_out = 1;
    return 0;
  }
  DIR *d = opendir(path);
  if (!d) return b_fail(b, EINVAL, "cannot open directory '%s': %s", path, strerror(errno));
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    char *full = fsh_malloc(len);
    if (!full) {
      rc = ENOMEM;
      break;
    }
    snprintf(full, len, "%s/%s", path, e->d_name);
    if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
      fsh_free(full);
      continue;
    }
    if (n == cap) {
      int64_t c = cap ? cap * 2 : 16;
      char **nv = fsh_realloc(v, (size_t)c * sizeof *nv);
      if (!nv) {
        fsh_free(full);
        rc = ENOMEM;
        break;
      }
      v = nv, cap = c;
    }
    v[n++] = full;
  }
  closedir(d);
  if (rc) {
    strv_free(v, n);
    return b_fail(b, rc, "out of memory listing '%s'", path);
  }
  if (n == 0) {
    fsh_free(v);
    return b_fail(b, EINVAL, "directory '%s' holds no files", path);
  }
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  *out = v, *n_out = n;
  return 0;
}

int fsh_plan_scan_ipc(fsh_plan *p, const char *label, const char *path,
                      const char *const *columns, int n_columns, int32_t partitions, int *id,
                      fsh_error *err) {
  builder b;
  b_begin(&b, p, "scan", label, err);
  if (!path || n_columns < 0 || partitions < 0)
    return b_fail(&b, EINVAL, "an IPC scan needs a path, n_columns >= 0 and partitions >= 0");
  plan_node *n = b_node(&b, PN_SCAN_IPC);
  if (!n) return b_fail(&b, ENOMEM, "out of memory");
  int rc = list_files(&b, path, &n->files, &n->n_files);
  if (rc) return rc;
  fsh_schema *file_schema = NULL;
  for (int64_t i = 0; i < n->n_files; i++) {
    fsh_batch_stream s;
    if ((rc = fsh_ipc_open_path(n->files[i], &s, err)) != 0) {
      fsh_schema_unref(file_schema);
      return b_fail(&b, rc, NULL);
    }
    fsh_error diff;
    bool same = !file_schema || fsh_schema_equals(file_schema, s.schema, false, &diff);
    if (!file_schema) file_schema = fsh_schema_ref(s.schema);
    s.release(&s);
    if (!same) {
      fsh_schema_unref(file_schema);
      return b_fail(&b, EINVAL, "'%s' has another schema than '%s': %s", n->files[i],
                    n->files[0], diff.message);
    }
  }
  if (n_columns == 0) {
    n->schema = file_schema;
  } else {
    n->columns = fsh_calloc((size_t)n_columns, sizeof *n->columns);
    n->column_exprs = fsh_calloc((size_t)n_columns, sizeof *n->column_exprs);
    if (!n->columns || !n->column_exprs) {
      fsh_schema_unref(file_schema);
      return b_fail(&b, ENOMEM, "out of memory");
    }
    n->n_columns = n_columns;
    for (int i = 0; i < n_columns; i++) {
      int32_t col;
      if ((rc = find_column(&b, file_schema, columns[i], "", &col)) != 0) {
        fsh_schema_unref(file_schema);
        return rc;
      }
      if (!(n->columns[i] = fsh_strdup(columns[i])) ||
          !(n->column_exprs[i] = fsh_expr_col(columns[i]))) {
        fsh_schema_unref(file_schema);
        return b_fail(&b, ENOMEM, "out of memory");
      }
    }
    rc = fsh_project_schema(file_schema, n_columns, (const char *const *)n->columns,
                            n->column_exprs, &n->schema, err);
    fsh_schema_unref(file_schema);
    if (rc) return b_fail(&b, rc, NULL);
  }
  n->n_partitions = partitions ? partitions : (int32_t)n->n_files;
  n->order = FSH_PLAN_ORDER_EXACT;
  return b_done(&b, id);
}

/* ---- narrow operators -------------------------------------------------------- */

int fsh_plan_filter(fsh_plan *p, const char *label, int input, fsh_expr *predicate, int *id,
                    fsh_error *err) {
  builder b;
  b_begin(&b, p, "filter", label, err);
  plan_node *in = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc) {
    fsh_expr_free(predicate);
    return rc;
  }
  if (!predicate) return b_fail(&b, EINVAL, "a filter needs a predicate");
  plan_node *n = b_node(&b, PN_FILTER);
  if (!n || !(n->exprs = fsh_calloc(1, sizeof *n->exprs))) {
    fsh_expr_free(predicate);
    return b_fail(&b, ENOMEM, "out of memory");
  }
  n->exprs[0] = predicate;
  n->n_exprs = 1;
  if ((rc = fsh_expr_bind_predicate(predicate, in->schema, err)) != 0) return b_fail(&b, rc, NULL);
  n->n_inputs = 1;
  n->inputs[0] = in->id;
  n->schema = fsh_schema_ref(in->schema);
  n->n_partitions = in->n_partitions;
  if (inherit_order(n, in)) return b_fail(&b, ENOMEM, "out of memory");
  return b_done(&b, id);
}

int fsh_plan_project(fsh_plan *p, const char *label, int input, int n_exprs,
                     const char *const *names, fsh_expr *const *exprs, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "project", label, err);
  plan_node *in = NULL;
  int rc = b_input(&b, input, "input", &in);
  plan_node *n = rc ? NULL : b_node(&b, PN_PROJECT);
  if (n && n_exprs > 0) {
    n->exprs = fsh_calloc((size_t)n_exprs, sizeof *n->exprs);
    n->names = fsh_calloc((size_t)n_exprs, sizeof *n->names);
    if (n->exprs && n->names) n->n_exprs = n_exprs;
  }
  if (rc || !n || (n_exprs > 0 && !n->n_exprs)) {
    for (int i = 0; i < n_exprs; i++) fsh_expr_free(exprs[i]);
    return rc ? rc : b_fail(&b, ENOMEM, "out of memory");
  }
  bool oom = false;
  for (int i = 0; i < n_exprs; i++) {
    n->exprs[i] = exprs[i];
    if (!exprs[i] || !names[i] || !(n->names[i] = fsh_strdup(names[i]))) oom = true;
  }
  if (n_exprs < 1 || oom)
    return b_fail(&b, EINVAL, n_exprs < 1 ? "a projection needs at least one column"
                                          : "a column without a name or expression (or ENOMEM)");
  for (int i = 0; i < n_exprs; i++)
    for (int j = 0; j < i; j++)
      if (strcmp(n->names[i], n->names[j]) == 0)
        return b_fail(&b, EINVAL, "two output columns named '%s'", n->names[i]);
  if ((rc = fsh_project_schema(in->schema, n_exprs, (const char *const *)n->names, n->exprs,
                               &n->schema, err)) != 0)
    return b_fail(&b, rc, NULL);
  n->n_inputs = 1;
  n->inputs[0] = in->id;
  n->n_partitions = in->n_partitions;
  n->rows_determined = in->rows_determined;
  n->order = in->order;
  if (in->order == FSH_PLAN_ORDER_KEYS) {
    /* the order survives when every key passes through as a bare column */
    int32_t *keys = fsh_malloc((size_t)in->n_order_keys * sizeof *keys);
    if (!keys) return b_fail(&b, ENOMEM, "out of memory");
    for (int32_t k = 0; k < in->n_order_keys && n->order == FSH_PLAN_ORDER_KEYS; k++) {
      const char *kname = in->schema->fields[in->order_keys[k]].name;
      n->order = FSH_PLAN_ORDER_NONE;
      for (int i = 0; i < n_exprs; i++)
        if (n->exprs[i]->op == FSH_EXPR_COLUMN && strcmp(n->exprs[i]->name, kname) == 0) {
          keys[k] = i;
          n->order = FSH_PLAN_ORDER_KEYS;
          break;
        }
    }
    if (n->order == FSH_PLAN_ORDER_KEYS) {
      n->order_keys = keys;
      n->n_order_keys = in->n_order_keys;
    } else {
      fsh_free(keys);
    }
  }
  return b_done(&b, id);
}

int fsh_plan_into_batches(fsh_plan *p, const char *label, int input, int64_t rows, int *id,
                          fsh_error *err) {
  builder b;
  b_begin(&b, p, "into_batches", label, err);
  plan_node *in = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc) return rc;
  if (rows < 1) return b_fail(&b, EINVAL, "rows must be >= 1, got %lld", (long long)rows);
  plan_node *n = b_node(&b, PN_INTO_BATCHES);
  if (!n) return b_fail(&b, ENOMEM, "out of memory");
  n->n = rows;
  n->n_inputs = 1;
  n->inputs[0] = in->id;
  n->schema = fsh_schema_ref(in->schema);
  n->n_partitions = in->n_partitions;
  if (inherit_order(n, in)) return b_fail(&b, ENOMEM, "out of memory");
  return b_done(&b, id);
}

/* ---- aggregate --------------------------------------------------------------- */

static plan_node *b_agg_node(builder *b, const plan_node *in, fsh_schema *agg_input,
                             const int32_t *keys, int n_keys, const fsh_agg_spec *specs,
                             int n_aggs, fsh_agg_mode mode) {
  plan_node *n = b_node(b, PN_AGG);
  if (!n) return NULL;
  n->agg_mode = mode;
  n->agg_input = fsh_schema_ref(agg_input);
  n->n_inputs = 1;
  n->inputs[0] = in->id;
  n->n_partitions = in->n_partitions;
  n->keys = fsh_malloc((size_t)(n_keys ? n_keys : 1) * sizeof *n->keys);
  n->aggs = fsh_calloc((size_t)(n_aggs ? n_aggs : 1), sizeof *n->aggs);
  n->agg_names = fsh_calloc((size_t)(n_aggs ? n_aggs : 1), sizeof *n->agg_names);
  if (!n->keys || !n->aggs || !n->agg_names) return NULL;
  memcpy(n->keys, keys, (size_t)n_keys * sizeof *keys);
  n->n_keys = n_keys;
  n->n_aggs = n_aggs;
  for (int i = 0; i < n_aggs; i++) {
    n->aggs[i] = specs[i];
    n->aggs[i].name = NULL;
    if (specs[i].name) {
      if (!(n->agg_names[i] = fsh_strdup(specs[i].name))) return NULL;
      n->aggs[i].name = n->agg_names[i];
    }
  }
  return n;
}

int fsh_plan_aggregate(fsh_plan *p, const char *label, int input, const char *const *keys,
                       int n_keys, const fsh_plan_agg *aggs, int n_aggs, bool local, int *id,
                       fsh_error *err) {
  builder b;
  b_begin(&b, p, "aggregate", label, err);
  plan_node *in = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc) return rc;
  if (n_keys < 0 || n_aggs < 0 || n_keys + n_aggs == 0 || n_keys > 64 || n_aggs > 256)
    return b_fail(&b, EINVAL, "an aggregate needs 0..64 keys and 0..256 aggregates, not none");
  int32_t key_cols[64];
  fsh_agg_spec specs[256];
  for (int i = 0; i < n_keys; i++)
    if ((rc = find_column(&b, in->schema, keys[i], "key: ", &key_cols[i])) != 0) return rc;
  for (int i = 0; i < n_aggs; i++) {
    specs[i].fn = aggs[i].fn;
    specs[i].name = aggs[i].name;
    specs[i].column = 0;
    if (aggs[i].fn != FSH_AGG_COUNT_STAR &&
        (rc = find_column(&b, in->schema, aggs[i].column, "aggregate: ", &specs[i].column)) != 0)
      return rc;
  }
  /* the operator checks functions and types; its schemas are the nodes' */
  fsh_hash_agg *probe = NULL;
  if ((rc = fsh_hash_agg_new(in->schema, key_cols, n_keys, specs, n_aggs,
                             local ? FSH_AGG_SINGLE : FSH_AGG_PARTIAL, 0, &probe, err)) != 0)
    return b_fail(&b, rc, NULL);
  fsh_schema *partial = fsh_schema_ref(fsh_hash_agg_output_schema(probe));
  fsh_hash_agg_free(probe);
  plan_node *n = b_agg_node(&b, in, in->schema, key_cols, n_keys, specs, n_aggs,
                            local ? FSH_AGG_SINGLE : FSH_AGG_PARTIAL);
  if (!n) {
    fsh_schema_unref(partial);
    return b_fail(&b, ENOMEM, "out of memory");
  }
  n->schema = partial;
  if (!local) {
    int32_t pkeys[64];
    for (int i = 0; i < n_keys; i++) pkeys[i] = i;
    plan_node *x;
    if ((rc = b_exchange(&b, n, n_keys ? PX_HASH : PX_GATHER, p->default_partitions, pkeys, NULL,
                         n_keys, &x)) != 0)
      return rc;
    if ((rc = fsh_hash_agg_new(in->schema, key_cols, n_keys, specs, n_aggs, FSH_AGG_FINAL, 0,
                               &probe, err)) != 0)
      return b_fail(&b, rc, NULL);
    fsh_schema *final = fsh_schema_ref(fsh_hash_agg_output_schema(probe));
    fsh_hash_agg_free(probe);
    if (!(n = b_agg_node(&b, x, in->schema, key_cols, n_keys, specs, n_aggs, FSH_AGG_FINAL))) {
      fsh_schema_unref(final);
      return b_fail(&b, ENOMEM, "out of memory");
    }
    n->schema = final;
  }
  n->order = FSH_PLAN_ORDER_NONE;
  return b_done(&b, id);
}

/* ---- join ---------------------------------------------------------------------- */

/* A rough size of a generated scan's output (bytes), or -1 if the node is
 * not one. */
static int64_t scan_bytes(const plan_node *n) {
  if (n->kind != PN_SCAN_GEN) return -1;
  return n->gen.rows * (n->gen.generator == FSH_PLAN_GEN_SYNTHETIC ? 32 : 36);
}

int fsh_plan_join(fsh_plan *p, const char *label, int left, int right,
                  const char *const *left_keys, const char *const *right_keys, int n_keys,
                  fsh_join_type type, fsh_plan_join_strategy strategy, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "join", label, err);
  plan_node *l = NULL, *r = NULL;
  int rc = b_input(&b, left, "left input", &l);
  if (rc || (rc = b_input(&b, right, "right input", &r)) != 0) return rc;
  if (n_keys < 1 || n_keys > 64)
    return b_fail(&b, EINVAL, "a join needs 1..64 keys, got %d", n_keys);
  if ((unsigned)type > FSH_JOIN_LEFT_ANTI) return b_fail(&b, EINVAL, "unknown join type %d", type);
  int32_t lk[64], rk[64];
  for (int i = 0; i < n_keys; i++)
    if ((rc = find_column(&b, l->schema, left_keys[i], "left key: ", &lk[i])) != 0 ||
        (rc = find_column(&b, r->schema, right_keys[i], "right key: ", &rk[i])) != 0)
      return rc;
  fsh_hash_join *probe = NULL;
  if ((rc = fsh_hash_join_new(l->schema, r->schema, lk, rk, n_keys, type, false, 0, &probe, err)) != 0)
    return b_fail(&b, rc, NULL);
  fsh_schema *schema = fsh_schema_ref(fsh_hash_join_output_schema(probe));
  fsh_hash_join_free(probe);
  bool keeps_build = type == FSH_JOIN_RIGHT || type == FSH_JOIN_FULL;
  bool broadcast;
  if (strategy == FSH_PLAN_JOIN_BROADCAST) {
    if (keeps_build) {
      fsh_schema_unref(schema);
      return b_fail(&b, EINVAL, "a %s join cannot broadcast its right side (its unmatched rows "
                                "would come out once per task): use partitioned",
                    type == FSH_JOIN_RIGHT ? "right" : "full");
    }
    broadcast = true;
  } else if (strategy == FSH_PLAN_JOIN_PARTITIONED) {
    broadcast = false;
  } else {
    int64_t bytes = scan_bytes(r);
    broadcast = !keeps_build && bytes >= 0 && bytes <= FSH_JOIN_BROADCAST_BYTES;
  }
  plan_node *xl = l, *xr;
  if (broadcast) {
    rc = b_exchange(&b, r, PX_GATHER, 1, NULL, NULL, 0, &xr);
  } else {
    int32_t np = p->default_partitions;
    rc = b_exchange(&b, l, PX_HASH, np, lk, NULL, n_keys, &xl);
    if (!rc) rc = b_exchange(&b, r, PX_HASH, np, rk, NULL, n_keys, &xr);
  }
  if (rc) {
    fsh_schema_unref(schema);
    return rc;
  }
  plan_node *n = b_node(&b, PN_JOIN);
  if (!n) {
    fsh_schema_unref(schema);
    return b_fail(&b, ENOMEM, "out of memory");
  }
  n->schema = schema;
  n->join_type = type;
  n->broadcast = broadcast;
  n->n_inputs = 2;
  n->inputs[0] = xl->id;
  n->inputs[1] = xr->id;
  n->n_partitions = xl->n_partitions;
  n->keys = fsh_malloc((size_t)n_keys * sizeof *n->keys);
  n->keys2 = fsh_malloc((size_t)n_keys * sizeof *n->keys2);
  if (!n->keys || !n->keys2) return b_fail(&b, ENOMEM, "out of memory");
  memcpy(n->keys, lk, (size_t)n_keys * sizeof *lk);
  memcpy(n->keys2, rk, (size_t)n_keys * sizeof *rk);
  n->n_keys = n_keys;
  n->order = FSH_PLAN_ORDER_NONE;
  n->rows_determined = l->rows_determined && r->rows_determined;
  return b_done(&b, id);
}

/* ---- sort, top-N, limit -------------------------------------------------------- */

static bool orderable(const fsh_field *f) {
  fsh_type_id t = f->dictionary ? f->dictionary->value.type : f->type;
  switch (t) {
    case FSH_TYPE_BOOL: case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32:
    case FSH_TYPE_INT64: case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32:
    case FSH_TYPE_UINT64: case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64:
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256: case FSH_TYPE_DATE32:
    case FSH_TYPE_DATE64: case FSH_TYPE_TIME32: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP:
    case FSH_TYPE_DURATION: case FSH_TYPE_INTERVAL_MONTHS: case FSH_TYPE_BINARY:
    case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY: case FSH_TYPE_LARGE_STRING:
    case FSH_TYPE_FIXED_SIZE_BINARY:
      return true;
    default:
      return false;
  }
}

static int resolve_sort_keys(builder *b, const plan_node *in, const fsh_plan_sort_key *keys,
                             int n_keys, int32_t *cols, fsh_sort_key *order) {
  if (n_keys < 1 || n_keys > 64) return b_fail(b, EINVAL, "needs 1..64 sort keys, got %d", n_keys);
  for (int i = 0; i < n_keys; i++) {
    int rc = find_column(b, in->schema, keys[i].column, "sort key: ", &cols[i]);
    if (rc) return rc;
    const fsh_field *f = &in->schema->fields[cols[i]];
    if (!orderable(f)) {
      char t[128];
      fsh_field_type_to_string(f, t, sizeof t);
      return b_fail(b, EINVAL, "type mismatch: sort key column '%s' is %s, which has no order",
                    f->name, t);
    }
    order[i].descending = keys[i].descending;
    order[i].nulls_first = keys[i].nulls_first;
  }
  return 0;
}

/* A local sort / top-N node over in. */
static plan_node *b_local_sort(builder *b, const plan_node *in, pn_kind kind, const int32_t *cols,
                               const fsh_sort_key *order, int n_keys, int64_t n) {
  plan_node *s = b_node(b, kind);
  if (!s) return NULL;
  s->n_inputs = 1;
  s->inputs[0] = in->id;
  s->schema = fsh_schema_ref(in->schema);
  s->n_partitions = in->n_partitions;
  s->n = n;
  s->keys = fsh_malloc((size_t)n_keys * sizeof *s->keys);
  s->sort_order = fsh_malloc((size_t)n_keys * sizeof *s->sort_order);
  if (!s->keys || !s->sort_order || set_keys_order(s, cols, n_keys)) return NULL;
  memcpy(s->keys, cols, (size_t)n_keys * sizeof *cols);
  memcpy(s->sort_order, order, (size_t)n_keys * sizeof *order);
  s->n_keys = n_keys;
  s->rows_determined = in->rows_determined;
  return s;
}

int fsh_plan_sort(fsh_plan *p, const char *label, int input, const fsh_plan_sort_key *keys,
                  int n_keys, bool local, int64_t sample_rows, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "sort", label, err);
  plan_node *in = NULL;
  int32_t cols[64];
  fsh_sort_key order[64];
  int rc = b_input(&b, input, "input", &in);
  if (rc || (rc = resolve_sort_keys(&b, in, keys, n_keys, cols, order)) != 0) return rc;
  if (sample_rows < 0) return b_fail(&b, EINVAL, "sample_rows must be >= 0");
  const plan_node *src = in;
  if (!local) {
    plan_node *x;
    if ((rc = b_exchange(&b, in, PX_RANGE, p->default_partitions, cols, order, n_keys, &x)) != 0)
      return rc;
    x->sample_rows = sample_rows ? sample_rows : 1000;
    src = x;
  }
  plan_node *s = b_local_sort(&b, src, PN_SORT, cols, order, n_keys, 0);
  if (!s) return b_fail(&b, ENOMEM, "out of memory");
  if (!local) {
    plan_node *g;
    if ((rc = b_exchange(&b, s, PX_GATHER, 1, NULL, NULL, 0, &g)) != 0) return rc;
  }
  return b_done(&b, id);
}

int fsh_plan_top_n(fsh_plan *p, const char *label, int input, const fsh_plan_sort_key *keys,
                   int n_keys, int64_t n, bool local, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "top_n", label, err);
  plan_node *in = NULL;
  int32_t cols[64];
  fsh_sort_key order[64];
  int rc = b_input(&b, input, "input", &in);
  if (rc || (rc = resolve_sort_keys(&b, in, keys, n_keys, cols, order)) != 0) return rc;
  if (n < 0) return b_fail(&b, EINVAL, "n must be >= 0, got %lld", (long long)n);
  plan_node *s = b_local_sort(&b, in, PN_TOP_N, cols, order, n_keys, n);
  if (!s) return b_fail(&b, ENOMEM, "out of memory");
  s->rows_determined = in->rows_determined && in->order == FSH_PLAN_ORDER_EXACT;
  if (!local) {
    plan_node *g;
    if ((rc = b_exchange(&b, s, PX_GATHER, 1, NULL, NULL, 0, &g)) != 0) return rc;
    g->limit_hint = -1;
    if (!(s = b_local_sort(&b, g, PN_TOP_N, cols, order, n_keys, n)))
      return b_fail(&b, ENOMEM, "out of memory");
    s->rows_determined = g->rows_determined;
  }
  return b_done(&b, id);
}

static plan_node *b_limit_node(builder *b, const plan_node *in, int64_t n) {
  plan_node *l = b_node(b, PN_LIMIT);
  if (!l) return NULL;
  l->n = n;
  l->n_inputs = 1;
  l->inputs[0] = in->id;
  l->schema = fsh_schema_ref(in->schema);
  l->n_partitions = in->n_partitions;
  if (inherit_order(l, in)) return NULL;
  l->rows_determined = in->rows_determined && in->order == FSH_PLAN_ORDER_EXACT;
  return l;
}

int fsh_plan_limit(fsh_plan *p, const char *label, int input, int64_t n, bool local, int *id,
                   fsh_error *err) {
  builder b;
  b_begin(&b, p, "limit", label, err);
  plan_node *in = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc) return rc;
  if (n < 0) return b_fail(&b, EINVAL, "n must be >= 0, got %lld", (long long)n);
  plan_node *l = b_limit_node(&b, in, n);
  if (!l) return b_fail(&b, ENOMEM, "out of memory");
  if (!local) {
    plan_node *g;
    if ((rc = b_exchange(&b, l, PX_GATHER, 1, NULL, NULL, 0, &g)) != 0) return rc;
    g->limit_hint = n;
    if (!b_limit_node(&b, g, n)) return b_fail(&b, ENOMEM, "out of memory");
  }
  return b_done(&b, id);
}

/* ---- exchanges ------------------------------------------------------------------ */

int fsh_plan_repartition(fsh_plan *p, const char *label, int input, fsh_plan_partitioning by,
                         const fsh_plan_sort_key *keys, int n_keys, int32_t n, uint64_t seed,
                         int64_t sample_rows, fsh_plan_merge merge, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "repartition", label, err);
  plan_node *in = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc) return rc;
  if (n < 0 || sample_rows < 0 || (unsigned)merge > FSH_PLAN_MERGE_OFF)
    return b_fail(&b, EINVAL, "partitions and sample_rows must be >= 0");
  int32_t cols[64];
  fsh_sort_key order[64];
  px_kind kind;
  if (by == FSH_PLAN_PART_RANDOM) {
    if (n_keys != 0) return b_fail(&b, EINVAL, "random repartitioning takes no keys");
    kind = PX_RANDOM;
  } else if (by == FSH_PLAN_PART_HASH || by == FSH_PLAN_PART_RANGE) {
    kind = by == FSH_PLAN_PART_HASH ? PX_HASH : PX_RANGE;
    if (n_keys < 1 || n_keys > 64)
      return b_fail(&b, EINVAL, "%s repartitioning needs 1..64 keys, got %d",
                    plan_exchange_name(kind), n_keys);
    if (kind == PX_RANGE) {
      if ((rc = resolve_sort_keys(&b, in, keys, n_keys, cols, order)) != 0) return rc;
    } else {
      for (int i = 0; i < n_keys; i++)
        if ((rc = find_column(&b, in->schema, keys[i].column, "key: ", &cols[i])) != 0) return rc;
      memset(order, 0, sizeof order);
    }
  } else {
    return b_fail(&b, EINVAL, "unknown partitioning %d", (int)by);
  }
  plan_node *x;
  if ((rc = b_exchange(&b, in, kind, n ? n : p->default_partitions, cols, order, n_keys, &x)) != 0)
    return rc;
  x->seed = seed;
  x->sample_rows = sample_rows ? sample_rows : 1000;
  x->merge = merge;
  return b_done(&b, id);
}

int fsh_plan_gather(fsh_plan *p, const char *label, int input, int *id, fsh_error *err) {
  builder b;
  b_begin(&b, p, "gather", label, err);
  plan_node *in = NULL, *x = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc || (rc = b_exchange(&b, in, PX_GATHER, 1, NULL, NULL, 0, &x)) != 0) return rc;
  return b_done(&b, id);
}

int fsh_plan_into_partitions(fsh_plan *p, const char *label, int input, int32_t n, int *id,
                             fsh_error *err) {
  builder b;
  b_begin(&b, p, "into_partitions", label, err);
  plan_node *in = NULL, *x = NULL;
  int rc = b_input(&b, input, "input", &in);
  if (rc) return rc;
  if (n < 1) return b_fail(&b, EINVAL, "partitions must be >= 1, got %d", (int)n);
  if ((rc = b_exchange(&b, in, PX_INTO_PARTITIONS, n, NULL, NULL, 0, &x)) != 0) return rc;
  return b_done(&b, id);
}

int64_t plan_merge_group(fsh_plan_merge pol, int64_t threshold, int64_t m, int64_t r) {
  double t = (double)threshold;
  bool on = pol == FSH_PLAN_MERGE_ON ||
            (pol == FSH_PLAN_MERGE_AUTO && sqrt((double)m * (double)r) > t);
  if (!on || m <= 1) return 1;
  int64_t max_outputs = (int64_t)(t * t / (double)r);
  if (pol == FSH_PLAN_MERGE_ON && max_outputs >= m) max_outputs = (m + 1) / 2; /* forced */
  if (max_outputs < 1) max_outputs = 1;
  return (m + max_outputs - 1) / max_outputs;
}

/* ---- stages and explain ---------------------------------------------------------- */

int plan_stage_roots(const fsh_plan *p, int *roots) {
  int n = 0;
  for (int i = 0; i < p->n_nodes; i++)
    if (p->nodes[i]->kind == PN_EXCHANGE) roots[n++] = i;
  if (p->n_nodes && p->nodes[p->n_nodes - 1]->kind != PN_EXCHANGE) roots[n++] = p->n_nodes - 1;
  return n;
}

void plan_stage_members(const fsh_plan *p, int root, bool *member) {
  memset(member, 0, (size_t)p->n_nodes * sizeof *member);
  member[root] = true;
  /* nodes only feed later nodes: one backward pass finds the stage */
  for (int i = root; i >= 0; i--) {
    if (!member[i]) continue;
    const plan_node *n = p->nodes[i];
    if (n->kind == PN_EXCHANGE && i != root) continue;
    for (int k = 0; k < n->n_inputs; k++) member[n->inputs[k]] = true;
  }
}

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) FSH_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) return;
  if (b->len + (size_t)need + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)need;
    char *s = fsh_realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s, b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)need;
}

static void sb_keys(sbuf *b, const fsh_schema *s, const int32_t *keys, const fsh_sort_key *order,
                    int n) {
  sb_printf(b, "[");
  for (int i = 0; i < n; i++) {
    sb_printf(b, "%s%s", i ? ", " : "", s->fields[keys[i]].name);
    if (order)
      sb_printf(b, " %s nulls %s", order[i].descending ? "desc" : "asc",
                order[i].nulls_first ? "first" : "last");
  }
  sb_printf(b, "]");
}

static const char *agg_fn_name(fsh_agg_fn fn) {
  static const char *names[] = {"count_star", "count", "count_distinct", "sum", "avg", "min", "max"};
  return (unsigned)fn <= FSH_AGG_MAX ? names[fn] : "?";
}

static const char *join_type_name(fsh_join_type t) {
  static const char *names[] = {"inner", "left", "right", "full", "left_semi", "left_anti"};
  return (unsigned)t <= FSH_JOIN_LEFT_ANTI ? names[t] : "?";
}

static void sb_node(sbuf *b, const fsh_plan *p, const plan_node *n) {
  char text[512];
  const fsh_schema *in = n->n_inputs ? p->nodes[n->inputs[0]]->schema : NULL;
  sb_printf(b, "  #%d ", n->id);
  switch (n->kind) {
    case PN_SCAN_GEN:
      sb_printf(b, "scan %s rows=%" PRId64 " batch_rows=%d seed=%" PRIu64,
                n->gen.generator == FSH_PLAN_GEN_SYNTHETIC ? "synthetic" : "keyed", n->gen.rows,
                (int)n->gen.batch_rows, n->gen.seed);
      break;
    case PN_SCAN_IPC:
      sb_printf(b, "scan ipc %" PRId64 " file(s) from '%s'", n->n_files, n->files[0]);
      if (n->n_columns) sb_printf(b, " columns=%d", (int)n->n_columns);
      break;
    case PN_FILTER:
      sb_printf(b, "filter %s", fsh_expr_format(n->exprs[0], text, sizeof text));
      break;
    case PN_PROJECT:
      sb_printf(b, "project");
      for (int i = 0; i < n->n_exprs; i++)
        sb_printf(b, "%s %s := %s", i ? "," : "", n->names[i],
                  fsh_expr_format(n->exprs[i], text, sizeof text));
      break;
    case PN_AGG:
      sb_printf(b, "aggregate %s keys=",
                n->agg_mode == FSH_AGG_SINGLE ? "single"
                : n->agg_mode == FSH_AGG_PARTIAL ? "partial" : "final");
      sb_keys(b, n->agg_input, n->keys, NULL, n->n_keys);
      for (int i = 0; i < n->n_aggs; i++)
        sb_printf(b, " %s(%s)", agg_fn_name(n->aggs[i].fn),
                  n->aggs[i].fn == FSH_AGG_COUNT_STAR ? "*"
                                                      : n->agg_input->fields[n->aggs[i].column].name);
      break;
    case PN_JOIN:
      sb_printf(b, "hash join %s (%s) left=#%d right=#%d on ", join_type_name(n->join_type),
                n->broadcast ? "broadcast right" : "partitioned", n->inputs[0], n->inputs[1]);
      sb_keys(b, p->nodes[n->inputs[0]]->schema, n->keys, NULL, n->n_keys);
      sb_printf(b, " = ");
      sb_keys(b, p->nodes[n->inputs[1]]->schema, n->keys2, NULL, n->n_keys);
      break;
    case PN_SORT:
      sb_printf(b, "sort (local) ");
      sb_keys(b, in, n->keys, n->sort_order, n->n_keys);
      break;
    case PN_TOP_N:
      sb_printf(b, "top_n (local) n=%" PRId64 " ", n->n);
      sb_keys(b, in, n->keys, n->sort_order, n->n_keys);
      break;
    case PN_LIMIT:
      sb_printf(b, "limit (local) n=%" PRId64, n->n);
      break;
    case PN_INTO_BATCHES:
      sb_printf(b, "into_batches rows=%" PRId64, n->n);
      break;
    case PN_EXCHANGE:
      sb_printf(b, "exchange %s", plan_exchange_name(n->xkind));
      if (n->n_keys) {
        sb_printf(b, " on ");
        sb_keys(b, in, n->keys, n->xkind == PX_RANGE ? n->sort_order : NULL, n->n_keys);
      }
      if (n->xkind == PX_RANGE) sb_printf(b, " sample_rows=%" PRId64 "/map", n->sample_rows);
      if (n->limit_hint >= 0)
        sb_printf(b, " (maps stop at %" PRId64 " rows; on a cluster the driver stops the stage "
                  "once its done tasks%s wrote %" PRId64 " rows, skipping the others)",
                  n->limit_hint, n->order != FSH_PLAN_ORDER_NONE ? " (a prefix in task order)" : "",
                  n->limit_hint);
      break;
    default:
      break;
  }
  sb_printf(b, "  -> %d partition(s)", (int)n->n_partitions);
  char who[200];
  sb_printf(b, "  [%s]\n", plan_node_name(n, who, sizeof who) + strlen("plan "));
}

int fsh_plan_explain(const fsh_plan *p, char **out, fsh_error *err) {
  *out = NULL;
  if (!p->n_nodes) return fsh_error_set(err, EINVAL, "explain: the plan is empty");
  int *roots = fsh_malloc((size_t)p->n_nodes * sizeof *roots);
  bool *member = fsh_malloc((size_t)p->n_nodes * sizeof *member);
  sbuf b = {0};
  if (!roots || !member) b.oom = true;
  int n_stages = b.oom ? 0 : plan_stage_roots(p, roots);
  int n_exchanges = 0;
  for (int i = 0; i < p->n_nodes; i++) n_exchanges += p->nodes[i]->kind == PN_EXCHANGE;
  const plan_node *last = p->nodes[p->n_nodes - 1];
  sb_printf(&b, "plan: %d operator(s), %d physical node(s), %d stage(s), %d exchange(s); output "
                "%d partition(s):",
            p->n_user, p->n_nodes, n_stages, n_exchanges,
            (int)last->n_partitions);
  for (int64_t i = 0; i < last->schema->n_fields; i++) {
    char t[128];
    fsh_field_type_to_string(&last->schema->fields[i], t, sizeof t);
    sb_printf(&b, " %s %s%s", last->schema->fields[i].name, t,
              i + 1 < last->schema->n_fields ? "," : "");
  }
  sb_printf(&b, "\n");
  for (int s = 0; s < n_stages && !b.oom; s++) {
    int root = roots[s];
    const plan_node *r = p->nodes[root];
    plan_stage_members(p, root, member);
    /* tasks: the partitions of what the stage runs (the exchange's input) */
    const plan_node *top = r->kind == PN_EXCHANGE ? p->nodes[r->inputs[0]] : r;
    sb_printf(&b, "stage %d: %d task(s)", s, (int)top->n_partitions);
    bool any = false;
    for (int i = 0; i < p->n_nodes; i++)
      if (member[i] && i != root && p->nodes[i]->kind == PN_EXCHANGE) {
        sb_printf(&b, "%s #%d", any ? "," : " reading exchange(s)", i);
        any = true;
      }
    if (r->kind == PN_EXCHANGE) {
      fsh_plan_merge pol = r->merge != FSH_PLAN_MERGE_AUTO ? r->merge : p->merge;
      int64_t g = plan_merge_group(pol, p->merge_threshold, top->n_partitions, r->n_partitions);
      int64_t outs = (top->n_partitions + g - 1) / g;
      sb_printf(&b, "; writes exchange #%d %s into %d partition(s)%s: M=%d map task(s) x R=%d, "
                    "pre-shuffle merge %s (%s, threshold %lld) -> %lld map output(s)\n",
                root, plan_exchange_name(r->xkind), (int)r->n_partitions,
                root == p->n_nodes - 1 ? ", read as the result" : "", (int)top->n_partitions,
                (int)r->n_partitions, g > 1 ? "on" : "off",
                pol == FSH_PLAN_MERGE_AUTO ? "auto" : pol == FSH_PLAN_MERGE_ON ? "forced" : "disabled",
                (long long)p->merge_threshold, (long long)outs);
    } else
      sb_printf(&b, "; produces the result\n");
    for (int i = 0; i < p->n_nodes; i++)
      if (member[i] && (i == root || p->nodes[i]->kind != PN_EXCHANGE)) sb_node(&b, p, p->nodes[i]);
  }
  fsh_free(roots);
  fsh_free(member);
  if (b.oom) {
    fsh_free(b.s);
    return fsh_error_set(err, ENOMEM, "explain: out of memory");
  }
  *out = b.s;
  return 0;
}
