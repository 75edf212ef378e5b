/* exec.h -- query execution: the relational operators that joins and
 * group-bys need (expressions, filter, project, hash aggregate, hash join)
 * and, later, the operator model and plans the driver's stages run.
 *
 * Operators work on record batches (arrow.h) and call the compute kernels
 * (kernels.h: hashing, take, filter, concat, sort, row comparison); no
 * operator knows which shuffle backend (shuffle.h) moves its input.
 *
 * Errors follow arrow.h: 0 or an errno-style code plus an fsh_error whose
 * message names the operator, expression or column at fault; on error
 * outputs are left NULL and nothing leaks. */
#ifndef FLIGHTSHUFFLE_EXEC_H
#define FLIGHTSHUFFLE_EXEC_H

#include <flightshuffle/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- expressions, filter, project -------------------------------------- */


/* ---- hash aggregate ------------------------------------------------------ */

/* Aggregate functions. Types and nulls (SQL semantics):
 *   COUNT_STAR      rows of the group                     -> int64, never null
 *   COUNT           non-null values                       -> int64, never null
 *   COUNT_DISTINCT  distinct non-null values (any type fsh_row_keys orders,
 *                   dictionaries compared by value)       -> int64, never null
 *   SUM             signed integers -> int64, unsigned -> uint64,
 *                   decimal128(p, s) -> decimal128(38, s) (EOVERFLOW, naming
 *                   the column, when the sum overflows); float16/32/64 ->
 *                   float64; null when the group has no non-null value
 *   AVG             integers, floats and decimal128 -> float64 (summed as
 *                   float64); null when the group has no non-null value
 *   MIN, MAX        integers, floats, decimal128, date/time/timestamp/
 *                   duration, (large) binary and utf8 (bytewise) -> the
 *                   input's type; NaN is skipped unless every value is
 *                   NaN (as Arrow's min_max); null when the group has no
 *                   non-null value
 * A null in a row's value column counts for COUNT_STAR only. Dictionary-
 * encoded value columns are accepted by COUNT and COUNT_DISTINCT. */
typedef enum fsh_agg_fn {
  FSH_AGG_COUNT_STAR = 0,
  FSH_AGG_COUNT,
  FSH_AGG_COUNT_DISTINCT,
  FSH_AGG_SUM,
  FSH_AGG_AVG,
  FSH_AGG_MIN,
  FSH_AGG_MAX
} fsh_agg_fn;

/* One aggregate: the function, its input column (index into the input
 * schema; ignored by COUNT_STAR) and the output column's name (NULL: "fn(col)"
 * as "sum(x)", "count(*)"). */
typedef struct fsh_agg_spec {
  fsh_agg_fn fn;
  int32_t column;
  const char *name;
} fsh_agg_spec;

/* Two-phase aggregation. SINGLE: input rows -> final values. PARTIAL: input
 * rows -> one row per group of keys + partial states. FINAL: partial-state
 * batches (from any number of PARTIAL aggregates of the same specs) -> final
 * values. PARTIAL and FINAL are created with the same arguments (the
 * original input schema, keys and specs); FINAL derives the partial schema
 * and accepts batches of it.
 *
 * The partial schema: the key columns (the input's fields, their names),
 * then per aggregate, in order:
 *   COUNT_STAR, COUNT   "<name>"          int64   (final: sum of counts)
 *   SUM                 "<name>"          the sum type, null when no value
 *   MIN, MAX            "<name>"          the input type, null when no value
 *   AVG                 "<name>#sum"      float64, "<name>#count" int64
 *   COUNT_DISTINCT      "<name>#values"   list<value type>: the group's
 *                       distinct non-null values (so the partial state holds
 *                       the distinct (keys, value) pairs of its input)
 * The output (SINGLE and FINAL): the key columns, then one column per
 * aggregate. Groups come out in the order they were first seen; rows whose
 * keys are all equal under fsh_row_keys_compare (nulls equal to nulls, NaN
 * to NaN, -0.0 to +0.0, dictionaries by value) form one group. No key
 * columns (n_keys == 0): a global aggregate, one output row in every mode,
 * even on no input (counts 0, other values null). */
typedef enum fsh_agg_mode { FSH_AGG_SINGLE = 0, FSH_AGG_PARTIAL, FSH_AGG_FINAL } fsh_agg_mode;

typedef struct fsh_hash_agg fsh_hash_agg;

/* A hash aggregate over batches of `input` grouped by key_cols[0, n_keys)
 * (n_keys >= 0) computing aggs[0, n_aggs). memory_budget: bytes the
 * operator may hold (hash table, key copies, states; 0 = unlimited); a push
 * that leaves it holding more returns EFBIG (spilling to disk is not
 * implemented yet). EINVAL (column out of range, bad function) or ENOTSUP
 * (a function on a type it does not support, a key type fsh_row_keys
 * cannot compare), naming the column. */
FSH_NODISCARD int fsh_hash_agg_new(fsh_schema *input, const int32_t *key_cols, int n_keys,
                                   const fsh_agg_spec *aggs, int n_aggs, fsh_agg_mode mode,
                                   int64_t memory_budget, fsh_hash_agg **out, fsh_error *err);
void fsh_hash_agg_free(fsh_hash_agg *a); /* NULL accepted */
/* The schema pushes must have (the input's, or the partial schema in FINAL
 * mode; compared by type, names aside) and the schema of the result. */
