/* worker_internal.h -- what the worker's files share: the DoGet source of a
 * shuffle ticket (worker_get.c) and the DoPut sink that writes a map output
 * into the store (worker_put.c); worker.c serves them. */
#ifndef FSH_WORKER_INTERNAL_H
#define FSH_WORKER_INTERNAL_H

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"

/* A source streaming the map outputs a ticket names (formats in
 * shuffle.h). ENOENT if one is not held, EINVAL for a malformed ticket. */
FSH_NODISCARD int fsh_worker_do_get(fsh_shuffle_store *store, const uint8_t *ticket,
                                    int64_t size, fsh_flight_source **out, fsh_error *err);

/* A sink writing one map output, named by the DoPut descriptor, into the
 * store; its PutResult is the map output's metadata. EINVAL for a
 * descriptor that is not a shuffle map-output path. */
FSH_NODISCARD int fsh_worker_put_sink(fsh_shuffle_store *store, const fsh_flight_descriptor *d,
                                      fsh_flight_sink **out, fsh_error *err);

/* Tasks run on threads of their own (worker_tasks.c): never on the Flight
 * server's pool threads, which must not wait on the network. */
typedef struct fsh_worker_tasks fsh_worker_tasks;
/* A task body: runs to the end; *answer on success (a new reference). */
typedef int (*fsh_worker_task_fn)(void *arg, fsh_buffer **answer, fsh_error *err);
FSH_NODISCARD int fsh_worker_tasks_new(fsh_worker_tasks **out);
/* Joins every task (they end by themselves: their fetches have deadlines). */
void fsh_worker_tasks_free(fsh_worker_tasks *t);
/* Starts fn(arg) on a new thread; free_arg(arg) when the task is forgotten
 * (also on error). *id names it for fsh_worker_tasks_poll. */
FSH_NODISCARD int fsh_worker_tasks_start(fsh_worker_tasks *t, fsh_worker_task_fn fn, void *arg,
                                         void (*free_arg)(void *arg), uint64_t *id,
                                         fsh_error *err);
/* Like fsh_worker_tasks_start; when the task ends, done_fn(done_ctx, tag,
 * ...) runs on its thread (tag copied); if it answers true the task is
 * forgotten (joined and freed by a later start or by free). */
FSH_NODISCARD int fsh_worker_tasks_start_tagged(fsh_worker_tasks *t, fsh_worker_task_fn fn,
                                                void *arg, void (*free_arg)(void *arg),
                                                const uint8_t *tag, int64_t tag_size,
                                                fsh_worker_task_done_fn done_fn, void *done_ctx,
                                                uint64_t *id, fsh_error *err);
/* Asks the running tasks whose tag is tag[0, tag_size) to stop: their
 * cancel flag is set; the task body sees it (fsh_worker_task_cancelled)
 * between batches and ends with ECANCELED. *n: how many were asked. */
void fsh_worker_tasks_cancel(fsh_worker_tasks *t, const uint8_t *tag, int64_t tag_size,
                             int64_t *n);
/* How many tasks are running now (started, not finished). */
int64_t fsh_worker_tasks_running(fsh_worker_tasks *t);
/* On a task's thread: whether its task was asked to stop (false on any
 * other thread, e.g. a task run outside a worker). */
bool fsh_worker_task_cancelled(void);
/* Never blocks. Running: *done false, 0. Finished: *done true and the
 * task's answer (moved) or its error; the task is then forgotten. ENOENT
 * for an id it does not know. With failure != NULL, a failed task that
 * reported map outputs lost answers 0 and *failure instead (its error and
 * those outputs, shuffle.h fsh_task_failure_decode). */
FSH_NODISCARD int fsh_worker_tasks_poll(fsh_worker_tasks *t, uint64_t id, bool *done,
                                        fsh_buffer **answer, fsh_error *err);
FSH_NODISCARD int fsh_worker_tasks_poll_failure(fsh_worker_tasks *t, uint64_t id, bool *done,
                                                fsh_buffer **answer, fsh_buffer **failure,
                                                fsh_error *err);

/* The built-in "merge-outputs" task kind (worker_merge.c): decode gives
 * its state over the worker's store. */
const fsh_worker_task_kind *fsh_worker_merge_kind(void);
FSH_NODISCARD int fsh_worker_merge_decode(fsh_shuffle_store *store, const uint8_t *body,
                                          int64_t size, void **state, fsh_error *err);

/* Test hooks of fsh_shuffle_store_merge, process-wide (set them before
 * any merge runs; NULL restores the defaults): whole_max, the largest
 * part whose data bytes are read at once (0: 64 MiB; larger parts are
 * read block by block); parts_open, called (with ctx) by every merge once
 * its parts are open, before it copies anything -- on the worker's task
 * thread, so fsh_worker_task_cancel_flag() is the merge's. Not for
 * production code: the tests of the merge only. */
typedef struct fsh_merge_test_hooks {
  int64_t whole_max;
  void (*parts_open)(void *ctx, const fsh_merge_task *t);
  void *ctx;
  int64_t *by_block; /* if set: += 1 for every part read block by block (not atomic) */
  int64_t small_block; /* blocks averaging fewer bytes are re-encoded (0: 64 KiB);
                          < 0: never (every block copied as stored) */
  bool no_splice;        /* re-encode by decode / concat / encode even where the
                            blocks could be spliced (fsh_ipc_splicer) */
  int64_t splice_target; /* a spliced block is written once its messages' bodies
                            reach this many bytes (0: the writer's 4 MiB) */
  int64_t *spliced;      /* if set: += 1 for every spliced block written (not atomic) */
} fsh_merge_test_hooks;
void fsh_merge_set_test_hooks(const fsh_merge_test_hooks *h);

#endif
