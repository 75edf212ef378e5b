/* bench_flight.c -- Flight DoGet and DoPut throughput on loopback, OUR
 * server with OUR client, against two baselines measured in the same run:
 *  - a raw TCP copy of the same bytes (a plain send/recv loop with 4 MiB
 *    buffers, one loopback connection per stream, two threads each);
 *  - pyarrow.flight's own server and client (Arrow C++) moving the same
 *    data: bench_flight_pyarrow.py beside this file, run as a companion
 *    process driven over a pipe, so its runs interleave with ours.
 *
 * The table: {DoGet, DoPut} x {1, 4 concurrent streams} x {4 MiB, 64 MiB
 * batches}, uncompressed. The data is 8 non-null int64 columns (64 bytes a
 * row): 4 MiB batches are 65,536 rows (the 64K rows), 64 MiB
 * batches 1,048,576 rows (the same columns, 16x the rows). pyarrow's side
 * builds the same columns. Each of S streams runs on its own client (one
 * channel, one TCP connection) and thread and moves 1/S of the bytes.
 * Every run of every row moves --mib MiB of Arrow data; runs are
 * interleaved (run r of every row, then run r+1, ...) so that drift on a
 * shared machine hits all rows alike. Both servers run in a process of
 * their own (ours: this executable with --server; pyarrow's: the script
 * with --serve-only), the clients in this process / the companion, as a
 * Flight server and its clients are deployed. DoGet clients decode every
 * batch (reader_next; pyarrow: read_chunk); DoPut servers decode every
 * batch they receive (pyarrow: read_chunk). An untimed pass first checks
 * every batch of each kind, both ways. A second table gives the CPU
 * seconds (user + system, server and client processes) per GB moved,
 * which other load on the machine disturbs less than wall time, a third
 * the page faults per GB (both processes), which it does not move at all.
 *
 * Then small calls (latency): a DoAction on an open client, and a client
 * opened, used for one DoAction and closed, ours and pyarrow's (--only
 * calls: just these).
 *
 * Then the memory check: our server, in a child process (--rss-server),
 * serves a 4 GiB DoGet stream of freshly allocated 4 MiB batches to a
 * deliberately slow client (a 4 ms sleep after every message); the
 * server's VmRSS is sampled every 5 ms and its VmHWM read at the end.
 * Flow control must keep it under 256 MiB.
 *
 *   build/bench_flight [--mib N] [--runs R] [--no-pyarrow] [--no-rss]
 *                      [--rss-gib G] [--only get|put|get1S|put4L|...|calls]
 *   FSH_BENCH_VERBOSE=1: per-run lines on stderr; FSH_BENCH_NO_TCP=1: no
 *   TCP baseline and no check pass (for profiling one row).
 *
 * Ends with one machine-readable `result:` line. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/flight.h>

#include "cli/proc_cpu.h"

extern char **environ;

#define N_COLS 8
#define SMALL_ROWS 65536   /* 4 MiB batches */
#define LARGE_ROWS 1048576 /* 64 MiB batches */
#define MAX_STREAMS 4
#define MAX_RUNS 50
#define SMALL_CALLS 200 /* calls per round of the small-call table */

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Minor + major page faults of this process (ours: the client side). */
static double fault_count(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_minflt + (double)ru.ru_majflt;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const fsh_error *err) {
  fprintf(stderr, "bench_flight: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

/* ---- the data ---------------------------------------------------------------------- */

/* One pool of LARGE_ROWS rows; the 64 MiB batch is all of it, the 4 MiB
 * batches are its 16 row ranges (zero-copy slices). Column c, row i holds
 * i * (c + 1) + c. */
typedef struct dataset {
  fsh_schema *schema;
  fsh_batch *large;
  fsh_batch *small[LARGE_ROWS / SMALL_ROWS];
  fsh_ipc_payload schema_payload;
  fsh_ipc_payload large_payload;
  fsh_ipc_payload small_payload[LARGE_ROWS / SMALL_ROWS];
  double small_bytes, large_bytes; /* one message on the wire (metadata + body) */
} dataset;

static dataset data;
#define N_SMALL (LARGE_ROWS / SMALL_ROWS)

static fsh_schema *make_schema(void) {
  fsh_schema *s = fsh_schema_new(N_COLS);
  if (!s) die("schema", NULL);
  for (int c = 0; c < N_COLS; c++) {
    char name[8];
    snprintf(name, sizeof name, "c%d", c);
    if (fsh_field_init(&s->fields[c], name, FSH_TYPE_INT64, false)) die("field", NULL);
  }
  return s;
}

/* A batch of `rows` rows; fresh buffers filled from row `first`. */
static fsh_batch *make_batch(fsh_schema *s, int64_t rows, int64_t first) {
  fsh_batch *b = fsh_batch_new(s, rows);
  if (!b) die("batch", NULL);
  for (int c = 0; c < N_COLS; c++) {
    fsh_buffer *vals = fsh_buffer_new(rows * 8, false);
    fsh_array *a = fsh_array_new(2, 0);
    if (!vals || !a) die("column", NULL);
    int64_t *v = (int64_t *)vals->data;
    for (int64_t i = 0; i < rows; i++) v[i] = (first + i) * (c + 1) + c;
    a->length = rows;
    a->null_count = 0;
    a->buffers[1] = vals;
    b->columns[c] = a;
  }
  return b;
}

static void encode_one(fsh_ipc_encoder *enc, fsh_batch *b, fsh_ipc_payload *out) {
  fsh_error err;
  fsh_ipc_payload *ps = NULL;
  int32_t n = 0;
  if (fsh_ipc_encode_batch(enc, b, &ps, &n, &err) || n != 1) die("encode", &err);
  *out = ps[0];
  fsh_free(ps);
}

static double wire_bytes(const fsh_ipc_payload *p) {
  return (double)(p->metadata->size + p->body_length);
}

static void make_dataset(void) {
  fsh_error err;
  data.schema = make_schema();
  data.large = make_batch(data.schema, LARGE_ROWS, 0);
  fsh_ipc_encoder *enc = NULL;
  if (fsh_ipc_encoder_new(data.schema, NULL, &enc, &err)) die("encoder", &err);
  if (fsh_ipc_encode_schema(enc, &data.schema_payload, &err)) die("schema", &err);
  encode_one(enc, data.large, &data.large_payload);
  for (int i = 0; i < N_SMALL; i++) {
    data.small[i] = fsh_batch_slice(data.large, (int64_t)i * SMALL_ROWS, SMALL_ROWS);
    if (!data.small[i]) die("slice", NULL);
    encode_one(enc, data.small[i], &data.small_payload[i]);
  }
  fsh_ipc_encoder_free(enc);
  data.small_bytes = wire_bytes(&data.small_payload[0]);
  data.large_bytes = wire_bytes(&data.large_payload);
}

static void free_dataset(void) {
  fsh_ipc_payload_reset(&data.schema_payload);
  fsh_ipc_payload_reset(&data.large_payload);
  for (int i = 0; i < N_SMALL; i++) {
    fsh_ipc_payload_reset(&data.small_payload[i]);
    fsh_batch_unref(data.small[i]);
  }
  fsh_batch_unref(data.large);
  fsh_schema_unref(data.schema);
}

/* The i-th batch of a stream of `large` or small batches. */
static fsh_batch *batch_at(bool large, int64_t i) {
  return large ? data.large : data.small[i % N_SMALL];
}
static const fsh_ipc_payload *payload_at(bool large, int64_t i) {
  return large ? &data.large_payload : &data.small_payload[i % N_SMALL];
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

/* ---- our server ------------------------------------------------------------------ */

/* Tickets and descriptors: "<L|S><count>[v]" (large or small batches;
 * v: the DoPut server compares every batch with the expected one). */
static bool parse_ticket(const uint8_t *p, int64_t n, bool *large, int64_t *count, bool *verify) {
  char buf[32];
  if (n < 2 || n > 30) return false;
  memcpy(buf, p, (size_t)n);
  buf[n] = '\0';
  *large = buf[0] == 'L';
  *count = atoll(buf + 1);
  if (verify) *verify = buf[n - 1] == 'v';
  return *count >= 0;
}

typedef struct cycle_source {
  fsh_flight_source base;
  bool large;
  int64_t left, next;
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
  return payload_share(payload_at(c->large, c->next++), out);
}

static void cycle_release(fsh_flight_source *s) { fsh_free(s); }

static int bench_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                        fsh_flight_source **out, fsh_error *err) {
  cycle_source *c = fsh_calloc(1, sizeof *c);
  if (!c) return ENOMEM;
  if (!parse_ticket(ticket->data, ticket->size, &c->large, &c->left, NULL)) {
    fsh_free(c);
    return fsh_error_set(err, EINVAL, "bad ticket");
  }
  c->base = (fsh_flight_source){.next = cycle_next, .release = cycle_release, .ctx = c};
  *out = &c->base;
  return 0;
}

/* DoPut: decodes every batch; with verify, compares it with the expected
 * one (the descriptor's command names the stream). */
typedef struct count_sink {
  fsh_flight_sink base;
  fsh_ipc_decoder *dec;
  bool large, verify;
  int64_t expect, got;
  bool bad;
} count_sink;

static _Atomic int put_failures;

static int sink_message(fsh_flight_sink *s, fsh_flight_message *m, fsh_error *err) {
  count_sink *k = (count_sink *)s;
  fsh_batch *b = NULL;
  int rc = m->metadata ? fsh_ipc_decode_message(k->dec, m->metadata, m->body, &b, err) : 0;
  fsh_flight_message_reset(m);
  if (rc) return rc;
  if (b) {
    if (k->verify && !fsh_batch_equals(b, batch_at(k->large, k->got), err)) k->bad = true;
    k->got++;
    fsh_batch_unref(b);
  }
  return 0;
}

static int sink_finish(fsh_flight_sink *s, fsh_buffer **put_result, fsh_error *err) {
  count_sink *k = (count_sink *)s;
  if (k->bad || k->got != k->expect) put_failures++;
  return 0;
}

static void sink_release(fsh_flight_sink *s) {
  count_sink *k = (count_sink *)s;
  fsh_ipc_decoder_free(k->dec);
  fsh_free(k);
}

static int bench_do_put(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                        fsh_flight_sink **out, fsh_error *err) {
  const fsh_flight_descriptor *d = &first->descriptor;
  count_sink *k = fsh_calloc(1, sizeof *k);
  if (!k) return ENOMEM;
  if (!first->has_descriptor || d->type != FSH_FLIGHT_DESCRIPTOR_CMD ||
      !parse_ticket(d->cmd.data, d->cmd.size, &k->large, &k->expect, &k->verify)) {
    fsh_free(k);
    return fsh_error_set(err, EINVAL, "bad descriptor");
  }
  if (fsh_ipc_decoder_new(&k->dec, err)) {
    fsh_free(k);
    return ENOMEM;
  }
  k->base = (fsh_flight_sink){sink_message, sink_finish, sink_release, k};
  *out = &k->base;
  return 0;
}

/* DoAction "ping": one result, "pong" (the calls of the latency table). */
static int bench_do_action(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                           fsh_flight_result_list *out, fsh_error *err) {
  if (strcmp(a->type, "ping") != 0) return fsh_error_set(err, EINVAL, "unknown action");
  return fsh_flight_result_list_push(out, "pong", 4);
}

/* ---- our client ------------------------------------------------------------------ */

typedef struct job {
  fsh_flight_client *client;
  bool put, large, verify;
  int64_t n_batches;
  bool ok;
} job;

static void *run_get(job *j) {
  fsh_error err;
  char t[32];
  int n = snprintf(t, sizeof t, "%c%lld", j->large ? 'L' : 'S', (long long)j->n_batches);
  fsh_bytes ticket = {(uint8_t *)t, n};
  fsh_flight_reader *r = NULL;
  if (fsh_flight_do_get(j->client, &ticket, &r, &err)) die("DoGet", &err);
  int64_t i = 0;
  bool ok = true;
  for (;; i++) {
    fsh_batch *b = NULL;
    if (fsh_flight_reader_next(r, &b, &err)) die("DoGet next", &err);
    if (!b) break;
    if (j->verify && !fsh_batch_equals(b, batch_at(j->large, i), &err)) {
      fprintf(stderr, "bench_flight: DoGet batch %lld differs: %s\n", (long long)i, err.message);
      ok = false;
    }
    fsh_batch_unref(b);
  }
  fsh_flight_reader_free(r);
  j->ok = ok && i == j->n_batches;
  return NULL;
}

static void *run_put(job *j) {
  fsh_error err;
  char t[32];
  int n = snprintf(t, sizeof t, "%c%lld%s", j->large ? 'L' : 'S', (long long)j->n_batches,
                   j->verify ? "v" : "");
  fsh_flight_descriptor d = {.type = FSH_FLIGHT_DESCRIPTOR_CMD, .cmd = {(uint8_t *)t, n}};
  fsh_flight_writer *w = NULL;
  if (fsh_flight_do_put(j->client, &d, data.schema, NULL, &w, &err)) die("DoPut", &err);
  for (int64_t i = 0; i < j->n_batches; i++)
    if (fsh_flight_writer_write(w, batch_at(j->large, i), &err)) die("DoPut write", &err);
  if (fsh_flight_writer_close(w, NULL, &err)) die("DoPut close", &err);
  j->ok = true;
  return NULL;
}

static void *run_job(void *arg) {
  job *j = arg;
  return j->put ? run_put(j) : run_get(j);
}

/* S concurrent streams (client s on thread s), n batches in total; seconds. */
static double flight_run(fsh_flight_client **clients, bool put, int streams, bool large,
                         int64_t n, bool verify, bool *ok) {
  pthread_t th[MAX_STREAMS];
  job jobs[MAX_STREAMS];
  double t0 = now();
  for (int s = 0; s < streams; s++) {
    jobs[s] = (job){.client = clients[s], .put = put, .large = large, .verify = verify,
                    .n_batches = n / streams};
    if (pthread_create(&th[s], NULL, run_job, &jobs[s])) die("thread", NULL);
  }
  for (int s = 0; s < streams; s++) {
    pthread_join(th[s], NULL);
    if (!jobs[s].ok) *ok = false;
  }
  return now() - t0;
}

/* ---- raw TCP baseline -------------------------------------------------------------- */

#define TCP_CHUNK (4 << 20)

typedef struct tcp_job {
  int fd;
  int64_t bytes;
  bool ok;
} tcp_job;

static void *tcp_send(void *arg) {
  tcp_job *j = arg;
  uint8_t *buf = malloc(TCP_CHUNK);
  if (!buf) die("tcp buffer", NULL);
  memset(buf, 0x5a, TCP_CHUNK);
  int64_t left = j->bytes;
  while (left > 0) {
    size_t n = left < TCP_CHUNK ? (size_t)left : TCP_CHUNK;
    size_t off = 0;
    while (off < n) {
      ssize_t w = send(j->fd, buf + off, n - off, 0);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) die("tcp send", NULL);
      off += (size_t)w;
    }
    left -= (int64_t)n;
  }
  free(buf);
  shutdown(j->fd, SHUT_WR);
  return NULL;
}

static void *tcp_recv(void *arg) {
  tcp_job *j = arg;
  uint8_t *buf = malloc(TCP_CHUNK);
  if (!buf) die("tcp buffer", NULL);
  int64_t got = 0;
  for (;;) {
    ssize_t r = recv(j->fd, buf, TCP_CHUNK, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("tcp recv", NULL);
    if (r == 0) break;
    got += r;
  }
  free(buf);
  j->ok = got == j->bytes;
  return NULL;
}

/* S loopback connections, each moving bytes/S; seconds (connect excluded). */
static double tcp_run(int streams, double bytes, bool *ok) {
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
  tcp_job sj[MAX_STREAMS], rj[MAX_STREAMS];
  double t0 = now();
  for (int s = 0; s < streams; s++) {
    sj[s] = (tcp_job){sfd[s], (int64_t)(bytes / streams), true};
    rj[s] = (tcp_job){cfd[s], (int64_t)(bytes / streams), false};
    pthread_create(&ts[s], NULL, tcp_send, &sj[s]);
    pthread_create(&tr[s], NULL, tcp_recv, &rj[s]);
  }
  for (int s = 0; s < streams; s++) {
    pthread_join(ts[s], NULL);
    pthread_join(tr[s], NULL);
    if (!rj[s].ok) *ok = false;
  }
  double secs = now() - t0;
  for (int s = 0; s < streams; s++) {
    close(cfd[s]);
    close(sfd[s]);
  }
  close(lfd);
  return secs;
}

/* ---- pyarrow.flight (companion process) ---------------------------------------------- */

typedef struct companion {
  pid_t pid;
  int port; /* server children */
  FILE *in;  /* our commands */
  FILE *out; /* its answers */
} companion;

/* <dir of this executable>/../<rel> into out. */
static bool beside_exe(const char *rel, char *out, size_t size) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = '\0';
  snprintf(out, size, "%s/../%s", exe, rel);
  return true;
}

/* Spawns argv with pipes to its stdin and from its stdout. */
static bool spawn_piped(char *const argv[], companion *c) {
  /* Close-on-exec: a later child must not inherit an earlier one's pipes
   * (it would keep that one's stdin open after we close ours). */
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC)) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
  posix_spawn_file_actions_addclose(&fa, to[1]);
  posix_spawn_file_actions_addclose(&fa, from[0]);
  int rc = posix_spawn(&c->pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(to[0]);
  close(from[1]);
  if (rc != 0) {
    close(to[1]);
    close(from[0]);
    return false;
  }
  c->in = fdopen(to[1], "w");
  c->out = fdopen(from[0], "r");
  return c->in && c->out;
}

