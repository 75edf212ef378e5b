/* shuffle.h -- the generic shuffle-backend interface, the heart of
 * flightshuffle, and its backends.
 *
 * Every shuffling operator (repartition, gather, pre-shuffle merge, into
 * partitions, into batches, sort, limit) talks to a backend only through this
 * interface, and never knows which backend it holds:
 *
 *   map task:    w = open_writer(shuffle, map_id, attempt)
 *                w->write(w, partition, batch)     many times, any order
 *                w->close(w, &map_output)          rows/bytes/checksum per
 *                                                  partition + location
 *   driver:      keeps the fsh_map_output records (metadata only)
 *   reduce task: open_reader(shuffle, partition, map_outputs[]) -> a batch
 *                stream of that partition's rows from those map outputs
 *   cleanup:     release(shuffle)
 *
 * Backends:
 *  - memory: everything in one process, batches passed by reference; the
 *    embedded default for small jobs and the upper-bound baseline;
 *  - fs: one map-output file per map task in a shared directory (the
 *    stand-in for NFS or a distributed file system); readers open the files
 *    directly;
 *  - flight: map output stays on the worker that made it, in memory with
 *    spill to local disk, and reducers pull it with Flight DoGet (below).
 *
 * The map-output file format (fs and flight spill files) is an IPC stream --
 * schema, then self-contained blocks of (dictionary batches +) record
 * batches, each block holding rows of one partition, coalesced to about
 * target_block_bytes -- followed by a per-partition index (blocks' offsets,
 * lengths, rows, and an xxh3 checksum per partition). One file per map task,
 * never one per (map, partition). Any Arrow IPC stream reader can read the
 * file (it stops at the end-of-stream marker before the index).
 *
 * Errors follow arrow.h. A failed or aborted writer leaves nothing behind; a
 * map output is only visible once complete (temp file, then rename); a
 * checksum mismatch on read is an error naming the map output, partition and
 * location -- never wrong data. */
#ifndef FLIGHTSHUFFLE_SHUFFLE_H
#define FLIGHTSHUFFLE_SHUFFLE_H

#include <flightshuffle/ipc.h>

#include <stdatomic.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What every participant knows about a shuffle. */
typedef struct fsh_shuffle_spec {
  uint64_t shuffle_id;
  int32_t n_partitions;         /* >= 1 */
  fsh_schema *schema;           /* borrowed; every batch written has it */
  fsh_compression compression;  /* applied once, on the map side */
  int64_t target_block_bytes;   /* coalescing target; 0 = 4 MiB */
} fsh_shuffle_spec;

/* The metadata of one completed map output: what the driver keeps. */
typedef struct fsh_map_output {
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  char *location;        /* backend-specific, opaque to callers (a file
                            name in the fs directory, a worker URI, ...) */
  int32_t n_partitions;
  int64_t *rows;         /* [n_partitions] */
  int64_t *bytes;        /* [n_partitions] stored (possibly compressed) */
  uint64_t *checksums;   /* [n_partitions] xxh3 of the stored bytes */
} fsh_map_output;

void fsh_map_output_reset(fsh_map_output *m);
FSH_NODISCARD int fsh_map_output_copy(fsh_map_output *dst, const fsh_map_output *src);

/* A map task's writer. write() takes a reference on the batch (the caller
 * keeps its own); batches may come in any partition order. close() makes
 * the output complete and visible and fills *out; abort() discards
 * everything written. Both free the writer. */
typedef struct fsh_shuffle_writer fsh_shuffle_writer;
struct fsh_shuffle_writer {
  int (*write)(fsh_shuffle_writer *w, int32_t partition, fsh_batch *batch, fsh_error *err);
  int (*close)(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err);
  void (*abort)(fsh_shuffle_writer *w);
  void *state;
  /* Optional (NULL: not offered): row i of batch to partition
   * partition_of_row[i], stored as fsh_scatter + write of each part would
   * be; ENOTSUP (nothing written) when it cannot take this batch's schema.
   * Callers use fsh_shuffle_write_rows. */
  int (*write_rows)(fsh_shuffle_writer *w, fsh_batch *batch, const int32_t *partition_of_row,
                    fsh_error *err);
};

/* Writes row i of batch to partition partition_of_row[i]: through the
 * writer's write_rows when it has one (the map-file writers append the
 * rows to per-partition builders: no batch per part), else fsh_scatter
 * into parts[0, n_partitions) (scratch slots, NULL on entry and on
 * return) and a write of each. */
FSH_NODISCARD int fsh_shuffle_write_rows(fsh_shuffle_writer *w, fsh_batch *batch,
                                         const int32_t *partition_of_row, int32_t n_partitions,
                                         fsh_batch **parts, fsh_error *err);

/* A stream of (partition, batch) pairs: what a range reader yields.
 * get_next sets *out NULL at the end (and *partition to -1); release frees
 * the stream (also before the end). Order: any order between sources;
 * within one source its partitions in increasing order, a partition's
 * batches in write order. Batches of one partition from different sources
 * may come interleaved with other partitions. */
typedef struct fsh_range_stream {
  int (*get_next)(struct fsh_range_stream *s, int32_t *partition, fsh_batch **out,
                  fsh_error *err);
  void (*release)(struct fsh_range_stream *s);
  fsh_schema *schema; /* one reference held by the stream */
  void *private_data;
} fsh_range_stream;

typedef struct fsh_shuffle_backend fsh_shuffle_backend;
typedef struct fsh_shuffle_backend_ops {
  const char *name; /* "memory", "fs", "flight" */
  int (*open_writer)(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                     int32_t attempt, fsh_shuffle_writer **out, fsh_error *err);
  /* A stream of partition `partition`'s batches from the given map outputs
   * (in the order given; within one map output, in write order). */
  int (*open_reader)(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t partition,
                     const fsh_map_output *sources, int64_t n_sources, fsh_batch_stream *out,
                     fsh_error *err);
  /* Deletes everything of a shuffle (idempotent). */
  int (*release)(fsh_shuffle_backend *b, uint64_t shuffle_id, fsh_error *err);
  void (*destroy)(fsh_shuffle_backend *b);
  /* Optional (NULL: not offered; fsh_shuffle_open_range_reader then opens
   * one open_reader per partition). The run of partitions
   * [first_partition, first_partition + n_partitions_read) from the given
   * map outputs, each source opened once for the whole run. Arguments are
   * checked by the dispatcher. */
  int (*open_range_reader)(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                           int32_t first_partition, int32_t n_partitions_read,
                           const fsh_map_output *sources, int64_t n_sources,
                           struct fsh_range_stream *out, fsh_error *err);
} fsh_shuffle_backend_ops;

