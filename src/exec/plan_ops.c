/* plan_ops.c -- the operators of a plan as pull-based batch streams, one
 * per partition: scans, filter / project, aggregate / join / sort (and
 * their spilling forms under an operator memory budget), top-N, limit,
 * into_batches; and opening a partition of any node (an exchange's: its
 * reduce partition through the shuffle backend's reader). */
#include "exec/plan_run_internal.h"

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
  fsh_mem_set fin_held; /* the held batches' buffers, each counted once */
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
  fsh_mem_set_reset(&s->fin_held);
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

int plan_drain(fsh_batch_stream *in, fsh_batch ***held, int64_t *n_held, fsh_error *err) {
  ostate tmp = {0};
  int rc = drain(&tmp, in, err);
  *held = tmp.held;
  *n_held = tmp.n_held;
  return rc;
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
  return fsh_spill_scatter(b, s->fin_keys, s->n->n_keys, FSH_SPILL_AGG_SEED, FINAL_SPILL_PARTS,
                           s->fin_w, err);
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
  fsh_mem_set_reset(&s->fin_held);
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
      } else if ((rc = fsh_mem_set_add(&s->fin_held, b, NULL, err)) == 0 && n->n_keys > 0 &&
                 s->fin_held.bytes + fsh_hash_agg_memory(s->agg) > budget) {
        rc = final_start_spill(s, err); /* b is held: freed with the state on error */
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
      /* the input is in b now: not held twice while it is sorted */
      for (int64_t i = 0; i < s->n_held; i++) fsh_batch_unref(s->held[i]);
      s->n_held = 0;
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
  /* a cancelled task stops here too: a scan whose filter drops nearly every
   * row reads and writes no batch for a long time */
  int rc = plan_cancelled(s->c->cancel, err);
  if (!rc) rc = op_next_inner(s, out, err);
  if (rc) {
    fsh_batch_unref(*out);
    *out = NULL;
    return plan_name_fail(s->n, rc, err);
  }
  return 0;
}

/* ---- opening a partition of a node ------------------------------------------------ */

int plan_open_stream(run_ctx *c, int node, int32_t part, fsh_batch_stream *out, fsh_error *err) {
  const plan_node *n = c->p->nodes[node];
  memset(out, 0, sizeof *out);
  if (n->kind == PN_EXCHANGE) {
    if (c->reference) return plan_open_stream(c, n->inputs[0], 0, out, err);
    if (!c->x[node].done) FSH_RETURN_NOT_OK(plan_run_exchange(c, n, err));
    xstate *xs = &c->x[node];
    int rc = xs->n_outputs == 0
                 ? fsh_batch_stream_from_batches(n->schema, NULL, 0, out, err)
                 : fsh_shuffle_open_reader(plan_backend_of(c, part), &xs->spec, part,
                                           xs->outputs, xs->n_outputs, out, err);
    /* a plan-fragment task counts what it reads (plan_task.c) */
    if (rc == 0 && c->reads) rc = plan_count_reads(c, node, out, err);
    return rc ? plan_name_fail(n, rc, err) : 0;
  }
  ostate *s = fsh_calloc(1, sizeof *s);
  if (!s) return fsh_error_set(err, ENOMEM, "out of memory");
  s->c = c;
  s->n = n;
  s->part = part;
  int rc = 0;
  int32_t np = plan_parts_of(c, n);
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
    if (!(rc = plan_open_stream(c, n->inputs[0], part, &s->in, err))) s->in_open = true;
    if (!rc && n->n_inputs == 2) {
      const plan_node *build = c->p->nodes[n->inputs[1]];
      int32_t bp = plan_parts_of(c, build) == 1 ? 0 : part;
      if (!(rc = plan_open_stream(c, n->inputs[1], bp, &s->in2, err))) s->in2_open = true;
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
