/* bench_flight.c -- Flight DoGet throughput from OUR server to OUR client
 * on loopback, one stream and several, against a raw TCP copy of the same
 * bytes measured in the same run (a plain loopback socket send/recv loop,
 * one connection per stream), and, when the project's .venv is there,
 * against pyarrow.flight (bench_flight_pyarrow.py beside this file: the
 * reference, Arrow C++, moving the same shape of data; it also measures
 * pyarrow's client reading from our server).
 *
 * The server serves pre-encoded IPC messages (synthetic int64 / float64 /
 * utf8 batches of ~4 MiB) as a shuffle worker serves stored map output;
 * the client decodes every batch (reader_next) or, on the `raw` line,
 * takes the messages undecoded (reader_next_raw). A separate, untimed
 * pass compares every received batch with what was served.
 *
 *   build/bench_flight [--bytes N] [--runs R] [--streams S] [--no-pyarrow]
 *
 * Ends with one machine-readable `result:` line. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/flight.h>
#include <flightshuffle/workloads.h>

#define BATCH_ROWS 131072 /* ~4 MiB of synthetic rows */
#define MAX_STREAMS 16

typedef struct stats {
  double min, med, max;
} stats;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static stats summarize(double *secs, int runs, double bytes) {
  qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
  stats s = {bytes / secs[runs - 1] / 1e9, bytes / secs[runs / 2] / 1e9, bytes / secs[0] / 1e9};
  return s;
}

static void print_stats(const char *name, stats s, double baseline_med) {
  printf("  %-40s %6.2f %6.2f %6.2f GB/s   %5.2fx raw TCP\n", name, s.min, s.med, s.max,
         s.med / baseline_med);
}

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_flight: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

/* ---- the served data: K distinct pre-encoded batches, cycled ---------------- */

#define K_BATCHES 8

typedef struct dataset {
  fsh_schema *schema;
  fsh_batch *batches[K_BATCHES];
  fsh_ipc_payload schema_payload;
  fsh_ipc_payload payloads[K_BATCHES];
  double message_bytes[K_BATCHES]; /* metadata + body on the wire */
  double avg_bytes;
} dataset;

static dataset data;

static void make_dataset(void) {
  fsh_error err;
  data.schema = fsh_synthetic_schema();
  fsh_synthetic_options o = {.seed = 11, .with_nulls = true, .key_range = 1 << 20};
  fsh_ipc_encoder *enc = NULL;
  if (fsh_ipc_encoder_new(data.schema, NULL, &enc, &err)) die("encoder", &err);
  if (fsh_ipc_encode_schema(enc, &data.schema_payload, &err)) die("schema", &err);
  double total = 0;
  for (int i = 0; i < K_BATCHES; i++) {
    if (fsh_synthetic_batch(data.schema, &o, i, BATCH_ROWS, &data.batches[i], &err))
      die("generate", &err);
    fsh_ipc_payload *ps = NULL;
    int32_t n = 0;
    if (fsh_ipc_encode_batch(enc, data.batches[i], &ps, &n, &err) || n != 1) die("encode", &err);
    data.payloads[i] = ps[0];
    fsh_free(ps);
    data.message_bytes[i] = (double)(data.payloads[i].metadata->size + data.payloads[i].body_length);
    total += data.message_bytes[i];
  }
  data.avg_bytes = total / K_BATCHES;
  fsh_ipc_encoder_free(enc);
}

static void free_dataset(void) {
  fsh_ipc_payload_reset(&data.schema_payload);
  for (int i = 0; i < K_BATCHES; i++) {
    fsh_ipc_payload_reset(&data.payloads[i]);
    fsh_batch_unref(data.batches[i]);
  }
  fsh_schema_unref(data.schema);
}

/* A payload sharing p's buffers (references taken). */
static int payload_share(const fsh_ipc_payload *p, fsh_ipc_payload *out) {
  *out = *p;
  out->metadata = fsh_buffer_ref(p->metadata);
  out->body = fsh_malloc(sizeof(fsh_buffer *) * (size_t)(p->n_body ? p->n_body : 1));
  if (!out->body) return ENOMEM;
  for (int32_t i = 0; i < p->n_body; i++) out->body[i] = fsh_buffer_ref(p->body[i]);
  return 0;
}

/* ---- our server ---------------------------------------------------------------- */

typedef struct cycle_source {
  fsh_flight_source base;
  int64_t left; /* batches still to send */
  int64_t next;
  bool schema_sent;
} cycle_source;

static int cycle_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                      bool *done, fsh_error *err) {
  cycle_source *c = (cycle_source *)s;
  *done = false;
  if (!c->schema_sent) {
    c->schema_sent = true;
    return payload_share(&data.schema_payload, out);
  }
  if (c->left == 0) {
    *done = true;
    return 0;
  }
  c->left--;
  return payload_share(&data.payloads[c->next++ % K_BATCHES], out);
}

