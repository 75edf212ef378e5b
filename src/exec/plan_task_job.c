/* plan_task_job.c -- a plan as a driver's job: every stage of the plan a
 * "plan-fragment" stage of a JobPlan (sched.h, fsh_sched_plan_job_plan) --
 * a stage writing a range / into_partitions exchange two: the staging
 * stage (every task's rows and sample; only the samples when the scatter
 * computes its input again, plan_range_recomputes) and the scatter stage;
 * a stage writing a global limit's gather limited (the driver stops it
 * once enough rows exist) --
 * and the result of such a job read back from its result shuffle (the
 * last stage's) and checked partition by partition against the rows and
 * row checksums its tasks answered. */
#include "exec/plan_run_internal.h"

#include <flightshuffle/sched.h>

#include <inttypes.h>
#include <time.h>

/* The pre-shuffle merge policy the plan gives the exchange x (NULL: the
 * result) as a job stage's (fsh_sched_plan_stage.merge): the exchange's
 * own, else the plan's, as 1 + FSH_SCHED_MERGE_*; 0 (the job's) when both
 * are auto -- the in-process runner's order below its run option. */
static int32_t stage_merge(const fsh_plan *p, const plan_node *x) {
  fsh_plan_merge m = x && x->merge != FSH_PLAN_MERGE_AUTO ? x->merge : p->merge;
  return m == FSH_PLAN_MERGE_ON ? 1 + FSH_SCHED_MERGE_ON
         : m == FSH_PLAN_MERGE_OFF ? 1 + FSH_SCHED_MERGE_OFF : 0;
}

void fsh_plan_job_stages_free(fsh_plan_job_stages *js) {
  if (!js) return;
  for (int i = 0; js->stages && i < js->n; i++) fsh_buffer_unref((fsh_buffer *)js->stages[i].fragment);
  fsh_free(js->stages);
  fsh_free(js->inputs);
  fsh_free(js->nodes);
  fsh_free(js->recomputed);
  memset(js, 0, sizeof *js);
}

int fsh_plan_job_stages_get(const fsh_plan *p, fsh_plan_job_stages *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  FSH_RETURN_NOT_OK(fsh_plan_check_distributed(p, err));
  int n = fsh_plan_stage_count(p);
  if (n < 1) return fsh_error_set(err, EINVAL, "plan job: the plan is empty");
  /* a stage writing a range / into_partitions exchange becomes two: the
   * staging stage and the scatter stage (whose output later stages read) */
  fsh_plan_stage_info *info = fsh_calloc((size_t)n, sizeof *info);
  int *job_of = fsh_calloc((size_t)n, sizeof *job_of); /* plan stage -> job stage writing it */
  out->stages = fsh_calloc((size_t)n * 2, sizeof *out->stages);
  out->inputs = fsh_calloc((size_t)n * 2 * FSH_PLAN_STAGE_MAX_INPUTS, sizeof *out->inputs);
  out->nodes = fsh_calloc((size_t)n * 2 * FSH_PLAN_STAGE_MAX_INPUTS, sizeof *out->nodes);
  out->recomputed = fsh_calloc((size_t)n * 2, sizeof *out->recomputed);
  bool *member = fsh_malloc((size_t)p->n_nodes * sizeof *member);
  int *roots = fsh_malloc((size_t)p->n_nodes * sizeof *roots);
  int rc = info && job_of && out->stages && out->inputs && out->nodes && out->recomputed &&
                   member && roots
               ? 0 : fsh_error_set(err, ENOMEM, "plan job: out of memory");
  if (!rc) plan_stage_roots(p, roots);
  for (int s = 0; rc == 0 && s < n; s++) {
    if ((rc = fsh_plan_stage_info_get(p, s, &info[s], err)) != 0) break;
    const plan_node *x = info[s].output_node >= 0 ? p->nodes[info[s].output_node] : NULL;
    bool two = x && (x->xkind == PX_RANGE || x->xkind == PX_INTO_PARTITIONS);
    bool recomputed = false;
    if (two) { /* as plan_stage_encode_mode decides */
      plan_stage_members(p, roots[s], member);
      recomputed = plan_range_recomputes(p, x, member);
    }
    for (int step = 0; rc == 0 && step < (two ? 2 : 1); step++) {
      int k = out->n;
      out->recomputed[k] = recomputed;
      fsh_sched_plan_stage *st = &out->stages[k];
      int *ins = out->inputs + (size_t)k * FSH_PLAN_STAGE_MAX_INPUTS;
      int32_t *nodes = out->nodes + (size_t)k * FSH_PLAN_STAGE_MAX_INPUTS;
      fsh_buffer *frag = NULL;
      rc = plan_stage_encode_mode(p, s, two ? 1 + step : 0, &frag, err);
      if (rc) break;
      *st = (fsh_sched_plan_stage){.fragment = frag, .n_tasks = info[s].n_tasks,
                                   .n_partitions = info[s].output_partitions,
                                   .input_stages = ins, .input_nodes = nodes,
                                   .result = s == n - 1 && step == (two ? 1 : 0),
                                   .merge = stage_merge(p, x)};
      if (x && x->xkind == PX_GATHER && x->limit_hint >= 0) {
        /* a global limit's gather: the driver stops the stage at its rows
         * (sched.h "global limits"), in task order when the limit's input
         * is ordered (its first rows are wanted, as in process) */
        st->limited = true;
        st->limit_rows = x->limit_hint;
        st->limit_ordered = x->order != FSH_PLAN_ORDER_NONE;
      }
      out->n++;
      if (two && step == 0) {
        st->n_partitions = info[s].n_tasks + 1; /* staged: a partition per task, the samples */
      } else if (two) {
        st->scatter = true;
        st->n_inputs = 1;
        ins[0] = k - 1;
        nodes[0] = p->n_nodes + info[s].output_node;
      }
      if (!two || step == 0) {
        for (int i = 0; rc == 0 && i < info[s].n_inputs; i++) {
          int from = info[s].input_stages[i];
          if (from < 0 || from >= s)
            rc = fsh_error_set(err, EINVAL, "plan job: stage %d reads exchange %d, written by "
                               "no earlier stage", s, (int)info[s].input_nodes[i]);
          else
            ins[i] = job_of[from], nodes[i] = info[s].input_nodes[i];
        }
        st->n_inputs = info[s].n_inputs;
      }
    }
    job_of[s] = out->n - 1;
  }
  fsh_free(info);
  fsh_free(job_of);
  fsh_free(member);
  fsh_free(roots);
  if (rc) fsh_plan_job_stages_free(out);
  return rc;
}

