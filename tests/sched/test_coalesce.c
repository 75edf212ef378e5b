/* test_coalesce.c -- coalesced reduces: a reduce task reading a run of
 * partitions (shuffle.h fsh_reduce_task.count) -- its body and answer
 * codecs, what it reads per partition against the map side's record (the
 * fs backend, which compares every source with it) -- and jobs whose
 * reduce stage runs one task per run (sched.h "coalesced reduces"):
 * every partition checked against an in-process reference, runs by size
 * and per slot (incremental), a lost output and a lost worker. Coalesced
 * maps (sched.h "coalesced maps"): the rule on a stage built by hand
 * (runs broken where rows are not contiguous; auto's group and its floor
 * of tasks), and jobs whose map stage runs fewer tasks than maps, checked
 * against the same reference, with the merge, and a lost worker. */
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "jobs_fixture.h"
#include "sched/job_internal.h"

/* ---- body and answer codecs --------------------------------------------- */

static char loc_a[] = "grpc://127.0.0.1:1", loc_b[] = "grpc://127.0.0.1:2";

static void body_codec(void) {
  fsh_error err;
  char *locs[2] = {loc_a, loc_b};
  fsh_reduce_source src[2] = {{.map_id = 3, .attempt = 1, .location = 0},
                              {.map_id = 9, .attempt = 0, .location = 1}};
  fsh_reduce_part parts[6];
  for (int i = 0; i < 6; i++)
    parts[i] = (fsh_reduce_part){.rows = 10 + i, .bytes = 100 + i, .checksum = 0xabc0u + i};
  /* one partition: version 1, as before (count 0 and 1 alike) */
  for (int32_t c = 0; c <= 1; c++) {
    fsh_reduce_task t = {.shuffle_id = 7, .partition = 2, .count = c, .n_partitions = 8,
                         .backend = FSH_TASK_BACKEND_FLIGHT, .n_sources = 2, .sources = src,
                         .n_locations = 2, .locations = locs};
    fsh_buffer *b = NULL;
    CHECK_OK(fsh_reduce_task_encode(&t, &b, &err));
    if (!b) continue;
    CHECK_EQ_INT(b->data[4], 1);
    fsh_reduce_task d;
    CHECK_OK(fsh_reduce_task_decode(b->data, b->size, &d, &err));
    CHECK_EQ_INT(fsh_reduce_task_count(&d), 1);
    CHECK(d.parts == NULL && d.partition == 2 && d.n_sources == 2);
    fsh_reduce_task_reset(&d);
    fsh_buffer_unref(b);
  }
  /* a run of 3 with sizes known: version 2, every part back */
  fsh_reduce_task t = {.shuffle_id = 7, .partition = 5, .count = 3, .n_partitions = 8,
                       .backend = FSH_TASK_BACKEND_FLIGHT, .n_sources = 2, .sources = src,
                       .parts = parts, .n_locations = 2, .locations = locs};
  fsh_buffer *b = NULL;
  CHECK_OK(fsh_reduce_task_encode(&t, &b, &err));
  if (b) {
    CHECK_EQ_INT(b->data[4], 2);
    fsh_reduce_task d;
    CHECK_OK(fsh_reduce_task_decode(b->data, b->size, &d, &err));
    CHECK_EQ_INT(d.count, 3);
    CHECK_EQ_INT(d.partition, 5);
    CHECK(d.parts != NULL && !d.sizes_unknown);
    for (int i = 0; d.parts && i < 6; i++)
      CHECK(d.parts[i].rows == parts[i].rows && d.parts[i].bytes == parts[i].bytes &&
            d.parts[i].checksum == parts[i].checksum);
    CHECK(d.n_locations == 2 && strcmp(d.locations[1], loc_b) == 0 && d.sources[1].map_id == 9);
    fsh_reduce_task_reset(&d);
    /* truncated: a part short */
    CHECK(fsh_reduce_task_decode(b->data, b->size - 30, &d, &err) == EINVAL);
    /* version 2 claiming one partition */
    uint8_t *x = malloc((size_t)b->size);
    memcpy(x, b->data, (size_t)b->size);
    x[36] = 1, x[37] = x[38] = x[39] = 0;
    CHECK(fsh_reduce_task_decode(x, b->size, &d, &err) == EINVAL);
    CHECK_MSG(strstr(err.message, "a run of 1 partitions"), "%s", err.message);
    /* version 1 with a count */
    memcpy(x, b->data, (size_t)b->size);
    x[4] = 1;
    CHECK(fsh_reduce_task_decode(x, b->size, &d, &err) == EINVAL);
    /* a run past the shuffle's partitions (5 + 3 > 7) */
    memcpy(x, b->data, (size_t)b->size);
    x[20] = 7;
    CHECK(fsh_reduce_task_decode(x, b->size, &d, &err) == EINVAL);
    CHECK_MSG(strstr(err.message, "past the shuffle's 7 partitions"), "%s", err.message);
    free(x);
    fsh_buffer_unref(b);
  }
  /* sizes unknown: no parts on the wire */
  t.sizes_unknown = true;
  t.parts = NULL;
  CHECK_OK(fsh_reduce_task_encode(&t, &b, &err));
  if (b) {
    fsh_reduce_task d;
    CHECK_OK(fsh_reduce_task_decode(b->data, b->size, &d, &err));
    CHECK(d.count == 3 && d.parts == NULL && d.sizes_unknown);
    fsh_reduce_task_reset(&d);
    fsh_buffer_unref(b);
  }
  /* sizes known but no parts; a run past the end */
  t.sizes_unknown = false;
  CHECK(fsh_reduce_task_encode(&t, &b, &err) == EINVAL);
  t.parts = parts;
  t.partition = 6;
  CHECK(fsh_reduce_task_encode(&t, &b, &err) == EINVAL);
}

