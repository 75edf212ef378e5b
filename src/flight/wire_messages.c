/* wire_messages.c -- every Flight message but FlightData, through the
 * protobuf-c code generated from proto/Flight.proto: our structs are turned
 * into protobuf-c views (no copies) to encode, and unpacked messages are
 * deep-copied into our structs to decode. Also the schema bytes Flight
 * carries (an encapsulated IPC Schema message) and contiguous copies of
 * gRPC byte buffers. */
#include "wire_pb.h"

#include <errno.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#define CONTINUATION 0xFFFFFFFFu

/* ---- protobuf-c plumbing -------------------------------------------------- */

/* protobuf-c reports a failed allocation during unpack like malformed
 * input (NULL); this per-thread flag tells the two apart. */
static _Thread_local bool pb_out_of_memory;

static void *pb_alloc(void *ctx, size_t size) {
  void *p = fsh_malloc(size ? size : 1);
  if (!p) pb_out_of_memory = true;
  return p;
}
static void pb_free(void *ctx, void *p) { fsh_free(p); }

ProtobufCAllocator fsh_flight_pb_allocator = {pb_alloc, pb_free, NULL};

/* Call right before an unpack. */
static void pb_unpack_begin(void) { pb_out_of_memory = false; }

/* The error for an unpack that returned NULL: ENOMEM when an allocation
 * failed, otherwise the bytes were not a valid `what`. */
static int pb_unpack_failed(const char *what, size_t size, fsh_error *err) {
  if (pb_out_of_memory)
    return fsh_error_set(err, ENOMEM, "Flight: out of memory decoding a %s message", what);
  return fsh_error_set(err, EINVAL, "Flight: malformed %s message (%zu bytes)", what, size);
}

/* Packs m into a new one-slice byte buffer (gRPC memory: gRPC frees it). */
static int pack(const ProtobufCMessage *m, grpc_byte_buffer **out, fsh_error *err) {
  size_t n = protobuf_c_message_get_packed_size(m);
  if (n == 0) {
    *out = grpc_raw_byte_buffer_create(NULL, 0);
  } else {
    grpc_slice s = grpc_slice_malloc(n);
    size_t written = protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    *out = written == n ? grpc_raw_byte_buffer_create(&s, 1) : NULL;
    grpc_slice_unref(s);
  }
  if (!*out)
    return fsh_error_set(err, ENOMEM, "Flight: cannot encode a %s message of %zu bytes",
                         m->descriptor->short_name, n);
  return 0;
}

/* Unpacks one message of type `desc` from bb; free it with
 * protobuf_c_message_free_unpacked(m, &fsh_flight_pb_allocator). */
static int unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                  ProtobufCMessage **out, fsh_error *err) {
  *out = NULL;
  if (!bb) return fsh_error_set(err, EINVAL, "Flight: no %s message", desc->short_name);
  fsh_bytes b = {0};
  const uint8_t *data;
  size_t size;
  if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
      bb->data.raw.slice_buffer.count <= 1) {
    /* One slice (the usual case for small messages): read it in place. */
    if (bb->data.raw.slice_buffer.count == 1) {
      data = GRPC_SLICE_START_PTR(bb->data.raw.slice_buffer.slices[0]);
      size = GRPC_SLICE_LENGTH(bb->data.raw.slice_buffer.slices[0]);
    } else {
      data = NULL;
      size = 0;
    }
  } else {
    FSH_RETURN_NOT_OK(fsh_flight_byte_buffer_bytes(bb, &b, err));
    data = b.data;
    size = (size_t)b.size;
  }
  static const uint8_t empty[1];
  pb_unpack_begin();
  *out = protobuf_c_message_unpack(desc, &fsh_flight_pb_allocator, size, data ? data : empty);
  fsh_bytes_reset(&b);
  if (!*out) return pb_unpack_failed(desc->short_name, size, err);
  return 0;
}

