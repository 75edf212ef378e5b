/* test_job_limit.c -- the driver's global limit (src/sched/job_limit.c,
 * sched.h "global limits") on a job built by hand, step by step, without
 * workers: the tasks' ends, losses and re-runs are played as the
 * scheduler and the lineage would (fsh_job_output_lost is the real one),
 * and after each step the stage is checked against what the contract
 * says -- which tasks are skipped, which attempts are cancelled (queued
 * "cancel", slot released), the metadata's map states, the stage's
 * verification sums, whether the stage is complete. Unordered and ordered
 * limits, n = 0, a counted output lost and then skipped (its rows taken
 * out of the sums), and a lost output re-run with fewer rows that leaves
 * the stage short: the skipped tasks are pending again. Also the running
 * attempts of a producer that n = 0 makes unneeded: cancelled before its
 * release (fsh_job_cancel_unneeded). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <flightshuffle/arrow.h>
#include <flightshuffle/shuffle.h>

#include "sched/job_internal.h"
#include "test.h"

#define URI "grpc://w1:7000"

typedef struct rig {
  fsh_sched_driver d;
  driver_worker w;
  sched_job *j;
} rig;

/* A driver with one alive worker (id 1) and a job of one limited
 * plan-fragment stage of n_tasks tasks writing 1 partition. */
static void rig_init(rig *r, int32_t n_tasks, int64_t limit, bool ordered) {
  fsh_error err;
  memset(r, 0, sizeof *r);
  CHECK_EQ_INT(pthread_cond_init(&r->d.sched_cv, NULL), 0);
  r->w = (driver_worker){.id = 1, .uri = (char *)URI, .state = FSH_SCHED_WORKER_ALIVE};
  r->d.workers = &r->w;
  r->d.n = 1;
  sched_job *j = r->j = fsh_calloc(1, sizeof *j);
  CHECK(j != NULL);
  if (!j) return;
  j->id = 1;
  j->state = FSH_SCHED_JOB_RUNNING;
  j->max_attempts = 4;
  j->slots = 2;
  j->n_stages = 1;
  j->stages = fsh_calloc(1, sizeof *j->stages);
  jstage *st = &j->stages[0];
  st->id = 1;
  st->kind = KIND_PLAN;
  st->n_tasks = n_tasks;
  st->n_parts = 1;
  st->shuffle_id = 77;
  st->input = -1;
  st->limited = true;
  st->limit_rows = limit;
  st->limit_ordered = ordered;
  st->tasks = fsh_calloc((size_t)n_tasks, sizeof *st->tasks);
  st->part_rows = fsh_calloc(1, sizeof *st->part_rows);
  st->part_sums = fsh_calloc(1, sizeof *st->part_sums);
  st->part_bytes = fsh_calloc(1, sizeof *st->part_bytes);
  st->counted = fsh_calloc((size_t)n_tasks, sizeof *st->counted);
  CHECK_OK(fsh_shuffle_meta_new(st->shuffle_id, n_tasks, 1, &st->meta, &err));
}

static void rig_free(rig *r) {
  fsh_job_free(r->j);
  fsh_free(r->d.cancels);
  pthread_cond_destroy(&r->d.sched_cv);
}

static jstage *stage(rig *r) { return &r->j->stages[0]; }

/* Task t launched on the worker (as plan_round does). */
static void launch(rig *r, int32_t t) {
  jtask *k = &stage(r)->tasks[t];
  fsh_error err;
  k->attempt = k->next_attempt++;
  CHECK_OK(fsh_shuffle_meta_begin_attempt(stage(r)->meta, t, k->attempt, &err));
  k->state = T_RUNNING;
  k->worker_id = 1;
  r->w.running++;
}

/* Task t (running) ends with `rows` rows written (as a done answer does:
 * the metadata, the sums once per task, then the limit's check). */
