/* job_merge.c -- the driver's pre-shuffle merge (issue 6 section 2): many
 * small map outputs of a stage, held by one worker, become one larger
 * output there before the reducers read them, so that a reducer of a
 * 1000 x 1000 shuffle fetches tens of blocks per partition, not 1000.
 *
 * The design (job_internal.h has the short form):
 *  - which stages: every stage writing a shuffle that a later stage reads
 *    (not a result, which the client reads) of a flight job (an fs job's
 *    outputs are files of the shared directory), when the job's mode says so:
 *    on, or auto and sqrt(M x R) > threshold (M tasks, R partitions).
 *  - holding back: a done attempt's output does not go into the shuffle's
 *    metadata; the task is done (its rows counted for verification) but
 *    its output `held`. The stage is complete -- reducers that wait for it
 *    start -- only once nothing is held, and the metadata calls the shuffle
 *    complete only once every map is published, so incremental reducers
 *    keep polling until then. A reducer never sees a part.
 *  - grouping, as outputs arrive: a merge takes G outputs held by one
 *    worker as soon as it holds G (G = ceil(M x R / threshold^2): what
 *    brings the shuffle to about threshold^2 / R outputs, the in-process
 *    runner's rule; at least 2), and whatever a worker holds once every
 *    task of the stage is done; a group of one is published as it is.
 *    Synthetic stages merge any outputs of a worker (their reads are
 *    order-free, verified by row checksums); plan stages only runs of
 *    consecutive map ids (a gather reads its sources in map order) and
 *    only once the stage's tasks are all done (their consumers wait for
 *    that anyway).
 *  - the merged output: map id = its first part's, attempt = one reserved
 *    from that task's attempts (never launched), written on the worker
 *    that holds the parts ("merge-outputs", shuffle.h), which drops the
 *    parts once it holds it. Published in the parts' place: itself, and
 *    every other part as an EMPTY output of its own attempt at the same
 *    location -- so each map counts as held (the shuffle completes) and
 *    the lineage is the usual one: the worker lost, every part's map is
 *    lost with it and re-run (listed as recomputed); re-run outputs are
 *    held and merged again.
 *  - a merged output lost on its live worker (a reader reports it in
 *    TaskDone.lost, job_lineage.c): every part it covers is lost, their
 *    maps re-run (held and merged again); the published merge keeps its
 *    parts (jmerge.published, jtask.merged) for that.
 *  - failure: a merge that fails (or could not be sent) publishes its
 *    parts unmerged, if their worker is alive -- but for the parts it
 *    reported missing or unreadable (TaskDone.lost), whose maps re-run; a
 *    worker lost first loses them (re-run). Never are rows dropped: the
 *    parts leave the worker only once the merged output is held there.
 *  - a job that ends cancels its running merges (ECANCELED, no output); a
 *    merge that still finishes after the shuffle's release drops its
 *    merged output itself (worker_merge.c), so nothing is orphaned.
 *  - which stages of a plan job: each carries its exchange's policy
 *    (StagePlan.pre_shuffle_merge, from fsh_plan_job_plan), else the
 *    job's mode applies. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/job_internal.h"

#define MERGE_MAX_GROUP 4096

void fsh_job_merge_setup(sched_job *j) {
  double t = j->merge_threshold > 0 ? j->merge_threshold : FSH_SCHED_MERGE_THRESHOLD;
  for (int s = 0; s < j->n_stages; s++) {
    jstage *st = &j->stages[s];
    st->merge = false;
    /* the stage's own mode (a plan's exchange policy), else the job's */
    int mode = st->merge_mode > 0 ? st->merge_mode - 1 : j->merge_mode;
    /* the flight backend only: the fs backend's outputs are files of the
     * shared directory, not held by a worker */
    if (!producer(st) || !st->consumed || st->result || mode == FSH_SCHED_MERGE_OFF ||
        j->backend != FSH_TASK_BACKEND_FLIGHT || st->limited) /* (sched.h "global limits") */
      continue;
    double mr = (double)st->n_tasks * (double)st->n_parts;
    if (mode == FSH_SCHED_MERGE_AUTO && (sqrt(mr) <= t || st->map_runs_auto))
      continue; /* (maps coalesced by auto: outputs of the merge's size already, sched.h) */
    if (st->n_tasks < 2) continue;
    double g = ceil(mr / (t * t));
    if (g < 2) g = 2;
    if (g > MERGE_MAX_GROUP) g = MERGE_MAX_GROUP;
    st->merge = true;
    st->merge_group = (int32_t)g;
  }
}

