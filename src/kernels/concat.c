/* concat.c -- concatenation of arrays (and batches) of one type into one,
 * for every type: each input is a part (array, first slot, length) and
 * nested types recurse on the parts of their children. Dictionary columns
 * keep a shared dictionary, or get the concatenated dictionaries with
 * rebased indices. */
#include "kernels/kernels_internal.h"

typedef struct part {
  fsh_array *a;
  int64_t off; /* absolute first slot (a->offset included) */
  int64_t len;
} part;

static int concat_parts(const fsh_field *f, const part *p, int64_t np, int64_t total,
                        fsh_array **out, fsh_error *err);

static void copy_bits(uint8_t *dst, int64_t at, const uint8_t *src, int64_t off, int64_t n) {
  if ((at & 7) == 0 && (off & 7) == 0) { /* byte-aligned: whole bytes, then the tail */
    memcpy(dst + at / 8, src + off / 8, (size_t)(n / 8));
    for (int64_t i = n / 8 * 8; i < n; i++) fsh_bit_set(dst, at + i, fsh_bit_get(src, off + i));
    return;
  }
  for (int64_t i = 0; i < n; i++) fsh_bit_set(dst, at + i, fsh_bit_get(src, off + i));
}

static int concat_validity(const part *p, int64_t np, int64_t total, fsh_array *r,
                           fsh_error *err) {
  bool any = false;
  for (int64_t i = 0; i < np; i++) any |= p[i].a->buffers[0] && p[i].a->null_count != 0;
  r->null_count = 0;
  if (!any || total == 0) return 0;
  fsh_buffer *v = fsh_buffer_new(fsh_bytes_for_bits(total), true);
  if (!v) return kern_oom(err);
  int64_t at = 0;
  for (int64_t i = 0; i < np; i++) {
    if (p[i].a->buffers[0])
      copy_bits(v->data, at, p[i].a->buffers[0]->data, p[i].off, p[i].len);
    else
      for (int64_t k = 0; k < p[i].len; k++) fsh_bit_set(v->data, at + k, true);
    at += p[i].len;
  }
  r->null_count = total - fsh_bitmap_count(v->data, 0, total);
  if (r->null_count == 0)
    fsh_buffer_unref(v);
  else
    r->buffers[0] = v;
  return 0;
}

/* Fixed-width values (bits per value, 1 = bool) of buffer `buf`. */
static int concat_values(const part *p, int64_t np, int64_t bits, int buf, int64_t total,
                         fsh_array *r, fsh_error *err) {
  fsh_buffer *v = fsh_buffer_new(fsh_bytes_for_bits(total * bits), true);
  if (!v) return kern_oom(err);
  int64_t at = 0, w = bits / 8;
  for (int64_t i = 0; i < np; i++) {
    const uint8_t *src = kern_buf(p[i].a, buf);
    if (bits == 1)
      copy_bits(v->data, at, src, p[i].off, p[i].len);
    else if (p[i].len > 0 && w > 0)
      memcpy(v->data + at * w, src + p[i].off * w, (size_t)(p[i].len * w));
    at += p[i].len;
  }
  r->buffers[buf] = v;
  return 0;
}

/* Offsets rebased to the concatenation; child (or data) ranges of the parts
 * into cp[np] (cp[i].off relative to the child's offset: the caller adds
 * it). */
static int concat_offsets(const part *p, int64_t np, int w, int64_t total, fsh_array *r,
                          part *cp, int64_t *child_total, fsh_error *err) {
  fsh_buffer *o = fsh_buffer_new((total + 1) * w, true);
  if (!o) return kern_oom(err);
  r->buffers[1] = o;
  int64_t at = 0, pos = 0;
  for (int64_t i = 0; i < np; i++) {
    const uint8_t *src = kern_buf(p[i].a, 1);
    int64_t first = p[i].len > 0 ? kern_read_offset(src, p[i].off, w) : 0;
    for (int64_t k = 0; k < p[i].len; k++) {
      int64_t v = pos + kern_read_offset(src, p[i].off + k + 1, w) - first;
      if (w == 4 && v > INT32_MAX)
        return fsh_error_set(err, EOVERFLOW, "the result does not fit 32-bit offsets");
      if (w == 4) {
        int32_t v32 = (int32_t)v;
        memcpy(o->data + 4 * (at + k + 1), &v32, 4);
      } else {
        memcpy(o->data + 8 * (at + k + 1), &v, 8);
      }
    }
    int64_t last = p[i].len > 0 ? kern_read_offset(src, p[i].off + p[i].len, w) : 0;
    cp[i] = (part){p[i].a, first, last - first};
    pos += last - first;
    at += p[i].len;
  }
  *child_total = pos;
  return 0;
}

