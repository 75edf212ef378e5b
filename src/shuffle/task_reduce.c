/* task_reduce.c -- the reduce task of the synthetic shuffle (contract and
 * wire formats in shuffle.h, "tasks"): read one partition, or a run of
 * partitions, of every map output through a backend's reader, consume
 * every batch, and answer rows, bytes and the order-independent row
 * checksum the map side also computed (per partition of a run). Also the
 * reduce-verify body and answer codecs. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/worker_internal.h" /* fsh_worker_task_cancelled */

#define REDUCE_TASK_MAGIC "FSRT"
#define REDUCE_TASK_HEADER_BYTES 40
#define REDUCE_SOURCE_BYTES 40
#define REDUCE_PART_BYTES 24
#define REDUCE_RESULT_MAGIC "FSRR"
#define REDUCE_RESULT_BYTES 48
#define REDUCE_RESULT_PART_BYTES 16
#define TASK_MAX_COUNT ((int64_t)1 << 24)
#define TASK_MAX_LOCATION 4096

static int64_t now_nanos(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void fsh_reduce_task_reset(fsh_reduce_task *t) {
  if (!t) return;
  for (int32_t i = 0; t->locations && i < t->n_locations; i++) fsh_free(t->locations[i]);
  fsh_free(t->locations);
  fsh_free(t->sources);
  fsh_free(t->parts);
  memset(t, 0, sizeof *t);
}

void fsh_reduce_task_result_reset(fsh_reduce_task_result *r) {
  if (!r) return;
  fsh_free(r->part_rows);
  fsh_free(r->part_checksums);
  memset(r, 0, sizeof *r);
}

/* Makes r's per-partition arrays for a run of count (> 1) partitions. */
static int result_arrays(fsh_reduce_task_result *r, int32_t count, fsh_error *err) {
  r->part_rows = fsh_calloc((size_t)count, sizeof *r->part_rows);
  r->part_checksums = fsh_calloc((size_t)count, sizeof *r->part_checksums);
  if (!r->part_rows || !r->part_checksums) {
    fsh_free(r->part_rows);
    fsh_free(r->part_checksums);
    r->part_rows = NULL;
    r->part_checksums = NULL;
    return fsh_error_set(err, ENOMEM, "reduce task: out of memory");
  }
  r->count = count;
  return 0;
}

int fsh_reduce_task_result_add(fsh_reduce_task_result *total, const fsh_reduce_task_result *r,
                               fsh_error *err) {
  if (r->count > 1) {
    if (total->count == 0) FSH_RETURN_NOT_OK(result_arrays(total, r->count, err));
    if (total->count != r->count)
      return fsh_error_set(err, EINVAL, "reduce task: adding a run of %d partitions to one of "
                           "%d", r->count, total->count);
    for (int32_t k = 0; k < r->count; k++) {
      total->part_rows[k] += r->part_rows[k];
      total->part_checksums[k] += r->part_checksums[k];
    }
  } else if (total->count > 1) {
    return fsh_error_set(err, EINVAL, "reduce task: adding one partition to a run of %d",
                         total->count);
  }
  total->rows += r->rows;
  total->bytes += r->bytes;
  total->checksum += r->checksum;
  total->batches += r->batches;
  return 0;
}

static int check_reduce_task(const fsh_reduce_task *t, fsh_error *err) {
  if (t->n_partitions < 1 || t->n_partitions > TASK_MAX_COUNT || t->partition < 0 ||
      t->partition >= t->n_partitions)
    return fsh_error_set(err, EINVAL, "partition %d of %d", t->partition, t->n_partitions);
  int32_t c = fsh_reduce_task_count(t);
  if (t->count < 0 || c > t->n_partitions - t->partition)
    return fsh_error_set(err, EINVAL, "a run of %d partitions from partition %d: past the "
                         "shuffle's %d partitions", t->count, t->partition, t->n_partitions);
  if (c > 1 && !t->sizes_unknown && t->n_sources > 0 && !t->parts)
    return fsh_error_set(err, EINVAL, "a run of %d partitions with sizes known but no "
                         "per-partition numbers of its map outputs", c);
  if ((unsigned)t->backend > FSH_TASK_BACKEND_FLIGHT)
    return fsh_error_set(err, EINVAL, "backend %d", (int)t->backend);
  if (t->n_sources < 0 || t->n_sources > TASK_MAX_COUNT || t->n_locations < 0 ||
      t->n_locations > TASK_MAX_COUNT)
    return fsh_error_set(err, EINVAL, "%" PRId64 " map outputs, %d locations", t->n_sources,
                         t->n_locations);
  for (int64_t i = 0; i < t->n_sources; i++) {
    const fsh_reduce_source *s = &t->sources[i];
    if (s->map_id < 0 || s->attempt < 0 || s->location < 0 || s->location >= t->n_locations ||
        s->rows < 0 || s->bytes < 0)
      return fsh_error_set(err, EINVAL, "map output %" PRId64 " (map %" PRId64 " attempt %d, "
                           "location %d of %d, %" PRId64 " rows, %" PRId64 " bytes) is malformed",
                           i, s->map_id, s->attempt, s->location, t->n_locations, s->rows,
                           s->bytes);
    for (int32_t k = 0; c > 1 && t->parts && k < c; k++) {
      const fsh_reduce_part *x = &t->parts[i * c + k];
      if (x->rows < 0 || x->bytes < 0)
        return fsh_error_set(err, EINVAL, "map output %" PRId64 " (map %" PRId64 "): partition "
                             "%d has %" PRId64 " rows, %" PRId64 " bytes", i, s->map_id,
                             t->partition + k, x->rows, x->bytes);
    }
  }
  return 0;
}

int fsh_reduce_task_map_outputs(const fsh_reduce_task *t, fsh_map_output **out,
                                fsh_error *err) {
  *out = NULL;
  FSH_RETURN_NOT_OK(check_reduce_task(t, err));
  int64_t n = t->n_sources, R = t->n_partitions, c = fsh_reduce_task_count(t);
  /* The readers only look at [partition, partition + c) of a map output's
   * per-partition arrays: source i's arrays start at element i x c of
   * arrays of n x c + R elements, so that its [partition + k] is element
   * i x c + partition + k (distinct per source, every index in bounds; the
   * other elements are not its). One block: the map outputs, then rows,
   * bytes and checksums. */
  int64_t len = n * c + R;
  size_t head = (size_t)(n > 0 ? n : 1) * sizeof(fsh_map_output);
  head = (head + 7) & ~(size_t)7;
  uint8_t *block = fsh_calloc(1, head + 3 * (size_t)len * 8);
  if (!block) return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_map_output *ms = (fsh_map_output *)block;
  int64_t *rows = (int64_t *)(block + head);
  int64_t *bytes = rows + len;
  uint64_t *sums = (uint64_t *)(bytes + len);
  for (int64_t i = 0; i < n; i++) {
    const fsh_reduce_source *s = &t->sources[i];
    int64_t at = i * c + t->partition;
    for (int64_t k = 0; k < c; k++) {
      const fsh_reduce_part *x = c > 1 && t->parts ? &t->parts[i * c + k] : NULL;
      rows[at + k] = x ? x->rows : s->rows;
      bytes[at + k] = x ? x->bytes : s->bytes;
      sums[at + k] = x ? x->checksum : s->checksum;
    }
    ms[i] = (fsh_map_output){.shuffle_id = t->shuffle_id, .map_id = s->map_id,
                             .attempt = s->attempt, .location = t->locations[s->location],
                             .n_partitions = (int32_t)R, .rows = rows + i * c,
                             .bytes = bytes + i * c, .checksums = sums + i * c};
    if (t->sizes_unknown) /* the readers then compare nothing with a record */
      ms[i].rows = ms[i].bytes = NULL, ms[i].checksums = NULL;
  }
  *out = ms;
  return 0;
}

/* Reads partitions [t->partition, t->partition + count) of the map
 * outputs ms (t's sources) through b and calls fn(ctx, k, batch) for every
 * batch (borrowed; k: its partition's index in the run) until fn fails.
 * The one place a reduce task opens readers: one range reader for the
 * whole run (each source opened once for it, where the backend offers
 * that; shuffle.h fsh_shuffle_open_range_reader), batches of different
 * partitions possibly interleaved. */
static int read_run(fsh_shuffle_backend *b, const fsh_reduce_task *t, const fsh_map_output *ms,
                    const fsh_shuffle_spec *spec,
                    int (*fn)(void *ctx, int32_t k, fsh_batch *x, fsh_error *err), void *ctx,
                    fsh_error *err) {
  int32_t c = fsh_reduce_task_count(t);
  fsh_range_stream st;
  int rc = fsh_shuffle_open_range_reader(b, spec, t->partition, c, ms, t->n_sources, &st, err);
  if (rc != 0) return rc;
  for (;;) {
    fsh_batch *x = NULL;
    int32_t p = -1;
    if (fsh_worker_task_cancelled()) { /* superseded: the worker was asked to stop it */
      rc = c > 1 ? fsh_error_set(err, ECANCELED, "reduce of partitions %d .. %d cancelled",
                                 t->partition, t->partition + c - 1)
                 : fsh_error_set(err, ECANCELED, "reduce of partition %d cancelled",
                                 t->partition);
      break;
    }
    if ((rc = st.get_next(&st, &p, &x, err)) != 0 || !x) break;
    if (p < t->partition || p >= t->partition + c)
      rc = fsh_error_set(err, EPROTO, "the reader yielded partition %d, outside the run %d .. %d",
                         p, t->partition, t->partition + c - 1);
    else if (x->n_columns != 3)
      rc = fsh_error_set(err, EINVAL, "partition %d: a batch of %" PRId64 " columns (the "
                         "synthetic schema has 3)", p, x->n_columns);
    else
      rc = fn(ctx, p - t->partition, x, err);
    fsh_batch_unref(x);
    if (rc != 0) break;
  }
  st.release(&st);
  return rc;
}

/* read_run with t's sources as map outputs and the synthetic schema. */
static int read_task(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                     int (*fn)(void *ctx, int32_t k, fsh_batch *x, fsh_error *err), void *ctx,
                     fsh_error *err) {
  fsh_map_output *ms = NULL;
  int rc = fsh_reduce_task_map_outputs(t, &ms, err);
  if (rc != 0) return rc;
  fsh_schema *schema = fsh_synthetic_schema();
  if (!schema) {
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  } else {
    fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = t->n_partitions,
                             .schema = schema};
    rc = read_run(b, t, ms, &spec, fn, ctx, err);
  }
  fsh_free(ms);
  fsh_schema_unref(schema);
  return rc;
}

