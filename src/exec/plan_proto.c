/* plan_proto.c -- one stage of a plan as protobuf (proto/Plan.proto): what
 * reaches a worker. Encoding walks the stage's nodes; decoding checks every
 * field (kinds, inputs, key columns against the schemas, expression JSON)
 * and rejects malformed input with EINVAL naming what is wrong. */
#include "exec/plan_internal.h"

#include <inttypes.h>
#include <stdio.h>

#include "Plan.pb-c.h"

typedef Flightshuffle__Plan__Operator pb_op;
typedef Flightshuffle__Plan__StageFragment pb_frag;

struct fsh_plan_fragment {
  pb_frag *m; /* unpacked */
};

static void *pb_alloc(void *ctx, size_t size) {
  (void)ctx;
  return fsh_malloc(size ? size : 1);
}
static void pb_free(void *ctx, void *p) {
  (void)ctx;
  fsh_free(p);
}
static ProtobufCAllocator plan_pb_allocator = {.alloc = pb_alloc, .free = pb_free};

/* ---- encoding ------------------------------------------------------------------- */

static int schema_bytes(fsh_schema *s, ProtobufCBinaryData *out, fsh_error *err) {
  fsh_ipc_encoder *e = NULL;
  fsh_ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  int rc = fsh_ipc_encoder_new(s, NULL, &e, err);
  if (!rc) rc = fsh_ipc_encode_schema(e, &pl, err);
  if (!rc) {
    out->len = (size_t)pl.metadata->size;
    if (!(out->data = fsh_malloc(out->len ? out->len : 1)))
      rc = fsh_error_set(err, ENOMEM, "out of memory");
    else
      memcpy(out->data, pl.metadata->data, out->len);
  }
  fsh_ipc_payload_reset(&pl);
  fsh_ipc_encoder_free(e);
  return rc;
}

/* Frees what encode_op allocated (the op struct itself too). */
static void free_op(pb_op *o) {
  if (!o) return;
  fsh_free(o->inputs);
  fsh_free(o->label);
  fsh_free(o->user_op);
  fsh_free(o->schema.data);
  if (o->generated) fsh_free(o->generated);
  for (size_t i = 0; i < o->n_files; i++) fsh_free(o->files[i]);
  fsh_free(o->files);
  for (size_t i = 0; i < o->n_columns; i++) fsh_free(o->columns[i]);
  fsh_free(o->columns);
  for (size_t i = 0; i < o->n_exprs; i++) fsh_free(o->exprs[i]);
  fsh_free(o->exprs);
  for (size_t i = 0; i < o->n_names; i++) fsh_free(o->names[i]);
  fsh_free(o->names);
  fsh_free(o->agg_input_schema.data);
  fsh_free(o->keys);
  fsh_free(o->right_keys);
  for (size_t i = 0; i < o->n_order; i++) fsh_free(o->order[i]);
  fsh_free(o->order);
  for (size_t i = 0; i < o->n_aggregates; i++) {
    if (o->aggregates[i]) fsh_free(o->aggregates[i]->name);
    fsh_free(o->aggregates[i]);
  }
  fsh_free(o->aggregates);
  fsh_free(o);
}

static char *dup_or_empty(const char *s) { return fsh_strdup(s ? s : ""); }

