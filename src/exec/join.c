/* join.c -- the hash join: the build side is collected and concatenated,
 * its keys interned in the row set with a chain of build rows per key;
 * probe batches are matched row by row and assembled with take. */
#include "exec/hashops_internal.h"

#include <stdio.h>
#include <string.h>

struct fsh_hash_join {
  fsh_join_type type;
  bool build_left;
  bool probe_outer, build_outer; /* null-fill the other side */
  int n_keys;
  int32_t *build_keys, *probe_keys;
  fsh_schema *build_schema, *probe_schema, *out;
  int n_left; /* output columns from the left */
  fsh_batch **pending; /* build batches until the first probe */
  int64_t n_pending, pending_cap, pending_rows;
  fsh_mem_set pending_mem; /* their buffers, each counted once (slices share them) */
  fsh_batch *build;    /* the build side, plus one null row when probe_outer */
  int64_t n_build;     /* rows of the build side proper */
  hs_rowset *keys;
  int64_t *head;       /* key id -> first build row (-1: none) */
  int64_t *next;       /* build row -> next build row of its key */
  uint8_t *matched;    /* build row matched (bitmap), when finish needs it */
  fsh_batch *cur;      /* the probe batch being joined (NULL: none) */
  int64_t *cur_ids;    /* its rows' key ids */
  int64_t cur_i, cur_r; /* where its output resumes (probe_next) */
  int64_t budget;
  bool built, finished, failed;
};

static const char *type_name(fsh_join_type t) {
  static const char *n[] = {"inner", "left", "right", "full", "left semi", "left anti"};
  return (unsigned)t < 6 ? n[t] : "?";
}

static void probe_end(fsh_hash_join *j);

void fsh_hash_join_free(fsh_hash_join *j) {
  if (!j) return;
  probe_end(j);
  for (int64_t i = 0; i < j->n_pending; i++) fsh_batch_unref(j->pending[i]);
  fsh_free(j->pending);
  fsh_mem_set_reset(&j->pending_mem);
  fsh_batch_unref(j->build);
  hs_rowset_free(j->keys);
  fsh_free(j->head);
  fsh_free(j->next);
  fsh_free(j->matched);
  fsh_free(j->build_keys);
  fsh_free(j->probe_keys);
  fsh_schema_unref(j->build_schema);
  fsh_schema_unref(j->probe_schema);
  fsh_schema_unref(j->out);
  fsh_free(j);
}

static bool name_taken(const fsh_schema *s, int64_t n, const char *name) {
  for (int64_t i = 0; i < n; i++)
    if (strcmp(s->fields[i].name, name) == 0) return true;
  return false;
}

/* The output schema: left fields, then (not semi/anti) right fields with
 * names made unique by "_right" suffixes. */
static int out_schema(fsh_hash_join *j, fsh_schema *left, fsh_schema *right, fsh_error *err) {
  bool both = j->type != FSH_JOIN_LEFT_SEMI && j->type != FSH_JOIN_LEFT_ANTI;
  int64_t n = left->n_fields + (both ? right->n_fields : 0);
  bool left_null = j->type == FSH_JOIN_RIGHT || j->type == FSH_JOIN_FULL;
  bool right_null = j->type == FSH_JOIN_LEFT || j->type == FSH_JOIN_FULL;
  j->out = fsh_schema_new(n);
  if (!j->out) return hs_oom(err);
  j->n_left = (int)left->n_fields;
  for (int64_t i = 0; i < n; i++) {
    bool is_left = i < left->n_fields;
    const fsh_field *src = is_left ? &left->fields[i] : &right->fields[i - left->n_fields];
    fsh_field *f = &j->out->fields[i];
    if (fsh_field_copy(f, src) != 0) return hs_oom(err);
    if (is_left ? left_null : right_null) f->nullable = true;
    while (!is_left && name_taken(j->out, i, f->name)) {
      size_t len = strlen(f->name) + 7;
      char *nm = fsh_malloc(len);
      if (!nm) return hs_oom(err);
      snprintf(nm, len, "%s_right", f->name);
      fsh_free(f->name);
      f->name = nm;
    }
  }
  return 0;
}

