/* plan_compare.c -- comparing a plan's result with a reference run's:
 * row hashes (float columns rounded, so that sums in another order
 * compare equal), as multisets, in exact order or by the sort keys as the
 * plan's output order allows; a plan ending in a limit whose rows are not
 * determined (its input unordered: any n rows of it will do) by its row
 * count and by every row's membership in the limit's input (a reference
 * run of the plan up to it); a plan ending in an operator whose rows
 * depend on the partitioning (a local limit, top-N or aggregate) by what
 * the plan fixes of them, per partition where its input's partitions are
 * fixed (an in-process partitioned run of its input). */
#include "exec/plan_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- comparing results ------------------------------------------------------------------ */

/* A float column's values rounded to 12 significant digits (nulls kept):
 * sums and averages computed in another order differ in their last bits. */
static int round_floats(const fsh_field *f, fsh_array *a, fsh_array **out, fsh_error *err) {
  bool f32 = f->type == FSH_TYPE_FLOAT32;
  int64_t w = f32 ? 4 : 8;
  fsh_array *r = fsh_array_new(2, 0);
  if (!r) return fsh_error_set(err, ENOMEM, "out of memory");
  r->length = a->length;
  r->null_count = a->null_count;
  r->offset = 0;
  if (a->buffers[0]) {
    r->buffers[0] = fsh_buffer_new(fsh_bytes_for_bits(a->length), true);
    if (r->buffers[0])
      for (int64_t i = 0; i < a->length; i++)
        fsh_bit_set(r->buffers[0]->data, i, fsh_array_is_valid(a, i));
  }
  r->buffers[1] = fsh_buffer_new(a->length * w, true);
  if ((a->buffers[0] && !r->buffers[0]) || !r->buffers[1]) {
    fsh_array_unref(r);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  for (int64_t i = 0; i < a->length; i++) {
    if (!fsh_array_is_valid(a, i)) continue;
    double v = f32 ? (double)((const float *)(const void *)a->buffers[1]->data)[a->offset + i]
                   : ((const double *)(const void *)a->buffers[1]->data)[a->offset + i];
    char text[40];
    snprintf(text, sizeof text, "%.12g", v);
    double rv = strtod(text, NULL);
    if (f32) ((float *)(void *)r->buffers[1]->data)[i] = (float)rv;
    else ((double *)(void *)r->buffers[1]->data)[i] = rv;
  }
  *out = r;
  return 0;
}

/* Hashes of keys[0, n_keys) of every row (all columns when keys is NULL),
 * float columns rounded when `round`. */
static int row_hashes(const fsh_plan_result *r, const int32_t *key_cols, int32_t n_keys,
                      bool round, uint64_t **out, int64_t *n, fsh_error *err) {
  *out = NULL;
  *n = 0;
  uint64_t *h = fsh_malloc((size_t)(r->rows ? r->rows : 1) * sizeof *h);
  int32_t *all = NULL;
  if (!h) return fsh_error_set(err, ENOMEM, "out of memory");
  if (!key_cols) {
    int64_t nf = r->schema ? r->schema->n_fields : 0;
    if (!(all = fsh_malloc((size_t)(nf ? nf : 1) * sizeof *all))) {
      fsh_free(h);
      return fsh_error_set(err, ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < nf; i++) all[i] = (int32_t)i;
    key_cols = all;
    n_keys = (int32_t)nf;
  }
  int64_t at = 0;
  int rc = 0;
  for (int64_t i = 0; i < r->n_batches && !rc; i++) {
    fsh_batch *b = r->batches[i], *rb = NULL;
    for (int64_t c = 0; round && c < b->n_columns && !rc; c++) {
      const fsh_field *f = &b->schema->fields[c];
      if (f->dictionary || (f->type != FSH_TYPE_FLOAT32 && f->type != FSH_TYPE_FLOAT64)) continue;
      if (!rb) {
        if (!(rb = fsh_batch_new(b->schema, b->length))) {
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
        for (int64_t k = 0; k < b->n_columns; k++) rb->columns[k] = fsh_array_ref(b->columns[k]);
      }
      fsh_array *rounded = NULL;
      if ((rc = round_floats(f, b->columns[c], &rounded, err)) != 0) break;
      fsh_array_unref(rb->columns[c]);
      rb->columns[c] = rounded;
    }
    if (!rc && n_keys > 0)
      rc = fsh_hash_columns(rb ? rb : b, key_cols, n_keys, 0, h + at, err);
    else if (!rc)
      memset(h + at, 0, (size_t)b->length * sizeof *h);
    fsh_batch_unref(rb);
    at += b->length;
  }
  fsh_free(all);
  if (rc) {
    fsh_free(h);
    return rc;
  }
  *out = h;
  *n = at;
  return 0;
}

int fsh_plan_result_row_hashes(const fsh_plan_result *r, const int32_t *key_cols, int32_t n_keys,
                               uint64_t **out, int64_t *n, fsh_error *err) {
  return row_hashes(r, key_cols, n_keys, false, out, n, err);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The node whose rows a plan ending in a limit takes (for a global limit:
 * the input of its local limit, under the gather), *n its limit and
 * *global whether it is a global one; -1 when the plan does not end in a
 * limit. */
static int limit_source(const fsh_plan *p, int64_t *n, bool *global) {
  const plan_node *r = p->nodes[p->n_nodes - 1];
  if (r->kind != PN_LIMIT || r->n_inputs != 1) return -1;
  *n = r->n;
  const plan_node *g = p->nodes[r->inputs[0]];
  *global = g->kind == PN_EXCHANGE && g->xkind == PX_GATHER && g->limit_hint >= 0 &&
            p->nodes[g->inputs[0]]->kind == PN_LIMIT;
  return *global ? p->nodes[g->inputs[0]]->inputs[0] : r->inputs[0];
}

/* The node whose rows a plan ending in a top-N takes (a global one: the
 * input of its local top-N, under the gather; a top-N of one partition:
 * its input), *n its n; -1 otherwise. Its rows are not determined when
 * that input is unordered and keys tie: the result's sort keys are
 * compared in order, and its rows as a limit's (count and membership). */
static int top_n_source(const fsh_plan *p, int64_t *n) {
  const plan_node *r = p->nodes[p->n_nodes - 1];
  if (r->kind != PN_TOP_N || r->n_inputs != 1) return -1;
  *n = r->n;
  const plan_node *g = p->nodes[r->inputs[0]];
  if (g->kind == PN_EXCHANGE && g->xkind == PX_GATHER && p->nodes[g->inputs[0]]->kind == PN_TOP_N &&
      p->nodes[g->inputs[0]]->n == r->n)
    return p->nodes[g->inputs[0]]->inputs[0];
  return g->n_partitions <= 1 ? r->inputs[0] : -1;
}

/* Whether every hash of sub (sorted, n) is in sup (sorted, m) at least as
 * often; *bad: the first sorted hash that is not (when false). */
static bool multiset_within(const uint64_t *sub, int64_t n, const uint64_t *sup, int64_t m,
                            uint64_t *bad) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    while (k < m && sup[k] < sub[i]) k++;
    if (k == m || sup[k] != sub[i]) {
      *bad = sub[i];
      return false;
    }
    k++;
  }
  return true;
}

/* A sorted copy of h[0, n) (*out fsh_malloc'd). */
static int sorted_copy(const uint64_t *h, int64_t n, uint64_t **out, fsh_error *err) {
  if (!(*out = fsh_malloc((size_t)(n ? n : 1) * sizeof **out)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  if (n) memcpy(*out, h, (size_t)n * sizeof **out);
  qsort(*out, (size_t)n, sizeof **out, cmp_u64);
  return 0;
}

/* The row hashes of a streamed result (a sink): 8 bytes a row, the
 * batches not kept. */
typedef struct hash_sink {
  uint64_t *h;
  int64_t n, cap;
} hash_sink;

static int hash_sink_put(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  hash_sink *hs = arg;
  (void)part;
  if (!b || b->length == 0) return 0; /* (one partition in a reference run: no restart) */
  fsh_plan_result one = {.rows = b->length, .n_batches = 1, .batches = &b, .schema = b->schema};
  uint64_t *h = NULL;
  int64_t n = 0;
  FSH_RETURN_NOT_OK(row_hashes(&one, NULL, 0, true, &h, &n, err));
  if (hs->n + n > hs->cap) {
    int64_t cap = hs->cap ? hs->cap : 1024;
    while (cap < hs->n + n) cap *= 2;
    uint64_t *x = fsh_realloc(hs->h, (size_t)cap * sizeof *x);
    if (!x) {
      fsh_free(h);
      return fsh_error_set(err, ENOMEM, "out of memory");
    }
    hs->h = x, hs->cap = cap;
  }
  memcpy(hs->h + hs->n, h, (size_t)n * sizeof *h);
  hs->n += n;
  fsh_free(h);
  return 0;
}

/* The row hashes of node src's rows in a single-process reference run of
 * the plan up to src, sorted (streamed: only the hashes are held); what
 * names the operator reading src, for the message. */
static int reference_input_hashes(const fsh_plan *p, int src, const char *what, hash_sink *out,
                                  fsh_error *err) {
  fsh_plan view = *p; /* the plan up to src: its nodes are the first src + 1 */
  view.n_nodes = src + 1;
  *out = (hash_sink){0};
  fsh_plan_run_options ro = {.reference = true, .sink = hash_sink_put, .sink_arg = out};
  fsh_plan_result run;
  int rc = fsh_plan_run(&view, &ro, &run, err);
  fsh_plan_result_reset(&run);
  if (rc) {
    fsh_free(out->h);
    *out = (hash_sink){0};
    return fsh_error_prefix(err, rc, "the %s's input (a reference run): ", what);
  }
  if (out->n > 1) qsort(out->h, (size_t)out->n, sizeof *out->h, cmp_u64);
  return 0;
}

/* Every row of a a row of `in` (sorted hashes of what's input), as
 * multisets: no row more often than there; EINVAL naming the first row
 * that is not. *ha / *na (ha may be NULL): a's row hashes in its order
 * (fsh_malloc'd). */
static int check_rows_within(const fsh_plan_result *a, const hash_sink *in, const char *what,
                             uint64_t **ha, int64_t *na, fsh_error *err) {
  uint64_t *h = NULL, *sorted = NULL, bad = 0;
  int64_t n = 0;
  int rc = row_hashes(a, NULL, 0, true, &h, &n, err);
  if (!rc) rc = sorted_copy(h, n, &sorted, err);
  if (!rc && !multiset_within(sorted, n, in->h, in->n, &bad)) {
    int64_t row = 0;
    while (row < n && h[row] != bad) row++;
    rc = fsh_error_set(err, EINVAL, "row %lld is not a row of the %s's input (%lld rows, a "
                       "reference run), or is there fewer times than in the result",
                       (long long)row, what, (long long)in->n);
  }
  fsh_free(sorted);
  if (ha && !rc) {
    *ha = h, *na = n;
  } else {
    fsh_free(h);
  }
  return rc;
}

/* Result a of p, which ends in a limit of n rows over node src: a global
 * limit has min(n, rows of src) rows, and every row of a is a row of src
 * (check_rows_within against a reference run of the plan up to src). */
static int check_limit_rows(const fsh_plan *p, const fsh_plan_result *a, int src, int64_t n,
                            bool global, fsh_error *err) {
  hash_sink in;
  int rc = reference_input_hashes(p, src, "limit", &in, err);
  if (rc) return rc;
  int64_t want = in.n < n ? in.n : n;
  if (global && a->rows != want)
    rc = fsh_error_set(err, EINVAL, "%lld rows; a limit of %lld over %lld rows has %lld",
                       (long long)a->rows, (long long)n, (long long)in.n, (long long)want);
  if (!rc) rc = check_rows_within(a, &in, "limit", NULL, NULL, err);
  fsh_free(in.h);
  return rc;
}

/* ---- operators whose result depends on the partitioning ------------------------------ */

/* The node consuming node i (the first after it that reads it), or -1. */
static int consumer_of(const fsh_plan *p, int i) {
  for (int j = i + 1; j < p->n_nodes; j++)
    for (int k = 0; k < p->nodes[j]->n_inputs; k++)
      if (p->nodes[j]->inputs[k] == i) return j;
  return -1;
}

/* Whether the local aggregate n's input is partitioned so that each of
 * its groups lies in one partition: one partition, or a hash exchange on
 * a subset of its keys with only schema-keeping operators between. */
static bool grouped_by_keys(const fsh_plan *p, const plan_node *n) {
  const plan_node *m = p->nodes[n->inputs[0]];
  while (m->kind == PN_FILTER || m->kind == PN_SORT || m->kind == PN_TOP_N ||
         m->kind == PN_LIMIT || m->kind == PN_INTO_BATCHES) {
    if (m->n_partitions <= 1) return true;
    m = p->nodes[m->inputs[0]];
  }
  if (m->n_partitions <= 1) return true;
  if (m->kind != PN_EXCHANGE || m->xkind != PX_HASH || m->n_keys < 1) return false;
  for (int32_t k = 0; k < m->n_keys; k++) {
    const char *name = m->schema->fields[m->keys[k]].name;
    bool found = false;
    for (int32_t j = 0; j < n->n_keys && !found; j++)
      found = strcmp(n->agg_input->fields[n->keys[j]].name, name) == 0;
    if (!found) return false;
  }
  return true;
}

/* Whether node i's rows (as a multiset) depend on how its input is
 * partitioned, so that a single-process run (one partition) cannot give
 * them: a local limit or top-N over several partitions (not the first
 * half of a global one: a gather into the same operator), a local
 * aggregate whose groups may span partitions. */
static bool node_partition_dependent(const fsh_plan *p, int i) {
  const plan_node *n = p->nodes[i];
  if (n->kind == PN_LIMIT || n->kind == PN_TOP_N) {
    if (p->nodes[n->inputs[0]]->n_partitions <= 1) return false;
    int g = consumer_of(p, i);
    int f = g >= 0 ? consumer_of(p, g) : -1;
    return !(g >= 0 && f >= 0 && p->nodes[g]->kind == PN_EXCHANGE &&
             p->nodes[g]->xkind == PX_GATHER && p->nodes[f]->kind == n->kind &&
             p->nodes[f]->n == n->n);
  }
  if (n->kind == PN_AGG && n->agg_mode == FSH_AGG_SINGLE) return !grouped_by_keys(p, n);
  return false;
}

/* The first node in node i's inputs (i included, depth first) whose rows
 * depend on the partitioning, or -1. */
static int partition_dependent_in(const fsh_plan *p, int i) {
  if (node_partition_dependent(p, i)) return i;
  for (int k = 0; k < p->nodes[i]->n_inputs; k++) {
    int d = partition_dependent_in(p, p->nodes[i]->inputs[k]);
    if (d >= 0) return d;
  }
  return -1;
}

/* Whether node i's partitions hold rows fixed by the plan (each
 * partition's row multiset the same in every run): scans and hash /
 * gather exchanges fix them; random and range exchanges (a seed per map
 * task, boundaries from samples) do not, nor what follows them until a
 * hash exchange. */
static bool partitioning_fixed(const fsh_plan *p, int i) {
  const plan_node *n = p->nodes[i];
  if (n->kind == PN_EXCHANGE && (n->xkind == PX_HASH || n->xkind == PX_GATHER)) return true;
  if (n->kind == PN_EXCHANGE && (n->xkind == PX_RANDOM || n->xkind == PX_RANGE)) return false;
  for (int k = 0; k < n->n_inputs; k++)
    if (!partitioning_fixed(p, n->inputs[k])) return false;
  return true;
}

/* The rows of each partition of result r (*out [r->n_partitions], fsh_malloc'd). */
static int partition_rows(const fsh_plan_result *r, int64_t **out, fsh_error *err) {
  int32_t np = r->n_partitions > 0 ? r->n_partitions : 1;
  int64_t *rows = fsh_calloc((size_t)np, sizeof *rows);
  if (!rows) return fsh_error_set(err, ENOMEM, "out of memory");
  int64_t at = 0;
  for (int32_t q = 0; q < r->n_partitions && r->partition_batches; q++)
    for (int64_t k = 0; k < r->partition_batches[q] && at < r->n_batches; k++)
      rows[q] += r->batches[at++]->length;
  if (!r->partition_batches) rows[0] = r->rows;
  *out = rows;
  return 0;
}

/* The row hashes of each partition of a streamed result (a sink; a
 * partition begun again starts from nothing). */
typedef struct parts_sink {
  hash_sink *h; /* [n] */
  int32_t n;
} parts_sink;

static int parts_sink_put(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  parts_sink *ps = arg;
  if (part < 0 || part >= ps->n)
    return fsh_error_set(err, EINVAL, "partition %d of %d", (int)part, (int)ps->n);
  if (!b) ps->h[part].n = 0;
  return hash_sink_put(&ps->h[part], part, b, err);
}

static void parts_sink_free(parts_sink *ps) {
  for (int32_t q = 0; ps->h && q < ps->n; q++) fsh_free(ps->h[q].h);
  fsh_free(ps->h);
  ps->h = NULL;
}

/* Each partition q of a (whose row hashes, in a's order, are ha) holds
 * exactly the rows of want->h[q], as multisets; `what` says what those
 * are ("its input partition ..."). EINVAL naming the first partition that
 * does not. */
static int check_partitions_hold(const fsh_plan_result *a, const uint64_t *ha,
                                 const parts_sink *want, const char *what, fsh_error *err) {
  int64_t *rows = NULL, start = 0;
  int rc = partition_rows(a, &rows, err);
  for (int32_t q = 0; !rc && q < a->n_partitions && q < want->n; start += rows[q], q++) {
    uint64_t *x = NULL, *y = NULL;
    if (rows[q] != want->h[q].n)
      rc = fsh_error_set(err, EINVAL, "partition %d has %lld rows; %s has %lld", (int)q,
                         (long long)rows[q], what, (long long)want->h[q].n);
    if (!rc && (rc = sorted_copy(ha + start, rows[q], &x, err)) == 0 &&
        (rc = sorted_copy(want->h[q].h, rows[q], &y, err)) == 0 && rows[q] &&
        memcmp(x, y, (size_t)rows[q] * sizeof *x) != 0)
      rc = fsh_error_set(err, EINVAL, "partition %d's rows are not those of %s", (int)q, what);
    fsh_free(x);
    fsh_free(y);
  }
  fsh_free(rows);
  return rc;
}

/* The row hashes of each of node src's partitions (in their order) from
 * an in-process partitioned run of the plan up to src (its own memory
 * backend). */
static int input_partitions(const fsh_plan *p, int src, parts_sink *out, fsh_error *err) {
  fsh_plan view = *p;
  view.n_nodes = src + 1;
  int32_t np = p->nodes[src]->n_partitions;
  out->n = np;
  if (!(out->h = fsh_calloc((size_t)(np > 0 ? np : 1), sizeof *out->h)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_plan_run_options ro = {.sink = parts_sink_put, .sink_arg = out};
  fsh_plan_result run;
  int rc = fsh_plan_run(&view, &ro, &run, err);
  fsh_plan_result_reset(&run);
  if (rc) {
    parts_sink_free(out);
    return fsh_error_prefix(err, rc, "the input's partitions (an in-process run): ");
  }
  return 0;
}

/* Every partition of r sorted by node n's keys (a local sort / top-N). */
static int check_partitions_sorted(const plan_node *n, const fsh_plan_result *r, fsh_error *err) {
  int64_t at = 0;
  int rc = 0;
  for (int32_t q = 0; q < r->n_partitions && r->partition_batches && !rc; q++) {
    fsh_sorted_check *sc = NULL;
    if ((rc = fsh_sorted_check_new(r->schema, n->keys, n->n_keys, n->sort_order, &sc, err)) != 0)
      break;
    rc = fsh_sorted_check_sink(sc, 0, NULL, err); /* the partition begins */
    for (int64_t k = 0; k < r->partition_batches[q] && at < r->n_batches && !rc; k++)
      rc = fsh_sorted_check_sink(sc, 0, r->batches[at++], err);
    fsh_sorted_check_result res;
    fsh_sorted_check_get(sc, &res);
    fsh_sorted_check_free(sc);
    if (!rc && res.disorder_row >= 0)
      rc = fsh_error_set(err, EINVAL, "partition %d is not sorted by the %s's keys (row %lld of "
                         "it sorts before the one before it)", (int)q, n->user_op,
                         (long long)res.disorder_row);
  }
  return rc;
}

/* The top n rows of each partition of a streamed input by node n's keys,
 * kept as it streams (a sink: the held top and each batch sorted
 * together by fsh_sort_batch -- not the operator's heap -- and cut to n
 * rows; a partition begun again starts from nothing). */
typedef struct top_sink {
  const plan_node *n;
  fsh_batch **top; /* [np] (NULL: no row yet) */
  int32_t np;
} top_sink;

static int top_sink_put(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  top_sink *ts = arg;
  const plan_node *n = ts->n;
  if (part < 0 || part >= ts->np)
    return fsh_error_set(err, EINVAL, "partition %d of %d", (int)part, (int)ts->np);
  if (!b) {
    fsh_batch_unref(ts->top[part]);
    ts->top[part] = NULL;
    return 0;
  }
  fsh_batch *two[2] = {ts->top[part], b}, *all = NULL, *sorted = NULL;
  int rc = ts->top[part] ? fsh_concat(two, 2, &all, err) : 0;
  if (!rc) rc = fsh_sort_batch(all ? all : b, n->keys, n->n_keys, n->sort_order, &sorted, err);
  fsh_batch_unref(all);
  if (rc) return rc;
  fsh_batch *cut = fsh_batch_slice(sorted, 0, sorted->length < n->n ? sorted->length : n->n);
  fsh_batch_unref(sorted);
  if (!cut) return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_batch_unref(ts->top[part]);
  ts->top[part] = cut;
  return 0;
}

/* The local top-N `last` against each of its input's partitions (an
 * in-process partitioned run of the plan up to its input, fixed by the
 * plan): output partition q's sort keys, row by row, are those of the
 * top n of input partition q (the rows themselves may differ among
 * equal keys). */
static int check_top_n_partitions(const fsh_plan *p, const plan_node *last,
                                  const fsh_plan_result *a, fsh_error *err) {
  fsh_plan view = *p;
  view.n_nodes = last->inputs[0] + 1;
  int32_t np = last->n_partitions;
  top_sink ts = {.n = last, .np = np, .top = fsh_calloc((size_t)(np > 0 ? np : 1), sizeof *ts.top)};
  if (!ts.top) return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_plan_run_options ro = {.sink = top_sink_put, .sink_arg = &ts};
  fsh_plan_result run;
  int rc = fsh_plan_run(&view, &ro, &run, err);
  fsh_plan_result_reset(&run);
  if (rc) rc = fsh_error_prefix(err, rc, "the top_n's input partitions (an in-process run): ");
  int64_t bi = 0;
  for (int32_t q = 0; q < np && q < a->n_partitions && a->partition_batches && !rc; q++) {
    fsh_plan_result got = {.schema = a->schema, .n_batches = a->partition_batches[q],
                           .batches = a->batches + bi, .n_partitions = 1};
    for (int64_t k = 0; k < got.n_batches; k++) got.rows += got.batches[k]->length;
    bi += got.n_batches;
    fsh_batch *t = ts.top[q];
    fsh_plan_result want = {.schema = a->schema, .n_batches = t ? 1 : 0, .batches = &t,
                            .rows = t ? t->length : 0, .n_partitions = 1};
    uint64_t *hg = NULL, *hw = NULL;
    int64_t ng = 0, nw = 0;
    if ((rc = row_hashes(&got, last->keys, last->n_keys, true, &hg, &ng, err)) == 0 &&
        (rc = row_hashes(&want, last->keys, last->n_keys, true, &hw, &nw, err)) == 0) {
      if (ng != nw)
        rc = fsh_error_set(err, EINVAL, "partition %d has %lld rows, the top %lld of its input "
                           "partition %lld", (int)q, (long long)ng, (long long)last->n,
                           (long long)nw);
      for (int64_t i = 0; i < ng && !rc; i++)
        if (hg[i] != hw[i])
          rc = fsh_error_set(err, EINVAL, "partition %d: the sort keys of row %lld are not those "
                             "of its input partition's row %lld in order (not its top %lld)",
                             (int)q, (long long)i, (long long)i, (long long)last->n);
    }
    fsh_free(hg);
    fsh_free(hw);
  }
  for (int32_t q = 0; q < np; q++) fsh_batch_unref(ts.top[q]);
  fsh_free(ts.top);
  return rc;
}

/* A local limit / top-N of n rows a partition over node src against
 * what the plan fixes. Always: as many partitions as the operator, each
 * with at most n rows, every row a row of src (a single-process
 * reference run of the plan up to src; multisets: none more often than
 * there); a top-N's partitions each sorted by its keys. When src's
 * partitioning is fixed (partitioning_fixed), src's partitions from an
 * in-process partitioned run -- their rows together exactly the
 * reference's -- and each output partition q has min(n, rows of src's
 * partition q) rows, all rows of that partition; a limit of an input in
 * exact order (a scan's partitions): the first ones, in order.
 * Otherwise in all between min(n, rows of src) and min(rows of src,
 * n * partitions) rows. A top-N over fixed partitions: each partition's
 * sort keys, in order, those of its input partition's top n
 * (check_top_n_partitions); so for a limit of a local sort, by the sort's
 * keys. */
static int compare_local_limit(const fsh_plan *p, const plan_node *last, const fsh_plan_result *a,
                               fsh_error *err) {
  int src = last->inputs[0];
  const plan_node *in_node = p->nodes[src];
  int64_t n = last->n;
  bool fixed = partitioning_fixed(p, src);
  bool prefix = fixed && last->kind == PN_LIMIT && in_node->order == FSH_PLAN_ORDER_EXACT;
  int32_t np = last->n_partitions;
  hash_sink in = {0};
  parts_sink ip = {0};
  uint64_t *ha = NULL, *tmp = NULL, bad = 0;
  int64_t na = 0, *out_rows = NULL;
  int rc = partition_rows(a, &out_rows, err);
  if (!rc && a->n_partitions != np)
    rc = fsh_error_set(err, EINVAL, "%d output partitions, the %s has %d", (int)a->n_partitions,
                       last->user_op, (int)np);
  for (int32_t q = 0; !rc && q < np; q++)
    if (out_rows[q] > n)
      rc = fsh_error_set(err, EINVAL, "partition %d has %lld rows, more than the local %s's %lld",
                         (int)q, (long long)out_rows[q], last->user_op, (long long)n);
  if (!rc) rc = reference_input_hashes(p, src, last->user_op, &in, err);
  if (!rc) rc = check_rows_within(a, &in, last->user_op, &ha, &na, err);
  if (!rc && fixed && (rc = input_partitions(p, src, &ip, err)) == 0) {
    int64_t sum = 0;
    for (int32_t q = 0; q < ip.n; q++) sum += ip.h[q].n;
    if (ip.n != np)
      rc = fsh_error_set(err, EINVAL, "the %s's input has %d partitions, the %s %d",
                         last->user_op, (int)ip.n, last->user_op, (int)np);
    else if (sum != in.n)
      rc = fsh_error_set(err, EINVAL, "the %s's input partitioned in-process has %lld rows, the "
                         "reference run %lld", last->user_op, (long long)sum, (long long)in.n);
    /* the partitions' rows together: the reference's */
    uint64_t *all = NULL;
    if (!rc && !(all = fsh_malloc((size_t)(sum ? sum : 1) * sizeof *all)))
      rc = fsh_error_set(err, ENOMEM, "out of memory");
    int64_t at = 0;
    for (int32_t q = 0; !rc && q < ip.n; at += ip.h[q].n, q++)
      if (ip.h[q].n) memcpy(all + at, ip.h[q].h, (size_t)ip.h[q].n * sizeof *all);
    if (!rc) {
      qsort(all, (size_t)sum, sizeof *all, cmp_u64);
      if (sum && memcmp(all, in.h, (size_t)sum * sizeof *all) != 0)
        rc = fsh_error_set(err, EINVAL, "the %s's input partitioned in-process has other rows "
                           "than the reference run", last->user_op);
    }
    fsh_free(all);
    at = 0;
    for (int32_t q = 0; q < np && !rc; at += out_rows[q], q++) {
      int64_t rq = ip.h[q].n, want = rq < n ? rq : n;
      if (out_rows[q] != want) {
        rc = fsh_error_set(err, EINVAL, "partition %d has %lld rows; a local %s of %lld over its "
                           "%lld input rows has %lld", (int)q, (long long)out_rows[q],
                           last->user_op, (long long)n, (long long)rq, (long long)want);
      } else if (prefix) {
        for (int64_t i = 0; i < want && !rc; i++)
          if (ha[at + i] != ip.h[q].h[i])
            rc = fsh_error_set(err, EINVAL, "partition %d: row %lld is not its input's row %lld "
                               "(a limit of a partition in order keeps its first rows)", (int)q,
                               (long long)i, (long long)i);
      } else {
        uint64_t *sq = NULL;
        if ((rc = sorted_copy(ip.h[q].h, rq, &tmp, err)) == 0 &&
            (rc = sorted_copy(ha + at, want, &sq, err)) == 0 &&
            !multiset_within(sq, want, tmp, rq, &bad))
          rc = fsh_error_set(err, EINVAL, "partition %d has a row that is not a row of its input "
                             "partition (or more often than there)", (int)q);
        fsh_free(sq);
        fsh_free(tmp);
        tmp = NULL;
      }
    }
  } else if (!rc && !fixed) {
    int64_t lo = in.n < n ? in.n : n;
    int64_t hi = np > 0 && n <= in.n / np ? n * np : in.n;
    if (a->rows < lo || a->rows > hi)
      rc = fsh_error_set(err, EINVAL, "%lld rows; a local %s of %lld over %lld rows in %d "
                         "partitions has between %lld and %lld", (long long)a->rows,
                         last->user_op, (long long)n, (long long)in.n, (int)np, (long long)lo,
                         (long long)hi);
  }
  if (!rc && last->kind == PN_TOP_N) rc = check_partitions_sorted(last, a, err);
  if (!rc && last->kind == PN_TOP_N && fixed) rc = check_top_n_partitions(p, last, a, err);
  /* a limit of a local sort: its partitions' top n by the sort's keys */
  bool sorted_limit = last->kind == PN_LIMIT && in_node->kind == PN_SORT && fixed &&
                      partitioning_fixed(p, in_node->inputs[0]);
  if (!rc && sorted_limit) {
    plan_node as_top = *last;
    as_top.keys = in_node->keys;
    as_top.n_keys = in_node->n_keys;
    as_top.sort_order = in_node->sort_order;
    as_top.inputs[0] = in_node->inputs[0];
    as_top.user_op = "limit of a local sort";
    rc = check_top_n_partitions(p, &as_top, a, err);
  }
  if (!rc && err)
    snprintf(err->message, sizeof err->message,
             "compared as the plan allows: a local %s of %lld rows per partition: %s, every row "
             "a row of its input (a reference run, %lld rows; none more often than there)%s",
             last->user_op, (long long)n,
             prefix ? "each partition holds the first min(n, its rows) rows of its input "
                      "partition, in order (the input partitioned in-process, its rows together "
                      "the reference's)"
             : fixed ? "each partition holds min(n, its rows) rows of its input partition (the "
                       "input partitioned in-process, its rows together the reference's)"
                     : "at most n rows in each partition, the total within its bounds (the "
                       "input's partitioning is not fixed by the plan)",
             (long long)in.n,
             sorted_limit ? ", each partition's sort keys those of its sorted input partition's "
                            "first n, in order"
             : last->kind != PN_TOP_N ? ""
             : fixed ? ", each partition's sort keys those of its input partition's top n, in "
                       "order"
                     : ", each partition sorted by its keys");
  fsh_free(out_rows);
  fsh_free(ha);
  fsh_free(in.h);
  parts_sink_free(&ip);
  return rc;
}

/* The local aggregate `n` run over each of its input's partitions (an
 * in-process partitioned run of the plan up to its input, streamed into
 * one aggregate per partition): each partition's output row hashes. */
typedef struct agg_sink {
  const plan_node *n;
  fsh_hash_agg **agg; /* [np] */
  int32_t np;
} agg_sink;

static int agg_sink_put(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  agg_sink *as = arg;
  const plan_node *n = as->n;
  if (part < 0 || part >= as->np)
    return fsh_error_set(err, EINVAL, "partition %d of %d", (int)part, (int)as->np);
  if (!b) { /* (begun again: from nothing) */
    fsh_hash_agg_free(as->agg[part]);
    as->agg[part] = NULL;
  }
  if (!as->agg[part])
    FSH_RETURN_NOT_OK(fsh_hash_agg_new(n->agg_input, n->keys, n->n_keys, n->aggs, n->n_aggs,
                                       n->agg_mode, 0, &as->agg[part], err));
  return b ? fsh_hash_agg_push(as->agg[part], b, err) : 0;
}

static int agg_per_partition(const fsh_plan *p, const plan_node *n, parts_sink *out,
                             fsh_error *err) {
  fsh_plan view = *p;
  view.n_nodes = n->inputs[0] + 1;
  int32_t np = n->n_partitions;
  agg_sink as = {.n = n, .np = np, .agg = fsh_calloc((size_t)(np > 0 ? np : 1), sizeof *as.agg)};
  out->n = np;
  out->h = fsh_calloc((size_t)(np > 0 ? np : 1), sizeof *out->h);
  if (!as.agg || !out->h) {
    fsh_free(as.agg);
    parts_sink_free(out);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  fsh_plan_run_options ro = {.sink = agg_sink_put, .sink_arg = &as};
  fsh_plan_result run;
  int rc = fsh_plan_run(&view, &ro, &run, err);
  fsh_plan_result_reset(&run);
  if (rc) rc = fsh_error_prefix(err, rc, "the aggregate's input partitions (an in-process run): ");
  for (int32_t q = 0; q < np && !rc; q++) {
    fsh_batch *o = NULL;
    if (!as.agg[q])
      rc = fsh_hash_agg_new(n->agg_input, n->keys, n->n_keys, n->aggs, n->n_aggs, n->agg_mode, 0,
                            &as.agg[q], err);
    if (!rc) rc = fsh_hash_agg_finish(as.agg[q], &o, err);
    if (!rc && o) rc = hash_sink_put(&out->h[q], q, o, err);
    fsh_batch_unref(o);
  }
  for (int32_t q = 0; q < np; q++) fsh_hash_agg_free(as.agg[q]);
  fsh_free(as.agg);
  if (rc) parts_sink_free(out);
  return rc;
}

/* A local aggregate whose groups may span partitions against the
 * reference's (one partition: every group whole): each partition has
 * each group key at most once (no keys: at most one row), the output's
 * keys are the reference's (as sets). Its values depend on how the groups
 * were split: when the input's partitioning is fixed by the plan, each
 * output partition's rows equal the aggregate of that input partition
 * (an in-process partitioned run of the input, aggregated here a
 * partition at a time); otherwise they are not compared. */
static int compare_local_agg(const fsh_plan *p, const plan_node *last,
                             const fsh_plan_result *a, const fsh_plan_result *b, fsh_error *err) {
  int32_t keys[64];
  for (int32_t k = 0; k < last->n_keys; k++) {
    const char *name = last->agg_input->fields[last->keys[k]].name;
    keys[k] = -1;
    for (int64_t f = 0; f < last->schema->n_fields; f++)
      if (strcmp(last->schema->fields[f].name, name) == 0) keys[k] = (int32_t)f;
    if (keys[k] < 0) return fsh_error_set(err, EINVAL, "key '%s' not in the output", name);
  }
  int32_t np = a->n_partitions > 0 ? a->n_partitions : 1;
  /* (no keys: every row has the one empty key -- at most one a partition) */
  uint64_t *ha = NULL, *hb = NULL;
  int64_t na = 0, nb = 0;
  int rc = row_hashes(a, keys, last->n_keys, true, &ha, &na, err);
  if (!rc) rc = row_hashes(b, keys, last->n_keys, true, &hb, &nb, err);
  /* unique within each partition: sort each partition's slice */
  int64_t at = 0, row = 0;
  for (int32_t q = 0; !rc && q < a->n_partitions && a->partition_batches; q++) {
    int64_t len = 0;
    for (int64_t k = 0; k < a->partition_batches[q]; k++) len += a->batches[at++]->length;
    qsort(ha + row, (size_t)len, sizeof *ha, cmp_u64);
    for (int64_t i = 1; i < len && !rc; i++)
      if (ha[row + i] == ha[row + i - 1])
        rc = fsh_error_set(err, EINVAL, "partition %d has a group key twice", (int)q);
    row += len;
  }
  if (!rc) {
    qsort(ha, (size_t)na, sizeof *ha, cmp_u64);
    qsort(hb, (size_t)nb, sizeof *hb, cmp_u64);
    int64_t i = 0, j = 0;
    while (!rc && (i < na || j < nb)) {
      if (j == nb || (i < na && ha[i] < hb[j]))
        rc = fsh_error_set(err, EINVAL, "a group key not in the reference's groups");
      else if (i == na || hb[j] < ha[i])
        rc = fsh_error_set(err, EINVAL, "a group of the reference (sorted key hash %lld) is "
                           "missing", (long long)j);
      else {
        uint64_t v = hb[j];
        int64_t ca = 0;
        while (i < na && ha[i] == v) i++, ca++;
        while (j < nb && hb[j] == v) j++;
        if (ca > np) rc = fsh_error_set(err, EINVAL, "a group key %lld times in %d partitions",
                                        (long long)ca, (int)np);
      }
    }
  }
  fsh_free(ha);
  fsh_free(hb);
  /* partitions fixed by the plan: each output partition is the aggregate
   * of its input partition, values and all */
  bool fixed = partitioning_fixed(p, last->inputs[0]) && a->partition_batches;
  if (!rc && fixed) {
    parts_sink per = {0};
    if ((rc = agg_per_partition(p, last, &per, err)) == 0 &&
        (rc = row_hashes(a, NULL, 0, true, &ha, &na, err)) == 0)
      rc = check_partitions_hold(a, ha, &per, "the aggregate of its input partition (an "
                                 "in-process run of its input)", err);
    fsh_free(ha);
    parts_sink_free(&per);
  }
  if (!rc && err)
    snprintf(err->message, sizeof err->message,
             "compared as the plan allows: a local aggregate whose groups may span partitions: "
             "its group keys are the reference's (%lld groups), each at most once per "
             "partition; %s", (long long)b->rows,
             fixed ? "each partition's rows, values and all, are the aggregate of its input "
                     "partition (the input partitioned by an in-process run: its partitioning "
                     "is fixed by the plan)"
                   : "the values are not compared (the input's partitioning is not fixed by "
                     "the plan)");
  return rc;
}

/* (exec.h) Beyond what exec.h says: a plan whose last operator's rows
 * depend on the partitioning (node_partition_dependent: a local limit /
 * top-N over several partitions, a local aggregate whose groups may span
 * them) is compared as the plan allows (compare_local_limit,
 * compare_local_agg); a local sort's output in several partitions by its
 * rows and each partition's order; into_partitions by its partition count
 * and sizes too. On success err->message is empty when the comparison was
 * exact and otherwise says what was compared ("compared as the plan
 * allows: ..."). ENOTSUP when such an operator is followed by others:
 * nothing the single-process run gives can be compared. */
int fsh_plan_result_compare(const fsh_plan *p, const fsh_plan_result *a, const fsh_plan_result *b,
                            fsh_error *err) {
  if (err) err->message[0] = 0;
  if (p->n_nodes) {
    int last = p->n_nodes - 1;
    const plan_node *ln = p->nodes[last];
    int d = -1;
    for (int k = 0; k < ln->n_inputs && d < 0; k++) d = partition_dependent_in(p, ln->inputs[k]);
    if (d >= 0) {
      char name[160];
      return fsh_error_set(err, ENOTSUP, "cannot be compared with a single-process run: %s "
                           "depends on the partitioning (%s) and operators follow it; only as a "
                           "plan's last operator is it compared as the plan allows",
                           plan_node_name(p->nodes[d], name, sizeof name),
                           p->nodes[d]->kind == PN_AGG ? "a local aggregate whose groups may "
                           "span partitions" : "at most n rows per partition");
    }
    if (node_partition_dependent(p, last))
      return ln->kind == PN_AGG ? compare_local_agg(p, ln, a, b, err)
                                : compare_local_limit(p, ln, a, err);
    if (ln->kind == PN_INTO_BATCHES && a->partition_batches && a->batches) {
      /* every batch of a partition holds exactly `rows` rows but its last,
       * which holds 1 to `rows` (the rows and order: below) */
      int64_t bi = 0;
      for (int32_t q = 0; q < a->n_partitions; q++)
        for (int64_t j = 0; j < a->partition_batches[q]; j++, bi++) {
          int64_t len = bi < a->n_batches ? a->batches[bi]->length : -1;
          bool last = j == a->partition_batches[q] - 1;
          if (last ? len < 1 || len > ln->n : len != ln->n)
            return fsh_error_set(err, EINVAL, "partition %d batch %lld holds %lld rows; "
                                 "into_batches cuts batches of %lld rows (the last of a "
                                 "partition 1 to %lld)", (int)q, (long long)j, (long long)len,
                                 (long long)ln->n, (long long)ln->n);
        }
    }
    if (ln->kind == PN_EXCHANGE && ln->xkind == PX_INTO_PARTITIONS && a->partition_batches) {
      /* exactly n partitions, sizes differing by at most one row (their
       * rows and order: the exact comparison below) */
      int64_t *rows = NULL, lo = INT64_MAX, hi = 0;
      if (a->n_partitions != ln->n_partitions)
        return fsh_error_set(err, EINVAL, "%d output partitions, into_partitions asks for %d",
                             (int)a->n_partitions, (int)ln->n_partitions);
      FSH_RETURN_NOT_OK(partition_rows(a, &rows, err));
      for (int32_t q = 0; q < a->n_partitions; q++) {
        if (rows[q] < lo) lo = rows[q];
        if (rows[q] > hi) hi = rows[q];
      }
      fsh_free(rows);
      if (a->n_partitions > 0 && hi - lo > 1)
        return fsh_error_set(err, EINVAL, "into_partitions' partitions hold %lld to %lld rows "
                             "(they differ by at most one)", (long long)lo, (long long)hi);
    }
  }
  if (a->rows != b->rows)
    return fsh_error_set(err, EINVAL, "%lld rows, the reference has %lld", (long long)a->rows,
                         (long long)b->rows);
  int32_t n_keys;
  const int32_t *keys;
  bool determined;
  fsh_plan_order order = fsh_plan_output_order(p, &n_keys, &keys, &determined);
  uint64_t *ha = NULL, *hb = NULL;
  int64_t na, nb;
  int rc = 0;
  if ((rc = row_hashes(a, NULL, 0, true, &ha, &na, err)) != 0) return rc;
  if ((rc = row_hashes(b, NULL, 0, true, &hb, &nb, err)) != 0) {
    fsh_free(ha);
    return rc;
  }
  if (order == FSH_PLAN_ORDER_EXACT && determined) {
    for (int64_t i = 0; i < na && !rc; i++)
      if (ha[i] != hb[i]) rc = fsh_error_set(err, EINVAL, "row %lld differs from the reference's "
                                                          "(the output order is exact)", (long long)i);
  }
  if (!rc && determined) {
    qsort(ha, (size_t)na, sizeof *ha, cmp_u64);
    qsort(hb, (size_t)nb, sizeof *hb, cmp_u64);
    for (int64_t i = 0; i < na && !rc; i++)
      if (ha[i] != hb[i])
        rc = fsh_error_set(err, EINVAL, "the rows differ from the reference's (as multisets: "
                                        "sorted row hash %lld differs)", (long long)i);
  }
  fsh_free(ha);
  fsh_free(hb);
  int64_t limit = 0;
  bool global = false;
  int src = rc || determined || !p->n_nodes ? -1 : limit_source(p, &limit, &global);
  if (src < 0 && !rc && !determined && p->n_nodes) {
    src = top_n_source(p, &limit);
    global = true;
  }
  if (src >= 0) rc = check_limit_rows(p, a, src, limit, global, err);
  if (rc || order != FSH_PLAN_ORDER_KEYS) return rc;
  if (a->n_partitions > 1) {
    /* a local sort / top-N over several partitions: each partition in order */
    const plan_node *ln = p->nodes[p->n_nodes - 1];
    while ((ln->kind == PN_FILTER || ln->kind == PN_INTO_BATCHES || ln->kind == PN_LIMIT) &&
           ln->n_inputs == 1)
      ln = p->nodes[ln->inputs[0]];
    if (ln->kind != PN_SORT && ln->kind != PN_TOP_N)
      return fsh_error_set(err, ENOTSUP, "an output ordered by keys in %d partitions, not from a "
                           "sort", (int)a->n_partitions);
    rc = check_partitions_sorted(ln, a, err);
    /* a local sort last over partitions the plan fixes: each partition
     * holds its input partition's rows */
    bool per_part = ln == p->nodes[p->n_nodes - 1] && ln->kind == PN_SORT && determined &&
                    a->partition_batches && partitioning_fixed(p, ln->inputs[0]);
    if (!rc && per_part) {
      parts_sink ip = {0};
      if ((rc = row_hashes(a, NULL, 0, true, &ha, &na, err)) == 0 &&
          (rc = input_partitions(p, ln->inputs[0], &ip, err)) == 0)
        rc = check_partitions_hold(a, ha, &ip, "its input partition (a local sort keeps a "
                                   "partition's rows)", err);
      fsh_free(ha);
      parts_sink_free(&ip);
    }
    if (!rc && err)
      snprintf(err->message, sizeof err->message, "compared as the plan allows: %s, each of the "
               "%d partitions sorted by the %s's keys (a local %s)%s",
               determined ? "the rows equal the reference's (as multisets)"
                          : "the row count equals the reference's",
               (int)a->n_partitions, ln->user_op, ln->user_op,
               per_part ? ", each holding its input partition's rows (the input partitioned "
                          "in-process: its partitioning is fixed by the plan)"
                        : "");
    return rc;
  }
  if ((rc = row_hashes(a, keys, n_keys, true, &ha, &na, err)) != 0) return rc;
  if ((rc = row_hashes(b, keys, n_keys, true, &hb, &nb, err)) != 0) {
    fsh_free(ha);
    return rc;
  }
  for (int64_t i = 0; i < na && !rc; i++)
    if (ha[i] != hb[i])
      rc = fsh_error_set(err, EINVAL, "the sort keys of row %lld differ from the reference's "
                                      "(the output is ordered by them)", (long long)i);
  fsh_free(ha);
  fsh_free(hb);
  return rc;
}

