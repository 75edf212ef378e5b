/* test_expr_errors.c -- what expressions reject and how they say it:
 * binding errors (unknown column, type mismatches, non-boolean predicates,
 * bad IN lists and LIKE patterns), integer overflow and division by zero as
 * errors by default and as nulls on request, and evaluation against a
 * batch of another schema. */
#include "exec/expr_helpers.h"

#include <errno.h>

/* Binds json against b's schema; expects code `want` and a message holding
 * every one of the NULL-terminated substrings. */
static void expect_bind(fsh_batch *b, const char *json, int want, const char *const *subs) {
  fsh_error err = {{0}};
  fsh_expr *e = NULL;
  int rc = fsh_expr_from_json(json, -1, &e, &err);
  CHECK_MSG(rc == 0, "%s: parse: %s", json, err.message);
  if (rc != 0) return;
  rc = fsh_expr_bind(e, b->schema, &err);
  CHECK_MSG(rc == want, "%s: bind returned %d, want %d (%s)", json, rc, want, err.message);
  for (int k = 0; subs[k]; k++)
    CHECK_MSG(strstr(err.message, subs[k]) != NULL, "%s: message '%s' lacks '%s'", json,
              err.message, subs[k]);
  fsh_expr_free(e);
}

#define SUBS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_bind_errors(void) {
  fsh_batch *b = eh_random_batch(1, 10, 2, false);
  expect_bind(b, "{\"op\":\">\",\"args\":[{\"col\":\"nope\"},{\"lit\":5}]}", EINVAL,
              SUBS("unknown column 'nope'", "(nope > 5)", "'i32'"));
  expect_bind(b, "{\"op\":\"+\",\"args\":[{\"col\":\"s\"},{\"lit\":1}]}", EINVAL,
              SUBS("(s + 1)", "column 's' is utf8", "1 is int64", "type mismatch"));
  expect_bind(b, "{\"op\":\"*\",\"args\":[{\"col\":\"i32\"},{\"col\":\"b\"}]}", EINVAL,
              SUBS("(i32 * b)", "column 'b' is bool"));
  expect_bind(b, "{\"op\":\"=\",\"args\":[{\"col\":\"d\"},{\"col\":\"i64\"}]}", EINVAL,
              SUBS("(d = i64)", "not comparable", "column 'd' is utf8", "column 'i64' is int64"));
  expect_bind(b, "{\"op\":\"<\",\"args\":[{\"col\":\"dt\"},{\"col\":\"ts\"}]}", EINVAL,
              SUBS("column 'dt' is date32", "column 'ts' is timestamp"));
  expect_bind(b, "{\"op\":\"and\",\"args\":[{\"col\":\"b\"},{\"col\":\"i32\"}]}", EINVAL,
              SUBS("(b and i32)", "boolean", "column 'i32' is int32"));
  expect_bind(b, "{\"op\":\"not\",\"args\":[{\"col\":\"s\"}]}", EINVAL,
              SUBS("(not s)", "column 's' is utf8"));
  expect_bind(b, "{\"op\":\"in\",\"args\":[{\"col\":\"i32\"},{\"col\":\"i64\"}]}", EINVAL,
              SUBS("literals", "column 'i64'"));
  expect_bind(b, "{\"op\":\"in\",\"args\":[{\"col\":\"i32\"},{\"lit\":\"x\"}]}", EINVAL,
              SUBS("not comparable", "column 'i32' is int32", "'x' is utf8"));
  expect_bind(b, "{\"op\":\"like\",\"args\":[{\"col\":\"i32\"},{\"lit\":\"a%\"}]}", EINVAL,
              SUBS("LIKE needs a string", "column 'i32'"));
  expect_bind(b, "{\"op\":\"like\",\"args\":[{\"col\":\"s\"},{\"col\":\"d\"}]}", EINVAL,
              SUBS("pattern must be a utf8 literal", "column 'd'"));
  expect_bind(b, "{\"op\":\"like\",\"args\":[{\"col\":\"s\"},{\"lit\":\"ab\\\\\"}]}", EINVAL,
              SUBS("lone escape"));
  expect_bind(b, "{\"op\":\"cast\",\"args\":[{\"col\":\"s\"}],\"type\":\"int32\"}", EINVAL,
              SUBS("CAST reads numbers", "column 's'"));
  expect_bind(b, "{\"op\":\"cast\",\"args\":[{\"col\":\"i32\"}],\"type\":\"utf8\"}", EINVAL,
              SUBS("cannot cast to utf8"));
  expect_bind(b, "{\"lit\":300,\"type\":\"int8\"}", EINVAL, SUBS("300 out of range for int8"));
  expect_bind(b, "{\"op\":\"between\",\"args\":[{\"col\":\"i32\"},{\"lit\":1},{\"lit\":\"z\"}]}",
              EINVAL, SUBS("not comparable", "'z' is utf8"));
  /* deep inside a tree: the node and the root both named */
  expect_bind(b, "{\"op\":\"and\",\"args\":[{\"col\":\"b\"},{\"op\":\">\",\"args\":[{\"op\":\"+\","
                 "\"args\":[{\"col\":\"s\"},{\"lit\":2}]},{\"lit\":1}]}]}",
              EINVAL, SUBS("bind of (b and ((s + 2) > 1))", "(s + 2)", "column 's' is utf8"));
  /* valid ones bind */
  static const char *const none[] = {NULL};
  expect_bind(b, "{\"op\":\"+\",\"args\":[{\"col\":\"i32\"},{\"lit\":null}]}", 0, none);
  expect_bind(b, "{\"op\":\"is_null\",\"args\":[{\"col\":\"s\"}]}", 0, none);

  /* a non-boolean predicate in a filter */
  fsh_error err = {{0}};
  fsh_expr *e = fsh_expr_call2(FSH_EXPR_ADD, fsh_expr_col("i32"), fsh_expr_int(FSH_TYPE_INT64, 1));
  CHECK_OK(fsh_expr_bind(e, b->schema, &err));
  fsh_batch *out = (fsh_batch *)&err; /* must be reset to NULL */
  CHECK_EQ_INT(fsh_expr_filter(e, b, &out, &err), EINVAL);
  CHECK(out == NULL);
  CHECK_MSG(strstr(err.message, "predicate (i32 + 1) is int64, not bool"), "%s", err.message);
  /* ... and before any batch, through fsh_expr_bind_predicate */
  CHECK_EQ_INT(fsh_expr_bind_predicate(e, b->schema, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "predicate (i32 + 1) is int64, not bool"), "%s", err.message);
  fsh_expr_free(e);
  e = fsh_expr_col("s");
  CHECK_EQ_INT(fsh_expr_bind_predicate(e, b->schema, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "predicate column 's' is utf8, not bool"), "%s", err.message);
  fsh_expr_free(e);
  e = fsh_expr_call1(FSH_EXPR_IS_NULL, fsh_expr_col("s"));
  CHECK_OK(fsh_expr_bind_predicate(e, b->schema, &err));
  fsh_expr_free(e);
  /* unbound */
  e = fsh_expr_col("i32");
  fsh_array *arr = NULL;
  CHECK_EQ_INT(fsh_expr_eval(e, b, &arr, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "not bound"), "%s", err.message);
  /* bound to another schema */
  fsh_batch *other = eh_random_batch(2, 10, 0, false);
  fsh_schema *s2 = eh_ok(fsh_schema_new(1));
  CHECK(fsh_field_init(&s2->fields[0], "i32", FSH_TYPE_FLOAT64, true) == 0);
  CHECK_OK(fsh_expr_bind(e, s2, &err));
  CHECK_EQ_INT(fsh_expr_eval(e, other, &arr, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "column 'i32'") && strstr(err.message, "not the one"), "%s",
            err.message);
  CHECK(arr == NULL);
  /* project: the column named */
  const char *names[1] = {"x"};
  fsh_expr *ex[1] = {fsh_expr_call2(FSH_EXPR_SUB, fsh_expr_col("s"), fsh_expr_col("i32"))};
  fsh_schema *os = NULL;
  CHECK_EQ_INT(fsh_project_schema(b->schema, 1, names, ex, &os, &err), EINVAL);
  CHECK(os == NULL);
  CHECK_MSG(strstr(err.message, "project column 'x'") && strstr(err.message, "(s - i32)"), "%s",
            err.message);
  fsh_expr_free(ex[0]);
  /* project with an output schema made for other expressions */
  ex[0] = fsh_expr_col("i32");
  CHECK_OK(fsh_project_schema(b->schema, 1, names, ex, &os, &err));
  fsh_expr *other_ex[1] = {fsh_expr_col("s")};
  CHECK_OK(fsh_expr_bind(other_ex[0], b->schema, &err));
  fsh_batch *pb = NULL;
  CHECK_EQ_INT(fsh_project(b, os, 1, other_ex, &pb, &err), EINVAL);
  CHECK(pb == NULL);
  CHECK_MSG(strstr(err.message, "project column 'x'"), "%s", err.message);
  fsh_expr_free(other_ex[0]);
  fsh_expr_free(ex[0]);
  fsh_schema_unref(os);
  fsh_schema_unref(s2);
  fsh_expr_free(e);
  fsh_batch_unref(other);
  fsh_batch_unref(b);
}

