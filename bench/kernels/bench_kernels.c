/* bench_kernels.c -- hash + scatter throughput of the shuffle's map side:
 * synthetic batches (key int64, value float64, name utf8, ~1% nulls) hashed
 * on an int64 key or on a utf8 key, hash-partitioned and scattered into
 * N partitions, beside memcpy of the same bytes measured in the same run.
 * GB/s count the batch's bytes (every buffer of every column) per second on
 * one core; min / median / max over the runs.
 *
 *   build/bench_kernels [--rows N] [--batches B] [--partitions P] [--runs R]
 *
 * Verification (untimed, once): every scatter output equals take() of its
 * rows. Ends with one machine-readable `result:` line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"


static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_kernels: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

static double batch_bytes(const fsh_batch *b) {
  double total = 0;
  for (int64_t c = 0; c < b->n_columns; c++)
    for (int i = 0; i < b->columns[c]->n_buffers; i++)
      if (b->columns[c]->buffers[i]) total += (double)b->columns[c]->buffers[i]->size;
  return total;
}

typedef struct setup {
  fsh_batch **batches;
  int n_batches;
  int32_t n_partitions;
  uint64_t *hashes;
  int32_t *parts;
  fsh_batch **out;
  double bytes;
} setup;

/* One timed run over every batch: seconds hashing and partitioning +
 * scattering, accumulated. Outputs are released outside the timers. */
static void run_once(setup *s, int32_t key, double *t_hash, double *t_scatter) {
  fsh_error err;
  *t_hash = *t_scatter = 0;
  for (int i = 0; i < s->n_batches; i++) {
    fsh_batch *b = s->batches[i];
    double t0 = bench_now();
    if (fsh_hash_columns(b, &key, 1, 0, s->hashes, &err) != 0) die("hash", &err);
    double t1 = bench_now();
    if (fsh_partition_hash(s->hashes, b->length, s->n_partitions, s->parts, &err) != 0)
      die("partition", &err);
    if (fsh_scatter(b, s->parts, s->n_partitions, s->out, &err) != 0) die("scatter", &err);
    double t2 = bench_now();
    *t_hash += t1 - t0;
    *t_scatter += t2 - t1;
    for (int32_t p = 0; p < s->n_partitions; p++) fsh_batch_unref(s->out[p]);
  }
}

/* Untimed: scatter of the first batch equals take() of each partition's rows. */
static bool verify(setup *s, int32_t key) {
  fsh_error err;
  fsh_batch *b = s->batches[0];
  if (fsh_hash_columns(b, &key, 1, 0, s->hashes, &err) != 0 ||
      fsh_partition_hash(s->hashes, b->length, s->n_partitions, s->parts, &err) != 0 ||
      fsh_scatter(b, s->parts, s->n_partitions, s->out, &err) != 0)
    die("verify", &err);
  int64_t *idx = malloc(sizeof *idx * (size_t)b->length);
  bool ok = idx != NULL;
  int64_t total = 0;
  for (int32_t p = 0; p < s->n_partitions && ok; p++) {
    int64_t n = 0;
    for (int64_t i = 0; i < b->length; i++)
      if (s->parts[i] == p) idx[n++] = i;
    fsh_batch *want = NULL;
    total += n;
    if (n == 0) {
      ok = s->out[p] == NULL;
      continue;
    }
    ok = fsh_take(b, idx, n, &want, &err) == 0 && fsh_batch_validate(s->out[p], true, &err) == 0 &&
         fsh_batch_equals(want, s->out[p], &err);
    if (!ok) fprintf(stderr, "bench_kernels: partition %d differs: %s\n", p, err.message);
    fsh_batch_unref(want);
  }
  for (int32_t p = 0; p < s->n_partitions; p++) fsh_batch_unref(s->out[p]);
  free(idx);
  return ok && total == b->length;
}

static double memcpy_run(const uint8_t *src, uint8_t *dst, size_t bytes, int reps) {
  double t0 = bench_now();
  for (int r = 0; r < reps; r++) {
    memcpy(dst + bytes * (size_t)r, src + bytes * (size_t)r, bytes);
    __asm__ volatile("" : : "r"(dst) : "memory");
  }
  return bench_now() - t0;
}

/* Timed runs hashing on key k (0: int64 column, 1: utf8 column), printed;
 * median GB/s of hash, partition+scatter and both; then the verification. */
