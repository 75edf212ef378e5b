/* flight_reader.h -- the flight backend's reader, shared by
 * flight_backend.c (the consumer: batches in source order, local sources
 * read in-process), flight_fetch.c (fetch jobs: one DoGet per peer,
 * blocks verified, decoded and queued per source under a bytes-in-flight
 * limit) and flight_pool.c (the backend's persistent fetch threads, which
 * run the jobs of every reader).
 *
 * Locking: one mutex and condition per reader guard every queue, the
 * consumer position and the jobs' finished/rc; the pool's mutex guards its
 * queue and each job's queue state (order: a reader's mutex, then the
 * pool's; a pool thread never holds the pool's while it takes a reader's).
 * A fetch job waits before queueing a batch for a source the consumer has
 * not reached while the bytes in flight exceed the limit; the source being
 * consumed is always admitted; a job the consumer waits on goes to the
 * front of the pool's queue, and the pool starts one more thread whenever
 * every thread it has waits for room while jobs are queued: so no reader
 * ever deadlocks.
 *
 * Same-host peers (flight_direct.c): a job first asks its worker where
 * the map outputs are ("locate"); when the worker runs on this host the
 * job reads the located ones straight from the worker's spill files and
 * memory images (memfds; VM images with process_vm_readv) and fetches
 * only the others with DoGet -- slots still
 * taken in ascending order (a DoGet per run of consecutive fetched ones),
 * so the rule above holds. */
#ifndef FSH_FLIGHT_READER_H
#define FSH_FLIGHT_READER_H

#include <pthread.h>
#include <stdatomic.h>

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"

typedef struct fr_item {
  fsh_batch *batch; /* NULL in a fetch's pending list: "slot done" */
  int64_t bytes;
  int64_t slot; /* in a fetch's pending list: the slot it is for */
  struct fr_item *next;
} fr_item;

/* One (map output, partition) to read: a reader of the run [first, first +
 * count) has count slots per source, source-major (slot i * count + k is
 * source i's partition first + k); a plain reader is the run of one. */
typedef struct fr_slot {
  int64_t map_id;
  int32_t attempt;
  int32_t partition;
  int job; /* index into jobs, or -1: local (in-process) */
  bool has_meta;
  int64_t rows, bytes;
  uint64_t checksum;
  fr_item *head, *tail; /* remote: batches fetched, not yet consumed */
  bool done;            /* remote: every batch of it queued */
  bool lost;            /* remote: its job failed and counts it lost (describe_loss) */
} fr_slot;

/* A job's state in the pool (under the pool's mutex). */
enum { FR_JOB_IDLE, FR_JOB_QUEUED, FR_JOB_RUNNING, FR_JOB_DONE };

typedef struct fr_job {
  char *uri;
  int64_t *slots; /* ascending slot indices: whole sources (count slots each) */
  int64_t n_slots;
  bool finished; /* under the reader's mutex, with rc and err */
  bool hurried;  /* the consumer asked the pool to hurry it (consumer only) */
  int rc;
  fsh_error err;
  bool gone; /* failed: the worker is unreachable, hung or broke off (with rc) */
  fsh_flight_reader *rd; /* while streaming, for cancel */
  /* the pool's (under its mutex) */
  struct fr_reader *owner;
  int index;
  int qstate;
  struct fr_job *q_prev, *q_next;
} fr_job;

typedef struct fr_reader {
  struct fb_state *st;
  uint64_t shuffle_id;
  int32_t partition, n_partitions; /* partition: the run's first */
  int32_t count;                   /* the run's partitions (1: open_reader) */
  char what[48];                   /* "partition 3" or "partitions [3, 5)": messages */
  fsh_schema *schema; /* the spec's (reference) */
  fr_slot *slots;
  int64_t n_slots;
  fr_job *jobs;
  int n_jobs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t cur; /* the slot being consumed */
  int64_t in_flight, max_in_flight;
  bool closing;
  bool waiting; /* the consumer waits on cv for a batch */
  int pool_running; /* jobs a pool thread runs (under the pool's mutex) */
  /* the local source being read (open for all its slots) */
  fsh_map_file *file;
  bool file_same; /* its schema message is schema_msg: cursors decode with dec */
  fsh_map_file_cursor *cursor;
  fsh_buffer *schema_msg; /* a local source's schema message found equal to
                             `schema` (reference): later local sources with
                             the same bytes skip the field-by-field compare */
  fsh_ipc_decoder *dec;   /* holding that schema, shared by the cursors of the
                             sources with those bytes (NULL: none yet, or the
                             schema has dictionaries: each file decodes) */
  int failed;
} fr_reader;

/* The backend's counters (fsh_shuffle_flight_stats). */
typedef struct fb_stats {
  atomic_llong local_sources, direct_sources, direct_bytes, fetched_sources, direct_fallbacks,
      locates;
} fb_stats;
fb_stats *fb_stats_of(struct fb_state *st);
/* Whether same-host direct reads are on (fsh_shuffle_flight_options). */
bool fb_direct_enabled(const struct fb_state *st);
/* Its minimum average bytes a non-empty (map output, partition) (< 0:
 * none; flight_fetch.c run_slots). */
int64_t fb_direct_min_bytes(const struct fb_state *st);
/* Whether uri's sources of the shuffle were found smaller than that (set:
 * record that they were; a bounded memory of recent ones). Readers whose
 * sources carry no sizes learn it from one locate answer per (peer,
 * shuffle) instead of paying a locate each. */
bool fb_small_sources(struct fb_state *st, const char *uri, uint64_t shuffle_id, bool set);
/* What the backend knows of uri's host: set != 0 records it (1 this
 * host, -1 another); answers 1, -1 or 0 (not known yet). */
