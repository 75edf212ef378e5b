/* test_client_alloc.c -- allocation-failure loops over the Flight client:
 * the Nth allocation of ours fails (once, or from there on), for every N
 * up to what a whole session makes: open, ListFlights, DoGet of every
 * batch, DoPut of them, ListActions, close. Every failure must come back as
 * an error (never a crash, a hang or a leak: run under ASan). The server is
 * our `flightshuffle flight serve` in a child process, so that only the
 * client's allocations fail. Skipped when the CLI is not built. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <flightshuffle/flight.h>

#include "test.h"

extern char **environ;

static pid_t server_pid = -1;
static char uri[64];

static bool start_server(void) {
  const char *build = getenv("FSH_BUILD_DIR");
  char cli[1024], file[1024];
  snprintf(cli, sizeof cli, "%s/flightshuffle", build ? build : ".");
  fsh_test_shared_path(file, sizeof file,
                       "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian/"
                       "generated_primitive.arrow_file");
  if (access(cli, X_OK) != 0 || access(file, R_OK) != 0) return false;
  int fds[2];
  if (pipe(fds)) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char *argv[] = {cli, "flight", "serve", "--listen", "127.0.0.1:0", file, NULL};
  int rc = posix_spawn(&server_pid, cli, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    return false;
  }
  FILE *f = fdopen(fds[0], "r");
  char line[512] = "";
  bool ok = f && fgets(line, sizeof line, f) != NULL;
  if (f) fclose(f);
  const char *colon = ok ? strrchr(line, ':') : NULL;
  if (!colon) return false;
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", atoi(colon + 1));
  return true;
}

static void stop_server(void) {
  if (server_pid <= 0) return;
  kill(server_pid, SIGTERM);
  int st;
  waitpid(server_pid, &st, 0);
  server_pid = -1;
}

/* One session; 0 or the first error. */
static int session(fsh_error *err) {
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 20000};
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(fsh_flight_client_open(&o, &c, err));
  fsh_flight_info_list l = {0};
  fsh_flight_reader *r = NULL;
  fsh_flight_writer *w = NULL;
  fsh_batch *batches[16];
  int n = 0;
  int rc = fsh_flight_list_flights(c, NULL, &l, err);
  if (rc == 0 && (l.n < 1 || l.items[0].n_endpoints != 1)) /* the file, then uploads */
    rc = fsh_error_set(err, EPROTO, "unexpected listing");
  if (rc == 0) rc = fsh_flight_do_get(c, &l.items[0].endpoints[0].ticket, &r, err);
  while (rc == 0 && n < 16) {
    fsh_batch *b = NULL;
    if ((rc = fsh_flight_reader_next(r, &b, err)) != 0 || !b) break;
    batches[n++] = b;
  }
  fsh_schema *schema = NULL;
  if (rc == 0) rc = fsh_flight_reader_schema(r, &schema, err);
  if (rc == 0) {
    const char *path[] = {"alloc"};
    fsh_flight_descriptor d = {0};
    rc = fsh_flight_descriptor_path(&d, path, 1) ? fsh_error_set(err, ENOMEM, "oom") : 0;
    if (rc == 0) rc = fsh_flight_do_put(c, &d, schema, NULL, &w, err);
    for (int i = 0; rc == 0 && i < n; i++) rc = fsh_flight_writer_write(w, batches[i], err);
    if (w) {
      if (rc == 0)
        rc = fsh_flight_writer_close(w, NULL, err);
      else
        fsh_flight_writer_cancel(w);
    }
    fsh_flight_descriptor_reset(&d);
  }
  fsh_flight_reader_free(r);
  for (int i = 0; i < n; i++) fsh_batch_unref(batches[i]);
  if (rc == 0) {
    fsh_flight_action_type_list t;
    rc = fsh_flight_list_actions(c, &t, err);
    if (rc == 0) fsh_flight_action_type_list_reset(&t);
  }
  fsh_flight_info_list_reset(&l);
  fsh_flight_client_close(c);
  return rc;
}

/* Fails allocation n (and, persistent, every later one) for every n up to
 * what a whole session makes: each run must end with success or an error
 * that says something. */
static void alloc_loop(bool persistent) {
  fsh_error err = {{0}};
  CHECK_OK(session(&err)); /* the baseline works (and the upload is listed from now on) */
  int64_t before = fsh_alloc_count();
  CHECK_OK(session(&err));
  int64_t total = fsh_alloc_count() - before;
  int64_t failed = 0;
  for (int64_t n = 1; n <= total + 2; n++) {
    fsh_alloc_fail_after(n, persistent);
    err.message[0] = '\0';
    int rc = session(&err);
    fsh_alloc_fail_after(0, false);
    if (rc == 0) continue;
    failed++;
    CHECK_MSG(err.message[0] != '\0', "allocation %lld: error %d without a message", (long long)n,
              rc);
  }
  CHECK(failed > 0);
  CHECK_OK(session(&err)); /* and all is well afterwards */
  printf("  %s: %lld allocations per session, %lld runs failed cleanly\n",
         persistent ? "persistent" : "transient", (long long)total, (long long)failed);
}

static void test_alloc_failures(void) {
  if (!start_server()) {
    printf("skip test_alloc_failures: no flightshuffle CLI in FSH_BUILD_DIR\n");
    return;
  }
  alloc_loop(false);
  alloc_loop(true);
  stop_server();
}

FSH_TEST_MAIN(TEST(test_alloc_failures))
