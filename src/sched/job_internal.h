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
enum { T_PENDING = 0, T_RUNNING = 1, T_DONE = 2 };

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
  fsh_fragment_read *reads;     /* KIND_PLAN: what the done attempt read (owned) */
  int32_t n_reads;
  int64_t fetched;              /* KIND_PLAN: bytes of the input partitions it read */
  fsh_fragment_stats spill;     /* KIND_PLAN: what its operators spilled */
} jtask;

typedef struct jstage {
  uint32_t id;
  int kind;
  int32_t n_tasks, n_done;
  jtask *tasks;
  fsh_map_task *maps; /* KIND_MAP: the decoded bodies */
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
  int64_t first_ms, last_ms; /* first start, last end */
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

/* job_attempts.c: records the end of attempt `attempt` of task t of stage
 * s (ok: its answer; else error, the reason). */
void fsh_job_attempt_ended(fsh_sched_driver *d, sched_job *j, int s, int32_t t, int32_t attempt,
                           bool ok, const char *error, const uint8_t *answer, int64_t size);

#endif