static void answer_codec(void) {
  fsh_error err;
  int64_t rows[4] = {5, 0, 7, 9};
  uint64_t sums[4] = {11, 0, 13, 0xffffffffffffffffull};
  fsh_reduce_task_result r = {.rows = 21, .bytes = 999, .checksum = 23, .batches = 4,
                              .nanos = 77, .count = 4, .part_rows = rows, .part_checksums = sums};
  fsh_buffer *b = NULL;
  CHECK_OK(fsh_reduce_task_result_encode(&r, &b, &err));
  if (b) {
    CHECK_EQ_INT(b->size, 48 + 8 + 4 * 16);
    fsh_reduce_task_result d;
    CHECK_OK(fsh_reduce_task_result_decode(b->data, b->size, &d, &err));
    CHECK(d.count == 4 && d.rows == 21 && d.bytes == 999 && d.checksum == 23 && d.batches == 4);
    for (int32_t k = 0; k < 4 && d.count == 4; k++)
      CHECK(fsh_reduce_result_rows(&d, k) == rows[k] &&
            fsh_reduce_result_checksum(&d, k) == sums[k]);
    fsh_reduce_task_result_reset(&d);
    CHECK(fsh_reduce_task_result_decode(b->data, b->size - 16, &d, &err) == EINVAL);
    fsh_buffer_unref(b);
  }
  /* one partition: the 48-byte version 1 answer, totals are the partition's */
  fsh_reduce_task_result one = {.rows = 3, .bytes = 30, .checksum = 33, .batches = 1};
  CHECK_OK(fsh_reduce_task_result_encode(&one, &b, &err));
  if (b) {
    CHECK_EQ_INT(b->size, 48);
    fsh_reduce_task_result d;
    CHECK_OK(fsh_reduce_task_result_decode(b->data, b->size, &d, &err));
    CHECK(d.count == 0 && d.part_rows == NULL && fsh_reduce_result_rows(&d, 0) == 3 &&
          fsh_reduce_result_checksum(&d, 0) == 33);
    fsh_reduce_task_result_reset(&d);
    fsh_buffer_unref(b);
  }
  /* adding rounds of a run (incremental) */
  fsh_reduce_task_result total = {0};
  CHECK_OK(fsh_reduce_task_result_add(&total, &r, &err));
  CHECK_OK(fsh_reduce_task_result_add(&total, &r, &err));
  CHECK(total.count == 4 && total.rows == 42 && total.part_rows[2] == 14 &&
        total.part_checksums[3] == 0xfffffffffffffffeull);
  CHECK(fsh_reduce_task_result_add(&total, &one, &err) == EINVAL);
  fsh_reduce_task_result_reset(&total);
}

