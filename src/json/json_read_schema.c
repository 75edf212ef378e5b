/* json_read_schema.c -- the "schema" part of an integration JSON document:
 * fields, their types and parameters, dictionary encodings and metadata. */
#include "json/json_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fsh_json_path_error(fsh_error *err, int code, const char *path, const char *fmt, ...) {
  if (!err) return code;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return fsh_error_set(err, code, "%s: %s", path, msg);
}

void fsh_json_path(char *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, FSH_JSON_PATH_MAX, fmt, ap);
  va_end(ap);
}

const char *fsh_json_kind(const json_t *v) {
  switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
  }
}

int fsh_json_get_int64(const json_t *v, int64_t *out) {
  if (json_is_integer(v)) {
    *out = (int64_t)json_integer_value(v);
    return 0;
  }
  if (!json_is_string(v)) return EINVAL;
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  if (len == 0 || len > 20 || strlen(s) != len) return EINVAL;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || *end || (s[0] != '-' && (s[0] < '0' || s[0] > '9'))) return EINVAL;
  *out = (int64_t)x;
  return 0;
}

int fsh_json_get_uint64(const json_t *v, uint64_t *out) {
  if (json_is_integer(v)) {
    if (json_integer_value(v) < 0) return EINVAL;
    *out = (uint64_t)json_integer_value(v);
    return 0;
  }
  if (!json_is_string(v)) return EINVAL;
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  if (len == 0 || len > 20 || strlen(s) != len || s[0] < '0' || s[0] > '9') return EINVAL;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end) return EINVAL;
  *out = (uint64_t)x;
  return 0;
}

/* Optional member of an object: its string value, or NULL if absent. A
 * present non-string is an error. */
static int get_string(json_t *obj, const char *key, const char *path, bool required,
                      const char **out, fsh_error *err) {
  json_t *v = json_object_get(obj, key);
  *out = NULL;
  if (!v && !required) return 0;
  if (!json_is_string(v))
    return fsh_json_path_error(err, EINVAL, path, "\"%s\" is %s, expected a string", key,
                      v ? fsh_json_kind(v) : "missing");
  *out = json_string_value(v);
  return 0;
}

static int get_int(json_t *obj, const char *key, const char *path, int64_t lo, int64_t hi,
                   int64_t *out, fsh_error *err) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v))
    return fsh_json_path_error(err, EINVAL, path, "\"%s\" is %s, expected an integer", key,
                      v ? fsh_json_kind(v) : "missing");
  int64_t x = (int64_t)json_integer_value(v);
  if (x < lo || x > hi)
    return fsh_json_path_error(err, EINVAL, path, "\"%s\" is %" PRId64 ", expected %" PRId64 "..%" PRId64,
                      key, x, lo, hi);
  *out = x;
  return 0;
}

/* Optional boolean member: absent gives `dflt`. */
static int get_bool(json_t *obj, const char *key, const char *path, bool dflt, bool *out,
                    fsh_error *err) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    *out = dflt;
    return 0;
  }
  if (!json_is_boolean(v))
    return fsh_json_path_error(err, EINVAL, path, "\"%s\" is %s, expected a boolean", key, fsh_json_kind(v));
  *out = json_is_true(v);
  return 0;
}

static int parse_unit(json_t *t, const char *path, fsh_time_unit *out, fsh_error *err) {
  const char *u;
  FSH_RETURN_NOT_OK(get_string(t, "unit", path, true, &u, err));
  static const char *const names[] = {"SECOND", "MILLISECOND", "MICROSECOND", "NANOSECOND"};
  for (int i = 0; i < 4; i++) {
    if (strcmp(u, names[i]) == 0) {
      *out = (fsh_time_unit)i;
      return 0;
    }
  }
  return fsh_json_path_error(err, EINVAL, path, "unknown time unit '%s'", u);
}

/* Integer type from {"name": "int", "bitWidth", "isSigned"}. */
static int parse_int_type(json_t *t, const char *path, fsh_type_id *out, fsh_error *err) {
  int64_t bits = 0;
  bool is_signed = false;
  FSH_RETURN_NOT_OK(get_int(t, "bitWidth", path, 8, 64, &bits, err));
  FSH_RETURN_NOT_OK(get_bool(t, "isSigned", path, true, &is_signed, err));
  switch (bits) {
    case 8: *out = is_signed ? FSH_TYPE_INT8 : FSH_TYPE_UINT8; return 0;
    case 16: *out = is_signed ? FSH_TYPE_INT16 : FSH_TYPE_UINT16; return 0;
    case 32: *out = is_signed ? FSH_TYPE_INT32 : FSH_TYPE_UINT32; return 0;
    case 64: *out = is_signed ? FSH_TYPE_INT64 : FSH_TYPE_UINT64; return 0;
    default: return fsh_json_path_error(err, EINVAL, path, "int bitWidth %" PRId64 " is not 8/16/32/64", bits);
  }
}

