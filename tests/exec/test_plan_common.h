/* test_plan_common.h -- what the plan property tests share: the keyed
 * table generated in one piece as the reference, the rows of a result
 * checked against it by id, the cases (empty inputs, all inputs empty,
 * N < inputs, N > inputs, skewed keys, null keys) and the backends. */
#ifndef FSH_TEST_PLAN_COMMON_H
#define FSH_TEST_PLAN_COMMON_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/workloads.h>

#include "../test.h"

/* The whole table, generated in one piece: key[id], key_valid[id], amount[id]. */
typedef struct table_ref {
  int64_t n;
  int64_t *key;
  bool *valid;
  int64_t *amount;
} table_ref;

static inline void ref_make(const fsh_keyed_options *o, int64_t n, table_ref *t) {
  fsh_error err;
  fsh_schema *s = fsh_keyed_schema();
  fsh_batch *b = NULL;
  CHECK_OK(fsh_keyed_batch(s, o, 0, n, &b, &err));
  t->n = n;
  t->key = calloc((size_t)n + 1, sizeof *t->key);
  t->valid = calloc((size_t)n + 1, sizeof *t->valid);
  t->amount = calloc((size_t)n + 1, sizeof *t->amount);
  for (int64_t i = 0; b && i < n; i++) {
    t->key[i] = ((const int64_t *)(const void *)b->columns[1]->buffers[1]->data)[i];
    t->valid[i] = fsh_array_is_valid(b->columns[1], i);
    t->amount[i] = ((const int64_t *)(const void *)b->columns[3]->buffers[1]->data)[i];
  }
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

static inline void ref_free(table_ref *t) {
  free(t->key);
  free(t->valid);
  free(t->amount);
}

/* One output row: its id and partition. */
typedef struct orow {
  int64_t id;
  int32_t part;
  int64_t batch; /* index among the result's batches */
} orow;

static inline int64_t col_i64(const fsh_batch *b, int c, int64_t i) {
  const fsh_array *a = b->columns[c];
  return ((const int64_t *)(const void *)a->buffers[1]->data)[a->offset + i];
}

/* The rows of a keyed-table result, checking each against the reference
 * (key, validity, amount by id) and that no id repeats. */
static inline orow *result_rows(const fsh_plan_result *r, const table_ref *t) {
  orow *rows = calloc((size_t)r->rows + 1, sizeof *rows);
  bool *seen = calloc((size_t)t->n + 1, sizeof *seen);
  int64_t at = 0, bi = 0;
  for (int32_t p = 0; p < r->n_partitions; p++)
    for (int64_t k = 0; k < r->partition_batches[p]; k++, bi++) {
      const fsh_batch *b = r->batches[bi];
      for (int64_t i = 0; i < b->length; i++, at++) {
        int64_t id = col_i64(b, 0, i);
        rows[at].id = id;
        rows[at].part = p;
        rows[at].batch = bi;
        if (id < 0 || id >= t->n) {
          CHECK_MSG(false, "id %lld out of range", (long long)id);
          continue;
        }
        CHECK_MSG(!seen[id], "id %lld twice", (long long)id);
        seen[id] = true;
        bool valid = fsh_array_is_valid(b->columns[1], i);
        CHECK(valid == t->valid[id]);
        if (valid) CHECK(col_i64(b, 1, i) == t->key[id]);
        CHECK(col_i64(b, 3, i) == t->amount[id]);
      }
    }
  free(seen);
  return rows;
}

typedef struct scase {
  const char *name;
  int64_t rows;
  int32_t batch_rows;
  int32_t inputs; /* scan partitions */
  int32_t outputs;
  double skew, nulls;
} scase;

static const scase CASES[] = {
    {"all inputs empty", 0, 100, 4, 3, 0, 0},
    {"some inputs empty", 3, 1, 8, 4, 0, 0},
    {"N < inputs", 5000, 300, 7, 2, 0, 0.05},
    {"N > inputs", 5000, 700, 3, 9, 0, 0.05},
    {"skewed keys", 6000, 500, 4, 5, 0.9, 0},
    {"null keys", 4000, 256, 4, 4, 0.1, 0.3},
    {"one input one output", 1000, 64, 1, 1, 0, 0.1},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static inline fsh_shuffle_backend *make_backend(int which, char *dir) {
  fsh_error err;
  fsh_shuffle_backend *b = NULL;
  if (which == 0) {
    CHECK_OK(fsh_shuffle_memory_new(&b, &err));
  } else {
    strcpy(dir, "/tmp/fsh-test-plan-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(fsh_shuffle_fs_new(dir, &b, &err));
  }
  return b;
}

static inline void drop_backend(fsh_shuffle_backend *b, int which, const char *dir) {
  fsh_shuffle_backend_destroy(b);
  if (which == 1) CHECK(rmdir(dir) == 0); /* every map output was released */
}

/* A plan: a keyed scan of case c, then `build` adds the operator. */
typedef int (*build_fn)(fsh_plan *p, int input, const scase *c, int *id, fsh_error *err);

static inline fsh_plan *make_plan(const scase *c, build_fn build) {
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_new(c->outputs, &p, &err));
  if (!p) return NULL;
  fsh_plan_gen_options g = {.generator = FSH_PLAN_GEN_KEYED, .rows = c->rows,
                            .batch_rows = c->batch_rows, .seed = 99, .key_range = 50,
                            .skew = c->skew, .null_fraction = c->nulls};
  int scan, id;
  CHECK_OK(fsh_plan_scan_generated(p, "t", &g, c->inputs, &scan, &err));
  CHECK_OK(build(p, scan, c, &id, &err));
  return p;
}

static inline void ref_for(const scase *c, table_ref *t) {
  fsh_keyed_options o = {.seed = 99, .key_range = 50, .skew = c->skew, .null_fraction = c->nulls};
  ref_make(&o, c->rows, t);
}

/* Runs p on backend `which` (and checks the result against the reference
 * run's with fsh_plan_result_compare too). */
static inline void run_plan(fsh_plan *p, int which, fsh_plan_merge merge, fsh_plan_result *r) {
  fsh_error err;
  char dir[64];
  fsh_shuffle_backend *b = make_backend(which, dir);
  fsh_plan_run_options o = {.backend = b, .merge = merge};
  memset(r, 0, sizeof *r);
  CHECK_OK(fsh_plan_run(p, &o, r, &err));
  drop_backend(b, which, dir);
  fsh_plan_result ref;
  fsh_plan_run_options ro = {.reference = true};
  CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  CHECK_OK(fsh_plan_result_compare(p, r, &ref, &err));
  fsh_plan_result_reset(&ref);
}

static inline int build_hash(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  fsh_plan_sort_key k = {.column = "key"};
  return fsh_plan_repartition(p, NULL, in, FSH_PLAN_PART_HASH, &k, 1, c->outputs, 0, 0,
                              FSH_PLAN_MERGE_AUTO, id, err);
}

/* (key desc, nulls first) then id: the order a stable sort of the table
 * (in id order) by key desc nulls first gives. */
static const table_ref *g_ref;
static inline int cmp_desc_nulls_first(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  const table_ref *t = g_ref;
  if (t->valid[a] != t->valid[b]) return t->valid[a] ? 1 : -1;
  if (t->valid[a] && t->key[a] != t->key[b]) return t->key[a] > t->key[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

#endif
