/* test_c_data.c -- the C Data and C Stream Interfaces: round trips of every
 * type (export -> import -> equal, and the very same buffer addresses),
 * release callbacks called exactly once, malformed imports refused with a
 * clear message, and allocation failures leaving nothing behind. */
#include <flightshuffle/arrow.h>

#include "test.h"

#include <errno.h>
#include <stdint.h>

/* ---- building fields and arrays for tests ------------------------------ */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void must(int rc) {
  if (rc) {
    fprintf(stderr, "test setup failed: %d\n", rc);
    abort();
  }
}

static fsh_field *add_child(fsh_field *f, int64_t i, const char *name, fsh_type_id t,
                            bool nullable) {
  must(fsh_field_init(&f->children[i], name, t, nullable));
  return &f->children[i];
}

/* Turns f (already of the value type) into a dictionary with index_type. */
static void make_dict(fsh_field *f, int64_t id, fsh_type_id index_type, bool ordered) {
  must(fsh_field_set_dictionary(f, id, index_type, ordered));
}

#define N_ALL 50

/* Fills s (N_ALL fields) with every type we support, nested ones included. */
static fsh_schema *all_types_schema(void) {
  fsh_schema *s = fsh_schema_new(N_ALL);
  fsh_field *f = s->fields;
  int i = 0;
  static const fsh_type_id simple[] = {
      FSH_TYPE_NA,           FSH_TYPE_BOOL,         FSH_TYPE_INT8,
      FSH_TYPE_INT16,        FSH_TYPE_INT32,        FSH_TYPE_INT64,
      FSH_TYPE_UINT8,        FSH_TYPE_UINT16,       FSH_TYPE_UINT32,
      FSH_TYPE_UINT64,       FSH_TYPE_FLOAT16,      FSH_TYPE_FLOAT32,
      FSH_TYPE_FLOAT64,      FSH_TYPE_DATE32,       FSH_TYPE_DATE64,
      FSH_TYPE_INTERVAL_MONTHS, FSH_TYPE_INTERVAL_DAY_TIME, FSH_TYPE_INTERVAL_MONTH_DAY_NANO,
      FSH_TYPE_BINARY,       FSH_TYPE_STRING,       FSH_TYPE_LARGE_BINARY,
      FSH_TYPE_LARGE_STRING,
  };
  for (size_t k = 0; k < sizeof simple / sizeof simple[0]; k++) {
    char name[32];
    snprintf(name, sizeof name, "%s_col", fsh_type_name(simple[k]));
    must(fsh_field_init(&f[i++], name, simple[k], true));
  }
  must(fsh_field_init(&f[i], "dec128", FSH_TYPE_DECIMAL128, true));
  f[i].precision = 38, f[i++].scale = 10;
  must(fsh_field_init(&f[i], "dec256", FSH_TYPE_DECIMAL256, false));
  f[i].precision = 76, f[i++].scale = -3;
  must(fsh_field_init(&f[i], "t32s", FSH_TYPE_TIME32, true));
  f[i++].unit = FSH_SECOND;
  must(fsh_field_init(&f[i], "t32ms", FSH_TYPE_TIME32, true));
  f[i++].unit = FSH_MILLI;
  must(fsh_field_init(&f[i], "t64us", FSH_TYPE_TIME64, true));
  f[i++].unit = FSH_MICRO;
  must(fsh_field_init(&f[i], "t64ns", FSH_TYPE_TIME64, true));
  f[i++].unit = FSH_NANO;
  must(fsh_field_init(&f[i], "ts_naive", FSH_TYPE_TIMESTAMP, true));
  f[i++].unit = FSH_MILLI;
  must(fsh_field_init(&f[i], "ts_tz", FSH_TYPE_TIMESTAMP, true));
  f[i].unit = FSH_NANO;
  must(fsh_field_set_timezone(&f[i++], "Europe/Paris"));
  must(fsh_field_init(&f[i], "dur", FSH_TYPE_DURATION, true));
  f[i++].unit = FSH_MICRO;
  must(fsh_field_init(&f[i], "fsb", FSH_TYPE_FIXED_SIZE_BINARY, true));
  f[i++].byte_width = 5;
  /* list<int32>, large_list<utf8>, fixed_size_list<int16>[3] */
  must(fsh_field_init(&f[i], "list", FSH_TYPE_LIST, true));
  must(fsh_field_alloc_children(&f[i], 1));
  add_child(&f[i++], 0, "item", FSH_TYPE_INT32, true);
  must(fsh_field_init(&f[i], "large_list", FSH_TYPE_LARGE_LIST, true));
  must(fsh_field_alloc_children(&f[i], 1));
  add_child(&f[i++], 0, "item", FSH_TYPE_STRING, true);
  must(fsh_field_init(&f[i], "fsl", FSH_TYPE_FIXED_SIZE_LIST, true));
  f[i].list_size = 3;
  must(fsh_field_alloc_children(&f[i], 1));
  add_child(&f[i++], 0, "item", FSH_TYPE_INT16, true);
  /* struct<a: int64, b: list<bool>> with metadata on a child */
  must(fsh_field_init(&f[i], "struct", FSH_TYPE_STRUCT, true));
  must(fsh_field_alloc_children(&f[i], 2));
  fsh_field *sa = add_child(&f[i], 0, "a", FSH_TYPE_INT64, false);
  must(fsh_metadata_add(&sa->metadata, "k\0ey", "v\0al", 4)); /* key stops at NUL */
  fsh_field *sb = add_child(&f[i++], 1, "b", FSH_TYPE_LIST, true);
  must(fsh_field_alloc_children(sb, 1));
  add_child(sb, 0, "item", FSH_TYPE_BOOL, true);
  /* map<utf8, float64> with keys sorted */
  must(fsh_field_init(&f[i], "map", FSH_TYPE_MAP, true));
  f[i].keys_sorted = true;
  must(fsh_field_alloc_children(&f[i], 1));
  fsh_field *entries = add_child(&f[i++], 0, "entries", FSH_TYPE_STRUCT, false);
  must(fsh_field_alloc_children(entries, 2));
  add_child(entries, 0, "key", FSH_TYPE_STRING, false);
  add_child(entries, 1, "value", FSH_TYPE_FLOAT64, true);
  /* unions with non-trivial type codes */
  for (int dense = 0; dense < 2; dense++) {
    must(fsh_field_init(&f[i], dense ? "dense" : "sparse",
                        dense ? FSH_TYPE_DENSE_UNION : FSH_TYPE_SPARSE_UNION, false));
    must(fsh_field_alloc_children(&f[i], 3));
    f[i].type_codes = fsh_malloc(3 * sizeof(int32_t));
    f[i].type_codes[0] = 5, f[i].type_codes[1] = 2, f[i].type_codes[2] = 127;
    add_child(&f[i], 0, "i", FSH_TYPE_INT32, true);
    add_child(&f[i], 1, "s", FSH_TYPE_STRING, true);
    add_child(&f[i++], 2, "n", FSH_TYPE_NA, true);
  }
  /* dictionaries: every index type, one ordered, one of a nested value */
  static const fsh_type_id idx[] = {FSH_TYPE_INT8,  FSH_TYPE_INT16,  FSH_TYPE_INT32,
                                    FSH_TYPE_INT64, FSH_TYPE_UINT8,  FSH_TYPE_UINT16,
                                    FSH_TYPE_UINT32, FSH_TYPE_UINT64};
  for (size_t k = 0; k < 8; k++) {
    char name[32];
    snprintf(name, sizeof name, "dict_%s", fsh_type_name(idx[k]));
    must(fsh_field_init(&f[i], name, FSH_TYPE_STRING, true));
    make_dict(&f[i++], (int64_t)k, idx[k], k == 3);
  }
  /* dictionary whose values are a list of dictionary-encoded strings */
  must(fsh_field_init(&f[i], "nested_dict", FSH_TYPE_LIST, true));
  make_dict(&f[i], 20, FSH_TYPE_INT32, false);
  fsh_field *dv = &f[i++].dictionary->value;
  must(fsh_field_alloc_children(dv, 1));
  fsh_field *inner = add_child(dv, 0, "item", FSH_TYPE_STRING, true);
  make_dict(inner, 21, FSH_TYPE_INT16, true);
  /* an extension type is its storage plus field metadata */
  must(fsh_field_init(&f[i], "ext_uuid", FSH_TYPE_FIXED_SIZE_BINARY, true));
  f[i].byte_width = 16;
  must(fsh_metadata_add(&f[i].metadata, "ARROW:extension:name", "arrow.uuid", -1));
  must(fsh_metadata_add(&f[i++].metadata, "ARROW:extension:metadata", "", 0));
  /* a duplicate name */
  must(fsh_field_init(&f[i++], "int8_col", FSH_TYPE_INT8, false));
  if (i != N_ALL) {
    fprintf(stderr, "all_types_schema built %d fields, expected %d\n", i, N_ALL);
    abort();
  }
  must(fsh_metadata_add(&s->metadata, "schema key", "schema value", -1));
  must(fsh_metadata_add(&s->metadata, "empty", "", 0));
  return s;
}

