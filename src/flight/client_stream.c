/* client_stream.c -- the Flight client's streams: DoGet (a reader yielding
 * decoded batches through an fsh_ipc_decoder, or the raw messages for
 * forwarding), DoPut (a writer: schema first, then batches or pre-encoded
 * payloads; close = half-close, drain the PutResults, check the status)
 * and DoExchange (one of each over a single call). */
#include <errno.h>
#include <string.h>

#include "flight/client_internal.h"

/* ---- reader -------------------------------------------------------------------- */

struct fsh_flight_reader {
  fsh_flight_rpc *rpc; /* one reference */
  fsh_ipc_decoder *dec;
  bool eos;
  bool failed;
  /* A message read ahead by fsh_flight_reader_schema (already decoded):
   * next_raw still returns it, next skips it. */
  bool has_pending;
  fsh_flight_message pending;
  int64_t index; /* messages received, for error messages */
};

static int reader_new(fsh_flight_rpc *rpc, fsh_flight_reader **out, fsh_error *err) {
  fsh_flight_reader *r = fsh_calloc(1, sizeof *r);
  if (!r) return fsh_error_set(err, ENOMEM, "%s: out of memory", rpc->method);
  int rc = fsh_ipc_decoder_new(&r->dec, err);
  if (rc) {
    fsh_free(r);
    return rc;
  }
  r->rpc = fsh_flight_rpc_ref(rpc);
  *out = r;
  return 0;
}

/* Receives the next FlightData (*done at the end; m untouched then). */
static int reader_recv(fsh_flight_reader *r, fsh_flight_message *m, bool *done, fsh_error *err) {
  *done = false;
  if (r->eos) {
    *done = true;
    return 0;
  }
  if (r->failed)
    return fsh_error_set(err, EIO, "%s %s: the stream failed earlier", r->rpc->method,
                         r->rpc->client->uri);
  grpc_byte_buffer *bb = NULL;
  int rc = fsh_flight_rpc_recv(r->rpc, &bb, err);
  if (rc == 0 && !bb) {
    r->eos = true;
    *done = true;
    return 0;
  }
  if (rc == 0) {
    memset(m, 0, sizeof *m);
    rc = fsh_flight_data_decode(bb, m, err);
    grpc_byte_buffer_destroy(bb);
    if (rc) {
      fsh_flight_message_reset(m);
      fsh_error_prefix(err, rc, "FlightData %lld: ", (long long)r->index);
      rc = fsh_flight_rpc_error(r->rpc, rc, err);
      fsh_flight_rpc_cancel(r->rpc);
    }
  }
  if (rc) {
    r->failed = true;
    return rc;
  }
  r->index++;
  return 0;
}

/* Decodes a message; *batch set for record batches. */
static int reader_decode(fsh_flight_reader *r, fsh_flight_message *m, fsh_batch **batch,
                         fsh_error *err) {
  *batch = NULL;
  if (!m->metadata) return 0; /* app_metadata only */
  int rc = fsh_ipc_decode_message(r->dec, m->metadata, m->body, batch, err);
  if (rc) {
    r->failed = true;
    fsh_flight_rpc_cancel(r->rpc);
    return fsh_flight_rpc_error(r->rpc, rc, err);
  }
  return 0;
}

int fsh_flight_reader_schema(fsh_flight_reader *r, fsh_schema **out, fsh_error *err) {
  *out = NULL;
  while (!fsh_ipc_decoder_schema(r->dec)) {
    if (r->has_pending)
      return fsh_error_set(err, EPROTO, "%s %s: the stream does not start with a schema",
                           r->rpc->method, r->rpc->client->uri);
    bool done = false;
    FSH_RETURN_NOT_OK(reader_recv(r, &r->pending, &done, err));
    if (done)
      return fsh_error_set(err, EPROTO, "%s %s: the stream ended before its schema",
                           r->rpc->method, r->rpc->client->uri);
    r->has_pending = true;
    fsh_batch *b = NULL;
    FSH_RETURN_NOT_OK(reader_decode(r, &r->pending, &b, err));
    fsh_batch_unref(b); /* cannot be: no schema yet */
  }
  *out = fsh_ipc_decoder_schema(r->dec);
  return 0;
}

int fsh_flight_reader_next(fsh_flight_reader *r, fsh_batch **batch, fsh_error *err) {
  *batch = NULL;
  if (r->has_pending) { /* decoded already */
    fsh_flight_message_reset(&r->pending);
    r->has_pending = false;
  }
  for (;;) {
    fsh_flight_message m;
    bool done = false;
    FSH_RETURN_NOT_OK(reader_recv(r, &m, &done, err));
    if (done) return 0;
    int rc = reader_decode(r, &m, batch, err);
    fsh_flight_message_reset(&m);
    if (rc || *batch) return rc;
  }
}

