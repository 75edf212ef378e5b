/* test_placement.c -- the driver's placement by runs of task ids
 * (src/sched/placement.c): one round against a naive reading of its
 * contract, whole stages simulated round by round (tasks end in launch
 * order) with every worker alive, one dead and one slow, and against the
 * least-loaded placement it replaces (runs of consecutive ids per worker). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <flightshuffle/arrow.h>

#include "sched/placement.h"
#include "test.h"

/* Naive: the worker whose range holds t: of the live workers (dead[i]
 * false; dead may be NULL), the (t*A/T)-th. */
static int64_t owner_of(int64_t t, int64_t W, int64_t T, const bool *dead) {
  int64_t A = 0;
  for (int64_t i = 0; i < W; i++) A += !(dead && dead[i]);
  int64_t rank = t * A / T;
  for (int64_t i = 0; i < W; i++)
    if (!(dead && dead[i]) && rank-- == 0) return i;
  return -1;
}

/* One round, random free slots and pending tasks: checked against the
 * contract read naively (no ranges precomputed). */
static void one_round_contract(void) {
  uint64_t seed = 12345;
  for (int iter = 0; iter < 300; iter++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    int64_t W = 1 + (int64_t)(seed >> 33) % 7, T = (int64_t)(seed >> 40) % 97;
    int32_t free_slots[8];
    uint8_t *pending = malloc((size_t)T + 1);
    int32_t *out = malloc(((size_t)T + 1) * sizeof *out);
    for (int64_t i = 0; i < W; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      free_slots[i] = (int32_t)((seed >> 35) % 5) - 1; /* -1: dead */
    }
    bool dead[8];
    for (int64_t i = 0; i < W; i++) dead[i] = free_slots[i] < 0;
    int64_t n_pending = 0, total_free = 0;
    for (int64_t t = 0; t < T; t++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      pending[t] = (seed >> 37) % 3 != 0;
      n_pending += pending[t];
    }
    for (int64_t i = 0; i < W; i++) total_free += free_slots[i] > 0 ? free_slots[i] : 0;
    int64_t placed = -1;
    CHECK_EQ_INT(fsh_sched_place_runs(W, free_slots, T, pending, out, &placed), 0);
    CHECK_EQ_INT(placed, n_pending < total_free ? n_pending : total_free);
    int64_t per[8] = {0}, own[8] = {0};
    for (int64_t t = 0; t < T; t++) {
      if (out[t] < 0) continue;
      CHECK(pending[t]);
      CHECK(out[t] < W);
      per[out[t]]++;
      own[out[t]] += owner_of(t, W, T, dead) == out[t];
    }
    for (int64_t i = 0; i < W; i++) {
      CHECK(per[i] <= (free_slots[i] > 0 ? free_slots[i] : 0));
      /* its own range first: the lowest pending ids of it, as many as
       * its slots allow */
      int64_t in_range = 0, want = 0;
      for (int64_t t = 0; t < T; t++) in_range += owner_of(t, W, T, dead) == i && pending[t];
      want = in_range < free_slots[i] ? in_range : free_slots[i];
      if (want < 0) want = 0;
      CHECK_EQ_INT(own[i], want);
      int64_t seen = 0;
      for (int64_t t = 0; t < T && seen < want; t++)
        if (owner_of(t, W, T, dead) == i && pending[t]) {
          CHECK_MSG(out[t] == i, "W %lld T %lld: task %lld not given to its owner %lld",
                    (long long)W, (long long)T, (long long)t, (long long)i);
          seen++;
        }
    }
    free(pending);
    free(out);
  }
}

/* The first round of 1000 tasks on 4 workers with 2 slots each: the first
 * two ids of each quarter. */
static void first_round_by_quarters(void) {
  enum { W = 4, T = 1000 };
  int32_t free_slots[W] = {2, 2, 2, 2}, out[T];
  uint8_t pending[T];
  for (int t = 0; t < T; t++) pending[t] = 1;
  CHECK_EQ_INT(fsh_sched_place_runs(W, free_slots, T, pending, out, NULL), 0);
  for (int t = 0; t < T; t++) {
    bool first_two = t % 250 < 2;
    CHECK_EQ_INT(out[t], first_two ? t / 250 : -1);
  }
}

typedef int32_t (*policy_fn)(int64_t W, const int32_t *free_slots, int64_t T,
                             const uint8_t *pending, int32_t *out);

static int32_t policy_runs(int64_t W, const int32_t *free_slots, int64_t T,
                           const uint8_t *pending, int32_t *out) {
  int64_t placed = 0;
  if (fsh_sched_place_runs(W, free_slots, T, pending, out, &placed) != 0) return -1;
  return (int32_t)placed;
}

/* What the driver did before: tasks in id order, each to the least loaded
 * worker with a free slot (busy = slots - free). */
