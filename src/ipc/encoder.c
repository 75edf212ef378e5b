/* encoder.c -- schemas and record batches to IPC payloads (no I/O).
 *
 * The encoder remembers, per dictionary id, the dictionary array it last
 * emitted (a reference is held, so a pointer cannot be reused by another
 * array). A batch whose dictionary is a different array first gets:
 *  - nothing, if the new dictionary has the same values, or is a prefix of
 *    the one last emitted (whose values then stay the current ones);
 *  - a delta dictionary batch with the new tail, if the old values are a
 *    prefix of the new ones (file format, or stream with
 *    emit_dictionary_deltas);
 *  - otherwise a replacement (stream) or an error (file format, which
 *    allows a single dictionary per id).
 * Dictionaries nested inside a dictionary's values are emitted before it.
 * The remembered state changes only when a whole batch encodes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ipc/writer_internal.h"

typedef struct dict_state {
  int64_t id;
  const fsh_field *value; /* the dictionary's value field, in e->schema */
  fsh_array *last;        /* reference; NULL until first emitted */
  fsh_array *pending;     /* reference: what `last` becomes if the batch encodes */
  const fsh_array *seen;  /* the batch's dictionary array (borrowed), while encoding */
  bool touched;           /* seen in the batch being encoded */
} dict_state;

struct fsh_ipc_encoder {
  fsh_schema *schema;
  fsh_ipc_write_options opts;
  bool file_format;
  fsh_buffer *zeros;
  fsh_fbb fbb;
  dict_state *dicts;
  int64_t n_dicts;
  /* kept between messages (a map task encodes one per partition): the
   * body's node and buffer arrays, and a padding view per size */
  fsh_ipc_node *nodes;
  int64_t cap_nodes;
  fsh_ipc_range *buffers;
  int64_t cap_buffers;
  fsh_buffer *pads[FSH_IPC_ALIGN];
  /* The metadata of the last record batch message encoded, as a template
   * for the next of the same shape (see rb_template_*). */
  struct {
    uint8_t *bytes; /* NULL: none yet */
    int64_t size, n_nodes, n_buffers;
    int64_t at_length, at_body_length, at_nodes, at_buffers; /* byte positions */
  } rb;
  fsh_buffer *md_built; /* fsh_ipc_encoder_batch_metadata's last answer when no
                           template could be kept (else NULL) */
};

void fsh_ipc_write_options_init(fsh_ipc_write_options *o) {
  memset(o, 0, sizeof *o);
  o->compression = FSH_COMPRESSION_NONE;
}

void fsh_ipc_payload_reset(fsh_ipc_payload *p) {
  if (!p) return;
  fsh_buffer_unref(p->metadata);
  for (int32_t i = 0; i < p->n_body; i++) fsh_buffer_unref(p->body[i]);
  fsh_free(p->body);
  memset(p, 0, sizeof *p);
}

void fsh_ipc_encoder_set_file_format(fsh_ipc_encoder *e, bool file_format) {
  e->file_format = file_format;
}

/* Registers the dictionaries of f and everything under it. */
static int collect_dicts(fsh_ipc_encoder *e, const fsh_field *f, int depth, fsh_error *err) {
  if (depth > 64) return fsh_error_set(err, EINVAL, "schema nested deeper than 64 levels");
  const fsh_field *value = f;
  if (f->dictionary) {
    bool known = false;
    for (int64_t i = 0; i < e->n_dicts; i++) known |= e->dicts[i].id == f->dictionary->id;
    if (!known) {
      dict_state *d = fsh_realloc(e->dicts, sizeof(dict_state) * (size_t)(e->n_dicts + 1));
      if (!d) return fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
      e->dicts = d;
      e->dicts[e->n_dicts++] = (dict_state){.id = f->dictionary->id, .value = &f->dictionary->value};
    }
    value = &f->dictionary->value;
    if (value->dictionary) FSH_RETURN_NOT_OK(collect_dicts(e, value, depth + 1, err));
  }
  for (int64_t i = 0; i < value->n_children; i++)
    FSH_RETURN_NOT_OK(collect_dicts(e, &value->children[i], depth + 1, err));
  return 0;
}

