/* job_limit.c -- a global limit's stage in the driver (sched.h "global
 * limits"): once the rows its done tasks wrote reach the limit (ordered:
 * the done tasks 0 .. k, a prefix), the other tasks are skipped -- pending
 * ones never launched, running attempts cancelled on their workers, the
 * maps skipped in the shuffle's metadata -- and the stage is complete;
 * if the rows fall short again with nothing left to run (a lost output
 * re-ran with fewer rows), the skipped tasks are pending again. mu held. */
#include <inttypes.h>
#include <stdio.h>

#include "sched/job_internal.h"

/* The tasks the limit counts: *cut = k + 1 when the done tasks 0 .. k
 * (ordered) hold the limit's rows -- every task from *cut on may be
 * skipped -- or 0 when the done tasks (unordered) hold them -- every task
 * not done may be skipped. False when the rows are short. */
static bool limit_cut(const jstage *st, int32_t *cut) {
  *cut = 0;
  if (st->limit_rows <= 0) return true;
  int64_t rows = 0;
  for (int32_t t = 0; t < st->n_tasks; t++) {
    const jtask *k = &st->tasks[t];
    if (k->state != T_DONE) {
      if (st->limit_ordered) return false; /* the prefix ends short */
      continue;
    }
    rows += k->out_rows;
    if (rows >= st->limit_rows) {
      *cut = st->limit_ordered ? t + 1 : 0;
      return true;
    }
  }
  return false;
}

bool fsh_job_limit_reached(const jstage *st) {
  int32_t cut;
  return !st->limited || limit_cut(st, &cut);
}

/* Task t (pending or running) of limited stage st is not needed. */
static void skip_task(fsh_sched_driver *d, sched_job *j, jstage *st, int32_t t) {
  jtask *k = &st->tasks[t];
  if (k->state == T_RUNNING) {
    fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, st));
    fsh_job_cancel_attempt(d, j, st, t, k->attempt, k->worker_id);
    st->n_cancelled++;
  }
  if (st->counted[t]) {
    /* done once, its output lost since: its rows are no longer the
     * stage's (the limit's one partition) */
    st->counted[t] = false;
    st->part_rows[0] -= k->out_rows;
    st->part_sums[0] -= k->checksum;
    st->part_bytes[0] -= k->bytes;
  }
  fsh_error e;
  if (fsh_shuffle_meta_skip(st->meta, t, true, &e) != 0 && d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %s\n", j->id, st->id,
            e.message);
  fsh_free(k->lost);
  k->lost = NULL;
  k->recompute = false;
  k->wtask = 0;
  k->state = T_SKIPPED;
  st->n_skipped++;
}

void fsh_job_limit_check(fsh_sched_driver *d, sched_job *j, int s) {
  jstage *st = &j->stages[s];
  if (!st->limited || j->state != FSH_SCHED_JOB_RUNNING) return;
  int32_t cut = 0;
  if (limit_cut(st, &cut)) {
    int32_t skipped = 0, cancelled = st->n_cancelled;
    for (int32_t t = cut; t < st->n_tasks; t++) {
      uint8_t state = st->tasks[t].state;
      if (state != T_PENDING && state != T_RUNNING) continue;
      skip_task(d, j, st, t);
      skipped++;
    }
    if (skipped == 0) return;
    if (d->log)
      fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: its limit's %" PRId64
              " rows exist: %d tasks skipped (%d running, cancelled)\n", j->id, st->id,
              st->limit_rows, skipped, st->n_cancelled - cancelled);
    if (tasks_over(st) && st->n_held == 0 && d->log)
      fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u (%s) complete\n", j->id,
              st->id, fsh_job_kind_name(st->kind));
    d->kick = true; /* (only on a change: the scheduler loops while kicked) */
  } else if (st->n_skipped > 0 && tasks_over(st)) {
    /* nothing left to run and the rows are short: the skipped tasks are
     * needed after all */
    for (int32_t t = 0; t < st->n_tasks; t++) {
      jtask *k = &st->tasks[t];
      if (k->state != T_SKIPPED) continue;
      fsh_error e;
      if (fsh_shuffle_meta_skip(st->meta, t, false, &e) != 0 && d->log)
        fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %s\n", j->id, st->id,
                e.message);
      k->state = T_PENDING;
    }
    if (d->log)
      fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: its done tasks hold "
              "fewer rows than its limit's %" PRId64 ": the %d skipped tasks run after all\n",
              j->id, st->id, st->limit_rows, st->n_skipped);
    st->n_skipped = 0;
    d->kick = true;
  }
}
