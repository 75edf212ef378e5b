/* bench_range.c -- reading every partition of many map outputs through the
 * flight backend one partition per reader (fsh_shuffle_open_reader, the
 * baseline) against runs of partitions per reader
 * (fsh_shuffle_open_range_reader, which opens each source once per run):
 * the per-(source, partition) work that dominates 1000 x 1000
 * (PROFILE_1000.md) against per-(source, run).
 *
 *   build/bench_range [--maps M] [--partitions P] [--ranges R] [--bytes N]
 *                     [--runs K] [--paths local,direct,doget] [--range-only]
 *
 * Defaults: 1000 maps x 1000 partitions, 16 runs of 62-63 partitions,
 * 256 MiB of synthetic rows, 3 runs. One in-process worker holds every map
 * output in memory (memory images); the readers: "local", a backend on that
 * worker (its store read in-process); "direct", a reader-only backend on
 * the same host (memfds read directly after one locate per reader);
 * "doget", a reader-only backend with direct reads off (DoGet). Everything
 * runs in this process, so CPU is the process's CPU time (client and
 * server sides both) and wall the elapsed time of reading everything once.
 * Verification (not timed against): each read's rows and the per-partition
 * order-independent row checksums (fsh_task_row_checksums) equal what the
 * maps wrote, for both modes.
 *
 * Ends with one machine-readable `result:` line. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_range: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

typedef struct totals {
  int64_t rows;
  uint64_t *sums; /* [partitions] */
} totals;

/* Reads every partition: one reader per partition (ranges 0) or `ranges`
 * range readers over even runs. Adds rows and per-partition sums. */
static void read_all(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                     const fsh_map_output *outs, int64_t n, int ranges, totals *t) {
  fsh_error err = {{0}};
  int32_t P = spec->n_partitions;
  if (ranges == 0) {
    for (int32_t q = 0; q < P; q++) {
      fsh_batch_stream s = {0};
      if (fsh_shuffle_open_reader(b, spec, q, outs, n, &s, &err)) die("open_reader", &err);
      for (;;) {
        fsh_batch *x = NULL;
        if (s.get_next(&s, &x, &err)) die("read", &err);
        if (!x) break;
        t->rows += x->length;
        fsh_task_row_checksums(x, NULL, &t->sums[q]);
        fsh_batch_unref(x);
      }
      s.release(&s);
    }
    return;
  }
  for (int i = 0; i < ranges; i++) {
    int32_t first = (int32_t)((int64_t)i * P / ranges),
            end = (int32_t)((int64_t)(i + 1) * P / ranges);
    if (end == first) continue;
    fsh_range_stream s = {0};
    if (fsh_shuffle_open_range_reader(b, spec, first, end - first, outs, n, &s, &err))
      die("open_range_reader", &err);
    for (;;) {
      fsh_batch *x = NULL;
      int32_t q = -1;
      if (s.get_next(&s, &q, &x, &err)) die("range read", &err);
      if (!x) break;
      if (q < first || q >= end) {
        fprintf(stderr, "bench_range: batch of partition %d in run [%d, %d)\n", q, first, end);
        exit(1);
      }
      t->rows += x->length;
      fsh_task_row_checksums(x, NULL, &t->sums[q]);
      fsh_batch_unref(x);
    }
    s.release(&s);
  }
}