int fsh_ipc_encoder_new(fsh_schema *schema, const fsh_ipc_write_options *opts,
                        fsh_ipc_encoder **out, fsh_error *err) {
  if (!schema) return fsh_error_set(err, EINVAL, "IPC encoder: schema is NULL");
  if (opts && (opts->compression < FSH_COMPRESSION_NONE || opts->compression > FSH_COMPRESSION_ZSTD))
    return fsh_error_set(err, EINVAL, "IPC encoder: unknown compression %d", (int)opts->compression);
  fsh_ipc_encoder *e = fsh_calloc(1, sizeof *e);
  if (!e) return fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
  fsh_fbb_init(&e->fbb);
  if (opts)
    e->opts = *opts;
  else
    fsh_ipc_write_options_init(&e->opts);
  e->schema = fsh_schema_ref(schema);
  e->zeros = fsh_ipc_zeros_new();
  if (!e->zeros) {
    fsh_ipc_encoder_free(e);
    return fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
  }
  for (int64_t i = 0; i < schema->n_fields; i++) {
    int rc = collect_dicts(e, &schema->fields[i], 0, err);
    if (rc) {
      fsh_ipc_encoder_free(e);
      return rc;
    }
  }
  *out = e;
  return 0;
}

void fsh_ipc_encoder_free(fsh_ipc_encoder *e) {
  if (!e) return;
  for (int64_t i = 0; i < e->n_dicts; i++) {
    fsh_array_unref(e->dicts[i].last);
    fsh_array_unref(e->dicts[i].pending);
  }
  fsh_free(e->dicts);
  fsh_fbb_reset(&e->fbb);
  fsh_free(e->nodes);
  fsh_free(e->buffers);
  for (int i = 0; i < FSH_IPC_ALIGN; i++) fsh_buffer_unref(e->pads[i]);
  fsh_free(e->rb.bytes);
  fsh_buffer_unref(e->md_built);
  fsh_buffer_unref(e->zeros);
  fsh_schema_unref(e->schema);
  fsh_free(e);
}

int fsh_ipc_encode_schema(fsh_ipc_encoder *e, fsh_ipc_payload *out, fsh_error *err) {
  fsh_buffer *md = NULL;
  FSH_RETURN_NOT_OK(fsh_ipc_encode_schema_message(e->schema, &md, err));
  memset(out, 0, sizeof *out);
  out->type = FSH_IPC_SCHEMA;
  out->metadata = md;
  return 0;
}

/* A growable list of payloads. */
typedef struct payload_list {
  fsh_ipc_payload *items;
  int32_t n, cap;
} payload_list;

static void payload_list_reset(payload_list *l) {
  for (int32_t i = 0; i < l->n; i++) fsh_ipc_payload_reset(&l->items[i]);
  fsh_free(l->items);
  memset(l, 0, sizeof *l);
}

/* ---- record batch metadata from a template --------------------------
 * The flatbuffer builder writes every field, defaults included, and lays
 * a RecordBatch message out by its shape alone: the numbers of FieldNodes
 * and Buffers and the compression (the encoder's, fixed). Two messages of
 * one shape differ only in the bytes of five numbers: the RecordBatch's
 * length, the nodes' (length, null count) and buffers' (offset, length)
 * structs, and the Message's bodyLength. So the metadata of the last
 * record batch message built is kept with the positions of those bytes,
 * and the next one of the same shape is a copy with them rewritten:
 * byte-identical to what the builder makes (tests/ipc/test_encode_template.c
 * compares the two), without the builder's work and allocations per
 * message (a map task at 1000 x 1000 encodes one message per partition,
 * ~1000 per 2 MiB). */

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The position of field `field` of the table at `table` in the finished
 * flatbuffer m (size n), or -1 when absent. m was just built by us, so
 * it is well formed; bounds are checked anyway. */
static int64_t fb_field_at(const uint8_t *m, int64_t n, int64_t table, int field) {
  if (table < 0 || table + 4 > n) return -1;
  int64_t vt = table - (int64_t)(int32_t)rd32(m + table);
  if (vt < 0 || vt + 4 > n) return -1;
  int64_t vt_size = m[vt] | m[vt + 1] << 8, slot = 4 + 2 * (int64_t)field;
  if (slot + 2 > vt_size || vt + slot + 2 > n) return -1;
  int64_t off = m[vt + slot] | m[vt + slot + 1] << 8;
  return off ? table + off : -1;
}

