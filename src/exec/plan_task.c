/* plan_task.c -- a "plan-fragment" task: one task of a plan's stage run on
 * a worker. Its body carries the stage's fragment (Plan.proto), the task's
 * index, the map outputs of every exchange the fragment reads (each a
 * reduce-verify body) and where its output goes (fsh_fragment_task,
 * shuffle.h: the codec is the shuffle layer's). Running it
 * builds the fragment's plan (plan_fragment_build) and runs its operators
 * exactly as the in-process runner does (plan_ops.c's streams, the input
 * exchanges read through the task's backend reader, the output exchange
 * partitioned and written by plan_exchange.c). Its answer is a map task's
 * (shuffle.h): the output's metadata and the row checksum of each
 * partition written. Also the worker task kind that runs it. A cancel flag
 * (the worker task's, or the caller's) is checked before every batch the
 * task reads or writes (a backend wrapped around the task's) and every
 * batch an operator gives (plan_ops.c: a scan whose filter drops nearly
 * every row stops too): a cancelled task ends with ECANCELED at its next
 * batch, its output aborted. */
#include "exec/plan_run_internal.h"

#include <inttypes.h>
#include <time.h>

static int64_t now_nanos(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- running ---------------------------------------------------------------------- */

/* A plan-fragment task ready to run: the fragment's plan and the input
 * exchanges' map outputs, checked against each other. */
typedef struct fsh_plan_task_prepared {
  fsh_plan *plan;
  int *ids;                 /* [n_nodes]: node id in the whole plan */
  int output;               /* node index written (-1: the result) */
  fsh_map_output **sources; /* [n_nodes]: an input exchange's map outputs (one block) */
  int64_t *n_sources;
  uint64_t *shuffle_ids;
  int32_t *read_parts;      /* [n_nodes]: the partition its task reads */
  bool staged;              /* its output exchange is staged (plan_staged_task) */
  bool scatter;             /* a scatter stage's: the side input's map outputs */
  bool recompute;           /* a range stage that computes its input again
                               (plan_range_recomputes): staged, only the
                               sample; scattered, from its operators */
  int staged_node;          /* a recomputing scatter: the staged read (-1) */
  fsh_map_output *side;
  int64_t n_side;
} prepared;

static void prepared_free(prepared *q) {
  if (!q) return;
  for (int i = 0; q->plan && q->sources && i < q->plan->n_nodes; i++) fsh_free(q->sources[i]);
  fsh_free(q->sources);
  fsh_free(q->n_sources);
  fsh_free(q->shuffle_ids);
  fsh_free(q->read_parts);
  fsh_free(q->side);
  fsh_free(q->ids);
  fsh_plan_free(q->plan);
  fsh_free(q);
}

/* Whether a recomputing scatter fragment's operators but the staged read
 * are a stage plan_range_recomputes accepts. */
static bool scatter_recomputes(const prepared *q, const plan_node *root) {
  int nn = q->plan->n_nodes;
  bool *member = fsh_malloc((size_t)nn * sizeof *member);
  if (!member) return false;
  for (int j = 0; j < nn; j++) member[j] = j != q->staged_node;
  bool ok = plan_range_recomputes(q->plan, root, member);
  fsh_free(member);
  return ok;
}

/* Builds the fragment's plan and matches every input exchange with the
 * map outputs the task gives for it. */
static int prepare(const fsh_fragment_task *t, prepared **out, fsh_error *err) {
  *out = NULL;
  if (!t->fragment || t->n_tasks < 1 || t->task < 0 || t->task >= t->n_tasks || t->map_id < 0 ||
      t->attempt < 0 || t->n_inputs < 0 || (t->n_inputs && !t->inputs))
    return fsh_error_set(err, EINVAL, "plan-fragment: task %d of %d, map %" PRId64 " attempt "
                         "%d, %d inputs%s", t->task, t->n_tasks, t->map_id, t->attempt,
                         t->n_inputs, t->fragment ? "" : ", no fragment");
  fsh_plan_fragment *f = NULL;
  FSH_RETURN_NOT_OK(fsh_plan_fragment_decode(t->fragment->data, t->fragment->size, &f, err));
  prepared *q = fsh_calloc(1, sizeof *q);
  int rc = q ? plan_fragment_build(f, &q->plan, &q->ids, err)
             : fsh_error_set(err, ENOMEM, "out of memory");
  int out_id = plan_fragment_output(f);
  if (q) q->scatter = plan_fragment_scatter(f);
  fsh_plan_fragment_free(f);
  int nn = rc ? 0 : q->plan->n_nodes;
  if (!rc) {
    q->sources = fsh_calloc((size_t)nn, sizeof *q->sources);
    q->n_sources = fsh_calloc((size_t)nn, sizeof *q->n_sources);
    q->shuffle_ids = fsh_calloc((size_t)nn, sizeof *q->shuffle_ids);
    q->read_parts = fsh_calloc((size_t)nn, sizeof *q->read_parts);
    if (!q->sources || !q->n_sources || !q->shuffle_ids || !q->read_parts)
      rc = fsh_error_set(err, ENOMEM, "out of memory");
    q->output = -1;
    for (int i = 0; i < nn; i++)
      if (q->ids[i] == out_id) q->output = i;
  }
  /* the stage runs in as many partitions as the node its root reads */
  if (!rc) {
    const plan_node *root = q->plan->nodes[nn - 1];
    const plan_node *top = q->output >= 0 && root->n_inputs == 1
                               ? q->plan->nodes[root->inputs[0]] : root;
    /* a scatter reads the staged shuffle, or computes its input again */
    q->staged_node = -1;
    if (q->scatter && top->kind != PN_EXCHANGE) {
      q->recompute = true;
      for (int j = 0; j < nn; j++)
        if (q->plan->nodes[j]->kind == PN_EXCHANGE && q->plan->nodes[j]->n_inputs == 0)
          q->staged_node = j;
    }
    if (q->output >= 0 && root->n_inputs != 1)
      rc = fsh_error_set(err, EINVAL, "the output exchange (node %d) has no input in the "
                         "fragment", out_id);
    else if (q->recompute && (q->staged_node < 0 || !scatter_recomputes(q, root)))
      rc = fsh_error_set(err, EINVAL, "a scatter that is not a range exchange over scans, "
                         "filters and projects reads its staged rows");
    else if (top->n_partitions != t->n_tasks + (q->scatter && !q->recompute ? 1 : 0))
      rc = fsh_error_set(err, EINVAL, "the stage runs in %d partitions, the task says %d tasks%s",
                         (int)top->n_partitions, t->n_tasks, q->scatter ? " (scattered)" : "");
    q->staged = root->staged;
    if (q->staged) q->recompute = plan_range_recomputes(q->plan, root, NULL);
    bool holds = root->kind == PN_EXCHANGE &&
                 (root->xkind == PX_RANGE || root->xkind == PX_INTO_PARTITIONS);
    if (!rc && holds && !q->staged && !q->scatter)
      rc = fsh_error_set(err, EINVAL, "a %s exchange is written staged, then scattered",
                         plan_exchange_name(root->xkind));
    /* a scatter: the samples every task staged, or every task's rows */
    if (!rc && q->scatter && root->xkind == PX_RANGE) {
      const fsh_reduce_task *sd = &t->side;
      if (!t->has_side || sd->partition != t->n_tasks || sd->n_partitions != t->n_tasks + 1 ||
          sd->backend != t->backend || sd->incremental)
        rc = fsh_error_set(err, EINVAL, "a range scatter needs the staged samples as its side "
                           "input (partition %d of %d)", t->n_tasks, t->n_tasks + 1);
      else if ((rc = fsh_reduce_task_map_outputs(sd, &q->side, err)) == 0)
        q->n_side = sd->n_sources;
    }
    if (!rc && q->scatter && root->xkind == PX_INTO_PARTITIONS && t->n_counts != t->n_tasks)
      rc = fsh_error_set(err, EINVAL, "an into_partitions scatter needs every task's staged "
                         "rows (%d counts for %d tasks)", t->n_counts, t->n_tasks);
  }
  for (int32_t i = 0; !rc && i < t->n_inputs; i++) {
    const fsh_fragment_task_input *in = &t->inputs[i];
    int k = -1;
    for (int j = 0; j < nn; j++)
      if (q->ids[j] == in->node && q->plan->nodes[j]->kind == PN_EXCHANGE &&
          q->plan->nodes[j]->n_inputs == 0 && j != q->output)
        k = j;
    const plan_node *x = k >= 0 ? q->plan->nodes[k] : NULL;
    int32_t want = x && x->n_partitions == 1 ? 0 : t->task;
    if (!x)
      rc = fsh_error_set(err, EINVAL, "input %d names node %d, not an exchange the fragment "
                         "reads", i, in->node);
    else if (q->sources[k])
      rc = fsh_error_set(err, EINVAL, "input %d: exchange %d given twice", i, in->node);
    else if (in->read.n_partitions != x->n_partitions || in->read.partition != want ||
             in->read.backend != t->backend || in->read.incremental)
      rc = fsh_error_set(err, EINVAL, "input %d (exchange %d of %d partitions): reads partition "
                         "%d of %d through backend %d%s; task %d reads partition %d through "
                         "backend %d", i, in->node, (int)x->n_partitions, in->read.partition,
                         in->read.n_partitions, (int)in->read.backend,
                         in->read.incremental ? " (incremental)" : "", t->task, (int)want,
                         (int)t->backend);
    else if ((rc = fsh_reduce_task_map_outputs(&in->read, &q->sources[k], err)) == 0) {
      q->n_sources[k] = in->read.n_sources;
      q->shuffle_ids[k] = in->read.shuffle_id;
      q->read_parts[k] = want;
    }
  }
  for (int j = 0; !rc && j < nn; j++) {
    const plan_node *x = q->plan->nodes[j];
    if (x->kind == PN_EXCHANGE && x->n_inputs == 0 && !q->sources[j])
      rc = fsh_error_set(err, EINVAL, "no map outputs given for the exchange it reads (node %d)",
                         q->ids[j]);
  }
  if (rc) {
    prepared_free(q);
    return fsh_error_prefix(err, rc == ENOMEM ? ENOMEM : EINVAL, "plan-fragment: ");
  }
  *out = q;
  return 0;
}

int fsh_plan_task_check(const fsh_fragment_task *t, fsh_error *err) {
  prepared *q = NULL;
    FSH_RETURN_NOT_OK(prepare(t, &q, err));
  prepared_free(q);
  return 0;
}

/* ---- counting what a task reads ------------------------------------------------------ */

typedef struct counted {
  fsh_batch_stream in;
  struct plan_read *r;
} counted;

static int counted_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  counted *k = st->private_data;
  FSH_RETURN_NOT_OK(k->in.get_next(&k->in, out, err));
  if (!*out) {
    k->r->complete = true;
    return 0;
  }
  k->r->rows += (*out)->length;
  int rc = plan_row_checksum(*out, &k->r->checksum, err);
  if (rc) {
    fsh_batch_unref(*out);
    *out = NULL;
  }
  return rc;
}

