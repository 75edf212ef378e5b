/* job.c -- jobs in the driver (contracts in sched.h, "jobs"): a job's state
 * and its helpers (events, lookups, cancels, slots, completion), the plan
 * (JobPlan -> stages of tasks: fsh_sched_shuffle_job_plan, submit and the
 * "submit" action). The rest of the jobs: job_lineage.c (a worker is
 * lost), job_attempts.c (an attempt ended, "task-done"), job_scheduler.c
 * (the scheduler thread), job_status.c (the status, "job-status"),
 * job_map_outputs.c (incremental reduces, "map-outputs"); what they share
 * is in job_internal.h.
 *
 * Locking: everything of a job is guarded by the driver's mu. The actions
 * (Flight pool threads) only take mu; the network (sending tasks, the
 * task-wait fallback, releases) is done by the scheduler thread with mu
 * released. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sched/job_internal.h"

#define JOB_DEFAULT_MAX_ATTEMPTS 4
#define JOB_DEFAULT_SLOTS 2
#define JOB_MAX_TASKS (1 << 22)

/* ---- small helpers ----------------------------------------------------- */

void fsh_job_event_push(event_list *l, uint32_t stage, int32_t task, int32_t attempt,
                        const char *fmt, ...) {
  if (l->n == l->cap) {
    int32_t cap = l->cap ? l->cap * 2 : 16;
    fsh_sched_task_event *e = fsh_malloc((size_t)cap * sizeof *e);
    if (!e) return; /* the event is dropped; the job goes on */
    if (l->n) memcpy(e, l->items, (size_t)l->n * sizeof *e);
    fsh_free(l->items);
    l->items = e;
    l->cap = cap;
  }
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  char *reason = fsh_strdup(buf);
  if (!reason) return;
  l->items[l->n++] = (fsh_sched_task_event){stage, task, attempt, reason};
}

static void event_list_free(event_list *l) {
  for (int32_t i = 0; i < l->n; i++) fsh_free(l->items[i].reason);
  fsh_free(l->items);
  memset(l, 0, sizeof *l);
}

void fsh_job_free(sched_job *j) {
  if (!j) return;
  for (int s = 0; j->stages && s < j->n_stages; s++) {
    jstage *st = &j->stages[s];
    fsh_free(st->maps);
    fsh_buffer_unref(st->fragment);
    fsh_shuffle_meta_free(st->meta);
    fsh_free(st->part_rows);
    fsh_free(st->part_sums);
    fsh_free(st->part_bytes);
    fsh_free(st->counted);
    fsh_free(st->run_first);
    fsh_free(st->read_rows);
    fsh_free(st->read_sums);
    fsh_job_merge_free(st);
    for (int32_t t = 0; st->tasks && t < st->n_tasks; t++) {
      fsh_free(st->tasks[t].lost);
      fsh_free(st->tasks[t].reads);
    }
    fsh_free(st->tasks);
  }
  fsh_free(j->stages);
  event_list_free(&j->retried);
  event_list_free(&j->recomputed);
  event_list_free(&j->ignored);
  fsh_free(j);
}

void fsh_sched_jobs_free(fsh_sched_driver *d) {
  for (sched_job *j = d->jobs, *next; j; j = next) {
    next = j->next;
    fsh_job_free(j);
  }
  d->jobs = NULL;
  for (sched_client *c = d->clients, *next; c; c = next) {
    next = c->next;
    fsh_flight_client_close(c->client);
    fsh_free(c->uri);
    fsh_free(c);
  }
  d->clients = NULL;
  fsh_free(d->cancels);
  d->cancels = NULL;
  d->n_cancels = d->cap_cancels = 0;
}

sched_job *fsh_job_find(fsh_sched_driver *d, uint64_t id) {
  for (sched_job *j = d->jobs; j; j = j->next)
    if (j->id == id) return j;
  return NULL;
}

driver_worker *fsh_job_find_worker(fsh_sched_driver *d, uint64_t id) {
  for (int64_t i = 0; i < d->n; i++)
    if (d->workers[i].id == id) return &d->workers[i];
  return NULL;
}

/* Attempt `attempt` of task t of stage st is superseded (or its job is
 * over) while it may still run on worker wid: it is to be cancelled there
 * ("cancel", sent by a launcher) unless the worker is suspect (a call to
 * it would only wait out its deadline). A "task" call still being sent to
 * that worker goes first (the launchers keep one call per worker at a
 * time, in order), so the cancel finds the task. Best effort: nothing is queued if
 * out of memory; a late answer is ignored anyway. mu held. */
