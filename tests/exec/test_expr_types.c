/* test_expr_types.c -- the less common operand types against per-row
 * references: large_utf8 (64-bit offsets), binary, float32, int8, uint64,
 * date64, a dictionary of int64 values (int8 indices, sliced), a column of
 * the null type, and a union column (only IS NULL applies). */
#include "exec/expr_helpers.h"

#include <errno.h>

#define N 300
#define CUT 5

/* Parses, binds and evaluates json over b. */
static fsh_array *run(fsh_batch *b, const char *json, fsh_type_id *type) {
  fsh_error err;
  fsh_expr *e = NULL;
  fsh_array *out = NULL;
  int rc = fsh_expr_from_json(json, -1, &e, &err);
  if (rc == 0) rc = fsh_expr_bind(e, b->schema, &err);
  if (rc == 0) rc = fsh_expr_eval(e, b, &out, &err);
  CHECK_MSG(rc == 0, "%s: %s", json, err.message);
  if (e && rc == 0) *type = fsh_expr_type(e);
  fsh_expr_free(e);
  return out;
}

static fsh_array *large_strings(const uint8_t *ok, const char *const *s, int64_t n) {
  fsh_array *a = eh_ok(fsh_array_new(3, 0));
  a->length = n;
  a->buffers[0] = eh_validity(ok, n, &a->null_count);
  int64_t *off = eh_ok(malloc(sizeof *off * (size_t)(n + 1)));
  off[0] = 0;
  for (int64_t i = 0; i < n; i++) off[i + 1] = off[i] + (ok[i] ? (int64_t)strlen(s[i]) : 0);
  char *data = eh_ok(malloc((size_t)off[n] + 1));
  for (int64_t i = 0; i < n; i++)
    if (ok[i]) memcpy(data + off[i], s[i], strlen(s[i]));
  a->buffers[1] = eh_buf(off, 8 * (n + 1));
  a->buffers[2] = eh_buf(data, off[n]);
  free(off);
  free(data);
  return a;
}

typedef struct data {
  uint8_t ok[8][N + 2 * CUT];
  const char *s[N + 2 * CUT];
  float f32[N + 2 * CUT];
  int8_t i8[N + 2 * CUT];
  uint64_t u64[N + 2 * CUT];
  int64_t d64[N + 2 * CUT];
  int8_t di[N + 2 * CUT];
} data;

static const int64_t dict_vals[6] = {100, -3, 7, 0, 42, 9}; /* entry 0 sliced off */

