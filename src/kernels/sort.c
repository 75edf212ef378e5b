/* sort.c -- stable multi-key sort of a batch's rows. Rows null in the first
 * key are set aside (before or after the rest, per nulls_first); the others
 * get a 64-bit order-preserving prefix of their first key (sort_internal.h).
 * A single key whose prefix is exact (integers, temporal types, floats,
 * bool, or a dictionary of those) is radix-sorted on it: an MSD pass into
 * cache-sized buckets, then LSD within each. Other key sets are radix-sorted
 * on the prefix too (binary/utf8: the first 8 bytes), then each run of
 * equal prefixes is merge-sorted comparing rows (a single binary key
 * bytewise, otherwise fsh_row_keys_compare). Decimals and fixed-size
 * binary get inexact prefixes too (top 64 bits; first 8 bytes). */
#include "kernels/sort_internal.h"

/* ---- merge sort of entries ------------------------------------------------ */

typedef struct cmpctx {
  const fsh_row_keys *rk;
  bool full;        /* prefix ties need the full comparison */
  const key0 *bin;  /* a single binary key: ties compared here, bytewise */
} cmpctx;

/* The single binary key of rows x and y (both valid), bytewise, in the
 * key's direction. */
static int bin_cmp(const key0 *k, int64_t x, int64_t y) {
  int64_t sx = key0_slot(k, x), sy = key0_slot(k, y);
  const uint8_t *o = kern_buf(k->va, 1), *d = kern_buf(k->va, 2);
  int64_t bx = kern_read_offset(o, sx, k->width), ex = kern_read_offset(o, sx + 1, k->width);
  int64_t by = kern_read_offset(o, sy, k->width), ey = kern_read_offset(o, sy + 1, k->width);
  int64_t lx = ex - bx, ly = ey - by, m = lx < ly ? lx : ly;
  int c = m > 0 ? memcmp(d + bx, d + by, (size_t)m) : 0;
  if (c == 0) c = (lx > ly) - (lx < ly);
  return k->descending ? -c : c;
}

static inline bool ent_less(const cmpctx *c, const fsh_sort_ent *x, const fsh_sort_ent *y) {
  if (x->key != y->key) return x->key < y->key;
  if (c->bin) return bin_cmp(c->bin, x->row, y->row) < 0;
  return c->full && fsh_row_keys_compare(c->rk, x->row, c->rk, y->row) < 0;
}

/* Stable merge sort of e[0, n) using tmp[0, n) as scratch. */
static void merge_sort(const cmpctx *c, fsh_sort_ent *e, fsh_sort_ent *tmp, int64_t n) {
  enum { RUN = 16 };
  for (int64_t lo = 0; lo < n; lo += RUN) { /* insertion sort of each run */
    int64_t hi = lo + RUN < n ? lo + RUN : n;
    for (int64_t i = lo + 1; i < hi; i++) {
      fsh_sort_ent x = e[i];
      int64_t j = i;
      while (j > lo && ent_less(c, &x, &e[j - 1])) {
        e[j] = e[j - 1];
        j--;
      }
      e[j] = x;
    }
  }
  fsh_sort_ent *src = e, *dst = tmp;
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, o = lo;
      if (mid == hi || !ent_less(c, &src[mid], &src[mid - 1])) { /* already in order */
        memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof *dst);
        continue;
      }
      while (i < mid && j < hi) dst[o++] = ent_less(c, &src[j], &src[i]) ? src[j++] : src[i++];
      while (i < mid) dst[o++] = src[i++];
      while (j < hi) dst[o++] = src[j++];
    }
    fsh_sort_ent *t = src;
    src = dst;
    dst = t;
  }
  if (src != e) memcpy(e, src, (size_t)n * sizeof *e);
}

/* The radix sort: one MSD pass on the top MSD_BITS varying bits spreads
 * (key, row) entries into buckets that fit in cache (large inputs only),
 * each then LSD-sorted on 8-bit digits of the bits below. */
