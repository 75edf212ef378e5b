/* test_jobs.c -- jobs in the driver (sched.h "jobs"), in one process: an
 * in-process driver and in-process workers (fsh_shuffle_worker_start with
 * the task-done notifier, joined by the heartbeat API). A shuffle job
 * completes and every partition's rows and row checksum equal an
 * independent reference (the same map tasks run in-process through the
 * memory backend, no driver); a worker declared dead after its map outputs
 * exist makes exactly those maps recompute (the summary names them and the
 * worker) and the result is unchanged; a task that always fails ends the
 * job after max_attempts with a message naming the task; answers of
 * superseded attempts are ignored and listed; bad plans, bodies and
 * envelopes are refused with messages saying what is wrong; a worker that
 * never answers (a listening socket nobody serves) stalls neither the
 * scheduler nor the launches to the others; only the newest keep_jobs
 * finished jobs stay in memory; an attempt superseded on a live worker is
 * cancelled there (it ends with ECANCELED, its failure ignored). */
#include "jobs_fixture.h"

static void job_completes(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  uint64_t id = submit(&c, &JOB);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  /* the remote status (DoAction "job-status") */
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_get_job_status(fsh_sched_driver_uri(c.d), NULL, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_against_reference(&s);
  CHECK_EQ_INT(s.n_stages, 2);
  if (s.n_stages == 2) {
    CHECK_EQ_INT(s.stages[0].tasks_done, JOB.maps);
    CHECK_EQ_INT(s.stages[1].tasks_done, JOB.reduces);
    CHECK(s.stages[0].bytes > 0 && s.stages[1].rows == JOB.rows);
  }
  CHECK_EQ_INT(s.n_recomputed, 0);
  CHECK_EQ_INT(s.n_retried, 0);
  CHECK(s.first_map_output_s >= 0 && s.first_reduce_start_s >= s.first_map_output_s);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* A two-shuffle job (map -> reduce-then-map on "name" -> reduce-verify)
 * against a naive reference: the whole table generated here, partitioned on
 * the name column, per-partition rows and row checksums. */
static void two_shuffle_job(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.then_reduces = 4;
  j.then_key = 2;
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  CHECK_EQ_INT(s.n_stages, 3);
  CHECK(s.verified);
  /* the reference */
  int64_t rows[4] = {0};
  uint64_t sums[4] = {0};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_synthetic_options so = {.seed = j.seed, .with_nulls = true};
  int64_t batches = (j.rows + j.batch_rows - 1) / j.batch_rows;
  static const int32_t key = 2;
  for (int64_t b = 0; schema && b < batches; b++) {
    fsh_batch *x = NULL;
    CHECK_OK(fsh_synthetic_batch(schema, &so, b, j.batch_rows, &x, &err));
    if (!x) break;
    uint64_t hashes[1000];
    int32_t parts[1000];
    CHECK_OK(fsh_hash_columns(x, &key, 1, 0, hashes, &err));
    CHECK_OK(fsh_partition_hash(hashes, x->length, 4, parts, &err));
    fsh_task_row_checksums(x, parts, sums);
    for (int64_t i = 0; i < x->length; i++) rows[parts[i]]++;
    fsh_batch_unref(x);
  }
  fsh_schema_unref(schema);
  CHECK_EQ_INT(s.n_partitions, 4);
  for (int32_t p = 0; p < s.n_partitions && p < 4; p++) {
    CHECK_EQ_INT(s.partitions[p].reduce_rows, rows[p]);
    CHECK(s.partitions[p].reduce_checksum == sums[p]);
  }
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* Incremental: reduces start with the first map output and ask the driver
 * for the others as they appear; same result as the reference. */
static void incremental_job_completes(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.incremental = true;
  j.maps = 12;
  j.rows = 12 * 20000;
  j.batch_rows = 5000;
  j.slots_per_worker = 1;
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  /* the first fetch came before the last map output */
  CHECK(s.first_reduce_start_s >= s.first_map_output_s);
  CHECK_MSG(s.first_reduce_start_s < s.last_map_output_s, "first fetch %.3f s, last map %.3f s",
            s.first_reduce_start_s, s.last_map_output_s);
  fsh_sched_job_status_reset(&s);
  /* a worker's "task" with an incremental reduce is refused without a
   * scheduler hook; the bare action refuses it too */
  fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .memory_limit = 1 << 20};
  fsh_shuffle_worker *w = NULL;
  CHECK_OK(fsh_shuffle_worker_start(&o, &w, &err));
  fsh_reduce_task rt = {.shuffle_id = 1, .partition = 0, .n_partitions = 2,
                        .backend = FSH_TASK_BACKEND_FLIGHT, .incremental = true};
  fsh_buffer *body = NULL;
  CHECK_OK(fsh_reduce_task_encode(&rt, &body, &err));
  fsh_flight_client_options co = {.uri = w ? fsh_shuffle_worker_uri(w) : "grpc://x:1",
                                  .timeout_ms = 5000};
  fsh_flight_client *wc = NULL;
  CHECK_OK(fsh_flight_client_open(&co, &wc, &err));
  if (body && wc) {
    fsh_flight_action a = {.type = (char *)"reduce-verify", .body = {body->data, body->size}};
    fsh_flight_result_list res = {0};
    CHECK_EQ_INT(fsh_flight_do_action(wc, &a, &res, &err), EINVAL);
    CHECK(strstr(err.message, "needs a scheduler") != NULL);
    uint8_t env[256] = "FSTE\x01\0\0\0";
    env[8] = 13;
    memcpy(env + 16, "reduce-verify", 13);
    memcpy(env + 29, body->data, (size_t)body->size);
    a = (fsh_flight_action){.type = (char *)"task", .body = {env, 29 + body->size}};
    CHECK_EQ_INT(fsh_flight_do_action(wc, &a, &res, &err), EINVAL);
    CHECK(strstr(err.message, "no scheduler") != NULL);
    fsh_flight_result_list_reset(&res);
  }
  fsh_flight_client_close(wc);
  fsh_buffer_unref(body);
  fsh_shuffle_worker_stop(w, 1000);
  stop_cluster(&c);
}

/* A worker declared dead once the whole map stage is done: exactly the maps
 * it held are recomputed, the result is unchanged. */
static void lost_worker_recomputes_its_maps(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, false);
  /* reduces cannot start while a map is missing: hold them back by
   * running the map stage on a cluster, then declaring a holder dead
   * before the reduces are placed is racy -- so instead the job is
   * submitted with one slot and the worker is declared dead as soon as it
   * holds an output and the maps are all done or running. */
  fsh_sched_shuffle_job j = JOB;
  j.slots_per_worker = 1;
  j.maps = 24;
  j.rows = 24 * 20000;
  j.batch_rows = 5000;
  start_workers(&c);
  uint64_t id = submit(&c, &j);
  int victim_outputs = -1;
  const char *victim = declare_busiest_dead(&c, id, &victim_outputs);
  CHECK(victim != NULL);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  /* every recomputed task is a map whose output was on the victim; as
   * many as it held when declared dead (a map finishing on it right then
   * may be counted as retried instead) */
  for (int32_t i = 0; i < s.n_recomputed; i++) {
    CHECK_EQ_INT(s.recomputed[i].stage_id, 1);
    CHECK(strstr(s.recomputed[i].reason, victim) != NULL);
  }
  CHECK(s.n_recomputed >= 1);
  CHECK_MSG(s.n_recomputed <= victim_outputs, "%d recomputed, the victim held %d",
            s.n_recomputed, victim_outputs);
  for (int32_t i = 0; i < s.n_recomputed; i++)
    for (int32_t k = i + 1; k < s.n_recomputed; k++)
      CHECK(s.recomputed[i].task != s.recomputed[k].task);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* One map output is dropped from its (live) worker's store just before its
 * end is reported: the reduces reading it -- on that very worker (a local
 * read) or elsewhere (over Flight) -- report exactly that output lost by a
 * worker that answered, in TaskDone.lost (recorded by the hook: the holder,
 * the shuffle, the map and attempt, not unreachable); the driver
 * recomputes exactly that map, retries the reduces (those that read it and
 * had not failed yet at once), leaves every worker alive, and the result is
 * the reference's. With scramble, every failed task's error text is
 * replaced: the driver acts on TaskDone.lost alone (text parsing would
 * count failures and end the job, or lose the worker). Run for several
 * maps (the reduces land on the holder or not): *local / *remote count the
 * runs where a local / remote reader reported it; and once incremental. */
static void live_worker_output_lost_once(int32_t map, bool incremental, bool scramble,
                                         int *local, int *remote) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 6;
  j.reduces = 6;
  j.rows = 6 * 5000;
  j.incremental = incremental;
  atomic_store(&n_seen_losses, 0);
  atomic_store(&scramble_errors, scramble);
  atomic_store(&drop_map, map);
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 30000, &err));
  atomic_store(&scramble_errors, false);
  CHECK_EQ_INT(atomic_load(&drop_map), -1);
  atomic_store(&drop_map, -1);
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  /* exactly that map recomputed, for that reason */
  check_only_recomputed(&s, 1, map, "on live worker", "reported missing");
  /* the structured reports: exactly that output, at the worker that held it */
  int n = atomic_load(&n_seen_losses);
  CHECK(n >= 1 && n <= MAX_SEEN_LOSSES);
  const char *holder = n >= 1 ? seen_losses[0].uri : "";
  uint64_t shuffle = n >= 1 ? seen_losses[0].shuffle_id : 0; /* the driver's (job, stage) id */
  CHECK(shuffle != 0);
  for (int i = 0; i < n && i < MAX_SEEN_LOSSES; i++) {
    const seen_loss *x = &seen_losses[i];
    CHECK_MSG(x->map_id == map && x->attempt == 0 && x->shuffle_id == shuffle && !x->unreachable &&
                  !x->merge && strcmp(x->uri, holder) == 0,
              "reported lost by %s: %s shuffle %llu map %lld attempt %d%s", x->reporter, x->uri,
              (unsigned long long)x->shuffle_id, (long long)x->map_id, x->attempt,
              x->unreachable ? " (unreachable)" : "");
    if (strcmp(x->reporter, x->uri) == 0) ++*local;
    else ++*remote;
  }
  /* the retried reduces: a reader that reported it (its text, or the
   * scrambled one), or one retried at once because it reads it */
  char want[64], at_once[160];
  snprintf(want, sizeof want, "lost map outputs [map/attempt %d/0] (", map);
  snprintf(at_once, sizeof at_once, "(stage 1) map %d attempt 0 on live worker %s", map, holder);
  int named = 0;
  for (int32_t i = 0; i < s.n_retried; i++) {
    const char *r = s.retried[i].reason;
    bool reported = strstr(r, scramble ? "scrambled by the test" : want) != NULL;
    CHECK_MSG(s.retried[i].stage_id == 2 && (reported || strstr(r, at_once)),
              "retried: stage %u task %d: %s", s.retried[i].stage_id, s.retried[i].task, r);
    named += reported;
  }
  CHECK(named >= 1);
  fsh_sched_job_status_reset(&s);
  check_all_alive(&c); /* no worker was declared dead */
  stop_cluster(&c);
}

