/* file_writer.c -- the IPC file format writer: "ARROW1" + 2 padding bytes,
 * the stream format (schema, dictionaries, record batches, end-of-stream
 * marker), the Footer flatbuffer with the schema and the Blocks {offset,
 * metadata length with its prefix, body length} of every dictionary and
 * record batch, the footer's int32 length, and "ARROW1". */
#include <errno.h>
#include <string.h>

#include "ipc/writer_internal.h"

typedef struct block_list {
  fsh_ipc_block *items;
  int64_t n, cap;
} block_list;

struct fsh_ipc_file_writer {
  fsh_output *out;
  fsh_ipc_encoder *enc;
  fsh_schema *schema;
  block_list dicts, batches;
  bool failed;
};

static int block_push(block_list *l, fsh_ipc_block b) {
  if (l->n == l->cap) {
    int64_t nc = l->cap ? l->cap * 2 : 16;
    fsh_ipc_block *p = fsh_realloc(l->items, sizeof(fsh_ipc_block) * (size_t)nc);
    if (!p) return ENOMEM;
    l->items = p;
    l->cap = nc;
  }
  l->items[l->n++] = b;
  return 0;
}

static void writer_free(fsh_ipc_file_writer *w) {
  fsh_ipc_encoder_free(w->enc);
  fsh_schema_unref(w->schema);
  fsh_free(w->dicts.items);
  fsh_free(w->batches.items);
  fsh_free(w);
}

static int write_bytes(fsh_output *out, const void *data, size_t n, fsh_error *err) {
  struct iovec v = {(void *)data, n};
  return out->writev(out, &v, 1, err);
}

int fsh_ipc_file_writer_open(fsh_output *out, fsh_schema *schema,
                             const fsh_ipc_write_options *opts, fsh_ipc_file_writer **w,
                             fsh_error *err) {
  static const uint8_t magic[8] = {'A', 'R', 'R', 'O', 'W', '1', 0, 0};
  fsh_ipc_file_writer *fw = fsh_calloc(1, sizeof *fw);
  int rc = 0;
  if (!fw) rc = fsh_error_set(err, ENOMEM, "IPC file writer: out of memory");
  if (rc == 0) rc = fsh_ipc_encoder_new(schema, opts, &fw->enc, err);
  if (rc == 0) {
    fsh_ipc_encoder_set_file_format(fw->enc, true);
    fw->schema = fsh_schema_ref(schema);
    rc = write_bytes(out, magic, 8, err);
  }
  fsh_ipc_payload p = {0};
  if (rc == 0) rc = fsh_ipc_encode_schema(fw->enc, &p, err);
  if (rc == 0) rc = fsh_ipc_write_payload(out, &p, err);
  fsh_ipc_payload_reset(&p);
  if (rc) {
    (void)fsh_error_prefix(err, rc, "writing IPC file %s: ", out->name ? out->name : "?");
    out->close(out, true, NULL);
    if (fw) writer_free(fw);
    return rc;
  }
  fw->out = out;
  *w = fw;
  return 0;
}

int fsh_ipc_file_writer_write(fsh_ipc_file_writer *w, fsh_batch *batch, fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, EIO, "IPC file writer: an earlier write to %s failed", w->out->name);
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  FSH_RETURN_NOT_OK(fsh_ipc_encode_batch(w->enc, batch, &ps, &n, err));
  int rc = 0;
  for (int32_t i = 0; i < n; i++) {
    if (rc == 0) {
      fsh_ipc_block b = {.offset = w->out->position,
                         .metadata_length = (int32_t)(8 + fsh_round_up(ps[i].metadata->size, 8)),
                         .body_length = ps[i].body_length};
      rc = fsh_ipc_write_payload(w->out, &ps[i], err);
      if (rc == 0) {
        block_list *l = ps[i].type == FSH_IPC_DICTIONARY_BATCH ? &w->dicts : &w->batches;
        if (block_push(l, b)) rc = fsh_error_set(err, ENOMEM, "IPC file writer: out of memory");
      }
    }
    fsh_ipc_payload_reset(&ps[i]);
  }
  fsh_free(ps);
  if (rc) w->failed = true;
  return rc;
}

int fsh_ipc_file_writer_close(fsh_ipc_file_writer *w, fsh_error *err) {
  int rc = 0;
  fsh_buffer *footer = NULL;
  if (w->failed)
    rc = fsh_error_set(err, EIO, "IPC file writer: an earlier write to %s failed", w->out->name);
  if (rc == 0) {
    uint8_t eos[8];
    fsh_store_le32(eos, FSH_IPC_CONTINUATION);
    fsh_store_le32(eos + 4, 0);
    rc = write_bytes(w->out, eos, 8, err);
  }
  if (rc == 0)
    rc = fsh_ipc_encode_footer(w->schema, w->dicts.items, w->dicts.n, w->batches.items,
                               w->batches.n, &footer, err);
  if (rc == 0) {
    uint8_t tail[4 + FSH_IPC_MAGIC_LEN];
    fsh_store_le32(tail, (uint32_t)footer->size);
    memcpy(tail + 4, FSH_IPC_MAGIC, FSH_IPC_MAGIC_LEN);
    struct iovec v[2] = {{footer->data, (size_t)footer->size}, {tail, sizeof tail}};
    rc = w->out->writev(w->out, v, 2, err);
  }
  fsh_buffer_unref(footer);
  if (rc == 0)
    rc = w->out->close(w->out, false, err);
  else
    w->out->close(w->out, true, NULL);
  writer_free(w);
  return rc;
}

void fsh_ipc_file_writer_abort(fsh_ipc_file_writer *w) {
  if (!w) return;
  w->out->close(w->out, true, NULL);
  writer_free(w);
}
