/* wire_flight_data.c -- the FlightData codec, by hand, for the hot path.
 *
 * FlightData is { 1: FlightDescriptor, 2: bytes data_header, 3: bytes
 * app_metadata, 1000: bytes data_body }. Encoding writes the tags, lengths
 * and small fields into one header slice and hands every body segment to
 * gRPC as its own slice pointing at our buffer (a reference held until gRPC
 * is done with it): no body byte is copied. An app_metadata given in pieces
 * (a worker's bundle of stored blocks) goes out the same way, except that
 * runs of small pieces (headers and blocks under
 * FSH_FLIGHT_PIECE_SLICE_MIN) are copied into one slice. Decoding walks the received
 * slices (varints may straddle them) and puts data_body into one buffer:
 * a reference on the gRPC slice when the body sits whole and 8-byte aligned
 * in one, else one copy into a 64-byte-aligned buffer. */
#include "wire_pb.h"

#include <errno.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#define FIELD_DESCRIPTOR 1
#define FIELD_HEADER 2
#define FIELD_APP_METADATA 3
#define FIELD_BODY 1000
#define WT_VARINT 0
#define WT_I64 1
#define WT_LEN 2
#define WT_SGROUP 3
#define WT_EGROUP 4
#define WT_I32 5

/* ---- encoding -------------------------------------------------------------- */

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

static uint64_t tag(uint32_t field, int wire_type) { return ((uint64_t)field << 3) | (uint64_t)wire_type; }

/* Size of tag + length + n bytes of a length-delimited field. */
static size_t len_field_size(uint32_t field, size_t n) {
  return varint_size(tag(field, WT_LEN)) + varint_size(n) + n;
}

static void unref_buffer(void *b) { fsh_buffer_unref(b); }

/* The gRPC slices of one message's buffers: one slice (one gRPC reference
 * count, holding one fsh_buffer reference) per root buffer, the pieces
 * sub-slices of it. A few roots are remembered; past that a root's slice
 * is made again (correct, one more allocation). */
#define ROOTS 4
#define FOLD_MAX 256
typedef struct root_slices {
  fsh_buffer *root[ROOTS];
  grpc_slice slice[ROOTS];
  int n, next_evict;
} root_slices;

/* A gRPC slice of buffer b's [offset, offset + length) (length > 0, in
 * bounds), sharing the slice of b's root buffer. */
static grpc_slice piece_slice(root_slices *rs, fsh_buffer *b, int64_t offset, int64_t length) {
  fsh_buffer *root = b->parent ? b->parent : b;
  size_t at = (size_t)(b->data - root->data) + (size_t)offset;
  int i = 0;
  while (i < rs->n && rs->root[i] != root) i++;
  if (i == rs->n) {
    if (rs->n < ROOTS) {
      i = rs->n++;
    } else {
      i = rs->next_evict;
      rs->next_evict = (rs->next_evict + 1) % ROOTS;
      grpc_slice_unref(rs->slice[i]);
    }
    rs->root[i] = root;
    rs->slice[i] = grpc_slice_new_with_user_data(root->data, (size_t)root->size, unref_buffer,
                                                 fsh_buffer_ref(root));
  }
  return grpc_slice_sub(rs->slice[i], at, at + (size_t)length);
}

static void root_slices_drop(root_slices *rs) {
  for (int i = 0; i < rs->n; i++) grpc_slice_unref(rs->slice[i]);
  rs->n = 0;
}

/* Both encoders: app_metadata either `am` (copied into the header slice:
 * small) or n_pieces pieces (leading small ones folded into the header
 * slice, large ones slices on their buffers, runs of small ones copied
 * into one slice each). */