int fb_same_host(struct fb_state *st, const char *uri, int set);

/* A job's locate answer (flight_direct.c). */
typedef struct fr_direct {
  fsh_flight_result_list res; /* the answer's bytes */
  fsh_locate_answer a;        /* decoded (into res) */
} fr_direct;
/* Asks job's worker where the job's map outputs are. *ok: the worker runs
 * on this host and answered (d then holds one entry per job slot);
 * otherwise nothing is read directly (a worker that cannot answer is not
 * an error here: its DoGet reports any real trouble). ENOMEM only. */
FSH_NODISCARD int fr_direct_locate(fr_reader *r, const fr_job *job, fr_direct *d, bool *ok,
                                   fsh_error *err);
void fr_direct_reset(fr_direct *d);
/* Opens entry i of d (path: what was opened, for messages): an fd of the
 * very file answered (device, inode, size checked; a memfd's identity
 * trailer names the map output and image answered), or -1 when it is gone
 * or another one (read it with DoGet), -2 when this process may not open
 * it (permissions, e.g. another user's worker: DoGet everything). */
int fr_direct_open(const fr_direct *d, int64_t i, char *path, size_t path_size);

/* Reads VM entries [k, k + g) of d (one source's partitions of a run,
 * all naming one image: else -1) with process_vm_readv: the identity
 * trailer, then the bytes their blocks span into *span (a buffer the
 * caller owns; NULL when they have no blocks; *span_lo the span's offset
 * in the image), then the trailer again. 0 only when both trailers name
 * the image located (the store clears the id before reusing or unmapping
 * the image, so bytes copied between them are its own); -1 when the image
 * is gone or another (a short copy, EFAULT, ESRCH, a changed trailer, out
 * of memory: read it with DoGet); -2 when this process may not read the
 * worker's memory (EPERM: ptrace restrictions -- DoGet this peer from now
 * on). path: what was read, for messages. */
int fr_direct_vm_read(const fr_direct *d, int64_t k, int64_t g, fsh_buffer **span,
                      int64_t *span_lo, char *path, size_t path_size);
/* A buffer of n bytes (contents undefined) for a span of a direct read
 * (a VM image's, or a memfd's or spill file's read with pread): from the
 * process-wide pool (the smallest mapping that holds n, unless it is more
 * than twice n + 64 KiB) or a new mapping; small ones from the heap. NULL:
 * out of memory. */
fsh_buffer *fr_span_take(int64_t n);
/* The span pool's mappings made and reuses so far, and bytes pooled now. */
void fr_spans_stats(int64_t *maps, int64_t *reused, int64_t *pooled_bytes);

/* Tests only: fr_test_vm_errno (when set) is asked before every
 * process_vm_readv of a VM read; non-zero is taken as that call's errno
 * (EPERM where a test runs as root). fr_test_after_vm_data (when set) is
 * called between a VM read's data copy and its second trailer check. */
extern int (*fr_test_vm_errno)(void);
extern void (*fr_test_after_vm_data)(void *ctx);
extern void *fr_test_after_vm_data_ctx;

/* Tests only: called (when set) by a job right after its worker answered
 * a locate, before anything located is opened -- where a test releases
 * or evicts map outputs to race the reader. */
extern void (*fr_test_after_locate)(void *ctx);
extern void *fr_test_after_locate_ctx;

/* Client for uri from the backend's cache (opened on first use). */
FSH_NODISCARD int fb_client(struct fb_state *st, const char *uri, fsh_flight_client **out,
                            fsh_error *err);

/* Runs job j of r: DoGet, verify, decode, queue. Sets the job's rc/err and
 * finished (under the lock) and wakes the consumer. */
void fr_run_job(fr_reader *r, int j);

/* ---- the fetch pool (flight_pool.c) ----------------------------------
 * Persistent threads per backend running fetch jobs of every reader, FIFO
 * but for the jobs a consumer waits on (to the front). Threads start as
 * jobs come, up to `base` while none is idle, up to `cap` for a consumer
 * waiting on a queued job, and beyond cap only when every thread waits for
 * room in a reader (the deadlock rule above); threads above base end after
 * a second idle. */
typedef struct fr_pool fr_pool;
FSH_NODISCARD int fr_pool_new(int base, int cap, fr_pool **out, fsh_error *err);
/* Ends every thread; no reader may be open. */
void fr_pool_free(fr_pool *p);
/* The backend's pool. */
fr_pool *fb_pool(struct fb_state *st);
/* Queues every job of r (none may be queued yet). EAGAIN when no thread
 * exists and none can be started. */
FSH_NODISCARD int fr_pool_submit(fr_pool *p, fr_reader *r, fsh_error *err);
/* The consumer waits on job (its reader's mutex held): a queued job goes
 * to the front, and gets a thread when none is idle (within cap). */
void fr_pool_hurry(fr_pool *p, fr_job *job);
/* A job is about to wait for room in its reader (reader's mutex held),
 * or done waiting (delta -1). delta +1 answers false when waiting could
 * stall queued jobs forever and no thread can be started: the caller
 * then admits its batch over the limit instead of waiting. */
bool fr_pool_waiting_for_room(fr_pool *p, int delta);
/* Takes r's queued jobs out of the queue and waits until none of its jobs
 * runs (r->closing set and running streams cancelled by the caller). */
void fr_pool_forget(fr_pool *p, fr_reader *r);
/* Tests: the threads the pool has now (for the no-leak check). */
int fr_pool_threads(fr_pool *p);

#endif