int fsh_hash_join_new(fsh_schema *left, fsh_schema *right, const int32_t *left_keys,
                      const int32_t *right_keys, int n_keys, fsh_join_type type, bool build_left,
                      int64_t memory_budget, fsh_hash_join **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!left || !right || !left_keys || !right_keys || n_keys < 1 || !out ||
      (unsigned)type > FSH_JOIN_LEFT_ANTI)
    return fsh_error_set(err, EINVAL, "hash join: NULL argument, no key or bad join type");
  for (int k = 0; k < n_keys; k++) {
    if (left_keys[k] < 0 || left_keys[k] >= left->n_fields || right_keys[k] < 0 ||
        right_keys[k] >= right->n_fields)
      return fsh_error_set(err, EINVAL,
                           "hash join: key %d is left column %d of %lld, right column %d of %lld",
                           k, left_keys[k], (long long)left->n_fields, right_keys[k],
                           (long long)right->n_fields);
    const fsh_field *l = &left->fields[left_keys[k]], *r = &right->fields[right_keys[k]];
    const fsh_field *lv = l->dictionary ? &l->dictionary->value : l;
    const fsh_field *rv = r->dictionary ? &r->dictionary->value : r;
    fsh_error diff;
    if (!fsh_field_type_equals(lv, rv, &diff)) {
      char lt[128], rt[128];
      fsh_field_type_to_string(lv, lt, sizeof lt);
      fsh_field_type_to_string(rv, rt, sizeof rt);
      return fsh_error_set(err, EINVAL,
                           "hash join: key %d: left column '%s' (%s) and right column '%s' (%s) "
                           "have different types",
                           k, l->name, lt, r->name, rt);
    }
  }
  fsh_hash_join *j = fsh_calloc(1, sizeof *j);
  if (!j) return hs_oom(err);
  j->type = type;
  j->build_left = build_left;
  j->n_keys = n_keys;
  j->budget = memory_budget;
  bool full = type == FSH_JOIN_FULL;
  j->probe_outer = full || type == (build_left ? FSH_JOIN_RIGHT : FSH_JOIN_LEFT);
  j->build_outer = full || type == (build_left ? FSH_JOIN_LEFT : FSH_JOIN_RIGHT);
  j->build_schema = fsh_schema_ref(build_left ? left : right);
  j->probe_schema = fsh_schema_ref(build_left ? right : left);
  j->build_keys = fsh_malloc((size_t)n_keys * sizeof(int32_t));
  j->probe_keys = fsh_malloc((size_t)n_keys * sizeof(int32_t));
  int rc = !j->build_keys || !j->probe_keys ? hs_oom(err) : 0;
  if (rc == 0) {
    memcpy(j->build_keys, build_left ? left_keys : right_keys, (size_t)n_keys * sizeof(int32_t));
    memcpy(j->probe_keys, build_left ? right_keys : left_keys, (size_t)n_keys * sizeof(int32_t));
    rc = out_schema(j, left, right, err);
  }
  if (rc == 0) { /* every key type must be comparable: try on empty batches */
    fsh_batch *lb = NULL, *rb = NULL;
    fsh_row_keys *lk = NULL, *rk = NULL;
    rc = hs_null_batch(left, 0, &lb, err);
    if (rc == 0) rc = hs_null_batch(right, 0, &rb, err);
    if (rc == 0) rc = fsh_row_keys_new(lb, left_keys, n_keys, NULL, &lk, err);
    if (rc == 0) rc = fsh_row_keys_new(rb, right_keys, n_keys, NULL, &rk, err);
    fsh_row_keys_free(lk);
    fsh_row_keys_free(rk);
    fsh_batch_unref(lb);
    fsh_batch_unref(rb);
  }
  if (rc == 0) {
    fsh_schema *ks = NULL;
    rc = hs_project_schema(j->build_schema, j->build_keys, n_keys, &ks, err);
    if (rc == 0) rc = hs_rowset_new(ks, &j->keys, err);
    fsh_schema_unref(ks);
  }
  if (rc != 0) {
    fsh_hash_join_free(j);
    return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(type));
  }
  *out = j;
  return 0;
}

