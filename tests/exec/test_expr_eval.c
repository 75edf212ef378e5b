/* test_expr_eval.c -- every expression operator against a naive per-row
 * reference written here, on random sliced batches with nulls (dictionary
 * utf8 included): arithmetic, comparisons, AND/OR/NOT, IS NULL, IN,
 * BETWEEN, LIKE, CAST, then filter and project. */
#include "exec/exec_internal.h"
#include "exec/expr_helpers.h"

#include <inttypes.h>

/* ---- operands: a column or a literal ------------------------------------ */

typedef struct opnd {
  const char *col; /* NULL: literal */
  int lit;         /* 'n' null, 'i' int64, 'f' float64, 's' utf8, 'b' bool */
  int64_t i;
  double f;
  const char *s;
} opnd;

static opnd OC(const char *c) { return (opnd){.col = c}; }
static opnd OI(int64_t i) { return (opnd){.lit = 'i', .i = i}; }
static opnd OF(double f) { return (opnd){.lit = 'f', .f = f}; }
static opnd OS(const char *s) { return (opnd){.lit = 's', .s = s}; }
static opnd ON(void) { return (opnd){.lit = 'n'}; }
static opnd OB(bool b) { return (opnd){.lit = 'b', .i = b}; }

static void opnd_json(const opnd *o, char *buf, size_t n) {
  if (o->col) snprintf(buf, n, "{\"col\":\"%s\"}", o->col);
  else if (o->lit == 'n') snprintf(buf, n, "{\"lit\":null}");
  else if (o->lit == 'i') snprintf(buf, n, "{\"lit\":%" PRId64 "}", o->i);
  else if (o->lit == 'f') snprintf(buf, n, "{\"lit\":%.17g}", o->f);
  else if (o->lit == 'b') snprintf(buf, n, "{\"lit\":%s}", o->i ? "true" : "false");
  else snprintf(buf, n, "{\"lit\":\"%s\"}", o->s);
}

typedef struct val {
  bool valid, isf, isstr;
  int64_t i;
  double f;
  const char *s;
  int64_t sl;
} val;

static val get(const fsh_batch *b, const opnd *o, int64_t k) {
  val v = {0};
  if (!o->col) {
    v.valid = o->lit != 'n';
    v.isf = o->lit == 'f';
    v.isstr = o->lit == 's';
    v.i = o->i;
    v.f = o->lit == 'f' ? o->f : (double)o->i;
    v.s = o->s;
    v.sl = o->s ? (int64_t)strlen(o->s) : 0;
    return v;
  }
  int c = eh_col(b, o->col);
  const fsh_field *f = &b->schema->fields[c];
  const fsh_array *a = b->columns[c];
  v.valid = eh_valid(f, a, k);
  if (!v.valid) return v;
  fsh_type_id t = f->dictionary ? f->dictionary->value.type : f->type;
  if (t == FSH_TYPE_STRING) {
    v.isstr = true;
    eh_str(f, a, k, &v.s, &v.sl);
  } else if (t == FSH_TYPE_FLOAT64) {
    v.isf = true;
    v.f = eh_float(f, a, k);
  } else {
    v.i = eh_int(f, a, k);
    v.f = (double)v.i;
  }
  return v;
}

/* Parses, binds and evaluates; NULL (with a failed check) on error. */
static fsh_array *run(fsh_batch *b, const char *json, fsh_type_id *type) {
  fsh_error err;
  fsh_expr *e = NULL;
  fsh_array *out = NULL;
  int rc = fsh_expr_from_json(json, -1, &e, &err);
  if (rc == 0) rc = fsh_expr_bind(e, b->schema, &err);
  if (rc == 0) rc = fsh_expr_eval(e, b, &out, &err);
  CHECK_MSG(rc == 0, "%s: %s", json, err.message);
  if (rc == 0) {
    CHECK_MSG(fsh_array_validate(&(fsh_field){.name = (char *)"r", .type = fsh_expr_type(e)},
                                 out, true, &err) == 0, "%s: invalid result: %s", json, err.message);
    *type = fsh_expr_type(e);
  }
  fsh_expr_free(e);
  return out;
}

static const int64_t sizes[] = {0, 1, 7, 64, 1000};
static const int64_t cuts[] = {0, 3, 1, 5, 13};

/* ---- arithmetic ----------------------------------------------------------- */

/* Reference of x op y: *valid false for null or error (null_on_error). */
static void arith_ref(char op, val x, val y, bool *valid, bool *isf, int64_t *i, double *f) {
  *valid = x.valid && y.valid;
  *isf = x.isf || y.isf;
  if (!*valid) return;
  if (*isf) {
    double a = x.isf ? x.f : (double)x.i, b = y.isf ? y.f : (double)y.i;
    *f = op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : op == '/' ? a / b : fmod(a, b);
    return;
  }
  __int128 a = x.i, b = y.i, r;
  if ((op == '/' || op == '%') && b == 0) {
    *valid = false;
    return;
  }
  r = op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : op == '/' ? a / b : a % b;
  if (r > INT64_MAX || r < INT64_MIN) {
    *valid = false;
    return;
  }
  *i = (int64_t)r;
}

