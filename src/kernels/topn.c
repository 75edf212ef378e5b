/* topn.c -- the first n rows in sort order without sorting every row: a
 * max-heap of the n best rows seen so far (ties broken by row number, so
 * the result equals a stable sort followed by a slice), then the heap
 * sorted in place. Most rows are settled against the heap's top by the
 * first key's order-preserving prefix alone. */
#include "kernels/sort_internal.h"

/* Row x sorts before row y: by key, then by input order. */
static inline bool row_less(const fsh_row_keys *rk, int64_t x, int64_t y) {
  int c = fsh_row_keys_compare(rk, x, rk, y);
  return c != 0 ? c < 0 : x < y;
}

/* Restores the max-heap h[0, n) below slot i. */
static void sift_down(const fsh_row_keys *rk, int64_t *h, int64_t n, int64_t i) {
  int64_t v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && row_less(rk, h[c], h[c + 1])) c++;
    if (!row_less(rk, v, h[c])) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

int fsh_top_n_indices(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                      const fsh_sort_key *order, int64_t n, int64_t *indices, int64_t *n_out,
                      fsh_error *err) {
  if (n_out) *n_out = 0;
  fsh_row_keys *rk = NULL;
  int rc = fsh_kern_sort_check(b, key_cols, n_keys, order, &rk, err);
  if (rc == 0 && (n < 0 || !n_out))
    rc = fsh_error_set(err, EINVAL, "n %lld < 0 or NULL n_out", (long long)n);
  int64_t m = rc == 0 ? (n < b->length ? n : b->length) : 0;
  if (rc == 0 && m > 0 && !indices) rc = fsh_error_set(err, EINVAL, "NULL indices");
  if (rc != 0) {
    fsh_row_keys_free(rk);
    return fsh_error_prefix(err, rc, "top-n: ");
  }
  int64_t *h = indices;
  for (int64_t i = 0; i < m; i++) h[i] = i;
  for (int64_t i = m / 2; i-- > 0;) sift_down(rk, h, m, i);
  fsh_sort_key o0 = order ? order[0] : (fsh_sort_key){false, false};
  key0 k;
  key0_init(&k, b, key_cols[0], o0);
  bool prefixed = k.kind != P_NONE;
  uint64_t top_p = 0;
  int64_t top_s = -1; /* slot of the top's first key (-1: null or no prefix) */
#define TOP_REFRESH()                                                     \
  do {                                                                    \
    top_s = prefixed ? key0_slot(&k, h[0]) : -1;                          \
    if (top_s >= 0) top_p = key0_key(&k, top_s);                          \
  } while (0)
  if (m > 0) TOP_REFRESH();
  for (int64_t r = m; r < b->length && m > 0; r++) {
    /* A prefix greater than the top's means a row after it, a smaller one
     * a row before it (the prefix never contradicts the order). */
    int64_t s = top_s >= 0 ? key0_slot(&k, r) : -1;
    if (s >= 0) {
      uint64_t p = key0_key(&k, s);
      if (p > top_p) continue;
      if (p < top_p) {
        h[0] = r;
        sift_down(rk, h, m, 0);
        TOP_REFRESH();
        continue;
      }
    }
    if (row_less(rk, r, h[0])) {
      h[0] = r;
      sift_down(rk, h, m, 0);
      TOP_REFRESH();
    }
  }
#undef TOP_REFRESH
  for (int64_t end = m; end > 1; end--) { /* heap sort: the largest to the end */
    int64_t t = h[0];
    h[0] = h[end - 1];
    h[end - 1] = t;
    sift_down(rk, h, end - 1, 0);
  }
  *n_out = m;
  fsh_row_keys_free(rk);
  return 0;
}

int fsh_top_n(fsh_batch *b, const int32_t *key_cols, int n_keys, const fsh_sort_key *order,
              int64_t n, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!b || !out) return fsh_error_set(err, EINVAL, "top-n: NULL argument");
  int64_t m = n < 0 ? 0 : n < b->length ? n : b->length, got = 0;
  int64_t *idx = fsh_malloc((size_t)(m > 0 ? m : 1) * sizeof *idx);
  if (!idx) return fsh_error_set(err, ENOMEM, "top-n: out of memory");
  int rc = fsh_top_n_indices(b, key_cols, n_keys, order, n, idx, &got, err);
  if (rc == 0) {
    rc = fsh_take(b, idx, got, out, err);
    if (rc != 0) fsh_error_prefix(err, rc, "top-n: ");
  }
  fsh_free(idx);
  return rc;
}
