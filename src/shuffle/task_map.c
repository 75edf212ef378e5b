/* task_map.c -- the map task of the synthetic shuffle (contract and wire
 * formats in shuffle.h, "tasks"): generate a share of the synthetic table,
 * hash-partition it on the key (a generated batch an L2-sized slice at a
 * time), scatter, write through a backend's writer,
 * and keep per-partition row checksums beside the map output's metadata.
 * Also the row checksum both task kinds use (8 rows at a time with
 * AVX-512 where the CPU has it, 4 at a time with AVX2 where it has only
 * that, else row by row; the same bits), the
 * backend names, and the map-synthetic body and answer codecs. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/worker_internal.h" /* fsh_worker_task_cancelled */

#define MAP_TASK_MAGIC "FSMT"
#define MAP_TASK_BYTES 64
#define MAP_RESULT_MAGIC "FSMR"
#define MAP_RESULT_HEADER_BYTES 40
#define TASK_MAX_PARTITIONS ((int32_t)1 << 24)
/* Rows of a generated batch mapped at a time: ~0.5 MiB of the synthetic
 * table, so that the passes over them after the first read it from L2
 * (or 64 rows a partition on average, when more: the builders' append
 * has per-partition work too). */
#define MAP_SLICE_ROWS 16384

/* The rows of each slice of an n-row batch for R partitions: n cut into
 * equal slices of at least MAP_SLICE_ROWS and 64 * R rows -- as many as
 * fit, never a short tail (at 1000 partitions a 65536-row batch was a
 * 64000-row slice and a 1536-row one, whose append paid every
 * partition's per-append work for ~1.5 rows each). Same rows in the same
 * order whatever the slices: the output does not depend on them. */
static int64_t map_slice_rows(int64_t n, int32_t R) {
  int64_t min = MAP_SLICE_ROWS > 64 * (int64_t)R ? MAP_SLICE_ROWS : 64 * (int64_t)R;
  int64_t pieces = n / min;
  if (pieces <= 1) return n;
  return (n + pieces - 1) / pieces;
}

static int64_t now_nanos(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *fsh_task_backend_name(fsh_task_backend b) {
  switch (b) {
    case FSH_TASK_BACKEND_MEMORY: return "memory";
    case FSH_TASK_BACKEND_FS: return "fs";
    case FSH_TASK_BACKEND_FLIGHT: return "flight";
  }
  return "?";
}

int fsh_task_backend_parse(const char *s, fsh_task_backend *out, fsh_error *err) {
  static const fsh_task_backend all[] = {FSH_TASK_BACKEND_MEMORY, FSH_TASK_BACKEND_FS,
                                         FSH_TASK_BACKEND_FLIGHT};
  for (int i = 0; s && i < 3; i++)
    if (strcmp(s, fsh_task_backend_name(all[i])) == 0) {
      *out = all[i];
      return 0;
    }
  return fsh_error_set(err, EINVAL, "unknown shuffle backend '%s' (memory, fs, flight)",
                       s ? s : "(null)");
}

/* ---- row checksum ------------------------------------------------------ */

/* Names up to this long are stored in the record itself (the definition
 * in shuffle.h); longer ones by their XXH3_64bits. */
#define RECORD_NAME_BYTES 32
#define RECORD_BYTES 56

/* 0xFF x 32 then 0x00 x 32: the 8 bytes at WINDOW + 32 - n + 8 j keep the
 * bytes of word j of a name that lie before its length n (0 .. 32), so a
 * name is masked with four loads and no branch on its length. */
static const uint8_t WINDOW[64] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255};

/* XXH3's 16-byte mix of two words held in registers. */
static inline uint64_t mix_words(uint64_t lo, uint64_t hi, const uint8_t *secret) {
  return XXH3_mul128_fold64(lo ^ XXH_readLE64(secret), hi ^ XXH_readLE64(secret + 8));
}

/* XXH3_64bits of the 56-byte record (k, v, w[0..3], trailer) as words,
 * without writing it to memory: XXH3's 17..128-byte path for length 56
 * mixes the 16 bytes at 16, 24 (= 56 - 32), 0 and 40 (= 56 - 16) with the
 * secret's bytes at 32, 48, 0 and 16. Reading the record back from a
 * buffer just written at unaligned offsets stalls on store forwarding,
 * and a length that varies per row mispredicts: this does neither. */
static inline uint64_t record_hash(uint64_t k, uint64_t v, const uint64_t w[4], uint64_t trailer) {
  _Static_assert(RECORD_BYTES > 32 && RECORD_BYTES <= 64, "the record takes XXH3's 33..64 path");
  const uint8_t *sec = XXH3_kSecret;
  uint64_t acc = RECORD_BYTES * XXH_PRIME64_1;
  acc += mix_words(w[0], w[1], sec + 32);
  acc += mix_words(w[1], w[2], sec + 48);
  acc += mix_words(k, v, sec);
  acc += mix_words(w[3], trailer, sec + 16);
  return XXH3_avalanche(acc);
}

/* The columns of a synthetic batch as the row checksum reads them. */
typedef struct row_cols {
  const uint8_t *keys, *vals, *offs, *chars, *v_bits, *s_bits;
  int64_t chars_size, v_off, s_off;
} row_cols;

static row_cols cols_of(const fsh_batch *b) {
  const fsh_array *k = b->columns[0], *v = b->columns[1], *s = b->columns[2];
  return (row_cols){
      .keys = k->buffers[1]->data + 8 * k->offset,
      .vals = v->buffers[1]->data + 8 * v->offset,
      .offs = s->buffers[1]->data + 4 * s->offset,
      .chars = s->buffers[2] ? s->buffers[2]->data : (const uint8_t *)"",
      .chars_size = s->buffers[2] ? s->buffers[2]->size : 0,
      .v_bits = v->buffers[0] && v->null_count != 0 ? v->buffers[0]->data : NULL,
      .s_bits = s->buffers[0] && s->null_count != 0 ? s->buffers[0]->data : NULL,
      .v_off = v->offset,
      .s_off = s->offset};
}