/* ---- a run read through the fs backend ----------------------------------- */

#define RM 4 /* maps */
#define RP 6 /* partitions */

/* The reduce task of [p, p + c) over the map outputs outs[RM] (sources
 * with a non-empty block in the run; loc[m]: map m's location, borrowed);
 * with sizes, the per-partition numbers of the record. Free sources and
 * parts. */
static fsh_reduce_task run_task(const fsh_map_task_result *outs, int32_t p, int32_t c,
                                bool sizes, char **loc) {
  fsh_reduce_task t = {.shuffle_id = 5, .partition = p, .count = c, .n_partitions = RP,
                       .backend = FSH_TASK_BACKEND_FS, .sizes_unknown = !sizes,
                       .n_locations = RM, .locations = loc};
  t.sources = calloc(RM, sizeof *t.sources);
  t.parts = sizes && c > 1 ? calloc((size_t)RM * (size_t)c, sizeof *t.parts) : NULL;
  for (int m = 0; m < RM; m++) {
    const fsh_map_output *o = &outs[m].output;
    bool any = false;
    for (int32_t k = 0; k < c; k++) any |= o->rows[p + k] > 0;
    if (!any) continue;
    for (int32_t k = 0; t.parts && k < c; k++)
      t.parts[t.n_sources * c + k] = (fsh_reduce_part){
          .rows = o->rows[p + k], .bytes = o->bytes[p + k], .checksum = o->checksums[p + k]};
    t.sources[t.n_sources++] = (fsh_reduce_source){
        .map_id = o->map_id, .attempt = o->attempt, .location = m, .rows = o->rows[p],
        .bytes = o->bytes[p], .checksum = o->checksums[p]};
  }
  return t;
}

static void run_reads_each_partition(void) {
  fsh_error err;
  char dir[] = "/tmp/fsh-coalesce-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  fsh_shuffle_backend *fs = NULL;
  CHECK_OK(fsh_shuffle_fs_new(dir, &fs, &err));
  if (!fs) return;
  fsh_map_task_result outs[RM];
  int64_t want_rows[RP] = {0};
  uint64_t want_sums[RP] = {0};
  for (int m = 0; m < RM; m++) {
    fsh_map_task mt = {.shuffle_id = 5, .map_id = m, .n_partitions = RP, .first_row = m * 3000,
                       .rows = 3000, .batch_rows = 500, .seed = 3,
                       .backend = FSH_TASK_BACKEND_FS};
    CHECK_OK(fsh_map_task_run(fs, &mt, &outs[m], &err));
    for (int32_t p = 0; p < RP; p++) { /* the reference: what the maps wrote */
      want_rows[p] += outs[m].output.rows[p];
      want_sums[p] += outs[m].row_checksums[p];
    }
  }
  char *loc[RM];
  for (int m = 0; m < RM; m++) loc[m] = (char *)outs[m].output.location;
  /* runs with and without sizes, one partition and the whole shuffle */
  const int32_t runs[][2] = {{1, 3}, {0, RP}, {4, 1}, {5, 1}};
  for (int s = 0; s < 2; s++) {
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
      int32_t p = runs[i][0], c = runs[i][1];
      fsh_reduce_task t = run_task(outs, p, c, s == 1, loc);
      fsh_reduce_task_result r = {0};
      CHECK_OK(fsh_reduce_task_run(fs, &t, &r, &err));
      CHECK_EQ_INT(r.count, c > 1 ? c : 0);
      if (r.count != (c > 1 ? c : 0)) break;
      int64_t rows = 0;
      for (int32_t k = 0; k < c; k++) {
        CHECK_EQ_INT(fsh_reduce_result_rows(&r, k), want_rows[p + k]);
        CHECK(fsh_reduce_result_checksum(&r, k) == want_sums[p + k]);
        rows += want_rows[p + k];
      }
      CHECK_EQ_INT(r.rows, rows);
      fsh_reduce_task_result_reset(&r);
      /* through the wire and back: the same */
      fsh_buffer *b = NULL;
      CHECK_OK(fsh_reduce_task_encode(&t, &b, &err));
      fsh_reduce_task d = {0};
      if (b) CHECK_OK(fsh_reduce_task_decode(b->data, b->size, &d, &err));
      r = (fsh_reduce_task_result){0};
      CHECK_OK(fsh_reduce_task_run(fs, &d, &r, &err));
      CHECK_EQ_INT(r.rows, rows);
      fsh_reduce_task_result_reset(&r);
      fsh_reduce_task_reset(&d);
      fsh_buffer_unref(b);
      free(t.sources);
      free(t.parts);
    }
  }
  /* a part that does not match the record: the reader says which partition */
  fsh_reduce_task t = run_task(outs, 1, 3, true, loc);
  t.parts[1 * 3 + 2].rows += 1; /* source 1, partition 3 */
  fsh_reduce_task_result r;
  int rc = fsh_reduce_task_run(fs, &t, &r, &err);
  char want[64];
  snprintf(want, sizeof want, "map %lld attempt 0 partition 3:", (long long)t.sources[1].map_id);
  CHECK(rc != 0);
  CHECK_MSG(rc != 0 && strstr(err.message, "partitions 1 .. 3") && strstr(err.message, want),
            "%s", err.message);
  free(t.sources);
  free(t.parts);
  for (int m = 0; m < RM; m++) fsh_map_task_result_reset(&outs[m]);
  CHECK_OK(fsh_shuffle_release(fs, 5, &err));
  fsh_shuffle_backend_destroy(fs);
  rmdir(dir);
}

