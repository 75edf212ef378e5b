/* plan_cluster_fixture.h -- the in-process cluster the plan job tests run
 * on (test_plan_cluster.c, test_plan_limit.c): a driver and N_WORKERS
 * workers registering the "plan-fragment" task kind, each with a
 * task-done hook counting the tasks that ended cancelled; waiting for
 * their registration; stopping them after checking every store and the
 * fs directory are empty; a client backend (the fs directory, or a
 * reader-only flight backend reaching every worker). Included by one test
 * file each (static functions). */
#ifndef FSH_TESTS_EXEC_PLAN_CLUSTER_FIXTURE_H
#define FSH_TESTS_EXEC_PLAN_CLUSTER_FIXTURE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/flight.h>
#include <flightshuffle/sched.h>

#include "../test.h"

#define N_WORKERS 3
/* workers start_cluster starts (the first g_workers of N_WORKERS) */
static int g_workers = N_WORKERS;

/* The workers' task-done hook: counts the tasks that ended cancelled
 * (ECANCELED), then reports to the driver. */
typedef struct done_hook {
  fsh_sched_notifier *n;
  atomic_int cancelled;
  /* tasks that succeeded and whose task-done the driver took: the driver
   * records it under its lock before answering, so from then on it counts
   * this worker's output as done */
  atomic_int done_recorded;
} done_hook;

static bool hook_task_done(void *ctx, const uint8_t *tag, int64_t tag_size, int rc,
                           const char *error, const uint8_t *answer, int64_t answer_size) {
  done_hook *h = ctx;
  if (rc == ECANCELED && error && strstr(error, "cancelled")) atomic_fetch_add(&h->cancelled, 1);
  bool taken = fsh_sched_notify_task_done(h->n, tag, tag_size, rc, error, answer, answer_size);
  if (taken && rc == 0) atomic_fetch_add(&h->done_recorded, 1);
  return taken;
}

typedef struct cluster {
  fsh_sched_driver *d;
  done_hook hook[N_WORKERS];
  fsh_shuffle_worker *w[N_WORKERS];
  fsh_sched_notifier *n[N_WORKERS];
  fsh_sched_heartbeat *h[N_WORKERS];
  char fs_dir[64];
} cluster;

/* Starts the driver and the workers; worker no_fs (-1: none) has no fs
 * directory (its fs tasks fail). */
static void start_cluster_with(cluster *c, int no_fs, const fsh_plan_task_run_options *ko) {
  fsh_error err;
  memset(c, 0, sizeof *c);
  strcpy(c->fs_dir, "/tmp/fsh-test-plancl-XXXXXX");
  CHECK(mkdtemp(c->fs_dir) != NULL);
  fsh_sched_driver_options o = {.listen = "127.0.0.1:0", .heartbeat_timeout_ms = 5000,
                                .log = getenv("FSH_TEST_LOG") != NULL};
  CHECK_OK(fsh_sched_driver_start(&o, &c->d, &err));
  fsh_worker_task_kind kinds[1] = {fsh_plan_task_kind(ko)};
  for (int i = 0; c->d && i < g_workers; i++) {
    CHECK_OK(fsh_sched_notifier_new(fsh_sched_driver_uri(c->d), NULL, &c->n[i], &err));
    c->hook[i].n = c->n[i];
    atomic_init(&c->hook[i].cancelled, 0);
    atomic_init(&c->hook[i].done_recorded, 0);
    fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .memory_limit = 64 << 20,
                                     .n_threads = 6, .fs_dir = i == no_fs ? NULL : c->fs_dir,
                                     .on_task_done = hook_task_done,
                                     .on_task_done_ctx = &c->hook[i], .task_kinds = kinds,
                                     .n_task_kinds = 1};
    CHECK_OK(fsh_shuffle_worker_start(&wo, &c->w[i], &err));
    if (!c->w[i]) continue;
    fsh_sched_notifier_set_worker(c->n[i], fsh_shuffle_worker_uri(c->w[i]), false);
    fsh_sched_heartbeat_options ho = {.driver_uri = fsh_sched_driver_uri(c->d),
                                      .worker_uri = fsh_shuffle_worker_uri(c->w[i]),
                                      .retry_ms = 50};
    CHECK_OK(fsh_sched_heartbeat_start(&ho, &c->h[i], &err));
  }
}

static void start_cluster(cluster *c) { start_cluster_with(c, -1, NULL); }

/* Every store and the fs directory empty (skipped and cancelled tasks
 * leave nothing behind either) -- but worker `killed`'s (-1: none), which
 * plays a killed one (its store would be gone with it) -- then everything
 * stopped. */
static void stop_cluster_but(cluster *c, int killed) {
  for (int i = 0; i < N_WORKERS; i++) {
    if (!c->w[i] || i == killed) continue;
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(c->w[i]), &st);
    CHECK_MSG(st.map_outputs == 0, "worker %d still holds %lld map outputs", i,
              (long long)st.map_outputs);
  }
  CHECK_MSG(fsh_test_dir_entries(c->fs_dir) == 0, "files left in %s", c->fs_dir);
  for (int i = 0; i < N_WORKERS; i++) fsh_sched_heartbeat_stop(c->h[i]);
  for (int i = 0; i < N_WORKERS; i++) fsh_shuffle_worker_stop(c->w[i], 1000);
  fsh_sched_driver_stop(c->d, 1000);
  for (int i = 0; i < N_WORKERS; i++) fsh_sched_notifier_free(c->n[i]);
  CHECK_EQ_INT(rmdir(c->fs_dir), 0);
}

static void stop_cluster(cluster *c) { stop_cluster_but(c, -1); }

/* Waits until the driver knows every worker. */
static void wait_workers(cluster *c) {
  for (int tries = 0; tries < 200; tries++) {
    fsh_sched_worker_list l = {0};
    fsh_error err;
    if (fsh_sched_driver_workers(c->d, &l, &err) == 0) {
      int64_t n = fsh_sched_worker_list_alive(&l);
      fsh_sched_worker_list_reset(&l);
      if (n == g_workers) return;
    }
    usleep(20000);
  }
  CHECK_MSG(false, "the workers did not register");
}

/* A backend of the client's: the fs directory, or a reader-only flight
 * backend whose release reaches every worker. */
static fsh_shuffle_backend *client_backend(cluster *c, fsh_task_backend kind) {
  fsh_error err;
  fsh_shuffle_backend *b = NULL;
  if (kind == FSH_TASK_BACKEND_FS) {
    CHECK_OK(fsh_shuffle_fs_new(c->fs_dir, &b, &err));
    return b;
  }
  const char *peers[N_WORKERS];
  for (int i = 0; i < g_workers; i++) peers[i] = fsh_shuffle_worker_uri(c->w[i]);
  fsh_shuffle_flight_options fo = {.peers = peers, .n_peers = g_workers};
  CHECK_OK(fsh_shuffle_flight_new(&fo, &b, &err));
  return b;
}


#endif