typedef struct each_ctx {
  int (*fn)(void *ctx, fsh_batch *batch, fsh_error *err);
  void *ctx;
} each_ctx;

static int each_batch(void *ctx, int32_t k, fsh_batch *x, fsh_error *err) {
  (void)k;
  each_ctx *e = ctx;
  return e->fn(e->ctx, x, err);
}

int fsh_reduce_task_each(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                         int (*fn)(void *ctx, fsh_batch *batch, fsh_error *err), void *ctx,
                         fsh_error *err) {
  each_ctx e = {fn, ctx};
  return read_task(b, t, each_batch, &e, err);
}

static int consume(void *ctx, int32_t k, fsh_batch *x, fsh_error *err) {
  (void)err;
  fsh_reduce_task_result *r = ctx;
  uint64_t sum = 0;
  fsh_task_row_checksums(x, NULL, &sum);
  r->rows += x->length;
  r->bytes += fsh_shuffle_batch_bytes(x);
  r->batches++;
  r->checksum += sum;
  if (r->count > 1) {
    r->part_rows[k] += x->length;
    r->part_checksums[k] += sum;
  }
  return 0;
}

int fsh_reduce_task_run(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                        fsh_reduce_task_result *out, fsh_error *err) {
  int64_t t0 = now_nanos();
  fsh_reduce_task_result r = {0};
  int32_t c = fsh_reduce_task_count(t);
  int rc = c > 1 ? result_arrays(&r, c, err) : 0;
  if (rc == 0) rc = read_task(b, t, consume, &r, err);
  if (rc != 0) {
    fsh_reduce_task_result_reset(&r);
    if (c > 1)
      return fsh_error_prefix(err, rc, "reduce task of partitions %d .. %d of shuffle %" PRIu64
                              ": ", t->partition, t->partition + c - 1, t->shuffle_id);
    return fsh_error_prefix(err, rc, "reduce task of partition %d of shuffle %" PRIu64 ": ",
                            t->partition, t->shuffle_id);
  }
  r.nanos = now_nanos() - t0;
  *out = r;
  return 0;
}

