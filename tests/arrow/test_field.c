/* test_field.c -- fields and metadata: init / copy / reset of nested fields
 * with metadata, dictionaries, timezones and unions; type facts. */
#include <errno.h>
#include <stdint.h>

#include <flightshuffle/arrow.h>

#include "nested_field.h"
#include "test.h"

static void test_init_reset(void) {
  fsh_field f;
  memset(&f, 0x5a, sizeof f); /* init must not read the old contents */
  CHECK(fsh_field_init(&f, "x", FSH_TYPE_INT64, false) == 0);
  CHECK(strcmp(f.name, "x") == 0);
  CHECK(f.type == FSH_TYPE_INT64 && !f.nullable);
  CHECK(f.children == NULL && f.n_children == 0 && f.dictionary == NULL);
  CHECK(f.timezone == NULL && f.type_codes == NULL && f.metadata.n == 0);
  fsh_field_reset(&f);
  CHECK(f.name == NULL); /* reset zeroes */
  fsh_field_reset(&f);   /* twice is harmless */
  fsh_field_reset(NULL);

  const char name[] = "copied";
  CHECK(fsh_field_init(&f, name, FSH_TYPE_NA, true) == 0);
  CHECK(f.name != name && strcmp(f.name, name) == 0);
  fsh_field_reset(&f);
  CHECK(fsh_field_init(&f, NULL, FSH_TYPE_NA, true) == 0);
  CHECK(f.name != NULL && f.name[0] == '\0');
  fsh_field_reset(&f);
}

static void test_nested_copy(void) {
  fsh_field f, g;
  CHECK(nested_field_build(&f) == 0);
  nested_field_check(&f, NULL);
  CHECK(fsh_field_copy(&g, &f) == 0);
  nested_field_check(&g, &f);
  fsh_field_reset(&f); /* the copy stands alone (ASan) */
  nested_field_check(&g, NULL);
  fsh_field h;
  CHECK(fsh_field_copy(&h, &g) == 0);
  fsh_field_reset(&g);
  nested_field_check(&h, NULL);
  fsh_field_reset(&h);
}

static void test_children(void) {
  fsh_field f;
  CHECK(fsh_field_init(&f, "s", FSH_TYPE_STRUCT, true) == 0);
  CHECK(fsh_field_alloc_children(&f, 0) == 0);
  CHECK(f.children == NULL && f.n_children == 0);
  CHECK(fsh_field_alloc_children(&f, -1) == EINVAL);
  CHECK(fsh_field_alloc_children(&f, 3) == 0);
  CHECK_EQ_INT(f.n_children, 3);
  for (int i = 0; i < 3; i++) CHECK(f.children[i].name == NULL); /* zeroed */
  CHECK(fsh_field_alloc_children(&f, 2) == EINVAL); /* only once */
  /* children left zeroed (never initialised) reset cleanly */
  CHECK(fsh_field_init(&f.children[1], "only", FSH_TYPE_BOOL, true) == 0);
  fsh_field_reset(&f);
}

static void test_timezone(void) {
  fsh_field f;
  CHECK(fsh_field_init(&f, "t", FSH_TYPE_TIMESTAMP, true) == 0);
  CHECK(fsh_field_set_timezone(&f, "UTC") == 0);
  CHECK(strcmp(f.timezone, "UTC") == 0);
  CHECK(fsh_field_set_timezone(&f, "+05:30") == 0);
  CHECK(strcmp(f.timezone, "+05:30") == 0);
  char s[128];
  f.unit = FSH_NANO;
  fsh_field_type_to_string(&f, s, sizeof s);
  CHECK_MSG(strcmp(s, "timestamp[ns, tz=+05:30]") == 0, "%s", s);
  CHECK(fsh_field_set_timezone(&f, NULL) == 0);
  CHECK(f.timezone == NULL);
  fsh_field_type_to_string(&f, s, sizeof s);
  CHECK_MSG(strcmp(s, "timestamp[ns]") == 0, "%s", s);
  fsh_field_reset(&f);
}

static void test_dictionary(void) {
  fsh_field f;
  CHECK(fsh_field_init(&f, "d", FSH_TYPE_STRING, true) == 0);
  CHECK(fsh_field_set_dictionary(&f, 7, FSH_TYPE_FLOAT32, false) == EINVAL);
  CHECK(f.type == FSH_TYPE_STRING && f.dictionary == NULL); /* untouched */
  CHECK(fsh_field_set_dictionary(&f, 7, FSH_TYPE_UINT32, false) == 0);
  CHECK(f.type == FSH_TYPE_UINT32);
  CHECK(f.dictionary->value.type == FSH_TYPE_STRING);
  CHECK(f.dictionary->id == 7 && !f.dictionary->ordered);
  char s[256];
  fsh_field_type_to_string(&f, s, sizeof s);
  CHECK_MSG(strcmp(s, "dictionary<values=utf8, indices=uint32>") == 0, "%s", s);
  fsh_field_reset(&f);
}

