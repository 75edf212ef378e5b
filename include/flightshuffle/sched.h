/* sched.h -- the distributed runtime's control plane (first increment): a
 * driver that keeps the membership of a cluster of workers, and the
 * worker-side heartbeat that joins a worker to a driver.
 *
 * The driver is a Flight server. Its DoActions, bodies and results being the
 * protobuf messages of proto/Sched.proto (package flightshuffle.sched):
 *  - "register", body Register{uri}: answers one RegisterReply{worker_id,
 *    heartbeat_interval_ms, replaced}. Ids start at 1 and are never reused
 *    within a driver run. A URI that is already registered (alive or dead)
 *    is treated as a RESTART of that worker: the old entry and its id are
 *    dropped (its heartbeats get NOT_FOUND from then on), a new id is
 *    issued and replaced = true. (One Flight server per host:port, so a
 *    second registration of a URI can only be the same worker again.)
 *  - "heartbeat", body Heartbeat{worker_id, uri}: answers one
 *    HeartbeatReply. NOT_FOUND when the driver does not know that id with
 *    that uri (e.g. the driver restarted) or has declared it dead: the
 *    worker must register again (it gets a new id).
 *  - "workers", empty body: answers one WorkerList -- every worker, alive or
 *    dead, by id, with its state and the age of its last heartbeat.
 * A body that does not decode, or misses a required field, is
 * INVALID_ARGUMENT with a message naming the action and what is wrong; an
 * unknown action is UNIMPLEMENTED. Handlers only take the driver's mutex
 * (never the network). A checker thread of the driver's own marks alive
 * workers dead once not heard from for heartbeat_timeout_ms.
 *
 * The heartbeat (fsh_sched_heartbeat_*) runs on a thread of its own in the
 * worker process: it registers, then heartbeats every
 * heartbeat_interval_ms (the driver's timeout / 3), registering again when
 * the driver answers NOT_FOUND. A driver that is unreachable is retried
 * (every interval, on a fresh channel) and never fatal.
 *
 * Errors follow arrow.h (0 or an errno-style code plus fsh_error). */
#ifndef FLIGHTSHUFFLE_SCHED_H
#define FLIGHTSHUFFLE_SCHED_H

#include <flightshuffle/flight.h>
#include <flightshuffle/shuffle.h>

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fsh_sched_worker_state {
  FSH_SCHED_WORKER_UNKNOWN = 0,
  FSH_SCHED_WORKER_ALIVE = 1,
  FSH_SCHED_WORKER_DEAD = 2
} fsh_sched_worker_state;

const char *fsh_sched_worker_state_name(fsh_sched_worker_state s); /* "alive", "dead", ... */

typedef struct fsh_sched_worker_info {
  uint64_t id;
  char *uri; /* owned */
  fsh_sched_worker_state state;
  int64_t last_heartbeat_age_ms;
} fsh_sched_worker_info;

/* Workers by increasing id (owned; release with fsh_sched_worker_list_reset). */
typedef struct fsh_sched_worker_list {
  int64_t n;
  fsh_sched_worker_info *items;
  int64_t heartbeat_timeout_ms;
} fsh_sched_worker_list;

void fsh_sched_worker_list_reset(fsh_sched_worker_list *l);
/* Alive workers in l. */
int64_t fsh_sched_worker_list_alive(const fsh_sched_worker_list *l);

/* ---- the driver -------------------------------------------------------- */

typedef struct fsh_sched_driver_options {
  const char *listen;           /* "host:port"; port 0 picks a free one */
  int64_t heartbeat_timeout_ms; /* 0 = 10000; workers beat every third of it */
  const char *auth_token;       /* required of every caller when set */
  int n_threads;                /* server pool; 0 = 4 */
  bool log;                     /* membership changes on stderr */
} fsh_sched_driver_options;

typedef struct fsh_sched_driver fsh_sched_driver;

FSH_NODISCARD int fsh_sched_driver_start(const fsh_sched_driver_options *opts,
                                         fsh_sched_driver **out, fsh_error *err);
