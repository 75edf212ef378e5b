/* shuffle_internal.h -- what src/shuffle's files share: the map-output file
 * format (writer, verified reader, raw block ranges) used by the fs backend
 * and by the flight backend's spill files, and small helpers.
 *
 * Map-output file layout (all integers little-endian):
 *
 *   [0, schema_length)        the Schema message (framed, 8-byte padded)
 *   [schema_length, data_end) blocks: each block is consecutive framed IPC
 *                             messages (dictionary batches, then ONE
 *                             record batch: the block's batches
 *                             concatenated; one per batch only when they
 *                             cannot be) of ONE partition, written by a
 *                             fresh encoder, so every block carries the
 *                             dictionaries it needs (self-contained)
 *   [data_end, data_end + 8)  the end-of-stream marker FFFFFFFF 00000000
 *   index                     header, partition entries, block entries
 *   trailer (24 bytes)        u64 index_length, u64 xxh3(header), "FSHIDX01"
 *
 *   header (64 bytes): u32 version (1), u32 n_partitions, u64 shuffle_id,
 *     i64 map_id, i32 attempt, u32 compression, i64 schema_length,
 *     i64 data_end, i64 n_blocks, u64 xxh3 of the schema message
 *   partition entry (48 bytes, n_partitions of them): i64 rows, i64 bytes,
 *     u64 checksum (xxh3-64 of the partition's stored block bytes in
 *     order), i64 first_block, i64 n_blocks, u64 xxh3 of (the first 40
 *     bytes of this entry, then its block entries)
 *   block entry (32 bytes, grouped by partition): i64 offset, i64 length,
 *     i64 rows, u64 xxh3 of the block's bytes
 *
 * A reader of one partition reads the trailer, the header, the schema,
 * that partition's entry and its block entries: a cost independent of the
 * number of partitions, which matters when 10,000 reducers each read one
 * partition of 10,000 map files. Every piece it reads is checksummed (the
 * header by the trailer, the schema by the header, an entry and its blocks
 * by the entry's hash, each block by its own hash before any of it is
 * decoded), and every offset and length is checked against the file. The per-block hashes (beyond the
 * per-partition checksum the driver keeps) let a reader verify one block
 * before yielding it, with one block in memory, instead of holding a whole
 * partition until its checksum can be checked. */
#ifndef FSH_SHUFFLE_INTERNAL_H
#define FSH_SHUFFLE_INTERNAL_H

#include <string.h>

#include <flightshuffle/flight.h>
#include <flightshuffle/shuffle.h>

#define FSH_MAP_FILE_MAGIC "FSHIDX01"
#define FSH_MAP_FILE_VERSION 1
#define FSH_MAP_FILE_TRAILER_BYTES 24
#define FSH_MAP_FILE_HEADER_BYTES 64
#define FSH_MAP_FILE_ENTRY_BYTES 48
#define FSH_MAP_FILE_BLOCK_BYTES 32
#define FSH_MAP_FILE_DEFAULT_BLOCK_BYTES ((int64_t)4 << 20)
#define FSH_MAP_FILE_DEFAULT_BUFFERED_BYTES ((int64_t)256 << 20)

/* The bytes a batch's rows hold: for each column, the parts of its
 * buffers that its slots [offset, offset + length) cover (validity, values,
 * offsets, the string bytes and child rows they reach). A slice counts its
 * own rows, not the whole buffers it shares with its parent, so that 64
 * slices of one big batch are not counted as 64 big batches. Whole
 * buffers where a range is not cheap to tell (dictionaries, dense
 * unions). The memory backend's bytes and the writer's block sizing. */
int64_t fsh_shuffle_batch_bytes(const fsh_batch *b);

/* A range stream yielding (partitions[i], batches[i]) for i in [0, n) in
 * that order. Takes ownership of both arrays (fsh_malloc'd) and of each
 * batch's reference, also on error (everything released). */
FSH_NODISCARD int fsh_range_stream_from_pairs(fsh_schema *schema, int32_t *partitions,
                                              fsh_batch **batches, int64_t n,
                                              fsh_range_stream *out, fsh_error *err);

/* fsh_task_row_checksums with its hashing path chosen: the fastest up to
 * `want` that the CPU runs (AVX-512, 8 rows at a time; AVX2, 4; scalar);
 * returns the path that ran. Same sums on every path (for the tests and
 * bench_map). */
typedef enum fsh_rowsum_path {
  FSH_ROWSUM_SCALAR = 0,
  FSH_ROWSUM_AVX2 = 1,
  FSH_ROWSUM_AVX512 = 2,
  FSH_ROWSUM_BEST = FSH_ROWSUM_AVX512
} fsh_rowsum_path;
fsh_rowsum_path fsh_task_row_checksums_path(const fsh_batch *b, const int32_t *part_of_row,
                                            uint64_t *sums, fsh_rowsum_path want);