/* Row i's h (the definition in shuffle.h), one row at a time. */
static inline uint64_t row_hash(const row_cols *c, int64_t i) {
  bool v_ok = !c->v_bits || fsh_bit_get(c->v_bits, c->v_off + i);
  bool s_ok = !c->s_bits || fsh_bit_get(c->s_bits, c->s_off + i);
  uint32_t lo = XXH_readLE32(c->offs + 4 * i), hi = XXH_readLE32(c->offs + 4 * i + 4);
  uint64_t name_len = s_ok ? hi - lo : 0, flags = (uint64_t)v_ok | (uint64_t)s_ok << 1;
  uint64_t w[4];
  if (name_len <= RECORD_NAME_BYTES && (int64_t)lo + RECORD_NAME_BYTES <= c->chars_size) {
    const uint8_t *keep = WINDOW + RECORD_NAME_BYTES - name_len; /* the common case */
    for (int j = 0; j < 4; j++)
      w[j] = XXH_readLE64(c->chars + lo + 8 * j) & XXH_readLE64(keep + 8 * j);
  } else if (name_len <= RECORD_NAME_BYTES) { /* near the end of the chars buffer */
    uint8_t name[RECORD_NAME_BYTES] = {0};
    if (name_len) memcpy(name, c->chars + lo, name_len);
    for (int j = 0; j < 4; j++) w[j] = XXH_readLE64(name + 8 * j);
  } else {
    w[0] = XXH3_64bits(c->chars + lo, name_len), w[1] = w[2] = w[3] = 0;
    flags |= 4;
  }
  uint64_t val = v_ok ? XXH_readLE64(c->vals + 8 * i) : 0;
  return record_hash(XXH_readLE64(c->keys + 8 * i), val, w, flags | name_len << 8);
}

static void row_checksums_scalar(const row_cols *c, int64_t n, const int32_t *part_of_row,
                                 uint64_t *sums) {
  for (int64_t i = 0; i < n; i++) sums[part_of_row ? part_of_row[i] : 0] += row_hash(c, i);
}

#if defined(__x86_64__) && defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <immintrin.h>
#define ROWSUM_AVX512 1
#define AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,bmi2")))

/* XXH3_mul128_fold64 in each 64-bit lane: the low and high halves of the
 * 128-bit product a * b xored, the product built from four 32x32->64
 * multiplies (XXH_mult64to128's portable formula: no carry is lost). */
AVX512_TARGET static inline __m512i mul128_fold64_x8(__m512i a, __m512i b) {
  const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFF);
  __m512i ah = _mm512_srli_epi64(a, 32), bh = _mm512_srli_epi64(b, 32);
  __m512i ll = _mm512_mul_epu32(a, b), lh = _mm512_mul_epu32(a, bh);
  __m512i hl = _mm512_mul_epu32(ah, b), hh = _mm512_mul_epu32(ah, bh);
  __m512i cross = _mm512_add_epi64(
      _mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(lh, lo32)), hl);
  __m512i hi = _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(lh, 32)),
                                _mm512_srli_epi64(cross, 32));
  __m512i lo = _mm512_or_si512(_mm512_slli_epi64(cross, 32), _mm512_and_si512(ll, lo32));
  return _mm512_xor_si512(lo, hi);
}

AVX512_TARGET static inline __m512i mix_words_x8(__m512i lo, __m512i hi, const uint8_t *secret) {
  __m512i s0 = _mm512_set1_epi64((long long)XXH_readLE64(secret));
  __m512i s1 = _mm512_set1_epi64((long long)XXH_readLE64(secret + 8));
  return mul128_fold64_x8(_mm512_xor_si512(lo, s0), _mm512_xor_si512(hi, s1));
}

/* The 8 validity bits of rows [i, i + 8) of a bitmap at bit offset off
 * (all set without a bitmap); reads no byte past bit off + i + 7. */
static inline __mmask8 bits8(const uint8_t *bits, int64_t off, int64_t i) {
  if (!bits) return 0xFF;
  int64_t at = off + i;
  const uint8_t *p = bits + (at >> 3);
  unsigned sh = (unsigned)(at & 7);
  unsigned v = sh ? (p[0] | (unsigned)p[1] << 8) >> sh : p[0];
  return (__mmask8)v;
}

/* Rows [0, n) 8 at a time in vector registers: the validity bits, the
 * offsets and lengths, the name words (one masked load a row, transposed),
 * the record hash; the next rows' cache lines prefetched (without it the
 * loads of a batch just generated, out of L2, cost as much as the hash).
 * A group with a name longer than 32 bytes takes row_hash row by row, as
 * do the last n % 8 rows. Adds to sums as fsh_task_row_checksums. */
