/* test_types.c -- the Flight data types: owned bytes, descriptors, result
 * lists, messages, and location URI parsing (IPv6 included), with
 * allocation-failure loops over the copying functions. */
#include <flightshuffle/flight.h>

#include <errno.h>

#include "test.h"

static void test_bytes(void) {
  fsh_bytes b = {0};
  CHECK_EQ_INT(fsh_bytes_set(&b, "hello", 5), 0);
  CHECK(b.size == 5 && memcmp(b.data, "hello", 5) == 0);
  CHECK_EQ_INT(fsh_bytes_set(&b, "xy", 2), 0); /* replaces */
  CHECK(b.size == 2 && memcmp(b.data, "xy", 2) == 0);
  CHECK_EQ_INT(fsh_bytes_set(&b, NULL, 0), 0);
  CHECK(b.size == 0 && b.data == NULL);
  CHECK_EQ_INT(fsh_bytes_set(&b, NULL, 3), EINVAL);
  CHECK_EQ_INT(fsh_bytes_set(&b, "a", -1), EINVAL);
  fsh_bytes_reset(&b);
  fsh_bytes_reset(&b);
  fsh_bytes_reset(NULL);
}

static void test_descriptor(void) {
  const char *path[] = {"shuffle", "7", "partition-3"};
  fsh_flight_descriptor d = {0}, c = {0};
  CHECK_EQ_INT(fsh_flight_descriptor_path(&d, path, 3), 0);
  CHECK(d.type == FSH_FLIGHT_DESCRIPTOR_PATH && d.n_path == 3);
  CHECK(strcmp(d.path[2], "partition-3") == 0 && d.path[2] != path[2]);
  CHECK_EQ_INT(fsh_flight_descriptor_copy(&c, &d), 0);
  CHECK(c.type == d.type && c.n_path == 3 && strcmp(c.path[0], "shuffle") == 0);
  CHECK(c.path[0] != d.path[0]);
  fsh_flight_descriptor_reset(&c);
  CHECK(c.n_path == 0 && c.path == NULL);
  fsh_flight_descriptor_reset(&d);

  fsh_flight_descriptor cmd = {.type = FSH_FLIGHT_DESCRIPTOR_CMD};
  CHECK_EQ_INT(fsh_bytes_set(&cmd.cmd, "\0\1\2", 3), 0);
  CHECK_EQ_INT(fsh_flight_descriptor_copy(&c, &cmd), 0);
  CHECK(c.type == FSH_FLIGHT_DESCRIPTOR_CMD && c.cmd.size == 3 && c.cmd.data[2] == 2);
  fsh_flight_descriptor_reset(&c);
  fsh_flight_descriptor_reset(&cmd);

  const char *bad[] = {"a", NULL};
  CHECK_EQ_INT(fsh_flight_descriptor_path(&d, bad, 2), EINVAL);
  CHECK_EQ_INT(fsh_flight_descriptor_path(&d, path, -1), EINVAL);
  CHECK_EQ_INT(fsh_flight_descriptor_path(&d, NULL, 0), 0);
  fsh_flight_descriptor_reset(&d);
}

static void test_descriptor_alloc_failure(void) {
  const char *path[] = {"a", "bb", "ccc", "dddd"};
  fsh_flight_descriptor d = {0};
  CHECK_EQ_INT(fsh_flight_descriptor_path(&d, path, 4), 0);
  CHECK_EQ_INT(fsh_bytes_set(&d.cmd, "cmd", 3), 0);
  int failures = 0;
  for (int64_t nth = 1; nth < 100; nth++) {
    fsh_flight_descriptor c = {0};
    fsh_alloc_fail_after(nth, nth % 2 == 0);
    int rc = fsh_flight_descriptor_copy(&c, &d);
    fsh_alloc_fail_after(0, false);
    if (rc == 0) {
      CHECK(c.n_path == 4 && strcmp(c.path[3], "dddd") == 0);
      fsh_flight_descriptor_reset(&c);
      break;
    }
    failures++;
    CHECK_EQ_INT(rc, ENOMEM);
    CHECK(c.path == NULL && c.cmd.data == NULL);
  }
  CHECK(failures >= 5);
  fsh_flight_descriptor_reset(&d);
}

