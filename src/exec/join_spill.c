/* join_spill.c -- the spilling hash join (contract in exec.h, "bounded
 * memory"): an in-memory fsh_hash_join until the build side goes over the
 * budget, then grace partitioning of both sides into spill files, joined
 * one partition at a time when the result is read. Built on the public
 * hash join only. */
#include <flightshuffle/exec.h>

#include <errno.h>
#include <string.h>

/* What joining a partition needs; moves from the join into its stream. */
typedef struct join_args {
  fsh_schema *left, *right;
  int32_t *left_keys, *right_keys;
  int n_keys;
  fsh_join_type type;
  bool build_left;
  int64_t budget;
  int32_t n_parts;
} join_args;

struct fsh_spill_join {
  join_args *args;
  fsh_schema *out_schema;
  fsh_spill *spill;
  fsh_hash_join *mem;       /* before a spill */
  fsh_batch **held;         /* build batches given to mem */
  int64_t n_held, cap_held;
  fsh_spill_writer **bw, **pw; /* per partition, after a spill */
  bool spilled, probing, finished, failed;
};

static void args_free(join_args *a) {
  if (!a) return;
  fsh_schema_unref(a->left);
  fsh_schema_unref(a->right);
  fsh_free(a->left_keys);
  fsh_free(a->right_keys);
  fsh_free(a);
}

static void abort_all(fsh_spill_writer **w, int32_t n) {
  if (!w) return;
  for (int32_t i = 0; i < n; i++) fsh_spill_writer_abort(w[i]);
  fsh_free(w);
}

static void drop_held(fsh_spill_join *j) {
  for (int64_t i = 0; i < j->n_held; i++) fsh_batch_unref(j->held[i]);
  fsh_free(j->held);
  j->held = NULL;
  j->n_held = j->cap_held = 0;
}

void fsh_spill_join_free(fsh_spill_join *j) {
  if (!j) return;
  int32_t n = j->args ? j->args->n_parts : 0;
  abort_all(j->bw, n);
  abort_all(j->pw, n);
  fsh_hash_join_free(j->mem);
  drop_held(j);
  fsh_schema_unref(j->out_schema);
  args_free(j->args);
  fsh_free(j);
}

fsh_schema *fsh_spill_join_output_schema(const fsh_spill_join *j) { return j->out_schema; }
bool fsh_spill_join_spilled(const fsh_spill_join *j) { return j->spilled; }

static int new_join(const join_args *a, fsh_hash_join **out, fsh_error *err) {
  return fsh_hash_join_new(a->left, a->right, a->left_keys, a->right_keys, a->n_keys, a->type,
                           a->build_left, a->budget, out, err);
}

int fsh_spill_join_new(fsh_schema *left, fsh_schema *right, const int32_t *left_keys,
                       const int32_t *right_keys, int n_keys, fsh_join_type type,
                       bool build_left, int64_t memory_budget, int32_t n_partitions,
                       fsh_spill *spill, fsh_spill_join **out, fsh_error *err) {
  *out = NULL;
  if (n_keys < 1 || memory_budget < 0 || n_partitions < 0)
    return fsh_error_set(err, EINVAL, "spilling hash join: no key, or a negative budget or "
                         "partition count");
  fsh_spill_join *j = fsh_calloc(1, sizeof *j);
  join_args *a = j ? fsh_calloc(1, sizeof *a) : NULL;
  if (a) {
    a->left_keys = fsh_calloc((size_t)n_keys, sizeof *a->left_keys);
    a->right_keys = fsh_calloc((size_t)n_keys, sizeof *a->right_keys);
  }
  if (!a || !a->left_keys || !a->right_keys) {
    args_free(a);
    fsh_free(j);
    return fsh_error_set(err, ENOMEM, "spilling hash join: out of memory");
  }
  j->args = a;
  memcpy(a->left_keys, left_keys, (size_t)n_keys * sizeof *left_keys);
  memcpy(a->right_keys, right_keys, (size_t)n_keys * sizeof *right_keys);
  a->n_keys = n_keys;
  a->left = fsh_schema_ref(left);
  a->right = fsh_schema_ref(right);
  a->type = type;
  a->build_left = build_left;
  a->budget = memory_budget;
  a->n_parts = n_partitions ? n_partitions : 32;
  j->spill = spill;
  int rc = new_join(a, &j->mem, err); /* checks the arguments */
  if (rc != 0) {
    fsh_spill_join_free(j);
    return rc;
  }
  j->out_schema = fsh_schema_ref(fsh_hash_join_output_schema(j->mem));
  *out = j;
  return 0;
}

/* Hash-partitions b on keys into w[0, n_parts). */
static int scatter_to(const join_args *a, fsh_batch *b, const int32_t *keys,
                      fsh_spill_writer **w, fsh_error *err) {
  return fsh_spill_scatter(b, keys, a->n_keys, FSH_SPILL_JOIN_SEED, a->n_parts, w, err);
}