static void unpacked_free(void *m) {
  if (m) protobuf_c_message_free_unpacked((ProtobufCMessage *)m, &fsh_flight_pb_allocator);
}

static ProtobufCBinaryData bin(const fsh_bytes *b) {
  return (ProtobufCBinaryData){(size_t)b->size, b->data};
}

static int bytes_from(fsh_bytes *dst, ProtobufCBinaryData src, const char *what, fsh_error *err) {
  if (fsh_bytes_set(dst, src.data, (int64_t)src.len) != 0)
    return fsh_error_set(err, ENOMEM, "Flight: out of memory copying %zu bytes of %s", src.len,
                         what);
  return 0;
}

static int strdup_to(char **dst, const char *src, fsh_error *err) {
  *dst = fsh_strdup(src ? src : "");
  if (!*dst) return fsh_error_set(err, ENOMEM, "Flight: out of memory copying a string");
  return 0;
}

/* A proto3 string field: protobuf-c wants a non-NULL pointer. */
static char *str_view(const char *s) { return s ? (char *)s : (char *)""; }

/* ---- timestamps ------------------------------------------------------------- */

#define NS_PER_S 1000000000LL

static void timestamp_view(int64_t unix_ns, Arrow__Flight__Protocol__Timestamp *t) {
  arrow__flight__protocol__timestamp__init(t);
  int64_t s = unix_ns / NS_PER_S, ns = unix_ns % NS_PER_S;
  if (ns < 0) {
    ns += NS_PER_S;
    s--;
  }
  t->seconds = s;
  t->nanos = (int32_t)ns;
}

static int timestamp_ns(const Arrow__Flight__Protocol__Timestamp *t, int64_t *out,
                        fsh_error *err) {
  if (t->nanos < 0 || t->nanos >= NS_PER_S || t->seconds > INT64_MAX / NS_PER_S - 1 ||
      t->seconds < INT64_MIN / NS_PER_S + 1)
    return fsh_error_set(err, EINVAL,
                         "Flight: expiration time %lld s %d ns is out of range",
                         (long long)t->seconds, (int)t->nanos);
  *out = t->seconds * NS_PER_S + t->nanos;
  return 0;
}

/* ---- descriptors ------------------------------------------------------------ */

void fsh_flight_pb_descriptor_view(const fsh_flight_descriptor *d,
                                   Arrow__Flight__Protocol__FlightDescriptor *pb) {
  arrow__flight__protocol__flight_descriptor__init(pb);
  pb->type = (Arrow__Flight__Protocol__FlightDescriptor__DescriptorType)d->type;
  pb->cmd = bin(&d->cmd);
  pb->n_path = (size_t)d->n_path;
  pb->path = d->path;
}

int fsh_flight_pb_descriptor_copy(const Arrow__Flight__Protocol__FlightDescriptor *pb,
                                  fsh_flight_descriptor *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  out->type = (fsh_flight_descriptor_type)pb->type;
  FSH_RETURN_NOT_OK(bytes_from(&out->cmd, pb->cmd, "a descriptor command", err));
  if (pb->n_path > 0) {
    out->path = fsh_calloc(pb->n_path, sizeof *out->path);
    if (!out->path) return fsh_error_set(err, ENOMEM, "Flight: out of memory (descriptor path)");
    for (size_t i = 0; i < pb->n_path; i++) {
      FSH_RETURN_NOT_OK(strdup_to(&out->path[i], pb->path[i], err));
      out->n_path++;
    }
  }
  return 0;
}

int fsh_flight_pb_descriptor_unpack(const uint8_t *data, size_t size, fsh_flight_descriptor *out,
                                    fsh_error *err) {
  static const uint8_t empty[1];
  pb_unpack_begin();
  Arrow__Flight__Protocol__FlightDescriptor *pb = arrow__flight__protocol__flight_descriptor__unpack(
      &fsh_flight_pb_allocator, size, data ? data : empty);
  if (!pb) return pb_unpack_failed("FlightDescriptor", size, err);
  int rc = fsh_flight_pb_descriptor_copy(pb, out, err);
  unpacked_free(pb);
  return rc;
}

