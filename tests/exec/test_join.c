/* test_join.c -- the hash join against nested loops over the raw values:
 * every join type, either build side, int64 / utf8 / dictionary and
 * multi-column keys, nulls in keys, skewed keys, empty sides; output schema
 * and names; errors; the memory budget; allocation failures. */
#include "exec/test_agg_data.h"

#include <errno.h>

typedef struct pair {
  int64_t l, r; /* row ids; -1 null-filled; -2 (r) no right side (semi/anti) */
} pair;

static int pair_cmp(const void *a, const void *b) {
  const pair *x = a, *y = b;
  if (x->l != y->l) return x->l < y->l ? -1 : 1;
  return x->r < y->r ? -1 : x->r > y->r;
}

static bool key_eq(const td_row *l, const td_row *r, const int *keys, int n_keys) {
  for (int k = 0; k < n_keys; k++) {
    switch (keys[k]) {
      case TD_K1: if (l->k1_null || r->k1_null || l->k1 != r->k1) return false; break;
      case TD_K2: if (l->k2 < 0 || r->k2 < 0 || l->k2 != r->k2) return false; break;
      case TD_K3: if (l->k3 < 0 || r->k3 < 0 || l->k3 != r->k3) return false; break;
    }
  }
  return true;
}

/* The expected pairs of join `type` by nested loops. */
static int64_t naive_join(const td_row *L, int64_t nl, const td_row *R, int64_t nr,
                          const int *keys, int n_keys, fsh_join_type type, pair *out) {
  int64_t m = 0;
  bool *rmatched = calloc((size_t)nr + 1, 1);
  for (int64_t i = 0; i < nl; i++) {
    bool any = false;
    for (int64_t j = 0; j < nr; j++) {
      if (!key_eq(&L[i], &R[j], keys, n_keys)) continue;
      any = true;
      rmatched[j] = true;
      if (type <= FSH_JOIN_FULL) out[m++] = (pair){L[i].id, R[j].id};
    }
    if (type == FSH_JOIN_LEFT_SEMI && any) out[m++] = (pair){L[i].id, -2};
    if (type == FSH_JOIN_LEFT_ANTI && !any) out[m++] = (pair){L[i].id, -2};
    if ((type == FSH_JOIN_LEFT || type == FSH_JOIN_FULL) && !any) out[m++] = (pair){L[i].id, -1};
  }
  if (type == FSH_JOIN_RIGHT || type == FSH_JOIN_FULL)
    for (int64_t j = 0; j < nr; j++)
      if (!rmatched[j]) out[m++] = (pair){-1, R[j].id};
  free(rmatched);
  qsort(out, (size_t)m, sizeof(pair), pair_cmp);
  return m;
}

/* Appends the pairs of an output batch, checking payload columns against
 * the raw rows (L and R indexed by id). */
static int64_t read_pairs(fsh_batch *o, bool semi, const td_row *L, const td_row *R, pair *out,
                          int64_t m, const char *what) {
  fsh_error err;
  CHECK_MSG(fsh_batch_validate(o, true, &err) == 0, "%s: invalid: %s", what, err.message);
  CHECK_EQ_INT(o->n_columns, semi ? TD_NCOLS : 2 * TD_NCOLS);
  if (o->n_columns != (semi ? TD_NCOLS : 2 * TD_NCOLS)) return m;
  fsh_field *f = o->schema->fields;
  char buf[32];
  for (int64_t i = 0; i < o->length; i++) {
    pair p = {-1, semi ? -2 : -1};
    if (td_valid(&f[TD_ID], o->columns[TD_ID], i)) p.l = td_i64(o->columns[TD_ID], i);
    if (!semi && td_valid(&f[TD_NCOLS + TD_ID], o->columns[TD_NCOLS + TD_ID], i))
      p.r = td_i64(o->columns[TD_NCOLS + TD_ID], i);
    if (p.l >= 0) { /* left payload: vi */
      const td_row *x = &L[p.l];
      fsh_array *a = o->columns[TD_VI];
      bool v = td_valid(&f[TD_VI], a, i);
      CHECK_MSG(v == !x->vi_null && (!v || td_i32(a, i) == x->vi), "%s: left vi of id %lld", what,
                (long long)p.l);
    } else if (!semi) {
      CHECK(!td_valid(&f[TD_K1], o->columns[TD_K1], i) && !td_valid(&f[TD_VS], o->columns[TD_VS], i));
    }
    if (p.r >= 0) { /* right payload: vs and the dictionary key */
      const td_row *x = &R[p.r];
      fsh_array *a = o->columns[TD_NCOLS + TD_VS];
      bool v = td_valid(&f[TD_NCOLS + TD_VS], a, i);
      CHECK(v == (x->vs >= 0));
      if (v) CHECK_EQ_INT(td_num_after(td_str(&f[TD_NCOLS + TD_VS], a, i, buf, sizeof buf), 'x'), x->vs);
      a = o->columns[TD_NCOLS + TD_K3];
      v = td_valid(&f[TD_NCOLS + TD_K3], a, i);
      CHECK(v == (x->k3 >= 0));
      if (v) CHECK_EQ_INT(td_dict_index(td_str(&f[TD_NCOLS + TD_K3], a, i, buf, sizeof buf)), x->k3);
    } else if (!semi) {
      CHECK(!td_valid(&f[TD_NCOLS + TD_VU], o->columns[TD_NCOLS + TD_VU], i));
    }
    out[m++] = p;
  }
  return m;
}

