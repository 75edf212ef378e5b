/* shuffle_testutil.h -- header-only helpers for the shuffle tests: temp
 * directories, the list of backends every conformance case runs against,
 * map-task plans (which batch goes to which partition), and the check that
 * a reader returns exactly the rows written to a partition, in order.
 *
 * Helpers abort on allocation failure of test data (never of code under
 * test): build data before arming fsh_alloc_fail_after. */
#ifndef FSH_SHUFFLE_TESTUTIL_H
#define FSH_SHUFFLE_TESTUTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/workloads.h>

#include "test.h"

static inline void *stu_ok_(void *p, const char *what) {
  if (!p) {
    fprintf(stderr, "test data: %s failed\n", what);
    abort();
  }
  return p;
}
#define STU_OK(expr) stu_ok_((expr), #expr)

/* ---- directories ------------------------------------------------------- */

/* A new empty directory under /tmp (mkdtemp); free with stu_rmdir. */
static inline char *stu_mkdtemp(const char *tag) {
  char tmpl[256];
  snprintf(tmpl, sizeof tmpl, "/tmp/fsh-shuffle-%s-XXXXXX", tag);
  char *d = STU_OK(mkdtemp(tmpl));
  return STU_OK(strdup(d));
}

/* Removes dir and the files in it (the backends' directories are flat),
 * then frees the string. */
static inline void stu_rmdir(char *dir) {
  if (!dir) return;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(dir);
  free(dir);
}

/* Number of entries in dir (. and .. excluded). */
static inline int stu_count_files(const char *dir) { return fsh_test_dir_entries(dir); }

/* ---- backends ---------------------------------------------------------- */

/* A backend under test: `make` builds a fresh instance (dir is a fresh
 * temp directory the backend may use). The flight backend plugs in here
 * with one more line. */
typedef struct stu_backend {
  const char *name;
  int (*make)(const char *dir, fsh_shuffle_backend **out, fsh_error *err);
} stu_backend;

static inline int stu_make_memory(const char *dir, fsh_shuffle_backend **out, fsh_error *err) {
  (void)dir;
  return fsh_shuffle_memory_new(out, err);
}
static inline int stu_make_fs(const char *dir, fsh_shuffle_backend **out, fsh_error *err) {
  return fsh_shuffle_fs_new(dir, out, err);
}

/* The flight backend as a cluster in this process: three workers on
 * 127.0.0.1 (port 0) spilling into dir -- worker 0 keeps everything in
 * memory, worker 1 spills everything, worker 2 spills past 64 KiB -- with
 * one flight backend per worker (its local store) and one reader-only
 * backend that knows them all as peers. Map task m writes on worker
 * m mod 3; partition q is read by backend q mod 4 (so some sources are
 * read in-process, the rest over Flight, and every source of partitions
 * 3, 7, ... over Flight); release goes through the reader-only backend
 * (DoAction "release" to every worker). */
#define STU_FLIGHT_WORKERS 3
typedef struct stu_flight {
  fsh_shuffle_worker *workers[STU_FLIGHT_WORKERS];
  fsh_shuffle_backend *backends[STU_FLIGHT_WORKERS + 1];
} stu_flight;

