/* bench_hashops.c -- the hash operators on one core: a group-by of R rows
 * on an int64 key with ~G groups (sum, count(*)), and an inner hash join of
 * R probe rows against B build rows (unique int64 keys, every probe row
 * matching one). The baseline, measured in the same run, is
 * fsh_hash_columns over the same key columns (the hashing every hash
 * operator does first). GB/s count the input batches' bytes (key and value
 * columns) per second; min / median / max over the runs.
 *
 *   build/bench_hashops [--rows R] [--groups G] [--build-rows B]
 *                       [--batch-rows N] [--runs K]
 *
 * The group-by runs on the key (the one-integer-key fast path), then on the
 * general path of the hash table (keys encoded and compared as bytes) with
 * the same groups under other key shapes: the key twice (k, k), the key as
 * utf8 ("k<key>"), (int64, utf8), and the key as float64 (a one-float-key
 * fast path). Their rows/s are reported with the ratio to the int64 fast
 * path of the same run, per second of the thread's CPU time (the operator
 * is single-threaded; on a shared machine wall time mostly measures the
 * other processes).
 *
 * Verification (every run, untimed): the group-by's group count, sum of
 * counts and sum of sums against the input; every join output row has
 * equal keys on both sides and the build payload of its key, and the
 * output has R rows. Ends with one machine-readable `result:` line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/exec.h>

#include "bench_util.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_hashops: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static fsh_array *int64_array(const int64_t *v, int64_t n) {
  fsh_array *a = fsh_array_new(2, 0);
  if (!a || !(a->buffers[1] = fsh_buffer_copy(v, n * 8))) die("out of memory", NULL);
  a->length = n;
  a->null_count = 0;
  return a;
}

static fsh_schema *two_int64(const char *k, const char *v) {
  fsh_schema *s = fsh_schema_new(2);
  if (!s || fsh_field_init(&s->fields[0], k, FSH_TYPE_INT64, false) != 0 ||
      fsh_field_init(&s->fields[1], v, FSH_TYPE_INT64, false) != 0)
    die("out of memory", NULL);
  return s;
}

/* The group-by input with its key also as utf8 and float64: k, v, ks, kf. */
static fsh_schema *groupby_schema(void) {
  fsh_schema *s = fsh_schema_new(4);
  if (!s || fsh_field_init(&s->fields[0], "k", FSH_TYPE_INT64, false) != 0 ||
      fsh_field_init(&s->fields[1], "v", FSH_TYPE_INT64, false) != 0 ||
      fsh_field_init(&s->fields[2], "ks", FSH_TYPE_STRING, false) != 0 ||
      fsh_field_init(&s->fields[3], "kf", FSH_TYPE_FLOAT64, false) != 0)
    die("out of memory", NULL);
  return s;
}

/* "k<v>" for each of v[0, n) as a utf8 array. */
static fsh_array *key_strings(const int64_t *v, int64_t n) {
  fsh_array *a = fsh_array_new(3, 0);
  int32_t *offs = malloc((size_t)(n + 1) * 4);
  char *data = malloc((size_t)n * 24 + 1);
  if (!a || !offs || !data) die("out of memory", NULL);
  int32_t at = 0;
  offs[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    at += snprintf(data + at, 24, "k%lld", (long long)v[i]);
    offs[i + 1] = at;
  }
  if (!(a->buffers[1] = fsh_buffer_copy(offs, (n + 1) * 4)) ||
      !(a->buffers[2] = fsh_buffer_copy(data, at)))
    die("out of memory", NULL);
  a->length = n;
  a->null_count = 0;
  free(offs);
  free(data);
  return a;
}

static fsh_array *key_doubles(const int64_t *v, int64_t n) {
  double *d = malloc((size_t)n * 8);
  if (!d) die("out of memory", NULL);
  for (int64_t i = 0; i < n; i++) d[i] = (double)v[i];
  fsh_array *a = int64_array((const int64_t *)(const void *)d, n); /* 8 bytes a value */
  free(d);
  return a;
}