/* Where the uoffset at `at` points (-1 when at is -1 or out of range). */
static int64_t fb_follow(const uint8_t *m, int64_t n, int64_t at) {
  if (at < 0 || at + 4 > n) return -1;
  int64_t to = at + rd32(m + at);
  return to < n ? to : -1;
}

/* Keeps md (a record batch message of this shape) as the template; on any
 * surprise in its layout, none is kept (the builder stays in use). */
static void rb_template_keep(fsh_ipc_encoder *e, const fsh_buffer *md, int64_t n_nodes,
                             int64_t n_buffers) {
  fsh_free(e->rb.bytes);
  e->rb.bytes = NULL;
  const uint8_t *m = md->data;
  int64_t n = md->size;
  int64_t msg = fb_follow(m, n, 0);
  int64_t body_len = fb_field_at(m, n, msg, 3); /* Message.bodyLength */
  int64_t rb = fb_follow(m, n, fb_field_at(m, n, msg, 2)); /* Message.header */
  int64_t len = fb_field_at(m, n, rb, 0);                  /* RecordBatch.length */
  int64_t nodes = fb_follow(m, n, fb_field_at(m, n, rb, 1));
  int64_t bufs = fb_follow(m, n, fb_field_at(m, n, rb, 2));
  if (body_len < 0 || len < 0 || nodes < 0 || bufs < 0 || body_len + 8 > n || len + 8 > n ||
      rd32(m + nodes) != (uint64_t)n_nodes || rd32(m + bufs) != (uint64_t)n_buffers ||
      nodes + 4 + 16 * n_nodes > n || bufs + 4 + 16 * n_buffers > n)
    return;
  if (!(e->rb.bytes = fsh_malloc((size_t)n))) return; /* no template: not an error */
  memcpy(e->rb.bytes, m, (size_t)n);
  e->rb.size = n;
  e->rb.n_nodes = n_nodes;
  e->rb.n_buffers = n_buffers;
  e->rb.at_length = len;
  e->rb.at_body_length = body_len;
  e->rb.at_nodes = nodes + 4;
  e->rb.at_buffers = bufs + 4;
}

/* The metadata of a record batch message from the template, or NULL when
 * there is none of this shape (or no memory: the builder then runs). */
/* Writes the numbers of a message of this layout into m, a copy of the
 * template (every number that differs between messages of one shape). */
static void rb_template_patch(const fsh_ipc_encoder *e, uint8_t *m, int64_t length,
                              const fsh_ipc_node *nodes, int64_t n_nodes,
                              const fsh_ipc_range *buffers, int64_t n_buffers,
                              int64_t body_length) {
  fsh_store_le64(m + e->rb.at_length, (uint64_t)length);
  fsh_store_le64(m + e->rb.at_body_length, (uint64_t)body_length);
  for (int64_t i = 0; i < n_nodes; i++) {
    fsh_store_le64(m + e->rb.at_nodes + 16 * i, (uint64_t)nodes[i].length);
    fsh_store_le64(m + e->rb.at_nodes + 16 * i + 8, (uint64_t)nodes[i].null_count);
  }
  for (int64_t i = 0; i < n_buffers; i++) {
    fsh_store_le64(m + e->rb.at_buffers + 16 * i, (uint64_t)buffers[i].offset);
    fsh_store_le64(m + e->rb.at_buffers + 16 * i + 8, (uint64_t)buffers[i].length);
  }
}

static bool rb_template_fits(const fsh_ipc_encoder *e, int64_t n_nodes, int64_t n_buffers) {
  return e->rb.bytes && e->rb.n_nodes == n_nodes && e->rb.n_buffers == n_buffers;
}

