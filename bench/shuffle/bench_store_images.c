/* bench_store_images.c -- what keeping a worker store's memory images in
 * memfds (shared images, which same-host readers open directly) costs
 * beside fsh_malloc'd private images: M map outputs of a synthetic table
 * (key int64, value float64, name utf8), already cut into P partitions
 * (not timed), written into a fresh store with no spill, then every
 * partition of every map output read back in-process (decoded, each block
 * verified). Private and shared runs alternate; the baseline, measured in
 * the same run, is a memcpy of the same bytes into fresh memory (faulted
 * in, as an image's pages are).
 *
 *   build/bench_store_images [--bytes N] [--runs R] [--maps M] [--partitions P]
 *
 * Verification (not timed): the rows read back are the rows written.
 * Ends with one machine-readable `result:` line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

#include "shuffle/shuffle_internal.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_store_images: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

static volatile uint8_t g_sink;

typedef struct piece {
  int32_t partition;
  fsh_batch *batch;
} piece;

int main(int argc, char **argv) {
  int64_t bytes = (int64_t)256 << 20;
  int runs = 5, maps = 8, parts = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--bytes") == 0) bytes = strtoll(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--maps") == 0) maps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--partitions") == 0) parts = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_store_images [--bytes N] [--runs R] [--maps M] "
              "[--partitions P]\n");
      return 2;
    }
  }
  if (bytes <= 0 || runs < 1 || maps < 1 || parts < 1) die("bad arguments", NULL);
  fsh_error err = {{0}};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_synthetic_options so = {.seed = 7, .with_nulls = true};
  const int64_t batch_rows = 65536;
  /* the map outputs' pieces: each map's batches cut into partitions */
  piece **pcs = calloc((size_t)maps, sizeof *pcs);
  int64_t *n_pcs = calloc((size_t)maps, sizeof *n_pcs);
  int64_t rows_written = 0, table_bytes = 0;
  uint64_t *hashes = malloc(sizeof *hashes * (size_t)batch_rows);
  int32_t *pid = malloc(sizeof *pid * (size_t)batch_rows);
  fsh_batch **outs = calloc((size_t)parts, sizeof *outs);
  if (!schema || !pcs || !n_pcs || !hashes || !pid || !outs) die("out of memory", NULL);
  for (int64_t bi = 0; table_bytes < bytes; bi++) {
    fsh_batch *b = NULL;
    int32_t key = 0;
    if (fsh_synthetic_batch(schema, &so, bi, batch_rows, &b, &err) != 0 ||
        fsh_hash_columns(b, &key, 1, 0, hashes, &err) != 0 ||
        fsh_partition_hash(hashes, b->length, parts, pid, &err) != 0 ||
        fsh_scatter(b, pid, parts, outs, &err) != 0)
      die("generating", &err);
    int m = (int)(bi % maps);
    pcs[m] = realloc(pcs[m], sizeof **pcs * (size_t)(n_pcs[m] + parts));
    if (!pcs[m]) die("out of memory", NULL);
    for (int32_t p = 0; p < parts; p++)
      if (outs[p]) pcs[m][n_pcs[m]++] = (piece){p, outs[p]}, outs[p] = NULL;
    rows_written += b->length;
    table_bytes += fsh_shuffle_batch_bytes(b);
    fsh_batch_unref(b);
  }
  fsh_shuffle_spec spec = {.shuffle_id = 1, .n_partitions = parts, .schema = schema};
  double *w_secs[2], *r_secs[2], *copy_secs = calloc((size_t)runs, sizeof(double));
  int64_t image_bytes = 0;
  bool verified = true;
  for (int k = 0; k < 2; k++) {
    w_secs[k] = calloc((size_t)runs, sizeof(double));
    r_secs[k] = calloc((size_t)runs, sizeof(double));
  }
  for (int run = 0; run < runs; run++) {
    for (int k = 0; k < 2; k++) { /* 0 private, 1 shared */
      fsh_shuffle_store *s = NULL;
      fsh_shuffle_store_options o = {.memory_limit = (int64_t)1 << 50, .name = "bench",
                                     .images = k == 0 ? FSH_STORE_IMAGES_PRIVATE
                                                      : FSH_STORE_IMAGES_MEMFD};
      if (fsh_shuffle_store_new(&o, &s, &err) != 0) die("store", &err);
      double t0 = bench_now();
      for (int m = 0; m < maps; m++) {
        fsh_store_writer *w = NULL;
        fsh_map_output out = {0};
        if (fsh_store_writer_open(s, &spec, m, 0, &w, &err) != 0) die("writer", &err);
        for (int64_t i = 0; i < n_pcs[m]; i++)
          if (fsh_store_writer_write(w, pcs[m][i].partition, pcs[m][i].batch, &err) != 0)
            die("write", &err);
        if (fsh_store_writer_close(w, &out, &err) != 0) die("close", &err);
        fsh_map_output_reset(&out);
      }
      w_secs[k][run] = bench_now() - t0;
      fsh_shuffle_store_stats st;
      fsh_shuffle_store_get_stats(s, &st);
      image_bytes = st.memory_bytes;
      int64_t rows_read = 0;
      t0 = bench_now();
      for (int m = 0; m < maps; m++) {
        fsh_map_file *f = NULL;
        if (fsh_store_open(s, 1, m, 0, &f, &err) != 0) die("open", &err);
        for (int32_t p = 0; p < parts; p++) {
          fsh_map_file_cursor *c = NULL;
          if (fsh_map_file_cursor_open(f, p, &c, &err) != 0) die("cursor", &err);
          for (;;) {
            fsh_batch *b = NULL;
            if (fsh_map_file_cursor_next(c, &b, &err) != 0) die("read", &err);
            if (!b) break;
            rows_read += b->length;
            fsh_batch_unref(b);
          }
          fsh_map_file_cursor_free(c);
        }
        fsh_map_file_close(f);
      }
      r_secs[k][run] = bench_now() - t0;
      verified = verified && rows_read == rows_written;
      fsh_shuffle_store_free(s);
    }
    /* the baseline: the image bytes copied into fresh memory */
    uint8_t *src = malloc((size_t)image_bytes), *dst = NULL;
    if (!src) die("out of memory", NULL);
    memset(src, 1, (size_t)image_bytes);
    double t0 = bench_now();
    dst = malloc((size_t)image_bytes);
    if (!dst) die("out of memory", NULL);
    memcpy(dst, src, (size_t)image_bytes);
    g_sink = dst[image_bytes - 1]; /* keeps the copy */
    copy_secs[run] = bench_now() - t0;
    free(dst);
    free(src);
  }
  double b = (double)image_bytes;
  bench_stats copy = bench_summarize(copy_secs, runs, b);
  bench_stats wp = bench_summarize(w_secs[0], runs, b), ws = bench_summarize(w_secs[1], runs, b);
  bench_stats rp = bench_summarize(r_secs[0], runs, b), rs = bench_summarize(r_secs[1], runs, b);
  printf("bench_store_images: %d map outputs x %d partitions, %lld rows, %.0f image bytes, "
         "%d runs (min / median / max)\n", maps, parts, (long long)rows_written, b, runs);
  bench_print("memcpy into fresh memory", copy, copy.med, "memcpy");
  bench_print("write, private images (malloc)", wp, copy.med, "memcpy");
  bench_print("write, shared images (memfd)", ws, copy.med, "memcpy");
  bench_print("read back, private images", rp, copy.med, "memcpy");
  bench_print("read back, shared images", rs, copy.med, "memcpy");
  printf("result: name=bench_store_images verified=%s bytes=%.0f runs=%d maps=%d partitions=%d "
         "write_private_gbps=%.3f write_shared_gbps=%.3f read_private_gbps=%.3f "
         "read_shared_gbps=%.3f memcpy_gbps=%.3f shared_vs_private_write=%.3f\n",
         verified ? "yes" : "no", b, runs, maps, parts, wp.med, ws.med, rp.med, rs.med, copy.med,
         ws.med / wp.med);
  for (int m = 0; m < maps; m++) {
    for (int64_t i = 0; i < n_pcs[m]; i++) fsh_batch_unref(pcs[m][i].batch);
    free(pcs[m]);
  }
  for (int k = 0; k < 2; k++) free(w_secs[k]), free(r_secs[k]);
  free(copy_secs);
  free(pcs);
  free(n_pcs);
  free(hashes);
  free(pid);
  free(outs);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