static fsh_buffer *random_bytes(int64_t n, uint64_t *rng) {
  fsh_buffer *b = fsh_buffer_new(n, true);
  for (int64_t i = 0; i < n; i++) b->data[i] = (uint8_t)rng_next(rng);
  return b;
}

static void write_index(uint8_t *p, int width, int64_t i, uint64_t v) {
  switch (width) {
    case 1: p[i] = (uint8_t)v; break;
    case 2: { uint16_t x = (uint16_t)v; memcpy(p + i * 2, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(p + i * 4, &x, 4); break; }
    default: memcpy(p + i * 8, &v, 8);
  }
}

static fsh_array *make_array(const fsh_field *f, int64_t len, uint64_t *rng);

/* An offsets buffer of (len + 1) entries whose steps are 0..max_step;
 * returns the total. */
static fsh_buffer *make_offsets(int64_t len, int width, int max_step, uint64_t *rng,
                                int64_t *total) {
  fsh_buffer *b = fsh_buffer_new((len + 1) * width, true);
  int64_t pos = 0;
  for (int64_t i = 0; i <= len; i++) {
    write_index(b->data, width, i, (uint64_t)pos);
    pos += (int64_t)(rng_next(rng) % (uint64_t)(max_step + 1));
  }
  pos -= 0;
  /* the last step was not written: total is the last written value */
  int64_t last = 0;
  memcpy(&last, b->data + len * width, (size_t)width);
  *total = last;
  return b;
}

static fsh_array *make_array(const fsh_field *f, int64_t len, uint64_t *rng) {
  bool dict = f->dictionary != NULL;
  fsh_array *a = fsh_array_new(fsh_type_n_buffers(f->type), dict ? 0 : f->n_children);
  a->length = len;
  a->null_count = 0;
  fsh_type_id t = f->type;
  bool validity = t != FSH_TYPE_NA && t != FSH_TYPE_SPARSE_UNION && t != FSH_TYPE_DENSE_UNION;
  if (validity && f->nullable) {
    fsh_buffer *v = fsh_buffer_new(fsh_bytes_for_bits(len), true);
    for (int64_t i = 0; i < len; i++) fsh_bit_set(v->data, i, rng_next(rng) % 4 != 0);
    a->buffers[0] = v;
    a->null_count = len - fsh_bitmap_count(v->data, 0, len);
  }
  if (dict) {
    int width = fsh_type_bit_width(f) / 8;
    int64_t dict_len = 6;
    fsh_buffer *b = fsh_buffer_new(len * width, true);
    for (int64_t i = 0; i < len; i++) write_index(b->data, width, i, rng_next(rng) % dict_len);
    a->buffers[1] = b;
    a->dictionary = make_array(&f->dictionary->value, dict_len, rng);
    return a;
  }
  int64_t total;
  switch (t) {
    case FSH_TYPE_NA:
      a->null_count = len;
      break;
    case FSH_TYPE_BOOL:
      a->buffers[1] = random_bytes(fsh_bytes_for_bits(len), rng);
      break;
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64: {
      int w = fsh_type_bit_width(f) / 8;
      fsh_buffer *b = fsh_buffer_new(len * w, true);
      for (int64_t i = 0; i < len; i++) {
        uint64_t r = rng_next(rng) % 1000;
        if (w == 2) { uint16_t h = (uint16_t)(0x3c00 + r); memcpy(b->data + i * 2, &h, 2); }
        if (w == 4) { float x = (float)r / 8; memcpy(b->data + i * 4, &x, 4); }
        if (w == 8) { double x = (double)r / 16; memcpy(b->data + i * 8, &x, 8); }
      }
      a->buffers[1] = b;
      break;
    }
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      int w = (t == FSH_TYPE_BINARY || t == FSH_TYPE_STRING) ? 4 : 8;
      a->buffers[1] = make_offsets(len, w, 7, rng, &total);
      fsh_buffer *d = fsh_buffer_new(total, true);
      for (int64_t i = 0; i < total; i++) d->data[i] = (uint8_t)('a' + rng_next(rng) % 26);
      a->buffers[2] = d;
      break;
    }
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      a->buffers[1] = make_offsets(len, t == FSH_TYPE_LARGE_LIST ? 8 : 4, 3, rng, &total);
      a->children[0] = make_array(&f->children[0], total, rng);
      break;
    case FSH_TYPE_FIXED_SIZE_LIST:
      a->children[0] = make_array(&f->children[0], len * f->list_size, rng);
      break;
    case FSH_TYPE_STRUCT:
      for (int64_t c = 0; c < f->n_children; c++)
        a->children[c] = make_array(&f->children[c], len, rng);
      break;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: {
      bool dense = t == FSH_TYPE_DENSE_UNION;
      fsh_buffer *ids = fsh_buffer_new(len, true);
      fsh_buffer *offs = dense ? fsh_buffer_new(len * 4, true) : NULL;
      int64_t counts[128] = {0};
      for (int64_t i = 0; i < len; i++) {
        int64_t c = (int64_t)(rng_next(rng) % (uint64_t)f->n_children);
        ids->data[i] = (uint8_t)f->type_codes[c];
        if (dense) write_index(offs->data, 4, i, (uint64_t)counts[c]);
        counts[c]++;
      }
      a->buffers[0] = ids;
      if (dense) a->buffers[1] = offs;
      for (int64_t c = 0; c < f->n_children; c++)
        a->children[c] = make_array(&f->children[c], dense ? counts[c] : len, rng);
      break;
    }
    default:
      a->buffers[1] = random_bytes(len * (fsh_type_bit_width(f) / 8), rng);
  }
  return a;
}

