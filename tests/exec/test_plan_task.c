/* test_plan_task.c -- plan-fragment tasks (exec.h) against fsh_plan_run in
 * process. A small driver here runs every stage of an example plan as
 * plan-fragment tasks (bodies encoded and decoded on the way) over the
 * memory and fs backends: each task's inputs are the map outputs the
 * earlier stages' tasks answered. The result (read back from the result
 * shuffle) must equal the single-process reference run, and every
 * partition of the result shuffle the row checksums the tasks answered
 * (the test recomputes them from the rows read, over every column, with
 * plan_checksum_ref.h). Range and
 * into_partitions exchanges run as a staging and a scatter stage. Malformed
 * bodies are refused with EINVAL naming what is wrong. A task whose cancel
 * flag is set stops at its next batch (ECANCELED, its writer aborted), a
 * batch its scan gives included. */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/exec.h>

#include "../test.h"
#include "plan_checksum_ref.h"
#include "plan_examples.h"

/* What one job stage's tasks answered. */
typedef struct stage_out {
  const fsh_sched_plan_stage *st;
  fsh_map_task_result *r; /* [n_tasks] */
  int64_t *rows;          /* [n_partitions]: rows its tasks wrote there */
} stage_out;

/* The reduce-verify sources of partition `part` of stage s's output. */
static void sources_of(const stage_out *s, int32_t part, fsh_task_backend backend,
                       fsh_reduce_task *t) {
  int32_t n = s->st->n_tasks;
  t->shuffle_id = s->r[0].output.shuffle_id;
  t->partition = part;
  t->n_partitions = s->st->n_partitions;
  t->backend = backend;
  t->n_sources = n;
  t->sources = calloc((size_t)n, sizeof *t->sources);
  t->locations = calloc((size_t)n, sizeof *t->locations);
  t->n_locations = n;
  for (int32_t m = 0; m < n; m++) {
    const fsh_map_output *o = &s->r[m].output;
    t->locations[m] = o->location;
    t->sources[m] = (fsh_reduce_source){.map_id = o->map_id, .attempt = o->attempt,
                                        .location = m, .rows = o->rows[part],
                                        .bytes = o->bytes[part], .checksum = o->checksums[part]};
  }
}

static void sources_free(fsh_reduce_task *t) {
  free(t->sources);
  free(t->locations);
  memset(t, 0, sizeof *t);
}

/* The body of task `task` of job stage s (through encode and decode), as
 * the driver builds it: each input's partition `task` (0 of a 1-partition
 * one); a scatter's side input (the staged samples) and row counts. */
static void task_of(int s, stage_out *outs, int32_t task, int32_t attempt,
                    fsh_task_backend backend, fsh_fragment_task *decoded) {
  fsh_error err;
  const fsh_sched_plan_stage *st = outs[s].st;
  fsh_fragment_task t = {.fragment = (fsh_buffer *)st->fragment, .task = task,
                         .n_tasks = st->n_tasks, .shuffle_id = 1000 + (uint64_t)s,
                         .map_id = task, .attempt = attempt,
                         .compression = task % 2 ? FSH_COMPRESSION_LZ4_FRAME
                                                 : FSH_COMPRESSION_NONE,
                         .backend = backend, .n_inputs = st->n_inputs};
  fsh_fragment_task_input in[FSH_PLAN_STAGE_MAX_INPUTS];
  t.inputs = in;
  for (int i = 0; i < t.n_inputs; i++) {
    const stage_out *src = &outs[st->input_stages[i]];
    int32_t part = src->st->n_partitions == 1 ? 0 : task;
    in[i].node = st->input_nodes[i];
    memset(&in[i].read, 0, sizeof in[i].read);
    sources_of(src, part, backend, &in[i].read);
  }
  if (st->scatter) {
    const stage_out *src = &outs[st->input_stages[0]];
    t.has_side = true;
    sources_of(src, src->st->n_partitions - 1, backend, &t.side);
    t.n_counts = st->n_tasks;
    t.counts = src->rows;
  }
  fsh_buffer *body = NULL;
  CHECK_OK(fsh_fragment_task_encode(&t, &body, &err));
  CHECK_OK(fsh_fragment_task_decode(body->data, body->size, decoded, &err));
  fsh_buffer *again = NULL;
  CHECK_OK(fsh_fragment_task_encode(decoded, &again, &err));
  CHECK(again->size == body->size && memcmp(again->data, body->data, (size_t)body->size) == 0);
  fsh_buffer_unref(again);
  fsh_buffer_unref(body);
  for (int i = 0; i < t.n_inputs; i++) sources_free(&in[i].read);
  if (t.has_side) sources_free(&t.side);
}

/* Every partition of the result stage's output read back: its rows and
 * checksum equal the sums of what the tasks answered; the batches go to
 * res (partition after partition). */
