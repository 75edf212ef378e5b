/* test_decode_pack.c -- record batches decoded into one pack (arrow.h) and
 * framed messages decoded where they lie (fsh_ipc_decode_framed): the same
 * batches as the per-object decode (every type, dictionaries, nulls, each
 * codec), columns and buffers that outlive their batch and the body they
 * were decoded from, one allocation per 16-row batch, allocation failures
 * (ENOMEM, nothing leaked), and framing errors. The reference is the same
 * decoder with packing off (fsh_ipc_decoder_set_packed), which allocates
 * each object on its own as before packs existed. */
#include <errno.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/workloads.h>

#include "ipc/fb_reader.h"
#include "ipc/read_internal.h"
#include "ipc/sample_batches.h"
#include "test.h"

/* A stream (schema, batches, end marker) of `batches` in memory. */
static fsh_buffer *stream_of(fsh_schema *schema, fsh_batch **batches, int n, fsh_compression c) {
  fsh_error err = {{0}};
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  o.compression = c;
  fsh_buffer *bytes = NULL;
  fsh_output *out = NULL;
  fsh_ipc_stream_writer *w = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_ipc_stream_writer_open(out, schema, &o, &w, &err));
  for (int i = 0; i < n; i++) CHECK_OK(fsh_ipc_stream_writer_write(w, batches[i], &err));
  CHECK_OK(fsh_ipc_stream_writer_close(w, &err));
  return bytes;
}

/* Decodes every message of a stream three ways -- (metadata, body) views
 * with a packed decoder, the same unpacked, and in place with
 * fsh_ipc_decode_framed -- and checks the batches equal, validate, and
 * equal want[0..n_want) in order. */
static void decode_three_ways(fsh_buffer *bytes, fsh_batch **want, int n_want) {
  fsh_error err = {{0}};
  fsh_ipc_decoder *packed = NULL, *plain = NULL, *framed = NULL;
  CHECK_OK(fsh_ipc_decoder_new(&packed, &err));
  CHECK_OK(fsh_ipc_decoder_new(&plain, &err));
  CHECK_OK(fsh_ipc_decoder_new(&framed, &err));
  fsh_ipc_decoder_set_packed(plain, false);
  int got = 0;
  for (int64_t at = 0; at < bytes->size;) {
    int64_t meta_off = 0, meta_len = 0;
    CHECK_OK(fsh_ipc_parse_prefix(bytes->data + at, bytes->size - at, &meta_off, &meta_len, &err));
    if (meta_len == 0) break; /* end of stream */
    fsh_buffer *meta = fsh_buffer_slice(bytes, at + meta_off, meta_len);
    fsh_ipc_message_type type;
    int64_t body_len = 0;
    CHECK_OK(fsh_ipc_peek_message(meta, &type, &body_len, &err));
    fsh_buffer *body = body_len ? fsh_buffer_slice(bytes, at + meta_off + meta_len, body_len) : NULL;
    fsh_batch *a = NULL, *b = NULL, *c = NULL;
    int64_t n_framed = -1;
    CHECK_OK(fsh_ipc_decode_message(packed, meta, body, &a, &err));
    CHECK_OK(fsh_ipc_decode_message(plain, meta, body, &b, &err));
    CHECK_OK(fsh_ipc_decode_framed(framed, bytes, at, bytes->size - at, &n_framed, &c, &err));
    CHECK_EQ_INT(n_framed, meta_off + meta_len + body_len);
    CHECK((a != NULL) == (type == FSH_IPC_RECORD_BATCH));
    CHECK((b != NULL) == (a != NULL) && (c != NULL) == (a != NULL));
    if (a) {
      CHECK(a->pack != NULL && b->pack == NULL && c->pack != NULL);
      CHECK_OK(fsh_batch_validate(a, true, &err));
      CHECK_OK(fsh_batch_validate(c, true, &err));
      fsh_error diff = {{0}};
      CHECK_MSG(fsh_batch_equals(a, b, &diff), "packed vs plain: %s", diff.message);
      CHECK_MSG(fsh_batch_equals(c, b, &diff), "framed vs plain: %s", diff.message);
      CHECK(got < n_want);
      if (got < n_want) CHECK_MSG(fsh_batch_equals(a, want[got], &diff), "%s", diff.message);
      got++;
    }
    fsh_batch_unref(a);
    fsh_batch_unref(b);
    fsh_batch_unref(c);
    fsh_buffer_unref(meta);
    fsh_buffer_unref(body);
    at += meta_off + meta_len + body_len;
  }
  CHECK_EQ_INT(got, n_want);
  fsh_ipc_decoder_free(packed);
  fsh_ipc_decoder_free(plain);
  fsh_ipc_decoder_free(framed);
}

