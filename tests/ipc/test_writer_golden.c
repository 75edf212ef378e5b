/* test_writer_golden.c -- rewrites the apache/arrow-testing integration
 * files (written by Arrow C++ / Java / ...) with our writers, in both
 * formats and with none / lz4 / zstd, reads them back and compares every
 * batch with what was read from the original. The decoded batches slice
 * the original bodies, so this also exercises encoding arrays we did not
 * build ourselves. With FSH_WRITER_DUMP_DIR set the rewritten files are
 * kept there (to be read with pyarrow by hand). */
#include <dirent.h>
#include <errno.h>

#include "test.h"
#include <flightshuffle/ipc.h>

#define MAX_BATCHES 64

typedef struct table {
  fsh_schema *schema;
  fsh_batch *batches[MAX_BATCHES];
  int n;
} table;

static void table_reset(table *t) {
  for (int i = 0; i < t->n; i++) fsh_batch_unref(t->batches[i]);
  fsh_schema_unref(t->schema);
  memset(t, 0, sizeof *t);
}

static int drain(fsh_batch_stream *st, table *t, fsh_error *err) {
  t->schema = fsh_schema_ref(st->schema);
  int rc = 0;
  for (;;) {
    fsh_batch *b = NULL;
    if ((rc = st->get_next(st, &b, err)) != 0 || !b) break;
    if (t->n < MAX_BATCHES)
      t->batches[t->n++] = b;
    else
      fsh_batch_unref(b);
  }
  st->release(st);
  return rc;
}

static void dump(const char *name, fsh_buffer *bytes) {
  const char *dir = getenv("FSH_WRITER_DUMP_DIR");
  if (!dir || !bytes) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(bytes->data, 1, (size_t)bytes->size, f);
  fclose(f);
}

static int files_checked;

static void rewrite_one(const char *dir, const char *file) {
  fsh_error err;
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  fsh_batch_stream st;
  table orig = {0};
  int rc = fsh_ipc_open_path(path, &st, &err);
  if (rc == 0) rc = drain(&st, &orig, &err);
  if (rc) {
    /* what our reader refuses is the reader tests' business */
    printf("  skip %s: %s\n", file, err.message);
    table_reset(&orig);
    return;
  }
  static const fsh_compression codecs[] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                           FSH_COMPRESSION_ZSTD};
  for (int file_format = 0; file_format < 2; file_format++) {
    for (int c = 0; c < 3; c++) {
      fsh_ipc_write_options o;
      fsh_ipc_write_options_init(&o);
      o.compression = codecs[c];
      o.emit_dictionary_deltas = true;
      fsh_buffer *bytes = NULL;
      fsh_output *out = NULL;
      CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
      if (!out) continue;
      if (file_format) {
        fsh_ipc_file_writer *w = NULL;
        rc = fsh_ipc_file_writer_open(out, orig.schema, &o, &w, &err);
        for (int i = 0; i < orig.n && rc == 0; i++) rc = fsh_ipc_file_writer_write(w, orig.batches[i], &err);
        if (rc == 0) rc = fsh_ipc_file_writer_close(w, &err);
        else if (w) fsh_ipc_file_writer_abort(w);
      } else {
        fsh_ipc_stream_writer *w = NULL;
        rc = fsh_ipc_stream_writer_open(out, orig.schema, &o, &w, &err);
        for (int i = 0; i < orig.n && rc == 0; i++) rc = fsh_ipc_stream_writer_write(w, orig.batches[i], &err);
        if (rc == 0) rc = fsh_ipc_stream_writer_close(w, &err);
        else if (w) fsh_ipc_stream_writer_abort(w);
      }
      /* A file cannot hold a replaced dictionary: the golden dictionary
       * files that replace dictionaries only fit the stream format. */
      if (rc == EINVAL && file_format && strstr(err.message, "dictionary")) {
        printf("  %s: file format refused: %s\n", file, err.message);
        fsh_buffer_unref(bytes);
        continue;
      }
      CHECK_MSG(rc == 0, "%s (%s, %s): %s", file, file_format ? "file" : "stream",
                fsh_compression_name(codecs[c]), err.message);
      if (rc || !bytes) {
        fsh_buffer_unref(bytes);
        continue;
      }
      char name[1024];
      snprintf(name, sizeof name, "rw_%s_%s.%s", file, fsh_compression_name(codecs[c]),
               file_format ? "arrow" : "arrows");
      dump(name, bytes);
      table back = {0};
      rc = fsh_ipc_open_buffer(bytes, name, &st, &err);
      if (rc == 0) rc = drain(&st, &back, &err);
      CHECK_MSG(rc == 0, "%s: reading back: %s", name, err.message);
      if (rc == 0) {
        fsh_error diff = {{0}};
        CHECK_MSG(fsh_schema_equals(orig.schema, back.schema, true, &diff), "%s: %s", name,
                  diff.message);
        CHECK_EQ_INT(back.n, orig.n);
        for (int i = 0; i < orig.n && i < back.n; i++) {
          bool eq = fsh_batch_equals(orig.batches[i], back.batches[i], &diff);
          CHECK_MSG(eq, "%s batch %d: %s", name, i, diff.message);
        }
        files_checked++;
      }
      table_reset(&back);
      fsh_buffer_unref(bytes);
    }
  }
  table_reset(&orig);
}

static void rewrite_dir(const char *rel, const char *suffix) {
  char dir[1024];
  fsh_test_shared_path(dir, sizeof dir, rel);
  DIR *d = opendir(dir);
  if (!d) {
    printf("  skip: no %s\n", dir);
    return;
  }
  struct dirent *e;
  char names[128][256];
  int n = 0;
  while ((e = readdir(d)) != NULL && n < 128) {
    size_t l = strlen(e->d_name), sl = strlen(suffix);
    if (l > sl && strcmp(e->d_name + l - sl, suffix) == 0)
      snprintf(names[n++], sizeof names[0], "%s", e->d_name);
  }
  closedir(d);
  for (int i = 0; i < n; i++) rewrite_one(dir, names[i]);
}

static void test_rewrite_golden_files(void) {
  files_checked = 0;
  rewrite_dir("arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian", ".arrow_file");
  rewrite_dir("arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian", ".stream");
  rewrite_dir("arrow-testing/data/arrow-ipc-stream/integration/2.0.0-compression", ".arrow_file");
  printf("  %d rewritten files read back\n", files_checked);
}

FSH_TEST_MAIN(TEST(test_rewrite_golden_files))
