/* test_agg.c -- the hash aggregate against a naive per-row grouping of the
 * raw values: random batches with nulls, skewed, utf8 and dictionary keys
 * (dictionaries differing per batch), multi-column and no keys, empty
 * inputs, one key for all rows; the two-phase aggregate against the same
 * reference; errors; allocation failures. */
#include "exec/test_agg_data.h"

#include <errno.h>

/* The aggregates every run computes. */
static const fsh_agg_spec SPECS[] = {
    {FSH_AGG_COUNT_STAR, -1, NULL},     {FSH_AGG_COUNT, TD_VI, NULL},
    {FSH_AGG_SUM, TD_VI, NULL},         {FSH_AGG_SUM, TD_VF, "total_vf"},
    {FSH_AGG_AVG, TD_VI, NULL},         {FSH_AGG_MIN, TD_VI, NULL},
    {FSH_AGG_MAX, TD_VI, NULL},         {FSH_AGG_MIN, TD_VF, NULL},
    {FSH_AGG_MAX, TD_VF, NULL},         {FSH_AGG_MIN, TD_VS, NULL},
    {FSH_AGG_MAX, TD_VS, NULL},         {FSH_AGG_COUNT_DISTINCT, TD_VS, NULL},
    {FSH_AGG_SUM, TD_VU, NULL},         {FSH_AGG_COUNT_DISTINCT, TD_K3, NULL},
    {FSH_AGG_COUNT, TD_K3, NULL},       {FSH_AGG_MIN, TD_K3, NULL},
    {FSH_AGG_MAX, TD_K3, NULL},
};
#define N_SPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

/* A naive group: its key values and its aggregates. */
typedef struct ngroup {
  td_row key;
  int64_t rows, n_vi, sum_vi, n_vf, n_vs, n_vu, n_k3;
  double sum_vf, min_vf, max_vf;
  int32_t min_vi, max_vi;
  char min_vs[16], max_vs[16];
  bool seen_vs[40], seen_k3[4];
  const char *min_k3, *max_k3; /* dictionary values, bytewise */
  uint64_t sum_vu;
  bool found;
} ngroup;

static bool same_keys(const td_row *a, const td_row *b, const int *keys, int n_keys) {
  for (int k = 0; k < n_keys; k++) {
    switch (keys[k]) {
      case TD_K1:
        if (a->k1_null != b->k1_null || (!a->k1_null && a->k1 != b->k1)) return false;
        break;
      case TD_K2: if (a->k2 != b->k2) return false; break;
      case TD_K3: if (a->k3 != b->k3) return false; break;
    }
  }
  return true;
}

/* Adds row r to the naive groups (g, *ng of capacity cap). */
static void naive_add(ngroup *g, int64_t *ng, const td_row *r, const int *keys, int n_keys) {
  int64_t i = 0;
  while (i < *ng && !same_keys(&g[i].key, r, keys, n_keys)) i++;
  ngroup *x = &g[i];
  if (i == *ng) {
    memset(x, 0, sizeof *x);
    x->key = *r;
    (*ng)++;
  }
  x->rows++;
  if (!r->vi_null) {
    if (x->n_vi == 0 || r->vi < x->min_vi) x->min_vi = r->vi;
    if (x->n_vi == 0 || r->vi > x->max_vi) x->max_vi = r->vi;
    x->n_vi++;
    x->sum_vi += r->vi;
  }
  if (!r->vf_null) {
    if (x->n_vf == 0 || r->vf < x->min_vf) x->min_vf = r->vf;
    if (x->n_vf == 0 || r->vf > x->max_vf) x->max_vf = r->vf;
    x->n_vf++;
    x->sum_vf += r->vf;
  }
  if (r->vs >= 0) {
    char s[16];
    snprintf(s, sizeof s, "x%d", r->vs);
    if (x->n_vs == 0 || strcmp(s, x->min_vs) < 0) strcpy(x->min_vs, s);
    if (x->n_vs == 0 || strcmp(s, x->max_vs) > 0) strcpy(x->max_vs, s);
    x->n_vs++;
    x->seen_vs[r->vs] = true;
  }
  if (!r->vu_null) {
    x->n_vu++;
    x->sum_vu += r->vu;
  }
  if (r->k3 >= 0) {
    const char *v = td_dict_values[r->k3];
    if (x->n_k3 == 0 || strcmp(v, x->min_k3) < 0) x->min_k3 = v;
    if (x->n_k3 == 0 || strcmp(v, x->max_k3) > 0) x->max_k3 = v;
    x->n_k3++;
    x->seen_k3[r->k3] = true;
  }
}

static int64_t count_true(const bool *b, int n) {
  int64_t c = 0;
  for (int i = 0; i < n; i++) c += b[i];
  return c;
}