static int concat_binary(const fsh_field *f, const part *p, int64_t np, int64_t total,
                         fsh_array *r, part *cp, fsh_error *err) {
  int64_t bytes;
  FSH_RETURN_NOT_OK(concat_offsets(p, np, kern_offset_width(f->type), total, r, cp, &bytes, err));
  fsh_buffer *d = fsh_buffer_new(bytes, false);
  if (!d) return kern_oom(err);
  r->buffers[2] = d;
  int64_t at = 0;
  for (int64_t i = 0; i < np; i++) {
    if (cp[i].len > 0) memcpy(d->data + at, kern_buf(cp[i].a, 2) + cp[i].off, (size_t)cp[i].len);
    at += cp[i].len;
  }
  return 0;
}

/* Child k of every part, over the slots `cp` gives (relative to the
 * parts' child offsets, added here). */
static int concat_child(const fsh_field *f, int64_t k, part *cp, int64_t np, fsh_array *r,
                        fsh_error *err) {
  int64_t total = 0;
  for (int64_t i = 0; i < np; i++) {
    fsh_array *child = cp[i].a->children[k];
    cp[i] = (part){child, child->offset + cp[i].off, cp[i].len};
    total += cp[i].len;
  }
  return concat_parts(&f->children[k], cp, np, total, &r->children[k], err);
}

/* Dense union: type ids, whole children, offsets shifted by the lengths of
 * the same child in the parts before. */
static int concat_dense_union(const fsh_field *f, const part *p, int64_t np, int64_t total,
                              fsh_array *r, part *cp, fsh_error *err) {
  FSH_RETURN_NOT_OK(concat_values(p, np, 8, 0, total, r, err));
  if (!(r->buffers[1] = fsh_buffer_new(4 * total, true))) return kern_oom(err);
  int8_t map[128];
  fsh_kern_union_map(f, map);
  int64_t at = 0;
  int64_t base[128] = {0};
  for (int64_t i = 0; i < np; i++) {
    const int8_t *ids = (const int8_t *)kern_buf(p[i].a, 0);
    const uint8_t *offs = kern_buf(p[i].a, 1);
    for (int64_t k = 0; k < p[i].len; k++) {
      int64_t o = kern_read_i32(offs, p[i].off + k) + base[map[ids[p[i].off + k]]];
      if (o > INT32_MAX) return fsh_error_set(err, EOVERFLOW, "dense union offsets overflow");
      int32_t o32 = (int32_t)o;
      memcpy(r->buffers[1]->data + 4 * (at + k), &o32, 4);
    }
    for (int64_t c = 0; c < f->n_children; c++) base[c] += p[i].a->children[c]->length;
    at += p[i].len;
  }
  for (int64_t c = 0; c < f->n_children; c++) {
    for (int64_t i = 0; i < np; i++) cp[i] = (part){p[i].a, 0, p[i].a->children[c]->length};
    FSH_RETURN_NOT_OK(concat_child(f, c, cp, np, r, err));
  }
  return 0;
}

static int64_t index_max(fsh_type_id t) {
  switch (t) {
    case FSH_TYPE_INT8: return INT8_MAX;
    case FSH_TYPE_UINT8: return UINT8_MAX;
    case FSH_TYPE_INT16: return INT16_MAX;
    case FSH_TYPE_UINT16: return UINT16_MAX;
    case FSH_TYPE_INT32: return INT32_MAX;
    case FSH_TYPE_UINT32: return UINT32_MAX;
    default: return INT64_MAX;
  }
}

/* Dictionary-encoded: one shared (or equal) dictionary is kept; otherwise
 * the dictionaries are concatenated and each part's indices shifted. */
static int concat_dictionary(const fsh_field *f, const part *p, int64_t np, int64_t total,
                             fsh_array *r, part *cp, fsh_error *err) {
  const fsh_field *vf = &f->dictionary->value;
  FSH_RETURN_NOT_OK(concat_values(p, np, fsh_type_bit_width(f), 1, total, r, err));
  bool same = true;
  for (int64_t i = 1; i < np && same; i++)
    same = p[i].a->dictionary == p[0].a->dictionary ||
           fsh_array_equals(vf, p[i].a->dictionary, p[0].a->dictionary, NULL);
  if (same) {
    r->dictionary = fsh_array_ref(p[0].a->dictionary);
    return 0;
  }
  int64_t dict_total = 0, at = 0, w = fsh_type_bit_width(f) / 8;
  for (int64_t i = 0; i < np; i++) {
    fsh_array *d = p[i].a->dictionary;
    for (int64_t k = 0; k < p[i].len; k++, at++) {
      uint8_t *slot = r->buffers[1]->data + w * at;
      int64_t v = 0;
      if (kern_slot_valid(f, p[i].a, p[i].off + k)) v = fsh_kern_read_int(f->type, slot, 0) + dict_total;
      if (v > index_max(f->type))
        return fsh_error_set(err, EOVERFLOW,
                             "the concatenated dictionaries do not fit index type %s",
                             fsh_type_name(f->type));
      memcpy(slot, &v, (size_t)w); /* little-endian: the low bytes */
    }
    cp[i] = (part){d, d->offset, d->length};
    dict_total += d->length;
  }
  return concat_parts(vf, cp, np, dict_total, &r->dictionary, err);
}

