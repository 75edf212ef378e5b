/* test_source.c -- DoGet sources: batches, batch streams and stored IPC
 * streams pulled payload by payload, each payload sent through the
 * FlightData codec and decoded back into the batches that went in
 * (dictionaries, replacements and compression included). */
#include "flight/wire.h"

#include <errno.h>

#include "ipc/sample_batches.h"
#include "test.h"

/* Pulls every payload of src (encode -> FlightData -> decode) into a
 * decoder and returns the batches decoded (at most max). */
static int drain(fsh_flight_source *src, fsh_batch **out, int max, int *n_messages) {
  fsh_error err;
  fsh_ipc_decoder *dec = NULL;
  CHECK_OK(fsh_ipc_decoder_new(&dec, &err));
  int n = 0;
  *n_messages = 0;
  for (int guard = 0; guard < 1000; guard++) {
    fsh_ipc_payload p;
    fsh_buffer *am = NULL;
    bool done = false;
    int rc = src->next(src, &p, &am, &done, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    if (rc != 0 || done) break;
    CHECK(p.metadata && p.metadata->size % 8 == 0 && p.body_length % 8 == 0);
    if (guard == 0) CHECK(p.type == FSH_IPC_SCHEMA);
    grpc_byte_buffer *bb = NULL;
    fsh_flight_message m;
    CHECK_OK(fsh_flight_data_encode(&p, am, NULL, &bb, &err));
    fsh_ipc_payload_reset(&p);
    fsh_buffer_unref(am);
    CHECK_OK(fsh_flight_data_decode(bb, &m, &err));
    grpc_byte_buffer_destroy(bb);
    fsh_batch *b = NULL;
    CHECK_OK(fsh_ipc_decode_message(dec, m.metadata, m.body, &b, &err));
    fsh_flight_message_reset(&m);
    (*n_messages)++;
    if (b && n < max)
      out[n++] = b;
    else
      fsh_batch_unref(b);
  }
  fsh_ipc_decoder_free(dec);
  return n;
}

/* Three batches over dictionaries that change: the source must emit the
 * dictionary batches before the record batches that need them. */
static void dict_batches(fsh_schema **schema, fsh_batch *b[3]) {
  *schema = fsh_sample_dict_schema();
  const char *v1[] = {"a", "b"}, *v2[] = {"x", "y", "z"};
  fsh_array *d1 = sbh_strings(NULL, 2, v1), *d2 = sbh_strings(NULL, 3, v2);
  const int32_t i1[] = {0, 1, 1, 0}, i2[] = {2, 0};
  b[0] = fsh_sample_dict_batch(*schema, d1, 4, i1);
  b[1] = fsh_sample_dict_batch(*schema, d1, 4, i1);
  b[2] = fsh_sample_dict_batch(*schema, d2, 2, i2);
  fsh_array_unref(d1);
  fsh_array_unref(d2);
}

static void test_source_from_batches(void) {
  fsh_error err, diff;
  fsh_schema *schema;
  fsh_batch *b[3], *keep[3], *got[4] = {0};
  dict_batches(&schema, b);
  for (int i = 0; i < 3; i++) keep[i] = fsh_batch_ref(b[i]);
  fsh_flight_source *src = NULL;
  CHECK_OK(fsh_flight_source_from_batches(schema, b, 3, NULL, &src, &err)); /* takes b, schema */
  int n_messages = 0;
  int n = src ? drain(src, got, 4, &n_messages) : 0;
  CHECK_EQ_INT(n, 3);
  CHECK_EQ_INT(n_messages, 1 + 1 + 3 + 1); /* schema, dict, 2 batches, replacement dict, batch */
  for (int i = 0; i < n; i++) CHECK_MSG(fsh_batch_equals(got[i], keep[i], &diff), "%s", diff.message);
  /* Pulling after the end keeps saying done. */
  if (src) {
    fsh_ipc_payload p;
    fsh_buffer *am = NULL;
    bool done = false;
    CHECK_OK(src->next(src, &p, &am, &done, &err));
    CHECK(done);
    src->release(src);
  }
  for (int i = 0; i < 3; i++) {
    fsh_batch_unref(keep[i]);
    fsh_batch_unref(got[i]);
  }
}

static void test_source_from_stream_compressed(void) {
  fsh_error err, diff;
  fsh_batch *all = fsh_sample_all_types();
  fsh_batch_stream st;
  fsh_batch *list[2] = {all, all};
  CHECK_OK(fsh_batch_stream_from_batches(all->schema, list, 2, &st, &err));
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  o.compression = FSH_COMPRESSION_ZSTD;
  fsh_flight_source *src = NULL;
  CHECK_OK(fsh_flight_source_from_stream(&st, &o, &src, &err));
  CHECK(st.release == NULL); /* moved */
  fsh_batch *got[2] = {0};
  int n_messages;
  int n = src ? drain(src, got, 2, &n_messages) : 0;
  CHECK_EQ_INT(n, 2);
  for (int i = 0; i < n; i++) {
    CHECK_MSG(fsh_batch_equals(got[i], all, &diff), "%s", diff.message);
    fsh_batch_unref(got[i]);
  }
  if (src) src->release(src);

  /* Released before the end: nothing leaks. */
  CHECK_OK(fsh_batch_stream_from_batches(all->schema, list, 2, &st, &err));
  CHECK_OK(fsh_flight_source_from_stream(&st, NULL, &src, &err));
  fsh_ipc_payload p;
  fsh_buffer *am = NULL;
  bool done;
  for (int i = 0; i < 2; i++) {
    CHECK_OK(src->next(src, &p, &am, &done, &err));
    fsh_ipc_payload_reset(&p);
  }
  src->release(src);
  fsh_batch_unref(all);

  /* A stream without a schema is refused (and released). */
  fsh_batch_stream none = {0};
  CHECK_EQ_INT(fsh_flight_source_from_stream(&none, NULL, &src, &err), EINVAL);
}

static fsh_buffer *stream_bytes(fsh_schema *schema, fsh_batch *const *b, int n,
                                const fsh_ipc_write_options *o) {
  fsh_error err;
  fsh_output *out = NULL;
  fsh_buffer *bytes = NULL;
  fsh_ipc_stream_writer *w = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_ipc_stream_writer_open(out, schema, o, &w, &err));
  for (int i = 0; i < n; i++) CHECK_OK(fsh_ipc_stream_writer_write(w, b[i], &err));
  CHECK_OK(fsh_ipc_stream_writer_close(w, &err));
  return bytes;
}