/* The result batch `out` (keys then SPECS) equals the naive groups. */
static void check_result(fsh_batch *out, const int *keys, int n_keys, ngroup *g, int64_t ng,
                         const char *what) {
  fsh_error err;
  if (!out) {
    CHECK_MSG(out != NULL, "%s: no result", what);
    return;
  }
  CHECK_MSG(fsh_batch_validate(out, true, &err) == 0, "%s: invalid: %s", what, err.message);
  CHECK_EQ_INT(out->n_columns, n_keys + N_SPECS);
  CHECK_MSG(out->length == ng, "%s: %lld groups, want %lld", what, (long long)out->length,
            (long long)ng);
  if (out->n_columns != n_keys + N_SPECS) return;
  for (int64_t i = 0; i < ng; i++) g[i].found = false;
  fsh_field *f = out->schema->fields;
  fsh_array **c = out->columns;
  for (int64_t row = 0; row < out->length; row++) {
    td_row key;
    memset(&key, 0, sizeof key);
    char buf[64];
    for (int k = 0; k < n_keys; k++) {
      bool v = td_valid(&f[k], c[k], row);
      if (keys[k] == TD_K1) {
        key.k1_null = !v;
        key.k1 = v ? td_i64(c[k], row) : 0;
      } else if (keys[k] == TD_K2) {
        key.k2 = v ? td_num_after(td_str(&f[k], c[k], row, buf, sizeof buf), 's') : -1;
      } else {
        key.k3 = v ? td_dict_index(td_str(&f[k], c[k], row, buf, sizeof buf)) : -1;
      }
    }
    int64_t gi = 0;
    while (gi < ng && !same_keys(&g[gi].key, &key, keys, n_keys)) gi++;
    CHECK_MSG(gi < ng, "%s: row %lld: keys of no naive group", what, (long long)row);
    if (gi == ng) continue;
    ngroup *x = &g[gi];
    CHECK_MSG(!x->found, "%s: group at row %lld twice", what, (long long)row);
    x->found = true;
    int a = n_keys;
#define VALID(j) td_valid(&f[a + (j)], c[a + (j)], row)
    CHECK_EQ_INT(td_i64(c[a + 0], row), x->rows);
    CHECK_EQ_INT(td_i64(c[a + 1], row), x->n_vi);
    CHECK(VALID(2) == (x->n_vi > 0) && (!x->n_vi || td_i64(c[a + 2], row) == x->sum_vi));
    CHECK(VALID(3) == (x->n_vf > 0) && (!x->n_vf || td_close(td_f64(c[a + 3], row), x->sum_vf)));
    CHECK(VALID(4) == (x->n_vi > 0) &&
          (!x->n_vi || td_close(td_f64(c[a + 4], row), (double)x->sum_vi / (double)x->n_vi)));
    CHECK(VALID(5) == (x->n_vi > 0) && (!x->n_vi || td_i32(c[a + 5], row) == x->min_vi));
    CHECK(VALID(6) == (x->n_vi > 0) && (!x->n_vi || td_i32(c[a + 6], row) == x->max_vi));
    CHECK(VALID(7) == (x->n_vf > 0) && (!x->n_vf || td_f64(c[a + 7], row) == x->min_vf));
    CHECK(VALID(8) == (x->n_vf > 0) && (!x->n_vf || td_f64(c[a + 8], row) == x->max_vf));
    CHECK(VALID(9) == (x->n_vs > 0) &&
          (!x->n_vs || strcmp(td_str(&f[a + 9], c[a + 9], row, buf, sizeof buf), x->min_vs) == 0));
    CHECK(VALID(10) == (x->n_vs > 0) &&
          (!x->n_vs || strcmp(td_str(&f[a + 10], c[a + 10], row, buf, sizeof buf), x->max_vs) == 0));
    CHECK_EQ_INT(td_i64(c[a + 11], row), count_true(x->seen_vs, 40));
    CHECK(VALID(12) == (x->n_vu > 0) && (!x->n_vu || (uint64_t)td_i64(c[a + 12], row) == x->sum_vu));
    CHECK_EQ_INT(td_i64(c[a + 13], row), count_true(x->seen_k3, 4));
    CHECK_EQ_INT(td_i64(c[a + 14], row), x->n_k3);
    CHECK(VALID(15) == (x->n_k3 > 0) &&
          (!x->n_k3 || strcmp(td_str(&f[a + 15], c[a + 15], row, buf, sizeof buf), x->min_k3) == 0));
    CHECK(VALID(16) == (x->n_k3 > 0) &&
          (!x->n_k3 || strcmp(td_str(&f[a + 16], c[a + 16], row, buf, sizeof buf), x->max_k3) == 0));
#undef VALID
  }
  /* Output types as documented. */
  CHECK(f[n_keys + 2].type == FSH_TYPE_INT64 && f[n_keys + 3].type == FSH_TYPE_FLOAT64);
  CHECK(f[n_keys + 4].type == FSH_TYPE_FLOAT64 && f[n_keys + 5].type == FSH_TYPE_INT32);
  CHECK(f[n_keys + 9].type == FSH_TYPE_STRING && f[n_keys + 12].type == FSH_TYPE_UINT64);
  /* min/max of a dictionary column: its value type, not dictionary-encoded */
  CHECK(f[n_keys + 15].type == FSH_TYPE_STRING && !f[n_keys + 15].dictionary);
  CHECK(f[n_keys + 16].type == FSH_TYPE_STRING && !f[n_keys + 16].dictionary);
  CHECK(strcmp(f[n_keys + 0].name, "count(*)") == 0 && strcmp(f[n_keys + 2].name, "sum(vi)") == 0);
  CHECK(strcmp(f[n_keys + 3].name, "total_vf") == 0);
}

/* Runs one configuration: nb random batches (some sliced, one empty),
 * SINGLE and PARTIAL x3 + FINAL, both against the naive groups. */
