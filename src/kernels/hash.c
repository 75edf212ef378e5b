/* hash.c -- row hashing with xxh3 (libxxhash) over any type, null-aware and
 * independent of buffers, offsets and dictionaries (the definition is in
 * kernels.h). Vectorized per column: each layout is one loop over rows
 * writing a uint64 per row, then one pass writing the null hash over null
 * slots; nested types hash their children's ranges first (one scratch array
 * per node and call, never per row). */
#include "kernels/kernels_internal.h"

#define XXH_INLINE_ALL /* header-only use of Debian's libxxhash-dev: no call per value */
#include <xxhash.h>

#define NULL_SEED_MIX 0x9E3779B97F4A7C15ull

uint64_t fsh_hash_null(uint64_t seed) { return XXH3_64bits_withSeed(NULL, 0, seed ^ NULL_SEED_MIX); }

uint64_t fsh_hash_combine(uint64_t acc, uint64_t h) { return XXH3_64bits_withSeed(&h, 8, acc); }

typedef struct hctx {
  uint64_t seed;
  uint64_t null_hash;
  fsh_error *err;
} hctx;

/* Hashes slots a->offset + start + i, i < n, into out[i]. */
static int hash_range(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t start,
                      int64_t n, uint64_t *out);

static uint64_t *scratch(int64_t n) {
  return fsh_malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
}

/* The null hash over every null slot (validity bitmap from `abs`). */
static void apply_nulls(const hctx *c, const fsh_array *a, int64_t abs, int64_t n, uint64_t *out) {
  const uint8_t *v = kern_buf(a, 0);
  if (!v || a->null_count == 0) return;
  for (int64_t i = 0; i < n; i++)
    if (!fsh_bit_get(v, abs + i)) out[i] = c->null_hash;
}

/* ---- flat layouts ------------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <immintrin.h>
#define HASH8_AVX512 1

/* XXH3_64bits_withSeed(p + 8 i, 8, seed) for i < n, 8 rows at a time:
 * xxhash.h's path for 4..8 bytes (XXH3_len_4to8_64b then XXH3_rrmxmx)
 * written out in 64-bit lanes -- the 8 bytes' two 32-bit halves swapped
 * (a rotate by 32), xored with the seeded secret's bitflip, the rrmxmx
 * mix (AVX-512DQ has the 64-bit multiply); the last n % 8 rows by the
 * library. The key hash of a map task's int64 keys was 4-5% of its CPU,
 * row by row. Tested against the library (test_hash). */
__attribute__((target("avx512f,avx512dq"))) static void hash8_avx512(const uint8_t *p, int64_t n,
                                                                      uint64_t seed,
                                                                      uint64_t *out) {
  uint64_t s = seed ^ (uint64_t)XXH_swap32((uint32_t)seed) << 32;
  uint64_t bitflip = (XXH_readLE64(XXH3_kSecret + 8) ^ XXH_readLE64(XXH3_kSecret + 16)) - s;
  const __m512i bf = _mm512_set1_epi64((long long)bitflip);
  const __m512i mx = _mm512_set1_epi64((long long)0x9FB21C651E98DF25ULL);
  const __m512i len = _mm512_set1_epi64(8);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m512i h = _mm512_xor_si512(_mm512_ror_epi64(_mm512_loadu_si512(p + 8 * i), 32), bf);
    h = _mm512_xor_si512(h, _mm512_xor_si512(_mm512_rol_epi64(h, 49), _mm512_rol_epi64(h, 24)));
    h = _mm512_mullo_epi64(h, mx);
    h = _mm512_xor_si512(h, _mm512_add_epi64(_mm512_srli_epi64(h, 35), len));
    h = _mm512_mullo_epi64(h, mx);
    h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 28));
    _mm512_storeu_si512(out + i, h);
  }
  for (; i < n; i++) out[i] = XXH3_64bits_withSeed(p + 8 * i, 8, seed);
}

