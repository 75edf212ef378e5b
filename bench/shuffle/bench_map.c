/* bench_map.c -- the map side of the synthetic shuffle in one thread, stage
 * by stage: generate (fsh_synthetic_batch), hash + partition, row
 * checksums (the dispatched path, and the AVX2 and scalar paths for
 * reference; all must give the same sums), the scatter kernel alone (fsh_scatter, what the memory backend
 * does; its result dropped), and the rows into the store writer of an
 * in-process worker (fsh_shuffle_write_rows: the partition builders, then
 * the blocks into a map-output image in a memfd, or spill files under
 * --memory-limit); then fsh_map_task_run as a whole, and the memory
 * backend's map task. Times are the thread's CPU time (kernel time
 * of its writes included), so that a loaded machine disturbs them less
 * than wall time; reported as GB/s of table bytes against a memcpy of the
 * same bytes measured in the same run.
 *
 *   build/bench_map [--bytes N] [--runs R] [--maps M] [--partitions P]
 *                   [--memory-limit B] [--dir DIR] [--batch-rows N (65536)]
 *                   [--only-task]
 *
 * --only-task runs the flight map task alone (no stage loop, no memory
 * backend, no memcpy baseline: for a profile of the map task only).
 *
 * Verification (not timed): the whole map task's per-partition row
 * checksums equal the stage loop's, and reading every partition back from
 * the store (fsh_reduce_task_run) gives the same rows and checksums.
 *
 * Ends with one machine-readable `result:` line. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

#include "shuffle/shuffle_internal.h" /* fsh_shuffle_batch_bytes */

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_map: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

/* "256M", "1G", "4096": bytes (K, M, G are powers of 1024). */
static double parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  double mul = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
               : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
  return v * mul;
}

enum { ST_GEN, ST_HASH, ST_SUM, ST_SUM_AVX2, ST_SUM_SCALAR, ST_SCATTER, ST_WRITE, ST_TASK,
       ST_MEM_TASK, ST_MEMCPY, N_ST };
static const char *k_names[N_ST] = {
    "generate", "hash + partition", "row checksums", "row checksums (AVX2 path)",
    "row checksums (scalar path)",
    "scatter (fsh_scatter alone)",
    "rows into the store + close",
    "map task (flight store)", "map task (memory backend)", "memcpy (baseline)"};

typedef struct config {
  double bytes;
  int runs, maps;
  int32_t partitions, batch_rows;
  int64_t memory_limit;
  const char *dir;
  bool only_task;
} config;

static fsh_map_task task_of(const config *c, int64_t rows_per_map, int m, uint64_t shuffle_id,
                            fsh_task_backend be) {
  return (fsh_map_task){.shuffle_id = shuffle_id, .map_id = m, .n_partitions = c->partitions,
                        .first_row = rows_per_map * m, .rows = rows_per_map,
                        .batch_rows = c->batch_rows, .seed = 42, .backend = be};
}

