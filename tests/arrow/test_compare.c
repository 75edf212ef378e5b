/* test_compare.c -- logical equality of arrays, fields, schemas and batches:
 * one changed value, null, child value or dictionary value is found and
 * named; slices, null-slot contents, dictionary indices and dense union
 * layouts that are logically equal compare equal. Arrays are built from
 * small integration-JSON snippets (quotes written as ' here). */
#include <flightshuffle/json.h>

#include <math.h>
#include <string.h>

#include "test.h"

/* Reads a one-column document: field F (JSON), count N, column body C
 * (VALIDITY/DATA/... without name and count), dictionaries D (or NULL). */
static fsh_json_data doc(const char *field, int64_t n, const char *col, const char *dicts) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{'schema': {'fields': [%s]}, 'batches': [{'count': %lld, 'columns': [{'name': 'c', "
           "'count': %lld, %s}]}]%s%s%s}",
           field, (long long)n, (long long)n, col, dicts ? ", 'dictionaries': " : "",
           dicts ? dicts : "", "");
  for (char *p = text; *p; p++)
    if (*p == '\'') *p = '"';
  fsh_json_data d = {0};
  fsh_error err = {{0}};
  int rc = fsh_json_read_string(text, strlen(text), "test", &d, &err);
  CHECK_MSG(rc == 0, "%s\n  in %s", err.message, text);
  return d;
}

/* Column 0 of batch 0. */
static fsh_array *col0(const fsh_json_data *d) {
  return d->n_batches ? d->batches[0]->columns[0] : NULL;
}

static const fsh_field *field0(const fsh_json_data *d) {
  return d->schema ? &d->schema->fields[0] : NULL;
}

/* Checks inequality and that the message contains `want`. */
#define CHECK_DIFF(f, a, b, want)                                                         \
  do {                                                                                    \
    fsh_error diff_ = {{0}};                                                              \
    bool eq_ = (f) && (a) && (b) && fsh_array_equals((f), (a), (b), &diff_);              \
    CHECK_MSG(!eq_, "expected a difference");                                             \
    CHECK_MSG(strstr(diff_.message, (want)) != NULL, "message '%s' lacks '%s'",           \
              diff_.message, (want));                                                     \
  } while (0)

#define CHECK_SAME(f, a, b)                                                               \
  do {                                                                                    \
    fsh_error diff_ = {{0}};                                                              \
    bool eq_ = (f) && (a) && (b) && fsh_array_equals((f), (a), (b), &diff_);              \
    CHECK_MSG(eq_, "expected equal: %s", diff_.message);                                  \
  } while (0)

#define INT32 "{'name': 'c', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 32, 'isSigned': true}}"
#define UTF8 "{'name': 'utf8_col', 'nullable': true, 'type': {'name': 'utf8'}}"

static void test_int_value_and_null(void) {
  fsh_json_data a = doc(INT32, 4, "'VALIDITY': [1,1,0,1], 'DATA': [1,2,3,4]", NULL);
  fsh_json_data b = doc(INT32, 4, "'VALIDITY': [1,1,0,1], 'DATA': [1,2,99,4]", NULL);
  fsh_json_data c = doc(INT32, 4, "'VALIDITY': [1,1,0,1], 'DATA': [1,2,3,5]", NULL);
  fsh_json_data e = doc(INT32, 4, "'VALIDITY': [1,0,0,1], 'DATA': [1,2,3,4]", NULL);
  fsh_json_data s = doc(INT32, 3, "'VALIDITY': [1,1,0], 'DATA': [1,2,3]", NULL);
  CHECK_SAME(field0(&a), col0(&a), col0(&a));
  CHECK_SAME(field0(&a), col0(&a), col0(&b)); /* null slot contents ignored */
  CHECK_DIFF(field0(&a), col0(&a), col0(&c), "array 'c' row 3: 4 != 5");
  CHECK_DIFF(field0(&a), col0(&a), col0(&e), "row 1: 2 != null");
  CHECK_DIFF(field0(&a), col0(&a), col0(&s), "length 4 != 3");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&c);
  fsh_json_data_reset(&e);
  fsh_json_data_reset(&s);
}

static void test_strings_and_slices(void) {
  fsh_json_data a = doc(UTF8, 5, "'VALIDITY': [1,1,1,0,1], 'DATA': ['x','abc','yy','','z']", NULL);
  fsh_json_data b = doc(UTF8, 5, "'VALIDITY': [1,1,1,0,1], 'DATA': ['x','abd','yy','','z']", NULL);
  fsh_json_data t = doc(UTF8, 3, "'VALIDITY': [1,1,0], 'DATA': ['abc','yy','']", NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "'utf8_col' row 1: \"abc\" != \"abd\"");
  if (col0(&a) && col0(&t)) {
    /* A slice equals an unsliced array of the same values. */
    fsh_array *s = fsh_array_slice(col0(&a), 1, 3);
    CHECK_SAME(field0(&a), s, col0(&t));
    CHECK_SAME(field0(&a), col0(&t), s);
    fsh_array *s2 = fsh_array_slice(col0(&a), 0, 3);
    CHECK_DIFF(field0(&a), s, s2, "row 0: \"abc\" != \"x\"");
    fsh_array_unref(s);
    fsh_array_unref(s2);
  }
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&t);
}

static void test_floats(void) {
  const char *f64 = "{'name': 'c', 'nullable': true, 'type': {'name': 'floatingpoint', 'precision': 'DOUBLE'}}";
  fsh_json_data a = doc(f64, 3, "'VALIDITY': [1,1,1], 'DATA': [1.5, 'NaN', 0.0]", NULL);
  fsh_json_data b = doc(f64, 3, "'VALIDITY': [1,1,1], 'DATA': [1.5, 'NaN', -0.0]", NULL);
  fsh_json_data c = doc(f64, 3, "'VALIDITY': [1,1,1], 'DATA': [1.5, 'NaN', 0.0]", NULL);
  CHECK_SAME(field0(&a), col0(&a), col0(&c)); /* NaN == NaN here */
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "row 2: 0 != -0");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&c);
  const char *f16 = "{'name': 'h', 'nullable': true, 'type': {'name': 'floatingpoint', 'precision': 'HALF'}}";
  a = doc(f16, 2, "'VALIDITY': [1,1], 'DATA': [0.5, 65504]", NULL);
  b = doc(f16, 2, "'VALIDITY': [1,1], 'DATA': [0.5, 1.0]", NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "row 1: 65504");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
}

