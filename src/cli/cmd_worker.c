/* cmd_worker.c -- `flightshuffle worker`: a shuffle worker process, a store
 * of map outputs (memory up to --memory-limit, then spill files in the
 * --spill-dir directories, round-robin) behind an Arrow Flight server.
 * Its Flight surface (ListFlights, DoGet of shuffle tickets, DoPut of map
 * outputs, DoAction "release", tasks "map-synthetic" / "reduce-verify"
 * through its store or the --fs-dir directory, "stats") and wire formats
 * are in shuffle.h; it also runs "plan-fragment" tasks (one task of a
 * plan's stage, exec.h), registered as a worker task kind. Prints
 * "listening on grpc://HOST:PORT" once ready; SIGINT/SIGTERM stop it
 * cleanly (in-flight calls get 2 s, then the store and its spill files go).
 * With --driver URI the worker joins that driver's cluster: a heartbeat
 * thread (sched.h) registers and heartbeats; a driver that is down is
 * retried, never fatal; the tasks the driver sends ("task") report their
 * end to it at once ("task-done", fsh_sched_notify_task_done); on
 * SIGINT/SIGTERM it deregisters from the driver ("deregister") before
 * stopping, so the driver does not wait for its heartbeat timeout.
 * --pool-idle-ms / --builders-idle-ms: how long the worker keeps its
 * back-to-back caches (released images' memfds, the partition builders)
 * unused before giving them back (worker.c, the keeper). */
#include "cli/cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/flight.h>
#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>

#include "shuffle/shuffle_internal.h" /* fsh_shuffle_worker_set_idle_ms */

#define WORKER_MAX_DIRS 64

static int worker_usage(void) {
  fprintf(stderr,
          "usage: flightshuffle worker --listen HOST:PORT [--spill-dir DIR]... "
          "[--memory-limit BYTES] [--auth-token T] [--threads N] [--fs-dir DIR]\n"
          "       [--operator-memory BYTES]\n"
          "       [--driver URI] [--keepalive-ms N] [--direct-reads on|off]\n"
          "       [--pool-idle-ms MS|never] [--builders-idle-ms MS|never]\n"
          "       [--images vm|memfd|private|vm-4k]\n"
          "  --driver: join that driver's cluster (register, then heartbeat)\n"
          "  --keepalive-ms: Flight keepalive of every connection (a silent peer is\n"
          "                  dropped after about twice that; default 10000)\n"
          "  --fs-dir: the shared directory of fs-backend tasks (map-synthetic)\n"
          "  --operator-memory: the budget of each sort / aggregate / join of the\n"
          "                     plan-fragment tasks (they spill to the --spill-dir's)\n"
          "  --direct-reads: flight tasks read the map outputs of workers on this\n"
          "                  host straight from their files and memory (default on)\n"
          "  --pool-idle-ms: released map outputs' memory (images) is kept for the next\n"
          "                 shuffle's map outputs until unused that long (default 30000;\n"
          "                 never: until the memory limit needs it). Reused pages make\n"
          "                 the map phase cheaper; kept ones are memory held idle\n"
          "  --images: where map outputs kept in memory live: memfd (default:\n"
          "            memfds that same-host peers open), vm (anonymous memory on\n"
          "            huge pages that they copy with process_vm_readv: cheaper for\n"
          "            back-to-back shuffles, slower for sort and join where freed\n"
          "            huge pages go back to the host), private (no same-host\n"
          "            direct reads), vm-4k (vm on 4 KiB pages)\n"
          "  --builders-idle-ms: the same for the map tasks' partition builders, once\n"
          "                 no task ran that long (default 30000)\n"
          "  BYTES may end in K, M or G (powers of 1024); default 1G\n");
  return 2;
}

/* "never" (-1) or 0..86400000 ms into *ms; false otherwise. */
static bool parse_idle_ms(const char *v, int64_t *ms) {
  if (strcmp(v, "never") == 0) {
    *ms = -1;
    return true;
  }
  char *end = NULL;
  errno = 0;
  long long t = strtoll(v, &end, 10);
  if (*v < '0' || *v > '9' || *end || errno || t > 86400000LL) return false;
  *ms = t;
  return true;
}