AVX512_TARGET static void row_checksums_avx512(const row_cols *c, int64_t n,
                                               const int32_t *part_of_row, uint64_t *sums) {
  const uint8_t *sec = XXH3_kSecret;
  const __m512i acc0 = _mm512_set1_epi64((long long)(RECORD_BYTES * XXH_PRIME64_1));
  const __m512i mx1 = _mm512_set1_epi64((long long)0x165667919E3779F9ULL);
  const __m512i name_max = _mm512_set1_epi64(RECORD_NAME_BYTES);
  __m512i total = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __mmask8 v_ok = bits8(c->v_bits, c->v_off, i), s_ok = bits8(c->s_bits, c->s_off, i);
    _mm_prefetch((const char *)(c->keys + 8 * i + 1024), _MM_HINT_T0);
    _mm_prefetch((const char *)(c->vals + 8 * i + 1024), _MM_HINT_T0);
    _mm_prefetch((const char *)(c->offs + 4 * i + 512), _MM_HINT_T0);
    __m512i lo = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(c->offs + 4 * i)));
    __m512i hi =
        _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(c->offs + 4 * i + 4)));
    __m512i len = _mm512_maskz_sub_epi64(s_ok, hi, lo); /* uint32 hi - lo, 0 when null */
    len = _mm512_and_si512(len, _mm512_set1_epi64(0xFFFFFFFF));
    uint64_t h[8];
    if (_mm512_cmpgt_epu64_mask(len, name_max)) { /* rare: names past 32 bytes */
      for (int r = 0; r < 8; r++) h[r] = row_hash(c, i + r);
      if (!part_of_row) {
        total = _mm512_add_epi64(total, _mm512_loadu_si512(h));
        continue;
      }
    } else {
      /* each row's name, zero-padded to 32 bytes by a masked load (which
       * reads nothing past the name, so a buffer's end is no concern),
       * then the 8 x 4 words transposed to 4 vectors of 8 rows' word j */
      uint32_t l[8], at[8];
      _mm256_storeu_si256((__m256i *)l, _mm512_cvtepi64_epi32(len));
      memcpy(at, c->offs + 4 * i, sizeof at); /* little-endian host */
      _mm_prefetch((const char *)(c->chars + at[0] + 1024), _MM_HINT_T0);
      __m256i nm[8];
      for (int r = 0; r < 8; r++)
        nm[r] = _mm256_maskz_loadu_epi8(_bzhi_u32(0xFFFFFFFFu, l[r]), c->chars + at[r]);
      __m512i z[4], a[4], w[4];
      for (int q = 0; q < 4; q++)
        z[q] = _mm512_inserti64x4(_mm512_castsi256_si512(nm[2 * q]), nm[2 * q + 1], 1);
      const __m512i even = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13);
      const __m512i odd = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
      const __m512i low = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
      const __m512i high = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
      a[0] = _mm512_permutex2var_epi64(z[0], even, z[1]); /* rows 0-3: w0, w1 */
      a[1] = _mm512_permutex2var_epi64(z[0], odd, z[1]);  /* rows 0-3: w2, w3 */
      a[2] = _mm512_permutex2var_epi64(z[2], even, z[3]); /* rows 4-7: w0, w1 */
      a[3] = _mm512_permutex2var_epi64(z[2], odd, z[3]);  /* rows 4-7: w2, w3 */
      w[0] = _mm512_permutex2var_epi64(a[0], low, a[2]);
      w[1] = _mm512_permutex2var_epi64(a[0], high, a[2]);
      w[2] = _mm512_permutex2var_epi64(a[1], low, a[3]);
      w[3] = _mm512_permutex2var_epi64(a[1], high, a[3]);
      __m512i k = _mm512_loadu_si512(c->keys + 8 * i);
      __m512i v = _mm512_maskz_loadu_epi64(v_ok, c->vals + 8 * i);
      __m512i flags = _mm512_or_si512(_mm512_maskz_set1_epi64(v_ok, 1),
                                      _mm512_maskz_set1_epi64(s_ok, 2));
      __m512i t = _mm512_or_si512(flags, _mm512_slli_epi64(len, 8));
      __m512i acc = _mm512_add_epi64(acc0, mix_words_x8(w[0], w[1], sec + 32));
      acc = _mm512_add_epi64(acc, mix_words_x8(w[1], w[2], sec + 48));
      acc = _mm512_add_epi64(acc, mix_words_x8(k, v, sec));
      acc = _mm512_add_epi64(acc, mix_words_x8(w[3], t, sec + 16));
      acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 37)); /* XXH3_avalanche */
      acc = _mm512_mullo_epi64(acc, mx1);
      acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 32));
      if (!part_of_row) {
        total = _mm512_add_epi64(total, acc);
        continue;
      }
      _mm512_storeu_si512(h, acc);
    }
    for (int r = 0; r < 8; r++) sums[part_of_row[i + r]] += h[r];
  }
  if (!part_of_row) { /* not _mm512_reduce_add_epi64: its adds are signed */
    uint64_t t[8];
    _mm512_storeu_si512(t, total);
    for (int r = 0; r < 8; r++) sums[0] += t[r];
  }
  for (; i < n; i++) sums[part_of_row ? part_of_row[i] : 0] += row_hash(c, i);
}
#endif

#ifdef ROWSUM_AVX512
#define AVX2_TARGET __attribute__((target("avx2")))

/* XXH3_mul128_fold64 in each of 4 lanes (as mul128_fold64_x8). */
AVX2_TARGET static inline __m256i mul128_fold64_x4(__m256i a, __m256i b) {
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF);
  __m256i ah = _mm256_srli_epi64(a, 32), bh = _mm256_srli_epi64(b, 32);
  __m256i ll = _mm256_mul_epu32(a, b), lh = _mm256_mul_epu32(a, bh);
  __m256i hl = _mm256_mul_epu32(ah, b), hh = _mm256_mul_epu32(ah, bh);
  __m256i cross = _mm256_add_epi64(
      _mm256_add_epi64(_mm256_srli_epi64(ll, 32), _mm256_and_si256(lh, lo32)), hl);
  __m256i hi = _mm256_add_epi64(_mm256_add_epi64(hh, _mm256_srli_epi64(lh, 32)),
                                _mm256_srli_epi64(cross, 32));
  __m256i lo = _mm256_or_si256(_mm256_slli_epi64(cross, 32), _mm256_and_si256(ll, lo32));
  return _mm256_xor_si256(lo, hi);
}

