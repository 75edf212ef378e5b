/* test_extsort.c -- the external sort and its spill files: random data of
 * sort_ref.h cut into random batches, sorted under budgets that force 0, 1
 * and many runs (and merge passes), compared with fsh_sort_batch of the
 * concatenated input and with the independent reference stable sort;
 * empty input, over budget without spilling, allocation failure, a missing
 * spill directory, full spill directories (tmpfs, when root): no leak and
 * no file left behind on any path. */
#define _GNU_SOURCE
#include "kernels/sort_ref.h"
#include "test_tmpfs.h"

#include <dirent.h>
#include <flightshuffle/exec.h>
#include <sys/stat.h>
#include <unistd.h>

static char *make_dir(const char *tag) {
  char tmpl[256];
  snprintf(tmpl, sizeof tmpl, "/tmp/fsh-extsort-%s-XXXXXX", tag);
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

static void remove_dir(char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(dir);
  free(dir);
}

/* rows [at, at + n) of data as a compact batch (its own buffers). */
static fsh_batch *piece(fsh_batch *data, int64_t at, int64_t n) {
  static int64_t idx[ROWS]; /* static: zeroed, so n == 0 reads nothing unset */
  for (int64_t i = 0; i < n; i++) idx[i] = at + i;
  fsh_error err;
  fsh_batch *b = NULL;
  if (fsh_take(data, idx, n, &b, &err) != 0) {
    fprintf(stderr, "take: %s\n", err.message);
    abort();
  }
  return b;
}

/* data cut into random pieces of 0..max_rows rows; returns the count. */
static int64_t cut(fsh_batch *data, uint64_t seed, int64_t max_rows, fsh_batch **out) {
  uint64_t st = seed;
  int64_t n = 0;
  for (int64_t at = 0; at < data->length;) {
    int64_t len = (int64_t)(kh_rand(&st) % (uint64_t)(max_rows + 1));
    if (len > data->length - at) len = data->length - at;
    out[n++] = piece(data, at, len);
    at += len;
  }
  return n;
}

/* Drains a stream: every batch has `target` rows but the last (target 0:
 * any size); the rows
 * concatenated into *all (NULL when none). 0 or the error code. */
static int drain(fsh_batch_stream *st, int64_t target, fsh_batch **all, fsh_error *err) {
  fsh_batch *got[ROWS + 1];
  int64_t n = 0, rows = 0;
  int rc = 0;
  bool short_seen = false;
  *all = NULL;
  for (;;) {
    fsh_batch *b = NULL;
    rc = st->get_next(st, &b, err);
    if (rc != 0 || !b) break;
    if (target > 0) {
      CHECK_MSG(!short_seen, "a batch after a short one");
      CHECK_MSG(b->length > 0 && b->length <= target, "batch of %lld rows, target %lld",
                (long long)b->length, (long long)target);
      short_seen = b->length < target;
    }
    rows += b->length;
    got[n++] = b;
  }
  if (rc == 0 && n > 0) rc = fsh_concat(got, n, all, err);
  for (int64_t i = 0; i < n; i++) fsh_batch_unref(got[i]);
  return rc;
}

typedef struct sort_case {
  int set, order;
  int64_t max_piece;
  int64_t budget_pm; /* budget in per mille of the pieces' memory; 0: none */
  int64_t target, run_rows;
  int32_t fanin;
  fsh_compression comp;
} sort_case;

/* Sorts `data` cut at random under the case's budget; checks the output
 * against fsh_sort_batch of the concatenated input and against the
 * reference; the stats in *stats; no file left in dir. */
static void run_case(fsh_batch *data, const sort_case *c, const char *dir, uint64_t seed,
                     fsh_extsort_stats *stats) {
  fsh_error err = {{0}};
  static fsh_batch *in[ROWS + 1];
  int64_t n_in = cut(data, seed, c->max_piece, in);
  /* what the sorter is charged in all: every buffer once (the pieces share
   * the dictionary of column 3) */
  fsh_mem_set ms;
  fsh_mem_set_init(&ms);
  for (int64_t i = 0; i < n_in; i++) CHECK_OK(fsh_mem_set_add(&ms, in[i], NULL, &err));
  int64_t mem = ms.bytes;
  fsh_mem_set_reset(&ms);
  fsh_spill *sp = NULL;
  const char *dirs[1] = {dir};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 1, .compression = c->comp, .tag = "sort"};
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  fsh_extsort_options o = {.key_cols = REF_KEYS[c->set], .n_keys = REF_NKEYS[c->set],
                           .order = REF_ORDERS[c->order],
                           .memory_budget = mem * c->budget_pm / 1000,
                           .target_rows = c->target, .run_rows = c->run_rows,
                           .max_fanin = c->fanin, .spill = sp};
  fsh_extsort *s = NULL;
  CHECK_OK(fsh_extsort_new(data->schema, &o, &s, &err));
  for (int64_t i = 0; s && i < n_in; i++) CHECK_OK(fsh_extsort_push(s, in[i], &err));
  fsh_batch_stream st = {0};
  CHECK_OK(fsh_extsort_finish(s, &st, &err));
  fsh_extsort_get_stats(s, stats);
  fsh_extsort_free(s); /* the stream lives on without the sorter */
  fsh_batch *got = NULL;
  if (st.release) {
    CHECK_OK(drain(&st, c->target, &got, &err));
    st.release(&st);
  }
  CHECK_EQ_INT(count_files(dir), 0);
  /* the sorter's own kernel on the whole input */
  fsh_batch *whole = NULL, *want = NULL;
  CHECK_OK(fsh_concat(in, n_in, &whole, &err));
  CHECK_OK(fsh_sort_batch(whole, REF_KEYS[c->set], REF_NKEYS[c->set], REF_ORDERS[c->order],
                          &want, &err));
  CHECK_MSG(got && want && fsh_batch_equals(want, got, &err),
            "set %d order %d budget %lld/1000: differs from fsh_sort_batch: %s", c->set,
            c->order, (long long)c->budget_pm, err.message);
  /* the independent reference: stable qsort of row numbers */
  static int64_t idx[ROWS];
  ref_sort(REF_KEYS[c->set], REF_NKEYS[c->set], REF_ORDERS[c->order], 0, ROWS, idx);
  if (got) kh_check_equals_take(data, idx, ROWS, got, "external sort vs reference");
  CHECK_EQ_INT(stats->rows, ROWS);
  fsh_batch_unref(got);
  fsh_batch_unref(whole);
  fsh_batch_unref(want);
  for (int64_t i = 0; i < n_in; i++) fsh_batch_unref(in[i]);
  fsh_spill_free(sp);
}

