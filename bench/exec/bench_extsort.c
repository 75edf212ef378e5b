/* bench_extsort.c -- the external sort: ~1 GiB of the synthetic table (key
 * int64 uniform, value float64, name utf8; batches of 256Ki rows) sorted
 * by key with a 64 MiB budget (runs spilled to a directory, merged)
 * against the same sort fully in memory (no budget), and against a plain
 * sequential write + read back of the input's buffer bytes to a file in
 * the same directory (the I/O floor of one spill pass), measured in the
 * same run. GB/s count the input's buffer bytes per second of push +
 * finish + drain; min / median / max over the runs; ratios to the
 * in-memory sort's median. The same per CPU second of the process (the
 * machine may be shared; wall-clock time then measures the neighbours).
 *
 *   build/bench_extsort [--gib G] [--budget-mib M] [--runs R] [--dir D]
 *                       [--compression none|lz4|zstd]
 *
 * Spill files are not fsync'd (exec.h), so with free memory they mostly
 * live in the page cache: the numbers measure the sort's own work more
 * than the disk. Verification (untimed in spirit, done on every drain):
 * the output has every row, keys non-decreasing, the multiset of (key,
 * value) pairs equals the input's, and the external sort's output is
 * identical to the in-memory one row by row (both are stable), through an
 * order-sensitive hash. Ends with one machine-readable `result:` line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_extsort: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

/* CPU seconds of the process (user + system) in the last run_* call: the
 * machine may be shared, so wall-clock GB/s are printed beside CPU GB/s. */
static double g_cpu;

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

typedef struct digest {
  int64_t rows;
  uint64_t set_hash;   /* order-insensitive: sum of mix(key, value) */
  uint64_t order_hash; /* order-sensitive */
  bool sorted;
} digest;

static void digest_batch(digest *d, const fsh_batch *b, int64_t *last_key) {
  const fsh_array *k = b->columns[0], *v = b->columns[1];
  const int64_t *keys = (const int64_t *)k->buffers[1]->data + k->offset;
  const uint64_t *vals = (const uint64_t *)v->buffers[1]->data + v->offset;
  for (int64_t i = 0; i < b->length; i++) {
    bool valid = !v->buffers[0] || fsh_bit_get(v->buffers[0]->data, v->offset + i);
    uint64_t h = mix((uint64_t)keys[i] * 31 + mix(valid ? vals[i] : 0x5eed)); /* null: any bits */
    d->set_hash += h;
    d->order_hash = mix(d->order_hash ^ h);
    if (d->rows + i > 0 && keys[i] < *last_key) d->sorted = false;
    *last_key = keys[i];
  }
  d->rows += b->length;
}

static double batch_bytes(const fsh_batch *b) {
  double total = 0;
  for (int64_t c = 0; c < b->n_columns; c++)
    for (int i = 0; i < b->columns[c]->n_buffers; i++)
      if (b->columns[c]->buffers[i]) total += (double)b->columns[c]->buffers[i]->size;
  return total;
}

/* One sort of every input batch; the output digested. */
static double run_sort(fsh_batch **in, int64_t n, int64_t budget, fsh_spill *sp, digest *d,
                       fsh_extsort_stats *stats) {
  fsh_error err;
  int32_t key = 0;
  fsh_extsort_options o = {.key_cols = &key, .n_keys = 1, .memory_budget = budget,
                           .target_rows = 65536, .spill = budget ? sp : NULL};
  double t0 = bench_now(), c0 = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
  fsh_extsort *s = NULL;
  if (fsh_extsort_new(in[0]->schema, &o, &s, &err) != 0) die("extsort_new", &err);
  for (int64_t i = 0; i < n; i++)
    if (fsh_extsort_push(s, in[i], &err) != 0) die("push", &err);
  fsh_batch_stream st;
  if (fsh_extsort_finish(s, &st, &err) != 0) die("finish", &err);
  fsh_extsort_get_stats(s, stats);
  fsh_extsort_free(s);
  memset(d, 0, sizeof *d);
  d->sorted = true;
  int64_t last = 0;
  for (;;) {
    fsh_batch *b = NULL;
    if (st.get_next(&st, &b, &err) != 0) die("get_next", &err);
    if (!b) break;
    digest_batch(d, b, &last);
    fsh_batch_unref(b);
  }
  st.release(&st);
  g_cpu = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  return bench_now() - t0;
}

/* Writes every buffer of the input to one file, then reads it back. */
static double run_io(fsh_batch **in, int64_t n, const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/bench-extsort-io.bin", dir);
  double t0 = bench_now(), c0 = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("open", NULL);
  size_t biggest = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t c = 0; c < in[i]->n_columns; c++)
      for (int j = 0; j < in[i]->columns[c]->n_buffers; j++) {
        fsh_buffer *b = in[i]->columns[c]->buffers[j];
        if (!b) continue;
        if ((size_t)b->size > biggest) biggest = (size_t)b->size;
        if (write(fd, b->data, (size_t)b->size) != b->size) die("write", NULL);
      }
  uint8_t *buf = malloc(biggest ? biggest : 1);
  if (!buf || lseek(fd, 0, SEEK_SET) != 0) die("read back", NULL);
  uint64_t sum = 0;
  ssize_t got;
  while ((got = read(fd, buf, biggest)) > 0) sum += buf[got - 1];
  close(fd);
  unlink(path);
  free(buf);
  if (sum == 1) fprintf(stderr, " "); /* keep the read */
  g_cpu = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  return bench_now() - t0;
}

