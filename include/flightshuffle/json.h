/* json.h -- the Arrow integration-test JSON format (docs/source/format/
 * Integration.rst in apache/arrow): a schema, record batches and the
 * dictionaries they use, as one JSON document. The golden files of
 * apache/arrow-testing are in this format; we read them to check our IPC
 * reader against the reference, and write it to hand data to other tools.
 *
 * Reading: the whole document is parsed (plain or gzip-compressed) into a
 * schema and batches. Dictionary-encoded columns get their dictionary array
 * attached (fsh_array.dictionary), nested dictionaries too; every array that
 * uses one dictionary id shares one dictionary array. Arrays built here have
 * offset 0, a NULL validity buffer when they have no nulls, and a computed
 * null_count. Errors name the source, the JSON path and what is wrong:
 *   "x.json.gz: batches[2].columns[1] ('f1'): DATA has 9 values, count is 10"
 *
 * Writing: slices are written as their logical values (offsets rebased to
 * 0). Dictionaries are collected from the arrays and written once per id (a
 * dictionary id whose arrays differ between batches is ENOTSUP: the format
 * has no replacement dictionaries). Extensions to the format, accepted when
 * reading: floating-point NaN and infinities as the strings "NaN",
 * "Infinity", "-Infinity"; float16 values as JSON numbers; month-day-nano
 * intervals as {"months", "days", "nanoseconds"} objects.
 *
 * The JSON tree itself is built by jansson with its own allocator; every
 * Arrow buffer, array and field goes through fsh_malloc. */
#ifndef FLIGHTSHUFFLE_JSON_H
#define FLIGHTSHUFFLE_JSON_H

#include <flightshuffle/arrow.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a JSON document holds. Caller-owned; release with
 * fsh_json_data_reset. */
typedef struct fsh_json_data {
  fsh_schema *schema;  /* one reference */
  int64_t n_batches;
  fsh_batch **batches; /* one reference each; the array from fsh_malloc */
} fsh_json_data;

/* Reads a .json or .json.gz file (gzip detected from the content). On
 * error *out is left zeroed. */
FSH_NODISCARD int fsh_json_read_path(const char *path, fsh_json_data *out, fsh_error *err);
/* Same from memory; `name` prefixes error messages (NULL: "<memory>"). */
FSH_NODISCARD int fsh_json_read_string(const char *text, size_t len, const char *name,
                                       fsh_json_data *out, fsh_error *err);
/* Releases everything *d holds and zeroes it; NULL and zeroed accepted. */
void fsh_json_data_reset(fsh_json_data *d);

/* Writes schema + batches (each of `schema`'s shape) as one compact JSON
 * document to f. */
FSH_NODISCARD int fsh_json_write(FILE *f, const fsh_schema *schema, fsh_batch *const *batches,
                                 int64_t n, fsh_error *err);
/* Writes to path (gzip-compressed when it ends in ".gz") through path.tmp,
 * renamed into place on success and removed on failure. */
FSH_NODISCARD int fsh_json_write_path(const char *path, const fsh_schema *schema,
                                      fsh_batch *const *batches, int64_t n, fsh_error *err);
/* Writes into a new NUL-terminated string (*out from fsh_malloc; *len its
 * length without the NUL). */
FSH_NODISCARD int fsh_json_write_string(const fsh_schema *schema, fsh_batch *const *batches,
                                        int64_t n, char **out, size_t *len, fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
