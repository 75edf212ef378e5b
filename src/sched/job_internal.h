/* job_internal.h -- what the files of the driver's jobs share (job.c,
 * job_lineage.c, job_attempts.c, job_scheduler.c, job_status.c,
 * job_map_outputs.c): a job's state (stages of tasks, events) and the
 * helpers over it. Everything here is guarded by the driver's mu: the
 * functions below are called with mu held. Private to src/sched. */
#ifndef FSH_SCHED_JOB_INTERNAL_H
#define FSH_SCHED_JOB_INTERNAL_H

#include "sched/sched_internal.h"

#define JOB_MAX_STAGES 64

enum { KIND_MAP = 1, KIND_REDUCE = 2, KIND_REDUCE_MAP = 3, KIND_PLAN = 4 };
#define JOB_MAX_INPUTS 64
/* T_SKIPPED: a global limit's stage has its rows without it (job_limit.c):
 * never launched again unless the limit needs it after all */
enum { T_PENDING = 0, T_RUNNING = 1, T_DONE = 2, T_SKIPPED = 3 };

typedef struct jtask {
  uint8_t state;
  bool recompute;       /* pending again because its output was lost */
  char *lost;           /* owned: why (the "recomputed" reason when it runs again) */
  int32_t next_attempt; /* attempts launched so far */
  int32_t attempt;      /* the running attempt, or the one whose output is current */
  int32_t failures;     /* counted failures (bounded by max_attempts) */
  int32_t input_losses; /* failures for a lost input (bounded by 4 x max_attempts) */
  uint64_t worker_id;   /* running attempt's worker, or the output's holder */
  uint64_t wtask;       /* the worker's task id (task-wait fallback); 0: unknown */
  bool sending;         /* the scheduler is sending it */
  int64_t start_ms, poll_ms;
  /* results */
  int64_t rows, bytes, batches; /* map: input rows, bytes written; reduce: read */
  uint64_t checksum;            /* reduce */
  int64_t nanos;                /* the task's own time */
  int64_t input_bytes;          /* map */
  int64_t out_rows;             /* producers: the rows its done attempt wrote (all partitions) */
  fsh_fragment_read *reads;     /* KIND_PLAN: what the done attempt read (owned) */
  int32_t n_reads;
  int64_t fetched;              /* KIND_PLAN: bytes of the input partitions it read */
  fsh_fragment_stats spill;     /* KIND_PLAN: what its operators spilled */
  /* the pre-shuffle merge (job_merge.c): a done attempt's output held back
   * from the metadata until it is merged (or published unmerged), owned;
   * and the merge it is a part of (its id; 0: none) */
  fsh_map_output *held;
  int32_t merge;
  int32_t merged; /* the published merge whose output covers this task's (0: none) */
} jtask;

/* A "merge-outputs" sent to the worker holding its parts (job_merge.c). */
typedef struct jmerge {
  int32_t id;           /* > 0, per stage */
  bool active;          /* sent or to send, not yet ended */
  bool published;       /* its merged output is current (tasks kept: the lineage) */
  bool sending;         /* its "task" call is on the way */
  uint64_t worker_id;
  int32_t attempt;      /* of the merged output (a reserved attempt of tasks[0]) */
  int32_t n;
  int32_t *tasks;       /* [n] owned, increasing; tasks[0] names the merged output */
  uint64_t wtask;       /* the worker's task id (task-wait fallback); 0: unknown */
  int64_t start_ms, poll_ms;
} jmerge;

