/* test_plan_limit.c -- a global limit on a cluster (sched.h "global
 * limits"): an in-process driver and three in-process workers run plans
 * ending in a limit as jobs, over the flight and the fs backends. The
 * driver stops the limit's upstream stage once its done tasks wrote n
 * rows: the result has n rows, every one a row of the limit's input (a
 * single-process run of the plan up to it; an ordered input: exactly the
 * reference's first n rows), and the stage launched fewer tasks than it
 * has (its skipped tasks counted in the status, pending ones never
 * launched, running ones cancelled on their workers). Also: n larger than
 * the input (nothing skipped), n = 0 (no task runs), an empty input, a
 * limit after a filter that keeps few rows (several tasks must finish
 * first), a worker declared dead after finishing an output that counted
 * (its task recomputed or skipped: still n rows), and the comparison of
 * a limit's result, which a wrong result cannot pass; and plans ending in
 * a local limit, top-N, sort or aggregate (their result depends on the
 * partitioning) compared as the plan allows. */
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

#include "plan_cluster_fixture.h"

/* Submits p as a job (slots per worker: slots, 0 the default). */
static uint64_t submit(cluster *c, const fsh_plan *p, fsh_task_backend kind, int32_t slots) {
  fsh_error err;
  fsh_buffer *plan = NULL;
  fsh_plan_job_options jo = {.name = "limit", .backend = kind, .slots_per_worker = slots};
  CHECK_OK(fsh_plan_job_plan(p, &jo, &plan, &err));
  uint64_t id = 0;
  if (plan) CHECK_OK(fsh_sched_submit(fsh_sched_driver_uri(c->d), NULL, plan->data, plan->size,
                                      &id, &err));
  fsh_buffer_unref(plan);
  return id;
}

/* What a job of a limit did: its result's rows, the limited stage's
 * figures. */
typedef struct outcome {
  int64_t rows, ref_rows;
  int32_t total, done, skipped, cancelled, recomputed;
} outcome;

/* Waits for job id of p, checks it succeeded and verified, reads its
 * result and compares it with the reference (fsh_plan_result_compare:
 * for a limit of an unordered input, count and membership). The limited
 * stage is the one before the result. */
static outcome finish(cluster *c, const char *name, const fsh_plan *p, uint64_t id,
                      fsh_task_backend kind) {
  outcome o = {0};
  fsh_error err;
  int rc = fsh_sched_driver_wait_job(c->d, id, 30000, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c->d), NULL, id, false, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED && s.verified, "%s: state %d verified %d: %s",
            name, (int)s.state, (int)s.verified, s.error ? s.error : "");
  /* the limit's stage: the one before the result (its upstream a scan, or
   * a repartition's reduce side) */
  CHECK_MSG(s.n_stages == 2 || s.n_stages == 3, "%s: %d stages", name, (int)s.n_stages);
  if (s.n_stages >= 2) {
    const fsh_sched_stage_status *x = &s.stages[s.n_stages - 2];
    o.total = x->tasks_total, o.done = x->tasks_done, o.skipped = x->tasks_skipped;
    o.cancelled = x->attempts_cancelled;
    CHECK_MSG(o.done + o.skipped == o.total && x->tasks_running == 0,
              "%s: %d done + %d skipped of %d tasks (%d running)", name, o.done, o.skipped,
              o.total, x->tasks_running);
    CHECK_MSG(o.cancelled <= o.skipped, "%s: %d cancelled, %d skipped", name, o.cancelled,
              o.skipped);
    for (int32_t i = 0; i < s.n_stages; i++)
      if (i != s.n_stages - 2) CHECK_EQ_INT(s.stages[i].tasks_skipped, 0);
  }
  o.recomputed = s.n_recomputed;
  fsh_shuffle_backend *b = client_backend(c, kind);
  fsh_plan_result got, ref;
  memset(&got, 0, sizeof got);
  rc = fsh_plan_job_result(p, &s, b, &got, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  fsh_plan_run_options ro = {.reference = true};
  CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
  if (rc == 0) {
    rc = fsh_plan_result_compare(p, &got, &ref, &err);
    CHECK_MSG(rc == 0, "%s (%s): %s", name, fsh_task_backend_name(kind), err.message);
  }
  o.rows = got.rows;
  o.ref_rows = ref.rows;
  if (s.n_result > 0) CHECK_OK(fsh_shuffle_release(b, s.result[0].shuffle_id, &err));
  fsh_plan_result_reset(&got);
  fsh_plan_result_reset(&ref);
  fsh_sched_job_status_reset(&s);
  fsh_shuffle_backend_destroy(b);
  return o;
}

