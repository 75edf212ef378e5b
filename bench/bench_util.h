/* bench_util.h -- what every benchmark shares: a monotonic clock, CPU
 * time, and min / median / max GB/s over runs. Header-only (each bench is one file). */
#ifndef FSH_BENCH_UTIL_H
#define FSH_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct bench_stats {
  double min, med, max; /* GB/s */
} bench_stats;

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds on a CPU-time clock: CLOCK_PROCESS_CPUTIME_ID (the process,
 * user + system: on a shared machine, printed beside wall-clock GB/s) or
 * CLOCK_THREAD_CPUTIME_ID (the calling thread). */
static inline double bench_cpu_s(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* GB/s statistics from per-run seconds for `bytes` bytes each run (sorts
 * secs in place). */
static inline bench_stats bench_summarize(double *secs, int runs, double bytes) {
  qsort(secs, (size_t)runs, sizeof *secs, bench_cmp_double);
  bench_stats s = {bytes / secs[runs - 1] / 1e9, bytes / secs[runs / 2] / 1e9,
                   bytes / secs[0] / 1e9};
  return s;
}

/* One table row: min / median / max and the median's ratio to a baseline. */
static inline void bench_print(const char *name, bench_stats s, double baseline_med,
                               const char *baseline_name) {
  printf("  %-34s %7.2f %7.2f %7.2f GB/s   %5.2fx %s\n", name, s.min, s.med, s.max,
         s.med / baseline_med, baseline_name);
}

#endif