static void check_arith(fsh_batch *b, char op, opnd x, opnd y) {
  char jx[128], jy[128], json[400];
  opnd_json(&x, jx, sizeof jx);
  opnd_json(&y, jy, sizeof jy);
  snprintf(json, sizeof json, "{\"op\":\"%c\",\"args\":[%s,%s],\"on_error\":\"null\"}", op, jx, jy);
  fsh_type_id t = FSH_TYPE_NA;
  fsh_array *got = run(b, json, &t);
  if (!got) return;
  fsh_field f = {.name = (char *)"r", .type = t};
  int bad = 0;
  for (int64_t k = 0; k < b->length && bad < 3; k++) {
    bool valid, isf;
    int64_t i = 0;
    double d = 0;
    arith_ref(op, get(b, &x, k), get(b, &y, k), &valid, &isf, &i, &d);
    bool gv = eh_valid(&f, got, k);
    bool same = gv == valid;
    if (same && valid && isf) {
      double g = eh_float(&f, got, k);
      same = (isnan(g) && isnan(d)) || g == d;
    } else if (same && valid) {
      same = eh_int(&f, got, k) == i;
    }
    if (!same) {
      bad++;
      CHECK_MSG(same, "%s row %lld: got %s, want %s %lld/%g", json, (long long)k,
                gv ? "value" : "null", valid ? "value" : "null", (long long)i, d);
    }
  }
  fsh_array_unref(got);
}

/* Nested: ((x * 3) - i32) + nn, every node null_on_error, in int64 and
 * (x = f64) in float64: results of one node feed the next. */
static void check_nested(fsh_batch *b, const char *xcol) {
  char json[600];
  snprintf(json, sizeof json,
           "{\"op\":\"+\",\"on_error\":\"null\",\"args\":[{\"op\":\"-\",\"on_error\":\"null\","
           "\"args\":[{\"op\":\"*\",\"on_error\":\"null\",\"args\":[{\"col\":\"%s\"},{\"lit\":3}]},"
           "{\"col\":\"i32\"}]},{\"col\":\"nn\"}]}", xcol);
  fsh_type_id t = FSH_TYPE_NA;
  fsh_array *got = run(b, json, &t);
  if (!got) return;
  fsh_field f = {.name = (char *)"r", .type = t};
  opnd x = OC(xcol), i32 = OC("i32"), nn = OC("nn"), three = OI(3);
  int bad = 0;
  for (int64_t k = 0; k < b->length && bad < 3; k++) {
    val v1 = {0}, v2 = {0}, v3 = {0};
    arith_ref('*', get(b, &x, k), get(b, &three, k), &v1.valid, &v1.isf, &v1.i, &v1.f);
    arith_ref('-', v1, get(b, &i32, k), &v2.valid, &v2.isf, &v2.i, &v2.f);
    arith_ref('+', v2, get(b, &nn, k), &v3.valid, &v3.isf, &v3.i, &v3.f);
    bool gv = eh_valid(&f, got, k);
    bool same = gv == v3.valid;
    if (same && gv) same = v3.isf ? eh_float(&f, got, k) == v3.f || (isnan(v3.f) && isnan(eh_float(&f, got, k)))
                                  : eh_int(&f, got, k) == v3.i;
    if (!same) {
      bad++;
      CHECK_MSG(same, "%s row %lld", json, (long long)k);
    }
  }
  fsh_array_unref(got);
}

static void test_arith_random(void) {
  const char ops[] = "+-*/%";
  for (int s = 0; s < 5; s++) {
    for (int wide = 0; wide < 2; wide++) {
      fsh_batch *b = eh_random_batch(100 + (uint64_t)s, sizes[s], cuts[s], wide);
      for (int o = 0; o < 5; o++) {
        check_arith(b, ops[o], OC("i32"), OC("i64"));
        check_arith(b, ops[o], OC("i64"), OC("i64"));
        check_arith(b, ops[o], OC("i64"), OC("nn"));
        check_arith(b, ops[o], OC("i64"), OI(7));
        check_arith(b, ops[o], OI(-3), OC("i32"));
        check_arith(b, ops[o], OC("u8"), OC("i32"));
        check_arith(b, ops[o], OC("f64"), OC("i32"));
        check_arith(b, ops[o], OC("f64"), OF(0.5));
        check_arith(b, ops[o], OF(2.0), OC("f64"));
        check_arith(b, ops[o], OC("i64"), ON());
        check_arith(b, ops[o], OI(INT64_MAX), OC("nn"));
        check_arith(b, ops[o], OI(6), OI(4));
      }
      check_nested(b, "i64");
      check_nested(b, "f64");
      check_nested(b, "u8");
      fsh_batch_unref(b);
    }
  }
}

/* ---- comparisons ---------------------------------------------------------- */

static int ucmp(const char *a, int64_t an, const char *b, int64_t bn) {
  for (int64_t k = 0; k < an && k < bn; k++) {
    unsigned char x = (unsigned char)a[k], y = (unsigned char)b[k];
    if (x != y) return x < y ? -1 : 1;
  }
  return an < bn ? -1 : an > bn ? 1 : 0;
}

