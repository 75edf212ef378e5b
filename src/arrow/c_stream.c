/* c_stream.c -- the Arrow C Stream Interface: fsh_batch_stream <->
 * struct ArrowArrayStream, and a batch stream over batches in memory. */
#include <flightshuffle/arrow.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- export ------------------------------------------------------------ */

typedef struct stream_export_priv {
  fsh_batch_stream stream; /* moved in */
  fsh_error last_error;
} stream_export_priv;

static int export_get_schema(struct ArrowArrayStream *cs, struct ArrowSchema *out) {
  stream_export_priv *p = cs->private_data;
  p->last_error.message[0] = '\0';
  if (!p->stream.schema)
    return fsh_error_set(&p->last_error, EINVAL, "the stream has no schema");
  return fsh_schema_export(p->stream.schema, out, &p->last_error);
}

static int export_get_next(struct ArrowArrayStream *cs, struct ArrowArray *out) {
  stream_export_priv *p = cs->private_data;
  p->last_error.message[0] = '\0';
  fsh_batch *b = NULL;
  int rc = p->stream.get_next(&p->stream, &b, &p->last_error);
  if (rc) {
    if (!p->last_error.message[0]) fsh_error_set(&p->last_error, rc, "%s", strerror(rc));
    return rc;
  }
  if (!b) {
    memset(out, 0, sizeof *out); /* released: the end of the stream */
    return 0;
  }
  rc = fsh_batch_export(b, out, &p->last_error);
  fsh_batch_unref(b);
  return rc;
}

static const char *export_get_last_error(struct ArrowArrayStream *cs) {
  stream_export_priv *p = cs->private_data;
  return p->last_error.message[0] ? p->last_error.message : NULL;
}

static void export_release(struct ArrowArrayStream *cs) {
  if (!cs || !cs->release) return;
  stream_export_priv *p = cs->private_data;
  if (p->stream.release) p->stream.release(&p->stream);
  fsh_free(p);
  cs->release = NULL;
  cs->private_data = NULL;
}

int fsh_stream_export(fsh_batch_stream *s, struct ArrowArrayStream *out, fsh_error *err) {
  if (!s || !s->release || !s->get_next)
    return fsh_error_set(err, EINVAL, "exporting a released batch stream");
  stream_export_priv *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory exporting a stream");
  p->stream = *s;
  memset(s, 0, sizeof *s);
  memset(out, 0, sizeof *out);
  out->get_schema = export_get_schema;
  out->get_next = export_get_next;
  out->get_last_error = export_get_last_error;
  out->release = export_release;
  out->private_data = p;
  return 0;
}

/* ---- import ------------------------------------------------------------ */

typedef struct stream_import_priv {
  struct ArrowArrayStream stream; /* moved in */
} stream_import_priv;

static int producer_error(struct ArrowArrayStream *cs, int rc, const char *what, fsh_error *err) {
  const char *msg = cs->get_last_error ? cs->get_last_error(cs) : NULL;
  return fsh_error_set(err, rc, "C stream %s failed: %s", what, msg ? msg : strerror(rc));
}

static int import_get_next(fsh_batch_stream *s, fsh_batch **out, fsh_error *err) {
  stream_import_priv *p = s->private_data;
  struct ArrowArray arr;
  memset(&arr, 0, sizeof arr);
  int rc = p->stream.get_next(&p->stream, &arr);
  if (rc) return producer_error(&p->stream, rc, "get_next", err);
  if (!arr.release) {
    *out = NULL;
    return 0;
  }
  return fsh_batch_import(&arr, s->schema, out, err);
}

static void import_release(fsh_batch_stream *s) {
  if (!s || !s->release) return;
  stream_import_priv *p = s->private_data;
  if (p->stream.release) p->stream.release(&p->stream);
  fsh_free(p);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

int fsh_stream_import(struct ArrowArrayStream *in, fsh_batch_stream *out, fsh_error *err) {
  if (!in || !in->release) return fsh_error_set(err, EINVAL, "importing a released C stream");
  stream_import_priv *p = fsh_calloc(1, sizeof *p);
  if (!p) {
    in->release(in);
    return fsh_error_set(err, ENOMEM, "out of memory importing a C stream");
  }
  p->stream = *in;
  in->release = NULL;
  struct ArrowSchema cschema;
  memset(&cschema, 0, sizeof cschema);
  fsh_schema *schema = NULL;
  int rc = p->stream.get_schema(&p->stream, &cschema);
  if (rc) {
    producer_error(&p->stream, rc, "get_schema", err);
  } else if ((rc = fsh_schema_import(&cschema, &schema, err)) != 0) {
    fsh_error_prefix(err, rc, "importing a C stream's schema: ");
  }
  if (rc) {
    p->stream.release(&p->stream);
    fsh_free(p);
    return rc;
  }
  memset(out, 0, sizeof *out);
  out->schema = schema;
  out->get_next = import_get_next;
  out->release = import_release;
  out->private_data = p;
  return 0;
}

/* ---- a stream over batches in memory ----------------------------------- */

typedef struct list_priv {
  int64_t n, next;
  fsh_batch **batches;
} list_priv;

static int list_get_next(fsh_batch_stream *s, fsh_batch **out, fsh_error *err) {
  (void)err;
  list_priv *p = s->private_data;
  if (p->next >= p->n) {
    *out = NULL;
    return 0;
  }
  *out = p->batches[p->next]; /* hand our reference over */
  p->batches[p->next++] = NULL;
  return 0;
}

static void list_release(fsh_batch_stream *s) {
  if (!s || !s->release) return;
  list_priv *p = s->private_data;
  for (int64_t i = p->next; i < p->n; i++) fsh_batch_unref(p->batches[i]);
  fsh_free(p->batches);
  fsh_free(p);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

int fsh_batch_stream_from_batches(fsh_schema *schema, fsh_batch *const *batches, int64_t n,
                                  fsh_batch_stream *out, fsh_error *err) {
  if (!schema || n < 0 || (n > 0 && !batches))
    return fsh_error_set(err, EINVAL, "a batch stream needs a schema and n >= 0 batches");
  for (int64_t i = 0; i < n; i++) {
    if (!batches[i]) return fsh_error_set(err, EINVAL, "batch %lld is NULL", (long long)i);
    if (batches[i]->n_columns != schema->n_fields)
      return fsh_error_set(err, EINVAL, "batch %lld has %lld columns, the schema %lld fields",
                           (long long)i, (long long)batches[i]->n_columns,
                           (long long)schema->n_fields);
  }
  list_priv *p = fsh_calloc(1, sizeof *p);
  if (!p || (n > 0 && !(p->batches = fsh_calloc((size_t)n, sizeof *p->batches)))) {
    fsh_free(p);
    return fsh_error_set(err, ENOMEM, "out of memory making a batch stream");
  }
  for (int64_t i = 0; i < n; i++) p->batches[i] = fsh_batch_ref(batches[i]);
  p->n = n;
  memset(out, 0, sizeof *out);
  out->schema = fsh_schema_ref(schema);
  out->get_next = list_get_next;
  out->release = list_release;
  out->private_data = p;
  return 0;
}