static void run_config(uint64_t seed, const int *keys, int n_keys, td_opts o, int nb,
                       const char *what) {
  fsh_error err;
  uint64_t st = seed;
  fsh_batch *batches[16];
  td_row *rows = calloc(16 * 400, sizeof(td_row));
  ngroup *g = calloc(16 * 400 + 1, sizeof(ngroup));
  int64_t ng = 0, id0 = 0;
  for (int i = 0; i < nb; i++) {
    int64_t n = i == 1 ? 0 : (int64_t)(kh_rand(&st) % 300) + 1;
    td_row *r = rows + id0;
    fsh_batch *b = td_batch(&st, n, o, id0, r);
    id0 += n;
    if (n > 10 && i % 2 == 0) { /* a sliced batch: its first and last 3 rows left out */
      batches[i] = SBH_OK(fsh_batch_slice(b, 3, n - 6));
      fsh_batch_unref(b);
      r += 3;
      n -= 6;
    } else {
      batches[i] = b;
    }
    for (int64_t k = 0; k < n; k++) naive_add(g, &ng, &r[k], keys, n_keys);
  }
  if (n_keys == 0 && ng == 0) ng = 1; /* a global aggregate has one row */
  int32_t kc[3];
  for (int k = 0; k < n_keys; k++) kc[k] = keys[k];
  fsh_schema *s = batches[0]->schema;
  /* One phase. */
  fsh_hash_agg *a = NULL;
  fsh_batch *out = NULL;
  CHECK_OK(fsh_hash_agg_new(s, kc, n_keys, SPECS, N_SPECS, FSH_AGG_SINGLE, 0, &a, &err));
  for (int i = 0; a && i < nb; i++) CHECK_OK(fsh_hash_agg_push(a, batches[i], &err));
  if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
  char w[128];
  snprintf(w, sizeof w, "%s (single)", what);
  check_result(out, keys, n_keys, g, ng, w);
  fsh_schema *single_schema = a ? fsh_schema_ref(fsh_hash_agg_output_schema(a)) : NULL;
  fsh_batch_unref(out);
  fsh_hash_agg_free(a);
  /* Two phases: three partial aggregates, the final one over their output. */
  fsh_hash_agg *p[3] = {NULL, NULL, NULL}, *f = NULL;
  for (int k = 0; k < 3; k++)
    CHECK_OK(fsh_hash_agg_new(s, kc, n_keys, SPECS, N_SPECS, FSH_AGG_PARTIAL, 0, &p[k], &err));
  CHECK_OK(fsh_hash_agg_new(s, kc, n_keys, SPECS, N_SPECS, FSH_AGG_FINAL, 0, &f, &err));
  for (int i = 0; p[0] && p[1] && p[2] && i < nb; i++)
    CHECK_OK(fsh_hash_agg_push(p[i % 3], batches[i], &err));
  for (int k = 0; k < 3 && p[k] && f; k++) {
    fsh_batch *part = NULL;
    CHECK_OK(fsh_hash_agg_finish(p[k], &part, &err));
    if (!part) continue;
    CHECK_MSG(fsh_batch_validate(part, true, &err) == 0, "%s: partial invalid: %s", what,
              err.message);
    CHECK(fsh_schema_equals(part->schema, fsh_hash_agg_input_schema(f), false, &err));
    /* pushed in two slices: the final phase honours offsets (lists too) */
    int64_t half = part->length / 2;
    fsh_batch *s1 = SBH_OK(fsh_batch_slice(part, 0, half));
    fsh_batch *s2 = SBH_OK(fsh_batch_slice(part, half, part->length - half));
    CHECK_OK(fsh_hash_agg_push(f, s2, &err));
    CHECK_OK(fsh_hash_agg_push(f, s1, &err));
    fsh_batch_unref(s1);
    fsh_batch_unref(s2);
    fsh_batch_unref(part);
  }
  out = NULL;
  if (f) CHECK_OK(fsh_hash_agg_finish(f, &out, &err));
  snprintf(w, sizeof w, "%s (two-phase)", what);
  check_result(out, keys, n_keys, g, ng, w);
  if (f && single_schema)
    CHECK_MSG(fsh_schema_equals(single_schema, fsh_hash_agg_output_schema(f), false, &err),
              "%s: final schema differs from single: %s", what, err.message);
  fsh_batch_unref(out);
  fsh_schema_unref(single_schema);
  for (int k = 0; k < 3; k++) fsh_hash_agg_free(p[k]);
  fsh_hash_agg_free(f);
  for (int i = 0; i < nb; i++) fsh_batch_unref(batches[i]);
  free(rows);
  free(g);
}

static void test_agg_random(void) {
  static const int k1[] = {TD_K1}, k23[] = {TD_K2, TD_K3}, k123[] = {TD_K3, TD_K1, TD_K2},
                   k3[] = {TD_K3};
  for (uint64_t seed = 1; seed <= 4; seed++) {
    td_opts o = {.n_keys = seed == 1 ? 3 : 60, .null_pct = 10};
    run_config(seed, k1, 1, o, 7, "int64 key");
    run_config(seed * 11, k23, 2, o, 6, "utf8 + dictionary keys");
    run_config(seed * 13, k123, 3, o, 9, "three keys");
    run_config(seed * 17, k3, 1, o, 5, "dictionary key");
    run_config(seed * 19, NULL, 0, o, 4, "global");
  }
}

static void test_agg_one_key_and_nulls(void) {
  static const int k123[] = {TD_K1, TD_K2, TD_K3};
  run_config(5, k123, 3, (td_opts){.n_keys = 5, .one_key = true}, 6, "one key");
  run_config(6, k123, 3, (td_opts){.n_keys = 2, .null_pct = 90}, 6, "mostly null keys");
}