/* Batches of n_rows rows in batch_rows chunks: key = key_of(row), value. */
typedef int64_t (*gen_fn)(int64_t row, int64_t param, bool value);

static int64_t gb_gen(int64_t row, int64_t groups, bool value) {
  return value ? (int64_t)(mix((uint64_t)row * 7) % 1000) : (int64_t)(mix((uint64_t)row) % (uint64_t)groups);
}
static int64_t probe_gen(int64_t row, int64_t build, bool value) {
  return value ? row : (int64_t)(mix((uint64_t)row + 99) % (uint64_t)build);
}
/* Build keys: a permutation of [0, B) (odd multiplier mod 2^k does not
 * permute [0, B); use a stride coprime with B instead). */
static int64_t build_gen(int64_t row, int64_t build, bool value) {
  int64_t stride = 1000003 % build ? 1000003 : 999983;
  int64_t k = (int64_t)(((__int128)row * stride) % build);
  return value ? k * 3 : k;
}

static fsh_batch **make_batches(fsh_schema *s, int64_t n_rows, int64_t batch_rows, gen_fn g,
                                int64_t param, int *n_out, double *bytes) {
  int nb = (int)((n_rows + batch_rows - 1) / batch_rows);
  fsh_batch **b = calloc((size_t)nb, sizeof *b);
  int64_t *k = malloc((size_t)batch_rows * 8), *v = malloc((size_t)batch_rows * 8);
  if (!b || !k || !v) die("out of memory", NULL);
  for (int i = 0; i < nb; i++) {
    int64_t first = i * batch_rows, n = n_rows - first < batch_rows ? n_rows - first : batch_rows;
    for (int64_t r = 0; r < n; r++) {
      k[r] = g(first + r, param, false);
      v[r] = g(first + r, param, true);
    }
    b[i] = fsh_batch_new(s, n);
    if (!b[i]) die("out of memory", NULL);
    b[i]->columns[0] = int64_array(k, n);
    b[i]->columns[1] = int64_array(v, n);
    if (s->n_fields == 4) { /* the group-by input: the key as utf8 and float64 too */
      b[i]->columns[2] = key_strings(k, n);
      b[i]->columns[3] = key_doubles(k, n);
    }
    *bytes += 16.0 * (double)n;
  }
  free(k);
  free(v);
  *n_out = nb;
  return b;
}

static int64_t rd(const fsh_array *a, int64_t i) {
  int64_t v;
  memcpy(&v, a->buffers[1]->data + 8 * (a->offset + i), 8);
  return v;
}

/* The group key of row g of output key column a (of field f): an int64,
 * "k<key>" or a float64. */
static int64_t key_of(const fsh_field *f, const fsh_array *a, int64_t g) {
  if (f->type == FSH_TYPE_FLOAT64) {
    double d;
    memcpy(&d, a->buffers[1]->data + 8 * (a->offset + g), 8);
    return (int64_t)d;
  }
  if (f->type == FSH_TYPE_STRING) {
    int32_t st, en;
    memcpy(&st, a->buffers[1]->data + 4 * (a->offset + g), 4);
    memcpy(&en, a->buffers[1]->data + 4 * (a->offset + g + 1), 4);
    char buf[32];
    int len = en - st < 31 ? en - st : 31;
    memcpy(buf, a->buffers[2]->data + st, (size_t)len);
    buf[len] = 0;
    return buf[0] == 'k' ? atoll(buf + 1) : -1;
  }
  return rd(a, g);
}

/* Seconds hashing the key column of every batch. */
static double hash_run(fsh_batch **b, int nb, uint64_t *h) {
  fsh_error err;
  int32_t key = 0;
  double t0 = bench_now();
  for (int i = 0; i < nb; i++)
    if (fsh_hash_columns(b[i], &key, 1, 0, h, &err) != 0) die("hash", &err);
  return bench_now() - t0;
}