static inline int stu_flight_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                         int64_t map_id, int32_t attempt,
                                         fsh_shuffle_writer **out, fsh_error *err) {
  stu_flight *f = b->state;
  fsh_shuffle_backend *inner = f->backends[map_id % STU_FLIGHT_WORKERS];
  return inner->ops->open_writer(inner, spec, map_id, attempt, out, err);
}
static inline int stu_flight_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                         int32_t partition, const fsh_map_output *sources,
                                         int64_t n, fsh_batch_stream *out, fsh_error *err) {
  stu_flight *f = b->state;
  fsh_shuffle_backend *inner = f->backends[partition % (STU_FLIGHT_WORKERS + 1)];
  return inner->ops->open_reader(inner, spec, partition, sources, n, out, err);
}
static inline int stu_flight_release(fsh_shuffle_backend *b, uint64_t id, fsh_error *err) {
  stu_flight *f = b->state;
  fsh_shuffle_backend *inner = f->backends[STU_FLIGHT_WORKERS];
  return inner->ops->release(inner, id, err);
}
static inline void stu_flight_destroy(fsh_shuffle_backend *b) {
  stu_flight *f = b->state;
  for (int i = 0; i <= STU_FLIGHT_WORKERS; i++) fsh_shuffle_backend_destroy(f->backends[i]);
  for (int i = 0; i < STU_FLIGHT_WORKERS; i++) fsh_shuffle_worker_stop(f->workers[i], 1000);
  free(f);
  free(b);
}
/* A run of partitions is read by the backend of its first partition. */
static inline int stu_flight_open_range_reader(fsh_shuffle_backend *b,
                                               const fsh_shuffle_spec *spec, int32_t first,
                                               int32_t count, const fsh_map_output *sources,
                                               int64_t n, fsh_range_stream *out,
                                               fsh_error *err) {
  stu_flight *f = b->state;
  fsh_shuffle_backend *inner = f->backends[first % (STU_FLIGHT_WORKERS + 1)];
  return fsh_shuffle_open_range_reader(inner, spec, first, count, sources, n, out, err);
}
static const fsh_shuffle_backend_ops stu_flight_ops = {
    "flight", stu_flight_open_writer, stu_flight_open_reader, stu_flight_release,
    stu_flight_destroy, stu_flight_open_range_reader};

/* no_direct: every source of another worker through DoGet, although all
 * the workers run on this host (else the same-host ones are read
 * directly: spill files and memory images). */
static inline int stu_make_flight_opts(const char *dir, bool no_direct, fsh_shuffle_backend **out,
                                       fsh_error *err) {
  stu_flight *f = STU_OK(calloc(1, sizeof *f));
  fsh_shuffle_backend *b = STU_OK(calloc(1, sizeof *b));
  b->ops = &stu_flight_ops;
  b->state = f;
  const int64_t limits[STU_FLIGHT_WORKERS] = {(int64_t)1 << 30, 0, 64 << 10};
  const char *uris[STU_FLIGHT_WORKERS];
  int rc = 0;
  for (int i = 0; rc == 0 && i < STU_FLIGHT_WORKERS; i++) {
    fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .spill_dirs = &dir,
                                    .n_spill_dirs = 1, .memory_limit = limits[i],
                                    .n_threads = 2};
    rc = fsh_shuffle_worker_start(&o, &f->workers[i], err);
    if (rc == 0) uris[i] = fsh_shuffle_worker_uri(f->workers[i]);
  }
  for (int i = 0; rc == 0 && i <= STU_FLIGHT_WORKERS; i++) {
    fsh_shuffle_flight_options o = {
        .local = i < STU_FLIGHT_WORKERS ? f->workers[i] : NULL,
        .peers = uris, .n_peers = STU_FLIGHT_WORKERS,
        .max_parallel_fetches = 2, .max_bytes_in_flight = 256 << 10, .timeout_ms = 60000,
        .no_direct_reads = no_direct, .direct_min_bytes = -1};
    rc = fsh_shuffle_flight_new(&o, &f->backends[i], err);
  }
  if (rc != 0) {
    stu_flight_destroy(b);
    return rc;
  }
  *out = b;
  return 0;
}

static inline int stu_make_flight(const char *dir, fsh_shuffle_backend **out, fsh_error *err) {
  return stu_make_flight_opts(dir, false, out, err);
}
static inline int stu_make_flight_doget(const char *dir, fsh_shuffle_backend **out,
                                        fsh_error *err) {
  return stu_make_flight_opts(dir, true, out, err);
}

/* "flight": same-host direct reads on (the default); "flight-doget": off. */
static const stu_backend stu_backends[] = {
    {"memory", stu_make_memory},
    {"fs", stu_make_fs},
    {"flight", stu_make_flight},
    {"flight-doget", stu_make_flight_doget},
};
#define STU_N_BACKENDS ((int)(sizeof stu_backends / sizeof stu_backends[0]))

