/* plan_checksum.c -- the row checksum of plan exchanges (plan_row_checksum):
 * what a plan-fragment task reports for every partition it writes and
 * every exchange it reads, so that the driver can check that each
 * partition was read exactly as written (a multiset of rows: order and
 * batching do not matter; a changed, swapped, dropped or duplicated row
 * does).
 *
 * Definition (per row, columns in order):
 *   acc = ROW_SEED
 *   per column c: acc = round(acc, word_c(row)); a null slot (per the
 *                 column's validity bitmap; unions and the null type have
 *                 none) instead acc = round(round(acc, NULL_WORD), NULL_WORD)
 *   row hash = fmix64(acc) (murmur3's finalizer); the checksum adds the
 *   row hashes mod 2^64.
 * round(acc, w) = rotl64(acc + w * P2, 31) * P1 (xxh64's round: a bijection
 * of acc for each w and of w for each acc, so a single changed word always
 * changes the row hash). word_c: fixed-width values of up to 8 bytes (ints,
 * floats, dates, times, intervals) the value's bytes zero-extended (little
 * endian; floats by their bits); bool 0 / 1; binary and utf8 (both offset
 * widths) of n <= 32 bytes: n * P1 + fold(w0 ^ K0, w1 ^ K1) +
 * fold(w2 ^ K2, w3 ^ K3), w0..w3 the bytes zero-padded to 32 read as
 * little-endian words, fold(a, b) the high xor the low 64 bits of the
 * 128-bit product a * b; longer ones XXH3_64bits of the bytes; every other type
 * (wider fixed-width, nested, dictionary-encoded, null type)
 * fsh_hash_array(seed 0), the logical hash of the value. Independent of
 * slicing, offsets and buffers, never reading a null slot's bytes.
 *
 * Computed column by column over chunks of CHUNK rows, so that the row
 * states stay in L1: per value a multiply-rotate instead of the xxh3 call
 * and the per-column combine of fsh_hash_columns. */
#include "exec/plan_run_internal.h"
#include "kernels/kernels_internal.h"

#define XXH_INLINE_ALL /* header-only use of Debian's libxxhash-dev */
#include <xxhash.h>

#define CHUNK 1024
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define ROW_SEED 0x27D4EB2F165667C5ull
#define NULL_WORD 0x165667B19E3779F9ull
#define K0 0xBE4BA423396CFEB8ull /* K0..K3: xxh3's default secret's first 32 bytes */
#define K1 0x1CAD21F72C81017Cull
#define K2 0xDB979083E96DD4DEull
#define K3 0x1F67B3B7A4A44072ull

static inline uint64_t ck_round(uint64_t acc, uint64_t w) {
  acc += w * P2;
  acc = (acc << 31) | (acc >> 33);
  return acc * P1;
}

static inline uint64_t fmix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

/* 0xFF x 32 then 0x00 x 32: the 8 bytes at WINDOW + 32 - n + 8 j keep the
 * bytes of word j of a value that lie before its length n (0 .. 32). */
static const uint8_t WINDOW[64] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255};

/* The word of a binary value of len <= 32 bytes, w[0..3] its bytes
 * zero-padded to 32 as little-endian words: no branch on its length (a
 * length that varies per row mispredicts xxh3's length classes). */
static inline uint64_t short_word(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3,
                                  uint64_t len) {
  return len * P1 + XXH3_mul128_fold64(w0 ^ K0, w1 ^ K1) + XXH3_mul128_fold64(w2 ^ K2, w3 ^ K3);
}

typedef enum { W_FIXED, W_BOOL, W_BINARY, W_LOGICAL } word_kind;