static void companion_close(companion *c) {
  if (!c->pid) return;
  if (c->in) fclose(c->in);
  fclose(c->out);
  int st;
  waitpid(c->pid, &st, 0);
  c->pid = 0;
}

/* Sends a command line; returns the first answer line (or NULL). */
static const char *companion_ask(companion *c, const char *cmd) {
  static char line[512];
  fprintf(c->in, "%s\n", cmd);
  fflush(c->in);
  while (fgets(line, sizeof line, c->out)) {
    if ((strncmp(line, "ok", 2) == 0 && (line[2] == ' ' || line[2] == '\n')) ||
        strncmp(line, "error", 5) == 0)
      return line;
    fputs(line, stdout); /* anything else it says */
  }
  return NULL;
}

static bool start_pyarrow(companion *c) {
  char py[4200], script[4200];
  const char *env_py = getenv("FSH_PYTHON");
  if (env_py)
    snprintf(py, sizeof py, "%s", env_py);
  else if (!beside_exe(".venv/bin/python", py, sizeof py))
    return false;
  if (!beside_exe("bench/flight/bench_flight_pyarrow.py", script, sizeof script)) return false;
  if (access(py, X_OK) != 0 || access(script, R_OK) != 0) {
    printf("  (pyarrow comparison skipped: no %s or %s)\n", py, script);
    return false;
  }
  char rows_s[32], lrows_s[32], cols_s[16];
  snprintf(rows_s, sizeof rows_s, "%d", SMALL_ROWS);
  snprintf(lrows_s, sizeof lrows_s, "%d", LARGE_ROWS);
  snprintf(cols_s, sizeof cols_s, "%d", N_COLS);
  char *argv[] = {py, script, "--serve-commands", "--small-rows", rows_s,
                  "--large-rows", lrows_s, "--cols", cols_s, NULL};
  fflush(stdout);
  if (!spawn_piped(argv, c)) return false;
  const char *a = companion_ask(c, "hello");
  if (!a || strncmp(a, "ok", 2) != 0) {
    companion_close(c);
    return false;
  }
  return true;
}

