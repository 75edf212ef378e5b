/* fuzz_splice.c -- libFuzzer target: the input is an Arrow IPC stream whose
 * record batches are spliced into one message (fsh_ipc_splicer, as the
 * pre-shuffle merge does with a partition's blocks), in as many splices as
 * the input's batches (every message held before one finish) and again one
 * message at a time. Errors are expected (ENOTSUP for unions and
 * dictionaries, EINVAL for a part that does not fit its schema or body);
 * crashes, leaks and out-of-bounds reads are bugs, and so is a spliced
 * message our decoder refuses. */
#include <flightshuffle/ipc.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void no_release(void *ctx) { (void)ctx; }

/* A spliced message must decode against the schema. */
static void check_decodes(fsh_ipc_decoder *d, const uint8_t *out, int64_t len) {
  fsh_error err;
  fsh_buffer *copy = fsh_buffer_copy(out, len);
  if (!copy) return;
  fsh_batch *b = NULL;
  int64_t framed = 0;
  if (fsh_ipc_decode_framed(d, copy, 0, len, &framed, &b, &err) != 0 || !b || framed != len)
    abort(); /* the splicer wrote what the decoder does not take */
  fsh_batch_unref(b);
  fsh_buffer_unref(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fsh_error err;
  /* Wrap, do not copy: reads past the input's end hit ASan's redzone. */
  fsh_buffer *buf = fsh_buffer_wrap(data, (int64_t)size, no_release, NULL);
  fsh_ipc_decoder *d = NULL;
  if (!buf || fsh_ipc_decoder_new(&d, &err) != 0) {
    fsh_buffer_unref(buf);
    return 0;
  }
  fsh_ipc_splicer *all = NULL, *one = NULL;
  int64_t at = 0;
  for (int i = 0; i < 1000 && at + 8 <= buf->size; i++) {
    uint32_t mlen;
    memcpy(&mlen, buf->data + at + 4, 4);
    if (mlen == 0 || mlen > (uint64_t)(buf->size - at - 8)) break;
    fsh_buffer *md = fsh_buffer_slice(buf, at + 8, mlen);
    fsh_ipc_message_type type = FSH_IPC_NONE;
    int64_t body = 0;
    int rc = md ? fsh_ipc_peek_message(md, &type, &body, &err) : -1;
    if (rc == 0 && type == FSH_IPC_SCHEMA && !all) {
      fsh_batch *none = NULL;
      if (fsh_ipc_decode_message(d, md, NULL, &none, &err) == 0 && fsh_ipc_decoder_schema(d) &&
          fsh_ipc_splicer_new(fsh_ipc_decoder_schema(d), &all, &err) == 0 &&
          fsh_ipc_splicer_new(fsh_ipc_decoder_schema(d), &one, &err) != 0) {
        fsh_ipc_splicer_free(all);
        all = NULL;
      }
      fsh_batch_unref(none);
    } else if (rc == 0 && all) {
      int64_t framed = 0, rows = 0;
      if (fsh_ipc_splicer_add(all, buf, at, buf->size - at, &framed, &rows, &err) != 0) {
        /* expected on bad input: that message is not held */
      }
      if (fsh_ipc_splicer_add(one, buf, at, buf->size - at, &framed, &rows, &err) == 0) {
        const uint8_t *out = NULL;
        int64_t len = 0;
        if (fsh_ipc_splicer_finish(one, &out, &len, &rows, &err) == 0) check_decodes(d, out, len);
        fsh_ipc_splicer_clear(one);
      }
    }
    fsh_buffer_unref(md);
    if (rc != 0 || body < 0 || body > buf->size - at - 8 - (int64_t)mlen) break;
    at += 8 + (int64_t)mlen + body;
  }
  if (all && fsh_ipc_splicer_count(all) > 0) {
    const uint8_t *out = NULL;
    int64_t len = 0, rows = 0;
    if (fsh_ipc_splicer_finish(all, &out, &len, &rows, &err) == 0) check_decodes(d, out, len);
  }
  fsh_ipc_splicer_free(all);
  fsh_ipc_splicer_free(one);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(buf);
  return 0;
}
