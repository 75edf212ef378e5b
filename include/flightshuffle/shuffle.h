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
 *  - flight (issue: the shuffle): map output stays on the worker that made
 *    it, in memory with spill to local disk, and reducers pull it with
 *    Flight DoGet.
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
};

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
FSH_NODISCARD int fsh_shuffle_release(fsh_shuffle_backend *b, uint64_t shuffle_id,
                                      fsh_error *err);
void fsh_shuffle_backend_destroy(fsh_shuffle_backend *b); /* NULL accepted */

/* The in-process backend. */
FSH_NODISCARD int fsh_shuffle_memory_new(fsh_shuffle_backend **out, fsh_error *err);
/* The shared-directory backend: map outputs are files in `dir` (created if
 * missing). Locations are file names inside dir, never paths: a location
 * that is not a plain name produced by this backend is refused. */
FSH_NODISCARD int fsh_shuffle_fs_new(const char *dir, fsh_shuffle_backend **out, fsh_error *err);

#ifdef __cplusplus
}
#endif
#endif