static int cmp_ref(const char *op, val x, val y) {
  if (!x.valid || !y.valid) return -1;
  int c;
  bool unordered = false;
  if (x.isstr) {
    c = ucmp(x.s, x.sl, y.s, y.sl);
  } else if (x.isf || y.isf) {
    double a = x.isf ? x.f : (double)x.i, b = y.isf ? y.f : (double)y.i;
    unordered = isnan(a) || isnan(b);
    c = a < b ? -1 : a > b ? 1 : 0;
  } else {
    c = x.i < y.i ? -1 : x.i > y.i ? 1 : 0;
  }
  if (unordered) return strcmp(op, "!=") == 0;
  if (!strcmp(op, "=")) return c == 0;
  if (!strcmp(op, "!=")) return c != 0;
  if (!strcmp(op, "<")) return c < 0;
  if (!strcmp(op, "<=")) return c <= 0;
  if (!strcmp(op, ">")) return c > 0;
  return c >= 0;
}

static void check_cmp(fsh_batch *b, const char *op, opnd x, opnd y) {
  char jx[128], jy[128], json[400];
  opnd_json(&x, jx, sizeof jx);
  opnd_json(&y, jy, sizeof jy);
  snprintf(json, sizeof json, "{\"op\":\"%s\",\"args\":[%s,%s]}", op, jx, jy);
  fsh_type_id t;
  fsh_array *got = run(b, json, &t);
  if (!got) return;
  int *want = malloc(sizeof *want * (size_t)(b->length + 1));
  for (int64_t k = 0; k < b->length; k++) want[k] = cmp_ref(op, get(b, &x, k), get(b, &y, k));
  eh_check_bools(got, want, b->length, json);
  free(want);
  fsh_array_unref(got);
}

static void test_compare_random(void) {
  const char *ops[] = {"=", "!=", "<", "<=", ">", ">="};
  for (int s = 0; s < 5; s++) {
    fsh_batch *b = eh_random_batch(200 + (uint64_t)s, sizes[s], cuts[s], false);
    for (int o = 0; o < 6; o++) {
      check_cmp(b, ops[o], OC("i32"), OC("i64"));
      check_cmp(b, ops[o], OC("i64"), OI(0));
      check_cmp(b, ops[o], OI(5), OC("i32"));
      check_cmp(b, ops[o], OC("f64"), OC("i32"));
      check_cmp(b, ops[o], OC("f64"), OF(1.5));
      check_cmp(b, ops[o], OC("u8"), OI(128));
      check_cmp(b, ops[o], OC("s"), OC("d"));
      check_cmp(b, ops[o], OC("d"), OC("s"));
      check_cmp(b, ops[o], OC("s"), OS("ab"));
      check_cmp(b, ops[o], OC("d"), OS("abc"));
      check_cmp(b, ops[o], OS("b"), OC("d"));
      check_cmp(b, ops[o], OC("b"), OC("b2"));
      check_cmp(b, ops[o], OC("b"), OB(true));
      check_cmp(b, ops[o], OC("dt"), OC("dt"));
      check_cmp(b, ops[o], OC("i64"), ON());
      check_cmp(b, ops[o], OI(3), OF(3.0));
    }
    /* date and timestamp literals through typed JSON */
    fsh_type_id t;
    fsh_array *got = run(b, "{\"op\":\"<\",\"args\":[{\"col\":\"dt\"},{\"lit\":\"2019-04-01\","
                            "\"type\":\"date32\"}]}", &t);
    int *want = malloc(sizeof *want * (size_t)(b->length + 1));
    opnd dt = OC("dt"), ts = OC("ts");
    for (int64_t k = 0; k < b->length; k++) {
      val v = get(b, &dt, k);
      want[k] = v.valid ? v.i < 17987 : -1; /* 2019-04-01 is day 17987 */
    }
    if (got) eh_check_bools(got, want, b->length, "dt < date");
    fsh_array_unref(got);
    got = run(b, "{\"op\":\">=\",\"args\":[{\"col\":\"ts\"},{\"lit\":1600000000025,"
                 "\"type\":\"timestamp\",\"unit\":\"ms\"}]}", &t);
    for (int64_t k = 0; k < b->length; k++) {
      val v = get(b, &ts, k);
      want[k] = v.valid ? v.i >= 1600000000025 : -1;
    }
    if (got) eh_check_bools(got, want, b->length, "ts >= literal");
    fsh_array_unref(got);
    free(want);
    fsh_batch_unref(b);
  }
}

/* ---- logic ----------------------------------------------------------------- */

static int and3(int a, int b) { return a == 0 || b == 0 ? 0 : a == 1 && b == 1 ? 1 : -1; }
static int or3(int a, int b) { return a == 1 || b == 1 ? 1 : a == 0 && b == 0 ? 0 : -1; }
static int not3(int a) { return a < 0 ? -1 : !a; }

static int bool_of(fsh_batch *b, const char *col, int64_t k) {
  opnd o = OC(col);
  val v = get(b, &o, k);
  return v.valid ? (int)v.i : -1;
}

