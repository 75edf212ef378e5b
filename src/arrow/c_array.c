/* c_array.c -- the Arrow C Data Interface for data: fsh_array / fsh_batch
 * <-> struct ArrowArray, both ways without copying buffers.
 *
 * Export: an ArrowArray node points at our buffers' bytes and keeps the
 * fsh_array alive through a reference in its private data.
 * Import: the foreign ArrowArray is moved into a refcounted holder; every
 * imported buffer wraps foreign memory and holds a reference on it, and the
 * producer's release runs when the last one goes. */
#include <flightshuffle/arrow.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- export ------------------------------------------------------------ */

typedef struct array_priv {
  fsh_array *array; /* reference; NULL for a record batch's top node */
  const void *buffers[FSH_MAX_BUFFERS];
  struct ArrowArray **child_ptrs;
  struct ArrowArray *children;
  struct ArrowArray *dictionary;
} array_priv;

static void array_release(struct ArrowArray *a) {
  if (!a || !a->release) return;
  array_priv *p = a->private_data;
  for (int64_t i = 0; i < a->n_children; i++) {
    struct ArrowArray *c = a->children[i];
    if (c->release) c->release(c);
  }
  if (a->dictionary && a->dictionary->release) a->dictionary->release(a->dictionary);
  if (p) {
    fsh_array_unref(p->array);
    fsh_free(p->child_ptrs);
    fsh_free(p->children);
    fsh_free(p->dictionary);
    fsh_free(p);
  }
  a->release = NULL;
  a->private_data = NULL;
}

static int export_array(fsh_array *a, struct ArrowArray *out, int depth, fsh_error *err);

/* Starts node `out` with private data holding n_children child slots. */
static int export_begin(struct ArrowArray *out, int64_t n_children, array_priv **pp,
                        fsh_error *err) {
  memset(out, 0, sizeof *out);
  array_priv *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory exporting an array");
  out->release = array_release;
  out->private_data = p;
  out->buffers = p->buffers;
  if (n_children > 0) {
    p->child_ptrs = fsh_calloc((size_t)n_children, sizeof *p->child_ptrs);
    p->children = fsh_calloc((size_t)n_children, sizeof *p->children);
    if (!p->child_ptrs || !p->children) {
      array_release(out);
      return fsh_error_set(err, ENOMEM, "out of memory exporting an array");
    }
    for (int64_t i = 0; i < n_children; i++) p->child_ptrs[i] = &p->children[i];
    out->children = p->child_ptrs;
  }
  *pp = p;
  return 0;
}

/* Exports children[0..n) into the node's slots; on error releases `out`. */
static int export_children(struct ArrowArray *out, array_priv *p, fsh_array **children, int64_t n,
                           int depth, fsh_error *err) {
  for (int64_t i = 0; i < n; i++) {
    int rc = children[i] ? export_array(children[i], &p->children[i], depth + 1, err)
                         : fsh_error_set(err, EINVAL, "child %lld is NULL", (long long)i);
    if (rc) {
      array_release(out);
      return rc;
    }
    out->n_children = i + 1;
  }
  return 0;
}

static int export_array(fsh_array *a, struct ArrowArray *out, int depth, fsh_error *err) {
  if (depth > 64) return fsh_error_set(err, EINVAL, "array nesting deeper than 64 levels");
  if (a->n_buffers < 0 || a->n_buffers > FSH_MAX_BUFFERS)
    return fsh_error_set(err, EINVAL, "array has %d buffers", (int)a->n_buffers);
  array_priv *p = NULL;
  int rc = export_begin(out, a->n_children, &p, err);
  if (rc) return rc;
  p->array = fsh_array_ref(a);
  out->length = a->length;
  out->null_count = a->null_count;
  out->offset = a->offset;
  out->n_buffers = a->n_buffers;
  for (int i = 0; i < a->n_buffers; i++) p->buffers[i] = a->buffers[i] ? a->buffers[i]->data : NULL;
  if ((rc = export_children(out, p, a->children, a->n_children, depth, err)) != 0) return rc;
  if (a->dictionary) {
    if (!(p->dictionary = fsh_calloc(1, sizeof *p->dictionary))) {
      array_release(out);
      return fsh_error_set(err, ENOMEM, "out of memory exporting an array");
    }
    if ((rc = export_array(a->dictionary, p->dictionary, depth + 1, err)) != 0) {
      array_release(out);
      return fsh_error_prefix(err, rc, "dictionary: ");
    }
    out->dictionary = p->dictionary;
  }
  return 0;
}

