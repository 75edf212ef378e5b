/* file_reader.c -- the Arrow IPC file format ("ARROW1" magic at both
 * ends, a Footer flatbuffer with the schema and the dictionary and record
 * batch Blocks) with random access to batches, and fsh_ipc_open_path /
 * fsh_ipc_open_buffer, which tell file from stream by the magic. */
#include "ipc/read_internal.h"

#include <errno.h>
#include <string.h>

typedef struct block {
  int64_t offset, meta_len, body_len;
} block;

struct fsh_ipc_file_reader {
  fsh_input *in;
  fsh_ipc_decoder *dec;
  int64_t n_dicts, n_batches;
  block *dicts, *batches;
};

enum { FOOTER_SCHEMA = 1, FOOTER_DICTIONARIES = 2, FOOTER_BATCHES = 3 };
#define FILE_TAIL 10 /* int32 footer length + magic */

/* Copies a vector of Block structs, each checked to end before `limit`. */
static int read_blocks(const fsh_fb_table *footer, int slot, int64_t limit, block **out,
                       int64_t *n, fsh_error *err) {
  fsh_fb_vector v;
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(footer, slot, 24, &v, err));
  *n = v.n;
  *out = fsh_calloc((size_t)(v.n > 0 ? v.n : 1), sizeof **out);
  if (!*out) return fsh_error_set(err, ENOMEM, "out of memory for %lld blocks", (long long)v.n);
  for (int64_t i = 0; i < v.n; i++) {
    const uint8_t *p = fsh_fb_vector_elem(&v, i);
    block b = {fsh_fb_load_i64(p), fsh_fb_load_i32(p + 8), fsh_fb_load_i64(p + 16)};
    if (b.offset < 8 || b.meta_len < 4 || b.body_len < 0 || b.offset > limit - b.meta_len ||
        b.offset + b.meta_len > limit - b.body_len)
      return fsh_error_set(err, EINVAL,
                           "block %lld [offset %lld, metadata %lld, body %lld] lies outside the "
                           "%lld bytes before the footer",
                           (long long)i, (long long)b.offset, (long long)b.meta_len,
                           (long long)b.body_len, (long long)limit);
    (*out)[i] = b;
  }
  return 0;
}

/* Reads a block: the framed metadata and the body, in one read. */
static int read_block(fsh_ipc_file_reader *r, const block *b, fsh_buffer **meta,
                      fsh_buffer **body, fsh_error *err) {
  fsh_buffer *all;
  int64_t off, len;
  *meta = *body = NULL;
  FSH_RETURN_NOT_OK(r->in->read_at(r->in, b->offset, b->meta_len + b->body_len, &all, err));
  int rc = 0;
  if (all->size != b->meta_len + b->body_len)
    rc = fsh_error_set(err, EINVAL, "short read");
  else
    rc = fsh_ipc_parse_prefix(all->data, b->meta_len, &off, &len, err);
  if (rc == 0 && len > b->meta_len - off)
    rc = fsh_error_set(err, EINVAL, "metadata of %lld bytes exceeds the block's %lld",
                       (long long)len, (long long)b->meta_len);
  if (rc == 0 && (!(*meta = fsh_buffer_slice(all, off, len)) ||
                  !(*body = fsh_buffer_slice(all, b->meta_len, b->body_len))))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  fsh_buffer_unref(all);
  if (rc != 0) {
    fsh_buffer_unref(*meta);
    fsh_buffer_unref(*body);
    *meta = *body = NULL;
  }
  return rc;
}

/* Decodes block b, which must be of the given message type. */
static int decode_block(fsh_ipc_file_reader *r, const block *b, fsh_ipc_message_type want,
                        fsh_batch **batch, fsh_error *err) {
  fsh_buffer *meta, *body;
  fsh_ipc_message_type type;
  int64_t body_len;
  *batch = NULL;
  FSH_RETURN_NOT_OK(read_block(r, b, &meta, &body, err));
  int rc = fsh_ipc_peek_message(meta, &type, &body_len, err);
  if (rc == 0 && type != want)
    rc = fsh_error_set(err, EINVAL, "block holds a message of type %d, expected %d", (int)type,
                       (int)want);
  if (rc == 0) rc = fsh_ipc_decode_message(r->dec, meta, body, batch, err);
  fsh_buffer_unref(meta);
  fsh_buffer_unref(body);
  return rc;
}

