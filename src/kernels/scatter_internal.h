/* scatter_internal.h -- the plan scatter.c hands to scatter_flat.c: row
 * partition ids, each row's slot in its partition and per-partition row
 * counts. */
#ifndef FSH_KERNELS_SCATTER_INTERNAL_H
#define FSH_KERNELS_SCATTER_INTERNAL_H

#include <string.h>

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
 * to offs_dst[part] + w * (slot + 1), w the offset width 4 or 8;
 * `prefetch`: destinations likely not in cache (see scatter_flat.c). */
void fsh_kern_push_fixed(const scatter_plan *sp, const uint8_t *src, int64_t off, int64_t width,
                         uint8_t **dst);
void fsh_kern_push_binary(const scatter_plan *sp, const fsh_array *a, int w, uint8_t **offs_dst,
                          uint8_t **data_dst, int64_t *pos, bool prefetch);

/* The n <= 64 bits of a bitmap from bit `at`, in the low bits (the others
 * zero); reads only the bytes those bits are in. */
static inline uint64_t fsh_kern_load_bits(const uint8_t *bits, int64_t at, int64_t n) {
  const uint8_t *p = bits + (at >> 3);
  int sh = (int)(at & 7);
  int64_t n_bytes = (sh + n + 7) >> 3; /* <= 9 */
  uint64_t v = 0;
  if (n_bytes >= 8) {
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
  } else {
    for (int64_t k = 0; k < n_bytes; k++) v |= (uint64_t)p[k] << (8 * k);
  }
  v >>= sh;
  if (n_bytes > 8) v |= (uint64_t)p[8] << (64 - sh);
  return n < 64 ? v & (((uint64_t)1 << n) - 1) : v;
}

/* The null rows among the n <= 64 rows from bit `at` of a validity
 * bitmap: bit j set when row at + j is null (no bit past n). */
static inline uint64_t fsh_kern_load_nulls(const uint8_t *bits, int64_t at, int64_t n) {
  uint64_t nulls = ~fsh_kern_load_bits(bits, at, n);
  return n < 64 ? nulls & (((uint64_t)1 << n) - 1) : nulls;
}

#endif
