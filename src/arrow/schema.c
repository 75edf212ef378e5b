/* schema.c -- refcounted schemas: top-level fields plus metadata. */
#include <flightshuffle/arrow.h>

fsh_schema *fsh_schema_new(int64_t n_fields) {
  if (n_fields < 0) return NULL;
  fsh_schema *s = fsh_calloc(1, sizeof *s);
  if (!s) return NULL;
  atomic_init(&s->refcount, 1);
  if (n_fields > 0) {
    s->fields = fsh_calloc((size_t)n_fields, sizeof *s->fields);
    if (!s->fields) {
      fsh_free(s);
      return NULL;
    }
  }
  s->n_fields = n_fields;
  return s;
}

fsh_schema *fsh_schema_ref(fsh_schema *s) {
  if (s) atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
  return s;
}

void fsh_schema_unref(fsh_schema *s) {
  if (!s || atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
  for (int64_t i = 0; i < s->n_fields; i++) fsh_field_reset(&s->fields[i]);
  fsh_free(s->fields);
  fsh_metadata_reset(&s->metadata);
  fsh_free(s);
}