static int encode(const fsh_ipc_payload *p, const fsh_buffer *am, const fsh_flight_piece *pieces,
                  int64_t n_pieces, const fsh_flight_descriptor *d, grpc_byte_buffer **out,
                  fsh_error *err) {
  *out = NULL;
  Arrow__Flight__Protocol__FlightDescriptor pbd;
  size_t d_len = 0;
  if (d) {
    fsh_flight_pb_descriptor_view(d, &pbd);
    d_len = protobuf_c_message_get_packed_size(&pbd.base);
  }
  const fsh_buffer *md = p ? p->metadata : NULL;
  size_t md_len = md ? (size_t)md->size : 0;
  size_t am_len = am ? (size_t)am->size : 0;
  int64_t n_slices = 1;
  for (int64_t i = 0; i < n_pieces; i++) {
    const fsh_flight_piece *pc = &pieces[i];
    if (!pc->buffer || pc->offset < 0 || pc->length < 0 ||
        pc->offset > pc->buffer->size - pc->length)
      return fsh_error_set(err, EINVAL, "FlightData: app_metadata piece %lld is out of its buffer",
                           (long long)i);
    am_len += (size_t)pc->length;
    n_slices += pc->length > 0;
  }
  /* Leading small pieces (headers) are copied into the header slice: a
   * slice of their own would cost more than the copy. */
  int64_t n_folded = 0;
  size_t folded_len = 0;
  while (n_folded < n_pieces && pieces[n_folded].length <= FOLD_MAX &&
         folded_len + (size_t)pieces[n_folded].length <= FOLD_MAX) {
    folded_len += (size_t)pieces[n_folded].length;
    n_slices -= pieces[n_folded].length > 0;
    n_folded++;
  }
  int32_t n_body = p ? p->n_body : 0;
  uint64_t body_len = 0;
  for (int32_t i = 0; i < n_body; i++) {
    if (!p->body[i] || p->body[i]->size < 0)
      return fsh_error_set(err, EINVAL, "FlightData: body segment %d is missing", (int)i);
    body_len += (uint64_t)p->body[i]->size;
    n_slices += p->body[i]->size > 0;
  }
  if (p && body_len != (uint64_t)p->body_length)
    return fsh_error_set(err, EINVAL,
                         "FlightData: body segments add up to %llu bytes, the payload says %lld",
                         (unsigned long long)body_len, (long long)p->body_length);
  /* unfolded pieces then a body: the body's tag and length in a slice of
   * their own */
  bool body_tag_apart = n_folded < n_pieces && am_len > folded_len && body_len > 0;
  n_slices += body_tag_apart;

  size_t header_len = 0;
  if (d) header_len += len_field_size(FIELD_DESCRIPTOR, d_len);
  if (md_len) header_len += len_field_size(FIELD_HEADER, md_len);
  if (am_len) {
    header_len += varint_size(tag(FIELD_APP_METADATA, WT_LEN)) + varint_size(am_len);
    header_len += am ? am_len : folded_len;
  }
  if (body_len && !body_tag_apart)
    header_len += varint_size(tag(FIELD_BODY, WT_LEN)) + varint_size(body_len);

  grpc_slice local[16];
  grpc_slice *slices = n_slices <= 16 ? local : fsh_malloc(sizeof *slices * (size_t)n_slices);
  if (!slices)
    return fsh_error_set(err, ENOMEM, "FlightData: out of memory (%lld slices)",
                         (long long)n_slices);

  int64_t k = 0;
  slices[k++] = grpc_slice_malloc(header_len);
  uint8_t *w = GRPC_SLICE_START_PTR(slices[0]);
  if (d) {
    w = put_varint(w, tag(FIELD_DESCRIPTOR, WT_LEN));
    w = put_varint(w, d_len);
    w += protobuf_c_message_pack(&pbd.base, w);
  }
  if (md_len) {
    w = put_varint(w, tag(FIELD_HEADER, WT_LEN));
    w = put_varint(w, md_len);
    memcpy(w, md->data, md_len);
    w += md_len;
  }
  if (am_len) {
    w = put_varint(w, tag(FIELD_APP_METADATA, WT_LEN));
    w = put_varint(w, am_len);
    if (am) {
      memcpy(w, am->data, am_len);
      w += am_len;
    }
    for (int64_t i = 0; i < n_folded; i++) {
      memcpy(w, pieces[i].buffer->data + pieces[i].offset, (size_t)pieces[i].length);
      w += pieces[i].length;
    }
  }
  uint8_t body_tag[24];
  uint8_t *bw = body_tag_apart ? body_tag : w;
  if (body_len) {
    bw = put_varint(bw, tag(FIELD_BODY, WT_LEN)); /* 0xC2 0x3E */
    bw = put_varint(bw, body_len);
  }
  /* The header is exactly as long as computed (the descriptor packs to its
   * computed size). */
  root_slices rs = {.n = 0};
  for (int64_t i = n_folded; i < n_pieces;) {
    int64_t j = i;
    size_t run = 0;
    while (j < n_pieces && pieces[j].length < FSH_FLIGHT_PIECE_SLICE_MIN) run += (size_t)pieces[j++].length;
    if (j == i || (j == i + 1 && run > 0)) { /* a large piece, or one small one alone */
      if (pieces[i].length > 0)
        slices[k++] = piece_slice(&rs, pieces[i].buffer, pieces[i].offset, pieces[i].length);
      i++;
      continue;
    }
    if (run > 0) { /* small pieces side by side: one copy beats a slice each */
      grpc_slice s = grpc_slice_malloc(run);
      uint8_t *c = GRPC_SLICE_START_PTR(s);
      for (int64_t q = i; q < j; q++) {
        memcpy(c, pieces[q].buffer->data + pieces[q].offset, (size_t)pieces[q].length);
        c += pieces[q].length;
      }
      slices[k++] = s;
    }
    i = j;
  }
  if (body_tag_apart)
    slices[k++] = grpc_slice_from_copied_buffer((const char *)body_tag, (size_t)(bw - body_tag));
  for (int32_t i = 0; i < n_body; i++) {
    fsh_buffer *b = p->body[i];
    if (b->size == 0) continue;
    slices[k++] = grpc_slice_new_with_user_data(b->data, (size_t)b->size, unref_buffer,
                                                fsh_buffer_ref(b));
  }
  *out = grpc_raw_byte_buffer_create(slices, (size_t)k); /* takes its own references */
  for (int64_t i = 0; i < k; i++) grpc_slice_unref(slices[i]);
  root_slices_drop(&rs);
  if (slices != local) fsh_free(slices);
  return 0;
}

