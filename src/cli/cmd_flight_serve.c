/* cmd_flight_serve.c -- `flightshuffle flight serve`: an Arrow Flight server
 * over IPC files (stream or file format) and whatever clients upload.
 *
 * Every file given on the command line becomes a flight named after its
 * base name without extension; its descriptor is PATH [name] and its one
 * endpoint's ticket is the name. A ticket is only ever looked up among
 * those names: it can never name a path. DoPut stores an uploaded stream in
 * memory under its descriptor (path components joined by '/', or the
 * command bytes); ListFlights and DoGet then serve it too. DoExchange echoes
 * every message back. Actions: list-paths, drop, ping, whoami. */
#include "cli/cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <flightshuffle/flight.h>

#define SERVE_MAX_NAME 1024

/* ---- the store --------------------------------------------------------------- */

typedef struct serve_entry {
  char *name;
  char *file; /* served file; NULL for uploads */
  fsh_schema *schema;
  int64_t rows;
  int64_t bytes;
  int64_t n_batches; /* uploads */
  fsh_batch **batches;
} serve_entry;

typedef struct serve_store {
  pthread_mutex_t mu;
  int64_t n;
  serve_entry *items;
  char location[320]; /* grpc://host:port, set once listening */
} serve_store;

static void entry_reset(serve_entry *e) {
  fsh_free(e->name);
  fsh_free(e->file);
  fsh_schema_unref(e->schema);
  for (int64_t i = 0; i < e->n_batches; i++) fsh_batch_unref(e->batches[i]);
  fsh_free(e->batches);
  memset(e, 0, sizeof *e);
}

static void store_reset(serve_store *st) {
  for (int64_t i = 0; i < st->n; i++) entry_reset(&st->items[i]);
  fsh_free(st->items);
  pthread_mutex_destroy(&st->mu);
}

/* Index of name, or -1. Caller holds mu. */
static int64_t store_find(const serve_store *st, const char *name, size_t len) {
  for (int64_t i = 0; i < st->n; i++)
    if (strlen(st->items[i].name) == len && memcmp(st->items[i].name, name, len) == 0) return i;
  return -1;
}

/* Appends *e (moved). Caller holds mu. */
static int store_append(serve_store *st, serve_entry *e) {
  serve_entry *grown = fsh_realloc(st->items, (size_t)(st->n + 1) * sizeof *grown);
  if (!grown) return ENOMEM;
  st->items = grown;
  st->items[st->n++] = *e;
  memset(e, 0, sizeof *e);
  return 0;
}

/* A name is 1..SERVE_MAX_NAME printable bytes. */
static bool name_valid(const uint8_t *p, int64_t n) {
  if (n <= 0 || n > SERVE_MAX_NAME) return false;
  for (int64_t i = 0; i < n; i++)
    if (p[i] < 0x20 || p[i] == 0x7f) return false;
  return true;
}

/* The store key of a descriptor: PATH components joined by '/', or CMD. */
static int descriptor_name(const fsh_flight_descriptor *d, char **out, fsh_error *err) {
  char buf[SERVE_MAX_NAME + 1];
  size_t n = 0;
  if (d->type == FSH_FLIGHT_DESCRIPTOR_PATH && d->n_path > 0) {
    for (int64_t i = 0; i < d->n_path; i++) {
      size_t len = strlen(d->path[i]);
      if (n + len + (i > 0) > SERVE_MAX_NAME) return fsh_error_set(err, EINVAL, "descriptor path too long");
      if (i > 0) buf[n++] = '/';
      memcpy(buf + n, d->path[i], len);
      n += len;
    }
  } else if (d->type == FSH_FLIGHT_DESCRIPTOR_CMD && d->cmd.size > 0 &&
             d->cmd.size <= SERVE_MAX_NAME) {
    memcpy(buf, d->cmd.data, (size_t)d->cmd.size);
    n = (size_t)d->cmd.size;
  } else {
    return fsh_error_set(err, EINVAL, "the descriptor names no flight (a non-empty PATH or CMD is needed)");
  }
  if (!name_valid((const uint8_t *)buf, (int64_t)n))
    return fsh_error_set(err, EINVAL, "the descriptor's name has control characters or is empty");
  buf[n] = '\0';
  *out = fsh_strdup(buf);
  return *out ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
}

