/* c_schema.c -- the Arrow C Data Interface for types: fsh_field <->
 * struct ArrowSchema (format strings, the binary metadata encoding, flags,
 * children and dictionaries). */
#include <flightshuffle/arrow.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- export ------------------------------------------------------------ */

/* Everything an exported ArrowSchema node points at. One per node, so that
 * a consumer may move children out and release the parent. */
typedef struct schema_priv {
  char *format;
  char *name;
  char *metadata;
  struct ArrowSchema **child_ptrs;
  struct ArrowSchema *children; /* n_children nodes */
  struct ArrowSchema *dictionary;
} schema_priv;

static void schema_release(struct ArrowSchema *s) {
  if (!s || !s->release) return;
  schema_priv *p = s->private_data;
  for (int64_t i = 0; i < s->n_children; i++) {
    struct ArrowSchema *c = s->children[i];
    if (c->release) c->release(c);
  }
  if (s->dictionary && s->dictionary->release) s->dictionary->release(s->dictionary);
  if (p) {
    fsh_free(p->format);
    fsh_free(p->name);
    fsh_free(p->metadata);
    fsh_free(p->child_ptrs);
    fsh_free(p->children);
    fsh_free(p->dictionary);
    fsh_free(p);
  }
  s->release = NULL;
  s->private_data = NULL;
}

static const char *unit_char = "smun"; /* indexed by fsh_time_unit */

/* The format string of f's own type (for a dictionary-encoded field: of its
 * index type), allocated with fsh_malloc. */
static int format_of(const fsh_field *f, char **out, fsh_error *err) {
  char small[64];
  const char *fixed = NULL;
  if ((unsigned)f->unit > FSH_NANO &&
      (f->type == FSH_TYPE_TIME32 || f->type == FSH_TYPE_TIME64 ||
       f->type == FSH_TYPE_TIMESTAMP || f->type == FSH_TYPE_DURATION))
    return fsh_error_set(err, EINVAL, "field '%s': invalid time unit %d", f->name, (int)f->unit);
  switch (f->type) {
    case FSH_TYPE_NA: fixed = "n"; break;
    case FSH_TYPE_BOOL: fixed = "b"; break;
    case FSH_TYPE_INT8: fixed = "c"; break;
    case FSH_TYPE_UINT8: fixed = "C"; break;
    case FSH_TYPE_INT16: fixed = "s"; break;
    case FSH_TYPE_UINT16: fixed = "S"; break;
    case FSH_TYPE_INT32: fixed = "i"; break;
    case FSH_TYPE_UINT32: fixed = "I"; break;
    case FSH_TYPE_INT64: fixed = "l"; break;
    case FSH_TYPE_UINT64: fixed = "L"; break;
    case FSH_TYPE_FLOAT16: fixed = "e"; break;
    case FSH_TYPE_FLOAT32: fixed = "f"; break;
    case FSH_TYPE_FLOAT64: fixed = "g"; break;
    case FSH_TYPE_DECIMAL128:
      snprintf(small, sizeof small, "d:%d,%d", (int)f->precision, (int)f->scale);
      fixed = small;
      break;
    case FSH_TYPE_DECIMAL256:
      snprintf(small, sizeof small, "d:%d,%d,256", (int)f->precision, (int)f->scale);
      fixed = small;
      break;
    case FSH_TYPE_DATE32: fixed = "tdD"; break;
    case FSH_TYPE_DATE64: fixed = "tdm"; break;
    case FSH_TYPE_TIME32:
    case FSH_TYPE_TIME64:
      snprintf(small, sizeof small, "tt%c", unit_char[f->unit]);
      fixed = small;
      break;
    case FSH_TYPE_DURATION:
      snprintf(small, sizeof small, "tD%c", unit_char[f->unit]);
      fixed = small;
      break;
    case FSH_TYPE_TIMESTAMP: {
      const char *tz = f->timezone ? f->timezone : "";
      size_t n = strlen(tz) + 5;
      char *s = fsh_malloc(n);
      if (!s) return fsh_error_set(err, ENOMEM, "out of memory exporting a format string");
      snprintf(s, n, "ts%c:%s", unit_char[f->unit], tz);
      *out = s;
      return 0;
    }
    case FSH_TYPE_INTERVAL_MONTHS: fixed = "tiM"; break;
    case FSH_TYPE_INTERVAL_DAY_TIME: fixed = "tiD"; break;
    case FSH_TYPE_INTERVAL_MONTH_DAY_NANO: fixed = "tin"; break;
    case FSH_TYPE_BINARY: fixed = "z"; break;
    case FSH_TYPE_STRING: fixed = "u"; break;
    case FSH_TYPE_LARGE_BINARY: fixed = "Z"; break;
    case FSH_TYPE_LARGE_STRING: fixed = "U"; break;
    case FSH_TYPE_FIXED_SIZE_BINARY:
      snprintf(small, sizeof small, "w:%d", (int)f->byte_width);
      fixed = small;
      break;
    case FSH_TYPE_LIST: fixed = "+l"; break;
    case FSH_TYPE_LARGE_LIST: fixed = "+L"; break;
    case FSH_TYPE_FIXED_SIZE_LIST:
      snprintf(small, sizeof small, "+w:%d", (int)f->list_size);
      fixed = small;
      break;
    case FSH_TYPE_STRUCT: fixed = "+s"; break;
    case FSH_TYPE_MAP: fixed = "+m"; break;
    case FSH_TYPE_SPARSE_UNION:
    case FSH_TYPE_DENSE_UNION: {
      if (f->n_children > 0 && !f->type_codes)
        return fsh_error_set(err, EINVAL, "union field '%s' has no type codes", f->name);
      size_t n = 5 + (size_t)f->n_children * 12;
      char *s = fsh_malloc(n);
      if (!s) return fsh_error_set(err, ENOMEM, "out of memory exporting a format string");
      size_t pos = (size_t)snprintf(s, n, "+u%c:", f->type == FSH_TYPE_SPARSE_UNION ? 's' : 'd');
      for (int64_t i = 0; i < f->n_children; i++)
        pos += (size_t)snprintf(s + pos, n - pos, i ? ",%d" : "%d", (int)f->type_codes[i]);
      *out = s;
      return 0;
    }
    default:
      return fsh_error_set(err, EINVAL, "field '%s': invalid type id %d", f->name, (int)f->type);
  }
  if (!(*out = fsh_strdup(fixed)))
    return fsh_error_set(err, ENOMEM, "out of memory exporting a format string");
  return 0;
}

