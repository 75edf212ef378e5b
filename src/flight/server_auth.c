/* server_auth.c -- the Flight server's authentication: bearer tokens on
 * every call, basic credentials in Handshake (as a BasicAuth payload or an
 * "authorization: Basic" header, the way Arrow C++ clients send them), the
 * TLS peer's identity, and server credentials (insecure, TLS, mutual TLS)
 * read from PEM files. */
#include "flight/server_internal.h"

#include <errno.h>
#include <grpc/grpc_security.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool srv_secret_equals(const void *a, size_t a_len, const char *b) {
  size_t b_len = strlen(b);
  const unsigned char *x = a, *y = (const unsigned char *)b;
  unsigned char diff = (unsigned char)(a_len != b_len);
  /* Touch every byte of the expected secret whatever the input: no early
   * exit on the first difference. */
  for (size_t i = 0; i < b_len; i++) diff |= (unsigned char)((i < a_len ? x[i] : 0) ^ y[i]);
  return diff == 0;
}

static int srv_b64_value(unsigned char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+' || ch == '-') return 62;
  if (ch == '/' || ch == '_') return 63;
  return -1;
}

int srv_base64_decode(const char *in, size_t n, char **out, size_t *out_len) {
  while (n > 0 && in[n - 1] == '=') n--;
  if (n % 4 == 1) return EINVAL;
  char *buf = fsh_malloc(n / 4 * 3 + 3);
  if (!buf) return ENOMEM;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int v = srv_b64_value((unsigned char)in[i]);
    if (v < 0) {
      fsh_free(buf);
      return EINVAL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      buf[o++] = (char)((acc >> bits) & 0xff);
    }
  }
  buf[o] = '\0';
  *out = buf;
  *out_len = o;
  return 0;
}

const grpc_slice *srv_find_header(const fsh_flight_call *c, const char *key) {
  for (size_t i = 0; i < c->request_md.count; i++)
    if (grpc_slice_str_cmp(c->request_md.metadata[i].key, key) == 0)
      return &c->request_md.metadata[i].value;
  return NULL;
}

bool srv_auth_check_bearer(fsh_flight_call *c) {
  const fsh_flight_server *s = c->server;
  if (!s->auth_token) return true;
  bool ok = false;
  const grpc_slice *v = srv_find_header(c, "authorization");
  if (v) {
    const char *p = (const char *)GRPC_SLICE_START_PTR(*v);
    size_t n = GRPC_SLICE_LENGTH(*v);
    if (n > 7 && strncasecmp(p, "Bearer ", 7) == 0) {
      p += 7;
      n -= 7;
      while (n > 0 && *p == ' ') p++, n--;
      ok = srv_secret_equals(p, n, s->auth_token);
    }
  }
  /* Arrow's ClientAuthHandler sends the token Handshake returned as binary
   * metadata (gRPC has already base64-decoded it). */
  if (!ok && (v = srv_find_header(c, "auth-token-bin")) != NULL)
    ok = srv_secret_equals(GRPC_SLICE_START_PTR(*v), GRPC_SLICE_LENGTH(*v), s->auth_token);
  if (ok && !c->identity && s->basic_user) srv_call_set_identity(c, s->basic_user);
  return ok;
}

void srv_auth_tls_identity(fsh_flight_call *c) {
  grpc_auth_context *ctx = grpc_call_auth_context(c->call);
  if (!ctx) return;
  if (grpc_auth_context_peer_is_authenticated(ctx)) {
    grpc_auth_property_iterator it = grpc_auth_context_peer_identity(ctx);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p && p->value && p->value_length > 0) {
      char *id = fsh_strndup(p->value, p->value_length);
      if (id) {
        fsh_free(c->identity);
        c->identity = id;
      }
    }
  }
  grpc_auth_context_release(ctx);
}

/* Reads a whole (small) PEM file into a NUL-terminated string. */
static int srv_read_pem(const char *what, const char *path, char **out, fsh_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return fsh_error_set(err, errno, "flight server: cannot open %s %s: %s", what, path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = fsh_malloc(cap);
  int rc = 0;
  while (buf) {
    if (n + 1 >= cap) {
      char *nb = fsh_realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
    if (n > (16u << 20)) {
      rc = fsh_error_set(err, EFBIG, "flight server: %s %s is larger than 16 MiB", what, path);
      break;
    }
  }
  bool read_err = ferror(f);
  fclose(f);
  if (!buf) return fsh_error_set(err, ENOMEM, "flight server: out of memory reading %s", path);
  if (rc == 0 && read_err) rc = fsh_error_set(err, EIO, "flight server: cannot read %s %s", what, path);
  if (rc == 0 && n == 0) rc = fsh_error_set(err, EINVAL, "flight server: %s %s is empty", what, path);
  if (rc != 0) {
    fsh_free(buf);
    return rc;
  }
  buf[n] = '\0';
  *out = buf;
  return 0;
}

int srv_auth_credentials(const fsh_flight_server_options *opts, grpc_server_credentials **out,
                         fsh_error *err) {
  if (!opts->tls_cert_path) {
    *out = grpc_insecure_server_credentials_create();
    return 0;
  }
  char *cert = NULL, *key = NULL, *ca = NULL;
  int rc = srv_read_pem("certificate", opts->tls_cert_path, &cert, err);
  if (rc == 0) rc = srv_read_pem("private key", opts->tls_key_path, &key, err);
  if (rc == 0 && opts->tls_client_ca_path)
    rc = srv_read_pem("client CA", opts->tls_client_ca_path, &ca, err);
  if (rc == 0) {
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    /* Mutual TLS: clients must present a certificate that ca verifies. */
    *out = grpc_ssl_server_credentials_create_ex(
        ca, &pair, 1,
        ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    if (!*out) rc = fsh_error_set(err, EINVAL, "flight server: invalid TLS certificate or key");
  }
  fsh_free(cert);
  if (key) {
    memset(key, 0, strlen(key));
    fsh_free(key);
  }
  fsh_free(ca);
  return rc;
}
