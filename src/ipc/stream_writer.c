/* stream_writer.c -- encapsulated message framing and the IPC stream
 * format writer: schema message, then dictionary and record batch
 * messages, then the end-of-stream marker (0xFFFFFFFF 00000000).
 * Message bodies go out with writev straight from the payload's segments:
 * no flattening. */
#include <errno.h>
#include <string.h>

#include "ipc/writer_internal.h"

int fsh_ipc_write_payload(fsh_output *out, const fsh_ipc_payload *p, fsh_error *err) {
  static const uint8_t zeros[8];
  if (!p->metadata) return fsh_error_set(err, EINVAL, "IPC write: payload has no metadata");
  int64_t md = p->metadata->size;
  int64_t pad = fsh_round_up(md, FSH_IPC_ALIGN) - md;
  if (md + pad > INT32_MAX)
    return fsh_error_set(err, EINVAL, "IPC write: metadata of %lld bytes too large",
                         (long long)md);
  uint8_t prefix[8];
  fsh_store_le32(prefix, FSH_IPC_CONTINUATION);
  fsh_store_le32(prefix + 4, (uint32_t)(md + pad));

  struct iovec local[64];
  int n_iov = 3 + p->n_body;
  struct iovec *iov = n_iov <= 64 ? local : fsh_malloc(sizeof(struct iovec) * (size_t)n_iov);
  if (!iov) return fsh_error_set(err, ENOMEM, "IPC write: out of memory");
  int k = 0;
  iov[k++] = (struct iovec){prefix, 8};
  iov[k++] = (struct iovec){p->metadata->data, (size_t)md};
  if (pad) iov[k++] = (struct iovec){(void *)zeros, (size_t)pad};
  int64_t body = 0;
  for (int32_t i = 0; i < p->n_body; i++) {
    if (p->body[i]->size == 0) continue;
    iov[k++] = (struct iovec){p->body[i]->data, (size_t)p->body[i]->size};
    body += p->body[i]->size;
  }
  int rc = 0;
  if (body != p->body_length || body % FSH_IPC_ALIGN != 0)
    rc = fsh_error_set(err, EINVAL, "IPC write: body segments add up to %lld bytes, %lld announced",
                       (long long)body, (long long)p->body_length);
  else
    rc = out->writev(out, iov, k, err);
  if (iov != local) fsh_free(iov);
  return rc;
}

struct fsh_ipc_stream_writer {
  fsh_output *out;
  fsh_ipc_encoder *enc;
  bool failed;
};

/* Writes payloads[0..n) and resets them all (written or not). */
static int write_payloads(fsh_output *out, fsh_ipc_payload *ps, int32_t n, fsh_error *err) {
  int rc = 0;
  for (int32_t i = 0; i < n; i++) {
    if (rc == 0) rc = fsh_ipc_write_payload(out, &ps[i], err);
    fsh_ipc_payload_reset(&ps[i]);
  }
  fsh_free(ps);
  return rc;
}

int fsh_ipc_stream_writer_open(fsh_output *out, fsh_schema *schema,
                               const fsh_ipc_write_options *opts, fsh_ipc_stream_writer **w,
                               fsh_error *err) {
  fsh_ipc_stream_writer *sw = fsh_calloc(1, sizeof *sw);
  int rc = 0;
  if (!sw) rc = fsh_error_set(err, ENOMEM, "IPC stream writer: out of memory");
  if (rc == 0) rc = fsh_ipc_encoder_new(schema, opts, &sw->enc, err);
  fsh_ipc_payload p = {0};
  if (rc == 0) rc = fsh_ipc_encode_schema(sw->enc, &p, err);
  if (rc == 0) rc = fsh_ipc_write_payload(out, &p, err);
  fsh_ipc_payload_reset(&p);
  if (rc) {
    (void)fsh_error_prefix(err, rc, "writing IPC stream to %s: ", out->name ? out->name : "?");
    out->close(out, true, NULL);
    if (sw) fsh_ipc_encoder_free(sw->enc);
    fsh_free(sw);
    return rc;
  }
  sw->out = out;
  *w = sw;
  return 0;
}

int fsh_ipc_stream_writer_write(fsh_ipc_stream_writer *w, fsh_batch *batch, fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, EIO, "IPC stream writer: an earlier write to %s failed",
                         w->out->name);
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  FSH_RETURN_NOT_OK(fsh_ipc_encode_batch(w->enc, batch, &ps, &n, err));
  int rc = write_payloads(w->out, ps, n, err);
  if (rc) w->failed = true; /* a partial message may be out there */
  return rc;
}

int fsh_ipc_stream_writer_close(fsh_ipc_stream_writer *w, fsh_error *err) {
  int rc = 0;
  if (w->failed) {
    rc = fsh_error_set(err, EIO, "IPC stream writer: an earlier write to %s failed",
                       w->out->name);
    w->out->close(w->out, true, NULL);
  } else {
    uint8_t eos[8];
    fsh_store_le32(eos, FSH_IPC_CONTINUATION);
    fsh_store_le32(eos + 4, 0);
    struct iovec v = {eos, 8};
    rc = w->out->writev(w->out, &v, 1, err);
    if (rc == 0)
      rc = w->out->close(w->out, false, err);
    else
      w->out->close(w->out, true, NULL);
  }
  fsh_ipc_encoder_free(w->enc);
  fsh_free(w);
  return rc;
}

void fsh_ipc_stream_writer_abort(fsh_ipc_stream_writer *w) {
  if (!w) return;
  w->out->close(w->out, true, NULL);
  fsh_ipc_encoder_free(w->enc);
  fsh_free(w);
}