/* ---- plans ------------------------------------------------------------- */

typedef struct stu_op {
  int32_t partition;
  fsh_batch *batch; /* reference */
} stu_op;

typedef struct stu_map {
  int64_t map_id;
  int32_t attempt;
  stu_op *ops;
  int64_t n_ops, cap;
  fsh_map_output out; /* filled by stu_run_map */
} stu_map;

typedef struct stu_plan {
  fsh_shuffle_spec spec;
  stu_map *maps;
  int n_maps;
} stu_plan;

static inline void stu_plan_init(stu_plan *p, uint64_t shuffle_id, int32_t n_partitions,
                                 fsh_schema *schema, int n_maps) {
  memset(p, 0, sizeof *p);
  p->spec.shuffle_id = shuffle_id;
  p->spec.n_partitions = n_partitions;
  p->spec.schema = fsh_schema_ref(schema);
  p->n_maps = n_maps;
  p->maps = STU_OK(calloc((size_t)n_maps, sizeof *p->maps));
  for (int i = 0; i < n_maps; i++) p->maps[i].map_id = i;
}

static inline void stu_plan_free(stu_plan *p) {
  for (int i = 0; i < p->n_maps; i++) {
    for (int64_t k = 0; k < p->maps[i].n_ops; k++) fsh_batch_unref(p->maps[i].ops[k].batch);
    free(p->maps[i].ops);
    fsh_map_output_reset(&p->maps[i].out);
  }
  free(p->maps);
  fsh_schema_unref(p->spec.schema);
  memset(p, 0, sizeof *p);
}

/* Adds a write of `b` (reference taken) to `partition`. */
static inline void stu_add(stu_map *m, int32_t partition, fsh_batch *b) {
  if (m->n_ops == m->cap) {
    m->cap = m->cap ? m->cap * 2 : 16;
    m->ops = STU_OK(realloc(m->ops, sizeof *m->ops * (size_t)m->cap));
  }
  m->ops[m->n_ops++] = (stu_op){partition, fsh_batch_ref(b)};
}

static inline uint64_t stu_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* Splits b into slices of `chunk` rows; slice k goes to partition
 * (base + k) mod N when modulo, else to a hash of (salt, k) mod N. With
 * chunk 1 and modulo, row i goes to partition (base + i) mod N. */
static inline void stu_add_split(stu_map *m, fsh_batch *b, int32_t n_parts, int64_t chunk,
                                 bool modulo, uint64_t salt) {
  for (int64_t off = 0, k = 0; off < b->length; off += chunk, k++) {
    int64_t len = b->length - off < chunk ? b->length - off : chunk;
    fsh_batch *s = STU_OK(fsh_batch_slice(b, off, len));
    int32_t p = modulo ? (int32_t)(((uint64_t)salt + (uint64_t)k) % (uint64_t)n_parts)
                       : (int32_t)(stu_mix(salt * 1000003u + (uint64_t)k) % (uint64_t)n_parts);
    stu_add(m, p, s);
    fsh_batch_unref(s);
  }
}

/* A synthetic batch (key, value, name) of `rows` rows. */
static inline fsh_batch *stu_synthetic(int64_t index, int64_t rows) {
  static fsh_schema *schema;
  if (!schema) schema = STU_OK(fsh_synthetic_schema()); /* lives for the process */
  fsh_synthetic_options o = {.seed = 42, .with_nulls = true};
  fsh_batch *b = NULL;
  fsh_error err;
  if (fsh_synthetic_batch(schema, &o, index, rows, &b, &err) != 0) {
    fprintf(stderr, "synthetic batch: %s\n", err.message);
    abort();
  }
  return b;
}

/* Runs map task m through the backend: open, every write, close. Returns
 * the first error (the writer is aborted then). */
