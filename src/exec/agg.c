/* agg.c -- the hash aggregate: groups rows by key columns through the row
 * set and keeps per-group states (counts, sums, min/max, distinct values),
 * in one phase or as partial and final phases around an exchange. */
#include "exec/hashops_internal.h"

#include "arrow/numeric.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* What an accumulator does with its input column, per row. */
typedef enum op {
  OP_COUNT_ROWS,    /* cnt++ */
  OP_COUNT_VALID,   /* cnt++ for a non-null value */
  OP_COUNT_SUM,     /* cnt += value (final phase of counts) */
  OP_SUM_I64,       /* i64 += value, cnt++ (overflow: EOVERFLOW) */
  OP_SUM_U64,       /* u64 += value, cnt++ */
  OP_SUM_F64,       /* f64 += value, cnt++ */
  OP_SUM_D128,      /* d128 += value, cnt++ (beyond 38 digits: EOVERFLOW) */
  OP_MIN,           /* in i64 / u64 / f64 / d128 / d256 / the arena, by `num`;
                     * dictionaries by value */
  OP_MAX,
  OP_DISTINCT,      /* (group, value) into the distinct set */
  OP_DISTINCT_LIST  /* (group, each element of a list) into the distinct set */
} op;

typedef enum num { N_I64, N_U64, N_F64, N_BIN, N_D128, N_D256 } num;

typedef struct acc {
  op op;
  num num;              /* how values are read and kept */
  int32_t col;          /* column of the pushed batches */
  const fsh_field *in;  /* its field in the input schema of pushes */
  fsh_field *state;     /* the partial-schema field of this state */
  bool null_if_empty;   /* partial column: null when cnt == 0 */
  int64_t *cnt;
  int64_t *i64;
  uint64_t *u64;
  double *f64;
  uint8_t *d128; /* 16 bytes a group: decimal128 values (little-endian) */
  uint8_t *d256; /* 32 bytes a group: decimal256 values (little-endian) */
  int64_t *boff, *blen, *bcap; /* N_BIN: value of group g at arena[boff, +blen) */
  uint8_t *arena;
  int64_t arena_len, arena_cap;
  hs_rowset *distinct;        /* rows (group id, value) */
  fsh_schema *distinct_schema; /* { group: int64, value } */
} acc;

struct fsh_hash_agg {
  fsh_agg_mode mode;
  int n_keys;
  int32_t *keys;         /* key columns in the pushed batches */
  fsh_schema *in_schema; /* what pushes carry (the partial schema in FINAL) */
  fsh_schema *partial;   /* the partial schema */
  fsh_schema *out;       /* the result's schema */
  fsh_agg_spec *specs;
  int n_specs;
  int *first_acc;        /* spec i -> its first accumulator */
  acc *accs;
  int n_accs;
  hs_rowset *groups;     /* NULL for a global aggregate */
  int64_t n_groups, cap;
  int64_t budget;
  bool failed, finished;
};

/* ---- types ----------------------------------------------------------------- */

static const char *fn_name(fsh_agg_fn fn) {
  static const char *names[] = {"count", "count", "count_distinct", "sum", "avg", "min", "max"};
  return (unsigned)fn < 7 ? names[fn] : "?";
}

/* The integer type values of a temporal/integer type are read as, or NA. */
static fsh_type_id int_storage(fsh_type_id t) {
  switch (t) {
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32: return t;
    case FSH_TYPE_DATE32: case FSH_TYPE_TIME32: return FSH_TYPE_INT32;
    case FSH_TYPE_DATE64: case FSH_TYPE_TIME64: case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION:
      return FSH_TYPE_INT64;
    default: return FSH_TYPE_NA;
  }
}

static bool is_float(fsh_type_id t) {
  return t == FSH_TYPE_FLOAT16 || t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT64;
}

static bool is_binary(fsh_type_id t) {
  return t == FSH_TYPE_BINARY || t == FSH_TYPE_STRING || t == FSH_TYPE_LARGE_BINARY ||
         t == FSH_TYPE_LARGE_STRING;
}

static double read_f64(fsh_type_id t, const uint8_t *p, int64_t i) {
  if (t == FSH_TYPE_FLOAT64 || t == FSH_TYPE_FLOAT32 || t == FSH_TYPE_FLOAT16)
    return fsh_float_value(t, p, i);
  if (t == FSH_TYPE_UINT64) {
    uint64_t u;
    memcpy(&u, p + 8 * i, 8);
    return (double)u;
  }
  return (double)fsh_kern_read_int(int_storage(t), p, i);
}

/* 10^38: decimal128 sums must stay below it in magnitude. */
#define DEC38 ((__int128)10000000000000000000ull * (__int128)10000000000000000000ull)

static double dec_to_double(const uint8_t *p, int64_t i, int32_t scale) {
  __int128 v;
  memcpy(&v, p + 16 * i, 16);
  return (double)v / pow(10.0, scale);
}

static uint64_t read_u64(fsh_type_id t, const uint8_t *p, int64_t i) {
  if (t == FSH_TYPE_UINT64) {
    uint64_t u;
    memcpy(&u, p + 8 * i, 8);
    return u;
  }
  return (uint64_t)fsh_kern_read_int(t, p, i);
}

/* ---- construction ------------------------------------------------------- */

static int set_field(fsh_field *f, const char *name, fsh_type_id t, bool nullable, fsh_error *err) {
  return fsh_field_init(f, name, t, nullable) != 0 ? hs_oom(err) : 0;
}

/* f := copy of src's type named `name`, nullable. */
static int copy_field(fsh_field *f, const fsh_field *src, const char *name, fsh_error *err) {
  if (fsh_field_copy(f, src) != 0) return hs_oom(err);
  char *n = fsh_strdup(name);
  if (!n) return hs_oom(err);
  fsh_free(f->name);
  f->name = n;
  f->nullable = true;
  return 0;
}

