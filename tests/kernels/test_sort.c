/* test_sort.c -- fsh_sort_indices / fsh_sort_batch and top-N against a
 * reference stable sort (qsort on a comparator written from the documented
 * order, row number last) on random data with nulls, NaN, -0.0,
 * duplicates, extremes, dictionary keys, slices and every direction /
 * null placement; every orderable column of the every-type sample;
 * errors and allocation failure. */
#include "kernels/sort_ref.h"

/* Sort indices of b (= rows [off, off + n) of the data) equal the
 * reference. */
static void check_sort(fsh_batch *b, int64_t off, int s, int o) {
  fsh_error err;
  int64_t n = b->length;
  static int64_t got[ROWS], want[ROWS];
  const int32_t *keys = REF_KEYS[s];
  int nk = REF_NKEYS[s];
  const fsh_sort_key *order = REF_ORDERS[o];
  ref_sort(keys, nk, order, off, n, want);
  for (int64_t i = 0; i < n; i++) got[i] = -1;
  CHECK_OK(fsh_sort_indices(b, keys, nk, order, got, &err));
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (got[i] != want[i]) bad = i;
  CHECK_MSG(bad < 0, "keys set %d order %d off %lld: position %lld: row %lld, reference %lld", s, o,
            (long long)off, (long long)bad, (long long)(bad >= 0 ? got[bad] : 0),
            (long long)(bad >= 0 ? want[bad] : 0));
}

static void test_sort_against_reference(void) {
  for (int seed = 1; seed <= 2; seed++) {
    fsh_batch *data = ref_make_data((uint64_t)seed, 0);
    fsh_batch *sl = SBH_OK(fsh_batch_slice(data, 17, ROWS - 40));
    for (int s = 0; s < REF_NSETS; s++)
      for (int o = 0; o < 4; o++) {
        check_sort(data, 0, s, o);
        check_sort(sl, 17, s, o);
      }
    fsh_batch_unref(sl);
    fsh_batch_unref(data);
  }
}

static void test_sort_skewed_and_small(void) {
  fsh_batch *data = ref_make_data(5, 90); /* 90% of rows hold one key */
  for (int s = 0; s < REF_NSETS; s++)
    for (int o = 0; o < 4; o++) check_sort(data, 0, s, o);
  for (int64_t len = 0; len <= 3; len++) { /* empty, one, two, three rows */
    fsh_batch *sl = SBH_OK(fsh_batch_slice(data, 100, len));
    for (int s = 0; s < REF_NSETS; s++) check_sort(sl, 100, s, 1);
    fsh_batch_unref(sl);
  }
  fsh_batch_unref(data);
}

/* fsh_sort_batch equals take of the reference order. */
static void test_sort_batch(void) {
  fsh_error err;
  fsh_batch *data = ref_make_data(3, 0);
  fsh_batch *sl = SBH_OK(fsh_batch_slice(data, 5, 1000));
  static int64_t want[ROWS];
  for (int s = 0; s < REF_NSETS; s += 3) {
    ref_sort(REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[s % 4], 5, 1000, want);
    fsh_batch *got = NULL;
    CHECK_OK(fsh_sort_batch(sl, REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[s % 4], &got, &err));
    kh_check_equals_take(sl, want, 1000, got, "sort_batch");
    fsh_batch_unref(got);
  }
  fsh_batch_unref(sl);
  fsh_batch_unref(data);
}

static void test_top_n_against_reference(void) {
  fsh_error err;
  static int64_t want[ROWS], got[ROWS + 10];
  int64_t ns[] = {0, 1, 2, 7, 100, ROWS - 1, ROWS, ROWS + 5};
  for (int which = 0; which < 2; which++) {
    fsh_batch *data = ref_make_data(9 + (uint64_t)which, which ? 80 : 0);
    fsh_batch *sl = SBH_OK(fsh_batch_slice(data, 3, ROWS - 3));
    for (int s = 0; s < REF_NSETS; s++) {
      int o = (s + which) % 4;
      ref_sort(REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[o], 3, ROWS - 3, want);
      for (int k = 0; k < 8; k++) {
        int64_t n_out = -1;
        CHECK_OK(fsh_top_n_indices(sl, REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[o], ns[k], got, &n_out,
                                   &err));
        int64_t m = ns[k] < ROWS - 3 ? ns[k] : ROWS - 3;
        CHECK_EQ_INT(n_out, m);
        bool same = n_out == m && (m == 0 || memcmp(got, want, (size_t)m * sizeof *got) == 0);
        CHECK_MSG(same, "keys %d order %d n %lld", s, o, (long long)ns[k]);
      }
    }
    fsh_batch *top = NULL;
    CHECK_OK(fsh_top_n(sl, REF_KEYS[2], 1, NULL, 50, &top, &err));
    ref_sort(REF_KEYS[2], 1, NULL, 3, ROWS - 3, want);
    kh_check_equals_take(sl, want, 50, top, "top_n");
    fsh_batch_unref(top);
    fsh_batch_unref(sl);
    fsh_batch_unref(data);
  }
}

