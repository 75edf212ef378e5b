/* client_fixture.h -- what the Flight client tests share: an in-process
 * Flight server of ours (port 0) with handlers for every method over a
 * small catalog ("all": the every-type sample batch three times, "big":
 * one batch of a chosen size, "endless": 1 MiB batches until cancelled),
 * a DoPut sink that decodes and keeps what it receives, an echoing
 * DoExchange, and actions "echo" / "count" / "fail" / "stall". Header-only. */
#ifndef FSH_TEST_CLIENT_FIXTURE_H
#define FSH_TEST_CLIENT_FIXTURE_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <flightshuffle/flight.h>

#include "ipc/sample_batches.h"
#include "test.h"

typedef struct fx_server {
  fsh_flight_server *server;
  char uri[64];
  int64_t big_bytes; /* size of the "big" batch's one column */
  pthread_mutex_t mu;
  /* what DoPut received */
  fsh_flight_descriptor put_descriptor;
  fsh_schema *put_schema;
  int64_t n_put;
  fsh_batch *put[64];
  int64_t put_app_metadata; /* messages that carried app_metadata */
  atomic_int cancelled_sources; /* endless sources released before their end */
  atomic_int endless_sent;      /* batches the endless / stall sources produced */
  atomic_int stalls_cancelled;  /* "stall" calls that saw the client cancel */
  atomic_int stalls_done;       /* "stall" calls whose pause is over */
  /* the threads the DoGet handler ran on, in call order (under mu) */
  pthread_t get_threads[64];
  int n_get_threads;
} fx_server;

/* The pause of the "stall" ticket and DoPut descriptor: cut short when the
 * client cancels the call. */
#define FX_STALL_MS 2000

/* Sleeps FX_STALL_MS, or until call is cancelled; counts which. */
static inline bool fx_stall(fx_server *fx, fsh_flight_call *call) {
  bool cancelled = false;
  for (int i = 0; i < FX_STALL_MS / 10 && !cancelled; i++) {
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
    cancelled = fsh_flight_call_cancelled(call);
  }
  if (cancelled) atomic_fetch_add(&fx->stalls_cancelled, 1);
  atomic_fetch_add(&fx->stalls_done, 1);
  return cancelled;
}

/* ---- catalog ------------------------------------------------------------------ */

/* One batch of one int64 column of `bytes` bytes (values i * 3). */
static inline fsh_batch *fx_big_batch(int64_t bytes) {
  fsh_schema *s = fsh_schema_new(1);
  if (!s || fsh_field_init(&s->fields[0], "x", FSH_TYPE_INT64, false)) abort();
  int64_t n = bytes / 8;
  fsh_buffer *vals = fsh_buffer_new(n * 8, false);
  if (!vals) abort();
  int64_t *v = (int64_t *)vals->data;
  for (int64_t i = 0; i < n; i++) v[i] = i * 3;
  fsh_array *a = fsh_array_new(2, 0);
  a->length = n;
  a->null_count = 0;
  a->buffers[1] = vals;
  fsh_batch *b = fsh_batch_new(s, n);
  b->columns[0] = a;
  fsh_schema_unref(s);
  return b;
}

static inline int fx_info(fx_server *fx, const char *name, fsh_flight_info *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  fsh_batch *b = strcmp(name, "all") == 0 ? fsh_sample_all_types() : NULL;
  if (!b && strcmp(name, "big") && strcmp(name, "endless"))
    return fsh_error_set(err, ENOENT, "no flight '%s'", name);
  if (b) out->schema = fsh_schema_ref(b->schema);
  fsh_batch_unref(b);
  const char *path[] = {name};
  if (fsh_flight_descriptor_path(&out->descriptor, path, 1)) return ENOMEM;
  out->n_endpoints = 1;
  out->endpoints = fsh_calloc(1, sizeof *out->endpoints);
  out->endpoints[0].n_locations = 1;
  out->endpoints[0].locations = fsh_calloc(1, sizeof(char *));
  out->endpoints[0].locations[0] = fsh_strdup(fx->uri);
  if (fsh_bytes_set(&out->endpoints[0].ticket, name, (int64_t)strlen(name))) return ENOMEM;
  out->total_records = strcmp(name, "all") == 0 ? 21 : -1;
  out->total_bytes = 12345;
  return 0;
}

