/* decoder.c -- the IPC message decoder: verified Message flatbuffer plus
 * body in, schema / dictionaries / record batches out. Holds the schema and
 * the current dictionary of every id the schema uses. No I/O. */
#include "ipc/read_internal.h"

#include <errno.h>
#include <string.h>

typedef struct dict_slot {
  int64_t id;
  const fsh_field *value; /* the dictionary's value field (in the schema) */
  fsh_array *values;      /* current dictionary, NULL until its first batch */
} dict_slot;

struct fsh_ipc_decoder {
  fsh_schema *schema;
  dict_slot *dicts;
  int64_t n_dicts;
  int64_t index; /* of the next message, for errors */
  bool file_mode;
  bool unpacked;     /* fsh_ipc_decoder_set_packed(false) */
  size_t pack_bytes; /* a record batch's pack (the schema's layout) */
};

int fsh_ipc_decoder_new(fsh_ipc_decoder **out, fsh_error *err) {
  fsh_ipc_decoder *d = fsh_calloc(1, sizeof *d);
  if (!d) return fsh_error_set(err, ENOMEM, "out of memory");
  *out = d;
  return 0;
}

static void clear_dicts(fsh_ipc_decoder *d) {
  for (int64_t i = 0; i < d->n_dicts; i++) fsh_array_unref(d->dicts[i].values);
  fsh_free(d->dicts);
  d->dicts = NULL;
  d->n_dicts = 0;
}

void fsh_ipc_decoder_free(fsh_ipc_decoder *d) {
  if (!d) return;
  clear_dicts(d);
  fsh_schema_unref(d->schema);
  fsh_free(d);
}

fsh_schema *fsh_ipc_decoder_schema(const fsh_ipc_decoder *d) { return d->schema; }
void fsh_ipc_decoder_set_file_mode(fsh_ipc_decoder *d, bool file_mode) { d->file_mode = file_mode; }
void fsh_ipc_decoder_set_index(fsh_ipc_decoder *d, int64_t index) { d->index = index; }
void fsh_ipc_decoder_set_packed(fsh_ipc_decoder *d, bool packed) { d->unpacked = !packed; }

/* Room for the array of f and its children (buffer views included; the
 * values of a dictionary are not part of a record batch). */
static size_t pack_bytes_of(const fsh_field *f) {
  int64_t n_children = f->dictionary ? 0 : f->n_children;
  size_t n = fsh_pack_array_bytes(n_children) +
             (size_t)fsh_type_n_buffers(f->type) * fsh_pack_buffer_bytes();
  for (int64_t i = 0; i < n_children; i++) n += pack_bytes_of(&f->children[i]);
  return n;
}

static dict_slot *find_slot(const fsh_ipc_decoder *d, int64_t id) {
  for (int64_t i = 0; i < d->n_dicts; i++)
    if (d->dicts[i].id == id) return &d->dicts[i];
  return NULL;
}

static fsh_array *find_dict(void *ctx, int64_t id) {
  dict_slot *s = find_slot(ctx, id);
  return s ? s->values : NULL;
}

/* Registers every dictionary-encoded field under f (nested ones too).
 * Several fields may share one dictionary id (as Arrow C++ accepts) when
 * their dictionary value types are the same: they then share the array. */
static int collect_dicts(fsh_ipc_decoder *d, const fsh_field *f, fsh_error *err) {
  if (f->dictionary) {
    dict_slot *shared = find_slot(d, f->dictionary->id);
    if (shared) {
      fsh_error why = {{0}};
      if (!fsh_field_type_equals(shared->value, &f->dictionary->value, &why))
        return fsh_error_set(err, EINVAL,
                             "field '%s': dictionary id %lld is used again with another value "
                             "type (%s)", f->name, (long long)f->dictionary->id, why.message);
      return 0; /* its value type's own dictionaries are registered already */
    }
    dict_slot *s = fsh_realloc(d->dicts, (size_t)(d->n_dicts + 1) * sizeof *s);
    if (!s) return fsh_error_set(err, ENOMEM, "out of memory");
    d->dicts = s;
    d->dicts[d->n_dicts++] = (dict_slot){f->dictionary->id, &f->dictionary->value, NULL};
    f = &f->dictionary->value;
  }
  for (int64_t i = 0; i < f->n_children; i++)
    FSH_RETURN_NOT_OK(collect_dicts(d, &f->children[i], err));
  return 0;
}