#define MSD_BITS 11
#define MSD_MIN_ROWS (1 << 15)

/* Stable LSD radix sort of src[0, n) on key bits [0, bits), ping-ponging
 * with dst[0, n); returns the one holding the result. Passes whose digit is
 * the same in every key are skipped. cnt: 8 x 256 counters of scratch. */
static fsh_sort_ent *radix_lsd(fsh_sort_ent *src, fsh_sort_ent *dst, int64_t n, int bits,
                               int64_t (*cnt)[256]) {
  int passes = (bits + 7) / 8;
  memset(cnt, 0, (size_t)passes * sizeof *cnt);
  for (int64_t i = 0; i < n; i++) {
    uint64_t k = src[i].key;
    for (int d = 0; d < passes; d++) cnt[d][(k >> (8 * d)) & 0xFF]++;
  }
  for (int d = 0; d < passes; d++) {
    int64_t *c = cnt[d];
    bool trivial = false;
    for (int v = 0; v < 256; v++)
      if (c[v] != 0) {
        trivial = c[v] == n;
        break;
      }
    if (trivial) continue;
    int64_t sum = 0;
    for (int v = 0; v < 256; v++) {
      int64_t t = c[v];
      c[v] = sum;
      sum += t;
    }
    int shift = 8 * d;
    for (int64_t i = 0; i < n; i++) dst[c[(src[i].key >> shift) & 0xFF]++] = src[i];
    fsh_sort_ent *t = src;
    src = dst;
    dst = t;
  }
  return src;
}

/* Stable radix sort of e[0, n) by key, tmp[0, n) as scratch; the result
 * ends in e. c: 1 << MSD_BITS counters. */
static void radix_entries(fsh_sort_ent *e, fsh_sort_ent *tmp, int64_t n, int64_t (*cnt)[256],
                          int64_t *c) {
  uint64_t diff = 0;
  for (int64_t i = 0; i < n; i++) diff |= e[i].key ^ e[0].key;
  if (diff == 0) return;
  int bits = 64 - __builtin_clzll(diff);
  if (n < MSD_MIN_ROWS || bits <= 8) {
    fsh_sort_ent *r = radix_lsd(e, tmp, n, bits, cnt);
    if (r != e) memcpy(e, r, (size_t)n * sizeof *e);
    return;
  }
  int low = bits > MSD_BITS ? bits - MSD_BITS : 0, nb = 1 << (bits - low);
  uint64_t mask = (uint64_t)nb - 1;
  memset(c, 0, (size_t)nb * sizeof *c);
  for (int64_t i = 0; i < n; i++) c[(e[i].key >> low) & mask]++;
  int64_t sum = 0;
  for (int v = 0; v < nb; v++) {
    int64_t t = c[v];
    c[v] = sum;
    sum += t;
  }
  for (int64_t i = 0; i < n; i++) tmp[c[(e[i].key >> low) & mask]++] = e[i];
  for (int64_t v = 0, start = 0; v < nb; v++) { /* c[v]: the end of bucket v */
    int64_t m = c[v] - start;
    fsh_sort_ent *r = m > 0 ? radix_lsd(tmp + start, e + start, m, low, cnt) : e + start;
    if (r != e + start) memcpy(e + start, r, (size_t)m * sizeof *e);
    start = c[v];
  }
}

/* fsh_sort_indices for a single key with an exact prefix. Pass 1 reads the
 * column once into kv (prefixes, direction applied) and finds the nulls and
 * the bits that vary; pass 2 counts MSD buckets; pass 3 scatters (key, row)
 * into them (null rows go straight to indices); then each bucket is
 * LSD-sorted in a scratch of the largest bucket's size and its rows
 * written out. */
