/* test_partition.c -- hash, random and range partition assignment: ids in
 * range, spread, reproducibility, and range partitioning against a naive
 * comparison-based reference on random data with nulls, NaNs, descending
 * orders and dictionary keys. */
#include "kernels/kernel_helpers.h"

#include <errno.h>
#include <math.h>

static void test_hash_partitions(void) {
  fsh_error err;
  enum { N = 100000 };
  static uint64_t h[N];
  static int32_t p[N];
  uint64_t st = 9;
  for (int i = 0; i < N; i++) h[i] = kh_rand(&st);
  int32_t ns[] = {1, 2, 7, 256, 4096, INT32_MAX};
  for (int k = 0; k < 6; k++) {
    CHECK_OK(fsh_partition_hash(h, N, ns[k], p, &err));
    static int64_t count[4096];
    memset(count, 0, sizeof count);
    bool in_range = true;
    for (int i = 0; i < N; i++) {
      in_range &= p[i] >= 0 && p[i] < ns[k];
      if (ns[k] <= 4096) count[p[i]]++;
    }
    CHECK(in_range);
    for (int32_t q = 0; q < ns[k] && ns[k] <= 256; q++) /* spread: within 25% of the mean */
      CHECK_MSG(count[q] > N / ns[k] * 3 / 4 && count[q] < N / ns[k] * 5 / 4, "n %d part %d: %lld",
                ns[k], q, (long long)count[q]);
  }
  CHECK(fsh_partition_of_hash(UINT64_MAX, 10) == 9 && fsh_partition_of_hash(0, 10) == 0);
  CHECK_EQ_INT(fsh_partition_hash(h, N, 0, p, &err), EINVAL);
}

static void test_random_partitions(void) {
  fsh_error err;
  int32_t a[1000], b[1000];
  CHECK_OK(fsh_partition_random(1000, 13, 77, 500, a, &err));
  CHECK_OK(fsh_partition_random(600, 13, 77, 500, b, &err));
  CHECK_OK(fsh_partition_random(400, 13, 77, 1100, b + 600, &err));
  int64_t count[13] = {0};
  for (int i = 0; i < 1000; i++) {
    CHECK(a[i] == b[i] && a[i] >= 0 && a[i] < 13);
    count[a[i]]++;
  }
  for (int q = 0; q < 13; q++) CHECK(count[q] > 40);
  CHECK_OK(fsh_partition_random(1000, 13, 78, 500, b, &err));
  int same = 0;
  for (int i = 0; i < 1000; i++) same += a[i] == b[i];
  CHECK(same < 200);
}

/* ---- range partitioning against a reference ----------------------------- */

enum { ROWS = 2000, MAXLEN = 6 };

typedef struct refdata {
  int64_t i[ROWS];
  double d[ROWS];
  char s[ROWS][MAXLEN + 1];
  bool iv[ROWS], dv[ROWS], sv[ROWS];
} refdata;

static refdata R;

static int cmp3(double a, double b) { return a < b ? -1 : a > b ? 1 : 0; }

/* Column c (0 i64, 1 f64, 2 utf8, 3 dictionary of utf8 = column 2) of rows x, y. */
static int ref_cmp_col(int c, int x, int y, fsh_sort_key o) {
  bool vx = c == 0 ? R.iv[x] : c == 1 ? R.dv[x] : R.sv[x];
  bool vy = c == 0 ? R.iv[y] : c == 1 ? R.dv[y] : R.sv[y];
  if (!vx || !vy) {
    if (!vx && !vy) return 0;
    return !vx == o.nulls_first ? -1 : 1;
  }
  if (c == 1 && (isnan(R.d[x]) || isnan(R.d[y]))) { /* NaN beside the nulls */
    if (isnan(R.d[x]) && isnan(R.d[y])) return 0;
    return isnan(R.d[x]) == o.nulls_first ? -1 : 1;
  }
  int r;
  if (c == 0)
    r = (R.i[x] > R.i[y]) - (R.i[x] < R.i[y]);
  else if (c == 1)
    r = cmp3(R.d[x], R.d[y]);
  else
    r = strcmp(R.s[x], R.s[y]) < 0 ? -1 : strcmp(R.s[x], R.s[y]) > 0;
  return o.descending ? -r : r;
}

