/* test_write_rows.c -- fsh_shuffle_write_rows through every backend: the
 * map-file writers of fs and flight take the rows into their partition
 * builders, the memory backend (no write_rows) scatters; readers return
 * exactly the rows fsh_scatter puts in each partition, in order. The
 * flight cluster of shuffle_testutil.h covers the store's memory budget:
 * one worker keeps its images in memory, one spills everything, one
 * spills past 64 KiB (evicting older images). A schema the builders do
 * not take (every type) goes through the scatter fallback. */
#include <flightshuffle/kernels.h>

#include "ipc/sample_batches.h"
#include "shuffle/shuffle_testutil.h"

enum { N_MAPS = 4, N_BATCHES = 3, MAX_ROWS = 5000 };

typedef struct input {
  fsh_batch *batch[N_MAPS][N_BATCHES];
  int32_t *part[N_MAPS][N_BATCHES];
} input;

/* The plan of what each partition must read: the inputs' rows scattered
 * by their ids, part by part. */
static void plan_from(stu_plan *p, const input *in, int32_t n_parts) {
  fsh_error err;
  fsh_batch **parts = STU_OK(calloc((size_t)n_parts, sizeof *parts));
  for (int m = 0; m < N_MAPS; m++)
    for (int k = 0; k < N_BATCHES; k++) {
      CHECK_OK(fsh_scatter(in->batch[m][k], in->part[m][k], n_parts, parts, &err));
      for (int32_t q = 0; q < n_parts; q++) {
        if (parts[q]) stu_add(&p->maps[m], q, parts[q]);
        fsh_batch_unref(parts[q]);
        parts[q] = NULL;
      }
    }
  free(parts);
}

static void inputs(input *in, fsh_batch *(*make)(int m, int k), int32_t n_parts, uint64_t seed) {
  for (int m = 0; m < N_MAPS; m++)
    for (int k = 0; k < N_BATCHES; k++) {
      fsh_batch *b = in->batch[m][k] = make(m, k);
      int32_t *part = in->part[m][k] = STU_OK(malloc(sizeof(int32_t) * (size_t)(b->length + 1)));
      bool one = (m + k) % 5 == 4; /* every row of a batch to one partition */
      for (int64_t i = 0; i < b->length; i++)
        part[i] = one ? 2 : (int32_t)(stu_mix(seed + (uint64_t)(m * 100000 + k * 10000 + i)) %
                                      (uint64_t)n_parts);
    }
}

static void inputs_free(input *in) {
  for (int m = 0; m < N_MAPS; m++)
    for (int k = 0; k < N_BATCHES; k++) {
      fsh_batch_unref(in->batch[m][k]);
      free(in->part[m][k]);
    }
}

/* Writes every map's batches with fsh_shuffle_write_rows, then checks the
 * metadata and every partition against the plan. */
static void run(const stu_backend *be, fsh_schema *schema, const input *in, int32_t n_parts,
                bool spill_check) {
  fsh_error err = {{0}};
  char *dir = stu_mkdtemp("write_rows");
  fsh_shuffle_backend *b = NULL;
  CHECK_OK(be->make(dir, &b, &err));
  if (!b) {
    stu_rmdir(dir);
    return;
  }
  stu_plan p;
  stu_plan_init(&p, 21, n_parts, schema, N_MAPS);
  plan_from(&p, in, n_parts);
  fsh_batch **scratch = STU_OK(calloc((size_t)n_parts, sizeof *scratch));
  for (int m = 0; m < N_MAPS; m++) {
    fsh_shuffle_writer *w = NULL;
    CHECK_OK(fsh_shuffle_open_writer(b, &p.spec, m, 0, &w, &err));
    if (!w) continue;
    for (int k = 0; k < N_BATCHES; k++)
      CHECK_OK(fsh_shuffle_write_rows(w, in->batch[m][k], in->part[m][k], n_parts, scratch, &err));
    for (int32_t q = 0; q < n_parts; q++) CHECK(scratch[q] == NULL);
    CHECK_OK(w->close(w, &p.maps[m].out, &err));
    stu_check_meta(&p, &p.maps[m], be->name);
  }
  for (int32_t q = 0; q < n_parts; q++) stu_check_partition(b, &p, q, NULL, 0, be->name);
  if (spill_check && strncmp(be->name, "flight", 6) == 0) {
    stu_flight *f = b->state;
    fsh_shuffle_store_stats s0, s1, s2;
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(f->workers[0]), &s0);
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(f->workers[1]), &s1);
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(f->workers[2]), &s2);
    CHECK_MSG(s0.spilled_outputs == 0 && s0.memory_bytes > 0, "%s: worker 0 spilled %lld",
              be->name, (long long)s0.spilled_outputs);
    CHECK_MSG(s1.spilled_outputs == s1.map_outputs && s1.map_outputs > 0 && s1.memory_bytes == 0,
              "%s: worker 1 (no memory) spilled %lld of %lld", be->name,
              (long long)s1.spilled_outputs, (long long)s1.map_outputs);
    CHECK_MSG(s2.spilled_outputs > 0 && s2.memory_bytes <= 64 << 10,
              "%s: worker 2 (64 KiB) spilled %lld, holds %lld bytes", be->name,
              (long long)s2.spilled_outputs, (long long)s2.memory_bytes);
  }
  CHECK_OK(fsh_shuffle_release(b, p.spec.shuffle_id, &err));
  free(scratch);
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(b);
  stu_rmdir(dir);
}

/* Synthetic batches of 1 .. MAX_ROWS rows, some sliced (offsets). */
static fsh_batch *make_synthetic(int m, int k) {
  int64_t rows = 1 + (int64_t)(stu_mix((uint64_t)(m * 7 + k)) % MAX_ROWS);
  fsh_batch *b = stu_synthetic(m * N_BATCHES + k, rows + 9);
  fsh_batch *s = STU_OK(fsh_batch_slice(b, k == 1 ? 9 : 0, rows));
  fsh_batch_unref(b);
  return s;
}

static void test_synthetic_every_backend(void) {
  input in;
  inputs(&in, make_synthetic, 13, 5);
  for (int i = 0; i < STU_N_BACKENDS; i++)
    run(&stu_backends[i], in.batch[0][0]->schema, &in, 13, true);
  inputs_free(&in);
}

/* The every-type sample, repeated: not for the builders. */
static fsh_batch *make_all_types(int m, int k) {
  fsh_error err;
  fsh_batch *one = fsh_sample_all_types(), *copies[5] = {one, one, one, one, one}, *b = NULL;
  if (fsh_concat(copies, 1 + (m + k) % 5, &b, &err) != 0) abort();
  fsh_batch_unref(one);
  return b;
}

static void test_all_types_fallback(void) {
  input in;
  inputs(&in, make_all_types, 3, 9);
  for (int i = 0; i < STU_N_BACKENDS; i++)
    run(&stu_backends[i], in.batch[0][0]->schema, &in, 3, false);
  inputs_free(&in);
}

FSH_TEST_MAIN(TEST(test_synthetic_every_backend), TEST(test_all_types_fallback))
