/* test_lost_fallback.c -- lost inputs reported through the task-wait
 * fallback (jobs_fixture.h): when a task's end cannot be pushed to the
 * driver ("task-done" fails: here every worker's hook says so), the
 * driver's task-wait poll gets it -- a failed task that reported map
 * outputs lost answers status 2 with them (shuffle.h), and the driver acts
 * on them as on TaskDone.lost: exactly the lost map is recomputed, no
 * worker is lost, the job verifies. Its own test: every end waits for a
 * poll (2 s), so it takes ~10 s. Also the failure body's codec. */
#include "jobs_fixture.h"

/* Drops map `map`'s output from whichever store holds it as soon as it
 * appears (the driver learns of the map's end only at its first poll,
 * 2 s later: long before any reduce reads it). True when dropped. */
static bool drop_when_written(cluster *c, int64_t map, int64_t timeout_ms) {
  fsh_error err;
  for (int64_t t = 0; t < timeout_ms / 2; t++) {
    for (int i = 0; i < N_WORKERS; i++) {
      fsh_store_item *items = NULL;
      int64_t n = 0;
      if (fsh_store_list(fsh_shuffle_worker_store(c->w[i]), &items, &n, &err) != 0) continue;
      bool dropped = false;
      for (int64_t k = 0; k < n && !dropped; k++)
        if (items[k].meta.map_id == map)
          dropped = fsh_store_drop(fsh_shuffle_worker_store(c->w[i]), items[k].meta.shuffle_id,
                                   map, items[k].meta.attempt);
      fsh_store_items_free(items, n);
      if (dropped) return true;
    }
    sleep_ms(2);
  }
  return false;
}

static void output_lost_via_task_wait(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 60000, true);
  for (int i = 0; i < N_WORKERS; i++) atomic_store(&c.hook[i].gone, true);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 3;
  j.reduces = 3;
  j.rows = 3 * 5000;
  const int64_t map = 1;
  uint64_t id = submit(&c, &j);
  CHECK(drop_when_written(&c, map, 10000));
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 40000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  check_only_recomputed(&s, 1, map, "on live worker", NULL);
  /* the reduces that read it were retried, not failed (no failure counted) */
  int named = 0;
  for (int32_t i = 0; i < s.n_retried; i++) {
    const char *r = s.retried[i].reason;
    CHECK_MSG(s.retried[i].stage_id == 2 && !strstr(r, "failed ("), "retried: stage %u task %d: "
              "%s", s.retried[i].stage_id, s.retried[i].task, r);
    named += strstr(r, "lost map outputs [map/attempt 1/0]") != NULL;
  }
  CHECK(named >= 1);
  fsh_sched_job_status_reset(&s);
  check_all_alive(&c); /* no worker was declared dead */
  stop_cluster(&c);
}

/* The task-wait failure body, built by hand from its documented format
 * (shuffle.h): decoded as written (an empty uri: the worker asked); every
 * truncation, a wrong magic and a trailing byte are EINVAL. */
static void failure_body_codec(void) {
  uint8_t b[256];
  memset(b, 0, sizeof b);
  memcpy(b, "FSTF", 4);
  b[4] = 1;
  b[8] = EIO;           /* i32 error code */
  b[12] = 4;            /* u32 message length */
  memcpy(b + 16, "oops", 4);
  uint8_t *p = b + 20;
  p[0] = 2;             /* u32 n */
  p += 4;
  p[0] = 7;             /* shuffle 7 */
  p[8] = 3;             /* map 3 */
  p[16] = 1;            /* attempt 1 */
  p[20] = 1;            /* unreachable */
  p[24] = 5;            /* uri length */
  memcpy(p + 28, "grpc:", 5);
  p += 33;
  p[0] = 9;             /* shuffle 9, map 0, attempt 0, answered, uri "" */
  p += 28;
  int64_t size = p - b;
  int rc = 0;
  fsh_error msg = {{0}}, err = {{0}};
  fsh_lost_output *lost = NULL;
  int64_t n = 0;
  CHECK_OK(fsh_task_failure_decode(b, size, "grpc://self", &rc, &msg, &lost, &n, &err));
  CHECK_EQ_INT(rc, EIO);
  CHECK(strcmp(msg.message, "oops") == 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK(lost[0].shuffle_id == 7 && lost[0].map_id == 3 && lost[0].attempt == 1 &&
          lost[0].unreachable && strcmp(lost[0].uri, "grpc:") == 0);
    CHECK(lost[1].shuffle_id == 9 && lost[1].map_id == 0 && lost[1].attempt == 0 &&
          !lost[1].unreachable && strcmp(lost[1].uri, "grpc://self") == 0);
  }
  fsh_lost_outputs_free(lost, n);
  for (int64_t cut = 0; cut < size; cut++) {
    CHECK_EQ_INT(fsh_task_failure_decode(b, cut, NULL, &rc, &msg, &lost, &n, &err), EINVAL);
    CHECK(lost == NULL && n == 0);
  }
  CHECK_EQ_INT(fsh_task_failure_decode(b, size + 1, NULL, &rc, &msg, &lost, &n, &err), EINVAL);
  b[0] = 'X';
  CHECK_EQ_INT(fsh_task_failure_decode(b, size, NULL, &rc, &msg, &lost, &n, &err), EINVAL);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"failure_body_codec", failure_body_codec},
      {"output_lost_via_task_wait", output_lost_via_task_wait},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof *cases), argc, argv);
}