static void check_output(fsh_shuffle_backend *b, const fsh_plan *p, stage_out *s,
                         fsh_plan_result *res) {
  fsh_error err;
  int32_t R = s->st->n_partitions, n = s->st->n_tasks;
  fsh_map_output *outs = calloc((size_t)n, sizeof *outs);
  for (int32_t m = 0; m < n; m++) outs[m] = s->r[m].output;
  fsh_batch_stream st;
  for (int32_t part = 0; part < R; part++) {
    int64_t want_rows = 0;
    uint64_t want_sum = 0;
    for (int32_t m = 0; m < n; m++) {
      want_rows += s->r[m].output.rows[part];
      want_sum += s->r[m].row_checksums[part];
    }
    fsh_shuffle_spec spec = {.shuffle_id = outs[0].shuffle_id, .n_partitions = R,
                             .schema = fsh_plan_schema(p)};
    CHECK_OK(fsh_shuffle_open_reader(b, &spec, part, outs, n, &st, &err));
    int64_t rows = 0;
    uint64_t sum = 0;
    for (;;) {
      fsh_batch *x = NULL;
      CHECK_OK(st.get_next(&st, &x, &err));
      if (!x) break;
      rows += x->length;
      sum += pcr_checksum(x);
      if (x->length > 0) {
        res->batches = realloc(res->batches, (size_t)(res->n_batches + 1) * sizeof *res->batches);
        res->batches[res->n_batches++] = x;
        res->partition_batches[part]++;
        res->rows += x->length;
      } else {
        fsh_batch_unref(x);
      }
    }
    st.release(&st);
    CHECK_MSG(rows == want_rows, "stage output partition %d: %lld rows read, %lld answered",
              part, (long long)rows, (long long)want_rows);
    CHECK_MSG(sum == want_sum, "stage output partition %d: row checksum differs", part);
  }
  free(outs);
}

/* Runs plan p as plan-fragment tasks over backend b (its job stages, in
 * order, every task after the stages it reads); *res: its result;
 * *n_checked: the reads (read to their end) compared with what was written. */
static void run_tasks(const fsh_plan *p, fsh_shuffle_backend *b, fsh_task_backend kind,
                      fsh_plan_result *res, int64_t *n_checked) {
  fsh_error err;
  fsh_plan_job_stages js;
  memset(res, 0, sizeof *res);
  CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
  int n = js.n;
  int64_t checked_reads = 0;
  stage_out *outs = calloc((size_t)(n ? n : 1), sizeof *outs);
  for (int s = 0; s < n; s++) {
    const fsh_sched_plan_stage *st = &js.stages[s];
    outs[s].st = st;
    for (int i = 0; i < st->n_inputs; i++)
      CHECK(st->input_stages[i] >= 0 && st->input_stages[i] < s);
    outs[s].r = calloc((size_t)st->n_tasks, sizeof *outs[s].r);
    outs[s].rows = calloc((size_t)st->n_partitions, sizeof *outs[s].rows);
    for (int32_t t = 0; t < st->n_tasks; t++) {
      fsh_fragment_task task;
      task_of(s, outs, t, 0, kind, &task);
      fsh_fragment_read *reads = NULL;
      int32_t n_reads = 0;
      int rc = fsh_plan_task_run(b, &task, NULL, &outs[s].r[t], &reads, &n_reads, &err);
      CHECK_MSG(rc == 0, "stage %d task %d: %s", s, t, err.message);
      fsh_fragment_task_reset(&task);
      /* what it read of an input, when read to its end, is what was
       * written into the partition it reads */
      CHECK(rc != 0 || n_reads == st->n_inputs + (st->scatter && reads[n_reads - 1].node == -1));
      for (int32_t i = 0; rc == 0 && i < n_reads; i++) {
        int k = 0;
        while (k < st->n_inputs && reads[i].node != -1 && st->input_nodes[k] != reads[i].node) k++;
        CHECK(k < st->n_inputs || reads[i].node == -1);
        const stage_out *src = &outs[st->input_stages[reads[i].node == -1 ? 0 : k]];
        int32_t part = reads[i].node == -1 ? src->st->n_partitions - 1
                       : src->st->n_partitions == 1 ? 0 : t;
        uint64_t sum = 0;
        for (int32_t m = 0; m < src->st->n_tasks; m++) sum += src->r[m].row_checksums[part];
        if (!reads[i].complete) continue;
        checked_reads++;
        CHECK_MSG(reads[i].rows == src->rows[part] && reads[i].checksum == sum,
                  "stage %d task %d read %lld rows of input node %d partition %d, %lld written",
                  s, t, (long long)reads[i].rows, reads[i].node, part,
                  (long long)src->rows[part]);
      }
      fsh_free(reads);
      for (int32_t q = 0; rc == 0 && q < st->n_partitions; q++)
        outs[s].rows[q] += outs[s].r[t].output.rows[q];
      /* a staging task answers the rows of its input and its sample --
       * staged or not (recomputed): the rows its scatter task writes */
      if (rc == 0 && st->scatter && s > 0) {
        const fsh_map_task_result *sg = &outs[s - 1].r[t];
        int64_t wrote = 0;
        for (int32_t q = 0; q < st->n_partitions; q++) wrote += outs[s].r[t].output.rows[q];
        int32_t last = outs[s - 1].st->n_partitions - 1;
        CHECK_MSG(sg->input_rows - sg->output.rows[last] == wrote,
                  "stage %d task %d: its staging task answered %lld input rows (%lld sampled), "
                  "it wrote %lld%s", s, t, (long long)sg->input_rows,
                  (long long)sg->output.rows[last], (long long)wrote,
                  js.recomputed[s] ? " (recomputed)" : "");
      }
    }
  }
  *n_checked = checked_reads;
  /* the result: the last stage's output partitions, in order (its
   * exchange's when the plan ends in one) */
  stage_out *last = &outs[n - 1];
  CHECK(last->st->result);
  res->n_partitions = last->st->n_partitions;
  res->partition_batches = calloc((size_t)res->n_partitions, sizeof *res->partition_batches);
  res->schema = fsh_schema_ref(fsh_plan_schema(p));
  check_output(b, p, last, res);
  for (int s = 0; s < n; s++) {
    CHECK_OK(fsh_shuffle_release(b, 1000 + (uint64_t)s, &err));
    for (int32_t t = 0; t < outs[s].st->n_tasks; t++) fsh_map_task_result_reset(&outs[s].r[t]);
    free(outs[s].r);
    free(outs[s].rows);
  }
  free(outs);
  fsh_plan_job_stages_free(&js);
}

