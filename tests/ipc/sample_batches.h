/* sample_batches.h -- header-only generators of test record batches with
 * every type of arrow.h (nulls included), for IPC, JSON, C Data Interface
 * and Python interop tests.
 *
 *   fsh_sample_all_types()        one 7-row batch, one column per type:
 *                                 primitives, temporal, intervals, binary
 *                                 and strings (large too), fixed-size
 *                                 binary, lists (large, fixed-size),
 *                                 struct, map, sparse and dense unions,
 *                                 dictionaries (plain, in a struct, and
 *                                 nested: list<dictionary> values), field
 *                                 and schema metadata.
 *   fsh_sample_dict_schema()      schema { d: dictionary<int32, utf8> id 0 }
 *   fsh_sample_dict_batch(s, ...) a batch of that schema over given
 *                                 dictionary values and indices.
 *
 * Every helper aborts on allocation failure (test data, not code under
 * test): build the batches before arming fsh_alloc_fail_after. Results are
 * new references. */
#ifndef FSH_TESTS_SAMPLE_BATCHES_H
#define FSH_TESTS_SAMPLE_BATCHES_H

#include <flightshuffle/arrow.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void *sbh_ok_(void *p, const char *what) {
  if (!p) {
    fprintf(stderr, "sample_batches.h: %s failed\n", what);
    abort();
  }
  return p;
}
#define SBH_OK(p) sbh_ok_((void *)(p), #p)
#define SBH_RC(e)                                                      \
  do {                                                                 \
    if ((e) != 0) {                                                    \
      fprintf(stderr, "sample_batches.h:%d: %s failed\n", __LINE__, #e); \
      abort();                                                         \
    }                                                                  \
  } while (0)

/* A validity bitmap from a pattern of '1' (valid) and '0' (null). */
static inline fsh_buffer *sbh_bits(const char *pat) {
  int64_t n = (int64_t)strlen(pat);
  fsh_buffer *b = SBH_OK(fsh_buffer_new(fsh_bytes_for_bits(n), true));
  for (int64_t i = 0; i < n; i++)
    if (pat[i] == '1') fsh_bit_set(b->data, i, true);
  return b;
}

static inline fsh_array *sbh_new(int32_t n_buffers, int64_t n_children, int64_t length,
                                 const char *valid) {
  fsh_array *a = SBH_OK(fsh_array_new(n_buffers, n_children));
  a->length = length;
  a->null_count = valid ? -1 : 0;
  if (valid && n_buffers > 0) a->buffers[0] = sbh_bits(valid);
  return a;
}

/* Fixed-width values (width bytes each); valid NULL = no nulls. */
static inline fsh_array *sbh_fixed(const char *valid, int64_t n, const void *vals, int64_t width) {
  fsh_array *a = sbh_new(2, 0, n, valid);
  a->buffers[1] = SBH_OK(fsh_buffer_copy(vals, n * width));
  return a;
}

static inline fsh_array *sbh_bool(const char *valid, const char *values) {
  fsh_array *a = sbh_new(2, 0, (int64_t)strlen(values), valid);
  a->buffers[1] = sbh_bits(values);
  return a;
}

/* (Large) binary / string from NUL-terminated strings. */
static inline fsh_array *sbh_binary(const char *valid, int64_t n, const char *const *strs,
                                    bool large) {
  fsh_array *a = sbh_new(3, 0, n, valid);
  int w = large ? 8 : 4;
  fsh_buffer *offs = SBH_OK(fsh_buffer_new((n + 1) * w, true));
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) total += (int64_t)strlen(strs[i]);
  fsh_buffer *data = SBH_OK(fsh_buffer_new(total, true));
  int64_t pos = 0;
  for (int64_t i = 0; i <= n; i++) {
    if (large)
      memcpy(offs->data + 8 * i, &pos, 8);
    else {
      int32_t p32 = (int32_t)pos;
      memcpy(offs->data + 4 * i, &p32, 4);
    }
    if (i < n) {
      size_t l = strlen(strs[i]);
      memcpy(data->data + pos, strs[i], l);
      pos += (int64_t)l;
    }
  }
  a->buffers[1] = offs;
  a->buffers[2] = data;
  return a;
}

