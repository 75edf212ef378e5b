/* sched.h -- the distributed runtime's control plane (first increment): a
 * driver that keeps the membership of a cluster of workers, and the
 * worker-side heartbeat that joins a worker to a driver.
 *
 * The driver is a Flight server. Its DoActions, bodies and results being the
 * protobuf messages of proto/Sched.proto (package flightshuffle.sched):
 *  - "register", body Register{uri}: answers one RegisterReply{worker_id,
 *    heartbeat_interval_ms, replaced}. Ids start at 1 and are never reused
 *    within a driver run. A URI that is already registered (alive or dead)
 *    is treated as a RESTART of that worker: the old entry and its id are
 *    dropped (its heartbeats get NOT_FOUND from then on), a new id is
 *    issued and replaced = true. (One Flight server per host:port, so a
 *    second registration of a URI can only be the same worker again.)
 *  - "heartbeat", body Heartbeat{worker_id, uri}: answers one
 *    HeartbeatReply. NOT_FOUND when the driver does not know that id with
 *    that uri (e.g. the driver restarted) or has declared it dead: the
 *    worker must register again (it gets a new id).
 *  - "workers", empty body: answers one WorkerList -- every worker, alive or
 *    dead, by id, with its state and the age of its last heartbeat.
 * A body that does not decode, or misses a required field, is
 * INVALID_ARGUMENT with a message naming the action and what is wrong; an
 * unknown action is UNIMPLEMENTED. Handlers only take the driver's mutex
 * (never the network). A checker thread of the driver's own marks alive
 * workers dead once not heard from for heartbeat_timeout_ms.
 *
 * The heartbeat (fsh_sched_heartbeat_*) runs on a thread of its own in the
 * worker process: it registers, then heartbeats every
 * heartbeat_interval_ms (the driver's timeout / 3), registering again when
 * the driver answers NOT_FOUND. A driver that is unreachable is retried
 * (every interval, on a fresh channel) and never fatal.
 *
 * Errors follow arrow.h (0 or an errno-style code plus fsh_error). */
#ifndef FLIGHTSHUFFLE_SCHED_H
#define FLIGHTSHUFFLE_SCHED_H

#include <flightshuffle/flight.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fsh_sched_worker_state {
  FSH_SCHED_WORKER_UNKNOWN = 0,
  FSH_SCHED_WORKER_ALIVE = 1,
  FSH_SCHED_WORKER_DEAD = 2
} fsh_sched_worker_state;

const char *fsh_sched_worker_state_name(fsh_sched_worker_state s); /* "alive", "dead", ... */

typedef struct fsh_sched_worker_info {
  uint64_t id;
  char *uri; /* owned */
  fsh_sched_worker_state state;
  int64_t last_heartbeat_age_ms;
} fsh_sched_worker_info;

/* Workers by increasing id (owned; release with fsh_sched_worker_list_reset). */
typedef struct fsh_sched_worker_list {
  int64_t n;
  fsh_sched_worker_info *items;
  int64_t heartbeat_timeout_ms;
} fsh_sched_worker_list;

void fsh_sched_worker_list_reset(fsh_sched_worker_list *l);
/* Alive workers in l. */
int64_t fsh_sched_worker_list_alive(const fsh_sched_worker_list *l);

/* ---- the driver -------------------------------------------------------- */

typedef struct fsh_sched_driver_options {
  const char *listen;           /* "host:port"; port 0 picks a free one */
  int64_t heartbeat_timeout_ms; /* 0 = 10000; workers beat every third of it */
  const char *auth_token;       /* required of every caller when set */
  int n_threads;                /* server pool; 0 = 4 */
  bool log;                     /* membership changes on stderr */
} fsh_sched_driver_options;

typedef struct fsh_sched_driver fsh_sched_driver;

FSH_NODISCARD int fsh_sched_driver_start(const fsh_sched_driver_options *opts,
                                         fsh_sched_driver **out, fsh_error *err);
/* "grpc://host:port" (borrowed). */
const char *fsh_sched_driver_uri(const fsh_sched_driver *d);
/* A snapshot of the membership (what "workers" answers), into *out. */
FSH_NODISCARD int fsh_sched_driver_workers(fsh_sched_driver *d, fsh_sched_worker_list *out,
                                           fsh_error *err);
/* Stops the checker and the server (in-flight calls get deadline_ms), frees
 * everything. NULL accepted. */
void fsh_sched_driver_stop(fsh_sched_driver *d, int64_t deadline_ms);

/* The "workers" action against a driver at uri, decoded. */
FSH_NODISCARD int fsh_sched_list_workers(const char *driver_uri, const char *auth_token,
                                         int64_t timeout_ms, fsh_sched_worker_list *out,
                                         fsh_error *err);
/* Decodes a WorkerList message (what "workers" answers). EINVAL if malformed. */
FSH_NODISCARD int fsh_sched_worker_list_decode(const void *data, int64_t size,
                                               fsh_sched_worker_list *out, fsh_error *err);

/* ---- the worker's heartbeat -------------------------------------------- */

typedef struct fsh_sched_heartbeat_options {
  const char *driver_uri; /* grpc://host:port of the driver */
  const char *worker_uri; /* what the worker registers as */
  const char *auth_token; /* sent to the driver */
  int64_t retry_ms;       /* wait between attempts while the driver is
                             unreachable; 0 = 1000 */
  bool log;               /* registrations and driver trouble on stderr */
} fsh_sched_heartbeat_options;

typedef struct fsh_sched_heartbeat fsh_sched_heartbeat;

/* Starts the heartbeat thread (it registers first). Fails only on a bad
 * URI (EINVAL) or a lack of resources -- never because of the driver. */
FSH_NODISCARD int fsh_sched_heartbeat_start(const fsh_sched_heartbeat_options *opts,
                                            fsh_sched_heartbeat **out, fsh_error *err);
/* The id the driver gave at the last registration; 0 while not registered. */
uint64_t fsh_sched_heartbeat_worker_id(fsh_sched_heartbeat *h);
/* Registrations so far (the first one included). */
int64_t fsh_sched_heartbeat_registrations(fsh_sched_heartbeat *h);
/* Stops and joins the thread (an ongoing call ends within its deadline),
 * frees h. NULL accepted. */
void fsh_sched_heartbeat_stop(fsh_sched_heartbeat *h);

#ifdef __cplusplus
}
#endif
#endif
