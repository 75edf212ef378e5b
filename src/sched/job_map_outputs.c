/* job_map_outputs.c -- incremental reduces: the "map-outputs" action, by
 * which a running reduce asks for the current map outputs of its
 * partition (or its run of partitions) newer than the version it has seen. */
#include <errno.h>
#include <inttypes.h>

#include "sched/job_internal.h"

/* The answer for reduce task t (attempt `attempt`) of stage s: the current
 * outputs of its partition newer than since. mu held. */
static int map_outputs(sched_job *j, int s, int32_t t, int32_t attempt, uint64_t since,
                       fsh_flight_result_list *out, fsh_error *err) {
  jstage *st = &j->stages[s];
  jtask *k = &st->tasks[t];
  if (st->kind != KIND_REDUCE)
    return fsh_error_set(err, EINVAL, "job %" PRIu64 " stage %u is not a reduce stage", j->id,
                         st->id);
  if (j->state != FSH_SCHED_JOB_RUNNING || k->state != T_RUNNING || k->attempt != attempt)
    return fsh_error_set(err, ESTALE, "job %" PRIu64 " stage %u task %d attempt %d is superseded "
                         "(or the job is over): stop", j->id, st->id, t, attempt);
  const jstage *in = &j->stages[st->input];
  fsh_shuffle_sources src = {0};
  int rc = fsh_shuffle_meta_run_sources(in->meta, run_first(st, t), run_count(st, t), since,
                                        &src, err);
  if (rc) return rc;
  Flightshuffle__Sched__MapSource *xs = fsh_calloc((size_t)(src.n ? src.n : 1), sizeof *xs);
  Flightshuffle__Sched__MapSource **xp = fsh_calloc((size_t)(src.n ? src.n : 1), sizeof *xp);
  uint32_t n_ids = fsh_shuffle_meta_n_locations(in->meta);
  char **locs = fsh_calloc((size_t)(n_ids ? n_ids : 1), sizeof *locs);
  int32_t *loc_of = fsh_malloc((size_t)(n_ids ? n_ids : 1) * sizeof *loc_of);
  if (!xs || !xp || !locs || !loc_of) rc = fsh_error_set(err, ENOMEM, "out of memory");
  Flightshuffle__Sched__MapOutputsReply r = FLIGHTSHUFFLE__SCHED__MAP_OUTPUTS_REPLY__INIT;
  for (uint32_t i = 0; rc == 0 && i < n_ids; i++) loc_of[i] = -1;
  for (int64_t i = 0; rc == 0 && i < src.n; i++) {
    uint32_t l = src.location_ids[i];
    if (l >= n_ids) {
      rc = fsh_error_set(err, EPROTO, "map %" PRId64 " at an unknown location %u",
                         src.map_ids[i], l);
      break;
    }
    if (loc_of[l] < 0) {
      loc_of[l] = (int32_t)r.n_locations;
      locs[r.n_locations++] = (char *)fsh_shuffle_meta_location_uri(in->meta, l);
    }
    Flightshuffle__Sched__MapSource x = FLIGHTSHUFFLE__SCHED__MAP_SOURCE__INIT;
    x.map_id = src.map_ids[i];
    x.attempt = src.attempts[i];
    x.location = (uint32_t)loc_of[l];
    x.bytes = src.bytes[i]; /* approximate; rows and checksum unknown */
    xs[r.n_sources] = x;
    xp[r.n_sources] = &xs[r.n_sources];
    r.n_sources++;
  }
  if (rc == 0) {
    r.sources = xp;
    r.locations = locs;
    r.version = src.version;
    r.complete = src.complete;
    if (r.n_sources && j->first_reduce_ms < 0) j->first_reduce_ms = fsh_sched_now_ms();
    rc = fsh_sched_push_message(out, &r.base, "driver: map-outputs", err);
  }
  fsh_free(xs);
  fsh_free(xp);
  fsh_free(locs);
  fsh_free(loc_of);
  fsh_shuffle_sources_reset(&src);
  return rc;
}

int fsh_sched_action_map_outputs(fsh_sched_driver *d, const fsh_flight_action *a,
                                 fsh_flight_result_list *out, fsh_error *err) {
  static const uint8_t empty[1];
  Flightshuffle__Sched__MapOutputsRequest *m = flightshuffle__sched__map_outputs_request__unpack(
      &fsh_sched_pb_allocator, (size_t)a->body.size, a->body.data ? a->body.data : empty);
  if (!m) return fsh_error_set(err, EINVAL, "driver %s: map-outputs: malformed MapOutputsRequest "
                               "(%lld bytes)", d->uri, (long long)a->body.size);
  pthread_mutex_lock(&d->mu);
  sched_job *j;
  int s;
  int32_t task, attempt;
  int rc = fsh_job_resolve_ref(d, "map-outputs", m->ref.data, m->ref.len, &j, &s, &task, &attempt,
                               err);
  if (rc == 0) {
    rc = map_outputs(j, s, task, attempt, m->since_version, out, err);
    if (rc) rc = fsh_error_prefix(err, rc, "driver %s: map-outputs: ", d->uri);
  }
  pthread_mutex_unlock(&d->mu);
  flightshuffle__sched__map_outputs_request__free_unpacked(m, &fsh_sched_pb_allocator);
  return rc;
}