static int sort_fixed(const key0 *k, int64_t n, fsh_sort_key o0, int64_t *indices,
                      fsh_error *err) {
  uint64_t *kv = fsh_malloc((size_t)n * sizeof *kv);
  uint8_t *isnull = fsh_malloc((size_t)n);
  int64_t(*cnt)[256] = fsh_malloc(8 * sizeof *cnt);
  int64_t *c = fsh_malloc(((size_t)1 << MSD_BITS) * sizeof *c);
  fsh_sort_ent *tmp = NULL, *scratch = NULL;
  int rc = 0;
  if (!kv || !isnull || !cnt || !c) goto oom;
  int64_t n_null = 0;
  uint64_t k0 = 0, diff = 0;
  bool have = false;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = key0_slot(k, i);
    isnull[i] = s < 0;
    if (s < 0) {
      n_null++;
      continue;
    }
    uint64_t key = key0_key(k, s);
    kv[i] = key;
    if (!have) k0 = key, have = true;
    diff |= key ^ k0;
  }
  int64_t nn = n - n_null;
  int64_t vi = o0.nulls_first ? n_null : 0, ni = o0.nulls_first ? 0 : nn;
  if (diff == 0) { /* every valid key equal: input order */
    for (int64_t i = 0, a = vi, z = ni; i < n; i++)
      indices[isnull[i] ? z++ : a++] = i;
    goto done;
  }
  int bits = 64 - __builtin_clzll(diff); /* keys differ only in bits [0, bits) */
  int low = bits;                        /* one bucket: LSD on every bit */
  if (nn >= MSD_MIN_ROWS && bits > 8) low = bits > MSD_BITS ? bits - MSD_BITS : 0;
  int nb = 1 << (bits - low);
  uint64_t mask = (uint64_t)nb - 1;
#define DIGIT(key) (nb == 1 ? 0 : ((key) >> low) & mask)
  memset(c, 0, (size_t)nb * sizeof *c);
  for (int64_t i = 0; i < n; i++)
    if (!isnull[i]) c[DIGIT(kv[i])]++;
  int64_t sum = 0, maxb = 0;
  for (int v = 0; v < nb; v++) {
    int64_t t = c[v];
    c[v] = sum;
    sum += t;
    maxb = t > maxb ? t : maxb;
  }
  tmp = fsh_malloc((size_t)nn * sizeof *tmp);
  scratch = fsh_malloc((size_t)maxb * sizeof *scratch);
  if (!tmp || !scratch) goto oom;
  for (int64_t i = 0, z = ni; i < n; i++) {
    if (isnull[i])
      indices[z++] = i;
    else
      tmp[c[DIGIT(kv[i])]++] = (fsh_sort_ent){kv[i], i};
  }
#undef DIGIT
  /* c[v] is now the end of bucket v */
  for (int64_t v = 0, start = 0; v < nb; v++) {
    int64_t end = c[v], m = end - start;
    const fsh_sort_ent *r = m > 1 ? radix_lsd(tmp + start, scratch, m, low, cnt) : tmp + start;
    for (int64_t j = 0; j < m; j++) indices[vi + start + j] = r[j].row;
    start = end;
  }
  goto done;
oom:
  rc = fsh_error_set(err, ENOMEM, "sort: out of memory for %lld rows", (long long)n);
done:
  fsh_free(kv);
  fsh_free(isnull);
  fsh_free(cnt);
  fsh_free(c);
  fsh_free(tmp);
  fsh_free(scratch);
  return rc;
}

int fsh_kern_sort_check(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                        const fsh_sort_key *order, fsh_row_keys **rk, fsh_error *err) {
  *rk = NULL;
  if (!b || !key_cols || n_keys < 1)
    return fsh_error_set(err, EINVAL, "NULL argument or no key column");
  return fsh_row_keys_new(b, key_cols, n_keys, order, rk, err);
}

