/* field.c -- fields (the type tree of a column), key/value metadata, and
 * facts about type ids. */
#include <flightshuffle/arrow.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

int fsh_field_init(fsh_field *f, const char *name, fsh_type_id type, bool nullable) {
  memset(f, 0, sizeof *f);
  f->name = fsh_strdup(name ? name : "");
  if (!f->name) return ENOMEM;
  f->type = type;
  f->nullable = nullable;
  return 0;
}

static void dictionary_free(fsh_dictionary *d) {
  if (!d) return;
  fsh_field_reset(&d->value);
  fsh_free(d);
}

void fsh_field_reset(fsh_field *f) {
  if (!f) return;
  fsh_free(f->name);
  fsh_free(f->timezone);
  fsh_free(f->type_codes);
  fsh_metadata_reset(&f->metadata);
  for (int64_t i = 0; i < f->n_children; i++) fsh_field_reset(&f->children[i]);
  fsh_free(f->children);
  dictionary_free(f->dictionary);
  memset(f, 0, sizeof *f);
}

int fsh_field_alloc_children(fsh_field *f, int64_t n) {
  if (f->children || n < 0) return EINVAL;
  if (n == 0) return 0;
  f->children = fsh_calloc((size_t)n, sizeof *f->children);
  if (!f->children) return ENOMEM;
  f->n_children = n;
  return 0;
}

int fsh_field_set_timezone(fsh_field *f, const char *tz) {
  char *copy = NULL;
  if (tz && !(copy = fsh_strdup(tz))) return ENOMEM;
  fsh_free(f->timezone);
  f->timezone = copy;
  return 0;
}

int fsh_field_set_dictionary(fsh_field *f, int64_t id, fsh_type_id index_type, bool ordered) {
  if (!fsh_type_is_integer(index_type)) return EINVAL;
  fsh_dictionary *d = fsh_calloc(1, sizeof *d);
  if (!d) return ENOMEM;
  if (fsh_field_init(&d->value, "", f->type, true) != 0) {
    fsh_free(d);
    return ENOMEM;
  }
  d->id = id;
  d->ordered = ordered;
  dictionary_free(f->dictionary);
  f->dictionary = d;
  f->type = index_type;
  return 0;
}

/* Copies everything of src but its name and children into a zeroed dst. */
static int field_copy_params(fsh_field *dst, const fsh_field *src) {
  dst->type = src->type;
  dst->nullable = src->nullable;
  dst->byte_width = src->byte_width;
  dst->list_size = src->list_size;
  dst->precision = src->precision;
  dst->scale = src->scale;
  dst->unit = src->unit;
  dst->keys_sorted = src->keys_sorted;
  if (src->timezone && !(dst->timezone = fsh_strdup(src->timezone))) return ENOMEM;
  if (src->type_codes) {
    size_t n = (size_t)(src->n_children > 0 ? src->n_children : 1);
    dst->type_codes = fsh_malloc(n * sizeof *dst->type_codes);
    if (!dst->type_codes) return ENOMEM;
    memcpy(dst->type_codes, src->type_codes, (size_t)src->n_children * sizeof *dst->type_codes);
  }
  return fsh_metadata_copy(&dst->metadata, &src->metadata);
}

int fsh_field_copy(fsh_field *dst, const fsh_field *src) {
  memset(dst, 0, sizeof *dst);
  int rc = ENOMEM;
  if (!(dst->name = fsh_strdup(src->name ? src->name : ""))) goto fail;
  if ((rc = field_copy_params(dst, src)) != 0) goto fail;
  if ((rc = fsh_field_alloc_children(dst, src->n_children)) != 0) goto fail;
  for (int64_t i = 0; i < src->n_children; i++)
    if ((rc = fsh_field_copy(&dst->children[i], &src->children[i])) != 0) goto fail;
  if (src->dictionary) {
    rc = ENOMEM;
    if (!(dst->dictionary = fsh_calloc(1, sizeof *dst->dictionary))) goto fail;
    dst->dictionary->id = src->dictionary->id;
    dst->dictionary->ordered = src->dictionary->ordered;
    if ((rc = fsh_field_copy(&dst->dictionary->value, &src->dictionary->value)) != 0) goto fail;
  }
  return 0;
fail:
  fsh_field_reset(dst);
  return rc;
}