/* ---- jobs ------------------------------------------------------------------ */

/* The job's reduce stage ran n tasks (the runs), each done. */
static int32_t reduce_tasks(const fsh_sched_job_status *s) {
  if (s->n_stages < 2) return -1;
  const fsh_sched_stage_status *x = &s->stages[s->n_stages - 1];
  CHECK_EQ_INT(x->tasks_done, x->tasks_total);
  return x->tasks_total;
}

/* By size (auto): at least a task per slot (3 workers x 2), far fewer
 * than the 16 partitions; every partition equals the reference. */
static void job_with_runs(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  wait_alive(&c, N_WORKERS); /* the slots the runs are sized by */
  fsh_sched_shuffle_job j = JOB;
  j.maps = 8;
  j.reduces = 16;
  j.rows = 8 * 4000;
  j.reduce_task_bytes = -1; /* auto */
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c.d), NULL, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  int32_t n = reduce_tasks(&s);
  CHECK_MSG(n >= 2 * N_WORKERS && n < j.reduces, "%d reduce tasks", n);
  CHECK(s.stages[1].rows == j.rows);
  fsh_sched_job_status_reset(&s);
  /* 0: a task per partition, as before */
  j.reduce_task_bytes = 0;
  id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  check_job(&j, &s);
  CHECK_EQ_INT(reduce_tasks(&s), j.reduces);
  fsh_sched_job_status_reset(&s);
  /* with the pre-shuffle merge: the runs are chosen once nothing is held */
  j.reduce_task_bytes = -1;
  j.merge = FSH_SCHED_MERGE_ON;
  id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  CHECK(s.merges >= 1);
  n = reduce_tasks(&s);
  CHECK_MSG(n >= 2 * N_WORKERS && n < j.reduces, "%d reduce tasks", n);
  fsh_sched_job_status_reset(&s);
  /* a two-shuffle job: the last stage (reading the reduce-then-map
   * outputs) runs by runs; every one of its partitions verified */
  j.merge = FSH_SCHED_MERGE_OFF;
  j.then_reduces = 14;
  j.then_key = 2;
  id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED && s.verified, "%s", s.error ? s.error : "?");
  CHECK_EQ_INT(s.n_partitions, 14);
  int64_t rows = 0;
  for (int32_t p = 0; p < s.n_partitions; p++) {
    CHECK(s.partitions[p].reduce_rows == s.partitions[p].map_rows &&
          s.partitions[p].reduce_checksum == s.partitions[p].map_checksum);
    rows += s.partitions[p].reduce_rows;
  }
  CHECK_EQ_INT(rows, j.rows);
  n = reduce_tasks(&s);
  CHECK_MSG(n >= 2 * N_WORKERS && n < 14, "%d reduce tasks", n);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* Incremental: sizes unknown when the reduces start, so a run per slot
 * (3 workers x 2: every worker registered before the job, since the runs
 * are chosen by the workers alive when the first map output exists);
 * they start before the last map output. */
