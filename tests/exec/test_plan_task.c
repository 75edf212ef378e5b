/* test_plan_task.c -- plan-fragment tasks (exec.h) against fsh_plan_run in
 * process. A small driver here runs every stage of an example plan as
 * plan-fragment tasks (bodies encoded and decoded on the way) over the
 * memory and fs backends: each task's inputs are the map outputs the
 * earlier stages' tasks answered. The result (read back from the result
 * shuffle) must equal the single-process reference run, and every
 * partition of every shuffle the row checksums the tasks answered (the
 * test recomputes them from the rows read, over every column). Malformed
 * bodies and plans that cannot run distributed are refused with EINVAL /
 * ENOTSUP naming what is wrong. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flightshuffle/exec.h>

#include "../test.h"

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = malloc((size_t)n + 1);
  if (t && fread(t, 1, (size_t)n, f) != (size_t)n) {
    free(t);
    t = NULL;
  }
  if (t) t[n] = 0;
  fclose(f);
  return t;
}

static fsh_plan *load_example(const char *name, int32_t partitions) {
  const char *src = getenv("FSH_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/examples/plans/%s", src ? src : ".", name);
  char *text = read_text(path);
  CHECK_MSG(text != NULL, "cannot read %s", path);
  if (!text) return NULL;
  fsh_plan *p = NULL;
  fsh_error err;
  int rc = fsh_plan_from_json(text, -1, partitions, &p, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  free(text);
  return p;
}

/* The independent row checksum: per row, hash of every column (seed 0),
 * summed. */
static uint64_t rows_checksum(const fsh_batch *b) {
  if (b->length == 0) return 0;
  int32_t cols[64];
  for (int64_t i = 0; i < b->n_columns; i++) cols[i] = (int32_t)i;
  uint64_t *h = malloc((size_t)b->length * sizeof *h);
  fsh_error err;
  CHECK_OK(fsh_hash_columns(b, cols, (int)b->n_columns, 0, h, &err));
  uint64_t s = 0;
  for (int64_t i = 0; i < b->length; i++) s += h[i];
  free(h);
  return s;
}

/* What one stage's tasks answered. */
typedef struct stage_out {
  fsh_plan_stage_info info;
  fsh_map_task_result *r; /* [n_tasks] */
} stage_out;

