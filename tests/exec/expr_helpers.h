/* expr_helpers.h -- what the expression tests share: a random batch with
 * nulls of every type expressions read (dictionary utf8 included), sliced
 * so offsets are not 0, and per-row readers of arrays that are independent
 * of the library's evaluation code. Header-only. */
#ifndef FSH_TESTS_EXPR_HELPERS_H
#define FSH_TESTS_EXPR_HELPERS_H

#include "test.h"

#include <flightshuffle/exec.h>

#include <math.h>
#include <stdint.h>

/* The LIKE reference: naive recursion over the pattern, '%' any run of
 * characters, '_' one UTF-8 character, a backslash makes the next one literal. */
static inline int eh_u8len(const char *s, int64_t n) {
  unsigned char c = (unsigned char)s[0];
  int l = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  return l <= n ? l : (int)n;
}

static inline bool eh_like(const char *p, int64_t pn, const char *s, int64_t sn) {
  if (pn == 0) return sn == 0;
  if (p[0] == '%') {
    for (int64_t j = 0;; j += eh_u8len(s + j, sn - j)) {
      if (eh_like(p + 1, pn - 1, s + j, sn - j)) return true;
      if (j >= sn) return false;
    }
  }
  if (sn == 0) return false;
  if (p[0] == '_') {
    int l = eh_u8len(s, sn);
    return eh_like(p + 1, pn - 1, s + l, sn - l);
  }
  int64_t step = p[0] == '\\' && pn > 1 ? 2 : 1;
  return p[step - 1] == s[0] && eh_like(p + step, pn - step, s + 1, sn - 1);
}

static inline uint64_t eh_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline void *eh_ok(void *p) {
  if (!p) {
    fprintf(stderr, "expr_helpers: allocation failed\n");
    abort();
  }
  return p;
}

/* A buffer of n bytes copied from src. */
static inline fsh_buffer *eh_buf(const void *src, int64_t n) {
  fsh_buffer *b = eh_ok(fsh_buffer_new(n > 0 ? n : 1, true));
  if (n > 0) memcpy(b->data, src, (size_t)n);
  b->size = n;
  return b;
}

/* Validity from a 0/1 array; NULL buffer when all valid. */
static inline fsh_buffer *eh_validity(const uint8_t *ok, int64_t n, int64_t *nulls) {
  fsh_buffer *b = eh_ok(fsh_buffer_new(fsh_bytes_for_bits(n > 0 ? n : 1), true));
  *nulls = 0;
  for (int64_t i = 0; i < n; i++) {
    fsh_bit_set(b->data, i, ok[i]);
    *nulls += !ok[i];
  }
  if (*nulls == 0) {
    fsh_buffer_unref(b);
    return NULL;
  }
  return b;
}

static inline fsh_array *eh_fixed(const uint8_t *ok, const void *vals, int64_t n, int64_t width) {
  fsh_array *a = eh_ok(fsh_array_new(2, 0));
  a->length = n;
  a->buffers[0] = eh_validity(ok, n, &a->null_count);
  a->buffers[1] = eh_buf(vals, n * width);
  return a;
}

static inline fsh_array *eh_bools(const uint8_t *ok, const uint8_t *vals, int64_t n) {
  fsh_array *a = eh_ok(fsh_array_new(2, 0));
  a->length = n;
  a->buffers[0] = eh_validity(ok, n, &a->null_count);
  a->buffers[1] = eh_ok(fsh_buffer_new(fsh_bytes_for_bits(n > 0 ? n : 1), true));
  for (int64_t i = 0; i < n; i++) fsh_bit_set(a->buffers[1]->data, i, vals[i]);
  return a;
}

static inline fsh_array *eh_strings(const uint8_t *ok, const char *const *s, int64_t n) {
  fsh_array *a = eh_ok(fsh_array_new(3, 0));
  a->length = n;
  a->buffers[0] = eh_validity(ok, n, &a->null_count);
  int32_t *off = eh_ok(malloc(sizeof *off * (size_t)(n + 1)));
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) total += ok[i] ? (int64_t)strlen(s[i]) : 0;
  char *data = eh_ok(malloc((size_t)total + 1));
  off[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t l = ok[i] ? (int64_t)strlen(s[i]) : 0;
    memcpy(data + off[i], ok[i] ? s[i] : "", (size_t)l);
    off[i + 1] = off[i] + (int32_t)l;
  }
  a->buffers[1] = eh_buf(off, 4 * (n + 1));
  a->buffers[2] = eh_buf(data, total);
  free(off);
  free(data);
  return a;
}

/* ---- the random batch ----------------------------------------------------- */

static const char *const eh_words[] = {"",     "a",     "ab",    "abc",  "b",    "ba",
                                       "h\xc3\xa9llo", "x%y",  "a_c",  "abcab", "zz",  "\xc3\xa9",
                                       "cab",  "abab",  "Abc",  "a\\b"};