/* Fills f->type and its parameters from a "type" object. `path` names the
 * field. Children are checked by the caller. */
static int parse_type(json_t *t, const char *path, fsh_field *f, fsh_error *err) {
  if (!json_is_object(t))
    return fsh_json_path_error(err, EINVAL, path, "\"type\" is %s, expected an object",
                      t ? fsh_json_kind(t) : "missing");
  char tpath[FSH_JSON_PATH_MAX];
  fsh_json_path(tpath, "%s.type", path);
  const char *name;
  FSH_RETURN_NOT_OK(get_string(t, "name", tpath, true, &name, err));
  int64_t x;
  if (strcmp(name, "null") == 0) {
    f->type = FSH_TYPE_NA;
  } else if (strcmp(name, "bool") == 0) {
    f->type = FSH_TYPE_BOOL;
  } else if (strcmp(name, "int") == 0) {
    FSH_RETURN_NOT_OK(parse_int_type(t, tpath, &f->type, err));
  } else if (strcmp(name, "floatingpoint") == 0) {
    const char *p;
    FSH_RETURN_NOT_OK(get_string(t, "precision", tpath, true, &p, err));
    if (strcmp(p, "HALF") == 0) f->type = FSH_TYPE_FLOAT16;
    else if (strcmp(p, "SINGLE") == 0) f->type = FSH_TYPE_FLOAT32;
    else if (strcmp(p, "DOUBLE") == 0) f->type = FSH_TYPE_FLOAT64;
    else return fsh_json_path_error(err, EINVAL, tpath, "unknown floatingpoint precision '%s'", p);
  } else if (strcmp(name, "decimal") == 0) {
    int64_t bits = 128;
    if (json_object_get(t, "bitWidth"))
      FSH_RETURN_NOT_OK(get_int(t, "bitWidth", tpath, 128, 256, &bits, err));
    if (bits != 128 && bits != 256)
      return fsh_json_path_error(err, EINVAL, tpath, "decimal bitWidth %" PRId64 " is not 128 or 256", bits);
    f->type = bits == 128 ? FSH_TYPE_DECIMAL128 : FSH_TYPE_DECIMAL256;
    FSH_RETURN_NOT_OK(get_int(t, "precision", tpath, 1, bits == 128 ? 38 : 76, &x, err));
    f->precision = (int32_t)x;
    FSH_RETURN_NOT_OK(get_int(t, "scale", tpath, INT32_MIN, INT32_MAX, &x, err));
    f->scale = (int32_t)x;
  } else if (strcmp(name, "date") == 0) {
    const char *u;
    FSH_RETURN_NOT_OK(get_string(t, "unit", tpath, true, &u, err));
    if (strcmp(u, "DAY") == 0) f->type = FSH_TYPE_DATE32;
    else if (strcmp(u, "MILLISECOND") == 0) f->type = FSH_TYPE_DATE64;
    else return fsh_json_path_error(err, EINVAL, tpath, "unknown date unit '%s'", u);
  } else if (strcmp(name, "time") == 0) {
    FSH_RETURN_NOT_OK(parse_unit(t, tpath, &f->unit, err));
    FSH_RETURN_NOT_OK(get_int(t, "bitWidth", tpath, 32, 64, &x, err));
    bool ok32 = x == 32 && (f->unit == FSH_SECOND || f->unit == FSH_MILLI);
    bool ok64 = x == 64 && (f->unit == FSH_MICRO || f->unit == FSH_NANO);
    if (!ok32 && !ok64)
      return fsh_json_path_error(err, EINVAL, tpath, "time of bitWidth %" PRId64 " cannot have this unit", x);
    f->type = x == 32 ? FSH_TYPE_TIME32 : FSH_TYPE_TIME64;
  } else if (strcmp(name, "timestamp") == 0) {
    f->type = FSH_TYPE_TIMESTAMP;
    FSH_RETURN_NOT_OK(parse_unit(t, tpath, &f->unit, err));
    const char *tz;
    FSH_RETURN_NOT_OK(get_string(t, "timezone", tpath, false, &tz, err));
    if (tz && fsh_field_set_timezone(f, tz) != 0)
      return fsh_json_path_error(err, ENOMEM, tpath, "out of memory");
  } else if (strcmp(name, "duration") == 0) {
    f->type = FSH_TYPE_DURATION;
    FSH_RETURN_NOT_OK(parse_unit(t, tpath, &f->unit, err));
  } else if (strcmp(name, "interval") == 0) {
    const char *u;
    FSH_RETURN_NOT_OK(get_string(t, "unit", tpath, true, &u, err));
    if (strcmp(u, "YEAR_MONTH") == 0) f->type = FSH_TYPE_INTERVAL_MONTHS;
    else if (strcmp(u, "DAY_TIME") == 0) f->type = FSH_TYPE_INTERVAL_DAY_TIME;
    else if (strcmp(u, "MONTH_DAY_NANO") == 0) f->type = FSH_TYPE_INTERVAL_MONTH_DAY_NANO;
    else return fsh_json_path_error(err, EINVAL, tpath, "unknown interval unit '%s'", u);
  } else if (strcmp(name, "binary") == 0) {
    f->type = FSH_TYPE_BINARY;
  } else if (strcmp(name, "utf8") == 0) {
    f->type = FSH_TYPE_STRING;
  } else if (strcmp(name, "largebinary") == 0) {
    f->type = FSH_TYPE_LARGE_BINARY;
  } else if (strcmp(name, "largeutf8") == 0) {
    f->type = FSH_TYPE_LARGE_STRING;
  } else if (strcmp(name, "fixedsizebinary") == 0) {
    f->type = FSH_TYPE_FIXED_SIZE_BINARY;
    FSH_RETURN_NOT_OK(get_int(t, "byteWidth", tpath, 0, INT32_MAX, &x, err));
    f->byte_width = (int32_t)x;
  } else if (strcmp(name, "list") == 0) {
    f->type = FSH_TYPE_LIST;
  } else if (strcmp(name, "largelist") == 0) {
    f->type = FSH_TYPE_LARGE_LIST;
  } else if (strcmp(name, "fixedsizelist") == 0) {
    f->type = FSH_TYPE_FIXED_SIZE_LIST;
    FSH_RETURN_NOT_OK(get_int(t, "listSize", tpath, 0, INT32_MAX, &x, err));
    f->list_size = (int32_t)x;
  } else if (strcmp(name, "struct") == 0) {
    f->type = FSH_TYPE_STRUCT;
  } else if (strcmp(name, "map") == 0) {
    f->type = FSH_TYPE_MAP;
    FSH_RETURN_NOT_OK(get_bool(t, "keysSorted", tpath, false, &f->keys_sorted, err));
  } else if (strcmp(name, "union") == 0) {
    const char *mode;
    FSH_RETURN_NOT_OK(get_string(t, "mode", tpath, true, &mode, err));
    if (strcmp(mode, "SPARSE") == 0) f->type = FSH_TYPE_SPARSE_UNION;
    else if (strcmp(mode, "DENSE") == 0) f->type = FSH_TYPE_DENSE_UNION;
    else return fsh_json_path_error(err, EINVAL, tpath, "unknown union mode '%s'", mode);
  } else {
    return fsh_json_path_error(err, ENOTSUP, tpath, "type '%s' is not supported", name);
  }
  return 0;
}