static void result_free(fsh_plan_result *r) {
  for (int64_t i = 0; i < r->n_batches; i++) fsh_batch_unref(r->batches[i]);
  free(r->batches);
  free(r->partition_batches);
  fsh_schema_unref(r->schema);
  memset(r, 0, sizeof *r);
}

/* A partitioned join + two-phase group-by (join_group_by.json without
 * its final sort, which needs a range exchange). */
static const char join_group_by[] =
    "{\"partitions\": 4, \"nodes\": ["
    "{\"id\": \"facts\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 60000, "
    "\"batch_rows\": 4096, \"partitions\": 5, \"key_range\": 5000, \"skew\": 0.05, "
    "\"null_fraction\": 0.01, \"seed\": 1},"
    "{\"id\": \"dims\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 5000, "
    "\"batch_rows\": 1024, \"partitions\": 2, \"key_range\": 5000, \"seed\": 2, \"groups\": 8},"
    "{\"id\": \"dims_p\", \"op\": \"project\", \"input\": \"dims\", \"columns\": ["
    "{\"name\": \"dkey\", \"expr\": {\"col\": \"id\"}}, {\"name\": \"category\", "
    "\"expr\": {\"col\": \"grp\"}}]},"
    "{\"id\": \"j\", \"op\": \"join\", \"left\": \"facts\", \"right\": \"dims_p\", "
    "\"left_keys\": [\"key\"], \"right_keys\": [\"dkey\"], \"type\": \"inner\", "
    "\"strategy\": \"partitioned\"},"
    "{\"op\": \"filter\", \"predicate\": {\"op\": \">\", \"args\": [{\"col\": \"amount\"}, "
    "{\"lit\": 100}]}},"
    "{\"op\": \"aggregate\", \"keys\": [\"category\"], \"aggs\": [{\"fn\": \"count_star\", "
    "\"name\": \"n\"}, {\"fn\": \"sum\", \"column\": \"amount\", \"name\": \"total\"}, "
    "{\"fn\": \"count_distinct\", \"column\": \"key\", \"name\": \"keys\"}]}"
    "]}";

/* Runs p both ways and compares; name for messages. */
static void check_plan(const char *name, fsh_plan *p, fsh_shuffle_backend *b,
                       fsh_task_backend kind) {
  fsh_error err;
  fsh_plan_result ref, got;
  fsh_plan_run_options ro = {.reference = true};
  CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  int64_t checked = 0;
  run_tasks(p, b, kind, &got, &checked);
  /* the tasks read their inputs to the end (but where a limit stops them) */
  CHECK_MSG(fsh_plan_stage_count(p) == 1 || checked > 0 || strstr(name, "limit"),
            "%s: no read compared", name);
  int rc = fsh_plan_result_compare(p, &got, &ref, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  CHECK_MSG(got.rows == ref.rows, "%s: %lld rows, reference %lld", name, (long long)got.rows,
            (long long)ref.rows);
  result_free(&got);
  fsh_plan_result_reset(&ref);
}

/* Every example plan (those with a range or into_partitions exchange as a
 * staging and a scatter stage), and the join + group-by above. */
static void test_examples(fsh_shuffle_backend *b, fsh_task_backend kind,
                          const char *const *only, int n_only) {
  fsh_error err;
  const char *src = getenv("FSH_SOURCE_DIR");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/examples/plans", src ? src : ".");
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "cannot list %s", dir);
  int ran = 0, staged = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
    bool listed = n_only == 0;
    for (int i = 0; i < n_only; i++) listed |= strcmp(only[i], e->d_name) == 0;
    if (!listed) continue;
    fsh_plan *p = load_example(e->d_name, 3);
    if (!p) continue;
    CHECK_OK(fsh_plan_check_distributed(p, &err));
    fsh_plan_job_stages js;
    CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
    bool scatters = false;
    for (int i = 0; i < js.n; i++) scatters |= js.stages[i].scatter;
    CHECK(js.n >= fsh_plan_stage_count(p));
    fsh_plan_job_stages_free(&js);
    check_plan(e->d_name, p, b, kind);
    ran++;
    staged += scatters;
    fsh_plan_free(p);
  }
  if (d) closedir(d);
  /* sort, repartition_range, into_partitions, join_group_by (its sort) */
  if (n_only == 0) CHECK_MSG(ran >= 13 && staged >= 4, "%d example plans ran, %d staged", ran, staged);
  else CHECK_MSG(ran == n_only, "%d of the %d example plans listed ran", ran, n_only);
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(join_group_by, -1, 0, &p, &err));
  check_plan("join + group-by", p, b, kind);
  fsh_plan_free(p);
}

