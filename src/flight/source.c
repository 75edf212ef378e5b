/* source.c -- DoGet sources over our own data: batches in memory, a batch
 * stream, or a stored IPC stream forwarded message by message without
 * decoding bodies. The server pulls one payload at a time, so at most one
 * encoded batch (plus the dictionaries it needs) is held per stream. */
#include <flightshuffle/flight.h>

#include <errno.h>
#include <string.h>

/* ---- batches and batch streams --------------------------------------------- */

typedef struct stream_source {
  fsh_flight_source base;
  fsh_batch_stream stream;
  fsh_ipc_encoder *enc;
  bool schema_sent;
  bool done;
  fsh_ipc_payload *pending; /* payloads of the last batch not handed out yet */
  int32_t n_pending;
  int32_t next_pending;
} stream_source;

static void drop_pending(stream_source *s) {
  for (int32_t i = 0; i < s->n_pending; i++) fsh_ipc_payload_reset(&s->pending[i]);
  fsh_free(s->pending);
  s->pending = NULL;
  s->n_pending = s->next_pending = 0;
}

static int stream_next(fsh_flight_source *base, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                       bool *done, fsh_error *err) {
  stream_source *s = base->ctx;
  memset(out, 0, sizeof *out);
  *done = false;
  if (!s->schema_sent) {
    FSH_RETURN_NOT_OK(fsh_ipc_encode_schema(s->enc, out, err));
    s->schema_sent = true;
    return 0;
  }
  while (s->next_pending >= s->n_pending) {
    drop_pending(s);
    if (s->done) {
      *done = true;
      return 0;
    }
    fsh_batch *batch = NULL;
    FSH_RETURN_NOT_OK(s->stream.get_next(&s->stream, &batch, err));
    if (!batch) {
      s->done = true;
      *done = true;
      return 0;
    }
    int rc = fsh_ipc_encode_batch(s->enc, batch, &s->pending, &s->n_pending, err);
    fsh_batch_unref(batch);
    if (rc != 0) return rc;
  }
  *out = s->pending[s->next_pending];
  memset(&s->pending[s->next_pending], 0, sizeof *out);
  s->next_pending++;
  return 0;
}

static void stream_release(fsh_flight_source *base) {
  stream_source *s = base->ctx;
  drop_pending(s);
  fsh_ipc_encoder_free(s->enc);
  if (s->stream.release) s->stream.release(&s->stream);
  fsh_free(s);
}

/* Takes ownership of *stream (moved out: the caller's struct is zeroed),
 * on error too. */
int fsh_flight_source_from_stream(fsh_batch_stream *stream, const fsh_ipc_write_options *opts,
                                  fsh_flight_source **out, fsh_error *err) {
  *out = NULL;
  fsh_batch_stream st = *stream;
  memset(stream, 0, sizeof *stream);
  stream_source *s = fsh_calloc(1, sizeof *s);
  if (!s) {
    if (st.release) st.release(&st);
    return fsh_error_set(err, ENOMEM, "Flight source: out of memory");
  }
  s->stream = st;
  int rc = st.schema ? fsh_ipc_encoder_new(st.schema, opts, &s->enc, err)
                     : fsh_error_set(err, EINVAL, "Flight source: the stream has no schema");
  if (rc != 0) {
    s->base.ctx = s;
    stream_release(&s->base);
    return rc;
  }
  s->base.next = stream_next;
  s->base.release = stream_release;
  s->base.ctx = s;
  *out = &s->base;
  return 0;
}

/* Takes ownership of the schema reference and of the n batch references
 * (not of the array), on error too. */
int fsh_flight_source_from_batches(fsh_schema *schema, fsh_batch *const *batches, int64_t n,
                                   const fsh_ipc_write_options *opts, fsh_flight_source **out,
                                   fsh_error *err) {
  *out = NULL;
  fsh_batch_stream st;
  int rc = fsh_batch_stream_from_batches(schema, batches, n, &st, err); /* takes its own refs */
  fsh_schema_unref(schema);
  for (int64_t i = 0; batches && i < n; i++) fsh_batch_unref(batches[i]);
  if (rc != 0) return rc;
  return fsh_flight_source_from_stream(&st, opts, out, err);
}

/* ---- stored IPC streams ------------------------------------------------------ */

typedef struct ipc_source {
  fsh_flight_source base;
  fsh_ipc_stream_reader *reader;
  bool schema_sent;
} ipc_source;

/* b itself when its size is a multiple of 8, else a zero-padded copy (the
 * payload contract; legacy writers did not always pad). Consumes b's
 * reference. */
static fsh_buffer *padded(fsh_buffer *b) {
  if (b->size % 8 == 0) return b;
  fsh_buffer *p = fsh_buffer_new(fsh_round_up(b->size, 8), true);
  if (p) memcpy(p->data, b->data, (size_t)b->size);
  fsh_buffer_unref(b);
  return p;
}

static int ipc_next(fsh_flight_source *base, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                    bool *done, fsh_error *err) {
  ipc_source *s = base->ctx;
  memset(out, 0, sizeof *out);
  *done = false;
  if (!s->schema_sent) {
    /* The reader consumed the schema message when it opened: re-encode it
     * (same fields, dictionary ids and metadata). */
    fsh_ipc_encoder *enc = NULL;
    FSH_RETURN_NOT_OK(fsh_ipc_encoder_new(fsh_ipc_stream_reader_schema(s->reader), NULL, &enc, err));
    int rc = fsh_ipc_encode_schema(enc, out, err);
    fsh_ipc_encoder_free(enc);
    if (rc == 0) s->schema_sent = true;
    return rc;
  }
  fsh_buffer *meta = NULL, *body = NULL;
  FSH_RETURN_NOT_OK(fsh_ipc_stream_reader_next_raw(s->reader, &meta, &body, err));
  if (!meta) {
    fsh_buffer_unref(body);
    *done = true;
    return 0;
  }
  int64_t body_length = 0;
  int rc = fsh_ipc_peek_message(meta, &out->type, &body_length, err);
  if (rc == 0 && !(meta = padded(meta))) rc = fsh_error_set(err, ENOMEM, "Flight source: out of memory");
  if (rc == 0 && body && body->size > 0) {
    body = padded(body);
    out->body = body ? fsh_malloc(sizeof *out->body) : NULL;
    if (!out->body) {
      rc = fsh_error_set(err, ENOMEM, "Flight source: out of memory");
    } else {
      out->body[0] = body;
      out->n_body = 1;
      out->body_length = body->size;
      body = NULL;
    }
  }
  out->metadata = meta;
  fsh_buffer_unref(body);
  if (rc != 0) fsh_ipc_payload_reset(out);
  return rc;
}

static void ipc_release(fsh_flight_source *base) {
  ipc_source *s = base->ctx;
  fsh_ipc_stream_reader_free(s->reader);
  fsh_free(s);
}

/* Takes ownership of `in` (closed on error too). The schema message is
 * read (and checked) here. */
int fsh_flight_source_from_ipc_stream(fsh_input *in, fsh_flight_source **out, fsh_error *err) {
  *out = NULL;
  ipc_source *s = fsh_calloc(1, sizeof *s);
  if (!s) {
    in->close(in);
    return fsh_error_set(err, ENOMEM, "Flight source: out of memory");
  }
  int rc = fsh_ipc_stream_reader_open(in, &s->reader, err);
  if (rc != 0) {
    fsh_free(s);
    return rc;
  }
  s->base.next = ipc_next;
  s->base.release = ipc_release;
  s->base.ctx = s;
  *out = &s->base;
  return 0;
}