static void done(rig *r, int32_t t, int64_t rows) {
  jstage *st = stage(r);
  jtask *k = &st->tasks[t];
  CHECK_EQ_INT(k->state, T_RUNNING);
  fsh_error err;
  int64_t bytes = rows * 10;
  fsh_map_output o = {.shuffle_id = st->shuffle_id, .map_id = t, .attempt = k->attempt,
                      .location = URI, .n_partitions = 1, .rows = &rows, .bytes = &bytes};
  fsh_shuffle_meta_add_result added;
  CHECK_OK(fsh_shuffle_meta_add(st->meta, &o, &added, &err));
  CHECK_EQ_INT(added, FSH_SHUFFLE_META_ACCEPTED);
  r->w.running--;
  k->out_rows = rows;
  k->checksum = (uint64_t)rows * 1000003u;
  k->bytes = bytes;
  if (!st->counted[t]) {
    st->counted[t] = true;
    st->part_rows[0] += rows;
    st->part_sums[0] += k->checksum;
    st->part_bytes[0] += bytes;
  }
  k->state = T_DONE;
  st->n_done++;
  fsh_job_limit_check(&r->d, r->j, 0);
}

/* The task states as a string: P pending, R running, D done, S skipped. */
static const char *states(rig *r) {
  static char s[64];
  jstage *st = stage(r);
  for (int32_t t = 0; t < st->n_tasks; t++) s[t] = "PRDS"[st->tasks[t].state];
  s[st->n_tasks] = 0;
  return s;
}

static void check_states(rig *r, const char *want, int line) {
  const char *got = states(r);
  CHECK_MSG(strcmp(got, want) == 0, "line %d: tasks %s, expected %s", line, got, want);
  /* the metadata agrees: skipped maps SKIPPED, done ones COMPLETE */
  jstage *st = stage(r);
  int32_t skipped = 0;
  for (int32_t t = 0; t < st->n_tasks; t++) {
    fsh_shuffle_meta_map_info info;
    fsh_error err;
    CHECK_OK(fsh_shuffle_meta_map(st->meta, t, &info, &err));
    skipped += want[t] == 'S';
    if (want[t] == 'S') CHECK_EQ_INT(info.state, FSH_SHUFFLE_META_MAP_SKIPPED);
    if (want[t] == 'D') CHECK_EQ_INT(info.state, FSH_SHUFFLE_META_MAP_COMPLETE);
    if (want[t] == 'P' || want[t] == 'R')
      CHECK(info.state == FSH_SHUFFLE_META_MAP_PENDING || info.state == FSH_SHUFFLE_META_MAP_LOST);
  }
  CHECK_EQ_INT(st->n_skipped, skipped);
  CHECK_EQ_INT(fsh_shuffle_meta_n_skipped(st->meta), skipped);
}
#define STATES(r, want) check_states(r, want, __LINE__)

/* Unordered, n = 10 over 5 tasks: the rows of any done tasks count. A
 * running task is cancelled when skipped; a lost output leaves the stage
 * incomplete; its re-run with fewer rows (2, not 6) leaves the done tasks
 * short with nothing to run: the skipped tasks are pending again, and
 * skipped anew once another task brings the rows. */
