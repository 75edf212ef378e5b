/* test_plan_spill.c -- plan runs with bounded operator memory
 * (fsh_plan_run_options.operator_memory): every example plan with a sort,
 * an aggregate or a join, run with a tiny budget on the memory and fs
 * backends, spills (counted in the result) and still equals the
 * single-process in-memory reference run; the spill directory is empty
 * after every run (success, a budget too small for one partition, an
 * allocation failure at many points); the errors name the operator. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/shuffle.h>

#include "../test.h"
#include "plan_examples.h"

static void make_dir(char *tmpl) { CHECK(mkdtemp(tmpl) != NULL); }

/* Plans (examples/plans) holding a sort, an aggregate or a join, and a
 * budget small enough that some instance spills. */
static const struct {
  const char *plan;
  int64_t budget;
  const char *spilling_op; /* in the spill summary */
} k_plans[] = {
    {"sort.json", 64 << 10, "(sort)"},
    {"repartition_range.json", 64 << 10, "(sort)"},
    {"repartition_hash.json", 64 << 10, "(aggregate)"},
    {"group_by_float_sums.json", 4 << 10, "[final aggregate]"},
    {"join_group_by.json", 256 << 10, "(join 'j')"},
    {"broadcast_join.json", 64 << 10, "(join)"},
};

/* Each plan on the memory backend (the first two also on fs; pytest runs
 * every one on memory, fs and flight), with the budget over two spill
 * directories: verifies against the in-memory reference, spilled,
 * left nothing behind; without a budget (memory backend) nothing is counted. */
static void test_examples_spill_and_verify(void) {
  char d1[] = "/tmp/fsh-test-opspill-XXXXXX", d2[] = "/tmp/fsh-test-opspill-XXXXXX";
  char fsdir[] = "/tmp/fsh-test-opspill-fs-XXXXXX";
  make_dir(d1);
  make_dir(d2);
  make_dir(fsdir);
  const char *dirs[2] = {d1, d2};
  for (size_t i = 0; i < sizeof k_plans / sizeof k_plans[0]; i++) {
    fsh_plan *p = load_example(k_plans[i].plan, 0);
    if (!p) continue;
    fsh_error err;
    fsh_plan_result ref;
    fsh_plan_run_options ro = {.reference = true};
    CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
    CHECK(ref.spill_files == 0 && ref.spill_summary == NULL);
    for (int fs = 0; fs < (i < 2 ? 2 : 1); fs++) { /* fs: the first two (time) */
      fsh_shuffle_backend *be = NULL;
      if (fs) CHECK_OK(fsh_shuffle_fs_new(fsdir, &be, &err));
      else CHECK_OK(fsh_shuffle_memory_new(&be, &err));
      fsh_plan_run_options o = {.backend = be, .operator_memory = k_plans[i].budget,
                                .spill_dirs = dirs, .n_spill_dirs = 2, .n_threads = 2};
      fsh_plan_result r;
      int rc = fsh_plan_run(p, &o, &r, &err);
      CHECK_MSG(rc == 0, "%s (%s): %s", k_plans[i].plan, fs ? "fs" : "memory", err.message);
      if (rc == 0) {
        rc = fsh_plan_result_compare(p, &r, &ref, &err);
        CHECK_MSG(rc == 0, "%s (%s): %s", k_plans[i].plan, fs ? "fs" : "memory", err.message);
        CHECK_MSG(r.spill_files > 0 && r.spilled_bytes > 0 && r.operators_spilled > 0,
                  "%s: did not spill", k_plans[i].plan);
        CHECK_MSG(r.spill_summary && strstr(r.spill_summary, k_plans[i].spilling_op),
                  "%s: summary '%s'", k_plans[i].plan, r.spill_summary ? r.spill_summary : "");
      }
      CHECK_EQ_INT(fsh_test_dir_entries(d1), 0);
      CHECK_EQ_INT(fsh_test_dir_entries(d2), 0);
      fsh_plan_result_reset(&r);
      if (!fs) { /* without a budget: as before, nothing spilled */
        fsh_plan_run_options o0 = {.backend = be};
        CHECK_OK(fsh_plan_run(p, &o0, &r, &err));
        CHECK(r.spill_files == 0 && r.spilled_bytes == 0 && r.spill_summary == NULL);
        CHECK_OK(fsh_plan_result_compare(p, &r, &ref, &err));
        fsh_plan_result_reset(&r);
      }
      fsh_shuffle_backend_destroy(be);
    }
    fsh_plan_result_reset(&ref);
    fsh_plan_free(p);
  }
  CHECK_EQ_INT(rmdir(d1), 0);
  CHECK_EQ_INT(rmdir(d2), 0);
  rmdir(fsdir);
}

/* A budget below one spill partition's need: EFBIG naming the operator
 * (and the partition), nothing left in the directory; no directory: EINVAL. */