static inline int stu_run_map(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, stu_map *m,
                              fsh_error *err) {
  fsh_shuffle_writer *w = NULL;
  int rc = fsh_shuffle_open_writer(b, spec, m->map_id, m->attempt, &w, err);
  if (rc != 0) return rc;
  for (int64_t i = 0; i < m->n_ops; i++) {
    rc = w->write(w, m->ops[i].partition, m->ops[i].batch, err);
    if (rc != 0) {
      w->abort(w);
      return rc;
    }
  }
  fsh_map_output_reset(&m->out);
  return w->close(w, &m->out, err);
}

/* Checks a closed map output's metadata against its plan. */
static inline void stu_check_meta(const stu_plan *p, const stu_map *m, const char *backend) {
  const fsh_map_output *o = &m->out;
  CHECK_MSG(o->shuffle_id == p->spec.shuffle_id && o->map_id == m->map_id &&
                o->attempt == m->attempt && o->n_partitions == p->spec.n_partitions &&
                o->location && o->rows && o->bytes && o->checksums,
            "%s: map %lld: ids/arrays", backend, (long long)m->map_id);
  if (!o->rows) return;
  int bad = 0;
  for (int32_t q = 0; q < p->spec.n_partitions; q++) {
    int64_t rows = 0;
    for (int64_t i = 0; i < m->n_ops; i++)
      if (m->ops[i].partition == q) rows += m->ops[i].batch->length;
    if (o->rows[q] != rows || (rows > 0 && o->bytes[q] <= 0) || o->bytes[q] < 0) bad++;
  }
  CHECK_MSG(bad == 0, "%s: map %lld: %d partitions with wrong rows/bytes", backend,
            (long long)m->map_id, bad);
}

/* Drains a stream into a growing array (references). Returns the error. */
static inline int stu_drain(fsh_batch_stream *s, fsh_batch ***out, int64_t *n, fsh_error *err) {
  *out = NULL;
  *n = 0;
  int64_t cap = 0;
  for (;;) {
    fsh_batch *b = NULL;
    int rc = s->get_next(s, &b, err);
    if (rc != 0) return rc;
    if (!b) return 0;
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      *out = STU_OK(realloc(*out, sizeof **out * (size_t)cap));
    }
    (*out)[(*n)++] = b;
  }
}

static inline void stu_free_batches(fsh_batch **bs, int64_t n) {
  for (int64_t i = 0; i < n; i++) fsh_batch_unref(bs[i]);
  free(bs);
}

/* Whether the rows of got[] equal the rows of want[] in order, however
 * either side is cut into batches. On a difference writes it to diff. */
static inline bool stu_rows_equal(fsh_batch *const *got, int64_t n_got, fsh_batch *const *want,
                                  int64_t n_want, char *diff, size_t diff_size) {
  int64_t gi = 0, go = 0, wi = 0, wo = 0, row = 0;
  for (;;) {
    while (gi < n_got && go == got[gi]->length) gi++, go = 0;
    while (wi < n_want && wo == want[wi]->length) wi++, wo = 0;
    if (gi == n_got || wi == n_want) {
      if (gi == n_got && wi == n_want) return true;
      snprintf(diff, diff_size, "row %lld: %s has more rows", (long long)row,
               gi == n_got ? "expected" : "read");
      return false;
    }
    int64_t len = got[gi]->length - go;
    if (want[wi]->length - wo < len) len = want[wi]->length - wo;
    fsh_batch *a = STU_OK(fsh_batch_slice(got[gi], go, len));
    fsh_batch *b = STU_OK(fsh_batch_slice(want[wi], wo, len));
    fsh_error d = {{0}};
    bool eq = fsh_batch_equals(a, b, &d);
    fsh_batch_unref(a);
    fsh_batch_unref(b);
    if (!eq) {
      snprintf(diff, diff_size, "rows %lld..%lld differ: %s", (long long)row,
               (long long)(row + len), d.message);
      return false;
    }
    go += len;
    wo += len;
    row += len;
  }
}

