/* plan_internal.h -- what the plan files share: the physical node of a
 * plan (plan.c builds them, plan_json.c parses them, plan_run.c,
 * plan_ops.c and plan_exchange.c run them -- see plan_run_internal.h --
 * plan_proto.c serializes a stage of them). */
#ifndef FSH_PLAN_INTERNAL_H
#define FSH_PLAN_INTERNAL_H

#include <flightshuffle/exec.h>
#include <flightshuffle/workloads.h>

#include <errno.h>
#include <string.h>

typedef enum pn_kind {
  PN_SCAN_GEN = 0,
  PN_SCAN_IPC,
  PN_FILTER,
  PN_PROJECT,
  PN_AGG,          /* fsh_hash_agg in agg_mode */
  PN_JOIN,         /* inputs[0] probe (left), inputs[1] build (right) */
  PN_SORT,         /* local sort */
  PN_TOP_N,        /* local top-N */
  PN_LIMIT,        /* local limit */
  PN_INTO_BATCHES,
  PN_EXCHANGE,
  PN_KIND_COUNT_
} pn_kind;

typedef enum px_kind {
  PX_HASH = 0,
  PX_RANDOM,
  PX_RANGE,
  PX_GATHER,          /* every partition to 1, in order */
  PX_INTO_PARTITIONS, /* exactly n, contiguous, in order */
  PX_KIND_COUNT_
} px_kind;

typedef struct plan_node {
  pn_kind kind;
  int id;          /* index among the plan's physical nodes */
  int user_pos;    /* the user-level operator it came from */
  const char *user_op; /* its name: "filter", "sort", ... (static) */
  char *label;     /* its id in the JSON, or NULL */
  int n_inputs;
  int inputs[2];
  fsh_schema *schema; /* output schema (one reference) */
  int32_t n_partitions;
  /* output order (for comparing runs): see fsh_plan_order */
  fsh_plan_order order;
  int32_t n_order_keys;
  int32_t *order_keys; /* column indices into schema */
  bool rows_determined;

  /* PN_SCAN_GEN */
  fsh_plan_gen_options gen;
  /* PN_SCAN_IPC */
  char **files;
  int64_t n_files;
  int32_t n_columns;
  char **columns;
  fsh_expr **column_exprs; /* bound to each file's schema at run time */
  /* PN_FILTER (exprs[0]) / PN_PROJECT (exprs[0, n_exprs), names) */
  int32_t n_exprs;
  fsh_expr **exprs;
  char **names;
  /* PN_AGG: keys and specs index the agg input schema (agg_input) */
  fsh_agg_mode agg_mode;
  fsh_schema *agg_input;
  int32_t n_keys;
  int32_t *keys;      /* also: join left keys, sort / exchange keys */
  int32_t *keys2;     /* join right keys */
  fsh_sort_key *sort_order;
  int32_t n_aggs;
  fsh_agg_spec *aggs; /* names owned (agg_names) */
  char **agg_names;
  /* PN_JOIN */
  fsh_join_type join_type;
  bool broadcast;
  /* PN_TOP_N, PN_LIMIT: n; PN_INTO_BATCHES: rows */
  int64_t n;
  /* PN_EXCHANGE */
  px_kind xkind;
  uint64_t seed;
  int64_t sample_rows;
  fsh_plan_merge merge;
  int64_t limit_hint; /* a gather under a global limit: stop maps at n rows (-1: none) */
  bool staged;        /* a fragment's range / into_partitions output, staged (Plan.proto) */
} plan_node;

struct fsh_plan {
  int32_t default_partitions;
  fsh_plan_merge merge;
  int64_t merge_threshold;
  int n_nodes, cap_nodes;
  plan_node **nodes;
  int n_user; /* user-level operators added */
};

const char *plan_exchange_name(px_kind k);
/* Map tasks per map output of an exchange of m map tasks into r
 * partitions under a pre-shuffle merge policy: 1 when off (or auto with
 * sqrt(m * r) <= threshold); otherwise enough for at most threshold^2 / r
 * map outputs (on: at least 2 tasks per output when m > 1). */
int64_t plan_merge_group(fsh_plan_merge policy, int64_t threshold, int64_t m, int64_t r);
/* "plan operator 3 (filter 'f')" into buf. */
const char *plan_node_name(const plan_node *n, char *buf, size_t size);
/* The stages: roots[] gets each stage's root node -- every exchange (the
 * stage writes it) in node order, then the last node when it is not an
 * exchange (the stage producing the result; when the plan ends in an
 * exchange the result is read from it). Returns the count. */
int plan_stage_roots(const fsh_plan *p, int *roots);
/* member[i] (n_nodes entries): node i runs in the stage of `root` (input
 * exchanges are members: the stage reads them). */
void plan_stage_members(const fsh_plan *p, int root, bool *member);

/* The plan of a decoded stage fragment (a plan-fragment task): its
 * operators as nodes 0 .. n-1 in fragment order (*ids: each one's node id
 * in the whole plan, fsh_malloc'd), expressions bound; the exchanges it
 * reads have no inputs (their rows come from the task's map outputs).
 * EINVAL naming the operator for what the decoder let through but a node
 * cannot hold. */
int plan_fragment_build(const fsh_plan_fragment *f, fsh_plan **out, int **ids, fsh_error *err);
/* The node id of the exchange the fragment writes, -1: the result. */
int plan_fragment_output(const fsh_plan_fragment *f);
/* Whether the fragment is a scatter stage's (Plan.proto StageFragment.scatter). */
bool plan_fragment_scatter(const fsh_plan_fragment *f);
/* Whether the range exchange x's scatter stage computes its input again
 * instead of reading it staged: x is a range exchange and every other
 * node of its stage (member[i], plan_stage_members; NULL: every node of
 * p but x) is a scan, filter or project -- deterministic, and cheaper to
 * compute twice than to write, read back and checksum once more. Its
 * staging stage then writes only the sample (its tasks' partitions stay
 * empty, and the scatter tasks read them, empty, to say so). */
bool plan_range_recomputes(const fsh_plan *p, const plan_node *x, const bool *member);
/* Stage `stage` of p as a fragment: mode 0 as it is; 1 its range /
 * into_partitions output exchange staged; 2 the scatter stage that
 * writes that exchange from the staged shuffle (read as node n_nodes + id,
 * tasks + 1 partitions) -- or, when plan_range_recomputes, from its
 * stage's operators again, the staged shuffle's node still read (its
 * partition empty) but feeding nothing. */
int plan_stage_encode_mode(const fsh_plan *p, int stage, int mode, fsh_buffer **out,
                           fsh_error *err);

#endif
