/* cmd_ipc.c -- `flightshuffle ipc ...`: cat, validate, to-json, from-json,
 * equals. Exit status: 0 success, 1 invalid input or difference, 2 usage. */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/json.h>

static void print_field(const fsh_field *f, int depth) {
  char type[512];
  fsh_field_type_to_string(f, type, sizeof type);
  printf("%*s%s: %s%s\n", 2 * depth, "", f->name, type, f->nullable ? "" : " not null");
  for (int64_t i = 0; i < f->n_children; i++) print_field(&f->children[i], depth + 1);
  if (f->dictionary)
    for (int64_t i = 0; i < f->dictionary->value.n_children; i++)
      print_field(&f->dictionary->value.children[i], depth + 1);
}

static int ipc_cat(const char *path) {
  fsh_error err = {{0}};
  cli_table t;
  if (cli_table_load(path, &t, &err)) return cli_fail(1, "%s", err.message);
  printf("schema (%lld fields):\n", (long long)t.schema->n_fields);
  for (int64_t i = 0; i < t.schema->n_fields; i++) print_field(&t.schema->fields[i], 1);
  for (int64_t i = 0; i < t.schema->metadata.n; i++)
    printf("  metadata %s = %s\n", t.schema->metadata.items[i].key,
           t.schema->metadata.items[i].value);
  for (int64_t i = 0; i < t.n_batches; i++)
    printf("batch %lld: %lld rows\n", (long long)i, (long long)t.batches[i]->length);
  printf("total: %lld batches, %lld rows\n", (long long)t.n_batches, (long long)cli_table_rows(&t));
  cli_table_reset(&t);
  return 0;
}

/* Streams through the input so that a huge file is not held in memory. */
static int ipc_validate(const char *path) {
  fsh_error err = {{0}};
  fsh_batch_stream s;
  if (fsh_ipc_open_path(path, &s, &err)) return cli_fail(1, "%s", err.message);
  int rc = 0;
  int64_t n = 0, rows = 0;
  for (;; n++) {
    fsh_batch *b = NULL;
    if ((rc = s.get_next(&s, &b, &err)) != 0) break;
    if (!b) break;
    rows += b->length;
    rc = fsh_batch_validate(b, true, &err);
    fsh_batch_unref(b);
    if (rc) {
      fsh_error_prefix(&err, rc, "%s: record batch %lld: ", path, (long long)n);
      break;
    }
  }
  s.release(&s);
  if (rc) return cli_fail(1, "invalid: %s", err.message);
  printf("%s: valid, %lld batches, %lld rows\n", path, (long long)n, (long long)rows);
  return 0;
}

static int ipc_to_json(const char *path) {
  fsh_error err = {{0}};
  cli_table t;
  if (cli_table_load(path, &t, &err)) return cli_fail(1, "%s", err.message);
  int rc = fsh_json_write(stdout, t.schema, t.batches, t.n_batches, &err);
  cli_table_reset(&t);
  if (rc) return cli_fail(1, "%s: %s", path, err.message);
  return 0;
}

static int ipc_from_json(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *format = "stream";
  fsh_ipc_write_options opts;
  fsh_ipc_write_options_init(&opts);
  fsh_error err = {{0}};
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
      format = argv[++i];
      if (strcmp(format, "stream") && strcmp(format, "file"))
        return cli_fail(2, "--format must be stream or file, not '%s'", format);
    } else if (strcmp(argv[i], "--compression") == 0 && i + 1 < argc) {
      if (fsh_compression_parse(argv[++i], &opts.compression, &err))
        return cli_fail(2, "--compression: %s", err.message);
    } else if (argv[i][0] == '-') {
      return cli_fail(2, "ipc from-json: unknown option '%s'", argv[i]);
    } else if (!in) {
      in = argv[i];
    } else if (!out) {
      out = argv[i];
    } else {
      return cli_fail(2, "ipc from-json: unexpected argument '%s'", argv[i]);
    }
  }
  if (!in || !out)
    return cli_fail(2, "usage: flightshuffle ipc from-json JSON OUT [--format stream|file] "
                       "[--compression none|lz4|zstd]");
  cli_table t;
  if (cli_table_load(in, &t, &err)) return cli_fail(1, "%s", err.message);
  int rc = cli_table_write(&t, out, strcmp(format, "file") == 0, &opts, &err);
  cli_table_reset(&t);
  if (rc) return cli_fail(1, "%s: %s", out, err.message);
  return 0;
}

static int ipc_equals(const char *pa, const char *pb) {
  fsh_error err = {{0}};
  cli_table a, b;
  if (cli_table_load(pa, &a, &err)) return cli_fail(2, "%s", err.message);
  if (cli_table_load(pb, &b, &err)) {
    cli_table_reset(&a);
    return cli_fail(2, "%s", err.message);
  }
  bool eq = cli_tables_equal(&a, &b, &err);
  cli_table_reset(&a);
  cli_table_reset(&b);
  if (!eq) return cli_fail(1, "%s and %s differ: %s", pa, pb, err.message);
  printf("equal\n");
  return 0;
}

int cmd_ipc(int argc, char **argv) {
  if (argc < 2) return cli_fail(2, "usage: flightshuffle ipc cat|validate|to-json|from-json|equals ...");
  const char *sub = argv[1];
  if (strcmp(sub, "from-json") == 0) return ipc_from_json(argc - 2, argv + 2);
  if (strcmp(sub, "equals") == 0) {
    if (argc != 4) return cli_fail(2, "usage: flightshuffle ipc equals A B");
    return ipc_equals(argv[2], argv[3]);
  }
  if (argc != 3) return cli_fail(2, "usage: flightshuffle ipc %s FILE", sub);
  if (strcmp(sub, "cat") == 0) return ipc_cat(argv[2]);
  if (strcmp(sub, "validate") == 0) return ipc_validate(argv[2]);
  if (strcmp(sub, "to-json") == 0) return ipc_to_json(argv[2]);
  return cli_fail(2, "unknown ipc command '%s'", sub);
}
