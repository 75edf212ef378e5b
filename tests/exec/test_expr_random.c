/* test_expr_random.c -- random expression trees (arithmetic, casts,
 * comparisons, AND/OR/NOT, IS NULL, IN, BETWEEN, LIKE over random sliced
 * batches with nulls and a dictionary column) evaluated by the library and
 * by a per-row interpreter written here: results, or the error class when
 * a node without null_on_error fails on a row holding values. Catches what
 * single-operator tests cannot: results of one kernel feeding another
 * (scalars, all-null vectors, reused buffers, dictionary shortcuts). */
#include "exec/exec_internal.h"
#include "exec/expr_helpers.h"

#include <errno.h>
#include <inttypes.h>

/* ---- the test's own tree and interpreter -------------------------------- */

enum { T_INT, T_FLT, T_BOOL, T_STR };
enum { R_NULL, R_INT, R_FLT, R_BOOL, R_STR, R_ERR };

typedef struct node {
  const char *op; /* "col", "lit", or an operator name */
  int type;       /* T_* of the result */
  const char *col;
  int lit;        /* R_* of a literal */
  int64_t i;
  double f;
  const char *s;
  bool null_on_error;
  const char *cast_to;
  int n;
  struct node *args[5];
} node;

typedef struct rv {
  int t;
  int64_t i;
  double f;
  const char *s;
  int64_t sl;
} rv;

static node pool[4096];
static int used;
static uint64_t st;

static node *mk(const char *op, int type) {
  if (used >= 4096) abort();
  node *x = &pool[used++];
  memset(x, 0, sizeof *x);
  x->op = op;
  x->type = type;
  return x;
}

static unsigned rnd(unsigned n) { return (unsigned)(eh_rand(&st) % n); }

static node *gen(int type, int depth);

static node *leaf(int type) {
  node *x;
  bool lit = rnd(3) == 0;
  if (!lit) {
    x = mk("col", type);
    static const char *ints[] = {"i32", "i64", "u8", "nn"}, *strs[] = {"s", "d"},
                      *bools[] = {"b", "b2"};
    x->col = type == T_INT ? ints[rnd(4)] : type == T_FLT ? "f64" : type == T_STR ? strs[rnd(2)]
                                                                                 : bools[rnd(2)];
    return x;
  }
  x = mk("lit", type);
  if (rnd(8) == 0) {
    x->lit = R_NULL;
    return x;
  }
  switch (type) {
  case T_INT:
    x->lit = R_INT;
    x->i = rnd(10) == 0 ? INT64_MAX - (int64_t)rnd(3) : (int64_t)rnd(21) - 10;
    break;
  case T_FLT:
    x->lit = R_FLT;
    x->f = (double)((int)rnd(41) - 20) / 4.0;
    break;
  case T_BOOL:
    x->lit = R_BOOL;
    x->i = rnd(2);
    break;
  default:
    x->lit = R_STR;
    x->s = eh_words[rnd(EH_N_WORDS)];
    break;
  }
  return x;
}

