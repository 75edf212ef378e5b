/* plan_run.c -- running a plan in this process: every operator is a
 * pull-based fsh_batch_stream per partition; every exchange runs its map
 * tasks (one per input partition, pre-shuffle merge grouping consecutive
 * ones into one map output) through a shuffle backend's writers and opens
 * its reduce partitions with the backend's reader. The reference mode runs
 * the plan in one partition with every exchange a pass-through. */
#include "exec/plan_internal.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct xstate {
  bool done;
  bool released; /* every reader done: released early (release_consumed) */
  fsh_shuffle_spec spec;
  int64_t n_outputs;
  fsh_map_output *outputs;
} xstate;

typedef struct run_ctx {
  const fsh_plan *p;
  bool reference;
  fsh_plan_merge merge;
  int64_t merge_threshold;
  uint64_t first_shuffle_id;
  fsh_shuffle_backend *backend;
  fsh_shuffle_backend *const *backends; /* [n_backends]: tasks placed round-robin */
  int n_backends;
  xstate *x; /* [n_nodes] */
  fsh_plan_result *res;
  int n_threads;      /* map tasks at once */
  int64_t op_memory;  /* budget of each sort / aggregate / join instance (0: unbounded) */
  const char *const *spill_dirs;
  int n_spill_dirs;
  struct node_spill {
    int64_t instances, files, bytes;
  } *node_spill;      /* [n_nodes] when op_memory > 0 */
  pthread_mutex_t mu; /* guards res's counters and node_spill */
} run_ctx;

static int open_stream(run_ctx *c, int node, int32_t part, fsh_batch_stream *out, fsh_error *err);
static int run_exchange(run_ctx *c, const plan_node *x, fsh_error *err);

/* The backend that map output / reduce partition i goes through. */
static fsh_shuffle_backend *backend_of(const run_ctx *c, int64_t i) {
  return c->n_backends > 0 ? c->backends[i % c->n_backends] : c->backend;
}

static int32_t parts_of(const run_ctx *c, const plan_node *n) {
  return c->reference ? 1 : n->n_partitions;
}

/* Prefixes err with the node's operator name, unless the message already
 * starts with it (the physical nodes of one operator share its name). */
static int name_fail(const plan_node *n, int rc, fsh_error *err) {
  char who[200];
  plan_node_name(n, who, sizeof who);
  size_t len = strlen(who);
  if (err && strncmp(err->message, who, len) == 0 && err->message[len] == ':') return rc;
  return fsh_error_prefix(err, rc, "%s: ", who);
}

/* ---- operator streams ----------------------------------------------------------- */

typedef struct ostate {
  run_ctx *c;
  const plan_node *n;
  int32_t part;
  fsh_batch_stream in, in2;
  bool in_open, in2_open;
  bool done;
  /* scans */
  int64_t next, end;          /* batch indices (generated), file indices (ipc) */
  fsh_batch_stream file;
  bool file_open;
  fsh_expr **cols;            /* ipc projection, bound to the current file */
  /* operators holding state */
  fsh_hash_agg *agg;
  fsh_hash_join *join;
  fsh_batch **held;
  int64_t n_held, cap_held;
  int64_t remaining;          /* limit */
  fsh_rechunker *rc;
  bool rc_finished;
  /* bounded memory (run_ctx.op_memory > 0): the spilling forms, their
   * spill area (one per operator instance, so that it counts its files)
   * and the stream of what their finish() gives */
  fsh_spill *spill;
  fsh_extsort *xsort;
  fsh_spill_agg *sagg;
  fsh_spill_join *sjoin;
  fsh_batch_stream rest;
  bool rest_open;
  /* FINAL aggregate under a budget (final_*): the partial-state batches
   * pushed so far (until it spills), then one spill writer / file per
   * grace partition, read back one partition at a time */
  int64_t fin_held_bytes;
  fsh_spill_writer **fin_w;
  fsh_spill_file **fin_files;
  int32_t fin_next;
  int32_t *fin_keys; /* 0 .. n_keys - 1: the keys lead the partial schema */
} ostate;

#define FINAL_SPILL_PARTS 32

static void spill_account(ostate *s);

static void ostate_free(ostate *s) {
  if (!s) return;
  if (s->in_open) s->in.release(&s->in);
  if (s->in2_open) s->in2.release(&s->in2);
  if (s->file_open) s->file.release(&s->file);
  if (s->cols)
    for (int32_t i = 0; i < s->n->n_columns; i++) fsh_expr_free(s->cols[i]);
  fsh_free(s->cols);
  fsh_hash_agg_free(s->agg);
  fsh_hash_join_free(s->join);
  for (int64_t i = 0; i < s->n_held; i++) fsh_batch_unref(s->held[i]);
  fsh_free(s->held);
  fsh_rechunker_free(s->rc);
  if (s->rest_open) s->rest.release(&s->rest);
  fsh_extsort_free(s->xsort);
  fsh_spill_agg_free(s->sagg);
  fsh_spill_join_free(s->sjoin);
  for (int32_t i = 0; s->fin_w && i < FINAL_SPILL_PARTS; i++) fsh_spill_writer_abort(s->fin_w[i]);
  fsh_free(s->fin_w);
  for (int32_t i = 0; s->fin_files && i < FINAL_SPILL_PARTS; i++)
    fsh_spill_file_free(s->fin_files[i]);
  fsh_free(s->fin_files);
  fsh_free(s->fin_keys);
  spill_account(s);
  fsh_spill_free(s->spill);
  fsh_free(s);
}

