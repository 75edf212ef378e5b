/* test_wire.c -- the Flight wire codecs: round trips of every protobuf-c
 * message, the hand-written FlightData codec (bodies split across many and
 * 1-byte slices, zero-copy proof on both sides, malformed inputs truncated
 * at every byte, bad varints, huge lengths, wrong wire types, unknown
 * fields), schema bytes, status mapping, and allocation-failure loops. */
#include "flight/wire.h"

#include <errno.h>
#include <grpc/slice.h>

#include "ipc/sample_batches.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------ */

static fsh_bytes flatten(grpc_byte_buffer *bb) {
  fsh_error err;
  fsh_bytes b = {0};
  CHECK_OK(fsh_flight_byte_buffer_bytes(bb, &b, &err));
  return b;
}

/* A byte buffer holding data cut into slices of the given sizes (cycled;
 * the last slice takes what is left). */
static grpc_byte_buffer *sliced(const uint8_t *data, size_t size, const size_t *cuts, int n_cuts) {
  size_t cap = size + 1, k = 0, at = 0;
  grpc_slice *s = malloc(sizeof *s * cap);
  for (int i = 0; at < size; i++) {
    size_t n = cuts[i % n_cuts];
    if (n > size - at) n = size - at;
    s[k++] = grpc_slice_from_copied_buffer((const char *)data + at, n);
    at += n;
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, k);
  for (size_t i = 0; i < k; i++) grpc_slice_unref(s[i]);
  free(s);
  return bb;
}

static bool buffer_is(const fsh_buffer *b, const void *data, size_t n) {
  if (n == 0) return b == NULL || b->size == 0;
  return b && (size_t)b->size == n && memcmp(b->data, data, n) == 0;
}

static bool descriptor_equals(const fsh_flight_descriptor *a, const fsh_flight_descriptor *b) {
  if (a->type != b->type || a->cmd.size != b->cmd.size || a->n_path != b->n_path) return false;
  if (a->cmd.size && memcmp(a->cmd.data, b->cmd.data, (size_t)a->cmd.size) != 0) return false;
  for (int64_t i = 0; i < a->n_path; i++)
    if (strcmp(a->path[i], b->path[i]) != 0) return false;
  return true;
}

static bool bytes_equal(const fsh_bytes *a, const fsh_bytes *b) {
  return a->size == b->size && (a->size == 0 || memcmp(a->data, b->data, (size_t)a->size) == 0);
}

/* ---- descriptors, infos ---------------------------------------------------- */

static void test_descriptor_roundtrip(void) {
  fsh_error err;
  const char *path[] = {"shuffle", "", "p\xc3\xa9"};
  fsh_flight_descriptor d = {0}, back = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 3));
  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_wire_encode_descriptor(&d, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_descriptor(bb, &back, &err));
  CHECK(descriptor_equals(&d, &back));
  grpc_byte_buffer_destroy(bb);
  fsh_flight_descriptor_reset(&back);
  fsh_flight_descriptor_reset(&d);

  /* CMD with binary bytes; exact wire bytes: 08 02 12 03 00 ff 01. */
  d.type = FSH_FLIGHT_DESCRIPTOR_CMD;
  CHECK_OK(fsh_bytes_set(&d.cmd, "\x00\xff\x01", 3));
  CHECK_OK(fsh_flight_wire_encode_descriptor(&d, &bb, &err));
  fsh_bytes raw = flatten(bb);
  static const uint8_t want[] = {0x08, 0x02, 0x12, 0x03, 0x00, 0xff, 0x01};
  CHECK(raw.size == 7 && memcmp(raw.data, want, 7) == 0);
  CHECK_OK(fsh_flight_wire_decode_descriptor(bb, &back, &err));
  CHECK(descriptor_equals(&d, &back));
  fsh_bytes_reset(&raw);
  grpc_byte_buffer_destroy(bb);
  fsh_flight_descriptor_reset(&back);
  fsh_flight_descriptor_reset(&d);

  /* Malformed: a length past the end. */
  static const uint8_t bad[] = {0x12, 0x09, 0x01};
  bb = sliced(bad, sizeof bad, (size_t[]){1}, 1);
  CHECK_EQ_INT(fsh_flight_wire_decode_descriptor(bb, &back, &err), EINVAL);
  CHECK(strstr(err.message, "FlightDescriptor") != NULL);
  fsh_flight_descriptor_reset(&back);
  grpc_byte_buffer_destroy(bb);
}

static fsh_flight_info sample_info(void) {
  fsh_batch *b = fsh_sample_all_types();
  fsh_flight_info i = {0};
  i.schema = fsh_schema_ref(b->schema);
  fsh_batch_unref(b);
  const char *path[] = {"shuffle", "3"};
  if (fsh_flight_descriptor_path(&i.descriptor, path, 2) != 0) abort();
  i.n_endpoints = 3;
  i.endpoints = fsh_calloc(3, sizeof *i.endpoints);
  for (int e = 0; e < 3; e++) {
    fsh_flight_endpoint *ep = &i.endpoints[e];
    char t[32];
    snprintf(t, sizeof t, "ticket-%d", e);
    if (fsh_bytes_set(&ep->ticket, t, (int64_t)strlen(t)) != 0) abort();
    ep->n_locations = e; /* 0, 1, 2 locations */
    ep->locations = e ? fsh_calloc((size_t)e, sizeof(char *)) : NULL;
    for (int k = 0; k < e; k++) ep->locations[k] = fsh_strdup(k ? "grpc+tls://[::1]:9" : "grpc://w1:7000");
    ep->expiration_unix_ns = e == 0 ? 0 : e == 1 ? 1700000000123456789LL : -1500000001LL;
    if (e == 2 && fsh_bytes_set(&ep->app_metadata, "am", 2) != 0) abort();
  }
  i.total_records = 12345;
  i.total_bytes = -1;
  i.ordered = true;
  if (fsh_bytes_set(&i.app_metadata, "\x01\x02", 2) != 0) abort();
  return i;
}

