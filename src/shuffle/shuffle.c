/* shuffle.c -- the backend-independent part of the shuffle interface: map
 * output records, and the dispatchers that check every argument before a
 * backend sees it (so no backend repeats those checks, and every backend
 * rejects the same mistakes with the same messages). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <flightshuffle/kernels.h>

#include "shuffle/shuffle_internal.h"

/* ---- map output records ------------------------------------------------ */

void fsh_map_output_reset(fsh_map_output *m) {
  if (!m) return;
  fsh_free(m->location);
  fsh_free(m->rows);
  fsh_free(m->bytes);
  fsh_free(m->checksums);
  memset(m, 0, sizeof *m);
}

int fsh_map_output_alloc(fsh_map_output *m, uint64_t shuffle_id, int64_t map_id, int32_t attempt,
                         int32_t n_partitions, fsh_error *err) {
  memset(m, 0, sizeof *m);
  size_t n = n_partitions > 0 ? (size_t)n_partitions : 1;
  m->rows = fsh_calloc(n, sizeof *m->rows);
  m->bytes = fsh_calloc(n, sizeof *m->bytes);
  m->checksums = fsh_calloc(n, sizeof *m->checksums);
  if (!m->rows || !m->bytes || !m->checksums) {
    fsh_map_output_reset(m);
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " map %" PRId64
                         ": out of memory for the metadata of %d partitions",
                         shuffle_id, map_id, n_partitions);
  }
  m->shuffle_id = shuffle_id;
  m->map_id = map_id;
  m->attempt = attempt;
  m->n_partitions = n_partitions;
  return 0;
}

int fsh_map_output_copy(fsh_map_output *dst, const fsh_map_output *src) {
  fsh_map_output m;
  FSH_RETURN_NOT_OK(
      fsh_map_output_alloc(&m, src->shuffle_id, src->map_id, src->attempt, src->n_partitions, NULL));
  if (src->location && !(m.location = fsh_strdup(src->location))) {
    fsh_map_output_reset(&m);
    return ENOMEM;
  }
  size_t n = src->n_partitions > 0 ? (size_t)src->n_partitions : 0;
  if (n && src->rows) memcpy(m.rows, src->rows, n * sizeof *m.rows);
  if (n && src->bytes) memcpy(m.bytes, src->bytes, n * sizeof *m.bytes);
  if (n && src->checksums) memcpy(m.checksums, src->checksums, n * sizeof *m.checksums);
  *dst = m;
  return 0;
}

static int64_t all_buffer_bytes(const fsh_array *a) {
  if (!a) return 0;
  int64_t total = 0;
  for (int32_t i = 0; i < a->n_buffers; i++)
    if (a->buffers[i]) total += a->buffers[i]->size;
  for (int64_t i = 0; i < a->n_children; i++) total += all_buffer_bytes(a->children[i]);
  return total + all_buffer_bytes(a->dictionary);
}

/* Offsets [first, last] of slots [at, at + n) of an offsets buffer of
 * 4- or 8-byte entries; false if the buffer is too short to say. */
static bool offset_range(const fsh_buffer *b, bool large, int64_t at, int64_t n, int64_t *first,
                         int64_t *last) {
  int64_t w = large ? 8 : 4;
  if (!b || at < 0 || (at + n + 1) * w > b->size) return false;
  if (large) {
    const int64_t *o = (const int64_t *)(const void *)b->data;
    *first = o[at], *last = o[at + n];
  } else {
    const int32_t *o = (const int32_t *)(const void *)b->data;
    *first = o[at], *last = o[at + n];
  }
  return *last >= *first;
}

/* Bytes of the slots [at, at + n) of a (at includes a->offset): what those
 * rows hold, not the whole buffers a slice shares with its parent. Falls
 * back to whole buffers where a range cannot be told cheaply (dense
 * unions, dictionaries: counted whole). */
