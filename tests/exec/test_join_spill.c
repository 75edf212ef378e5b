/* test_join_spill.c -- the spilling hash join against the in-memory
 * fsh_hash_join (no budget) on random batches of test_agg_data.h (skewed
 * int64 keys and utf8 keys with nulls) for every join type and either
 * build side: a budget that forces a spill (same rows, compared after
 * sorting by the row ids of both sides), no spill (same batches, same
 * order), a partition still over the budget, no spill directory,
 * allocation failure; no file left behind. */
#include "exec/test_agg_data.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

enum { NB = 4, BROWS = 300 };

/* td batches without the dictionary column (its arrays would compare by
 * dictionary, not by value). */
static fsh_batch *td_plain(uint64_t *st, td_opts o, int64_t id0) {
  static td_row rows[BROWS];
  fsh_batch *b = td_batch(st, BROWS, o, id0, rows);
  fsh_schema *s = SBH_OK(fsh_schema_new(TD_NCOLS - 1));
  fsh_batch *p = NULL;
  int k = 0;
  for (int c = 0; c < TD_NCOLS; c++)
    if (c != TD_K3) SBH_RC(fsh_field_copy(&s->fields[k++], &b->schema->fields[c]));
  p = SBH_OK(fsh_batch_new(s, b->length));
  k = 0;
  for (int c = 0; c < TD_NCOLS; c++)
    if (c != TD_K3) p->columns[k++] = fsh_array_ref(b->columns[c]);
  fsh_schema_unref(s);
  fsh_batch_unref(b);
  return p;
}
/* column indices after dropping k3 */
enum { P_K1 = 0, P_K2 = 1, P_ID = TD_ID - 1, P_NCOLS = TD_NCOLS - 1 };

static fsh_batch *L[NB], *R[NB];

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

static const int32_t KEYS[2] = {P_K1, P_K2};

/* Joins L and R (budget 0: the plain hash join); every output row
 * concatenated into *out. */
static int run(fsh_join_type type, bool build_left, int64_t budget, int32_t parts, fsh_spill *sp,
               bool plain, bool *spilled, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  fsh_batch **build = build_left ? L : R, **probe = build_left ? R : L;
  fsh_batch *got[4 * NB + 256];
  int n = 0, rc;
  if (plain) {
    fsh_hash_join *j = NULL;
    rc = fsh_hash_join_new(L[0]->schema, R[0]->schema, KEYS, KEYS, 2, type, build_left, 0, &j,
                           err);
    for (int i = 0; rc == 0 && i < NB; i++) rc = fsh_hash_join_build(j, build[i], err);
    for (int i = 0; rc == 0 && i < NB; i++) {
      fsh_batch *o = NULL;
      rc = fsh_hash_join_probe(j, probe[i], &o, err);
      if (o) got[n++] = o;
    }
    fsh_batch *o = NULL;
    if (rc == 0) rc = fsh_hash_join_finish(j, &o, err);
    if (o) got[n++] = o;
    fsh_hash_join_free(j);
  } else {
    fsh_spill_join *j = NULL;
    rc = fsh_spill_join_new(L[0]->schema, R[0]->schema, KEYS, KEYS, 2, type, build_left, budget,
                            parts, sp, &j, err);
    for (int i = 0; rc == 0 && i < NB; i++) rc = fsh_spill_join_build(j, build[i], err);
    for (int i = 0; rc == 0 && i < NB; i++) {
      fsh_batch *o = NULL;
      rc = fsh_spill_join_probe(j, probe[i], &o, err);
      if (o) got[n++] = o;
    }
    fsh_batch_stream st = {0};
    if (rc == 0) rc = fsh_spill_join_finish(j, &st, err);
    if (j && spilled) *spilled = fsh_spill_join_spilled(j);
    fsh_spill_join_free(j);
    while (rc == 0) {
      fsh_batch *b = NULL;
      rc = st.get_next(&st, &b, err);
      if (rc != 0 || !b) break;
      if (n < (int)(sizeof got / sizeof got[0])) got[n++] = b;
      else fsh_batch_unref(b), rc = E2BIG;
    }
    if (st.release) st.release(&st);
  }
  if (rc == 0 && n > 0) rc = fsh_concat(got, n, out, err);
  for (int i = 0; i < n; i++) fsh_batch_unref(got[i]);
  return rc;
}

/* Sorted by the left and right row ids (unique per side: a total order). */
static fsh_batch *by_ids(fsh_batch *b, bool both) {
  fsh_error err;
  int32_t k[2] = {P_ID, P_NCOLS + P_ID};
  fsh_batch *s = NULL;
  CHECK_OK(fsh_sort_batch(b, k, both ? 2 : 1, NULL, &s, &err));
  return s;
}

static const char *const TYPE_NAMES[] = {"inner", "left", "right", "full", "semi", "anti"};

