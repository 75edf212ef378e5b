/* body_decode.c -- builds fsh_array trees from a RecordBatch header's
 * FieldNodes and Buffers and the message body. Uncompressed buffers are
 * zero-copy slices of the body (copied only when misaligned); compressed
 * ones are decompressed into new 64-byte-aligned buffers. Every buffer
 * range is checked against the body and every fixed-size buffer against
 * its node's length. */
#include "ipc/read_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Sets an error naming the field path being decoded. */
static int berr(fsh_ipc_body_ctx *c, fsh_error *err, int code, const char *fmt, ...)
    FSH_PRINTF(4, 5);
static int berr(fsh_ipc_body_ctx *c, fsh_error *err, int code, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return fsh_error_set(err, code, "field '%s': %s", c->path, msg);
}

/* Sets c->path to its first len bytes, then "." (when len > 0) and name,
 * truncated to fit: what snprintf(c->path + len, .., "%s%s") wrote, at a
 * fraction of its cost (this runs for every field of every batch). */
static void path_set(fsh_ipc_body_ctx *c, size_t len, const char *name) {
  size_t cap = sizeof c->path;
  if (len > 0 && len + 1 < cap) c->path[len++] = '.';
  size_t n = strlen(name);
  if (n > cap - 1 - len) n = cap - 1 - len;
  memcpy(c->path + len, name, n);
  c->path[len + n] = 0;
}

typedef struct node {
  int64_t length, null_count;
} node;

static int take_node(fsh_ipc_body_ctx *c, node *n, fsh_error *err) {
  if (c->node_i >= c->h->nodes.n)
    return berr(c, err, EINVAL, "the schema needs more than the %lld field nodes the header lists",
                (long long)c->h->nodes.n);
  const uint8_t *p = fsh_fb_vector_elem(&c->h->nodes, c->node_i++);
  n->length = fsh_fb_load_i64(p);
  n->null_count = fsh_fb_load_i64(p + 8);
  if (n->length < 0 || n->null_count < 0 || n->null_count > n->length)
    return berr(c, err, EINVAL, "field node %lld has length %lld and null count %lld",
                (long long)(c->node_i - 1), (long long)n->length, (long long)n->null_count);
  return 0;
}

/* Bytes that n items of `bits` bits take, or -1 on overflow. */
static int64_t bytes_for(int64_t n, int64_t bits) {
  int64_t total;
  if (__builtin_mul_overflow(n, bits, &total)) return -1;
  return fsh_bytes_for_bits(total);
}

/* Uncompressed bytes [off, off+len) of the body: a slice, or an aligned
 * copy when the slice would not be 8-byte aligned. */
static int body_range(fsh_ipc_body_ctx *c, int64_t off, int64_t len, fsh_buffer **out,
                      fsh_error *err) {
  if (!c->body) {
    *out = fsh_buffer_new(0, true);
    if (!*out) return fsh_error_set(err, ENOMEM, "out of memory");
    return 0;
  }
  const uint8_t *p = c->body->data + c->body_off + off;
  *out = ((uintptr_t)p % 8 == 0) ? fsh_buffer_slice_in(c->pack, c->body, c->body_off + off, len)
                                 : fsh_buffer_copy(p, len);
  if (!*out) return fsh_error_set(err, ENOMEM, "out of memory slicing the body");
  return 0;
}

/* Upper bound of the decompressed size of n compressed bytes: LZ4 cannot
 * exceed 255:1, a ZSTD block of >= 4 bytes cannot exceed 128 KiB. */
static bool plausible_ratio(fsh_compression codec, int64_t n, int64_t raw) {
  int64_t ratio = codec == FSH_COMPRESSION_LZ4_FRAME ? 256 : 32768;
  return n <= INT64_MAX / ratio && raw <= n * ratio + (1 << 16);
}

/* Decompresses the buffer at [off, off+len): int64 uncompressed length LE
 * (-1: stored as is), then the codec's data. */