int fsh_flight_wire_encode_descriptor(const fsh_flight_descriptor *d, grpc_byte_buffer **out,
                                      fsh_error *err) {
  Arrow__Flight__Protocol__FlightDescriptor pb;
  fsh_flight_pb_descriptor_view(d, &pb);
  return pack(&pb.base, out, err);
}

int fsh_flight_wire_decode_descriptor(grpc_byte_buffer *bb, fsh_flight_descriptor *out,
                                      fsh_error *err) {
  ProtobufCMessage *m;
  FSH_RETURN_NOT_OK(unpack(&arrow__flight__protocol__flight_descriptor__descriptor, bb, &m, err));
  int rc = fsh_flight_pb_descriptor_copy((Arrow__Flight__Protocol__FlightDescriptor *)m, out, err);
  unpacked_free(m);
  return rc;
}

/* ---- FlightInfo / PollInfo ---------------------------------------------------- */

/* The protobuf-c view of a FlightInfo and the memory it needed: arrays of
 * endpoint, ticket, location and timestamp structs. */
typedef struct info_view {
  Arrow__Flight__Protocol__FlightInfo info;
  Arrow__Flight__Protocol__FlightDescriptor descriptor;
  Arrow__Flight__Protocol__FlightEndpoint *endpoints;
  Arrow__Flight__Protocol__FlightEndpoint **endpoint_ptrs;
  Arrow__Flight__Protocol__Ticket *tickets;
  Arrow__Flight__Protocol__Timestamp *stamps;
  Arrow__Flight__Protocol__Location *locations;
  Arrow__Flight__Protocol__Location **location_ptrs;
  fsh_bytes schema;
} info_view;

static void info_view_reset(info_view *v) {
  fsh_free(v->endpoints);
  fsh_free(v->endpoint_ptrs);
  fsh_free(v->tickets);
  fsh_free(v->stamps);
  fsh_free(v->locations);
  fsh_free(v->location_ptrs);
  fsh_bytes_reset(&v->schema);
}

static int info_view_init(info_view *v, const fsh_flight_info *i, fsh_error *err) {
  memset(v, 0, sizeof *v);
  arrow__flight__protocol__flight_info__init(&v->info);
  if (i->schema) FSH_RETURN_NOT_OK(fsh_flight_schema_to_bytes(i->schema, &v->schema, err));
  v->info.schema = bin(&v->schema);
  fsh_flight_pb_descriptor_view(&i->descriptor, &v->descriptor);
  v->info.flight_descriptor = &v->descriptor;
  v->info.total_records = i->total_records;
  v->info.total_bytes = i->total_bytes;
  v->info.ordered = i->ordered;
  v->info.app_metadata = bin(&i->app_metadata);
  size_t ne = (size_t)(i->n_endpoints > 0 ? i->n_endpoints : 0), nl = 0;
  for (size_t e = 0; e < ne; e++) nl += (size_t)i->endpoints[e].n_locations;
  if (ne == 0) return 0;
  v->endpoints = fsh_calloc(ne, sizeof *v->endpoints);
  v->endpoint_ptrs = fsh_calloc(ne, sizeof *v->endpoint_ptrs);
  v->tickets = fsh_calloc(ne, sizeof *v->tickets);
  v->stamps = fsh_calloc(ne, sizeof *v->stamps);
  if (nl > 0) {
    v->locations = fsh_calloc(nl, sizeof *v->locations);
    v->location_ptrs = fsh_calloc(nl, sizeof *v->location_ptrs);
  }
  if (!v->endpoints || !v->endpoint_ptrs || !v->tickets || !v->stamps ||
      (nl > 0 && (!v->locations || !v->location_ptrs)))
    return fsh_error_set(err, ENOMEM, "Flight: out of memory encoding a FlightInfo");
  size_t l = 0;
  for (size_t e = 0; e < ne; e++) {
    const fsh_flight_endpoint *src = &i->endpoints[e];
    Arrow__Flight__Protocol__FlightEndpoint *ep = &v->endpoints[e];
    arrow__flight__protocol__flight_endpoint__init(ep);
    arrow__flight__protocol__ticket__init(&v->tickets[e]);
    v->tickets[e].ticket = bin(&src->ticket);
    ep->ticket = &v->tickets[e];
    ep->n_location = (size_t)src->n_locations;
    ep->location = nl > 0 ? &v->location_ptrs[l] : NULL;
    for (int64_t k = 0; k < src->n_locations; k++, l++) {
      arrow__flight__protocol__location__init(&v->locations[l]);
      v->locations[l].uri = str_view(src->locations[k]);
      v->location_ptrs[l] = &v->locations[l];
    }
    if (src->expiration_unix_ns != 0) {
      timestamp_view(src->expiration_unix_ns, &v->stamps[e]);
      ep->expiration_time = &v->stamps[e];
    }
    ep->app_metadata = bin(&src->app_metadata);
    v->endpoint_ptrs[e] = ep;
  }
  v->info.n_endpoint = ne;
  v->info.endpoint = v->endpoint_ptrs;
  return 0;
}