static void test_logic_random(void) {
  for (int s = 0; s < 5; s++) {
    fsh_batch *b = eh_random_batch(300 + (uint64_t)s, sizes[s], cuts[s], false);
    int64_t n = b->length;
    int *want = malloc(sizeof *want * (size_t)(n + 1));
    const char *B1 = "{\"col\":\"b\"}", *B2 = "{\"col\":\"b2\"}";
    char json[512];
    fsh_type_id t;
    for (int v = 0; v < 6; v++) {
      const char *lit = v == 3 ? "{\"lit\":true}" : v == 4 ? "{\"lit\":false}" : "{\"lit\":null}";
      const char *other = v < 3 ? B2 : lit;
      const char *op = v % 2 ? "or" : "and";
      if (v == 2) op = "not";
      if (v == 2)
        snprintf(json, sizeof json, "{\"op\":\"not\",\"args\":[%s]}", B1);
      else
        snprintf(json, sizeof json, "{\"op\":\"%s\",\"args\":[%s,%s]}", op, B1, other);
      for (int64_t k = 0; k < n; k++) {
        int a = bool_of(b, "b", k);
        int c = v < 3 ? bool_of(b, "b2", k) : v == 3 ? 1 : v == 4 ? 0 : -1;
        want[k] = v == 2 ? not3(a) : !strcmp(op, "or") ? or3(a, c) : and3(a, c);
      }
      fsh_array *got = run(b, json, &t);
      if (got) eh_check_bools(got, want, n, json);
      fsh_array_unref(got);
    }
    /* three args, folded: b and b2 and (i32 > 0); b or (i64 < 0) or not b2 */
    snprintf(json, sizeof json,
             "{\"op\":\"and\",\"args\":[%s,%s,{\"op\":\">\",\"args\":[{\"col\":\"i32\"},{\"lit\":0}]}]}",
             B1, B2);
    opnd i32 = OC("i32"), i64 = OC("i64"), zero = OI(0);
    for (int64_t k = 0; k < n; k++)
      want[k] = and3(and3(bool_of(b, "b", k), bool_of(b, "b2", k)),
                     cmp_ref(">", get(b, &i32, k), get(b, &zero, k)));
    fsh_array *got = run(b, json, &t);
    if (got) eh_check_bools(got, want, n, json);
    fsh_array_unref(got);
    snprintf(json, sizeof json,
             "{\"op\":\"or\",\"args\":[%s,{\"op\":\"<\",\"args\":[{\"col\":\"i64\"},{\"lit\":0}]},"
             "{\"op\":\"not\",\"args\":[%s]}]}", B1, B2);
    for (int64_t k = 0; k < n; k++)
      want[k] = or3(or3(bool_of(b, "b", k), cmp_ref("<", get(b, &i64, k), get(b, &zero, k))),
                    not3(bool_of(b, "b2", k)));
    got = run(b, json, &t);
    if (got) eh_check_bools(got, want, n, json);
    fsh_array_unref(got);
    free(want);
    fsh_batch_unref(b);
  }
}

/* Truth tables: the 9 pairs of {true, false, null} as two 9-row columns,
 * and every pair of literals (constant folding path). */
static void test_truth_tables(void) {
  fsh_schema *s = eh_ok(fsh_schema_new(2));
  CHECK(fsh_field_init(&s->fields[0], "p", FSH_TYPE_BOOL, true) == 0);
  CHECK(fsh_field_init(&s->fields[1], "q", FSH_TYPE_BOOL, true) == 0);
  fsh_batch *b = eh_ok(fsh_batch_new(s, 9));
  fsh_schema_unref(s);
  const int tv[3] = {1, 0, -1};
  uint8_t pok[9], pv[9], qok[9], qv[9];
  for (int k = 0; k < 9; k++) {
    int p = tv[k / 3], q = tv[k % 3];
    pok[k] = p >= 0, pv[k] = p == 1, qok[k] = q >= 0, qv[k] = q == 1;
  }
  b->columns[0] = eh_bools(pok, pv, 9);
  b->columns[1] = eh_bools(qok, qv, 9);
  /* SQL's tables, written out. */
  const int and_t[9] = {1, 0, -1, 0, 0, 0, -1, 0, -1};
  const int or_t[9] = {1, 1, 1, 1, 0, -1, 1, -1, -1};
  const int not_t[9] = {0, 0, 0, 1, 1, 1, -1, -1, -1};
  const int isnull_t[9] = {0, 0, 0, 0, 0, 0, 1, 1, 1};
  fsh_type_id t;
  fsh_array *got = run(b, "{\"op\":\"and\",\"args\":[{\"col\":\"p\"},{\"col\":\"q\"}]}", &t);
  if (got) eh_check_bools(got, and_t, 9, "p and q");
  fsh_array_unref(got);
  got = run(b, "{\"op\":\"or\",\"args\":[{\"col\":\"p\"},{\"col\":\"q\"}]}", &t);
  if (got) eh_check_bools(got, or_t, 9, "p or q");
  fsh_array_unref(got);
  got = run(b, "{\"op\":\"not\",\"args\":[{\"col\":\"p\"}]}", &t);
  if (got) eh_check_bools(got, not_t, 9, "not p");
  fsh_array_unref(got);
  got = run(b, "{\"op\":\"is_null\",\"args\":[{\"col\":\"p\"}]}", &t);
  if (got) eh_check_bools(got, isnull_t, 9, "p is null");
  fsh_array_unref(got);
  /* literal pairs */
  const char *lits[3] = {"true", "false", "null"};
  for (int k = 0; k < 9; k++) {
    char json[256];
    int want[9];
    for (int op = 0; op < 2; op++) {
      snprintf(json, sizeof json, "{\"op\":\"%s\",\"args\":[{\"lit\":%s},{\"lit\":%s}]}",
               op ? "or" : "and", lits[k / 3], lits[k % 3]);
      for (int r = 0; r < 9; r++) want[r] = op ? or_t[k] : and_t[k];
      got = run(b, json, &t);
      if (got) eh_check_bools(got, want, 9, json);
      fsh_array_unref(got);
    }
    /* literal and column mixed */
    snprintf(json, sizeof json, "{\"op\":\"and\",\"args\":[{\"lit\":%s},{\"col\":\"q\"}]}",
             lits[k / 3]);
    for (int r = 0; r < 9; r++) want[r] = and3(tv[k / 3], tv[r % 3]);
    got = run(b, json, &t);
    if (got) eh_check_bools(got, want, 9, json);
    fsh_array_unref(got);
  }
  fsh_batch_unref(b);
}

