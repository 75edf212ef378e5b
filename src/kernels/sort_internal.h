/* sort_internal.h -- what the sorting kernels (sort.c, topn.c, merge.c,
 * sample.c) share: the first key's 64-bit order-preserving prefix, the
 * sort entry and the argument check. */
#ifndef FSH_SORT_INTERNAL_H
#define FSH_SORT_INTERNAL_H

#include "kernels/kernels_internal.h"

#include "arrow/numeric.h"

/* How the first key's prefix is computed. */
typedef enum pkind {
  P_NONE,
  P_SIGNED,
  P_UNSIGNED,
  P_FLOAT,
  P_BOOL,
  P_BINARY,  /* first 8 bytes, big-endian, zero-padded */
  P_FIXED,   /* fixed-size binary: the same */
  P_DECIMAL  /* the top 64 bits of the two's-complement value */
} pkind;

typedef struct key0 {
  const fsh_field *f, *vf; /* the column's field; its value field */
  const fsh_array *a, *va; /* the column; its values (a or its dictionary) */
  pkind kind;
  int width; /* P_SIGNED / P_UNSIGNED / P_FLOAT / P_FIXED / P_DECIMAL: bytes;
              * P_BINARY: offset width */
  bool descending;
  uint64_t flip;    /* all ones when descending: xor-ed into every key */
  uint64_t nan_key; /* P_FLOAT: the key of NaN, beside the nulls (0 when
                     * nulls_first, all ones otherwise), whatever the direction */
} key0;

static inline pkind prefix_kind(const fsh_field *vf, int *width) {
  if (vf->dictionary) return P_NONE;
  switch (vf->type) {
    case FSH_TYPE_INT8: *width = 1; return P_SIGNED;
    case FSH_TYPE_INT16: *width = 2; return P_SIGNED;
    case FSH_TYPE_INT32: case FSH_TYPE_DATE32: case FSH_TYPE_TIME32:
    case FSH_TYPE_INTERVAL_MONTHS: *width = 4; return P_SIGNED;
    case FSH_TYPE_INT64: case FSH_TYPE_DATE64: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP:
    case FSH_TYPE_DURATION: *width = 8; return P_SIGNED;
    case FSH_TYPE_UINT8: *width = 1; return P_UNSIGNED;
    case FSH_TYPE_UINT16: *width = 2; return P_UNSIGNED;
    case FSH_TYPE_UINT32: *width = 4; return P_UNSIGNED;
    case FSH_TYPE_UINT64: *width = 8; return P_UNSIGNED;
    case FSH_TYPE_FLOAT16: *width = 2; return P_FLOAT;
    case FSH_TYPE_FLOAT32: *width = 4; return P_FLOAT;
    case FSH_TYPE_FLOAT64: *width = 8; return P_FLOAT;
    case FSH_TYPE_BOOL: return P_BOOL;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: *width = kern_offset_width(vf->type); return P_BINARY;
    case FSH_TYPE_FIXED_SIZE_BINARY: *width = vf->byte_width; return P_FIXED;
    case FSH_TYPE_DECIMAL128: *width = 16; return P_DECIMAL;
    case FSH_TYPE_DECIMAL256: *width = 32; return P_DECIMAL;
    default: return P_NONE;
  }
}

static inline void key0_init(key0 *k, const fsh_batch *b, int32_t col, fsh_sort_key o) {
  k->f = &b->schema->fields[col];
  k->a = b->columns[col];
  k->vf = k->f->dictionary ? &k->f->dictionary->value : k->f;
  k->va = k->f->dictionary ? k->a->dictionary : k->a;
  k->width = 0;
  k->kind = prefix_kind(k->vf, &k->width);
  k->descending = o.descending;
  k->flip = o.descending ? UINT64_MAX : 0;
  k->nan_key = o.nulls_first ? 0 : UINT64_MAX;
}

/* Absolute slot of row's value in k->va, or -1 when null. */
static inline int64_t key0_slot(const key0 *k, int64_t row) {
  int64_t abs = k->a->offset + row;
  if (!kern_slot_valid(k->f, k->a, abs)) return -1;
  if (!k->f->dictionary) return abs;
  int64_t d = k->va->offset + fsh_kern_read_int(k->f->type, kern_buf(k->a, 1), abs);
  return kern_slot_valid(k->vf, k->va, d) ? d : -1;
}