/* Deep copy of an unpacked FlightInfo into *out (zeroed first). */
static int info_copy(const Arrow__Flight__Protocol__FlightInfo *pb, fsh_flight_info *out,
                     fsh_error *err) {
  memset(out, 0, sizeof *out);
  out->total_records = pb->total_records;
  out->total_bytes = pb->total_bytes;
  out->ordered = pb->ordered;
  if (pb->schema.len > 0) {
    fsh_bytes view = {pb->schema.data, (int64_t)pb->schema.len};
    FSH_RETURN_NOT_OK(fsh_flight_schema_from_bytes(&view, &out->schema, err));
  }
  if (pb->flight_descriptor)
    FSH_RETURN_NOT_OK(fsh_flight_pb_descriptor_copy(pb->flight_descriptor, &out->descriptor, err));
  FSH_RETURN_NOT_OK(bytes_from(&out->app_metadata, pb->app_metadata, "FlightInfo.app_metadata",
                               err));
  if (pb->n_endpoint == 0) return 0;
  out->endpoints = fsh_calloc(pb->n_endpoint, sizeof *out->endpoints);
  if (!out->endpoints) return fsh_error_set(err, ENOMEM, "Flight: out of memory (endpoints)");
  for (size_t e = 0; e < pb->n_endpoint; e++) {
    const Arrow__Flight__Protocol__FlightEndpoint *src = pb->endpoint[e];
    fsh_flight_endpoint *ep = &out->endpoints[e];
    out->n_endpoints++;
    if (src->ticket)
      FSH_RETURN_NOT_OK(bytes_from(&ep->ticket, src->ticket->ticket, "a ticket", err));
    if (src->n_location > 0) {
      ep->locations = fsh_calloc(src->n_location, sizeof *ep->locations);
      if (!ep->locations) return fsh_error_set(err, ENOMEM, "Flight: out of memory (locations)");
      for (size_t k = 0; k < src->n_location; k++) {
        FSH_RETURN_NOT_OK(strdup_to(&ep->locations[k], src->location[k]->uri, err));
        ep->n_locations++;
      }
    }
    if (src->expiration_time)
      FSH_RETURN_NOT_OK(timestamp_ns(src->expiration_time, &ep->expiration_unix_ns, err));
    FSH_RETURN_NOT_OK(bytes_from(&ep->app_metadata, src->app_metadata,
                                 "FlightEndpoint.app_metadata", err));
  }
  return 0;
}

