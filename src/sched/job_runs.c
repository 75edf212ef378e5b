/* job_runs.c -- coalesced reduces (sched.h): the runs of partitions the
 * tasks of a "reduce-verify" stage read, chosen once when the stage may
 * first start -- from the bytes its input's maps wrote per partition
 * (greedy up to a target, Spark AQE's partition coalescing), or evenly
 * over the slots when it starts before the maps are done (incremental).
 * mu held. */
#include <inttypes.h>
#include <stdio.h>

#include "sched/job_internal.h"

/* Fills first[0, T + 1) with the boundaries of runs over the n partitions
 * whose bytes are bytes[0, n): a partition starts a new run when adding it
 * would take the current one past target (AQE: a partition larger than
 * the target is a run of its own). Returns T. */
static int32_t greedy_runs(const int64_t *bytes, int32_t n, int64_t target, int32_t *first) {
  int32_t T = 0;
  int64_t cur = 0;
  first[T++] = 0;
  for (int32_t p = 0; p < n; p++) {
    if (p > 0 && cur > 0 && cur + bytes[p] > target) {
      first[T++] = p;
      cur = 0;
    }
    cur += bytes[p];
  }
  first[T] = n;
  return T;
}

void fsh_job_plan_runs(fsh_sched_driver *d, sched_job *j, int s) {
  jstage *st = &j->stages[s];
  st->runs_set = true;
  if (st->kind != KIND_REDUCE || st->run_bytes == 0 || st->input < 0) return;
  const jstage *in = &j->stages[st->input];
  int32_t P = in->n_parts;
  int64_t alive = 0;
  for (int64_t i = 0; i < d->n; i++) alive += d->workers[i].state == FSH_SCHED_WORKER_ALIVE;
  int64_t slots = (alive > 0 ? alive : 1) * (j->slots > 0 ? j->slots : 1);
  int32_t *first = fsh_malloc((size_t)(P + 1) * sizeof *first);
  if (!first) return; /* a task per partition */
  bool sized = in->n_done == in->n_tasks && !in->n_held;
  int64_t total = 0;
  for (int32_t p = 0; sized && p < P; p++) total += in->part_bytes[p];
  int32_t T;
  int64_t target = 0;
  if (sized && total > 0) {
    target = st->run_bytes > 0 ? st->run_bytes : FSH_SCHED_REDUCE_TASK_BYTES_AUTO;
    if (total / slots < target) target = total / slots; /* every slot gets a task */
    if (target < 1) target = 1;
    T = greedy_runs(in->part_bytes, P, target, first);
  } else { /* sizes unknown (or all empty): a run per slot */
    T = (int32_t)(slots < P ? slots : P);
    for (int32_t t = 0; t <= T; t++) first[t] = (int32_t)((int64_t)P * t / T);
  }
  if (T == P) { /* nothing coalesced: a task per partition */
    fsh_free(first);
    return;
  }
  st->read_rows = fsh_calloc((size_t)P, sizeof *st->read_rows);
  st->read_sums = fsh_calloc((size_t)P, sizeof *st->read_sums);
  if (!st->read_rows || !st->read_sums) {
    fsh_free(st->read_rows);
    fsh_free(st->read_sums);
    st->read_rows = NULL;
    st->read_sums = NULL;
    fsh_free(first);
    return;
  }
  st->run_first = first;
  st->n_tasks = T; /* the tasks array (P entries) keeps its size; the rest stay unused */
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %d reduce tasks over %d "
            "partitions (%s, target %" PRId64 " bytes of %" PRId64 ")\n", j->id, st->id, T, P,
            sized ? "by size" : "sizes unknown: a run per slot", target, total);
}