/* ---- metadata ---------------------------------------------------------- */

int fsh_metadata_add(fsh_metadata *m, const char *key, const char *value, int64_t value_len) {
  if (value_len < 0) value_len = (int64_t)strlen(value);
  fsh_kv *items = fsh_realloc(m->items, (size_t)(m->n + 1) * sizeof *items);
  if (!items) return ENOMEM;
  m->items = items;
  fsh_kv *kv = &items[m->n];
  kv->key = fsh_strdup(key);
  kv->value = fsh_malloc((size_t)value_len + 1);
  if (!kv->key || !kv->value) {
    fsh_free(kv->key);
    fsh_free(kv->value);
    return ENOMEM;
  }
  if (value_len) memcpy(kv->value, value, (size_t)value_len);
  kv->value[value_len] = '\0';
  kv->value_len = value_len;
  m->n++;
  return 0;
}

void fsh_metadata_reset(fsh_metadata *m) {
  for (int64_t i = 0; i < m->n; i++) {
    fsh_free(m->items[i].key);
    fsh_free(m->items[i].value);
  }
  fsh_free(m->items);
  m->items = NULL;
  m->n = 0;
}

int fsh_metadata_copy(fsh_metadata *dst, const fsh_metadata *src) {
  dst->n = 0;
  dst->items = NULL;
  for (int64_t i = 0; i < src->n; i++) {
    if (fsh_metadata_add(dst, src->items[i].key, src->items[i].value, src->items[i].value_len)) {
      fsh_metadata_reset(dst);
      return ENOMEM;
    }
  }
  return 0;
}

const fsh_kv *fsh_metadata_find(const fsh_metadata *m, const char *key) {
  for (int64_t i = 0; i < m->n; i++)
    if (strcmp(m->items[i].key, key) == 0) return &m->items[i];
  return NULL;
}

/* ---- type facts -------------------------------------------------------- */

static const char *const type_names[FSH_TYPE_COUNT_] = {
    [FSH_TYPE_NA] = "null",
    [FSH_TYPE_BOOL] = "bool",
    [FSH_TYPE_INT8] = "int8",
    [FSH_TYPE_INT16] = "int16",
    [FSH_TYPE_INT32] = "int32",
    [FSH_TYPE_INT64] = "int64",
    [FSH_TYPE_UINT8] = "uint8",
    [FSH_TYPE_UINT16] = "uint16",
    [FSH_TYPE_UINT32] = "uint32",
    [FSH_TYPE_UINT64] = "uint64",
    [FSH_TYPE_FLOAT16] = "float16",
    [FSH_TYPE_FLOAT32] = "float32",
    [FSH_TYPE_FLOAT64] = "float64",
    [FSH_TYPE_DECIMAL128] = "decimal128",
    [FSH_TYPE_DECIMAL256] = "decimal256",
    [FSH_TYPE_DATE32] = "date32",
    [FSH_TYPE_DATE64] = "date64",
    [FSH_TYPE_TIME32] = "time32",
    [FSH_TYPE_TIME64] = "time64",
    [FSH_TYPE_TIMESTAMP] = "timestamp",
    [FSH_TYPE_DURATION] = "duration",
    [FSH_TYPE_INTERVAL_MONTHS] = "interval_months",
    [FSH_TYPE_INTERVAL_DAY_TIME] = "interval_day_time",
    [FSH_TYPE_INTERVAL_MONTH_DAY_NANO] = "interval_month_day_nano",
    [FSH_TYPE_BINARY] = "binary",
    [FSH_TYPE_STRING] = "utf8",
    [FSH_TYPE_LARGE_BINARY] = "large_binary",
    [FSH_TYPE_LARGE_STRING] = "large_utf8",
    [FSH_TYPE_FIXED_SIZE_BINARY] = "fixed_size_binary",
    [FSH_TYPE_LIST] = "list",
    [FSH_TYPE_LARGE_LIST] = "large_list",
    [FSH_TYPE_FIXED_SIZE_LIST] = "fixed_size_list",
    [FSH_TYPE_STRUCT] = "struct",
    [FSH_TYPE_MAP] = "map",
    [FSH_TYPE_SPARSE_UNION] = "sparse_union",
    [FSH_TYPE_DENSE_UNION] = "dense_union",
};

