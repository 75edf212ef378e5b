/* range.c -- range partitioning: each row goes to the number of boundary
 * rows that sort strictly before it, found by binary search over the
 * boundaries with a multi-column comparison (direction and null placement
 * per column, dictionary columns compared by value). */
#include "kernels/kernels_internal.h"

#include "arrow/numeric.h"

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
  fsh_sort_key order;
} keycol;

/* Absolute slot of row's value in k->va, or -1 when null. */
static int64_t value_slot(const keycol *k, int64_t row) {
  int64_t abs = k->a->offset + row;
  if (!kern_slot_valid(k->f, k->a, abs)) return -1;
  if (!k->f->dictionary) return abs;
  int64_t d = k->va->offset + fsh_kern_read_int(k->f->type, kern_buf(k->a, 1), abs);
  return kern_slot_valid(k->vf, k->va, d) ? d : -1;
}

static double read_float(fsh_type_id t, const uint8_t *p, int64_t i) {
  if (t == FSH_TYPE_FLOAT64) {
    double d;
    memcpy(&d, p + 8 * i, 8);
    return d;
  }
  if (t == FSH_TYPE_FLOAT32) {
    float x;
    memcpy(&x, p + 4 * i, 4);
    return x;
  }
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return fsh_half_to_float(h);
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
    case K_FLOAT: { /* NaN after everything, NaNs equal */
      double a = read_float(x->vf->type, px, i), b = read_float(x->vf->type, py, j);
      if (a != a || b != b) return (a != a) - (b != b);
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

/* Row r of `rows` against row b of `bounds`, over n_keys columns. */
static int cmp_rows(const keycol *rows, int64_t r, const keycol *bounds, int64_t b, int n_keys) {
  for (int k = 0; k < n_keys; k++) {
    int64_t x = value_slot(&rows[k], r), y = value_slot(&bounds[k], b);
    if (x < 0 || y < 0) {
      if (x < 0 && y < 0) continue;
      return (x < 0) == rows[k].order.nulls_first ? -1 : 1;
    }
    int c = cmp_values(&rows[k], x, &bounds[k], y);
    if (c != 0) return rows[k].order.descending ? -c : c;
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
      return fsh_error_set(err, ENOTSUP, "type %s cannot be ordered for range partitioning", t);
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
  return classify(k, err);
}

/* Resolves the key columns of both sides and checks their types match. */
static int prepare(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                   const fsh_batch *bounds, const fsh_sort_key *order, keycol *rows,
                   keycol *bcols, fsh_error *err) {
  for (int k = 0; k < n_keys; k++) {
    int32_t c = key_cols[k];
    if (c < 0 || c >= b->n_columns)
      return fsh_error_set(err, EINVAL, "key %d is column %d, the batch has %lld columns", k, c,
                           (long long)b->n_columns);
    fsh_sort_key o = order ? order[k] : (fsh_sort_key){false, false};
    int rc = keycol_init(&rows[k], b, c, o, err);
    if (rc == 0) rc = keycol_init(&bcols[k], bounds, k, o, err);
    fsh_error diff;
    if (rc == 0 && !fsh_field_type_equals(rows[k].vf, bcols[k].vf, &diff))
      rc = fsh_error_set(err, EINVAL, "boundary column %d does not have the key's type: %s", k,
                         diff.message);
    if (rc != 0) return fsh_error_prefix(err, rc, "key column %d ('%s'): ", c, rows[k].f->name);
  }
  return 0;
}

int fsh_partition_range(const fsh_batch *b, const int32_t *key_cols, int n_keys,
                        const fsh_batch *boundaries, const fsh_sort_key *order, int32_t *out,
                        fsh_error *err) {
  if (!b || !key_cols || !boundaries || n_keys < 1 || (b->length > 0 && !out))
    return fsh_error_set(err, EINVAL, "range partition: NULL argument or no key column");
  if (boundaries->n_columns != n_keys)
    return fsh_error_set(err, EINVAL, "range partition: %d keys but the boundaries have %lld columns",
                         n_keys, (long long)boundaries->n_columns);
  if (boundaries->length >= INT32_MAX)
    return fsh_error_set(err, EINVAL, "range partition: too many boundaries (%lld)",
                         (long long)boundaries->length);
  keycol *rows = fsh_calloc((size_t)n_keys * 2, sizeof *rows);
  if (!rows) return fsh_error_set(err, ENOMEM, "range partition: out of memory");
  keycol *bcols = rows + n_keys;
  int rc = prepare(b, key_cols, n_keys, boundaries, order, rows, bcols, err);
  int64_t nb = boundaries->length;
  for (int64_t j = 1; j < nb && rc == 0; j++)
    if (cmp_rows(bcols, j - 1, bcols, j, n_keys) > 0)
      rc = fsh_error_set(err, EINVAL, "boundary rows %lld and %lld are out of order",
                         (long long)j - 1, (long long)j);
  for (int64_t i = 0; i < b->length && rc == 0; i++) {
    int64_t lo = 0, hi = nb; /* first boundary >= row */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (cmp_rows(rows, i, bcols, mid, n_keys) > 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    out[i] = (int32_t)lo;
  }
  fsh_free(rows);
  if (rc != 0) fsh_error_prefix(err, rc, "range partition: ");
  return rc;
}