/* ---- IS NULL, IN, BETWEEN -------------------------------------------------- */

static void test_is_null_in_between(void) {
  const char *cols[] = {"i32", "i64", "f64", "s", "d", "b", "dt", "u8", "ts", "nn"};
  for (int s = 0; s < 5; s++) {
    fsh_batch *b = eh_random_batch(400 + (uint64_t)s, sizes[s], cuts[s], false);
    int64_t n = b->length;
    int *want = malloc(sizeof *want * (size_t)(n + 1));
    char json[512];
    fsh_type_id t;
    for (int c = 0; c < 10; c++) {
      for (int neg = 0; neg < 2; neg++) {
        snprintf(json, sizeof json, "{\"op\":\"%s\",\"args\":[{\"col\":\"%s\"}]}",
                 neg ? "is_not_null" : "is_null", cols[c]);
        opnd o = OC(cols[c]);
        for (int64_t k = 0; k < n; k++) want[k] = get(b, &o, k).valid == (bool)neg;
        fsh_array *got = run(b, json, &t);
        if (got) eh_check_bools(got, want, n, json);
        fsh_array_unref(got);
      }
    }
    /* IN: numbers (with and without a null in the list), strings, floats */
    struct {
      const char *col, *list;
      int n_items;
      opnd items[4];
      bool has_null;
    } ins[] = {
        {"i32", "{\"lit\":1},{\"lit\":-5},{\"lit\":77}", 3, {OI(1), OI(-5), OI(77)}, false},
        {"i32", "{\"lit\":1},{\"lit\":null},{\"lit\":2}", 3, {OI(1), ON(), OI(2)}, true},
        {"s", "{\"lit\":\"a\"},{\"lit\":\"ab\"},{\"lit\":\"\"}", 3, {OS("a"), OS("ab"), OS("")}, false},
        {"d", "{\"lit\":\"abc\"},{\"lit\":\"zab\"},{\"lit\":null}", 3, {OS("abc"), OS("zab"), ON()}, true},
        {"f64", "{\"lit\":0.5},{\"lit\":3},{\"lit\":-2.25}", 3, {OF(0.5), OI(3), OF(-2.25)}, false},
        {"u8", "{\"lit\":255},{\"lit\":0}", 2, {OI(255), OI(0)}, false},
    };
    for (size_t q = 0; q < sizeof ins / sizeof ins[0]; q++) {
      snprintf(json, sizeof json, "{\"op\":\"in\",\"args\":[{\"col\":\"%s\"},%s]}", ins[q].col,
               ins[q].list);
      opnd o = OC(ins[q].col);
      for (int64_t k = 0; k < n; k++) {
        val v = get(b, &o, k);
        int r = 0;
        for (int j = 0; j < ins[q].n_items && r != 1; j++)
          if (cmp_ref("=", v, get(b, &ins[q].items[j], k)) == 1) r = 1;
        if (!v.valid) r = -1;
        else if (r == 0 && ins[q].has_null) r = -1;
        want[k] = r;
      }
      fsh_array *got = run(b, json, &t);
      if (got) eh_check_bools(got, want, n, json);
      fsh_array_unref(got);
    }
    /* BETWEEN, with columns, literals and a null bound */
    struct {
      opnd x, lo, hi;
    } bt[] = {{OC("i64"), OI(-100), OI(250)},  {OC("i32"), OC("nn"), OI(20)},
              {OC("f64"), OF(-1.5), OC("i32")}, {OC("s"), OS("ab"), OS("b")},
              {OC("d"), OS("abc"), OC("s")},    {OC("i32"), ON(), OI(0)}};
    for (size_t q = 0; q < sizeof bt / sizeof bt[0]; q++) {
      char jx[128], jl[128], jh[128];
      opnd_json(&bt[q].x, jx, sizeof jx);
      opnd_json(&bt[q].lo, jl, sizeof jl);
      opnd_json(&bt[q].hi, jh, sizeof jh);
      snprintf(json, sizeof json, "{\"op\":\"between\",\"args\":[%s,%s,%s]}", jx, jl, jh);
      for (int64_t k = 0; k < n; k++) {
        val v = get(b, &bt[q].x, k);
        want[k] = and3(cmp_ref(">=", v, get(b, &bt[q].lo, k)), cmp_ref("<=", v, get(b, &bt[q].hi, k)));
      }
      fsh_array *got = run(b, json, &t);
      if (got) eh_check_bools(got, want, n, json);
      fsh_array_unref(got);
    }
    free(want);
    fsh_batch_unref(b);
  }
}