static void check_info_equals(const fsh_flight_info *a, const fsh_flight_info *b) {
  fsh_error diff;
  CHECK(a->schema && b->schema);
  if (a->schema && b->schema) CHECK_MSG(fsh_schema_equals(a->schema, b->schema, true, &diff), "%s", diff.message);
  CHECK(descriptor_equals(&a->descriptor, &b->descriptor));
  CHECK_EQ_INT(a->n_endpoints, b->n_endpoints);
  for (int64_t e = 0; e < a->n_endpoints && e < b->n_endpoints; e++) {
    const fsh_flight_endpoint *x = &a->endpoints[e], *y = &b->endpoints[e];
    CHECK(bytes_equal(&x->ticket, &y->ticket));
    CHECK(bytes_equal(&x->app_metadata, &y->app_metadata));
    CHECK_EQ_INT(x->expiration_unix_ns, y->expiration_unix_ns);
    CHECK_EQ_INT(x->n_locations, y->n_locations);
    for (int64_t k = 0; k < x->n_locations && k < y->n_locations; k++)
      CHECK(strcmp(x->locations[k], y->locations[k]) == 0);
  }
  CHECK_EQ_INT(a->total_records, b->total_records);
  CHECK_EQ_INT(a->total_bytes, b->total_bytes);
  CHECK(a->ordered == b->ordered);
  CHECK(bytes_equal(&a->app_metadata, &b->app_metadata));
}

static void test_info_roundtrip(void) {
  fsh_error err;
  fsh_flight_info i = sample_info(), back = {0};
  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_wire_encode_info(&i, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_info(bb, &back, &err));
  check_info_equals(&i, &back);
  fsh_flight_info_reset(&back);

  /* Read across 1-byte slices too. */
  fsh_bytes raw = flatten(bb);
  grpc_byte_buffer *ones = sliced(raw.data, (size_t)raw.size, (size_t[]){1}, 1);
  CHECK_OK(fsh_flight_wire_decode_info(ones, &back, &err));
  check_info_equals(&i, &back);
  fsh_flight_info_reset(&back);
  grpc_byte_buffer_destroy(ones);

  /* Truncations never crash; a cut inside the message fails. */
  for (int64_t n = 0; n < raw.size; n++) {
    grpc_byte_buffer *t = sliced(raw.data, (size_t)n, (size_t[]){7}, 1);
    int rc = fsh_flight_wire_decode_info(t, &back, &err);
    CHECK(rc == 0 || rc == EINVAL);
    fsh_flight_info_reset(&back);
    grpc_byte_buffer_destroy(t);
  }
  fsh_bytes_reset(&raw);
  grpc_byte_buffer_destroy(bb);

  /* No schema: an empty schema field, decoded as NULL. */
  fsh_schema_unref(i.schema);
  i.schema = NULL;
  CHECK_OK(fsh_flight_wire_encode_info(&i, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_info(bb, &back, &err));
  CHECK(back.schema == NULL && back.n_endpoints == 3);
  fsh_flight_info_reset(&back);
  grpc_byte_buffer_destroy(bb);
  fsh_flight_info_reset(&i);
}

static void test_info_alloc_failure(void) {
  fsh_error err;
  fsh_flight_info i = sample_info();
  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_wire_encode_info(&i, &bb, &err));
  int failures = 0;
  for (int64_t nth = 1; nth < 5000; nth++) {
    fsh_flight_info back = {0};
    fsh_alloc_fail_after(nth, nth % 2 == 1);
    int rc = fsh_flight_wire_decode_info(bb, &back, &err);
    fsh_alloc_fail_after(0, false);
    fsh_flight_info_reset(&back);
    if (rc == 0) break;
    failures++;
    /* protobuf-c reports its allocation failures as a failed unpack. */
    CHECK_MSG(rc == ENOMEM || rc == EINVAL, "nth %lld: %d %s", (long long)nth, rc, err.message);
  }
  CHECK(failures > 20);
  failures = 0;
  for (int64_t nth = 1; nth < 5000; nth++) {
    grpc_byte_buffer *out = NULL;
    fsh_alloc_fail_after(nth, false);
    int rc = fsh_flight_wire_encode_info(&i, &out, &err);
    fsh_alloc_fail_after(0, false);
    if (out) grpc_byte_buffer_destroy(out);
    if (rc == 0) break;
    failures++;
    CHECK_MSG(rc == ENOMEM, "nth %lld: %d %s", (long long)nth, rc, err.message);
  }
  CHECK(failures > 5);
  grpc_byte_buffer_destroy(bb);
  fsh_flight_info_reset(&i);
}