int fsh_ipc_decoder_set_schema(fsh_ipc_decoder *d, fsh_schema *schema, fsh_error *err) {
  if (d->schema) return fsh_error_set(err, EINVAL, "a second schema message");
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < schema->n_fields; i++)
    rc = collect_dicts(d, &schema->fields[i], err);
  if (rc != 0) {
    clear_dicts(d);
    return rc;
  }
  d->schema = fsh_schema_ref(schema);
  d->pack_bytes = fsh_pack_batch_bytes(schema->n_fields);
  for (int64_t i = 0; i < schema->n_fields; i++) d->pack_bytes += pack_bytes_of(&schema->fields[i]);
  return 0;
}

int fsh_ipc_peek_message(const fsh_buffer *metadata, fsh_ipc_message_type *type,
                         int64_t *body_length, fsh_error *err) {
  fsh_ipc_msg m;
  if (!metadata) return fsh_error_set(err, EINVAL, "no message metadata");
  FSH_RETURN_NOT_OK(fsh_ipc_msg_parse(metadata->data, metadata->size, &m, err));
  *type = m.type;
  *body_length = m.body_length;
  return 0;
}

/* A message's body: `buf` from `off` on (buf may be NULL without a body). */
typedef struct body_at {
  fsh_buffer *buf;
  int64_t off;
} body_at;

static void body_ctx_init(fsh_ipc_body_ctx *c, fsh_ipc_decoder *d, const fsh_ipc_msg *m,
                          const fsh_ipc_batch_header *h, body_at body) {
  memset(c, 0, sizeof *c);
  c->h = h;
  c->body = body.buf;
  c->body_off = body.off;
  c->body_length = m->body_length;
  c->version = m->version;
  c->find_dict = find_dict;
  c->find_ctx = d;
}

/* A record batch, its arrays and their views of the body carved from one
 * pack (unless unpacked): one allocation instead of one per object. */
