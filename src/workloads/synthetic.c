/* synthetic.c -- the synthetic (key int64, value float64, name utf8) table
 * used by the demo and the benchmarks: deterministic from a seed, no I/O. */
#include <flightshuffle/workloads.h>

#include <errno.h>
#include <string.h>

/* splitmix64: a small, good, seekable generator. */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

fsh_schema *fsh_synthetic_schema(void) {
  fsh_schema *s = fsh_schema_new(3);
  if (!s) return NULL;
  if (fsh_field_init(&s->fields[0], "key", FSH_TYPE_INT64, false) ||
      fsh_field_init(&s->fields[1], "value", FSH_TYPE_FLOAT64, true) ||
      fsh_field_init(&s->fields[2], "name", FSH_TYPE_STRING, true)) {
    fsh_schema_unref(s);
    return NULL;
  }
  return s;
}

/* A validity bitmap with ~1% nulls drawn from the row's random bits (built
 * a byte at a time; the trailing bits of the last byte stay zero). */
static fsh_buffer *make_validity(uint64_t seed, int64_t first_row, int64_t rows, int64_t *nulls) {
  fsh_buffer *v = fsh_buffer_new(fsh_bytes_for_bits(rows), true);
  if (!v) return NULL;
  int64_t valid_count = 0;
  for (int64_t i = 0; i < rows; i += 8) {
    uint8_t byte = 0;
    int64_t end = rows - i < 8 ? rows - i : 8;
    for (int64_t k = 0; k < end; k++)
      byte |= (uint8_t)((mix(seed ^ (uint64_t)(first_row + i + k)) % 100 != 0) << k);
    v->data[i >> 3] = byte;
    for (uint8_t b = byte; b; b &= (uint8_t)(b - 1)) valid_count++;
  }
  *nulls = rows - valid_count;
  return v;
}

static int fill_key(fsh_array *a, const fsh_synthetic_options *o, int64_t first, int64_t rows) {
  if (!(a->buffers[1] = fsh_buffer_new(rows * 8, false))) return ENOMEM;
  int64_t *keys = (int64_t *)a->buffers[1]->data;
  for (int64_t i = 0; i < rows; i++) {
    uint64_t r = mix(o->seed * 3 + (uint64_t)(first + i));
    keys[i] = o->key_range > 0 ? (int64_t)(r % (uint64_t)o->key_range) : (int64_t)r;
  }
  return 0;
}

static int fill_value(fsh_array *a, const fsh_synthetic_options *o, int64_t first, int64_t rows) {
  if (!(a->buffers[1] = fsh_buffer_new(rows * 8, false))) return ENOMEM;
  double *vals = (double *)a->buffers[1]->data;
  for (int64_t i = 0; i < rows; i++)
    vals[i] = (double)(mix(o->seed * 5 + (uint64_t)(first + i)) >> 11) / 9007199254740992.0;
  if (o->with_nulls && !(a->buffers[0] = make_validity(o->seed * 7, first, rows, &a->null_count)))
    return ENOMEM;
  return 0;
}

/* The name characters: from r, the sequence r, A r + 1, A (A r + 1) + 1,
 * ... (an LCG), one letter (r >> 33) % 26 per step. Step j is
 * A^j r + C_j, so every letter is computed independently from r (no chain
 * of dependent multiplies), and short names (the default) are written a
 * fixed `span` letters at a time -- the next name overwrites the excess --
 * so the loop does not mispredict its random trip count on every row. */
#define LCG_A 6364136223846793005ull
#define FIXED_SPAN_MAX 64

static inline uint8_t letter(uint64_t s) { return (uint8_t)('a' + (uint32_t)(s >> 33) % 26); }

static int fill_name(fsh_array *a, const fsh_synthetic_options *o, int64_t first, int64_t rows) {
  int32_t avg = o->avg_str_len > 0 ? o->avg_str_len : 12;
  uint64_t span = (uint64_t)(2 * avg - 1); /* lengths 1 .. span */
  if (!(a->buffers[1] = fsh_buffer_new((rows + 1) * 4, false))) return ENOMEM;
  int32_t *offsets = (int32_t *)a->buffers[1]->data;
  offsets[0] = 0;
  for (int64_t i = 0; i < rows; i++) {
    uint64_t r = mix(o->seed * 11 + (uint64_t)(first + i));
    int64_t len = 1 + (int64_t)(span == 23 ? r % 23 : r % span); /* 23: the default's, fast */
    if ((int64_t)offsets[i] + len > INT32_MAX) return EOVERFLOW;
    offsets[i + 1] = offsets[i] + (int32_t)len;
  }
  int64_t total = offsets[rows];
  bool fixed = span <= FIXED_SPAN_MAX;
  fsh_buffer *chars = a->buffers[2] = fsh_buffer_new(total + (fixed ? (int64_t)span : 0), false);
  if (!chars) return ENOMEM;
  uint8_t *data = chars->data;
  if (fixed) {
    uint64_t mul[FIXED_SPAN_MAX], add[FIXED_SPAN_MAX];
    mul[0] = 1, add[0] = 0;
    for (uint64_t j = 1; j < span; j++) mul[j] = mul[j - 1] * LCG_A, add[j] = add[j - 1] * LCG_A + 1;
    for (int64_t i = 0; i < rows; i++) {
      uint64_t r = mix(o->seed * 13 + (uint64_t)(first + i));
      uint8_t *d = data + offsets[i];
      for (uint64_t j = 0; j < span; j++) d[j] = letter(mul[j] * r + add[j]);
    }
    chars->size = total; /* the padding past the names is zero again */
    memset(data + total, 0, (size_t)(chars->capacity - total));
  } else {
    for (int64_t i = 0; i < rows; i++) {
      uint64_t r = mix(o->seed * 13 + (uint64_t)(first + i));
      for (int32_t j = offsets[i]; j < offsets[i + 1]; j++, r = r * LCG_A + 1) data[j] = letter(r);
    }
  }
  if (o->with_nulls && !(a->buffers[0] = make_validity(o->seed * 17, first, rows, &a->null_count)))
    return ENOMEM;
  return 0;
}

int fsh_synthetic_batch(fsh_schema *schema, const fsh_synthetic_options *o, int64_t index,
                        int64_t rows, fsh_batch **out, fsh_error *err) {
  if (rows < 0 || index < 0 || schema->n_fields != 3)
    return fsh_error_set(err, EINVAL, "synthetic batch: bad arguments (rows %lld, index %lld)",
                         (long long)rows, (long long)index);
  fsh_batch *b = fsh_batch_new(schema, rows);
  if (!b) return fsh_error_set(err, ENOMEM, "synthetic batch: out of memory");
  int64_t first = index * rows;
  int (*fill[3])(fsh_array *, const fsh_synthetic_options *, int64_t, int64_t) = {
      fill_key, fill_value, fill_name};
  int n_buffers[3] = {2, 2, 3};
  for (int c = 0; c < 3; c++) {
    fsh_array *a = b->columns[c] = fsh_array_new(n_buffers[c], 0);
    int rc = a ? 0 : ENOMEM;
    if (a) {
      a->length = rows;
      rc = fill[c](a, o, first, rows);
    }
    if (rc) {
      fsh_batch_unref(b);
      return fsh_error_set(err, rc, "synthetic batch: %s building column '%s'",
                           rc == ENOMEM ? "out of memory" : "string data over 2 GiB",
                           schema->fields[c].name);
    }
  }
  *out = b;
  return 0;
}
