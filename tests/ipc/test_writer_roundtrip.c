/* test_writer_roundtrip.c -- the IPC write side: flatbuffer builder, schema
 * and batch encoding of every type (nulls, slices, empty batches, zero
 * columns), stream and file formats with none / lz4 / zstd, dictionaries
 * (first, same contents, replacement, delta, file-format refusal), outputs
 * (memory, atomic path), and allocation failures. Written bytes are decoded
 * back with fsh_ipc_decoder (framing and footer parsed here) and compared
 * with fsh_batch_equals.
 *
 * With FSH_WRITER_DUMP_DIR set, the sample files are also written there
 * (for reading them with pyarrow by hand). */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/fb_builder.h"
#include "ipc/fb_reader.h"
#include "ipc/read_internal.h"
#include "ipc/sample_batches.h"
#include "ipc/writer_internal.h"
#include "test.h"

static const fsh_compression k_codecs[] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                           FSH_COMPRESSION_ZSTD};

static uint32_t load_u32(const uint8_t *p) { return (uint32_t)fsh_fb_load_i32(p); }

/* ---- decoding what was written (framing parsed here) ----------------- */

typedef struct decoded {
  fsh_batch *batches[32];
  int n_batches;
  int n_dict_messages;
  int n_delta_messages;
} decoded;

static void decoded_reset(decoded *d) {
  for (int i = 0; i < d->n_batches; i++) fsh_batch_unref(d->batches[i]);
  memset(d, 0, sizeof *d);
}

/* Decodes one framed message at bytes[*pos]; returns 1 at end of stream. */
static int decode_framed(fsh_ipc_decoder *dec, fsh_buffer *bytes, int64_t *pos, decoded *out,
                         fsh_error *err) {
  int64_t p = *pos;
  CHECK_EQ_INT(p % 8, 0);
  if (p + 8 > bytes->size) return fsh_error_set(err, EINVAL, "truncated at %lld", (long long)p);
  CHECK_EQ_INT(load_u32(bytes->data + p), FSH_IPC_CONTINUATION);
  int64_t len = load_u32(bytes->data + p + 4);
  if (len == 0) {
    *pos = p + 8;
    return 1;
  }
  CHECK_EQ_INT(len % 8, 0);
  fsh_buffer *md = fsh_buffer_slice(bytes, p + 8, len);
  fsh_ipc_message_type type;
  int64_t body_len = 0;
  int rc = fsh_ipc_peek_message(md, &type, &body_len, err);
  if (rc == 0) {
    CHECK_EQ_INT(body_len % 8, 0);
    if (type == FSH_IPC_DICTIONARY_BATCH) {
      fsh_ipc_msg m;
      fsh_ipc_dict_header h;
      bool ok = fsh_ipc_msg_parse(md->data, md->size, &m, err) == 0 &&
                fsh_ipc_dict_header_parse(&m.header, &h, err) == 0;
      CHECK(ok);
      out->n_dict_messages++;
      out->n_delta_messages += ok && h.is_delta;
    }
    fsh_buffer *body = fsh_buffer_slice(bytes, p + 8 + len, body_len);
    fsh_batch *b = NULL;
    if (!body)
      rc = fsh_error_set(err, EINVAL, "body out of range");
    else
      rc = fsh_ipc_decode_message(dec, md, body, &b, err);
    if (b && out->n_batches < 32) out->batches[out->n_batches++] = b;
    else fsh_batch_unref(b);
    fsh_buffer_unref(body);
    *pos = p + 8 + len + body_len;
  }
  fsh_buffer_unref(md);
  return rc;
}

static int decode_stream_bytes(fsh_buffer *bytes, decoded *out, fsh_error *err) {
  fsh_ipc_decoder *dec = NULL;
  FSH_RETURN_NOT_OK(fsh_ipc_decoder_new(&dec, err));
  int64_t pos = 0;
  int rc;
  while ((rc = decode_framed(dec, bytes, &pos, out, err)) == 0) {
  }
  if (rc == 1) {
    rc = 0;
    CHECK_EQ_INT(pos, bytes->size);
  }
  fsh_ipc_decoder_free(dec);
  return rc;
}