static void incremental_job_with_runs(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  wait_alive(&c, N_WORKERS);
  fsh_sched_shuffle_job j = JOB;
  j.incremental = true;
  j.maps = 30;
  j.reduces = 16;
  j.rows = 30 * 4000;
  j.reduce_task_bytes = -1;
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 25000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  CHECK_EQ_INT(reduce_tasks(&s), 2 * N_WORKERS);
  CHECK_MSG(s.first_reduce_start_s < s.last_map_output_s, "first fetch %.3f s, last map %.3f s",
            s.first_reduce_start_s, s.last_map_output_s);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* A live worker's output of map 2 is dropped once written: exactly that map
 * is recomputed, the run tasks that read it retried (none other: each
 * retried one reads a partition map 2 wrote to), every worker stays
 * alive, every partition equals the reference. */
static void lost_output_retries_runs(void) {
  fsh_error err;
  for (int inc = 0; inc < 2; inc++) {
    cluster c;
    start_cluster(&c, 3000, true);
    fsh_sched_shuffle_job j = JOB;
    j.maps = 6;
    j.reduces = 12;
    j.rows = 6 * 5000;
    j.incremental = inc == 1;
    j.reduce_task_bytes = -1;
    atomic_store(&drop_map, 2);
    uint64_t id = submit(&c, &j);
    CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 30000, &err));
    CHECK_EQ_INT(atomic_load(&drop_map), -1);
    atomic_store(&drop_map, -1);
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
    CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
    check_job(&j, &s);
    int32_t n = reduce_tasks(&s);
    CHECK_MSG(n >= 1 && n < j.reduces, "%d reduce tasks", n);
    check_only_recomputed(&s, 1, 2, "on live worker", "reported missing");
    CHECK(s.n_retried >= 1);
    for (int32_t i = 0; i < s.n_retried; i++)
      CHECK_MSG(s.retried[i].stage_id == 2 && s.retried[i].task < n, "retried stage %u task %d",
                s.retried[i].stage_id, s.retried[i].task);
    fsh_sched_job_status_reset(&s);
    check_all_alive(&c);
    stop_cluster(&c);
  }
}

/* Runs j (slots_per_worker 1) on a new cluster whose worker holding most
 * map outputs is declared dead while the maps run: the job succeeds with
 * every partition equal to the reference, and its recomputed tasks are of
 * the map stage (below n_map_tasks, the stage's task count), each once,
 * each naming the victim. *s: its status (the caller resets it). */
static void run_losing_a_worker(const fsh_sched_shuffle_job *j, int32_t n_map_tasks,
                                fsh_sched_job_status *s) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, false);
  start_workers(&c);
  uint64_t id = submit(&c, j);
  const char *victim = declare_busiest_dead(&c, id, NULL);
  CHECK(victim != NULL);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, s, &err));
  CHECK_MSG(s->state == FSH_SCHED_JOB_SUCCEEDED, "%s", s->error ? s->error : "?");
  check_job(j, s);
  CHECK(s->n_recomputed >= 1);
  for (int32_t i = 0; i < s->n_recomputed; i++) {
    CHECK_EQ_INT(s->recomputed[i].stage_id, 1);
    CHECK(s->recomputed[i].task < n_map_tasks);
    CHECK(victim && strstr(s->recomputed[i].reason, victim) != NULL);
    for (int32_t k = i + 1; k < s->n_recomputed; k++)
      CHECK(s->recomputed[i].task != s->recomputed[k].task);
  }
  stop_cluster(&c);
}

/* A worker holding map outputs is declared dead while the maps run: its
 * maps are recomputed (each once, each naming it), the runs verify. */