/* FlightInfo of entry i. Caller holds mu. */
static int entry_info(const serve_store *st, const serve_entry *e, fsh_flight_info *out) {
  fsh_flight_info info;
  memset(&info, 0, sizeof info);
  info.schema = fsh_schema_ref(e->schema);
  info.total_records = e->rows;
  info.total_bytes = e->bytes;
  info.ordered = true;
  const char *path[1] = {e->name};
  int rc = fsh_flight_descriptor_path(&info.descriptor, path, 1);
  info.endpoints = fsh_calloc(1, sizeof *info.endpoints);
  if (rc == 0 && !info.endpoints) rc = ENOMEM;
  if (rc == 0) {
    info.n_endpoints = 1;
    rc = fsh_bytes_set(&info.endpoints[0].ticket, e->name, (int64_t)strlen(e->name));
  }
  if (rc == 0 && st->location[0]) {
    info.endpoints[0].locations = fsh_calloc(1, sizeof(char *));
    if (info.endpoints[0].locations) info.endpoints[0].locations[0] = fsh_strdup(st->location);
    if (!info.endpoints[0].locations || !info.endpoints[0].locations[0]) rc = ENOMEM;
    else info.endpoints[0].n_locations = 1;
  }
  if (rc != 0) {
    fsh_flight_info_reset(&info);
    return rc;
  }
  *out = info;
  return 0;
}

/* ---- handlers ------------------------------------------------------------------ */

static int h_list_flights(void *ctx, fsh_flight_call *call, const fsh_bytes *criteria,
                          fsh_flight_info_list *out, fsh_error *err) {
  serve_store *st = ctx;
  (void)call;
  int rc = 0;
  pthread_mutex_lock(&st->mu);
  for (int64_t i = 0; i < st->n && rc == 0; i++) {
    const serve_entry *e = &st->items[i];
    /* Criteria, when given, is a name prefix. */
    if (criteria->size > 0 && (strlen(e->name) < (size_t)criteria->size ||
                               memcmp(e->name, criteria->data, (size_t)criteria->size) != 0))
      continue;
    fsh_flight_info info;
    rc = entry_info(st, e, &info);
    if (rc == 0 && (rc = fsh_flight_info_list_push(out, &info)) != 0) fsh_flight_info_reset(&info);
  }
  pthread_mutex_unlock(&st->mu);
  return rc ? fsh_error_set(err, rc, "ListFlights: out of memory") : 0;
}

/* Looks a descriptor up and fills info and/or schema (new references). */
static int lookup_descriptor(serve_store *st, const fsh_flight_descriptor *d, fsh_flight_info *info,
                             fsh_schema **schema, fsh_error *err) {
  char *name = NULL;
  FSH_RETURN_NOT_OK(descriptor_name(d, &name, err));
  int rc = 0;
  pthread_mutex_lock(&st->mu);
  int64_t i = store_find(st, name, strlen(name));
  if (i < 0) {
    rc = fsh_error_set(err, ENOENT, "no flight named '%s'", name);
  } else {
    if (info && (rc = entry_info(st, &st->items[i], info)) != 0) fsh_error_set(err, rc, "out of memory");
    if (rc == 0 && schema) *schema = fsh_schema_ref(st->items[i].schema);
  }
  pthread_mutex_unlock(&st->mu);
  fsh_free(name);
  return rc;
}

static int h_get_flight_info(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                             fsh_flight_info *out, fsh_error *err) {
  (void)call;
  return lookup_descriptor(ctx, d, out, NULL, err);
}

static int h_poll_flight_info(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                              fsh_flight_info *out, double *progress, bool *done, fsh_error *err) {
  (void)call;
  *progress = 1.0;
  *done = true;
  return lookup_descriptor(ctx, d, out, NULL, err);
}

static int h_get_schema(void *ctx, fsh_flight_call *call, const fsh_flight_descriptor *d,
                        fsh_schema **out, fsh_error *err) {
  (void)call;
  return lookup_descriptor(ctx, d, NULL, out, err);
}