static int64_t data_bytes(fsh_batch *data) {
  fsh_batch *p = piece(data, 0, data->length);
  int64_t n = fsh_exec_batch_memory(p);
  fsh_batch_unref(p);
  return n;
}

static void test_against_reference(void) {
  fsh_batch *data = ref_make_data(11, 0);
  char *dir = make_dir("ref");
  static const fsh_compression comps[3] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                           FSH_COMPRESSION_ZSTD};
  int cases = 0;
  for (int set = 0; set < REF_NSETS; set++) {
    for (int order = set % 2; order < 4; order += 2) {
      uint64_t seed = (uint64_t)(set * 16 + order);
      fsh_extsort_stats stats;
      /* 0 runs: no budget, then a budget the input fits in */
      sort_case c0 = {set, order, 300, 0, 1000, 0, 0, comps[cases % 3]};
      run_case(data, &c0, dir, seed, &stats);
      CHECK_EQ_INT(stats.runs, 0);
      c0.budget_pm = 1000;
      c0.target = 7;
      run_case(data, &c0, dir, seed + 1, &stats);
      CHECK_EQ_INT(stats.runs, 0);
      /* 1 run: the first spill comes past 60% of the input */
      sort_case c1 = {set, order, 50, 600, 256, 100, 0, comps[(cases + 1) % 3]};
      run_case(data, &c1, dir, seed + 2, &stats);
      CHECK_EQ_INT(stats.runs, 1);
      CHECK_EQ_INT(stats.merge_passes, 0);
      /* many runs, fan-in 3: merge passes */
      sort_case cm = {set, order, 80, 1000 / 15, 333, 64, 3, comps[(cases + 2) % 3]};
      run_case(data, &cm, dir, seed + 3, &stats);
      CHECK_MSG(stats.runs > 10 && stats.merge_passes >= 2, "runs %lld passes %lld",
                (long long)stats.runs, (long long)stats.merge_passes);
      CHECK(stats.spilled_bytes > 0);
      cases++;
    }
  }
  printf("  %d key sets x orders, 4 budgets each\n", cases);
  remove_dir(dir);
  fsh_batch_unref(data);
}

