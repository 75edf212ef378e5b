/* plan_run.c -- running a plan in this process: every operator is a
 * pull-based fsh_batch_stream per partition (plan_ops.c); every exchange
 * runs its map tasks through a shuffle backend's writers and opens its
 * reduce partitions with the backend's reader (plan_exchange.c). Here:
 * the entry point, fsh_plan_run, which reads the result out of the last
 * node's partitions, the run's shared helpers and the spill summary. The
 * reference mode runs the plan in one partition with every exchange a
 * pass-through. */
#include "exec/plan_run_internal.h"

#include <stdio.h>

/* The backend that map output / reduce partition i goes through. */
fsh_shuffle_backend *plan_backend_of(const run_ctx *c, int64_t i) {
  return c->n_backends > 0 ? c->backends[i % c->n_backends] : c->backend;
}

int32_t plan_parts_of(const run_ctx *c, const plan_node *n) {
  return c->reference ? 1 : n->n_partitions;
}

/* Prefixes err with the node's operator name, unless the message already
 * starts with it (the physical nodes of one operator share its name). */
int plan_name_fail(const plan_node *n, int rc, fsh_error *err) {
  char who[200];
  plan_node_name(n, who, sizeof who);
  size_t len = strlen(who);
  if (err && strncmp(err->message, who, len) == 0 && err->message[len] == ':') return rc;
  return fsh_error_prefix(err, rc, "%s: ", who);
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

int plan_collect_sink(void *arg, int32_t part, fsh_batch *b, fsh_error *err) {
  plan_collect *col = arg;
  fsh_plan_result *out = col->out;
  if (!b) { /* (re)starts: drop what the partition had */
    for (; out->partition_batches[part] > 0; out->partition_batches[part]--) {
      fsh_batch *x = out->batches[--out->n_batches];
      out->rows -= x->length;
      fsh_batch_unref(x);
    }
    return 0;
  }
  if (out->n_batches == col->cap) {
    int64_t nc = col->cap ? col->cap * 2 : 16;
    fsh_batch **v = fsh_realloc(out->batches, (size_t)nc * sizeof *v);
    if (!v) return fsh_error_set(err, ENOMEM, "out of memory");
    out->batches = v, col->cap = nc;
  }
  out->batches[out->n_batches++] = fsh_batch_ref(b);
  out->partition_batches[part]++;
  out->rows += b->length;
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
  int32_t np = plan_parts_of(&c, root);
  out->n_partitions = np;
  if (!rc && !(out->partition_batches = fsh_calloc((size_t)np, sizeof *out->partition_batches)))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  plan_collect col = {.out = out};
  fsh_plan_sink sink = o->sink ? o->sink : plan_collect_sink;
  void *sink_arg = o->sink ? o->sink_arg : &col;
  for (int32_t part = 0; part < np && !rc; part++) {
    fsh_batch_stream st;
    if ((rc = plan_open_stream(&c, root->id, part, &st, err)) != 0) break;
    rc = sink(sink_arg, part, NULL, err);
    while (!rc) {
      fsh_batch *b = NULL;
      if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
      if (b->length > 0 && (rc = sink(sink_arg, part, b, err)) == 0 && o->sink) {
        out->partition_batches[part]++;
        out->rows += b->length;
      }
      fsh_batch_unref(b);
    }
    st.release(&st);
  }
  if (c.x) {
    for (int i = 0; i < p->n_nodes; i++) {
      xstate *xs = &c.x[i];
      if ((xs->outputs || xs->done) && !xs->released) {
        fsh_error rerr;
        if (plan_release_shuffle(&c, xs, &rerr) != 0 && !rc) {
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