/* Union typeIds: one int8-range code per child (checked after children). */
static int parse_type_codes(json_t *t, const char *path, fsh_field *f, fsh_error *err) {
  json_t *ids = json_object_get(t, "typeIds");
  if (!json_is_array(ids))
    return fsh_json_path_error(err, EINVAL, path, "union \"typeIds\" is %s, expected an array",
                      ids ? fsh_json_kind(ids) : "missing");
  if ((int64_t)json_array_size(ids) != f->n_children)
    return fsh_json_path_error(err, EINVAL, path, "union has %zu typeIds for %" PRId64 " children",
                      json_array_size(ids), f->n_children);
  f->type_codes = fsh_malloc((size_t)(f->n_children > 0 ? f->n_children : 1) * sizeof(int32_t));
  if (!f->type_codes) return fsh_json_path_error(err, ENOMEM, path, "out of memory");
  for (int64_t i = 0; i < f->n_children; i++) {
    json_t *v = json_array_get(ids, (size_t)i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 127)
      return fsh_json_path_error(err, EINVAL, path, "union typeIds[%" PRId64 "] is not an integer 0..127", i);
    f->type_codes[i] = (int32_t)json_integer_value(v);
    for (int64_t k = 0; k < i; k++)
      if (f->type_codes[k] == f->type_codes[i])
        return fsh_json_path_error(err, EINVAL, path, "union type id %d appears twice", f->type_codes[i]);
  }
  return 0;
}

