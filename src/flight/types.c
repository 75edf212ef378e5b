/* types.c -- the Flight data types: owned bytes, descriptors, endpoints,
 * infos, actions, the result lists handlers fill, received messages, and
 * the parsing of Flight location URIs. Everything allocates through
 * fsh_malloc; every reset releases and leaves the struct zeroed. */
#include <flightshuffle/flight.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- bytes ----------------------------------------------------------------- */

int fsh_bytes_set(fsh_bytes *b, const void *data, int64_t size) {
  if (size < 0 || (size > 0 && !data)) return EINVAL;
  uint8_t *copy = NULL;
  if (size > 0) {
    copy = fsh_malloc((size_t)size);
    if (!copy) return ENOMEM;
    memcpy(copy, data, (size_t)size);
  }
  fsh_free(b->data);
  b->data = copy;
  b->size = size;
  return 0;
}

void fsh_bytes_reset(fsh_bytes *b) {
  if (!b) return;
  fsh_free(b->data);
  b->data = NULL;
  b->size = 0;
}

/* ---- descriptors --------------------------------------------------------- */

void fsh_flight_descriptor_reset(fsh_flight_descriptor *d) {
  if (!d) return;
  fsh_bytes_reset(&d->cmd);
  for (int64_t i = 0; i < d->n_path; i++) fsh_free(d->path[i]);
  fsh_free(d->path);
  memset(d, 0, sizeof *d);
}

/* Copies n strings into a new array; NULL entries are rejected. On error
 * nothing is allocated. */
static int copy_strings(char *const *src, int64_t n, char ***out) {
  *out = NULL;
  if (n <= 0) return n < 0 ? EINVAL : 0;
  if (!src || (uint64_t)n > SIZE_MAX / sizeof(char *)) return EINVAL;
  char **dst = fsh_calloc((size_t)n, sizeof *dst);
  if (!dst) return ENOMEM;
  for (int64_t i = 0; i < n; i++) {
    dst[i] = src[i] ? fsh_strdup(src[i]) : NULL;
    if (!dst[i]) {
      for (int64_t j = 0; j < i; j++) fsh_free(dst[j]);
      fsh_free(dst);
      return src[i] ? ENOMEM : EINVAL;
    }
  }
  *out = dst;
  return 0;
}

int fsh_flight_descriptor_copy(fsh_flight_descriptor *dst, const fsh_flight_descriptor *src) {
  fsh_flight_descriptor d = {.type = src->type};
  int rc = fsh_bytes_set(&d.cmd, src->cmd.data, src->cmd.size);
  if (rc == 0) rc = copy_strings(src->path, src->n_path, &d.path);
  if (rc != 0) {
    fsh_flight_descriptor_reset(&d);
    return rc;
  }
  d.n_path = src->n_path;
  *dst = d;
  return 0;
}

int fsh_flight_descriptor_path(fsh_flight_descriptor *d, const char *const *path, int64_t n) {
  fsh_flight_descriptor out = {.type = FSH_FLIGHT_DESCRIPTOR_PATH};
  int rc = copy_strings((char *const *)path, n, &out.path);
  if (rc != 0) return rc;
  out.n_path = n;
  *d = out;
  return 0;
}

/* ---- endpoints, infos, actions ----------------------------------------- */

void fsh_flight_endpoint_reset(fsh_flight_endpoint *e) {
  if (!e) return;
  fsh_bytes_reset(&e->ticket);
  for (int64_t i = 0; i < e->n_locations; i++) fsh_free(e->locations[i]);
  fsh_free(e->locations);
  fsh_bytes_reset(&e->app_metadata);
  memset(e, 0, sizeof *e);
}

void fsh_flight_info_reset(fsh_flight_info *info) {
  if (!info) return;
  fsh_schema_unref(info->schema);
  fsh_flight_descriptor_reset(&info->descriptor);
  for (int64_t i = 0; i < info->n_endpoints; i++) fsh_flight_endpoint_reset(&info->endpoints[i]);
  fsh_free(info->endpoints);
  fsh_bytes_reset(&info->app_metadata);
  memset(info, 0, sizeof *info);
}

void fsh_flight_action_reset(fsh_flight_action *a) {
  if (!a) return;
  fsh_free(a->type);
  fsh_bytes_reset(&a->body);
  memset(a, 0, sizeof *a);
}

void fsh_flight_action_type_reset(fsh_flight_action_type *t) {
  if (!t) return;
  fsh_free(t->type);
  fsh_free(t->description);
  memset(t, 0, sizeof *t);
}

/* ---- lists ---------------------------------------------------------------- */

/* Grows *items (of n elements of `size` bytes) by one zeroed slot.
 * Capacity doubles at powers of two, so it is implied by n. */
static int list_grow(void **items, int64_t n, size_t size) {
  if (n > 0 && (n & (n - 1)) != 0) return 0; /* room left: capacity is the next power of two */
  int64_t cap = n == 0 ? 1 : n * 2;
  if ((uint64_t)cap > SIZE_MAX / size) return ENOMEM;
  void *p = fsh_realloc(*items, (size_t)cap * size);
  if (!p) return ENOMEM;
  *items = p;
  return 0;
}

int fsh_flight_info_list_push(fsh_flight_info_list *l, fsh_flight_info *moved) {
  int rc = list_grow((void **)&l->items, l->n, sizeof *l->items);
  if (rc != 0) return rc;
  l->items[l->n++] = *moved;
  memset(moved, 0, sizeof *moved);
  return 0;
}