void fsh_job_cancel_attempt(fsh_sched_driver *d, const sched_job *j, const jstage *st, int32_t t,
                            int32_t attempt, uint64_t wid) {
  driver_worker *w = fsh_job_find_worker(d, wid);
  if (!w || w->suspect_ms) return;
  if (d->n_cancels == d->cap_cancels) {
    int32_t cap = d->cap_cancels ? d->cap_cancels * 2 : 16;
    sched_cancel *c = fsh_realloc(d->cancels, (size_t)cap * sizeof *c);
    if (!c) return;
    d->cancels = c;
    d->cap_cancels = cap;
  }
  sched_cancel *c = &d->cancels[d->n_cancels++];
  snprintf(c->uri, sizeof c->uri, "%s", w->uri);
  c->job_id = j->id;
  c->stage_id = st->id;
  c->task = t;
  c->attempt = attempt;
  c->merge = 0;
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

bool fsh_job_cancel_unneeded(fsh_sched_driver *d, sched_job *j, jstage *st) {
  bool any = false;
  for (int32_t t = 0; t < st->n_tasks; t++) {
    jtask *k = &st->tasks[t];
    if (k->state != T_RUNNING) continue;
    fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, st));
    fsh_job_cancel_attempt(d, j, st, t, k->attempt, k->worker_id);
    k->state = T_PENDING;
    k->wtask = 0;
    any = true;
  }
  return any;
}

/* Whether the tasks of st take the reduce slots (incremental reduces). */
bool fsh_job_reduce_slot(const sched_job *j, const jstage *st) {
  return j->incremental && st->kind == KIND_REDUCE;
}

/* An attempt placed on worker wid ended: its slot is free again. */
void fsh_job_worker_release(fsh_sched_driver *d, uint64_t wid, bool reduce) {
  driver_worker *w = fsh_job_find_worker(d, wid);
  if (!w) return;
  int *n = reduce ? &w->running_reduce : &w->running;
  if (*n > 0) (*n)--;
}

int fsh_job_stage_index(const sched_job *j, uint32_t id) {
  for (int s = 0; s < j->n_stages; s++)
    if (j->stages[s].id == id) return s;
  return -1;
}

int fsh_job_resolve_ref(fsh_sched_driver *d, const char *action, const uint8_t *data, size_t len,
                        sched_job **j, int *s, int32_t *task, int32_t *attempt, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__TaskRef *ref =
      flightshuffle__sched__task_ref__unpack(&fsh_sched_pb_allocator, len, data ? data : empty);
  if (!ref)
    return fsh_error_set(err, EINVAL, "driver %s: %s: malformed TaskRef (%zu bytes)", d->uri,
                         action, len);
  int rc = 0;
  *j = fsh_job_find(d, ref->job_id);
  *s = *j ? fsh_job_stage_index(*j, ref->stage_id) : -1;
  if (!*j)
    rc = fsh_error_set(err, ENOENT, "driver %s: %s: no job %" PRIu64, d->uri, action,
                       ref->job_id);
  else if (*s < 0 || ref->task < 0 || ref->task >= (*j)->stages[*s].n_tasks || ref->attempt < 0)
    rc = fsh_error_set(err, EINVAL, "driver %s: %s: job %" PRIu64 " has no stage %u task %d "
                       "attempt %d", d->uri, action, ref->job_id, ref->stage_id, ref->task,
                       ref->attempt);
  *task = ref->task;
  *attempt = ref->attempt;
  flightshuffle__sched__task_ref__free_unpacked(ref, &fsh_sched_pb_allocator);
  return rc;
}

const char *fsh_job_kind_name(int kind) {
  return kind == KIND_MAP ? "map-synthetic" : kind == KIND_REDUCE ? "reduce-verify"
         : kind == KIND_PLAN ? "plan-fragment" : "reduce-then-map";
}