static int encode_op(const fsh_plan *p, const plan_node *n, pb_op **out, fsh_error *err) {
  pb_op *o = fsh_calloc(1, sizeof *o);
  if (!o) return fsh_error_set(err, ENOMEM, "out of memory");
  flightshuffle__plan__operator__init(o);
  bool oom = false;
  o->id = n->id;
  o->kind = (Flightshuffle__Plan__OperatorKind)n->kind;
  o->partitions = n->n_partitions;
  o->user_position = n->user_pos;
  oom |= !(o->label = dup_or_empty(n->label));
  oom |= !(o->user_op = dup_or_empty(n->user_op));
  if (n->n_inputs) {
    if (!(o->inputs = fsh_malloc((size_t)n->n_inputs * sizeof *o->inputs))) oom = true;
    else
      for (int i = 0; i < n->n_inputs; i++) o->inputs[o->n_inputs++] = n->inputs[i];
  }
  int rc = oom ? 0 : schema_bytes(n->schema, &o->schema, err);
  if (!rc && !oom && n->kind == PN_SCAN_GEN) {
    Flightshuffle__Plan__Generated *g = fsh_calloc(1, sizeof *g);
    if (!g) {
      oom = true;
    } else {
      flightshuffle__plan__generated__init(g);
      g->generator = (int32_t)n->gen.generator;
      g->rows = n->gen.rows;
      g->batch_rows = n->gen.batch_rows;
      g->seed = n->gen.seed;
      g->key_range = n->gen.key_range;
      g->with_nulls = n->gen.with_nulls;
      g->null_fraction = n->gen.null_fraction;
      g->skew = n->gen.skew;
      g->groups = n->gen.groups;
      o->generated = g;
    }
  }
  if (!rc && !oom && n->n_files) {
    if (!(o->files = fsh_calloc((size_t)n->n_files, sizeof *o->files))) oom = true;
    for (int64_t i = 0; !oom && i < n->n_files; i++)
      if ((o->files[o->n_files] = fsh_strdup(n->files[i]))) o->n_files++;
      else oom = true;
  }
  if (!rc && !oom && n->n_columns) {
    if (!(o->columns = fsh_calloc((size_t)n->n_columns, sizeof *o->columns))) oom = true;
    for (int32_t i = 0; !oom && i < n->n_columns; i++)
      if ((o->columns[o->n_columns] = fsh_strdup(n->columns[i]))) o->n_columns++;
      else oom = true;
  }
  if (!rc && !oom && n->n_exprs) {
    if (!(o->exprs = fsh_calloc((size_t)n->n_exprs, sizeof *o->exprs))) oom = true;
    for (int32_t i = 0; !rc && !oom && i < n->n_exprs; i++)
      if (!(rc = fsh_expr_to_json(n->exprs[i], &o->exprs[i], err))) o->n_exprs++;
    if (!rc && !oom && n->names) {
      if (!(o->names = fsh_calloc((size_t)n->n_exprs, sizeof *o->names))) oom = true;
      for (int32_t i = 0; !oom && i < n->n_exprs; i++)
        if ((o->names[o->n_names] = fsh_strdup(n->names[i]))) o->n_names++;
        else oom = true;
    }
  }
  if (!rc && !oom && n->kind == PN_AGG) {
    o->agg_mode = (int32_t)n->agg_mode;
    rc = schema_bytes(n->agg_input, &o->agg_input_schema, err);
    if (!rc && n->n_aggs) {
      if (!(o->aggregates = fsh_calloc((size_t)n->n_aggs, sizeof *o->aggregates))) oom = true;
      for (int32_t i = 0; !oom && i < n->n_aggs; i++) {
        Flightshuffle__Plan__Aggregate *a = fsh_calloc(1, sizeof *a);
        if (!a) {
          oom = true;
          break;
        }
        flightshuffle__plan__aggregate__init(a);
        o->aggregates[o->n_aggregates++] = a;
        a->fn = (int32_t)n->aggs[i].fn;
        a->column = n->aggs[i].column;
        if (!(a->name = dup_or_empty(n->aggs[i].name))) oom = true;
      }
    }
  }
  if (!rc && !oom && n->n_keys) {
    if (!(o->keys = fsh_malloc((size_t)n->n_keys * sizeof *o->keys))) oom = true;
    else
      for (int32_t i = 0; i < n->n_keys; i++) o->keys[o->n_keys++] = n->keys[i];
    if (!oom && n->keys2) {
      if (!(o->right_keys = fsh_malloc((size_t)n->n_keys * sizeof *o->right_keys))) oom = true;
      else
        for (int32_t i = 0; i < n->n_keys; i++) o->right_keys[o->n_right_keys++] = n->keys2[i];
    }
    if (!oom && n->sort_order) {
      if (!(o->order = fsh_calloc((size_t)n->n_keys, sizeof *o->order))) oom = true;
      for (int32_t i = 0; !oom && i < n->n_keys; i++) {
        Flightshuffle__Plan__SortKey *k = fsh_calloc(1, sizeof *k);
        if (!k) {
          oom = true;
          break;
        }
        flightshuffle__plan__sort_key__init(k);
        k->column = n->keys[i];
        k->descending = n->sort_order[i].descending;
        k->nulls_first = n->sort_order[i].nulls_first;
        o->order[o->n_order++] = k;
      }
    }
  }
  o->join_type = (int32_t)n->join_type;
  o->broadcast = n->broadcast;
  o->n = n->n;
  o->exchange = (Flightshuffle__Plan__ExchangeKind)n->xkind;
  o->seed = n->seed;
  o->sample_rows = n->sample_rows;
  o->pre_shuffle_merge = (int32_t)n->merge;
  o->limit_hint = n->limit_hint;
  if (!rc && oom) rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (rc) {
    free_op(o);
    return rc;
  }
  *out = o;
  (void)p;
  return 0;
}

int fsh_plan_stage_count(const fsh_plan *p) {
  int count = 0;
  for (int i = 0; i < p->n_nodes; i++) count += p->nodes[i]->kind == PN_EXCHANGE;
  if (p->n_nodes && p->nodes[p->n_nodes - 1]->kind != PN_EXCHANGE) count++;
  return count;
}

int fsh_plan_stage_encode(const fsh_plan *p, int stage, fsh_buffer **out, fsh_error *err) {
  return plan_stage_encode_mode(p, stage, 0, out, err);
}