fsh_schema *fsh_hash_join_output_schema(const fsh_hash_join *j) { return j->out; }

int64_t fsh_hash_join_memory(const fsh_hash_join *j) {
  /* Before the table exists, it is estimated at 40 bytes a build row. */
  int64_t t = j->pending_mem.bytes + j->pending_rows * 40 +
              (j->build ? fsh_exec_batch_memory(j->build) : 0);
  t += hs_rowset_memory(j->keys);
  if (j->head) t += hs_rowset_count(j->keys) * 8;
  if (j->next) t += j->n_build * 8;
  if (j->matched) t += fsh_bytes_for_bits(j->n_build);
  return t;
}

static int check_batch(const fsh_schema *s, const fsh_batch *b, const char *side, fsh_error *err) {
  fsh_error diff;
  if (b->n_columns != s->n_fields)
    return fsh_error_set(err, EINVAL, "the %s batch has %lld columns, the join expects %lld", side,
                         (long long)b->n_columns, (long long)s->n_fields);
  for (int64_t c = 0; c < s->n_fields; c++)
    if (!fsh_field_type_equals(&b->schema->fields[c], &s->fields[c], &diff))
      return fsh_error_set(err, EINVAL, "%s column %lld ('%s') differs in type: %s", side,
                           (long long)c, s->fields[c].name, diff.message);
  return 0;
}

static int over_budget(const fsh_hash_join *j, fsh_error *err) {
  int64_t held = fsh_hash_join_memory(j);
  if (j->budget > 0 && held > j->budget)
    return fsh_error_set(err, EFBIG,
                         "hash join (%s): the build side holds %lld bytes, over its budget of "
                         "%lld bytes",
                         type_name(j->type), (long long)held, (long long)j->budget);
  return 0;
}

int fsh_hash_join_build(fsh_hash_join *j, fsh_batch *b, fsh_error *err) {
  if (!j || !b) return fsh_error_set(err, EINVAL, "hash join: NULL argument");
  if (j->built || j->failed)
    return fsh_error_set(err, EINVAL, "hash join: %s", j->failed ? "failed earlier"
                                                                   : "build after the first probe");
  int rc = check_batch(j->build_schema, b, j->build_left ? "left (build)" : "right (build)", err);
  if (rc == 0)
    rc = hs_grow((void **)&j->pending, &j->pending_cap, j->n_pending + 1, sizeof(fsh_batch *),
                 err);
  if (rc == 0) rc = fsh_mem_set_add(&j->pending_mem, b, NULL, err);
  if (rc != 0) return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(j->type));
  j->pending[j->n_pending++] = fsh_batch_ref(b);
  j->pending_rows += b->length;
  return over_budget(j, err);
}

/* Concatenates the build side (and a null row), interns its keys and
 * chains its rows per key. */
