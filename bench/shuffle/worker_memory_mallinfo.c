/* worker_memory_mallinfo.c -- a measurement aid of worker_memory.py, not
 * part of the build: LD_PRELOAD'ed into the workers, a thread answers
 * glibc's mallinfo2() when /tmp/fsh_mallinfo/<pid>.req appears, in
 * /tmp/fsh_mallinfo/<pid>.out.
 *   gcc -O2 -shared -fPIC -o /tmp/mi.so bench/shuffle/worker_memory_mallinfo.c -lpthread */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *loop(void *a) {
  (void)a;
  char req[128], out[128], tmp[140];
  snprintf(req, sizeof req, "/tmp/fsh_mallinfo/%d.req", (int)getpid());
  snprintf(out, sizeof out, "/tmp/fsh_mallinfo/%d.out", (int)getpid());
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  for (;;) {
    usleep(100000);
    if (access(req, F_OK) != 0) continue;
    struct mallinfo2 m = mallinfo2();
    FILE *f = fopen(tmp, "w");
    if (f) {
      fprintf(f, "arena=%zu hblkhd=%zu uordblks=%zu fordblks=%zu keepcost=%zu\n", m.arena, m.hblkhd, m.uordblks, m.fordblks, m.keepcost);
      fclose(f);
      rename(tmp, out);
    }
    unlink(req);
  }
  return NULL;
}
__attribute__((constructor)) static void init(void) {
  pthread_t t;
  pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &at, loop, NULL);
}