static node *gen(int type, int depth) {
  if (depth <= 0 || rnd(4) == 0) return leaf(type);
  node *x;
  switch (type) {
  case T_INT:
    if (rnd(6) == 0) {
      x = mk("cast", T_INT);
      static const char *tos[] = {"int8", "int16", "int32", "int64", "uint8"};
      x->cast_to = tos[rnd(5)];
      x->n = 1;
      x->args[0] = gen(rnd(2) ? T_INT : T_FLT, depth - 1);
      x->null_on_error = rnd(4) != 0;
      return x;
    } else {
      static const char *ops[] = {"+", "-", "*", "/", "%"};
      x = mk(ops[rnd(5)], T_INT);
      x->n = 2;
      x->args[0] = gen(T_INT, depth - 1);
      x->args[1] = gen(T_INT, depth - 1);
      x->null_on_error = rnd(4) != 0;
      return x;
    }
  case T_FLT: {
    static const char *ops[] = {"+", "-", "*", "/", "%"};
    x = mk(ops[rnd(5)], T_FLT);
    x->n = 2;
    int k = rnd(2);
    x->args[k] = gen(T_FLT, depth - 1);
    x->args[1 - k] = gen(rnd(2) ? T_INT : T_FLT, depth - 1);
    return x;
  }
  case T_STR:
    return leaf(T_STR);
  default: { /* T_BOOL */
    unsigned c = rnd(8);
    if (c == 0 || c == 1) {
      static const char *ops[] = {"=", "!=", "<", "<=", ">", ">="};
      x = mk(ops[rnd(6)], T_BOOL);
      x->n = 2;
      int t = (int)rnd(3);
      int ta = t == 2 ? T_STR : t == 1 ? T_FLT : T_INT, tb = ta;
      if (ta != T_STR && rnd(2)) tb = rnd(2) ? T_INT : T_FLT;
      x->args[0] = gen(ta, depth - 1);
      x->args[1] = gen(tb, depth - 1);
    } else if (c == 2 || c == 3) {
      x = mk(rnd(2) ? "and" : "or", T_BOOL);
      x->n = 2 + (int)rnd(2);
      for (int k = 0; k < x->n; k++) x->args[k] = gen(T_BOOL, depth - 1);
    } else if (c == 4) {
      x = mk(rnd(3) ? "not" : rnd(2) ? "is_null" : "is_not_null", T_BOOL);
      x->n = 1;
      x->args[0] = gen(strcmp(x->op, "not") == 0 ? T_BOOL : (int)rnd(4), depth - 1);
    } else if (c == 5) {
      x = mk("in", T_BOOL);
      int t = rnd(2) ? T_INT : T_STR;
      x->args[0] = gen(t, depth - 1);
      x->n = 2 + (int)rnd(3);
      for (int k = 1; k < x->n; k++) { /* literals only, now and then a null */
        node *l = x->args[k] = mk("lit", t);
        l->lit = rnd(6) == 0 ? R_NULL : t == T_INT ? R_INT : R_STR;
        l->i = (int64_t)rnd(11) - 5;
        l->s = eh_words[rnd(EH_N_WORDS)];
      }
    } else if (c == 6) {
      x = mk("between", T_BOOL);
      x->n = 3;
      for (int k = 0; k < 3; k++) x->args[k] = gen(k == 0 || rnd(2) ? T_INT : T_FLT, depth - 1);
    } else {
      x = mk("like", T_BOOL);
      x->n = 2;
      x->args[0] = gen(T_STR, depth - 1);
      node *p = mk("lit", T_STR);
      static const char *pats[] = {"a%", "%b", "%ab%", "a_c", "%", "_", "", "ab", "%a%b%", "h_llo"};
      p->lit = rnd(10) ? R_STR : R_NULL;
      p->s = pats[rnd(10)];
      x->args[1] = p;
    }
    return x;
  }
  }
}

static void to_json(const node *x, char *buf, size_t size, size_t *len) {
#define PUT(...) (*len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, __VA_ARGS__))
  if (!strcmp(x->op, "col")) {
    PUT("{\"col\":\"%s\"}", x->col);
  } else if (!strcmp(x->op, "lit")) {
    switch (x->lit) {
    case R_NULL: PUT("{\"lit\":null}"); break;
    case R_INT: PUT("{\"lit\":%" PRId64 "}", x->i); break;
    case R_FLT: PUT("{\"lit\":%.17g,\"type\":\"float64\"}", x->f); break;
    case R_BOOL: PUT("{\"lit\":%s}", x->i ? "true" : "false"); break;
    default: {
      PUT("{\"lit\":\"");
      for (const char *c = x->s; *c; c++) PUT(*c == '\\' || *c == '"' ? "\\%c" : "%c", *c);
      PUT("\"}");
    }
    }
  } else {
    PUT("{\"op\":\"%s\",", x->op);
    if (x->cast_to) PUT("\"type\":\"%s\",", x->cast_to);
    if (x->null_on_error) PUT("\"on_error\":\"null\",");
    PUT("\"args\":[");
    for (int k = 0; k < x->n; k++) {
      if (k) PUT(",");
      to_json(x->args[k], buf, size, len);
    }
    PUT("]}");
  }
#undef PUT
}