/* How column f's words are formed (W_FIXED: *width bytes). */
static word_kind kind_of(const fsh_field *f, int *width) {
  if (f->dictionary) return W_LOGICAL;
  switch (f->type) {
    case FSH_TYPE_BOOL: return W_BOOL;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      return W_BINARY;
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32: case FSH_TYPE_UINT64:
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64:
    case FSH_TYPE_DATE32: case FSH_TYPE_DATE64: case FSH_TYPE_TIME32: case FSH_TYPE_TIME64:
    case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION: case FSH_TYPE_INTERVAL_MONTHS:
    case FSH_TYPE_INTERVAL_DAY_TIME:
      *width = (int)(fsh_type_bit_width(f) / 8);
      return *width >= 1 && *width <= 8 ? W_FIXED : W_LOGICAL;
    default: return W_LOGICAL;
  }
}

/* The validity bitmap of column a when it has nulls (unions and the null
 * type have none), else NULL. */
static const uint8_t *validity(const fsh_field *f, const fsh_array *a) {
  if (a->null_count == 0 || f->type == FSH_TYPE_NA) return NULL;
  if (fsh_type_is_union(f->type) && !f->dictionary) return NULL;
  return kern_buf(a, 0);
}

/* The words of rows [r0, r0 + n) of column a (field f) into wd[0, n);
 * logical: the column's fsh_hash_array words (W_LOGICAL only). Null
 * slots' words are whatever: the caller overwrites them. */
static void column_words(const fsh_field *f, const fsh_array *a, const uint64_t *logical,
                         int64_t r0, int64_t n, uint64_t *wd) {
  int width = 0;
  word_kind k = kind_of(f, &width);
  int64_t abs = a->offset + r0;
  const uint8_t *p = kern_buf(a, 1);
  if (k == W_LOGICAL) {
    memcpy(wd, logical + r0, (size_t)n * sizeof *wd);
  } else if (!p) { /* no data buffer: only possible for an empty or all-null column */
    memset(wd, 0, (size_t)n * sizeof *wd);
  } else if (k == W_FIXED) {
    p += abs * width;
    switch (width) { /* constant widths: each load one instruction */
      case 8: memcpy(wd, p, (size_t)n * 8); break;
      case 4:
        for (int64_t i = 0; i < n; i++) {
          uint32_t w;
          memcpy(&w, p + 4 * i, 4);
          wd[i] = w;
        }
        break;
      default:
        for (int64_t i = 0; i < n; i++) {
          wd[i] = 0;
          memcpy(&wd[i], p + (int64_t)width * i, (size_t)width);
        }
    }
  } else if (k == W_BOOL) {
    for (int64_t i = 0; i < n; i++) wd[i] = fsh_bit_get(p, abs + i);
  } else { /* W_BINARY */
    int ow = kern_offset_width(f->type);
    const uint8_t *data = kern_buf(a, 2);
    int64_t size = data ? a->buffers[2]->size : 0;
    const uint8_t *valid = validity(f, a);
    static const uint8_t empty[1];
    if (!data) data = empty;
    for (int64_t i = 0; i < n; i++) {
      if (valid && !fsh_bit_get(valid, abs + i)) continue; /* never read a null's bytes */
      int64_t s = kern_read_offset(p, abs + i, ow), e = kern_read_offset(p, abs + i + 1, ow);
      uint64_t len = (uint64_t)(e - s);
      if (len <= 32 && s + 32 <= size) { /* the common case: four masked loads */
        const uint8_t *keep = WINDOW + 32 - len;
        wd[i] = short_word(XXH_readLE64(data + s) & XXH_readLE64(keep),
                           XXH_readLE64(data + s + 8) & XXH_readLE64(keep + 8),
                           XXH_readLE64(data + s + 16) & XXH_readLE64(keep + 16),
                           XXH_readLE64(data + s + 24) & XXH_readLE64(keep + 24), len);
      } else if (len <= 32) { /* near the end of the data buffer */
        uint8_t v[32] = {0};
        if (len) memcpy(v, data + s, len);
        wd[i] = short_word(XXH_readLE64(v), XXH_readLE64(v + 8), XXH_readLE64(v + 16),
                           XXH_readLE64(v + 24), len);
      } else {
        wd[i] = XXH3_64bits(data + s, len);
      }
    }
  }
}

