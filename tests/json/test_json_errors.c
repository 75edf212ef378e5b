/* test_json_errors.c -- bad JSON documents give clear errors (source, JSON
 * path, what is wrong) and leak nothing; allocation failures anywhere in
 * reading or writing are reported cleanly; files round trip plain and
 * gzip-compressed. */
#include <flightshuffle/json.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

/* Reads `text` (quotes written as ') named "x.json"; expects failure with
 * code `code` and a message containing `want`. */
static void expect_error(const char *text, int code, const char *want) {
  char *t = strdup(text);
  for (char *p = t; *p; p++)
    if (*p == '\'') *p = '"';
  fsh_json_data d = {0};
  fsh_error err = {{0}};
  int rc = fsh_json_read_string(t, strlen(t), "x.json", &d, &err);
  CHECK_MSG(rc == code, "rc %d, wanted %d (%s) for %s", rc, code, err.message, t);
  CHECK_MSG(strstr(err.message, want) != NULL, "message '%s' lacks '%s'", err.message, want);
  CHECK(d.schema == NULL && d.batches == NULL && d.n_batches == 0);
  fsh_json_data_reset(&d);
  free(t);
}

#define F_INT8 "{'name': 'f1', 'nullable': true, 'type': {'name': 'int', 'bitWidth': 8, 'isSigned': true}}"
#define F_UTF8 "{'name': 's', 'nullable': true, 'type': {'name': 'utf8'}}"

static void test_syntax_and_shape(void) {
  expect_error("{'schema': ", EINVAL, "x.json:1:");
  expect_error("[]", EINVAL, "x.json: the document is an array, expected an object");
  expect_error("{'batches': []}", EINVAL, "x.json: schema: is missing, expected an object");
  expect_error("{'schema': {'fields': [" F_INT8 "]}}", EINVAL, "x.json: batches: is missing");
  expect_error("{'schema': {'fields': [{'name': 'a', 'type': {'name': 'foo'}}]}, 'batches': []}",
               ENOTSUP, "x.json: schema.fields[0] ('a').type: type 'foo' is not supported");
  expect_error("{'schema': {'fields': [{'name': 'a', 'type': {'name': 'int', 'bitWidth': 12}}]}, "
               "'batches': []}",
               EINVAL, "schema.fields[0] ('a').type: int bitWidth 12 is not 8/16/32/64");
  expect_error("{'schema': {'fields': [{'name': 'l', 'type': {'name': 'list'}}]}, 'batches': []}",
               EINVAL, "schema.fields[0] ('l'): a list field needs exactly one child, it has 0");
  expect_error("{'schema': {'fields': [{'name': 'u', 'type': {'name': 'union', 'mode': 'DENSE', "
               "'typeIds': [1]}, 'children': []}]}, 'batches': []}",
               EINVAL, "union has 1 typeIds for 0 children");
  expect_error("{'schema': {'fields': [" F_INT8 "], 'metadata': [{'key': 1}]}, 'batches': []}",
               EINVAL, "schema.metadata[0]: \"key\" is an integer, expected a string");
}

