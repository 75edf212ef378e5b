/* cmd_bench_ops.c -- `flightshuffle bench ops` (issue 6 section 4): the
 * shuffling operators on each backend. Two plans over generated data -- a
 * distributed sort of the synthetic table (int64 key + float64 / utf8
 * payload) and a partitioned hash join of two keyed tables followed by a
 * two-phase group-by -- run on the memory backend in this process (the
 * upper bound: no process boundary, no copy) and, on a local cluster of N
 * worker processes (cli_local, what `run --workers N` starts; one cluster
 * for the whole bench), as plan-fragment jobs on the flight backend
 * (readers on the writer's host read its map outputs directly, or with
 * --direct-reads off fetch them by DoGet as between hosts) and the fs backend
 * (the workers' shared directory). Runs interleaved (memory, fs, flight,
 * memory, ...). Prints per plan and backend the seconds and input GB/s
 * min / median / max, and the flight backend's time ratio to memory and to
 * fs (per round, min / median / max), and the same ratio of CPU seconds
 * (this process's, plus the workers' from /proc for cluster runs: steadier
 * than wall time on a shared machine); per cluster run the job's stages
 * (kind, seconds, summed task seconds, bytes). Verification: the sort's
 * result is never held -- every run's result streams through a
 * fsh_sorted_check (rows, the order-independent row checksum, keys never
 * decreasing across batches and partitions), which must agree with the
 * input's rows and checksum (taken from a streamed scan of the input), so
 * a sort of --sort-bytes 4G fits; the sink's own time is taken out of
 * the run's wall and CPU seconds. The join's output (64 groups) must
 * equal the single-process reference run's (fsh_plan_run_options
 * .reference: no exchanges; rows and the sum of its row hashes). Every
 * cluster job's partition reads must be verified by the driver; the last
 * line is `result: ... verified=yes|no`, with the peak RSS of this
 * process and of the workers. --corrupt MODE (a test of the verification)
 * corrupts one batch of every sort run's stream before the check. With --operator-memory B each round also
 * runs both plans on the memory backend with every sort / aggregate / join
 * bounded to B bytes (spilling to a temporary directory): its seconds, the
 * bytes spilled and its time ratio to the unbounded memory run of the same
 * round; its output must equal the memory run's under
 * fsh_plan_result_compare (a spilled join feeds the group-by in another
 * order, so float sums may differ in their last bits). */
#include "cli/cli.h"
#include "cli/proc_cpu.h"

#include <errno.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h> /* sysconf */
#include <unistd.h>

#include <flightshuffle/exec.h>

#define OPS_MAX_RUNS 64
#define OPS_BACKENDS 3

static const char *const ops_backend_names[OPS_BACKENDS] = {"memory", "fs", "flight"};

/* --corrupt: what is done to one batch of each sort run's result stream
 * before the check sees it (to show that the check catches it). */
typedef enum ops_corrupt {
  CORRUPT_NONE = 0,
  CORRUPT_ORDER,     /* its first and last rows swapped (keys differ) */
  CORRUPT_DROP,      /* its first row dropped */
  CORRUPT_DUPLICATE, /* its first row given twice */
  CORRUPT_CHANGE     /* its first row's "value" changed */
} ops_corrupt;
static const char *const ops_corrupt_names[] = {"none", "order", "drop", "duplicate", "change"};

typedef struct ops_opts {
  int64_t sort_rows, left_rows, right_rows, sort_bytes;
  bool run_plan[2]; /* sort, join_group_by */
  ops_corrupt corrupt;
  int64_t runs, workers, partitions, threads;
  int64_t memory_limit;    /* each worker's store budget; 0: from the sort's size */
  int64_t sort_partitions; /* 0: partitions */
  int64_t operator_memory; /* > 0: also the spilling runs */
  const char *spill_dir;   /* theirs (a temporary directory) */
} ops_opts;

static double ops_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of this process (every thread: the in-process workers too). */
static double ops_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* The workers' store budget when --memory-limit is not given: the memory
 * backend holds a whole exchange in one process with no budget, so a fair
 * cluster run gets room for what its workers hold of the sort at once --
 * each worker's share of the range exchange and of the result shuffle
 * (2 x sort_bytes / workers), a quarter more for unevenly sized partitions
 * -- rounded to 256 MiB; at least 1 GiB, and the workers' budgets
 * together at most half the machine's memory (the workers' sorts and the
 * bench process need the rest). */
static int64_t ops_default_budget(double sort_bytes, int64_t workers) {
  const int64_t gib = (int64_t)1 << 30, step = (int64_t)256 << 20;
  double want = 2.5 * sort_bytes / (double)(workers > 0 ? workers : 1);
  int64_t b = ((int64_t)want + step / 2) / step * step; /* 4 GiB / 4: 2.5 GiB, not 2.75 */
  if (b < gib) b = gib;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    int64_t cap = (int64_t)pages * page / 2 / (workers > 0 ? workers : 1) / step * step;
    if (cap >= gib && b > cap) b = cap;
  }
  return b;
}

static int ops_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* min / median / max of v[0, n) (sorts a copy). */
static void ops_stats(const double *v, int n, double out[3]) {
  double s[OPS_MAX_RUNS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, ops_cmp);
  out[0] = s[0], out[1] = s[n / 2], out[2] = s[n - 1];
}

static int64_t array_bytes(const fsh_array *a) {
  if (!a) return 0;
  int64_t n = 0;
  for (int32_t i = 0; i < a->n_buffers; i++)
    if (a->buffers[i]) n += a->buffers[i]->size;
  for (int64_t i = 0; i < a->n_children; i++) n += array_bytes(a->children[i]);
  return n;
}

