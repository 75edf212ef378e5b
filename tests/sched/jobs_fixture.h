/* jobs_fixture.h -- what the driver's job tests share (test_jobs.c,
 * test_merge_jobs.c): an in-process driver and N_WORKERS in-process
 * workers joined by the heartbeat, whose task-done hook can hold back the
 * reduces, play dead, drop a map's or a merged output, scramble the error
 * texts, and records what failed tasks reported lost; the synthetic job JOB; the
 * reference (the same map tasks through the memory backend) and the check
 * of a job's partitions against it. */
#ifndef FSH_TEST_JOBS_FIXTURE_H
#define FSH_TEST_JOBS_FIXTURE_H

#include <errno.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "Sched.pb-c.h"
#include "shuffle/shuffle_internal.h" /* fsh_store_drop */
#include "test.h"

#define N_WORKERS 3

static inline void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* The workers' task-done hook: counts the tasks that ended cancelled
 * (ECANCELED), then reports to the driver like fsh_sched_notify_task_done. */
typedef struct done_hook {
  fsh_sched_notifier *n;
  atomic_int cancelled;
  atomic_int maps_acked; /* stage-1 tasks that ended ok and whose task-done the
                            driver answered (it records the output's holder
                            before answering) */
  atomic_int held;       /* reduces held back right now (hold_reduces) */
  atomic_bool gone;      /* the worker "died": its tasks' ends are never reported */
  fsh_shuffle_store *store; /* its worker's */
  const char *uri;          /* its worker's */
} done_hook;

/* What failed tasks reported lost (fsh_worker_task_lost, read by the hook
 * on the task's thread: what goes into TaskDone.lost), in order. */
typedef struct seen_loss {
  char reporter[80]; /* the worker whose task reported it */
  char uri[80];      /* the worker that held it ("" in the report: the reporter) */
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  bool unreachable;
  bool merge; /* reported by a merge (a part), not a task */
} seen_loss;
#define MAX_SEEN_LOSSES 256
static seen_loss seen_losses[MAX_SEEN_LOSSES];
static atomic_int n_seen_losses;

/* While set, every failed task's error text becomes "scrambled by the
 * test": the driver must act on TaskDone.lost alone. */
static atomic_bool scramble_errors;

/* When set, the first merge that succeeds has its merged output dropped
 * from its worker's store just before its end is reported (once): the
 * driver publishes a merged output its live worker no longer holds. The
 * output and the worker go into dropped_merged_*. */
static atomic_bool drop_merged;
static int64_t dropped_merged_map = -1;
static int32_t dropped_merged_attempt = -1;
static char dropped_merged_at[80];

/* >= 0: the map task of that id has its output dropped from its worker's
 * store just before its end is reported (once): the driver holds an
 * output its worker no longer has (a merge of it fails). */
static atomic_int drop_map = -1;

/* >= 0: the map task of that id (stage 1) reports a failure (EIO)
 * instead of its output (once), after waiting while fail_map_hold is set
 * (at most 20 s). */
static atomic_int fail_map = -1;
static atomic_bool fail_map_hold;

/* While set, the hook holds back the end of every stage-2 task (the
 * reduces) until it is cleared: the job stays running with every task
 * placed. */
static atomic_bool hold_reduces;

/* While set, the same for the first attempts (0) of the stage-2 tasks
 * only: their re-runs end as usual. */
static atomic_bool hold_first_reduces;

