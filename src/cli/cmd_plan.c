/* cmd_plan.c -- `flightshuffle explain PLAN.json` (the stages and exchanges
 * of a plan) and `flightshuffle run PLAN.json` (runs it in this process
 * through a shuffle backend -- memory, fs, or flight: N in-process workers,
 * each a store behind a Flight server on loopback, map tasks placed on them
 * round-robin and reduce partitions reading over DoGet; --verify compares
 * with a single-process run of the same plan without exchanges;
 * --operator-memory bounds each sort / aggregate / join instance, which
 * spills to --operator-spill-dir). */
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/exec.h>

static int read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return cli_fail(1, "%s: %s", path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = fsh_malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    char *nb = fsh_realloc(buf, cap * 2);
    if (!nb) {
      fsh_free(buf);
      buf = NULL;
      break;
    }
    buf = nb, cap *= 2;
  }
  bool bad = ferror(f);
  fclose(f);
  if (!buf || bad) {
    fsh_free(buf);
    return cli_fail(1, "%s: cannot read", path);
  }
  *out = buf;
  *len = n;
  return 0;
}

static int load_plan(const char *path, int32_t partitions, fsh_plan **out) {
  char *text = NULL;
  size_t len = 0;
  int rc = read_file(path, &text, &len);
  if (rc) return rc;
  fsh_error err;
  rc = fsh_plan_from_json(text, (int64_t)len, partitions, out, &err);
  fsh_free(text);
  if (rc) return cli_fail(1, "%s: %s", path, err.message);
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usage_plan(void) {
  fprintf(stderr,
          "usage: flightshuffle explain PLAN.json [--partitions N]\n"
          "       flightshuffle run PLAN.json [--backend memory|fs|flight] [--fs-dir DIR]\n"
          "                 [--flight-workers N] [--spill-dir DIR] [--memory-limit BYTES]\n"
          "                 [--partitions N] [--pre-shuffle-merge auto|on|off]\n"
          "                 [--merge-threshold T] [--threads N] [--verify] [--output OUT.arrow]\n"
          "                 [--workers N] [--operator-memory BYTES]\n"
          "                 [--operator-spill-dir DIR]... [--heartbeat-timeout-ms MS]\n"
          "                 [--max-attempts A]\n"
          "  --workers N: on a local cluster (a driver here, N worker processes) through\n"
          "  --backend flight (default) or fs; every stage's tasks run on the workers\n"
          "  (a range / into_partitions exchange as a staging and a scatter stage)\n"
          "  --pre-shuffle-merge / --merge-threshold on a cluster: each worker merges the\n"
          "  map outputs it holds before the reducers read them (sched.h); on / off\n"
          "  override the plan's \"pre_shuffle_merge\" settings, auto (default) lets\n"
          "  each exchange's, else the plan's, else sqrt(M x R) > the threshold decide\n"
          "  --spill-dir: the in-process flight workers' stores; --operator-spill-dir\n"
          "  (repeatable; default: a temporary directory): where sorts, aggregates and\n"
          "  joins spill when --operator-memory bounds them\n");
  return 2;
}

int cmd_explain(int argc, char **argv) {
  const char *path = NULL;
  int64_t parts = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--partitions") == 0 && i + 1 < argc) {
      if (!cli_parse_int(argv[++i], 1, 1 << 20, &parts))
        return cli_fail(2, "explain: --partitions must be in [1, 2^20]");
    } else if (argv[i][0] == '-' || path) {
      return usage_plan();
    } else {
      path = argv[i];
    }
  }
  if (!path) return usage_plan();
  fsh_plan *p;
  int rc = load_plan(path, (int32_t)parts, &p);
  if (rc) return rc;
  char *text = NULL;
  fsh_error err;
  if ((rc = fsh_plan_explain(p, &text, &err)) != 0) {
    fsh_plan_free(p);
    return cli_fail(1, "explain: %s", err.message);
  }
  fputs(text, stdout);
  fsh_free(text);
  fsh_plan_free(p);
  return 0;
}

/* ---- the backends a plan runs on ---------------------------------------------------- */

