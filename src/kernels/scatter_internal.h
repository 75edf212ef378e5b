/* scatter_internal.h -- the plan scatter.c hands to scatter_flat.c: row
 * partition ids, each row's slot in its partition and per-partition row
 * counts. */
#ifndef FSH_KERNELS_SCATTER_INTERNAL_H
#define FSH_KERNELS_SCATTER_INTERNAL_H

#include <flightshuffle/kernels.h>

typedef struct scatter_plan {
  const int32_t *part; /* partition of each row, checked in [0, n_p) */
  const int32_t *slot; /* row i is row slot[i] of partition part[i] (row order) */
  int64_t n;           /* rows */
  int32_t n_p;         /* partitions */
  const int64_t *count; /* rows per partition */
} scatter_plan;

/* Whether a column of field f takes the push-style path. */
bool fsh_kern_scatter_flat_ok(const fsh_field *f);

/* Scatters column `a` of field f: arr[p] gets a new array of count[p] rows
 * for each partition with rows (left NULL for the others). On error the
 * arrays made so far stay in arr[] for the caller to release. */
FSH_NODISCARD int fsh_kern_scatter_flat(const scatter_plan *sp, const fsh_field *f, fsh_array *a,
                                        fsh_array **arr, fsh_error *err);

#endif