static void unordered(void) {
  rig r;
  rig_init(&r, 5, 10, false);
  launch(&r, 0);
  launch(&r, 1);
  done(&r, 1, 6);
  STATES(&r, "RDPPP");
  CHECK(!fsh_job_stage_complete(r.j, 0));
  launch(&r, 2);
  done(&r, 2, 6); /* 12 >= 10: 0 (running) cancelled, 3 and 4 never launched */
  STATES(&r, "SDDSS");
  CHECK_EQ_INT(stage(&r)->n_cancelled, 1);
  CHECK_EQ_INT(r.d.n_cancels, 1);
  if (r.d.n_cancels == 1) {
    CHECK_EQ_INT(r.d.cancels[0].task, 0);
    CHECK(strcmp(r.d.cancels[0].uri, URI) == 0);
  }
  CHECK_EQ_INT(r.w.running, 0); /* its slot is free */
  CHECK(fsh_job_stage_complete(r.j, 0));
  CHECK(fsh_job_limit_reached(stage(&r)));
  /* the output of task 2 is lost (a reader found it missing) */
  CHECK(fsh_job_output_lost(&r.d, r.j, 0, 2, 0, URI, "gone"));
  STATES(&r, "SDPSS");
  CHECK(!fsh_job_stage_complete(r.j, 0));
  fsh_job_limit_check(&r.d, r.j, 0); /* 6 < 10, task 2 to run: nothing */
  STATES(&r, "SDPSS");
  launch(&r, 2);
  done(&r, 2, 2); /* re-run: 8 < 10 with nothing left to run */
  STATES(&r, "PDDPP");
  CHECK(!fsh_job_stage_complete(r.j, 0));
  CHECK_EQ_INT(stage(&r)->part_rows[0], 12); /* counted once (its first rows) */
  launch(&r, 0);
  launch(&r, 3);
  done(&r, 3, 5); /* 13: 0 cancelled again, 4 skipped */
  STATES(&r, "SDDDS");
  CHECK_EQ_INT(stage(&r)->n_cancelled, 2);
  CHECK(fsh_job_stage_complete(r.j, 0));
  rig_free(&r);
}

/* Ordered, n = 10 over 4 tasks: only a prefix of done tasks counts. Tasks
 * 1 and 2 (40 rows) do not count while task 0 runs; task 0's 3 rows make
 * the prefix 0..1 hold 23: task 3 is skipped, task 2 (done) stays. Then
 * task 2's output is lost: the prefix still holds the rows, so task 2 is
 * skipped instead of recomputed, and its counted rows leave the sums. */
static void ordered(void) {
  rig r;
  rig_init(&r, 4, 10, true);
  launch(&r, 0);
  launch(&r, 1);
  launch(&r, 2);
  done(&r, 1, 20);
  done(&r, 2, 20);
  STATES(&r, "RDDP");
  CHECK(!fsh_job_limit_reached(stage(&r)));
  done(&r, 0, 3);
  STATES(&r, "DDDS");
  CHECK(fsh_job_stage_complete(r.j, 0));
  CHECK_EQ_INT(stage(&r)->part_rows[0], 43);
  CHECK(fsh_job_output_lost(&r.d, r.j, 0, 2, 0, URI, "gone"));
  STATES(&r, "DDPS");
  fsh_job_limit_check(&r.d, r.j, 0);
  STATES(&r, "DDSS");
  CHECK_EQ_INT(stage(&r)->part_rows[0], 23);
  CHECK_EQ_INT(stage(&r)->part_bytes[0], 230);
  CHECK_EQ_INT(stage(&r)->part_sums[0], 23u * 1000003u);
  CHECK(fsh_job_stage_complete(r.j, 0));
  /* the prefix itself loses task 0: no longer complete, task 0 re-runs */
  CHECK(fsh_job_output_lost(&r.d, r.j, 0, 0, 0, URI, "gone"));
  fsh_job_limit_check(&r.d, r.j, 0);
  STATES(&r, "PDSS");
  CHECK(!fsh_job_stage_complete(r.j, 0));
  launch(&r, 0);
  done(&r, 0, 3);
  STATES(&r, "DDSS");
  CHECK(fsh_job_stage_complete(r.j, 0));
  CHECK_EQ_INT(r.d.n_cancels, 0); /* nothing ran when skipped */
  rig_free(&r);
}

/* n = 0: every task is skipped before any launch; the stage is complete. */
static void limit_zero(void) {
  rig r;
  rig_init(&r, 3, 0, true);
  fsh_job_limit_check(&r.d, r.j, 0);
  STATES(&r, "SSS");
  CHECK(fsh_job_stage_complete(r.j, 0));
  rig_free(&r);
}

