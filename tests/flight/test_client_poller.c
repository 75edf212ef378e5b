/* test_client_poller.c -- the Flight client's process-wide poller: no
 * poller thread before the first client opens, the same threads shared by
 * every open client (calls on several clients at once, from several
 * threads, all complete), still serving the remaining clients when one
 * closes, joined when the last one closes (no thread left behind), and
 * started again by the next open. The pollers run only while a bulk
 * stream (DoGet here) is in flight and are parked otherwise (no context
 * switch at all), also while control calls (DoAction) run: those poll
 * their own queue. A reader that stops reading stops its stream: the
 * poller's read-ahead is bounded. (Deadlines and cancellation through the poller:
 * test_client_failures.c.) Threads are found by their name in
 * /proc/self/task, their context switches in /proc/self/task/N/status. */
#include <dirent.h>
#include <time.h>

#include "flight/client_fixture.h"

/* How many of this process's threads are named "fsh-client-poll"; their
 * context switches so far (voluntary and not) added to *switches if set. */
static int count_pollers_switches(long *switches) {
  DIR *d = opendir("/proc/self/task");
  if (!d) abort();
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread ended meanwhile */
    bool poller = fgets(name, sizeof name, f) && strncmp(name, "fsh-client-poll", 15) == 0;
    fclose(f);
    if (!poller) continue;
    n++;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    f = switches ? fopen(path, "r") : NULL;
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
      long v = 0;
      if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
        *switches += v;
    }
    if (f) fclose(f);
  }
  closedir(d);
  return n;
}

static int count_pollers(void) { return count_pollers_switches(NULL); }

/* The pollers' context switches so far. */
static long poller_switches(void) {
  long n = 0;
  (void)count_pollers_switches(&n);
  return n;
}

/* count_pollers() once it equals want, or after 2 s whatever it is (a
 * joined thread may linger in /proc for a moment). */
static int pollers_settled(int want) {
  int n = count_pollers();
  for (int i = 0; i < 200 && n != want; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    n = count_pollers();
  }
  return n;
}

/* Reads the whole "all" flight (3 sample batches) through c; true if all
 * three came back equal to the sample. */
static bool read_all(fsh_flight_client *c) {
  fsh_error err = {{0}};
  fsh_batch *sample = fsh_sample_all_types();
  fsh_flight_reader *r = NULL;
  fsh_bytes t = {(uint8_t *)"all", 3};
  int n = 0;
  bool ok = fsh_flight_do_get(c, &t, &r, &err) == 0;
  while (ok) {
    fsh_batch *b = NULL;
    ok = fsh_flight_reader_next(r, &b, &err) == 0;
    if (!ok || !b) break;
    ok = fsh_batch_equals(b, sample, &err);
    fsh_batch_unref(b);
    n++;
  }
  if (!ok) fprintf(stderr, "read_all: %s\n", err.message);
  fsh_flight_reader_free(r);
  fsh_batch_unref(sample);
  return ok && n == 3;
}

typedef struct {
  fsh_flight_client *c;
  int rounds;
  bool ok;
} reader_arg;

static void *reader_main(void *p) {
  reader_arg *a = p;
  a->ok = true;
  for (int i = 0; i < a->rounds && a->ok; i++) a->ok = read_all(a->c);
  return NULL;
}

