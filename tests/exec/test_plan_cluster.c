/* test_plan_cluster.c -- plans as driver jobs in one process: an in-process
 * driver and three in-process workers that run "plan-fragment" tasks (the
 * task kind registered as `flightshuffle worker` does). Each plan's job
 * (fsh_plan_job_plan) must succeed, its result read back from the result
 * shuffle (fsh_plan_job_result, every partition checked against its
 * tasks' row checksums) must equal the single-process reference run, over
 * the flight and the fs backends; afterwards every store is empty once
 * the result shuffle is released. A distributed sort and into_partitions
 * run as a staging and a scatter stage; malformed plan-fragment bodies sent to a worker are
 * answered INVALID_ARGUMENT (EINVAL) naming the problem; malformed
 * plan-fragment JobPlans are refused at submit; a job that fails cancels
 * its plan tasks still running, and a superseded plan task is cancelled
 * (their workers end them ECANCELED); the summary's fetched bytes, input
 * rows and staging rows agree with the plan's stages, and the workers'
 * operator spill reaches the job status. */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/flight.h>
#include <flightshuffle/sched.h>

#include "../test.h"
#include "plan_examples.h"

#include "plan_cluster_fixture.h"

/* The summary's figures against the plan's stages: a scatter stage writes
 * every row its staging stage read (the staging stage's rows count no
 * samples) -- also a recomputed one (js->recomputed), whose staging stage
 * staged only samples (bytes) and which computed its rows again; fetched
 * is, per input, every partition of it read once (a 1-partition input: by
 * every task; a scatter's samples, in its staging stage's bytes, are read
 * by every task: bounds); input rows are what the stages reading no
 * exchange read (the driver's figure), and there are some. */
static void check_figures(const char *name, const fsh_plan_job_stages *js,
                          const fsh_sched_job_status *s) {
  int64_t lo = 0, hi = 0, sources = 0;
  for (int x = 0; x < js->n; x++) {
    const fsh_sched_plan_stage *st = &js->stages[x];
    if (st->n_inputs == 0) sources += s->stages[x].rows;
    for (int i = 0; i < st->n_inputs; i++) {
      const fsh_sched_plan_stage *in = &js->stages[st->input_stages[i]];
      int64_t b = s->stages[st->input_stages[i]].bytes;
      if (in->n_partitions == 1) {
        lo += st->n_tasks * b, hi += st->n_tasks * b;
      } else if (st->scatter && js->recomputed[x]) {
        lo += b, hi += st->n_tasks * b;
        CHECK(js->recomputed[st->input_stages[i]]);
        CHECK_MSG(s->stages[x].rows == s->stages[st->input_stages[i]].rows &&
                      (b > 0 || s->stages[x].rows == 0),
                  "%s: the recomputed scatter wrote %lld rows, its staging stage says %lld "
                  "(%lld bytes of samples)", name, (long long)s->stages[x].rows,
                  (long long)s->stages[st->input_stages[i]].rows, (long long)b);
      } else if (st->scatter) {
        lo += b, hi += st->n_tasks * b;
        CHECK_MSG(s->stages[x].rows == s->stages[st->input_stages[i]].rows,
                  "%s: the scatter stage wrote %lld rows, its staging stage says %lld", name,
                  (long long)s->stages[x].rows, (long long)s->stages[st->input_stages[i]].rows);
      } else {
        lo += b, hi += b;
      }
    }
  }
  CHECK_MSG(s->bytes_fetched >= lo && s->bytes_fetched <= hi && (js->n == 1 || lo > 0),
            "%s: fetched %lld bytes, expected %lld .. %lld", name, (long long)s->bytes_fetched,
            (long long)lo, (long long)hi);
  CHECK_MSG(s->input_rows == sources && sources > 0, "%s: input rows %lld, the source stages "
            "read %lld", name, (long long)s->input_rows, (long long)sources);
  if (strcmp(name, "join + group-by") == 0) /* its scans' rows go to exchanges unfiltered */
    CHECK_EQ_INT(s->input_rows, 40000 + 3000);
}