/* ---- wire -------------------------------------------------------------- */

int fsh_reduce_task_encode(const fsh_reduce_task *t, fsh_buffer **out, fsh_error *err) {
  FSH_RETURN_NOT_OK(check_reduce_task(t, err));
  int32_t c = fsh_reduce_task_count(t);
  bool parts = c > 1 && !t->sizes_unknown;
  int64_t size = REDUCE_TASK_HEADER_BYTES + REDUCE_SOURCE_BYTES * t->n_sources;
  if (parts) size += REDUCE_PART_BYTES * t->n_sources * c;
  for (int32_t i = 0; i < t->n_locations; i++) {
    size_t len = strlen(t->locations[i]);
    if (len < 1 || len > TASK_MAX_LOCATION)
      return fsh_error_set(err, EINVAL, "reduce task: location %d is %zu bytes (1 .. %d)", i,
                           len, TASK_MAX_LOCATION);
    size += 4 + (int64_t)len;
  }
  fsh_buffer *b = fsh_buffer_new(size, true);
  if (!b) return fsh_error_set(err, ENOMEM, "reduce task: out of memory");
  uint8_t *p = b->data;
  memcpy(p, REDUCE_TASK_MAGIC, 4);
  p[4] = c > 1 ? 2 : 1;
  fsh_le_put64(p + 8, t->shuffle_id);
  fsh_le_put32(p + 16, (uint32_t)t->partition);
  fsh_le_put32(p + 20, (uint32_t)t->n_partitions);
  p[24] = (uint8_t)t->backend;
  p[25] = (uint8_t)((t->incremental ? 1 : 0) | (t->sizes_unknown ? 2 : 0));
  fsh_le_put32(p + 28, (uint32_t)t->n_locations);
  fsh_le_put32(p + 32, (uint32_t)t->n_sources);
  if (c > 1) fsh_le_put32(p + 36, (uint32_t)c);
  uint8_t *q = p + REDUCE_TASK_HEADER_BYTES;
  for (int64_t i = 0; i < t->n_sources; i++, q += REDUCE_SOURCE_BYTES) {
    const fsh_reduce_source *s = &t->sources[i];
    fsh_le_put64(q, (uint64_t)s->map_id);
    fsh_le_put32(q + 8, (uint32_t)s->attempt);
    fsh_le_put32(q + 12, (uint32_t)s->location);
    fsh_le_put64(q + 16, (uint64_t)s->rows);
    fsh_le_put64(q + 24, (uint64_t)s->bytes);
    fsh_le_put64(q + 32, s->checksum);
  }
  for (int64_t i = 0; parts && i < t->n_sources * c; i++, q += REDUCE_PART_BYTES) {
    fsh_le_put64(q, (uint64_t)t->parts[i].rows);
    fsh_le_put64(q + 8, (uint64_t)t->parts[i].bytes);
    fsh_le_put64(q + 16, t->parts[i].checksum);
  }
  for (int32_t i = 0; i < t->n_locations; i++) {
    uint32_t len = (uint32_t)strlen(t->locations[i]);
    fsh_le_put32(q, len);
    memcpy(q + 4, t->locations[i], len);
    q += 4 + len;
  }
  *out = b;
  return 0;
}