static void test_agg_empty(void) {
  static const int k1[] = {TD_K1};
  /* Only empty batches. */
  run_config(7, k1, 1, (td_opts){.n_keys = 5}, 0 + 2, "two batches, one empty");
  fsh_error err;
  uint64_t st = 3;
  td_row rows[1];
  fsh_batch *b = td_batch(&st, 0, (td_opts){.n_keys = 5}, 0, rows);
  int32_t kc = TD_K1;
  for (int keys = 0; keys <= 1; keys++) {
    fsh_hash_agg *a = NULL;
    fsh_batch *out = NULL;
    CHECK_OK(fsh_hash_agg_new(b->schema, &kc, keys, SPECS, N_SPECS, FSH_AGG_SINGLE, 0, &a, &err));
    if (!a) continue;
    CHECK_OK(fsh_hash_agg_push(a, b, &err));
    CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
    CHECK(out && out->length == (keys ? 0 : 1));
    if (out) CHECK(fsh_batch_validate(out, true, &err) == 0);
    if (out && !keys) { /* count 0, sum null */
      CHECK_EQ_INT(td_i64(out->columns[0], 0), 0);
      CHECK(out->columns[2]->null_count == 1);
    }
    fsh_batch_unref(out);
    fsh_hash_agg_free(a);
  }
  fsh_batch_unref(b);
}

static void test_agg_errors(void) {
  fsh_error err;
  uint64_t st = 9;
  td_row rows[8];
  fsh_batch *b = td_batch(&st, 8, (td_opts){.n_keys = 5}, 0, rows);
  fsh_hash_agg *a = (fsh_hash_agg *)1;
  int32_t kc = TD_K1, bad = 99;
  fsh_agg_spec sum_str = {FSH_AGG_SUM, TD_VS, NULL};
  CHECK_EQ_INT(fsh_hash_agg_new(b->schema, &kc, 1, &sum_str, 1, FSH_AGG_SINGLE, 0, &a, &err),
               ENOTSUP);
  CHECK(a == NULL && strstr(err.message, "'vs'") && strstr(err.message, "sum"));
  CHECK_EQ_INT(fsh_hash_agg_new(b->schema, &bad, 1, SPECS, 1, FSH_AGG_SINGLE, 0, &a, &err), EINVAL);
  CHECK(strstr(err.message, "column 99") != NULL);
  /* A key type rows cannot be compared on (a list) is refused up front. */
  fsh_batch *all = fsh_sample_all_types();
  int32_t list_col = -1;
  for (int64_t c = 0; c < all->n_columns; c++)
    if (all->schema->fields[c].type == FSH_TYPE_LIST && list_col < 0) list_col = (int32_t)c;
  CHECK(list_col >= 0);
  a = (fsh_hash_agg *)1;
  if (list_col >= 0) {
    CHECK_EQ_INT(fsh_hash_agg_new(all->schema, &list_col, 1, SPECS, 1, FSH_AGG_SINGLE, 0, &a, &err),
                 ENOTSUP);
    CHECK(a == NULL && strstr(err.message, all->schema->fields[list_col].name) != NULL);
  }
  fsh_batch_unref(all);
  /* Overflow of an int64 sum names the column. */
  int64_t big[2] = {INT64_MAX, 5};
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "big", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, 2, big, 8));
  fsh_batch *ob = sbh_finish(&c, 2);
  fsh_agg_spec sum0 = {FSH_AGG_SUM, 0, NULL};
  a = NULL;
  CHECK_OK(fsh_hash_agg_new(ob->schema, NULL, 0, &sum0, 1, FSH_AGG_SINGLE, 0, &a, &err));
  if (a) {
    CHECK_EQ_INT(fsh_hash_agg_push(a, ob, &err), EOVERFLOW);
    CHECK(strstr(err.message, "'big'") != NULL);
    fsh_batch *out = (fsh_batch *)1;
    CHECK_EQ_INT(fsh_hash_agg_finish(a, &out, &err), EINVAL); /* unusable after an error */
    CHECK(out == NULL);
  }
  fsh_hash_agg_free(a);
  fsh_batch_unref(ob);
  /* A batch of another schema. */
  a = NULL;
  CHECK_OK(fsh_hash_agg_new(b->schema, &kc, 1, SPECS, N_SPECS, FSH_AGG_FINAL, 0, &a, &err));
  if (a) CHECK_EQ_INT(fsh_hash_agg_push(a, b, &err), EINVAL);
  fsh_hash_agg_free(a);
  /* Over budget: EFBIG, the batch still counted. */
  a = NULL;
  CHECK_OK(fsh_hash_agg_new(b->schema, &kc, 1, SPECS, N_SPECS, FSH_AGG_SINGLE, 1000, &a, &err));
  if (a) {
    CHECK_EQ_INT(fsh_hash_agg_push(a, b, &err), EFBIG);
    CHECK(strstr(err.message, "budget of 1000 bytes") != NULL);
    CHECK(fsh_hash_agg_memory(a) > 1000);
    fsh_batch *out = NULL;
    CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
    int64_t total = 0;
    for (int64_t i = 0; out && i < out->length; i++) total += td_i64(out->columns[1], i);
    CHECK_EQ_INT(total, 8);
    fsh_batch_unref(out);
  }
  fsh_hash_agg_free(a);
  fsh_batch_unref(b);
}