static bool hash8_avx512_ok(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
#endif

static void hash_fixed(const uint8_t *p, int64_t width, int64_t n, uint64_t seed, uint64_t *out) {
#ifdef HASH8_AVX512
  if (width == 8 && n >= 8 && hash8_avx512_ok()) {
    hash8_avx512(p, n, seed, out);
    return;
  }
#endif
  switch (width) { /* constant lengths let xxh3 pick its short-input path */
    case 1: for (int64_t i = 0; i < n; i++) out[i] = XXH3_64bits_withSeed(p + i, 1, seed); break;
    case 2: for (int64_t i = 0; i < n; i++) out[i] = XXH3_64bits_withSeed(p + 2 * i, 2, seed); break;
    case 4: for (int64_t i = 0; i < n; i++) out[i] = XXH3_64bits_withSeed(p + 4 * i, 4, seed); break;
    case 8: for (int64_t i = 0; i < n; i++) out[i] = XXH3_64bits_withSeed(p + 8 * i, 8, seed); break;
    default:
      for (int64_t i = 0; i < n; i++)
        out[i] = XXH3_64bits_withSeed(p + width * i, (size_t)width, seed);
  }
}

/* Floats: -0.0 hashes as +0.0 and every NaN as the canonical quiet NaN. */
static void hash_floats(fsh_type_id t, const uint8_t *p, int64_t n, uint64_t seed, uint64_t *out) {
  if (t == FSH_TYPE_FLOAT64) {
    for (int64_t i = 0; i < n; i++) {
      double d;
      uint64_t bits;
      memcpy(&d, p + 8 * i, 8);
      memcpy(&bits, &d, 8);
      if (d == 0.0) bits = 0;
      if (d != d) bits = 0x7FF8000000000000ull;
      out[i] = XXH3_64bits_withSeed(&bits, 8, seed);
    }
  } else if (t == FSH_TYPE_FLOAT32) {
    for (int64_t i = 0; i < n; i++) {
      float x;
      uint32_t bits;
      memcpy(&x, p + 4 * i, 4);
      memcpy(&bits, &x, 4);
      if (x == 0.0f) bits = 0;
      if (x != x) bits = 0x7FC00000u;
      out[i] = XXH3_64bits_withSeed(&bits, 4, seed);
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      if ((h & 0x7FFF) == 0) h = 0;
      if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) h = 0x7E00;
      out[i] = XXH3_64bits_withSeed(&h, 2, seed);
    }
  }
}

static void hash_bools(const uint8_t *p, int64_t abs, int64_t n, uint64_t seed, uint64_t *out) {
  const uint64_t h[2] = {XXH3_64bits_withSeed("\0", 1, seed), XXH3_64bits_withSeed("\1", 1, seed)};
  for (int64_t i = 0; i < n; i++) out[i] = h[fsh_bit_get(p, abs + i)];
}

static void hash_binary(const fsh_array *a, int w, int64_t abs, int64_t n, uint64_t seed,
                        uint64_t *out) {
  const uint8_t *offs = kern_buf(a, 1), *data = kern_buf(a, 2);
  static const uint8_t empty[1];
  if (!data) data = empty;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = kern_read_offset(offs, abs + i, w), e = kern_read_offset(offs, abs + i + 1, w);
    out[i] = XXH3_64bits_withSeed(data + s, (size_t)(e - s), seed);
  }
}

/* ---- nested layouts ---------------------------------------------------- */

/* Lists and maps: xxh3 over each row's run of element hashes. */
static int hash_list(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t abs,
                     int64_t n, uint64_t *out) {
  int w = kern_offset_width(f->type);
  const uint8_t *offs = kern_buf(a, 1);
  int64_t first = kern_read_offset(offs, abs, w), last = kern_read_offset(offs, abs + n, w);
  uint64_t *h = scratch(last - first);
  if (!h) return kern_oom(c->err);
  int rc = hash_range(c, &f->children[0], a->children[0], first, last - first, h);
  for (int64_t i = 0; i < n && rc == 0; i++) {
    int64_t s = kern_read_offset(offs, abs + i, w), e = kern_read_offset(offs, abs + i + 1, w);
    out[i] = XXH3_64bits_withSeed(h + (s - first), (size_t)(e - s) * 8, c->seed);
  }
  fsh_free(h);
  return rc;
}