static jmerge *merge_by_id(jstage *st, int32_t id);

/* The published merge covering k's output is no longer current (lost, or
 * k has a new output): its record forgets its parts. */
static void unpublish(jstage *st, jtask *k) {
  if (!k->merged) return;
  jmerge *m = merge_by_id(st, k->merged);
  for (int32_t i = 0; m && i < m->n; i++) st->tasks[m->tasks[i]].merged = 0;
  if (m) {
    fsh_free(m->tasks);
    m->tasks = NULL;
    m->n = 0;
    m->published = false;
  }
  k->merged = 0;
}

int fsh_job_merge_hold(jstage *st, int32_t t, const fsh_map_output *out, fsh_error *err) {
  jtask *k = &st->tasks[t];
  unpublish(st, k); /* a re-run (its stage brought back): the old merge is history */
  fsh_map_output *h = fsh_calloc(1, sizeof *h);
  if (!h || fsh_map_output_copy(h, out) != 0) {
    fsh_free(h);
    return fsh_error_set(err, ENOMEM, "out of memory holding map %d's output", t);
  }
  if (k->held) { /* cannot happen: a done task is not run again while held */
    fsh_map_output_reset(k->held);
    fsh_free(k->held);
    st->n_held--;
  }
  k->held = h;
  st->n_held++;
  return 0;
}

static void drop_held(jstage *st, jtask *k) {
  if (!k->held) return;
  fsh_map_output_reset(k->held);
  fsh_free(k->held);
  k->held = NULL;
  st->n_held--;
}

static jmerge *merge_by_id(jstage *st, int32_t id) {
  for (int32_t i = 0; i < st->n_merges; i++)
    if (st->merges[i].id == id) return &st->merges[i];
  return NULL;
}

static void merge_close(jstage *st, jmerge *m) {
  for (int32_t i = 0; i < m->n; i++) st->tasks[m->tasks[i]].merge = 0;
  fsh_free(m->tasks);
  m->tasks = NULL;
  m->n = 0;
  m->active = false;
}

/* Adds held output k to the metadata. mu held. */
static void publish_one(fsh_sched_driver *d, sched_job *j, jstage *st, int32_t t,
                        const fsh_map_output *out) {
  fsh_shuffle_meta_add_result added = FSH_SHUFFLE_META_ACCEPTED;
  fsh_error e = {{0}};
  int rc = fsh_shuffle_meta_add(st->meta, out, &added, &e);
  if (rc == 0 && added != FSH_SHUFFLE_META_ACCEPTED)
    rc = fsh_error_set(&e, EPROTO, "the shuffle's metadata calls it %s",
                       fsh_shuffle_meta_add_result_name(added));
  if (rc != 0) {
    snprintf(j->error, sizeof j->error, "stage %u: publishing map %d's output (attempt %d): "
             "%.1000s", st->id, t, out->attempt, e.message);
    fsh_job_end(d, j, FSH_SCHED_JOB_FAILED);
  }
}

/* Publishes the held outputs of tasks[0, n) as they are. mu held. */
static void publish_parts(fsh_sched_driver *d, sched_job *j, jstage *st, const int32_t *tasks,
                          int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    jtask *k = &st->tasks[tasks[i]];
    if (!k->held) continue;
    publish_one(d, j, st, tasks[i], k->held);
    drop_held(st, k);
  }
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

