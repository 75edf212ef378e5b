/* job_lineage.c -- a worker is lost (the membership declared it dead or
 * restarted): its running attempts are retried, the map outputs it held
 * are forgotten and recomputed if (or once) a consumer still needs them,
 * and the running consumers that read one of them are retried; or a live
 * worker answered that one output is not held (fsh_job_output_lost): that
 * output alone is forgotten and recomputed. mu held. */
#include <inttypes.h>
#include <stdio.h>

#include "sched/job_internal.h"

/* Whether the current output of task t of producer st has rows for p. */
static bool block_non_empty(const jstage *st, int32_t t, int32_t p) {
  int64_t rows = 0, bytes = 0;
  fsh_error e;
  return fsh_shuffle_meta_block(st->meta, t, p, &rows, &bytes, &e) == 0 && (rows || bytes);
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
      for (int c = 0; c < j->n_stages; c++) {
        jstage *cs = &j->stages[c];
        if (!consumer(cs) || !reads(cs, s)) continue;
        for (int32_t p = 0; p < cs->n_tasks; p++) {
          jtask *k = &cs->tasks[p];
          if (k->state != T_RUNNING ||
              !(hit[part_read(st, p)] || (cs->scatter && hit[st->n_parts - 1])))
            continue;
          fsh_job_event_push(&j->retried, cs->id, p, k->attempt, "an input of it (stage %u) was on "
                             "worker %s, lost (%s)", st->id, uri, why);
          fsh_job_cancel_attempt(d, j, cs, p, k->attempt, k->worker_id);
          fsh_job_worker_release(d, k->worker_id, fsh_job_reduce_slot(j, cs));
          k->state = T_PENDING;
          k->wtask = 0;
        }
      }
      fsh_free(hit);
    }
  }
  /* its own running count no longer matters (dead), but keep it honest */
  driver_worker *w = fsh_job_find_worker(d, wid);
  if (w) w->running = w->running_reduce = 0;
  d->kick = true;
  pthread_cond_broadcast(&d->sched_cv);
}

bool fsh_job_output_lost(fsh_sched_driver *d, sched_job *j, int s, int64_t map_id,
                         int32_t attempt, const char *uri, const char *why) {
  jstage *st = &j->stages[s];
  if (!producer(st) || st->released || st->merge || map_id < 0 || map_id >= st->n_tasks)
    return false;
  jtask *k = &st->tasks[map_id];
  if (k->attempt != attempt) return false;
  if (k->state != T_DONE) return k->recompute; /* already being recomputed */
  bool gone = false;
  fsh_error e;
  if (fsh_shuffle_meta_lose_output(st->meta, map_id, attempt, &gone, &e) != 0) {
    if (d->log) fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u: %s\n", j->id,
                        st->id, e.message);
    return false;
  }
  char reason[700];
  snprintf(reason, sizeof reason, "its output (attempt %d) on live worker %s was reported "
           "missing or unreadable (%.500s)", attempt, uri, why);
  fsh_free(k->lost);
  k->lost = fsh_strdup(reason);
  k->state = T_PENDING;
  k->recompute = true;
  k->wtask = 0;
  st->n_done--;
  if (d->log)
    fprintf(stderr, "flightshuffle: driver: job %" PRIu64 " stage %u map %" PRId64 ": %s\n",
            j->id, st->id, map_id, reason);
  d->kick = true;
  return true;
}