static fsh_type_id sum_type(fsh_type_id t) {
  return is_float(t) ? FSH_TYPE_FLOAT64
         : t == FSH_TYPE_UINT8 || t == FSH_TYPE_UINT16 || t == FSH_TYPE_UINT32 ||
                 t == FSH_TYPE_UINT64
             ? FSH_TYPE_UINT64
             : FSH_TYPE_INT64;
}

/* Checks that spec s applies to input field f; ENOTSUP/EINVAL naming it. */
static int check_spec(const fsh_agg_spec *s, const fsh_field *f, fsh_error *err) {
  char t[128];
  fsh_field_type_to_string(f, t, sizeof t);
  fsh_type_id ty = f->type;
  bool ok = true;
  switch (s->fn) {
    case FSH_AGG_COUNT_STAR: case FSH_AGG_COUNT: break;
    case FSH_AGG_COUNT_DISTINCT: { /* whatever fsh_row_keys can compare */
      fsh_schema *one = NULL;
      fsh_batch *empty = NULL;
      fsh_row_keys *rk = NULL;
      int32_t zero = 0;
      int rc = hs_project_schema(&(fsh_schema){.n_fields = 1, .fields = (fsh_field *)f}, &zero, 1,
                                 &one, err);
      if (rc == 0) rc = hs_null_batch(one, 0, &empty, err);
      if (rc == 0) rc = fsh_row_keys_new(empty, &zero, 1, NULL, &rk, err);
      fsh_row_keys_free(rk);
      fsh_batch_unref(empty);
      fsh_schema_unref(one);
      if (rc == ENOTSUP) ok = false;
      else if (rc != 0) return rc;
      break;
    }
    case FSH_AGG_SUM: case FSH_AGG_AVG:
      ok = !f->dictionary && (int_storage(ty) == ty || ty == FSH_TYPE_UINT64 || is_float(ty) ||
                              ty == FSH_TYPE_DECIMAL128);
      break;
    case FSH_AGG_MIN: case FSH_AGG_MAX: { /* dictionaries: by value */
      const fsh_field *vf = f->dictionary ? &f->dictionary->value : f;
      fsh_type_id vt = vf->type;
      ok = !vf->dictionary && (int_storage(vt) != FSH_TYPE_NA || vt == FSH_TYPE_UINT64 ||
                               is_float(vt) || is_binary(vt) || vt == FSH_TYPE_DECIMAL128 ||
                               vt == FSH_TYPE_DECIMAL256);
      break;
    }
    default: return fsh_error_set(err, EINVAL, "unknown aggregate function %d", (int)s->fn);
  }
  if (!ok)
    return fsh_error_set(err, ENOTSUP, "%s of column '%s': type %s is not supported",
                         fn_name(s->fn), f->name, t);
  return 0;
}

static num num_of(const fsh_field *f) {
  if (is_float(f->type)) return N_F64;
  if (is_binary(f->type)) return N_BIN;
  if (f->type == FSH_TYPE_DECIMAL128) return N_D128;
  if (f->type == FSH_TYPE_DECIMAL256) return N_D256;
  if (f->type == FSH_TYPE_UINT8 || f->type == FSH_TYPE_UINT16 || f->type == FSH_TYPE_UINT32 ||
      f->type == FSH_TYPE_UINT64)
    return N_U64;
  return N_I64;
}

static op sum_op(fsh_type_id t) {
  fsh_type_id s = sum_type(t);
  return s == FSH_TYPE_FLOAT64 ? OP_SUM_F64 : s == FSH_TYPE_UINT64 ? OP_SUM_U64 : OP_SUM_I64;
}