typedef struct jstage {
  uint32_t id;
  int kind;
  int32_t n_tasks, n_done;
  jtask *tasks;
  fsh_map_task *maps; /* KIND_MAP: the decoded bodies (coalesced: the runs') */
  int32_t plan_maps;  /* KIND_MAP, coalesced maps (sched.h): the plan's tasks,
                         n_tasks the runs; 0: not coalesced */
  bool map_runs_auto; /* coalesced by the auto rule (the merge's auto mode
                         then leaves the stage alone) */
  /* producers (KIND_MAP, KIND_REDUCE_MAP) write a shuffle: */
  int32_t n_parts;    /* partitions of its shuffle */
  uint64_t shuffle_id;
  int32_t key_column; /* KIND_REDUCE_MAP: the key of its output */
  fsh_compression compression; /* KIND_REDUCE_MAP */
  int input;          /* consumers: their (first) input stage */
  /* consumers: every input stage (KIND_PLAN may read several; the others
   * one: inputs[0] == input) and, KIND_PLAN, the fragment's exchange node
   * each one is */
  int n_inputs;
  int inputs[JOB_MAX_INPUTS];
  int32_t input_nodes[JOB_MAX_INPUTS];
  fsh_buffer *fragment; /* KIND_PLAN: the stage's StageFragment bytes */
  bool result;          /* KIND_PLAN: its shuffle is the job's result (kept) */
  bool scatter;         /* KIND_PLAN: scatters its input's staged partitions (the
                           last one, the samples, read by every task) */
  /* KIND_PLAN, a global limit's stage (sched.h "global limits",
   * job_limit.c): stopped once its done tasks (limit_ordered: a prefix of
   * them) wrote limit_rows rows; n_skipped tasks are T_SKIPPED, and
   * n_cancelled attempts were cancelled running when their task was */
  bool limited, limit_ordered;
  int64_t limit_rows;
  int32_t n_skipped, n_cancelled;
  bool consumed;      /* producers: some stage reads it */
  bool released;
  /* producers: the metadata of the current outputs (shuffle_meta: compact
   * arrays, about a bit per block) and, to verify the consumers, what the
   * tasks wrote per partition (rows, row checksums; added once per task:
   * a re-run writes the same rows) */
  fsh_shuffle_meta *meta;
  int64_t *part_rows;  /* [n_parts] */
  uint64_t *part_sums; /* [n_parts] */
  int64_t *part_bytes; /* [n_parts]: the bytes the tasks wrote there (exact) */
  bool *counted;       /* [n_tasks] */
  /* KIND_REDUCE, coalesced reduces (sched.h): the job's target bytes per
   * task (0: a task per partition, < 0 auto); once chosen (runs_set, when
   * the stage may first start) task t reads partitions [run_first[t],
   * run_first[t + 1]) of its input -- run_first NULL: task t reads
   * partition t -- and read_rows / read_sums hold, per partition of its
   * input, what the done task of it read. */
  int64_t run_bytes;
  bool runs_set;
  int32_t *run_first;  /* [n_tasks + 1] */
  int64_t *read_rows;  /* [input's n_parts] */
  uint64_t *read_sums;
  int64_t first_ms, last_ms; /* first start, last end */
  /* the pre-shuffle merge (job_merge.c): on for this stage, map outputs
   * per merge, held outputs (tasks with `held`), the merges */
  bool merge;
  int32_t merge_mode;  /* StagePlan.pre_shuffle_merge: 0 the job's, else 1 + its mode */
  int32_t merge_group;
  int32_t n_held;
  int32_t n_merges, cap_merges;
  jmerge *merges;
  int64_t merges_done, merged_outputs, merged_bytes, merges_failed;
} jstage;

typedef struct event_list {
  int32_t n, cap;
  fsh_sched_task_event *items;
} event_list;

struct sched_job {
  uint64_t id;
  fsh_sched_job_state state;
  char error[1200];
  int max_attempts, slots;
  bool incremental;
  fsh_task_backend backend;
  int n_stages;
  jstage *stages;
  event_list retried, recomputed, ignored;
  int64_t start_ms, end_ms, first_map_ms, last_map_ms, first_reduce_ms;
  int64_t bytes_spilled;
  int releasing; /* shuffles being released by the scheduler */
  int merge_mode;          /* Sched.proto JobPlan.pre_shuffle_merge: 0 off, 1 on, 2 auto */
  int32_t merge_threshold; /* auto: sqrt(M x R) above it */
  sched_job *next;
};

struct sched_client {
  char *uri;
  fsh_flight_client *client;
  sched_client *next;
};

/* A stage that writes a shuffle (map, reduce-then-map) / that reads one
 * (reduce-verify, reduce-then-map). */
static inline bool producer(const jstage *st) { return st->kind != KIND_REDUCE; }
static inline bool consumer(const jstage *st) { return st->kind != KIND_MAP && st->n_inputs > 0; }
/* Whether consumer st reads stage s. */
static inline bool reads(const jstage *st, int s) {
  for (int i = 0; i < st->n_inputs; i++)
    if (st->inputs[i] == s) return true;
  return false;
}
/* Whether stage s is a staging stage (a scatter stage reads it: its last
 * partition holds samples, not rows of the data). */
static inline bool staged(const sched_job *j, int s) {
  for (int x = 0; x < j->n_stages; x++)
    if (j->stages[x].scatter && j->stages[x].inputs[0] == s) return true;
  return false;
}
/* The partition of input stage `in` (n_parts partitions) that task t of a
 * consumer reads: t, or 0 of a 1-partition shuffle (a plan's broadcast
 * side, a gather). */