static inline bool hook_task_done(void *ctx, const uint8_t *tag, int64_t tag_size, int rc,
                           const char *error, const uint8_t *answer, int64_t answer_size) {
  done_hook *h = ctx;
  if (atomic_load(&hold_reduces) || atomic_load(&hold_first_reduces)) {
    Flightshuffle__Sched__TaskRef *ref =
        flightshuffle__sched__task_ref__unpack(NULL, (size_t)tag_size, tag);
    bool reduce = ref && ref->stage_id == 2;
    bool first = reduce && ref->attempt == 0;
    if (ref) flightshuffle__sched__task_ref__free_unpacked(ref, NULL);
    bool held = reduce && (atomic_load(&hold_reduces) || (first && atomic_load(&hold_first_reduces)));
    if (held) atomic_fetch_add(&h->held, 1);
    while (reduce && atomic_load(&hold_reduces)) sleep_ms(5);
    while (first && atomic_load(&hold_first_reduces)) sleep_ms(5);
    if (held) atomic_fetch_sub(&h->held, 1);
  }
  if (atomic_load(&h->gone)) return false;
  if (rc == ECANCELED) atomic_fetch_add(&h->cancelled, 1);
  bool map = false;
  Flightshuffle__Sched__TaskRef *ref =
      flightshuffle__sched__task_ref__unpack(NULL, (size_t)tag_size, tag);
  if (ref) map = ref->stage_id == 1 && ref->merge == 0;
  const fsh_lost_output *lost = NULL;
  int64_t n_lost = rc != 0 ? fsh_worker_task_lost(&lost) : 0;
  for (int64_t i = 0; i < n_lost; i++) {
    int at = atomic_fetch_add(&n_seen_losses, 1);
    if (at >= MAX_SEEN_LOSSES) break;
    seen_loss *x = &seen_losses[at];
    snprintf(x->reporter, sizeof x->reporter, "%s", h->uri);
    snprintf(x->uri, sizeof x->uri, "%s", lost[i].uri[0] ? lost[i].uri : h->uri);
    x->shuffle_id = lost[i].shuffle_id;
    x->map_id = lost[i].map_id;
    x->attempt = lost[i].attempt;
    x->unreachable = lost[i].unreachable;
    x->merge = ref && ref->merge != 0;
  }
  if (rc != 0 && atomic_load(&scramble_errors)) error = "scrambled by the test";
  bool dm = true;
  if (ref && ref->merge && rc == 0 && atomic_compare_exchange_strong(&drop_merged, &dm, false)) {
    fsh_map_output o = {0};
    fsh_error e;
    if (fsh_shuffle_put_result_decode(answer, answer_size, &o, &e) == 0) {
      CHECK(fsh_store_drop(h->store, o.shuffle_id, o.map_id, o.attempt));
      dropped_merged_map = o.map_id;
      dropped_merged_attempt = o.attempt;
      snprintf(dropped_merged_at, sizeof dropped_merged_at, "%s", h->uri);
    }
    fsh_map_output_reset(&o);
  }
  int want = map && rc == 0 ? atomic_load(&drop_map) : -1;
  if (want >= 0 && ref->task == want && atomic_compare_exchange_strong(&drop_map, &want, -1)) {
    fsh_map_task_result r;
    fsh_error e;
    if (fsh_map_task_result_decode(answer, answer_size, &r, &e) == 0) {
      CHECK(fsh_store_drop(h->store, r.output.shuffle_id, r.output.map_id, r.output.attempt));
      fsh_map_task_result_reset(&r);
    }
  }
  int fail = map && rc == 0 ? atomic_load(&fail_map) : -1;
  if (fail >= 0 && ref->task == fail && atomic_compare_exchange_strong(&fail_map, &fail, -1)) {
    for (int i = 0; i < 4000 && atomic_load(&fail_map_hold); i++) sleep_ms(5);
    rc = EIO, error = "failed by the test", answer = NULL, answer_size = 0, map = false;
  }
  if (ref) flightshuffle__sched__task_ref__free_unpacked(ref, NULL);
  bool sent = fsh_sched_notify_task_done(h->n, tag, tag_size, rc, error, answer, answer_size);
  if (sent && rc == 0 && map) atomic_fetch_add(&h->maps_acked, 1);
  return sent;
}

typedef struct cluster {
  fsh_sched_driver *d;
  done_hook hook[N_WORKERS];
  fsh_shuffle_worker *w[N_WORKERS];
  fsh_sched_notifier *n[N_WORKERS];
  fsh_sched_heartbeat *h[N_WORKERS];
} cluster;

