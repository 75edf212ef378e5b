/* test_client_roundtrip.c -- every method of our Flight client against our
 * own server in-process: ListFlights, GetFlightInfo, PollFlightInfo,
 * GetSchema, DoGet (decoded and raw), DoPut (batches, raw payloads, an
 * empty put, PutResult), DoExchange (echo, with app_metadata), DoAction,
 * ListActions, Handshake and bearer tokens; statuses mapped back to errno
 * with the method, URI and message; a message far above gRPC's default
 * 4 MiB limit both ways; one client shared by several threads. */
#include "flight/client_fixture.h"

static void test_list_and_info(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};

  fsh_flight_info_list l;
  CHECK_OK(fsh_flight_list_flights(c, NULL, &l, &err));
  CHECK_EQ_INT(l.n, 2);
  if (l.n == 2) {
    CHECK(l.items[0].descriptor.type == FSH_FLIGHT_DESCRIPTOR_PATH);
    CHECK(strcmp(l.items[0].descriptor.path[0], "all") == 0);
    CHECK_EQ_INT(l.items[0].total_records, 21);
    CHECK_EQ_INT(l.items[0].total_bytes, 12345);
    CHECK(l.items[0].schema != NULL);
    CHECK_EQ_INT(l.items[0].n_endpoints, 1);
    CHECK(l.items[0].endpoints[0].ticket.size == 3);
    CHECK(strcmp(l.items[0].endpoints[0].locations[0], fx->uri) == 0);
    CHECK(l.items[1].schema == NULL && l.items[1].total_records == -1);
  }
  fsh_flight_info_list_reset(&l);

  const char *all[] = {"all"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, all, 1));
  fsh_flight_info info;
  CHECK_OK(fsh_flight_get_flight_info(c, &d, &info, &err));
  fsh_batch *sample = fsh_sample_all_types();
  CHECK(info.schema && fsh_schema_equals(info.schema, sample->schema, true, &err));
  fsh_flight_info_reset(&info);

  double progress = -1;
  bool done = true;
  CHECK_OK(fsh_flight_poll_flight_info(c, &d, &info, &progress, &done, &err));
  CHECK(progress == 0.5 && !done);
  CHECK(info.descriptor.type == FSH_FLIGHT_DESCRIPTOR_PATH);
  fsh_flight_info_reset(&info);

  fsh_schema *s = NULL;
  CHECK_OK(fsh_flight_get_schema(c, &d, &s, &err));
  CHECK(s && fsh_schema_equals(s, sample->schema, true, &err));
  fsh_schema_unref(s);
  fsh_batch_unref(sample);
  fsh_flight_descriptor_reset(&d);

  /* a CMD descriptor, and an unknown one */
  fsh_flight_descriptor cmd = {.type = FSH_FLIGHT_DESCRIPTOR_CMD};
  CHECK_OK(fsh_bytes_set(&cmd.cmd, "big", 3));
  CHECK_OK(fsh_flight_get_flight_info(c, &cmd, &info, &err));
  CHECK_EQ_INT(info.total_records, -1);
  fsh_flight_info_reset(&info);
  CHECK_OK(fsh_bytes_set(&cmd.cmd, "nope", 4));
  CHECK_EQ_INT(fsh_flight_get_flight_info(c, &cmd, &info, &err), ENOENT);
  char want[200];
  snprintf(want, sizeof want, "GetFlightInfo %s: NOT_FOUND: ", fx->uri);
  CHECK_MSG(strstr(err.message, want) && strstr(err.message, "no flight 'nope'"), "%s",
            err.message);
  CHECK_EQ_INT(fsh_flight_get_schema(c, &cmd, &s, &err), ENOENT);
  CHECK(s == NULL);
  fsh_flight_descriptor_reset(&cmd);

  fsh_flight_client_close(c);
  fx_stop(fx);
}

