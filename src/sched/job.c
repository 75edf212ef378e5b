/* job.c -- jobs in the driver (contracts in sched.h, "jobs"): the plan
 * (JobPlan -> stages of tasks), the scheduler thread that places attempts
 * on workers and sends them (DoAction "task"), the bookkeeping of attempts
 * and of the map outputs' lineage (compact per-stage arrays, never an
 * object per block), worker loss and recomputation, shuffle release, the
 * "submit" / "task-done" / "job-status" actions and the status.
 *
 * Locking: everything of a job is guarded by the driver's mu. The actions
 * (Flight pool threads) only take mu; the network (sending tasks, the
 * task-wait fallback, releases) is done by the scheduler thread with mu
 * released. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/sched_internal.h"

#define JOB_DEFAULT_MAX_ATTEMPTS 4
#define JOB_DEFAULT_SLOTS 2
#define JOB_MAX_TASKS (1 << 22)
#define JOB_MAX_STAGES 64
#define POLL_AFTER_MS 2000   /* the task-wait fallback: first poll of an attempt */
#define POLL_EVERY_MS 2000
#define TASK_CALL_TIMEOUT_MS 5000
#define SCHED_IDLE_MS 200

enum { KIND_MAP = 1, KIND_REDUCE = 2, KIND_REDUCE_MAP = 3 };
enum { T_PENDING = 0, T_RUNNING = 1, T_DONE = 2 };

typedef struct jtask {
  uint8_t state;
  bool recompute;       /* pending again because its output was lost */
  char *lost;           /* owned: why (the "recomputed" reason when it runs again) */
  int32_t next_attempt; /* attempts launched so far */
  int32_t attempt;      /* the running attempt, or the one whose output is current */
  int32_t failures;     /* counted failures (bounded by max_attempts) */
  int32_t input_losses; /* failures for a lost input (bounded by 4 x max_attempts) */
  uint64_t worker_id;   /* running attempt's worker, or the output's holder */
  uint64_t wtask;       /* the worker's task id (task-wait fallback); 0: unknown */
  bool sending;         /* the scheduler is sending it */
  int64_t start_ms, poll_ms;
  /* results */
  int64_t rows, bytes, batches; /* map: input rows, bytes written; reduce: read */
  uint64_t checksum;            /* reduce */
  int64_t nanos;                /* the task's own time */
  int64_t input_bytes;          /* map */
} jtask;

typedef struct jstage {
  uint32_t id;
  int kind;
  int32_t n_tasks, n_done;
  jtask *tasks;
  fsh_map_task *maps; /* KIND_MAP: the decoded bodies */
  /* producers (KIND_MAP, KIND_REDUCE_MAP) write a shuffle: */
  int32_t n_parts;    /* partitions of its shuffle */
  uint64_t shuffle_id;
  int32_t key_column; /* KIND_REDUCE_MAP: the key of its output */
  fsh_compression compression; /* KIND_REDUCE_MAP */
  int input;          /* consumers (KIND_REDUCE, KIND_REDUCE_MAP): their input stage */
  bool consumed;      /* producers: some stage reads it */
  bool released;
  /* producers: the metadata of the current outputs (shuffle_meta: compact
   * arrays, about a bit per block) and, to verify the consumers, what the
   * tasks wrote per partition (rows, row checksums; added once per task:
   * a re-run writes the same rows) */
  fsh_shuffle_meta *meta;
  int64_t *part_rows;  /* [n_parts] */
  uint64_t *part_sums; /* [n_parts] */
  bool *counted;       /* [n_tasks] */
  int64_t first_ms, last_ms; /* first start, last end */
} jstage;

typedef struct event_list {
  int32_t n, cap;
  fsh_sched_task_event *items;
} event_list;

struct sched_job {
  uint64_t id;
  fsh_sched_job_state state;
  char error[1200];
  int max_attempts, slots;
  bool incremental;
  fsh_task_backend backend;
  int n_stages;
  jstage *stages;
  event_list retried, recomputed, ignored;
  int64_t start_ms, end_ms, first_map_ms, last_map_ms, first_reduce_ms;
  int64_t bytes_spilled;
  int releasing; /* shuffles being released by the scheduler */
  sched_job *next;
};

struct sched_client {
  char *uri;
  fsh_flight_client *client;
  sched_client *next;
};

/* ---- small helpers ----------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void event_push(event_list *l, uint32_t stage, int32_t task, int32_t attempt,
                       const char *fmt, ...) FSH_PRINTF(5, 6);
static void event_push(event_list *l, uint32_t stage, int32_t task, int32_t attempt,
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

static void job_free(sched_job *j) {
  if (!j) return;
  for (int s = 0; j->stages && s < j->n_stages; s++) {
    jstage *st = &j->stages[s];
    fsh_free(st->maps);
    fsh_shuffle_meta_free(st->meta);
    fsh_free(st->part_rows);
    fsh_free(st->part_sums);
    fsh_free(st->counted);
    for (int32_t t = 0; st->tasks && t < st->n_tasks; t++) fsh_free(st->tasks[t].lost);
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
    job_free(j);
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

static sched_job *find_job(fsh_sched_driver *d, uint64_t id) {
  for (sched_job *j = d->jobs; j; j = j->next)
    if (j->id == id) return j;
  return NULL;
}

static driver_worker *find_worker(fsh_sched_driver *d, uint64_t id) {
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
static void cancel_attempt(fsh_sched_driver *d, const sched_job *j, const jstage *st, int32_t t,
                           int32_t attempt, uint64_t wid) {
  driver_worker *w = find_worker(d, wid);
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
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

/* Whether the tasks of st take the reduce slots (incremental reduces). */
static bool reduce_slot(const sched_job *j, const jstage *st) {
  return j->incremental && st->kind == KIND_REDUCE;
}

/* An attempt placed on worker wid ended: its slot is free again. */
static void worker_release(fsh_sched_driver *d, uint64_t wid, bool reduce) {
  driver_worker *w = find_worker(d, wid);
  if (!w) return;
  int *n = reduce ? &w->running_reduce : &w->running;
  if (*n > 0) (*n)--;
}

static int stage_index(const sched_job *j, uint32_t id) {
  for (int s = 0; s < j->n_stages; s++)
    if (j->stages[s].id == id) return s;
  return -1;
}

static const char *kind_name(int kind) {
  return kind == KIND_MAP ? "map-synthetic" : kind == KIND_REDUCE ? "reduce-verify"
                                                                  : "reduce-then-map";
}

static bool producer(const jstage *st) { return st->kind != KIND_REDUCE; }
static bool consumer(const jstage *st) { return st->kind != KIND_MAP; }

/* The job is over: no more attempts (their late answers are ignored). */
static void job_end(fsh_sched_driver *d, sched_job *j, fsh_sched_job_state state) {
  if (j->state != FSH_SCHED_JOB_RUNNING) return;
  j->state = state;
  j->end_ms = fsh_sched_now_ms();
  for (int s = 0; s < j->n_stages; s++)
    for (int32_t t = 0; t < j->stages[s].n_tasks; t++) {
      jtask *k = &j->stages[s].tasks[t];
      if (k->state != T_RUNNING) continue;
      worker_release(d, k->worker_id, reduce_slot(j, &j->stages[s]));
      cancel_attempt(d, j, &j->stages[s], t, k->attempt, k->worker_id);
      k->state = T_PENDING;
    }
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " %s%s%s\n", j->id,
            fsh_sched_job_state_name(state), state == FSH_SCHED_JOB_FAILED ? ": " : "",
            state == FSH_SCHED_JOB_FAILED ? j->error : "");
  pthread_cond_broadcast(&d->job_cv);
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