/* ---- the interpreter -------------------------------------------------------- */

static const fsh_batch *B;

static rv column_value(const char *name, int64_t k) {
  int c = eh_col(B, name);
  const fsh_field *f = &B->schema->fields[c];
  const fsh_array *a = B->columns[c];
  rv r = {R_NULL, 0, 0, NULL, 0};
  if (!eh_valid(f, a, k)) return r;
  fsh_type_id t = f->dictionary ? f->dictionary->value.type : f->type;
  if (t == FSH_TYPE_STRING) {
    r.t = R_STR;
    eh_str(f, a, k, &r.s, &r.sl);
  } else if (t == FSH_TYPE_FLOAT64) {
    r.t = R_FLT;
    r.f = eh_float(f, a, k);
  } else if (t == FSH_TYPE_BOOL) {
    r.t = R_BOOL;
    r.i = eh_int(f, a, k);
  } else {
    r.t = R_INT;
    r.i = eh_int(f, a, k);
  }
  return r;
}


static double as_f(rv v) { return v.t == R_FLT ? v.f : (double)v.i; }

/* -1 / 0 / 1 or 2 when unordered (NaN). */
static int cmp3(rv a, rv b) {
  if (a.t == R_STR) {
    for (int64_t k = 0; k < a.sl && k < b.sl; k++)
      if (a.s[k] != b.s[k]) return (unsigned char)a.s[k] < (unsigned char)b.s[k] ? -1 : 1;
    return a.sl < b.sl ? -1 : a.sl > b.sl;
  }
  if (a.t == R_FLT || b.t == R_FLT) {
    double x = as_f(a), y = as_f(b);
    if (isnan(x) || isnan(y)) return 2;
    return x < y ? -1 : x > y;
  }
  return a.i < b.i ? -1 : a.i > b.i;
}

static rv B3(int v) { return v < 0 ? (rv){R_NULL, 0, 0, NULL, 0} : (rv){R_BOOL, v, 0, NULL, 0}; }
static int tv(rv v) { return v.t == R_NULL ? -1 : (int)v.i; }