/* ---- statistics ---------------------------------------------------------------------- */

typedef struct stats {
  double min, med, max;
} stats;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* GB/s from seconds. */
static stats summarize(const double *secs, int runs, double bytes) {
  double s[MAX_RUNS];
  memcpy(s, secs, sizeof *s * (size_t)runs);
  qsort(s, (size_t)runs, sizeof *s, cmp_double);
  double med = runs % 2 ? s[runs / 2] : (s[runs / 2 - 1] + s[runs / 2]) / 2;
  return (stats){bytes / s[runs - 1] / 1e9, bytes / med / 1e9, bytes / s[0] / 1e9};
}

/* Median of per-run CPU seconds, per GB of `bytes`. */
static double median_per_gb(const double *cpu, int runs, double bytes) {
  double c[MAX_RUNS];
  memcpy(c, cpu, sizeof *c * (size_t)runs);
  qsort(c, (size_t)runs, sizeof *c, cmp_double);
  double med = runs % 2 ? c[runs / 2] : (c[runs / 2 - 1] + c[runs / 2]) / 2;
  return med / (bytes / 1e9);
}

static bool spawn_server(const char *mode, companion *c);

/* ---- the memory check: a server in a child process ------------------------------------ */

#define RSS_ROWS SMALL_ROWS