static void merge_failed(fsh_sched_driver *d, sched_job *j, jstage *st, jmerge *m,
                         const char *why);

/* Starts a merge of tasks[0, n) (held on worker w, increasing): reserves
 * the merged output's attempt and emits its call. mu held. */
static void start_merge(fsh_sched_driver *d, sched_job *j, int s, const driver_worker *w,
                        const int32_t *tasks, int32_t n, int64_t now, fsh_job_merge_emit_fn emit,
                        void *ctx) {
  jstage *st = &j->stages[s];
  if (n == 1) {
    publish_parts(d, j, st, tasks, 1);
    return;
  }
  if (st->n_merges == st->cap_merges) {
    int32_t cap = st->cap_merges ? st->cap_merges * 2 : 16;
    jmerge *x = fsh_realloc(st->merges, (size_t)cap * sizeof *x);
    if (!x) {
      publish_parts(d, j, st, tasks, n); /* out of memory: unmerged */
      return;
    }
    st->merges = x;
    st->cap_merges = cap;
  }
  int32_t *copy = fsh_malloc((size_t)n * sizeof *copy);
  int64_t *maps = fsh_malloc((size_t)n * sizeof *maps);
  int32_t *attempts = fsh_malloc((size_t)n * sizeof *attempts);
  fsh_buffer *body = NULL, *env = NULL;
  fsh_error e = {{0}};
  jtask *first = &st->tasks[tasks[0]];
  int32_t attempt = first->next_attempt;
  int rc = copy && maps && attempts ? 0 : fsh_error_set(&e, ENOMEM, "out of memory");
  for (int32_t i = 0; rc == 0 && i < n; i++) {
    copy[i] = tasks[i];
    maps[i] = tasks[i];
    attempts[i] = st->tasks[tasks[i]].held->attempt;
  }
  int32_t id = st->n_merges + 1;
  if (rc == 0) {
    fsh_merge_task mt = {.shuffle_id = st->shuffle_id, .map_id = tasks[0], .attempt = attempt,
                         .drop_parts = true, .n_parts = n, .part_maps = maps,
                         .part_attempts = attempts};
    rc = fsh_merge_task_encode(&mt, &body, &e);
  }
  if (rc == 0)
    rc = fsh_job_envelope(FSH_MERGE_TASK_KIND, j, st, tasks[0], attempt, (uint32_t)id, body,
                          &env, &e);
  fsh_buffer_unref(body);
  fsh_free(maps);
  fsh_free(attempts);
  if (rc != 0) {
    fsh_free(copy);
    publish_parts(d, j, st, tasks, n);
    return;
  }
  first->next_attempt++; /* reserved: never launched */
  jmerge *m = &st->merges[st->n_merges++];
  *m = (jmerge){.id = id, .active = true, .sending = true, .worker_id = w->id,
                .attempt = attempt, .n = n, .tasks = copy, .start_ms = now, .poll_ms = now};
  for (int32_t i = 0; i < n; i++) st->tasks[tasks[i]].merge = id;
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: merging %d map outputs "
            "on %s (merge %d -> map %d attempt %d)\n", j->id, st->id, n, w->uri, id, tasks[0],
            attempt);
  if (!emit(ctx, j, s, m, w->uri, env, false))
    merge_failed(d, j, st, m, "out of memory sending it");
}