int cmd_worker(int argc, char **argv) {
  fsh_shuffle_worker_options o = {.memory_limit = (int64_t)1 << 30};
  static fsh_plan_task_run_options topts; /* outlives the worker */
  memset(&topts, 0, sizeof topts);
  const char *dirs[WORKER_MAX_DIRS];
  const char *driver = NULL;
  int64_t pool_idle_ms = FSH_WORKER_POOL_IDLE_MS_DEFAULT, builders_idle_ms = FSH_WORKER_BUILDERS_IDLE_MS_DEFAULT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      worker_usage();
      return 0;
    }
    if (i + 1 >= argc) {
      cli_fail(2, "worker: %s needs a value", a);
      return worker_usage();
    }
    const char *v = argv[++i];
    if (strcmp(a, "--listen") == 0) {
      o.listen = v;
    } else if (strcmp(a, "--spill-dir") == 0) {
      if (o.n_spill_dirs == WORKER_MAX_DIRS)
        return cli_fail(2, "worker: at most %d spill directories", WORKER_MAX_DIRS);
      dirs[o.n_spill_dirs++] = v;
    } else if (strcmp(a, "--memory-limit") == 0) {
      if (!cli_parse_bytes(v, &o.memory_limit))
        return cli_fail(2, "worker: --memory-limit '%s': expected bytes (e.g. 1073741824, 512M)",
                        v);
    } else if (strcmp(a, "--driver") == 0) {
      driver = v;
    } else if (strcmp(a, "--operator-memory") == 0) {
      if (!cli_parse_bytes(v, &topts.operator_memory) || topts.operator_memory < 1)
        return cli_fail(2, "worker: --operator-memory '%s': expected bytes > 0 (e.g. 1M)", v);
    } else if (strcmp(a, "--direct-reads") == 0) {
      if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
        return cli_fail(2, "worker: --direct-reads '%s': expected on or off", v);
      o.no_direct_reads = strcmp(v, "off") == 0;
    } else if (strcmp(a, "--images") == 0) {
      if (!fsh_store_images_parse(v, &o.images))
        return cli_fail(2, "worker: --images '%s': expected vm, memfd, private or vm-4k", v);
    } else if (strcmp(a, "--pool-idle-ms") == 0 || strcmp(a, "--builders-idle-ms") == 0) {
      if (!parse_idle_ms(v, a[2] == 'p' ? &pool_idle_ms : &builders_idle_ms))
        return cli_fail(2, "worker: %s '%s': expected milliseconds 0..86400000 or never", a, v);
    } else if (strcmp(a, "--fs-dir") == 0) {
      o.fs_dir = v;
    } else if (strcmp(a, "--auth-token") == 0) {
      o.auth_token = v;
    } else if (strcmp(a, "--threads") == 0) {
      if ((o.n_threads = atoi(v)) <= 0) return cli_fail(2, "worker: --threads '%s'", v);
    } else if (strcmp(a, "--keepalive-ms") == 0) {
      char *end = NULL;
      long long t = strtoll(v, &end, 10);
      if (*v == '\0' || *end || t < 100 || t > 86400000LL)
        return cli_fail(2, "worker: --keepalive-ms '%s': expected 100..86400000", v);
      fsh_flight_set_default_keepalive_ms(t);
    } else {
      cli_fail(2, "worker: unknown option %s", a);
      return worker_usage();
    }
  }
  if (!o.listen) {
    cli_fail(2, "worker: --listen HOST:PORT is required");
    return worker_usage();
  }
  o.spill_dirs = dirs;
  if (topts.operator_memory > 0 && o.n_spill_dirs == 0)
    return cli_fail(2, "worker: --operator-memory needs a --spill-dir (the operators spill there)");
  topts.spill_dirs = dirs;
  topts.n_spill_dirs = o.n_spill_dirs;
  /* the driver's plan stages: "plan-fragment" tasks (exec.h) */
  fsh_worker_task_kind kinds[1] = {fsh_plan_task_kind(&topts)};
  o.task_kinds = kinds;
  o.n_task_kinds = 1;

  sigset_t sigs;
  cli_block_stop_signals(&sigs); /* taken by sigwait below */

  fsh_error err;
  fsh_sched_notifier *notifier = NULL;
  if (driver) {
    if (fsh_sched_notifier_new(driver, o.auth_token, &notifier, &err) != 0)
      return cli_fail(1, "worker: --driver: %s", err.message);
    o.on_task_done = fsh_sched_notify_task_done;
    o.on_task_done_ctx = notifier;
    o.on_more_sources = fsh_sched_more_sources;
    o.on_more_sources_ctx = notifier;
  }
  fsh_shuffle_worker *w = NULL;
  if (fsh_shuffle_worker_start(&o, &w, &err) != 0) {
    fsh_sched_notifier_free(notifier);
    return cli_fail(1, "worker: %s", err.message);
  }
  fsh_shuffle_worker_set_idle_ms(w, pool_idle_ms, builders_idle_ms);
  if (notifier) fsh_sched_notifier_set_worker(notifier, fsh_shuffle_worker_uri(w), true);
  fsh_sched_heartbeat *hb = NULL;
  if (driver) {
    fsh_sched_heartbeat_options ho = {.driver_uri = driver, .worker_uri = fsh_shuffle_worker_uri(w),
                                      .auth_token = o.auth_token, .log = true,
                                      .deregister_on_stop = true};
    if (fsh_sched_heartbeat_start(&ho, &hb, &err) != 0) {
      fsh_shuffle_worker_stop(w, 0);
      fsh_sched_notifier_free(notifier);
      return cli_fail(1, "worker: --driver: %s", err.message);
    }
  }
  printf("listening on %s\n", fsh_shuffle_worker_uri(w));
  fflush(stdout);
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "flightshuffle: worker %s: %s, stopping\n", fsh_shuffle_worker_uri(w),
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  fsh_sched_heartbeat_stop(hb);
  fsh_shuffle_worker_stop(w, 2000); /* joins the tasks (and their notifications) */
  fsh_sched_notifier_free(notifier);
  return 0;
}