struct fsh_shuffle_backend {
  const fsh_shuffle_backend_ops *ops;
  void *state;
};

/* Thin dispatchers (validate arguments, then call the ops). */
FSH_NODISCARD int fsh_shuffle_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                          int64_t map_id, int32_t attempt,
                                          fsh_shuffle_writer **out, fsh_error *err);
FSH_NODISCARD int fsh_shuffle_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                          int32_t partition, const fsh_map_output *sources,
                                          int64_t n_sources, fsh_batch_stream *out,
                                          fsh_error *err);
/* The partitions [first_partition, first_partition + n_partitions_read)
 * of the given map outputs as one stream of (partition, batch) pairs
 * (order: fsh_range_stream). Checks as open_reader does, plus the run
 * (n_partitions_read >= 1, first + count <= spec->n_partitions). Sources'
 * rows, bytes and checksums are verified per partition exactly as
 * open_reader verifies them. Uses the backend's open_range_reader, else
 * one open_reader per partition, all opened here (the sources need not
 * outlive this call), read partition-major. With count 1 it reads what
 * open_reader reads. On error *out is left untouched. */
FSH_NODISCARD int fsh_shuffle_open_range_reader(fsh_shuffle_backend *b,
                                                const fsh_shuffle_spec *spec,
                                                int32_t first_partition,
                                                int32_t n_partitions_read,
                                                const fsh_map_output *sources, int64_t n_sources,
                                                fsh_range_stream *out, fsh_error *err);
FSH_NODISCARD int fsh_shuffle_release(fsh_shuffle_backend *b, uint64_t shuffle_id,
                                      fsh_error *err);
void fsh_shuffle_backend_destroy(fsh_shuffle_backend *b); /* NULL accepted */

/* The in-process backend. */
FSH_NODISCARD int fsh_shuffle_memory_new(fsh_shuffle_backend **out, fsh_error *err);
/* The shared-directory backend: map outputs are files in `dir` (created if
 * missing). Locations are file names inside dir, never paths: a location
 * that is not a plain name produced by this backend is refused. */
FSH_NODISCARD int fsh_shuffle_fs_new(const char *dir, fsh_shuffle_backend **out, fsh_error *err);

/* ---- the flight backend ------------------------------------------------ */

/* A worker's store: the map outputs of many shuffles, each a map-output
 * file image (the fs format). Images live in memory while the store's
 * memory budget allows; past it a map output goes to a spill file in one
 * of the spill directories (round-robin), written temp-then-rename -- a
 * writer that meets the budget mid-way first moves the oldest completed
 * map outputs still in memory to spill files (readers holding them go on
 * unharmed), and only when none is left moves what it wrote so far to its
 * own spill file and continues there. A spill directory that is full (ENOSPC)
 * hands over to the next one (what was written moves along); only when
 * every directory is full does the write fail, naming them. Spill files
 * are named
 * "fshspill-<tag>-s<shuffle>-m<map>-a<attempt>-<seq>.arrows"; a new store
 * removes every file of that pattern (and its ".tmp") from its spill
 * directories: the leftovers of a crashed earlier run. A spill directory
 * belongs to one worker. Thread-safe. */
typedef struct fsh_shuffle_store fsh_shuffle_store;
/* Where a store keeps its memory images (src/shuffle/store.c has the
 * details): MEMFD (the default), memfds that same-host readers open
 * through /proc; VM, anonymous memory (huge pages) that they copy with
 * process_vm_readv -- cheaper per byte for shuffles that reuse a warm
 * pool, but 1.6-1.8x slower for the operators' sort and join on a VM that
 * gives freed huge pages back to its host (bench/shuffle/PROFILE_VM.md,
 * "Default"), hence not the default; PRIVATE, fsh_malloc'd memory nobody
 * else reads (same-host readers use DoGet). */
typedef enum fsh_store_images {
  FSH_STORE_IMAGES_MEMFD = 0,
  FSH_STORE_IMAGES_VM = 1,
  FSH_STORE_IMAGES_PRIVATE = 2,
  FSH_STORE_IMAGES_VM_4K = 3 /* VM on 4 KiB pages (no MADV_HUGEPAGE): to measure */
} fsh_store_images;
/* "vm", "memfd", "private", "vm-4k" (the worker's --images): false if
 * name is none of those. */
bool fsh_store_images_parse(const char *name, fsh_store_images *out);
typedef struct fsh_shuffle_store_options {
  const char *const *spill_dirs; /* created if missing; may be none */
  int n_spill_dirs;
  int64_t memory_limit; /* bytes of images kept in memory (0: all spill) */
  const char *name;     /* for messages (the worker's URI); NULL = "store" */
  bool private_images;  /* images = PRIVATE (kept for older callers) */
  fsh_store_images images; /* default (0) VM */
} fsh_shuffle_store_options;

typedef struct fsh_shuffle_store_stats {
  int64_t map_outputs;    /* held, in memory or spilled */
  int64_t memory_bytes;   /* charged to the memory budget */
  int64_t spilled_outputs;
  int64_t spilled_bytes;  /* spill file sizes */
} fsh_shuffle_store_stats;

FSH_NODISCARD int fsh_shuffle_store_new(const fsh_shuffle_store_options *opts,
                                        fsh_shuffle_store **out, fsh_error *err);
/* Frees the store: its memory and its spill files. NULL accepted. */
void fsh_shuffle_store_free(fsh_shuffle_store *s);
/* Removes a shuffle's map outputs: memory and spill files (idempotent). */
FSH_NODISCARD int fsh_shuffle_store_release(fsh_shuffle_store *s, uint64_t shuffle_id,
                                            fsh_error *err);
void fsh_shuffle_store_get_stats(fsh_shuffle_store *s, fsh_shuffle_store_stats *out);

