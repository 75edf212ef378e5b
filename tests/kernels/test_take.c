/* test_take.c -- take, filter and concat on every type, on sliced inputs,
 * against row-by-row equality; dictionary unification; errors; allocation
 * failures. */
#include "kernels/kernel_helpers.h"

#include <errno.h>

static void test_take_all_types(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(3, 2); /* 17 rows, every array sliced */
  int64_t idx[] = {16, 0, 3, 3, 7, 1, 12, 2, 9, 9, 9, 5, 15};
  fsh_batch *t = NULL;
  CHECK_OK(fsh_take(b, idx, 13, &t, &err));
  if (t) kh_check_rows(b, idx, 13, t, "take");
  fsh_batch_unref(t);
  CHECK_OK(fsh_take(b, idx, 0, &t, &err));
  if (t) kh_check_rows(b, idx, 0, t, "take none");
  fsh_batch_unref(t);
  /* Every single row, and a take of a take. */
  for (int64_t i = 0; i < b->length; i++) {
    CHECK_OK(fsh_take(b, &i, 1, &t, &err));
    if (t) kh_check_rows(b, &i, 1, t, "take one");
    fsh_batch *tt = NULL;
    int64_t zero[2] = {0, 0};
    if (t) CHECK_OK(fsh_take(t, zero, 2, &tt, &err));
    int64_t ii[2] = {i, i};
    if (tt) kh_check_rows(b, ii, 2, tt, "take of take");
    fsh_batch_unref(tt);
    fsh_batch_unref(t);
  }
  fsh_batch_unref(b);
}

static void test_take_errors(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  fsh_batch *t = (fsh_batch *)1;
  int64_t bad[] = {0, 7};
  CHECK_EQ_INT(fsh_take(b, bad, 2, &t, &err), EINVAL);
  CHECK(t == NULL);
  CHECK(strstr(err.message, "index 7 at position 1") != NULL);
  int64_t neg = -1;
  fsh_array *a = (fsh_array *)1;
  CHECK_EQ_INT(fsh_array_take(&b->schema->fields[3], b->columns[3], &neg, 1, &a, &err), EINVAL);
  CHECK(a == NULL && strstr(err.message, "'i16'") != NULL);
  fsh_batch_unref(b);
}

static void test_filter(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(12, 5); /* 74 rows */
  uint64_t st = 1;
  uint8_t sel[16] = {0};
  int64_t idx[128], n = 0;
  for (int64_t i = 0; i < b->length; i++)
    if (kh_rand(&st) % 3 != 0) {
      fsh_bit_set(sel, i, true);
      idx[n++] = i;
    }
  fsh_batch *f = NULL;
  CHECK_OK(fsh_filter(b, sel, &f, &err));
  if (f) kh_check_rows(b, idx, n, f, "filter");
  fsh_batch_unref(f);
  memset(sel, 0xFF, sizeof sel);
  CHECK_OK(fsh_filter(b, sel, &f, &err));
  CHECK(f == b);
  fsh_batch_unref(f);
  memset(sel, 0, sizeof sel);
  CHECK_OK(fsh_filter(b, sel, &f, &err));
  CHECK(f && f->length == 0 && fsh_batch_validate(f, true, &err) == 0);
  fsh_batch_unref(f);
  fsh_array *a = NULL;
  fsh_bit_set(sel, 3, true);
  CHECK_OK(fsh_array_filter(&b->schema->fields[5], b->columns[5], sel, &a, &err));
  CHECK(a && a->length == 1);
  fsh_array_unref(a);
  fsh_batch_unref(b);
}

/* Concat of slices equals the take of the rows they cover. */
static void test_concat_slices(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(4, 1); /* 26 rows */
  fsh_batch *parts[4] = {SBH_OK(fsh_batch_slice(b, 3, 5)), SBH_OK(fsh_batch_slice(b, 0, 0)),
                         SBH_OK(fsh_batch_slice(b, 10, 16)), SBH_OK(fsh_batch_slice(b, 1, 1))};
  int64_t idx[32], n = 0;
  for (int64_t i = 3; i < 8; i++) idx[n++] = i;
  for (int64_t i = 10; i < 26; i++) idx[n++] = i;
  idx[n++] = 1;
  fsh_batch *c = NULL;
  CHECK_OK(fsh_concat(parts, 4, &c, &err));
  if (c) kh_check_rows(b, idx, n, c, "concat");
  fsh_batch_unref(c);
  CHECK_OK(fsh_concat(parts, 1, &c, &err));
  if (c) kh_check_rows(b, idx, 5, c, "concat of one");
  fsh_batch_unref(c);
  for (int i = 0; i < 4; i++) fsh_batch_unref(parts[i]);
  fsh_batch_unref(b);
}

/* Different dictionaries are concatenated and indices rebased; a shared
 * one is kept; an index type too small is EOVERFLOW. */