static void counted_release(fsh_batch_stream *st) {
  counted *k = st->private_data;
  k->in.release(&k->in);
  fsh_free(k);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

int plan_count_reads(run_ctx *c, int node, fsh_batch_stream *st, fsh_error *err) {
  counted *k = fsh_calloc(1, sizeof *k);
  if (!k) {
    st->release(st);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  k->in = *st;
  k->r = &c->reads[node];
  k->r->opens++; /* read twice: the sums are no partition's (not compared) */
  *st = (fsh_batch_stream){.schema = fsh_schema_ref(k->in.schema), .get_next = counted_next,
                           .release = counted_release, .private_data = k};
  return 0;
}

/* ---- cancelling between batches ----------------------------------------------------- */

/* A backend over another that checks a cancel flag before every batch its
 * writers write and its readers read: once set, ECANCELED (the task's
 * writer is then aborted by its runner, nothing is kept). */
typedef struct cancel_backend {
  fsh_shuffle_backend base;
  fsh_shuffle_backend *in;
  const atomic_bool *cancel;
} cancel_backend;

typedef struct cancel_writer {
  fsh_shuffle_writer base;
  fsh_shuffle_writer *in;
  const atomic_bool *cancel;
} cancel_writer;

int plan_cancelled(const atomic_bool *f, fsh_error *err) {
  return f && atomic_load(f) ? fsh_error_set(err, ECANCELED, "cancelled (the worker was asked "
                                             "to stop this task)") : 0;
}

static int cw_write(fsh_shuffle_writer *w, int32_t partition, fsh_batch *batch, fsh_error *err) {
  cancel_writer *k = w->state;
  FSH_RETURN_NOT_OK(plan_cancelled(k->cancel, err));
  return k->in->write(k->in, partition, batch, err);
}

static int cw_write_rows(fsh_shuffle_writer *w, fsh_batch *batch, const int32_t *partition_of_row,
                         fsh_error *err) {
  cancel_writer *k = w->state;
  FSH_RETURN_NOT_OK(plan_cancelled(k->cancel, err));
  return k->in->write_rows(k->in, batch, partition_of_row, err);
}

static int cw_close(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err) {
  cancel_writer *k = w->state;
  fsh_shuffle_writer *in = k->in;
  int rc = plan_cancelled(k->cancel, err);
  fsh_free(k);
  if (rc) {
    in->abort(in);
    return rc;
  }
  return in->close(in, out, err);
}

static void cw_abort(fsh_shuffle_writer *w) {
  cancel_writer *k = w->state;
  k->in->abort(k->in);
  fsh_free(k);
}

static int cb_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                          int32_t attempt, fsh_shuffle_writer **out, fsh_error *err) {
  cancel_backend *cb = b->state;
  *out = NULL;
  FSH_RETURN_NOT_OK(plan_cancelled(cb->cancel, err));
  cancel_writer *k = fsh_calloc(1, sizeof *k);
  if (!k) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = fsh_shuffle_open_writer(cb->in, spec, map_id, attempt, &k->in, err);
  if (rc) {
    fsh_free(k);
    return rc;
  }
  k->cancel = cb->cancel;
  k->base = (fsh_shuffle_writer){.write = cw_write, .close = cw_close, .abort = cw_abort,
                                 .state = k,
                                 .write_rows = k->in->write_rows ? cw_write_rows : NULL};
  *out = &k->base;
  return 0;
}

typedef struct cancel_stream {
  fsh_batch_stream in;
  const atomic_bool *cancel;
} cancel_stream;

static int cs_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  cancel_stream *k = st->private_data;
  *out = NULL;
  FSH_RETURN_NOT_OK(plan_cancelled(k->cancel, err));
  return k->in.get_next(&k->in, out, err);
}

