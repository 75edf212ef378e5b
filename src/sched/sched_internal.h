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

/* ---- the driver (driver.c: membership; job*.c: jobs) ------------------- */

typedef struct driver_worker {
  uint64_t id;
  char *uri; /* owned */
  fsh_sched_worker_state state;
  int64_t last_ms; /* monotonic time of the last register / heartbeat */
  int running;     /* task attempts placed on it and not ended (map slots) */
  int running_reduce; /* incremental reduces: slots of their own */
  bool lost_handled; /* dead, and the jobs were told */
  int64_t suspect_ms; /* != 0: a task could not be sent to it (at that time);
                         no placements until its next heartbeat */
} driver_worker;

typedef struct sched_job sched_job;
typedef struct sched_client sched_client;

/* An attempt to stop on a worker (DoAction "cancel"): superseded, or its
 * job ended. */
typedef struct sched_cancel {
  char uri[320];
  uint64_t job_id;
  uint32_t stage_id;
  int32_t task, attempt;
  uint32_t merge; /* != 0: a pre-shuffle merge's (its TaskRef's merge id) */
} sched_cancel;

struct fsh_sched_driver {
  fsh_flight_server *server;
  int64_t timeout_ms;
  int64_t call_timeout_ms; /* of each call to a worker */
  int32_t keep_jobs; /* finished jobs kept (the newest) */
  bool log;
  char uri[320];
  char *auth_token; /* owned; sent to workers */
  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;
  pthread_cond_t job_cv;   /* a job ended */
  pthread_cond_t sched_cv; /* kick set */
  bool stop;
  bool checker_started, scheduler_started;
  pthread_t checker, scheduler;
  uint64_t next_id;
  int64_t n, cap;
  driver_worker *workers; /* by increasing id */
  /* jobs (job*.c, job_internal.h) */
  uint64_t next_job_id;
  sched_job *jobs;
  bool kick; /* the scheduler has something to do */
  sched_client *clients; /* the scheduler's and launchers' (list under mu) */
  sched_cancel *cancels; /* to send (the scheduler takes them) */
  int32_t n_cancels, cap_cancels;
};

/* The jobs (job*.c): the scheduler thread (job_scheduler.c); the job
 * actions (called on pool threads, they only take mu: job.c "submit",
 * job_attempts.c "task-done", job_map_outputs.c "map-outputs",
 * job_status.c "job-status"); the lineage hook of the membership (mu held,
 * job_lineage.c). */
void *fsh_sched_scheduler_main(void *arg);
FSH_NODISCARD int fsh_sched_action_submit(fsh_sched_driver *d, const fsh_flight_action *a,
                                          fsh_flight_result_list *out, fsh_error *err);
FSH_NODISCARD int fsh_sched_action_task_done(fsh_sched_driver *d, const fsh_flight_action *a,
                                             fsh_flight_result_list *out, fsh_error *err);
FSH_NODISCARD int fsh_sched_action_map_outputs(fsh_sched_driver *d, const fsh_flight_action *a,
                                              fsh_flight_result_list *out, fsh_error *err);
FSH_NODISCARD int fsh_sched_action_job_status(fsh_sched_driver *d, const fsh_flight_action *a,
                                              fsh_flight_result_list *out, fsh_error *err);
/* Alive worker w is dead from now on: logged ("worker <id> <uri> <how>
 * (<why>)"), and its running attempts and held outputs are lost for `why`
 * (fsh_sched_jobs_worker_lost). driver.c. mu held. */
void fsh_sched_worker_dead(fsh_sched_driver *d, driver_worker *w, const char *how,
                           const char *why);
/* A worker is gone (dead or restarted): its running attempts and the map
 * outputs it held are lost. mu held. */
void fsh_sched_jobs_worker_lost(fsh_sched_driver *d, uint64_t worker_id, const char *uri,
                                const char *why);
/* Frees every job and client (the scheduler has stopped). */
void fsh_sched_jobs_free(fsh_sched_driver *d);

#endif
