/* plan_checksum_ref.h -- the plan exchanges' row checksum (the definition
 * atop src/exec/plan_checksum.c) computed naively, row by row and value by
 * value, for the tests that check what plan-fragment tasks report:
 * test_plan_checksum.c (against plan_row_checksum) and test_plan_task.c
 * (against the sums the tasks answered). Header-only. */
#ifndef FSH_TESTS_EXEC_PLAN_CHECKSUM_REF_H
#define FSH_TESTS_EXEC_PLAN_CHECKSUM_REF_H

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <flightshuffle/kernels.h>

#include "../test.h"

static inline uint64_t pcr_round(uint64_t acc, uint64_t w) {
  acc = acc + w * 0xC2B2AE3D27D4EB4Full;
  acc = (acc << 31) | (acc >> 33);
  return acc * 0x9E3779B185EBCA87ull;
}

static inline uint64_t pcr_fmix(uint64_t h) {
  h = (h ^ (h >> 33)) * 0xFF51AFD7ED558CCDull;
  h = (h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}

/* Bytes of a value read as a little-endian integer (1..8 bytes). */
static inline uint64_t pcr_le(const uint8_t *p, int width) {
  uint64_t w = 0;
  for (int j = 0; j < width; j++) w |= (uint64_t)p[j] << (8 * j);
  return w;
}

/* High xor low 64 bits of the 128-bit product a * b, by 32-bit halves. */
static inline uint64_t pcr_fold(uint64_t a, uint64_t b) {
  uint64_t al = a & 0xFFFFFFFFu, ah = a >> 32, bl = b & 0xFFFFFFFFu, bh = b >> 32;
  uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  uint64_t mid = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu);
  uint64_t lo = (ll & 0xFFFFFFFFu) | (mid << 32);
  uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
  return lo ^ hi;
}

/* The word of a binary value: up to 32 bytes zero-padded to four words,
 * mixed with its length; longer ones XXH3_64bits. */
static inline uint64_t pcr_bytes_word(const uint8_t *p, size_t n) {
  if (n > 32) return XXH3_64bits(p, n);
  uint8_t v[32] = {0};
  if (n) memcpy(v, p, n);
  uint64_t w[4];
  for (int k = 0; k < 4; k++) w[k] = pcr_le(v + 8 * k, 8);
  uint64_t h = (uint64_t)n * 0x9E3779B185EBCA87ull + pcr_fold(w[0] ^ 0xBE4BA423396CFEB8ull,
                                                              w[1] ^ 0x1CAD21F72C81017Cull) +
               pcr_fold(w[2] ^ 0xDB979083E96DD4DEull, w[3] ^ 0x1F67B3B7A4A44072ull);
  return h;
}

/* The word of slot i (relative to a->offset) of column a, field f; *null:
 * the slot is null per the column's validity bitmap. */
static inline uint64_t pcr_word(const fsh_field *f, fsh_array *a, int64_t i, bool *null) {
  bool has_bitmap = f->type != FSH_TYPE_NA && (f->dictionary || !fsh_type_is_union(f->type)) &&
                    a->n_buffers > 0 && a->buffers[0];
  *null = has_bitmap && !fsh_bit_get(a->buffers[0]->data, a->offset + i);
  if (*null) return 0;
  int64_t slot = a->offset + i;
  if (!f->dictionary) {
    switch (f->type) {
      case FSH_TYPE_BOOL: return fsh_bit_get(a->buffers[1]->data, slot);
      case FSH_TYPE_INT8: case FSH_TYPE_UINT8:
        return pcr_le(a->buffers[1]->data + slot, 1);
      case FSH_TYPE_INT16: case FSH_TYPE_UINT16: case FSH_TYPE_FLOAT16:
        return pcr_le(a->buffers[1]->data + 2 * slot, 2);
      case FSH_TYPE_INT32: case FSH_TYPE_UINT32: case FSH_TYPE_FLOAT32: case FSH_TYPE_DATE32:
      case FSH_TYPE_TIME32: case FSH_TYPE_INTERVAL_MONTHS:
        return pcr_le(a->buffers[1]->data + 4 * slot, 4);
      case FSH_TYPE_INT64: case FSH_TYPE_UINT64: case FSH_TYPE_FLOAT64: case FSH_TYPE_DATE64:
      case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION:
      case FSH_TYPE_INTERVAL_DAY_TIME:
        return pcr_le(a->buffers[1]->data + 8 * slot, 8);
      case FSH_TYPE_BINARY: case FSH_TYPE_STRING: {
        const uint8_t *o = a->buffers[1]->data;
        int64_t s = (int64_t)pcr_le(o + 4 * slot, 4), e = (int64_t)pcr_le(o + 4 * slot + 4, 4);
        return pcr_bytes_word(a->buffers[2] ? a->buffers[2]->data + s : NULL, (size_t)(e - s));
      }
      case FSH_TYPE_LARGE_BINARY: case FSH_TYPE_LARGE_STRING: {
        const uint8_t *o = a->buffers[1]->data;
        int64_t s = (int64_t)pcr_le(o + 8 * slot, 8), e = (int64_t)pcr_le(o + 8 * slot + 8, 8);
        return pcr_bytes_word(a->buffers[2] ? a->buffers[2]->data + s : NULL, (size_t)(e - s));
      }
      default: break;
    }
  }
  /* every other type: fsh_hash_array's hash of the one value */
  fsh_array *one = fsh_array_slice(a, i, 1);
  uint64_t h = 0;
  fsh_error err;
  CHECK(one != NULL);
  if (one) CHECK_OK(fsh_hash_array(f, one, 0, &h, &err));
  fsh_array_unref(one);
  return h;
}

/* The checksum of rows [0, b->length) of b, row by row. */
static inline uint64_t pcr_checksum(const fsh_batch *b) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < b->length; i++) {
    uint64_t acc = 0x27D4EB2F165667C5ull;
    for (int64_t c = 0; c < b->n_columns; c++) {
      bool null;
      uint64_t w = pcr_word(&b->schema->fields[c], b->columns[c], i, &null);
      if (null) {
        acc = pcr_round(pcr_round(acc, 0x165667B19E3779F9ull), 0x165667B19E3779F9ull);
      } else {
        acc = pcr_round(acc, w);
      }
    }
    sum += pcr_fmix(acc);
  }
  return sum;
}

#endif