static inline const char *fx_name(const fsh_flight_descriptor *d, char *buf, size_t n) {
  if (d->type == FSH_FLIGHT_DESCRIPTOR_PATH && d->n_path == 1) return d->path[0];
  if (d->type == FSH_FLIGHT_DESCRIPTOR_CMD) {
    snprintf(buf, n, "%.*s", (int)d->cmd.size, (const char *)d->cmd.data);
    return buf;
  }
  return "";
}

static int fx_list_flights(void *ctx, fsh_flight_call *call, const fsh_bytes *criteria,
                           fsh_flight_info_list *out, fsh_error *err) {
  const char *names[] = {"all", "big"};
  for (int i = 0; i < 2; i++) {
    fsh_flight_info info;
    FSH_RETURN_NOT_OK(fx_info(ctx, names[i], &info, err));
    if (fsh_flight_info_list_push(out, &info)) return ENOMEM;
  }
  return 0;
}

static int fx_get_flight_info(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                              fsh_flight_info *out, fsh_error *err) {
  char buf[128];
  int rc = fx_info(ctx, fx_name(d, buf, sizeof buf), out, err);
  if (rc) fsh_flight_info_reset(out);
  return rc;
}

static int fx_poll_flight_info(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                               fsh_flight_info *out, double *progress, bool *done,
                               fsh_error *err) {
  *progress = 0.5;
  *done = false;
  return fx_get_flight_info(ctx, call, d, out, err);
}

static int fx_get_schema(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                         fsh_schema **out, fsh_error *err) {
  fsh_flight_info info;
  char buf[128];
  int rc = fx_info(ctx, fx_name(d, buf, sizeof buf), &info, err);
  if (rc == 0 && !info.schema) rc = fsh_error_set(err, ENOENT, "no schema known");
  if (rc == 0) *out = fsh_schema_ref(info.schema);
  fsh_flight_info_reset(&info);
  return rc;
}

/* "endless": 1 MiB batches until the client goes away. "stall": 2 of
 * them, then a pause of FX_STALL_MS (fx_stall), then the end. */
typedef struct fx_endless {
  fsh_flight_source base;
  fx_server *fx;
  fsh_flight_call *call;
  fsh_ipc_encoder *enc;
  fsh_batch *batch;
  bool schema_sent;
  bool ended;
  int stall_after; /* batches before the pause; 0 = endless */
  int sent;
} fx_endless;

static int fx_endless_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                           bool *done, fsh_error *err) {
  fx_endless *e = (fx_endless *)s;
  *done = false;
  if (!e->schema_sent) {
    e->schema_sent = true;
    return fsh_ipc_encode_schema(e->enc, out, err);
  }
  if (e->stall_after > 0 && e->sent == e->stall_after) {
    e->ended = true;
    if (fx_stall(e->fx, e->call)) return fsh_error_set(err, ECANCELED, "stall: cancelled");
    *done = true;
    return 0;
  }
  e->sent++;
  atomic_fetch_add(&e->fx->endless_sent, 1);
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  FSH_RETURN_NOT_OK(fsh_ipc_encode_batch(e->enc, e->batch, &ps, &n, err));
  *out = ps[0]; /* no dictionaries: one payload */
  fsh_free(ps);
  return 0;
}

static void fx_endless_release(fsh_flight_source *s) {
  fx_endless *e = (fx_endless *)s;
  if (!e->ended) atomic_fetch_add(&e->fx->cancelled_sources, 1);
  fsh_ipc_encoder_free(e->enc);
  fsh_batch_unref(e->batch);
  fsh_free(e);
}