static void op_release(fsh_batch_stream *st) {
  ostate_free(st->private_data);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

static int hold(ostate *s, fsh_batch *b) {
  if (s->n_held == s->cap_held) {
    int64_t cap = s->cap_held ? s->cap_held * 2 : 16;
    fsh_batch **v = fsh_realloc(s->held, (size_t)cap * sizeof *v);
    if (!v) return ENOMEM;
    s->held = v, s->cap_held = cap;
  }
  s->held[s->n_held++] = b;
  return 0;
}

/* The generated scan: batches [next, end) of the table. */
static int scan_gen_next(ostate *s, fsh_batch **out, fsh_error *err) {
  const fsh_plan_gen_options *g = &s->n->gen;
  if (s->next >= s->end) return 0;
  int64_t first = s->next * g->batch_rows;
  int64_t rows = g->rows - first < g->batch_rows ? g->rows - first : g->batch_rows;
  s->next++;
  if (g->generator == FSH_PLAN_GEN_SYNTHETIC) {
    fsh_synthetic_options o = {.seed = g->seed, .with_nulls = g->with_nulls,
                               .key_range = g->key_range};
    /* fsh_synthetic_batch numbers rows index * rows: a short last batch is
     * a full one cut, so that row r is the same whatever the partitioning */
    fsh_batch *full;
    FSH_RETURN_NOT_OK(fsh_synthetic_batch(s->n->schema, &o, s->next - 1, g->batch_rows, &full, err));
    if (rows == g->batch_rows) {
      *out = full;
      return 0;
    }
    *out = fsh_batch_slice(full, 0, rows);
    fsh_batch_unref(full);
    return *out ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
  }
  fsh_keyed_options o = {.seed = g->seed, .key_range = g->key_range, .skew = g->skew,
                         .null_fraction = g->null_fraction, .groups = g->groups};
  return fsh_keyed_batch(s->n->schema, &o, first, rows, out, err);
}

static int scan_ipc_next(ostate *s, fsh_batch **out, fsh_error *err) {
  const plan_node *n = s->n;
  for (;;) {
    if (!s->file_open) {
      if (s->next >= s->end) return 0;
      FSH_RETURN_NOT_OK(fsh_ipc_open_path(n->files[s->next], &s->file, err));
      s->file_open = true;
      s->next++;
      if (n->n_columns)
        for (int32_t i = 0; i < n->n_columns; i++)
          FSH_RETURN_NOT_OK(fsh_expr_bind(s->cols[i], s->file.schema, err));
    }
    fsh_batch *b = NULL;
    int rc = s->file.get_next(&s->file, &b, err);
    if (rc) return fsh_error_prefix(err, rc, "'%s': ", n->files[s->next - 1]);
    if (!b) {
      s->file.release(&s->file);
      s->file_open = false;
      continue;
    }
    if (!n->n_columns) {
      *out = b;
      return 0;
    }
    rc = fsh_project(b, n->schema, n->n_columns, s->cols, out, err);
    fsh_batch_unref(b);
    return rc;
  }
}

/* Drains the input into s->held (non-empty batches). */
static int drain(ostate *s, fsh_batch_stream *in, fsh_error *err) {
  for (;;) {
    fsh_batch *b = NULL;
    FSH_RETURN_NOT_OK(in->get_next(in, &b, err));
    if (!b) return 0;
    if (b->length == 0) {
      fsh_batch_unref(b);
      continue;
    }
    if (hold(s, b)) {
      fsh_batch_unref(b);
      return fsh_error_set(err, ENOMEM, "out of memory");
    }
  }
}

/* ---- bounded memory: the spilling forms ------------------------------------------ */

/* Adds what s's spill area wrote to the run's counters (at release). */
static void spill_account(ostate *s) {
  if (!s->spill || !s->c) return;
  int64_t files = fsh_spill_files_written(s->spill), bytes = fsh_spill_bytes_written(s->spill);
  if (files == 0) return;
  run_ctx *c = s->c;
  pthread_mutex_lock(&c->mu);
  c->res->spill_files += files;
  c->res->spilled_bytes += bytes;
  c->res->operators_spilled++;
  if (c->node_spill) {
    c->node_spill[s->n->id].instances++;
    c->node_spill[s->n->id].files += files;
    c->node_spill[s->n->id].bytes += bytes;
  }
  pthread_mutex_unlock(&c->mu);
}

/* The operator instance's own spill area over the run's directories
 * (tag: the operator kind, in file names and errors). */
static int spill_area(ostate *s, const char *tag, fsh_error *err) {
  fsh_spill_options o = {.dirs = s->c->spill_dirs, .n_dirs = s->c->n_spill_dirs,
                         .compression = FSH_COMPRESSION_NONE, .tag = tag};
  return fsh_spill_new(&o, &s->spill, err);
}

static int rest_next(ostate *s, fsh_batch **out, fsh_error *err) {
  return s->rest_open ? s->rest.get_next(&s->rest, out, err) : 0;
}

/* Sort through the external sort: the same stable order as fsh_sort_batch. */
static int sort_spilling(ostate *s, fsh_batch **out, fsh_error *err) {
  const plan_node *n = s->n;
  if (!s->done) {
    s->done = true;
    FSH_RETURN_NOT_OK(spill_area(s, "sort", err));
    fsh_extsort_options o = {.key_cols = n->keys, .n_keys = n->n_keys, .order = n->sort_order,
                             .memory_budget = s->c->op_memory, .spill = s->spill};
    FSH_RETURN_NOT_OK(fsh_extsort_new(s->in.schema, &o, &s->xsort, err));
    for (;;) {
      fsh_batch *b = NULL;
      FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
      if (!b) break;
      int rc = fsh_extsort_push(s->xsort, b, err);
      fsh_batch_unref(b);
      if (rc) return rc;
    }
    FSH_RETURN_NOT_OK(fsh_extsort_finish(s->xsort, &s->rest, err));
    s->rest_open = true;
  }
  return rest_next(s, out, err);
}

/* SINGLE and PARTIAL aggregates through the spilling hash aggregate. */
static int agg_spilling(ostate *s, fsh_batch **out, fsh_error *err) {
  const plan_node *n = s->n;
  if (!s->done) {
    s->done = true;
    FSH_RETURN_NOT_OK(spill_area(s, "aggregate", err));
    fsh_spill_agg_options o = {.key_cols = n->keys, .n_keys = n->n_keys, .aggs = n->aggs,
                               .n_aggs = n->n_aggs, .mode = n->agg_mode,
                               .memory_budget = s->c->op_memory, .spill = s->spill};
    FSH_RETURN_NOT_OK(fsh_spill_agg_new(n->agg_input, &o, &s->sagg, err));
    for (;;) {
      fsh_batch *b = NULL;
      FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
      if (!b) break;
      int rc = fsh_spill_agg_push(s->sagg, b, err);
      fsh_batch_unref(b);
      if (rc) return rc;
    }
    FSH_RETURN_NOT_OK(fsh_spill_agg_finish(s->sagg, &s->rest, err));
    s->rest_open = true;
  }
  return rest_next(s, out, err);
}

/* Hash-partitions partial-state batch b on the keys into s->fin_w. */
static int final_scatter(ostate *s, fsh_batch *b, fsh_error *err) {
  const plan_node *n = s->n;
  if (b->length == 0) return 0;
  uint64_t *h = fsh_malloc((size_t)b->length * sizeof *h);
  int32_t *pids = fsh_malloc((size_t)b->length * sizeof *pids);
  fsh_batch *parts[FINAL_SPILL_PARTS] = {0};
  int rc = h && pids ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
  if (!rc) rc = fsh_hash_columns(b, s->fin_keys, n->n_keys, FSH_SPILL_AGG_SEED, h, err);
  if (!rc) rc = fsh_partition_hash(h, b->length, FINAL_SPILL_PARTS, pids, err);
  if (!rc) rc = fsh_scatter(b, pids, FINAL_SPILL_PARTS, parts, err);
  for (int32_t p = 0; p < FINAL_SPILL_PARTS; p++) {
    if (!rc && parts[p] && parts[p]->length > 0)
      rc = fsh_spill_writer_write(s->fin_w[p], parts[p], err);
    fsh_batch_unref(parts[p]);
  }
  fsh_free(h);
  fsh_free(pids);
  return rc;
}

/* The FINAL aggregate went over the budget: the in-memory one is dropped
 * and every partial-state batch held so far goes to the grace partitions. */
static int final_start_spill(ostate *s, fsh_error *err) {
  fsh_schema *partial = fsh_schema_ref(fsh_hash_agg_input_schema(s->agg));
  fsh_hash_agg_free(s->agg);
  s->agg = NULL;
  int rc = spill_area(s, "final-aggregate", err);
  s->fin_w = fsh_calloc(FINAL_SPILL_PARTS, sizeof *s->fin_w);
  s->fin_keys = fsh_calloc((size_t)s->n->n_keys, sizeof *s->fin_keys);
  if (!rc && (!s->fin_w || !s->fin_keys)) rc = fsh_error_set(err, ENOMEM, "out of memory");
  for (int32_t k = 0; !rc && k < s->n->n_keys; k++) s->fin_keys[k] = k;
  for (int32_t p = 0; !rc && p < FINAL_SPILL_PARTS; p++)
    rc = fsh_spill_writer_open(s->spill, partial, &s->fin_w[p], err);
  fsh_schema_unref(partial);
  if (rc) return rc;
  for (int64_t i = 0; i < s->n_held; i++) FSH_RETURN_NOT_OK(final_scatter(s, s->held[i], err));
  for (int64_t i = 0; i < s->n_held; i++) fsh_batch_unref(s->held[i]);
  s->n_held = 0;
  s->fin_held_bytes = 0;
  return 0;
}

/* A FINAL aggregate (after the exchange) under a budget, grace-style as
 * fsh_spill_agg (which has no FINAL mode): while the in-memory FINAL
 * aggregate plus the partial-state batches it was given (kept until the
 * end, so that a spill can still partition them) stay within the budget,
 * nothing spills and the result is the in-memory one; beyond it, every
 * partial-state batch is hash-partitioned on the keys (FSH_SPILL_AGG_SEED)
 * into FINAL_SPILL_PARTS spill files, each aggregated on its own at the
 * end (equal keys share a partition: every group comes out once). */
static int agg_final_bounded(ostate *s, fsh_batch **out, fsh_error *err) {
  const plan_node *n = s->n;
  int64_t budget = s->c->op_memory;
  if (!s->done) {
    s->done = true;
    FSH_RETURN_NOT_OK(fsh_hash_agg_new(n->agg_input, n->keys, n->n_keys, n->aggs, n->n_aggs,
                                       FSH_AGG_FINAL, 0, &s->agg, err));
    for (;;) {
      fsh_batch *b = NULL;
      FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
      if (!b) break;
      int rc = 0;
      if (s->fin_w) {
        rc = final_scatter(s, b, err);
        fsh_batch_unref(b);
      } else if ((rc = fsh_hash_agg_push(s->agg, b, err)) != 0 || b->length == 0) {
        fsh_batch_unref(b);
      } else if (hold(s, b) != 0) {
        fsh_batch_unref(b);
        rc = fsh_error_set(err, ENOMEM, "out of memory");
      } else {
        s->fin_held_bytes += fsh_exec_batch_memory(b);
        if (n->n_keys > 0 && s->fin_held_bytes + fsh_hash_agg_memory(s->agg) > budget)
          rc = final_start_spill(s, err);
      }
      if (rc) return rc;
    }
    if (!s->fin_w) return fsh_hash_agg_finish(s->agg, out, err); /* never spilled */
    if (!(s->fin_files = fsh_calloc(FINAL_SPILL_PARTS, sizeof *s->fin_files)))
      return fsh_error_set(err, ENOMEM, "out of memory");
    for (int32_t p = 0; p < FINAL_SPILL_PARTS; p++) {
      fsh_spill_writer *w = s->fin_w[p];
      s->fin_w[p] = NULL;
      FSH_RETURN_NOT_OK(fsh_spill_writer_finish(w, &s->fin_files[p], err));
    }
  }
  /* one partition at a time: its states through a fresh FINAL aggregate */
  while (s->fin_files && s->fin_next < FINAL_SPILL_PARTS) {
    int32_t p = s->fin_next++;
    fsh_spill_file *f = s->fin_files[p];
    s->fin_files[p] = NULL;
    if (fsh_spill_file_rows(f) == 0) {
      fsh_spill_file_free(f);
      continue;
    }
    fsh_hash_agg *a = NULL;
    fsh_batch_stream st;
    int rc = fsh_spill_file_open(f, &st, err);
    if (rc) return rc;
    rc = fsh_hash_agg_new(n->agg_input, n->keys, n->n_keys, n->aggs, n->n_aggs, FSH_AGG_FINAL,
                          budget, &a, err);
    while (!rc) {
      fsh_batch *b = NULL;
      if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
      rc = fsh_hash_agg_push(a, b, err);
      fsh_batch_unref(b);
    }
    st.release(&st);
    if (rc == EFBIG)
      rc = fsh_error_prefix(err, rc, "final aggregate: spill partition %d of %d is still over "
                            "the budget on its own: ", (int)p, FINAL_SPILL_PARTS);
    if (!rc) rc = fsh_hash_agg_finish(a, out, err);
    fsh_hash_agg_free(a);
    if (rc || (*out && (*out)->length > 0)) return rc;
    fsh_batch_unref(*out);
    *out = NULL;
  }
  return 0;
}

/* The join through the spilling hash join (right side built). */
static int join_spilling(ostate *s, fsh_batch **out, fsh_error *err) {
  const plan_node *n = s->n;
  fsh_batch *b = NULL;
  int rc;
  if (!s->sjoin) {
    FSH_RETURN_NOT_OK(spill_area(s, "join", err));
    FSH_RETURN_NOT_OK(fsh_spill_join_new(s->in.schema, s->in2.schema, n->keys, n->keys2,
                                         n->n_keys, n->join_type, false, s->c->op_memory, 0,
                                         s->spill, &s->sjoin, err));
    for (;;) {
      FSH_RETURN_NOT_OK(s->in2.get_next(&s->in2, &b, err));
      if (!b) break;
      rc = fsh_spill_join_build(s->sjoin, b, err);
      fsh_batch_unref(b);
      if (rc) return rc;
    }
  }
  if (!s->done) {
    for (;;) {
      FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
      if (!b) break;
      rc = fsh_spill_join_probe(s->sjoin, b, out, err);
      fsh_batch_unref(b);
      if (rc) return rc;
      if (*out && (*out)->length > 0) return 0;
      fsh_batch_unref(*out);
      *out = NULL;
    }
    s->done = true;
    FSH_RETURN_NOT_OK(fsh_spill_join_finish(s->sjoin, &s->rest, err));
    s->rest_open = true;
  }
  return rest_next(s, out, err);
}

static int op_next_inner(ostate *s, fsh_batch **out, fsh_error *err) {
  const plan_node *n = s->n;
  fsh_batch *b = NULL;
  int rc;
  switch (n->kind) {
    case PN_SCAN_GEN:
      return scan_gen_next(s, out, err);
    case PN_SCAN_IPC:
      return scan_ipc_next(s, out, err);
    case PN_FILTER:
      for (;;) {
        FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
        if (!b) return 0;
        rc = fsh_expr_filter(n->exprs[0], b, out, err);
        fsh_batch_unref(b);
        if (rc) return rc;
        if ((*out)->length > 0) return 0;
        fsh_batch_unref(*out);
        *out = NULL;
      }
    case PN_PROJECT:
      FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
      if (!b) return 0;
      rc = fsh_project(b, n->schema, n->n_exprs, n->exprs, out, err);
      fsh_batch_unref(b);
      return rc;
    case PN_AGG:
      if (s->c->op_memory > 0 && n->agg_mode == FSH_AGG_FINAL)
        return agg_final_bounded(s, out, err);
      if (s->c->op_memory > 0) return agg_spilling(s, out, err);
      if (s->done) return 0;
      FSH_RETURN_NOT_OK(fsh_hash_agg_new(n->agg_input, n->keys, n->n_keys, n->aggs, n->n_aggs,
                                         n->agg_mode, 0, &s->agg, err));
      for (;;) {
        FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
        if (!b) break;
        rc = fsh_hash_agg_push(s->agg, b, err);
        fsh_batch_unref(b);
        if (rc) return rc;
      }
      s->done = true;
      FSH_RETURN_NOT_OK(fsh_hash_agg_finish(s->agg, out, err));
      /* the output schema is the node's (same fields) */
      return 0;
    case PN_JOIN:
      if (s->c->op_memory > 0) return join_spilling(s, out, err);
      if (s->done) return 0;
      if (!s->join) {
        FSH_RETURN_NOT_OK(fsh_hash_join_new(s->in.schema, s->in2.schema, n->keys, n->keys2,
                                            n->n_keys, n->join_type, false, 0, &s->join, err));
        for (;;) {
          FSH_RETURN_NOT_OK(s->in2.get_next(&s->in2, &b, err));
          if (!b) break;
          rc = fsh_hash_join_build(s->join, b, err);
          fsh_batch_unref(b);
          if (rc) return rc;
        }
      }
      for (;;) {
        FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
        if (!b) break;
        rc = fsh_hash_join_probe(s->join, b, out, err);
        fsh_batch_unref(b);
        if (rc) return rc;
        if ((*out)->length > 0) return 0;
        fsh_batch_unref(*out);
        *out = NULL;
      }
      s->done = true;
      return fsh_hash_join_finish(s->join, out, err);
    case PN_SORT:
      if (s->c->op_memory > 0) return sort_spilling(s, out, err);
      if (s->done) return 0;
      s->done = true;
      FSH_RETURN_NOT_OK(drain(s, &s->in, err));
      if (!s->n_held) return 0;
      FSH_RETURN_NOT_OK(fsh_concat(s->held, s->n_held, &b, err));
      rc = fsh_sort_batch(b, n->keys, n->n_keys, n->sort_order, out, err);
      fsh_batch_unref(b);
      return rc;
    case PN_TOP_N: {
      if (s->done) return 0;
      s->done = true;
      /* bounded: the best n so far, merged with each new batch */
      fsh_batch *best = NULL;
      for (;;) {
        if ((rc = s->in.get_next(&s->in, &b, err)) != 0) {
          fsh_batch_unref(best);
          return rc;
        }
        if (!b) break;
        fsh_batch *pair[2] = {best, b}, *both = b;
        rc = 0;
        if (best) rc = fsh_concat(pair, 2, &both, err);
        fsh_batch *next = NULL;
        if (!rc) rc = fsh_top_n(both, n->keys, n->n_keys, n->sort_order, n->n, &next, err);
        if (both != b) fsh_batch_unref(both);
        fsh_batch_unref(b);
        fsh_batch_unref(best);
        best = next;
        if (rc) return rc;
      }
      *out = best;
      return 0;
    }
    case PN_LIMIT:
      if (s->remaining <= 0) return 0;
      FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
      if (!b) return 0;
      if (b->length <= s->remaining) {
        s->remaining -= b->length;
        *out = b;
        return 0;
      }
      *out = fsh_batch_slice(b, 0, s->remaining);
      fsh_batch_unref(b);
      s->remaining = 0;
      return *out ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
    case PN_INTO_BATCHES:
      for (;;) {
        FSH_RETURN_NOT_OK(fsh_rechunker_pop(s->rc, out, err));
        if (*out || s->rc_finished) return 0;
        FSH_RETURN_NOT_OK(s->in.get_next(&s->in, &b, err));
        if (!b) {
          fsh_rechunker_finish(s->rc);
          s->rc_finished = true;
          continue;
        }
        rc = fsh_rechunker_push(s->rc, b, err);
        fsh_batch_unref(b);
        if (rc) return rc;
      }
    default:
      return fsh_error_set(err, EINVAL, "node %d: not a streaming operator", n->id);
  }
}

static int op_get_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  ostate *s = st->private_data;
  *out = NULL;
  int rc = op_next_inner(s, out, err);
  if (rc) {
    fsh_batch_unref(*out);
    *out = NULL;
    return name_fail(s->n, rc, err);
  }
  return 0;
}