static void test_agg_nan_and_zero(void) {
  fsh_error err;
  double v[] = {NAN, 1.5, -0.0, 0.0, NAN, NAN, 2.0};
  int64_t k[] = {1, 1, 2, 2, 3, 3, 4};
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "k", FSH_TYPE_FLOAT64, false);
  double kd[] = {0.0, -0.0, NAN, NAN, 1, 1, 1};
  SBH_SET(&c, sbh_fixed(NULL, 7, kd, 8));
  sbh_col(&c, "v", FSH_TYPE_FLOAT64, false);
  SBH_SET(&c, sbh_fixed(NULL, 7, v, 8));
  sbh_col(&c, "g", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, 7, k, 8));
  fsh_batch *b = sbh_finish(&c, 7);
  /* Float keys as pyarrow's group_by: NaNs one group, -0.0 and 0.0 two
   * (checked with pyarrow 26: group_by over [0.0, -0.0, nan, nan]). */
  fsh_agg_spec cnt = {FSH_AGG_COUNT_STAR, -1, NULL};
  int32_t kc = 0;
  fsh_hash_agg *a = NULL;
  fsh_batch *out = NULL;
  CHECK_OK(fsh_hash_agg_new(b->schema, &kc, 1, &cnt, 1, FSH_AGG_SINGLE, 0, &a, &err));
  if (a) CHECK_OK(fsh_hash_agg_push(a, b, &err));
  if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
  CHECK(out && out->length == 4);
  if (out && out->length == 4) {
    CHECK(td_f64(out->columns[0], 0) == 0.0 && !signbit(td_f64(out->columns[0], 0)));
    CHECK(td_f64(out->columns[0], 1) == 0.0 && signbit(td_f64(out->columns[0], 1)));
    CHECK(isnan(td_f64(out->columns[0], 2)));
    CHECK_EQ_INT(td_i64(out->columns[1], 0), 1);
    CHECK_EQ_INT(td_i64(out->columns[1], 1), 1);
    CHECK_EQ_INT(td_i64(out->columns[1], 2), 2);
    CHECK_EQ_INT(td_i64(out->columns[1], 3), 3);
  }
  fsh_batch_unref(out);
  fsh_hash_agg_free(a);
  /* min/max skip NaN unless every value is NaN. */
  fsh_agg_spec mm[2] = {{FSH_AGG_MIN, 1, NULL}, {FSH_AGG_MAX, 1, NULL}};
  kc = 2;
  a = NULL;
  out = NULL;
  CHECK_OK(fsh_hash_agg_new(b->schema, &kc, 1, mm, 2, FSH_AGG_SINGLE, 0, &a, &err));
  if (a) CHECK_OK(fsh_hash_agg_push(a, b, &err));
  if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
  CHECK(out && out->length == 4);
  if (out && out->length == 4) {
    CHECK(td_f64(out->columns[1], 0) == 1.5 && td_f64(out->columns[2], 0) == 1.5);
    CHECK(td_f64(out->columns[1], 1) == 0.0 && td_f64(out->columns[2], 1) == 0.0);
    CHECK(isnan(td_f64(out->columns[1], 2)) && isnan(td_f64(out->columns[2], 2)));
    CHECK(td_f64(out->columns[1], 3) == 2.0 && td_f64(out->columns[2], 3) == 2.0);
  }
  fsh_batch_unref(out);
  fsh_hash_agg_free(a);
  fsh_batch_unref(b);
}

/* Aggregates b grouped by column key with specs: in one phase (split 0),
 * or in two (rows [0, split) and the rest through two partial aggregates,
 * then a final one). The output, or NULL after a failed CHECK. */
static fsh_batch *agg_one_or_two_phase(fsh_batch *b, int32_t key, const fsh_agg_spec *specs,
                                       int n_specs, int64_t split) {
  fsh_error err;
  fsh_hash_agg *a = NULL, *p1 = NULL, *p2 = NULL;
  fsh_batch *out = NULL, *q1 = NULL, *q2 = NULL;
  if (split == 0) {
    CHECK_OK(fsh_hash_agg_new(b->schema, &key, 1, specs, n_specs, FSH_AGG_SINGLE, 0, &a, &err));
    if (a) CHECK_OK(fsh_hash_agg_push(a, b, &err));
  } else {
    fsh_batch *h1 = SBH_OK(fsh_batch_slice(b, 0, split));
    fsh_batch *h2 = SBH_OK(fsh_batch_slice(b, split, b->length - split));
    CHECK_OK(fsh_hash_agg_new(b->schema, &key, 1, specs, n_specs, FSH_AGG_PARTIAL, 0, &p1, &err));
    CHECK_OK(fsh_hash_agg_new(b->schema, &key, 1, specs, n_specs, FSH_AGG_PARTIAL, 0, &p2, &err));
    CHECK_OK(fsh_hash_agg_new(b->schema, &key, 1, specs, n_specs, FSH_AGG_FINAL, 0, &a, &err));
    if (p1 && p2 && a) {
      CHECK_OK(fsh_hash_agg_push(p1, h1, &err));
      CHECK_OK(fsh_hash_agg_push(p2, h2, &err));
      CHECK_OK(fsh_hash_agg_finish(p1, &q1, &err));
      CHECK_OK(fsh_hash_agg_finish(p2, &q2, &err));
      if (q1) CHECK_OK(fsh_hash_agg_push(a, q1, &err));
      if (q2) CHECK_OK(fsh_hash_agg_push(a, q2, &err));
    }
    fsh_batch_unref(h1);
    fsh_batch_unref(h2);
  }
  if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
  fsh_batch_unref(q1);
  fsh_batch_unref(q2);
  fsh_hash_agg_free(a);
  fsh_hash_agg_free(p1);
  fsh_hash_agg_free(p2);
  return out;
}