/* Builds the partial schema, the output schema and the accumulators. */
static int plan(fsh_hash_agg *a, fsh_schema *input, const fsh_agg_spec *specs, fsh_error *err) {
  int n_state = a->n_keys, n_acc = 0;
  for (int i = 0; i < a->n_specs; i++) n_state += a->specs[i].fn == FSH_AGG_AVG ? 2 : 1;
  n_acc = n_state - a->n_keys;
  a->partial = fsh_schema_new(n_state);
  a->out = fsh_schema_new(a->n_keys + a->n_specs);
  a->accs = fsh_calloc((size_t)(n_acc ? n_acc : 1), sizeof(acc));
  a->first_acc = fsh_calloc((size_t)(a->n_specs ? a->n_specs : 1), sizeof(int));
  if (!a->partial || !a->out || !a->accs || !a->first_acc) return hs_oom(err);
  a->n_accs = n_acc;
  for (int k = 0; k < a->n_keys; k++) {
    if (fsh_field_copy(&a->partial->fields[k], &input->fields[a->keys[k]]) != 0 ||
        fsh_field_copy(&a->out->fields[k], &input->fields[a->keys[k]]) != 0)
      return hs_oom(err);
  }
  int pc = a->n_keys, ac = 0;
  bool final = a->mode == FSH_AGG_FINAL;
  for (int i = 0; i < a->n_specs; i++) {
    const fsh_agg_spec *s = &specs[i];
    const fsh_field *f = s->fn == FSH_AGG_COUNT_STAR ? NULL : &input->fields[s->column];
    char name[512], sub[600];
    if (s->name) snprintf(name, sizeof name, "%s", s->name);
    else if (!f) snprintf(name, sizeof name, "count(*)");
    else snprintf(name, sizeof name, "%s(%s)", fn_name(s->fn), f->name);
    fsh_field *o = &a->out->fields[a->n_keys + i];
    a->first_acc[i] = ac;
    acc *x = &a->accs[ac];
    x->col = final ? pc : (f ? s->column : 0);
    x->in = f;
    x->state = &a->partial->fields[pc];
    int rc = 0;
    switch (s->fn) {
      case FSH_AGG_COUNT_STAR: case FSH_AGG_COUNT:
        x->op = final ? OP_COUNT_SUM : s->fn == FSH_AGG_COUNT ? OP_COUNT_VALID : OP_COUNT_ROWS;
        rc = set_field(x->state, name, FSH_TYPE_INT64, false, err);
        if (rc == 0) rc = set_field(o, name, FSH_TYPE_INT64, false, err);
        break;
      case FSH_AGG_SUM:
        x->null_if_empty = true;
        if (f->type == FSH_TYPE_DECIMAL128) { /* decimal128(38, the input's scale) */
          x->op = OP_SUM_D128;
          rc = set_field(x->state, name, FSH_TYPE_DECIMAL128, true, err);
          if (rc == 0) rc = set_field(o, name, FSH_TYPE_DECIMAL128, true, err);
          x->state->precision = o->precision = 38;
          x->state->scale = o->scale = f->scale;
          break;
        }
        x->op = sum_op(f->type);
        rc = set_field(x->state, name, sum_type(f->type), true, err);
        if (rc == 0) rc = set_field(o, name, sum_type(f->type), true, err);
        break;
      case FSH_AGG_MIN: case FSH_AGG_MAX: { /* the value type of a dictionary */
        const fsh_field *vf = f->dictionary ? &f->dictionary->value : f;
        x->op = s->fn == FSH_AGG_MIN ? OP_MIN : OP_MAX;
        x->num = num_of(vf);
        x->null_if_empty = true;
        rc = copy_field(x->state, vf, name, err);
        if (rc == 0) rc = copy_field(o, vf, name, err);
        break;
      }
      case FSH_AGG_AVG: {
        x->op = OP_SUM_F64;
        snprintf(sub, sizeof sub, "%s#sum", name);
        rc = set_field(x->state, sub, FSH_TYPE_FLOAT64, false, err);
        acc *y = &a->accs[++ac];
        pc++;
        y->op = final ? OP_COUNT_SUM : OP_COUNT_VALID;
        y->col = final ? pc : s->column;
        y->in = f;
        y->state = &a->partial->fields[pc];
        snprintf(sub, sizeof sub, "%s#count", name);
        if (rc == 0) rc = set_field(y->state, sub, FSH_TYPE_INT64, false, err);
        if (rc == 0) rc = set_field(o, name, FSH_TYPE_FLOAT64, true, err);
        break;
      }
      case FSH_AGG_COUNT_DISTINCT: {
        x->op = final ? OP_DISTINCT_LIST : OP_DISTINCT;
        snprintf(sub, sizeof sub, "%s#values", name);
        rc = set_field(x->state, sub, FSH_TYPE_LIST, false, err);
        if (rc == 0 && fsh_field_alloc_children(x->state, 1) != 0) rc = hs_oom(err);
        if (rc == 0) rc = copy_field(&x->state->children[0], f, "item", err);
        if (rc == 0) rc = set_field(o, name, FSH_TYPE_INT64, false, err);
        fsh_schema *ds = rc == 0 ? fsh_schema_new(2) : NULL;
        if (rc == 0 && !ds) rc = hs_oom(err);
        if (rc == 0) rc = set_field(&ds->fields[0], "group", FSH_TYPE_INT64, false, err);
        if (rc == 0) rc = copy_field(&ds->fields[1], f, "value", err);
        x->distinct_schema = ds;
        if (rc == 0) rc = hs_rowset_new(ds, &x->distinct, err);
        break;
      }
    }
    if (rc != 0) return rc;
    ac++;
    pc++;
  }
  return 0;
}

static void acc_reset(acc *x) {
  fsh_free(x->cnt);
  fsh_free(x->i64);
  fsh_free(x->u64);
  fsh_free(x->f64);
  fsh_free(x->d128);
  fsh_free(x->d256);
  fsh_free(x->boff);
  fsh_free(x->blen);
  fsh_free(x->bcap);
  fsh_free(x->arena);
  hs_rowset_free(x->distinct);
  fsh_schema_unref(x->distinct_schema);
}

void fsh_hash_agg_free(fsh_hash_agg *a) {
  if (!a) return;
  for (int i = 0; a->accs && i < a->n_accs; i++) acc_reset(&a->accs[i]);
  fsh_free(a->accs);
  fsh_free(a->first_acc);
  fsh_free(a->specs);
  fsh_free(a->keys);
  hs_rowset_free(a->groups);
  fsh_schema_unref(a->in_schema);
  fsh_schema_unref(a->partial);
  fsh_schema_unref(a->out);
  fsh_free(a);
}