/* nb batches of random rows (ids from *id0), some sliced, one empty. */
static int make_side(uint64_t *st, int nb, td_opts o, fsh_batch **batches, td_row *rows,
                     int64_t *n_rows) {
  int64_t id = 0;
  for (int i = 0; i < nb; i++) {
    int64_t n = i == 1 ? 0 : (int64_t)(kh_rand(st) % 150) + 1;
    fsh_batch *b = td_batch(st, n, o, id, rows + id);
    id += n;
    batches[i] = b;
    if (n > 10 && i % 2 == 0) { /* the rows left out by the slice get ids too, unused */
      batches[i] = SBH_OK(fsh_batch_slice(b, 3, n - 6));
      fsh_batch_unref(b);
      for (int64_t k = 0; k < 3; k++) rows[id - n + k].id = rows[id - 1 - k].id = -100;
    }
  }
  *n_rows = id;
  return nb;
}

static void run_join(uint64_t seed, const int *keys, int n_keys, td_opts o, int nbl, int nbr,
                     const char *what) {
  fsh_error err;
  uint64_t st = seed;
  fsh_batch *lb[8], *rb[8];
  td_row *L = calloc(8 * 160, sizeof(td_row)), *R = calloc(8 * 160, sizeof(td_row));
  int64_t nl = 0, nr = 0;
  make_side(&st, nbl, o, lb, L, &nl);
  make_side(&st, nbr, o, rb, R, &nr);
  /* Rows cut off by slices are not part of the input. */
  td_row *Lin = calloc((size_t)nl + 1, sizeof(td_row)), *Rin = calloc((size_t)nr + 1, sizeof(td_row));
  int64_t nli = 0, nri = 0;
  for (int64_t i = 0; i < nl; i++)
    if (L[i].id >= 0) Lin[nli++] = L[i];
  for (int64_t i = 0; i < nr; i++)
    if (R[i].id >= 0) Rin[nri++] = R[i];
  int32_t kc[3];
  for (int k = 0; k < n_keys; k++) kc[k] = keys[k];
  int64_t cap = (nli + 1) * (nri + 1) + nli + nri + 1;
  pair *want = malloc((size_t)cap * sizeof(pair)), *got = malloc((size_t)cap * sizeof(pair));
  fsh_schema *ls = lb[0]->schema, *rs = rb[0]->schema;
  for (int type = FSH_JOIN_INNER; type <= FSH_JOIN_LEFT_ANTI; type++) {
    int64_t nw = naive_join(Lin, nli, Rin, nri, keys, n_keys, (fsh_join_type)type, want);
    bool semi = type >= FSH_JOIN_LEFT_SEMI;
    for (int build_left = 0; build_left <= 1; build_left++) {
      char w[160];
      snprintf(w, sizeof w, "%s, join type %d, build %s", what, type, build_left ? "left" : "right");
      fsh_hash_join *j = NULL;
      CHECK_OK(fsh_hash_join_new(ls, rs, kc, kc, n_keys, (fsh_join_type)type, build_left, 0, &j,
                                 &err));
      if (!j) continue;
      fsh_schema *os = fsh_hash_join_output_schema(j);
      CHECK_EQ_INT(os->n_fields, semi ? TD_NCOLS : 2 * TD_NCOLS);
      if (!semi) {
        CHECK(strcmp(os->fields[TD_NCOLS + TD_ID].name, "id_right") == 0);
        CHECK(strcmp(os->fields[TD_NCOLS + TD_K1].name, "k1_right") == 0);
        CHECK(os->fields[TD_NCOLS + TD_ID].nullable == (type == FSH_JOIN_LEFT || type == FSH_JOIN_FULL));
        CHECK(os->fields[TD_ID].nullable == (type == FSH_JOIN_RIGHT || type == FSH_JOIN_FULL));
      }
      fsh_batch **build = build_left ? lb : rb, **probe = build_left ? rb : lb;
      int nbb = build_left ? nbl : nbr, nbp = build_left ? nbr : nbl;
      for (int i = 0; i < nbb; i++) CHECK_OK(fsh_hash_join_build(j, build[i], &err));
      int64_t ng = 0;
      for (int i = 0; i < nbp; i++) {
        fsh_batch *o = NULL;
        CHECK_OK(fsh_hash_join_probe(j, probe[i], &o, &err));
        if (o) {
          CHECK(fsh_schema_equals(o->schema, os, true, &err));
          ng = read_pairs(o, semi, L, R, got, ng, w);
        }
        fsh_batch_unref(o);
      }
      fsh_batch *o = NULL;
      CHECK_OK(fsh_hash_join_finish(j, &o, &err));
      if (o) ng = read_pairs(o, semi, L, R, got, ng, w);
      fsh_batch_unref(o);
      qsort(got, (size_t)ng, sizeof(pair), pair_cmp);
      CHECK_MSG(ng == nw, "%s: %lld rows, want %lld", w, (long long)ng, (long long)nw);
      for (int64_t i = 0; i < ng && ng == nw; i++)
        if (got[i].l != want[i].l || got[i].r != want[i].r) {
          CHECK_MSG(false, "%s: pair %lld is (%lld, %lld), want (%lld, %lld)", w, (long long)i,
                    (long long)got[i].l, (long long)got[i].r, (long long)want[i].l,
                    (long long)want[i].r);
          break;
        }
      fsh_hash_join_free(j);
    }
  }
  for (int i = 0; i < nbl; i++) fsh_batch_unref(lb[i]);
  for (int i = 0; i < nbr; i++) fsh_batch_unref(rb[i]);
  free(want);
  free(got);
  free(L);
  free(R);
  free(Lin);
  free(Rin);
}

