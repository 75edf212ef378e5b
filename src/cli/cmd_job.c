/* cmd_job.c -- `flightshuffle job`: jobs on a running driver (sched.h).
 *
 *   flightshuffle job shuffle --driver URI --maps M --reduces R --rows N
 *       [--batch-rows B] [--seed S] [--compression none|lz4|zstd]
 *       [--slots T] [--max-attempts A] [--progress-ms P] [--timeout-s S]
 *       [--auth-token T] [--incremental on|off]
 *       [--then-reduces R2 [--then-key key|value|name]]
 *       [--reduce-task-bytes B|auto] [--maps-per-task G|auto]
 *     submits the synthetic shuffle as a job (DoAction "submit"), prints
 *     "job ID submitted", then every P ms (default 50) while it runs one
 *     line "progress: stage 1 d/t stage 2 d/t" (DoAction "job-status"), and
 *     at the end the summary (stages, bytes, every retried / recomputed /
 *     ignored task with its reason), one line per partition
 *     "partition P rows N checksum X" (the reduce side's), and
 *     "result: state=... verified=yes|no recomputed=N retried=N ignored=N".
 *   flightshuffle job status --driver URI --job ID [--auth-token T]
 *     prints one job's progress or summary.
 * Exit status: 0 succeeded and verified, 1 otherwise, 2 bad arguments. */
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/sched.h>

static int job_usage(void) {
  fprintf(stderr,
          "usage: flightshuffle job shuffle --driver URI --maps M --reduces R --rows N\n"
          "           [--batch-rows B] [--seed S] [--compression none|lz4|zstd] [--slots T]\n"
          "           [--max-attempts A] [--progress-ms P] [--timeout-s S] [--auth-token T]\n"
          "           [--incremental on|off] [--then-reduces R2 [--then-key key|value|name]]\n"
          "  --then-reduces: a two-shuffle job (shuffle, then again on --then-key, default\n"
          "  name, into R2 partitions, then verify)\n"
          "           [--reduce-task-bytes B|auto]: coalesced reduces, a reduce task per run of\n"
          "  partitions of about B bytes (default 0: a task per partition; sched.h)\n"
          "           [--maps-per-task G|auto]: coalesced maps, up to G consecutive maps\n"
          "  run as one task (default 1: a task per map; sched.h)\n"
          "       flightshuffle job status --driver URI --job ID [--auth-token T]\n");
  return 2;
}