int fsh_hash_agg_new(fsh_schema *input, const int32_t *key_cols, int n_keys,
                     const fsh_agg_spec *aggs, int n_aggs, fsh_agg_mode mode,
                     int64_t memory_budget, fsh_hash_agg **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!input || !out || n_keys < 0 || n_aggs < 0 || (n_keys > 0 && !key_cols) ||
      (n_aggs > 0 && !aggs) || (unsigned)mode > FSH_AGG_FINAL)
    return fsh_error_set(err, EINVAL, "hash aggregate: NULL argument or bad count");
  for (int k = 0; k < n_keys; k++)
    if (key_cols[k] < 0 || key_cols[k] >= input->n_fields)
      return fsh_error_set(err, EINVAL, "hash aggregate: key %d is column %d of %lld", k,
                           key_cols[k], (long long)input->n_fields);
  for (int i = 0; i < n_aggs; i++) {
    if (aggs[i].fn == FSH_AGG_COUNT_STAR) continue;
    if (aggs[i].column < 0 || aggs[i].column >= input->n_fields)
      return fsh_error_set(err, EINVAL, "hash aggregate: aggregate %d (%s) reads column %d of %lld",
                           i, fn_name(aggs[i].fn), aggs[i].column, (long long)input->n_fields);
    FSH_RETURN_NOT_OK(check_spec(&aggs[i], &input->fields[aggs[i].column], err));
  }
  fsh_hash_agg *a = fsh_calloc(1, sizeof *a);
  if (!a) return hs_oom(err);
  a->mode = mode;
  a->n_keys = n_keys;
  a->n_specs = n_aggs;
  a->budget = memory_budget;
  a->keys = fsh_malloc((size_t)(n_keys ? n_keys : 1) * sizeof(int32_t));
  a->specs = fsh_malloc((size_t)(n_aggs ? n_aggs : 1) * sizeof(fsh_agg_spec));
  int rc = !a->keys || !a->specs ? hs_oom(err) : 0;
  if (rc == 0) {
    if (n_keys) memcpy(a->keys, key_cols, (size_t)n_keys * sizeof(int32_t));
    if (n_aggs) memcpy(a->specs, aggs, (size_t)n_aggs * sizeof(fsh_agg_spec));
    for (int i = 0; i < n_aggs; i++) a->specs[i].name = NULL; /* names live in the schemas */
    rc = plan(a, input, aggs, err);
  }
  if (rc == 0) {
    a->in_schema = fsh_schema_ref(mode == FSH_AGG_FINAL ? a->partial : input);
    if (mode == FSH_AGG_FINAL) /* in the partial schema the keys come first */
      for (int k = 0; k < n_keys; k++) a->keys[k] = k;
    /* accumulators read fields of the pushed schema */
    for (int i = 0; i < a->n_accs; i++)
      a->accs[i].in = a->accs[i].op == OP_COUNT_ROWS ? NULL : &a->in_schema->fields[a->accs[i].col];
  }
  if (rc == 0 && n_keys > 0) {
    fsh_schema *ks = NULL;
    fsh_batch *empty = NULL;
    fsh_row_keys *rk = NULL;
    rc = hs_project_schema(a->in_schema, a->keys, n_keys, &ks, err);
    /* every key type must be comparable: tried on an empty batch */
    if (rc == 0) rc = hs_null_batch(ks, 0, &empty, err);
    int32_t *ident = rc == 0 ? fsh_malloc((size_t)n_keys * sizeof(int32_t)) : NULL;
    if (rc == 0 && !ident) rc = hs_oom(err);
    for (int k = 0; rc == 0 && k < n_keys; k++) ident[k] = k;
    if (rc == 0) rc = fsh_row_keys_new(empty, ident, n_keys, NULL, &rk, err);
    fsh_free(ident);
    if (rc == 0) rc = hs_rowset_new(ks, &a->groups, err);
    fsh_row_keys_free(rk);
    fsh_batch_unref(empty);
    fsh_schema_unref(ks);
  }
  if (rc != 0) {
    fsh_hash_agg_free(a);
    return fsh_error_prefix(err, rc, "hash aggregate: ");
  }
  *out = a;
  return 0;
}

fsh_schema *fsh_hash_agg_input_schema(const fsh_hash_agg *a) { return a->in_schema; }
fsh_schema *fsh_hash_agg_output_schema(const fsh_hash_agg *a) {
  return a->mode == FSH_AGG_PARTIAL ? a->partial : a->out;
}
int64_t fsh_hash_agg_groups(const fsh_hash_agg *a) { return a->n_groups; }

int64_t fsh_hash_agg_memory(const fsh_hash_agg *a) {
  int64_t t = a->groups ? hs_rowset_memory(a->groups) : 0;
  for (int i = 0; i < a->n_accs; i++) {
    const acc *x = &a->accs[i];
    t += a->cap * 8 * ((x->cnt != NULL) + (x->i64 != NULL) + (x->u64 != NULL) +
                       (x->f64 != NULL) + 2 * (x->d128 != NULL) + 4 * (x->d256 != NULL) +
                       3 * (x->boff != NULL));
    t += x->arena_cap + (x->distinct ? hs_rowset_memory(x->distinct) : 0);
  }
  return t;
}

/* ---- updates -------------------------------------------------------------- */

/* Grows every state array to hold n groups. */
static int reserve_groups(fsh_hash_agg *a, int64_t n, fsh_error *err) {
  if (n <= a->cap) return 0;
  int64_t cap = a->cap ? a->cap : 16;
  while (cap < n) cap *= 2;
  for (int i = 0; i < a->n_accs; i++) {
    acc *x = &a->accs[i];
    int64_t c;
    c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->cnt, &c, cap, 8, err));
    bool minmax = x->op == OP_MIN || x->op == OP_MAX;
    if (x->op == OP_SUM_I64 || (minmax && x->num == N_I64)) {
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->i64, &c, cap, 8, err));
    }
    if (x->op == OP_SUM_U64 || (minmax && x->num == N_U64)) {
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->u64, &c, cap, 8, err));
    }
    if (x->op == OP_SUM_F64 || (minmax && x->num == N_F64)) {
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->f64, &c, cap, 8, err));
    }
    if (x->op == OP_SUM_D128 || (minmax && x->num == N_D128)) {
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->d128, &c, cap, 16, err));
    }
    if (minmax && x->num == N_D256) {
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->d256, &c, cap, 32, err));
    }
    if (minmax && x->num == N_BIN) {
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->boff, &c, cap, 8, err));
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->blen, &c, cap, 8, err));
      c = a->cap; FSH_RETURN_NOT_OK(hs_grow((void **)&x->bcap, &c, cap, 8, err));
    }
  }
  a->cap = cap;
  return 0;
}