static void cs_release(fsh_batch_stream *st) {
  cancel_stream *k = st->private_data;
  k->in.release(&k->in);
  fsh_free(k);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

static int cb_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t partition,
                          const fsh_map_output *sources, int64_t n_sources, fsh_batch_stream *out,
                          fsh_error *err) {
  cancel_backend *cb = b->state;
  FSH_RETURN_NOT_OK(plan_cancelled(cb->cancel, err));
  cancel_stream *k = fsh_calloc(1, sizeof *k);
  if (!k) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = fsh_shuffle_open_reader(cb->in, spec, partition, sources, n_sources, &k->in, err);
  if (rc) {
    fsh_free(k);
    return rc;
  }
  k->cancel = cb->cancel;
  *out = (fsh_batch_stream){.schema = fsh_schema_ref(k->in.schema), .get_next = cs_next,
                            .release = cs_release, .private_data = k};
  return 0;
}

static int cb_release(fsh_shuffle_backend *b, uint64_t shuffle_id, fsh_error *err) {
  cancel_backend *cb = b->state;
  return fsh_shuffle_release(cb->in, shuffle_id, err);
}

static void cb_destroy(fsh_shuffle_backend *b) { (void)b; /* on its runner's stack */ }

static const fsh_shuffle_backend_ops cancel_ops = {.name = "cancellable",
                                                   .open_writer = cb_open_writer,
                                                   .open_reader = cb_open_reader,
                                                   .release = cb_release,
                                                   .destroy = cb_destroy};

