/* cmd_bench.c -- `flightshuffle bench shuffle`: a shuffle of the synthetic
 * table on a local cluster, verified and timed.
 *
 *   flightshuffle bench shuffle --workers N --maps M --reduces R --bytes S
 *       --backend flight|memory|fs [--compression none|lz4|zstd]
 *       [--spill-dir DIR] [--memory-limit B] [--runs K] [--slots T]
 *       [--incremental on|off|both] [--fail-worker F] [--worker-pool-idle-ms MS|never]
 *       [--worker-builders-idle-ms MS|never]
 *
 * flight / fs: a driver in this process (sched.h) and N `flightshuffle
 * worker --driver` processes (this executable, forked and exec'd, each on
 * 127.0.0.1:0; the URI read from its "listening on" line) that join it;
 * each run is a job of the driver: M map tasks, then R reduce tasks, at
 * most T tasks per worker at once (fewer than its server threads, so that
 * peers' DoGets are served meanwhile; incremental reduces have T slots of
 * their own). --incremental both runs every run twice, off then on, and
 * compares them; --fail-worker F SIGKILLs the last worker once a fraction F
 * of the maps is done (the job recomputes what it held). Every worker spills to its own folder of a
 * per-invocation temp directory under --spill-dir (default /tmp), where
 * the fs backend's shared directory also lives; the directory is removed
 * at the end, and every worker is stopped and reaped at the end, on error
 * and on SIGINT/SIGTERM (workers also get SIGTERM if this process dies:
 * PR_SET_PDEATHSIG). memory: the same tasks as N threads of this process
 * over the in-process backend (the upper bound; no worker).
 *
 * Verification: per partition, the reduce side's rows and order-independent
 * row checksum equal the sums of the map sides' (fsh_task_row_checksums),
 * and the rows read equal the rows generated.
 * Baselines measured in each run: a raw loopback TCP copy of S bytes (one
 * connection), and for fs/flight a plain sequential write (+fsync) of S
 * bytes into the temp directory. Ends with one `result:` line. Exit status:
 * 0 verified, 1 error or not verified, 2 bad arguments, 130 interrupted. */
#define _GNU_SOURCE /* nftw */
#include "cli/cli.h"
#include "cli/proc_cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/flight.h>
#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#define BENCH_MAX_WORKERS 64
#define BENCH_SHUFFLE_BASE 1000

/* ---- options ----------------------------------------------------------- */

typedef struct bench_opts {
  int workers, maps, reduces, runs, slots;
  double fail_worker; /* < 0: none */
  bool incremental;
  bool incremental_both; /* each run twice: off, then on */
  bool direct_off;       /* flight workers read same-host peers with DoGet */
  bool direct_both;      /* each run twice, off then on, each on a fresh cluster */
  int64_t bytes, memory_limit; /* memory_limit < 0: not given */
  fsh_task_backend backend;
  fsh_compression compression;
  const char *spill_dir;
  int32_t batch_rows; /* 0: chosen from the sizes */
  uint64_t seed;
  int merge;       /* the pre-shuffle merge: FSH_SCHED_MERGE_OFF / ON / AUTO */
  int32_t merge_threshold; /* 0: FSH_SCHED_MERGE_THRESHOLD */
  bool merge_both; /* each run twice: merge off, then on */
  int64_t reduce_task_bytes; /* coalesced reduces: 0 a task per partition, < 0 auto */
  int32_t maps_per_task;     /* coalesced maps: 1 a task per map, < 0 auto */
  const char *worker_idle_ms; /* --worker-pool-idle-ms as given ("never" or ms), or NULL */
  const char *builders_idle_ms; /* --worker-builders-idle-ms, or NULL: worker_idle_ms */
  const char *worker_images; /* --worker-images (checked), or NULL: the workers' default */
} bench_opts;

static int bench_usage(void) {
  fprintf(stderr,
          "usage: flightshuffle bench shuffle --workers N --maps M --reduces R --bytes S\n"
          "         --backend flight|memory|fs [--compression none|lz4|zstd]\n"
          "         [--spill-dir DIR] [--memory-limit B] [--runs K] [--slots T]\n"
          "         [--batch-rows N] [--seed X] [--incremental on|off|both] [--fail-worker F]\n"
          "         [--direct on|off|both] [--merge on|off|auto|both] [--merge-threshold T]\n"
          "         [--reduce-task-bytes B|auto] [--maps-per-task G|auto]\n"
          "         [--worker-pool-idle-ms MS|never]\n"
          "         [--worker-builders-idle-ms MS|never] [--worker-images vm|memfd|private|vm-4k]\n"
          "  S and B may end in K, M or G (powers of 1024). --memory-limit is each\n"
          "  worker store's budget (flight; default: no limit); --slots the tasks\n"
          "  in flight per worker (default 2); the memory backend runs N threads.\n"
          "  fs / flight run as a job of an in-process driver (sched.h);\n"
          "  --fail-worker F kills one worker (SIGKILL) once a fraction F of the map\n"
          "  tasks is done (the run must still verify); --incremental: reduces\n"
          "  start with the first map output (off: after the map stage; default;\n"
          "  both: every run once off, then once on, compared in the result line).\n"
          "  --direct: flight workers read the map outputs of same-host workers\n"
          "  straight from their files and memory (on, default) or with DoGet (off);\n"
          "  both: every run once off and once on (alternating which goes first),\n"
          "  each on a freshly started cluster, compared in the result line.\n"
          "  --merge: the pre-shuffle merge of the map outputs on each flight worker (sched.h;\n"
          "  auto, the default: on when sqrt(M x R) > T, default 200; merges of about\n"
          "  M x R / T^2 map outputs); both: every run once off, then once on,\n"
          "  compared in the result line.\n"
          "  --reduce-task-bytes: coalesced reduces (fs / flight; sched.h): a reduce task\n"
          "  reads a contiguous run of partitions of about B bytes (0: one task per\n"
          "  partition; auto, the default: 64M, lowered so that every slot gets a task;\n"
          "  with --incremental on: one run per slot).\n"
          "  --maps-per-task: coalesced maps (fs / flight; sched.h): up to G consecutive\n"
          "  maps run as one task writing one output (1: a task per map; auto, the\n"
          "  default: when sqrt(M x R) > T, G = M x R / T^2 -- the outputs the merge\n"
          "  would make -- and then no merge; at least two tasks per slot).\n"
          "  --worker-pool-idle-ms: every worker's --pool-idle-ms and --builders-idle-ms\n"
          "  (how long its released memory images and its map builders are kept\n"
          "  for the next run; default: the worker's, 30000 for both, so runs\n"
          "  after the first reuse them; 0: every\n"
          "  run starts cold; never: kept until the memory limit needs it). Each\n"
          "  run says whether the workers' pool was warm.\n"
          "  --worker-builders-idle-ms: the workers' --builders-idle-ms alone (default:\n"
          "  --worker-pool-idle-ms's).\n"
          "  --worker-images: every worker's --images (default: the worker's, memfd).\n");
  return 2;
}


