/* job_client.c -- the other ends of the job actions (contracts in sched.h):
 * "submit" and "job-status" against a remote driver (JobStatus decoding),
 * the status as text, and the worker's notifier that pushes "task-done" to
 * the driver when a task ends (with the inputs a failed task found lost,
 * TaskDone.lost) and asks "map-outputs" for incremental reduces. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched_internal.h"

/* One DoAction with a body; exactly one result in *res. */
static int call_driver(const char *uri, const char *token, const char *type, const void *body,
                       int64_t size, fsh_flight_result_list *res, fsh_error *err) {
  fsh_flight_client_options co = {.uri = uri, .auth_token = token, .timeout_ms = 10000};
  fsh_flight_client *c = NULL;
  FSH_RETURN_NOT_OK(fsh_flight_client_open(&co, &c, err));
  fsh_flight_action a = {.type = (char *)type, .body = {(uint8_t *)body, size}};
  int rc = fsh_flight_do_action(c, &a, res, err);
  if (rc == 0 && res->n != 1)
    rc = fsh_error_set(err, EPROTO, "driver %s: %s: %lld results, expected 1", uri, type,
                       (long long)res->n);
  fsh_flight_client_close(c);
  if (rc) fsh_flight_result_list_reset(res);
  return rc;
}

int fsh_sched_submit(const char *driver_uri, const char *auth_token, const void *plan,
                     int64_t size, uint64_t *job_id, fsh_error *err) {
  fsh_flight_result_list res = {0};
  FSH_RETURN_NOT_OK(call_driver(driver_uri, auth_token, "submit", plan, size, &res, err));
  Flightshuffle__Sched__SubmitReply *r = flightshuffle__sched__submit_reply__unpack(
      &fsh_sched_pb_allocator, (size_t)res.items[0].size, res.items[0].data);
  int rc = r && r->job_id ? 0 : fsh_error_set(err, EPROTO, "driver %s: submit: malformed "
                                              "SubmitReply", driver_uri);
  if (rc == 0) *job_id = r->job_id;
  if (r) flightshuffle__sched__submit_reply__free_unpacked(r, &fsh_sched_pb_allocator);
  fsh_flight_result_list_reset(&res);
  return rc;
}

static int decode_events(Flightshuffle__Sched__TaskEvent **in, size_t n,
                         fsh_sched_task_event **out, int32_t *count) {
  *count = 0;
  if (!n) return 0;
  if (!(*out = fsh_calloc(n, sizeof **out))) return ENOMEM;
  for (size_t i = 0; i < n; i++) {
    fsh_sched_task_event *e = &(*out)[i];
    *e = (fsh_sched_task_event){in[i]->stage_id, in[i]->task, in[i]->attempt,
                                fsh_strdup(in[i]->reason ? in[i]->reason : "")};
    if (!e->reason) return ENOMEM;
    (*count)++;
  }
  return 0;
}