static int finish_build(fsh_hash_join *j, fsh_error *err) {
  fsh_batch *parts[2] = {NULL, NULL}, *nullrow = NULL, *all = NULL;
  int rc = 0;
  if (j->n_pending == 0) rc = hs_null_batch(j->build_schema, 0, &all, err);
  else if (j->n_pending == 1) all = fsh_batch_ref(j->pending[0]);
  else rc = fsh_concat(j->pending, j->n_pending, &all, err);
  if (rc != 0) return rc;
  j->n_build = all->length;
  if (j->probe_outer) {
    rc = hs_null_batch(j->build_schema, 1, &nullrow, err);
    parts[0] = all;
    parts[1] = nullrow;
    if (rc == 0) rc = fsh_concat(parts, 2, &j->build, err);
    fsh_batch_unref(all);
    fsh_batch_unref(nullrow);
  } else {
    j->build = all;
  }
  if (rc != 0) return rc;
  for (int64_t i = 0; i < j->n_pending; i++) fsh_batch_unref(j->pending[i]);
  j->n_pending = 0;
  fsh_mem_set_reset(&j->pending_mem);
  j->pending_rows = 0;
  int64_t n = j->n_build;
  int64_t *ids = fsh_malloc((size_t)(n ? n : 1) * 8);
  j->next = fsh_malloc((size_t)(n ? n : 1) * 8);
  bool track = j->build_outer || (j->build_left && j->type >= FSH_JOIN_LEFT_SEMI);
  if (track) j->matched = fsh_calloc((size_t)fsh_bytes_for_bits(n) + 1, 1);
  if (!ids || !j->next || (track && !j->matched)) rc = hs_oom(err);
  fsh_batch *proper = rc == 0 ? fsh_batch_slice(j->build, 0, n) : NULL;
  if (rc == 0 && !proper) rc = hs_oom(err);
  if (rc == 0) rc = hs_rowset_intern(j->keys, proper, j->build_keys, true, true, ids, err);
  fsh_batch_unref(proper);
  int64_t n_ids = hs_rowset_count(j->keys);
  if (rc == 0 && !(j->head = fsh_malloc((size_t)(n_ids ? n_ids : 1) * 8))) rc = hs_oom(err);
  if (rc == 0) {
    for (int64_t g = 0; g < n_ids; g++) j->head[g] = -1;
    for (int64_t r = n - 1; r >= 0; r--) {
      j->next[r] = -1;
      if (ids[r] < 0) continue;
      j->next[r] = j->head[ids[r]];
      j->head[ids[r]] = r;
    }
  }
  fsh_free(ids);
  return rc;
}

/* The output batch: probe rows pidx and build rows bidx (n pairs); for
 * probe_only (semi/anti) the probe's columns alone; for build_only the
 * build rows with null probe columns. */
static int assemble(fsh_hash_join *j, fsh_batch *probe, const int64_t *pidx, const int64_t *bidx,
                    int64_t n, fsh_batch **out, fsh_error *err) {
  fsh_batch *pt = NULL, *bt = NULL;
  int rc = 0;
  if (pidx) rc = fsh_take(probe, pidx, n, &pt, err);
  else if (j->out->n_fields > j->build_schema->n_fields)
    rc = hs_null_batch(j->probe_schema, n, &pt, err);
  if (rc == 0 && bidx) rc = fsh_take(j->build, bidx, n, &bt, err);
  fsh_batch *r = rc == 0 ? fsh_batch_new(j->out, n) : NULL;
  if (rc == 0 && !r) rc = hs_oom(err);
  if (rc == 0) {
    /* left columns first */
    fsh_batch *left = j->build_left ? bt : pt, *right = j->build_left ? pt : bt;
    int64_t c = 0;
    for (int64_t k = 0; left && k < left->n_columns && c < j->out->n_fields; k++)
      r->columns[c++] = fsh_array_ref(left->columns[k]);
    for (int64_t k = 0; right && k < right->n_columns && c < j->out->n_fields; k++)
      r->columns[c++] = fsh_array_ref(right->columns[k]);
  }
  fsh_batch_unref(pt);
  fsh_batch_unref(bt);
  if (rc != 0) {
    fsh_batch_unref(r);
    return rc;
  }
  *out = r;
  return 0;
}

