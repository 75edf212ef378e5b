/* array.c -- refcounted arrays in the C Data Interface layout: lifecycle,
 * zero-copy slices, null counts and bitmap counting. */
#include <flightshuffle/arrow.h>

#include <string.h>

#include "arrow/pack_internal.h"

fsh_array *fsh_array_new(int32_t n_buffers, int64_t n_children) {
  if (n_buffers < 0 || n_buffers > FSH_MAX_BUFFERS || n_children < 0) return NULL;
  fsh_array *a = fsh_calloc(1, sizeof *a);
  if (!a) return NULL;
  atomic_init(&a->refcount, 1);
  a->n_buffers = n_buffers;
  if (n_children > 0) {
    a->children = fsh_calloc((size_t)n_children, sizeof *a->children);
    if (!a->children) {
      fsh_free(a);
      return NULL;
    }
  }
  a->n_children = n_children;
  return a;
}

fsh_array *fsh_array_ref(fsh_array *a) {
  if (a) atomic_fetch_add_explicit(&a->refcount, 1, memory_order_relaxed);
  return a;
}

/* Releases what the dead array a holds, then a itself: a node of pack p
 * is counted in *n (see fsh_array_drop_in), of another pack drops its
 * reference, else is freed. */
static void array_release(fsh_array *a, fsh_pack *p, long *n) {
  for (int i = 0; i < FSH_MAX_BUFFERS; i++) fsh_buffer_drop_in(a->buffers[i], p, n);
  for (int64_t i = 0; i < a->n_children; i++) fsh_array_drop_in(a->children[i], p, n);
  fsh_array_unref(a->dictionary);
  if (a->pack && a->pack == p) {
    (*n)++;
  } else if (a->pack) { /* node and children slots are the pack's (pack.c) */
    fsh_pack_unref(a->pack);
  } else {
    fsh_free(a->children);
    fsh_free(a);
  }
}

void fsh_array_drop_in(fsh_array *a, fsh_pack *p, long *n) {
  if (a && fsh_last_ref(&a->refcount)) array_release(a, p, n);
}

void fsh_array_unref(fsh_array *a) {
  if (!a || !fsh_last_ref(&a->refcount)) return;
  fsh_pack *p = a->pack; /* the pack's objects that die with a: one release */
  long n = 0;
  array_release(a, p, &n);
  fsh_pack_release_n(p, n);
}

/* A slice is a new array node sharing every buffer, child and dictionary;
 * only offset and length change (children keep their own offsets, as in the
 * C Data Interface, where a parent's offset applies to its own buffers). */
fsh_array *fsh_array_slice(fsh_array *a, int64_t offset, int64_t length) {
  if (!a || offset < 0 || length < 0 || offset > a->length - length) return NULL;
  fsh_array *s = fsh_array_new(a->n_buffers, a->n_children);
  if (!s) return NULL;
  s->length = length;
  s->offset = a->offset + offset;
  if (a->null_count == 0)
    s->null_count = 0;
  else if (offset == 0 && length == a->length)
    s->null_count = a->null_count;
  else
    s->null_count = -1;
  for (int i = 0; i < a->n_buffers; i++) s->buffers[i] = fsh_buffer_ref(a->buffers[i]);
  for (int64_t i = 0; i < a->n_children; i++) s->children[i] = fsh_array_ref(a->children[i]);
  s->dictionary = fsh_array_ref(a->dictionary);
  return s;
}

bool fsh_array_is_valid(const fsh_array *a, int64_t i) {
  if (a->n_buffers == 0) return false; /* the null type */
  const fsh_buffer *validity = a->buffers[0];
  if (!validity) return true;
  return fsh_bit_get(validity->data, a->offset + i);
}

/* Unions have no validity buffer (buffer 0 holds type ids): callers that
 * know the type ask about unions' children instead. Here any array whose
 * null_count is unknown is counted from buffer 0 if present. */
int64_t fsh_array_null_count(fsh_array *a) {
  if (a->null_count >= 0) return a->null_count;
  if (a->n_buffers == 0) {
    a->null_count = a->length;
  } else if (!a->buffers[0]) {
    a->null_count = 0;
  } else {
    a->null_count = a->length - fsh_bitmap_count(a->buffers[0]->data, a->offset, a->length);
  }
  return a->null_count;
}

int64_t fsh_bitmap_count(const uint8_t *bits, int64_t offset, int64_t length) {
  int64_t count = 0, i = offset, end = offset + length;
  for (; i < end && (i & 7); i++) count += fsh_bit_get(bits, i);
  for (; i + 64 <= end; i += 64) {
    uint64_t word;
    memcpy(&word, bits + (i >> 3), 8);
    count += __builtin_popcountll(word);
  }
  for (; i < end; i++) count += fsh_bit_get(bits, i);
  return count;
}