/* "grpc://host:port" (borrowed). */
const char *fsh_sched_driver_uri(const fsh_sched_driver *d);
/* A snapshot of the membership (what "workers" answers), into *out. */
FSH_NODISCARD int fsh_sched_driver_workers(fsh_sched_driver *d, fsh_sched_worker_list *out,
                                           fsh_error *err);
/* Stops the checker and the server (in-flight calls get deadline_ms), frees
 * everything. NULL accepted. */
void fsh_sched_driver_stop(fsh_sched_driver *d, int64_t deadline_ms);

/* The "workers" action against a driver at uri, decoded. */
FSH_NODISCARD int fsh_sched_list_workers(const char *driver_uri, const char *auth_token,
                                         int64_t timeout_ms, fsh_sched_worker_list *out,
                                         fsh_error *err);
/* Decodes a WorkerList message (what "workers" answers). EINVAL if malformed. */
FSH_NODISCARD int fsh_sched_worker_list_decode(const void *data, int64_t size,
                                               fsh_sched_worker_list *out, fsh_error *err);

/* ---- jobs ------------------------------------------------------------------
 *
 * A job is a DAG of stages (proto/Sched.proto JobPlan): today the synthetic
 * shuffle's stages, "map-synthetic" (one task per map; its output is a
 * shuffle), "reduce-verify" (one task per partition of the shuffle its
 * input stage writes) and "reduce-then-map" (reads a partition like a
 * reduce, writes a new shuffle partitioned on another key like a map). The driver runs jobs on a scheduler thread of its
 * own (never on a Flight pool thread):
 *  - placement: a task goes to an alive worker with a free slot
 *    (slots_per_worker); a map to the least loaded one, a reduce to the one
 *    that holds most of its partition's input bytes;
 *  - a task is sent as the worker's DoAction "task" (shuffle.h) whose tag
 *    is a TaskRef; the worker pushes DoAction "task-done" (TaskDone) to the
 *    driver the moment it ends; attempts not heard of for a while are
 *    polled with "task-wait" (a fallback for lost notifications);
 *  - every attempt is tracked; a failed attempt is retried (at most
 *    max_attempts failures per task, then the job fails naming the task and
 *    its last error); answers of superseded attempts are ignored (listed);
 *  - lineage: every map output records its attempt and holder. When a
 *    worker dies (heartbeat timeout, a restart, or a fetch from it failing
 *    with "lost map outputs ..."), its running attempts are retried
 *    elsewhere, the outputs it held are marked lost and exactly the tasks
 *    that made them re-run once (or if) a consumer still needs them
 *    ("recomputed", with the reason), and the running consumers that read
 *    them are retried. Recursively: a re-run task whose input shuffle was
 *    already released (its consumers had completed) brings that whole
 *    input stage back first (every task of it "recomputed");
 *  - incremental (JobPlan.incremental): a reduce stage may start once its
 *    map stage has a first output; its tasks have slots of their own
 *    (slots_per_worker more per worker) and ask the driver for the map
 *    outputs of their partition as they appear (DoAction "map-outputs",
 *    body MapOutputsRequest{ref, since_version}: answers the outputs newer
 *    than that version, the new version and whether all are in; ESTALE for
 *    a superseded attempt). Off: a reduce starts when the map stage is
 *    complete, its body naming every input;
 *  - a stage's shuffle is released on every worker once its last consumer
 *    stage is complete;
 *  - at the end, every partition is verified: the rows and row checksums
 *    the maps wrote (fsh_task_row_checksums) against what the reduce read.
 * Driver DoActions: "submit" (body JobPlan, answers SubmitReply),
 * "job-status" (body JobStatusRequest, answers JobStatus: progress while
 * running, the summary at the end), "task-done" and "map-outputs" (from
 * workers). */

typedef enum fsh_sched_job_state {
  FSH_SCHED_JOB_UNKNOWN = 0,
  FSH_SCHED_JOB_RUNNING = 1,
  FSH_SCHED_JOB_SUCCEEDED = 2,
  FSH_SCHED_JOB_FAILED = 3
} fsh_sched_job_state;

