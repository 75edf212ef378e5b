/* test_map_task.c -- fsh_map_task_run (shuffle.h, "tasks") against a
 * reference computed in the test: the same synthetic batches generated
 * whole, partitioned by fsh_hash_columns + fsh_partition_hash over the
 * whole batch, row checksums by the scalar path over the whole batch. The
 * task maps a batch in equal slices of at least 16384 rows and 64 rows a
 * partition (task_map.c, map_slice_rows) and, with 8 or more
 * partitions (and 128+ rows a partition in an append), stages the
 * builders' pushes (scatter_append.c): batches of 40000 rows (slices
 * 20000, 20000 with 5 and 37 partitions; at 300 partitions 20000, 20000
 * too, 66 rows a partition: direct pushes; at 700, whole batches), a
 * short last batch and a first row inside the table make every slice
 * shape, with 5 partitions (direct pushes), 37 (staged), 300 and 700
 * (direct, many partitions). Checked: rows, row checksums and bytes per
 * partition, input rows and bytes, and every partition read back from the
 * flight backend (in-process worker) gives the reference's rows and row
 * checksum. The memory backend (whole batches, no builders) must give the
 * same per-partition rows and checksums. */
#include <flightshuffle/kernels.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h" /* fsh_shuffle_batch_bytes */
#include "shuffle/shuffle_testutil.h"

enum { BATCH_ROWS = 40000 };

typedef struct reference {
  int64_t *rows;  /* [n_partitions] */
  uint64_t *sums; /* [n_partitions] */
  int64_t input_rows, input_bytes;
} reference;

/* The reference for task t, batch by batch, each batch whole. */
static reference reference_of(const fsh_map_task *t) {
  fsh_error err;
  reference r = {STU_OK(fsh_calloc((size_t)t->n_partitions, sizeof *r.rows)),
                 STU_OK(fsh_calloc((size_t)t->n_partitions, sizeof *r.sums)), 0, 0};
  fsh_schema *schema = STU_OK(fsh_synthetic_schema());
  fsh_synthetic_options so = {.seed = t->seed, .with_nulls = true};
  uint64_t *h = STU_OK(fsh_malloc(sizeof *h * BATCH_ROWS));
  int32_t *part = STU_OK(fsh_malloc(sizeof *part * BATCH_ROWS));
  int32_t key = 0;
  for (int64_t done = 0; done < t->rows;) {
    int64_t n = t->rows - done < t->batch_rows ? t->rows - done : t->batch_rows;
    fsh_batch *full = NULL;
    CHECK_OK(fsh_synthetic_batch(schema, &so, (t->first_row + done) / t->batch_rows,
                                 t->batch_rows, &full, &err));
    fsh_batch *b = STU_OK(fsh_batch_slice(full, 0, n));
    CHECK_OK(fsh_hash_columns(b, &key, 1, 0, h, &err));
    CHECK_OK(fsh_partition_hash(h, n, t->n_partitions, part, &err));
    (void)fsh_task_row_checksums_path(b, part, r.sums, FSH_ROWSUM_SCALAR);
    for (int64_t i = 0; i < n; i++) r.rows[part[i]]++;
    r.input_rows += n;
    r.input_bytes += fsh_shuffle_batch_bytes(b);
    fsh_batch_unref(b);
    fsh_batch_unref(full);
    done += n;
  }
  fsh_free(h);
  fsh_free(part);
  fsh_schema_unref(schema);
  return r;
}

static void reference_free(reference *r) {
  fsh_free(r->rows);
  fsh_free(r->sums);
}

static void check_against(const fsh_map_task_result *got, const reference *want,
                          int32_t n_partitions, const char *what) {
  CHECK_EQ_INT(got->input_rows, want->input_rows);
  CHECK_EQ_INT(got->input_bytes, want->input_bytes);
  CHECK_EQ_INT(got->output.n_partitions, n_partitions);
  int64_t total = 0;
  for (int32_t p = 0; p < n_partitions; p++) {
    CHECK_MSG(got->output.rows[p] == want->rows[p] && got->row_checksums[p] == want->sums[p],
              "%s: partition %d: %lld rows, checksum %016llx; want %lld, %016llx", what, p,
              (long long)got->output.rows[p], (unsigned long long)got->row_checksums[p],
              (long long)want->rows[p], (unsigned long long)want->sums[p]);
    total += got->output.rows[p];
  }
  CHECK_EQ_INT(total, want->input_rows);
}