static int decompress_range(fsh_ipc_body_ctx *c, int64_t idx, int64_t off, int64_t len,
                            fsh_buffer **out, fsh_error *err) {
  if (len == 0) return body_range(c, off, 0, out, err);
  if (len < 8) return berr(c, err, EINVAL, "compressed buffer %lld is %lld bytes, shorter than "
                           "its length prefix", (long long)idx, (long long)len);
  int64_t raw = fsh_fb_load_i64(c->body->data + c->body_off + off);
  if (raw == -1) return body_range(c, off + 8, len - 8, out, err);
  if (raw < 0 || !plausible_ratio(c->h->compression, len - 8, raw))
    return berr(c, err, EINVAL, "compressed buffer %lld claims %lld uncompressed bytes from %lld",
                (long long)idx, (long long)raw, (long long)(len - 8));
  fsh_buffer *buf = fsh_buffer_new(raw, false);
  if (!buf) return berr(c, err, ENOMEM, "out of memory for %lld bytes", (long long)raw);
  int rc = fsh_codec_decompress(c->h->compression, c->body->data + c->body_off + off + 8, len - 8,
                                buf->data,
                                raw, err);
  if (rc != 0) {
    fsh_buffer_unref(buf);
    return fsh_error_prefix(err, rc, "field '%s': buffer %lld: ", c->path, (long long)idx);
  }
  *out = buf;
  return 0;
}

/* Takes the next Buffer of the header. With `want` false only the range is
 * checked (an unused validity bitmap); otherwise *out is the buffer, which
 * must hold at least min_size bytes (`what` names it in errors). */
static int take_buffer(fsh_ipc_body_ctx *c, bool want, int64_t min_size, const char *what,
                       fsh_buffer **out, fsh_error *err) {
  int64_t idx = c->buf_i;
  if (idx >= c->h->buffers.n)
    return berr(c, err, EINVAL, "the schema needs more than the %lld buffers the header lists",
                (long long)c->h->buffers.n);
  c->buf_i++;
  const uint8_t *p = fsh_fb_vector_elem(&c->h->buffers, idx);
  int64_t off = fsh_fb_load_i64(p), len = fsh_fb_load_i64(p + 8);
  if (off < 0 || len < 0 || off > c->body_length - len)
    return berr(c, err, EINVAL, "buffer %lld [offset %lld, length %lld] exceeds body length %lld",
                (long long)idx, (long long)off, (long long)len, (long long)c->body_length);
  if (!want) return 0;
  if (min_size < 0) return berr(c, err, EINVAL, "%s size overflows", what);
  fsh_buffer *buf;
  if (c->h->compression == FSH_COMPRESSION_NONE)
    FSH_RETURN_NOT_OK(body_range(c, off, len, &buf, err));
  else
    FSH_RETURN_NOT_OK(decompress_range(c, idx, off, len, &buf, err));
  if (buf->size < min_size) {
    int64_t have = buf->size;
    fsh_buffer_unref(buf);
    return berr(c, err, EINVAL, "buffer %lld (%s) holds %lld bytes, %lld needed",
                (long long)idx, what, (long long)have, (long long)min_size);
  }
  *out = buf;
  return 0;
}

/* Validity bitmap: kept only when the node has nulls. */
static int take_validity(fsh_ipc_body_ctx *c, const node *n, fsh_array *a, fsh_error *err) {
  return take_buffer(c, n->null_count > 0, fsh_bytes_for_bits(n->length), "validity",
                     &a->buffers[0], err);
}

/* Offsets of `width` bytes: n+1 entries, or none at all for an empty array
 * (then a zeroed single offset is supplied). */
static int take_offsets(fsh_ipc_body_ctx *c, const node *n, int width, fsh_buffer **out,
                        fsh_error *err) {
  int64_t need = n->length == 0 ? 0 : bytes_for(n->length + 1, 8 * width);
  FSH_RETURN_NOT_OK(take_buffer(c, true, need, "offsets", out, err));
  if ((*out)->size < width) {
    fsh_buffer_unref(*out);
    if (!(*out = fsh_buffer_new(width, true))) return fsh_error_set(err, ENOMEM, "out of memory");
  }
  return 0;
}

static int load_array(fsh_ipc_body_ctx *c, const fsh_field *f, fsh_array **out, fsh_error *err);

/* Loads f's children into a->children; each must be at least min_len long. */
static int load_children(fsh_ipc_body_ctx *c, const fsh_field *f, fsh_array *a, int64_t min_len,
                         fsh_error *err) {
  size_t len = strlen(c->path);
  for (int64_t i = 0; i < f->n_children; i++) {
    path_set(c, len, f->children[i].name);
    FSH_RETURN_NOT_OK(load_array(c, &f->children[i], &a->children[i], err));
    if (a->children[i]->length < min_len)
      return berr(c, err, EINVAL, "child length %lld is shorter than the %lld its parent needs",
                  (long long)a->children[i]->length, (long long)min_len);
    c->path[len] = 0;
  }
  return 0;
}

/* Unions: V4 wrote a validity bitmap first, which our layout has no room
 * for; it is accepted only when the node has no nulls. */