int fsh_reduce_task_decode(const uint8_t *p, int64_t size, fsh_reduce_task *out,
                           fsh_error *err) {
  if (size < REDUCE_TASK_HEADER_BYTES || memcmp(p, REDUCE_TASK_MAGIC, 4) != 0)
    return fsh_error_set(err, EINVAL, "reduce-verify: the body must start with "
                         REDUCE_TASK_MAGIC " and a %d-byte header (got %" PRId64 " bytes)",
                         REDUCE_TASK_HEADER_BYTES, size);
  uint32_t count = fsh_le_get32(p + 36);
  if ((p[4] != 1 && p[4] != 2) || p[5] || p[6] || p[7] || (p[25] & ~3) || p[26] || p[27] ||
      (p[4] == 1 && count))
    return fsh_error_set(err, EINVAL, "reduce-verify: version %u or reserved bytes not "
                         "supported (version 1 or 2, zeros)", p[4]);
  if (p[4] == 2 && (count < 2 || count > TASK_MAX_COUNT))
    return fsh_error_set(err, EINVAL, "reduce-verify: a run of %u partitions (version 2: 2 .. "
                         "%" PRId64 ")", count, TASK_MAX_COUNT);
  int64_t c = p[4] == 2 ? count : 1;
  bool parts = c > 1 && !(p[25] & 2);
  fsh_reduce_task t = {.shuffle_id = fsh_le_get64(p + 8),
                       .partition = (int32_t)fsh_le_get32(p + 16),
                       .n_partitions = (int32_t)fsh_le_get32(p + 20),
                       .count = c > 1 ? (int32_t)c : 0,
                       .backend = (fsh_task_backend)p[24], .incremental = p[25] & 1,
                       .sizes_unknown = (p[25] & 2) != 0};
  int64_t n_loc = fsh_le_get32(p + 28), n = fsh_le_get32(p + 32);
  /* n and c are at most 2^24: the products fit */
  int64_t n_parts = parts ? n * c : 0;
  if (n > TASK_MAX_COUNT || n_loc > TASK_MAX_COUNT ||
      size < REDUCE_TASK_HEADER_BYTES + REDUCE_SOURCE_BYTES * n + REDUCE_PART_BYTES * n_parts +
                 4 * n_loc)
    return fsh_error_set(err, EINVAL, "reduce-verify: %" PRId64 " map outputs (a run of %" PRId64
                         " partitions) and %" PRId64 " locations do not fit in %" PRId64 " bytes",
                         n, c, n_loc, size);
  t.sources = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *t.sources);
  t.locations = fsh_calloc(n_loc > 0 ? (size_t)n_loc : 1, sizeof *t.locations);
  if (parts) t.parts = fsh_calloc(n_parts > 0 ? (size_t)n_parts : 1, sizeof *t.parts);
  if (!t.sources || !t.locations || (parts && !t.parts)) {
    fsh_reduce_task_reset(&t);
    return fsh_error_set(err, ENOMEM, "reduce-verify: out of memory");
  }
  t.n_sources = n;
  const uint8_t *q = p + REDUCE_TASK_HEADER_BYTES;
  for (int64_t i = 0; i < n; i++, q += REDUCE_SOURCE_BYTES)
    t.sources[i] = (fsh_reduce_source){.map_id = (int64_t)fsh_le_get64(q),
                                       .attempt = (int32_t)fsh_le_get32(q + 8),
                                       .location = (int32_t)fsh_le_get32(q + 12),
                                       .rows = (int64_t)fsh_le_get64(q + 16),
                                       .bytes = (int64_t)fsh_le_get64(q + 24),
                                       .checksum = fsh_le_get64(q + 32)};
  for (int64_t i = 0; i < n_parts; i++, q += REDUCE_PART_BYTES)
    t.parts[i] = (fsh_reduce_part){.rows = (int64_t)fsh_le_get64(q),
                                   .bytes = (int64_t)fsh_le_get64(q + 8),
                                   .checksum = fsh_le_get64(q + 16)};
  const uint8_t *end = p + size;
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < n_loc; i++) {
    uint32_t len = end - q >= 4 ? fsh_le_get32(q) : 0;
    if (end - q < 4 || len < 1 || len > TASK_MAX_LOCATION || (int64_t)len > end - q - 4) {
      rc = fsh_error_set(err, EINVAL, "reduce-verify: location %" PRId64 " is malformed "
                         "(length %u, %td bytes left)", i, len, end - q);
      break;
    }
    if (memchr(q + 4, 0, len)) {
      rc = fsh_error_set(err, EINVAL, "reduce-verify: location %" PRId64 " holds a NUL byte", i);
      break;
    }
    if (!(t.locations[i] = fsh_malloc(len + 1))) {
      rc = fsh_error_set(err, ENOMEM, "reduce-verify: out of memory");
      break;
    }
    memcpy(t.locations[i], q + 4, len);
    t.locations[i][len] = '\0';
    t.n_locations = (int32_t)(i + 1);
    q += 4 + len;
  }
  if (rc == 0 && q != end)
    rc = fsh_error_set(err, EINVAL, "reduce-verify: %td bytes after the last location", end - q);
  if (rc == 0 && (rc = check_reduce_task(&t, err)) != 0)
    rc = fsh_error_prefix(err, rc, "reduce-verify: ");
  if (rc != 0) {
    fsh_reduce_task_reset(&t);
    return rc;
  }
  *out = t;
  return 0;
}