static void live_worker_output_lost(void) {
  int local = 0, remote = 0;
  for (int32_t m = 0; m < 6 && !(local && remote); m++)
    live_worker_output_lost_once(m, false, true, &local, &remote);
  int any = 0;
  live_worker_output_lost_once(2, true, false, &any, &any); /* reduces started before the loss */
  fprintf(stderr, "  reported lost (TaskDone.lost) by a local reader %d time(s), a remote one "
          "%d\n", local, remote);
  CHECK_MSG(local >= 1 && remote >= 1, "local %d, remote %d", local, remote);
}

/* A task that always fails (an fs task on workers without --fs-dir) ends the
 * job after max_attempts attempts, naming the task and the cause. */
static void failing_task_bounded_retries(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.backend = FSH_TASK_BACKEND_FS;
  j.max_attempts = 3;
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_FAILED);
  CHECK(s.error && strstr(s.error, "failed 3 times") && strstr(s.error, "--fs-dir"));
  CHECK(s.n_retried >= 3);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* A raw DoAction on the driver; its code. */
static int raw(fsh_sched_driver *d, const char *type, const void *body, size_t n,
               fsh_error *err) {
  fsh_flight_client_options co = {.uri = fsh_sched_driver_uri(d), .timeout_ms = 5000};
  fsh_flight_client *c = NULL;
  int rc = fsh_flight_client_open(&co, &c, err);
  if (rc) return rc;
  fsh_flight_action a = {.type = (char *)type, .body = {(uint8_t *)body, (int64_t)n}};
  fsh_flight_result_list res = {0};
  rc = fsh_flight_do_action(c, &a, &res, err);
  fsh_flight_result_list_reset(&res);
  fsh_flight_client_close(c);
  return rc;
}