int fsh_flight_wire_encode_info(const fsh_flight_info *i, grpc_byte_buffer **out,
                                fsh_error *err) {
  info_view v;
  int rc = info_view_init(&v, i, err);
  if (rc == 0) rc = pack(&v.info.base, out, err);
  info_view_reset(&v);
  return rc;
}

int fsh_flight_wire_decode_info(grpc_byte_buffer *bb, fsh_flight_info *out, fsh_error *err) {
  ProtobufCMessage *m;
  memset(out, 0, sizeof *out);
  FSH_RETURN_NOT_OK(unpack(&arrow__flight__protocol__flight_info__descriptor, bb, &m, err));
  int rc = info_copy((Arrow__Flight__Protocol__FlightInfo *)m, out, err);
  unpacked_free(m);
  return rc;
}

/* PollInfo: `info` is i; while !done, flight_descriptor is i's descriptor
 * (the one to poll again with); progress is sent when in [0, 1]. */
int fsh_flight_wire_encode_poll_info(const fsh_flight_info *i, double progress, bool done,
                                     grpc_byte_buffer **out, fsh_error *err) {
  info_view v;
  int rc = info_view_init(&v, i, err);
  if (rc == 0) {
    Arrow__Flight__Protocol__PollInfo poll;
    arrow__flight__protocol__poll_info__init(&poll);
    poll.info = &v.info;
    if (!done) poll.flight_descriptor = &v.descriptor;
    if (progress >= 0.0 && progress <= 1.0) {
      poll._progress_case = ARROW__FLIGHT__PROTOCOL__POLL_INFO___PROGRESS_PROGRESS;
      poll.progress = progress;
    }
    rc = pack(&poll.base, out, err);
  }
  info_view_reset(&v);
  return rc;
}

/* *done is true when the PollInfo has no flight_descriptor (the query is
 * complete); *progress is -1 when absent. out->descriptor is the info's
 * descriptor, or, when the info has none, the descriptor to poll again with. */
int fsh_flight_wire_decode_poll_info(grpc_byte_buffer *bb, fsh_flight_info *out,
                                     double *progress, bool *done, fsh_error *err) {
  ProtobufCMessage *m;
  memset(out, 0, sizeof *out);
  *progress = -1;
  *done = true;
  FSH_RETURN_NOT_OK(unpack(&arrow__flight__protocol__poll_info__descriptor, bb, &m, err));
  Arrow__Flight__Protocol__PollInfo *poll = (Arrow__Flight__Protocol__PollInfo *)m;
  int rc = 0;
  if (poll->info) {
    rc = info_copy(poll->info, out, err);
  } else {
    out->total_records = out->total_bytes = -1;
  }
  if (rc == 0 && poll->flight_descriptor && (!poll->info || !poll->info->flight_descriptor))
    rc = fsh_flight_pb_descriptor_copy(poll->flight_descriptor, &out->descriptor, err);
  *done = poll->flight_descriptor == NULL;
  if (poll->_progress_case == ARROW__FLIGHT__PROTOCOL__POLL_INFO___PROGRESS_PROGRESS)
    *progress = poll->progress;
  unpacked_free(m);
  return rc;
}

/* ---- single-bytes-field messages -------------------------------------------- */

/* All five are `bytes x = 1`; each keeps its own generated type so the
 * protobuf-c descriptors name the right message in errors. */
typedef union bytes_msg {
  ProtobufCMessage base;
  Arrow__Flight__Protocol__Ticket ticket;
  Arrow__Flight__Protocol__Criteria criteria;
  Arrow__Flight__Protocol__Result result;
  Arrow__Flight__Protocol__PutResult put_result;
  Arrow__Flight__Protocol__SchemaResult schema_result;
} bytes_msg;

