/* kernels.h -- compute kernels the shuffle runs on record batches: row
 * hashing (xxh3), partition assignment (hash, range, random), scatter of a
 * batch into partitions, take, filter and concat. (Zero-copy slicing is
 * the core's fsh_batch_slice / fsh_array_slice.)
 *
 * Every kernel handles every type of arrow.h: fixed-width, bool, (large)
 * binary/utf8, fixed-size binary, decimals, temporal types, intervals,
 * (large / fixed-size) lists, structs, maps, sparse and dense unions and
 * dictionary-encoded columns, nested at any depth. Inputs must be valid for
 * their fields (fsh_array_validate); offsets (slices) are honoured
 * everywhere. Outputs are new arrays and batches with offset 0 that pass
 * fsh_batch_validate; they share nothing with the inputs but dictionaries
 * (a dictionary-encoded column keeps its dictionary and gathers indices).
 *
 * Errors follow arrow.h: 0 or an errno code (EINVAL bad input, ENOMEM,
 * EOVERFLOW when 32-bit offsets or a dictionary index type would overflow,
 * ENOTSUP a type a kernel cannot order) with a message naming the column;
 * on error outputs are left NULL, nothing leaks. No kernel allocates per
 * row: allocations are per call, per column, per partition. */
#ifndef FLIGHTSHUFFLE_KERNELS_H
#define FLIGHTSHUFFLE_KERNELS_H

