/* test_expr_json.c -- the JSON form of expressions: round trips (parse,
 * print, parse again gives the same text and the same results), typed
 * literals, the printed form of trees built in C, and parse errors that
 * name the JSON path and the operator. */
#include "exec/expr_helpers.h"

#include <errno.h>

static char *print(const fsh_expr *e) {
  fsh_error err;
  char *s = NULL;
  CHECK_OK(fsh_expr_to_json(e, &s, &err));
  return s;
}

static void test_round_trip(void) {
  const char *texts[] = {
      "{\"col\":\"a\"}",
      "{\"lit\":null}",
      "{\"lit\":true}",
      "{\"lit\":-42}",
      "{\"lit\":2.5}",
      "{\"lit\":\"h\xc3\xa9\\\"llo\"}",
      "{\"lit\":7,\"type\":\"int8\"}",
      "{\"lit\":1.5,\"type\":\"float32\"}",
      "{\"lit\":\"NaN\",\"type\":\"float64\"}",
      "{\"lit\":\"-Infinity\",\"type\":\"float64\"}",
      "{\"lit\":null,\"type\":\"int32\"}",
      "{\"lit\":18262,\"type\":\"date32\"}",
      "{\"lit\":123,\"type\":\"timestamp\",\"unit\":\"ns\"}",
      "{\"op\":\"and\",\"args\":[{\"op\":\">\",\"args\":[{\"col\":\"key\"},{\"lit\":5}]},"
      "{\"op\":\"like\",\"args\":[{\"col\":\"s\"},{\"lit\":\"a\\\\%%\"}]},{\"op\":\"not\",\"args\":"
      "[{\"op\":\"is_null\",\"args\":[{\"col\":\"x\"}]}]}]}",
      "{\"op\":\"in\",\"args\":[{\"col\":\"k\"},{\"lit\":1},{\"lit\":null},{\"lit\":3}]}",
      "{\"op\":\"between\",\"args\":[{\"col\":\"k\"},{\"lit\":1},{\"col\":\"j\"}]}",
      "{\"op\":\"/\",\"args\":[{\"col\":\"a\"},{\"col\":\"b\"}],\"on_error\":\"null\"}",
      "{\"op\":\"cast\",\"args\":[{\"col\":\"a\"}],\"type\":\"uint16\",\"on_error\":\"null\"}",
      "{\"op\":\"is_not_null\",\"args\":[{\"col\":\"\"}]}",
  };
  fsh_error err;
  for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
    fsh_expr *e = NULL;
    CHECK_OK(fsh_expr_from_json(texts[k], -1, &e, &err));
    if (!e) continue;
    char *s = print(e);
    CHECK_MSG(s && strcmp(s, texts[k]) == 0, "printed %s, parsed from %s", s ? s : "(null)",
              texts[k]);
    fsh_expr *c = fsh_expr_clone(e);
    char *s2 = c ? print(c) : NULL;
    CHECK_MSG(s2 && s && strcmp(s, s2) == 0, "clone printed %s", s2 ? s2 : "(null)");
    fsh_free(s);
    fsh_free(s2);
    fsh_expr_free(c);
    fsh_expr_free(e);
  }
  /* defaults and conversions: a date string, an integer-valued real */
  fsh_expr *e = NULL;
  CHECK_OK(fsh_expr_from_json("{\"lit\":\"2020-01-01\",\"type\":\"date32\"}", -1, &e, &err));
  char *s = e ? print(e) : NULL;
  CHECK_MSG(s && strcmp(s, "{\"lit\":18262,\"type\":\"date32\"}") == 0, "%s", s ? s : "");
  fsh_free(s);
  fsh_expr_free(e);
  CHECK_OK(fsh_expr_from_json("{\"lit\":\"1969-12-31\",\"type\":\"date32\"}", -1, &e, &err));
  s = e ? print(e) : NULL;
  CHECK_MSG(s && strcmp(s, "{\"lit\":-1,\"type\":\"date32\"}") == 0, "%s", s ? s : "");
  fsh_free(s);
  fsh_expr_free(e);
}

/* A tree built through the C API prints as the grammar says, and the
 * printed form evaluates to the same array. */
static void test_c_tree(void) {
  fsh_error err;
  fsh_expr *e = fsh_expr_call2(
      FSH_EXPR_OR,
      fsh_expr_call3(FSH_EXPR_BETWEEN, fsh_expr_col("i32"), fsh_expr_int(FSH_TYPE_INT64, -5),
                     fsh_expr_int(FSH_TYPE_INT16, 5)),
      fsh_expr_call2(FSH_EXPR_LT,
                     fsh_expr_null_on_error(fsh_expr_call2(FSH_EXPR_MOD, fsh_expr_col("i64"),
                                                           fsh_expr_col("nn"))),
                     fsh_expr_float(FSH_TYPE_FLOAT64, 0.5)));
  CHECK(e != NULL);
  if (!e) return;
  char *s = print(e);
  const char *want =
      "{\"op\":\"or\",\"args\":[{\"op\":\"between\",\"args\":[{\"col\":\"i32\"},{\"lit\":-5},"
      "{\"lit\":5,\"type\":\"int16\"}]},{\"op\":\"<\",\"args\":[{\"op\":\"%\",\"args\":[{\"col\":"
      "\"i64\"},{\"col\":\"nn\"}],\"on_error\":\"null\"},{\"lit\":0.5}]}]}";
  CHECK_MSG(s && strcmp(s, want) == 0, "%s", s ? s : "");
  char text[256];
  CHECK_MSG(strcmp(fsh_expr_format(e, text, sizeof text),
                   "((i32 between -5 and 5) or ((i64 % nn) < 0.5))") == 0, "%s", text);
  fsh_batch *b = eh_random_batch(77, 300, 4, false);
  fsh_expr *p = NULL;
  CHECK_OK(fsh_expr_from_json(s, -1, &p, &err));
  fsh_array *x = NULL, *y = NULL;
  CHECK_OK(fsh_expr_bind(e, b->schema, &err));
  if (p) CHECK_OK(fsh_expr_bind(p, b->schema, &err));
  CHECK_OK(fsh_expr_eval(e, b, &x, &err));
  if (p) CHECK_OK(fsh_expr_eval(p, b, &y, &err));
  fsh_field f = {.name = (char *)"r", .type = FSH_TYPE_BOOL};
  if (x && y) CHECK_MSG(fsh_array_equals(&f, x, y, &err), "%s", err.message);
  if (x) CHECK(x->null_count > 0 && x->null_count < x->length);
  fsh_array_unref(x);
  fsh_array_unref(y);
  fsh_expr_free(p);
  fsh_free(s);
  fsh_expr_free(e);
  fsh_batch_unref(b);
}