static int parse_plan(const char *json, int32_t parts, fsh_plan **out, fsh_error *err) {
  return fsh_plan_from_json(json, (int64_t)strlen(json), parts, out, err);
}

/* What a streamed scan of a plan's generated input saw. */
typedef struct input_scan {
  int64_t bytes, rows;
  uint64_t checksum; /* fsh_plan_batch_checksum of every row */
  bool with_checksum;
} input_scan;

static int input_sink(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  (void)part;
  input_scan *in = arg;
  if (!b) return 0;
  for (int64_t c = 0; c < b->n_columns; c++) in->bytes += array_bytes(b->columns[c]);
  in->rows += b->length;
  return in->with_checksum ? fsh_plan_batch_checksum(b, &in->checksum, err) : 0;
}

/* The plan's generated input (scans_json: its scans alone), run in
 * reference mode and streamed, never held: its buffers' bytes, rows and,
 * with_checksum, row checksum. */
static int input_scan_run(const char *scans_json, bool with_checksum, input_scan *out,
                          fsh_error *err) {
  *out = (input_scan){.with_checksum = with_checksum};
  fsh_plan *p;
  FSH_RETURN_NOT_OK(parse_plan(scans_json, 0, &p, err));
  fsh_plan_run_options o = {.reference = true, .sink = input_sink, .sink_arg = out};
  fsh_plan_result r;
  int rc = fsh_plan_run(p, &o, &r, err);
  fsh_plan_free(p);
  fsh_plan_result_reset(&r);
  return rc;
}

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A sort run's result stream: corrupted once as --corrupt says, then
 * checked (fsh_sorted_check); secs / cpu: the time spent here, taken out
 * of the run's. */
typedef struct sort_sink {
  fsh_sorted_check *check;
  ops_corrupt corrupt;
  bool corrupted;
  int32_t key_col, value_col;
  double secs, cpu;
} sort_sink;

/* b with the corruption c applied, a new batch in *out; NULL when b does
 * not lend itself (fewer than 2 rows; ORDER: first and last keys equal). */
static int corrupt_batch(const sort_sink *s, fsh_batch *b, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  int64_t n = b->length;
  if (n < 2) return 0;
  const fsh_array *k = b->columns[s->key_col];
  const int64_t *keys = (const int64_t *)(const void *)k->buffers[1]->data + k->offset;
  if (s->corrupt == CORRUPT_ORDER && keys[0] == keys[n - 1]) return 0;
  int64_t *idx = fsh_malloc((size_t)(n + 1) * sizeof *idx);
  if (!idx) return fsh_error_set(err, ENOMEM, "out of memory");
  int64_t m = 0;
  if (s->corrupt == CORRUPT_DUPLICATE) idx[m++] = 0;
  for (int64_t i = s->corrupt == CORRUPT_DROP ? 1 : 0; i < n; i++) idx[m++] = i;
  if (s->corrupt == CORRUPT_ORDER) idx[0] = n - 1, idx[n - 1] = 0;
  int rc = fsh_take(b, idx, m, out, err);
  fsh_free(idx);
  if (!rc && s->corrupt == CORRUPT_CHANGE) { /* take's buffers are its own */
    fsh_array *v = (*out)->columns[s->value_col];
    double *vals = (double *)(void *)v->buffers[1]->data + v->offset;
    vals[0] = vals[0] + 1.0;
  }
  return rc;
}

static int sort_sink_fn(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  sort_sink *s = arg;
  double t0 = ops_now(), c0 = thread_cpu();
  fsh_batch *bad = NULL;
  int rc = 0;
  if (b && s->corrupt != CORRUPT_NONE && !s->corrupted &&
      (rc = corrupt_batch(s, b, &bad, err)) == 0 && bad)
    s->corrupted = true;
  if (!rc) rc = fsh_sorted_check_sink(s->check, part, bad ? bad : b, err);
  fsh_batch_unref(bad);
  s->secs += ops_now() - t0;
  s->cpu += thread_cpu() - c0;
  return rc;
}

/* The order-independent checksum of a result: the sum of its row hashes. */
static int result_sum(const fsh_plan_result *r, uint64_t *sum, fsh_error *err) {
  uint64_t *h = NULL;
  int64_t n = 0;
  *sum = 0;
  FSH_RETURN_NOT_OK(fsh_plan_result_row_hashes(r, NULL, 0, &h, &n, err));
  for (int64_t i = 0; i < n; i++) *sum += h[i];
  fsh_free(h);
  return 0;
}

/* This process's CPU seconds plus every worker process's of c (NULL: only
 * this process's). */
static double all_cpu(const cli_local *c) {
  double t = ops_cpu();
  for (int i = 0; c && i < c->n; i++) t += cli_proc_cpu_seconds(c->proc[i].pid);
  return t;
}

/* keep: the result moves there (else it is dropped). With ss the result
 * streams into it (sort_sink_fn) instead, *sum is not set, and its time
 * is taken out of *secs and *cpu. */