/* Checks the file layout and decodes the blocks the footer lists. */
static int decode_file_bytes(fsh_buffer *bytes, decoded *out, fsh_error *err) {
  const uint8_t *d = bytes->data;
  int64_t n = bytes->size;
  if (n < 8 + 8 + 10) return fsh_error_set(err, EINVAL, "file too small");
  CHECK(memcmp(d, "ARROW1\0\0", 8) == 0);
  CHECK(memcmp(d + n - 6, "ARROW1", 6) == 0);
  int64_t flen = fsh_fb_load_i32(d + n - 10);
  int64_t fpos = n - 10 - flen;
  CHECK_EQ_INT(fpos % 8, 0);
  /* the stream inside: schema message + ... + EOS right before the footer */
  CHECK_EQ_INT(load_u32(d + fpos - 8), FSH_IPC_CONTINUATION);
  CHECK_EQ_INT(load_u32(d + fpos - 4), 0);
  fsh_fb_reader r;
  fsh_fb_table footer;
  FSH_RETURN_NOT_OK(fsh_fb_root(&r, d + fpos, flen, &footer, err));
  int16_t version;
  FSH_RETURN_NOT_OK(fsh_fb_i16(&footer, 0, 0, &version, err));
  CHECK_EQ_INT(version, 4);
  fsh_fb_table schema;
  bool present = false;
  FSH_RETURN_NOT_OK(fsh_fb_table_field(&footer, 1, &schema, &present, err));
  CHECK(present);
  fsh_schema *fs = NULL;
  FSH_RETURN_NOT_OK(fsh_ipc_schema_decode(&schema, &fs, err));
  fsh_fb_vector dicts, batches;
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(&footer, 2, 24, &dicts, err));
  FSH_RETURN_NOT_OK(fsh_fb_vector_field(&footer, 3, 24, &batches, err));
  CHECK(dicts.present && batches.present);

  fsh_ipc_decoder *dec = NULL;
  int rc = fsh_ipc_decoder_new(&dec, err);
  if (rc == 0) rc = fsh_ipc_decoder_set_schema(dec, fs, err);
  fsh_schema_unref(fs);
  /* dictionaries first, then every batch, as a file reader would */
  for (int pass = 0; pass < 2 && rc == 0; pass++) {
    fsh_fb_vector *v = pass == 0 ? &dicts : &batches;
    for (int64_t i = 0; i < v->n && rc == 0; i++) {
      const uint8_t *e = fsh_fb_vector_elem(v, i);
      int64_t off = fsh_fb_load_i64(e);
      int32_t md_len = fsh_fb_load_i32(e + 8);
      int64_t body_len = fsh_fb_load_i64(e + 16);
      CHECK_EQ_INT(off % 8, 0);
      CHECK_EQ_INT(md_len % 8, 0);
      CHECK_EQ_INT(load_u32(d + off + 4) + 8, md_len);
      int64_t pos = off;
      int before = out->n_batches;
      rc = decode_framed(dec, bytes, &pos, out, err);
      CHECK_EQ_INT(pos, off + md_len + body_len);
      CHECK_EQ_INT(out->n_batches - before, pass);
    }
  }
  fsh_ipc_decoder_free(dec);
  return rc;
}

/* ---- writing ---------------------------------------------------------- */

/* Writes batches in the stream (file = false) or file format into memory;
 * returns the bytes or NULL with *rc set. */
static fsh_buffer *write_mem(bool file, const fsh_ipc_write_options *o, fsh_schema *schema,
                             fsh_batch *const *batches, int n, int *rc_out, fsh_error *err) {
  fsh_output *out = NULL;
  fsh_buffer *bytes = NULL;
  int rc = fsh_output_to_memory(NULL, &bytes, &out, err);
  if (rc == 0 && file) {
    fsh_ipc_file_writer *w = NULL;
    rc = fsh_ipc_file_writer_open(out, schema, o, &w, err);
    for (int i = 0; i < n && rc == 0; i++) rc = fsh_ipc_file_writer_write(w, batches[i], err);
    if (rc == 0)
      rc = fsh_ipc_file_writer_close(w, err);
    else if (w)
      fsh_ipc_file_writer_abort(w);
  } else if (rc == 0) {
    fsh_ipc_stream_writer *w = NULL;
    rc = fsh_ipc_stream_writer_open(out, schema, o, &w, err);
    for (int i = 0; i < n && rc == 0; i++) rc = fsh_ipc_stream_writer_write(w, batches[i], err);
    if (rc == 0)
      rc = fsh_ipc_stream_writer_close(w, err);
    else if (w)
      fsh_ipc_stream_writer_abort(w);
  }
  *rc_out = rc;
  if (rc) {
    fsh_buffer_unref(bytes);
    return NULL;
  }
  return bytes;
}

static void dump(const char *name, fsh_buffer *bytes) {
  const char *dir = getenv("FSH_WRITER_DUMP_DIR");
  if (!dir || !bytes) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(bytes->data, 1, (size_t)bytes->size, f);
  fclose(f);
}

static void check_equal_batches(fsh_batch *const *want, int n, const decoded *got) {
  CHECK_EQ_INT(got->n_batches, n);
  for (int i = 0; i < n && i < got->n_batches; i++) {
    fsh_error diff = {{0}};
    bool eq = fsh_batch_equals(want[i], got->batches[i], &diff);
    CHECK_MSG(eq, "batch %d: %s", i, diff.message);
    fsh_error verr;
    int vrc = fsh_batch_validate(got->batches[i], true, &verr);
    CHECK_MSG(vrc == 0, "batch %d invalid: %s", i, verr.message);
  }
}

/* Decodes with the public readers: fsh_ipc_open_buffer (either format),
 * and the stream or file reader. */