/* A late answer (attempt 7 of a task that is not running it) is ignored and
 * listed; the job still completes and verifies. */
static void late_answers_ignored(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, false);
  uint64_t id = submit(&c, &JOB); /* no worker yet: nothing runs */
  Flightshuffle__Sched__TaskRef ref = FLIGHTSHUFFLE__SCHED__TASK_REF__INIT;
  ref.job_id = id;
  ref.stage_id = 1;
  ref.task = 3;
  ref.attempt = 7;
  uint8_t rb[64];
  size_t rn = flightshuffle__sched__task_ref__pack(&ref, rb);
  Flightshuffle__Sched__TaskDone td = FLIGHTSHUFFLE__SCHED__TASK_DONE__INIT;
  td.ref = (ProtobufCBinaryData){rn, rb};
  td.ok = true;
  td.answer = (ProtobufCBinaryData){4, (uint8_t *)"junk"};
  uint8_t tb[256];
  size_t tn = flightshuffle__sched__task_done__pack(&td, tb);
  CHECK_OK(raw(c.d, "task-done", tb, tn, &err));
  start_workers(&c);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_against_reference(&s);
  CHECK_EQ_INT(s.n_ignored, 1);
  if (s.n_ignored == 1) {
    CHECK_EQ_INT(s.ignored[0].task, 3);
    CHECK_EQ_INT(s.ignored[0].attempt, 7);
  }
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* A "worker" that never answers: a TCP socket that listens but is never
 * accepted from (the kernel completes the handshake; no HTTP/2 ever comes
 * back, so a call to it waits out its deadline, like a SIGSTOPped worker).
 * Its URI into uri; the socket (close it) returned. */
static int black_hole(char *uri, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(fd >= 0);
  CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(fd, 64) == 0);
  CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  snprintf(uri, size, "grpc://127.0.0.1:%d", ntohs(a.sin_port));
  return fd;
}

/* A launch to a worker that does not answer stalls neither the scheduler
 * nor the launches to the other workers: while the calls to the hung one
 * wait out their 5 s deadline, the others run every other map; the failed
 * launch is retried elsewhere (listed, naming the worker), the worker is
 * suspect (nothing more goes to it) and the job completes and verifies. */
