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

/* count[p] += rows of partition p, slot[i] = row i's place among the
 * rows of its partition (counting from count[p]'s value on entry); EINVAL
 * on an id outside [0, n_p). */
FSH_NODISCARD int fsh_kern_count_slots(const int32_t *part, int64_t n, int32_t n_p, int64_t *count,
                                       int32_t *slot, fsh_error *err);

/* Whether a column of field f takes the push-style path. */
bool fsh_kern_scatter_flat_ok(const fsh_field *f);

/* Scatters column `a` of field f: arr[p] gets a new array of count[p] rows
 * for each partition with rows (left NULL for the others). On error the
 * arrays made so far stay in arr[] for the caller to release. */
FSH_NODISCARD int fsh_kern_scatter_flat(const scatter_plan *sp, const fsh_field *f, fsh_array *a,
                                        fsh_array **arr, fsh_error *err);

/* The pushes fsh_kern_scatter_flat is made of, for the partition builders
 * (scatter_append.c): each row's value to dst[part] + width * slot; each
 * binary row's bytes to data_dst[part] + pos[part] (pos advanced; 32
 * spare bytes past every destination's end) and its end offset pos[part]
 * to offs_dst[part] + w * (slot + 1), w the offset width 4 or 8. */
void fsh_kern_push_fixed(const scatter_plan *sp, const uint8_t *src, int64_t off, int64_t width,
                         uint8_t **dst);
void fsh_kern_push_binary(const scatter_plan *sp, const fsh_array *a, int w, uint8_t **offs_dst,
                          uint8_t **data_dst, int64_t *pos);

#endif
