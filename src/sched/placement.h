/* placement.h -- the driver's placement of a stage's tasks by runs of
 * task ids (placement.c): a pure function over free slots and pending
 * tasks, used by job_scheduler.c. Private to src/sched. */
#ifndef FSH_SCHED_PLACEMENT_H
#define FSH_SCHED_PLACEMENT_H

#include <stdint.h>

/* Gives pending tasks to workers with free slots by runs of task ids, so
 * that consecutive ids land on one worker (what a plan stage's pre-shuffle
 * merge can merge). free_slots[i] of worker i (of n, in a stable order):
 * < 0 dead, 0 busy (or not to be used now), else its free slots. The A
 * live (not dead) workers own, in their order, ranges of consecutive ids:
 * task t of T is in the range of the (t*A/T)-th. Each worker with free
 * slots first takes the lowest pending tasks of its own range; one whose
 * range has none left steals from the back of the range with most pending
 * tasks left (ties: the first), so owner and thief each keep a run. A busy
 * worker's range is taken that way if it falls behind; a dead worker's
 * ids are shared out by the ranges of the live ones.
 * pending[t] != 0: task t waits for a worker. out[t] is set to the worker
 * index of each task placed and to -1 for every other task; *placed (may
 * be NULL) counts them. 0, or ENOMEM (out untouched). */
int fsh_sched_place_runs(int64_t n_workers, const int32_t *free_slots, int64_t n_tasks,
                         const uint8_t *pending, int32_t *out, int64_t *placed);

#endif
