/* test_driver.c -- the driver's membership (sched.h) in one process: an
 * in-process driver, in-process workers (fsh_shuffle_worker_start) joined
 * by the heartbeat API; registration, heartbeats keeping workers alive, a
 * silent worker declared dead after the timeout (its heartbeat then
 * NOT_FOUND, its re-registration a restart with a new id), workers
 * re-registering with a restarted driver, malformed bodies refused with
 * INVALID_ARGUMENT, a heartbeat stopped with deregister_on_stop making its
 * worker dead at once ("deregister"). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>

#include "Sched.pb-c.h"
#include "test.h"

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static fsh_sched_driver *start_driver(const char *listen, int64_t timeout_ms) {
  fsh_error err;
  fsh_sched_driver_options o = {.listen = listen, .heartbeat_timeout_ms = timeout_ms};
  fsh_sched_driver *d = NULL;
  CHECK_OK(fsh_sched_driver_start(&o, &d, &err));
  return d;
}

static fsh_shuffle_worker *start_worker(void) {
  fsh_error err;
  fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .memory_limit = 1 << 20};
  fsh_shuffle_worker *w = NULL;
  CHECK_OK(fsh_shuffle_worker_start(&o, &w, &err));
  return w;
}

/* The state of uri in the driver's list (UNKNOWN if absent); *id its id. */
static fsh_sched_worker_state state_of(fsh_sched_driver *d, const char *uri, uint64_t *id) {
  fsh_error err;
  fsh_sched_worker_list l;
  fsh_sched_worker_state s = FSH_SCHED_WORKER_UNKNOWN;
  CHECK_OK(fsh_sched_driver_workers(d, &l, &err));
  for (int64_t i = 0; i < l.n; i++)
    if (strcmp(l.items[i].uri, uri) == 0) {
      s = l.items[i].state;
      if (id) *id = l.items[i].id;
    }
  fsh_sched_worker_list_reset(&l);
  return s;
}

/* Waits up to ms for uri to reach state s. */
static bool wait_state(fsh_sched_driver *d, const char *uri, fsh_sched_worker_state s,
                       int64_t ms) {
  for (int64_t t = 0; t < ms; t += 10) {
    if (state_of(d, uri, NULL) == s) return true;
    sleep_ms(10);
  }
  return state_of(d, uri, NULL) == s;
}

static fsh_flight_client *open_client(const char *uri) {
  fsh_error err;
  fsh_flight_client_options co = {.uri = uri, .timeout_ms = 5000};
  fsh_flight_client *c = NULL;
  CHECK_OK(fsh_flight_client_open(&co, &c, &err));
  return c;
}

/* A raw DoAction; returns its code, the first result in *reply (owned). */
static int action(fsh_flight_client *c, const char *type, const void *body, size_t n,
                  fsh_bytes *reply, fsh_error *err) {
  fsh_flight_action a = {.type = (char *)type, .body = {.data = (uint8_t *)body,
                                                        .size = (int64_t)n}};
  fsh_flight_result_list res = {0};
  int rc = fsh_flight_do_action(c, &a, &res, err);
  if (rc == 0 && reply) {
    *reply = res.items[0];
    res.items[0] = (fsh_bytes){0};
  }
  fsh_flight_result_list_reset(&res);
  return rc;
}

static int register_raw(fsh_flight_client *c, const char *uri, uint64_t *id, bool *replaced,
                        fsh_error *err) {
  Flightshuffle__Sched__Register m = FLIGHTSHUFFLE__SCHED__REGISTER__INIT;
  m.uri = (char *)uri;
  uint8_t buf[512];
  size_t n = flightshuffle__sched__register__pack(&m, buf);
  fsh_bytes reply = {0};
  int rc = action(c, "register", buf, n, &reply, err);
  if (rc) return rc;
  Flightshuffle__Sched__RegisterReply *r =
      flightshuffle__sched__register_reply__unpack(NULL, (size_t)reply.size, reply.data);
  CHECK(r != NULL);
  if (r) {
    *id = r->worker_id;
    *replaced = r->replaced;
    flightshuffle__sched__register_reply__free_unpacked(r, NULL);
  }
  fsh_bytes_reset(&reply);
  return 0;
}