/* A stage is complete: all its tasks done. A map stage also counts as
 * complete (no longer needed) once every stage reading it is. */
static bool stage_complete(const sched_job *j, int s);

static bool consumers_complete(const sched_job *j, int s) {
  for (int c = 0; c < j->n_stages; c++)
    if (consumer(&j->stages[c]) && j->stages[c].input == s && !stage_complete(j, c))
      return false;
  return true;
}

static bool stage_complete(const sched_job *j, int s) {
  const jstage *st = &j->stages[s];
  if (st->n_done == st->n_tasks) return true;
  return producer(st) && st->consumed && consumers_complete(j, s);
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

/* A producer stage's metadata and verification sums (n_tasks, n_parts and
 * shuffle_id set). */
static int producer_init(jstage *st, fsh_error *err) {
  int rc = fsh_shuffle_meta_new(st->shuffle_id, st->n_tasks, st->n_parts, &st->meta, err);
  if (rc) return fsh_error_prefix(err, rc, "stage %u: ", st->id);
  st->part_rows = fsh_calloc((size_t)st->n_parts, sizeof *st->part_rows);
  st->part_sums = fsh_calloc((size_t)st->n_parts, sizeof *st->part_sums);
  st->counted = fsh_calloc((size_t)st->n_tasks, sizeof *st->counted);
  if (!st->part_rows || !st->part_sums || !st->counted)
    return fsh_error_set(err, ENOMEM, "stage %u: out of memory", st->id);
  return 0;
}

/* Whether the current output of task t of producer st has rows for p. */
static bool block_non_empty(const jstage *st, int32_t t, int32_t p) {
  int64_t rows = 0, bytes = 0;
  fsh_error e;
  return fsh_shuffle_meta_block(st->meta, t, p, &rows, &bytes, &e) == 0 && (rows || bytes);
}

/* Builds a job from a decoded plan (not yet linked). */
static int job_from_plan(const Flightshuffle__Sched__JobPlan *p, uint64_t id, sched_job **out,
                         fsh_error *err) {
  if (p->n_stages < 1 || p->n_stages > JOB_MAX_STAGES)
    return fsh_error_set(err, EINVAL, "%zu stages (1 .. %d)", p->n_stages, JOB_MAX_STAGES);
  if (p->backend != FSH_TASK_BACKEND_FS && p->backend != FSH_TASK_BACKEND_FLIGHT)
    return fsh_error_set(err, EINVAL, "backend %d: a job runs on workers, fs (1) or flight (2)",
                         p->backend);
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
      int in = stage_index(j, sp->inputs[0]);
      if (in < 0 || in >= (int)s || !producer(&j->stages[in]))
        rc = fsh_error_set(err, EINVAL, "stage %u (reduce-verify): input stage %u is not an "
                           "earlier stage writing a shuffle", st->id, sp->inputs[0]);
      if (rc) break;
      st->input = in;
      j->stages[in].consumed = true;
      st->n_tasks = j->stages[in].n_parts;
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
      int in = stage_index(j, sp->inputs[0]);
      if (in < 0 || in >= (int)s || !producer(&j->stages[in]))
        rc = fsh_error_set(err, EINVAL, "stage %u (reduce-then-map): input stage %u is not an "
                           "earlier stage writing a shuffle", st->id, sp->inputs[0]);
      if (rc) break;
      st->input = in;
      j->stages[in].consumed = true;
      st->n_tasks = j->stages[in].n_parts;
      st->n_parts = (int32_t)sp->n_partitions;
      st->key_column = (int32_t)sp->key_column;
      st->compression = (fsh_compression)sp->compression;
      rc = producer_init(st, err);
    } else {
      rc = fsh_error_set(err, EINVAL, "stage %u: unknown task type '%s' (map-synthetic, "
                         "reduce-verify, reduce-then-map)", st->id, kind);
    }
    if (rc == 0 && !(st->tasks = fsh_calloc((size_t)st->n_tasks, sizeof *st->tasks)))
      rc = fsh_error_set(err, ENOMEM, "out of memory");
  }
  if (rc) {
    job_free(j);
    return rc;
  }
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
  pthread_mutex_unlock(&d->mu);
  sched_job *j = NULL;
  int rc = job_from_plan(p, id, &j, err);
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

/* ---- lineage: a worker is lost ----------------------------------------- */

void fsh_sched_jobs_worker_lost(fsh_sched_driver *d, uint64_t wid, const char *uri,
                                const char *why) {
  for (sched_job *j = d->jobs; j; j = j->next) {
    if (j->state != FSH_SCHED_JOB_RUNNING) continue;
    for (int s = 0; s < j->n_stages; s++) {
      jstage *st = &j->stages[s];
      bool *hit = NULL; /* partitions of consumers that lost an input */
      for (int32_t t = 0; t < st->n_tasks; t++) {
        jtask *k = &st->tasks[t];
        if (k->worker_id != wid) continue;
        if (k->state == T_RUNNING) {
          event_push(&j->retried, st->id, t, k->attempt, "worker %s lost (%s) while running it",
                     uri, why);
          /* declared dead, it may still be alive (a fetch from it failed,
           * or it was late): stop the attempt there */
          cancel_attempt(d, j, st, t, k->attempt, wid);
          k->state = T_PENDING;
          k->wtask = 0;
        } else if (k->state == T_DONE && producer(st) && !st->released) {
          /* lost; re-run only if (or once) a consumer still needs it */
          char reason[700];
          snprintf(reason, sizeof reason, "its output (attempt %d) was on worker %s, lost (%s)",
                   k->attempt, uri, why);
          fsh_free(k->lost);
          k->lost = fsh_strdup(reason);
          k->state = T_PENDING;
          k->recompute = true;
          st->n_done--;
          if (!hit) hit = fsh_calloc((size_t)st->n_parts, sizeof *hit);
          for (int32_t p = 0; hit && p < st->n_parts; p++)
            if (!hit[p] && block_non_empty(st, t, p)) hit[p] = true;
        }
      }
      if (producer(st) && !st->released) {
        /* the metadata forgets every output held at that uri */
        int64_t *ids = NULL, n_ids = 0;
        fsh_error e;
        if (fsh_shuffle_meta_lose_location(st->meta, uri, &ids, &n_ids, &e) != 0 && d->log)
          fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %s\n", j->id, st->id,
                  e.message);
        fsh_free(ids);
      }
      if (!hit) continue;
      /* running consumers that read a lost output: retried once it is back */
      for (int c = 0; c < j->n_stages; c++) {
        jstage *cs = &j->stages[c];
        if (!consumer(cs) || cs->input != s) continue;
        for (int32_t p = 0; p < cs->n_tasks; p++) {
          jtask *k = &cs->tasks[p];
          if (k->state != T_RUNNING || !hit[p]) continue;
          event_push(&j->retried, cs->id, p, k->attempt, "an input of it (stage %u) was on "
                     "worker %s, lost (%s)", st->id, uri, why);
          cancel_attempt(d, j, cs, p, k->attempt, k->worker_id);
          worker_release(d, k->worker_id, reduce_slot(j, cs));
          k->state = T_PENDING;
          k->wtask = 0;
        }
      }
      fsh_free(hit);
    }
  }
  /* its own running count no longer matters (dead), but keep it honest */
  driver_worker *w = find_worker(d, wid);
  if (w) w->running = w->running_reduce = 0;
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

