/* placement.c -- placement of a stage's pending tasks by runs of task
 * ids (placement.h): the A live workers own ranges of T/A consecutive
 * task ids; each takes its own range front to back and, once it is
 * exhausted, steals from the back of the fullest range. */
#include <errno.h>

#include <flightshuffle/arrow.h>

#include "sched/placement.h"

int fsh_sched_place_runs(int64_t n, const int32_t *free_slots, int64_t T, const uint8_t *pending,
                         int32_t *out, int64_t *placed) {
  int64_t count = 0, A = 0;
  if (placed) *placed = 0;
  for (int64_t i = 0; i < n; i++) A += free_slots[i] >= 0;
  if (A == 0 || T <= 0) {
    for (int64_t t = 0; t < T; t++) out[t] = -1;
    return 0;
  }
  /* per range r (of live worker who[r]): its pending tasks not yet given
   * out lie in [lo[r], hi[r]) and there are left[r] of them */
  int64_t *lo = fsh_malloc((size_t)A * 5 * sizeof *lo);
  if (!lo) return ENOMEM;
  int64_t *hi = lo + A, *left = lo + 2 * A, *free = lo + 3 * A, *who = lo + 4 * A;
  for (int64_t t = 0; t < T; t++) out[t] = -1;
  for (int64_t i = 0, r = 0; i < n; i++) {
    if (free_slots[i] < 0) continue; /* dead: no range */
    who[r] = i;
    free[r] = free_slots[i];
    lo[r] = (r * T + A - 1) / A; /* the least t with t*A/T == r */
    hi[r] = ((r + 1) * T + A - 1) / A;
    left[r] = 0;
    for (int64_t t = lo[r]; t < hi[r]; t++) left[r] += pending[t] != 0;
    r++;
  }
  /* pass 0: every worker its own range; pass 1: the thieves */
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t r = 0; r < A; r++) {
      while (free[r] > 0) {
        int64_t v = r;
        if (pass == 1)
          for (int64_t k = 0; k < A; k++)
            if (left[k] > left[v]) v = k;
        if (left[v] == 0) break;
        int64_t t;
        if (pass == 0) {
          while (!pending[lo[v]] || out[lo[v]] >= 0) lo[v]++;
          t = lo[v]++;
        } else {
          while (!pending[hi[v] - 1] || out[hi[v] - 1] >= 0) hi[v]--;
          t = --hi[v];
        }
        out[t] = (int32_t)who[r];
        left[v]--;
        free[r]--;
        count++;
      }
    }
  }
  fsh_free(lo);
  if (placed) *placed = count;
  return 0;
}
