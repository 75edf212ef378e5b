/* table.c -- loading a whole table for the CLI from IPC (file or stream) or
 * from integration JSON, and comparing two tables row range by row range. */
#include "cli/cli.h"

#include <errno.h>
#include <string.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/json.h>

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

void cli_table_reset(cli_table *t) {
  for (int64_t i = 0; i < t->n_batches; i++) fsh_batch_unref(t->batches[i]);
  fsh_free(t->batches);
  fsh_schema_unref(t->schema);
  memset(t, 0, sizeof *t);
}

int64_t cli_table_rows(const cli_table *t) {
  int64_t rows = 0;
  for (int64_t i = 0; i < t->n_batches; i++) rows += t->batches[i]->length;
  return rows;
}

static int table_append(cli_table *t, fsh_batch *b, fsh_error *err) {
  fsh_batch **grown = fsh_realloc(t->batches, (size_t)(t->n_batches + 1) * sizeof *grown);
  if (!grown) {
    fsh_batch_unref(b);
    return fsh_error_set(err, ENOMEM, "out of memory holding %lld batches",
                         (long long)t->n_batches + 1);
  }
  t->batches = grown;
  t->batches[t->n_batches++] = b;
  return 0;
}

static int load_ipc(const char *path, cli_table *t, fsh_error *err) {
  fsh_batch_stream s;
  FSH_RETURN_NOT_OK(fsh_ipc_open_path(path, &s, err));
  t->schema = fsh_schema_ref(s.schema);
  int rc = 0;
  for (;;) {
    fsh_batch *b = NULL;
    if ((rc = s.get_next(&s, &b, err)) != 0 || !b) break;
    if ((rc = table_append(t, b, err)) != 0) break;
  }
  s.release(&s);
  return rc;
}

static int load_json(const char *path, cli_table *t, fsh_error *err) {
  fsh_json_data d;
  FSH_RETURN_NOT_OK(fsh_json_read_path(path, &d, err));
  t->schema = d.schema;
  t->batches = d.batches;
  t->n_batches = d.n_batches;
  return 0;
}

int cli_table_load(const char *path, cli_table *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  int rc = ends_with(path, ".json") || ends_with(path, ".json.gz") ? load_json(path, out, err)
                                                                   : load_ipc(path, out, err);
  if (rc) cli_table_reset(out);
  return rc;
}

/* Compares two tables by rows, whatever their batch boundaries: walks both
 * with cursors and compares the overlapping slices. */
bool cli_tables_equal(const cli_table *a, const cli_table *b, fsh_error *diff) {
  if (!fsh_schema_equals(a->schema, b->schema, true, diff)) return false;
  int64_t ra = cli_table_rows(a), rb = cli_table_rows(b);
  if (ra != rb) {
    fsh_error_set(diff, 1, "row counts differ: %lld != %lld", (long long)ra, (long long)rb);
    return false;
  }
  int64_t ia = 0, ib = 0, oa = 0, ob = 0, row = 0;
  while (row < ra) {
    while (a->batches[ia]->length == oa) ia++, oa = 0;
    while (b->batches[ib]->length == ob) ib++, ob = 0;
    int64_t n = a->batches[ia]->length - oa;
    if (b->batches[ib]->length - ob < n) n = b->batches[ib]->length - ob;
    fsh_batch *sa = fsh_batch_slice(a->batches[ia], oa, n);
    fsh_batch *sb = fsh_batch_slice(b->batches[ib], ob, n);
    bool eq = sa && sb && fsh_batch_equals(sa, sb, diff);
    if (!sa || !sb) fsh_error_set(diff, ENOMEM, "out of memory comparing");
    fsh_batch_unref(sa);
    fsh_batch_unref(sb);
    if (!eq) {
      fsh_error_prefix(diff, 1, "rows from %lld: ", (long long)row);
      return false;
    }
    oa += n, ob += n, row += n;
  }
  return true;
}

int cli_table_write(const cli_table *t, const char *out_path, bool file_format,
                       const fsh_ipc_write_options *opts, fsh_error *err) {
  fsh_output *out;
  FSH_RETURN_NOT_OK(fsh_output_open_path(out_path, &out, err));
  int rc = 0;
  if (file_format) {
    fsh_ipc_file_writer *w;
    if ((rc = fsh_ipc_file_writer_open(out, t->schema, opts, &w, err))) return rc;
    for (int64_t i = 0; i < t->n_batches && !rc; i++)
      rc = fsh_ipc_file_writer_write(w, t->batches[i], err);
    if (rc)
      fsh_ipc_file_writer_abort(w);
    else
      rc = fsh_ipc_file_writer_close(w, err);
  } else {
    fsh_ipc_stream_writer *w;
    if ((rc = fsh_ipc_stream_writer_open(out, t->schema, opts, &w, err))) return rc;
    for (int64_t i = 0; i < t->n_batches && !rc; i++)
      rc = fsh_ipc_stream_writer_write(w, t->batches[i], err);
    if (rc)
      fsh_ipc_stream_writer_abort(w);
    else
      rc = fsh_ipc_stream_writer_close(w, err);
  }
  return rc;
}