static int32_t policy_least_loaded(int64_t W, const int32_t *free_slots, int64_t T,
                                   const uint8_t *pending, int32_t *out) {
  int32_t left[16], placed = 0;
  for (int64_t i = 0; i < W; i++) left[i] = free_slots[i];
  for (int64_t t = 0; t < T; t++) out[t] = -1;
  for (int64_t t = 0; t < T; t++) {
    if (!pending[t]) continue;
    int64_t best = -1;
    for (int64_t i = 0; i < W; i++)
      if (left[i] > 0 && (best < 0 || left[i] > left[best])) best = i;
    if (best < 0) break;
    out[t] = (int32_t)best;
    left[best]--;
    placed++;
  }
  return placed;
}

/* Runs a stage of T tasks on W workers with `slots` each, round by round:
 * each round places, then ends the oldest running task (or, for a worker
 * whose slow != 0, lets it end only every slow-th turn). dead (-1: none) is
 * never free. ran[t]: the worker task t ran on. Returns the number of
 * runs: maximal sequences of consecutive ids on one worker. */
static int64_t simulate_dies(policy_fn policy, int64_t W, int32_t slots, int64_t T, int64_t dead,
                             int64_t dies_after, const int *slow, int32_t *ran);
static int64_t simulate(policy_fn policy, int64_t W, int32_t slots, int64_t T, int64_t dead,
                        const int *slow, int32_t *ran) {
  return simulate_dies(policy, W, slots, T, dead, 0, slow, ran);
}

/* As simulate, but worker `dead` works until dies_after tasks have ended
 * (0: dead from the start); then it dies and every task it ran or runs is
 * pending again (its outputs are lost). */
static int64_t simulate_dies(policy_fn policy, int64_t W, int32_t slots, int64_t T, int64_t dead,
                             int64_t dies_after, const int *slow, int32_t *ran) {
  uint8_t *pending = malloc((size_t)T), *ended = calloc((size_t)T, 1);
  int32_t *out = malloc((size_t)T * sizeof *out);
  /* launch order; a task is launched at most twice (again after a death) */
  int64_t *queue = malloc(2 * (size_t)T * sizeof *queue), qh = 0, qt = 0, done = 0, turn = 0;
  int32_t running[16] = {0}, free_slots[16];
  for (int64_t t = 0; t < T; t++) {
    pending[t] = 1;
    ran[t] = -1;
  }
  bool alive = dies_after > 0;
  while (done < T) {
    if (alive && done >= dies_after) { /* it dies: its tasks are to run again */
      alive = false;
      int64_t keep = qh;
      for (int64_t k = qh; k < qt; k++)
        if (ran[queue[k]] != dead) queue[keep++] = queue[k];
      qt = keep;
      for (int64_t t = 0; t < T; t++)
        if (ran[t] == dead) {
          done -= ended[t];
          ended[t] = 0;
          pending[t] = 1;
          ran[t] = -1;
        }
      running[dead] = 0;
    }
    for (int64_t i = 0; i < W; i++)
      free_slots[i] = i == dead && !alive ? -1 : slots - running[i];
    int32_t placed = policy(W, free_slots, T, pending, out);
    CHECK(placed >= 0);
    for (int64_t t = 0; t < T; t++) {
      if (out[t] < 0) continue;
      CHECK(pending[t] && (out[t] != dead || alive));
      pending[t] = 0;
      ran[t] = out[t];
      running[out[t]]++;
      queue[qt++] = t;
    }
    CHECK(qh < qt); /* something runs */
    if (qh == qt) break;
    /* the oldest running task whose worker may end one this turn */
    turn++;
    int64_t k = qh;
    while (k < qt && slow[ran[queue[k]]] && turn % slow[ran[queue[k]]] != 0) k++;
    if (k == qt) continue;
    int64_t t = queue[k];
    for (int64_t m = k; m > qh; m--) queue[m] = queue[m - 1];
    qh++;
    running[ran[t]]--;
    ended[t] = 1;
    done++;
  }
  int64_t runs = 0;
  for (int64_t t = 0; t < T; t++) runs += t == 0 || ran[t] != ran[t - 1];
  free(pending);
  free(ended);
  free(out);
  free(queue);
  return runs;
}

/* Checks the shape of a run: every task ran, never on dead; each live
 * worker ran a prefix of its own range (ranges over the live workers);
 * what others ran of a range is its suffix. */
static void check_ranges(int64_t W, int64_t T, int64_t dead, const int32_t *ran) {
  bool mask[16] = {0};
  if (dead >= 0) mask[dead] = true;
  for (int64_t t = 0; t < T; t++) CHECK(ran[t] >= 0 && ran[t] != dead);
  for (int64_t i = 0; i < W; i++) {
    int64_t lo = -1, hi = -1; /* its range [lo, hi) */
    for (int64_t t = 0; t < T; t++)
      if (owner_of(t, W, T, mask) == i) {
        if (lo < 0) lo = t;
        hi = t + 1;
      }
    if (lo < 0) continue;
    bool stolen = false;
    for (int64_t t = lo; t < hi; t++) {
      if (ran[t] != i) stolen = true;
      else CHECK_MSG(!stolen, "task %lld of worker %lld's range ran on it after a stolen one",
                     (long long)t, (long long)i);
    }
  }
}