/* Reads and decodes the footer: schema and blocks. */
static int read_footer(fsh_ipc_file_reader *r, int64_t size, fsh_error *err) {
  fsh_buffer *tail, *fbuf;
  FSH_RETURN_NOT_OK(r->in->read_at(r->in, size - FILE_TAIL, FILE_TAIL, &tail, err));
  int64_t flen = tail->size == FILE_TAIL ? fsh_fb_load_i32(tail->data) : -1;
  bool magic = tail->size == FILE_TAIL &&
               memcmp(tail->data + 4, FSH_IPC_MAGIC, FSH_IPC_MAGIC_LEN) == 0;
  fsh_buffer_unref(tail);
  if (!magic) return fsh_error_set(err, EINVAL, "no ARROW1 magic at the end of the file");
  if (flen <= 0 || flen > size - FILE_TAIL - 8)
    return fsh_error_set(err, EINVAL, "footer length %lld does not fit a %lld-byte file",
                         (long long)flen, (long long)size);
  int64_t start = size - FILE_TAIL - flen;
  FSH_RETURN_NOT_OK(r->in->read_at(r->in, start, flen, &fbuf, err));
  fsh_fb_reader fb;
  fsh_fb_table footer, st;
  bool has_schema;
  fsh_schema *schema = NULL;
  int rc = fsh_fb_root(&fb, fbuf->data, fbuf->size, &footer, err);
  if (rc == 0) rc = fsh_fb_table_field(&footer, FOOTER_SCHEMA, &st, &has_schema, err);
  if (rc == 0 && !has_schema) rc = fsh_error_set(err, EINVAL, "the footer has no schema");
  if (rc == 0) rc = fsh_ipc_schema_decode(&st, &schema, err);
  if (rc == 0) rc = fsh_ipc_decoder_set_schema(r->dec, schema, err);
  if (rc == 0) rc = read_blocks(&footer, FOOTER_DICTIONARIES, start, &r->dicts, &r->n_dicts, err);
  if (rc == 0) rc = read_blocks(&footer, FOOTER_BATCHES, start, &r->batches, &r->n_batches, err);
  fsh_schema_unref(schema);
  fsh_buffer_unref(fbuf);
  if (rc != 0) return fsh_error_prefix(err, rc, "footer: ");
  return 0;
}

/* Applies every dictionary block, in file order. */
static int load_dictionaries(fsh_ipc_file_reader *r, fsh_error *err) {
  fsh_ipc_decoder_set_file_mode(r->dec, true);
  for (int64_t i = 0; i < r->n_dicts; i++) {
    fsh_batch *unused;
    fsh_ipc_decoder_set_index(r->dec, i);
    int rc = decode_block(r, &r->dicts[i], FSH_IPC_DICTIONARY_BATCH, &unused, err);
    if (rc != 0)
      return fsh_error_prefix(err, rc, "dictionary block %lld (file offset %lld): ", (long long)i,
                              (long long)r->dicts[i].offset);
  }
  return 0;
}

