/* hashops_internal.h -- what the hash aggregate and the hash join share: the
 * row set (a hash table interning rows of key columns as dense ids), null
 * arrays for outer joins and empty results, projections. */
#ifndef FSH_HASHOPS_INTERNAL_H
#define FSH_HASHOPS_INTERNAL_H

#include <flightshuffle/exec.h>

#include <errno.h>

/* ---- row set ------------------------------------------------------------
 *
 * Interns rows of key columns as dense ids 0, 1, 2, ... in order of first
 * appearance. Open addressing with linear probing over (hash, id) slots,
 * load <= 1/2, doubling. Key equality is fsh_row_keys_equal (nulls equal
 * nulls, NaN NaN, -0.0 != +0.0, as pyarrow's group_by and join): the
 * general path encodes each batch's keys (fsh_row_keys_encode), hashes each
 * encoded row once and keeps every id's encoded key in an arena, compared
 * with memcmp; one key column of an integer-like or float type takes a fast
 * path that keeps the value in the slot (hash_table.c). The set also keeps
 * a copy of each new key row (fsh_take of the new rows of a batch into a
 * batch it owns, one per call that adds ids) for hs_rowset_keys, so inputs
 * need not outlive the call. No per-row allocation. At most 2^31 - 1 ids
 * and 2^31 - 1 rows a batch (EOVERFLOW / EINVAL beyond). */
typedef struct hs_rowset hs_rowset;

/* key_schema: the key columns' fields (one reference taken); the batches
 * given to hs_rowset_intern must have key columns of the same value types. */
FSH_NODISCARD int hs_rowset_new(fsh_schema *key_schema, hs_rowset **out, fsh_error *err);
void hs_rowset_free(hs_rowset *rs);
/* For each row i of b over columns key_cols[0, n_keys): ids[i] = the id of
 * its key, adding it when new and `insert`; -1 when absent (insert false)
 * or when skip_null_keys and a key is null. After an error the set is
 * poisoned (EINVAL on every later call). */
FSH_NODISCARD int hs_rowset_intern(hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols,
                                   bool insert, bool skip_null_keys, int64_t *ids,
                                   fsh_error *err);
int64_t hs_rowset_count(const hs_rowset *rs);
int64_t hs_rowset_memory(const hs_rowset *rs);
/* Row g of *out is the key of id g (columns of key_schema); a new batch. */
FSH_NODISCARD int hs_rowset_keys(hs_rowset *rs, fsh_batch **out, fsh_error *err);

/* ---- helpers -------------------------------------------------------------- */

/* A new array of field f with n rows, every one null (unions: every row
 * points at a null of the first child; the null type: no buffers). */
FSH_NODISCARD int hs_null_array(const fsh_field *f, int64_t n, fsh_array **out, fsh_error *err);
/* A new batch of schema s with n null rows (n = 0: an empty batch). */
FSH_NODISCARD int hs_null_batch(fsh_schema *s, int64_t n, fsh_batch **out, fsh_error *err);
/* A new schema holding copies of fields cols[0, n) of s. */
FSH_NODISCARD int hs_project_schema(const fsh_schema *s, const int32_t *cols, int n,
                                    fsh_schema **out, fsh_error *err);
/* A new batch with the columns cols[0, n) of b (references) under schema
 * ps (one reference taken). */
FSH_NODISCARD int hs_project_batch(const fsh_batch *b, fsh_schema *ps, const int32_t *cols,
                                   fsh_batch **out, fsh_error *err);

static inline int hs_oom(fsh_error *err) { return fsh_error_set(err, ENOMEM, "out of memory"); }

/* Grows *p (elements of `size` bytes, capacity *cap) to hold at least `need`
 * elements, doubling; new elements zeroed. */
FSH_NODISCARD int hs_grow(void **p, int64_t *cap, int64_t need, size_t size, fsh_error *err);

#endif
