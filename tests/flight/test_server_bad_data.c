/* test_server_bad_data.c -- malformed FlightData sent to our server over
 * the wire: a data_header that is not an IPC Message, and a record batch
 * whose body is shorter than its header says. Each must end the DoPut with
 * INVALID_ARGUMENT (EINVAL on the client) and a message that says what was
 * wrong; the server keeps serving, and nothing leaks (LSan). */
#include "flight/client_fixture.h"

/* A raw DoPut of the given payloads; returns the status of close(). */
static int put_raw(fx_server *fx, const fsh_ipc_payload *payloads, int n, fsh_error *err) {
  fsh_flight_client *c = fx_client(fx->uri, NULL, 5000);
  fsh_flight_descriptor d = {0};
  const char *path[] = {"bad"};
  int rc = fsh_flight_descriptor_path(&d, path, 1);
  fsh_flight_writer *w = NULL;
  if (!rc) rc = fsh_flight_do_put(c, &d, NULL, NULL, &w, err);
  for (int i = 0; !rc && i < n; i++) rc = fsh_flight_writer_write_raw(w, &payloads[i], NULL, err);
  if (w) {
    int close_rc = fsh_flight_writer_close(w, NULL, rc ? NULL : err);
    if (!rc) rc = close_rc;
  }
  fsh_flight_descriptor_reset(&d);
  fsh_flight_client_close(c);
  return rc;
}

/* The schema payload and the first record batch payload of b. */
static void encode_schema_and_batch(fsh_batch *b, fsh_ipc_payload *schema, fsh_ipc_payload *batch) {
  fsh_error err = {{0}};
  fsh_ipc_encoder *enc = NULL;
  CHECK_OK(fsh_ipc_encoder_new(b->schema, NULL, &enc, &err));
  CHECK_OK(fsh_ipc_encode_schema(enc, schema, &err));
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  CHECK_OK(fsh_ipc_encode_batch(enc, b, &ps, &n, &err));
  CHECK(n == 1);
  *batch = ps[0];
  for (int32_t i = 1; i < n; i++) fsh_ipc_payload_reset(&ps[i]);
  fsh_free(ps);
  fsh_ipc_encoder_free(enc);
}

static void test_header_not_a_message(void) {
  fx_server *fx = fx_start(NULL);
  static const uint8_t junk[16] = {0x10, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8};
  fsh_ipc_payload p = {.type = FSH_IPC_SCHEMA, .metadata = fsh_buffer_copy(junk, sizeof junk)};
  fsh_error err = {{0}};
  int rc = put_raw(fx, &p, 1, &err);
  CHECK_MSG(rc == EINVAL, "rc %d: %s", rc, err.message);
  printf("  server said: %s\n", err.message);
  CHECK_MSG(strstr(err.message, "INVALID_ARGUMENT") && strstr(err.message, "flatbuffer"), "%s",
            err.message);
  fsh_ipc_payload_reset(&p);
  /* the server still serves */
  fsh_batch *b = fx_big_batch(1024);
  fsh_ipc_payload s, bp;
  encode_schema_and_batch(b, &s, &bp);
  fsh_ipc_payload good[2] = {s, bp};
  CHECK_OK(put_raw(fx, good, 2, &err));
  CHECK_EQ_INT(fx->n_put, 1);
  fsh_ipc_payload_reset(&s);
  fsh_ipc_payload_reset(&bp);
  fsh_batch_unref(b);
  fx_stop(fx);
}

static void test_body_shorter_than_header(void) {
  fx_server *fx = fx_start(NULL);
  fsh_batch *b = fx_big_batch(4096);
  fsh_ipc_payload s, bp;
  encode_schema_and_batch(b, &s, &bp);
  /* keep the header, send only 64 bytes of the 4 KiB body */
  fsh_buffer *short_body = fsh_buffer_new(64, true);
  fsh_ipc_payload cut = {.type = bp.type, .metadata = bp.metadata, .body_length = 64,
                         .n_body = 1, .body = &short_body};
  fsh_ipc_payload msgs[2] = {s, cut};
  fsh_error err = {{0}};
  int rc = put_raw(fx, msgs, 2, &err);
  CHECK_MSG(rc == EINVAL, "rc %d: %s", rc, err.message);
  printf("  server said: %s\n", err.message);
  CHECK_MSG(strstr(err.message, "INVALID_ARGUMENT") && strstr(err.message, "body"), "%s",
            err.message);
  fsh_buffer_unref(short_body);
  fsh_ipc_payload_reset(&s);
  fsh_ipc_payload_reset(&bp);
  fsh_batch_unref(b);
  fx_stop(fx);
}

FSH_TEST_MAIN(TEST(test_header_not_a_message), TEST(test_body_shorter_than_header))