static int run_once(const fsh_plan *p, cli_plan_backends *bk, const ops_opts *o, sort_sink *ss,
                    double *secs, double *cpu, uint64_t *sum, int64_t *rows,
                    fsh_plan_result *keep, fsh_error *err) {
  fsh_plan_run_options ro = {.backends = bk->backends, .n_backends = bk->n,
                             .n_threads = (int)o->threads, .sink = ss ? sort_sink_fn : NULL,
                             .sink_arg = ss};
  fsh_plan_result r;
  double t0 = ops_now(), c0 = ops_cpu();
  FSH_RETURN_NOT_OK(fsh_plan_run(p, &ro, &r, err));
  *secs = ops_now() - t0 - (ss ? ss->secs : 0);
  *cpu = ops_cpu() - c0 - (ss ? ss->cpu : 0);
  int rc = ss ? 0 : result_sum(&r, sum, err);
  *rows = r.rows;
  if (keep && !rc) *keep = r;
  else fsh_plan_result_reset(&r);
  return rc;
}

#define OPS_MAX_STAGES 16

/* What each job stage of p does, by operator ("sort: range-stage",
 * "sort: range-scatter", "sort: result", "join: hash", ...:
 * fsh_plan_job_stage_names); "stage" past the named ones. */
static int stage_labels(const fsh_plan *p, char labels[OPS_MAX_STAGES][32], fsh_error *err) {
  int n = 0;
  FSH_RETURN_NOT_OK(fsh_plan_job_stage_names(p, labels, OPS_MAX_STAGES, &n, err));
  for (int i = n; i < OPS_MAX_STAGES; i++) snprintf(labels[i], 32, "stage");
  return 0;
}

/* The plan as one job on the cluster c (its packed JobPlan plan; fs or
 * flight): wall seconds from submit to the result read, CPU seconds of
 * this process and the workers, the result's checksum and rows, whether
 * the driver verified every partition read, and the job's stages
 * ("label seconds/task-seconds/MB, ...": labels from stage_labels; then
 * a line of the bytes spilled) into stages. With ss the result streams
 * into it as in run_once. */
static int run_cluster(cli_local *c, const fsh_plan *p, const fsh_buffer *plan, bool fs,
                       char labels[OPS_MAX_STAGES][32], sort_sink *ss, double *secs, double *cpu,
                       uint64_t *sum, int64_t *rows, bool *verified, char *stages,
                       size_t stages_size, fsh_error *err) {
  fsh_sched_job_status s;
  fsh_plan_result r;
  double job_secs = 0, t0 = ops_now(), c0 = all_cpu(c);
  int rc = cli_plan_cluster_job(c, p, plan, fs, false, ss ? sort_sink_fn : NULL, ss, &s, &r,
                                &job_secs, err);
  *secs = ops_now() - t0 - (ss ? ss->secs : 0);
  *cpu = all_cpu(c) - c0 - (ss ? ss->cpu : 0);
  if (rc == 130) rc = fsh_error_set(err, EINTR, "interrupted");
  *verified = !rc && s.verified;
  size_t n = 0;
  stages[0] = 0;
  for (int32_t i = 0; !rc && i < s.n_stages && n < stages_size; i++)
    n += (size_t)snprintf(stages + n, stages_size - n, "%s%s %.2fs/%.2fs/%.0fMB",
                          i ? ", " : "", labels[i < OPS_MAX_STAGES ? i : OPS_MAX_STAGES - 1],
                          s.stages[i].seconds, s.stages[i].task_seconds, (double)s.stages[i].bytes / 1e6);
  if (!rc && n < stages_size) /* a budget too small for the data shows here */
    snprintf(stages + n, stages_size - n, "\n      spilled %.0fMB (shuffle files), %.0fMB (operators)",
             (double)s.bytes_spilled / 1e6, (double)s.operator_spilled_bytes / 1e6);
  fsh_sched_job_status_reset(&s);
  if (!rc && !ss) rc = result_sum(&r, sum, err);
  *rows = r.rows;
  fsh_plan_result_reset(&r);
  return rc;
}

/* The plan on the memory backend bk with operator_memory: its time,
 * spilled bytes, and whether it equals ref (the same round's unbounded
 * memory run) -- or, with ss (the sort), whether its stream passes ss's
 * check against the input's rows and checksum (in_rows, in_sum). */
static int run_spilling(const fsh_plan *p, cli_plan_backends *bk, const ops_opts *o,
                        const fsh_plan_result *ref, sort_sink *ss, int64_t in_rows,
                        uint64_t in_sum, double *secs, int64_t *spilled, bool *same,
                        fsh_error *err) {
  const char *dirs[1] = {o->spill_dir};
  fsh_plan_run_options ro = {.backends = bk->backends, .n_backends = bk->n,
                             .n_threads = (int)o->threads, .operator_memory = o->operator_memory,
                             .spill_dirs = dirs, .n_spill_dirs = 1,
                             .sink = ss ? sort_sink_fn : NULL, .sink_arg = ss};
  fsh_plan_result r;
  double t0 = ops_now();
  FSH_RETURN_NOT_OK(fsh_plan_run(p, &ro, &r, err));
  *secs = ops_now() - t0 - (ss ? ss->secs : 0);
  *spilled = r.spilled_bytes;
  if (ss) {
    fsh_sorted_check_result cr;
    fsh_sorted_check_get(ss->check, &cr);
    *same = cr.rows == in_rows && cr.checksum == in_sum &&
            cr.disorder_row < 0;
    if (!*same)
      fprintf(stderr, "bench ops: spilling sort: %" PRId64 " rows (input %" PRId64 "), checksum "
              "%016" PRIx64 " (input %016" PRIx64 "), first row out of order %" PRId64 "\n",
              cr.rows, in_rows, cr.checksum, in_sum, cr.disorder_row);
  } else {
    fsh_error cmp;
    *same = fsh_plan_result_compare(p, &r, ref, &cmp) == 0;
    if (!*same) fprintf(stderr, "bench ops: spilling run differs: %s\n", cmp.message);
  }
  fsh_plan_result_reset(&r);
  return 0;
}

