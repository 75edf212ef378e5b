/* bench_sort.c -- sort throughput: the sort indices of one synthetic batch
 * (key int64 uniform, value float64, name utf8 with ~1% nulls) by the int64
 * key and by the utf8 name, and the sorted batch (indices + take), beside
 * C's qsort of the same int64 keys and a memcpy of the key bytes, measured
 * in the same run. GB/s count the key column's bytes (values, plus offsets
 * for utf8; the whole batch for sort_batch) per second on one core;
 * min / median / max over the runs.
 *
 *   build/bench_sort [--rows N] [--runs R] [--key-range K]
 *
 * Also top-1000 by the int64 key, and the k-way merge of 8 sorted runs
 * (the batch's eighths, sorted untimed) into 64Ki-row batches.
 *
 * Verification (untimed, once per key): the indices are a permutation,
 * the keys they visit are non-decreasing with equal keys in row order
 * (stable) and nulls last, and the int64 keys in sorted order equal
 * qsort's; top-1000 is the sort's prefix; the merge keeps every row in
 * order. Ends with one machine-readable `result:` line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_sort: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static double batch_bytes(const fsh_batch *b, int64_t col) {
  double total = 0;
  for (int64_t c = 0; c < b->n_columns; c++)
    if (col < 0 || c == col)
      for (int i = 0; i < b->columns[c]->n_buffers; i++)
        if (b->columns[c]->buffers[i]) total += (double)b->columns[c]->buffers[i]->size;
  return total;
}

static bool valid_at(const fsh_array *a, int64_t i) {
  return !a->buffers[0] || fsh_bit_get(a->buffers[0]->data, a->offset + i);
}

/* Untimed check of idx as the stable sort of column col (0 int64, 2 utf8). */
static bool verify(const fsh_batch *b, int32_t col, const int64_t *idx, const int64_t *qsorted,
                   int64_t n_qsorted) {
  int64_t n = b->length;
  const fsh_array *a = b->columns[col];
  uint8_t *seen = calloc((size_t)n, 1);
  if (!seen) die("out of memory", NULL);
  bool ok = true;
  int64_t nn = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    ok = idx[i] >= 0 && idx[i] < n && !seen[idx[i]];
    if (!ok) break;
    seen[idx[i]] = 1;
    if (i == 0) continue;
    int64_t x = idx[i - 1], y = idx[i];
    bool vx = valid_at(a, x), vy = valid_at(a, y);
    int c;
    if (!vx || !vy) {
      c = vx ? -1 : vy ? 1 : 0; /* nulls last */
    } else if (col == 0) {
      const int64_t *k = (const int64_t *)a->buffers[1]->data + a->offset;
      c = (k[x] > k[y]) - (k[x] < k[y]);
    } else {
      const int32_t *o = (const int32_t *)a->buffers[1]->data + a->offset;
      const uint8_t *d = a->buffers[2]->data;
      int64_t lx = o[x + 1] - o[x], ly = o[y + 1] - o[y];
      int m = memcmp(d + o[x], d + o[y], (size_t)(lx < ly ? lx : ly));
      c = m ? m : (lx > ly) - (lx < ly);
    }
    ok = c < 0 || (c == 0 && x < y);
  }
  if (ok && col == 0) { /* the int64 keys in our order are qsort's */
    const int64_t *k = (const int64_t *)a->buffers[1]->data + a->offset;
    for (int64_t i = 0; i < n && ok; i++)
      if (valid_at(a, idx[i])) ok = nn < n_qsorted && k[idx[i]] == qsorted[nn++];
    ok = ok && nn == n_qsorted;
  }
  free(seen);
  return ok;
}