static int64_t range_bytes(const fsh_field *f, const fsh_array *a, int64_t at, int64_t n) {
  if (!a || n <= 0) return 0;
  int64_t total = a->buffers[0] && f->type != FSH_TYPE_SPARSE_UNION &&
                          f->type != FSH_TYPE_DENSE_UNION
                      ? fsh_bytes_for_bits(n)
                      : 0;
  if (f->dictionary) return total + n * fsh_type_bit_width(f) / 8 + all_buffer_bytes(a->dictionary);
  int64_t first, last;
  switch (f->type) {
    case FSH_TYPE_NA: return 0;
    case FSH_TYPE_BOOL: return total + fsh_bytes_for_bits(n);
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      bool large = f->type == FSH_TYPE_LARGE_BINARY || f->type == FSH_TYPE_LARGE_STRING;
      if (!offset_range(a->buffers[1], large, at, n, &first, &last)) return all_buffer_bytes(a);
      return total + (n + 1) * (large ? 8 : 4) + (last - first);
    }
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP: {
      bool large = f->type == FSH_TYPE_LARGE_LIST;
      if (a->n_children < 1 || f->n_children < 1 ||
          !offset_range(a->buffers[1], large, at, n, &first, &last))
        return all_buffer_bytes(a);
      const fsh_array *c = a->children[0];
      return total + (n + 1) * (large ? 8 : 4) +
             range_bytes(&f->children[0], c, c->offset + first, last - first);
    }
    case FSH_TYPE_FIXED_SIZE_LIST: {
      if (a->n_children < 1 || f->n_children < 1) return all_buffer_bytes(a);
      const fsh_array *c = a->children[0];
      return total + range_bytes(&f->children[0], c, c->offset + at * f->list_size,
                                 n * f->list_size);
    }
    case FSH_TYPE_STRUCT: case FSH_TYPE_SPARSE_UNION: {
      int64_t rel = at - a->offset; /* children are indexed from their own offsets */
      if (f->type == FSH_TYPE_SPARSE_UNION) total += n;
      for (int64_t i = 0; i < a->n_children && i < f->n_children; i++)
        total += range_bytes(&f->children[i], a->children[i], a->children[i]->offset + rel, n);
      return total;
    }
    case FSH_TYPE_DENSE_UNION: return all_buffer_bytes(a);
    default: return total + n * fsh_type_bit_width(f) / 8;
  }
}

int64_t fsh_shuffle_batch_bytes(const fsh_batch *b) {
  int64_t total = 0;
  for (int64_t i = 0; i < b->n_columns && i < b->schema->n_fields; i++) {
    const fsh_array *a = b->columns[i];
    if (a) total += range_bytes(&b->schema->fields[i], a, a->offset, a->length);
  }
  return total;
}

/* ---- checked writer ---------------------------------------------------- */

/* Wraps a backend's writer: checks partition and schema on every write,
 * drops zero-row batches (they carry nothing a reducer needs, and every
 * backend then stores the same thing), and frees itself with the inner
 * writer. */
typedef struct checked_writer {
  fsh_shuffle_writer pub;
  fsh_shuffle_writer *inner;
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t n_partitions;
  fsh_schema *schema; /* reference */
} checked_writer;

static int checked_write(fsh_shuffle_writer *w, int32_t partition, fsh_batch *batch,
                         fsh_error *err) {
  checked_writer *c = w->state;
  if (partition < 0 || partition >= c->n_partitions)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64
                         ": write to partition %d of %d", c->shuffle_id, c->map_id, partition,
                         c->n_partitions);
  if (!batch)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64
                         ": write of a NULL batch to partition %d", c->shuffle_id, c->map_id,
                         partition);
  if (batch->schema != c->schema) {
    fsh_error diff = {{0}};
    if (!fsh_schema_equals(batch->schema, c->schema, false, &diff))
      return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64
                           ": partition %d: the batch's schema differs from the shuffle's: %s",
                           c->shuffle_id, c->map_id, partition, diff.message);
  }
  if (batch->length == 0) return 0;
  return c->inner->write(c->inner, partition, batch, err);
}