/* ---- LIKE ------------------------------------------------------------------- */

/* Against eh_like, the naive reference of expr_helpers.h. */
static void test_like(void) {
  /* Patterns as JSON string bodies (escapes doubled for JSON). */
  const char *pats[] = {"ab%",  "%ab",  "%ab%", "ab",   "%",     "%%",   "",      "_",
                        "a_c",  "a%b",  "%a%b%", "_b%", "h_llo", "x\\\\%y", "a\\\\_c",
                        "%\\\\%%", "a\\\\\\\\b", "%b_", "__", "%_%_%", "ab%ab", "%\xc3\xa9%"};
  const char *raw[] = {"ab%",  "%ab",  "%ab%", "ab",   "%",     "%%",   "",      "_",
                       "a_c",  "a%b",  "%a%b%", "_b%", "h_llo", "x\\%y", "a\\_c",
                       "%\\%%", "a\\\\b", "%b_", "__", "%_%_%", "ab%ab", "%\xc3\xa9%"};
  for (int s = 0; s < 5; s++) {
    fsh_batch *b = eh_random_batch(500 + (uint64_t)s, sizes[s], cuts[s], false);
    int64_t n = b->length;
    int *want = malloc(sizeof *want * (size_t)(n + 1));
    for (size_t q = 0; q < sizeof pats / sizeof pats[0]; q++) {
      for (int c = 0; c < 2; c++) {
        const char *col = c ? "d" : "s";
        char json[256];
        snprintf(json, sizeof json, "{\"op\":\"like\",\"args\":[{\"col\":\"%s\"},{\"lit\":\"%s\"}]}",
                 col, pats[q]);
        opnd o = OC(col);
        for (int64_t k = 0; k < n; k++) {
          val v = get(b, &o, k);
          want[k] = v.valid ? eh_like(raw[q], (int64_t)strlen(raw[q]), v.s, v.sl) : -1;
        }
        fsh_type_id t;
        fsh_array *got = run(b, json, &t);
        if (got) eh_check_bools(got, want, n, json);
        fsh_array_unref(got);
      }
    }
    free(want);
    fsh_batch_unref(b);
  }
}

/* Hand-checked edge cases of the matcher itself (independent of the
 * reference above). */
static void test_like_edges(void) {
  struct {
    const char *p, *s;
    bool m;
  } cases[] = {
      {"", "", true},          {"", "a", false},        {"%", "", true},
      {"_", "", false},        {"_", "\xc3\xa9", true}, {"__", "\xc3\xa9", false},
      {"a%", "a", true},       {"%a", "ba", true},      {"%a%", "bab", true},
      {"a%a", "a", false},     {"a%a", "aa", true},     {"%ab%cd%", "xabycdz", true},
      {"%ab%cd%", "xcdyab", false}, {"a\\%", "a%", true}, {"a\\%", "ab", false},
      {"a\\_", "a_", true},    {"a\\_", "ab", false},   {"\\\\", "\\", true},
      {"%%%a", "bba", true},   {"a_%_b", "axyb", true}, {"a_%_b", "axb", false},
      {"%aab", "aaab", true},  {"h_llo", "h\xc3\xa9llo", true}, {"A%", "abc", false},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fsh_error err;
    fsh_expr *e = fsh_expr_call2(FSH_EXPR_LIKE, fsh_expr_string(cases[k].s, -1),
                                 fsh_expr_string(cases[k].p, -1));
    fsh_schema *s = eh_ok(fsh_schema_new(0));
    fsh_batch *b = eh_ok(fsh_batch_new(s, 3));
    fsh_array *got = NULL;
    CHECK_OK(fsh_expr_bind(e, s, &err));
    CHECK_OK(fsh_expr_eval(e, b, &got, &err));
    int want[3] = {cases[k].m, cases[k].m, cases[k].m};
    char what[128];
    snprintf(what, sizeof what, "'%s' like '%s'", cases[k].s, cases[k].p);
    if (got) eh_check_bools(got, want, 3, what);
    CHECK_MSG(eh_like(cases[k].p, (int64_t)strlen(cases[k].p), cases[k].s,
                       (int64_t)strlen(cases[k].s)) == cases[k].m, "reference: %s", what);
    fsh_array_unref(got);
    fsh_batch_unref(b);
    fsh_schema_unref(s);
    fsh_expr_free(e);
  }
}

/* ---- CAST ------------------------------------------------------------------- */

