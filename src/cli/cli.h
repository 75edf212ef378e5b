/* cli.h -- what the `flightshuffle` subcommands share: their entry points
 * and loading a whole table from an IPC or integration-JSON file. */
#ifndef FSH_CLI_H
#define FSH_CLI_H

#include <signal.h>
#include <sys/types.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/ipc.h>
#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>

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
/* `job shuffle|status` (cmd_job.c): jobs on a running driver. */
int cmd_job(int argc, char **argv);
/* `explain` and `run` (cmd_plan.c): a plan's stages; a plan run in process. */
int cmd_explain(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* `bench ops` (cmd_bench_ops.c): plans (sort, join + group-by) on each backend. */
int cmd_bench_ops(int argc, char **argv);

/* The backends a plan runs on in this process (cmd_plan.c): "memory", "fs"
 * (a directory; a temporary one when fs_dir is NULL) or "flight" (n_workers
 * in-process workers on 127.0.0.1:0, each with its own store -- spill
 * directory <spill_dir>/w<i>, a temporary one when spill_dir is NULL -- and
 * one flight backend per worker: fsh_plan_run_options.backends). */
typedef struct cli_plan_backends {
  const char *name;
  int n;                          /* backends (workers for flight) */
  fsh_shuffle_backend **backends; /* [n] */
  fsh_shuffle_worker **workers;   /* [n] for flight */
  char tmpdir[64];                /* made here, removed on close */
  char **dirs;                    /* [n] spill dirs made here (flight) */
} cli_plan_backends;
int cli_plan_backends_open(const char *name, int n_workers, const char *fs_dir,
                           const char *spill_dir, int64_t memory_limit, cli_plan_backends *out,
                           fsh_error *err);
void cli_plan_backends_close(cli_plan_backends *b);

/* "123", "64K", "512M", "2G" (powers of 1024) -> bytes; false if malformed. */
bool cli_parse_bytes(const char *s, int64_t *out);
/* A decimal integer in [lo, hi] -> *out; false if malformed or out of range. */
bool cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* For servers that stop on SIGINT/SIGTERM through sigwait(sigs): blocks
 * both (call before any thread exists, so every thread inherits the mask)
 * and ignores SIGPIPE. */
void cli_block_stop_signals(sigset_t *sigs);

/* ---- worker processes (procs.c) ----------------------------------------- */

/* A child process: this executable, started by cli_child_start. */
typedef struct cli_child {
  pid_t pid;    /* 0 if not started */
  bool reaped;  /* waited for (by cli_child_reap or cli_children_stop) */
  bool killed;  /* cli_children_stop had to SIGKILL it */
  int status;   /* waitpid status, once reaped */
  char uri[512]; /* from its "listening on URI" line */
} cli_child;

typedef struct cli_child_options {
  const char *who;        /* message prefix, e.g. "local" */
  const char *stderr_log; /* the child's stderr (created/truncated); NULL: ours */
  /* the child's signal mask; NULL: the caller's */
  const sigset_t *child_mask;
  double timeout_s;       /* for the "listening on" line */
  /* polled while waiting for the line (every <= 100 ms); true gives up */
  bool (*interrupted)(void *arg);
  void *arg;
} cli_child_options;

/* cli_child_start: no "listening on" line (timeout, EOF, interrupted);
 * nothing printed, out->pid set. */
#define CLI_CHILD_NO_URI (-1)

/* Starts /proc/self/exe with argv (NULL-terminated): fork with every signal
 * blocked, out->pid recorded before they are unblocked; in the child
 * PR_SET_PDEATHSIG(SIGTERM), stdout a pipe, stderr o->stderr_log, SIGINT
 * and SIGTERM to SIG_DFL, mask o->child_mask. Then reads the child's first
 * stdout line, "listening on URI", into out->uri. 0; 1 after a message
 * ("<who>: pipe: ..."); or CLI_CHILD_NO_URI. */
int cli_child_start(const char *const *argv, const cli_child_options *o, cli_child *out);

/* Reaps c without waiting if it has ended; true if it did just now. */
bool cli_child_reap(cli_child *c);

/* Stops the n children not yet reaped: SIGTERM to each, waits up to
 * grace_s (in all), then SIGKILL; reaps each and calls ended(c, i, arg)
 * (may be NULL) right after, in order. */
void cli_children_stop(cli_child *c, int n, double grace_s,
                       void (*ended)(const cli_child *c, int i, void *arg), void *arg);

/* ---- a local cluster (cmd_local.c) --------------------------------------- */

/* A driver in this process and n worker processes (`flightshuffle worker
 * --driver URI`, this executable) on 127.0.0.1: what `local` runs, and
 * `run PLAN --workers N`. SIGINT and SIGTERM are blocked in every thread
 * (cli_local_start blocks them: call it before any thread exists) and
 * taken with cli_local_signal. */
#define LOCAL_MAX_WORKERS 64

typedef struct cli_local {
  int n;
  cli_child proc[LOCAL_MAX_WORKERS]; /* the workers */
  char spill[LOCAL_MAX_WORKERS][4200];
  char base[4096]; /* parent of the spill directories */
  char fs_dir[4200]; /* the workers' shared --fs-dir (base/fs), or "" */
  bool base_is_temp;
  bool quiet;      /* the workers' stderr to <spill>.log, removed at the end */
  fsh_sched_driver *driver;
  sigset_t sigs; /* SIGINT, SIGTERM: blocked, taken with sigtimedwait */
  int signal;    /* the one received, or 0 */
} cli_local;

typedef struct cli_local_options {
  int n_workers;
  const char *spill_dir;   /* worker i spills into DIR/w<i>; NULL: a temp directory */
  int64_t memory_limit;
  const char *auth_token;
  long long keepalive_ms;  /* 0: default */
  int64_t heartbeat_timeout_ms; /* 0: the driver's default */
  bool log;                /* the driver's log on stderr */
  bool quiet;              /* the workers' stderr into log files (removed) */
  bool with_fs_dir;        /* the workers share base/fs as --fs-dir */
  int64_t operator_memory; /* > 0: the workers' --operator-memory */
  bool no_direct_reads;    /* the workers' --direct-reads off */
  const char *pool_idle_ms, *builders_idle_ms; /* the workers' --pool-idle-ms and
                                                  --builders-idle-ms ("never" or ms,
                                                  checked), or NULL: their default */
  const char *images;      /* the workers' --images (checked), or NULL: their default */
} cli_local_options;

/* Starts the cluster into *c (large: keep it static) and waits until every
 * worker registered (30 s). 0; else the cluster is stopped already and the
 * status returned (130: interrupted). */
int cli_local_start(const cli_local_options *o, cli_local *c);
/* Stops every worker (SIGTERM, SIGKILL after 10 s), the driver; removes
 * the spill directories (and the fs directory). Safe on a partly started
 * cluster. */
void cli_local_stop(cli_local *c);
/* Takes a pending SIGINT/SIGTERM, waiting up to ms; true if one came (then
 * and later: c->signal). */
bool cli_local_signal(cli_local *c, int ms);
/* Reaps the workers that ended on their own, reporting them on stderr. */
void cli_local_reap(cli_local *c);

/* One plan job on a started local cluster (cmd_plan.c; what `run --workers`
 * does, and `bench ops`): submits plan (fsh_plan_job_plan of p, not taken),
 * waits for it (progress lines on stdout when progress; a SIGINT/SIGTERM
 * ends the wait: 130, c->signal set), then reads its result into *res
 * through the workers' Flight servers (fs: the cluster's fs directory) and
 * releases the result shuffle. *s: the job's final status when it was
 * taken (also on failure; the caller resets it), *secs: submit to the
 * job's end. 0; else an errno code + err ("the job failed: ...") and *res
 * empty. With sink set the result streams into it instead
 * (fsh_plan_job_result_stream): *res holds only its rows. */
int cli_plan_cluster_job(cli_local *c, const fsh_plan *p, const fsh_buffer *plan, bool fs,
                         bool progress, fsh_plan_sink sink, void *sink_arg,
                         fsh_sched_job_status *s, fsh_plan_result *res, double *secs,
                         fsh_error *err);

/* Prints "flightshuffle: <message>" to stderr; returns status. */
int cli_fail(int status, const char *fmt, ...) FSH_PRINTF(2, 3);

#endif