#define EH_N_WORDS ((int)(sizeof eh_words / sizeof eh_words[0]))
/* Dictionary entries: "ab", "abc", "b", null, "héllo", "zab". */
#define EH_N_DICT 6

/* Columns: i32 int32, i64 int64, f64 float64, s utf8, d utf8 dictionary
 * (int16 indices, a null entry), b bool, b2 bool, dt date32, u8 uint8,
 * ts timestamp[ms], nn int64 without nulls. n rows after slicing off `cut`
 * rows at the front and back. `wide` makes i64 hold values near the int64
 * limits (overflow tests). */
static inline fsh_batch *eh_random_batch(uint64_t seed, int64_t n, int64_t cut, bool wide) {
  uint64_t st = seed;
  int64_t m = n + 2 * cut;
  enum { C = 11 };
  fsh_schema *s = eh_ok(fsh_schema_new(C));
  const char *names[C] = {"i32", "i64", "f64", "s", "d", "b", "b2", "dt", "u8", "ts", "nn"};
  fsh_type_id types[C] = {FSH_TYPE_INT32, FSH_TYPE_INT64, FSH_TYPE_FLOAT64, FSH_TYPE_STRING,
                          FSH_TYPE_INT16, FSH_TYPE_BOOL,  FSH_TYPE_BOOL,    FSH_TYPE_DATE32,
                          FSH_TYPE_UINT8, FSH_TYPE_TIMESTAMP, FSH_TYPE_INT64};
  for (int c = 0; c < C; c++)
    if (fsh_field_init(&s->fields[c], names[c], types[c], c != 10) != 0) abort();
  s->fields[9].unit = FSH_MILLI;
  if (fsh_field_set_dictionary(&s->fields[4], 7, FSH_TYPE_INT16, false) != 0) abort();
  s->fields[4].dictionary->value.type = FSH_TYPE_STRING;
  fsh_batch *b = eh_ok(fsh_batch_new(s, m));
  fsh_schema_unref(s);
  uint8_t *ok = eh_ok(malloc((size_t)m + 1));
  uint8_t *bv = eh_ok(malloc((size_t)m + 1));
  int32_t *i32 = eh_ok(malloc(4 * (size_t)m + 4));
  int64_t *i64 = eh_ok(malloc(8 * (size_t)m + 8));
  double *f64 = eh_ok(malloc(8 * (size_t)m + 8));
  int16_t *i16 = eh_ok(malloc(2 * (size_t)m + 2));
  uint8_t *u8 = eh_ok(malloc((size_t)m + 1));
  const char **strs = eh_ok(malloc(sizeof *strs * (size_t)m + 8));
#define EH_OKS() for (int64_t i = 0; i < m; i++) ok[i] = eh_rand(&st) % 7 != 0
  EH_OKS();
  for (int64_t i = 0; i < m; i++) i32[i] = (int32_t)(eh_rand(&st) % 201) - 100;
  b->columns[0] = eh_fixed(ok, i32, m, 4);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) {
    uint64_t r = eh_rand(&st);
    i64[i] = (int64_t)(r % 2001) - 1000;
    if (wide && r % 5 == 0) i64[i] = (int64_t)(r % 3) == 0 ? INT64_MAX - (int64_t)(r % 4)
                                     : (r % 3) == 1 ? INT64_MIN + (int64_t)(r % 4) : (int64_t)(r >> 1);
    if (i64[i] == 0 && !wide) i64[i] = 0; /* zeros kept: division tests need them */
  }
  b->columns[1] = eh_fixed(ok, i64, m, 8);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) {
    uint64_t r = eh_rand(&st);
    f64[i] = (double)((int64_t)(r % 4001) - 2000) / 8.0;
    if (r % 97 == 0) f64[i] = NAN;
  }
  b->columns[2] = eh_fixed(ok, f64, m, 8);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) strs[i] = eh_words[eh_rand(&st) % EH_N_WORDS];
  b->columns[3] = eh_strings(ok, strs, m);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) i16[i] = (int16_t)(eh_rand(&st) % EH_N_DICT);
  b->columns[4] = eh_fixed(ok, i16, m, 2);
  {
    /* The dictionary itself sliced: entry 0 of the column is entry 1 here. */
    uint8_t dok2[EH_N_DICT + 1] = {1, 1, 1, 1, 0, 1, 1};
    const char *w2[EH_N_DICT + 1] = {"pad", "ab", "abc", "b", "", "h\xc3\xa9llo", "zab"};
    fsh_array *padded = eh_strings(dok2, w2, EH_N_DICT + 1);
    b->columns[4]->dictionary = eh_ok(fsh_array_slice(padded, 1, EH_N_DICT));
    fsh_array_unref(padded);
  }
  EH_OKS();
  for (int64_t i = 0; i < m; i++) bv[i] = eh_rand(&st) & 1;
  b->columns[5] = eh_bools(ok, bv, m);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) bv[i] = eh_rand(&st) & 1;
  b->columns[6] = eh_bools(ok, bv, m);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) i32[i] = 18000 + (int32_t)(eh_rand(&st) % 100);
  b->columns[7] = eh_fixed(ok, i32, m, 4);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) u8[i] = (uint8_t)eh_rand(&st);
  b->columns[8] = eh_fixed(ok, u8, m, 1);
  EH_OKS();
  for (int64_t i = 0; i < m; i++) i64[i] = 1600000000000 + (int64_t)(eh_rand(&st) % 50);
  b->columns[9] = eh_fixed(ok, i64, m, 8);
  for (int64_t i = 0; i < m; i++) ok[i] = 1;
  for (int64_t i = 0; i < m; i++) i64[i] = (int64_t)(eh_rand(&st) % 21) - 10;
  b->columns[10] = eh_fixed(ok, i64, m, 8);