#define LIST_I32                                                                                \
  "{'name': 'l', 'nullable': true, 'type': {'name': 'list'}, 'children': [{'name': 'item', " \
  "'nullable': true, 'type': {'name': 'int', 'bitWidth': 32, 'isSigned': true}}]}"

static void test_list_child(void) {
  fsh_json_data a = doc(LIST_I32, 3,
                        "'VALIDITY': [1,0,1], 'OFFSET': [0,2,2,5], 'children': [{'name': 'item', "
                        "'count': 5, 'VALIDITY': [1,1,1,1,1], 'DATA': [1,2,3,4,5]}]",
                        NULL);
  fsh_json_data b = doc(LIST_I32, 3,
                        "'VALIDITY': [1,0,1], 'OFFSET': [0,2,2,5], 'children': [{'name': 'item', "
                        "'count': 5, 'VALIDITY': [1,1,1,1,1], 'DATA': [1,2,3,7,5]}]",
                        NULL);
  /* Same values, different layout: a null list owning child values. */
  fsh_json_data c = doc(LIST_I32, 3,
                        "'VALIDITY': [1,0,1], 'OFFSET': [0,2,4,7], 'children': [{'name': 'item', "
                        "'count': 7, 'VALIDITY': [1,1,1,1,1,1,1], 'DATA': [1,2,8,9,3,4,5]}]",
                        NULL);
  fsh_json_data e = doc(LIST_I32, 3,
                        "'VALIDITY': [1,0,1], 'OFFSET': [0,2,2,4], 'children': [{'name': 'item', "
                        "'count': 4, 'VALIDITY': [1,1,1,1], 'DATA': [1,2,3,4]}]",
                        NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "array 'l.item' row 2 (child index 3): 4 != 7");
  CHECK_SAME(field0(&a), col0(&a), col0(&c));
  CHECK_DIFF(field0(&a), col0(&a), col0(&e), "row 2: list length 3 != 2");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&c);
  fsh_json_data_reset(&e);
}

