/* job_scheduler.c -- the driver's scheduler thread: each round it plans
 * the launches (placement on workers, task bodies and envelopes, brings
 * back released inputs, task-wait polls, cancels), hands them to a small
 * pool of launcher threads that send them (mu released), releases the
 * shuffles no stage needs any more and prunes the settled jobs. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/job_internal.h"
#include "sched/placement.h"

#define POLL_AFTER_MS 2000   /* the task-wait fallback: first poll of an attempt */
#define POLL_EVERY_MS 2000
#define SCHED_IDLE_MS 200

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

typedef struct launch {
  uint64_t job_id; /* looked up again when the answer comes (it may be gone) */
  int stage;
  int32_t task, attempt;
  char uri[320];
  fsh_buffer *body; /* the "task" envelope, or the "cancel" tag */
  bool poll;        /* a task-wait of wtask instead */
  bool cancel;      /* a "cancel" of the attempt instead */
  bool release;     /* a "release" of shuffle body (job_id's releasing) */
  bool stats;       /* a "stats" whose spilled bytes go to job_id's */
  int32_t merge;    /* != 0: the "task" (or, poll, "task-wait") of that merge */
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

int fsh_job_envelope(const char *kind, const sched_job *j, const jstage *st, int32_t t,
                     int32_t attempt, uint32_t merge, const fsh_buffer *body, fsh_buffer **out,
                     fsh_error *err) {
  Flightshuffle__Sched__TaskRef ref = FLIGHTSHUFFLE__SCHED__TASK_REF__INIT;
  ref.job_id = j->id;
  ref.stage_id = st->id;
  ref.task = t;
  ref.attempt = attempt;
  ref.merge = merge;
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

static int cmp_source(const void *a, const void *b) {
  int64_t x = ((const fsh_reduce_source *)a)->map_id, y = ((const fsh_reduce_source *)b)->map_id;
  return (x > y) - (x < y);
}

/* Sorts src[n] by map id: nothing to do when in order already, one pass
 * when the ids are distinct and in [0, n_maps) (each map of a stage has
 * one output), else (or without memory for the pass) qsort. */
static void sort_sources(fsh_reduce_source *src, int64_t n, int64_t n_maps) {
  bool sorted = true;
  for (int64_t i = 1; i < n && sorted; i++) sorted = src[i - 1].map_id <= src[i].map_id;
  if (sorted) return;
  int64_t *at = n_maps > 0 ? fsh_malloc((size_t)n_maps * sizeof *at) : NULL;
  fsh_reduce_source *tmp = at ? fsh_malloc((size_t)n * sizeof *tmp) : NULL;
  bool direct = tmp != NULL;
  for (int64_t m = 0; direct && m < n_maps; m++) at[m] = -1;
  for (int64_t i = 0; i < n && direct; i++) {
    int64_t m = src[i].map_id;
    direct = m >= 0 && m < n_maps && at[m] < 0;
    if (direct) at[m] = i;
  }
  if (direct) {
    int64_t k = 0;
    for (int64_t m = 0; m < n_maps; m++)
      if (at[m] >= 0) tmp[k++] = src[at[m]];
    memcpy(src, tmp, (size_t)n * sizeof *src);
  } else {
    qsort(src, (size_t)n, sizeof *src, cmp_source);
  }
  fsh_free(tmp);
  fsh_free(at);
}

int fsh_job_reduce_task_of(const sched_job *j, int input, int32_t p, bool incremental,
                           fsh_reduce_task *t, fsh_error *err) {
  return fsh_job_reduce_run_of(j, input, p, 1, incremental, t, err);
}

int fsh_job_reduce_run_of(const sched_job *j, int input, int32_t p, int32_t count,
                          bool incremental, fsh_reduce_task *t, fsh_error *err) {
  const jstage *in = &j->stages[input];
  *t = (fsh_reduce_task){.shuffle_id = in->shuffle_id, .partition = p,
                         .count = count > 1 ? count : 0, .n_partitions = in->n_parts,
                         .backend = j->backend, .incremental = incremental,
                         .sizes_unknown = true};
  if (incremental) return 0; /* it asks for its inputs ("map-outputs") */
  fsh_shuffle_sources src = {0};
  int rc = fsh_shuffle_meta_run_sources(in->meta, p, count > 1 ? count : 1, 0, &src, err);
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
  /* in map order (the metadata keeps them in the order they came): a
   * gather reads its partition in the order of its maps */
  if (rc == 0 && t->n_sources > 1) sort_sources(t->sources, t->n_sources, in->n_tasks);
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
  /* incremental only while its input is incomplete: a reduce launched
   * after the last map output gets every source at once, as without
   * incremental retrieval (no "map-outputs" round trip of its own) */
  const jstage *in = &j->stages[st->input];
  bool incremental = j->incremental && in->n_done < in->n_tasks;
  FSH_RETURN_NOT_OK(fsh_job_reduce_run_of(j, st->input, run_first(st, p), run_count(st, p),
                                          incremental, &t, err));
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
  FSH_RETURN_NOT_OK(fsh_job_reduce_task_of(j, st->input, p, false, &t.in, err));
  int rc = fsh_reduce_map_task_encode(&t, out, err);
  fsh_free(t.in.sources);
  fsh_free(t.in.locations);
  return rc;
}

/* The body of plan-fragment task t (attempt) of stage st: its fragment,
 * and for every input stage the current outputs of the partition it
 * reads. mu held. */
static int plan_body(const sched_job *j, const jstage *st, int32_t t, int32_t attempt,
                     fsh_buffer **out, fsh_error *err) {
  fsh_fragment_task_input in[JOB_MAX_INPUTS];
  memset(in, 0, sizeof in);
  fsh_fragment_task ft = {.fragment = st->fragment, .task = t, .n_tasks = st->n_tasks,
                          .shuffle_id = st->shuffle_id, .map_id = t, .attempt = attempt,
                          .compression = st->compression, .backend = j->backend,
                          .n_inputs = st->n_inputs, .inputs = in};
  int rc = 0, k = 0;
  for (; rc == 0 && k < st->n_inputs; k++) {
    in[k].node = st->input_nodes[k];
    const jstage *src = &j->stages[st->inputs[k]];
    rc = fsh_job_reduce_task_of(j, st->inputs[k], part_read(src, t), false, &in[k].read, err);
  }
  /* a scatter: the staged samples (the last partition) and rows */
  const jstage *src = st->scatter ? &j->stages[st->inputs[0]] : NULL;
  if (rc == 0 && src) {
    ft.has_side = true;
    rc = fsh_job_reduce_task_of(j, st->inputs[0], src->n_parts - 1, false, &ft.side, err);
    ft.n_counts = st->n_tasks;
    ft.counts = src->part_rows; /* per staged partition: the rows its one task wrote */
  }
  if (rc == 0) rc = fsh_fragment_task_encode(&ft, out, err);
  for (int i = 0; i < k; i++) {
    fsh_free(in[i].read.sources);
    fsh_free(in[i].read.locations); /* the strings are the metadata's */
  }
  fsh_free(ft.side.sources);
  fsh_free(ft.side.locations);
  return rc;
}

/* The location holding most bytes of partitions [p, p + count) of stage
 * in's shuffle, or NULL (none known). mu held. */
static const char *run_best_location(const jstage *in, int32_t p, int32_t count) {
  uint32_t n = fsh_shuffle_meta_n_locations(in->meta), best = 0;
  int64_t best_bytes = 0;
  for (uint32_t l = 0; l < n; l++) {
    int64_t sum = 0;
    for (int32_t q = p; q < p + count; q++) {
      int64_t rows, bytes;
      fsh_error e;
      if (fsh_shuffle_meta_location_bytes(in->meta, q, l, &rows, &bytes, &e) == 0) sum += bytes;
    }
    if (sum > best_bytes) best = l, best_bytes = sum;
  }
  return best_bytes > 0 ? fsh_shuffle_meta_location_uri(in->meta, best) : NULL;
}

/* Picks the worker for task t of stage s: alive, a free slot; maps: the
 * least loaded (place_runs is preferred for them); reduces: the one
 * holding most input bytes. NULL if none. */
static driver_worker *place(fsh_sched_driver *d, const sched_job *j, int s, int32_t t) {
  const jstage *st = &j->stages[s];
  /* a consumer: the location holding most of its partition's bytes */
  const char *best_uri = NULL;
  if (consumer(st) && run_count(st, t) > 1) {
    best_uri = run_best_location(&j->stages[st->input], run_first(st, t), run_count(st, t));
  } else if (consumer(st)) {
    const jstage *in = &j->stages[st->input];
    fsh_shuffle_partition_totals tot;
    fsh_error e;
    int32_t p = st->run_first ? run_first(st, t) : part_read(in, t);
    if (fsh_shuffle_meta_partition_totals(in->meta, p, &tot, &e) == 0 &&
        tot.best_location_bytes > 0)
      best_uri = fsh_shuffle_meta_location_uri(in->meta, tot.best_location);
  }
  driver_worker *best = NULL;
  int best_busy = 0;
  for (int64_t i = 0; i < d->n; i++) {
    driver_worker *w = &d->workers[i];
    int busy = fsh_job_reduce_slot(j, st) ? w->running_reduce : w->running;
    if (w->state != FSH_SCHED_WORKER_ALIVE || w->suspect_ms || busy >= j->slots) continue;
    if (best_uri && strcmp(w->uri, best_uri) == 0) return w;
    if (!best || busy < best_busy) {
      best = w;
      best_busy = busy;
    }
  }
  return best;
}

/* Placement of stage s's pending tasks by runs of task ids
 * (fsh_sched_place_runs over the workers' free slots): *out (T entries,
 * fsh_malloc'ed) gets each placed task's index in d->workers, -1 for the
 * others. ENOMEM leaves *out NULL. mu held. */
static int place_runs(const fsh_sched_driver *d, const sched_job *j, int s, int32_t **out) {
  const jstage *st = &j->stages[s];
  int64_t n = d->n, T = st->n_tasks;
  bool reduce_slot = fsh_job_reduce_slot(j, st);
  *out = NULL;
  int32_t *o = fsh_malloc((size_t)(T + n) * sizeof *o + (size_t)T);
  if (!o) return ENOMEM;
  int32_t *free_slots = o + T;
  uint8_t *pending = (uint8_t *)(free_slots + n);
  for (int64_t i = 0; i < n; i++) {
    const driver_worker *w = &d->workers[i];
    int busy = reduce_slot ? w->running_reduce : w->running;
    free_slots[i] = w->state != FSH_SCHED_WORKER_ALIVE ? -1
                    : !w->suspect_ms && busy < j->slots ? j->slots - busy : 0;
  }
  for (int64_t t = 0; t < T; t++) pending[t] = st->tasks[t].state == T_PENDING;
  if (fsh_sched_place_runs(n, free_slots, T, pending, o, NULL) != 0) {
    fsh_free(o);
    return ENOMEM;
  }
  *out = o;
  return 0;
}

/* Whether a stage's tasks may start: a reduce once its map stage is done,
 * or (incremental) once it has a first output. */
static bool stage_may_start(const sched_job *j, int s) {
  const jstage *st = &j->stages[s];
  if (!consumer(st)) return true;
  if (st->kind == KIND_PLAN) { /* every input complete */
    for (int i = 0; i < st->n_inputs; i++) {
      const jstage *in = &j->stages[st->inputs[i]];
      if (in->released || !tasks_over(in) || in->n_held ||
          (in->n_skipped && !fsh_job_limit_reached(in)))
        return false;
    }
    return true;
  }
  const jstage *in = &j->stages[st->input];
  if (in->released) return false; /* plan_round brings it back first */
  return j->incremental && st->kind == KIND_REDUCE ? in->n_done > 0
                                                   : in->n_done == in->n_tasks && !in->n_held;
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

static fsh_flight_client *client_of(fsh_sched_driver *d, const char *uri, fsh_error *err);
static bool transport_error(int rc);

/* fsh_job_merges_plan's emit: a launch of the merge's call (ctx: the
 * launch list). */
static bool emit_merge(void *ctx, const sched_job *j, int s, const jmerge *m, const char *uri,
                       fsh_buffer *env, bool poll) {
  launch *x = launch_push(ctx);
  if (!x) { /* out of memory */
    fsh_buffer_unref(env);
    return false;
  }
  *x = (launch){.job_id = j->id, .stage = s, .task = m->tasks[0], .attempt = m->attempt,
                .merge = m->id, .poll = poll, .wtask = m->wtask, .body = env};
  snprintf(x->uri, sizeof x->uri, "%s", uri);
  return true;
}

/* The launch's one call to its worker (mu NOT held): "task-wait" for the
 * worker task x->wtask when x->poll, else "task" with x->body, whose answer
 * must be the worker's 8-byte task id. */
static int launch_call(fsh_flight_client *c, const launch *x, fsh_flight_result_list *res,
                       fsh_error *err) {
  if (x->poll) {
    uint8_t id8[8];
    for (int i = 0; i < 8; i++) id8[i] = (uint8_t)(x->wtask >> (8 * i));
    fsh_flight_action a = {.type = (char *)"task-wait", .body = {id8, 8}};
    return fsh_flight_do_action(c, &a, res, err);
  }
  fsh_flight_action a = {.type = (char *)"task", .body = {x->body->data, x->body->size}};
  int rc = fsh_flight_do_action(c, &a, res, err);
  if (rc == 0 && (res->n != 1 || res->items[0].size != 8))
    rc = fsh_error_set(err, EPROTO, "worker %s: task: %lld results, expected one 8-byte id",
                       x->uri, (long long)res->n);
  return rc;
}

/* Sends a merge's "task" (or its "task-wait") and records what came of it
 * (mu NOT held). */
static void run_merge_launch(fsh_sched_driver *d, launch *x) {
  fsh_error err = {{0}};
  fsh_flight_client *c = client_of(d, x->uri, &err);
  fsh_flight_result_list res = {0};
  int rc = c ? 0 : EIO;
  if (rc == 0) rc = launch_call(c, x, &res, &err);
  pthread_mutex_lock(&d->mu);
  sched_job *j = fsh_job_find(d, x->job_id);
  if (j && x->poll) {
    if (rc == 0 && res.n == 1 && res.items[0].size >= 1 && res.items[0].data[0] == 1)
      fsh_job_merge_ended(d, j, x->stage, x->merge, true, NULL, res.items[0].data + 1,
                          res.items[0].size - 1);
    else if (rc == 0 && res.n == 1 && res.items[0].size >= 1 && res.items[0].data[0] == 2)
      fsh_job_attempt_failure(d, j, x->stage, x->task, x->attempt, x->merge, x->uri,
                              res.items[0].data + 1, res.items[0].size - 1);
    else if (rc != 0 && !transport_error(rc))
      fsh_job_merge_ended(d, j, x->stage, x->merge, false, err.message, NULL, 0);
  } else if (j) {
    uint64_t id = 0;
    for (int i = 0; rc == 0 && i < 8; i++) id |= (uint64_t)res.items[0].data[i] << (8 * i);
    fsh_job_merge_sent(d, j, x->stage, x->merge, rc, id, rc ? err.message : NULL);
  }
  pthread_mutex_unlock(&d->mu);
  fsh_flight_result_list_reset(&res);
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
    ref.merge = c->merge;
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
      for (int i = 0; consumer(st) && i < st->n_inputs; i++)
        if (j->stages[st->inputs[i]].released && !fsh_job_stage_complete(j, s))
          bring_back(d, j, st->inputs[i], st);
      if (st->merge) fsh_job_merges_plan(d, j, s, now, emit_merge, l);
      if (st->limited) fsh_job_limit_check(d, j, s); /* before any launch (a limit of 0) */
      if (j->state != FSH_SCHED_JOB_RUNNING) break;
      bool may = stage_may_start(j, s) && !fsh_job_stage_complete(j, s);
      if (may && st->kind == KIND_REDUCE && !st->runs_set) fsh_job_plan_runs(d, j, s);
      /* a stage reading no shuffle: by runs of task ids (place_runs); if
       * that cannot allocate, task by task (place) -- a global limit's
       * stage always task by task, in task order: its first tasks are the
       * ones an ordered limit needs */
      int32_t *runs = NULL;
      if (may && !consumer(st) && st->n_tasks > 0 && !st->limited) (void)place_runs(d, j, s, &runs);
      for (int32_t t = 0; t < st->n_tasks; t++) {
        jtask *k = &st->tasks[t];
        if (k->state == T_RUNNING && !k->sending && k->wtask && now - k->start_ms > POLL_AFTER_MS &&
            now - k->poll_ms > POLL_EVERY_MS) {
          driver_worker *w = fsh_job_find_worker(d, k->worker_id);
          launch *x = w ? launch_push(l) : NULL;
          if (!x) continue;
          k->poll_ms = now;
          *x = (launch){.job_id = j->id, .stage = s, .task = t, .attempt = k->attempt,
                        .poll = true, .wtask = k->wtask};
          snprintf(x->uri, sizeof x->uri, "%s", w->uri);
          continue;
        }
        if (!may || k->state != T_PENDING) continue;
        if (runs && runs[t] < 0) continue; /* not this round */
        driver_worker *w = runs ? &d->workers[runs[t]] : place(d, j, s, t);
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
        } else if (st->kind == KIND_PLAN) {
          rc = plan_body(j, st, t, attempt, &body, &err);
        } else {
          rc = reduce_map_body(j, st, t, attempt, &body, &err);
        }
        if (rc == 0)
          rc = fsh_job_envelope(fsh_job_kind_name(st->kind), j, st, t, attempt, 0, body, &env,
                                &err);
        fsh_buffer_unref(body);
        launch *x = rc == 0 ? launch_push(l) : NULL;
        if (!x) {
          fsh_buffer_unref(env);
          snprintf(j->error, sizeof j->error, "stage %u task %d: cannot build the task: %.1000s",
                   st->id, t, rc ? err.message : "out of memory");
          fsh_job_end(d, j, FSH_SCHED_JOB_FAILED);
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
        if (fsh_job_reduce_slot(j, st)) w->running_reduce++;
        else w->running++;
        if (st->first_ms < 0) st->first_ms = now;
        /* the first reduce fetch: at launch (its body names its inputs: not
         * incremental, or launched with its input complete), or for
         * incremental ones at the first map-outputs answer with some */
        if (st->kind == KIND_REDUCE && j->first_reduce_ms < 0 &&
            (!j->incremental || j->stages[st->input].n_done == j->stages[st->input].n_tasks))
          j->first_reduce_ms = now;
        if (k->recompute) {
          fsh_job_event_push(&j->recomputed, st->id, t, attempt, "%s", k->lost ? k->lost : "lost");
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
      fsh_free(runs);
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
                                   .timeout_ms = d->call_timeout_ms};
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

/* A call that found nobody serving at the worker's address: the
 * connection refused or reset, the stream unavailable (UNAVAILABLE ->
 * EAGAIN) -- a dead process on a live host, or a worker restarting. Not
 * a deadline (ETIMEDOUT): a slow or stopped worker answers late, the
 * heartbeat timeout decides about it. */
static bool unreachable_error(int rc) {
  return rc == EAGAIN || rc == ECONNREFUSED || rc == ECONNRESET || rc == EPIPE;
}

/* The running attempt x of task k could not be sent to its worker, or its
 * worker no longer serves (its task-wait poll was refused): the attempt
 * failed -- listed as retried with why, pending again, not counted
 * against the task -- and the worker is suspect: nothing more is placed
 * on it until it heartbeats again (a healthy worker that had a transient
 * error does so within a heartbeat interval and is used again; its
 * outputs stay; a dead one is declared dead by its heartbeat timeout, or
 * by a fetch from it failing). mu held. */
static void attempt_unreachable(fsh_sched_driver *d, sched_job *j, const launch *x, jtask *k,
                                const char *what, const fsh_error *err) {
  fsh_job_event_push(&j->retried, j->stages[x->stage].id, x->task, x->attempt, "%s %s failed: %s",
                     what, x->uri, err->message);
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u task %d attempt %d: %s %s "
            "failed (%s): retried elsewhere\n", j->id, j->stages[x->stage].id, x->task,
            x->attempt, what, x->uri, err->message);
  k->state = T_PENDING;
  k->wtask = 0;
  fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, &j->stages[x->stage]));
  driver_worker *w = fsh_job_find_worker(d, k->worker_id);
  if (w && w->state == FSH_SCHED_WORKER_ALIVE && !w->suspect_ms) {
    w->suspect_ms = fsh_sched_now_ms();
    if (d->log)
      fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s suspect (%s): no "
              "tasks placed on it until it heartbeats again\n", w->id, w->uri, err->message);
  }
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

static void run_release(fsh_sched_driver *d, launch *x);

/* Sends one launch or poll (mu NOT held), then records what came of it. */
static void run_launch(fsh_sched_driver *d, launch *x) {
  if (x->release || x->stats) {
    run_release(d, x);
    return;
  }
  if (x->merge) {
    run_merge_launch(d, x);
    return;
  }
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
  if (rc == 0) rc = launch_call(c, x, &res, &err);
  pthread_mutex_lock(&d->mu);
  sched_job *j = fsh_job_find(d, x->job_id);
  jtask *k = j ? &j->stages[x->stage].tasks[x->task] : NULL;
  bool current = k && j->state == FSH_SCHED_JOB_RUNNING && k->state == T_RUNNING &&
                 k->attempt == x->attempt;
  if (x->poll) {
    if (current && rc == 0 && res.n == 1 && res.items[0].size >= 1 && res.items[0].data[0] == 1)
      fsh_job_attempt_ended(d, j, x->stage, x->task, x->attempt, true, NULL, res.items[0].data + 1,
                            res.items[0].size - 1);
    else if (current && rc == 0 && res.n == 1 && res.items[0].size >= 1 &&
             res.items[0].data[0] == 2) /* failed, with the outputs it found lost */
      fsh_job_attempt_failure(d, j, x->stage, x->task, x->attempt, 0, x->uri,
                              res.items[0].data + 1, res.items[0].size - 1);
    else if (current && rc != 0 && !transport_error(rc))
      fsh_job_attempt_ended(d, j, x->stage, x->task, x->attempt, false, err.message, NULL, 0);
    else if (current && unreachable_error(rc)) /* a dead process: no task-done will come */
      attempt_unreachable(d, j, x, k, "its worker does not serve any more: task-wait on", &err);
  } else {
    if (k) k->sending = false;
    if (current && rc == 0) {
      uint64_t id = 0;
      for (int i = 0; i < 8; i++) id |= (uint64_t)res.items[0].data[i] << (8 * i);
      k->wtask = id;
    } else if (current && transport_error(rc)) {
      /* the worker does not answer (hung, stopped, gone) */
      attempt_unreachable(d, j, x, k, "sending it to", &err);
    } else if (current) {
      fsh_job_attempt_ended(d, j, x->stage, x->task, x->attempt, false, err.message, NULL, 0);
    }
  }
  pthread_mutex_unlock(&d->mu);
  fsh_flight_result_list_reset(&res);
}

/* spilled_bytes of a "stats" answer (0 if there is none). */
static int64_t stats_spilled(const fsh_flight_result_list *res) {
  if (res->n != 1) return 0;
  char line[256];
  int64_t len = res->items[0].size < 255 ? res->items[0].size : 255;
  memcpy(line, res->items[0].data, (size_t)len);
  line[len] = '\0';
  const char *p = strstr(line, "spilled_bytes=");
  return p ? strtoll(p + strlen("spilled_bytes="), NULL, 10) : 0;
}

/* Sends one "stats" or "release" launch (mu NOT held): best effort; the
 * job's releasing count goes down once it is done, whatever came of it. A
 * suspect worker is skipped (the call would wait out its deadline; its
 * outputs stay until it stops); a worker that does not answer becomes
 * suspect, as after a failed "task" call. */
static void run_release(fsh_sched_driver *d, launch *x) {
  fsh_error err = {{0}};
  bool skip = false;
  pthread_mutex_lock(&d->mu);
  for (int64_t i = 0; i < d->n; i++)
    if (strcmp(d->workers[i].uri, x->uri) == 0 &&
        (d->workers[i].suspect_ms || d->workers[i].state != FSH_SCHED_WORKER_ALIVE))
      skip = true;
  pthread_mutex_unlock(&d->mu);
  fsh_flight_client *c = skip ? NULL : client_of(d, x->uri, &err);
  fsh_flight_result_list res = {0};
  int rc = c ? 0 : EIO;
  if (c) {
    fsh_flight_action a = {.type = (char *)(x->stats ? "stats" : "release")};
    if (x->release) a.body = (fsh_bytes){x->body->data, x->body->size};
    rc = fsh_flight_do_action(c, &a, &res, &err);
  }
  if (rc && !skip && d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 ": %s on %s: %s\n", x->job_id,
            x->stats ? "stats" : "releasing a shuffle", x->uri, err.message);
  int64_t spilled = rc == 0 && x->stats ? stats_spilled(&res) : 0;
  fsh_flight_result_list_reset(&res);
  pthread_mutex_lock(&d->mu);
  /* (ENOENT: an answer, not silence) */
  for (int64_t i = 0; c && rc != ENOENT && transport_error(rc) && i < d->n; i++) {
    driver_worker *w = &d->workers[i];
    if (strcmp(w->uri, x->uri) || w->state != FSH_SCHED_WORKER_ALIVE || w->suspect_ms) continue;
    w->suspect_ms = fsh_sched_now_ms();
    if (d->log)
      fprintf(stderr, "flightshuffle: driver: worker %" PRIu64 " %s suspect (%s): no tasks "
              "placed on it until it heartbeats again\n", w->id, w->uri, err.message);
  }
  sched_job *j = fsh_job_find(d, x->job_id);
  if (j) {
    j->bytes_spilled += spilled;
    j->releasing--;
  }
  pthread_cond_broadcast(&d->job_cv);
  pthread_mutex_unlock(&d->mu);
}

/* Plans the releases of the shuffles no stage needs any more: on every
 * alive worker a "stats" (its spilled bytes are added up into the job's),
 * then a "release". They are sent by the launchers like the tasks, so a
 * worker that does not answer holds up no scheduling; the job stays
 * unsettled (releasing) until they are done. mu held. */
static void release_round(fsh_sched_driver *d, launch_list *l) {
  for (sched_job *j = d->jobs; j; j = j->next)
    for (int s = 0; s < j->n_stages; s++) {
      jstage *st = &j->stages[s];
      if (!producer(st) || st->released || kept(j, st)) continue;
      if (st->result && j->state == FSH_SCHED_JOB_RUNNING) continue; /* read by the client */
      if (j->state == FSH_SCHED_JOB_RUNNING && !(st->consumed && fsh_job_consumers_complete(j, s)))
        continue;
      if (j->state == FSH_SCHED_JOB_RUNNING && fsh_job_cancel_unneeded(d, j, st))
        continue; /* released next round, after the cancels (a worker takes them in order) */
      st->released = true;
      char body[24];
      int len = snprintf(body, sizeof body, "%" PRIu64, st->shuffle_id);
      for (int64_t i = 0; i < d->n; i++) {
        const driver_worker *w = &d->workers[i];
        if (w->state != FSH_SCHED_WORKER_ALIVE || w->suspect_ms) continue;
        for (int k = 0; k < 2; k++) {
          fsh_buffer *b = k ? fsh_buffer_copy(body, len) : NULL;
          launch *x = !k || b ? launch_push(l) : NULL;
          if (!x) {
            fsh_buffer_unref(b);
            continue; /* best effort */
          }
          *x = (launch){.job_id = j->id, .stats = !k, .release = k, .body = b};
          snprintf(x->uri, sizeof x->uri, "%s", w->uri);
          j->releasing++;
        }
      }
    }
}

/* The launchers: a small pool of threads that send the planned "task" and
 * "task-wait" calls, so that a worker that does not answer (hung, stopped:
 * a call then takes up to d->call_timeout_ms) holds up one launcher, never
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
  for (sched_job *j = d->jobs; j; j = j->next) settled += fsh_job_settled(j);
  for (sched_job **at = &d->jobs; *at && settled > d->keep_jobs;) {
    sched_job *j = *at;
    if (!fsh_job_settled(j)) {
      at = &j->next;
      continue;
    }
    *at = j->next;
    fsh_job_free(j);
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
    release_round(d, &l);
    if (l.n == 0) {
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