int fsh_flight_reader_next_raw(fsh_flight_reader *r, fsh_flight_message *m, bool *done,
                               fsh_error *err) {
  memset(m, 0, sizeof *m);
  *done = false;
  if (r->has_pending) {
    *m = r->pending;
    memset(&r->pending, 0, sizeof r->pending);
    r->has_pending = false;
    return 0;
  }
  FSH_RETURN_NOT_OK(reader_recv(r, m, done, err));
  if (*done || !m->metadata || fsh_ipc_decoder_schema(r->dec)) return 0;
  /* Keep the schema known (fsh_flight_reader_schema) without decoding
   * bodies: only a schema message is decoded here. */
  fsh_ipc_message_type type = FSH_IPC_NONE;
  int64_t body_length = 0;
  if (fsh_ipc_peek_message(m->metadata, &type, &body_length, NULL) == 0 &&
      type == FSH_IPC_SCHEMA) {
    fsh_batch *b = NULL;
    int rc = reader_decode(r, m, &b, err);
    if (rc) {
      fsh_flight_message_reset(m);
      return rc;
    }
  }
  return 0;
}

void fsh_flight_reader_cancel(fsh_flight_reader *r) {
  if (r) fsh_flight_rpc_cancel(r->rpc);
}

void fsh_flight_reader_free(fsh_flight_reader *r) {
  if (!r) return;
  if (r->has_pending) fsh_flight_message_reset(&r->pending);
  if (!r->eos) fsh_flight_rpc_cancel(r->rpc); /* abandoned mid-stream */
  fsh_flight_rpc_unref(r->rpc);
  fsh_ipc_decoder_free(r->dec);
  fsh_free(r);
}

int fsh_flight_do_get(fsh_flight_client *c, const fsh_bytes *ticket, fsh_flight_reader **out,
                      fsh_error *err) {
  *out = NULL;
  grpc_byte_buffer *req = NULL;
  int rc = fsh_flight_wire_encode_bytes(FSH_WIRE_TICKET, ticket ? ticket->data : NULL,
                                        ticket ? ticket->size : 0, &req, err);
  if (rc) return fsh_error_prefix(err, rc, "DoGet %s: encoding the ticket: ", c->uri);
  fsh_flight_rpc *rpc = NULL;
  rc = fsh_flight_rpc_start(c, "DoGet", NULL, &rpc, err);
  if (rc) {
    grpc_byte_buffer_destroy(req);
    return rc;
  }
  rc = fsh_flight_rpc_send(rpc, req, true, err);
  if (rc == 0) rc = reader_new(rpc, out, err);
  fsh_flight_rpc_unref(rpc); /* the reader holds its own reference */
  return rc;
}

/* ---- writer -------------------------------------------------------------------- */

struct fsh_flight_writer {
  fsh_flight_rpc *rpc; /* one reference */
  fsh_ipc_encoder *enc; /* NULL when opened without a schema (raw only) */
  fsh_flight_descriptor descriptor;
  bool descriptor_sent;
  bool exchange;
  bool failed;
};

static void writer_free(fsh_flight_writer *w) {
  fsh_flight_rpc_unref(w->rpc);
  fsh_ipc_encoder_free(w->enc);
  fsh_flight_descriptor_reset(&w->descriptor);
  fsh_free(w);
}

/* Sends one FlightData; the descriptor rides on the first one. */
static int writer_send(fsh_flight_writer *w, const fsh_ipc_payload *p, fsh_buffer *app_metadata,
                       fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, EIO, "%s %s: the stream failed earlier", w->rpc->method,
                         w->rpc->client->uri);
  if (w->rpc->sent_close)
    return fsh_error_set(err, EINVAL, "%s %s: write after close", w->rpc->method,
                         w->rpc->client->uri);
  grpc_byte_buffer *bb = NULL;
  int rc = fsh_flight_data_encode(p, app_metadata, w->descriptor_sent ? NULL : &w->descriptor,
                                  &bb, err);
  if (rc) return fsh_flight_rpc_error(w->rpc, rc, err);
  w->descriptor_sent = true;
  rc = fsh_flight_rpc_send(w->rpc, bb, false, err);
  if (rc) w->failed = true;
  return rc;
}

static int writer_open(fsh_flight_client *c, const char *method, const fsh_flight_descriptor *d,
                       fsh_schema *schema, const fsh_ipc_write_options *opts,
                       fsh_flight_writer **out, fsh_error *err) {
  *out = NULL;
  fsh_ipc_write_options defaults;
  if (!opts) {
    fsh_ipc_write_options_init(&defaults);
    opts = &defaults;
  }
  fsh_flight_writer *w = fsh_calloc(1, sizeof *w);
  if (!w) return fsh_error_set(err, ENOMEM, "%s %s: out of memory", method, c->uri);
  int rc = 0;
  if (d && fsh_flight_descriptor_copy(&w->descriptor, d) != 0)
    rc = fsh_error_set(err, ENOMEM, "%s %s: out of memory", method, c->uri);
  if (rc == 0 && schema && (rc = fsh_ipc_encoder_new(schema, opts, &w->enc, err)) != 0)
    fsh_error_prefix(err, rc, "%s %s: ", method, c->uri);
  if (rc == 0) rc = fsh_flight_rpc_start(c, method, NULL, &w->rpc, err);
  if (rc) {
    if (w->rpc == NULL) {
      fsh_ipc_encoder_free(w->enc);
      fsh_flight_descriptor_reset(&w->descriptor);
      fsh_free(w);
    } else {
      writer_free(w);
    }
    return rc;
  }
  /* The schema goes now, with the descriptor; without a schema the
   * initial metadata alone starts the call (errors such as a refused
   * token come back early) and the descriptor rides on the first raw
   * message. */
  if (w->enc) {
    fsh_ipc_payload p;
    rc = fsh_ipc_encode_schema(w->enc, &p, err);
    if (rc) {
      fsh_flight_rpc_error(w->rpc, rc, err);
    } else {
      rc = writer_send(w, &p, NULL, err);
      fsh_ipc_payload_reset(&p);
    }
  } else {
    rc = fsh_flight_rpc_send(w->rpc, NULL, false, err);
  }
  if (rc) {
    writer_free(w);
    return rc;
  }
  *out = w;
  return 0;
}

