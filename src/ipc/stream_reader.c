/* stream_reader.c -- the Arrow IPC stream format on top of an fsh_input:
 * framed messages (0xFFFFFFFF continuation + int32 length, or the legacy
 * pre-0.15 bare int32 length), each body read into one buffer that the
 * decoded arrays slice. End of stream: a zero length or end of input. */
#include "ipc/read_internal.h"

#include <errno.h>

struct fsh_ipc_stream_reader {
  fsh_input *in;
  fsh_ipc_decoder *dec;
  int64_t index; /* messages read so far */
  bool done;
  int failed; /* the error code once reading failed: later calls repeat it */
};

/* Reads exactly n bytes or fails naming what was truncated. *out is NULL
 * and 0 returned when end of input is hit before the first byte and
 * eof_ok is set. */
static int read_exact(fsh_ipc_stream_reader *r, int64_t n, const char *what, bool eof_ok,
                      fsh_buffer **out, fsh_error *err) {
  fsh_buffer *b;
  *out = NULL;
  FSH_RETURN_NOT_OK(r->in->read(r->in, n, &b, err));
  if (b->size == n) {
    *out = b;
    return 0;
  }
  int64_t got = b->size;
  fsh_buffer_unref(b);
  if (got == 0 && eof_ok) return 0;
  return fsh_error_set(err, EINVAL, "%s: message %lld: truncated %s (%lld of %lld bytes)",
                       r->in->name, (long long)r->index, what, (long long)got, (long long)n);
}

/* Reads the framing prefix: *meta_len is 0 at end of stream. */
static int read_prefix(fsh_ipc_stream_reader *r, int64_t *meta_len, fsh_error *err) {
  fsh_buffer *b, *b2 = NULL;
  *meta_len = 0;
  FSH_RETURN_NOT_OK(read_exact(r, 4, "length prefix", true, &b, err));
  if (!b) return 0;
  uint32_t v = (uint32_t)fsh_fb_load_i32(b->data);
  fsh_buffer_unref(b);
  if (v == FSH_IPC_CONTINUATION) {
    FSH_RETURN_NOT_OK(read_exact(r, 4, "length prefix", false, &b2, err));
    v = (uint32_t)fsh_fb_load_i32(b2->data);
    fsh_buffer_unref(b2);
  }
  if ((int32_t)v < 0)
    return fsh_error_set(err, EINVAL, "%s: message %lld: negative metadata length %d",
                         r->in->name, (long long)r->index, (int32_t)v);
  *meta_len = v;
  return 0;
}

/* Reads the next framed message; *meta NULL at end of stream, *body NULL
 * when the message has no body. */
static int read_message(fsh_ipc_stream_reader *r, fsh_buffer **meta, fsh_buffer **body,
                        fsh_error *err) {
  int64_t len, body_len;
  fsh_ipc_message_type type;
  *meta = *body = NULL;
  if (r->done) return 0;
  FSH_RETURN_NOT_OK(read_prefix(r, &len, err));
  if (len == 0) {
    r->done = true;
    return 0;
  }
  FSH_RETURN_NOT_OK(read_exact(r, len, "metadata", false, meta, err));
  int rc = fsh_ipc_peek_message(*meta, &type, &body_len, err);
  if (rc != 0)
    rc = fsh_error_prefix(err, rc, "%s: message %lld: ", r->in->name, (long long)r->index);
  if (rc == 0 && body_len > 0) rc = read_exact(r, body_len, "body", false, body, err);
  if (rc != 0) {
    fsh_buffer_unref(*meta);
    *meta = NULL;
    return rc;
  }
  r->index++;
  return 0;
}

int fsh_ipc_stream_reader_open(fsh_input *in, fsh_ipc_stream_reader **out, fsh_error *err) {
  fsh_ipc_stream_reader *r = fsh_calloc(1, sizeof *r);
  if (!r) {
    in->close(in);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  r->in = in;
  fsh_buffer *meta = NULL, *body = NULL;
  fsh_batch *batch = NULL;
  int rc = fsh_ipc_decoder_new(&r->dec, err);
  if (rc == 0) rc = read_message(r, &meta, &body, err);
  if (rc == 0 && !meta) rc = fsh_error_set(err, EINVAL, "%s: empty stream (no schema)", in->name);
  if (rc == 0) rc = fsh_ipc_decode_message(r->dec, meta, body, &batch, err);
  if (rc == 0 && !fsh_ipc_decoder_schema(r->dec)) {
    fsh_batch_unref(batch);
    rc = fsh_error_set(err, EINVAL, "%s: the stream does not start with a schema", in->name);
  }
  fsh_buffer_unref(meta);
  fsh_buffer_unref(body);
  if (rc != 0) {
    fsh_ipc_stream_reader_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

fsh_schema *fsh_ipc_stream_reader_schema(fsh_ipc_stream_reader *r) {
  return fsh_ipc_decoder_schema(r->dec);
}

static int already_failed(const fsh_ipc_stream_reader *r, fsh_error *err) {
  return fsh_error_set(err, r->failed, "%s: the stream reader failed earlier", r->in->name);
}

int fsh_ipc_stream_reader_next(fsh_ipc_stream_reader *r, fsh_batch **batch, fsh_error *err) {
  *batch = NULL;
  if (r->failed) return already_failed(r, err);
  for (;;) {
    fsh_buffer *meta, *body;
    int rc = read_message(r, &meta, &body, err);
    if (rc != 0) return r->failed = rc;
    if (!meta) return 0;
    rc = fsh_ipc_decode_message(r->dec, meta, body, batch, err);
    fsh_buffer_unref(meta);
    fsh_buffer_unref(body);
    if (rc != 0) return r->failed = fsh_error_prefix(err, rc, "%s: ", r->in->name);
    if (*batch) return 0;
  }
}

/* Raw messages are not decoded: a dictionary batch read this way is not
 * applied to the decoder, so do not mix this with _next on one stream. */
int fsh_ipc_stream_reader_next_raw(fsh_ipc_stream_reader *r, fsh_buffer **metadata,
                                   fsh_buffer **body, fsh_error *err) {
  *metadata = *body = NULL;
  if (r->failed) return already_failed(r, err);
  int rc = read_message(r, metadata, body, err);
  if (rc != 0) r->failed = rc;
  return rc;
}

void fsh_ipc_stream_reader_free(fsh_ipc_stream_reader *r) {
  if (!r) return;
  fsh_ipc_decoder_free(r->dec);
  if (r->in) r->in->close(r->in);
  fsh_free(r);
}