static void test_examples_memory(void) {
  fsh_error err;
  fsh_shuffle_backend *b = NULL;
  CHECK_OK(fsh_shuffle_memory_new(&b, &err));
  test_examples(b, FSH_TASK_BACKEND_MEMORY, NULL, 0);
  fsh_shuffle_backend_destroy(b);
}

static void test_examples_fs(void) {
  fsh_error err;
  char dir[] = "/tmp/fsh-test-plantask-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  fsh_shuffle_backend *b = NULL;
  CHECK_OK(fsh_shuffle_fs_new(dir, &b, &err));
  /* a smaller set (time): every kind of exchange, staged ones included */
  static const char *const only[] = {"repartition_range.json", "into_partitions.json",
                                     "repartition_hash.json", "broadcast_join.json",
                                     "limit.json", "gather.json"};
  test_examples(b, FSH_TASK_BACKEND_FS, only, 6);
  fsh_shuffle_backend_destroy(b);
  CHECK_MSG(fsh_test_dir_entries(dir) == 0, "files left in %s", dir);
  CHECK_EQ_INT(rmdir(dir), 0);
}

/* The smallest plans with a staged exchange -- a scan and the exchange
 * alone -- where the scatter stage recomputes its input: its fragment
 * holds the staged read AND every node of the plan (n_nodes + 1
 * operators; the encoder once sized it n_nodes, a heap overflow under
 * ASan). Run as tasks and compared with the reference. */
static void test_minimal_staged_plans(void) {
  static const char *const plans[] = {
      "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 40000, "
      "\"batch_rows\": 1500, \"partitions\": 5}, {\"op\": \"repartition\", \"by\": "
      "\"range\", \"keys\": [\"amount\"], \"partitions\": 7}]}",
      "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 30000, "
      "\"batch_rows\": 1000, \"partitions\": 4}, {\"op\": \"into_partitions\", "
      "\"partitions\": 9}]}",
  };
  fsh_error err;
  fsh_shuffle_backend *b = NULL;
  CHECK_OK(fsh_shuffle_memory_new(&b, &err));
  for (int i = 0; i < 2; i++) {
    fsh_plan *p = NULL;
    CHECK_OK(fsh_plan_from_json(plans[i], -1, 0, &p, &err));
    if (!p) continue;
    fsh_plan_job_stages js;
    CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
    bool scatters = false;
    for (int k = 0; k < js.n; k++) scatters |= js.stages[k].scatter;
    CHECK_MSG(scatters, "plan %d: no scatter stage", i);
    fsh_plan_job_stages_free(&js);
    check_plan(i ? "scan + into_partitions" : "scan + range repartition", p, b,
               FSH_TASK_BACKEND_MEMORY);
    fsh_plan_free(p);
  }
  fsh_shuffle_backend_destroy(b);
}

/* A range / into_partitions exchange is written staged, then scattered:
 * its stage's fragment as it is (not staged) is refused by the task with
 * EINVAL naming the exchange; a scatter without its samples or counts too. */