/* Encodes metadata in the C Data Interface binary layout (native-endian
 * int32 counts and lengths); *out stays NULL when there is none. */
static int metadata_encode(const fsh_metadata *m, char **out, fsh_error *err) {
  *out = NULL;
  if (m->n == 0) return 0;
  size_t size = 4;
  for (int64_t i = 0; i < m->n; i++) {
    size_t klen = strlen(m->items[i].key);
    if (klen > INT32_MAX || m->items[i].value_len > INT32_MAX || m->items[i].value_len < 0)
      return fsh_error_set(err, EINVAL, "metadata entry %lld too long", (long long)i);
    size += 8 + klen + (size_t)m->items[i].value_len;
  }
  char *buf = fsh_malloc(size);
  if (!buf) return fsh_error_set(err, ENOMEM, "out of memory encoding metadata");
  char *p = buf;
  int32_t n = (int32_t)m->n;
  memcpy(p, &n, 4);
  p += 4;
  for (int64_t i = 0; i < m->n; i++) {
    int32_t klen = (int32_t)strlen(m->items[i].key), vlen = (int32_t)m->items[i].value_len;
    memcpy(p, &klen, 4);
    memcpy(p + 4, m->items[i].key, (size_t)klen);
    p += 4 + klen;
    memcpy(p, &vlen, 4);
    if (vlen) memcpy(p + 4, m->items[i].value, (size_t)vlen);
    p += 4 + vlen;
  }
  *out = buf;
  return 0;
}

