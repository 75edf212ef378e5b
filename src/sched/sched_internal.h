/* sched_internal.h -- what the driver (driver.c) and the worker's heartbeat
 * (heartbeat.c) share: the protobuf-c allocator over fsh_malloc, a
 * monotonic clock, and a timed wait on a stop flag. Private to src/sched. */
#ifndef FSH_SCHED_INTERNAL_H
#define FSH_SCHED_INTERNAL_H

#include <pthread.h>

#include <flightshuffle/sched.h>

#include "Sched.pb-c.h"

/* protobuf-c allocations through fsh_malloc / fsh_free. */
extern ProtobufCAllocator fsh_sched_pb_allocator;

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t fsh_sched_now_ms(void);

/* Initialises cv on CLOCK_MONOTONIC (for fsh_sched_wait_ms). */
int fsh_sched_cond_init(pthread_cond_t *cv);

/* Waits on cv (mu held) until *stop or ms have passed. */
void fsh_sched_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, int64_t ms);

/* Packs m into a result of out; ENOMEM with a message on failure. */
FSH_NODISCARD int fsh_sched_push_message(fsh_flight_result_list *out, const ProtobufCMessage *m,
                                         const char *what, fsh_error *err);

#endif