static int checked_write_rows(fsh_shuffle_writer *w, fsh_batch *batch,
                              const int32_t *partition_of_row, fsh_error *err) {
  checked_writer *c = w->state;
  if (!batch || (batch->length > 0 && !partition_of_row))
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64
                         ": write of rows: a NULL batch or partition ids", c->shuffle_id, c->map_id);
  if (batch->schema != c->schema) {
    fsh_error diff = {{0}};
    if (!fsh_schema_equals(batch->schema, c->schema, false, &diff))
      return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64
                           ": the batch's schema differs from the shuffle's: %s",
                           c->shuffle_id, c->map_id, diff.message);
  }
  if (batch->length == 0) return 0;
  return c->inner->write_rows(c->inner, batch, partition_of_row, err); /* ids checked there */
}

int fsh_shuffle_write_rows(fsh_shuffle_writer *w, fsh_batch *batch,
                           const int32_t *partition_of_row, int32_t n_partitions,
                           fsh_batch **parts, fsh_error *err) {
  if (w->write_rows) {
    int rc = w->write_rows(w, batch, partition_of_row, err);
    if (rc != ENOTSUP) return rc;
  }
  FSH_RETURN_NOT_OK(fsh_scatter(batch, partition_of_row, n_partitions, parts, err));
  int rc = 0;
  for (int32_t p = 0; p < n_partitions; p++) {
    if (parts[p] && rc == 0) rc = w->write(w, p, parts[p], err);
    fsh_batch_unref(parts[p]);
    parts[p] = NULL;
  }
  return rc;
}

static void checked_free(checked_writer *c) {
  fsh_schema_unref(c->schema);
  fsh_free(c);
}

static int checked_close(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err) {
  checked_writer *c = w->state;
  int rc = out ? c->inner->close(c->inner, out, err)
               : (c->inner->abort(c->inner),
                  fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64
                                ": close without an output record (discarded)",
                                c->shuffle_id, c->map_id));
  checked_free(c);
  return rc;
}

static void checked_abort(fsh_shuffle_writer *w) {
  checked_writer *c = w->state;
  c->inner->abort(c->inner);
  checked_free(c);
}

/* ---- dispatchers ------------------------------------------------------- */

static int check_spec(const fsh_shuffle_spec *spec, const char *what, fsh_error *err) {
  if (!spec) return fsh_error_set(err, EINVAL, "%s: no shuffle spec", what);
  if (spec->n_partitions < 1)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": %s: n_partitions %d (must be >= 1)",
                         spec->shuffle_id, what, spec->n_partitions);
  if (!spec->schema)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": %s: the spec has no schema",
                         spec->shuffle_id, what);
  if (spec->compression != FSH_COMPRESSION_NONE && spec->compression != FSH_COMPRESSION_LZ4_FRAME &&
      spec->compression != FSH_COMPRESSION_ZSTD)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": %s: unknown compression %d",
                         spec->shuffle_id, what, (int)spec->compression);
  if (spec->target_block_bytes < 0)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": %s: target_block_bytes %" PRId64
                         " (must be >= 0)", spec->shuffle_id, what, spec->target_block_bytes);
  return 0;
}

int fsh_shuffle_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                            int32_t attempt, fsh_shuffle_writer **out, fsh_error *err) {
  if (!b || !out) return fsh_error_set(err, EINVAL, "open_writer: NULL backend or output");
  FSH_RETURN_NOT_OK(check_spec(spec, "open_writer", err));
  if (map_id < 0 || attempt < 0)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": open_writer: map %" PRId64
                         " attempt %d (both must be >= 0)", spec->shuffle_id, map_id, attempt);
  checked_writer *c = fsh_calloc(1, sizeof *c);
  if (!c)
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " map %" PRId64 ": out of memory",
                         spec->shuffle_id, map_id);
  int rc = b->ops->open_writer(b, spec, map_id, attempt, &c->inner, err);
  if (rc != 0) {
    fsh_free(c);
    return rc;
  }
  c->shuffle_id = spec->shuffle_id;
  c->map_id = map_id;
  c->n_partitions = spec->n_partitions;
  c->schema = fsh_schema_ref(spec->schema);
  c->pub = (fsh_shuffle_writer){
      .write = checked_write, .close = checked_close, .abort = checked_abort, .state = c,
      .write_rows = c->inner->write_rows ? checked_write_rows : NULL};
  *out = &c->pub;
  return 0;
}