/* Value slot `abs` of column (f, c) is non-null (dictionaries: by value). */
static bool value_valid(const fsh_field *f, const fsh_array *c, int64_t abs) {
  if (!kern_slot_valid(f, c, abs)) return false;
  if (!f->dictionary) return true;
  int64_t d = c->dictionary->offset + fsh_kern_read_int(f->type, kern_buf(c, 1), abs);
  return kern_slot_valid(&f->dictionary->value, c->dictionary, d);
}

static int update_bin(acc *x, int64_t g, const uint8_t *v, int64_t len, fsh_error *err) {
  if (x->cnt[g] > 0) {
    int64_t m = len < x->blen[g] ? len : x->blen[g];
    int c = m ? memcmp(v, x->arena + x->boff[g], (size_t)m) : 0;
    if (c == 0) c = len < x->blen[g] ? -1 : len > x->blen[g];
    if (x->op == OP_MIN ? c >= 0 : c <= 0) return 0;
  }
  if (x->cnt[g] == 0 || len > x->bcap[g]) {
    FSH_RETURN_NOT_OK(hs_grow((void **)&x->arena, &x->arena_cap, x->arena_len + len + 1, 1, err));
    x->boff[g] = x->arena_len;
    x->bcap[g] = len;
    x->arena_len += len;
  }
  if (len) memcpy(x->arena + x->boff[g], v, (size_t)len);
  x->blen[g] = len;
  x->cnt[g]++;
  return 0;
}

/* Two's-complement little-endian 256-bit integers: < 0, 0, > 0. */
static int cmp_d256(const uint8_t *x, const uint8_t *y) {
  int64_t hx, hy;
  memcpy(&hx, x + 24, 8);
  memcpy(&hy, y + 24, 8);
  if (hx != hy) return hx < hy ? -1 : 1;
  for (int limb = 2; limb >= 0; limb--) {
    uint64_t lx, ly;
    memcpy(&lx, x + 8 * limb, 8);
    memcpy(&ly, y + 8 * limb, 8);
    if (lx != ly) return lx < ly ? -1 : 1;
  }
  return 0;
}

/* MIN/MAX: the valid value at absolute slot s of array va (of the plain
 * field vf: a dictionary's value) into group g. */
static int minmax_one(acc *x, int64_t g, const fsh_field *vf, const fsh_array *va, int64_t s,
                      fsh_error *err) {
  const uint8_t *p = kern_buf(va, 1);
  fsh_type_id t = vf->type;
  bool mn = x->op == OP_MIN, first = x->cnt[g] == 0;
  switch (x->num) {
    case N_I64: {
      int64_t v = fsh_kern_read_int(int_storage(t), p, s);
      if (first || (mn ? v < x->i64[g] : v > x->i64[g])) x->i64[g] = v;
      break;
    }
    case N_U64: {
      uint64_t v = read_u64(t, p, s);
      if (first || (mn ? v < x->u64[g] : v > x->u64[g])) x->u64[g] = v;
      break;
    }
    case N_D128: {
      __int128 v, cur;
      memcpy(&v, p + 16 * s, 16);
      memcpy(&cur, x->d128 + 16 * g, 16);
      if (first || (mn ? v < cur : v > cur)) memcpy(x->d128 + 16 * g, &v, 16);
      break;
    }
    case N_D256: {
      int c = first ? 0 : cmp_d256(p + 32 * s, x->d256 + 32 * g);
      if (first || (mn ? c < 0 : c > 0)) memcpy(x->d256 + 32 * g, p + 32 * s, 32);
      break;
    }
    case N_F64: {
      double v = read_f64(t, p, s);
      x->f64[g] = first ? v : mn ? fmin(x->f64[g], v) : fmax(x->f64[g], v);
      break;
    }
    case N_BIN: {
      int w = kern_offset_width(t);
      int64_t b = kern_read_offset(p, s, w), e = kern_read_offset(p, s + 1, w);
      return update_bin(x, g, kern_buf(va, 2) + b, e - b, err); /* counts */
    }
  }
  x->cnt[g]++;
  return 0;
}

/* A batch of (group id, value) rows for the distinct set: gid[0, n) and
 * the column `values` (n rows). */
static int distinct_insert(acc *x, const int64_t *gid, int64_t n, fsh_array *values,
                           int64_t *scratch, fsh_error *err) {
  fsh_batch *b = fsh_batch_new(x->distinct_schema, n);
  fsh_array *g = fsh_array_new(2, 0);
  fsh_buffer *gb = fsh_buffer_copy(gid, n * 8);
  if (!b || !g || !gb) {
    fsh_batch_unref(b);
    fsh_array_unref(g);
    fsh_buffer_unref(gb);
    return hs_oom(err);
  }
  g->length = n;
  g->null_count = 0;
  g->buffers[1] = gb;
  b->columns[0] = g;
  b->columns[1] = fsh_array_ref(values);
  static const int32_t cols[2] = {0, 1};
  int rc = hs_rowset_intern(x->distinct, b, cols, true, true, scratch, err);
  fsh_batch_unref(b);
  return rc;
}

static int update_distinct_list(acc *x, const fsh_array *c, const int64_t *gid, int64_t n,
                                fsh_error *err) {
  const uint8_t *offs = kern_buf(c, 1);
  int64_t first = kern_read_i32(offs, c->offset), last = kern_read_i32(offs, c->offset + n);
  int64_t m = last - first;
  if (m == 0) return 0;
  int64_t *egid = fsh_malloc((size_t)m * 8);
  int64_t *escratch = fsh_malloc((size_t)m * 8);
  fsh_array *vals = fsh_array_slice(c->children[0], first, m);
  int rc = 0;
  if (!egid || !escratch || !vals) rc = hs_oom(err);
  for (int64_t i = 0; rc == 0 && i < n; i++) {
    int64_t s = kern_read_i32(offs, c->offset + i), e = kern_read_i32(offs, c->offset + i + 1);
    for (int64_t k = s; k < e; k++) egid[k - first] = gid[i];
  }
  if (rc == 0) rc = distinct_insert(x, egid, m, vals, escratch, err);
  fsh_array_unref(vals);
  fsh_free(egid);
  fsh_free(escratch);
  return rc;
}