static fsh_batch *make(data *d) {
  uint64_t st = 99;
  int64_t m = N + 2 * CUT;
  for (int c = 0; c < 8; c++)
    for (int64_t i = 0; i < m; i++) d->ok[c][i] = eh_rand(&st) % 5 != 0;
  for (int64_t i = 0; i < m; i++) {
    d->s[i] = eh_words[eh_rand(&st) % EH_N_WORDS];
    d->f32[i] = (float)((int)(eh_rand(&st) % 200) - 100) / 4.0f;
    d->i8[i] = (int8_t)eh_rand(&st);
    d->u64[i] = eh_rand(&st) % 1000;
    d->d64[i] = 86400000ll * (int64_t)(eh_rand(&st) % 10);
    d->di[i] = (int8_t)(eh_rand(&st) % 5);
  }
  const char *names[9] = {"ls", "bin", "f32", "i8", "u64", "d64", "di", "na", "un"};
  fsh_type_id types[9] = {FSH_TYPE_LARGE_STRING, FSH_TYPE_BINARY, FSH_TYPE_FLOAT32,
                          FSH_TYPE_INT8,         FSH_TYPE_UINT64, FSH_TYPE_DATE64,
                          FSH_TYPE_INT8,         FSH_TYPE_NA,     FSH_TYPE_SPARSE_UNION};
  fsh_schema *s = eh_ok(fsh_schema_new(9));
  for (int c = 0; c < 9; c++)
    if (fsh_field_init(&s->fields[c], names[c], types[c], true) != 0) abort();
  if (fsh_field_set_dictionary(&s->fields[6], 3, FSH_TYPE_INT8, false) != 0) abort();
  s->fields[6].dictionary->value.type = FSH_TYPE_INT64;
  /* union<a: int32> with type code 0 */
  fsh_field *u = &s->fields[8];
  if (fsh_field_alloc_children(u, 1) != 0 || fsh_field_init(&u->children[0], "a", FSH_TYPE_INT32, true) != 0)
    abort();
  u->type_codes = eh_ok(fsh_calloc(1, sizeof *u->type_codes));
  fsh_batch *b = eh_ok(fsh_batch_new(s, m));
  fsh_schema_unref(s);
  b->columns[0] = large_strings(d->ok[0], d->s, m);
  b->columns[1] = eh_strings(d->ok[1], d->s, m);
  b->columns[2] = eh_fixed(d->ok[2], d->f32, m, 4);
  b->columns[3] = eh_fixed(d->ok[3], d->i8, m, 1);
  b->columns[4] = eh_fixed(d->ok[4], d->u64, m, 8);
  b->columns[5] = eh_fixed(d->ok[5], d->d64, m, 8);
  b->columns[6] = eh_fixed(d->ok[6], d->di, m, 1);
  uint8_t all[6] = {1, 1, 1, 1, 1, 1};
  fsh_array *dict = eh_fixed(all, dict_vals, 6, 8);
  b->columns[6]->dictionary = eh_ok(fsh_array_slice(dict, 1, 5));
  fsh_array_unref(dict);
  b->columns[7] = eh_ok(fsh_array_new(0, 0));
  b->columns[7]->length = m;
  b->columns[7]->null_count = m;
  fsh_array *un = eh_ok(fsh_array_new(1, 1));
  un->length = m;
  un->null_count = 0;
  un->buffers[0] = eh_ok(fsh_buffer_new(m, true));
  int32_t zeros[N + 2 * CUT] = {0};
  un->children[0] = eh_fixed(d->ok[7], zeros, m, 4);
  b->columns[8] = un;
  fsh_error err;
  if (fsh_batch_validate(b, true, &err) != 0) {
    fprintf(stderr, "test_expr_types: invalid batch: %s\n", err.message);
    abort();
  }
  fsh_batch *sl = eh_ok(fsh_batch_slice(b, CUT, N));
  fsh_batch_unref(b);
  return sl;
}

static int want[N];

static void check(fsh_batch *b, const char *json) {
  fsh_type_id t;
  fsh_array *got = run(b, json, &t);
  if (got) eh_check_bools(got, want, N, json);
  fsh_array_unref(got);
}

static bool like_prefix_ab(const char *s) { return strncmp(s, "ab", 2) == 0; }