int fsh_flight_do_put(fsh_flight_client *c, const fsh_flight_descriptor *d, fsh_schema *schema,
                      const fsh_ipc_write_options *opts, fsh_flight_writer **out,
                      fsh_error *err) {
  return writer_open(c, "DoPut", d, schema, opts, out, err);
}

int fsh_flight_writer_write(fsh_flight_writer *w, fsh_batch *batch, fsh_error *err) {
  if (!w->enc)
    return fsh_error_set(err, EINVAL, "%s %s: opened without a schema: only raw writes",
                         w->rpc->method, w->rpc->client->uri);
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  int rc = fsh_ipc_encode_batch(w->enc, batch, &ps, &n, err);
  if (rc) return fsh_flight_rpc_error(w->rpc, rc, err);
  for (int32_t i = 0; i < n; i++) {
    if (rc == 0) rc = writer_send(w, &ps[i], NULL, err);
    fsh_ipc_payload_reset(&ps[i]);
  }
  fsh_free(ps);
  return rc;
}

int fsh_flight_writer_write_raw(fsh_flight_writer *w, const fsh_ipc_payload *p,
                                fsh_buffer *app_metadata, fsh_error *err) {
  return writer_send(w, p, app_metadata, err);
}

int fsh_flight_writer_close(fsh_flight_writer *w, fsh_buffer **put_result, fsh_error *err) {
  if (put_result) *put_result = NULL;
  int rc = 0;
  if (w->failed)
    rc = fsh_flight_rpc_finish(w->rpc, err);
  if (rc == 0 && w->failed)
    rc = fsh_error_set(err, EIO, "%s %s: the stream failed earlier", w->rpc->method,
                       w->rpc->client->uri);
  if (rc == 0 && !w->descriptor_sent && !w->exchange) {
    /* A DoPut with no message at all still tells the server what it is. */
    rc = writer_send(w, NULL, NULL, err);
  }
  if (rc == 0) rc = fsh_flight_rpc_send(w->rpc, NULL, true, err);
  if (rc == 0 && !w->exchange) {
    /* The PutResults, then the status. */
    fsh_buffer *last = NULL;
    for (;;) {
      grpc_byte_buffer *bb = NULL;
      if ((rc = fsh_flight_rpc_recv(w->rpc, &bb, err)) != 0 || !bb) break;
      fsh_bytes b = {0};
      rc = fsh_flight_wire_decode_bytes(FSH_WIRE_PUT_RESULT, bb, &b, err);
      grpc_byte_buffer_destroy(bb);
      if (rc) {
        rc = fsh_flight_rpc_error(w->rpc, rc, err);
        break;
      }
      fsh_buffer_unref(last);
      last = fsh_buffer_copy(b.data, b.size);
      fsh_bytes_reset(&b);
      if (!last) {
        rc = fsh_error_set(err, ENOMEM, "%s: out of memory", w->rpc->method);
        break;
      }
    }
    if (rc == 0 && put_result)
      *put_result = last;
    else
      fsh_buffer_unref(last);
  }
  writer_free(w);
  return rc;
}

void fsh_flight_writer_cancel(fsh_flight_writer *w) {
  if (!w) return;
  fsh_flight_rpc_cancel(w->rpc);
  writer_free(w);
}

/* ---- DoExchange ------------------------------------------------------------------ */

int fsh_flight_do_exchange(fsh_flight_client *c, const fsh_flight_descriptor *d,
                           fsh_schema *schema, const fsh_ipc_write_options *opts,
                           fsh_flight_writer **w, fsh_flight_reader **r, fsh_error *err) {
  *w = NULL;
  *r = NULL;
  fsh_flight_writer *writer = NULL;
  FSH_RETURN_NOT_OK(writer_open(c, "DoExchange", d, schema, opts, &writer, err));
  writer->exchange = true;
  int rc = reader_new(writer->rpc, r, err);
  if (rc) {
    fsh_flight_writer_cancel(writer);
    return rc;
  }
  *w = writer;
  return 0;
}
