/* sort_internal.h -- what the sorting kernels (sort.c, topn.c, merge.c,
 * sample.c) share: the sort entry and the argument check. */
#ifndef FSH_SORT_INTERNAL_H
#define FSH_SORT_INTERNAL_H

#include "kernels/kernels_internal.h"

/* A row and the order-preserving 64-bit prefix of its first key. */
typedef struct fsh_sort_ent {
  uint64_t key;
  int64_t row;
} fsh_sort_ent;

/* Checks the arguments of a sort over b's key columns and resolves the
 * keys into *rk (the caller frees it); EINVAL / ENOTSUP naming the column,
 * *rk NULL on error. */
FSH_NODISCARD int fsh_kern_sort_check(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                      const fsh_sort_key *order, fsh_row_keys **rk,
                                      fsh_error *err);

#endif