static void hung_worker_does_not_stall(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 60000, false);
  char hole[64];
  int fd = black_hole(hole, sizeof hole);
  /* registered first: the first map (least loaded, first in order) goes to it */
  Flightshuffle__Sched__Register reg = FLIGHTSHUFFLE__SCHED__REGISTER__INIT;
  reg.uri = hole;
  uint8_t rb[128];
  size_t rn = flightshuffle__sched__register__pack(&reg, rb);
  CHECK_OK(raw(c.d, "register", rb, rn, &err));
  start_workers(&c);
  for (int t = 0; t < 500; t++) { /* all registered */
    fsh_sched_worker_list l;
    CHECK_OK(fsh_sched_driver_workers(c.d, &l, &err));
    int64_t alive = fsh_sched_worker_list_alive(&l);
    fsh_sched_worker_list_reset(&l);
    if (alive == N_WORKERS + 1) break;
    sleep_ms(10);
  }
  fsh_sched_shuffle_job j = JOB;
  j.maps = 12;
  j.rows = 12 * 2000;
  uint64_t id = submit(&c, &j);
  int64_t t0 = 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  t0 = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  /* within 3.5 s (the hung calls take 5): every map not sent to the hole
   * (at most its 2 slots) is done */
  int32_t done = 0;
  for (;;) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
    done = s.n_stages ? s.stages[0].tasks_done : 0;
    fsh_sched_job_status_reset(&s);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (done >= j.maps - 2 || now - t0 > 3500) break;
    sleep_ms(20);
  }
  CHECK_MSG(done >= j.maps - 2, "%d of %d maps done after 3.5 s: the hung worker stalls the "
            "scheduler", done, j.maps);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 30000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  CHECK(s.n_retried >= 1);
  for (int32_t i = 0; i < s.n_retried; i++) {
    CHECK_EQ_INT(s.retried[i].stage_id, 1);
    CHECK(strstr(s.retried[i].reason, hole) != NULL);
  }
  CHECK_EQ_INT(s.n_recomputed, 0);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
  close(fd);
}

/* A worker that does not answer the releases of a finished job's shuffles
 * ("stats", "release") holds up no other job: job A runs on three workers
 * with the end of its reduces held back, a black hole registers (alive,
 * never given a task of A), A's reduces end, A's shuffles are released on
 * every worker -- the call to the hole waits (a 60 s call deadline) -- and
 * while that call is still pending (the hole's listener has it queued; it
 * ends only when the test closes the hole) a job B submitted now runs
 * every map that was not placed on the hole (at most its slots). Then the
 * hole closes, the calls fail at once, B's maps sent to it are retried
 * elsewhere and both jobs verify. */