void fsh_job_merges_plan(fsh_sched_driver *d, sched_job *j, int s, int64_t now,
                         fsh_job_merge_emit_fn emit, void *ctx) {
  jstage *st = &j->stages[s];
  if (!st->merge || st->released) return;
  /* task-wait polls of the merges running for a while (lost notifications) */
  for (int32_t i = 0; i < st->n_merges; i++) {
    jmerge *m = &st->merges[i];
    if (!m->active || m->sending || !m->wtask || now - m->start_ms < 2000 ||
        now - m->poll_ms < 2000)
      continue;
    driver_worker *w = fsh_job_find_worker(d, m->worker_id);
    if (!w) continue;
    m->poll_ms = now;
    (void)emit(ctx, j, s, m, w->uri, NULL, true); /* lost: polled again later */
  }
  if (st->n_held == 0) return;
  bool all_done = st->n_done == st->n_tasks;
  if (st->kind == KIND_PLAN && !all_done) return;
  int32_t *group = fsh_malloc((size_t)st->merge_group * sizeof *group);
  if (!group) return; /* next round */
  for (int64_t wi = 0; wi < d->n && j->state == FSH_SCHED_JOB_RUNNING; wi++) {
    const driver_worker *w = &d->workers[wi];
    if (w->state != FSH_SCHED_WORKER_ALIVE || w->suspect_ms) continue;
    int32_t n = 0, avail = 0;
    for (int32_t t = 0; t < st->n_tasks; t++) {
      const jtask *k = &st->tasks[t];
      avail += k->held && !k->merge && k->worker_id == w->id;
    }
    if (avail == 0 || (avail < st->merge_group && !all_done)) continue;
    for (int32_t t = 0; t < st->n_tasks && j->state == FSH_SCHED_JOB_RUNNING; t++) {
      const jtask *k = &st->tasks[t];
      bool in = k->held && !k->merge && k->worker_id == w->id;
      /* plan stages: runs of consecutive map ids only */
      bool breaks = st->kind == KIND_PLAN && n > 0 && group[n - 1] != t - 1;
      if (in && breaks) {
        start_merge(d, j, s, w, group, n, now, emit, ctx);
        n = 0;
      }
      if (!in) continue;
      group[n++] = t;
      avail--;
      if (n == st->merge_group) {
        start_merge(d, j, s, w, group, n, now, emit, ctx);
        n = 0;
        if (avail < st->merge_group && !all_done) break;
      }
    }
    if (n > 0 && all_done && j->state == FSH_SCHED_JOB_RUNNING)
      start_merge(d, j, s, w, group, n, now, emit, ctx);
  }
  fsh_free(group);
}

/* The merge failed (why): its parts are published unmerged if their
 * worker is alive (else the lineage re-runs them). mu held. */
static void merge_failed(fsh_sched_driver *d, sched_job *j, jstage *st, jmerge *m,
                         const char *why) {
  st->merges_failed++;
  fsh_job_event_push(&j->retried, st->id, m->tasks[0], m->attempt,
                     "merge %d of %d map outputs failed (published unmerged): %s", m->id, m->n,
                     why);
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: merge %d failed: %s\n",
            j->id, st->id, m->id, why);
  driver_worker *w = fsh_job_find_worker(d, m->worker_id);
  int32_t n = m->n;
  int32_t *tasks = m->tasks;
  m->tasks = NULL;
  m->n = 0;
  m->active = false;
  for (int32_t i = 0; i < n; i++) st->tasks[tasks[i]].merge = 0;
  if (w && w->state == FSH_SCHED_WORKER_ALIVE) publish_parts(d, j, st, tasks, n);
  fsh_free(tasks);
}

void fsh_job_merge_sent(fsh_sched_driver *d, sched_job *j, int s, int32_t id, int rc,
                        uint64_t wtask, const char *error) {
  jstage *st = &j->stages[s];
  jmerge *m = merge_by_id(st, id);
  if (!m || !m->active) return;
  m->sending = false;
  if (rc == 0) m->wtask = wtask;
  else if (j->state == FSH_SCHED_JOB_RUNNING) merge_failed(d, j, st, m, error);
}

void fsh_job_merge_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t id, bool ok,
                         const char *error, const uint8_t *answer, int64_t size) {
  fsh_job_merge_ended_lost(d, j, s, id, ok, error, answer, size, NULL, 0);
}