/* Allocates the per-partition arrays of *m (zeroed) and sets its ids;
 * location stays NULL. On ENOMEM *m is left reset. */
FSH_NODISCARD int fsh_map_output_alloc(fsh_map_output *m, uint64_t shuffle_id, int64_t map_id,
                                       int32_t attempt, int32_t n_partitions, fsh_error *err);

/* ---- writer ------------------------------------------------------------ */

/* XXH3_64bits of block-sized inputs through libxxhash's run-time
 * dispatched XXH3 (AVX2 or AVX-512 where the CPU has them; the inlined
 * XXH_INLINE_ALL code is built for baseline x86-64, 2-4x slower on a
 * block): the same hash. _update feeds a streaming state (xxhash.h's
 * XXH3_state_t). (map_file.c) */
struct XXH3_state_s;
uint64_t fsh_block_xxh3(const void *p, size_t n);
void fsh_block_xxh3_update(struct XXH3_state_s *state, const void *p, size_t n);

typedef struct fsh_map_file_options {
  fsh_compression compression;
  int32_t compression_level; /* 0 = codec default */
  int64_t target_block_bytes; /* a partition's buffer is written as a block
                                 once it holds this much; 0 = 4 MiB */
  int64_t max_buffered_bytes; /* past this much buffered over all partitions,
                                 every partition is written out; 0 = 256 MiB */
  int64_t builder_keep_bytes; /* what the partition builders keep between
                                 blocks (fsh_partition_builder_set_keep_bytes);
                                 0 = its default */
} fsh_map_file_options;

typedef struct fsh_map_file_writer fsh_map_file_writer;

/* Starts a map-output file on `out` (ownership taken, even on error: it is
 * then aborted) and writes the schema message. */
FSH_NODISCARD int fsh_map_file_writer_open(fsh_output *out, const fsh_shuffle_spec *spec,
                                           int64_t map_id, int32_t attempt,
                                           const fsh_map_file_options *opts,
                                           fsh_map_file_writer **w, fsh_error *err);
/* Buffers a reference on batch for `partition` (checked by the caller:
 * in range, schema of the spec); writes the partition's block when it
 * reaches the target. An error while writing a block fails the writer:
 * later calls repeat the error and close discards the file. */
FSH_NODISCARD int fsh_map_file_writer_write(fsh_map_file_writer *w, int32_t partition,
                                            fsh_batch *batch, fsh_error *err);
/* Appends each row i of batch to partition partition_of_row[i] (checked
 * here: EINVAL outside [0, n_partitions)) in per-partition builders
 * (kernels.h) -- the blocks written are byte for byte those that
 * fsh_scatter + fsh_map_file_writer_write of each part would give (but
 * for max_buffered_bytes, checked after the whole batch rather than after
 * each part), without a batch per part nor a concatenation. ENOTSUP (writer unchanged) when
 * the schema has a column the builders do not take: scatter instead.
 * Other errors fail the writer as write's do. */
FSH_NODISCARD int fsh_map_file_writer_write_rows(fsh_map_file_writer *w, fsh_batch *batch,
                                                 const int32_t *partition_of_row,
                                                 fsh_error *err);
/* Bytes the writer's partition builders hold allocated (0 before the
 * first write_rows): memory a store charges to its budget. */
int64_t fsh_map_file_writer_builder_bytes(const fsh_map_file_writer *w);
/* Writes every buffered block, the end-of-stream marker, the index and the
 * trailer, then closes the output (fsync + rename for atomic files). On
 * success *out (reset by the caller beforehand) holds ids, rows, bytes and
 * checksums; location stays NULL. On error the output is aborted and *out
 * untouched. Frees w either way. */
FSH_NODISCARD int fsh_map_file_writer_close(fsh_map_file_writer *w, fsh_map_output *out,
                                            fsh_error *err);
/* Appends a whole stored block of another map-output file of the same
 * schema (len bytes of framed IPC messages, a multiple of 8; rows rows;
 * checksum: its xxh3, which the caller checked the bytes against) as the
 * next block of `partition`, copied as it is (the pre-shuffle merge,
 * worker_merge.c). The partition's checksum is computed over the bytes
 * written. */
FSH_NODISCARD int fsh_map_file_writer_write_block(fsh_map_file_writer *w, int32_t partition,
                                                  const uint8_t *data, int64_t len, int64_t rows,
                                                  uint64_t checksum, fsh_error *err);
/* Writes partition's buffered batches as its last block (hashed once when
 * it is the partition's only block): later writes to it are EINVAL, and
 * so is write_rows after any finish. Lets a writer fed one partition at a
 * time (the pre-shuffle merge's re-encoding) hold one partition's batches
 * at a time. Errors fail the writer as write's do. */
