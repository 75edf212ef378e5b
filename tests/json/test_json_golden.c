/* test_json_golden.c -- every integration JSON file of arrow-testing parses,
 * matches what the JSON says (fields, batches, rows), validates, and
 * survives a write -> read round trip unchanged. */
#include <flightshuffle/json.h>

#include <dirent.h>
#include <jansson.h>
#include <string.h>
#include <zlib.h>

#include "test.h"

static const char *const dirs[] = {
    "arrow-testing/data/arrow-ipc-stream/integration/0.14.1",
    "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian",
    "arrow-testing/data/arrow-ipc-stream/integration/2.0.0-compression",
};

/* Calls fn(path) for every .json.gz of the golden directories; returns how
 * many files it saw. */
static int for_each_golden(void (*fn)(const char *path)) {
  int n = 0;
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    char dir[1024];
    fsh_test_shared_path(dir, sizeof dir, dirs[d]);
    DIR *dp = opendir(dir);
    CHECK_MSG(dp != NULL, "cannot open %s", dir);
    if (!dp) continue;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
      size_t len = strlen(e->d_name);
      if (len < 8 || strcmp(e->d_name + len - 8, ".json.gz") != 0) continue;
      char path[2048];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      fn(path);
      n++;
    }
    closedir(dp);
  }
  return n;
}