static inline void start_workers(cluster *c) {
  fsh_error err;
  for (int i = 0; i < N_WORKERS; i++) {
    CHECK_OK(fsh_sched_notifier_new(fsh_sched_driver_uri(c->d), NULL, &c->n[i], &err));
    c->hook[i].n = c->n[i];
    atomic_init(&c->hook[i].cancelled, 0);
    atomic_init(&c->hook[i].maps_acked, 0);
    atomic_init(&c->hook[i].held, 0);
    atomic_init(&c->hook[i].gone, false);
    fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .memory_limit = 64 << 20,
                                    .n_threads = 6, .on_task_done = hook_task_done,
                                    .on_task_done_ctx = &c->hook[i],
                                    .on_more_sources = fsh_sched_more_sources,
                                    .on_more_sources_ctx = c->n[i]};
    CHECK_OK(fsh_shuffle_worker_start(&o, &c->w[i], &err));
    if (!c->w[i]) continue;
    c->hook[i].store = fsh_shuffle_worker_store(c->w[i]);
    c->hook[i].uri = fsh_shuffle_worker_uri(c->w[i]);
    fsh_sched_notifier_set_worker(c->n[i], fsh_shuffle_worker_uri(c->w[i]), false);
    fsh_sched_heartbeat_options ho = {.driver_uri = fsh_sched_driver_uri(c->d),
                                      .worker_uri = fsh_shuffle_worker_uri(c->w[i]),
                                      .retry_ms = 50};
    CHECK_OK(fsh_sched_heartbeat_start(&ho, &c->h[i], &err));
  }
}

static inline void start_cluster(cluster *c, int64_t timeout_ms, bool with_workers) {
  fsh_error err;
  memset(c, 0, sizeof *c);
  fsh_sched_driver_options o = {.listen = "127.0.0.1:0", .heartbeat_timeout_ms = timeout_ms,
                                .log = getenv("FSH_TEST_LOG") != NULL}; /* driver log on stderr */
  CHECK_OK(fsh_sched_driver_start(&o, &c->d, &err));
  if (with_workers) start_workers(c);
}

/* The job's summary recomputed exactly one task: task t of stage `stage`,
 * its reason containing `why` and `why2` (each unless NULL). */
static inline void check_only_recomputed(const fsh_sched_job_status *s, uint32_t stage,
                                         int64_t t, const char *why, const char *why2) {
  CHECK_EQ_INT(s->n_recomputed, 1);
  if (s->n_recomputed != 1) return;
  CHECK_EQ_INT(s->recomputed[0].stage_id, stage);
  CHECK_EQ_INT(s->recomputed[0].task, t);
  const char *r = s->recomputed[0].reason;
  CHECK_MSG((!why || strstr(r, why)) && (!why2 || strstr(r, why2)), "%s", r);
}

/* Waits (up to 10 s) until n workers are alive in the driver. */
static inline void wait_alive(cluster *c, int64_t n) {
  fsh_error err;
  int64_t alive = 0;
  for (int t = 0; t < 1000 && alive < n; t++) {
    fsh_sched_worker_list l;
    CHECK_OK(fsh_sched_driver_workers(c->d, &l, &err));
    alive = fsh_sched_worker_list_alive(&l);
    fsh_sched_worker_list_reset(&l);
    if (alive < n) sleep_ms(10);
  }
  CHECK_MSG(alive == n, "%lld of %lld workers registered", (long long)alive, (long long)n);
}

/* Every worker of c is still alive at the driver (none was declared dead). */
static inline void check_all_alive(cluster *c) {
  fsh_error err;
  fsh_sched_worker_list l;
  CHECK_OK(fsh_sched_driver_workers(c->d, &l, &err));
  CHECK_EQ_INT(fsh_sched_worker_list_alive(&l), N_WORKERS);
  fsh_sched_worker_list_reset(&l);
}

static inline void stop_cluster(cluster *c) {
  for (int i = 0; i < N_WORKERS; i++) fsh_sched_heartbeat_stop(c->h[i]);
  for (int i = 0; i < N_WORKERS; i++) fsh_shuffle_worker_stop(c->w[i], 1000);
  fsh_sched_driver_stop(c->d, 1000);
  for (int i = 0; i < N_WORKERS; i++) fsh_sched_notifier_free(c->n[i]);
}

static const fsh_sched_shuffle_job JOB = {.name = "test", .maps = 7, .reduces = 5,
                                          .rows = 30000, .batch_rows = 1000, .seed = 11,
                                          .backend = FSH_TASK_BACKEND_FLIGHT};

/* The reference: per partition, rows and row checksum of the same map
 * tasks run in-process through the memory backend. */