static void test_lists(void) {
  fsh_flight_result_list r = {0};
  for (int i = 0; i < 100; i++) {
    char s[16];
    int n = snprintf(s, sizeof s, "result-%d", i);
    CHECK_EQ_INT(fsh_flight_result_list_push(&r, s, n), 0);
  }
  CHECK(r.n == 100 && r.items[42].size == 9 && memcmp(r.items[42].data, "result-42", 9) == 0);
  CHECK_EQ_INT(fsh_flight_result_list_push(&r, NULL, 0), 0);
  CHECK(r.n == 101 && r.items[100].size == 0);
  fsh_flight_result_list_reset(&r);
  CHECK(r.n == 0 && r.items == NULL);

  fsh_flight_action_type_list t = {0};
  CHECK_EQ_INT(fsh_flight_action_type_list_push(&t, "register", "adds a worker"), 0);
  CHECK_EQ_INT(fsh_flight_action_type_list_push(&t, "heartbeat", NULL), 0);
  CHECK_EQ_INT(fsh_flight_action_type_list_push(&t, NULL, "x"), EINVAL);
  CHECK(t.n == 2 && strcmp(t.items[1].type, "heartbeat") == 0 &&
        strcmp(t.items[1].description, "") == 0);
  fsh_flight_action_type_list_reset(&t);

  fsh_flight_info_list l = {0};
  for (int i = 0; i < 5; i++) {
    fsh_flight_info info = {.total_records = i, .total_bytes = -1};
    const char *p[] = {"x"};
    CHECK_EQ_INT(fsh_flight_descriptor_path(&info.descriptor, p, 1), 0);
    info.n_endpoints = 1;
    info.endpoints = fsh_calloc(1, sizeof *info.endpoints);
    info.endpoints[0].locations = fsh_calloc(1, sizeof(char *));
    info.endpoints[0].locations[0] = fsh_strdup("grpc://h:1");
    info.endpoints[0].n_locations = 1;
    CHECK_EQ_INT(fsh_bytes_set(&info.endpoints[0].ticket, "t", 1), 0);
    CHECK_EQ_INT(fsh_flight_info_list_push(&l, &info), 0);
    CHECK(info.endpoints == NULL && info.descriptor.path == NULL); /* moved */
  }
  CHECK(l.n == 5 && l.items[3].total_records == 3 &&
        strcmp(l.items[4].endpoints[0].locations[0], "grpc://h:1") == 0);
  fsh_flight_info_list_reset(&l);
}

static void test_lists_alloc_failure(void) {
  int failures = 0;
  for (int64_t nth = 1; nth < 200; nth++) {
    fsh_flight_result_list r = {0};
    int rc = 0;
    fsh_alloc_fail_after(nth, false);
    for (int i = 0; i < 20 && rc == 0; i++) rc = fsh_flight_result_list_push(&r, "abc", 3);
    fsh_alloc_fail_after(0, false);
    fsh_flight_result_list_reset(&r);
    if (rc == 0) break;
    failures++;
    CHECK_EQ_INT(rc, ENOMEM);
  }
  CHECK(failures > 10);
}

static void test_message_reset(void) {
  fsh_flight_message m = {0};
  m.metadata = fsh_buffer_copy("abc", 3);
  m.body = fsh_buffer_new(64, true);
  m.has_descriptor = true;
  const char *p[] = {"a"};
  CHECK_EQ_INT(fsh_flight_descriptor_path(&m.descriptor, p, 1), 0);
  fsh_flight_message_reset(&m);
  CHECK(!m.metadata && !m.body && !m.has_descriptor && m.descriptor.n_path == 0);
  fsh_flight_message_reset(&m);
}

static void check_location(const char *uri, bool tls, const char *host, int port) {
  fsh_error err;
  fsh_flight_location loc;
  int rc = fsh_flight_location_parse(uri, &loc, &err);
  CHECK_MSG(rc == 0, "%s: %s", uri, err.message);
  if (rc) return;
  CHECK_MSG(loc.tls == tls && strcmp(loc.host, host) == 0 && loc.port == port,
            "%s -> tls %d host '%s' port %d", uri, loc.tls, loc.host, loc.port);
}

static void check_bad_location(const char *uri, const char *needle) {
  fsh_error err = {{0}};
  fsh_flight_location loc;
  int rc = fsh_flight_location_parse(uri, &loc, &err);
  CHECK_MSG(rc == EINVAL, "%s: rc %d", uri ? uri : "(null)", rc);
  CHECK_MSG(strstr(err.message, needle) != NULL, "%s: message '%s' lacks '%s'",
            uri ? uri : "(null)", err.message, needle);
}

static void test_location_parse(void) {
  check_location("grpc://localhost:7000", false, "localhost", 7000);
  check_location("grpc+tcp://10.0.0.1:1", false, "10.0.0.1", 1);
  check_location("grpc+tls://head.example.com:65535", true, "head.example.com", 65535);
  check_location("grpc://[::1]:7001", false, "::1", 7001);
  check_location("grpc+tls://[fe80::1%eth0]:443/", true, "fe80::1%eth0", 443);
  check_location("grpc://h:80/", false, "h", 80);

  check_bad_location(NULL, "no URI");
  check_bad_location("http://h:1", "scheme");
  check_bad_location("grpc+unix:///tmp/sock", "scheme");
  check_bad_location("grpc://", "empty host");
  check_bad_location("grpc://:7000", "empty host");
  check_bad_location("grpc://host", "missing ':port'");
  check_bad_location("grpc://host:", "port");
  check_bad_location("grpc://host:0", "port");
  check_bad_location("grpc://host:65536", "port");
  check_bad_location("grpc://host:99999999999999999999", "port");
  check_bad_location("grpc://host:12ab", "port");
  check_bad_location("grpc://host:12/path", "port");
  check_bad_location("grpc://[::1:7000", "']'");
  check_bad_location("grpc://[::1]7000", "missing ':port'");
  check_bad_location("grpc://[]:7000", "empty host");
  check_bad_location("grpc://us@er:1", "bad character");
  char longuri[400] = "grpc://";
  memset(longuri + 7, 'a', 300);
  strcpy(longuri + 307, ":1");
  check_bad_location(longuri, "longer than");
}

FSH_TEST_MAIN(TEST(test_bytes), TEST(test_descriptor), TEST(test_descriptor_alloc_failure),
              TEST(test_lists), TEST(test_lists_alloc_failure), TEST(test_message_reset),
              TEST(test_location_parse))