static const int32_t *build_keys(const join_args *a) {
  return a->build_left ? a->left_keys : a->right_keys;
}
static const int32_t *probe_keys(const join_args *a) {
  return a->build_left ? a->right_keys : a->left_keys;
}

/* The build side went over the budget: drop the in-memory join, open the
 * partitions' files and write the held build batches to them. */
static int start_spill(fsh_spill_join *j, fsh_error *err) {
  const join_args *a = j->args;
  fsh_hash_join_free(j->mem);
  j->mem = NULL;
  j->spilled = true;
  j->bw = fsh_calloc((size_t)a->n_parts, sizeof *j->bw);
  j->pw = fsh_calloc((size_t)a->n_parts, sizeof *j->pw);
  if (!j->bw || !j->pw) return fsh_error_set(err, ENOMEM, "spilling hash join: out of memory");
  fsh_schema *bs = a->build_left ? a->left : a->right, *ps = a->build_left ? a->right : a->left;
  for (int32_t p = 0; p < a->n_parts; p++) {
    FSH_RETURN_NOT_OK(fsh_spill_writer_open(j->spill, bs, &j->bw[p], err));
    FSH_RETURN_NOT_OK(fsh_spill_writer_open(j->spill, ps, &j->pw[p], err));
  }
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < j->n_held; i++)
    rc = scatter_to(a, j->held[i], build_keys(a), j->bw, err);
  drop_held(j);
  return rc;
}

int fsh_spill_join_build(fsh_spill_join *j, fsh_batch *b, fsh_error *err) {
  if (j->failed || j->probing || j->finished)
    return fsh_error_set(err, EINVAL, "spilling hash join: build %s",
                         j->failed ? "after an error" : "after the first probe");
  int rc;
  if (j->spilled) {
    fsh_error diff = {{0}};
    fsh_schema *bs = j->args->build_left ? j->args->left : j->args->right;
    rc = fsh_schema_equals(bs, b->schema, false, &diff)
             ? scatter_to(j->args, b, build_keys(j->args), j->bw, err)
             : fsh_error_set(err, EINVAL, "spilling hash join: build batch schema differs: %s",
                             diff.message);
  } else {
    if (j->n_held == j->cap_held) {
      int64_t c = j->cap_held ? j->cap_held * 2 : 16;
      fsh_batch **h = fsh_realloc(j->held, (size_t)c * sizeof *h);
      if (!h) {
        j->failed = true;
        return fsh_error_set(err, ENOMEM, "spilling hash join: out of memory");
      }
      j->held = h;
      j->cap_held = c;
    }
    rc = fsh_hash_join_build(j->mem, b, err);
    if (rc == 0 || rc == EFBIG) j->held[j->n_held++] = fsh_batch_ref(b); /* kept by mem too */
    if (rc == EFBIG)
      rc = j->spill ? start_spill(j, err)
                    : fsh_error_prefix(err, rc, "spilling hash join (no spill directory): ");
  }
  if (rc != 0) j->failed = true;
  return rc;
}

int fsh_spill_join_probe(fsh_spill_join *j, fsh_batch *b, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (j->failed || j->finished)
    return fsh_error_set(err, EINVAL, "spilling hash join: probe %s",
                         j->failed ? "after an error" : "after finish");
  if (!j->probing) {
    j->probing = true;
    if (!j->spilled) drop_held(j); /* the join keeps its own references */
  }
  int rc;
  if (!j->spilled) {
    rc = fsh_hash_join_probe(j->mem, b, out, err);
  } else {
    fsh_error diff = {{0}};
    fsh_schema *ps = j->args->build_left ? j->args->right : j->args->left;
    rc = fsh_schema_equals(ps, b->schema, false, &diff)
             ? scatter_to(j->args, b, probe_keys(j->args), j->pw, err)
             : fsh_error_set(err, EINVAL, "spilling hash join: probe batch schema differs: %s",
                             diff.message);
  }
  if (rc != 0) j->failed = true;
  return rc;
}

/* ---- the result stream after a spill --------------------------------------- */

typedef struct join_stream {
  join_args *args;
  fsh_spill_file **bf, **pf;
  int32_t next;
  fsh_hash_join *cur;      /* the partition being probed */
  fsh_batch_stream probe;  /* its probe file */
  int32_t cur_part;
} join_stream;

static void join_stream_free(join_stream *p) {
  for (int32_t i = 0; i < p->args->n_parts; i++) {
    if (p->bf) fsh_spill_file_free(p->bf[i]);
    if (p->pf) fsh_spill_file_free(p->pf[i]);
  }
  fsh_free(p->bf);
  fsh_free(p->pf);
  fsh_hash_join_free(p->cur);
  if (p->probe.release) p->probe.release(&p->probe);
  args_free(p->args);
  fsh_free(p);
}

