/* json_read.c -- entry points of the JSON reader: a file (plain or gzip,
 * through zlib) or a string, parsed by jansson, then decoded. */
#include "json/json_internal.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

int fsh_json_read_string(const char *text, size_t len, const char *name, fsh_json_data *out,
                         fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!name) name = "<memory>";
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
  if (!root)
    return fsh_error_set(err, EINVAL, "%s:%d:%d: invalid JSON: %s", name, jerr.line, jerr.column,
                         jerr.text);
  int rc = fsh_json_parse_document(root, out, err);
  json_decref(root);
  if (rc != 0) fsh_error_prefix(err, rc, "%s: ", name);
  return rc;
}

/* Reads the whole (decompressed) file into a new fsh_malloc'd buffer. */
static int slurp(const char *path, char **out, size_t *len, fsh_error *err) {
  errno = 0;
  gzFile gz = gzopen(path, "rb");
  if (!gz)
    return fsh_error_set(err, errno ? errno : ENOMEM, "%s: cannot open: %s", path,
                         errno ? strerror(errno) : "out of memory");
  size_t cap = 1 << 16, n = 0;
  char *buf = fsh_malloc(cap);
  int rc = buf ? 0 : fsh_error_set(err, ENOMEM, "%s: out of memory", path);
  while (rc == 0) {
    if (cap - n < (1 << 15)) {
      char *bigger = fsh_realloc(buf, cap * 2);
      if (!bigger) {
        rc = fsh_error_set(err, ENOMEM, "%s: out of memory reading %zu bytes", path, cap * 2);
        break;
      }
      buf = bigger;
      cap *= 2;
    }
    int got = gzread(gz, buf + n, (unsigned)(cap - n));
    if (got < 0) {
      int zerr;
      const char *msg = gzerror(gz, &zerr);
      rc = fsh_error_set(err, EIO, "%s: read error: %s", path, msg);
    } else if (got == 0) {
      break;
    } else {
      n += (size_t)got;
    }
  }
  gzclose(gz);
  if (rc != 0) {
    fsh_free(buf);
    return rc;
  }
  *out = buf;
  *len = n;
  return 0;
}

int fsh_json_read_path(const char *path, fsh_json_data *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  FSH_RETURN_NOT_OK(slurp(path, &text, &len, err));
  int rc = fsh_json_read_string(text, len, path, out, err);
  fsh_free(text);
  return rc;
}