static int export_node(const fsh_field *f, const char *name, const fsh_metadata *metadata,
                       struct ArrowSchema *out, fsh_error *err);

/* Fills out for field f (its type, or a record batch's struct when f is
 * NULL and `fields` are given). On error out is released (release NULL). */
static int export_common(schema_priv *p, struct ArrowSchema *out, int64_t n_children,
                         const fsh_field *children, fsh_error *err) {
  if (n_children > 0) {
    p->child_ptrs = fsh_calloc((size_t)n_children, sizeof *p->child_ptrs);
    p->children = fsh_calloc((size_t)n_children, sizeof *p->children);
    if (!p->child_ptrs || !p->children)
      return fsh_error_set(err, ENOMEM, "out of memory exporting a schema");
    for (int64_t i = 0; i < n_children; i++) p->child_ptrs[i] = &p->children[i];
  }
  out->children = p->child_ptrs;
  for (int64_t i = 0; i < n_children; i++) {
    int rc = export_node(&children[i], children[i].name, &children[i].metadata, &p->children[i],
                         err);
    if (rc) return rc;
    out->n_children = i + 1; /* release only what was built */
  }
  return 0;
}

static void node_begin(struct ArrowSchema *out, schema_priv *p) {
  memset(out, 0, sizeof *out);
  out->release = schema_release;
  out->private_data = p;
}

static int export_node(const fsh_field *f, const char *name, const fsh_metadata *metadata,
                       struct ArrowSchema *out, fsh_error *err) {
  schema_priv *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory exporting a schema");
  node_begin(out, p);
  int rc = format_of(f, &p->format, err);
  if (rc) goto fail;
  rc = ENOMEM;
  if (!(p->name = fsh_strdup(name ? name : ""))) goto fail_oom;
  if ((rc = metadata_encode(metadata, &p->metadata, err)) != 0) goto fail;
  out->format = p->format;
  out->name = p->name;
  out->metadata = p->metadata;
  out->flags = f->nullable ? ARROW_FLAG_NULLABLE : 0;
  if (f->type == FSH_TYPE_MAP && f->keys_sorted) out->flags |= ARROW_FLAG_MAP_KEYS_SORTED;
  if (f->dictionary) {
    if (!fsh_type_is_integer(f->type)) {
      rc = fsh_error_set(err, EINVAL, "field '%s': dictionary index type %s is not an integer",
                         f->name, fsh_type_name(f->type));
      goto fail;
    }
    if (f->dictionary->ordered) out->flags |= ARROW_FLAG_DICTIONARY_ORDERED;
    if (!(p->dictionary = fsh_calloc(1, sizeof *p->dictionary))) goto fail_oom;
    const fsh_field *v = &f->dictionary->value;
    if ((rc = export_node(v, "", &v->metadata, p->dictionary, err)) != 0) {
      fsh_free(p->dictionary);
      p->dictionary = NULL;
      goto fail;
    }
    out->dictionary = p->dictionary;
  }
  if ((rc = export_common(p, out, f->n_children, f->children, err)) != 0) goto fail;
  return 0;
fail_oom:
  rc = fsh_error_set(err, ENOMEM, "out of memory exporting a schema");
fail:
  schema_release(out);
  return rc;
}

int fsh_field_export(const fsh_field *f, struct ArrowSchema *out, fsh_error *err) {
  int rc = export_node(f, f->name, &f->metadata, out, err);
  if (rc) return fsh_error_prefix(err, rc, "exporting field '%s': ", f->name);
  return 0;
}

int fsh_schema_export(const fsh_schema *s, struct ArrowSchema *out, fsh_error *err) {
  schema_priv *p = fsh_calloc(1, sizeof *p);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory exporting a schema");
  node_begin(out, p);
  int rc = ENOMEM;
  if (!(p->format = fsh_strdup("+s")) || !(p->name = fsh_strdup(""))) {
    rc = fsh_error_set(err, ENOMEM, "out of memory exporting a schema");
    goto fail;
  }
  if ((rc = metadata_encode(&s->metadata, &p->metadata, err)) != 0) goto fail;
  out->format = p->format;
  out->name = p->name;
  out->metadata = p->metadata;
  if ((rc = export_common(p, out, s->n_fields, s->fields, err)) != 0) goto fail;
  return 0;
fail:
  schema_release(out);
  return fsh_error_prefix(err, rc, "exporting a schema: ");
}

