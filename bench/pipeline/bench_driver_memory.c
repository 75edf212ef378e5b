/* bench_driver_memory.c -- what a job costs the driver: an in-process
 * driver (no worker joins it, so nothing runs) is given a shuffle job of
 * M maps x R reduces (default 10,000 x 10,000, then optionally a second
 * shuffle) and the heap it holds for the job is measured (glibc mallinfo2:
 * in-use bytes before and after the submit, the plan's own buffer freed),
 * with the time to take the plan in. This is the job at submit: its
 * shuffles' metadata (shuffle_meta) is still empty -- bench_metadata
 * measures it filled (it grows by the exactly kept large blocks and a
 * column per location); this measures the job's
 * own bookkeeping: decoded map bodies, per-task attempt records, the
 * per-partition verification sums. Baseline in the same run: the bytes a
 * naive per-block record (rows, bytes, checksum, row checksum: 32 bytes per
 * block) would take. Ends with one `result:` line.
 *
 *   build/bench_driver_memory [MAPS] [REDUCES] [THEN_REDUCES] */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include <flightshuffle/sched.h>

#include "bench_util.h"

static int64_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return (int64_t)(mi.uordblks + mi.hblkhd);
}

int main(int argc, char **argv) {
  int32_t maps = argc > 1 ? atoi(argv[1]) : 10000;
  int32_t reduces = argc > 2 ? atoi(argv[2]) : 10000;
  int32_t then = argc > 3 ? atoi(argv[3]) : 0;
  fsh_error err;
  fsh_sched_driver_options o = {.listen = "127.0.0.1:0", .heartbeat_timeout_ms = 60000};
  fsh_sched_driver *d = NULL;
  if (fsh_sched_driver_start(&o, &d, &err) != 0) {
    fprintf(stderr, "bench_driver_memory: %s\n", err.message);
    return 1;
  }
  fsh_sched_shuffle_job j = {.name = "memory", .maps = maps, .reduces = reduces,
                             .rows = (int64_t)maps * 1000, .batch_rows = 1000, .seed = 1,
                             .backend = FSH_TASK_BACKEND_FLIGHT, .then_reduces = then};
  fsh_buffer *plan = NULL;
  if (fsh_sched_shuffle_job_plan(&j, &plan, &err) != 0) {
    fprintf(stderr, "bench_driver_memory: %s\n", err.message);
    fsh_sched_driver_stop(d, 0);
    return 1;
  }
  int64_t plan_bytes = plan->size;
  int64_t before = heap_in_use();
  double t0 = bench_now();
  uint64_t id = 0;
  int rc = fsh_sched_driver_submit(d, plan->data, plan->size, &id, &err);
  double secs = bench_now() - t0;
  int64_t after = heap_in_use();
  fsh_buffer_unref(plan);
  if (rc != 0) {
    fprintf(stderr, "bench_driver_memory: %s\n", err.message);
    fsh_sched_driver_stop(d, 0);
    return 1;
  }
  fsh_sched_job_status s;
  bool ok = fsh_sched_driver_job_status(d, id, false, &s, &err) == 0 &&
            s.state == FSH_SCHED_JOB_RUNNING && s.n_stages == (then ? 3 : 2) &&
            s.stages[0].tasks_total == maps && s.stages[1].tasks_total == reduces;
  if (ok) fsh_sched_job_status_reset(&s);
  int64_t job = after - before;
  double blocks = (double)maps * reduces + (double)reduces * then;
  double naive = 32.0 * blocks;
  printf("driver memory for a job of %d maps x %d reduces%s (%.0f blocks): %.1f MiB "
         "(%.2f bytes per block, %.0f bytes per map task); plan %.1f MiB taken in %.3f s; "
         "a naive 32-byte per-block record: %.1f MiB (%.1fx)\n",
         maps, reduces, then ? " then again" : "", blocks, (double)job / (1 << 20),
         (double)job / blocks, (double)job / maps, (double)plan_bytes / (1 << 20), secs,
         naive / (1 << 20), naive / (double)(job > 0 ? job : 1));
  printf("result: name=bench_driver_memory verified=%s maps=%d reduces=%d then_reduces=%d "
         "job_bytes=%lld bytes_per_block=%.3f naive_bytes=%.0f vs_naive=%.3f submit_s=%.3f\n",
         ok ? "yes" : "no", maps, reduces, then, (long long)job, (double)job / blocks, naive,
         (double)job / naive, secs);
  fsh_sched_driver_stop(d, 0);
  return ok ? 0 : 1;
}