/* 0, or 2 after a message. */
static int parse_opts(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){.workers = 0, .runs = 1, .slots = 2, .memory_limit = -1, .seed = 42,
                    .fail_worker = -1, .merge = FSH_SCHED_MERGE_AUTO,
                    .reduce_task_bytes = -1, .maps_per_task = -1};
  bool have_backend = false;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return bench_usage();
    if (i + 1 >= argc) {
      cli_fail(2, "bench shuffle: %s needs a value", a);
      return bench_usage();
    }
    const char *v = argv[++i];
    int64_t n = 0;
    fsh_error err;
    if (strcmp(a, "--workers") == 0) {
      if (!cli_parse_int(v, 1, BENCH_MAX_WORKERS, &n))
        return cli_fail(2, "bench shuffle: --workers '%s': expected 1..%d", v, BENCH_MAX_WORKERS);
      o->workers = (int)n;
    } else if (strcmp(a, "--maps") == 0) {
      if (!cli_parse_int(v, 1, 1000000, &n))
        return cli_fail(2, "bench shuffle: --maps '%s': expected 1..1000000", v);
      o->maps = (int)n;
    } else if (strcmp(a, "--reduces") == 0) {
      if (!cli_parse_int(v, 1, 1000000, &n))
        return cli_fail(2, "bench shuffle: --reduces '%s': expected 1..1000000", v);
      o->reduces = (int)n;
    } else if (strcmp(a, "--runs") == 0) {
      if (!cli_parse_int(v, 1, 1000, &n))
        return cli_fail(2, "bench shuffle: --runs '%s': expected 1..1000", v);
      o->runs = (int)n;
    } else if (strcmp(a, "--slots") == 0) {
      if (!cli_parse_int(v, 1, 64, &n))
        return cli_fail(2, "bench shuffle: --slots '%s': expected 1..64", v);
      o->slots = (int)n;
    } else if (strcmp(a, "--batch-rows") == 0) {
      if (!cli_parse_int(v, 1, 1 << 24, &n))
        return cli_fail(2, "bench shuffle: --batch-rows '%s': expected 1..16777216", v);
      o->batch_rows = (int32_t)n;
    } else if (strcmp(a, "--seed") == 0) {
      if (!cli_parse_int(v, 0, INT64_MAX, &n))
        return cli_fail(2, "bench shuffle: --seed '%s': expected a non-negative integer", v);
      o->seed = (uint64_t)n;
    } else if (strcmp(a, "--bytes") == 0) {
      if (!cli_parse_bytes(v, &o->bytes) || o->bytes < 1)
        return cli_fail(2, "bench shuffle: --bytes '%s': expected bytes > 0 (e.g. 4M, 2G)", v);
    } else if (strcmp(a, "--memory-limit") == 0) {
      if (!cli_parse_bytes(v, &o->memory_limit))
        return cli_fail(2, "bench shuffle: --memory-limit '%s': expected bytes (e.g. 256M)", v);
    } else if (strcmp(a, "--backend") == 0) {
      if (fsh_task_backend_parse(v, &o->backend, &err) != 0)
        return cli_fail(2, "bench shuffle: --backend: %s", err.message);
      have_backend = true;
    } else if (strcmp(a, "--compression") == 0) {
      if (fsh_compression_parse(v, &o->compression, &err) != 0)
        return cli_fail(2, "bench shuffle: --compression: %s", err.message);
    } else if (strcmp(a, "--spill-dir") == 0) {
      o->spill_dir = v;
    } else if (strcmp(a, "--incremental") == 0) {
      if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0 && strcmp(v, "both") != 0)
        return cli_fail(2, "bench shuffle: --incremental '%s': expected on, off or both", v);
      o->incremental = strcmp(v, "on") == 0;
      o->incremental_both = strcmp(v, "both") == 0;
    } else if (strcmp(a, "--direct") == 0) {
      if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0 && strcmp(v, "both") != 0)
        return cli_fail(2, "bench shuffle: --direct '%s': expected on, off or both", v);
      o->direct_off = strcmp(v, "off") == 0;
      o->direct_both = strcmp(v, "both") == 0;
    } else if (strcmp(a, "--merge") == 0) {
      if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto") && strcmp(v, "both"))
        return cli_fail(2, "bench shuffle: --merge '%s': expected on, off, auto or both", v);
      o->merge = strcmp(v, "on") == 0 ? FSH_SCHED_MERGE_ON : strcmp(v, "off") == 0
                 ? FSH_SCHED_MERGE_OFF : FSH_SCHED_MERGE_AUTO;
      o->merge_both = strcmp(v, "both") == 0;
      if (o->merge_both) o->merge = FSH_SCHED_MERGE_OFF;
    } else if (strcmp(a, "--merge-threshold") == 0) {
      if (!cli_parse_int(v, 1, 1 << 30, &n))
        return cli_fail(2, "bench shuffle: --merge-threshold '%s': expected 1..2^30", v);
      o->merge_threshold = (int32_t)n;
    } else if (strcmp(a, "--reduce-task-bytes") == 0) {
      if (strcmp(v, "auto") == 0) o->reduce_task_bytes = -1;
      else if (!cli_parse_bytes(v, &o->reduce_task_bytes) || o->reduce_task_bytes < 0)
        return cli_fail(2, "bench shuffle: --reduce-task-bytes '%s': expected bytes (0: a task "
                        "per partition; e.g. 64M) or auto", v);
    } else if (strcmp(a, "--maps-per-task") == 0) {
      if (strcmp(v, "auto") == 0) o->maps_per_task = -1;
      else if (cli_parse_int(v, 1, 1 << 22, &n)) o->maps_per_task = (int32_t)n;
      else
        return cli_fail(2, "bench shuffle: --maps-per-task '%s': expected 1..2^22 (1: a task "
                        "per map) or auto", v);
    } else if (strcmp(a, "--worker-pool-idle-ms") == 0 ||
               strcmp(a, "--worker-builders-idle-ms") == 0) {
      if (strcmp(v, "never") != 0 && !cli_parse_int(v, 0, 86400000, &n))
        return cli_fail(2, "bench shuffle: %s '%s': expected milliseconds 0..86400000 or never",
                        a, v);
      if (a[9] == 'p') o->worker_idle_ms = v;
      else o->builders_idle_ms = v;
    } else if (strcmp(a, "--worker-images") == 0) {
      fsh_store_images kind;
      if (!fsh_store_images_parse(v, &kind))
        return cli_fail(2, "bench shuffle: --worker-images '%s': expected vm, memfd, private "
                        "or vm-4k", v);
      o->worker_images = v;
    } else if (strcmp(a, "--fail-worker") == 0) {
      char *end = NULL;
      o->fail_worker = strtod(v, &end);
      if (!end || *end || !(o->fail_worker >= 0 && o->fail_worker <= 1))
        return cli_fail(2, "bench shuffle: --fail-worker '%s': expected a fraction 0..1", v);
    } else {
      cli_fail(2, "bench shuffle: unknown option %s", a);
      return bench_usage();
    }
  }
  if (!o->workers || !o->maps || !o->reduces || !o->bytes || !have_backend) {
    cli_fail(2, "bench shuffle: --workers, --maps, --reduces, --bytes and --backend are required");
    return bench_usage();
  }
  if (o->direct_both && (o->incremental_both || o->backend != FSH_TASK_BACKEND_FLIGHT))
    return cli_fail(2, "bench shuffle: --direct both needs --backend flight and not "
                    "--incremental both");
  if (o->merge_both && (o->incremental_both || o->direct_both || o->fail_worker >= 0 ||
                       o->backend != FSH_TASK_BACKEND_FLIGHT))
    return cli_fail(2, "bench shuffle: --merge both needs --backend flight and not "
                    "--incremental both, --direct both nor --fail-worker");
  if (o->incremental_both && o->fail_worker >= 0)
    return cli_fail(2, "bench shuffle: --fail-worker with --incremental on or off, not both");
  if (o->backend == FSH_TASK_BACKEND_MEMORY &&
      (o->fail_worker >= 0 || o->incremental || o->incremental_both))
    return cli_fail(2, "bench shuffle: --fail-worker and --incremental need workers (fs, flight)");
  if (o->fail_worker >= 0 && o->workers < 2)
    return cli_fail(2, "bench shuffle: --fail-worker needs at least 2 workers");
  if ((o->worker_idle_ms || o->builders_idle_ms) && o->backend == FSH_TASK_BACKEND_MEMORY)
    return cli_fail(2, "bench shuffle: --worker-pool-idle-ms and --worker-builders-idle-ms "
                    "need workers (fs, flight)");
  return 0;
}