FSH_NODISCARD int fsh_map_file_writer_finish_partition(fsh_map_file_writer *w, int32_t partition,
                                                       fsh_error *err);
/* Discards everything (the output is aborted); frees w. NULL accepted. */
void fsh_map_file_writer_abort(fsh_map_file_writer *w);

/* ---- reader ------------------------------------------------------------ */

typedef struct fsh_map_file_info {
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  int32_t n_partitions;
  fsh_compression compression;
  int64_t schema_length; /* the schema message is bytes [0, schema_length) */
  int64_t data_end;      /* the end-of-stream marker starts here */
  int64_t n_blocks;
  int64_t file_size;
} fsh_map_file_info;

typedef struct fsh_map_file_block {
  int64_t offset;
  int64_t length;
  int64_t rows;
  uint64_t checksum; /* xxh3-64 of the block's bytes */
} fsh_map_file_block;

/* One partition's index entry, verified. */
typedef struct fsh_map_file_partition {
  int32_t partition;
  int64_t rows;
  int64_t bytes;     /* sum of its blocks' lengths */
  uint64_t checksum; /* xxh3-64 of its blocks' bytes, in order */
  int64_t n_blocks;
  fsh_map_file_block *blocks; /* owned (fsh_malloc); in write order */
} fsh_map_file_partition;

void fsh_map_file_partition_reset(fsh_map_file_partition *p);

typedef struct fsh_map_file fsh_map_file;

/* Opens a map-output file on a seekable input (ownership taken, even on
 * error): verifies the trailer, the header, the end-of-stream marker and
 * the schema message. A malformed file is EINVAL naming the input. */
FSH_NODISCARD int fsh_map_file_open(fsh_input *in, fsh_map_file **out, fsh_error *err);
FSH_NODISCARD int fsh_map_file_open_path(const char *path, fsh_map_file **out, fsh_error *err);
void fsh_map_file_close(fsh_map_file *f); /* NULL accepted */
const fsh_map_file_info *fsh_map_file_get_info(const fsh_map_file *f);
fsh_schema *fsh_map_file_schema(const fsh_map_file *f); /* borrowed */
/* The schema message's metadata flatbuffer as verified at open (a copy,
 * borrowed): what a server sends, not the stored bytes read again. */
fsh_buffer *fsh_map_file_schema_message(const fsh_map_file *f);
/* The input (borrowed): with the ranges below, a server sends stored
 * bytes without decoding them. */
fsh_input *fsh_map_file_input(const fsh_map_file *f);
/* The name of its bytes (a path, an image's name) for messages. */
const char *fsh_map_file_name(const fsh_map_file *f);
/* Whether f is a memory image opened in place (fsh_map_file_open_image):
 * its bytes are this process's memory, not a file's. */
bool fsh_map_file_is_image(const fsh_map_file *f);

/* The verified part of an opened file -- trailer, header, end-of-stream
 * marker, schema -- that every open of the same bytes checks anew. A
 * store keeps one per held map output so that a DoGet naming 1000 map
 * outputs does not re-read and re-decode 1000 trailers and schemas.
 * Immutable, reference-counted (thread-safe), holds no reference on the
 * file's bytes. */
typedef struct fsh_map_file_head fsh_map_file_head;
fsh_map_file_head *fsh_map_file_head_of(const fsh_map_file *f); /* borrowed */
fsh_map_file_head *fsh_map_file_head_ref(fsh_map_file_head *h);  /* returns h */
void fsh_map_file_head_unref(fsh_map_file_head *h);              /* NULL accepted */
/* Opens a map-output file on `in` (ownership taken, even on error) whose
 * bytes were verified as h by an earlier fsh_map_file_open: only the size
 * is checked (a different size: EIO naming the input). Partition entries
 * and blocks are read and verified exactly as after fsh_map_file_open. */
FSH_NODISCARD int fsh_map_file_open_head(fsh_input *in, fsh_map_file_head *h,
                                         fsh_map_file **out, fsh_error *err);

/* fsh_map_file_open_head on a whole file held in memory (a store's memory
 * image; a reference is taken) without an fsh_input: no allocation but the
 * map file itself; the index and blocks are read in place (slices).
 * fsh_map_file_input makes the input on first use (NULL if out of
 * memory). A different size than h's: EIO naming the image. */
FSH_NODISCARD int fsh_map_file_open_image(fsh_buffer *image, const char *name,
                                          fsh_map_file_head *h, fsh_map_file **out,
                                          fsh_error *err);

/* Reads and verifies the index entry of `partition` and its blocks: the
 * raw bytes of the partition are the blocks' (offset, length) ranges, in
 * order (after the schema message, [0, schema_length)). */
FSH_NODISCARD int fsh_map_file_get_partition(fsh_map_file *f, int32_t partition,
                                             fsh_map_file_partition *out, fsh_error *err);
