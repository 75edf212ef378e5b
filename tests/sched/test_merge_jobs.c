/* test_merge_jobs.c -- the driver's pre-shuffle merge (sched.h,
 * src/sched/job_merge.c) in one process (jobs_fixture.h): with the merge
 * forced on, each worker merges the map outputs it holds and the merged
 * outputs are published in their place; the job's partitions equal the
 * independent reference, incremental or not; a merge that fails (a part
 * gone from its worker's store) publishes its parts unmerged and the job
 * still ends with the reference's result; a merged output lost on its live
 * worker recomputes exactly the maps it covers. */
#include "jobs_fixture.h"

#include "shuffle/worker_internal.h"

/* The pre-shuffle merge forced on (sched.h): each worker merges the map
 * outputs it holds (groups of 2 here: 12 x 5 is far below 200^2), the
 * merged outputs are published in their place -- the result is the
 * reference's, incremental or not; nothing fails, nothing is re-run. */
static void merged_job(bool incremental) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 12;
  j.rows = 12 * 5000;
  j.merge = FSH_SCHED_MERGE_ON;
  j.incremental = incremental;
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c.d), NULL, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  CHECK_MSG(s.merges >= 1 && s.merged_outputs >= 2 * s.merges && s.merged_outputs <= j.maps &&
                s.merged_outputs >= j.maps - N_WORKERS && s.merged_bytes > 0,
            "%lld merges of %lld outputs, %lld bytes", (long long)s.merges,
            (long long)s.merged_outputs, (long long)s.merged_bytes);
  CHECK_EQ_INT(s.merges_failed, 0);
  CHECK_EQ_INT(s.n_recomputed, 0);
  CHECK_EQ_INT(s.n_retried, 0);
  /* the merged bytes are what the maps wrote (stage 1's bytes) */
  if (s.n_stages == 2) CHECK(s.merged_bytes <= s.stages[0].bytes);
  fsh_sched_job_status_reset(&s);
  /* the shuffle was released: no part nor merged output is left */
  for (int i = 0; i < N_WORKERS; i++) {
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(c.w[i]), &st);
    CHECK_EQ_INT(st.map_outputs, 0);
  }
  stop_cluster(&c);
}
static void merged_job_completes(void) { merged_job(false); }
static void merged_incremental_job_completes(void) { merged_job(true); }

/* A merge fails (one of its parts is gone from its worker's store): it
 * reports that part lost (TaskDone.lost), exactly that map is recomputed,
 * the other parts are published unmerged, its worker stays alive, and the
 * result is still the reference's. */
static void failed_merge_publishes_its_parts(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 12;
  j.rows = 12 * 5000;
  j.merge = FSH_SCHED_MERGE_ON;
  j.slots_per_worker = 1;
  atomic_store(&drop_map, 0);
  atomic_store(&n_seen_losses, 0);
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 30000, &err));
  CHECK_EQ_INT(atomic_load(&drop_map), -1);
  atomic_store(&drop_map, -1);
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  CHECK_MSG(s.merges_failed >= 1, "%lld merges failed", (long long)s.merges_failed);
  bool named = false;
  for (int32_t i = 0; i < s.n_retried; i++)
    named |= strstr(s.retried[i].reason, "published unmerged") != NULL &&
             strstr(s.retried[i].reason, "map 0") != NULL;
  CHECK_MSG(named, "no retried event names the failed merge");
  /* the merge reported its missing part (TaskDone.lost): exactly map 0 is
   * recomputed, its worker stays alive */
  int n = atomic_load(&n_seen_losses);
  bool by_merge = false;
  for (int i = 0; i < n && i < MAX_SEEN_LOSSES; i++) {
    const seen_loss *x = &seen_losses[i];
    CHECK_MSG(x->map_id == 0 && x->attempt == 0 && !x->unreachable, "reported lost: map %lld "
              "attempt %d%s", (long long)x->map_id, x->attempt, x->unreachable ? " (unreachable)" : "");
    by_merge |= x->merge && strcmp(x->uri, x->reporter) == 0;
  }
  CHECK_MSG(by_merge, "the failed merge did not report its missing part (%d reports)", n);
  check_only_recomputed(&s, 1, 0, NULL, NULL);
  fsh_sched_job_status_reset(&s);
  check_all_alive(&c); /* no worker was declared dead */
  stop_cluster(&c);
}

/* The merges' test hook recording each merge's parts (by its merged
 * output's map id and attempt). */
