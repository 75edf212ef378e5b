/* bench_expr.c -- expression evaluation throughput: a filter with a
 * compound predicate and a project with arithmetic over 16M rows (batches
 * of int64 a, int32 b, float64 x, ~1% nulls), beside memcpy of the same
 * input bytes measured in the same run. GB/s count the bytes of the
 * columns read (values + validity) per second on one core; min / median /
 * max over the runs.
 *
 *   build/bench_expr [--rows N] [--batch-rows R] [--runs K]
 *
 * Filter:  (a > 0 and b < 500) or x between 0.25 and 0.5
 * Project: a * 3 + b  (int64, errors on overflow), x * 2.0 - 1.0 (float64)
 * Verification (untimed, once): the selected row count and every projected
 * value against a plain loop. Ends with one `result:` line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/exec.h>

#include "bench_util.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_expr: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

static uint64_t rnd(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A column of n values of `width` bytes from fill(), ~1% nulls. */
static fsh_array *column(int64_t n, int width, uint64_t *st, int kind) {
  fsh_array *a = fsh_array_new(2, 0);
  if (!a) die("out of memory", NULL);
  a->length = n;
  a->buffers[0] = fsh_buffer_new(fsh_bytes_for_bits(n), true);
  a->buffers[1] = fsh_buffer_new(width * n, false);
  if (!a->buffers[0] || !a->buffers[1]) die("out of memory", NULL);
  int64_t nulls = 0;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rnd(st);
    bool valid = r % 100 != 0;
    fsh_bit_set(a->buffers[0]->data, i, valid);
    nulls += !valid;
    if (kind == 0) ((int64_t *)a->buffers[1]->data)[i] = (int64_t)(r >> 8) % 2000000 - 1000000;
    else if (kind == 1) ((int32_t *)a->buffers[1]->data)[i] = (int32_t)((r >> 8) % 1000);
    else ((double *)a->buffers[1]->data)[i] = (double)(r >> 11) / 9007199254740992.0;
  }
  a->null_count = nulls;
  return a;
}

static const char *PRED =
    "{\"op\":\"or\",\"args\":[{\"op\":\"and\",\"args\":[{\"op\":\">\",\"args\":[{\"col\":\"a\"},"
    "{\"lit\":0}]},{\"op\":\"<\",\"args\":[{\"col\":\"b\"},{\"lit\":500}]}]},{\"op\":\"between\","
    "\"args\":[{\"col\":\"x\"},{\"lit\":0.25},{\"lit\":0.5}]}]}";
static const char *P1 =
    "{\"op\":\"+\",\"args\":[{\"op\":\"*\",\"args\":[{\"col\":\"a\"},{\"lit\":3}]},{\"col\":\"b\"}]}";
static const char *P2 =
    "{\"op\":\"-\",\"args\":[{\"op\":\"*\",\"args\":[{\"col\":\"x\"},{\"lit\":2.0}]},{\"lit\":1.0}]}";

static bool valid_at(const fsh_array *a, int64_t i) {
  return !a->buffers[0] || fsh_bit_get(a->buffers[0]->data, a->offset + i);
}

