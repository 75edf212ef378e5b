/* test_merge_jobs.c -- the driver's pre-shuffle merge (sched.h,
 * src/sched/job_merge.c) in one process (jobs_fixture.h): with the merge
 * forced on, each worker merges the map outputs it holds and the merged
 * outputs are published in their place; the job's partitions equal the
 * independent reference, incremental or not; a merge that fails (a part
 * gone from its worker's store) publishes its parts unmerged and the job
 * still ends with the reference's result. */
#include "jobs_fixture.h"

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

/* A merge fails (one of its parts is gone from its worker's store): its
 * parts are published unmerged, the missing one fails the reduces' fetch,
 * its worker's maps are re-run, and the result is still the reference's. */
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
  CHECK(s.n_recomputed >= 1);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"merged_job_completes", merged_job_completes},
      {"merged_incremental_job_completes", merged_incremental_job_completes},
      {"failed_merge_publishes_its_parts", failed_merge_publishes_its_parts},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof *cases), argc, argv);
}