/* ---- an attempt ended ------------------------------------------------- */

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

/* Records the end of attempt `attempt` of task t of stage s. mu held. */
static void attempt_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t t, int32_t attempt,
                          bool ok, const char *error, const uint8_t *answer, int64_t size) {
  jstage *st = &j->stages[s];
  jtask *k = &st->tasks[t];
  if (j->state != FSH_SCHED_JOB_RUNNING || k->state != T_RUNNING || k->attempt != attempt) {
    if (j->state == FSH_SCHED_JOB_RUNNING)
      event_push(&j->ignored, st->id, t, attempt, "a late %s of a superseded attempt",
                 ok ? "answer" : "failure");
    return;
  }
  worker_release(d, k->worker_id, reduce_slot(j, st));
  int64_t now = fsh_sched_now_ms();
  fsh_error err = {{0}};
  int rc = 0;
  if (ok && producer(st)) {
    fsh_map_task_result r;
    rc = fsh_map_task_result_decode(answer, size, &r, &err);
    if (rc == 0) {
      if (r.output.n_partitions != st->n_parts || r.output.map_id != t ||
          r.output.attempt != attempt || r.output.shuffle_id != st->shuffle_id)
        rc = fsh_error_set(&err, EPROTO, "the answer is of map %" PRId64 " attempt %d of shuffle "
                           "%" PRIu64 " with %d partitions", r.output.map_id, r.output.attempt,
                           r.output.shuffle_id, r.output.n_partitions);
      fsh_shuffle_meta_add_result added = FSH_SHUFFLE_META_ACCEPTED;
      if (rc == 0) rc = fsh_shuffle_meta_add(st->meta, &r.output, &added, &err);
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
        if (!st->counted[t]) { /* a re-run writes the same rows */
          st->counted[t] = true;
          for (size_t p = 0; p < n; p++) {
            st->part_rows[p] += r.output.rows[p];
            st->part_sums[p] += r.row_checksums[p];
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
              st->id, kind_name(st->kind));
  } else {
    const char *why = ok ? err.message : (error ? error : "(no message)");
    k->state = T_PENDING;
    k->wtask = 0;
    char lost[512];
    if (!ok && lost_outputs_worker(why, lost, sizeof lost) &&
        ++k->input_losses <= 4 * j->max_attempts) {
      /* an input is gone with its worker: not the task's fault (bounded
       * all the same: a loss that recurs forever ends the job) */
      event_push(&j->retried, st->id, t, attempt, "%s", why);
      for (int64_t i = 0; i < d->n; i++)
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
      event_push(&j->retried, st->id, t, attempt, "failed (%d of %d): %s", k->failures,
                 j->max_attempts, why);
      if (k->failures >= j->max_attempts) {
        snprintf(j->error, sizeof j->error, "stage %u (%s) task %d failed %d times; last: %.1000s",
                 st->id, kind_name(st->kind), t, k->failures, why);
        job_end(d, j, FSH_SCHED_JOB_FAILED);
        return;
      }
    }
  }
  /* the job is over when every stage nobody reads is complete */
  bool all = true;
  for (int x = 0; x < j->n_stages && all; x++)
    if (!(producer(&j->stages[x]) && j->stages[x].consumed) && !stage_complete(j, x))
      all = false;
  if (all) job_end(d, j, FSH_SCHED_JOB_SUCCEEDED);
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
  Flightshuffle__Sched__TaskRef *ref = flightshuffle__sched__task_ref__unpack(
      &fsh_sched_pb_allocator, m->ref.len, m->ref.data ? m->ref.data : empty);
  int rc = 0;
  if (!ref) {
    rc = fsh_error_set(err, EINVAL, "driver %s: task-done: malformed TaskRef (%zu bytes)", d->uri,
                       m->ref.len);
  } else {
    pthread_mutex_lock(&d->mu);
    sched_job *j = find_job(d, ref->job_id);
    int s = j ? stage_index(j, ref->stage_id) : -1;
    if (!j)
      rc = fsh_error_set(err, ENOENT, "driver %s: task-done: no job %" PRIu64, d->uri,
                         ref->job_id);
    else if (s < 0 || ref->task < 0 || ref->task >= j->stages[s].n_tasks || ref->attempt < 0)
      rc = fsh_error_set(err, EINVAL, "driver %s: task-done: job %" PRIu64 " has no stage %u "
                         "task %d attempt %d", d->uri, ref->job_id, ref->stage_id, ref->task,
                         ref->attempt);
    else
      attempt_ended(d, j, s, ref->task, ref->attempt, m->ok, m->error, m->answer.data,
                    (int64_t)m->answer.len);
    pthread_mutex_unlock(&d->mu);
    flightshuffle__sched__task_ref__free_unpacked(ref, &fsh_sched_pb_allocator);
  }
  flightshuffle__sched__task_done__free_unpacked(m, &fsh_sched_pb_allocator);
  return rc;
}

/* ---- the scheduler thread ---------------------------------------------- */

typedef struct launch {
  uint64_t job_id; /* looked up again when the answer comes (it may be gone) */
  int stage;
  int32_t task, attempt;
  char uri[320];
  fsh_buffer *body; /* the "task" envelope, or the "cancel" tag */
  bool poll;        /* a task-wait of wtask instead */
  bool cancel;      /* a "cancel" of the attempt instead */
  uint64_t wtask;
} launch;

typedef struct launch_list {
  int32_t n, cap;
  launch *items;
} launch_list;

static launch *launch_push(launch_list *l) {
  if (l->n == l->cap) {
    int32_t cap = l->cap ? l->cap * 2 : 64;
    launch *x = fsh_realloc(l->items, (size_t)cap * sizeof *x);
    if (!x) return NULL;
    l->items = x;
    l->cap = cap;
  }
  launch *x = &l->items[l->n++];
  memset(x, 0, sizeof *x);
  return x;
}

/* The "task" envelope of a kind's body, with the TaskRef tag. */
static int envelope(const char *kind, const sched_job *j, const jstage *st, int32_t t,
                    int32_t attempt, const fsh_buffer *body, fsh_buffer **out, fsh_error *err) {
  Flightshuffle__Sched__TaskRef ref = FLIGHTSHUFFLE__SCHED__TASK_REF__INIT;
  ref.job_id = j->id;
  ref.stage_id = st->id;
  ref.task = t;
  ref.attempt = attempt;
  size_t tl = protobuf_c_message_get_packed_size(&ref.base), kl = strlen(kind);
  fsh_buffer *b = fsh_buffer_new((int64_t)(16 + kl + tl) + body->size, false);
  if (!b) return fsh_error_set(err, ENOMEM, "out of memory");
  uint8_t *p = b->data;
  memcpy(p, "FSTE\x01\0\0\0", 8);
  put32(p + 8, (uint32_t)kl);
  put32(p + 12, (uint32_t)tl);
  memcpy(p + 16, kind, kl);
  protobuf_c_message_pack(&ref.base, p + 16 + kl);
  memcpy(p + 16 + kl + tl, body->data, (size_t)body->size);
  *out = b;
  return 0;
}

/* Reduce task p of consumer stage st, reading the current outputs of its
 * input stage (from its metadata: sizes approximate, so sizes_unknown):
 * t->sources and t->locations allocated, the location strings borrowed
 * from the metadata (free the two arrays only). mu held. */
static int reduce_task_of(const sched_job *j, const jstage *st, int32_t p, bool incremental,
                          fsh_reduce_task *t, fsh_error *err) {
  const jstage *in = &j->stages[st->input];
  *t = (fsh_reduce_task){.shuffle_id = in->shuffle_id, .partition = p,
                         .n_partitions = in->n_parts, .backend = j->backend,
                         .incremental = incremental, .sizes_unknown = true};
  if (incremental) return 0; /* it asks for its inputs ("map-outputs") */
  fsh_shuffle_sources src = {0};
  int rc = fsh_shuffle_meta_sources(in->meta, p, 0, &src, err);
  uint32_t n_ids = fsh_shuffle_meta_n_locations(in->meta);
  int32_t *loc_of = rc ? NULL : fsh_malloc((size_t)(n_ids ? n_ids : 1) * sizeof *loc_of);
  if (rc == 0) {
    t->sources = fsh_calloc((size_t)(src.n ? src.n : 1), sizeof *t->sources);
    t->locations = fsh_calloc((size_t)(n_ids ? n_ids : 1), sizeof *t->locations);
    if (!t->sources || !loc_of || !t->locations) rc = fsh_error_set(err, ENOMEM, "out of memory");
  }
  for (uint32_t i = 0; rc == 0 && i < n_ids; i++) loc_of[i] = -1;
  for (int64_t i = 0; rc == 0 && i < src.n; i++) {
    uint32_t l = src.location_ids[i];
    if (l >= n_ids) {
      rc = fsh_error_set(err, EPROTO, "stage %u: map %" PRId64 " at an unknown location %u",
                         in->id, src.map_ids[i], l);
      break;
    }
    if (loc_of[l] < 0) {
      loc_of[l] = t->n_locations;
      t->locations[t->n_locations++] = (char *)fsh_shuffle_meta_location_uri(in->meta, l);
    }
    t->sources[t->n_sources++] = (fsh_reduce_source){
        .map_id = src.map_ids[i], .attempt = src.attempts[i], .location = loc_of[l],
        .bytes = src.bytes[i]};
  }
  fsh_free(loc_of);
  fsh_shuffle_sources_reset(&src);
  if (rc) {
    fsh_free(t->sources);
    fsh_free(t->locations);
    memset(t, 0, sizeof *t);
  }
  return rc;
}

/* The body of reduce-verify task p of stage st. mu held. */
static int reduce_body(const sched_job *j, const jstage *st, int32_t p, fsh_buffer **out,
                       fsh_error *err) {
  fsh_reduce_task t;
  FSH_RETURN_NOT_OK(reduce_task_of(j, st, p, j->incremental, &t, err));
  int rc = fsh_reduce_task_encode(&t, out, err);
  fsh_free(t.sources);
  fsh_free(t.locations); /* the strings are the metadata's */
  return rc;
}

/* The body of reduce-then-map task p (attempt) of stage st. mu held. */
static int reduce_map_body(const sched_job *j, const jstage *st, int32_t p, int32_t attempt,
                           fsh_buffer **out, fsh_error *err) {
  fsh_reduce_map_task t = {.out_shuffle_id = st->shuffle_id, .map_id = p, .attempt = attempt,
                           .out_partitions = st->n_parts, .key_column = st->key_column,
                           .compression = st->compression};
  FSH_RETURN_NOT_OK(reduce_task_of(j, st, p, false, &t.in, err));
  int rc = fsh_reduce_map_task_encode(&t, out, err);
  fsh_free(t.in.sources);
  fsh_free(t.in.locations);
  return rc;
}

/* Picks the worker for task t of stage s: alive, a free slot; maps: the
 * least loaded; reduces: the one holding most input bytes. NULL if none. */
static driver_worker *place(fsh_sched_driver *d, const sched_job *j, int s, int32_t t) {
  const jstage *st = &j->stages[s];
  /* a consumer: the location holding most of its partition's bytes */
  const char *best_uri = NULL;
  if (consumer(st)) {
    const jstage *in = &j->stages[st->input];
    fsh_shuffle_partition_totals tot;
    fsh_error e;
    if (fsh_shuffle_meta_partition_totals(in->meta, t, &tot, &e) == 0 &&
        tot.best_location_bytes > 0)
      best_uri = fsh_shuffle_meta_location_uri(in->meta, tot.best_location);
  }
  driver_worker *best = NULL;
  int best_busy = 0;
  for (int64_t i = 0; i < d->n; i++) {
    driver_worker *w = &d->workers[i];
    int busy = reduce_slot(j, st) ? w->running_reduce : w->running;
    if (w->state != FSH_SCHED_WORKER_ALIVE || w->suspect_ms || busy >= j->slots) continue;
    if (best_uri && strcmp(w->uri, best_uri) == 0) return w;
    if (!best || busy < best_busy) {
      best = w;
      best_busy = busy;
    }
  }
  return best;
}

/* Whether a stage's tasks may start: a reduce once its map stage is done,
 * or (incremental) once it has a first output. */
static bool stage_may_start(const sched_job *j, int s) {
  const jstage *st = &j->stages[s];
  if (st->kind == KIND_MAP) return true;
  const jstage *in = &j->stages[st->input];
  if (in->released) return false; /* plan_round brings it back first */
  return j->incremental && st->kind == KIND_REDUCE ? in->n_done > 0
                                                   : in->n_done == in->n_tasks;
}

/* Stage `in` was released (its consumers had completed) but consumer `c`
 * must run again: every task of `in` is to be recomputed. mu held. */
static void bring_back(fsh_sched_driver *d, sched_job *j, int in, const jstage *c) {
  d->kick = true; /* its own input may be released too: the next round sees it */
  jstage *st = &j->stages[in];
  char reason[300];
  snprintf(reason, sizeof reason, "its output (shuffle %" PRIu64 ") was released once stage %u "
           "had completed; stage %u must run again", st->shuffle_id, c->id, c->id);
  for (int32_t t = 0; t < st->n_tasks; t++) {
    jtask *k = &st->tasks[t];
    if (k->state != T_DONE) continue;
    bool gone = false;
    fsh_error e;
    if (fsh_shuffle_meta_lose_output(st->meta, t, k->attempt, &gone, &e) != 0 && d->log)
      fprintf(stderr, "flightshuffle: driver: %s\n", e.message);
    fsh_free(k->lost);
    k->lost = fsh_strdup(reason);
    k->state = T_PENDING;
    k->recompute = true;
  }
  st->n_done = 0;
  st->released = false;
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %s\n", j->id, st->id,
            reason);
}

/* Plans the launches and polls of this round; mu held. */
static void plan_round(fsh_sched_driver *d, launch_list *l) {
  int64_t now = fsh_sched_now_ms();
  for (int32_t i = 0; i < d->n_cancels; i++) {
    const sched_cancel *c = &d->cancels[i];
    Flightshuffle__Sched__TaskRef ref = FLIGHTSHUFFLE__SCHED__TASK_REF__INIT;
    ref.job_id = c->job_id;
    ref.stage_id = c->stage_id;
    ref.task = c->task;
    ref.attempt = c->attempt;
    fsh_buffer *b = fsh_buffer_new((int64_t)protobuf_c_message_get_packed_size(&ref.base), false);
    launch *x = b ? launch_push(l) : NULL;
    if (!x) {
      fsh_buffer_unref(b);
      continue; /* best effort */
    }
    protobuf_c_message_pack(&ref.base, b->data);
    *x = (launch){.job_id = c->job_id, .task = c->task, .attempt = c->attempt, .cancel = true,
                  .body = b};
    snprintf(x->uri, sizeof x->uri, "%s", c->uri);
  }
  d->n_cancels = 0;
  for (sched_job *j = d->jobs; j; j = j->next) {
    if (j->state != FSH_SCHED_JOB_RUNNING) continue;
    for (int s = 0; s < j->n_stages; s++) {
      jstage *st = &j->stages[s];
      if (consumer(st) && j->stages[st->input].released && !stage_complete(j, s))
        bring_back(d, j, st->input, st);
      bool may = stage_may_start(j, s) && !stage_complete(j, s);
      for (int32_t t = 0; t < st->n_tasks; t++) {
        jtask *k = &st->tasks[t];
        if (k->state == T_RUNNING && !k->sending && k->wtask && now - k->start_ms > POLL_AFTER_MS &&
            now - k->poll_ms > POLL_EVERY_MS) {
          driver_worker *w = find_worker(d, k->worker_id);
          launch *x = w ? launch_push(l) : NULL;
          if (!x) continue;
          k->poll_ms = now;
          *x = (launch){.job_id = j->id, .stage = s, .task = t, .attempt = k->attempt,
                        .poll = true, .wtask = k->wtask};
          snprintf(x->uri, sizeof x->uri, "%s", w->uri);
          continue;
        }
        if (!may || k->state != T_PENDING) continue;
        driver_worker *w = place(d, j, s, t);
        if (!w) break;
        fsh_error err = {{0}};
        fsh_buffer *body = NULL, *env = NULL;
        int32_t attempt = k->next_attempt;
        int rc;
        if (st->kind == KIND_MAP) {
          fsh_map_task mt = st->maps[t];
          mt.attempt = attempt;
          rc = fsh_map_task_encode(&mt, &body, &err);
        } else if (st->kind == KIND_REDUCE) {
          rc = reduce_body(j, st, t, &body, &err);
        } else {
          rc = reduce_map_body(j, st, t, attempt, &body, &err);
        }
        if (rc == 0) rc = envelope(kind_name(st->kind), j, st, t, attempt, body, &env, &err);
        fsh_buffer_unref(body);
        launch *x = rc == 0 ? launch_push(l) : NULL;
        if (!x) {
          fsh_buffer_unref(env);
          snprintf(j->error, sizeof j->error, "stage %u task %d: cannot build the task: %.1000s",
                   st->id, t, rc ? err.message : "out of memory");
          job_end(d, j, FSH_SCHED_JOB_FAILED);
          break;
        }
        k->next_attempt++;
        k->attempt = attempt;
        if (producer(st)) { /* older attempts' outputs are stale from now on */
          fsh_error e;
          if (fsh_shuffle_meta_begin_attempt(st->meta, t, attempt, &e) != 0 && d->log)
            fprintf(stderr, "flightshuffle: driver: %s\n", e.message);
        }
        k->state = T_RUNNING;
        k->sending = true;
        k->worker_id = w->id;
        k->wtask = 0;
        k->start_ms = k->poll_ms = now;
        if (reduce_slot(j, st)) w->running_reduce++;
        else w->running++;
        if (st->first_ms < 0) st->first_ms = now;
        /* the first reduce fetch: at launch (its body names its inputs), or
         * for incremental ones at the first map-outputs answer with some */
        if (st->kind == KIND_REDUCE && !j->incremental && j->first_reduce_ms < 0)
          j->first_reduce_ms = now;
        if (k->recompute) {
          event_push(&j->recomputed, st->id, t, attempt, "%s", k->lost ? k->lost : "lost");
          if (d->log)
            fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u task %d: "
                    "recomputing (attempt %d on %s): %s\n", j->id, st->id, t, attempt, w->uri,
                    k->lost ? k->lost : "lost");
          k->recompute = false;
          fsh_free(k->lost);
          k->lost = NULL;
        }
        *x = (launch){.job_id = j->id, .stage = s, .task = t, .attempt = attempt,
                      .body = env};
        snprintf(x->uri, sizeof x->uri, "%s", w->uri);
      }
      if (j->state != FSH_SCHED_JOB_RUNNING) break;
    }
  }
}