/* A worker: a store behind a Flight server (the `flightshuffle worker`
 * process, or in-process for tests and embedding). Its Flight surface:
 *  - DoGet of a shuffle ticket (below): the partition's stored blocks of
 *    each named map output, streamed as stored, without decoding;
 *  - ListFlights: one FlightInfo per (shuffle, partition) held, descriptor
 *    PATH ["shuffle", "<id>", "partition", "<p>"], total_records,
 *    total_bytes (stored), one endpoint whose ticket names all its map
 *    outputs of that partition;
 *  - DoAction "release", body the shuffle id in ASCII decimal ("7"):
 *    removes the shuffle (from the store and, with an fs_dir, its files
 *    there); one result, a line of text saying what went;
 *  - DoAction "map-synthetic" / "reduce-verify": starts a map / reduce
 *    task of the synthetic shuffle on this worker (bodies and answers in
 *    the "tasks" section below) on a thread of the worker's own -- never on
 *    a Flight pool thread, which must not wait on the network (two workers
 *    reducing from each other would deadlock) -- and answers at once with
 *    the task's id (u64 LE); "task-wait", body that id: answers at once
 *    one result, a status byte 0 (running) or 1 (done) followed, when
 *    done, by the task's answer; a failed task's error is the action's
 *    error -- but a failed task that reported map outputs lost
 *    (fsh_worker_task_report_lost) answers status byte 2 followed by
 *    "FSTF", u8 version 1, 3 zero bytes, i32 error code, u32 message
 *    length (<= 4096), the message, u32 n, then n x (u64 shuffle_id, i64
 *    map_id, i32 attempt, u8 unreachable, 3 zero bytes, u32 uri length,
 *    the uri; empty: this worker) -- fsh_task_failure_decode; a finished
 *    task is answered once, then forgotten;
 *    "task": the same tasks in an envelope that carries an opaque tag for
 *    the scheduler: body "FSTE", u8 version 1, 3 zero bytes, u32 kind
 *    length K (1 .. 64), u32 tag length T (0 .. 4096), the kind
 *    ("map-synthetic", "reduce-verify" or "reduce-then-map"), the tag,
 *    then the kind's body.
 *    Answers the task id like the kind's own action. When such a task
 *    ends, the worker calls on_task_done (options) on the task's thread;
 *    if that says the outcome was delivered, the task is forgotten (a
 *    later "task-wait" of it is NOT_FOUND), else it waits for "task-wait";
 *    "locate", body a shuffle ticket: where its map outputs' blocks of
 *    the partition are -- spill file names in this worker's spill
 *    directories, memory images' memfds, offsets and checksums -- for a
 *    reader on the same host, which then reads them without a DoGet (the
 *    flight backend below; answer format in src/shuffle/shuffle_internal.h);
 *    "stats": one result, a line of text
 *    "map_outputs=N memory_bytes=N spilled_outputs=N spilled_bytes=N
 *    pooled_memfds=N pooled_bytes=N" (the store's fsh_shuffle_store_stats,
 *    then the released memory images' memfds its pool keeps for reuse and
 *    their bytes: charged to the budget, not in memory_bytes; emptied
 *    after ~30 s unused). A malformed body is
 *    INVALID_ARGUMENT naming what is wrong; a task that fails answers its
 *    error prefixed with the task ("map task 3 attempt 0 of shuffle 1 on
 *    worker grpc://...: ...");
 *  - DoPut (writing map outputs into a standalone worker): descriptor
 *    PATH ["shuffle", "<id>", "map", "<m>", "attempt", "<a>", "partitions",
 *    "<n>", "compression", "none"|"lz4"|"zstd"], then the schema and
 *    record batches, each record batch's app_metadata its partition id as
 *    4 bytes, little-endian int32. The map output is complete when the
 *    client half-closes; the PutResult's app_metadata is its metadata
 *    (fsh_shuffle_put_result_decode). A failed or cancelled DoPut leaves
 *    nothing.
 *
 * Wire formats (all integers little-endian):
 *  ticket:  "FSHT", u8 version 1, u8 flags, 2 zero bytes, u64 shuffle_id,
 *           i32 partition, u32 n, then n x (i64 map_id, i32 attempt,
 *           u32 0). Never a path: the server looks map outputs up in its
 *           store by (shuffle, map, attempt) only. flags: 0 (the tickets
 *           ListFlights hands out), or bit 0 = bundles (below), bit 1 =
 *           the client verifies every block (both: our reader).
 *           Version 2 names a run of partitions: the same with u8 version
 *           2 and, before the map outputs, u32 count (>= 1), u32 0: the
 *           partitions [partition, partition + count), which must lie
 *           within every named map output's partitions.
 *  DoGet stream: the schema message, then for each named map output (in
 *           ticket order; for a run, each of its partitions in increasing
 *           order) its stored blocks of the partition, each block's
 *           messages as stored (dictionary batches, record batch). The
 *           first message of each block carries app_metadata (88 bytes):
 *           "FSHB", u8 version 1, 3 zero bytes, i64 map_id, i32 attempt,
 *           i32 partition, i64 block index, i64 n_blocks (of the
 *           partition in that map output), i64 block length (framed
 *           bytes: for each message FFFFFFFF, u32 metadata length, the
 *           metadata, the body), i64 block rows, u64 block checksum
 *           (xxh3-64 of those framed bytes), u64 partition checksum (of
 *           all its blocks, in order), i64 partition rows, i64 partition
 *           bytes. A map output with no rows in the partition sends
 *           nothing. No metadata-only messages: any Flight client reads
 *           the stream as a plain record-batch stream. The worker checks
 *           each block's checksum before sending it (a damaged spill file
 *           is an error naming it, never rows to a client that does not
 *           check), except a memory image's blocks when the ticket says
 *           the client verifies (flag bit 1); our reader checks every
 *           block (damage in transit, or in memory). A
 *           With the bundle flag, whole blocks of at most 64 KiB go out
 *           gathered (across the ticket's map outputs, in order) into one
 *           FlightData of about 1 MiB that carries only app_metadata:
 *           "FSHU", u8 version 1, 3 zero bytes, u32 n_blocks, u32 0, then
 *           n_blocks x (the 88-byte block header above, the block's framed
 *           bytes) -- one message instead of one per block, which is what
 *           a shuffle of many tiny blocks (1000 x 1000) pays for. Larger
 *           blocks still go message by message. The reader verifies each
 *           bundled block's checksum before parsing it. A
 *           failed fetch names what is lost, for humans in its error
 *           ("worker <uri>: lost map outputs [map/attempt 1/0 3/0] (why):
 *           ...") and for the scheduler through fsh_worker_task_report_lost
 *           when it runs in a worker task -- every map output wanted from
 *           that worker when the worker is unreachable, hung or broke off
 *           the stream, otherwise the one the worker's error names, or else
 *           those not fully read.
 *  PutResult: "FSHP", u8 version 1, 3 zero bytes, u64 shuffle_id,
 *           i64 map_id, i32 attempt, i32 n_partitions, then n_partitions
 *           x (i64 rows, i64 bytes, u64 checksum). */