static int heartbeat_raw(fsh_flight_client *c, uint64_t id, const char *uri, fsh_error *err) {
  Flightshuffle__Sched__Heartbeat m = FLIGHTSHUFFLE__SCHED__HEARTBEAT__INIT;
  m.worker_id = id;
  m.uri = (char *)uri;
  uint8_t buf[512];
  size_t n = flightshuffle__sched__heartbeat__pack(&m, buf);
  fsh_bytes reply = {0};
  int rc = action(c, "heartbeat", buf, n, &reply, err);
  fsh_bytes_reset(&reply);
  return rc;
}

static void registration_and_heartbeats(void) {
  fsh_error err;
  fsh_sched_driver *d = start_driver("127.0.0.1:0", 600);
  fsh_shuffle_worker *w[2] = {start_worker(), start_worker()};
  if (!d || !w[0] || !w[1]) goto out;
  fsh_sched_heartbeat *h[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    fsh_sched_heartbeat_options ho = {.driver_uri = fsh_sched_driver_uri(d),
                                      .worker_uri = fsh_shuffle_worker_uri(w[i]),
                                      .retry_ms = 50};
    CHECK_OK(fsh_sched_heartbeat_start(&ho, &h[i], &err));
  }
  for (int i = 0; i < 2; i++)
    CHECK(wait_state(d, fsh_shuffle_worker_uri(w[i]), FSH_SCHED_WORKER_ALIVE, 5000));
  /* Well past the timeout: the heartbeats keep both alive. */
  sleep_ms(1500);
  fsh_sched_worker_list l;
  CHECK_OK(fsh_sched_list_workers(fsh_sched_driver_uri(d), NULL, 5000, &l, &err));
  CHECK_EQ_INT(l.n, 2);
  CHECK_EQ_INT(fsh_sched_worker_list_alive(&l), 2);
  CHECK_EQ_INT(l.heartbeat_timeout_ms, 600);
  if (l.n == 2) {
    CHECK(l.items[0].id != l.items[1].id);
    CHECK(l.items[0].last_heartbeat_age_ms < 600);
    CHECK(strcmp(fsh_sched_worker_state_name(l.items[0].state), "alive") == 0);
  }
  fsh_sched_worker_list_reset(&l);
  for (int i = 0; i < 2; i++) {
    CHECK(fsh_sched_heartbeat_worker_id(h[i]) != 0);
    CHECK_EQ_INT(fsh_sched_heartbeat_registrations(h[i]), 1);
  }
  /* A worker that stops heartbeating is declared dead. */
  fsh_sched_heartbeat_stop(h[1]);
  CHECK(wait_state(d, fsh_shuffle_worker_uri(w[1]), FSH_SCHED_WORKER_DEAD, 3000));
  CHECK(state_of(d, fsh_shuffle_worker_uri(w[0]), NULL) == FSH_SCHED_WORKER_ALIVE);
  fsh_sched_heartbeat_stop(h[0]);
out:
  for (int i = 0; i < 2; i++) fsh_shuffle_worker_stop(w[i], 1000);
  fsh_sched_driver_stop(d, 1000);
}