static int read_with_readers(fsh_buffer *bytes, bool file, decoded *out, fsh_error *err) {
  fsh_batch_stream st;
  FSH_RETURN_NOT_OK(fsh_ipc_open_buffer(bytes, "written", &st, err));
  int rc = 0;
  for (;;) {
    fsh_batch *b = NULL;
    if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
    if (out->n_batches < 32) out->batches[out->n_batches++] = b;
    else fsh_batch_unref(b);
  }
  st.release(&st);
  if (rc) return rc;
  fsh_input *in = NULL;
  FSH_RETURN_NOT_OK(fsh_input_from_buffer(bytes, &in, err));
  int n = 0;
  if (file) {
    fsh_ipc_file_reader *r = NULL;
    FSH_RETURN_NOT_OK(fsh_ipc_file_reader_open(in, &r, err));
    n = (int)fsh_ipc_file_reader_num_batches(r);
    for (int64_t i = n - 1; i >= 0 && rc == 0; i--) { /* random access, backwards */
      fsh_batch *b = NULL;
      rc = fsh_ipc_file_reader_read(r, i, &b, err);
      if (rc == 0 && i < out->n_batches) {
        fsh_error diff = {{0}};
        CHECK_MSG(fsh_batch_equals(out->batches[i], b, &diff), "batch %lld: %s", (long long)i,
                  diff.message);
      }
      fsh_batch_unref(b);
    }
    fsh_ipc_file_reader_free(r);
  } else {
    fsh_ipc_stream_reader *r = NULL;
    FSH_RETURN_NOT_OK(fsh_ipc_stream_reader_open(in, &r, err));
    for (;;) {
      fsh_batch *b = NULL;
      if ((rc = fsh_ipc_stream_reader_next(r, &b, err)) != 0 || !b) break;
      if (n < out->n_batches) {
        fsh_error diff = {{0}};
        CHECK_MSG(fsh_batch_equals(out->batches[n], b, &diff), "batch %d: %s", n, diff.message);
      }
      n++;
      fsh_batch_unref(b);
    }
    fsh_ipc_stream_reader_free(r);
  }
  CHECK_EQ_INT(n, out->n_batches);
  return rc;
}

/* Round trip of `batches` in both formats with every codec. */
static void roundtrip(const char *tag, fsh_schema *schema, fsh_batch *const *batches, int n) {
  fsh_error err;
  for (int file = 0; file < 2; file++) {
    for (size_t c = 0; c < sizeof k_codecs / sizeof k_codecs[0]; c++) {
      fsh_ipc_write_options o;
      fsh_ipc_write_options_init(&o);
      o.compression = k_codecs[c];
      int rc = 0;
      fsh_buffer *bytes = write_mem(file, &o, schema, batches, n, &rc, &err);
      CHECK_MSG(rc == 0, "%s %s %s: %s", tag, file ? "file" : "stream",
                fsh_compression_name(k_codecs[c]), err.message);
      if (!bytes) continue;
      char name[256];
      snprintf(name, sizeof name, "%s_%s.%s", tag, fsh_compression_name(k_codecs[c]),
               file ? "arrow" : "arrows");
      dump(name, bytes);
      decoded d = {0};
      rc = file ? decode_file_bytes(bytes, &d, &err) : decode_stream_bytes(bytes, &d, &err);
      CHECK_MSG(rc == 0, "%s: decoding: %s", name, err.message);
      if (rc == 0) check_equal_batches(batches, n, &d);
      decoded_reset(&d);
      /* and through the readers */
      rc = read_with_readers(bytes, file, &d, &err);
      CHECK_MSG(rc == 0, "%s: reading: %s", name, err.message);
      if (rc == 0) check_equal_batches(batches, n, &d);
      decoded_reset(&d);
      fsh_buffer_unref(bytes);
    }
  }
}

/* ---- tests ------------------------------------------------------------ */