static void one_shape(fsh_shuffle_backend *flight, fsh_shuffle_backend *memory, uint64_t shuffle_id,
                      int32_t n_partitions) {
  fsh_error err;
  /* batches 3, 4 (whole) and 5 (12345 rows) of the table */
  fsh_map_task t = {.shuffle_id = shuffle_id, .map_id = 0, .n_partitions = n_partitions,
                    .first_row = 3 * BATCH_ROWS, .rows = 2 * BATCH_ROWS + 12345,
                    .batch_rows = BATCH_ROWS, .seed = 7, .backend = FSH_TASK_BACKEND_FLIGHT};
  reference want = reference_of(&t);
  char what[64];
  snprintf(what, sizeof what, "flight, %d partitions", n_partitions);
  fsh_map_task_result got = {0};
  CHECK_OK(fsh_map_task_run(flight, &t, &got, &err));
  check_against(&got, &want, n_partitions, what);

  /* every partition read back: the rows and their checksum */
  for (int32_t p = 0; p < n_partitions; p++) {
    fsh_reduce_source src = {.map_id = 0, .attempt = 0, .rows = got.output.rows[p],
                             .bytes = got.output.bytes[p], .checksum = got.output.checksums[p]};
    char *loc = got.output.location;
    fsh_reduce_task rt = {.shuffle_id = shuffle_id, .partition = p, .n_partitions = n_partitions,
                          .backend = FSH_TASK_BACKEND_FLIGHT, .sources = &src, .n_sources = 1,
                          .locations = &loc, .n_locations = 1};
    fsh_reduce_task_result rr;
    CHECK_OK(fsh_reduce_task_run(flight, &rt, &rr, &err));
    CHECK_MSG(rr.rows == want.rows[p] && rr.checksum == want.sums[p],
              "%s: partition %d read back: %lld rows, checksum %016llx; want %lld, %016llx", what,
              p, (long long)rr.rows, (unsigned long long)rr.checksum, (long long)want.rows[p],
              (unsigned long long)want.sums[p]);
  }
  fsh_map_task_result_reset(&got);

  snprintf(what, sizeof what, "memory, %d partitions", n_partitions);
  t.backend = FSH_TASK_BACKEND_MEMORY;
  CHECK_OK(fsh_map_task_run(memory, &t, &got, &err));
  check_against(&got, &want, n_partitions, what);
  fsh_map_task_result_reset(&got);
  reference_free(&want);
}

static void test_map_task_against_reference(void) {
  fsh_error err;
  char *dir = stu_mkdtemp("maptask");
  const char *dirs[1] = {dir};
  fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .spill_dirs = dirs, .n_spill_dirs = 1,
                                   .memory_limit = (int64_t)1 << 30, .n_threads = 2};
  fsh_shuffle_worker *worker = NULL;
  CHECK_OK(fsh_shuffle_worker_start(&wo, &worker, &err));
  fsh_shuffle_flight_options fo = {.local = worker, .timeout_ms = 30000};
  fsh_shuffle_backend *flight = NULL, *memory = NULL;
  CHECK_OK(fsh_shuffle_flight_new(&fo, &flight, &err));
  CHECK_OK(fsh_shuffle_memory_new(&memory, &err));
  one_shape(flight, memory, 1, 5);  /* direct pushes */
  one_shape(flight, memory, 2, 37); /* staged pushes */
  one_shape(flight, memory, 3, 300); /* two slices of > 64 rows a partition */
  one_shape(flight, memory, 4, 700); /* whole batches */
  fsh_shuffle_backend_destroy(flight);
  fsh_shuffle_backend_destroy(memory);
  fsh_shuffle_worker_stop(worker, 5000);
  stu_rmdir(dir);
}

FSH_TEST_MAIN(TEST(test_map_task_against_reference))