static inline int32_t part_read(const jstage *in, int32_t t) { return in->n_parts == 1 ? 0 : t; }
/* The run of partitions task t of a reduce stage reads: [run_first(st, t),
 * + run_count(st, t)). */
static inline int32_t run_first(const jstage *st, int32_t t) {
  return st->run_first ? st->run_first[t] : t;
}
static inline int32_t run_count(const jstage *st, int32_t t) {
  return st->run_first ? st->run_first[t + 1] - st->run_first[t] : 1;
}
/* The task of a reduce stage that reads partition p of its input. */
static inline int32_t run_task_of(const jstage *st, int32_t p) {
  if (!st->run_first) return p;
  int32_t lo = 0, hi = st->n_tasks; /* the last t with run_first[t] <= p */
  while (hi - lo > 1) {
    int32_t mid = lo + (hi - lo) / 2;
    if (st->run_first[mid] <= p) lo = mid;
    else hi = mid;
  }
  return lo;
}
/* Chooses the runs of reduce stage s (once, when it may first start; see
 * sched.h "coalesced reduces"): n_tasks becomes the number of runs. ENOMEM
 * leaves a task per partition. mu held. (job_scheduler.c) */
void fsh_job_plan_runs(fsh_sched_driver *d, sched_job *j, int s);
/* Coalesced maps (sched.h): KIND_MAP stage st's decoded maps[0, n_tasks)
 * become runs of up to maps_per_task (< 0 auto, with j's merge threshold
 * and slots_total alive slots) consecutive maps with contiguous rows:
 * maps[] rewritten in place, map ids the runs', n_tasks their number,
 * plan_maps the plan's count -- or left as they are (0 or 1, auto below
 * its threshold, nothing contiguous). Called at submit, before the stage's
 * metadata is made. (job_runs.c) */
void fsh_job_coalesce_maps(const sched_job *j, jstage *st, int32_t maps_per_task,
                           int64_t slots_total);
/* Every task of st done or skipped (a global limit's; sched.h). */
static inline bool tasks_over(const jstage *st) {
  return st->n_done + st->n_skipped == st->n_tasks;
}
/* A global limit's stage (job_limit.c, mu held): once the rows of its done
 * tasks (limit_ordered: of the done tasks 0 .. k) reach its limit, every
 * other pending or running task is skipped (running attempts cancelled,
 * the map skipped in the metadata, a counted task's figures taken out of
 * the stage's); when every task is done or skipped and the rows are short
 * (a lost output re-ran with fewer rows), the skipped tasks are pending
 * again. Call after a task's output is added, and before launching the
 * stage's tasks. Nothing for other stages. */
void fsh_job_limit_check(fsh_sched_driver *d, sched_job *j, int s);
/* Whether a limited stage's done tasks hold its rows (as above); true for
 * other stages. */
bool fsh_job_limit_reached(const jstage *st);
/* A shuffle kept after the job (the result the client reads) -- only once
 * the job succeeded: a failed job releases it too. */
static inline bool kept(const sched_job *j, const jstage *st) {
  return st->result && j->state == FSH_SCHED_JOB_SUCCEEDED;
}

/* Appends an event (its reason formatted); dropped if out of memory. */
void fsh_job_event_push(event_list *l, uint32_t stage, int32_t task, int32_t attempt,
                        const char *fmt, ...) FSH_PRINTF(5, 6);
/* Frees a job (NULL accepted); it must be unlinked. */
void fsh_job_free(sched_job *j);
/* The job / worker of that id, or NULL. */
sched_job *fsh_job_find(fsh_sched_driver *d, uint64_t id);
driver_worker *fsh_job_find_worker(fsh_sched_driver *d, uint64_t id);
/* Queues the cancel of an attempt that may still run on worker wid (see
 * job.c). */
void fsh_job_cancel_attempt(fsh_sched_driver *d, const sched_job *j, const jstage *st, int32_t t,
                            int32_t attempt, uint64_t wid);
/* The running attempts of producer st, whose consumers are all complete
 * (a global limit skipped the tasks that would read it), while its job
 * runs: cancelled (queued "cancel", slots released), their tasks pending
 * again (a stage brought back runs them). Whether there were any: then its
 * release must wait for a later round (job_scheduler.c release_round) --
 * sent first, an attempt opening its writer after the release would
 * publish an output no release follows (the store keeps those, for a stage
 * brought back). mu held. */