/* Reads partition q from the map outputs maps[idx[0..n)] (all maps in
 * order when idx is NULL) and checks it holds exactly the rows the plan
 * wrote there, source by source, in write order. Returns false (and
 * reports) on any difference or error. */
static inline bool stu_check_partition(fsh_shuffle_backend *b, const stu_plan *p, int32_t q,
                                       const int *idx, int n, const char *backend) {
  if (!idx) n = p->n_maps;
  fsh_map_output *src = STU_OK(calloc((size_t)(n ? n : 1), sizeof *src));
  fsh_batch **want = NULL;
  int64_t n_want = 0, cap = 0;
  for (int i = 0; i < n; i++) {
    const stu_map *m = &p->maps[idx ? idx[i] : i];
    src[i] = m->out; /* shallow: the plan keeps ownership */
    for (int64_t k = 0; k < m->n_ops; k++) {
      if (m->ops[k].partition != q) continue;
      if (n_want == cap) {
        cap = cap ? cap * 2 : 16;
        want = STU_OK(realloc(want, sizeof *want * (size_t)cap));
      }
      want[n_want++] = m->ops[k].batch;
    }
  }
  fsh_error err = {{0}};
  fsh_batch_stream s = {0};
  fsh_batch **got = NULL;
  int64_t n_got = 0;
  bool ok = true;
  int rc = fsh_shuffle_open_reader(b, &p->spec, q, src, n, &s, &err);
  if (rc == 0) {
    rc = stu_drain(&s, &got, &n_got, &err);
    s.release(&s);
  }
  if (rc != 0) {
    fprintf(stderr, "%s: partition %d: read failed (%d): %s\n", backend, q, rc, err.message);
    ok = false;
  } else {
    char diff[1200];
    if (!stu_rows_equal(got, n_got, want, n_want, diff, sizeof diff)) {
      fprintf(stderr, "%s: partition %d: %s\n", backend, q, diff);
      ok = false;
    }
  }
  CHECK(ok);
  stu_free_batches(got, n_got);
  free(want);
  free(src);
  return ok;
}

/* Runs every map task, checks metadata, then every partition over all
 * map outputs. */
static inline void stu_run_and_check(fsh_shuffle_backend *b, stu_plan *p, const char *backend) {
  fsh_error err = {{0}};
  for (int i = 0; i < p->n_maps; i++) {
    CHECK_OK(stu_run_map(b, &p->spec, &p->maps[i], &err));
    stu_check_meta(p, &p->maps[i], backend);
  }
  int bad = 0;
  for (int32_t q = 0; q < p->spec.n_partitions && bad < 5; q++)
    bad += !stu_check_partition(b, p, q, NULL, 0, backend);
}

/* ---- range reads ------------------------------------------------------- */

/* Drains a range stream: batches (references) and their partitions in the
 * order read. Returns the error. */
static inline int stu_drain_range(fsh_range_stream *s, fsh_batch ***out, int32_t **parts,
                                  int64_t *n, fsh_error *err) {
  *out = NULL;
  *parts = NULL;
  *n = 0;
  int64_t cap = 0;
  for (;;) {
    fsh_batch *b = NULL;
    int32_t q = -2;
    int rc = s->get_next(s, &q, &b, err);
    if (rc != 0) return rc;
    if (!b) return 0;
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      *out = STU_OK(realloc(*out, sizeof **out * (size_t)cap));
      *parts = STU_OK(realloc(*parts, sizeof **parts * (size_t)cap));
    }
    (*out)[*n] = b;
    (*parts)[(*n)++] = q;
  }
}

/* Opens a range reader and drains it: the error code of either step;
 * *rows the rows read. */
