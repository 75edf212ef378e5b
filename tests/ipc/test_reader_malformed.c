/* test_reader_malformed.c -- the IPC readers on broken input: every prefix
 * of golden streams and files, mutated metadata bytes, huge and negative
 * lengths, wrong magic, short bodies, unknown dictionary ids, allocation
 * failures. Each must end in a clear error (or a valid shorter result),
 * never a crash, leak or out-of-bounds read (run under ASan/UBSan). Also
 * dictionary delta concatenation. */
#include <flightshuffle/ipc.h>

#include <errno.h>

#include "ipc/read_internal.h"
#include "test.h"

#define GOLDEN "arrow-testing/data/arrow-ipc-stream/integration/"

static fsh_buffer *golden(const char *rel) {
  char path[1024];
  fsh_test_shared_path(path, sizeof path, rel);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  fsh_buffer *b = fsh_buffer_new(n, false);
  if (b && fread(b->data, 1, (size_t)n, f) != (size_t)n) {
    fsh_buffer_unref(b);
    b = NULL;
  }
  fclose(f);
  return b;
}

/* Decodes all of buf (file or stream); returns rc, *n_batches, err. Every
 * decoded batch is also validated (a validation failure counts as an
 * error). */
static int decode_all(fsh_buffer *buf, int64_t *n_batches, fsh_error *err) {
  fsh_batch_stream s;
  *n_batches = 0;
  err->message[0] = 0;
  FSH_RETURN_NOT_OK(fsh_ipc_open_buffer(buf, "test", &s, err));
  int rc = 0;
  for (;;) {
    fsh_batch *b;
    if ((rc = s.get_next(&s, &b, err)) != 0 || !b) break;
    rc = fsh_batch_validate(b, true, err);
    fsh_batch_unref(b);
    if (rc != 0) break;
    ++*n_batches;
  }
  s.release(&s);
  return rc;
}

static fsh_buffer *copy_of(const fsh_buffer *b, int64_t n) { return fsh_buffer_copy(b->data, n); }

/* Message boundaries of a stream: ends[i] is the end offset of message i. */
static int64_t message_ends(const fsh_buffer *b, int64_t *ends, int64_t max) {
  int64_t pos = 0, n = 0;
  fsh_error err;
  while (pos < b->size && n < max) {
    int64_t off, len, body_len;
    fsh_ipc_message_type type;
    if (fsh_ipc_parse_prefix(b->data + pos, b->size - pos, &off, &len, &err) != 0 || len == 0)
      break;
    fsh_buffer *meta = fsh_buffer_slice((fsh_buffer *)b, pos + off, len);
    int rc = fsh_ipc_peek_message(meta, &type, &body_len, &err);
    fsh_buffer_unref(meta);
    if (rc != 0) break;
    pos += off + len + body_len;
    ends[n++] = pos;
  }
  return n;
}

/* Every prefix of a stream: an error, unless it ends on a message boundary
 * (then a valid, shorter stream). */
static void truncate_stream(const char *rel) {
  fsh_buffer *full = golden(rel);
  CHECK(full != NULL);
  if (!full) return;
  int64_t ends[256], n_ends = message_ends(full, ends, 256), total;
  fsh_error err;
  CHECK_OK(decode_all(full, &total, &err));
  CHECK(n_ends > 1);
  for (int64_t len = 0; len < full->size; len++) {
    fsh_buffer *part = fsh_buffer_slice(full, 0, len);
    int64_t n;
    int rc = decode_all(part, &n, &err);
    bool boundary = false;
    for (int64_t i = 0; i < n_ends; i++) boundary |= ends[i] == len;
    if (boundary)
      CHECK_MSG(rc == 0 && n <= total, "%s cut at %lld: %s", rel, (long long)len, err.message);
    else
      CHECK_MSG(rc != 0 && err.message[0], "%s cut at %lld decoded", rel, (long long)len);
    fsh_buffer_unref(part);
  }
  fsh_buffer_unref(full);
}

static void test_truncated_streams(void) {
  truncate_stream(GOLDEN "1.0.0-littleendian/generated_dictionary.stream");
  truncate_stream(GOLDEN "1.0.0-littleendian/generated_nested_dictionary.stream");
  truncate_stream(GOLDEN "1.0.0-littleendian/generated_union.stream");
  truncate_stream(GOLDEN "0.14.1/generated_nested.stream");
  truncate_stream(GOLDEN "2.0.0-compression/generated_lz4.stream");
  truncate_stream(GOLDEN "2.0.0-compression/generated_zstd.stream");
}