static void test_fbb_basic(void) {
  fsh_error err;
  fsh_fbb b;
  fsh_fbb_init(&b);
  fsh_fb_ref s = fsh_fbb_create_string(&b, "hello", 5);
  int64_t pairs[4] = {1, 2, -3, 4};
  fsh_fb_ref v = fsh_fbb_create_vector(&b, pairs, 2, 16, 8);
  fsh_fbb_start_table(&b);
  fsh_fbb_add_i32(&b, 0, 42);
  fsh_fbb_end_table(&b);
  fsh_fbb_start_table(&b);
  fsh_fbb_add_u8(&b, 0, 7);
  fsh_fbb_add_i64(&b, 2, -123456789012345LL);
  fsh_fbb_add_offset(&b, 3, s);
  fsh_fbb_add_offset(&b, 4, v);
  fsh_fbb_add_i16(&b, 5, -2);
  fsh_fb_ref t = fsh_fbb_end_table(&b);
  fsh_fb_ref kids[2] = {t, t};
  fsh_fb_ref kv = fsh_fbb_create_offset_vector(&b, kids, 2);
  fsh_fbb_start_table(&b);
  fsh_fbb_add_offset(&b, 0, kv);
  fsh_fbb_add_offset(&b, 1, t);
  fsh_fb_ref root = fsh_fbb_end_table(&b);
  fsh_buffer *out = NULL;
  CHECK_OK(fsh_fbb_finish(&b, root, &out, &err));
  fsh_fbb_reset(&b);
  if (!out) return;
  CHECK_EQ_INT(out->size % 8, 0);
  fsh_fb_reader r;
  fsh_fb_table rt, tt;
  CHECK_OK(fsh_fb_root(&r, out->data, out->size, &rt, &err));
  bool present = false;
  CHECK_OK(fsh_fb_table_field(&rt, 1, &tt, &present, &err));
  CHECK(present);
  uint8_t u8 = 0;
  int64_t i64 = 0;
  int16_t i16 = 0;
  CHECK_OK(fsh_fb_u8(&tt, 0, 0, &u8, &err));
  CHECK_OK(fsh_fb_i64(&tt, 2, 0, &i64, &err));
  CHECK_OK(fsh_fb_i16(&tt, 5, 0, &i16, &err));
  CHECK_EQ_INT(u8, 7);
  CHECK_EQ_INT(i64, -123456789012345LL);
  CHECK_EQ_INT(i16, -2);
  CHECK(!fsh_fb_has(&tt, 1));
  const char *str = NULL;
  int64_t len = 0;
  CHECK_OK(fsh_fb_string(&tt, 3, &str, &len, &err));
  CHECK(str && len == 5 && strcmp(str, "hello") == 0);
  fsh_fb_vector vec;
  CHECK_OK(fsh_fb_vector_field(&tt, 4, 16, &vec, &err));
  CHECK_EQ_INT(vec.n, 2);
  CHECK_EQ_INT((uintptr_t)fsh_fb_vector_elem(&vec, 0) % 8, 0);
  CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&vec, 1)), -3);
  CHECK_OK(fsh_fb_vector_field(&rt, 0, 4, &vec, &err));
  CHECK_EQ_INT(vec.n, 2);
  fsh_fb_table e1;
  CHECK_OK(fsh_fb_vector_table(&vec, 1, &e1, &err));
  CHECK_OK(fsh_fb_i64(&e1, 2, 0, &i64, &err));
  CHECK_EQ_INT(i64, -123456789012345LL);
  fsh_buffer_unref(out);
}

static void test_schema_message(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  fsh_buffer *md = NULL;
  CHECK_OK(fsh_ipc_encode_schema_message(b->schema, &md, &err));
  fsh_schema *s = NULL;
  if (md) CHECK_OK(fsh_ipc_decode_schema_message(md, &s, &err));
  if (s) {
    fsh_error diff = {{0}};
    CHECK_MSG(fsh_schema_equals(b->schema, s, true, &diff), "%s", diff.message);
    for (int64_t i = 0; i < s->n_fields; i++)
      CHECK_MSG(fsh_field_equals(&b->schema->fields[i], &s->fields[i], true, &diff), "%s",
                diff.message);
  }
  fsh_schema_unref(s);
  fsh_buffer_unref(md);
  fsh_batch_unref(b);
}

static void test_all_types(void) {
  fsh_batch *b = fsh_sample_all_types();
  fsh_batch *bs[1] = {b};
  roundtrip("all_types", b->schema, bs, 1);
  fsh_batch_unref(b);
}

/* Slices at odd offsets: bitmaps re-packed, offsets rebased, children cut. */
static void test_sliced(void) {
  fsh_batch *b = fsh_sample_all_types();
  fsh_batch *bs[6] = {fsh_batch_slice(b, 3, 4), fsh_batch_slice(b, 1, 5), fsh_batch_slice(b, 0, 0),
                      fsh_batch_slice(b, 6, 1), fsh_batch_slice(b, 2, 0), b};
  for (int i = 0; i < 6; i++) CHECK(bs[i] != NULL);
  roundtrip("sliced", b->schema, bs, 6);
  for (int i = 0; i < 5; i++) fsh_batch_unref(bs[i]);
  fsh_batch_unref(b);
}

/* Byte-level checks that slicing does what it should: sizes of the body
 * buffers of a sliced int32 and string column. */