/* ---- exchanges ------------------------------------------------------------------- */

static fsh_plan_merge merge_policy(const run_ctx *c, const plan_node *x) {
  if (c->merge != FSH_PLAN_MERGE_AUTO) return c->merge;
  if (x->merge != FSH_PLAN_MERGE_AUTO) return x->merge;
  return c->p->merge;
}

static int64_t merge_group(const run_ctx *c, const plan_node *x, int64_t m, int64_t r) {
  return plan_merge_group(merge_policy(c, x), c->merge_threshold, m, r);
}

/* One map output being written: a writer for a group of map tasks. */
typedef struct mapw {
  fsh_shuffle_writer *w;
  int64_t map_id;
} mapw;

static int write_part(mapw *mw, int32_t part, fsh_batch *b, fsh_error *err) {
  if (!b || b->length == 0) return 0;
  return mw->w->write(mw->w, part, b, err);
}

/* Partitions batch b of map m (rows before it in that map: row0) and
 * writes it. Range boundaries / into-partitions slices as given. */
static int map_batch(const plan_node *x, mapw *mw, fsh_batch *b, int64_t m, int64_t row0,
                     int32_t n_out, const fsh_batch *bounds, int32_t *pids, fsh_batch **parts,
                     fsh_error *err) {
  int rc = 0;
  if (x->xkind == PX_GATHER) return write_part(mw, 0, b, err);
  if (x->xkind == PX_HASH) {
    uint64_t *h = fsh_malloc((size_t)(b->length ? b->length : 1) * sizeof *h);
    if (!h) return fsh_error_set(err, ENOMEM, "out of memory");
    rc = fsh_hash_columns(b, x->keys, x->n_keys, 0, h, err);
    if (!rc) rc = fsh_partition_hash(h, b->length, n_out, pids, err);
    fsh_free(h);
  } else if (x->xkind == PX_RANDOM) {
    uint64_t seed = x->seed ^ ((uint64_t)m * 0xD1B54A32D192ED03ull);
    rc = fsh_partition_random(b->length, n_out, seed, row0, pids, err);
  } else if (x->xkind == PX_RANGE) {
    if (!bounds) {
      memset(pids, 0, (size_t)b->length * sizeof *pids);
    } else {
      rc = fsh_partition_range(b, x->keys, x->n_keys, bounds, x->sort_order, pids, err);
    }
  }
  if (rc) return rc;
  FSH_RETURN_NOT_OK(fsh_scatter(b, pids, n_out, parts, err));
  for (int32_t p = 0; p < n_out; p++) {
    if (!rc) rc = write_part(mw, p, parts[p], err);
    fsh_batch_unref(parts[p]);
    parts[p] = NULL;
  }
  return rc;
}