/* Starts probing b: looks its keys up (ids of the build keys, -1 none). */
static int probe_begin(fsh_hash_join *j, fsh_batch *b, fsh_error *err) {
  int64_t n = b->length;
  int64_t *ids = fsh_malloc((size_t)(n ? n : 1) * 8);
  if (!ids) return hs_oom(err);
  int rc = hs_rowset_intern(j->keys, b, j->probe_keys, false, true, ids, err);
  if (rc != 0) {
    fsh_free(ids);
    return rc;
  }
  j->cur = fsh_batch_ref(b);
  j->cur_ids = ids;
  j->cur_i = 0;
  j->cur_r = -2;
  return 0;
}

static void probe_end(fsh_hash_join *j) {
  fsh_batch_unref(j->cur);
  fsh_free(j->cur_ids);
  j->cur = NULL;
  j->cur_ids = NULL;
}

/* Appends the pair (i, r) to the output arrays, growing them. */
static int emit(int64_t **pidx, int64_t **bidx, int64_t *cap, int64_t *m, int64_t i, int64_t r,
                fsh_error *err) {
  if (*m == *cap) {
    int64_t c2 = *cap;
    FSH_RETURN_NOT_OK(hs_grow((void **)pidx, &c2, *cap + 1, 8, err));
    FSH_RETURN_NOT_OK(hs_grow((void **)bidx, cap, *cap + 1, 8, err));
  }
  (*pidx)[*m] = i;
  (*bidx)[(*m)++] = r;
  return 0;
}

/* The next at most `limit` output rows of the current probe batch (NULL
 * when it is drained), resuming at row cur_i, build row cur_r of its chain
 * (-2: the row has not been started). */
static int probe_next(fsh_hash_join *j, int64_t limit, fsh_batch **out, fsh_error *err) {
  fsh_batch *b = j->cur;
  const int64_t *ids = j->cur_ids;
  int64_t n = b->length, m = 0;
  int64_t cap = limit < n + 1 ? limit : n + 1;
  int64_t *pidx = fsh_malloc((size_t)cap * 8), *bidx = fsh_malloc((size_t)cap * 8);
  int rc = !pidx || !bidx ? hs_oom(err) : 0;
  bool semi = j->type == FSH_JOIN_LEFT_SEMI, anti = j->type == FSH_JOIN_LEFT_ANTI;
  bool filter = (semi || anti) && !j->build_left; /* the probe is the left */
  while (rc == 0 && j->cur_i < n && m < limit) {
    int64_t i = j->cur_i;
    if (j->cur_r == -2) { /* a new probe row */
      int64_t r = ids[i] >= 0 ? j->head[ids[i]] : -1;
      if (filter || r < 0 || semi || anti) {
        if (filter && (r >= 0) == semi) rc = emit(&pidx, &bidx, &cap, &m, i, -1, err);
        else if (!filter && r < 0 && j->probe_outer)
          rc = emit(&pidx, &bidx, &cap, &m, i, j->n_build, err); /* the null row */
        else if (!filter && r >= 0 && !fsh_bit_get(j->matched, r)) /* semi/anti, build left */
          for (; r >= 0; r = j->next[r]) fsh_bit_set(j->matched, r, true);
        j->cur_i += rc == 0;
        continue;
      }
      j->cur_r = r;
    }
    for (; rc == 0 && j->cur_r >= 0 && m < limit; j->cur_r = j->next[j->cur_r]) {
      if (j->matched) fsh_bit_set(j->matched, j->cur_r, true);
      rc = emit(&pidx, &bidx, &cap, &m, i, j->cur_r, err);
    }
    if (rc == 0 && j->cur_r < 0) {
      j->cur_r = -2;
      j->cur_i++;
    }
  }
  if (rc == 0 && m > 0) rc = assemble(j, b, pidx, filter ? NULL : bidx, m, out, err);
  fsh_free(pidx);
  fsh_free(bidx);
  return rc;
}