/* Every partition's index entry at once (one read of the whole index),
 * verified as fsh_map_file_get_partition's: out[n_partitions]; their
 * blocks point into *blocks (one fsh_malloc'd array, freed by the caller
 * with fsh_free; do not reset the entries). The pre-shuffle merge's. */
FSH_NODISCARD int fsh_map_file_get_partitions(fsh_map_file *f, fsh_map_file_partition *out,
                                              fsh_map_file_block **blocks, fsh_error *err);
/* Reads block i of p and checks its checksum (EIO naming shuffle, map,
 * partition, block and file on mismatch). *out is a new reference. */
FSH_NODISCARD int fsh_map_file_read_block(fsh_map_file *f, const fsh_map_file_partition *p,
                                          int64_t i, fsh_buffer **out, fsh_error *err);
/* fsh_map_file_read_block, except that a memory image's block (a slice,
 * no I/O: fsh_map_file_open_image) is not hashed here: for a server whose
 * client verifies every block against the checksum in its header
 * (worker_get.c, FSH_TICKET_CLIENT_VERIFIES). A file's block (a spill
 * file on disk) is still checked, so that its damage is an error naming
 * the file. */
FSH_NODISCARD int fsh_map_file_read_block_image_unchecked(fsh_map_file *f,
                                                          const fsh_map_file_partition *p,
                                                          int64_t i, fsh_buffer **out,
                                                          fsh_error *err);

/* Decoded batches of one partition, block by block (one block in memory;
 * each block verified before any of its batches is returned; at the end
 * the partition checksum and row count are checked too). The cursor
 * borrows f (which must outlive it) and its decoder: one cursor per file
 * at a time. */
typedef struct fsh_map_file_cursor fsh_map_file_cursor;
FSH_NODISCARD int fsh_map_file_cursor_open(fsh_map_file *f, int32_t partition,
                                           fsh_map_file_cursor **out, fsh_error *err);
/* fsh_map_file_cursor_open decoding with dec (borrowed; NULL: f's own,
 * made from its schema on first use) instead of f's own decoder: a
 * reader of many map outputs with the same schema message and no
 * dictionaries (so that a decoder holds no state between blocks) decodes
 * the schema once, not once per map output. dec must outlive the cursor
 * and serve one cursor at a time. */
FSH_NODISCARD int fsh_map_file_cursor_open_with(fsh_map_file *f, int32_t partition,
                                                fsh_ipc_decoder *dec,
                                                fsh_map_file_cursor **out, fsh_error *err);
/* A new decoder holding f's verified schema (for cursor_open_with). */
FSH_NODISCARD int fsh_map_file_decoder_new(const fsh_map_file *f, fsh_ipc_decoder **out,
                                           fsh_error *err);
/* Whether f's schema has a dictionary-encoded field (at any depth). */
bool fsh_map_file_has_dictionaries(const fsh_map_file *f);
/* The partition's verified entry (borrowed). */
const fsh_map_file_partition *fsh_map_file_cursor_partition(const fsh_map_file_cursor *c);
/* Next batch (new reference), or *out = NULL at the end. */
FSH_NODISCARD int fsh_map_file_cursor_next(fsh_map_file_cursor *c, fsh_batch **out,
                                           fsh_error *err);
void fsh_map_file_cursor_free(fsh_map_file_cursor *c); /* NULL accepted */

/* ---- the worker store (store.c) ---------------------------------------- */

/* A map task's writer into a store: a map-output file writer over an
 * output that keeps the image in memory while the budget allows and moves
 * it to a spill file when it does not. close publishes the map output
 * (replacing an earlier one of the same map and attempt) and fills *out
 * (location NULL); on error nothing is kept. Both free w. */
typedef struct fsh_store_writer fsh_store_writer;
FSH_NODISCARD int fsh_store_writer_open(fsh_shuffle_store *s, const fsh_shuffle_spec *spec,
                                        int64_t map_id, int32_t attempt, fsh_store_writer **out,
                                        fsh_error *err);
/* fsh_map_file_writer_write_rows into the writer's map-output image; the
 * partition builders' memory is charged to the store's budget as it grows
 * (memory already held: charged even past the limit, after dropping the
 * idle builders' cache and evicting older images to make room, so that
 * later images spill sooner) until the writer is closed or aborted. */
FSH_NODISCARD int fsh_store_writer_write_rows(fsh_store_writer *w, fsh_batch *batch,
                                              const int32_t *partition_of_row, fsh_error *err);
FSH_NODISCARD int fsh_store_writer_write(fsh_store_writer *w, int32_t partition,
                                         fsh_batch *batch, fsh_error *err);