/* Peak resident set (VmHWM) of process pid (0: this one) in bytes; 0 if
 * unreadable. */
static int64_t peak_rss(pid_t pid) {
  char path[64], line[256];
  if (pid) snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  else snprintf(path, sizeof path, "/proc/self/status");
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
  fclose(f);
  return (int64_t)kb * 1024;
}

/* "peak RSS: this process A GB, workers B GB max / C GB summed" into buf. */
static void peak_rss_text(const cli_local *c, char *buf, size_t size, double *self_gb,
                          double *workers_gb) {
  int64_t self = peak_rss(0), max = 0, sum = 0;
  for (int i = 0; i < c->n; i++) {
    int64_t w = peak_rss(c->proc[i].pid);
    sum += w;
    max = w > max ? w : max;
  }
  *self_gb = (double)self / 1e9;
  *workers_gb = (double)sum / 1e9;
  snprintf(buf, size, "peak RSS (VmHWM): this process %.2f GB, workers %.2f GB max / %.2f GB "
           "summed", (double)self / 1e9, (double)max / 1e9, (double)sum / 1e9);
}

static int usage_ops(void) {
  fprintf(stderr,
          "usage: flightshuffle bench ops [--sort-rows N | --sort-bytes BYTES] [--left-rows N]\n"
          "           [--right-rows N] [--plans sort,join_group_by] [--runs K] [--workers N]\n"
          "           [--partitions P] [--sort-partitions P] [--threads T]\n"
          "           [--memory-limit BYTES] [--spill-dir DIR]\n"
          "           [--direct-reads on|off] [--operator-memory BYTES]\n"
          "           [--corrupt none|order|drop|duplicate|change]\n"
          "  a distributed sort of the synthetic table and a partitioned hash join +\n"
          "  group-by of two keyed tables: on the memory backend in this process (T map\n"
          "  threads), and on a local cluster of N worker processes (default 4;\n"
          "  --flight-workers is the same) through the fs and flight backends (workers'\n"
          "  --memory-limit, --spill-dir and --direct-reads: flight readers on the same\n"
          "  host read the writer's map outputs directly, default on); runs interleaved;\n"
          "  --memory-limit: each worker store's budget, by default room for its share\n"
          "  of the sort's exchange and result (2.5 x sort bytes / N, at least 1 GiB, at\n"
          "  most half the machine's memory / N), printed;\n"
          "  the sort's result streams through a check (rows and row checksum equal to\n"
          "  the input's, keys never decreasing), never held; the join's output is checked\n"
          "  against a single-process reference run; --sort-bytes: the sort's row count\n"
          "  from its input bytes (4G: ~134M rows); --corrupt: one batch of each sort\n"
          "  run's result corrupted before the check (verified=no expected);\n"
          "  --operator-memory also runs both on\n"
          "  the memory backend with spilling operators bounded to BYTES, beside the\n"
          "  unbounded run (time ratio).\n"
          "  full size on a 2-core / 24 GiB machine (--sort-partitions 32: 8 concurrent\n"
          "  local sorts of 4 GiB / 8 would need ~12 GB):\n"
          "    --sort-bytes 4G --sort-partitions 32 --left-rows 100000000\n"
          "    --right-rows 10000000 --runs 3\n");
  return 2;
}

