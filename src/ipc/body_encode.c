/* body_encode.c -- walks an fsh_array tree in IPC pre-order and lays out a
 * message body: one FieldNode per array, the buffers of each type in the
 * order Columnar.rst lists them, each padded to 8 bytes.
 *
 * Uncompressed bodies reference the arrays' buffers (slices, no copy).
 * Slices need care: a validity bitmap at a bit offset that is not a
 * multiple of 8 is re-packed, offsets that do not start at 0 are rebased,
 * children of lists are cut to the range the offsets use, and dense unions
 * get per-child rebased offsets. With compression, each non-empty buffer
 * becomes an int64 uncompressed length + compressed bytes, or -1 + the raw
 * bytes when compressing does not make it smaller. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ipc/writer_internal.h"

#define MAX_DEPTH 64

static const uint8_t k_zeros[64];

static void zeros_release(void *ctx) { (void)ctx; }

fsh_buffer *fsh_ipc_zeros_new(void) {
  return fsh_buffer_wrap(k_zeros, (int64_t)sizeof k_zeros, zeros_release, NULL);
}

void fsh_ipc_body_reset(fsh_ipc_body *body) {
  for (int32_t i = 0; i < body->n_segments; i++) fsh_buffer_unref(body->segments[i]);
  fsh_free(body->segments);
  fsh_free(body->nodes);
  fsh_free(body->buffers);
  body->segments = NULL;
  body->nodes = NULL;
  body->buffers = NULL;
  body->n_segments = body->cap_segments = 0;
  body->n_nodes = body->cap_nodes = 0;
  body->n_buffers = body->cap_buffers = 0;
  body->length = 0;
}

/* Grows *arr (of elem bytes each) so that one more element fits. */
static int grow(void **arr, int64_t n, int64_t *cap, size_t elem) {
  if (n < *cap) return 0;
  int64_t nc = *cap ? *cap * 2 : 16;
  void *p = fsh_realloc(*arr, (size_t)nc * elem);
  if (!p) return ENOMEM;
  *arr = p;
  *cap = nc;
  return 0;
}

static int push_node(fsh_ipc_body *body, int64_t length, int64_t null_count, fsh_error *err) {
  if (grow((void **)&body->nodes, body->n_nodes, &body->cap_nodes, sizeof(fsh_ipc_node)))
    return fsh_error_set(err, ENOMEM, "IPC body: out of memory");
  body->nodes[body->n_nodes++] = (fsh_ipc_node){length, null_count};
  return 0;
}

/* Takes the reference `seg`. */
static int push_segment(fsh_ipc_body *body, fsh_buffer *seg, fsh_error *err) {
  int32_t cap = body->cap_segments;
  int64_t cap64 = cap;
  if (grow((void **)&body->segments, body->n_segments, &cap64, sizeof(fsh_buffer *))) {
    fsh_buffer_unref(seg);
    return fsh_error_set(err, ENOMEM, "IPC body: out of memory");
  }
  body->cap_segments = (int32_t)cap64;
  body->segments[body->n_segments++] = seg;
  body->length += seg->size;
  return 0;
}

static int push_padding(fsh_ipc_body *body, fsh_error *err) {
  int64_t pad = fsh_round_up(body->length, FSH_IPC_ALIGN) - body->length;
  if (pad == 0) return 0;
  fsh_buffer *z;
  if (body->pads && body->pads[pad]) {
    z = fsh_buffer_ref(body->pads[pad]);
  } else {
    z = fsh_buffer_slice(body->zeros, 0, pad);
    if (!z) return fsh_error_set(err, ENOMEM, "IPC body: out of memory");
    if (body->pads) body->pads[pad] = fsh_buffer_ref(z);
  }
  return push_segment(body, z, err);
}

static fsh_buffer *le64_buffer(int64_t v) {
  uint8_t t[8];
  fsh_store_le64(t, (uint64_t)v);
  return fsh_buffer_copy(t, 8);
}