static void silent_worker_dies_and_restarts(void) {
  fsh_error err;
  fsh_sched_driver *d = start_driver("127.0.0.1:0", 300);
  if (!d) return;
  fsh_flight_client *c = open_client(fsh_sched_driver_uri(d));
  const char *uri = "grpc://127.0.0.1:1"; /* nobody there: only the driver's view matters */
  uint64_t id = 0, id2 = 0;
  bool replaced = true;
  CHECK_OK(register_raw(c, uri, &id, &replaced, &err));
  CHECK(id != 0);
  CHECK(!replaced);
  CHECK_OK(heartbeat_raw(c, id, uri, &err));
  CHECK(state_of(d, uri, NULL) == FSH_SCHED_WORKER_ALIVE);
  CHECK(wait_state(d, uri, FSH_SCHED_WORKER_DEAD, 3000));
  /* Dead is final for that id: its heartbeat is NOT_FOUND... */
  int rc = heartbeat_raw(c, id, uri, &err);
  CHECK_EQ_INT(rc, ENOENT);
  CHECK(strstr(err.message, "dead") != NULL);
  /* ...and registering again is a restart: a new id, the old one gone. */
  CHECK_OK(register_raw(c, uri, &id2, &replaced, &err));
  CHECK(id2 != 0 && id2 != id);
  CHECK(replaced);
  uint64_t listed = 0;
  CHECK(state_of(d, uri, &listed) == FSH_SCHED_WORKER_ALIVE);
  CHECK_EQ_INT(listed, id2);
  CHECK_EQ_INT(heartbeat_raw(c, id, uri, &err), ENOENT);
  CHECK_OK(heartbeat_raw(c, id2, uri, &err));
  /* An id with another worker's uri is not that worker. */
  CHECK_EQ_INT(heartbeat_raw(c, id2, "grpc://127.0.0.1:2", &err), ENOENT);
  fsh_sched_worker_list l;
  CHECK_OK(fsh_sched_driver_workers(d, &l, &err));
  CHECK_EQ_INT(l.n, 1);
  fsh_sched_worker_list_reset(&l);
  fsh_flight_client_close(c);
  fsh_sched_driver_stop(d, 1000);
}

static void reregisters_after_driver_restart(void) {
  fsh_error err;
  fsh_sched_driver *d = start_driver("127.0.0.1:0", 400);
  fsh_shuffle_worker *w = start_worker();
  if (!d || !w) {
    fsh_shuffle_worker_stop(w, 0);
    fsh_sched_driver_stop(d, 0);
    return;
  }
  char listen[320], uri[320];
  snprintf(uri, sizeof uri, "%s", fsh_sched_driver_uri(d));
  snprintf(listen, sizeof listen, "%s", uri + strlen("grpc://"));
  fsh_sched_heartbeat_options ho = {.driver_uri = uri, .worker_uri = fsh_shuffle_worker_uri(w),
                                    .retry_ms = 50};
  fsh_sched_heartbeat *h = NULL;
  CHECK_OK(fsh_sched_heartbeat_start(&ho, &h, &err));
  CHECK(wait_state(d, fsh_shuffle_worker_uri(w), FSH_SCHED_WORKER_ALIVE, 5000));
  /* The driver goes away: the worker keeps retrying, unharmed. */
  fsh_sched_driver_stop(d, 1000);
  sleep_ms(400);
  CHECK_EQ_INT(fsh_sched_heartbeat_registrations(h), 1);
  /* A new driver on the same address knows nobody: NOT_FOUND, register. */
  d = start_driver(listen, 400);
  if (d) {
    CHECK(wait_state(d, fsh_shuffle_worker_uri(w), FSH_SCHED_WORKER_ALIVE, 5000));
    for (int t = 0; t < 500 && fsh_sched_heartbeat_registrations(h) < 2; t++) sleep_ms(10);
    CHECK_EQ_INT(fsh_sched_heartbeat_registrations(h), 2);
    CHECK(fsh_sched_heartbeat_worker_id(h) != 0);
    sleep_ms(800);
    CHECK(state_of(d, fsh_shuffle_worker_uri(w), NULL) == FSH_SCHED_WORKER_ALIVE);
  }
  fsh_sched_heartbeat_stop(h);
  fsh_shuffle_worker_stop(w, 1000);
  fsh_sched_driver_stop(d, 1000);
}

/* A worker that stops cleanly deregisters: the driver lists it dead at
 * once (its heartbeat timeout is a minute); without deregister_on_stop it
 * stays alive; a second or unknown "deregister" is NOT_FOUND, a malformed
 * one INVALID_ARGUMENT. */
