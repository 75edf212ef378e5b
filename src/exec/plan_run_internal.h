/* plan_run_internal.h -- what the files running a plan share: the run's
 * context and each exchange's state (plan_run.c), the operator streams and
 * opening a node's partition (plan_ops.c), running an exchange's map
 * tasks (plan_exchange.c). */
#ifndef FSH_PLAN_RUN_INTERNAL_H
#define FSH_PLAN_RUN_INTERNAL_H

#include "exec/plan_internal.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct xstate {
  bool done;
  bool released; /* every reader done: released early (release_consumed) */
  fsh_shuffle_spec spec;
  int64_t n_outputs;
  fsh_map_output *outputs;
} xstate;

typedef struct run_ctx {
  const fsh_plan *p;
  bool reference;
  fsh_plan_merge merge;
  int64_t merge_threshold;
  uint64_t first_shuffle_id;
  fsh_shuffle_backend *backend;
  fsh_shuffle_backend *const *backends; /* [n_backends]: tasks placed round-robin */
  int n_backends;
  xstate *x; /* [n_nodes] */
  fsh_plan_result *res;
  int n_threads;      /* map tasks at once */
  int64_t op_memory;  /* budget of each sort / aggregate / join instance (0: unbounded) */
  const char *const *spill_dirs;
  int n_spill_dirs;
  struct node_spill {
    int64_t instances, files, bytes;
  } *node_spill;      /* [n_nodes] when op_memory > 0 */
  pthread_mutex_t mu; /* guards res's counters and node_spill */
  /* a plan-fragment task (plan_task.c): what it read of each input
   * exchange ([n_nodes]; NULL otherwise) */
  struct plan_read {
    int opens;
    bool complete;
    int64_t rows;
    uint64_t checksum;
  } *reads;
  /* a plan-fragment task's cancel flag (NULL: none): checked before every
   * batch an operator gives */
  const atomic_bool *cancel;
} run_ctx;

/* ECANCELED ("cancelled ...") if flag f (may be NULL) is set, else 0. */
int plan_cancelled(const atomic_bool *f, fsh_error *err);
/* The backend that map output / reduce partition i goes through. */
fsh_shuffle_backend *plan_backend_of(const run_ctx *c, int64_t i);
/* The partitions node n runs in (1 in the reference mode). */
int32_t plan_parts_of(const run_ctx *c, const plan_node *n);
/* Prefixes err with the node's operator name, unless the message already
 * starts with it (the physical nodes of one operator share its name).
 * Returns rc. */
int plan_name_fail(const plan_node *n, int rc, fsh_error *err);

/* Opens partition `part` of node `node` as a stream into *out (an
 * exchange: runs it first if it has not run; its reduce partition). */
int plan_open_stream(run_ctx *c, int node, int32_t part, fsh_batch_stream *out, fsh_error *err);
/* Wraps *st (an input exchange's partition, node) so that c->reads[node]
 * counts its rows and row checksum and whether it was read to its end;
 * *st released on error. */
int plan_count_reads(run_ctx *c, int node, fsh_batch_stream *st, fsh_error *err);
/* Drains stream in into *held (*n_held non-empty batches, the caller's:
 * given also on error, to release). */
int plan_drain(fsh_batch_stream *in, fsh_batch ***held, int64_t *n_held, fsh_error *err);

/* Runs exchange x's map tasks (and the exchanges they read that have not
 * run), then releases every exchange nobody reads any more. */
int plan_run_exchange(run_ctx *c, const plan_node *x, fsh_error *err);
/* What a scatter task knows of every map of a range / into_partitions
 * exchange: the range boundaries (from every map's sample; NULL: no rows)
 * or every map's row count. */
typedef struct plan_scatter {
  fsh_batch *bounds;
  const int64_t *counts;
  int32_t n_counts;
} plan_scatter;

/* One task of a stage, alone (a plan-fragment task, plan_task.c): map
 * task `part` of exchange x, partitioned as plan_run_exchange does, into
 * map output (map_id, attempt) of spec through c->backend; sums
 * ([spec->n_partitions], zeroed by the caller) gets the row checksum of
 * each partition written. A range or into_partitions exchange is written
 * by a scatter task (scatter given: x's input is the staged shuffle,
 * partition `part` this map's rows), the others never (scatter NULL). */
int plan_exchange_task(run_ctx *c, const plan_node *x, const fsh_shuffle_spec *spec,
                       int32_t part, int64_t map_id, int32_t attempt, fsh_map_output *out,
                       uint64_t *sums, const plan_scatter *scatter, fsh_error *err);
/* The staging task of a range / into_partitions exchange x: every row of
 * x's input partition `part` into partition `part` of spec (maps + 1
 * partitions), and (range) the map's sample -- as plan_run_exchange takes
 * it -- into the last partition. A stage its scatter computes again
 * (plan_range_recomputes over c's plan) writes only the sample. *rows_in:
 * the rows of its input partition (staged or not). */
int plan_staged_task(run_ctx *c, const plan_node *x, const fsh_shuffle_spec *spec,
                     int32_t part, int64_t map_id, int32_t attempt, fsh_map_output *out,
                     uint64_t *sums, int64_t *rows_in, fsh_error *err);
/* The range boundaries of x's n_out partitions from the maps' samples
 * (samples[0, n), in map order; *out NULL when there is no row). */
int plan_range_bounds(const plan_node *x, fsh_batch **samples, int64_t n, int32_t n_out,
                      fsh_batch **out, fsh_error *err);
/* The result stage's task: partition `part` of node root, every row into
 * partition `part` of spec (map output map_id, attempt), sums as above. */
int plan_result_task(run_ctx *c, int root, const fsh_shuffle_spec *spec, int32_t part,
                     int64_t map_id, int32_t attempt, fsh_map_output *out, uint64_t *sums,
                     fsh_error *err);
/* Adds the order-independent row checksum of b to *sum: a hash of each
 * row's values (every column), summed mod 2^64; the definition is atop
 * plan_checksum.c. On error *sum is unchanged. */
int plan_row_checksum(const fsh_batch *b, uint64_t *sum, fsh_error *err);
/* The same per row, each row's hash added to sums[partition_of_row[i]]:
 * equal to plan_row_checksum of each fsh_scatter part into its slot, in
 * one pass over b (a map task writing rows straight into its writer). On
 * error sums are unchanged. */
int plan_row_checksum_parts(const fsh_batch *b, const int32_t *partition_of_row,
                            uint64_t *sums, fsh_error *err);
/* The fsh_plan_sink that collects a result into out (its batches,
 * rows, partition_batches[n_partitions], allocated by the caller; a
 * partition that begins again loses what it had). cap: out->batches'
 * capacity. */
typedef struct plan_collect {
  fsh_plan_result *out;
  int64_t cap;
} plan_collect;
int plan_collect_sink(void *arg, int32_t part, fsh_batch *b, fsh_error *err);
/* Releases exchange xs's shuffle on every backend. */
int plan_release_shuffle(run_ctx *c, const xstate *xs, fsh_error *err);

#endif