static void test_do_get(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};
  fsh_batch *sample = fsh_sample_all_types();

  /* decoded */
  fsh_flight_reader *r = NULL;
  fsh_bytes t = {(uint8_t *)"all", 3};
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  fsh_schema *s = NULL;
  if (r) {
    CHECK_OK(fsh_flight_reader_schema(r, &s, &err));
    CHECK(s && fsh_schema_equals(s, sample->schema, true, &err));
    int n = 0;
    for (;;) {
      fsh_batch *b = NULL;
      int rc = fsh_flight_reader_next(r, &b, &err);
      CHECK_OK(rc);
      if (rc || !b) break;
      CHECK_MSG(fsh_batch_equals(b, sample, &err), "%s", err.message);
      fsh_batch_unref(b);
      n++;
    }
    CHECK_EQ_INT(n, 3);
    fsh_batch *b = (fsh_batch *)1;
    CHECK_OK(fsh_flight_reader_next(r, &b, &err)); /* the end stays the end */
    CHECK(b == NULL);
    fsh_flight_reader_free(r);
  }

  /* raw: the schema, dictionaries, 3 record batches; the schema is known
   * from the first message on */
  r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  if (r) {
    int n = 0, batches = 0, first = FSH_IPC_NONE;
    for (;;) {
      fsh_flight_message m;
      bool done = false;
      int rc = fsh_flight_reader_next_raw(r, &m, &done, &err);
      CHECK_OK(rc);
      if (rc || done) break;
      fsh_ipc_message_type type;
      int64_t body = 0;
      CHECK_OK(fsh_ipc_peek_message(m.metadata, &type, &body, &err));
      if (n == 0) first = type;
      batches += type == FSH_IPC_RECORD_BATCH;
      n++;
      if (n == 1) {
        CHECK_OK(fsh_flight_reader_schema(r, &s, &err));
        CHECK(s != NULL);
      }
      CHECK(body == (m.body ? m.body->size : 0) || (m.body && m.body->size >= body));
      fsh_flight_message_reset(&m);
    }
    CHECK(first == FSH_IPC_SCHEMA);
    CHECK_EQ_INT(batches, 3); /* and dictionary batches between */
    fsh_flight_reader_free(r);
  }

  /* schema first, then next_raw still starts with the schema message */
  r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  if (r) {
    CHECK_OK(fsh_flight_reader_schema(r, &s, &err));
    fsh_flight_message m;
    bool done = false;
    CHECK_OK(fsh_flight_reader_next_raw(r, &m, &done, &err));
    fsh_ipc_message_type type = FSH_IPC_NONE;
    int64_t body = 0;
    CHECK(!done && m.metadata && fsh_ipc_peek_message(m.metadata, &type, &body, &err) == 0);
    CHECK(type == FSH_IPC_SCHEMA);
    fsh_flight_message_reset(&m);
    fsh_flight_reader_free(r); /* abandoned mid-stream: cancels */
  }

  /* unknown ticket */
  fsh_bytes bad = {(uint8_t *)"x", 1};
  r = NULL;
  int rc = fsh_flight_do_get(c, &bad, &r, &err);
  if (rc == 0) { /* the status may come with the first read */
    fsh_batch *b = NULL;
    rc = fsh_flight_reader_next(r, &b, &err);
    fsh_flight_reader_free(r);
  }
  CHECK_EQ_INT(rc, ENOENT);
  char want[200];
  snprintf(want, sizeof want, "DoGet %s: NOT_FOUND: unknown ticket 'x'", fx->uri);
  CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);

  fsh_batch_unref(sample);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