typedef struct fsh_shuffle_worker fsh_shuffle_worker;
/* Called on a task's own thread when a "task" action's task ends: its tag,
 * rc (0 or the task's error code), error (its message when rc != 0) and
 * answer (when rc == 0); the inputs it found lost are
 * fsh_worker_task_lost's. True when the outcome reached whoever waits for
 * it (the task is then forgotten). May block on the network. */
typedef bool (*fsh_worker_task_done_fn)(void *ctx, const uint8_t *tag, int64_t tag_size, int rc,
                                        const char *error, const uint8_t *answer,
                                        int64_t answer_size);
/* Called on an incremental reduce task's thread (a "task" action whose
 * reduce-verify body has the incremental flag) for the map outputs that
 * are new since *version: fills *more (sources and locations, owned: the
 * caller resets it), advances *version, and sets *complete once no more
 * will come. Its error ends the task. May block on the network. */
struct fsh_reduce_task;
typedef int (*fsh_worker_more_sources_fn)(void *ctx, const uint8_t *tag, int64_t tag_size,
                                          uint64_t *version, struct fsh_reduce_task *more,
                                          bool *complete, fsh_error *err);
/* The backend a task runs through (tasks below). */
typedef enum fsh_task_backend {
  FSH_TASK_BACKEND_MEMORY = 0, /* in-process only */
  FSH_TASK_BACKEND_FS = 1,     /* the worker's --fs-dir */
  FSH_TASK_BACKEND_FLIGHT = 2  /* the worker's store + DoGet from peers */
} fsh_task_backend;

/* A task kind a worker runs besides its own (the synthetic ones): a layer
 * above the shuffle registers it (e.g. exec's "plan-fragment"), and the
 * "task" envelope and the DoAction of that name accept it. decode runs on
 * the Flight call's thread (must not block): checks body[0, size), sets
 * *state (the decoded task, released by free_state) and *backend (the
 * worker backend the task writes and reads through); EINVAL naming what
 * is wrong becomes INVALID_ARGUMENT at once. run runs on the task's own
 * thread with that backend and sets *answer (a new reference); it should
 * check fsh_worker_task_cancel_flag() between batches and end with
 * ECANCELED once it is set. */
typedef struct fsh_worker_task_kind {
  const char *name; /* 1 .. 64 bytes */
  int (*decode)(void *ctx, const uint8_t *body, int64_t size, void **state,
                fsh_task_backend *backend, fsh_error *err);
  int (*run)(void *ctx, void *state, fsh_shuffle_backend *b, fsh_buffer **answer,
             fsh_error *err);
  void (*free_state)(void *state);
  void *ctx;
} fsh_worker_task_kind;

/* On a worker task's thread (a task kind's run): the task's cancel flag,
 * set once the worker is asked to stop it (the "cancel" action: a
 * superseded attempt, or its job ended); it lives as long as the task.
 * NULL on any other thread. */
const atomic_bool *fsh_worker_task_cancel_flag(void);

/* A map output a worker task found lost (it could not read it): held by
 * worker uri ("" = the task's own worker), gone with its worker when
 * unreachable (the worker did not answer: unreachable, hung, broke the
 * stream off), else the worker answered that it is not held or unreadable. */
typedef struct fsh_lost_output {
  char *uri; /* owned by the task */
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  bool unreachable;
} fsh_lost_output;

/* On a worker task's thread: records that the task found that map output
 * lost (the flight backend's reader does, beside its error text; a merge
 * for a missing part). uri NULL: the task's own worker. Recorded once per
 * output, at most FSH_WORKER_TASK_MAX_LOST of them (a loss past that is
 * found again by the retry); nothing on any other thread, or out of
 * memory. */
#define FSH_WORKER_TASK_MAX_LOST 4096
void fsh_worker_task_report_lost(const char *uri, uint64_t shuffle_id, int64_t map_id,
                                 int32_t attempt, bool unreachable);
/* On a worker task's thread (e.g. in on_task_done): the map outputs it
 * reported lost so far, borrowed until the task ends; 0 elsewhere. */
int64_t fsh_worker_task_lost(const fsh_lost_output **out);
/* The body after "task-wait"'s status byte 2 (a failed task that reported
 * map outputs lost; format above): *rc and *message its error, *lost
 * (owned, fsh_lost_outputs_free) the outputs; an empty uri becomes
 * self_uri (the worker asked). EINVAL if malformed, ENOMEM. */
FSH_NODISCARD int fsh_task_failure_decode(const uint8_t *data, int64_t size,
                                          const char *self_uri, int *rc, fsh_error *message,
                                          fsh_lost_output **lost, int64_t *n_lost,
                                          fsh_error *err);
void fsh_lost_outputs_free(fsh_lost_output *lost, int64_t n);

typedef struct fsh_shuffle_worker_options {
  const char *listen; /* "host:port"; port 0 picks a free one */
  const char *const *spill_dirs;
  int n_spill_dirs;
  int64_t memory_limit;
  const char *auth_token; /* required of every caller when set */
  int n_threads;          /* server pool; 0 = 4 */
  const char *fs_dir;     /* the shared directory of fs-backend tasks;
                             NULL: this worker runs no fs task */
  fsh_worker_task_done_fn on_task_done; /* NULL: "task" tasks wait for task-wait */
  void *on_task_done_ctx;
  fsh_worker_more_sources_fn on_more_sources; /* NULL: incremental reduces are refused */
  void *on_more_sources_ctx;
  const fsh_worker_task_kind *task_kinds; /* [n_task_kinds], copied at start */
  int n_task_kinds;
  bool no_direct_reads; /* its flight tasks read same-host peers via DoGet too */
  fsh_store_images images; /* its store's memory images (default VM) */
} fsh_shuffle_worker_options;