static void test_poll_info_roundtrip(void) {
  fsh_error err;
  fsh_flight_info i = sample_info(), back = {0};
  grpc_byte_buffer *bb = NULL;
  double progress;
  bool done;
  CHECK_OK(fsh_flight_wire_encode_poll_info(&i, 0.0, false, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_poll_info(bb, &back, &progress, &done, &err));
  check_info_equals(&i, &back);
  CHECK(progress == 0.0 && !done); /* 0.0 is present (explicit presence) */
  fsh_flight_info_reset(&back);
  grpc_byte_buffer_destroy(bb);

  CHECK_OK(fsh_flight_wire_encode_poll_info(&i, -1, true, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_poll_info(bb, &back, &progress, &done, &err));
  CHECK(progress == -1 && done);
  fsh_flight_info_reset(&back);
  grpc_byte_buffer_destroy(bb);

  /* An empty PollInfo: done, no info. */
  bb = fsh_flight_wire_empty();
  CHECK_OK(fsh_flight_wire_decode_poll_info(bb, &back, &progress, &done, &err));
  CHECK(done && progress == -1 && back.schema == NULL && back.total_records == -1);
  fsh_flight_info_reset(&back);
  grpc_byte_buffer_destroy(bb);
  fsh_flight_info_reset(&i);
}

/* ---- small messages ------------------------------------------------------------ */

static void test_bytes_messages(void) {
  fsh_error err;
  const fsh_flight_bytes_msg kinds[] = {FSH_WIRE_TICKET, FSH_WIRE_CRITERIA, FSH_WIRE_RESULT,
                                        FSH_WIRE_PUT_RESULT, FSH_WIRE_SCHEMA_RESULT};
  for (size_t k = 0; k < 5; k++) {
    grpc_byte_buffer *bb = NULL;
    fsh_bytes back = {0};
    CHECK_OK(fsh_flight_wire_encode_bytes(kinds[k], "\x00tick\xff", 6, &bb, &err));
    fsh_bytes raw = flatten(bb);
    /* field 1, length-delimited: 0a 06 ... */
    CHECK(raw.size == 8 && raw.data[0] == 0x0a && raw.data[1] == 6);
    fsh_bytes_reset(&raw);
    CHECK_OK(fsh_flight_wire_decode_bytes(kinds[k], bb, &back, &err));
    CHECK(back.size == 6 && memcmp(back.data, "\x00tick\xff", 6) == 0);
    fsh_bytes_reset(&back);
    grpc_byte_buffer_destroy(bb);
    CHECK_OK(fsh_flight_wire_encode_bytes(kinds[k], NULL, 0, &bb, &err));
    CHECK(grpc_byte_buffer_length(bb) == 0);
    CHECK_OK(fsh_flight_wire_decode_bytes(kinds[k], bb, &back, &err));
    CHECK(back.size == 0 && back.data == NULL);
    grpc_byte_buffer_destroy(bb);
  }
  grpc_byte_buffer *bb = NULL;
  CHECK_EQ_INT(fsh_flight_wire_encode_bytes(FSH_WIRE_TICKET, NULL, 3, &bb, &err), EINVAL);
}

static void test_action_messages(void) {
  fsh_error err;
  grpc_byte_buffer *bb = NULL;
  fsh_flight_action a = {.type = fsh_strdup("heartbeat")}, ab = {0};
  CHECK_OK(fsh_bytes_set(&a.body, "{\"worker\":3}", 12));
  CHECK_OK(fsh_flight_wire_encode_action(&a, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_action(bb, &ab, &err));
  CHECK(strcmp(ab.type, "heartbeat") == 0 && bytes_equal(&a.body, &ab.body));
  grpc_byte_buffer_destroy(bb);
  fsh_flight_action_reset(&ab);
  fsh_flight_action_reset(&a);

  fsh_flight_action_type t = {.type = fsh_strdup("register")}, tb = {0};
  CHECK_OK(fsh_flight_wire_encode_action_type(&t, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_action_type(bb, &tb, &err));
  CHECK(strcmp(tb.type, "register") == 0 && strcmp(tb.description, "") == 0);
  grpc_byte_buffer_destroy(bb);
  fsh_flight_action_type_reset(&tb);
  fsh_flight_action_type_reset(&t);

  uint64_t version;
  fsh_bytes payload = {0};
  CHECK_OK(fsh_flight_wire_encode_handshake(7, "tok", 3, &bb, &err));
  CHECK_OK(fsh_flight_wire_decode_handshake(bb, &version, &payload, &err));
  CHECK(version == 7 && payload.size == 3 && memcmp(payload.data, "tok", 3) == 0);
  fsh_bytes_reset(&payload);
  grpc_byte_buffer_destroy(bb);

  fsh_bytes auth = {0};
  char *user = NULL, *password = NULL;
  CHECK_OK(fsh_flight_wire_encode_basic_auth("alice", "s3cret", &auth, &err));
  /* BasicAuth numbers start at 2: 12 05 alice 1a 06 s3cret */
  CHECK(auth.size == 15 && auth.data[0] == 0x12 && auth.data[7] == 0x1a);
  CHECK_OK(fsh_flight_wire_decode_basic_auth(&auth, &user, &password, &err));
  CHECK(strcmp(user, "alice") == 0 && strcmp(password, "s3cret") == 0);
  fsh_free(user);
  fsh_free(password);
  fsh_bytes_reset(&auth);
  fsh_bytes garbage = {(uint8_t *)"\x12\x7f", 2};
  CHECK_EQ_INT(fsh_flight_wire_decode_basic_auth(&garbage, &user, &password, &err), EINVAL);
  CHECK(user == NULL && password == NULL);

  bb = fsh_flight_wire_empty();
  CHECK(bb && grpc_byte_buffer_length(bb) == 0);
  grpc_byte_buffer_destroy(bb);
}

static void test_schema_bytes(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  fsh_bytes bytes = {0};
  CHECK_OK(fsh_flight_schema_to_bytes(b->schema, &bytes, &err));
  CHECK(bytes.size > 8 && bytes.size % 8 == 0);
  CHECK(memcmp(bytes.data, "\xff\xff\xff\xff", 4) == 0);
  uint32_t len = (uint32_t)bytes.data[4] | (uint32_t)bytes.data[5] << 8 |
                 (uint32_t)bytes.data[6] << 16 | (uint32_t)bytes.data[7] << 24;
  CHECK_EQ_INT(len, bytes.size - 8);
  fsh_schema *s = NULL;
  CHECK_OK(fsh_flight_schema_from_bytes(&bytes, &s, &err));
  fsh_error diff;
  CHECK(s && fsh_schema_equals(s, b->schema, true, &diff));
  fsh_schema_unref(s);
  bytes.size = 12; /* cut */
  CHECK(fsh_flight_schema_from_bytes(&bytes, &s, &err) != 0);
  fsh_bytes_reset(&bytes);
  fsh_bytes empty = {0};
  CHECK_EQ_INT(fsh_flight_schema_from_bytes(&empty, &s, &err), EINVAL);
  fsh_batch_unref(b);
}

static void test_status_mapping(void) {
  static const struct {
    int code;
    grpc_status_code status;
  } table[] = {{ENOENT, GRPC_STATUS_NOT_FOUND},          {EINVAL, GRPC_STATUS_INVALID_ARGUMENT},
               {EACCES, GRPC_STATUS_UNAUTHENTICATED},    {EPERM, GRPC_STATUS_PERMISSION_DENIED},
               {ENOTSUP, GRPC_STATUS_UNIMPLEMENTED},     {ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED},
               {ECANCELED, GRPC_STATUS_CANCELLED},       {EAGAIN, GRPC_STATUS_UNAVAILABLE},
               {ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED}, {EEXIST, GRPC_STATUS_ALREADY_EXISTS}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    CHECK_EQ_INT(fsh_flight_status_from_errno(table[i].code), table[i].status);
    CHECK_EQ_INT(fsh_flight_errno_from_status(table[i].status), table[i].code);
  }
  CHECK_EQ_INT(fsh_flight_status_from_errno(0), GRPC_STATUS_OK);
  CHECK_EQ_INT(fsh_flight_errno_from_status(GRPC_STATUS_OK), 0);
  CHECK_EQ_INT(fsh_flight_status_from_errno(EIO), GRPC_STATUS_INTERNAL);
  CHECK_EQ_INT(fsh_flight_status_from_errno(ENOSPC), GRPC_STATUS_INTERNAL);
  CHECK_EQ_INT(fsh_flight_errno_from_status(GRPC_STATUS_INTERNAL), EIO);
  CHECK_EQ_INT(fsh_flight_errno_from_status(GRPC_STATUS_DATA_LOSS), EIO);
}

/* ---- FlightData ------------------------------------------------------------------ */

/* Encodes the sample batch: the record batch payload (the last of the
 * encoder's payloads; dictionaries come first). */
typedef struct encoded_batch {
  fsh_batch *batch;
  fsh_ipc_payload *ps;
  int32_t n;
  fsh_ipc_payload schema;
} encoded_batch;

static encoded_batch encode_sample(void) {
  fsh_error err;
  encoded_batch e = {.batch = fsh_sample_all_types()};
  fsh_ipc_encoder *enc = NULL;
  CHECK_OK(fsh_ipc_encoder_new(e.batch->schema, NULL, &enc, &err));
  CHECK_OK(fsh_ipc_encode_schema(enc, &e.schema, &err));
  CHECK_OK(fsh_ipc_encode_batch(enc, e.batch, &e.ps, &e.n, &err));
  fsh_ipc_encoder_free(enc);
  return e;
}

static void encoded_reset(encoded_batch *e) {
  for (int32_t i = 0; i < e->n; i++) fsh_ipc_payload_reset(&e->ps[i]);
  fsh_free(e->ps);
  fsh_ipc_payload_reset(&e->schema);
  fsh_batch_unref(e->batch);
}

/* The concatenation of p's body segments. */
static uint8_t *body_bytes(const fsh_ipc_payload *p) {
  uint8_t *out = malloc((size_t)p->body_length + 1);
  size_t at = 0;
  for (int32_t i = 0; i < p->n_body; i++) {
    memcpy(out + at, p->body[i]->data, (size_t)p->body[i]->size);
    at += (size_t)p->body[i]->size;
  }
  return out;
}

static void check_message(const fsh_flight_message *m, const fsh_ipc_payload *p, const char *am,
                          const fsh_flight_descriptor *d) {
  CHECK(buffer_is(m->metadata, p->metadata->data, (size_t)p->metadata->size));
  uint8_t *body = body_bytes(p);
  CHECK(buffer_is(m->body, body, (size_t)p->body_length));
  free(body);
  CHECK(buffer_is(m->app_metadata, am, am ? strlen(am) : 0));
  CHECK(m->has_descriptor == (d != NULL));
  if (d) CHECK(descriptor_equals(d, &m->descriptor));
  if (m->body) CHECK(((uintptr_t)m->body->data & 7) == 0);
}

static void test_flight_data_roundtrip(void) {
  fsh_error err;
  encoded_batch e = encode_sample();
  fsh_ipc_payload *p = &e.ps[e.n - 1];
  CHECK(p->n_body > 10);
  const char *path[] = {"shuffle", "1", "2"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 3));
  fsh_buffer *am = fsh_buffer_copy("app-meta", 8);

  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_data_encode(p, am, &d, &bb, &err));

  /* Zero copy: after the header slice, one slice per non-empty segment,
   * pointing at the segment's own bytes. */
  grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  size_t k = 1;
  for (int32_t i = 0; i < p->n_body; i++) {
    if (p->body[i]->size == 0) continue;
    CHECK(k < sb->count);
    if (k >= sb->count) break;
    CHECK(GRPC_SLICE_START_PTR(sb->slices[k]) == p->body[i]->data);
    CHECK(GRPC_SLICE_LENGTH(sb->slices[k]) == (size_t)p->body[i]->size);
    k++;
  }
  CHECK_EQ_INT(k, sb->count);

  /* The message outlives the payload: gRPC holds the buffers. */
  fsh_ipc_payload copy = {0};
  copy.metadata = fsh_buffer_copy(p->metadata->data, p->metadata->size);
  copy.body_length = p->body_length;
  copy.n_body = 1;
  copy.body = fsh_malloc(sizeof *copy.body);
  copy.body[0] = fsh_buffer_new(p->body_length, false);
  {
    uint8_t *bytes = body_bytes(p);
    memcpy(copy.body[0]->data, bytes, (size_t)p->body_length);
    free(bytes);
  }
  encoded_reset(&e);
  fsh_buffer_unref(am);

  fsh_bytes raw = flatten(bb);
  /* The body tag is 0xC2 0x3E, right before the body length and bytes. */
  size_t blen_size = 0;
  for (uint64_t v = (uint64_t)copy.body_length; v; v >>= 7) blen_size++;
  size_t tag_at = (size_t)raw.size - (size_t)copy.body_length - blen_size - 2;
  CHECK(raw.data[tag_at] == 0xC2 && raw.data[tag_at + 1] == 0x3E);

  fsh_flight_message m;
  CHECK_OK(fsh_flight_data_decode_bytes(raw.data, (size_t)raw.size, &m, &err));
  check_message(&m, &copy, "app-meta", &d);
  fsh_flight_message_reset(&m);

  CHECK_OK(fsh_flight_data_decode(bb, &m, &err));
  check_message(&m, &copy, "app-meta", &d);
  fsh_flight_message_reset(&m);
  grpc_byte_buffer_destroy(bb);

  /* The same bytes cut into slices of many sizes, 1-byte slices included. */
  static const size_t cuts[][4] = {{1}, {2}, {3, 5, 7, 11}, {64, 1, 4096, 13}, {100000}};
  static const int n_cuts[] = {1, 1, 4, 4, 1};
  for (size_t c = 0; c < sizeof n_cuts / sizeof n_cuts[0]; c++) {
    grpc_byte_buffer *s = sliced(raw.data, (size_t)raw.size, cuts[c], n_cuts[c]);
    CHECK_OK(fsh_flight_data_decode(s, &m, &err));
    check_message(&m, &copy, "app-meta", &d);
    fsh_flight_message_reset(&m);
    grpc_byte_buffer_destroy(s);
  }

  /* The body decodes back into the batch. */
  fsh_ipc_decoder *dec = NULL;
  fsh_batch *batch = NULL, *want = fsh_sample_all_types();
  CHECK_OK(fsh_flight_data_decode_bytes(raw.data, (size_t)raw.size, &m, &err));
  CHECK_OK(fsh_ipc_decoder_new(&dec, &err));
  encoded_batch e2 = encode_sample();
  {
    grpc_byte_buffer *sbb = NULL;
    fsh_flight_message sm;
    CHECK_OK(fsh_flight_data_encode(&e2.schema, NULL, NULL, &sbb, &err));
    CHECK_OK(fsh_flight_data_decode(sbb, &sm, &err));
    CHECK(sm.body == NULL && sm.metadata && !sm.has_descriptor);
    CHECK_OK(fsh_ipc_decode_message(dec, sm.metadata, sm.body, &batch, &err));
    fsh_flight_message_reset(&sm);
    grpc_byte_buffer_destroy(sbb);
    for (int32_t i = 0; i < e2.n - 1; i++) {
      CHECK_OK(fsh_flight_data_encode(&e2.ps[i], NULL, NULL, &sbb, &err));
      CHECK_OK(fsh_flight_data_decode(sbb, &sm, &err));
      CHECK_OK(fsh_ipc_decode_message(dec, sm.metadata, sm.body, &batch, &err));
      fsh_flight_message_reset(&sm);
      grpc_byte_buffer_destroy(sbb);
    }
  }
  CHECK_OK(fsh_ipc_decode_message(dec, m.metadata, m.body, &batch, &err));
  fsh_error diff;
  CHECK(batch && fsh_batch_equals(batch, want, &diff));
  fsh_batch_unref(batch);
  fsh_batch_unref(want);
  fsh_ipc_decoder_free(dec);
  encoded_reset(&e2);
  fsh_flight_message_reset(&m);
  fsh_bytes_reset(&raw);
  fsh_ipc_payload_reset(&copy);
  fsh_flight_descriptor_reset(&d);
}

static void test_flight_data_body_kept_without_copy(void) {
  /* A single-segment body received as one aligned slice is kept in place:
   * the decoded body points at the very bytes we encoded from. */
  fsh_error err;
  fsh_ipc_payload p = {.type = FSH_IPC_RECORD_BATCH};
  p.metadata = fsh_buffer_copy("12345678", 8);
  p.n_body = 1;
  p.body = fsh_malloc(sizeof *p.body);
  p.body[0] = fsh_buffer_new(1 << 16, true);
  p.body[0]->data[100] = 42;
  p.body_length = 1 << 16;
  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_data_encode(&p, NULL, NULL, &bb, &err));
  fsh_flight_message m;
  CHECK_OK(fsh_flight_data_decode(bb, &m, &err));
  CHECK(m.body && m.body->data == p.body[0]->data && m.body->size == 1 << 16);
  grpc_byte_buffer_destroy(bb);
  fsh_ipc_payload_reset(&p);
  CHECK(m.body && m.body->data[100] == 42); /* still alive through the slice */
  fsh_flight_message_reset(&m);

  /* Misaligned slice data: copied into an aligned buffer. */
  uint8_t raw[64 + 3];
  raw[0] = 0xC2;
  raw[1] = 0x3E;
  raw[2] = 64;
  for (int i = 0; i < 64; i++) raw[3 + i] = (uint8_t)i;
  grpc_slice s[2] = {grpc_slice_from_copied_buffer((char *)raw, 3),
                     grpc_slice_malloc(64 + 1)};
  memcpy(GRPC_SLICE_START_PTR(s[1]) + 1, raw + 3, 64);
  grpc_slice tail = grpc_slice_sub(s[1], 1, 65);
  grpc_slice parts[2] = {s[0], tail};
  bb = grpc_raw_byte_buffer_create(parts, 2);
  CHECK_OK(fsh_flight_data_decode(bb, &m, &err));
  CHECK(m.body && ((uintptr_t)m.body->data & 63) == 0 && buffer_is(m.body, raw + 3, 64));
  CHECK(m.metadata == NULL && m.app_metadata == NULL);
  fsh_flight_message_reset(&m);
  grpc_byte_buffer_destroy(bb);
  grpc_slice_unref(s[0]);
  grpc_slice_unref(s[1]);
  grpc_slice_unref(tail);
}

static void test_flight_data_empty_and_app_metadata_only(void) {
  fsh_error err;
  grpc_byte_buffer *bb = NULL;
  fsh_flight_message m;
  CHECK_OK(fsh_flight_data_encode(NULL, NULL, NULL, &bb, &err));
  CHECK(grpc_byte_buffer_length(bb) == 0);
  CHECK_OK(fsh_flight_data_decode(bb, &m, &err));
  CHECK(!m.metadata && !m.body && !m.app_metadata && !m.has_descriptor);
  grpc_byte_buffer_destroy(bb);

  fsh_buffer *am = fsh_buffer_copy("x", 1);
  CHECK_OK(fsh_flight_data_encode(NULL, am, NULL, &bb, &err));
  fsh_bytes raw = flatten(bb);
  CHECK(raw.size == 3 && memcmp(raw.data, "\x1a\x01x", 3) == 0);
  fsh_bytes_reset(&raw);
  CHECK_OK(fsh_flight_data_decode(bb, &m, &err));
  CHECK(buffer_is(m.app_metadata, "x", 1) && !m.metadata && !m.body);
  fsh_flight_message_reset(&m);
  grpc_byte_buffer_destroy(bb);
  fsh_buffer_unref(am);

  CHECK_OK(fsh_flight_data_decode_bytes(NULL, 0, &m, &err));
  fsh_flight_message_reset(&m);

  /* A payload whose segments do not add up is refused. */
  fsh_ipc_payload p = {.type = FSH_IPC_RECORD_BATCH};
  p.metadata = fsh_buffer_copy("12345678", 8);
  p.n_body = 1;
  p.body = fsh_malloc(sizeof *p.body);
  p.body[0] = fsh_buffer_new(8, true);
  p.body_length = 16;
  CHECK_EQ_INT(fsh_flight_data_encode(&p, NULL, NULL, &bb, &err), EINVAL);
  fsh_ipc_payload_reset(&p);
}

static void test_flight_data_truncated(void) {
  fsh_error err;
  encoded_batch e = encode_sample();
  fsh_ipc_payload *p = &e.ps[e.n - 1];
  const char *path[] = {"a"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 1));
  fsh_buffer *am = fsh_buffer_copy("meta", 4);
  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_data_encode(p, am, &d, &bb, &err));
  fsh_bytes raw = flatten(bb);
  grpc_byte_buffer_destroy(bb);
  /* Field boundaries: a cut exactly there is a valid shorter message. */
  int ok = 0, bad = 0;
  for (int64_t n = 0; n < raw.size; n++) {
    uint8_t *cut = malloc((size_t)n + 1); /* exactly n bytes reachable for ASan */
    memcpy(cut, raw.data, (size_t)n);
    fsh_flight_message m;
    int rc = fsh_flight_data_decode_bytes(cut, (size_t)n, &m, &err);
    CHECK_MSG(rc == 0 || rc == EINVAL, "cut at %lld: rc %d", (long long)n, rc);
    if (rc == 0) ok++; else bad++;
    if (rc != 0) CHECK(!m.metadata && !m.body && !m.app_metadata && !m.has_descriptor);
    fsh_flight_message_reset(&m);
    free(cut);
  }
  CHECK_EQ_INT(ok, 4); /* 0 bytes, after the descriptor, the header, app_metadata */
  CHECK(bad == raw.size - 4);
  /* The cut inside the body says which field and by how much. */
  fsh_flight_message m;
  CHECK_EQ_INT(fsh_flight_data_decode_bytes(raw.data, (size_t)raw.size - 8, &m, &err), EINVAL);
  char want[128];
  snprintf(want, sizeof want, "field 1000 (data_body) length %lld exceeds the %lld bytes left",
           (long long)p->body_length, (long long)p->body_length - 8);
  CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);
  fsh_bytes_reset(&raw);
  fsh_buffer_unref(am);
  fsh_flight_descriptor_reset(&d);
  encoded_reset(&e);
}

