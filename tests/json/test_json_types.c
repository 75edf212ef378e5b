/* test_json_types.c -- values the golden files lack survive JSON -> arrays
 * -> JSON: float16, month-day-nano intervals, NaN and infinities, uint64
 * and int64 extremes, 256-bit decimal extremes, large lists, nested
 * dictionaries over a slice, a dictionary-encoded map value. */
#include <flightshuffle/json.h>

#include <math.h>
#include <string.h>

#include "test.h"

static const char *doc_text =
    "{'schema': {'fields': ["
    " {'name': 'h', 'nullable': true, 'type': {'name': 'floatingpoint', 'precision': 'HALF'}},"
    " {'name': 'f', 'nullable': false, 'type': {'name': 'floatingpoint', 'precision': 'SINGLE'}},"
    " {'name': 'mdn', 'nullable': true, 'type': {'name': 'interval', 'unit': 'MONTH_DAY_NANO'}},"
    " {'name': 'u64', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 64, 'isSigned': false}},"
    " {'name': 'i64', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 64, 'isSigned': true}},"
    " {'name': 'd256', 'nullable': true, 'type': {'name': 'decimal', 'precision': 76, 'scale': 3, 'bitWidth': 256}},"
    " {'name': 'll', 'nullable': true, 'type': {'name': 'largelist'}, 'children': ["
    "   {'name': 'item', 'nullable': true, 'type': {'name': 'largeutf8'}}]},"
    " {'name': 'm', 'nullable': true, 'type': {'name': 'map', 'keysSorted': true}, 'children': ["
    "   {'name': 'entries', 'nullable': false, 'type': {'name': 'struct'}, 'children': ["
    "     {'name': 'key', 'nullable': false, 'type': {'name': 'utf8'}},"
    "     {'name': 'value', 'nullable': true, 'type': {'name': 'binary'}, 'dictionary': {'id': 4,"
    "       'indexType': {'name': 'int', 'bitWidth': 32, 'isSigned': false}, 'isOrdered': true}}]}]}"
    "], 'metadata': [{'key': 'k', 'value': 'v'}, {'key': 'k', 'value': 'dup'}]},"
    " 'batches': [{'count': 3, 'columns': ["
    "  {'name': 'h', 'count': 3, 'VALIDITY': [1,1,0], 'DATA': [0.5, -65504, 0]},"
    "  {'name': 'f', 'count': 3, 'VALIDITY': [1,1,1], 'DATA': ['NaN', 'Infinity', '-Infinity']},"
    "  {'name': 'mdn', 'count': 3, 'VALIDITY': [1,0,1], 'DATA': [{'months': 1, 'days': -2,"
    "    'nanoseconds': '-9223372036854775808'}, {'months': 0, 'days': 0, 'nanoseconds': 0},"
    "    {'months': -2147483648, 'days': 2147483647, 'nanoseconds': 9223372036854775807}]},"
    "  {'name': 'u64', 'count': 3, 'VALIDITY': [1,1,1], 'DATA': ['18446744073709551615', '0', '1']},"
    "  {'name': 'i64', 'count': 3, 'VALIDITY': [1,1,1], 'DATA': ['-9223372036854775808', '9223372036854775807', '0']},"
    "  {'name': 'd256', 'count': 3, 'VALIDITY': [1,1,1], 'DATA': ["
    "    '57896044618658097711785492504343953926634992332820282019728792003956564819967',"
    "    '-57896044618658097711785492504343953926634992332820282019728792003956564819968', '-1']},"
    "  {'name': 'll', 'count': 3, 'VALIDITY': [1,0,1], 'OFFSET': ['0','2','2','3'], 'children': ["
    "    {'name': 'item', 'count': 3, 'VALIDITY': [1,0,1], 'OFFSET': ['0','1','1','6'], 'DATA': ['a','','\\u00e9\\u20ac']}]},"
    "  {'name': 'm', 'count': 3, 'VALIDITY': [1,1,0], 'OFFSET': [0,1,3,3], 'children': ["
    "    {'name': 'entries', 'count': 3, 'VALIDITY': [1,1,1], 'children': ["
    "      {'name': 'key', 'count': 3, 'VALIDITY': [1,1,1], 'OFFSET': [0,1,2,3], 'DATA': ['x','y','z']},"
    "      {'name': 'value', 'count': 3, 'VALIDITY': [1,0,1], 'DATA': [1,0,0]}]}]}"
    "]}],"
    " 'dictionaries': [{'id': 4, 'data': {'count': 2, 'columns': [{'name': 'DICT4', 'count': 2,"
    "   'VALIDITY': [1,1], 'OFFSET': [0,0,2], 'DATA': ['', '00FF']}]}}]}";

