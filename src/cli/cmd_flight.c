/* cmd_flight.c -- `flightshuffle flight ...`: the Flight client on the
 * command line. list / get / put for users; info, poll, schema, actions,
 * action, exchange and handshake expose the other methods (tests drive
 * them against pyarrow.flight). `flight serve` is cmd_flight_serve.c.
 * Exit status: 0 success, 1 failure (the message names the method, the
 * URI and the gRPC status), 2 usage. */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/flight.h>

static const char USAGE[] =
    "usage: flightshuffle flight COMMAND URI ARGS [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  list URI                      the flights a server offers (ListFlights)\n"
    "  get URI TICKET [-o OUT]       DoGet: the stream as an IPC stream file (stdout\n"
    "                                without -o); batches and rows on stderr\n"
    "  put URI PATH FILE             DoPut an IPC (or integration JSON) file under\n"
    "                                a PATH descriptor (components split on '/')\n"
    "  info URI PATH                 GetFlightInfo of a descriptor\n"
    "  poll URI PATH                 PollFlightInfo of a descriptor\n"
    "  schema URI PATH               GetSchema of a descriptor\n"
    "  actions URI                   ListActions\n"
    "  action URI TYPE [BODY]        DoAction; prints each result body\n"
    "  exchange URI PATH FILE [-o OUT]  DoExchange: sends FILE, writes what comes back\n"
    "  handshake URI USER PASSWORD   Handshake with basic credentials; prints the token\n"
    "  serve ...                     a Flight server (flightshuffle flight serve -h)\n"
    "\n"
    "options:\n"
    "  --auth-token T                bearer token sent with every call\n"
    "  --user U --password P         Handshake first, then use the token it answers\n"
    "  --tls-ca CA                   PEM roots for grpc+tls:// (default: system roots)\n"
    "  --tls-cert C --tls-key K      client certificate and key (mutual TLS)\n"
    "  --tls-override-hostname H     the name to check the server certificate against\n"
    "  --timeout-ms N                deadline of each call\n"
    "  --cmd                         PATH is a CMD descriptor's bytes instead\n"
    "  -o OUT                        output file (get, exchange)\n";

typedef struct flight_args {
  fsh_flight_client_options copts;
  const char *user;
  const char *password;
  const char *out_path;
  bool cmd_descriptor;
  int n_pos;
  const char *pos[4];
} flight_args;

static int parse_args(int argc, char **argv, flight_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    bool has_value = i + 1 < argc;
    if (strcmp(s, "--auth-token") == 0 && has_value) {
      a->copts.auth_token = argv[++i];
    } else if (strcmp(s, "--user") == 0 && has_value) {
      a->user = argv[++i];
    } else if (strcmp(s, "--password") == 0 && has_value) {
      a->password = argv[++i];
    } else if (strcmp(s, "--tls-ca") == 0 && has_value) {
      a->copts.tls_ca_path = argv[++i];
    } else if (strcmp(s, "--tls-cert") == 0 && has_value) {
      a->copts.tls_cert_path = argv[++i];
    } else if (strcmp(s, "--tls-key") == 0 && has_value) {
      a->copts.tls_key_path = argv[++i];
    } else if (strcmp(s, "--tls-override-hostname") == 0 && has_value) {
      a->copts.tls_override_hostname = argv[++i];
    } else if (strcmp(s, "--timeout-ms") == 0 && has_value) {
      char *end = NULL;
      long long v = strtoll(argv[++i], &end, 10);
      if (!end || *end || v < 0) return cli_fail(2, "--timeout-ms: not a count: '%s'", argv[i]);
      a->copts.timeout_ms = v;
    } else if (strcmp(s, "--cmd") == 0) {
      a->cmd_descriptor = true;
    } else if (strcmp(s, "-o") == 0 && has_value) {
      a->out_path = argv[++i];
    } else if (s[0] == '-' && s[1] != '\0') {
      return cli_fail(2, "flight: unknown option '%s' (or missing value)", s);
    } else if (a->n_pos < 4) {
      a->pos[a->n_pos++] = s;
    } else {
      return cli_fail(2, "flight: unexpected argument '%s'", s);
    }
  }
  if ((a->user != NULL) != (a->password != NULL))
    return cli_fail(2, "flight: --user and --password go together");
  return 0;
}