static void test_do_put(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};
  fsh_batch *sample = fsh_sample_all_types();
  const char *path[] = {"shuffle", "7"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 2));

  fsh_flight_writer *w = NULL;
  CHECK_OK(fsh_flight_do_put(c, &d, sample->schema, NULL, &w, &err));
  if (w) {
    for (int i = 0; i < 4; i++) CHECK_OK(fsh_flight_writer_write(w, sample, &err));
    fsh_buffer *result = NULL;
    CHECK_OK(fsh_flight_writer_close(w, &result, &err));
    CHECK(result && result->size == 14 && memcmp(result->data, "stored 28 rows", 14) == 0);
    fsh_buffer_unref(result);
  }
  pthread_mutex_lock(&fx->mu);
  CHECK_EQ_INT(fx->n_put, 4);
  for (int64_t i = 0; i < fx->n_put; i++)
    CHECK_MSG(fsh_batch_equals(fx->put[i], sample, &err), "%s", err.message);
  CHECK(fx->put_descriptor.type == FSH_FLIGHT_DESCRIPTOR_PATH && fx->put_descriptor.n_path == 2 &&
        strcmp(fx->put_descriptor.path[1], "7") == 0);
  CHECK(fx->put_schema && fsh_schema_equals(fx->put_schema, sample->schema, true, &err));
  pthread_mutex_unlock(&fx->mu);

  /* raw payloads, without a schema at open: the descriptor rides on the
   * first one; app_metadata goes along */
  fsh_ipc_encoder *enc = NULL;
  CHECK_OK(fsh_ipc_encoder_new(sample->schema, NULL, &enc, &err));
  w = NULL;
  CHECK_OK(fsh_flight_do_put(c, &d, NULL, NULL, &w, &err));
  if (w && enc) {
    CHECK_EQ_INT(fsh_flight_writer_write(w, sample, &err), EINVAL); /* raw only */
    fsh_ipc_payload p;
    CHECK_OK(fsh_ipc_encode_schema(enc, &p, &err));
    CHECK_OK(fsh_flight_writer_write_raw(w, &p, NULL, &err));
    fsh_ipc_payload_reset(&p);
    fsh_ipc_payload *ps = NULL;
    int32_t n = 0;
    CHECK_OK(fsh_ipc_encode_batch(enc, sample, &ps, &n, &err));
    fsh_buffer *md = fsh_buffer_copy("meta", 4);
    for (int32_t i = 0; i < n; i++) {
      CHECK_OK(fsh_flight_writer_write_raw(w, &ps[i], md, &err));
      fsh_ipc_payload_reset(&ps[i]);
    }
    fsh_free(ps);
    CHECK_OK(fsh_flight_writer_write_raw(w, NULL, md, &err)); /* app_metadata only */
    fsh_buffer_unref(md);
    CHECK_OK(fsh_flight_writer_close(w, NULL, &err));
  }
  fsh_ipc_encoder_free(enc);
  pthread_mutex_lock(&fx->mu);
  CHECK_EQ_INT(fx->n_put, 1);
  CHECK(fx->put_app_metadata >= 2);
  CHECK(fx->put_descriptor.n_path == 2);
  pthread_mutex_unlock(&fx->mu);

  /* a put with nothing but the schema */
  w = NULL;
  CHECK_OK(fsh_flight_do_put(c, &d, sample->schema, NULL, &w, &err));
  fsh_buffer *result = NULL;
  if (w) CHECK_OK(fsh_flight_writer_close(w, &result, &err));
  CHECK(result && memcmp(result->data, "stored 0 rows", 13) == 0);
  fsh_buffer_unref(result);

  /* cancelled mid-way: no leak, the client still works */
  w = NULL;
  CHECK_OK(fsh_flight_do_put(c, &d, sample->schema, NULL, &w, &err));
  if (w) {
    CHECK_OK(fsh_flight_writer_write(w, sample, &err));
    fsh_flight_writer_cancel(w);
  }
  fsh_flight_info_list l;
  CHECK_OK(fsh_flight_list_flights(c, NULL, &l, &err));
  fsh_flight_info_list_reset(&l);

  fsh_flight_descriptor_reset(&d);
  fsh_batch_unref(sample);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

