/* job_attempts.c -- an attempt ended (DoAction "task-done" from the worker,
 * or the scheduler's task-wait fallback): its result is checked against
 * the stage and recorded in the shuffle's metadata, or the failure is
 * counted -- unless it reported inputs lost (TaskDone.lost: those outputs
 * are lost and recomputed, or their unreachable worker; not the task's
 * fault); the job ends when every stage nobody reads is complete. mu held. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sched/job_internal.h"

/* The producer stage of shuffle sid that stage s reads, or -1. */
static int input_of(const sched_job *j, int s, uint64_t sid) {
  for (int x = 0; x < j->n_stages; x++)
    if (producer(&j->stages[x]) && j->stages[x].shuffle_id == sid && reads(&j->stages[s], x))
      return x;
  return -1;
}

/* Declares the alive worker at uri dead (a fetch from it failed). mu held. */
static void fetch_failed_worker(fsh_sched_driver *d, const char *uri) {
  for (int64_t i = 0; i < d->n; i++)
    if (d->workers[i].state == FSH_SCHED_WORKER_ALIVE && strcmp(d->workers[i].uri, uri) == 0) {
      fsh_sched_worker_dead(d, &d->workers[i], "declared dead", "a fetch from it failed");
      return;
    }
}

void fsh_job_inputs_lost(fsh_sched_driver *d, sched_job *j, int s, const fsh_lost_output *lost,
                         int64_t n, const char *why) {
  bool *seen = fsh_calloc((size_t)n, sizeof *seen);
  for (int64_t i = 0; i < n && j->state == FSH_SCHED_JOB_RUNNING; i++) {
    if (seen && seen[i]) continue;
    const char *uri = lost[i].uri;
    /* that worker's entries: lost alone when it answered and every one of
     * them can be (checked first: nothing changes unless all can) */
    bool alone = true;
    for (int64_t x = i; x < n && alone; x++) {
      if (strcmp(lost[x].uri, uri) != 0) continue;
      int in = input_of(j, s, lost[x].shuffle_id);
      const jstage *is = in >= 0 ? &j->stages[in] : NULL;
      const jtask *k = is && lost[x].map_id >= 0 && lost[x].map_id < is->n_tasks
                           ? &is->tasks[lost[x].map_id] : NULL;
      alone = !lost[x].unreachable && k && k->attempt >= lost[x].attempt && !is->released;
    }
    for (int64_t x = i; x < n && alone && j->state == FSH_SCHED_JOB_RUNNING; x++) {
      if (strcmp(lost[x].uri, uri) != 0) continue;
      int in = input_of(j, s, lost[x].shuffle_id);
      /* an older attempt's output was lost already (another reader reported
       * it first): its map is being or was recomputed */
      if (j->stages[in].tasks[lost[x].map_id].attempt == lost[x].attempt)
        alone &= fsh_job_output_lost(d, j, in, lost[x].map_id, lost[x].attempt, uri, why);
    }
    for (int64_t x = i; seen && x < n; x++)
      if (strcmp(lost[x].uri, uri) == 0) seen[x] = true;
    /* unreachable, hung or broke off -- or an output that cannot be lost
     * alone: the worker is lost */
    if (!alone) fetch_failed_worker(d, uri);
    if (!seen) break; /* out of memory: the first worker only */
  }
  fsh_free(seen);
}

/* A done plan-fragment task's figures: its rows and input bytes without a
 * staging stage's samples partition, what it fetched (the bytes its input
 * stages' tasks wrote into the partitions it reads) and its operators' spill. mu held. */
static void plan_task_figures(sched_job *j, int s, int32_t t, const fsh_map_task_result *r,
                              const fsh_fragment_stats *spill) {
  jstage *st = &j->stages[s];
  jtask *k = &st->tasks[t];
  k->spill = *spill;
  if (staged(j, s)) {
    /* its input's rows: a staging task reports them plus its samples'
     * (the last partition) -- what it staged is 0 rows when its range
     * exchange is recomputed (exec.h fsh_plan_job_stages.recomputed) */
    int32_t last = st->n_parts - 1;
    k->rows = r->input_rows - r->output.rows[last];
    k->input_bytes = 0;
    for (int32_t p = 0; p < last; p++) k->input_bytes += r->output.bytes[p];
  }
  k->fetched = 0;
  for (int i = 0; i < st->n_inputs; i++) {
    const jstage *in = &j->stages[st->inputs[i]];
    k->fetched += in->part_bytes[part_read(in, t)];
    if (i == 0 && st->scatter) k->fetched += in->part_bytes[in->n_parts - 1]; /* the samples */
  }
}

void fsh_job_attempt_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t t, int32_t attempt,
                           bool ok, const char *error, const uint8_t *answer, int64_t size) {
  fsh_job_attempt_ended_lost(d, j, s, t, attempt, ok, error, answer, size, NULL, 0);
}

