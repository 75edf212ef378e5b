/* bench_shuffle.c -- a shuffle of a synthetic table (key int64, value
 * float64, name utf8; ~1 GiB) through the memory and fs backends: a few map
 * tasks each cut their batches into 64 partitions, write them, close; then
 * every partition is read back from every map output. Reported against a
 * baseline measured in the same run: a plain write (+fsync) and read of a
 * file of the same bytes the fs backend stored.
 *
 *   build/bench_shuffle [--bytes N] [--runs R] [--maps M] [--partitions P]
 *                       [--compression none|lz4|zstd] [--dir DIR]
 *
 * The fs data goes to a fresh directory under --dir (default /tmp), removed
 * at the end. Reads hit the page cache (no cache drop: that needs root and
 * a quiet machine); the baseline reads the same way. Verification (not
 * timed): per partition, rows and an order-independent checksum of every
 * row's values read back equal those written.
 *
 * Ends with one machine-readable `result:` line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

#include "shuffle/shuffle_internal.h"


static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_shuffle: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

typedef struct config {
  double bytes;
  int runs, maps;
  int32_t partitions;
  fsh_compression compression;
  const char *dir;
} config;

/* The table, already cut: slices[m][k] is map m's k-th write, to
 * partition part[m][k]. */
typedef struct table {
  fsh_schema *schema;
  int64_t n_batches, rows;
  fsh_batch **batches;
  double bytes; /* fsh_shuffle_batch_bytes of all batches */
} table;

static table make_table(double target) {
  table t = {0};
  fsh_error err;
  t.schema = fsh_synthetic_schema();
  fsh_synthetic_options o = {.seed = 11, .with_nulls = true};
  while (t.bytes < target) {
    t.batches = realloc(t.batches, (size_t)(t.n_batches + 1) * sizeof *t.batches);
    fsh_batch **b = &t.batches[t.n_batches];
    if (fsh_synthetic_batch(t.schema, &o, t.n_batches, 65536, b, &err)) die("generate", &err);
    t.bytes += (double)fsh_shuffle_batch_bytes(*b);
    t.rows += (*b)->length;
    t.n_batches++;
  }
  return t;
}

/* Order-independent checksum of rows: the sum of a hash of each row. */
static uint64_t row_hash_sum(const fsh_batch *b) {
  const fsh_array *k = b->columns[0], *v = b->columns[1], *s = b->columns[2];
  const int64_t *keys = (const int64_t *)(const void *)k->buffers[1]->data + k->offset;
  const double *vals = (const double *)(const void *)v->buffers[1]->data + v->offset;
  const int32_t *offs = (const int32_t *)(const void *)s->buffers[1]->data + s->offset;
  const uint8_t *chars = s->buffers[2] ? s->buffers[2]->data : NULL;
  uint64_t sum = 0;
  for (int64_t i = 0; i < b->length; i++) {
    uint64_t h = XXH3_64bits(&keys[i], 8);
    h = h * 31 + (fsh_array_is_valid(v, i) ? XXH3_64bits(&vals[i], 8) : 0x9E37u);
    h = h * 31 + (fsh_array_is_valid(s, i)
                      ? XXH3_64bits(chars ? chars + offs[i] : (const uint8_t *)"",
                                    (size_t)(offs[i + 1] - offs[i]))
                      : 0x7F4Au);
    sum += XXH3_64bits(&h, 8);
  }
  return sum;
}

/* Writes every map task: map m takes batches m, m + maps, ...; each batch
 * is cut into `partitions` contiguous slices, slice k to partition k.
 * Returns seconds. */
static double run_maps(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, const table *t,
                       int maps, fsh_map_output *outs) {
  fsh_error err;
  double t0 = bench_now();
  for (int m = 0; m < maps; m++) {
    fsh_shuffle_writer *w;
    if (fsh_shuffle_open_writer(b, spec, m, 0, &w, &err)) die("open_writer", &err);
    for (int64_t i = m; i < t->n_batches; i += maps) {
      fsh_batch *x = t->batches[i];
      int64_t per = (x->length + spec->n_partitions - 1) / spec->n_partitions;
      for (int32_t k = 0; k < spec->n_partitions; k++) {
        int64_t off = k * per, len = x->length - off < per ? x->length - off : per;
        if (len <= 0) break;
        fsh_batch *s = fsh_batch_slice(x, off, len);
        if (!s) die("slice", NULL);
        if (w->write(w, k, s, &err)) die("write", &err);
        fsh_batch_unref(s);
      }
    }
    fsh_map_output_reset(&outs[m]);
    if (w->close(w, &outs[m], &err)) die("close", &err);
  }
  return bench_now() - t0;
}

