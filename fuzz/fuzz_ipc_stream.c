/* fuzz_ipc_stream.c -- libFuzzer target: the input is an Arrow IPC stream,
 * read from memory (zero-copy) message by message; every decoded batch is
 * validated; everything is freed. Errors are expected, crashes, leaks and
 * out-of-bounds reads are bugs. */
#include <flightshuffle/ipc.h>

#include <stdint.h>
#include <stddef.h>

static void no_release(void *ctx) { (void)ctx; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fsh_error err;
  fsh_input *in;
  fsh_ipc_stream_reader *r;
  /* Wrap, do not copy: reads past the input's end hit ASan's redzone. */
  fsh_buffer *buf = fsh_buffer_wrap(data, (int64_t)size, no_release, NULL);
  if (!buf) return 0;
  if (fsh_input_from_buffer(buf, &in, &err) == 0 && fsh_ipc_stream_reader_open(in, &r, &err) == 0) {
    for (int i = 0; i < 1000; i++) {
      fsh_batch *b;
      if (fsh_ipc_stream_reader_next(r, &b, &err) != 0 || !b) break;
      if (fsh_batch_validate(b, true, &err) != 0) { /* expected on bad input */ }
      fsh_batch_unref(b);
    }
    fsh_ipc_stream_reader_free(r);
  }
  /* The same bytes as a standalone (possibly framed) schema message. */
  fsh_schema *schema;
  if (fsh_ipc_decode_schema_message(buf, &schema, &err) == 0) fsh_schema_unref(schema);
  fsh_buffer_unref(buf);
  return 0;
}