static void test_cast(void) {
  for (int s = 0; s < 5; s++) {
    fsh_batch *b = eh_random_batch(600 + (uint64_t)s, sizes[s], cuts[s], s % 2 == 1);
    int64_t n = b->length;
    struct {
      const char *col, *to;
      fsh_type_id t;
      int64_t lo, hi;
    } cs[] = {{"i64", "int8", FSH_TYPE_INT8, INT8_MIN, INT8_MAX},
              {"i32", "uint8", FSH_TYPE_UINT8, 0, UINT8_MAX},
              {"f64", "int32", FSH_TYPE_INT32, INT32_MIN, INT32_MAX},
              {"i64", "float64", FSH_TYPE_FLOAT64, 0, 0},
              {"u8", "int16", FSH_TYPE_INT16, INT16_MIN, INT16_MAX},
              {"b", "int64", FSH_TYPE_INT64, INT64_MIN, INT64_MAX},
              {"i32", "bool", FSH_TYPE_BOOL, 0, 0},
              {"f64", "float32", FSH_TYPE_FLOAT32, 0, 0}};
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
      char json[256];
      snprintf(json, sizeof json,
               "{\"op\":\"cast\",\"args\":[{\"col\":\"%s\"}],\"type\":\"%s\",\"on_error\":\"null\"}",
               cs[q].col, cs[q].to);
      fsh_type_id t;
      fsh_array *got = run(b, json, &t);
      if (!got) continue;
      CHECK_EQ_INT(t, cs[q].t);
      fsh_field f = {.name = (char *)"r", .type = t};
      opnd o = OC(cs[q].col);
      int bad = 0;
      for (int64_t k = 0; k < n && bad < 3; k++) {
        val v = get(b, &o, k);
        bool valid = v.valid, same;
        if (t == FSH_TYPE_FLOAT64 || t == FSH_TYPE_FLOAT32) {
          double w = v.isf ? v.f : (double)v.i;
          if (t == FSH_TYPE_FLOAT32) w = (float)w;
          same = eh_valid(&f, got, k) == valid &&
                 (!valid || eh_float(&f, got, k) == w || (isnan(w) && isnan(eh_float(&f, got, k))));
        } else if (t == FSH_TYPE_BOOL) {
          same = eh_valid(&f, got, k) == valid && (!valid || eh_int(&f, got, k) == (v.i != 0));
        } else {
          int64_t w = 0;
          if (valid && v.isf) {
            if (isnan(v.f) || v.f < (double)cs[q].lo - 0.999 || v.f > (double)cs[q].hi + 0.999) valid = false;
            else w = (int64_t)v.f;
          } else if (valid) {
            w = v.i;
            if (w < cs[q].lo || w > cs[q].hi) valid = false;
          }
          same = eh_valid(&f, got, k) == valid && (!valid || eh_int(&f, got, k) == w);
        }
        if (!same) {
          bad++;
          CHECK_MSG(same, "%s row %lld", json, (long long)k);
        }
      }
      fsh_array_unref(got);
    }
    fsh_batch_unref(b);
  }
}

/* ---- filter and project ----------------------------------------------------- */

static void test_filter_project(void) {
  fsh_error err;
  int64_t saved = fsh_expr_select_rows;
  for (int s = 0; s < 15; s++) {
    /* predicates run in slices: the default, and slices of 64 and 128 rows
     * so that batches cross slice boundaries */
    fsh_expr_select_rows = s < 5 ? saved : s < 10 ? 64 : 130;
    fsh_batch *b = eh_random_batch(700 + (uint64_t)s, sizes[s % 5], cuts[s % 5], false);
    int64_t n = b->length;
    const char *pred_json =
        "{\"op\":\"or\",\"args\":[{\"op\":\"and\",\"args\":[{\"op\":\">\",\"args\":[{\"col\":\"i32\"},"
        "{\"lit\":10}]},{\"op\":\"like\",\"args\":[{\"col\":\"d\"},{\"lit\":\"%b%\"}]}]},"
        "{\"op\":\"is_null\",\"args\":[{\"col\":\"f64\"}]}]}";
    fsh_expr *pred = NULL;
    CHECK_OK(fsh_expr_from_json(pred_json, -1, &pred, &err));
    CHECK_OK(fsh_expr_bind(pred, b->schema, &err));
    fsh_batch *got = NULL;
    CHECK_OK(fsh_expr_filter(pred, b, &got, &err));
    int64_t *rows = malloc(sizeof *rows * (size_t)(n + 1));
    int64_t m = 0;
    opnd i32 = OC("i32"), ten = OI(10), d = OC("d"), f64 = OC("f64");
    for (int64_t k = 0; k < n; k++) {
      val dv = get(b, &d, k);
      int like = dv.valid ? eh_like("%b%", 3, dv.s, dv.sl) : -1;
      int r = or3(and3(cmp_ref(">", get(b, &i32, k), get(b, &ten, k)), like),
                  get(b, &f64, k).valid ? 0 : 1);
      if (r == 1) rows[m++] = k;
    }
    fsh_batch *want = NULL;
    CHECK_OK(fsh_take(b, rows, m, &want, &err));
    if (got && want) {
      CHECK_OK(fsh_batch_validate(got, true, &err));
      CHECK_MSG(fsh_batch_equals(want, got, &err), "filter: %s", err.message);
    }
    fsh_batch_unref(want);
    fsh_batch_unref(got);
    fsh_expr_free(pred);
    free(rows);

    /* project: a column as is (dictionary kept), arithmetic, a comparison,
     * a literal */
    const char *names[4] = {"dd", "sum", "big", "one"};
    fsh_expr *ex[4] = {
        fsh_expr_col("d"),
        fsh_expr_null_on_error(fsh_expr_call2(FSH_EXPR_MUL, fsh_expr_col("i64"), fsh_expr_col("i32"))),
        fsh_expr_call2(FSH_EXPR_GT, fsh_expr_col("f64"), fsh_expr_float(FSH_TYPE_FLOAT64, 2.5)),
        fsh_expr_int(FSH_TYPE_INT32, 1)};
    fsh_schema *os = NULL;
    CHECK_OK(fsh_project_schema(b->schema, 4, names, ex, &os, &err));
    fsh_batch *p = NULL;
    if (os) CHECK_OK(fsh_project(b, os, 4, ex, &p, &err));
    if (p) {
      CHECK_OK(fsh_batch_validate(p, true, &err));
      CHECK_EQ_INT(p->length, n);
      CHECK(strcmp(os->fields[0].name, "dd") == 0 && os->fields[0].dictionary != NULL);
      CHECK(p->columns[0] == b->columns[eh_col(b, "d")]);
      CHECK_EQ_INT(os->fields[1].type, FSH_TYPE_INT64);
      CHECK_EQ_INT(os->fields[2].type, FSH_TYPE_BOOL);
      CHECK_EQ_INT(os->fields[3].type, FSH_TYPE_INT32);
      opnd i64 = OC("i64");
      for (int64_t k = 0; k < n; k++) {
        val x = get(b, &i64, k), y = get(b, &i32, k);
        bool valid = x.valid && y.valid;
        CHECK(eh_valid(&os->fields[1], p->columns[1], k) == valid);
        if (valid) CHECK_EQ_INT(eh_int(&os->fields[1], p->columns[1], k), x.i * y.i);
        CHECK_EQ_INT(eh_int(&os->fields[3], p->columns[3], k), 1);
        CHECK(eh_valid(&os->fields[3], p->columns[3], k));
      }
    }
    fsh_batch_unref(p);
    fsh_schema_unref(os);
    for (int k = 0; k < 4; k++) fsh_expr_free(ex[k]);
    fsh_batch_unref(b);
  }
  fsh_expr_select_rows = saved;
}