static int concat_into(const fsh_field *f, const part *p, int64_t np, int64_t total, fsh_array *r,
                       part *cp, fsh_error *err) {
  if (f->type == FSH_TYPE_NA) {
    r->null_count = total;
    return 0;
  }
  if (!fsh_type_is_union(f->type) || f->dictionary)
    FSH_RETURN_NOT_OK(concat_validity(p, np, total, r, err));
  if (f->dictionary) return concat_dictionary(f, p, np, total, r, cp, err);
  int64_t child_total;
  switch (f->type) {
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      return concat_binary(f, p, np, total, r, cp, err);
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      FSH_RETURN_NOT_OK(
          concat_offsets(p, np, kern_offset_width(f->type), total, r, cp, &child_total, err));
      return concat_child(f, 0, cp, np, r, err);
    case FSH_TYPE_FIXED_SIZE_LIST:
      for (int64_t i = 0; i < np; i++)
        cp[i] = (part){p[i].a, p[i].off * f->list_size, p[i].len * f->list_size};
      return concat_child(f, 0, cp, np, r, err);
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_STRUCT: /* children aligned with the slots */
      if (f->type == FSH_TYPE_SPARSE_UNION)
        FSH_RETURN_NOT_OK(concat_values(p, np, 8, 0, total, r, err));
      for (int64_t k = 0; k < f->n_children; k++) {
        for (int64_t i = 0; i < np; i++) cp[i] = p[i];
        FSH_RETURN_NOT_OK(concat_child(f, k, cp, np, r, err));
      }
      return 0;
    case FSH_TYPE_DENSE_UNION: return concat_dense_union(f, p, np, total, r, cp, err);
    default: return concat_values(p, np, fsh_type_bit_width(f), 1, total, r, err);
  }
}

static int concat_parts(const fsh_field *f, const part *p, int64_t np, int64_t total,
                        fsh_array **out, fsh_error *err) {
  *out = NULL;
  bool nested = !f->dictionary && (f->type == FSH_TYPE_LIST || f->type == FSH_TYPE_LARGE_LIST ||
                                   f->type == FSH_TYPE_FIXED_SIZE_LIST || f->type == FSH_TYPE_MAP ||
                                   f->type == FSH_TYPE_STRUCT || fsh_type_is_union(f->type));
  fsh_array *r = fsh_array_new(fsh_type_n_buffers(f->type), nested ? f->n_children : 0);
  part *cp = fsh_malloc(sizeof *cp * (size_t)np);
  if (!r || !cp) {
    fsh_array_unref(r);
    fsh_free(cp);
    return kern_oom(err);
  }
  r->length = total;
  int rc = concat_into(f, p, np, total, r, cp, err);
  fsh_free(cp);
  if (rc != 0) {
    fsh_array_unref(r);
    return rc;
  }
  *out = r;
  return 0;
}

int fsh_array_concat(const fsh_field *f, fsh_array *const *arrays, int64_t n, fsh_array **out,
                     fsh_error *err) {
  *out = NULL;
  if (!f || !arrays || n < 1)
    return fsh_error_set(err, EINVAL, "concat: NULL field or arrays, or no array");
  part *p = fsh_malloc(sizeof *p * (size_t)n);
  if (!p) return fsh_error_set(err, ENOMEM, "concat of column '%s': out of memory", f->name);
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    p[i] = (part){arrays[i], arrays[i]->offset, arrays[i]->length};
    total += arrays[i]->length;
  }
  int rc = concat_parts(f, p, n, total, out, err);
  fsh_free(p);
  if (rc != 0) fsh_error_prefix(err, rc, "concat of column '%s': ", f->name);
  return rc;
}

int fsh_concat(fsh_batch *const *batches, int64_t n, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (!batches || n < 1) return fsh_error_set(err, EINVAL, "concat: no batch");
  fsh_schema *s = batches[0]->schema;
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    fsh_error diff;
    if (batches[i]->schema != s && !fsh_schema_equals(s, batches[i]->schema, false, &diff))
      return fsh_error_set(err, EINVAL, "concat: batch %lld has another schema: %s", (long long)i,
                           diff.message);
    total += batches[i]->length;
  }
  fsh_batch *r = fsh_batch_new(s, total);
  fsh_array **cols = fsh_malloc(sizeof *cols * (size_t)n);
  int rc = r && cols ? 0 : fsh_error_set(err, ENOMEM, "concat: out of memory");
  for (int64_t c = 0; c < s->n_fields && rc == 0; c++) {
    for (int64_t i = 0; i < n; i++) cols[i] = batches[i]->columns[c];
    rc = fsh_array_concat(&s->fields[c], cols, n, &r->columns[c], err);
  }
  fsh_free(cols);
  if (rc != 0) {
    fsh_batch_unref(r);
    return fsh_error_prefix(err, rc, "concat: ");
  }
  *out = r;
  return 0;
}