/* Publishes the output (replacing one of the same map and attempt).
 * ECANCELED (nothing kept, nothing left on disk) when its shuffle was
 * released after the writer opened (among the store's last 1024 releases):
 * a map task ending after its job's release leaves no orphan. A writer
 * opened after a release publishes (a released stage brought back runs
 * its maps again under the same shuffle id). w is freed either way. */
FSH_NODISCARD int fsh_store_writer_close(fsh_store_writer *w, fsh_map_output *out,
                                         fsh_error *err);
void fsh_store_writer_abort(fsh_store_writer *w); /* NULL accepted */
/* fsh_store_writer_open for a writer that expects to write about
 * expect_bytes of image (a merge: the sum of its parts): the store's pool
 * gives it the memfd that fits that best (store.c, pool_take). 0 (what
 * fsh_store_writer_open passes): unknown, the store expects the moving
 * average of such writers' images. */
FSH_NODISCARD int fsh_store_writer_open_sized(fsh_shuffle_store *s, const fsh_shuffle_spec *spec,
                                              int64_t map_id, int32_t attempt,
                                              int64_t expect_bytes, fsh_store_writer **out,
                                              fsh_error *err);
/* fsh_map_file_writer_finish_partition through a store writer. */
FSH_NODISCARD int fsh_store_writer_finish_partition(fsh_store_writer *w, int32_t partition,
                                                    fsh_error *err);
/* fsh_map_file_writer_write_block through a store writer. */
FSH_NODISCARD int fsh_store_writer_write_block(fsh_store_writer *w, int32_t partition,
                                               const uint8_t *data, int64_t len, int64_t rows,
                                               uint64_t checksum, fsh_error *err);
/* Removes one held map output (memory and spill file; readers that opened
 * it go on unharmed). False when it is not held. */
bool fsh_store_drop(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt);

/* Opens a held map output as a map-output file (a memory image or its
 * spill file; independent of later releases). ENOENT naming the map
 * output and the store when it is not held. */
FSH_NODISCARD int fsh_store_open(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id,
                                 int32_t attempt, fsh_map_file **out, fsh_error *err);
/* Where a held map output's partition is, for a reader on the same host
 * (the worker's "locate" action, worker_locate.c). */
typedef enum fsh_store_at {
  FSH_STORE_AT_NONE = 0,  /* not readable directly (a private memory image) */
  FSH_STORE_AT_FILE = 1,  /* a spill file: name in spill directory dir */
  FSH_STORE_AT_MEMFD = 2, /* a memory image: memfd fd of this process */
  FSH_STORE_AT_VM = 3     /* a VM image: addr in this process's memory */
} fsh_store_at;
typedef struct fsh_store_location {
  fsh_store_at kind;
  int dir;          /* FILE: index into fsh_store_spill_dirs */
  char *name;       /* FILE: the file's name in it (owned) */
  int fd;           /* MEMFD: valid while the image is held; may be closed
                       (and the number reused) any time after */
  uint64_t dev, ino; /* the file's or memfd's identity (st_dev, st_ino) */
  int64_t size;     /* its size (the map-output file's) */
  uint64_t image_id; /* MEMFD, VM: the image's identity trailer's id (below) */
  uint64_t addr;     /* VM: the image's address (valid while it is held; the
                        trailer's id is cleared before it is reused or
                        unmapped) */
  fsh_map_file_partition part; /* the partition's verified index entry */
  fsh_buffer *schema_msg;      /* its verified schema message (reference) */
} fsh_store_location;
/* Opens (shuffle, map, attempt) like fsh_store_open and says where its
 * bytes are and where `partition`'s blocks are in them (kind NONE when a
 * same-host reader cannot open them). ENOENT when not held; EINVAL for a
 * partition out of range. *out reset on error. */
FSH_NODISCARD int fsh_store_locate(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id,
                                   int32_t attempt, int32_t partition,
                                   fsh_store_location *out, fsh_error *err);
/* fsh_store_locate of each partition of [first, first + count) into
 * out[count], the map output opened (and its place found) once. On error
 * every entry is reset. */
FSH_NODISCARD int fsh_store_locate_run(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id,
                                       int32_t attempt, int32_t first, int32_t count,
                                       fsh_store_location *out, fsh_error *err);
void fsh_store_location_reset(fsh_store_location *l);
/* The store's spill directories (borrowed; trailing '/' removed): n. */
int fsh_store_spill_dirs(const fsh_shuffle_store *s, const char *const **dirs);

