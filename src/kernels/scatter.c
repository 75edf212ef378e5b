/* scatter.c -- split a batch into partitions in two passes: count the rows
 * of each partition, then copy. Flat columns are pushed value by value in
 * one sequential pass over the source (scatter_flat.c); nested columns are
 * gathered per partition from a permutation grouping row numbers by
 * partition (a counting sort). Allocations: a few arrays per call, the
 * output arrays per partition and column; nothing per row. */
#include "kernels/kernels_internal.h"

#include "kernels/scatter_internal.h"

static void release_all(fsh_batch **out, int32_t n) {
  for (int32_t p = 0; p < n; p++) {
    fsh_batch_unref(out[p]);
    out[p] = NULL;
  }
}

int fsh_kern_count_slots(const int32_t *part, int64_t n, int32_t n_p, int64_t *count,
                         int32_t *slot, fsh_error *err) {
  for (int64_t i = 0; i < n; i++) {
    if ((uint32_t)part[i] >= (uint32_t)n_p)
      return fsh_error_set(err, EINVAL, "row %lld has partition %d, outside [0, %d)",
                           (long long)i, part[i], n_p);
    slot[i] = (int32_t)count[part[i]]++;
  }
  return 0;
}

/* Row numbers grouped by partition, in row order within each (start has
 * n_p + 1 entries: partition p's run is perm[start[p], start[p + 1])). */
static void group_rows(const scatter_plan *sp, int64_t *start, int64_t *cursor, int64_t *perm) {
  start[0] = 0;
  for (int32_t p = 0; p < sp->n_p; p++) start[p + 1] = start[p] + sp->count[p];
  memcpy(cursor, start, sizeof *start * (size_t)sp->n_p);
  for (int64_t i = 0; i < sp->n; i++) perm[cursor[sp->part[i]]++] = i;
}

/* Column c of every partition: pushed if flat, else gathered. */
static int scatter_column(const scatter_plan *sp, fsh_batch *b, int64_t c, const int64_t *start,
                          const int64_t *perm, fsh_array **arr, fsh_batch **out, fsh_error *err) {
  const fsh_field *f = &b->schema->fields[c];
  memset(arr, 0, sizeof *arr * (size_t)sp->n_p);
  int rc = 0;
  if (fsh_kern_scatter_flat_ok(f)) {
    rc = fsh_kern_scatter_flat(sp, f, b->columns[c], arr, err);
  } else {
    for (int32_t p = 0; p < sp->n_p && rc == 0; p++)
      if (sp->count[p] > 0)
        rc = fsh_kern_gather(f, b->columns[c], 0, perm + start[p], sp->count[p], &arr[p], err);
  }
  for (int32_t p = 0; p < sp->n_p; p++) { /* moved into the batches, or released */
    if (rc == 0 && out[p]) out[p]->columns[c] = arr[p];
    else fsh_array_unref(arr[p]);
  }
  if (rc != 0) fsh_error_prefix(err, rc, "column %lld ('%s'): ", (long long)c, f->name);
  return rc;
}

/* scratch: count, start, cursor (3 n_p + 1 int64), perm (n int64), then
 * the slots (n int32); arr: n_p array slots. */
static int scatter_rows(fsh_batch *b, const int32_t *part, int32_t n_p, int64_t *scratch,
                        fsh_array **arr, fsh_batch **out, fsh_error *err) {
  int64_t *count = scratch, *start = count + n_p, *cursor = start + n_p + 1,
          *perm = cursor + n_p;
  int32_t *slot = (int32_t *)(perm + b->length);
  scatter_plan sp = {part, slot, b->length, n_p, count};
  FSH_RETURN_NOT_OK(fsh_kern_count_slots(part, b->length, n_p, count, slot, err));
  for (int32_t p = 0; p < n_p; p++) {
    if (count[p] == b->length) { /* every row: the batch itself */
      out[p] = fsh_batch_ref(b);
      return 0;
    }
  }
  bool nested = false;
  for (int64_t c = 0; c < b->n_columns; c++)
    nested |= !fsh_kern_scatter_flat_ok(&b->schema->fields[c]);
  if (nested) group_rows(&sp, start, cursor, perm);
  for (int32_t p = 0; p < n_p; p++)
    if (count[p] > 0 && !(out[p] = fsh_batch_new(b->schema, count[p])))
      return fsh_error_set(err, ENOMEM, "out of memory");
  for (int64_t c = 0; c < b->n_columns; c++)
    FSH_RETURN_NOT_OK(scatter_column(&sp, b, c, start, perm, arr, out, err));
  return 0;
}

int fsh_scatter(fsh_batch *b, const int32_t *partition_of_row, int32_t n_partitions,
                fsh_batch **out, fsh_error *err) {
  if (!out || n_partitions < 1)
    return fsh_error_set(err, EINVAL, "scatter: no output or %d partitions", n_partitions);
  for (int32_t p = 0; p < n_partitions; p++) out[p] = NULL;
  if (!b || (b->length > 0 && !partition_of_row))
    return fsh_error_set(err, EINVAL, "scatter: NULL batch or partition ids");
  if (b->length == 0) return 0;
  if (b->length > INT32_MAX)
    return fsh_error_set(err, EINVAL, "scatter: a batch of %lld rows (at most %d)",
                         (long long)b->length, INT32_MAX);
  size_t n_scratch = 3 * (size_t)n_partitions + 1 + (size_t)b->length + ((size_t)b->length + 1) / 2;
  int64_t *scratch = fsh_malloc(n_scratch * sizeof *scratch);
  if (scratch) memset(scratch, 0, sizeof *scratch * (size_t)n_partitions); /* count */
  fsh_array **arr = fsh_malloc(sizeof *arr * (size_t)n_partitions);
  int rc = scratch && arr ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
  if (rc == 0) rc = scatter_rows(b, partition_of_row, n_partitions, scratch, arr, out, err);
  fsh_free(scratch);
  fsh_free(arr);
  if (rc != 0) {
    release_all(out, n_partitions);
    fsh_error_prefix(err, rc, "scatter: ");
  }
  return rc;
}