static void hung_worker_release_does_not_stall(void) {
  fsh_error err;
  cluster c;
  memset(&c, 0, sizeof c);
  fsh_sched_driver_options o = {.listen = "127.0.0.1:0", .heartbeat_timeout_ms = 60000,
                                .call_timeout_ms = 60000, .log = getenv("FSH_TEST_LOG") != NULL};
  CHECK_OK(fsh_sched_driver_start(&o, &c.d, &err));
  start_workers(&c);
  for (int t = 0; t < 500; t++) {
    fsh_sched_worker_list l;
    CHECK_OK(fsh_sched_driver_workers(c.d, &l, &err));
    int64_t alive = fsh_sched_worker_list_alive(&l);
    fsh_sched_worker_list_reset(&l);
    if (alive == N_WORKERS) break;
    sleep_ms(10);
  }
  atomic_store(&hold_reduces, true);
  fsh_sched_shuffle_job ja = JOB;
  uint64_t a = submit(&c, &ja);
  /* every task of A placed: the maps done, the reduces running (held) */
  bool placed = false;
  for (int t = 0; t < 2000 && !placed; t++) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, a, false, &s, &err));
    placed = s.n_stages == 2 && s.stages[0].tasks_done == ja.maps &&
             s.stages[1].tasks_running == ja.reduces;
    fsh_sched_job_status_reset(&s);
    if (!placed) sleep_ms(10);
  }
  CHECK_MSG(placed, "job A's reduces never all ran");
  char hole[64];
  int fd = black_hole(hole, sizeof hole);
  Flightshuffle__Sched__Register reg = FLIGHTSHUFFLE__SCHED__REGISTER__INIT;
  reg.uri = hole;
  uint8_t rb[128];
  size_t rn = flightshuffle__sched__register__pack(&reg, rb);
  CHECK_OK(raw(c.d, "register", rb, rn, &err));
  atomic_store(&hold_reduces, false);
  /* A ends (wait_job would wait for its releases too) */
  int state = FSH_SCHED_JOB_RUNNING;
  for (int t = 0; t < 2000 && state == FSH_SCHED_JOB_RUNNING; t++) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, a, false, &s, &err));
    state = s.state;
    fsh_sched_job_status_reset(&s);
    if (state == FSH_SCHED_JOB_RUNNING) sleep_ms(10);
  }
  CHECK_EQ_INT(state, FSH_SCHED_JOB_SUCCEEDED);
  /* the driver's call to the hole (a release of A's: it has no task); the
   * hole sends the HTTP/2 server preface (an empty SETTINGS frame), so the
   * connection is up and the call waits for its answer till its deadline */
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  CHECK_MSG(poll(&pf, 1, 20000) == 1, "the driver never called the hole");
  int conn = accept(fd, NULL, NULL);
  CHECK(conn >= 0);
  static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
  CHECK(send(conn, settings, sizeof settings, MSG_NOSIGNAL) == (ssize_t)sizeof settings);
  fsh_sched_shuffle_job jb = JOB;
  jb.maps = 12;
  jb.rows = 12 * 2000;
  jb.seed = 12;
  uint64_t b = submit(&c, &jb);
  int32_t done = 0;
  for (int t = 0; t < 3000 && done < jb.maps - 2; t++) { /* < 30 s: the call's deadline is 60 */
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, b, false, &s, &err));
    done = s.n_stages ? s.stages[0].tasks_done : 0;
    fsh_sched_job_status_reset(&s);
    if (done < jb.maps - 2) sleep_ms(10);
  }
  CHECK_MSG(done >= jb.maps - 2, "%d of %d maps of job B done while a release to the hung "
            "worker was pending: the release stalls the scheduler", done, jb.maps);
  /* the call to the hole still pending: the driver's connection is open */
  char peek[1];
  ssize_t got = recv(conn, peek, 1, MSG_PEEK | MSG_DONTWAIT);
  CHECK_MSG(got > 0 || (got < 0 && errno == EAGAIN), "the driver's call to the hole ended");
  close(conn); /* the pending call fails, later ones are refused */
  close(fd);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, b, 30000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, a, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&ja, &s);
  fsh_sched_job_status_reset(&s);
  CHECK_OK(fsh_sched_driver_job_status(c.d, b, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&jb, &s);
  CHECK_EQ_INT(s.n_recomputed, 0);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* Finished jobs do not pile up: with keep_jobs 3, after 10 small jobs the
 * driver holds 3 (the newest: job-status still answers for them, ENOENT
 * for the older ones). */
static void finished_jobs_are_freed(void) {
  fsh_error err;
  cluster c;
  memset(&c, 0, sizeof c);
  fsh_sched_driver_options o = {.listen = "127.0.0.1:0", .heartbeat_timeout_ms = 3000,
                                .keep_jobs = 3};
  CHECK_OK(fsh_sched_driver_start(&o, &c.d, &err));
  start_workers(&c);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 2;
  j.reduces = 2;
  j.rows = 2000;
  uint64_t ids[10] = {0};
  int64_t most = 0;
  for (int i = 0; i < 10; i++) {
    ids[i] = submit(&c, &j);
    CHECK_OK(fsh_sched_driver_wait_job(c.d, ids[i], 20000, &err));
    int64_t held = fsh_sched_driver_jobs_held(c.d);
    if (held > most) most = held;
  }
  int64_t held = 0;
  for (int t = 0; t < 100; t++) { /* the scheduler frees them within a round */
    held = fsh_sched_driver_jobs_held(c.d);
    if (held <= 3) break;
    sleep_ms(10);
  }
  CHECK_EQ_INT(held, 3);
  CHECK_MSG(most <= 4, "up to %lld jobs held (keep 3)", (long long)most);
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, ids[9], true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  fsh_sched_job_status_reset(&s);
  CHECK_OK(fsh_sched_driver_job_status(c.d, ids[7], false, &s, &err));
  fsh_sched_job_status_reset(&s);
  CHECK_EQ_INT(fsh_sched_driver_job_status(c.d, ids[0], false, &s, &err), ENOENT);
  CHECK_EQ_INT(fsh_sched_driver_job_status(c.d, ids[6], false, &s, &err), ENOENT);
  stop_cluster(&c);
}

/* A superseded attempt still running on a live worker is cancelled there:
 * the worker running a long map is declared dead (it is alive); its
 * attempt ends with ECANCELED well before it would have finished, its late
 * failure is ignored, the map re-runs elsewhere and the job verifies.
 * Every worker registers before the job is submitted (one map each, at
 * once), and the maps are long (~0.6 s each in release, far more under
 * asan) against the ~50 ms from "all running" to the cancel. */
static void superseded_attempt_cancelled(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 60000, true);
  wait_alive(&c, N_WORKERS);
  fsh_sched_shuffle_job j = JOB;
  j.maps = 3;
  j.reduces = 3;
  j.rows = 3 * 1000000;
  j.compression = FSH_COMPRESSION_ZSTD; /* 2 outputs fit a worker's 64 MiB */
  j.batch_rows = 5000;
  j.slots_per_worker = 1;
  uint64_t id = submit(&c, &j);
  int victim = -1;
  for (int t = 0; t < 1000 && victim < 0; t++) { /* every map running, none done */
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
    bool all = s.n_stages == 2 && s.stages[0].tasks_running == 3 && s.stages[0].tasks_done == 0;
    fsh_sched_job_status_reset(&s);
    if (all) {
      sleep_ms(50); /* the workers have them (the task calls answered) */
      victim = 1;
      CHECK_OK(fsh_sched_driver_declare_dead(c.d, fsh_shuffle_worker_uri(c.w[victim]),
                                             "declared by the test", &err));
    } else {
      sleep_ms(5);
    }
  }
  CHECK(victim >= 0);
  int cancelled = 0;
  for (int t = 0; t < 200 && victim >= 0; t++) { /* within 2 s */
    cancelled = atomic_load(&c.hook[victim].cancelled);
    if (cancelled) break;
    sleep_ms(10);
  }
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
  int32_t maps_done = s.n_stages ? s.stages[0].tasks_done : -1;
  fsh_sched_job_status_reset(&s);
  CHECK_MSG(cancelled == 1, "the victim's attempt was not cancelled (%d; %d maps done)",
            cancelled, maps_done);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 60000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  bool ignored = false;
  for (int32_t i = 0; i < s.n_ignored; i++)
    ignored |= s.ignored[i].stage_id == 1 && strstr(s.ignored[i].reason, "failure") != NULL;
  CHECK_MSG(ignored, "the cancelled attempt's failure is not listed as ignored");
  fsh_sched_job_status_reset(&s);
  for (int i = 0; i < N_WORKERS; i++)
    if (i != victim) CHECK_EQ_INT(atomic_load(&c.hook[i].cancelled), 0);
  stop_cluster(&c);
}