/* ---- memory images' identity and reuse (store.c, flight_direct.c) -----
 *
 * A memfd holding a finished memory image of S bytes is S +
 * FSH_IMAGE_ID_BYTES long: after the map-output file comes its identity
 * trailer (integers little-endian): "FSHIMGID", u64 shuffle id, i64 map
 * id, i32 attempt, u32 0, u64 image id (unique in the worker process, never
 * 0), u64 S. A released image's memfd may be reused for a later image
 * (the store's pool): the trailer is cut off before the memfd is pooled,
 * and the memfd is pooled only when no other process holds it open or
 * mapped (a write lease proves it), so a same-host reader that checks the
 * trailer right after opening never takes a reused memfd for the image it
 * located.
 *
 * A VM image (anonymous memory, store.c) has the same trailer right after
 * its S bytes in its mapping. No lease exists for anonymous memory: the
 * trailer's image id is cleared (a sequentially consistent store) before
 * the mapping is pooled or unmapped, and a same-host reader copies the
 * trailer, then the bytes it wants, then the trailer again
 * (process_vm_readv, flight_fetch.c), and uses the bytes only when both
 * copies name the image it located -- a seqlock whose sequence is the
 * image id, which never repeats. */
#define FSH_IMAGE_ID_MAGIC "FSHIMGID"
#define FSH_IMAGE_ID_BYTES 48
static inline void fsh_image_id_encode(uint8_t out[FSH_IMAGE_ID_BYTES], uint64_t shuffle_id,
                                       int64_t map_id, int32_t attempt, uint64_t image_id,
                                       int64_t size);
/* The store's pool of released memfds and VM mappings (one or the other,
 * as the store's images are) kept for reuse: how many, their bytes
 * (charged to the budget, not counted in memory_bytes), how many images
 * reused one so far, all the budget charged (pool included), and
 * how many times it was emptied for being idle. */
typedef struct fsh_store_pool_stats {
  int64_t pooled, pooled_bytes, reused, budget_used, idle_drains;
  int64_t left_loose; /* writers that left every fitting memfd to a larger
                         writer (too large for them: store.c, pool_loose) */
} fsh_store_pool_stats;
void fsh_store_get_pool_stats(fsh_shuffle_store *s, fsh_store_pool_stats *out);
/* Closes every pooled memfd (its charge given back). */
void fsh_store_pool_drain(fsh_shuffle_store *s);
/* Closes every pooled memfd (its charge given back) when no memfd went in
 * or out of the pool for the store's pool idle time (default 30 s): the
 * bytes given back (0: nothing done). *due_ms: in how many ms the pool
 * would be idle that long if nothing happens meanwhile (0 now), or -1
 * when it is empty. Thread-safe; closes the memfds outside its locks. */
int64_t fsh_store_pool_drain_idle(fsh_shuffle_store *s, int64_t *due_ms);
/* Sets the pool idle time (ms; 0: drained at the next call above; < 0:
 * never drained for being idle, only when a writer's budget needs it, by
 * fsh_store_pool_drain or when the store is freed). */
void fsh_store_set_pool_idle_ms(fsh_shuffle_store *s, int64_t ms);
/* A worker's idle times (worker.c, its keeper thread), each in ms, < 0 for
 * never: its store's pool's (above), and how long no task may run and no
 * shuffle be released before it drops the partition builders' cache
 * (kernels.h; process-wide). At start: FSH_WORKER_POOL_IDLE_MS_DEFAULT and
 * FSH_WORKER_BUILDERS_IDLE_MS_DEFAULT, both 30 s, so that shuffles up to
 * half a minute apart reuse the pool's pages (a reused memfd is ~4.9x
 * cheaper to write; VM images' huge pages, once given back, cost ~1.3
 * CPU-s per GiB to fault in again on a VM whose host reclaims free pages:
 * bench/shuffle/PROFILE_VM.md) and the builders' grown buffers (a cold
 * start regrows them, page fault by page fault: 64 x 64 map phases of
 * 1.6-2.4 s instead of 1.27, WORKER_MEMORY.md "Session 9"). Thread-safe;
 * the keeper applies them at its next tick. */
#define FSH_WORKER_BUILDERS_IDLE_MS_DEFAULT 30000
#define FSH_WORKER_POOL_IDLE_MS_DEFAULT 30000
/* Frees the flight reader's pooled span buffers of VM reads
 * (flight_direct.c; process-wide): the worker's keeper calls it when it
 * drops its idle partition builders. */
void fr_spans_drop(void);
void fsh_shuffle_worker_set_idle_ms(fsh_shuffle_worker *w, int64_t pool_ms,
                                    int64_t builders_ms);

/* This host's identity for same-host checks: the boot id, the host name
 * and this process's pid and mount namespaces, one line (static storage;
 * computed once). Two processes with equal identities see the same files
 * (outside private mounts) and each other's /proc entries. */
const char *fsh_host_identity(void);

/* Whether (shuffle, map, attempt) is held; *n_partitions set if so. */
bool fsh_store_has(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt,
                   int32_t *n_partitions);

/* A snapshot of what a store holds (copies; schema references). */
typedef struct fsh_store_item {
  fsh_map_output meta; /* location NULL */
  fsh_schema *schema;
} fsh_store_item;
FSH_NODISCARD int fsh_store_list(fsh_shuffle_store *s, fsh_store_item **out, int64_t *n,
                                 fsh_error *err);