static int hash_fixed_list(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t abs,
                           int64_t n, uint64_t *out) {
  int64_t size = f->list_size;
  uint64_t *h = scratch(n * size);
  if (!h) return kern_oom(c->err);
  int rc = hash_range(c, &f->children[0], a->children[0], abs * size, n * size, h);
  for (int64_t i = 0; i < n && rc == 0; i++)
    out[i] = XXH3_64bits_withSeed(h + i * size, (size_t)size * 8, c->seed);
  fsh_free(h);
  return rc;
}

static int hash_struct(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t abs,
                       int64_t n, uint64_t *out) {
  if (f->n_children == 0) {
    uint64_t h = XXH3_64bits_withSeed(NULL, 0, c->seed);
    for (int64_t i = 0; i < n; i++) out[i] = h;
    return 0;
  }
  FSH_RETURN_NOT_OK(hash_range(c, &f->children[0], a->children[0], abs, n, out));
  if (f->n_children == 1) return 0;
  uint64_t *h = scratch(n);
  if (!h) return kern_oom(c->err);
  int rc = 0;
  for (int64_t k = 1; k < f->n_children && rc == 0; k++) {
    rc = hash_range(c, &f->children[k], a->children[k], abs, n, h);
    for (int64_t i = 0; i < n && rc == 0; i++) out[i] = fsh_hash_combine(out[i], h[i]);
  }
  fsh_free(h);
  return rc;
}

/* Unions: per child, hash the child slots its rows use (sparse: the rows'
 * own slots; dense: the range between the smallest and largest offset),
 * then combine with the hash of the type code. */
static int hash_union(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t abs,
                      int64_t n, uint64_t *out) {
  int8_t map[128];
  fsh_kern_union_map(f, map);
  const int8_t *ids = (const int8_t *)kern_buf(a, 0);
  const uint8_t *offs = f->type == FSH_TYPE_DENSE_UNION ? kern_buf(a, 1) : NULL;
  uint64_t *h = scratch(n);
  if (!h) return kern_oom(c->err);
  int rc = 0;
  for (int64_t k = 0; k < f->n_children && rc == 0; k++) {
    int64_t lo = offs ? INT64_MAX : abs, hi = offs ? -1 : abs + n - 1;
    for (int64_t i = 0; offs && i < n; i++) {
      if (map[ids[abs + i]] != k) continue;
      int64_t o = kern_read_i32(offs, abs + i);
      lo = o < lo ? o : lo;
      hi = o > hi ? o : hi;
    }
    if (hi < lo) continue; /* no row uses this child */
    uint64_t *hk = h;
    if (hi - lo + 1 > n && !(hk = scratch(hi - lo + 1))) rc = kern_oom(c->err);
    if (rc == 0) rc = hash_range(c, &f->children[k], a->children[k], lo, hi - lo + 1, hk);
    int8_t code = (int8_t)(f->type_codes ? f->type_codes[k] : k);
    uint64_t code_hash = XXH3_64bits_withSeed(&code, 1, c->seed);
    for (int64_t i = 0; i < n && rc == 0; i++) {
      if (map[ids[abs + i]] != k) continue;
      int64_t slot = offs ? kern_read_i32(offs, abs + i) : abs + i;
      out[i] = fsh_hash_combine(code_hash, hk[slot - lo]);
    }
    if (hk != h) fsh_free(hk);
  }
  fsh_free(h);
  return rc;
}

/* Dictionary-encoded: hash the dictionary's values once, then look up. */
static int hash_dictionary(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t abs,
                           int64_t n, uint64_t *out) {
  const fsh_array *d = a->dictionary;
  uint64_t *h = scratch(d->length);
  if (!h) return kern_oom(c->err);
  int rc = hash_range(c, &f->dictionary->value, d, 0, d->length, h);
  const uint8_t *idx = kern_buf(a, 1), *v = kern_buf(a, 0);
  for (int64_t i = 0; i < n && rc == 0; i++)
    out[i] = v && !fsh_bit_get(v, abs + i) ? c->null_hash
                                           : h[fsh_kern_read_int(f->type, idx, abs + i)];
  fsh_free(h);
  return rc;
}