/* ---- time, signals, temp directory ------------------------------------- */

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Written by the main thread (pids with every signal blocked); read by the
 * handler (kill is async-signal-safe). */
static volatile sig_atomic_t g_interrupted;
static cli_child *g_procs; /* [g_n_pids] */
static volatile sig_atomic_t g_n_pids;

static void on_signal(int sig) {
  g_interrupted = sig;
  for (int i = 0; i < g_n_pids; i++)
    if (g_procs[i].pid > 0) kill(g_procs[i].pid, SIGTERM);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  remove(path);
  return 0;
}

static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- the cluster ------------------------------------------------------- */

typedef struct worker_proc {
  char log[4200];
} worker_proc;

typedef struct cluster {
  int n;
  cli_child proc[BENCH_MAX_WORKERS]; /* pid and URI of worker i */
  worker_proc w[BENCH_MAX_WORKERS];
  char tmp[4096]; /* the per-invocation temp directory ("" if none) */
  char fs_dir[4200];
  fsh_sched_driver *driver; /* in-process; the workers join it */
  int killed;               /* the worker --fail-worker killed, or -1 */
} cluster;
static cluster *g_cluster; /* for stopped() */

/* Prints the tail of a worker's log to stderr. */
static void print_log(const cluster *c, int i) {
  FILE *f = fopen(c->w[i].log, "r");
  if (!f) return;
  char buf[4096];
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  if (n > 0)
    fprintf(stderr, "--- log of worker pid %d (%s):\n%s", (int)c->proc[i].pid, c->proc[i].uri,
            buf);
}

static bool interrupted(void *arg) {
  (void)arg;
  return g_interrupted != 0;
}

/* Starts worker i: fork + exec of this executable, stdout a pipe, stderr
 * its log file. Signals stay blocked while the pid is being recorded. */
static int start_worker(cluster *c, int i, const bench_opts *o) {
  worker_proc *w = &c->w[i];
  char spill[4200], limit[32], threads[16];
  snprintf(spill, sizeof spill, "%s/w%d", c->tmp, i);
  snprintf(w->log, sizeof w->log, "%s/w%d.log", c->tmp, i);
  snprintf(limit, sizeof limit, "%" PRId64, o->memory_limit >= 0 ? o->memory_limit
                                                                 : (int64_t)1 << 50);
  snprintf(threads, sizeof threads, "%d", o->slots + 4);
  char *args[24];
  int k = 0;
  args[k++] = (char *)"flightshuffle";
  args[k++] = (char *)"worker";
  args[k++] = (char *)"--listen";
  args[k++] = (char *)"127.0.0.1:0";
  args[k++] = (char *)"--spill-dir";
  args[k++] = spill;
  args[k++] = (char *)"--memory-limit";
  args[k++] = limit;
  args[k++] = (char *)"--threads";
  args[k++] = threads;
  args[k++] = (char *)"--direct-reads";
  args[k++] = (char *)(o->direct_off ? "off" : "on");
  if (o->backend == FSH_TASK_BACKEND_FS) {
    args[k++] = (char *)"--fs-dir";
    args[k++] = c->fs_dir;
  }
  if (o->worker_idle_ms) {
    args[k++] = (char *)"--pool-idle-ms";
    args[k++] = (char *)o->worker_idle_ms;
  }
  if (o->builders_idle_ms || o->worker_idle_ms) {
    args[k++] = (char *)"--builders-idle-ms";
    args[k++] = (char *)(o->builders_idle_ms ? o->builders_idle_ms : o->worker_idle_ms);
  }
  if (o->worker_images) {
    args[k++] = (char *)"--images";
    args[k++] = (char *)o->worker_images;
  }
  args[k++] = (char *)"--driver";
  args[k++] = (char *)fsh_sched_driver_uri(c->driver);
  args[k] = NULL;
  cli_child_options co = {.who = "bench shuffle", .stderr_log = w->log, .timeout_s = 30,
                          .interrupted = interrupted};
  g_n_pids = i + 1; /* the handler sees its pid once recorded */
  int rc = cli_child_start((const char *const *)args, &co, &c->proc[i]);
  if (c->proc[i].pid <= 0) g_n_pids = i;
  if (rc == CLI_CHILD_NO_URI) {
    if (g_interrupted) return 130;
    cli_fail(1, "bench shuffle: worker %d (pid %d) did not say where it listens", i,
             (int)c->proc[i].pid);
    print_log(c, i);
    return 1;
  }
  if (rc != 0) return rc;
  return 0;
}

/* After cli_children_stop reaped worker i; arg: bool show_logs. */
static void stopped(const cli_child *w, int i, void *arg) {
  bool show_logs = *(const bool *)arg;
  if (i == g_cluster->killed) return; /* --fail-worker's victim */
  if (w->killed)
    fprintf(stderr, "flightshuffle: bench shuffle: worker pid %d did not stop in time: "
            "killed\n", (int)w->pid);
  bool clean = !w->killed && WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0;
  if (!w->killed && !clean)
    fprintf(stderr, "flightshuffle: bench shuffle: worker pid %d ended with %s %d\n",
            (int)w->pid, WIFEXITED(w->status) ? "status" : "signal",
            WIFEXITED(w->status) ? WEXITSTATUS(w->status) : WTERMSIG(w->status));
  if (show_logs || (!w->killed && !clean)) print_log(g_cluster, i);
}

/* Stops every worker (SIGTERM, then SIGKILL after 10 s), reaps them, and
 * removes the temp directory. Safe on a partly started cluster. */
static void cluster_stop(cluster *c, bool show_logs) {
  cli_children_stop(c->proc, c->n, 10, stopped, &show_logs);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (int i = 0; i < c->n; i++) c->proc[i].pid = 0;
  g_n_pids = 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  fsh_sched_driver_stop(c->driver, 2000);
  c->driver = NULL;
  if (c->tmp[0]) rm_rf(c->tmp);
  c->tmp[0] = '\0';
  c->n = 0;
}

static int await_registration(cluster *c);

/* A temp directory, the in-process driver and o->workers workers (direct
 * reads as o->direct_off says), registered: 0 or an error printed (the
 * caller stops what was started with cluster_stop). */
static int cluster_start(cluster *c, const bench_opts *o) {
  fsh_error err;
  c->killed = -1;
  snprintf(c->tmp, sizeof c->tmp, "%s/fsh-bench-XXXXXX", o->spill_dir ? o->spill_dir : "/tmp");
  if (!mkdtemp(c->tmp)) {
    int rc = cli_fail(1, "bench shuffle: creating a temp directory %s: %s", c->tmp,
                      strerror(errno));
    c->tmp[0] = '\0';
    return rc;
  }
  snprintf(c->fs_dir, sizeof c->fs_dir, "%s/fs", c->tmp);
  fsh_sched_driver_options dopt = {.listen = "127.0.0.1:0", .heartbeat_timeout_ms = 1500,
                                   .n_threads = 4};
  if (fsh_sched_driver_start(&dopt, &c->driver, &err) != 0)
    return cli_fail(1, "bench shuffle: driver: %s", err.message);
  int status = 0;
  for (int i = 0; i < o->workers && status == 0; i++) {
    status = start_worker(c, i, o);
    c->n = i + 1;
  }
  if (status == 0) status = await_registration(c);
  return status;
}

/* Waits until the driver knows every worker (alive); 0 or an error printed. */
static int await_registration(cluster *c) {
  for (int waited = 0;; waited += 20) {
    fsh_sched_worker_list l;
    fsh_error err;
    if (fsh_sched_driver_workers(c->driver, &l, &err) != 0)
      return cli_fail(1, "bench shuffle: driver: %s", err.message);
    int64_t alive = fsh_sched_worker_list_alive(&l);
    fsh_sched_worker_list_reset(&l);
    if (alive >= c->n) return 0;
    if (g_interrupted) return 130;
    if (waited > 15000)
      return cli_fail(1, "bench shuffle: only %lld of %d workers registered with the driver in "
                      "15 s", (long long)alive, c->n);
    usleep(20000);
  }
}