#include <flightshuffle/arrow.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- row hashing --------------------------------------------------------
 *
 * The hash of a row is a pure function of its logical values and the seed:
 * it does not depend on buffers, offsets, slicing, the dictionary a value
 * sits in, the process or the address. Stable across releases: tests pin
 * golden values. Per value (all xxh3 = XXH3_64bits_withSeed(bytes, len, seed),
 * multi-byte values in little-endian byte order):
 *   null slot (any type)         fsh_hash_null(seed)
 *   fixed-width (ints, temporal, intervals, decimals, fixed-size binary)
 *                                xxh3 of the value's bytes
 *   float16/32/64                xxh3 of the bytes after mapping -0.0 to +0.0
 *                                and every NaN to the canonical quiet NaN
 *   bool                         xxh3 of one byte, 0 or 1
 *   (large) binary / utf8        xxh3 of the value's bytes
 *   list, large list, map, fixed-size list
 *                                xxh3 of the element hashes (8 bytes each,
 *                                in order): an empty list is xxh3 of nothing
 *   struct                       child hashes folded with fsh_hash_combine
 *                                in field order (xxh3 of nothing if no field)
 *   union                        fsh_hash_combine(xxh3 of the type code byte,
 *                                hash of the child value)
 *   dictionary-encoded           the hash of the value the index points at
 *                                (equal to the plain column's hash)
 *   null type                    fsh_hash_null(seed)
 * Several key columns: h = hash(col 0); h = fsh_hash_combine(h, hash(col k))
 * for k = 1, 2, ... (order matters). */

/* The hash of a null slot: xxh3 of no bytes with seed ^ 0x9E3779B97F4A7C15. */
uint64_t fsh_hash_null(uint64_t seed);
/* Order-dependent combine: xxh3 of h's 8 little-endian bytes, seeded with
 * acc. */
uint64_t fsh_hash_combine(uint64_t acc, uint64_t h);

/* One hash per row of array `a` (of field f) into out[0, a->length). */
FSH_NODISCARD int fsh_hash_array(const fsh_field *f, const fsh_array *a, uint64_t seed,
                                 uint64_t *out, fsh_error *err);
/* One hash per row of b over the key columns key_cols[0, n_keys) (column
 * indices into b, n_keys >= 1; a column may repeat) into out[0, b->length). */
FSH_NODISCARD int fsh_hash_columns(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                   uint64_t seed, uint64_t *out, fsh_error *err);

/* ---- partition assignment ------------------------------------------------
 * Each writes one partition id in [0, n_partitions) per row into out. */

/* Multiply-shift reduction of a hash to [0, n): ((h >> 32) * n) >> 32.
 * It reads the high 32 bits of the hash, costs one multiply, and is the same
 * on every machine (never plain mod: it would read the low bits). */
static inline int32_t fsh_partition_of_hash(uint64_t h, int32_t n) {
  return (int32_t)(((h >> 32) * (uint64_t)n) >> 32);
}

/* out[i] = fsh_partition_of_hash(hashes[i], n_partitions); n_partitions
 * in [1, INT32_MAX]. */
FSH_NODISCARD int fsh_partition_hash(const uint64_t *hashes, int64_t n, int32_t n_partitions,
                                     int32_t *out, fsh_error *err);

/* Random partitioning, reproducible: row r (counted from first_row, so a
 * table cut into batches gets the same ids as the whole table) goes to
 * fsh_partition_of_hash(splitmix64(seed + r * 0x9E3779B97F4A7C15), n). */
FSH_NODISCARD int fsh_partition_random(int64_t n, int32_t n_partitions, uint64_t seed,
                                       int64_t first_row, int32_t *out, fsh_error *err);

/* Per key column: direction and where nulls sort. Floats sort as
 * pyarrow.compute.sort_indices sorts them: NaN sits beside the nulls,
 * between them and the numbers, whatever the direction (nulls last:
 * numbers, NaN, nulls; nulls first: nulls, NaN, numbers); all NaNs are
 * equal; -0.0 == +0.0 (their rows keep input order). */
typedef struct fsh_sort_key {
  bool descending;
  bool nulls_first;
} fsh_sort_key;

/* ---- row comparison over key columns -----------------------------------
 *
 * fsh_row_keys: key columns of a batch resolved for comparing rows, within
 * one batch or against the key columns of another batch whose value types
 * are the same (fsh_row_keys_check_compatible). Orderable types are those
 * of range partitioning (below); either side may be dictionary-encoded and
 * is compared by value. The batch is borrowed: it must outlive the keys. */
typedef struct fsh_row_keys fsh_row_keys;

/* Resolves columns key_cols[0, n_keys) of b; order NULL = all ascending,
 * nulls last. EINVAL for a column out of range, ENOTSUP for a type that
 * cannot be ordered (both naming the column). */
FSH_NODISCARD int fsh_row_keys_new(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                   const fsh_sort_key *order, fsh_row_keys **out,
                                   fsh_error *err);
void fsh_row_keys_free(fsh_row_keys *k); /* NULL accepted */
int fsh_row_keys_count(const fsh_row_keys *k);
/* 0 when a and b have as many keys, of the same value types; EINVAL naming
 * the first key that differs otherwise. */
FSH_NODISCARD int fsh_row_keys_check_compatible(const fsh_row_keys *a, const fsh_row_keys *b,
                                                fsh_error *err);
/* Row i of a against row j of b (logical rows, relative to the batches'
 * offsets): < 0, 0, > 0 under a's order. Nulls compare equal to nulls and
 * sort by nulls_first; NaN == NaN and sorts beside the nulls (fsh_sort_key);
 * -0.0 == +0.0. a and b must be compatible. */
int fsh_row_keys_compare(const fsh_row_keys *a, int64_t i, const fsh_row_keys *b, int64_t j);
/* Key equality of the hash operators (group-by keys, join keys), as
 * pyarrow's group_by and join: fsh_row_keys_compare == 0 except for
 * floats, which are equal when both NaN (any payload: every NaN is one
 * group) or bitwise equal, so -0.0 and +0.0 are different keys. Nulls
 * equal nulls (joins skip them: fsh_row_keys_any_null). Consistent with
 * the row hash (equal keys hash equal). */
bool fsh_row_keys_equal(const fsh_row_keys *a, int64_t i, const fsh_row_keys *b, int64_t j);
/* The equality encoding: row i of k as a byte string, equal to row j's
 * (of k or of keys compatible with k) exactly when fsh_row_keys_equal holds:
 * what a hash table stores and compares instead of rows. sizes: offsets[0,
 * n] = the strings' bounds in one buffer (offsets[0] = 0, offsets[n] its
 * size); has_null (NULL: not wanted)[i] = row i has a null key. encode:
 * writes rows [0, n) at out + offsets[i], pos[0, n) being scratch. */
void fsh_row_keys_encoded_sizes(const fsh_row_keys *k, int64_t n, int64_t *offsets,
                                uint8_t *has_null);
void fsh_row_keys_encode(const fsh_row_keys *k, int64_t n, const int64_t *offsets,
                         int64_t *pos, uint8_t *out);
/* Row i has a null in at least one key column (joins: never matches). */
bool fsh_row_keys_any_null(const fsh_row_keys *k, int64_t i);

/* Range partitioning. `boundaries` holds B rows sorted by `order` with
 * n_keys columns: column k has the value type of b's column key_cols[k]
 * (either side may be dictionary-encoded). There are B + 1 partitions:
 * a row goes to the number of boundary rows that sort strictly before it
 * (rows equal to boundary k go to partition k, as Spark's
 * RangePartitioner). Orderable types: integers, floats, decimals, dates,
 * times, timestamps, durations, month intervals, bool, (large) binary and
 * utf8 (bytewise), fixed-size binary, and dictionaries of those. Binary
 * search per row; EINVAL if the boundaries are not sorted. */
FSH_NODISCARD int fsh_partition_range(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                      const fsh_batch *boundaries, const fsh_sort_key *order,
                                      int32_t *out, fsh_error *err);

/* ---- take, filter, concat, scatter ------------------------------------- */

/* Rows indices[0, n) of a (relative to its offset; each in [0, length),
 * repeats allowed) as a new array. */
FSH_NODISCARD int fsh_array_take(const fsh_field *f, fsh_array *a, const int64_t *indices,
                                 int64_t n, fsh_array **out, fsh_error *err);
FSH_NODISCARD int fsh_take(fsh_batch *b, const int64_t *indices, int64_t n, fsh_batch **out,
                           fsh_error *err);

/* Rows whose bit is set in selection (bit i, LSB first, for row i of a or b
 * relative to its offset; fsh_bytes_for_bits(length) bytes). When every row
 * is selected the result is a new reference to the input itself. */
FSH_NODISCARD int fsh_array_filter(const fsh_field *f, fsh_array *a, const uint8_t *selection,
                                   fsh_array **out, fsh_error *err);
FSH_NODISCARD int fsh_filter(fsh_batch *b, const uint8_t *selection, fsh_batch **out,
                             fsh_error *err);

/* Concatenation of n >= 1 arrays of field f (n batches of one schema:
 * equal up to metadata; the result has the first one's schema). Dictionary
 * columns keep the dictionary when all inputs share it (or have equal
 * ones); otherwise the dictionaries are concatenated and the indices
 * rebased (EOVERFLOW if the index type cannot address the result). */
FSH_NODISCARD int fsh_array_concat(const fsh_field *f, fsh_array *const *arrays, int64_t n,
                                   fsh_array **out, fsh_error *err);
FSH_NODISCARD int fsh_concat(fsh_batch *const *batches, int64_t n, fsh_batch **out,
                             fsh_error *err);

/* Splits b into n_partitions batches: out[p] gets the rows i with
 * partition_of_row[i] == p, in their original order, and equals
 * fsh_take(b, those rows). Two passes: rows are counted per partition,
 * then copied: flat columns (fixed width, bool, binary/utf8, dictionary
 * indices) in one sequential pass over the source appending each value to
 * its partition; nested columns gathered per partition. out[p] is NULL when partition p gets no row; when it
 * gets every row it is a new reference to b itself. `out` has n_partitions
 * slots (n_partitions >= 1); on error every slot is NULL. */
FSH_NODISCARD int fsh_scatter(fsh_batch *b, const int32_t *partition_of_row, int32_t n_partitions,
                              fsh_batch **out, fsh_error *err);

/* Partition builders: fsh_scatter into growing per-partition columns
 * instead of new batches, for a writer that accumulates a partition's rows
 * until it has a block's worth (the shuffle's map side): no batch per
 * (input batch, partition), no concatenation later, and the builders'
 * memory is reused from one block to the next (fsh_partition_builder_set_keep_bytes)
 * and from one builder to the next (a freed builder is kept for the next
 * new one of the same shape: up to 2 of at most 160 MiB, process-wide;
 * a worker's store charges running builders to its memory budget and
 * drops the idle ones when its budget has no room for them).
 * Flat columns only, no dictionaries (fsh_partition_builder_supports). */
typedef struct fsh_partition_builder fsh_partition_builder;
bool fsh_partition_builder_supports(const fsh_schema *schema);
/* EINVAL naming the column when the schema is not supported. */
FSH_NODISCARD int fsh_partition_builder_new(fsh_schema *schema, int32_t n_partitions,
                                            fsh_partition_builder **out, fsh_error *err);
void fsh_partition_builder_free(fsh_partition_builder *pb); /* NULL accepted */
/* How much of its buffers the builder keeps between blocks, over all its
 * partitions: a partition whose buffers hold more than max(2 MiB, keep /
 * n_partitions) gives them back when taken (or dropped); the rest are
 * reused by its next block. keep <= 0: FSH_PARTITION_BUILDER_KEEP_BYTES,
 * also what a new builder starts with. A store with a small memory budget
 * asks for less (its budget is charged the builders' capacity). */
#define FSH_PARTITION_BUILDER_KEEP_BYTES ((int64_t)64 << 20)
void fsh_partition_builder_set_keep_bytes(fsh_partition_builder *pb, int64_t keep);
/* Appends the rows of b (the builder's schema) to their partitions, in
 * order; EINVAL for an id outside [0, n_partitions), ENOMEM -- then the
 * builder is unchanged only as far as it holds no half row: callers
 * discard it after an error. */
FSH_NODISCARD int fsh_partition_builder_append(fsh_partition_builder *pb, const fsh_batch *b,
                                               const int32_t *partition_of_row, fsh_error *err);
int64_t fsh_partition_builder_rows(const fsh_partition_builder *pb, int32_t partition);
/* Bytes its rows would take as a batch (validity, values, offsets, data). */
int64_t fsh_partition_builder_bytes(const fsh_partition_builder *pb, int32_t partition);
/* Partition p's rows as a batch equal to fsh_concat of what fsh_scatter
 * would have made of the appended batches (NULL when it has none); the
 * partition starts empty again. The batch BORROWS the builder's memory:
 * it is valid until the next append to, take of or free of the builder,
 * and must be released before. ENOMEM only. */
FSH_NODISCARD int fsh_partition_builder_take(fsh_partition_builder *pb, int32_t partition,
                                             fsh_batch **out, fsh_error *err);
/* Partition p's column c as the buffers its array in a taken batch would
 * have (fsh_partition_builder_take), without making the batch: validity
 * (NULL and 0 bytes when the column has no null), values (fixed-width
 * values, bool bits, or offsets starting at 0), data (binary bytes; NULL
 * and 0 otherwise). Borrowed as take's batch is. */
typedef struct fsh_partition_builder_view {
  const uint8_t *validity, *values, *data;
  int64_t validity_bytes, values_bytes, data_bytes, null_count;
} fsh_partition_builder_view;
void fsh_partition_builder_view_column(const fsh_partition_builder *pb, int32_t partition,
                                       int64_t column, fsh_partition_builder_view *out);
/* A hint: partition p's bytes (every column's buffers, up to the first
 * max_bytes of them) are about to be read -- cache-line prefetches, no
 * other effect. A writer that copies partitions out one after the other
 * asks for the next one's while it copies the current one. */
void fsh_partition_builder_prefetch(const fsh_partition_builder *pb, int32_t partition,
                                    int64_t max_bytes);
/* Empties partition p as take does, without a batch: the views above
 * stay valid until the next append to, take of or free of the builder. */
void fsh_partition_builder_drop_rows(fsh_partition_builder *pb, int32_t partition);
/* Bytes the builder's buffers hold allocated (what it costs in memory,
 * kept between blocks), for a store's memory budget. */
int64_t fsh_partition_builder_capacity(const fsh_partition_builder *pb);
/* Bytes the process-wide cache of freed builders holds, and dropping them
 * (freed; the next new builder starts from nothing): a store under memory
 * pressure does not keep idle builders. Thread-safe. */
int64_t fsh_partition_builder_cache_bytes(void);
void fsh_partition_builder_cache_drop(void);


/* ---- sort, top-N, merge, range boundaries, re-chunking ------------------
 *
 * Sorting orders rows by key columns (fsh_row_keys: orderable types,
 * dictionaries by value, per-key direction and null placement) and is
 * stable: rows with equal keys keep their input order. */

/* indices[0, b->length) = the rows of b (relative to its offset) in sorted
 * order, stable. A single fixed-width key (integers, temporal types,
 * floats, bool, or a dictionary of those) is radix-sorted; otherwise rows
 * are radix-sorted on a 64-bit order-preserving prefix of the first key
 * (binary/utf8: its first 8 bytes) and each run of equal prefixes is
 * merge-sorted with the full row comparison. order NULL: all ascending,
 * nulls last. Errors as fsh_row_keys_new. Scratch memory: 25 bytes a row
 * plus 16 per row of the largest radix bucket for a single fixed-width key,
 * 32 bytes a row otherwise. */
FSH_NODISCARD int fsh_sort_indices(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                   const fsh_sort_key *order, int64_t *indices, fsh_error *err);
/* b's rows in sorted order: fsh_take(b, fsh_sort_indices(...)). */
FSH_NODISCARD int fsh_sort_batch(fsh_batch *b, const int32_t *key_cols, int n_keys,
                                 const fsh_sort_key *order, fsh_batch **out, fsh_error *err);

/* The first min(n, b->length) rows of the sorted order (ties by input
 * order: equal to fsh_sort_indices followed by a slice), without sorting
 * every row: a bounded heap, O(length log n), most rows settled by the
 * first key's prefix alone. indices has room for min(n, b->length) rows;
 * the count is stored in *n_out. n >= 0. */
FSH_NODISCARD int fsh_top_n_indices(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                    const fsh_sort_key *order, int64_t n, int64_t *indices,
                                    int64_t *n_out, fsh_error *err);
FSH_NODISCARD int fsh_top_n(fsh_batch *b, const int32_t *key_cols, int n_keys,
                            const fsh_sort_key *order, int64_t n, fsh_batch **out,
                            fsh_error *err);

/* k-way merge of batches each already sorted by the keys (one schema, up to
 * metadata), emitted as batches of target_rows rows (the last may be short).
 * Stable: equal keys come out in input order (input 0's rows first), so the
 * output equals a stable sort of the inputs' concatenation. The merger
 * holds a reference to each input. Each output batch is the concatenation
 * of the slices of the input batches it draws from, gathered in merged
 * order (a zero-copy slice when it draws from one slice only). */
typedef struct fsh_merger fsh_merger;
FSH_NODISCARD int fsh_merger_new(fsh_batch *const *inputs, int64_t n_inputs,
                                 const int32_t *key_cols, int n_keys, const fsh_sort_key *order,
                                 int64_t target_rows, fsh_merger **out, fsh_error *err);
/* The same over n_inputs streams, each a sorted run cut into any number of
 * batches (spilled runs read back, say): one batch per input is held at a
 * time. The streams move into the merger (released by fsh_merger_free, or
 * here on error; the caller's structs are zeroed); their schemas must be
 * equal up to metadata. */
FSH_NODISCARD int fsh_merger_new_streams(fsh_batch_stream *inputs, int64_t n_inputs,
                                         const int32_t *key_cols, int n_keys,
                                         const fsh_sort_key *order, int64_t target_rows,
                                         fsh_merger **out, fsh_error *err);
/* The next merged batch in *out, or *out = NULL when every row is out. On
 * error a merger of batches is as before the call (the call may be
 * repeated); a merger of streams whose input moved on to its next batch in
 * the failed call can only be freed (later calls fail with EINVAL). */
FSH_NODISCARD int fsh_merger_next(fsh_merger *m, fsh_batch **out, fsh_error *err);
void fsh_merger_free(fsh_merger *m); /* NULL accepted */
/* Every row of the inputs merged into one batch (n_inputs >= 1). */
FSH_NODISCARD int fsh_merge_sorted(fsh_batch *const *inputs, int64_t n_inputs,
                                   const int32_t *key_cols, int n_keys,
                                   const fsh_sort_key *order, fsh_batch **out, fsh_error *err);

/* Range boundaries from a sample: the key columns of `sample` sorted, the
 * rows at quantiles p * length / n_partitions for p = 1 .. n_partitions - 1,
 * with rows equal to the previously chosen boundary dropped. The result has
 * n_keys columns (the key columns, named as in the sample), at most
 * n_partitions - 1 strictly increasing rows (fewer when keys repeat: a key
 * holding most of the sample yields one boundary, not many equal ones; none
 * for an empty sample), and can be passed to fsh_partition_range with the
 * same order. */
FSH_NODISCARD int fsh_range_boundaries(fsh_batch *sample, const int32_t *key_cols, int n_keys,
                                       const fsh_sort_key *order, int32_t n_partitions,
                                       fsh_batch **out, fsh_error *err);

/* Re-chunking ("into batches"): a stream of batches of one schema cut into
 * batches of exactly target_rows rows, the last one possibly short. An
 * output lying inside one input is a zero-copy slice of it; one that spans
 * inputs is the concatenation of the slices. Use: push inputs, pop every
 * ready batch after each push, finish, pop the rest. */
typedef struct fsh_rechunker fsh_rechunker;
FSH_NODISCARD int fsh_rechunker_new(int64_t target_rows, fsh_rechunker **out, fsh_error *err);
/* Takes a new reference to b (empty batches are skipped). EINVAL if b's
 * schema differs from the first batch's or after finish. */
FSH_NODISCARD int fsh_rechunker_push(fsh_rechunker *r, fsh_batch *b, fsh_error *err);
/* No more input: the remaining rows become the last (short) batch. */
void fsh_rechunker_finish(fsh_rechunker *r);
/* A ready batch in *out (the caller owns it), or *out = NULL when fewer
 * than target_rows rows wait (before finish) or none (after). On error
 * nothing is consumed. */
FSH_NODISCARD int fsh_rechunker_pop(fsh_rechunker *r, fsh_batch **out, fsh_error *err);
void fsh_rechunker_free(fsh_rechunker *r); /* NULL accepted */

/* "Into partitions": an ordered sequence of n_inputs inputs of
 * input_rows[i] rows split into exactly n_out contiguous outputs, in order,
 * as equal as possible (sizes differ by at most one row; the first
 * total % n_out outputs get the extra row). Output p is n_rows rows starting
 * at row first_row of input first_input and running on through the next
 * inputs; an empty output has first_input at the next non-empty input (or
 * n_inputs) and first_row 0. Works for n_out smaller or larger than
 * n_inputs. */
typedef struct fsh_part_slice {
  int64_t first_input;
  int64_t first_row;
  int64_t n_rows;
} fsh_part_slice;
FSH_NODISCARD int fsh_plan_partitions(const int64_t *input_rows, int64_t n_inputs, int32_t n_out,
                                      fsh_part_slice *out, fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