/* Opens the client (and does the Handshake when --user is given). */
static int open_client(flight_args *a, fsh_flight_client **c) {
  fsh_error err = {{0}};
  a->copts.uri = a->pos[0];
  if (fsh_flight_client_open(&a->copts, c, &err)) return cli_fail(1, "%s", err.message);
  if (a->user && fsh_flight_handshake(*c, a->user, a->password, NULL, &err)) {
    fsh_flight_client_close(*c);
    *c = NULL;
    return cli_fail(1, "%s", err.message);
  }
  return 0;
}

/* Bytes as text: printable ASCII as is, the rest as \xNN. */
static void print_bytes(FILE *f, const uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (isprint(p[i]) && p[i] != '\\' && p[i] != '"')
      fputc(p[i], f);
    else
      fprintf(f, "\\x%02x", p[i]);
  }
}

static void print_descriptor(const fsh_flight_descriptor *d) {
  if (d->type == FSH_FLIGHT_DESCRIPTOR_PATH) {
    printf("path [");
    for (int64_t i = 0; i < d->n_path; i++) {
      printf("%s\"", i ? ", " : "");
      print_bytes(stdout, (const uint8_t *)d->path[i], (int64_t)strlen(d->path[i]));
      printf("\"");
    }
    printf("]");
  } else if (d->type == FSH_FLIGHT_DESCRIPTOR_CMD) {
    printf("cmd \"");
    print_bytes(stdout, d->cmd.data, d->cmd.size);
    printf("\"");
  } else {
    printf("unknown");
  }
}

static void print_schema(const fsh_schema *s, const char *indent) {
  if (!s) {
    printf("%sschema: unknown\n", indent);
    return;
  }
  printf("%sschema: %lld fields\n", indent, (long long)s->n_fields);
  for (int64_t i = 0; i < s->n_fields; i++) {
    char type[512];
    fsh_field_type_to_string(&s->fields[i], type, sizeof type);
    printf("%s  %s: %s%s\n", indent, s->fields[i].name, type,
           s->fields[i].nullable ? "" : " not null");
  }
}

static void print_info(const fsh_flight_info *info, const char *indent) {
  printf("%sdescriptor: ", indent);
  print_descriptor(&info->descriptor);
  printf("\n");
  print_schema(info->schema, indent);
  printf("%stotal_records: %lld\n", indent, (long long)info->total_records);
  printf("%stotal_bytes: %lld\n", indent, (long long)info->total_bytes);
  if (info->ordered) printf("%sordered: true\n", indent);
  for (int64_t e = 0; e < info->n_endpoints; e++) {
    const fsh_flight_endpoint *ep = &info->endpoints[e];
    printf("%sendpoint %lld: ticket \"", indent, (long long)e);
    print_bytes(stdout, ep->ticket.data, ep->ticket.size);
    printf("\"");
    for (int64_t l = 0; l < ep->n_locations; l++) printf(" %s", ep->locations[l]);
    printf("\n");
  }
  if (info->app_metadata.size > 0) {
    printf("%sapp_metadata: \"", indent);
    print_bytes(stdout, info->app_metadata.data, info->app_metadata.size);
    printf("\"\n");
  }
}

/* A PATH descriptor split on '/', or with --cmd a CMD of the bytes. */
static int make_descriptor(const flight_args *a, const char *s, fsh_flight_descriptor *d) {
  memset(d, 0, sizeof *d);
  if (a->cmd_descriptor) {
    d->type = FSH_FLIGHT_DESCRIPTOR_CMD;
    if (fsh_bytes_set(&d->cmd, s, (int64_t)strlen(s))) return cli_fail(1, "out of memory");
    return 0;
  }
  char *copy = fsh_strdup(s);
  const char **parts = fsh_calloc(strlen(s) + 1, sizeof *parts);
  int rc = copy && parts ? 0 : ENOMEM;
  int64_t n = 0;
  if (rc == 0) {
    char *save = NULL;
    for (char *t = strtok_r(copy, "/", &save); t; t = strtok_r(NULL, "/", &save)) parts[n++] = t;
    if (n == 0) parts[n++] = s; /* "" or "/": one component as given */
    rc = fsh_flight_descriptor_path(d, parts, n);
  }
  fsh_free(parts);
  fsh_free(copy);
  return rc ? cli_fail(1, "out of memory") : 0;
}