/* (Large) list or map over child (reference taken over). */
static inline fsh_array *sbh_list(const char *valid, int64_t n, const int64_t *offsets, bool large,
                                  fsh_array *child) {
  fsh_array *a = sbh_new(2, 1, n, valid);
  int w = large ? 8 : 4;
  fsh_buffer *offs = SBH_OK(fsh_buffer_new((n + 1) * w, true));
  for (int64_t i = 0; i <= n; i++) {
    if (large)
      memcpy(offs->data + 8 * i, &offsets[i], 8);
    else {
      int32_t o = (int32_t)offsets[i];
      memcpy(offs->data + 4 * i, &o, 4);
    }
  }
  a->buffers[1] = offs;
  a->children[0] = child;
  return a;
}

/* Struct (or fixed-size list with one child): children references taken. */
static inline fsh_array *sbh_struct(const char *valid, int64_t n, int64_t n_children,
                                    fsh_array **children) {
  fsh_array *a = sbh_new(1, n_children, n, valid);
  for (int64_t i = 0; i < n_children; i++) a->children[i] = children[i];
  return a;
}

/* Unions: type ids, dense offsets (NULL for sparse), children taken. */
static inline fsh_array *sbh_union(int64_t n, const int8_t *ids, const int32_t *offsets,
                                   int64_t n_children, fsh_array **children) {
  fsh_array *a = SBH_OK(fsh_array_new(offsets ? 2 : 1, n_children));
  a->length = n;
  a->null_count = 0;
  a->buffers[0] = SBH_OK(fsh_buffer_copy(ids, n));
  if (offsets) a->buffers[1] = SBH_OK(fsh_buffer_copy(offsets, n * 4));
  for (int64_t i = 0; i < n_children; i++) a->children[i] = children[i];
  return a;
}

static inline void sbh_field(fsh_field *f, const char *name, fsh_type_id t, bool nullable) {
  SBH_RC(fsh_field_init(f, name, t, nullable));
}

/* Makes f dictionary-encoded (value type = f's type before the call). */
static inline fsh_field *sbh_dict(fsh_field *f, int64_t id, fsh_type_id index, bool ordered) {
  SBH_RC(fsh_field_set_dictionary(f, id, index, ordered));
  return &f->dictionary->value;
}

#define SBH_N 7
#define SBH_MAX_COLS 80

typedef struct sbh_cols {
  fsh_field fields[SBH_MAX_COLS];
  fsh_array *arrays[SBH_MAX_COLS];
  int n;
} sbh_cols;

static inline fsh_field *sbh_col(sbh_cols *c, const char *name, fsh_type_id t, bool nullable) {
  if (c->n == SBH_MAX_COLS) abort();
  fsh_field *f = &c->fields[c->n];
  memset(f, 0, sizeof *f);
  sbh_field(f, name, t, nullable);
  c->arrays[c->n] = NULL;
  c->n++;
  return f;
}
#define SBH_SET(c, arr) ((c)->arrays[(c)->n - 1] = (arr))

/* Moves the columns into a new schema and batch of `length` rows. */
static inline fsh_batch *sbh_finish(sbh_cols *c, int64_t length) {
  fsh_schema *s = SBH_OK(fsh_schema_new(c->n));
  memcpy(s->fields, c->fields, sizeof(fsh_field) * (size_t)c->n);
  fsh_batch *b = SBH_OK(fsh_batch_new(s, length));
  for (int i = 0; i < c->n; i++) b->columns[i] = c->arrays[i];
  fsh_schema_unref(s);
  return b;
}