static fsh_plan *plan_of(const char *text) {
  fsh_plan *p = NULL;
  fsh_error err;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  return p;
}

/* Scan (rows in 24 partitions), a filter keeping amount > min_amount, the
 * limit n: the limit's input is ordered (a scan's partitions). */
static fsh_plan *scan_limit(int64_t rows, int64_t min_amount, int64_t n) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": %lld, "
           "\"batch_rows\": 1000, \"partitions\": 24, \"seed\": 7},"
           "{\"op\": \"filter\", \"predicate\": {\"op\": \">\", \"args\": [{\"col\": "
           "\"amount\"}, {\"lit\": %lld}]}},"
           "{\"op\": \"limit\", \"n\": %lld}]}",
           (long long)rows, (long long)min_amount, (long long)n);
  return plan_of(text);
}

/* The same with a hash repartition into 24 partitions (on id) first: the
 * limit's input is unordered, its stage is the repartition's reduce
 * side. */
static fsh_plan *hashed_limit(int64_t rows, int64_t min_amount, int64_t n) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": %lld, "
           "\"batch_rows\": 1000, \"partitions\": 4, \"seed\": 8},"
           "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"id\"], \"partitions\": 24},"
           "{\"op\": \"filter\", \"predicate\": {\"op\": \">\", \"args\": [{\"col\": "
           "\"amount\"}, {\"lit\": %lld}]}},"
           "{\"op\": \"limit\", \"n\": %lld}]}",
           (long long)rows, (long long)min_amount, (long long)n);
  return plan_of(text);
}

/* The limited stage's job stage and its limit as the driver sees it. */
static void check_stages(const fsh_plan *p, int64_t n, bool ordered) {
  fsh_plan_job_stages js;
  fsh_error err;
  CHECK_OK(fsh_plan_job_stages_get(p, &js, &err));
  int limited = 0;
  for (int i = 0; i < js.n; i++) {
    if (!js.stages[i].limited) continue;
    limited++;
    CHECK_EQ_INT(js.stages[i].limit_rows, n);
    CHECK_EQ_INT(js.stages[i].limit_ordered, ordered);
    CHECK_EQ_INT(js.stages[i].n_partitions, 1);
    CHECK(!js.stages[i].result);
  }
  CHECK_EQ_INT(limited, 1);
  fsh_plan_job_stages_free(&js);
}

/* Many upstream tasks, n small: n rows, all from the input, and the
 * driver launched fewer of the limit's stage's tasks than it has. */
static void small_limits(fsh_task_backend kind) {
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  fsh_plan *ordered = scan_limit(48000, -1001, 50);
  fsh_plan *unordered = hashed_limit(48000, -1001, 50);
  check_stages(ordered, 50, true);
  check_stages(unordered, 50, false);
  const char *names[2] = {"ordered limit 50 of 24 tasks", "unordered limit 50 of 24 tasks"};
  fsh_plan *plans[2] = {ordered, unordered};
  for (int i = 0; i < 2; i++) {
    if (!plans[i]) continue;
    outcome o = finish(&c, names[i], plans[i], submit(&c, plans[i], kind, 0), kind);
    CHECK_EQ_INT(o.rows, 50);
    CHECK_EQ_INT(o.ref_rows, 50);
    CHECK_EQ_INT(o.total, 24);
    /* 2000 rows a task: one done task has the rows. Unordered: the first
     * done task's answer stops the stage (the others skipped, cancelled
     * if running); ordered: task 0's does (launched first), tasks done
     * before it count too. Either way fewer tasks were launched than the
     * stage has. */
    CHECK_MSG(o.skipped > 0 && o.done + o.cancelled < o.total && (i == 0 || o.done == 1),
              "%s: %d done, %d skipped (%d cancelled) of %d", names[i], o.done, o.skipped,
              o.cancelled, o.total);
  }
  fsh_plan_free(ordered);
  fsh_plan_free(unordered);
  stop_cluster(&c);
}

