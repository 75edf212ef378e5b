/* pack.c -- packs: one allocation that a batch, its arrays and their buffer
 * headers are carved from (contract in arrow.h). The pack counts its live
 * objects plus the builder's reference; the last release frees it and
 * drops its reference on the root buffer. */
#include <flightshuffle/arrow.h>

#include <stdalign.h>
#include <string.h>

#include "arrow/pack_internal.h"

struct fsh_pack {
  atomic_long refcount; /* objects carved and alive, + 1 while building */
  fsh_buffer *root;
  size_t used, cap;
  alignas(16) unsigned char room[];
};

#define SLOT(n) (((n) + 15) & ~(size_t)15)

fsh_pack *fsh_pack_new(size_t bytes, fsh_buffer *root) {
  if (bytes > SIZE_MAX / 2) return NULL;
  bytes = SLOT(bytes);
  fsh_pack *p = fsh_malloc(sizeof *p + bytes);
  if (!p) return NULL;
  atomic_init(&p->refcount, 1);
  p->root = fsh_buffer_ref(root);
  p->used = 0;
  p->cap = bytes;
  return p;
}

void fsh_pack_release_n(fsh_pack *p, long n) {
  if (!p || n <= 0) return;
  if (atomic_load_explicit(&p->refcount, memory_order_acquire) != n &&
      atomic_fetch_sub_explicit(&p->refcount, n, memory_order_acq_rel) != n)
    return;
  fsh_buffer_unref(p->root);
  fsh_free(p);
}

void fsh_pack_unref(fsh_pack *p) { fsh_pack_release_n(p, 1); }

fsh_buffer *fsh_pack_root(const fsh_pack *p) { return p->root; }

size_t fsh_pack_batch_bytes(int64_t n_columns) {
  return SLOT(sizeof(fsh_batch) + (size_t)n_columns * sizeof(fsh_array *));
}
size_t fsh_pack_array_bytes(int64_t n_children) {
  return SLOT(sizeof(fsh_array) + (size_t)n_children * sizeof(fsh_array *));
}
size_t fsh_pack_buffer_bytes(void) { return SLOT(sizeof(fsh_buffer)); }

/* Zeroed room for one object of `bytes` (a fsh_pack_*_bytes size) counted
 * as a reference on p, or NULL when p is NULL or full. The builder alone
 * touches p (nothing carved is shared yet): the count is a plain update. */
static void *carve(fsh_pack *p, size_t bytes) {
  if (!p || bytes > p->cap - p->used) return NULL;
  void *o = p->room + p->used;
  p->used += bytes;
  memset(o, 0, bytes);
  atomic_store_explicit(&p->refcount,
                        atomic_load_explicit(&p->refcount, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  return o;
}

fsh_batch *fsh_batch_new_in(fsh_pack *p, fsh_schema *schema, int64_t length) {
  if (!schema || length < 0) return NULL;
  fsh_batch *b = carve(p, fsh_pack_batch_bytes(schema->n_fields));
  if (!b) return fsh_batch_new(schema, length);
  atomic_init(&b->refcount, 1);
  b->pack = p;
  if (schema->n_fields > 0) b->columns = (fsh_array **)(b + 1);
  b->schema = fsh_schema_ref(schema);
  b->n_columns = schema->n_fields;
  b->length = length;
  return b;
}

fsh_array *fsh_array_new_in(fsh_pack *p, int32_t n_buffers, int64_t n_children) {
  if (n_buffers < 0 || n_buffers > FSH_MAX_BUFFERS || n_children < 0) return NULL;
  fsh_array *a = carve(p, fsh_pack_array_bytes(n_children));
  if (!a) return fsh_array_new(n_buffers, n_children);
  atomic_init(&a->refcount, 1);
  a->pack = p;
  a->n_buffers = n_buffers;
  if (n_children > 0) a->children = (fsh_array **)(a + 1);
  a->n_children = n_children;
  return a;
}

fsh_buffer *fsh_buffer_slice_in(fsh_pack *p, fsh_buffer *parent, int64_t offset, int64_t size) {
  if (!parent || offset < 0 || size < 0 || offset > parent->size - size) return NULL;
  fsh_buffer *root = parent;
  int64_t at = offset;
  if (root->parent) { /* a view of a view points at the root directly */
    at += root->data - root->parent->data;
    root = root->parent;
  }
  if (!p || root != p->root) return fsh_buffer_slice(parent, offset, size);
  fsh_buffer *b = carve(p, fsh_pack_buffer_bytes());
  if (!b) return fsh_buffer_slice(parent, offset, size);
  atomic_init(&b->refcount, 1);
  b->pack = p;
  b->parent = root; /* the pack's reference, borrowed */
  b->data = root->data + at;
  b->size = size;
  return b;
}
