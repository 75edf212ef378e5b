/* batch.c -- record batches: a schema reference and one array per field. */
#include <flightshuffle/arrow.h>

#include "arrow/pack_internal.h"

fsh_batch *fsh_batch_new(fsh_schema *schema, int64_t length) {
  if (!schema || length < 0) return NULL;
  fsh_batch *b = fsh_calloc(1, sizeof *b);
  if (!b) return NULL;
  atomic_init(&b->refcount, 1);
  if (schema->n_fields > 0) {
    b->columns = fsh_calloc((size_t)schema->n_fields, sizeof *b->columns);
    if (!b->columns) {
      fsh_free(b);
      return NULL;
    }
  }
  b->schema = fsh_schema_ref(schema);
  b->n_columns = schema->n_fields;
  b->length = length;
  return b;
}

fsh_batch *fsh_batch_ref(fsh_batch *b) {
  if (b) atomic_fetch_add_explicit(&b->refcount, 1, memory_order_relaxed);
  return b;
}

void fsh_batch_unref(fsh_batch *b) {
  if (!b || !fsh_last_ref(&b->refcount)) return;
  /* the objects of b's pack that die with it (a decoded batch's arrays
   * and views, unless shared on) drop their pack references at once */
  fsh_pack *p = b->pack;
  long n = 0;
  for (int64_t i = 0; i < b->n_columns; i++) fsh_array_drop_in(b->columns[i], p, &n);
  fsh_schema_unref(b->schema);
  if (p) { /* node and column slots are the pack's (pack.c) */
    fsh_pack_release_n(p, n + 1);
    return;
  }
  fsh_free(b->columns);
  fsh_free(b);
}

fsh_batch *fsh_batch_slice(fsh_batch *b, int64_t offset, int64_t length) {
  if (!b || offset < 0 || length < 0 || offset > b->length - length) return NULL;
  fsh_batch *s = fsh_batch_new(b->schema, length);
  if (!s) return NULL;
  for (int64_t i = 0; i < b->n_columns; i++) {
    if (!(s->columns[i] = fsh_array_slice(b->columns[i], offset, length))) {
      fsh_batch_unref(s);
      return NULL;
    }
  }
  return s;
}