/* The pre-shuffle merge mode of the jobs run_plan submits, and the
 * merges they made (summed). */
static int32_t g_merge = FSH_SCHED_MERGE_OFF;
static int64_t g_merges;
/* the last job's merges and the map outputs they took in, per stage */
static int64_t g_stage_merges[8], g_stage_merged[8];

/* Runs p as a job on the cluster and compares its result with the
 * reference run. */
static void run_plan(cluster *c, const char *name, fsh_plan *p, fsh_task_backend kind) {
  fsh_error err;
  fsh_buffer *plan = NULL;
  fsh_plan_job_options jo = {.name = name, .backend = kind,
                             .compression = FSH_COMPRESSION_LZ4_FRAME, .merge = g_merge};
  CHECK_OK(fsh_plan_job_plan(p, &jo, &plan, &err));
  if (!plan) return;
  uint64_t id = 0;
  CHECK_OK(fsh_sched_submit(fsh_sched_driver_uri(c->d), NULL, plan->data, plan->size, &id, &err));
  fsh_buffer_unref(plan);
  int rc = fsh_sched_driver_wait_job(c->d, id, 20000, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c->d), NULL, id, false, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s: %s", name, s.error ? s.error : "?");
  /* the driver's check: every partition a task read to its end held what
   * its input's tasks wrote there */
  CHECK_MSG(s.verified, "%s: the driver's check of the reads failed", name);
  g_merges += s.merges;
  memset(g_stage_merges, 0, sizeof g_stage_merges);
  memset(g_stage_merged, 0, sizeof g_stage_merged);
  for (int32_t i = 0; i < s.n_stages && i < 8; i++)
    g_stage_merges[i] = s.stages[i].merges, g_stage_merged[i] = s.stages[i].merged_outputs;
  CHECK_EQ_INT(s.merges_failed, 0);
  fsh_plan_job_stages js;
  CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
  CHECK_EQ_INT(s.n_stages, js.n); /* a staged exchange: two stages */
  CHECK(js.n >= fsh_plan_stage_count(p));
  if (s.n_stages == js.n) check_figures(name, &js, &s);
  fsh_plan_job_stages_free(&js);
  fsh_shuffle_backend *b = client_backend(c, kind);
  fsh_plan_result got, ref;
  rc = fsh_plan_job_result(p, &s, b, &got, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  fsh_plan_run_options ro = {.reference = true};
  CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  if (rc == 0) {
    rc = fsh_plan_result_compare(p, &got, &ref, &err);
    CHECK_MSG(rc == 0, "%s (%s): %s", name, fsh_task_backend_name(kind), err.message);
    CHECK_EQ_INT(got.rows, ref.rows);
  }
  if (s.n_result > 0) CHECK_OK(fsh_shuffle_release(b, s.result[0].shuffle_id, &err));
  fsh_plan_result_reset(&got);
  fsh_plan_result_reset(&ref);
  fsh_sched_job_status_reset(&s);
  fsh_shuffle_backend_destroy(b);
}

/* A partitioned join + group-by (a stage reading two exchanges). */
static const char join_group_by[] =
    "{\"partitions\": 3, \"nodes\": ["
    "{\"id\": \"facts\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 40000, "
    "\"batch_rows\": 4096, \"partitions\": 4, \"key_range\": 3000, \"null_fraction\": 0.01, "
    "\"seed\": 1},"
    "{\"id\": \"dims\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 3000, "
    "\"batch_rows\": 1024, \"partitions\": 2, \"key_range\": 3000, \"seed\": 2, \"groups\": 8},"
    "{\"id\": \"dims_p\", \"op\": \"project\", \"input\": \"dims\", \"columns\": ["
    "{\"name\": \"dkey\", \"expr\": {\"col\": \"id\"}}, {\"name\": \"category\", "
    "\"expr\": {\"col\": \"grp\"}}]},"
    "{\"id\": \"j\", \"op\": \"join\", \"left\": \"facts\", \"right\": \"dims_p\", "
    "\"left_keys\": [\"key\"], \"right_keys\": [\"dkey\"], \"type\": \"inner\", "
    "\"strategy\": \"partitioned\"},"
    "{\"op\": \"aggregate\", \"keys\": [\"category\"], \"aggs\": [{\"fn\": \"count_star\", "
    "\"name\": \"n\"}, {\"fn\": \"sum\", \"column\": \"amount\", \"name\": \"total\"}]}"
    "]}";

/* A sort whose range exchange reads a hash exchange: its staging stage
 * writes its rows (not recomputed, unlike sort.json's over a scan). */
static const char sort_after_hash[] =
    "{\"partitions\": 3, \"nodes\": ["
    "{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 20000, \"batch_rows\": 2000, "
    "\"partitions\": 4, \"key_range\": 5000, \"null_fraction\": 0.01, \"seed\": 5},"
    "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 3},"
    "{\"op\": \"sort\", \"keys\": [{\"column\": \"key\", \"nulls_first\": true}, \"id\"]}"
    "]}";

/* The example plans `names`, the join + group-by and the sort after a
 * hash exchange, each as a job. */
static void plans_list(fsh_task_backend kind, const char *const *names, int n) {
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  for (int i = 0; i < n; i++) {
    fsh_plan *p = load_example(names[i], 3);
    if (p) run_plan(&c, names[i], p, kind);
    fsh_plan_free(p);
  }
  fsh_plan *p = NULL;
  fsh_error err;
  CHECK_OK(fsh_plan_from_json(join_group_by, -1, 0, &p, &err));
  if (p) run_plan(&c, "join + group-by", p, kind);
  fsh_plan_free(p);
  p = NULL;
  CHECK_OK(fsh_plan_from_json(sort_after_hash, -1, 0, &p, &err));
  if (p) run_plan(&c, "sort after a hash exchange", p, kind);
  fsh_plan_free(p);
  stop_cluster(&c);
}

static void plans_on(fsh_task_backend kind) {
  /* sort and into_partitions: a staging and a scatter stage each */
  static const char *const names[] = {"repartition_hash.json", "broadcast_join.json",
                                      "limit.json", "gather.json", "sort.json",
                                      "into_partitions.json", "into_batches.json"};
  plans_list(kind, names, 7);
}

static void plans_flight(void) { plans_on(FSH_TASK_BACKEND_FLIGHT); }
static void plans_fs(void) { plans_on(FSH_TASK_BACKEND_FS); }
/* The same plans with the pre-shuffle merge forced on: the workers merge
 * runs of consecutive map outputs (some do: the merges are counted) and
 * every result still equals the reference, in order. */
static void plans_flight_merged(void) {
  g_merge = FSH_SCHED_MERGE_ON;
  g_merges = 0;
  /* order-sensitive ones (a sort's gather, into_partitions) and a limit */
  static const char *const names[] = {"limit.json", "sort.json", "into_partitions.json"};
  plans_list(FSH_TASK_BACKEND_FLIGHT, names, 3);
  CHECK_MSG(g_merges > 0, "no merge happened in any plan");
  g_merge = FSH_SCHED_MERGE_OFF;
}

/* The plan's merge policies on a cluster, as in process (exec.h): the
 * plan says "on", its second exchange "off" -- the job's auto lets them
 * decide: the first exchange's 4 scan outputs are merged (one worker: all
 * are consecutive, 2 merges of 2), the second's none; an explicit on
 * merges both (its 3 outputs: a merge of 2, the last published alone),
 * an explicit off neither. Every result equals the reference. */
static const char two_exchanges[] =
    "{\"partitions\": 3, \"pre_shuffle_merge\": \"on\", \"nodes\": ["
    "{\"id\": \"t\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 20000, "
    "\"batch_rows\": 1000, \"partitions\": 4, \"key_range\": 500, \"seed\": 3},"
    "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 3},"
    "{\"op\": \"aggregate\", \"keys\": [\"key\", \"grp\"], \"aggs\": [{\"fn\": "
    "\"count_star\", \"name\": \"n\"}], \"local\": true},"
    "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"grp\"], \"partitions\": 3, "
    "\"pre_shuffle_merge\": \"off\"},"
    "{\"op\": \"aggregate\", \"keys\": [\"grp\"], \"aggs\": [{\"fn\": \"sum\", "
    "\"column\": \"n\", \"name\": \"n\"}], \"local\": true}]}";

static void plan_merge_policies(void) {
  g_workers = 1;
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  fsh_plan *p = NULL;
  fsh_error err;
  CHECK_OK(fsh_plan_from_json(two_exchanges, -1, 0, &p, &err));
  fsh_plan_job_stages js = {0};
  if (p) CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
  CHECK_EQ_INT(js.n, 3);
  fsh_plan_job_stages_free(&js);
  g_merges = 0;
  g_merge = FSH_SCHED_MERGE_AUTO;
  if (p) run_plan(&c, "the plan's policies", p, FSH_TASK_BACKEND_FLIGHT);
  CHECK_EQ_INT(g_stage_merges[0], 2);
  CHECK_EQ_INT(g_stage_merged[0], 4);
  CHECK_EQ_INT(g_stage_merges[1], 0);
  CHECK_EQ_INT(g_stage_merged[1], 0);
  CHECK_EQ_INT(g_merges, 2);
  g_merge = FSH_SCHED_MERGE_ON;
  if (p) run_plan(&c, "merge on", p, FSH_TASK_BACKEND_FLIGHT);
  CHECK_EQ_INT(g_stage_merges[0], 2);
  CHECK_EQ_INT(g_stage_merges[1], 1);
  CHECK_EQ_INT(g_stage_merged[1], 2);
  g_merge = FSH_SCHED_MERGE_OFF;
  g_merges = 0;
  if (p) run_plan(&c, "merge off", p, FSH_TASK_BACKEND_FLIGHT);
  CHECK_EQ_INT(g_merges, 0);
  fsh_plan_free(p);
  stop_cluster(&c);
  g_workers = N_WORKERS;
}

/* Malformed plan-fragment bodies sent to a worker: EINVAL (the Flight
 * INVALID_ARGUMENT) naming the problem; the worker goes on serving; its
 * ListActions names the kind. */
static void malformed_bodies(void) {
  cluster c;
  start_cluster(&c);
  fsh_error err;
  fsh_flight_client *cl = NULL;
  fsh_flight_client_options co = {.uri = fsh_shuffle_worker_uri(c.w[0]), .timeout_ms = 5000};
  CHECK_OK(fsh_flight_client_open(&co, &cl, &err));
  const char *bodies[] = {"", "FSPT", "FSPT\x01\0\0\0garbage-garbage-garbage-garbage-garbage-xx",
                          "\x0a\x02\x08\x01"};
  int64_t sizes[] = {0, 4, 50, 4};
  for (int i = 0; cl && i < 4; i++) {
    fsh_flight_action a = {.type = (char *)"plan-fragment",
                           .body = {(uint8_t *)bodies[i], sizes[i]}};
    fsh_flight_result_list res = {0};
    int rc = fsh_flight_do_action(cl, &a, &res, &err);
    CHECK_MSG(rc == EINVAL && strstr(err.message, "plan-fragment"), "body %d: %d %s", i, rc,
              err.message);
    fsh_flight_result_list_reset(&res);
  }
  /* a well-formed body whose fragment is garbage */
  fsh_fragment_task t = {.n_tasks = 1, .backend = FSH_TASK_BACKEND_FLIGHT};
  t.fragment = fsh_buffer_copy("\x12\x03\xff\xff\xff", 5);
  fsh_buffer *body = NULL;
  CHECK_OK(fsh_fragment_task_encode(&t, &body, &err));
  fsh_buffer_unref(t.fragment);
  if (cl && body) {
    fsh_flight_action a = {.type = (char *)"plan-fragment", .body = {body->data, body->size}};
    fsh_flight_result_list res = {0};
    int rc = fsh_flight_do_action(cl, &a, &res, &err);
    CHECK_MSG(rc == EINVAL && strstr(err.message, "fragment"), "%d %s", rc, err.message);
    fsh_flight_result_list_reset(&res);
  }
  fsh_buffer_unref(body);
  fsh_flight_action_type_list types = {0};
  if (cl) {
    CHECK_OK(fsh_flight_list_actions(cl, &types, &err));
    bool found = false;
    for (int64_t i = 0; i < types.n; i++) found |= strcmp(types.items[i].type, "plan-fragment") == 0;
    CHECK(found);
    fsh_flight_action_type_list_reset(&types);
  }
  fsh_flight_client_close(cl);
  stop_cluster(&c);
}

/* A superseded plan task still running on a live worker is cancelled
 * there: the worker running one of three long scan tasks is declared dead
 * (it is alive); its attempt ends ECANCELED "cancelled" (its worker's task
 * state), the task re-runs elsewhere and the job's result equals the
 * single-process run's. */
static void superseded_plan_task_cancelled(void) {
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  static const char text[] =
      "{\"partitions\": 3, \"nodes\": ["
      "{\"id\": \"t\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 1500000, "
      "\"batch_rows\": 4096, \"partitions\": 3, \"key_range\": 5000, \"seed\": 6},"
      "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 3},"
      "{\"op\": \"aggregate\", \"keys\": [\"key\"], \"aggs\": [{\"fn\": \"count_star\"}], "
      "\"local\": true}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  fsh_buffer *plan = NULL;
  fsh_plan_job_options jo = {.name = "superseded", .backend = FSH_TASK_BACKEND_FLIGHT,
                             .slots_per_worker = 1};
  if (p) CHECK_OK(fsh_plan_job_plan(p, &jo, &plan, &err));
  uint64_t id = 0;
  if (plan) CHECK_OK(fsh_sched_driver_submit(c.d, plan->data, plan->size, &id, &err));
  fsh_buffer_unref(plan);
  bool all = false; /* every scan task running, none done */
  for (int t = 0; t < 1000 && !all; t++) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
    all = s.n_stages >= 1 && s.stages[0].tasks_running == 3 && s.stages[0].tasks_done == 0;
    fsh_sched_job_status_reset(&s);
    if (!all) usleep(5000); /* (a cancel follows its task to the worker: no wait) */
  }
  CHECK_MSG(all, "the scan tasks never all ran at once");
  int victim = 1;
  CHECK_OK(fsh_sched_driver_declare_dead(c.d, fsh_shuffle_worker_uri(c.w[victim]),
                                         "declared by the test", &err));
  int got = 0;
  for (int t = 0; t < 1000 && !got; t++) {
    got = atomic_load(&c.hook[victim].cancelled);
    if (!got) usleep(10000);
  }
  CHECK_MSG(got == 1, "the victim's plan task was not cancelled (%d)", got);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 60000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED && s.verified, "state %d verified %d: %s",
            (int)s.state, (int)s.verified, s.error ? s.error : "");
  fsh_shuffle_backend *b = client_backend(&c, FSH_TASK_BACKEND_FLIGHT);
  fsh_plan_result res, ref;
  memset(&res, 0, sizeof res);
  int rc = p ? fsh_plan_job_result(p, &s, b, &res, &err) : EINVAL;
  CHECK_MSG(rc == 0, "%s", err.message);
  fsh_plan_run_options ro = {.reference = true};
  memset(&ref, 0, sizeof ref);
  if (p) CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  if (rc == 0 && p) CHECK_OK(fsh_plan_result_compare(p, &res, &ref, &err));
  fsh_plan_result_reset(&ref);
  if (s.n_result > 0) CHECK_OK(fsh_shuffle_release(b, s.result[0].shuffle_id, &err));
  fsh_plan_result_reset(&res);
  fsh_shuffle_backend_destroy(b);
  fsh_sched_job_status_reset(&s);
  for (int i = 0; i < N_WORKERS; i++)
    if (i != victim) CHECK_EQ_INT(atomic_load(&c.hook[i].cancelled), 0);
  fsh_plan_free(p);
  stop_cluster(&c);
}