#define STRUCT_F                                                                              \
  "{'name': 's', 'nullable': true, 'type': {'name': 'struct'}, 'children': [{'name': 'a', " \
  "'nullable': true, 'type': {'name': 'utf8'}}, {'name': 'b', 'nullable': false, 'type': "  \
  "{'name': 'bool'}}]}"

static void test_struct_and_fixed_list(void) {
  fsh_json_data a = doc(STRUCT_F, 2,
                        "'VALIDITY': [1,1], 'children': [{'name': 'a', 'count': 2, 'VALIDITY': "
                        "[1,0], 'DATA': ['p','']}, {'name': 'b', 'count': 2, 'VALIDITY': [1,1], "
                        "'DATA': [true,false]}]",
                        NULL);
  fsh_json_data b = doc(STRUCT_F, 2,
                        "'VALIDITY': [1,1], 'children': [{'name': 'a', 'count': 2, 'VALIDITY': "
                        "[1,0], 'DATA': ['p','']}, {'name': 'b', 'count': 2, 'VALIDITY': [1,1], "
                        "'DATA': [true,true]}]",
                        NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "'s.b' row 1 (child index 1): false != true");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);

  const char *fsl = "{'name': 'f', 'nullable': true, 'type': {'name': 'fixedsizelist', 'listSize': 2}, "
                    "'children': [{'name': 'v', 'nullable': true, 'type': {'name': 'int', "
                    "'bitWidth': 16, 'isSigned': false}}]}";
  a = doc(fsl, 3, "'VALIDITY': [1,1,1], 'children': [{'name': 'v', 'count': 6, 'VALIDITY': "
                  "[1,1,1,1,1,1], 'DATA': [1,2,3,4,5,6]}]", NULL);
  b = doc(fsl, 2, "'VALIDITY': [1,1], 'children': [{'name': 'v', 'count': 4, 'VALIDITY': "
                  "[1,1,1,1], 'DATA': [3,4,5,6]}]", NULL);
  if (col0(&a) && col0(&b)) {
    fsh_array *s = fsh_array_slice(col0(&a), 1, 2);
    CHECK_SAME(field0(&a), s, col0(&b));
    fsh_array *s0 = fsh_array_slice(col0(&a), 0, 2);
    CHECK_DIFF(field0(&a), s0, col0(&b), "'f.v' row 0 (child index 0): 1 != 3");
    fsh_array_unref(s);
    fsh_array_unref(s0);
  }
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
}

#define DENSE                                                                                   \
  "{'name': 'u', 'nullable': true, 'type': {'name': 'union', 'mode': 'DENSE', 'typeIds': [5, " \
  "9]}, 'children': [{'name': 'i', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 8, "  \
  "'isSigned': true}}, {'name': 's', 'nullable': true, 'type': {'name': 'utf8'}}]}"
#define SPARSE                                                                                   \
  "{'name': 'u', 'nullable': true, 'type': {'name': 'union', 'mode': 'SPARSE', 'typeIds': [5, " \
  "9]}, 'children': [{'name': 'i', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 8, "   \
  "'isSigned': true}}, {'name': 's', 'nullable': true, 'type': {'name': 'utf8'}}]}"