/* The job is over: no more attempts (their late answers are ignored). */
void fsh_job_end(fsh_sched_driver *d, sched_job *j, fsh_sched_job_state state) {
  if (j->state != FSH_SCHED_JOB_RUNNING) return;
  j->state = state;
  j->end_ms = fsh_sched_now_ms();
  for (int s = 0; s < j->n_stages; s++)
    for (int32_t t = 0; t < j->stages[s].n_tasks; t++) {
      jtask *k = &j->stages[s].tasks[t];
      if (k->state != T_RUNNING) continue;
      fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, &j->stages[s]));
      fsh_job_cancel_attempt(d, j, &j->stages[s], t, k->attempt, k->worker_id);
      k->state = T_PENDING;
    }
  for (int s = 0; s < j->n_stages; s++) fsh_job_merges_cancel(d, j, s);
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " %s%s%s\n", j->id,
            fsh_sched_job_state_name(state), state == FSH_SCHED_JOB_FAILED ? ": " : "",
            state == FSH_SCHED_JOB_FAILED ? j->error : "");
  pthread_cond_broadcast(&d->job_cv);
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

/* Whether every stage reading stage s is complete. */
bool fsh_job_consumers_complete(const sched_job *j, int s) {
  for (int c = 0; c < j->n_stages; c++)
    if (consumer(&j->stages[c]) && reads(&j->stages[c], s) && !fsh_job_stage_complete(j, c))
      return false;
  return true;
}

/* A stage is complete: all its tasks done (or skipped, a global limit's
 * stage with its rows). A map stage also counts as complete (no longer
 * needed) once every stage reading it is. */
bool fsh_job_stage_complete(const sched_job *j, int s) {
  const jstage *st = &j->stages[s];
  if (tasks_over(st) && st->n_held == 0 && (!st->n_skipped || fsh_job_limit_reached(st)))
    return true;
  return producer(st) && st->consumed && fsh_job_consumers_complete(j, s);
}

/* Over, and its shuffles released. mu held. */
bool fsh_job_settled(const sched_job *j) {
  if (j->state == FSH_SCHED_JOB_RUNNING || j->releasing) return false;
  for (int s = 0; s < j->n_stages; s++)
    if (producer(&j->stages[s]) && !j->stages[s].released && !kept(j, &j->stages[s]))
      return false;
  return true;
}

/* ---- the plan ---------------------------------------------------------- */

const char *fsh_sched_job_state_name(fsh_sched_job_state s) {
  switch (s) {
  case FSH_SCHED_JOB_RUNNING: return "running";
  case FSH_SCHED_JOB_SUCCEEDED: return "succeeded";
  case FSH_SCHED_JOB_FAILED: return "failed";
  default: return "unknown";
  }
}