static bool parse_ll(const char *s, long long lo, long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static void sleep_ms(long long ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static void print_progress(const fsh_sched_job_status *s) {
  printf("progress:"); /* "stage 1 d/t stage 2 d/t ..." */
  for (int32_t i = 0; i < s->n_stages; i++)
    printf(" stage %u %d/%d", s->stages[i].stage_id, s->stages[i].tasks_done,
           s->stages[i].tasks_total);
  printf("\n");
  fflush(stdout);
}

int cmd_job(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "shuffle") != 0 && strcmp(argv[1], "status") != 0))
    return job_usage();
  bool is_status = strcmp(argv[1], "status") == 0;
  const char *driver = NULL, *token = NULL;
  fsh_sched_shuffle_job j = {.name = "job shuffle", .batch_rows = 65536, .seed = 42,
                             .backend = FSH_TASK_BACKEND_FLIGHT, .then_key = 2};
  long long progress_ms = 50, timeout_s = 600, job_id = 0, v = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      job_usage();
      return 0;
    }
    if (i + 1 >= argc) {
      cli_fail(2, "job: %s needs a value", a);
      return job_usage();
    }
    const char *x = argv[++i];
    fsh_error err;
    if (strcmp(a, "--driver") == 0) driver = x;
    else if (strcmp(a, "--auth-token") == 0) token = x;
    else if (strcmp(a, "--job") == 0 && parse_ll(x, 1, INT64_MAX, &v)) job_id = v;
    else if (strcmp(a, "--maps") == 0 && parse_ll(x, 1, 1 << 22, &v)) j.maps = (int32_t)v;
    else if (strcmp(a, "--reduces") == 0 && parse_ll(x, 1, 1 << 22, &v)) j.reduces = (int32_t)v;
    else if (strcmp(a, "--rows") == 0 && parse_ll(x, 1, INT64_MAX / 4, &v)) j.rows = v;
    else if (strcmp(a, "--batch-rows") == 0 && parse_ll(x, 1, 1 << 24, &v))
      j.batch_rows = (int32_t)v;
    else if (strcmp(a, "--seed") == 0 && parse_ll(x, 0, INT64_MAX, &v)) j.seed = (uint64_t)v;
    else if (strcmp(a, "--slots") == 0 && parse_ll(x, 1, 1024, &v)) j.slots_per_worker = (int)v;
    else if (strcmp(a, "--max-attempts") == 0 && parse_ll(x, 1, 100, &v))
      j.max_attempts = (int)v;
    else if (strcmp(a, "--progress-ms") == 0 && parse_ll(x, 1, 60000, &v)) progress_ms = v;
    else if (strcmp(a, "--timeout-s") == 0 && parse_ll(x, 1, 86400, &v)) timeout_s = v;
    else if (strcmp(a, "--then-reduces") == 0 && parse_ll(x, 1, 1 << 22, &v))
      j.then_reduces = (int32_t)v;
    else if (strcmp(a, "--then-key") == 0 && (!strcmp(x, "key") || !strcmp(x, "value") ||
                                              !strcmp(x, "name")))
      j.then_key = !strcmp(x, "key") ? 0 : !strcmp(x, "value") ? 1 : 2;
    else if (strcmp(a, "--reduce-task-bytes") == 0 && !strcmp(x, "auto"))
      j.reduce_task_bytes = -1;
    else if (strcmp(a, "--reduce-task-bytes") == 0 && cli_parse_bytes(x, &j.reduce_task_bytes) &&
             j.reduce_task_bytes >= 0) {
      /* parsed */
    }
    else if (strcmp(a, "--maps-per-task") == 0 && !strcmp(x, "auto"))
      j.maps_per_task = -1;
    else if (strcmp(a, "--maps-per-task") == 0 && parse_ll(x, 1, 1 << 22, &v))
      j.maps_per_task = (int32_t)v;
    else if (strcmp(a, "--incremental") == 0 && (!strcmp(x, "on") || !strcmp(x, "off")))
      j.incremental = strcmp(x, "on") == 0;
    else if (strcmp(a, "--compression") == 0) {
      if (fsh_compression_parse(x, &j.compression, &err) != 0)
        return cli_fail(2, "job: --compression: %s", err.message);
    } else {
      cli_fail(2, "job: bad option or value: %s %s", a, x);
      return job_usage();
    }
  }
  if (!driver) return cli_fail(2, "job: --driver URI is required");
  fsh_error err;
  fsh_sched_job_status s;
  if (is_status) {
    if (!job_id) return cli_fail(2, "job status: --job ID is required");
    if (fsh_sched_get_job_status(driver, token, (uint64_t)job_id, false, &s, &err) != 0)
      return cli_fail(1, "job status: %s", err.message);
    fsh_sched_job_status_print(&s, stdout);
    int rc = s.state == FSH_SCHED_JOB_FAILED ? 1 : 0;
    fsh_sched_job_status_reset(&s);
    return rc;
  }
  if (!j.maps || !j.reduces || !j.rows)
    return cli_fail(2, "job shuffle: --maps, --reduces and --rows are required");
  if (j.batch_rows > j.rows) j.batch_rows = (int32_t)j.rows;
  fsh_buffer *plan = NULL;
  uint64_t id = 0;
  if (fsh_sched_shuffle_job_plan(&j, &plan, &err) != 0 ||
      fsh_sched_submit(driver, token, plan->data, plan->size, &id, &err) != 0) {
    fsh_buffer_unref(plan);
    return cli_fail(1, "job shuffle: %s", err.message);
  }
  fsh_buffer_unref(plan);
  printf("job %" PRIu64 " submitted: %d maps x %d reduces, %lld rows\n", id, j.maps, j.reduces,
         (long long)j.rows);
  fflush(stdout);
  long long waited = 0;
  for (;;) {
    if (fsh_sched_get_job_status(driver, token, id, false, &s, &err) != 0)
      return cli_fail(1, "job shuffle: %s", err.message);
    bool running = s.state == FSH_SCHED_JOB_RUNNING;
    if (running) print_progress(&s);
    fsh_sched_job_status_reset(&s);
    if (!running) break;
    if (waited > timeout_s * 1000)
      return cli_fail(1, "job shuffle: job %" PRIu64 " still running after %lld s", id,
                      timeout_s);
    sleep_ms(progress_ms);
    waited += progress_ms;
  }
  if (fsh_sched_get_job_status(driver, token, id, true, &s, &err) != 0)
    return cli_fail(1, "job shuffle: %s", err.message);
  fsh_sched_job_status_print(&s, stdout);
  for (int32_t p = 0; p < s.n_partitions; p++)
    printf("partition %d rows %" PRId64 " checksum %016" PRIx64 "\n", p,
           s.partitions[p].reduce_rows, s.partitions[p].reduce_checksum);
  bool ok = s.state == FSH_SCHED_JOB_SUCCEEDED && s.verified;
  printf("result: state=%s verified=%s recomputed=%d retried=%d ignored=%d seconds=%.3f "
         "first_map_output_s=%.3f first_reduce_fetch_s=%.3f last_map_output_s=%.3f\n",
         fsh_sched_job_state_name(s.state), s.verified ? "yes" : "no", s.n_recomputed,
         s.n_retried, s.n_ignored, s.seconds, s.first_map_output_s, s.first_reduce_start_s,
         s.last_map_output_s);
  fflush(stdout);
  fsh_sched_job_status_reset(&s);
  return ok ? 0 : 1;
}
