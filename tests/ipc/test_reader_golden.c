/* test_reader_golden.c -- the IPC readers against apache/arrow-testing's
 * golden integration files (read in place): every .stream and .arrow_file
 * decodes, validates, and the stream and file hold equal batches; memory
 * and file descriptor inputs agree. */
#include <flightshuffle/ipc.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/read_internal.h"
#include "test.h"

#include <sys/wait.h>

#define CHECK_OK_PLAIN(e) CHECK((e) == 0)

static const char *const dirs[] = {
    "arrow-testing/data/arrow-ipc-stream/integration/0.14.1",
    "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian",
    "arrow-testing/data/arrow-ipc-stream/integration/2.0.0-compression",
};

typedef struct batches {
  fsh_schema *schema;
  int64_t n;
  fsh_batch *items[64];
} batches;

static void batches_reset(batches *b) {
  for (int64_t i = 0; i < b->n; i++) fsh_batch_unref(b->items[i]);
  fsh_schema_unref(b->schema);
  memset(b, 0, sizeof *b);
}

/* Reads every batch of a stream interface into b; validates each. */
static int drain(fsh_batch_stream *s, batches *b, const char *what) {
  fsh_error err;
  b->schema = fsh_schema_ref(s->schema);
  for (;;) {
    fsh_batch *batch;
    int rc = s->get_next(s, &batch, &err);
    if (rc != 0) {
      fprintf(stderr, "%s: %s\n", what, err.message);
      return rc;
    }
    if (!batch) return 0;
    CHECK_OK(fsh_batch_validate(batch, true, &err));
    if (b->n < 64)
      b->items[b->n++] = batch;
    else
      fsh_batch_unref(batch);
  }
}

static int read_path(const char *path, batches *b) {
  fsh_error err;
  fsh_batch_stream s;
  int rc = fsh_ipc_open_path(path, &s, &err);
  if (rc != 0) {
    fprintf(stderr, "open %s: %s\n", path, err.message);
    return rc;
  }
  rc = drain(&s, b, path);
  s.release(&s);
  return rc;
}

static fsh_buffer *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  fsh_buffer *b = fsh_buffer_new(n, false);
  if (b && fread(b->data, 1, (size_t)n, f) != (size_t)n) {
    fsh_buffer_unref(b);
    b = NULL;
  }
  fclose(f);
  return b;
}

static int read_memory(const char *path, batches *b) {
  fsh_error err;
  fsh_batch_stream s;
  fsh_buffer *buf = slurp(path);
  if (!buf) return -1;
  int rc = fsh_ipc_open_buffer(buf, path, &s, &err);
  fsh_buffer_unref(buf); /* the stream keeps its own reference */
  if (rc != 0) {
    fprintf(stderr, "open_buffer %s: %s\n", path, err.message);
    return rc;
  }
  rc = drain(&s, b, path);
  s.release(&s);
  return rc;
}

/* Equal schemas and batches. The golden map_non_canonical stream was
 * written with canonical map field names ("entries") while its file keeps
 * "some_entries": there only the column values are compared. */
static void check_same(const batches *a, const batches *b, const char *what) {
  fsh_error diff;
  bool names_differ = strstr(what, "map_non_canonical") != NULL;
  if (!names_differ)
    CHECK_MSG(fsh_schema_equals(a->schema, b->schema, true, &diff), "%s: schema: %s", what,
              diff.message);
  else
    CHECK(a->schema->n_fields == b->schema->n_fields);
  CHECK_MSG(a->n == b->n, "%s: %lld vs %lld batches", what, (long long)a->n, (long long)b->n);
  for (int64_t i = 0; i < a->n && i < b->n; i++) {
    CHECK_MSG(a->items[i]->length == b->items[i]->length, "%s: batch %lld rows", what,
              (long long)i);
    if (!names_differ) {
      CHECK_MSG(fsh_batch_equals(a->items[i], b->items[i], &diff), "%s: batch %lld: %s", what,
                (long long)i, diff.message);
      continue;
    }
    for (int64_t c = 0; c < a->items[i]->n_columns; c++)
      CHECK_MSG(fsh_array_equals(&a->schema->fields[c], a->items[i]->columns[c],
                                 b->items[i]->columns[c], &diff),
                "%s: batch %lld column %lld: %s", what, (long long)i, (long long)c, diff.message);
  }
}