static void test_do_exchange(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};
  fsh_batch *sample = fsh_sample_all_types();
  const char *path[] = {"echo"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 1));
  fsh_flight_writer *w = NULL;
  fsh_flight_reader *r = NULL;
  CHECK_OK(fsh_flight_do_exchange(c, &d, sample->schema, NULL, &w, &r, &err));
  if (w && r) {
    /* interleaved: write one, read one */
    fsh_schema *s = NULL;
    CHECK_OK(fsh_flight_reader_schema(r, &s, &err));
    CHECK(s && fsh_schema_equals(s, sample->schema, true, &err));
    for (int i = 0; i < 3; i++) {
      CHECK_OK(fsh_flight_writer_write(w, sample, &err));
      fsh_batch *b = NULL;
      CHECK_OK(fsh_flight_reader_next(r, &b, &err));
      CHECK(b && fsh_batch_equals(b, sample, &err));
      fsh_batch_unref(b);
    }
    CHECK_OK(fsh_flight_writer_close(w, NULL, &err));
    fsh_batch *b = (fsh_batch *)1;
    CHECK_OK(fsh_flight_reader_next(r, &b, &err));
    CHECK(b == NULL);
    fsh_flight_reader_free(r);
  }
  fsh_flight_descriptor_reset(&d);
  fsh_batch_unref(sample);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

static void test_actions(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};
  fsh_flight_action a = {.type = "echo", .body = {(uint8_t *)"hello", 5}};
  fsh_flight_result_list l;
  CHECK_OK(fsh_flight_do_action(c, &a, &l, &err));
  CHECK(l.n == 1 && l.items[0].size == 5 && memcmp(l.items[0].data, "hello", 5) == 0);
  fsh_flight_result_list_reset(&l);
  a.type = "count";
  CHECK_OK(fsh_flight_do_action(c, &a, &l, &err));
  CHECK(l.n == 3 && l.items[2].size == 1 && l.items[2].data[0] == '3');
  fsh_flight_result_list_reset(&l);
  a.type = "fail";
  CHECK_EQ_INT(fsh_flight_do_action(c, &a, &l, &err), EEXIST);
  CHECK_MSG(strstr(err.message, "DoAction") && strstr(err.message, "ALREADY_EXISTS: ") &&
                strstr(err.message, "it is already there"),
            "%s", err.message);
  CHECK(l.n == 0);
  a.type = "nope";
  CHECK_EQ_INT(fsh_flight_do_action(c, &a, &l, &err), ENOTSUP);
  CHECK_MSG(strstr(err.message, "UNIMPLEMENTED"), "%s", err.message);

  fsh_flight_action_type_list t;
  CHECK_OK(fsh_flight_list_actions(c, &t, &err));
  CHECK(t.n == 3 && strcmp(t.items[1].type, "count") == 0 &&
        strcmp(t.items[1].description, "answers 1, 2, 3") == 0);
  fsh_flight_action_type_list_reset(&t);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