/* Appends one IPC buffer; takes the reference `buf` (NULL = empty). */
static int push_buffer(fsh_ipc_body *body, fsh_buffer *buf, fsh_error *err) {
  if (grow((void **)&body->buffers, body->n_buffers, &body->cap_buffers, sizeof(fsh_ipc_range))) {
    fsh_buffer_unref(buf);
    return fsh_error_set(err, ENOMEM, "IPC body: out of memory");
  }
  int64_t start = body->length;
  int64_t raw = buf ? buf->size : 0;
  if (raw == 0) {
    fsh_buffer_unref(buf);
    body->buffers[body->n_buffers++] = (fsh_ipc_range){start, 0};
    return 0;
  }
  if (body->compression == FSH_COMPRESSION_NONE) {
    FSH_RETURN_NOT_OK(push_segment(body, buf, err));
  } else {
    fsh_buffer *comp = NULL;
    int rc = fsh_codec_compress(body->compression, body->level, buf->data, raw, &comp, err);
    if (rc) {
      fsh_buffer_unref(buf);
      return rc;
    }
    int64_t prefix_value = raw;
    if (comp->size >= raw) { /* not worth it: store raw, prefix -1 */
      fsh_buffer_unref(comp);
      comp = buf;
      prefix_value = -1;
    } else {
      fsh_buffer_unref(buf);
    }
    fsh_buffer *prefix = le64_buffer(prefix_value);
    if (!prefix) {
      fsh_buffer_unref(comp);
      return fsh_error_set(err, ENOMEM, "IPC body: out of memory");
    }
    rc = push_segment(body, prefix, err);
    if (rc) {
      fsh_buffer_unref(comp);
      return rc;
    }
    FSH_RETURN_NOT_OK(push_segment(body, comp, err));
  }
  body->buffers[body->n_buffers++] = (fsh_ipc_range){start, body->length - start};
  return push_padding(body, err);
}

/* ---- slicing helpers ------------------------------------------------- */

/* Bits [off, off+len) of a bitmap as a buffer starting at bit 0: a slice
 * when off is byte aligned, a re-packed copy otherwise. */
static int bitmap_range(fsh_buffer *bits, int64_t off, int64_t len, const char *path,
                        fsh_buffer **out, fsh_error *err) {
  *out = NULL;
  if (len == 0) return 0;
  int64_t nbytes = fsh_bytes_for_bits(len);
  int64_t avail = fsh_bytes_for_bits(off + len); /* bytes of the source we may read */
  if (!bits || bits->size < avail)
    return fsh_error_set(err, EINVAL, "field '%s': bitmap of %lld bytes too small for bits [%lld, %lld)",
                         path, bits ? (long long)bits->size : 0LL, (long long)off,
                         (long long)(off + len));
  if (off % 8 == 0) {
    *out = fsh_buffer_slice(bits, off / 8, nbytes);
  } else {
    fsh_buffer *b = fsh_buffer_new(nbytes, true);
    if (b) {
      const uint8_t *src = bits->data;
      int64_t k0 = off / 8;
      int s = (int)(off % 8);
      for (int64_t j = 0; j < nbytes; j++) {
        unsigned v = (unsigned)src[k0 + j] >> s;
        if (k0 + j + 1 < avail) v |= (unsigned)src[k0 + j + 1] << (8 - s);
        b->data[j] = (uint8_t)v;
      }
      if (len % 8) b->data[nbytes - 1] &= (uint8_t)((1u << (len % 8)) - 1);
    }
    *out = b;
  }
  if (!*out) return fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
  return 0;
}

/* Bytes [off*width, (off+len)*width) of a fixed-width buffer. */
static int fixed_range(fsh_buffer *vals, int64_t off, int64_t len, int64_t width, const char *path,
                       fsh_buffer **out, fsh_error *err) {
  *out = NULL;
  if (len == 0) return 0;
  if (!vals || vals->size < (off + len) * width)
    return fsh_error_set(err, EINVAL,
                         "field '%s': buffer of %lld bytes too small for %lld values of %lld bytes at %lld",
                         path, vals ? (long long)vals->size : 0LL, (long long)len, (long long)width,
                         (long long)off);
  *out = fsh_buffer_slice(vals, off * width, len * width);
  if (!*out) return fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
  return 0;
}