int fsh_sched_get_job_status(const char *driver_uri, const char *auth_token, uint64_t job_id,
                         bool with_partitions, fsh_sched_job_status *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  Flightshuffle__Sched__JobStatusRequest q = FLIGHTSHUFFLE__SCHED__JOB_STATUS_REQUEST__INIT;
  q.job_id = job_id;
  q.with_partitions = with_partitions;
  uint8_t body[32];
  size_t n = protobuf_c_message_pack(&q.base, body);
  fsh_flight_result_list res = {0};
  FSH_RETURN_NOT_OK(call_driver(driver_uri, auth_token, "job-status", body, (int64_t)n, &res,
                                err));
  Flightshuffle__Sched__JobStatus *m = flightshuffle__sched__job_status__unpack(
      &fsh_sched_pb_allocator, (size_t)res.items[0].size, res.items[0].data);
  fsh_flight_result_list_reset(&res);
  if (!m) return fsh_error_set(err, EPROTO, "driver %s: job-status: malformed JobStatus",
                               driver_uri);
  fsh_sched_job_status s = {.job_id = m->job_id, .state = (fsh_sched_job_state)m->state,
                            .seconds = m->seconds, .bytes_written = m->bytes_written,
                            .bytes_fetched = m->bytes_fetched, .input_rows = m->input_rows,
                            .input_bytes = m->input_bytes, .bytes_spilled = m->bytes_spilled,
                            .operator_spill_files = m->operator_spill_files,
                            .operator_spilled_bytes = m->operator_spilled_bytes,
                            .operators_spilled = m->operators_spilled,
                            .merges = m->merges, .merged_outputs = m->merged_outputs,
                            .merged_bytes = m->merged_bytes, .merges_failed = m->merges_failed,
                            .verified = m->verified,
                            .first_map_output_s = m->first_map_output_s,
                            .first_reduce_start_s = m->first_reduce_start_s,
                            .last_map_output_s = m->last_map_output_s};
  int rc = 0;
  if (m->error && m->error[0] && !(s.error = fsh_strdup(m->error))) rc = ENOMEM;
  if (rc == 0 && m->n_stages && !(s.stages = fsh_calloc(m->n_stages, sizeof *s.stages)))
    rc = ENOMEM;
  for (size_t i = 0; rc == 0 && i < m->n_stages; i++) {
    const Flightshuffle__Sched__StageStatus *x = m->stages[i];
    fsh_sched_stage_status *o = &s.stages[s.n_stages++];
    o->stage_id = x->stage_id;
    snprintf(o->kind, sizeof o->kind, "%s", x->kind ? x->kind : "");
    o->tasks_total = x->tasks_total;
    o->tasks_done = x->tasks_done;
    o->tasks_running = x->tasks_running;
    o->bytes = x->bytes;
    o->rows = x->rows;
    o->seconds = x->seconds;
    o->task_seconds = x->task_seconds;
    o->merges = x->merges;
    o->merged_outputs = x->merged_outputs;
    o->tasks_skipped = x->tasks_skipped;
    o->attempts_cancelled = x->attempts_cancelled;
  }
  if (rc == 0 && m->n_partitions &&
      !(s.partitions = fsh_calloc(m->n_partitions, sizeof *s.partitions)))
    rc = ENOMEM;
  for (size_t i = 0; rc == 0 && i < m->n_partitions; i++) {
    const Flightshuffle__Sched__PartitionCheck *x = m->partitions[i];
    s.partitions[s.n_partitions++] = (fsh_sched_partition_check){
        .map_rows = x->map_rows, .reduce_rows = x->reduce_rows, .map_checksum = x->map_checksum,
        .reduce_checksum = x->reduce_checksum};
  }
  if (rc == 0 && m->n_result_parts &&
      (m->n_result_rows != m->n_result_parts || m->n_result_checksums != m->n_result_parts)) {
    flightshuffle__sched__job_status__free_unpacked(m, &fsh_sched_pb_allocator);
    fsh_sched_job_status_reset(&s);
    return fsh_error_set(err, EPROTO, "driver %s: job-status: %zu result parts, %zu rows, %zu "
                         "checksums", driver_uri, m->n_result_parts, m->n_result_rows,
                         m->n_result_checksums);
  }
  if (rc == 0 && m->n_result_parts) {
    size_t n = m->n_result_parts;
    s.result = fsh_calloc(n, sizeof *s.result);
    s.result_rows = fsh_calloc(n, sizeof *s.result_rows);
    s.result_checksums = fsh_calloc(n, sizeof *s.result_checksums);
    if (!s.result || !s.result_rows || !s.result_checksums) rc = ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
      fsh_error e;
      if (fsh_reduce_task_decode(m->result_parts[i].data, (int64_t)m->result_parts[i].len,
                                 &s.result[i], &e) != 0) {
        flightshuffle__sched__job_status__free_unpacked(m, &fsh_sched_pb_allocator);
        fsh_sched_job_status_reset(&s);
        return fsh_error_set(err, EPROTO, "driver %s: job-status: result part %zu: %s",
                             driver_uri, i, e.message);
      }
      s.n_result++;
      s.result_rows[i] = m->result_rows[i];
      s.result_checksums[i] = m->result_checksums[i];
    }
  }
  if (rc == 0) rc = decode_events(m->retried, m->n_retried, &s.retried, &s.n_retried);
  if (rc == 0) rc = decode_events(m->recomputed, m->n_recomputed, &s.recomputed, &s.n_recomputed);
  if (rc == 0) rc = decode_events(m->ignored, m->n_ignored, &s.ignored, &s.n_ignored);
  flightshuffle__sched__job_status__free_unpacked(m, &fsh_sched_pb_allocator);
  if (rc) {
    fsh_sched_job_status_reset(&s);
    return fsh_error_set(err, ENOMEM, "driver %s: job-status: out of memory", driver_uri);
  }
  *out = s;
  return 0;
}