int fsh_plan_job_stage_names(const fsh_plan *p, char (*names)[32], int n, int *n_names,
                             fsh_error *err) {
  *n_names = 0;
  int ns = fsh_plan_stage_count(p);
  for (int s = 0; s < ns; s++) {
    fsh_plan_stage_info info;
    FSH_RETURN_NOT_OK(fsh_plan_stage_info_get(p, s, &info, err));
    const plan_node *x = info.output_node >= 0 ? p->nodes[info.output_node] : NULL;
    bool two = x && (x->xkind == PX_RANGE || x->xkind == PX_INTO_PARTITIONS);
    for (int step = 0; step < (two ? 2 : 1); step++) {
      if (*n_names >= n)
        return fsh_error_set(err, ENOSPC, "plan job: more than %d stages to name", n);
      char *o = names[(*n_names)++];
      if (s == ns - 1 && step == (two ? 1 : 0)) { /* writes the job's result */
        snprintf(o, 32, "%s: result", (x ? x : p->nodes[p->n_nodes - 1])->user_op);
      } else {
        const char *k = x->xkind == PX_INTO_PARTITIONS ? "partitions" : plan_exchange_name(x->xkind);
        snprintf(o, 32, "%s: %s%s", x->user_op, k, !two ? "" : step == 0 ? "-stage" : "-scatter");
      }
    }
  }
  return 0;
}

int fsh_plan_job_plan(const fsh_plan *p, const fsh_plan_job_options *o, fsh_buffer **out,
                      fsh_error *err) {
  *out = NULL;
  fsh_plan_job_stages js;
  FSH_RETURN_NOT_OK(fsh_plan_job_stages_get(p, &js, err));
  /* the merge: an explicit on / off overrides the plan's policies (the
   * stages' own, from fsh_plan_job_stages_get); auto lets them decide,
   * auto's threshold the option's, else the plan's */
  int32_t mode = o ? o->merge : FSH_SCHED_MERGE_OFF;
  if (mode != FSH_SCHED_MERGE_AUTO)
    for (int i = 0; i < js.n; i++) js.stages[i].merge = 0;
  int32_t threshold = o && o->merge_threshold > 0 ? o->merge_threshold
                      : p->merge_threshold > 0 && p->merge_threshold <= INT32_MAX
                          ? (int32_t)p->merge_threshold : 0;
  fsh_sched_plan_job j = {.name = o && o->name ? o->name : "plan", .n_stages = js.n,
                          .stages = js.stages,
                          .compression = o ? o->compression : FSH_COMPRESSION_NONE,
                          .backend = o ? o->backend : FSH_TASK_BACKEND_FLIGHT,
                          .max_attempts = o ? o->max_attempts : 0,
                          .slots_per_worker = o ? o->slots_per_worker : 0,
                          .merge = mode, .merge_threshold = threshold};
  int rc = fsh_sched_plan_job_plan(&j, out, err);
  fsh_plan_job_stages_free(&js);
  return rc;
}

/* Gives the rechunker's ready batches (all with finish) to sink. */
static int sink_rechunked(fsh_rechunker *rk, fsh_plan_sink sink, void *sink_arg, int32_t part,
                          fsh_error *err) {
  for (;;) {
    fsh_batch *y = NULL;
    FSH_RETURN_NOT_OK(fsh_rechunker_pop(rk, &y, err));
    if (!y) return 0;
    int rc = sink(sink_arg, part, y, err);
    fsh_batch_unref(y);
    if (rc) return rc;
  }
}