#undef EH_OKS
  free(ok), free(bv), free(i32), free(i64), free(f64), free(i16), free(u8), free(strs);
  fsh_error err;
  if (fsh_batch_validate(b, true, &err) != 0) {
    fprintf(stderr, "eh_random_batch: invalid: %s\n", err.message);
    abort();
  }
  fsh_batch *sl = eh_ok(fsh_batch_slice(b, cut, n));
  fsh_batch_unref(b);
  return sl;
}

/* ---- per-row readers ------------------------------------------------------ */

/* Row k (relative to offset) of array a of field f: valid? */
static inline bool eh_valid(const fsh_field *f, const fsh_array *a, int64_t k) {
  if (f->type == FSH_TYPE_NA) return false;
  int64_t j = a->offset + k;
  if (a->buffers[0] && !fsh_bit_get(a->buffers[0]->data, j)) return false;
  if (f->dictionary) {
    int16_t ix;
    memcpy(&ix, a->buffers[1]->data + 2 * j, 2);
    const fsh_array *d = a->dictionary;
    if (d->buffers[0] && !fsh_bit_get(d->buffers[0]->data, d->offset + ix)) return false;
  }
  return true;
}

static inline int64_t eh_int(const fsh_field *f, const fsh_array *a, int64_t k) {
  const uint8_t *p = a->buffers[1]->data;
  int64_t j = a->offset + k;
  switch (f->type) {
  case FSH_TYPE_INT8: return ((const int8_t *)p)[j];
  case FSH_TYPE_UINT8: return ((const uint8_t *)p)[j];
  case FSH_TYPE_INT16: return ((const int16_t *)p)[j];
  case FSH_TYPE_UINT16: return ((const uint16_t *)p)[j];
  case FSH_TYPE_INT32: case FSH_TYPE_DATE32: return ((const int32_t *)p)[j];
  case FSH_TYPE_UINT32: return ((const uint32_t *)p)[j];
  case FSH_TYPE_BOOL: return fsh_bit_get(p, j);
  default: return ((const int64_t *)p)[j];
  }
}

static inline double eh_float(const fsh_field *f, const fsh_array *a, int64_t k) {
  if (f->type == FSH_TYPE_FLOAT64) return ((const double *)a->buffers[1]->data)[a->offset + k];
  if (f->type == FSH_TYPE_FLOAT32) return ((const float *)a->buffers[1]->data)[a->offset + k];
  return (double)eh_int(f, a, k);
}

static inline void eh_str(const fsh_field *f, const fsh_array *a, int64_t k, const char **p,
                          int64_t *len) {
  int64_t j = a->offset + k;
  if (f->dictionary) {
    int16_t ix;
    memcpy(&ix, a->buffers[1]->data + 2 * j, 2);
    a = a->dictionary;
    j = a->offset + ix;
  }
  const int32_t *o = (const int32_t *)a->buffers[1]->data;
  *p = (const char *)a->buffers[2]->data + o[j];
  *len = o[j + 1] - o[j];
}

/* Column by name. */
static inline int eh_col(const fsh_batch *b, const char *name) {
  for (int c = 0; c < b->n_columns; c++)
    if (strcmp(b->schema->fields[c].name, name) == 0) return c;
  abort();
}

/* Checks a bool result array against a reference of -1 (null), 0, 1 per
 * row. */
static inline void eh_check_bools(const fsh_array *got, const int *want, int64_t n,
                                  const char *what) {
  fsh_field f = {0};
  f.type = FSH_TYPE_BOOL;
  f.name = (char *)"r";
  CHECK_EQ_INT(got->length, n);
  int bad = 0;
  for (int64_t k = 0; k < n && bad < 3; k++) {
    int g = eh_valid(&f, got, k) ? (int)eh_int(&f, got, k) : -1;
    if (g != want[k]) {
      CHECK_MSG(g == want[k], "%s: row %lld: got %d, want %d", what, (long long)k, g, want[k]);
      bad++;
    }
  }
}
#endif