static int64_t load_offset(const uint8_t *p, int width) {
  if (width == 4) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* The offsets of slots [off, off+len] rebased to start at 0 (a slice when
 * they already do), and the range [*first, *last) of values they span. */
static int offsets_range(fsh_ipc_body *body, fsh_buffer *offs, int64_t off, int64_t len, int width,
                         const char *path, fsh_buffer **out, int64_t *first, int64_t *last,
                         fsh_error *err) {
  *out = NULL;
  *first = *last = 0;
  if (len == 0) { /* one zero offset */
    *out = fsh_buffer_slice(body->zeros, 0, width);
    return *out ? 0 : fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
  }
  if (!offs || offs->size < (off + len + 1) * width)
    return fsh_error_set(err, EINVAL, "field '%s': offsets buffer too small for slots [%lld, %lld]",
                         path, (long long)off, (long long)(off + len));
  const uint8_t *p = offs->data + off * width;
  *first = load_offset(p, width);
  *last = load_offset(p + len * width, width);
  if (*first < 0 || *last < *first)
    return fsh_error_set(err, EINVAL, "field '%s': offsets not increasing (%lld .. %lld)", path,
                         (long long)*first, (long long)*last);
  if (*first == 0) {
    *out = fsh_buffer_slice(offs, off * width, (len + 1) * width);
  } else {
    fsh_buffer *b = fsh_buffer_new((len + 1) * width, false);
    if (b) {
      for (int64_t i = 0; i <= len; i++) {
        int64_t v = load_offset(p + i * width, width) - *first;
        if (width == 4) {
          int32_t v32 = (int32_t)v;
          memcpy(b->data + 4 * i, &v32, 4);
        } else {
          memcpy(b->data + 8 * i, &v, 8);
        }
      }
    }
    *out = b;
  }
  return *out ? 0 : fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
}

/* ---- the walk -------------------------------------------------------- */



static int append(fsh_ipc_body *body, const fsh_field *f, fsh_array *a, int64_t off, int64_t len,
                  const char *parent, int depth, fsh_error *err);

static int append_child(fsh_ipc_body *body, const fsh_field *f, fsh_array *a, int64_t i,
                        int64_t logical_off, int64_t len, const char *path, int depth,
                        fsh_error *err) {
  fsh_array *c = a->children[i];
  if (!c) return fsh_error_set(err, EINVAL, "field '%s': child %lld missing", path, (long long)i);
  if (logical_off + len > c->length)
    return fsh_error_set(err, EINVAL, "field '%s': child %lld has %lld slots, %lld needed", path,
                         (long long)i, (long long)c->length, (long long)(logical_off + len));
  return append(body, &f->children[i], c, c->offset + logical_off, len, path, depth + 1, err);
}

static int append_dense_union(fsh_ipc_body *body, const fsh_field *f, fsh_array *a, int64_t off,
                              int64_t len, const char *path, int depth, fsh_error *err) {
  fsh_buffer *ids = NULL, *offs = NULL;
  FSH_RETURN_NOT_OK(fixed_range(a->buffers[0], off, len, 1, path, &ids, err));
  FSH_RETURN_NOT_OK(push_buffer(body, ids, err));
  int64_t n = f->n_children;
  int64_t *start = fsh_malloc(sizeof(int64_t) * (size_t)(n ? 2 * n : 1));
  if (!start) return fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
  int64_t *clen = start + n;
  int rc = 0;
  if (off == 0) { /* offsets index the children as they are */
    rc = fixed_range(a->buffers[1], off, len, 4, path, &offs, err);
    for (int64_t i = 0; i < n; i++) {
      start[i] = 0;
      clen[i] = a->children[i] ? a->children[i]->length : 0;
    }
  } else {
    int8_t code_to_child[128];
    memset(code_to_child, -1, sizeof code_to_child);
    for (int64_t i = 0; i < n; i++) {
      int32_t code = f->type_codes ? f->type_codes[i] : (int32_t)i;
      if (code >= 0 && code < 128) code_to_child[code] = (int8_t)i;
      start[i] = -1;
      clen[i] = 0;
    }
    fsh_buffer *src = a->buffers[1];
    if (len == 0) {
      /* nothing to rebase: empty offsets, empty children */
    } else if (!src || src->size < (off + len) * 4) {
      rc = fsh_error_set(err, EINVAL, "field '%s': union offsets buffer too small", path);
    } else if ((offs = fsh_buffer_new(len * 4, false)) == NULL) {
      rc = fsh_error_set(err, ENOMEM, "field '%s': out of memory", path);
    }
    for (int64_t j = 0; j < len && rc == 0; j++) {
      int8_t code = (int8_t)a->buffers[0]->data[off + j];
      int c = code >= 0 ? code_to_child[code] : -1;
      int32_t o;
      memcpy(&o, src->data + 4 * (off + j), 4);
      if (c < 0) {
        rc = fsh_error_set(err, EINVAL, "field '%s': slot %lld has unknown type id %d", path,
                           (long long)j, code);
        break;
      }
      if (start[c] < 0) start[c] = o;
      int64_t rebased = (int64_t)o - start[c];
      if (rebased < 0) {
        rc = fsh_error_set(err, EINVAL, "field '%s': dense union offsets of child %d decrease",
                           path, c);
        break;
      }
      int32_t r32 = (int32_t)rebased;
      memcpy(offs->data + 4 * j, &r32, 4);
      if (rebased + 1 > clen[c]) clen[c] = rebased + 1;
    }
    for (int64_t i = 0; i < n; i++)
      if (start[i] < 0) start[i] = 0;
  }
  if (rc == 0) {
    rc = push_buffer(body, offs, err);
    offs = NULL;
  }
  for (int64_t i = 0; i < n && rc == 0; i++)
    rc = append_child(body, f, a, i, start[i], clen[i], path, depth, err);
  fsh_buffer_unref(offs);
  fsh_free(start);
  return rc;
}

static int append(fsh_ipc_body *body, const fsh_field *f, fsh_array *a, int64_t off, int64_t len,
                  const char *parent, int depth, fsh_error *err) {
  /* the field's dotted path, for messages (a top-level field's is its
   * name: no formatting per column per message) */
  char nested[256];
  const char *path = f->name ? f->name : "(null)";
  if (parent && parent[0]) {
    snprintf(nested, sizeof nested, "%s.%s", parent, path);
    path = nested;
  }
  if (depth > MAX_DEPTH)
    return fsh_error_set(err, EINVAL, "field '%s': nested deeper than %d levels", path, MAX_DEPTH);
  if (!a) return fsh_error_set(err, EINVAL, "field '%s': array missing", path);
  fsh_type_id t = f->type; /* the index type when dictionary-encoded */
  if (a->n_buffers < fsh_type_n_buffers(t))
    return fsh_error_set(err, EINVAL, "field '%s': %s array has %d buffers, %d expected", path,
                         fsh_type_name(t), (int)a->n_buffers, fsh_type_n_buffers(t));
  int64_t want_children = f->dictionary ? 0 : f->n_children;
  if (a->n_children < want_children)
    return fsh_error_set(err, EINVAL, "field '%s': array has %lld children, %lld expected", path,
                         (long long)a->n_children, (long long)want_children);

  bool unions = t == FSH_TYPE_SPARSE_UNION || t == FSH_TYPE_DENSE_UNION;
  int64_t nulls = 0;
  if (t == FSH_TYPE_NA) {
    nulls = len;
  } else if (!unions && a->buffers[0] && len > 0) {
    if (off == a->offset && len == a->length) {
      nulls = fsh_array_null_count(a);
    } else {
      if (a->buffers[0]->size < fsh_bytes_for_bits(off + len))
        return fsh_error_set(err, EINVAL, "field '%s': validity bitmap too small", path);
      nulls = len - fsh_bitmap_count(a->buffers[0]->data, off, len);
    }
  }
  FSH_RETURN_NOT_OK(push_node(body, len, nulls, err));

  fsh_buffer *b = NULL;
  if (t != FSH_TYPE_NA && !unions) { /* validity, empty when there are no nulls */
    if (nulls > 0) FSH_RETURN_NOT_OK(bitmap_range(a->buffers[0], off, len, path, &b, err));
    FSH_RETURN_NOT_OK(push_buffer(body, b, err));
  }

  int64_t first, last;
  switch (t) {
    case FSH_TYPE_NA:
      return 0;
    case FSH_TYPE_BOOL:
      FSH_RETURN_NOT_OK(bitmap_range(a->buffers[1], off, len, path, &b, err));
      return push_buffer(body, b, err);
    case FSH_TYPE_BINARY:
    case FSH_TYPE_STRING:
    case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      int w = (t == FSH_TYPE_BINARY || t == FSH_TYPE_STRING) ? 4 : 8;
      FSH_RETURN_NOT_OK(offsets_range(body, a->buffers[1], off, len, w, path, &b, &first, &last, err));
      FSH_RETURN_NOT_OK(push_buffer(body, b, err));
      b = NULL;
      FSH_RETURN_NOT_OK(fixed_range(a->buffers[2], first, last - first, 1, path, &b, err));
      return push_buffer(body, b, err);
    }
    case FSH_TYPE_LIST:
    case FSH_TYPE_LARGE_LIST:
    case FSH_TYPE_MAP: {
      int w = t == FSH_TYPE_LARGE_LIST ? 8 : 4;
      if (f->n_children != 1)
        return fsh_error_set(err, EINVAL, "field '%s': list type needs one child", path);
      FSH_RETURN_NOT_OK(offsets_range(body, a->buffers[1], off, len, w, path, &b, &first, &last, err));
      FSH_RETURN_NOT_OK(push_buffer(body, b, err));
      return append_child(body, f, a, 0, first, last - first, path, depth, err);
    }
    case FSH_TYPE_FIXED_SIZE_LIST:
      if (f->n_children != 1)
        return fsh_error_set(err, EINVAL, "field '%s': fixed-size list needs one child", path);
      return append_child(body, f, a, 0, off * f->list_size, len * f->list_size, path, depth, err);
    case FSH_TYPE_STRUCT:
      for (int64_t i = 0; i < f->n_children; i++)
        FSH_RETURN_NOT_OK(append_child(body, f, a, i, off, len, path, depth, err));
      return 0;
    case FSH_TYPE_SPARSE_UNION:
      FSH_RETURN_NOT_OK(fixed_range(a->buffers[0], off, len, 1, path, &b, err));
      FSH_RETURN_NOT_OK(push_buffer(body, b, err));
      for (int64_t i = 0; i < f->n_children; i++)
        FSH_RETURN_NOT_OK(append_child(body, f, a, i, off, len, path, depth, err));
      return 0;
    case FSH_TYPE_DENSE_UNION:
      return append_dense_union(body, f, a, off, len, path, depth, err);
    default: {
      int64_t w = fsh_type_bit_width(f) / 8;
      if (w == 0 && t == FSH_TYPE_FIXED_SIZE_BINARY) return push_buffer(body, NULL, err);
      if (w <= 0)
        return fsh_error_set(err, ENOTSUP, "field '%s': cannot encode type %s", path,
                             fsh_type_name(t));
      FSH_RETURN_NOT_OK(fixed_range(a->buffers[1], off, len, w, path, &b, err));
      return push_buffer(body, b, err);
    }
  }
}

int fsh_ipc_body_append(fsh_ipc_body *body, const fsh_field *f, fsh_array *a, int64_t offset,
                        int64_t length, fsh_error *err) {
  return append(body, f, a, offset, length, "", 0, err);
}