static int fx_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                     fsh_flight_source **out, fsh_error *err) {
  fx_server *fx = ctx;
  pthread_mutex_lock(&fx->mu);
  if (fx->n_get_threads < 64) fx->get_threads[fx->n_get_threads++] = pthread_self();
  pthread_mutex_unlock(&fx->mu);
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(ticket->size < 60 ? ticket->size : 60),
           (const char *)ticket->data);
  if (strcmp(name, "all") == 0) {
    fsh_batch *b[3] = {fsh_sample_all_types(), fsh_sample_all_types(), fsh_sample_all_types()};
    return fsh_flight_source_from_batches(fsh_schema_ref(b[0]->schema), b, 3, NULL, out, err);
  }
  if (strcmp(name, "big") == 0) {
    fsh_batch *b = fx_big_batch(fx->big_bytes);
    return fsh_flight_source_from_batches(fsh_schema_ref(b->schema), &b, 1, NULL, out, err);
  }
  if (strcmp(name, "endless") == 0 || strcmp(name, "stall") == 0) {
    fx_endless *e = fsh_calloc(1, sizeof *e);
    e->fx = fx;
    e->call = call;
    e->stall_after = strcmp(name, "stall") == 0 ? 2 : 0;
    e->batch = fx_big_batch(1 << 20);
    e->base.next = fx_endless_next;
    e->base.release = fx_endless_release;
    e->base.ctx = e;
    int rc = fsh_ipc_encoder_new(e->batch->schema, NULL, &e->enc, err);
    if (rc) {
      e->ended = true;
      fx_endless_release(&e->base);
      return rc;
    }
    *out = &e->base;
    return 0;
  }
  return fsh_error_set(err, ENOENT, "unknown ticket '%s'", name);
}

/* DoPut: decodes what arrives, keeps the batches in fx. (The server hands
 * the first message to the handler and then to the sink too.) */
typedef struct fx_sink {
  fsh_flight_sink base;
  fx_server *fx;
  fsh_ipc_decoder *dec;
  int64_t rows;
} fx_sink;

static int fx_sink_take(fx_sink *k, fsh_flight_message *m, fsh_error *err) {
  fsh_batch *b = NULL;
  int rc = 0;
  pthread_mutex_lock(&k->fx->mu);
  if (m->app_metadata) k->fx->put_app_metadata++;
  if (m->metadata) rc = fsh_ipc_decode_message(k->dec, m->metadata, m->body, &b, err);
  if (rc == 0 && b) {
    k->rows += b->length;
    if (k->fx->n_put < 64)
      k->fx->put[k->fx->n_put++] = b;
    else
      fsh_batch_unref(b);
  }
  pthread_mutex_unlock(&k->fx->mu);
  fsh_flight_message_reset(m);
  return rc;
}

static int fx_sink_message(fsh_flight_sink *s, fsh_flight_message *m, fsh_error *err) {
  return fx_sink_take((fx_sink *)s, m, err);
}

static int fx_sink_finish(fsh_flight_sink *s, fsh_buffer **put_result, fsh_error *err) {
  fx_sink *k = (fx_sink *)s;
  pthread_mutex_lock(&k->fx->mu);
  fsh_schema_unref(k->fx->put_schema);
  k->fx->put_schema = fsh_ipc_decoder_schema(k->dec) ? fsh_schema_ref(fsh_ipc_decoder_schema(k->dec)) : NULL;
  pthread_mutex_unlock(&k->fx->mu);
  char msg[64];
  int n = snprintf(msg, sizeof msg, "stored %lld rows", (long long)k->rows);
  *put_result = fsh_buffer_copy(msg, n);
  return 0;
}

static void fx_sink_release(fsh_flight_sink *s) {
  fx_sink *k = (fx_sink *)s;
  fsh_ipc_decoder_free(k->dec);
  fsh_free(k);
}