/* Reads result partition `part` of s into sink (sink(part, NULL) first),
 * checked against what its tasks wrote; *rows: the rows given. When the
 * plan ends in into_batches, the batches given are cut again to its row
 * count: the map-output writer coalesces what its task wrote into large
 * blocks, so the result shuffle does not keep the task's batching. */
static int read_result_partition(const plan_node *root, const fsh_sched_job_status *s,
                                 fsh_shuffle_backend *b, int32_t part, fsh_plan_sink sink,
                                 void *sink_arg, int64_t *rows, fsh_error *err) {
  const fsh_reduce_task *t = &s->result[part];
  *rows = 0;
  fsh_map_output *ms = NULL;
  FSH_RETURN_NOT_OK(fsh_reduce_task_map_outputs(t, &ms, err));
  fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = t->n_partitions,
                           .schema = root->schema};
  fsh_batch_stream st;
  int rc = fsh_shuffle_open_reader(b, &spec, part, ms, t->n_sources, &st, err);
  if (rc) {
    fsh_free(ms);
    return rc;
  }
  uint64_t sum = 0;
  fsh_rechunker *rk = NULL;
  if (root->kind == PN_INTO_BATCHES) rc = fsh_rechunker_new(root->n, &rk, err);
  if (!rc) rc = sink(sink_arg, part, NULL, err);
  while (!rc) {
    fsh_batch *x = NULL;
    if ((rc = st.get_next(&st, &x, err)) != 0 || !x) break;
    *rows += x->length;
    if ((rc = plan_row_checksum(x, &sum, err)) == 0 && x->length > 0) {
      if (!rk) rc = sink(sink_arg, part, x, err);
      else if ((rc = fsh_rechunker_push(rk, x, err)) == 0)
        rc = sink_rechunked(rk, sink, sink_arg, part, err);
    }
    fsh_batch_unref(x);
  }
  if (!rc && rk) {
    fsh_rechunker_finish(rk);
    rc = sink_rechunked(rk, sink, sink_arg, part, err);
  }
  fsh_rechunker_free(rk);
  st.release(&st);
  fsh_free(ms);
  if (rc == 0 && (*rows != s->result_rows[part] || sum != s->result_checksums[part]))
    rc = fsh_error_set(err, EIO, "partition %d: %" PRId64 " rows read (row checksum %016"
                       PRIx64 "), its tasks wrote %" PRId64 " (%016" PRIx64 ")", (int)part,
                       *rows, sum, s->result_rows[part], s->result_checksums[part]);
  return rc;
}

/* A result partition's read is tried this many times, 200 ms apart: the
 * job is over, so no scheduler retries a fetch that failed on the way (a
 * connection refused once by a live worker, seen on a loaded machine); a
 * worker that is really gone fails every attempt and the error stands. */
#define RESULT_READ_ATTEMPTS 3

int fsh_plan_job_result_stream(const fsh_plan *p, const fsh_sched_job_status *s,
                               fsh_shuffle_backend *b, fsh_plan_sink sink, void *sink_arg,
                               int64_t *rows, fsh_error *err) {
  if (rows) *rows = 0;
  const plan_node *root = p->nodes[p->n_nodes - 1];
  int32_t np = root->n_partitions;
  if (s->state != FSH_SCHED_JOB_SUCCEEDED || s->n_result != np)
    return fsh_error_set(err, EINVAL, "plan job %" PRIu64 ": %s with %d result partitions; the "
                         "plan has %d", s->job_id, fsh_sched_job_state_name(s->state),
                         s->n_result, (int)np);
  int rc = 0;
  int64_t total = 0;
  for (int32_t part = 0; rc == 0 && part < np; part++) {
    int64_t n = 0;
    for (int attempt = 1;; attempt++) {
      rc = read_result_partition(root, s, b, part, sink, sink_arg, &n, err);
      if (rc == 0 || rc == ENOMEM || attempt == RESULT_READ_ATTEMPTS) break;
      struct timespec ts = {0, 200 * 1000000L};
      nanosleep(&ts, NULL);
    }
    total += n;
  }
  if (rc) return fsh_error_prefix(err, rc, "plan job %" PRIu64 ": reading the result: ", s->job_id);
  if (rows) *rows = total;
  return 0;
}

int fsh_plan_job_result(const fsh_plan *p, const fsh_sched_job_status *s, fsh_shuffle_backend *b,
                        fsh_plan_result *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  const plan_node *root = p->nodes[p->n_nodes - 1];
  int32_t np = root->n_partitions;
  out->n_partitions = np;
  if (!(out->partition_batches = fsh_calloc((size_t)(np > 0 ? np : 1), sizeof *out->partition_batches)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  plan_collect col = {.out = out};
  int rc = fsh_plan_job_result_stream(p, s, b, plan_collect_sink, &col, NULL, err);
  if (rc) {
    fsh_plan_result_reset(out);
    return rc;
  }
  out->schema = fsh_schema_ref(root->schema);
  return 0;
}