static void test_budget_too_small(void) {
  char d[] = "/tmp/fsh-test-opspill-XXXXXX";
  make_dir(d);
  const char *dirs[1] = {d};
  fsh_plan *p = load_example("join_group_by.json", 0);
  if (!p) return;
  fsh_error err;
  fsh_plan_result r;
  fsh_plan_run_options o = {.operator_memory = 100, .spill_dirs = dirs, .n_spill_dirs = 1};
  int rc = fsh_plan_run(p, &o, &r, &err);
  CHECK_MSG(rc == EFBIG, "got %d: %s", rc, rc ? err.message : "");
  if (rc) {
    CHECK_MSG(strstr(err.message, "plan operator 3 (join 'j')") != NULL, "%s", err.message);
    CHECK_MSG(strstr(err.message, "spill partition") != NULL, "%s", err.message);
    CHECK_MSG(strstr(err.message, "not implemented") == NULL, "%s", err.message);
  }
  CHECK(r.rows == 0 && r.batches == NULL && r.spill_summary == NULL);
  CHECK_EQ_INT(fsh_test_dir_entries(d), 0);
  fsh_plan_result_reset(&r);
  fsh_plan_run_options none = {.operator_memory = 1 << 20};
  rc = fsh_plan_run(p, &none, &r, &err);
  CHECK_EQ_INT(rc, EINVAL);
  if (rc) CHECK_MSG(strstr(err.message, "spill directory") != NULL, "%s", err.message);
  fsh_plan_run_options neg = {.operator_memory = -1, .spill_dirs = dirs, .n_spill_dirs = 1};
  CHECK_EQ_INT(fsh_plan_run(p, &neg, &r, &err), EINVAL);
  fsh_plan_free(p);
  CHECK_EQ_INT(rmdir(d), 0);
}

/* Allocation failure at many points of a spilling run (sort, aggregate,
 * join all spill): an error or the reference's rows, no leak, no file left. */
static void test_alloc_failure(void) {
  char d[] = "/tmp/fsh-test-opspill-XXXXXX";
  make_dir(d);
  const char *dirs[1] = {d};
  const char *text =
      "{\"partitions\": 2, \"nodes\": [{\"id\": \"a\", \"op\": \"scan\", \"generate\": \"keyed\", "
      "\"rows\": 3000, \"batch_rows\": 300, \"partitions\": 2, \"null_fraction\": 0.1}, "
      "{\"id\": \"b\", \"op\": \"scan\", \"generate\": \"synthetic\", \"rows\": 2000, "
      "\"batch_rows\": 200, \"key_range\": 500}, {\"id\": \"j\", \"op\": \"join\", "
      "\"left\": \"a\", \"right\": \"b\", \"keys\": [\"key\"], \"type\": \"left\"}, "
      "{\"op\": \"sort\", \"keys\": [\"key\"]}, {\"op\": \"aggregate\", \"keys\": [\"key\"], "
      "\"aggs\": [{\"fn\": \"count\", \"column\": \"value\"}]}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  if (!p) return;
  fsh_plan_result ref, r;
  fsh_plan_run_options ro = {.reference = true};
  CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  fsh_plan_run_options o = {.operator_memory = 8 << 10, .spill_dirs = dirs, .n_spill_dirs = 1};
  CHECK_OK(fsh_plan_run(p, &o, &r, &err));
  CHECK_MSG(r.spill_summary && strstr(r.spill_summary, "(join 'j')") &&
                strstr(r.spill_summary, "(aggregate)") && strstr(r.spill_summary, "(sort)"),
            "every operator should spill: '%s'", r.spill_summary ? r.spill_summary : "");
  fsh_plan_result_reset(&r);
  int64_t allocs = fsh_alloc_count();
  CHECK_OK(fsh_plan_run(p, &o, &r, &err));
  allocs = fsh_alloc_count() - allocs;
  fsh_plan_result_reset(&r);
  int failures = 0;
  for (int64_t k = 1; k < allocs + 10; k += 1 + k / 3) {
    for (int persistent = 0; persistent < 2; persistent++) {
      fsh_alloc_fail_after(k, persistent != 0);
      int rc = fsh_plan_run(p, &o, &r, &err);
      fsh_alloc_fail_after(0, false);
      CHECK_MSG(rc == 0 || rc == ENOMEM || rc == EIO, "k=%lld: %d %s", (long long)k, rc,
                err.message);
      if (rc == 0) CHECK_OK(fsh_plan_result_compare(p, &r, &ref, &err));
      else failures++;
      fsh_plan_result_reset(&r);
      CHECK_MSG(fsh_test_dir_entries(d) == 0, "k=%lld: files left in %s", (long long)k, d);
    }
  }
  CHECK(failures > 0);
  fsh_plan_result_reset(&ref);
  fsh_plan_free(p);
  CHECK_EQ_INT(rmdir(d), 0);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"examples_spill_and_verify", test_examples_spill_and_verify},
      {"budget_too_small", test_budget_too_small},
      {"alloc_failure", test_alloc_failure},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
