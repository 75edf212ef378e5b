/* test_plan_order.c -- property tests of the order-keeping shuffling
 * operators (gather, into_partitions, into_batches, global limit, top-N),
 * pre-shuffle merge, a join + group-by against nested loops, and map tasks
 * on threads, on the memory and fs backends, against references computed
 * here (test_plan_common.h). */
#include "test_plan_common.h"

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

/* Map tasks on threads: the same rows in the same partitions, in the same
 * order, as one after another (each map task writes its own map output). */
static void test_threads(void) {
  const char *text =
      "{\"partitions\": 5, \"nodes\": ["
      "{\"id\": \"a\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 20000, "
      "\"batch_rows\": 300, \"partitions\": 9, \"null_fraction\": 0.1, \"skew\": 0.3},"
      "{\"id\": \"b\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 3000, "
      "\"batch_rows\": 300, \"partitions\": 4, \"seed\": 3},"
      "{\"op\": \"join\", \"left\": \"a\", \"right\": \"b\", \"keys\": [\"key\"], "
      "\"type\": \"left\", \"strategy\": \"partitioned\"},"
      "{\"op\": \"repartition\", \"by\": \"random\", \"partitions\": 6},"
      "{\"op\": \"aggregate\", \"keys\": [\"grp\"], \"aggs\": [{\"fn\": \"count_star\"}, "
      "{\"fn\": \"sum\", \"column\": \"amount\"}]},"
      "{\"op\": \"sort\", \"keys\": [\"grp\"]}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  if (!p) return;
  for (int which = 0; which < 2; which++) {
    fsh_plan_result seq, par;
    char dir[64];
    fsh_shuffle_backend *b = make_backend(which, dir);
    fsh_plan_run_options o1 = {.backend = b, .n_threads = 1};
    fsh_plan_run_options o4 = {.backend = b, .n_threads = 4, .first_shuffle_id = 100};
    CHECK_OK(fsh_plan_run(p, &o1, &seq, &err));
    CHECK_OK(fsh_plan_run(p, &o4, &par, &err));
    drop_backend(b, which, dir);
    CHECK_EQ_INT(seq.rows, par.rows);
    CHECK(seq.rows > 0);
    CHECK_EQ_INT(seq.map_tasks, par.map_tasks);
    uint64_t *h1 = NULL, *h2 = NULL;
    int64_t n1 = 0, n2 = 0;
    CHECK_OK(fsh_plan_result_row_hashes(&seq, NULL, 0, &h1, &n1, &err));
    CHECK_OK(fsh_plan_result_row_hashes(&par, NULL, 0, &h2, &n2, &err));
    CHECK(n1 == n2 && h1 && h2 && memcmp(h1, h2, (size_t)n1 * sizeof *h1) == 0);
    fsh_free(h1);
    fsh_free(h2);
    fsh_plan_result ref;
    fsh_plan_run_options ro = {.reference = true};
    CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
    CHECK_OK(fsh_plan_result_compare(p, &par, &ref, &err));
    fsh_plan_result_reset(&ref);
    fsh_plan_result_reset(&seq);
    fsh_plan_result_reset(&par);
  }
  fsh_plan_free(p);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"order_keeping", test_order_keeping},
      {"pre_shuffle_merge", test_pre_shuffle_merge},
      {"join_group_by", test_join_group_by},
      {"threads", test_threads},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