/* The raw JSON of a golden file, through zlib and jansson directly. */
static json_t *load_raw(const char *path) {
  gzFile gz = gzopen(path, "rb");
  if (!gz) return NULL;
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  int got;
  while (buf && (got = gzread(gz, buf + n, (unsigned)(cap - n))) > 0) {
    n += (size_t)got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  gzclose(gz);
  json_error_t jerr;
  json_t *root = buf ? json_loadb(buf, n, 0, &jerr) : NULL;
  free(buf);
  return root;
}

static void check_counts(const char *path) {
  fsh_error err = {{0}};
  fsh_json_data d;
  int rc = fsh_json_read_path(path, &d, &err);
  CHECK_MSG(rc == 0, "%s: %s", path, err.message);
  if (rc != 0) return;
  json_t *raw = load_raw(path);
  CHECK_MSG(raw != NULL, "%s: jansson cannot load it", path);
  if (raw) {
    json_t *fields = json_object_get(json_object_get(raw, "schema"), "fields");
    json_t *batches = json_object_get(raw, "batches");
    CHECK_EQ_INT(d.schema->n_fields, json_array_size(fields));
    CHECK_EQ_INT(d.n_batches, json_array_size(batches));
    for (int64_t b = 0; b < d.n_batches && b < (int64_t)json_array_size(batches); b++) {
      json_t *jb = json_array_get(batches, (size_t)b);
      CHECK_EQ_INT(d.batches[b]->length, json_integer_value(json_object_get(jb, "count")));
      CHECK_EQ_INT(d.batches[b]->n_columns, d.schema->n_fields);
    }
    json_decref(raw);
  }
  for (int64_t b = 0; b < d.n_batches; b++) {
    int vrc = fsh_batch_validate(d.batches[b], true, &err);
    CHECK_MSG(vrc == 0, "%s: batch %lld does not validate: %s", path, (long long)b, err.message);
  }
  fsh_json_data_reset(&d);
}

static void check_roundtrip(const char *path) {
  fsh_error err = {{0}};
  fsh_json_data d, back;
  if (fsh_json_read_path(path, &d, &err) != 0) return; /* reported by check_counts */
  char *text = NULL;
  size_t len = 0;
  int rc = fsh_json_write_string(d.schema, d.batches, d.n_batches, &text, &len, &err);
  CHECK_MSG(rc == 0, "%s: write: %s", path, err.message);
  if (rc == 0) {
    rc = fsh_json_read_string(text, len, "roundtrip", &back, &err);
    CHECK_MSG(rc == 0, "%s: read back: %s", path, err.message);
    if (rc == 0) {
      CHECK_MSG(fsh_schema_equals(d.schema, back.schema, true, &err), "%s: %s", path, err.message);
      for (int64_t i = 0; i < d.schema->n_fields; i++)
        CHECK_MSG(fsh_field_equals(&d.schema->fields[i], &back.schema->fields[i], true, &err),
                  "%s: %s", path, err.message);
      CHECK_EQ_INT(back.n_batches, d.n_batches);
      for (int64_t b = 0; b < d.n_batches && b < back.n_batches; b++)
        CHECK_MSG(fsh_batch_equals(d.batches[b], back.batches[b], &err), "%s: batch %lld: %s", path,
                  (long long)b, err.message);
      fsh_json_data_reset(&back);
    }
  }
  fsh_free(text);
  /* Sliced batches write their logical values only. */
  for (int64_t b = 0; b < d.n_batches; b++) {
    fsh_batch *whole = d.batches[b];
    if (whole->length < 3) continue;
    fsh_batch *s = fsh_batch_slice(whole, 1, whole->length - 2);
    CHECK(s != NULL);
    if (!s) continue;
    rc = fsh_json_write_string(d.schema, &s, 1, &text, &len, &err);
    CHECK_MSG(rc == 0, "%s: write slice: %s", path, err.message);
    if (rc == 0 && fsh_json_read_string(text, len, "slice", &back, &err) == 0) {
      CHECK_MSG(fsh_batch_equals(s, back.batches[0], &err), "%s: slice of batch %lld: %s", path,
                (long long)b, err.message);
      CHECK_EQ_INT(back.batches[0]->columns[0]->offset, 0);
      fsh_json_data_reset(&back);
    } else if (rc == 0) {
      CHECK_MSG(0, "%s: read back slice: %s", path, err.message);
    }
    fsh_free(text);
    fsh_batch_unref(s);
  }
  fsh_json_data_reset(&d);
}

static void golden_files_parse(void) {
  int n = for_each_golden(check_counts);
  CHECK_MSG(n >= 35, "only %d golden files found", n);
}

static void golden_files_roundtrip(void) { for_each_golden(check_roundtrip); }

/* Spot checks of decoded values, beyond counts. */
static void golden_values(void) {
  char path[1024];
  fsh_error err = {{0}};
  fsh_json_data d;
  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_nested_dictionary.json.gz");
  CHECK_OK(fsh_json_read_path(path, &d, &err));
  if (d.schema) {
    /* list_dict: dictionary id 1 of list<dictionary id 0 of utf8>. */
    const fsh_field *f = &d.schema->fields[0];
    CHECK(f->dictionary != NULL && f->dictionary->id == 1);
    CHECK(f->type == FSH_TYPE_INT8);
    CHECK(f->dictionary && f->dictionary->value.type == FSH_TYPE_LIST);
    CHECK(f->dictionary && f->dictionary->value.n_children == 1 &&
          f->dictionary->value.children[0].dictionary != NULL);
    fsh_array *col = d.batches[0]->columns[0];
    CHECK(col->dictionary != NULL && col->dictionary->length == 30);
    CHECK(col->dictionary && col->dictionary->children[0]->dictionary != NULL &&
          col->dictionary->children[0]->dictionary->length == 10);
    /* The struct_dict children share dictionary 0 with the list's values. */
    fsh_array *sd = d.batches[0]->columns[1]->dictionary;
    CHECK(sd && sd->children[0]->dictionary == col->dictionary->children[0]->dictionary);
  }
  fsh_json_data_reset(&d);

  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_decimal256.json.gz");
  CHECK_OK(fsh_json_read_path(path, &d, &err));
  if (d.schema && d.n_batches > 0) {
    CHECK(d.schema->fields[0].type == FSH_TYPE_DECIMAL256);
    CHECK_EQ_INT(d.schema->fields[0].scale, 5);
    /* Round trip of a decimal through the writer's string form. */
    char *text;
    size_t len;
    CHECK_OK(fsh_json_write_string(d.schema, d.batches, 1, &text, &len, &err));
    CHECK(strstr(text, "\"91241102694676391947392222433629263697\"") != NULL);
    fsh_free(text);
  }
  fsh_json_data_reset(&d);

  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_custom_metadata.json.gz");
  CHECK_OK(fsh_json_read_path(path, &d, &err));
  if (d.schema) {
    CHECK_EQ_INT(d.schema->metadata.n, 2);
    const fsh_kv *kv = fsh_metadata_find(&d.schema->fields[1].metadata, "..");
    CHECK(kv && strcmp(kv->value, "{}") == 0);
  }
  fsh_json_data_reset(&d);
}

FSH_TEST_MAIN(TEST(golden_files_parse), TEST(golden_files_roundtrip), TEST(golden_values))