static void test_concat_dictionaries(void) {
  fsh_error err;
  fsh_schema *s = fsh_sample_dict_schema();
  const char *d1[] = {"a", "b"}, *d2[] = {"c", "a", "z"};
  fsh_array *dict1 = sbh_strings(NULL, 2, d1), *dict2 = sbh_strings("101", 3, d2);
  int32_t i1[] = {1, 0, 1}, i2[] = {2, 0, 1};
  fsh_batch *x = fsh_sample_dict_batch(s, dict1, 3, i1), *y = fsh_sample_dict_batch(s, dict2, 3, i2);
  fsh_batch *in[3] = {x, y, x}, *c = NULL;
  CHECK_OK(fsh_concat(in, 3, &c, &err));
  if (c) {
    CHECK(fsh_batch_validate(c, true, &err) == 0);
    CHECK_EQ_INT(c->columns[0]->dictionary->length, 7);
    const char *want_v[] = {"b", "a", "b", "z", "c", "", "b", "a", "b"};
    fsh_array *want = sbh_strings("111110111", 9, want_v);
    fsh_field pf;
    sbh_field(&pf, "d", FSH_TYPE_STRING, true);
    uint64_t hc[9], hw[9];
    CHECK_OK(fsh_hash_array(&s->fields[0], c->columns[0], 0, hc, &err));
    CHECK_OK(fsh_hash_array(&pf, want, 0, hw, &err));
    for (int i = 0; i < 9; i++) CHECK_MSG(hc[i] == hw[i], "row %d", i);
    fsh_field_reset(&pf);
    fsh_array_unref(want);
  }
  fsh_batch_unref(c);
  fsh_batch *same[2] = {x, x};
  CHECK_OK(fsh_concat(same, 2, &c, &err));
  CHECK(c && c->columns[0]->dictionary == dict1);
  fsh_batch_unref(c);
  /* int8 indices cannot address 2 x 100 dictionary values. */
  fsh_field f8;
  sbh_field(&f8, "d", FSH_TYPE_INT64, true);
  sbh_dict(&f8, 0, FSH_TYPE_INT8, false);
  int64_t vals[100];
  for (int i = 0; i < 100; i++) vals[i] = i;
  int8_t idx8[1] = {99};
  fsh_array *a1 = sbh_fixed(NULL, 1, idx8, 1), *a2 = sbh_fixed(NULL, 1, idx8, 1);
  a1->dictionary = sbh_fixed(NULL, 100, vals, 8);
  vals[0] = -1;
  a2->dictionary = sbh_fixed(NULL, 100, vals, 8);
  fsh_array *arrs[2] = {a1, a2}, *r = (fsh_array *)1;
  CHECK_EQ_INT(fsh_array_concat(&f8, arrs, 2, &r, &err), EOVERFLOW);
  CHECK(r == NULL && strstr(err.message, "int8") != NULL);
  fsh_array_unref(a1);
  fsh_array_unref(a2);
  fsh_field_reset(&f8);
  fsh_batch_unref(x);
  fsh_batch_unref(y);
  fsh_array_unref(dict1);
  fsh_array_unref(dict2);
  fsh_schema_unref(s);
}

static void test_concat_schema_mismatch(void) {
  fsh_error err;
  fsh_batch *a = fsh_sample_all_types();
  fsh_schema *s = fsh_sample_dict_schema();
  fsh_array *dict = sbh_strings(NULL, 0, NULL);
  fsh_batch *b = fsh_sample_dict_batch(s, dict, 0, NULL);
  fsh_batch *in[2] = {a, b}, *c = (fsh_batch *)1;
  CHECK_EQ_INT(fsh_concat(in, 2, &c, &err), EINVAL);
  CHECK(c == NULL && strstr(err.message, "batch 1") != NULL);
  fsh_batch_unref(a);
  fsh_batch_unref(b);
  fsh_array_unref(dict);
  fsh_schema_unref(s);
}

/* Fail the Nth allocation, N = 1, 2, ... until the call succeeds: each
 * failure is ENOMEM with a NULL output, and LSan sees no leak. */
static void test_alloc_failures(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(2, 1);
  fsh_batch *parts[2] = {b, b};
  int64_t idx[] = {3, 1, 4, 1, 5, 9, 2, 6};
  uint8_t sel[2] = {0x5A, 0x13};
  for (int op = 0; op < 3; op++) {
    for (int persistent = 0; persistent < 2; persistent++) {
      int rc = -1;
      int64_t k;
      for (k = 1; k < 100000 && rc != 0; k++) {
        fsh_batch *out = (fsh_batch *)1;
        fsh_alloc_fail_after(k, persistent);
        rc = op == 0 ? fsh_take(b, idx, 8, &out, &err)
             : op == 1 ? fsh_concat(parts, 2, &out, &err)
                       : fsh_filter(b, sel, &out, &err);
        fsh_alloc_fail_after(0, false);
        CHECK_MSG(rc == 0 || (rc == ENOMEM && out == NULL), "op %d k %lld rc %d", op,
                  (long long)k, rc);
        if (rc == 0) CHECK(fsh_batch_validate(out, true, &err) == 0);
        if (rc == 0) fsh_batch_unref(out);
      }
      CHECK_MSG(rc == 0 && k > 2, "op %d never succeeded", op);
    }
  }
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_take_all_types), TEST(test_take_errors), TEST(test_filter),
              TEST(test_concat_slices), TEST(test_concat_dictionaries),
              TEST(test_concat_schema_mismatch), TEST(test_alloc_failures))