static void small_limits_flight(void) { small_limits(FSH_TASK_BACKEND_FLIGHT); }
static void small_limits_fs(void) { small_limits(FSH_TASK_BACKEND_FS); }

/* n larger than the input: every task runs, nothing is skipped, every row
 * comes back; n = 0: no task of the stage runs, no row; an empty input:
 * every task runs (0 rows each), 0 rows. */
static void edge_limits(void) {
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  struct {
    const char *name;
    fsh_plan *p;
    int64_t rows;
    bool none_run, all_run;
  } cases[] = {
      {"unordered n > input", hashed_limit(6000, -1001, 100000), 6000, false, true},
      {"ordered n > input", scan_limit(6000, -1001, 100000), 6000, false, true},
      {"unordered n = 0", hashed_limit(6000, -1001, 0), 0, true, false},
      {"ordered n = 0", scan_limit(6000, -1001, 0), 0, true, false},
      {"empty input", scan_limit(0, -1001, 10), 0, false, true},
      {"all rows filtered out", hashed_limit(6000, 5000, 10), 0, false, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!cases[i].p) continue;
    fsh_task_backend kind = i % 2 ? FSH_TASK_BACKEND_FS : FSH_TASK_BACKEND_FLIGHT;
    outcome o = finish(&c, cases[i].name, cases[i].p, submit(&c, cases[i].p, kind, 0), kind);
    CHECK_MSG(o.rows == cases[i].rows && o.ref_rows == cases[i].rows, "%s: %lld rows (reference "
              "%lld), %lld expected", cases[i].name, (long long)o.rows, (long long)o.ref_rows,
              (long long)cases[i].rows);
    if (cases[i].all_run)
      CHECK_MSG(o.done == o.total && o.skipped == 0, "%s: %d done, %d skipped of %d",
                cases[i].name, o.done, o.skipped, o.total);
    if (cases[i].none_run)
      CHECK_MSG(o.done == 0 && o.skipped == o.total && o.cancelled == 0,
                "%s: %d done, %d skipped (%d cancelled) of %d", cases[i].name, o.done,
                o.skipped, o.cancelled, o.total);
    fsh_plan_free(cases[i].p);
  }
  stop_cluster(&c);
}

/* The rows per partition of the limit's input (the plan up to the node
 * before the limit, run in process with its partitions): max and total. */
static void input_spread(const char *text_without_limit, int64_t *max, int64_t *total) {
  fsh_plan *p = plan_of(text_without_limit);
  fsh_plan_result r;
  fsh_error err;
  *max = *total = 0;
  if (!p) return;
  CHECK_OK(fsh_plan_run(p, NULL, &r, &err));
  int64_t b = 0;
  for (int32_t part = 0; part < r.n_partitions; part++) {
    int64_t rows = 0;
    for (int64_t k = 0; k < r.partition_batches[part]; k++) rows += r.batches[b++]->length;
    if (rows > *max) *max = rows;
    *total += rows;
  }
  fsh_plan_result_reset(&r);
  fsh_plan_free(p);
}

/* A limit after a filter that keeps few rows: no task has n rows, so
 * several must finish before the limit has them (at least
 * ceil(n / the most rows a task has)); the others are still skipped. */
static void sparse_limit(void) {
  static const char base[] =
      "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 48000, "
      "\"batch_rows\": 1000, \"partitions\": 4, \"seed\": 8},"
      "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"id\"], \"partitions\": 24},"
      "{\"op\": \"filter\", \"predicate\": {\"op\": \">\", \"args\": [{\"col\": "
      "\"amount\"}, {\"lit\": 990}]}}]}"; /* (hashed_limit's, without the limit) */
  int64_t max = 0, total = 0;
  input_spread(base, &max, &total);
  const int64_t n = 30;
  /* about 10 / 2001 of 2000 rows a task: ~10 */
  CHECK_MSG(max > 0 && max < n && total > 2 * n, "the filter keeps %lld rows, at most %lld a "
            "task: the case needs fewer than %lld a task and more than %lld in all",
            (long long)total, (long long)max, (long long)n, (long long)(2 * n));
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  fsh_plan *p = hashed_limit(48000, 990, n);
  if (p) {
    outcome o = finish(&c, "sparse limit", p, submit(&c, p, FSH_TASK_BACKEND_FLIGHT, 1),
                       FSH_TASK_BACKEND_FLIGHT);
    CHECK_EQ_INT(o.rows, n);
    int64_t need = max > 0 ? (n + max - 1) / max : 0;
    CHECK_MSG(o.done >= need && o.done >= 2 && o.skipped > 0,
              "sparse limit: %d done (at least %lld needed), %d skipped of %d", o.done,
              (long long)need, o.skipped, o.total);
  }
  fsh_plan_free(p);
  stop_cluster(&c);
}