/* A range scatter's boundaries: from the samples every task staged (the
 * side input, read in map order), as plan_run_exchange computes them;
 * *side: what was read. */
static int scatter_bounds(fsh_shuffle_backend *b, const fsh_fragment_task *t, const prepared *q,
                          const plan_node *x, plan_scatter *out, fsh_fragment_read *side,
                          fsh_error *err) {
  fsh_shuffle_spec spec = {.shuffle_id = t->side.shuffle_id,
                           .n_partitions = t->side.n_partitions, .schema = x->schema};
  fsh_batch_stream st;
  FSH_RETURN_NOT_OK(fsh_shuffle_open_reader(b, &spec, t->side.partition, q->side, q->n_side,
                                            &st, err));
  fsh_batch **samples = NULL;
  int64_t n = 0;
  int rc = plan_drain(&st, &samples, &n, err);
  st.release(&st);
  *side = (fsh_fragment_read){.node = -1, .complete = rc == 0};
  for (int64_t i = 0; rc == 0 && i < n; i++) {
    side->rows += samples[i]->length;
    rc = plan_row_checksum(samples[i], &side->checksum, err);
  }
  if (!rc) rc = plan_range_bounds(x, samples, n, x->n_partitions, &out->bounds, err);
  for (int64_t i = 0; i < n; i++) fsh_batch_unref(samples[i]);
  fsh_free(samples);
  return rc ? fsh_error_prefix(err, rc, "reading the staged samples: ") : 0;
}

