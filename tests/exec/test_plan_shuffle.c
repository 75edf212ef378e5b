/* test_plan_shuffle.c -- property tests of the repartitioning operators
 * (hash, random, range) and the distributed sort, run through plans on the
 * memory and fs backends, against references computed here from the keyed
 * table generated in one piece (test_plan_common.h). Rows are identified
 * by the table's "id" column, so every check is exact. */
#include "test_plan_common.h"

/* ---- repartition by hash ---------------------------------------------------------- */

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

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"repartition_hash", test_repartition_hash},
      {"repartition_random", test_repartition_random},
      {"repartition_range_and_sort", test_repartition_range_and_sort},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