static int update(acc *x, fsh_batch *b, const int64_t *gid, int64_t *scratch, fsh_error *err) {
  int64_t n = b->length;
  if (x->op == OP_COUNT_ROWS) {
    for (int64_t i = 0; i < n; i++) {
      if (i + 8 < n) __builtin_prefetch(&x->cnt[gid[i + 8]]);
      x->cnt[gid[i]]++;
    }
    return 0;
  }
  fsh_array *c = b->columns[x->col];
  const fsh_field *f = x->in;
  if (x->op == OP_DISTINCT) return distinct_insert(x, gid, n, c, scratch, err);
  if (x->op == OP_DISTINCT_LIST) return update_distinct_list(x, c, gid, n, err);
  const uint8_t *valid = kern_buf(c, 0), *p = kern_buf(c, 1);
  int64_t off = c->offset;
  fsh_type_id t = f->type, it = int_storage(t);
  void *vals = x->i64 ? (void *)x->i64 : x->u64 ? (void *)x->u64 : (void *)x->f64;
  for (int64_t i = 0; i < n; i++) {
    int64_t abs = off + i, g = gid[i];
    if (i + 8 < n) { /* many groups: the states are far apart */
      __builtin_prefetch(&x->cnt[gid[i + 8]]);
      if (vals) __builtin_prefetch((char *)vals + 8 * gid[i + 8]);
    }
    if (x->op == OP_COUNT_VALID) {
      if (value_valid(f, c, abs)) x->cnt[g]++;
      continue;
    }
    if (valid && !fsh_bit_get(valid, abs)) continue;
    if ((x->op == OP_MIN || x->op == OP_MAX) && f->dictionary) { /* by value */
      const fsh_array *va = c->dictionary;
      int64_t d = va->offset + fsh_kern_read_int(t, p, abs);
      if (kern_slot_valid(&f->dictionary->value, va, d))
        FSH_RETURN_NOT_OK(minmax_one(x, g, &f->dictionary->value, va, d, err));
      continue;
    }
    switch (x->op) {
      case OP_COUNT_SUM: x->cnt[g] += fsh_kern_read_int(FSH_TYPE_INT64, p, abs); break;
      case OP_SUM_I64:
        if (__builtin_add_overflow(x->i64[g], fsh_kern_read_int(it, p, abs), &x->i64[g]))
          return fsh_error_set(err, EOVERFLOW, "sum of column '%s' overflows int64", f->name);
        x->cnt[g]++;
        break;
      case OP_SUM_U64:
        if (__builtin_add_overflow(x->u64[g], read_u64(t, p, abs), &x->u64[g]))
          return fsh_error_set(err, EOVERFLOW, "sum of column '%s' overflows uint64", f->name);
        x->cnt[g]++;
        break;
      case OP_SUM_F64:
        x->f64[g] += t == FSH_TYPE_DECIMAL128 ? dec_to_double(p, abs, f->scale)
                                              : read_f64(t, p, abs);
        x->cnt[g]++;
        break;
      case OP_SUM_D128: {
        __int128 acc_v, v;
        memcpy(&acc_v, x->d128 + 16 * g, 16);
        memcpy(&v, p + 16 * abs, 16);
        if (__builtin_add_overflow(acc_v, v, &acc_v) || acc_v >= DEC38 || acc_v <= -DEC38)
          return fsh_error_set(err, EOVERFLOW, "sum of column '%s' overflows decimal128(38)",
                               f->name);
        memcpy(x->d128 + 16 * g, &acc_v, 16);
        x->cnt[g]++;
        break;
      }
      case OP_MIN: case OP_MAX: FSH_RETURN_NOT_OK(minmax_one(x, g, f, c, abs, err)); break;
      default: break;
    }
  }
  return 0;
}

static int push(fsh_hash_agg *a, fsh_batch *b, fsh_error *err) {
  fsh_error diff;
  if (b->n_columns != a->in_schema->n_fields)
    return fsh_error_set(err, EINVAL, "the batch has %lld columns, the aggregate reads %lld",
                         (long long)b->n_columns, (long long)a->in_schema->n_fields);
  for (int64_t c = 0; c < b->n_columns; c++)
    if (!fsh_field_type_equals(&b->schema->fields[c], &a->in_schema->fields[c], &diff))
      return fsh_error_set(err, EINVAL, "column %lld ('%s') differs in type: %s", (long long)c,
                           b->schema->fields[c].name, diff.message);
  int64_t n = b->length;
  int64_t *gid = fsh_calloc((size_t)(n ? n : 1), 8);
  int64_t *scratch = fsh_malloc((size_t)(n ? n : 1) * 8);
  int rc = !gid || !scratch ? hs_oom(err) : 0;
  if (rc == 0 && a->groups) {
    rc = hs_rowset_intern(a->groups, b, a->keys, true, false, gid, err);
    if (rc == 0) a->n_groups = hs_rowset_count(a->groups);
  } else if (rc == 0) {
    a->n_groups = 1;
  }
  if (rc == 0) rc = reserve_groups(a, a->n_groups, err);
  for (int i = 0; rc == 0 && i < a->n_accs; i++) rc = update(&a->accs[i], b, gid, scratch, err);
  fsh_free(gid);
  fsh_free(scratch);
  return rc;
}

