/* cmd_driver.c -- `flightshuffle driver`: the cluster's driver process, a
 * Flight server keeping the membership of its workers (DoActions
 * "register", "heartbeat", "workers") and running jobs ("submit",
 * "job-status"; from workers "task-done", "map-outputs"; contracts in
 * sched.h). Workers join with `flightshuffle worker --driver URI`; jobs
 * come from `flightshuffle job shuffle --driver URI` or any Flight client.
 * Prints "listening on grpc://HOST:PORT" once ready, membership changes and
 * job events on stderr; SIGINT/SIGTERM stop it cleanly (in-flight calls get
 * 2 s; running jobs are dropped). */
#include "cli/cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/flight.h>
#include <flightshuffle/sched.h>

static int driver_usage(void) {
  fprintf(stderr,
          "usage: flightshuffle driver --listen HOST:PORT [--heartbeat-timeout-ms N] "
          "[--auth-token T] [--threads N] [--keepalive-ms N] [--keep-jobs N]\n"
          "  --heartbeat-timeout-ms: a worker not heard from for that long is dead "
          "(default 10000;\n"
          "                          workers beat every third of it)\n"
          "  --keepalive-ms: Flight keepalive of every connection (a silent peer is\n"
          "                  dropped after about twice that; default 10000)\n"
          "  --keep-jobs: finished jobs kept for job-status (older ones are freed; default 64)\n");
  return 2;
}

int cmd_driver(int argc, char **argv) {
  fsh_sched_driver_options o = {.log = true};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      driver_usage();
      return 0;
    }
    if (i + 1 >= argc) {
      cli_fail(2, "driver: %s needs a value", a);
      return driver_usage();
    }
    const char *v = argv[++i];
    char *end = NULL;
    if (strcmp(a, "--listen") == 0) {
      o.listen = v;
    } else if (strcmp(a, "--heartbeat-timeout-ms") == 0) {
      long long t = strtoll(v, &end, 10);
      if (*v == '\0' || *end || t <= 0 || t > 86400000LL)
        return cli_fail(2, "driver: --heartbeat-timeout-ms '%s': expected 1..86400000", v);
      o.heartbeat_timeout_ms = t;
    } else if (strcmp(a, "--auth-token") == 0) {
      o.auth_token = v;
    } else if (strcmp(a, "--threads") == 0) {
      if ((o.n_threads = atoi(v)) <= 0) return cli_fail(2, "driver: --threads '%s'", v);
    } else if (strcmp(a, "--keep-jobs") == 0) {
      long long k = strtoll(v, &end, 10);
      if (*v == '\0' || *end || k < 1 || k > 1000000)
        return cli_fail(2, "driver: --keep-jobs '%s': expected 1..1000000", v);
      o.keep_jobs = (int32_t)k;
    } else if (strcmp(a, "--keepalive-ms") == 0) {
      long long t = strtoll(v, &end, 10);
      if (*v == '\0' || *end || t < 100 || t > 86400000LL)
        return cli_fail(2, "driver: --keepalive-ms '%s': expected 100..86400000", v);
      fsh_flight_set_default_keepalive_ms(t);
    } else {
      cli_fail(2, "driver: unknown option %s", a);
      return driver_usage();
    }
  }
  if (!o.listen) {
    cli_fail(2, "driver: --listen HOST:PORT is required");
    return driver_usage();
  }
  sigset_t sigs;
  cli_block_stop_signals(&sigs); /* taken by sigwait below */

  fsh_error err;
  fsh_sched_driver *d = NULL;
  if (fsh_sched_driver_start(&o, &d, &err) != 0) return cli_fail(1, "driver: %s", err.message);
  printf("listening on %s\n", fsh_sched_driver_uri(d));
  fflush(stdout);
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "flightshuffle: driver %s: %s, stopping\n", fsh_sched_driver_uri(d),
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  fsh_sched_driver_stop(d, 2000);
  return 0;
}