FSH_NODISCARD int fsh_shuffle_worker_start(const fsh_shuffle_worker_options *opts,
                                           fsh_shuffle_worker **out, fsh_error *err);
/* "grpc://host:port" (borrowed): the location of its map outputs. */
const char *fsh_shuffle_worker_uri(const fsh_shuffle_worker *w);
fsh_shuffle_store *fsh_shuffle_worker_store(fsh_shuffle_worker *w); /* borrowed */
/* Stops the server (in-flight calls get deadline_ms), then frees the store
 * (its memory and spill files). NULL accepted. */
void fsh_shuffle_worker_stop(fsh_shuffle_worker *w, int64_t deadline_ms);

/* Decodes a worker's PutResult into *out (location NULL). EINVAL if
 * malformed. */
FSH_NODISCARD int fsh_shuffle_put_result_decode(const void *data, int64_t size,
                                                fsh_map_output *out, fsh_error *err);

/* The flight backend. Writers write into the local worker's store and the
 * location of their map outputs is its URI. Readers group the sources by
 * location: sources in the local store are read in-process (no Flight);
 * for every other worker ONE DoAction "locate" asks where they are and,
 * when that worker runs on this host (same boot id, host name, pid and
 * mount namespaces), the reader reads them directly: spill files in the
 * worker's spill directories (by plain name; nothing else is opened) and
 * memory images (memfds, opened through /proc/<pid>/fd); each file is
 * checked to be the one located (device, inode, size) and every block
 * against its checksum, as DoGet's. What cannot be read so (another host,
 * a private image, released or moved meanwhile) goes through ONE DoGet
 * per worker carrying all the map outputs wanted from it. The fetches of
 * every reader of a backend run on its one pool of persistent threads
 * (2 x max_parallel_fetches of them while readers wait, more only to keep
 * a reader from stalling), with at most max_bytes_in_flight of decoded
 * batches waiting per reader (beyond the one source being consumed). Every block is verified against its checksum before it
 * is decoded: corruption is EIO naming the worker, map output and
 * partition, never wrong data. Batches come in the order of the sources.
 * release() releases the shuffle in the local store and sends DoAction
 * "release" to every peer. */
typedef struct fsh_shuffle_flight_options {
  fsh_shuffle_worker *local;      /* borrowed; NULL: a reader-only backend */
  const char *const *peers;       /* worker URIs that release() reaches */
  int n_peers;
  const char *auth_token;         /* sent to peers */
  int max_parallel_fetches;       /* 0 = 4 */
  int64_t max_bytes_in_flight;    /* 0 = 64 MiB */
  int64_t timeout_ms;             /* per DoGet; 0 = none */
  bool no_direct_reads;           /* same-host peers through DoGet too */
  /* Direct reads only for a peer whose non-empty (map output, partition)s
   * average at least this many stored bytes (by the map outputs' metadata;
   * sources without it count as large until a locate answer says): a
   * partition is at least one block, and smaller blocks are cheaper through
   * one bundled DoGet than opened and read one by one -- counted per
   * partition, not per source, so that a range reader's run of small
   * partitions is not taken for one large source. 0 = 16 KiB; < 0: no
   * minimum. */
  int64_t direct_min_bytes;
} fsh_shuffle_flight_options;

FSH_NODISCARD int fsh_shuffle_flight_new(const fsh_shuffle_flight_options *opts,
                                         fsh_shuffle_backend **out, fsh_error *err);

/* What a flight backend's readers did so far (counts of sources: one map
 * output for one partition). */
typedef struct fsh_shuffle_flight_stats {
  int64_t local_sources;    /* read in-process from the local store */
  int64_t direct_sources;   /* read directly from a same-host worker */
  int64_t direct_bytes;     /* their stored bytes read */
  int64_t fetched_sources;  /* asked for with DoGet */
  int64_t direct_fallbacks; /* located, but gone or changed when opened: DoGet */
  int64_t locates;          /* locate actions sent */
} fsh_shuffle_flight_stats;
/* Zeros for a backend that is not a flight one. */
void fsh_shuffle_flight_get_stats(fsh_shuffle_backend *b, fsh_shuffle_flight_stats *out);

/* ---- tasks of the synthetic shuffle (the runtime's seed) ----------------
 *
 * A map task generates its share of the synthetic table (workloads.h:
 * rows [first_row, first_row + rows) = batches first_row / batch_rows, ...
 * of batch_rows rows, the last one cut short), hash-partitions it on the
 * key (fsh_hash_columns seed 0 + fsh_partition_hash), scatters it and
 * writes it through a backend's writer. A reduce task reads one partition
 * (or a run of them) of every map output through the backend's reader and
 * consumes it. Both
 * sides compute an order-independent checksum of the rows (below), so
 * that per partition: sum over maps of the map-side row checksums ==
 * the reduce-side checksum, and the rows likewise. The same functions run
 * in-process (memory backend) and on workers (DoAction, formats below). */

/* fsh_task_backend: see the worker section above. */

const char *fsh_task_backend_name(fsh_task_backend b);
/* "memory", "fs", "flight"; EINVAL otherwise. */
FSH_NODISCARD int fsh_task_backend_parse(const char *s, fsh_task_backend *out, fsh_error *err);

/* The row checksum of the synthetic schema (key int64, value float64,
 * name utf8): per row h = XXH3_64bits of a fixed 56-byte record:
 *   [0, 8)   the key (LE)
 *   [8, 16)  the value's 8 bytes (LE) if valid, else zeros
 *   [16, 48) the name's bytes, zero-padded, if valid and at most 32 bytes;
 *            a longer name: XXH3_64bits(name) (LE) then 24 zeros; a null
 *            name: zeros
 *   [48, 56) the trailer, LE: flags | name length << 8 (length 0 when the
 *            name is null); flags bit 0 value valid, bit 1 name valid,
 *            bit 2 name longer than 32 bytes
 * (one length for every row: XXH3's fixed-length path, computed straight
 * from the column buffers). The checksum of a set of rows is the sum of
 * their h (mod 2^64), so it is independent of their order and of how they
 * are batched, and sums over partitions and map tasks add up.
 * Adds each row's h to sums[part_of_row[i]] (sums[0] when part_of_row is
 * NULL). b must have the synthetic schema's columns. */