/* The driver's client of a worker (opened on first use; shared by the
 * scheduler and the launcher threads: the list is guarded by mu, which the
 * caller must NOT hold; a client is thread-safe and lives until the driver
 * stops). */
static fsh_flight_client *client_of(fsh_sched_driver *d, const char *uri, fsh_error *err) {
  pthread_mutex_lock(&d->mu);
  fsh_flight_client *found = NULL;
  for (sched_client *c = d->clients; c && !found; c = c->next)
    if (strcmp(c->uri, uri) == 0) found = c->client;
  sched_client *c = found ? NULL : fsh_calloc(1, sizeof *c);
  if (!found && (!c || !(c->uri = fsh_strdup(uri)))) {
    fsh_free(c);
    fsh_error_set(err, ENOMEM, "out of memory");
    c = NULL;
  } else if (!found) {
    fsh_flight_client_options o = {.uri = uri, .auth_token = d->auth_token,
                                   .timeout_ms = TASK_CALL_TIMEOUT_MS};
    if (fsh_flight_client_open(&o, &c->client, err) != 0) {
      fsh_free(c->uri);
      fsh_free(c);
    } else {
      c->next = d->clients;
      d->clients = c;
      found = c->client;
    }
  }
  pthread_mutex_unlock(&d->mu);
  return found;
}