int fsh_sched_shuffle_job_plan(const fsh_sched_shuffle_job *sj, fsh_buffer **plan,
                               fsh_error *err) {
  *plan = NULL;
  if (sj->maps < 1 || sj->reduces < 1 || sj->rows < 0 || sj->batch_rows < 1 ||
      sj->then_reduces < 0 || sj->then_key < 0 || sj->then_key > 2)
    return fsh_error_set(err, EINVAL, "shuffle job: %d maps, %d reduces, %" PRId64 " rows, "
                         "batches of %d: each must be positive", sj->maps, sj->reduces, sj->rows,
                         sj->batch_rows);
  int64_t batches = (sj->rows + sj->batch_rows - 1) / sj->batch_rows;
  fsh_buffer **bodies = fsh_calloc((size_t)sj->maps, sizeof *bodies);
  ProtobufCBinaryData *tasks = fsh_calloc((size_t)sj->maps, sizeof *tasks);
  int rc = bodies && tasks ? 0 : fsh_error_set(err, ENOMEM, "shuffle job: out of memory");
  for (int32_t m = 0; rc == 0 && m < sj->maps; m++) {
    int64_t b0 = batches * m / sj->maps, b1 = batches * (m + 1) / sj->maps;
    int64_t first = b0 * sj->batch_rows, end = b1 * sj->batch_rows;
    if (end > sj->rows) end = sj->rows;
    fsh_map_task t = {.map_id = m, .n_partitions = sj->reduces, .first_row = first,
                      .rows = end > first ? end - first : 0, .batch_rows = sj->batch_rows,
                      .seed = sj->seed, .compression = sj->compression, .backend = sj->backend};
    rc = fsh_map_task_encode(&t, &bodies[m], err);
    if (rc == 0) tasks[m] = (ProtobufCBinaryData){(size_t)bodies[m]->size, bodies[m]->data};
  }
  if (rc == 0) {
    Flightshuffle__Sched__StagePlan map = FLIGHTSHUFFLE__SCHED__STAGE_PLAN__INIT;
    Flightshuffle__Sched__StagePlan mid = FLIGHTSHUFFLE__SCHED__STAGE_PLAN__INIT;
    Flightshuffle__Sched__StagePlan red = FLIGHTSHUFFLE__SCHED__STAGE_PLAN__INIT;
    map.stage_id = 1;
    map.kind = (char *)"map-synthetic";
    map.n_tasks = (size_t)sj->maps;
    map.tasks = tasks;
    uint32_t in1 = 1, in2 = 2;
    mid.stage_id = 2;
    mid.kind = (char *)"reduce-then-map";
    mid.n_inputs = 1;
    mid.inputs = &in1;
    mid.n_partitions = (uint32_t)sj->then_reduces;
    mid.key_column = (uint32_t)sj->then_key;
    mid.compression = (uint32_t)sj->compression;
    bool two = sj->then_reduces > 0;
    red.stage_id = two ? 3 : 2;
    red.kind = (char *)"reduce-verify";
    red.n_inputs = 1;
    red.inputs = two ? &in2 : &in1;
    Flightshuffle__Sched__StagePlan *stages[3] = {&map, two ? &mid : &red, &red};
    Flightshuffle__Sched__JobPlan jp = FLIGHTSHUFFLE__SCHED__JOB_PLAN__INIT;
    jp.name = (char *)(sj->name ? sj->name : "shuffle");
    jp.n_stages = two ? 3 : 2;
    jp.stages = stages;
    jp.max_attempts = sj->max_attempts;
    jp.slots_per_worker = sj->slots_per_worker;
    jp.incremental = sj->incremental;
    jp.pre_shuffle_merge = sj->merge;
    jp.merge_threshold = sj->merge_threshold;
    jp.reduce_task_bytes = sj->reduce_task_bytes;
    jp.maps_per_task = sj->maps_per_task;
    jp.backend = (int32_t)sj->backend;
    size_t n = protobuf_c_message_get_packed_size(&jp.base);
    fsh_buffer *b = fsh_buffer_new((int64_t)n, false);
    if (!b) rc = fsh_error_set(err, ENOMEM, "shuffle job: out of memory");
    else protobuf_c_message_pack(&jp.base, b->data), *plan = b;
  }
  for (int32_t m = 0; bodies && m < sj->maps; m++) fsh_buffer_unref(bodies[m]);
  fsh_free(bodies);
  fsh_free(tasks);
  return rc;
}

int fsh_sched_plan_job_plan(const fsh_sched_plan_job *pj, fsh_buffer **plan, fsh_error *err) {
  *plan = NULL;
  if (pj->n_stages < 1 || pj->n_stages > JOB_MAX_STAGES || !pj->stages)
    return fsh_error_set(err, EINVAL, "plan job: %d stages (1 .. %d)", pj->n_stages,
                         JOB_MAX_STAGES);
  Flightshuffle__Sched__StagePlan *sp = fsh_calloc((size_t)pj->n_stages, sizeof *sp);
  Flightshuffle__Sched__StagePlan **spp = fsh_calloc((size_t)pj->n_stages, sizeof *spp);
  uint32_t *ids = fsh_calloc((size_t)pj->n_stages * JOB_MAX_INPUTS, sizeof *ids);
  int rc = sp && spp && ids ? 0 : fsh_error_set(err, ENOMEM, "plan job: out of memory");
  for (int i = 0; rc == 0 && i < pj->n_stages; i++) {
    const fsh_sched_plan_stage *x = &pj->stages[i];
    if (!x->fragment || x->n_inputs < 0 || x->n_inputs > JOB_MAX_INPUTS) {
      rc = fsh_error_set(err, EINVAL, "plan job: stage %d: no fragment or %d inputs (0 .. %d)",
                         i, x->n_inputs, JOB_MAX_INPUTS);
      break;
    }
    Flightshuffle__Sched__StagePlan y = FLIGHTSHUFFLE__SCHED__STAGE_PLAN__INIT;
    y.stage_id = (uint32_t)i + 1;
    y.kind = (char *)"plan-fragment";
    y.fragment = (ProtobufCBinaryData){(size_t)x->fragment->size, x->fragment->data};
    y.task_count = (uint32_t)x->n_tasks;
    y.n_partitions = (uint32_t)x->n_partitions;
    y.compression = (uint32_t)pj->compression;
    y.result = x->result;
    y.scatter = x->scatter;
    y.pre_shuffle_merge = x->merge;
    y.limited = x->limited;
    y.limit_rows = x->limited ? x->limit_rows : 0;
    y.limit_ordered = x->limited && x->limit_ordered;
    y.n_inputs = y.n_input_nodes = (size_t)x->n_inputs;
    y.inputs = ids + (size_t)i * JOB_MAX_INPUTS;
    y.input_nodes = (int32_t *)x->input_nodes;
    for (int k = 0; k < x->n_inputs; k++) y.inputs[k] = (uint32_t)x->input_stages[k] + 1;
    sp[i] = y;
    spp[i] = &sp[i];
  }
  if (rc == 0) {
    Flightshuffle__Sched__JobPlan jp = FLIGHTSHUFFLE__SCHED__JOB_PLAN__INIT;
    jp.name = (char *)(pj->name ? pj->name : "plan");
    jp.n_stages = (size_t)pj->n_stages;
    jp.stages = spp;
    jp.max_attempts = pj->max_attempts;
    jp.pre_shuffle_merge = pj->merge;
    jp.merge_threshold = pj->merge_threshold;
    jp.slots_per_worker = pj->slots_per_worker;
    jp.backend = (int32_t)pj->backend;
    size_t n = protobuf_c_message_get_packed_size(&jp.base);
    fsh_buffer *b = fsh_buffer_new((int64_t)n, false);
    if (!b) rc = fsh_error_set(err, ENOMEM, "plan job: out of memory");
    else protobuf_c_message_pack(&jp.base, b->data), *plan = b;
  }
  fsh_free(sp);
  fsh_free(spp);
  fsh_free(ids);
  return rc;
}