static void lost_worker_with_runs(void) {
  fsh_sched_shuffle_job j = JOB;
  j.slots_per_worker = 1;
  j.maps = 24;
  j.reduces = 12;
  j.rows = 24 * 20000;
  j.batch_rows = 5000;
  j.reduce_task_bytes = -1;
  fsh_sched_job_status s;
  run_losing_a_worker(&j, j.maps, &s);
  int32_t n = reduce_tasks(&s);
  CHECK_MSG(n >= 1 && n < j.reduces, "%d reduce tasks", n);
  fsh_sched_job_status_reset(&s);
}

/* ---- coalesced maps ------------------------------------------------------ */

/* A KIND_MAP stage of 10 maps of 300 rows (batches of 100) over 8
 * partitions, contiguous but for: a gap of 100 rows before map 4, map 7
 * of another seed (another table), map 8 of 250 rows (a partial batch:
 * nothing can follow it). */
static void map_stage(jstage *st, fsh_map_task *maps) {
  int64_t first = 0;
  for (int32_t i = 0; i < 10; i++) {
    if (i == 4) first += 100;
    maps[i] = (fsh_map_task){.map_id = i, .n_partitions = 8, .first_row = first,
                             .rows = i == 8 ? 250 : 300, .batch_rows = 100,
                             .seed = i == 7 ? 6 : 5, .backend = FSH_TASK_BACKEND_FLIGHT};
    first += maps[i].rows;
  }
  *st = (jstage){.kind = KIND_MAP, .n_tasks = 10, .maps = maps};
}

static void check_run(const jstage *st, int32_t t, int64_t first, int64_t rows, uint64_t seed) {
  CHECK_MSG(st->maps[t].map_id == t && st->maps[t].first_row == first &&
                st->maps[t].rows == rows && st->maps[t].seed == seed,
            "run %d: map %" PRId64 " rows [%" PRId64 ", +%" PRId64 ") seed %" PRIu64, t,
            st->maps[t].map_id, st->maps[t].first_row, st->maps[t].rows, st->maps[t].seed);
}

static void map_runs_rule(void) {
  sched_job j = {.merge_threshold = 4};
  jstage st;
  fsh_map_task maps[10];
  /* runs of 3: [0 1 2] [3] | gap | [4 5 6] | [7] other seed | [8] partial | [9] */
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, 3, 6);
  CHECK_EQ_INT(st.n_tasks, 6);
  CHECK_EQ_INT(st.plan_maps, 10);
  CHECK(!st.map_runs_auto);
  check_run(&st, 0, 0, 900, 5);
  check_run(&st, 1, 900, 300, 5);
  check_run(&st, 2, 1300, 900, 5);
  check_run(&st, 3, 2200, 300, 6);
  check_run(&st, 4, 2500, 250, 5);
  check_run(&st, 5, 2750, 300, 5);
  CHECK(st.maps[2].batch_rows == 100 && st.maps[2].n_partitions == 8);
  /* 0 and 1: a task per map */
  for (int32_t g = 0; g <= 1; g++) {
    map_stage(&st, maps);
    fsh_job_coalesce_maps(&j, &st, g, 6);
    CHECK_EQ_INT(st.n_tasks, 10);
    CHECK_EQ_INT(st.plan_maps, 0);
    check_run(&st, 9, 2750, 300, 5);
  }
  /* auto, sqrt(10 x 8) > 4: G = ceil(80 / 16) = 5, floored to 10 / (2
   * waves x 2 slots) = 2: [0 1] [2 3] | [4 5] [6] | [7] | [8] | [9] */
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, -1, 2);
  CHECK_EQ_INT(st.n_tasks, 7);
  CHECK(st.map_runs_auto);
  check_run(&st, 1, 600, 600, 5);
  check_run(&st, 3, 1900, 300, 5);
  /* auto with one slot: G = 5 (10 / 5 = 2 tasks = 2 waves of 1 slot):
   * [0 1 2 3] | [4 5 6] | [7] | [8] | [9] */
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, -1, 1);
  CHECK_EQ_INT(st.n_tasks, 5);
  check_run(&st, 0, 0, 1200, 5);
  /* auto under the threshold, or more slots than maps: as they are */
  j.merge_threshold = 9;
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, -1, 1);
  CHECK_EQ_INT(st.n_tasks, 10);
  j.merge_threshold = 4;
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, -1, 64);
  CHECK_EQ_INT(st.n_tasks, 10);
  CHECK_EQ_INT(st.plan_maps, 0);
  /* auto with no worker alive at submit (slots unknown): as they are; a
   * given G still applies */
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, -1, 0);
  CHECK_EQ_INT(st.n_tasks, 10);
  map_stage(&st, maps);
  fsh_job_coalesce_maps(&j, &st, 3, 0);
  CHECK_EQ_INT(st.n_tasks, 6);
}

