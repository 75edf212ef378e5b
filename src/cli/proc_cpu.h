/* proc_cpu.h -- CPU seconds (user + system) and page faults of another process, from
 * /proc/<pid>/stat: what the benchmarks that time other processes share
 * (`flightshuffle bench ops` its workers, bench/flight/bench_flight its
 * server process). Header-only: the CLI and the benchmarks both include it
 * (each with src/ on its include path). */
#ifndef FSH_CLI_PROC_CPU_H
#define FSH_CLI_PROC_CPU_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The numeric fields of /proc/<pid>/stat from field 3 (state) on, counted
 * after the parenthesised command name (which may hold spaces): f[0] is
 * field 4 (ppid) ... f[k] is field k + 4. How many were read; 0 if the
 * process is gone or the file unreadable. */
static inline int cli_proc_stat_fields(pid_t pid, unsigned long long *f, int max) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *fp = fopen(path, "r");
  if (!fp) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  if (!p || !(p = strchr(p + 2, ' '))) return 0; /* past the state */
  int k = 0;
  while (k < max) {
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p) break;
    f[k++] = v;
    p = end;
  }
  return k;
}

/* User + system seconds of process pid so far (fields 14 and 15); 0 if
 * unknown. */
static inline double cli_proc_cpu_seconds(pid_t pid) {
  unsigned long long f[12];
  if (cli_proc_stat_fields(pid, f, 12) < 12) return 0;
  return (double)(f[10] + f[11]) / (double)sysconf(_SC_CLK_TCK);
}

/* Minor + major page faults of process pid so far (fields 10 and 12); 0
 * if unknown. */
static inline double cli_proc_fault_count(pid_t pid) {
  unsigned long long f[9];
  if (cli_proc_stat_fields(pid, f, 9) < 9) return 0;
  return (double)(f[6] + f[8]);
}

#endif