static int parse_metadata(json_t *m, const char *path, fsh_metadata *out, fsh_error *err) {
  if (!m || json_is_null(m)) return 0;
  if (!json_is_array(m))
    return fsh_json_path_error(err, EINVAL, path, "\"metadata\" is %s, expected an array", fsh_json_kind(m));
  for (size_t i = 0; i < json_array_size(m); i++) {
    json_t *kv = json_array_get(m, i);
    char kpath[FSH_JSON_PATH_MAX];
    fsh_json_path(kpath, "%s.metadata[%zu]", path, i);
    if (!json_is_object(kv))
      return fsh_json_path_error(err, EINVAL, kpath, "is %s, expected {\"key\", \"value\"}", fsh_json_kind(kv));
    const char *key, *value;
    FSH_RETURN_NOT_OK(get_string(kv, "key", kpath, true, &key, err));
    FSH_RETURN_NOT_OK(get_string(kv, "value", kpath, true, &value, err));
    json_t *jv = json_object_get(kv, "value");
    if (fsh_metadata_add(out, key, value, (int64_t)json_string_length(jv)) != 0)
      return fsh_json_path_error(err, ENOMEM, kpath, "out of memory");
  }
  return 0;
}

static int parse_field(json_t *j, const char *path, fsh_field *f, fsh_error *err);

/* Children of `j` into f (the value type's node for dictionary fields). */
static int parse_children(json_t *j, const char *path, fsh_field *f, fsh_error *err) {
  json_t *children = json_object_get(j, "children");
  if (children && !json_is_array(children))
    return fsh_json_path_error(err, EINVAL, path, "\"children\" is %s, expected an array",
                      fsh_json_kind(children));
  size_t n = children ? json_array_size(children) : 0;
  if (fsh_field_alloc_children(f, (int64_t)n) != 0)
    return fsh_json_path_error(err, ENOMEM, path, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *c = json_array_get(children, i);
    json_t *cname = json_is_object(c) ? json_object_get(c, "name") : NULL;
    char cpath[FSH_JSON_PATH_MAX];
    fsh_json_path(cpath, "%s.children[%zu] ('%s')", path, i,
             json_is_string(cname) ? json_string_value(cname) : "?");
    FSH_RETURN_NOT_OK(parse_field(c, cpath, &f->children[i], err));
  }
  const char *want = NULL;
  switch (f->type) {
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_FIXED_SIZE_LIST:
      if (n != 1) want = "exactly one child";
      break;
    case FSH_TYPE_MAP:
      if (n != 1 || f->children[0].type != FSH_TYPE_STRUCT || f->children[0].dictionary ||
          f->children[0].n_children != 2)
        want = "one struct child with two children (key, value)";
      break;
    case FSH_TYPE_STRUCT: case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: break;
    default:
      if (n != 0) want = "no children";
  }
  if (want)
    return fsh_json_path_error(err, EINVAL, path, "a %s field needs %s, it has %zu children",
                      fsh_type_name(f->type), want, n);
  if (f->type == FSH_TYPE_SPARSE_UNION || f->type == FSH_TYPE_DENSE_UNION)
    FSH_RETURN_NOT_OK(parse_type_codes(json_object_get(j, "type"), path, f, err));
  return 0;
}

/* Moves f's value type (type, parameters, children) into a new dictionary
 * and makes f's type the index type. f keeps its name, nullability and
 * metadata. */