static void test_types(void) {
  static data d;
  fsh_batch *b = make(&d);
  /* strings: large_utf8 and binary against literals */
  for (int k = 0; k < N; k++) {
    int i = k + CUT;
    want[k] = d.ok[0][i] ? strcmp(d.s[i], "b") < 0 : -1;
  }
  check(b, "{\"op\":\"<\",\"args\":[{\"col\":\"ls\"},{\"lit\":\"b\"}]}");
  for (int k = 0; k < N; k++) want[k] = d.ok[0][k + CUT] ? like_prefix_ab(d.s[k + CUT]) : -1;
  check(b, "{\"op\":\"like\",\"args\":[{\"col\":\"ls\"},{\"lit\":\"ab%\"}]}");
  for (int k = 0; k < N; k++)
    want[k] = d.ok[1][k + CUT] && d.ok[0][k + CUT] ? 1 : -1; /* same strings in both */
  check(b, "{\"op\":\"=\",\"args\":[{\"col\":\"bin\"},{\"col\":\"ls\"}]}");
  /* float32 + int8 in float64 */
  for (int k = 0; k < N; k++) {
    int i = k + CUT;
    want[k] = d.ok[2][i] && d.ok[3][i] ? (double)d.f32[i] + d.i8[i] > 10.0 : -1;
  }
  check(b, "{\"op\":\">\",\"args\":[{\"op\":\"+\",\"args\":[{\"col\":\"f32\"},{\"col\":\"i8\"}]},"
           "{\"lit\":10}]}");
  /* uint64 * 2 = int64 */
  for (int k = 0; k < N; k++) {
    int i = k + CUT;
    want[k] = d.ok[4][i] ? (int64_t)d.u64[i] * 2 >= 1000 : -1;
  }
  check(b, "{\"op\":\">=\",\"args\":[{\"op\":\"*\",\"args\":[{\"col\":\"u64\"},{\"lit\":2}]},"
           "{\"lit\":1000}]}");
  /* date64 with a date64 literal */
  for (int k = 0; k < N; k++) {
    int i = k + CUT;
    want[k] = d.ok[5][i] ? d.d64[i] <= 3 * 86400000ll : -1;
  }
  check(b, "{\"op\":\"<=\",\"args\":[{\"col\":\"d64\"},{\"lit\":259200000,\"type\":\"date64\"}]}");
  /* dictionary of int64 (sliced dictionary) */
  for (int k = 0; k < N; k++) {
    int i = k + CUT;
    want[k] = d.ok[6][i] ? dict_vals[1 + d.di[i]] + 1 > 5 : -1;
  }
  check(b, "{\"op\":\">\",\"args\":[{\"op\":\"+\",\"args\":[{\"col\":\"di\"},{\"lit\":1}]},"
           "{\"lit\":5}]}");
  for (int k = 0; k < N; k++) {
    int i = k + CUT;
    int64_t v = dict_vals[1 + d.di[i]];
    want[k] = d.ok[6][i] ? v == 7 || v == 9 : -1;
  }
  check(b, "{\"op\":\"in\",\"args\":[{\"col\":\"di\"},{\"lit\":7},{\"lit\":9.0}]}");
  /* the null type: always null; IS NULL true */
  for (int k = 0; k < N; k++) want[k] = -1;
  check(b, "{\"op\":\"=\",\"args\":[{\"col\":\"na\"},{\"lit\":1}]}");
  check(b, "{\"op\":\"not\",\"args\":[{\"col\":\"na\"}]}");
  for (int k = 0; k < N; k++) want[k] = 1;
  check(b, "{\"op\":\"is_null\",\"args\":[{\"col\":\"na\"}]}");
  /* a union has no validity of its own: never null at the top */
  for (int k = 0; k < N; k++) want[k] = 0;
  check(b, "{\"op\":\"is_null\",\"args\":[{\"col\":\"un\"}]}");
  /* and cannot be an operand */
  fsh_error err;
  fsh_expr *e = NULL;
  CHECK_OK(fsh_expr_from_json("{\"op\":\"=\",\"args\":[{\"col\":\"un\"},{\"lit\":1}]}", -1, &e, &err));
  CHECK_EQ_INT(fsh_expr_bind(e, b->schema, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "column 'un' is sparse_union"), "%s", err.message);
  fsh_expr_free(e);
  /* projecting the odd columns as they are */
  const char *names[3] = {"na", "un", "di"};
  fsh_expr *ex[3] = {fsh_expr_col("na"), fsh_expr_col("un"), fsh_expr_col("di")};
  fsh_schema *os = NULL;
  fsh_batch *p = NULL;
  CHECK_OK(fsh_project_schema(b->schema, 3, names, ex, &os, &err));
  if (os) CHECK_OK(fsh_project(b, os, 3, ex, &p, &err));
  if (p) CHECK_OK(fsh_batch_validate(p, true, &err));
  fsh_batch_unref(p);
  fsh_schema_unref(os);
  for (int k = 0; k < 3; k++) fsh_expr_free(ex[k]);
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_types))