AVX2_TARGET static inline __m256i mix_words_x4(__m256i lo, __m256i hi, const uint8_t *secret) {
  __m256i s0 = _mm256_set1_epi64x((long long)XXH_readLE64(secret));
  __m256i s1 = _mm256_set1_epi64x((long long)XXH_readLE64(secret + 8));
  return mul128_fold64_x4(_mm256_xor_si256(lo, s0), _mm256_xor_si256(hi, s1));
}

/* The low 64 bits of a * b in each lane (AVX2 has no 64-bit multiply). */
AVX2_TARGET static inline __m256i mullo64_x4(__m256i a, __m256i b) {
  __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)),
                                   _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}

/* The 4 validity bits of rows [i, i + 4) as lanes of all ones or zeros
 * (all ones without a bitmap). */
AVX2_TARGET static inline __m256i bits4(const uint8_t *bits, int64_t off, int64_t i) {
  if (!bits) return _mm256_set1_epi64x(-1);
  int64_t at = off + i;
  const uint8_t *p = bits + (at >> 3);
  unsigned sh = (unsigned)(at & 7);
  unsigned v = (sh > 4 ? (p[0] | (unsigned)p[1] << 8) >> sh : (unsigned)p[0] >> sh) & 15u;
  const __m256i lane = _mm256_setr_epi64x(1, 2, 4, 8);
  return _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x((long long)v), lane), lane);
}

/* Rows [0, n) 4 at a time in vector registers: validity, offsets and
 * lengths, each row's 32 name bytes loaded whole and masked to its length
 * (row_hash's WINDOW), the 4 x 4 words transposed, the record hash's four
 * mixes and its avalanche (AVX2 has no 64-bit multiply: emulated). A
 * group with a name past 32 bytes, or one that starts within 32 bytes of
 * the chars buffer's end, takes row_hash row by row, as do the last n % 4
 * rows. Adds to sums as fsh_task_row_checksums. */
AVX2_TARGET static void row_checksums_avx2(const row_cols *c, int64_t n,
                                           const int32_t *part_of_row, uint64_t *sums) {
  const uint8_t *sec = XXH3_kSecret;
  const __m256i acc0 = _mm256_set1_epi64x((long long)(RECORD_BYTES * XXH_PRIME64_1));
  const __m256i mx1 = _mm256_set1_epi64x((long long)0x165667919E3779F9ULL);
  const __m256i name_max = _mm256_set1_epi64x(RECORD_NAME_BYTES);
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF);
  const __m256i room = _mm256_set1_epi64x(c->chars_size - RECORD_NAME_BYTES);
  __m256i total = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm_prefetch((const char *)(c->keys + 8 * i + 1024), _MM_HINT_T0);
    _mm_prefetch((const char *)(c->vals + 8 * i + 1024), _MM_HINT_T0);
    _mm_prefetch((const char *)(c->offs + 4 * i + 512), _MM_HINT_T0);
    __m256i v_ok = bits4(c->v_bits, c->v_off, i), s_ok = bits4(c->s_bits, c->s_off, i);
    __m256i lo = _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(c->offs + 4 * i)));
    __m256i hi = _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(c->offs + 4 * i + 4)));
    /* uint32 hi - lo, 0 when null */
    __m256i len = _mm256_and_si256(_mm256_and_si256(_mm256_sub_epi64(hi, lo), lo32), s_ok);
    uint64_t h[4];
    if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpgt_epi64(len, name_max),
                                             _mm256_cmpgt_epi64(lo, room)))) {
      for (int r = 0; r < 4; r++) h[r] = row_hash(c, i + r); /* rare */
    } else {
      uint32_t l[4], at[4];
      _mm_storeu_si128((__m128i *)l, _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
                                         len, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6))));
      memcpy(at, c->offs + 4 * i, sizeof at); /* little-endian host */
      __m256i nm[4];
      for (int r = 0; r < 4; r++)
        nm[r] = _mm256_and_si256(
            _mm256_loadu_si256((const __m256i *)(c->chars + at[r])),
            _mm256_loadu_si256((const __m256i *)(WINDOW + RECORD_NAME_BYTES - l[r])));
      __m256i t0 = _mm256_unpacklo_epi64(nm[0], nm[1]), t1 = _mm256_unpackhi_epi64(nm[0], nm[1]);
      __m256i t2 = _mm256_unpacklo_epi64(nm[2], nm[3]), t3 = _mm256_unpackhi_epi64(nm[2], nm[3]);
      __m256i w0 = _mm256_permute2x128_si256(t0, t2, 0x20);
      __m256i w1 = _mm256_permute2x128_si256(t1, t3, 0x20);
      __m256i w2 = _mm256_permute2x128_si256(t0, t2, 0x31);
      __m256i w3 = _mm256_permute2x128_si256(t1, t3, 0x31);
      __m256i k = _mm256_loadu_si256((const __m256i *)(c->keys + 8 * i));
      __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(c->vals + 8 * i)), v_ok);
      __m256i flags = _mm256_or_si256(_mm256_and_si256(v_ok, _mm256_set1_epi64x(1)),
                                      _mm256_and_si256(s_ok, _mm256_set1_epi64x(2)));
      __m256i t = _mm256_or_si256(flags, _mm256_slli_epi64(len, 8));
      __m256i acc = _mm256_add_epi64(acc0, mix_words_x4(w0, w1, sec + 32));
      acc = _mm256_add_epi64(acc, mix_words_x4(w1, w2, sec + 48));
      acc = _mm256_add_epi64(acc, mix_words_x4(k, v, sec));
      acc = _mm256_add_epi64(acc, mix_words_x4(w3, t, sec + 16));
      acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 37)); /* XXH3_avalanche */
      acc = mullo64_x4(acc, mx1);
      acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 32));
      if (!part_of_row) {
        total = _mm256_add_epi64(total, acc);
        continue;
      }
      _mm256_storeu_si256((__m256i *)h, acc);
    }
    if (!part_of_row) {
      for (int r = 0; r < 4; r++) sums[0] += h[r];
      continue;
    }
    for (int r = 0; r < 4; r++) sums[part_of_row[i + r]] += h[r];
  }
  if (!part_of_row) {
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, total);
    for (int r = 0; r < 4; r++) sums[0] += t[r];
  }
  for (; i < n; i++) sums[part_of_row ? part_of_row[i] : 0] += row_hash(c, i);
}
#endif

