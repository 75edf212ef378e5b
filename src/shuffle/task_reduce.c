/* task_reduce.c -- the reduce task of the synthetic shuffle (contract and
 * wire formats in shuffle.h, "tasks"): read one partition of every map
 * output through a backend's reader, consume every batch, and answer
 * rows, bytes and the order-independent row checksum the map side also
 * computed. Also the reduce-verify body and answer codecs. */
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
#define REDUCE_RESULT_MAGIC "FSRR"
#define REDUCE_RESULT_BYTES 48
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
  memset(t, 0, sizeof *t);
}

static int check_reduce_task(const fsh_reduce_task *t, fsh_error *err) {
  if (t->n_partitions < 1 || t->n_partitions > TASK_MAX_COUNT || t->partition < 0 ||
      t->partition >= t->n_partitions)
    return fsh_error_set(err, EINVAL, "partition %d of %d", t->partition, t->n_partitions);
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
  }
  return 0;
}

int fsh_reduce_task_map_outputs(const fsh_reduce_task *t, fsh_map_output **out,
                                fsh_error *err) {
  *out = NULL;
  FSH_RETURN_NOT_OK(check_reduce_task(t, err));
  int64_t n = t->n_sources, R = t->n_partitions;
  /* The readers only look at [partition] of a map output's per-partition
   * arrays: source i's arrays start at element i of arrays of n + R
   * elements, so that its [partition] is element i + partition (distinct
   * per source, every index in bounds; the other elements are not its).
   * One block: the map outputs, then rows, bytes and checksums. */
  size_t head = (size_t)(n > 0 ? n : 1) * sizeof(fsh_map_output);
  head = (head + 7) & ~(size_t)7;
  uint8_t *block = fsh_calloc(1, head + 3 * (size_t)(n + R) * 8);
  if (!block) return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_map_output *ms = (fsh_map_output *)block;
  int64_t *rows = (int64_t *)(block + head);
  int64_t *bytes = rows + (n + R);
  uint64_t *sums = (uint64_t *)(bytes + (n + R));
  for (int64_t i = 0; i < n; i++) {
    const fsh_reduce_source *s = &t->sources[i];
    rows[i + t->partition] = s->rows;
    bytes[i + t->partition] = s->bytes;
    sums[i + t->partition] = s->checksum;
    ms[i] = (fsh_map_output){.shuffle_id = t->shuffle_id, .map_id = s->map_id,
                             .attempt = s->attempt, .location = t->locations[s->location],
                             .n_partitions = (int32_t)R, .rows = rows + i, .bytes = bytes + i,
                             .checksums = sums + i};
    if (t->sizes_unknown) /* the readers then compare nothing with a record */
      ms[i].rows = ms[i].bytes = NULL, ms[i].checksums = NULL;
  }
  *out = ms;
  return 0;
}

int fsh_reduce_task_each(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                         int (*fn)(void *ctx, fsh_batch *batch, fsh_error *err), void *ctx,
                         fsh_error *err) {
  fsh_map_output *ms = NULL;
  int rc = fsh_reduce_task_map_outputs(t, &ms, err);
  if (rc != 0) return rc;
  fsh_schema *schema = fsh_synthetic_schema();
  if (!schema) {
    rc = fsh_error_set(err, ENOMEM, "out of memory");
    goto done;
  }
  fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = t->n_partitions,
                           .schema = schema};
  fsh_batch_stream st;
  rc = fsh_shuffle_open_reader(b, &spec, t->partition, ms, t->n_sources, &st, err);
  if (rc != 0) goto done;
  for (;;) {
    fsh_batch *x = NULL;
    if (fsh_worker_task_cancelled()) { /* superseded: the worker was asked to stop it */
      rc = fsh_error_set(err, ECANCELED, "reduce of partition %d cancelled", t->partition);
      break;
    }
    if ((rc = st.get_next(&st, &x, err)) != 0 || !x) break;
    if (x->n_columns != 3)
      rc = fsh_error_set(err, EINVAL, "a batch of %" PRId64 " columns (the synthetic schema "
                         "has 3)", x->n_columns);
    else
      rc = fn(ctx, x, err);
    fsh_batch_unref(x);
    if (rc != 0) break;
  }
  st.release(&st);
done:
  fsh_free(ms);
  fsh_schema_unref(schema);
  return rc;
}

static int consume(void *ctx, fsh_batch *x, fsh_error *err) {
  (void)err;
  fsh_reduce_task_result *r = ctx;
  r->rows += x->length;
  r->bytes += fsh_shuffle_batch_bytes(x);
  r->batches++;
  fsh_task_row_checksums(x, NULL, &r->checksum);
  return 0;
}

