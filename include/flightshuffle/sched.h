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
 *  - "deregister", body Heartbeat{worker_id, uri}: a worker shutting down
 *    cleanly. It is dead at once (as if its heartbeat had timed out: its
 *    running attempts are retried, the outputs it held are lost and
 *    recomputed if needed); answers one HeartbeatReply. NOT_FOUND like
 *    "heartbeat" for an id / uri the driver does not know alive.
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
  int32_t keep_jobs;            /* finished jobs kept for job-status (the
                                   newest ones; older ones are freed); 0 = 64 */
  int64_t call_timeout_ms;      /* deadline of each call to a worker (task,
                                   task-wait, cancel, stats, release); 0 = 5000 */
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
 * input stage writes, or per run of partitions: coalesced reduces, below) and "reduce-then-map" (reads a partition like a
 * reduce, writes a new shuffle partitioned on another key like a map). The driver runs jobs on a scheduler thread of its
 * own (never on a Flight pool thread):
 *  - placement: a task goes to an alive worker with a free slot
 *    (slots_per_worker); a map to the least loaded one, a reduce to the one
 *    that holds most of its partitions' input bytes;
 *  - a task is sent as the worker's DoAction "task" (shuffle.h) whose tag
 *    is a TaskRef; the worker pushes DoAction "task-done" (TaskDone) to the
 *    driver the moment it ends; attempts not heard of for a while are
 *    polled with "task-wait" (a fallback for lost notifications). The
 *    calls are made by a small pool of launcher threads, at most one call
 *    per worker at a time, so a worker that does not answer holds up one
 *    launcher for the call's deadline, never the scheduler nor the other
 *    workers' launches. A "task" call that fails (timeout, unreachable)
 *    retries the attempt elsewhere (not counted against max_attempts) and
 *    makes the worker suspect: nothing is placed on it (nor sent to it)
 *    until its next heartbeat. So does a "task-wait" poll (every 2 s of
 *    an attempt running 2 s or more) that finds nobody serving at the
 *    worker's address (refused, reset, unavailable: a dead process on a
 *    live host): the attempt is retried elsewhere within seconds rather
 *    than at the heartbeat timeout. A poll that times out (a slow or
 *    stopped worker) changes nothing: the heartbeat timeout decides;
 *  - cancellation: an attempt superseded while it may still run on a
 *    worker (its worker declared dead, an input of it lost) or running when
 *    its job ends is cancelled there with the worker's DoAction "cancel"
 *    (body: the attempt's tag; the task ends with ECANCELED at its next
 *    batch -- a plan-fragment task at the next batch it reads or writes;
 *    its late answer is ignored like any superseded one);
 *  - finished jobs: the newest keep_jobs finished jobs are kept for
 *    job-status; older ones are freed (ENOENT);
 *  - every attempt is tracked; a failed attempt is retried (at most
 *    max_attempts failures per task, then the job fails naming the task and
 *    its last error); answers of superseded attempts are ignored (listed);
 *  - metadata: each stage that writes a shuffle keeps its outputs in an
 *    fsh_shuffle_meta (below: compact arrays, about a bit per block;
 *    locations, attempts, versions, approximate block sizes), which gives
 *    the reduce tasks their sources (sizes_unknown: the readers still check
 *    every block's checksum), the reduces' placement (best location) and
 *    the incremental answers; for verification the driver adds up, per
 *    partition, the rows and row checksums the tasks wrote (once per task);
 *  - lineage: every map output records its attempt and holder. When a
 *    worker dies (heartbeat timeout, a restart, or a fetch from it failing
 *    because it is unreachable, hung or broke the stream off), its running
 *    attempts are retried elsewhere, the outputs it held are marked lost
 *    and exactly the tasks that made them re-run once (or if) a consumer
 *    still needs them ("recomputed", with the reason), and the running
 *    consumers that read them are retried. Recursively: a re-run task whose
 *    input shuffle was already released (its consumers had completed)
 *    brings that whole input stage back first (every task of it
 *    "recomputed"). A failed task names the inputs it found lost in
 *    TaskDone.lost (worker, shuffle, map, attempt, unreachable: filled from
 *    fsh_worker_task_lost by fsh_sched_notify_task_done; the error text
 *    says the same for humans only): a worker that answered that an output
 *    is not held or unreadable keeps living and exactly that output is
 *    lost -- a merged output with every part it covers, a failed merge's
 *    missing part alone --, its map re-run, its running readers retried at
 *    once; the failure is not counted against the task;
 *  - incremental (JobPlan.incremental): a reduce stage may start once its
 *    map stage has a first output; its tasks have slots of their own
 *    (slots_per_worker more per worker) and ask the driver for the map
 *    outputs of their partition as they appear (DoAction "map-outputs",
 *    body MapOutputsRequest{ref, since_version}: answers the outputs newer
 *    than that version, the new version and whether all are in; ESTALE for
 *    a superseded attempt). Off: a reduce starts when the map stage is
 *    complete, its body naming every input;
 *  - a stage's shuffle is released on every worker once its last consumer
 *    stage is complete: a "stats" (the spilled bytes added up into the
 *    job's) then a "release" per alive worker, sent by the launchers like
 *    the tasks (a worker that does not answer holds up no scheduling; the
 *    job is settled -- wait_job returns -- once they are all done);
 *  - a plan-fragment task's answer carries what its operators spilled and
 *    the driver what its input partitions held (fetched bytes); a staging
 *    stage's rows count no samples;
 *  - at the end, every partition is verified: the rows and row checksums
 *    the maps wrote (fsh_task_row_checksums) against what the reduce read;
 *    for "plan-fragment" stages (a plan's, exec.h), every partition a task
 *    read to its end against what its input's tasks wrote there (a read a
 *    limit stopped early is not compared);
 *  - "plan-fragment" stages may read several stages (a join), a
 *    1-partition input in every task (a broadcast side, a gather), and a
 *    staged shuffle (a scatter: its partition, every task's sample and
 *    every task's row count); the result stage's shuffle is kept after the
 *    job for the caller (JobStatus.result_parts), who releases it.
 * Driver DoActions: "submit" (body JobPlan, answers SubmitReply),
 * "job-status" (body JobStatusRequest, answers JobStatus: progress while
 * running, the summary at the end), "task-done" and "map-outputs" (from
 * workers). */

/* Global limits (StagePlan.limited, fsh_sched_plan_stage.limited): a plan
 * stage writing a global limit's gather (1 partition; each task writes at
 * most limit_rows rows) is stopped by the driver once enough rows exist:
 * when the rows its done tasks wrote reach limit_rows -- limit_ordered:
 * counting only done tasks 0 .. k, a prefix in task order, so that the
 * gather's first limit_rows rows are the in-process run's -- every other
 * task is skipped: a pending one is never launched, a running attempt is
 * cancelled on its worker ("cancel"), and the metadata marks the map
 * skipped (not lost: fsh_shuffle_meta_skip). The stage is then complete;
 * its reader gets only the done tasks' outputs. Lineage: a done output
 * lost afterwards makes its task pending again (recomputed), or skipped
 * when the other done tasks still hold enough rows; if every task is done
 * or skipped and the rows are short of the limit (a re-run that wrote
 * fewer rows), the skipped tasks become pending again -- the stage never
 * completes with fewer rows than it needs. A limited stage does no
 * pre-shuffle merge (its outputs are at most limit_rows rows each). The
 * status counts its tasks_skipped and attempts_cancelled per stage. */

/* The pre-shuffle merge (JobPlan.pre_shuffle_merge; src/sched/job_merge.c
 * has the design): a stage writing a shuffle that a later stage reads
 * holds its map outputs back from the metadata; each worker merges the
 * ones it holds, G at a time as they arrive (G = ceil(M x R / threshold^2),
 * at least 2; plan stages: runs of consecutive map ids once all their
 * tasks are done), with "merge-outputs" (shuffle.h), and the merged output
 * is published in their place (reducers never see a part; its lineage is
 * its parts' tasks: lost with its worker, they all re-run). A failed merge
 * publishes its parts unmerged. Modes: FSH_SCHED_MERGE_OFF (the default of
 * a JobPlan), ON, AUTO (on when sqrt(M x R) > threshold; 0 = the default
 * below, measured on a 2-core machine: bench shuffle 1000 x 1000 gains,
 * 64 x 64 stays off). A plan stage may carry its own mode, its exchange's
 * policy (fsh_sched_plan_stage.merge). */
#define FSH_SCHED_MERGE_THRESHOLD 200

/* Coalesced reduces (JobPlan.reduce_task_bytes; Spark AQE's partition
 * coalescing): a "reduce-verify" task reads a contiguous run of partitions
 * [first, first + count) (shuffle.h fsh_reduce_task.count) -- partitions
 * stay the unit of data and of verification (its answer has rows and
 * checksum per partition), the task the unit of scheduling, retries and
 * lineage (a lost output re-runs the run tasks that read it). The runs are
 * chosen once, when the stage may first start:
 *  - its input complete: greedily from the bytes the maps wrote per
 *    partition, as AQE does: a partition starts a new run when adding it
 *    would take the current one past the target (reduce_task_bytes, or
 *    auto: FSH_SCHED_REDUCE_TASK_BYTES_AUTO, AQE's advisory partition
 *    size) -- the target lowered to total / (alive workers x slots), so
 *    that every slot has a task;
 *  - incremental (sizes not known yet): alive workers x slots even runs --
 *    an incremental reduce holds a reduce slot from the first map output
 *    to the last, so tasks beyond the slots would only wait (and read
 *    nothing early), while each run's rounds read the whole run.
 * The summary's reduce stage counts the tasks (the runs). */
#define FSH_SCHED_REDUCE_TASK_BYTES_AUTO (64LL << 20)

/* Coalesced maps (JobPlan.maps_per_task; the map side's counterpart of the
 * above, as an engine packs small input splits into one task): the
 * consecutive tasks of a "map-synthetic" stage whose rows are contiguous
 * (the same table, seed, batch size, compression and partitions) run as
 * one task of up to maps_per_task maps -- the same rows, written by one
 * writer into one output: a partition's rows of G maps become one block,
 * not G, and no pre-shuffle merge has to copy them together afterwards.
 * The task is the unit of scheduling, retries and lineage (a lost output
 * re-runs the whole run); the stage's map ids are the runs'. Chosen once,
 * at submit:
 *  - maps_per_task > 1: runs of that many;
 *  - auto (< 0): when sqrt(M x R) > the merge threshold (the shape where
 *    the pre-shuffle merge would merge), runs of G = ceil(M x R /
 *    threshold^2) maps -- about threshold^2 / R outputs, the size the merge
 *    aims at -- but no fewer tasks than FSH_SCHED_MAP_RUNS_MIN_WAVES waves
 *    of the slots of the workers alive at submit (none alive: not
 *    coalesced); the stage then does not merge in auto mode (its outputs
 *    have that size already; merge on still merges).
 * Plan stages ("plan-fragment") are not coalesced: a fragment task reads
 * its own input partition. The summary's map stage counts the tasks. */
#define FSH_SCHED_MAP_RUNS_MIN_WAVES 2
enum { FSH_SCHED_MERGE_OFF = 0, FSH_SCHED_MERGE_ON = 1, FSH_SCHED_MERGE_AUTO = 2 };

typedef enum fsh_sched_job_state {
  FSH_SCHED_JOB_UNKNOWN = 0,
  FSH_SCHED_JOB_RUNNING = 1,
  FSH_SCHED_JOB_SUCCEEDED = 2,
  FSH_SCHED_JOB_FAILED = 3
} fsh_sched_job_state;

const char *fsh_sched_job_state_name(fsh_sched_job_state s);

/* The synthetic shuffle as a job: maps x reduces over rows rows of the
 * synthetic table (workloads.h; batches of batch_rows, split evenly over
 * the maps), then one reduce-verify per partition -- or per run of
 * partitions (reduce_task_bytes) -- (stages 1, 2); or, with then_reduces,
 * map (1) -> reduce-then-map (2) -> reduce-verify (3). */
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
  int32_t merge;           /* FSH_SCHED_MERGE_OFF / ON / AUTO */
  int32_t merge_threshold; /* AUTO's; 0 = FSH_SCHED_MERGE_THRESHOLD */
  /* coalesced reduces (below): 0 one reduce-verify task per partition,
   * > 0 runs of partitions of about that many bytes, < 0 auto */
  int64_t reduce_task_bytes;
  /* coalesced maps (above): 0 or 1 each map its own task, > 1 up to that
   * many maps per task, < 0 auto */
  int32_t maps_per_task;
} fsh_sched_shuffle_job;

/* The packed JobPlan of j (a new buffer in *plan). */
FSH_NODISCARD int fsh_sched_shuffle_job_plan(const fsh_sched_shuffle_job *j, fsh_buffer **plan,
                                             fsh_error *err);

/* A job of "plan-fragment" stages (a plan cut at its exchanges, exec.h):
 * stage i (id i + 1) runs n_tasks tasks of `fragment`, reading for each
 * k < n_inputs the shuffle of the earlier stage input_stages[k] (an index)
 * as the fragment's exchange node input_nodes[k], and writes a shuffle of
 * n_partitions partitions; the stage with result writes the job's result
 * (kept for the caller: JobStatus.result). */
typedef struct fsh_sched_plan_stage {
  const fsh_buffer *fragment; /* borrowed */
  int32_t n_tasks, n_partitions;
  int n_inputs;
  const int *input_stages;
  const int32_t *input_nodes;
  bool result;
  /* scatters what its one input stage staged (n_tasks + 1 partitions):
   * task i reads partition i, the last one as its side input, and the
   * rows of every staged partition as its counts (Sched.proto) */
  bool scatter;
  /* its pre-shuffle merge: 0 the job's (fsh_sched_plan_job.merge), else
   * 1 + FSH_SCHED_MERGE_OFF / ON / AUTO (a plan's per-exchange policy) */
  int32_t merge;
  /* a global limit's stage (1 partition; Sched.proto StagePlan.limited):
   * the driver stops it once its done tasks wrote limit_rows rows (with
   * limit_ordered, tasks 0 .. k in order), skipping the other tasks; see
   * "global limits" above */
  bool limited;
  int64_t limit_rows;
  bool limit_ordered;
} fsh_sched_plan_stage;

typedef struct fsh_sched_plan_job {
  const char *name;
  int n_stages;
  const fsh_sched_plan_stage *stages;
  fsh_compression compression;
  fsh_task_backend backend; /* fs or flight */
  int32_t max_attempts;     /* 0 = 4 */
  int32_t slots_per_worker; /* 0 = 2 */
  int32_t merge;            /* FSH_SCHED_MERGE_OFF / ON / AUTO */
  int32_t merge_threshold;  /* AUTO's; 0 = FSH_SCHED_MERGE_THRESHOLD */
} fsh_sched_plan_job;

/* The packed JobPlan of a plan job (a new buffer in *plan). */
FSH_NODISCARD int fsh_sched_plan_job_plan(const fsh_sched_plan_job *j, fsh_buffer **plan,
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
  int64_t merges, merged_outputs; /* pre-shuffle merges of its output published, parts taken in */
  /* a global limit's stage: tasks skipped (never launched or cancelled
   * once the limit's rows existed) and, of them, attempts cancelled */
  int32_t tasks_skipped, attempts_cancelled;
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
  /* plan-fragment jobs: what the done tasks' operators spilled (files,
   * bytes, operator instances that spilled), from their answers */
  int64_t operator_spill_files, operator_spilled_bytes, operators_spilled;
  /* the pre-shuffle merge: merges published, the map outputs they took in
   * and their bytes; merges that failed (parts published unmerged) */
  int64_t merges, merged_outputs, merged_bytes, merges_failed;
  int32_t n_retried, n_recomputed, n_ignored;
  fsh_sched_task_event *retried, *recomputed, *ignored;
  bool verified;
  int32_t n_partitions; /* only when asked for */
  fsh_sched_partition_check *partitions;
  /* seconds since the job started; < 0: not yet */
  double first_map_output_s, first_reduce_start_s, last_map_output_s;
  /* a job with a result stage ("plan-fragment", result), once succeeded:
   * per partition of its result shuffle the map outputs to read (a
   * reduce-verify task, owned, sizes unknown) and the rows and row checksum
   * the tasks wrote there; the caller reads them, then releases the
   * shuffle (result[0].shuffle_id) on every worker */
  int32_t n_result;
  fsh_reduce_task *result;
  int64_t *result_rows;
  uint64_t *result_checksums;
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
/* Jobs the driver holds in memory: the running ones plus at most
 * keep_jobs finished (and settled) ones -- older finished jobs are freed
 * (job-status then answers ENOENT for them). */
int64_t fsh_sched_driver_jobs_held(fsh_sched_driver *d);
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
  bool deregister_on_stop; /* fsh_sched_heartbeat_stop sends "deregister"
                              (a clean shutdown: the driver drops the worker
                              at once, its outputs lost, not at its timeout) */
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
/* Stops and joins the thread (an ongoing call ends within its deadline;
 * with deregister_on_stop, a registered worker then sends "deregister",
 * within the same deadline), frees h. NULL accepted. */
void fsh_sched_heartbeat_stop(fsh_sched_heartbeat *h);

/* ---- shuffle metadata -------------------------------------------------
 *
 * fsh_shuffle_meta: the driver's record of one shuffle's map outputs (what
 * each map task reports on completion, fsh_map_output of shuffle.h), kept as
 * compact arrays -- never an object per block -- so that a 10,000 maps x
 * 10,000 partitions shuffle costs the driver well under 64 MiB. Memory is
 * about 1 bit per block (the emptiness bitmap) + per map ~100 bytes and 24
 * bytes per exactly kept block (at most max(8, n_partitions / 256)) + per
 * location 16 bytes per partition (its column of totals) + 24 bytes per
 * partition: 23 MiB at 10k x 10k on 4 locations, 38 MiB on 100 (measured by
 * bench/pipeline/bench_metadata.c). The per-location columns are dense: a
 * shuffle spread over many hundreds of workers would want them sparse.
 *
 * Locations (worker URIs) are interned once per shuffle: the first output
 * stored at a URI gives it the next small id (0, 1, ...), which is what
 * queries answer; fsh_shuffle_meta_location_uri() maps it back. Ids are
 * never reused within a shuffle (a worker that comes back at the same URI
 * keeps its id).
 *
 * Map attempts. Per map the current attempt is the highest one declared
 * (fsh_shuffle_meta_begin_attempt) or seen in an accepted output. An output
 * is ACCEPTED when its attempt is >= the current one and newer than the
 * attempt of the map's last accepted output; it replaces that output if one
 * is still held (a speculative duplicate finishing later). An output of an
 * older attempt is STALE and a second output of the already accepted
 * attempt is a DUPLICATE: both are ignored (and counted), not errors. Each
 * accepted output bumps the shuffle's version (1, 2, ...) and is stamped
 * with it; incremental reducers poll "what is new since version v".
 *
 * What is exact and what is approximate:
 *  - exact: per map -- state, attempt, location, version, total rows and
 *    bytes; per block -- whether it is empty (a bitmap); per partition --
 *    the number of held outputs with a non-empty block for it; the sources
 *    answer (which map outputs, attempts, locations; empty blocks skipped).
 *  - per block sizes are approximate, like Spark's HighlyCompressedMapStatus:
 *    the largest blocks of each map (those over twice the average, at most
 *    max(8, n_partitions / 256) of them) are kept exactly, the other
 *    non-empty blocks are estimated as the average of the rest (so a map's
 *    estimates sum to its exact total up to integer rounding); empty
 *    blocks are exactly 0.
 *  - per-partition totals (rows, bytes) and per-(partition, location) bytes
 *    and rows are aggregated exactly as outputs arrive and when a whole
 *    location is lost (its column is dropped). Only when ONE output stops
 *    counting while its location stays (fsh_shuffle_meta_lose_output, or a
 *    held output replaced by a newer attempt) its per-block estimates are
 *    subtracted (never below 0) and the affected (partition, location)
 *    cells are marked approximate until that location is lost as a whole;
 *    fsh_shuffle_meta_partition_totals says whether a partition is exact.
 *
 * Not thread-safe: the driver calls it under its own mutex. Errors follow
 * arrow.h; on any error the metadata is unchanged. */

typedef struct fsh_shuffle_meta fsh_shuffle_meta;
struct fsh_map_output; /* shuffle.h */

/* What fsh_shuffle_meta_add did with an output. */
typedef enum fsh_shuffle_meta_add_result {
  FSH_SHUFFLE_META_ACCEPTED = 0,  /* stored; the version was bumped */
  FSH_SHUFFLE_META_STALE = 1,     /* attempt older than the current one: ignored */
  FSH_SHUFFLE_META_DUPLICATE = 2  /* that attempt's output was already accepted: ignored */
} fsh_shuffle_meta_add_result;

const char *fsh_shuffle_meta_add_result_name(fsh_shuffle_meta_add_result r);

/* A shuffle of n_maps map tasks (ids 0..n_maps-1) into n_partitions
 * partitions (both >= 1, n_maps <= 2^31-1). EINVAL / ENOMEM. */
FSH_NODISCARD int fsh_shuffle_meta_new(uint64_t shuffle_id, int64_t n_maps, int32_t n_partitions,
                                       fsh_shuffle_meta **out, fsh_error *err);
/* NULL accepted. */
void fsh_shuffle_meta_free(fsh_shuffle_meta *m);

uint64_t fsh_shuffle_meta_shuffle_id(const fsh_shuffle_meta *m);
int64_t fsh_shuffle_meta_n_maps(const fsh_shuffle_meta *m);
int32_t fsh_shuffle_meta_n_partitions(const fsh_shuffle_meta *m);

/* Declares that attempt `attempt` of map map_id was launched: outputs of
 * older attempts are stale from now on (a held output of an older attempt
 * stays held until replaced or lost). Lowering the attempt is a no-op.
 * EINVAL on a bad map id or a negative attempt. */
FSH_NODISCARD int fsh_shuffle_meta_begin_attempt(fsh_shuffle_meta *m, int64_t map_id,
                                                 int32_t attempt, fsh_error *err);

/* Records a completed map output (metadata only; `out` is borrowed). EINVAL
 * (naming the map and field) when out->shuffle_id, map_id, n_partitions,
 * rows/bytes (negative, missing, a map total over INT64_MAX / n_maps, so
 * that no aggregate can overflow) or location (NULL or empty) is wrong;
 * ENOMEM. *result says whether it was accepted. */
FSH_NODISCARD int fsh_shuffle_meta_add(fsh_shuffle_meta *m, const struct fsh_map_output *out,
                                       fsh_shuffle_meta_add_result *result, fsh_error *err);

/* The version: the number of outputs accepted so far (0 at first). */
uint64_t fsh_shuffle_meta_version(const fsh_shuffle_meta *m);
/* Maps whose output is currently held (accepted and not lost). */
int64_t fsh_shuffle_meta_n_complete(const fsh_shuffle_meta *m);
/* Maps currently skipped (fsh_shuffle_meta_skip). */
int64_t fsh_shuffle_meta_n_skipped(const fsh_shuffle_meta *m);

/* One map's state. */
typedef enum fsh_shuffle_meta_map_state {
  FSH_SHUFFLE_META_MAP_PENDING = 0, /* no output accepted yet */
  FSH_SHUFFLE_META_MAP_COMPLETE = 1,/* an output is held */
  FSH_SHUFFLE_META_MAP_LOST = 2,    /* its output was lost; to recompute */
  FSH_SHUFFLE_META_MAP_SKIPPED = 3  /* not needed (a global limit has its rows): no output */
} fsh_shuffle_meta_map_state;

typedef struct fsh_shuffle_meta_map_info {
  fsh_shuffle_meta_map_state state;
  int32_t attempt;        /* current attempt (-1: none yet) */
  int32_t output_attempt; /* attempt of the last accepted output (-1: none) */
  uint32_t location_id;   /* of the last accepted output */
  uint64_t version;       /* of the last accepted output (0: none) */
  int64_t rows, bytes;    /* exact totals of the last accepted output */
  int32_t non_empty;      /* its non-empty partitions */
} fsh_shuffle_meta_map_info;

/* EINVAL on a bad map id. */
FSH_NODISCARD int fsh_shuffle_meta_map(const fsh_shuffle_meta *m, int64_t map_id,
                                       fsh_shuffle_meta_map_info *out, fsh_error *err);

/* Interned locations: count, and id -> URI (borrowed; NULL if unknown). */
uint32_t fsh_shuffle_meta_n_locations(const fsh_shuffle_meta *m);
const char *fsh_shuffle_meta_location_uri(const fsh_shuffle_meta *m, uint32_t location_id);
/* URI -> id; false when the URI never held an output of this shuffle. */
bool fsh_shuffle_meta_location_id(const fsh_shuffle_meta *m, const char *uri, uint32_t *id);

/* The (approximate, see above) size of block (map_id, partition) of the
 * held output; 0 rows/bytes when empty or the map holds no output. EINVAL
 * on bad ids. */
FSH_NODISCARD int fsh_shuffle_meta_block(const fsh_shuffle_meta *m, int64_t map_id,
                                         int32_t partition, int64_t *rows, int64_t *bytes,
                                         fsh_error *err);

typedef struct fsh_shuffle_partition_totals {
  int64_t rows, bytes;          /* over the held outputs */
  int64_t non_empty_maps;       /* held outputs with a non-empty block (exact) */
  bool exact;                   /* rows/bytes exact (see above) */
  uint32_t best_location;       /* the location holding most of its bytes */
  int64_t best_location_bytes;  /* 0 (and best_location 0) when none */
} fsh_shuffle_partition_totals;

/* EINVAL on a bad partition. */
FSH_NODISCARD int fsh_shuffle_meta_partition_totals(const fsh_shuffle_meta *m, int32_t partition,
                                                    fsh_shuffle_partition_totals *out,
                                                    fsh_error *err);
/* Bytes and rows of partition `partition` held at location_id (0 for an
 * unknown location). EINVAL on a bad partition. */
FSH_NODISCARD int fsh_shuffle_meta_location_bytes(const fsh_shuffle_meta *m, int32_t partition,
                                                  uint32_t location_id, int64_t *rows,
                                                  int64_t *bytes, fsh_error *err);

/* The answer to "which map outputs of partition p are new since version
 * v": for each held output with version > since_version and a non-empty
 * block for p, by increasing version: its map id, attempt, location id and
 * the (approximate) block size. `version` is the shuffle's version at the
 * time of the answer (pass it as since_version next time); complete is
 * true when every map's output is held or the map skipped (then, after
 * this answer, the reducer has seen every source). An output that was lost and recomputed
 * comes again with its new attempt. Arrays are owned by the struct and
 * reused between calls; release with fsh_shuffle_sources_reset. A decoded
 * answer also carries the URIs of the locations it names. */
typedef struct fsh_shuffle_sources {
  uint64_t shuffle_id;
  int32_t partition;
  int64_t n_maps;
  uint64_t since_version, version;
  bool complete;
  int64_t n;
  int64_t *map_ids;       /* [n] */
  int32_t *attempts;      /* [n] */
  uint32_t *location_ids; /* [n] */
  int64_t *bytes;         /* [n] approximate block sizes */
  int64_t capacity;       /* of the four arrays */
  /* Locations named by the answer (filled by the decoder only). */
  int32_t n_locations;
  uint32_t *location_table_ids; /* [n_locations] */
  char **location_uris;         /* [n_locations] owned */
} fsh_shuffle_sources;

void fsh_shuffle_sources_reset(fsh_shuffle_sources *s);
/* URI of a location id named by a decoded answer (borrowed); NULL if absent. */
const char *fsh_shuffle_sources_uri(const fsh_shuffle_sources *s, uint32_t location_id);

/* Fills *out (reusing its arrays). EINVAL on a bad partition or a
 * since_version ahead of the shuffle's version; ENOMEM. */
FSH_NODISCARD int fsh_shuffle_meta_sources(const fsh_shuffle_meta *m, int32_t partition,
                                           uint64_t since_version, fsh_shuffle_sources *out,
                                           fsh_error *err);
/* The same for a run of partitions [p, p + count) (a coalesced reduce):
 * the outputs with a non-empty block in any of them, bytes summed over
 * them (out->partition: p). EINVAL on a bad run. */
FSH_NODISCARD int fsh_shuffle_meta_run_sources(const fsh_shuffle_meta *m, int32_t p,
                                               int32_t count, uint64_t since,
                                               fsh_shuffle_sources *out, fsh_error *err);

/* Encodes an answer of m as a ShuffleSources message (proto/Sched.proto),
 * with the URIs of the locations it names; *data is fsh_malloc'ed. */
FSH_NODISCARD int fsh_shuffle_meta_sources_encode(const fsh_shuffle_meta *m,
                                                  const fsh_shuffle_sources *s, uint8_t **data,
                                                  int64_t *size, fsh_error *err);
/* Decodes and validates a ShuffleSources message into *out (reset first):
 * EINVAL naming what is wrong (a field out of range, arrays of different
 * lengths, a location id without a URI, versions out of order, ...). */
FSH_NODISCARD int fsh_shuffle_sources_decode(const void *data, int64_t size,
                                             fsh_shuffle_sources *out, fsh_error *err);

/* A worker is dead: every output held at uri is lost. *map_ids (fsh_malloc'ed,
 * NULL when none; free with fsh_free) gets the ids of the maps to
 * recompute, increasing, *n their number. An unknown URI loses nothing.
 * ENOMEM (nothing changed). */
FSH_NODISCARD int fsh_shuffle_meta_lose_location(fsh_shuffle_meta *m, const char *uri,
                                                 int64_t **map_ids, int64_t *n, fsh_error *err);
/* A fetch named map output (map_id, attempt) as unreadable: it is lost if it
 * is the held output (*lost = true); otherwise (already lost, replaced,
 * never accepted) nothing changes. EINVAL on a bad map id. */
FSH_NODISCARD int fsh_shuffle_meta_lose_output(fsh_shuffle_meta *m, int64_t map_id,
                                               int32_t attempt, bool *lost, fsh_error *err);

/* A map the shuffle no longer needs (a global limit's stage has its rows
 * from other maps: the driver skipped it) -- skipped true: a map holding
 * no output (pending or lost) becomes SKIPPED: it counts as in for
 * `complete` (every map's output held or skipped), and an output of it
 * that still arrives is STALE (ignored); skipped false: a skipped map is
 * pending again (the driver needs it after all: a lost output took the
 * rows below the limit). Skipping a map that holds an output is EINVAL
 * (lose it first); skipping a skipped map or un-skipping one that is not
 * changes nothing. EINVAL on a bad map id. */
FSH_NODISCARD int fsh_shuffle_meta_skip(fsh_shuffle_meta *m, int64_t map_id, bool skipped,
                                        fsh_error *err);

typedef struct fsh_shuffle_meta_stats {
  int64_t accepted, stale, duplicates, replaced; /* outputs by fate */
  int64_t lost;                                  /* outputs lost */
  int64_t skipped, unskipped;                    /* maps skipped, skipped maps pending again */
} fsh_shuffle_meta_stats;

void fsh_shuffle_meta_stats_get(const fsh_shuffle_meta *m, fsh_shuffle_meta_stats *out);

/* Bytes of driver memory held by m (every allocation it owns). */
int64_t fsh_shuffle_meta_memory_bytes(const fsh_shuffle_meta *m);

#ifdef __cplusplus
}
#endif
#endif