static bool transport_error(int rc) {
  return rc == EAGAIN || rc == ETIMEDOUT || rc == ECONNREFUSED || rc == ECONNRESET ||
         rc == EPIPE || rc == ENOENT;
}

/* Sends one launch or poll (mu NOT held), then records what came of it. */
static void run_launch(fsh_sched_driver *d, launch *x) {
  fsh_error err = {{0}};
  fsh_flight_client *c = client_of(d, x->uri, &err);
  fsh_flight_result_list res = {0};
  int rc = c ? 0 : EIO;
  if (x->cancel) { /* best effort: the attempt's late answer is ignored anyway */
    if (rc == 0) {
      fsh_flight_action a = {.type = (char *)"cancel", .body = {x->body->data, x->body->size}};
      rc = fsh_flight_do_action(c, &a, &res, &err);
    }
    if (d->log)
      fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " task %d attempt %d: cancel on %s: "
              "%s\n", x->job_id, x->task, x->attempt, x->uri, rc ? err.message : "sent");
    fsh_flight_result_list_reset(&res);
    return;
  }
  if (rc == 0 && !x->poll) {
    /* planned before its worker became suspect: not sent (another call
     * would wait out its timeout too), retried elsewhere */
    pthread_mutex_lock(&d->mu);
    for (int64_t i = 0; i < d->n; i++)
      if (d->workers[i].suspect_ms && strcmp(d->workers[i].uri, x->uri) == 0)
        rc = fsh_error_set(&err, EAGAIN, "worker %s is suspect (a call to it failed %" PRId64
                           " ms ago): not sent", x->uri,
                           fsh_sched_now_ms() - d->workers[i].suspect_ms);
    pthread_mutex_unlock(&d->mu);
  }
  uint8_t id8[8];
  if (rc == 0 && x->poll) {
    for (int i = 0; i < 8; i++) id8[i] = (uint8_t)(x->wtask >> (8 * i));
    fsh_flight_action a = {.type = (char *)"task-wait", .body = {id8, 8}};
    rc = fsh_flight_do_action(c, &a, &res, &err);
  } else if (rc == 0) {
    fsh_flight_action a = {.type = (char *)"task", .body = {x->body->data, x->body->size}};
    rc = fsh_flight_do_action(c, &a, &res, &err);
    if (rc == 0 && (res.n != 1 || res.items[0].size != 8))
      rc = fsh_error_set(&err, EPROTO, "worker %s: task: %lld results, expected one 8-byte id",
                         x->uri, (long long)res.n);
  }
  pthread_mutex_lock(&d->mu);
  sched_job *j = find_job(d, x->job_id);
  jtask *k = j ? &j->stages[x->stage].tasks[x->task] : NULL;
  bool current = k && j->state == FSH_SCHED_JOB_RUNNING && k->state == T_RUNNING &&
                 k->attempt == x->attempt;
  if (x->poll) {
    if (current && rc == 0 && res.n == 1 && res.items[0].size >= 1 && res.items[0].data[0] == 1)
      attempt_ended(d, j, x->stage, x->task, x->attempt, true, NULL, res.items[0].data + 1,
                    res.items[0].size - 1);
    else if (current && rc != 0 && !transport_error(rc))
      attempt_ended(d, j, x->stage, x->task, x->attempt, false, err.message, NULL, 0);
  } else {
    if (k) k->sending = false;
    if (current && rc == 0) {
      uint64_t id = 0;
      for (int i = 0; i < 8; i++) id |= (uint64_t)res.items[0].data[i] << (8 * i);
      k->wtask = id;
    } else if (current && transport_error(rc)) {
      /* the worker does not answer (hung, stopped, gone): the attempt
       * failed -- retried elsewhere, not counted against the task -- and
       * the worker is suspect: nothing more is placed on it until it
       * heartbeats again (a dead one is then declared dead by its
       * heartbeat timeout, or by a fetch from it failing) */
      event_push(&j->retried, j->stages[x->stage].id, x->task, x->attempt,
                 "sending it to %s failed: %s", x->uri, err.message);
      k->state = T_PENDING;
      k->wtask = 0;
      worker_release(d, k->worker_id, reduce_slot(j, &j->stages[x->stage]));
      driver_worker *w = find_worker(d, k->worker_id);
      if (w && w->state == FSH_SCHED_WORKER_ALIVE && !w->suspect_ms) {
        w->suspect_ms = fsh_sched_now_ms();
        if (d->log)
          fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s suspect (%s): no "
                  "tasks placed on it until it heartbeats again\n", w->id, w->uri, err.message);
      }
      d->kick = true;
      pthread_cond_broadcast(&d->sched_cv);
    } else if (current) {
      attempt_ended(d, j, x->stage, x->task, x->attempt, false, err.message, NULL, 0);
    }
  }
  pthread_mutex_unlock(&d->mu);
  fsh_flight_result_list_reset(&res);
}