static void test_sliced_layout(void) {
  fsh_error err;
  fsh_batch *all = fsh_sample_all_types();
  fsh_batch *b = fsh_batch_slice(all, 3, 4);
  fsh_ipc_encoder *e = NULL;
  CHECK_OK(fsh_ipc_encoder_new(all->schema, NULL, &e, &err));
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  if (e) CHECK_OK(fsh_ipc_encode_batch(e, b, &ps, &n, &err));
  CHECK_EQ_INT(n, 5); /* 4 dictionaries (0, 1, 3 then 2) and the batch */
  if (n == 5) {
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(ps[i].type, FSH_IPC_DICTIONARY_BATCH);
    fsh_ipc_payload *p = &ps[4];
    CHECK_EQ_INT(p->type, FSH_IPC_RECORD_BATCH);
    CHECK_EQ_INT(p->metadata->size % 8, 0);
    int64_t sum = 0;
    for (int32_t i = 0; i < p->n_body; i++) sum += p->body[i]->size;
    CHECK_EQ_INT(sum, p->body_length);
    fsh_ipc_msg m;
    fsh_ipc_batch_header h;
    CHECK_OK(fsh_ipc_msg_parse(p->metadata->data, p->metadata->size, &m, &err));
    CHECK_OK(fsh_ipc_batch_header_parse(&m.header, &h, &err));
    CHECK_EQ_INT(h.length, 4);
    /* column "null" has no buffers; "bool" is node 1, buffers 0 and 1 */
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.nodes, 0)), 4);
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.nodes, 0) + 8), 4);
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.nodes, 1) + 8), 1); /* row 4 null */
    for (int64_t i = 0; i < h.buffers.n; i++) {
      CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, i)) % 8, 0);
    }
    /* bool validity and values: one byte each */
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 0) + 8), 1);
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 1) + 8), 1);
    /* i8: validity 1 byte, values 4 bytes */
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 3) + 8), 4);
    /* i32 (non-nullable, no nulls): empty validity, 16 bytes */
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 6) + 8), 0);
    CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 7) + 8), 16);
  }
  for (int32_t i = 0; i < n; i++) fsh_ipc_payload_reset(&ps[i]);
  fsh_free(ps);
  /* the same dictionaries again: nothing to emit */
  if (e) CHECK_OK(fsh_ipc_encode_batch(e, all, &ps, &n, &err));
  CHECK_EQ_INT(n, 1);
  for (int32_t i = 0; i < n; i++) fsh_ipc_payload_reset(&ps[i]);
  fsh_free(ps);
  fsh_ipc_encoder_free(e);
  fsh_batch_unref(b);
  fsh_batch_unref(all);
}

static void test_zero_columns_and_rows(void) {
  fsh_schema *s = fsh_schema_new(0);
  fsh_batch *b0 = fsh_batch_new(s, 0), *b5 = fsh_batch_new(s, 5);
  fsh_batch *bs[2] = {b0, b5};
  roundtrip("zero_columns", s, bs, 2);
  fsh_batch_unref(b0);
  fsh_batch_unref(b5);
  fsh_schema_unref(s);
  /* a table with a schema and no batches at all */
  fsh_batch *all = fsh_sample_all_types();
  roundtrip("no_batches", all->schema, NULL, 0);
  fsh_batch_unref(all);
}

static fsh_array *strings(int64_t n, const char *const *s) { return sbh_strings(NULL, n, s); }

