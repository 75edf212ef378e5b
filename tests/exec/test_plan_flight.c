/* test_plan_flight.c -- plans on the flight backend in process: in-process
 * workers (store + Flight server on loopback), map outputs placed on them
 * round-robin (fsh_plan_run_options.backends), reducers fetching the other
 * workers' outputs by DoGet. Hash repartition is checked row by row against
 * the keyed table generated in one piece (and the partition of each row
 * recomputed from its key here); a join + group-by and a distributed sort
 * against the single-process reference run. Every store must be empty
 * afterwards (each shuffle released on every worker). */
#include "test_plan_common.h"

#define N_WORKERS 3

typedef struct cluster {
  fsh_shuffle_worker *w[N_WORKERS];
  fsh_shuffle_backend *b[N_WORKERS];
  char dir[N_WORKERS][64];
} cluster;

static void cluster_start(cluster *c, int64_t memory_limit) {
  fsh_error err;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < N_WORKERS; i++) {
    strcpy(c->dir[i], "/tmp/fsh-test-planfl-XXXXXX");
    CHECK(mkdtemp(c->dir[i]) != NULL);
    const char *dirs[1] = {c->dir[i]};
    fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .spill_dirs = dirs,
                                     .n_spill_dirs = 1, .memory_limit = memory_limit};
    CHECK_OK(fsh_shuffle_worker_start(&wo, &c->w[i], &err));
    fsh_shuffle_flight_options fo = {.local = c->w[i]};
    CHECK_OK(fsh_shuffle_flight_new(&fo, &c->b[i], &err));
  }
}

/* Every store empty (released), then everything stopped. */
static void cluster_stop(cluster *c) {
  for (int i = 0; i < N_WORKERS; i++) {
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(c->w[i]), &st);
    CHECK_MSG(st.map_outputs == 0, "worker %d still holds %lld map outputs", i,
              (long long)st.map_outputs);
    fsh_shuffle_backend_destroy(c->b[i]);
    fsh_shuffle_worker_stop(c->w[i], 1000);
    CHECK(rmdir(c->dir[i]) == 0); /* no spill file left */
  }
}

static void run_on(cluster *cl, fsh_plan *p, fsh_plan_result *r) {
  fsh_error err;
  fsh_plan_run_options o = {.backends = cl->b, .n_backends = N_WORKERS, .n_threads = 2};
  CHECK_OK(fsh_plan_run(p, &o, r, &err));
  fsh_plan_result ref;
  fsh_plan_run_options ro = {.reference = true};
  CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  CHECK_OK(fsh_plan_result_compare(p, r, &ref, &err));
  fsh_plan_result_reset(&ref);
}

static void test_repartition_hash(void) {
  /* memory for everything, then nothing (every map output spilled) */
  int64_t limits[2] = {(int64_t)1 << 30, 0};
  for (int li = 0; li < 2; li++)
    for (int ci = 0; ci < N_CASES; ci++) {
      cluster cl;
      cluster_start(&cl, limits[li]);
      const scase *c = &CASES[ci];
      table_ref t;
      ref_for(c, &t);
      fsh_plan *p = make_plan(c, build_hash);
      fsh_plan_result r;
      run_on(&cl, p, &r);
      CHECK_EQ_INT(r.rows, c->rows);
      CHECK_EQ_INT(r.n_partitions, c->outputs);
      orow *rows = result_rows(&r, &t); /* each row as generated, none twice */
      for (int64_t i = 0; i < r.rows; i++) {
        int64_t id = rows[i].id;
        uint64_t h = fsh_hash_null(0);
        if (t.valid[id]) {
          fsh_field f;
          fsh_error err;
          CHECK_OK(fsh_field_init(&f, "k", FSH_TYPE_INT64, true));
          fsh_array *a = fsh_array_new(2, 0);
          a->length = 1;
          a->buffers[1] = fsh_buffer_copy(&t.key[id], 8);
          CHECK_OK(fsh_hash_array(&f, a, 0, &h, &err));
          fsh_array_unref(a);
          fsh_field_reset(&f);
        }
        CHECK_MSG(rows[i].part == fsh_partition_of_hash(h, c->outputs),
                  "case %s: id %lld in partition %d", c->name, (long long)id, rows[i].part);
      }
      free(rows);
      fsh_plan_result_reset(&r);
      fsh_plan_free(p);
      ref_free(&t);
      cluster_stop(&cl);
    }
}