/* Reads every partition from every map output; returns seconds. With
 * rows/sums, records per-partition rows and row-hash sums. */
static double run_reads(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                        const fsh_map_output *outs, int maps, int64_t *rows, uint64_t *sums) {
  fsh_error err;
  double t0 = bench_now();
  for (int32_t q = 0; q < spec->n_partitions; q++) {
    fsh_batch_stream s;
    if (fsh_shuffle_open_reader(b, spec, q, outs, maps, &s, &err)) die("open_reader", &err);
    for (;;) {
      fsh_batch *x;
      if (s.get_next(&s, &x, &err)) die("read", &err);
      if (!x) break;
      if (rows) rows[q] += x->length, sums[q] += row_hash_sum(x);
      fsh_batch_unref(x);
    }
    s.release(&s);
  }
  return bench_now() - t0;
}

/* What was written: per-partition rows and row-hash sums. */
static void expected(const table *t, int32_t parts, int64_t *rows, uint64_t *sums) {
  for (int64_t i = 0; i < t->n_batches; i++) {
    fsh_batch *x = t->batches[i];
    int64_t per = (x->length + parts - 1) / parts;
    for (int32_t k = 0; k < parts; k++) {
      int64_t off = k * per, len = x->length - off < per ? x->length - off : per;
      if (len <= 0) break;
      fsh_batch *s = fsh_batch_slice(x, off, len);
      rows[k] += len;
      sums[k] += row_hash_sum(s);
      fsh_batch_unref(s);
    }
  }
}

/* The baseline: write `bytes` bytes to a file in 4 MiB writes + fsync,
 * then read them back in 4 MiB reads. Seconds of each. */
static void plain_file(const char *dir, int64_t bytes, const uint8_t *src, double *wsec,
                       double *rsec) {
  char path[4200];
  snprintf(path, sizeof path, "%s/baseline.bin", dir);
  const int64_t chunk = 4 << 20;
  double t0 = bench_now();
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) die(path, NULL);
  for (int64_t at = 0; at < bytes; at += chunk) {
    int64_t n = bytes - at < chunk ? bytes - at : chunk;
    if (write(fd, src, (size_t)n) != n) die("baseline write", NULL);
  }
  if (fsync(fd) != 0 || close(fd) != 0) die("baseline fsync", NULL);
  *wsec = bench_now() - t0;
  uint8_t *buf = fsh_aligned_alloc((size_t)chunk);
  t0 = bench_now();
  fd = open(path, O_RDONLY);
  int64_t got = 0;
  for (ssize_t r; (r = read(fd, buf, (size_t)chunk)) > 0;) got += r;
  close(fd);
  *rsec = bench_now() - t0;
  if (got != bytes) die("baseline read", NULL);
  fsh_aligned_free(buf, (size_t)chunk);
  unlink(path);
}