static void test_unions(void) {
  fsh_json_data a = doc(DENSE, 3,
                        "'TYPE_ID': [5,9,5], 'OFFSET': [0,0,1], 'children': [{'name': 'i', "
                        "'count': 2, 'VALIDITY': [1,1], 'DATA': [7,8]}, {'name': 's', 'count': 1, "
                        "'VALIDITY': [1], 'DATA': ['q']}]",
                        NULL);
  /* The same values laid out differently in the children. */
  fsh_json_data b = doc(DENSE, 3,
                        "'TYPE_ID': [5,9,5], 'OFFSET': [2,1,0], 'children': [{'name': 'i', "
                        "'count': 3, 'VALIDITY': [1,0,1], 'DATA': [8,0,7]}, {'name': 's', 'count': 2, "
                        "'VALIDITY': [1,1], 'DATA': ['zz','q']}]",
                        NULL);
  fsh_json_data c = doc(DENSE, 3,
                        "'TYPE_ID': [5,5,5], 'OFFSET': [0,1,2], 'children': [{'name': 'i', "
                        "'count': 3, 'VALIDITY': [1,1,1], 'DATA': [7,1,8]}, {'name': 's', 'count': 0, "
                        "'VALIDITY': [], 'DATA': []}]",
                        NULL);
  CHECK_SAME(field0(&a), col0(&a), col0(&b));
  CHECK_DIFF(field0(&a), col0(&a), col0(&c), "row 1: union type id 9 != 5");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&c);

  a = doc(SPARSE, 2,
          "'TYPE_ID': [5,9], 'children': [{'name': 'i', 'count': 2, 'VALIDITY': [1,1], 'DATA': "
          "[7,100]}, {'name': 's', 'count': 2, 'VALIDITY': [0,1], 'DATA': ['','q']}]",
          NULL);
  b = doc(SPARSE, 2,
          "'TYPE_ID': [5,9], 'children': [{'name': 'i', 'count': 2, 'VALIDITY': [1,0], 'DATA': "
          "[7,0]}, {'name': 's', 'count': 2, 'VALIDITY': [1,1], 'DATA': ['other','q']}]",
          NULL);
  c = doc(SPARSE, 2,
          "'TYPE_ID': [5,9], 'children': [{'name': 'i', 'count': 2, 'VALIDITY': [1,0], 'DATA': "
          "[7,0]}, {'name': 's', 'count': 2, 'VALIDITY': [1,1], 'DATA': ['other','r']}]",
          NULL);
  CHECK_SAME(field0(&a), col0(&a), col0(&b)); /* unselected child slots ignored */
  CHECK_DIFF(field0(&a), col0(&a), col0(&c), "'u.s' row 1 (child index 1): \"q\" != \"r\"");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&c);
}

#define DICT_F                                                                                  \
  "{'name': 'd', 'nullable': true, 'type': {'name': 'utf8'}, 'dictionary': {'id': 3, "          \
  "'indexType': {'name': 'int', 'bitWidth': 16, 'isSigned': true}, 'isOrdered': false}}"

static void test_dictionary(void) {
  fsh_json_data a = doc(DICT_F, 3, "'VALIDITY': [1,1,0], 'DATA': [0,1,0]",
                        "[{'id': 3, 'data': {'count': 2, 'columns': [{'name': 'DICT3', 'count': 2, "
                        "'VALIDITY': [1,1], 'OFFSET': [0,3,6], 'DATA': ['foo','bar']}]}}]");
  /* Other indices into another dictionary, same decoded values. */
  fsh_json_data b = doc(DICT_F, 3, "'VALIDITY': [1,1,0], 'DATA': [2,0,1]",
                        "[{'id': 3, 'data': {'count': 3, 'columns': [{'name': 'DICT3', 'count': 3, "
                        "'VALIDITY': [1,1,1], 'OFFSET': [0,3,4,7], 'DATA': ['bar','x','foo']}]}}]");
  /* A dictionary value changed. */
  fsh_json_data c = doc(DICT_F, 3, "'VALIDITY': [1,1,0], 'DATA': [0,1,0]",
                        "[{'id': 3, 'data': {'count': 2, 'columns': [{'name': 'DICT3', 'count': 2, "
                        "'VALIDITY': [1,1], 'OFFSET': [0,3,6], 'DATA': ['foo','baz']}]}}]");
  CHECK_SAME(field0(&a), col0(&a), col0(&b));
  CHECK_DIFF(field0(&a), col0(&a), col0(&c), "'d' row 1 (dictionary index 1): \"bar\" != \"baz\"");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  fsh_json_data_reset(&c);
}

