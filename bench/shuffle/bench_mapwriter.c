/* bench_mapwriter.c -- the map-output writer alone, one thread: a map's
 * rows into the partition builders (fsh_map_file_writer_write_rows, in
 * the map task's slices) and its close (block layout straight from the
 * builders, the copy into the write stage, block checksums, index), over
 * an output that only counts the bytes: no store, no memfd pages (those
 * are bench_memfd's and bench_map's). Between maps a 32 MiB memset stands
 * for a worker's other work (generation, the memfd write, other tasks),
 * so that builders and stage start each map out of cache as in a
 * cluster. Times are the thread's CPU time per map, min / median / max
 * over the maps after the first (the first one grows the builders).
 *
 *   build/bench_mapwriter [--partitions P (1000)] [--maps M (200)]
 *                         [--batches B (1): 65536-row batches a map]
 *                         [--slice-rows N (65536)]
 *
 * Verification (not timed): every map's per-partition rows, bytes and
 * checksums equal those of the same rows scattered (fsh_scatter) and
 * written as batches (fsh_map_file_writer_write: the IPC encoder's path,
 * not the builders'), and the two outputs' bytes hash alike. Ends with one
 * `result:` line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

enum { ROWS = 65536, N_BATCHES = 8 };

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const fsh_error *err) {
  fprintf(stderr, "bench_mapwriter: %s: %s\n", what, err ? err->message : "failed");
  exit(1);
}

/* The output: counts bytes; when `hash`, hashes them too. */
typedef struct sink {
  XXH3_state_t *h;
} sink;

static int sink_writev(fsh_output *o, const struct iovec *iov, int n, fsh_error *err) {
  (void)err;
  sink *s = o->ctx;
  for (int i = 0; i < n; i++) {
    if (s && s->h) (void)XXH3_64bits_update(s->h, iov[i].iov_base, iov[i].iov_len);
    o->position += (int64_t)iov[i].iov_len;
  }
  return 0;
}

static int sink_close(fsh_output *o, bool abort, fsh_error *err) {
  (void)abort, (void)err;
  free(o);
  return 0;
}

