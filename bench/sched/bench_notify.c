/* bench_notify.c -- the worker's CPU per task-done notice
 * (fsh_sched_notify_task_done, a DoAction "task-done" to the driver over
 * the notifier's one long-lived client), against a forked stand-in driver
 * that answers every DoAction after a set delay. Measured on the calling
 * thread (CLOCK_THREAD_CPUTIME_ID) and the whole process (getrusage: gRPC's
 * own threads included), per notice, in three cases:
 *
 *   baseline  one thread, notices back to back, the answer at once
 *   delay     one thread, the answer after --delay-us (what a busy driver
 *             does at 1000 x 1000: 5-8 ms, bench/shuffle/NOTIFY.md)
 *   fresh     as delay, each notice from a new thread (as a worker's task
 *             thread: one per task, notifying once as it ends)
 *
 * The stand-in answers --results empty Results (default 1; the real
 * driver answers "task-done" with none, a worker "locate" with one).
 * The stand-in only counts the bodies it got; verified = every notice was
 * answered (fsh_sched_notify_task_done returned true) and the stand-in
 * received exactly as many "task-done" bodies as were sent.
 *
 *   build/bench_notify [--notices N] [--delay-us D] [--runs R] [--results 0|1]
 *
 * Ends with one machine-readable `result:` line. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/flight.h>
#include <flightshuffle/sched.h>

typedef struct shared { /* MAP_SHARED between the bench and the stand-in */
  atomic_int delay_us;
  atomic_int results; /* empty Results per answer */
  atomic_llong received;
} shared;

static shared *sh;

static int standin_action(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                          fsh_flight_result_list *out, fsh_error *err) {
  (void)ctx, (void)call, (void)out;
  if (strcmp(a->type, "task-done") != 0) return fsh_error_set(err, EINVAL, "not task-done");
  int d = atomic_load(&sh->delay_us);
  if (d > 0) usleep((useconds_t)d);
  atomic_fetch_add(&sh->received, 1);
  for (int i = atomic_load(&sh->results); i > 0; i--)
    FSH_RETURN_NOT_OK(fsh_flight_result_list_push(out, "", 0));
  return 0;
}

static double clock_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double process_cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static fsh_sched_notifier *notifier;
/* a TaskRef-like tag and a map answer of a plausible size (the stand-in
 * does not decode them) */
static const uint8_t tag[] = {8, 1, 16, 2, 24, 3, 32, 4};
static uint8_t answer[120];
static atomic_llong answered;
static long long switches; /* the calling threads' context switches (joined one at a time) */

static long thread_switches(void) {
  struct rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw + u.ru_nivcsw;
}

static double notify_once(void) {
  long s0 = thread_switches();
  double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  if (fsh_sched_notify_task_done(notifier, tag, sizeof tag, 0, NULL, answer, sizeof answer))
    atomic_fetch_add(&answered, 1);
  double cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  switches += thread_switches() - s0;
  return cpu;
}

static double fresh_cpu; /* the notices' threads' CPU, summed (joined one at a time) */
static void *fresh_main(void *arg) {
  (void)arg;
  fresh_cpu += notify_once();
  return NULL;
}

typedef struct sample {
  double thread_us, process_us, wall_us, switches; /* per notice */
} sample;