/* A one-column int64 batch x with the given values and validity. */
static fsh_batch *int_batch(const int64_t *v, const uint8_t *ok, int64_t n, const char *name) {
  fsh_schema *s = eh_ok(fsh_schema_new(1));
  if (fsh_field_init(&s->fields[0], name, FSH_TYPE_INT64, true) != 0) abort();
  fsh_batch *b = eh_ok(fsh_batch_new(s, n));
  fsh_schema_unref(s);
  b->columns[0] = eh_fixed(ok, v, n, 8);
  return b;
}

static int eval_json(fsh_batch *b, const char *json, fsh_array **out, fsh_error *err) {
  fsh_expr *e = NULL;
  int rc = fsh_expr_from_json(json, -1, &e, err);
  if (rc == 0) rc = fsh_expr_bind(e, b->schema, err);
  if (rc == 0) rc = fsh_expr_eval(e, b, out, err);
  fsh_expr_free(e);
  return rc;
}

static void test_overflow_div0(void) {
  fsh_error err;
#define NUL (INT64_MIN + 12345) /* a null in the tables below */
  const int64_t v[6] = {1, INT64_MAX, 0, INT64_MIN, 5, 0};
  const uint8_t ok[6] = {1, 1, 1, 1, 1, 0};
  fsh_batch *b = int_batch(v, ok, 6, "x");
  struct {
    const char *json;
    int code;
    const char *msg;
    int64_t want[6]; /* with on_error null: NUL or the value */
  } cases[] = {
      {"{\"op\":\"+\",\"args\":[{\"col\":\"x\"},{\"lit\":1}]", EOVERFLOW,
       "(x + 1): int64 overflow at row 1 (9223372036854775807 + 1)", {2, NUL, 1, INT64_MIN + 1, 6, NUL}},
      {"{\"op\":\"-\",\"args\":[{\"col\":\"x\"},{\"lit\":1}]", EOVERFLOW,
       "(x - 1): int64 overflow at row 3", {0, INT64_MAX - 1, -1, NUL, 4, NUL}},
      {"{\"op\":\"*\",\"args\":[{\"col\":\"x\"},{\"lit\":2}]", EOVERFLOW,
       "(x * 2): int64 overflow at row 1", {2, NUL, 0, NUL, 10, NUL}},
      {"{\"op\":\"/\",\"args\":[{\"lit\":10},{\"col\":\"x\"}]", EDOM,
       "(10 / x): division by zero at row 2", {10, 0, NUL, 0, 2, NUL}},
      {"{\"op\":\"%\",\"args\":[{\"lit\":7},{\"col\":\"x\"}]", EDOM,
       "(7 % x): division by zero at row 2", {0, 7, NUL, 7, 2, NUL}},
      {"{\"op\":\"/\",\"args\":[{\"col\":\"x\"},{\"lit\":-1}]", EOVERFLOW,
       "(x / -1): int64 overflow at row 3", {-1, -INT64_MAX, 0, NUL, -5, NUL}},
      {"{\"op\":\"cast\",\"type\":\"int8\",\"args\":[{\"col\":\"x\"}]", EOVERFLOW,
       "value 9223372036854775807 at row 1 is out of the range of int8", {1, NUL, 0, NUL, 5, NUL}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char json[300];
    snprintf(json, sizeof json, "%s}", cases[k].json);
    fsh_array *out = NULL;
    int rc = eval_json(b, json, &out, &err);
    CHECK_MSG(rc == cases[k].code, "%s: got %d (%s)", json, rc, rc ? err.message : "");
    CHECK(out == NULL);
    if (rc) CHECK_MSG(strstr(err.message, cases[k].msg), "%s: '%s' lacks '%s'", json, err.message, cases[k].msg);
    if (rc) CHECK_MSG(strstr(err.message, "on_error"), "%s: no hint: %s", json, err.message);
    fsh_array_unref(out);
    snprintf(json, sizeof json, "%s,\"on_error\":\"null\"}", cases[k].json);
    out = NULL;
    CHECK_OK(eval_json(b, json, &out, &err));
    if (!out) continue;
    fsh_field f = {.name = (char *)"r", .type = k == 6 ? FSH_TYPE_INT8 : FSH_TYPE_INT64};
    CHECK_OK(fsh_array_validate(&f, out, false, &err));
    for (int64_t r = 0; r < 6; r++) {
      bool valid = eh_valid(&f, out, r);
      bool want_null = cases[k].want[r] == NUL;
      CHECK_MSG(valid == !want_null, "%s row %lld: valid %d", json, (long long)r, valid);
      if (valid && !want_null)
        CHECK_MSG(eh_int(&f, out, r) == cases[k].want[r], "%s row %lld: %lld", json, (long long)r,
                  (long long)eh_int(&f, out, r));
    }
    fsh_array_unref(out);
  }
  /* float division: IEEE, no error */
  fsh_array *out = NULL;
  CHECK_OK(eval_json(b, "{\"op\":\"/\",\"args\":[{\"lit\":1.0},{\"col\":\"x\"}]}", &out, &err));
  if (out) {
    fsh_field f = {.name = (char *)"r", .type = FSH_TYPE_FLOAT64};
    CHECK(isinf(eh_float(&f, out, 2)) && eh_float(&f, out, 2) > 0);
  }
  fsh_array_unref(out);
  /* a zero divisor under a null slot is no error; nor a literal pair that
   * overflows with null_on_error */
  fsh_batch_unref(b);
  const int64_t v2[3] = {3, 0, -2};
  const uint8_t ok2[3] = {1, 0, 1};
  b = int_batch(v2, ok2, 3, "x");
  out = NULL;
  CHECK_OK(eval_json(b, "{\"op\":\"/\",\"args\":[{\"lit\":6},{\"col\":\"x\"}]}", &out, &err));
  if (out) {
    fsh_field f = {.name = (char *)"r", .type = FSH_TYPE_INT64};
    CHECK(eh_valid(&f, out, 0) && eh_int(&f, out, 0) == 2);
    CHECK(!eh_valid(&f, out, 1));
    CHECK(eh_valid(&f, out, 2) && eh_int(&f, out, 2) == -3);
  }
  fsh_array_unref(out);
  out = NULL;
  CHECK_EQ_INT(eval_json(b, "{\"op\":\"%\",\"args\":[{\"col\":\"x\"},{\"lit\":0}]}", &out, &err), EDOM);
  CHECK_OK(eval_json(b, "{\"op\":\"+\",\"args\":[{\"lit\":9223372036854775807},{\"lit\":1}],"
                        "\"on_error\":\"null\"}", &out, &err));
  if (out) CHECK_EQ_INT(out->null_count, 3);
  fsh_array_unref(out);
  /* uint64 above INT64_MAX in a valid row */
  fsh_schema *s = eh_ok(fsh_schema_new(1));
  CHECK(fsh_field_init(&s->fields[0], "u", FSH_TYPE_UINT64, true) == 0);
  fsh_batch *ub = eh_ok(fsh_batch_new(s, 2));
  fsh_schema_unref(s);
  const uint64_t uv[2] = {1, UINT64_MAX};
  const uint8_t uok[2] = {1, 1};
  ub->columns[0] = eh_fixed(uok, uv, 2, 8);
  out = NULL;
  CHECK_EQ_INT(eval_json(ub, "{\"op\":\">\",\"args\":[{\"col\":\"u\"},{\"lit\":0}]}", &out, &err),
               EOVERFLOW);
  CHECK_MSG(strstr(err.message, "column 'u' row 1"), "%s", err.message);
  fsh_batch_unref(ub);
  fsh_batch_unref(b);
}

/* Every allocation of bind, eval, filter, project and JSON parse/print
 * failing in turn (then persistently): an error, NULL outputs, no leak
 * (ASan's leak check at exit), then success once allocations pass. */
static void test_alloc_failure(void) {
  fsh_batch *b = eh_random_batch(9, 200, 3, false);
  const char *json =
      "{\"op\":\"or\",\"args\":[{\"op\":\"and\",\"args\":[{\"op\":\">\",\"args\":[{\"op\":\"+\","
      "\"args\":[{\"col\":\"i32\"},{\"col\":\"i64\"}],\"on_error\":\"null\"},{\"lit\":10}]},"
      "{\"op\":\"like\",\"args\":[{\"col\":\"d\"},{\"lit\":\"%b_\"}]}]},{\"op\":\"in\",\"args\":"
      "[{\"col\":\"s\"},{\"lit\":\"ab\"},{\"lit\":null}]},{\"op\":\"between\",\"args\":[{\"col\":"
      "\"f64\"},{\"lit\":1},{\"op\":\"cast\",\"type\":\"float64\",\"args\":[{\"col\":\"u8\"}]}]}]}";
  for (int persistent = 0; persistent < 2; persistent++) {
    bool done = false;
    for (int64_t nth = 1; nth < 10000 && !done; nth++) {
      fsh_error err;
      fsh_expr *e = NULL, *e2 = NULL;
      fsh_batch *got = NULL, *proj = NULL;
      fsh_schema *os = NULL;
      char *text = NULL;
      fsh_alloc_fail_after(nth, persistent);
      int rc = fsh_expr_from_json(json, -1, &e, &err);
      if (rc == 0) rc = fsh_expr_bind(e, b->schema, &err);
      if (rc == 0) rc = fsh_expr_filter(e, b, &got, &err);
      if (rc == 0) rc = fsh_expr_to_json(e, &text, &err);
      if (rc == 0) e2 = fsh_expr_clone(e), rc = e2 ? 0 : ENOMEM;
      const char *names[2] = {"p", "d"};
      fsh_expr *ex[2] = {e2, NULL};
      if (rc == 0) ex[1] = fsh_expr_col("d"), rc = ex[1] ? 0 : ENOMEM;
      if (rc == 0) rc = fsh_project_schema(b->schema, 2, names, ex, &os, &err);
      if (rc == 0) rc = fsh_project(b, os, 2, ex, &proj, &err);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        done = true;
        CHECK_OK(fsh_batch_validate(got, true, &err));
        CHECK_OK(fsh_batch_validate(proj, true, &err));
      } else {
        CHECK_MSG(rc == ENOMEM, "nth %lld: %d %s", (long long)nth, rc, err.message);
        CHECK(proj == NULL);
      }
      fsh_free(text);
      fsh_batch_unref(got);
      fsh_batch_unref(proj);
      fsh_schema_unref(os);
      fsh_expr_free(e);
      fsh_expr_free(ex[0]);
      fsh_expr_free(ex[1]);
    }
    CHECK(done);
  }
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_bind_errors), TEST(test_overflow_div0), TEST(test_alloc_failure))