/* spilled_bytes of a worker's "stats" (0 if it does not answer). */
static int64_t worker_spilled(fsh_sched_driver *d, const char *uri) {
  fsh_error err = {{0}};
  fsh_flight_client *c = client_of(d, uri, &err);
  fsh_flight_action a = {.type = (char *)"stats"};
  fsh_flight_result_list res = {0};
  int64_t v = 0;
  if (c && fsh_flight_do_action(c, &a, &res, &err) == 0 && res.n == 1) {
    char line[256];
    int64_t len = res.items[0].size < 255 ? res.items[0].size : 255;
    memcpy(line, res.items[0].data, (size_t)len);
    line[len] = '\0';
    const char *p = strstr(line, "spilled_bytes=");
    if (p) v = strtoll(p + strlen("spilled_bytes="), NULL, 10);
  }
  fsh_flight_result_list_reset(&res);
  return v;
}

/* Releases the shuffles no stage needs any more, on every alive worker
 * (first adding up the workers' spilled bytes into the job's). mu held on
 * entry and exit, released meanwhile. */
static void release_round(fsh_sched_driver *d) {
  uint64_t ids[JOB_MAX_STAGES * 4], jobs[JOB_MAX_STAGES * 4];
  int n = 0;
  for (sched_job *j = d->jobs; j && n < (int)(sizeof ids / sizeof *ids) - JOB_MAX_STAGES;
       j = j->next)
    for (int s = 0; s < j->n_stages; s++) {
      jstage *st = &j->stages[s];
      if (!producer(st) || st->released) continue;
      if (j->state == FSH_SCHED_JOB_RUNNING && !(st->consumed && consumers_complete(j, s)))
        continue;
      st->released = true;
      j->releasing++;
      jobs[n] = j->id;
      ids[n++] = st->shuffle_id;
    }
  if (!n) return;
  int64_t nw = 0;
  char **uris = fsh_calloc((size_t)(d->n ? d->n : 1), sizeof *uris);
  for (int64_t i = 0; uris && i < d->n; i++)
    /* a suspect worker does not answer: the calls would hold up the
     * scheduler for their deadline (its outputs stay until it stops) */
    if (d->workers[i].state == FSH_SCHED_WORKER_ALIVE && !d->workers[i].suspect_ms &&
        (uris[nw] = fsh_strdup(d->workers[i].uri)))
      nw++;
  pthread_mutex_unlock(&d->mu);
  for (int i = 0; i < n; i++) {
    char body[24];
    int len = snprintf(body, sizeof body, "%" PRIu64, ids[i]);
    int64_t spilled = 0;
    for (int64_t w = 0; w < nw; w++) spilled += worker_spilled(d, uris[w]);
    pthread_mutex_lock(&d->mu);
    sched_job *j = find_job(d, jobs[i]);
    if (j) j->bytes_spilled += spilled;
    pthread_mutex_unlock(&d->mu);
    for (int64_t w = 0; w < nw; w++) {
      fsh_error err = {{0}};
      fsh_flight_client *c = client_of(d, uris[w], &err);
      fsh_flight_action a = {.type = (char *)"release", .body = {(uint8_t *)body, len}};
      fsh_flight_result_list res = {0};
      if (c && fsh_flight_do_action(c, &a, &res, &err) != 0 && d->log)
        fprintf(stderr, "flightshuffle: driver: releasing shuffle %s on %s: %s\n", body, uris[w],
                err.message);
      fsh_flight_result_list_reset(&res);
    }
  }
  for (int64_t w = 0; w < nw; w++) fsh_free(uris[w]);
  fsh_free(uris);
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < n; i++) {
    sched_job *j = find_job(d, jobs[i]);
    if (j) j->releasing--;
  }
  pthread_cond_broadcast(&d->job_cv);
}

