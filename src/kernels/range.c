/* range.c -- range partitioning: each row goes to the number of boundary
 * rows that sort strictly before it, found by binary search over the
 * boundaries with the row comparison of row_keys.c -- or, for a single
 * plain int64 key (a distributed sort's usual case), by comparing the
 * int64 values directly (partition_int64). */
#include "kernels/kernels_internal.h"

/* Whether slot i (absolute) of a is valid: a NULL bitmap, or null_count 0,
 * means every slot is. */
static inline bool slot_valid(const fsh_array *a, int64_t abs) {
  return !a->buffers[0] || a->null_count == 0 || fsh_bit_get(a->buffers[0]->data, abs);
}

/* The common case of a distributed sort on one int64 key: a plain
 * (not dictionary-encoded) INT64 key and boundaries without nulls. Each
 * valid row's partition is the number of boundaries strictly before it
 * (fsh_row_keys_compare(row, bound) > 0 exactly when bound < row,
 * ascending, or bound > row, descending), counted branch-free over the
 * boundaries when there are few, else by binary search; null rows go
 * through the general comparison rows / bounds. Same results as the
 * general loop below. */
static void partition_int64(const fsh_batch *b, int32_t col, const fsh_batch *boundaries,
                            bool descending, const fsh_row_keys *rows, const fsh_row_keys *bounds,
                            int32_t *out) {
  const fsh_array *a = b->columns[col], *ba = boundaries->columns[0];
  const int64_t *v = (const int64_t *)(const void *)a->buffers[1]->data + a->offset;
  const int64_t *bv = (const int64_t *)(const void *)ba->buffers[1]->data + ba->offset;
  int64_t nb = boundaries->length, n = b->length;
  bool nulls = a->buffers[0] && a->null_count != 0;
  for (int64_t i = 0; i < n; i++) {
    if (nulls && !slot_valid(a, a->offset + i)) {
      int64_t lo = 0, hi = nb;
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fsh_row_keys_compare(rows, i, bounds, mid) > 0) lo = mid + 1;
        else hi = mid;
      }
      out[i] = (int32_t)lo;
      continue;
    }
    int64_t x = v[i], lo = 0;
    if (nb <= 64) {
      if (descending)
        for (int64_t j = 0; j < nb; j++) lo += bv[j] > x;
      else
        for (int64_t j = 0; j < nb; j++) lo += bv[j] < x;
    } else {
      int64_t hi = nb;
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (descending ? bv[mid] > x : bv[mid] < x) lo = mid + 1;
        else hi = mid;
      }
    }
    out[i] = (int32_t)lo;
  }
}

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
  bool int64_key = rc == 0 && b->length > 0 && nb > 0 && n_keys == 1 &&
                   !b->schema->fields[key_cols[0]].dictionary &&
                   b->schema->fields[key_cols[0]].type == FSH_TYPE_INT64 &&
                   !boundaries->schema->fields[0].dictionary &&
                   boundaries->schema->fields[0].type == FSH_TYPE_INT64;
  for (int64_t j = 0; int64_key && j < nb; j++)
    int64_key = slot_valid(boundaries->columns[0], boundaries->columns[0]->offset + j);
  if (int64_key) /* else the general loop */
    partition_int64(b, key_cols[0], boundaries, order && order[0].descending, rows, bounds, out);
  for (int64_t i = 0; i < b->length && rc == 0 && !int64_key; i++) {
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