int fsh_hash_agg_push(fsh_hash_agg *a, fsh_batch *b, fsh_error *err) {
  if (!a || !b) return fsh_error_set(err, EINVAL, "hash aggregate: NULL argument");
  if (a->failed || a->finished)
    return fsh_error_set(err, EINVAL, "hash aggregate: %s",
                         a->failed ? "failed earlier" : "already finished");
  int rc = push(a, b, err);
  if (rc != 0) {
    a->failed = true;
    return fsh_error_prefix(err, rc, "hash aggregate: ");
  }
  int64_t held = fsh_hash_agg_memory(a);
  if (a->budget > 0 && held > a->budget)
    return fsh_error_set(err, EFBIG,
                         "hash aggregate: holds %lld bytes (%lld groups), over its budget of "
                         "%lld bytes",
                         (long long)held, (long long)a->n_groups, (long long)a->budget);
  return 0;
}

/* ---- results -------------------------------------------------------------- */

/* A fixed-width array of n values of width w (bytes) from `vals`, with
 * validity from cnt > 0 when with_nulls. Takes no ownership. */
static int fixed_array(const void *vals, int64_t n, int w, const int64_t *cnt, bool with_nulls,
                       fsh_array **out, fsh_error *err) {
  fsh_array *r = fsh_array_new(2, 0);
  if (!r) return hs_oom(err);
  r->length = n;
  r->null_count = 0;
  r->buffers[1] = fsh_buffer_new(n * w, true);
  if (!r->buffers[1]) goto oom;
  if (vals) memcpy(r->buffers[1]->data, vals, (size_t)(n * w));
  if (with_nulls) {
    int64_t nulls = 0;
    for (int64_t g = 0; g < n; g++) nulls += cnt[g] == 0;
    if (nulls) {
      r->buffers[0] = fsh_buffer_new(fsh_bytes_for_bits(n), true);
      if (!r->buffers[0]) goto oom;
      for (int64_t g = 0; g < n; g++)
        if (cnt[g]) fsh_bit_set(r->buffers[0]->data, g, true);
      r->null_count = nulls;
    }
  }
  *out = r;
  return 0;
oom:
  fsh_array_unref(r);
  return hs_oom(err);
}

/* MIN/MAX in the type of field f: values narrowed to its width. */
static int minmax_array(const acc *x, const fsh_field *f, int64_t n, fsh_array **out,
                        fsh_error *err) {
  if (x->num == N_BIN) {
    int w = kern_offset_width(f->type);
    int64_t total = 0;
    for (int64_t g = 0; g < n; g++) total += x->cnt[g] ? x->blen[g] : 0;
    if (w == 4 && total > INT32_MAX)
      return fsh_error_set(err, EOVERFLOW, "column '%s': %lld bytes need a large type", f->name,
                           (long long)total);
    fsh_array *r = NULL;
    FSH_RETURN_NOT_OK(fixed_array(NULL, n, 0, x->cnt, true, &r, err)); /* validity */
    fsh_buffer_unref(r->buffers[1]);
    r->buffers[1] = NULL;
    fsh_array *s = fsh_array_new(3, 0);
    fsh_buffer *offs = fsh_buffer_new((n + 1) * w, true), *data = fsh_buffer_new(total, false);
    if (!s || !offs || !data) {
      fsh_array_unref(r);
      fsh_array_unref(s);
      fsh_buffer_unref(offs);
      fsh_buffer_unref(data);
      return hs_oom(err);
    }
    int64_t at = 0;
    for (int64_t g = 0; g < n; g++) {
      if (x->cnt[g]) {
        memcpy(data->data + at, x->arena + x->boff[g], (size_t)x->blen[g]);
        at += x->blen[g];
      }
      if (w == 4) {
        int32_t o = (int32_t)at;
        memcpy(offs->data + 4 * (g + 1), &o, 4);
      } else {
        memcpy(offs->data + 8 * (g + 1), &at, 8);
      }
    }
    s->length = n;
    s->null_count = r->null_count;
    s->buffers[0] = r->buffers[0];
    r->buffers[0] = NULL;
    r->buffers[1] = NULL;
    fsh_array_unref(r);
    s->buffers[1] = offs;
    s->buffers[2] = data;
    *out = s;
    return 0;
  }
  int w = (int)(fsh_type_bit_width(f) / 8);
  uint8_t *tmp = fsh_malloc((size_t)(n ? n : 1) * (size_t)w);
  if (!tmp) return hs_oom(err);
  for (int64_t g = 0; g < n; g++) {
    uint8_t *d = tmp + g * w;
    if (x->num == N_D128) {
      memcpy(d, x->d128 + 16 * g, 16);
    } else if (x->num == N_D256) {
      memcpy(d, x->d256 + 32 * g, 32);
    } else if (x->num == N_I64) {
      memcpy(d, &x->i64[g], (size_t)w); /* little-endian: the low bytes */
    } else if (x->num == N_U64) {
      memcpy(d, &x->u64[g], (size_t)w);
    } else if (f->type == FSH_TYPE_FLOAT64) {
      memcpy(d, &x->f64[g], 8);
    } else if (f->type == FSH_TYPE_FLOAT32) {
      float v = (float)x->f64[g];
      memcpy(d, &v, 4);
    } else {
      uint16_t v = fsh_float_to_half((float)x->f64[g]);
      memcpy(d, &v, 2);
    }
  }
  int rc = fixed_array(tmp, n, w, x->cnt, true, out, err);
  fsh_free(tmp);
  return rc;
}

/* The distinct (group, value) pairs as a list per group (partial) or as
 * counts per group (final). */