/* ---- one shuffle ------------------------------------------------------- */

typedef struct run_ctx {
  const bench_opts *o;
  cluster *c;
  fsh_shuffle_backend *mem; /* memory backend, else NULL */
  uint64_t shuffle_id;
  int32_t batch_rows;
  int64_t total_batches;
  fsh_map_task_result *maps;       /* [M] */
  fsh_reduce_task_result *reduces; /* [R] */
  /* task dispatch */
  pthread_mutex_t mu;
  int phase;          /* 0 map, 1 reduce */
  int next_any;       /* memory backend: the next task */
  atomic_int failed;
  int fail_rc;
  char fail_msg[1200];
} run_ctx;


static void fail(run_ctx *r, int rc, const char *fmt, ...) FSH_PRINTF(3, 4);
static void fail(run_ctx *r, int rc, const char *fmt, ...) {
  pthread_mutex_lock(&r->mu);
  if (!atomic_load(&r->failed)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fail_msg, sizeof r->fail_msg, fmt, ap);
    va_end(ap);
    r->fail_rc = rc;
    atomic_store(&r->failed, 1);
  }
  pthread_mutex_unlock(&r->mu);
}

static fsh_map_task map_task(const run_ctx *r, int m) {
  const bench_opts *o = r->o;
  int64_t b0 = r->total_batches * m / o->maps, b1 = r->total_batches * (m + 1) / o->maps;
  return (fsh_map_task){.shuffle_id = r->shuffle_id, .map_id = m, .attempt = 0,
                        .n_partitions = o->reduces, .first_row = b0 * r->batch_rows,
                        .rows = (b1 - b0) * r->batch_rows, .batch_rows = r->batch_rows,
                        .seed = o->seed, .compression = o->compression, .backend = o->backend};
}