/* One golden pair: stream (path + memory) and file (path + memory). */
static void check_pair(const char *dir, const char *stem) {
  char spath[1024], fpath[1024];
  snprintf(spath, sizeof spath, "%s/%s.stream", dir, stem);
  snprintf(fpath, sizeof fpath, "%s/%s.arrow_file", dir, stem);
  batches s = {0}, sm = {0}, f = {0}, fm = {0};
  CHECK_MSG(read_path(spath, &s) == 0, "%s", spath);
  CHECK_MSG(read_memory(spath, &sm) == 0, "%s (memory)", spath);
  CHECK_MSG(read_path(fpath, &f) == 0, "%s", fpath);
  CHECK_MSG(read_memory(fpath, &fm) == 0, "%s (memory)", fpath);
  if (s.schema && f.schema) check_same(&s, &f, spath);
  if (s.schema && sm.schema) check_same(&s, &sm, spath);
  if (f.schema && fm.schema) check_same(&f, &fm, fpath);
  batches_reset(&s);
  batches_reset(&sm);
  batches_reset(&f);
  batches_reset(&fm);
}

static void test_golden_all(void) {
  int pairs = 0;
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    char dir[1024];
    fsh_test_shared_path(dir, sizeof dir, dirs[d]);
    DIR *dh = opendir(dir);
    CHECK_MSG(dh != NULL, "cannot open %s", dir);
    if (!dh) continue;
    struct dirent *e;
    while ((e = readdir(dh))) {
      size_t n = strlen(e->d_name);
      if (n < 8 || strcmp(e->d_name + n - 7, ".stream") != 0) continue;
      char stem[256];
      snprintf(stem, sizeof stem, "%.*s", (int)(n - 7), e->d_name);
      check_pair(dir, stem);
      pairs++;
    }
    closedir(dh);
  }
  CHECK(pairs >= 35);
}

/* Row and batch counts of a few files, known from their JSON. */
static void test_golden_counts(void) {
  char path[1024];
  batches b = {0};
  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_primitive_no_batches.arrow_file");
  CHECK_OK_PLAIN(read_path(path, &b));
  CHECK_EQ_INT(b.n, 0);
  CHECK(b.schema && b.schema->n_fields > 0);
  batches_reset(&b);
  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/2.0.0-compression/"
                       "generated_zstd.stream");
  CHECK_OK_PLAIN(read_path(path, &b));
  CHECK(b.n > 0);
  batches_reset(&b);
}

/* Uncompressed bodies are zero-copy: column buffers point into the input. */
static void test_zero_copy(void) {
  char path[1024];
  fsh_error err;
  fsh_batch_stream s;
  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_primitive.stream");
  fsh_buffer *buf = slurp(path);
  CHECK(buf != NULL);
  if (!buf) return;
  CHECK_OK(fsh_ipc_open_buffer(buf, path, &s, &err));
  fsh_batch *b = NULL;
  CHECK_OK(s.get_next(&s, &b, &err));
  CHECK(b != NULL);
  int inside = 0, total = 0;
  for (int64_t c = 0; b && c < b->n_columns; c++) {
    fsh_array *a = b->columns[c];
    for (int i = 1; i < a->n_buffers; i++) {
      if (!a->buffers[i] || a->buffers[i]->size == 0) continue;
      total++;
      inside += a->buffers[i]->data >= buf->data && a->buffers[i]->data < buf->data + buf->size;
    }
  }
  CHECK(total > 0);
  CHECK_EQ_INT(inside, total);
  fsh_batch_unref(b);
  s.release(&s);
  fsh_buffer_unref(buf);
}

/* A pipe (unknown size, no seeking) is read as a stream. */
static void test_pipe_input(void) {
  char path[1024];
  fsh_error err;
  fsh_test_shared_path(path, sizeof path,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_nested.stream");
  fsh_buffer *buf = slurp(path);
  int fds[2];
  CHECK(buf && pipe(fds) == 0);
  if (!buf) return;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ssize_t w = write(fds[1], buf->data, (size_t)buf->size);
    _exit(w == buf->size ? 0 : 1);
  }
  close(fds[1]);
  fsh_input *in;
  fsh_ipc_stream_reader *r;
  CHECK_OK(fsh_input_from_fd(fds[0], true, "pipe", &in, &err));
  CHECK(in->size(in) < 0);
  CHECK_OK(fsh_ipc_stream_reader_open(in, &r, &err));
  int64_t n = 0;
  for (;;) {
    fsh_batch *b;
    int rc = fsh_ipc_stream_reader_next(r, &b, &err);
    CHECK_OK(rc);
    if (rc || !b) break;
    n++;
    fsh_batch_unref(b);
  }
  CHECK(n > 0);
  fsh_ipc_stream_reader_free(r);
  fsh_buffer_unref(buf);
  int status;
  waitpid(pid, &status, 0);
}

FSH_TEST_MAIN(TEST(test_golden_all), TEST(test_golden_counts), TEST(test_zero_copy),
              TEST(test_pipe_input))