/* Checks the state and the batch, and builds the table on the first probe. */
static int probe_start(fsh_hash_join *j, fsh_batch *b, fsh_error *err) {
  if (j->failed || j->finished)
    return fsh_error_set(err, EINVAL, "hash join: %s",
                         j->failed ? "failed earlier" : "probe after finish");
  if (j->cur)
    return fsh_error_set(err, EINVAL, "hash join: the previous probe batch is not drained");
  int rc = check_batch(j->probe_schema, b, j->build_left ? "right (probe)" : "left (probe)", err);
  if (rc != 0) return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(j->type));
  if (!j->built) {
    j->built = true;
    rc = finish_build(j, err);
  }
  if (rc == 0) rc = probe_begin(j, b, err);
  if (rc != 0) {
    j->failed = true;
    return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(j->type));
  }
  return 0;
}

int fsh_hash_join_probe_begin(fsh_hash_join *j, fsh_batch *b, fsh_error *err) {
  if (!j || !b) return fsh_error_set(err, EINVAL, "hash join: NULL argument");
  return probe_start(j, b, err);
}

int fsh_hash_join_probe_next(fsh_hash_join *j, int64_t max_rows, fsh_batch **out,
                             fsh_error *err) {
  if (out) *out = NULL;
  if (!j || !out || max_rows < 1)
    return fsh_error_set(err, EINVAL, "hash join: NULL argument or max_rows < 1");
  if (j->failed) return fsh_error_set(err, EINVAL, "hash join: failed earlier");
  if (!j->cur) return 0;
  int rc = probe_next(j, max_rows, out, err);
  if (rc != 0) {
    j->failed = true;
    return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(j->type));
  }
  if (!*out) probe_end(j);
  return 0;
}

int fsh_hash_join_probe(fsh_hash_join *j, fsh_batch *b, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!j || !b || !out) return fsh_error_set(err, EINVAL, "hash join: NULL argument");
  FSH_RETURN_NOT_OK(probe_start(j, b, err));
  int rc = probe_next(j, INT64_MAX, out, err);
  if (rc == 0 && !*out) { /* no row: an empty batch of the output schema */
    int64_t none = 0;
    bool build_only = j->build_left && j->type >= FSH_JOIN_LEFT_SEMI;
    bool probe_only = !j->build_left && j->type >= FSH_JOIN_LEFT_SEMI;
    rc = assemble(j, build_only ? NULL : b, build_only ? NULL : &none, probe_only ? NULL : &none,
                  0, out, err);
  }
  probe_end(j);
  if (rc != 0) {
    j->failed = true;
    return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(j->type));
  }
  return 0;
}

int fsh_hash_join_finish(fsh_hash_join *j, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!j || !out) return fsh_error_set(err, EINVAL, "hash join: NULL argument");
  if (j->failed || j->finished || j->cur)
    return fsh_error_set(err, EINVAL, "hash join: %s",
                         j->failed ? "failed earlier"
                         : j->cur  ? "the last probe batch is not drained"
                                   : "already finished");
  int rc = 0;
  if (!j->built) { /* no probe batch came */
    j->built = true;
    rc = finish_build(j, err);
  }
  j->finished = true;
  bool semi = j->type == FSH_JOIN_LEFT_SEMI, anti = j->type == FSH_JOIN_LEFT_ANTI;
  bool emit = j->build_outer || ((semi || anti) && j->build_left);
  if (rc == 0 && emit) {
    int64_t *bidx = fsh_malloc((size_t)(j->n_build ? j->n_build : 1) * 8), k = 0;
    if (!bidx) rc = hs_oom(err);
    for (int64_t r = 0; rc == 0 && r < j->n_build; r++)
      if (fsh_bit_get(j->matched, r) == semi) bidx[k++] = r;
    if (rc == 0 && k > 0) rc = assemble(j, NULL, NULL, bidx, k, out, err);
    fsh_free(bidx);
  }
  if (rc != 0) {
    j->failed = true;
    return fsh_error_prefix(err, rc, "hash join (%s): ", type_name(j->type));
  }
  return 0;
}