bool fsh_job_cancel_unneeded(fsh_sched_driver *d, sched_job *j, jstage *st);
/* Whether the tasks of st take the reduce slots (incremental reduces). */
bool fsh_job_reduce_slot(const sched_job *j, const jstage *st);
/* An attempt placed on worker wid ended: its slot is free again. */
void fsh_job_worker_release(fsh_sched_driver *d, uint64_t wid, bool reduce);
/* The index of the stage of that id, or -1. */
int fsh_job_stage_index(const sched_job *j, uint32_t id);
/* The task a worker's TaskRef (`len` protobuf bytes) names, for `action`'s
 * messages: decodes it and finds the job and stage (call with d->mu held).
 * 0 with *j, *s, *task, *attempt set; ENOENT for an unknown job, EINVAL for
 * a malformed ref or a stage / task / attempt the job does not have -- the
 * message "driver URI: ACTION: ..." in every case. */
int fsh_job_resolve_ref(fsh_sched_driver *d, const char *action, const uint8_t *data, size_t len,
                        sched_job **j, int *s, int32_t *task, int32_t *attempt, fsh_error *err);
/* The task type of a stage kind ("map-synthetic", ...). */
const char *fsh_job_kind_name(int kind);
/* The job is over: no more attempts (their late answers are ignored). */
void fsh_job_end(fsh_sched_driver *d, sched_job *j, fsh_sched_job_state state);
/* A stage is complete: all its tasks done; a producer also once every
 * stage reading it is (its consumers are complete). */
bool fsh_job_stage_complete(const sched_job *j, int s);
bool fsh_job_consumers_complete(const sched_job *j, int s);
/* Over, and its shuffles released. */
bool fsh_job_settled(const sched_job *j);

/* Reduce task p of the shuffle of stage `in` from its current outputs
 * (metadata: sizes approximate, so sizes_unknown), sources in map order
 * (a gather reads them in that order): t->sources and
 * t->locations allocated, the location strings borrowed from the metadata
 * (free the two arrays only). mu held. (job_scheduler.c) */
int fsh_job_reduce_task_of(const sched_job *j, int in, int32_t p, bool incremental,
                           fsh_reduce_task *t, fsh_error *err);
/* The same for the run [p, p + count) (count 1: the above). */
int fsh_job_reduce_run_of(const sched_job *j, int in, int32_t p, int32_t count, bool incremental,
                          fsh_reduce_task *t, fsh_error *err);

/* The "task" envelope of a kind's body with the TaskRef tag (merge: a
 * merge's id, 0 for a task). (job_scheduler.c) */
int fsh_job_envelope(const char *kind, const sched_job *j, const jstage *st, int32_t t,
                     int32_t attempt, uint32_t merge, const fsh_buffer *body, fsh_buffer **out,
                     fsh_error *err);

/* ---- the pre-shuffle merge (job_merge.c) --------------------------------
 * A stage with merge on holds each done map output back from its metadata
 * (jtask.held) until the worker holding it has merged it with others of
 * that stage ("merge-outputs", sent by the launchers like a task): then
 * the merged output is published in their place -- under the first part's
 * map id and an attempt reserved for it, the other parts as empty outputs
 * of their own attempts at the same location, so that reducers never see
 * a part and the lineage (a lost worker loses every part's map, re-run)
 * holds as for any output. A merge that fails publishes its parts
 * unmerged. The stage is complete once nothing is held. mu held. */

/* Whether a stage of that job merges (set at submit). */
void fsh_job_merge_setup(sched_job *j);
/* Holds a done attempt's output (copied, location set) instead of adding
 * it to the metadata. ENOMEM. */
int fsh_job_merge_hold(jstage *st, int32_t t, const fsh_map_output *out, fsh_error *err);
/* Plans this round's merges of stage s (and the task-wait polls of those
 * running): emit(ctx, ...) takes each call (the envelope, a new
 * reference; or a poll of wtask). Groups of one are published at once. */
typedef bool (*fsh_job_merge_emit_fn)(void *ctx, const sched_job *j, int s, const jmerge *m,
                                      const char *uri, fsh_buffer *env, bool poll);
void fsh_job_merges_plan(fsh_sched_driver *d, sched_job *j, int s, int64_t now,
                         fsh_job_merge_emit_fn emit, void *ctx);
/* The "task" call of merge id of stage s came back: rc 0 with the
 * worker's task id, or the call's error (the merge failed). */