/* Every type (nested, unions, dictionaries, nulls) with each codec:
 * compressed buffers are fresh allocations beside the pack. */
static void test_all_types_three_ways(void) {
  const fsh_compression codecs[] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                    FSH_COMPRESSION_ZSTD};
  fsh_batch *b = fsh_sample_all_types();
  fsh_batch *s = fsh_batch_slice(b, 2, 4); /* offsets not at 0 */
  fsh_batch *both[2] = {b, s};
  for (int i = 0; i < 3; i++) {
    fsh_buffer *bytes = stream_of(b->schema, both, 2, codecs[i]);
    decode_three_ways(bytes, both, 2);
    fsh_buffer_unref(bytes);
  }
  fsh_batch_unref(s);
  fsh_batch_unref(b);
}

/* Dictionary replacement between batches: the packed batches reference
 * the decoder's dictionaries, which are not carved from their pack. */
static void test_dictionaries_three_ways(void) {
  fsh_schema *schema = fsh_sample_dict_schema();
  const char *v1[] = {"a", "bb", "ccc"}, *v2[] = {"x", "y"};
  fsh_array *d1 = sbh_strings(NULL, 3, v1), *d2 = sbh_strings(NULL, 2, v2);
  int32_t i1[] = {2, 0, 1, 1}, i2[] = {1, 0};
  fsh_batch *bs[2] = {fsh_sample_dict_batch(schema, d1, 4, i1),
                      fsh_sample_dict_batch(schema, d2, 2, i2)};
  fsh_buffer *bytes = stream_of(schema, bs, 2, FSH_COMPRESSION_NONE);
  decode_three_ways(bytes, bs, 2);
  fsh_buffer_unref(bytes);
  for (int i = 0; i < 2; i++) fsh_batch_unref(bs[i]);
  fsh_array_unref(d1);
  fsh_array_unref(d2);
  fsh_schema_unref(schema);
}

/* The synthetic shuffle rows (int64 key, float64, utf8), 16 of them: the
 * block of a 1000 x 1000 shuffle. */
static fsh_buffer *small_stream(fsh_schema *schema, fsh_batch **batch) {
  fsh_error err = {{0}};
  fsh_synthetic_options o = {.seed = 3, .with_nulls = true, .key_range = 1 << 20};
  CHECK_OK(fsh_synthetic_batch(schema, &o, 0, 16, batch, &err));
  return stream_of(schema, batch, 1, FSH_COMPRESSION_NONE);
}

/* The schema message's framed size at the start of a stream. */
static int64_t schema_framed(const fsh_buffer *bytes) {
  return 8 + (int64_t)(uint32_t)fsh_fb_load_i32(bytes->data + 4);
}

/* A column, a buffer and a view of it kept past the batch and past every
 * other reference to the bytes they were decoded from: still readable
 * (ASan would see a use after free), still equal to the reference. */
