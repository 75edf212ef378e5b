/* workloads.h -- generated data for demos, benchmarks and tests. Later
 * issues add TPC-H, MinHash dedupe and synthetic shuffle jobs here. */
#ifndef FLIGHTSHUFFLE_WORKLOADS_H
#define FLIGHTSHUFFLE_WORKLOADS_H

#include <flightshuffle/arrow.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The synthetic table: key int64 (uniform), value float64 (with ~1% nulls
 * when with_nulls), name utf8 (short words, avg `avg_str_len` bytes, ~1% nulls
 * when with_nulls). Deterministic for a given seed. */
typedef struct fsh_synthetic_options {
  uint64_t seed;
  int32_t avg_str_len; /* 0 = 12 */
  bool with_nulls;
  int64_t key_range; /* keys in [0, key_range); 0 = full int64 range */
} fsh_synthetic_options;

FSH_NODISCARD fsh_schema *fsh_synthetic_schema(void);
/* Batch number `index` of the synthetic table, `rows` rows. */
FSH_NODISCARD int fsh_synthetic_batch(fsh_schema *schema, const fsh_synthetic_options *opts,
                                      int64_t index, int64_t rows, fsh_batch **out,
                                      fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