/* ---- import ------------------------------------------------------------ */

/* Decodes the binary metadata layout into m, checking every length against
 * the bytes it may read (the layout carries no total size, so a corrupt
 * count can only be bounded by INT32_MAX sanity checks). */
static int metadata_decode(const char *in, fsh_metadata *m, const char *path, fsh_error *err) {
  if (!in) return 0;
  int32_t n;
  memcpy(&n, in, 4);
  if (n < 0) return fsh_error_set(err, EINVAL, "%s: negative metadata count %d", path, n);
  const char *p = in + 4;
  for (int32_t i = 0; i < n; i++) {
    int32_t klen, vlen;
    memcpy(&klen, p, 4);
    if (klen < 0)
      return fsh_error_set(err, EINVAL, "%s: metadata key %d has negative length", path, i);
    const char *key = p + 4;
    p = key + klen;
    memcpy(&vlen, p, 4);
    if (vlen < 0)
      return fsh_error_set(err, EINVAL, "%s: metadata value %d has negative length", path, i);
    const char *value = p + 4;
    p = value + vlen;
    char *k = fsh_strndup(key, (size_t)klen);
    if (!k) return fsh_error_set(err, ENOMEM, "out of memory importing metadata");
    int rc = fsh_metadata_add(m, k, value, vlen);
    fsh_free(k);
    if (rc) return fsh_error_set(err, rc, "out of memory importing metadata");
  }
  return 0;
}

/* Parses a decimal integer at *s (advancing it); false if none or out of
 * [lo, hi]. */
static bool parse_int(const char **s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(*s, &end, 10);
  if (end == *s || errno || v < lo || v > hi || **s == '+' || **s == ' ') return false;
  *s = end;
  *out = v;
  return true;
}

static bool unit_from_char(char c, fsh_time_unit *u) {
  switch (c) {
    case 's': *u = FSH_SECOND; return true;
    case 'm': *u = FSH_MILLI; return true;
    case 'u': *u = FSH_MICRO; return true;
    case 'n': *u = FSH_NANO; return true;
    default: return false;
  }
}

static int bad_format(const char *path, const char *fmt, const char *why, fsh_error *err) {
  return fsh_error_set(err, EINVAL, "%s: invalid format string '%s': %s", path, fmt, why);
}

/* Sets f's type and parameters from a format string. Union type codes are
 * parsed into f->type_codes and their count returned in *n_codes. */