static fsh_buffer *rb_template_use(fsh_ipc_encoder *e, int64_t length, const fsh_ipc_node *nodes,
                                   int64_t n_nodes, const fsh_ipc_range *buffers,
                                   int64_t n_buffers, int64_t body_length) {
  if (!rb_template_fits(e, n_nodes, n_buffers)) return NULL;
  fsh_buffer *md = fsh_buffer_new(e->rb.size, false);
  if (!md) return NULL;
  memcpy(md->data, e->rb.bytes, (size_t)e->rb.size);
  rb_template_patch(e, md->data, length, nodes, n_nodes, buffers, n_buffers, body_length);
  return md;
}

/* With a template: patched in place (its numbers are all rewritten by
 * every use, so it stays the template) and lent out -- no allocation or
 * copy per message (a map task at 1000 partitions asks for 1000). */
int fsh_ipc_encoder_batch_metadata(fsh_ipc_encoder *e, int64_t length, const fsh_ipc_node *nodes,
                                   int64_t n_nodes, const fsh_ipc_range *buffers,
                                   int64_t n_buffers, int64_t body_length,
                                   const uint8_t **bytes, int64_t *size, fsh_error *err) {
  *bytes = NULL;
  *size = 0;
  fsh_buffer_unref(e->md_built);
  e->md_built = NULL;
  if (!rb_template_fits(e, n_nodes, n_buffers)) {
    fsh_buffer *md = NULL;
    fsh_fbb *b = &e->fbb;
    fsh_fbb_clear(b);
    fsh_fb_ref rb = fsh_ipc_build_record_batch(b, length, nodes, n_nodes, buffers, n_buffers,
                                               e->opts.compression);
    FSH_RETURN_NOT_OK(fsh_ipc_finish_message(b, FSH_IPC_RECORD_BATCH, rb, body_length, &md, err));
    rb_template_keep(e, md, n_nodes, n_buffers);
    if (!rb_template_fits(e, n_nodes, n_buffers)) { /* no template: lend the built bytes */
      e->md_built = md;
      *bytes = md->data;
      *size = md->size;
      return 0;
    }
    fsh_buffer_unref(md); /* the template is a copy of it */
  }
  rb_template_patch(e, e->rb.bytes, length, nodes, n_nodes, buffers, n_buffers, body_length);
  *bytes = e->rb.bytes;
  *size = e->rb.size;
  return 0;
}

/* Encodes the columns (fields[i], arrays[i]) into one payload appended to
 * l: a record batch of `length` rows, or a dictionary batch (id dict_id)
 * of the last `length` values of its one array. */
static int encode_one(fsh_ipc_encoder *e, fsh_ipc_message_type type, int64_t dict_id, bool delta,
                      int64_t n_cols, const fsh_field *const *fields, fsh_array *const *arrays,
                      int64_t length, payload_list *l, fsh_error *err) {
  if (l->n == l->cap) {
    int32_t nc = l->cap ? l->cap * 2 : 4;
    fsh_ipc_payload *p = fsh_realloc(l->items, sizeof(fsh_ipc_payload) * (size_t)nc);
    if (!p) return fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
    l->items = p;
    l->cap = nc;
  }
  fsh_ipc_body body = {.compression = e->opts.compression,
                       .level = e->opts.compression_level,
                       .zeros = e->zeros,
                       .pads = e->pads,
                       .nodes = e->nodes,
                       .cap_nodes = e->cap_nodes,
                       .buffers = e->buffers,
                       .cap_buffers = e->cap_buffers};
  int rc = 0;
  for (int64_t i = 0; i < n_cols && rc == 0; i++) {
    fsh_array *a = arrays[i];
    if (!a) {
      rc = fsh_error_set(err, EINVAL, "column '%s': array missing", fields[i]->name);
    } else if (type == FSH_IPC_RECORD_BATCH && a->length != length) {
      rc = fsh_error_set(err, EINVAL, "column '%s' has %lld rows, the batch %lld",
                         fields[i]->name, (long long)a->length, (long long)length);
    } else {
      /* a dictionary batch carries the last `length` values (all of them,
       * or the tail of a delta) */
      int64_t skip = type == FSH_IPC_DICTIONARY_BATCH ? a->length - length : 0;
      rc = fsh_ipc_body_append(&body, fields[i], a, a->offset + skip, length, err);
    }
  }
  fsh_buffer *md = NULL;
  if (rc == 0 && type == FSH_IPC_RECORD_BATCH)
    md = rb_template_use(e, length, body.nodes, body.n_nodes, body.buffers, body.n_buffers,
                         body.length);
  if (rc == 0 && !md) {
    fsh_fbb *b = &e->fbb;
    fsh_fbb_clear(b);
    fsh_fb_ref rb = fsh_ipc_build_record_batch(b, length, body.nodes, body.n_nodes, body.buffers,
                                               body.n_buffers, e->opts.compression);
    fsh_fb_ref header = rb;
    if (type == FSH_IPC_DICTIONARY_BATCH)
      header = fsh_ipc_build_dictionary_batch(b, dict_id, rb, delta);
    rc = fsh_ipc_finish_message(b, type, header, body.length, &md, err);
    if (rc == 0 && type == FSH_IPC_RECORD_BATCH)
      rb_template_keep(e, md, body.n_nodes, body.n_buffers);
  }
  /* the node and buffer arrays go back to the encoder, for the next one */
  e->nodes = body.nodes;
  e->cap_nodes = body.cap_nodes;
  e->buffers = body.buffers;
  e->cap_buffers = body.cap_buffers;
  body.nodes = NULL;
  body.buffers = NULL;
  if (rc) {
    fsh_ipc_body_reset(&body);
    return rc;
  }
  fsh_ipc_payload *p = &l->items[l->n++];
  *p = (fsh_ipc_payload){.type = type,
                         .metadata = md,
                         .body_length = body.length,
                         .n_body = body.n_segments,
                         .body = body.segments};
  body.segments = NULL;
  body.n_segments = 0;
  fsh_ipc_body_reset(&body);
  return 0;
}