int fsh_array_export(fsh_array *a, struct ArrowArray *out, fsh_error *err) {
  int rc = export_array(a, out, 0, err);
  return rc ? fsh_error_prefix(err, rc, "exporting an array: ") : 0;
}

int fsh_batch_export(fsh_batch *b, struct ArrowArray *out, fsh_error *err) {
  array_priv *p = NULL;
  int rc = export_begin(out, b->n_columns, &p, err);
  if (rc) return rc;
  out->length = b->length;
  out->null_count = 0;
  out->offset = 0;
  out->n_buffers = 1; /* a struct's validity, absent */
  if ((rc = export_children(out, p, b->columns, b->n_columns, 0, err)) != 0)
    return fsh_error_prefix(err, rc, "exporting a record batch: ");
  return 0;
}

/* ---- import ------------------------------------------------------------ */

/* The moved foreign ArrowArray, alive while any imported buffer is. */
typedef struct import_holder {
  atomic_long refcount;
  struct ArrowArray array;
} import_holder;

static void holder_unref(void *ctx) {
  import_holder *h = ctx;
  if (atomic_fetch_sub_explicit(&h->refcount, 1, memory_order_acq_rel) != 1) return;
  if (h->array.release) h->array.release(&h->array);
  fsh_free(h);
}

typedef struct import_ctx {
  import_holder *holder;
  fsh_error *err;
} import_ctx;

/* Wraps foreign bytes [ptr, ptr+size) as buffer i of `a`. A NULL pointer is
 * accepted only for an empty buffer (an empty owned buffer stands in, so
 * that our arrays never hold NULL for a buffer the type needs) or for the
 * validity bitmap (left NULL). */
static int wrap_buffer(import_ctx *ic, fsh_array *a, int i, const void *ptr, int64_t size,
                       bool is_validity, const char *path) {
  if (!ptr) {
    if (is_validity) return 0;
    if (size > 0)
      return fsh_error_set(ic->err, EINVAL, "%s: buffer %d is NULL but needs %lld bytes", path, i,
                           (long long)size);
    if (!(a->buffers[i] = fsh_buffer_new(0, true)))
      return fsh_error_set(ic->err, ENOMEM, "out of memory importing an array");
    return 0;
  }
  fsh_buffer *b = fsh_buffer_wrap(ptr, size, holder_unref, ic->holder);
  if (!b) return fsh_error_set(ic->err, ENOMEM, "out of memory importing an array");
  atomic_fetch_add_explicit(&ic->holder->refcount, 1, memory_order_relaxed);
  a->buffers[i] = b;
  return 0;
}

/* Offsets buffer i of `a` ((n + 1) entries of `width` bytes). A NULL
 * pointer is accepted when n == 0: one zero offset is made up. */
static int wrap_offsets(import_ctx *ic, fsh_array *a, int i, const void *ptr, int64_t n, int width,
                        const char *path) {
  if (!ptr && n == 0) {
    if (!(a->buffers[i] = fsh_buffer_new(width, true)))
      return fsh_error_set(ic->err, ENOMEM, "out of memory importing an array");
    return 0;
  }
  return wrap_buffer(ic, a, i, ptr, (n + 1) * width, false, path);
}