/* A non-NaN double's ascending key, in [0x000FFFFFFFFFFFFF (-inf),
 * 0xFFF0000000000000 (+inf)]: flipped or not, strictly between 0 and all
 * ones, the keys of NaN (key0.nan_key). */
static inline uint64_t float_key(double d) {
  if (d == 0) d = 0.0; /* -0.0 == +0.0 */
  uint64_t u;
  memcpy(&u, &d, 8);
  return u >> 63 ? ~u : u ^ (1ull << 63);
}

/* The ascending prefix of the (valid, non-float) value at slot s. */
static inline uint64_t key0_prefix(const key0 *k, int64_t s) {
  const uint8_t *p = kern_buf(k->va, 1);
  switch (k->kind) {
    case P_SIGNED: {
      int64_t v;
      switch (k->width) {
        case 1: v = ((const int8_t *)p)[s]; break;
        case 2: { int16_t x; memcpy(&x, p + 2 * s, 2); v = x; break; }
        case 4: { int32_t x; memcpy(&x, p + 4 * s, 4); v = x; break; }
        default: memcpy(&v, p + 8 * s, 8); break;
      }
      return (uint64_t)v ^ (1ull << 63);
    }
    case P_UNSIGNED: {
      switch (k->width) {
        case 1: return p[s];
        case 2: { uint16_t x; memcpy(&x, p + 2 * s, 2); return x; }
        case 4: { uint32_t x; memcpy(&x, p + 4 * s, 4); return x; }
        default: { uint64_t x; memcpy(&x, p + 8 * s, 8); return x; }
      }
    }
    case P_FLOAT: return float_key(fsh_float_value(k->vf->type, p, s)); /* not NaN */
    case P_BOOL: return fsh_bit_get(p, s);
    case P_BINARY: {
      int64_t st = kern_read_offset(p, s, k->width), en = kern_read_offset(p, s + 1, k->width);
      int64_t len = en - st < 8 ? en - st : 8;
      const uint8_t *v = kern_buf(k->va, 2) + st;
      uint64_t r = 0;
      for (int64_t i = 0; i < 8; i++) r = (r << 8) | (i < len ? v[i] : 0);
      return r;
    }
    case P_FIXED: {
      const uint8_t *v = p + (int64_t)k->width * s;
      uint64_t r = 0;
      for (int i = 0; i < 8; i++) r = (r << 8) | (i < k->width ? v[i] : 0);
      return r;
    }
    case P_DECIMAL: {
      int64_t hi;
      memcpy(&hi, p + (int64_t)k->width * s + k->width - 8, 8);
      return (uint64_t)hi ^ (1ull << 63);
    }
    case P_NONE: return 0;
  }
  return 0;
}

/* The order-preserving prefix of the (valid) value at slot s, in the
 * key's direction: x sorting before y implies key(x) <= key(y); exact (x
 * before y iff key(x) < key(y)) for the kinds key0_exact accepts. NaN gets
 * nan_key, beside the nulls. */
static inline uint64_t key0_key(const key0 *k, int64_t s) {
  if (k->kind == P_FLOAT) {
    double d = fsh_float_value(k->vf->type, kern_buf(k->va, 1), s);
    return d != d ? k->nan_key : float_key(d) ^ k->flip;
  }
  return key0_prefix(k, s) ^ k->flip;
}


/* The prefix alone orders valid values. */
static inline bool key0_exact(const key0 *k) {
  return k->kind == P_SIGNED || k->kind == P_UNSIGNED || k->kind == P_FLOAT || k->kind == P_BOOL;
}

/* A row and the order-preserving 64-bit prefix of its first key. */
typedef struct fsh_sort_ent {
  uint64_t key;
  int64_t row;
} fsh_sort_ent;

/* Checks the arguments of a sort over b's key columns and resolves the
 * keys into *rk (the caller frees it); EINVAL / ENOTSUP naming the column,
 * *rk NULL on error. */
FSH_NODISCARD int fsh_kern_sort_check(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                                      const fsh_sort_key *order, fsh_row_keys **rk,
                                      fsh_error *err);

#endif
