/* job_status.c -- the status of a job: in C (fsh_sched_driver_job_status,
 * with the per-partition verification of each consumer stage against its
 * input, and fsh_sched_driver_wait_job) and on the wire (the "job-status"
 * action, JobStatus). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sched/job_internal.h"

void fsh_sched_job_status_reset(fsh_sched_job_status *s) {
  if (!s) return;
  fsh_free(s->error);
  fsh_free(s->stages);
  fsh_sched_task_event *lists[3] = {s->retried, s->recomputed, s->ignored};
  int32_t ns[3] = {s->n_retried, s->n_recomputed, s->n_ignored};
  for (int l = 0; l < 3; l++) {
    for (int32_t i = 0; i < ns[l]; i++) fsh_free(lists[l][i].reason);
    fsh_free(lists[l]);
  }
  fsh_free(s->partitions);
  for (int32_t i = 0; s->result && i < s->n_result; i++) fsh_reduce_task_reset(&s->result[i]);
  fsh_free(s->result);
  fsh_free(s->result_rows);
  fsh_free(s->result_checksums);
  memset(s, 0, sizeof *s);
}

static int copy_events(const event_list *l, fsh_sched_task_event **out, int32_t *n) {
  *n = 0;
  *out = l->n ? fsh_calloc((size_t)l->n, sizeof **out) : NULL;
  if (l->n && !*out) return ENOMEM;
  for (int32_t i = 0; i < l->n; i++) {
    (*out)[i] = l->items[i];
    if (!((*out)[i].reason = fsh_strdup(l->items[i].reason))) return ENOMEM;
    (*n)++;
  }
  return 0;
}

static double since(const sched_job *j, int64_t ms) {
  return ms < 0 ? -1.0 : (double)(ms - j->start_ms) / 1000.0;
}

/* The result of j (stage x's shuffle) into s: per partition its map
 * outputs (owned copies), rows and row checksum. mu held. */
static int result_parts(const sched_job *j, int x, fsh_sched_job_status *s, fsh_error *err) {
  const jstage *st = &j->stages[x];
  int32_t n = st->n_parts;
  s->result = fsh_calloc((size_t)n, sizeof *s->result);
  s->result_rows = fsh_calloc((size_t)n, sizeof *s->result_rows);
  s->result_checksums = fsh_calloc((size_t)n, sizeof *s->result_checksums);
  if (!s->result || !s->result_rows || !s->result_checksums) return ENOMEM;
  for (int32_t p = 0; p < n; p++) {
    fsh_reduce_task t;
    FSH_RETURN_NOT_OK(fsh_job_reduce_task_of(j, x, p, false, &t, err));
    fsh_buffer *b = NULL;
    int rc = fsh_reduce_task_encode(&t, &b, err); /* an owned copy through the codec */
    fsh_free(t.sources);
    fsh_free(t.locations);
    if (rc == 0) rc = fsh_reduce_task_decode(b->data, b->size, &s->result[p], err);
    fsh_buffer_unref(b);
    if (rc) return rc;
    s->n_result++;
    s->result_rows[p] = st->part_rows[p];
    s->result_checksums[p] = st->part_sums[p];
  }
  return 0;
}

/* Whether every read of the done tasks of plan stage st that went to the
 * end of its partition found what its input's tasks wrote there (rows and
 * row checksum; the side input of a scatter: the last partition). Reads
 * stopped early (a limit) are not compared. mu held. */
static bool plan_reads_verified(const sched_job *j, const jstage *st) {
  for (int32_t t = 0; t < st->n_tasks; t++) {
    const jtask *k = &st->tasks[t];
    for (int32_t i = 0; k->state == T_DONE && i < k->n_reads; i++) {
      const fsh_fragment_read *r = &k->reads[i];
      int in = -1;
      for (int x = 0; x < st->n_inputs && in < 0; x++)
        if (r->node == st->input_nodes[x] || (r->node == -1 && st->scatter)) in = x;
      if (in < 0) return false; /* a read of no input */
      const jstage *src = &j->stages[st->inputs[in]];
      int32_t p = r->node == -1 ? src->n_parts - 1 : part_read(src, t);
      if (r->complete && (r->rows != src->part_rows[p] || r->checksum != src->part_sums[p]))
        return false;
    }
  }
  return true;
}