int fsh_reduce_task_run(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                        fsh_reduce_task_result *out, fsh_error *err) {
  int64_t t0 = now_nanos();
  fsh_reduce_task_result r = {0};
  int rc = fsh_reduce_task_each(b, t, consume, &r, err);
  if (rc != 0)
    return fsh_error_prefix(err, rc, "reduce task of partition %d of shuffle %" PRIu64 ": ",
                            t->partition, t->shuffle_id);
  r.nanos = now_nanos() - t0;
  *out = r;
  return 0;
}

/* ---- wire -------------------------------------------------------------- */

int fsh_reduce_task_encode(const fsh_reduce_task *t, fsh_buffer **out, fsh_error *err) {
  FSH_RETURN_NOT_OK(check_reduce_task(t, err));
  int64_t size = REDUCE_TASK_HEADER_BYTES + REDUCE_SOURCE_BYTES * t->n_sources;
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
  p[4] = 1;
  fsh_le_put64(p + 8, t->shuffle_id);
  fsh_le_put32(p + 16, (uint32_t)t->partition);
  fsh_le_put32(p + 20, (uint32_t)t->n_partitions);
  p[24] = (uint8_t)t->backend;
  p[25] = (uint8_t)((t->incremental ? 1 : 0) | (t->sizes_unknown ? 2 : 0));
  fsh_le_put32(p + 28, (uint32_t)t->n_locations);
  fsh_le_put32(p + 32, (uint32_t)t->n_sources);
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
  if (p[4] != 1 || p[5] || p[6] || p[7] || (p[25] & ~3) || p[26] || p[27] ||
      fsh_le_get32(p + 36))
    return fsh_error_set(err, EINVAL, "reduce-verify: version %u or reserved bytes not "
                         "supported (version 1, zeros)", p[4]);
  fsh_reduce_task t = {.shuffle_id = fsh_le_get64(p + 8),
                       .partition = (int32_t)fsh_le_get32(p + 16),
                       .n_partitions = (int32_t)fsh_le_get32(p + 20),
                       .backend = (fsh_task_backend)p[24], .incremental = p[25] & 1,
                       .sizes_unknown = (p[25] & 2) != 0};
  int64_t n_loc = fsh_le_get32(p + 28), n = fsh_le_get32(p + 32);
  if (n > TASK_MAX_COUNT || n_loc > TASK_MAX_COUNT ||
      size < REDUCE_TASK_HEADER_BYTES + REDUCE_SOURCE_BYTES * n + 4 * n_loc)
    return fsh_error_set(err, EINVAL, "reduce-verify: %" PRId64 " map outputs and %" PRId64
                         " locations do not fit in %" PRId64 " bytes", n, n_loc, size);
  t.sources = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *t.sources);
  t.locations = fsh_calloc(n_loc > 0 ? (size_t)n_loc : 1, sizeof *t.locations);
  if (!t.sources || !t.locations) {
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
  fsh_buffer *b = fsh_buffer_new(REDUCE_RESULT_BYTES, true);
  if (!b) return fsh_error_set(err, ENOMEM, "reduce task answer: out of memory");
  uint8_t *p = b->data;
  memcpy(p, REDUCE_RESULT_MAGIC, 4);
  p[4] = 1;
  fsh_le_put64(p + 8, (uint64_t)r->nanos);
  fsh_le_put64(p + 16, (uint64_t)r->rows);
  fsh_le_put64(p + 24, (uint64_t)r->bytes);
  fsh_le_put64(p + 32, r->checksum);
  fsh_le_put64(p + 40, (uint64_t)r->batches);
  *out = b;
  return 0;
}

int fsh_reduce_task_result_decode(const uint8_t *p, int64_t size, fsh_reduce_task_result *out,
                                  fsh_error *err) {
  if (size != REDUCE_RESULT_BYTES || memcmp(p, REDUCE_RESULT_MAGIC, 4) != 0 || p[4] != 1)
    return fsh_error_set(err, EINVAL, "not a reduce task answer (%" PRId64 " bytes)", size);
  *out = (fsh_reduce_task_result){.nanos = (int64_t)fsh_le_get64(p + 8),
                                  .rows = (int64_t)fsh_le_get64(p + 16),
                                  .bytes = (int64_t)fsh_le_get64(p + 24),
                                  .checksum = fsh_le_get64(p + 32),
                                  .batches = (int64_t)fsh_le_get64(p + 40)};
  return 0;
}