static int parse_format(const char *fmt, fsh_field *f, int64_t *n_codes, const char *path,
                        fsh_error *err) {
  *n_codes = -1;
  if (fmt[0] && !fmt[1]) {
    static const struct { char c; fsh_type_id t; } one[] = {
        {'n', FSH_TYPE_NA},      {'b', FSH_TYPE_BOOL},         {'c', FSH_TYPE_INT8},
        {'C', FSH_TYPE_UINT8},   {'s', FSH_TYPE_INT16},        {'S', FSH_TYPE_UINT16},
        {'i', FSH_TYPE_INT32},   {'I', FSH_TYPE_UINT32},       {'l', FSH_TYPE_INT64},
        {'L', FSH_TYPE_UINT64},  {'e', FSH_TYPE_FLOAT16},      {'f', FSH_TYPE_FLOAT32},
        {'g', FSH_TYPE_FLOAT64}, {'z', FSH_TYPE_BINARY},       {'Z', FSH_TYPE_LARGE_BINARY},
        {'u', FSH_TYPE_STRING},  {'U', FSH_TYPE_LARGE_STRING},
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
      if (one[i].c == fmt[0]) {
        f->type = one[i].t;
        return 0;
      }
    }
    return bad_format(path, fmt, "unknown type", err);
  }
  const char *s = fmt;
  long a, b, w;
  switch (fmt[0]) {
    case 'd': /* d:P,S or d:P,S,W */
      s += 2;
      if (fmt[1] != ':' || !parse_int(&s, 1, 76, &a) || *s++ != ',' ||
          !parse_int(&s, -1000, 1000, &b))
        return bad_format(path, fmt, "expected d:precision,scale[,bitwidth]", err);
      w = 128;
      if (*s == ',') {
        s++;
        if (!parse_int(&s, 1, 1024, &w)) return bad_format(path, fmt, "bad decimal bit width", err);
      }
      if (*s) return bad_format(path, fmt, "trailing characters", err);
      if (w != 128 && w != 256)
        return fsh_error_set(err, ENOTSUP, "%s: decimal bit width %ld is not supported", path, w);
      f->type = w == 128 ? FSH_TYPE_DECIMAL128 : FSH_TYPE_DECIMAL256;
      f->precision = (int32_t)a;
      f->scale = (int32_t)b;
      return 0;
    case 'w': /* w:N */
      s += 2;
      if (fmt[1] != ':' || !parse_int(&s, 0, INT32_MAX, &a) || *s)
        return bad_format(path, fmt, "expected w:byte_width", err);
      f->type = FSH_TYPE_FIXED_SIZE_BINARY;
      f->byte_width = (int32_t)a;
      return 0;
    case 't':
      if (strcmp(fmt, "tdD") == 0) return f->type = FSH_TYPE_DATE32, 0;
      if (strcmp(fmt, "tdm") == 0) return f->type = FSH_TYPE_DATE64, 0;
      if (strcmp(fmt, "tiM") == 0) return f->type = FSH_TYPE_INTERVAL_MONTHS, 0;
      if (strcmp(fmt, "tiD") == 0) return f->type = FSH_TYPE_INTERVAL_DAY_TIME, 0;
      if (strcmp(fmt, "tin") == 0) return f->type = FSH_TYPE_INTERVAL_MONTH_DAY_NANO, 0;
      if (fmt[1] == 't' && fmt[2] && !fmt[3] && unit_from_char(fmt[2], &f->unit)) {
        f->type = f->unit <= FSH_MILLI ? FSH_TYPE_TIME32 : FSH_TYPE_TIME64;
        return 0;
      }
      if (fmt[1] == 'D' && fmt[2] && !fmt[3] && unit_from_char(fmt[2], &f->unit)) {
        f->type = FSH_TYPE_DURATION;
        return 0;
      }
      if (fmt[1] == 's' && fmt[2] && unit_from_char(fmt[2], &f->unit) && fmt[3] == ':') {
        f->type = FSH_TYPE_TIMESTAMP;
        if (fmt[4] && fsh_field_set_timezone(f, fmt + 4) != 0)
          return fsh_error_set(err, ENOMEM, "out of memory importing a timezone");
        return 0;
      }
      return bad_format(path, fmt, "unknown temporal type", err);
    case 'v':
      if (strcmp(fmt, "vz") == 0 || strcmp(fmt, "vu") == 0)
        return fsh_error_set(err, ENOTSUP, "%s: format '%s' (binary/utf8 view) is not supported",
                             path, fmt);
      return bad_format(path, fmt, "unknown type", err);
    case '+':
      if (strcmp(fmt, "+l") == 0) return f->type = FSH_TYPE_LIST, 0;
      if (strcmp(fmt, "+L") == 0) return f->type = FSH_TYPE_LARGE_LIST, 0;
      if (strcmp(fmt, "+s") == 0) return f->type = FSH_TYPE_STRUCT, 0;
      if (strcmp(fmt, "+m") == 0) return f->type = FSH_TYPE_MAP, 0;
      if (fmt[1] == 'w') {
        s += 3;
        if (fmt[2] != ':' || !parse_int(&s, 0, INT32_MAX, &a) || *s)
          return bad_format(path, fmt, "expected +w:list_size", err);
        f->type = FSH_TYPE_FIXED_SIZE_LIST;
        f->list_size = (int32_t)a;
        return 0;
      }
      if (fmt[1] == 'u' && (fmt[2] == 's' || fmt[2] == 'd') && fmt[3] == ':') {
        f->type = fmt[2] == 's' ? FSH_TYPE_SPARSE_UNION : FSH_TYPE_DENSE_UNION;
        s += 4;
        int64_t n = 0;
        for (const char *q = s; *q; q++) n += *q == ',';
        if (*s) n++;
        f->type_codes = fsh_malloc((size_t)(n > 0 ? n : 1) * sizeof *f->type_codes);
        if (!f->type_codes) return fsh_error_set(err, ENOMEM, "out of memory importing a union");
        for (int64_t i = 0; i < n; i++) {
          if ((i > 0 && *s++ != ',') || !parse_int(&s, 0, 127, &a))
            return bad_format(path, fmt, "union type ids must be integers in [0, 127]", err);
          f->type_codes[i] = (int32_t)a;
        }
        if (*s) return bad_format(path, fmt, "trailing characters", err);
        *n_codes = n;
        return 0;
      }
      if (strcmp(fmt, "+vl") == 0 || strcmp(fmt, "+vL") == 0 || strcmp(fmt, "+r") == 0)
        return fsh_error_set(err, ENOTSUP, "%s: format '%s' (%s) is not supported", path, fmt,
                             fmt[1] == 'r' ? "run-end encoded" : "list view");
      return bad_format(path, fmt, "unknown nested type", err);
    default:
      return bad_format(path, fmt, "unknown type", err);
  }
}