void fsh_task_row_checksums(const fsh_batch *b, const int32_t *part_of_row, uint64_t *sums);

typedef struct fsh_map_task {
  uint64_t shuffle_id;
  int64_t map_id;        /* >= 0 */
  int32_t attempt;       /* >= 0 */
  int32_t n_partitions;  /* 1 .. 2^24 */
  int64_t first_row;     /* >= 0, a multiple of batch_rows */
  int64_t rows;          /* >= 0 */
  int32_t batch_rows;    /* 1 .. 2^24 */
  uint64_t seed;         /* of the synthetic table (fsh_synthetic_options) */
  fsh_compression compression;
  fsh_task_backend backend;
} fsh_map_task;

typedef struct fsh_map_task_result {
  fsh_map_output output;   /* owned; location set */
  uint64_t *row_checksums; /* [output.n_partitions], owned */
  int64_t input_rows;      /* rows generated */
  int64_t input_bytes;     /* fsh_shuffle_batch_bytes of the generated batches */
  int64_t nanos;           /* the task's wall time */
} fsh_map_task_result;

void fsh_map_task_result_reset(fsh_map_task_result *r); /* frees, zeroes */
/* Runs t through b's writer (b's kind must be t->backend's). On error
 * nothing is kept (the writer is aborted) and *out is untouched. */
FSH_NODISCARD int fsh_map_task_run(fsh_shuffle_backend *b, const fsh_map_task *t,
                                   fsh_map_task_result *out, fsh_error *err);

/* One map output as a reduce task sees it: only its partition's numbers
 * (a task reading one partition; a run's are in fsh_reduce_task.parts). */
typedef struct fsh_reduce_source {
  int64_t map_id;
  int32_t attempt;
  int32_t location;  /* index into fsh_reduce_task.locations */
  int64_t rows, bytes;
  uint64_t checksum; /* the stored-bytes checksum (fsh_map_output) */
} fsh_reduce_source;

/* One map output's numbers of one partition of a run. */
typedef struct fsh_reduce_part {
  int64_t rows, bytes;
  uint64_t checksum;
} fsh_reduce_part;

/* A reduce task reads partition `partition`, or -- a coalesced reduce
 * (Spark AQE's partition coalescing) -- the contiguous run [partition,
 * partition + count) of partitions: partitions stay the unit of the data
 * and of the verification (its answer has rows and checksum per
 * partition), the task is the unit of scheduling. */
typedef struct fsh_reduce_task {
  uint64_t shuffle_id;
  int32_t partition;     /* the first one read */
  int32_t count;         /* partitions read (0 is read as 1); partition + count <= n_partitions */
  int32_t n_partitions;
  fsh_task_backend backend;
  /* more sources come from the scheduler as map outputs appear (the
   * worker's on_more_sources; "task" action only) until it says complete */
  bool incremental;
  /* the sources' rows / checksum are not known and bytes only roughly (a
   * scheduler's compact metadata): the reader skips the comparison with
   * the map side's record (every block's own checksum is still verified) */
  bool sizes_unknown;
  int64_t n_sources;
  fsh_reduce_source *sources; /* owned when decoded */
  /* count > 1 and not sizes_unknown: [n_sources x count], source i's
   * numbers of partition partition + k at parts[i * count + k] (the
   * sources' own rows / bytes / checksum are then not used); else NULL.
   * Owned when decoded. */
  fsh_reduce_part *parts;
  int32_t n_locations;
  char **locations;           /* owned when decoded */
} fsh_reduce_task;

void fsh_reduce_task_reset(fsh_reduce_task *t); /* frees a decoded task */
/* The partitions t reads: t->count, or 1 when it is 0. */
static inline int32_t fsh_reduce_task_count(const fsh_reduce_task *t) {
  return t->count > 1 ? t->count : 1;
}

typedef struct fsh_reduce_task_result {
  int64_t rows;       /* of the whole run */
  int64_t bytes;      /* fsh_shuffle_batch_bytes of the batches read */
  uint64_t checksum;  /* fsh_task_row_checksums of every row read */
  int64_t batches;
  int64_t nanos;
  /* a run (count > 1): rows and row checksum per partition of it
   * ([k]: partition first + k), owned (fsh_reduce_task_result_reset);
   * count 0 and NULL for a task of one partition (the totals are its) */
  int32_t count;
  int64_t *part_rows;
  uint64_t *part_checksums;
} fsh_reduce_task_result;

void fsh_reduce_task_result_reset(fsh_reduce_task_result *r); /* frees, zeroes */
/* Rows / row checksum read of partition first + k of the task's run. */
static inline int64_t fsh_reduce_result_rows(const fsh_reduce_task_result *r, int32_t k) {
  return r->count > 1 ? r->part_rows[k] : r->rows;
}
static inline uint64_t fsh_reduce_result_checksum(const fsh_reduce_task_result *r, int32_t k) {
  return r->count > 1 ? r->part_checksums[k] : r->checksum;
}

/* Reads the partitions of t's run of every source through b's reader and
 * consumes every batch; on error *out is untouched. */
FSH_NODISCARD int fsh_reduce_task_run(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                                      fsh_reduce_task_result *out, fsh_error *err);
/* Adds r (a result of the same run: a round of an incremental reduce)
 * into total (whose arrays are made on the first add of a run). ENOMEM. */
FSH_NODISCARD int fsh_reduce_task_result_add(fsh_reduce_task_result *total,
                                             const fsh_reduce_task_result *r, fsh_error *err);

/* t's sources as the map outputs a reader of t's partitions takes (only
 * [t->partition, t->partition + count) of their per-partition arrays is
 * meaningful; locations borrowed from t): one fsh_malloc'd block (*out),
 * released with fsh_free. EINVAL for a malformed task. */