static void test_other_fixed_types(void) {
  const char *dec = "{'name': 'm', 'nullable': true, 'type': {'name': 'decimal', 'precision': 38, "
                    "'scale': 2}}";
  fsh_json_data a = doc(dec, 2, "'VALIDITY': [1,1], 'DATA': ['-12345', '170141183460469231731687303715884105727']", NULL);
  fsh_json_data b = doc(dec, 2, "'VALIDITY': [1,1], 'DATA': ['-12346', '170141183460469231731687303715884105727']", NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "row 0: -12345 (scale 2) != -12346 (scale 2)");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  const char *iv = "{'name': 'i', 'nullable': true, 'type': {'name': 'interval', 'unit': 'DAY_TIME'}}";
  a = doc(iv, 1, "'VALIDITY': [1], 'DATA': [{'days': 1, 'milliseconds': 2}]", NULL);
  b = doc(iv, 1, "'VALIDITY': [1], 'DATA': [{'days': 1, 'milliseconds': 3}]", NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "{days 1, ms 2} != {days 1, ms 3}");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
  const char *fsb = "{'name': 'b', 'nullable': true, 'type': {'name': 'fixedsizebinary', 'byteWidth': 2}}";
  a = doc(fsb, 1, "'VALIDITY': [1], 'DATA': ['AB01']", NULL);
  b = doc(fsb, 1, "'VALIDITY': [1], 'DATA': ['ab02']", NULL);
  CHECK_DIFF(field0(&a), col0(&a), col0(&b), "AB01 != AB02");
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
}

static void test_fields(void) {
  fsh_error diff = {{0}};
  fsh_field a, b;
  CHECK(fsh_field_init(&a, "t", FSH_TYPE_TIMESTAMP, true) == 0);
  CHECK(fsh_field_init(&b, "t", FSH_TYPE_TIMESTAMP, true) == 0);
  a.unit = b.unit = FSH_MILLI;
  CHECK(fsh_field_equals(&a, &b, true, &diff));
  CHECK(fsh_field_set_timezone(&a, "UTC") == 0);
  CHECK(!fsh_field_equals(&a, &b, true, &diff));
  CHECK_MSG(strstr(diff.message, "field 't': type") != NULL, "%s", diff.message);
  CHECK(fsh_field_set_timezone(&b, "UTC") == 0);
  CHECK(fsh_metadata_add(&a.metadata, "k1", "v1", -1) == 0);
  CHECK(fsh_metadata_add(&a.metadata, "k2", "v2", -1) == 0);
  CHECK(fsh_metadata_add(&b.metadata, "k2", "v2", -1) == 0);
  CHECK(fsh_metadata_add(&b.metadata, "k1", "v1", -1) == 0);
  CHECK_MSG(fsh_field_equals(&a, &b, true, &diff), "%s", diff.message); /* order-insensitive */
  fsh_metadata_reset(&b.metadata);
  CHECK(fsh_metadata_add(&b.metadata, "k2", "v2", -1) == 0);
  CHECK(fsh_metadata_add(&b.metadata, "k1", "other", -1) == 0);
  CHECK(!fsh_field_equals(&a, &b, true, &diff));
  CHECK_MSG(strstr(diff.message, "metadata 'k1'") != NULL, "%s", diff.message);
  b.nullable = false;
  CHECK(!fsh_field_equals(&a, &b, true, &diff));
  CHECK_MSG(strstr(diff.message, "nullable") != NULL, "%s", diff.message);
  fsh_field_reset(&a);
  fsh_field_reset(&b);

  /* Nested: the path names the child. */
  fsh_json_data x = doc("{'name': 'a', 'nullable': true, 'type': {'name': 'struct'}, 'children': "
                        "[{'name': 'b', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 32, "
                        "'isSigned': true}}]}",
                        0, "'VALIDITY': [], 'children': [{'name': 'b', 'count': 0, 'VALIDITY': [], 'DATA': []}]", NULL);
  fsh_json_data y = doc("{'name': 'a', 'nullable': true, 'type': {'name': 'struct'}, 'children': "
                        "[{'name': 'b', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 64, "
                        "'isSigned': true}}]}",
                        0, "'VALIDITY': [], 'children': [{'name': 'b', 'count': 0, 'VALIDITY': [], 'DATA': []}]", NULL);
  if (x.schema && y.schema) {
    CHECK(!fsh_field_equals(field0(&x), field0(&y), true, &diff));
    CHECK_MSG(strstr(diff.message, "field 'a.b': type int32 != int64") != NULL, "%s", diff.message);
    CHECK(!fsh_schema_equals(x.schema, y.schema, false, &diff));
    CHECK(!fsh_batch_equals(x.batches[0], y.batches[0], &diff));
  }
  fsh_json_data_reset(&x);
  fsh_json_data_reset(&y);

  /* Dictionary ids matter only when asked. */
  const char *d7 = "{'name': 'd', 'nullable': true, 'type': {'name': 'utf8'}, 'dictionary': {'id': 7, "
                   "'indexType': {'name': 'int', 'bitWidth': 8, 'isSigned': true}, 'isOrdered': false}}";
  const char *none = "[{'id': %d, 'data': {'count': 0, 'columns': [{'name': 'D', 'count': 0, "
                     "'VALIDITY': [], 'OFFSET': [0], 'DATA': []}]}}]";
  char dicts[512];
  snprintf(dicts, sizeof dicts, none, 7);
  x = doc(d7, 0, "'VALIDITY': [], 'DATA': []", dicts);
  snprintf(dicts, sizeof dicts, none, 3);
  y = doc(DICT_F, 0, "'VALIDITY': [], 'DATA': []", dicts);
  if (x.schema && y.schema) {
    fsh_field *fy = &y.schema->fields[0];
    CHECK(!fsh_field_equals(field0(&x), fy, false, &diff)); /* int8 vs int16 indices */
    CHECK_MSG(strstr(diff.message, "dictionary index type int8 != int16") != NULL, "%s", diff.message);
    fy->type = FSH_TYPE_INT8;
    CHECK_MSG(fsh_field_equals(field0(&x), fy, false, &diff), "%s", diff.message);
    CHECK(!fsh_field_equals(field0(&x), fy, true, &diff));
    CHECK_MSG(strstr(diff.message, "dictionary id 7 != 3") != NULL, "%s", diff.message);
  }
  fsh_json_data_reset(&x);
  fsh_json_data_reset(&y);
}