void fsh_store_items_free(fsh_store_item *items, int64_t n);
/* Like fsh_shuffle_store_release, also saying how much went. */
FSH_NODISCARD int fsh_store_release(fsh_shuffle_store *s, uint64_t shuffle_id,
                                    int64_t *n_outputs, int64_t *n_bytes, fsh_error *err);
/* The name messages use (the worker's URI once it listens). Call before
 * the store is shared between threads. */
FSH_NODISCARD int fsh_store_set_name(fsh_shuffle_store *s, const char *name);
const char *fsh_store_name(const fsh_shuffle_store *s);

/* ---- shuffle wire formats (wire.c; layouts in shuffle.h) ---------------- */

typedef struct fsh_ticket_source {
  int64_t map_id;
  int32_t attempt;
} fsh_ticket_source;

typedef struct fsh_shuffle_ticket {
  uint64_t shuffle_id;
  int32_t partition; /* the first partition of the run */
  int32_t n_partitions_read; /* the run [partition, partition + n): 0 or 1 = one */
  uint8_t flags; /* FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES */
  int64_t n_sources;
  fsh_ticket_source *sources; /* owned (fsh_malloc) */
} fsh_shuffle_ticket;

/* Ticket flag: the client reads block bundles (small blocks gathered into
 * one FlightData, layout in shuffle.h); without it the stream is plain
 * record batches any Flight client reads. */
#define FSH_TICKET_BUNDLE 0x01
/* Ticket flag: the client checks every block against the checksum in its
 * header (our flight reader does, flight_fetch.c), so the server need not
 * hash a memory image's blocks before sending them; without it (any
 * other Flight client) the server checks every block it sends. */
#define FSH_TICKET_CLIENT_VERIFIES 0x02

/* Version 1 (one partition): "FSHT", u8 1, u8 flags, 2 zero bytes, u64
 * shuffle, i32 partition, u32 n_sources, then n_sources x (i64 map, i32
 * attempt, 4 zero bytes). Version 2 (a run of partitions; encoded only
 * when n_partitions_read > 1): the same with u8 2 and 8 more header bytes
 * before the sources: u32 n_partitions_read (>= 1), u32 0. The blocks of
 * a run come source by source, each source's partitions in increasing
 * order; each block header names its partition. */
#define FSH_TICKET_MAGIC "FSHT"
#define FSH_TICKET_HEADER_BYTES 24
#define FSH_TICKET_V2_HEADER_BYTES 32
#define FSH_TICKET_SOURCE_BYTES 16
#define FSH_TICKET_MAX_SOURCES ((int64_t)1 << 24)

FSH_NODISCARD int fsh_shuffle_ticket_encode(const fsh_shuffle_ticket *t, fsh_buffer **out,
                                            fsh_error *err);
/* EINVAL naming what is wrong for anything but a well-formed ticket. */
FSH_NODISCARD int fsh_shuffle_ticket_decode(const uint8_t *data, int64_t size,
                                            fsh_shuffle_ticket *out, fsh_error *err);
void fsh_shuffle_ticket_reset(fsh_shuffle_ticket *t);

#define FSH_BLOCK_HEADER_MAGIC "FSHB"
#define FSH_BLOCK_HEADER_BYTES 88

typedef struct fsh_block_header {
  int64_t map_id;
  int32_t attempt;
  int32_t partition;
  int64_t index, n_blocks;
  int64_t length, rows;
  uint64_t checksum;
  uint64_t part_checksum;
  int64_t part_rows, part_bytes;
} fsh_block_header;

void fsh_block_header_encode(const fsh_block_header *h, uint8_t out[FSH_BLOCK_HEADER_BYTES]);
/* false if data is not a block header (wrong size, magic or version). */
bool fsh_block_header_decode(const uint8_t *data, int64_t size, fsh_block_header *out);

/* A bundle of whole small blocks in one FlightData's app_metadata (no
 * IPC message of its own): "FSHU", u8 version 1, 3 zero bytes, u32
 * n_blocks, u32 0, then n_blocks x (block header, the block's framed
 * bytes as stored -- header.length bytes, a multiple of 8). */
#define FSH_BUNDLE_MAGIC "FSHU"
#define FSH_BUNDLE_HEADER_BYTES 16
/* Blocks up to this size are bundled, into bundles of about the target. */
#define FSH_BUNDLE_MAX_BLOCK ((int64_t)64 << 10)
#define FSH_BUNDLE_TARGET ((int64_t)1 << 20)

#define FSH_PUT_RESULT_MAGIC "FSHP"
FSH_NODISCARD int fsh_put_result_encode(const fsh_map_output *m, fsh_buffer **out,
                                        fsh_error *err);

