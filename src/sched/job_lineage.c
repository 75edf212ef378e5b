/* job_lineage.c -- a worker is lost (the membership declared it dead or
 * restarted): its running attempts are retried, the map outputs it held
 * are forgotten and recomputed if (or once) a consumer still needs them,
 * and the running consumers that read one of them are retried; or a live
 * worker answered that one output is not held (fsh_job_output_lost): that
 * output alone -- a merged output with every part it covers -- is
 * forgotten and recomputed, and its running readers are retried. mu held. */
#include <inttypes.h>
#include <stdio.h>

#include "sched/job_internal.h"

/* Whether the current output of task t of producer st has rows for p. */
static bool block_non_empty(const jstage *st, int32_t t, int32_t p) {
  int64_t rows = 0, bytes = 0;
  fsh_error e;
  return fsh_shuffle_meta_block(st->meta, t, p, &rows, &bytes, &e) == 0 && (rows || bytes);
}

/* Running consumers of producer stage s that read a partition hit[p]:
 * retried (cancelled where they run) once their inputs are back. mu held. */
static void retry_readers(fsh_sched_driver *d, sched_job *j, int s, const bool *hit,
                          const char *what) {
  const jstage *st = &j->stages[s];
  for (int c = 0; c < j->n_stages; c++) {
    jstage *cs = &j->stages[c];
    if (!consumer(cs) || !reads(cs, s)) continue;
    for (int32_t p = 0; p < cs->n_tasks; p++) {
      jtask *k = &cs->tasks[p];
      if (k->state != T_RUNNING) continue;
      /* the partitions it reads: one, or its run (coalesced reduces) */
      bool reads_hit = cs->scatter && hit[st->n_parts - 1];
      for (int32_t x = 0; !reads_hit && x < run_count(cs, p); x++)
        reads_hit = hit[cs->run_first ? run_first(cs, p) + x : part_read(st, p)];
      if (!reads_hit) continue;
      fsh_job_event_push(&j->retried, cs->id, p, k->attempt, "an input of it (stage %u) %s",
                         st->id, what);
      fsh_job_cancel_attempt(d, j, cs, p, k->attempt, k->worker_id);
      fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, cs));
      k->state = T_PENDING;
      k->wtask = 0;
    }
  }
}

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
          fsh_job_event_push(&j->retried, st->id, t, k->attempt,
                             "worker %s lost (%s) while running it", uri, why);
          /* declared dead, it may still be alive (a fetch from it failed,
           * or it was late): stop the attempt there */
          fsh_job_cancel_attempt(d, j, st, t, k->attempt, wid);
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
          fsh_job_merge_forget(st, t); /* held there, or in a merge there */
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
      char what[700];
      snprintf(what, sizeof what, "was on worker %s, lost (%.500s)", uri, why);
      retry_readers(d, j, s, hit, what);
      fsh_free(hit);
    }
  }
  /* its own running count no longer matters (dead), but keep it honest */
  driver_worker *w = fsh_job_find_worker(d, wid);
  if (w) w->running = w->running_reduce = 0;
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

/* Done map t of st, whose output is gone: pending again, to be recomputed
 * for `reason` (kept for the summary, logged). mu held. */
void fsh_job_map_recompute(fsh_sched_driver *d, const sched_job *j, jstage *st, int32_t t,
                           const char *reason) {
  jtask *k = &st->tasks[t];
  fsh_free(k->lost);
  k->lost = fsh_strdup(reason);
  k->state = T_PENDING;
  k->recompute = true;
  k->wtask = 0;
  st->n_done--;
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u map %d: %s\n", j->id,
            st->id, t, reason);
}

/* Loses the current output of done task t of st (its metadata entry; the
 * map pending again, recomputed for `reason`), marking in hit the
 * partitions where it had rows. mu held. */
static void lose_one(fsh_sched_driver *d, sched_job *j, jstage *st, int32_t t, bool *hit,
                     const char *reason) {
  jtask *k = &st->tasks[t];
  for (int32_t p = 0; hit && p < st->n_parts; p++)
    if (!hit[p] && block_non_empty(st, t, p)) hit[p] = true;
  bool gone = false;
  fsh_error e;
  if (fsh_shuffle_meta_lose_output(st->meta, t, k->attempt, &gone, &e) != 0 && d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %s\n", j->id, st->id,
            e.message);
  fsh_job_map_recompute(d, j, st, t, reason);
}

bool fsh_job_output_lost(fsh_sched_driver *d, sched_job *j, int s, int64_t map_id,
                         int32_t attempt, const char *uri, const char *why) {
  jstage *st = &j->stages[s];
  if (!producer(st) || st->released || map_id < 0 || map_id >= st->n_tasks) return false;
  jtask *k = &st->tasks[map_id];
  if (k->attempt != attempt) return false;
  if (k->state != T_DONE) return k->recompute; /* already being recomputed */
  if (k->held) return false; /* never published: no reader saw it */
  /* a merged output (or an empty part of one): every part it covers */
  const jmerge *m = k->merged ? fsh_job_merge_published(st, k->merged) : NULL;
  int32_t one = (int32_t)map_id;
  const int32_t *tasks = m ? m->tasks : &one;
  int32_t n = m ? m->n : 1;
  bool *hit = fsh_calloc((size_t)st->n_parts, sizeof *hit);
  char reason[700];
  if (m)
    snprintf(reason, sizeof reason, "its output, merged into map %d attempt %d (merge %d of %d "
             "map outputs) on live worker %s, was reported missing or unreadable (%.400s)",
             m->tasks[0], m->attempt, m->id, m->n, uri, why);
  for (int32_t i = 0; i < n; i++) {
    jtask *x = &st->tasks[tasks[i]];
    if (x->state != T_DONE) continue;
    if (!m)
      snprintf(reason, sizeof reason, "its output (attempt %d) on live worker %s was reported "
               "missing or unreadable (%.500s)", x->attempt, uri, why);
    lose_one(d, j, st, tasks[i], hit, reason);
  }
  if (m) fsh_job_merge_forget(st, (int32_t)map_id); /* (m is gone from here on) */
  /* its running readers would fail on it too, or (incremental) read its
   * re-run again: retried now */
  char what[700];
  snprintf(what, sizeof what, "map %" PRId64 " attempt %d on live worker %s was reported "
           "missing or unreadable", map_id, attempt, uri);
  if (hit) retry_readers(d, j, s, hit, what);
  fsh_free(hit);
  d->kick = true;
  return true;
}