/* ---- list / info / poll / schema / actions / action / handshake ------------ */

static int flight_list(flight_args *a) {
  if (a->n_pos != 1) return cli_fail(2, "usage: flightshuffle flight list URI [OPTIONS]");
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(open_client(a, &c));
  fsh_error err = {{0}};
  fsh_flight_info_list l;
  int rc = fsh_flight_list_flights(c, NULL, &l, &err);
  fsh_flight_client_close(c);
  if (rc) return cli_fail(1, "%s", err.message);
  for (int64_t i = 0; i < l.n; i++) {
    printf("flight %lld:\n", (long long)i);
    print_info(&l.items[i], "  ");
  }
  printf("%lld flights\n", (long long)l.n);
  fsh_flight_info_list_reset(&l);
  return 0;
}

static int flight_info(flight_args *a, bool poll) {
  if (a->n_pos != 2)
    return cli_fail(2, "usage: flightshuffle flight %s URI PATH [OPTIONS]", poll ? "poll" : "info");
  fsh_flight_descriptor d;
  FSH_RETURN_NOT_OK(make_descriptor(a, a->pos[1], &d));
  fsh_flight_client *c = NULL;
  int rc = open_client(a, &c);
  if (rc) {
    fsh_flight_descriptor_reset(&d);
    return rc;
  }
  fsh_error err = {{0}};
  fsh_flight_info info;
  double progress = -1;
  bool done = false;
  if (poll)
    rc = fsh_flight_poll_flight_info(c, &d, &info, &progress, &done, &err);
  else
    rc = fsh_flight_get_flight_info(c, &d, &info, &err);
  fsh_flight_client_close(c);
  fsh_flight_descriptor_reset(&d);
  if (rc) return cli_fail(1, "%s", err.message);
  print_info(&info, "");
  if (poll) {
    if (progress >= 0) printf("progress: %g\n", progress);
    printf("done: %s\n", done ? "true" : "false");
  }
  fsh_flight_info_reset(&info);
  return 0;
}

static int flight_schema(flight_args *a) {
  if (a->n_pos != 2) return cli_fail(2, "usage: flightshuffle flight schema URI PATH [OPTIONS]");
  fsh_flight_descriptor d;
  FSH_RETURN_NOT_OK(make_descriptor(a, a->pos[1], &d));
  fsh_flight_client *c = NULL;
  int rc = open_client(a, &c);
  if (rc) {
    fsh_flight_descriptor_reset(&d);
    return rc;
  }
  fsh_error err = {{0}};
  fsh_schema *s = NULL;
  rc = fsh_flight_get_schema(c, &d, &s, &err);
  fsh_flight_client_close(c);
  fsh_flight_descriptor_reset(&d);
  if (rc) return cli_fail(1, "%s", err.message);
  print_schema(s, "");
  fsh_schema_unref(s);
  return 0;
}

static int flight_actions(flight_args *a) {
  if (a->n_pos != 1) return cli_fail(2, "usage: flightshuffle flight actions URI [OPTIONS]");
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(open_client(a, &c));
  fsh_error err = {{0}};
  fsh_flight_action_type_list l;
  int rc = fsh_flight_list_actions(c, &l, &err);
  fsh_flight_client_close(c);
  if (rc) return cli_fail(1, "%s", err.message);
  for (int64_t i = 0; i < l.n; i++) printf("%s: %s\n", l.items[i].type, l.items[i].description);
  printf("%lld actions\n", (long long)l.n);
  fsh_flight_action_type_list_reset(&l);
  return 0;
}