/* Skewed keys (most rows equal): stability is most of the test. */
static void test_stability_skew(void) {
  fsh_batch *data = ref_make_data(5, 80);
  char *dir = make_dir("skew");
  fsh_extsort_stats stats;
  for (int set = 0; set < REF_NSETS; set += 4) {
    sort_case c = {set, 1, 40, 1000 / 9, 100, 30, 4, FSH_COMPRESSION_LZ4_FRAME};
    run_case(data, &c, dir, (uint64_t)set, &stats);
    CHECK(stats.runs >= 8);
  }
  remove_dir(dir);
  fsh_batch_unref(data);
}

static void test_empty_and_errors(void) {
  fsh_error err = {{0}};
  fsh_batch *data = ref_make_data(3, 0);
  int32_t key = 0;
  fsh_extsort_options o = {.key_cols = &key, .n_keys = 1, .memory_budget = 1000};
  fsh_extsort *s = NULL;
  /* no input, and only empty batches */
  CHECK_OK(fsh_extsort_new(data->schema, &o, &s, &err));
  fsh_batch *none = piece(data, 0, 0);
  CHECK_OK(fsh_extsort_push(s, none, &err));
  fsh_batch_stream st = {0};
  CHECK_OK(fsh_extsort_finish(s, &st, &err));
  fsh_batch *b = (fsh_batch *)1;
  CHECK_OK(st.get_next(&st, &b, &err));
  CHECK(b == NULL);
  CHECK(fsh_schema_equals(st.schema, data->schema, true, &err));
  st.release(&st);
  CHECK_EQ_INT(fsh_extsort_push(s, data, &err), EINVAL); /* after finish */
  fsh_extsort_free(s);
  /* over the budget with no spill area */
  CHECK_OK(fsh_extsort_new(data->schema, &o, &s, &err));
  int rc = fsh_extsort_push(s, data, &err);
  CHECK_MSG(rc == EFBIG && strstr(err.message, "budget of 1000"), "rc %d: %s", rc, err.message);
  CHECK_EQ_INT(fsh_extsort_finish(s, &st, &err), EINVAL);
  fsh_extsort_free(s);
  /* bad options, another schema */
  key = NCOLS;
  rc = fsh_extsort_new(data->schema, &o, &s, &err);
  CHECK_MSG(rc == EINVAL && s == NULL && strstr(err.message, "column 8"), "%s", err.message);
  key = 0;
  CHECK_OK(fsh_extsort_new(data->schema, &o, &s, &err));
  int32_t cols[2] = {1, 0};
  fsh_batch *other = ref_project(data, cols, 2);
  rc = fsh_extsort_push(s, other, &err);
  CHECK_MSG(rc == EINVAL && strstr(err.message, "schema"), "%s", err.message);
  fsh_extsort_free(s);
  fsh_spill *sp = NULL;
  fsh_spill_options so = {0};
  CHECK_EQ_INT(fsh_spill_new(&so, &sp, &err), EINVAL);
  fsh_batch_unref(other);
  fsh_batch_unref(none);
  fsh_batch_unref(data);
}

/* A spill file round trip; the file is gone after open, and free of an
 * unopened file deletes it. */
static void test_spill_files(void) {
  fsh_error err = {{0}};
  fsh_batch *data = ref_make_data(9, 0);
  char *d1 = make_dir("f1"), *d2 = make_dir("f2");
  const char *dirs[2] = {d1, d2};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 2, .compression = FSH_COMPRESSION_LZ4_FRAME};
  fsh_spill *sp = NULL;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  fsh_spill_file *f[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    fsh_spill_writer *w = NULL;
    CHECK_OK(fsh_spill_writer_open(sp, data->schema, &w, &err));
    fsh_batch *a = piece(data, 0, 1000), *b = piece(data, 1000, ROWS - 1000);
    CHECK_OK(fsh_spill_writer_write(w, a, &err));
    CHECK_OK(fsh_spill_writer_write(w, b, &err));
    CHECK_OK(fsh_spill_writer_finish(w, &f[i], &err));
    fsh_batch_unref(a);
    fsh_batch_unref(b);
  }
  /* round-robin: one file in each directory, named by the pattern */
  CHECK_EQ_INT(count_files(d1), 1);
  CHECK_EQ_INT(count_files(d2), 1);
  CHECK(strstr(fsh_spill_file_path(f[0]), "/fshexec-") &&
        strstr(fsh_spill_file_path(f[0]), "-exec.arrows"));
  CHECK_EQ_INT(fsh_spill_file_rows(f[0]), ROWS);
  CHECK_EQ_INT(fsh_spill_files_written(sp), 2);
  CHECK_EQ_INT(fsh_spill_bytes_written(sp),
               fsh_spill_file_bytes(f[0]) + fsh_spill_file_bytes(f[1]));
  fsh_batch_stream st = {0};
  CHECK_OK(fsh_spill_file_open(f[0], &st, &err));
  CHECK_EQ_INT(count_files(d1) + count_files(d2), 1);
  fsh_batch *got = NULL;
  CHECK_OK(drain(&st, 0, &got, &err));
  CHECK_MSG(got && fsh_batch_equals(data, got, &err), "%s", err.message);
  fsh_batch_unref(got);
  st.release(&st);
  fsh_spill_file_free(f[1]);
  CHECK_EQ_INT(count_files(d1) + count_files(d2), 0);
  fsh_spill_free(sp);
  remove_dir(d1);
  remove_dir(d2);
  fsh_batch_unref(data);
}