static void cycle_release(fsh_flight_source *s) { fsh_free(s); }

/* Ticket: the number of batches, in decimal. */
static int bench_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                        fsh_flight_source **out, fsh_error *err) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.*s", (int)(ticket->size < 30 ? ticket->size : 30),
           (const char *)ticket->data);
  cycle_source *c = fsh_calloc(1, sizeof *c);
  if (!c) return ENOMEM;
  c->left = atoll(buf);
  c->base = (fsh_flight_source){cycle_next, cycle_release, c};
  *out = &c->base;
  return 0;
}

/* ---- our client ---------------------------------------------------------------- */

typedef struct get_job {
  fsh_flight_client *client;
  int64_t n_batches;
  bool raw;
  bool verify;
  bool ok;
  double bytes;
} get_job;

static void *run_get(void *arg) {
  get_job *j = arg;
  fsh_error err;
  char t[32];
  int n = snprintf(t, sizeof t, "%lld", (long long)j->n_batches);
  fsh_bytes ticket = {(uint8_t *)t, n};
  fsh_flight_reader *r = NULL;
  j->ok = false;
  j->bytes = 0;
  if (fsh_flight_do_get(j->client, &ticket, &r, &err)) die("DoGet", &err);
  int64_t i = 0;
  bool ok = true;
  for (;; i++) {
    if (j->raw) {
      fsh_flight_message m;
      bool done = false;
      if (fsh_flight_reader_next_raw(r, &m, &done, &err)) die("DoGet next_raw", &err);
      if (done) break;
      j->bytes += (double)((m.metadata ? m.metadata->size : 0) + (m.body ? m.body->size : 0));
      fsh_flight_message_reset(&m);
    } else {
      fsh_batch *b = NULL;
      if (fsh_flight_reader_next(r, &b, &err)) die("DoGet next", &err);
      if (!b) break;
      j->bytes += data.message_bytes[i % K_BATCHES];
      if (j->verify && !fsh_batch_equals(b, data.batches[i % K_BATCHES], &err)) {
        fprintf(stderr, "bench_flight: batch %lld differs: %s\n", (long long)i, err.message);
        ok = false;
      }
      fsh_batch_unref(b);
    }
  }
  if (j->raw) i--; /* the schema message counted as one */
  fsh_flight_reader_free(r);
  j->ok = ok && i == j->n_batches;
  return NULL;
}

/* S concurrent DoGets of n batches in total; seconds. `clients` holds S
 * clients (distinct channels) or the same one S times. */
static double flight_run(fsh_flight_client **clients, int streams, int64_t n, bool raw,
                         bool verify, bool *ok) {
  pthread_t th[MAX_STREAMS];
  get_job jobs[MAX_STREAMS];
  double t0 = now();
  for (int s = 0; s < streams; s++) {
    jobs[s] = (get_job){.client = clients[s], .n_batches = n / streams, .raw = raw, .verify = verify};
    if (pthread_create(&th[s], NULL, run_get, &jobs[s])) die("thread", NULL);
  }
  for (int s = 0; s < streams; s++) {
    pthread_join(th[s], NULL);
    if (!jobs[s].ok) *ok = false;
  }
  return now() - t0;
}

/* ---- raw TCP baseline -------------------------------------------------------------- */

typedef struct tcp_job {
  int fd;
  double bytes;
  size_t chunk;
} tcp_job;

static void *tcp_send(void *arg) {
  tcp_job *j = arg;
  uint8_t *buf = malloc(j->chunk);
  memset(buf, 0x5a, j->chunk);
  double left = j->bytes;
  while (left > 0) {
    size_t n = left < (double)j->chunk ? (size_t)left : j->chunk;
    size_t off = 0;
    while (off < n) {
      ssize_t w = send(j->fd, buf + off, n - off, 0);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) die("tcp send", NULL);
      off += (size_t)w;
    }
    left -= (double)n;
  }
  free(buf);
  shutdown(j->fd, SHUT_WR);
  return NULL;
}

