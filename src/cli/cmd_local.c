/* cmd_local.c -- `flightshuffle local`: a cluster on loopback, for trying
 * things out and for tests: a driver in this process (sched.h) and N
 * `flightshuffle worker --driver URI` processes (this executable, forked
 * and exec'd, each on 127.0.0.1:0; URIs read from their "listening on"
 * lines, their stderr is ours). Waits until every worker has registered,
 * prints the cluster:
 *   driver grpc://127.0.0.1:P
 *   worker 1 grpc://127.0.0.1:Q pid N
 *   ...
 *   cluster ready: N workers
 * then runs until SIGINT/SIGTERM (exit 0) or --run-seconds S. --auth-token T
 * is required by the driver and every worker (and sent between them);
 * --keepalive-ms N is the driver's Flight keepalive and the workers';
 * --pool-idle-ms / --builders-idle-ms MS|never go to every worker (see
 * `flightshuffle worker`). Every worker
 * is stopped on every way out (SIGTERM, SIGKILL after 10 s; they also get
 * SIGTERM if this process dies: PR_SET_PDEATHSIG), and their spill
 * directories go: DIR/w<i> under --spill-dir DIR, else a temp directory.
 * Exit status: 0, 1 on a failure, 2 on bad arguments, 130 when interrupted
 * before the cluster was ready. */
#define _GNU_SOURCE /* nftw */
#include "cli/cli.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <flightshuffle/sched.h>

static int local_usage(void) {
  fprintf(stderr,
          "usage: flightshuffle local --workers N [--spill-dir DIR] [--memory-limit BYTES]\n"
          "                          [--run-seconds S] [--heartbeat-timeout-ms N]\n"
          "                          [--auth-token T] [--keepalive-ms N] [--direct-reads on|off]\n"
          "                          [--pool-idle-ms MS|never] [--builders-idle-ms MS|never]\n"
          "                          [--images vm|memfd|private|vm-4k]\n"
          "  a driver and N worker processes on 127.0.0.1, until Ctrl-C (or S seconds);\n"
          "  worker i spills into DIR/w<i> (default: a temp directory), removed at the end\n"
          "  --auth-token: the driver and every worker require T of every caller (and\n"
          "                send it to each other); pass it to `job` too\n"
          "  --keepalive-ms: Flight keepalive of the driver's and the workers' connections\n"
          "  --direct-reads: the workers' flight tasks read each other's map outputs\n"
          "                  straight from files and memory (default on; off: DoGet, as\n"
          "                  between hosts)\n"
          "  --pool-idle-ms, --builders-idle-ms: every worker's (how long it keeps released\n"
          "                  map outputs' memory and idle partition builders for the next\n"
          "                  shuffle; defaults 30000 and 3000; see `flightshuffle worker --help`)\n"
          "  --images: every worker's (where its in-memory map outputs live; default\n"
          "            memfd; see `flightshuffle worker --help`)\n");
  return 2;
}

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Takes a pending SIGINT/SIGTERM, waiting up to ms; true if one came. */
bool cli_local_signal(cli_local *c, int ms) {
  if (c->signal) return true;
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  int s = sigtimedwait(&c->sigs, NULL, &ts);
  if (s > 0) c->signal = s;
  return c->signal != 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  remove(path);
  return 0;
}

static bool interrupted(void *c) { return cli_local_signal(c, 0); }