fsh_schema *fsh_hash_agg_input_schema(const fsh_hash_agg *a);
fsh_schema *fsh_hash_agg_output_schema(const fsh_hash_agg *a);
/* Adds a batch's rows. EINVAL for a batch of another schema, EOVERFLOW for
 * an overflowing sum, EFBIG over the budget (the batch was absorbed: the
 * caller may still finish), ENOMEM. After an error other than EFBIG the
 * aggregate is unusable (further calls return EINVAL); free it. */
FSH_NODISCARD int fsh_hash_agg_push(fsh_hash_agg *a, fsh_batch *b, fsh_error *err);
/* The result: one batch holding every group (possibly 0 rows). Once. */
FSH_NODISCARD int fsh_hash_agg_finish(fsh_hash_agg *a, fsh_batch **out, fsh_error *err);
/* Bytes the aggregate holds now (capacity of its tables, arrays, key and
 * state buffers). */
int64_t fsh_hash_agg_memory(const fsh_hash_agg *a);
int64_t fsh_hash_agg_groups(const fsh_hash_agg *a);


/* ---- hash join ------------------------------------------------------------ */

/* Join types. LEFT_SEMI / LEFT_ANTI output the left columns only: left rows
 * with at least one match (once each) / with none (NOT EXISTS semantics: a
 * left row with a null key has no match, so the anti join keeps it). Right
 * semi/anti joins are the left ones with the inputs swapped. */
typedef enum fsh_join_type {
  FSH_JOIN_INNER = 0,
  FSH_JOIN_LEFT,
  FSH_JOIN_RIGHT,
  FSH_JOIN_FULL,
  FSH_JOIN_LEFT_SEMI,
  FSH_JOIN_LEFT_ANTI
} fsh_join_type;

/* The planner's default for choosing a broadcast join (64 MiB): a side
 * whose batches hold at most this many bytes of buffers is the build side
 * and is broadcast to every task of the other; otherwise both sides are
 * repartitioned on the keys and the smaller one is built. The operator
 * itself builds whichever side the caller gives. */
#define FSH_JOIN_BROADCAST_BYTES ((int64_t)64 << 20)

typedef struct fsh_hash_join fsh_hash_join;

/* A hash join of left and right on left_keys[k] = right_keys[k] for k in
 * [0, n_keys) (n_keys >= 1). Key types must be equal by value type (a
 * dictionary column joins its value type): EINVAL naming both columns
 * otherwise, ENOTSUP for a type fsh_row_keys cannot compare. Rows with a
 * null in any key never match. Float keys compare as fsh_row_keys does
 * (NaN matches NaN and -0.0 matches +0.0, as Spark's joins). build_left:
 * the left side is the build (hash table) side, pushed with
 * fsh_hash_join_build; otherwise the right.
 * memory_budget: bytes the build side and its table may hold (0 =
 * unlimited; the table is estimated at 40 bytes a build row while the build
 * side is pushed): fsh_hash_join_build returns EFBIG when a batch takes the
 * join over it (the batch is kept; spilling is not implemented yet).
 *
 * Output schema: the left fields, then the right fields (not for semi and
 * anti joins); a right field whose name is already taken gets the suffix
 * "_right" (repeated until unique). Fields of a side that can be
 * null-filled (the right side of LEFT, the left of RIGHT, both of FULL) are
 * nullable. */
FSH_NODISCARD int fsh_hash_join_new(fsh_schema *left, fsh_schema *right, const int32_t *left_keys,
                                    const int32_t *right_keys, int n_keys, fsh_join_type type,
                                    bool build_left, int64_t memory_budget, fsh_hash_join **out,
                                    fsh_error *err);
void fsh_hash_join_free(fsh_hash_join *j); /* NULL accepted */
fsh_schema *fsh_hash_join_output_schema(const fsh_hash_join *j);
/* Adds a batch of the build side (before fsh_hash_join_probe). */
FSH_NODISCARD int fsh_hash_join_build(fsh_hash_join *j, fsh_batch *b, fsh_error *err);
/* Joins a batch of the probe side against the whole build side: *out gets
 * the joined rows of this batch (possibly 0 rows), in probe-row order, the
 * matches of one probe row in build-row order. The first probe ends the
 * build phase. */
FSH_NODISCARD int fsh_hash_join_probe(fsh_hash_join *j, fsh_batch *b, fsh_batch **out,
                                      fsh_error *err);
/* The same in bounded pieces (a skewed key can make one probe batch's
 * output arbitrarily large): probe_begin takes batch b (EINVAL while the
 * previous one is not drained), then each probe_next gives at most
 * max_rows joined rows of it (never 0 rows), *out NULL when b is drained. */
FSH_NODISCARD int fsh_hash_join_probe_begin(fsh_hash_join *j, fsh_batch *b, fsh_error *err);
FSH_NODISCARD int fsh_hash_join_probe_next(fsh_hash_join *j, int64_t max_rows, fsh_batch **out,
                                           fsh_error *err);
/* After the last probe: the rows only the build side can produce (build
 * rows never matched, null-filled on the probe side, for outer joins that
 * keep the build side; the build side's semi/anti rows when it is the
 * left), or NULL when there are none. Once. */
FSH_NODISCARD int fsh_hash_join_finish(fsh_hash_join *j, fsh_batch **out, fsh_error *err);
/* Bytes the join holds (build batches, table; the estimate before the
 * first probe). */
int64_t fsh_hash_join_memory(const fsh_hash_join *j);


#ifdef __cplusplus
}
#endif
#endif