/* Every message is a new batch in new buffers: a server that buffered
 * messages would show it in its RSS. */
typedef struct fresh_source {
  fsh_flight_source base;
  fsh_ipc_encoder *enc;
  int64_t left, next;
  bool schema_sent;
} fresh_source;

static int fresh_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                      bool *done, fsh_error *err) {
  fresh_source *f = (fresh_source *)s;
  *done = false;
  if (!f->schema_sent) {
    f->schema_sent = true;
    return fsh_ipc_encode_schema(f->enc, out, err);
  }
  if (f->left == 0) {
    *done = true;
    return 0;
  }
  f->left--;
  fsh_batch *b = make_batch(data.schema, RSS_ROWS, f->next++ * RSS_ROWS);
  encode_one(f->enc, b, out);
  fsh_batch_unref(b);
  return 0;
}

static void fresh_release(fsh_flight_source *s) {
  fresh_source *f = (fresh_source *)s;
  fsh_ipc_encoder_free(f->enc);
  fsh_free(f);
}

static int rss_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                      fsh_flight_source **out, fsh_error *err) {
  fresh_source *f = fsh_calloc(1, sizeof *f);
  bool large;
  if (!f) return ENOMEM;
  if (!parse_ticket(ticket->data, ticket->size, &large, &f->left, NULL) ||
      fsh_ipc_encoder_new(data.schema, NULL, &f->enc, err)) {
    fsh_free(f);
    return fsh_error_set(err, EINVAL, "bad ticket");
  }
  f->base = (fsh_flight_source){.next = fresh_next, .release = fresh_release, .ctx = f};
  *out = &f->base;
  return 0;
}