static int distinct_array(const acc *x, int64_t n, bool as_list, fsh_array **out,
                          fsh_error *err) {
  fsh_batch *pairs = NULL;
  FSH_RETURN_NOT_OK(hs_rowset_keys(x->distinct, &pairs, err));
  int64_t m = pairs->length;
  const uint8_t *gp = kern_buf(pairs->columns[0], 1);
  int64_t goff = pairs->columns[0]->offset;
  int64_t *count = fsh_calloc((size_t)(n + 1), 8);
  int64_t *idx = fsh_malloc((size_t)(m ? m : 1) * 8);
  int rc = !count || !idx ? hs_oom(err) : 0;
  for (int64_t k = 0; rc == 0 && k < m; k++) count[kern_read_i64(gp, goff + k)]++;
  if (rc == 0 && !as_list) {
    rc = fixed_array(count, n, 8, NULL, false, out, err);
  } else if (rc == 0) {
    if (m > INT32_MAX) rc = fsh_error_set(err, EOVERFLOW, "%lld distinct values", (long long)m);
    fsh_array *l = rc == 0 ? fsh_array_new(2, 1) : NULL;
    fsh_buffer *offs = rc == 0 ? fsh_buffer_new((n + 1) * 4, true) : NULL;
    if (rc == 0 && (!l || !offs)) rc = hs_oom(err);
    if (rc == 0) { /* counting sort of the pairs by group */
      int64_t at = 0;
      for (int64_t g = 0; g < n; g++) {
        int64_t c = count[g];
        count[g] = at;
        at += c;
        int32_t o = (int32_t)at;
        memcpy(offs->data + 4 * (g + 1), &o, 4);
      }
      for (int64_t k = 0; k < m; k++) idx[count[kern_read_i64(gp, goff + k)]++] = k;
      l->length = n;
      l->null_count = 0;
      l->buffers[1] = offs;
      offs = NULL;
      rc = fsh_array_take(&x->distinct_schema->fields[1], pairs->columns[1], idx, m,
                          &l->children[0], err);
    }
    fsh_buffer_unref(offs);
    if (rc == 0) *out = l;
    else fsh_array_unref(l);
  }
  fsh_free(count);
  fsh_free(idx);
  fsh_batch_unref(pairs);
  return rc;
}

static int acc_state(const acc *x, int64_t n, fsh_array **out, fsh_error *err) {
  switch (x->op) {
    case OP_COUNT_ROWS: case OP_COUNT_VALID: case OP_COUNT_SUM:
      return fixed_array(x->cnt, n, 8, NULL, false, out, err);
    case OP_SUM_I64: return fixed_array(x->i64, n, 8, x->cnt, x->null_if_empty, out, err);
    case OP_SUM_U64: return fixed_array(x->u64, n, 8, x->cnt, x->null_if_empty, out, err);
    case OP_SUM_F64: return fixed_array(x->f64, n, 8, x->cnt, x->null_if_empty, out, err);
    case OP_SUM_D128: return fixed_array(x->d128, n, 16, x->cnt, x->null_if_empty, out, err);
    case OP_MIN: case OP_MAX: return minmax_array(x, x->state, n, out, err);
    default: return distinct_array(x, n, true, out, err);
  }
}

static int avg_array(const acc *sum, const acc *cnt, int64_t n, fsh_array **out,
                     fsh_error *err) {
  double *v = fsh_malloc((size_t)(n ? n : 1) * 8);
  if (!v) return hs_oom(err);
  for (int64_t g = 0; g < n; g++) v[g] = cnt->cnt[g] ? sum->f64[g] / (double)cnt->cnt[g] : 0;
  int rc = fixed_array(v, n, 8, cnt->cnt, true, out, err);
  fsh_free(v);
  return rc;
}

static int finish(fsh_hash_agg *a, fsh_batch **out, fsh_error *err) {
  if (!a->groups) { /* a global aggregate: one row */
    a->n_groups = 1;
    FSH_RETURN_NOT_OK(reserve_groups(a, 1, err));
  }
  int64_t n = a->n_groups;
  bool partial = a->mode == FSH_AGG_PARTIAL;
  fsh_schema *s = partial ? a->partial : a->out;
  fsh_batch *keys = NULL;
  if (a->groups) FSH_RETURN_NOT_OK(hs_rowset_keys(a->groups, &keys, err));
  fsh_batch *r = fsh_batch_new(s, n);
  if (!r) {
    fsh_batch_unref(keys);
    return hs_oom(err);
  }
  for (int k = 0; k < a->n_keys; k++) r->columns[k] = fsh_array_ref(keys->columns[k]);
  fsh_batch_unref(keys);
  int rc = 0;
  if (partial) {
    for (int i = 0; rc == 0 && i < a->n_accs; i++)
      rc = acc_state(&a->accs[i], n, &r->columns[a->n_keys + i], err);
  } else {
    for (int i = 0; rc == 0 && i < a->n_specs; i++) {
      const acc *x = &a->accs[a->first_acc[i]];
      fsh_array **dst = &r->columns[a->n_keys + i];
      switch (a->specs[i].fn) {
        case FSH_AGG_AVG: rc = avg_array(x, x + 1, n, dst, err); break;
        case FSH_AGG_COUNT_DISTINCT: rc = distinct_array(x, n, false, dst, err); break;
        case FSH_AGG_MIN: case FSH_AGG_MAX:
          rc = minmax_array(x, &a->out->fields[a->n_keys + i], n, dst, err);
          break;
        default: rc = acc_state(x, n, dst, err); break;
      }
    }
  }
  if (rc != 0) {
    fsh_batch_unref(r);
    return rc;
  }
  *out = r;
  return 0;
}

int fsh_hash_agg_finish(fsh_hash_agg *a, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!a || !out) return fsh_error_set(err, EINVAL, "hash aggregate: NULL argument");
  if (a->failed || a->finished)
    return fsh_error_set(err, EINVAL, "hash aggregate: %s",
                         a->failed ? "failed earlier" : "already finished");
  a->finished = true;
  int rc = finish(a, out, err);
  if (rc != 0) return fsh_error_prefix(err, rc, "hash aggregate: ");
  return 0;
}
