/* row_keys.c -- key columns resolved for comparing rows: the multi-column
 * three-way comparison (direction and null placement per column,
 * dictionary columns compared by value, floats ordered as pyarrow orders
 * them) behind range partitioning and sorting, and the key equality of the
 * hash operators (group-by, join). */
#include "kernels/kernels_internal.h"

#include "arrow/numeric.h"

#include <math.h>

typedef enum kind { K_INT, K_UINT64, K_FLOAT, K_DECIMAL, K_BINARY, K_FIXED, K_BOOL } kind;

/* One key column of the batch or of the boundaries, resolved for reading. */
typedef struct keycol {
  const fsh_field *f;  /* the column's field (may be dictionary-encoded) */
  const fsh_array *a;
  const fsh_field *vf; /* the value field: f, or its dictionary's value */
  const fsh_array *va; /* the value array: a, or its dictionary */
  kind kind;
  fsh_type_id int_type; /* K_INT: the integer type values are read as */
  int width;            /* K_DECIMAL / K_FIXED: bytes; K_BINARY: offset width */
  int enc_width;        /* bytes of an encoded value (fsh_row_keys_encode); K_BINARY:
                         * of its length prefix */
  fsh_sort_key order;
  const uint8_t *valid;  /* a's validity bitmap, or NULL */
  const uint8_t *vvalid; /* a dictionary's validity bitmap, or NULL */
} keycol;

/* Absolute slot of row's value in k->va, or -1 when null. (Orderable
 * types are neither unions nor the null type: a slot is valid by its
 * bitmap alone.) */
static inline int64_t value_slot(const keycol *k, int64_t row) {
  int64_t abs = k->a->offset + row;
  if (k->valid && !fsh_bit_get(k->valid, abs)) return -1;
  if (!k->f->dictionary) return abs;
  int64_t d = k->va->offset + fsh_kern_read_int(k->f->type, kern_buf(k->a, 1), abs);
  return !k->vvalid || fsh_bit_get(k->vvalid, d) ? d : -1;
}


#define CMP3(x, y) ((x) < (y) ? -1 : (x) > (y) ? 1 : 0)

/* Two's-complement little-endian integers of `width` bytes. */
static int cmp_decimal(const uint8_t *x, const uint8_t *y, int width) {
  int64_t hx, hy;
  memcpy(&hx, x + width - 8, 8);
  memcpy(&hy, y + width - 8, 8);
  if (hx != hy) return CMP3(hx, hy);
  for (int limb = width / 8 - 2; limb >= 0; limb--) {
    uint64_t lx, ly;
    memcpy(&lx, x + 8 * limb, 8);
    memcpy(&ly, y + 8 * limb, 8);
    if (lx != ly) return CMP3(lx, ly);
  }
  return 0;
}

static int cmp_bytes(const uint8_t *x, int64_t nx, const uint8_t *y, int64_t ny) {
  int64_t m = nx < ny ? nx : ny;
  int c = m > 0 ? memcmp(x, y, (size_t)m) : 0;
  return c != 0 ? (c < 0 ? -1 : 1) : CMP3(nx, ny);
}

/* Compares valid values at absolute slots i of x->va and j of y->va. */
static int cmp_values(const keycol *x, int64_t i, const keycol *y, int64_t j) {
  const uint8_t *px = kern_buf(x->va, 1), *py = kern_buf(y->va, 1);
  switch (x->kind) {
    case K_INT: {
      int64_t a = fsh_kern_read_int(x->int_type, px, i), b = fsh_kern_read_int(x->int_type, py, j);
      return CMP3(a, b);
    }
    case K_UINT64: {
      uint64_t a, b;
      memcpy(&a, px + 8 * i, 8);
      memcpy(&b, py + 8 * j, 8);
      return CMP3(a, b);
    }
    case K_FLOAT: { /* callers set NaN apart (fsh_row_keys_compare) */
      double a = fsh_float_value(x->vf->type, px, i), b = fsh_float_value(x->vf->type, py, j);
      return CMP3(a, b);
    }
    case K_DECIMAL: return cmp_decimal(px + x->width * i, py + x->width * j, x->width);
    case K_FIXED:
      return cmp_bytes(px + (int64_t)x->width * i, x->width, py + (int64_t)x->width * j, x->width);
    case K_BOOL: return CMP3(fsh_bit_get(px, i), fsh_bit_get(py, j));
    case K_BINARY: {
      int w = x->width;
      int64_t si = kern_read_offset(px, i, w), ei = kern_read_offset(px, i + 1, w);
      int64_t sj = kern_read_offset(py, j, w), ej = kern_read_offset(py, j + 1, w);
      return cmp_bytes(kern_buf(x->va, 2) + si, ei - si, kern_buf(y->va, 2) + sj, ej - sj);
    }
  }
  return 0;
}