static bool bench_key(setup *s, int k, int runs, double memcpy_med, double *res_hash,
                      double *res_scatter, double *res_both) {
  static const char *names[2] = {"int64", "utf8"};
  static const int32_t keys[2] = {0, 2};
  double secs[100], secs2[100], both[100];
  run_once(s, keys[k], &secs[0], &secs2[0]); /* warm-up */
  for (int r = 0; r < runs; r++) {
    run_once(s, keys[k], &secs[r], &secs2[r]);
    both[r] = secs[r] + secs2[r];
  }
  char label[64];
  bench_stats h = bench_summarize(secs, runs, s->bytes), sc = bench_summarize(secs2, runs, s->bytes),
        b = bench_summarize(both, runs, s->bytes);
  snprintf(label, sizeof label, "hash (%s key)", names[k]);
  bench_print(label, h, memcpy_med, "memcpy");
  snprintf(label, sizeof label, "partition+scatter (%s key)", names[k]);
  bench_print(label, sc, memcpy_med, "memcpy");
  snprintf(label, sizeof label, "hash+partition+scatter (%s key)", names[k]);
  bench_print(label, b, memcpy_med, "memcpy");
  *res_hash = h.med;
  *res_scatter = sc.med;
  *res_both = b.med;
  return verify(s, keys[k]);
}

int main(int argc, char **argv) {
  int64_t rows = 65536;
  int n_batches = 16, runs = 9;
  int32_t n_partitions = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--batches")) n_batches = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--partitions")) n_partitions = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
  }
  if (rows < 1 || n_batches < 1 || n_batches > 1024 || n_partitions < 1 || runs < 1 || runs > 100)
    die("bad arguments", NULL);
  fsh_error err;
  fsh_schema *schema = fsh_synthetic_schema();
  if (!schema) die("schema", NULL);
  setup s = {.n_batches = n_batches, .n_partitions = n_partitions};
  s.batches = calloc((size_t)n_batches, sizeof *s.batches);
  s.hashes = malloc(sizeof *s.hashes * (size_t)rows);
  s.parts = malloc(sizeof *s.parts * (size_t)rows);
  s.out = calloc((size_t)n_partitions, sizeof *s.out);
  if (!s.batches || !s.hashes || !s.parts || !s.out) die("out of memory", NULL);
  fsh_synthetic_options opts = {.seed = 1, .with_nulls = true};
  for (int i = 0; i < n_batches; i++) {
    if (fsh_synthetic_batch(schema, &opts, i, rows, &s.batches[i], &err) != 0) die("data", &err);
    s.bytes += batch_bytes(s.batches[i]);
  }
  printf("bench_kernels: %d batches x %lld rows (key int64, value float64, name utf8), "
         "%.1f MB, %d partitions, %d runs\n",
         n_batches, (long long)rows, s.bytes / 1e6, n_partitions, runs);

  /* memcpy of the same bytes: each batch-sized block copied once per run
   * from its own source to its own destination, as the kernels touch each
   * batch once per run. */
  size_t one = (size_t)(s.bytes / n_batches), all = one * (size_t)n_batches;
  uint8_t *src = malloc(all), *dst = malloc(all);
  if (!src || !dst) die("out of memory", NULL);
  memset(src, 1, all);
  memset(dst, 2, all);
  double secs[100];
  for (int r = 0; r < runs; r++) secs[r] = memcpy_run(src, dst, one, n_batches);
  bench_stats mc = bench_summarize(secs, runs, s.bytes);
  printf("  %-34s %7.2f %7.2f %7.2f GB/s   (min / median / max)\n", "memcpy", mc.min, mc.med,
         mc.max);

  double res_hash[2], res_scatter[2], res_both[2];
  bool verified = true;
  for (int k = 0; k < 2; k++)
    verified &= bench_key(&s, k, runs, mc.med, &res_hash[k], &res_scatter[k], &res_both[k]);
  printf("result: name=bench_kernels verified=%s hash_int64_gbps=%.2f scatter_int64_gbps=%.2f "
         "hash_utf8_gbps=%.2f scatter_utf8_gbps=%.2f hash_scatter_int64_gbps=%.2f "
         "hash_scatter_utf8_gbps=%.2f memcpy_gbps=%.2f vs_memcpy=%.3f\n",
         verified ? "yes" : "no", res_hash[0], res_scatter[0], res_hash[1], res_scatter[1],
         res_both[0], res_both[1], mc.med, res_both[0] / mc.med);
  for (int i = 0; i < n_batches; i++) fsh_batch_unref(s.batches[i]);
  free(s.batches);
  free(s.hashes);
  free(s.parts);
  free(s.out);
  free(src);
  free(dst);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