static int fx_do_put(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                     fsh_flight_sink **out, fsh_error *err) {
  fx_server *fx = ctx;
  /* descriptor path "stall": the handler pauses before reading on */
  if (first->has_descriptor && first->descriptor.type == FSH_FLIGHT_DESCRIPTOR_PATH &&
      first->descriptor.n_path == 1 && strcmp(first->descriptor.path[0], "stall") == 0 &&
      fx_stall(fx, call))
    return fsh_error_set(err, ECANCELED, "stall: cancelled");
  fx_sink *k = fsh_calloc(1, sizeof *k);
  k->fx = fx;
  k->base = (fsh_flight_sink){fx_sink_message, fx_sink_finish, fx_sink_release, k};
  int rc = fsh_ipc_decoder_new(&k->dec, err);
  pthread_mutex_lock(&fx->mu);
  fsh_flight_descriptor_reset(&fx->put_descriptor);
  if (rc == 0 && first->has_descriptor)
    rc = fsh_flight_descriptor_copy(&fx->put_descriptor, &first->descriptor);
  for (int64_t i = 0; i < fx->n_put; i++) fsh_batch_unref(fx->put[i]);
  fx->n_put = 0;
  fx->put_app_metadata = 0;
  pthread_mutex_unlock(&fx->mu);
  if (rc) {
    fx_sink_release(&k->base);
    return rc;
  }
  *out = &k->base;
  return 0;
}

/* DoExchange: every received message goes back as it is. */
typedef struct fx_echo {
  fsh_flight_sink sink;
  fsh_flight_source source;
  pthread_mutex_t mu;
  fsh_flight_message q[256];
  int head, tail;
  bool finished;
  int refs;
} fx_echo;

static void fx_echo_unref(fx_echo *e) {
  pthread_mutex_lock(&e->mu);
  bool last = --e->refs == 0;
  pthread_mutex_unlock(&e->mu);
  if (!last) return;
  while (e->head < e->tail) fsh_flight_message_reset(&e->q[e->head++]);
  pthread_mutex_destroy(&e->mu);
  fsh_free(e);
}

static int fx_echo_message(fsh_flight_sink *s, fsh_flight_message *m, fsh_error *err) {
  fx_echo *e = s->ctx;
  pthread_mutex_lock(&e->mu);
  int rc = e->tail < 256 ? 0 : fsh_error_set(err, ENOMEM, "echo queue full");
  if (rc == 0) {
    e->q[e->tail++] = *m;
    memset(m, 0, sizeof *m);
  }
  pthread_mutex_unlock(&e->mu);
  fsh_flight_message_reset(m);
  return rc;
}

static int fx_echo_finish(fsh_flight_sink *s, fsh_buffer **put_result, fsh_error *err) {
  fx_echo *e = s->ctx;
  pthread_mutex_lock(&e->mu);
  e->finished = true;
  pthread_mutex_unlock(&e->mu);
  return 0;
}

static void fx_echo_sink_release(fsh_flight_sink *s) { fx_echo_unref(s->ctx); }
static void fx_echo_source_release(fsh_flight_source *s) { fx_echo_unref(s->ctx); }

static int fx_echo_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                        bool *done, fsh_error *err) {
  fx_echo *e = s->ctx;
  *done = false;
  pthread_mutex_lock(&e->mu);
  if (e->head == e->tail) {
    bool fin = e->finished;
    pthread_mutex_unlock(&e->mu);
    if (fin) {
      *done = true;
      return 0;
    }
    return EAGAIN;
  }
  fsh_flight_message m = e->q[e->head++];
  pthread_mutex_unlock(&e->mu);
  int rc = 0;
  if (m.metadata) {
    int64_t body_length = 0;
    rc = fsh_ipc_peek_message(m.metadata, &out->type, &body_length, err);
    out->metadata = m.metadata;
    m.metadata = NULL;
    if (rc == 0 && body_length > 0) {
      out->body = fsh_malloc(sizeof(fsh_buffer *));
      out->body[0] = fsh_buffer_slice(m.body, 0, body_length);
      out->n_body = 1;
      out->body_length = body_length;
    }
  }
  if (m.app_metadata) {
    *app_metadata = m.app_metadata;
    m.app_metadata = NULL;
  }
  fsh_flight_message_reset(&m);
  return rc;
}