static void test_data_errors(void) {
  expect_error("{'schema': {'fields': [" F_INT8 "]}, 'batches': [{'count': 3, 'columns': [{'name': "
               "'f1', 'count': 3, 'VALIDITY': [1,1,1], 'DATA': [1,2]}]}]}",
               EINVAL, "x.json: batches[0].columns[0] ('f1'): DATA has 2 values, count is 3");
  expect_error("{'schema': {'fields': [" F_INT8 "]}, 'batches': [{'count': 2, 'columns': [{'name': "
               "'f1', 'count': 2, 'VALIDITY': [1,1], 'DATA': [1,300]}]}]}",
               EINVAL, "batches[0].columns[0] ('f1'): DATA[1] is 300, expected an integer in range for int8");
  expect_error("{'schema': {'fields': [" F_INT8 "]}, 'batches': [{'count': 2, 'columns': [{'name': "
               "'f1', 'count': 2, 'VALIDITY': [1,2], 'DATA': [1,3]}]}]}",
               EINVAL, "VALIDITY[1] is 2, expected 0 or 1");
  expect_error("{'schema': {'fields': [" F_INT8 "]}, 'batches': [{'count': 3, 'columns': [{'name': "
               "'f1', 'count': 2, 'VALIDITY': [1,1], 'DATA': [1,3]}]}]}",
               EINVAL, "batches[0].columns[0] ('f1'): count is 2, the batch count is 3");
  expect_error("{'schema': {'fields': [" F_INT8 "]}, 'batches': [{'count': 0, 'columns': []}]}",
               EINVAL, "batches[0]: \"columns\" has 0 entries, the schema has 1 fields");
  expect_error("{'schema': {'fields': [{'name': 'b', 'type': {'name': 'int', 'bitWidth': 64, "
               "'isSigned': true}}]}, 'batches': [{'count': 1, 'columns': [{'name': 'b', 'count': 1, "
               "'VALIDITY': [1], 'DATA': ['12x']}]}]}",
               EINVAL, "DATA[0] is \"12x\", expected a 64-bit integer");
  expect_error("{'schema': {'fields': [" F_UTF8 "]}, 'batches': [{'count': 2, 'columns': [{'name': "
               "'s', 'count': 2, 'VALIDITY': [1,1], 'OFFSET': [0,1,5], 'DATA': ['a','bc']}]}]}",
               EINVAL, "OFFSET[1..2] disagrees with DATA[1] of 2 bytes");
  expect_error("{'schema': {'fields': [{'name': 'h', 'type': {'name': 'binary'}}]}, 'batches': "
               "[{'count': 1, 'columns': [{'name': 'h', 'count': 1, 'VALIDITY': [1], 'OFFSET': "
               "[0,1], 'DATA': ['ZZ']}]}]}",
               EINVAL, "DATA[0] is not a hex string");
  expect_error("{'schema': {'fields': [{'name': 'l', 'type': {'name': 'list'}, 'children': "
               "[" F_INT8 "]}]}, 'batches': [{'count': 1, 'columns': [{'name': 'l', 'count': 1, "
               "'VALIDITY': [1], 'OFFSET': [0,3], 'children': [{'name': 'f1', 'count': 2, "
               "'VALIDITY': [1,1], 'DATA': [1,2]}]}]}]}",
               EINVAL, "columns[0] ('l'): OFFSET ends at 3, the child has 2 values");
  expect_error("{'schema': {'fields': [{'name': 'l', 'type': {'name': 'list'}, 'children': "
               "[" F_INT8 "]}]}, 'batches': [{'count': 1, 'columns': [{'name': 'l', 'count': 1, "
               "'VALIDITY': [1], 'OFFSET': [0,1], 'children': [{'name': 'f1', 'count': 1, "
               "'VALIDITY': [1], 'DATA': ['a']}]}]}]}",
               EINVAL, "columns[0] ('l').children[0] ('f1'): DATA[0] is \"a\"");
  expect_error("{'schema': {'fields': [{'name': 'u', 'type': {'name': 'union', 'mode': 'SPARSE', "
               "'typeIds': [4]}, 'children': [" F_INT8 "]}]}, 'batches': [{'count': 1, 'columns': "
               "[{'name': 'u', 'count': 1, 'TYPE_ID': [5], 'children': [{'name': 'f1', 'count': 1, "
               "'VALIDITY': [1], 'DATA': [1]}]}]}]}",
               EINVAL, "TYPE_ID[0] is 5, not one of the union's typeIds");
}

#define F_DICT(id)                                                                         \
  "{'name': 'd', 'nullable': true, 'type': {'name': 'utf8'}, 'dictionary': {'id': " #id \
  ", 'indexType': {'name': 'int', 'bitWidth': 8, 'isSigned': true}}}"

