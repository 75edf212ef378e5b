/* cli.h -- what the `flightshuffle` subcommands share: their entry points
 * and loading a whole table from an IPC or integration-JSON file. */
#ifndef FSH_CLI_H
#define FSH_CLI_H

#include <signal.h>

#include <flightshuffle/ipc.h>

/* A whole table in memory: the schema and its batches (references held). */
typedef struct cli_table {
  fsh_schema *schema;
  int64_t n_batches;
  fsh_batch **batches;
} cli_table;

/* Loads path: integration JSON if it ends in .json or .json.gz, otherwise an
 * IPC file or stream (detected). Errors name the file. */
int cli_table_load(const char *path, cli_table *out, fsh_error *err);
void cli_table_reset(cli_table *t);
int64_t cli_table_rows(const cli_table *t);
/* Same schema (metadata included) and same rows, whatever the batching. */
bool cli_tables_equal(const cli_table *a, const cli_table *b, fsh_error *diff);
/* Writes t to out_path (atomically) as IPC file or stream format. */
int cli_table_write(const cli_table *t, const char *out_path, bool file_format,
                    const fsh_ipc_write_options *opts, fsh_error *err);

int cmd_ipc(int argc, char **argv);
int cmd_demo(int argc, char **argv);
/* `flight list|get|put` (cmd_flight.c); `flight serve` (cmd_flight_serve.c). */
int cmd_flight(int argc, char **argv);
int cmd_flight_serve(int argc, char **argv);
/* `worker` (cmd_worker.c): a shuffle worker process. */
int cmd_worker(int argc, char **argv);
/* `driver` (cmd_driver.c): the cluster's driver process. */
int cmd_driver(int argc, char **argv);
/* `local` (cmd_local.c): a driver and N worker processes on loopback. */
int cmd_local(int argc, char **argv);
/* `bench shuffle` (cmd_bench.c): a shuffle on a local cluster of workers. */
int cmd_bench(int argc, char **argv);

/* "123", "64K", "512M", "2G" (powers of 1024) -> bytes; false if malformed. */
bool cli_parse_bytes(const char *s, int64_t *out);

/* For servers that stop on SIGINT/SIGTERM through sigwait(sigs): blocks
 * both (call before any thread exists, so every thread inherits the mask)
 * and ignores SIGPIPE. */
void cli_block_stop_signals(sigset_t *sigs);

/* Prints "flightshuffle: <message>" to stderr; returns status. */
int cli_fail(int status, const char *fmt, ...) FSH_PRINTF(2, 3);

#endif
