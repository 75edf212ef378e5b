/* sample.c -- range boundaries for range partitioning, chosen from a sample
 * of key rows: the sample's key columns sorted, the rows at the
 * n_partitions-quantiles, equal neighbours dropped so that the boundaries
 * strictly increase even when one key holds most of the sample. */
#include "kernels/sort_internal.h"

/* A batch of columns cols[0, n) of b (fields copied, arrays shared). */
static int project(fsh_batch *b, const int32_t *cols, int n, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  fsh_schema *s = fsh_schema_new(n);
  if (!s) return kern_oom(err);
  for (int k = 0; k < n; k++)
    if (fsh_field_copy(&s->fields[k], &b->schema->fields[cols[k]]) != 0) {
      fsh_schema_unref(s);
      return kern_oom(err);
    }
  fsh_batch *p = fsh_batch_new(s, b->length);
  fsh_schema_unref(s);
  if (!p) return kern_oom(err);
  for (int k = 0; k < n; k++) p->columns[k] = fsh_array_ref(b->columns[cols[k]]);
  *out = p;
  return 0;
}

int fsh_range_boundaries(fsh_batch *sample, const int32_t *key_cols, int n_keys,
                         const fsh_sort_key *order, int32_t n_partitions, fsh_batch **out,
                         fsh_error *err) {
  if (out) *out = NULL;
  fsh_row_keys *rk = NULL;
  int rc = fsh_kern_sort_check(sample, key_cols, n_keys, order, &rk, err);
  fsh_row_keys_free(rk); /* checked columns; the projection is compared below */
  rk = NULL;
  if (rc == 0 && (n_partitions < 1 || !out))
    rc = fsh_error_set(err, EINVAL, "%d partitions (need >= 1) or NULL out", (int)n_partitions);
  if (rc != 0) return fsh_error_prefix(err, rc, "range boundaries: ");
  int32_t *cols = fsh_malloc((size_t)n_keys * sizeof *cols);
  int64_t n = sample->length, nb = 0;
  int64_t *idx = fsh_malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
  int64_t *pick = fsh_malloc((size_t)n_partitions * sizeof *pick);
  fsh_batch *proj = NULL;
  if (!cols || !idx || !pick) rc = kern_oom(err);
  for (int k = 0; k < n_keys && rc == 0; k++) cols[k] = k;
  if (rc == 0) rc = project(sample, key_cols, n_keys, &proj, err);
  if (rc == 0) rc = fsh_sort_indices(proj, cols, n_keys, order, idx, err);
  if (rc == 0) rc = fsh_row_keys_new(proj, cols, n_keys, order, &rk, err);
  for (int64_t p = 1; p < n_partitions && n > 0 && rc == 0; p++) {
    /* quantile p / n_partitions of the sorted sample, without overflow */
    int64_t q = (n / n_partitions) * p + ((n % n_partitions) * p) / n_partitions;
    if (q >= n) q = n - 1;
    int64_t r = idx[q];
    if (nb > 0 && fsh_row_keys_compare(rk, pick[nb - 1], rk, r) >= 0) continue;
    pick[nb++] = r;
  }
  if (rc == 0) rc = fsh_take(proj, pick, nb, out, err);
  fsh_row_keys_free(rk);
  fsh_batch_unref(proj);
  fsh_free(cols);
  fsh_free(idx);
  fsh_free(pick);
  if (rc != 0) fsh_error_prefix(err, rc, "range boundaries: ");
  return rc;
}