/* The fastest path up to `want` this CPU runs (checked per call: cheap). */
static fsh_rowsum_path rowsum_path_for(fsh_rowsum_path want) {
#ifdef ROWSUM_AVX512
  if (want >= FSH_ROWSUM_AVX512 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2"))
    return FSH_ROWSUM_AVX512;
  if (want >= FSH_ROWSUM_AVX2 && __builtin_cpu_supports("avx2")) return FSH_ROWSUM_AVX2;
#else
  (void)want;
#endif
  return FSH_ROWSUM_SCALAR;
}

void fsh_task_row_checksums(const fsh_batch *b, const int32_t *part_of_row, uint64_t *sums) {
  (void)fsh_task_row_checksums_path(b, part_of_row, sums, FSH_ROWSUM_BEST);
}

fsh_rowsum_path fsh_task_row_checksums_path(const fsh_batch *b, const int32_t *part_of_row,
                                            uint64_t *sums, fsh_rowsum_path want) {
  row_cols c = cols_of(b);
  fsh_rowsum_path path = rowsum_path_for(want);
#ifdef ROWSUM_AVX512
  if (path == FSH_ROWSUM_AVX512) {
    row_checksums_avx512(&c, b->length, part_of_row, sums);
    return path;
  }
  if (path == FSH_ROWSUM_AVX2) {
    row_checksums_avx2(&c, b->length, part_of_row, sums);
    return path;
  }
#endif
  row_checksums_scalar(&c, b->length, part_of_row, sums);
  return FSH_ROWSUM_SCALAR;
}

/* ---- running a map task ------------------------------------------------ */

void fsh_map_task_result_reset(fsh_map_task_result *r) {
  if (!r) return;
  fsh_map_output_reset(&r->output);
  fsh_free(r->row_checksums);
  memset(r, 0, sizeof *r);
}

static int check_map_task(const fsh_map_task *t, fsh_error *err) {
  if (t->map_id < 0 || t->attempt < 0)
    return fsh_error_set(err, EINVAL, "map %" PRId64 " attempt %d: negative id", t->map_id,
                         t->attempt);
  if (t->n_partitions < 1 || t->n_partitions > TASK_MAX_PARTITIONS)
    return fsh_error_set(err, EINVAL, "%d partitions (1 .. %d)", t->n_partitions,
                         TASK_MAX_PARTITIONS);
  if (t->batch_rows < 1 || t->batch_rows > TASK_MAX_PARTITIONS)
    return fsh_error_set(err, EINVAL, "batch_rows %d (1 .. %d)", t->batch_rows,
                         TASK_MAX_PARTITIONS);
  if (t->first_row < 0 || t->rows < 0 || t->first_row % t->batch_rows != 0 ||
      t->rows > INT64_MAX - t->first_row - t->batch_rows)
    return fsh_error_set(err, EINVAL, "rows [%" PRId64 ", +%" PRId64 "): first_row must be a "
                         "non-negative multiple of batch_rows %d, rows non-negative",
                         t->first_row, t->rows, t->batch_rows);
  if ((unsigned)t->compression > FSH_COMPRESSION_ZSTD)
    return fsh_error_set(err, EINVAL, "compression %d", (int)t->compression);
  if ((unsigned)t->backend > FSH_TASK_BACKEND_FLIGHT)
    return fsh_error_set(err, EINVAL, "backend %d", (int)t->backend);
  return 0;
}

/* One batch: hash, partition, checksum, then its rows to their partitions
 * (scattered into the writer's partition builders, or fsh_scatter and a
 * write per part: fsh_shuffle_write_rows). */
static int map_batch(fsh_shuffle_writer *w, fsh_batch *b, int32_t key_col, int32_t n_parts,
                     uint64_t *hashes, int32_t *parts, fsh_batch **outs, uint64_t *sums,
                     fsh_error *err) {
  FSH_RETURN_NOT_OK(fsh_hash_columns(b, &key_col, 1, 0, hashes, err));
  FSH_RETURN_NOT_OK(fsh_partition_hash(hashes, b->length, n_parts, parts, err));
  fsh_task_row_checksums(b, parts, sums);
  return fsh_shuffle_write_rows(w, b, parts, n_parts, outs, err);
}

int fsh_map_task_run(fsh_shuffle_backend *b, const fsh_map_task *t, fsh_map_task_result *out,
                     fsh_error *err) {
  int64_t t0 = now_nanos();
  int rc = check_map_task(t, err);
  if (rc != 0) goto prefix;
  fsh_map_task_result r = {0};
  fsh_schema *schema = fsh_synthetic_schema();
  int32_t R = t->n_partitions;
  uint64_t *hashes = fsh_malloc(sizeof(uint64_t) * (size_t)t->batch_rows);
  int32_t *parts = fsh_malloc(sizeof(int32_t) * (size_t)t->batch_rows);
  fsh_batch **outs = fsh_calloc((size_t)R, sizeof *outs);
  r.row_checksums = fsh_calloc((size_t)R, sizeof *r.row_checksums);
  fsh_shuffle_writer *w = NULL;
  if (!schema || !hashes || !parts || !outs || !r.row_checksums) {
    rc = fsh_error_set(err, ENOMEM, "out of memory");
    goto done;
  }
  fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = R, .schema = schema,
                           .compression = t->compression};
  rc = fsh_shuffle_open_writer(b, &spec, t->map_id, t->attempt, &w, err);
  fsh_synthetic_options so = {.seed = t->seed, .with_nulls = true};
  /* the generated batch, refilled in place while the writer keeps no
   * reference to it (the flight and fs writers copy its rows) */
  fsh_batch *full = NULL;
  for (int64_t done = 0; rc == 0 && done < t->rows;) {
    int64_t index = (t->first_row + done) / t->batch_rows;
    int64_t n = t->rows - done < t->batch_rows ? t->rows - done : t->batch_rows;
    fsh_batch *batch = NULL;
    if (fsh_worker_task_cancelled()) { /* superseded: the worker was asked to stop it */
      rc = fsh_error_set(err, ECANCELED, "map %" PRId64 " attempt %d cancelled after %" PRId64
                         " of %" PRId64 " rows", t->map_id, t->attempt, done, t->rows);
      break;
    }
    rc = fsh_synthetic_batch_refill(schema, &so, index, t->batch_rows, &full, err);
    if (rc == 0 && !(batch = n < t->batch_rows ? fsh_batch_slice(full, 0, n)
                                               : fsh_batch_ref(full)))
      rc = fsh_error_set(err, ENOMEM, "out of memory");
    if (rc == 0) {
      r.input_rows += batch->length;
      r.input_bytes += fsh_shuffle_batch_bytes(batch);
    }
    /* Into partition builders (write_rows) in slices that stay in L2
     * between the passes over them (hash, checksums, scatter): the same
     * rows in the same order. (A writer without builders gets whole
     * batches: each write_rows call is a batch per partition there.) */
    int64_t step = !w->write_rows ? n : map_slice_rows(n, R);
    for (int64_t at = 0; rc == 0 && at < n; at += step) {
      int64_t len = n - at < step ? n - at : step;
      fsh_batch *piece = len == n ? fsh_batch_ref(batch) : fsh_batch_slice(batch, at, len);
      if (!piece) rc = fsh_error_set(err, ENOMEM, "out of memory");
      if (rc == 0) rc = map_batch(w, piece, 0, R, hashes, parts, outs, r.row_checksums, err);
      fsh_batch_unref(piece);
    }
    fsh_batch_unref(batch);
    done += n;
  }
  fsh_batch_unref(full);
  if (rc == 0) {
    fsh_shuffle_writer *closing = w;
    w = NULL;
    rc = closing->close(closing, &r.output, err);
  }
done:
  if (w) w->abort(w);
  fsh_free(hashes);
  fsh_free(parts);
  fsh_free(outs);
  fsh_schema_unref(schema);
  if (rc != 0) {
    fsh_map_task_result_reset(&r);
    goto prefix;
  }
  r.nanos = now_nanos() - t0;
  *out = r;
  return 0;
prefix:
  return fsh_error_prefix(err, rc, "map task %" PRId64 " attempt %d of shuffle %" PRIu64 ": ",
                          t->map_id, t->attempt, t->shuffle_id);
}

