/* write_batch_stream.c -- drains a batch stream into an IPC stream or file:
 * the one-call writer behind the Python package's write_ipc and tools that
 * pipe batches from a reader to a writer. */
#include <flightshuffle/ipc.h>

#include <errno.h>

int fsh_ipc_write_batch_stream(fsh_batch_stream *s, fsh_output *out, bool file_format,
                               const fsh_ipc_write_options *opts, fsh_error *err) {
  fsh_ipc_write_options defaults;
  if (!opts) {
    fsh_ipc_write_options_init(&defaults);
    opts = &defaults;
  }
  if (!s || !s->get_next || !s->schema) {
    out->close(out, true, NULL);
    return fsh_error_set(err, EINVAL, "writing IPC: the batch stream is released");
  }
  fsh_ipc_stream_writer *sw = NULL;
  fsh_ipc_file_writer *fw = NULL;
  int rc = file_format ? fsh_ipc_file_writer_open(out, s->schema, opts, &fw, err)
                       : fsh_ipc_stream_writer_open(out, s->schema, opts, &sw, err);
  if (rc) return rc; /* the writer closed `out` */
  for (;;) {
    fsh_batch *b = NULL;
    if ((rc = s->get_next(s, &b, err)) != 0 || !b) break;
    rc = file_format ? fsh_ipc_file_writer_write(fw, b, err)
                     : fsh_ipc_stream_writer_write(sw, b, err);
    fsh_batch_unref(b);
    if (rc) break;
  }
  if (rc) {
    if (fw) fsh_ipc_file_writer_abort(fw);
    if (sw) fsh_ipc_stream_writer_abort(sw);
    return rc;
  }
  return file_format ? fsh_ipc_file_writer_close(fw, err) : fsh_ipc_stream_writer_close(sw, err);
}
