/* placement.h -- the driver's placement of a stage's tasks by runs of
 * task ids (placement.c): a pure function over free slots and pending
 * tasks, used by job_scheduler.c. Private to src/sched. */
#ifndef FSH_SCHED_PLACEMENT_H
#define FSH_SCHED_PLACEMENT_H

#include <stdint.h>

/* Gives pending tasks to workers with free slots by runs of task ids, so
 * that consecutive ids land on one worker (what a plan stage's pre-shuffle
 * merge can merge). Task t of T belongs to the range of worker t*W/T (of
 * W workers, in a stable order, dead ones included). Each worker i with
 * free_slots[i] > 0 first takes the lowest pending tasks of its own range;
 * a worker whose range has none left steals from the back of the range
 * with most pending tasks left (ties: the lowest worker), so the owner
 * and the thief each keep a run. A dead or busy worker (free_slots 0) has
 * its range taken that way.
 * pending[t] != 0: task t waits for a worker. out[t] is set to the worker
 * index of each task placed and to -1 for every other task; *placed (may
 * be NULL) counts them. 0, or ENOMEM (out untouched). */
int fsh_sched_place_runs(int64_t n_workers, const int32_t *free_slots, int64_t n_tasks,
                         const uint8_t *pending, int32_t *out, int64_t *placed);

#endif