static inline fsh_array *sbh_strings(const char *valid, int64_t n, const char *const *strs) {
  return sbh_binary(valid, n, strs, false);
}

/* The "every type" batch: 7 rows, nulls at rows 1 and 4 of most columns. */
static inline fsh_batch *fsh_sample_all_types(void) {
  sbh_cols c;
  c.n = 0;
  const char *V = "1011011";
  const int64_t n = SBH_N;
  fsh_field *f;

  f = sbh_col(&c, "null", FSH_TYPE_NA, true);
  {
    fsh_array *a = SBH_OK(fsh_array_new(0, 0));
    a->length = n;
    a->null_count = n;
    SBH_SET(&c, a);
  }
  f = sbh_col(&c, "bool", FSH_TYPE_BOOL, true);
  SBH_SET(&c, sbh_bool(V, "1101001"));
  SBH_RC(fsh_metadata_add(&f->metadata, "field_key", "field value", 11));

  { int8_t v[] = {1, -2, 3, -4, 5, -128, 127};
    sbh_col(&c, "i8", FSH_TYPE_INT8, true); SBH_SET(&c, sbh_fixed(V, n, v, 1)); }
  { int16_t v[] = {1, -2, 300, -4, 5, -32768, 32767};
    sbh_col(&c, "i16", FSH_TYPE_INT16, true); SBH_SET(&c, sbh_fixed(V, n, v, 2)); }
  { int32_t v[] = {1, -2, 70000, -4, 5, INT32_MIN, INT32_MAX};
    sbh_col(&c, "i32", FSH_TYPE_INT32, false); SBH_SET(&c, sbh_fixed(NULL, n, v, 4)); }
  { int64_t v[] = {1, -2, 5000000000LL, -4, 5, INT64_MIN, INT64_MAX};
    sbh_col(&c, "i64", FSH_TYPE_INT64, true); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { uint8_t v[] = {0, 1, 2, 3, 200, 254, 255};
    sbh_col(&c, "u8", FSH_TYPE_UINT8, true); SBH_SET(&c, sbh_fixed(V, n, v, 1)); }
  { uint16_t v[] = {0, 1, 2, 3, 60000, 254, 65535};
    sbh_col(&c, "u16", FSH_TYPE_UINT16, true); SBH_SET(&c, sbh_fixed(V, n, v, 2)); }
  { uint32_t v[] = {0, 1, 2, 3, 4000000000u, 254, UINT32_MAX};
    sbh_col(&c, "u32", FSH_TYPE_UINT32, true); SBH_SET(&c, sbh_fixed(V, n, v, 4)); }
  { uint64_t v[] = {0, 1, 2, 3, 10000000000000000000ull, 254, UINT64_MAX};
    sbh_col(&c, "u64", FSH_TYPE_UINT64, true); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { uint16_t v[] = {0x3C00, 0x4000, 0xC000, 0x3800, 0x7C00, 0x0000, 0x3555}; /* 1,2,-2,.5,inf,0,~1/3 */
    sbh_col(&c, "f16", FSH_TYPE_FLOAT16, true); SBH_SET(&c, sbh_fixed(V, n, v, 2)); }
  { float v[] = {1.5f, -2.25f, 3.0f, 0.0f, 1e30f, -1e-30f, 42.0f};
    sbh_col(&c, "f32", FSH_TYPE_FLOAT32, true); SBH_SET(&c, sbh_fixed(V, n, v, 4)); }
  { double v[] = {1.5, -2.25, 3.0, 0.0, 1e300, -1e-300, 42.0};
    sbh_col(&c, "f64", FSH_TYPE_FLOAT64, true); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  {
    int64_t v[2 * SBH_N];
    int64_t src[] = {12345, -5, 0, 99999, -100, 1, 7};
    for (int i = 0; i < n; i++) v[2 * i] = src[i], v[2 * i + 1] = src[i] < 0 ? -1 : 0;
    f = sbh_col(&c, "dec128", FSH_TYPE_DECIMAL128, true);
    f->precision = 10;
    f->scale = 2;
    SBH_SET(&c, sbh_fixed(V, n, v, 16));
  }
  {
    int64_t v[4 * SBH_N];
    int64_t src[] = {12345, -5, 0, 99999, -100, 1, 7};
    for (int i = 0; i < n; i++) {
      v[4 * i] = src[i];
      v[4 * i + 1] = v[4 * i + 2] = v[4 * i + 3] = src[i] < 0 ? -1 : 0;
    }
    f = sbh_col(&c, "dec256", FSH_TYPE_DECIMAL256, true);
    f->precision = 40;
    f->scale = 5;
    SBH_SET(&c, sbh_fixed(V, n, v, 32));
  }
  { int32_t v[] = {0, 1, 18000, -1, 19000, 365, 20000};
    sbh_col(&c, "date32", FSH_TYPE_DATE32, true); SBH_SET(&c, sbh_fixed(V, n, v, 4)); }
  { int64_t v[] = {0, 86400000LL, 1555555555000LL / 86400000 * 86400000, -86400000LL, 0, 86400000LL * 3, 86400000LL * 10000};
    sbh_col(&c, "date64", FSH_TYPE_DATE64, true); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { int32_t v[] = {0, 1, 3600, 86399, 60, 7, 100};
    f = sbh_col(&c, "time32s", FSH_TYPE_TIME32, true); f->unit = FSH_SECOND; SBH_SET(&c, sbh_fixed(V, n, v, 4)); }
  { int32_t v[] = {0, 1, 3600000, 86399999, 60, 7, 100};
    f = sbh_col(&c, "time32ms", FSH_TYPE_TIME32, true); f->unit = FSH_MILLI; SBH_SET(&c, sbh_fixed(V, n, v, 4)); }
  { int64_t v[] = {0, 1, 3600000000LL, 86399999999LL, 60, 7, 100};
    f = sbh_col(&c, "time64us", FSH_TYPE_TIME64, true); f->unit = FSH_MICRO; SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { int64_t v[] = {0, 1, 3600000000000LL, 86399999999999LL, 60, 7, 100};
    f = sbh_col(&c, "time64ns", FSH_TYPE_TIME64, true); f->unit = FSH_NANO; SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { int64_t v[] = {0, 1, 1700000000, -1, 60, 7, 100};
    f = sbh_col(&c, "ts_s", FSH_TYPE_TIMESTAMP, true); f->unit = FSH_SECOND; SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { int64_t v[] = {0, 1, 1700000000000LL, -1, 60, 7, 100};
    f = sbh_col(&c, "ts_ms_utc", FSH_TYPE_TIMESTAMP, true); f->unit = FSH_MILLI;
    SBH_RC(fsh_field_set_timezone(f, "UTC")); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { int64_t v[] = {0, 1, 1700000000000000LL, -1, 60, 7, 100};
    f = sbh_col(&c, "ts_us", FSH_TYPE_TIMESTAMP, true); f->unit = FSH_MICRO; SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  { int64_t v[] = {0, 1, 1700000000000000000LL, -1, 60, 7, 100};
    f = sbh_col(&c, "ts_ns_ny", FSH_TYPE_TIMESTAMP, true); f->unit = FSH_NANO;
    SBH_RC(fsh_field_set_timezone(f, "America/New_York")); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  {
    static const char *names[] = {"dur_s", "dur_ms", "dur_us", "dur_ns"};
    for (int u = 0; u < 4; u++) {
      int64_t v[] = {0, 1, -1, 1000, 60, 7, 100 * (u + 1)};
      f = sbh_col(&c, names[u], FSH_TYPE_DURATION, true);
      f->unit = (fsh_time_unit)u;
      SBH_SET(&c, sbh_fixed(V, n, v, 8));
    }
  }
  { int32_t v[] = {0, 1, 12, -1, 25, 7, 100};
    sbh_col(&c, "int_months", FSH_TYPE_INTERVAL_MONTHS, true); SBH_SET(&c, sbh_fixed(V, n, v, 4)); }
  { int32_t v[] = {0, 0, 1, 1000, -1, -5, 30, 86399999, 2, 2, 3, 3, 4, 4};
    sbh_col(&c, "int_dt", FSH_TYPE_INTERVAL_DAY_TIME, true); SBH_SET(&c, sbh_fixed(V, n, v, 8)); }
  {
    uint8_t v[16 * SBH_N];
    for (int i = 0; i < n; i++) {
      int32_t months = i, days = -i;
      int64_t nanos = 1000000007LL * i;
      memcpy(v + 16 * i, &months, 4);
      memcpy(v + 16 * i + 4, &days, 4);
      memcpy(v + 16 * i + 8, &nanos, 8);
    }
    sbh_col(&c, "int_mdn", FSH_TYPE_INTERVAL_MONTH_DAY_NANO, true);
    SBH_SET(&c, sbh_fixed(V, n, v, 16));
  }
  {
    const char *s[] = {"hello", "", "w\xc3\xb6rld", "skipped", "arrow", "", "last one"};
    sbh_col(&c, "bin", FSH_TYPE_BINARY, true); SBH_SET(&c, sbh_binary(V, n, s, false));
    sbh_col(&c, "str", FSH_TYPE_STRING, true); SBH_SET(&c, sbh_binary(V, n, s, false));
    sbh_col(&c, "lbin", FSH_TYPE_LARGE_BINARY, true); SBH_SET(&c, sbh_binary(V, n, s, true));
    sbh_col(&c, "lstr", FSH_TYPE_LARGE_STRING, true); SBH_SET(&c, sbh_binary("1111111", n, s, true));
  }
  {
    const char v[] = "abcdefghijklmnopqrstu";
    f = sbh_col(&c, "fsb3", FSH_TYPE_FIXED_SIZE_BINARY, true);
    f->byte_width = 3;
    SBH_SET(&c, sbh_fixed(V, n, v, 3));
  }
  { /* list<int32>: [1,2] null [] [3] null [4,5,6] [7] */
    int32_t iv[] = {1, 2, 3, 99, 4, 5, 6, 7};
    int64_t offs[] = {0, 2, 2, 2, 3, 4, 7, 8};
    f = sbh_col(&c, "list_i32", FSH_TYPE_LIST, true);
    SBH_RC(fsh_field_alloc_children(f, 1));
    sbh_field(&f->children[0], "item", FSH_TYPE_INT32, true);
    SBH_SET(&c, sbh_list(V, n, offs, false, sbh_fixed("11101111", 8, iv, 4)));
  }
  { /* large_list<utf8> */
    const char *s[] = {"a", "bb", "ccc", "dddd", "e", "ff"};
    int64_t offs[] = {0, 1, 3, 3, 4, 4, 6, 6};
    f = sbh_col(&c, "llist_str", FSH_TYPE_LARGE_LIST, true);
    SBH_RC(fsh_field_alloc_children(f, 1));
    sbh_field(&f->children[0], "item", FSH_TYPE_STRING, true);
    SBH_SET(&c, sbh_list("1101111", n, offs, true, sbh_strings("110111", 6, s)));
  }
  { /* fixed_size_list<int16, 2> */
    int16_t iv[2 * SBH_N];
    for (int i = 0; i < 2 * n; i++) iv[i] = (int16_t)(i * 3 - 7);
    f = sbh_col(&c, "fsl_i16x2", FSH_TYPE_FIXED_SIZE_LIST, true);
    f->list_size = 2;
    SBH_RC(fsh_field_alloc_children(f, 1));
    sbh_field(&f->children[0], "item", FSH_TYPE_INT16, true);
    fsh_array *child = sbh_fixed("11111111011111", 2 * n, iv, 2);
    SBH_SET(&c, sbh_struct(V, n, 1, &child));
  }
  { /* struct<a: int32, b: utf8 not null> */
    int32_t iv[] = {10, 20, 30, 40, 50, 60, 70};
    const char *s[] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6"};
    f = sbh_col(&c, "struct", FSH_TYPE_STRUCT, true);
    SBH_RC(fsh_field_alloc_children(f, 2));
    sbh_field(&f->children[0], "a", FSH_TYPE_INT32, true);
    sbh_field(&f->children[1], "b", FSH_TYPE_STRING, false);
    SBH_RC(fsh_metadata_add(&f->children[0].metadata, "child_key", "v", 1));
    fsh_array *ch[2] = {sbh_fixed("1111101", n, iv, 4), sbh_strings(NULL, n, s)};
    SBH_SET(&c, sbh_struct(V, n, 2, ch));
  }
  { /* map<utf8, int64> */
    const char *k[] = {"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"};
    int64_t vv[] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t offs[] = {0, 2, 2, 3, 3, 5, 7, 8};
    f = sbh_col(&c, "map", FSH_TYPE_MAP, true);
    f->keys_sorted = false;
    SBH_RC(fsh_field_alloc_children(f, 1));
    fsh_field *e = &f->children[0];
    sbh_field(e, "entries", FSH_TYPE_STRUCT, false);
    SBH_RC(fsh_field_alloc_children(e, 2));
    sbh_field(&e->children[0], "key", FSH_TYPE_STRING, false);
    sbh_field(&e->children[1], "value", FSH_TYPE_INT64, true);
    fsh_array *ch[2] = {sbh_strings(NULL, 8, k), sbh_fixed("11011111", 8, vv, 8)};
    fsh_array *entries = sbh_struct(NULL, 8, 2, ch);
    SBH_SET(&c, sbh_list(V, n, offs, false, entries));
  }
  { /* sparse_union<i: int32 = 0, s: utf8 = 1> */
    int8_t ids[] = {0, 1, 0, 0, 1, 1, 0};
    int32_t iv[] = {1, 0, 3, 4, 0, 0, 7};
    const char *s[] = {"", "one", "", "", "four", "five", ""};
    f = sbh_col(&c, "sparse_union", FSH_TYPE_SPARSE_UNION, true);
    SBH_RC(fsh_field_alloc_children(f, 2));
    sbh_field(&f->children[0], "i", FSH_TYPE_INT32, true);
    sbh_field(&f->children[1], "s", FSH_TYPE_STRING, true);
    f->type_codes = SBH_OK(fsh_malloc(2 * sizeof(int32_t)));
    f->type_codes[0] = 0;
    f->type_codes[1] = 1;
    fsh_array *ch[2] = {sbh_fixed("1011111", n, iv, 4), sbh_strings(NULL, n, s)};
    SBH_SET(&c, sbh_union(n, ids, NULL, 2, ch));
  }
  { /* dense_union<a: int8 = 5, b: float64 = 7> */
    int8_t ids[] = {5, 7, 7, 5, 5, 7, 5};
    int32_t offs[] = {0, 0, 1, 1, 2, 2, 3};
    int8_t av[] = {10, 11, 12, 13};
    double bv[] = {0.5, 1.5, 2.5};
    f = sbh_col(&c, "dense_union", FSH_TYPE_DENSE_UNION, true);
    SBH_RC(fsh_field_alloc_children(f, 2));
    sbh_field(&f->children[0], "a", FSH_TYPE_INT8, true);
    sbh_field(&f->children[1], "b", FSH_TYPE_FLOAT64, true);
    f->type_codes = SBH_OK(fsh_malloc(2 * sizeof(int32_t)));
    f->type_codes[0] = 5;
    f->type_codes[1] = 7;
    fsh_array *ch[2] = {sbh_fixed("1101", 4, av, 1), sbh_fixed(NULL, 3, bv, 8)};
    SBH_SET(&c, sbh_union(n, ids, offs, 2, ch));
  }
  { /* dictionary<int32, utf8> id 0 */
    const char *dv[] = {"red", "green", "blue"};
    int32_t idx[] = {0, 1, 2, 0, 2, 1, 1};
    f = sbh_col(&c, "dict_str", FSH_TYPE_STRING, true);
    sbh_dict(f, 0, FSH_TYPE_INT32, false);
    fsh_array *a = sbh_fixed(V, n, idx, 4);
    a->dictionary = sbh_strings("101", 3, dv);
    SBH_SET(&c, a);
  }
  { /* struct<d: dictionary<int16, int64> id 1, ordered> */
    int64_t dv[] = {100, 200, 300, 400};
    int16_t idx[] = {3, 2, 1, 0, 0, 1, 3};
    f = sbh_col(&c, "struct_dict", FSH_TYPE_STRUCT, true);
    SBH_RC(fsh_field_alloc_children(f, 1));
    sbh_field(&f->children[0], "d", FSH_TYPE_INT64, true);
    sbh_dict(&f->children[0], 1, FSH_TYPE_INT16, true);
    fsh_array *d = sbh_fixed("1110111", n, idx, 2);
    d->dictionary = sbh_fixed(NULL, 4, dv, 8);
    SBH_SET(&c, sbh_struct(NULL, n, 1, &d));
  }
  { /* nested dictionaries: dictionary<int8, list<dictionary<int8, utf8> id 3>> id 2 */
    const char *inner[] = {"x", "y", "z"};
    int8_t inner_idx[] = {0, 1, 2, 2, 1};
    int64_t list_offs[] = {0, 2, 2, 5};
    int8_t outer_idx[] = {0, 1, 2, 0, 2, 2, 1};
    f = sbh_col(&c, "dict_nested", FSH_TYPE_LIST, true);
    fsh_field *lv = sbh_dict(f, 2, FSH_TYPE_INT8, false);
    SBH_RC(fsh_field_alloc_children(lv, 1));
    sbh_field(&lv->children[0], "item", FSH_TYPE_STRING, true);
    sbh_dict(&lv->children[0], 3, FSH_TYPE_INT8, false);
    fsh_array *items = sbh_fixed(NULL, 5, inner_idx, 1);
    items->dictionary = sbh_strings(NULL, 3, inner);
    fsh_array *a = sbh_fixed(V, n, outer_idx, 1);
    a->dictionary = sbh_list(NULL, 3, list_offs, false, items);
    SBH_SET(&c, a);
  }
  fsh_batch *b = sbh_finish(&c, n);
  SBH_RC(fsh_metadata_add(&b->schema->metadata, "schema_key", "schema value", 12));
  SBH_RC(fsh_metadata_add(&b->schema->metadata, "empty", "", 0));
  return b;
}

/* schema { d: dictionary<int32, utf8> id 0 } */
static inline fsh_schema *fsh_sample_dict_schema(void) {
  fsh_schema *s = SBH_OK(fsh_schema_new(1));
  sbh_field(&s->fields[0], "d", FSH_TYPE_STRING, true);
  sbh_dict(&s->fields[0], 0, FSH_TYPE_INT32, false);
  return s;
}

/* A batch of fsh_sample_dict_schema() rows: indices into the dictionary
 * `dict` (a reference is taken). */
static inline fsh_batch *fsh_sample_dict_batch(fsh_schema *s, fsh_array *dict, int64_t n,
                                               const int32_t *indices) {
  fsh_batch *b = SBH_OK(fsh_batch_new(s, n));
  fsh_array *a = sbh_fixed(NULL, n, indices, 4);
  a->dictionary = fsh_array_ref(dict);
  b->columns[0] = a;
  return b;
}

#endif