int main(int argc, char **argv) {
  int maps = 1000, ranges = 16, runs = 3;
  int32_t P = 1000;
  double bytes = 256.0 * (1 << 20);
  const char *paths = "local,direct,doget";
  bool range_only = false; /* (for profiling the range readers alone) */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--maps") && i + 1 < argc) maps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--partitions") && i + 1 < argc) P = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = atof(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--paths") && i + 1 < argc) paths = argv[++i];
    else if (!strcmp(argv[i], "--range-only")) range_only = true;
    else {
      fprintf(stderr, "usage: bench_range [--maps M] [--partitions P] [--ranges R] "
              "[--bytes N] [--runs K] [--paths local,direct,doget] [--range-only]\n");
      return 2;
    }
  }
  if (maps < 1 || P < 1 || ranges < 1 || ranges > P || runs < 1 || bytes <= 0) {
    fprintf(stderr, "bench_range: bad arguments\n");
    return 2;
  }
  fsh_error err = {{0}};
  fsh_shuffle_worker *w = NULL;
  fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .memory_limit = (int64_t)1 << 40,
                                   .n_threads = 2};
  if (fsh_shuffle_worker_start(&wo, &w, &err)) die("worker", &err);
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = NULL, *direct = NULL, *doget = NULL;
  fsh_shuffle_flight_options o = {.local = w, .peers = &uri, .n_peers = 1, .timeout_ms = 600000};
  if (fsh_shuffle_flight_new(&o, &local, &err)) die("backend", &err);
  o.local = NULL;
  o.direct_min_bytes = -1;
  if (fsh_shuffle_flight_new(&o, &direct, &err)) die("backend", &err);
  o.no_direct_reads = true;
  if (fsh_shuffle_flight_new(&o, &doget, &err)) die("backend", &err);

  /* the maps: rows of the synthetic table to pseudo-random partitions */
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_shuffle_spec spec = {.shuffle_id = 1, .n_partitions = P, .schema = schema,
                           .compression = FSH_COMPRESSION_NONE};
  fsh_synthetic_options so = {.seed = 5, .with_nulls = true};
  fsh_batch *probe = NULL;
  if (fsh_synthetic_batch(schema, &so, 0, 1024, &probe, &err)) die("generate", &err);
  /* bytes per row as the shuffle counts them (fsh_shuffle_batch_bytes) */
  fsh_shuffle_writer *pw = NULL;
  fsh_map_output po = {0};
  fsh_shuffle_spec one = spec;
  one.shuffle_id = 2;
  one.n_partitions = 1;
  if (fsh_shuffle_open_writer(local, &one, 0, 0, &pw, &err) || pw->write(pw, 0, probe, &err) ||
      pw->close(pw, &po, &err))
    die("probe", &err);
  double row_bytes = (double)po.bytes[0] / (double)probe->length;
  fsh_map_output_reset(&po);
  if (fsh_shuffle_release(local, 2, &err)) die("release", &err);
  fsh_batch_unref(probe);
  int64_t rows_per_map = (int64_t)(bytes / row_bytes / maps);
  if (rows_per_map < 1) rows_per_map = 1;
  fsh_map_output *outs = calloc((size_t)maps, sizeof *outs);
  uint64_t *want = calloc((size_t)P, sizeof *want);
  int32_t *part = malloc(sizeof *part * (size_t)rows_per_map);
  fsh_batch **parts = calloc((size_t)P, sizeof *parts);
  if (!outs || !want || !part || !parts) die("out of memory", NULL);
  int64_t want_rows = 0, stored = 0;
  double t0 = bench_now();
  for (int m = 0; m < maps; m++) {
    fsh_batch *x = NULL;
    if (fsh_synthetic_batch(schema, &so, m, rows_per_map, &x, &err)) die("generate", &err);
    for (int64_t i = 0; i < rows_per_map; i++)
      part[i] = (int32_t)(mix((uint64_t)m * 1000003u + (uint64_t)i) % (uint64_t)P);
    fsh_task_row_checksums(x, part, want);
    fsh_shuffle_writer *wr = NULL;
    if (fsh_shuffle_open_writer(local, &spec, m, 0, &wr, &err)) die("open_writer", &err);
    if (fsh_shuffle_write_rows(wr, x, part, P, parts, &err)) die("write", &err);
    if (wr->close(wr, &outs[m], &err)) die("close", &err);
    want_rows += x->length;
    for (int32_t q = 0; q < P; q++) stored += outs[m].bytes[q];
    fsh_batch_unref(x);
  }
  printf("bench_range: %d map outputs x %d partitions, %lld rows, %.1f MB stored (written in "
         "%.1f s); %d runs per range reader (%d-%d partitions each), %d runs\n", maps, P,
         (long long)want_rows, stored / 1e6, bench_now() - t0, ranges, P / ranges,
         (P + ranges - 1) / ranges, runs);
  printf("  %-8s %-7s %26s %26s\n", "path", "mode", "wall s (min/med/max)",
         "cpu s (min/med/max)");

  bool verified = true;
  char result[1024];
  size_t at = 0;
  struct {
    const char *name;
    fsh_shuffle_backend *b;
  } path_list[3] = {{"local", local}, {"direct", direct}, {"doget", doget}};
  totals t = {0, calloc((size_t)P, sizeof(uint64_t))};
  if (!t.sums) die("out of memory", NULL);
  for (int pi = 0; pi < 3; pi++) {
    if (!strstr(paths, path_list[pi].name)) continue;
    double med_wall[2] = {0}, med_cpu[2] = {0};
    for (int mode = range_only ? 1 : 0; mode < 2; mode++) {
      double *wall = calloc((size_t)runs, sizeof *wall), *cpu = calloc((size_t)runs, sizeof *cpu);
      if (!wall || !cpu) die("out of memory", NULL);
      for (int r = 0; r < runs; r++) {
        t.rows = 0;
        memset(t.sums, 0, sizeof(uint64_t) * (size_t)P);
        double w0 = bench_now(), c0 = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
        read_all(path_list[pi].b, &spec, outs, maps, mode ? ranges : 0, &t);
        wall[r] = bench_now() - w0;
        cpu[r] = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        bool ok = t.rows == want_rows && memcmp(t.sums, want, sizeof(uint64_t) * (size_t)P) == 0;
        if (!ok)
          fprintf(stderr, "bench_range: %s %s run %d: %lld rows (want %lld) or the row "
                  "checksums differ\n", path_list[pi].name, mode ? "range" : "single", r,
                  (long long)t.rows, (long long)want_rows);
        verified = verified && ok;
      }
      qsort(wall, (size_t)runs, sizeof *wall, bench_cmp_double);
      qsort(cpu, (size_t)runs, sizeof *cpu, bench_cmp_double);
      printf("  %-8s %-7s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", path_list[pi].name,
             mode ? "range" : "single", wall[0], wall[runs / 2], wall[runs - 1], cpu[0],
             cpu[runs / 2], cpu[runs - 1]);
      med_wall[mode] = wall[runs / 2];
      med_cpu[mode] = cpu[runs / 2];
      free(wall);
      free(cpu);
    }
    printf("  %-8s single/range: wall %.2fx, cpu %.2fx\n", path_list[pi].name,
           med_wall[0] / med_wall[1], med_cpu[0] / med_cpu[1]);
    at += (size_t)snprintf(result + at, sizeof result - at,
                           " %s_wall_single=%.3f %s_wall_range=%.3f %s_cpu_single=%.3f "
                           "%s_cpu_range=%.3f %s_cpu_ratio=%.2f",
                           path_list[pi].name, med_wall[0], path_list[pi].name, med_wall[1],
                           path_list[pi].name, med_cpu[0], path_list[pi].name, med_cpu[1],
                           path_list[pi].name, med_cpu[0] / med_cpu[1]);
  }
  printf("result: name=bench_range maps=%d partitions=%d ranges=%d rows=%lld%s verified=%s\n",
         maps, P, ranges, (long long)want_rows, result, verified ? "yes" : "no");
  if (fsh_shuffle_release(doget, 1, &err)) die("release", &err);
  for (int m = 0; m < maps; m++) fsh_map_output_reset(&outs[m]);
  free(outs);
  free(want);
  free(part);
  free(parts);
  free(t.sums);
  fsh_schema_unref(schema);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(direct);
  fsh_shuffle_backend_destroy(doget);
  fsh_shuffle_worker_stop(w, 5000);
  return verified ? 0 : 1;
}