int fsh_reduce_task_result_encode(const fsh_reduce_task_result *r, fsh_buffer **out,
                                  fsh_error *err) {
  bool run = r->count > 1;
  int64_t size = REDUCE_RESULT_BYTES + (run ? 8 + REDUCE_RESULT_PART_BYTES * (int64_t)r->count : 0);
  fsh_buffer *b = fsh_buffer_new(size, true);
  if (!b) return fsh_error_set(err, ENOMEM, "reduce task answer: out of memory");
  uint8_t *p = b->data;
  memcpy(p, REDUCE_RESULT_MAGIC, 4);
  p[4] = run ? 2 : 1;
  fsh_le_put64(p + 8, (uint64_t)r->nanos);
  fsh_le_put64(p + 16, (uint64_t)r->rows);
  fsh_le_put64(p + 24, (uint64_t)r->bytes);
  fsh_le_put64(p + 32, r->checksum);
  fsh_le_put64(p + 40, (uint64_t)r->batches);
  if (run) {
    fsh_le_put32(p + 48, (uint32_t)r->count);
    uint8_t *q = p + REDUCE_RESULT_BYTES + 8;
    for (int32_t k = 0; k < r->count; k++, q += REDUCE_RESULT_PART_BYTES) {
      fsh_le_put64(q, (uint64_t)r->part_rows[k]);
      fsh_le_put64(q + 8, r->part_checksums[k]);
    }
  }
  *out = b;
  return 0;
}

