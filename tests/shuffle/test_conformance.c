/* test_conformance.c -- one set of cases run against every shuffle backend
 * (stu_backends in shuffle_testutil.h: memory and fs; the flight backend
 * joins with one line there). Each case writes map tasks through the
 * backend and checks that every partition's reader returns exactly the
 * rows written to it, map output by map output, in write order.
 *
 * The flight backend with direct reads off ("flight-doget") runs in its
 * own binary, test_conformance_doget.c (which includes this file with
 * CONFORMANCE_ONLY set): the two halves stay well under the time budget
 * of one test. So does test_conformance_range.c (CONFORMANCE_RANGE set):
 * the range-reader cases, against every backend. */
#include <pthread.h>

#include "ipc/sample_batches.h"
#include "shuffle/shuffle_testutil.h"

typedef void (*case_fn)(fsh_shuffle_backend *b, const char *name, const char *dir);

/* Runs fn against a fresh instance of every backend, each with its own
 * temp directory, and checks the backend left no file behind once the
 * case released its shuffles. */
static void for_each_backend(case_fn fn) {
  for (int i = 0; i < STU_N_BACKENDS; i++) {
#if defined(CONFORMANCE_ONLY)
    if (strcmp(stu_backends[i].name, CONFORMANCE_ONLY) != 0) continue;
#elif defined(CONFORMANCE_RANGE)
    (void)0; /* every backend, flight-doget too */
#else
    if (strcmp(stu_backends[i].name, "flight-doget") == 0) continue; /* its own binary */
#endif
    char *dir = stu_mkdtemp(stu_backends[i].name);
    fsh_shuffle_backend *b = NULL;
    fsh_error err;
    CHECK_OK(stu_backends[i].make(dir, &b, &err));
    if (b) fn(b, stu_backends[i].name, dir);
    fsh_shuffle_backend_destroy(b);
    CHECK_MSG(stu_count_files(dir) == 0, "%s: %d files left in %s", stu_backends[i].name,
              stu_count_files(dir), dir);
    stu_rmdir(dir);
  }
}