static int load_union(fsh_ipc_body_ctx *c, const fsh_field *f, const node *n, fsh_array *a,
                      fsh_error *err) {
  bool dense = f->type == FSH_TYPE_DENSE_UNION;
  if (c->version < FSH_IPC_V5) {
    if (n->null_count > 0)
      return berr(c, err, ENOTSUP, "V4 union with top-level nulls is not supported");
    FSH_RETURN_NOT_OK(take_buffer(c, false, 0, "validity", NULL, err));
  }
  a->null_count = 0;
  FSH_RETURN_NOT_OK(take_buffer(c, true, n->length, "type ids", &a->buffers[0], err));
  if (dense)
    FSH_RETURN_NOT_OK(
        take_buffer(c, true, bytes_for(n->length, 32), "offsets", &a->buffers[1], err));
  return load_children(c, f, a, dense ? 0 : n->length, err);
}

/* Fills the buffers and children of a (already sized for f's type). */
static int load_layout(fsh_ipc_body_ctx *c, const fsh_field *f, const node *n, fsh_array *a,
                       fsh_error *err) {
  switch (f->type) {
    case FSH_TYPE_NA:
      a->null_count = n->length;
      return 0;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION:
      return load_union(c, f, n, a, err);
    default: break;
  }
  FSH_RETURN_NOT_OK(take_validity(c, n, a, err));
  switch (f->type) {
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      int w = (f->type == FSH_TYPE_BINARY || f->type == FSH_TYPE_STRING) ? 4 : 8;
      FSH_RETURN_NOT_OK(take_offsets(c, n, w, &a->buffers[1], err));
      return take_buffer(c, true, 0, "data", &a->buffers[2], err);
    }
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      FSH_RETURN_NOT_OK(take_offsets(c, n, f->type == FSH_TYPE_LARGE_LIST ? 8 : 4,
                                     &a->buffers[1], err));
      return load_children(c, f, a, 0, err);
    case FSH_TYPE_FIXED_SIZE_LIST: {
      int64_t need;
      if (__builtin_mul_overflow(n->length, (int64_t)f->list_size, &need))
        return berr(c, err, EINVAL, "fixed-size list length overflows");
      return load_children(c, f, a, need, err);
    }
    case FSH_TYPE_STRUCT:
      return load_children(c, f, a, n->length, err);
    default:
      return take_buffer(c, true, bytes_for(n->length, fsh_type_bit_width(f)), "values",
                         &a->buffers[1], err);
  }
}

/* Loads the array of field f (its node, buffers, children, dictionary). */
static int load_array(fsh_ipc_body_ctx *c, const fsh_field *f, fsh_array **out, fsh_error *err) {
  node n = {0};
  FSH_RETURN_NOT_OK(take_node(c, &n, err));
  fsh_array *dict = NULL;
  if (f->dictionary) {
    dict = c->find_dict ? c->find_dict(c->find_ctx, f->dictionary->id) : NULL;
    if (!dict)
      return berr(c, err, EINVAL, "dictionary id %lld has no dictionary batch before it",
                  (long long)f->dictionary->id);
  }
  fsh_array *a =
      fsh_array_new_in(c->pack, fsh_type_n_buffers(f->type), f->dictionary ? 0 : f->n_children);
  if (!a) return berr(c, err, ENOMEM, "out of memory");
  a->length = n.length;
  a->null_count = n.null_count;
  int rc = load_layout(c, f, &n, a, err);
  if (rc != 0) {
    fsh_array_unref(a);
    return rc;
  }
  a->dictionary = fsh_array_ref(dict);
  *out = a;
  return 0;
}

int fsh_ipc_body_decode(fsh_ipc_body_ctx *c, const fsh_field *fields, int64_t n, fsh_array **out,
                        fsh_error *err) {
  if (c->body_length > 0 && (!c->body || c->body->size - c->body_off < c->body_length))
    return fsh_error_set(err, EINVAL, "body is %lld bytes, the header says %lld",
                         c->body ? (long long)(c->body->size - c->body_off) : 0LL,
                         (long long)c->body_length);
  for (int64_t i = 0; i < n; i++) out[i] = NULL;
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < n; i++) {
    path_set(c, 0, fields[i].name);
    rc = load_array(c, &fields[i], &out[i], err);
  }
  if (rc != 0) {
    for (int64_t i = 0; i < n; i++) {
      fsh_array_unref(out[i]);
      out[i] = NULL;
    }
  }
  return rc;
}