static void test_dictionary_errors(void) {
  expect_error("{'schema': {'fields': [" F_DICT(1) "]}, 'batches': [{'count': 1, 'columns': "
               "[{'name': 'd', 'count': 1, 'VALIDITY': [1], 'DATA': [0]}]}]}",
               EINVAL, "batches[0].columns[0] ('d'): dictionary id 1 is not in \"dictionaries\"");
  expect_error("{'schema': {'fields': [" F_DICT(1) "]}, 'batches': [{'count': 1, 'columns': "
               "[{'name': 'd', 'count': 1, 'VALIDITY': [1], 'DATA': [2]}]}], 'dictionaries': "
               "[{'id': 1, 'data': {'count': 1, 'columns': [{'name': 'D', 'count': 1, 'VALIDITY': "
               "[1], 'DATA': ['x']}]}}]}",
               EINVAL, "DATA[0] is index 2, the dictionary (id 1) has 1 values");
  expect_error("{'schema': {'fields': [" F_DICT(1) "]}, 'batches': [], 'dictionaries': "
               "[{'id': 1, 'data': {'count': 2, 'columns': [{'name': 'D', 'count': 1, 'VALIDITY': "
               "[1], 'DATA': ['x']}]}}]}",
               EINVAL, "dictionaries[0] (id 1).data.columns[0]: count is 1, data.count is 2");
  expect_error("{'schema': {'fields': [" F_DICT(1) "]}, 'batches': [], 'dictionaries': "
               "[{'id': 1, 'data': {}}, {'id': 1, 'data': {}}]}",
               EINVAL, "dictionaries[1]: dictionary id 1 appears twice");
  /* A dictionary whose values use the same dictionary id. */
  expect_error("{'schema': {'fields': [{'name': 'l', 'type': {'name': 'list'}, 'children': "
               "[" F_DICT(0) "], 'dictionary': {'id': 0, 'indexType': {'name': 'int', 'bitWidth': "
               "8, 'isSigned': true}}}]}, 'batches': [], 'dictionaries': [{'id': 0, 'data': "
               "{'count': 1, 'columns': [{'name': 'D', 'count': 1, 'VALIDITY': [1], 'OFFSET': [0,1], "
               "'children': [{'name': 'd', 'count': 1, 'VALIDITY': [1], 'DATA': [0]}]}]}}]}",
               EINVAL, "the dictionary's values use the dictionary itself");
}

static void test_missing_file(void) {
  fsh_json_data d;
  fsh_error err = {{0}};
  int rc = fsh_json_read_path("/nonexistent/x.json.gz", &d, &err);
  CHECK_EQ_INT(rc, ENOENT);
  CHECK_MSG(strstr(err.message, "/nonexistent/x.json.gz: cannot open") != NULL, "%s", err.message);
}

static const char *golden(char *buf, size_t n, const char *name) {
  char rel[512];
  snprintf(rel, sizeof rel, "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/%s",
           name);
  return fsh_test_shared_path(buf, n, rel);
}

/* Fails the Nth allocation for N = 1, 2, ... until reading succeeds: every
 * failure is an error with zeroed output (LSan checks nothing leaks). */
static void test_alloc_failures(void) {
  static const char *const files[] = {"generated_nested_dictionary.json.gz",
                                      "generated_union.json.gz", "generated_map.json.gz"};
  for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
    char path[1024];
    golden(path, sizeof path, files[k]);
    int failures = 0;
    for (int64_t n = 1; n < 100000; n++) {
      fsh_json_data d;
      fsh_error err = {{0}};
      fsh_alloc_fail_after(n, k % 2 == 0);
      int rc = fsh_json_read_path(path, &d, &err);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        /* And writing it under the same regime. */
        for (int64_t m = 1; m < 100000; m++) {
          char *text = NULL;
          size_t len;
          fsh_alloc_fail_after(m, true);
          int wrc = fsh_json_write_string(d.schema, d.batches, d.n_batches, &text, &len, &err);
          fsh_alloc_fail_after(0, false);
          if (wrc == 0) {
            fsh_free(text);
            break;
          }
          CHECK_MSG(wrc == ENOMEM, "write rc %d: %s", wrc, err.message);
        }
        fsh_json_data_reset(&d);
        break;
      }
      failures++;
      CHECK_MSG(rc == ENOMEM, "%s: alloc %lld: rc %d: %s", files[k], (long long)n, rc, err.message);
      CHECK(d.schema == NULL && d.batches == NULL);
    }
    CHECK_MSG(failures > 10, "%s: only %d allocation points", files[k], failures);
  }
}