/* Literal and constant roots become full columns of their type. */
static void test_constant_roots(void) {
  fsh_error err;
  fsh_batch *b = eh_random_batch(800, 37, 2, false);
  struct {
    const char *json;
    fsh_type_id t;
  } cases[] = {{"{\"lit\":\"h\\u00e9\"}", FSH_TYPE_STRING},
               {"{\"lit\":null}", FSH_TYPE_NA},
               {"{\"lit\":null,\"type\":\"utf8\"}", FSH_TYPE_STRING},
               {"{\"lit\":null,\"type\":\"float32\"}", FSH_TYPE_FLOAT32},
               {"{\"lit\":true}", FSH_TYPE_BOOL},
               {"{\"lit\":-7,\"type\":\"int16\"}", FSH_TYPE_INT16},
               {"{\"lit\":2.5,\"type\":\"float32\"}", FSH_TYPE_FLOAT32},
               {"{\"lit\":\"2000-03-01\",\"type\":\"date32\"}", FSH_TYPE_DATE32},
               {"{\"op\":\"+\",\"args\":[{\"lit\":2},{\"lit\":3}]}", FSH_TYPE_INT64},
               {"{\"op\":\"<\",\"args\":[{\"lit\":2},{\"lit\":3.5}]}", FSH_TYPE_BOOL},
               {"{\"op\":\"+\",\"args\":[{\"col\":\"i32\"},{\"lit\":null}]}", FSH_TYPE_INT64},
               {"{\"op\":\"cast\",\"type\":\"uint8\",\"args\":[{\"lit\":300}],\"on_error\":\"null\"}",
                FSH_TYPE_UINT8}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fsh_type_id t = FSH_TYPE_NA;
    fsh_array *got = run(b, cases[k].json, &t);
    if (!got) continue;
    CHECK_EQ_INT(t, cases[k].t);
    CHECK_EQ_INT(got->length, b->length);
    fsh_field f = {.name = (char *)"r", .type = t};
    bool null_col = k == 1 || k == 2 || k == 3 || k == 10 || k == 11;
    CHECK_EQ_INT(fsh_array_null_count(got), null_col ? b->length : 0);
    for (int64_t r = 0; r < b->length && !null_col; r++) {
      if (t == FSH_TYPE_STRING) {
        const char *p;
        int64_t len;
        eh_str(&f, got, r, &p, &len);
        CHECK(len == 3 && memcmp(p, "h\xc3\xa9", 3) == 0);
      } else if (t == FSH_TYPE_FLOAT32) {
        CHECK(eh_float(&f, got, r) == 2.5);
      } else {
        int64_t want = k == 4 ? 1 : k == 5 ? -7 : k == 7 ? 11017 : k == 8 ? 5 : 1;
        CHECK_EQ_INT(eh_int(&f, got, r), want);
      }
    }
    fsh_array_unref(got);
  }
  (void)err;
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_constant_roots), TEST(test_arith_random), TEST(test_compare_random), TEST(test_logic_random),
              TEST(test_truth_tables), TEST(test_is_null_in_between), TEST(test_like),
              TEST(test_like_edges), TEST(test_cast), TEST(test_filter_project))