/* A producer stage's metadata and verification sums (n_tasks, n_parts and
 * shuffle_id set). */
static int producer_init(jstage *st, fsh_error *err) {
  int rc = fsh_shuffle_meta_new(st->shuffle_id, st->n_tasks, st->n_parts, &st->meta, err);
  if (rc) return fsh_error_prefix(err, rc, "stage %u: ", st->id);
  st->part_rows = fsh_calloc((size_t)st->n_parts, sizeof *st->part_rows);
  st->part_sums = fsh_calloc((size_t)st->n_parts, sizeof *st->part_sums);
  st->part_bytes = fsh_calloc((size_t)st->n_parts, sizeof *st->part_bytes);
  st->counted = fsh_calloc((size_t)st->n_tasks, sizeof *st->counted);
  if (!st->part_rows || !st->part_sums || !st->part_bytes || !st->counted)
    return fsh_error_set(err, ENOMEM, "stage %u: out of memory", st->id);
  return 0;
}

/* *in = the index of stage `id`, which stage st (of kind `kind`, at index
 * s) reads: it must be an earlier stage writing a shuffle (EINVAL saying
 * so otherwise). */
static int earlier_producer(const sched_job *j, int s, const jstage *st, const char *kind,
                            uint32_t id, int *in, fsh_error *err) {
  *in = fsh_job_stage_index(j, id);
  if (*in < 0 || *in >= s || !producer(&j->stages[*in]))
    return fsh_error_set(err, EINVAL, "stage %u (%s): input stage %u is not an earlier stage "
                         "writing a shuffle", st->id, kind, id);
  return 0;
}

/* Stage s of j a "plan-fragment" stage (see Sched.proto): its inputs are
 * earlier stages writing a shuffle (each task reads partition t of each,
 * or 0 of a 1-partition one, so an input has 1 or task_count partitions),
 * one per exchange node the fragment reads. The fragment itself is
 * checked by the workers (the driver runs no plan). */