static void test_join_random(void) {
  static const int k1[] = {TD_K1}, k23[] = {TD_K2, TD_K3}, k312[] = {TD_K3, TD_K1, TD_K2},
                   k3[] = {TD_K3};
  for (uint64_t seed = 1; seed <= 3; seed++) {
    td_opts o = {.n_keys = seed == 1 ? 4 : 40, .null_pct = 15};
    run_join(seed, k1, 1, o, 4, 3, "int64 key");
    run_join(seed * 7, k23, 2, o, 3, 4, "utf8 + dictionary keys");
    run_join(seed * 11, k312, 3, o, 4, 4, "three keys");
    run_join(seed * 13, k3, 1, o, 3, 3, "dictionary key");
  }
  static const int k123[] = {TD_K1, TD_K2, TD_K3};
  run_join(99, k123, 3, (td_opts){.n_keys = 3, .one_key = true}, 3, 2, "one key");
}

static void test_join_empty_sides(void) {
  static const int k1[] = {TD_K1};
  td_opts o = {.n_keys = 10, .null_pct = 10};
  /* A side whose only batches are one row cut to nothing: 2 batches, the
   * second always empty; and a side made of one empty batch. */
  run_join(3, k1, 1, o, 2, 1, "right small");
  fsh_error err;
  uint64_t st = 5;
  td_row rows[50];
  fsh_batch *b = td_batch(&st, 50, o, 0, rows);
  fsh_batch *e = td_batch(&st, 0, o, 0, rows);
  int32_t kc = TD_K1;
  for (int type = FSH_JOIN_INNER; type <= FSH_JOIN_LEFT_ANTI; type++) {
    for (int empty_left = 0; empty_left <= 1; empty_left++) {
      fsh_hash_join *j = NULL;
      CHECK_OK(fsh_hash_join_new(b->schema, b->schema, &kc, &kc, 1, (fsh_join_type)type, false, 0,
                                 &j, &err));
      if (!j) continue;
      /* no build batch at all when the right is empty */
      if (empty_left) CHECK_OK(fsh_hash_join_build(j, b, &err));
      fsh_batch *o = NULL, *fin = NULL;
      CHECK_OK(fsh_hash_join_probe(j, empty_left ? e : b, &o, &err));
      CHECK_OK(fsh_hash_join_finish(j, &fin, &err));
      int64_t rows_out = (o ? o->length : 0) + (fin ? fin->length : 0);
      int64_t want = 0;
      if (empty_left) want = type == FSH_JOIN_RIGHT || type == FSH_JOIN_FULL ? 50 : 0;
      else want = type == FSH_JOIN_LEFT || type == FSH_JOIN_FULL || type == FSH_JOIN_LEFT_ANTI ? 50 : 0;
      CHECK_MSG(rows_out == want, "type %d empty_left %d: %lld rows, want %lld", type, empty_left,
                (long long)rows_out, (long long)want);
      if (o) CHECK(fsh_batch_validate(o, true, &err) == 0);
      if (fin) CHECK(fsh_batch_validate(fin, true, &err) == 0);
      fsh_batch_unref(o);
      fsh_batch_unref(fin);
      fsh_hash_join_free(j);
    }
  }
  fsh_batch_unref(b);
  fsh_batch_unref(e);
}