int cmd_bench_ops(int argc, char **argv) {
  ops_opts o = {.sort_rows = 2000000, .left_rows = 2000000, .right_rows = 200000, .runs = 3,
                .run_plan = {true, true},
                .workers = 4, .partitions = 8, .threads = 2};
  const char *cluster_spill = NULL;
  bool no_direct_reads = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = v != NULL;
    if (strcmp(a, "--sort-rows") == 0) ok = ok && cli_parse_int(v, 1, INT64_MAX / 2, &o.sort_rows);
    else if (strcmp(a, "--sort-bytes") == 0)
      ok = ok && cli_parse_bytes(v, &o.sort_bytes) && o.sort_bytes > 0;
    else if (strcmp(a, "--plans") == 0) {
      bool sort = ok && strstr(v, "sort") != NULL, join = ok && strstr(v, "join") != NULL;
      ok = ok && (sort || join);
      o.run_plan[0] = sort, o.run_plan[1] = join;
    } else if (strcmp(a, "--corrupt") == 0) {
      int m = -1;
      for (int k = 0; ok && k < 5; k++)
        if (strcmp(v, ops_corrupt_names[k]) == 0) m = k;
      ok = ok && m >= 0;
      o.corrupt = m >= 0 ? (ops_corrupt)m : CORRUPT_NONE;
    }
    else if (strcmp(a, "--left-rows") == 0) ok = ok && cli_parse_int(v, 1, INT64_MAX / 2, &o.left_rows);
    else if (strcmp(a, "--right-rows") == 0) ok = ok && cli_parse_int(v, 1, INT32_MAX, &o.right_rows);
    else if (strcmp(a, "--runs") == 0) ok = ok && cli_parse_int(v, 1, OPS_MAX_RUNS, &o.runs);
    else if (strcmp(a, "--workers") == 0 || strcmp(a, "--flight-workers") == 0)
      ok = ok && cli_parse_int(v, 1, LOCAL_MAX_WORKERS, &o.workers);
    else if (strcmp(a, "--partitions") == 0) ok = ok && cli_parse_int(v, 1, 4096, &o.partitions);
    else if (strcmp(a, "--sort-partitions") == 0)
      ok = ok && cli_parse_int(v, 1, 4096, &o.sort_partitions);
    else if (strcmp(a, "--threads") == 0) ok = ok && cli_parse_int(v, 1, 64, &o.threads);
    else if (strcmp(a, "--memory-limit") == 0)
      ok = ok && cli_parse_bytes(v, &o.memory_limit) && o.memory_limit > 0;
    else if (strcmp(a, "--spill-dir") == 0) cluster_spill = v;
    else if (strcmp(a, "--direct-reads") == 0) {
      ok = ok && (strcmp(v, "on") == 0 || strcmp(v, "off") == 0);
      no_direct_reads = ok && strcmp(v, "off") == 0;
    }
    else if (strcmp(a, "--operator-memory") == 0)
      ok = ok && cli_parse_bytes(v, &o.operator_memory) && o.operator_memory > 0;
    else return usage_ops();
    if (!ok) return cli_fail(2, "bench ops: bad value for %s", a);
    i++;
  }
  char sort_json[2048], sort_scan[1024], join_json[4096], join_scans[1024];
  int P = (int)o.partitions, SP = o.sort_partitions > 0 ? (int)o.sort_partitions : P;
  double sort_row_bytes = 0; /* the synthetic rows' bytes a row */
  if (o.sort_bytes > 0 || (o.memory_limit == 0 && o.run_plan[0])) {
    /* the synthetic rows' bytes from the first 2^20 of them (the same seed) */
    enum { PROBE_ROWS = 1 << 20 };
    char probe[512];
    snprintf(probe, sizeof probe,
             "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"synthetic\", \"rows\": %d, "
             "\"batch_rows\": 8192, \"partitions\": 1, \"seed\": 7}]}", PROBE_ROWS);
    input_scan in;
    fsh_error perr;
    if (input_scan_run(probe, false, &in, &perr) != 0)
      return cli_fail(1, "bench ops: sizing the sort: %s", perr.message);
    sort_row_bytes = (double)in.bytes / PROBE_ROWS;
    if (o.sort_bytes > 0) o.sort_rows = (int64_t)((double)o.sort_bytes / sort_row_bytes + 0.5);
    if (o.sort_rows < 1) o.sort_rows = 1;
  }
  bool budget_default = o.memory_limit == 0;
  if (budget_default)
    o.memory_limit = ops_default_budget(o.run_plan[0] ? (double)o.sort_rows * sort_row_bytes : 0,
                                        o.workers);
  snprintf(sort_scan, sizeof sort_scan,
           "{\"partitions\": %d, \"nodes\": [{\"op\": \"scan\", \"generate\": \"synthetic\", "
           "\"rows\": %" PRId64 ", \"batch_rows\": 8192, \"partitions\": %d, \"seed\": 7}",
           SP, o.sort_rows, SP);
  snprintf(sort_json, sizeof sort_json, "%s, {\"op\": \"sort\", \"keys\": [\"key\"]}]}",
           sort_scan);
  strcat(sort_scan, "]}");
  snprintf(join_scans, sizeof join_scans,
           "{\"partitions\": %d, \"nodes\": ["
           "{\"id\": \"facts\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": %" PRId64
           ", \"batch_rows\": 8192, \"partitions\": %d, \"key_range\": %" PRId64 ", \"seed\": 1},"
           "{\"id\": \"dims\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": %" PRId64
           ", \"batch_rows\": 8192, \"partitions\": %d, \"key_range\": %" PRId64
           ", \"seed\": 2, \"groups\": 64}",
           P, o.left_rows, P, o.right_rows, o.right_rows, P, o.right_rows);
  snprintf(join_json, sizeof join_json,
           "%s, {\"id\": \"dims_p\", \"op\": \"project\", \"input\": \"dims\", \"columns\": "
           "[{\"name\": \"dkey\", \"expr\": {\"col\": \"id\"}}, {\"name\": \"category\", "
           "\"expr\": {\"col\": \"grp\"}}]},"
           "{\"op\": \"join\", \"left\": \"facts\", \"right\": \"dims_p\", \"left_keys\": "
           "[\"key\"], \"right_keys\": [\"dkey\"], \"type\": \"inner\", \"strategy\": "
           "\"partitioned\"},"
           "{\"op\": \"aggregate\", \"keys\": [\"category\"], \"aggs\": [{\"fn\": \"count_star\", "
           "\"name\": \"n\"}, {\"fn\": \"sum\", \"column\": \"amount\", \"name\": \"total\"}]}]}",
           join_scans);
  /* the scans-only plan ends with both scans; run both as outputs would need
   * a union, so measure each scan alone */
  char dims_scan[512];
  snprintf(dims_scan, sizeof dims_scan,
           "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": %" PRId64
           ", \"batch_rows\": 8192, \"partitions\": 1, \"key_range\": %" PRId64
           ", \"seed\": 2, \"groups\": 64}]}",
           o.right_rows, o.right_rows);
  char facts_scan[512];
  snprintf(facts_scan, sizeof facts_scan,
           "{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": %" PRId64
           ", \"batch_rows\": 8192, \"partitions\": 1, \"key_range\": %" PRId64 ", \"seed\": 1}]}",
           o.left_rows, o.right_rows);

  const char *names[2] = {"sort", "join_group_by"};
  const char *plans_json[2] = {sort_json, join_json};
  fsh_plan *plans[2] = {NULL, NULL};
  fsh_buffer *jobs[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* [plan][fs, flight] */
  static char labels[2][OPS_MAX_STAGES][32];
  int64_t bytes[2] = {0, 0};
  cli_plan_backends mem;
  memset(&mem, 0, sizeof mem);
  static cli_local c; /* large */
  bool cluster_up = false;
  fsh_error err;
  int rc = 0, status = 0;
  static double secs[2][OPS_BACKENDS][OPS_MAX_RUNS], cpu[2][OPS_BACKENDS][OPS_MAX_RUNS];
  static double spill_secs[2][OPS_MAX_RUNS];
  int64_t spilled[2] = {0, 0};
  char spill_tmp[64] = "";
  bool verified = true;
  char result[1024] = "";
  size_t rl = 0;
  for (int w = 0; w < 2 && !rc; w++) {
    if ((rc = parse_plan(plans_json[w], 0, &plans[w], &err)) != 0) {
      status = cli_fail(1, "bench ops: %s plan: %s", names[w], err.message);
      break;
    }
    if ((rc = stage_labels(plans[w], labels[w], &err)) != 0) {
      status = cli_fail(1, "bench ops: %s job stages: %s", names[w], err.message);
      break;
    }
    for (int k = 0; k < 2 && !rc; k++) {
      fsh_plan_job_options jo = {.name = names[w],
                                 .backend = k == 0 ? FSH_TASK_BACKEND_FS : FSH_TASK_BACKEND_FLIGHT};
      if ((rc = fsh_plan_job_plan(plans[w], &jo, &jobs[w][k], &err)) != 0)
        status = cli_fail(1, "bench ops: %s job plan: %s", names[w], err.message);
    }
  }
  if (rc) goto done;
  /* the cluster first: cli_local_start wants no thread to exist yet */
  cli_local_options lo = {.n_workers = (int)o.workers, .spill_dir = cluster_spill,
                          .memory_limit = o.memory_limit, .quiet = true, .with_fs_dir = true,
                          .no_direct_reads = no_direct_reads,
                          .log = getenv("FSH_DRIVER_LOG") != NULL};
  if ((rc = cli_local_start(&lo, &c)) != 0) {
    status = rc;
    goto done;
  }
  cluster_up = true;
  if (o.operator_memory > 0) {
    snprintf(spill_tmp, sizeof spill_tmp, "/tmp/fsh-opspill-XXXXXX");
    if (!mkdtemp(spill_tmp)) {
      spill_tmp[0] = 0;
      status = cli_fail(1, "bench ops: mkdtemp: %s", strerror(errno));
      goto done;
    }
    o.spill_dir = spill_tmp;
  }
  /* the inputs, streamed: bytes; the sort's rows and row checksum too (what
   * its result must have) */
  input_scan sort_in = {0}, facts_in = {0}, dims_in = {0};
  double in_t0 = ops_now();
  if (o.run_plan[0]) rc = input_scan_run(sort_scan, true, &sort_in, &err);
  if (!rc && o.run_plan[1] && (rc = input_scan_run(facts_scan, false, &facts_in, &err)) == 0)
    rc = input_scan_run(dims_scan, false, &dims_in, &err);
  bytes[0] = sort_in.bytes;
  bytes[1] = facts_in.bytes + dims_in.bytes;
  if (rc) {
    status = cli_fail(1, "bench ops: generating the input: %s", err.message);
    goto done;
  }
  if ((rc = cli_plan_backends_open("memory", 1, NULL, NULL, 0, &mem, &err)) != 0) {
    status = cli_fail(1, "bench ops: memory backend: %s", err.message);
    goto done;
  }

  printf("bench ops: %" PRId64 " run(s) per plan and backend, interleaved; %d partitions "
         "(the sort: %d); "
         "memory: in this process, %" PRId64 " map thread(s); fs and flight: a local cluster "
         "of %d worker processes (driver %s, direct reads %s); store budget %.2f GiB a worker "
         "(%s)\n",
         o.runs, P, SP, o.threads, c.n, fsh_sched_driver_uri(c.driver),
         no_direct_reads ? "off" : "on", (double)o.memory_limit / (double)(1ll << 30),
         budget_default ? "the default, from the sort's size" : "--memory-limit");
  for (int i = 0; i < c.n; i++)
    printf("  worker %d %s pid %d\n", i + 1, c.proc[i].uri, (int)c.proc[i].pid);
  if (o.run_plan[0])
    printf("  sort: %" PRId64 " rows of (key int64, value float64, name utf8), %.1f MB "
           "(%.2f GiB), input checksum=%016" PRIx64 "\n", sort_in.rows, (double)bytes[0] / 1e6,
           (double)bytes[0] / (double)(1ll << 30), sort_in.checksum);
  if (o.run_plan[1])
    printf("  join_group_by: %" PRId64 " x %" PRId64 " rows (keyed), join on key, group by "
           "category, %.1f MB\n", o.left_rows, o.right_rows, (double)bytes[1] / 1e6);
  printf("  inputs generated and scanned in %.1f s\n", ops_now() - in_t0);
  if (o.corrupt != CORRUPT_NONE)
    printf("  --corrupt %s: one batch of every sort run's result is corrupted before the check\n",
           ops_corrupt_names[o.corrupt]);
  fflush(stdout);

  for (int w = 0; w < 2 && !rc; w++) {
    if (!o.run_plan[w]) continue;
    uint64_t ref = 0;
    int64_t ref_rows = 0;
    /* the sort: its result checked as it streams (sort_sink), against the
     * input's rows and checksum; no reference run */
    int32_t key_col = -1, value_col = -1;
    if (w == 0) {
      fsh_schema *sch = fsh_plan_schema(plans[w]);
      for (int64_t i = 0; sch && i < sch->n_fields; i++) {
        if (strcmp(sch->fields[i].name, "key") == 0) key_col = (int32_t)i;
        if (strcmp(sch->fields[i].name, "value") == 0) value_col = (int32_t)i;
      }
      if (key_col < 0 || value_col < 0 || sch->fields[key_col].type != FSH_TYPE_INT64 ||
          sch->fields[value_col].type != FSH_TYPE_FLOAT64) {
        rc = EINVAL;
        status = cli_fail(1, "bench ops: the sort's output has no int64 'key' and float64 "
                          "'value' columns");
        break;
      }
      ref = sort_in.checksum, ref_rows = sort_in.rows;
    }
    if (w == 1) { /* the reference: one single-process run without exchanges */
      fsh_plan_run_options ro = {.reference = true};
      fsh_plan_result r;
      double t0 = ops_now();
      if ((rc = fsh_plan_run(plans[w], &ro, &r, &err)) == 0) {
        rc = result_sum(&r, &ref, &err);
        ref_rows = r.rows;
        fsh_plan_result_reset(&r);
      }
      if (rc) {
        status = cli_fail(1, "bench ops: %s reference run: %s", names[w], err.message);
        break;
      }
      printf("  reference %-14s %8.3f s  rows=%" PRId64 " checksum=%016" PRIx64 "\n", names[w],
             ops_now() - t0, ref_rows, ref);
      fflush(stdout);
    }
    for (int64_t run = 0; run < o.runs && !rc; run++) {
      for (int k = 0; k < OPS_BACKENDS && !rc; k++) {
        uint64_t sum = 0;
        int64_t rows = 0;
        fsh_plan_result kept;
        memset(&kept, 0, sizeof kept);
        bool spill_here = k == 0 && o.operator_memory > 0;
        bool keep_here = spill_here && w == 1; /* the sort's spilling run checks its stream */
        bool job_ok = true;
        char stages[512] = "";
        sort_sink ss = {.corrupt = o.corrupt, .key_col = key_col, .value_col = value_col};
        if (w == 0) {
          fsh_sort_key asc = {false, false}; /* the plan's: "keys": ["key"] */
          if ((rc = fsh_sorted_check_new(fsh_plan_schema(plans[w]), &key_col, 1, &asc,
                                         &ss.check, &err)) != 0) {
            status = cli_fail(1, "bench ops: %s", err.message);
            break;
          }
        }
        if (k == 0)
          rc = run_once(plans[w], &mem, &o, w == 0 ? &ss : NULL, &secs[w][k][run],
                        &cpu[w][k][run], &sum, &rows, keep_here ? &kept : NULL, &err);
        else
          rc = run_cluster(&c, plans[w], jobs[w][k - 1], k == 1, labels[w], w == 0 ? &ss : NULL,
                           &secs[w][k][run], &cpu[w][k][run], &sum, &rows, &job_ok, stages,
                           sizeof stages, &err);
        fsh_sorted_check_result cr = {.disorder_row = -1};
        if (ss.check) {
          fsh_sorted_check_get(ss.check, &cr);
          fsh_sorted_check_free(ss.check);
          sum = cr.checksum, rows = cr.rows; /* the stream's, as the check saw it */
        }
        if (rc) {
          status = cli_fail(1, "bench ops: %s on %s: %s", names[w], ops_backend_names[k],
                            err.message);
          break;
        }
        bool same = sum == ref && rows == ref_rows && cr.disorder_row < 0;
        if (!same || !job_ok) verified = false;
        char order[160] = "";
        if (w == 0 && cr.disorder_row >= 0)
          snprintf(order, sizeof order, "  OUT OF ORDER at row %" PRId64 " (partition %d)",
                   cr.disorder_row, (int)cr.disorder_partition);
        else if (w == 0)
          snprintf(order, sizeof order, "  in order (%" PRId64 " batches; check %.2f s)",
                   cr.batches, ss.secs);
        bool counts = sum == ref && rows == ref_rows;
        printf("  run %" PRId64 " %-14s %-7s %8.3f s (cpu %.3f s)  rows=%" PRId64
               " checksum=%016" PRIx64 "%s%s%s\n", run, names[w], ops_backend_names[k],
               secs[w][k][run], cpu[w][k][run], rows, sum,
               counts ? "" : w == 0 ? "  MISMATCH with the input" : "  MISMATCH with the reference",
               order, job_ok ? "" : "  NOT VERIFIED by the driver");
        if (stages[0]) printf("      stages (seconds/task seconds/bytes): %s\n", stages);
        fflush(stdout);
        if (spill_here) {
          bool same2 = false;
          sort_sink ss2 = {.corrupt = o.corrupt, .key_col = key_col, .value_col = value_col};
          if (w == 0) {
            fsh_sort_key asc = {false, false};
            rc = fsh_sorted_check_new(fsh_plan_schema(plans[w]), &key_col, 1, &asc, &ss2.check,
                                      &err);
          }
          if (!rc)
            rc = run_spilling(plans[w], &mem, &o, &kept, w == 0 ? &ss2 : NULL, ref_rows, ref,
                              &spill_secs[w][run], &spilled[w], &same2, &err);
          fsh_sorted_check_free(ss2.check);
          if (!rc) {
            if (!same2) verified = false;
            printf("  run %" PRId64 " %-14s %-7s %8.3f s  spilled %.1f MB (operator memory %"
                   PRId64 " bytes)%s\n", run, names[w], "memory+spill", spill_secs[w][run],
                   (double)spilled[w] / 1e6, o.operator_memory,
                   same2 ? "" : "  MISMATCH with the memory backend");
            fflush(stdout);
          }
          if (rc)
            status = cli_fail(1, "bench ops: %s spilling on memory: %s", names[w], err.message);
        }
        fsh_plan_result_reset(&kept);
#ifdef __GLIBC__
        /* give the freed heap of an in-process run back before the cluster's
         * runs (a 4 GiB sort leaves GBs in malloc's arenas otherwise) */
        if (k == 0) malloc_trim(0);
#endif
      }
    }
    if (rc) break;
    printf("%s (%.1f MB in):   seconds min / median / max    GB/s min / median / max"
           "    cpu seconds median\n", names[w], (double)bytes[w] / 1e6);
    for (int k = 0; k < OPS_BACKENDS; k++) {
      double s[3], cs[3];
      ops_stats(secs[w][k], (int)o.runs, s);
      ops_stats(cpu[w][k], (int)o.runs, cs);
      printf("  %-7s %8.3f %8.3f %8.3f       %6.3f %6.3f %6.3f       %8.3f\n",
             ops_backend_names[k], s[0], s[1], s[2], (double)bytes[w] / s[2] / 1e9,
             (double)bytes[w] / s[1] / 1e9, (double)bytes[w] / s[0] / 1e9, cs[1]);
    }
    for (int base = 0; base < 2; base++) {
      double ratio[OPS_MAX_RUNS], r[3];
      for (int64_t run = 0; run < o.runs; run++)
        ratio[run] = secs[w][2][run] / secs[w][base][run];
      ops_stats(ratio, (int)o.runs, r);
      printf("  flight / %-6s time ratio (per round) %5.2f %5.2f %5.2f", ops_backend_names[base],
             r[0], r[1], r[2]);
      rl += (size_t)snprintf(result + rl, sizeof result - rl, " %s_flight_vs_%s=%.2f", names[w],
                             ops_backend_names[base], r[1]);
      for (int64_t run = 0; run < o.runs; run++)
        ratio[run] = cpu[w][2][run] / (cpu[w][base][run] > 0 ? cpu[w][base][run] : 1e-9);
      ops_stats(ratio, (int)o.runs, r);
      printf("   cpu ratio %5.2f %5.2f %5.2f\n", r[0], r[1], r[2]);
      rl += (size_t)snprintf(result + rl, sizeof result - rl, " %s_flight_vs_%s_cpu=%.2f",
                             names[w], ops_backend_names[base], r[1]);
    }
    if (o.operator_memory > 0) {
      double s[3], ratio[OPS_MAX_RUNS], r[3];
      ops_stats(spill_secs[w], (int)o.runs, s);
      printf("  %-7s %8.3f %8.3f %8.3f       %6.3f %6.3f %6.3f       (spilled %.1f MB a run)\n",
             "memory+spill", s[0], s[1], s[2], (double)bytes[w] / s[2] / 1e9,
             (double)bytes[w] / s[1] / 1e9, (double)bytes[w] / s[0] / 1e9,
             (double)spilled[w] / 1e6);
      for (int64_t run = 0; run < o.runs; run++)
        ratio[run] = spill_secs[w][run] / secs[w][0][run];
      ops_stats(ratio, (int)o.runs, r);
      printf("  spilling / in-memory time ratio (memory backend, per round) %5.2f %5.2f %5.2f\n",
             r[0], r[1], r[2]);
      rl += (size_t)snprintf(result + rl, sizeof result - rl,
                             " %s_spill_vs_memory=%.2f %s_spilled_mb=%.1f", names[w], r[1],
                             names[w], (double)spilled[w] / 1e6);
    }
    double m[3];
    ops_stats(secs[w][2], (int)o.runs, m);
    rl += (size_t)snprintf(result + rl, sizeof result - rl, " %s_flight_gbps=%.3f", names[w],
                           (double)bytes[w] / m[1] / 1e9);
    char rss[200];
    double self_gb, workers_gb;
    peak_rss_text(&c, rss, sizeof rss, &self_gb, &workers_gb);
    printf("  %s (after %s)\n", rss, names[w]);
    fflush(stdout);
  }
  if (!rc) {
    char rss[200];
    double self_gb = 0, workers_gb = 0;
    peak_rss_text(&c, rss, sizeof rss, &self_gb, &workers_gb);
    rl += (size_t)snprintf(result + rl, sizeof result - rl,
                           " sort_gib=%.2f peak_rss_gb=%.2f workers_peak_rss_gb=%.2f",
                           (double)bytes[0] / (double)(1ll << 30), self_gb, workers_gb);
    printf("result: workers=%d worker_budget_gib=%.2f%s verified=%s\n", c.n,
           (double)o.memory_limit / (double)(1ll << 30), result, verified ? "yes" : "no");
    if (!verified) status = 1;
  }
done:
  cli_plan_backends_close(&mem);
  if (cluster_up) cli_local_stop(&c);
  for (int w = 0; w < 2; w++) {
    fsh_plan_free(plans[w]);
    for (int k = 0; k < 2; k++) fsh_buffer_unref(jobs[w][k]);
  }
  if (spill_tmp[0] && rmdir(spill_tmp) != 0)
    status = cli_fail(1, "bench ops: spill directory %s not removed: %s", spill_tmp,
                      strerror(errno));
  return status;
}
