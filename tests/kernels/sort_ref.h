/* sort_ref.h -- what the sorting tests share: random key data with nulls,
 * duplicates, NaN, -0.0, extremes and a dictionary column, a reference row
 * comparison written from the documented order (not from row_keys.c), and
 * the reference stable sort (qsort with the row number as last key).
 * Header-only; one data set per test program. */
#ifndef FSH_TESTS_SORT_REF_H
#define FSH_TESTS_SORT_REF_H

#include "kernels/kernel_helpers.h"

#include <errno.h>
#include <math.h>

enum { ROWS = 3000, MAXLEN = 10 };

/* Columns: 0 i64 (small range, extremes), 1 f64, 2 utf8, 3 dictionary<int32,
 * utf8> whose values equal column 2, 4 i32 in [0, 4), 5 u64 full range,
 * 6 f32, 7 bool. */
enum { NCOLS = 8 };

typedef struct refdata {
  int64_t i[ROWS];
  double d[ROWS];
  char s[ROWS][MAXLEN + 1];
  int32_t small[ROWS];
  uint64_t u[ROWS];
  float f[ROWS];
  uint8_t bo[ROWS];
  bool valid[NCOLS][ROWS];
} refdata;

static refdata R;

static inline int ref_cmp3d(double a, double b) { return a < b ? -1 : a > b ? 1 : 0; }

static inline int ref_cmp_col(int c, int x, int y, fsh_sort_key o) {
  bool vx = R.valid[c][x], vy = R.valid[c][y];
  if (!vx || !vy) {
    if (!vx && !vy) return 0;
    return !vx == o.nulls_first ? -1 : 1;
  }
  /* NaN: beside the nulls (between them and the numbers) in either direction */
  bool nx = (c == 1 && isnan(R.d[x])) || (c == 6 && isnan(R.f[x]));
  bool ny = (c == 1 && isnan(R.d[y])) || (c == 6 && isnan(R.f[y]));
  if (nx || ny) {
    if (nx && ny) return 0;
    return nx == o.nulls_first ? -1 : 1;
  }
  int r = 0;
  switch (c) {
    case 0: r = (R.i[x] > R.i[y]) - (R.i[x] < R.i[y]); break;
    case 1: r = ref_cmp3d(R.d[x], R.d[y]); break;
    case 2: case 3: {
      int s = strcmp(R.s[x], R.s[y]);
      r = (s > 0) - (s < 0);
      break;
    }
    case 4: r = (R.small[x] > R.small[y]) - (R.small[x] < R.small[y]); break;
    case 5: r = (R.u[x] > R.u[y]) - (R.u[x] < R.u[y]); break;
    case 6: r = ref_cmp3d(R.f[x], R.f[y]); break;
    case 7: r = (R.bo[x] > R.bo[y]) - (R.bo[x] < R.bo[y]); break;
  }
  return o.descending ? -r : r;
}

static const int32_t *g_keys;
static const fsh_sort_key *g_order;
static int g_nkeys;

static inline int ref_cmp_rows(int x, int y) {
  for (int k = 0; k < g_nkeys; k++) {
    int r = ref_cmp_col(g_keys[k], x, y, g_order ? g_order[k] : (fsh_sort_key){false, false});
    if (r) return r;
  }
  return 0;
}

/* Stable: equal keys by row number. */
static inline int ref_qsort_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  int r = ref_cmp_rows((int)x, (int)y);
  return r ? r : (x > y) - (x < y);
}

/* The reference sort of rows [off, off + n) into out, as row numbers
 * relative to off. */
static inline void ref_sort(const int32_t *keys, int n_keys, const fsh_sort_key *order, int64_t off,
                     int64_t n, int64_t *out) {
  g_keys = keys;
  g_order = order;
  g_nkeys = n_keys;
  for (int64_t i = 0; i < n; i++) out[i] = off + i;
  qsort(out, (size_t)n, sizeof *out, ref_qsort_cmp);
  for (int64_t i = 0; i < n; i++) out[i] -= off;
}