void cli_plan_backends_close(cli_plan_backends *b) {
  if (!b) return;
  for (int i = 0; b->backends && i < b->n; i++) fsh_shuffle_backend_destroy(b->backends[i]);
  for (int i = 0; b->workers && i < b->n; i++) fsh_shuffle_worker_stop(b->workers[i], 2000);
  for (int i = 0; b->dirs && i < b->n; i++) {
    if (b->dirs[i]) rmdir(b->dirs[i]);
    fsh_free(b->dirs[i]);
  }
  if (b->tmpdir[0]) rmdir(b->tmpdir);
  fsh_free(b->backends);
  fsh_free(b->workers);
  fsh_free(b->dirs);
  memset(b, 0, sizeof *b);
}

int cli_plan_backends_open(const char *name, int n_workers, const char *fs_dir,
                           const char *spill_dir, int64_t memory_limit, cli_plan_backends *out,
                           fsh_error *err) {
  memset(out, 0, sizeof *out);
  bool flight = strcmp(name, "flight") == 0;
  if (!flight && strcmp(name, "memory") && strcmp(name, "fs"))
    return fsh_error_set(err, EINVAL, "unknown backend '%s' (memory, fs or flight)", name);
  if (flight && n_workers < 1)
    return fsh_error_set(err, EINVAL, "the flight backend needs at least one worker");
  out->name = name;
  out->n = flight ? n_workers : 1;
  out->backends = fsh_calloc((size_t)out->n, sizeof *out->backends);
  if (flight) {
    out->workers = fsh_calloc((size_t)out->n, sizeof *out->workers);
    out->dirs = fsh_calloc((size_t)out->n, sizeof *out->dirs);
  }
  int rc = 0;
  if (!out->backends || (flight && (!out->workers || !out->dirs)))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (!rc && ((!flight && strcmp(name, "fs") == 0 && !fs_dir) || (flight && !spill_dir))) {
    snprintf(out->tmpdir, sizeof out->tmpdir, "/tmp/fsh-plan-XXXXXX");
    if (!mkdtemp(out->tmpdir)) {
      out->tmpdir[0] = 0;
      rc = fsh_error_set(err, errno, "mkdtemp: %s", strerror(errno));
    }
    fs_dir = spill_dir = out->tmpdir;
  }
  if (!rc && strcmp(name, "memory") == 0) {
    rc = fsh_shuffle_memory_new(&out->backends[0], err);
  } else if (!rc && !flight) {
    rc = fsh_shuffle_fs_new(fs_dir, &out->backends[0], err);
  }
  for (int i = 0; flight && !rc && i < out->n; i++) {
    size_t len = strlen(spill_dir) + 16;
    if (!(out->dirs[i] = fsh_malloc(len))) {
      rc = fsh_error_set(err, ENOMEM, "out of memory");
      break;
    }
    snprintf(out->dirs[i], len, "%s/w%d", spill_dir, i);
    const char *dirs[1] = {out->dirs[i]};
    fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .spill_dirs = dirs,
                                     .n_spill_dirs = 1, .memory_limit = memory_limit};
    if ((rc = fsh_shuffle_worker_start(&wo, &out->workers[i], err)) != 0) {
      fsh_error_prefix(err, rc, "in-process worker %d: ", i);
      break;
    }
    fsh_shuffle_flight_options fo = {.local = out->workers[i]};
    if ((rc = fsh_shuffle_flight_new(&fo, &out->backends[i], err)) != 0)
      fsh_error_prefix(err, rc, "flight backend of worker %s: ",
                       fsh_shuffle_worker_uri(out->workers[i]));
  }
  if (rc) cli_plan_backends_close(out);
  return rc;
}

/* The order-independent checksum of a result: the sum of its row hashes. */
static int checksum(const fsh_plan_result *r, uint64_t *out, fsh_error *err) {
  uint64_t *h;
  int64_t n;
  int rc = fsh_plan_result_row_hashes(r, NULL, 0, &h, &n, err);
  if (rc) return rc;
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; i++) sum += h[i];
  fsh_free(h);
  *out = sum;
  return 0;
}

/* ---- on a local cluster ------------------------------------------------------------- */

typedef struct cluster_run {
  const char *path, *backend, *spill_dir, *output;
  int workers;
  int64_t memory_limit, heartbeat_timeout_ms, operator_memory;
  int32_t max_attempts;
  int32_t merge, merge_threshold; /* FSH_SCHED_MERGE_*: the pre-shuffle merge on the workers */
  bool verify;
} cluster_run;

