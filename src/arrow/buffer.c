/* buffer.c -- refcounted byte buffers: owned 64-byte-aligned memory, views
 * into a parent buffer, and wrappers of foreign memory. */
#include <flightshuffle/arrow.h>

#include <errno.h>
#include <string.h>

#include "arrow/pack_internal.h"

static fsh_buffer *buffer_header(void) {
  fsh_buffer *b = fsh_calloc(1, sizeof *b);
  if (b) atomic_init(&b->refcount, 1);
  return b;
}

fsh_buffer *fsh_buffer_new(int64_t size, bool zeroed) {
  if (size < 0 || size > INT64_MAX - 64) return NULL;
  fsh_buffer *b = buffer_header();
  if (!b) return NULL;
  int64_t cap = fsh_round_up(size > 0 ? size : 1, 64);
  b->data = fsh_aligned_alloc((size_t)cap);
  if (!b->data) {
    fsh_free(b);
    return NULL;
  }
  b->size = size;
  b->capacity = cap;
  if (zeroed)
    memset(b->data, 0, (size_t)cap);
  else
    memset(b->data + size, 0, (size_t)(cap - size)); /* padding is always zero */
  return b;
}

int fsh_buffer_resize(fsh_buffer *b, int64_t size, fsh_error *err) {
  if (b->parent || b->release || b->pack)
    return fsh_error_set(err, EINVAL, "cannot resize a view or a wrapped buffer");
  if (size < 0 || size > INT64_MAX / 4)
    return fsh_error_set(err, EINVAL, "negative or too large buffer size %lld", (long long)size);
  if (size <= b->capacity) {
    if (size < b->size) memset(b->data + size, 0, (size_t)(b->size - size));
    b->size = size;
    return 0;
  }
  int64_t cap = b->capacity;
  while (cap < size) cap = cap > INT64_MAX / 2 ? size : cap * 2;
  cap = fsh_round_up(cap, 64);
  uint8_t *data = fsh_aligned_alloc((size_t)cap);
  if (!data)
    return fsh_error_set(err, ENOMEM, "out of memory growing a buffer to %lld bytes",
                         (long long)cap);
  memcpy(data, b->data, (size_t)b->size);
  memset(data + b->size, 0, (size_t)(cap - b->size));
  fsh_aligned_free(b->data, (size_t)b->capacity);
  b->data = data;
  b->capacity = cap;
  b->size = size;
  return 0;
}

fsh_buffer *fsh_buffer_slice(fsh_buffer *parent, int64_t offset, int64_t size) {
  if (!parent || offset < 0 || size < 0 || offset > parent->size - size) return NULL;
  if (parent->parent) { /* a view of a view points at the root directly */
    offset += parent->data - parent->parent->data;
    parent = parent->parent;
  }
  fsh_buffer *b = buffer_header();
  if (!b) return NULL;
  b->parent = fsh_buffer_ref(parent);
  b->data = parent->data + offset;
  b->size = size;
  return b;
}

fsh_buffer *fsh_buffer_wrap(const void *data, int64_t size, void (*release)(void *ctx),
                            void *ctx) {
  if (size < 0) return NULL;
  fsh_buffer *b = buffer_header();
  if (!b) return NULL;
  b->data = (uint8_t *)data;
  b->size = size;
  b->release = release;
  b->release_ctx = ctx;
  return b;
}

fsh_buffer *fsh_buffer_copy(const void *data, int64_t size) {
  fsh_buffer *b = fsh_buffer_new(size, false);
  if (b && size > 0) memcpy(b->data, data, (size_t)size);
  return b;
}

fsh_buffer *fsh_buffer_ref(fsh_buffer *b) {
  if (b) atomic_fetch_add_explicit(&b->refcount, 1, memory_order_relaxed);
  return b;
}

void fsh_buffer_drop_in(fsh_buffer *b, fsh_pack *p, long *n) {
  if (b && p && b->pack == p && b->parent == fsh_pack_root(p)) {
    if (fsh_last_ref(&b->refcount)) (*n)++; /* nothing else to release: the root is p's */
    return;
  }
  fsh_buffer_unref(b);
}

void fsh_buffer_unref(fsh_buffer *b) {
  while (b) {
    if (!fsh_last_ref(&b->refcount)) return;
    fsh_buffer *parent = b->parent;
    if (b->pack) { /* a view carved from a pack (pack.c) */
      fsh_pack *p = b->pack;
      if (parent == fsh_pack_root(p)) parent = NULL; /* the pack's reference */
      fsh_pack_unref(p);
      b = parent;
      continue;
    }
    if (b->release)
      b->release(b->release_ctx);
    else if (!parent && b->capacity > 0) /* owned memory (borrowed wraps have capacity 0) */
      fsh_aligned_free(b->data, (size_t)b->capacity);
    fsh_free(b);
    b = parent; /* iterative: long chains of views do not recurse */
  }
}