/* How values of field vf compare, or ENOTSUP. */
static int classify(keycol *k, fsh_error *err) {
  const fsh_field *vf = k->vf;
  k->int_type = vf->type;
  if (vf->dictionary)
    return fsh_error_set(err, ENOTSUP, "a dictionary of dictionaries cannot be ordered");
  switch (vf->type) {
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32:
      k->kind = K_INT; return 0;
    case FSH_TYPE_UINT64: k->kind = K_UINT64; return 0;
    case FSH_TYPE_DATE32: case FSH_TYPE_TIME32: case FSH_TYPE_INTERVAL_MONTHS:
      k->kind = K_INT; k->int_type = FSH_TYPE_INT32; return 0;
    case FSH_TYPE_DATE64: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION:
      k->kind = K_INT; k->int_type = FSH_TYPE_INT64; return 0;
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64: k->kind = K_FLOAT; return 0;
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256:
      k->kind = K_DECIMAL; k->width = vf->type == FSH_TYPE_DECIMAL128 ? 16 : 32; return 0;
    case FSH_TYPE_FIXED_SIZE_BINARY: k->kind = K_FIXED; k->width = vf->byte_width; return 0;
    case FSH_TYPE_BOOL: k->kind = K_BOOL; return 0;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      k->kind = K_BINARY; k->width = kern_offset_width(vf->type); return 0;
    default: {
      char t[128];
      fsh_field_type_to_string(vf, t, sizeof t);
      return fsh_error_set(err, ENOTSUP, "type %s cannot be ordered or compared", t);
    }
  }
}

static int keycol_init(keycol *k, const fsh_batch *b, int32_t col, fsh_sort_key order,
                       fsh_error *err) {
  k->f = &b->schema->fields[col];
  k->a = b->columns[col];
  k->vf = k->f->dictionary ? &k->f->dictionary->value : k->f;
  k->va = k->f->dictionary ? k->a->dictionary : k->a;
  k->order = order;
  k->valid = kern_buf(k->a, 0);
  k->vvalid = k->f->dictionary ? kern_buf(k->va, 0) : NULL;
  int rc = classify(k, err);
  k->enc_width = k->kind == K_BOOL     ? 1
                 : k->kind == K_BINARY ? k->width
                                       : (int)(fsh_type_bit_width(k->vf) / 8);
  return rc;
}

struct fsh_row_keys {
  int n_keys;
  keycol cols[]; /* n_keys */
};

int fsh_row_keys_new(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                     const fsh_sort_key *order, fsh_row_keys **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!b || !key_cols || n_keys < 1 || !out)
    return fsh_error_set(err, EINVAL, "row keys: NULL argument or no key column");
  fsh_row_keys *k = fsh_calloc(1, sizeof *k + (size_t)n_keys * sizeof(keycol));
  if (!k) return kern_oom(err);
  k->n_keys = n_keys;
  for (int i = 0; i < n_keys; i++) {
    int32_t c = key_cols[i];
    if (c < 0 || c >= b->n_columns) {
      fsh_free(k);
      return fsh_error_set(err, EINVAL, "key %d is column %d, the batch has %lld columns", i, c,
                           (long long)b->n_columns);
    }
    fsh_sort_key o = order ? order[i] : (fsh_sort_key){false, false};
    int rc = keycol_init(&k->cols[i], b, c, o, err);
    if (rc != 0) {
      fsh_free(k);
      return fsh_error_prefix(err, rc, "key column %d ('%s'): ", c, b->schema->fields[c].name);
    }
  }
  *out = k;
  return 0;
}