static rv eval_ref(const node *x, int64_t k) {
  rv nul = {R_NULL, 0, 0, NULL, 0}, err = {R_ERR, 0, 0, NULL, 0};
  if (!strcmp(x->op, "col")) return column_value(x->col, k);
  if (!strcmp(x->op, "lit")) {
    rv r = {x->lit, x->i, x->f, x->s, x->s ? (int64_t)strlen(x->s) : 0};
    if (x->lit == R_BOOL) r.i = x->i;
    return r;
  }
  rv a[5];
  for (int j = 0; j < x->n; j++) {
    a[j] = eval_ref(x->args[j], k);
    if (a[j].t == R_ERR) return err;
  }
  const char *op = x->op;
  if (!strcmp(op, "+") || !strcmp(op, "-") || !strcmp(op, "*") || !strcmp(op, "/") ||
      !strcmp(op, "%")) {
    if (a[0].t == R_NULL || a[1].t == R_NULL) return nul;
    if (x->type == T_FLT) {
      double p = as_f(a[0]), q = as_f(a[1]);
      double r = *op == '+' ? p + q : *op == '-' ? p - q : *op == '*' ? p * q : *op == '/' ? p / q
                                                                               : fmod(p, q);
      return (rv){R_FLT, 0, r, NULL, 0};
    }
    __int128 p = a[0].i, q = a[1].i, r;
    if ((*op == '/' || *op == '%') && q == 0) return x->null_on_error ? nul : err;
    r = *op == '+' ? p + q : *op == '-' ? p - q : *op == '*' ? p * q : *op == '/' ? p / q : p % q;
    if (r > INT64_MAX || r < INT64_MIN) return x->null_on_error ? nul : err;
    return (rv){R_INT, (int64_t)r, 0, NULL, 0};
  }
  if (!strcmp(op, "cast")) {
    if (a[0].t == R_NULL) return nul;
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (!strcmp(x->cast_to, "int8")) lo = INT8_MIN, hi = INT8_MAX;
    if (!strcmp(x->cast_to, "int16")) lo = INT16_MIN, hi = INT16_MAX;
    if (!strcmp(x->cast_to, "int32")) lo = INT32_MIN, hi = INT32_MAX;
    if (!strcmp(x->cast_to, "uint8")) lo = 0, hi = UINT8_MAX;
    int64_t v;
    if (a[0].t == R_FLT) {
      double f = a[0].f;
      if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
        return x->null_on_error ? nul : err;
      v = (int64_t)f;
    } else {
      v = a[0].i;
    }
    if (v < lo || v > hi) return x->null_on_error ? nul : err;
    return (rv){R_INT, v, 0, NULL, 0};
  }
  if (strlen(op) <= 2 && strchr("=!<>", op[0])) {
    if (a[0].t == R_NULL || a[1].t == R_NULL) return nul;
    int c = cmp3(a[0], a[1]);
    if (c == 2) return B3(!strcmp(op, "!="));
    int r = !strcmp(op, "=") ? c == 0 : !strcmp(op, "!=") ? c != 0 : !strcmp(op, "<") ? c < 0
            : !strcmp(op, "<=") ? c <= 0 : !strcmp(op, ">") ? c > 0 : c >= 0;
    return B3(r);
  }
  if (!strcmp(op, "and") || !strcmp(op, "or")) {
    int acc = tv(a[0]);
    for (int j = 1; j < x->n; j++) {
      int b = tv(a[j]);
      if (!strcmp(op, "and")) acc = acc == 0 || b == 0 ? 0 : acc == 1 && b == 1 ? 1 : -1;
      else acc = acc == 1 || b == 1 ? 1 : acc == 0 && b == 0 ? 0 : -1;
    }
    return B3(acc);
  }
  if (!strcmp(op, "not")) return B3(a[0].t == R_NULL ? -1 : !a[0].i);
  if (!strcmp(op, "is_null")) return B3(a[0].t == R_NULL);
  if (!strcmp(op, "is_not_null")) return B3(a[0].t != R_NULL);
  if (!strcmp(op, "in")) {
    if (a[0].t == R_NULL) return nul;
    bool has_null = false;
    for (int j = 1; j < x->n; j++) {
      if (a[j].t == R_NULL) {
        has_null = true;
        continue;
      }
      if (cmp3(a[0], a[j]) == 0) return B3(1);
    }
    return B3(has_null ? -1 : 0);
  }
  if (!strcmp(op, "between")) {
    int ge = a[0].t == R_NULL || a[1].t == R_NULL ? -1 : cmp3(a[0], a[1]);
    int le = a[0].t == R_NULL || a[2].t == R_NULL ? -1 : cmp3(a[0], a[2]);
    int g = a[0].t == R_NULL || a[1].t == R_NULL ? -1 : ge == 2 ? 0 : ge >= 0;
    int l = a[0].t == R_NULL || a[2].t == R_NULL ? -1 : le == 2 ? 0 : le <= 0;
    return B3(g == 0 || l == 0 ? 0 : g == 1 && l == 1 ? 1 : -1);
  }
  if (!strcmp(op, "like")) {
    if (a[0].t == R_NULL || a[1].t == R_NULL) return nul;
    return B3(eh_like(a[1].s, a[1].sl, a[0].s, a[0].sl));
  }
  abort();
}

/* ---- the test ------------------------------------------------------------- */