/* ---- reduce-then-map --------------------------------------------------- */

typedef struct rm_ctx {
  fsh_shuffle_writer *w;
  const fsh_reduce_map_task *t;
  int64_t cap;
  uint64_t *hashes;
  int32_t *parts;
  fsh_batch **outs;
  fsh_map_task_result *r;
} rm_ctx;

static int rm_batch(void *p, fsh_batch *b, fsh_error *err) {
  rm_ctx *c = p;
  if (fsh_worker_task_cancelled())
    return fsh_error_set(err, ECANCELED, "reduce-then-map %" PRId64 " attempt %d cancelled",
                         c->t->map_id, c->t->attempt);
  if (b->length > c->cap) {
    int64_t cap = b->length > 2 * c->cap ? b->length : 2 * c->cap;
    uint64_t *h = fsh_malloc(sizeof *h * (size_t)cap);
    int32_t *q = fsh_malloc(sizeof *q * (size_t)cap);
    if (!h || !q) {
      fsh_free(h), fsh_free(q);
      return fsh_error_set(err, ENOMEM, "out of memory");
    }
    fsh_free(c->hashes), fsh_free(c->parts);
    c->hashes = h, c->parts = q, c->cap = cap;
  }
  c->r->input_rows += b->length;
  c->r->input_bytes += fsh_shuffle_batch_bytes(b);
  return map_batch(c->w, b, c->t->key_column, c->t->out_partitions, c->hashes, c->parts, c->outs,
                   c->r->row_checksums, err);
}

void fsh_reduce_map_task_reset(fsh_reduce_map_task *t) {
  if (!t) return;
  fsh_reduce_task_reset(&t->in);
  memset(t, 0, sizeof *t);
}

static int check_reduce_map(const fsh_reduce_map_task *t, fsh_error *err) {
  if (t->map_id < 0 || t->attempt < 0 || t->out_partitions < 1 ||
      t->out_partitions > TASK_MAX_PARTITIONS || t->key_column < 0 || t->key_column > 2 ||
      (unsigned)t->compression > FSH_COMPRESSION_ZSTD || t->in.incremental)
    return fsh_error_set(err, EINVAL, "map %" PRId64 " attempt %d, %d partitions (1 .. %d), key "
                         "column %d (0 .. 2), compression %d, incremental %d: malformed",
                         t->map_id, t->attempt, t->out_partitions, TASK_MAX_PARTITIONS,
                         t->key_column, (int)t->compression, (int)t->in.incremental);
  return 0;
}