static void test_staging_required(void) {
  fsh_error err;
  const char *names[] = {"repartition_range.json", "into_partitions.json"};
  for (int i = 0; i < 2; i++) {
    fsh_plan *p = load_example(names[i], 3);
    if (!p) continue;
    fsh_plan_stage_info info;
    CHECK_OK(fsh_plan_stage_info_get(p, 0, &info, &err));
    CHECK(info.n_inputs == 0 && info.output_node >= 0);
    fsh_fragment_task t = {.n_tasks = info.n_tasks, .shuffle_id = 7,
                           .backend = FSH_TASK_BACKEND_MEMORY};
    CHECK_OK(fsh_plan_stage_encode(p, 0, &t.fragment, &err));
    int rc = fsh_plan_task_check(&t, &err);
    CHECK_MSG(rc == EINVAL && strstr(err.message, "staged, then scattered"), "%s: %d %s",
              names[i], rc, err.message);
    fsh_buffer_unref(t.fragment);
    /* the scatter stage without side input / counts */
    fsh_plan_job_stages js;
    CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
    CHECK(js.n >= 2 && js.stages[1].scatter);
    if (js.n >= 2) {
      fsh_fragment_task_input in = {.node = js.stages[1].input_nodes[0],
                                    .read = {.shuffle_id = 7, .partition = 0,
                                             .n_partitions = js.stages[0].n_partitions,
                                             .backend = FSH_TASK_BACKEND_MEMORY}};
      fsh_fragment_task sc = {.fragment = (fsh_buffer *)js.stages[1].fragment,
                              .n_tasks = js.stages[1].n_tasks, .shuffle_id = 8,
                              .backend = FSH_TASK_BACKEND_MEMORY, .n_inputs = 1, .inputs = &in};
      rc = fsh_plan_task_check(&sc, &err);
      CHECK_MSG(rc == EINVAL && (strstr(err.message, "side input") ||
                                 strstr(err.message, "counts")), "%s: %d %s", names[i], rc,
                err.message);
    }
    fsh_plan_job_stages_free(&js);
    fsh_plan_free(p);
  }
}

/* ---- cancel ---- */

/* A backend over the memory one that counts what its writers do and sets
 * a cancel flag once `after` batches were written (-1: never). */
typedef struct spy {
  fsh_shuffle_backend base, *mem;
  atomic_bool *flag;
  int after, writes, closes, aborts;
  bool set_on_open; /* set the flag once a writer is open */
} spy;

typedef struct spy_writer {
  fsh_shuffle_writer base, *in;
  spy *s;
} spy_writer;

static int spy_write(fsh_shuffle_writer *w, int32_t part, fsh_batch *b, fsh_error *err) {
  spy_writer *k = w->state;
  if (++k->s->writes == k->s->after) atomic_store(k->s->flag, true);
  return k->in->write(k->in, part, b, err);
}

static int spy_close(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err) {
  spy_writer *k = w->state;
  fsh_shuffle_writer *in = k->in;
  k->s->closes++;
  free(k);
  return in->close(in, out, err);
}

static void spy_abort(fsh_shuffle_writer *w) {
  spy_writer *k = w->state;
  k->s->aborts++;
  k->in->abort(k->in);
  free(k);
}

static int spy_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                           int32_t attempt, fsh_shuffle_writer **out, fsh_error *err) {
  spy *s = b->state;
  spy_writer *k = calloc(1, sizeof *k);
  int rc = fsh_shuffle_open_writer(s->mem, spec, map_id, attempt, &k->in, err);
  if (rc) {
    free(k);
    return rc;
  }
  k->s = s;
  k->base = (fsh_shuffle_writer){.write = spy_write, .close = spy_close, .abort = spy_abort,
                                 .state = k};
  *out = &k->base;
  if (s->set_on_open) atomic_store(s->flag, true);
  return 0;
}

static int spy_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t part,
                           const fsh_map_output *src, int64_t n, fsh_batch_stream *out,
                           fsh_error *err) {
  spy *s = b->state;
  return fsh_shuffle_open_reader(s->mem, spec, part, src, n, out, err);
}

static int spy_release(fsh_shuffle_backend *b, uint64_t id, fsh_error *err) {
  spy *s = b->state;
  return fsh_shuffle_release(s->mem, id, err);
}

static void spy_destroy(fsh_shuffle_backend *b) { (void)b; }

static const fsh_shuffle_backend_ops spy_ops = {.name = "spy", .open_writer = spy_open_writer,
                                                .open_reader = spy_open_reader,
                                                .release = spy_release, .destroy = spy_destroy};

/* A plan task whose cancel flag is set while it runs stops at the next
 * batch: the flag is set by the 5th batch written, the task ends with
 * ECANCELED ("cancelled"), no 6th batch is written and its writer is
 * aborted, never closed; without the flag set the same task writes every
 * row and closes; with the flag set before it starts, nothing is written. */