/* "progress: stage 1 d/t stage 2 d/t ..." on stdout when it changed. */
static void print_progress(const fsh_sched_job_status *s, char *last, size_t size) {
  char line[1024];
  size_t n = (size_t)snprintf(line, sizeof line, "progress:");
  for (int32_t i = 0; i < s->n_stages && n < sizeof line; i++)
    n += (size_t)snprintf(line + n, sizeof line - n, " stage %u %d/%d", s->stages[i].stage_id,
                          s->stages[i].tasks_done, s->stages[i].tasks_total);
  if (strcmp(line, last) == 0) return;
  snprintf(last, size, "%s", line);
  printf("%s\n", line);
  fflush(stdout);
}

/* The summary lines both ways of running print: output (spill with an
 * operator budget), the result file, reference and verify, result. */
static int print_summary(const fsh_plan *p, const char *path, const char *backend,
                         const fsh_plan_result *res, double secs, int64_t op_memory,
                         const char *extra, bool verify, const char *output) {
  fsh_error err;
  uint64_t sum = 0, ref_sum = 0;
  int status = 0;
  if (checksum(res, &sum, &err) != 0) status = cli_fail(1, "run: checksum: %s", err.message);
  printf("output: rows=%" PRId64 " batches=%" PRId64 " partitions=%d checksum=%016" PRIx64
         " exchanges=%" PRId64 " map_tasks=%" PRId64 " map_outputs=%" PRId64
         " maps_skipped=%" PRId64 " seconds=%.3f\n",
         res->rows, res->n_batches, (int)fsh_plan_output_partitions(p), sum, res->exchanges,
         res->map_tasks, res->map_outputs, res->maps_skipped, secs);
  if (op_memory > 0)
    printf("spill: operator_memory=%" PRId64 " files=%" PRId64 " bytes=%" PRId64
           " operators_spilled=%" PRId64 "%s%s\n",
           op_memory, res->spill_files, res->spilled_bytes, res->operators_spilled,
           res->spill_summary ? " | " : "", res->spill_summary ? res->spill_summary : "");
  if (output && !status) {
    /* the result as an IPC file: the batches, partition after partition */
    cli_table t = {.schema = res->schema, .n_batches = res->n_batches, .batches = res->batches};
    fsh_ipc_write_options wo;
    fsh_ipc_write_options_init(&wo);
    if (cli_table_write(&t, output, true, &wo, &err) != 0)
      status = cli_fail(1, "run: writing %s: %s", output, err.message);
  }
  const char *verified = "no";
  fsh_plan_result ref;
  memset(&ref, 0, sizeof ref);
  if (verify && !status) {
    fsh_plan_run_options ro = {.reference = true};
    double t0 = now_s();
    int rc = fsh_plan_run(p, &ro, &ref, &err);
    double rsecs = now_s() - t0;
    if (rc) {
      status = cli_fail(1, "run: reference run: %s", err.message);
    } else if ((rc = checksum(&ref, &ref_sum, &err)) != 0) {
      status = cli_fail(1, "run: reference checksum: %s", err.message);
    } else {
      printf("reference: rows=%" PRId64 " checksum=%016" PRIx64 " seconds=%.3f\n", ref.rows,
             ref_sum, rsecs);
      if ((rc = fsh_plan_result_compare(p, res, &ref, &err)) == ENOTSUP) {
        /* an operator depending on the partitioning, not last: no check */
        printf("verify: not possible: %s\n", err.message);
        status = 1;
      } else if (rc != 0) {
        printf("verify: FAILED: %s\n", err.message);
        status = 1;
      } else if (err.message[0]) {
        /* a result the partitioning decides: what was compared */
        printf("verify: the output agrees with the single-process run's (%s)\n", err.message);
        verified = "yes";
      } else {
        int32_t n_keys;
        const int32_t *keys;
        bool determined = true;
        (void)fsh_plan_output_order(p, &n_keys, &keys, &determined);
        /* a limit of an unordered input: any n rows of it (exec.h
         * fsh_plan_result_compare: the count and every row's membership) */
        printf(determined ? "verify: the output equals the single-process run's\n"
                          : "verify: the output agrees with the single-process run's (its rows "
                            "are not determined: compared as the plan allows)\n");
        verified = "yes";
      }
    }
  }
  fsh_plan_result_reset(&ref);
  const char *name = strrchr(path, '/');
  printf("result: plan=%s backend=%s partitions=%d rows=%" PRId64 " checksum=%016" PRIx64
         " seconds=%.3f%s verified=%s\n",
         name ? name + 1 : path, backend, (int)fsh_plan_output_partitions(p), res->rows, sum,
         secs, extra ? extra : "", verified);
  fflush(stdout);
  return status;
}