/* The workers' operator spill reaches the driver: with a 64 KiB budget
 * per operator, the sort plan's job reports in its status (from the tasks'
 * answers) as many operator instances spilled as the in-process run with
 * that budget (the same partitions: the same instances spill), with files
 * and bytes, and the workers' spill directory is left empty. */
static void operator_spill_reported(void) {
  char dir[] = "/tmp/fsh-test-plancl-spill-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  const char *dirs[1] = {dir};
  fsh_plan_task_run_options ko = {.operator_memory = 64 << 10, .spill_dirs = dirs,
                                  .n_spill_dirs = 1};
  cluster c;
  start_cluster_with(&c, -1, &ko);
  wait_workers(&c);
  fsh_error err;
  fsh_plan *p = load_example("sort.json", 3);
  fsh_buffer *plan = NULL;
  fsh_plan_job_options jo = {.name = "spill", .backend = FSH_TASK_BACKEND_FLIGHT};
  if (p) CHECK_OK(fsh_plan_job_plan(p, &jo, &plan, &err));
  uint64_t id = 0;
  if (plan) CHECK_OK(fsh_sched_driver_submit(c.d, plan->data, plan->size, &id, &err));
  fsh_buffer_unref(plan);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c.d), NULL, id, false, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  fsh_plan_result ref;
  fsh_plan_run_options ro = {.operator_memory = 64 << 10, .spill_dirs = dirs, .n_spill_dirs = 1};
  if (p) CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  CHECK_MSG(ref.operators_spilled > 0, "the in-process run did not spill");
  CHECK_EQ_INT(s.operators_spilled, ref.operators_spilled);
  /* files and bytes differ (the in-process sort's runs are cut from
   * other batches): some of both */
  CHECK(s.operator_spill_files >= s.operators_spilled && s.operator_spilled_bytes > 0);
  fsh_plan_result_reset(&ref);
  /* the result shuffle: released by its reader */
  fsh_shuffle_backend *b = client_backend(&c, FSH_TASK_BACKEND_FLIGHT);
  if (s.n_result > 0) CHECK_OK(fsh_shuffle_release(b, s.result[0].shuffle_id, &err));
  fsh_shuffle_backend_destroy(b);
  fsh_sched_job_status_reset(&s);
  fsh_plan_free(p);
  stop_cluster(&c);
  CHECK_EQ_INT(fsh_test_dir_entries(dir), 0);
  CHECK_EQ_INT(rmdir(dir), 0);
}