static int make_dictionary(json_t *jd, const char *path, fsh_field *f, fsh_error *err) {
  char dpath[FSH_JSON_PATH_MAX];
  fsh_json_path(dpath, "%s.dictionary", path);
  if (!json_is_object(jd))
    return fsh_json_path_error(err, EINVAL, path, "\"dictionary\" is %s, expected an object",
                      fsh_json_kind(jd));
  int64_t id;
  bool ordered = false;
  FSH_RETURN_NOT_OK(get_int(jd, "id", dpath, INT64_MIN, INT64_MAX, &id, err));
  FSH_RETURN_NOT_OK(get_bool(jd, "isOrdered", dpath, false, &ordered, err));
  json_t *it = json_object_get(jd, "indexType");
  if (!json_is_object(it))
    return fsh_json_path_error(err, EINVAL, dpath, "\"indexType\" is %s, expected an object",
                      it ? fsh_json_kind(it) : "missing");
  char ipath[FSH_JSON_PATH_MAX];
  fsh_json_path(ipath, "%s.indexType", dpath);
  const char *iname;
  FSH_RETURN_NOT_OK(get_string(it, "name", ipath, true, &iname, err));
  if (strcmp(iname, "int") != 0)
    return fsh_json_path_error(err, EINVAL, ipath, "index type '%s' is not an integer type", iname);
  fsh_type_id index_type;
  FSH_RETURN_NOT_OK(parse_int_type(it, ipath, &index_type, err));

  fsh_dictionary *d = fsh_calloc(1, sizeof *d);
  char *vname = fsh_strdup("");
  if (!d || !vname) {
    fsh_free(d);
    fsh_free(vname);
    return fsh_json_path_error(err, ENOMEM, path, "out of memory");
  }
  d->id = id;
  d->ordered = ordered;
  d->value = *f;
  d->value.name = vname;
  d->value.nullable = true;
  fsh_field idx = {.name = f->name, .type = index_type, .nullable = f->nullable,
                   .metadata = f->metadata, .dictionary = d};
  d->value.metadata = (fsh_metadata){0};
  *f = idx;
  return 0;
}

/* Parses one field. f must be zeroed; on error it may be partly filled and
 * the caller resets it. */
static int parse_field(json_t *j, const char *path, fsh_field *f, fsh_error *err) {
  if (!json_is_object(j))
    return fsh_json_path_error(err, EINVAL, path, "is %s, expected a field object", fsh_json_kind(j));
  const char *name;
  FSH_RETURN_NOT_OK(get_string(j, "name", path, false, &name, err));
  if (!(f->name = fsh_strdup(name ? name : ""))) return fsh_json_path_error(err, ENOMEM, path, "out of memory");
  FSH_RETURN_NOT_OK(get_bool(j, "nullable", path, true, &f->nullable, err));
  FSH_RETURN_NOT_OK(parse_type(json_object_get(j, "type"), path, f, err));
  FSH_RETURN_NOT_OK(parse_children(j, path, f, err));
  json_t *jd = json_object_get(j, "dictionary");
  if (jd && !json_is_null(jd)) FSH_RETURN_NOT_OK(make_dictionary(jd, path, f, err));
  return parse_metadata(json_object_get(j, "metadata"), path, &f->metadata, err);
}

int fsh_json_parse_schema(json_t *j, fsh_schema **out, fsh_error *err) {
  *out = NULL;
  if (!json_is_object(j))
    return fsh_json_path_error(err, EINVAL, "schema", "is %s, expected an object",
                      j ? fsh_json_kind(j) : "missing");
  json_t *fields = json_object_get(j, "fields");
  if (!json_is_array(fields))
    return fsh_json_path_error(err, EINVAL, "schema", "\"fields\" is %s, expected an array",
                      fields ? fsh_json_kind(fields) : "missing");
  fsh_schema *s = fsh_schema_new((int64_t)json_array_size(fields));
  if (!s) return fsh_error_set(err, ENOMEM, "schema: out of memory");
  int rc = 0;
  for (size_t i = 0; i < json_array_size(fields) && rc == 0; i++) {
    json_t *jf = json_array_get(fields, i);
    json_t *jname = json_is_object(jf) ? json_object_get(jf, "name") : NULL;
    char path[FSH_JSON_PATH_MAX];
    fsh_json_path(path, "schema.fields[%zu] ('%s')", i,
             json_is_string(jname) ? json_string_value(jname) : "?");
    rc = parse_field(jf, path, &s->fields[i], err);
  }
  if (rc == 0) rc = parse_metadata(json_object_get(j, "metadata"), "schema", &s->metadata, err);
  if (rc != 0) {
    fsh_schema_unref(s); /* resets every field, partly filled ones too */
    return rc;
  }
  *out = s;
  return 0;
}