static void test_files_plain_and_gz(void) {
  char path[1024], dir[] = "/tmp/fsh_json_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  fsh_error err = {{0}};
  fsh_json_data d, back;
  CHECK_OK(fsh_json_read_path(golden(path, sizeof path, "generated_datetime.json.gz"), &d, &err));
  const char *names[] = {"out.json", "out.json.gz"};
  for (int i = 0; i < 2 && d.schema; i++) {
    char out[256];
    snprintf(out, sizeof out, "%s/%s", dir, names[i]);
    CHECK_OK(fsh_json_write_path(out, d.schema, d.batches, d.n_batches, &err));
    CHECK_OK(fsh_json_read_path(out, &back, &err));
    CHECK_EQ_INT(back.n_batches, d.n_batches);
    for (int64_t b = 0; b < d.n_batches && b < back.n_batches; b++)
      CHECK_MSG(fsh_batch_equals(d.batches[b], back.batches[b], &err), "%s", err.message);
    fsh_json_data_reset(&back);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    CHECK(access(tmp, F_OK) != 0); /* renamed away */
    unlink(out);
  }
  /* A path in a missing directory fails cleanly. */
  char bad[300];
  snprintf(bad, sizeof bad, "%s/missing/out.json", dir);
  if (d.schema) CHECK(fsh_json_write_path(bad, d.schema, d.batches, d.n_batches, &err) == ENOENT);
  fsh_json_data_reset(&d);
  rmdir(dir);
}

/* Writer refusals: one dictionary id with two different dictionaries. */
static void test_write_conflicting_dictionaries(void) {
  char path[1024];
  fsh_error err = {{0}};
  fsh_json_data a, b;
  CHECK_OK(fsh_json_read_path(golden(path, sizeof path, "generated_dictionary.json.gz"), &a, &err));
  CHECK_OK(fsh_json_read_path(golden(path, sizeof path, "generated_dictionary.json.gz"), &b, &err));
  if (a.schema && b.schema && a.n_batches > 0 && a.schema->fields[0].dictionary) {
    /* Same data in another dictionary array object: accepted. */
    fsh_batch *two[2] = {a.batches[0], b.batches[0]};
    char *text = NULL;
    size_t len;
    CHECK_OK(fsh_json_write_string(a.schema, two, 2, &text, &len, &err));
    fsh_free(text);
    /* A sliced dictionary under the same id: refused. */
    fsh_array *col = b.batches[0]->columns[0];
    fsh_array *shorter = fsh_array_slice(col->dictionary, 1, col->dictionary->length - 1);
    fsh_array_unref(col->dictionary);
    col->dictionary = shorter;
    int rc = fsh_json_write_string(a.schema, two, 2, &text, &len, &err);
    CHECK_EQ_INT(rc, ENOTSUP);
    CHECK_MSG(strstr(err.message, "differs between arrays") != NULL, "%s", err.message);
  }
  fsh_json_data_reset(&a);
  fsh_json_data_reset(&b);
}

FSH_TEST_MAIN(TEST(test_syntax_and_shape), TEST(test_data_errors), TEST(test_dictionary_errors),
              TEST(test_missing_file), TEST(test_alloc_failures), TEST(test_files_plain_and_gz),
              TEST(test_write_conflicting_dictionaries))