/* The reduce-verify sources of partition `part` of stage s's output. */
static void sources_of(const stage_out *s, int32_t part, fsh_task_backend backend,
                       fsh_reduce_task *t) {
  int32_t n = s->info.n_tasks;
  t->shuffle_id = s->r[0].output.shuffle_id;
  t->partition = part;
  t->n_partitions = s->info.output_partitions;
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

/* The body of task `task` of stage s (through encode and decode). */
static void task_of(const fsh_plan *p, int s, stage_out *outs, int32_t task, int32_t attempt,
                    fsh_task_backend backend, fsh_fragment_task *decoded) {
  fsh_error err;
  fsh_fragment_task t = {.task = task, .n_tasks = outs[s].info.n_tasks,
                     .shuffle_id = 1000 + (uint64_t)s, .map_id = task, .attempt = attempt,
                     .compression = task % 2 ? FSH_COMPRESSION_LZ4_FRAME : FSH_COMPRESSION_NONE,
                     .backend = backend, .n_inputs = outs[s].info.n_inputs};
  CHECK_OK(fsh_plan_stage_encode(p, s, &t.fragment, &err));
  fsh_fragment_task_input in[FSH_PLAN_STAGE_MAX_INPUTS];
  t.inputs = in;
  for (int i = 0; i < t.n_inputs; i++) {
    const stage_out *src = &outs[outs[s].info.input_stages[i]];
    int32_t part = outs[s].info.input_partitions[i] == 1 ? 0 : task;
    in[i].node = outs[s].info.input_nodes[i];
    memset(&in[i].read, 0, sizeof in[i].read);
    sources_of(src, part, backend, &in[i].read);
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
  fsh_buffer_unref(t.fragment);
}

/* Every partition of the result stage's output read back: its rows and
 * checksum equal the sums of what the tasks answered; the batches go to
 * res (partition after partition). */
static void check_output(fsh_shuffle_backend *b, const fsh_plan *p, stage_out *s,
                         fsh_plan_result *res) {
  fsh_error err;
  int32_t R = s->info.output_partitions, n = s->info.n_tasks;
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
      sum += rows_checksum(x);
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

/* Runs plan p as plan-fragment tasks over backend b; *res: its result. */
static void run_tasks(const fsh_plan *p, fsh_shuffle_backend *b, fsh_task_backend kind,
                      fsh_plan_result *res) {
  fsh_error err;
  int n = fsh_plan_stage_count(p);
  stage_out *outs = calloc((size_t)n, sizeof *outs);
  memset(res, 0, sizeof *res);
  for (int s = 0; s < n; s++) {
    CHECK_OK(fsh_plan_stage_info_get(p, s, &outs[s].info, &err));
    for (int i = 0; i < outs[s].info.n_inputs; i++)
      CHECK(outs[s].info.input_stages[i] >= 0 && outs[s].info.input_stages[i] < s);
    outs[s].r = calloc((size_t)outs[s].info.n_tasks, sizeof *outs[s].r);
    for (int32_t t = 0; t < outs[s].info.n_tasks; t++) {
      fsh_fragment_task task;
      task_of(p, s, outs, t, 0, kind, &task);
      int rc = fsh_plan_task_run(b, &task, NULL, &outs[s].r[t], &err);
      CHECK_MSG(rc == 0, "stage %d task %d: %s", s, t, err.message);
      fsh_fragment_task_reset(&task);
    }
  }
  /* the result: the last stage's output partitions, in order (its
   * exchange's when the plan ends in one) */
  stage_out *last = &outs[n - 1];
  res->n_partitions = last->info.output_partitions;
  res->partition_batches = calloc((size_t)res->n_partitions, sizeof *res->partition_batches);
  res->schema = fsh_schema_ref(fsh_plan_schema(p));
  check_output(b, p, last, res);
  for (int s = 0; s < n; s++) {
    CHECK_OK(fsh_shuffle_release(b, 1000 + (uint64_t)s, &err));
    for (int32_t t = 0; t < outs[s].info.n_tasks; t++) fsh_map_task_result_reset(&outs[s].r[t]);
    free(outs[s].r);
  }
  free(outs);
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
  run_tasks(p, b, kind, &got);
  int rc = fsh_plan_result_compare(p, &got, &ref, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  CHECK_MSG(got.rows == ref.rows, "%s: %lld rows, reference %lld", name, (long long)got.rows,
            (long long)ref.rows);
  result_free(&got);
  fsh_plan_result_reset(&ref);
}

/* Every example plan that can run distributed (the others are refused
 * with ENOTSUP naming the operator), and the join + group-by above. */
static void test_examples(fsh_shuffle_backend *b, fsh_task_backend kind) {
  fsh_error err;
  const char *src = getenv("FSH_SOURCE_DIR");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/examples/plans", src ? src : ".");
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "cannot list %s", dir);
  int ran = 0, refused = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
    fsh_plan *p = load_example(e->d_name, 3);
    if (!p) continue;
    int rc = fsh_plan_check_distributed(p, &err);
    if (rc == 0) {
      check_plan(e->d_name, p, b, kind);
      ran++;
    } else {
      CHECK_MSG(rc == ENOTSUP && strstr(err.message, "plan operator"), "%s: %d %s", e->d_name,
                rc, err.message);
      refused++;
    }
    fsh_plan_free(p);
  }
  if (d) closedir(d);
  CHECK_MSG(ran >= 6 && refused >= 2, "%d example plans ran, %d refused", ran, refused);
  fprintf(stderr, "examples: %d ran as plan-fragment tasks, %d refused\n", ran, refused);
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(join_group_by, -1, 0, &p, &err));
  CHECK_OK(fsh_plan_check_distributed(p, &err));
  check_plan("join + group-by", p, b, kind);
  fsh_plan_free(p);
}

static void test_examples_memory(void) {
  fsh_error err;
  fsh_shuffle_backend *b = NULL;
  CHECK_OK(fsh_shuffle_memory_new(&b, &err));
  test_examples(b, FSH_TASK_BACKEND_MEMORY);
  fsh_shuffle_backend_destroy(b);
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void test_examples_fs(void) {
  fsh_error err;
  char dir[] = "/tmp/fsh-test-plantask-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  fsh_shuffle_backend *b = NULL;
  CHECK_OK(fsh_shuffle_fs_new(dir, &b, &err));
  test_examples(b, FSH_TASK_BACKEND_FS);
  fsh_shuffle_backend_destroy(b);
  CHECK_MSG(dir_entries(dir) == 0, "files left in %s", dir);
  CHECK_EQ_INT(rmdir(dir), 0);
}

/* Range and into_partitions exchanges are refused, naming the operator;
 * a task of such a stage too. */
static void test_refused(void) {
  fsh_error err;
  const char *names[] = {"repartition_range.json", "into_partitions.json", "sort.json"};
  for (int i = 0; i < 3; i++) {
    fsh_plan *p = load_example(names[i], 3);
    if (!p) continue;
    int rc = fsh_plan_check_distributed(p, &err);
    CHECK_MSG(rc == ENOTSUP, "%s: %d", names[i], rc);
    CHECK_MSG(strstr(err.message, "plan operator") && strstr(err.message, "distributed"), "%s",
              err.message);
    /* the first stage writes that exchange when it is the first exchange */
    fsh_plan_stage_info info;
    CHECK_OK(fsh_plan_stage_info_get(p, 0, &info, &err));
    if (info.n_inputs == 0) {
      fsh_shuffle_backend *b = NULL;
      CHECK_OK(fsh_shuffle_memory_new(&b, &err));
      fsh_fragment_task t = {.n_tasks = info.n_tasks, .shuffle_id = 7, .backend = FSH_TASK_BACKEND_MEMORY};
      CHECK_OK(fsh_plan_stage_encode(p, 0, &t.fragment, &err));
      fsh_map_task_result r;
      rc = fsh_plan_task_run(b, &t, NULL, &r, &err);
      bool range_like = strstr(err.message, "range") || strstr(err.message, "into_partitions");
      CHECK_MSG(rc == 0 || (rc == ENOTSUP && range_like), "%s: %d %s", names[i], rc,
                err.message);
      if (rc == 0) fsh_map_task_result_reset(&r);
      fsh_buffer_unref(t.fragment);
      CHECK_OK(fsh_shuffle_release(b, 7, &err));
      fsh_shuffle_backend_destroy(b);
    }
    fsh_plan_free(p);
  }
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
      {"refused", test_refused},
      {"malformed", test_malformed},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