static dict_state *find_dict(fsh_ipc_encoder *e, int64_t id) {
  for (int64_t i = 0; i < e->n_dicts; i++)
    if (e->dicts[i].id == id) return &e->dicts[i];
  return NULL;
}

/* Decides what a batch needs for dictionary d whose array is now `dict`,
 * and appends the dictionary batch payload if any. */
static int handle_dict(fsh_ipc_encoder *e, dict_state *d, fsh_array *dict, payload_list *l,
                       const char *path, fsh_error *err) {
  if (d->touched) {
    if (d->seen == dict) return 0;
    return fsh_error_set(err, EINVAL,
                         "field '%s': dictionary id %lld is shared by columns that carry different "
                         "dictionary arrays in one batch",
                         path, (long long)d->id);
  }
  const fsh_field *vf = d->value;
  fsh_array *last = d->last;
  bool emit = true, delta = false;
  fsh_array *keep = dict; /* the dictionary readers will hold afterwards */
  if (last == dict) {
    emit = false;
  } else if (last) {
    if (fsh_array_equals(vf, last, dict, NULL)) {
      emit = false;
    } else if (dict->length < last->length) {
      /* a prefix of what readers hold already serves this batch's indices */
      fsh_array *head = fsh_array_slice(last, 0, dict->length);
      if (!head) return fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
      if (fsh_array_equals(vf, head, dict, NULL)) {
        emit = false;
        keep = last;
      }
      fsh_array_unref(head);
    } else if ((e->file_format || e->opts.emit_dictionary_deltas) && dict->length > last->length) {
      fsh_array *head = fsh_array_slice(dict, 0, last->length);
      if (!head) return fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
      delta = fsh_array_equals(vf, last, head, NULL);
      fsh_array_unref(head);
    }
    if (emit && !delta && e->file_format)
      return fsh_error_set(err, EINVAL,
                           "field '%s': dictionary id %lld changed, but the IPC file format allows "
                           "one dictionary per id (plus deltas that append values); write the "
                           "stream format, or keep one dictionary (possibly extended) for the file",
                           path, (long long)d->id);
  }
  if (emit) {
    const fsh_field *fields[1] = {vf};
    fsh_array *arrays[1] = {dict};
    int64_t n = delta ? dict->length - last->length : dict->length;
    FSH_RETURN_NOT_OK(encode_one(e, FSH_IPC_DICTIONARY_BATCH, d->id, delta, 1, fields, arrays, n,
                                 l, err));
  }
  d->touched = true;
  d->seen = dict;
  d->pending = fsh_array_ref(keep);
  return 0;
}