#define MAX_MERGES 64
static struct {
  int64_t map_id;
  int32_t attempt;
  int32_t n;
  int64_t parts[64];
} merges_seen[MAX_MERGES];
static atomic_int n_merges_seen;
static void record_merge(void *ctx, const fsh_merge_task *t) {
  (void)ctx;
  int at = atomic_fetch_add(&n_merges_seen, 1);
  if (at >= MAX_MERGES) return;
  merges_seen[at].map_id = t->map_id;
  merges_seen[at].attempt = t->attempt;
  merges_seen[at].n = t->n_parts < 64 ? t->n_parts : 64;
  for (int32_t i = 0; i < merges_seen[at].n; i++) merges_seen[at].parts[i] = t->part_maps[i];
}

/* A merged output is lost on its live worker (dropped from the store just
 * before the merge's end is reported: published, but not held; its parts
 * were dropped by the merge): the reduces report it lost (TaskDone.lost:
 * the merged output's map id and reserved attempt, at that worker); the
 * driver recomputes exactly the maps it covers -- every part, each once --,
 * keeps every worker alive, and the result is the reference's. Incremental
 * or not. */
static void lost_merged_output(bool incremental) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  atomic_store(&n_merges_seen, 0);
  atomic_store(&n_seen_losses, 0);
  fsh_merge_test_hooks h = {.parts_open = record_merge};
  fsh_merge_set_test_hooks(&h);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 12;
  j.rows = 12 * 5000;
  j.merge = FSH_SCHED_MERGE_ON;
  j.incremental = incremental;
  dropped_merged_map = -1;
  atomic_store(&drop_merged, true);
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 30000, &err));
  fsh_merge_set_test_hooks(NULL);
  CHECK(!atomic_load(&drop_merged));
  atomic_store(&drop_merged, false);
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  /* the dropped merge's parts */
  int m = -1;
  for (int i = 0; i < atomic_load(&n_merges_seen) && i < MAX_MERGES; i++)
    if (merges_seen[i].map_id == dropped_merged_map &&
        merges_seen[i].attempt == dropped_merged_attempt)
      m = i;
  CHECK_MSG(m >= 0, "no merge of map %lld attempt %d seen", (long long)dropped_merged_map,
            dropped_merged_attempt);
  /* reported lost: that merged output, at its worker */
  int n = atomic_load(&n_seen_losses), named = 0;
  for (int i = 0; i < n && i < MAX_SEEN_LOSSES; i++) {
    const seen_loss *x = &seen_losses[i];
    CHECK_MSG(x->map_id == dropped_merged_map && x->attempt == dropped_merged_attempt &&
                  !x->unreachable && !x->merge && strcmp(x->uri, dropped_merged_at) == 0,
              "reported lost by %s: %s map %lld attempt %d", x->reporter, x->uri,
              (long long)x->map_id, x->attempt);
    named++;
  }
  CHECK(named >= 1);
  /* recomputed: exactly its parts, each once, for that reason */
  if (m >= 0) {
    CHECK_EQ_INT(s.n_recomputed, merges_seen[m].n);
    for (int32_t i = 0; i < s.n_recomputed; i++) {
      bool part = false;
      for (int32_t k = 0; k < merges_seen[m].n; k++) part |= merges_seen[m].parts[k] == s.recomputed[i].task;
      for (int32_t k = i + 1; k < s.n_recomputed; k++) CHECK(s.recomputed[i].task != s.recomputed[k].task);
      char want[96];
      snprintf(want, sizeof want, "merged into map %lld attempt %d", (long long)dropped_merged_map,
               dropped_merged_attempt);
      CHECK_MSG(part && s.recomputed[i].stage_id == 1 && strstr(s.recomputed[i].reason, want),
                "recomputed: stage %u task %d: %s", s.recomputed[i].stage_id,
                s.recomputed[i].task, s.recomputed[i].reason);
    }
  }
  CHECK(s.merges >= 2); /* the lost one, and the re-run parts' merges */
  fsh_sched_job_status_reset(&s);
  check_all_alive(&c); /* no worker was declared dead */
  stop_cluster(&c);
}
static void lost_merged_output_recomputes_its_parts(void) { lost_merged_output(false); }
static void lost_merged_output_incremental(void) { lost_merged_output(true); }

/* The merges' test hook (worker_merge.c): counts the merges that started,
 * then holds the merge until its task is cancelled (at most 20 s); counts
 * those cancelled. */
