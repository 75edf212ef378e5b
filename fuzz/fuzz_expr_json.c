/* fuzz_expr_json.c -- libFuzzer target: the JSON form of expressions
 * (what plans carry from users and, later, between processes). The input
 * is JSON text; when it parses, the tree is printed back (and the print
 * must parse again), bound to the synthetic table's schema (key int64,
 * value float64, name utf8, with nulls) and, when it binds, evaluated over
 * a small batch of that table. Errors are expected; crashes, leaks,
 * out-of-bounds reads and undefined behaviour (overflow in arithmetic on
 * hostile literals) are bugs. */
#include <flightshuffle/exec.h>
#include <flightshuffle/workloads.h>

#include <stdlib.h>

static fsh_batch *sample_batch(void) {
  static fsh_batch *b;
  if (!b) {
    fsh_schema *s = fsh_synthetic_schema();
    fsh_synthetic_options o = {.seed = 7, .with_nulls = true, .key_range = 100};
    fsh_error err;
    if (!s || fsh_synthetic_batch(s, &o, 0, 64, &b, &err) != 0) abort();
    fsh_schema_unref(s);
  }
  return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0; /* deep trees are a parser limit, not interesting slowly */
  fsh_error err;
  fsh_expr *e = NULL;
  if (fsh_expr_from_json((const char *)data, (int64_t)size, &e, &err) != 0) return 0;
  char *text = NULL;
  if (fsh_expr_to_json(e, &text, &err) == 0) {
    fsh_expr *again = NULL;
    if (fsh_expr_from_json(text, -1, &again, &err) != 0) abort(); /* our print must parse */
    fsh_expr_free(again);
    fsh_free(text);
  }
  fsh_batch *b = sample_batch();
  if (fsh_expr_bind(e, b->schema, &err) == 0) {
    fsh_array *out = NULL;
    if (fsh_expr_eval(e, b, &out, &err) == 0) fsh_array_unref(out);
  }
  fsh_expr_free(e);
  return 0;
}