/* The failed merge m's worker w (alive) reported parts of it lost
 * (lost[0, n)): those are no longer held -- their maps pending again,
 * recomputed (why) -- and leave the merge. mu held. */
static void parts_lost(fsh_sched_driver *d, sched_job *j, jstage *st, const jmerge *m,
                       const driver_worker *w, const fsh_lost_output *lost, int64_t n,
                       const char *why) {
  for (int64_t i = 0; i < n; i++) {
    const fsh_lost_output *x = &lost[i];
    if (x->shuffle_id != st->shuffle_id || x->unreachable ||
        (x->uri[0] && strcmp(x->uri, w->uri) != 0))
      continue;
    for (int32_t p = 0; p < m->n; p++) {
      jtask *k = &st->tasks[m->tasks[p]];
      if (m->tasks[p] != x->map_id || !k->held || k->held->attempt != x->attempt ||
          k->state != T_DONE)
        continue;
      char reason[700];
      snprintf(reason, sizeof reason, "its output (attempt %d), held on live worker %s to be "
               "merged, was reported missing or unreadable by merge %d (%.400s)", x->attempt,
               w->uri, m->id, why);
      drop_held(st, k);
      fsh_job_map_recompute(d, j, st, m->tasks[p], reason);
    }
  }
}

void fsh_job_merge_ended_lost(fsh_sched_driver *d, sched_job *j, int s, int32_t id, bool ok,
                              const char *error, const uint8_t *answer, int64_t size,
                              const fsh_lost_output *lost, int64_t n_lost) {
  jstage *st = &j->stages[s];
  jmerge *m = merge_by_id(st, id);
  if (j->state != FSH_SCHED_JOB_RUNNING || !m || !m->active) {
    if (j->state == FSH_SCHED_JOB_RUNNING)
      fsh_job_event_push(&j->ignored, st->id, m && m->n ? m->tasks[0] : -1, m ? m->attempt : -1,
                         "a late %s of merge %d (superseded)", ok ? "answer" : "failure", id);
    return;
  }
  driver_worker *w = fsh_job_find_worker(d, m->worker_id);
  if (!ok && n_lost > 0 && w && w->state == FSH_SCHED_WORKER_ALIVE)
    parts_lost(d, j, st, m, w, lost, n_lost, error ? error : "(no message)");
  fsh_error e = {{0}};
  fsh_map_output out = {0};
  int rc = ok ? fsh_shuffle_put_result_decode(answer, size, &out, &e) : EIO;
  if (rc == 0 && (out.shuffle_id != st->shuffle_id || out.map_id != m->tasks[0] ||
                  out.attempt != m->attempt || out.n_partitions != st->n_parts))
    rc = fsh_error_set(&e, EPROTO, "the answer is of map %" PRId64 " attempt %d of shuffle %"
                       PRIu64 " with %d partitions", out.map_id, out.attempt, out.shuffle_id,
                       out.n_partitions);
  /* the parts' rows must add up to the merged output's; its bytes are
   * theirs when the blocks were copied, else (small blocks re-encoded into
   * larger ones, worker_merge.c) others, but none only where they had none */
  for (int32_t p = 0; rc == 0 && p < st->n_parts; p++) {
    int64_t rows = 0, bytes = 0;
    for (int32_t i = 0; i < m->n; i++) {
      const fsh_map_output *h = st->tasks[m->tasks[i]].held;
      rows += h->rows[p];
      bytes += h->bytes[p];
    }
    if (rows != out.rows[p] || (bytes == 0) != (out.bytes[p] == 0))
      rc = fsh_error_set(&e, EPROTO, "partition %d: the merged output has %" PRId64 " rows, %"
                         PRId64 " bytes; its parts %" PRId64 ", %" PRId64, p, out.rows[p],
                         out.bytes[p], rows, bytes);
  }
  if (rc == 0 && !w)
    rc = fsh_error_set(&e, ENOENT, "its worker is no longer a member");
  else if (rc == 0 && !(out.location = fsh_strdup(w->uri)))
    rc = fsh_error_set(&e, ENOMEM, "out of memory");
  if (rc != 0) {
    fsh_map_output_reset(&out);
    merge_failed(d, j, st, m, ok ? e.message : (error ? error : "(no message)"));
    return;
  }
  /* published in the parts' place: the merged output, the others empty */
  int64_t bytes = 0;
  for (int32_t p = 0; p < st->n_parts; p++) bytes += out.bytes[p];
  publish_one(d, j, st, m->tasks[0], &out);
  for (int32_t i = 1; i < m->n && j->state == FSH_SCHED_JOB_RUNNING; i++) {
    jtask *k = &st->tasks[m->tasks[i]];
    fsh_map_output *h = k->held;
    for (int32_t p = 0; p < st->n_parts; p++) h->rows[p] = h->bytes[p] = 0, h->checksums[p] = 0;
    publish_one(d, j, st, m->tasks[i], h);
  }
  fsh_map_output_reset(&out);
  st->tasks[m->tasks[0]].attempt = m->attempt; /* the output now current */
  for (int32_t i = 0; i < m->n; i++) drop_held(st, &st->tasks[m->tasks[i]]);
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: merge %d published on %s "
            "(%d map outputs, %" PRId64 " bytes)\n", j->id, st->id, m->id, w->uri, m->n, bytes);
  st->merges_done++;
  st->merged_outputs += m->n;
  st->merged_bytes += bytes;
  /* its parts are kept: a loss of the merged output loses every part */
  for (int32_t i = 0; i < m->n; i++) {
    st->tasks[m->tasks[i]].merge = 0;
    st->tasks[m->tasks[i]].merged = m->id;
  }
  m->active = false;
  m->published = true;
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