/* The status of j into *out; mu held. */
static int job_status(const sched_job *j, bool with_partitions, fsh_sched_job_status *out,
                      fsh_error *err) {
  memset(out, 0, sizeof *out);
  fsh_sched_job_status s = {.job_id = j->id, .state = j->state};
  int rc = 0;
  if (j->error[0] && !(s.error = fsh_strdup(j->error))) rc = ENOMEM;
  if (rc == 0 && !(s.stages = fsh_calloc((size_t)j->n_stages, sizeof *s.stages))) rc = ENOMEM;
  int64_t now = j->state == FSH_SCHED_JOB_RUNNING ? fsh_sched_now_ms() : j->end_ms;
  s.seconds = (double)(now - j->start_ms) / 1000.0;
  s.verified = j->state == FSH_SCHED_JOB_SUCCEEDED;
  for (int x = 0; rc == 0 && x < j->n_stages; x++) {
    const jstage *st = &j->stages[x];
    fsh_sched_stage_status *o = &s.stages[s.n_stages++];
    o->stage_id = st->id;
    snprintf(o->kind, sizeof o->kind, "%s", fsh_job_kind_name(st->kind));
    o->tasks_total = st->n_tasks;
    o->tasks_done = st->n_done;
    o->tasks_skipped = st->n_skipped;
    o->attempts_cancelled = st->n_cancelled;
    for (int32_t t = 0; t < st->n_tasks; t++) {
      const jtask *k = &st->tasks[t];
      o->tasks_running += k->state == T_RUNNING;
      if (k->state != T_DONE) continue;
      o->bytes += k->bytes;
      o->rows += k->rows;
      o->task_seconds += (double)k->nanos * 1e-9;
      if (st->kind == KIND_MAP) s.input_rows += k->rows, s.input_bytes += k->input_bytes;
      /* a plan: the rows its stages reading no exchange wrote (samples
       * not counted); fetched, what its consumers' partitions held */
      if (st->kind == KIND_PLAN && st->n_inputs == 0)
        s.input_rows += k->rows, s.input_bytes += k->input_bytes;
      if (st->kind == KIND_PLAN) {
        s.bytes_fetched += k->fetched;
        s.operator_spill_files += k->spill.spill_files;
        s.operator_spilled_bytes += k->spill.spilled_bytes;
        s.operators_spilled += k->spill.operators_spilled;
      }
    }
    o->merges = st->merges_done;
    o->merged_outputs = st->merged_outputs;
    s.merges += st->merges_done;
    s.merged_outputs += st->merged_outputs;
    s.merged_bytes += st->merged_bytes;
    s.merges_failed += st->merges_failed;
    if (producer(st)) s.bytes_written += o->bytes;
    else s.bytes_fetched += o->bytes;
    if (st->first_ms >= 0)
      o->seconds = (double)((tasks_over(st) ? st->last_ms : now) - st->first_ms) /
                   1000.0;
    /* verification of a consumer stage against its input stage: per
     * partition, the rows and row checksum read == those written */
    if (consumer(st) && st->kind == KIND_PLAN) {
      if (!plan_reads_verified(j, st)) s.verified = false;
      continue;
    }
    if (!consumer(st)) continue;
    const jstage *in = &j->stages[st->input];
    /* partitions read: one per task, or the runs' (coalesced reduces) */
    int32_t n_read = st->run_first ? in->n_parts : st->n_tasks;
    if (with_partitions && st->kind == KIND_REDUCE && !s.partitions) {
      if (!(s.partitions = fsh_calloc((size_t)n_read, sizeof *s.partitions))) rc = ENOMEM;
      else s.n_partitions = n_read;
    }
    for (int32_t p = 0; rc == 0 && p < n_read; p++) {
      fsh_sched_partition_check c = {.map_rows = in->part_rows[p],
                                     .map_checksum = in->part_sums[p]};
      const jtask *k = &st->tasks[run_task_of(st, p)];
      c.reduce_rows = st->run_first ? st->read_rows[p] : k->rows;
      c.reduce_checksum = st->run_first ? st->read_sums[p] : k->checksum;
      /* an intermediate task's output may be lost after it was consumed:
       * its figures are those of its last completed attempt */
      bool must_be_done = st->kind == KIND_REDUCE;
      if ((must_be_done && k->state != T_DONE) || c.map_rows != c.reduce_rows ||
          c.map_checksum != c.reduce_checksum)
        s.verified = false;
      if (s.partitions && st->kind == KIND_REDUCE && s.n_partitions == n_read)
        s.partitions[p] = c;
    }
  }
  for (int x = 0; rc == 0 && j->state == FSH_SCHED_JOB_SUCCEEDED && x < j->n_stages; x++)
    if (j->stages[x].result) rc = result_parts(j, x, &s, err);
  if (rc == EINVAL || rc == EPROTO) {
    fsh_sched_job_status_reset(&s);
    return rc;
  }
  s.bytes_spilled = j->bytes_spilled;
  s.first_map_output_s = since(j, j->first_map_ms);
  s.last_map_output_s = since(j, j->last_map_ms);
  s.first_reduce_start_s = since(j, j->first_reduce_ms);
  if (rc == 0) rc = copy_events(&j->retried, &s.retried, &s.n_retried);
  if (rc == 0) rc = copy_events(&j->recomputed, &s.recomputed, &s.n_recomputed);
  if (rc == 0) rc = copy_events(&j->ignored, &s.ignored, &s.n_ignored);
  if (rc) {
    fsh_sched_job_status_reset(&s);
    return fsh_error_set(err, ENOMEM, "job %" PRIu64 ": status: out of memory", j->id);
  }
  *out = s;
  return 0;
}