/* Every orderable column of the every-type sample (repeated, sliced):
 * the sort is a permutation, non-decreasing under fsh_row_keys_compare
 * (itself tested against a reference in test_partition.c) and stable;
 * top-N is its prefix; sort_batch its take. */
static void test_all_types(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(9, 4);
  int64_t n = b->length;
  int64_t *idx = malloc((size_t)n * sizeof *idx), *top = malloc((size_t)n * sizeof *top);
  char *seen = malloc((size_t)n);
  int n_ok = 0;
  for (int32_t c = 0; c < b->n_columns; c++) {
    for (int o = 0; o < 4; o++) {
      fsh_sort_key order = REF_ORDERS[o][1];
      int rc = fsh_sort_indices(b, &c, 1, &order, idx, &err);
      if (rc == ENOTSUP) {
        CHECK_MSG(strstr(err.message, b->schema->fields[c].name) != NULL, "%s", err.message);
        break;
      }
      CHECK_OK(rc);
      if (o == 0) n_ok++;
      fsh_row_keys *rk = NULL;
      CHECK_OK(fsh_row_keys_new(b, &c, 1, &order, &rk, &err));
      memset(seen, 0, (size_t)n);
      bool perm = true, sorted = true;
      for (int64_t i = 0; i < n; i++) {
        perm &= idx[i] >= 0 && idx[i] < n && !seen[idx[i]];
        if (idx[i] >= 0 && idx[i] < n) seen[idx[i]] = 1;
        if (i > 0 && perm) {
          int cmp = fsh_row_keys_compare(rk, idx[i - 1], rk, idx[i]);
          sorted &= cmp < 0 || (cmp == 0 && idx[i - 1] < idx[i]);
        }
      }
      CHECK_MSG(perm && sorted, "column %s order %d: permutation %d sorted %d",
                b->schema->fields[c].name, o, perm, sorted);
      int64_t m = 0;
      CHECK_OK(fsh_top_n_indices(b, &c, 1, &order, 13, top, &m, &err));
      CHECK_MSG(m == 13 && memcmp(top, idx, 13 * sizeof *top) == 0, "top-n of column %s",
                b->schema->fields[c].name);
      if (o == 3) {
        fsh_batch *sorted_b = NULL;
        CHECK_OK(fsh_sort_batch(b, &c, 1, &order, &sorted_b, &err));
        kh_check_equals_take(b, idx, n, sorted_b, b->schema->fields[c].name);
        fsh_batch_unref(sorted_b);
      }
      fsh_row_keys_free(rk);
    }
  }
  CHECK_MSG(n_ok >= 33, "only %d orderable columns", n_ok);
  free(idx);
  free(top);
  free(seen);
  fsh_batch_unref(b);
}

/* Large inputs (100K rows) take the radix sort's MSD pass (from 32768
 * rows): int64 keys of 64, 20, 10 and 1 varying bits with nulls, alone
 * (the radix path) and followed by a second key (radix on the first, then
 * comparisons), against qsort on (value, value 2, row). */
static const int64_t *g_big, *g_big2;
static const uint8_t *g_big_valid;
static bool g_big_desc;

static int big_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  bool vx = g_big_valid[x], vy = g_big_valid[y];
  int c;
  if (!vx || !vy)
    c = vx == vy ? 0 : vx ? -1 : 1; /* nulls last */
  else {
    c = (g_big[x] > g_big[y]) - (g_big[x] < g_big[y]);
    if (g_big_desc) c = -c;
  }
  if (c == 0 && g_big2) c = (g_big2[x] > g_big2[y]) - (g_big2[x] < g_big2[y]);
  return c ? c : (x > y) - (x < y);
}

static void test_sort_large(void) {
  fsh_error err;
  enum { BIG = 100000 };
  int64_t *vals = malloc(BIG * sizeof *vals), *got = malloc(BIG * sizeof *got);
  int64_t *want = malloc(BIG * sizeof *want), *vals2 = malloc(BIG * sizeof *vals2);
  uint8_t *valid = malloc(BIG);
  char *vpat = malloc(BIG + 1);
  int bits[] = {64, 20, 10, 1};
  uint64_t st = 99;
  for (int t = 0; t < 4; t++)
    for (int desc = 0; desc < 4; desc++) {
      bool two = desc >= 2;
      for (int i = 0; i < BIG; i++) {
        uint64_t r = kh_rand(&st);
        vals[i] = bits[t] == 64 ? (int64_t)r
                                : (int64_t)(r >> (64 - bits[t])) - (1 << (bits[t] - 1));
        vals2[i] = (int64_t)(kh_rand(&st) % 7);
        valid[i] = kh_rand(&st) % 50 != 0;
        vpat[i] = valid[i] ? '1' : '0';
      }
      vpat[BIG] = '\0';
      sbh_cols c;
      c.n = 0;
      sbh_col(&c, "k", FSH_TYPE_INT64, true);
      SBH_SET(&c, sbh_fixed(vpat, BIG, vals, 8));
      sbh_col(&c, "k2", FSH_TYPE_INT64, false);
      SBH_SET(&c, sbh_fixed(NULL, BIG, vals2, 8));
      fsh_batch *b = sbh_finish(&c, BIG);
      g_big = vals, g_big2 = two ? vals2 : NULL, g_big_valid = valid, g_big_desc = desc % 2;
      for (int i = 0; i < BIG; i++) want[i] = i;
      qsort(want, BIG, sizeof *want, big_cmp);
      int32_t keys[] = {0, 1};
      fsh_sort_key order[] = {{desc % 2 != 0, false}, {false, false}};
      CHECK_OK(fsh_sort_indices(b, keys, two ? 2 : 1, order, got, &err));
      CHECK_MSG(memcmp(got, want, BIG * sizeof *got) == 0,
                "%d varying bits, descending %d, keys %d", bits[t], desc % 2, two ? 2 : 1);
      fsh_batch_unref(b);
    }
  free(vals);
  free(vals2);
  free(got);
  free(want);
  free(valid);
  free(vpat);
}