/* --rss-server: prints its port, serves until stdin closes. */
static int rss_server_main(void) {
  fsh_error err;
  data.schema = make_schema();
  fsh_flight_server_options so = {.listen = "127.0.0.1:0"};
  fsh_flight_handlers h = {.do_get = rss_do_get};
  fsh_flight_server *server = NULL;
  if (fsh_flight_server_start(&so, &h, &server, &err)) die("rss server", &err);
  printf("port %d\n", fsh_flight_server_port(server));
  fflush(stdout);
  char buf[64];
  while (fgets(buf, sizeof buf, stdin)) {
  }
  fsh_flight_server_stop(server, 1000);
  fsh_schema_unref(data.schema);
  return 0;
}

/* kB of "<key>:" in /proc/<pid>/status, or -1. */
static long proc_status_kb(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  size_t k = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      v = atol(line + k + 1);
      break;
    }
  fclose(f);
  return v;
}

typedef struct sampler {
  pid_t pid;
  _Atomic bool stop;
  long peak_kb;
  int samples;
} sampler;

static void *sample_rss(void *arg) {
  sampler *s = arg;
  while (!s->stop) {
    long kb = proc_status_kb(s->pid, "VmRSS");
    if (kb > s->peak_kb) s->peak_kb = kb;
    s->samples++;
    usleep(5000);
  }
  return NULL;
}

typedef struct rss_result {
  bool ran, ok;
  double idle_mib, peak_mib, hwm_mib, secs, gib;
} rss_result;

static rss_result rss_check(double gib, int sleep_us) {
  rss_result res = {0};
  companion child = {0};
  if (!spawn_server("--rss-server", &child)) return res;
  int port = child.port;
  fsh_error err;
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", port);
  fsh_flight_client_options co = {.uri = uri};
  fsh_flight_client *client = NULL;
  if (fsh_flight_client_open(&co, &client, &err)) die("rss client", &err);
  usleep(100000);
  res.idle_mib = (double)proc_status_kb(child.pid, "VmRSS") / 1024;
  int64_t msgs = (int64_t)(gib * 1024 * 1024 * 1024 / ((double)RSS_ROWS * N_COLS * 8));
  sampler smp = {.pid = child.pid};
  pthread_t th;
  pthread_create(&th, NULL, sample_rss, &smp);
  char t[32];
  int tn = snprintf(t, sizeof t, "S%lld", (long long)msgs);
  fsh_bytes ticket = {(uint8_t *)t, tn};
  fsh_flight_reader *r = NULL;
  double t0 = now();
  if (fsh_flight_do_get(client, &ticket, &r, &err)) die("rss DoGet", &err);
  int64_t got = 0;
  double bytes = 0;
  for (;;) {
    fsh_flight_message m;
    bool done = false;
    if (fsh_flight_reader_next_raw(r, &m, &done, &err)) die("rss DoGet next", &err);
    if (done) break;
    if (m.body) {
      got++;
      bytes += (double)m.body->size;
    }
    fsh_flight_message_reset(&m);
    usleep((useconds_t)sleep_us); /* the slow client */
  }
  res.secs = now() - t0;
  fsh_flight_reader_free(r);
  smp.stop = true;
  pthread_join(th, NULL);
  res.hwm_mib = (double)proc_status_kb(child.pid, "VmHWM") / 1024;
  res.peak_mib = (double)smp.peak_kb / 1024;
  res.gib = bytes / (1024.0 * 1024 * 1024);
  fsh_flight_client_close(client);
  companion_close(&child);
  res.ran = true;
  res.ok = got == msgs;
  return res;
}

/* --server: our bench server over the dataset; prints its port, serves
 * until stdin closes, then prints how many DoPut streams were wrong. */
static int server_main(void) {
  fsh_error err;
  make_dataset();
  fsh_flight_server_options so = {.listen = "127.0.0.1:0", .n_threads = 0};
  fsh_flight_handlers h = {.do_get = bench_do_get, .do_put = bench_do_put,
                           .do_action = bench_do_action};
  fsh_flight_server *server = NULL;
  if (fsh_flight_server_start(&so, &h, &server, &err)) die("server", &err);
  printf("port %d\n", fsh_flight_server_port(server));
  fflush(stdout);
  char buf[64];
  while (fgets(buf, sizeof buf, stdin)) {
  }
  fsh_flight_server_stop(server, 1000);
  printf("put_failures %d\n", (int)put_failures);
  fflush(stdout);
  free_dataset();
  return 0;
}

/* This executable with `mode` (--server or --rss-server) as a child
 * process; c->port is where it listens. */
static bool spawn_server(const char *mode, companion *c) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = '\0';
  char *argv[] = {exe, (char *)mode, NULL};
  fflush(stdout);
  if (!spawn_piped(argv, c)) return false;
  char line[128];
  if (!fgets(line, sizeof line, c->out) || sscanf(line, "port %d", &c->port) != 1) {
    companion_close(c);
    return false;
  }
  return true;
}

static bool start_server_child(companion *c) { return spawn_server("--server", c); }

/* ---- small calls: one DoAction, and a client opened for it ------------------------------ */

/* One DoAction "ping" on c; dies unless the answer is "pong". */
static void ping(fsh_flight_client *c) {
  fsh_error err;
  fsh_flight_action a = {.type = (char *)"ping"};
  fsh_flight_result_list res = {0};
  if (fsh_flight_do_action(c, &a, &res, &err)) die("DoAction ping", &err);
  if (res.n != 1 || res.items[0].size != 4 || memcmp(res.items[0].data, "pong", 4) != 0)
    die("DoAction ping: not pong", NULL);
  fsh_flight_result_list_reset(&res);
}