int fsh_sched_driver_job_status(fsh_sched_driver *d, uint64_t job_id, bool with_partitions,
                                fsh_sched_job_status *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&d->mu);
  sched_job *j = fsh_job_find(d, job_id);
  int rc = j ? job_status(j, with_partitions, out, err)
             : fsh_error_set(err, ENOENT, "driver %s: no job %" PRIu64, d->uri, job_id);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

int fsh_sched_driver_wait_job(fsh_sched_driver *d, uint64_t job_id, int64_t timeout_ms,
                              fsh_error *err) {
  int64_t end = fsh_sched_now_ms() + timeout_ms;
  pthread_mutex_lock(&d->mu);
  int rc = 0;
  for (;;) {
    sched_job *j = fsh_job_find(d, job_id);
    if (!j) {
      rc = fsh_error_set(err, ENOENT, "driver %s: no job %" PRIu64, d->uri, job_id);
      break;
    }
    if (fsh_job_settled(j)) break;
    int64_t left = end - fsh_sched_now_ms();
    if (left <= 0 || d->stop) {
      rc = fsh_error_set(err, ETIMEDOUT, "driver %s: job %" PRIu64 " still running after %"
                         PRId64 " ms", d->uri, job_id, timeout_ms);
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t wait = left < 100 ? left : 100;
    int64_t ns = ts.tv_nsec + wait * 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&d->job_cv, &d->mu, &ts);
  }
  pthread_mutex_unlock(&d->mu);
  return rc;
}

/* ---- the status on the wire -------------------------------------------- */

static Flightshuffle__Sched__TaskEvent **pb_events(const fsh_sched_task_event *e, int32_t n,
                                                  Flightshuffle__Sched__TaskEvent **store) {
  Flightshuffle__Sched__TaskEvent *items = n ? fsh_calloc((size_t)n, sizeof *items) : NULL;
  Flightshuffle__Sched__TaskEvent **ptrs = n ? fsh_calloc((size_t)n, sizeof *ptrs) : NULL;
  *store = items;
  if (n && (!items || !ptrs)) {
    fsh_free(ptrs);
    return NULL;
  }
  for (int32_t i = 0; i < n; i++) {
    Flightshuffle__Sched__TaskEvent x = FLIGHTSHUFFLE__SCHED__TASK_EVENT__INIT;
    x.stage_id = e[i].stage_id;
    x.task = e[i].task;
    x.attempt = e[i].attempt;
    x.reason = e[i].reason;
    items[i] = x;
    ptrs[i] = &items[i];
  }
  return ptrs;
}