static void clean_stop_deregisters(void) {
  fsh_error err;
  fsh_sched_driver *d = start_driver("127.0.0.1:0", 60000);
  if (!d) return;
  const char *uris[2] = {"grpc://127.0.0.1:1", "grpc://127.0.0.1:2"}; /* the driver's view only */
  fsh_sched_heartbeat *h[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    fsh_sched_heartbeat_options ho = {.driver_uri = fsh_sched_driver_uri(d), .worker_uri = uris[i],
                                      .retry_ms = 50, .deregister_on_stop = i == 0};
    CHECK_OK(fsh_sched_heartbeat_start(&ho, &h[i], &err));
    CHECK(wait_state(d, uris[i], FSH_SCHED_WORKER_ALIVE, 5000));
  }
  uint64_t id0 = fsh_sched_heartbeat_worker_id(h[0]);
  fsh_sched_heartbeat_stop(h[0]);
  fsh_sched_heartbeat_stop(h[1]);
  CHECK(state_of(d, uris[0], NULL) == FSH_SCHED_WORKER_DEAD);
  CHECK(state_of(d, uris[1], NULL) == FSH_SCHED_WORKER_ALIVE);
  fsh_flight_client *c = open_client(fsh_sched_driver_uri(d));
  Flightshuffle__Sched__Heartbeat m = FLIGHTSHUFFLE__SCHED__HEARTBEAT__INIT;
  m.worker_id = id0;
  m.uri = (char *)uris[0];
  uint8_t buf[128];
  size_t n = flightshuffle__sched__heartbeat__pack(&m, buf);
  CHECK_EQ_INT(action(c, "deregister", buf, n, NULL, &err), ENOENT);
  m.worker_id = 999;
  n = flightshuffle__sched__heartbeat__pack(&m, buf);
  CHECK_EQ_INT(action(c, "deregister", buf, n, NULL, &err), ENOENT);
  CHECK_EQ_INT(action(c, "deregister", "\xff\xff", 2, NULL, &err), EINVAL);
  CHECK(strstr(err.message, "deregister") != NULL);
  CHECK(state_of(d, uris[1], NULL) == FSH_SCHED_WORKER_ALIVE);
  fsh_flight_client_close(c);
  fsh_sched_driver_stop(d, 1000);
}

static void bad_bodies(void) {
  fsh_error err;
  fsh_sched_driver *d = start_driver("127.0.0.1:0", 1000);
  if (!d) return;
  fsh_flight_client *c = open_client(fsh_sched_driver_uri(d));
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff};
  int rc = action(c, "register", junk, sizeof junk, NULL, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "malformed Register") != NULL);
  rc = action(c, "heartbeat", junk, sizeof junk, NULL, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "malformed Heartbeat") != NULL);
  rc = action(c, "register", NULL, 0, NULL, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "no worker uri") != NULL);
  uint64_t id;
  bool replaced;
  rc = register_raw(c, "not a uri", &id, &replaced, &err);
  CHECK_EQ_INT(rc, EINVAL);
  rc = action(c, "heartbeat", NULL, 0, NULL, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "no worker id") != NULL);
  CHECK_EQ_INT(heartbeat_raw(c, 77, "grpc://127.0.0.1:1", &err), ENOENT);
  rc = action(c, "no-such-action", NULL, 0, NULL, &err);
  CHECK_EQ_INT(rc, ENOTSUP);
  /* "submit" exists now (jobs): an empty plan is refused, saying why */
  rc = action(c, "submit", NULL, 0, NULL, &err);
  CHECK_EQ_INT(rc, EINVAL);
  CHECK(strstr(err.message, "0 stages") != NULL);
  fsh_sched_worker_list l;
  CHECK_OK(fsh_sched_driver_workers(d, &l, &err));
  CHECK_EQ_INT(l.n, 0);
  fsh_sched_worker_list_reset(&l);
  CHECK_EQ_INT(fsh_sched_worker_list_decode(junk, sizeof junk, &l, &err), EINVAL);
  fsh_flight_client_close(c);
  fsh_sched_driver_stop(d, 1000);

  fsh_sched_heartbeat *h = NULL;
  fsh_sched_heartbeat_options ho = {.driver_uri = "nope", .worker_uri = "grpc://127.0.0.1:1"};
  CHECK_EQ_INT(fsh_sched_heartbeat_start(&ho, &h, &err), EINVAL);
  CHECK(h == NULL);
  fsh_sched_driver_options o = {.listen = NULL};
  CHECK_EQ_INT(fsh_sched_driver_start(&o, &d, &err), EINVAL);
}

FSH_TEST_MAIN(TEST(registration_and_heartbeats), TEST(silent_worker_dies_and_restarts),
              TEST(reregisters_after_driver_restart), TEST(bad_bodies),
              TEST(clean_stop_deregisters))