static int hash_range(const hctx *c, const fsh_field *f, const fsh_array *a, int64_t start,
                      int64_t n, uint64_t *out) {
  int64_t abs = a->offset + start;
  int rc = 0;
  if (n <= 0) return 0;
  if (f->dictionary) return hash_dictionary(c, f, a, abs, n, out);
  switch (f->type) {
    case FSH_TYPE_NA:
      for (int64_t i = 0; i < n; i++) out[i] = c->null_hash;
      return 0;
    case FSH_TYPE_BOOL: hash_bools(kern_buf(a, 1), abs, n, c->seed, out); break;
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64:
      hash_floats(f->type, kern_buf(a, 1) + abs * (fsh_type_bit_width(f) / 8), n, c->seed, out);
      break;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      hash_binary(a, kern_offset_width(f->type), abs, n, c->seed, out);
      break;
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      rc = hash_list(c, f, a, abs, n, out);
      break;
    case FSH_TYPE_FIXED_SIZE_LIST: rc = hash_fixed_list(c, f, a, abs, n, out); break;
    case FSH_TYPE_STRUCT: rc = hash_struct(c, f, a, abs, n, out); break;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION:
      return hash_union(c, f, a, abs, n, out); /* no validity of their own */
    default: {
      int64_t w = fsh_type_bit_width(f) / 8;
      static const uint8_t empty[1];
      const uint8_t *p = kern_buf(a, 1);
      hash_fixed(p ? p + abs * w : empty, w, n, c->seed, out);
    }
  }
  if (rc == 0) apply_nulls(c, a, abs, n, out);
  return rc;
}

/* ---- public entry points ----------------------------------------------- */

int fsh_hash_array(const fsh_field *f, const fsh_array *a, uint64_t seed, uint64_t *out,
                   fsh_error *err) {
  if (!f || !a || (a->length > 0 && !out))
    return fsh_error_set(err, EINVAL, "hash: NULL field, array or output");
  hctx c = {seed, fsh_hash_null(seed), err};
  int rc = hash_range(&c, f, a, 0, a->length, out);
  if (rc != 0) fsh_error_prefix(err, rc, "hash of column '%s': ", f->name);
  return rc;
}

int fsh_hash_columns(const fsh_batch *b, const int32_t *key_cols, int n_keys, uint64_t seed,
                     uint64_t *out, fsh_error *err) {
  if (!b || !key_cols || n_keys < 1 || (b->length > 0 && !out))
    return fsh_error_set(err, EINVAL, "hash: NULL batch, keys or output, or no key column");
  for (int k = 0; k < n_keys; k++)
    if (key_cols[k] < 0 || key_cols[k] >= b->n_columns)
      return fsh_error_set(err, EINVAL, "hash: key %d is column %d, the batch has %lld columns", k,
                           key_cols[k], (long long)b->n_columns);
  int64_t n = b->length;
  FSH_RETURN_NOT_OK(fsh_hash_array(&b->schema->fields[key_cols[0]], b->columns[key_cols[0]], seed,
                                   out, err));
  if (n_keys == 1 || n == 0) return 0;
  uint64_t *h = scratch(n);
  if (!h) return fsh_error_set(err, ENOMEM, "hash: out of memory for %lld rows", (long long)n);
  int rc = 0;
  for (int k = 1; k < n_keys && rc == 0; k++) {
    rc = fsh_hash_array(&b->schema->fields[key_cols[k]], b->columns[key_cols[k]], seed, h, err);
    for (int64_t i = 0; i < n && rc == 0; i++) out[i] = fsh_hash_combine(out[i], h[i]);
  }
  fsh_free(h);
  return rc;
}