static void test_dict_replacement_stream(void) {
  fsh_error err;
  fsh_schema *s = fsh_sample_dict_schema();
  const char *v1[] = {"a", "b"}, *v2[] = {"x", "y", "z"}, *v3[] = {"x", "y", "z", "w"};
  fsh_array *d1 = strings(2, v1), *d1b = strings(2, v1), *d2 = strings(3, v2), *d3 = strings(4, v3);
  int32_t i1[] = {0, 1, 1}, i2[] = {2, 0}, i3[] = {3, 3, 0};
  fsh_batch *bs[5] = {fsh_sample_dict_batch(s, d1, 3, i1), fsh_sample_dict_batch(s, d1b, 3, i1),
                      fsh_sample_dict_batch(s, d2, 2, i2), fsh_sample_dict_batch(s, d3, 3, i3),
                      fsh_sample_dict_batch(s, d1, 3, i1)};
  for (int deltas = 0; deltas < 2; deltas++) {
    fsh_ipc_write_options o;
    fsh_ipc_write_options_init(&o);
    o.emit_dictionary_deltas = deltas;
    int rc;
    fsh_buffer *bytes = write_mem(false, &o, s, bs, 5, &rc, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    decoded d = {0};
    if (bytes) CHECK_OK(decode_stream_bytes(bytes, &d, &err));
    /* d1; d1b equal: nothing; d2 replacement; d3 delta or replacement; d1 */
    CHECK_EQ_INT(d.n_dict_messages, 4);
    CHECK_EQ_INT(d.n_delta_messages, deltas ? 1 : 0);
    check_equal_batches(bs, 5, &d);
    dump(deltas ? "dict_deltas.arrows" : "dict_replacement.arrows", bytes);
    decoded_reset(&d);
    if (bytes) CHECK_OK(read_with_readers(bytes, false, &d, &err));
    check_equal_batches(bs, 5, &d);
    decoded_reset(&d);
    fsh_buffer_unref(bytes);
  }
  for (int i = 0; i < 5; i++) fsh_batch_unref(bs[i]);
  fsh_array_unref(d1);
  fsh_array_unref(d1b);
  fsh_array_unref(d2);
  fsh_array_unref(d3);
  fsh_schema_unref(s);
}

static void test_dict_file(void) {
  fsh_error err;
  fsh_schema *s = fsh_sample_dict_schema();
  const char *v1[] = {"a", "b"}, *v2[] = {"a", "b", "c"}, *v3[] = {"q"};
  fsh_array *d1 = strings(2, v1), *d2 = strings(3, v2), *d3 = strings(1, v3);
  int32_t i1[] = {0, 1, 1}, i2[] = {2, 0};
  fsh_batch *bs[3] = {fsh_sample_dict_batch(s, d1, 3, i1), fsh_sample_dict_batch(s, d2, 2, i2),
                      fsh_sample_dict_batch(s, d3, 1, i1)};
  int rc;
  /* d1 then d2 (d1 + "c"): a delta in the file */
  fsh_buffer *bytes = write_mem(true, NULL, s, bs, 2, &rc, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  decoded d = {0};
  if (bytes) CHECK_OK(decode_file_bytes(bytes, &d, &err));
  CHECK_EQ_INT(d.n_dict_messages, 2);
  CHECK_EQ_INT(d.n_delta_messages, 1);
  /* the file's one dictionary is the final one: both batches decode */
  check_equal_batches(bs, 2, &d);
  dump("dict_delta.arrow", bytes);
  decoded_reset(&d);
  if (bytes) CHECK_OK(read_with_readers(bytes, true, &d, &err));
  check_equal_batches(bs, 2, &d);
  decoded_reset(&d);
  fsh_buffer_unref(bytes);
  /* a prefix of the current dictionary needs no dictionary batch */
  fsh_batch *pre[3] = {bs[1], bs[0], bs[1]};
  bytes = write_mem(true, NULL, s, pre, 3, &rc, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  if (bytes) CHECK_OK(decode_file_bytes(bytes, &d, &err));
  CHECK_EQ_INT(d.n_dict_messages, 1);
  check_equal_batches(pre, 3, &d);
  decoded_reset(&d);
  fsh_buffer_unref(bytes);
  /* a changed dictionary cannot go into a file */
  fsh_batch *bad[2] = {bs[0], bs[2]};
  bytes = write_mem(true, NULL, s, bad, 2, &rc, &err);
  CHECK(bytes == NULL);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK_MSG(strstr(err.message, "file format") != NULL, "%s", err.message);
  for (int i = 0; i < 3; i++) fsh_batch_unref(bs[i]);
  fsh_array_unref(d1);
  fsh_array_unref(d2);
  fsh_array_unref(d3);
  fsh_schema_unref(s);
}

/* Compression: something compressible shrinks, incompressible stays raw
 * with the -1 prefix; both decode. */
static void test_compression_prefixes(void) {
  fsh_error err;
  fsh_schema *s = fsh_schema_new(2);
  sbh_field(&s->fields[0], "zeros", FSH_TYPE_INT64, false);
  sbh_field(&s->fields[1], "noise", FSH_TYPE_UINT8, false);
  enum { N = 4096 };
  static int64_t z[N];
  static uint8_t noise[N];
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    noise[i] = (uint8_t)x;
  }
  fsh_batch *b = fsh_batch_new(s, N);
  b->columns[0] = sbh_fixed(NULL, N, z, 8);
  b->columns[1] = sbh_fixed(NULL, N, noise, 1);
  for (size_t c = 1; c < 3; c++) {
    fsh_ipc_write_options o;
    fsh_ipc_write_options_init(&o);
    o.compression = k_codecs[c];
    fsh_ipc_encoder *e = NULL;
    CHECK_OK(fsh_ipc_encoder_new(s, &o, &e, &err));
    fsh_ipc_payload *ps = NULL;
    int32_t n = 0;
    if (e) CHECK_OK(fsh_ipc_encode_batch(e, b, &ps, &n, &err));
    CHECK_EQ_INT(n, 1);
    if (n == 1) {
      fsh_ipc_msg m;
      fsh_ipc_batch_header h;
      CHECK_OK(fsh_ipc_msg_parse(ps[0].metadata->data, ps[0].metadata->size, &m, &err));
      CHECK_OK(fsh_ipc_batch_header_parse(&m.header, &h, &err));
      CHECK_EQ_INT(h.compression, k_codecs[c]);
      CHECK_EQ_INT(h.buffers.n, 4);
      /* validity buffers empty */
      CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 0) + 8), 0);
      CHECK_EQ_INT(fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 2) + 8), 0);
      int64_t zlen = fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 1) + 8);
      int64_t nlen = fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 3) + 8);
      CHECK(zlen > 8 && zlen < N * 8 / 10);
      CHECK_EQ_INT(nlen, N + 8);
      /* the prefixes, found by walking the segments */
      fsh_buffer *flat = fsh_buffer_new(ps[0].body_length, true);
      int64_t pos = 0;
      for (int32_t i = 0; i < ps[0].n_body; i++) {
        memcpy(flat->data + pos, ps[0].body[i]->data, (size_t)ps[0].body[i]->size);
        pos += ps[0].body[i]->size;
      }
      int64_t zoff = fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 1));
      int64_t noff = fsh_fb_load_i64(fsh_fb_vector_elem(&h.buffers, 3));
      CHECK_EQ_INT(fsh_fb_load_i64(flat->data + zoff), N * 8);
      CHECK_EQ_INT(fsh_fb_load_i64(flat->data + noff), -1);
      CHECK(memcmp(flat->data + noff + 8, noise, N) == 0);
      fsh_buffer_unref(flat);
    }
    for (int32_t i = 0; i < n; i++) fsh_ipc_payload_reset(&ps[i]);
    fsh_free(ps);
    fsh_ipc_encoder_free(e);
  }
  fsh_batch *bs[1] = {b};
  roundtrip("compression", s, bs, 1);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