/* Expected child count for a type: -1 = any. */
static int64_t expected_children(const fsh_field *f, int64_t n_codes) {
  switch (f->type) {
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_FIXED_SIZE_LIST:
    case FSH_TYPE_MAP: return 1;
    case FSH_TYPE_STRUCT: return -1;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: return n_codes;
    default: return 0;
  }
}

static int import_node(const struct ArrowSchema *in, fsh_field *out, int64_t *next_dict_id,
                       const char *parent_path, int depth, fsh_error *err);

/* Builds the type (without name, nullability, metadata or dictionary) of
 * `in` into the zeroed-but-named out. */
static int import_type(const struct ArrowSchema *in, fsh_field *out, int64_t *next_dict_id,
                       const char *path, int depth, fsh_error *err) {
  if (!in->format) return fsh_error_set(err, EINVAL, "%s: NULL format string", path);
  int64_t n_codes;
  int rc = parse_format(in->format, out, &n_codes, path, err);
  if (rc) return rc;
  int64_t want = expected_children(out, n_codes);
  if (in->n_children < 0 || (want >= 0 && in->n_children != want))
    return fsh_error_set(err, EINVAL, "%s: format '%s' needs %lld children, got %lld", path,
                         in->format, (long long)want, (long long)in->n_children);
  if (in->n_children > 0 && !in->children)
    return fsh_error_set(err, EINVAL, "%s: %lld children but a NULL children array", path,
                         (long long)in->n_children);
  if ((rc = fsh_field_alloc_children(out, in->n_children)) != 0)
    return fsh_error_set(err, rc, "out of memory importing a schema");
  for (int64_t i = 0; i < in->n_children; i++) {
    if (!in->children[i])
      return fsh_error_set(err, EINVAL, "%s: child %lld is NULL", path, (long long)i);
    if ((rc = import_node(in->children[i], &out->children[i], next_dict_id, path, depth + 1,
                          err)) != 0)
      return rc;
  }
  if (out->type == FSH_TYPE_MAP) {
    const fsh_field *e = &out->children[0];
    if (e->type != FSH_TYPE_STRUCT || e->n_children != 2 || e->dictionary)
      return fsh_error_set(err, EINVAL, "%s: a map's child must be a struct of (key, value)",
                           path);
    out->keys_sorted = (in->flags & ARROW_FLAG_MAP_KEYS_SORTED) != 0;
  }
  return 0;
}