static int fx_do_exchange(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                          fsh_flight_sink **in, fsh_flight_source **out, fsh_error *err) {
  fx_echo *e = fsh_calloc(1, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  e->refs = 2;
  e->sink = (fsh_flight_sink){fx_echo_message, fx_echo_finish, fx_echo_sink_release, e};
  e->source = (fsh_flight_source){.next = fx_echo_next, .release = fx_echo_source_release, .ctx = e};
  *in = &e->sink;
  *out = &e->source;
  return 0;
}

static int fx_do_action(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                        fsh_flight_result_list *out, fsh_error *err) {
  if (strcmp(a->type, "echo") == 0) return fsh_flight_result_list_push(out, a->body.data, a->body.size);
  if (strcmp(a->type, "count") == 0) {
    for (int i = 1; i <= 3; i++) {
      char c = (char)('0' + i);
      FSH_RETURN_NOT_OK(fsh_flight_result_list_push(out, &c, 1));
    }
    return 0;
  }
  if (strcmp(a->type, "whoami") == 0) {
    const char *id = fsh_flight_call_identity(call);
    return fsh_flight_result_list_push(out, id, (int64_t)strlen(id));
  }
  if (strcmp(a->type, "fail") == 0) return fsh_error_set(err, EEXIST, "it is already there");
  if (strcmp(a->type, "stall") == 0) /* answers "done" after FX_STALL_MS */
    return fx_stall(ctx, call) ? fsh_error_set(err, ECANCELED, "stall: cancelled")
                               : fsh_flight_result_list_push(out, "done", 4);
  return fsh_error_set(err, ENOTSUP, "no action '%s'", a->type);
}

static int fx_list_actions(void *ctx, fsh_flight_call *call, fsh_flight_action_type_list *out,
                           fsh_error *err) {
  FSH_RETURN_NOT_OK(fsh_flight_action_type_list_push(out, "echo", "answers the body"));
  FSH_RETURN_NOT_OK(fsh_flight_action_type_list_push(out, "count", "answers 1, 2, 3"));
  return fsh_flight_action_type_list_push(out, "fail", "fails with ALREADY_EXISTS");
}

/* Starts the server (opts may be NULL: plain, no auth). */
static inline fx_server *fx_start(const fsh_flight_server_options *opts) {
  fx_server *fx = fsh_calloc(1, sizeof *fx);
  pthread_mutex_init(&fx->mu, NULL);
  fx->big_bytes = 8 << 20;
  fsh_flight_server_options o = {.listen = "127.0.0.1:0", .n_threads = 2};
  if (opts) o = *opts;
  fsh_flight_handlers h = {.ctx = fx,
                           .list_flights = fx_list_flights,
                           .get_flight_info = fx_get_flight_info,
                           .poll_flight_info = fx_poll_flight_info,
                           .get_schema = fx_get_schema,
                           .do_get = fx_do_get,
                           .do_put = fx_do_put,
                           .do_exchange = fx_do_exchange,
                           .do_action = fx_do_action,
                           .list_actions = fx_list_actions};
  fsh_error err = {{0}};
  if (fsh_flight_server_start(&o, &h, &fx->server, &err)) {
    fprintf(stderr, "fx_start: %s\n", err.message);
    abort();
  }
  snprintf(fx->uri, sizeof fx->uri, "%s://127.0.0.1:%d", o.tls_cert_path ? "grpc+tls" : "grpc",
           fsh_flight_server_port(fx->server));
  return fx;
}

static inline void fx_stop(fx_server *fx) {
  if (fx->server) fsh_flight_server_stop(fx->server, 1000);
  fsh_flight_descriptor_reset(&fx->put_descriptor);
  fsh_schema_unref(fx->put_schema);
  for (int64_t i = 0; i < fx->n_put; i++) fsh_batch_unref(fx->put[i]);
  pthread_mutex_destroy(&fx->mu);
  fsh_free(fx);
}

static inline fsh_flight_client *fx_client(const char *uri, const char *token, int64_t timeout_ms) {
  fsh_flight_client_options o = {.uri = uri, .auth_token = token, .timeout_ms = timeout_ms};
  fsh_flight_client *c = NULL;
  fsh_error err = {{0}};
  if (fsh_flight_client_open(&o, &c, &err)) {
    fprintf(stderr, "fx_client: %s\n", err.message);
    abort();
  }
  return c;
}

#endif