static void print_events(FILE *f, const char *what, const fsh_sched_task_event *e, int32_t n) {
  fprintf(f, "  %s: %d\n", what, n);
  for (int32_t i = 0; i < n; i++)
    fprintf(f, "    stage %u task %d attempt %d: %s\n", e[i].stage_id, e[i].task, e[i].attempt,
            e[i].reason);
}

void fsh_sched_job_status_print(const fsh_sched_job_status *s, FILE *f) {
  fprintf(f, "job %" PRIu64 ": %s after %.3f s%s%s\n", s->job_id,
          fsh_sched_job_state_name(s->state), s->seconds, s->error ? ": " : "",
          s->error ? s->error : "");
  for (int32_t i = 0; i < s->n_stages; i++) {
    const fsh_sched_stage_status *x = &s->stages[i];
    fprintf(f, "  stage %u %-14s %d/%d done, %d running, %.3f s, %" PRId64 " rows, %" PRId64
            " bytes", x->stage_id, x->kind, x->tasks_done, x->tasks_total, x->tasks_running,
            x->seconds, x->rows, x->bytes);
    if (x->merges > 0)
      fprintf(f, ", %" PRId64 " merges of %" PRId64 " map outputs", x->merges, x->merged_outputs);
    if (x->tasks_skipped > 0) /* not lost: a global limit had its rows without them */
      fprintf(f, ", %d skipped (limit reached; %d cancelled running)", x->tasks_skipped,
              x->attempts_cancelled);
    fputc('\n', f);
  }
  fprintf(f, "  bytes written %" PRId64 ", fetched %" PRId64 ", spilled %" PRId64 "; input %" PRId64 " rows, %" PRId64
          " bytes\n", s->bytes_written, s->bytes_fetched, s->bytes_spilled, s->input_rows, s->input_bytes);
  if (s->operators_spilled > 0)
    fprintf(f, "  operators spilled %" PRId64 " times: %" PRId64 " files, %" PRId64 " bytes\n",
            s->operators_spilled, s->operator_spill_files, s->operator_spilled_bytes);
  if (s->merges > 0 || s->merges_failed > 0)
    fprintf(f, "  pre-shuffle merges %" PRId64 ": %" PRId64 " map outputs, %" PRId64 " bytes "
            "merged; %" PRId64 " failed (published unmerged)\n", s->merges, s->merged_outputs,
            s->merged_bytes, s->merges_failed);
  if (s->state == FSH_SCHED_JOB_SUCCEEDED)
    fprintf(f, "  verified %s\n", s->verified ? "yes" : "no");
  print_events(f, "retried", s->retried, s->n_retried);
  print_events(f, "recomputed", s->recomputed, s->n_recomputed);
  print_events(f, "ignored late answers", s->ignored, s->n_ignored);
}

/* ---- the worker's notifier --------------------------------------------- */

struct fsh_sched_notifier {
  fsh_flight_client *client; /* thread-safe */
  bool log;
  char uri[320];
  char worker[320];
};