static int flight_action(flight_args *a) {
  if (a->n_pos != 2 && a->n_pos != 3)
    return cli_fail(2, "usage: flightshuffle flight action URI TYPE [BODY] [OPTIONS]");
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(open_client(a, &c));
  fsh_flight_action act = {.type = (char *)a->pos[1]};
  if (a->n_pos == 3) {
    act.body.data = (uint8_t *)a->pos[2];
    act.body.size = (int64_t)strlen(a->pos[2]);
  }
  fsh_error err = {{0}};
  fsh_flight_result_list l;
  int rc = fsh_flight_do_action(c, &act, &l, &err);
  fsh_flight_client_close(c);
  if (rc) return cli_fail(1, "%s", err.message);
  for (int64_t i = 0; i < l.n; i++) {
    printf("result %lld: \"", (long long)i);
    print_bytes(stdout, l.items[i].data, l.items[i].size);
    printf("\"\n");
  }
  printf("%lld results\n", (long long)l.n);
  fsh_flight_result_list_reset(&l);
  return 0;
}

static int flight_handshake(flight_args *a) {
  if (a->n_pos != 3)
    return cli_fail(2, "usage: flightshuffle flight handshake URI USER PASSWORD [OPTIONS]");
  fsh_flight_client *c = NULL;
  a->user = NULL; /* the positional credentials are the point here */
  FSH_RETURN_NOT_OK(open_client(a, &c));
  fsh_error err = {{0}};
  char *token = NULL;
  int rc = fsh_flight_handshake(c, a->pos[1], a->pos[2], &token, &err);
  fsh_flight_client_close(c);
  if (rc) return cli_fail(1, "%s", err.message);
  printf("token: %s\n", token);
  fsh_free(token);
  return 0;
}

/* ---- get / exchange: a response stream to an IPC stream file -------------- */

/* Writes every message of r to out as it came (no re-encoding), decoding
 * each on the side to validate it and count rows. Takes ownership of out
 * (closed on success, aborted on error). */
