/* plan_compare.c -- comparing a plan's result with a reference run's:
 * row hashes (float columns rounded, so that sums in another order
 * compare equal), as multisets, in exact order or by the sort keys as the
 * plan's output order allows; a plan ending in a limit whose rows are not
 * determined (its input unordered: any n rows of it will do) by its row
 * count and by every row's membership in the limit's input (a reference
 * run of the plan up to it). */
#include "exec/plan_internal.h"

#include <errno.h>
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

/* Result a of p, which ends in a limit of n rows over node src: a global
 * limit has min(n, rows of src) rows, and every row of a is a row of src
 * (as multisets: no row more often than src has it), src's rows from a
 * single-process reference run of the plan up to src (streamed: only
 * their hashes are held). */
static int check_limit_rows(const fsh_plan *p, const fsh_plan_result *a, int src, int64_t n,
                            bool global, fsh_error *err) {
  fsh_plan view = *p; /* the plan up to src: its nodes are the first src + 1 */
  view.n_nodes = src + 1;
  hash_sink in = {0};
  fsh_plan_run_options ro = {.reference = true, .sink = hash_sink_put, .sink_arg = &in};
  fsh_plan_result run;
  int rc = fsh_plan_run(&view, &ro, &run, err);
  fsh_plan_result_reset(&run);
  if (rc) {
    fsh_free(in.h);
    return fsh_error_prefix(err, rc, "the limit's input (a reference run): ");
  }
  int64_t want = in.n < n ? in.n : n;
  uint64_t *ha = NULL, *sorted = NULL;
  int64_t na = 0;
  if (global && a->rows != want)
    rc = fsh_error_set(err, EINVAL, "%lld rows; a limit of %lld over %lld rows has %lld",
                       (long long)a->rows, (long long)n, (long long)in.n, (long long)want);
  if (!rc) rc = row_hashes(a, NULL, 0, true, &ha, &na, err);
  if (!rc && !(sorted = fsh_malloc((size_t)(na ? na : 1) * sizeof *sorted)))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (!rc) {
    memcpy(sorted, ha, (size_t)na * sizeof *sorted);
    qsort(sorted, (size_t)na, sizeof *sorted, cmp_u64);
    if (in.n > 1) qsort(in.h, (size_t)in.n, sizeof *in.h, cmp_u64);
    int64_t i = 0, k = 0;
    for (; i < na; i++) { /* the next input row of that hash not yet taken */
      while (k < in.n && in.h[k] < sorted[i]) k++;
      if (k == in.n || in.h[k] != sorted[i]) break;
      k++;
    }
    if (i < na) {
      int64_t row = 0;
      while (row < na && ha[row] != sorted[i]) row++;
      rc = fsh_error_set(err, EINVAL, "row %lld is not a row of the limit's input (%lld rows, "
                         "a reference run), or is there fewer times than in the result",
                         (long long)row, (long long)in.n);
    }
  }
  fsh_free(ha);
  fsh_free(in.h);
  fsh_free(sorted);
  return rc;
}

int fsh_plan_result_compare(const fsh_plan *p, const fsh_plan_result *a, const fsh_plan_result *b,
                            fsh_error *err) {
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
  if (src >= 0) rc = check_limit_rows(p, a, src, limit, global, err);
  if (rc || order != FSH_PLAN_ORDER_KEYS) return rc;
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