int fsh_flight_data_encode(const fsh_ipc_payload *p, fsh_buffer *app_metadata,
                           const fsh_flight_descriptor *d, grpc_byte_buffer **out,
                           fsh_error *err) {
  return encode(p, app_metadata, NULL, 0, d, out, err);
}

int fsh_flight_data_encode_pieces(const fsh_ipc_payload *p, const fsh_flight_piece *pieces,
                                  int64_t n_pieces, const fsh_flight_descriptor *d,
                                  grpc_byte_buffer **out, fsh_error *err) {
  return encode(p, NULL, pieces, n_pieces, d, out, err);
}

/* ---- decoding: a cursor over segments -------------------------------------- */

typedef struct segment {
  const uint8_t *data;
  size_t size;
  const grpc_slice *slice; /* the gRPC slice holding data, or NULL */
} segment;

typedef struct cursor {
  const segment *segs;
  size_t n_segs;
  size_t i;    /* current segment */
  size_t off;  /* offset in it */
  size_t left; /* bytes left in the message */
} cursor;

/* Moves past exhausted segments, so that segs[i] has bytes when left > 0. */
static void settle(cursor *c) {
  while (c->left > 0 && c->off == c->segs[c->i].size) {
    c->i++;
    c->off = 0;
  }
}

static uint8_t next_byte(cursor *c) {
  settle(c);
  c->left--;
  return c->segs[c->i].data[c->off++];
}

static void advance(cursor *c, size_t n) {
  c->left -= n;
  while (n > 0) {
    size_t here = c->segs[c->i].size - c->off;
    if (here == 0) {
      c->i++;
      c->off = 0;
      continue;
    }
    size_t take = n < here ? n : here;
    c->off += take;
    n -= take;
  }
}

static void copy_out(cursor *c, uint8_t *dst, size_t n) {
  c->left -= n;
  while (n > 0) {
    size_t here = c->segs[c->i].size - c->off;
    if (here == 0) {
      c->i++;
      c->off = 0;
      continue;
    }
    size_t take = n < here ? n : here;
    memcpy(dst, c->segs[c->i].data + c->off, take);
    dst += take;
    c->off += take;
    n -= take;
  }
}

/* The next n bytes if they sit in one segment, else NULL. */
static const segment *contiguous(cursor *c, size_t n, const uint8_t **ptr) {
  settle(c);
  if (c->left == 0 || c->segs[c->i].size - c->off < n) return NULL;
  *ptr = c->segs[c->i].data + c->off;
  return &c->segs[c->i];
}

static int read_varint(cursor *c, uint64_t *v, const char *what, fsh_error *err) {
  uint64_t x = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (c->left == 0)
      return fsh_error_set(err, EINVAL, "FlightData: truncated varint (%s)", what);
    uint8_t b = next_byte(c);
    if (shift == 63 && b > 1)
      return fsh_error_set(err, EINVAL, "FlightData: varint (%s) overflows 64 bits", what);
    x |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return fsh_error_set(err, EINVAL, "FlightData: varint (%s) longer than 10 bytes", what);
}