static char *unquote(const char *s) {
  char *t = strdup(s);
  for (char *p = t; *p; p++)
    if (*p == '\'') *p = '"';
  return t;
}

static void test_types_roundtrip(void) {
  char *text = unquote(doc_text);
  fsh_error err = {{0}};
  fsh_json_data d = {0}, back = {0};
  CHECK_OK(fsh_json_read_string(text, strlen(text), "types", &d, &err));
  free(text);
  if (!d.schema) return;
  CHECK_EQ_INT(d.schema->metadata.n, 2);
  fsh_batch *b = d.batches[0];
  CHECK_OK(fsh_batch_validate(b, true, &err));
  uint16_t h;
  memcpy(&h, b->columns[0]->buffers[1]->data + 2, 2);
  CHECK_EQ_INT(h, 0xFBFF); /* -65504 */
  float f[3];
  memcpy(f, b->columns[1]->buffers[1]->data, sizeof f);
  CHECK(isnan(f[0]) && isinf(f[1]) && f[1] > 0 && isinf(f[2]) && f[2] < 0);
  int64_t ns;
  memcpy(&ns, b->columns[2]->buffers[1]->data + 8, 8);
  CHECK(ns == INT64_MIN);
  uint64_t u;
  memcpy(&u, b->columns[3]->buffers[1]->data, 8);
  CHECK(u == UINT64_MAX);
  const fsh_field *m = &d.schema->fields[7];
  CHECK(m->children[0].children[1].dictionary != NULL);
  CHECK(b->columns[7]->children[0]->children[1]->dictionary != NULL);

  /* Whole batch and a slice through the writer and back. */
  fsh_batch *slice = fsh_batch_slice(b, 1, 2);
  fsh_batch *inputs[2] = {b, slice};
  for (int i = 0; i < 2; i++) {
    char *out = NULL;
    size_t len;
    CHECK_OK(fsh_json_write_string(d.schema, &inputs[i], 1, &out, &len, &err));
    if (!out) continue;
    CHECK_OK(fsh_json_read_string(out, len, "back", &back, &err));
    if (back.schema) {
      CHECK_MSG(fsh_schema_equals(d.schema, back.schema, true, &err), "%s", err.message);
      CHECK_MSG(fsh_field_equals(m, &back.schema->fields[7], true, &err), "%s", err.message);
      CHECK_MSG(fsh_batch_equals(inputs[i], back.batches[0], &err), "%d: %s", i, err.message);
      CHECK_OK(fsh_batch_validate(back.batches[0], true, &err));
    }
    CHECK(strstr(out, "\"MONTH_DAY_NANO\"") != NULL);
    CHECK(strstr(out, "\"18446744073709551615\"") != NULL || i == 1);
    fsh_json_data_reset(&back);
    fsh_free(out);
  }
  fsh_batch_unref(slice);
  fsh_json_data_reset(&d);
}

/* Invalid UTF-8 in a string column cannot be written as JSON. */
static void test_write_invalid_utf8(void) {
  char *text = unquote("{'schema': {'fields': [{'name': 's', 'nullable': true, 'type': {'name': "
                       "'utf8'}}]}, 'batches': [{'count': 1, 'columns': [{'name': 's', 'count': 1, "
                       "'VALIDITY': [1], 'DATA': ['ab']}]}]}");
  fsh_error err = {{0}};
  fsh_json_data d = {0};
  CHECK_OK(fsh_json_read_string(text, strlen(text), "utf8", &d, &err));
  free(text);
  if (!d.schema) return;
  d.batches[0]->columns[0]->buffers[2]->data[1] = 0xC3; /* a lone lead byte */
  char *out = NULL;
  size_t len;
  int rc = fsh_json_write_string(d.schema, d.batches, 1, &out, &len, &err);
  CHECK(rc != 0 && out == NULL);
  CHECK_MSG(strstr(err.message, "batch 0.s: slot 0 is not valid UTF-8") != NULL, "%s", err.message);
  fsh_json_data_reset(&d);
}

FSH_TEST_MAIN(TEST(test_types_roundtrip), TEST(test_write_invalid_utf8))