/* The batches of every map task held (range and into_partitions need
 * every map's rows, or a sample of them, before any is written). */
typedef struct held_maps {
  int64_t m;
  fsh_batch ***batches; /* [m][n] */
  int64_t *n;
  int64_t *rows;
} held_maps;

static void held_reset(held_maps *h) {
  for (int64_t i = 0; i < h->m; i++) {
    for (int64_t k = 0; h->batches && h->batches[i] && k < h->n[i]; k++)
      fsh_batch_unref(h->batches[i][k]);
    if (h->batches) fsh_free(h->batches[i]);
  }
  fsh_free(h->batches);
  fsh_free(h->n);
  fsh_free(h->rows);
  memset(h, 0, sizeof *h);
}

static int held_fill(run_ctx *c, const plan_node *x, int64_t m, held_maps *h, fsh_error *err) {
  h->m = m;
  h->batches = fsh_calloc((size_t)m, sizeof *h->batches);
  h->n = fsh_calloc((size_t)m, sizeof *h->n);
  h->rows = fsh_calloc((size_t)m, sizeof *h->rows);
  if (!h->batches || !h->n || !h->rows) return fsh_error_set(err, ENOMEM, "out of memory");
  for (int64_t i = 0; i < m; i++) {
    fsh_batch_stream in;
    FSH_RETURN_NOT_OK(open_stream(c, x->inputs[0], (int32_t)i, &in, err));
    ostate tmp = {0};
    int rc = drain(&tmp, &in, err);
    in.release(&in);
    h->batches[i] = tmp.held;
    h->n[i] = tmp.n_held;
    for (int64_t k = 0; k < tmp.n_held; k++) h->rows[i] += tmp.held[k]->length;
    if (rc) return rc;
  }
  return 0;
}