/* A worker holding a done output that counted toward n is declared dead
 * (as if killed) while the stage still needs rows: the driver loses that
 * output. With n every row the filter keeps (all tasks needed) its task
 * must run again (recomputed); with n = 40 (~4 of 24 tasks needed) it
 * runs again or the limit does without it (skipped). Either way the
 * result has n rows, exactly the reference's (an ordered limit). */
static int lost_counted_output_n(bool all_needed) {
  static const char base[] =
      "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 48000, "
      "\"batch_rows\": 1000, \"partitions\": 24, \"seed\": 7},"
      "{\"op\": \"filter\", \"predicate\": {\"op\": \">\", \"args\": [{\"col\": "
      "\"amount\"}, {\"lit\": 990}]}}]}"; /* (scan_limit's, without the limit) */
  int64_t max = 0, total = 0;
  input_spread(base, &max, &total);
  int64_t n = all_needed ? total : 40;
  CHECK_MSG(total > 2 * 40 && max < 40, "the filter keeps %lld rows, at most %lld a task",
            (long long)total, (long long)max);
  int recomputed = 0;
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  /* ~10 rows a task of 2000: n needs several tasks (a slot each) */
  fsh_plan *p = scan_limit(48000, 990, n);
  fsh_error err;
  uint64_t id = p ? submit(&c, p, FSH_TASK_BACKEND_FLIGHT, 1) : 0;
  int victim = -1;
  for (int t = 0; p && t < 5000 && victim < 0; t++) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
    bool counting = s.n_stages == 2 && s.stages[0].tasks_done >= 1 &&
                    s.stages[0].tasks_done + s.stages[0].tasks_skipped < s.stages[0].tasks_total;
    bool over = s.state != FSH_SCHED_JOB_RUNNING ||
                (s.n_stages == 2 && s.stages[0].tasks_done + s.stages[0].tasks_skipped ==
                                        s.stages[0].tasks_total);
    fsh_sched_job_status_reset(&s);
    if (over) break;
    /* a worker holding an output of the limit's stage (its only shuffle
     * so far) that the driver has recorded as done: its task-done was
     * taken (not one still on its way, which would make the loss a retry
     * of a running attempt rather than a lost done output) */
    for (int i = 0; counting && i < N_WORKERS && victim < 0; i++) {
      fsh_shuffle_store_stats st;
      fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(c.w[i]), &st);
      if (st.map_outputs > 0 && atomic_load(&c.hook[i].done_recorded) > 0) victim = i;
    }
    if (victim < 0) usleep(1000);
  }
  CHECK_MSG(victim >= 0, "the stage was never caught with a done task and rows to go");
  if (victim >= 0)
    CHECK_OK(fsh_sched_driver_declare_dead(c.d, fsh_shuffle_worker_uri(c.w[victim]),
                                           "declared by the test", &err));
  if (p) {
    outcome o = finish(&c, "lost counted output", p, id, FSH_TASK_BACKEND_FLIGHT);
    CHECK_EQ_INT(o.rows, n);
    CHECK_EQ_INT(o.ref_rows, n);
    if (all_needed) /* every task ran to its end */
      CHECK_MSG(o.skipped == 0 && o.done == o.total, "skipped %d, done %d of %d", o.skipped,
                o.done, o.total);
    else /* the lost output's task ran again, or the limit did without it */
      CHECK_MSG(o.recomputed > 0 || o.skipped > 0, "recomputed %d, skipped %d", o.recomputed,
                o.skipped);
    recomputed = o.recomputed;
  }
  fsh_plan_free(p);
  stop_cluster_but(&c, victim);
  return recomputed;
}

static void lost_counted_output(void) { (void)lost_counted_output_n(false); }