void fsh_job_merge_forget(jstage *st, int32_t t) {
  jtask *k = &st->tasks[t];
  if (k->merge) {
    jmerge *m = merge_by_id(st, k->merge);
    if (m) merge_close(st, m);
    k->merge = 0;
  }
  unpublish(st, k); /* the merged output covering it is lost: forgotten */
  drop_held(st, k);
}

const jmerge *fsh_job_merge_published(const jstage *st, int32_t id) {
  for (int32_t i = 0; i < st->n_merges; i++)
    if (st->merges[i].id == id && st->merges[i].published) return &st->merges[i];
  return NULL;
}

void fsh_job_merges_cancel(fsh_sched_driver *d, const sched_job *j, int s) {
  const jstage *st = &j->stages[s];
  for (int32_t i = 0; i < st->n_merges; i++) {
    const jmerge *m = &st->merges[i];
    if (!m->active || m->n == 0) continue;
    /* the cancel of an attempt, tagged as this merge (its TaskRef) */
    int32_t before = d->n_cancels;
    fsh_job_cancel_attempt(d, j, st, m->tasks[0], m->attempt, m->worker_id);
    if (d->n_cancels > before) d->cancels[d->n_cancels - 1].merge = (uint32_t)m->id;
  }
}

uint32_t fsh_job_ref_merge(const uint8_t *data, size_t len) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__TaskRef *ref =
      flightshuffle__sched__task_ref__unpack(&fsh_sched_pb_allocator, len, data ? data : empty);
  if (!ref) return 0;
  uint32_t m = ref->merge;
  flightshuffle__sched__task_ref__free_unpacked(ref, &fsh_sched_pb_allocator);
  return m;
}

void fsh_job_merge_free(jstage *st) {
  for (int32_t t = 0; st->tasks && t < st->n_tasks; t++) drop_held(st, &st->tasks[t]);
  for (int32_t i = 0; i < st->n_merges; i++) fsh_free(st->merges[i].tasks);
  fsh_free(st->merges);
  st->merges = NULL;
  st->n_merges = st->cap_merges = 0;
}