/* The job's map stage ran n tasks, each done, and read every row. */
static int32_t map_tasks(const fsh_sched_job_status *s, int64_t rows) {
  const fsh_sched_stage_status *x = &s->stages[0];
  CHECK_EQ_INT(x->tasks_done, x->tasks_total);
  CHECK_EQ_INT(s->input_rows, rows);
  return x->tasks_total;
}

/* Runs of 4 and of 5 maps, auto (with its merge off) and auto with the
 * merge on: fewer map tasks, every partition equal to the reference of
 * the maps one by one. */
static void job_with_map_runs(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  wait_alive(&c, N_WORKERS); /* auto's floor of tasks: 2 x 3 workers x 2 slots */
  fsh_sched_shuffle_job j = JOB;
  j.maps = 12;
  j.rows = 12 * 3000; /* 3 batches a map */
  const int32_t per[2] = {4, 5}, want[2] = {3, 3};
  for (int i = 0; i < 2; i++) {
    j.maps_per_task = per[i];
    uint64_t id = submit(&c, &j);
    CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
    CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
    check_job(&j, &s);
    CHECK_EQ_INT(map_tasks(&s, j.rows), want[i]);
    fsh_sched_job_status_reset(&s);
  }
  /* auto: 48 maps x 5 partitions, threshold 4: G = 15, floored to 48 / 12
   * = 4; the stage does not merge (auto), or merges its 12 outputs (on) */
  j.maps = 48;
  j.rows = 48 * 2000;
  j.maps_per_task = -1;
  j.merge_threshold = 4;
  for (int on = 0; on < 2; on++) {
    j.merge = on ? FSH_SCHED_MERGE_ON : FSH_SCHED_MERGE_AUTO;
    uint64_t id = submit(&c, &j);
    CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
    CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
    check_job(&j, &s);
    CHECK_EQ_INT(map_tasks(&s, j.rows), 12);
    CHECK_MSG(on ? s.merges >= 1 : s.merges == 0, "%" PRId64 " merges", s.merges);
    fsh_sched_job_status_reset(&s);
  }
  stop_cluster(&c);
}

/* A worker holding outputs of map runs is declared dead while the maps
 * run: its runs are recomputed (each once, each naming it), the job
 * verifies. */
static void lost_worker_with_map_runs(void) {
  fsh_sched_shuffle_job j = JOB;
  j.slots_per_worker = 1;
  j.maps = 48;
  j.reduces = 12;
  j.rows = 48 * 10000;
  j.batch_rows = 5000;
  j.maps_per_task = 4;
  fsh_sched_job_status s;
  run_losing_a_worker(&j, 12, &s);
  CHECK_EQ_INT(map_tasks(&s, j.rows), 12);
  fsh_sched_job_status_reset(&s);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"body_codec", body_codec},
      {"answer_codec", answer_codec},
      {"run_reads_each_partition", run_reads_each_partition},
      {"job_with_runs", job_with_runs},
      {"incremental_job_with_runs", incremental_job_with_runs},
      {"lost_output_retries_runs", lost_output_retries_runs},
      {"lost_worker_with_runs", lost_worker_with_runs},
      {"map_runs_rule", map_runs_rule},
      {"job_with_map_runs", job_with_map_runs},
      {"lost_worker_with_map_runs", lost_worker_with_map_runs},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof *cases), argc, argv);
}
