/* store_fixture.h -- a worker store over a fresh temporary spill
 * directory with a memory limit, and the synthetic schema, for the store
 * tests (test_store_pool, test_store_builders, test_store_vm), with their
 * common steps and checks. close_store frees the store and checks it left
 * no file behind. */
#ifndef FSH_TESTS_SHUFFLE_STORE_FIXTURE_H
#define FSH_TESTS_SHUFFLE_STORE_FIXTURE_H

#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"

typedef struct fixture {
  char *dir;
  fsh_shuffle_store *s;
  fsh_schema *schema;
} fixture;

/* A store of the given kind of memory images (open_store: VM; the
 * store's default is MEMFD). */
static inline fixture open_store_images(const char *tag, int64_t limit, fsh_store_images images) {
  fixture f = {.dir = stu_mkdtemp(tag)};
  const char *dirs[1] = {f.dir};
  fsh_shuffle_store_options o = {.spill_dirs = dirs, .n_spill_dirs = 1, .memory_limit = limit,
                                 .images = images};
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_store_new(&o, &f.s, &err));
  f.schema = STU_OK(fsh_synthetic_schema());
  return f;
}

static inline fixture open_store(const char *tag, int64_t limit) {
  return open_store_images(tag, limit, FSH_STORE_IMAGES_VM);
}

/* The store's pool and memory figures, as values. */
static inline fsh_store_pool_stats store_pool(fsh_shuffle_store *s) {
  fsh_store_pool_stats p;
  fsh_store_get_pool_stats(s, &p);
  return p;
}

static inline fsh_shuffle_store_stats store_stats(fsh_shuffle_store *s) {
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(s, &st);
  return st;
}

/* Rows of (shuffle, map, attempt 0) over its `parts` partitions, every
 * partition decoded and verified (block and partition checksums). */
static inline int64_t store_count_rows(fixture *f, uint64_t shuffle, int64_t map,
                                       int32_t parts) {
  fsh_map_file *mf = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_open(f->s, shuffle, map, 0, &mf, &err));
  int64_t rows = 0;
  for (int32_t q = 0; mf && q < parts; q++) {
    fsh_map_file_cursor *c = NULL;
    CHECK_OK(fsh_map_file_cursor_open(mf, q, &c, &err));
    for (fsh_batch *b = NULL; c;) {
      CHECK_OK(fsh_map_file_cursor_next(c, &b, &err));
      if (!b) break;
      rows += b->length;
      fsh_batch_unref(b);
    }
    fsh_map_file_cursor_free(c);
  }
  fsh_map_file_close(mf);
  return rows;
}

/* Releases a whole shuffle of the store. */
static inline void store_release(fixture *f, uint64_t shuffle) {
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_store_release(f->s, shuffle, &err));
}

/* The budget charges exactly what is held: images (memory_bytes) plus the
 * pool. `when` names the moment in the message. */
static inline void store_check_budget(fixture *f, const char *when) {
  fsh_store_pool_stats p = store_pool(f->s);
  fsh_shuffle_store_stats st = store_stats(f->s);
  CHECK_MSG(p.budget_used == st.memory_bytes + p.pooled_bytes,
            "%s: budget %lld, images %lld + pool %lld", when, (long long)p.budget_used,
            (long long)st.memory_bytes, (long long)p.pooled_bytes);
}

static inline void close_store(fixture *f) {
  fsh_shuffle_store_free(f->s);
  fsh_schema_unref(f->schema);
  CHECK_EQ_INT(stu_count_files(f->dir), 0);
  stu_rmdir(f->dir);
}

#endif