static const int *g_keys;
static const fsh_sort_key *g_order;
static int g_nkeys;

static int ref_cmp_rows(int x, int y) {
  for (int k = 0; k < g_nkeys; k++) {
    int r = ref_cmp_col(g_keys[k], x, y, g_order[k]);
    if (r) return r;
  }
  return 0;
}

static int qsort_cmp(const void *a, const void *b) {
  return ref_cmp_rows((int)*(const int64_t *)a, (int)*(const int64_t *)b);
}

/* The data: random values with nulls, duplicates, NaN and -0.0. */
static fsh_batch *make_data(uint64_t seed) {
  uint64_t st = seed;
  char valid_i[ROWS + 1], valid_d[ROWS + 1], valid_s[ROWS + 1];
  const char *strs[ROWS];
  int32_t didx[ROWS];
  for (int r = 0; r < ROWS; r++) {
    R.iv[r] = kh_rand(&st) % 10 != 0;
    R.dv[r] = kh_rand(&st) % 10 != 0;
    R.sv[r] = kh_rand(&st) % 10 != 0;
    R.i[r] = (int64_t)(kh_rand(&st) % 200) - 100;
    if (r % 97 == 0) R.i[r] = r % 2 ? INT64_MIN : INT64_MAX;
    uint64_t x = kh_rand(&st) % 100;
    R.d[r] = x < 5 ? NAN : x < 10 ? -0.0 : x < 15 ? 0.0 : ((double)(int64_t)(kh_rand(&st) % 100) - 50) / 4;
    int len = (int)(kh_rand(&st) % (MAXLEN + 1));
    for (int k = 0; k < len; k++) R.s[r][k] = (char)('a' + kh_rand(&st) % 3);
    R.s[r][len] = '\0';
    strs[r] = R.s[r];
    didx[r] = ROWS - 1 - r; /* dictionary = the strings reversed */
    valid_i[r] = R.iv[r] ? '1' : '0';
    valid_d[r] = R.dv[r] ? '1' : '0';
    valid_s[r] = R.sv[r] ? '1' : '0';
  }
  valid_i[ROWS] = valid_d[ROWS] = valid_s[ROWS] = '\0';
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "i", FSH_TYPE_INT64, true);
  SBH_SET(&c, sbh_fixed(valid_i, ROWS, R.i, 8));
  sbh_col(&c, "d", FSH_TYPE_FLOAT64, true);
  SBH_SET(&c, sbh_fixed(valid_d, ROWS, R.d, 8));
  sbh_col(&c, "s", FSH_TYPE_STRING, true);
  SBH_SET(&c, sbh_strings(valid_s, ROWS, strs));
  fsh_field *f = sbh_col(&c, "ds", FSH_TYPE_STRING, true);
  sbh_dict(f, 0, FSH_TYPE_INT32, false);
  const char *rev[ROWS];
  char valid_rev[ROWS + 1];
  for (int r = 0; r < ROWS; r++) rev[r] = strs[ROWS - 1 - r], valid_rev[r] = valid_s[ROWS - 1 - r];
  valid_rev[ROWS] = '\0';
  fsh_array *da = sbh_fixed(NULL, ROWS, didx, 4);
  da->dictionary = sbh_strings(valid_rev, ROWS, rev);
  SBH_SET(&c, da);
  return sbh_finish(&c, ROWS);
}

/* A batch of columns cols[0, n) of b (fields copied, arrays shared). */
static fsh_batch *project(fsh_batch *b, const int32_t *cols, int n) {
  fsh_schema *s = SBH_OK(fsh_schema_new(n));
  for (int k = 0; k < n; k++) SBH_RC(fsh_field_copy(&s->fields[k], &b->schema->fields[cols[k]]));
  fsh_batch *p = SBH_OK(fsh_batch_new(s, b->length));
  for (int k = 0; k < n; k++) p->columns[k] = fsh_array_ref(b->columns[cols[k]]);
  fsh_schema_unref(s);
  return p;
}

/* check_range's boundaries: only rows whose "i" is valid (the int64 fast
 * path of fsh_partition_range takes boundaries without nulls). */
static bool g_valid_bounds;

/* Partition with keys/order, `nb` boundaries sampled from the data and
 * sorted by the reference; compare every row with the reference count. */