static void test_join_errors(void) {
  fsh_error err;
  uint64_t st = 8;
  td_row rows[40];
  td_opts o = {.n_keys = 10};
  fsh_batch *b = td_batch(&st, 40, o, 0, rows);
  fsh_hash_join *j = (fsh_hash_join *)1;
  int32_t lk = TD_K1, rk = TD_K2;
  CHECK_EQ_INT(fsh_hash_join_new(b->schema, b->schema, &lk, &rk, 1, FSH_JOIN_INNER, false, 0, &j,
                                 &err), EINVAL);
  CHECK(j == NULL && strstr(err.message, "'k1'") && strstr(err.message, "'k2'"));
  /* utf8 joins dictionary<int16, utf8>: same value type. */
  lk = TD_K2;
  rk = TD_K3;
  CHECK_OK(fsh_hash_join_new(b->schema, b->schema, &lk, &rk, 1, FSH_JOIN_INNER, false, 0, &j, &err));
  fsh_hash_join_free(j);
  /* Budget. */
  j = NULL;
  lk = rk = TD_K1;
  CHECK_OK(fsh_hash_join_new(b->schema, b->schema, &lk, &rk, 1, FSH_JOIN_INNER, false, 2000, &j,
                             &err));
  if (j) {
    CHECK_EQ_INT(fsh_hash_join_build(j, b, &err), EFBIG);
    CHECK(strstr(err.message, "budget of 2000 bytes") != NULL);
    /* the batch was kept: the join still answers */
    fsh_batch *out = NULL;
    CHECK_OK(fsh_hash_join_probe(j, b, &out, &err));
    CHECK(out && out->length > 0);
    fsh_batch_unref(out);
  }
  fsh_hash_join_free(j);
  fsh_batch_unref(b);
}

/* utf8 against dictionary keys, strings that overlap: by value. */
static void test_join_dictionary_against_plain(void) {
  fsh_error err;
  const char *strs[] = {"fig", "kiwi", "pear", "apple", ""};
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "s", FSH_TYPE_STRING, true);
  SBH_SET(&c, sbh_strings("11101", 5, strs));
  fsh_batch *plain = sbh_finish(&c, 5);
  uint64_t st = 4;
  td_row rows[60];
  fsh_batch *d = td_batch(&st, 60, (td_opts){.n_keys = 3, .null_pct = 10}, 0, rows);
  int32_t lk = 0, rk = TD_K3;
  fsh_hash_join *j = NULL;
  CHECK_OK(fsh_hash_join_new(plain->schema, d->schema, &lk, &rk, 1, FSH_JOIN_INNER, true, 0, &j, &err));
  fsh_batch *o = NULL;
  if (j) CHECK_OK(fsh_hash_join_build(j, plain, &err));
  if (j) CHECK_OK(fsh_hash_join_probe(j, d, &o, &err));
  int64_t want = 0;
  for (int i = 0; i < 60; i++) /* fig, kiwi, "" match (pear: null; apple not) */
    want += rows[i].k3 == 2 || rows[i].k3 == 1 || rows[i].k3 == 3;
  /* plain rows: fig, kiwi, pear, NULL(apple), "" */
  CHECK(o && o->length == want);
  fsh_batch_unref(o);
  fsh_hash_join_free(j);
  fsh_batch_unref(plain);
  fsh_batch_unref(d);
}