int main(int argc, char **argv) {
  config c = {.bytes = 1 << 30, .runs = 3, .maps = 4, .partitions = 64, .dir = "/tmp"};
  fsh_error err;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc) c.bytes = atof(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) c.runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--maps") && i + 1 < argc) c.maps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--partitions") && i + 1 < argc) c.partitions = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) c.dir = argv[++i];
    else if (!strcmp(argv[i], "--compression") && i + 1 < argc) {
      if (fsh_compression_parse(argv[++i], &c.compression, &err)) die("--compression", &err);
    } else {
      fprintf(stderr, "usage: bench_shuffle [--bytes N] [--runs R] [--maps M] [--partitions P] "
                      "[--compression none|lz4|zstd] [--dir DIR]\n");
      return 2;
    }
  }
  if (c.runs < 1 || c.maps < 1 || c.partitions < 1) die("bad arguments", NULL);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/fsh-bench-shuffle-XXXXXX", c.dir);
  if (!mkdtemp(dir)) die(dir, NULL);

  table t = make_table(c.bytes);
  printf("bench_shuffle: %lld rows, %.0f MiB in %lld batches, %d map tasks, %d partitions, "
         "compression %s, dir %s\n",
         (long long)t.rows, t.bytes / (1 << 20), (long long)t.n_batches, c.maps, c.partitions,
         fsh_compression_name(c.compression), dir);
  fsh_shuffle_spec spec = {.shuffle_id = 1, .n_partitions = c.partitions, .schema = t.schema,
                           .compression = c.compression};
  fsh_map_output *outs = calloc((size_t)c.maps, sizeof *outs);
  int64_t *want_rows = calloc((size_t)c.partitions, sizeof *want_rows);
  uint64_t *want_sums = calloc((size_t)c.partitions, sizeof *want_sums);
  int64_t *rows = calloc((size_t)c.partitions, sizeof *rows);
  uint64_t *sums = calloc((size_t)c.partitions, sizeof *sums);
  expected(&t, c.partitions, want_rows, want_sums);

  const char *names[2] = {"memory", "fs"};
  double *secs[4], *base_w = calloc((size_t)c.runs, sizeof(double)),
                   *base_r = calloc((size_t)c.runs, sizeof(double));
  for (int i = 0; i < 4; i++) secs[i] = calloc((size_t)c.runs, sizeof(double));
  bool verified = true;
  double stored = 0;
  for (int be = 0; be < 2; be++) {
    fsh_shuffle_backend *b;
    if ((be == 0 ? fsh_shuffle_memory_new(&b, &err) : fsh_shuffle_fs_new(dir, &b, &err)))
      die("backend", &err);
    for (int r = 0; r < c.runs; r++) {
      secs[2 * be][r] = run_maps(b, &spec, &t, c.maps, outs);
      secs[2 * be + 1][r] = run_reads(b, &spec, outs, c.maps, NULL, NULL);
      if (r == 0) { /* verify once, untimed */
        memset(rows, 0, sizeof *rows * (size_t)c.partitions);
        memset(sums, 0, sizeof *sums * (size_t)c.partitions);
        run_reads(b, &spec, outs, c.maps, rows, sums);
        int64_t meta_rows = 0;
        for (int m = 0; m < c.maps; m++)
          for (int32_t q = 0; q < c.partitions; q++) meta_rows += outs[m].rows[q];
        bool ok = meta_rows == t.rows;
        for (int32_t q = 0; q < c.partitions; q++)
          ok = ok && rows[q] == want_rows[q] && sums[q] == want_sums[q];
        if (!ok) fprintf(stderr, "bench_shuffle: %s: read data differs\n", names[be]);
        verified = verified && ok;
        if (be == 1) {
          stored = 0;
          for (int m = 0; m < c.maps; m++)
            for (int32_t q = 0; q < c.partitions; q++) stored += (double)outs[m].bytes[q];
        }
      }
      if (fsh_shuffle_release(b, 1, &err)) die("release", &err);
    }
    fsh_shuffle_backend_destroy(b);
  }
  /* the baseline: the same number of bytes the fs backend stored */
  uint8_t *src = fsh_aligned_alloc(4 << 20);
  for (int i = 0; i < (4 << 20); i++) src[i] = (uint8_t)(i * 131 + 7);
  for (int r = 0; r < c.runs; r++) plain_file(dir, (int64_t)stored, src, &base_w[r], &base_r[r]);
  fsh_aligned_free(src, 4 << 20);
  rmdir(dir);

  bench_stats bw = bench_summarize(base_w, c.runs, stored), br = bench_summarize(base_r, c.runs, stored);
  bench_stats s[4];
  for (int i = 0; i < 4; i++) s[i] = bench_summarize(secs[i], c.runs, t.bytes);
  printf("  (GB/s of table bytes: min median max; fs stored %.0f MiB)\n", stored / (1 << 20));
  bench_print("plain file write+fsync", bw, bw.med, "baseline");
  bench_print("plain file read", br, br.med, "baseline");
  bench_print("memory backend write", s[0], bw.med, "baseline");
  bench_print("memory backend read", s[1], br.med, "baseline");
  bench_print("fs backend write", s[2], bw.med, "baseline");
  bench_print("fs backend read", s[3], br.med, "baseline");
  printf("result: name=bench_shuffle verified=%s bytes=%.0f runs=%d maps=%d partitions=%d "
         "compression=%s memory_write_gbps=%.2f memory_read_gbps=%.2f fs_write_gbps=%.2f "
         "fs_read_gbps=%.2f file_write_gbps=%.2f file_read_gbps=%.2f fs_write_vs_file=%.2f "
         "fs_read_vs_file=%.2f\n",
         verified ? "yes" : "no", t.bytes, c.runs, c.maps, c.partitions,
         fsh_compression_name(c.compression), s[0].med, s[1].med, s[2].med, s[3].med, bw.med,
         br.med, s[2].med / bw.med, s[3].med / br.med);

  for (int m = 0; m < c.maps; m++) fsh_map_output_reset(&outs[m]);
  for (int64_t i = 0; i < t.n_batches; i++) fsh_batch_unref(t.batches[i]);
  free(t.batches);
  fsh_schema_unref(t.schema);
  for (int i = 0; i < 4; i++) free(secs[i]);
  free(base_w), free(base_r), free(outs), free(want_rows), free(want_sums), free(rows), free(sums);
  return verified ? 0 : 1;
}