bool plan_range_recomputes(const fsh_plan *p, const plan_node *x, const bool *member) {
  if (x->kind != PN_EXCHANGE || x->xkind != PX_RANGE) return false;
  for (int i = 0; i < p->n_nodes; i++) {
    const plan_node *n = p->nodes[i];
    if (n == x || (member && !member[i])) continue;
    if (n->kind != PN_SCAN_GEN && n->kind != PN_SCAN_IPC && n->kind != PN_FILTER &&
        n->kind != PN_PROJECT)
      return false;
  }
  return true;
}

int plan_stage_encode_mode(const fsh_plan *p, int stage, int mode, fsh_buffer **out,
                           fsh_error *err) {
  *out = NULL;
  int n_stages = fsh_plan_stage_count(p);
  if (stage < 0 || stage >= n_stages)
    return fsh_error_set(err, EINVAL, "plan stage %d: the plan has %d stage(s)", stage, n_stages);
  int *roots = fsh_malloc((size_t)p->n_nodes * sizeof *roots);
  bool *member = fsh_malloc((size_t)p->n_nodes * sizeof *member);
  /* a scatter stage that recomputes encodes the staged read before the
   * stage's members (up to every node): n_nodes + 1 operators and input
   * exchanges at most */
  int32_t *inputs = fsh_malloc(((size_t)p->n_nodes + 1) * sizeof *inputs);
  pb_op **ops = fsh_calloc((size_t)p->n_nodes + 1, sizeof *ops);
  int rc = 0;
  if (!roots || !member || !inputs || !ops) rc = fsh_error_set(err, ENOMEM, "out of memory");
  pb_frag f;
  flightshuffle__plan__stage_fragment__init(&f);
  if (!rc) {
    plan_stage_roots(p, roots);
    int root = roots[stage];
    plan_stage_members(p, root, member);
    f.stage = stage;
    f.output_exchange = p->nodes[root]->kind == PN_EXCHANGE ? root : -1;
    f.operators = ops;
    f.input_exchanges = inputs;
    const plan_node *x = p->nodes[root];
    if (mode && (x->kind != PN_EXCHANGE ||
                 (x->xkind != PX_RANGE && x->xkind != PX_INTO_PARTITIONS)))
      rc = fsh_error_set(err, EINVAL, "stage %d writes no range / into_partitions exchange", stage);
    bool recompute = !rc && mode == 2 && plan_range_recomputes(p, x, member);
    if (!rc && mode == 2) {
      /* [the staged shuffle read, the exchange written from it]; when the
       * stage recomputes: [the staged read, the stage's operators] */
      int32_t staged_id = p->n_nodes + root;
      f.scatter = true;
      rc = encode_op(p, x, &ops[0], err);
      if (!rc) {
        f.n_operators = 1;
        ops[0]->id = staged_id;
        ops[0]->n_inputs = 0;
        ops[0]->partitions = p->nodes[x->inputs[0]]->n_partitions + 1;
        inputs[f.n_input_exchanges++] = staged_id;
        if (!recompute) rc = encode_op(p, x, &ops[1], err);
      }
      if (!rc && !recompute) {
        f.n_operators = 2;
        ops[1]->inputs[0] = staged_id;
      }
    }
    for (int i = 0; (mode != 2 || recompute) && i < p->n_nodes && !rc; i++) {
      if (!member[i]) continue;
      if ((rc = encode_op(p, p->nodes[i], &ops[f.n_operators], err)) != 0) break;
      if (i == root && mode == 1) ops[f.n_operators]->staged = true;
      f.n_operators++;
      if (p->nodes[i]->kind == PN_EXCHANGE && i != root) inputs[f.n_input_exchanges++] = i;
    }
  }
  if (!rc) {
    size_t size = flightshuffle__plan__stage_fragment__get_packed_size(&f);
    fsh_buffer *b = fsh_buffer_new((int64_t)size, false);
    if (!b) rc = fsh_error_set(err, ENOMEM, "out of memory");
    else {
      flightshuffle__plan__stage_fragment__pack(&f, b->data);
      *out = b;
    }
  }
  for (size_t i = 0; ops && i < f.n_operators; i++) free_op(ops[i]);
  fsh_free(ops);
  fsh_free(inputs);
  fsh_free(roots);
  fsh_free(member);
  return rc ? fsh_error_prefix(err, rc, "plan stage %d: ", stage) : 0;
}