/* The reduce task of partition p (borrows the locations of r->maps). */
static int reduce_task(const run_ctx *r, int32_t p, fsh_reduce_task *t, fsh_error *err) {
  int M = r->o->maps;
  *t = (fsh_reduce_task){.shuffle_id = r->shuffle_id, .partition = p,
                         .n_partitions = r->o->reduces, .backend = r->o->backend};
  t->sources = calloc((size_t)M, sizeof *t->sources);
  t->locations = calloc((size_t)M, sizeof *t->locations);
  if (!t->sources || !t->locations) {
    free(t->sources), free(t->locations);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  for (int m = 0; m < M; m++) {
    const fsh_map_output *out = &r->maps[m].output;
    if (out->rows[p] == 0 && out->bytes[p] == 0) continue;
    int32_t loc = 0;
    while (loc < t->n_locations && strcmp(t->locations[loc], out->location) != 0) loc++;
    if (loc == t->n_locations) t->locations[t->n_locations++] = out->location;
    t->sources[t->n_sources++] = (fsh_reduce_source){
        .map_id = out->map_id, .attempt = out->attempt, .location = loc,
        .rows = out->rows[p], .bytes = out->bytes[p], .checksum = out->checksums[p]};
  }
  return 0;
}

/* Runs task `i` of the current phase in-process (the memory backend; a
 * cluster runs its tasks as a job of the driver, one_run_driver). */
static void run_task(run_ctx *r, int i) {
  fsh_error err = {{0}};
  int rc = 0;
  fsh_reduce_task rt = {0};
  if (r->phase == 0) {
    fsh_map_task t = map_task(r, i);
    rc = fsh_map_task_run(r->mem, &t, &r->maps[i], &err);
  } else {
    rc = reduce_task(r, i, &rt, &err);
    if (rc == 0) rc = fsh_reduce_task_run(r->mem, &rt, &r->reduces[i], &err);
    free(rt.sources), free(rt.locations); /* the strings are the maps' */
  }
  if (rc != 0)
    fail(r, rc, "%s task %d: %s", r->phase == 0 ? "map" : "reduce", i, err.message);
}

static void *task_thread(void *arg) {
  run_ctx *r = arg;
  int n_tasks = r->phase == 0 ? r->o->maps : r->o->reduces;
  for (;;) {
    if (atomic_load(&r->failed) || g_interrupted) break;
    pthread_mutex_lock(&r->mu);
    int i = r->next_any++;
    pthread_mutex_unlock(&r->mu);
    if (i >= n_tasks) break;
    run_task(r, i);
  }
  return NULL;
}

/* Runs the phase's tasks on N threads (the memory backend); seconds, or
 * < 0 on failure (r->failed). */
static double run_phase(run_ctx *r, int phase) {
  r->phase = phase;
  r->next_any = 0;
  int n_threads = r->o->workers;
  pthread_t *th = calloc((size_t)n_threads, sizeof *th);
  double t0 = now_sec();
  int started = 0;
  for (int i = 0; th && i < n_threads; i++) {
    if (pthread_create(&th[i], NULL, task_thread, r) != 0) {
      fail(r, EAGAIN, "cannot start a task thread");
      break;
    }
    started++;
  }
  if (!th) fail(r, ENOMEM, "out of memory");
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  double secs = now_sec() - t0;
  free(th);
  if (g_interrupted && !atomic_load(&r->failed)) fail(r, EINTR, "interrupted");
  return atomic_load(&r->failed) ? -1 : secs;
}

/* ---- baselines --------------------------------------------------------- */

typedef struct sock_recv {
  int listen_fd;
  int64_t bytes, got;
} sock_recv;

static void *sock_receiver(void *arg) {
  sock_recv *s = arg;
  int fd = accept(s->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  size_t cap = 1 << 20;
  char *buf = malloc(cap);
  while (buf && s->got < s->bytes) {
    ssize_t n = recv(fd, buf, cap, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s->got += n;
  }
  free(buf);
  close(fd);
  return NULL;
}

/* A raw loopback TCP copy of `bytes` (one connection); GB/s or < 0. */
static double socket_copy(int64_t bytes) {
  sock_recv s = {.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), .bytes = bytes};
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (s.listen_fd < 0 || bind(s.listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(s.listen_fd, 1) != 0 || getsockname(s.listen_fd, (struct sockaddr *)&a, &len) != 0) {
    if (s.listen_fd >= 0) close(s.listen_fd);
    return -1;
  }
  pthread_t th;
  if (pthread_create(&th, NULL, sock_receiver, &s) != 0) {
    close(s.listen_fd);
    return -1;
  }
  size_t cap = 1 << 20;
  char *buf = calloc(1, cap);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  double t0 = now_sec();
  int64_t sent = 0;
  if (buf && fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
    while (sent < bytes) {
      size_t n = bytes - sent < (int64_t)cap ? (size_t)(bytes - sent) : cap;
      ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      sent += w;
    }
  }
  if (fd >= 0) shutdown(fd, SHUT_WR);
  if (sent < bytes) shutdown(s.listen_fd, SHUT_RDWR); /* unblock accept */
  pthread_join(th, NULL);
  double secs = now_sec() - t0;
  if (fd >= 0) close(fd);
  close(s.listen_fd);
  free(buf);
  return s.got == bytes ? (double)bytes / secs / 1e9 : -1;
}

/* A plain sequential write of `bytes` (4 MiB writes, then fsync) into dir;
 * GB/s or < 0. */
static double file_write(const char *dir, int64_t bytes) {
  char path[4200];
  snprintf(path, sizeof path, "%s/baseline.bin", dir);
  const size_t chunk = 4 << 20;
  char *buf = malloc(chunk);
  if (!buf) return -1;
  for (size_t i = 0; i < chunk; i++) buf[i] = (char)(i * 131 + 7);
  double t0 = now_sec();
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  int64_t done = 0;
  while (fd >= 0 && done < bytes) {
    size_t n = bytes - done < (int64_t)chunk ? (size_t)(bytes - done) : chunk;
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += w;
  }
  bool ok = fd >= 0 && done == bytes && fsync(fd) == 0;
  if (fd >= 0 && close(fd) != 0) ok = false;
  double secs = now_sec() - t0;
  unlink(path);
  free(buf);
  return ok ? (double)bytes / secs / 1e9 : -1;
}

/* ---- the command ------------------------------------------------------- */

typedef struct run_stats {
  double total, map, reduce, gbps, socket_gbps, file_gbps;
  double first_fetch_ms, idle_gap_ms; /* first map output -> first reduce; gap between phases */
  int64_t spilled, table_bytes, rows;
  int32_t recomputed, retried;
  bool verified;
  double merges, merged_outputs; /* the pre-shuffle merge's (counts) */
  int32_t reduce_tasks;          /* of the last stage (coalesced reduces: the runs) */
  int32_t map_tasks;             /* of the map stage (coalesced maps: the runs) */
  double worker_cpu_s_per_gb;    /* the workers' CPU seconds (user + system) per table GB */
  int64_t pooled_memfds, pooled_bytes; /* in the workers' pools as the run began (flight) */
} run_stats;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* min, median, max of field `off` over the runs. */
static void summarize(const run_stats *s, int n, size_t off, double out[3]) {
  double *v = calloc((size_t)n, sizeof *v);
  if (!v) {
    out[0] = out[1] = out[2] = 0;
    return;
  }
  for (int i = 0; i < n; i++) v[i] = *(const double *)(const void *)((const char *)&s[i] + off);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  out[0] = v[0], out[1] = v[n / 2], out[2] = v[n - 1];
  free(v);
}

/* Releases the shuffle of the memory backend; 0 or an error printed. (A
 * cluster's job releases its shuffles itself.) */
static int release_shuffle(run_ctx *r) {
  fsh_error err;
  return fsh_shuffle_release(r->mem, r->shuffle_id, &err) == 0
             ? 0 : cli_fail(1, "bench shuffle: release: %s", err.message);
}

/* What the workers' stores pool for reuse (their "stats": released images'
 * memfds, store.c) as a run begins: the sums over the workers alive, into
 * st; best effort (a worker that does not answer counts 0). */
static void pool_before_run(const cluster *c, run_stats *st) {
  st->pooled_memfds = st->pooled_bytes = 0;
  for (int i = 0; i < c->n; i++) {
    if (i == c->killed) continue;
    fsh_flight_client_options co = {.uri = c->proc[i].uri, .timeout_ms = 5000};
    fsh_flight_client *cl = NULL;
    fsh_flight_result_list res = {0};
    fsh_error err;
    fsh_flight_action a = {.type = (char *)"stats"};
    if (fsh_flight_client_open(&co, &cl, &err) == 0 &&
        fsh_flight_do_action(cl, &a, &res, &err) == 0 && res.n > 0) {
      char line[320];
      size_t n = (size_t)res.items[0].size < sizeof line - 1 ? (size_t)res.items[0].size
                                                             : sizeof line - 1;
      memcpy(line, res.items[0].data, n);
      line[n] = '\0';
      const char *p = strstr(line, "pooled_memfds=");
      long long m = 0, b = 0;
      if (p && sscanf(p, "pooled_memfds=%lld pooled_bytes=%lld", &m, &b) == 2) {
        st->pooled_memfds += m;
        st->pooled_bytes += b;
      }
    }
    fsh_flight_result_list_reset(&res);
    fsh_flight_client_close(cl);
  }
}

/* The CPU seconds (user + system) of the workers alive so far. */
static double workers_cpu(const cluster *c) {
  double s = 0;
  for (int i = 0; i < c->n; i++)
    if (i != c->killed) s += cli_proc_cpu_seconds(c->proc[i].pid);
  return s;
}

/* One run on the cluster, as a job of the driver: submit, wait (killing a
 * worker once --fail-worker's fraction of the maps is done), verify from
 * the job's summary (per partition: the maps' rows and row checksums ==
 * the reduce's; in all: the rows generated), print. 0, 1 or 130. */
static int one_run_driver(run_ctx *r, int run, run_stats *st) {
  const bench_opts *o = r->o;
  cluster *c = r->c;
  fsh_error err;
  int64_t rows = r->total_batches * r->batch_rows;
  fsh_sched_shuffle_job sj = {.name = "bench shuffle", .maps = o->maps, .reduces = o->reduces,
                              .rows = rows, .batch_rows = r->batch_rows, .seed = o->seed,
                              .compression = o->compression, .backend = o->backend,
                              .slots_per_worker = o->slots, .incremental = o->incremental,
                              .merge = o->merge, .merge_threshold = o->merge_threshold,
                              .reduce_task_bytes = o->reduce_task_bytes,
                              .maps_per_task = o->maps_per_task};
  fsh_buffer *plan = NULL;
  uint64_t job = 0;
  if (o->backend == FSH_TASK_BACKEND_FLIGHT) pool_before_run(c, st);
  double cpu0 = workers_cpu(c);
  double t0 = now_sec();
  if (fsh_sched_shuffle_job_plan(&sj, &plan, &err) != 0 ||
      fsh_sched_driver_submit(c->driver, plan->data, plan->size, &job, &err) != 0) {
    fsh_buffer_unref(plan);
    return cli_fail(1, "bench shuffle: %s", err.message);
  }
  fsh_buffer_unref(plan);
  /* (of the map stage's tasks: with coalesced maps fewer than --maps) */
  int fail_at = -1, map_tasks = o->maps;
  for (;;) {
    if (g_interrupted) return cli_fail(130, "bench shuffle: interrupted");
    int64_t wait_ms = o->fail_worker >= 0 && c->killed < 0 ? 5 : 500;
    int rc = fsh_sched_driver_wait_job(c->driver, job, wait_ms, &err);
    if (rc == 0) break;
    if (rc != ETIMEDOUT) return cli_fail(1, "bench shuffle: %s", err.message);
    if (o->fail_worker < 0 || c->killed >= 0) continue;
    fsh_sched_job_status js;
    if (fsh_sched_driver_job_status(c->driver, job, false, &js, &err) != 0)
      return cli_fail(1, "bench shuffle: %s", err.message);
    if (js.n_stages > 0) map_tasks = js.stages[0].tasks_total;
    fail_at = (int)(o->fail_worker * map_tasks + 0.5);
    bool now = js.n_stages > 0 && js.stages[0].tasks_done >= fail_at;
    fsh_sched_job_status_reset(&js);
    if (now) {
      int victim = c->n - 1;
      printf("  killing worker %d (pid %d %s) with SIGKILL: %d of %d map tasks done\n", victim,
             (int)c->proc[victim].pid, c->proc[victim].uri, fail_at, map_tasks);
      fflush(stdout);
      kill(c->proc[victim].pid, SIGKILL);
      c->killed = victim;
    }
  }
  double waited = now_sec() - t0;
  double cpu = workers_cpu(c) - cpu0; /* (a killed worker's CPU is not counted) */
  fsh_sched_job_status js;
  if (fsh_sched_driver_job_status(c->driver, job, true, &js, &err) != 0)
    return cli_fail(1, "bench shuffle: %s", err.message);
  st->total = js.seconds > 0 && js.seconds <= waited ? js.seconds : waited; /* submit .. end */
  int status = 0;
  if (js.state != FSH_SCHED_JOB_SUCCEEDED) {
    fsh_sched_job_status_print(&js, stderr);
    status = cli_fail(1, "bench shuffle: job %" PRIu64 " failed: %s", job,
                      js.error ? js.error : "?");
    fsh_sched_job_status_reset(&js);
    return status;
  }
  /* verification, independently of the job's own verdict */
  st->verified = js.n_partitions == o->reduces && js.input_rows == rows;
  int64_t map_rows = 0, reduce_rows = 0;
  for (int32_t p = 0; p < js.n_partitions; p++) {
    const fsh_sched_partition_check *pc = &js.partitions[p];
    map_rows += pc->map_rows;
    reduce_rows += pc->reduce_rows;
    if (pc->map_rows != pc->reduce_rows || pc->map_checksum != pc->reduce_checksum) {
      if (st->verified)
        fprintf(stderr, "flightshuffle: bench shuffle: partition %d: maps wrote %" PRId64
                " rows (checksum %016" PRIx64 "), the reduce read %" PRId64 " (%016" PRIx64
                ")\n", p, pc->map_rows, pc->map_checksum, pc->reduce_rows, pc->reduce_checksum);
      st->verified = false;
    }
  }
  if (map_rows != rows || reduce_rows != rows) st->verified = false;
  if (st->verified != js.verified) st->verified = false;
  st->rows = js.input_rows;
  st->table_bytes = js.input_bytes;
  st->map = js.n_stages > 0 ? js.stages[0].seconds : 0;
  st->reduce = js.n_stages > 1 ? js.stages[1].seconds : 0;
  st->first_fetch_ms = (js.first_reduce_start_s - js.first_map_output_s) * 1e3;
  st->idle_gap_ms = (js.first_reduce_start_s - js.last_map_output_s) * 1e3;
  if (st->idle_gap_ms < 0) st->idle_gap_ms = 0;
  st->recomputed = js.n_recomputed;
  st->retried = js.n_retried;
  st->gbps = (double)st->table_bytes / st->total / 1e9;
  st->spilled = js.bytes_spilled;
  printf("run %d: total %.3f s (map %.3f s, reduce %.3f s; task time map %.3f s, reduce %.3f "
         "s) %.3f GB/s; socket copy %.3f GB/s (%.2fx)", run + 1, st->total, st->map, st->reduce,
         js.n_stages > 0 ? js.stages[0].task_seconds : 0,
         js.n_stages > 1 ? js.stages[1].task_seconds : 0, st->gbps, st->socket_gbps,
         st->gbps / st->socket_gbps);
  if (st->file_gbps > 0) printf("; file write %.3f GB/s", st->file_gbps);
  printf("; spilled %" PRId64 " B; verified %s\n", st->spilled, st->verified ? "yes" : "no");
  printf("  first map output -> first reduce start %.1f ms; idle gap between the phases %.1f "
         "ms; tasks retried %d, recomputed %d\n", st->first_fetch_ms, st->idle_gap_ms,
         js.n_retried, js.n_recomputed);
  st->worker_cpu_s_per_gb = st->table_bytes > 0 ? cpu / ((double)st->table_bytes / 1e9) : 0;
  printf("  workers' CPU %.2f s (%.3f s per GB)", cpu, st->worker_cpu_s_per_gb);
  if (o->backend == FSH_TASK_BACKEND_FLIGHT)
    printf("; pool %s as the run began: %" PRId64 " memfds, %.1f MB pooled in the workers "
           "(--worker-pool-idle-ms %s)", st->pooled_memfds > 0 ? "warm" : "cold",
           st->pooled_memfds, (double)st->pooled_bytes / 1e6,
           o->worker_idle_ms ? o->worker_idle_ms : "default");
  printf("\n");
  st->reduce_tasks = js.n_stages > 1 ? js.stages[js.n_stages - 1].tasks_total : 0;
  st->map_tasks = js.n_stages > 0 ? js.stages[0].tasks_total : 0;
  char per[32] = "auto";
  if (o->maps_per_task >= 0) snprintf(per, sizeof per, "%d", o->maps_per_task);
  printf("  map tasks %d over %d maps (--maps-per-task %s)\n", st->map_tasks, o->maps, per);
  char target[32] = "auto";
  if (o->reduce_task_bytes >= 0) snprintf(target, sizeof target, "%" PRId64, o->reduce_task_bytes);
  printf("  reduce tasks %d over %d partitions (--reduce-task-bytes %s)\n", st->reduce_tasks,
         js.n_partitions, target);
  st->merges = (double)js.merges;
  st->merged_outputs = (double)js.merged_outputs;
  printf("  pre-shuffle merge %s: %" PRId64 " merges of %" PRId64 " map outputs (%" PRId64
         " bytes), %" PRId64 " failed\n", o->merge == FSH_SCHED_MERGE_ON ? "on" :
         o->merge == FSH_SCHED_MERGE_OFF ? "off" : "auto", js.merges, js.merged_outputs,
         js.merged_bytes, js.merges_failed);
  for (int32_t i = 0; i < js.n_recomputed; i++)
    printf("  recomputed: stage %u task %d (attempt %d): %s\n", js.recomputed[i].stage_id,
           js.recomputed[i].task, js.recomputed[i].attempt, js.recomputed[i].reason);
  for (int32_t i = 0; i < js.n_retried; i++)
    printf("  retried: stage %u task %d (attempt %d): %s\n", js.retried[i].stage_id,
           js.retried[i].task, js.retried[i].attempt, js.retried[i].reason);
  fflush(stdout);
  fsh_sched_job_status_reset(&js);
  return 0;
}

/* One run: maps, reduces, verification, stats, release. 0, 1 or 130. */
static int one_run(run_ctx *r, int run, run_stats *st) {
  const bench_opts *o = r->o;
  int M = o->maps, R = o->reduces;
  memset(st, 0, sizeof *st);
  st->socket_gbps = socket_copy(o->bytes);
  if (r->c && r->c->tmp[0]) st->file_gbps = file_write(r->c->tmp, o->bytes);
  if (!r->mem) return one_run_driver(r, run, st);
  r->shuffle_id = BENCH_SHUFFLE_BASE + (uint64_t)run;
  r->maps = calloc((size_t)M, sizeof *r->maps);
  r->reduces = calloc((size_t)R, sizeof *r->reduces);
  int status = 0;
  if (!r->maps || !r->reduces) {
    status = cli_fail(1, "bench shuffle: out of memory");
    goto done;
  }
  st->map = run_phase(r, 0);
  if (st->map >= 0) st->reduce = run_phase(r, 1);
  if (st->map < 0 || st->reduce < 0) {
    status = g_interrupted ? 130 : 1;
    if (g_interrupted) cli_fail(130, "bench shuffle: interrupted");
    else cli_fail(1, "bench shuffle: %s", r->fail_msg);
    goto done;
  }
  st->total = st->map + st->reduce;
  st->reduce_tasks = r->o->reduces; /* in-process: a task per partition */
  st->verified = true;
  for (int m = 0; m < M; m++) st->table_bytes += r->maps[m].input_bytes;
  for (int m = 0; m < M; m++) st->rows += r->maps[m].input_rows;
  int64_t rows_read = 0;
  for (int32_t p = 0; p < R; p++) {
    int64_t rows = 0;
    uint64_t sum = 0;
    for (int m = 0; m < M; m++) rows += r->maps[m].output.rows[p];
    for (int m = 0; m < M; m++) sum += r->maps[m].row_checksums[p];
    rows_read += r->reduces[p].rows;
    if (rows != r->reduces[p].rows || sum != r->reduces[p].checksum) {
      if (st->verified)
        fprintf(stderr, "flightshuffle: bench shuffle: partition %d: maps wrote %" PRId64
                " rows (checksum %016" PRIx64 "), the reduce read %" PRId64 " (%016" PRIx64
                ")\n", p, rows, sum, r->reduces[p].rows, r->reduces[p].checksum);
      st->verified = false;
    }
  }
  if (rows_read != st->rows) st->verified = false;
  st->gbps = (double)st->table_bytes / st->total / 1e9;
  st->spilled = 0;
  double map_task = 0, reduce_task = 0;
  for (int m = 0; m < M; m++) map_task += (double)r->maps[m].nanos * 1e-9;
  for (int p = 0; p < R; p++) reduce_task += (double)r->reduces[p].nanos * 1e-9;
  printf("run %d: total %.3f s (map %.3f s, reduce %.3f s; task time map %.3f s, reduce %.3f "
         "s) %.3f GB/s; socket copy %.3f GB/s (%.2fx)", run + 1, st->total, st->map, st->reduce,
         map_task, reduce_task, st->gbps, st->socket_gbps, st->gbps / st->socket_gbps);
  if (st->file_gbps > 0) printf("; file write %.3f GB/s", st->file_gbps);
  printf("; spilled %" PRId64 " B; verified %s\n", st->spilled, st->verified ? "yes" : "no");
  fflush(stdout);
  status = release_shuffle(r);
done:
  for (int m = 0; r->maps && m < M; m++) fsh_map_task_result_reset(&r->maps[m]);
  free(r->maps);
  free(r->reduces);
  r->maps = NULL;
  r->reduces = NULL;
  return status;
}

/* Rows per batch: up to 64 Ki, at least one batch per map when possible. */
static int32_t pick_batch_rows(const bench_opts *o, double bytes_per_row) {
  double rows = (double)o->bytes / bytes_per_row;
  double per_map = rows / o->maps;
  if (o->batch_rows) return o->batch_rows;
  if (per_map >= 65536) return 65536;
  return per_map < 1 ? 1 : (int32_t)(per_map + 0.999);
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "shuffle") != 0) {
    cli_fail(2, "bench: expected 'shuffle'");
    return bench_usage();
  }
  bench_opts o;
  int status = parse_opts(argc, argv, &o);
  if (status != 0) return status;

  /* bytes per row of the synthetic table, from one sample batch */
  fsh_error err;
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_batch *sample = NULL;
  fsh_synthetic_options so = {.seed = o.seed, .with_nulls = true};
  if (!schema || fsh_synthetic_batch(schema, &so, 0, 65536, &sample, &err) != 0) {
    fsh_schema_unref(schema);
    return cli_fail(1, "bench shuffle: generating a sample: %s", schema ? err.message : "ENOMEM");
  }
  double bpr = 0;
  for (int64_t c = 0; c < sample->n_columns; c++) {
    const fsh_array *a = sample->columns[c];
    for (int k = 0; k < 3; k++)
      if (a->buffers[k]) bpr += (double)a->buffers[k]->size;
  }
  bpr /= (double)sample->length;
  fsh_batch_unref(sample);
  fsh_schema_unref(schema);

  run_ctx r = {.o = &o};
  r.batch_rows = pick_batch_rows(&o, bpr);
  int64_t rows = (int64_t)((double)o.bytes / bpr) + 1;
  r.total_batches = (rows + r.batch_rows - 1) / r.batch_rows;
  if (pthread_mutex_init(&r.mu, NULL) != 0) return cli_fail(1, "bench shuffle: mutex");

  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int, old_term;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  signal(SIGPIPE, SIG_IGN);

  static cluster c;
  memset(&c, 0, sizeof c);
  c.killed = -1;
  r.c = &c;
  g_cluster = &c;
  g_procs = c.proc;
  if (o.backend == FSH_TASK_BACKEND_MEMORY) {
    if (fsh_shuffle_memory_new(&r.mem, &err) != 0) {
      status = cli_fail(1, "bench shuffle: %s", err.message);
      goto out;
    }
  } else {
    if (o.direct_both) o.direct_off = true; /* each run starts with off */
    status = cluster_start(&c, &o);
    if (status != 0) goto out;
  }
  char limit[48] = "none";
  if (o.memory_limit >= 0) snprintf(limit, sizeof limit, "%" PRId64 " bytes", o.memory_limit);
  printf("bench shuffle: backend %s, %d %s, %d maps x %d reduces, %" PRId64 " bytes "
         "(%" PRId64 " rows in %" PRId64 " batches of %d), compression %s, memory limit per "
         "worker %s, %d run%s%s%s\n",
         fsh_task_backend_name(o.backend), o.workers, r.mem ? "threads" : "workers", o.maps,
         o.reduces, o.bytes, r.total_batches * r.batch_rows, r.total_batches, r.batch_rows,
         fsh_compression_name(o.compression), limit, o.runs, o.runs == 1 ? "" : "s",
         c.tmp[0] ? ", temp dir " : "", c.tmp);
  for (int i = 0; i < c.n; i++)
    printf("  worker %d: pid %d %s\n", i, (int)c.proc[i].pid, c.proc[i].uri);
  fflush(stdout);

  run_stats *st = calloc((size_t)o.runs, sizeof *st);
  run_stats *st_on = calloc((size_t)o.runs, sizeof *st_on); /* --incremental / --direct
                                                                both (direct: the off runs) */
  if (!st || !st_on) {
    status = cli_fail(1, "bench shuffle: out of memory");
    goto out;
  }
  bool verified = true;
  int64_t spilled = 0;
  for (int i = 0; i < o.runs && status == 0; i++) {
    if (o.direct_both) {
      /* the mode of the cluster running, then the other on a new cluster:
       * off, on | on, off | ... -- neither mode always runs second (after
       * the other's writes, e.g. spill files still being written back) */
      for (int half = 0; half < 2 && status == 0; half++) {
        bool off = o.direct_off;
        run_stats *x = off ? &st_on[i] : &st[i];
        printf("direct reads %s:\n", off ? "off" : "on");
        status = one_run(&r, i, x);
        verified = verified && x->verified;
        if (x->spilled > spilled) spilled = x->spilled;
        if (half == 0 && status == 0) {
          cluster_stop(&c, false);
          o.direct_off = !off;
          status = cluster_start(&c, &o);
        }
      }
      continue;
    }
    if (o.incremental_both) printf("incremental off:\n");
    if (o.incremental_both) o.incremental = false;
    if (o.merge_both) printf("pre-shuffle merge off:\n");
    status = one_run(&r, i, &st[i]);
    if (status == 0 && o.merge_both) { /* then on, into st_on */
      printf("pre-shuffle merge on:\n");
      o.merge = FSH_SCHED_MERGE_ON;
      status = one_run(&r, i, &st_on[i]);
      verified = verified && st_on[i].verified;
      o.merge = FSH_SCHED_MERGE_OFF;
    }
    verified = verified && st[i].verified;
    if (st[i].spilled > spilled) spilled = st[i].spilled;
    if (status == 0 && o.incremental_both) {
      printf("incremental on:\n");
      o.incremental = true;
      status = one_run(&r, i, &st_on[i]);
      verified = verified && st_on[i].verified;
      o.incremental = false;
    }
  }
  if (status == 0) {
    double tot[3], map[3], red[3], gb[3], sock[3], file[3], ff[3], gap[3];
    summarize(st, o.runs, offsetof(run_stats, first_fetch_ms), ff);
    summarize(st, o.runs, offsetof(run_stats, idle_gap_ms), gap);
    int recomputed = 0;
    for (int i = 0; i < o.runs; i++) recomputed += st[i].recomputed;
    summarize(st, o.runs, offsetof(run_stats, total), tot);
    summarize(st, o.runs, offsetof(run_stats, map), map);
    summarize(st, o.runs, offsetof(run_stats, reduce), red);
    summarize(st, o.runs, offsetof(run_stats, gbps), gb);
    summarize(st, o.runs, offsetof(run_stats, socket_gbps), sock);
    summarize(st, o.runs, offsetof(run_stats, file_gbps), file);
    double cpu_gb[3];
    summarize(st, o.runs, offsetof(run_stats, worker_cpu_s_per_gb), cpu_gb);
    int warm_runs = 0;
    for (int i = 0; i < o.runs; i++) warm_runs += st[i].pooled_memfds > 0;
    printf("summary over %d run%s (min / median / max):\n", o.runs, o.runs == 1 ? "" : "s");
    printf("  total        %8.3f %8.3f %8.3f s\n", tot[0], tot[1], tot[2]);
    printf("  map          %8.3f %8.3f %8.3f s\n", map[0], map[1], map[2]);
    printf("  reduce       %8.3f %8.3f %8.3f s\n", red[0], red[1], red[2]);
    printf("  shuffle      %8.3f %8.3f %8.3f GB/s (table bytes %" PRId64 ")\n", gb[0], gb[1],
           gb[2], st[0].table_bytes);
    printf("  socket copy  %8.3f %8.3f %8.3f GB/s\n", sock[0], sock[1], sock[2]);
    if (file[1] > 0) printf("  file write   %8.3f %8.3f %8.3f GB/s\n", file[0], file[1], file[2]);
    if (!r.mem)
      printf("  worker CPU   %8.3f %8.3f %8.3f s per GB%s\n", cpu_gb[0], cpu_gb[1], cpu_gb[2],
             o.backend != FSH_TASK_BACKEND_FLIGHT ? "" : warm_runs == 0 ? " (every run cold)"
             : warm_runs == o.runs ? " (every run warm)" : " (cold and warm runs)");
    if (o.merge_both) { /* the comparison is the result */
      double gb_on[3], t_on[3], mg[3], mo[3];
      summarize(st_on, o.runs, offsetof(run_stats, gbps), gb_on);
      summarize(st_on, o.runs, offsetof(run_stats, total), t_on);
      summarize(st_on, o.runs, offsetof(run_stats, merges), mg);
      summarize(st_on, o.runs, offsetof(run_stats, merged_outputs), mo);
      printf("  pre-shuffle merge on (off above):\n");
      printf("  total        %8.3f %8.3f %8.3f s\n", t_on[0], t_on[1], t_on[2]);
      printf("  shuffle      %8.3f %8.3f %8.3f GB/s\n", gb_on[0], gb_on[1], gb_on[2]);
      printf("result: name=bench_shuffle_merge verified=%s backend=%s workers=%d maps=%d "
             "reduces=%d bytes=%" PRId64 " runs=%d gbps_off_min=%.3f gbps_off_median=%.3f "
             "gbps_off_max=%.3f gbps_on_min=%.3f gbps_on_median=%.3f gbps_on_max=%.3f "
             "speedup_on=%.3f merges_median=%.0f merged_outputs_median=%.0f\n",
             verified ? "yes" : "no", fsh_task_backend_name(o.backend), o.workers, o.maps,
             o.reduces, o.bytes, o.runs, gb[0], gb[1], gb[2], gb_on[0], gb_on[1], gb_on[2],
             gb[1] > 0 ? gb_on[1] / gb[1] : 0.0, mg[1], mo[1]);
    }
    /* else a comparison's line is the result */
    if (!o.incremental_both && !o.direct_both && !o.merge_both)
    printf("result: name=bench_shuffle_cluster verified=%s backend=%s workers=%d maps=%d "
           "reduces=%d bytes=%" PRId64 " gbps_median=%.3f vs_socket=%.3f spilled_bytes=%" PRId64
           " compression=%s runs=%d total_s_median=%.3f map_s_median=%.3f "
           "reduce_s_median=%.3f socket_gbps_median=%.3f file_write_gbps_median=%.3f "
           "incremental=%s fail_worker=%g recomputed=%d first_fetch_ms_median=%.1f "
           "idle_gap_ms_median=%.1f direct=%s map_tasks=%d reduce_tasks=%d "
           "worker_cpu_s_per_gb_median=%.3f "
           "pool_warm_runs=%d worker_pool_idle_ms=%s worker_images=%s\n",
           verified ? "yes" : "no", fsh_task_backend_name(o.backend), o.workers, o.maps,
           o.reduces, o.bytes, gb[1], sock[1] > 0 ? gb[1] / sock[1] : 0.0, spilled,
           fsh_compression_name(o.compression), o.runs, tot[1], map[1], red[1], sock[1],
           file[1], o.incremental_both ? "off" : o.incremental ? "on" : "off", o.fail_worker,
           recomputed, ff[1], gap[1],
           o.backend != FSH_TASK_BACKEND_FLIGHT ? "n/a" : o.direct_both ? "on" :
           o.direct_off ? "off" : "on", r.mem ? o.maps : st[o.runs - 1].map_tasks,
           st[o.runs - 1].reduce_tasks, cpu_gb[1], warm_runs,
           o.worker_idle_ms ? o.worker_idle_ms : "default",
           o.worker_images ? o.worker_images : "default");
    if (o.direct_both) {
      double t_off[3], gb_off[3], red_off[3];
      summarize(st_on, o.runs, offsetof(run_stats, total), t_off);
      summarize(st_on, o.runs, offsetof(run_stats, gbps), gb_off);
      summarize(st_on, o.runs, offsetof(run_stats, reduce), red_off);
      printf("  direct reads off (on above):\n");
      printf("  total        %8.3f %8.3f %8.3f s\n", t_off[0], t_off[1], t_off[2]);
      printf("  reduce       %8.3f %8.3f %8.3f s\n", red_off[0], red_off[1], red_off[2]);
      printf("  shuffle      %8.3f %8.3f %8.3f GB/s\n", gb_off[0], gb_off[1], gb_off[2]);
      printf("result: name=bench_shuffle_direct verified=%s workers=%d maps=%d reduces=%d "
             "bytes=%" PRId64 " compression=%s spilled_bytes=%" PRId64 " runs=%d "
             "gbps_median_on=%.3f gbps_median_off=%.3f "
             "vs_socket_on=%.3f vs_socket_off=%.3f reduce_s_median_on=%.3f "
             "reduce_s_median_off=%.3f speedup_on=%.3f\n",
             verified ? "yes" : "no", o.workers, o.maps, o.reduces, o.bytes,
             fsh_compression_name(o.compression), spilled, o.runs, gb[1],
             gb_off[1], sock[1] > 0 ? gb[1] / sock[1] : 0.0,
             sock[1] > 0 ? gb_off[1] / sock[1] : 0.0, red[1], red_off[1],
             t_off[1] > 0 && tot[1] > 0 ? t_off[1] / tot[1] : 0.0);
    }
    if (o.incremental_both) {
      double t_on[3], ff_on[3], gap_on[3];
      summarize(st_on, o.runs, offsetof(run_stats, total), t_on);
      summarize(st_on, o.runs, offsetof(run_stats, first_fetch_ms), ff_on);
      summarize(st_on, o.runs, offsetof(run_stats, idle_gap_ms), gap_on);
      printf("  total, incremental on  %8.3f %8.3f %8.3f s (off above)\n", t_on[0], t_on[1],
             t_on[2]);
      printf("  first map output -> first reduce fetch: off %.1f ms, on %.1f ms (medians); "
             "idle gap: off %.1f ms, on %.1f ms\n", ff[1], ff_on[1], gap[1], gap_on[1]);
      printf("result: name=bench_shuffle_incremental verified=%s workers=%d maps=%d reduces=%d "
             "bytes=%" PRId64 " runs=%d total_s_median_off=%.3f total_s_median_on=%.3f "
             "speedup_on=%.3f first_fetch_ms_median_off=%.1f first_fetch_ms_median_on=%.1f "
             "idle_gap_ms_median_off=%.1f idle_gap_ms_median_on=%.1f\n",
             verified ? "yes" : "no", o.workers, o.maps, o.reduces, o.bytes, o.runs, tot[1],
             t_on[1], t_on[1] > 0 ? tot[1] / t_on[1] : 0.0, ff[1], ff_on[1], gap[1], gap_on[1]);
    }
    if (!verified) status = 1;
  }
  free(st);
  free(st_on);
out:
  cluster_stop(&c, status != 0 && status != 130);
  fsh_shuffle_backend_destroy(r.mem);
  pthread_mutex_destroy(&r.mu);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (g_interrupted && status != 0) status = 130;
  return status;
}