static void test_metadata(void) {
  fsh_metadata m = {0}, n = {0};
  CHECK(fsh_metadata_add(&m, "a", "1", -1) == 0);
  CHECK(fsh_metadata_add(&m, "empty", "", 0) == 0);
  CHECK(fsh_metadata_add(&m, "a", "2", -1) == 0); /* duplicates kept in order */
  CHECK_EQ_INT(m.n, 3);
  CHECK(strcmp(fsh_metadata_find(&m, "a")->value, "1") == 0);
  const fsh_kv *e = fsh_metadata_find(&m, "empty");
  CHECK(e && e->value_len == 0 && e->value[0] == '\0');
  CHECK(fsh_metadata_copy(&n, &m) == 0);
  CHECK_EQ_INT(n.n, 3);
  CHECK(n.items != m.items && strcmp(n.items[2].value, "2") == 0);
  fsh_metadata_reset(&m);
  CHECK(m.n == 0 && m.items == NULL);
  CHECK(strcmp(n.items[0].key, "a") == 0);
  fsh_metadata_reset(&n);
  fsh_metadata_reset(&n);
  CHECK(fsh_metadata_copy(&n, &m) == 0 && n.n == 0);
}

static void test_type_facts(void) {
  for (int t = 0; t < FSH_TYPE_COUNT_; t++) {
    const char *name = fsh_type_name((fsh_type_id)t);
    CHECK(name != NULL && name[0] && strcmp(name, "invalid") != 0);
  }
  CHECK(strcmp(fsh_type_name(FSH_TYPE_COUNT_), "invalid") == 0);
  CHECK(strcmp(fsh_type_name((fsh_type_id)-1), "invalid") == 0);
  CHECK(fsh_type_is_integer(FSH_TYPE_INT8) && fsh_type_is_integer(FSH_TYPE_UINT64));
  CHECK(!fsh_type_is_integer(FSH_TYPE_BOOL) && !fsh_type_is_integer(FSH_TYPE_FLOAT16));
  CHECK(fsh_type_is_signed_integer(FSH_TYPE_INT64) && !fsh_type_is_signed_integer(FSH_TYPE_UINT8));

  /* buffer counts of the C Data Interface */
  static const struct {
    fsh_type_id t;
    int n;
  } bufs[] = {{FSH_TYPE_NA, 0},           {FSH_TYPE_BOOL, 2},         {FSH_TYPE_INT32, 2},
              {FSH_TYPE_DECIMAL256, 2},   {FSH_TYPE_STRING, 3},       {FSH_TYPE_LARGE_BINARY, 3},
              {FSH_TYPE_LIST, 2},         {FSH_TYPE_LARGE_LIST, 2},   {FSH_TYPE_MAP, 2},
              {FSH_TYPE_FIXED_SIZE_LIST, 1}, {FSH_TYPE_STRUCT, 1},    {FSH_TYPE_SPARSE_UNION, 1},
              {FSH_TYPE_DENSE_UNION, 2},  {FSH_TYPE_FIXED_SIZE_BINARY, 2},
              {FSH_TYPE_INTERVAL_MONTH_DAY_NANO, 2}};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
    CHECK_MSG(fsh_type_n_buffers(bufs[k].t) == bufs[k].n, "%s", fsh_type_name(bufs[k].t));

  /* bit widths */
  fsh_field f = {0};
  static const struct {
    fsh_type_id t;
    int bits;
  } widths[] = {{FSH_TYPE_BOOL, 1},        {FSH_TYPE_INT8, 8},
                {FSH_TYPE_FLOAT16, 16},    {FSH_TYPE_DATE32, 32},
                {FSH_TYPE_DATE64, 64},     {FSH_TYPE_DECIMAL128, 128},
                {FSH_TYPE_DECIMAL256, 256}, {FSH_TYPE_INTERVAL_MONTHS, 32},
                {FSH_TYPE_INTERVAL_DAY_TIME, 64}, {FSH_TYPE_INTERVAL_MONTH_DAY_NANO, 128},
                {FSH_TYPE_STRING, 0},      {FSH_TYPE_STRUCT, 0}};
  for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
    f.type = widths[k].t;
    CHECK_MSG(fsh_type_bit_width(&f) == widths[k].bits, "%s", fsh_type_name(widths[k].t));
  }
  f.type = FSH_TYPE_FIXED_SIZE_BINARY;
  f.byte_width = 5;
  CHECK_EQ_INT(fsh_type_bit_width(&f), 40);

  char s[128];
  f.type = FSH_TYPE_DECIMAL128;
  f.precision = 38;
  f.scale = 10;
  fsh_field_type_to_string(&f, s, sizeof s);
  CHECK_MSG(strcmp(s, "decimal128(38, 10)") == 0, "%s", s);
  f.type = FSH_TYPE_TIME32;
  f.unit = FSH_MILLI;
  fsh_field_type_to_string(&f, s, sizeof s);
  CHECK_MSG(strcmp(s, "time32[ms]") == 0, "%s", s);
  char tiny[4];
  fsh_field_type_to_string(&f, tiny, sizeof tiny); /* truncates, terminated */
  CHECK(strlen(tiny) == 3);
}

FSH_TEST_MAIN(TEST(test_init_reset), TEST(test_nested_copy), TEST(test_children),
              TEST(test_timezone), TEST(test_dictionary), TEST(test_metadata),
              TEST(test_type_facts))