static int drain_to_output(fsh_flight_reader *r, fsh_output *out, int64_t *n_batches,
                           int64_t *n_rows, fsh_error *err) {
  fsh_ipc_decoder *dec = NULL;
  int rc = fsh_ipc_decoder_new(&dec, err);
  bool have_schema = false;
  *n_batches = *n_rows = 0;
  while (rc == 0) {
    fsh_flight_message m;
    bool done = false;
    if ((rc = fsh_flight_reader_next_raw(r, &m, &done, err)) != 0 || done) break;
    if (m.metadata) {
      fsh_ipc_message_type type = FSH_IPC_NONE;
      int64_t body_length = 0;
      fsh_batch *b = NULL;
      rc = fsh_ipc_peek_message(m.metadata, &type, &body_length, err);
      if (rc == 0) rc = fsh_ipc_decode_message(dec, m.metadata, m.body, &b, err);
      if (rc == 0 && b) {
        rc = fsh_batch_validate(b, false, err);
        if (rc) fsh_error_prefix(err, rc, "received batch %lld: ", (long long)*n_batches);
        (*n_batches)++;
        *n_rows += b->length;
        fsh_batch_unref(b);
      }
      if (rc == 0) {
        have_schema |= type == FSH_IPC_SCHEMA;
        fsh_buffer *body = NULL;
        if (body_length > 0) body = fsh_buffer_slice(m.body, 0, body_length);
        if (body_length > 0 && !body) rc = fsh_error_set(err, ENOMEM, "out of memory");
        fsh_ipc_payload p = {.type = type,
                             .metadata = m.metadata,
                             .body_length = body_length,
                             .n_body = body ? 1 : 0,
                             .body = &body};
        if (rc == 0) rc = fsh_ipc_write_payload(out, &p, err);
        fsh_buffer_unref(body);
      }
    }
    fsh_flight_message_reset(&m);
  }
  fsh_ipc_decoder_free(dec);
  if (rc == 0 && !have_schema) rc = fsh_error_set(err, EPROTO, "the stream had no schema");
  if (rc == 0) {
    static const uint8_t eos[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    struct iovec v = {(void *)eos, sizeof eos};
    rc = out->writev(out, &v, 1, err);
  }
  if (rc == 0) return out->close(out, false, err);
  out->close(out, true, NULL);
  return rc;
}

static int open_output(const char *path, fsh_output **out, fsh_error *err) {
  if (path && strcmp(path, "-") != 0) return fsh_output_open_path(path, out, err);
  return fsh_output_from_fd(1, false, "<stdout>", out, err);
}

static int flight_get(flight_args *a) {
  if (a->n_pos != 2)
    return cli_fail(2, "usage: flightshuffle flight get URI TICKET [-o OUT] [OPTIONS]");
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(open_client(a, &c));
  fsh_error err = {{0}};
  fsh_bytes ticket = {(uint8_t *)a->pos[1], (int64_t)strlen(a->pos[1])};
  fsh_flight_reader *r = NULL;
  fsh_output *out = NULL;
  int64_t batches = 0, rows = 0;
  int rc = fsh_flight_do_get(c, &ticket, &r, &err);
  if (rc == 0) rc = open_output(a->out_path, &out, &err);
  if (rc == 0) rc = drain_to_output(r, out, &batches, &rows, &err);
  fsh_flight_reader_free(r);
  fsh_flight_client_close(c);
  if (rc) return cli_fail(1, "%s", err.message);
  fprintf(stderr, "received %lld batches, %lld rows\n", (long long)batches, (long long)rows);
  return 0;
}

/* ---- put / exchange: an input file's batches out ---------------------------- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The batches of an IPC file or stream (streamed), or of an integration
 * JSON file (loaded whole). */
static int open_input(const char *path, fsh_batch_stream *s, fsh_error *err) {
  if (!ends_with(path, ".json") && !ends_with(path, ".json.gz"))
    return fsh_ipc_open_path(path, s, err);
  cli_table t;
  FSH_RETURN_NOT_OK(cli_table_load(path, &t, err));
  int rc = fsh_batch_stream_from_batches(t.schema, t.batches, t.n_batches, s, err);
  cli_table_reset(&t);
  return rc;
}

/* Writes every batch of s; counts them. */
static int send_all(fsh_flight_writer *w, fsh_batch_stream *s, int64_t *n_batches,
                    int64_t *n_rows, fsh_error *err) {
  *n_batches = *n_rows = 0;
  for (;;) {
    fsh_batch *b = NULL;
    FSH_RETURN_NOT_OK(s->get_next(s, &b, err));
    if (!b) return 0;
    int rc = fsh_flight_writer_write(w, b, err);
    (*n_batches)++;
    *n_rows += b->length;
    fsh_batch_unref(b);
    if (rc) return rc;
  }
}

/* What put and exchange start with: the input file FILE (a->pos[2]) as a
 * stream, the descriptor of PATH (a->pos[1]), a client. All or nothing;
 * returns the exit status on failure (the message printed). */
static int open_upload(flight_args *a, fsh_batch_stream *s, fsh_flight_descriptor *d,
                       fsh_flight_client **c) {
  fsh_error err = {{0}};
  if (open_input(a->pos[2], s, &err)) return cli_fail(1, "%s", err.message);
  int rc = make_descriptor(a, a->pos[1], d);
  if (rc == 0 && (rc = open_client(a, c)) != 0) fsh_flight_descriptor_reset(d);
  if (rc) s->release(s);
  return rc;
}

static int flight_put(flight_args *a) {
  if (a->n_pos != 3) return cli_fail(2, "usage: flightshuffle flight put URI PATH FILE [OPTIONS]");
  fsh_error err = {{0}};
  fsh_batch_stream s;
  fsh_flight_descriptor d;
  fsh_flight_client *c = NULL;
  int rc = open_upload(a, &s, &d, &c);
  if (rc) return rc;
  fsh_flight_writer *w = NULL;
  fsh_buffer *result = NULL;
  int64_t batches = 0, rows = 0;
  rc = fsh_flight_do_put(c, &d, s.schema, NULL, &w, &err);
  if (rc == 0) {
    rc = send_all(w, &s, &batches, &rows, &err);
    if (rc == 0)
      rc = fsh_flight_writer_close(w, &result, &err);
    else
      fsh_flight_writer_cancel(w);
  }
  fsh_flight_client_close(c);
  fsh_flight_descriptor_reset(&d);
  s.release(&s);
  if (rc) return cli_fail(1, "%s", err.message);
  printf("sent %lld batches, %lld rows\n", (long long)batches, (long long)rows);
  if (result && result->size > 0) {
    printf("put result: \"");
    print_bytes(stdout, result->data, result->size);
    printf("\"\n");
  }
  fsh_buffer_unref(result);
  return 0;
}

/* DoExchange's sending side runs on its own thread: a server that echoes
 * as it reads would otherwise block on a full window while we block on
 * sending. */
typedef struct exchange_send {
  fsh_flight_writer *w;
  fsh_batch_stream *s;
  int64_t batches, rows;
  int rc;
  fsh_error err;
} exchange_send;

static void *exchange_sender(void *arg) {
  exchange_send *x = arg;
  x->rc = send_all(x->w, x->s, &x->batches, &x->rows, &x->err);
  if (x->rc == 0)
    x->rc = fsh_flight_writer_close(x->w, NULL, &x->err);
  else
    fsh_flight_writer_cancel(x->w);
  return NULL;
}

static int flight_exchange(flight_args *a) {
  if (a->n_pos != 3)
    return cli_fail(2, "usage: flightshuffle flight exchange URI PATH FILE [-o OUT] [OPTIONS]");
  fsh_error err = {{0}};
  fsh_batch_stream s;
  fsh_flight_descriptor d;
  fsh_flight_client *c = NULL;
  int rc = open_upload(a, &s, &d, &c);
  if (rc) return rc;
  fsh_flight_writer *w = NULL;
  fsh_flight_reader *r = NULL;
  fsh_output *out = NULL;
  int64_t batches = 0, rows = 0;
  exchange_send x = {.s = &s};
  rc = fsh_flight_do_exchange(c, &d, s.schema, NULL, &w, &r, &err);
  if (rc == 0) rc = open_output(a->out_path, &out, &err);
  if (rc) {
    fsh_flight_writer_cancel(w);
    fsh_flight_reader_free(r);
  } else {
    x.w = w;
    pthread_t t;
    if (pthread_create(&t, NULL, exchange_sender, &x) != 0) {
      x.w = NULL;
      fsh_flight_writer_cancel(w);
      out->close(out, true, NULL);
      rc = fsh_error_set(&err, EAGAIN, "cannot start a thread");
    } else {
      rc = drain_to_output(r, out, &batches, &rows, &err);
      if (rc) fsh_flight_reader_cancel(r); /* unblocks the sender */
      pthread_join(t, NULL);
      if (rc == 0 && x.rc) {
        rc = x.rc;
        err = x.err;
      }
    }
    fsh_flight_reader_free(r);
  }
  fsh_flight_client_close(c);
  fsh_flight_descriptor_reset(&d);
  s.release(&s);
  if (rc) return cli_fail(1, "%s", err.message);
  fprintf(stderr, "sent %lld batches, %lld rows; received %lld batches, %lld rows\n",
          (long long)x.batches, (long long)x.rows, (long long)batches, (long long)rows);
  return 0;
}

int cmd_flight(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cmd_flight_serve(argc - 1, argv + 1);
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  flight_args a;
  FSH_RETURN_NOT_OK(parse_args(argc - 2, argv + 2, &a));
  if (a.n_pos < 1) return cli_fail(2, "flight %s: no URI (flightshuffle flight -h)", cmd);
  if (strcmp(cmd, "list") == 0) return flight_list(&a);
  if (strcmp(cmd, "get") == 0) return flight_get(&a);
  if (strcmp(cmd, "put") == 0) return flight_put(&a);
  if (strcmp(cmd, "info") == 0) return flight_info(&a, false);
  if (strcmp(cmd, "poll") == 0) return flight_info(&a, true);
  if (strcmp(cmd, "schema") == 0) return flight_schema(&a);
  if (strcmp(cmd, "actions") == 0) return flight_actions(&a);
  if (strcmp(cmd, "action") == 0) return flight_action(&a);
  if (strcmp(cmd, "exchange") == 0) return flight_exchange(&a);
  if (strcmp(cmd, "handshake") == 0) return flight_handshake(&a);
  fputs(USAGE, stderr);
  return cli_fail(2, "flight: unknown command '%s'", cmd);
}