static void test_parts_outlive_batch(void) {
  fsh_error err = {{0}};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_batch *want = NULL;
  fsh_buffer *bytes = small_stream(schema, &want);
  fsh_ipc_decoder *d = NULL;
  CHECK_OK(fsh_ipc_decoder_new(&d, &err));
  int64_t at = 0, n = 0;
  fsh_batch *none = NULL, *b = NULL;
  CHECK_OK(fsh_ipc_decode_framed(d, bytes, at, bytes->size, &n, &none, &err));
  CHECK(none == NULL);
  at += n;
  CHECK_OK(fsh_ipc_decode_framed(d, bytes, at, bytes->size - at, &n, &b, &err));
  CHECK(b != NULL && b->pack != NULL);
  int64_t last = b->n_columns - 1; /* utf8: offsets and data */
  fsh_array *col = fsh_array_ref(b->columns[last]);
  fsh_buffer *data = fsh_buffer_ref(col->buffers[2]);
  CHECK(data->pack == b->pack && data->parent == bytes);
  fsh_buffer *view = fsh_buffer_slice(data, 1, data->size - 1);
  CHECK(view != NULL && view->pack == NULL && view->parent == bytes);
  CHECK(fsh_buffer_resize(data, 1, &err) == EINVAL); /* a pack's view is not resizable */
  fsh_batch_unref(b);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(bytes); /* the pack holds the stream bytes now */
  fsh_error diff = {{0}};
  CHECK_MSG(fsh_array_equals(&schema->fields[last], col, want->columns[last], &diff), "%s",
            diff.message);
  const fsh_buffer *wd = want->columns[last]->buffers[2];
  CHECK(view->size == wd->size - 1 && memcmp(view->data, wd->data + 1, (size_t)view->size) == 0);
  fsh_array_unref(col);
  CHECK(memcmp(data->data, wd->data, (size_t)wd->size) == 0);
  fsh_buffer_unref(data);
  CHECK(memcmp(view->data, wd->data + 1, (size_t)view->size) == 0);
  fsh_buffer_unref(view);
  fsh_batch_unref(want);
  fsh_schema_unref(schema);
}

/* Allocations per decoded 16-row batch: the pack alone when framed or
 * packed; more than one object at a time unpacked. */
static void test_one_allocation_per_batch(void) {
  fsh_error err = {{0}};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_batch *want = NULL;
  fsh_buffer *bytes = small_stream(schema, &want);
  int64_t s = schema_framed(bytes), n = 0;
  for (int mode = 0; mode < 2; mode++) {
    fsh_ipc_decoder *d = NULL;
    fsh_batch *none = NULL, *b = NULL;
    CHECK_OK(fsh_ipc_decoder_new(&d, &err));
    fsh_ipc_decoder_set_packed(d, mode == 0);
    CHECK_OK(fsh_ipc_decode_framed(d, bytes, 0, s, &n, &none, &err));
    int64_t before = fsh_alloc_count();
    CHECK_OK(fsh_ipc_decode_framed(d, bytes, s, bytes->size - s, &n, &b, &err));
    int64_t allocs = fsh_alloc_count() - before;
    CHECK_OK(fsh_batch_validate(b, true, &err));
    fsh_error diff = {{0}};
    CHECK_MSG(fsh_batch_equals(b, want, &diff), "%s", diff.message);
    if (mode == 0) CHECK_EQ_INT(allocs, 1);
    else CHECK_MSG(allocs > 1 + b->n_columns, "unpacked: %lld allocations", (long long)allocs);
    fsh_batch_unref(b);
    fsh_ipc_decoder_free(d);
  }
  fsh_buffer_unref(bytes);
  fsh_batch_unref(want);
  fsh_schema_unref(schema);
}

/* Allocation failures while decoding every type (its dictionaries, then
 * the record batch; uncompressed: views in
 * the pack, misaligned copies, empty offsets; zstd: decompressed buffers
 * beside it): ENOMEM, no batch, nothing leaked (LSan), until it succeeds. */
static void test_allocation_failures(void) {
  fsh_error err = {{0}};
  fsh_batch *b = fsh_sample_all_types();
  for (int z = 0; z < 2; z++) {
    fsh_buffer *bytes =
        stream_of(b->schema, &b, 1, z ? FSH_COMPRESSION_ZSTD : FSH_COMPRESSION_NONE);
    int64_t s = schema_framed(bytes), n = 0;
    bool ok = false;
    for (int64_t k = 1; !ok && k < 1000; k++) {
      fsh_ipc_decoder *d = NULL;
      fsh_batch *none = NULL, *got = NULL;
      CHECK_OK(fsh_ipc_decoder_new(&d, &err));
      CHECK_OK(fsh_ipc_decode_framed(d, bytes, 0, s, &n, &none, &err));
      fsh_alloc_fail_after(k, k % 2 == 0);
      int rc = 0; /* dictionary batches first, then the record batch */
      for (int64_t at = s; rc == 0 && !got && at < bytes->size; at += n)
        rc = fsh_ipc_decode_framed(d, bytes, at, bytes->size - at, &n, &got, &err);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        ok = true;
        fsh_error diff = {{0}};
        CHECK_MSG(fsh_batch_equals(got, b, &diff), "%s", diff.message);
      } else {
        CHECK_MSG(rc == ENOMEM, "allocation %lld failed: %d %s", (long long)k, rc, err.message);
        CHECK(got == NULL);
      }
      fsh_batch_unref(got);
      fsh_ipc_decoder_free(d);
    }
    CHECK(ok);
    fsh_buffer_unref(bytes);
  }
  fsh_batch_unref(b);
}