static int plan_stage(sched_job *j, int s, const Flightshuffle__Sched__StagePlan *sp,
                      fsh_error *err) {
  jstage *st = &j->stages[s];
  st->kind = KIND_PLAN;
  if (sp->n_tasks || !sp->fragment.len || sp->n_inputs != sp->n_input_nodes ||
      sp->n_inputs > JOB_MAX_INPUTS)
    return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): needs a fragment, no task "
                         "bodies and one input node per input stage (at most %d): %zu bodies, "
                         "%zu-byte fragment, %zu inputs, %zu input nodes", st->id,
                         JOB_MAX_INPUTS, sp->n_tasks, sp->fragment.len, sp->n_inputs,
                         sp->n_input_nodes);
  if (sp->task_count < 1 || sp->task_count > JOB_MAX_TASKS || sp->n_partitions < 1 ||
      sp->n_partitions > (1u << 24) || sp->compression > FSH_COMPRESSION_ZSTD)
    return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): %u tasks (1 .. %d), %u "
                         "partitions (1 .. %d), compression %u", st->id, sp->task_count,
                         JOB_MAX_TASKS, sp->n_partitions, 1 << 24, sp->compression);
  st->n_tasks = (int32_t)sp->task_count;
  st->n_parts = (int32_t)sp->n_partitions;
  st->compression = (fsh_compression)sp->compression;
  st->result = sp->result;
  st->scatter = sp->scatter;
  if (sp->pre_shuffle_merge < 0 || sp->pre_shuffle_merge > 3)
    return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): pre_shuffle_merge %d (0 the "
                         "job's, 1 off, 2 on, 3 auto)", st->id, sp->pre_shuffle_merge);
  st->merge_mode = sp->pre_shuffle_merge;
  if (sp->limited && (sp->limit_rows < 0 || st->n_parts != 1 || st->result || st->scatter))
    return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): a global limit's stage writes "
                         "1 partition, is neither the job's result nor a scatter and has "
                         "limit_rows >= 0: %d partitions, limit_rows %" PRId64 "%s%s", st->id,
                         st->n_parts, sp->limit_rows, st->result ? ", the job's result" : "",
                         st->scatter ? ", a scatter" : "");
  st->limited = sp->limited;
  st->limit_rows = sp->limit_rows;
  st->limit_ordered = sp->limit_ordered;
  if (st->scatter && sp->n_inputs != 1)
    return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): a scatter reads one stage, not "
                         "%zu", st->id, sp->n_inputs);
  for (size_t i = 0; i < sp->n_inputs; i++) {
    int in;
    FSH_RETURN_NOT_OK(earlier_producer(j, s, st, "plan-fragment", sp->inputs[i], &in, err));
    if (j->stages[in].result)
      return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): input stage %u is the job's "
                           "result", st->id, sp->inputs[i]);
    if (st->scatter && j->stages[in].n_parts != st->n_tasks + 1)
      return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): scatters stage %u of %d "
                           "partitions; %d tasks scatter %d", st->id, sp->inputs[i],
                           j->stages[in].n_parts, st->n_tasks, st->n_tasks + 1);
    if (!st->scatter && j->stages[in].n_parts != 1 && j->stages[in].n_parts != st->n_tasks)
      return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): input stage %u has %d "
                           "partitions; a stage of %d tasks reads 1 or %d", st->id,
                           sp->inputs[i], j->stages[in].n_parts, st->n_tasks, st->n_tasks);
    if (reads(st, in))
      return fsh_error_set(err, EINVAL, "stage %u (plan-fragment): input stage %u named twice",
                           st->id, sp->inputs[i]);
    st->inputs[st->n_inputs] = in;
    st->input_nodes[st->n_inputs++] = sp->input_nodes[i];
    j->stages[in].consumed = true;
  }
  st->input = st->n_inputs ? st->inputs[0] : -1;
  if (!(st->fragment = fsh_buffer_copy(sp->fragment.data, (int64_t)sp->fragment.len)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  return producer_init(st, err);
}

/* Builds a job from a decoded plan (not yet linked); alive: the workers
 * alive at submit (coalesced maps' auto rule). */
static int job_from_plan(const Flightshuffle__Sched__JobPlan *p, uint64_t id, int64_t alive,
                         sched_job **out, fsh_error *err) {
  if (p->n_stages < 1 || p->n_stages > JOB_MAX_STAGES)
    return fsh_error_set(err, EINVAL, "%zu stages (1 .. %d)", p->n_stages, JOB_MAX_STAGES);
  if (p->backend != FSH_TASK_BACKEND_FS && p->backend != FSH_TASK_BACKEND_FLIGHT)
    return fsh_error_set(err, EINVAL, "backend %d: a job runs on workers, fs (1) or flight (2)",
                         p->backend);
  if (p->pre_shuffle_merge < 0 || p->pre_shuffle_merge > 2 || p->merge_threshold < 0)
    return fsh_error_set(err, EINVAL, "pre_shuffle_merge %d (0 off, 1 on, 2 auto) or "
                         "merge_threshold %d (>= 0)", p->pre_shuffle_merge, p->merge_threshold);
  if (p->max_attempts < 0 || p->max_attempts > 100 || p->slots_per_worker < 0 ||
      p->slots_per_worker > 1024)
    return fsh_error_set(err, EINVAL, "max_attempts %d (0 .. 100) or slots_per_worker %d "
                         "(0 .. 1024)", p->max_attempts, p->slots_per_worker);
  sched_job *j = fsh_calloc(1, sizeof *j);
  if (!j || !(j->stages = fsh_calloc(p->n_stages, sizeof *j->stages))) {
    fsh_free(j);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  j->id = id;
  j->state = FSH_SCHED_JOB_RUNNING;
  j->max_attempts = p->max_attempts ? p->max_attempts : JOB_DEFAULT_MAX_ATTEMPTS;
  j->slots = p->slots_per_worker ? p->slots_per_worker : JOB_DEFAULT_SLOTS;
  j->backend = (fsh_task_backend)p->backend;
  j->incremental = p->incremental;
  j->merge_mode = p->pre_shuffle_merge;
  j->merge_threshold = p->merge_threshold;
  j->n_stages = (int)p->n_stages;
  j->first_map_ms = j->last_map_ms = j->first_reduce_ms = -1;
  int rc = 0;
  for (size_t s = 0; rc == 0 && s < p->n_stages; s++) {
    const Flightshuffle__Sched__StagePlan *sp = p->stages[s];
    jstage *st = &j->stages[s];
    st->id = sp->stage_id;
    st->input = -1;
    st->first_ms = st->last_ms = -1;
    st->shuffle_id = (id << 16) | (uint64_t)(s + 1);
    for (size_t o = 0; o < s; o++)
      if (j->stages[o].id == st->id)
        rc = fsh_error_set(err, EINVAL, "stage %u: two stages with that id", st->id);
    if (rc) break;
    const char *kind = sp->kind ? sp->kind : "";
    if (strcmp(kind, "map-synthetic") == 0) {
      st->kind = KIND_MAP;
      if (sp->n_inputs)
        rc = fsh_error_set(err, EINVAL, "stage %u (map-synthetic): reads no stage, but names "
                           "%zu inputs", st->id, sp->n_inputs);
      else if (sp->n_tasks < 1 || sp->n_tasks > JOB_MAX_TASKS)
        rc = fsh_error_set(err, EINVAL, "stage %u (map-synthetic): %zu tasks (1 .. %d)", st->id,
                           sp->n_tasks, JOB_MAX_TASKS);
      if (rc) break;
      st->n_tasks = (int32_t)sp->n_tasks;
      if (!(st->maps = fsh_calloc(sp->n_tasks, sizeof *st->maps))) {
        rc = fsh_error_set(err, ENOMEM, "out of memory");
        break;
      }
      for (int32_t t = 0; rc == 0 && t < st->n_tasks; t++) {
        static const uint8_t empty[1];
        const ProtobufCBinaryData *b = &sp->tasks[t];
        rc = fsh_map_task_decode(b->data ? b->data : empty, (int64_t)b->len, &st->maps[t], err);
        if (rc) {
          rc = fsh_error_prefix(err, rc, "stage %u task %d: ", st->id, t);
        } else if (st->maps[t].backend != j->backend) {
          rc = fsh_error_set(err, EINVAL, "stage %u task %d: backend %s, the job's is %s", st->id,
                             t, fsh_task_backend_name(st->maps[t].backend),
                             fsh_task_backend_name(j->backend));
        } else if (t > 0 && st->maps[t].n_partitions != st->maps[0].n_partitions) {
          rc = fsh_error_set(err, EINVAL, "stage %u task %d: %d partitions, task 0 has %d",
                             st->id, t, st->maps[t].n_partitions, st->maps[0].n_partitions);
        } else {
          st->maps[t].map_id = t;
          st->maps[t].shuffle_id = st->shuffle_id;
        }
      }
      if (rc) break;
      st->n_parts = st->maps[0].n_partitions;
      fsh_job_coalesce_maps(j, st, p->maps_per_task, alive * j->slots);
      rc = producer_init(st, err);
    } else if (strcmp(kind, "reduce-verify") == 0) {
      st->kind = KIND_REDUCE;
      if (sp->n_tasks)
        rc = fsh_error_set(err, EINVAL, "stage %u (reduce-verify): its tasks come from its input; "
                           "the plan may not carry %zu task bodies", st->id, sp->n_tasks);
      else if (sp->n_inputs != 1)
        rc = fsh_error_set(err, EINVAL, "stage %u (reduce-verify): reads exactly one stage, not "
                           "%zu", st->id, sp->n_inputs);
      if (rc) break;
      int in;
      if ((rc = earlier_producer(j, (int)s, st, "reduce-verify", sp->inputs[0], &in, err)) != 0) break;
      st->input = in;
      st->n_inputs = 1;
      st->inputs[0] = in;
      j->stages[in].consumed = true;
      st->n_tasks = j->stages[in].n_parts; /* until its runs are chosen (job_runs.c) */
      st->run_bytes = p->reduce_task_bytes;
    } else if (strcmp(kind, "reduce-then-map") == 0) {
      st->kind = KIND_REDUCE_MAP;
      if (sp->n_tasks || sp->n_inputs != 1)
        rc = fsh_error_set(err, EINVAL, "stage %u (reduce-then-map): reads exactly one stage and "
                           "carries no task bodies (%zu inputs, %zu bodies)", st->id,
                           sp->n_inputs, sp->n_tasks);
      else if (sp->n_partitions < 1 || sp->n_partitions > (1u << 24) || sp->key_column > 2 ||
               sp->compression > FSH_COMPRESSION_ZSTD)
        rc = fsh_error_set(err, EINVAL, "stage %u (reduce-then-map): %u partitions (1 .. %d), key "
                           "column %u (0 .. 2), compression %u", st->id, sp->n_partitions,
                           1 << 24, sp->key_column, sp->compression);
      if (rc) break;
      int in;
      if ((rc = earlier_producer(j, (int)s, st, "reduce-then-map", sp->inputs[0], &in, err)) != 0) break;
      st->input = in;
      st->n_inputs = 1;
      st->inputs[0] = in;
      j->stages[in].consumed = true;
      st->n_tasks = j->stages[in].n_parts;
      st->n_parts = (int32_t)sp->n_partitions;
      st->key_column = (int32_t)sp->key_column;
      st->compression = (fsh_compression)sp->compression;
      rc = producer_init(st, err);
    } else if (strcmp(kind, "plan-fragment") == 0) {
      rc = plan_stage(j, (int)s, sp, err);
    } else {
      rc = fsh_error_set(err, EINVAL, "stage %u: unknown task type '%s' (map-synthetic, "
                         "reduce-verify, reduce-then-map, plan-fragment)", st->id, kind);
    }
    if (rc == 0 && !(st->tasks = fsh_calloc((size_t)st->n_tasks, sizeof *st->tasks)))
      rc = fsh_error_set(err, ENOMEM, "out of memory");
  }
  if (rc) {
    fsh_job_free(j);
    return rc;
  }
  fsh_job_merge_setup(j);
  *out = j;
  return 0;
}

int fsh_sched_driver_submit(fsh_sched_driver *d, const void *plan, int64_t size,
                            uint64_t *job_id, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__JobPlan *p = flightshuffle__sched__job_plan__unpack(
      &fsh_sched_pb_allocator, (size_t)size, plan ? plan : empty);
  if (!p) return fsh_error_set(err, EINVAL, "driver %s: submit: malformed JobPlan (%lld bytes)",
                               d->uri, (long long)size);
  pthread_mutex_lock(&d->mu);
  uint64_t id = d->next_job_id++;
  int64_t alive = 0;
  for (int64_t i = 0; i < d->n; i++) alive += d->workers[i].state == FSH_SCHED_WORKER_ALIVE;
  pthread_mutex_unlock(&d->mu);
  sched_job *j = NULL;
  int rc = job_from_plan(p, id, alive, &j, err);
  flightshuffle__sched__job_plan__free_unpacked(p, &fsh_sched_pb_allocator);
  if (rc) return fsh_error_prefix(err, rc, "driver %s: submit: ", d->uri);
  pthread_mutex_lock(&d->mu);
  j->start_ms = fsh_sched_now_ms();
  sched_job **at = &d->jobs;
  while (*at) at = &(*at)->next;
  *at = j;
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
  pthread_mutex_unlock(&d->mu);
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " submitted (%d stages)\n", id,
            j->n_stages);
  *job_id = id;
  return 0;
}

int fsh_sched_action_submit(fsh_sched_driver *d, const fsh_flight_action *a,
                            fsh_flight_result_list *out, fsh_error *err) {
  uint64_t id = 0;
  FSH_RETURN_NOT_OK(fsh_sched_driver_submit(d, a->body.data, a->body.size, &id, err));
  Flightshuffle__Sched__SubmitReply r = FLIGHTSHUFFLE__SCHED__SUBMIT_REPLY__INIT;
  r.job_id = id;
  return fsh_sched_push_message(out, &r.base, "driver: submit", err);
}