static inline int stu_read_range_rc(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                    int32_t first, int32_t count, const fsh_map_output *src,
                                    int64_t n, int64_t *rows, fsh_error *err) {
  fsh_range_stream s = {0};
  int rc = fsh_shuffle_open_range_reader(b, spec, first, count, src, n, &s, err);
  if (rc != 0) return rc;
  fsh_batch **got = NULL;
  int32_t *parts = NULL;
  int64_t n_got = 0;
  rc = stu_drain_range(&s, &got, &parts, &n_got, err);
  s.release(&s);
  if (rows) {
    *rows = 0;
    for (int64_t i = 0; i < n_got; i++) *rows += got[i]->length;
  }
  stu_free_batches(got, n_got);
  free(parts);
  return rc;
}

/* An order-independent digest of a set of rows: count, and the sums of two
 * mixes of each row's hash over all its columns (fsh_hash_columns). */
typedef struct stu_digest {
  int64_t rows;
  uint64_t sum1, sum2;
} stu_digest;

static inline void stu_digest_add(stu_digest *d, const fsh_batch *b) {
  if (b->length == 0) return;
  int32_t *cols = STU_OK(calloc((size_t)b->n_columns, sizeof *cols));
  for (int32_t i = 0; i < (int32_t)b->n_columns; i++) cols[i] = i;
  uint64_t *h = STU_OK(calloc((size_t)b->length, sizeof *h));
  fsh_error err = {{0}};
  int rc = fsh_hash_columns(b, cols, (int)b->n_columns, 7, h, &err);
  CHECK_MSG(rc == 0, "hash of rows: %s", err.message);
  for (int64_t i = 0; i < b->length; i++) {
    d->sum1 += stu_mix(h[i]);
    d->sum2 += stu_mix(h[i] ^ 0x5bd1e995u) * (h[i] | 1);
  }
  d->rows += b->length;
  free(h);
  free(cols);
}

/* Reads partitions [first, first + count) of maps[idx[0..n)] (all maps when
 * idx is NULL) with one range reader and checks:
 *  - every batch is tagged with a partition of the run;
 *  - per partition, the same multiset of rows as open_reader of that
 *    partition over the same sources (row digests);
 *  - source by source (each source alone through a range reader):
 *    partitions in increasing order, and each partition's rows exactly the
 *    rows the plan wrote there, in write order.
 * Returns false (and reports) on any difference or error. */