/* Every proper prefix of a file is an error (the footer is at the end). */
static void test_truncated_files(void) {
  const char *files[] = {GOLDEN "1.0.0-littleendian/generated_nested_dictionary.arrow_file",
                         GOLDEN "2.0.0-compression/generated_zstd.arrow_file"};
  for (int f = 0; f < 2; f++) {
    fsh_buffer *full = golden(files[f]);
    CHECK(full != NULL);
    if (!full) continue;
    fsh_error err;
    for (int64_t len = 0; len < full->size; len++) {
      fsh_buffer *part = fsh_buffer_slice(full, 0, len);
      int64_t n;
      CHECK_MSG(decode_all(part, &n, &err) != 0 && err.message[0], "%s cut at %lld decoded",
                files[f], (long long)len);
      fsh_buffer_unref(part);
    }
    fsh_buffer_unref(full);
  }
}

/* Mutates every byte (three ways) and decodes: must not crash. */
static void mutate_all(const char *rel, int64_t from, int64_t to) {
  fsh_buffer *full = golden(rel);
  CHECK(full != NULL);
  if (!full) return;
  if (to > full->size || to < 0) to = full->size;
  static const uint8_t xors[] = {0xFF, 0x01, 0x80};
  int64_t errors = 0, runs = 0;
  for (int64_t i = from; i < to; i++) {
    for (int k = 0; k < 3; k++) {
      fsh_buffer *m = copy_of(full, full->size);
      m->data[i] ^= xors[k];
      fsh_error err;
      int64_t n;
      if (decode_all(m, &n, &err) != 0) {
        errors++;
        CHECK_MSG(err.message[0], "%s: byte %lld: error without a message", rel, (long long)i);
      }
      runs++;
      fsh_buffer_unref(m);
    }
  }
  CHECK(errors > 0);
  printf("  %s: %lld of %lld mutations rejected\n", rel, (long long)errors, (long long)runs);
  fsh_buffer_unref(full);
}

static void test_mutated_bytes(void) {
  mutate_all(GOLDEN "1.0.0-littleendian/generated_dictionary.stream", 0, -1);
  mutate_all(GOLDEN "1.0.0-littleendian/generated_union.stream", 0, -1);
  mutate_all(GOLDEN "1.0.0-littleendian/generated_nested_dictionary.arrow_file", 0, -1);
  mutate_all(GOLDEN "2.0.0-compression/generated_lz4.stream", 0, -1);
  mutate_all(GOLDEN "0.14.1/generated_map.stream", 0, -1);
}

/* ---- targeted patches ---------------------------------------------------- */

/* Absolute position in the stream of slot's inline value in table t, whose
 * flatbuffer starts at base; -1 if the field is absent. */
static int64_t slot_pos(const fsh_fb_table *t, int64_t base, int slot) {
  int64_t at = 4 + 2 * slot;
  if (at + 2 > t->vt_size) return -1;
  const uint8_t *p = t->r->data + t->vt + at;
  int64_t fo = p[0] | p[1] << 8;
  return fo ? base + t->pos + fo : -1;
}

/* Finds message k of a stream: metadata start (after the prefix). */
static int64_t message_meta(const fsh_buffer *b, int64_t k, int64_t *meta_len) {
  int64_t pos = 0;
  fsh_error err;
  for (int64_t i = 0;; i++) {
    int64_t off, len, body_len;
    fsh_ipc_message_type type;
    if (fsh_ipc_parse_prefix(b->data + pos, b->size - pos, &off, &len, &err) != 0) return -1;
    if (i == k) {
      *meta_len = len;
      return pos + off;
    }
    fsh_buffer *meta = fsh_buffer_slice((fsh_buffer *)b, pos + off, len);
    int rc = fsh_ipc_peek_message(meta, &type, &body_len, &err);
    fsh_buffer_unref(meta);
    if (rc != 0) return -1;
    pos += off + len + body_len;
  }
}

