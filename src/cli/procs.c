/* procs.c -- worker processes for `local` and `bench shuffle`: starting
 * this executable as a child (its "listening on" line read from a pipe),
 * reaping it, and stopping a set of them (SIGTERM, SIGKILL after a grace
 * period). */
#define _GNU_SOURCE /* pipe2 */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads the child's first stdout line (up to o->timeout_s; o->interrupted
 * ends it). */
static int read_line(const cli_child_options *o, int fd, char *line, size_t size) {
  size_t n = 0;
  double deadline = now_sec() + o->timeout_s;
  while (n + 1 < size) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int left = (int)((deadline - now_sec()) * 1000);
    if (left <= 0 || (o->interrupted && o->interrupted(o->arg))) return -1;
    int r = poll(&p, 1, left < 100 ? left : 100);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) continue;
    char ch;
    ssize_t got = read(fd, &ch, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    if (ch == '\n') break;
    line[n++] = ch;
  }
  line[n] = '\0';
  return 0;
}

int cli_child_start(const char *const *argv, const cli_child_options *o, cli_child *out) {
  memset(out, 0, sizeof *out);
  int logfd = -1;
  if (o->stderr_log) {
    logfd = open(o->stderr_log, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (logfd < 0) return cli_fail(1, "%s: %s: %s", o->who, o->stderr_log, strerror(errno));
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    int e = errno;
    if (logfd >= 0) close(logfd);
    return cli_fail(1, "%s: pipe: %s", o->who, strerror(e));
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: dies with us; stdout the pipe, stderr the log; default
     * signals */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(pipefd[1], 1);
    if (logfd >= 0) dup2(logfd, 2);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, o->child_mask ? o->child_mask : &old, NULL);
    execv("/proc/self/exe", (char *const *)argv);
    _exit(127);
  }
  int fork_errno = errno;
  if (pid > 0) out->pid = pid;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (logfd >= 0) close(logfd);
  close(pipefd[1]);
  if (pid < 0) {
    close(pipefd[0]);
    return cli_fail(1, "%s: fork: %s", o->who, strerror(fork_errno));
  }
  char line[480];
  int rc = read_line(o, pipefd[0], line, sizeof line);
  close(pipefd[0]);
  const char *prefix = "listening on ";
  if (rc != 0 || strncmp(line, prefix, strlen(prefix)) != 0) return CLI_CHILD_NO_URI;
  snprintf(out->uri, sizeof out->uri, "%s", line + strlen(prefix));
  return 0;
}

bool cli_child_reap(cli_child *c) {
  if (c->reaped || c->pid <= 0) return false;
  int status = 0;
  if (waitpid(c->pid, &status, WNOHANG) != c->pid) return false;
  c->reaped = true;
  c->status = status;
  return true;
}

void cli_children_stop(cli_child *c, int n, double grace_s,
                       void (*ended)(const cli_child *c, int i, void *arg), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (int i = 0; i < n; i++)
    if (c[i].pid > 0 && !c[i].reaped) kill(c[i].pid, SIGTERM);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  double deadline = now_sec() + grace_s;
  for (int i = 0; i < n; i++) {
    if (c[i].pid <= 0 || c[i].reaped) continue;
    int status = 0;
    pid_t r;
    while ((r = waitpid(c[i].pid, &status, WNOHANG)) == 0 && now_sec() < deadline)
      usleep(5000);
    if (r == 0) {
      kill(c[i].pid, SIGKILL);
      waitpid(c[i].pid, &status, 0);
      c[i].killed = true;
    }
    c[i].reaped = true;
    c[i].status = status;
    if (ended) ended(&c[i], i, arg);
  }
}