static void stage_all_alive(void) {
  enum { W = 4, T = 1000 };
  static int32_t ran[T], ran_old[T];
  int slow[W] = {0};
  int64_t runs = simulate(policy_runs, W, 2, T, -1, slow, ran);
  check_ranges(W, T, -1, ran);
  int64_t runs_old = simulate(policy_least_loaded, W, 2, T, -1, slow, ran_old);
  printf("  4 workers, 1000 tasks: runs %lld (least loaded: %lld)\n", (long long)runs,
         (long long)runs_old);
  /* equal workers: each runs exactly its range */
  CHECK_EQ_INT(runs, W);
  CHECK(runs_old > 10 * W);
}

static void stage_dead_worker(void) {
  enum { W = 4, T = 403 };
  static int32_t ran[T];
  int slow[W] = {0};
  int64_t runs = simulate(policy_runs, W, 2, T, 1, slow, ran);
  check_ranges(W, T, 1, ran);
  printf("  worker 1 dead: runs %lld\n", (long long)runs);
  /* the 3 live workers share its ids: each runs a third of all, in one run */
  CHECK_EQ_INT(runs, W - 1);
  int64_t per[W] = {0};
  for (int t = 0; t < T; t++) per[ran[t]]++;
  CHECK_EQ_INT(per[1], 0);
  /* the others share its range: no one idles while another has work */
  for (int i = 0; i < W; i++)
    if (i != 1) CHECK_MSG(per[i] > T / 4, "worker %d ran %lld", i, (long long)per[i]);
}

/* A worker dies after a quarter of the tasks ended: what it ran is lost
 * and runs again, on the live workers, whose ranges now split all ids
 * three ways. */
static void stage_worker_dies_midway(void) {
  enum { W = 4, T = 400 };
  static int32_t ran[T], ran_old[T];
  int slow[W] = {0};
  int64_t runs = simulate_dies(policy_runs, W, 2, T, 2, T / 4, slow, ran);
  int64_t runs_old = simulate_dies(policy_least_loaded, W, 2, T, 2, T / 4, slow, ran_old);
  printf("  worker 2 dies midway: runs %lld (least loaded: %lld)\n", (long long)runs,
         (long long)runs_old);
  int64_t per[W] = {0};
  for (int t = 0; t < T; t++) {
    CHECK(ran[t] >= 0 && ran[t] != 2);
    if (ran[t] >= 0) per[ran[t]]++;
  }
  for (int i = 0; i < W; i++)
    if (i != 2) CHECK_MSG(per[i] > T / 4, "worker %d ran %lld", i, (long long)per[i]);
  /* before: one range each; after: each live worker's new range holds the
   * end of its old one, at most one piece another worker ran before the
   * death, and what it may steal at the end */
  CHECK_MSG(runs <= 3 * W, "%lld runs", (long long)runs);
  CHECK(runs * 10 < runs_old);
}

static void stage_slow_worker(void) {
  enum { W = 3, T = 300 };
  static int32_t ran[T];
  int slow[W] = {0, 0, 4}; /* worker 2 ends a task every 4th turn at most */
  int64_t runs = simulate(policy_runs, W, 2, T, -1, slow, ran);
  check_ranges(W, T, -1, ran);
  int64_t per[W] = {0};
  for (int t = 0; t < T; t++) per[ran[t]]++;
  printf("  worker 2 slow: runs %lld, tasks %lld %lld %lld\n", (long long)runs,
         (long long)per[0], (long long)per[1], (long long)per[2]);
  CHECK(per[2] < T / 3); /* the others took part of its range */
  CHECK(per[0] > T / 3 && per[1] > T / 3);
}

static void no_workers_or_tasks(void) {
  int32_t free_slots[1] = {2}, out[3] = {7, 7, 7};
  uint8_t pending[3] = {1, 1, 1};
  int64_t placed = -1;
  CHECK_EQ_INT(fsh_sched_place_runs(0, free_slots, 3, pending, out, &placed), 0);
  CHECK_EQ_INT(placed, 0);
  for (int t = 0; t < 3; t++) CHECK_EQ_INT(out[t], -1);
  CHECK_EQ_INT(fsh_sched_place_runs(1, free_slots, 0, pending, out, &placed), 0);
  CHECK_EQ_INT(placed, 0);
}

static void out_of_memory(void) {
  int32_t free_slots[2] = {2, 2}, out[4] = {7, 7, 7, 7};
  uint8_t pending[4] = {1, 1, 1, 1};
  fsh_alloc_fail_after(1, false);
  CHECK_EQ_INT(fsh_sched_place_runs(2, free_slots, 4, pending, out, NULL), ENOMEM);
  fsh_alloc_fail_after(0, false);
  for (int t = 0; t < 4; t++) CHECK_EQ_INT(out[t], 7); /* untouched */
}

FSH_TEST_MAIN(TEST(one_round_contract), TEST(first_round_by_quarters), TEST(stage_all_alive),
              TEST(stage_dead_worker), TEST(stage_worker_dies_midway),
              TEST(stage_slow_worker), TEST(no_workers_or_tasks),
              TEST(out_of_memory))