void fsh_job_attempt_ended_lost(fsh_sched_driver *d, sched_job *j, int s, int32_t t,
                                int32_t attempt, bool ok, const char *error,
                                const uint8_t *answer, int64_t size, const fsh_lost_output *lost,
                                int64_t n_lost) {
  jstage *st = &j->stages[s];
  jtask *k = &st->tasks[t];
  if (j->state != FSH_SCHED_JOB_RUNNING || k->state != T_RUNNING || k->attempt != attempt) {
    if (j->state == FSH_SCHED_JOB_RUNNING)
      fsh_job_event_push(&j->ignored, st->id, t, attempt, "a late %s of a %s",
                         ok ? "answer" : "failure", k->state == T_SKIPPED ? "skipped task (a global limit had its rows)"
                                               : "superseded attempt");
    return;
  }
  fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, st));
  int64_t now = fsh_sched_now_ms();
  fsh_error err = {{0}};
  int rc = 0;
  if (ok && producer(st)) {
    fsh_map_task_result r;
    fsh_fragment_read *reads = NULL;
    int32_t n_reads = 0;
    fsh_fragment_stats spill = {0};
    rc = st->kind == KIND_PLAN
             ? fsh_fragment_answer_decode_stats(answer, size, &r, &reads, &n_reads, &spill, &err)
             : fsh_map_task_result_decode(answer, size, &r, &err);
    if (rc == 0) { /* what this attempt read (checked by the status) */
      fsh_free(k->reads);
      k->reads = reads;
      k->n_reads = n_reads;
    }
    if (rc == 0) {
      if (r.output.n_partitions != st->n_parts || r.output.map_id != t ||
          r.output.attempt != attempt || r.output.shuffle_id != st->shuffle_id)
        rc = fsh_error_set(&err, EPROTO, "the answer is of map %" PRId64 " attempt %d of shuffle "
                           "%" PRIu64 " with %d partitions", r.output.map_id, r.output.attempt,
                           r.output.shuffle_id, r.output.n_partitions);
      fsh_shuffle_meta_add_result added = FSH_SHUFFLE_META_ACCEPTED;
      if (rc == 0 && st->merge) /* held back until merged (job_merge.c) */
        rc = fsh_job_merge_hold(st, t, &r.output, &err);
      else if (rc == 0) rc = fsh_shuffle_meta_add(st->meta, &r.output, &added, &err);
      if (rc == 0 && added != FSH_SHUFFLE_META_ACCEPTED)
        rc = fsh_error_set(&err, EPROTO, "the shuffle's metadata calls it %s",
                           fsh_shuffle_meta_add_result_name(added));
      if (rc == 0) {
        size_t n = (size_t)st->n_parts;
        k->rows = r.input_rows;
        k->checksum = 0; /* reduce-then-map: the checksum of the rows it read */
        for (size_t p = 0; p < n; p++) k->checksum += r.row_checksums[p];
        k->input_bytes = r.input_bytes;
        k->nanos = r.nanos;
        k->bytes = k->out_rows = 0;
        for (size_t p = 0; p < n; p++) {
          k->bytes += r.output.bytes[p];
          k->out_rows += r.output.rows[p];
        }
        if (st->kind == KIND_PLAN) plan_task_figures(j, s, t, &r, &spill);
        if (!st->counted[t]) { /* a re-run writes the same rows */
          st->counted[t] = true;
          for (size_t p = 0; p < n; p++) {
            st->part_rows[p] += r.output.rows[p];
            st->part_sums[p] += r.row_checksums[p];
            st->part_bytes[p] += r.output.bytes[p];
          }
        }
        if (st->kind == KIND_MAP && j->first_map_ms < 0) j->first_map_ms = now;
        if (st->kind == KIND_MAP) j->last_map_ms = now;
      }
      fsh_map_task_result_reset(&r);
    }
  } else if (ok) {
    fsh_reduce_task_result r;
    rc = fsh_reduce_task_result_decode(answer, size, &r, &err);
    int32_t c = run_count(st, t);
    if (rc == 0 && (r.count > 1 ? r.count : 1) != c)
      rc = fsh_error_set(&err, EPROTO, "the answer is of a run of %d partitions, the task "
                         "reads %d", r.count > 1 ? r.count : 1, c);
    if (rc == 0) {
      k->rows = r.rows;
      k->bytes = r.bytes;
      k->batches = r.batches;
      k->checksum = r.checksum;
      k->nanos = r.nanos;
      for (int32_t x = 0; st->run_first && x < c; x++) { /* per partition, for the check */
        st->read_rows[run_first(st, t) + x] = fsh_reduce_result_rows(&r, x);
        st->read_sums[run_first(st, t) + x] = fsh_reduce_result_checksum(&r, x);
      }
    }
    fsh_reduce_task_result_reset(&r);
  }
  if (ok && rc == 0) {
    k->state = T_DONE;
    k->recompute = false;
    st->n_done++;
    st->last_ms = now;
    if (st->n_done == st->n_tasks && d->log)
      fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u (%s) complete\n", j->id,
              st->id, fsh_job_kind_name(st->kind));
    fsh_job_limit_check(d, j, s); /* a global limit's: enough rows now? */
  } else {
    const char *why = ok ? err.message : (error ? error : "(no message)");
    k->state = T_PENDING;
    k->wtask = 0;
    if (!ok && n_lost > 0 && ++k->input_losses <= 4 * j->max_attempts) {
      /* an input is lost (with its worker, or the worker answered it does
       * not hold it): not the task's fault (bounded all the same: a loss
       * that recurs forever ends the job) */
      fsh_job_event_push(&j->retried, st->id, t, attempt, "%s", why);
      fsh_job_inputs_lost(d, j, s, lost, n_lost, why);
    } else {
      k->failures++;
      fsh_job_event_push(&j->retried, st->id, t, attempt, "failed (%d of %d): %s", k->failures,
                         j->max_attempts, why);
      if (k->failures >= j->max_attempts) {
        snprintf(j->error, sizeof j->error, "stage %u (%s) task %d failed %d times; last: %.1000s",
                 st->id, fsh_job_kind_name(st->kind), t, k->failures, why);
        fsh_job_end(d, j, FSH_SCHED_JOB_FAILED);
        return;
      }
    }
  }
  /* the job is over when every stage nobody reads is complete */
  bool all = true;
  for (int x = 0; x < j->n_stages && all; x++)
    if (!(producer(&j->stages[x]) && j->stages[x].consumed) && !fsh_job_stage_complete(j, x))
      all = false;
  if (all) fsh_job_end(d, j, FSH_SCHED_JOB_SUCCEEDED);
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