/* Over, and its shuffles released. mu held. */
static bool job_settled(const sched_job *j) {
  if (j->state == FSH_SCHED_JOB_RUNNING || j->releasing) return false;
  for (int s = 0; s < j->n_stages; s++)
    if (producer(&j->stages[s]) && !j->stages[s].released) return false;
  return true;
}

/* The launchers: a small pool of threads that send the planned "task" and
 * "task-wait" calls, so that a worker that does not answer (hung, stopped:
 * a call then takes up to TASK_CALL_TIMEOUT_MS) holds up one launcher, never
 * the scheduler nor the launches to other workers. At most one call per
 * worker URI is in flight (in planning order), so a silent worker holds at
 * most one launcher. The queue and the busy set are guarded by d->mu. */
#define N_LAUNCHERS 4

typedef struct launch_pool {
  fsh_sched_driver *d;
  pthread_cond_t cv; /* the queue or the busy set changed, or stop */
  launch_list q;     /* planned, not yet taken */
  char busy[N_LAUNCHERS][320]; /* URIs with a call in flight ("" free) */
  pthread_t threads[N_LAUNCHERS];
  int n_threads;
  bool stop;
} launch_pool;

static bool uri_busy(const launch_pool *p, const char *uri) {
  for (int i = 0; i < N_LAUNCHERS; i++)
    if (p->busy[i][0] && strcmp(p->busy[i], uri) == 0) return true;
  return false;
}

static void *launcher_main(void *arg) {
  launch_pool *p = arg;
  fsh_sched_driver *d = p->d;
  pthread_mutex_lock(&d->mu);
  while (!p->stop) {
    int32_t i = 0;
    while (i < p->q.n && uri_busy(p, p->q.items[i].uri)) i++;
    int slot = 0;
    while (slot < N_LAUNCHERS && p->busy[slot][0]) slot++;
    if (i == p->q.n || slot == N_LAUNCHERS) {
      pthread_cond_wait(&p->cv, &d->mu);
      continue;
    }
    launch x = p->q.items[i];
    memmove(&p->q.items[i], &p->q.items[i + 1], (size_t)(p->q.n - i - 1) * sizeof x);
    p->q.n--;
    snprintf(p->busy[slot], sizeof p->busy[slot], "%s", x.uri);
    pthread_mutex_unlock(&d->mu);
    run_launch(d, &x);
    fsh_buffer_unref(x.body);
    pthread_mutex_lock(&d->mu);
    p->busy[slot][0] = '\0';
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Frees the oldest finished and settled jobs beyond the newest keep_jobs
 * (the list is in submission order). A launch or answer naming a freed job
 * finds no job and is dropped. mu held. */
static void prune_jobs(fsh_sched_driver *d) {
  int64_t settled = 0;
  for (sched_job *j = d->jobs; j; j = j->next) settled += job_settled(j);
  for (sched_job **at = &d->jobs; *at && settled > d->keep_jobs;) {
    sched_job *j = *at;
    if (!job_settled(j)) {
      at = &j->next;
      continue;
    }
    *at = j->next;
    job_free(j);
    settled--;
  }
}

int64_t fsh_sched_driver_jobs_held(fsh_sched_driver *d) {
  pthread_mutex_lock(&d->mu);
  int64_t n = 0;
  for (sched_job *j = d->jobs; j; j = j->next) n++;
  pthread_mutex_unlock(&d->mu);
  return n;
}

void *fsh_sched_scheduler_main(void *arg) {
  fsh_sched_driver *d = arg;
  launch_list l = {0};
  launch_pool pool = {.d = d};
  bool pool_ok = fsh_sched_cond_init(&pool.cv) == 0;
  for (int i = 0; pool_ok && i < N_LAUNCHERS; i++)
    if (pthread_create(&pool.threads[i], NULL, launcher_main, &pool) == 0) pool.n_threads++;
  pthread_mutex_lock(&d->mu);
  while (!d->stop) {
    d->kick = false;
    l.n = 0;
    plan_round(d, &l);
    if (l.n == 0) {
      release_round(d);
      prune_jobs(d);
      if (!d->kick && !d->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = ts.tv_nsec + (int64_t)SCHED_IDLE_MS * 1000000;
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        while (!d->kick && !d->stop && pthread_cond_timedwait(&d->sched_cv, &d->mu, &ts) == 0) {
        }
      }
      continue;
    }
    if (pool.n_threads == 0) { /* no launcher could start: send them here */
      pthread_mutex_unlock(&d->mu);
      for (int32_t i = 0; i < l.n; i++) {
        run_launch(d, &l.items[i]);
        fsh_buffer_unref(l.items[i].body);
      }
      pthread_mutex_lock(&d->mu);
      continue;
    }
    for (int32_t i = 0; i < l.n; i++) {
      launch *x = launch_push(&pool.q);
      if (x) {
        *x = l.items[i];
        continue;
      }
      /* out of memory: send it from here */
      pthread_mutex_unlock(&d->mu);
      run_launch(d, &l.items[i]);
      fsh_buffer_unref(l.items[i].body);
      pthread_mutex_lock(&d->mu);
    }
    pthread_cond_broadcast(&pool.cv);
  }
  pool.stop = true;
  if (pool_ok) pthread_cond_broadcast(&pool.cv);
  pthread_mutex_unlock(&d->mu);
  for (int i = 0; i < pool.n_threads; i++) pthread_join(pool.threads[i], NULL);
  for (int32_t i = 0; i < pool.q.n; i++) fsh_buffer_unref(pool.q.items[i].body);
  fsh_free(pool.q.items);
  if (pool_ok) pthread_cond_destroy(&pool.cv);
  fsh_free(l.items);
  return NULL;
}

/* ---- status ------------------------------------------------------------ */

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
    snprintf(o->kind, sizeof o->kind, "%s", kind_name(st->kind));
    o->tasks_total = st->n_tasks;
    o->tasks_done = st->n_done;
    for (int32_t t = 0; t < st->n_tasks; t++) {
      const jtask *k = &st->tasks[t];
      o->tasks_running += k->state == T_RUNNING;
      if (k->state != T_DONE) continue;
      o->bytes += k->bytes;
      o->rows += k->rows;
      o->task_seconds += (double)k->nanos * 1e-9;
      if (st->kind == KIND_MAP) s.input_rows += k->rows, s.input_bytes += k->input_bytes;
    }
    if (producer(st)) s.bytes_written += o->bytes;
    else s.bytes_fetched += o->bytes;
    if (st->first_ms >= 0)
      o->seconds = (double)((st->n_done == st->n_tasks ? st->last_ms : now) - st->first_ms) /
                   1000.0;
    /* verification of a consumer stage against its input stage: per
     * partition, the rows and row checksum read == those written */
    if (!consumer(st)) continue;
    const jstage *in = &j->stages[st->input];
    if (with_partitions && st->kind == KIND_REDUCE && !s.partitions) {
      if (!(s.partitions = fsh_calloc((size_t)st->n_tasks, sizeof *s.partitions))) rc = ENOMEM;
      else s.n_partitions = st->n_tasks;
    }
    for (int32_t p = 0; rc == 0 && p < st->n_tasks; p++) {
      fsh_sched_partition_check c = {.map_rows = in->part_rows[p],
                                     .map_checksum = in->part_sums[p]};
      c.reduce_rows = st->tasks[p].rows;
      c.reduce_checksum = st->tasks[p].checksum;
      /* an intermediate task's output may be lost after it was consumed:
       * its figures are those of its last completed attempt */
      bool must_be_done = st->kind == KIND_REDUCE;
      if ((must_be_done && st->tasks[p].state != T_DONE) || c.map_rows != c.reduce_rows ||
          c.map_checksum != c.reduce_checksum)
        s.verified = false;
      if (s.partitions && st->kind == KIND_REDUCE && s.n_partitions == st->n_tasks)
        s.partitions[p] = c;
    }
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
  sched_job *j = find_job(d, job_id);
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
    sched_job *j = find_job(d, job_id);
    if (!j) {
      rc = fsh_error_set(err, ENOENT, "driver %s: no job %" PRIu64, d->uri, job_id);
      break;
    }
    if (job_settled(j)) break;
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
    rc = fsh_sched_push_message(out, &r.base, "driver: job-status", err);
  }
  fsh_free(st), fsh_free(stp), fsh_free(pc), fsh_free(pcp);
  fsh_free(e1), fsh_free(e2), fsh_free(e3), fsh_free(p1), fsh_free(p2), fsh_free(p3);
  fsh_sched_job_status_reset(&s);
  return rc;
}