int main(int argc, char **argv) {
  double gib = 1;
  int64_t budget_mib = 64;
  int runs = 3;
  const char *dir = NULL;
  fsh_compression comp = FSH_COMPRESSION_NONE;
  fsh_error err;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--gib")) gib = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--budget-mib")) budget_mib = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--compression")) {
      if (fsh_compression_parse(argv[i + 1], &comp, &err) != 0) die("--compression", &err);
    } else die("unknown argument", NULL);
  }
  if (gib <= 0 || budget_mib < 1 || runs < 1 || runs > 100) die("bad arguments", NULL);
  char tmpl[] = "/tmp/fsh-bench-extsort-XXXXXX";
  bool own_dir = !dir;
  if (own_dir && !(dir = mkdtemp(tmpl))) die("mkdtemp", NULL);

  fsh_schema *schema = fsh_synthetic_schema();
  if (!schema) die("schema", NULL);
  fsh_synthetic_options so = {.seed = 11, .with_nulls = true};
  enum { BATCH_ROWS = 256 << 10 };
  int64_t cap = 64, n = 0;
  fsh_batch **in = malloc(sizeof *in * (size_t)cap);
  double bytes = 0;
  digest want = {.sorted = true};
  while (bytes < gib * (double)(1ull << 30)) {
    if (n == cap && !(in = realloc(in, sizeof *in * (size_t)(cap *= 2)))) die("oom", NULL);
    if (fsh_synthetic_batch(schema, &so, n, BATCH_ROWS, &in[n], &err) != 0) die("data", &err);
    int64_t last = 0;
    digest_batch(&want, in[n], &last);
    bytes += batch_bytes(in[n++]);
  }
  int64_t budget = budget_mib << 20;
  printf("bench_extsort: %lld rows in %lld batches (key int64, value float64, name utf8), "
         "%.2f GB, budget %lld MiB, spill dir %s, compression %s, %d runs\n",
         (long long)want.rows, (long long)n, bytes / 1e9, (long long)budget_mib, dir,
         fsh_compression_name(comp), runs);

  const char *dirs[1] = {dir};
  fsh_spill_options spo = {.dirs = dirs, .n_dirs = 1, .compression = comp, .tag = "bench"};
  fsh_spill *sp = NULL;
  if (fsh_spill_new(&spo, &sp, &err) != 0) die("spill", &err);

  double t_mem[100], t_ext[100], t_io[100], c_mem[100], c_ext[100], c_io[100];
  bool verified = true;
  digest mem_d = {0}, ext_d = {0};
  fsh_extsort_stats mem_st = {0}, ext_st = {0};
  for (int r = 0; r < runs; r++) {
    t_mem[r] = run_sort(in, n, 0, sp, &mem_d, &mem_st);
    c_mem[r] = g_cpu;
    t_ext[r] = run_sort(in, n, budget, sp, &ext_d, &ext_st);
    c_ext[r] = g_cpu;
    t_io[r] = run_io(in, n, dir);
    c_io[r] = g_cpu;
    bool ok = mem_d.rows == want.rows && ext_d.rows == want.rows && mem_d.sorted &&
              ext_d.sorted && mem_d.set_hash == want.set_hash &&
              ext_d.set_hash == want.set_hash && mem_d.order_hash == ext_d.order_hash &&
              mem_st.runs == 0 && ext_st.runs > 0;
    if (!ok) fprintf(stderr, "bench_extsort: run %d: verification failed\n", r);
    verified = verified && ok;
  }
  int leftovers = 0; /* every spill file must be gone */
  {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
    FILE *p = popen(cmd, "r");
    if (p && fscanf(p, "%d", &leftovers) != 1) leftovers = -1;
    if (p) pclose(p);
  }
  verified = verified && leftovers == 0;
  bench_stats mem = bench_summarize(t_mem, runs, bytes);
  bench_stats ext = bench_summarize(t_ext, runs, bytes);
  bench_stats io = bench_summarize(t_io, runs, bytes);
  bench_stats cmem = bench_summarize(c_mem, runs, bytes);
  bench_stats cext = bench_summarize(c_ext, runs, bytes);
  bench_stats cio = bench_summarize(c_io, runs, bytes);
  printf("  external sort: %lld runs spilled (%.2f GB written, %lld merge passes), peak held "
         "%.1f MB\n", (long long)ext_st.runs, (double)ext_st.spilled_bytes / 1e9,
         (long long)ext_st.merge_passes, (double)ext_st.peak_memory / 1e6);
  printf("  %-34s %7s %7s %7s\n", "", "min", "median", "max");
  bench_print("sort in memory (no budget)", mem, mem.med, "in-memory");
  bench_print("external sort (budget)", ext, mem.med, "in-memory");
  bench_print("sequential write + read", io, mem.med, "in-memory");
  printf("  per CPU second (user + system of the process):\n");
  bench_print("sort in memory (no budget), CPU", cmem, cmem.med, "in-memory");
  bench_print("external sort (budget), CPU", cext, cmem.med, "in-memory");
  bench_print("sequential write + read, CPU", cio, cmem.med, "in-memory");
  printf("result: name=bench_extsort gb=%.3f budget_mib=%lld runs_spilled=%lld "
         "in_memory_gbps=%.3f external_gbps=%.3f io_gbps=%.3f external_vs_memory=%.3f "
         "external_vs_io=%.3f cpu_in_memory_gbps=%.3f cpu_external_gbps=%.3f "
         "cpu_external_vs_memory=%.3f verified=%s\n",
         bytes / 1e9, (long long)budget_mib, (long long)ext_st.runs, mem.med, ext.med, io.med,
         ext.med / mem.med, ext.med / io.med, cmem.med, cext.med, cext.med / cmem.med,
         verified ? "yes" : "no");
  fsh_spill_free(sp);
  for (int64_t i = 0; i < n; i++) fsh_batch_unref(in[i]);
  free(in);
  fsh_schema_unref(schema);
  if (own_dir) rmdir(dir);
  return verified ? 0 : 1;
}
