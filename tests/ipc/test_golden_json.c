/* test_golden_json.c -- every golden IPC file of apache/arrow-testing (read
 * in place from shared/) decodes to exactly what its .json.gz describes:
 * schema (with metadata and dictionary encodings) and every batch, for the
 * .stream and the .arrow_file alike. The JSON side is read by our
 * integration-JSON reader, an independent code path from the IPC decoder. */
#include <dirent.h>
#include <string.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/json.h>

#include "test.h"

static const char *const dirs[] = {
    "arrow-testing/data/arrow-ipc-stream/integration/0.14.1",
    "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian",
    "arrow-testing/data/arrow-ipc-stream/integration/2.0.0-compression",
};

static int files_checked;

/* Map entries in the canonical names the IPC writer of that golden stream
 * used ("entries", "key", "value"), applied to the JSON's schema. */
static void canonicalize_map_names(fsh_field *f) {
  if (f->type == FSH_TYPE_MAP && f->n_children == 1) {
    fsh_field *entries = &f->children[0];
    const char *names[] = {"entries", "key", "value"};
    fsh_field *targets[] = {entries, entries->n_children > 0 ? &entries->children[0] : NULL,
                            entries->n_children > 1 ? &entries->children[1] : NULL};
    for (int i = 0; i < 3; i++) {
      if (!targets[i]) continue;
      fsh_free(targets[i]->name);
      targets[i]->name = fsh_strdup(names[i]);
    }
  }
  for (int64_t i = 0; i < f->n_children; i++) canonicalize_map_names(&f->children[i]);
}

/* Reads all of an IPC file and compares it, batch by batch, with json. */
static void check_against_json(const char *path, fsh_json_data *json) {
  fsh_error err = {{0}};
  fsh_batch_stream s;
  int rc = fsh_ipc_open_path(path, &s, &err);
  CHECK_MSG(rc == 0, "%s: %s", path, err.message);
  if (rc) return;
  CHECK_MSG(fsh_schema_equals(s.schema, json->schema, true, &err), "%s: schema: %s", path,
            err.message);
  int64_t i = 0;
  for (;; i++) {
    fsh_batch *b = NULL;
    rc = s.get_next(&s, &b, &err);
    CHECK_MSG(rc == 0, "%s: batch %lld: %s", path, (long long)i, err.message);
    if (rc || !b) break;
    CHECK_MSG(i < json->n_batches, "%s: more batches than the JSON's %lld", path,
              (long long)json->n_batches);
    if (i < json->n_batches)
      CHECK_MSG(fsh_batch_equals(b, json->batches[i], &err), "%s: batch %lld: %s", path,
                (long long)i, err.message);
    fsh_batch_unref(b);
  }
  CHECK_MSG(rc != 0 || i == json->n_batches, "%s: %lld batches, the JSON has %lld", path,
            (long long)i, (long long)json->n_batches);
  s.release(&s);
  files_checked++;
}

static void test_every_golden_file_equals_its_json(void) {
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    char dir[1024];
    fsh_test_shared_path(dir, sizeof dir, dirs[d]);
    DIR *dh = opendir(dir);
    CHECK_MSG(dh != NULL, "cannot open %s (is shared/ beside the repository?)", dir);
    if (!dh) continue;
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
      size_t n = strlen(e->d_name);
      if (n < 8 || strcmp(e->d_name + n - 8, ".json.gz") != 0) continue;
      char base[2048], json_path[2100], path[2100];
      snprintf(base, sizeof base, "%s/%.*s", dir, (int)(n - 8), e->d_name);
      snprintf(json_path, sizeof json_path, "%s.json.gz", base);
      fsh_json_data json;
      fsh_error err = {{0}};
      int rc = fsh_json_read_path(json_path, &json, &err);
      CHECK_MSG(rc == 0, "%s", err.message);
      if (rc) continue;
      snprintf(path, sizeof path, "%s.arrow_file", base);
      check_against_json(path, &json);
      /* This one golden stream was written with canonical map field names
       * while its JSON and .arrow_file keep the non-canonical ones (checked
       * byte-wise: the names are absent from the .stream). */
      if (strstr(base, "generated_map_non_canonical"))
        for (int64_t i = 0; i < json.schema->n_fields; i++)
          canonicalize_map_names(&json.schema->fields[i]);
      snprintf(path, sizeof path, "%s.stream", base);
      check_against_json(path, &json);
      fsh_json_data_reset(&json);
    }
    closedir(dh);
  }
  /* 0.14.1: 9 names, 1.0.0-littleendian: 22, 2.0.0-compression: 4; two files each */
  CHECK_EQ_INT(files_checked, 2 * (9 + 22 + 4));
}

FSH_TEST_MAIN(TEST(test_every_golden_file_equals_its_json))