int fsh_sort_indices(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                     const fsh_sort_key *order, int64_t *indices, fsh_error *err) {
  fsh_row_keys *rk = NULL;
  int rc = fsh_kern_sort_check(b, key_cols, n_keys, order, &rk, err);
  if (rc == 0 && b->length > 0 && !indices) rc = fsh_error_set(err, EINVAL, "NULL indices");
  if (rc != 0) {
    fsh_row_keys_free(rk);
    return fsh_error_prefix(err, rc, "sort: ");
  }
  fsh_sort_key o0 = order ? order[0] : (fsh_sort_key){false, false};
  key0 k;
  key0_init(&k, b, key_cols[0], o0);
  int64_t n = b->length;
  bool exact = key0_exact(&k);
  if (n > 0 && exact && n_keys == 1) {
    rc = sort_fixed(&k, n, o0, indices, err);
    fsh_row_keys_free(rk);
    return rc;
  }
  fsh_sort_ent *e = NULL, *tmp = NULL;
  if (n > 0) {
    e = fsh_malloc((size_t)n * sizeof *e);
    tmp = fsh_malloc((size_t)n * sizeof *tmp);
  }
  if (n > 0 && (!e || !tmp)) {
    fsh_free(e);
    fsh_free(tmp);
    fsh_row_keys_free(rk);
    return fsh_error_set(err, ENOMEM, "sort: out of memory for %lld rows", (long long)n);
  }
  int64_t n_null = 0;
  for (int64_t i = 0; i < n; i++) n_null += key0_slot(&k, i) < 0;
  int64_t nn = n - n_null;
  int64_t vi = o0.nulls_first ? n_null : 0, ni = o0.nulls_first ? 0 : nn;
  fsh_sort_ent *vals = e + vi, *nulls = e + ni;
  int64_t a = 0, z = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = key0_slot(&k, i);
    if (s < 0)
      nulls[z++] = (fsh_sort_ent){0, i};
    else
      vals[a++] = (fsh_sort_ent){key0_key(&k, s), i};
  }
  cmpctx c = {rk, !exact || n_keys > 1, k.kind == P_BINARY && n_keys == 1 ? &k : NULL};
  if (nn > 1 && k.kind != P_NONE) { /* radix by prefix, then each run of equal prefixes */
    int64_t(*cnt)[256] = fsh_malloc(8 * sizeof *cnt);
    int64_t *msd = fsh_malloc(((size_t)1 << MSD_BITS) * sizeof *msd);
    if (!cnt || !msd) {
      fsh_free(cnt);
      fsh_free(msd);
      fsh_free(e);
      fsh_free(tmp);
      fsh_row_keys_free(rk);
      return fsh_error_set(err, ENOMEM, "sort: out of memory for %lld rows", (long long)n);
    }
    radix_entries(vals, tmp, nn, cnt, msd);
    fsh_free(cnt);
    fsh_free(msd);
    for (int64_t i = 0, j; i < nn; i = j) {
      for (j = i + 1; j < nn && vals[j].key == vals[i].key;) j++;
      if (j - i > 1) merge_sort(&c, vals + i, tmp, j - i);
    }
  } else if (nn > 1) {
    merge_sort(&c, vals, tmp, nn);
  }
  if (n_keys > 1 && n_null > 1) {
    cmpctx cn = {rk, true, NULL};
    merge_sort(&cn, nulls, tmp, n_null);
  }
  for (int64_t i = 0; i < n; i++) indices[i] = e[i].row;
  fsh_free(e);
  fsh_free(tmp);
  fsh_row_keys_free(rk);
  return 0;
}

int fsh_sort_batch(fsh_batch *b, const int32_t *key_cols, int n_keys, const fsh_sort_key *order,
                   fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!b || !out) return fsh_error_set(err, EINVAL, "sort: NULL argument");
  int64_t *idx = fsh_malloc((size_t)(b->length > 0 ? b->length : 1) * sizeof *idx);
  if (!idx) return fsh_error_set(err, ENOMEM, "sort: out of memory");
  int rc = fsh_sort_indices(b, key_cols, n_keys, order, idx, err);
  if (rc == 0) {
    rc = fsh_take(b, idx, b->length, out, err);
    if (rc != 0) fsh_error_prefix(err, rc, "sort: ");
  }
  fsh_free(idx);
  return rc;
}