static inline void reference(const fsh_sched_shuffle_job *j, int64_t *rows, uint64_t *sums) {
  fsh_error err;
  fsh_shuffle_backend *mem = NULL;
  CHECK_OK(fsh_shuffle_memory_new(&mem, &err));
  memset(rows, 0, sizeof(int64_t) * (size_t)j->reduces);
  memset(sums, 0, sizeof(uint64_t) * (size_t)j->reduces);
  int64_t batches = (j->rows + j->batch_rows - 1) / j->batch_rows;
  for (int32_t m = 0; mem && m < j->maps; m++) {
    int64_t b0 = batches * m / j->maps, b1 = batches * (m + 1) / j->maps;
    int64_t first = b0 * j->batch_rows, end = b1 * j->batch_rows;
    if (end > j->rows) end = j->rows;
    fsh_map_task t = {.shuffle_id = 1, .map_id = m, .n_partitions = j->reduces,
                      .first_row = first, .rows = end - first, .batch_rows = j->batch_rows,
                      .seed = j->seed, .backend = FSH_TASK_BACKEND_MEMORY};
    fsh_map_task_result r;
    CHECK_OK(fsh_map_task_run(mem, &t, &r, &err));
    for (int32_t p = 0; p < j->reduces; p++) {
      rows[p] += r.output.rows[p];
      sums[p] += r.row_checksums[p];
    }
    fsh_map_task_result_reset(&r);
  }
  fsh_shuffle_backend_destroy(mem);
}

/* The job's partitions equal the reference. */
static inline void check_job(const fsh_sched_shuffle_job *j, const fsh_sched_job_status *s) {
  int64_t rows[16];
  uint64_t sums[16];
  reference(j, rows, sums);
  CHECK_EQ_INT(s->n_partitions, j->reduces);
  int64_t total = 0;
  for (int32_t p = 0; p < s->n_partitions && p < 16; p++) {
    CHECK_EQ_INT(s->partitions[p].reduce_rows, rows[p]);
    CHECK(s->partitions[p].reduce_checksum == sums[p]);
    CHECK(s->partitions[p].map_checksum == sums[p]);
    total += s->partitions[p].reduce_rows;
  }
  CHECK_EQ_INT(total, j->rows);
  CHECK(s->verified);
}

static inline void check_against_reference(const fsh_sched_job_status *s) { check_job(&JOB, s); }

static inline uint64_t submit(cluster *c, const fsh_sched_shuffle_job *j) {
  fsh_error err;
  fsh_buffer *plan = NULL;
  uint64_t id = 0;
  CHECK_OK(fsh_sched_shuffle_job_plan(j, &plan, &err));
  if (plan) CHECK_OK(fsh_sched_driver_submit(c->d, plan->data, plan->size, &id, &err));
  fsh_buffer_unref(plan);
  return id;
}

/* Waits until the map stage of job `id` has >= 2 maps done, then declares
 * dead the worker of which the driver knows most map outputs (it answered
 * their task-done: it recorded the holder before answering -- not what the
 * stores hold, which is ahead of what the driver knows). Returns its URI,
 * or NULL when the job ended first; *held (may be NULL): how many map
 * outputs its store held at that moment. */
static inline const char *declare_busiest_dead(cluster *c, uint64_t id, int *held) {
  fsh_error err;
  for (int t = 0; t < 2000; t++) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c->d, id, false, &s, &err));
    bool some = s.n_stages == 2 && s.stages[0].tasks_done >= 2;
    bool over = s.state != FSH_SCHED_JOB_RUNNING;
    fsh_sched_job_status_reset(&s);
    if (over) return NULL;
    int best = -1, most = 0;
    for (int i = 0; some && i < N_WORKERS; i++) {
      int acked = atomic_load(&c->hook[i].maps_acked);
      if (acked > most) most = acked, best = i;
    }
    if (best >= 0) {
      const char *victim = fsh_shuffle_worker_uri(c->w[best]);
      CHECK_OK(fsh_sched_driver_declare_dead(c->d, victim, "declared by the test", &err));
      if (held) {
        fsh_shuffle_store_stats st;
        fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(c->w[best]), &st);
        *held = (int)st.map_outputs;
      }
      return victim;
    }
    sleep_ms(2);
  }
  return NULL;
}

#endif