static void test_parse_errors(void) {
  struct {
    const char *json, *msg;
  } cases[] = {
      {"{\"op\":\"and\",\"args\":[", "line 1 column"},
      {"", "expression JSON"},
      {"[1]", "$: a node must be a JSON object"},
      {"{\"op\":\"xor\",\"args\":[]}", "$: unknown operator 'xor'"},
      {"{\"op\":\"and\",\"args\":[{\"col\":\"a\"},{\"op\":\">\",\"args\":[{\"col\":\"a\"},{\"lit\":1},{\"lit\":2}]}]}",
       "$.args[1]: operator '>': expected 2 args, got 3"},
      {"{\"op\":\"and\",\"args\":[{\"col\":\"a\"}]}", "$: operator 'and': expected at least 2 args, got 1"},
      {"{\"op\":\"not\",\"args\":{}}", "$: operator 'not': \"args\" must be an array"},
      {"{\"op\":\"=\",\"args\":[{\"col\":\"a\"},{\"lit\":1}],\"on_error\":\"null\"}",
       "$: operator '=': \"on_error\""},
      {"{\"op\":\"+\",\"args\":[{\"col\":\"a\"},{\"lit\":1}],\"on_error\":\"skip\"}", "\"on_error\""},
      {"{\"op\":\"+\",\"args\":[{\"col\":\"a\"},{\"lit\":1}],\"flag\":1}", "$: operator '+': unknown key 'flag'"},
      {"{\"op\":\"cast\",\"args\":[{\"col\":\"a\"}]}", "$: operator 'cast': \"type\" must name a type"},
      {"{\"op\":\"cast\",\"args\":[{\"col\":\"a\"}],\"type\":\"int128\"}", "\"type\" must name a type"},
      {"{\"col\":\"a\",\"lit\":1}", "$: a node has exactly one of"},
      {"{\"col\":3}", "$: \"col\" must be a string"},
      {"{\"col\":\"a\",\"x\":1}", "$: a column reference holds only"},
      {"{\"op\":\"or\",\"args\":[{\"col\":\"a\"},{\"lit\":[1]}]}", "$.args[1]: literal: a value must be"},
      {"{\"op\":\"or\",\"args\":[{\"col\":\"a\"},{\"lit\":1,\"type\":\"decimal\"}]}",
       "$.args[1]: literal: unknown type 'decimal'"},
      {"{\"lit\":1,\"type\":\"bool\"}", "$: literal: a bool needs true or false"},
      {"{\"lit\":1.5,\"type\":\"int32\"}", "$: literal: int32 needs an integer"},
      {"{\"lit\":\"2021-02-29\",\"type\":\"date32\"}", "'2021-02-29' is not a YYYY-MM-DD date"},
      {"{\"lit\":\"x\",\"type\":\"float64\"}", "$: literal: a float64 needs a number"},
      {"{\"lit\":1,\"type\":\"int64\",\"unit\":\"ms\"}", "\"unit\" must be"},
      {"{\"lit\":1,\"type\":\"timestamp\",\"unit\":\"h\"}", "\"unit\" must be"},
      {"{\"lit\":1,\"typo\":\"int64\"}", "$: literal: unknown key 'typo'"},
      {"{\"op\":\"in\",\"args\":[{\"col\":\"a\"},{\"op\":\"like\",\"args\":[{\"col\":\"a\"},5]}]}",
       "$.args[1].args[1]: a node must be a JSON object"},
      {"{\"col\":\"a\",\"col\":\"b\"}", "duplicate"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fsh_error err = {{0}};
    fsh_expr *e = (fsh_expr *)&err; /* must come back NULL */
    int rc = fsh_expr_from_json(cases[k].json, -1, &e, &err);
    CHECK_MSG(rc == EINVAL, "%s: returned %d", cases[k].json, rc);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.message, cases[k].msg) != NULL, "%s: message '%s' lacks '%s'",
              cases[k].json, err.message, cases[k].msg);
    if (rc == 0) fsh_expr_free(e);
  }
  /* nesting too deep */
  char deep[8000];
  size_t len = 0;
  for (int k = 0; k < 300; k++) len += (size_t)snprintf(deep + len, sizeof deep - len, "{\"op\":\"not\",\"args\":[");
  len += (size_t)snprintf(deep + len, sizeof deep - len, "{\"col\":\"a\"}");
  for (int k = 0; k < 300; k++) len += (size_t)snprintf(deep + len, sizeof deep - len, "]}");
  fsh_error err;
  fsh_expr *e = NULL;
  CHECK_EQ_INT(fsh_expr_from_json(deep, (int64_t)len, &e, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "deeper than 200"), "%s", err.message);
}

FSH_TEST_MAIN(TEST(test_round_trip), TEST(test_c_tree), TEST(test_parse_errors))