static const char *field_name(uint64_t field) {
  switch (field) {
    case FIELD_DESCRIPTOR: return "flight_descriptor";
    case FIELD_HEADER: return "data_header";
    case FIELD_APP_METADATA: return "app_metadata";
    case FIELD_BODY: return "data_body";
  }
  return "unknown";
}

/* Skips the value of an unknown field of wire type wt (groups included:
 * everything up to the matching end-group tag). */
static int skip_value(cursor *c, uint64_t field, int wt, fsh_error *err) {
  uint64_t v;
  switch (wt) {
    case WT_VARINT:
      return read_varint(c, &v, "an unknown varint field", err);
    case WT_I64:
    case WT_I32: {
      size_t n = wt == WT_I64 ? 8 : 4;
      if (c->left < n)
        return fsh_error_set(err, EINVAL,
                             "FlightData: field %llu (fixed%zu) needs %zu bytes, %zu left",
                             (unsigned long long)field, n * 8, n, c->left);
      advance(c, n);
      return 0;
    }
    case WT_LEN:
      FSH_RETURN_NOT_OK(read_varint(c, &v, "a length", err));
      if (v > c->left)
        return fsh_error_set(err, EINVAL,
                             "FlightData: field %llu (unknown) length %llu exceeds the %zu bytes left",
                             (unsigned long long)field, (unsigned long long)v, c->left);
      advance(c, (size_t)v);
      return 0;
    case WT_SGROUP: {
      uint64_t stack[32];
      int depth = 0;
      stack[depth++] = field;
      while (depth > 0) {
        uint64_t t;
        FSH_RETURN_NOT_OK(read_varint(c, &t, "a tag inside a group", err));
        uint64_t f = t >> 3;
        int w = (int)(t & 7);
        if (w == WT_EGROUP) {
          if (f != stack[depth - 1])
            return fsh_error_set(err, EINVAL,
                                 "FlightData: group %llu ended by the end tag of field %llu",
                                 (unsigned long long)stack[depth - 1], (unsigned long long)f);
          depth--;
        } else if (w == WT_SGROUP) {
          if (depth == 32)
            return fsh_error_set(err, EINVAL, "FlightData: groups nested deeper than 32");
          stack[depth++] = f;
        } else {
          FSH_RETURN_NOT_OK(skip_value(c, f, w, err));
        }
      }
      return 0;
    }
    default:
      return fsh_error_set(err, EINVAL, "FlightData: field %llu has invalid wire type %d",
                           (unsigned long long)field, wt);
  }
}

/* A whole gRPC slice kept alive by a buffer that wraps part of it. */
typedef struct slice_hold {
  grpc_slice slice;
} slice_hold;

static void slice_hold_release(void *ctx) {
  slice_hold *h = ctx;
  grpc_slice_unref(h->slice);
  fsh_free(h);
}

/* Reads n bytes into a buffer: kept in place (a slice reference) when
 * `keep` allows it, the bytes sit whole in one refcounted gRPC slice and
 * are 8-byte aligned; copied into a new 64-byte-aligned buffer otherwise
 * (for the body, `keep`, one of body_pool.c's recycled blocks). */
static int take_bytes(cursor *c, size_t n, bool keep, fsh_buffer **out, const char *what,
                      fsh_error *err) {
  const uint8_t *ptr;
  const segment *s = keep ? contiguous(c, n, &ptr) : NULL;
  if (s && s->slice && s->slice->refcount && ((uintptr_t)ptr & 7) == 0) {
    slice_hold *h = fsh_malloc(sizeof *h);
    if (h) {
      h->slice = grpc_slice_ref(*s->slice);
      *out = fsh_buffer_wrap(ptr, (int64_t)n, slice_hold_release, h);
      if (*out) {
        advance(c, n);
        return 0;
      }
      slice_hold_release(h);
    }
    return fsh_error_set(err, ENOMEM, "FlightData: out of memory (%s)", what);
  }
  *out = keep ? fsh_flight_body_buffer_new((int64_t)n) : fsh_buffer_new((int64_t)n, false);
  if (!*out) return fsh_error_set(err, ENOMEM, "FlightData: out of memory (%s: %zu bytes)", what, n);
  copy_out(c, (*out)->data, n);
  return 0;
}

