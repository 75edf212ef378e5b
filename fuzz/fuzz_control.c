/* fuzz_control.c -- libFuzzer target: the control plane's decoders, which
 * read what other processes send (DoAction bodies and answers between the
 * driver and workers). The first input byte picks the decoder, the rest is
 * the message: ShuffleSources (the driver's incremental-metadata answer),
 * WorkerList, the map / reduce task bodies and answers, and the worker's
 * PutResult; a first byte 0xfe: a plan-fragment task body, 0xfd: its
 * answer. Errors are expected; crashes, leaks and out-of-bounds reads
 * are bugs. A decoded value is used the way a caller would (walked). */
#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>

#include <stddef.h>
#include <stdint.h>

static void walk_sources(const fsh_shuffle_sources *s) {
  uint64_t acc = 0;
  for (int64_t i = 0; i < s->n; i++) {
    acc += (uint64_t)s->map_ids[i] + (uint64_t)s->attempts[i] + (uint64_t)s->bytes[i];
    const char *uri = fsh_shuffle_sources_uri(s, s->location_ids[i]);
    if (uri) acc += (uint8_t)uri[0];
  }
  (void)acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *msg = data + 1;
  int64_t n = (int64_t)size - 1;
  fsh_error err;
  if (data[0] == 0xfe) { /* outside the % 7 cases: no older seed starts with it */
    fsh_fragment_task t;
    if (fsh_fragment_task_decode(msg, n, &t, &err) == 0) fsh_fragment_task_reset(&t);
    return 0;
  }
  if (data[0] == 0xfd) { /* likewise: a plan-fragment answer */
    fsh_map_task_result r = {0};
    fsh_fragment_read *reads = NULL;
    int32_t n_reads = 0;
    if (fsh_fragment_answer_decode(msg, n, &r, &reads, &n_reads, &err) == 0) {
      fsh_map_task_result_reset(&r);
      fsh_free(reads);
    }
    return 0;
  }
  switch (data[0] % 7) {
    case 0: {
      fsh_shuffle_sources s = {0};
      if (fsh_shuffle_sources_decode(msg, n, &s, &err) == 0) walk_sources(&s);
      fsh_shuffle_sources_reset(&s);
      break;
    }
    case 1: {
      fsh_sched_worker_list l = {0};
      if (fsh_sched_worker_list_decode(msg, n, &l, &err) == 0) fsh_sched_worker_list_reset(&l);
      break;
    }
    case 2: {
      fsh_map_task t;
      if (fsh_map_task_decode(msg, n, &t, &err) != 0) break; /* fixed size: nothing owned */
      break;
    }
    case 3: {
      fsh_map_task_result r = {0};
      if (fsh_map_task_result_decode(msg, n, &r, &err) == 0) fsh_map_task_result_reset(&r);
      break;
    }
    case 4: {
      fsh_reduce_task t = {0};
      if (fsh_reduce_task_decode(msg, n, &t, &err) == 0) fsh_reduce_task_reset(&t);
      break;
    }
    case 5: {
      fsh_reduce_task_result r;
      if (fsh_reduce_task_result_decode(msg, n, &r, &err) != 0) break;
      break;
    }
    case 6: {
      fsh_map_output o = {0};
      if (fsh_shuffle_put_result_decode(msg, n, &o, &err) == 0) fsh_map_output_reset(&o);
      break;
    }
  }
  return 0;
}