int fsh_plan_stage_info_get(const fsh_plan *p, int stage, fsh_plan_stage_info *out,
                            fsh_error *err) {
  memset(out, 0, sizeof *out);
  int n_stages = fsh_plan_stage_count(p);
  if (stage < 0 || stage >= n_stages)
    return fsh_error_set(err, EINVAL, "plan stage %d: the plan has %d stage(s)", stage, n_stages);
  int *roots = fsh_malloc((size_t)p->n_nodes * sizeof *roots);
  bool *member = fsh_malloc((size_t)p->n_nodes * sizeof *member);
  if (!roots || !member) {
    fsh_free(roots);
    fsh_free(member);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  plan_stage_roots(p, roots);
  int root = roots[stage];
  plan_stage_members(p, root, member);
  const plan_node *r = p->nodes[root];
  bool result = r->kind != PN_EXCHANGE;
  out->output_node = result ? -1 : root;
  out->n_tasks = result ? r->n_partitions : p->nodes[r->inputs[0]]->n_partitions;
  out->output_partitions = result ? out->n_tasks : r->n_partitions;
  int rc = 0;
  for (int i = 0; i < p->n_nodes && !rc; i++) {
    if (!member[i] || i == root || p->nodes[i]->kind != PN_EXCHANGE) continue;
    if (out->n_inputs == FSH_PLAN_STAGE_MAX_INPUTS) {
      rc = fsh_error_set(err, ENOTSUP, "plan stage %d reads more than %d exchanges", stage,
                         FSH_PLAN_STAGE_MAX_INPUTS);
      break;
    }
    int k = out->n_inputs++;
    out->input_nodes[k] = i;
    out->input_partitions[k] = p->nodes[i]->n_partitions;
    out->input_stages[k] = -1;
    for (int s2 = 0; s2 < n_stages; s2++)
      if (roots[s2] == i) out->input_stages[k] = s2;
  }
  fsh_free(roots);
  fsh_free(member);
  return rc;
}

int fsh_plan_check_distributed(const fsh_plan *p, fsh_error *err) {
  if (!p || !p->n_nodes) return fsh_error_set(err, EINVAL, "the plan is empty");
  return 0;
}

/* ---- decoding ------------------------------------------------------------------- */

static int decode_schema(const ProtobufCBinaryData *d, fsh_schema **out, fsh_error *err) {
  *out = NULL;
  if (!d->len) return fsh_error_set(err, EINVAL, "no schema");
  fsh_buffer *meta = fsh_buffer_copy(d->data, (int64_t)d->len);
  fsh_ipc_decoder *dec = NULL;
  if (!meta) return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_ipc_message_type type;
  int64_t body;
  int rc = fsh_ipc_peek_message(meta, &type, &body, err);
  if (!rc && (type != FSH_IPC_SCHEMA || body != 0))
    rc = fsh_error_set(err, EINVAL, "the schema bytes are not an IPC Schema message");
  if (!rc) rc = fsh_ipc_decoder_new(&dec, err);
  fsh_batch *b = NULL;
  if (!rc) rc = fsh_ipc_decode_message(dec, meta, NULL, &b, err);
  if (!rc) *out = fsh_schema_ref(fsh_ipc_decoder_schema(dec));
  fsh_batch_unref(b);
  fsh_ipc_decoder_free(dec);
  fsh_buffer_unref(meta);
  return rc;
}

static int check_cols(const int32_t *cols, size_t n, const fsh_schema *s, const char *what,
                      fsh_error *err) {
  for (size_t i = 0; i < n; i++)
    if (cols[i] < 0 || cols[i] >= s->n_fields)
      return fsh_error_set(err, EINVAL, "%s[%zu] = %d is not a column (the schema has %lld)", what,
                           i, cols[i], (long long)s->n_fields);
  return 0;
}

/* Checks operator k of the fragment; schemas[k] gets its output schema. */
static int check_op(const pb_frag *m, size_t k, fsh_schema **schemas, fsh_error *err) {
  const pb_op *o = m->operators[k];
  if (!o) return fsh_error_set(err, EINVAL, "missing");
  if ((unsigned)o->kind > FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__EXCHANGE)
    return fsh_error_set(err, EINVAL, "unknown operator kind %d", (int)o->kind);
  if (o->partitions < 1)
    return fsh_error_set(err, EINVAL, "partitions %d (must be >= 1)", (int)o->partitions);
  FSH_RETURN_NOT_OK(decode_schema(&o->schema, &schemas[k], err));
  /* inputs: earlier operators of the fragment */
  const fsh_schema *in[2] = {NULL, NULL};
  size_t want = o->kind == FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__SCAN_GENERATED ||
                        o->kind == FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__SCAN_IPC
                    ? 0
                : o->kind == FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__HASH_JOIN ? 2
                                                                           : 1;
  bool is_input_exchange = false;
  for (size_t i = 0; i < m->n_input_exchanges; i++) is_input_exchange |= m->input_exchanges[i] == o->id;
  if (is_input_exchange) want = o->n_inputs; /* read, not run: its input is another stage's */
  if (o->n_inputs != want)
    return fsh_error_set(err, EINVAL, "%zu input(s), a %s operator takes %zu", o->n_inputs,
                         protobuf_c_enum_descriptor_get_value(
                             &flightshuffle__plan__operator_kind__descriptor, o->kind)->name,
                         want);
  for (size_t i = 0; i < o->n_inputs && !is_input_exchange; i++) {
    for (size_t j = 0; j < k; j++)
      if (m->operators[j]->id == o->inputs[i]) in[i] = schemas[j];
    if (!in[i])
      return fsh_error_set(err, EINVAL, "input %d is not an earlier operator of the fragment",
                           o->inputs[i]);
  }
  fsh_expr *e = NULL;
  for (size_t i = 0; i < o->n_exprs; i++) {
    int rc = fsh_expr_from_json(o->exprs[i] ? o->exprs[i] : "", -1, &e, err);
    if (rc) return fsh_error_prefix(err, rc, "exprs[%zu]: ", i);
    rc = in[0] ? fsh_expr_bind(e, in[0], err) : 0;
    fsh_expr_free(e);
    if (rc) return fsh_error_prefix(err, rc, "exprs[%zu]: ", i);
  }
  switch (o->kind) {
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__SCAN_GENERATED:
      if (!o->generated || o->generated->rows < 0 || o->generated->batch_rows < 1 ||
          (unsigned)o->generated->generator > 1)
        return fsh_error_set(err, EINVAL, "a generated scan needs 'generated' with rows >= 0, "
                                          "batch_rows >= 1 and generator 0 or 1");
      break;
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__SCAN_IPC:
      if (!o->n_files) return fsh_error_set(err, EINVAL, "an IPC scan needs files");
      break;
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__FILTER:
      if (o->n_exprs != 1) return fsh_error_set(err, EINVAL, "a filter needs one expression");
      break;
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__PROJECT:
      if (!o->n_exprs || o->n_exprs != o->n_names ||
          (int64_t)o->n_exprs != schemas[k]->n_fields)
        return fsh_error_set(err, EINVAL, "a projection needs as many exprs, names and schema "
                                          "fields (>= 1): %zu, %zu, %lld",
                             o->n_exprs, o->n_names, (long long)schemas[k]->n_fields);
      break;
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__AGGREGATE: {
      if ((unsigned)o->agg_mode > 2) return fsh_error_set(err, EINVAL, "agg_mode %d", o->agg_mode);
      fsh_schema *ai = NULL;
      int rc = decode_schema(&o->agg_input_schema, &ai, err);
      if (rc) return fsh_error_prefix(err, rc, "agg_input_schema: ");
      rc = check_cols(o->keys, o->n_keys, ai, "keys", err);
      for (size_t i = 0; !rc && i < o->n_aggregates; i++) {
        const Flightshuffle__Plan__Aggregate *a = o->aggregates[i];
        if ((unsigned)a->fn > FSH_AGG_MAX)
          rc = fsh_error_set(err, EINVAL, "aggregates[%zu]: unknown function %d", i, a->fn);
        else if (a->fn != FSH_AGG_COUNT_STAR)
          rc = check_cols(&a->column, 1, ai, "aggregates[].column", err);
      }
      fsh_schema_unref(ai);
      if (rc) return rc;
      if (!o->n_keys && !o->n_aggregates)
        return fsh_error_set(err, EINVAL, "an aggregate needs keys or aggregates");
      break;
    }
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__HASH_JOIN:
      if (!o->n_keys || o->n_keys != o->n_right_keys || (unsigned)o->join_type > FSH_JOIN_LEFT_ANTI)
        return fsh_error_set(err, EINVAL, "a join needs as many left and right keys (>= 1) and "
                                          "a join type 0..5");
      FSH_RETURN_NOT_OK(check_cols(o->keys, o->n_keys, in[0], "keys", err));
      FSH_RETURN_NOT_OK(check_cols(o->right_keys, o->n_right_keys, in[1], "right_keys", err));
      break;
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__SORT:
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__TOP_N:
      if (!o->n_keys || o->n_order != o->n_keys)
        return fsh_error_set(err, EINVAL, "a sort needs keys and one order entry per key");
      FSH_RETURN_NOT_OK(check_cols(o->keys, o->n_keys, in[0], "keys", err));
      /* fall through */
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__LIMIT:
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__INTO_BATCHES:
      if (o->n < (o->kind == FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__INTO_BATCHES ? 1 : 0))
        return fsh_error_set(err, EINVAL, "n = %lld out of range", (long long)o->n);
      break;
    case FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__EXCHANGE:
      if ((unsigned)o->exchange > FLIGHTSHUFFLE__PLAN__EXCHANGE_KIND__INTO_PARTITIONS ||
          (unsigned)o->pre_shuffle_merge > 2)
        return fsh_error_set(err, EINVAL, "unknown exchange kind %d or merge policy %d",
                             (int)o->exchange, o->pre_shuffle_merge);
      if ((o->exchange == FLIGHTSHUFFLE__PLAN__EXCHANGE_KIND__HASH ||
           o->exchange == FLIGHTSHUFFLE__PLAN__EXCHANGE_KIND__RANGE) && !o->n_keys)
        return fsh_error_set(err, EINVAL, "a hash or range exchange needs keys");
      if (o->exchange == FLIGHTSHUFFLE__PLAN__EXCHANGE_KIND__RANGE && o->n_order != o->n_keys)
        return fsh_error_set(err, EINVAL, "a range exchange needs one order entry per key");
      if (in[0]) FSH_RETURN_NOT_OK(check_cols(o->keys, o->n_keys, in[0], "keys", err));
      break;
    default:
      break;
  }
  return 0;
}

int fsh_plan_fragment_decode(const uint8_t *data, int64_t size, fsh_plan_fragment **out,
                             fsh_error *err) {
  *out = NULL;
  static const uint8_t empty[1];
  if (size < 0) return fsh_error_set(err, EINVAL, "plan fragment: negative size");
  pb_frag *m = flightshuffle__plan__stage_fragment__unpack(&plan_pb_allocator, (size_t)size,
                                                           data ? data : empty);
  if (!m)
    return fsh_error_set(err, EINVAL, "plan fragment: malformed StageFragment protobuf (%lld "
                                      "bytes)", (long long)size);
  int rc = 0;
  fsh_schema **schemas = fsh_calloc(m->n_operators ? m->n_operators : 1, sizeof *schemas);
  if (!schemas) rc = fsh_error_set(err, ENOMEM, "plan fragment: out of memory");
  if (!rc && m->n_operators == 0) rc = fsh_error_set(err, EINVAL, "plan fragment: no operators");
  for (size_t k = 0; !rc && k < m->n_operators; k++) {
    for (size_t j = 0; j < k && !rc; j++)
      if (m->operators[k] && m->operators[j]->id == m->operators[k]->id)
        rc = fsh_error_set(err, EINVAL, "plan fragment operator %zu: id %d repeats", k,
                           m->operators[k]->id);
    if (!rc && (rc = check_op(m, k, schemas, err)) != 0)
      /* whatever the check met (an unsupported schema, a type the
       * expression rejects) the fragment is what is wrong */
      rc = fsh_error_prefix(err, rc == ENOMEM ? ENOMEM : EINVAL,
                            "plan fragment operator %zu (node %d): ", k,
                            m->operators[k] ? m->operators[k]->id : -1);
  }
  for (size_t i = 0; !rc && i < m->n_input_exchanges; i++) {
    bool found = false;
    for (size_t k = 0; k < m->n_operators; k++)
      found |= m->operators[k]->id == m->input_exchanges[i] &&
               m->operators[k]->kind == FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__EXCHANGE;
    if (!found)
      rc = fsh_error_set(err, EINVAL, "plan fragment: input exchange %d is not an exchange "
                                      "operator of the fragment", m->input_exchanges[i]);
  }
  if (!rc && m->output_exchange != -1) {
    const pb_op *last = m->operators[m->n_operators - 1];
    if (last->id != m->output_exchange || last->kind != FLIGHTSHUFFLE__PLAN__OPERATOR_KIND__EXCHANGE)
      rc = fsh_error_set(err, EINVAL, "plan fragment: output exchange %d is not its last "
                                      "operator (an exchange)", m->output_exchange);
  }
  for (size_t k = 0; schemas && k < m->n_operators; k++) fsh_schema_unref(schemas[k]);
  fsh_free(schemas);
  fsh_plan_fragment *f = rc ? NULL : fsh_calloc(1, sizeof *f);
  if (!rc && !f) rc = fsh_error_set(err, ENOMEM, "plan fragment: out of memory");
  if (rc) {
    flightshuffle__plan__stage_fragment__free_unpacked(m, &plan_pb_allocator);
    return rc;
  }
  f->m = m;
  *out = f;
  return 0;
}

int fsh_plan_fragment_encode(const fsh_plan_fragment *f, fsh_buffer **out, fsh_error *err) {
  *out = NULL;
  size_t size = flightshuffle__plan__stage_fragment__get_packed_size(f->m);
  fsh_buffer *b = fsh_buffer_new((int64_t)size, false);
  if (!b) return fsh_error_set(err, ENOMEM, "plan fragment: out of memory");
  flightshuffle__plan__stage_fragment__pack(f->m, b->data);
  *out = b;
  return 0;
}

int fsh_plan_fragment_operators(const fsh_plan_fragment *f) { return (int)f->m->n_operators; }

void fsh_plan_fragment_free(fsh_plan_fragment *f) {
  if (!f) return;
  flightshuffle__plan__stage_fragment__free_unpacked(f->m, &plan_pb_allocator);
  fsh_free(f);
}

/* ---- building the fragment's plan -------------------------------------------------- */

/* The static name of a plan operator (plan_node.user_op) for a name that
 * came over the wire ("operator" when it is none of the builders'). */
static const char *static_op_name(const char *name) {
  static const char *const names[] = {"scan", "filter", "project", "aggregate", "join", "sort",
                                      "top_n", "limit", "into_batches", "repartition",
                                      "gather", "into_partitions"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (name && strcmp(name, names[i]) == 0) return names[i];
  return "operator";
}

/* Fills node n (index k of the fragment) from operator o; `index` maps a
 * node id of the fragment to its index (-1: none). */
static int build_node(const pb_frag *m, size_t k, const int *index, int n_index, plan_node *n,
                      fsh_plan *p, fsh_error *err) {
  const pb_op *o = m->operators[k];
  n->kind = (pn_kind)o->kind;
  n->id = (int)k;
  n->user_pos = o->user_position;
  n->user_op = static_op_name(o->user_op);
  if (o->label && o->label[0] && !(n->label = fsh_strdup(o->label))) return ENOMEM;
  n->n_partitions = o->partitions;
  FSH_RETURN_NOT_OK(decode_schema(&o->schema, &n->schema, err));
  bool read_exchange = false;
  for (size_t i = 0; i < m->n_input_exchanges; i++) read_exchange |= m->input_exchanges[i] == o->id;
  if (!read_exchange) {
    for (size_t i = 0; i < o->n_inputs && i < 2; i++) {
      int in = o->inputs[i] >= 0 && o->inputs[i] < n_index ? index[o->inputs[i]] : -1;
      if (in < 0 || in >= (int)k)
        return fsh_error_set(err, EINVAL, "input %d is not an earlier operator", o->inputs[i]);
      n->inputs[n->n_inputs++] = in;
    }
  }
  const fsh_schema *in0 = n->n_inputs ? p->nodes[n->inputs[0]]->schema : NULL;
  if (o->generated) {
    const Flightshuffle__Plan__Generated *g = o->generated;
    n->gen = (fsh_plan_gen_options){.generator = (fsh_plan_generator)g->generator,
                                    .rows = g->rows, .batch_rows = g->batch_rows,
                                    .seed = g->seed, .key_range = g->key_range,
                                    .with_nulls = g->with_nulls,
                                    .null_fraction = g->null_fraction, .skew = g->skew,
                                    .groups = g->groups};
  }
  if (o->n_files) {
    if (!(n->files = fsh_calloc(o->n_files, sizeof *n->files))) return ENOMEM;
    for (size_t i = 0; i < o->n_files; i++, n->n_files++)
      if (!(n->files[i] = fsh_strdup(o->files[i]))) return ENOMEM;
  }
  if (o->n_columns) {
    n->columns = fsh_calloc(o->n_columns, sizeof *n->columns);
    n->column_exprs = fsh_calloc(o->n_columns, sizeof *n->column_exprs);
    if (!n->columns || !n->column_exprs) return ENOMEM;
    for (size_t i = 0; i < o->n_columns; i++, n->n_columns++)
      if (!(n->columns[i] = fsh_strdup(o->columns[i])) ||
          !(n->column_exprs[i] = fsh_expr_col(o->columns[i])))
        return ENOMEM;
  }
  if (o->n_exprs) {
    n->exprs = fsh_calloc(o->n_exprs, sizeof *n->exprs);
    n->names = o->n_names ? fsh_calloc(o->n_exprs, sizeof *n->names) : NULL;
    if (!n->exprs || (o->n_names && !n->names)) return ENOMEM;
    n->n_exprs = (int32_t)o->n_exprs;
    for (size_t i = 0; i < o->n_exprs; i++) {
      FSH_RETURN_NOT_OK(fsh_expr_from_json(o->exprs[i], -1, &n->exprs[i], err));
      if (in0) FSH_RETURN_NOT_OK(fsh_expr_bind(n->exprs[i], in0, err));
      if (n->names && i < o->n_names && !(n->names[i] = fsh_strdup(o->names[i]))) return ENOMEM;
    }
  }
  if (n->kind == PN_AGG) {
    n->agg_mode = (fsh_agg_mode)o->agg_mode;
    FSH_RETURN_NOT_OK(decode_schema(&o->agg_input_schema, &n->agg_input, err));
    n->aggs = fsh_calloc(o->n_aggregates ? o->n_aggregates : 1, sizeof *n->aggs);
    n->agg_names = fsh_calloc(o->n_aggregates ? o->n_aggregates : 1, sizeof *n->agg_names);
    if (!n->aggs || !n->agg_names) return ENOMEM;
    for (size_t i = 0; i < o->n_aggregates; i++, n->n_aggs++) {
      const Flightshuffle__Plan__Aggregate *a = o->aggregates[i];
      n->aggs[i].fn = (fsh_agg_fn)a->fn;
      n->aggs[i].column = a->column;
      if (a->name && a->name[0]) {
        if (!(n->agg_names[i] = fsh_strdup(a->name))) return ENOMEM;
        n->aggs[i].name = n->agg_names[i];
      }
    }
  }
  if (o->n_keys || n->kind == PN_AGG) {
    n->keys = fsh_malloc((o->n_keys ? o->n_keys : 1) * sizeof *n->keys);
    if (!n->keys) return ENOMEM;
    for (size_t i = 0; i < o->n_keys; i++) n->keys[i] = o->keys[i];
    n->n_keys = (int32_t)o->n_keys;
  }
  if (o->n_right_keys) {
    if (!(n->keys2 = fsh_malloc(o->n_right_keys * sizeof *n->keys2))) return ENOMEM;
    for (size_t i = 0; i < o->n_right_keys; i++) n->keys2[i] = o->right_keys[i];
  }
  if (o->n_order) {
    if (o->n_order != o->n_keys)
      return fsh_error_set(err, EINVAL, "%zu order entries for %zu keys", o->n_order, o->n_keys);
    if (!(n->sort_order = fsh_calloc(o->n_order, sizeof *n->sort_order))) return ENOMEM;
    for (size_t i = 0; i < o->n_order; i++)
      n->sort_order[i] = (fsh_sort_key){.descending = o->order[i]->descending,
                                        .nulls_first = o->order[i]->nulls_first};
  }
  n->join_type = (fsh_join_type)o->join_type;
  n->broadcast = o->broadcast;
  n->n = o->n;
  n->xkind = (px_kind)o->exchange;
  n->seed = o->seed;
  n->sample_rows = o->sample_rows;
  n->merge = (fsh_plan_merge)o->pre_shuffle_merge;
  n->limit_hint = o->limit_hint;
  n->staged = o->staged;
  if (n->staged && (n->kind != PN_EXCHANGE || (n->xkind != PX_RANGE &&
                                                n->xkind != PX_INTO_PARTITIONS) ||
                    (int)k != (int)m->n_operators - 1 || m->scatter))
    return fsh_error_set(err, EINVAL, "only the output range / into_partitions exchange of a "
                         "staging fragment is staged");
  return 0;
}

int plan_fragment_build(const fsh_plan_fragment *f, fsh_plan **out, int **ids, fsh_error *err) {
  *out = NULL;
  *ids = NULL;
  const pb_frag *m = f->m;
  int max_id = -1;
  for (size_t k = 0; k < m->n_operators; k++) {
    if (m->operators[k]->id < 0 || m->operators[k]->id > (1 << 24))
      return fsh_error_set(err, EINVAL, "plan fragment: node id %d out of range",
                           m->operators[k]->id);
    if (m->operators[k]->id > max_id) max_id = m->operators[k]->id;
  }
  int *index = fsh_malloc((size_t)(max_id + 1) * sizeof *index);
  int *orig = fsh_malloc(m->n_operators * sizeof *orig);
  fsh_plan *p = NULL;
  int rc = index && orig ? fsh_plan_new(1, &p, err) : ENOMEM;
  if (!rc && !(p->nodes = fsh_calloc(m->n_operators, sizeof *p->nodes))) rc = ENOMEM;
  if (!rc) {
    p->cap_nodes = (int)m->n_operators;
    p->merge = FSH_PLAN_MERGE_OFF;
    for (int i = 0; i <= max_id; i++) index[i] = -1;
  }
  for (size_t k = 0; !rc && k < m->n_operators; k++) {
    index[m->operators[k]->id] = (int)k;
    orig[k] = m->operators[k]->id;
    plan_node *n = fsh_calloc(1, sizeof *n);
    if (!n) {
      rc = ENOMEM;
      break;
    }
    p->nodes[p->n_nodes++] = n;
    if ((rc = build_node(m, k, index, max_id + 1, n, p, err)) != 0 && rc != ENOMEM)
      rc = fsh_error_prefix(err, rc, "plan fragment operator %zu (node %d): ", k, orig[k]);
  }
  fsh_free(index);
  if (rc == ENOMEM) fsh_error_set(err, ENOMEM, "plan fragment: out of memory");
  if (rc) {
    fsh_plan_free(p);
    fsh_free(orig);
    return rc;
  }
  *out = p;
  *ids = orig;
  return 0;
}

int plan_fragment_output(const fsh_plan_fragment *f) { return f->m->output_exchange; }
bool plan_fragment_scatter(const fsh_plan_fragment *f) { return f->m->scatter; }