static void test_cancel_between_batches(void) {
  static const char plan[] =
      "{\"partitions\": 1, \"nodes\": ["
      "{\"id\": \"t\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 200000, "
      "\"batch_rows\": 1000, \"partitions\": 1, \"key_range\": 5000, \"seed\": 3},"
      "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 4},"
      "{\"op\": \"aggregate\", \"keys\": [\"key\"], \"aggs\": [{\"fn\": \"count_star\"}], "
      "\"local\": true}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(plan, -1, 0, &p, &err));
  if (!p) return;
  fsh_plan_job_stages js;
  CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
  fsh_shuffle_backend *mem = NULL;
  CHECK_OK(fsh_shuffle_memory_new(&mem, &err));
  for (int mode = 0; mode < 3 && js.n >= 1 && mem; mode++) { /* never, after 5, before */
    atomic_bool flag;
    atomic_init(&flag, mode == 2);
    spy s = {.base = {.ops = &spy_ops}, .mem = mem, .flag = &flag, .after = mode == 1 ? 5 : -1};
    s.base.state = &s;
    fsh_fragment_task t = {.fragment = (fsh_buffer *)js.stages[0].fragment, .task = 0,
                           .n_tasks = js.stages[0].n_tasks, .shuffle_id = 9, .map_id = 0,
                           .backend = FSH_TASK_BACKEND_MEMORY};
    fsh_plan_task_run_options o = {.cancel = &flag};
    fsh_map_task_result r;
    int rc = fsh_plan_task_run(&s.base, &t, &o, &r, NULL, NULL, &err);
    if (mode == 0) {
      CHECK_MSG(rc == 0, "%s", err.message);
      int64_t rows = 0;
      for (int32_t i = 0; rc == 0 && i < r.output.n_partitions; i++) rows += r.output.rows[i];
      CHECK_EQ_INT(rows, 200000);
      CHECK(s.writes > 5);
      CHECK_EQ_INT(s.closes, 1);
      CHECK_EQ_INT(s.aborts, 0);
      if (rc == 0) fsh_map_task_result_reset(&r);
    } else {
      CHECK_MSG(rc == ECANCELED && strstr(err.message, "cancelled"), "mode %d: %d %s", mode, rc,
                rc ? err.message : "ok");
      CHECK_EQ_INT(s.writes, mode == 1 ? 5 : 0);
      CHECK_EQ_INT(s.closes, 0);
      CHECK_EQ_INT(s.aborts, mode == 1 ? 1 : 0);
    }
    CHECK_OK(fsh_shuffle_release(mem, 9, &err));
  }
  fsh_shuffle_backend_destroy(mem);
  fsh_plan_job_stages_free(&js);
  fsh_plan_free(p);
}

/* A task whose scan's filter drops every row writes and reads no batch:
 * the cancel flag is still seen at the scan's next batch. The flag is set
 * once the task's writer is open (before the scan starts); the task ends
 * with ECANCELED, nothing written, its writer aborted, well before the
 * 300M-row scan could end (it takes many seconds; the check, none). */