/* A recomputing scatter's staged partition `part` (node `node`), read to
 * its end (the driver compares the read with what the staging task wrote
 * there): EINVAL when it holds rows -- its staging task wrote them for a
 * scatter that reads them. */
static int staged_empty(run_ctx *c, int node, int32_t part, fsh_error *err) {
  fsh_batch_stream st;
  FSH_RETURN_NOT_OK(plan_open_stream(c, node, part, &st, err));
  int64_t rows = 0;
  int rc = 0;
  for (;;) {
    fsh_batch *x = NULL;
    if ((rc = st.get_next(&st, &x, err)) != 0 || !x) break;
    rows += x->length;
    fsh_batch_unref(x);
  }
  st.release(&st);
  if (!rc && rows > 0)
    rc = fsh_error_set(err, EINVAL, "staged partition %d holds %lld rows; this scatter computes "
                       "its input again and expects none", (int)part, (long long)rows);
  return rc;
}

/* Runs the prepared task q of t through backend b; *reads / *n_reads (may
 * be NULL): what it read of each input exchange (and the side input);
 * *stats (may be NULL): what its operators spilled. */
static int run_prepared(fsh_shuffle_backend *b, const fsh_fragment_task *t, prepared *q,
                        const fsh_plan_task_run_options *o, fsh_map_task_result *out,
                        fsh_fragment_read **reads, int32_t *n_reads, fsh_fragment_stats *stats,
                        fsh_error *err) {
  int64_t t0 = now_nanos();
  const fsh_plan *p = q->plan;
  cancel_backend cb = {.base = {.ops = &cancel_ops, .state = &cb}, .in = b,
                       .cancel = o ? o->cancel : NULL};
  if (cb.cancel) b = &cb.base; /* every batch read or written checks it */
  fsh_plan_result res = {0};
  run_ctx c = {.p = p, .merge = FSH_PLAN_MERGE_OFF, .merge_threshold = 200,
               .first_shuffle_id = 1, .backend = b, .res = &res, .n_threads = 1,
               .cancel = cb.cancel};
  if (o && o->operator_memory > 0) {
    if (!o->spill_dirs || o->n_spill_dirs < 1)
      return fsh_error_set(err, EINVAL, "plan-fragment: operator_memory needs spill dirs");
    c.op_memory = o->operator_memory;
    c.spill_dirs = o->spill_dirs;
    c.n_spill_dirs = o->n_spill_dirs;
  }
  pthread_mutex_init(&c.mu, NULL);
  fsh_map_task_result r = {0};
  int rc = 0;
  c.x = fsh_calloc((size_t)p->n_nodes, sizeof *c.x);
  c.reads = fsh_calloc((size_t)p->n_nodes, sizeof *c.reads);
  fsh_fragment_read side = {.node = -1};
  const plan_node *root = p->nodes[p->n_nodes - 1];
  int32_t R = q->staged ? t->n_tasks + 1 : q->output >= 0 ? root->n_partitions : t->n_tasks;
  r.row_checksums = fsh_calloc((size_t)R, sizeof *r.row_checksums);
  if (!c.x || !c.reads || !r.row_checksums) rc = fsh_error_set(err, ENOMEM, "out of memory");
  for (int i = 0; !rc && i < p->n_nodes; i++) {
    if (!q->sources[i]) continue;
    xstate *xs = &c.x[i];
    xs->done = true;
    xs->spec = (fsh_shuffle_spec){.shuffle_id = q->shuffle_ids[i],
                                  .n_partitions = p->nodes[i]->n_partitions,
                                  .schema = p->nodes[i]->schema};
    xs->outputs = q->sources[i]; /* borrowed: never reset here */
    xs->n_outputs = q->n_sources[i];
  }
  fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = R,
                           .schema = root->schema, .compression = t->compression};
  plan_scatter sc = {.counts = t->counts, .n_counts = t->n_counts};
  int64_t staged_rows = 0;
  if (!rc && q->scatter && root->xkind == PX_RANGE)
    rc = scatter_bounds(b, t, q, root, &sc, &side, err);
  if (!rc && q->recompute && q->scatter) rc = staged_empty(&c, q->staged_node, t->task, err);
  if (!rc && q->staged)
    rc = plan_staged_task(&c, root, &spec, t->task, t->map_id, t->attempt, &r.output,
                          r.row_checksums, &staged_rows, err);
  else if (!rc && q->output >= 0)
    rc = plan_exchange_task(&c, root, &spec, t->task, t->map_id, t->attempt, &r.output,
                            r.row_checksums, q->scatter ? &sc : NULL, err);
  else if (!rc)
    rc = plan_result_task(&c, root->id, &spec, t->task, t->map_id, t->attempt, &r.output,
                          r.row_checksums, err);
  fsh_batch_unref(sc.bounds);
  /* what it read: every input exchange, and the side input */
  fsh_fragment_read *v = NULL;
  int32_t nv = 0;
  if (!rc && reads) {
    v = fsh_calloc((size_t)p->n_nodes + 1, sizeof *v);
    if (!v) rc = fsh_error_set(err, ENOMEM, "out of memory");
    for (int i = 0; v && i < p->n_nodes; i++)
      if (q->sources[i])
        v[nv++] = (fsh_fragment_read){.node = q->ids[i],
                                      .complete = c.reads[i].complete && c.reads[i].opens == 1,
                                      .rows = c.reads[i].rows,
                                      .checksum = c.reads[i].checksum};
    if (v && q->scatter && root->xkind == PX_RANGE) v[nv++] = side;
  }
  fsh_free(c.reads);
  fsh_free(c.x);
  pthread_mutex_destroy(&c.mu);
  if (stats)
    *stats = (fsh_fragment_stats){.spill_files = res.spill_files,
                                  .spilled_bytes = res.spilled_bytes,
                                  .operators_spilled = res.operators_spilled};
  fsh_plan_result_reset(&res);
  if (rc) {
    fsh_map_task_result_reset(&r);
    fsh_free(v);
    return fsh_error_prefix(err, rc, "plan-fragment task %d of %d (map %" PRId64 " attempt %d "
                            "of shuffle %" PRIu64 "): ", t->task, t->n_tasks, t->map_id,
                            t->attempt, t->shuffle_id);
  }
  for (int32_t i = 0; i < R; i++) r.input_rows += r.output.rows ? r.output.rows[i] : 0;
  /* a staging task: the rows of its input and its sample, staged or not
   * (a recomputed stage's rows are in no partition it wrote) */
  if (q->staged && r.output.rows && R > 0) r.input_rows = staged_rows + r.output.rows[R - 1];
  for (int32_t i = 0; i < R; i++) r.input_bytes += r.output.bytes ? r.output.bytes[i] : 0;
  r.nanos = now_nanos() - t0;
  *out = r;
  if (reads) *reads = v, *n_reads = nv;
  return 0;
}