static void store_i64(uint8_t *p, int64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

/* Decodes stream `rel` with message k's metadata patched by fn; expects an
 * error whose message contains `expect`. */
typedef void (*patch_fn)(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m);

static void patch_and_expect(const char *rel, int64_t k, patch_fn fn, const char *expect) {
  fsh_buffer *b = golden(rel);
  CHECK(b != NULL);
  if (!b) return;
  int64_t len, meta = message_meta(b, k, &len);
  fsh_ipc_msg m;
  fsh_error err;
  CHECK(meta > 0);
  if (meta > 0 && fsh_ipc_msg_parse(b->data + meta, len, &m, &err) == 0) {
    fn(b, meta, &m);
    int64_t n;
    int rc = decode_all(b, &n, &err);
    CHECK_MSG(rc != 0, "%s: patched message %lld decoded", rel, (long long)k);
    CHECK_MSG(strstr(err.message, expect) != NULL, "error '%s' lacks '%s'", err.message, expect);
    printf("  %s\n", err.message);
  }
  fsh_buffer_unref(b);
}

static void set_body_length(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m, int64_t v) {
  fsh_fb_table root;
  fsh_fb_reader r;
  fsh_error err;
  CHECK(fsh_fb_root(&r, m->fb.data, m->fb.size, &root, &err) == 0);
  int64_t p = slot_pos(&root, meta, 3);
  CHECK(p > 0);
  if (p > 0) store_i64(b->data + p, v);
}
static void huge_body(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  set_body_length(b, meta, m, (int64_t)1 << 62);
}
static void negative_body(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  set_body_length(b, meta, m, -8);
}

/* Element i of the RecordBatch's nodes (slot 1) or buffers (slot 2). */
static uint8_t *batch_struct(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m, int slot,
                             int64_t i) {
  fsh_ipc_batch_header h;
  fsh_error err;
  const fsh_fb_table *rb = &m->header;
  fsh_fb_table data;
  bool present;
  if (m->type == FSH_IPC_DICTIONARY_BATCH) {
    CHECK(fsh_fb_table_field(&m->header, 1, &data, &present, &err) == 0 && present);
    rb = &data;
  }
  CHECK(fsh_ipc_batch_header_parse(rb, &h, &err) == 0);
  const fsh_fb_vector *v = slot == 1 ? &h.nodes : &h.buffers;
  CHECK(i < v->n);
  return b->data + meta + (fsh_fb_vector_elem(v, i) - m->fb.data);
}
static void huge_node_length(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  store_i64(batch_struct(b, meta, m, 1, 0), (int64_t)1 << 61);
}
static void negative_node_length(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  store_i64(batch_struct(b, meta, m, 1, 0), -1);
}
static void buffer_past_body(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  store_i64(batch_struct(b, meta, m, 2, 1) + 8, 1 << 20);
}
static void negative_buffer_offset(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  store_i64(batch_struct(b, meta, m, 2, 1), -64);
}
static void unknown_dict_id(fsh_buffer *b, int64_t meta, const fsh_ipc_msg *m) {
  fsh_error err;
  int64_t p = slot_pos(&m->header, meta, 0);
  (void)err;
  CHECK(p > 0);
  if (p > 0) store_i64(b->data + p, 987654);
}

static void test_patched_headers(void) {
  const char *prim = GOLDEN "1.0.0-littleendian/generated_primitive.stream";
  const char *dict = GOLDEN "1.0.0-littleendian/generated_dictionary.stream";
  patch_and_expect(prim, 1, huge_body, "truncated body");
  patch_and_expect(prim, 1, negative_body, "negative body length");
  patch_and_expect(prim, 1, huge_node_length, "needed");
  patch_and_expect(prim, 1, negative_node_length, "field node 0 has length -1");
  patch_and_expect(prim, 1, buffer_past_body, "exceeds body length");
  patch_and_expect(prim, 1, negative_buffer_offset, "[offset -64");
  patch_and_expect(dict, 2, unknown_dict_id, "dictionary id 987654 is not used");
}

/* Framing with huge or negative metadata lengths. */
static void test_bad_framing(void) {
  static const uint8_t huge[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xF0, 0xFF, 0xFF, 0x7F, 1, 2, 3, 4};
  static const uint8_t neg[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x80};
  static const uint8_t legacy_huge[] = {0xF0, 0xFF, 0xFF, 0x7F, 0, 0, 0, 0};
  static const uint8_t garbage[] = {8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  struct { const uint8_t *p; size_t n; const char *expect; } cases[] = {
      {huge, sizeof huge, "truncated metadata"},
      {neg, sizeof neg, "negative metadata length"},
      {legacy_huge, sizeof legacy_huge, "truncated metadata"},
      {garbage, sizeof garbage, "malformed flatbuffer"},
      {huge, 0, "empty stream"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fsh_buffer *b = fsh_buffer_copy(cases[i].p, (int64_t)cases[i].n);
    fsh_error err;
    int64_t n;
    CHECK(decode_all(b, &n, &err) != 0);
    CHECK_MSG(strstr(err.message, cases[i].expect), "case %zu: '%s'", i, err.message);
    fsh_buffer_unref(b);
  }
}

static void test_wrong_magic(void) {
  fsh_buffer *b = golden(GOLDEN "1.0.0-littleendian/generated_primitive.arrow_file");
  CHECK(b != NULL);
  if (!b) return;
  fsh_error err;
  fsh_input *in;
  fsh_ipc_file_reader *r;
  /* broken leading magic: the file reader refuses, open_buffer sees a
   * (bad) stream */
  fsh_buffer *m = copy_of(b, b->size);
  m->data[0] = 'X';
  CHECK_OK(fsh_input_from_buffer(m, &in, &err));
  CHECK(fsh_ipc_file_reader_open(in, &r, &err) == EINVAL);
  CHECK(strstr(err.message, "magic at the start") != NULL);
  int64_t n;
  CHECK(decode_all(m, &n, &err) != 0);
  fsh_buffer_unref(m);
  /* broken trailing magic */
  m = copy_of(b, b->size);
  m->data[m->size - 1] = 'X';
  CHECK(decode_all(m, &n, &err) == EINVAL);
  CHECK(strstr(err.message, "magic at the end") != NULL);
  fsh_buffer_unref(m);
  /* footer length too big, then negative */
  for (int k = 0; k < 2; k++) {
    m = copy_of(b, b->size);
    uint8_t *p = m->data + m->size - 10;
    p[0] = p[1] = p[2] = 0xFF;
    p[3] = k == 0 ? 0x7F : 0xFF;
    CHECK(decode_all(m, &n, &err) == EINVAL);
    CHECK_MSG(strstr(err.message, "footer length"), "%s", err.message);
    fsh_buffer_unref(m);
  }
  fsh_buffer_unref(b);
}

/* A record batch body shorter than the header says, through the decoder. */
static void test_short_body(void) {
  fsh_buffer *b = golden(GOLDEN "1.0.0-littleendian/generated_primitive.stream");
  CHECK(b != NULL);
  if (!b) return;
  fsh_error err;
  fsh_ipc_decoder *d;
  fsh_batch *batch;
  int64_t len0, len1, body_len;
  fsh_ipc_message_type type;
  int64_t m0 = message_meta(b, 0, &len0), m1 = message_meta(b, 1, &len1);
  fsh_buffer *meta0 = fsh_buffer_slice(b, m0, len0), *meta1 = fsh_buffer_slice(b, m1, len1);
  CHECK_OK(fsh_ipc_decoder_new(&d, &err));
  CHECK_OK(fsh_ipc_decode_message(d, meta0, NULL, &batch, &err));
  CHECK_OK(fsh_ipc_peek_message(meta1, &type, &body_len, &err));
  CHECK(type == FSH_IPC_RECORD_BATCH && body_len > 16);
  fsh_buffer *body = fsh_buffer_slice(b, m1 + len1, body_len - 16);
  CHECK(fsh_ipc_decode_message(d, meta1, body, &batch, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "message 1 (record batch): body is"), "%s", err.message);
  CHECK(batch == NULL);
  fsh_buffer_unref(body);
  /* the full body decodes */
  body = fsh_buffer_slice(b, m1 + len1, body_len);
  CHECK_OK(fsh_ipc_decode_message(d, meta1, body, &batch, &err));
  CHECK(batch != NULL);
  fsh_batch_unref(batch);
  fsh_buffer_unref(body);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(meta0);
  fsh_buffer_unref(meta1);
  fsh_buffer_unref(b);
}

/* A record batch whose dictionary never arrived: drop the dictionary
 * messages from the stream. */
static void test_missing_dictionary(void) {
  fsh_buffer *b = golden(GOLDEN "1.0.0-littleendian/generated_dictionary.stream");
  CHECK(b != NULL);
  if (!b) return;
  int64_t ends[64], n_ends = message_ends(b, ends, 64);
  fsh_buffer *out = fsh_buffer_new(b->size, true);
  int64_t at = 0, prev = 0;
  for (int64_t i = 0; i < n_ends; i++) {
    int64_t len, meta = message_meta(b, i, &len), body_len;
    fsh_ipc_message_type type;
    fsh_buffer *mb = fsh_buffer_slice(b, meta, len);
    fsh_error err;
    CHECK_OK(fsh_ipc_peek_message(mb, &type, &body_len, &err));
    fsh_buffer_unref(mb);
    if (type != FSH_IPC_DICTIONARY_BATCH) {
      memcpy(out->data + at, b->data + prev, (size_t)(ends[i] - prev));
      at += ends[i] - prev;
    }
    prev = ends[i];
  }
  out->size = at;
  fsh_error err;
  int64_t n;
  CHECK(decode_all(out, &n, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "has no dictionary batch before it"), "%s", err.message);
  CHECK_MSG(strstr(err.message, "message 1 (record batch): field '"), "%s", err.message);
  fsh_buffer_unref(out);
  fsh_buffer_unref(b);
}

/* Dictionary deltas: concatenating a dictionary with itself. */
static void test_delta_concat(void) {
  const char *files[] = {GOLDEN "1.0.0-littleendian/generated_dictionary.stream",
                         GOLDEN "1.0.0-littleendian/generated_nested_dictionary.stream",
                         GOLDEN "1.0.0-littleendian/generated_nested.stream",
                         GOLDEN "1.0.0-littleendian/generated_union.stream"};
  int concatenated = 0;
  for (int f = 0; f < 4; f++) {
    fsh_buffer *b = golden(files[f]);
    CHECK(b != NULL);
    if (!b) continue;
    fsh_batch_stream s;
    fsh_error err, diff;
    CHECK_OK(fsh_ipc_open_buffer(b, files[f], &s, &err));
    fsh_batch *batch = NULL;
    CHECK_OK(s.get_next(&s, &batch, &err));
    for (int64_t c = 0; batch && c < batch->n_columns; c++) {
      const fsh_field *field = &batch->schema->fields[c];
      fsh_array *a = batch->columns[c];
      if (field->dictionary) {
        field = &field->dictionary->value;
        a = a->dictionary;
      }
      fsh_array *half = fsh_array_slice(a, a->length / 3, a->length - a->length / 3);
      fsh_array *merged = NULL;
      CHECK_OK(fsh_ipc_concat(field, a, half, &merged, &err));
      if (!merged) {
        fsh_array_unref(half);
        continue;
      }
      concatenated++;
      CHECK_EQ_INT(merged->length, a->length + half->length);
      CHECK_OK(fsh_array_validate(field, merged, true, &err));
      fsh_array *left = fsh_array_slice(merged, 0, a->length);
      fsh_array *right = fsh_array_slice(merged, a->length, half->length);
      CHECK_MSG(fsh_array_equals(field, left, a, &diff), "%s col %lld: %s", files[f],
                (long long)c, diff.message);
      CHECK_MSG(fsh_array_equals(field, right, half, &diff), "%s col %lld: %s", files[f],
                (long long)c, diff.message);
      fsh_array_unref(left);
      fsh_array_unref(right);
      fsh_array_unref(merged);
      fsh_array_unref(half);
    }
    fsh_batch_unref(batch);
    s.release(&s);
    fsh_buffer_unref(b);
  }
  CHECK(concatenated > 10);
}

/* Fails the Nth allocation for every N until decoding succeeds: each
 * failure is a clean ENOMEM-style error, never a crash or a leak. */
static void test_allocation_failures(void) {
  const char *files[] = {GOLDEN "1.0.0-littleendian/generated_nested_dictionary.stream",
                         GOLDEN "1.0.0-littleendian/generated_nested_dictionary.arrow_file",
                         GOLDEN "2.0.0-compression/generated_zstd.stream"};
  for (int f = 0; f < 3; f++) {
    fsh_buffer *b = golden(files[f]);
    CHECK(b != NULL);
    if (!b) continue;
    int64_t expect, n;
    fsh_error err;
    CHECK_OK(decode_all(b, &expect, &err));
    int failures = 0;
    for (int64_t k = 1; k < 100000; k++) {
      fsh_alloc_fail_after(k, k % 2 == 0);
      int rc = decode_all(b, &n, &err);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        CHECK_EQ_INT(n, expect);
        break;
      }
      failures++;
      CHECK_MSG(rc == ENOMEM, "%s: allocation %lld failed with %d: %s", files[f], (long long)k,
                rc, err.message);
    }
    CHECK(failures > 10);
    fsh_buffer_unref(b);
  }
}

FSH_TEST_MAIN(TEST(test_truncated_streams), TEST(test_truncated_files), TEST(test_mutated_bytes),
              TEST(test_patched_headers), TEST(test_bad_framing), TEST(test_wrong_magic),
              TEST(test_short_body), TEST(test_missing_dictionary), TEST(test_delta_concat),
              TEST(test_allocation_failures))