/* The one-integer-key fast path: a plain int64 key against a dictionary
 * of int64 (by value), nulls on both sides; and narrow / unsigned widths. */
static void test_join_integer_keys(void) {
  fsh_error err;
  uint64_t st = 31;
  enum { NL = 300, NR = 120 };
  int64_t lv[NL], dict_vals[6] = {5, -1, 9, 5, 0, INT64_MIN}; /* 5 twice: by value */
  int8_t ri[NR];
  char lvalid[NL + 1], rvalid[NR + 1];
  for (int i = 0; i < NL; i++) {
    lv[i] = (int64_t)(kh_rand(&st) % 12) - 2;
    if (i % 17 == 0) lv[i] = INT64_MIN;
    lvalid[i] = kh_rand(&st) % 9 ? '1' : '0';
  }
  for (int i = 0; i < NR; i++) {
    ri[i] = (int8_t)(kh_rand(&st) % 6);
    rvalid[i] = kh_rand(&st) % 7 ? '1' : '0';
  }
  lvalid[NL] = rvalid[NR] = 0;
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "k", FSH_TYPE_INT64, true);
  SBH_SET(&c, sbh_fixed(lvalid, NL, lv, 8));
  fsh_batch *l = sbh_finish(&c, NL);
  c.n = 0;
  sbh_col(&c, "k", FSH_TYPE_INT64, true);
  sbh_dict(&c.fields[0], 3, FSH_TYPE_INT8, false);
  fsh_array *ra = sbh_fixed(rvalid, NR, ri, 1);
  ra->dictionary = sbh_fixed("111101", 6, dict_vals, 8); /* dictionary slot 4 (0) is null */
  SBH_SET(&c, ra);
  fsh_batch *r = sbh_finish(&c, NR);
  CHECK_OK(fsh_batch_validate(r, true, &err));
  int64_t want = 0, want_anti = 0;
  for (int i = 0; i < NL; i++) {
    int64_t m = 0;
    for (int k = 0; k < NR; k++)
      m += lvalid[i] == '1' && rvalid[k] == '1' && ri[k] != 4 && dict_vals[ri[k]] == lv[i];
    want += m;
    want_anti += m == 0;
  }
  int32_t kc = 0;
  for (int build_left = 0; build_left <= 1; build_left++) {
    for (int anti = 0; anti <= 1; anti++) {
      fsh_hash_join *j = NULL;
      fsh_batch *o = NULL, *fin = NULL;
      CHECK_OK(fsh_hash_join_new(l->schema, r->schema, &kc, &kc, 1,
                                 anti ? FSH_JOIN_LEFT_ANTI : FSH_JOIN_INNER, build_left, 0, &j, &err));
      if (!j) continue;
      CHECK_OK(fsh_hash_join_build(j, build_left ? l : r, &err));
      CHECK_OK(fsh_hash_join_probe(j, build_left ? r : l, &o, &err));
      CHECK_OK(fsh_hash_join_finish(j, &fin, &err));
      int64_t got = (o ? o->length : 0) + (fin ? fin->length : 0);
      CHECK_MSG(got == (anti ? want_anti : want), "build_left %d anti %d: %lld rows, want %lld",
                build_left, anti, (long long)got, (long long)(anti ? want_anti : want));
      fsh_batch_unref(o);
      fsh_batch_unref(fin);
      fsh_hash_join_free(j);
    }
  }
  /* Aggregates grouped by the dictionary key and by a uint64 key near 2^64. */
  uint64_t uv[NL];
  for (int i = 0; i < NL; i++) uv[i] = UINT64_MAX - (kh_rand(&st) % 5) * 0x100000000ull;
  c.n = 0;
  sbh_col(&c, "u", FSH_TYPE_UINT64, true);
  SBH_SET(&c, sbh_fixed(lvalid, NL, uv, 8));
  fsh_batch *ub = sbh_finish(&c, NL);
  fsh_batch *in[2] = {r, ub};
  fsh_agg_spec cnt = {FSH_AGG_COUNT_STAR, -1, NULL};
  for (int which = 0; which < 2; which++) {
    fsh_hash_agg *a = NULL;
    fsh_batch *out = NULL;
    CHECK_OK(fsh_hash_agg_new(in[which]->schema, &kc, 1, &cnt, 1, FSH_AGG_SINGLE, 0, &a, &err));
    if (a) CHECK_OK(fsh_hash_agg_push(a, in[which], &err));
    if (a) CHECK_OK(fsh_hash_agg_finish(a, &out, &err));
    if (!out) {
      fsh_hash_agg_free(a);
      continue;
    }
    /* each group's count equals the naive count of rows equal to it */
    int64_t total = 0;
    for (int64_t g = 0; g < out->length; g++) {
      bool gv = td_valid(&out->schema->fields[0], out->columns[0], g);
      int64_t key = 0, naive = 0;
      if (gv && which == 0) {
        int64_t d = ((const int8_t *)out->columns[0]->buffers[1]->data)[out->columns[0]->offset + g];
        key = dict_vals[d];
      } else if (gv) {
        key = td_i64(out->columns[0], g);
      }
      for (int i = 0; i < (which ? NL : NR); i++) {
        bool v = which ? lvalid[i] == '1' : rvalid[i] == '1' && ri[i] != 4;
        int64_t x = which ? (int64_t)uv[i] : dict_vals[ri[i]];
        naive += v == gv && (!v || x == key);
      }
      CHECK_MSG(td_i64(out->columns[1], g) == naive, "group %lld: %lld rows, want %lld",
                (long long)g, (long long)td_i64(out->columns[1], g), (long long)naive);
      total += td_i64(out->columns[1], g);
    }
    CHECK_EQ_INT(total, which ? NL : NR);
    CHECK(out->length <= (which ? 6 : 5));
    fsh_batch_unref(out);
    fsh_hash_agg_free(a);
  }
  fsh_batch_unref(ub);
  fsh_batch_unref(l);
  fsh_batch_unref(r);
}