/* A job that ends cancels its tasks still running: three long scan tasks
 * (one per worker, a slot each) over the fs backend, one on the worker
 * without an fs directory -- it fails, and with max_attempts 1 so does the
 * job; the two others, still running, are cancelled on their workers
 * (they end with ECANCELED "cancelled", as their workers' task state
 * says) and leave no file behind. */
static void job_end_cancels_running_tasks(void) {
  cluster c;
  start_cluster_with(&c, 0, NULL);
  wait_workers(&c);
  static const char text[] =
      "{\"partitions\": 3, \"nodes\": ["
      "{\"id\": \"t\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 30000000, "
      "\"batch_rows\": 4096, \"partitions\": 3, \"key_range\": 5000, \"seed\": 5},"
      "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 3},"
      "{\"op\": \"aggregate\", \"keys\": [\"key\"], \"aggs\": [{\"fn\": \"count_star\"}], "
      "\"local\": true}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  fsh_buffer *plan = NULL;
  fsh_plan_job_options jo = {.name = "cancelled", .backend = FSH_TASK_BACKEND_FS,
                             .max_attempts = 1, .slots_per_worker = 1};
  if (p) CHECK_OK(fsh_plan_job_plan(p, &jo, &plan, &err));
  uint64_t id = 0;
  if (plan) CHECK_OK(fsh_sched_driver_submit(c.d, plan->data, plan->size, &id, &err));
  fsh_buffer_unref(plan);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_FAILED);
  CHECK(s.error && strstr(s.error, "--fs-dir"));
  if (s.n_stages >= 1) CHECK_EQ_INT(s.stages[0].tasks_done, 0);
  fsh_sched_job_status_reset(&s);
  /* the running ones were cancelled: each of the two fs workers says so */
  int got[N_WORKERS] = {0};
  for (int t = 0; t < 1000; t++) {
    for (int i = 0; i < N_WORKERS; i++) got[i] = atomic_load(&c.hook[i].cancelled);
    if (got[1] == 1 && got[2] == 1) break;
    usleep(10000);
  }
  CHECK_EQ_INT(got[0], 0);
  CHECK_MSG(got[1] == 1 && got[2] == 1, "cancelled tasks: worker 1 %d, worker 2 %d (1 each "
            "expected)", got[1], got[2]);
  fsh_plan_free(p);
  stop_cluster(&c);
}

