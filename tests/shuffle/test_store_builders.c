/* test_store_builders.c -- the partition builders of a store writer's
 * write_rows count against the store's memory budget (store.c,
 * charge_builders): while a map output is written, the store's charged
 * bytes grow by at least the bytes of the rows written so far (all still
 * in the builders: no 4 MiB block of a partition fills; a lower bound the
 * builders cannot hold less than); once closed, the charge is the image's
 * alone (about its stored bytes), once aborted nothing.
 * Idle builders (the process-wide cache) are kept when the budget has
 * room for them beside what the store holds, and dropped when it has
 * not. */
#include <stdlib.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"
#include "shuffle/store_fixture.h"

enum { PARTS = 64, ROWS = 65536, BATCHES = 4 };

static int64_t charged(fsh_shuffle_store *s) {
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(s, &st);
  return st.memory_bytes;
}

/* Writes BATCHES synthetic batches (random partitions) through a store
 * writer of map map_id; checks the charge after each; closes (or aborts)
 * it. Returns the rows' bytes written. */
static int64_t write_map(fixture *f, int64_t map_id, bool abort_it) {
  fsh_shuffle_spec spec = {.shuffle_id = 7, .n_partitions = PARTS, .schema = f->schema};
  fsh_store_writer *w = NULL;
  fsh_error err = {{0}};
  int64_t before = charged(f->s);
  fsh_shuffle_store_stats st0, st1;
  fsh_shuffle_store_get_stats(f->s, &st0);
  CHECK_OK(fsh_store_writer_open(f->s, &spec, map_id, 0, &w, &err));
  if (!w) return 0;
  int32_t *parts = STU_OK(malloc(sizeof *parts * ROWS));
  int64_t rows_bytes = 0;
  for (int i = 0; i < BATCHES; i++) {
    fsh_batch *b = stu_synthetic(map_id * BATCHES + i, ROWS);
    for (int64_t r = 0; r < ROWS; r++) parts[r] = (int32_t)(stu_mix((uint64_t)r * 31 + (uint64_t)i) % PARTS);
    CHECK_OK(fsh_store_writer_write_rows(w, b, parts, &err));
    rows_bytes += fsh_shuffle_batch_bytes(b);
    fsh_batch_unref(b);
    /* 64 partitions of 4 MiB blocks: no block is full yet, so every row
     * written is in the builders */
    int64_t now = charged(f->s);
    CHECK_MSG(now - before >= rows_bytes,
              "map %lld, batch %d: the store charges %lld bytes more than before the map, "
              "the builders hold %lld bytes of rows",
              (long long)map_id, i, (long long)(now - before), (long long)rows_bytes);
  }
  if (abort_it) {
    fsh_store_writer_abort(w);
    CHECK_MSG(charged(f->s) == before, "aborted map %lld: %lld bytes still charged, %lld before",
              (long long)map_id, (long long)charged(f->s), (long long)before);
  } else {
    fsh_map_output m = {0};
    CHECK_OK(fsh_store_writer_close(w, &m, &err));
    int64_t stored = 0;
    for (int32_t p = 0; p < m.n_partitions; p++) stored += m.bytes[p];
    int64_t image = charged(f->s) - before;
    fsh_shuffle_store_get_stats(f->s, &st1);
    bool spilled = st1.spilled_outputs != st0.spilled_outputs; /* this map or older ones */
    /* the image only (its blocks, a little index and schema): not also
     * the builders, which held every row */
    CHECK_MSG((spilled || image > stored / 2) && image < stored + ((int64_t)1 << 20),
              "closed map %lld: charge %lld for an image of %lld stored bytes (builders "
              "still charged?)", (long long)map_id, (long long)image, (long long)stored);
    fsh_map_output_reset(&m);
  }
  free(parts);
  return rows_bytes;
}

static void charged_while_writing(void) {
  fixture f = open_store("builders", (int64_t)1 << 30);
  fsh_partition_builder_cache_drop();
  write_map(&f, 0, true);
  write_map(&f, 1, false);
  /* plenty of room: the freed builder stays for the next map */
  CHECK_MSG(fsh_partition_builder_cache_bytes() > 0, "a 1 GiB budget dropped the idle builders");
  write_map(&f, 2, false);
  close_store(&f);
}

static void idle_builders_dropped_under_pressure(void) {
  /* room for the images of two maps, not for a map's builders beside them */
  fixture f = open_store("builders", (int64_t)12 << 20);
  fsh_partition_builder_cache_drop();
  int64_t rows = write_map(&f, 0, false);
  int64_t idle = fsh_partition_builder_cache_bytes();
  int64_t used = charged(f.s);
  CHECK_MSG(idle == 0 || used + idle <= ((int64_t)12 << 20),
            "12 MiB budget: %lld bytes of images charged and %lld of idle builders kept "
            "(%lld bytes of rows written)", (long long)used, (long long)idle, (long long)rows);
  write_map(&f, 1, false);
  idle = fsh_partition_builder_cache_bytes();
  used = charged(f.s);
  CHECK_MSG(idle == 0 || used + idle <= ((int64_t)12 << 20),
            "12 MiB budget, second map: %lld bytes of images charged and %lld of idle builders "
            "kept", (long long)used, (long long)idle);
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(f.s, &st);
  CHECK_MSG(st.spilled_outputs >= 1, "12 MiB budget, two maps of %lld bytes and their builders: "
            "nothing spilled", (long long)rows);
  close_store(&f);
}

FSH_TEST_MAIN(TEST(charged_while_writing), TEST(idle_builders_dropped_under_pressure))