/* A sample of every map's rows (evenly spaced, sample_rows per map at
 * most), and the range boundaries from it (NULL when there are no rows). */
static int range_bounds(const plan_node *x, const held_maps *h, int32_t n_out, fsh_batch **out,
                        fsh_error *err) {
  *out = NULL;
  fsh_batch **samples = fsh_calloc((size_t)(h->m ? h->m : 1), sizeof *samples);
  if (!samples) return fsh_error_set(err, ENOMEM, "out of memory");
  int64_t n_samples = 0;
  int rc = 0;
  for (int64_t i = 0; i < h->m && !rc; i++) {
    if (!h->rows[i]) continue;
    fsh_batch *all = NULL;
    if ((rc = fsh_concat(h->batches[i], h->n[i], &all, err)) != 0) break;
    int64_t k = h->rows[i] < x->sample_rows ? h->rows[i] : x->sample_rows;
    int64_t *idx = fsh_malloc((size_t)k * sizeof *idx);
    if (!idx) {
      fsh_batch_unref(all);
      rc = fsh_error_set(err, ENOMEM, "out of memory");
      break;
    }
    for (int64_t j = 0; j < k; j++) idx[j] = j * h->rows[i] / k;
    rc = fsh_take(all, idx, k, &samples[n_samples], err);
    if (!rc) n_samples++;
    fsh_free(idx);
    fsh_batch_unref(all);
  }
  fsh_batch *sample = NULL;
  if (!rc && n_samples) rc = fsh_concat(samples, n_samples, &sample, err);
  for (int64_t i = 0; i < n_samples; i++) fsh_batch_unref(samples[i]);
  fsh_free(samples);
  if (!rc && sample)
    rc = fsh_range_boundaries(sample, x->keys, x->n_keys, x->sort_order, n_out, out, err);
  fsh_batch_unref(sample);
  return rc;
}

/* What an exchange's map tasks share (read-only while they run, but for
 * total and global_row, which only the sequential path uses). */
typedef struct xshared {
  int64_t m, group, n_groups;
  int32_t r;
  bool holds;
  held_maps h;
  fsh_batch *bounds;
  int64_t *starts;
  int64_t total, global_row;
} xshared;

/* A map task's scratch space. */
typedef struct xscratch {
  int32_t *pids;
  int64_t pid_cap;
  fsh_batch **parts; /* [r] */
} xscratch;

static void stat_add(run_ctx *c, int64_t *field, int64_t n) {
  pthread_mutex_lock(&c->mu);
  *field += n;
  pthread_mutex_unlock(&c->mu);
}