/* Starts worker i (fork + exec of this executable; stdout a pipe). */
static int start_worker(cli_local *c, int i, const cli_local_options *lo) {
  int64_t memory_limit = lo->memory_limit;
  const char *auth_token = lo->auth_token;
  long long keepalive_ms = lo->keepalive_ms;
  char limit[32], keepalive[32], log[4300], opmem[32];
  snprintf(c->spill[i], sizeof c->spill[i], "%s/w%d", c->base, i + 1);
  snprintf(limit, sizeof limit, "%" PRId64, memory_limit);
  snprintf(keepalive, sizeof keepalive, "%lld", keepalive_ms);
  const char *args[32] = {"flightshuffle", "worker", "--listen", "127.0.0.1:0", "--spill-dir",
                          c->spill[i], "--memory-limit", limit, "--driver",
                          fsh_sched_driver_uri(c->driver)};
  int n = 10;
  if (auth_token) args[n++] = "--auth-token", args[n++] = auth_token;
  if (keepalive_ms > 0) args[n++] = "--keepalive-ms", args[n++] = keepalive;
  if (c->fs_dir[0]) args[n++] = "--fs-dir", args[n++] = c->fs_dir;
  snprintf(opmem, sizeof opmem, "%" PRId64, lo->operator_memory);
  if (lo->operator_memory > 0) args[n++] = "--operator-memory", args[n++] = opmem;
  if (lo->no_direct_reads) args[n++] = "--direct-reads", args[n++] = "off";
  if (lo->pool_idle_ms) args[n++] = "--pool-idle-ms", args[n++] = lo->pool_idle_ms;
  if (lo->builders_idle_ms) args[n++] = "--builders-idle-ms", args[n++] = lo->builders_idle_ms;
  if (lo->images) args[n++] = "--images", args[n++] = lo->images;
  args[n] = NULL;
  sigset_t none;
  sigemptyset(&none);
  snprintf(log, sizeof log, "%s.log", c->spill[i]);
  cli_child_options o = {.who = "local", .child_mask = &none, .timeout_s = 30,
                         .interrupted = interrupted, .arg = c,
                         .stderr_log = c->quiet ? log : NULL};
  int rc = cli_child_start(args, &o, &c->proc[i]);
  if (c->proc[i].pid > 0) c->n = i + 1;
  if (rc == CLI_CHILD_NO_URI) {
    if (c->signal) return 130;
    return cli_fail(1, "local: worker %d (pid %d) did not say where it listens", i + 1,
                    (int)c->proc[i].pid);
  }
  return rc;
}

/* Reaps workers that ended on their own; reports them. */
static void report_end(const cli_child *w, int i) {
  fprintf(stderr, "flightshuffle: local: worker %d %s (pid %d) ended with %s %d\n", i + 1, w->uri,
          (int)w->pid, WIFEXITED(w->status) ? "status" : "signal",
          WIFEXITED(w->status) ? WEXITSTATUS(w->status) : WTERMSIG(w->status));
}

void cli_local_reap(cli_local *c) {
  for (int i = 0; i < c->n; i++)
    if (cli_child_reap(&c->proc[i])) report_end(&c->proc[i], i);
}

/* After cli_children_stop reaped worker i. */
static void stopped(const cli_child *w, int i, void *arg) {
  (void)arg;
  if (w->killed)
    fprintf(stderr, "flightshuffle: local: worker pid %d did not stop in time: killed\n",
            (int)w->pid);
  else if (!WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0)
    report_end(w, i);
}

/* Stops every worker (SIGTERM, then SIGKILL after 10 s) and reaps it, then
 * the driver; removes the spill directories. Safe on a partly started
 * cluster. */