static void test_join_alloc_failure(void) {
  fsh_error err;
  uint64_t st = 12;
  td_row L[80], R[60];
  td_opts o = {.n_keys = 8, .null_pct = 10};
  fsh_batch *lb = td_batch(&st, 80, o, 0, L), *rb = td_batch(&st, 60, o, 0, R);
  int32_t kc[2] = {TD_K1, TD_K3};
  static const int keys[2] = {TD_K1, TD_K3};
  pair *want = malloc(81 * 61 * sizeof(pair)), *got = malloc(81 * 61 * sizeof(pair));
  int64_t nw = naive_join(L, 80, R, 60, keys, 2, FSH_JOIN_FULL, want);
  for (int persistent = 0; persistent <= 1; persistent++) {
    int rc = -1;
    int64_t k;
    for (k = 1; k < 100000 && rc != 0; k++) {
      fsh_hash_join *j = NULL;
      fsh_batch *o = NULL, *fin = NULL;
      fsh_alloc_fail_after(k, persistent);
      rc = fsh_hash_join_new(lb->schema, rb->schema, kc, kc, 2, FSH_JOIN_FULL, false, 0, &j, &err);
      if (rc == 0) rc = fsh_hash_join_build(j, rb, &err);
      if (rc == 0) rc = fsh_hash_join_probe(j, lb, &o, &err);
      if (rc == 0) rc = fsh_hash_join_finish(j, &fin, &err);
      fsh_alloc_fail_after(0, false);
      CHECK_MSG(rc == 0 || rc == ENOMEM, "k %lld rc %d: %s", (long long)k, rc, err.message);
      if (rc == 0) {
        int64_t ng = read_pairs(o, false, L, R, got, 0, "alloc");
        if (fin) ng = read_pairs(fin, false, L, R, got, ng, "alloc");
        qsort(got, (size_t)ng, sizeof(pair), pair_cmp);
        CHECK(ng == nw && memcmp(got, want, (size_t)ng * sizeof(pair)) == 0);
      }
      fsh_batch_unref(o);
      fsh_batch_unref(fin);
      fsh_hash_join_free(j);
    }
    CHECK_MSG(rc == 0 && k > 5, "never succeeded");
  }
  free(want);
  free(got);
  fsh_batch_unref(lb);
  fsh_batch_unref(rb);
}

FSH_TEST_MAIN(TEST(test_join_random), TEST(test_join_empty_sides), TEST(test_join_errors),
              TEST(test_join_dictionary_against_plain), TEST(test_join_integer_keys),
              TEST(test_join_alloc_failure))
