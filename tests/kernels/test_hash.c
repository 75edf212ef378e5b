/* test_hash.c -- row hashing: equal values hash equally (across batches,
 * slices, takes and dictionaries) and distinct values differ, for every
 * type; golden values; floats; multi-column combine; errors. */
#include "kernels/kernel_helpers.h"

#include <errno.h>
#include <math.h>
#include <xxhash.h>

/* xxh3 of the int64 little-endian bytes (last row null), and of the utf8
 * bytes of "", "a", "hello", "flightshuffle". */
#define GOLDEN_I64_SEED0                                                                  \
  0xc77b3abb6f87acd9ull, 0x2fbc593564db792eull, 0x5111c7e47d784413ull, 0xd5a6f8c838df27c8ull, \
      0xa233cf376558df46ull, 0x602b0e2cd6662c8bull
#define GOLDEN_I64_SEED42                                                                 \
  0x4596708167f8eb2eull, 0xe3acd5dec7d7d3fbull, 0x412b089853a0709eull, 0xbffc15058f956b16ull, \
      0xd995a1454d388792ull, 0xbf3bb467155274daull
#define GOLDEN_STR_SEED0 \
  0x2d06800538d394c2ull, 0xe6c632b61e964e1full, 0x9555e8555c62dcfdull, 0x93eb9d5b9c7baaeeull

/* For every column: rows i, j are equal (fsh_array_equals) iff their hashes
 * are, over a batch holding each sample row several times, sliced. */
static void test_equal_iff_same_hash_all_types(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(3, 2); /* 17 rows, offset 2 */
  uint64_t h[64];
  for (int64_t c = 0; c < b->n_columns; c++) {
    const fsh_field *f = &b->schema->fields[c];
    CHECK_OK(fsh_hash_array(f, b->columns[c], 7, h, &err));
    for (int64_t i = 0; i < b->length; i++) {
      for (int64_t j = 0; j < b->length; j++) {
        fsh_array *x = SBH_OK(fsh_array_slice(b->columns[c], i, 1));
        fsh_array *y = SBH_OK(fsh_array_slice(b->columns[c], j, 1));
        /* a valid index to a null dictionary value is null, logically, for
         * equality and hashing alike */
        bool eq = fsh_array_equals(f, x, y, NULL);
        CHECK_MSG(eq == (h[i] == h[j]), "column %s rows %lld, %lld: equal %d, hashes %016llx %016llx",
                  f->name, (long long)i, (long long)j, eq, (unsigned long long)h[i],
                  (unsigned long long)h[j]);
        fsh_array_unref(x);
        fsh_array_unref(y);
      }
    }
  }
  fsh_batch_unref(b);
}

/* Hashes do not depend on buffers: a slice, a take (new buffers, other
 * order), a concat (another batch) give the same per-row hashes. */
static void test_hash_independent_of_layout(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  fsh_batch *twice = NULL, *taken = NULL, *copies[2] = {b, b};
  CHECK_OK(fsh_concat(copies, 2, &twice, &err));
  int64_t idx[] = {6, 5, 4, 3, 2, 1, 0, 3, 3};
  CHECK_OK(fsh_take(b, idx, 9, &taken, &err));
  uint64_t h[16], h2[16];
  for (int64_t c = 0; c < b->n_columns && twice && taken; c++) {
    const fsh_field *f = &b->schema->fields[c];
    CHECK_OK(fsh_hash_array(f, b->columns[c], 0, h, &err));
    CHECK_OK(fsh_hash_array(f, twice->columns[c], 0, h2, &err));
    for (int i = 0; i < 14; i++) CHECK_MSG(h2[i] == h[i % 7], "%s concat row %d", f->name, i);
    CHECK_OK(fsh_hash_array(f, taken->columns[c], 0, h2, &err));
    for (int i = 0; i < 9; i++) CHECK_MSG(h2[i] == h[idx[i]], "%s take row %d", f->name, i);
    for (int64_t off = 0; off < 7; off++) {
      fsh_array *s = SBH_OK(fsh_array_slice(b->columns[c], off, 7 - off));
      CHECK_OK(fsh_hash_array(f, s, 0, h2, &err));
      for (int64_t i = 0; i < 7 - off; i++)
        CHECK_MSG(h2[i] == h[off + i], "%s slice %lld row %lld", f->name, (long long)off,
                  (long long)i);
      fsh_array_unref(s);
    }
  }
  fsh_batch_unref(twice);
  fsh_batch_unref(taken);
  fsh_batch_unref(b);
}