static fsh_batch *make_batch(fsh_schema *s, int64_t len, uint64_t seed) {
  fsh_batch *b = fsh_batch_new(s, len);
  for (int64_t i = 0; i < s->n_fields; i++) b->columns[i] = make_array(&s->fields[i], len, &seed);
  return b;
}

/* ---- helpers: zero-copy check and release counting --------------------- */

/* Whether every buffer of b is the very memory of the same buffer of a. */
static bool same_memory(const fsh_array *a, const fsh_array *b, const char *path) {
  bool ok = a->n_buffers == b->n_buffers && a->n_children == b->n_children &&
            !a->dictionary == !b->dictionary;
  if (!ok) {
    fprintf(stderr, "%s: shape differs\n", path);
    return false;
  }
  for (int i = 0; i < a->n_buffers; i++) {
    const void *pa = a->buffers[i] ? a->buffers[i]->data : NULL;
    const void *pb = b->buffers[i] ? b->buffers[i]->data : NULL;
    if (pa != pb) {
      fprintf(stderr, "%s: buffer %d at %p, copy at %p\n", path, i, pa, pb);
      ok = false;
    }
  }
  for (int64_t i = 0; i < a->n_children; i++)
    ok &= same_memory(a->children[i], b->children[i], path);
  if (a->dictionary) ok &= same_memory(a->dictionary, b->dictionary, path);
  return ok;
}