static fsh_output *sink_new(sink *s) {
  fsh_output *o = calloc(1, sizeof *o);
  if (!o) die("out of memory", NULL);
  *o = (fsh_output){.writev = sink_writev, .close = sink_close, .ctx = s, .name = "sink"};
  return o;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int32_t P = 1000;
  int maps = 200, batches = 1, slice = ROWS;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && strcmp(a, "--partitions") == 0) P = atoi(v), i++;
    else if (v && strcmp(a, "--maps") == 0) maps = atoi(v), i++;
    else if (v && strcmp(a, "--batches") == 0) batches = atoi(v), i++;
    else if (v && strcmp(a, "--slice-rows") == 0) slice = atoi(v), i++;
    else {
      fprintf(stderr, "usage: bench_mapwriter [--partitions P] [--maps M] [--batches B] "
                      "[--slice-rows N]\n");
      return 2;
    }
  }
  if (P < 1 || maps < 2 || batches < 1 || slice < 1 || slice > ROWS) die("bad arguments", NULL);
  fsh_error err;
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_synthetic_options so = {.seed = 42, .with_nulls = true};
  fsh_batch *b[N_BATCHES];
  int32_t *part[N_BATCHES];
  uint64_t *h = malloc(sizeof *h * ROWS);
  int32_t key = 0;
  for (int i = 0; i < N_BATCHES; i++) {
    part[i] = malloc(sizeof *part[i] * ROWS);
    if (!schema || !h || !part[i] || fsh_synthetic_batch(schema, &so, i, ROWS, &b[i], &err) != 0 ||
        fsh_hash_columns(b[i], &key, 1, 0, h, &err) != 0 ||
        fsh_partition_hash(h, ROWS, P, part[i], &err) != 0)
      die("generate", &err);
  }
  size_t junk_n = (size_t)32 << 20;
  uint8_t *junk = malloc(junk_n);
  double *t_rows = calloc((size_t)maps, sizeof *t_rows);
  double *t_close = calloc((size_t)maps, sizeof *t_close);
  fsh_batch **outs = calloc((size_t)P, sizeof *outs);
  if (!junk || !t_rows || !t_close || !outs) die("out of memory", NULL);
  memset(junk, 1, junk_n);
  fsh_shuffle_spec spec = {.shuffle_id = 1, .n_partitions = P, .schema = schema};
  bool verified = true;
  int64_t out_bytes = 0;
  for (int m = 0; m < maps; m++) {
    bool check = m == 0 || m == maps - 1;
    sink s_rows = {check ? XXH3_createState() : NULL}, s_ref = {check ? XXH3_createState() : NULL};
    if (check) XXH3_64bits_reset(s_rows.h), XXH3_64bits_reset(s_ref.h);
    fsh_map_file_writer *w = NULL, *ref = NULL;
    if (fsh_map_file_writer_open(sink_new(&s_rows), &spec, m, 0, NULL, &w, &err) != 0)
      die("open", &err);
    memset(junk, m, junk_n); /* the caches: as after a worker's other work */
    double t0 = cpu_now();
    for (int k = 0; k < batches; k++) {
      int bi = (m * batches + k) % N_BATCHES;
      for (int at = 0; at < ROWS; at += slice) {
        int n = ROWS - at < slice ? ROWS - at : slice;
        fsh_batch *piece = fsh_batch_slice(b[bi], at, n);
        if (!piece || fsh_map_file_writer_write_rows(w, piece, part[bi] + at, &err) != 0)
          die("write_rows", &err);
        fsh_batch_unref(piece);
      }
    }
    double t1 = cpu_now();
    fsh_map_output got = {0};
    if (fsh_map_file_writer_close(w, &got, &err) != 0) die("close", &err);
    double t2 = cpu_now();
    t_rows[m] = t1 - t0, t_close[m] = t2 - t1;
    if (check) { /* the same rows through fsh_scatter + write: the encoder's blocks */
      if (fsh_map_file_writer_open(sink_new(&s_ref), &spec, m, 0, NULL, &ref, &err) != 0)
        die("open", &err);
      for (int k = 0; k < batches; k++) {
        int bi = (m * batches + k) % N_BATCHES;
        if (fsh_scatter(b[bi], part[bi], P, outs, &err) != 0) die("scatter", &err);
        for (int32_t p = 0; p < P; p++) {
          if (outs[p] && fsh_map_file_writer_write(ref, p, outs[p], &err) != 0) die("write", &err);
          fsh_batch_unref(outs[p]);
          outs[p] = NULL;
        }
      }
      fsh_map_output want = {0};
      if (fsh_map_file_writer_close(ref, &want, &err) != 0) die("close", &err);
      for (int32_t p = 0; p < P; p++)
        verified &= got.rows[p] == want.rows[p] && got.bytes[p] == want.bytes[p] &&
                    got.checksums[p] == want.checksums[p];
      verified &= XXH3_64bits_digest(s_rows.h) == XXH3_64bits_digest(s_ref.h);
      fsh_map_output_reset(&want);
      XXH3_freeState(s_rows.h);
      XXH3_freeState(s_ref.h);
    }
    for (int32_t p = 0; p < P; p++) out_bytes += m == 0 ? got.bytes[p] : 0;
    fsh_map_output_reset(&got);
  }
  /* the maps after the first */
  qsort(t_rows + 1, (size_t)maps - 1, sizeof *t_rows, cmp_double);
  qsort(t_close + 1, (size_t)maps - 1, sizeof *t_close, cmp_double);
  double rows_per_map = (double)ROWS * batches;
  int mid = 1 + (maps - 1) / 2;
  printf("bench_mapwriter: %d partitions, %d maps of %.0f rows (%d-row slices), %lld bytes of "
         "blocks a map, one thread (CPU time)\n",
         P, maps, rows_per_map, slice, (long long)out_bytes);
  printf("  %-28s %9s %9s %9s  (us a map; ns a row at the median)\n", "", "min", "median", "max");
  printf("  %-28s %9.1f %9.1f %9.1f  %.2f\n", "rows into the builders", t_rows[1] * 1e6,
         t_rows[mid] * 1e6, t_rows[maps - 1] * 1e6, t_rows[mid] * 1e9 / rows_per_map);
  printf("  %-28s %9.1f %9.1f %9.1f  %.2f\n", "close (blocks, index)", t_close[1] * 1e6,
         t_close[mid] * 1e6, t_close[maps - 1] * 1e6, t_close[mid] * 1e9 / rows_per_map);
  printf("result: name=bench_mapwriter verified=%s partitions=%d maps=%d rows_per_map=%.0f "
         "rows_us_median=%.1f close_us_median=%.1f rows_ns_per_row=%.3f close_ns_per_row=%.3f\n",
         verified ? "yes" : "no", P, maps, rows_per_map, t_rows[mid] * 1e6, t_close[mid] * 1e6,
         t_rows[mid] * 1e9 / rows_per_map, t_close[mid] * 1e9 / rows_per_map);
  for (int i = 0; i < N_BATCHES; i++) fsh_batch_unref(b[i]), free(part[i]);
  free(h), free(junk), free(t_rows), free(t_close), free(outs);
  fsh_schema_unref(schema);
  return verified ? 0 : 1;
}