/* Runs one job on the started cluster c (see cli.h): submit, wait (progress
 * lines when progress), the result read through the workers' Flight servers
 * or the fs directory (each partition checked against its tasks' row
 * checksums), then the result shuffle released. */
int cli_plan_cluster_job(cli_local *c, const fsh_plan *p, const fsh_buffer *plan, bool fs,
                         bool progress, fsh_plan_sink sink, void *sink_arg,
                         fsh_sched_job_status *s, fsh_plan_result *res, double *secs,
                         fsh_error *err) {
  memset(s, 0, sizeof *s);
  memset(res, 0, sizeof *res);
  *secs = 0;
  uint64_t id = 0;
  double t0 = now_s();
  int rc = fsh_sched_driver_submit(c->driver, plan->data, plan->size, &id, err);
  if (rc) return fsh_error_prefix(err, rc, "submit: ");
  char last[1024] = "";
  for (;;) {
    if (fsh_sched_driver_wait_job(c->driver, id, 100, err) == 0) break;
    if (cli_local_signal(c, 0)) break;
    cli_local_reap(c);
    if (progress && fsh_sched_driver_job_status(c->driver, id, false, s, err) == 0) {
      print_progress(s, last, sizeof last);
      fsh_sched_job_status_reset(s);
    }
  }
  *secs = now_s() - t0;
  if (c->signal) return 130;
  if ((rc = fsh_sched_driver_job_status(c->driver, id, false, s, err)) != 0)
    return fsh_error_prefix(err, rc, "job status: ");
  if (progress) print_progress(s, last, sizeof last);
  if (s->state != FSH_SCHED_JOB_SUCCEEDED)
    return fsh_error_set(err, EIO, "the job failed: %s", s->error ? s->error : "?");
  /* the result: through the workers' Flight servers (released on the
   * alive ones: a lost worker's store is gone with it), or the fs
   * directory */
  fsh_shuffle_backend *b = NULL;
  const char *peers[LOCAL_MAX_WORKERS];
  int n_peers = 0;
  fsh_sched_worker_list wl = {0};
  if ((rc = fsh_sched_driver_workers(c->driver, &wl, err)) == 0)
    for (int64_t i = 0; i < wl.n && n_peers < LOCAL_MAX_WORKERS; i++)
      if (wl.items[i].state == FSH_SCHED_WORKER_ALIVE) peers[n_peers++] = wl.items[i].uri;
  fsh_shuffle_flight_options fo = {.peers = peers, .n_peers = n_peers};
  if (rc == 0)
    rc = fs ? fsh_shuffle_fs_new(c->fs_dir, &b, err) : fsh_shuffle_flight_new(&fo, &b, err);
  if (rc == 0)
    rc = sink ? fsh_plan_job_result_stream(p, s, b, sink, sink_arg, &res->rows, err)
              : fsh_plan_job_result(p, s, b, res, err);
  fsh_error rerr;
  int rel = 0;
  if (b && s->n_result > 0 && (rel = fsh_shuffle_release(b, s->result[0].shuffle_id, &rerr)) != 0 &&
      !rc) {
    *err = rerr;
    rc = fsh_error_prefix(err, rel, "releasing the result: ");
  }
  fsh_shuffle_backend_destroy(b);
  fsh_sched_worker_list_reset(&wl);
  if (rc) fsh_plan_result_reset(res);
  return rc;
}

/* Runs p on a local cluster (cli_local: a driver here, r->workers worker
 * processes): the plan's stages as a job of plan-fragment stages, progress
 * while it runs, the job's summary (retried and recomputed tasks with
 * their reasons), then the result read from the result shuffle (each
 * partition checked against its tasks' row checksums) and released, and
 * the same summary lines as an in-process run. Every worker is stopped on
 * every way out (SIGINT/SIGTERM included). */