int fsh_reduce_map_task_run(fsh_shuffle_backend *b, const fsh_reduce_map_task *t,
                            fsh_map_task_result *out, fsh_error *err) {
  int64_t t0 = now_nanos();
  int rc = check_reduce_map(t, err);
  fsh_map_task_result r = {0};
  fsh_schema *schema = NULL;
  rm_ctx c = {.t = t, .r = &r};
  if (rc != 0) goto prefix;
  int32_t R = t->out_partitions;
  schema = fsh_synthetic_schema();
  c.outs = fsh_calloc((size_t)R, sizeof *c.outs);
  r.row_checksums = fsh_calloc((size_t)R, sizeof *r.row_checksums);
  if (!schema || !c.outs || !r.row_checksums) {
    rc = fsh_error_set(err, ENOMEM, "out of memory");
    goto done;
  }
  fsh_shuffle_spec spec = {.shuffle_id = t->out_shuffle_id, .n_partitions = R, .schema = schema,
                           .compression = t->compression};
  rc = fsh_shuffle_open_writer(b, &spec, t->map_id, t->attempt, &c.w, err);
  if (rc == 0) rc = fsh_reduce_task_each(b, &t->in, rm_batch, &c, err);
  if (rc == 0) {
    fsh_shuffle_writer *closing = c.w;
    c.w = NULL;
    rc = closing->close(closing, &r.output, err);
  }
done:
  if (c.w) c.w->abort(c.w);
  fsh_free(c.hashes);
  fsh_free(c.parts);
  fsh_free(c.outs);
  fsh_schema_unref(schema);
  if (rc == 0) {
    r.nanos = now_nanos() - t0;
    *out = r;
    return 0;
  }
  fsh_map_task_result_reset(&r);
prefix:
  return fsh_error_prefix(err, rc, "reduce-then-map task of partition %d of shuffle %" PRIu64
                          " into map %" PRId64 " attempt %d of shuffle %" PRIu64 ": ",
                          t->in.partition, t->in.shuffle_id, t->map_id, t->attempt,
                          t->out_shuffle_id);
}

#define RM_MAGIC "FSRM"
#define RM_HEADER 40

int fsh_reduce_map_task_encode(const fsh_reduce_map_task *t, fsh_buffer **out, fsh_error *err) {
  FSH_RETURN_NOT_OK(check_reduce_map(t, err));
  fsh_buffer *in = NULL;
  FSH_RETURN_NOT_OK(fsh_reduce_task_encode(&t->in, &in, err));
  fsh_buffer *b = fsh_buffer_new(RM_HEADER + in->size, true);
  if (!b) {
    fsh_buffer_unref(in);
    return fsh_error_set(err, ENOMEM, "reduce-then-map task: out of memory");
  }
  uint8_t *p = b->data;
  memcpy(p, RM_MAGIC, 4);
  p[4] = 1;
  fsh_le_put64(p + 8, t->out_shuffle_id);
  fsh_le_put64(p + 16, (uint64_t)t->map_id);
  fsh_le_put32(p + 24, (uint32_t)t->attempt);
  fsh_le_put32(p + 28, (uint32_t)t->out_partitions);
  fsh_le_put32(p + 32, (uint32_t)t->key_column);
  p[36] = (uint8_t)t->compression;
  memcpy(p + RM_HEADER, in->data, (size_t)in->size);
  fsh_buffer_unref(in);
  *out = b;
  return 0;
}

int fsh_reduce_map_task_decode(const uint8_t *p, int64_t size, fsh_reduce_map_task *out,
                               fsh_error *err) {
  if (size < RM_HEADER || memcmp(p, RM_MAGIC, 4) != 0 || p[4] != 1 || p[5] || p[6] || p[7] ||
      p[37] || p[38] || p[39])
    return fsh_error_set(err, EINVAL, "reduce-then-map: the body must start with " RM_MAGIC
                         ", version 1 and a %d-byte header (got %" PRId64 " bytes)", RM_HEADER,
                         size);
  fsh_reduce_map_task t = {.out_shuffle_id = fsh_le_get64(p + 8),
                           .map_id = (int64_t)fsh_le_get64(p + 16),
                           .attempt = (int32_t)fsh_le_get32(p + 24),
                           .out_partitions = (int32_t)fsh_le_get32(p + 28),
                           .key_column = (int32_t)fsh_le_get32(p + 32),
                           .compression = (fsh_compression)p[36]};
  int rc = fsh_reduce_task_decode(p + RM_HEADER, size - RM_HEADER, &t.in, err);
  if (rc != 0) return fsh_error_prefix(err, rc, "reduce-then-map: ");
  if ((rc = check_reduce_map(&t, err)) != 0) {
    fsh_reduce_map_task_reset(&t);
    return fsh_error_prefix(err, rc, "reduce-then-map: ");
  }
  *out = t;
  return 0;
}

/* ---- wire -------------------------------------------------------------- */

int fsh_map_task_encode(const fsh_map_task *t, fsh_buffer **out, fsh_error *err) {
  fsh_buffer *b = fsh_buffer_new(MAP_TASK_BYTES, true);
  if (!b) return fsh_error_set(err, ENOMEM, "map task: out of memory");
  uint8_t *p = b->data;
  memcpy(p, MAP_TASK_MAGIC, 4);
  p[4] = 1;
  fsh_le_put64(p + 8, t->shuffle_id);
  fsh_le_put64(p + 16, (uint64_t)t->map_id);
  fsh_le_put32(p + 24, (uint32_t)t->attempt);
  fsh_le_put32(p + 28, (uint32_t)t->n_partitions);
  fsh_le_put64(p + 32, (uint64_t)t->first_row);
  fsh_le_put64(p + 40, (uint64_t)t->rows);
  fsh_le_put64(p + 48, t->seed);
  fsh_le_put32(p + 56, (uint32_t)t->batch_rows);
  p[60] = (uint8_t)t->compression;
  p[61] = (uint8_t)t->backend;
  *out = b;
  return 0;
}