/* One row of the small-call table: per call, over `runs` rounds, the
 * wall microseconds (sorted: min, median, max) and the medians of the
 * calling thread's CPU microseconds and of this whole process's (the
 * client's; gRPC's own threads included, the server is another process). */
typedef struct call_row {
  double wall[MAX_RUNS];
  double thread_cpu, proc_cpu;
} call_row;

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* `runs` rounds of n calls: a DoAction on an open client (reuse), or a
 * client opened, pinged once and closed (open_close). Another client stays
 * open meanwhile (`keep`), as in a process that talks to more than one
 * peer, and as pyarrow's side (its bulk clients stay open). Returns the
 * median wall microseconds per call. */
static double small_call_us(const char *uri, bool open_close, int n, int runs,
                            fsh_flight_client *keep, call_row *row) {
  double tcpu[MAX_RUNS], pcpu[MAX_RUNS];
  fsh_flight_client_options co = {.uri = uri};
  fsh_error err;
  for (int r = 0; r < runs; r++) {
    double t0 = now(), c0 = thread_cpu_seconds(), p0 = cpu_seconds();
    for (int i = 0; i < n; i++) {
      fsh_flight_client *c = keep;
      if (open_close && fsh_flight_client_open(&co, &c, &err)) die("client", &err);
      ping(c);
      if (open_close) fsh_flight_client_close(c);
    }
    row->wall[r] = (now() - t0) / n * 1e6;
    tcpu[r] = (thread_cpu_seconds() - c0) / n * 1e6;
    pcpu[r] = (cpu_seconds() - p0) / n * 1e6;
  }
  row->thread_cpu = median_of(tcpu, runs);
  row->proc_cpu = median_of(pcpu, runs);
  return median_of(row->wall, runs);
}

/* ---- main -------------------------------------------------------------------------------- */

typedef struct row {
  bool put;
  int streams;
  bool large;
  double ours[MAX_RUNS], py[MAX_RUNS];
  /* user + system seconds of the process (server and client) per run */
  double cpu[MAX_RUNS], py_cpu[MAX_RUNS];
  /* page faults of both processes per run (py_faults < 0: not reported) */
  double faults[MAX_RUNS], py_faults[MAX_RUNS];
  stats s_ours, s_py;
} row;