static int run_on_cluster(const fsh_plan *p, const cluster_run *r) {
  fsh_error err;
  bool fs = strcmp(r->backend, "fs") == 0;
  fsh_plan_job_options jo = {.name = r->path, .backend = fs ? FSH_TASK_BACKEND_FS
                                                            : FSH_TASK_BACKEND_FLIGHT,
                             .max_attempts = r->max_attempts, .merge = r->merge,
                             .merge_threshold = r->merge_threshold};
  fsh_buffer *plan = NULL;
  if (fsh_plan_job_plan(p, &jo, &plan, &err) != 0)
    return cli_fail(2, "run: %s: %s", r->path, err.message); /* before any process starts */
  static cli_local c; /* large */
  cli_local_options lo = {.n_workers = r->workers, .spill_dir = r->spill_dir,
                          .memory_limit = r->memory_limit,
                          .heartbeat_timeout_ms = r->heartbeat_timeout_ms,
                          .log = getenv("FSH_DRIVER_LOG") != NULL, .quiet = true,
                          .with_fs_dir = fs, .operator_memory = r->operator_memory};
  int rc = cli_local_start(&lo, &c);
  if (rc) {
    fsh_buffer_unref(plan);
    return rc;
  }
  printf("driver %s\n", fsh_sched_driver_uri(c.driver));
  for (int i = 0; i < c.n; i++)
    printf("worker %d %s pid %d\n", i + 1, c.proc[i].uri, (int)c.proc[i].pid);
  printf("cluster ready: %d workers\n", c.n);
  fflush(stdout);
  fsh_sched_job_status s;
  fsh_plan_result res;
  double secs = 0;
  rc = cli_plan_cluster_job(&c, p, plan, fs, true, NULL, NULL, &s, &res, &secs, &err);
  fsh_buffer_unref(plan);
  if (rc == 130) {
    fprintf(stderr, "flightshuffle: run: %s, stopping the cluster\n",
            c.signal == SIGINT ? "SIGINT" : "SIGTERM");
    fsh_sched_job_status_reset(&s);
    cli_local_stop(&c);
    return 130;
  }
  int status = 0;
  /* the stages named by operator ("sort: range-scatter"), not by task kind */
  char names[64][32];
  int n_names = 0;
  fsh_error name_err;
  if (s.n_stages > 0 && fsh_plan_job_stage_names(p, names, 64, &n_names, &name_err) == 0 &&
      n_names == s.n_stages)
    for (int32_t i = 0; i < s.n_stages; i++)
      snprintf(s.stages[i].kind, sizeof s.stages[i].kind, "%.31s", names[i]);
  if (s.n_stages > 0) fsh_sched_job_status_print(&s, stdout);
  fflush(stdout);
  if (rc) status = cli_fail(1, "run: %s: %s", r->path, err.message);
  if (!status) {
    /* a global limit's stage: the tasks the driver skipped once its rows
     * existed (never launched, or cancelled running) ran no map task */
    int64_t tasks = 0, skipped = 0, cancelled = 0;
    for (int32_t i = 0; i < s.n_stages; i++) {
      tasks += s.stages[i].tasks_total;
      skipped += s.stages[i].tasks_skipped;
      cancelled += s.stages[i].attempts_cancelled;
    }
    res.exchanges = s.n_stages - 1;
    res.map_tasks = res.map_outputs = tasks - skipped;
    res.maps_skipped = skipped;
    res.spill_files = s.operator_spill_files; /* the workers' operators' (their answers) */
    res.spilled_bytes = s.operator_spilled_bytes;
    res.operators_spilled = s.operators_spilled;
    char extra[200];
    int len = snprintf(extra, sizeof extra, " workers=%d stages=%d retried=%d recomputed=%d "
                       "merges=%" PRId64 " maps_skipped=%" PRId64 " maps_cancelled=%" PRId64,
                       c.n, (int)s.n_stages, (int)s.n_retried, (int)s.n_recomputed, s.merges,
                       skipped, cancelled);
    if (r->operator_memory > 0 && len > 0 && (size_t)len < sizeof extra)
      snprintf(extra + len, sizeof extra - (size_t)len, " operator_memory=%" PRId64,
               r->operator_memory);
    status = print_summary(p, r->path, r->backend, &res, secs, r->operator_memory, extra,
                           r->verify, r->output);
  }
  fsh_plan_result_reset(&res);
  fsh_sched_job_status_reset(&s);
  cli_local_stop(&c);
  return status;
}

