/* worker_internal.h -- what the worker's files share: the DoGet source of a
 * shuffle ticket (worker_get.c) and the DoPut sink that writes a map output
 * into the store (worker_put.c); worker.c serves them. */
#ifndef FSH_WORKER_INTERNAL_H
#define FSH_WORKER_INTERNAL_H

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"

/* A source streaming the map outputs a ticket names (formats in
 * shuffle.h). ENOENT if one is not held, EINVAL for a malformed ticket. */
FSH_NODISCARD int fsh_worker_do_get(fsh_shuffle_store *store, const uint8_t *ticket,
                                    int64_t size, fsh_flight_source **out, fsh_error *err);

/* A sink writing one map output, named by the DoPut descriptor, into the
 * store; its PutResult is the map output's metadata. EINVAL for a
 * descriptor that is not a shuffle map-output path. */
FSH_NODISCARD int fsh_worker_put_sink(fsh_shuffle_store *store, const fsh_flight_descriptor *d,
                                      fsh_flight_sink **out, fsh_error *err);

#endif