static void test_cancel_in_scan(void) {
  static const char plan[] =
      "{\"partitions\": 1, \"nodes\": ["
      "{\"id\": \"t\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 300000000, "
      "\"batch_rows\": 100000, \"partitions\": 1, \"key_range\": 5000, \"seed\": 3},"
      "{\"op\": \"filter\", \"predicate\": {\"op\": \"<\", \"args\": [{\"col\": \"key\"}, "
      "{\"lit\": -1}]}},"
      "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 4},"
      "{\"op\": \"aggregate\", \"keys\": [\"key\"], \"aggs\": [{\"fn\": \"count_star\"}], "
      "\"local\": true}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(plan, -1, 0, &p, &err));
  if (!p) return;
  fsh_plan_job_stages js;
  CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
  fsh_shuffle_backend *mem = NULL;
  CHECK_OK(fsh_shuffle_memory_new(&mem, &err));
  if (js.n >= 1 && mem) {
    atomic_bool flag;
    atomic_init(&flag, false);
    spy s = {.base = {.ops = &spy_ops}, .mem = mem, .flag = &flag, .after = -1,
             .set_on_open = true};
    s.base.state = &s;
    fsh_fragment_task t = {.fragment = (fsh_buffer *)js.stages[0].fragment, .task = 0,
                           .n_tasks = js.stages[0].n_tasks, .shuffle_id = 9, .map_id = 0,
                           .backend = FSH_TASK_BACKEND_MEMORY};
    fsh_plan_task_run_options o = {.cancel = &flag};
    fsh_map_task_result r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = fsh_plan_task_run(&s.base, &t, &o, &r, NULL, NULL, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK_MSG(rc == ECANCELED && strstr(err.message, "cancelled"), "%d %s", rc,
              rc ? err.message : "ok");
    if (rc == 0) fsh_map_task_result_reset(&r);
    CHECK_MSG(secs < 2.0, "the cancelled scan ran %.2f s", secs);
    CHECK_EQ_INT(s.writes, 0);
    CHECK_EQ_INT(s.closes, 0);
    CHECK_EQ_INT(s.aborts, 1);
    CHECK_OK(fsh_shuffle_release(mem, 9, &err));
  }
  fsh_shuffle_backend_destroy(mem);
  fsh_plan_job_stages_free(&js);
  fsh_plan_free(p);
}

/* Job stages named by operator: as many names as job stages, "-scatter"
 * exactly on the scatter stages (each after its "-stage"), ": result" on
 * the result stage; the sort example's three and the join + group-by
 * example's named after their operators. */
static void test_stage_names(void) {
  const char *files[2] = {"sort.json", "join_group_by.json"};
  for (int f = 0; f < 2; f++) {
    fsh_plan *p = load_example(files[f], 0);
    if (!p) continue;
    fsh_error err;
    fsh_plan_job_stages js;
    CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
    char names[16][32];
    int n = 0;
    CHECK_OK(fsh_plan_job_stage_names(p, names, 16, &n, &err));
    CHECK_EQ_INT(n, js.n);
    int joins = 0, aggs = 0;
    for (int i = 0; i < n && i < js.n; i++) {
      size_t len = strlen(names[i]);
      bool scatter = len > 8 && strcmp(names[i] + len - 8, "-scatter") == 0;
      bool result = len > 8 && strcmp(names[i] + len - 8, ": result") == 0;
      CHECK_MSG(scatter == js.stages[i].scatter, "%s stage %d '%s'", files[f], i, names[i]);
      CHECK_MSG(result == js.stages[i].result, "%s stage %d '%s'", files[f], i, names[i]);
      if (scatter && i > 0) {
        char want[32];
        snprintf(want, sizeof want, "%.*s-stage", (int)(len - 8), names[i]);
        CHECK_MSG(strcmp(names[i - 1], want) == 0, "%s: '%s' before '%s'", files[f],
                  names[i - 1], names[i]);
      }
      joins += strcmp(names[i], "join: hash") == 0;
      aggs += strcmp(names[i], "aggregate: hash") == 0;
    }
    if (f == 0 && n == 3) {
      CHECK(strcmp(names[0], "sort: range-stage") == 0);
      CHECK(strcmp(names[1], "sort: range-scatter") == 0);
      CHECK(strcmp(names[2], "sort: result") == 0);
      /* its range exchange reads a scan: the scatter computes it again */
      CHECK(js.recomputed[0] && js.recomputed[1] && !js.recomputed[2]);
    }
    if (f == 1) {
      CHECK_EQ_INT(joins, 2); /* both sides repartitioned on the keys */
      CHECK_EQ_INT(aggs, 1);  /* partial -> final */
      CHECK(n > 0 && strcmp(names[n - 1], "sort: result") == 0);
      /* its sort's range exchange reads the aggregate: staged rows */
      for (int i = 0; i < js.n; i++) CHECK_MSG(!js.recomputed[i], "%s stage %d", files[f], i);
    }
    CHECK(fsh_plan_job_stage_names(p, names, n - 1, &n, &err) == ENOSPC);
    fsh_plan_job_stages_free(&js);
    fsh_plan_free(p);
  }
}

/* The plan-fragment answer with stats: round trip; an answer without
 * (the "FSRD" form) decodes with stats 0; stats with a nonzero reserved
 * word are refused. */
static void test_answer_stats(void) {
  fsh_error err;
  int64_t rows[2] = {5, 7}, bytes[2] = {100, 140};
  uint64_t sums[2] = {11, 13}, cks[2] = {1, 2};
  fsh_map_task_result r = {.output = {.shuffle_id = 4, .map_id = 1, .attempt = 2,
                                      .n_partitions = 2, .location = (char *)"loc",
                                      .rows = rows, .bytes = bytes, .checksums = cks},
                           .row_checksums = sums, .input_rows = 12, .input_bytes = 240};
  fsh_fragment_read rd[1] = {{.node = 3, .complete = true, .rows = 9, .checksum = 99}};
  fsh_fragment_stats st = {.spill_files = 6, .spilled_bytes = 4096, .operators_spilled = 2};
  fsh_buffer *a = NULL, *b = NULL;
  CHECK_OK(fsh_fragment_answer_encode_stats(&r, rd, 1, &st, &a, &err));
  CHECK_OK(fsh_fragment_answer_encode(&r, rd, 1, &b, &err));
  for (int k = 0; a && b && k < 2; k++) {
    fsh_buffer *x = k ? b : a;
    fsh_map_task_result got;
    fsh_fragment_read *reads = NULL;
    int32_t n = 0;
    fsh_fragment_stats gs = {-1, -1, -1};
    CHECK_OK(fsh_fragment_answer_decode_stats(x->data, x->size, &got, &reads, &n, &gs, &err));
    CHECK_EQ_INT(n, 1);
    if (n == 1) CHECK(reads[0].node == 3 && reads[0].rows == 9 && reads[0].checksum == 99);
    CHECK_EQ_INT(got.output.map_id, 1);
    CHECK_EQ_INT(got.output.rows[1], 7);
    CHECK_EQ_INT(gs.spill_files, k ? 0 : 6);
    CHECK_EQ_INT(gs.spilled_bytes, k ? 0 : 4096);
    CHECK_EQ_INT(gs.operators_spilled, k ? 0 : 2);
    fsh_map_task_result_reset(&got);
    fsh_free(reads);
    /* the older decoder reads both forms */
    CHECK_OK(fsh_fragment_answer_decode(x->data, x->size, &got, &reads, &n, &err));
    CHECK_EQ_INT(n, 1);
    fsh_map_task_result_reset(&got);
    fsh_free(reads);
  }
  if (a) { /* the reserved word: 8 + 8 bytes before the end */
    a->data[a->size - 9] = 1;
    fsh_map_task_result got;
    fsh_fragment_read *reads = NULL;
    int32_t n = 0;
    int rc = fsh_fragment_answer_decode_stats(a->data, a->size, &got, &reads, &n, NULL, &err);
    CHECK_MSG(rc == EINVAL && strstr(err.message, "stats"), "%d %s", rc, rc ? err.message : "");
  }
  fsh_buffer_unref(a);
  fsh_buffer_unref(b);
}

/* Malformed bodies: EINVAL naming the problem, never a crash. */
static void test_malformed(void) {
  fsh_error err;
  fsh_plan *p = load_example("join_group_by.json", 3);
  if (!p) return;
  fsh_plan_stage_info info;
  /* the join's stage reads two exchanges */
  int js = -1;
  for (int s = 0; s < fsh_plan_stage_count(p) && js < 0; s++) {
    CHECK_OK(fsh_plan_stage_info_get(p, s, &info, &err));
    if (info.n_inputs == 2) js = s;
  }
  CHECK(js >= 0);
  fsh_fragment_task t = {.task = 0, .n_tasks = info.n_tasks, .shuffle_id = 9, .map_id = 0,
                     .backend = FSH_TASK_BACKEND_FLIGHT, .n_inputs = 2};
  CHECK_OK(fsh_plan_stage_encode(p, js, &t.fragment, &err));
  fsh_fragment_task_input in[2];
  char loc[] = "grpc://127.0.0.1:1";
  char *locs[1] = {loc};
  fsh_reduce_source src = {.map_id = 0, .location = 0};
  for (int i = 0; i < 2; i++)
    in[i] = (fsh_fragment_task_input){
        .node = info.input_nodes[i],
        .read = {.shuffle_id = 1, .partition = 0, .n_partitions = info.input_partitions[i],
                 .backend = FSH_TASK_BACKEND_FLIGHT, .n_sources = 1, .sources = &src,
                 .n_locations = 1, .locations = locs}};
  t.inputs = in;
  CHECK_OK(fsh_plan_task_check(&t, &err));
  fsh_buffer *body = NULL;
  CHECK_OK(fsh_fragment_task_encode(&t, &body, &err));
  fsh_fragment_task d;
  /* every truncation */
  for (int64_t n = 0; n < body->size; n += 1 + n / 16) {
    int rc = fsh_fragment_task_decode(body->data, n, &d, &err);
    CHECK_MSG(rc == EINVAL, "truncated to %lld: %d", (long long)n, rc);
  }
  /* flipped bytes: decode fails with EINVAL or decodes to a task that the
   * check accepts or refuses with EINVAL */
  uint8_t *copy = malloc((size_t)body->size);
  for (int64_t i = 0; i < body->size; i += 1 + i / 32) {
    memcpy(copy, body->data, (size_t)body->size);
    copy[i] ^= 0x5a;
    int rc = fsh_fragment_task_decode(copy, body->size, &d, &err);
    CHECK_MSG(rc == 0 || rc == EINVAL, "byte %lld: %d", (long long)i, rc);
    if (rc == 0) {
      rc = fsh_plan_task_check(&d, &err);
      CHECK_MSG(rc == 0 || rc == EINVAL, "byte %lld: check %d %s", (long long)i, rc, err.message);
      fsh_fragment_task_reset(&d);
    }
  }
  free(copy);
  fsh_buffer_unref(body);
  /* an input missing, given twice, the wrong partition, a task out of range */
  t.n_inputs = 1;
  CHECK(fsh_plan_task_check(&t, &err) == EINVAL && strstr(err.message, "no map outputs"));
  t.n_inputs = 2;
  in[1].node = in[0].node;
  CHECK(fsh_plan_task_check(&t, &err) == EINVAL && strstr(err.message, "given twice"));
  in[1].node = info.input_nodes[1];
  in[0].read.partition = info.input_partitions[0] > 1 ? 1 : 0;
  t.task = info.input_partitions[0] > 1 ? 0 : 0;
  if (info.input_partitions[0] > 1) {
    CHECK(fsh_plan_task_check(&t, &err) == EINVAL && strstr(err.message, "reads partition"));
    in[0].read.partition = 0;
  }
  t.n_tasks = info.n_tasks + 1;
  CHECK(fsh_plan_task_check(&t, &err) == EINVAL && strstr(err.message, "partitions"));
  t.n_tasks = info.n_tasks;
  t.task = info.n_tasks;
  CHECK(fsh_plan_task_check(&t, &err) == EINVAL && strstr(err.message, "task"));
  t.task = 0;
  /* garbage as the fragment */
  fsh_buffer_unref(t.fragment);
  t.fragment = fsh_buffer_copy("\x0a\xff\xff\xff", 4);
  CHECK(fsh_plan_task_check(&t, &err) == EINVAL && strstr(err.message, "fragment"));
  fsh_buffer_unref(t.fragment);
  fsh_plan_free(p);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"examples_memory", test_examples_memory},
      {"examples_fs", test_examples_fs},
      {"staging_required", test_staging_required},
      {"minimal_staged_plans", test_minimal_staged_plans},
      {"malformed", test_malformed},
      {"cancel_between_batches", test_cancel_between_batches},
      {"cancel_in_scan", test_cancel_in_scan},
      {"stage_names", test_stage_names},
      {"answer_stats", test_answer_stats},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