/* Checks every source against the spec; `what` names the read
 * ("partition 3", "partitions [3, 5)") in the messages. */
static int check_sources(const fsh_shuffle_spec *spec, const char *what,
                         const fsh_map_output *sources, int64_t n_sources, fsh_error *err) {
  if (n_sources < 0 || (n_sources > 0 && !sources))
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " %s: %" PRId64 " sources given %s",
                         spec->shuffle_id, what, n_sources, sources ? "" : "as NULL");
  for (int64_t i = 0; i < n_sources; i++) {
    const fsh_map_output *s = &sources[i];
    if (s->shuffle_id != spec->shuffle_id || s->n_partitions != spec->n_partitions)
      return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " %s: source %" PRId64
                           " (map %" PRId64 " attempt %d) belongs to shuffle %" PRIu64
                           " with %d partitions", spec->shuffle_id, what, i, s->map_id,
                           s->attempt, s->shuffle_id, s->n_partitions);
    if (!s->location)
      return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " %s: source %" PRId64
                           " (map %" PRId64 " attempt %d) has no location", spec->shuffle_id,
                           what, i, s->map_id, s->attempt);
  }
  return 0;
}

int fsh_shuffle_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                            int32_t partition, const fsh_map_output *sources, int64_t n_sources,
                            fsh_batch_stream *out, fsh_error *err) {
  if (!b || !out) return fsh_error_set(err, EINVAL, "open_reader: NULL backend or output");
  FSH_RETURN_NOT_OK(check_spec(spec, "open_reader", err));
  if (partition < 0 || partition >= spec->n_partitions)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": read of partition %d of %d",
                         spec->shuffle_id, partition, spec->n_partitions);
  char what[48];
  snprintf(what, sizeof what, "partition %d", partition);
  FSH_RETURN_NOT_OK(check_sources(spec, what, sources, n_sources, err));
  return b->ops->open_reader(b, spec, partition, sources, n_sources, out, err);
}

/* ---- range streams ----------------------------------------------------- */

/* The fallback range stream: one open_reader stream per partition of the
 * run, all opened up front (so the caller's sources need not outlive the
 * open), drained partition-major; each released once drained. */
typedef struct per_partition_range {
  int32_t first, count, cur;
  fsh_batch_stream *streams; /* [count]; released ones zeroed */
} per_partition_range;

static void per_partition_free(per_partition_range *r) {
  for (int32_t i = 0; i < r->count; i++)
    if (r->streams[i].release) r->streams[i].release(&r->streams[i]);
  fsh_free(r->streams);
  fsh_free(r);
}

static int per_partition_next(fsh_range_stream *s, int32_t *partition, fsh_batch **out,
                              fsh_error *err) {
  per_partition_range *r = s->private_data;
  *out = NULL;
  *partition = -1;
  while (r->cur < r->count) {
    fsh_batch_stream *st = &r->streams[r->cur];
    FSH_RETURN_NOT_OK(st->get_next(st, out, err));
    if (*out) {
      *partition = r->first + r->cur;
      return 0;
    }
    st->release(st);
    memset(st, 0, sizeof *st);
    r->cur++;
  }
  return 0;
}

static void per_partition_release(fsh_range_stream *s) {
  if (s->private_data) per_partition_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

static int open_per_partition(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                              int32_t first, int32_t count, const fsh_map_output *sources,
                              int64_t n_sources, fsh_range_stream *out, fsh_error *err) {
  per_partition_range *r = fsh_calloc(1, sizeof *r);
  fsh_batch_stream *streams = fsh_calloc((size_t)count, sizeof *streams);
  if (!r || !streams) {
    fsh_free(r);
    fsh_free(streams);
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " partitions [%d, %d): out of memory",
                         spec->shuffle_id, first, first + count);
  }
  *r = (per_partition_range){.first = first, .count = count, .streams = streams};
  for (int32_t i = 0; i < count; i++) {
    int rc = b->ops->open_reader(b, spec, first + i, sources, n_sources, &streams[i], err);
    if (rc != 0) {
      memset(&streams[i], 0, sizeof streams[i]);
      per_partition_free(r);
      return rc;
    }
  }
  *out = (fsh_range_stream){.get_next = per_partition_next, .release = per_partition_release,
                            .schema = fsh_schema_ref(spec->schema), .private_data = r};
  return 0;
}