int fsh_reduce_task_result_decode(const uint8_t *p, int64_t size, fsh_reduce_task_result *out,
                                  fsh_error *err) {
  if (size < REDUCE_RESULT_BYTES || memcmp(p, REDUCE_RESULT_MAGIC, 4) != 0 ||
      (p[4] != 1 && p[4] != 2) || (p[4] == 1 && size != REDUCE_RESULT_BYTES))
    return fsh_error_set(err, EINVAL, "not a reduce task answer (%" PRId64 " bytes)", size);
  fsh_reduce_task_result r = {.nanos = (int64_t)fsh_le_get64(p + 8),
                              .rows = (int64_t)fsh_le_get64(p + 16),
                              .bytes = (int64_t)fsh_le_get64(p + 24),
                              .checksum = fsh_le_get64(p + 32),
                              .batches = (int64_t)fsh_le_get64(p + 40)};
  if (p[4] == 2) {
    uint32_t c = size >= REDUCE_RESULT_BYTES + 8 ? fsh_le_get32(p + 48) : 0;
    if (c < 2 || c > TASK_MAX_COUNT || fsh_le_get32(p + 52) ||
        size != REDUCE_RESULT_BYTES + 8 + REDUCE_RESULT_PART_BYTES * (int64_t)c)
      return fsh_error_set(err, EINVAL, "reduce task answer of a run: %u partitions (2 .. %"
                           PRId64 ") in %" PRId64 " bytes", c, TASK_MAX_COUNT, size);
    FSH_RETURN_NOT_OK(result_arrays(&r, (int32_t)c, err));
    const uint8_t *q = p + REDUCE_RESULT_BYTES + 8;
    for (uint32_t k = 0; k < c; k++, q += REDUCE_RESULT_PART_BYTES) {
      r.part_rows[k] = (int64_t)fsh_le_get64(q);
      r.part_checksums[k] = fsh_le_get64(q + 8);
    }
  }
  *out = r;
  return 0;
}