void fsh_row_keys_free(fsh_row_keys *k) { fsh_free(k); }

int fsh_row_keys_count(const fsh_row_keys *k) { return k->n_keys; }

int fsh_row_keys_check_compatible(const fsh_row_keys *a, const fsh_row_keys *b, fsh_error *err) {
  if (a->n_keys != b->n_keys)
    return fsh_error_set(err, EINVAL, "%d key columns against %d", a->n_keys, b->n_keys);
  for (int i = 0; i < a->n_keys; i++) {
    fsh_error diff;
    if (!fsh_field_type_equals(a->cols[i].vf, b->cols[i].vf, &diff))
      return fsh_error_set(err, EINVAL, "key %d ('%s' against '%s') differs in type: %s", i,
                           a->cols[i].f->name, b->cols[i].f->name, diff.message);
  }
  return 0;
}

/* The float at absolute slot s of k->va (k->kind == K_FLOAT). */
static inline double float_at(const keycol *k, int64_t s) {
  return fsh_float_value(k->vf->type, kern_buf(k->va, 1), s);
}

int fsh_row_keys_compare(const fsh_row_keys *a, int64_t i, const fsh_row_keys *b, int64_t j) {
  for (int k = 0; k < a->n_keys; k++) {
    const keycol *x = &a->cols[k], *y = &b->cols[k];
    int64_t sx = value_slot(x, i), sy = value_slot(y, j);
    if (sx < 0 || sy < 0) {
      if (sx < 0 && sy < 0) continue;
      return (sx < 0) == x->order.nulls_first ? -1 : 1;
    }
    if (x->kind == K_FLOAT) { /* NaN beside the nulls, whatever the direction */
      bool nx = float_at(x, sx) != float_at(x, sx), ny = float_at(y, sy) != float_at(y, sy);
      if (nx || ny) {
        if (nx && ny) continue;
        return nx == x->order.nulls_first ? -1 : 1;
      }
    }
    int c = cmp_values(x, sx, y, sy);
    if (c != 0) return x->order.descending ? -c : c;
  }
  return 0;
}

bool fsh_row_keys_equal(const fsh_row_keys *a, int64_t i, const fsh_row_keys *b, int64_t j) {
  for (int k = 0; k < a->n_keys; k++) {
    const keycol *x = &a->cols[k], *y = &b->cols[k];
    int64_t sx = value_slot(x, i), sy = value_slot(y, j);
    if (sx < 0 || sy < 0) {
      if (sx < 0 && sy < 0) continue;
      return false;
    }
    if (x->kind == K_FLOAT) { /* equal when both NaN or bitwise equal as doubles */
      double u = float_at(x, sx), v = float_at(y, sy);
      if (u != u || v != v) {
        if (u != u && v != v) continue;
        return false;
      }
      if (u != v || signbit(u) != signbit(v)) return false;
      continue;
    }
    if (cmp_values(x, sx, y, sy) != 0) return false;
  }
  return true;
}

/* ---- the equality encoding ------------------------------------------------
 *
 * Per key column, a tag byte (0 null, 1 valid) then, for a valid value:
 * fixed-width types their enc_width little-endian bytes (floats with every
 * NaN made the canonical quiet NaN, -0.0 kept: the equality of
 * fsh_row_keys_equal), bool one byte 0 / 1, (large) binary and utf8 a 4
 * (8) byte length then the bytes. Dictionaries encode their value. Each
 * column's encoding is prefix-free, so equal strings mean equal columns. */