void cli_local_stop(cli_local *c) {
  cli_children_stop(c->proc, c->n, 10, stopped, NULL);
  fsh_sched_driver_stop(c->driver, 2000);
  c->driver = NULL;
  for (int i = 0; i < c->n; i++) {
    char log[4300];
    snprintf(log, sizeof log, "%s.log", c->spill[i]);
    nftw(c->spill[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (c->quiet) remove(log);
  }
  if (c->fs_dir[0]) nftw(c->fs_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (c->base_is_temp) nftw(c->base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Waits (up to 30 s) until every worker is registered and alive. */
static int wait_registered(cli_local *c) {
  double deadline = now_sec() + 30;
  for (;;) {
    fsh_error err;
    fsh_sched_worker_list l;
    if (fsh_sched_driver_workers(c->driver, &l, &err) != 0)
      return cli_fail(1, "local: %s", err.message);
    int ok = 0;
    for (int i = 0; i < c->n; i++)
      for (int64_t j = 0; j < l.n; j++)
        if (strcmp(l.items[j].uri, c->proc[i].uri) == 0 &&
            l.items[j].state == FSH_SCHED_WORKER_ALIVE) {
          ok++;
          break;
        }
    fsh_sched_worker_list_reset(&l);
    if (ok == c->n) return 0;
    cli_local_reap(c);
    if (cli_local_signal(c, 20)) return 130;
    if (now_sec() > deadline)
      return cli_fail(1, "local: only %d of %d workers registered with the driver in 30 s", ok,
                      c->n);
  }
}

int cli_local_start(const cli_local_options *o, cli_local *c) {
  memset(c, 0, sizeof *c);
  c->quiet = o->quiet;
  sigemptyset(&c->sigs);
  sigaddset(&c->sigs, SIGINT);
  sigaddset(&c->sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &c->sigs, NULL); /* before any thread exists */
  signal(SIGPIPE, SIG_IGN);
  if (o->n_workers < 1 || o->n_workers > LOCAL_MAX_WORKERS)
    return cli_fail(2, "local: %d workers (1 .. %d)", o->n_workers, LOCAL_MAX_WORKERS);

  if (o->spill_dir) {
    if (mkdir(o->spill_dir, 0755) != 0 && errno != EEXIST)
      return cli_fail(1, "local: --spill-dir %s: %s", o->spill_dir, strerror(errno));
    snprintf(c->base, sizeof c->base, "%s", o->spill_dir);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(c->base, sizeof c->base, "%s/fsh-local-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(c->base)) return cli_fail(1, "local: mkdtemp %s: %s", c->base, strerror(errno));
    c->base_is_temp = true;
  }
  if (o->with_fs_dir) {
    snprintf(c->fs_dir, sizeof c->fs_dir, "%s/fs", c->base);
    if (mkdir(c->fs_dir, 0755) != 0 && errno != EEXIST) {
      int e = errno;
      c->fs_dir[0] = '\0';
      cli_local_stop(c);
      return cli_fail(1, "local: mkdir %s/fs: %s", c->base, strerror(e));
    }
  }

  fsh_error err;
  fsh_sched_driver_options dopts = {.listen = "127.0.0.1:0",
                                    .heartbeat_timeout_ms = o->heartbeat_timeout_ms,
                                    .auth_token = o->auth_token, .log = o->log};
  int rc = fsh_sched_driver_start(&dopts, &c->driver, &err);
  if (rc != 0) rc = cli_fail(1, "local: driver: %s", err.message);
  for (int i = 0; rc == 0 && i < o->n_workers; i++)
    rc = start_worker(c, i, o);
  if (rc == 0) rc = wait_registered(c);
  if (rc != 0) {
    if (rc == 130 || c->signal) {
      rc = 130;
      fprintf(stderr, "flightshuffle: local: interrupted, stopping the cluster\n");
    }
    cli_local_stop(c);
  }
  return rc;
}

int cmd_local(int argc, char **argv) {
  long long n_workers = 0, run_seconds = -1, timeout_ms = 0, keepalive_ms = 0;
  const char *auth_token = NULL;
  int64_t memory_limit = (int64_t)1 << 30;
  const char *spill_dir = NULL;
  bool no_direct_reads = false;
  const char *pool_idle_ms = NULL, *builders_idle_ms = NULL, *images = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      local_usage();
      return 0;
    }
    if (i + 1 >= argc) {
      cli_fail(2, "local: %s needs a value", a);
      return local_usage();
    }
    const char *v = argv[++i];
    char *end = NULL;
    if (strcmp(a, "--workers") == 0) {
      n_workers = strtoll(v, &end, 10);
      if (*v == '\0' || *end || n_workers < 1 || n_workers > LOCAL_MAX_WORKERS)
        return cli_fail(2, "local: --workers '%s': expected 1..%d", v, LOCAL_MAX_WORKERS);
    } else if (strcmp(a, "--run-seconds") == 0) {
      run_seconds = strtoll(v, &end, 10);
      if (*v == '\0' || *end || run_seconds < 0 || run_seconds > 100000000)
        return cli_fail(2, "local: --run-seconds '%s': expected seconds >= 0", v);
    } else if (strcmp(a, "--heartbeat-timeout-ms") == 0) {
      timeout_ms = strtoll(v, &end, 10);
      if (*v == '\0' || *end || timeout_ms < 1 || timeout_ms > 86400000LL)
        return cli_fail(2, "local: --heartbeat-timeout-ms '%s': expected 1..86400000", v);
    } else if (strcmp(a, "--auth-token") == 0) {
      if (!*v) return cli_fail(2, "local: --auth-token: empty");
      auth_token = v;
    } else if (strcmp(a, "--keepalive-ms") == 0) {
      keepalive_ms = strtoll(v, &end, 10);
      if (*v == '\0' || *end || keepalive_ms < 100 || keepalive_ms > 86400000LL)
        return cli_fail(2, "local: --keepalive-ms '%s': expected 100..86400000", v);
      fsh_flight_set_default_keepalive_ms(keepalive_ms); /* the driver's */
    } else if (strcmp(a, "--spill-dir") == 0) {
      spill_dir = v;
    } else if (strcmp(a, "--direct-reads") == 0) {
      if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
        return cli_fail(2, "local: --direct-reads '%s': expected on or off", v);
      no_direct_reads = strcmp(v, "off") == 0;
    } else if (strcmp(a, "--memory-limit") == 0) {
      if (!cli_parse_bytes(v, &memory_limit))
        return cli_fail(2, "local: --memory-limit '%s': expected bytes (e.g. 512M)", v);
    } else if (strcmp(a, "--pool-idle-ms") == 0 || strcmp(a, "--builders-idle-ms") == 0) {
      int64_t ms;
      if (strcmp(v, "never") != 0 && !cli_parse_int(v, 0, 86400000, &ms))
        return cli_fail(2, "local: %s '%s': expected milliseconds 0..86400000 or never", a, v);
      if (a[2] == 'p') pool_idle_ms = v;
      else builders_idle_ms = v;
    } else if (strcmp(a, "--images") == 0) {
      fsh_store_images kind;
      if (!fsh_store_images_parse(v, &kind))
        return cli_fail(2, "local: --images '%s': expected vm, memfd, private or vm-4k", v);
      images = v;
    } else {
      cli_fail(2, "local: unknown option %s", a);
      return local_usage();
    }
  }
  if (n_workers == 0) {
    cli_fail(2, "local: --workers N is required");
    return local_usage();
  }

  static cli_local c; /* large: not on the stack */
  cli_local_options lo = {.n_workers = (int)n_workers, .spill_dir = spill_dir,
                          .memory_limit = memory_limit, .auth_token = auth_token,
                          .keepalive_ms = keepalive_ms, .heartbeat_timeout_ms = timeout_ms,
                          .no_direct_reads = no_direct_reads, .pool_idle_ms = pool_idle_ms,
                          .builders_idle_ms = builders_idle_ms, .images = images,
                          .log = true};
  int rc = cli_local_start(&lo, &c);
  if (rc != 0) return rc; /* stopped already */
  {
    printf("driver %s\n", fsh_sched_driver_uri(c.driver));
    for (int i = 0; i < c.n; i++)
      printf("worker %d %s pid %d\n", i + 1, c.proc[i].uri, (int)c.proc[i].pid);
    printf("cluster ready: %d workers\n", c.n);
    fflush(stdout);
    double end = run_seconds >= 0 ? now_sec() + (double)run_seconds : 0;
    while (!cli_local_signal(&c, 200)) {
      cli_local_reap(&c);
      if (run_seconds >= 0 && now_sec() >= end) break;
    }
    if (c.signal)
      fprintf(stderr, "flightshuffle: local: %s, stopping the cluster\n",
              c.signal == SIGINT ? "SIGINT" : "SIGTERM");
  }
  cli_local_stop(&c);
  return rc;
}