/* Starts partition `part`: builds its join, opens its probe file. */
static int start_partition(join_stream *p, int32_t part, fsh_error *err) {
  int rc = new_join(p->args, &p->cur, err);
  fsh_batch_stream st = {0};
  if (rc == 0) rc = fsh_spill_file_open(p->bf[part], &st, err);
  else fsh_spill_file_free(p->bf[part]);
  p->bf[part] = NULL;
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = st.get_next(&st, &b, err);
    if (rc != 0 || !b) break;
    rc = fsh_hash_join_build(p->cur, b, err);
    fsh_batch_unref(b);
    if (rc == EFBIG)
      rc = fsh_error_prefix(err, rc, "spilling hash join: spill partition %d of %d is still "
                            "over the budget on its own: ", (int)part, (int)p->args->n_parts);
  }
  if (st.release) st.release(&st);
  if (rc == 0) rc = fsh_spill_file_open(p->pf[part], &p->probe, err);
  else fsh_spill_file_free(p->pf[part]);
  p->pf[part] = NULL;
  p->cur_part = part;
  return rc;
}

static int join_stream_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  join_stream *p = st->private_data;
  *out = NULL;
  for (;;) {
    if (!p->cur) {
      if (p->next == p->args->n_parts) return 0;
      FSH_RETURN_NOT_OK(start_partition(p, p->next++, err));
    }
    if (p->probe.release) {
      fsh_batch *b = NULL;
      FSH_RETURN_NOT_OK(p->probe.get_next(&p->probe, &b, err));
      if (b) {
        fsh_batch *o = NULL;
        int rc = fsh_hash_join_probe(p->cur, b, &o, err);
        fsh_batch_unref(b);
        if (rc != 0) return rc;
        if (o && o->length > 0) {
          *out = o;
          return 0;
        }
        fsh_batch_unref(o);
        continue;
      }
      p->probe.release(&p->probe);
    }
    fsh_batch *o = NULL;
    int rc = fsh_hash_join_finish(p->cur, &o, err);
    fsh_hash_join_free(p->cur);
    p->cur = NULL;
    if (rc != 0) return rc;
    if (o && o->length > 0) {
      *out = o;
      return 0;
    }
    fsh_batch_unref(o);
  }
}

static void join_stream_release(fsh_batch_stream *st) {
  if (st->private_data) join_stream_free(st->private_data);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

int fsh_spill_join_finish(fsh_spill_join *j, fsh_batch_stream *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (j->failed || j->finished)
    return fsh_error_set(err, EINVAL, "spilling hash join: finish %s",
                         j->failed ? "after an error" : "twice");
  j->finished = true;
  if (!j->spilled) {
    drop_held(j);
    fsh_batch *rest = NULL;
    int rc = fsh_hash_join_finish(j->mem, &rest, err);
    if (rc == 0)
      rc = fsh_batch_stream_from_batches(j->out_schema, &rest, rest ? 1 : 0, out, err);
    fsh_batch_unref(rest);
    if (rc != 0) j->failed = true;
    return rc;
  }
  int32_t n = j->args->n_parts;
  join_stream *p = fsh_calloc(1, sizeof *p);
  int rc = 0;
  if (p) {
    p->bf = fsh_calloc((size_t)n, sizeof *p->bf);
    p->pf = fsh_calloc((size_t)n, sizeof *p->pf);
  }
  if (!p || !p->bf || !p->pf) {
    if (p) fsh_free(p->bf), fsh_free(p->pf);
    fsh_free(p);
    j->failed = true;
    return fsh_error_set(err, ENOMEM, "spilling hash join: out of memory");
  }
  p->args = j->args; /* moves: j keeps n_parts through p until freed */
  for (int32_t i = 0; rc == 0 && i < n; i++) {
    fsh_spill_writer *w = j->bw[i];
    j->bw[i] = NULL;
    rc = fsh_spill_writer_finish(w, &p->bf[i], err);
    if (rc == 0) {
      w = j->pw[i];
      j->pw[i] = NULL;
      rc = fsh_spill_writer_finish(w, &p->pf[i], err);
    }
  }
  if (rc != 0) {
    p->args = NULL;
    for (int32_t i = 0; i < n; i++) fsh_spill_file_free(p->bf[i]), fsh_spill_file_free(p->pf[i]);
    fsh_free(p->bf);
    fsh_free(p->pf);
    fsh_free(p);
    j->failed = true;
    return rc;
  }
  j->args = NULL;
  abort_all(j->bw, 0);
  abort_all(j->pw, 0);
  j->bw = j->pw = NULL;
  out->get_next = join_stream_next;
  out->release = join_stream_release;
  out->schema = fsh_schema_ref(j->out_schema);
  out->private_data = p;
  return 0;
}
