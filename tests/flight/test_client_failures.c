/* test_client_failures.c -- the Flight client when things go wrong: bad
 * URIs and TLS options, a refused connection, a server that accepts TCP
 * but never speaks (the deadline fires), a stream past its deadline, a
 * reader cancelled mid-stream (the server sees it), the server stopped
 * mid-stream (an error, never a hang), and TLS / mutual TLS against our
 * own server with certificates made by openssl (skipped without it). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flight/client_fixture.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_bad_options(void) {
  fsh_error err = {{0}};
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = "http://127.0.0.1:1"};
  CHECK_EQ_INT(fsh_flight_client_open(&o, &c, &err), EINVAL);
  CHECK(c == NULL);
  o.uri = "grpc://127.0.0.1:1";
  o.tls_ca_path = "/nonexistent/ca.pem";
  CHECK_EQ_INT(fsh_flight_client_open(&o, &c, &err), EINVAL); /* TLS options, plain URI */
  o.uri = "grpc+tls://127.0.0.1:1";
  CHECK_EQ_INT(fsh_flight_client_open(&o, &c, &err), ENOENT);
  CHECK_MSG(strstr(err.message, "/nonexistent/ca.pem") != NULL, "%s", err.message);
  o.tls_ca_path = NULL;
  o.tls_cert_path = "/nonexistent/cert.pem";
  CHECK_EQ_INT(fsh_flight_client_open(&o, &c, &err), EINVAL); /* a cert without a key */
  CHECK(c == NULL);
  o = (fsh_flight_client_options){.uri = NULL};
  CHECK_EQ_INT(fsh_flight_client_open(&o, &c, &err), EINVAL);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void test_connection_refused(void) {
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", free_port());
  fsh_flight_client *c = fx_client(uri, NULL, 5000);
  fsh_error err = {{0}};
  fsh_flight_info_list l;
  double t0 = now_s();
  CHECK_EQ_INT(fsh_flight_list_flights(c, NULL, &l, &err), EAGAIN); /* UNAVAILABLE */
  CHECK(now_s() - t0 < 4.0);
  char want[128];
  snprintf(want, sizeof want, "ListFlights %s: UNAVAILABLE", uri);
  CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);
  fsh_bytes t = {(uint8_t *)"x", 1};
  fsh_flight_reader *r = NULL;
  int rc = fsh_flight_do_get(c, &t, &r, &err);
  if (rc == 0) {
    fsh_batch *b = NULL;
    rc = fsh_flight_reader_next(r, &b, &err);
    fsh_flight_reader_free(r);
  }
  CHECK_EQ_INT(rc, EAGAIN);
  fsh_flight_client_close(c);
}

/* A listener that never accepts: TCP connects, HTTP/2 never answers. */
static void test_silent_server_deadline(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 8) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &n) == 0);
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", ntohs(a.sin_port));
  fsh_flight_client *c = fx_client(uri, NULL, 500);
  fsh_error err = {{0}};
  fsh_flight_action_type_list l;
  double t0 = now_s();
  CHECK_EQ_INT(fsh_flight_list_actions(c, &l, &err), ETIMEDOUT);
  double dt = now_s() - t0;
  CHECK_MSG(dt >= 0.4 && dt < 5.0, "took %.2f s", dt);
  CHECK_MSG(strstr(err.message, "DEADLINE_EXCEEDED") != NULL, "%s", err.message);
  fsh_flight_client_close(c);
  close(fd);
}

/* An endless DoGet under a 400 ms deadline ends with DEADLINE_EXCEEDED. */
static void test_stream_deadline(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 400);
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"endless", 7};
  fsh_flight_reader *r = NULL;
  int rc = fsh_flight_do_get(c, &t, &r, &err);
  int64_t n = 0;
  double t0 = now_s();
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = fsh_flight_reader_next(r, &b, &err);
    if (rc == 0 && !b) break;
    fsh_batch_unref(b);
    n++;
    usleep(20000);
  }
  CHECK_EQ_INT(rc, ETIMEDOUT);
  CHECK(n > 0 && now_s() - t0 < 5.0);
  CHECK_MSG(strstr(err.message, "DoGet") && strstr(err.message, "DEADLINE_EXCEEDED"), "%s",
            err.message);
  fsh_flight_reader_free(r);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

static void test_reader_cancel(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 0);
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"endless", 7};
  fsh_flight_reader *r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  for (int i = 0; r && i < 3; i++) {
    fsh_batch *b = NULL;
    CHECK_OK(fsh_flight_reader_next(r, &b, &err));
    CHECK(b && b->length == (1 << 20) / 8);
    fsh_batch_unref(b);
  }
  if (r) {
    fsh_flight_reader_cancel(r);
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++) { /* what was in flight, then the end */
      fsh_batch *b = NULL;
      rc = fsh_flight_reader_next(r, &b, &err);
      fsh_batch_unref(b);
    }
    CHECK_EQ_INT(rc, ECANCELED);
    fsh_flight_reader_free(r);
  }
  /* the server let go of the source */
  for (int i = 0; i < 200 && atomic_load(&fx->cancelled_sources) == 0; i++) usleep(10000);
  CHECK_EQ_INT(atomic_load(&fx->cancelled_sources), 1);
  /* freeing a reader mid-stream without reading to the end */
  r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  fsh_batch *b = NULL;
  if (r) CHECK_OK(fsh_flight_reader_next(r, &b, &err));
  fsh_batch_unref(b);
  fsh_flight_reader_free(r);
  for (int i = 0; i < 200 && atomic_load(&fx->cancelled_sources) < 2; i++) usleep(10000);
  CHECK_EQ_INT(atomic_load(&fx->cancelled_sources), 2);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