int main(int argc, char **argv) {
  int64_t rows = 16 << 20, key_range = 0;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--key-range")) key_range = atoll(argv[i + 1]);
  }
  if (rows < 2 || runs < 1 || runs > 100) die("bad arguments", NULL);
  fsh_error err;
  fsh_schema *schema = fsh_synthetic_schema();
  if (!schema) die("schema", NULL);
  fsh_synthetic_options opts = {.seed = 7, .with_nulls = true, .key_range = key_range};
  fsh_batch *b = NULL;
  if (fsh_synthetic_batch(schema, &opts, 0, rows, &b, &err) != 0) die("data", &err);
  double key_bytes = batch_bytes(b, 0), name_bytes = batch_bytes(b, 2);
  double all_bytes = batch_bytes(b, -1);
  printf("bench_sort: %lld rows (key int64, value float64, name utf8), key %.1f MB, name %.1f MB, "
         "batch %.1f MB, %d runs\n",
         (long long)rows, key_bytes / 1e6, name_bytes / 1e6, all_bytes / 1e6, runs);
  int64_t *idx = malloc(sizeof *idx * (size_t)rows);
  int64_t *keys = malloc(sizeof *keys * (size_t)rows), *copy = malloc(sizeof *copy * (size_t)rows);
  if (!idx || !keys || !copy) die("out of memory", NULL);
  memcpy(keys, b->columns[0]->buffers[1]->data, sizeof *keys * (size_t)rows);

  double secs[100];
  memcpy(copy, keys, sizeof *keys * (size_t)rows); /* warm-up: fault the pages in */
  for (int r = 0; r < runs; r++) {
    double t0 = bench_now();
    memcpy(copy, keys, sizeof *keys * (size_t)rows);
    __asm__ volatile("" : : "r"(copy) : "memory");
    secs[r] = bench_now() - t0;
  }
  bench_stats mc = bench_summarize(secs, runs, key_bytes);
  printf("  %-34s %7.2f %7.2f %7.2f GB/s   (min / median / max)\n", "memcpy (int64 keys)", mc.min,
         mc.med, mc.max);
  for (int r = 0; r < runs; r++) {
    memcpy(copy, keys, sizeof *keys * (size_t)rows);
    double t0 = bench_now();
    qsort(copy, (size_t)rows, sizeof *copy, cmp_i64);
    secs[r] = bench_now() - t0;
  }
  bench_stats qs = bench_summarize(secs, runs, key_bytes);
  bench_print("qsort (int64 keys)", qs, mc.med, "memcpy");
  /* qsort's result over the valid keys only, for verification */
  int64_t nq = 0;
  for (int64_t i = 0; i < rows; i++)
    if (valid_at(b->columns[0], i)) copy[nq++] = keys[i];
  qsort(copy, (size_t)nq, sizeof *copy, cmp_i64);

  bool verified = true;
  static const char *names[2] = {"int64", "utf8"};
  static const int32_t cols[2] = {0, 2};
  double med[2];
  for (int k = 0; k < 2; k++) {
    for (int r = 0; r < runs; r++) {
      double t0 = bench_now();
      if (fsh_sort_indices(b, &cols[k], 1, NULL, idx, &err) != 0) die("sort", &err);
      secs[r] = bench_now() - t0;
    }
    bench_stats s = bench_summarize(secs, runs, k == 0 ? key_bytes : name_bytes);
    char label[64];
    snprintf(label, sizeof label, "sort indices (%s key)", names[k]);
    bench_print(label, s, mc.med, "memcpy");
    if (k == 0)
      printf("  %-34s %7.2fx qsort (median GB/s, ours / qsort)\n", "", s.med / qs.med);
    med[k] = s.med;
    bool ok = verify(b, cols[k], idx, copy, nq);
    if (!ok) fprintf(stderr, "bench_sort: the %s sort is wrong\n", names[k]);
    verified &= ok;
  }
  for (int r = 0; r < runs; r++) {
    fsh_batch *sorted = NULL;
    double t0 = bench_now();
    if (fsh_sort_batch(b, &cols[0], 1, NULL, &sorted, &err) != 0) die("sort batch", &err);
    secs[r] = bench_now() - t0;
    fsh_batch_unref(sorted);
  }
  bench_stats sb = bench_summarize(secs, runs, all_bytes);
  bench_print("sort batch (int64 key, all columns)", sb, mc.med, "memcpy");

  /* Top-1000 by the int64 key: must be the sort's prefix. */
  if (fsh_sort_indices(b, &cols[0], 1, NULL, idx, &err) != 0) die("sort", &err);
  int64_t top[1000], m = 0;
  for (int r = 0; r < runs; r++) {
    double t0 = bench_now();
    if (fsh_top_n_indices(b, &cols[0], 1, NULL, 1000, top, &m, &err) != 0) die("top-n", &err);
    secs[r] = bench_now() - t0;
  }
  bench_stats tn = bench_summarize(secs, runs, key_bytes);
  bench_print("top-1000 indices (int64 key)", tn, mc.med, "memcpy");
  bool top_ok = m == (rows < 1000 ? rows : 1000) && memcmp(top, idx, sizeof *top * (size_t)m) == 0;
  if (!top_ok) fprintf(stderr, "bench_sort: top-1000 is not the sort's prefix\n");
  verified &= top_ok;

  /* Merge of 8 sorted runs (slices of the batch sorted untimed) into
   * batches of 64Ki rows: must be non-decreasing and keep every row. */
  enum { RUNS8 = 8 };
  fsh_batch *sorted_runs[RUNS8];
  for (int i = 0; i < RUNS8; i++) {
    int64_t lo = rows * i / RUNS8, hi = rows * (i + 1) / RUNS8;
    fsh_batch *sl = fsh_batch_slice(b, lo, hi - lo);
    if (!sl || fsh_sort_batch(sl, &cols[0], 1, NULL, &sorted_runs[i], &err) != 0) die("runs", &err);
    fsh_batch_unref(sl);
  }
  bool merge_ok = true;
  for (int r = 0; r < runs; r++) {
    fsh_merger *mg = NULL;
    int64_t got = 0, prev = INT64_MIN;
    bool prev_null = false;
    double t0 = bench_now(), inside = 0;
    if (fsh_merger_new(sorted_runs, RUNS8, &cols[0], 1, NULL, 65536, &mg, &err) != 0)
      die("merger", &err);
    for (;;) {
      fsh_batch *o = NULL;
      if (fsh_merger_next(mg, &o, &err) != 0) die("merge", &err);
      if (!o) break;
      double t1 = bench_now(); /* the check is not timed */
      const fsh_array *a = o->columns[0];
      const int64_t *kv = (const int64_t *)a->buffers[1]->data + a->offset;
      for (int64_t i = 0; i < o->length && r == 0; i++) {
        bool null = !valid_at(a, i);
        merge_ok &= !prev_null && (null || kv[i] >= prev);
        if (!null) prev = kv[i];
        prev_null = null;
      }
      got += o->length;
      fsh_batch_unref(o);
      inside += bench_now() - t1;
    }
    fsh_merger_free(mg);
    secs[r] = bench_now() - t0 - inside;
    merge_ok &= got == rows;
  }
  for (int i = 0; i < RUNS8; i++) fsh_batch_unref(sorted_runs[i]);
  bench_stats mg = bench_summarize(secs, runs, all_bytes);
  bench_print("merge 8 runs (int64 key, all cols)", mg, mc.med, "memcpy");
  if (!merge_ok) fprintf(stderr, "bench_sort: the merge is out of order or lost rows\n");
  verified &= merge_ok;
  printf("result: name=bench_sort verified=%s rows=%lld sort_int64_gbps=%.3f sort_utf8_gbps=%.3f "
         "sort_batch_int64_gbps=%.3f top1000_int64_gbps=%.3f merge8_gbps=%.3f "
         "qsort_int64_gbps=%.3f vs_qsort=%.2f memcpy_gbps=%.2f vs_memcpy=%.4f\n",
         verified ? "yes" : "no", (long long)rows, med[0], med[1], sb.med, tn.med, mg.med, qs.med,
         med[0] / qs.med, mc.med, med[0] / mc.med);
  free(idx);
  free(keys);
  free(copy);
  fsh_batch_unref(b);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