void fsh_job_merge_sent(fsh_sched_driver *d, sched_job *j, int s, int32_t id, int rc,
                        uint64_t wtask, const char *error);
/* Merge id of stage s ended (task-done, or a task-wait answer): ok with
 * the merged output's PutResult, or error. A merge no longer active is
 * ignored (listed). */
void fsh_job_merge_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t id, bool ok,
                         const char *error, const uint8_t *answer, int64_t size);
/* The same with the parts the failed merge reported lost (TaskDone.lost):
 * on its worker, alive, those parts' maps are recomputed and the other
 * parts published unmerged. */
void fsh_job_merge_ended_lost(fsh_sched_driver *d, sched_job *j, int s, int32_t id, bool ok,
                              const char *error, const uint8_t *answer, int64_t size,
                              const fsh_lost_output *lost, int64_t n_lost);
/* Task t's held output or merge is gone with its worker (lineage), or the
 * merged output covering it is lost: forgotten, as is its merge (every
 * part of it is on that worker), running or published. */
void fsh_job_merge_forget(jstage *st, int32_t t);
/* The published merge of that id (its merged output current: tasks[0, n)
 * its parts), or NULL. */
const jmerge *fsh_job_merge_published(const jstage *st, int32_t id);
/* Done map t of st, whose output is gone: pending again, recomputed for
 * `reason` (job_lineage.c). mu held. */
void fsh_job_map_recompute(fsh_sched_driver *d, const sched_job *j, jstage *st, int32_t t,
                           const char *reason);
/* A live worker at uri answered a consumer that output (map_id, attempt) of
 * producer stage s is not held there or is unreadable: exactly that output
 * is lost (the metadata forgets it, the map task is pending again with the
 * reason, recomputed like any lost output) -- a merged output (or an empty
 * part of one) with every part it covers --, the running consumers that
 * read a non-empty block of it are retried, the worker stays alive. False
 * when this output cannot be dealt with alone (a released stage, an
 * attempt that is not the recorded one, a held output): the caller falls
 * back to losing the whole worker. True when it is already being
 * recomputed. mu held. */
bool fsh_job_output_lost(fsh_sched_driver *d, sched_job *j, int s, int64_t map_id,
                         int32_t attempt, const char *uri, const char *why);
/* The merge field of a TaskRef (0: a task, or malformed). */
uint32_t fsh_job_ref_merge(const uint8_t *data, size_t len);
/* The job ended: stage s's running merges are cancelled on their workers
 * (they end ECANCELED and leave nothing; their late answers are ignored). */
void fsh_job_merges_cancel(fsh_sched_driver *d, const sched_job *j, int s);
/* Frees a stage's merge state. */
void fsh_job_merge_free(jstage *st);

/* job_attempts.c: records the end of attempt `attempt` of task t of stage
 * s (ok: its answer; else error, the reason -- text for humans -- and
 * lost[0, n_lost), the inputs it reported lost, TaskDone.lost: not the
 * task's fault, those are lost, fsh_job_inputs_lost). _ended: no losses
 * known (the task-wait fallback). */
void fsh_job_attempt_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t t, int32_t attempt,
                           bool ok, const char *error, const uint8_t *answer, int64_t size);
void fsh_job_attempt_ended_lost(fsh_sched_driver *d, sched_job *j, int s, int32_t t,
                                int32_t attempt, bool ok, const char *error,
                                const uint8_t *answer, int64_t size, const fsh_lost_output *lost,
                                int64_t n_lost);
/* A task-wait answer of status 2 (shuffle.h: data[0, size) after the
 * status byte) from worker uri: attempt `attempt` of task t of stage s --
 * or, merge != 0, that merge -- failed with the outputs it reported lost
 * (a malformed one: a plain failure saying so). mu held. */
void fsh_job_attempt_failure(fsh_sched_driver *d, sched_job *j, int s, int32_t t,
                             int32_t attempt, int32_t merge, const char *uri,
                             const uint8_t *data, int64_t size);
/* A task of stage s reported lost[0, n) (why: its error): per worker
 * named, when it answered (not unreachable) and each of its outputs can be
 * lost alone (fsh_job_output_lost: a map of a stage s reads, not released,
 * not newer than recorded), exactly those are lost -- an older attempt's
 * is skipped (recomputed already) --; else the worker is declared dead
 * and everything it held is lost (fsh_sched_jobs_worker_lost). mu held. */
void fsh_job_inputs_lost(fsh_sched_driver *d, sched_job *j, int s, const fsh_lost_output *lost,
                         int64_t n, const char *why);

#endif
