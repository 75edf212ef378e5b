/* job_attempts.c -- an attempt ended (DoAction "task-done" from the worker,
 * or the scheduler's task-wait fallback): its result is checked against
 * the stage and recorded in the shuffle's metadata, or the failure is
 * counted (a lost input is not the task's fault); the job ends when every
 * stage nobody reads is complete. mu held. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sched/job_internal.h"

/* "...worker <uri>: lost map outputs [...": the uri into out; false if the
 * message says no such thing. */
static bool lost_outputs_worker(const char *msg, char *out, size_t size) {
  const char *p = strstr(msg, ": lost map outputs [");
  if (!p) return false;
  const char *w = NULL;
  for (const char *q = msg; (q = strstr(q, "worker ")) && q < p; q += 7) w = q + 7;
  if (!w || (size_t)(p - w) >= size || p == w) return false;
  memcpy(out, w, (size_t)(p - w));
  out[p - w] = '\0';
  return true;
}

/* A consumer's "flight shuffle <id> ...: worker <uri>: lost map outputs
 * [map/attempt m/a ...] (why)" from a worker that answered (not "the worker
 * is unreachable, hung or broke off" and a complete list): exactly those
 * outputs of the producer stage of shuffle <id> that task stage s reads are
 * lost, the worker stays alive. False when the message is not that, or an
 * output cannot be lost alone: the caller loses the whole worker. mu held. */
static bool lost_outputs_alone(fsh_sched_driver *d, sched_job *j, int s, const char *msg,
                               const char *uri) {
  const char *p = strstr(msg, ": lost map outputs [map/attempt ");
  if (!p) return false;
  const char *end = strchr(p, ']');
  if (!end || strncmp(end, "] (the worker is unreachable", 28) == 0) return false;
  const char *f = NULL;
  for (const char *q = msg; (q = strstr(q, "flight shuffle ")) && q < p; q += 15) f = q + 15;
  unsigned long long sid = 0;
  if (!f || sscanf(f, "%llu", &sid) != 1) return false;
  int in = -1;
  for (int x = 0; x < j->n_stages; x++)
    if (producer(&j->stages[x]) && j->stages[x].shuffle_id == sid && reads(&j->stages[s], x))
      in = x;
  if (in < 0) return false;
  /* every token must be m/a (no "and N more") */
  int64_t maps[16];
  int32_t atts[16];
  int n = 0;
  for (const char *q = p + strlen(": lost map outputs [map/attempt "); q < end;) {
    long long m;
    int a, used = 0;
    if (n == 16 || sscanf(q, "%lld/%d%n", &m, &a, &used) != 2 || q + used > end) return false;
    maps[n] = (int64_t)m;
    atts[n++] = (int32_t)a;
    q += used;
    if (*q == ' ') q++;
  }
  if (n == 0) return false;
  for (int i = 0; i < n; i++) {
    const jtask *k = maps[i] >= 0 && maps[i] < j->stages[in].n_tasks
                         ? &j->stages[in].tasks[maps[i]] : NULL;
    if (!k || k->attempt < atts[i] || j->stages[in].merge || j->stages[in].released)
      return false; /* checked first: nothing changes unless all of them can be lost */
  }
  /* an older attempt's output was lost already (another reader reported
   * it first): its map is being or was recomputed */
  bool all = true;
  for (int i = 0; i < n; i++)
    if (j->stages[in].tasks[maps[i]].attempt == atts[i])
      all &= fsh_job_output_lost(d, j, in, maps[i], atts[i], uri, msg);
  return all;
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
    int32_t last = st->n_parts - 1;
    k->rows = 0;
    k->input_bytes = 0;
    for (int32_t p = 0; p < last; p++) {
      k->rows += r->output.rows[p];
      k->input_bytes += r->output.bytes[p];
    }
  }
  k->fetched = 0;
  for (int i = 0; i < st->n_inputs; i++) {
    const jstage *in = &j->stages[st->inputs[i]];
    k->fetched += in->part_bytes[part_read(in, t)];
    if (i == 0 && st->scatter) k->fetched += in->part_bytes[in->n_parts - 1]; /* the samples */
  }
}

/* Records the end of attempt `attempt` of task t of stage s. mu held. */
void fsh_job_attempt_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t t, int32_t attempt,
                           bool ok, const char *error, const uint8_t *answer, int64_t size) {
  jstage *st = &j->stages[s];
  jtask *k = &st->tasks[t];
  if (j->state != FSH_SCHED_JOB_RUNNING || k->state != T_RUNNING || k->attempt != attempt) {
    if (j->state == FSH_SCHED_JOB_RUNNING)
      fsh_job_event_push(&j->ignored, st->id, t, attempt, "a late %s of a superseded attempt",
                         ok ? "answer" : "failure");
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
        k->bytes = 0;
        for (size_t p = 0; p < n; p++) k->bytes += r.output.bytes[p];
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
    if (rc == 0) {
      k->rows = r.rows;
      k->bytes = r.bytes;
      k->batches = r.batches;
      k->checksum = r.checksum;
      k->nanos = r.nanos;
    }
  }
  if (ok && rc == 0) {
    k->state = T_DONE;
    k->recompute = false;
    st->n_done++;
    st->last_ms = now;
    if (st->n_done == st->n_tasks && d->log)
      fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u (%s) complete\n", j->id,
              st->id, fsh_job_kind_name(st->kind));
  } else {
    const char *why = ok ? err.message : (error ? error : "(no message)");
    k->state = T_PENDING;
    k->wtask = 0;
    char lost[512];
    if (!ok && lost_outputs_worker(why, lost, sizeof lost) &&
        ++k->input_losses <= 4 * j->max_attempts) {
      /* an input is gone with its worker: not the task's fault (bounded
       * all the same: a loss that recurs forever ends the job) */
      fsh_job_event_push(&j->retried, st->id, t, attempt, "%s", why);
      /* a live worker that answered "not held / corrupt": those outputs
       * only; unreachable, hung or broke off: the worker is lost */
      bool alone = lost_outputs_alone(d, j, s, why, lost);
      for (int64_t i = 0; !alone && i < d->n; i++)
        if (d->workers[i].state == FSH_SCHED_WORKER_ALIVE && strcmp(d->workers[i].uri, lost) == 0) {
          driver_worker *x = &d->workers[i];
          x->state = FSH_SCHED_WORKER_DEAD;
          x->lost_handled = true;
          if (d->log)
            fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s declared dead (a "
                    "fetch from it failed)\n", x->id, x->uri);
          fsh_sched_jobs_worker_lost(d, x->id, x->uri, "a fetch from it failed");
          break;
        }
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
  if (rc == 0 && merge)
    fsh_job_merge_ended(d, j, s, (int32_t)merge, m->ok, m->error, m->answer.data,
                        (int64_t)m->answer.len);
  else if (rc == 0)
    fsh_job_attempt_ended(d, j, s, task, attempt, m->ok, m->error, m->answer.data,
                          (int64_t)m->answer.len);
  pthread_mutex_unlock(&d->mu);
  flightshuffle__sched__task_done__free_unpacked(m, &fsh_sched_pb_allocator);
  return rc;
}