int fsh_map_task_decode(const uint8_t *p, int64_t size, fsh_map_task *out, fsh_error *err) {
  if (size != MAP_TASK_BYTES || memcmp(p, MAP_TASK_MAGIC, 4) != 0)
    return fsh_error_set(err, EINVAL, "map-synthetic: the body must be %d bytes starting with "
                         MAP_TASK_MAGIC " (got %" PRId64 " bytes)", MAP_TASK_BYTES, size);
  if (p[4] != 1 || p[5] || p[6] || p[7] || p[62] || p[63])
    return fsh_error_set(err, EINVAL, "map-synthetic: version %u or reserved bytes not "
                         "supported (version 1, zeros)", p[4]);
  fsh_map_task t = {
      .shuffle_id = fsh_le_get64(p + 8),
      .map_id = (int64_t)fsh_le_get64(p + 16),
      .attempt = (int32_t)fsh_le_get32(p + 24),
      .n_partitions = (int32_t)fsh_le_get32(p + 28),
      .first_row = (int64_t)fsh_le_get64(p + 32),
      .rows = (int64_t)fsh_le_get64(p + 40),
      .seed = fsh_le_get64(p + 48),
      .batch_rows = (int32_t)fsh_le_get32(p + 56),
      .compression = (fsh_compression)p[60],
      .backend = (fsh_task_backend)p[61],
  };
  int rc = check_map_task(&t, err);
  if (rc != 0) return fsh_error_prefix(err, rc, "map-synthetic: ");
  *out = t;
  return 0;
}

int fsh_map_task_result_encode(const fsh_map_task_result *r, fsh_buffer **out, fsh_error *err) {
  fsh_buffer *put = NULL;
  FSH_RETURN_NOT_OK(fsh_put_result_encode(&r->output, &put, err));
  const char *loc = r->output.location ? r->output.location : "";
  int64_t L = (int64_t)strlen(loc), padded = (L + 7) / 8 * 8, n = r->output.n_partitions;
  int64_t size = MAP_RESULT_HEADER_BYTES + padded + 8 * n + put->size;
  fsh_buffer *b = fsh_buffer_new(size, true);
  if (!b) {
    fsh_buffer_unref(put);
    return fsh_error_set(err, ENOMEM, "map task answer: out of memory");
  }
  uint8_t *p = b->data;
  memcpy(p, MAP_RESULT_MAGIC, 4);
  p[4] = 1;
  fsh_le_put64(p + 8, (uint64_t)r->nanos);
  fsh_le_put64(p + 16, (uint64_t)r->input_rows);
  fsh_le_put64(p + 24, (uint64_t)r->input_bytes);
  fsh_le_put32(p + 32, (uint32_t)n);
  fsh_le_put32(p + 36, (uint32_t)L);
  memcpy(p + MAP_RESULT_HEADER_BYTES, loc, (size_t)L);
  uint8_t *c = p + MAP_RESULT_HEADER_BYTES + padded;
  for (int64_t i = 0; i < n; i++) fsh_le_put64(c + 8 * i, r->row_checksums[i]);
  memcpy(c + 8 * n, put->data, (size_t)put->size);
  fsh_buffer_unref(put);
  *out = b;
  return 0;
}

int fsh_map_task_result_decode(const uint8_t *p, int64_t size, fsh_map_task_result *out,
                               fsh_error *err) {
  if (size < MAP_RESULT_HEADER_BYTES || memcmp(p, MAP_RESULT_MAGIC, 4) != 0 || p[4] != 1)
    return fsh_error_set(err, EINVAL, "not a map task answer (%" PRId64 " bytes)", size);
  int64_t n = fsh_le_get32(p + 32), L = fsh_le_get32(p + 36), padded = (L + 7) / 8 * 8;
  if (n < 1 || n > TASK_MAX_PARTITIONS || L > 4096 ||
      size != MAP_RESULT_HEADER_BYTES + padded + 8 * n + 32 + 24 * n)
    return fsh_error_set(err, EINVAL, "map task answer: %" PRId64 " partitions, location of %"
                         PRId64 " bytes in %" PRId64 " bytes: malformed", n, L, size);
  fsh_map_task_result r = {0};
  const uint8_t *c = p + MAP_RESULT_HEADER_BYTES + padded;
  FSH_RETURN_NOT_OK(fsh_shuffle_put_result_decode(c + 8 * n, 32 + 24 * n, &r.output, err));
  if (r.output.n_partitions != n) {
    fsh_map_task_result_reset(&r);
    return fsh_error_set(err, EINVAL, "map task answer: %" PRId64 " row checksums for %d "
                         "partitions", n, r.output.n_partitions);
  }
  r.row_checksums = fsh_malloc(sizeof(uint64_t) * (size_t)n);
  r.output.location = fsh_malloc((size_t)L + 1);
  if (!r.row_checksums || !r.output.location) {
    fsh_map_task_result_reset(&r);
    return fsh_error_set(err, ENOMEM, "map task answer: out of memory");
  }
  memcpy(r.output.location, p + MAP_RESULT_HEADER_BYTES, (size_t)L);
  r.output.location[L] = '\0';
  for (int64_t i = 0; i < n; i++) r.row_checksums[i] = fsh_le_get64(c + 8 * i);
  r.nanos = (int64_t)fsh_le_get64(p + 8);
  r.input_rows = (int64_t)fsh_le_get64(p + 16);
  r.input_bytes = (int64_t)fsh_le_get64(p + 24);
  *out = r;
  return 0;
}