static int h_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                    fsh_flight_source **out, fsh_error *err) {
  serve_store *st = ctx;
  (void)call;
  if (!name_valid(ticket->data, ticket->size))
    return fsh_error_set(err, EINVAL,
                         "malformed ticket (%lld bytes): tickets are flight names from ListFlights",
                         (long long)ticket->size);
  char *file = NULL;
  fsh_schema *schema = NULL;
  fsh_batch **batches = NULL;
  int64_t n = 0;
  int rc = 0;
  pthread_mutex_lock(&st->mu);
  int64_t i = store_find(st, (const char *)ticket->data, (size_t)ticket->size);
  if (i < 0) {
    rc = fsh_error_set(err, ENOENT, "no flight for ticket '%.*s'", (int)ticket->size,
                       (const char *)ticket->data);
  } else if (st->items[i].file) {
    file = fsh_strdup(st->items[i].file);
    if (!file) rc = fsh_error_set(err, ENOMEM, "out of memory");
  } else {
    const serve_entry *e = &st->items[i];
    batches = fsh_calloc((size_t)e->n_batches + 1, sizeof *batches);
    if (!batches) {
      rc = fsh_error_set(err, ENOMEM, "out of memory");
    } else {
      schema = fsh_schema_ref(e->schema);
      for (n = 0; n < e->n_batches; n++) batches[n] = fsh_batch_ref(e->batches[n]);
    }
  }
  pthread_mutex_unlock(&st->mu);
  if (rc != 0) return rc;
  if (file) {
    /* Read the file again for each DoGet: memory stays one batch per stream. */
    fsh_batch_stream s;
    rc = fsh_ipc_open_path(file, &s, err);
    fsh_free(file);
    if (rc != 0) return rc;
    return fsh_flight_source_from_stream(&s, NULL, out, err);
  }
  rc = fsh_flight_source_from_batches(schema, batches, n, NULL, out, err);
  fsh_free(batches);
  return rc;
}

/* DoPut: decodes (and so validates) every message, stores the whole stream
 * at finish. */
typedef struct put_sink {
  fsh_flight_sink base;
  serve_store *store;
  char *name;
  fsh_ipc_decoder *dec;
  int64_t n_batches;
  fsh_batch **batches;
  int64_t rows, bytes;
} put_sink;

static int put_message(fsh_flight_sink *base, fsh_flight_message *m, fsh_error *err) {
  put_sink *p = base->ctx;
  int rc = 0;
  if (m->metadata) {
    p->bytes += m->metadata->size + (m->body ? m->body->size : 0);
    fsh_batch *b = NULL;
    rc = fsh_ipc_decode_message(p->dec, m->metadata, m->body, &b, err);
    if (rc == 0 && b) {
      fsh_batch **grown = fsh_realloc(p->batches, (size_t)(p->n_batches + 1) * sizeof *grown);
      if (!grown) {
        fsh_batch_unref(b);
        rc = fsh_error_set(err, ENOMEM, "DoPut '%s': out of memory", p->name);
      } else {
        p->batches = grown;
        p->batches[p->n_batches++] = b;
        p->rows += b->length;
      }
    } else if (rc != 0) {
      fsh_error_prefix(err, rc, "DoPut '%s': ", p->name);
    }
  }
  fsh_flight_message_reset(m);
  return rc;
}

static int put_finish(fsh_flight_sink *base, fsh_buffer **put_result, fsh_error *err) {
  put_sink *p = base->ctx;
  (void)put_result;
  fsh_schema *schema = fsh_ipc_decoder_schema(p->dec);
  if (!schema) return fsh_error_set(err, EINVAL, "DoPut '%s': the stream carried no schema", p->name);
  serve_entry e;
  memset(&e, 0, sizeof e);
  e.name = p->name;
  e.schema = fsh_schema_ref(schema);
  e.rows = p->rows;
  e.bytes = p->bytes;
  e.n_batches = p->n_batches;
  e.batches = p->batches;
  p->name = NULL;
  p->batches = NULL;
  p->n_batches = 0;
  serve_store *st = p->store;
  int rc = 0;
  pthread_mutex_lock(&st->mu);
  int64_t i = store_find(st, e.name, strlen(e.name));
  if (i >= 0 && st->items[i].file) {
    rc = fsh_error_set(err, EEXIST, "DoPut: '%s' is a served file and cannot be replaced", e.name);
  } else if (i >= 0) {
    entry_reset(&st->items[i]); /* a new upload replaces the old one */
    st->items[i] = e;
    memset(&e, 0, sizeof e);
  } else if ((rc = store_append(st, &e)) != 0) {
    fsh_error_set(err, rc, "DoPut: out of memory");
  }
  pthread_mutex_unlock(&st->mu);
  entry_reset(&e);
  return rc;
}

static void put_release(fsh_flight_sink *base) {
  put_sink *p = base->ctx;
  fsh_free(p->name);
  for (int64_t i = 0; i < p->n_batches; i++) fsh_batch_unref(p->batches[i]);
  fsh_free(p->batches);
  fsh_ipc_decoder_free(p->dec);
  fsh_free(p);
}

