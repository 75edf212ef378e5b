/* into_partitions.c -- "into partitions": the plan that splits an ordered
 * sequence of inputs into exactly N contiguous, near-equal outputs. */
#include "kernels/kernels_internal.h"

int fsh_plan_partitions(const int64_t *input_rows, int64_t n_inputs, int32_t n_out,
                        fsh_part_slice *out, fsh_error *err) {
  if ((n_inputs > 0 && !input_rows) || n_inputs < 0 || n_out < 1 || !out)
    return fsh_error_set(err, EINVAL, "into partitions: NULL argument, %lld inputs or %d outputs",
                         (long long)n_inputs, (int)n_out);
  int64_t total = 0;
  for (int64_t i = 0; i < n_inputs; i++) {
    if (input_rows[i] < 0 || input_rows[i] > INT64_MAX - total)
      return fsh_error_set(err, EINVAL, "into partitions: input %lld has %lld rows", (long long)i,
                           (long long)input_rows[i]);
    total += input_rows[i];
  }
  int64_t q = total / n_out, rem = total % n_out;
  int64_t in = 0, row = 0; /* the position where output p starts */
  for (int32_t p = 0; p < n_out; p++) {
    while (in < n_inputs && row == input_rows[in]) in++, row = 0; /* skip consumed or empty */
    int64_t size = q + (p < rem ? 1 : 0);
    out[p] = (fsh_part_slice){in, row, size};
    /* advance by size rows */
    while (size > 0) {
      int64_t avail = input_rows[in] - row;
      if (size < avail) {
        row += size;
        size = 0;
      } else {
        size -= avail;
        in++;
        row = 0;
      }
    }
  }
  return 0;
}