int fsh_shuffle_open_range_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                  int32_t first_partition, int32_t n_partitions_read,
                                  const fsh_map_output *sources, int64_t n_sources,
                                  fsh_range_stream *out, fsh_error *err) {
  if (!b || !out) return fsh_error_set(err, EINVAL, "open_range_reader: NULL backend or output");
  FSH_RETURN_NOT_OK(check_spec(spec, "open_range_reader", err));
  if (first_partition < 0 || n_partitions_read < 1 ||
      (int64_t)first_partition + n_partitions_read > spec->n_partitions)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": read of %d partitions from "
                         "partition %d of %d (need count >= 1 and first + count <= %d)",
                         spec->shuffle_id, n_partitions_read, first_partition,
                         spec->n_partitions, spec->n_partitions);
  char what[64];
  if (n_partitions_read == 1)
    snprintf(what, sizeof what, "partition %d", first_partition);
  else
    snprintf(what, sizeof what, "partitions [%d, %d)", first_partition,
             first_partition + n_partitions_read);
  FSH_RETURN_NOT_OK(check_sources(spec, what, sources, n_sources, err));
  if (b->ops->open_range_reader)
    return b->ops->open_range_reader(b, spec, first_partition, n_partitions_read, sources,
                                     n_sources, out, err);
  return open_per_partition(b, spec, first_partition, n_partitions_read, sources, n_sources, out,
                            err);
}

/* A range stream over pairs[] (each batch's reference moves into it). */
typedef struct pairs_range {
  int64_t n, next;
  int32_t *partitions;
  fsh_batch **batches;
} pairs_range;

static void pairs_free(pairs_range *r) {
  for (int64_t i = r->next; i < r->n; i++) fsh_batch_unref(r->batches[i]);
  fsh_free(r->partitions);
  fsh_free(r->batches);
  fsh_free(r);
}

static int pairs_next(fsh_range_stream *s, int32_t *partition, fsh_batch **out, fsh_error *err) {
  (void)err;
  pairs_range *r = s->private_data;
  *out = NULL;
  *partition = -1;
  if (r->next < r->n) {
    *partition = r->partitions[r->next];
    *out = r->batches[r->next++];
  }
  return 0;
}

static void pairs_release(fsh_range_stream *s) {
  if (s->private_data) pairs_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

int fsh_range_stream_from_pairs(fsh_schema *schema, int32_t *partitions, fsh_batch **batches,
                                int64_t n, fsh_range_stream *out, fsh_error *err) {
  pairs_range *r = fsh_calloc(1, sizeof *r);
  if (!r) {
    for (int64_t i = 0; i < n; i++) fsh_batch_unref(batches[i]);
    fsh_free(partitions);
    fsh_free(batches);
    return fsh_error_set(err, ENOMEM, "range stream: out of memory");
  }
  *r = (pairs_range){.n = n, .partitions = partitions, .batches = batches};
  *out = (fsh_range_stream){.get_next = pairs_next, .release = pairs_release,
                            .schema = fsh_schema_ref(schema), .private_data = r};
  return 0;
}

int fsh_shuffle_release(fsh_shuffle_backend *b, uint64_t shuffle_id, fsh_error *err) {
  if (!b) return fsh_error_set(err, EINVAL, "release: NULL backend");
  return b->ops->release(b, shuffle_id, err);
}

void fsh_shuffle_backend_destroy(fsh_shuffle_backend *b) {
  if (b) b->ops->destroy(b);
}

char *fsh_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = fsh_malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}