/* One spilling sort of data (columns 0 and 2 of the reference data): a
 * run per 20 rows, fan-in 2; 0 or the error. */
static int small_sort(fsh_batch *data, const char *const *dirs, int n_dirs, fsh_batch **got,
                      fsh_error *err) {
  *got = NULL;
  fsh_spill *sp = NULL;
  fsh_spill_options so = {.dirs = dirs, .n_dirs = n_dirs, .tag = "t"};
  int rc = fsh_spill_new(&so, &sp, err);
  if (rc != 0) return rc;
  int32_t keys[2] = {1, 0};
  fsh_extsort_options o = {.key_cols = keys, .n_keys = 2, .memory_budget = 1,
                           .target_rows = 16, .run_rows = 8, .max_fanin = 2, .spill = sp};
  fsh_extsort *s = NULL;
  rc = fsh_extsort_new(data->schema, &o, &s, err);
  for (int64_t at = 0; rc == 0 && at < data->length; at += 20) {
    fsh_batch *b = fsh_batch_slice(data, at, data->length - at < 20 ? data->length - at : 20);
    rc = b ? fsh_extsort_push(s, b, err) : ENOMEM;
    fsh_batch_unref(b);
  }
  fsh_batch_stream st = {0};
  if (rc == 0) rc = fsh_extsort_finish(s, &st, err);
  fsh_extsort_free(s);
  if (rc == 0) {
    rc = drain(&st, 16, got, err);
    st.release(&st);
  }
  fsh_spill_free(sp);
  if (rc != 0) {
    fsh_batch_unref(*got);
    *got = NULL;
  }
  return rc;
}

static void test_alloc_failure(void) {
  fsh_error err = {{0}};
  fsh_batch *all = ref_make_data(21, 0);
  int32_t cols[2] = {0, 2};
  fsh_batch *two = ref_project(all, cols, 2);
  fsh_batch *data = piece(two, 0, 60);
  fsh_batch_unref(two);
  char *dir = make_dir("oom");
  const char *dirs[1] = {dir};
  fsh_batch *want = NULL;
  CHECK_OK(small_sort(data, dirs, 1, &want, &err));
  int failures = 0;
  for (int persistent = 0; persistent < 2; persistent++) {
    for (int64_t n = 1;; n++) {
      fsh_batch *got = NULL;
      fsh_alloc_fail_after(n, persistent);
      int rc = small_sort(data, dirs, 1, &got, &err);
      fsh_alloc_fail_after(0, false);
      CHECK_EQ_INT(count_files(dir), 0);
      if (rc == 0) {
        CHECK(got && want && fsh_batch_equals(want, got, &err));
        fsh_batch_unref(got);
        break;
      }
      failures++;
      CHECK_MSG(rc == ENOMEM || rc == EIO, "allocation %lld: rc %d: %s", (long long)n, rc,
                err.message);
    }
  }
  printf("  %d failing allocations, each clean\n", failures);
  fsh_batch_unref(want);
  remove_dir(dir);
  fsh_batch_unref(data);
  fsh_batch_unref(all);
}

static void test_missing_dir(void) {
  fsh_error err = {{0}};
  fsh_batch *all = ref_make_data(22, 0);
  int32_t cols[2] = {0, 2};
  fsh_batch *two = ref_project(all, cols, 2);
  fsh_batch *data = piece(two, 0, 300);
  fsh_batch_unref(two);
  char *dir = make_dir("gone");
  char missing[300];
  snprintf(missing, sizeof missing, "%s/not-there", dir);
  const char *dirs[1] = {missing};
  fsh_batch *got = NULL;
  int rc = small_sort(data, dirs, 1, &got, &err);
  CHECK_MSG(rc == ENOENT && strstr(err.message, missing), "rc %d: %s", rc, err.message);
  CHECK(got == NULL);
  /* a second, good directory takes over */
  const char *both[2] = {missing, dir};
  CHECK_OK(small_sort(data, both, 2, &got, &err));
  CHECK(got && got->length == 300);
  CHECK_EQ_INT(count_files(dir), 0);
  fsh_batch_unref(got);
  remove_dir(dir);
  fsh_batch_unref(data);
  fsh_batch_unref(all);
}

