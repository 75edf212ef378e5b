/* placement.c -- placement of a stage's pending tasks by runs of task
 * ids (placement.h): worker i owns the range of tasks t with t*W/T == i,
 * takes its own range front to back, and steals from the back of the
 * fullest range once its own is exhausted. */
#include <errno.h>

#include <flightshuffle/arrow.h>

#include "sched/placement.h"

int fsh_sched_place_runs(int64_t n, const int32_t *free_slots, int64_t T, const uint8_t *pending,
                         int32_t *out, int64_t *placed) {
  int64_t count = 0;
  if (placed) *placed = 0;
  if (n <= 0 || T <= 0) {
    for (int64_t t = 0; t < T; t++) out[t] = -1;
    return 0;
  }
  /* per range i, its pending tasks not yet given out lie in [lo[i], hi[i])
   * and there are left[i] of them */
  int64_t *lo = fsh_malloc((size_t)n * 4 * sizeof *lo);
  if (!lo) return ENOMEM;
  int64_t *hi = lo + n, *left = lo + 2 * n, *free = lo + 3 * n;
  for (int64_t t = 0; t < T; t++) out[t] = -1;
  for (int64_t i = 0; i < n; i++) {
    lo[i] = (i * T + n - 1) / n; /* the least t with t*n/T == i */
    hi[i] = ((i + 1) * T + n - 1) / n;
    left[i] = 0;
    for (int64_t t = lo[i]; t < hi[i]; t++) left[i] += pending[t] != 0;
    free[i] = free_slots[i] > 0 ? free_slots[i] : 0;
  }
  /* pass 0: every worker its own range; pass 1: the thieves */
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t i = 0; i < n; i++) {
      while (free[i] > 0) {
        int64_t v = i;
        if (pass == 1)
          for (int64_t k = 0; k < n; k++)
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
        out[t] = (int32_t)i;
        left[v]--;
        free[i]--;
        count++;
      }
    }
  }
  fsh_free(lo);
  if (placed) *placed = count;
  return 0;
}
