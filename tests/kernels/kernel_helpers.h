/* kernel_helpers.h -- what the kernels' tests share: a deterministic
 * random generator, a larger every-type batch built from sample_batches.h,
 * and per-column checks of a batch against take(). Header-only. */
#ifndef FSH_TESTS_KERNEL_HELPERS_H
#define FSH_TESTS_KERNEL_HELPERS_H

#include "ipc/sample_batches.h"
#include "test.h"

#include <flightshuffle/kernels.h>

static inline uint64_t kh_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The every-type sample batch repeated `times` times (through fsh_concat,
 * checked valid), then sliced by `cut` rows on each side: offsets everywhere. */
static inline fsh_batch *kh_big_batch(int times, int64_t cut) {
  fsh_error err;
  fsh_batch *one = fsh_sample_all_types();
  fsh_batch *copies[64];
  if (times > 64) abort();
  for (int i = 0; i < times; i++) copies[i] = one;
  fsh_batch *big = NULL;
  if (fsh_concat(copies, times, &big, &err) != 0) {
    fprintf(stderr, "kh_big_batch: %s\n", err.message);
    abort();
  }
  if (fsh_batch_validate(big, true, &err) != 0) {
    fprintf(stderr, "kh_big_batch: invalid concat: %s\n", err.message);
    abort();
  }
  fsh_batch *s = SBH_OK(fsh_batch_slice(big, cut, big->length - 2 * cut));
  fsh_batch_unref(big);
  fsh_batch_unref(one);
  return s;
}

/* got must be valid and equal take(b, idx[0, n)). */
static inline void kh_check_equals_take(fsh_batch *b, const int64_t *idx, int64_t n,
                                        const fsh_batch *got, const char *what) {
  fsh_error err;
  fsh_batch *want = NULL;
  CHECK_OK(fsh_take(b, idx, n, &want, &err));
  if (!want) return;
  CHECK_MSG(fsh_batch_validate(want, true, &err) == 0, "%s: take invalid: %s", what, err.message);
  if (n == 0 && !got) {
    fsh_batch_unref(want);
    return;
  }
  CHECK_MSG(got != NULL, "%s: no batch", what);
  if (got) {
    CHECK_MSG(fsh_batch_validate(got, true, &err) == 0, "%s: invalid: %s", what, err.message);
    CHECK_MSG(fsh_batch_equals(want, got, &err), "%s: %s", what, err.message);
  }
  fsh_batch_unref(want);
}

/* Independent of take: row k of got equals row idx[k] of b, column by
 * column, through 1-row slices and fsh_array_equals. */
static inline void kh_check_rows(fsh_batch *b, const int64_t *idx, int64_t n, const fsh_batch *got,
                                 const char *what) {
  fsh_error err;
  CHECK_EQ_INT(got->length, n);
  CHECK_MSG(fsh_batch_validate(got, true, &err) == 0, "%s: invalid: %s", what, err.message);
  for (int64_t c = 0; c < b->n_columns && got->length == n; c++) {
    const fsh_field *f = &b->schema->fields[c];
    for (int64_t k = 0; k < n; k++) {
      fsh_array *x = SBH_OK(fsh_array_slice(got->columns[c], k, 1));
      fsh_array *y = SBH_OK(fsh_array_slice(b->columns[c], idx[k], 1));
      CHECK_MSG(fsh_array_equals(f, x, y, &err), "%s: row %lld: %s", what, (long long)k,
                err.message);
      fsh_array_unref(x);
      fsh_array_unref(y);
    }
  }
}
#endif