/* Every row needed: the lost output's task must run again. The victim is
 * a worker holding an output the driver recorded as done, so its loss is
 * a lost done output; the stage could still end between the choice and
 * the declaration (then nothing is lost): the scenario is run again, at
 * most 5 times, until a done output was lost -- every run must end with
 * every row. */
static void lost_output_every_row_needed(void) {
  int recomputed = 0;
  for (int run = 0; run < 5 && recomputed == 0; run++) recomputed = lost_counted_output_n(true);
  CHECK_MSG(recomputed > 0, "no run lost a done output (nothing recomputed in 5 runs)");
}

/* fsh_plan_result_compare on a limit of an unordered input: the
 * reference's rows pass, and so do other rows of the input (a distributed
 * limit may take them); a row not in the input, a row repeated more often
 * than the input has it, or one row too few or too many do not. */
static void compare_catches_wrong_limits(void) {
  fsh_plan *p = hashed_limit(6000, -1001, 30);
  static const char scan[] =
      "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 6000, "
      "\"batch_rows\": 1000, \"partitions\": 4, \"seed\": %d}]}";
  char text[2][300];
  snprintf(text[0], sizeof text[0], scan, 8); /* the limit's input */
  snprintf(text[1], sizeof text[1], scan, 9); /* other rows */
  fsh_plan *in = plan_of(text[0]), *other = plan_of(text[1]);
  fsh_error err;
  fsh_plan_run_options ro = {.reference = true};
  fsh_plan_result ref, all, alien;
  memset(&ref, 0, sizeof ref), memset(&all, 0, sizeof all), memset(&alien, 0, sizeof alien);
  if (p && in && other) {
    CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
    CHECK_OK(fsh_plan_run(in, &ro, &all, &err));
    CHECK_OK(fsh_plan_run(other, &ro, &alien, &err));
  }
  CHECK_EQ_INT(ref.rows, 30);
  if (all.n_batches >= 1 && all.batches[0]->length >= 100 && alien.n_batches >= 1) {
    fsh_batch *src = all.batches[0];
    /* a result: rows [a0, a0 + an) of batch A then [b0, b0 + bn) of src */
    struct {
      const char *name;
      fsh_batch *a;
      int64_t a0, an, b0, bn;
      bool ok;
    } cases[] = {
        {"the input's rows 60..89", src, 60, 10, 70, 20, true},
        {"one row too few", src, 60, 10, 70, 19, false},
        {"one row too many", src, 60, 10, 70, 21, false},
        {"row 61 twice", src, 61, 1, 61, 29, false},
        {"a row not of the input", alien.batches[0], 60, 1, 61, 29, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      fsh_batch *parts[2] = {fsh_batch_slice(cases[i].a, cases[i].a0, cases[i].an),
                             fsh_batch_slice(src, cases[i].b0, cases[i].bn)};
      CHECK(parts[0] && parts[1]);
      if (!parts[0] || !parts[1]) {
        fsh_batch_unref(parts[0]);
        fsh_batch_unref(parts[1]);
        continue;
      }
      int64_t per_part[1] = {2};
      fsh_plan_result r = {.rows = cases[i].an + cases[i].bn, .n_batches = 2, .batches = parts,
                           .partition_batches = per_part, .schema = src->schema,
                           .n_partitions = 1};
      int rc = fsh_plan_result_compare(p, &r, &ref, &err);
      CHECK_MSG((rc == 0) == cases[i].ok, "%s: %d %s", cases[i].name, rc, rc ? err.message : "");
      fsh_batch_unref(parts[0]);
      fsh_batch_unref(parts[1]);
    }
  }
  fsh_plan_result_reset(&ref);
  fsh_plan_result_reset(&all);
  fsh_plan_result_reset(&alien);
  fsh_plan_free(p);
  fsh_plan_free(in);
  fsh_plan_free(other);
}

/* Plans ending in an operator whose result depends on the partitioning
 * (a local limit over a scan's, a hash and a random repartition's
 * partitions, a local top-N, a local sort, a local aggregate whose groups
 * span partitions), run as jobs on the cluster (flight): the result read
 * back agrees with the single-process reference as the plan allows
 * (fsh_plan_result_compare; its wrong results are test_plan_compare.c's),
 * and, for the local limits over fixed partitions, each partition has
 * min(n, its input rows) rows, counted here from a naive split of the
 * scan. */
static void local_operators_cluster(void) {
  static const char scan[] = "{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 20500, "
                             "\"batch_rows\": 1000, \"partitions\": 6, \"key_range\": 300, "
                             "\"seed\": 3}";
  static const char *const tails[] = {
      "{\"op\": \"limit\", \"n\": 3500, \"local\": true}",
      "{\"op\": \"repartition\", \"by\": \"hash\", \"keys\": [\"key\"], \"partitions\": 5}, "
      "{\"op\": \"limit\", \"n\": 3000, \"local\": true}",
      "{\"op\": \"repartition\", \"by\": \"random\", \"partitions\": 4, \"seed\": 2}, "
      "{\"op\": \"limit\", \"n\": 100, \"local\": true}",
      "{\"op\": \"top_n\", \"n\": 30, \"local\": true, \"keys\": [{\"column\": \"amount\", "
      "\"descending\": true}, \"id\"]}",
      "{\"op\": \"sort\", \"local\": true, \"keys\": [\"key\", \"id\"]}",
      "{\"op\": \"aggregate\", \"local\": true, \"keys\": [\"key\"], \"aggs\": [{\"fn\": "
      "\"count_star\", \"name\": \"n\"}]}",
  };
  cluster c;
  start_cluster(&c);
  wait_workers(&c);
  for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "{\"nodes\": [%s, %s]}", scan, tails[i]);
    fsh_plan *p = plan_of(text);
    if (!p) continue;
    uint64_t id = submit(&c, p, FSH_TASK_BACKEND_FLIGHT, 0);
    fsh_error err;
    int rc = fsh_sched_driver_wait_job(c.d, id, 30000, &err);
    CHECK_MSG(rc == 0, "%s: %s", tails[i], err.message);
    fsh_sched_job_status s;
    memset(&s, 0, sizeof s);
    CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c.d), NULL, id, false, &s, &err));
    CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s: state %d: %s", tails[i], (int)s.state,
              s.error ? s.error : "");
    fsh_shuffle_backend *b = client_backend(&c, FSH_TASK_BACKEND_FLIGHT);
    fsh_plan_result got, ref;
    memset(&got, 0, sizeof got);
    memset(&ref, 0, sizeof ref);
    rc = fsh_plan_job_result(p, &s, b, &got, &err);
    CHECK_MSG(rc == 0, "%s: %s", tails[i], err.message);
    fsh_plan_run_options ro = {.reference = true};
    CHECK_OK(fsh_plan_run(p, &ro, &ref, &err));
    if (rc == 0) {
      rc = fsh_plan_result_compare(p, &got, &ref, &err);
      CHECK_MSG(rc == 0 && strstr(err.message, "compared as the plan allows"), "%s: %d %s",
                tails[i], rc, err.message);
    }
    if (rc == 0 && i == 0) { /* a scan's 6 partitions of 1000-row batches */
      int64_t at = 0;
      for (int32_t q = 0; q < got.n_partitions; q++) {
        int64_t nb = 21, lo = nb * q / 6 * 1000, hi = nb * (q + 1) / 6 * 1000, rows = 0;
        if (hi > 20500) hi = 20500;
        for (int64_t k = 0; k < got.partition_batches[q]; k++) rows += got.batches[at++]->length;
        CHECK_EQ_INT(rows, hi - lo < 3500 ? hi - lo : 3500);
      }
    }
    if (s.n_result > 0) CHECK_OK(fsh_shuffle_release(b, s.result[0].shuffle_id, &err));
    fsh_plan_result_reset(&got);
    fsh_plan_result_reset(&ref);
    fsh_sched_job_status_reset(&s);
    fsh_shuffle_backend_destroy(b);
    fsh_plan_free(p);
  }
  stop_cluster(&c);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"small_limits_flight", small_limits_flight},
      {"small_limits_fs", small_limits_fs},
      {"edge_limits", edge_limits},
      {"sparse_limit", sparse_limit},
      {"lost_counted_output", lost_counted_output},
      {"lost_output_every_row_needed", lost_output_every_row_needed},
      {"compare_catches_wrong_limits", compare_catches_wrong_limits},
      {"local_operators_cluster", local_operators_cluster},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