static const ProtobufCMessageDescriptor *bytes_desc(fsh_flight_bytes_msg kind) {
  switch (kind) {
    case FSH_WIRE_TICKET: return &arrow__flight__protocol__ticket__descriptor;
    case FSH_WIRE_CRITERIA: return &arrow__flight__protocol__criteria__descriptor;
    case FSH_WIRE_RESULT: return &arrow__flight__protocol__result__descriptor;
    case FSH_WIRE_PUT_RESULT: return &arrow__flight__protocol__put_result__descriptor;
    case FSH_WIRE_SCHEMA_RESULT: return &arrow__flight__protocol__schema_result__descriptor;
  }
  return NULL;
}

static ProtobufCBinaryData *bytes_field(bytes_msg *m, fsh_flight_bytes_msg kind) {
  switch (kind) {
    case FSH_WIRE_TICKET: return &m->ticket.ticket;
    case FSH_WIRE_CRITERIA: return &m->criteria.expression;
    case FSH_WIRE_RESULT: return &m->result.body;
    case FSH_WIRE_PUT_RESULT: return &m->put_result.app_metadata;
    case FSH_WIRE_SCHEMA_RESULT: return &m->schema_result.schema;
  }
  return NULL;
}

int fsh_flight_wire_encode_bytes(fsh_flight_bytes_msg kind, const void *data, int64_t size,
                                 grpc_byte_buffer **out, fsh_error *err) {
  const ProtobufCMessageDescriptor *desc = bytes_desc(kind);
  if (!desc || size < 0 || (size > 0 && !data))
    return fsh_error_set(err, EINVAL, "Flight: bad bytes message (kind %d, %lld bytes)",
                         (int)kind, (long long)size);
  bytes_msg m;
  protobuf_c_message_init(desc, &m);
  *bytes_field(&m, kind) = (ProtobufCBinaryData){(size_t)size, (uint8_t *)data};
  return pack(&m.base, out, err);
}

int fsh_flight_wire_decode_bytes(fsh_flight_bytes_msg kind, grpc_byte_buffer *bb, fsh_bytes *out,
                                 fsh_error *err) {
  const ProtobufCMessageDescriptor *desc = bytes_desc(kind);
  memset(out, 0, sizeof *out);
  if (!desc) return fsh_error_set(err, EINVAL, "Flight: unknown bytes message kind %d", (int)kind);
  ProtobufCMessage *m;
  FSH_RETURN_NOT_OK(unpack(desc, bb, &m, err));
  int rc = bytes_from(out, *bytes_field((bytes_msg *)m, kind), desc->short_name, err);
  unpacked_free(m);
  return rc;
}

/* ---- actions ------------------------------------------------------------------ */

int fsh_flight_wire_encode_action(const fsh_flight_action *a, grpc_byte_buffer **out,
                                  fsh_error *err) {
  Arrow__Flight__Protocol__Action pb;
  arrow__flight__protocol__action__init(&pb);
  pb.type = str_view(a->type);
  pb.body = bin(&a->body);
  return pack(&pb.base, out, err);
}

int fsh_flight_wire_decode_action(grpc_byte_buffer *bb, fsh_flight_action *out, fsh_error *err) {
  ProtobufCMessage *m;
  memset(out, 0, sizeof *out);
  FSH_RETURN_NOT_OK(unpack(&arrow__flight__protocol__action__descriptor, bb, &m, err));
  Arrow__Flight__Protocol__Action *pb = (Arrow__Flight__Protocol__Action *)m;
  int rc = strdup_to(&out->type, pb->type, err);
  if (rc == 0) rc = bytes_from(&out->body, pb->body, "Action.body", err);
  unpacked_free(m);
  return rc;
}

int fsh_flight_wire_encode_action_type(const fsh_flight_action_type *t, grpc_byte_buffer **out,
                                       fsh_error *err) {
  Arrow__Flight__Protocol__ActionType pb;
  arrow__flight__protocol__action_type__init(&pb);
  pb.type = str_view(t->type);
  pb.description = str_view(t->description);
  return pack(&pb.base, out, err);
}