int cmd_run(int argc, char **argv) {
  const char *path = NULL, *backend_name = "memory", *fs_dir = NULL, *output = NULL;
  const char *spill_dir = NULL;
  int64_t parts = 0, workers = 0, threshold = 0, threads = 1, flight_workers = 2;
  int64_t memory_limit = (int64_t)1 << 30;
  int64_t op_memory = 0, hb_timeout_ms = 0, max_attempts = 0;
  const char *op_dirs[16];
  int n_op_dirs = 0;
  bool verify = false;
  fsh_plan_merge merge = FSH_PLAN_MERGE_AUTO;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (strcmp(a, "--backend") == 0 && has) {
      backend_name = argv[++i];
    } else if ((strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0) && has) {
      output = argv[++i];
    } else if (strcmp(a, "--fs-dir") == 0 && has) {
      fs_dir = argv[++i];
    } else if (strcmp(a, "--partitions") == 0 && has) {
      if (!cli_parse_int(argv[++i], 1, 1 << 20, &parts))
        return cli_fail(2, "run: --partitions must be in [1, 2^20]");
    } else if (strcmp(a, "--flight-workers") == 0 && has) {
      if (!cli_parse_int(argv[++i], 1, 64, &flight_workers))
        return cli_fail(2, "run: --flight-workers must be in [1, 64]");
    } else if (strcmp(a, "--spill-dir") == 0 && has) {
      spill_dir = argv[++i];
    } else if (strcmp(a, "--memory-limit") == 0 && has) {
      if (!cli_parse_bytes(argv[++i], &memory_limit))
        return cli_fail(2, "run: --memory-limit '%s': expected bytes (e.g. 1073741824, 512M)",
                        argv[i]);
    } else if (strcmp(a, "--operator-memory") == 0 && has) {
      if (!cli_parse_bytes(argv[++i], &op_memory) || op_memory < 1)
        return cli_fail(2, "run: --operator-memory '%s': expected bytes > 0 (e.g. 65536, 1M)",
                        argv[i]);
    } else if (strcmp(a, "--operator-spill-dir") == 0 && has) {
      if (n_op_dirs == 16) return cli_fail(2, "run: at most 16 --operator-spill-dir");
      op_dirs[n_op_dirs++] = argv[++i];
    } else if (strcmp(a, "--workers") == 0 && has) {
      if (!cli_parse_int(argv[++i], 0, 4096, &workers))
        return cli_fail(2, "run: --workers must be a count");
    } else if (strcmp(a, "--threads") == 0 && has) {
      if (!cli_parse_int(argv[++i], 1, 64, &threads))
        return cli_fail(2, "run: --threads must be in [1, 64]");
    } else if (strcmp(a, "--merge-threshold") == 0 && has) {
      if (!cli_parse_int(argv[++i], 1, INT32_MAX, &threshold))
        return cli_fail(2, "run: --merge-threshold must be >= 1");
    } else if (strcmp(a, "--pre-shuffle-merge") == 0 && has) {
      const char *m = argv[++i];
      if (strcmp(m, "auto") == 0) merge = FSH_PLAN_MERGE_AUTO;
      else if (strcmp(m, "on") == 0) merge = FSH_PLAN_MERGE_ON;
      else if (strcmp(m, "off") == 0) merge = FSH_PLAN_MERGE_OFF;
      else return cli_fail(2, "run: --pre-shuffle-merge must be auto, on or off");
    } else if (strcmp(a, "--heartbeat-timeout-ms") == 0 && has) {
      if (!cli_parse_int(argv[++i], 100, 86400000, &hb_timeout_ms))
        return cli_fail(2, "run: --heartbeat-timeout-ms must be in [100, 86400000]");
    } else if (strcmp(a, "--max-attempts") == 0 && has) {
      if (!cli_parse_int(argv[++i], 1, 100, &max_attempts))
        return cli_fail(2, "run: --max-attempts must be in [1, 100]");
    } else if (strcmp(a, "--verify") == 0) {
      verify = true;
    } else if (a[0] == '-' || path) {
      return usage_plan();
    } else {
      path = a;
    }
  }
  if (!path) return usage_plan();
  if (strcmp(backend_name, "memory") && strcmp(backend_name, "fs") && strcmp(backend_name, "flight"))
    return cli_fail(2, "run: --backend must be memory, fs or flight, got '%s'", backend_name);
  if (workers > 0 && strcmp(backend_name, "memory") == 0) backend_name = "flight";
  fsh_plan *p;
  int rc = load_plan(path, (int32_t)parts, &p);
  if (rc) return rc;
  fsh_error err;
  if (workers > 0 && (threads > 1 || fs_dir || n_op_dirs)) {
    fsh_plan_free(p);
    return cli_fail(2, "run: --workers: --threads, --fs-dir and --operator-spill-dir apply to "
                       "an in-process run only (the fs backend's directory is the cluster's "
                       "own; the workers' operators spill into their --spill-dir)");
  }
  if (workers > 0) {
    cluster_run cr = {.path = path, .backend = backend_name, .workers = (int)workers,
                      .memory_limit = memory_limit, .spill_dir = spill_dir,
                      .heartbeat_timeout_ms = hb_timeout_ms, .verify = verify,
                      .output = output, .max_attempts = (int32_t)max_attempts,
                      .operator_memory = op_memory,
                      /* on a cluster the workers merge what each holds (sched.h) */
                      .merge = merge == FSH_PLAN_MERGE_ON    ? FSH_SCHED_MERGE_ON
                               : merge == FSH_PLAN_MERGE_OFF ? FSH_SCHED_MERGE_OFF
                                                             : FSH_SCHED_MERGE_AUTO,
                      .merge_threshold = (int32_t)threshold};
    rc = run_on_cluster(p, &cr);
    fsh_plan_free(p);
    return rc;
  }
  cli_plan_backends bk;
  if ((rc = cli_plan_backends_open(backend_name, (int)flight_workers, fs_dir, spill_dir,
                                   memory_limit, &bk, &err)) != 0) {
    fsh_plan_free(p);
    return cli_fail(1, "run: %s backend: %s", backend_name, err.message);
  }
  /* operator spilling: the given directories, or a temporary one */
  char op_tmp[64] = "";
  if (op_memory > 0 && n_op_dirs == 0) {
    snprintf(op_tmp, sizeof op_tmp, "/tmp/fsh-opspill-XXXXXX");
    if (!mkdtemp(op_tmp)) {
      cli_plan_backends_close(&bk);
      fsh_plan_free(p);
      return cli_fail(1, "run: mkdtemp %s: %s", op_tmp, strerror(errno));
    }
    op_dirs[n_op_dirs++] = op_tmp;
  }
  fsh_plan_run_options o = {.merge = merge, .merge_threshold = threshold,
                            .n_threads = (int)threads, .backends = bk.backends,
                            .n_backends = bk.n, .operator_memory = op_memory,
                            .spill_dirs = op_dirs, .n_spill_dirs = n_op_dirs};
  fsh_plan_result res;
  double t0 = now_s();
  rc = fsh_plan_run(p, &o, &res, &err);
  double secs = now_s() - t0;
  cli_plan_backends_close(&bk);
  if (op_tmp[0] && rmdir(op_tmp) != 0 && !rc)
    rc = fsh_error_set(&err, errno, "operator spill directory %s not removed: %s", op_tmp,
                       strerror(errno));
  if (rc) {
    fsh_plan_free(p);
    return cli_fail(1, "run: %s: %s", path, err.message);
  }
  char spilled[96] = "";
  if (op_memory > 0)
    snprintf(spilled, sizeof spilled, " spill_files=%" PRId64 " spilled_bytes=%" PRId64,
             res.spill_files, res.spilled_bytes);
  int status = print_summary(p, path, backend_name, &res, secs, op_memory, spilled, verify,
                             output);
  fsh_plan_result_reset(&res);
  fsh_plan_free(p);
  return status;
}