/* The limited stage reading a producer (stage 1: 3 tasks, two running)
 * whose rows n = 0 makes unneeded: the limit skips its own tasks, the
 * producer is complete by its consumers, and fsh_job_cancel_unneeded
 * cancels the producer's running attempts (queued "cancel", slots
 * released, tasks pending) -- so that release_round sends its release only
 * a round later, behind the cancels; asked again, nothing is left to
 * cancel. The edge_limits flake of test_plan_limit.c: the release went
 * out while the maps ran, and a map opening its writer after it left an
 * output no release removed. */
static void upstream_of_limit_zero(void) {
  rig r;
  rig_init(&r, 2, 0, false);
  fsh_error err;
  jstage *grown = fsh_realloc(r.j->stages, 2 * sizeof *grown);
  CHECK(grown != NULL);
  if (!grown) {
    rig_free(&r);
    return;
  }
  r.j->stages = grown;
  r.j->n_stages = 2;
  jstage *up = &grown[1];
  *up = (jstage){.id = 2, .kind = KIND_PLAN, .n_tasks = 3, .n_parts = 1, .shuffle_id = 78,
                 .input = -1, .consumed = true};
  up->tasks = fsh_calloc(3, sizeof *up->tasks);
  CHECK(up->tasks != NULL);
  CHECK_OK(fsh_shuffle_meta_new(up->shuffle_id, 3, 1, &up->meta, &err));
  jstage *lim = &grown[0];
  lim->input = 1;
  lim->n_inputs = 1;
  lim->inputs[0] = 1;
  for (int32_t t = 0; up->tasks && t < 2; t++) {
    jtask *k = &up->tasks[t];
    k->attempt = k->next_attempt++;
    k->state = T_RUNNING;
    k->worker_id = 1;
    r.w.running++;
  }
  CHECK(!fsh_job_stage_complete(r.j, 1)); /* its reader still to run */
  fsh_job_limit_check(&r.d, r.j, 0);
  STATES(&r, "SS");
  CHECK(fsh_job_stage_complete(r.j, 0) && fsh_job_stage_complete(r.j, 1));
  CHECK_EQ_INT(r.d.n_cancels, 0);
  CHECK(fsh_job_cancel_unneeded(&r.d, r.j, up));
  CHECK_EQ_INT(r.d.n_cancels, 2);
  for (int32_t i = 0; i < r.d.n_cancels && i < 2; i++) {
    CHECK_EQ_INT(r.d.cancels[i].stage_id, 2);
    CHECK_EQ_INT(r.d.cancels[i].task, i);
    CHECK(strcmp(r.d.cancels[i].uri, URI) == 0);
  }
  CHECK_EQ_INT(r.w.running, 0);
  for (int32_t t = 0; up->tasks && t < 3; t++) CHECK_EQ_INT(up->tasks[t].state, T_PENDING);
  CHECK(!fsh_job_cancel_unneeded(&r.d, r.j, up)); /* the release may go now */
  CHECK_EQ_INT(r.d.n_cancels, 2);
  rig_free(&r);
}

/* Fewer rows than n in all: every task runs, none is skipped, and the
 * stage is complete with what there is (nothing was skipped: no
 * un-skipping). */
static void short_input(void) {
  rig r;
  rig_init(&r, 3, 100, false);
  for (int32_t t = 0; t < 3; t++) launch(&r, t);
  for (int32_t t = 0; t < 3; t++) done(&r, t, 4);
  STATES(&r, "DDD");
  CHECK(fsh_job_stage_complete(r.j, 0));
  CHECK(!fsh_job_limit_reached(stage(&r)));
  rig_free(&r);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"unordered", unordered},
      {"ordered", ordered},
      {"limit_zero", limit_zero},
      {"short_input", short_input},
      {"upstream_of_limit_zero", upstream_of_limit_zero},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