int fsh_flight_wire_decode_action_type(grpc_byte_buffer *bb, fsh_flight_action_type *out,
                                       fsh_error *err) {
  ProtobufCMessage *m;
  memset(out, 0, sizeof *out);
  FSH_RETURN_NOT_OK(unpack(&arrow__flight__protocol__action_type__descriptor, bb, &m, err));
  Arrow__Flight__Protocol__ActionType *pb = (Arrow__Flight__Protocol__ActionType *)m;
  int rc = strdup_to(&out->type, pb->type, err);
  if (rc == 0) rc = strdup_to(&out->description, pb->description, err);
  unpacked_free(m);
  return rc;
}

/* ---- handshake and basic auth ----------------------------------------------- */

/* HandshakeRequest and HandshakeResponse have the same fields and numbers:
 * one codec serves both directions. */
int fsh_flight_wire_encode_handshake(uint64_t version, const void *payload, int64_t size,
                                     grpc_byte_buffer **out, fsh_error *err) {
  if (size < 0 || (size > 0 && !payload))
    return fsh_error_set(err, EINVAL, "Flight: bad handshake payload (%lld bytes)",
                         (long long)size);
  Arrow__Flight__Protocol__HandshakeRequest pb;
  arrow__flight__protocol__handshake_request__init(&pb);
  pb.protocol_version = version;
  pb.payload = (ProtobufCBinaryData){(size_t)size, (uint8_t *)payload};
  return pack(&pb.base, out, err);
}

int fsh_flight_wire_decode_handshake(grpc_byte_buffer *bb, uint64_t *version, fsh_bytes *payload,
                                     fsh_error *err) {
  ProtobufCMessage *m;
  memset(payload, 0, sizeof *payload);
  *version = 0;
  FSH_RETURN_NOT_OK(unpack(&arrow__flight__protocol__handshake_request__descriptor, bb, &m, err));
  Arrow__Flight__Protocol__HandshakeRequest *pb = (Arrow__Flight__Protocol__HandshakeRequest *)m;
  *version = pb->protocol_version;
  int rc = bytes_from(payload, pb->payload, "the handshake payload", err);
  unpacked_free(m);
  return rc;
}

int fsh_flight_wire_encode_basic_auth(const char *user, const char *password, fsh_bytes *out,
                                      fsh_error *err) {
  Arrow__Flight__Protocol__BasicAuth pb;
  arrow__flight__protocol__basic_auth__init(&pb);
  pb.username = str_view(user);
  pb.password = str_view(password);
  memset(out, 0, sizeof *out);
  size_t n = arrow__flight__protocol__basic_auth__get_packed_size(&pb);
  if (n == 0) return 0;
  out->data = fsh_malloc(n);
  if (!out->data) return fsh_error_set(err, ENOMEM, "Flight: out of memory (BasicAuth)");
  out->size = (int64_t)arrow__flight__protocol__basic_auth__pack(&pb, out->data);
  return 0;
}

int fsh_flight_wire_decode_basic_auth(const fsh_bytes *in, char **user, char **password,
                                      fsh_error *err) {
  static const uint8_t empty[1];
  *user = *password = NULL;
  pb_unpack_begin();
  Arrow__Flight__Protocol__BasicAuth *pb = arrow__flight__protocol__basic_auth__unpack(
      &fsh_flight_pb_allocator, (size_t)in->size, in->data ? in->data : empty);
  if (!pb) return pb_unpack_failed("BasicAuth", (size_t)in->size, err);
  int rc = strdup_to(user, pb->username, err);
  if (rc == 0) rc = strdup_to(password, pb->password, err);
  unpacked_free(pb);
  if (rc != 0) {
    fsh_free(*user);
    fsh_free(*password);
    *user = *password = NULL;
  }
  return rc;
}

grpc_byte_buffer *fsh_flight_wire_empty(void) { return grpc_raw_byte_buffer_create(NULL, 0); }