static void *tcp_recv(void *arg) {
  tcp_job *j = arg;
  uint8_t *buf = malloc(j->chunk);
  double got = 0;
  for (;;) {
    ssize_t r = recv(j->fd, buf, j->chunk, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("tcp recv", NULL);
    if (r == 0) break;
    got += (double)r;
  }
  free(buf);
  if (got != j->bytes) die("tcp: short copy", NULL);
  return NULL;
}

/* S loopback connections, each moving bytes/S; seconds (connect excluded). */
static double tcp_run(int streams, double bytes) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, MAX_STREAMS) ||
      getsockname(lfd, (struct sockaddr *)&a, &alen))
    die("tcp listen", NULL);
  int cfd[MAX_STREAMS], sfd[MAX_STREAMS];
  for (int s = 0; s < streams; s++) {
    cfd[s] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(cfd[s], (struct sockaddr *)&a, sizeof a)) die("tcp connect", NULL);
    sfd[s] = accept(lfd, NULL, NULL);
    if (sfd[s] < 0) die("tcp accept", NULL);
  }
  pthread_t ts[MAX_STREAMS], tr[MAX_STREAMS];
  tcp_job send_jobs[MAX_STREAMS], recv_jobs[MAX_STREAMS];
  double t0 = now();
  for (int s = 0; s < streams; s++) {
    send_jobs[s] = (tcp_job){sfd[s], bytes / streams, 4 << 20};
    recv_jobs[s] = (tcp_job){cfd[s], bytes / streams, 4 << 20};
    send_jobs[s].bytes = recv_jobs[s].bytes = (double)(int64_t)(bytes / streams);
    pthread_create(&ts[s], NULL, tcp_send, &send_jobs[s]);
    pthread_create(&tr[s], NULL, tcp_recv, &recv_jobs[s]);
  }
  for (int s = 0; s < streams; s++) {
    pthread_join(ts[s], NULL);
    pthread_join(tr[s], NULL);
  }
  double secs = now() - t0;
  for (int s = 0; s < streams; s++) {
    close(cfd[s]);
    close(sfd[s]);
  }
  close(lfd);
  return secs;
}

/* ---- pyarrow.flight (companion script) ------------------------------------------- */

typedef struct py_result {
  bool ran;
  stats pyarrow;       /* pyarrow client <- pyarrow server, GB/s */
  stats pyclient_ours; /* pyarrow client <- our server, GB/s */
} py_result;

static double field(const char *line, const char *key) {
  const char *p = strstr(line, key);
  return p ? atof(p + strlen(key)) : 0;
}

/* Runs bench_flight_pyarrow.py with the repository's .venv (found from
 * this executable's folder: <repo>/build-xxx/bench_flight), or $FSH_PYTHON. */
static py_result run_pyarrow(double bytes, int runs, const char *our_uri, int64_t our_batches) {
  py_result res = {0};
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return res;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return res;
  *slash = '\0';
  char py[4200], script[4200], cmd[9000];
  const char *env_py = getenv("FSH_PYTHON");
  if (env_py)
    snprintf(py, sizeof py, "%s", env_py);
  else
    snprintf(py, sizeof py, "%s/../.venv/bin/python", exe);
  snprintf(script, sizeof script, "%s/../bench/flight/bench_flight_pyarrow.py", exe);
  if (access(py, X_OK) != 0 || access(script, R_OK) != 0) {
    printf("  (pyarrow comparison skipped: no %s or %s)\n", py, script);
    return res;
  }
  snprintf(cmd, sizeof cmd,
           "'%s' '%s' --bytes %.0f --runs %d --batch-rows %d --our-uri %s --our-batches %lld "
           "--our-bytes %.0f",
           py, script, bytes, runs, BATCH_ROWS, our_uri, (long long)our_batches, bytes);
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) return res;
  char line[1024];
  while (fgets(line, sizeof line, p)) {
    if (strncmp(line, "result:", 7) == 0) {
      res.pyarrow = (stats){field(line, "pyarrow_min="), field(line, "pyarrow_med="),
                            field(line, "pyarrow_max=")};
      res.pyclient_ours = (stats){field(line, "pyclient_ours_min="),
                                  field(line, "pyclient_ours_med="),
                                  field(line, "pyclient_ours_max=")};
      res.ran = res.pyarrow.med > 0;
    } else if (strncmp(line, "  ", 2) != 0) {
      fputs(line, stdout); /* anything unexpected (the stats lines are ours to print) */
    }
  }
  if (pclose(p) != 0) res.ran = false;
  return res;
}