static void test_all_equal(void) {
  fsh_error err;
  int64_t vals[500], idx[500], top[10];
  for (int i = 0; i < 500; i++) vals[i] = 42;
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "k", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, 500, vals, 8));
  fsh_batch *b = sbh_finish(&c, 500);
  int32_t k = 0;
  for (int o = 0; o < 4; o++) {
    CHECK_OK(fsh_sort_indices(b, &k, 1, REF_ORDERS[o], idx, &err));
    bool ident = true;
    for (int i = 0; i < 500; i++) ident &= idx[i] == i;
    CHECK(ident);
    int64_t m = 0;
    CHECK_OK(fsh_top_n_indices(b, &k, 1, REF_ORDERS[o], 10, top, &m, &err));
    for (int i = 0; i < 10; i++) CHECK(top[i] == i);
  }
  fsh_batch_unref(b);
}

static void test_errors(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  int64_t idx[7], m;
  int32_t bad = 99, list_col = 0;
  fsh_batch *out = NULL;
  while (b->schema->fields[list_col].type != FSH_TYPE_LIST) list_col++;
  CHECK_EQ_INT(fsh_sort_indices(b, &bad, 1, NULL, idx, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "column 99") != NULL, "%s", err.message);
  CHECK_EQ_INT(fsh_sort_indices(b, &list_col, 1, NULL, idx, &err), ENOTSUP);
  CHECK_MSG(strstr(err.message, "list_i32") != NULL, "%s", err.message);
  CHECK_EQ_INT(fsh_sort_batch(b, &list_col, 1, NULL, &out, &err), ENOTSUP);
  CHECK(out == NULL);
  CHECK_EQ_INT(fsh_top_n(b, &list_col, 1, NULL, 3, &out, &err), ENOTSUP);
  CHECK(out == NULL);
  int32_t k = 5;
  CHECK_EQ_INT(fsh_top_n_indices(b, &k, 1, NULL, -1, idx, &m, &err), EINVAL);
  CHECK_EQ_INT(fsh_sort_indices(b, &k, 0, NULL, idx, &err), EINVAL);
  fsh_batch_unref(b);
}

/* Every allocation of sort_batch and top_n failing in turn: ENOMEM, no
 * output, no leak (ASan), then success. */
static void test_alloc_failure(void) {
  fsh_error err;
  fsh_batch *data = ref_make_data(4, 0);
  fsh_batch *sl = SBH_OK(fsh_batch_slice(data, 2, 300));
  for (int which = 0; which < 3; which++) {
    int32_t keys[] = {2, 0};
    int nk = which == 1 ? 2 : 1; /* utf8; utf8 + i64 (top-n); i64 (radix) */
    int32_t *kp = which == 2 ? &keys[1] : keys;
    int done = 0;
    for (int64_t n = 1; n < 500 && !done; n++) {
      fsh_batch *out = NULL;
      fsh_alloc_fail_after(n, which == 1);
      int rc = which == 1 ? fsh_top_n(sl, kp, nk, NULL, 20, &out, &err)
                          : fsh_sort_batch(sl, kp, nk, NULL, &out, &err);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        done = 1;
        CHECK(out != NULL);
      } else {
        CHECK_MSG(rc == ENOMEM && out == NULL, "fail at %lld: rc %d", (long long)n, rc);
      }
      fsh_batch_unref(out);
    }
    CHECK(done);
  }
  fsh_batch_unref(sl);
  fsh_batch_unref(data);
}

FSH_TEST_MAIN(TEST(test_sort_against_reference), TEST(test_sort_skewed_and_small),
              TEST(test_sort_batch), TEST(test_top_n_against_reference), TEST(test_all_types),
              TEST(test_sort_large), TEST(test_all_equal), TEST(test_errors),
              TEST(test_alloc_failure))
