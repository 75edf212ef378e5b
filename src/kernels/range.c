/* range.c -- range partitioning: each row goes to the number of boundary
 * rows that sort strictly before it, found by binary search over the
 * boundaries with the row comparison of row_keys.c. */
#include "kernels/kernels_internal.h"

int fsh_partition_range(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                        const fsh_batch *boundaries, const fsh_sort_key *order, int32_t *out,
                        fsh_error *err) {
  if (!b || !key_cols || !boundaries || n_keys < 1 || (b->length > 0 && !out))
    return fsh_error_set(err, EINVAL, "range partition: NULL argument or no key column");
  if (boundaries->n_columns != n_keys)
    return fsh_error_set(err, EINVAL, "range partition: %d keys but the boundaries have %lld columns",
                         n_keys, (long long)boundaries->n_columns);
  if (boundaries->length >= INT32_MAX)
    return fsh_error_set(err, EINVAL, "range partition: too many boundaries (%lld)",
                         (long long)boundaries->length);
  fsh_row_keys *rows = NULL, *bounds = NULL;
  int32_t *bound_cols = fsh_malloc((size_t)n_keys * sizeof *bound_cols);
  if (!bound_cols) return fsh_error_set(err, ENOMEM, "range partition: out of memory");
  for (int k = 0; k < n_keys; k++) bound_cols[k] = k;
  int rc = fsh_row_keys_new(b, key_cols, n_keys, order, &rows, err);
  if (rc == 0) {
    rc = fsh_row_keys_new(boundaries, bound_cols, n_keys, order, &bounds, err);
    if (rc != 0) fsh_error_prefix(err, rc, "boundaries: ");
  }
  if (rc == 0) {
    rc = fsh_row_keys_check_compatible(rows, bounds, err);
    if (rc != 0) fsh_error_prefix(err, rc, "boundaries against the keys: ");
  }
  int64_t nb = boundaries->length;
  for (int64_t j = 1; j < nb && rc == 0; j++)
    if (fsh_row_keys_compare(bounds, j - 1, bounds, j) > 0)
      rc = fsh_error_set(err, EINVAL, "boundary rows %lld and %lld are out of order",
                         (long long)j - 1, (long long)j);
  for (int64_t i = 0; i < b->length && rc == 0; i++) {
    int64_t lo = 0, hi = nb; /* first boundary >= row */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (fsh_row_keys_compare(rows, i, bounds, mid) > 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    out[i] = (int32_t)lo;
  }
  fsh_row_keys_free(rows);
  fsh_row_keys_free(bounds);
  fsh_free(bound_cols);
  if (rc != 0) fsh_error_prefix(err, rc, "range partition: ");
  return rc;
}