/* The server goes away mid-stream: the client gets an error, not a hang
 * (no deadline set). */
static void test_server_stopped_mid_stream(void) {
  fx_server *fx = fx_start(NULL);
  fsh_flight_client *c = fx_client(fx->uri, NULL, 0);
  fsh_error err = {{0}};
  fsh_bytes t = {(uint8_t *)"endless", 7};
  fsh_flight_reader *r = NULL;
  CHECK_OK(fsh_flight_do_get(c, &t, &r, &err));
  fsh_batch *b = NULL;
  if (r) CHECK_OK(fsh_flight_reader_next(r, &b, &err));
  fsh_batch_unref(b);
  fsh_flight_server_stop(fx->server, 100);
  fx->server = NULL;
  int rc = 0;
  int64_t n = 0;
  double t0 = now_s();
  while (r && rc == 0 && n < 100000) {
    b = NULL;
    rc = fsh_flight_reader_next(r, &b, &err);
    if (rc == 0 && !b) break;
    fsh_batch_unref(b);
    n++;
  }
  CHECK_MSG(rc != 0, "the stream ended cleanly after %lld more batches", (long long)n);
  CHECK(now_s() - t0 < 10.0);
  CHECK_MSG(strstr(err.message, "DoGet") != NULL, "%s", err.message);
  fsh_flight_reader_free(r);
  /* later calls fail fast too */
  fsh_flight_info_list l;
  CHECK(fsh_flight_list_flights(c, NULL, &l, &err) != 0);
  fsh_flight_client_close(c);
  fx_stop(fx);
}

/* ---- TLS ----------------------------------------------------------------------- */

static char tls_dir[256];

static bool make_certs(void) {
  if (system("command -v openssl >/dev/null 2>&1") != 0) return false;
  snprintf(tls_dir, sizeof tls_dir, "/tmp/fsh-client-tls-XXXXXX");
  if (!mkdtemp(tls_dir)) return false;
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "cd %s && "
           "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca -keyout ca.key "
           "-out ca.pem && "
           "openssl req -newkey rsa:2048 -nodes -subj /CN=server -keyout server.key "
           "-out server.csr && "
           "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:flight.test\\n' > server.ext && "
           "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile server.ext -out server.pem && "
           "openssl req -newkey rsa:2048 -nodes -subj /CN=client-bob -keyout client.key "
           "-out client.csr && "
           "printf 'extendedKeyUsage=clientAuth\\n' > client.ext && "
           "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile client.ext -out client.pem",
           tls_dir);
  char quiet[4200];
  snprintf(quiet, sizeof quiet, "(%s) >/dev/null 2>&1", cmd);
  return system(quiet) == 0;
}

static const char *tls_path(char *buf, const char *name) {
  snprintf(buf, 320, "%s/%s", tls_dir, name);
  return buf;
}

static int tls_list(const char *uri, const char *ca, const char *cert, const char *key,
                    const char *override, fsh_error *err) {
  fsh_flight_client_options o = {.uri = uri,
                                 .tls_ca_path = ca,
                                 .tls_cert_path = cert,
                                 .tls_key_path = key,
                                 .tls_override_hostname = override,
                                 .timeout_ms = 5000};
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(fsh_flight_client_open(&o, &c, err));
  fsh_flight_info_list l;
  int rc = fsh_flight_list_flights(c, NULL, &l, err);
  if (rc == 0) {
    rc = l.n == 2 ? 0 : fsh_error_set(err, EPROTO, "%lld flights", (long long)l.n);
    fsh_flight_info_list_reset(&l);
  }
  fsh_flight_client_close(c);
  return rc;
}

static void test_tls(void) {
  if (!make_certs()) {
    printf("skip test_tls: no openssl\n");
    return;
  }
  char ca[320], cert[320], key[320], scert[320], skey[320];
  fsh_flight_server_options o = {.listen = "127.0.0.1:0",
                                 .n_threads = 2,
                                 .tls_cert_path = tls_path(scert, "server.pem"),
                                 .tls_key_path = tls_path(skey, "server.key")};
  fx_server *fx = fx_start(&o);
  fsh_error err = {{0}};
  CHECK_OK(tls_list(fx->uri, tls_path(ca, "ca.pem"), NULL, NULL, NULL, &err));
  CHECK_OK(tls_list(fx->uri, tls_path(ca, "ca.pem"), NULL, NULL, "flight.test", &err));
  CHECK_EQ_INT(tls_list(fx->uri, tls_path(ca, "ca.pem"), NULL, NULL, "other.test", &err), EAGAIN);
  /* the server's own certificate is not a CA for itself here: refused */
  CHECK(tls_list(fx->uri, tls_path(ca, "client.pem"), NULL, NULL, NULL, &err) != 0);
  fx_stop(fx);

  /* mutual TLS */
  char cca[320];
  o.tls_client_ca_path = tls_path(cca, "ca.pem");
  fx = fx_start(&o);
  CHECK_OK(tls_list(fx->uri, tls_path(ca, "ca.pem"), tls_path(cert, "client.pem"),
                    tls_path(key, "client.key"), NULL, &err));
  CHECK(tls_list(fx->uri, tls_path(ca, "ca.pem"), NULL, NULL, NULL, &err) != 0);
  fx_stop(fx);

  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tls_dir);
  CHECK(system(cmd) == 0);
}

FSH_TEST_MAIN(TEST(test_bad_options), TEST(test_connection_refused),
              TEST(test_silent_server_deadline), TEST(test_stream_deadline),
              TEST(test_reader_cancel), TEST(test_server_stopped_mid_stream), TEST(test_tls))
