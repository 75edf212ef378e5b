/* flight_pool.c -- the flight backend's fetch pool: persistent threads,
 * one set per backend (per process in a worker), running the fetch jobs
 * of every open reader (contract and lock order in flight_reader.h). It
 * replaces a thread per (reader, peer): at 1000 x 1000 that was thousands
 * of short-lived threads per run, each start and end a hand-off on
 * saturated cores. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shuffle/flight_reader.h"

#define POOL_IDLE_EXIT_MS 1000

/* A thread counts as idle from its start until it first takes the lock,
 * as it does while waiting for a job: either way it will take the next
 * queued job without another thread. (Counted as busy, a thread started
 * but not yet scheduled -- common on saturated cores -- made submit and
 * hurry start more threads than the jobs needed.) */
struct fr_pool {
  pthread_mutex_t mu;
  pthread_cond_t work; /* a job was queued, or stop */
  pthread_cond_t gone; /* a reader's last running job ended */
  fr_job *head, *tail; /* queued jobs */
  int base, cap;
  int n_threads, n_idle, n_room; /* all, waiting for a job (or not yet run),
                                    waiting for room */
  bool stopping;
  pthread_t *threads; /* live ones, then ended ones not yet joined */
  int n_live, n_ended, cap_threads;
};

static void *pool_thread(void *arg);

int fr_pool_new(int base, int cap, fr_pool **out, fsh_error *err) {
  *out = NULL;
  fr_pool *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "flight shuffle: fetch pool: out of memory");
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    fsh_free(p);
    return fsh_error_set(err, EAGAIN, "flight shuffle: fetch pool: cannot create a mutex");
  }
  pthread_condattr_t ca;
  bool ok = pthread_condattr_init(&ca) == 0;
  if (ok) ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
  bool work = ok && pthread_cond_init(&p->work, &ca) == 0;
  bool gone = work && pthread_cond_init(&p->gone, NULL) == 0;
  pthread_condattr_destroy(&ca);
  if (!gone) {
    if (work) pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    fsh_free(p);
    return fsh_error_set(err, EAGAIN, "flight shuffle: fetch pool: cannot create a condition");
  }
  p->base = base > 0 ? base : 1;
  p->cap = cap > p->base ? cap : p->base;
  *out = p;
  return 0;
}

/* Joins the threads that ended (lock held: an ended thread no longer
 * takes it). */
static void join_ended(fr_pool *p) {
  for (int i = 0; i < p->n_ended; i++) pthread_join(p->threads[p->n_live + i], NULL);
  p->n_ended = 0;
}

/* Starts one more thread (lock held): 0, ENOMEM or EAGAIN. */
static int start_thread_rc(fr_pool *p) {
  join_ended(p);
  if (p->n_live == p->cap_threads) {
    int cap = p->cap_threads ? p->cap_threads * 2 : 8;
    pthread_t *n = fsh_realloc(p->threads, sizeof *n * (size_t)cap);
    if (!n) return ENOMEM;
    p->threads = n;
    p->cap_threads = cap;
  }
  if (pthread_create(&p->threads[p->n_live], NULL, pool_thread, p) != 0) return EAGAIN;
  (void)pthread_setname_np(p->threads[p->n_live], "fsh-fetch"); /* (tests count them) */
  p->n_live++;
  p->n_threads++;
  p->n_idle++; /* until it first runs: it will take the next queued job */
  return 0;
}

static bool start_thread(fr_pool *p) { return start_thread_rc(p) == 0; }

/* Whether queued jobs could wait forever: every thread waits for room in
 * a reader (lock held). */
static bool stalled(const fr_pool *p) {
  return p->head && p->n_idle == 0 && p->n_room == p->n_threads;
}

static void unlink_job(fr_pool *p, fr_job *j) {
  if (j->q_prev) j->q_prev->q_next = j->q_next;
  else p->head = j->q_next;
  if (j->q_next) j->q_next->q_prev = j->q_prev;
  else p->tail = j->q_prev;
  j->q_prev = j->q_next = NULL;
}