int fsh_plan_task_run(fsh_shuffle_backend *b, const fsh_fragment_task *t,
                      const fsh_plan_task_run_options *o, fsh_map_task_result *out,
                      fsh_fragment_read **reads, int32_t *n_reads, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (reads) *reads = NULL, *n_reads = 0;
  prepared *q = NULL;
  FSH_RETURN_NOT_OK(prepare(t, &q, err));
  int rc = run_prepared(b, t, q, o, out, reads, n_reads, NULL, err);
  prepared_free(q);
  return rc;
}

/* ---- the worker task kind ------------------------------------------------------------ */

typedef struct kind_state {
  fsh_fragment_task t;
  prepared *q;
} kind_state;

static void kind_free(void *state) {
  kind_state *s = state;
  if (!s) return;
  prepared_free(s->q);
  fsh_fragment_task_reset(&s->t);
  fsh_free(s);
}

static int kind_decode(void *ctx, const uint8_t *body, int64_t size, void **state,
                       fsh_task_backend *backend, fsh_error *err) {
  (void)ctx;
  *state = NULL;
  kind_state *s = fsh_calloc(1, sizeof *s);
  if (!s) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = fsh_fragment_task_decode(body, size, &s->t, err);
  if (!rc) rc = prepare(&s->t, &s->q, err);
  if (rc) {
    kind_free(s);
    return rc;
  }
  *backend = s->t.backend;
  *state = s;
  return 0;
}

static int kind_run(void *ctx, void *state, fsh_shuffle_backend *b, fsh_buffer **answer,
                    fsh_error *err) {
  kind_state *s = state;
  fsh_plan_task_run_options o = {0};
  if (ctx) o = *(const fsh_plan_task_run_options *)ctx;
  o.cancel = fsh_worker_task_cancel_flag(); /* this task's */
  fsh_map_task_result r;
  fsh_fragment_read *reads = NULL;
  int32_t n = 0;
  fsh_fragment_stats st;
  FSH_RETURN_NOT_OK(run_prepared(b, &s->t, s->q, &o, &r, &reads, &n, &st, err));
  int rc = fsh_fragment_answer_encode_stats(&r, reads, n, &st, answer, err);
  fsh_map_task_result_reset(&r);
  fsh_free(reads);
  return rc;
}

fsh_worker_task_kind fsh_plan_task_kind(const fsh_plan_task_run_options *o) {
  return (fsh_worker_task_kind){.name = "plan-fragment", .decode = kind_decode,
                                .run = kind_run, .free_state = kind_free, .ctx = (void *)o};
}