static int import_node(const struct ArrowSchema *in, fsh_field *out, int64_t *next_dict_id,
                       const char *parent_path, int depth, fsh_error *err) {
  char path[512];
  const char *name = in->name ? in->name : "";
  if (parent_path)
    snprintf(path, sizeof path, "%s.%s", parent_path, name);
  else
    snprintf(path, sizeof path, "field '%s'", name);
  if (depth > 64) return fsh_error_set(err, EINVAL, "%s: nesting deeper than 64 levels", path);
  if (in->release == NULL) return fsh_error_set(err, EINVAL, "%s: schema is released", path);
  if (fsh_field_init(out, name, FSH_TYPE_NA, (in->flags & ARROW_FLAG_NULLABLE) != 0) != 0)
    return fsh_error_set(err, ENOMEM, "out of memory importing a schema");
  int rc = import_type(in, out, next_dict_id, path, depth, err);
  if (rc == 0) rc = metadata_decode(in->metadata, &out->metadata, path, err);
  if (rc == 0 && in->dictionary) {
    if (!fsh_type_is_integer(out->type)) {
      rc = fsh_error_set(err, EINVAL, "%s: dictionary index type '%s' is not an integer", path,
                         in->format);
    } else if (!(out->dictionary = fsh_calloc(1, sizeof *out->dictionary))) {
      rc = fsh_error_set(err, ENOMEM, "out of memory importing a schema");
    } else {
      out->dictionary->id = (*next_dict_id)++;
      out->dictionary->ordered = (in->flags & ARROW_FLAG_DICTIONARY_ORDERED) != 0;
      char dpath[540];
      snprintf(dpath, sizeof dpath, "%s<dictionary>", path);
      rc = import_node(in->dictionary, &out->dictionary->value, next_dict_id, dpath, depth + 1,
                       err);
      if (rc == 0) {
        /* the value field's name is unused: keep it empty */
        out->dictionary->value.name[0] = '\0';
      }
    }
  }
  if (rc) fsh_field_reset(out);
  return rc;
}

static void release_input(struct ArrowSchema *in) {
  if (in && in->release) in->release(in);
}

int fsh_field_import(struct ArrowSchema *in, fsh_field *out, fsh_error *err) {
  if (!in || !in->release) return fsh_error_set(err, EINVAL, "importing a released ArrowSchema");
  int64_t next_id = 0;
  fsh_field f;
  int rc = import_node(in, &f, &next_id, NULL, 0, err);
  release_input(in);
  if (rc == 0) *out = f;
  return rc;
}

int fsh_schema_import(struct ArrowSchema *in, fsh_schema **out, fsh_error *err) {
  if (!in || !in->release) return fsh_error_set(err, EINVAL, "importing a released ArrowSchema");
  int rc = 0;
  fsh_schema *s = NULL;
  if (!in->format || strcmp(in->format, "+s") != 0) {
    rc = fsh_error_set(err, EINVAL,
                       "a schema must be exported as a struct (format '+s'), got format '%s'",
                       in->format ? in->format : "(null)");
    goto done;
  }
  if (in->n_children < 0 || (in->n_children > 0 && !in->children)) {
    rc = fsh_error_set(err, EINVAL, "schema: bad children (%lld)", (long long)in->n_children);
    goto done;
  }
  if (!(s = fsh_schema_new(in->n_children))) {
    rc = fsh_error_set(err, ENOMEM, "out of memory importing a schema");
    goto done;
  }
  if ((rc = metadata_decode(in->metadata, &s->metadata, "schema", err)) != 0) goto done;
  int64_t next_id = 0;
  for (int64_t i = 0; i < in->n_children; i++) {
    if (!in->children[i]) {
      rc = fsh_error_set(err, EINVAL, "schema: child %lld is NULL", (long long)i);
      goto done;
    }
    if ((rc = import_node(in->children[i], &s->fields[i], &next_id, NULL, 1, err)) != 0) {
      fsh_error_prefix(err, rc, "schema column %lld: ", (long long)i);
      goto done;
    }
  }
done:
  release_input(in);
  if (rc) {
    fsh_schema_unref(s);
    return rc;
  }
  *out = s;
  return 0;
}