static atomic_int merges_started, merges_cancelled;
static void hold_merge(void *ctx, const fsh_merge_task *t) {
  (void)ctx;
  (void)t;
  atomic_fetch_add(&merges_started, 1);
  const atomic_bool *cancel = fsh_worker_task_cancel_flag();
  for (int i = 0; cancel && i < 4000 && !atomic_load(cancel); i++) sleep_ms(5);
  if (cancel && atomic_load(cancel)) atomic_fetch_add(&merges_cancelled, 1);
}

/* A job ends (its last map fails, max_attempts 1) while merges run (held
 * by the hook once their parts are open) -- the failure is reported once
 * a merge runs and every other map's end was (nothing but merges runs
 * then: a map ending after the job's release is the store's business --
 * it drops that output, store.c -- not the merge's): the driver cancels them on
 * their workers, they end ECANCELED without output, the job is failed
 * naming the map, and the shuffle's release leaves nothing on the workers
 * -- neither parts nor merged outputs. */
static void job_end_cancels_running_merges(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  atomic_store(&merges_started, 0);
  atomic_store(&merges_cancelled, 0);
  fsh_merge_test_hooks h = {.parts_open = hold_merge};
  fsh_merge_set_test_hooks(&h);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 12;
  j.rows = 12 * 5000;
  j.merge = FSH_SCHED_MERGE_ON;
  j.max_attempts = 1;
  atomic_store(&fail_map_hold, true);
  atomic_store(&fail_map, 11);
  uint64_t id = submit(&c, &j);
  bool ready = false;
  for (int t = 0; t < 4000 && !ready; t++) {
    int acked = 0;
    for (int i = 0; i < N_WORKERS; i++) acked += atomic_load(&c.hook[i].maps_acked);
    ready = atomic_load(&merges_started) >= 1 && acked == j.maps - 1;
    if (!ready) sleep_ms(5);
  }
  CHECK_MSG(ready, "no merge started, or the other maps did not end");
  atomic_store(&fail_map_hold, false);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 30000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_FAILED);
  CHECK_MSG(s.error && strstr(s.error, "failed by the test"), "%s", s.error ? s.error : "?");
  CHECK_EQ_INT(s.merges, 0);
  fsh_sched_job_status_reset(&s);
  CHECK_EQ_INT(atomic_load(&fail_map), -1);
  /* every merge that started is cancelled and ends so on its worker */
  int started = 0, cancelled = 0, ended = 0;
  for (int t = 0; t < 2000; t++) {
    started = atomic_load(&merges_started);
    cancelled = atomic_load(&merges_cancelled);
    ended = 0;
    for (int i = 0; i < N_WORKERS; i++) ended += atomic_load(&c.hook[i].cancelled);
    if (started >= 1 && cancelled == started && ended >= started) break;
    sleep_ms(5);
  }
  CHECK_MSG(started >= 1 && cancelled == started && ended >= started,
            "%d merges started, %d cancelled, %d tasks ended ECANCELED", started, cancelled,
            ended);
  /* the released shuffle: no part nor merged output left on any worker */
  int64_t left = -1;
  for (int t = 0; t < 2000 && left != 0; t++) {
    left = 0;
    for (int i = 0; i < N_WORKERS; i++) {
      fsh_shuffle_store_stats st;
      fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(c.w[i]), &st);
      left += st.map_outputs;
    }
    if (left) sleep_ms(5);
  }
  CHECK_EQ_INT(left, 0);
  for (int i = 0; left && i < N_WORKERS; i++) { /* what was left, for the log */
    fsh_store_item *items = NULL;
    int64_t n = 0;
    if (fsh_store_list(fsh_shuffle_worker_store(c.w[i]), &items, &n, &err) != 0) continue;
    for (int64_t k = 0; k < n; k++)
      fprintf(stderr, "worker %d holds shuffle %llu map %lld attempt %d\n", i,
              (unsigned long long)items[k].meta.shuffle_id, (long long)items[k].meta.map_id,
              items[k].meta.attempt);
    fsh_store_items_free(items, n);
  }
  fsh_merge_set_test_hooks(NULL);
  stop_cluster(&c);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"merged_job_completes", merged_job_completes},
      {"merged_incremental_job_completes", merged_incremental_job_completes},
      {"failed_merge_publishes_its_parts", failed_merge_publishes_its_parts},
      {"lost_merged_output_recomputes_its_parts", lost_merged_output_recomputes_its_parts},
      {"lost_merged_output_incremental", lost_merged_output_incremental},
      {"job_end_cancels_running_merges", job_end_cancels_running_merges},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof *cases), argc, argv);
}