/* Plan-fragment JobPlans the driver refuses at submit, naming the stage
 * and what is wrong. */
static void bad_job_plans(void) {
  fsh_error err;
  fsh_sched_driver *d = NULL;
  fsh_sched_driver_options o = {.listen = "127.0.0.1:0"};
  CHECK_OK(fsh_sched_driver_start(&o, &d, &err));
  if (!d) return;
  fsh_buffer *frag = fsh_buffer_copy("\x08\x01", 2); /* opaque to the driver */
  int in0[1] = {0};
  int32_t node[1] = {5};
  struct {
    fsh_sched_plan_stage st[2];
    const char *want;
  } cases[] = {
      /* 3 tasks reading a 2-partition stage */
      {{{.fragment = frag, .n_tasks = 2, .n_partitions = 2},
        {.fragment = frag, .n_tasks = 3, .n_partitions = 1, .n_inputs = 1, .input_stages = in0,
         .input_nodes = node, .result = true}},
       "has 2 partitions"},
      /* a scatter of a stage without the extra (samples) partition */
      {{{.fragment = frag, .n_tasks = 2, .n_partitions = 2},
        {.fragment = frag, .n_tasks = 2, .n_partitions = 4, .n_inputs = 1, .input_stages = in0,
         .input_nodes = node, .result = true, .scatter = true}},
       "scatters stage 1 of 2 partitions"},
      /* reading the job's result */
      {{{.fragment = frag, .n_tasks = 2, .n_partitions = 2, .result = true},
        {.fragment = frag, .n_tasks = 2, .n_partitions = 2, .n_inputs = 1, .input_stages = in0,
         .input_nodes = node}},
       "is the job's result"},
      /* no tasks */
      {{{.fragment = frag, .n_tasks = 0, .n_partitions = 2},
        {.fragment = frag, .n_tasks = 2, .n_partitions = 2, .n_inputs = 1, .input_stages = in0,
         .input_nodes = node, .result = true}},
       "0 tasks"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fsh_sched_plan_job pj = {.n_stages = 2, .stages = cases[i].st,
                             .backend = FSH_TASK_BACKEND_FLIGHT};
    fsh_buffer *plan = NULL;
    CHECK_OK(fsh_sched_plan_job_plan(&pj, &plan, &err));
    uint64_t id = 0;
    int rc = plan ? fsh_sched_driver_submit(d, plan->data, plan->size, &id, &err) : -1;
    CHECK_MSG(rc == EINVAL && strstr(err.message, "plan-fragment") &&
                  strstr(err.message, cases[i].want),
              "case %zu: %d %s", i, rc, err.message);
    fsh_buffer_unref(plan);
  }
  fsh_buffer_unref(frag);
  fsh_sched_driver_stop(d, 1000);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"plans_flight", plans_flight},
      {"plans_fs", plans_fs},
      {"plans_flight_merged", plans_flight_merged},
      {"plan_merge_policies", plan_merge_policies},
      {"malformed_bodies", malformed_bodies},
      {"bad_job_plans", bad_job_plans},
      {"job_end_cancels_running_tasks", job_end_cancels_running_tasks},
      {"operator_spill_reported", operator_spill_reported},
      {"superseded_plan_task_cancelled", superseded_plan_task_cancelled},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
