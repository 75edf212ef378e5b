/* main.c -- the `flightshuffle` binary: one executable, subcommands. */
#include "cli/cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f,
          "usage: flightshuffle COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  ipc cat FILE                   schema and per-batch row counts\n"
          "  ipc validate FILE              exit 0 if FILE is a valid IPC file or stream\n"
          "  ipc to-json FILE               Arrow integration JSON on stdout\n"
          "  ipc from-json JSON OUT [--format stream|file] [--compression none|lz4|zstd]\n"
          "  ipc equals A B                 exit 0 if A and B hold the same schema and data\n"
          "  demo [--out DIR] [--rows N]    write and re-read a generated table with\n"
          "                                 every format and compression\n"
          "  flight serve --listen HOST:PORT [--auth-token T [--user U --password P]]\n"
          "               [--tls-cert C --tls-key K [--tls-client-ca CA]] [--threads N] FILE...\n"
          "  flight list URI                the flights a server offers\n"
          "  flight get URI TICKET [-o OUT] DoGet one ticket (IPC stream to OUT or stdout)\n"
          "  flight put URI PATH FILE       DoPut an IPC file under a descriptor path\n"
          "  flight info|poll|schema|actions|action|exchange|handshake ...  (flight -h)\n"
          "  worker --listen HOST:PORT [--spill-dir DIR]... [--memory-limit BYTES]\n"
          "         [--auth-token T] [--fs-dir DIR] [--driver URI]\n"
          "                                 a shuffle worker: map-output store + Flight server\n"
          "  driver --listen HOST:PORT [--heartbeat-timeout-ms N] [--auth-token T]\n"
          "                                 the cluster's driver: workers, jobs\n"
          "  local --workers N [--spill-dir DIR] [--memory-limit BYTES] [--run-seconds S]\n"
          "                                 a driver and N workers on loopback until Ctrl-C\n"
          "  bench shuffle --workers N --maps M --reduces R --bytes S --backend flight|memory|fs\n"
          "         [...]                   a verified, timed shuffle on a local cluster\n"
          "  bench ops [--sort-rows N] [--left-rows N] [--right-rows N] [--runs K] ...\n"
          "                                 plans (sort, join + group-by) on memory, fs and\n"
          "                                 flight (in-process workers), ratios, verified\n"
          "  job shuffle --driver URI --maps M --reduces R --rows N [...]\n"
          "  job status --driver URI --job ID\n"
          "                                 run / query a job on a driver (job -h)\n"
          "  explain PLAN.json [--partitions N]  the stages and exchanges of a plan\n"
          "  run PLAN.json [--backend memory|fs|flight] [--flight-workers N] [--partitions N]\n"
          "      [--pre-shuffle-merge auto|on|off]\n"
          "      [--verify]                 runs a plan in this process; --verify compares it\n"
          "                                 with a single-process run without exchanges\n");
}

int cli_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("flightshuffle: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return status;
}

bool cli_parse_bytes(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0) return false;
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, end++;
  else if (*end == 'M' || *end == 'm') shift = 20, end++;
  else if (*end == 'G' || *end == 'g') shift = 30, end++;
  if (*end || v > (INT64_MAX >> shift)) return false;
  *out = (int64_t)v << shift;
  return true;
}

bool cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

void cli_block_stop_signals(sigset_t *sigs) {
  sigemptyset(sigs);
  sigaddset(sigs, SIGINT);
  sigaddset(sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "ipc") == 0) return cmd_ipc(argc - 1, argv + 1);
  if (strcmp(argv[1], "demo") == 0) return cmd_demo(argc - 1, argv + 1);
  if (strcmp(argv[1], "flight") == 0) return cmd_flight(argc - 1, argv + 1);
  if (strcmp(argv[1], "worker") == 0) return cmd_worker(argc - 1, argv + 1);
  if (strcmp(argv[1], "driver") == 0) return cmd_driver(argc - 1, argv + 1);
  if (strcmp(argv[1], "local") == 0) return cmd_local(argc - 1, argv + 1);
  if (strcmp(argv[1], "bench") == 0 && argc > 2 && strcmp(argv[2], "ops") == 0)
    return cmd_bench_ops(argc - 2, argv + 2);
  if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 1, argv + 1);
  if (strcmp(argv[1], "job") == 0) return cmd_job(argc - 1, argv + 1);
  if (strcmp(argv[1], "explain") == 0) return cmd_explain(argc - 1, argv + 1);
  if (strcmp(argv[1], "run") == 0) return cmd_run(argc - 1, argv + 1);
  usage(stderr);
  return cli_fail(2, "unknown command '%s'", argv[1]);
}