void fsh_job_attempt_failure(fsh_sched_driver *d, sched_job *j, int s, int32_t t,
                             int32_t attempt, int32_t merge, const char *uri,
                             const uint8_t *data, int64_t size) {
  fsh_error msg = {{0}}, e = {{0}};
  fsh_lost_output *lost = NULL;
  int64_t n_lost = 0;
  int code = 0;
  if (fsh_task_failure_decode(data, size, uri, &code, &msg, &lost, &n_lost, &e) != 0)
    snprintf(msg.message, sizeof msg.message, "worker %.300s: task-wait: %.700s", uri, e.message);
  if (merge)
    fsh_job_merge_ended_lost(d, j, s, merge, false, msg.message, NULL, 0, lost, n_lost);
  else
    fsh_job_attempt_ended_lost(d, j, s, t, attempt, false, msg.message, NULL, 0, lost, n_lost);
  fsh_lost_outputs_free(lost, n_lost);
}

int fsh_sched_action_task_done(fsh_sched_driver *d, const fsh_flight_action *a,
                               fsh_flight_result_list *out, fsh_error *err) {
  (void)out;
  static const uint8_t empty[1];
  Flightshuffle__Sched__TaskDone *m = flightshuffle__sched__task_done__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: task-done: malformed TaskDone body "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  pthread_mutex_lock(&d->mu);
  sched_job *j;
  int s;
  int32_t task, attempt;
  int rc = fsh_job_resolve_ref(d, "task-done", m->ref.data, m->ref.len, &j, &s, &task, &attempt,
                               err);
  uint32_t merge = rc == 0 ? fsh_job_ref_merge(m->ref.data, m->ref.len) : 0;
  /* the inputs it found lost (borrowed from m) */
  fsh_lost_output *lost = rc == 0 && m->n_lost ? fsh_calloc(m->n_lost, sizeof *lost) : NULL;
  int64_t n_lost = lost ? (int64_t)m->n_lost : 0;
  for (int64_t i = 0; i < n_lost; i++) {
    const Flightshuffle__Sched__LostOutput *x = m->lost[i];
    lost[i] = (fsh_lost_output){.uri = x->worker_uri, .shuffle_id = x->shuffle_id,
                                .map_id = x->map_id, .attempt = x->attempt,
                                .unreachable = x->worker_unreachable};
  }
  if (rc == 0 && merge)
    fsh_job_merge_ended_lost(d, j, s, (int32_t)merge, m->ok, m->error, m->answer.data,
                             (int64_t)m->answer.len, lost, n_lost);
  else if (rc == 0)
    fsh_job_attempt_ended_lost(d, j, s, task, attempt, m->ok, m->error, m->answer.data,
                               (int64_t)m->answer.len, lost, n_lost);
  pthread_mutex_unlock(&d->mu);
  fsh_free(lost);
  flightshuffle__sched__task_done__free_unpacked(m, &fsh_sched_pb_allocator);
  return rc;
}