/* (unused: each binary runs its share of the cases) */
#define CONFORMANCE(name)                                                   \
  static void case_##name(fsh_shuffle_backend *b, const char *bn, const char *dir); \
  __attribute__((unused)) static void name(void) { for_each_backend(case_##name); } \
  static void case_##name(fsh_shuffle_backend *b, const char *bn, const char *dir)

static void release(fsh_shuffle_backend *b, uint64_t id) {
  fsh_error err;
  CHECK_OK(fsh_shuffle_release(b, id, &err));
}

/* ---- cases ------------------------------------------------------------- */

/* Several map tasks of synthetic rows (nulls, strings) cut in chunks sent
 * to hashed partitions. */
CONFORMANCE(synthetic_rows) {
  (void)dir;
  fsh_batch *probe = stu_synthetic(0, 1);
  stu_plan p;
  stu_plan_init(&p, 11, 8, probe->schema, 3);
  for (int m = 0; m < 3; m++)
    for (int k = 0; k < 4; k++) {
      fsh_batch *x = stu_synthetic(m * 10 + k, 1000 + 37 * k);
      stu_add_split(&p.maps[m], x, 8, 1 + (m + k) % 7, false, (uint64_t)(m * 100 + k));
      fsh_batch_unref(x);
    }
  stu_run_and_check(b, &p, bn);
  release(b, 11);
  stu_plan_free(&p);
  fsh_batch_unref(probe);
}

/* Every column type of sample_batches.h (dictionaries, unions, nested
 * lists, maps, metadata) as payload, row i to partition i mod 3, under
 * each compression, with blocks small enough to make several per
 * partition. */
CONFORMANCE(every_type_every_compression) {
  (void)dir;
  fsh_batch *all = fsh_sample_all_types();
  const fsh_compression cs[] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                FSH_COMPRESSION_ZSTD};
  for (int c = 0; c < 3; c++) {
    stu_plan p;
    stu_plan_init(&p, 20 + (uint64_t)c, 3, all->schema, 2);
    p.spec.compression = cs[c];
    p.spec.target_block_bytes = c == 0 ? 0 : 4096;
    for (int m = 0; m < 2; m++)
      for (int rep = 0; rep < 5; rep++) stu_add_split(&p.maps[m], all, 3, 1, true, (uint64_t)rep);
    stu_add(&p.maps[1], 2, all); /* and a whole batch */
    stu_run_and_check(b, &p, bn);
    release(b, p.spec.shuffle_id);
    stu_plan_free(&p);
  }
  fsh_batch_unref(all);
}

/* Dictionaries that change from batch to batch within one partition (the
 * reader must apply replacements in order, block by block). */
CONFORMANCE(changing_dictionaries) {
  (void)dir;
  fsh_schema *s = fsh_sample_dict_schema();
  const char *v1[] = {"a", "b", "c"}, *v2[] = {"x", "y"}, *v3[] = {"a", "b", "c", "d"};
  fsh_array *d1 = sbh_strings(NULL, 3, v1), *d2 = sbh_strings(NULL, 2, v2),
            *d3 = sbh_strings(NULL, 4, v3);
  const int32_t i1[] = {0, 2, 1, 2}, i2[] = {1, 0, 1}, i3[] = {3, 0, 2, 1, 3};
  fsh_batch *b1 = fsh_sample_dict_batch(s, d1, 4, i1), *b2 = fsh_sample_dict_batch(s, d2, 3, i2),
            *b3 = fsh_sample_dict_batch(s, d3, 5, i3);
  for (int tiny = 0; tiny < 2; tiny++) {
    stu_plan p;
    stu_plan_init(&p, 30 + (uint64_t)tiny, 2, s, 2);
    p.spec.target_block_bytes = tiny ? 1 : 0; /* a block per batch, or one per partition */
    fsh_batch *seq[] = {b1, b2, b1, b3, b2, b3, b3, b1};
    for (int i = 0; i < 8; i++) {
      stu_add(&p.maps[0], i % 2, seq[i]);
      stu_add(&p.maps[1], 1, seq[7 - i]);
    }
    stu_run_and_check(b, &p, bn);
    release(b, p.spec.shuffle_id);
    stu_plan_free(&p);
  }
  fsh_batch_unref(b1);
  fsh_batch_unref(b2);
  fsh_batch_unref(b3);
  fsh_array_unref(d1);
  fsh_array_unref(d2);
  fsh_array_unref(d3);
  fsh_schema_unref(s);
}

/* A map task that writes nothing, between two that do. */
CONFORMANCE(empty_map_task) {
  (void)dir;
  fsh_batch *x = stu_synthetic(1, 500);
  stu_plan p;
  stu_plan_init(&p, 40, 5, x->schema, 3);
  stu_add_split(&p.maps[0], x, 5, 3, true, 0);
  stu_add_split(&p.maps[2], x, 5, 11, false, 9);
  stu_run_and_check(b, &p, bn);
  for (int32_t q = 0; q < 5; q++) CHECK_EQ_INT(p.maps[1].out.rows[q], 0);
  release(b, 40);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* Every map task empty: every partition reads empty. */
CONFORMANCE(all_inputs_empty) {
  (void)dir;
  fsh_batch *x = stu_synthetic(1, 1);
  stu_plan p;
  stu_plan_init(&p, 41, 4, x->schema, 3);
  stu_run_and_check(b, &p, bn);
  fsh_error err;
  int64_t rows = -1;
  CHECK_OK(stu_read_rc(b, &p.spec, 0, NULL, 0, &rows, &err)); /* no sources at all */
  CHECK_EQ_INT(rows, 0);
  release(b, 41);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* One partition receives every row; the others stay empty. */
CONFORMANCE(one_partition_gets_everything) {
  (void)dir;
  fsh_batch *x = stu_synthetic(2, 3000);
  stu_plan p;
  stu_plan_init(&p, 42, 16, x->schema, 2);
  for (int m = 0; m < 2; m++)
    for (int64_t off = 0; off < 3000; off += 250) {
      fsh_batch *s = fsh_batch_slice(x, off, 250);
      stu_add(&p.maps[m], 11, s);
      fsh_batch_unref(s);
    }
  stu_run_and_check(b, &p, bn);
  for (int32_t q = 0; q < 16; q++) CHECK_EQ_INT(p.maps[0].out.rows[q], q == 11 ? 3000 : 0);
  release(b, 42);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

CONFORMANCE(single_partition) {
  (void)dir;
  fsh_batch *x = stu_synthetic(3, 2000);
  fsh_batch *all = fsh_sample_all_types();
  stu_plan p;
  stu_plan_init(&p, 43, 1, x->schema, 3);
  for (int m = 0; m < 3; m++) stu_add_split(&p.maps[m], x, 1, 100 + m, true, 0);
  stu_run_and_check(b, &p, bn);
  release(b, 43);
  stu_plan_free(&p);
  fsh_batch_unref(x);
  fsh_batch_unref(all);
}

/* 4096 partitions, row i to partition i mod 4096 (a few rows each). */
CONFORMANCE(many_partitions) {
  (void)dir;
  fsh_batch *x = stu_synthetic(4, 3 * 4096 + 17);
  stu_plan p;
  stu_plan_init(&p, 44, 4096, x->schema, 2);
  stu_add_split(&p.maps[0], x, 4096, 1, true, 0);
  stu_add_split(&p.maps[1], x, 4096, 2, true, 5);
  stu_run_and_check(b, &p, bn);
  release(b, 44);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* Zero-row batches (whole and sliced) interleaved with real ones. */
CONFORMANCE(zero_row_batches) {
  (void)dir;
  fsh_batch *x = stu_synthetic(5, 300);
  fsh_batch *all = fsh_sample_all_types();
  fsh_batch *z = fsh_batch_slice(x, 100, 0), *za = fsh_batch_slice(all, 3, 0);
  fsh_batch *empty = stu_synthetic(6, 0);
  stu_plan p;
  stu_plan_init(&p, 45, 3, x->schema, 2);
  for (int i = 0; i < 6; i++) {
    stu_add(&p.maps[0], i % 3, z);
    stu_add(&p.maps[0], (i + 1) % 3, empty);
  }
  stu_add_split(&p.maps[0], x, 3, 50, true, 0);
  stu_add(&p.maps[1], 2, z); /* a map output of zero-row batches only */
  stu_run_and_check(b, &p, bn);
  for (int32_t q = 0; q < 3; q++) CHECK_EQ_INT(p.maps[1].out.rows[q], 0);
  release(b, 45);
  stu_plan_free(&p);

  stu_plan pa; /* and with the every-type schema */
  stu_plan_init(&pa, 46, 2, all->schema, 1);
  stu_add(&pa.maps[0], 1, za);
  stu_add_split(&pa.maps[0], all, 2, 1, true, 0);
  stu_add(&pa.maps[0], 0, za);
  stu_run_and_check(b, &pa, bn);
  release(b, 46);
  stu_plan_free(&pa);
  fsh_batch_unref(z);
  fsh_batch_unref(za);
  fsh_batch_unref(empty);
  fsh_batch_unref(x);
  fsh_batch_unref(all);
}

/* Attempts: a retried map task's output lives beside the first attempt's;
 * readers get exactly the attempt they name. */
CONFORMANCE(several_attempts) {
  (void)dir;
  fsh_batch *x = stu_synthetic(7, 400), *y = stu_synthetic(8, 300);
  stu_plan p;
  stu_plan_init(&p, 47, 4, x->schema, 3);
  p.maps[0].map_id = 0, p.maps[0].attempt = 0;
  p.maps[1].map_id = 0, p.maps[1].attempt = 1;
  p.maps[2].map_id = 1, p.maps[2].attempt = 2;
  stu_add_split(&p.maps[0], x, 4, 7, false, 1);
  stu_add_split(&p.maps[1], y, 4, 5, false, 2);
  stu_add_split(&p.maps[2], x, 4, 13, true, 3);
  stu_run_and_check(b, &p, bn);
  const int a1[] = {1, 2}, a0[] = {0};
  for (int32_t q = 0; q < 4; q++) {
    stu_check_partition(b, &p, q, a1, 2, bn);
    stu_check_partition(b, &p, q, a0, 1, bn);
  }
  release(b, 47);
  stu_plan_free(&p);
  fsh_batch_unref(x);
  fsh_batch_unref(y);
}

/* Readers over a subset of the map outputs, in the order given. */
CONFORMANCE(subset_of_sources) {
  (void)dir;
  fsh_batch *x = stu_synthetic(9, 600);
  stu_plan p;
  stu_plan_init(&p, 48, 6, x->schema, 4);
  for (int m = 0; m < 4; m++) stu_add_split(&p.maps[m], x, 6, 9 + m, false, (uint64_t)m);
  stu_run_and_check(b, &p, bn);
  const int sub1[] = {2, 0}, sub2[] = {3}, sub3[] = {1, 3, 2};
  for (int32_t q = 0; q < 6; q++) {
    stu_check_partition(b, &p, q, sub1, 2, bn);
    stu_check_partition(b, &p, q, sub2, 1, bn);
    stu_check_partition(b, &p, q, sub3, 3, bn);
  }
  release(b, 48);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* Block sizes from one byte (a block per batch) to larger than all data. */
CONFORMANCE(block_sizes) {
  (void)dir;
  fsh_batch *x = stu_synthetic(10, 5000);
  const int64_t targets[] = {1, 1000, 64 << 10, (int64_t)1 << 40};
  for (int t = 0; t < 4; t++) {
    stu_plan p;
    stu_plan_init(&p, 50 + (uint64_t)t, 5, x->schema, 2);
    p.spec.target_block_bytes = targets[t];
    p.spec.compression = t % 2 ? FSH_COMPRESSION_LZ4_FRAME : FSH_COMPRESSION_ZSTD;
    for (int m = 0; m < 2; m++) stu_add_split(&p.maps[m], x, 5, 17 + m, false, (uint64_t)t);
    stu_run_and_check(b, &p, bn);
    release(b, p.spec.shuffle_id);
    stu_plan_free(&p);
  }
  fsh_batch_unref(x);
}

/* Release: later reads of the shuffle fail with ENOENT naming the map
 * output; release is idempotent; other shuffles are untouched. */
CONFORMANCE(release_then_read) {
  (void)dir;
  fsh_batch *x = stu_synthetic(11, 200);
  stu_plan p, other;
  stu_plan_init(&p, 60, 2, x->schema, 2);
  stu_plan_init(&other, 61, 2, x->schema, 1);
  for (int m = 0; m < 2; m++) stu_add_split(&p.maps[m], x, 2, 10, true, 0);
  stu_add_split(&other.maps[0], x, 2, 10, true, 0);
  stu_run_and_check(b, &p, bn);
  stu_run_and_check(b, &other, bn);
  release(b, 60);
  release(b, 60);
  fsh_error err = {{0}};
  fsh_map_output src[2] = {p.maps[0].out, p.maps[1].out};
  int rc = stu_read_rc(b, &p.spec, 1, src, 2, NULL, &err);
  CHECK_MSG(rc == ENOENT, "%s: rc %d: %s", bn, rc, err.message);
  CHECK_MSG(strstr(err.message, "map 0") != NULL, "%s: %s", bn, err.message);
  for (int32_t q = 0; q < 2; q++) stu_check_partition(b, &other, q, NULL, 0, bn);
  release(b, 61);
  rc = stu_read_rc(b, &other.spec, 0, &other.maps[0].out, 1, NULL, &err);
  CHECK_MSG(rc == ENOENT, "%s: rc %d: %s", bn, rc, err.message);
  stu_plan_free(&p);
  stu_plan_free(&other);
  fsh_batch_unref(x);
}

/* An aborted writer leaves nothing: no file, nothing readable. */
CONFORMANCE(abort_leaves_nothing) {
  fsh_batch *x = stu_synthetic(12, 300);
  fsh_shuffle_spec spec = {.shuffle_id = 70, .n_partitions = 3, .schema = x->schema,
                           .target_block_bytes = 1000};
  fsh_error err;
  fsh_shuffle_writer *w = NULL;
  CHECK_OK(fsh_shuffle_open_writer(b, &spec, 5, 0, &w, &err));
  if (!w) return;
  for (int i = 0; i < 20; i++) CHECK_OK(w->write(w, i % 3, x, &err)); /* blocks written */
  w->abort(w);
  CHECK_MSG(stu_count_files(dir) == 0, "%s: %d files after abort", bn, stu_count_files(dir));
  /* a map output record the driver never got, made up to look right */
  stu_plan p;
  stu_plan_init(&p, 70, 3, x->schema, 1);
  p.maps[0].map_id = 5;
  stu_add(&p.maps[0], 0, x);
  stu_run_map(b, &p.spec, &p.maps[0], &err); /* the real one, to learn its location */
  fsh_map_output fake;
  CHECK_OK(fsh_map_output_copy(&fake, &p.maps[0].out));
  release(b, 70);
  int rc = stu_read_rc(b, &spec, 0, &fake, 1, NULL, &err);
  CHECK_MSG(rc == ENOENT, "%s: rc %d: %s", bn, rc, err.message);
  fsh_map_output_reset(&fake);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* Metadata records: copy, reset, and the dispatcher's argument checks,
 * with messages naming shuffle, map and partition. */
CONFORMANCE(argument_checks) {
  (void)dir;
  fsh_batch *x = stu_synthetic(13, 10);
  fsh_batch *all = fsh_sample_all_types();
  fsh_shuffle_spec spec = {.shuffle_id = 7, .n_partitions = 8, .schema = x->schema};
  fsh_error err = {{0}};
  fsh_shuffle_writer *w = NULL;
  CHECK_OK(fsh_shuffle_open_writer(b, &spec, 3, 0, &w, &err));
  if (!w) return;
  CHECK_EQ_INT(w->write(w, 12, x, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "shuffle 7 map 3: write to partition 12 of 8"), "%s", err.message);
  CHECK_EQ_INT(w->write(w, -1, x, &err), EINVAL);
  CHECK_EQ_INT(w->write(w, 0, all, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "schema") && strstr(err.message, "map 3"), "%s", err.message);
  CHECK_EQ_INT(w->write(w, 0, NULL, &err), EINVAL);
  CHECK_OK(w->write(w, 7, x, &err)); /* the writer still works after refused writes */
  fsh_map_output out = {0}, copy = {0};
  CHECK_OK(w->close(w, &out, &err));
  CHECK_OK(fsh_map_output_copy(&copy, &out));
  CHECK(copy.location && out.location && strcmp(copy.location, out.location) == 0);
  CHECK(copy.rows && copy.rows[7] == 10 && copy.checksums[7] == out.checksums[7]);

  fsh_shuffle_spec bad = spec;
  bad.n_partitions = 0;
  CHECK_EQ_INT(fsh_shuffle_open_writer(b, &bad, 3, 0, &w, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "n_partitions 0"), "%s", err.message);
  CHECK_EQ_INT(fsh_shuffle_open_writer(b, &spec, -1, 0, &w, &err), EINVAL);
  bad = spec;
  bad.schema = NULL;
  CHECK_EQ_INT(fsh_shuffle_open_writer(b, &bad, 3, 0, &w, &err), EINVAL);
  fsh_batch_stream s;
  CHECK_EQ_INT(fsh_shuffle_open_reader(b, &spec, 8, &out, 1, &s, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "partition 8 of 8"), "%s", err.message);
  CHECK_EQ_INT(fsh_shuffle_open_reader(b, &spec, 0, NULL, 2, &s, &err), EINVAL);
  bad = spec;
  bad.shuffle_id = 8; /* the source belongs to shuffle 7 */
  CHECK_EQ_INT(fsh_shuffle_open_reader(b, &bad, 0, &out, 1, &s, &err), EINVAL);
  CHECK_EQ_INT(fsh_shuffle_release(NULL, 7, &err), EINVAL);
  fsh_shuffle_backend_destroy(NULL);
  fsh_map_output_reset(&out);
  fsh_map_output_reset(&copy);
  fsh_map_output_reset(NULL);
  release(b, 7);
  fsh_batch_unref(x);
  fsh_batch_unref(all);
}

/* ---- range readers ----------------------------------------------------- */

/* Runs of partitions read with one range reader, checked against
 * open_reader per partition and, source by source, against the plan:
 * count 1, the whole range, runs in the middle, runs of only empty
 * partitions (13..15 get no rows), under each compression, with blocks
 * small enough to make several per partition. */
CONFORMANCE(range_reads) {
  (void)dir;
  const fsh_compression cs[] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                FSH_COMPRESSION_ZSTD};
  for (int c = 0; c < 3; c++) {
    fsh_batch *probe = stu_synthetic(0, 1);
    stu_plan p;
    stu_plan_init(&p, 200 + (uint64_t)c, 16, probe->schema, 4);
    p.spec.compression = cs[c];
    p.spec.target_block_bytes = c == 1 ? 0 : 4096;
    for (int m = 0; m < 4; m++)
      for (int k = 0; k < 3; k++) {
        fsh_batch *x = stu_synthetic(m * 10 + k, 700 + 91 * k);
        stu_add_split(&p.maps[m], x, 13, 1 + (m + k) % 5, false, (uint64_t)(m * 100 + k));
        fsh_batch_unref(x);
      }
    stu_add(&p.maps[3], 15, probe); /* map 3 alone writes 15 */
    fsh_error err = {{0}};
    for (int m = 0; m < 4; m++) CHECK_OK(stu_run_map(b, &p.spec, &p.maps[m], &err));
    const int32_t runs[][2] = {{0, 1}, {5, 1}, {0, 16}, {3, 7}, {13, 2}, {13, 3}, {15, 1}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
      stu_check_range(b, &p, runs[r][0], runs[r][1], NULL, 0, bn);
    const int some[] = {2, 0}; /* a subset, out of order */
    stu_check_range(b, &p, 1, 10, some, 2, bn);
    stu_check_range(b, &p, 0, 16, some, 0, bn); /* no sources: nothing */
    release(b, p.spec.shuffle_id);
    stu_plan_free(&p);
    fsh_batch_unref(probe);
  }
}

/* 4096 partitions: the whole range, a run of 63, the last one. */
CONFORMANCE(range_many_partitions) {
  (void)dir;
  fsh_batch *x = stu_synthetic(4, 4096 + 17);
  stu_plan p;
  stu_plan_init(&p, 210, 4096, x->schema, 2);
  stu_add_split(&p.maps[0], x, 4096, 1, true, 0);
  stu_add_split(&p.maps[1], x, 4096, 3, true, 5); /* a third of the partitions */
  fsh_error err = {{0}};
  for (int m = 0; m < 2; m++) CHECK_OK(stu_run_map(b, &p.spec, &p.maps[m], &err));
  stu_check_range(b, &p, 0, 4096, NULL, 0, bn);
  stu_check_range(b, &p, 100, 63, NULL, 0, bn);
  stu_check_range(b, &p, 4095, 1, NULL, 0, bn);
  release(b, 210);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* Runs outside the shuffle's partitions, and mismatched sources, are
 * refused before the backend sees them. */
CONFORMANCE(range_bad_ranges) {
  (void)dir;
  fsh_batch *x = stu_synthetic(7, 100);
  stu_plan p;
  stu_plan_init(&p, 220, 8, x->schema, 1);
  stu_add_split(&p.maps[0], x, 8, 3, true, 0);
  fsh_error err = {{0}};
  CHECK_OK(stu_run_map(b, &p.spec, &p.maps[0], &err));
  const int32_t bad[][2] = {{0, 0}, {-1, 2}, {7, 2}, {8, 1}, {0, 9}, {3, -1}, {1, INT32_MAX},
                            {INT32_MAX, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fsh_range_stream s = {0};
    err.message[0] = '\0';
    int rc = fsh_shuffle_open_range_reader(b, &p.spec, bad[i][0], bad[i][1], &p.maps[0].out, 1,
                                           &s, &err);
    CHECK_MSG(rc == EINVAL && s.get_next == NULL, "%s: [%d, +%d): rc %d", bn, bad[i][0],
              bad[i][1], rc);
    CHECK_MSG(strstr(err.message, "partition") != NULL, "%s: %s", bn, err.message);
  }
  fsh_range_stream s = {0};
  CHECK(fsh_shuffle_open_range_reader(b, &p.spec, 0, 1, NULL, 1, &s, &err) == EINVAL);
  CHECK(fsh_shuffle_open_range_reader(NULL, &p.spec, 0, 1, NULL, 0, &s, &err) == EINVAL);
  CHECK(fsh_shuffle_open_range_reader(b, &p.spec, 0, 1, NULL, 0, NULL, &err) == EINVAL);
  fsh_map_output other = p.maps[0].out;
  other.shuffle_id = 221;
  CHECK(fsh_shuffle_open_range_reader(b, &p.spec, 2, 3, &other, 1, &s, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "partitions [2, 5)") != NULL, "%s: %s", bn, err.message);
  other = p.maps[0].out;
  other.location = NULL;
  CHECK(fsh_shuffle_open_range_reader(b, &p.spec, 2, 3, &other, 1, &s, &err) == EINVAL);
  release(b, 220);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* A source whose recorded checksum of one partition in the middle of the
 * run disagrees with what is stored: the read fails naming that map and
 * partition (backends that verify: every one but memory, which holds the
 * batches themselves). A source that is gone mid-run (released shuffle
 * read through a second source list) fails like open_reader: ENOENT
 * naming the map. */
CONFORMANCE(range_damaged_and_lost_sources) {
  (void)dir;
  fsh_batch *x = stu_synthetic(8, 600);
  stu_plan p, gone;
  stu_plan_init(&p, 230, 8, x->schema, 3);
  stu_plan_init(&gone, 231, 8, x->schema, 1);
  for (int m = 0; m < 3; m++) stu_add_split(&p.maps[m], x, 8, 7, true, (uint64_t)m);
  stu_add_split(&gone.maps[0], x, 8, 7, true, 0);
  fsh_error err = {{0}};
  for (int m = 0; m < 3; m++) CHECK_OK(stu_run_map(b, &p.spec, &p.maps[m], &err));
  CHECK_OK(stu_run_map(b, &gone.spec, &gone.maps[0], &err));
  if (strcmp(bn, "memory") != 0) {
    fsh_map_output bad;
    CHECK_OK(fsh_map_output_copy(&bad, &p.maps[1].out));
    bad.checksums[4] ^= 1;
    fsh_map_output src[3] = {p.maps[0].out, bad, p.maps[2].out};
    int rc = stu_read_range_rc(b, &p.spec, 2, 5, src, 3, NULL, &err);
    CHECK_MSG(rc == EIO, "%s: damaged: rc %d: %s", bn, rc, err.message);
    CHECK_MSG(strstr(err.message, "map 1") && strstr(err.message, "partition 4"), "%s: %s", bn,
              err.message);
    /* outside the run the damage is not read */
    CHECK_OK(stu_read_range_rc(b, &p.spec, 5, 3, src, 3, NULL, &err));
    fsh_map_output_reset(&bad);
  }
  release(b, 231);
  fsh_map_output src[3] = {p.maps[0].out, gone.maps[0].out, p.maps[2].out};
  src[1].shuffle_id = 230; /* looks like one of 230's, but is not held */
  src[1].map_id = 7;
  if (strcmp(bn, "fs") == 0) src[1].location = "s230-m7-a0.arrows";
  int rc = stu_read_range_rc(b, &p.spec, 1, 6, src, 3, NULL, &err);
  CHECK_MSG(rc == ENOENT, "%s: lost: rc %d: %s", bn, rc, err.message);
  CHECK_MSG(strstr(err.message, "map 7") != NULL, "%s: %s", bn, err.message);
  stu_check_range(b, &p, 0, 8, NULL, 0, bn);
  release(b, 230);
  stu_plan_free(&p);
  stu_plan_free(&gone);
  fsh_batch_unref(x);
}

/* Allocation failures anywhere in open_range_reader / get_next: clean
 * ENOMEM, no leak (LSan); then the run reads whole. */
CONFORMANCE(range_allocation_failures) {
  (void)dir;
  fsh_batch *all = stu_synthetic(9, 300);
  stu_plan p;
  stu_plan_init(&p, 240, 5, all->schema, 2);
  p.spec.target_block_bytes = 2000;
  for (int m = 0; m < 2; m++) stu_add_split(&p.maps[m], all, 5, 7, true, (uint64_t)m);
  fsh_error err;
  for (int m = 0; m < 2; m++) CHECK_OK(stu_run_map(b, &p.spec, &p.maps[m], &err));
  fsh_map_output src[2] = {p.maps[0].out, p.maps[1].out};
  int rfail = 0;
  for (int64_t nth = 1; nth < 100000; nth++) {
    fsh_alloc_fail_after(nth, nth % 2 == 1);
    int rc = stu_read_range_rc(b, &p.spec, 1, 3, src, 2, NULL, &err);
    fsh_alloc_fail_after(0, false);
    if (rc == 0) break;
    rfail++;
    CHECK_MSG(rc == ENOMEM, "%s: range nth %lld: rc %d: %s", bn, (long long)nth, rc,
              err.message);
    if (rc != ENOMEM) break;
  }
  CHECK(rfail > 0);
  stu_check_range(b, &p, 1, 3, NULL, 0, bn);
  release(b, 240);
  stu_plan_free(&p);
  fsh_batch_unref(all);
}

/* Map tasks and readers on several threads at once. */
typedef struct worker {
  fsh_shuffle_backend *b;
  stu_plan *p;
  int first, step;
  int rc;
  const char *bn;
} worker;

static void *map_thread(void *arg) {
  worker *w = arg;
  fsh_error err;
  for (int m = w->first; m < w->p->n_maps; m += w->step)
    if (w->rc == 0) w->rc = stu_run_map(w->b, &w->p->spec, &w->p->maps[m], &err);
  return NULL;
}

static void *read_thread(void *arg) {
  worker *w = arg;
  for (int32_t q = w->first; q < w->p->spec.n_partitions; q += w->step)
    if (!stu_check_partition(w->b, w->p, q, NULL, 0, w->bn)) w->rc = EIO;
  return NULL;
}

CONFORMANCE(concurrent_maps_and_readers) {
  (void)dir;
  fsh_batch *x = stu_synthetic(14, 2000);
  stu_plan p;
  stu_plan_init(&p, 80, 16, x->schema, 8);
  p.spec.compression = FSH_COMPRESSION_LZ4_FRAME;
  p.spec.target_block_bytes = 8192;
  for (int m = 0; m < 8; m++) stu_add_split(&p.maps[m], x, 16, 3 + m, false, (uint64_t)m);
  pthread_t t[4];
  worker ws[4];
  for (int i = 0; i < 4; i++) {
    ws[i] = (worker){b, &p, i, 4, 0, bn};
    pthread_create(&t[i], NULL, map_thread, &ws[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ_INT(ws[i].rc, 0);
  }
  for (int i = 0; i < 4; i++) {
    ws[i] = (worker){b, &p, i, 4, 0, bn};
    pthread_create(&t[i], NULL, read_thread, &ws[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ_INT(ws[i].rc, 0);
  }
  release(b, 80);
  stu_plan_free(&p);
  fsh_batch_unref(x);
}

/* Allocation failures anywhere in open_writer / write / close, then in
 * open_reader / get_next: clean ENOMEM, no leak (LSan), no file left. */
CONFORMANCE(allocation_failures) {
  fsh_batch *all = fsh_sample_all_types();
  stu_plan p;
  stu_plan_init(&p, 90, 3, all->schema, 1);
  p.spec.target_block_bytes = 2000;
  stu_add_split(&p.maps[0], all, 3, 2, true, 0);
  stu_add(&p.maps[0], 1, all);
  fsh_error err;
  int failures = 0;
  for (int64_t nth = 1; nth < 100000; nth++) {
    fsh_alloc_fail_after(nth, nth % 2 == 0);
    int rc = stu_run_map(b, &p.spec, &p.maps[0], &err);
    fsh_alloc_fail_after(0, false);
    if (rc == 0) break;
    failures++;
    CHECK_MSG(rc == ENOMEM, "%s: nth %lld: rc %d: %s", bn, (long long)nth, rc, err.message);
    CHECK_MSG(stu_count_files(dir) == 0, "%s: nth %lld: file left", bn, (long long)nth);
    if (rc != ENOMEM) break;
  }
  CHECK_MSG(failures > 10, "%s: %d failures", bn, failures);
  int rfail = 0;
  for (int64_t nth = 1; nth < 100000; nth++) {
    fsh_alloc_fail_after(nth, nth % 2 == 1);
    int rc = stu_read_rc(b, &p.spec, 1, &p.maps[0].out, 1, NULL, &err);
    fsh_alloc_fail_after(0, false);
    if (rc == 0) break;
    rfail++;
    CHECK_MSG(rc == ENOMEM, "%s: read nth %lld: rc %d: %s", bn, (long long)nth, rc, err.message);
    if (rc != ENOMEM) break;
  }
  CHECK(rfail > 0);
  stu_check_partition(b, &p, 1, NULL, 0, bn);
  release(b, 90);
  stu_plan_free(&p);
  fsh_batch_unref(all);
}

#ifdef CONFORMANCE_RANGE
FSH_TEST_MAIN(TEST(range_reads), TEST(range_many_partitions), TEST(range_bad_ranges),
              TEST(range_damaged_and_lost_sources), TEST(range_allocation_failures))
#else
FSH_TEST_MAIN(TEST(synthetic_rows), TEST(every_type_every_compression),
              TEST(changing_dictionaries), TEST(empty_map_task), TEST(all_inputs_empty),
              TEST(one_partition_gets_everything), TEST(single_partition),
              TEST(many_partitions), TEST(zero_row_batches), TEST(several_attempts),
              TEST(subset_of_sources), TEST(block_sizes), TEST(release_then_read),
              TEST(abort_leaves_nothing), TEST(argument_checks),
              TEST(concurrent_maps_and_readers), TEST(allocation_failures))
#endif