/* decimal128(10, 2): sum -> decimal128(38, 2), min, max, avg, one and two
 * phases, against a naive per-group reference; an overflowing sum. */
static fsh_batch *dec_batch(const __int128 *v, const char *valid, const int64_t *g, int64_t n) {
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "g", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, n, g, 8));
  fsh_field *f = sbh_col(&c, "d", FSH_TYPE_DECIMAL128, true);
  f->precision = 10;
  f->scale = 2;
  SBH_SET(&c, sbh_fixed(valid, n, v, 16));
  return sbh_finish(&c, n);
}

static void test_agg_decimal(void) {
  fsh_error err;
  enum { N = 400, G = 7 };
  __int128 v[N], sum[G] = {0}, mn[G] = {0}, mx[G] = {0};
  int64_t g[N], cnt[G] = {0};
  char valid[N + 1];
  uint64_t st = 77;
  for (int i = 0; i < N; i++) {
    g[i] = (int64_t)(kh_rand(&st) % G);
    v[i] = (__int128)(int64_t)(kh_rand(&st) % 2000000000) - 1000000000;
    valid[i] = g[i] == 6 || kh_rand(&st) % 6 == 0 ? '0' : '1'; /* group 6: all null */
    if (valid[i] == '0') continue;
    if (!cnt[g[i]] || v[i] < mn[g[i]]) mn[g[i]] = v[i];
    if (!cnt[g[i]] || v[i] > mx[g[i]]) mx[g[i]] = v[i];
    sum[g[i]] += v[i];
    cnt[g[i]]++;
  }
  valid[N] = 0;
  fsh_batch *b = dec_batch(v, valid, g, N);
  CHECK_OK(fsh_batch_validate(b, true, &err));
  fsh_agg_spec specs[4] = {{FSH_AGG_SUM, 1, NULL}, {FSH_AGG_MIN, 1, NULL},
                           {FSH_AGG_MAX, 1, NULL}, {FSH_AGG_AVG, 1, NULL}};
  int32_t kc = 0;
  for (int two = 0; two <= 1; two++) {
    fsh_batch *out = agg_one_or_two_phase(b, 0, specs, 4, two ? 150 : 0);
    CHECK(out && out->length == G);
    if (out && out->length == G) {
      const fsh_field *sf = &out->schema->fields[1];
      CHECK(sf->type == FSH_TYPE_DECIMAL128 && sf->precision == 38 && sf->scale == 2);
      CHECK(out->schema->fields[2].precision == 10 && out->schema->fields[2].scale == 2);
      CHECK_OK(fsh_batch_validate(out, true, &err));
      for (int64_t r = 0; r < G; r++) {
        int64_t k = td_i64(out->columns[0], r);
        __int128 got[3];
        for (int c = 0; c < 3; c++)
          memcpy(&got[c], out->columns[1 + c]->buffers[1]->data + 16 * r, 16);
        bool has = cnt[k] > 0;
        for (int c = 1; c <= 4; c++) CHECK(td_valid(&out->schema->fields[c], out->columns[c], r) == has);
        if (!has) continue;
        CHECK_MSG(got[0] == sum[k] && got[1] == mn[k] && got[2] == mx[k], "group %lld", (long long)k);
        CHECK(td_close(td_f64(out->columns[4], r), (double)sum[k] / 100.0 / (double)cnt[k]));
      }
    }
    fsh_batch_unref(out);
  }
  fsh_batch_unref(b);
  /* 20 values of 9 * 10^36: past 38 digits. */
  __int128 big[20];
  int64_t zg[20] = {0};
  for (int i = 0; i < 20; i++) big[i] = (__int128)9000000000000000000ll * 1000000000000000000ll;
  fsh_batch *ob = dec_batch(big, NULL, zg, 20);
  fsh_hash_agg *a = NULL;
  CHECK_OK(fsh_hash_agg_new(ob->schema, &kc, 1, specs, 1, FSH_AGG_SINGLE, 0, &a, &err));
  if (a) {
    CHECK_EQ_INT(fsh_hash_agg_push(a, ob, &err), EOVERFLOW);
    CHECK(strstr(err.message, "'d'") && strstr(err.message, "decimal128(38)"));
  }
  fsh_hash_agg_free(a);
  fsh_batch_unref(ob);
}

/* decimal256(60, 3) min/max (values past 128 bits, both signs, nulls),
 * plain and as a dictionary<int8, decimal256> column, one and two phases,
 * against a naive reference comparing (high 128 bits signed, low 128
 * unsigned). */
typedef struct d256 {
  __int128 hi;          /* bits 128..255, signed */
  unsigned __int128 lo; /* bits 0..127 */
} d256;

static int d256_cmp(d256 x, d256 y) {
  if (x.hi != y.hi) return x.hi < y.hi ? -1 : 1;
  return x.lo < y.lo ? -1 : x.lo > y.lo;
}