static void test_against_in_memory(void) {
  fsh_error err = {{0}};
  uint64_t st = 3;
  td_opts o = {.n_keys = 3000, .null_pct = 5};
  for (int i = 0; i < NB; i++) {
    L[i] = td_plain(&st, o, (int64_t)i * BROWS);
    R[i] = td_plain(&st, o, 100000 + (int64_t)i * BROWS);
  }
  char tmpl[] = "/tmp/fsh-joinspill-XXXXXX";
  char *dir = mkdtemp(tmpl);
  const char *dirs[1] = {dir};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 1, .tag = "join"};
  fsh_spill *sp = NULL;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  for (int t = FSH_JOIN_INNER; t <= FSH_JOIN_LEFT_ANTI; t++) {
    for (int bl = 0; bl < 2; bl++) {
      bool both = t < FSH_JOIN_LEFT_SEMI;
      fsh_batch *want = NULL, *got = NULL;
      CHECK_OK(run((fsh_join_type)t, bl, 0, 0, NULL, true, NULL, &want, &err));
      /* no budget: the same batches in the same order */
      bool spilled = true;
      CHECK_OK(run((fsh_join_type)t, bl, 0, 0, sp, false, &spilled, &got, &err));
      CHECK(!spilled);
      CHECK_MSG((!want && !got) || (want && got && fsh_batch_equals(want, got, &err)),
                "%s build_left %d, no spill: %s", TYPE_NAMES[t], bl, err.message);
      fsh_batch_unref(got);
      /* a budget of about a third of the build side (~50 KB of batches, 40 B
       * a row of table) */
      spilled = false;
      CHECK_OK(run((fsh_join_type)t, bl, 32 << 10, 16, sp, false, &spilled, &got, &err));
      CHECK_MSG(spilled, "%s build_left %d did not spill", TYPE_NAMES[t], bl);
      CHECK_EQ_INT(count_files(dir), 0);
      fsh_batch *ws = want ? by_ids(want, both) : NULL, *gs = got ? by_ids(got, both) : NULL;
      CHECK_MSG((!ws && !gs) || (ws && gs && fsh_batch_equals(ws, gs, &err)),
                "%s build_left %d, spilled: %s (rows %lld vs %lld)", TYPE_NAMES[t], bl,
                err.message, (long long)(want ? want->length : 0),
                (long long)(got ? got->length : 0));
      fsh_batch_unref(ws);
      fsh_batch_unref(gs);
      fsh_batch_unref(want);
      fsh_batch_unref(got);
    }
  }
  /* a partition still over the budget; no spill directory */
  fsh_batch *got = NULL;
  int rc = run(FSH_JOIN_INNER, false, 8 << 10, 2, sp, false, NULL, &got, &err);
  CHECK_MSG(rc == EFBIG && strstr(err.message, "of 2 is still over"), "rc %d: %s", rc,
            err.message);
  CHECK_EQ_INT(count_files(dir), 0);
  rc = run(FSH_JOIN_INNER, false, 8 << 10, 2, NULL, false, NULL, &got, &err);
  CHECK_MSG(rc == EFBIG && strstr(err.message, "no spill directory"), "rc %d: %s", rc,
            err.message);
  fsh_spill_free(sp);
  rmdir(dir);
  for (int i = 0; i < NB; i++) fsh_batch_unref(L[i]), fsh_batch_unref(R[i]);
}

/* Allocation failure (transient, then persistent) in a spilling full
 * outer join: an error or the right rows, nothing leaked (ASan), no file
 * left behind. */
static void test_alloc_failure(void) {
  fsh_error err = {{0}};
  uint64_t st = 9;
  td_opts o = {.n_keys = 100000, .null_pct = 5};
  for (int i = 0; i < NB; i++) {
    L[i] = td_plain(&st, o, (int64_t)i * BROWS);
    R[i] = td_plain(&st, o, 100000 + (int64_t)i * BROWS);
  }
  char tmpl[] = "/tmp/fsh-joinspill-oom-XXXXXX";
  char *dir = mkdtemp(tmpl);
  const char *dirs[1] = {dir};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 1, .tag = "join"};
  fsh_spill *sp = NULL;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  fsh_batch *want = NULL, *got = NULL;
  bool spilled = false;
  CHECK_OK(run(FSH_JOIN_FULL, false, 32 << 10, 16, sp, false, &spilled, &want, &err));
  CHECK(spilled);
  fsh_batch *ws = want ? by_ids(want, true) : NULL;
  int failures = 0, rc = 0;
  for (int persistent = 0; persistent < 2; persistent++) {
    for (int64_t n = 1; n < 10000000; n += 1 + n / 16) {
      fsh_alloc_fail_after(n, persistent);
      rc = run(FSH_JOIN_FULL, false, 32 << 10, 16, sp, false, NULL, &got, &err);
      fsh_alloc_fail_after(0, false);
      CHECK_EQ_INT(count_files(dir), 0);
      if (rc == 0) {
        fsh_batch *gs = got ? by_ids(got, true) : NULL;
        CHECK(gs && ws && fsh_batch_equals(ws, gs, &err));
        fsh_batch_unref(gs);
        fsh_batch_unref(got);
        break;
      }
      failures++;
    }
    CHECK_MSG(rc == 0, "never succeeded: %s", err.message);
  }
  printf("  %d failing allocations, each clean\n", failures);
  fsh_batch_unref(ws);
  fsh_batch_unref(want);
  fsh_spill_free(sp);
  rmdir(dir);
  for (int i = 0; i < NB; i++) fsh_batch_unref(L[i]), fsh_batch_unref(R[i]);
}

FSH_TEST_MAIN(TEST(test_against_in_memory), TEST(test_alloc_failure))