FSH_NODISCARD int fsh_reduce_task_map_outputs(const fsh_reduce_task *t, fsh_map_output **out,
                                              fsh_error *err);

/* Reads t's partitions of every source through b's reader and calls
 * fn(ctx, batch) for each batch (borrowed) until fn fails. */
FSH_NODISCARD int fsh_reduce_task_each(fsh_shuffle_backend *b, const fsh_reduce_task *t,
                                       int (*fn)(void *ctx, fsh_batch *batch, fsh_error *err),
                                       void *ctx, fsh_error *err);

/* "reduce-then-map": reads one partition of a shuffle (like a reduce task)
 * and hash-partitions its rows on another key column into a second
 * shuffle (like a map task, map id = the partition read): the second
 * stage of a two-shuffle job. Its answer is a map task's (row checksums
 * per output partition; input_rows / input_bytes: what it read). */
typedef struct fsh_reduce_map_task {
  fsh_reduce_task in;      /* the partition to read */
  uint64_t out_shuffle_id;
  int64_t map_id;          /* its output's map id (>= 0) */
  int32_t attempt;         /* >= 0 */
  int32_t out_partitions;  /* 1 .. 2^24 */
  int32_t key_column;      /* 0 .. 2 of the synthetic schema */
  fsh_compression compression;
} fsh_reduce_map_task;

void fsh_reduce_map_task_reset(fsh_reduce_map_task *t); /* frees a decoded task */
FSH_NODISCARD int fsh_reduce_map_task_run(fsh_shuffle_backend *b, const fsh_reduce_map_task *t,
                                          fsh_map_task_result *out, fsh_error *err);
/* reduce-then-map body: "FSRM", u8 version 1, 3 zero bytes, u64
 * out_shuffle_id, i64 map_id, i32 attempt, i32 out_partitions, i32
 * key_column, u8 compression, 3 zero bytes, then a reduce-verify body (the
 * partition to read; not incremental). Answer: the map-synthetic answer. */
FSH_NODISCARD int fsh_reduce_map_task_encode(const fsh_reduce_map_task *t, fsh_buffer **out,
                                             fsh_error *err);
FSH_NODISCARD int fsh_reduce_map_task_decode(const uint8_t *data, int64_t size,
                                             fsh_reduce_map_task *out, fsh_error *err);

/* "plan-fragment": one task of a plan's stage (exec.h runs it; here only
 * its body). fragment: the stage's StageFragment bytes (proto/Plan.proto),
 * opaque to this layer; task of n_tasks: its partition in the stage;
 * inputs: for every exchange the fragment reads, its node id and the map
 * outputs of the partition this task reads (a reduce-verify task, not
 * incremental); the output: map output (map_id, attempt) of shuffle
 * shuffle_id, compressed as said, through `backend`. Answer: the
 * map-synthetic answer (row checksums: exec.h) and what it read of each
 * input (fsh_fragment_answer_encode), so that the driver checks every
 * partition read against what was written there.
 * Body: "FSPT", u8 version 1, 3 zero bytes, u64 shuffle_id, i64 map_id,
 * i32 attempt, i32 task, i32 n_tasks, u8 compression, u8 backend, 2 zero
 * bytes, u32 n_inputs (0 .. 64), u32 fragment length F (1 .. 64 MiB), the
 * fragment (F bytes, zero-padded to a multiple of 8), then n_inputs x (i32
 * exchange node id, u32 length L, a reduce-verify body of L bytes
 * zero-padded to a multiple of 8), then u32 flags (bit 0: a side input),
 * u32 n_counts, the side input when flagged (u32 length L, u32 0, a
 * reduce-verify body zero-padded to a multiple of 8) and n_counts x i64.
 * The side input and the counts serve a stage that scatters what an
 * earlier stage staged (exec.h: range and into_partitions exchanges): the
 * samples every task staged, the rows every task staged. */
typedef struct fsh_fragment_task_input {
  int32_t node;         /* the exchange's node id (Plan.proto Operator.id) */
  fsh_reduce_task read; /* its map outputs; owned when decoded */
} fsh_fragment_task_input;

typedef struct fsh_fragment_task {
  fsh_buffer *fragment; /* one reference (owned when decoded) */
  int32_t task, n_tasks;
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  fsh_compression compression;
  fsh_task_backend backend;
  int32_t n_inputs;
  fsh_fragment_task_input *inputs;
  bool has_side;
  fsh_reduce_task side;  /* owned when decoded */
  int32_t n_counts;
  int64_t *counts;       /* owned when decoded */
} fsh_fragment_task;

/* What a plan-fragment task read of one input: node (the exchange's id;
 * -1: the side input), the rows and their row checksum (exec.h), and
 * whether it read the partition to its end (a limit may stop early: then
 * nothing is to be compared). */
typedef struct fsh_fragment_read {
  int32_t node;
  bool complete;
  int64_t rows;
  uint64_t checksum;
} fsh_fragment_read;

/* The plan-fragment answer: the map-synthetic answer of its output (r)
 * followed by n_reads x (i32 node, u8 complete, 3 zero bytes, i64 rows,
 * u64 checksum), u32 n_reads (0 .. 65) and "FSRD". Decode: *reads
 * fsh_malloc'd (NULL when none). */