static void *pool_thread(void *arg) {
  fr_pool *p = arg;
  pthread_mutex_lock(&p->mu);
  p->n_idle--; /* counted idle since it was started (start_thread_rc) */
  for (;;) {
    if (!p->head && !p->stopping) {
      p->n_idle++;
      int rc = 0;
      if (p->n_threads > p->base) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_sec += POOL_IDLE_EXIT_MS / 1000;
        rc = pthread_cond_timedwait(&p->work, &p->mu, &t);
      } else {
        pthread_cond_wait(&p->work, &p->mu);
      }
      p->n_idle--;
      if (rc == ETIMEDOUT && !p->head && p->n_threads > p->base) break;
      continue;
    }
    if (!p->head) break; /* stopping */
    fr_job *j = p->head;
    unlink_job(p, j);
    j->qstate = FR_JOB_RUNNING;
    fr_reader *r = j->owner;
    r->pool_running++;
    pthread_mutex_unlock(&p->mu);
    fr_run_job(r, j->index);
    pthread_mutex_lock(&p->mu);
    j->qstate = FR_JOB_DONE;
    if (--r->pool_running == 0) pthread_cond_broadcast(&p->gone); /* (fr_pool_forget) */
  }
  /* leaving: move this thread's id past the live ones, to be joined */
  pthread_t self = pthread_self();
  for (int i = 0; i < p->n_live; i++)
    if (pthread_equal(p->threads[i], self)) {
      p->threads[i] = p->threads[p->n_live - 1];
      p->threads[p->n_live - 1] = self;
      break;
    }
  p->n_live--;
  p->n_ended++;
  p->n_threads--;
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void fr_pool_free(fr_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  pthread_cond_broadcast(&p->work);
  while (p->n_live > 0) {
    pthread_t t = p->threads[0];
    pthread_mutex_unlock(&p->mu);
    pthread_join(t, NULL); /* it moved itself to the ended ones */
    pthread_mutex_lock(&p->mu);
    for (int i = p->n_live; i < p->n_live + p->n_ended; i++)
      if (pthread_equal(p->threads[i], t)) {
        p->threads[i] = p->threads[p->n_live + p->n_ended - 1];
        p->n_ended--;
        break;
      }
  }
  join_ended(p);
  pthread_mutex_unlock(&p->mu);
  fsh_free(p->threads);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->gone);
  pthread_mutex_destroy(&p->mu);
  fsh_free(p);
}

int fr_pool_submit(fr_pool *p, fr_reader *r, fsh_error *err) {
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < r->n_jobs; i++) {
    fr_job *j = &r->jobs[i];
    j->owner = r;
    j->index = i;
    j->qstate = FR_JOB_QUEUED;
    j->q_next = NULL;
    j->q_prev = p->tail;
    if (p->tail) p->tail->q_next = j;
    else p->head = j;
    p->tail = j;
  }
  /* a thread per job up to base while none is idle; one at least */
  int want = r->n_jobs - p->n_idle;
  while (want > 0 && p->n_threads < p->base && start_thread(p)) want--;
  int rc = stalled(p) || p->n_threads == 0 ? start_thread_rc(p) : 0;
  if (p->n_threads == 0) {
    for (int i = 0; i < r->n_jobs; i++) {
      unlink_job(p, &r->jobs[i]);
      r->jobs[i].qstate = FR_JOB_IDLE;
    }
    rc = fsh_error_set(err, rc, "flight shuffle %" PRIu64 " %s: cannot start a "
                       "fetch thread%s", r->shuffle_id, r->what,
                       rc == ENOMEM ? ": out of memory" : "");
  } else {
    rc = 0; /* (a thread that could not start: those running take the jobs) */
    if (r->n_jobs == 1 || p->n_idle <= 1) pthread_cond_signal(&p->work);
    else pthread_cond_broadcast(&p->work);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void fr_pool_hurry(fr_pool *p, fr_job *job) {
  pthread_mutex_lock(&p->mu);
  if (job->qstate == FR_JOB_QUEUED) {
    if (p->head != job) {
      unlink_job(p, job);
      job->q_next = p->head;
      p->head->q_prev = job;
      p->head = job;
    }
    if (p->n_idle == 0 && (p->n_threads < p->cap || stalled(p))) start_thread(p);
    pthread_cond_signal(&p->work);
  }
  pthread_mutex_unlock(&p->mu);
}

bool fr_pool_waiting_for_room(fr_pool *p, int delta) {
  pthread_mutex_lock(&p->mu);
  p->n_room += delta;
  bool ok = true;
  if (delta > 0 && stalled(p) && !start_thread(p)) {
    p->n_room -= delta; /* it will not wait */
    ok = false;
  }
  pthread_mutex_unlock(&p->mu);
  return ok;
}

void fr_pool_forget(fr_pool *p, fr_reader *r) {
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < r->n_jobs; i++)
    if (r->jobs[i].qstate == FR_JOB_QUEUED) {
      unlink_job(p, &r->jobs[i]);
      r->jobs[i].qstate = FR_JOB_DONE;
    }
  while (r->pool_running > 0) pthread_cond_wait(&p->gone, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

int fr_pool_threads(fr_pool *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->n_threads;
  pthread_mutex_unlock(&p->mu);
  return n;
}