int fsh_sched_action_job_status(fsh_sched_driver *d, const fsh_flight_action *a,
                                fsh_flight_result_list *out, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__JobStatusRequest *m = flightshuffle__sched__job_status_request__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: job-status: malformed JobStatusRequest "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  fsh_sched_job_status s;
  int rc = fsh_sched_driver_job_status(d, m->job_id, m->with_partitions, &s, err);
  flightshuffle__sched__job_status_request__free_unpacked(m, &fsh_sched_pb_allocator);
  if (rc) return rc;
  Flightshuffle__Sched__JobStatus r = FLIGHTSHUFFLE__SCHED__JOB_STATUS__INIT;
  Flightshuffle__Sched__StageStatus *st = fsh_calloc((size_t)s.n_stages, sizeof *st);
  Flightshuffle__Sched__StageStatus **stp = fsh_calloc((size_t)s.n_stages, sizeof *stp);
  Flightshuffle__Sched__PartitionCheck *pc =
      s.n_partitions ? fsh_calloc((size_t)s.n_partitions, sizeof *pc) : NULL;
  Flightshuffle__Sched__PartitionCheck **pcp =
      s.n_partitions ? fsh_calloc((size_t)s.n_partitions, sizeof *pcp) : NULL;
  Flightshuffle__Sched__TaskEvent *e1 = NULL, *e2 = NULL, *e3 = NULL;
  Flightshuffle__Sched__TaskEvent **p1 = pb_events(s.retried, s.n_retried, &e1);
  Flightshuffle__Sched__TaskEvent **p2 = pb_events(s.recomputed, s.n_recomputed, &e2);
  Flightshuffle__Sched__TaskEvent **p3 = pb_events(s.ignored, s.n_ignored, &e3);
  if (!st || !stp || (s.n_partitions && (!pc || !pcp)) || (s.n_retried && !p1) ||
      (s.n_recomputed && !p2) || (s.n_ignored && !p3)) {
    rc = fsh_error_set(err, ENOMEM, "driver %s: job-status: out of memory", d->uri);
  } else {
    r.job_id = s.job_id;
    r.state = (Flightshuffle__Sched__JobState)s.state;
    r.error = s.error ? s.error : (char *)"";
    for (int32_t i = 0; i < s.n_stages; i++) {
      Flightshuffle__Sched__StageStatus x = FLIGHTSHUFFLE__SCHED__STAGE_STATUS__INIT;
      x.stage_id = s.stages[i].stage_id;
      x.kind = s.stages[i].kind;
      x.tasks_total = s.stages[i].tasks_total;
      x.tasks_done = s.stages[i].tasks_done;
      x.tasks_running = s.stages[i].tasks_running;
      x.bytes = s.stages[i].bytes;
      x.rows = s.stages[i].rows;
      x.seconds = s.stages[i].seconds;
      x.task_seconds = s.stages[i].task_seconds;
      x.merges = s.stages[i].merges;
      x.merged_outputs = s.stages[i].merged_outputs;
      x.tasks_skipped = s.stages[i].tasks_skipped;
      x.attempts_cancelled = s.stages[i].attempts_cancelled;
      st[i] = x;
      stp[i] = &st[i];
    }
    r.n_stages = (size_t)s.n_stages;
    r.stages = stp;
    for (int32_t i = 0; i < s.n_partitions; i++) {
      Flightshuffle__Sched__PartitionCheck x = FLIGHTSHUFFLE__SCHED__PARTITION_CHECK__INIT;
      x.map_rows = s.partitions[i].map_rows;
      x.map_checksum = s.partitions[i].map_checksum;
      x.reduce_rows = s.partitions[i].reduce_rows;
      x.reduce_checksum = s.partitions[i].reduce_checksum;
      pc[i] = x;
      pcp[i] = &pc[i];
    }
    r.n_partitions = (size_t)s.n_partitions;
    r.partitions = pcp;
    r.seconds = s.seconds;
    r.bytes_written = s.bytes_written;
    r.bytes_fetched = s.bytes_fetched;
    r.n_retried = (size_t)s.n_retried;
    r.retried = p1;
    r.n_recomputed = (size_t)s.n_recomputed;
    r.recomputed = p2;
    r.n_ignored = (size_t)s.n_ignored;
    r.ignored = p3;
    r.verified = s.verified;
    r.first_map_output_s = s.first_map_output_s;
    r.first_reduce_start_s = s.first_reduce_start_s;
    r.last_map_output_s = s.last_map_output_s;
    r.input_rows = s.input_rows;
    r.input_bytes = s.input_bytes;
    r.bytes_spilled = s.bytes_spilled;
    r.operator_spill_files = s.operator_spill_files;
    r.operator_spilled_bytes = s.operator_spilled_bytes;
    r.operators_spilled = s.operators_spilled;
    r.merges = s.merges;
    r.merged_outputs = s.merged_outputs;
    r.merged_bytes = s.merged_bytes;
    r.merges_failed = s.merges_failed;
    fsh_buffer **parts = s.n_result ? fsh_calloc((size_t)s.n_result, sizeof *parts) : NULL;
    ProtobufCBinaryData *bins = s.n_result ? fsh_calloc((size_t)s.n_result, sizeof *bins) : NULL;
    if (s.n_result && (!parts || !bins))
      rc = fsh_error_set(err, ENOMEM, "driver %s: job-status: out of memory", d->uri);
    for (int32_t i = 0; rc == 0 && i < s.n_result; i++)
      if ((rc = fsh_reduce_task_encode(&s.result[i], &parts[i], err)) == 0)
        bins[i] = (ProtobufCBinaryData){(size_t)parts[i]->size, parts[i]->data};
    if (rc == 0) {
      r.n_result_parts = r.n_result_rows = r.n_result_checksums = (size_t)s.n_result;
      r.result_parts = bins;
      r.result_rows = s.result_rows;
      r.result_checksums = s.result_checksums;
      rc = fsh_sched_push_message(out, &r.base, "driver: job-status", err);
    }
    for (int32_t i = 0; parts && i < s.n_result; i++) fsh_buffer_unref(parts[i]);
    fsh_free(parts);
    fsh_free(bins);
  }
  fsh_free(st), fsh_free(stp), fsh_free(pc), fsh_free(pcp);
  fsh_free(e1), fsh_free(e2), fsh_free(e3), fsh_free(p1), fsh_free(p2), fsh_free(p3);
  fsh_sched_job_status_reset(&s);
  return rc;
}
