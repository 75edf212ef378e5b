/* json_internal.h -- what the JSON layer's files share: the schema parser
 * used by the data reader, and small helpers for JSON paths and values. */
#ifndef FSH_JSON_INTERNAL_H
#define FSH_JSON_INTERNAL_H

#include <flightshuffle/json.h>
#include <jansson.h>

/* Longest JSON path kept in messages ("batches[2].columns[1] ('f1')..."). */
#define FSH_JSON_PATH_MAX 512

/* Parses the "schema" object into a new schema. Errors read
 * "schema.fields[3].children[0] ('x'): <what>". */
FSH_NODISCARD int fsh_json_parse_schema(json_t *j, fsh_schema **out, fsh_error *err);

/* Parses the whole document: schema, dictionaries and batches. On error
 * *out is left zeroed. Messages are not prefixed with a source name. */
FSH_NODISCARD int fsh_json_parse_document(json_t *root, fsh_json_data *out, fsh_error *err);

/* Reads an integer held as a JSON integer or a decimal string (64-bit
 * values are strings in this format). EINVAL if neither or out of range. */
FSH_NODISCARD int fsh_json_get_int64(const json_t *v, int64_t *out);
FSH_NODISCARD int fsh_json_get_uint64(const json_t *v, uint64_t *out);

/* Sets "<path>: <message>" into err and returns code. */
int fsh_json_path_error(fsh_error *err, int code, const char *path, const char *fmt, ...)
    FSH_PRINTF(4, 5);

/* Formats a JSON path into out[FSH_JSON_PATH_MAX], truncating if needed. */
void fsh_json_path(char *out, const char *fmt, ...) FSH_PRINTF(2, 3);

/* The kind of a JSON value, for messages ("string", "array", ...). */
const char *fsh_json_kind(const json_t *v);

#endif