/* plan_row_checksum (pids NULL: every row into *sums) and
 * plan_row_checksum_parts (row i into sums[pids[i]]). */
static int row_checksum(const fsh_batch *b, const int32_t *pids, uint64_t *sums,
                        fsh_error *err) {
  if (b->length == 0) return 0;
  int64_t n = b->length;
  int rc = 0;
  /* W_LOGICAL columns: their words for the whole batch first */
  uint64_t **logical = fsh_calloc((size_t)(b->n_columns ? b->n_columns : 1), sizeof *logical);
  if (!logical) return fsh_error_set(err, ENOMEM, "row checksum: out of memory");
  for (int64_t c = 0; !rc && c < b->n_columns; c++) {
    int width;
    if (kind_of(&b->schema->fields[c], &width) != W_LOGICAL) continue;
    if (!(logical[c] = fsh_malloc((size_t)n * sizeof **logical))) {
      rc = fsh_error_set(err, ENOMEM, "row checksum: out of memory");
      break;
    }
    rc = fsh_hash_array(&b->schema->fields[c], b->columns[c], 0, logical[c], err);
  }
  uint64_t acc[CHUNK], wd[CHUNK], s = 0;
  for (int64_t r0 = 0; !rc && r0 < n; r0 += CHUNK) {
    int64_t m = n - r0 < CHUNK ? n - r0 : CHUNK;
    for (int64_t i = 0; i < m; i++) acc[i] = ROW_SEED;
    for (int64_t c = 0; c < b->n_columns; c++) {
      const fsh_array *a = b->columns[c];
      const uint8_t *valid = validity(&b->schema->fields[c], a);
      int64_t abs = a->offset + r0;
      int width = 0;
      const uint8_t *p = kern_buf(a, 1);
      if (!valid && p && kind_of(&b->schema->fields[c], &width) == W_FIXED && width == 8) {
        p += abs * 8; /* the common case folded in place: no copy to wd */
        for (int64_t i = 0; i < m; i++) acc[i] = ck_round(acc[i], XXH_readLE64(p + 8 * i));
        continue;
      }
      column_words(&b->schema->fields[c], a, logical[c], r0, m, wd);
      if (valid)
        for (int64_t i = 0; i < m; i++)
          if (!fsh_bit_get(valid, abs + i)) wd[i] = NULL_WORD;
      for (int64_t i = 0; i < m; i++) acc[i] = ck_round(acc[i], wd[i]);
      if (valid)
        for (int64_t i = 0; i < m; i++)
          if (!fsh_bit_get(valid, abs + i)) acc[i] = ck_round(acc[i], NULL_WORD);
    }
    if (pids) /* nothing fails past the logical words: sums change only on success */
      for (int64_t i = 0; i < m; i++) sums[pids[r0 + i]] += fmix64(acc[i]);
    else
      for (int64_t i = 0; i < m; i++) s += fmix64(acc[i]);
  }
  for (int64_t c = 0; c < b->n_columns; c++) fsh_free(logical[c]);
  fsh_free(logical);
  if (!rc && !pids) *sums += s;
  return rc;
}

int plan_row_checksum(const fsh_batch *b, uint64_t *sum, fsh_error *err) {
  return row_checksum(b, NULL, sum, err);
}

int plan_row_checksum_parts(const fsh_batch *b, const int32_t *partition_of_row,
                            uint64_t *sums, fsh_error *err) {
  return row_checksum(b, partition_of_row, sums, err);
}

int fsh_plan_batch_checksum(const fsh_batch *b, uint64_t *sum, fsh_error *err) {
  if (!b || !sum) return fsh_error_set(err, EINVAL, "row checksum: NULL argument");
  return plan_row_checksum(b, sum, err);
}