static void test_agg_decimal256_and_dictionary_minmax(void) {
  fsh_error err;
  enum { N = 300, G = 6, D = 9 };
  d256 dict[D], v[N], mn[G], mx[G];
  int64_t g[N], cnt[G] = {0};
  int8_t idx[N];
  char valid[N + 1], dvalid[D + 1];
  uint64_t st = 4242;
  for (int i = 0; i < D; i++) {
    dict[i].hi = (__int128)(int64_t)(kh_rand(&st) % 7) - 3; /* -3 .. 3: past 128 bits */
    dict[i].lo = ((unsigned __int128)kh_rand(&st) << 64) | kh_rand(&st);
    dvalid[i] = i == 4 ? '0' : '1'; /* a null in the dictionary */
  }
  dict[5] = dict[6];
  dict[5].lo ^= 1; /* neighbours differing in the lowest bit */
  dvalid[D] = 0;
  for (int i = 0; i < N; i++) {
    g[i] = (int64_t)(kh_rand(&st) % G);
    idx[i] = (int8_t)(kh_rand(&st) % D);
    v[i] = dict[idx[i]];
    valid[i] = g[i] == 5 || kh_rand(&st) % 5 == 0 || idx[i] == 4 ? '0' : '1'; /* 5: all null */
    if (valid[i] == '0') continue;
    if (!cnt[g[i]] || d256_cmp(v[i], mn[g[i]]) < 0) mn[g[i]] = v[i];
    if (!cnt[g[i]] || d256_cmp(v[i], mx[g[i]]) > 0) mx[g[i]] = v[i];
    cnt[g[i]]++;
  }
  valid[N] = 0;
  uint8_t raw[N][32], draw[D][32];
  for (int i = 0; i < N; i++) {
    memcpy(raw[i], &v[i].lo, 16);
    memcpy(raw[i] + 16, &v[i].hi, 16);
  }
  for (int i = 0; i < D; i++) {
    memcpy(draw[i], &dict[i].lo, 16);
    memcpy(draw[i] + 16, &dict[i].hi, 16);
  }
  char ivalid[N + 1]; /* the dictionary column: nulls in the indices or the dictionary */
  for (int i = 0; i < N; i++) ivalid[i] = valid[i] == '0' && idx[i] != 4 ? '0' : '1';
  ivalid[N] = 0;
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "g", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, N, g, 8));
  fsh_field *f = sbh_col(&c, "d", FSH_TYPE_DECIMAL256, true);
  f->precision = 60;
  f->scale = 3;
  SBH_SET(&c, sbh_fixed(valid, N, raw, 32));
  f = sbh_col(&c, "dd", FSH_TYPE_DECIMAL256, true);
  f->precision = 60;
  f->scale = 3;
  sbh_dict(f, 3, FSH_TYPE_INT8, false);
  f->dictionary->value.precision = 60;
  f->dictionary->value.scale = 3;
  fsh_array *da = sbh_fixed(ivalid, N, idx, 1);
  da->dictionary = sbh_fixed(dvalid, D, draw, 32);
  SBH_SET(&c, da);
  fsh_batch *b = sbh_finish(&c, N);
  CHECK_OK(fsh_batch_validate(b, true, &err));
  fsh_agg_spec specs[4] = {{FSH_AGG_MIN, 1, NULL}, {FSH_AGG_MAX, 1, NULL},
                           {FSH_AGG_MIN, 2, NULL}, {FSH_AGG_MAX, 2, NULL}};
  for (int two = 0; two <= 1; two++) {
    fsh_batch *out = agg_one_or_two_phase(b, 0, specs, 4, two ? 100 : 0);
    CHECK(out && out->length == G);
    if (out && out->length == G) {
      CHECK_OK(fsh_batch_validate(out, true, &err));
      for (int col = 1; col <= 4; col++) {
        const fsh_field *of = &out->schema->fields[col];
        CHECK(of->type == FSH_TYPE_DECIMAL256 && !of->dictionary && of->precision == 60 &&
              of->scale == 3);
      }
      for (int64_t r = 0; r < G; r++) {
        int64_t k = td_i64(out->columns[0], r);
        for (int col = 1; col <= 4; col++) {
          CHECK(td_valid(&out->schema->fields[col], out->columns[col], r) == (cnt[k] > 0));
          if (!cnt[k]) continue;
          d256 got;
          const uint8_t *p = out->columns[col]->buffers[1]->data + 32 * (out->columns[col]->offset + r);
          memcpy(&got.lo, p, 16);
          memcpy(&got.hi, p + 16, 16);
          CHECK_MSG(d256_cmp(got, col % 2 ? mn[k] : mx[k]) == 0, "group %lld column %d",
                    (long long)k, col);
        }
      }
    }
    fsh_batch_unref(out);
  }
  fsh_batch_unref(b);
}

/* Many groups over many batches: the table doubles many times in the
 * middle of batches, on the general path (int64 + utf8 keys) and on the
 * one-integer-key fast path; counts and sums against arithmetic. */