/* Little-endian fields. */
static inline void fsh_le_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void fsh_le_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t fsh_le_get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t fsh_le_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* ---- same-host direct reads (worker_locate.c, flight_direct.c) --------
 *
 * DoAction "locate", body a shuffle ticket (flags ignored): where the
 * named map outputs' blocks of the ticket's partition are, for a reader on
 * the worker's host. One result (integers little-endian):
 *   "FSHL", u8 version 2, 3 zero bytes, u32 pid, u32 n_sources (the
 *   ticket's map outputs times its partitions: one entry per map output
 *   and partition of the run, map output-major), u32 host identity length H, u32 n_dirs, u32 schema length
 *   S, u32 0; the host identity (fsh_host_identity, H bytes); n_dirs x
 *   (u32 length, the spill directory); the schema message's metadata of
 *   the first located map output (S bytes, 0 when none is); then per
 *   ticket entry, in order: u8 kind (fsh_store_at), 3 zero bytes, i32
 *   dir index (FILE) or fd (MEMFD) or 0 (VM), u64 dev (VM: the image's
 *   address in the worker's memory), u64 ino (VM: 0), i64 file size (VM:
 *   the image's), i64 partition rows, i64 partition bytes, u64 partition
 *   checksum, i64 n_blocks, u64 image id (MEMFD, VM: its identity
 *   trailer's, below; else 0),
 *   u32 name length N (FILE: 1 .. 255, else 0), the name, then
 *   n_blocks x (i64 offset, i64 length, i64 rows, u64 checksum).
 * A kind the reader does not know (a later one) is read as NONE, its name
 * and blocks skipped (VM, 3, was added so: a reader older than it
 * rejected the whole answer, and read everything with DoGet).
 * A map output not held, or not readable directly, is kind NONE (0) with
 * zeros: the reader fetches it with DoGet, which says what is wrong. The
 * answer names files only inside the worker's declared spill
 * directories, by plain name; the reader opens nothing else. */
#define FSH_LOCATE_MAGIC "FSHL"
#define FSH_LOCATE_HEADER_BYTES 32
#define FSH_LOCATE_SOURCE_BYTES 76

typedef struct fsh_locate_source {
  fsh_store_at kind;
  int32_t dir_or_fd;
  uint64_t dev, ino;
  int64_t size, rows, bytes;
  uint64_t checksum;
  int64_t n_blocks;
  uint64_t image_id;             /* MEMFD, VM: its identity trailer's id */
  uint64_t addr;                 /* VM: the image's address in process pid */
  /* what was asked (set by the reader, fr_direct_locate, not decoded):
   * a memfd's identity trailer must name it */
  uint64_t want_shuffle_id;
  int64_t want_map_id;
  int32_t want_attempt;
  char name[256];                /* FILE: a plain file name */
  const uint8_t *blocks;         /* n_blocks x 32 bytes, into the answer */
} fsh_locate_source;

typedef struct fsh_locate_answer {
  uint32_t pid;
  const uint8_t *host;
  int64_t host_len;
  int32_t n_dirs;
  char **dirs;                   /* owned */
  const uint8_t *schema;         /* into the answer */
  int64_t schema_len;
  int64_t n_sources;
  fsh_locate_source *sources;    /* owned */
} fsh_locate_answer;

/* The worker's "locate" action on its store (one dispatch line in
 * worker.c). EINVAL for a malformed ticket. */
FSH_NODISCARD int fsh_worker_locate(fsh_shuffle_store *store, const uint8_t *body, int64_t size,
                                    fsh_flight_result_list *out, fsh_error *err);
/* Decodes a locate answer of a ticket of n_sources entries (pointers into
 * data, which must outlive *out). EIO naming what is wrong. */
FSH_NODISCARD int fsh_locate_answer_decode(const uint8_t *data, int64_t size, int64_t n_sources,
                                           fsh_locate_answer *out, fsh_error *err);
void fsh_locate_answer_reset(fsh_locate_answer *a);

/* dir + "/" + name in a new fsh_malloc'd string; NULL on ENOMEM. */
char *fsh_path_join(const char *dir, const char *name);

static inline void fsh_image_id_encode(uint8_t out[FSH_IMAGE_ID_BYTES], uint64_t shuffle_id,
                                       int64_t map_id, int32_t attempt, uint64_t image_id,
                                       int64_t size) {
  memcpy(out, FSH_IMAGE_ID_MAGIC, 8);
  fsh_le_put64(out + 8, shuffle_id);
  fsh_le_put64(out + 16, (uint64_t)map_id);
  fsh_le_put32(out + 24, (uint32_t)attempt);
  fsh_le_put32(out + 28, 0);
  fsh_le_put64(out + 32, image_id);
  fsh_le_put64(out + 40, (uint64_t)size);
}

#endif
