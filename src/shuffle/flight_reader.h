/* flight_reader.h -- the flight backend's reader, shared by
 * flight_backend.c (the consumer: batches in source order, local sources
 * read in-process) and flight_fetch.c (fetch threads: one DoGet per peer,
 * blocks verified, decoded and queued per source under a bytes-in-flight
 * limit).
 *
 * Locking: one mutex and condition per reader guard every queue, the
 * consumer position and the jobs' states. A fetch thread waits before
 * queueing a batch for a source the consumer has not reached while the
 * bytes in flight exceed the limit; the source being consumed is always
 * admitted, and a job the consumer waits on that no thread has started
 * gets a thread of its own: so the reader never deadlocks. */
#ifndef FSH_FLIGHT_READER_H
#define FSH_FLIGHT_READER_H

#include <pthread.h>

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"

typedef struct fr_item {
  fsh_batch *batch;
  int64_t bytes;
  struct fr_item *next;
} fr_item;

typedef struct fr_slot {
  int64_t map_id;
  int32_t attempt;
  int job; /* index into jobs, or -1: local (in-process) */
  bool has_meta;
  int64_t rows, bytes;
  uint64_t checksum;
  fr_item *head, *tail; /* remote: batches fetched, not yet consumed */
  bool done;            /* remote: every batch of it queued */
} fr_slot;

typedef struct fr_job {
  char *uri;
  int64_t *slots; /* ascending slot indices */
  int64_t n_slots;
  bool started, finished;
  int rc;
  fsh_error err;
  fsh_flight_reader *rd; /* while streaming, for cancel */
} fr_job;

typedef struct fr_reader {
  struct fb_state *st;
  uint64_t shuffle_id;
  int32_t partition, n_partitions;
  fsh_schema *schema; /* the spec's (reference) */
  fr_slot *slots;
  int64_t n_slots;
  fr_job *jobs;
  int n_jobs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t cur; /* the slot being consumed */
  int64_t in_flight, max_in_flight;
  int next_job; /* jobs are taken in order by the pool */
  bool closing;
  pthread_t *threads;
  int n_threads;
  /* the local source being read */
  fsh_map_file *file;
  fsh_map_file_cursor *cursor;
  int failed;
} fr_reader;

/* Client for uri from the backend's cache (opened on first use). */
FSH_NODISCARD int fb_client(struct fb_state *st, const char *uri, fsh_flight_client **out,
                            fsh_error *err);

/* Runs job j of r: DoGet, verify, decode, queue. Sets the job's rc/err and
 * finished (under the lock) and wakes the consumer. */
void fr_run_job(fr_reader *r, int j);

/* A pool thread: takes unstarted jobs in order until none is left. */
void *fr_pool_thread(void *arg);

#endif