FSH_NODISCARD int fsh_fragment_answer_encode(const fsh_map_task_result *r,
                                             const fsh_fragment_read *reads, int32_t n_reads,
                                             fsh_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_fragment_answer_decode(const uint8_t *data, int64_t size,
                                             fsh_map_task_result *r, fsh_fragment_read **reads,
                                             int32_t *n_reads, fsh_error *err);
/* What a plan-fragment task's operators spilled (exec.h fsh_plan_result's
 * spill counters of the task). */
typedef struct fsh_fragment_stats {
  int64_t spill_files, spilled_bytes, operators_spilled;
} fsh_fragment_stats;
/* The answer with the task's stats: the reads are followed by 4 x i64
 * (spill_files, spilled_bytes, operators_spilled, 0), then u32 n_reads and
 * "FSR2". Decode accepts both trailers (an "FSRD" answer: stats all 0);
 * stats may be NULL. */
FSH_NODISCARD int fsh_fragment_answer_encode_stats(const fsh_map_task_result *r,
                                                   const fsh_fragment_read *reads,
                                                   int32_t n_reads, const fsh_fragment_stats *st,
                                                   fsh_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_fragment_answer_decode_stats(const uint8_t *data, int64_t size,
                                                   fsh_map_task_result *r,
                                                   fsh_fragment_read **reads, int32_t *n_reads,
                                                   fsh_fragment_stats *st, fsh_error *err);

void fsh_fragment_task_reset(fsh_fragment_task *t); /* frees a decoded task */
FSH_NODISCARD int fsh_fragment_task_encode(const fsh_fragment_task *t, fsh_buffer **out,
                                           fsh_error *err);
FSH_NODISCARD int fsh_fragment_task_decode(const uint8_t *data, int64_t size,
                                           fsh_fragment_task *out, fsh_error *err);

/* "merge-outputs": the pre-shuffle merge (issue 6). On the worker that
 * holds them, n_parts map outputs (part_maps[i], part_attempts[i]) of
 * shuffle shuffle_id become ONE map output (map_id, attempt) of the same
 * shuffle whose partition p is the parts' partition p blocks, in part
 * order, copied as stored (never decoded; every block verified against
 * its checksum as it is read, and keeping it); rows and bytes per
 * partition are the sums of the parts', the partition checksum the xxh3 of
 * the concatenated blocks. The parts must agree (partitions, compression,
 * schema); (map_id, attempt) must not be one of them. It is written like
 * any map output (memory budget, spill); with drop_parts the parts are
 * removed once it is held. A failed merge leaves the parts as they were
 * and nothing else. Body: "FSMG", u8 version 1, 3 zero bytes, u64
 * shuffle_id, i64 map_id, i32 attempt, u32 flags (bit 0: drop_parts), u32
 * n_parts (1 .. 65536), u32 0, then n_parts x (i64 map_id, i32 attempt, u32
 * 0). Answer: the merged output's PutResult. The worker runs it as a task
 * kind of the "task" envelope (and the DoAction of that name). */
#define FSH_MERGE_TASK_KIND "merge-outputs"
typedef struct fsh_merge_task {
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  bool drop_parts;
  int32_t n_parts;
  int64_t *part_maps;     /* [n_parts] (owned when decoded) */
  int32_t *part_attempts; /* [n_parts] */
} fsh_merge_task;

void fsh_merge_task_reset(fsh_merge_task *t); /* frees a decoded task */
FSH_NODISCARD int fsh_merge_task_encode(const fsh_merge_task *t, fsh_buffer **out,
                                        fsh_error *err);
FSH_NODISCARD int fsh_merge_task_decode(const uint8_t *data, int64_t size, fsh_merge_task *out,
                                        fsh_error *err);
/* Runs the merge on a store; *out: the merged output's metadata (location
 * NULL). ENOENT naming the part that is not held, EIO for a corrupt block
 * (naming it), EINVAL for parts that disagree. */
FSH_NODISCARD int fsh_shuffle_store_merge(fsh_shuffle_store *s, const fsh_merge_task *t,
                                          fsh_map_output *out, fsh_error *err);

/* Wire formats (all integers little-endian; every decoder checks every
 * length and value and answers EINVAL naming what is wrong):
 *  map-synthetic body (64 bytes): "FSMT", u8 version 1, 3 zero bytes,
 *    u64 shuffle_id, i64 map_id, i32 attempt, i32 n_partitions,
 *    i64 first_row, i64 rows, u64 seed, i32 batch_rows, u8 compression
 *    (0 none, 1 lz4, 2 zstd), u8 backend (fsh_task_backend), 2 zero bytes.
 *  map-synthetic answer: "FSMR", u8 version 1, 3 zero bytes, i64 nanos,
 *    i64 input_rows, i64 input_bytes, u32 n_partitions, u32 L, the
 *    location (L bytes) zero-padded to a multiple of 8, n_partitions x
 *    u64 row checksum, then the map output's PutResult (format above).
 *  reduce-verify body: "FSRT", u8 version 1, 3 zero bytes, u64 shuffle_id,
 *    i32 partition, i32 n_partitions, u8 backend, u8 flags (bit 0:
 *    incremental, bit 1: sizes unknown; other bits zero), 2 zero bytes,
 *    u32 n_locations, u32 n_sources, u32 0, then n_sources x (i64 map_id,
 *    i32 attempt, u32 location index, i64 rows, i64 bytes, u64 checksum)
 *    of that partition, then n_locations x (u32 length, bytes; 1 .. 4096).
 *    A run (count > 1): version 2 and u32 count (2 .. 2^24) in place of
 *    the u32 0; when sizes are known the sources are followed by
 *    n_sources x count x (i64 rows, i64 bytes, u64 checksum) (parts). A
 *    task of one partition is always encoded as version 1.
 *  reduce-verify answer (48 bytes): "FSRR", u8 version 1, 3 zero bytes,
 *    i64 nanos, i64 rows, i64 bytes, u64 checksum, i64 batches. A run's:
 *    version 2, those 48 bytes, u32 count, u32 0, then count x (i64 rows,
 *    u64 checksum) of its partitions. */
FSH_NODISCARD int fsh_map_task_encode(const fsh_map_task *t, fsh_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_map_task_decode(const uint8_t *data, int64_t size, fsh_map_task *out,
                                      fsh_error *err);
FSH_NODISCARD int fsh_map_task_result_encode(const fsh_map_task_result *r, fsh_buffer **out,
                                             fsh_error *err);
FSH_NODISCARD int fsh_map_task_result_decode(const uint8_t *data, int64_t size,
                                             fsh_map_task_result *out, fsh_error *err);
FSH_NODISCARD int fsh_reduce_task_encode(const fsh_reduce_task *t, fsh_buffer **out,
                                         fsh_error *err);
FSH_NODISCARD int fsh_reduce_task_decode(const uint8_t *data, int64_t size,
                                         fsh_reduce_task *out, fsh_error *err);
FSH_NODISCARD int fsh_reduce_task_result_encode(const fsh_reduce_task_result *r,
                                                fsh_buffer **out, fsh_error *err);
FSH_NODISCARD int fsh_reduce_task_result_decode(const uint8_t *data, int64_t size,
                                                fsh_reduce_task_result *out, fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