/* Encoded bytes of the valid value at slot s of x (the tag aside). */
static inline int64_t enc_size(const keycol *x, const uint8_t *offs, int64_t s) {
  if (x->kind != K_BINARY) return x->enc_width;
  return x->width + kern_read_offset(offs, s + 1, x->width) - kern_read_offset(offs, s, x->width);
}

void fsh_row_keys_encoded_sizes(const fsh_row_keys *k, int64_t n, int64_t *offsets,
                                uint8_t *has_null) {
  for (int64_t i = 0; i < n; i++) offsets[i + 1] = k->n_keys;
  if (has_null) memset(has_null, 0, (size_t)n);
  for (int c = 0; c < k->n_keys; c++) {
    const keycol *x = &k->cols[c];
    const uint8_t *offs = kern_buf(x->va, 1);
    bool fixed = x->kind != K_BINARY;
    for (int64_t i = 0; i < n; i++) {
      int64_t s = value_slot(x, i);
      if (s < 0) {
        if (has_null) has_null[i] = 1;
        continue;
      }
      offsets[i + 1] += fixed ? x->enc_width : enc_size(x, offs, s);
    }
  }
  offsets[0] = 0;
  for (int64_t i = 0; i < n; i++) offsets[i + 1] += offsets[i];
}

void fsh_row_keys_encode(const fsh_row_keys *k, int64_t n, const int64_t *offsets,
                         int64_t *pos, uint8_t *out) {
  memcpy(pos, offsets, (size_t)n * sizeof *pos);
  for (int c = 0; c < k->n_keys; c++) {
    const keycol *x = &k->cols[c];
    const uint8_t *vals = kern_buf(x->va, 1);
    int w = x->enc_width;
    for (int64_t i = 0; i < n; i++) {
      int64_t s = value_slot(x, i);
      uint8_t *o = out + pos[i];
      if (s < 0) {
        *o = 0;
        pos[i]++;
        continue;
      }
      *o++ = 1;
      int64_t used = w;
      switch (x->kind) {
        case K_BOOL: *o = (uint8_t)fsh_bit_get(vals, s); break;
        case K_FLOAT: {
          double d = fsh_float_value(x->vf->type, vals, s);
          if (d != d) { /* the canonical quiet NaN of the width */
            static const uint8_t qnan64[8] = {0, 0, 0, 0, 0, 0, 0xF8, 0x7F};
            static const uint8_t qnan32[4] = {0, 0, 0xC0, 0x7F}, qnan16[2] = {0, 0x7E};
            memcpy(o, w == 8 ? qnan64 : w == 4 ? qnan32 : qnan16, (size_t)w);
          } else {
            memcpy(o, vals + (int64_t)w * s, (size_t)w);
          }
          break;
        }
        case K_BINARY: {
          int64_t st = kern_read_offset(vals, s, w), len = kern_read_offset(vals, s + 1, w) - st;
          if (w == 4) { /* little-endian: the low bytes */
            uint32_t l32 = (uint32_t)len;
            memcpy(o, &l32, 4);
          } else {
            memcpy(o, &len, 8);
          }
          if (len) memcpy(o + w, kern_buf(x->va, 2) + st, (size_t)len);
          used += len;
          break;
        }
        default: /* constant sizes: inline copies, no call per value */
          switch (w) {
            case 1: *o = vals[s]; break;
            case 2: memcpy(o, vals + 2 * s, 2); break;
            case 4: memcpy(o, vals + 4 * s, 4); break;
            case 8: memcpy(o, vals + 8 * s, 8); break;
            case 16: memcpy(o, vals + 16 * s, 16); break;
            default: memcpy(o, vals + (int64_t)w * s, (size_t)w); break;
          }
          break;
      }
      pos[i] += 1 + used;
    }
  }
}

bool fsh_row_keys_any_null(const fsh_row_keys *k, int64_t i) {
  for (int c = 0; c < k->n_keys; c++)
    if (value_slot(&k->cols[c], i) < 0) return true;
  return false;
}