/* One group-by on columns key[0, n_keys) (each the group key in some
 * form: the same groups); returns seconds (*cpu: seconds of this thread's
 * CPU time); verifies against the input: every output key column names the
 * same key, each key once. */
static double groupby_run(fsh_batch **b, int nb, const int32_t *key, int n_keys, int64_t rows,
                          int64_t groups, int64_t value_sum, double *cpu, bool *ok) {
  fsh_error err;
  fsh_agg_spec specs[2] = {{FSH_AGG_SUM, 1, NULL}, {FSH_AGG_COUNT_STAR, -1, NULL}};
  fsh_hash_agg *a = NULL;
  fsh_batch *out = NULL;
  double t0 = bench_now(), c0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);
  if (fsh_hash_agg_new(b[0]->schema, key, n_keys, specs, 2, FSH_AGG_SINGLE, 0, &a, &err) != 0)
    die("aggregate", &err);
  for (int i = 0; i < nb; i++)
    if (fsh_hash_agg_push(a, b[i], &err) != 0) die("aggregate push", &err);
  if (fsh_hash_agg_finish(a, &out, &err) != 0) die("aggregate finish", &err);
  double t = bench_now() - t0;
  if (cpu) *cpu = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  /* untimed checks */
  int64_t sum = 0, cnt = 0;
  uint8_t *seen = calloc((size_t)groups, 1);
  bool good = seen != NULL;
  for (int64_t g = 0; good && g < out->length; g++) {
    int64_t k = key_of(&out->schema->fields[0], out->columns[0], g);
    good = k >= 0 && k < groups && !seen[k];
    if (good) seen[k] = 1;
    for (int c = 1; c < n_keys; c++)
      good = good && key_of(&out->schema->fields[c], out->columns[c], g) == k;
    sum += rd(out->columns[n_keys], g);
    cnt += rd(out->columns[n_keys + 1], g);
  }
  int64_t distinct = 0;
  for (int64_t k = 0; good && k < groups; k++) distinct += seen[k];
  (void)distinct;
  *ok = good && cnt == rows && sum == value_sum && out->length == distinct;
  free(seen);
  fsh_batch_unref(out);
  fsh_hash_agg_free(a);
  return t;
}

static double join_run(fsh_batch **build, int nbb, fsh_batch **probe, int nbp, int64_t rows,
                       bool *ok) {
  fsh_error err;
  int32_t key = 0;
  fsh_hash_join *j = NULL;
  int64_t out_rows = 0;
  bool good = true;
  double t = 0, t0 = bench_now();
  if (fsh_hash_join_new(probe[0]->schema, build[0]->schema, &key, &key, 1, FSH_JOIN_INNER, false,
                        0, &j, &err) != 0)
    die("join", &err);
  for (int i = 0; i < nbb; i++)
    if (fsh_hash_join_build(j, build[i], &err) != 0) die("join build", &err);
  for (int i = 0; i < nbp; i++) {
    fsh_batch *o = NULL;
    if (fsh_hash_join_probe(j, probe[i], &o, &err) != 0) die("join probe", &err);
    t += bench_now() - t0;
    out_rows += o->length; /* untimed: keys equal, payload = 3 * key */
    for (int64_t r = 0; good && r < o->length; r++) {
      int64_t lk = rd(o->columns[0], r), rk = rd(o->columns[2], r), rv = rd(o->columns[3], r);
      good = lk == rk && rv == 3 * rk;
    }
    fsh_batch_unref(o);
    t0 = bench_now();
  }
  fsh_batch *fin = NULL;
  if (fsh_hash_join_finish(j, &fin, &err) != 0) die("join finish", &err);
  fsh_hash_join_free(j);
  t += bench_now() - t0;
  *ok = good && fin == NULL && out_rows == rows;
  fsh_batch_unref(fin);
  return t;
}