static int decode_record_batch(fsh_ipc_decoder *d, const fsh_ipc_msg *m, body_at body,
                               fsh_batch **out, fsh_error *err) {
  fsh_ipc_batch_header h;
  fsh_ipc_body_ctx c;
  FSH_RETURN_NOT_OK(fsh_ipc_batch_header_parse(&m->header, &h, err));
  fsh_pack *pack = NULL;
  if (!d->unpacked) {
    fsh_buffer *root = body.buf && body.buf->parent ? body.buf->parent : body.buf;
    if (!(pack = fsh_pack_new(d->pack_bytes, root)))
      return fsh_error_set(err, ENOMEM, "out of memory");
  }
  fsh_batch *b = fsh_batch_new_in(pack, d->schema, h.length);
  if (!b) {
    fsh_pack_unref(pack);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  body_ctx_init(&c, d, m, &h, body);
  c.pack = pack;
  int rc = fsh_ipc_body_decode(&c, d->schema->fields, d->schema->n_fields, b->columns, err);
  for (int64_t i = 0; rc == 0 && i < b->n_columns; i++)
    if (b->columns[i]->length != h.length)
      rc = fsh_error_set(err, EINVAL, "column '%s' has length %lld, the batch %lld",
                         d->schema->fields[i].name, (long long)b->columns[i]->length,
                         (long long)h.length);
  fsh_pack_unref(pack); /* the builder's reference: the objects hold theirs */
  if (rc != 0) {
    fsh_batch_unref(b);
    return rc;
  }
  *out = b;
  return 0;
}

/* Applies a dictionary batch: replacement, or delta (appended after both
 * parts are validated, since concatenation follows their offsets). */
static int decode_dictionary(fsh_ipc_decoder *d, const fsh_ipc_msg *m, body_at body,
                             fsh_error *err) {
  fsh_ipc_dict_header h;
  fsh_ipc_body_ctx c;
  fsh_array *values;
  FSH_RETURN_NOT_OK(fsh_ipc_dict_header_parse(&m->header, &h, err));
  dict_slot *s = find_slot(d, h.id);
  if (!s)
    return fsh_error_set(err, EINVAL, "dictionary id %lld is not used by any field of the schema",
                         (long long)h.id);
  if (d->file_mode && s->values && !h.is_delta)
    return fsh_error_set(err, EINVAL, "dictionary id %lld replaced, which the file format forbids",
                         (long long)h.id);
  body_ctx_init(&c, d, m, &h.data, body);
  FSH_RETURN_NOT_OK(fsh_ipc_body_decode(&c, s->value, 1, &values, err));
  if (values->length != h.data.length) {
    int64_t got = values->length;
    fsh_array_unref(values);
    return fsh_error_set(err, EINVAL, "dictionary id %lld: values have length %lld, the batch %lld",
                         (long long)h.id, (long long)got, (long long)h.data.length);
  }
  if (h.is_delta && s->values) {
    fsh_array *merged;
    int rc = fsh_array_validate(s->value, s->values, false, err);
    if (rc == 0) rc = fsh_array_validate(s->value, values, false, err);
    if (rc == 0) rc = fsh_ipc_concat(s->value, s->values, values, &merged, err);
    fsh_array_unref(values);
    if (rc != 0) return fsh_error_prefix(err, rc, "dictionary id %lld delta: ", (long long)h.id);
    values = merged;
  }
  fsh_array_unref(s->values);
  s->values = values;
  return 0;
}

static int decode_schema(fsh_ipc_decoder *d, const fsh_ipc_msg *m, fsh_error *err) {
  fsh_schema *s;
  if (d->schema) return fsh_error_set(err, EINVAL, "a second schema message");
  FSH_RETURN_NOT_OK(fsh_ipc_schema_decode(&m->header, &s, err));
  int rc = fsh_ipc_decoder_set_schema(d, s, err);
  fsh_schema_unref(s);
  return rc;
}

static const char *type_name(fsh_ipc_message_type t) {
  switch (t) {
    case FSH_IPC_SCHEMA: return "schema";
    case FSH_IPC_DICTIONARY_BATCH: return "dictionary batch";
    case FSH_IPC_RECORD_BATCH: return "record batch";
    default: return "unknown";
  }
}

/* Decodes the message whose metadata flatbuffer is meta[0, meta_size)
 * (NULL: none) and whose body is body.buf from body.off on, at most
 * body_max bytes of it (the rest of buf when body_max < 0). *body_length:
 * the message's (when its metadata parsed). */
static int decode(fsh_ipc_decoder *d, const uint8_t *meta, int64_t meta_size, body_at body,
                  int64_t body_max, int64_t *body_length, fsh_batch **batch, fsh_error *err) {
  fsh_ipc_msg m;
  int64_t index = d->index++;
  *batch = NULL;
  int rc = meta ? fsh_ipc_msg_parse(meta, meta_size, &m, err)
                : fsh_error_set(err, EINVAL, "no message metadata");
  if (rc != 0) return fsh_error_prefix(err, rc, "message %lld: ", (long long)index);
  *body_length = m.body_length;
  int64_t have = body.buf ? body.buf->size - body.off : 0;
  if (body_max >= 0 && have > body_max) have = body_max;
  if (m.type != FSH_IPC_SCHEMA && !d->schema)
    rc = fsh_error_set(err, EINVAL, "%s before the schema", type_name(m.type));
  else if (m.body_length > 0 && (!body.buf || have < m.body_length))
    rc = fsh_error_set(err, EINVAL, "body is %lld bytes, the header says %lld", (long long)have,
                       (long long)m.body_length);
  else if (m.type == FSH_IPC_SCHEMA)
    rc = decode_schema(d, &m, err);
  else if (m.type == FSH_IPC_DICTIONARY_BATCH)
    rc = decode_dictionary(d, &m, body, err);
  else
    rc = decode_record_batch(d, &m, body, batch, err);
  if (rc != 0)
    return fsh_error_prefix(err, rc, "message %lld (%s): ", (long long)index, type_name(m.type));
  return 0;
}

int fsh_ipc_decode_message(fsh_ipc_decoder *d, fsh_buffer *metadata, fsh_buffer *body,
                           fsh_batch **batch, fsh_error *err) {
  int64_t body_length;
  return decode(d, metadata ? metadata->data : NULL, metadata ? metadata->size : 0,
                (body_at){body, 0}, -1, &body_length, batch, err);
}

int fsh_ipc_decode_framed(fsh_ipc_decoder *d, fsh_buffer *buf, int64_t off, int64_t avail,
                          int64_t *framed, fsh_batch **batch, fsh_error *err) {
  *batch = NULL;
  *framed = 0;
  if (!buf || off < 0 || avail < 0 || off > buf->size - avail)
    return fsh_error_set(err, EINVAL, "message %lld: [%lld, +%lld) is not within the buffer",
                         (long long)d->index, (long long)off, (long long)avail);
  const uint8_t *p = buf->data + off;
  int64_t len = avail >= 8 ? (int64_t)(uint32_t)fsh_fb_load_i32(p + 4) : -1;
  if (len <= 0 || (uint32_t)fsh_fb_load_i32(p) != FSH_IPC_CONTINUATION || len > avail - 8)
    return fsh_error_set(err, EINVAL, "message %lld: bad framing (%lld bytes, metadata length "
                         "%lld)", (long long)d->index, (long long)avail, (long long)len);
  int64_t body_length = 0;
  FSH_RETURN_NOT_OK(decode(d, p + 8, len, (body_at){buf, off + 8 + len}, avail - 8 - len,
                           &body_length, batch, err));
  *framed = 8 + len + body_length;
  return 0;
}

int fsh_ipc_parse_prefix(const uint8_t *data, int64_t n, int64_t *meta_off, int64_t *meta_len,
                         fsh_error *err) {
  if (n < 4) return fsh_error_set(err, EINVAL, "truncated message length prefix");
  uint32_t first = (uint32_t)fsh_fb_load_i32(data);
  int64_t off = 4;
  if (first == FSH_IPC_CONTINUATION) {
    if (n < 8) return fsh_error_set(err, EINVAL, "truncated message length prefix");
    first = (uint32_t)fsh_fb_load_i32(data + 4);
    off = 8;
  }
  if ((int32_t)first < 0)
    return fsh_error_set(err, EINVAL, "negative metadata length %d", (int32_t)first);
  *meta_off = off;
  *meta_len = (int64_t)first;
  return 0;
}

int fsh_ipc_decode_schema_message(fsh_buffer *metadata, fsh_schema **out, fsh_error *err) {
  fsh_ipc_msg m;
  if (!metadata) return fsh_error_set(err, EINVAL, "no schema metadata");
  const uint8_t *p = metadata->data;
  int64_t n = metadata->size;
  if (n >= 8 && (uint32_t)fsh_fb_load_i32(p) == FSH_IPC_CONTINUATION) {
    int64_t off, len;
    FSH_RETURN_NOT_OK(fsh_ipc_parse_prefix(p, n, &off, &len, err));
    if (len > n - off)
      return fsh_error_set(err, EINVAL, "schema message of %lld bytes in %lld", (long long)len,
                           (long long)(n - off));
    p += off;
    n = len;
  }
  FSH_RETURN_NOT_OK(fsh_ipc_msg_parse(p, n, &m, err));
  if (m.type != FSH_IPC_SCHEMA)
    return fsh_error_set(err, EINVAL, "expected a schema message, got a %s", type_name(m.type));
  return fsh_ipc_schema_decode(&m.header, out, err);
}