static int decode_raw(const void *data, size_t size, fsh_error *err) {
  fsh_flight_message m;
  int rc = fsh_flight_data_decode_bytes(data, size, &m, err);
  fsh_flight_message_reset(&m);
  return rc;
}

#define BYTES(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

static void check_bad(const uint8_t *data, size_t size, const char *needle) {
  fsh_error err = {{0}};
  int rc = decode_raw(data, size, &err);
  CHECK_MSG(rc == EINVAL, "rc %d for '%s'", rc, needle);
  CHECK_MSG(strstr(err.message, needle) != NULL, "'%s' lacks '%s'", err.message, needle);
}

static void test_flight_data_malformed(void) {
  fsh_error err;
  check_bad(BYTES(0x80), "truncated varint");
  check_bad(BYTES(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
            "overflows 64 bits");
  check_bad(BYTES(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), "overflows 64 bits");
  check_bad(BYTES(0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
            "field 2 (data_header) length 9223372036854775807 exceeds the 0 bytes left");
  check_bad(BYTES(0x12), "truncated varint (a length)");
  check_bad(BYTES(0xC2, 0x3E, 0x80, 0x80, 0x40, 1, 2), "field 1000 (data_body) length 1048576 exceeds the 2 bytes left");
  check_bad(BYTES(0x10, 0x01), "field 2 (data_header) has wire type 0");
  check_bad(BYTES(0xC5, 0x3E, 0, 0, 0, 0), "field 1000 (data_body) has wire type 5");
  check_bad(BYTES(0x09, 0, 0, 0, 0, 0, 0, 0, 0), "field 1 (flight_descriptor) has wire type 1");
  check_bad(BYTES(0x02, 0x00), "invalid field number 0");
  check_bad(BYTES(0x26), "invalid wire type 6");
  check_bad(BYTES(0x27), "invalid wire type 7");
  check_bad(BYTES(0x29, 1, 2, 3), "needs 8 bytes");
  check_bad(BYTES(0x2d, 1, 2, 3), "needs 4 bytes");
  check_bad(BYTES(0x2a, 5, 1), "field 5 (unknown) length 5 exceeds");
  check_bad(BYTES(0x2b, 0x08, 0x01), "truncated varint (a tag inside a group)");
  check_bad(BYTES(0x2b, 0x34), "group 5 ended by the end tag of field 6");
  check_bad(BYTES(0x0a, 0x02, 0x08, 0x80), "malformed FlightDescriptor");

  /* Unknown fields of every wire type are skipped; known ones still read;
   * a field seen twice keeps its last value. */
  const uint8_t ok[] = {0x28, 0x96, 0x01,                   /* 5: varint 150 */
                        0x31, 1, 2, 3, 4, 5, 6, 7, 8,      /* 6: fixed64 */
                        0x3d, 1, 2, 3, 4,                  /* 7: fixed32 */
                        0x42, 0x02, 0xaa, 0xbb,            /* 8: bytes */
                        0x4b, 0x08, 0x01, 0x53, 0x54, 0x4c, /* 9: group { 1: 1, 10: group {} } */
                        0x12, 0x01, 0x00,                  /* data_header: 00 (replaced below) */
                        0x1a, 0x02, 'h', 'i',              /* app_metadata */
                        0x0a, 0x04, 0x08, 0x01, 0x1a, 0x00, /* descriptor PATH [""] */
                        0xC2, 0x3E, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, /* data_body */
                        0x12, 0x02, 0x07, 0x09,            /* data_header again */
                        0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00}; /* field 2^29-1: varint 0 */
  fsh_flight_message m;
  CHECK_OK(fsh_flight_data_decode_bytes(ok, sizeof ok, &m, &err));
  CHECK(buffer_is(m.metadata, "\x07\x09", 2));
  CHECK(buffer_is(m.app_metadata, "hi", 2));
  CHECK(buffer_is(m.body, "\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  CHECK(m.has_descriptor && m.descriptor.type == FSH_FLIGHT_DESCRIPTOR_PATH &&
        m.descriptor.n_path == 1 && strcmp(m.descriptor.path[0], "") == 0);
  fsh_flight_message_reset(&m);
  /* Truncated anywhere: never a crash. */
  for (size_t n = 0; n < sizeof ok; n++) {
    uint8_t *cut = malloc(n + 1);
    memcpy(cut, ok, n);
    int rc = decode_raw(cut, n, &err);
    CHECK(rc == 0 || rc == EINVAL);
    free(cut);
  }
}

static void test_flight_data_alloc_failure(void) {
  fsh_error err;
  encoded_batch e = encode_sample();
  const char *path[] = {"a", "b"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 2));
  fsh_buffer *am = fsh_buffer_copy("meta", 4);
  grpc_byte_buffer *bb = NULL;
  CHECK_OK(fsh_flight_data_encode(&e.ps[e.n - 1], am, &d, &bb, &err));
  fsh_bytes raw = flatten(bb);
  grpc_byte_buffer *ones = sliced(raw.data, (size_t)raw.size, (size_t[]){3}, 1);
  int failures = 0;
  for (int64_t nth = 1; nth < 1000; nth++) {
    fsh_flight_message m;
    fsh_alloc_fail_after(nth, nth % 2 == 0);
    int rc = fsh_flight_data_decode(ones, &m, &err);
    fsh_alloc_fail_after(0, false);
    if (rc == 0) {
      check_message(&m, &e.ps[e.n - 1], "meta", &d);
      fsh_flight_message_reset(&m);
      break;
    }
    failures++;
    CHECK_MSG(rc == ENOMEM || rc == EINVAL, "%d %s", rc, err.message);
    CHECK(!m.metadata && !m.body && !m.app_metadata && !m.has_descriptor);
  }
  CHECK(failures >= 4);
  grpc_byte_buffer_destroy(ones);
  grpc_byte_buffer_destroy(bb);
  fsh_bytes_reset(&raw);
  fsh_buffer_unref(am);
  fsh_flight_descriptor_reset(&d);
  encoded_reset(&e);
}

static void test_byte_buffer_bytes(void) {
  fsh_error err;
  uint8_t data[1000];
  for (int i = 0; i < 1000; i++) data[i] = (uint8_t)(i * 7);
  grpc_byte_buffer *bb = sliced(data, sizeof data, (size_t[]){1, 10, 100}, 3);
  fsh_bytes b = flatten(bb);
  CHECK(b.size == 1000 && memcmp(b.data, data, 1000) == 0);
  fsh_bytes_reset(&b);
  grpc_byte_buffer_destroy(bb);
  bb = fsh_flight_wire_empty();
  CHECK_OK(fsh_flight_byte_buffer_bytes(bb, &b, &err));
  CHECK(b.size == 0 && b.data == NULL);
  grpc_byte_buffer_destroy(bb);
}

/* app_metadata in pieces (a worker's bundle: small headers between blocks
 * of a few large buffers, some of them slices): the same bytes on the wire
 * as fsh_flight_data_encode of the pieces' concatenation (the reference,
 * built here with memcpy), with and without a descriptor, data_header and
 * body; every piece of FSH_FLIGHT_PIECE_SLICE_MIN bytes or more goes out
 * as a slice pointing at the piece's own bytes, small neighbours share a
 * copied slice; and the message stays valid
 * (ASan) after every reference of ours is dropped: gRPC's slices hold the
 * buffers. A piece out of its buffer is EINVAL. */
static void test_flight_data_pieces(void) {
  fsh_error err;
  /* two roots: "images" of patterned bytes, blocks as slices of them */
  fsh_buffer *img[2];
  for (int r = 0; r < 2; r++) {
    img[r] = fsh_buffer_new(64 << 10, false);
    for (int64_t i = 0; i < img[r]->size; i++) img[r]->data[i] = (uint8_t)(i * 7 + r * 13 + (i >> 8));
  }
  fsh_buffer *hdrs = fsh_buffer_new(2048, false);
  for (int64_t i = 0; i < hdrs->size; i++) hdrs->data[i] = (uint8_t)(255 - i);
  enum { N = 41 };
  fsh_flight_piece pieces[N];
  fsh_buffer *blocks[N] = {0};
  int64_t total = 0;
  for (int i = 0; i < N; i++) {
    if (i % 2 == 0) { /* a header: 104 bytes first, then 88; one empty */
      int64_t len = i == 0 ? 104 : i == 10 ? 0 : 88;
      pieces[i] = (fsh_flight_piece){hdrs, 8 * i, len};
    } else { /* a block: a slice of one of the images, or the image itself */
      fsh_buffer *root = img[(i / 3) % 2];
      blocks[i] = i == 5 ? fsh_buffer_ref(root) : fsh_buffer_slice(root, 1000 * i, 3000 + 8 * i);
      int64_t len = i % 4 == 1 ? FSH_FLIGHT_PIECE_SLICE_MIN + 8 * i : 512 + 8 * i; /* large, small */
      pieces[i] = (fsh_flight_piece){blocks[i], i == 5 ? 100 : 8, i == 5 ? 4000 : len};
    }
    total += pieces[i].length;
  }
  fsh_buffer *cat = fsh_buffer_new(total, false);
  int64_t at = 0;
  for (int i = 0; i < N; i++) {
    memcpy(cat->data + at, pieces[i].buffer->data + pieces[i].offset, (size_t)pieces[i].length);
    at += pieces[i].length;
  }
  encoded_batch e = encode_sample();
  const char *path[] = {"shuffle", "7"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 2));
  for (int shape = 0; shape < 4; shape++) {
    const fsh_ipc_payload *p = shape & 1 ? &e.ps[e.n - 1] : NULL;
    const fsh_flight_descriptor *dd = shape & 2 ? &d : NULL;
    grpc_byte_buffer *want = NULL, *got = NULL;
    CHECK_OK(fsh_flight_data_encode(p, cat, dd, &want, &err));
    CHECK_OK(fsh_flight_data_encode_pieces(p, pieces, N, dd, &got, &err));
    if (!want || !got) break;
    if (shape == 0) { /* large pieces: slices on the pieces' own bytes */
      grpc_slice_buffer *sb = &got->data.raw.slice_buffer;
      int large = 0;
      for (int i = 1; i < N; i++) {
        if (pieces[i].length < FSH_FLIGHT_PIECE_SLICE_MIN) continue;
        large++;
        bool found = false;
        for (size_t k = 1; k < sb->count; k++)
          found |= GRPC_SLICE_START_PTR(sb->slices[k]) ==
                       pieces[i].buffer->data + pieces[i].offset &&
                   GRPC_SLICE_LENGTH(sb->slices[k]) == (size_t)pieces[i].length;
        CHECK_MSG(found, "piece %d (%lld bytes) was copied", i, (long long)pieces[i].length);
      }
      CHECK(large >= 10);
      CHECK((int64_t)sb->count < N); /* small neighbours share a slice */
    }
    fsh_bytes w = flatten(want);
    grpc_byte_buffer_destroy(want);
    if (shape == 3) { /* drop every reference of ours: gRPC's keep the bytes */
      for (int i = 0; i < N; i++) fsh_buffer_unref(blocks[i]), blocks[i] = NULL;
      for (int r = 0; r < 2; r++) fsh_buffer_unref(img[r]), img[r] = NULL;
      fsh_buffer_unref(hdrs);
      hdrs = NULL;
      encoded_reset(&e);
      fsh_buffer_unref(cat);
      cat = NULL;
    }
    fsh_bytes g = flatten(got);
    CHECK_MSG(g.size == w.size && memcmp(g.data, w.data, (size_t)w.size) == 0,
              "shape %d: %lld bytes, want %lld", shape, (long long)g.size, (long long)w.size);
    fsh_flight_message m;
    CHECK_OK(fsh_flight_data_decode(got, &m, &err));
    CHECK_EQ_INT(m.app_metadata ? m.app_metadata->size : -1, total);
    fsh_flight_message_reset(&m);
    fsh_bytes_reset(&w);
    fsh_bytes_reset(&g);
    grpc_byte_buffer_destroy(got);
  }
  /* out of its buffer */
  fsh_buffer *small = fsh_buffer_new(16, true);
  fsh_flight_piece bad[2] = {{small, 0, 8}, {small, 12, 8}};
  grpc_byte_buffer *bb = NULL;
  CHECK_EQ_INT(fsh_flight_data_encode_pieces(NULL, bad, 2, NULL, &bb, &err), EINVAL);
  CHECK(bb == NULL && strstr(err.message, "piece 1"));
  fsh_buffer_unref(small);
  fsh_flight_descriptor_reset(&d);
}

FSH_TEST_MAIN(TEST(test_descriptor_roundtrip), TEST(test_info_roundtrip),
              TEST(test_info_alloc_failure), TEST(test_poll_info_roundtrip),
              TEST(test_bytes_messages), TEST(test_action_messages), TEST(test_schema_bytes),
              TEST(test_status_mapping), TEST(test_flight_data_roundtrip),
              TEST(test_flight_data_body_kept_without_copy),
              TEST(test_flight_data_empty_and_app_metadata_only), TEST(test_flight_data_truncated),
              TEST(test_flight_data_malformed), TEST(test_flight_data_alloc_failure),
              TEST(test_byte_buffer_bytes), TEST(test_flight_data_pieces))
