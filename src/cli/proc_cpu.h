/* proc_cpu.h -- CPU seconds (user + system) of another process, from
 * /proc/<pid>/stat: what the benchmarks that time other processes share
 * (`flightshuffle bench ops` its workers, bench/flight/bench_flight its
 * server process). Header-only: the CLI and the benchmarks both include it
 * (each with src/ on its include path). */
#ifndef FSH_CLI_PROC_CPU_H
#define FSH_CLI_PROC_CPU_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* User + system seconds of process pid so far (fields 14 and 15 of
 * /proc/<pid>/stat, counted after the parenthesised command name, which
 * may hold spaces); 0 if the process is gone or the file unreadable. */
static inline double cli_proc_cpu_seconds(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  unsigned long long ut = 0, st = 0;
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

#endif