const char *fsh_sched_job_state_name(fsh_sched_job_state s);

/* The synthetic shuffle as a job: maps x reduces over rows rows of the
 * synthetic table (workloads.h; batches of batch_rows, split evenly over
 * the maps), then one reduce-verify per partition (stages 1, 2); or, with
 * then_reduces, map (1) -> reduce-then-map (2) -> reduce-verify (3). */
typedef struct fsh_sched_shuffle_job {
  const char *name;
  int32_t maps, reduces;
  int64_t rows;
  int32_t batch_rows;
  uint64_t seed;
  fsh_compression compression;
  fsh_task_backend backend; /* fs or flight */
  int32_t max_attempts;     /* 0 = 4 */
  int32_t slots_per_worker; /* 0 = 2 */
  bool incremental;         /* reduces start with the first map output */
  /* > 0: a two-shuffle job -- the partitions of the first shuffle are
   * read by "reduce-then-map" tasks that shuffle them again on column
   * then_key (0 key, 1 value, 2 name) into then_reduces partitions, which
   * the reduce-verify tasks read */
  int32_t then_reduces;
  int32_t then_key;
} fsh_sched_shuffle_job;

/* The packed JobPlan of j (a new buffer in *plan). */
FSH_NODISCARD int fsh_sched_shuffle_job_plan(const fsh_sched_shuffle_job *j, fsh_buffer **plan,
                                             fsh_error *err);

/* Submits a packed JobPlan; *job_id names it. EINVAL naming what is wrong
 * with the plan (unknown task type, malformed task body, bad inputs). */
FSH_NODISCARD int fsh_sched_driver_submit(fsh_sched_driver *d, const void *plan, int64_t size,
                                          uint64_t *job_id, fsh_error *err);

typedef struct fsh_sched_task_event {
  uint32_t stage_id;
  int32_t task, attempt;
  char *reason; /* owned */
} fsh_sched_task_event;

typedef struct fsh_sched_stage_status {
  uint32_t stage_id;
  char kind[32];
  int32_t tasks_total, tasks_done, tasks_running;
  int64_t bytes, rows;
  double seconds;      /* first start .. last end (so far) */
  double task_seconds; /* sum of the done tasks' own times */
} fsh_sched_stage_status;

typedef struct fsh_sched_partition_check {
  int64_t map_rows, reduce_rows;
  uint64_t map_checksum, reduce_checksum;
} fsh_sched_partition_check;

/* A job's progress or summary (owned; fsh_sched_job_status_reset). */
typedef struct fsh_sched_job_status {
  uint64_t job_id;
  fsh_sched_job_state state;
  char *error; /* owned; failed jobs */
  int32_t n_stages;
  fsh_sched_stage_status *stages;
  double seconds;
  int64_t bytes_written, bytes_fetched, input_rows, input_bytes;
  int64_t bytes_spilled; /* the workers' spill files ("stats") when the shuffles were released */
  int32_t n_retried, n_recomputed, n_ignored;
  fsh_sched_task_event *retried, *recomputed, *ignored;
  bool verified;
  int32_t n_partitions; /* only when asked for */
  fsh_sched_partition_check *partitions;
  /* seconds since the job started; < 0: not yet */
  double first_map_output_s, first_reduce_start_s, last_map_output_s;
} fsh_sched_job_status;

void fsh_sched_job_status_reset(fsh_sched_job_status *s);
/* ENOENT for a job the driver does not know. */
FSH_NODISCARD int fsh_sched_driver_job_status(fsh_sched_driver *d, uint64_t job_id,
                                              bool with_partitions, fsh_sched_job_status *out,
                                              fsh_error *err);
/* Waits until the job is no longer running and its shuffles are released,
 * or timeout_ms passed (ETIMEDOUT); 0 when it ended (succeeded or failed:
 * see its status). */
