/* test_sort_keys.c -- the key equality of the hash operators: for random
 * rows with nulls, NaN of both signs, -0.0 and 0.0, strings, a dictionary
 * column, u64, f32 and bool (sort_ref.h), fsh_row_keys_equal and the
 * equality encoding (fsh_row_keys_encode: equal bytes) against a reference
 * written from the documented rule (nulls equal nulls, NaN equals NaN,
 * other floats equal when bitwise equal, so -0.0 != 0.0; strings
 * bytewise; dictionaries by value), on whole and sliced batches; a
 * dictionary column encodes exactly as the plain column of its values; the
 * row hash agrees (equal keys, equal hashes). */
#include "kernels/sort_ref.h"

/* The documented equality of column c at rows x and y. */
static bool ref_equal_col(int c, int x, int y) {
  bool vx = R.valid[c][x], vy = R.valid[c][y];
  if (!vx || !vy) return !vx && !vy;
  switch (c) {
    case 0: return R.i[x] == R.i[y];
    case 1:
      if (isnan(R.d[x]) || isnan(R.d[y])) return isnan(R.d[x]) && isnan(R.d[y]);
      return memcmp(&R.d[x], &R.d[y], 8) == 0;
    case 2: case 3: return strcmp(R.s[x], R.s[y]) == 0;
    case 4: return R.small[x] == R.small[y];
    case 5: return R.u[x] == R.u[y];
    case 6:
      if (isnan(R.f[x]) || isnan(R.f[y])) return isnan(R.f[x]) && isnan(R.f[y]);
      return memcmp(&R.f[x], &R.f[y], 4) == 0;
    default: return R.bo[x] == R.bo[y];
  }
}

static bool ref_equal(const int32_t *keys, int n_keys, int x, int y) {
  for (int k = 0; k < n_keys; k++)
    if (!ref_equal_col(keys[k], x, y)) return false;
  return true;
}

/* Encodes rows [0, b->length) of b's keys; *offs and the result are malloc'd. */
static uint8_t *encode_all(const fsh_row_keys *rk, int64_t n, int64_t **offs) {
  *offs = malloc((size_t)(n + 1) * 8);
  int64_t *pos = malloc((size_t)(n ? n : 1) * 8);
  fsh_row_keys_encoded_sizes(rk, n, *offs, NULL);
  uint8_t *enc = malloc((size_t)((*offs)[n] ? (*offs)[n] : 1));
  fsh_row_keys_encode(rk, n, *offs, pos, enc);
  free(pos);
  return enc;
}

static bool enc_equal(const uint8_t *ea, const int64_t *oa, int64_t i, const uint8_t *eb,
                      const int64_t *ob, int64_t j) {
  int64_t la = oa[i + 1] - oa[i], lb = ob[j + 1] - ob[j];
  return la == lb && memcmp(ea + oa[i], eb + ob[j], (size_t)la) == 0;
}

static void test_equality_against_reference(void) {
  fsh_error err;
  fsh_batch *b = ref_make_data(0x5eed, 20);
  for (int off = 0; off <= 13; off += 13) { /* whole, then sliced */
    fsh_batch *v = off ? SBH_OK(fsh_batch_slice(b, off, ROWS - 2 * off)) : fsh_batch_ref(b);
    int64_t n = v->length;
    for (int set = 0; set < REF_NSETS; set++) {
      const int32_t *keys = REF_KEYS[set];
      int nk = REF_NKEYS[set];
      fsh_row_keys *rk = NULL;
      CHECK_OK(fsh_row_keys_new(v, keys, nk, NULL, &rk, &err));
      if (!rk) continue;
      int64_t *offs = NULL;
      uint8_t *enc = encode_all(rk, n, &offs);
      uint8_t *has_null = malloc((size_t)n);
      int64_t *o2 = malloc((size_t)(n + 1) * 8);
      fsh_row_keys_encoded_sizes(rk, n, o2, has_null);
      uint64_t *h = malloc((size_t)n * 8);
      CHECK_OK(fsh_hash_columns(v, keys, nk, 3, h, &err));
      int bad = 0, n_equal = 0, n_zero_pairs = 0;
      uint64_t st = (uint64_t)set * 7 + 1;
      for (int t = 0; t < 40000 && bad < 5; t++) {
        int64_t i = (int64_t)(kh_rand(&st) % (uint64_t)n), j;
        /* half the pairs: a row of equal hash nearby is likelier to be equal */
        j = t % 2 ? (int64_t)(kh_rand(&st) % (uint64_t)n) : (i + 1 + (int64_t)(kh_rand(&st) % 40)) % n;
        bool want = ref_equal(keys, nk, (int)(i + off), (int)(j + off));
        bool got = fsh_row_keys_equal(rk, i, rk, j), genc = enc_equal(enc, offs, i, enc, offs, j);
        n_equal += want;
        if (nk == 1 && (keys[0] == 1 || keys[0] == 6) && R.valid[keys[0]][i + off] &&
            R.valid[keys[0]][j + off] && fsh_row_keys_compare(rk, i, rk, j) == 0 && !want)
          n_zero_pairs++; /* -0.0 against 0.0: equal in the order, apart as keys */
        if (got != want || genc != want || (want && h[i] != h[j])) {
          bad++;
          CHECK_MSG(false, "keys %d rows %lld, %lld: want %d, equal %d, encoding %d, hashes %s",
                    set, (long long)i, (long long)j, want, got, genc,
                    h[i] == h[j] ? "equal" : "differ");
        }
      }
      CHECK_MSG(n_equal > 100, "keys %d: only %d equal pairs drawn", set, n_equal);
      if (nk == 1 && (keys[0] == 1 || keys[0] == 6))
        CHECK_MSG(n_zero_pairs > 0, "keys %d: no -0.0 / 0.0 pair drawn", set);
      for (int64_t i = 0; i < n; i++) {
        bool any = false;
        for (int k = 0; k < nk; k++) any = any || !R.valid[keys[k]][i + off];
        if (has_null[i] != any || fsh_row_keys_any_null(rk, i) != any || o2[i + 1] != offs[i + 1]) {
          CHECK_MSG(false, "keys %d row %lld: has_null %d, want %d", set, (long long)i,
                    has_null[i], any);
          break;
        }
      }
      free(h);
      free(o2);
      free(has_null);
      free(offs);
      free(enc);
      fsh_row_keys_free(rk);
    }
    /* the dictionary column (3) encodes as the plain column of its values (2) */
    int32_t plain = 2, dict = 3;
    fsh_row_keys *kp = NULL, *kd = NULL;
    CHECK_OK(fsh_row_keys_new(v, &plain, 1, NULL, &kp, &err));
    CHECK_OK(fsh_row_keys_new(v, &dict, 1, NULL, &kd, &err));
    if (kp && kd) {
      int64_t *op = NULL, *od = NULL;
      uint8_t *ep = encode_all(kp, n, &op), *ed = encode_all(kd, n, &od);
      CHECK(op[n] == od[n] && memcmp(op, od, (size_t)(n + 1) * 8) == 0 &&
            memcmp(ep, ed, (size_t)op[n]) == 0);
      for (int64_t i = 0; i < n; i += 37) CHECK(fsh_row_keys_equal(kp, i, kd, i));
      free(op);
      free(od);
      free(ep);
      free(ed);
    }
    fsh_row_keys_free(kp);
    fsh_row_keys_free(kd);
    fsh_batch_unref(v);
  }
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_equality_against_reference))