static void test_auth(void) {
  fsh_flight_server_options o = {.listen = "127.0.0.1:0",
                                 .n_threads = 2,
                                 .auth_token = "tok-123",
                                 .basic_user = "alice",
                                 .basic_password = "wonderland"};
  fx_server *fx = fx_start(&o);
  fsh_error err = {{0}};
  fsh_flight_action_type_list t;
  const char *tokens[] = {NULL, "wrong"};
  for (int i = 0; i < 2; i++) {
    fsh_flight_client *c = fx_client(fx->uri, tokens[i], 10000);
    CHECK_EQ_INT(fsh_flight_list_actions(c, &t, &err), EACCES);
    CHECK_MSG(strstr(err.message, "ListActions") && strstr(err.message, "UNAUTHENTICATED"), "%s",
              err.message);
    fsh_bytes tk = {(uint8_t *)"all", 3};
    fsh_flight_reader *r = NULL;
    int rc = fsh_flight_do_get(c, &tk, &r, &err);
    if (rc == 0) {
      fsh_batch *b = NULL;
      rc = fsh_flight_reader_next(r, &b, &err);
      fsh_flight_reader_free(r);
    }
    CHECK_EQ_INT(rc, EACCES);
    fsh_flight_client_close(c);
  }
  fsh_flight_client *c = fx_client(fx->uri, "tok-123", 10000);
  CHECK_OK(fsh_flight_list_actions(c, &t, &err));
  fsh_flight_action_type_list_reset(&t);
  fsh_flight_client_close(c);

  /* Handshake: the token comes back and is used from then on */
  c = fx_client(fx->uri, NULL, 10000);
  char *token = NULL;
  CHECK_EQ_INT(fsh_flight_handshake(c, "alice", "nope", &token, &err), EACCES);
  CHECK(token == NULL);
  CHECK_OK(fsh_flight_handshake(c, "alice", "wonderland", &token, &err));
  CHECK(token && strcmp(token, "tok-123") == 0);
  fsh_free(token);
  CHECK_OK(fsh_flight_list_actions(c, &t, &err));
  fsh_flight_action_type_list_reset(&t);
  fsh_flight_action a = {.type = "whoami"};
  fsh_flight_result_list l;
  CHECK_OK(fsh_flight_do_action(c, &a, &l, &err));
  CHECK(l.n == 1 && l.items[0].size == 5 && memcmp(l.items[0].data, "alice", 5) == 0);
  fsh_flight_result_list_reset(&l);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

/* 80 MiB batches (gRPC's default receive limit is 4 MiB) both ways. */
static void test_big_messages(void) {
  fx_server *fx = fx_start(NULL);
  fx->big_bytes = 80 << 20;
  fsh_flight_client *c = fx_client(fx->uri, NULL, 60000);
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"big", 3};
  fsh_flight_reader *r = NULL;
  fsh_batch *got = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  if (r) CHECK_OK(fsh_flight_reader_next(r, &got, &err));
  fsh_batch *want = fx_big_batch(fx->big_bytes);
  CHECK(got && got->length == want->length && fsh_batch_equals(got, want, &err));
  fsh_batch_unref(got);
  fsh_flight_reader_free(r);

  const char *path[] = {"big"};
  fsh_flight_descriptor d = {0};
  CHECK_OK(fsh_flight_descriptor_path(&d, path, 1));
  fsh_flight_writer *w = NULL;
  CHECK_OK(fsh_flight_do_put(c, &d, want->schema, NULL, &w, &err));
  if (w) {
    CHECK_OK(fsh_flight_writer_write(w, want, &err));
    CHECK_OK(fsh_flight_writer_close(w, NULL, &err));
  }
  pthread_mutex_lock(&fx->mu);
  CHECK(fx->n_put == 1 && fsh_batch_equals(fx->put[0], want, &err));
  pthread_mutex_unlock(&fx->mu);
  fsh_flight_descriptor_reset(&d);
  fsh_batch_unref(want);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

typedef struct worker {
  fsh_flight_client *c;
  int ok;
} worker;

static void *get_all_many_times(void *arg) {
  worker *wk = arg;
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"all", 3};
  for (int i = 0; i < 10; i++) {
    fsh_flight_reader *r = NULL;
    if (fsh_flight_do_get(wk->c, &t, &r, &err)) return NULL;
    int n = 0, rc = 0;
    for (;;) {
      fsh_batch *b = NULL;
      if ((rc = fsh_flight_reader_next(r, &b, &err)) != 0 || !b) break;
      fsh_batch_unref(b);
      n++;
    }
    fsh_flight_reader_free(r);
    if (rc == 0 && n == 3) wk->ok++;
  }
  return NULL;
}

static void test_threads_share_a_client(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 30000);
  pthread_t th[4];
  worker wk[4];
  for (int i = 0; i < 4; i++) {
    wk[i] = (worker){c, 0};
    pthread_create(&th[i], NULL, get_all_many_times, &wk[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_EQ_INT(wk[i].ok, 10);
  }
  fsh_flight_client_close(c);
  fx_stop(fx);
}

FSH_TEST_MAIN(TEST(test_list_and_info), TEST(test_do_get), TEST(test_do_put),
              TEST(test_do_exchange), TEST(test_actions), TEST(test_auth),
              TEST(test_big_messages), TEST(test_threads_share_a_client))