/* Map tasks [g * group, (g + 1) * group) into one map output (*out). */
static int run_group(run_ctx *c, const plan_node *x, xstate *xs, xshared *sh, xscratch *sc,
                     int64_t g, fsh_map_output *out, fsh_error *err) {
  int64_t m = sh->m, group = sh->group;
  int32_t r = sh->r;
  mapw mw = {.map_id = g};
  int rc = fsh_shuffle_open_writer(backend_of(c, g), &xs->spec, g, 0, &mw.w, err);
  if (rc) return rc;
  for (int64_t i = g * group; i < m && i < (g + 1) * group && !rc; i++) {
    if (x->limit_hint >= 0 && sh->total >= x->limit_hint) {
      stat_add(c, &c->res->maps_skipped, 1);
      continue;
    }
    stat_add(c, &c->res->map_tasks, 1);
    fsh_batch_stream st;
    bool st_open = false;
    int64_t k = 0, row0 = 0;
    if (!sh->holds) {
      if ((rc = open_stream(c, x->inputs[0], (int32_t)i, &st, err)) != 0) break;
      st_open = true;
    }
    for (;;) {
      fsh_batch *b = NULL;
      if (sh->holds) {
        if (k < sh->h.n[i]) b = fsh_batch_ref(sh->h.batches[i][k++]);
      } else if ((rc = st.get_next(&st, &b, err)) != 0) {
        break;
      }
      if (!b) break;
      if (x->limit_hint >= 0 && sh->total + b->length > x->limit_hint) {
        fsh_batch *cut = fsh_batch_slice(b, 0, x->limit_hint - sh->total);
        fsh_batch_unref(b);
        if (!(b = cut)) {
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
      }
      if (b->length > sc->pid_cap) {
        fsh_free(sc->pids);
        sc->pid_cap = b->length;
        if (!(sc->pids = fsh_malloc((size_t)sc->pid_cap * sizeof *sc->pids))) {
          sc->pid_cap = 0;
          fsh_batch_unref(b);
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
      }
      if (x->xkind == PX_INTO_PARTITIONS) {
        /* split at output boundaries: rows [global_row, global_row + len) */
        int64_t at = 0;
        while (!rc && at < b->length) {
          int64_t gr = sh->global_row + at;
          int32_t p = 0;
          while (p + 1 < r && sh->starts[p + 1] <= gr) p++;
          int64_t take = sh->starts[p + 1] - gr;
          if (take > b->length - at) take = b->length - at;
          fsh_batch *piece = fsh_batch_slice(b, at, take);
          rc = piece ? write_part(&mw, p, piece, err) : fsh_error_set(err, ENOMEM, "oom");
          fsh_batch_unref(piece);
          at += take;
        }
        sh->global_row += b->length;
      } else {
        rc = map_batch(x, &mw, b, i, row0, r, sh->bounds, sc->pids, sc->parts, err);
      }
      row0 += b->length;
      sh->total += b->length;
      fsh_batch_unref(b);
      if (rc) break;
      if (x->limit_hint >= 0 && sh->total >= x->limit_hint) break;
    }
    if (st_open) st.release(&st);
  }
  if (rc) {
    mw.w->abort(mw.w);
    return rc;
  }
  return mw.w->close(mw.w, out, err);
}

/* Parallel map tasks: threads claim groups in turn. */
typedef struct xpool {
  run_ctx *c;
  const plan_node *x;
  xstate *xs;
  xshared *sh;
  atomic_long next;
  atomic_int failed;
  pthread_mutex_t mu;
  int rc;
  fsh_error err;
} xpool;

static void *pool_main(void *arg) {
  xpool *pl = arg;
  xscratch sc = {0};
  fsh_error err;
  int rc = 0;
  if (!(sc.parts = fsh_calloc((size_t)pl->sh->r, sizeof *sc.parts)))
    rc = fsh_error_set(&err, ENOMEM, "out of memory");
  while (!rc && !atomic_load(&pl->failed)) {
    long g = atomic_fetch_add(&pl->next, 1);
    if (g >= pl->sh->n_groups) break;
    rc = run_group(pl->c, pl->x, pl->xs, pl->sh, &sc, g, &pl->xs->outputs[g], &err);
  }
  if (rc) {
    pthread_mutex_lock(&pl->mu);
    if (!pl->rc) pl->rc = rc, pl->err = err;
    pthread_mutex_unlock(&pl->mu);
    atomic_store(&pl->failed, 1);
  }
  fsh_free(sc.pids);
  fsh_free(sc.parts);
  return NULL;
}

/* The shuffle of exchange x on every backend. */
static int release_shuffle(run_ctx *c, const xstate *xs, fsh_error *err) {
  int nb = c->n_backends ? c->n_backends : 1;
  int rc = 0;
  for (int k = 0; k < nb; k++) {
    fsh_error rerr;
    if (fsh_shuffle_release(backend_of(c, k), xs->spec.shuffle_id, &rerr) != 0 && !rc)
      rc = fsh_error_set(err, EIO, "releasing shuffle %" PRIu64 ": %s", xs->spec.shuffle_id,
                         rerr.message);
  }
  return rc;
}

/* Releases, as soon as an exchange has run, every exchange nobody will
 * read any more: those whose readers (the nodes fed from it up to the next
 * exchanges) end only in exchanges that have run -- their map tasks read
 * every partition they needed -- and not in the plan's output. Keeps the
 * stores (and the memory backend) from holding every exchange of a long
 * plan until the end. */
static int release_consumed(run_ctx *c, fsh_error *err) {
  const fsh_plan *p = c->p;
  int root = p->n_nodes - 1;
  bool *reach = fsh_malloc((size_t)p->n_nodes * sizeof *reach);
  if (!reach) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = 0;
  for (int x = 0; x < root && !rc; x++) {
    if (p->nodes[x]->kind != PN_EXCHANGE || !c->x[x].done || c->x[x].released) continue;
    memset(reach, 0, (size_t)p->n_nodes * sizeof *reach);
    reach[x] = true;
    bool still_read = false;
    for (int j = x + 1; j < p->n_nodes && !still_read; j++) {
      const plan_node *n = p->nodes[j];
      for (int k = 0; k < n->n_inputs; k++) {
        int in = n->inputs[k];
        if (reach[in] && (in == x || p->nodes[in]->kind != PN_EXCHANGE)) reach[j] = true;
      }
      if (!reach[j]) continue;
      if (n->kind == PN_EXCHANGE ? !c->x[j].done : j == root) still_read = true;
    }
    if (still_read) continue;
    c->x[x].released = true;
    rc = release_shuffle(c, &c->x[x], err);
  }
  fsh_free(reach);
  return rc;
}

/* Runs every exchange the stage of x reads that has not run yet (so that
 * parallel map tasks only read). */
static int run_inputs(run_ctx *c, const plan_node *x, fsh_error *err) {
  bool *member = fsh_malloc((size_t)c->p->n_nodes * sizeof *member);
  if (!member) return fsh_error_set(err, ENOMEM, "out of memory");
  plan_stage_members(c->p, x->id, member);
  int rc = 0;
  for (int i = 0; i < c->p->n_nodes && !rc; i++)
    if (member[i] && i != x->id && c->p->nodes[i]->kind == PN_EXCHANGE && !c->x[i].done)
      rc = run_exchange(c, c->p->nodes[i], err);
  fsh_free(member);
  return rc;
}

static int run_exchange(run_ctx *c, const plan_node *x, fsh_error *err) {
  xstate *xs = &c->x[x->id];
  const plan_node *in = c->p->nodes[x->inputs[0]];
  xshared sh = {.m = parts_of(c, in), .r = x->n_partitions};
  sh.group = merge_group(c, x, sh.m, sh.r);
  sh.n_groups = (sh.m + sh.group - 1) / sh.group;
  sh.holds = x->xkind == PX_RANGE || x->xkind == PX_INTO_PARTITIONS;
  xs->spec.shuffle_id = c->first_shuffle_id + (uint64_t)x->id;
  xs->spec.n_partitions = sh.r;
  xs->spec.schema = x->schema;
  xs->spec.compression = FSH_COMPRESSION_NONE;
  xs->outputs = fsh_calloc((size_t)sh.n_groups, sizeof *xs->outputs);
  xscratch sc = {.parts = fsh_calloc((size_t)sh.r, sizeof *sc.parts)};
  fsh_part_slice *slices = NULL;
  int rc = 0;
  if (!xs->outputs || !sc.parts) rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (!rc && sh.holds) rc = held_fill(c, x, sh.m, &sh.h, err);
  if (!rc && x->xkind == PX_RANGE) rc = range_bounds(x, &sh.h, sh.r, &sh.bounds, err);
  if (!rc && x->xkind == PX_INTO_PARTITIONS) {
    slices = fsh_calloc((size_t)sh.r, sizeof *slices);
    sh.starts = fsh_calloc((size_t)sh.r + 1, sizeof *sh.starts);
    if (!slices || !sh.starts) rc = fsh_error_set(err, ENOMEM, "out of memory");
    if (!rc) rc = fsh_plan_partitions(sh.h.rows, sh.m, sh.r, slices, err);
    /* output p covers global rows [starts[p], starts[p + 1]) */
    for (int32_t p = 0; !rc && p < sh.r; p++) sh.starts[p + 1] = sh.starts[p] + slices[p].n_rows;
  }
  /* map tasks of streaming exchanges may run on threads; a limit's maps
   * run in order (one stops those after it) */
  int threads = c->n_threads;
  if (threads > sh.n_groups) threads = (int)sh.n_groups;
  if (!rc && threads > 1 && !sh.holds && x->limit_hint < 0) {
    if ((rc = run_inputs(c, x, err)) == 0) {
      xpool pl = {.c = c, .x = x, .xs = xs, .sh = &sh};
      pthread_mutex_init(&pl.mu, NULL);
      pthread_t tids[64];
      int started = 0;
      for (; started < threads && started < 64; started++)
        if (pthread_create(&tids[started], NULL, pool_main, &pl) != 0) break;
      if (started == 0) pool_main(&pl);
      for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
      pthread_mutex_destroy(&pl.mu);
      xs->n_outputs = sh.n_groups; /* zeroed slots reset fine */
      if (pl.rc) {
        rc = pl.rc;
        if (err) *err = pl.err;
      } else {
        stat_add(c, &c->res->map_outputs, sh.n_groups);
      }
    }
  } else {
    for (int64_t g = 0; g < sh.n_groups && !rc; g++) {
      if (x->limit_hint >= 0 && sh.total >= x->limit_hint) {
        stat_add(c, &c->res->maps_skipped, sh.m - g * sh.group);
        break;
      }
      if ((rc = run_group(c, x, xs, &sh, &sc, g, &xs->outputs[xs->n_outputs], err)) != 0) break;
      xs->n_outputs++;
      stat_add(c, &c->res->map_outputs, 1);
    }
  }
  held_reset(&sh.h);
  fsh_batch_unref(sh.bounds);
  fsh_free(slices);
  fsh_free(sh.starts);
  fsh_free(sc.pids);
  fsh_free(sc.parts);
  if (rc) return name_fail(x, rc, err);
  xs->done = true;
  stat_add(c, &c->res->exchanges, 1);
  return release_consumed(c, err);
}

/* ---- opening a partition of a node ------------------------------------------------ */

static int open_stream(run_ctx *c, int node, int32_t part, fsh_batch_stream *out, fsh_error *err) {
  const plan_node *n = c->p->nodes[node];
  memset(out, 0, sizeof *out);
  if (n->kind == PN_EXCHANGE) {
    if (c->reference) return open_stream(c, n->inputs[0], 0, out, err);
    if (!c->x[node].done) FSH_RETURN_NOT_OK(run_exchange(c, n, err));
    xstate *xs = &c->x[node];
    if (xs->n_outputs == 0) return fsh_batch_stream_from_batches(n->schema, NULL, 0, out, err);
    int rc = fsh_shuffle_open_reader(backend_of(c, part), &xs->spec, part, xs->outputs,
                                     xs->n_outputs, out, err);
    return rc ? name_fail(n, rc, err) : 0;
  }
  ostate *s = fsh_calloc(1, sizeof *s);
  if (!s) return fsh_error_set(err, ENOMEM, "out of memory");
  s->c = c;
  s->n = n;
  s->part = part;
  int rc = 0;
  int32_t np = parts_of(c, n);
  if (n->kind == PN_SCAN_GEN) {
    int64_t nb = (n->gen.rows + n->gen.batch_rows - 1) / n->gen.batch_rows;
    s->next = nb * part / np;
    s->end = nb * (part + 1) / np;
  } else if (n->kind == PN_SCAN_IPC) {
    s->next = n->n_files * part / np;
    s->end = n->n_files * (part + 1) / np;
    if (n->n_columns) {
      if (!(s->cols = fsh_calloc((size_t)n->n_columns, sizeof *s->cols))) rc = ENOMEM;
      for (int32_t i = 0; !rc && i < n->n_columns; i++)
        if (!(s->cols[i] = fsh_expr_clone(n->column_exprs[i]))) rc = ENOMEM;
      if (rc) rc = fsh_error_set(err, ENOMEM, "out of memory");
    }
  } else {
    if (!(rc = open_stream(c, n->inputs[0], part, &s->in, err))) s->in_open = true;
    if (!rc && n->n_inputs == 2) {
      const plan_node *build = c->p->nodes[n->inputs[1]];
      int32_t bp = parts_of(c, build) == 1 ? 0 : part;
      if (!(rc = open_stream(c, n->inputs[1], bp, &s->in2, err))) s->in2_open = true;
    }
    if (!rc && n->kind == PN_LIMIT) s->remaining = n->n;
    if (!rc && n->kind == PN_INTO_BATCHES) rc = fsh_rechunker_new(n->n, &s->rc, err);
  }
  if (rc) {
    ostate_free(s);
    return rc;
  }
  out->schema = fsh_schema_ref(n->schema);
  out->get_next = op_get_next;
  out->release = op_release;
  out->private_data = s;
  return 0;
}

/* ---- running -------------------------------------------------------------------------- */

/* out->spill_summary: "NAME [PHASE]: instances=I files=F bytes=B; ..."
 * over the nodes that spilled (PHASE: sort, join, aggregate, partial
 * aggregate, final aggregate). */
static int spill_summary(run_ctx *c, fsh_error *err) {
  size_t cap = 1, len = 0;
  for (int i = 0; i < c->p->n_nodes; i++)
    if (c->node_spill[i].files) cap += 320;
  char *text = fsh_malloc(cap);
  if (!text) return fsh_error_set(err, ENOMEM, "out of memory");
  text[0] = 0;
  for (int i = 0; i < c->p->n_nodes; i++) {
    const struct node_spill *ns = &c->node_spill[i];
    if (!ns->files) continue;
    char who[200];
    const plan_node *n = c->p->nodes[i];
    const char *phase = n->kind == PN_SORT ? "sort" : n->kind == PN_JOIN ? "join"
                        : n->agg_mode == FSH_AGG_PARTIAL ? "partial aggregate"
                        : n->agg_mode == FSH_AGG_FINAL ? "final aggregate" : "aggregate";
    int k = snprintf(text + len, cap - len, "%s%s [%s]: instances=%lld files=%lld bytes=%lld",
                     len ? "; " : "", plan_node_name(n, who, sizeof who), phase,
                     (long long)ns->instances, (long long)ns->files, (long long)ns->bytes);
    if (k > 0) len += (size_t)k < cap - len ? (size_t)k : cap - len - 1;
  }
  c->res->spill_summary = text;
  return 0;
}

void fsh_plan_result_reset(fsh_plan_result *r) {
  if (!r) return;
  fsh_free(r->spill_summary);
  for (int64_t i = 0; i < r->n_batches; i++) fsh_batch_unref(r->batches[i]);
  fsh_free(r->batches);
  fsh_free(r->partition_batches);
  fsh_schema_unref(r->schema);
  memset(r, 0, sizeof *r);
}

int fsh_plan_run(const fsh_plan *p, const fsh_plan_run_options *o, fsh_plan_result *out,
                 fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!p || !p->n_nodes) return fsh_error_set(err, EINVAL, "run: the plan is empty");
  fsh_plan_run_options def = {0};
  if (!o) o = &def;
  run_ctx c = {.p = p, .reference = o->reference, .merge = o->merge,
               .merge_threshold = o->merge_threshold ? o->merge_threshold : p->merge_threshold,
               .first_shuffle_id = o->first_shuffle_id ? o->first_shuffle_id : 1,
               .backend = o->backend, .backends = o->backends,
               .n_backends = o->backends && o->n_backends > 0 ? o->n_backends : 0, .res = out};
  if (c.merge_threshold < 1) c.merge_threshold = 200;
  c.n_threads = o->n_threads < 1 ? 1 : o->n_threads > 64 ? 64 : o->n_threads;
  if (o->operator_memory < 0)
    return fsh_error_set(err, EINVAL, "run: operator_memory %lld is negative",
                         (long long)o->operator_memory);
  if (o->operator_memory > 0 && (!o->spill_dirs || o->n_spill_dirs < 1))
    return fsh_error_set(err, EINVAL, "run: operator_memory %lld bytes needs at least one spill "
                         "directory (spill_dirs)", (long long)o->operator_memory);
  c.op_memory = o->operator_memory;
  c.spill_dirs = o->spill_dirs;
  c.n_spill_dirs = o->operator_memory > 0 ? o->n_spill_dirs : 0;
  for (int i = 0; i < c.n_backends && !c.reference; i++)
    if (!c.backends[i]) return fsh_error_set(err, EINVAL, "run: backends[%d] is NULL", i);
  pthread_mutex_init(&c.mu, NULL);
  fsh_shuffle_backend *own = NULL;
  int rc = 0;
  if (!c.backend && !c.reference && !c.n_backends) {
    if ((rc = fsh_shuffle_memory_new(&own, err)) != 0) return rc;
    c.backend = own;
  }
  c.x = fsh_calloc((size_t)p->n_nodes, sizeof *c.x);
  if (c.op_memory > 0) c.node_spill = fsh_calloc((size_t)p->n_nodes, sizeof *c.node_spill);
  if (!c.x || (c.op_memory > 0 && !c.node_spill)) rc = fsh_error_set(err, ENOMEM, "out of memory");
  const plan_node *root = p->nodes[p->n_nodes - 1];
  int64_t cap = 0;
  int32_t np = parts_of(&c, root);
  out->n_partitions = np;
  if (!rc && !(out->partition_batches = fsh_calloc((size_t)np, sizeof *out->partition_batches)))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  for (int32_t part = 0; part < np && !rc; part++) {
    fsh_batch_stream st;
    if ((rc = open_stream(&c, root->id, part, &st, err)) != 0) break;
    for (;;) {
      fsh_batch *b = NULL;
      if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
      if (b->length == 0) {
        fsh_batch_unref(b);
        continue;
      }
      if (out->n_batches == cap) {
        int64_t nc = cap ? cap * 2 : 16;
        fsh_batch **v = fsh_realloc(out->batches, (size_t)nc * sizeof *v);
        if (!v) {
          fsh_batch_unref(b);
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
        out->batches = v, cap = nc;
      }
      out->batches[out->n_batches++] = b;
      out->partition_batches[part]++;
      out->rows += b->length;
    }
    st.release(&st);
  }
  if (c.x) {
    for (int i = 0; i < p->n_nodes; i++) {
      xstate *xs = &c.x[i];
      if ((xs->outputs || xs->done) && !xs->released) {
        fsh_error rerr;
        if (release_shuffle(&c, xs, &rerr) != 0 && !rc) {
          if (err) *err = rerr;
          rc = EIO;
        }
      }
      for (int64_t k = 0; k < xs->n_outputs; k++) fsh_map_output_reset(&xs->outputs[k]);
      fsh_free(xs->outputs);
    }
  }
  fsh_free(c.x);
  if (!rc && c.node_spill && out->spill_files > 0) rc = spill_summary(&c, err);
  fsh_free(c.node_spill);
  pthread_mutex_destroy(&c.mu);
  fsh_shuffle_backend_destroy(own);
  if (rc) {
    fsh_plan_result_reset(out);
    return rc;
  }
  out->schema = fsh_schema_ref(root->schema);
  return 0;
}

/* ---- comparing results ------------------------------------------------------------------ */

/* A float column's values rounded to 12 significant digits (nulls kept):
 * sums and averages computed in another order differ in their last bits. */
static int round_floats(const fsh_field *f, fsh_array *a, fsh_array **out, fsh_error *err) {
  bool f32 = f->type == FSH_TYPE_FLOAT32;
  int64_t w = f32 ? 4 : 8;
  fsh_array *r = fsh_array_new(2, 0);
  if (!r) return fsh_error_set(err, ENOMEM, "out of memory");
  r->length = a->length;
  r->null_count = a->null_count;
  r->offset = 0;
  if (a->buffers[0]) {
    r->buffers[0] = fsh_buffer_new(fsh_bytes_for_bits(a->length), true);
    if (r->buffers[0])
      for (int64_t i = 0; i < a->length; i++)
        fsh_bit_set(r->buffers[0]->data, i, fsh_array_is_valid(a, i));
  }
  r->buffers[1] = fsh_buffer_new(a->length * w, true);
  if ((a->buffers[0] && !r->buffers[0]) || !r->buffers[1]) {
    fsh_array_unref(r);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  for (int64_t i = 0; i < a->length; i++) {
    if (!fsh_array_is_valid(a, i)) continue;
    double v = f32 ? (double)((const float *)(const void *)a->buffers[1]->data)[a->offset + i]
                   : ((const double *)(const void *)a->buffers[1]->data)[a->offset + i];
    char text[40];
    snprintf(text, sizeof text, "%.12g", v);
    double rv = strtod(text, NULL);
    if (f32) ((float *)(void *)r->buffers[1]->data)[i] = (float)rv;
    else ((double *)(void *)r->buffers[1]->data)[i] = rv;
  }
  *out = r;
  return 0;
}

/* Hashes of keys[0, n_keys) of every row (all columns when keys is NULL),
 * float columns rounded when `round`. */
static int row_hashes(const fsh_plan_result *r, const int32_t *key_cols, int32_t n_keys,
                      bool round, uint64_t **out, int64_t *n, fsh_error *err) {
  *out = NULL;
  *n = 0;
  uint64_t *h = fsh_malloc((size_t)(r->rows ? r->rows : 1) * sizeof *h);
  int32_t *all = NULL;
  if (!h) return fsh_error_set(err, ENOMEM, "out of memory");
  if (!key_cols) {
    int64_t nf = r->schema ? r->schema->n_fields : 0;
    if (!(all = fsh_malloc((size_t)(nf ? nf : 1) * sizeof *all))) {
      fsh_free(h);
      return fsh_error_set(err, ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < nf; i++) all[i] = (int32_t)i;
    key_cols = all;
    n_keys = (int32_t)nf;
  }
  int64_t at = 0;
  int rc = 0;
  for (int64_t i = 0; i < r->n_batches && !rc; i++) {
    fsh_batch *b = r->batches[i], *rb = NULL;
    for (int64_t c = 0; round && c < b->n_columns && !rc; c++) {
      const fsh_field *f = &b->schema->fields[c];
      if (f->dictionary || (f->type != FSH_TYPE_FLOAT32 && f->type != FSH_TYPE_FLOAT64)) continue;
      if (!rb) {
        if (!(rb = fsh_batch_new(b->schema, b->length))) {
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
        for (int64_t k = 0; k < b->n_columns; k++) rb->columns[k] = fsh_array_ref(b->columns[k]);
      }
      fsh_array *rounded = NULL;
      if ((rc = round_floats(f, b->columns[c], &rounded, err)) != 0) break;
      fsh_array_unref(rb->columns[c]);
      rb->columns[c] = rounded;
    }
    if (!rc && n_keys > 0)
      rc = fsh_hash_columns(rb ? rb : b, key_cols, n_keys, 0, h + at, err);
    else if (!rc)
      memset(h + at, 0, (size_t)b->length * sizeof *h);
    fsh_batch_unref(rb);
    at += b->length;
  }
  fsh_free(all);
  if (rc) {
    fsh_free(h);
    return rc;
  }
  *out = h;
  *n = at;
  return 0;
}

int fsh_plan_result_row_hashes(const fsh_plan_result *r, const int32_t *key_cols, int32_t n_keys,
                               uint64_t **out, int64_t *n, fsh_error *err) {
  return row_hashes(r, key_cols, n_keys, false, out, n, err);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int fsh_plan_result_compare(const fsh_plan *p, const fsh_plan_result *a, const fsh_plan_result *b,
                            fsh_error *err) {
  if (a->rows != b->rows)
    return fsh_error_set(err, EINVAL, "%lld rows, the reference has %lld", (long long)a->rows,
                         (long long)b->rows);
  int32_t n_keys;
  const int32_t *keys;
  bool determined;
  fsh_plan_order order = fsh_plan_output_order(p, &n_keys, &keys, &determined);
  uint64_t *ha = NULL, *hb = NULL;
  int64_t na, nb;
  int rc = 0;
  if ((rc = row_hashes(a, NULL, 0, true, &ha, &na, err)) != 0) return rc;
  if ((rc = row_hashes(b, NULL, 0, true, &hb, &nb, err)) != 0) {
    fsh_free(ha);
    return rc;
  }
  if (order == FSH_PLAN_ORDER_EXACT && determined) {
    for (int64_t i = 0; i < na && !rc; i++)
      if (ha[i] != hb[i]) rc = fsh_error_set(err, EINVAL, "row %lld differs from the reference's "
                                                          "(the output order is exact)", (long long)i);
  }
  if (!rc && determined) {
    qsort(ha, (size_t)na, sizeof *ha, cmp_u64);
    qsort(hb, (size_t)nb, sizeof *hb, cmp_u64);
    for (int64_t i = 0; i < na && !rc; i++)
      if (ha[i] != hb[i])
        rc = fsh_error_set(err, EINVAL, "the rows differ from the reference's (as multisets: "
                                        "sorted row hash %lld differs)", (long long)i);
  }
  fsh_free(ha);
  fsh_free(hb);
  if (rc || order != FSH_PLAN_ORDER_KEYS) return rc;
  if ((rc = row_hashes(a, keys, n_keys, true, &ha, &na, err)) != 0) return rc;
  if ((rc = row_hashes(b, keys, n_keys, true, &hb, &nb, err)) != 0) {
    fsh_free(ha);
    return rc;
  }
  for (int64_t i = 0; i < na && !rc; i++)
    if (ha[i] != hb[i])
      rc = fsh_error_set(err, EINVAL, "the sort keys of row %lld differ from the reference's "
                                      "(the output is ordered by them)", (long long)i);
  fsh_free(ha);
  fsh_free(hb);
  return rc;
}
