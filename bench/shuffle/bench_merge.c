/* bench_merge.c -- the pre-shuffle merge of a worker's store
 * (fsh_shuffle_store_merge) at many partitions, where every partition's
 * blocks are small and re-encoded: P map outputs of the synthetic table
 * (key int64, value float64, name utf8; with nulls), written the way a map
 * task writes them (hash-partitioned rows through the store writer's
 * partition builders, not timed) into N partitions, then merged into one
 * output, again and again. Two ways alternate, ABBA: the baseline, measured
 * in the same run, is the decode / concat / encode re-encoding (the merge
 * with the splice turned off: test hook no_splice); the other splices the
 * blocks' record batch messages (fsh_ipc_splicer). Each merge's output is
 * dropped before the next.
 *
 *   build/bench_merge [--parts P] [--partitions N] [--part-bytes B] [--runs R]
 *                     [--only decode|splice]
 *
 * --only runs one way (for a profiler; nothing compared, the result line
 * says verified=no).
 * Defaults: 250 parts x 1000 partitions of 2 MiB of table each (the map
 * tasks of `bench shuffle --maps 1000 --reduces 1000 --bytes 2G`: ~2 KiB
 * blocks). GB/s are of the parts' stored bytes; CPU is the merging
 * thread's. Verification: every merge holds every row (the parts' rows per
 * partition), and the spliced output is byte for byte the decoded one
 * (per partition: bytes and checksums equal). Ends with one
 * machine-readable `result:` line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

#include "shuffle/shuffle_internal.h"
#include "shuffle/worker_internal.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_merge: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

int main(int argc, char **argv) {
  int n_parts = 250, n_part = 1000, runs = 4;
  int64_t part_bytes = (int64_t)2 << 20;
  int only = -1; /* 0 decode, 1 splice */
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--parts") == 0) n_parts = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--partitions") == 0) n_part = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--part-bytes") == 0) part_bytes = strtoll(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--only") == 0) only = strcmp(argv[i + 1], "splice") == 0;
    else {
      fprintf(stderr, "usage: bench_merge [--parts P] [--partitions N] [--part-bytes B] "
              "[--runs R] [--only decode|splice]\n");
      return 2;
    }
  }
  if (n_parts < 1 || n_part < 1 || part_bytes < 1 || runs < 1) die("bad arguments", NULL);
  fsh_error err = {{0}};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_synthetic_options so = {.seed = 7, .with_nulls = true};
  fsh_shuffle_store *s = NULL;
  fsh_shuffle_store_options o = {.memory_limit = (int64_t)1 << 50, .name = "bench"};
  if (!schema || fsh_shuffle_store_new(&o, &s, &err) != 0) die("store", &err);
  fsh_shuffle_spec spec = {.shuffle_id = 1, .n_partitions = n_part, .schema = schema};
  /* rows of a part: about part_bytes of table (measured on one batch) */
  fsh_batch *probe = NULL;
  if (fsh_synthetic_batch(schema, &so, 0, 4096, &probe, &err) != 0) die("generating", &err);
  int64_t rows_per_part = part_bytes * 4096 / fsh_shuffle_batch_bytes(probe);
  fsh_batch_unref(probe);
  int64_t *maps = calloc((size_t)n_parts, sizeof *maps);
  int32_t *attempts = calloc((size_t)n_parts, sizeof *attempts);
  int64_t *want_rows = calloc((size_t)n_part, sizeof *want_rows);
  uint64_t *hashes = malloc(sizeof *hashes * (size_t)rows_per_part);
  int32_t *pid = malloc(sizeof *pid * (size_t)rows_per_part);
  if (!maps || !attempts || !want_rows || !hashes || !pid) die("out of memory", NULL);
  int64_t in_bytes = 0, in_blocks = 0;
  for (int i = 0; i < n_parts; i++) {
    fsh_batch *b = NULL;
    int32_t key = 0;
    fsh_store_writer *w = NULL;
    fsh_map_output mo = {0};
    maps[i] = i;
    if (fsh_synthetic_batch(schema, &so, i, rows_per_part, &b, &err) != 0 ||
        fsh_hash_columns(b, &key, 1, 0, hashes, &err) != 0 ||
        fsh_partition_hash(hashes, b->length, n_part, pid, &err) != 0)
      die("generating", &err);
    if (fsh_store_writer_open(s, &spec, i, 0, &w, &err) != 0 ||
        fsh_store_writer_write_rows(w, b, pid, &err) != 0 ||
        fsh_store_writer_close(w, &mo, &err) != 0)
      die("writing a part", &err);
    for (int32_t p = 0; p < n_part; p++) {
      want_rows[p] += mo.rows[p];
      in_bytes += mo.bytes[p];
    }
    fsh_batch_unref(b);
    fsh_map_output_reset(&mo);
  }
  {
    fsh_map_file *f = NULL;
    fsh_map_file_partition e = {0};
    if (fsh_store_open(s, 1, 0, 0, &f, &err) != 0 || fsh_map_file_get_partition(f, 0, &e, &err))
      die("reading a part", &err);
    in_blocks = e.n_blocks;
    fsh_map_file_partition_reset(&e);
    fsh_map_file_close(f);
  }
  double *secs[2], *cpu[2];
  int64_t out_bytes[2] = {0, 0};
  uint64_t *sums[2];
  int64_t *sizes[2];
  bool verified = true;
  for (int k = 0; k < 2; k++) {
    secs[k] = calloc((size_t)runs, sizeof(double));
    cpu[k] = calloc((size_t)runs, sizeof(double));
    sums[k] = calloc((size_t)n_part, sizeof(uint64_t));
    sizes[k] = calloc((size_t)n_part, sizeof(int64_t));
    if (!secs[k] || !cpu[k] || !sums[k] || !sizes[k]) die("out of memory", NULL);
  }
  int64_t merged_id = 1000000;
  for (int run = 0; run < runs; run++) {
    for (int j = 0; j < 2; j++) {
      int k = run % 2 == 0 ? j : 1 - j; /* ABBA: 0 decode, 1 splice */
      if (only >= 0 && k != only) {
        secs[k][run] = cpu[k][run] = 1e-9;
        verified = false;
        continue;
      }
      fsh_merge_test_hooks h = {.no_splice = k == 0};
      fsh_merge_set_test_hooks(&h);
      fsh_merge_task t = {.shuffle_id = 1, .map_id = merged_id++, .attempt = 0,
                          .drop_parts = false, .n_parts = n_parts, .part_maps = maps,
                          .part_attempts = attempts};
      fsh_map_output m = {0};
      double t0 = bench_now(), c0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
      if (fsh_shuffle_store_merge(s, &t, &m, &err) != 0) die("merge", &err);
      secs[k][run] = bench_now() - t0;
      cpu[k][run] = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;
      fsh_merge_set_test_hooks(NULL);
      int64_t total = 0;
      for (int32_t p = 0; p < n_part; p++) {
        verified = verified && m.rows[p] == want_rows[p];
        total += m.bytes[p];
        if (!sizes[k][p]) sizes[k][p] = m.bytes[p], sums[k][p] = m.checksums[p];
        verified = verified && sizes[k][p] == m.bytes[p] && sums[k][p] == m.checksums[p];
      }
      out_bytes[k] = total;
      fsh_map_output_reset(&m);
      if (!fsh_store_drop(s, 1, t.map_id, 0)) die("dropping the merged output", NULL);
    }
  }
  for (int32_t p = 0; p < n_part; p++)
    verified = verified && sizes[0][p] == sizes[1][p] && sums[0][p] == sums[1][p];
  double cpu_med[2] = {median(cpu[0], runs), median(cpu[1], runs)};
  bench_stats a = bench_summarize(secs[0], runs, (double)in_bytes);
  bench_stats b = bench_summarize(secs[1], runs, (double)in_bytes);
  if (only == 1) a = (bench_stats){0}, cpu_med[0] = 0; /* not run: no figures */
  if (only == 0) b = (bench_stats){0}, cpu_med[1] = 0;
  printf("bench_merge: %d parts x %d partitions, %lld rows a part, %lld bytes of parts "
         "(%lld blocks of part 0's partition 0), merged into %lld bytes; %d runs each, ABBA "
         "(min / median / max, GB/s of the parts' bytes)\n", n_parts, n_part,
         (long long)rows_per_part, (long long)in_bytes, (long long)in_blocks,
         (long long)out_bytes[1], runs);
  if (only != 1) bench_print("decode / concat / encode", a, a.med, "decode");
  if (only != 0) bench_print("splice", b, only < 0 ? a.med : b.med, only < 0 ? "decode" : "itself");
  if (only < 0)
    printf("  merging thread's CPU, median: decode %.3f s, splice %.3f s (%.2fx)\n", cpu_med[0],
           cpu_med[1], cpu_med[1] / cpu_med[0]);
  else
    printf("  merging thread's CPU, median: %.3f s\n", cpu_med[only]);
  printf("result: name=bench_merge verified=%s parts=%d partitions=%d in_bytes=%lld "
         "out_bytes=%lld runs=%d decode_gbps=%.3f splice_gbps=%.3f splice_vs_decode=%.3f "
         "decode_cpu_s=%.3f splice_cpu_s=%.3f\n", verified ? "yes" : "no", n_parts, n_part,
         (long long)in_bytes, (long long)out_bytes[1], runs, a.med, b.med,
         a.med > 0 ? b.med / a.med : 0.0,
         cpu_med[0], cpu_med[1]);
  for (int k = 0; k < 2; k++) free(secs[k]), free(cpu[k]), free(sums[k]), free(sizes[k]);
  free(maps);
  free(attempts);
  free(want_rows);
  free(hashes);
  free(pid);
  fsh_shuffle_store_free(s);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