/* Framing that does not fit: EINVAL, no batch, the decoder still usable. */
static void test_framing_errors(void) {
  fsh_error err = {{0}};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_batch *want = NULL;
  fsh_buffer *bytes = small_stream(schema, &want);
  int64_t s = schema_framed(bytes), n = 0;
  int64_t msg = 8 + (int64_t)(uint32_t)fsh_fb_load_i32(bytes->data + s + 4);
  fsh_ipc_decoder *d = NULL;
  fsh_batch *none = NULL, *b = NULL;
  CHECK_OK(fsh_ipc_decoder_new(&d, &err));
  CHECK_OK(fsh_ipc_decode_framed(d, bytes, 0, s, &n, &none, &err));
  /* the metadata does not fit */
  CHECK(fsh_ipc_decode_framed(d, bytes, s, msg - 8, &n, &b, &err) == EINVAL && !b && n == 0);
  CHECK(strstr(err.message, "framing") != NULL);
  /* the body does not fit */
  CHECK(fsh_ipc_decode_framed(d, bytes, s, msg + 8, &n, &b, &err) == EINVAL && !b && n == 0);
  CHECK_MSG(strstr(err.message, "the header says") != NULL, "%s", err.message);
  /* not at a message */
  CHECK(fsh_ipc_decode_framed(d, bytes, s + 8, bytes->size - s - 8, &n, &b, &err) == EINVAL);
  CHECK(!b);
  /* outside the buffer */
  CHECK(fsh_ipc_decode_framed(d, bytes, s, bytes->size, &n, &b, &err) == EINVAL && !b);
  CHECK(fsh_ipc_decode_framed(d, bytes, s, bytes->size - s, &n, &b, &err) == 0 && b);
  fsh_error diff = {{0}};
  CHECK_MSG(fsh_batch_equals(b, want, &diff), "%s", diff.message);
  fsh_batch_unref(b);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(bytes);
  fsh_batch_unref(want);
  fsh_schema_unref(schema);
}

/* A pack too small for what is carved: the rest is allocated as before,
 * and everything is released once (LSan, ASan). */
static void test_pack_overflow_falls_back(void) {
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_buffer *root = fsh_buffer_new(256, true);
  fsh_pack *p = fsh_pack_new(fsh_pack_batch_bytes(schema->n_fields) + fsh_pack_array_bytes(0),
                             root);
  fsh_batch *b = fsh_batch_new_in(p, schema, 4);
  fsh_array *a = fsh_array_new_in(p, 2, 0);
  fsh_array *c = fsh_array_new_in(p, 2, 0); /* no room left */
  fsh_buffer *v = fsh_buffer_slice_in(p, root, 8, 32);
  CHECK(b && a && c && v);
  CHECK(b->pack == p && a->pack == p && c->pack == NULL && v->pack == NULL);
  CHECK(v->parent == root && v->data == root->data + 8);
  fsh_pack_unref(p);
  a->buffers[1] = v;
  b->columns[0] = a;
  b->columns[1] = c;
  fsh_buffer_unref(root); /* v and the pack keep it */
  fsh_batch_unref(b);
  fsh_schema_unref(schema);
}

FSH_TEST_MAIN(TEST(test_all_types_three_ways), TEST(test_dictionaries_three_ways),
              TEST(test_parts_outlive_batch), TEST(test_one_allocation_per_batch),
              TEST(test_allocation_failures), TEST(test_framing_errors),
              TEST(test_pack_overflow_falls_back))