static void check_range(fsh_batch *data, const int32_t *keys, const int *ref_keys, int n_keys,
                        const fsh_sort_key *order, int nb, const int32_t *bound_cols,
                        uint64_t seed) {
  fsh_error err;
  g_keys = ref_keys;
  g_order = order;
  g_nkeys = n_keys;
  uint64_t st = seed;
  int64_t sample[512];
  for (int k = 0; k < nb; k++) {
    sample[k] = (int64_t)(kh_rand(&st) % ROWS);
    if (g_valid_bounds && !R.iv[sample[k]]) k--; /* boundaries of valid "i" values only */
  }
  qsort(sample, (size_t)nb, sizeof sample[0], qsort_cmp);
  fsh_batch *proj = project(data, bound_cols, n_keys), *bounds = NULL;
  CHECK_OK(fsh_take(proj, sample, nb, &bounds, &err));
  static int32_t out[ROWS];
  CHECK_OK(fsh_partition_range(data, keys, n_keys, bounds, order, out, &err));
  int bad = 0;
  for (int r = 0; r < ROWS && bad < 5; r++) {
    int want = 0;
    while (want < nb && ref_cmp_rows((int)sample[want], r) < 0) want++;
    if (out[r] != want) bad++;
    CHECK_MSG(out[r] == want, "row %d: partition %d, reference %d", r, out[r], want);
  }
  fsh_batch_unref(bounds);
  fsh_batch_unref(proj);
}

/* The single plain int64 key (fsh_partition_range's direct path): rows
 * with nulls, INT64_MIN / MAX and duplicates; boundaries without nulls,
 * few (counted) and many (binary search), every order; and the same key
 * with boundaries holding nulls (the general path) -- all against the
 * reference. */
static void test_range_int64_key(void) {
  fsh_batch *data = make_data(43);
  fsh_sort_key orders[4] = {{false, false}, {true, false}, {false, true}, {true, true}};
  int32_t k1[] = {0};
  int r1[] = {0};
  const int counts[] = {1, 2, 7, 64, 65, 200, 511};
  for (int o = 0; o < 4; o++)
    for (int c = 0; c < 7; c++) {
      g_valid_bounds = true;
      check_range(data, k1, r1, 1, &orders[o], counts[c], k1, 100 + (uint64_t)(o * 7 + c));
      g_valid_bounds = false;
      check_range(data, k1, r1, 1, &orders[o], counts[c], k1, 200 + (uint64_t)(o * 7 + c));
    }
  fsh_batch_unref(data);
}

static void test_range_against_reference(void) {
  fsh_batch *data = make_data(42);
  fsh_sort_key orders[4][3] = {{{false, false}, {false, false}, {false, false}},
                               {{true, false}, {false, true}, {true, true}},
                               {{false, true}, {true, false}, {false, false}},
                               {{true, true}, {true, true}, {true, false}}};
  for (int o = 0; o < 4; o++) {
    int32_t k1[] = {0}, k2[] = {1}, k3[] = {2}, k4[] = {2, 0, 1}, k5[] = {1, 2};
    int r1[] = {0}, r2[] = {1}, r3[] = {2}, r4[] = {2, 0, 1}, r5[] = {1, 2};
    check_range(data, k1, r1, 1, orders[o], 15, k1, o + 1);
    check_range(data, k2, r2, 1, orders[o], 40, k2, o + 2);
    check_range(data, k3, r3, 1, orders[o], 100, k3, o + 3);
    check_range(data, k4, r4, 3, orders[o], 255, k4, o + 4);
    check_range(data, k5, r5, 2, orders[o], 1, k5, o + 5);
    check_range(data, k5, r5, 2, orders[o], 0, k5, o + 6);
    /* Dictionary key column, boundaries plain or dictionary-encoded. */
    int32_t kd[] = {3}, kd2[] = {3, 0};
    int rd[] = {2}, rd2[] = {2, 0};
    int32_t plain[] = {2}, plain2[] = {2, 0};
    check_range(data, kd, rd, 1, orders[o], 50, plain, o + 7);
    check_range(data, kd, rd, 1, orders[o], 50, kd, o + 8);
    check_range(data, plain, rd, 1, orders[o], 50, kd, o + 9);
    check_range(data, kd2, rd2, 2, orders[o], 77, plain2, o + 10);
  }
  fsh_batch_unref(data);
}