int main(int argc, char **argv) {
  int64_t rows = 16 << 20, batch_rows = 1 << 20;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch-rows")) batch_rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
  }
  if (rows < 1 || batch_rows < 1 || runs < 1 || runs > 100) die("bad arguments", NULL);
  int n_batches = (int)((rows + batch_rows - 1) / batch_rows);
  fsh_error err;
  fsh_schema *schema = fsh_schema_new(3);
  if (!schema || fsh_field_init(&schema->fields[0], "a", FSH_TYPE_INT64, true) != 0 ||
      fsh_field_init(&schema->fields[1], "b", FSH_TYPE_INT32, true) != 0 ||
      fsh_field_init(&schema->fields[2], "x", FSH_TYPE_FLOAT64, true) != 0)
    die("schema", NULL);
  fsh_batch **batches = calloc((size_t)n_batches, sizeof *batches);
  uint64_t st = 42;
  double bytes = 0;
  for (int i = 0; i < n_batches; i++) {
    int64_t n = i == n_batches - 1 ? rows - batch_rows * i : batch_rows;
    batches[i] = fsh_batch_new(schema, n);
    if (!batches[i]) die("out of memory", NULL);
    batches[i]->columns[0] = column(n, 8, &st, 0);
    batches[i]->columns[1] = column(n, 4, &st, 1);
    batches[i]->columns[2] = column(n, 8, &st, 2);
    bytes += (double)n * 20 + 3.0 * (double)fsh_bytes_for_bits(n);
  }
  fsh_expr *pred = NULL, *ex[2] = {NULL, NULL};
  if (fsh_expr_from_json(PRED, -1, &pred, &err) != 0 || fsh_expr_bind(pred, schema, &err) != 0 ||
      fsh_expr_from_json(P1, -1, &ex[0], &err) != 0 || fsh_expr_from_json(P2, -1, &ex[1], &err) != 0)
    die("expressions", &err);
  const char *names[2] = {"p1", "p2"};
  fsh_schema *out_schema = NULL;
  if (fsh_project_schema(schema, 2, names, ex, &out_schema, &err) != 0) die("project schema", &err);
  printf("bench_expr: %lld rows in %d batches (a int64, b int32, x float64, ~1%% nulls), %.1f MB "
         "read per pass, %d runs\n", (long long)rows, n_batches, bytes / 1e6, runs);

  /* memcpy of the same input bytes, one copy per batch per run */
  size_t one = (size_t)(bytes / n_batches);
  uint8_t *src = malloc(one), *dst = malloc(one);
  if (!src || !dst) die("out of memory", NULL);
  memset(src, 1, one);
  memset(dst, 2, one);
  double secs[100], fsecs[100], psecs[100];
  for (int r = 0; r < runs; r++) {
    double t0 = bench_now();
    for (int i = 0; i < n_batches; i++) {
      memcpy(dst, src, one);
      __asm__ volatile("" : : "r"(dst) : "memory");
    }
    secs[r] = bench_now() - t0;
  }
  bench_stats mc = bench_summarize(secs, runs, bytes);
  printf("  %-34s %7.2f %7.2f %7.2f GB/s   (min / median / max)\n", "memcpy", mc.min, mc.med,
         mc.max);

  int64_t selected = 0;
  for (int r = 0; r < runs; r++) {
    double tf = 0, tp = 0;
    selected = 0;
    for (int i = 0; i < n_batches; i++) {
      fsh_batch *f = NULL, *p = NULL;
      double t0 = bench_now();
      if (fsh_expr_filter(pred, batches[i], &f, &err) != 0) die("filter", &err);
      double t1 = bench_now();
      if (fsh_project(batches[i], out_schema, 2, ex, &p, &err) != 0) die("project", &err);
      double t2 = bench_now();
      tf += t1 - t0;
      tp += t2 - t1;
      selected += f->length;
      fsh_batch_unref(f);
      fsh_batch_unref(p);
    }
    fsecs[r] = tf;
    psecs[r] = tp;
  }
  bench_stats fs = bench_summarize(fsecs, runs, bytes), ps = bench_summarize(psecs, runs, bytes);
  bench_print("filter (compound predicate)", fs, mc.med, "memcpy");
  bench_print("project (2 arithmetic exprs)", ps, mc.med, "memcpy");

  /* verification: a plain loop */
  bool verified = true;
  int64_t want_selected = 0;
  for (int i = 0; i < n_batches && verified; i++) {
    fsh_batch *b = batches[i], *p = NULL;
    if (fsh_project(b, out_schema, 2, ex, &p, &err) != 0) die("project", &err);
    const int64_t *a = (const int64_t *)b->columns[0]->buffers[1]->data;
    const int32_t *bb = (const int32_t *)b->columns[1]->buffers[1]->data;
    const double *x = (const double *)b->columns[2]->buffers[1]->data;
    const int64_t *p1 = (const int64_t *)p->columns[0]->buffers[1]->data;
    const double *p2 = (const double *)p->columns[1]->buffers[1]->data;
    for (int64_t k = 0; k < b->length; k++) {
      bool va = valid_at(b->columns[0], k), vb = valid_at(b->columns[1], k),
           vx = valid_at(b->columns[2], k);
      int l = !va || !vb ? ((va && a[k] <= 0) || (vb && bb[k] >= 500) ? 0 : -1)
                         : (a[k] > 0 && bb[k] < 500);
      int r = vx ? (x[k] >= 0.25 && x[k] <= 0.5) : -1;
      want_selected += l == 1 || r == 1;
      if (valid_at(p->columns[0], k) != (va && vb) || valid_at(p->columns[1], k) != vx ||
          (va && vb && p1[k] != a[k] * 3 + bb[k]) || (vx && p2[k] != x[k] * 2.0 - 1.0)) {
        fprintf(stderr, "bench_expr: batch %d row %lld: projection differs\n", i, (long long)k);
        verified = false;
        break;
      }
    }
    fsh_batch_unref(p);
  }
  if (want_selected != selected) {
    fprintf(stderr, "bench_expr: filter selected %lld rows, want %lld\n", (long long)selected,
            (long long)want_selected);
    verified = false;
  }
  printf("  selected %lld of %lld rows (%.1f%%)\n", (long long)selected, (long long)rows,
         100.0 * (double)selected / (double)rows);
  printf("result: name=bench_expr verified=%s filter_gbps=%.2f project_gbps=%.2f memcpy_gbps=%.2f "
         "filter_vs_memcpy=%.3f project_vs_memcpy=%.3f\n", verified ? "yes" : "no", fs.med, ps.med,
         mc.med, fs.med / mc.med, ps.med / mc.med);
  for (int i = 0; i < n_batches; i++) fsh_batch_unref(batches[i]);
  free(batches);
  free(src);
  free(dst);
  fsh_expr_free(pred);
  fsh_expr_free(ex[0]);
  fsh_expr_free(ex[1]);
  fsh_schema_unref(out_schema);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