int fsh_sched_action_submit(fsh_sched_driver *d, const fsh_flight_action *a,
                            fsh_flight_result_list *out, fsh_error *err) {
  uint64_t id = 0;
  FSH_RETURN_NOT_OK(fsh_sched_driver_submit(d, a->body.data, a->body.size, &id, err));
  Flightshuffle__Sched__SubmitReply r = FLIGHTSHUFFLE__SCHED__SUBMIT_REPLY__INIT;
  r.job_id = id;
  return fsh_sched_push_message(out, &r.base, "driver: submit", err);
}

/* ---- incremental reduces: "map-outputs" -------------------------------- */

/* The answer for reduce task t (attempt `attempt`) of stage s: the current
 * outputs of its partition newer than since. mu held. */
static int map_outputs(sched_job *j, int s, int32_t t, int32_t attempt, uint64_t since,
                       fsh_flight_result_list *out, fsh_error *err) {
  jstage *st = &j->stages[s];
  jtask *k = &st->tasks[t];
  if (st->kind != KIND_REDUCE)
    return fsh_error_set(err, EINVAL, "job %" PRIu64 " stage %u is not a reduce stage", j->id,
                         st->id);
  if (j->state != FSH_SCHED_JOB_RUNNING || k->state != T_RUNNING || k->attempt != attempt)
    return fsh_error_set(err, ESTALE, "job %" PRIu64 " stage %u task %d attempt %d is superseded "
                         "(or the job is over): stop", j->id, st->id, t, attempt);
  const jstage *in = &j->stages[st->input];
  fsh_shuffle_sources src = {0};
  int rc = fsh_shuffle_meta_sources(in->meta, t, since, &src, err);
  if (rc) return rc;
  Flightshuffle__Sched__MapSource *xs = fsh_calloc((size_t)(src.n ? src.n : 1), sizeof *xs);
  Flightshuffle__Sched__MapSource **xp = fsh_calloc((size_t)(src.n ? src.n : 1), sizeof *xp);
  uint32_t n_ids = fsh_shuffle_meta_n_locations(in->meta);
  char **locs = fsh_calloc((size_t)(n_ids ? n_ids : 1), sizeof *locs);
  int32_t *loc_of = fsh_malloc((size_t)(n_ids ? n_ids : 1) * sizeof *loc_of);
  if (!xs || !xp || !locs || !loc_of) rc = fsh_error_set(err, ENOMEM, "out of memory");
  Flightshuffle__Sched__MapOutputsReply r = FLIGHTSHUFFLE__SCHED__MAP_OUTPUTS_REPLY__INIT;
  for (uint32_t i = 0; rc == 0 && i < n_ids; i++) loc_of[i] = -1;
  for (int64_t i = 0; rc == 0 && i < src.n; i++) {
    uint32_t l = src.location_ids[i];
    if (l >= n_ids) {
      rc = fsh_error_set(err, EPROTO, "map %" PRId64 " at an unknown location %u",
                         src.map_ids[i], l);
      break;
    }
    if (loc_of[l] < 0) {
      loc_of[l] = (int32_t)r.n_locations;
      locs[r.n_locations++] = (char *)fsh_shuffle_meta_location_uri(in->meta, l);
    }
    Flightshuffle__Sched__MapSource x = FLIGHTSHUFFLE__SCHED__MAP_SOURCE__INIT;
    x.map_id = src.map_ids[i];
    x.attempt = src.attempts[i];
    x.location = (uint32_t)loc_of[l];
    x.bytes = src.bytes[i]; /* approximate; rows and checksum unknown */
    xs[r.n_sources] = x;
    xp[r.n_sources] = &xs[r.n_sources];
    r.n_sources++;
  }
  if (rc == 0) {
    r.sources = xp;
    r.locations = locs;
    r.version = src.version;
    r.complete = src.complete;
    if (r.n_sources && j->first_reduce_ms < 0) j->first_reduce_ms = fsh_sched_now_ms();
    rc = fsh_sched_push_message(out, &r.base, "driver: map-outputs", err);
  }
  fsh_free(xs);
  fsh_free(xp);
  fsh_free(locs);
  fsh_free(loc_of);
  fsh_shuffle_sources_reset(&src);
  return rc;
}

int fsh_sched_action_map_outputs(fsh_sched_driver *d, const fsh_flight_action *a,
                                 fsh_flight_result_list *out, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__MapOutputsRequest *m = flightshuffle__sched__map_outputs_request__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: map-outputs: malformed MapOutputsRequest "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  Flightshuffle__Sched__TaskRef *ref = flightshuffle__sched__task_ref__unpack(
      &fsh_sched_pb_allocator, m->ref.len, m->ref.data ? m->ref.data : empty);
  int rc = 0;
  if (!ref) {
    rc = fsh_error_set(err, EINVAL, "driver %s: map-outputs: malformed TaskRef", d->uri);
  } else {
    pthread_mutex_lock(&d->mu);
    sched_job *j = find_job(d, ref->job_id);
    int s = j ? stage_index(j, ref->stage_id) : -1;
    if (!j)
      rc = fsh_error_set(err, ENOENT, "no job %" PRIu64, ref->job_id);
    else if (s < 0 || ref->task < 0 || ref->task >= j->stages[s].n_tasks)
      rc = fsh_error_set(err, EINVAL, "job %" PRIu64 " has no stage %u task %d", ref->job_id,
                         ref->stage_id, ref->task);
    else
      rc = map_outputs(j, s, ref->task, ref->attempt, m->since_version, out, err);
    pthread_mutex_unlock(&d->mu);
    if (rc) rc = fsh_error_prefix(err, rc, "driver %s: map-outputs: ", d->uri);
    flightshuffle__sched__task_ref__free_unpacked(ref, &fsh_sched_pb_allocator);
  }
  flightshuffle__sched__map_outputs_request__free_unpacked(m, &fsh_sched_pb_allocator);
  return rc;
}