static void test_lifecycle(void) {
  fx_server *fx = fx_start(NULL);
  CHECK_EQ_INT(count_pollers(), 0);

  /* Two clients, four threads (two per client), DoGets at once. */
  fsh_flight_client *a = fx_client(fx->uri, NULL, 10000);
  int n = count_pollers();
  CHECK(n >= 1);
  fsh_flight_client *b = fx_client(fx->uri, NULL, 10000);
  CHECK_EQ_INT(count_pollers(), n); /* shared, not one per client */
  reader_arg args[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (reader_arg){.c = i % 2 ? b : a, .rounds = 5};
    CHECK_EQ_INT(pthread_create(&th[i], NULL, reader_main, &args[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_MSG(args[i].ok, "reader %d", i);
  }

  /* The first close leaves the poller to the other client. */
  fsh_flight_client_close(a);
  CHECK_EQ_INT(count_pollers(), n);
  CHECK(read_all(b));
  /* The last close joins it. */
  fsh_flight_client_close(b);
  CHECK_EQ_INT(pollers_settled(0), 0);

  /* The next open starts it again. */
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  CHECK_EQ_INT(count_pollers(), n);
  CHECK(read_all(c));
  fsh_flight_client_close(c);
  CHECK_EQ_INT(pollers_settled(0), 0);
  fx_stop(fx);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* The pollers' context switches during ms of sleep. */
static long switches_during(long ms) {
  long before = poller_switches();
  sleep_ms(ms);
  return poller_switches() - before;
}

static void test_parked_without_streams(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};
  CHECK(count_pollers() >= 1);
  sleep_ms(100);                         /* settled after the start */
  CHECK_EQ_INT(switches_during(300), 0); /* open, idle: parked */
  /* control calls do not wake them */
  long before = poller_switches();
  for (int i = 0; i < 50; i++) {
    fsh_flight_action a = {.type = (char *)"echo", .body = {(uint8_t *)"x", 1}};
    fsh_flight_result_list res = {0};
    CHECK_OK(fsh_flight_do_action(c, &a, &res, &err));
    CHECK(res.n == 1 && res.items[0].size == 1 && res.items[0].data[0] == 'x');
    fsh_flight_result_list_reset(&res);
  }
  CHECK_EQ_INT(poller_switches() - before, 0);
  /* a stream in flight (even one not being read) has them polling: each
   * looks again every 50 ms at least */
  fsh_bytes t = {(uint8_t *)"endless", 7};
  fsh_flight_reader *r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  fsh_batch *b = NULL;
  if (r) CHECK_OK(fsh_flight_reader_next(r, &b, &err));
  fsh_batch_unref(b);
  CHECK(switches_during(300) >= 2);
  fsh_flight_reader_free(r);
  /* parked again once they looked (within 50 ms) */
  sleep_ms(200);
  CHECK_EQ_INT(switches_during(300), 0);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

/* Read-ahead is bounded: a DoGet reader that stops taking messages stops
 * the stream. The poller queues at most 2 received messages, besides the
 * one the reader took, gRPC's 16 MiB stream window (transport.c) and the
 * server's message in progress, so the endless source (1 MiB batches) has
 * produced about 20 (19 without read-ahead), not the hundreds 400 ms at
 * GB/s would bring; reading on then gets every batch, intact, in order. */
static void test_readahead_bounded(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 10000);
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"endless", 7};
  fsh_flight_reader *r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  fsh_batch *b = NULL;
  if (r) CHECK_OK(fsh_flight_reader_next(r, &b, &err));
  CHECK(b && b->length == (1 << 20) / 8);
  fsh_batch_unref(b);
  sleep_ms(400);
  int sent = atomic_load(&fx->endless_sent);
  CHECK(sent >= 2);  /* the one taken and at least the next, read ahead */
  if (sent > 24) fprintf(stderr, "the endless source produced %d batches\n", sent);
  CHECK(sent <= 24); /* flow control held the rest back */
  sleep_ms(200);
  CHECK_EQ_INT(atomic_load(&fx->endless_sent), sent); /* and holds it */
  /* the stream resumes: 30 more batches, each the endless batch */
  fsh_batch *want = fx_big_batch(1 << 20);
  for (int i = 0; i < 30 && r; i++) {
    b = NULL;
    CHECK_OK(fsh_flight_reader_next(r, &b, &err));
    CHECK(b && fsh_batch_equals(b, want, NULL));
    fsh_batch_unref(b);
  }
  CHECK(atomic_load(&fx->endless_sent) >= 31);
  fsh_batch_unref(want);
  fsh_flight_reader_free(r);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

FSH_TEST_MAIN(TEST(test_lifecycle), TEST(test_parked_without_streams), TEST(test_readahead_bounded))
