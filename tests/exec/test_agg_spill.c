/* test_agg_spill.c -- the spilling hash aggregate against the in-memory
 * fsh_hash_agg (no budget) on random batches of test_agg_data.h (skewed
 * int64 and utf8 keys with nulls, every aggregate function): budgets that
 * force a spill (SINGLE, and PARTIAL followed by a FINAL aggregate), no
 * spill (same batch, same order), a partition still over the budget,
 * no spill directory, allocation failure; no file left behind. */
#include "exec/test_agg_data.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

static const fsh_agg_spec SPECS[] = {
    {FSH_AGG_COUNT_STAR, -1, NULL},     {FSH_AGG_COUNT, TD_VI, NULL},
    {FSH_AGG_SUM, TD_VI, NULL},         {FSH_AGG_SUM, TD_VF, "total_vf"},
    {FSH_AGG_AVG, TD_VI, NULL},         {FSH_AGG_MIN, TD_VI, NULL},
    {FSH_AGG_MAX, TD_VF, NULL},         {FSH_AGG_MIN, TD_VS, NULL},
    {FSH_AGG_MAX, TD_VS, NULL},         {FSH_AGG_COUNT_DISTINCT, TD_VS, NULL},
    {FSH_AGG_COUNT_DISTINCT, TD_K3, NULL},
};
#define N_SPECS ((int)(sizeof SPECS / sizeof SPECS[0]))
static const int32_t KEYS[2] = {TD_K1, TD_K2};

enum { NB = 12, BROWS = 2500 };

static fsh_batch *g_in[NB];
static int g_nb = NB; /* batches in use */

static void make_input(uint64_t seed, int n_keys, int nb) {
  g_nb = nb;
  uint64_t st = seed;
  static td_row rows[BROWS];
  td_opts o = {.n_keys = n_keys, .null_pct = 5};
  for (int i = 0; i < nb; i++) g_in[i] = td_batch(&st, BROWS, o, (int64_t)i * BROWS, rows);
}

static void free_input(void) {
  for (int i = 0; i < g_nb; i++) fsh_batch_unref(g_in[i]), g_in[i] = NULL;
}

static char *make_dir(void) {
  char tmpl[] = "/tmp/fsh-aggspill-XXXXXX";
  char *d = mkdtemp(tmpl);
  if (!d) abort();
  return strdup(d);
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* The in-memory aggregate of every input batch (no budget). */
static fsh_batch *reference(void) {
  fsh_error err;
  fsh_hash_agg *a = NULL;
  fsh_batch *out = NULL;
  CHECK_OK(fsh_hash_agg_new(g_in[0]->schema, KEYS, 2, SPECS, N_SPECS, FSH_AGG_SINGLE, 0, &a,
                            &err));
  for (int i = 0; a && i < g_nb; i++) CHECK_OK(fsh_hash_agg_push(a, g_in[i], &err));
  if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
  fsh_hash_agg_free(a);
  return out;
}

/* Sorted by the two key columns (groups are unique, so this is a total
 * order). */
static fsh_batch *by_keys(fsh_batch *b) {
  fsh_error err;
  int32_t k[2] = {0, 1};
  fsh_batch *s = NULL;
  CHECK_OK(fsh_sort_batch(b, k, 2, NULL, &s, &err));
  return s;
}

/* Runs the spilling aggregate; *out the concatenated result (or NULL and
 * the error code). */
static int run(fsh_agg_mode mode, int64_t budget, int32_t parts, fsh_spill *sp, bool *spilled,
               fsh_batch **out, fsh_error *err) {
  *out = NULL;
  fsh_spill_agg_options o = {.key_cols = KEYS, .n_keys = 2, .aggs = SPECS, .n_aggs = N_SPECS,
                             .mode = mode, .memory_budget = budget, .n_partitions = parts,
                             .spill = sp};
  fsh_spill_agg *a = NULL;
  int rc = fsh_spill_agg_new(g_in[0]->schema, &o, &a, err);
  for (int i = 0; rc == 0 && i < g_nb; i++) rc = fsh_spill_agg_push(a, g_in[i], err);
  fsh_batch_stream st = {0};
  if (rc == 0) rc = fsh_spill_agg_finish(a, &st, err);
  if (a && spilled) *spilled = fsh_spill_agg_spilled(a);
  fsh_spill_agg_free(a); /* the stream lives on */
  fsh_batch *got[1024];
  int n = 0;
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = st.get_next(&st, &b, err);
    if (rc != 0 || !b) break;
    if (n < 1024) got[n++] = b;
    else fsh_batch_unref(b);
  }
  if (rc == 0 && n > 0) rc = fsh_concat(got, n, out, err);
  for (int i = 0; i < n; i++) fsh_batch_unref(got[i]);
  if (st.release) st.release(&st);
  return rc;
}