static inline bool stu_check_range(fsh_shuffle_backend *b, const stu_plan *p, int32_t first,
                                   int32_t count, const int *idx, int n, const char *backend) {
  if (!idx) n = p->n_maps;
  fsh_map_output *src = STU_OK(calloc((size_t)(n ? n : 1), sizeof *src));
  for (int i = 0; i < n; i++) src[i] = p->maps[idx ? idx[i] : i].out; /* shallow */
  stu_digest *got = STU_OK(calloc((size_t)count, sizeof *got));
  stu_digest *want = STU_OK(calloc((size_t)count, sizeof *want));
  fsh_error err = {{0}};
  bool ok = true;
  /* all sources through one range reader */
  fsh_range_stream s = {0};
  fsh_batch **bs = NULL;
  int32_t *parts = NULL;
  int64_t nb = 0;
  int rc = fsh_shuffle_open_range_reader(b, &p->spec, first, count, src, n, &s, &err);
  if (rc == 0) {
    ok = s.schema && fsh_schema_equals(s.schema, p->spec.schema, false, NULL);
    if (!ok) fprintf(stderr, "%s: range [%d, +%d): wrong stream schema\n", backend, first, count);
    rc = stu_drain_range(&s, &bs, &parts, &nb, &err);
    s.release(&s);
  }
  if (rc != 0) {
    fprintf(stderr, "%s: range [%d, +%d): read failed (%d): %s\n", backend, first, count, rc,
            err.message);
    ok = false;
  }
  for (int64_t i = 0; i < nb; i++) {
    if (parts[i] < first || parts[i] >= first + count) {
      fprintf(stderr, "%s: range [%d, +%d): batch %lld tagged partition %d\n", backend, first,
              count, (long long)i, parts[i]);
      ok = false;
    } else {
      stu_digest_add(&got[parts[i] - first], bs[i]);
    }
  }
  stu_free_batches(bs, nb);
  free(parts);
  /* the reference: one open_reader per partition */
  for (int32_t q = first; rc == 0 && q < first + count; q++) {
    fsh_batch_stream one = {0};
    fsh_batch **ob = NULL;
    int64_t no = 0;
    int orc = fsh_shuffle_open_reader(b, &p->spec, q, src, n, &one, &err);
    if (orc == 0) {
      orc = stu_drain(&one, &ob, &no, &err);
      one.release(&one);
    }
    CHECK_MSG(orc == 0, "%s: open_reader %d: %s", backend, q, err.message);
    for (int64_t i = 0; i < no; i++) stu_digest_add(&want[q - first], ob[i]);
    stu_free_batches(ob, no);
    const stu_digest *g = &got[q - first], *w = &want[q - first];
    if (g->rows != w->rows || g->sum1 != w->sum1 || g->sum2 != w->sum2) {
      fprintf(stderr, "%s: range [%d, +%d): partition %d: %lld rows read, %lld by open_reader "
              "(or the rows differ)\n", backend, first, count, q, (long long)g->rows,
              (long long)w->rows);
      ok = false;
    }
  }
  /* each source alone: exact rows and order */
  for (int i = 0; ok && i < n; i++) {
    const stu_map *m = &p->maps[idx ? idx[i] : i];
    fsh_range_stream one = {0};
    rc = fsh_shuffle_open_range_reader(b, &p->spec, first, count, &m->out, 1, &one, &err);
    if (rc == 0) {
      rc = stu_drain_range(&one, &bs, &parts, &nb, &err);
      one.release(&one);
    }
    if (rc != 0) {
      fprintf(stderr, "%s: range [%d, +%d) of map %lld: read failed (%d): %s\n", backend, first,
              count, (long long)m->map_id, rc, err.message);
      ok = false;
      break;
    }
    for (int64_t k = 1; k < nb; k++)
      if (parts[k] < parts[k - 1]) {
        fprintf(stderr, "%s: range of map %lld: partition %d after %d\n", backend,
                (long long)m->map_id, parts[k], parts[k - 1]);
        ok = false;
        break;
      }
    int64_t at = 0;
    for (int32_t q = first; ok && q < first + count; q++) {
      int64_t from = at;
      while (at < nb && parts[at] == q) at++;
      fsh_batch **wb = NULL;
      int64_t nw = 0;
      for (int64_t k = 0; k < m->n_ops; k++)
        if (m->ops[k].partition == q) {
          wb = STU_OK(realloc(wb, sizeof *wb * (size_t)(nw + 1)));
          wb[nw++] = m->ops[k].batch;
        }
      char diff[1200];
      if (!stu_rows_equal(bs + from, at - from, wb, nw, diff, sizeof diff)) {
        fprintf(stderr, "%s: range of map %lld: partition %d: %s\n", backend,
                (long long)m->map_id, q, diff);
        ok = false;
      }
      free(wb);
    }
    if (ok && at != nb) {
      fprintf(stderr, "%s: range of map %lld: batches out of the run\n", backend,
              (long long)m->map_id);
      ok = false;
    }
    stu_free_batches(bs, nb);
    free(parts);
  }
  CHECK(ok);
  free(got);
  free(want);
  free(src);
  return ok;
}

/* Opens a reader and drains it: the error code of either step (0 if all
 * went well). */
static inline int stu_read_rc(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t q,
                              const fsh_map_output *src, int64_t n, int64_t *rows,
                              fsh_error *err) {
  fsh_batch_stream s = {0};
  int rc = fsh_shuffle_open_reader(b, spec, q, src, n, &s, err);
  if (rc != 0) return rc;
  fsh_batch **got = NULL;
  int64_t n_got = 0;
  rc = stu_drain(&s, &got, &n_got, err);
  s.release(&s);
  if (rows) {
    *rows = 0;
    for (int64_t i = 0; i < n_got; i++) *rows += got[i]->length;
  }
  stu_free_batches(got, n_got);
  return rc;
}

#endif