/* fsh_row_keys directly: every pair of rows of a sliced batch (so offsets
 * count) against the reference comparison, and any_null. */
static void test_row_keys_against_reference(void) {
  fsh_error err;
  fsh_batch *data = make_data(7);
  const int64_t off = 3, n = 120;
  fsh_batch *sl = SBH_OK(fsh_batch_slice(data, off, n));
  fsh_sort_key order[3] = {{true, false}, {false, true}, {false, false}};
  int32_t keys[] = {3, 0, 1}; /* dictionary utf8, int64, float64 */
  int ref_keys[] = {2, 0, 1};
  g_keys = ref_keys;
  g_order = order;
  g_nkeys = 3;
  fsh_row_keys *k = NULL;
  CHECK_OK(fsh_row_keys_new(sl, keys, 3, order, &k, &err));
  CHECK_EQ_INT(fsh_row_keys_count(k), 3);
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; i++) {
    for (int64_t j = 0; j < n && bad < 5; j++) {
      int got = fsh_row_keys_compare(k, i, k, j);
      int want = ref_cmp_rows((int)(i + off), (int)(j + off));
      got = (got > 0) - (got < 0);
      if (got != want) bad++;
      CHECK_MSG(got == want, "rows %lld, %lld: %d, reference %d", (long long)i, (long long)j, got,
                want);
    }
    bool null = !R.sv[i + off] || !R.iv[i + off] || !R.dv[i + off];
    CHECK_EQ_INT(fsh_row_keys_any_null(k, i), null);
  }
  fsh_row_keys *other = NULL;
  int32_t mismatched[] = {2, 1, 0}; /* utf8, float64, int64: key 1 differs */
  CHECK_OK(fsh_row_keys_new(data, mismatched, 3, NULL, &other, &err));
  CHECK_EQ_INT(fsh_row_keys_check_compatible(k, other, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "key 1") != NULL, "%s", err.message);
  fsh_row_keys_free(other);
  int32_t bad_col = 9;
  CHECK_EQ_INT(fsh_row_keys_new(data, &bad_col, 1, NULL, &other, &err), EINVAL);
  CHECK(other == NULL);
  fsh_row_keys_free(k);
  fsh_batch_unref(sl);
  fsh_batch_unref(data);
}

static void test_range_types_and_errors(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  int32_t out[7];
  /* Every orderable column of the sample, against its own sorted rows. */
  int n_ok = 0;
  for (int32_t c = 0; c < b->n_columns; c++) {
    fsh_batch *proj = project(b, &c, 1), *bounds = NULL;
    int64_t all[] = {0, 1, 2, 3, 4, 5, 6};
    CHECK_OK(fsh_take(proj, all, 7, &bounds, &err));
    int rc = fsh_partition_range(b, &c, 1, bounds, NULL, out, &err);
    if (rc == ENOTSUP) {
      fsh_batch_unref(bounds);
      fsh_batch_unref(proj);
      continue;
    }
    /* Unsorted boundaries (the sample rows are not sorted) or success. */
    CHECK_MSG(rc == 0 || (rc == EINVAL && strstr(err.message, "out of order")), "%s: %s",
              b->schema->fields[c].name, err.message);
    n_ok++;
    fsh_batch_unref(bounds);
    fsh_batch_unref(proj);
  }
  CHECK_MSG(n_ok >= 33, "only %d orderable columns", n_ok);
  int32_t list_col = 0;
  while (b->schema->fields[list_col].type != FSH_TYPE_LIST) list_col++;
  fsh_batch *proj = project(b, &list_col, 1);
  CHECK_EQ_INT(fsh_partition_range(b, &list_col, 1, proj, NULL, out, &err), ENOTSUP);
  CHECK(strstr(err.message, "list_i32") != NULL);
  fsh_batch_unref(proj);
  int32_t i32_col = 4, i64_col = 5;
  proj = project(b, &i32_col, 1);
  CHECK_EQ_INT(fsh_partition_range(b, &i64_col, 1, proj, NULL, out, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "'i64'") && strstr(err.message, "type"), "%s", err.message);
  fsh_batch_unref(proj);
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_hash_partitions), TEST(test_random_partitions),
              TEST(test_range_against_reference), TEST(test_range_int64_key),
              TEST(test_range_types_and_errors),
              TEST(test_row_keys_against_reference))