static void test_output_path(void) {
  fsh_error err;
  char dir[] = "/tmp/fsh_writer_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256], tmp[256];
  snprintf(path, sizeof path, "%s/out.arrow", dir);
  snprintf(tmp, sizeof tmp, "%s/out.arrow.tmp", dir);
  fsh_batch *b = fsh_sample_all_types();
  /* aborted: nothing left behind */
  fsh_output *out = NULL;
  CHECK_OK(fsh_output_open_path(path, &out, &err));
  fsh_ipc_file_writer *w = NULL;
  if (out) CHECK_OK(fsh_ipc_file_writer_open(out, b->schema, NULL, &w, &err));
  if (w) CHECK_OK(fsh_ipc_file_writer_write(w, b, &err));
  CHECK(access(tmp, F_OK) == 0);
  CHECK(access(path, F_OK) != 0);
  fsh_ipc_file_writer_abort(w);
  CHECK(access(tmp, F_OK) != 0);
  CHECK(access(path, F_OK) != 0);
  /* completed: renamed into place, same bytes as in memory */
  w = NULL;
  CHECK_OK(fsh_output_open_path(path, &out, &err));
  if (out) CHECK_OK(fsh_ipc_file_writer_open(out, b->schema, NULL, &w, &err));
  if (w) CHECK_OK(fsh_ipc_file_writer_write(w, b, &err));
  if (w) CHECK_OK(fsh_ipc_file_writer_close(w, &err));
  CHECK(access(tmp, F_OK) != 0);
  struct stat st;
  CHECK(stat(path, &st) == 0);
  int rc;
  fsh_batch *bs[1] = {b};
  fsh_buffer *mem = write_mem(true, NULL, b->schema, bs, 1, &rc, &err);
  if (mem) {
    CHECK_EQ_INT(st.st_size, mem->size);
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc((size_t)mem->size);
    CHECK(f && fread(buf, 1, (size_t)mem->size, f) == (size_t)mem->size);
    CHECK(memcmp(buf, mem->data, (size_t)mem->size) == 0);
    free(buf);
    if (f) fclose(f);
  }
  fsh_buffer_unref(mem);
  /* a directory that does not exist */
  char bad[300];
  snprintf(bad, sizeof bad, "%s/missing/x.arrow", dir);
  CHECK(fsh_output_open_path(bad, &out, &err) != 0);
  CHECK(strstr(err.message, "missing") != NULL);
  unlink(path);
  rmdir(dir);
  fsh_batch_unref(b);
}

/* A wide batch through a file descriptor: more body segments than one
 * writev call takes, and the bytes read back through fsh_ipc_open_path. */
