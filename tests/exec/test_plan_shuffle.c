/* test_plan_shuffle.c -- property tests of every shuffling operator run
 * through plans, on the memory and fs backends, against references
 * computed here from the keyed table generated in one piece: empty inputs,
 * all inputs empty, N < inputs, N > inputs, skewed keys, null keys. Rows
 * are identified by the table's "id" column (the row number), so every
 * check is exact: which rows, in which partition, in which order. */
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

static void ref_make(const fsh_keyed_options *o, int64_t n, table_ref *t) {
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

static void ref_free(table_ref *t) {
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

static int64_t col_i64(const fsh_batch *b, int c, int64_t i) {
  const fsh_array *a = b->columns[c];
  return ((const int64_t *)(const void *)a->buffers[1]->data)[a->offset + i];
}

/* The rows of a keyed-table result, checking each against the reference
 * (key, validity, amount by id) and that no id repeats. */
static orow *result_rows(const fsh_plan_result *r, const table_ref *t) {
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

static fsh_shuffle_backend *make_backend(int which, char *dir) {
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

static void drop_backend(fsh_shuffle_backend *b, int which, const char *dir) {
  fsh_shuffle_backend_destroy(b);
  if (which == 1) CHECK(rmdir(dir) == 0); /* every map output was released */
}

/* A plan: a keyed scan of case c, then `build` adds the operator. */
typedef int (*build_fn)(fsh_plan *p, int input, const scase *c, int *id, fsh_error *err);

static fsh_plan *make_plan(const scase *c, build_fn build) {
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

static void ref_for(const scase *c, table_ref *t) {
  fsh_keyed_options o = {.seed = 99, .key_range = 50, .skew = c->skew, .null_fraction = c->nulls};
  ref_make(&o, c->rows, t);
}

/* Runs p on backend `which` (and checks the result against the reference
 * run's with fsh_plan_result_compare too). */
static void run_plan(fsh_plan *p, int which, fsh_plan_merge merge, fsh_plan_result *r) {
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

/* ---- repartition by hash ---------------------------------------------------------- */

static int build_hash(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  fsh_plan_sort_key k = {.column = "key"};
  return fsh_plan_repartition(p, NULL, in, FSH_PLAN_PART_HASH, &k, 1, c->outputs, 0, 0,
                              FSH_PLAN_MERGE_AUTO, id, err);
}

static void test_repartition_hash(void) {
  for (int ci = 0; ci < N_CASES; ci++)
    for (int which = 0; which < 2; which++) {
      const scase *c = &CASES[ci];
      table_ref t;
      ref_for(c, &t);
      fsh_plan *p = make_plan(c, build_hash);
      fsh_plan_result r;
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
      CHECK_EQ_INT(r.rows, c->rows);
      CHECK_EQ_INT(r.n_partitions, c->outputs);
      orow *rows = result_rows(&r, &t);
      /* the partition of each row: the multiply-shift of its key's hash,
       * computed here from the row alone */
      for (int64_t i = 0; i < r.rows; i++) {
        int64_t id = rows[i].id;
        uint64_t h = t.valid[id] ? 0 : fsh_hash_null(0);
        if (t.valid[id]) {
          fsh_field f;
          fsh_error err;
          CHECK_OK(fsh_field_init(&f, "k", FSH_TYPE_INT64, true));
          fsh_array *a = fsh_array_new(2, 0);
          a->length = 1;
          a->buffers[1] = fsh_buffer_copy(&t.key[id], 8);
          CHECK_OK(fsh_hash_array(&f, a, 0, &h, &err));
          fsh_array_unref(a);
          fsh_field_reset(&f);
        }
        CHECK_MSG(rows[i].part == fsh_partition_of_hash(h, c->outputs),
                  "case %s backend %d: id %lld in partition %d", c->name, which, (long long)id,
                  rows[i].part);
      }
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      ref_free(&t);
    }
}

/* ---- random -------------------------------------------------------------------------- */

static int build_random(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  return fsh_plan_repartition(p, NULL, in, FSH_PLAN_PART_RANDOM, NULL, 0, c->outputs, 1234, 0,
                              FSH_PLAN_MERGE_AUTO, id, err);
}

static void test_repartition_random(void) {
  for (int ci = 0; ci < N_CASES; ci++)
    for (int which = 0; which < 2; which++) {
      const scase *c = &CASES[ci];
      table_ref t;
      ref_for(c, &t);
      fsh_plan *p = make_plan(c, build_random);
      fsh_plan_result r1, r2;
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r1);
      run_plan(p, 1 - which, FSH_PLAN_MERGE_AUTO, &r2);
      CHECK_EQ_INT(r1.rows, c->rows);
      orow *a = result_rows(&r1, &t), *b = result_rows(&r2, &t);
      int64_t *count = calloc((size_t)c->outputs, sizeof *count);
      for (int64_t i = 0; i < r1.rows && i < r2.rows; i++) {
        /* reproducible, whatever the backend */
        CHECK(a[i].id == b[i].id && a[i].part == b[i].part);
        count[a[i].part]++;
      }
      /* spread: with >= 1000 rows no partition holds more than twice its share */
      if (c->rows >= 1000)
        for (int32_t q = 0; q < c->outputs; q++)
          CHECK_MSG(count[q] <= 2 * c->rows / c->outputs + 10, "case %s: partition %d has %lld",
                    c->name, q, (long long)count[q]);
      free(count);
      free(a);
      free(b);
      fsh_plan_result_reset(&r1);
      fsh_plan_result_reset(&r2);
      fsh_plan_free(p);
      ref_free(&t);
    }
}

/* ---- range, sort ------------------------------------------------------------------------ */

/* (key desc, nulls first) then id: the order a stable sort of the table
 * (in id order) by key desc nulls first gives. */
static const table_ref *g_ref;
static int cmp_desc_nulls_first(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  const table_ref *t = g_ref;
  if (t->valid[a] != t->valid[b]) return t->valid[a] ? 1 : -1;
  if (t->valid[a] && t->key[a] != t->key[b]) return t->key[a] > t->key[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

static int build_range(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  fsh_plan_sort_key k = {.column = "key", .descending = true, .nulls_first = true};
  return fsh_plan_repartition(p, NULL, in, FSH_PLAN_PART_RANGE, &k, 1, c->outputs, 0, 17,
                              FSH_PLAN_MERGE_AUTO, id, err);
}

static int build_sort(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  fsh_plan_sort_key k = {.column = "key", .descending = true, .nulls_first = true};
  return fsh_plan_sort(p, NULL, in, &k, 1, false, 13, id, err);
}

static void test_repartition_range_and_sort(void) {
  for (int ci = 0; ci < N_CASES; ci++)
    for (int which = 0; which < 2; which++) {
      const scase *c = &CASES[ci];
      table_ref t;
      ref_for(c, &t);
      g_ref = &t;
      /* range: partitions hold consecutive key ranges in the sort order */
      fsh_plan *p = make_plan(c, build_range);
      fsh_plan_result r;
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
      CHECK_EQ_INT(r.rows, c->rows);
      orow *rows = result_rows(&r, &t);
      for (int64_t i = 0; i < r.rows; i++)
        for (int64_t j = i + 1; j < r.rows && j < i + 200; j++) {
          if (rows[i].part == rows[j].part) continue;
          int64_t lo = rows[i].part < rows[j].part ? rows[i].id : rows[j].id;
          int64_t hi = rows[i].part < rows[j].part ? rows[j].id : rows[i].id;
          /* a row of a lower partition never sorts after one of a higher */
          int64_t a[2] = {lo, hi};
          CHECK_MSG(!(t.valid[a[0]] == t.valid[a[1]] && t.valid[a[0]] &&
                      t.key[a[0]] < t.key[a[1]]) &&
                        !(t.valid[a[0]] && !t.valid[a[1]]),
                    "case %s: range partitions out of order", c->name);
        }
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      /* sort: exactly the stable order */
      p = make_plan(c, build_sort);
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
      CHECK_EQ_INT(r.rows, c->rows);
      CHECK_EQ_INT(r.n_partitions, 1);
      rows = result_rows(&r, &t);
      int64_t *want = calloc((size_t)c->rows + 1, sizeof *want);
      for (int64_t i = 0; i < c->rows; i++) want[i] = i;
      qsort(want, (size_t)c->rows, sizeof *want, cmp_desc_nulls_first);
      for (int64_t i = 0; i < r.rows; i++)
        CHECK_MSG(rows[i].id == want[i], "case %s backend %d: sorted row %lld is id %lld, want %lld",
                  c->name, which, (long long)i, (long long)rows[i].id, (long long)want[i]);
      free(want);
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      ref_free(&t);
    }
}

/* ---- gather, into_partitions, into_batches, limit, top-N -------------------------------- */

static int build_gather(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  return fsh_plan_gather(p, NULL, in, id, err);
}
static int build_into_partitions(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  return fsh_plan_into_partitions(p, NULL, in, c->outputs, id, err);
}
static int build_into_batches(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  return fsh_plan_into_batches(p, NULL, in, 37, id, err);
}
static int64_t g_limit;
static int build_limit(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  return fsh_plan_limit(p, NULL, in, g_limit, false, id, err);
}
static int build_top_n(fsh_plan *p, int in, const scase *c, int *id, fsh_error *err) {
  fsh_plan_sort_key k = {.column = "key", .descending = true, .nulls_first = true};
  return fsh_plan_top_n(p, NULL, in, &k, 1, g_limit, false, id, err);
}

static void test_order_keeping(void) {
  for (int ci = 0; ci < N_CASES; ci++)
    for (int which = 0; which < 2; which++) {
      const scase *c = &CASES[ci];
      table_ref t;
      ref_for(c, &t);
      /* gather: one partition, every row in table order */
      fsh_plan *p = make_plan(c, build_gather);
      fsh_plan_result r;
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
      CHECK_EQ_INT(r.n_partitions, 1);
      CHECK_EQ_INT(r.rows, c->rows);
      orow *rows = result_rows(&r, &t);
      for (int64_t i = 0; i < r.rows; i++) CHECK(rows[i].id == i);
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      /* into_partitions: exactly N, contiguous, in order, sizes +-1 */
      p = make_plan(c, build_into_partitions);
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
      CHECK_EQ_INT(r.n_partitions, c->outputs);
      CHECK_EQ_INT(r.rows, c->rows);
      rows = result_rows(&r, &t);
      int64_t *size = calloc((size_t)c->outputs, sizeof *size);
      for (int64_t i = 0; i < r.rows; i++) {
        CHECK(rows[i].id == i);
        size[rows[i].part]++;
      }
      for (int32_t q = 0; q < c->outputs; q++)
        CHECK_MSG(size[q] == c->rows / c->outputs + (q < c->rows % c->outputs),
                  "case %s: into_partitions output %d has %lld rows", c->name, q,
                  (long long)size[q]);
      free(size);
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      /* into_batches: per partition, batches of 37 rows but the last */
      p = make_plan(c, build_into_batches);
      run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
      rows = result_rows(&r, &t);
      for (int64_t i = 0; i < r.rows; i++) CHECK(rows[i].id == i);
      int64_t bi = 0;
      for (int32_t q = 0; q < r.n_partitions; q++)
        for (int64_t k = 0; k < r.partition_batches[q]; k++, bi++)
          CHECK(r.batches[bi]->length == 37 ||
                (k == r.partition_batches[q] - 1 && r.batches[bi]->length < 37));
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      /* limit: exactly min(n, rows) rows, the first ones */
      int64_t limits[3] = {0, 7, c->rows + 5};
      for (int li = 0; li < 3; li++) {
        g_limit = limits[li];
        p = make_plan(c, build_limit);
        run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
        int64_t want = g_limit < c->rows ? g_limit : c->rows;
        CHECK_MSG(r.rows == want, "case %s: limit %lld gave %lld rows", c->name,
                  (long long)g_limit, (long long)r.rows);
        rows = result_rows(&r, &t);
        for (int64_t i = 0; i < r.rows; i++) CHECK(rows[i].id == i);
        /* map tasks stop once enough rows exist */
        if (g_limit < c->batch_rows && c->inputs > 1 && c->rows > c->batch_rows)
          CHECK_MSG(r.maps_skipped > 0, "case %s: limit %lld skipped no map task", c->name,
                    (long long)g_limit);
        free(rows);
        fsh_plan_result_reset(&r);
        fsh_plan_free(p);
        /* top-N: the first n of the stable sort */
        g_ref = &t;
        p = make_plan(c, build_top_n);
        run_plan(p, which, FSH_PLAN_MERGE_AUTO, &r);
        CHECK_EQ_INT(r.rows, want);
        rows = result_rows(&r, &t);
        int64_t *ids = calloc((size_t)c->rows + 1, sizeof *ids);
        for (int64_t i = 0; i < c->rows; i++) ids[i] = i;
        qsort(ids, (size_t)c->rows, sizeof *ids, cmp_desc_nulls_first);
        for (int64_t i = 0; i < r.rows; i++) CHECK(rows[i].id == ids[i]);
        free(ids);
        free(rows);
        fsh_plan_result_reset(&r);
        fsh_plan_free(p);
      }
      ref_free(&t);
    }
}

/* ---- pre-shuffle merge -------------------------------------------------------------------- */

static void test_pre_shuffle_merge(void) {
  scase c = {"many maps", 20000, 100, 64, 64, 0.2, 0.1};
  table_ref t;
  ref_for(&c, &t);
  fsh_plan *p = make_plan(&c, build_hash);
  fsh_plan_result off, on, autom;
  run_plan(p, 1, FSH_PLAN_MERGE_OFF, &off);
  run_plan(p, 1, FSH_PLAN_MERGE_ON, &on);
  run_plan(p, 0, FSH_PLAN_MERGE_AUTO, &autom);
  CHECK_EQ_INT(off.map_outputs, 64);
  CHECK_EQ_INT(off.map_tasks, 64);
  CHECK(on.map_outputs < 64 && on.map_tasks == 64);
  /* auto: sqrt(64 * 64) = 64 <= 200: no merge */
  CHECK_EQ_INT(autom.map_outputs, 64);
  /* merged or not: the same rows in the same partitions, in the same order */
  orow *a = result_rows(&off, &t), *b = result_rows(&on, &t);
  CHECK_EQ_INT(off.rows, on.rows);
  for (int64_t i = 0; i < off.rows && i < on.rows; i++)
    CHECK(a[i].id == b[i].id && a[i].part == b[i].part);
  free(a);
  free(b);
  fsh_plan_result_reset(&off);
  fsh_plan_result_reset(&on);
  fsh_plan_result_reset(&autom);
  /* auto turns on past the threshold */
  fsh_error err;
  char dir[64];
  fsh_shuffle_backend *be = make_backend(0, dir);
  fsh_plan_run_options o = {.backend = be, .merge_threshold = 16};
  CHECK_OK(fsh_plan_run(p, &o, &autom, &err));
  CHECK_MSG(autom.map_outputs <= 16 * 16 / 64 && autom.map_outputs >= 1,
            "auto merge past the threshold left %lld map outputs", (long long)autom.map_outputs);
  CHECK_EQ_INT(autom.rows, c.rows);
  fsh_plan_result_reset(&autom);
  drop_backend(be, 0, dir);
  fsh_plan_free(p);
  ref_free(&t);
}

/* ---- join + group-by against nested loops ------------------------------------------------- */

static void test_join_group_by(void) {
  for (int strat = 1; strat <= 2; strat++) {
    fsh_error err;
    fsh_plan *p = NULL;
    CHECK_OK(fsh_plan_new(3, &p, &err));
    fsh_plan_gen_options gl = {.generator = FSH_PLAN_GEN_KEYED, .rows = 3000, .batch_rows = 128,
                               .seed = 1, .key_range = 40, .skew = 0.3, .null_fraction = 0.1};
    fsh_plan_gen_options gr = gl;
    gr.rows = 500, gr.seed = 2, gr.skew = 0;
    int l, r, j, a;
    CHECK_OK(fsh_plan_scan_generated(p, "l", &gl, 4, &l, &err));
    CHECK_OK(fsh_plan_scan_generated(p, "r", &gr, 2, &r, &err));
    const char *k = "key";
    CHECK_OK(fsh_plan_join(p, "j", l, r, &k, &k, 1, FSH_JOIN_INNER, (fsh_plan_join_strategy)strat,
                           &j, &err));
    fsh_plan_agg aggs[1] = {{FSH_AGG_COUNT_STAR, NULL, "n"}};
    CHECK_OK(fsh_plan_aggregate(p, "g", j, &k, 1, aggs, 1, false, &a, &err));
    fsh_plan_result res;
    run_plan(p, strat - 1, FSH_PLAN_MERGE_AUTO, &res);
    /* nested loops over the two tables */
    table_ref tl, tr;
    fsh_keyed_options ol = {.seed = 1, .key_range = 40, .skew = 0.3, .null_fraction = 0.1};
    fsh_keyed_options orr = {.seed = 2, .key_range = 40, .skew = 0, .null_fraction = 0.1};
    ref_make(&ol, 3000, &tl);
    ref_make(&orr, 500, &tr);
    int64_t want[40] = {0};
    for (int64_t x = 0; x < 3000; x++)
      for (int64_t y = 0; y < 500; y++)
        if (tl.valid[x] && tr.valid[y] && tl.key[x] == tr.key[y]) want[tl.key[x]]++;
    int64_t got[40] = {0}, groups = 0;
    for (int64_t b = 0; b < res.n_batches; b++)
      for (int64_t i = 0; i < res.batches[b]->length; i++) {
        int64_t key = col_i64(res.batches[b], 0, i);
        CHECK(fsh_array_is_valid(res.batches[b]->columns[0], i));
        if (key >= 0 && key < 40) got[key] += col_i64(res.batches[b], 1, i);
        groups++;
      }
    int64_t want_groups = 0;
    for (int q = 0; q < 40; q++) {
      CHECK_MSG(got[q] == want[q], "strategy %d key %d: %lld joined rows, want %lld", strat, q,
                (long long)got[q], (long long)want[q]);
      want_groups += want[q] > 0;
    }
    CHECK_EQ_INT(groups, want_groups);
    ref_free(&tl);
    ref_free(&tr);
    fsh_plan_result_reset(&res);
    fsh_plan_free(p);
  }
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"repartition_hash", test_repartition_hash},
      {"repartition_random", test_repartition_random},
      {"repartition_range_and_sort", test_repartition_range_and_sort},
      {"order_keeping", test_order_keeping},
      {"pre_shuffle_merge", test_pre_shuffle_merge},
      {"join_group_by", test_join_group_by},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
