/* worker_put.c -- writing a map output into a standalone worker with
 * DoPut: the descriptor PATH ["shuffle", id, "map", m, "attempt", a,
 * "partitions", n, "compression", c] names it; the schema message opens a
 * store writer; each record batch (validated: it comes from outside) goes
 * to the partition its app_metadata names (4 bytes, little-endian int32);
 * the client's half-close completes the map output and the PutResult
 * carries its metadata. An error, or a call that ends early, discards
 * everything written. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "shuffle/worker_internal.h"

typedef struct put_sink {
  fsh_flight_sink base;
  fsh_shuffle_store *store;
  fsh_shuffle_spec spec; /* schema set by the schema message */
  int64_t map_id;
  int32_t attempt;
  fsh_ipc_decoder *dec;
  fsh_store_writer *w;
  int64_t n_messages;
  char what[128];
} put_sink;

/* A decimal in [0, max] (no sign, no spaces, no leading junk). */
static bool parse_count(const char *s, int64_t max, int64_t *out) {
  if (!s || !*s || strlen(s) > 19) return false;
  int64_t v = 0;
  for (const char *c = s; *c; c++) {
    if (*c < '0' || *c > '9') return false;
    v = v * 10 + (*c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

static int put_message(fsh_flight_sink *base, fsh_flight_message *m, fsh_error *err) {
  put_sink *p = base->ctx;
  int64_t index = p->n_messages++;
  int rc = 0;
  fsh_batch *batch = NULL;
  if (!m->metadata) {
    if (index == 0)
      rc = fsh_error_set(err, EINVAL, "%s: DoPut: the first message carries no schema", p->what);
    goto done; /* app_metadata alone: nothing to store */
  }
  rc = fsh_ipc_decode_message(p->dec, m->metadata, m->body, &batch, err);
  if (rc != 0) {
    rc = fsh_error_prefix(err, rc, "%s: DoPut message %" PRId64 ": ", p->what, index);
    goto done;
  }
  if (!p->w) {
    p->spec.schema = fsh_ipc_decoder_schema(p->dec);
    if (!p->spec.schema) {
      rc = fsh_error_set(err, EINVAL, "%s: DoPut: the stream does not start with a schema",
                         p->what);
      goto done;
    }
    p->spec.schema = fsh_schema_ref(p->spec.schema);
    rc = fsh_store_writer_open(p->store, &p->spec, p->map_id, p->attempt, &p->w, err);
    if (rc != 0) goto done;
  }
  if (!batch) goto done; /* schema or dictionary */
  if (!m->app_metadata || m->app_metadata->size != 4) {
    rc = fsh_error_set(err, EINVAL, "%s: DoPut message %" PRId64 ": a record batch's "
                       "app_metadata must be its partition id (4 bytes, little-endian int32); "
                       "got %" PRId64 " bytes", p->what, index,
                       m->app_metadata ? m->app_metadata->size : 0);
    goto done;
  }
  int32_t partition = (int32_t)fsh_le_get32(m->app_metadata->data);
  if (partition < 0 || partition >= p->spec.n_partitions) {
    rc = fsh_error_set(err, EINVAL, "%s: DoPut message %" PRId64 ": partition %d of %d", p->what,
                       index, partition, p->spec.n_partitions);
    goto done;
  }
  rc = fsh_batch_validate(batch, true, err);
  if (rc != 0) {
    rc = fsh_error_prefix(err, rc, "%s: DoPut message %" PRId64 ": invalid batch: ", p->what,
                          index);
    goto done;
  }
  if (batch->length > 0) rc = fsh_store_writer_write(p->w, partition, batch, err);
done:
  fsh_batch_unref(batch);
  fsh_flight_message_reset(m);
  return rc;
}

static int put_finish(fsh_flight_sink *base, fsh_buffer **put_result, fsh_error *err) {
  put_sink *p = base->ctx;
  if (!p->w)
    return fsh_error_set(err, EINVAL, "%s: DoPut: the stream ended before its schema", p->what);
  fsh_map_output m;
  fsh_store_writer *w = p->w;
  p->w = NULL;
  FSH_RETURN_NOT_OK(fsh_store_writer_close(w, &m, err));
  int rc = fsh_put_result_encode(&m, put_result, err);
  fsh_map_output_reset(&m);
  /* If the answer cannot be built the output stays: the caller sees an
   * error and may retry or release; it is complete either way. */
  return rc;
}

static void put_release(fsh_flight_sink *base) {
  put_sink *p = base->ctx;
  fsh_store_writer_abort(p->w);
  fsh_ipc_decoder_free(p->dec);
  fsh_schema_unref(p->spec.schema);
  fsh_free(p);
}

int fsh_worker_put_sink(fsh_shuffle_store *store, const fsh_flight_descriptor *d,
                        fsh_flight_sink **out, fsh_error *err) {
  static const char *const names[] = {"shuffle", "map", "attempt", "partitions", "compression"};
  const char *wn = fsh_store_name(store);
  if (d->type != FSH_FLIGHT_DESCRIPTOR_PATH || d->n_path != 10)
    return fsh_error_set(err, EINVAL, "worker %s: DoPut: the descriptor must be the path "
                         "[shuffle, ID, map, M, attempt, A, partitions, N, compression, "
                         "none|lz4|zstd]", wn);
  for (int i = 0; i < 5; i++)
    if (strcmp(d->path[2 * i], names[i]) != 0)
      return fsh_error_set(err, EINVAL, "worker %s: DoPut: descriptor component %d is '%s', "
                           "expected '%s'", wn, 2 * i, d->path[2 * i], names[i]);
  int64_t id, map, attempt, n;
  fsh_compression c;
  if (!parse_count(d->path[1], INT64_MAX, &id) || !parse_count(d->path[3], INT64_MAX, &map) ||
      !parse_count(d->path[5], INT32_MAX, &attempt) || !parse_count(d->path[7], 1 << 24, &n) ||
      n < 1)
    return fsh_error_set(err, EINVAL, "worker %s: DoPut: shuffle '%s' map '%s' attempt '%s' "
                         "partitions '%s': expected decimal numbers (partitions 1..16777216)",
                         wn, d->path[1], d->path[3], d->path[5], d->path[7]);
  if (fsh_compression_parse(d->path[9], &c, err) != 0)
    return fsh_error_prefix(err, EINVAL, "worker %s: DoPut: ", wn);
  put_sink *p = fsh_calloc(1, sizeof *p);
  if (!p || fsh_ipc_decoder_new(&p->dec, err) != 0) {
    fsh_free(p);
    return fsh_error_set(err, ENOMEM, "worker %s: DoPut: out of memory", wn);
  }
  p->store = store;
  p->spec = (fsh_shuffle_spec){.shuffle_id = (uint64_t)id, .n_partitions = (int32_t)n,
                               .compression = c};
  p->map_id = map;
  p->attempt = (int32_t)attempt;
  snprintf(p->what, sizeof p->what, "worker %s: shuffle %" PRId64 " map %" PRId64 " attempt %"
           PRId64, wn, id, map, attempt);
  p->base = (fsh_flight_sink){.message = put_message, .finish = put_finish,
                              .release = put_release, .ctx = p};
  *out = &p->base;
  return 0;
}