void fsh_flight_info_list_reset(fsh_flight_info_list *l) {
  if (!l) return;
  for (int64_t i = 0; i < l->n; i++) fsh_flight_info_reset(&l->items[i]);
  fsh_free(l->items);
  l->items = NULL;
  l->n = 0;
}

int fsh_flight_result_list_push(fsh_flight_result_list *l, const void *data, int64_t size) {
  fsh_bytes b = {0};
  int rc = fsh_bytes_set(&b, data, size);
  if (rc != 0) return rc;
  rc = list_grow((void **)&l->items, l->n, sizeof *l->items);
  if (rc != 0) {
    fsh_bytes_reset(&b);
    return rc;
  }
  l->items[l->n++] = b;
  return 0;
}

void fsh_flight_result_list_reset(fsh_flight_result_list *l) {
  if (!l) return;
  for (int64_t i = 0; i < l->n; i++) fsh_bytes_reset(&l->items[i]);
  fsh_free(l->items);
  l->items = NULL;
  l->n = 0;
}

int fsh_flight_action_type_list_push(fsh_flight_action_type_list *l, const char *type,
                                     const char *description) {
  if (!type) return EINVAL;
  fsh_flight_action_type t = {fsh_strdup(type), fsh_strdup(description ? description : "")};
  if (!t.type || !t.description) {
    fsh_flight_action_type_reset(&t);
    return ENOMEM;
  }
  int rc = list_grow((void **)&l->items, l->n, sizeof *l->items);
  if (rc != 0) {
    fsh_flight_action_type_reset(&t);
    return rc;
  }
  l->items[l->n++] = t;
  return 0;
}

void fsh_flight_action_type_list_reset(fsh_flight_action_type_list *l) {
  if (!l) return;
  for (int64_t i = 0; i < l->n; i++) fsh_flight_action_type_reset(&l->items[i]);
  fsh_free(l->items);
  l->items = NULL;
  l->n = 0;
}

/* ---- received messages -------------------------------------------------- */

void fsh_flight_message_reset(fsh_flight_message *m) {
  if (!m) return;
  fsh_buffer_unref(m->metadata);
  fsh_buffer_unref(m->body);
  fsh_buffer_unref(m->app_metadata);
  fsh_flight_descriptor_reset(&m->descriptor);
  memset(m, 0, sizeof *m);
}

/* ---- URIs ------------------------------------------------------------------ */

/* Parses grpc://host:port, grpc+tcp://host:port, grpc+tls://host:port; an
 * IPv6 host comes in brackets ([::1]:port) and is stored without them, so a
 * gRPC target is "host:port", or "[host]:port" when host contains ':'. A
 * single trailing '/' is accepted; the port is required (1..65535). */
int fsh_flight_location_parse(const char *uri, fsh_flight_location *out, fsh_error *err) {
  if (!uri) return fsh_error_set(err, EINVAL, "Flight location: no URI");
  static const struct {
    const char *prefix;
    bool tls;
  } schemes[] = {{"grpc://", false}, {"grpc+tcp://", false}, {"grpc+tls://", true}};
  const char *rest = NULL;
  bool tls = false;
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    size_t n = strlen(schemes[i].prefix);
    if (strncmp(uri, schemes[i].prefix, n) == 0) {
      rest = uri + n;
      tls = schemes[i].tls;
      break;
    }
  }
  if (!rest)
    return fsh_error_set(err, EINVAL,
                         "Flight location '%s': scheme must be grpc://, grpc+tcp:// or grpc+tls://",
                         uri);
  const char *host = rest, *host_end, *after;
  if (*rest == '[') {
    host = rest + 1;
    host_end = strchr(host, ']');
    if (!host_end)
      return fsh_error_set(err, EINVAL, "Flight location '%s': '[' without ']' around the IPv6 host",
                           uri);
    after = host_end + 1;
  } else {
    host_end = strchr(rest, ':');
    if (!host_end) host_end = rest + strlen(rest);
    after = host_end;
    for (const char *p = host; p < host_end; p++)
      if (*p == '/' || *p == '@' || *p == '[' || *p == ']' || *p == ' ')
        return fsh_error_set(err, EINVAL, "Flight location '%s': bad character '%c' in the host",
                             uri, *p);
  }
  size_t host_len = (size_t)(host_end - host);
  if (host_len == 0) return fsh_error_set(err, EINVAL, "Flight location '%s': empty host", uri);
  if (host_len >= sizeof out->host)
    return fsh_error_set(err, EINVAL, "Flight location '%s': host longer than %zu bytes", uri,
                         sizeof out->host - 1);
  if (*after != ':')
    return fsh_error_set(err, EINVAL, "Flight location '%s': missing ':port' after the host", uri);
  const char *port_s = after + 1;
  long port = 0;
  const char *p = port_s;
  while (*p >= '0' && *p <= '9' && port <= 65535) port = port * 10 + (*p++ - '0');
  if (p == port_s || port < 1 || port > 65535 || (*p != '\0' && strcmp(p, "/") != 0))
    return fsh_error_set(err, EINVAL, "Flight location '%s': port must be a number in 1..65535",
                         uri);
  memset(out, 0, sizeof *out);
  out->tls = tls;
  memcpy(out->host, host, host_len);
  out->port = (int)port;
  return 0;
}
