/* partition.c -- hash and random partition assignment: one int32
 * partition id per row, by a multiply-shift reduction that is the same on
 * every machine (fsh_partition_of_hash). Range partitioning is range.c. */
#include "kernels/kernels_internal.h"

static int check_n(int32_t n_partitions, fsh_error *err) {
  if (n_partitions < 1)
    return fsh_error_set(err, EINVAL, "partition: %d partitions, need at least 1", n_partitions);
  return 0;
}

int fsh_partition_hash(const uint64_t *hashes, int64_t n, int32_t n_partitions, int32_t *out,
                       fsh_error *err) {
  FSH_RETURN_NOT_OK(check_n(n_partitions, err));
  if (n < 0 || (n > 0 && (!hashes || !out)))
    return fsh_error_set(err, EINVAL, "partition: NULL hashes or output, or negative count");
  for (int64_t i = 0; i < n; i++) out[i] = fsh_partition_of_hash(hashes[i], n_partitions);
  return 0;
}

/* splitmix64's finalizer (Steele, Lea, Flood 2014): a bijective mix. */
static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int fsh_partition_random(int64_t n, int32_t n_partitions, uint64_t seed, int64_t first_row,
                         int32_t *out, fsh_error *err) {
  FSH_RETURN_NOT_OK(check_n(n_partitions, err));
  if (n < 0 || (n > 0 && !out))
    return fsh_error_set(err, EINVAL, "partition: NULL output or negative count");
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = (uint64_t)first_row + (uint64_t)i;
    out[i] = fsh_partition_of_hash(mix64(seed + r * 0x9E3779B97F4A7C15ull), n_partitions);
  }
  return 0;
}