int fsh_sched_notifier_new(const char *driver_uri, const char *auth_token,
                           fsh_sched_notifier **out, fsh_error *err) {
  *out = NULL;
  fsh_sched_notifier *n = fsh_calloc(1, sizeof *n);
  if (!n) return fsh_error_set(err, ENOMEM, "notifier: out of memory");
  snprintf(n->uri, sizeof n->uri, "%s", driver_uri);
  fsh_flight_client_options co = {.uri = driver_uri, .auth_token = auth_token,
                                  .timeout_ms = 5000};
  int rc = fsh_flight_client_open(&co, &n->client, err);
  if (rc) {
    fsh_free(n);
    return rc;
  }
  *out = n;
  return 0;
}

void fsh_sched_notifier_set_worker(fsh_sched_notifier *n, const char *worker_uri, bool log) {
  snprintf(n->worker, sizeof n->worker, "%s", worker_uri);
  n->log = log;
}

bool fsh_sched_notify_task_done(void *ctx, const uint8_t *tag, int64_t tag_size, int rc,
                                const char *error, const uint8_t *answer, int64_t answer_size) {
  fsh_sched_notifier *n = ctx;
  Flightshuffle__Sched__TaskDone m = FLIGHTSHUFFLE__SCHED__TASK_DONE__INIT;
  m.ref = (ProtobufCBinaryData){(size_t)tag_size, (uint8_t *)tag};
  m.worker_uri = n->worker;
  m.ok = rc == 0;
  m.error = (char *)(rc == 0 ? "" : error ? error : "(no message)");
  m.answer = (ProtobufCBinaryData){(size_t)(rc == 0 ? answer_size : 0), (uint8_t *)answer};
  /* the inputs the task found lost (this thread is the task's) */
  const fsh_lost_output *lost = NULL;
  int64_t n_lost = rc != 0 ? fsh_worker_task_lost(&lost) : 0;
  Flightshuffle__Sched__LostOutput *lo = n_lost ? fsh_calloc((size_t)n_lost, sizeof *lo) : NULL;
  Flightshuffle__Sched__LostOutput **plo =
      lo ? fsh_calloc((size_t)n_lost, sizeof *plo) : NULL;
  for (int64_t i = 0; plo && i < n_lost; i++) {
    flightshuffle__sched__lost_output__init(&lo[i]);
    lo[i].worker_uri = (char *)(lost[i].uri[0] ? lost[i].uri : n->worker);
    lo[i].shuffle_id = lost[i].shuffle_id;
    lo[i].map_id = lost[i].map_id;
    lo[i].attempt = lost[i].attempt;
    lo[i].worker_unreachable = lost[i].unreachable;
    plo[i] = &lo[i];
  }
  m.n_lost = plo ? (size_t)n_lost : 0; /* out of memory: a plain failure */
  m.lost = plo;
  size_t size = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *buf = fsh_malloc(size ? size : 1);
  if (buf) protobuf_c_message_pack(&m.base, buf);
  fsh_free(plo);
  fsh_free(lo);
  if (!buf) return false;
  fsh_flight_action a = {.type = (char *)"task-done", .body = {buf, (int64_t)size}};
  fsh_flight_result_list res = {0};
  fsh_error err = {{0}};
  Flightshuffle__Sched__TaskRef *ref =
      n->log ? flightshuffle__sched__task_ref__unpack(&fsh_sched_pb_allocator, (size_t)tag_size,
                                                      tag)
             : NULL;
  if (ref)
    fprintf(stderr, "flightshuffle: worker %s: job %" PRIu64 " stage %u task %d attempt %d "
            "%s, reporting\n", n->worker, ref->job_id, ref->stage_id, ref->task, ref->attempt,
            rc == 0 ? "done" : "failed");
  bool ok = fsh_flight_do_action(n->client, &a, &res, &err) == 0;
  if (!ok)
    fprintf(stderr, "flightshuffle: worker %s: task-done to driver %s: %s (it will ask)\n",
            n->worker, n->uri, err.message);
  if (ref && ok)
    fprintf(stderr, "flightshuffle: worker %s: job %" PRIu64 " stage %u task %d attempt %d "
            "%s, reported\n", n->worker, ref->job_id, ref->stage_id, ref->task, ref->attempt,
            rc == 0 ? "done" : "failed");
  if (ref) flightshuffle__sched__task_ref__free_unpacked(ref, &fsh_sched_pb_allocator);
  fsh_flight_result_list_reset(&res);
  fsh_free(buf);
  return ok;
}