/* Whether a TCP connect to the host:port of a grpc:// uri is refused. */
static bool refused(const char *uri) {
  const char *colon = strrchr(uri, ':');
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                          .sin_port = htons((uint16_t)atoi(colon ? colon + 1 : "0"))};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  bool r = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno == ECONNREFUSED;
  if (fd >= 0) close(fd);
  return r;
}

static void *stop_worker_thread(void *w) {
  fsh_shuffle_worker_stop(w, 1000);
  return NULL;
}

/* A worker process that dies while a reduce runs ON it, with a heartbeat
 * timeout of a minute: every fetch of the other reduces is over, so no
 * fetch fails to tell the driver; the only signal is that the worker's
 * address refuses the driver's task-wait poll of that reduce. The reduce
 * is retried elsewhere within seconds (listed as retried, naming the
 * worker and the refused poll), the job verifies, and ends well before
 * the heartbeat timeout could have declared the worker dead. The "death":
 * its heartbeats stop, its server stops (connections refused) and the
 * end of its reduce is never reported. */
static void dead_worker_running_reduce_noticed(void) {
  fsh_error err;
  cluster c;
  const int64_t timeout_ms = 60000;
  start_cluster(&c, timeout_ms, true);
  wait_alive(&c, N_WORKERS);
  atomic_store(&hold_reduces, true);
  uint64_t id = submit(&c, &JOB);
  /* every reduce placed and held back on its worker (done, unreported) */
  int victim = -1;
  for (int t = 0; t < 2000 && victim < 0; t++) {
    fsh_sched_job_status s;
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, false, &s, &err));
    bool placed = s.n_stages == 2 && s.stages[0].tasks_done == JOB.maps &&
                  s.stages[1].tasks_running == JOB.reduces;
    fsh_sched_job_status_reset(&s);
    int held = 0;
    for (int i = 0; i < N_WORKERS; i++) held += atomic_load(&c.hook[i].held);
    for (int i = 0; placed && held == JOB.reduces && i < N_WORKERS && victim < 0; i++)
      if (atomic_load(&c.hook[i].held) > 0) victim = i;
    if (victim < 0) sleep_ms(10);
  }
  CHECK_MSG(victim >= 0, "the reduces were never all held on their workers");
  if (victim < 0) {
    atomic_store(&hold_reduces, false);
    stop_cluster(&c);
    return;
  }
  char uri[320];
  snprintf(uri, sizeof uri, "%s", fsh_shuffle_worker_uri(c.w[victim]));
  int victim_reduces = atomic_load(&c.hook[victim].held);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  atomic_store(&c.hook[victim].gone, true);
  fsh_sched_heartbeat_stop(c.h[victim]);
  c.h[victim] = NULL;
  /* its server stops now; the stop then joins its tasks (held: they end
   * once the hold is lifted, unreported) */
  pthread_t stopper;
  CHECK(pthread_create(&stopper, NULL, stop_worker_thread, c.w[victim]) == 0);
  bool down = false;
  for (int t = 0; t < 500 && !down; t++) {
    down = refused(uri);
    if (!down) sleep_ms(10);
  }
  CHECK_MSG(down, "the victim %s still accepts connections", uri);
  atomic_store(&hold_reduces, false);
  pthread_join(stopper, NULL);
  c.w[victim] = NULL;
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 40000, &err));
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_against_reference(&s);
  /* every reduce that ran on the victim was retried for the refused poll */
  int polled = 0;
  for (int32_t i = 0; i < s.n_retried; i++)
    if (s.retried[i].stage_id == 2 && strstr(s.retried[i].reason, uri) &&
        strstr(s.retried[i].reason, "task-wait"))
      polled++;
  CHECK_MSG(polled == victim_reduces, "%d reduces retried for a refused task-wait on %s, %d ran "
            "on it", polled, uri, victim_reduces);
  /* noticed by the poll (every 2 s), not by the heartbeat timeout: a
   * quarter of it is a generous margin on a loaded box */
  CHECK_MSG(took < timeout_ms / 4000.0, "the job took %.1f s after the worker died (heartbeat "
            "timeout %.0f s)", took, timeout_ms / 1000.0);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* Bad control input: clear errors, the driver keeps serving. */