static int h_do_put(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                    fsh_flight_sink **out, fsh_error *err) {
  (void)call;
  if (!first->has_descriptor)
    return fsh_error_set(err, EINVAL, "DoPut: the first message carries no FlightDescriptor");
  put_sink *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory");
  p->store = ctx;
  p->base.message = put_message;
  p->base.finish = put_finish;
  p->base.release = put_release;
  p->base.ctx = p;
  int rc = descriptor_name(&first->descriptor, &p->name, err);
  if (rc == 0) rc = fsh_ipc_decoder_new(&p->dec, err);
  if (rc != 0) {
    put_release(&p->base);
    return rc;
  }
  *out = &p->base;
  return 0;
}

/* DoExchange: an echo. The sink queues what arrives, the source sends it
 * back as it is (bodies not decoded). Both halves share the queue, which is
 * bounded: past ECHO_MAX_MESSAGES or ECHO_MAX_BYTES queued, the sink answers
 * EBUSY and the server stops reading until the source has sent one (a
 * client that writes without reading is held back by flow control). */
enum { ECHO_MAX_MESSAGES = 64, ECHO_MAX_BYTES = 16 << 20 };

typedef struct echo {
  int refs;
  bool finished;
  int64_t head, n;
  int64_t queued_bytes; /* bodies of queue[head, n) */
  fsh_flight_message *queue;
  fsh_flight_sink sink;
  fsh_flight_source source;
} echo;

static void echo_unref(echo *e) {
  if (--e->refs > 0) return; /* both halves run on the call's one thread */
  for (int64_t i = e->head; i < e->n; i++) fsh_flight_message_reset(&e->queue[i]);
  fsh_free(e->queue);
  fsh_free(e);
}

static int echo_message(fsh_flight_sink *s, fsh_flight_message *m, fsh_error *err) {
  echo *e = s->ctx;
  if (!m->metadata && !m->app_metadata) { /* e.g. the descriptor alone */
    fsh_flight_message_reset(m);
    return 0;
  }
  if (e->head > 0) { /* slide what is left to the front: the slots stay bounded */
    memmove(e->queue, e->queue + e->head, (size_t)(e->n - e->head) * sizeof *e->queue);
    e->n -= e->head;
    e->head = 0;
  }
  fsh_flight_message *grown = fsh_realloc(e->queue, (size_t)(e->n + 1) * sizeof *grown);
  if (!grown) {
    fsh_flight_message_reset(m);
    return fsh_error_set(err, ENOMEM, "DoExchange: out of memory");
  }
  e->queue = grown;
  e->queue[e->n++] = *m;
  e->queued_bytes += m->body ? m->body->size : 0;
  memset(m, 0, sizeof *m);
  return e->n - e->head >= ECHO_MAX_MESSAGES || e->queued_bytes >= ECHO_MAX_BYTES ? EBUSY : 0;
}

static int echo_finish(fsh_flight_sink *s, fsh_buffer **put_result, fsh_error *err) {
  (void)put_result;
  (void)err;
  ((echo *)s->ctx)->finished = true;
  return 0;
}

static int echo_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app, bool *done,
                     fsh_error *err) {
  echo *e = s->ctx;
  memset(out, 0, sizeof *out);
  if (e->head == e->n) {
    if (e->finished) {
      *done = true;
      return 0;
    }
    return EAGAIN;
  }
  fsh_flight_message *m = &e->queue[e->head];
  if (m->metadata) {
    int64_t body_length = 0;
    FSH_RETURN_NOT_OK(fsh_ipc_peek_message(m->metadata, &out->type, &body_length, err));
    if (m->body && m->body->size > 0) {
      out->body = fsh_malloc(sizeof *out->body);
      if (!out->body) return fsh_error_set(err, ENOMEM, "DoExchange: out of memory");
      out->body[0] = m->body;
      out->n_body = 1;
      out->body_length = m->body->size;
      e->queued_bytes -= m->body->size;
      m->body = NULL;
    }
    out->metadata = m->metadata;
    m->metadata = NULL;
  }
  *app = m->app_metadata;
  m->app_metadata = NULL;
  fsh_flight_message_reset(m);
  e->head++;
  return 0;
}

static void echo_sink_release(fsh_flight_sink *s) { echo_unref(s->ctx); }
static void echo_source_release(fsh_flight_source *s) { echo_unref(s->ctx); }