FSH_NODISCARD int fsh_sched_driver_wait_job(fsh_sched_driver *d, uint64_t job_id,
                                            int64_t timeout_ms, fsh_error *err);
/* Declares a worker dead now, as if its heartbeat had timed out (tests, and
 * a caller that knows). ENOENT if no alive worker has that uri. */
FSH_NODISCARD int fsh_sched_driver_declare_dead(fsh_sched_driver *d, const char *uri,
                                                const char *why, fsh_error *err);

/* The remote forms: "submit" and "job-status" against a driver at uri. */
FSH_NODISCARD int fsh_sched_submit(const char *driver_uri, const char *auth_token,
                                   const void *plan, int64_t size, uint64_t *job_id,
                                   fsh_error *err);
FSH_NODISCARD int fsh_sched_get_job_status(const char *driver_uri, const char *auth_token,
                                           uint64_t job_id, bool with_partitions,
                                           fsh_sched_job_status *out, fsh_error *err);

/* Writes a status as text (progress or summary; stages, bytes, every
 * retried / recomputed / ignored task with its reason). */
void fsh_sched_job_status_print(const fsh_sched_job_status *s, FILE *f);

/* ---- the worker's side of the tasks -------------------------------------
 * A notifier pushes "task-done" to the driver when a task of the worker's
 * "task" action ends: pass fsh_sched_notify_task_done with the notifier as
 * fsh_shuffle_worker_options.on_task_done / on_task_done_ctx. */
typedef struct fsh_sched_notifier fsh_sched_notifier;
FSH_NODISCARD int fsh_sched_notifier_new(const char *driver_uri, const char *auth_token,
                                         fsh_sched_notifier **out, fsh_error *err);
/* The worker's URI, for the messages (copied; call once known). log: two
 * lines on stderr per task, "... job J stage S task T attempt A done,
 * reporting" before the task-done call and "... done, reported" once the
 * driver has it. */
void fsh_sched_notifier_set_worker(fsh_sched_notifier *n, const char *worker_uri, bool log);
bool fsh_sched_notify_task_done(void *notifier, const uint8_t *tag, int64_t tag_size, int rc,
                                const char *error, const uint8_t *answer, int64_t answer_size);
/* fsh_shuffle_worker_options.on_more_sources (ctx: the notifier): asks the
 * driver "map-outputs" for an incremental reduce. */
int fsh_sched_more_sources(void *notifier, const uint8_t *tag, int64_t tag_size,
                           uint64_t *version, fsh_reduce_task *more, bool *complete,
                           fsh_error *err);
void fsh_sched_notifier_free(fsh_sched_notifier *n);

/* ---- the worker's heartbeat -------------------------------------------- */

typedef struct fsh_sched_heartbeat_options {
  const char *driver_uri; /* grpc://host:port of the driver */
  const char *worker_uri; /* what the worker registers as */
  const char *auth_token; /* sent to the driver */
  int64_t retry_ms;       /* wait between attempts while the driver is
                             unreachable; 0 = 1000 */
  bool log;               /* registrations and driver trouble on stderr */
} fsh_sched_heartbeat_options;

typedef struct fsh_sched_heartbeat fsh_sched_heartbeat;

/* Starts the heartbeat thread (it registers first). Fails only on a bad
 * URI (EINVAL) or a lack of resources -- never because of the driver. */
FSH_NODISCARD int fsh_sched_heartbeat_start(const fsh_sched_heartbeat_options *opts,
                                            fsh_sched_heartbeat **out, fsh_error *err);
/* The id the driver gave at the last registration; 0 while not registered. */
uint64_t fsh_sched_heartbeat_worker_id(fsh_sched_heartbeat *h);
/* Registrations so far (the first one included). */
int64_t fsh_sched_heartbeat_registrations(fsh_sched_heartbeat *h);
/* Stops and joins the thread (an ongoing call ends within its deadline),
 * frees h. NULL accepted. */
void fsh_sched_heartbeat_stop(fsh_sched_heartbeat *h);

#ifdef __cplusplus
}
#endif
#endif