static void bad_input(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, false);
  /* a malformed plan */
  int rc = raw(c.d, "submit", "\xff\xff\xff", 3, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "malformed JobPlan") != NULL);
  /* an unknown task type */
  Flightshuffle__Sched__StagePlan st = FLIGHTSHUFFLE__SCHED__STAGE_PLAN__INIT;
  st.stage_id = 1;
  st.kind = (char *)"bogus";
  Flightshuffle__Sched__StagePlan *stages[1] = {&st};
  Flightshuffle__Sched__JobPlan jp = FLIGHTSHUFFLE__SCHED__JOB_PLAN__INIT;
  jp.n_stages = 1;
  jp.stages = stages;
  jp.backend = FSH_TASK_BACKEND_FLIGHT;
  uint8_t buf[256];
  size_t n = flightshuffle__sched__job_plan__pack(&jp, buf);
  rc = raw(c.d, "submit", buf, n, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "unknown task type 'bogus'") != NULL);
  /* a malformed map body */
  st.kind = (char *)"map-synthetic";
  ProtobufCBinaryData body = {5, (uint8_t *)"FSMT!"};
  st.n_tasks = 1;
  st.tasks = &body;
  n = flightshuffle__sched__job_plan__pack(&jp, buf);
  rc = raw(c.d, "submit", buf, n, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "stage 1 task 0") && strstr(err.message, "map-synthetic"));
  /* a reduce reading a stage that does not exist */
  Flightshuffle__Sched__StagePlan red = FLIGHTSHUFFLE__SCHED__STAGE_PLAN__INIT;
  red.stage_id = 2;
  red.kind = (char *)"reduce-verify";
  uint32_t in = 9;
  red.n_inputs = 1;
  red.inputs = &in;
  stages[0] = &red;
  n = flightshuffle__sched__job_plan__pack(&jp, buf);
  rc = raw(c.d, "submit", buf, n, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "input stage 9") != NULL);
  /* task-done and job-status with junk */
  rc = raw(c.d, "task-done", "\xff\xff", 2, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "malformed TaskDone") != NULL);
  fsh_sched_job_status s;
  rc = fsh_sched_get_job_status(fsh_sched_driver_uri(c.d), NULL, 12345, false, &s, &err);
  CHECK_EQ_INT(rc, ENOENT);
  CHECK(strstr(err.message, "no job 12345") != NULL);
  /* the worker's "task" envelope: unknown kind, malformed */
  start_workers(&c);
  fsh_flight_client_options co = {.uri = fsh_shuffle_worker_uri(c.w[0]), .timeout_ms = 5000};
  fsh_flight_client *wc = NULL;
  CHECK_OK(fsh_flight_client_open(&co, &wc, &err));
  uint8_t env[64] = "FSTE\x01\0\0\0";
  env[8] = 5; /* kind "bogus", no tag */
  memcpy(env + 16, "bogus", 5);
  fsh_flight_action a = {.type = (char *)"task", .body = {env, 21}};
  fsh_flight_result_list res = {0};
  rc = fsh_flight_do_action(wc, &a, &res, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "unknown task type 'bogus'") != NULL);
  a.body.size = 10;
  rc = fsh_flight_do_action(wc, &a, &res, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "FSTE") != NULL);
  env[8] = 200; /* a kind longer than the body */
  a.body.size = 21;
  rc = fsh_flight_do_action(wc, &a, &res, &err);
  CHECK_EQ_INT(rc, EINVAL);
  fsh_flight_result_list_reset(&res);
  fsh_flight_client_close(wc);
  /* still serving: a real job runs */
  uint64_t id = submit(&c, &JOB);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  check_against_reference(&s);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* Incremental with several reduces on each worker (up to 6 here): they
 * share the worker's poller, read in turns (worker.c: one per CPU at
 * once; on 2 CPUs some wait), and every partition still matches the
 * reference. */
static void incremental_many_reducers_per_worker(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 3000, true);
  fsh_sched_shuffle_job j = JOB;
  j.incremental = true;
  j.maps = 30;
  j.reduces = 16; /* check_job compares at most 16 */
  j.rows = 30 * 4000;
  j.batch_rows = 1000;
  j.slots_per_worker = 6;
  uint64_t id = submit(&c, &j);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 25000, &err));
  fsh_sched_job_status s;
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  check_job(&j, &s);
  CHECK_MSG(s.first_reduce_start_s < s.last_map_output_s, "first fetch %.3f s, last map %.3f s",
            s.first_reduce_start_s, s.last_map_output_s);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

/* The summary of a job that succeeds while attempts of it still run: every
 * first reduce attempt is held in its worker's task-done hook (the worker
 * runs it still); a worker running one is declared dead (it is alive), so
 * its maps are recomputed and every reduce -- each reads one of its
 * outputs -- is retried; the re-runs end and the job succeeds while the
 * first attempts are still held (orphans, their cancels sent). The summary
 * then says: succeeded, verified, every task done, none running; the
 * victim's maps recomputed; each reduce's first attempt retried with the
 * reason; the text form too. Once the orphans are let go, their late ends
 * change nothing (the job is over), nothing hangs, nothing leaks. */
