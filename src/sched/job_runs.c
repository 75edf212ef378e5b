/* job_runs.c -- coalesced reduces and maps (sched.h). Reduces: the runs
 * of partitions the tasks of a "reduce-verify" stage read, chosen once
 * when the stage may first start -- from the bytes its input's maps wrote
 * per partition (greedy up to a target, Spark AQE's partition
 * coalescing), or evenly over the slots when it starts before the maps are
 * done (incremental). mu held. Maps: the runs of consecutive synthetic
 * maps that run as one task, chosen at submit. */
#include <inttypes.h>
#include <math.h>
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

/* Whether map b continues map a's rows: the same table and output, b's
 * first row right after a's last, a a whole number of batches (b's
 * batches are then the run's next ones). */
static bool continues(const fsh_map_task *a, const fsh_map_task *b) {
  return a->seed == b->seed && a->batch_rows == b->batch_rows &&
         a->compression == b->compression && a->backend == b->backend &&
         a->n_partitions == b->n_partitions && a->rows % a->batch_rows == 0 &&
         b->first_row == a->first_row + a->rows;
}

void fsh_job_coalesce_maps(const sched_job *j, jstage *st, int32_t maps_per_task,
                           int64_t slots_total) {
  int32_t M = st->n_tasks;
  if (st->kind != KIND_MAP || M < 2 || maps_per_task == 0 || maps_per_task == 1) return;
  int64_t G = maps_per_task;
  if (G < 0) { /* auto: the merge's shape rule and group size */
    double t = j->merge_threshold > 0 ? j->merge_threshold : FSH_SCHED_MERGE_THRESHOLD;
    double mr = (double)M * (double)st->maps[0].n_partitions;
    if (sqrt(mr) <= t || slots_total <= 0) return; /* (no worker alive yet: slots unknown) */
    G = (int64_t)ceil(mr / (t * t));
    int64_t min_tasks = FSH_SCHED_MAP_RUNS_MIN_WAVES * slots_total;
    if (M / G < min_tasks) G = M / min_tasks; /* enough tasks for every slot, twice */
  }
  if (G < 2) return;
  int32_t n = 0, len = 0;
  for (int32_t t = 0; t < M; t++) {
    const fsh_map_task *m = &st->maps[t];
    fsh_map_task *run = n > 0 ? &st->maps[n - 1] : NULL;
    if (run && len < G && continues(run, m)) { /* (run's rows: the run's so far) */
      run->rows += m->rows;
      len++;
      continue;
    }
    st->maps[n] = *m;
    st->maps[n].map_id = n;
    n++;
    len = 1;
  }
  if (n == M) return;
  st->plan_maps = M;
  st->map_runs_auto = maps_per_task < 0;
  st->n_tasks = n;
}