int fsh_ipc_file_reader_open(fsh_input *in, fsh_ipc_file_reader **out, fsh_error *err) {
  fsh_ipc_file_reader *r = fsh_calloc(1, sizeof *r);
  if (!r) {
    in->close(in);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  r->in = in;
  fsh_buffer *head = NULL;
  int64_t size = in->size(in);
  int rc = fsh_ipc_decoder_new(&r->dec, err);
  if (rc == 0 && size < 0)
    rc = fsh_error_set(err, ENOTSUP, "the file format needs a seekable input");
  if (rc == 0 && size < 8 + 4 + FILE_TAIL)
    rc = fsh_error_set(err, EINVAL, "%lld bytes is too small for an Arrow file", (long long)size);
  if (rc == 0) rc = in->read_at(in, 0, 8, &head, err);
  if (rc == 0 && (head->size < FSH_IPC_MAGIC_LEN ||
                  memcmp(head->data, FSH_IPC_MAGIC, FSH_IPC_MAGIC_LEN) != 0))
    rc = fsh_error_set(err, EINVAL, "no ARROW1 magic at the start of the file");
  fsh_buffer_unref(head);
  if (rc == 0) rc = read_footer(r, size, err);
  if (rc == 0) rc = load_dictionaries(r, err);
  if (rc != 0) {
    fsh_error_prefix(err, rc, "%s: ", in->name);
    fsh_ipc_file_reader_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

fsh_schema *fsh_ipc_file_reader_schema(fsh_ipc_file_reader *r) {
  return fsh_ipc_decoder_schema(r->dec);
}

int64_t fsh_ipc_file_reader_num_batches(const fsh_ipc_file_reader *r) { return r->n_batches; }

int fsh_ipc_file_reader_read(fsh_ipc_file_reader *r, int64_t i, fsh_batch **batch,
                             fsh_error *err) {
  *batch = NULL;
  if (i < 0 || i >= r->n_batches)
    return fsh_error_set(err, EINVAL, "%s: record batch %lld out of range (the file has %lld)",
                         r->in->name, (long long)i, (long long)r->n_batches);
  fsh_ipc_decoder_set_index(r->dec, r->n_dicts + i);
  int rc = decode_block(r, &r->batches[i], FSH_IPC_RECORD_BATCH, batch, err);
  if (rc != 0)
    return fsh_error_prefix(err, rc, "%s: record batch block %lld (file offset %lld): ",
                            r->in->name, (long long)i, (long long)r->batches[i].offset);
  return 0;
}

void fsh_ipc_file_reader_free(fsh_ipc_file_reader *r) {
  if (!r) return;
  fsh_ipc_decoder_free(r->dec);
  if (r->in) r->in->close(r->in);
  fsh_free(r->dicts);
  fsh_free(r->batches);
  fsh_free(r);
}

/* ---- either format, as an fsh_batch_stream ----------------------------- */

typedef struct any_reader {
  fsh_ipc_stream_reader *stream;
  fsh_ipc_file_reader *file;
  int64_t next; /* file: next batch index */
} any_reader;

static int any_next(fsh_batch_stream *s, fsh_batch **out, fsh_error *err) {
  any_reader *a = s->private_data;
  *out = NULL;
  if (a->stream) return fsh_ipc_stream_reader_next(a->stream, out, err);
  if (a->next >= a->file->n_batches) return 0;
  return fsh_ipc_file_reader_read(a->file, a->next++, out, err);
}

static void any_release(fsh_batch_stream *s) {
  any_reader *a = s->private_data;
  if (a) {
    fsh_ipc_stream_reader_free(a->stream);
    fsh_ipc_file_reader_free(a->file);
    fsh_free(a);
  }
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

/* Opens `in` (ownership taken) as a file when is_file, else as a stream. */
static int open_any(fsh_input *in, bool is_file, fsh_batch_stream *out, fsh_error *err) {
  any_reader *a = fsh_calloc(1, sizeof *a);
  if (!a) {
    in->close(in);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  int rc = is_file ? fsh_ipc_file_reader_open(in, &a->file, err)
                   : fsh_ipc_stream_reader_open(in, &a->stream, err);
  if (rc != 0) {
    fsh_free(a);
    return rc;
  }
  fsh_schema *schema = a->file ? fsh_ipc_file_reader_schema(a->file)
                               : fsh_ipc_stream_reader_schema(a->stream);
  *out = (fsh_batch_stream){any_next, any_release, fsh_schema_ref(schema), a};
  return 0;
}

/* Sets *yes when the input starts with the file magic (seekable inputs
 * only: a pipe is always a stream). */
static int starts_with_magic(fsh_input *in, bool *yes, fsh_error *err) {
  fsh_buffer *head;
  *yes = false;
  if (in->size(in) < 0) return 0;
  FSH_RETURN_NOT_OK(in->read_at(in, 0, FSH_IPC_MAGIC_LEN, &head, err));
  *yes = head->size == FSH_IPC_MAGIC_LEN &&
         memcmp(head->data, FSH_IPC_MAGIC, FSH_IPC_MAGIC_LEN) == 0;
  fsh_buffer_unref(head);
  return 0;
}

/* Opens `in` (ownership taken) as whichever format it holds. */
static int open_detect(fsh_input *in, fsh_batch_stream *out, fsh_error *err) {
  bool is_file;
  int rc = starts_with_magic(in, &is_file, err);
  if (rc != 0) {
    in->close(in);
    return rc;
  }
  return open_any(in, is_file, out, err);
}

int fsh_ipc_open_path(const char *path, fsh_batch_stream *out, fsh_error *err) {
  fsh_input *in;
  FSH_RETURN_NOT_OK(fsh_input_open_path(path, &in, err));
  return open_detect(in, out, err);
}

int fsh_ipc_open_buffer(fsh_buffer *buf, const char *name, fsh_batch_stream *out,
                        fsh_error *err) {
  fsh_input *in;
  FSH_RETURN_NOT_OK(fsh_input_from_buffer_named(buf, name, &in, err));
  return open_detect(in, out, err);
}