const char *fsh_type_name(fsh_type_id t) {
  return (unsigned)t < FSH_TYPE_COUNT_ ? type_names[t] : "invalid";
}

bool fsh_type_is_integer(fsh_type_id t) { return t >= FSH_TYPE_INT8 && t <= FSH_TYPE_UINT64; }

bool fsh_type_is_union(fsh_type_id t) {
  return t == FSH_TYPE_SPARSE_UNION || t == FSH_TYPE_DENSE_UNION;
}

bool fsh_type_is_signed_integer(fsh_type_id t) {
  return t >= FSH_TYPE_INT8 && t <= FSH_TYPE_INT64;
}

int64_t fsh_type_bit_width(const fsh_field *f) {
  switch (f->type) {
    case FSH_TYPE_BOOL: return 1;
    case FSH_TYPE_INT8: case FSH_TYPE_UINT8: return 8;
    case FSH_TYPE_INT16: case FSH_TYPE_UINT16: case FSH_TYPE_FLOAT16: return 16;
    case FSH_TYPE_INT32: case FSH_TYPE_UINT32: case FSH_TYPE_FLOAT32: case FSH_TYPE_DATE32:
    case FSH_TYPE_TIME32: case FSH_TYPE_INTERVAL_MONTHS: return 32;
    case FSH_TYPE_INT64: case FSH_TYPE_UINT64: case FSH_TYPE_FLOAT64: case FSH_TYPE_DATE64:
    case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION:
    case FSH_TYPE_INTERVAL_DAY_TIME: return 64;
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_INTERVAL_MONTH_DAY_NANO: return 128;
    case FSH_TYPE_DECIMAL256: return 256;
    case FSH_TYPE_FIXED_SIZE_BINARY: return (int64_t)f->byte_width * 8;
    default: return 0;
  }
}

int fsh_type_n_buffers(fsh_type_id t) {
  switch (t) {
    case FSH_TYPE_NA: return 0;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING: return 3;
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP: return 2;
    case FSH_TYPE_FIXED_SIZE_LIST: case FSH_TYPE_STRUCT: return 1;
    case FSH_TYPE_SPARSE_UNION: return 1;
    case FSH_TYPE_DENSE_UNION: return 2;
    default: return 2;
  }
}

static const char *unit_name(fsh_time_unit u) {
  switch (u) {
    case FSH_SECOND: return "s";
    case FSH_MILLI: return "ms";
    case FSH_MICRO: return "us";
    case FSH_NANO: return "ns";
  }
  return "?";
}

void fsh_field_type_to_string(const fsh_field *f, char *out, size_t n) {
  const char *name = fsh_type_name(f->type);
  char inner[256] = "";
  switch (f->type) {
    case FSH_TYPE_DECIMAL128: case FSH_TYPE_DECIMAL256:
      snprintf(out, n, "%s(%d, %d)", name, f->precision, f->scale);
      break;
    case FSH_TYPE_TIME32: case FSH_TYPE_TIME64: case FSH_TYPE_DURATION:
      snprintf(out, n, "%s[%s]", name, unit_name(f->unit));
      break;
    case FSH_TYPE_TIMESTAMP:
      if (f->timezone)
        snprintf(out, n, "%s[%s, tz=%s]", name, unit_name(f->unit), f->timezone);
      else
        snprintf(out, n, "%s[%s]", name, unit_name(f->unit));
      break;
    case FSH_TYPE_FIXED_SIZE_BINARY:
      snprintf(out, n, "%s[%d]", name, f->byte_width);
      break;
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_FIXED_SIZE_LIST:
      if (f->n_children == 1) fsh_field_type_to_string(&f->children[0], inner, sizeof inner);
      if (f->type == FSH_TYPE_FIXED_SIZE_LIST)
        snprintf(out, n, "%s<%s>[%d]", name, inner, f->list_size);
      else
        snprintf(out, n, "%s<%s>", name, inner);
      break;
    default:
      snprintf(out, n, "%s", name);
  }
  if (f->dictionary) {
    char value[256];
    fsh_field_type_to_string(&f->dictionary->value, value, sizeof value);
    char index[300];
    snprintf(index, sizeof index, "%s", out);
    snprintf(out, n, "dictionary<values=%s, indices=%s%s>", value, index,
             f->dictionary->ordered ? ", ordered" : "");
  }
}