/* ---- main ------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  double target = 1024.0 * 1024 * 1024;
  int runs = 5, streams = 4;
  bool with_pyarrow = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
      target = atof(argv[++i]);
    else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--streams") == 0 && i + 1 < argc)
      streams = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-pyarrow") == 0)
      with_pyarrow = false;
    else {
      fprintf(stderr,
              "usage: bench_flight [--bytes N] [--runs R] [--streams S] [--no-pyarrow]\n");
      return 2;
    }
  }
  if (runs < 1 || runs > 100) runs = 5;
  if (streams < 1 || streams > MAX_STREAMS) streams = 4;

  make_dataset();
  int64_t n = (int64_t)(target / data.avg_bytes);
  n = (n / streams) * streams;
  if (n < streams) n = streams;
  double bytes = 0;
  for (int64_t i = 0; i < n; i++) bytes += data.message_bytes[i % K_BATCHES];

  fsh_error err;
  fsh_flight_server_options so = {.listen = "127.0.0.1:0", .n_threads = 4};
  fsh_flight_handlers h = {.do_get = bench_do_get};
  fsh_flight_server *server = NULL;
  if (fsh_flight_server_start(&so, &h, &server, &err)) die("server", &err);
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", fsh_flight_server_port(server));
  fsh_flight_client *clients[MAX_STREAMS];
  fsh_flight_client_options co = {.uri = uri};
  for (int s = 0; s < streams; s++)
    if (fsh_flight_client_open(&co, &clients[s], &err)) die("client", &err);
  fsh_flight_client *shared[MAX_STREAMS];
  for (int s = 0; s < streams; s++) shared[s] = clients[0];

  printf("bench_flight: DoGet of %lld batches (%.0f MB of IPC messages, %.1f MB each), "
         "%d runs, min / median / max\n",
         (long long)n, bytes / 1e6, data.avg_bytes / 1e6, runs);

  /* untimed verification pass: every batch compared */
  bool verified = true;
  (void)flight_run(clients, 1, n < 64 ? n : 64, false, true, &verified);
  (void)flight_run(clients, streams, n < 64 ? n : 64, false, true, &verified);

  double secs[100];
  stats tcp1, tcpS, f1, f1raw, fS_shared, fS;
  for (int r = 0; r < runs; r++) secs[r] = tcp_run(1, bytes);
  tcp1 = summarize(secs, runs, bytes);
  for (int r = 0; r < runs; r++) secs[r] = tcp_run(streams, bytes);
  tcpS = summarize(secs, runs, bytes);
  bool ok = true;
  for (int r = 0; r < runs; r++) secs[r] = flight_run(clients, 1, n, false, false, &ok);
  f1 = summarize(secs, runs, bytes);
  for (int r = 0; r < runs; r++) secs[r] = flight_run(clients, 1, n, true, false, &ok);
  f1raw = summarize(secs, runs, bytes);
  for (int r = 0; r < runs; r++) secs[r] = flight_run(shared, streams, n, false, false, &ok);
  fS_shared = summarize(secs, runs, bytes);
  for (int r = 0; r < runs; r++) secs[r] = flight_run(clients, streams, n, false, false, &ok);
  fS = summarize(secs, runs, bytes);
  verified = verified && ok;

  char name[64];
  printf("  %-40s %6s %6s %6s\n", "", "min", "median", "max");
  print_stats("raw TCP, 1 connection", tcp1, tcp1.med);
  print_stats("Flight DoGet, 1 stream (decoded)", f1, tcp1.med);
  print_stats("Flight DoGet, 1 stream (raw messages)", f1raw, tcp1.med);
  snprintf(name, sizeof name, "raw TCP, %d connections", streams);
  print_stats(name, tcpS, tcpS.med);
  snprintf(name, sizeof name, "Flight DoGet, %d streams, 1 channel", streams);
  print_stats(name, fS_shared, tcpS.med);
  snprintf(name, sizeof name, "Flight DoGet, %d streams, %d channels", streams, streams);
  print_stats(name, fS, tcpS.med);

  py_result py = {0};
  if (with_pyarrow) {
    py = run_pyarrow(bytes, runs, uri, n);
    if (py.ran) {
      print_stats("pyarrow.flight DoGet, 1 stream", py.pyarrow, tcp1.med);
      print_stats("pyarrow client <- our server, 1 stream", py.pyclient_ours, tcp1.med);
      printf("  ours / pyarrow.flight (1 stream, decoded): %.2fx\n", f1.med / py.pyarrow.med);
    }
  }

  printf("result: name=bench_flight verified=%s bytes=%.0f runs=%d streams=%d "
         "tcp1_gbps=%.2f flight1_gbps=%.2f flight1_vs_tcp=%.2f flight1_raw_vs_tcp=%.2f "
         "flightN_shared_vs_tcpN=%.2f flightN_vs_tcpN=%.2f",
         verified ? "yes" : "no", bytes, runs, streams, tcp1.med, f1.med, f1.med / tcp1.med,
         f1raw.med / tcp1.med, fS_shared.med / tcpS.med, fS.med / tcpS.med);
  if (py.ran)
    printf(" pyarrow1_gbps=%.2f pyarrow1_vs_tcp=%.2f ours_vs_pyarrow=%.2f "
           "pyclient_ours_vs_pyarrow=%.2f",
           py.pyarrow.med, py.pyarrow.med / tcp1.med, f1.med / py.pyarrow.med,
           py.pyclient_ours.med / py.pyarrow.med);
  printf("\n");

  for (int s = 0; s < streams; s++) fsh_flight_client_close(clients[s]);
  fsh_flight_server_stop(server, 1000);
  free_dataset();
  return verified ? 0 : 1;
}