/* The stages of one map task, timed one by one (map_batch's steps). */
static void stage_loop(const config *c, fsh_shuffle_backend *fl, fsh_schema *schema,
                       const fsh_map_task *t, double *secs, uint64_t *sums,
                       uint64_t *scalar_sums, uint64_t *avx2_sums) {
  fsh_error err;
  int32_t R = c->partitions;
  uint64_t *hashes = malloc(sizeof *hashes * (size_t)c->batch_rows);
  int32_t *parts = malloc(sizeof *parts * (size_t)c->batch_rows);
  fsh_batch **outs = calloc((size_t)R, sizeof *outs);
  if (!hashes || !parts || !outs) die("out of memory", NULL);
  fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = R, .schema = schema};
  fsh_shuffle_writer *w = NULL;
  double t0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
  if (fsh_shuffle_open_writer(fl, &spec, t->map_id, 0, &w, &err) != 0) die("open writer", &err);
  secs[ST_WRITE] += bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  fsh_synthetic_options so = {.seed = t->seed, .with_nulls = true};
  int32_t key = 0;
  for (int64_t done = 0; done < t->rows; done += c->batch_rows) {
    fsh_batch *b = NULL;
    double a = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    if (fsh_synthetic_batch(schema, &so, (t->first_row + done) / c->batch_rows, c->batch_rows,
                            &b, &err) != 0)
      die("generate", &err);
    double h = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    if (fsh_hash_columns(b, &key, 1, 0, hashes, &err) != 0 ||
        fsh_partition_hash(hashes, b->length, R, parts, &err) != 0)
      die("hash", &err);
    double s = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    /* the dispatched, AVX2 (scalar where the CPU lacks it) and scalar
     * paths, in an order rotating by batch, so that none always finds the
     * batch in cache */
    static const int stage_of[3] = {ST_SUM, ST_SUM_AVX2, ST_SUM_SCALAR};
    uint64_t *into[3] = {sums, avx2_sums, scalar_sums};
    static const fsh_rowsum_path path_of[3] = {FSH_ROWSUM_BEST, FSH_ROWSUM_AVX2,
                                               FSH_ROWSUM_SCALAR};
    int first = (int)((done / c->batch_rows) % 3);
    for (int k = 0; k < 3; k++) {
      int q = (first + k) % 3;
      double y = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
      (void)fsh_task_row_checksums_path(b, parts, into[q], path_of[q]);
      secs[stage_of[q]] += bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - y;
    }
    double x = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    if (fsh_scatter(b, parts, R, outs, &err) != 0) die("scatter", &err); /* for reference */
    for (int32_t p = 0; p < R; p++) {
      fsh_batch_unref(outs[p]);
      outs[p] = NULL;
    }
    double wr = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    if (fsh_shuffle_write_rows(w, b, parts, R, outs, &err) != 0) die("write", &err);
    fsh_batch_unref(b);
    double e = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    secs[ST_GEN] += h - a, secs[ST_HASH] += s - h;
    secs[ST_SCATTER] += wr - x, secs[ST_WRITE] += e - wr;
  }
  fsh_map_output out = {0};
  t0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
  if (w->close(w, &out, &err) != 0) die("close", &err);
  secs[ST_WRITE] += bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  fsh_map_output_reset(&out);
  free(hashes), free(parts), free(outs);
}

/* Reads every partition of the maps back from the flight backend and
 * compares rows and row checksums with the map side's. */
static bool verify(const config *c, fsh_shuffle_backend *fl, uint64_t shuffle_id,
                   fsh_map_task_result *maps) {
  bool ok = true;
  for (int32_t p = 0; p < c->partitions && ok; p++) {
    fsh_reduce_task t = {.shuffle_id = shuffle_id, .partition = p,
                         .n_partitions = c->partitions, .backend = FSH_TASK_BACKEND_FLIGHT};
    fsh_reduce_source *src = calloc((size_t)c->maps, sizeof *src);
    char *loc = maps[0].output.location;
    int64_t rows = 0;
    uint64_t sum = 0;
    for (int m = 0; m < c->maps; m++) {
      const fsh_map_output *o = &maps[m].output;
      src[t.n_sources++] = (fsh_reduce_source){.map_id = o->map_id, .attempt = o->attempt,
                                               .rows = o->rows[p], .bytes = o->bytes[p],
                                               .checksum = o->checksums[p]};
      rows += o->rows[p];
      sum += maps[m].row_checksums[p];
    }
    t.sources = src, t.n_locations = 1, t.locations = &loc;
    fsh_reduce_task_result r;
    fsh_error err;
    if (fsh_reduce_task_run(fl, &t, &r, &err) != 0) {
      fprintf(stderr, "bench_map: reading partition %d: %s\n", p, err.message);
      ok = false;
    } else {
      ok = r.rows == rows && r.checksum == sum;
    }
    free(src);
  }
  return ok;
}