int main(int argc, char **argv) {
  double mib = 1024;
  int runs = 5;
  bool with_pyarrow = true, with_rss = true;
  double rss_gib = 4;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--rss-server") == 0) return rss_server_main();
    if (strcmp(argv[i], "--server") == 0) return server_main();
    if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
      mib = atof(argv[++i]);
    else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rss-gib") == 0 && i + 1 < argc)
      rss_gib = atof(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--no-pyarrow") == 0)
      with_pyarrow = false;
    else if (strcmp(argv[i], "--no-rss") == 0)
      with_rss = false;
    else {
      fprintf(stderr, "usage: bench_flight [--mib N] [--runs R] [--no-pyarrow] [--no-rss] "
                      "[--rss-gib G] [--only get|put|get4S|...|calls]\n");
      return 2;
    }
  }
  if (runs < 1 || runs > MAX_RUNS) runs = 5;
  signal(SIGPIPE, SIG_IGN);

  /* The companion first: it builds its data while we build ours. */
  companion py = {0};
  if (with_pyarrow) with_pyarrow = start_pyarrow(&py);

  make_dataset();
  /* Per run: --mib MiB of Arrow body bytes, in whole batches a multiple
   * of the stream count. */
  int64_t n_small = (int64_t)(mib / 4), n_large = (int64_t)(mib / 64);
  n_small = n_small / MAX_STREAMS * MAX_STREAMS;
  n_large = n_large / MAX_STREAMS * MAX_STREAMS;
  if (n_small < MAX_STREAMS) n_small = MAX_STREAMS;
  if (n_large < MAX_STREAMS) n_large = MAX_STREAMS;
  double bytes_small = (double)n_small * data.small_bytes;
  double bytes_large = (double)n_large * data.large_bytes;

  fsh_error err;
  companion server = {0};
  if (!start_server_child(&server)) die("starting the server process", NULL);
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", server.port);
  fsh_flight_client *clients[MAX_STREAMS];
  fsh_flight_client_options co = {.uri = uri};
  for (int s = 0; s < MAX_STREAMS; s++)
    if (fsh_flight_client_open(&co, &clients[s], &err)) die("client", &err);

  printf("bench_flight: loopback, 8 int64 columns, uncompressed; batches of 64Ki rows "
         "(%.2f MB) and 1Mi rows (%.1f MB);\n  %.0f MB per run (%lld / %lld batches), %d runs "
         "interleaved, GB/s min / median / max\n",
         data.small_bytes / 1e6, data.large_bytes / 1e6, bytes_small / 1e6,
         (long long)n_small, (long long)n_large, runs);

  /* Untimed checks: every batch compared, both ways, both sizes, 1 and 4 streams. */
  bool verified = true;
  for (int k = 0; k < (getenv("FSH_BENCH_NO_TCP") ? 0 : 8); k++) {
    bool put = k & 1, large = k & 2;
    int streams = k & 4 ? MAX_STREAMS : 1;
    (void)flight_run(clients, put, streams, large, large ? MAX_STREAMS : 32, true, &verified);
  }

  row rows[8];
  int n_rows = 0;
  for (int put = 0; put < 2; put++) {
    for (int st = 0; st < 2; st++)
      for (int large = 0; large < 2; large++) {
        /* --only get, put, or one row: get1S, put4L, ... */
        char code[8];
        snprintf(code, sizeof code, "%s%d%c", put ? "put" : "get", st ? MAX_STREAMS : 1,
                 large ? 'L' : 'S');
        if (only && strncmp(code, only, strlen(only)) != 0) continue;
        rows[n_rows++] = (row){.put = put, .streams = st ? MAX_STREAMS : 1, .large = large};
      }
  }
  double tcp[2][MAX_RUNS];
  bool py_ok = with_pyarrow, tcp_ok = true, ok = true;
  bool with_tcp = !getenv("FSH_BENCH_NO_TCP"); /* profiling one row */
  bool verbose = getenv("FSH_BENCH_VERBOSE") != NULL;
  double tcp_cpu[2][MAX_RUNS];
  for (int r = 0; r < runs; r++) {
    for (int k = 0; k < 2; k++) {
      double c0 = cpu_seconds();
      tcp[k][r] = with_tcp ? tcp_run(k ? MAX_STREAMS : 1, bytes_small, &tcp_ok) : 1;
      tcp_cpu[k][r] = cpu_seconds() - c0;
    }
    for (int i = 0; i < n_rows; i++) {
      row *w = &rows[i];
      int64_t n = w->large ? n_large : n_small;
      double cpu0 = cpu_seconds() + cli_proc_cpu_seconds(server.pid);
      double flt0 = fault_count() + cli_proc_fault_count(server.pid);
      w->ours[r] = flight_run(clients, w->put, w->streams, w->large, n, false, &ok);
      w->cpu[r] = cpu_seconds() + cli_proc_cpu_seconds(server.pid) - cpu0;
      w->faults[r] = fault_count() + cli_proc_fault_count(server.pid) - flt0;
      if (verbose)
        fprintf(stderr, "run %d %s%d%c: %.2f GB/s, %.3f cpu-s/GB\n", r, w->put ? "put" : "get",
                w->streams, w->large ? 'L' : 'S',
                (w->large ? bytes_large : bytes_small) / w->ours[r] / 1e9,
                w->cpu[r] / ((w->large ? bytes_large : bytes_small) / 1e9));
      if (py_ok) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "%s %d %s %lld", w->put ? "put" : "get", w->streams,
                 w->large ? "L" : "S", (long long)n);
        const char *a = companion_ask(&py, cmd);
        int got = a ? sscanf(a, "ok %lf %lf %lf", &w->py[r], &w->py_cpu[r], &w->py_faults[r]) : 0;
        if (got < 2) {
          printf("  pyarrow companion failed: %s", a ? a : "(no answer)\n");
          py_ok = false;
        } else if (got == 2) {
          w->py_faults[r] = -1;
        }
      }
    }
  }
  verified = verified && ok && tcp_ok;

  stats tcp1 = summarize(tcp[0], runs, bytes_small);
  stats tcpN = summarize(tcp[1], runs, bytes_small);
  printf("\n  %-22s %-19s %-19s %-19s %8s %8s\n", "", "raw TCP", "ours", "pyarrow.flight",
         "ours/TCP", "ours/pa");
  double min_vs_py = 1e9, doget1_vs_tcp = 0, doget1_large_vs_tcp = 0;
  char res_rows[1024] = "";
  for (int i = 0; i < n_rows; i++) {
    row *w = &rows[i];
    double bytes = w->large ? bytes_large : bytes_small;
    w->s_ours = summarize(w->ours, runs, bytes);
    stats t = w->streams == 1 ? tcp1 : tcpN;
    char name[64];
    snprintf(name, sizeof name, "%s %d stream%s %s", w->put ? "DoPut" : "DoGet", w->streams,
             w->streams > 1 ? "s" : " ", w->large ? "64 MiB" : " 4 MiB");
    printf("  %-22s %5.2f %5.2f %5.2f   %5.2f %5.2f %5.2f   ", name, t.min, t.med, t.max,
           w->s_ours.min, w->s_ours.med, w->s_ours.max);
    double vs_tcp = w->s_ours.med / t.med;
    if (py_ok) {
      w->s_py = summarize(w->py, runs, bytes);
      double vs_py = w->s_ours.med / w->s_py.med;
      if (vs_py < min_vs_py) min_vs_py = vs_py;
      printf("%5.2f %5.2f %5.2f   %7.2fx %7.2fx\n", w->s_py.min, w->s_py.med, w->s_py.max,
             vs_tcp, vs_py);
      char one[96];
      snprintf(one, sizeof one, " %s%d%s_vs_pyarrow=%.2f", w->put ? "doput" : "doget",
               w->streams, w->large ? "_64m" : "_4m", vs_py);
      strncat(res_rows, one, sizeof res_rows - strlen(res_rows) - 1);
    } else {
      printf("%19s   %7.2fx %8s\n", "-", vs_tcp, "-");
    }
    if (!w->put && w->streams == 1) {
      if (w->large)
        doget1_large_vs_tcp = vs_tcp;
      else
        doget1_vs_tcp = vs_tcp;
    }
  }
  /* CPU cost: less sensitive than wall time to other load on the machine. */
  printf("\n  CPU seconds per GB moved (user + system, both ends; median): raw TCP 1 / %d "
         "connections %.3f / %.3f\n",
         MAX_STREAMS, median_per_gb(tcp_cpu[0], runs, bytes_small),
         median_per_gb(tcp_cpu[1], runs, bytes_small));
  for (int i = 0; i < n_rows; i++) {
    row *w = &rows[i];
    double bytes = w->large ? bytes_large : bytes_small;
    double o = median_per_gb(w->cpu, runs, bytes);
    printf("  %s %d stream%s %s   ours %.3f", w->put ? "DoPut" : "DoGet", w->streams,
           w->streams > 1 ? "s" : " ", w->large ? "64 MiB" : " 4 MiB", o);
    if (py_ok) {
      double p = median_per_gb(w->py_cpu, runs, bytes);
      printf("   pyarrow.flight %.3f   ours/pa %.2fx", p, o / p);
    }
    printf("\n");
  }
  /* Page faults: first-touched memory on the data path (a count, which
   * other load does not move; bench/flight/OFFCPU.md, section 6). */
  printf("\n  page faults per GB moved (minor + major, both ends; median)\n");
  for (int i = 0; i < n_rows; i++) {
    row *w = &rows[i];
    double bytes = w->large ? bytes_large : bytes_small;
    printf("  %s %d stream%s %s   ours %7.0f", w->put ? "DoPut" : "DoGet", w->streams,
           w->streams > 1 ? "s" : " ", w->large ? "64 MiB" : " 4 MiB",
           median_per_gb(w->faults, runs, bytes));
    if (py_ok && w->py_faults[0] >= 0)
      printf("   pyarrow.flight %7.0f", median_per_gb(w->py_faults, runs, bytes));
    printf("\n");
  }

  /* Small calls: latency, not bytes. */
  double call_us[2] = {0, 0}, py_call_us[2] = {0, 0};
  call_row call_rows[2];
  bool with_calls = !only || strcmp(only, "calls") == 0;
  if (with_calls) {
    ping(clients[0]); /* connected, warm */
    printf("\n  small calls, microseconds per call (median of %d rounds of %d; ours also "
           "min-max, and the client's CPU: calling thread / process): ours / pyarrow.flight\n",
           runs, SMALL_CALLS);
    for (int oc = 0; oc < 2; oc++) {
      call_us[oc] = small_call_us(uri, oc, SMALL_CALLS, runs, clients[0], &call_rows[oc]);
      printf("  %-44s %7.1f (%.1f-%.1f; cpu %.1f / %.1f)",
             oc ? "connect + DoAction + close (one new client)" : "DoAction on an open client",
             call_us[oc], call_rows[oc].wall[0], call_rows[oc].wall[runs - 1],
             call_rows[oc].thread_cpu, call_rows[oc].proc_cpu);
      if (py_ok) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "ping %d %d %d", oc, SMALL_CALLS, runs);
        const char *a = companion_ask(&py, cmd);
        if (!a || sscanf(a, "ok %lf", &py_call_us[oc]) != 1) {
          printf("  pyarrow companion failed: %s", a ? a : "(no answer)\n");
          py_ok = false;
        } else {
          printf(" / %7.1f   ours/pa %.2fx", py_call_us[oc], call_us[oc] / py_call_us[oc]);
        }
      }
      printf("\n");
    }
  }

  for (int s = 0; s < MAX_STREAMS; s++) fsh_flight_client_close(clients[s]);
  if (py.pid) companion_close(&py);
  /* The server process says how many DoPuts received wrong batches. */
  fclose(server.in);
  server.in = NULL;
  int failures = -1;
  char line[128];
  while (fgets(line, sizeof line, server.out))
    if (sscanf(line, "put_failures %d", &failures) == 1) break;
  companion_close(&server);
  if (failures != 0) {
    printf("  the server process reported %d bad DoPut streams\n", failures);
    verified = false;
  }

  rss_result rss = {0};
  if (with_rss) {
    rss = rss_check(rss_gib, 4000);
    if (rss.ran)
      printf("\n  memory: our server serving %.2f GiB of fresh 4 MiB batches to a slow client "
             "(sleeps 4 ms a message, %.2f GB/s): VmRSS idle %.1f MiB, sampled peak %.1f MiB, "
             "VmHWM %.1f MiB (limit 256)\n",
             rss.gib, rss.gib * 1.073741824 / rss.secs, rss.idle_mib, rss.peak_mib, rss.hwm_mib);
    else
      printf("\n  memory check could not run\n");
    if (!rss.ran || !rss.ok) verified = false;
  }
  double rss_peak = rss.hwm_mib > rss.peak_mib ? rss.hwm_mib : rss.peak_mib;

  printf("result: name=bench_flight verified=%s mib_per_run=%.0f runs=%d tcp1_gbps=%.2f "
         "doget1_vs_tcp=%.2f doget1_64m_vs_tcp=%.2f",
         verified ? "yes" : "no", mib, runs, tcp1.med, doget1_vs_tcp, doget1_large_vs_tcp);
  if (py_ok && n_rows > 0) printf("%s min_vs_pyarrow=%.2f", res_rows, min_vs_py);
  if (with_calls) {
    printf(" call_us=%.1f open_call_close_us=%.1f call_thread_cpu_us=%.1f call_cpu_us=%.1f "
           "open_call_close_cpu_us=%.1f",
           call_us[0], call_us[1], call_rows[0].thread_cpu, call_rows[0].proc_cpu,
           call_rows[1].proc_cpu);
    if (py_ok)
      printf(" pyarrow_call_us=%.1f pyarrow_open_call_close_us=%.1f", py_call_us[0],
             py_call_us[1]);
  }
  if (rss.ran) printf(" rss_peak_mib=%.1f", rss_peak);
  /* The targets: single-stream DoGet >= 0.7x raw TCP, every row
   * >= 1.0x pyarrow.flight, server RSS < 256 MiB. */
  bool met = doget1_vs_tcp >= 0.7 && (!py_ok || min_vs_py >= 1.0) && rss.ran && rss_peak < 256;
  printf(" targets_met=%s\n", met ? "yes" : "no");
  free_dataset();
  return verified ? 0 : 1;
}