static void test_against_in_memory(void) {
  fsh_error err = {{0}};
  make_input(1, 4000, NB);
  fsh_batch *want = reference();
  fsh_batch *want_sorted = by_keys(want);
  char *dir = make_dir();
  const char *dirs[1] = {dir};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 1, .compression = FSH_COMPRESSION_LZ4_FRAME,
                          .tag = "agg"};
  fsh_spill *sp = NULL;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  printf("  %lld groups\n", (long long)want->length);
  /* no budget: one batch, first-seen order, equal to the reference */
  bool spilled = true;
  fsh_batch *got = NULL;
  CHECK_OK(run(FSH_AGG_SINGLE, 0, 0, sp, &spilled, &got, &err));
  CHECK(!spilled);
  CHECK_MSG(got && fsh_batch_equals(want, got, &err), "no spill: %s", err.message);
  fsh_batch_unref(got);
  /* budgets that force a spill, several partition counts */
  static const int32_t parts[3] = {64, 128, 32};
  static const int64_t budgets[3] = {256 << 10, 128 << 10, 512 << 10};
  for (int c = 0; c < 3; c++) {
    spilled = false;
    CHECK_OK(run(FSH_AGG_SINGLE, budgets[c], parts[c], sp, &spilled, &got, &err));
    CHECK_MSG(spilled, "case %d did not spill", c);
    fsh_batch *s = got ? by_keys(got) : NULL;
    CHECK_MSG(s && fsh_batch_equals(want_sorted, s, &err), "SINGLE, %d partitions: %s",
              (int)parts[c], err.message);
    fsh_batch_unref(s);
    fsh_batch_unref(got);
    CHECK_EQ_INT(count_files(dir), 0);
    /* PARTIAL through a FINAL aggregate */
    spilled = false;
    CHECK_OK(run(FSH_AGG_PARTIAL, budgets[c], parts[c], sp, &spilled, &got, &err));
    CHECK(spilled);
    fsh_hash_agg *fin = NULL;
    fsh_batch *res = NULL;
    CHECK_OK(fsh_hash_agg_new(g_in[0]->schema, KEYS, 2, SPECS, N_SPECS, FSH_AGG_FINAL, 0, &fin,
                              &err));
    if (fin && got) CHECK_OK(fsh_hash_agg_push(fin, got, &err));
    if (fin) CHECK_OK(fsh_hash_agg_finish(fin, &res, &err));
    fsh_hash_agg_free(fin);
    s = res ? by_keys(res) : NULL;
    CHECK_MSG(s && fsh_batch_equals(want_sorted, s, &err), "PARTIAL, %d partitions: %s",
              (int)parts[c], err.message);
    fsh_batch_unref(s);
    fsh_batch_unref(res);
    fsh_batch_unref(got);
    CHECK_EQ_INT(count_files(dir), 0);
  }
  CHECK(fsh_spill_files_written(sp) > 0);
  fsh_spill_free(sp);
  rmdir(dir);
  free(dir);
  fsh_batch_unref(want);
  fsh_batch_unref(want_sorted);
  free_input();
}

static void test_errors(void) {
  fsh_error err = {{0}};
  make_input(2, 4000, 3);
  char *dir = make_dir();
  const char *dirs[1] = {dir};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 1};
  fsh_spill *sp = NULL;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  fsh_batch *got = NULL;
  /* no spill area: over the budget is EFBIG */
  int rc = run(FSH_AGG_SINGLE, 10000, 4, NULL, NULL, &got, &err);
  CHECK_MSG(rc == EFBIG && strstr(err.message, "budget"), "rc %d: %s", rc, err.message);
  /* two partitions of a tiny budget: each still over it */
  rc = run(FSH_AGG_SINGLE, 20000, 2, sp, NULL, &got, &err);
  CHECK_MSG(rc == EFBIG && strstr(err.message, "spill partition 0 of 2"), "rc %d: %s", rc,
            err.message);
  CHECK(got == NULL);
  CHECK_EQ_INT(count_files(dir), 0);
  /* FINAL mode is not the spilling aggregate's */
  fsh_spill_agg_options o = {.key_cols = KEYS, .n_keys = 2, .aggs = SPECS, .n_aggs = N_SPECS,
                             .mode = FSH_AGG_FINAL, .spill = sp};
  fsh_spill_agg *a = NULL;
  CHECK_EQ_INT(fsh_spill_agg_new(g_in[0]->schema, &o, &a, &err), EINVAL);
  /* a bad column is the hash aggregate's error */
  fsh_agg_spec bad = {FSH_AGG_SUM, 99, NULL};
  o.mode = FSH_AGG_SINGLE;
  o.aggs = &bad;
  o.n_aggs = 1;
  rc = fsh_spill_agg_new(g_in[0]->schema, &o, &a, &err);
  CHECK_MSG(rc == EINVAL && a == NULL, "rc %d", rc);
  /* allocation failure, transient then persistent: an error or the right
   * answer, nothing leaked (ASan), no file left */
  fsh_batch *want = NULL;
  bool spilled = false;
  CHECK_OK(run(FSH_AGG_SINGLE, 128 << 10, 16, sp, &spilled, &want, &err));
  CHECK(spilled);
  fsh_batch *want_sorted = want ? by_keys(want) : NULL;
  int failures = 0;
  for (int persistent = 0; persistent < 2; persistent++) {
    for (int64_t n = 1; n < 10000000; n += 1 + n / 8) {
      fsh_alloc_fail_after(n, persistent);
      rc = run(FSH_AGG_SINGLE, 128 << 10, 16, sp, NULL, &got, &err);
      fsh_alloc_fail_after(0, false);
      CHECK_EQ_INT(count_files(dir), 0);
      if (rc == 0) {
        fsh_batch *s = got ? by_keys(got) : NULL;
        CHECK(s && want_sorted && fsh_batch_equals(want_sorted, s, &err));
        fsh_batch_unref(s);
        fsh_batch_unref(got);
        break;
      }
      failures++;
    }
    CHECK_MSG(rc == 0, "never succeeded: %s", err.message);
  }
  printf("  %d failing allocations, each clean\n", failures);
  fsh_batch_unref(want);
  fsh_batch_unref(want_sorted);
  fsh_spill_free(sp);
  rmdir(dir);
  free(dir);
  free_input();
}

FSH_TEST_MAIN(TEST(test_against_in_memory), TEST(test_errors))