static int h_do_exchange(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                         fsh_flight_sink **in, fsh_flight_source **out, fsh_error *err) {
  (void)ctx;
  (void)call;
  (void)first;
  echo *e = fsh_calloc(1, sizeof *e);
  if (!e) return fsh_error_set(err, ENOMEM, "out of memory");
  e->refs = 2;
  e->sink = (fsh_flight_sink){echo_message, echo_finish, echo_sink_release, e};
  e->source = (fsh_flight_source){.next = echo_next, .release = echo_source_release, .ctx = e};
  *in = &e->sink;
  *out = &e->source;
  return 0;
}

static const struct {
  const char *type, *description;
} serve_actions[] = {
    {"list-paths", "one result per flight name (the ticket DoGet takes)"},
    {"drop", "removes the uploaded flight named in the body"},
    {"ping", "answers pong"},
    {"whoami", "the caller's identity as the server authenticated it"},
};

static int h_list_actions(void *ctx, fsh_flight_call *call, fsh_flight_action_type_list *out,
                          fsh_error *err) {
  (void)ctx;
  (void)call;
  for (size_t i = 0; i < sizeof serve_actions / sizeof serve_actions[0]; i++)
    if (fsh_flight_action_type_list_push(out, serve_actions[i].type, serve_actions[i].description) != 0)
      return fsh_error_set(err, ENOMEM, "out of memory");
  return 0;
}