static sample run_case(int kind, int n) {
  fresh_cpu = 0;
  switches = 0;
  double thread = 0, p0 = process_cpu_s(), w0 = clock_s(CLOCK_MONOTONIC);
  for (int i = 0; i < n; i++) {
    if (kind < 2) {
      thread += notify_once();
    } else {
      pthread_t t;
      if (pthread_create(&t, NULL, fresh_main, NULL) != 0) {
        fprintf(stderr, "bench_notify: pthread_create failed\n");
        exit(1);
      }
      pthread_join(t, NULL);
    }
  }
  if (kind == 2) thread = fresh_cpu;
  double p1 = process_cpu_s(), w1 = clock_s(CLOCK_MONOTONIC);
  return (sample){thread / n * 1e6, (p1 - p0) / n * 1e6, (w1 - w0) / n * 1e6,
                  (double)switches / n};
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  int n = 1000, delay_us = 5000, runs = 3, results = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--notices") == 0) n = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--delay-us") == 0) delay_us = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--results") == 0) results = atoi(argv[i + 1]);
    else {
      fprintf(stderr,
              "usage: bench_notify [--notices N] [--delay-us D] [--runs R] [--results 0|1]\n");
      return 2;
    }
  }
  if (n < 1 || runs < 1 || runs > 64 || delay_us < 0 || results < 0 || results > 100) {
    fprintf(stderr, "bench_notify: bad arguments\n");
    return 2;
  }
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  atomic_init(&sh->delay_us, 0);
  atomic_init(&sh->received, 0);
  atomic_init(&sh->results, results);
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) { /* the stand-in driver: serves until killed */
    fsh_error err;
    fsh_flight_server_options so = {.listen = "127.0.0.1:0"};
    fsh_flight_handlers h = {.do_action = standin_action};
    fsh_flight_server *s = NULL;
    int port = -1;
    if (fsh_flight_server_start(&so, &h, &s, &err) != 0)
      fprintf(stderr, "bench_notify: stand-in driver: %s\n", err.message);
    else
      port = fsh_flight_server_port(s);
    if (write(pipefd[1], &port, sizeof port) != (ssize_t)sizeof port || port < 0) _exit(1);
    for (;;) pause();
  }
  int port = -1;
  if (read(pipefd[0], &port, sizeof port) != (ssize_t)sizeof port || port < 0) {
    fprintf(stderr, "bench_notify: the stand-in driver did not start\n");
    return 1;
  }
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", port);
  fsh_error err;
  if (fsh_sched_notifier_new(uri, NULL, &notifier, &err) != 0) {
    fprintf(stderr, "bench_notify: %s\n", err.message);
    kill(pid, SIGKILL);
    return 1;
  }
  fsh_sched_notifier_set_worker(notifier, "grpc://127.0.0.1:1", false);
  memset(answer, 7, sizeof answer);
  long long sent = 0;
  for (int i = 0; i < 200; i++, sent++) (void)notify_once(); /* warm-up */

  static const char *names[3] = {"baseline", "delay", "fresh"};
  sample s[3][64];
  for (int r = 0; r < runs; r++) /* the cases interleaved, run by run */
    for (int k = 0; k < 3; k++) {
      atomic_store(&sh->delay_us, k == 0 ? 0 : delay_us);
      s[k][r] = run_case(k, k == 0 ? n : (n + 4) / 5); /* fewer when each waits */
      sent += k == 0 ? n : (n + 4) / 5;
    }
  fsh_sched_notifier_free(notifier);
  long long received = atomic_load(&sh->received);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);

  printf("bench_notify: %d notices a run (%d with a delay), answer delay %d us, %d result%s an "
         "answer, %d runs\n", n, (n + 4) / 5, delay_us, results, results == 1 ? "" : "s", runs);
  printf("  %-9s %26s %26s %26s %8s  (per notice: us min/median/max; context switches of "
         "the calling thread, median)\n", "", "calling thread CPU", "process CPU", "wall",
         "switches");
  double med[3][3];
  for (int k = 0; k < 3; k++) {
    double v[3][64], sw[64];
    for (int r = 0; r < runs; r++) {
      sw[r] = s[k][r].switches;
      v[0][r] = s[k][r].thread_us;
      v[1][r] = s[k][r].process_us;
      v[2][r] = s[k][r].wall_us;
    }
    printf("  %-9s", names[k]);
    for (int m = 0; m < 3; m++) {
      double lo = v[m][0], hi = v[m][0];
      for (int r = 1; r < runs; r++) {
        lo = v[m][r] < lo ? v[m][r] : lo;
        hi = v[m][r] > hi ? v[m][r] : hi;
      }
      med[k][m] = median(v[m], runs);
      printf(" %8.1f/%8.1f/%8.1f", lo, med[k][m], hi);
    }
    printf(" %8.1f\n", median(sw, runs));
  }
  bool verified = atomic_load(&answered) == sent && received == sent;
  printf("  thread CPU vs baseline: delay %.2fx, fresh %.2fx; %lld of %lld answered, %lld "
         "received\n", med[1][0] / med[0][0], med[2][0] / med[0][0],
         (long long)atomic_load(&answered), sent, received);
  printf("result: name=bench_notify notices=%d delay_us=%d results=%d runs=%d "
         "baseline_thread_us=%.1f baseline_process_us=%.1f baseline_wall_us=%.1f "
         "delay_thread_us=%.1f fresh_thread_us=%.1f fresh_process_us=%.1f delay_vs_baseline=%.2f "
         "fresh_vs_baseline=%.2f verified=%s\n", n, delay_us, results, runs, med[0][0], med[0][1],
         med[0][2], med[1][0],
         med[2][0], med[2][1], med[1][0] / med[0][0], med[2][0] / med[0][0],
         verified ? "yes" : "no");
  return verified ? 0 : 1;
}