static void test_random_trees(void) {
  st = 12345;
  int n_trees = getenv("EXPR_TREES") ? atoi(getenv("EXPR_TREES")) : 2000, n_errors = 0, n_checked = 0;
  fsh_batch *b = NULL;
  int64_t saved = fsh_expr_select_rows;
  for (int t = 0; t < n_trees; t++) {
    if (t % 20 == 0) {
      fsh_batch_unref(b);
      int64_t sizes[] = {0, 1, 9, 100, 700, 2000};
      b = eh_random_batch(900 + (uint64_t)t, sizes[rnd(6)], rnd(9), rnd(3) == 0);
      B = b;
      fsh_expr_select_rows = rnd(2) ? saved : 64 * (1 + rnd(4));
    }
    used = 0;
    static const int types[] = {T_BOOL, T_BOOL, T_INT, T_FLT};
    node *root = gen(types[rnd(4)], 1 + (int)rnd(4));
    char json[16384];
    size_t len = 0;
    to_json(root, json, sizeof json, &len);
    if (len >= sizeof json) continue;
    fsh_error err;
    fsh_expr *e = NULL;
    int rc = fsh_expr_from_json(json, (int64_t)len, &e, &err);
    if (rc == 0) rc = fsh_expr_bind(e, b->schema, &err);
    CHECK_MSG(rc == 0, "%s: %s", json, err.message);
    if (rc != 0) {
      fsh_expr_free(e);
      continue;
    }
    /* reference */
    bool want_err = false;
    rv *want = malloc(sizeof *want * (size_t)(b->length + 1));
    for (int64_t k = 0; k < b->length; k++) {
      want[k] = eval_ref(root, k);
      want_err |= want[k].t == R_ERR;
    }
    fsh_array *got = NULL;
    rc = fsh_expr_eval(e, b, &got, &err);
    if (want_err) {
      n_errors++;
      CHECK_MSG(rc == EOVERFLOW || rc == EDOM, "%s: want an error, got %d", json, rc);
    } else {
      n_checked++;
      CHECK_MSG(rc == 0, "%s: %s", json, err.message);
    }
    if (rc == 0 && !want_err && got) {
      fsh_field f = {.name = (char *)"r", .type = fsh_expr_type(e)};
      CHECK_MSG(fsh_array_validate(&f, got, true, &err) == 0, "%s: %s", json, err.message);
      int bad = 0;
      for (int64_t k = 0; k < b->length && bad < 2; k++) {
        bool gv = f.type != FSH_TYPE_NA && eh_valid(&f, got, k);
        bool same = gv == (want[k].t != R_NULL);
        if (same && gv) {
          if (f.type == FSH_TYPE_FLOAT64) {
            double g = eh_float(&f, got, k), w = as_f(want[k]);
            same = g == w || (isnan(g) && isnan(w));
          } else {
            same = eh_int(&f, got, k) == want[k].i;
          }
        }
        if (!same) {
          bad++;
          CHECK_MSG(same, "%s: row %lld of %lld: got %s, want type %d value %lld / %g", json,
                    (long long)k, (long long)b->length, gv ? "a value" : "null", want[k].t,
                    (long long)want[k].i, want[k].f);
        }
      }
      /* a boolean tree as a filter: the rows where the reference is true */
      if (f.type == FSH_TYPE_BOOL || f.type == FSH_TYPE_NA) {
        uint8_t *sel = calloc((size_t)fsh_bytes_for_bits(b->length) + 1, 1);
        int64_t count = -1, want_count = 0;
        CHECK_OK(fsh_expr_select(e, b, sel, &count, &err));
        for (int64_t k = 0; k < b->length; k++) {
          bool w = want[k].t == R_BOOL && want[k].i;
          want_count += w;
          if (fsh_bit_get(sel, k) != w) {
            CHECK_MSG(false, "%s: selection row %lld", json, (long long)k);
            break;
          }
        }
        CHECK_EQ_INT(count, want_count);
        free(sel);
      }
    }
    fsh_array_unref(got);
    free(want);
    fsh_expr_free(e);
  }
  fsh_expr_select_rows = saved;
  fsh_batch_unref(b);
  /* the generator must exercise both outcomes */
  CHECK_MSG(n_errors > 5 && n_checked > 200, "%d error trees, %d checked", n_errors, n_checked);
  if (getenv("EXPR_STATS")) printf("%d error trees, %d checked\n", n_errors, n_checked);
}

FSH_TEST_MAIN(TEST(test_random_trees))