int main(int argc, char **argv) {
  int64_t rows = 16 << 20, groups = 1 << 20, build_rows = 1 << 20, batch_rows = 65536;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--groups")) groups = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--build-rows")) build_rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch-rows")) batch_rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
  }
  if (rows < 1 || groups < 1 || build_rows < 1 || batch_rows < 1 || runs < 1 || runs > 100)
    die("bad arguments", NULL);
  fsh_schema *gs = groupby_schema(), *ps = two_int64("k", "v"), *bs = two_int64("k", "payload");
  double gb_bytes = 0, build_bytes = 0, probe_bytes = 0;
  int ngb, nbb, npb;
  fsh_batch **gb = make_batches(gs, rows, batch_rows, gb_gen, groups, &ngb, &gb_bytes);
  fsh_batch **bb = make_batches(bs, build_rows, batch_rows, build_gen, build_rows, &nbb, &build_bytes);
  fsh_batch **pb = make_batches(ps, rows, batch_rows, probe_gen, build_rows, &npb, &probe_bytes);
  int64_t value_sum = 0;
  for (int64_t r = 0; r < rows; r++) value_sum += gb_gen(r, groups, true);
  uint64_t *h = malloc((size_t)batch_rows * 8);
  if (!h) die("out of memory", NULL);
  printf("bench_hashops: group-by %lld rows, ~%lld groups; join %lld x %lld rows; "
         "batches of %lld rows; %d runs\n",
         (long long)rows, (long long)groups, (long long)rows, (long long)build_rows,
         (long long)batch_rows, runs);
  double hs[100], gbs[100], gbs2[100], hj[100], js[100];
  /* the general-path shapes: (k, k), utf8, (int64, utf8), float64 */
  enum { NSHAPES = 4 };
  static const int32_t shape_keys[NSHAPES][2] = {{0, 0}, {2, 0}, {0, 2}, {3, 0}};
  static const int shape_n[NSHAPES] = {2, 1, 2, 1};
  static const char *shape_name[NSHAPES] = {"general path (keys k, k)", "utf8 key",
                                            "(int64, utf8) keys", "float64 key"};
  static const char *shape_tag[NSHAPES] = {"kk", "utf8", "int64_utf8", "float64"};
  double shs[NSHAPES][100], fast_cpu[100], shape_cpu[NSHAPES][100];
  bool verified = true;
  for (int r = 0; r < runs; r++) {
    bool ok1 = false, ok2 = false;
    int32_t k0 = 0;
    hs[r] = hash_run(gb, ngb, h);
    gbs[r] = groupby_run(gb, ngb, &k0, 1, rows, groups, value_sum, &fast_cpu[r], &ok1);
    for (int sh = 0; sh < NSHAPES; sh++) {
      bool oks = false;
      shs[sh][r] = groupby_run(gb, ngb, shape_keys[sh], shape_n[sh], rows, groups, value_sum,
                               &shape_cpu[sh][r], &oks);
      verified = verified && oks;
    }
    gbs2[r] = shs[0][r];
    hj[r] = hash_run(pb, npb, h) + hash_run(bb, nbb, h);
    js[r] = join_run(bb, nbb, pb, npb, rows, &ok2);
    verified = verified && ok1 && ok2;
  }
  double gsec[100], jsec[100], g2sec[100];
  memcpy(gsec, gbs, sizeof gsec);
  memcpy(g2sec, gbs2, sizeof g2sec);
  memcpy(jsec, js, sizeof jsec);
  bench_stats sh = bench_summarize(hs, runs, gb_bytes), sg = bench_summarize(gbs, runs, gb_bytes);
  bench_stats sg2 = bench_summarize(gbs2, runs, gb_bytes);
  bench_stats shj = bench_summarize(hj, runs, probe_bytes + build_bytes),
              sj = bench_summarize(js, runs, probe_bytes + build_bytes);
  printf("  %-34s %7s %7s %7s\n", "", "min", "median", "max");
  printf("  %-34s %7.2f %7.2f %7.2f GB/s\n", "hash keys (group-by input)", sh.min, sh.med, sh.max);
  bench_print("group-by sum+count(*)", sg, sh.med, "hash");
  bench_print("same, general path (keys k, k)", sg2, sh.med, "hash");
  double fast_mrows = 0, shape_mrows[NSHAPES];
  double fmin, fmax;
  {
    double t[100];
    memcpy(t, fast_cpu, sizeof t);
    qsort(t, (size_t)runs, sizeof(double), bench_cmp_double);
    fast_mrows = (double)rows / t[runs / 2] / 1e6;
    fmin = (double)rows / t[runs - 1] / 1e6;
    fmax = (double)rows / t[0] / 1e6;
  }
  printf("  group-by Mrows per CPU-second          min  median     max   vs int64 fast path\n");
  printf("  %-34s %7.1f %7.1f %7.1f\n", "int64 key (fast path)", fmin, fast_mrows, fmax);
  for (int sh = 0; sh < NSHAPES; sh++) {
    double t[100];
    memcpy(t, shape_cpu[sh], sizeof t);
    qsort(t, (size_t)runs, sizeof(double), bench_cmp_double);
    double mn = (double)rows / t[runs - 1] / 1e6, md = (double)rows / t[runs / 2] / 1e6,
           mx = (double)rows / t[0] / 1e6;
    shape_mrows[sh] = md;
    printf("  %-34s %7.1f %7.1f %7.1f   %5.2fx\n", shape_name[sh], mn, md, mx, md / fast_mrows);
  }
  printf("  %-34s %7.2f %7.2f %7.2f GB/s\n", "hash keys (join inputs)", shj.min, shj.med, shj.max);
  bench_print("inner join", sj, shj.med, "hash");
  qsort(gsec, (size_t)runs, sizeof(double), bench_cmp_double);
  qsort(jsec, (size_t)runs, sizeof(double), bench_cmp_double);
  qsort(g2sec, (size_t)runs, sizeof(double), bench_cmp_double);
  double g_rows = (double)rows / gsec[runs / 2], j_rows = (double)(rows + build_rows) / jsec[runs / 2];
  double g2_rows = (double)rows / g2sec[runs / 2];
  printf("  group-by %.1f Mrows/s (general path %.1f), join %.1f Mrows/s (median)\n",
         g_rows / 1e6, g2_rows / 1e6, j_rows / 1e6);
  printf("result: name=bench_hashops verified=%s groupby_mrows_s=%.2f groupby_gbps=%.3f "
         "groupby_vs_hash=%.3f groupby_general_mrows_s=%.2f join_mrows_s=%.2f join_gbps=%.3f "
         "join_vs_hash=%.3f",
         verified ? "yes" : "no", g_rows / 1e6, sg.med, sg.med / sh.med, g2_rows / 1e6,
         j_rows / 1e6, sj.med, sj.med / shj.med);
  printf(" groupby_fast_mrows_cpu_s=%.2f", fast_mrows);
  for (int sh = 0; sh < NSHAPES; sh++)
    printf(" groupby_%s_mrows_cpu_s=%.2f groupby_%s_vs_fast=%.3f", shape_tag[sh], shape_mrows[sh],
           shape_tag[sh], shape_mrows[sh] / fast_mrows);
  printf("\n");
  for (int i = 0; i < ngb; i++) fsh_batch_unref(gb[i]);
  for (int i = 0; i < nbb; i++) fsh_batch_unref(bb[i]);
  for (int i = 0; i < npb; i++) fsh_batch_unref(pb[i]);
  free(gb);
  free(bb);
  free(pb);
  free(h);
  fsh_schema_unref(gs);
  fsh_schema_unref(ps);
  fsh_schema_unref(bs);
  return verified ? 0 : 1;
}