static void test_agg_many_groups(void) {
  fsh_error err;
  enum { NB = 16, ROWS = 5000, A = 20011, B = 7 };
  static int64_t cnt[A * B], sum[A * B];
  memset(cnt, 0, sizeof cnt);
  memset(sum, 0, sizeof sum);
  fsh_batch *batches[NB];
  for (int bi = 0; bi < NB; bi++) {
    int64_t ka[ROWS], v[ROWS];
    static char kb[ROWS][8];
    const char *kp[ROWS];
    for (int i = 0; i < ROWS; i++) {
      int64_t r = (int64_t)bi * ROWS + i;
      ka[i] = (r * 7919) % A;
      snprintf(kb[i], sizeof kb[i], "s%d", (int)(r % B));
      kp[i] = kb[i];
      v[i] = r % 1000;
      cnt[ka[i] * B + r % B]++;
      sum[ka[i] * B + r % B] += v[i];
    }
    sbh_cols c;
    c.n = 0;
    sbh_col(&c, "a", FSH_TYPE_INT64, false);
    SBH_SET(&c, sbh_fixed(NULL, ROWS, ka, 8));
    sbh_col(&c, "b", FSH_TYPE_STRING, false);
    SBH_SET(&c, sbh_strings(NULL, ROWS, kp));
    sbh_col(&c, "v", FSH_TYPE_INT64, false);
    SBH_SET(&c, sbh_fixed(NULL, ROWS, v, 8));
    batches[bi] = sbh_finish(&c, ROWS);
  }
  fsh_agg_spec specs[2] = {{FSH_AGG_COUNT_STAR, -1, NULL}, {FSH_AGG_SUM, 2, NULL}};
  for (int fast = 0; fast <= 1; fast++) {
    int32_t kc[2] = {0, 1};
    fsh_hash_agg *a = NULL;
    fsh_batch *out = NULL;
    CHECK_OK(fsh_hash_agg_new(batches[0]->schema, kc, fast ? 1 : 2, specs, 2, FSH_AGG_SINGLE, 0,
                              &a, &err));
    for (int bi = 0; a && bi < NB; bi++) CHECK_OK(fsh_hash_agg_push(a, batches[bi], &err));
    if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
    int64_t want_groups = 0;
    for (int64_t k = 0; k < A; k++) {
      int64_t any = 0;
      for (int64_t j = 0; j < B; j++) {
        want_groups += !fast && cnt[k * B + j] > 0;
        any += cnt[k * B + j];
      }
      want_groups += fast && any > 0;
    }
    CHECK(out && out->length == want_groups);
    int nk = fast ? 1 : 2;
    int64_t bad = 0;
    char buf[16];
    for (int64_t g = 0; out && out->length == want_groups && g < out->length; g++) {
      int64_t k = td_i64(out->columns[0], g), wc = 0, ws = 0;
      for (int64_t j = 0; j < B; j++) {
        if (!fast && j != td_num_after(td_str(&out->schema->fields[1], out->columns[1], g, buf,
                                                 sizeof buf), 's'))
          continue;
        wc += cnt[k * B + j];
        ws += sum[k * B + j];
      }
      bad += td_i64(out->columns[nk], g) != wc || td_i64(out->columns[nk + 1], g) != ws;
    }
    CHECK_EQ_INT(bad, 0);
    fsh_batch_unref(out);
    fsh_hash_agg_free(a);
  }
  for (int bi = 0; bi < NB; bi++) fsh_batch_unref(batches[bi]);
}

/* Every allocation of new, push and finish fails in turn: ENOMEM, nothing
 * leaks (ASan), and the run that succeeds is right. */
static void test_agg_alloc_failure(void) {
  fsh_error err;
  uint64_t st = 21;
  td_row rows[120];
  fsh_batch *b = td_batch(&st, 120, (td_opts){.n_keys = 40, .null_pct = 10}, 0, rows);
  static const int keys[] = {TD_K2, TD_K3};
  int32_t kc[2] = {TD_K2, TD_K3};
  ngroup *g = calloc(121, sizeof(ngroup));
  int64_t ng = 0;
  for (int i = 0; i < 120; i++) naive_add(g, &ng, &rows[i], keys, 2);
  for (int mode = 0; mode < 2; mode++) {
    for (int persistent = 0; persistent <= 1; persistent++) {
      int rc = -1;
      int64_t k;
      for (k = 1; k < 100000 && rc != 0; k++) {
        fsh_hash_agg *a = NULL, *f = NULL;
        fsh_batch *out = NULL, *part = NULL;
        fsh_alloc_fail_after(k, persistent);
        rc = fsh_hash_agg_new(b->schema, kc, 2, SPECS, N_SPECS,
                              mode ? FSH_AGG_PARTIAL : FSH_AGG_SINGLE, 0, &a, &err);
        if (rc == 0) rc = fsh_hash_agg_push(a, b, &err);
        if (rc == 0) rc = fsh_hash_agg_finish(a, mode ? &part : &out, &err);
        if (rc == 0 && mode)
          rc = fsh_hash_agg_new(b->schema, kc, 2, SPECS, N_SPECS, FSH_AGG_FINAL, 0, &f, &err);
        if (rc == 0 && mode) rc = fsh_hash_agg_push(f, part, &err);
        if (rc == 0 && mode) rc = fsh_hash_agg_finish(f, &out, &err);
        fsh_alloc_fail_after(0, false);
        CHECK_MSG(rc == 0 || rc == ENOMEM, "k %lld rc %d: %s", (long long)k, rc, err.message);
        if (rc == 0) check_result(out, keys, 2, g, ng, "after allocation failures");
        else CHECK(out == NULL);
        fsh_batch_unref(out);
        fsh_batch_unref(part);
        fsh_hash_agg_free(a);
        fsh_hash_agg_free(f);
      }
      CHECK_MSG(rc == 0 && k > 5, "mode %d never succeeded", mode);
    }
  }
  free(g);
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_agg_random), TEST(test_agg_one_key_and_nulls), TEST(test_agg_empty),
              TEST(test_agg_errors), TEST(test_agg_nan_and_zero), TEST(test_agg_decimal),
              TEST(test_agg_decimal256_and_dictionary_minmax),
              TEST(test_agg_many_groups), TEST(test_agg_alloc_failure))