static int64_t last_offset(const fsh_array *a, int i, int64_t n, int width) {
  const uint8_t *d = a->buffers[i]->data;
  if (width == 4) {
    int32_t v;
    memcpy(&v, d + n * 4, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, d + n * 8, 8);
  return v;
}

static bool has_validity(fsh_type_id t) {
  return t != FSH_TYPE_NA && t != FSH_TYPE_SPARSE_UNION && t != FSH_TYPE_DENSE_UNION;
}

static int import_array(import_ctx *ic, const struct ArrowArray *c, const fsh_field *f,
                        const char *parent_path, int depth, fsh_array **out);

static int import_child(import_ctx *ic, const struct ArrowArray *c, fsh_array *a, int64_t i,
                        const fsh_field *cf, const char *path, int depth) {
  if (!c->children[i])
    return fsh_error_set(ic->err, EINVAL, "%s: child %lld is NULL", path, (long long)i);
  return import_array(ic, c->children[i], cf, path, depth + 1, &a->children[i]);
}

/* Fills a's buffers from c per the layout of f's type. */
static int import_buffers(import_ctx *ic, const struct ArrowArray *c, const fsh_field *f,
                          fsh_array *a, const char *path) {
  int64_t n = c->offset + c->length;
  int rc;
  if (n < 0) return fsh_error_set(ic->err, EINVAL, "%s: offset + length overflows", path);
  if (has_validity(f->type)) {
    const void *v = c->buffers[0];
    if (!v && c->null_count > 0)
      return fsh_error_set(ic->err, EINVAL, "%s: null_count %lld but no validity buffer", path,
                           (long long)c->null_count);
    if (!v) a->null_count = 0;
    if ((rc = wrap_buffer(ic, a, 0, v, fsh_bytes_for_bits(n), true, path)) != 0) return rc;
  }
  switch (f->type) {
    case FSH_TYPE_NA:
    case FSH_TYPE_STRUCT:
    case FSH_TYPE_FIXED_SIZE_LIST:
      return 0;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: {
      int width = (f->type == FSH_TYPE_BINARY || f->type == FSH_TYPE_STRING) ? 4 : 8;
      if ((rc = wrap_offsets(ic, a, 1, c->buffers[1], n, width, path)) != 0) return rc;
      int64_t end = last_offset(a, 1, n, width);
      if (end < 0)
        return fsh_error_set(ic->err, EINVAL, "%s: negative last offset %lld", path,
                             (long long)end);
      return wrap_buffer(ic, a, 2, c->buffers[2], end, false, path);
    }
    case FSH_TYPE_LIST: case FSH_TYPE_MAP:
      return wrap_offsets(ic, a, 1, c->buffers[1], n, 4, path);
    case FSH_TYPE_LARGE_LIST:
      return wrap_offsets(ic, a, 1, c->buffers[1], n, 8, path);
    case FSH_TYPE_SPARSE_UNION:
      return wrap_buffer(ic, a, 0, c->buffers[0], n, false, path);
    case FSH_TYPE_DENSE_UNION:
      if ((rc = wrap_buffer(ic, a, 0, c->buffers[0], n, false, path)) != 0) return rc;
      return wrap_buffer(ic, a, 1, c->buffers[1], n * 4, false, path);
    case FSH_TYPE_BOOL:
      return wrap_buffer(ic, a, 1, c->buffers[1], fsh_bytes_for_bits(n), false, path);
    default: {
      int64_t bits = fsh_type_bit_width(f);
      if (bits <= 0 || bits % 8)
        return fsh_error_set(ic->err, EINVAL, "%s: type %s has no fixed width", path,
                             fsh_type_name(f->type));
      if (n > INT64_MAX / (bits / 8))
        return fsh_error_set(ic->err, EINVAL, "%s: buffer size overflows", path);
      return wrap_buffer(ic, a, 1, c->buffers[1], n * (bits / 8), false, path);
    }
  }
}

static int import_array(import_ctx *ic, const struct ArrowArray *c, const fsh_field *f,
                        const char *parent_path, int depth, fsh_array **out) {
  char path[512];
  if (parent_path)
    snprintf(path, sizeof path, "%s.%s", parent_path, f->name);
  else
    snprintf(path, sizeof path, "column '%s'", f->name);
  fsh_error *err = ic->err;
  if (depth > 64) return fsh_error_set(err, EINVAL, "%s: nesting deeper than 64 levels", path);
  if (!c->release) return fsh_error_set(err, EINVAL, "%s: array is released", path);
  if (c->length < 0 || c->offset < 0 || c->null_count < -1)
    return fsh_error_set(err, EINVAL, "%s: bad length %lld / offset %lld / null_count %lld", path,
                         (long long)c->length, (long long)c->offset, (long long)c->null_count);
  int want_buffers = fsh_type_n_buffers(f->type);
  if (c->n_buffers != want_buffers)
    return fsh_error_set(err, EINVAL, "%s: type %s needs %d buffers, the array has %lld", path,
                         fsh_type_name(f->type), want_buffers, (long long)c->n_buffers);
  if (c->n_buffers > 0 && !c->buffers)
    return fsh_error_set(err, EINVAL, "%s: NULL buffers array", path);
  int64_t want_children = f->dictionary ? 0 : f->n_children;
  if (c->n_children != want_children)
    return fsh_error_set(err, EINVAL, "%s: type %s has %lld children, the array has %lld", path,
                         fsh_type_name(f->type), (long long)want_children,
                         (long long)c->n_children);
  if (c->n_children > 0 && !c->children)
    return fsh_error_set(err, EINVAL, "%s: NULL children array", path);
  if (!f->dictionary != !c->dictionary)
    return fsh_error_set(err, EINVAL, "%s: %s", path,
                         f->dictionary ? "dictionary-encoded field but the array has no dictionary"
                                       : "the array has a dictionary but the field is not "
                                         "dictionary-encoded");
  fsh_array *a = fsh_array_new((int32_t)c->n_buffers, c->n_children);
  if (!a) return fsh_error_set(err, ENOMEM, "out of memory importing an array");
  a->length = c->length;
  a->offset = c->offset;
  a->null_count = has_validity(f->type) ? c->null_count : 0;
  if (f->type == FSH_TYPE_NA) a->null_count = c->length;
  int rc = import_buffers(ic, c, f, a, path);
  for (int64_t i = 0; rc == 0 && i < c->n_children; i++)
    rc = import_child(ic, c, a, i, &f->children[i], path, depth);
  if (rc == 0 && f->dictionary) {
    fsh_field value = f->dictionary->value; /* shallow: only the name differs */
    value.name = "<dictionary>";
    rc = import_array(ic, c->dictionary, &value, path, depth + 1, &a->dictionary);
  }
  if (rc) {
    fsh_array_unref(a);
    return rc;
  }
  *out = a;
  return 0;
}

/* Moves *in into a new holder (one reference for the caller). On ENOMEM
 * the input is released. */
static int holder_new(struct ArrowArray *in, import_holder **out, fsh_error *err) {
  import_holder *h = fsh_malloc(sizeof *h);
  if (!h) {
    in->release(in);
    return fsh_error_set(err, ENOMEM, "out of memory importing an array");
  }
  atomic_init(&h->refcount, 1);
  h->array = *in;
  in->release = NULL;
  *out = h;
  return 0;
}

int fsh_array_import(struct ArrowArray *in, const fsh_field *f, fsh_array **out, fsh_error *err) {
  if (!in || !in->release) return fsh_error_set(err, EINVAL, "importing a released ArrowArray");
  import_holder *h = NULL;
  FSH_RETURN_NOT_OK(holder_new(in, &h, err));
  import_ctx ic = {h, err};
  fsh_array *a = NULL;
  int rc = import_array(&ic, &h->array, f, NULL, 0, &a);
  holder_unref(h);
  if (rc) return fsh_error_prefix(err, rc, "importing an array: ");
  *out = a;
  return 0;
}

int fsh_batch_import(struct ArrowArray *in, fsh_schema *schema, fsh_batch **out, fsh_error *err) {
  if (!in || !in->release)
    return fsh_error_set(err, EINVAL, "importing a released ArrowArray as a record batch");
  import_holder *h = NULL;
  FSH_RETURN_NOT_OK(holder_new(in, &h, err));
  const struct ArrowArray *c = &h->array;
  import_ctx ic = {h, err};
  fsh_batch *b = NULL;
  int rc = 0;
  if (c->n_children != schema->n_fields) {
    rc = fsh_error_set(err, EINVAL, "the array has %lld children but the schema %lld fields",
                       (long long)c->n_children, (long long)schema->n_fields);
  } else if (c->n_buffers != 1 || c->length < 0 || c->offset < 0) {
    rc = fsh_error_set(err, EINVAL,
                       "a record batch must be a struct array (1 buffer, got %lld; length %lld, "
                       "offset %lld)",
                       (long long)c->n_buffers, (long long)c->length, (long long)c->offset);
  } else if (c->null_count != 0 && c->buffers && c->buffers[0]) {
    rc = fsh_error_set(err, EINVAL, "a record batch's struct array has top-level nulls");
  } else if (c->n_children > 0 && !c->children) {
    rc = fsh_error_set(err, EINVAL, "NULL children array");
  } else if (!(b = fsh_batch_new(schema, c->length))) {
    rc = fsh_error_set(err, ENOMEM, "out of memory importing a record batch");
  }
  for (int64_t i = 0; rc == 0 && i < c->n_children; i++) {
    fsh_array *col = NULL;
    if (!c->children[i]) {
      rc = fsh_error_set(err, EINVAL, "column %lld is NULL", (long long)i);
      break;
    }
    if ((rc = import_array(&ic, c->children[i], &schema->fields[i], NULL, 1, &col)) != 0) break;
    if (c->offset != 0 || col->length != c->length) {
      /* the struct's offset and length apply to every column */
      fsh_array *s = NULL;
      if (c->offset > col->length || col->length - c->offset < c->length) {
        rc = fsh_error_set(err, EINVAL,
                           "column '%s' has %lld values, fewer than the batch's offset %lld + "
                           "length %lld",
                           schema->fields[i].name, (long long)col->length, (long long)c->offset,
                           (long long)c->length);
      } else if (!(s = fsh_array_slice(col, c->offset, c->length))) {
        rc = fsh_error_set(err, ENOMEM, "out of memory importing a record batch");
      }
      fsh_array_unref(col);
      col = s;
    }
    b->columns[i] = col;
  }
  holder_unref(h);
  if (rc) {
    fsh_batch_unref(b);
    return fsh_error_prefix(err, rc, "importing a record batch: ");
  }
  *out = b;
  return 0;
}