static const char *JOIN_PLAN =
    "{\"partitions\": 5, \"nodes\": ["
    "{\"id\": \"f\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 20000, \"batch_rows\": "
    "1000, \"partitions\": 7, \"key_range\": 3000, \"skew\": 0.2, \"null_fraction\": 0.02},"
    "{\"id\": \"d\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 3000, \"batch_rows\": "
    "500, \"partitions\": 2, \"seed\": 5},"
    "{\"id\": \"dp\", \"op\": \"project\", \"input\": \"d\", \"columns\": [{\"name\": \"dk\", "
    "\"expr\": {\"col\": \"id\"}}, {\"name\": \"cat\", \"expr\": {\"col\": \"grp\"}}]},"
    "{\"op\": \"join\", \"left\": \"f\", \"right\": \"dp\", \"left_keys\": [\"key\"], "
    "\"right_keys\": [\"dk\"], \"type\": \"left\", \"strategy\": \"partitioned\"},"
    "{\"op\": \"aggregate\", \"keys\": [\"cat\"], \"aggs\": [{\"fn\": \"count_star\", \"name\": "
    "\"n\"}, {\"fn\": \"sum\", \"column\": \"amount\", \"name\": \"s\"}]},"
    "{\"op\": \"sort\", \"keys\": [\"cat\"]}]}";

static const char *SORT_PLAN =
    "{\"partitions\": 4, \"nodes\": ["
    "{\"op\": \"scan\", \"generate\": \"synthetic\", \"rows\": 30000, \"batch_rows\": 2048, "
    "\"partitions\": 5, \"with_nulls\": true, \"key_range\": 1000},"
    "{\"op\": \"sort\", \"keys\": [{\"column\": \"key\", \"descending\": true}, \"value\", "
    "\"name\"]}]}";

static void test_join_group_by_and_sort(void) {
  const char *plans[2] = {JOIN_PLAN, SORT_PLAN};
  int64_t want_rows[2] = {-1, 30000};
  for (int k = 0; k < 2; k++) {
    cluster cl;
    cluster_start(&cl, (int64_t)1 << 30);
    fsh_error err;
    fsh_plan *p = NULL;
    CHECK_OK(fsh_plan_from_json(plans[k], (int64_t)strlen(plans[k]), 0, &p, &err));
    fsh_plan_result r;
    run_on(&cl, p, &r);
    CHECK(r.exchanges >= 2);
    if (want_rows[k] >= 0) CHECK_EQ_INT(r.rows, want_rows[k]);
    CHECK(r.rows > 0);
    fsh_plan_result_reset(&r);
    fsh_plan_free(p);
    cluster_stop(&cl);
  }
}

static void test_null_backend_refused(void) {
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(SORT_PLAN, (int64_t)strlen(SORT_PLAN), 0, &p, &err));
  fsh_shuffle_backend *bs[2] = {NULL, NULL};
  CHECK_OK(fsh_shuffle_memory_new(&bs[0], &err));
  fsh_plan_run_options o = {.backends = bs, .n_backends = 2};
  fsh_plan_result r;
  CHECK(fsh_plan_run(p, &o, &r, &err) == EINVAL);
  CHECK(strstr(err.message, "backends[1]") != NULL);
  CHECK(r.n_batches == 0 && r.batches == NULL);
  fsh_shuffle_backend_destroy(bs[0]);
  fsh_plan_free(p);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"repartition_hash", test_repartition_hash},
      {"join_group_by_and_sort", test_join_group_by_and_sort},
      {"null_backend_refused", test_null_backend_refused},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
