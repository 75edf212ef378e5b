/* fuzz_ipc_file.c -- libFuzzer target: the input is an Arrow IPC file read
 * from memory: footer, dictionaries, then every record batch (last first,
 * to exercise random access), each validated; then the same bytes through
 * fsh_ipc_open_buffer's file/stream detection. Everything is freed. */
#include <flightshuffle/ipc.h>

#include <stdint.h>
#include <stddef.h>

static void no_release(void *ctx) { (void)ctx; }

static void read_file(fsh_buffer *buf) {
  fsh_error err;
  fsh_input *in;
  fsh_ipc_file_reader *r;
  if (fsh_input_from_buffer(buf, &in, &err) != 0) return;
  if (fsh_ipc_file_reader_open(in, &r, &err) != 0) return;
  int64_t n = fsh_ipc_file_reader_num_batches(r);
  for (int64_t i = n - 1; i >= 0 && i >= n - 1000; i--) {
    fsh_batch *b;
    if (fsh_ipc_file_reader_read(r, i, &b, &err) != 0) continue;
    if (fsh_batch_validate(b, true, &err) != 0) { /* expected on bad input */ }
    fsh_batch_unref(b);
  }
  fsh_ipc_file_reader_free(r);
}

static void read_any(fsh_buffer *buf) {
  fsh_error err;
  fsh_batch_stream s;
  if (fsh_ipc_open_buffer(buf, "fuzz", &s, &err) != 0) return;
  for (int i = 0; i < 1000; i++) {
    fsh_batch *b;
    if (s.get_next(&s, &b, &err) != 0 || !b) break;
    fsh_batch_unref(b);
  }
  s.release(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Wrap, do not copy: reads past the input's end hit ASan's redzone. */
  fsh_buffer *buf = fsh_buffer_wrap(data, (int64_t)size, no_release, NULL);
  if (!buf) return 0;
  read_file(buf);
  read_any(buf);
  fsh_buffer_unref(buf);
  return 0;
}