static char *mount_tmpfs(const char *tag, const char *size) {
  if (geteuid() != 0) return NULL;
  char *dir = make_dir(tag);
  if (!fsh_test_mount_tmpfs(dir, size)) {
    rmdir(dir);
    free(dir);
    return NULL;
  }
  return dir;
}

static void unmount_tmpfs(char *dir) {
  if (!dir) return;
  fsh_test_unmount_tmpfs(dir);
  remove_dir(dir);
}

/* A 16 KiB tmpfs first: runs of ~30 KiB start there, move to the next
 * directory mid-write, and the sort is right; alone it fails with ENOSPC
 * naming it, no file left. */
static void test_disk_full(void) {
  char *full = mount_tmpfs("full", "16k");
  if (!full) {
    printf("  skipped: needs root to mount a tmpfs\n");
    return;
  }
  fsh_error err = {{0}};
  fsh_batch *all = ref_make_data(23, 0);
  int32_t cols[4] = {0, 1, 2, 5};
  fsh_batch *data = ref_project(all, cols, 4);
  fsh_batch_unref(all);
  int64_t total = data_bytes(data);
  char *ok = make_dir("ok");
  const char *dirs[2] = {full, ok};
  fsh_spill_options so = {.dirs = dirs, .n_dirs = 2, .tag = "full"};
  fsh_spill *sp = NULL;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  /* two runs of ~half the input (well over 64 KiB each) */
  int32_t key = 1;
  fsh_extsort_options o = {.key_cols = &key, .n_keys = 1, .memory_budget = total / 3,
                           .target_rows = 500, .spill = sp};
  fsh_extsort *s = NULL;
  CHECK_OK(fsh_extsort_new(data->schema, &o, &s, &err));
  fsh_batch *in[ROWS + 1];
  int64_t n_in = cut(data, 77, 200, in);
  for (int64_t i = 0; i < n_in; i++) CHECK_OK(fsh_extsort_push(s, in[i], &err));
  fsh_extsort_stats stats;
  fsh_extsort_get_stats(s, &stats);
  CHECK_MSG(stats.runs >= 2 && stats.spilled_bytes / stats.runs > 16 << 10, "%lld runs, %lld bytes",
            (long long)stats.runs, (long long)stats.spilled_bytes);
  CHECK_EQ_INT(count_files(full), 0);
  CHECK_EQ_INT(count_files(ok), stats.runs);
  fsh_batch_stream st = {0};
  CHECK_OK(fsh_extsort_finish(s, &st, &err));
  CHECK_EQ_INT(count_files(ok), 0); /* open runs are unlinked */
  fsh_extsort_free(s);
  fsh_batch *got = NULL;
  if (st.release) {
    CHECK_OK(drain(&st, 500, &got, &err));
    st.release(&st);
  }
  static int64_t idx[ROWS];
  ref_sort(&key, 1, NULL, 0, ROWS, idx);
  if (got) kh_check_equals_take(data, idx, ROWS, got, "sort past a full directory");
  fsh_batch_unref(got);
  CHECK_EQ_INT(count_files(ok), 0);
  fsh_spill_free(sp);
  /* the full directory alone */
  const char *one[1] = {full};
  so.dirs = one;
  so.n_dirs = 1;
  CHECK_OK(fsh_spill_new(&so, &sp, &err));
  o.spill = sp;
  CHECK_OK(fsh_extsort_new(data->schema, &o, &s, &err));
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < n_in; i++) rc = fsh_extsort_push(s, in[i], &err);
  CHECK_MSG(rc == ENOSPC && strstr(err.message, "ENOSPC") && strstr(err.message, full),
            "rc %d: %s", rc, err.message);
  printf("  disk full: %s\n", err.message);
  fsh_extsort_free(s);
  fsh_spill_free(sp);
  CHECK_EQ_INT(count_files(full), 0);
  for (int64_t i = 0; i < n_in; i++) fsh_batch_unref(in[i]);
  remove_dir(ok);
  unmount_tmpfs(full);
  fsh_batch_unref(data);
}

FSH_TEST_MAIN(TEST(test_against_reference), TEST(test_stability_skew),
              TEST(test_empty_and_errors), TEST(test_spill_files), TEST(test_alloc_failure),
              TEST(test_missing_dir), TEST(test_disk_full))