/* Visits f/a and emits the dictionaries under them, inner ones first. */
static int visit_dicts(fsh_ipc_encoder *e, const fsh_field *f, fsh_array *a, payload_list *l,
                       int depth, fsh_error *err) {
  if (depth > 64) return fsh_error_set(err, EINVAL, "field '%s': nested too deep", f->name);
  if (!a) return fsh_error_set(err, EINVAL, "field '%s': array missing", f->name);
  if (f->dictionary) {
    fsh_array *dict = a->dictionary;
    if (!dict)
      return fsh_error_set(err, EINVAL, "field '%s': dictionary-encoded array has no dictionary",
                           f->name);
    const fsh_field *value = &f->dictionary->value;
    if (value->dictionary) FSH_RETURN_NOT_OK(visit_dicts(e, value, dict, l, depth + 1, err));
    if (dict->n_children < value->n_children)
      return fsh_error_set(err, EINVAL, "field '%s': dictionary array lacks children", f->name);
    for (int64_t i = 0; i < value->n_children; i++)
      FSH_RETURN_NOT_OK(visit_dicts(e, &value->children[i], dict->children[i], l, depth + 1, err));
    dict_state *d = find_dict(e, f->dictionary->id);
    if (!d) return fsh_error_set(err, EINVAL, "field '%s': unknown dictionary id", f->name);
    return handle_dict(e, d, dict, l, f->name, err);
  }
  if (f->n_children && a->n_children < f->n_children)
    return fsh_error_set(err, EINVAL, "field '%s': array lacks children", f->name);
  for (int64_t i = 0; i < f->n_children; i++)
    FSH_RETURN_NOT_OK(visit_dicts(e, &f->children[i], a->children[i], l, depth + 1, err));
  return 0;
}

int fsh_ipc_encode_batch(fsh_ipc_encoder *e, fsh_batch *batch, fsh_ipc_payload **out,
                         int32_t *n_out, fsh_error *err) {
  const fsh_schema *s = e->schema;
  if (!batch) return fsh_error_set(err, EINVAL, "IPC encoder: batch is NULL");
  if (batch->n_columns != s->n_fields)
    return fsh_error_set(err, EINVAL, "IPC encoder: batch has %lld columns, the schema %lld",
                         (long long)batch->n_columns, (long long)s->n_fields);
  if (batch->schema != s && batch->schema) {
    fsh_error diff;
    if (!fsh_schema_equals(s, batch->schema, false, &diff))
      return fsh_error_set(err, EINVAL, "IPC encoder: batch schema differs from the stream's: %s",
                           diff.message);
  }
  payload_list l = {0};
  int rc = 0;
  if (e->n_dicts) {
    for (int64_t i = 0; i < s->n_fields && rc == 0; i++)
      rc = visit_dicts(e, &s->fields[i], batch->columns[i], &l, 0, err);
  }
  if (rc == 0) {
    const fsh_field *few[16];
    const fsh_field **fields =
        s->n_fields <= 16 ? few : fsh_malloc(sizeof(fsh_field *) * (size_t)s->n_fields);
    if (!fields) {
      rc = fsh_error_set(err, ENOMEM, "IPC encoder: out of memory");
    } else {
      for (int64_t i = 0; i < s->n_fields; i++) fields[i] = &s->fields[i];
      rc = encode_one(e, FSH_IPC_RECORD_BATCH, -1, false, s->n_fields, fields, batch->columns,
                      batch->length, &l, err);
      if (fields != few) fsh_free(fields);
    }
  }
  /* commit or roll back the dictionary state */
  for (int64_t i = 0; i < e->n_dicts; i++) {
    dict_state *d = &e->dicts[i];
    if (!d->touched) continue;
    if (rc == 0) {
      fsh_array_unref(d->last);
      d->last = d->pending;
    } else {
      fsh_array_unref(d->pending);
    }
    d->pending = NULL;
    d->seen = NULL;
    d->touched = false;
  }
  if (rc) {
    payload_list_reset(&l);
    return rc;
  }
  *out = l.items;
  *n_out = l.n;
  return 0;
}