/* Dictionary columns hash by value: two different dictionaries, and the
 * plain utf8 column of the same values, give the same hashes. */
static void test_dictionary_by_value(void) {
  fsh_error err;
  fsh_schema *s = fsh_sample_dict_schema();
  const char *d1[] = {"red", "green", "blue"}, *d2[] = {"blue", "x", "red", "green", "red"};
  /* d2[1] is null: row 4 of b below is a valid index to a null value. */
  fsh_array *dict1 = sbh_strings(NULL, 3, d1), *dict2 = sbh_strings("10111", 5, d2);
  int32_t i1[] = {0, 1, 2, 0}, i2[] = {2, 3, 0, 4, 1};
  fsh_batch *a = fsh_sample_dict_batch(s, dict1, 4, i1);
  fsh_batch *b = fsh_sample_dict_batch(s, dict2, 5, i2); /* red green blue red null */
  const char *plain_v[] = {"red", "green", "blue", "red", ""};
  fsh_array *plain = sbh_strings("11110", 5, plain_v);
  fsh_field pf;
  sbh_field(&pf, "p", FSH_TYPE_STRING, true);
  uint64_t ha[4], hb[5], hp[5];
  CHECK_OK(fsh_hash_array(&s->fields[0], a->columns[0], 3, ha, &err));
  CHECK_OK(fsh_hash_array(&s->fields[0], b->columns[0], 3, hb, &err));
  CHECK_OK(fsh_hash_array(&pf, plain, 3, hp, &err));
  for (int i = 0; i < 4; i++) CHECK(ha[i] == hb[i] && hb[i] == hp[i]);
  CHECK(hb[4] == hp[4] && hp[4] == fsh_hash_null(3));
  CHECK(ha[0] != ha[1] && ha[1] != ha[2] && ha[0] == ha[3]);
  fsh_field_reset(&pf);
  fsh_array_unref(plain);
  fsh_array_unref(dict1);
  fsh_array_unref(dict2);
  fsh_batch_unref(a);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

/* Pinned values: a change of algorithm (or of byte order) must be seen. */
static void test_golden_values(void) {
  fsh_error err;
  fsh_field fi, fs;
  sbh_field(&fi, "i", FSH_TYPE_INT64, true);
  sbh_field(&fs, "s", FSH_TYPE_STRING, true);
  int64_t iv[] = {0, 1, -1, 42, INT64_MAX, 0};
  fsh_array *ia = sbh_fixed("111110", 6, iv, 8);
  const char *sv[] = {"", "a", "hello", "flightshuffle"};
  fsh_array *sa = sbh_strings(NULL, 4, sv);
  uint64_t h[6];
  static const uint64_t want_i0[6] = {GOLDEN_I64_SEED0};
  static const uint64_t want_i42[6] = {GOLDEN_I64_SEED42};
  static const uint64_t want_s0[4] = {GOLDEN_STR_SEED0};
  CHECK_OK(fsh_hash_array(&fi, ia, 0, h, &err));
  for (int i = 0; i < 6; i++) {
    CHECK_MSG(h[i] == want_i0[i], "int64 row %d: 0x%016llxull", i, (unsigned long long)h[i]);
    if (i < 5) CHECK(h[i] == XXH3_64bits_withSeed(&iv[i], 8, 0));
  }
  CHECK_OK(fsh_hash_array(&fi, ia, 42, h, &err));
  for (int i = 0; i < 6; i++)
    CHECK_MSG(h[i] == want_i42[i], "int64 seed 42 row %d: 0x%016llxull", i, (unsigned long long)h[i]);
  CHECK_OK(fsh_hash_array(&fs, sa, 0, h, &err));
  for (int i = 0; i < 4; i++) {
    CHECK_MSG(h[i] == want_s0[i], "utf8 row %d: 0x%016llxull", i, (unsigned long long)h[i]);
    CHECK(h[i] == XXH3_64bits_withSeed(sv[i], strlen(sv[i]), 0));
  }
  CHECK(fsh_hash_null(0) == XXH3_64bits_withSeed(NULL, 0, 0x9E3779B97F4A7C15ull));
  fsh_array_unref(ia);
  fsh_array_unref(sa);
  fsh_field_reset(&fi);
  fsh_field_reset(&fs);
}

static void test_floats(void) {
  fsh_error err;
  fsh_field f64, f32, f16;
  sbh_field(&f64, "d", FSH_TYPE_FLOAT64, false);
  sbh_field(&f32, "f", FSH_TYPE_FLOAT32, false);
  sbh_field(&f16, "h", FSH_TYPE_FLOAT16, false);
  uint64_t nan_bits = 0x7FF0000000000123ull, nan_neg = 0xFFF8000000000000ull;
  double dv[5] = {0.0, -0.0, NAN, 1.0, 0};
  memcpy(&dv[4], &nan_bits, 8);
  double dneg;
  memcpy(&dneg, &nan_neg, 8);
  dv[3] = dneg;
  float fv[4] = {0.0f, -0.0f, NAN, -NAN};
  uint16_t hv[4] = {0x0000, 0x8000, 0x7E00, 0xFC01};
  fsh_array *a64 = sbh_fixed(NULL, 5, dv, 8), *a32 = sbh_fixed(NULL, 4, fv, 4),
            *a16 = sbh_fixed(NULL, 4, hv, 2);
  uint64_t h[5];
  CHECK_OK(fsh_hash_array(&f64, a64, 0, h, &err));
  CHECK(h[0] == h[1] && h[2] == h[3] && h[3] == h[4] && h[0] != h[2]);
  CHECK_OK(fsh_hash_array(&f32, a32, 0, h, &err));
  CHECK(h[0] == h[1] && h[2] == h[3] && h[0] != h[2]);
  CHECK_OK(fsh_hash_array(&f16, a16, 0, h, &err));
  CHECK(h[0] == h[1] && h[2] == h[3] && h[0] != h[2]);
  fsh_array_unref(a64);
  fsh_array_unref(a32);
  fsh_array_unref(a16);
  fsh_field_reset(&f64);
  fsh_field_reset(&f32);
  fsh_field_reset(&f16);
}

/* 8-byte values in bulk (int64, uint64, timestamp: the vector path where
 * the CPU has AVX-512, 8 rows at a time, then the rest) against the
 * library's XXH3_64bits_withSeed of each value: random bit patterns, the
 * extremes, seeds with high bits set, lengths around multiples of 8 and
 * slices at odd offsets; null slots take the null hash. */
static void test_hash8_bulk_vs_library(void) {
  fsh_error err;
  enum { N = 1000 };
  int64_t v[N];
  char valid[N + 1];
  uint64_t st = 99;
  for (int i = 0; i < N; i++) {
    v[i] = (int64_t)kh_rand(&st);
    valid[i] = i % 97 == 5 ? '0' : '1';
  }
  v[0] = 0, v[1] = -1, v[2] = INT64_MIN, v[3] = INT64_MAX;
  valid[N] = '\0';
  const fsh_type_id types[3] = {FSH_TYPE_INT64, FSH_TYPE_UINT64, FSH_TYPE_DATE64};
  const uint64_t seeds[4] = {0, 7, 0xFFFFFFFF00000001ull, 0x8000000080000000ull};
  const int64_t cuts[5][2] = {{0, N}, {0, 8}, {3, 17}, {5, 64}, {1, N - 1}};
  uint64_t h[N];
  for (int t = 0; t < 3; t++) {
    fsh_field f;
    sbh_field(&f, "k", types[t], true);
    fsh_array *a = sbh_fixed(valid, N, v, 8);
    for (int s = 0; s < 4; s++)
      for (int c = 0; c < 5; c++) {
        fsh_array *sl = SBH_OK(fsh_array_slice(a, cuts[c][0], cuts[c][1]));
        CHECK_OK(fsh_hash_array(&f, sl, seeds[s], h, &err));
        for (int64_t i = 0; i < cuts[c][1]; i++) {
          int64_t r = cuts[c][0] + i;
          uint64_t want = valid[r] == '1' ? XXH3_64bits_withSeed(&v[r], 8, seeds[s])
                                          : fsh_hash_null(seeds[s]);
          CHECK_MSG(h[i] == want, "type %d seed %d cut %d row %lld: %016llx, want %016llx", t, s,
                    c, (long long)r, (unsigned long long)h[i], (unsigned long long)want);
        }
        fsh_array_unref(sl);
      }
    fsh_array_unref(a);
    fsh_field_reset(&f);
  }
}

/* Several keys: fold with fsh_hash_combine in key order. */
static void test_multi_column(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  int32_t keys[] = {5, 33, 1}; /* i64, str-ish, bool: whatever the columns are */
  keys[1] = (int32_t)(b->n_columns - 1);
  uint64_t h[7], h0[7], h1[7], h2[7], hr[7];
  CHECK_OK(fsh_hash_columns(b, keys, 3, 11, h, &err));
  CHECK_OK(fsh_hash_array(&b->schema->fields[keys[0]], b->columns[keys[0]], 11, h0, &err));
  CHECK_OK(fsh_hash_array(&b->schema->fields[keys[1]], b->columns[keys[1]], 11, h1, &err));
  CHECK_OK(fsh_hash_array(&b->schema->fields[keys[2]], b->columns[keys[2]], 11, h2, &err));
  for (int i = 0; i < 7; i++)
    CHECK(h[i] == fsh_hash_combine(fsh_hash_combine(h0[i], h1[i]), h2[i]));
  int32_t rev[] = {keys[2], keys[1], keys[0]};
  CHECK_OK(fsh_hash_columns(b, rev, 3, 11, hr, &err));
  for (int i = 0; i < 7; i++) CHECK(h0[i] == h2[i] || hr[i] != h[i]); /* order matters */
  CHECK_OK(fsh_hash_columns(b, keys, 1, 11, hr, &err));
  for (int i = 0; i < 7; i++) CHECK(hr[i] == h0[i]);
  /* Seeds matter. */
  CHECK_OK(fsh_hash_columns(b, keys, 1, 12, hr, &err));
  for (int i = 0; i < 7; i++) CHECK(hr[i] != h0[i]);
  fsh_batch_unref(b);
}

static void test_errors_and_empty(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  uint64_t h[7];
  int32_t bad[] = {1000};
  CHECK_EQ_INT(fsh_hash_columns(b, bad, 1, 0, h, &err), EINVAL);
  CHECK(strstr(err.message, "column 1000") != NULL);
  CHECK_EQ_INT(fsh_hash_columns(b, bad, 0, 0, h, &err), EINVAL);
  fsh_batch *empty = SBH_OK(fsh_batch_slice(b, 3, 0));
  int32_t all[SBH_MAX_COLS];
  for (int i = 0; i < b->n_columns; i++) all[i] = i;
  CHECK_OK(fsh_hash_columns(empty, all, (int)b->n_columns, 0, NULL, &err));
  CHECK_OK(fsh_hash_columns(b, all, (int)b->n_columns, 0, h, &err));
  for (int i = 0; i < 7; i++)
    for (int j = 0; j < i; j++) CHECK(h[i] != h[j]);
  fsh_batch_unref(empty);
  fsh_batch_unref(b);
}

/* Allocation failures in nested hashing come back as ENOMEM, no leak. */
static void test_hash_alloc_failures(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  int32_t all[SBH_MAX_COLS];
  for (int i = 0; i < b->n_columns; i++) all[i] = i;
  uint64_t h[7];
  int rc = -1;
  for (int64_t k = 1; k < 1000 && rc != 0; k++) {
    fsh_alloc_fail_after(k, false);
    rc = fsh_hash_columns(b, all, (int)b->n_columns, 0, h, &err);
    fsh_alloc_fail_after(0, false);
    CHECK(rc == 0 || rc == ENOMEM);
  }
  CHECK_EQ_INT(rc, 0);
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_equal_iff_same_hash_all_types), TEST(test_hash8_bulk_vs_library), TEST(test_hash_independent_of_layout),
              TEST(test_dictionary_by_value), TEST(test_golden_values), TEST(test_floats),
              TEST(test_multi_column), TEST(test_errors_and_empty), TEST(test_hash_alloc_failures))