/* ---- schema bytes --------------------------------------------------------------- */

/* 0xFFFFFFFF, the padded metadata length (int32 LE), the Schema Message
 * flatbuffer, zero padding to a multiple of 8. Schemas have no body. */
int fsh_flight_schema_to_bytes(fsh_schema *s, fsh_bytes *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!s) return fsh_error_set(err, EINVAL, "Flight: no schema to encode");
  fsh_ipc_encoder *enc = NULL;
  fsh_ipc_payload p = {0};
  FSH_RETURN_NOT_OK(fsh_ipc_encoder_new(s, NULL, &enc, err));
  int rc = fsh_ipc_encode_schema(enc, &p, err);
  fsh_ipc_encoder_free(enc);
  if (rc != 0) return rc;
  int64_t md = p.metadata->size, padded = fsh_round_up(md, 8);
  if (padded > INT32_MAX) {
    fsh_ipc_payload_reset(&p);
    return fsh_error_set(err, EINVAL, "Flight: schema message of %lld bytes is too large",
                         (long long)md);
  }
  out->data = fsh_calloc(1, (size_t)(8 + padded));
  if (!out->data) {
    fsh_ipc_payload_reset(&p);
    return fsh_error_set(err, ENOMEM, "Flight: out of memory encoding a schema");
  }
  uint32_t words[2] = {CONTINUATION, (uint32_t)padded};
  for (int w = 0; w < 2; w++)
    for (int b = 0; b < 4; b++) out->data[w * 4 + b] = (uint8_t)(words[w] >> (8 * b));
  memcpy(out->data + 8, p.metadata->data, (size_t)md);
  out->size = 8 + padded;
  fsh_ipc_payload_reset(&p);
  return 0;
}

int fsh_flight_schema_from_bytes(const fsh_bytes *in, fsh_schema **out, fsh_error *err) {
  *out = NULL;
  if (!in || in->size <= 0) return fsh_error_set(err, EINVAL, "Flight: empty schema bytes");
  /* A copy: the flatbuffer reader wants aligned memory, and the schema must
   * not depend on the caller's bytes. */
  fsh_buffer *b = fsh_buffer_copy(in->data, in->size);
  if (!b) return fsh_error_set(err, ENOMEM, "Flight: out of memory decoding a schema");
  int rc = fsh_ipc_decode_schema_message(b, out, err);
  fsh_buffer_unref(b);
  if (rc != 0) return fsh_error_prefix(err, rc, "Flight schema: ");
  return 0;
}

/* ---- byte buffers ----------------------------------------------------------------- */

int fsh_flight_byte_buffer_bytes(grpc_byte_buffer *bb, fsh_bytes *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  grpc_byte_buffer_reader r;
  if (!bb || !grpc_byte_buffer_reader_init(&r, bb))
    return fsh_error_set(err, EINVAL, "Flight: cannot read a message (bad compression?)");
  size_t total = grpc_byte_buffer_length(r.buffer_out);
  int rc = 0;
  if (total > 0) {
    out->data = fsh_malloc(total);
    if (!out->data) rc = fsh_error_set(err, ENOMEM, "Flight: out of memory (%zu bytes)", total);
  }
  grpc_slice s;
  size_t at = 0;
  while (grpc_byte_buffer_reader_next(&r, &s)) {
    size_t n = GRPC_SLICE_LENGTH(s);
    if (rc == 0 && n > total - at) rc = fsh_error_set(err, EINVAL, "Flight: message grew");
    if (rc == 0 && n > 0) {
      memcpy(out->data + at, GRPC_SLICE_START_PTR(s), n);
      at += n;
    }
    grpc_slice_unref(s);
  }
  grpc_byte_buffer_reader_destroy(&r);
  if (rc != 0) {
    fsh_bytes_reset(out);
    return rc;
  }
  out->size = (int64_t)at;
  return 0;
}