int main(int argc, char **argv) {
  config c = {.bytes = 256.0 * (1 << 20), .runs = 3, .maps = 4, .partitions = 64,
              .memory_limit = (int64_t)64 << 30, .dir = "/tmp"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && strcmp(a, "--bytes") == 0) c.bytes = parse_bytes(v), i++;
    else if (v && strcmp(a, "--runs") == 0) c.runs = atoi(v), i++;
    else if (v && strcmp(a, "--maps") == 0) c.maps = atoi(v), i++;
    else if (v && strcmp(a, "--partitions") == 0) c.partitions = atoi(v), i++;
    else if (v && strcmp(a, "--memory-limit") == 0) c.memory_limit = (int64_t)parse_bytes(v), i++;
    else if (v && strcmp(a, "--dir") == 0) c.dir = v, i++;
    else if (v && strcmp(a, "--batch-rows") == 0) c.batch_rows = atoi(v), i++;
    else if (strcmp(a, "--only-task") == 0) c.only_task = true;
    else {
      fprintf(stderr, "usage: bench_map [--bytes N] [--runs R] [--maps M] [--partitions P] "
                      "[--memory-limit B] [--dir DIR] [--batch-rows N] [--only-task]\n");
      return 2;
    }
  }
  if (c.runs < 1 || c.maps < 1 || c.partitions < 1 || c.bytes < 1) die("bad arguments", NULL);
  fsh_error err;
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_synthetic_options so = {.seed = 42, .with_nulls = true};
  fsh_batch *sample = NULL;
  if (!schema || fsh_synthetic_batch(schema, &so, 0, 65536, &sample, &err) != 0)
    die("sample", &err);
  double bytes_per_row = (double)fsh_shuffle_batch_bytes(sample) / 65536;
  fsh_batch_unref(sample);
  if (c.batch_rows < 1) c.batch_rows = 65536;
  int64_t rows_per_map = (int64_t)(c.bytes / bytes_per_row / c.maps) / c.batch_rows * c.batch_rows;
  if (rows_per_map < c.batch_rows) rows_per_map = c.batch_rows;
  double table_bytes = bytes_per_row * (double)rows_per_map * c.maps;

  char dir[256];
  snprintf(dir, sizeof dir, "%s/bench_map.%d", c.dir, (int)getpid());
  const char *dirs[1] = {dir};
  fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .spill_dirs = dirs,
                                   .n_spill_dirs = 1, .memory_limit = c.memory_limit};
  fsh_shuffle_worker *worker = NULL;
  fsh_shuffle_backend *fl = NULL, *mem = NULL;
  if (fsh_shuffle_worker_start(&wo, &worker, &err) != 0) die("worker", &err);
  fsh_shuffle_flight_options fo = {.local = worker};
  if (fsh_shuffle_flight_new(&fo, &fl, &err) != 0 || fsh_shuffle_memory_new(&mem, &err) != 0)
    die("backend", &err);

  /* the baseline: one copy of the table's bytes through a 64 MiB buffer */
  size_t chunk = (size_t)64 << 20;
  uint8_t *src = malloc(chunk), *dst = malloc(chunk);
  if (!src || !dst) die("out of memory", NULL);
  memset(src, 1, chunk), memset(dst, 2, chunk);

  double *secs = calloc((size_t)N_ST * (size_t)c.runs, sizeof *secs);
  uint64_t *sums = calloc((size_t)c.partitions, sizeof *sums);
  uint64_t *scalar_sums = calloc((size_t)c.partitions, sizeof *scalar_sums);
  uint64_t *avx2_sums = calloc((size_t)c.partitions, sizeof *avx2_sums);
  fsh_map_task_result *res = calloc((size_t)c.maps, sizeof *res);
  if (!secs || !sums || !scalar_sums || !avx2_sums || !res) die("out of memory", NULL);
  bool verified = true;
  printf("bench_map: %d maps x %" PRId64 " rows (%.0f MiB of table), %d partitions, "
         "memory limit %.0f MiB, one thread (CPU time)\n",
         c.maps, rows_per_map, table_bytes / (1 << 20), c.partitions,
         (double)c.memory_limit / (1 << 20));
  for (int run = 0; run < c.runs; run++) {
    double *s = secs + (size_t)N_ST * (size_t)run;
    uint64_t shuffle_id = 1000 + (uint64_t)run * 3;
    memset(sums, 0, sizeof *sums * (size_t)c.partitions);
    memset(scalar_sums, 0, sizeof *scalar_sums * (size_t)c.partitions);
    memset(avx2_sums, 0, sizeof *avx2_sums * (size_t)c.partitions);
    for (int m = 0; m < c.maps && !c.only_task; m++) {
      fsh_map_task t = task_of(&c, rows_per_map, m, shuffle_id, FSH_TASK_BACKEND_FLIGHT);
      stage_loop(&c, fl, schema, &t, s, sums, scalar_sums, avx2_sums);
    }
    if (fsh_shuffle_release(fl, shuffle_id, &err) != 0) die("release", &err);
    for (int m = 0; m < c.maps; m++) {
      fsh_map_task t = task_of(&c, rows_per_map, m, shuffle_id + 1, FSH_TASK_BACKEND_FLIGHT);
      double t0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
      if (fsh_map_task_run(fl, &t, &res[m], &err) != 0) die("map task", &err);
      s[ST_TASK] += bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    }
    for (int32_t p = 0; p < c.partitions && !c.only_task; p++) {
      uint64_t x = 0;
      for (int m = 0; m < c.maps; m++) x += res[m].row_checksums[p];
      verified &= x == sums[p] && x == scalar_sums[p] && x == avx2_sums[p];
    }
    if (run == 0) verified &= verify(&c, fl, shuffle_id + 1, res);
    for (int m = 0; m < c.maps; m++) fsh_map_task_result_reset(&res[m]);
    if (fsh_shuffle_release(fl, shuffle_id + 1, &err) != 0) die("release", &err);
    for (int m = 0; m < c.maps && !c.only_task; m++) {
      fsh_map_task t = task_of(&c, rows_per_map, m, shuffle_id + 2, FSH_TASK_BACKEND_MEMORY);
      double t0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
      if (fsh_map_task_run(mem, &t, &res[m], &err) != 0) die("memory map task", &err);
      s[ST_MEM_TASK] += bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    }
    for (int m = 0; m < c.maps; m++) fsh_map_task_result_reset(&res[m]);
    if (fsh_shuffle_release(mem, shuffle_id + 2, &err) != 0) die("release", &err);
    double t0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
    for (double left = c.only_task ? 0 : table_bytes; left > 0; left -= (double)chunk)
      memcpy(dst, src, left < (double)chunk ? (size_t)left : chunk);
    s[ST_MEMCPY] = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  }
  bench_stats st[N_ST];
  double col[64];
  for (int k = 0; k < N_ST; k++) {
    for (int run = 0; run < c.runs && run < 64; run++) col[run] = secs[(size_t)N_ST * (size_t)run + (size_t)k];
    st[k] = bench_summarize(col, c.runs < 64 ? c.runs : 64, table_bytes);
  }
  printf("  %-34s %7s %7s %7s GB/s   (median vs memcpy)\n", "stage (table bytes / CPU s)",
         "min", "median", "max");
  if (c.only_task) { /* the one stage timed */
    bench_print(k_names[ST_TASK], st[ST_TASK], st[ST_TASK].med, "itself");
    printf("result: name=bench_map verified=%s maps=%d partitions=%d bytes=%.0f only_task=yes "
           "task_gbps=%.3f\n", verified ? "yes" : "no", c.maps, c.partitions, table_bytes,
           st[ST_TASK].med);
  } else {
    for (int k = 0; k < N_ST; k++) bench_print(k_names[k], st[k], st[ST_MEMCPY].med, "memcpy");
    printf("result: name=bench_map verified=%s maps=%d partitions=%d bytes=%.0f "
           "gen_gbps=%.3f hash_gbps=%.3f sums_gbps=%.3f sums_avx2_gbps=%.3f sums_scalar_gbps=%.3f "
           "scatter_gbps=%.3f write_gbps=%.3f "
           "task_gbps=%.3f mem_task_gbps=%.3f memcpy_gbps=%.3f task_vs_memcpy=%.3f\n",
           verified ? "yes" : "no", c.maps, c.partitions, table_bytes, st[ST_GEN].med,
           st[ST_HASH].med, st[ST_SUM].med, st[ST_SUM_AVX2].med, st[ST_SUM_SCALAR].med, st[ST_SCATTER].med, st[ST_WRITE].med,
           st[ST_TASK].med, st[ST_MEM_TASK].med, st[ST_MEMCPY].med,
           st[ST_TASK].med / st[ST_MEMCPY].med);
  }
  free(secs), free(sums), free(scalar_sums), free(avx2_sums), free(res), free(src), free(dst);
  fsh_shuffle_backend_destroy(fl);
  fsh_shuffle_backend_destroy(mem);
  fsh_shuffle_worker_stop(worker, 1000);
  rmdir(dir);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