static void test_source_from_ipc_stream(void) {
  fsh_error err, diff;
  fsh_schema *schema;
  fsh_batch *b[3];
  dict_batches(&schema, b);
  fsh_batch *all = fsh_sample_all_types();
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  o.compression = FSH_COMPRESSION_LZ4_FRAME;

  struct {
    fsh_schema *schema;
    fsh_batch **batches;
    int n;
    const fsh_ipc_write_options *o;
  } cases[] = {{schema, b, 3, NULL}, {all->schema, &all, 1, &o}, {all->schema, &all, 0, NULL}};
  for (size_t c = 0; c < 3; c++) {
    fsh_buffer *bytes = stream_bytes(cases[c].schema, cases[c].batches, cases[c].n, cases[c].o);
    fsh_input *in = NULL;
    CHECK_OK(fsh_input_from_buffer(bytes, &in, &err));
    fsh_buffer_unref(bytes);
    fsh_flight_source *src = NULL;
    CHECK_OK(fsh_flight_source_from_ipc_stream(in, &src, &err));
    fsh_batch *got[3] = {0};
    int n_messages;
    int n = src ? drain(src, got, 3, &n_messages) : 0;
    CHECK_EQ_INT(n, cases[c].n);
    for (int i = 0; i < n && i < cases[c].n; i++)
      CHECK_MSG(fsh_batch_equals(got[i], cases[c].batches[i], &diff), "%s", diff.message);
    for (int i = 0; i < n; i++) fsh_batch_unref(got[i]);
    if (src) src->release(src);
  }

  /* Not a stream: refused, the input closed (LSan checks). */
  fsh_buffer *junk = fsh_buffer_copy("not an arrow stream at all", 26);
  fsh_input *in = NULL;
  CHECK_OK(fsh_input_from_buffer(junk, &in, &err));
  fsh_buffer_unref(junk);
  fsh_flight_source *src = NULL;
  CHECK(fsh_flight_source_from_ipc_stream(in, &src, &err) != 0);
  CHECK(src == NULL);

  for (int i = 0; i < 3; i++) fsh_batch_unref(b[i]);
  fsh_schema_unref(schema);
  fsh_batch_unref(all);
}

FSH_TEST_MAIN(TEST(test_source_from_batches), TEST(test_source_from_stream_compressed),
              TEST(test_source_from_ipc_stream))