/* The data; skew > 0: that percentage of rows gets key 7 / 1.5 / "abc". */
static inline fsh_batch *ref_make_data(uint64_t seed, int skew) {
  uint64_t st = seed;
  char valid[NCOLS][ROWS + 1];
  static const char *strs[ROWS];
  static int32_t didx[ROWS];
  for (int r = 0; r < ROWS; r++) {
    for (int c = 0; c < NCOLS; c++) {
      R.valid[c][r] = kh_rand(&st) % 10 != 0;
      valid[c][r] = R.valid[c][r] ? '1' : '0';
    }
    R.i[r] = (int64_t)(kh_rand(&st) % 200) - 100;
    if (r % 97 == 0) R.i[r] = r % 2 ? INT64_MIN : INT64_MAX;
    uint64_t x = kh_rand(&st) % 100;
    R.d[r] = x < 5    ? NAN
             : x < 8  ? -NAN
             : x < 10 ? -0.0
             : x < 15 ? 0.0
             : x < 17 ? (x % 2 ? INFINITY : -INFINITY)
                      : ((double)(int64_t)(kh_rand(&st) % 100) - 50) / 4;
    int len = (int)(kh_rand(&st) % (MAXLEN + 1));
    for (int k = 0; k < len; k++) R.s[r][k] = (char)('a' + kh_rand(&st) % 3);
    R.s[r][len] = '\0';
    R.small[r] = (int32_t)(kh_rand(&st) % 4);
    R.u[r] = kh_rand(&st);
    if (r % 50 == 0) R.u[r] = r % 100 ? 0 : UINT64_MAX;
    x = kh_rand(&st) % 20;
    R.f[r] = x == 0 ? NAN : x == 1 ? -0.0f : (float)((int)(kh_rand(&st) % 1000) - 500) / 8;
    R.bo[r] = (uint8_t)(kh_rand(&st) % 2);
    if (skew > 0 && (int)(kh_rand(&st) % 100) < skew) {
      R.i[r] = 7, R.d[r] = 1.5, R.small[r] = 2, R.u[r] = 7, R.f[r] = 1.5f;
      strcpy(R.s[r], "abc");
      for (int c = 0; c < NCOLS; c++) R.valid[c][r] = true, valid[c][r] = '1';
    }
    strs[r] = R.s[r];
    didx[r] = ROWS - 1 - r; /* dictionary = the strings reversed */
  }
  for (int c = 0; c < NCOLS; c++) valid[c][ROWS] = '\0';
  for (int r = 0; r < ROWS; r++) R.valid[3][r] = R.valid[2][r], valid[3][r] = valid[2][r];
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "i", FSH_TYPE_INT64, true);
  SBH_SET(&c, sbh_fixed(valid[0], ROWS, R.i, 8));
  sbh_col(&c, "d", FSH_TYPE_FLOAT64, true);
  SBH_SET(&c, sbh_fixed(valid[1], ROWS, R.d, 8));
  sbh_col(&c, "s", FSH_TYPE_STRING, true);
  SBH_SET(&c, sbh_strings(valid[2], ROWS, strs));
  fsh_field *f = sbh_col(&c, "ds", FSH_TYPE_STRING, true);
  sbh_dict(f, 0, FSH_TYPE_INT32, false);
  static const char *rev[ROWS];
  char valid_rev[ROWS + 1];
  for (int r = 0; r < ROWS; r++) rev[r] = strs[ROWS - 1 - r], valid_rev[r] = valid[2][ROWS - 1 - r];
  valid_rev[ROWS] = '\0';
  fsh_array *da = sbh_fixed(NULL, ROWS, didx, 4);
  da->dictionary = sbh_strings(valid_rev, ROWS, rev);
  SBH_SET(&c, da);
  sbh_col(&c, "small", FSH_TYPE_INT32, true);
  SBH_SET(&c, sbh_fixed(valid[4], ROWS, R.small, 4));
  sbh_col(&c, "u", FSH_TYPE_UINT64, true);
  SBH_SET(&c, sbh_fixed(valid[5], ROWS, R.u, 8));
  sbh_col(&c, "f", FSH_TYPE_FLOAT32, true);
  SBH_SET(&c, sbh_fixed(valid[6], ROWS, R.f, 4));
  sbh_col(&c, "b", FSH_TYPE_BOOL, true);
  {
    char bits[ROWS + 1];
    for (int r = 0; r < ROWS; r++) bits[r] = R.bo[r] ? '1' : '0';
    bits[ROWS] = '\0';
    SBH_SET(&c, sbh_bool(valid[7], bits));
  }
  return sbh_finish(&c, ROWS);
}

/* A batch of columns cols[0, n) of b (fields copied, arrays shared). */
static inline fsh_batch *ref_project(fsh_batch *b, const int32_t *cols, int n) {
  fsh_schema *s = SBH_OK(fsh_schema_new(n));
  for (int k = 0; k < n; k++) SBH_RC(fsh_field_copy(&s->fields[k], &b->schema->fields[cols[k]]));
  fsh_batch *p = SBH_OK(fsh_batch_new(s, b->length));
  for (int k = 0; k < n; k++) p->columns[k] = fsh_array_ref(b->columns[cols[k]]);
  fsh_schema_unref(s);
  return p;
}

/* The key sets and orders every test runs through. */
static const int32_t REF_KEYS[][3] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7},
                                      {2, 0, 1}, {4, 1, 0}, {3, 0}, {7, 4, 5}, {1, 2}};
static const int REF_NKEYS[] = {1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 2, 3, 2};
enum { REF_NSETS = 13 };
static const fsh_sort_key REF_ORDERS[4][3] = {{{false, false}, {false, false}, {false, false}},
                                              {{true, false}, {false, true}, {true, true}},
                                              {{false, true}, {true, false}, {false, false}},
                                              {{true, true}, {true, true}, {true, false}}};

#endif