static int release_calls;
static void (*orig_array_release)(struct ArrowArray *);
static void (*orig_schema_release)(struct ArrowSchema *);
static void (*orig_stream_release)(struct ArrowArrayStream *);

static void counting_array_release(struct ArrowArray *a) {
  release_calls++;
  a->release = orig_array_release;
  a->release(a);
}
static void counting_schema_release(struct ArrowSchema *s) {
  release_calls++;
  s->release = orig_schema_release;
  s->release(s);
}
static void counting_stream_release(struct ArrowArrayStream *s) {
  release_calls++;
  s->release = orig_stream_release;
  s->release(s);
}

/* ---- tests ------------------------------------------------------------- */

static void test_schema_roundtrip_all_types(void) {
  fsh_error err = {{0}};
  fsh_schema *s = all_types_schema();
  struct ArrowSchema c;
  CHECK_OK(fsh_schema_export(s, &c, &err));
  CHECK(strcmp(c.format, "+s") == 0);
  CHECK_EQ_INT(c.n_children, N_ALL);
  /* a few format strings straight from the specification */
  static const struct { int col; const char *format; } want[] = {
      {0, "n"},        {1, "b"},          {2, "c"},           {3, "s"},   {4, "i"},
      {5, "l"},        {6, "C"},          {7, "S"},           {8, "I"},   {9, "L"},
      {10, "e"},       {11, "f"},         {12, "g"},          {13, "tdD"}, {14, "tdm"},
      {15, "tiM"},     {16, "tiD"},       {17, "tin"},        {18, "z"},  {19, "u"},
      {20, "Z"},       {21, "U"},         {22, "d:38,10"},    {23, "d:76,-3,256"},
      {24, "tts"},     {25, "ttm"},       {26, "ttu"},        {27, "ttn"}, {28, "tsm:"},
      {29, "tsn:Europe/Paris"}, {30, "tDu"}, {31, "w:5"},      {32, "+l"}, {33, "+L"},
      {34, "+w:3"},    {35, "+s"},        {36, "+m"},         {37, "+us:5,2,127"},
      {38, "+ud:5,2,127"}, {39, "c"},     {46, "L"},          {47, "i"},  {48, "w:16"},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
    CHECK_MSG(strcmp(c.children[want[k].col]->format, want[k].format) == 0, "column %d: %s != %s",
              want[k].col, c.children[want[k].col]->format, want[k].format);
  CHECK(c.children[36]->flags == (ARROW_FLAG_NULLABLE | ARROW_FLAG_MAP_KEYS_SORTED));
  CHECK(c.children[42]->flags == (ARROW_FLAG_NULLABLE | ARROW_FLAG_DICTIONARY_ORDERED));
  CHECK(c.children[37]->flags == 0);
  CHECK(c.children[42]->dictionary && strcmp(c.children[42]->dictionary->format, "u") == 0);
  CHECK(c.children[39]->dictionary && c.children[0]->dictionary == NULL);
  CHECK(c.children[0]->metadata == NULL);
  /* the spec's own metadata example layout, on this (little-endian) machine */
  const char *m = c.children[48]->metadata;
  CHECK(m && memcmp(m, "\x02\x00\x00\x00\x14\x00\x00\x00" "ARROW:extension:name"
                       "\x0a\x00\x00\x00" "arrow.uuid", 4 + 4 + 20 + 4 + 10) == 0);

  orig_schema_release = c.release;
  c.release = counting_schema_release;
  release_calls = 0;
  fsh_schema *back = NULL;
  CHECK_OK(fsh_schema_import(&c, &back, &err));
  CHECK(c.release == NULL);
  CHECK_EQ_INT(release_calls, 1);
  fsh_error diff = {{0}};
  CHECK_MSG(back && fsh_schema_equals(s, back, true, &diff), "%s", diff.message);
  if (back) {
    /* dictionary ids are made up on import: unique within the schema */
    CHECK_EQ_INT(back->fields[39].dictionary->id, 0);
    CHECK(back->fields[47].dictionary->id != back->fields[47].dictionary->value.children[0]
                                                 .dictionary->id);
    CHECK(back->fields[43].dictionary->ordered == false);
    CHECK(back->fields[42].dictionary->ordered == true);
    CHECK(back->fields[36].keys_sorted);
    CHECK(back->fields[28].timezone == NULL);
    CHECK(back->fields[29].timezone && strcmp(back->fields[29].timezone, "Europe/Paris") == 0);
    const fsh_kv *kv = fsh_metadata_find(&back->fields[35].children[0].metadata, "k");
    CHECK(kv && kv->value_len == 4 && memcmp(kv->value, "v\0al", 4) == 0);
  }
  fsh_schema_unref(back);
  fsh_schema_unref(s);
}

static void test_field_roundtrip(void) {
  fsh_error err = {{0}};
  fsh_schema *s = all_types_schema();
  for (int64_t i = 0; i < s->n_fields; i++) {
    struct ArrowSchema c;
    CHECK_OK(fsh_field_export(&s->fields[i], &c, &err));
    fsh_field back;
    CHECK_OK(fsh_field_import(&c, &back, &err));
    fsh_error diff = {{0}};
    CHECK_MSG(fsh_field_equals(&s->fields[i], &back, false, &diff), "field %lld: %s",
              (long long)i, diff.message);
    fsh_field_reset(&back);
  }
  fsh_schema_unref(s);
}

/* Export -> import of batch b; checks equality and zero copy, and that the
 * producer's release runs exactly once, when the imported batch goes. */
static void roundtrip_batch(fsh_batch *b) {
  fsh_error err = {{0}};
  struct ArrowArray c;
  CHECK_OK(fsh_batch_export(b, &c, &err));
  orig_array_release = c.release;
  c.release = counting_array_release;
  release_calls = 0;
  fsh_batch *back = NULL;
  CHECK_OK(fsh_batch_import(&c, b->schema, &back, &err));
  CHECK(c.release == NULL);
  CHECK_EQ_INT(release_calls, 0); /* imported buffers keep the export alive */
  if (back) {
    fsh_error diff = {{0}};
    CHECK_MSG(fsh_batch_equals(b, back, &diff), "%s", diff.message);
    CHECK_MSG(fsh_batch_validate(back, true, &diff) == 0, "%s", diff.message);
    CHECK_EQ_INT(back->length, b->length);
    for (int64_t i = 0; i < b->n_columns; i++) {
      CHECK_MSG(same_memory(b->columns[i], back->columns[i], b->schema->fields[i].name),
                "column %lld copied", (long long)i);
      CHECK_EQ_INT(back->columns[i]->offset, b->columns[i]->offset);
    }
  }
  fsh_batch_unref(back);
  CHECK_EQ_INT(release_calls, 1);
}

static void test_batch_roundtrip_all_types(void) {
  fsh_schema *s = all_types_schema();
  fsh_batch *b = make_batch(s, 100, 42);
  fsh_error diff = {{0}};
  CHECK_MSG(fsh_batch_validate(b, true, &diff) == 0, "test data invalid: %s", diff.message);
  roundtrip_batch(b);
  /* one column at a time through fsh_array_export / fsh_array_import */
  fsh_error err = {{0}};
  for (int64_t i = 0; i < s->n_fields; i++) {
    struct ArrowArray c;
    CHECK_OK(fsh_array_export(b->columns[i], &c, &err));
    fsh_array *back = NULL;
    CHECK_OK(fsh_array_import(&c, &s->fields[i], &back, &err));
    CHECK_MSG(back && fsh_array_equals(&s->fields[i], b->columns[i], back, &diff), "%s: %s",
              s->fields[i].name, diff.message);
    CHECK(back && same_memory(b->columns[i], back, s->fields[i].name));
    fsh_array_unref(back);
  }
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

static void test_sliced_and_empty(void) {
  fsh_schema *s = all_types_schema();
  fsh_batch *b = make_batch(s, 64, 7);
  fsh_batch *sl = fsh_batch_slice(b, 13, 29);
  roundtrip_batch(sl);
  fsh_batch *empty = fsh_batch_slice(b, 64, 0);
  roundtrip_batch(empty);
  fsh_batch *zero = make_batch(s, 0, 9);
  roundtrip_batch(zero);
  fsh_batch_unref(zero);
  fsh_batch_unref(empty);
  fsh_batch_unref(sl);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

/* A foreign struct array with a top-level offset: the batch's columns are
 * sliced accordingly. */
static void test_import_struct_offset(void) {
  fsh_error err = {{0}};
  fsh_schema *s = fsh_schema_new(1);
  must(fsh_field_init(&s->fields[0], "x", FSH_TYPE_INT32, false));
  fsh_batch *b = make_batch(s, 10, 3);
  struct ArrowArray c;
  CHECK_OK(fsh_batch_export(b, &c, &err));
  c.offset = 4;
  c.length = 5;
  fsh_batch *back = NULL;
  CHECK_OK(fsh_batch_import(&c, s, &back, &err));
  if (back) {
    fsh_batch *want = fsh_batch_slice(b, 4, 5);
    fsh_error diff = {{0}};
    CHECK_MSG(fsh_batch_equals(want, back, &diff), "%s", diff.message);
    CHECK_EQ_INT(back->columns[0]->offset, 4);
    fsh_batch_unref(want);
  }
  fsh_batch_unref(back);
  /* past the end of the columns */
  CHECK_OK(fsh_batch_export(b, &c, &err));
  c.offset = 8;
  CHECK_EQ_INT(fsh_batch_import(&c, s, &back, &err), EINVAL);
  CHECK(strstr(err.message, "fewer than") != NULL);
  CHECK(c.release == NULL);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

/* Imports a one-node schema with the given format and child count (0
 * only: no child nodes exist); returns the code. The exported node owns
 * its own copy of the format, so pointing `format` elsewhere is safe. */
static int import_format(const char *format, int64_t n_children, fsh_error *err) {
  fsh_field f;
  must(fsh_field_init(&f, "x", FSH_TYPE_INT32, true));
  struct ArrowSchema c;
  must(fsh_field_export(&f, &c, err));
  fsh_field_reset(&f);
  c.format = format;
  c.n_children = n_children;
  fsh_field out;
  int rc = fsh_field_import(&c, &out, err);
  if (rc == 0) fsh_field_reset(&out);
  CHECK(c.release == NULL);
  return rc;
}

static void test_malformed_schema(void) {
  fsh_error err = {{0}};
  static const char *bad[] = {"q",     "",      "d:abc",  "d:10",  "d:10,2,",  "w:",   "w:-1",
                              "+w:",   "tsx:",  "tss",    "+us:1,x", "+ud:200", "ii",  "td",
                              "tDx",   "+q",    "+w:3x",  "d:10,2,64x"};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    int rc = import_format(bad[k], 0, &err);
    CHECK_MSG(rc == EINVAL, "format '%s' gave %d", bad[k], rc);
    CHECK_MSG(strstr(err.message, "format") != NULL, "format '%s': %s", bad[k], err.message);
  }
  static const char *unsupported[] = {"vu", "vz", "+vl", "+vL", "+r", "d:10,2,64"};
  for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++) {
    int rc = import_format(unsupported[k], 0, &err);
    CHECK_MSG(rc == ENOTSUP, "format '%s' gave %d", unsupported[k], rc);
    CHECK_MSG(strstr(err.message, "not supported") != NULL, "%s", err.message);
  }
  /* children count mismatches: a list without its child */
  CHECK_EQ_INT(import_format("+l", 0, &err), EINVAL);
  CHECK(strstr(err.message, "needs 1 children, got 0") != NULL);
  CHECK_EQ_INT(import_format("+us:1,2", 0, &err), EINVAL);
  CHECK_EQ_INT(import_format("+s", 0, &err), 0);
  /* a released schema */
  struct ArrowSchema released = {0};
  fsh_field out;
  CHECK_EQ_INT(fsh_field_import(&released, &out, &err), EINVAL);
  CHECK(strstr(err.message, "released") != NULL);
  /* a dictionary whose index type is not an integer */
  fsh_field f;
  must(fsh_field_init(&f, "d", FSH_TYPE_STRING, true));
  make_dict(&f, 0, FSH_TYPE_INT32, false);
  struct ArrowSchema c;
  CHECK_OK(fsh_field_export(&f, &c, &err));
  c.format = "g"; /* the release frees the node's own copy regardless */
  CHECK_EQ_INT(fsh_field_import(&c, &out, &err), EINVAL);
  CHECK(strstr(err.message, "not an integer") != NULL);
  fsh_field_reset(&f);
  /* a non-struct schema */
  must(fsh_field_init(&f, "x", FSH_TYPE_INT32, true));
  CHECK_OK(fsh_field_export(&f, &c, &err));
  fsh_schema *s = NULL;
  CHECK_EQ_INT(fsh_schema_import(&c, &s, &err), EINVAL);
  CHECK(strstr(err.message, "'+s'") != NULL);
  CHECK(c.release == NULL);
  fsh_field_reset(&f);
}

static void test_malformed_array(void) {
  fsh_error err = {{0}};
  fsh_schema *s = all_types_schema();
  fsh_batch *b = make_batch(s, 20, 11);
  struct ArrowArray c;
  fsh_array *out = NULL;
  /* wrong n_buffers for utf8 (column 19) */
  CHECK_OK(fsh_array_export(b->columns[19], &c, &err));
  c.n_buffers = 2;
  CHECK_EQ_INT(fsh_array_import(&c, &s->fields[19], &out, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "needs 3 buffers, the array has 2") != NULL, "%s", err.message);
  CHECK(c.release == NULL);
  /* n_children mismatch for the struct (column 35) */
  fsh_field narrow;
  must(fsh_field_init(&narrow, "struct", FSH_TYPE_STRUCT, true));
  must(fsh_field_alloc_children(&narrow, 1));
  add_child(&narrow, 0, "a", FSH_TYPE_INT64, false);
  CHECK_OK(fsh_array_export(b->columns[35], &c, &err));
  CHECK_EQ_INT(fsh_array_import(&c, &narrow, &out, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "has 1 children, the array has 2") != NULL, "%s", err.message);
  fsh_field_reset(&narrow);
  /* missing dictionary */
  CHECK_OK(fsh_array_export(b->columns[39], &c, &err));
  struct ArrowArray dict = *c.dictionary; /* moved out of its parent */
  c.dictionary->release = NULL;
  c.dictionary = NULL;
  CHECK_EQ_INT(fsh_array_import(&c, &s->fields[39], &out, &err), EINVAL);
  CHECK(strstr(err.message, "no dictionary") != NULL);
  dict.release(&dict);
  /* nulls counted but no validity bitmap */
  CHECK_OK(fsh_array_export(b->columns[4], &c, &err));
  c.buffers[0] = NULL;
  c.null_count = 3;
  CHECK_EQ_INT(fsh_array_import(&c, &s->fields[4], &out, &err), EINVAL);
  CHECK(strstr(err.message, "no validity buffer") != NULL);
  /* a NULL data buffer that must hold bytes */
  CHECK_OK(fsh_array_export(b->columns[4], &c, &err));
  c.buffers[1] = NULL;
  CHECK_EQ_INT(fsh_array_import(&c, &s->fields[4], &out, &err), EINVAL);
  CHECK(strstr(err.message, "is NULL but needs 80 bytes") != NULL);
  /* negative length */
  CHECK_OK(fsh_array_export(b->columns[4], &c, &err));
  c.length = -1;
  CHECK_EQ_INT(fsh_array_import(&c, &s->fields[4], &out, &err), EINVAL);
  /* batch with the wrong column count */
  CHECK_OK(fsh_batch_export(b, &c, &err));
  fsh_schema *one = fsh_schema_new(1);
  must(fsh_field_init(&one->fields[0], "x", FSH_TYPE_INT32, false));
  fsh_batch *bb = NULL;
  CHECK_EQ_INT(fsh_batch_import(&c, one, &bb, &err), EINVAL);
  CHECK(strstr(err.message, "children but the schema 1 fields") != NULL);
  /* a released child */
  CHECK_OK(fsh_batch_export(b, &c, &err));
  struct ArrowArray moved = *c.children[4];
  c.children[4]->release = NULL;
  CHECK_EQ_INT(fsh_batch_import(&c, s, &bb, &err), EINVAL);
  CHECK(strstr(err.message, "released") != NULL);
  moved.release(&moved);
  /* NULL buffers allowed where the size is 0 */
  fsh_array *empty = fsh_array_slice(b->columns[19], 0, 0);
  CHECK_OK(fsh_array_export(empty, &c, &err));
  c.buffers[0] = c.buffers[1] = c.buffers[2] = NULL;
  c.offset = 0;
  CHECK_OK(fsh_array_import(&c, &s->fields[19], &out, &err));
  CHECK(out && out->buffers[1] && out->buffers[1]->size == 4);
  fsh_array_unref(out);
  fsh_array_unref(empty);
  fsh_schema_unref(one);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

/* A producer stream that fails on its second get_next. */
typedef struct failing_state {
  fsh_batch *batch;
  int calls;
} failing_state;

static int failing_next(fsh_batch_stream *s, fsh_batch **out, fsh_error *err) {
  failing_state *st = s->private_data;
  if (st->calls++ == 0) {
    *out = fsh_batch_ref(st->batch);
    return 0;
  }
  return fsh_error_set(err, EIO, "disk on fire at batch %d", st->calls);
}

static void failing_release(fsh_batch_stream *s) {
  failing_state *st = s->private_data;
  fsh_batch_unref(st->batch);
  fsh_schema_unref(s->schema);
  s->release = NULL;
}

static void test_stream_roundtrip(void) {
  fsh_error err = {{0}};
  fsh_schema *s = all_types_schema();
  fsh_batch *batches[3] = {make_batch(s, 10, 1), make_batch(s, 0, 2), make_batch(s, 33, 3)};
  fsh_batch_stream src;
  CHECK_OK(fsh_batch_stream_from_batches(s, batches, 3, &src, &err));
  struct ArrowArrayStream cs;
  CHECK_OK(fsh_stream_export(&src, &cs, &err));
  CHECK(src.release == NULL);
  orig_stream_release = cs.release;
  cs.release = counting_stream_release;
  release_calls = 0;
  fsh_batch_stream in;
  CHECK_OK(fsh_stream_import(&cs, &in, &err));
  CHECK(cs.release == NULL);
  fsh_error diff = {{0}};
  CHECK_MSG(fsh_schema_equals(s, in.schema, true, &diff), "%s", diff.message);
  for (int i = 0; i < 4; i++) {
    fsh_batch *b = NULL;
    CHECK_OK(in.get_next(&in, &b, &err));
    if (i == 3) {
      CHECK(b == NULL);
      break;
    }
    CHECK(b != NULL);
    if (!b) break;
    CHECK_MSG(fsh_batch_equals(batches[i], b, &diff), "batch %d: %s", i, diff.message);
    for (int64_t c = 0; c < b->n_columns; c++)
      CHECK(same_memory(batches[i]->columns[c], b->columns[c], "stream"));
    fsh_batch_unref(b);
  }
  CHECK_EQ_INT(release_calls, 0);
  in.release(&in);
  CHECK_EQ_INT(release_calls, 1);
  for (int i = 0; i < 3; i++) fsh_batch_unref(batches[i]);

  /* errors travel through get_last_error */
  failing_state st = {make_batch(s, 5, 4), 0};
  fsh_batch_stream fail = {failing_next, failing_release, fsh_schema_ref(s), &st};
  CHECK_OK(fsh_stream_export(&fail, &cs, &err));
  struct ArrowArray arr;
  CHECK_OK(cs.get_next(&cs, &arr));
  CHECK(arr.release != NULL && arr.length == 5);
  arr.release(&arr);
  CHECK_EQ_INT(cs.get_next(&cs, &arr), EIO);
  const char *msg = cs.get_last_error(&cs);
  CHECK(msg && strstr(msg, "disk on fire") != NULL);
  CHECK_OK(fsh_stream_import(&cs, &in, &err));
  fsh_batch *b = NULL;
  CHECK_EQ_INT(in.get_next(&in, &b, &err), EIO);
  CHECK(strstr(err.message, "disk on fire") != NULL);
  in.release(&in);
  fsh_schema_unref(s);
}

/* Allocation failures anywhere in export or import leave no leak (LSan)
 * and no half-built output. */
static void test_alloc_failures(void) {
  fsh_error err = {{0}};
  fsh_schema *s = all_types_schema();
  fsh_batch *b = make_batch(s, 16, 5);
  int64_t successes = 0;
  for (int64_t n = 1; n < 100000; n++) {
    struct ArrowSchema cs;
    struct ArrowArray ca;
    fsh_schema *s2 = NULL;
    fsh_batch *b2 = NULL;
    fsh_alloc_fail_after(n, false);
    int rc = fsh_schema_export(s, &cs, &err);
    if (rc == 0) rc = fsh_schema_import(&cs, &s2, &err);
    if (rc == 0) rc = fsh_batch_export(b, &ca, &err);
    if (rc == 0) rc = fsh_batch_import(&ca, s2 ? s2 : s, &b2, &err);
    fsh_alloc_fail_after(0, false);
    if (rc != 0) CHECK_EQ_INT(rc, ENOMEM);
    if (rc == 0) {
      CHECK(fsh_batch_equals(b, b2, NULL));
      successes++;
    }
    fsh_batch_unref(b2);
    fsh_schema_unref(s2);
    if (rc == 0) break;
  }
  CHECK_EQ_INT(successes, 1);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

FSH_TEST_MAIN(TEST(test_schema_roundtrip_all_types), TEST(test_field_roundtrip),
              TEST(test_batch_roundtrip_all_types), TEST(test_sliced_and_empty),
              TEST(test_import_struct_offset), TEST(test_malformed_schema),
              TEST(test_malformed_array), TEST(test_stream_roundtrip), TEST(test_alloc_failures))