static void test_batches(void) {
  fsh_json_data a = doc(UTF8, 3, "'VALIDITY': [1,1,1], 'DATA': ['a','b','c']", NULL);
  fsh_json_data b = doc(UTF8, 3, "'VALIDITY': [1,1,1], 'DATA': ['a','b','d']", NULL);
  fsh_error diff = {{0}};
  if (a.n_batches && b.n_batches) {
    CHECK(fsh_batch_equals(a.batches[0], a.batches[0], &diff));
    CHECK(!fsh_batch_equals(a.batches[0], b.batches[0], &diff));
    CHECK_MSG(strstr(diff.message, "column 'utf8_col' row 2: \"c\" != \"d\"") != NULL, "%s",
              diff.message);
    fsh_batch *s1 = fsh_batch_slice(a.batches[0], 0, 2), *s2 = fsh_batch_slice(b.batches[0], 0, 2);
    CHECK_MSG(fsh_batch_equals(s1, s2, &diff), "%s", diff.message);
    CHECK(!fsh_batch_equals(s1, a.batches[0], &diff));
    CHECK_MSG(strstr(diff.message, "length 2 != 3") != NULL, "%s", diff.message);
    CHECK(!fsh_batch_equals(s1, a.batches[0], NULL)); /* NULL diff accepted */
    fsh_batch_unref(s1);
    fsh_batch_unref(s2);
  }
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
}

FSH_TEST_MAIN(TEST(test_int_value_and_null), TEST(test_strings_and_slices), TEST(test_floats),
              TEST(test_list_child), TEST(test_struct_and_fixed_list), TEST(test_unions),
              TEST(test_dictionary), TEST(test_other_fixed_types), TEST(test_fields),
              TEST(test_batches))