static void test_fd_output_wide(void) {
  fsh_error err;
  enum { COLS = 300 };
  fsh_schema *s = fsh_schema_new(COLS);
  for (int i = 0; i < COLS; i++) {
    char name[32];
    snprintf(name, sizeof name, "c%d", i);
    sbh_field(&s->fields[i], name, FSH_TYPE_INT8, true);
  }
  fsh_batch *b = fsh_batch_new(s, 3);
  for (int i = 0; i < COLS; i++) {
    int8_t v[3] = {(int8_t)i, (int8_t)(i + 1), (int8_t)(i + 2)};
    b->columns[i] = sbh_fixed(i % 2 ? "101" : NULL, 3, v, 1);
  }
  char path[] = "/tmp/fsh_writer_fd_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  fsh_output *out = NULL;
  CHECK_OK(fsh_output_from_fd(fd, true, path, &out, &err));
  fsh_ipc_stream_writer *w = NULL;
  if (out) CHECK_OK(fsh_ipc_stream_writer_open(out, s, NULL, &w, &err));
  for (int i = 0; i < 3 && w; i++) CHECK_OK(fsh_ipc_stream_writer_write(w, b, &err));
  if (w) CHECK_OK(fsh_ipc_stream_writer_close(w, &err));
  fsh_batch_stream st = {0};
  int rc = fsh_ipc_open_path(path, &st, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  int n = 0;
  while (rc == 0) {
    fsh_batch *got = NULL;
    if ((rc = st.get_next(&st, &got, &err)) != 0 || !got) break;
    fsh_error diff = {{0}};
    CHECK_MSG(fsh_batch_equals(b, got, &diff), "%s", diff.message);
    fsh_batch_unref(got);
    n++;
  }
  if (st.release) st.release(&st);
  CHECK_EQ_INT(n, 3);
  unlink(path);
  fsh_batch_unref(b);
  fsh_schema_unref(s);
}

/* A sink that fails after `budget` bytes: errors propagate, nothing leaks. */
typedef struct failing_sink {
  int64_t budget;
} failing_sink;

static int failing_writev(fsh_output *out, const struct iovec *iov, int n, fsh_error *err) {
  failing_sink *s = out->ctx;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
  if (out->position + total > s->budget) return fsh_error_set(err, ENOSPC, "disk full (test)");
  out->position += total;
  return 0;
}

static int failing_close(fsh_output *out, bool abort, fsh_error *err) {
  fsh_free(out);
  return 0;
}

static void test_io_failures(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  failing_sink s;
  for (int file = 0; file < 2; file++) {
    for (int64_t budget = 0; budget < 20000; budget += 997) {
      s.budget = budget;
      fsh_output *out = fsh_calloc(1, sizeof *out);
      out->writev = failing_writev;
      out->close = failing_close;
      out->ctx = &s;
      out->name = "failing";
      int rc;
      if (file) {
        fsh_ipc_file_writer *w = NULL;
        rc = fsh_ipc_file_writer_open(out, b->schema, NULL, &w, &err);
        if (rc == 0) {
          rc = fsh_ipc_file_writer_write(w, b, &err);
          if (rc == 0) rc = fsh_ipc_file_writer_write(w, b, &err);
          int crc = fsh_ipc_file_writer_close(w, &err);
          if (rc == 0) rc = crc;
          else CHECK(crc != 0); /* a failed writer cannot close cleanly */
        }
      } else {
        fsh_ipc_stream_writer *w = NULL;
        rc = fsh_ipc_stream_writer_open(out, b->schema, NULL, &w, &err);
        if (rc == 0) {
          rc = fsh_ipc_stream_writer_write(w, b, &err);
          if (rc == 0) rc = fsh_ipc_stream_writer_write(w, b, &err);
          int crc = fsh_ipc_stream_writer_close(w, &err);
          if (rc == 0) rc = crc;
        }
      }
      if (rc) CHECK(rc == ENOSPC || rc == EIO);
    }
  }
  fsh_batch_unref(b);
}

/* Allocation failure at every allocation of a full stream/file write with
 * compression: an error comes back, nothing leaks (ASan), and without
 * injected failures the same write succeeds. */
static void test_alloc_failures(void) {
  fsh_error err;
  fsh_batch *all = fsh_sample_all_types();
  fsh_batch *sl = fsh_batch_slice(all, 1, 5);
  fsh_batch *bs[2] = {all, sl};
  for (int file = 0; file < 2; file++) {
    fsh_ipc_write_options o;
    fsh_ipc_write_options_init(&o);
    o.compression = file ? FSH_COMPRESSION_ZSTD : FSH_COMPRESSION_LZ4_FRAME;
    int failures = 0;
    for (int64_t nth = 1; nth < 100000; nth++) {
      fsh_alloc_fail_after(nth, nth % 2 == 0);
      int rc = 0;
      fsh_buffer *bytes = write_mem(file, &o, all->schema, bs, 2, &rc, &err);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        CHECK(bytes != NULL);
        fsh_buffer_unref(bytes);
        break;
      }
      failures++;
      CHECK_MSG(rc == ENOMEM, "nth %lld: rc %d: %s", (long long)nth, rc, err.message);
      CHECK(bytes == NULL);
    }
    CHECK(failures > 50);
  }
  fsh_batch_unref(sl);
  fsh_batch_unref(all);
}

/* Bad input is refused with a message, not a crash. */
static void test_invalid_input(void) {
  fsh_error err;
  fsh_schema *s = fsh_schema_new(1);
  sbh_field(&s->fields[0], "x", FSH_TYPE_INT32, true);
  fsh_ipc_encoder *e = NULL;
  CHECK_OK(fsh_ipc_encoder_new(s, NULL, &e, &err));
  int32_t v[] = {1, 2, 3};
  fsh_batch *b = fsh_batch_new(s, 5); /* column of 3 rows in a batch of 5 */
  b->columns[0] = sbh_fixed(NULL, 3, v, 4);
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  CHECK_EQ_INT(fsh_ipc_encode_batch(e, b, &ps, &n, &err), EINVAL);
  fsh_batch_unref(b);
  b = fsh_batch_new(s, 3); /* values buffer too small */
  b->columns[0] = sbh_fixed(NULL, 3, v, 4);
  b->columns[0]->buffers[1]->size = 8;
  CHECK_EQ_INT(fsh_ipc_encode_batch(e, b, &ps, &n, &err), EINVAL);
  CHECK(strstr(err.message, "'x'") != NULL);
  b->columns[0]->buffers[1]->size = 12;
  fsh_array_unref(b->columns[0]); /* missing column */
  b->columns[0] = NULL;
  CHECK_EQ_INT(fsh_ipc_encode_batch(e, b, &ps, &n, &err), EINVAL);
  fsh_batch_unref(b);
  fsh_ipc_encoder_free(e);
  fsh_schema_unref(s);
}

FSH_TEST_MAIN(TEST(test_fbb_basic), TEST(test_schema_message), TEST(test_all_types),
              TEST(test_sliced), TEST(test_sliced_layout), TEST(test_zero_columns_and_rows),
              TEST(test_dict_replacement_stream), TEST(test_dict_file),
              TEST(test_compression_prefixes), TEST(test_output_path), TEST(test_fd_output_wide), TEST(test_io_failures),
              TEST(test_alloc_failures), TEST(test_invalid_input))