static int h_do_action(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                       fsh_flight_result_list *out, fsh_error *err) {
  serve_store *st = ctx;
  int rc = 0;
  if (strcmp(a->type, "ping") == 0) {
    rc = fsh_flight_result_list_push(out, "pong", 4);
  } else if (strcmp(a->type, "whoami") == 0) {
    const char *id = fsh_flight_call_identity(call);
    rc = fsh_flight_result_list_push(out, id, (int64_t)strlen(id));
  } else if (strcmp(a->type, "list-paths") == 0) {
    pthread_mutex_lock(&st->mu);
    for (int64_t i = 0; i < st->n && rc == 0; i++)
      rc = fsh_flight_result_list_push(out, st->items[i].name, (int64_t)strlen(st->items[i].name));
    pthread_mutex_unlock(&st->mu);
  } else if (strcmp(a->type, "drop") == 0) {
    if (!name_valid(a->body.data, a->body.size))
      return fsh_error_set(err, EINVAL, "drop: the body must be a flight name");
    pthread_mutex_lock(&st->mu);
    int64_t i = store_find(st, (const char *)a->body.data, (size_t)a->body.size);
    if (i < 0) {
      rc = fsh_error_set(err, ENOENT, "drop: no flight named '%.*s'", (int)a->body.size,
                         (const char *)a->body.data);
    } else if (st->items[i].file) {
      rc = fsh_error_set(err, EPERM, "drop: '%s' is a served file, not an upload", st->items[i].name);
    } else {
      entry_reset(&st->items[i]);
      st->items[i] = st->items[--st->n];
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
  } else {
    return fsh_error_set(err, EINVAL, "unknown action '%s' (ListActions lists them)", a->type);
  }
  return rc ? fsh_error_set(err, rc, "%s: out of memory", a->type) : 0;
}

/* ---- command line ------------------------------------------------------------------ */

/* The base name without its extension; "-2", "-3", ... for duplicates. */
static char *file_flight_name(const serve_store *st, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char stem[SERVE_MAX_NAME - 16];
  snprintf(stem, sizeof stem, "%s", base);
  char *dot = strrchr(stem, '.');
  if (dot && dot != stem) *dot = '\0';
  char name[SERVE_MAX_NAME];
  snprintf(name, sizeof name, "%s", stem);
  for (int k = 2; store_find(st, name, strlen(name)) >= 0; k++)
    snprintf(name, sizeof name, "%s-%d", stem, k);
  return fsh_strdup(name);
}

/* Opens a file once at start: validates it, counts its rows. */
static int serve_add_file(serve_store *st, const char *path, fsh_error *err) {
  fsh_batch_stream s;
  FSH_RETURN_NOT_OK(fsh_ipc_open_path(path, &s, err));
  serve_entry e;
  memset(&e, 0, sizeof e);
  e.schema = fsh_schema_ref(s.schema);
  int rc = 0;
  for (;;) {
    fsh_batch *b = NULL;
    if ((rc = s.get_next(&s, &b, err)) != 0 || !b) break;
    e.rows += b->length;
    fsh_batch_unref(b);
  }
  s.release(&s);
  struct stat sb;
  e.bytes = stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
  e.name = file_flight_name(st, path);
  e.file = fsh_strdup(path);
  if (rc == 0 && (!e.name || !e.file)) rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (rc == 0 && (rc = store_append(st, &e)) != 0) fsh_error_set(err, rc, "out of memory");
  entry_reset(&e);
  if (rc != 0) fsh_error_prefix(err, rc, "%s: ", path);
  return rc;
}

static int serve_usage(void) {
  return cli_fail(2,
                  "usage: flightshuffle flight serve --listen HOST:PORT [--auth-token T "
                  "[--user U --password P]] [--tls-cert C --tls-key K [--tls-client-ca CA]] "
                  "[--threads N] FILE...");
}

int cmd_flight_serve(int argc, char **argv) {
  fsh_flight_server_options o;
  memset(&o, 0, sizeof o);
  const char **files = calloc((size_t)argc, sizeof *files);
  int n_files = 0;
  if (!files) return cli_fail(1, "out of memory");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (strcmp(a, "--listen") == 0) slot = &o.listen;
    else if (strcmp(a, "--auth-token") == 0) slot = &o.auth_token;
    else if (strcmp(a, "--user") == 0) slot = &o.basic_user;
    else if (strcmp(a, "--password") == 0) slot = &o.basic_password;
    else if (strcmp(a, "--tls-cert") == 0) slot = &o.tls_cert_path;
    else if (strcmp(a, "--tls-key") == 0) slot = &o.tls_key_path;
    else if (strcmp(a, "--tls-client-ca") == 0) slot = &o.tls_client_ca_path;
    else if (strcmp(a, "--threads") == 0) {
      if (i + 1 >= argc || (o.n_threads = atoi(argv[i + 1])) <= 0) {
        free(files);
        return serve_usage();
      }
      i++;
      continue;
    } else if (a[0] == '-' && a[1] == '-') {
      free(files);
      cli_fail(2, "flight serve: unknown option %s", a);
      return serve_usage();
    } else {
      files[n_files++] = a;
      continue;
    }
    if (i + 1 >= argc) {
      free(files);
      return serve_usage();
    }
    *slot = argv[++i];
  }
  if (!o.listen) {
    free(files);
    return serve_usage();
  }

  serve_store st;
  memset(&st, 0, sizeof st);
  pthread_mutex_init(&st.mu, NULL);
  fsh_error err;
  for (int i = 0; i < n_files; i++) {
    if (serve_add_file(&st, files[i], &err) != 0) {
      free(files);
      store_reset(&st);
      return cli_fail(1, "flight serve: %s", err.message);
    }
  }
  free(files);

  sigset_t sigs;
  cli_block_stop_signals(&sigs); /* taken by sigwait below */

  fsh_flight_handlers h = {
      .ctx = &st,
      .list_flights = h_list_flights,
      .get_flight_info = h_get_flight_info,
      .poll_flight_info = h_poll_flight_info,
      .get_schema = h_get_schema,
      .do_get = h_do_get,
      .do_put = h_do_put,
      .do_exchange = h_do_exchange,
      .do_action = h_do_action,
      .list_actions = h_list_actions,
  };
  /* The location every endpoint advertises: this server's own URI. */
  char host[256];
  snprintf(host, sizeof host, "%s", o.listen);
  char *colon = strrchr(host, ':');
  if (colon) *colon = '\0';
  if (!host[0] || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0 ||
      strcmp(host, "::") == 0)
    snprintf(host, sizeof host, "localhost");
  const char *scheme = o.tls_cert_path ? "grpc+tls" : "grpc";

  fsh_flight_server *server = NULL;
  pthread_mutex_lock(&st.mu); /* no handler sees a half-written location */
  int rc = fsh_flight_server_start(&o, &h, &server, &err);
  if (rc == 0)
    snprintf(st.location, sizeof st.location, "%s://%s:%d", scheme, host,
             fsh_flight_server_port(server));
  pthread_mutex_unlock(&st.mu);
  if (rc != 0) {
    store_reset(&st);
    return cli_fail(1, "flight serve: %s", err.message);
  }
  printf("listening on %s\n", st.location);
  fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "flightshuffle: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  fsh_flight_server_stop(server, 2000);
  store_reset(&st);
  return 0;
}