static int decode(cursor *c, fsh_flight_message *out, fsh_error *err) {
  while (c->left > 0) {
    uint64_t t, len;
    FSH_RETURN_NOT_OK(read_varint(c, &t, "a field tag", err));
    uint64_t field = t >> 3;
    int wt = (int)(t & 7);
    if (field == 0 || field > 0x1FFFFFFF)
      return fsh_error_set(err, EINVAL, "FlightData: invalid field number %llu",
                           (unsigned long long)field);
    bool known = field == FIELD_DESCRIPTOR || field == FIELD_HEADER ||
                 field == FIELD_APP_METADATA || field == FIELD_BODY;
    if (!known) {
      FSH_RETURN_NOT_OK(skip_value(c, field, wt, err));
      continue;
    }
    if (wt != WT_LEN)
      return fsh_error_set(err, EINVAL,
                           "FlightData: field %llu (%s) has wire type %d, expected 2 "
                           "(length-delimited)",
                           (unsigned long long)field, field_name(field), wt);
    FSH_RETURN_NOT_OK(read_varint(c, &len, "a length", err));
    if (len > c->left)
      return fsh_error_set(err, EINVAL,
                           "FlightData: field %llu (%s) length %llu exceeds the %zu bytes left",
                           (unsigned long long)field, field_name(field),
                           (unsigned long long)len, c->left);
    size_t n = (size_t)len;
    /* Proto3: a field seen twice keeps the last value (an empty one means
     * absent: NULL). */
    switch (field) {
      case FIELD_DESCRIPTOR: {
        const uint8_t *ptr;
        uint8_t *tmp = NULL;
        if (!contiguous(c, n, &ptr)) {
          tmp = fsh_malloc(n ? n : 1);
          if (!tmp) return fsh_error_set(err, ENOMEM, "FlightData: out of memory (descriptor)");
          copy_out(c, tmp, n);
          ptr = tmp;
        } else {
          advance(c, n);
        }
        fsh_flight_descriptor_reset(&out->descriptor);
        int rc = fsh_flight_pb_descriptor_unpack(ptr, n, &out->descriptor, err);
        fsh_free(tmp);
        if (rc != 0) return rc;
        out->has_descriptor = true;
        break;
      }
      case FIELD_HEADER:
      case FIELD_APP_METADATA:
      case FIELD_BODY: {
        fsh_buffer **slot = field == FIELD_HEADER         ? &out->metadata
                            : field == FIELD_APP_METADATA ? &out->app_metadata
                                                          : &out->body;
        fsh_buffer_unref(*slot);
        *slot = NULL;
        if (n > 0)
          FSH_RETURN_NOT_OK(take_bytes(c, n, field == FIELD_BODY, slot, field_name(field), err));
        break;
      }
    }
  }
  return 0;
}

static int decode_segments(const segment *segs, size_t n_segs, fsh_flight_message *out,
                           fsh_error *err) {
  memset(out, 0, sizeof *out);
  cursor c = {segs, n_segs, 0, 0, 0};
  for (size_t i = 0; i < n_segs; i++) c.left += segs[i].size;
  int rc = decode(&c, out, err);
  if (rc != 0) fsh_flight_message_reset(out);
  return rc;
}

int fsh_flight_data_decode_bytes(const uint8_t *data, size_t size, fsh_flight_message *out,
                                 fsh_error *err) {
  segment s = {data, data ? size : 0, NULL};
  return decode_segments(&s, 1, out, err);
}

int fsh_flight_data_decode(grpc_byte_buffer *bb, fsh_flight_message *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!bb) return fsh_error_set(err, EINVAL, "FlightData: no message");
  if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE) {
    size_t n = bb->data.raw.slice_buffer.count;
    segment local[16];
    segment *segs = n <= 16 ? local : fsh_malloc(sizeof *segs * n);
    if (!segs) return fsh_error_set(err, ENOMEM, "FlightData: out of memory (%zu slices)", n);
    for (size_t i = 0; i < n; i++) {
      const grpc_slice *s = &bb->data.raw.slice_buffer.slices[i];
      segs[i] = (segment){GRPC_SLICE_START_PTR(*s), GRPC_SLICE_LENGTH(*s), s};
    }
    int rc = decode_segments(segs, n, out, err);
    if (segs != local) fsh_free(segs);
    return rc;
  }
  /* Compressed: let gRPC decompress into one slice, then parse that. */
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return fsh_error_set(err, EINVAL, "FlightData: cannot decompress the message");
  grpc_slice all = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  segment s = {GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all), &all};
  int rc = decode_segments(&s, 1, out, err);
  grpc_slice_unref(all);
  return rc;
}