static void succeeded_with_attempts_running(void) {
  fsh_error err;
  cluster c;
  start_cluster(&c, 60000, true);
  wait_alive(&c, N_WORKERS);
  fsh_sched_shuffle_job j = JOB;
  atomic_store(&hold_first_reduces, true);
  uint64_t id = submit(&c, &j);
  int held = 0;
  for (int t = 0; t < 4000 && held < j.reduces; t++) {
    held = 0;
    for (int i = 0; i < N_WORKERS; i++) held += atomic_load(&c.hook[i].held);
    if (held < j.reduces) sleep_ms(5);
  }
  CHECK_EQ_INT(held, j.reduces);
  int victim = -1;
  for (int i = 0; i < N_WORKERS && victim < 0; i++)
    if (atomic_load(&c.hook[i].held) > 0) victim = i;
  CHECK(victim >= 0);
  const char *vuri = victim >= 0 ? fsh_shuffle_worker_uri(c.w[victim]) : "";
  fsh_shuffle_store_stats vs = {0};
  if (victim >= 0) fsh_shuffle_store_get_stats(c.hook[victim].store, &vs);
  if (victim >= 0)
    CHECK_OK(fsh_sched_driver_declare_dead(c.d, vuri, "declared by the test", &err));
  /* the re-runs end: the job succeeds, the first attempts still held */
  fsh_sched_job_status s = {0};
  int state = FSH_SCHED_JOB_RUNNING;
  for (int t = 0; t < 3000 && state == FSH_SCHED_JOB_RUNNING; t++) {
    fsh_sched_job_status_reset(&s);
    CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
    state = s.state;
    if (state == FSH_SCHED_JOB_RUNNING) sleep_ms(10);
  }
  held = 0;
  for (int i = 0; i < N_WORKERS; i++) held += atomic_load(&c.hook[i].held);
  CHECK_MSG(held == j.reduces, "%d first attempts still held at the end, of %d", held,
            j.reduces);
  CHECK_MSG(s.state == FSH_SCHED_JOB_SUCCEEDED, "%s", s.error ? s.error : "?");
  check_job(&j, &s);
  CHECK_EQ_INT(s.n_stages, 2);
  for (int32_t x = 0; x < s.n_stages; x++) {
    CHECK_EQ_INT(s.stages[x].tasks_done, s.stages[x].tasks_total);
    CHECK_EQ_INT(s.stages[x].tasks_running, 0);
  }
  /* recomputed: the victim's maps (as many as it held), for that reason */
  CHECK(s.n_recomputed >= 1 && s.n_recomputed <= vs.map_outputs);
  for (int32_t i = 0; i < s.n_recomputed; i++)
    CHECK(s.recomputed[i].stage_id == 1 && strstr(s.recomputed[i].reason, vuri) &&
          strstr(s.recomputed[i].reason, "declared by the test"));
  /* every reduce's first attempt retried, naming the victim */
  int first_retried = 0;
  for (int32_t i = 0; i < s.n_retried; i++) {
    const fsh_sched_task_event *e = &s.retried[i];
    CHECK_MSG(e->stage_id == 2 && e->attempt == 0 && strstr(e->reason, vuri), "retried: stage "
              "%u task %d attempt %d: %s", e->stage_id, e->task, e->attempt, e->reason);
    first_retried++;
  }
  CHECK_EQ_INT(first_retried, j.reduces);
  int32_t retried = s.n_retried, recomputed = s.n_recomputed, ignored = s.n_ignored;
  /* the text form */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (f) {
    fsh_sched_job_status_print(&s, f);
    fclose(f);
  }
  char want[64];
  snprintf(want, sizeof want, "5/5 done, 0 running");
  CHECK_MSG(text && strstr(text, ": succeeded after ") && strstr(text, want) &&
                strstr(text, "verified yes") && strstr(text, "  retried: 5\n") &&
                strstr(text, "declared by the test"), "%s", text ? text : "");
  free(text);
  fsh_sched_job_status_reset(&s);
  /* the orphans let go: their late ends change nothing */
  atomic_store(&hold_first_reduces, false);
  for (int t = 0; t < 2000 && held > 0; t++) {
    held = 0;
    for (int i = 0; i < N_WORKERS; i++) held += atomic_load(&c.hook[i].held);
    if (held) sleep_ms(5);
  }
  CHECK_EQ_INT(held, 0);
  CHECK_OK(fsh_sched_driver_wait_job(c.d, id, 20000, &err));
  CHECK_OK(fsh_sched_driver_job_status(c.d, id, true, &s, &err));
  CHECK_EQ_INT(s.state, FSH_SCHED_JOB_SUCCEEDED);
  CHECK(s.verified);
  CHECK_EQ_INT(s.n_retried, retried);
  CHECK_EQ_INT(s.n_recomputed, recomputed);
  CHECK_EQ_INT(s.n_ignored, ignored);
  fsh_sched_job_status_reset(&s);
  stop_cluster(&c);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"job_completes", job_completes},
      {"incremental_job_completes", incremental_job_completes},
      {"incremental_many_reducers_per_worker", incremental_many_reducers_per_worker},
      {"two_shuffle_job", two_shuffle_job},
      {"lost_worker_recomputes_its_maps", lost_worker_recomputes_its_maps},
      {"live_worker_output_lost", live_worker_output_lost},
      {"failing_task_bounded_retries", failing_task_bounded_retries},
      {"late_answers_ignored", late_answers_ignored},
      {"bad_input", bad_input},
      {"hung_worker_does_not_stall", hung_worker_does_not_stall},
      {"hung_worker_release_does_not_stall", hung_worker_release_does_not_stall},
      {"finished_jobs_are_freed", finished_jobs_are_freed},
      {"superseded_attempt_cancelled", superseded_attempt_cancelled},
      {"dead_worker_running_reduce_noticed", dead_worker_running_reduce_noticed},
      {"succeeded_with_attempts_running", succeeded_with_attempts_running},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof *cases), argc, argv);
}
