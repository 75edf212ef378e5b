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
/* The same batch, made in the memory of *b where it can: *b (in/out;
 * NULL: none) is a batch an earlier call made and the caller's reference
 * to it is given up; every buffer of it that nobody else holds (the batch,
 * its array and the buffer each referenced once) and that suits the new
 * batch's size is refilled in place, the rest is released and allocated
 * anew. For a generator loop: its columns are not allocated -- and their
 * pages not faulted in -- every batch. On error *b is NULL. */
FSH_NODISCARD int fsh_synthetic_batch_refill(fsh_schema *schema,
                                             const fsh_synthetic_options *opts, int64_t index,
                                             int64_t rows, fsh_batch **b, fsh_error *err);

/* The keyed table (keyed.c), for joins, group-bys and the shuffle property
 * tests: id int64 (the row number, never null), key int64 (nullable:
 * uniform in [0, key_range) but 0 for a `skew` fraction of rows and null
 * for a `null_fraction` of them), grp utf8 ("g0" .. "g<groups-1>"),
 * amount int64 (in [-1000, 1000]). Row r of the table is the same whatever
 * the batching: batch `index` of `rows` rows holds rows index * rows .. */
typedef struct fsh_keyed_options {
  uint64_t seed;
  int64_t key_range;    /* 0 = 1000 */
  double skew;          /* 0 .. 1 */
  double null_fraction; /* 0 .. 1 */
  int32_t groups;       /* 0 = 16 */
} fsh_keyed_options;

FSH_NODISCARD fsh_schema *fsh_keyed_schema(void);
FSH_NODISCARD int fsh_keyed_batch(fsh_schema *schema, const fsh_keyed_options *opts,
                                  int64_t first_row, int64_t rows, fsh_batch **out,
                                  fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