int fsh_sched_more_sources(void *ctx, const uint8_t *tag, int64_t tag_size, uint64_t *version,
                           fsh_reduce_task *more, bool *complete, fsh_error *err) {
  fsh_sched_notifier *n = ctx;
  memset(more, 0, sizeof *more);
  more->sizes_unknown = true; /* the driver's metadata is approximate */
  *complete = false;
  Flightshuffle__Sched__MapOutputsRequest q = FLIGHTSHUFFLE__SCHED__MAP_OUTPUTS_REQUEST__INIT;
  q.ref = (ProtobufCBinaryData){(size_t)tag_size, (uint8_t *)tag};
  q.since_version = *version;
  uint8_t buf[4200];
  if (protobuf_c_message_get_packed_size(&q.base) > sizeof buf)
    return fsh_error_set(err, EINVAL, "map-outputs: a tag of %lld bytes", (long long)tag_size);
  size_t size = protobuf_c_message_pack(&q.base, buf);
  fsh_flight_action a = {.type = (char *)"map-outputs", .body = {buf, (int64_t)size}};
  fsh_flight_result_list res = {0};
  FSH_RETURN_NOT_OK(fsh_flight_do_action(n->client, &a, &res, err));
  Flightshuffle__Sched__MapOutputsReply *r =
      res.n == 1 ? flightshuffle__sched__map_outputs_reply__unpack(
                       &fsh_sched_pb_allocator, (size_t)res.items[0].size, res.items[0].data)
                 : NULL;
  fsh_flight_result_list_reset(&res);
  if (!r) return fsh_error_set(err, EPROTO, "driver %s: map-outputs: malformed answer", n->uri);
  int rc = 0;
  if (r->n_sources && !(more->sources = fsh_calloc(r->n_sources, sizeof *more->sources)))
    rc = ENOMEM;
  if (rc == 0 && r->n_locations &&
      !(more->locations = fsh_calloc(r->n_locations, sizeof *more->locations)))
    rc = ENOMEM;
  for (size_t i = 0; rc == 0 && i < r->n_locations; i++) {
    if (!(more->locations[i] = fsh_strdup(r->locations[i] ? r->locations[i] : ""))) rc = ENOMEM;
    else more->n_locations = (int32_t)(i + 1);
  }
  for (size_t i = 0; rc == 0 && i < r->n_sources; i++) {
    const Flightshuffle__Sched__MapSource *x = r->sources[i];
    if (x->location >= r->n_locations) {
      rc = fsh_error_set(err, EPROTO, "driver %s: map-outputs: source %zu names location %u of "
                         "%zu", n->uri, i, x->location, r->n_locations);
      break;
    }
    more->sources[more->n_sources++] = (fsh_reduce_source){
        .map_id = x->map_id, .attempt = x->attempt, .location = (int32_t)x->location,
        .rows = x->rows, .bytes = x->bytes, .checksum = x->checksum};
  }
  if (rc == ENOMEM) fsh_error_set(err, ENOMEM, "map-outputs: out of memory");
  if (rc == 0) {
    *version = r->version;
    *complete = r->complete;
  } else {
    fsh_reduce_task_reset(more);
  }
  flightshuffle__sched__map_outputs_reply__free_unpacked(r, &fsh_sched_pb_allocator);
  return rc;
}

void fsh_sched_notifier_free(fsh_sched_notifier *n) {
  if (!n) return;
  fsh_flight_client_close(n->client);
  fsh_free(n);
}
