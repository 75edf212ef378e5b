/* map_file.c -- the map-output file format (layout in shuffle_internal.h):
 * a writer that buffers batch references per partition and writes each
 * partition's buffered batches as one self-contained block -- the batches
 * concatenated (fsh_concat) into one record batch, after the dictionary
 * batches it needs -- then the index and trailer (small blocks are
 * gathered and reach the output in 256 KiB writes); rows given with their
 * partition ids (write_rows) go into partition builders (kernels.h)
 * instead, whose contents become the block's batch as they are (laid out
 * straight from the builder's buffers when the block holds nothing else:
 * write_built); and a reader that verifies the index piece by piece and each block's checksum
 * before decoding it. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL /* header-only use of Debian's libxxhash-dev */
#include <xxhash.h>

/* Block bytes (MiBs) are hashed by libxxhash's run-time dispatched XXH3
 * (xxh_x86dispatch.h: AVX2 or AVX-512 where the CPU has them), the same
 * hashes as the inlined code, which is built for baseline x86-64 (SSE2):
 * 81 GB/s against 19 on 128 KiB pieces (AVX-512 host), where the map
 * side's two hashes of every stored byte (block and partition) were 12%
 * of a worker's CPU. Declared here: that header cannot be included beside
 * XXH_INLINE_ALL (the state is the same structure either way). */
#if defined(__x86_64__)
XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t *state, const void *input, size_t len);
XXH64_hash_t XXH3_64bits_dispatch(const void *input, size_t len);
#define HASH_UPDATE XXH3_64bits_update_dispatch
#define HASH_BYTES XXH3_64bits_dispatch
#else
#define HASH_UPDATE XXH3_64bits_update
#define HASH_BYTES XXH3_64bits
#endif

#include <flightshuffle/kernels.h>

#include "ipc/read_internal.h"   /* fsh_input_from_buffer_named */
#include "ipc/writer_internal.h" /* fsh_ipc_encoder_batch_metadata */
#include "shuffle/shuffle_internal.h"

/* ---- little-endian fields ---------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static int64_t get_i64(const uint8_t *p) { return (int64_t)get_u64(p); }

static const uint8_t k_eos[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0};

/* ---- writer ------------------------------------------------------------ */

typedef struct part_buf {
  fsh_batch **batches; /* buffered references, write order */
  int32_t n, cap;
  int64_t buffered;      /* fsh_shuffle_batch_bytes of the buffered batches */
  int64_t built;         /* and of its rows in the writer's builders */
  int64_t rows, bytes;   /* written so far (blocks) */
  XXH3_state_t *hash;    /* over the partition's blocks; NULL until needed */
  bool single;           /* one block, written at close: its checksum is the */
  uint64_t single_sum;   /* partition's (the same bytes), hashed once */
  fsh_map_file_block *blocks; /* &first while there is room in it */
  int64_t n_blocks, cap_blocks;
  fsh_map_file_block first;   /* a partition's first block, in place (at 1000
                                 partitions most have one: no list to allocate) */
  bool finished;         /* finish_partition: nothing more may come */
} part_buf;

struct fsh_map_file_writer {
  fsh_output *out;
  fsh_schema *schema; /* reference */
  fsh_ipc_write_options wopts;
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  int32_t n_partitions;
  int64_t target, max_buffered, buffered;
  int64_t builder_keep; /* fsh_map_file_options.builder_keep_bytes */
  int64_t schema_length;
  uint64_t schema_hash;
  int64_t n_blocks;
  part_buf *parts;
  XXH3_state_t *block_hash; /* scratch, reset per block */
  /* Small writes (a block of a few KiB: many partitions, few rows) are
   * gathered here and reach the file STAGE_BYTES at a time (one syscall
   * for hundreds of blocks); sink is the output the blocks are written
   * to, its position counting the staged bytes. */
  fsh_output sink;
  uint8_t *stage;
  int64_t staged;
  fsh_partition_builder *pb; /* rows appended by write_rows, or NULL */
  fsh_ipc_encoder *enc;     /* reused for every block when the schema has no
                               dictionaries (then it holds no state); else
                               NULL: a fresh encoder per block */
  /* scratch of write_built, sized for the schema once: field nodes,
   * buffer ranges, iovecs */
  fsh_ipc_node *nodes;
  fsh_ipc_range *ranges;
  struct iovec *iov;
  bool any_finished;        /* some partition was finished early */
  int failed;               /* error code once a block write failed */
  char failure[sizeof(fsh_error)]; /* and its message */
  char what[96];            /* "shuffle 7 map 3 attempt 0" */
};

/* An output that hashes what goes through it into one or two states (the
 * block's and the partition's), then forwards to the file. */
typedef struct tee_ctx {
  fsh_output *inner;
  XXH3_state_t *a, *b; /* b may be NULL */
} tee_ctx;

/* Bytes hashed, then forwarded, at a time: the write copies them while
 * they are still in cache (a whole block, up to 4 MiB, is not). */
#define TEE_CHUNK ((size_t)128 << 10)

static int tee_writev(fsh_output *o, const struct iovec *iov, int n, fsh_error *err) {
  tee_ctx *t = o->ctx;
  struct iovec v[64];
  int k = 0;
  size_t acc = 0;
  for (int i = 0; i < n; i++) {
    const uint8_t *p = iov[i].iov_base;
    size_t len = iov[i].iov_len;
    while (len > 0) {
      size_t take = len < TEE_CHUNK - acc ? len : TEE_CHUNK - acc;
      (void)HASH_UPDATE(t->a, p, take);
      if (t->b) (void)HASH_UPDATE(t->b, p, take);
      v[k++] = (struct iovec){(void *)p, take};
      acc += take, p += take, len -= take;
      if (acc == TEE_CHUNK || k == 64) {
        FSH_RETURN_NOT_OK(t->inner->writev(t->inner, v, k, err));
        k = 0, acc = 0;
      }
    }
  }
  return k ? t->inner->writev(t->inner, v, k, err) : 0;
}

/* Writes of fewer bytes than this are staged (below it a syscall costs
 * more than the copy); STAGE_BYTES of them are written at once. */
#define STAGE_DIRECT_BYTES ((int64_t)8 << 10)
#define STAGE_BYTES ((int64_t)256 << 10)

/* Writes the staged bytes to the file. */
static int stage_flush(fsh_map_file_writer *w, fsh_error *err) {
  if (w->staged == 0) return 0;
  struct iovec v = {w->stage, (size_t)w->staged};
  w->staged = 0;
  return w->out->writev(w->out, &v, 1, err);
}

/* The sink's writev: small writes are copied to the stage (flushed when
 * full), large ones flush it and go straight to the file. */
static int sink_writev(fsh_output *o, const struct iovec *iov, int n, fsh_error *err) {
  fsh_map_file_writer *w = o->ctx;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
  if (total >= STAGE_DIRECT_BYTES) {
    FSH_RETURN_NOT_OK(stage_flush(w, err));
    FSH_RETURN_NOT_OK(w->out->writev(w->out, iov, n, err));
  } else {
    if (!w->stage && !(w->stage = fsh_malloc((size_t)STAGE_BYTES)))
      return fsh_error_set(err, ENOMEM, "%s: out of memory for the write stage", o->name);
    if (w->staged + total > STAGE_BYTES) FSH_RETURN_NOT_OK(stage_flush(w, err));
    for (int i = 0; i < n; i++) {
      if (iov[i].iov_len) memcpy(w->stage + w->staged, iov[i].iov_base, iov[i].iov_len);
      w->staged += (int64_t)iov[i].iov_len;
    }
  }
  o->position += total;
  return 0;
}

/* A block that starts in the stage (see "staged" below) does not get
 * hashed as it is written: flush_partition's writes are at most this many
 * bytes from the stage's end when a block starts, or the stage is flushed
 * first (then a block of a few KiB stays in the stage whole). */
#define STAGE_ROOM_BYTES ((int64_t)64 << 10)

/* The output of one block: while `staged`, its bytes are copied to the
 * writer's stage, contiguous from stage offset `from`, unhashed; the
 * first write that would not fit there (or be written directly) hashes
 * what is staged of the block into the writer's block state (and the
 * partition's state `part`, if any) and from then on every write goes
 * through tee_writev. block_digest hashes a block still staged in one
 * call: XXH3 of bytes given in pieces equals XXH3 of their concatenation,
 * and the streaming state's per-call and buffering costs were ~14% of a
 * map task's CPU at 1000 x 1000 (a block of ~2.5 KiB in 4-5 pieces). */
typedef struct block_ctx {
  fsh_map_file_writer *w;
  XXH3_state_t *part; /* the partition's state, or NULL */
  bool staged;
  int64_t from;
} block_ctx;

static int block_writev(fsh_output *o, const struct iovec *iov, int n, fsh_error *err) {
  block_ctx *c = o->ctx;
  fsh_map_file_writer *w = c->w;
  if (c->staged) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
    if (total < STAGE_DIRECT_BYTES && w->staged + total <= STAGE_BYTES)
      return w->sink.writev(&w->sink, iov, n, err); /* copied to the stage, no flush */
    c->staged = false; /* the block so far, from the stage, then tee_writev */
    XXH3_64bits_reset(w->block_hash);
    const uint8_t *p = w->stage + c->from;
    size_t len = (size_t)(w->staged - c->from);
    if (len) {
      (void)HASH_UPDATE(w->block_hash, p, len);
      if (c->part) (void)HASH_UPDATE(c->part, p, len);
    }
  }
  tee_ctx t = {&w->sink, w->block_hash, c->part};
  fsh_output tee = {.writev = tee_writev, .ctx = &t, .name = o->name};
  return tee_writev(&tee, iov, n, err);
}

/* The checksum of the block written through c (complete). */
static uint64_t block_digest(block_ctx *c) {
  fsh_map_file_writer *w = c->w;
  if (!c->staged) return XXH3_64bits_digest(w->block_hash);
  const uint8_t *p = w->stage + c->from;
  size_t len = (size_t)(w->staged - c->from);
  if (c->part && len) (void)HASH_UPDATE(c->part, p, len);
  return HASH_BYTES(p, len);
}

uint64_t fsh_block_xxh3(const void *p, size_t n) { return HASH_BYTES(p, n); }

void fsh_block_xxh3_update(XXH3_state_t *state, const void *p, size_t n) {
  (void)HASH_UPDATE(state, p, n);
}

static XXH3_state_t *hash_state_new(void) {
  XXH3_state_t *s = fsh_aligned_alloc(sizeof(XXH3_state_t));
  if (s) XXH3_64bits_reset(s);
  return s;
}

static void part_clear_buffer(fsh_map_file_writer *w, part_buf *p) {
  for (int32_t i = 0; i < p->n; i++) fsh_batch_unref(p->batches[i]);
  p->n = 0;
  w->buffered -= p->buffered;
  p->buffered = 0;
}

static int writer_fail(fsh_map_file_writer *w, int rc, fsh_error *err) {
  w->failed = rc;
  rc = fsh_error_prefix(err, rc, "%s: ", w->what);
  snprintf(w->failure, sizeof w->failure, "%s", err ? err->message : "");
  return rc;
}

/* Room for one more block in p's list: the first in place, then a list
 * that doubles (from 4). ENOMEM, nothing changed, when it cannot grow. */
static int part_block_room(part_buf *p) {
  if (p->n_blocks < p->cap_blocks) return 0;
  if (p->cap_blocks == 0) {
    p->blocks = &p->first;
    p->cap_blocks = 1;
    return 0;
  }
  int64_t cap = p->cap_blocks < 4 ? 4 : p->cap_blocks * 2;
  bool in_place = p->blocks == &p->first;
  fsh_map_file_block *nb = fsh_realloc(in_place ? NULL : p->blocks, sizeof *nb * (size_t)cap);
  if (!nb) return ENOMEM;
  if (in_place) nb[0] = p->first;
  p->blocks = nb;
  p->cap_blocks = cap;
  return 0;
}

/* The partition's checksum: of all its blocks' bytes, in order. */
static uint64_t part_checksum(const part_buf *p) {
  return p->hash ? XXH3_64bits_digest(p->hash) : p->single ? p->single_sum : XXH3_64bits(NULL, 0);
}

static bool has_dictionaries(const fsh_field *f, int depth) {
  if (f->dictionary || depth > 64) return true;
  for (int64_t i = 0; i < f->n_children; i++)
    if (has_dictionaries(&f->children[i], depth + 1)) return true;
  return false;
}

static bool is_binary_type(fsh_type_id t) {
  return t == FSH_TYPE_BINARY || t == FSH_TYPE_STRING || t == FSH_TYPE_LARGE_BINARY ||
         t == FSH_TYPE_LARGE_STRING;
}

/* Partition pi's builder rows as one record batch message written to o
 * straight from the builder's memory, without a batch or payload: the
 * body laid out as fsh_ipc_body_append lays out the batch
 * fsh_partition_builder_take would make (per column a field node; its
 * validity buffer, empty without nulls; its values or offsets; a binary
 * column's bytes; each non-empty buffer padded to 8 bytes), the metadata
 * from the encoder (its template), so the bytes are the ones the take and
 * encode path writes. Only for w->enc (no dictionaries) without
 * compression. The partition is emptied in the builder. */
static int write_built(fsh_map_file_writer *w, int32_t pi, fsh_output *o, int64_t *rows_out,
                       fsh_error *err) {
  static const uint8_t zeros[8];
  int64_t n_cols = w->schema->n_fields, rows = fsh_partition_builder_rows(w->pb, pi);
  if (!w->nodes) {
    w->nodes = fsh_malloc(sizeof *w->nodes * (size_t)(n_cols ? n_cols : 1));
    w->ranges = fsh_malloc(sizeof *w->ranges * (size_t)(3 * n_cols + 1));
    w->iov = fsh_malloc(sizeof *w->iov * (size_t)(3 + 6 * n_cols));
    if (!w->nodes || !w->ranges || !w->iov) {
      fsh_free(w->nodes), fsh_free(w->ranges), fsh_free(w->iov);
      w->nodes = NULL, w->ranges = NULL, w->iov = NULL;
      return fsh_error_set(err, ENOMEM, "out of memory for a block's layout");
    }
  }
  int64_t nb = 0, body = 0;
  int k = 3; /* iov[0..2]: framing, metadata, its padding */
#define ADD_BUFFER(ptr, n)                                                   \
  do {                                                                       \
    int64_t n_ = (n);                                                        \
    w->ranges[nb++] = (fsh_ipc_range){body, n_};                             \
    if (n_ > 0) {                                                            \
      int64_t pad_ = (n_ + 7) / 8 * 8 - n_;                                  \
      w->iov[k++] = (struct iovec){(void *)(ptr), (size_t)n_};               \
      if (pad_) w->iov[k++] = (struct iovec){(void *)zeros, (size_t)pad_};   \
      body += n_ + pad_;                                                     \
    }                                                                        \
  } while (0)
  for (int64_t c = 0; c < n_cols; c++) {
    fsh_partition_builder_view v;
    fsh_partition_builder_view_column(w->pb, pi, c, &v);
    w->nodes[c] = (fsh_ipc_node){rows, v.null_count};
    ADD_BUFFER(v.validity, v.null_count > 0 ? v.validity_bytes : 0);
    ADD_BUFFER(v.values, v.values_bytes);
    if (is_binary_type(w->schema->fields[c].type)) ADD_BUFFER(v.data, v.data_bytes);
  }
#undef ADD_BUFFER
  const uint8_t *md = NULL; /* lent by the encoder until its next call */
  int64_t mlen = 0;
  FSH_RETURN_NOT_OK(fsh_ipc_encoder_batch_metadata(w->enc, rows, w->nodes, n_cols, w->ranges, nb,
                                                   body, &md, &mlen, err));
  int64_t mpad = (mlen + 7) / 8 * 8 - mlen;
  uint8_t prefix[8];
  put_u32(prefix, FSH_IPC_CONTINUATION);
  put_u32(prefix + 4, (uint32_t)(mlen + mpad));
  w->iov[0] = (struct iovec){prefix, 8};
  w->iov[1] = (struct iovec){(void *)md, (size_t)mlen};
  w->iov[2] = (struct iovec){(void *)zeros, (size_t)mpad}; /* 0 bytes: skipped by the writes */
  int rc = o->writev(o, w->iov, k, err);
  if (rc != 0) return rc;
  fsh_partition_builder_drop_rows(w->pb, pi);
  *rows_out = rows;
  return 0;
}

/* Encodes partition pi's buffered batches (with a fresh encoder when the
 * schema has dictionaries: every block carries its own) as one block and
 * appends it. The buffer is emptied either way. `last`: no block of the
 * partition follows (close) -- a partition of one block is then hashed
 * once, its checksum being the block's. */
static int flush_partition(fsh_map_file_writer *w, int32_t pi, bool last, fsh_error *err) {
  part_buf *p = &w->parts[pi];
  int rc = 0;
  /* only builder rows, no dictionaries, no compression: written from the
   * builder's memory (write_built) */
  bool built_only = p->built > 0 && p->n == 0 && w->enc &&
                    w->wopts.compression == FSH_COMPRESSION_NONE;
  if (p->built > 0 && !built_only) { /* the builder's rows come after the buffered batches */
    fsh_batch *b = NULL;
    if (p->n == p->cap) {
      int32_t cap = p->cap ? p->cap * 2 : 8;
      fsh_batch **nb = fsh_realloc(p->batches, sizeof *nb * (size_t)cap);
      if (!nb)
        return writer_fail(w, fsh_error_set(err, ENOMEM, "out of memory buffering a block"), err);
      p->batches = nb;
      p->cap = cap;
    }
    rc = fsh_partition_builder_take(w->pb, pi, &b, err);
    if (rc != 0) return writer_fail(w, rc, err);
    if (b) p->batches[p->n++] = b; /* borrows the builder: released below, before any append */
    p->buffered += p->built;
    p->built = 0;
  }
  if (p->n == 0 && !built_only) return 0;
  bool single = last && p->n_blocks == 0;
  if (part_block_room(p) != 0) rc = fsh_error_set(err, ENOMEM, "out of memory for the block list");
  if (rc == 0 && !single && !p->hash && !(p->hash = hash_state_new()))
    rc = fsh_error_set(err, ENOMEM, "out of memory for a checksum state");
  fsh_ipc_encoder *enc = w->enc;
  if (rc == 0 && !enc) rc = fsh_ipc_encoder_new(w->schema, &w->wopts, &enc, err);
  /* A block's bytes go to the stage while they fit there (small blocks:
   * many partitions, few rows each) and are hashed in one pass when it is
   * complete; a block that does not fit is hashed as it is written, into
   * the block's state and the partition's (a failed block kills the
   * writer, so a half-hashed partition state is never used). */
  if (rc == 0 && !w->stage && !(w->stage = fsh_malloc((size_t)STAGE_BYTES)))
    rc = fsh_error_set(err, ENOMEM, "out of memory for the write stage");
  if (rc == 0 && STAGE_BYTES - w->staged < STAGE_ROOM_BYTES) rc = stage_flush(w, err);
  block_ctx t = {.w = w, .part = single ? NULL : p->hash, .staged = true, .from = w->staged};
  fsh_output tee = {.writev = block_writev, .ctx = &t, .name = w->out->name};
  int64_t start = w->sink.position, rows = 0;
  if (rc == 0 && built_only) {
    rc = write_built(w, pi, &tee, &rows, err);
    w->buffered -= p->built;
    p->built = 0;
  }
  /* The block is one record batch (after its dictionaries) when its
   * batches concatenate; when they cannot (dictionaries that together
   * overflow their index type) each batch is its own message, as before. */
  fsh_batch *merged = NULL;
  if (rc == 0 && p->n > 1) {
    fsh_error cerr;
    int crc = fsh_concat(p->batches, p->n, &merged, &cerr);
    if (crc == ENOMEM) rc = fsh_error_set(err, ENOMEM, "out of memory coalescing a block");
    else if (crc != 0) merged = NULL; /* fall back to one message per batch */
  }
  fsh_batch *const *items = merged ? &merged : p->batches;
  int32_t n_items = merged ? 1 : p->n;
  for (int32_t i = 0; rc == 0 && i < n_items; i++) {
    fsh_ipc_payload *ps = NULL;
    int32_t np = 0;
    rc = fsh_ipc_encode_batch(enc, items[i], &ps, &np, err);
    for (int32_t k = 0; k < np; k++) {
      if (rc == 0) rc = fsh_ipc_write_payload(&tee, &ps[k], err);
      fsh_ipc_payload_reset(&ps[k]);
    }
    fsh_free(ps);
    rows += items[i]->length;
  }
  fsh_batch_unref(merged);
  if (enc != w->enc) fsh_ipc_encoder_free(enc);
  part_clear_buffer(w, p);
  if (rc != 0) return writer_fail(w, rc, err);
  int64_t len = w->sink.position - start;
  uint64_t sum = block_digest(&t);
  p->blocks[p->n_blocks++] = (fsh_map_file_block){
      .offset = start, .length = len, .rows = rows, .checksum = sum};
  if (single) p->single = true, p->single_sum = sum;
  p->rows += rows;
  p->bytes += len;
  w->n_blocks++;
  return 0;
}

/* Appends a whole stored block (framed IPC messages, self-contained) as
 * the next block of partition pi, copied without decoding: hashed into the
 * partition's checksum like any block; its own checksum is the one given
 * (the caller verified the bytes against it). The partition's buffered
 * batches, if any, are written first (their own block). */
int fsh_map_file_writer_write_block(fsh_map_file_writer *w, int32_t partition,
                                    const uint8_t *data, int64_t len, int64_t rows,
                                    uint64_t checksum, fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, w->failed, "the writer failed earlier: %s", w->failure);
  if (partition < 0 || partition >= w->n_partitions || len < 0 || rows < 0 || len % 8 != 0)
    return fsh_error_set(err, EINVAL, "%s: a stored block of %lld bytes, %lld rows for partition "
                         "%d of %d", w->what, (long long)len, (long long)rows, partition,
                         w->n_partitions);
  if (w->parts[partition].finished)
    return fsh_error_set(err, EINVAL, "%s: a stored block for partition %d, already finished",
                         w->what, partition);
  FSH_RETURN_NOT_OK(flush_partition(w, partition, false, err));
  part_buf *p = &w->parts[partition];
  if (part_block_room(p) != 0)
    return fsh_error_set(err, ENOMEM, "%s: out of memory for the block list", w->what);
  if (!p->hash && !(p->hash = hash_state_new()))
    return fsh_error_set(err, ENOMEM, "%s: out of memory for a checksum state", w->what);
  tee_ctx t = {&w->sink, p->hash, NULL};
  fsh_output tee = {.writev = tee_writev, .ctx = &t, .name = w->out->name};
  int64_t start = w->sink.position;
  struct iovec v = {(void *)data, (size_t)len};
  int rc = len > 0 ? tee.writev(&tee, &v, 1, err) : 0;
  if (rc != 0) return writer_fail(w, rc, err);
  p->blocks[p->n_blocks++] = (fsh_map_file_block){
      .offset = start, .length = len, .rows = rows, .checksum = checksum};
  p->rows += rows;
  p->bytes += len;
  w->n_blocks++;
  return 0;
}

int fsh_map_file_writer_open(fsh_output *out, const fsh_shuffle_spec *spec, int64_t map_id,
                             int32_t attempt, const fsh_map_file_options *opts,
                             fsh_map_file_writer **w_out, fsh_error *err) {
  fsh_map_file_writer *w = fsh_calloc(1, sizeof *w);
  if (!w) {
    int rc = fsh_error_set(err, ENOMEM, "map-output file %s: out of memory", out->name);
    out->close(out, true, NULL);
    return rc;
  }
  w->out = out;
  w->schema = fsh_schema_ref(spec->schema);
  fsh_ipc_write_options_init(&w->wopts);
  w->wopts.compression = opts ? opts->compression : spec->compression;
  w->wopts.compression_level = opts ? opts->compression_level : 0;
  w->shuffle_id = spec->shuffle_id;
  w->map_id = map_id;
  w->attempt = attempt;
  w->n_partitions = spec->n_partitions;
  w->target = opts && opts->target_block_bytes > 0 ? opts->target_block_bytes
              : spec->target_block_bytes > 0        ? spec->target_block_bytes
                                                    : FSH_MAP_FILE_DEFAULT_BLOCK_BYTES;
  w->max_buffered = opts && opts->max_buffered_bytes > 0 ? opts->max_buffered_bytes
                                                         : FSH_MAP_FILE_DEFAULT_BUFFERED_BYTES;
  w->builder_keep = opts ? opts->builder_keep_bytes : 0;
  snprintf(w->what, sizeof w->what, "shuffle %" PRIu64 " map %" PRId64 " attempt %" PRId32,
           w->shuffle_id, map_id, attempt);
  int rc = 0;
  w->parts = fsh_calloc((size_t)spec->n_partitions, sizeof *w->parts);
  w->block_hash = hash_state_new();
  if (!w->parts || !w->block_hash)
    rc = fsh_error_set(err, ENOMEM, "%s: out of memory for %d partitions", w->what,
                       spec->n_partitions);
  fsh_ipc_encoder *enc = NULL;
  fsh_ipc_payload p = {0};
  if (rc == 0) rc = fsh_ipc_encoder_new(w->schema, &w->wopts, &enc, err);
  if (rc == 0) rc = fsh_ipc_encode_schema(enc, &p, err);
  if (rc == 0) {
    XXH3_64bits_reset(w->block_hash);
    tee_ctx t = {out, w->block_hash, NULL};
    fsh_output tee = {.writev = tee_writev, .ctx = &t, .name = out->name};
    rc = fsh_ipc_write_payload(&tee, &p, err);
    w->schema_hash = XXH3_64bits_digest(w->block_hash);
  }
  fsh_ipc_payload_reset(&p);
  bool dicts = false;
  for (int64_t i = 0; i < w->schema->n_fields; i++) dicts |= has_dictionaries(&w->schema->fields[i], 0);
  if (rc == 0 && !dicts) w->enc = enc; /* kept for the blocks */
  else fsh_ipc_encoder_free(enc);
  if (rc != 0) {
    if (rc != ENOMEM) rc = fsh_error_prefix(err, rc, "%s: ", w->what);
    fsh_map_file_writer_abort(w);
    return rc;
  }
  w->schema_length = out->position;
  w->sink = (fsh_output){.writev = sink_writev, .ctx = w, .name = out->name,
                         .position = out->position};
  *w_out = w;
  return 0;
}

int fsh_map_file_writer_write(fsh_map_file_writer *w, int32_t partition, fsh_batch *batch,
                              fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, w->failed, "the writer failed earlier: %s", w->failure);
  if (partition < 0 || partition >= w->n_partitions)
    return fsh_error_set(err, EINVAL, "%s: write to partition %d of %d", w->what, partition,
                         w->n_partitions);
  part_buf *p = &w->parts[partition];
  if (p->finished)
    return fsh_error_set(err, EINVAL, "%s: write to partition %d, already finished", w->what,
                         partition);
  /* rows in the builder came first: written out before (a batch may not
   * wait behind them: the builder's memory is reused) */
  if (p->built > 0) FSH_RETURN_NOT_OK(flush_partition(w, partition, false, err));
  if (p->n == p->cap) {
    int32_t cap = p->cap ? p->cap * 2 : 8;
    fsh_batch **nb = fsh_realloc(p->batches, sizeof *nb * (size_t)cap);
    if (!nb) return fsh_error_set(err, ENOMEM, "%s: out of memory buffering a batch", w->what);
    p->batches = nb;
    p->cap = cap;
  }
  int64_t bytes = fsh_shuffle_batch_bytes(batch);
  p->batches[p->n++] = fsh_batch_ref(batch);
  p->buffered += bytes;
  w->buffered += bytes;
  if (p->buffered >= w->target) return flush_partition(w, partition, false, err);
  if (w->buffered > w->max_buffered)
    for (int32_t i = 0; i < w->n_partitions; i++)
      FSH_RETURN_NOT_OK(flush_partition(w, i, false, err));
  return 0;
}

int fsh_map_file_writer_write_rows(fsh_map_file_writer *w, fsh_batch *batch,
                                   const int32_t *partition_of_row, fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, w->failed, "the writer failed earlier: %s", w->failure);
  if (w->any_finished) /* rows may go to any partition: not after a finish */
    return fsh_error_set(err, EINVAL, "%s: rows written after a partition was finished", w->what);
  if (!w->pb) {
    if (!fsh_partition_builder_supports(w->schema))
      return fsh_error_set(err, ENOTSUP, "%s: the schema has a column the partition builders do "
                           "not take", w->what);
    int rc = fsh_partition_builder_new(w->schema, w->n_partitions, &w->pb, err);
    if (rc != 0) return fsh_error_prefix(err, rc, "%s: ", w->what);
    fsh_partition_builder_set_keep_bytes(w->pb, w->builder_keep);
  }
  int rc = fsh_partition_builder_append(w->pb, batch, partition_of_row, err);
  if (rc == EINVAL) return fsh_error_prefix(err, rc, "%s: ", w->what); /* nothing appended */
  if (rc != 0) return writer_fail(w, rc, err);
  for (int32_t i = 0; i < w->n_partitions; i++) {
    part_buf *p = &w->parts[i];
    int64_t built = fsh_partition_builder_bytes(w->pb, i);
    w->buffered += built - p->built;
    p->built = built;
    if (p->buffered + p->built >= w->target) FSH_RETURN_NOT_OK(flush_partition(w, i, false, err));
  }
  if (w->buffered > w->max_buffered)
    for (int32_t i = 0; i < w->n_partitions; i++)
      FSH_RETURN_NOT_OK(flush_partition(w, i, false, err));
  return 0;
}

int fsh_map_file_writer_finish_partition(fsh_map_file_writer *w, int32_t partition,
                                         fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, w->failed, "the writer failed earlier: %s", w->failure);
  if (partition < 0 || partition >= w->n_partitions)
    return fsh_error_set(err, EINVAL, "%s: finish partition %d of %d", w->what, partition,
                         w->n_partitions);
  w->any_finished = true;
  w->parts[partition].finished = true;
  return flush_partition(w, partition, true, err);
}

int64_t fsh_map_file_writer_builder_bytes(const fsh_map_file_writer *w) {
  return fsh_partition_builder_capacity(w->pb);
}

static void free_writer(fsh_map_file_writer *w) {
  if (w->parts) {
    for (int32_t i = 0; i < w->n_partitions; i++) {
      part_buf *p = &w->parts[i];
      part_clear_buffer(w, p);
      fsh_free(p->batches);
      if (p->blocks != &p->first) fsh_free(p->blocks);
      if (p->hash) fsh_aligned_free(p->hash, sizeof(XXH3_state_t));
    }
    fsh_free(w->parts);
  }
  if (w->block_hash) fsh_aligned_free(w->block_hash, sizeof(XXH3_state_t));
  fsh_free(w->stage);
  fsh_free(w->nodes);
  fsh_free(w->ranges);
  fsh_free(w->iov);
  fsh_partition_builder_free(w->pb);
  fsh_ipc_encoder_free(w->enc);
  fsh_schema_unref(w->schema);
  fsh_free(w);
}

void fsh_map_file_writer_abort(fsh_map_file_writer *w) {
  if (!w) return;
  if (w->out) w->out->close(w->out, true, NULL);
  free_writer(w);
}

/* Builds the index and trailer (layout in shuffle_internal.h). */
static int build_index(fsh_map_file_writer *w, int64_t data_end, fsh_buffer **out,
                       fsh_error *err) {
  int64_t n_parts = w->n_partitions;
  int64_t index_len = FSH_MAP_FILE_HEADER_BYTES + FSH_MAP_FILE_ENTRY_BYTES * n_parts +
                      FSH_MAP_FILE_BLOCK_BYTES * w->n_blocks;
  fsh_buffer *buf = fsh_buffer_new(index_len + FSH_MAP_FILE_TRAILER_BYTES, true);
  if (!buf) return fsh_error_set(err, ENOMEM, "%s: out of memory for the index", w->what);
  uint8_t *h = buf->data;
  put_u32(h, FSH_MAP_FILE_VERSION);
  put_u32(h + 4, (uint32_t)n_parts);
  put_u64(h + 8, w->shuffle_id);
  put_u64(h + 16, (uint64_t)w->map_id);
  put_u32(h + 24, (uint32_t)w->attempt);
  put_u32(h + 28, (uint32_t)w->wopts.compression);
  put_u64(h + 32, (uint64_t)w->schema_length);
  put_u64(h + 40, (uint64_t)data_end);
  put_u64(h + 48, (uint64_t)w->n_blocks);
  put_u64(h + 56, w->schema_hash);
  uint8_t *entries = h + FSH_MAP_FILE_HEADER_BYTES;
  uint8_t *blocks = entries + FSH_MAP_FILE_ENTRY_BYTES * n_parts;
  int64_t first = 0;
  for (int64_t i = 0; i < n_parts; i++) {
    const part_buf *p = &w->parts[i];
    uint8_t *e = entries + FSH_MAP_FILE_ENTRY_BYTES * i;
    uint8_t *b0 = blocks + FSH_MAP_FILE_BLOCK_BYTES * first;
    put_u64(e, (uint64_t)p->rows);
    put_u64(e + 8, (uint64_t)p->bytes);
    put_u64(e + 16, part_checksum(p));
    put_u64(e + 24, (uint64_t)first);
    put_u64(e + 32, (uint64_t)p->n_blocks);
    for (int64_t k = 0; k < p->n_blocks; k++) {
      uint8_t *b = b0 + FSH_MAP_FILE_BLOCK_BYTES * k;
      put_u64(b, (uint64_t)p->blocks[k].offset);
      put_u64(b + 8, (uint64_t)p->blocks[k].length);
      put_u64(b + 16, (uint64_t)p->blocks[k].rows);
      put_u64(b + 24, p->blocks[k].checksum);
    }
    XXH3_64bits_reset(w->block_hash);
    XXH3_64bits_update(w->block_hash, e, 40);
    XXH3_64bits_update(w->block_hash, b0, (size_t)(FSH_MAP_FILE_BLOCK_BYTES * p->n_blocks));
    put_u64(e + 40, XXH3_64bits_digest(w->block_hash));
    first += p->n_blocks;
  }
  uint8_t *t = h + index_len;
  put_u64(t, (uint64_t)index_len);
  put_u64(t + 8, XXH3_64bits(h, FSH_MAP_FILE_HEADER_BYTES));
  memcpy(t + 16, FSH_MAP_FILE_MAGIC, 8);
  *out = buf;
  return 0;
}

/* Partitions of at most this many builder bytes have them prefetched at
 * close, one partition ahead (larger ones stream well on their own). */
#define PREFETCH_BLOCK_BYTES ((int64_t)16 << 10)

int fsh_map_file_writer_close(fsh_map_file_writer *w, fsh_map_output *out, fsh_error *err) {
  if (w->failed) {
    int rc = fsh_error_set(err, w->failed, "nothing was kept: the writer failed earlier: %s",
                           w->failure);
    fsh_map_file_writer_abort(w);
    return rc;
  }
  fsh_map_output m = {0};
  int rc = fsh_map_output_alloc(&m, w->shuffle_id, w->map_id, w->attempt, w->n_partitions, err);
  for (int32_t i = 0; rc == 0 && i < w->n_partitions; i++) {
    /* small blocks (many partitions) are copied from builder memory that
     * is out of L2 by now, a few hundred bytes per buffer: the next
     * partition's lines are asked for while this one is copied (1000
     * partitions, 2 MiB maps, one thread, caches flushed between maps:
     * the close's CPU -10%) */
    if (w->pb && i + 1 < w->n_partitions && w->parts[i + 1].built > 0 &&
        w->parts[i + 1].built <= PREFETCH_BLOCK_BYTES)
      fsh_partition_builder_prefetch(w->pb, i + 1, PREFETCH_BLOCK_BYTES);
    rc = flush_partition(w, i, true, err);
  }
  int64_t data_end = w->sink.position;
  fsh_buffer *index = NULL;
  if (rc == 0) {
    struct iovec v = {(void *)k_eos, sizeof k_eos};
    int wrc = w->sink.writev(&w->sink, &v, 1, err);
    if (wrc == 0) wrc = build_index(w, data_end, &index, err);
    if (wrc == 0) {
      struct iovec vi = {index->data, (size_t)index->size};
      wrc = w->sink.writev(&w->sink, &vi, 1, err);
    }
    if (wrc == 0) wrc = stage_flush(w, err);
    if (wrc == 0 && w->out->position != w->sink.position)
      wrc = fsh_error_set(err, EIO, "%lld bytes reached the file, %lld were written",
                          (long long)w->out->position, (long long)w->sink.position);
    if (wrc != 0) rc = wrc == ENOMEM ? wrc : fsh_error_prefix(err, wrc, "%s: ", w->what);
  }
  fsh_buffer_unref(index);
  if (rc != 0) {
    fsh_map_output_reset(&m);
    fsh_map_file_writer_abort(w);
    return rc;
  }
  fsh_output *o = w->out;
  w->out = NULL;
  rc = o->close(o, false, err);
  if (rc != 0) {
    rc = fsh_error_prefix(err, rc, "%s: ", w->what);
    fsh_map_output_reset(&m);
    free_writer(w);
    return rc;
  }
  for (int32_t i = 0; i < w->n_partitions; i++) {
    const part_buf *p = &w->parts[i];
    m.rows[i] = p->rows;
    m.bytes[i] = p->bytes;
    m.checksums[i] = part_checksum(p);
  }
  free_writer(w);
  *out = m;
  return 0;
}

/* ---- reader ------------------------------------------------------------ */

/* What fsh_map_file_open verifies once: shared by later opens of the
 * same stored bytes (fsh_map_file_open_head). Immutable once built; it
 * holds no reference on the input (a store's image can be freed). */
struct fsh_map_file_head {
  atomic_int refs;
  fsh_map_file_info info;
  uint64_t schema_hash;
  fsh_buffer *schema_meta; /* a copy of the schema message's metadata */
  fsh_schema *schema;
  char what[128]; /* the file's what (below) */
};

struct fsh_map_file {
  fsh_input *in;           /* NULL for an image until fsh_map_file_input */
  fsh_buffer *image;       /* open_image: the whole file in memory (reference) */
  char image_name[128];    /* and its name (messages) */
  fsh_map_file_info info;
  uint64_t schema_hash;
  fsh_map_file_head *head; /* the verified schema */
  fsh_ipc_decoder *dec;    /* made on first cursor; dictionaries per block */
  char what[128];          /* "shuffle 7 map 3 attempt 0 (path)" */
};

static int malformed(fsh_input *in, fsh_error *err, const char *fmt, ...) FSH_PRINTF(3, 4);
static int malformed(fsh_input *in, fsh_error *err, const char *fmt, ...) {
  char detail[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return fsh_error_set(err, EINVAL, "%s: not a valid map-output file: %s", in->name, detail);
}

/* Reads exactly n bytes at offset (short read: EINVAL, the file shrank or
 * lies about its size). */
static int read_exact_at(fsh_input *in, int64_t offset, int64_t n, fsh_buffer **out,
                         fsh_error *err) {
  fsh_buffer *b = NULL;
  FSH_RETURN_NOT_OK(in->read_at(in, offset, n, &b, err));
  if (b->size != n) {
    int64_t got = b->size;
    fsh_buffer_unref(b);
    return fsh_error_set(err, EIO, "%s: short read at offset %lld (%lld of %lld bytes)", in->name,
                         (long long)offset, (long long)got, (long long)n);
  }
  *out = b;
  return 0;
}

/* The file's name for messages. */
static const char *fname(const fsh_map_file *f) {
  return f->in ? f->in->name : f->image_name;
}

/* read_exact_at on f's bytes: a slice of its image, or a read. */
static int file_read_at(fsh_map_file *f, int64_t offset, int64_t n, fsh_buffer **out,
                        fsh_error *err) {
  if (!f->image) return read_exact_at(f->in, offset, n, out, err);
  if (offset < 0 || n < 0 || offset > f->image->size - n)
    return fsh_error_set(err, EIO, "%s: short read at offset %lld (%lld bytes past its %lld)",
                         f->image_name, (long long)offset, (long long)n,
                         (long long)f->image->size);
  if (!(*out = fsh_buffer_slice(f->image, offset, n)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  return 0;
}

/* Checks the header fields against each other and the file size. */
static int parse_header(fsh_map_file *f, const uint8_t *h, int64_t index_len, fsh_error *err) {
  fsh_input *in = f->in;
  fsh_map_file_info *i = &f->info;
  uint32_t version = get_u32(h), n_parts = get_u32(h + 4), compression = get_u32(h + 28);
  i->shuffle_id = get_u64(h + 8);
  i->map_id = get_i64(h + 16);
  i->attempt = (int32_t)get_u32(h + 24);
  i->schema_length = get_i64(h + 32);
  i->data_end = get_i64(h + 40);
  i->n_blocks = get_i64(h + 48);
  f->schema_hash = get_u64(h + 56);
  if (version != FSH_MAP_FILE_VERSION)
    return malformed(in, err, "index version %u (this reader knows %d)", version,
                     FSH_MAP_FILE_VERSION);
  if (n_parts < 1 || n_parts > INT32_MAX)
    return malformed(in, err, "%u partitions", n_parts);
  i->n_partitions = (int32_t)n_parts;
  if (compression > FSH_COMPRESSION_ZSTD)
    return malformed(in, err, "unknown compression %u", compression);
  i->compression = (fsh_compression)compression;
  if (i->map_id < 0 || i->attempt < 0)
    return malformed(in, err, "map id %" PRId64 ", attempt %" PRId32, i->map_id, i->attempt);
  int64_t index_off = i->file_size - FSH_MAP_FILE_TRAILER_BYTES - index_len;
  if (i->schema_length < 16 || i->schema_length % 8 || i->data_end < i->schema_length ||
      i->data_end % 8 || i->data_end + 8 != index_off)
    return malformed(in, err, "schema length %" PRId64 " and data end %" PRId64
                     " do not fit the file", i->schema_length, i->data_end);
  int64_t room = index_len - FSH_MAP_FILE_HEADER_BYTES - FSH_MAP_FILE_ENTRY_BYTES * (int64_t)n_parts;
  if (room < 0 || i->n_blocks < 0 || room != FSH_MAP_FILE_BLOCK_BYTES * i->n_blocks)
    return malformed(in, err, "an index of %" PRId64 " bytes does not hold %" PRId64 " blocks",
                     index_len, i->n_blocks);
  return 0;
}

/* A decoder holding h's schema (decoded anew from its metadata). */
static int head_decoder(const fsh_map_file_head *h, fsh_ipc_decoder **out, fsh_error *err) {
  fsh_batch *none = NULL;
  fsh_ipc_decoder *d = NULL;
  int rc = fsh_ipc_decoder_new(&d, err);
  if (rc == 0) rc = fsh_ipc_decode_message(d, h->schema_meta, NULL, &none, err);
  fsh_batch_unref(none);
  if (rc != 0) {
    fsh_ipc_decoder_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

/* Reads and decodes the schema message [0, schema_length) into a new
 * f->head (with f's info) and f->dec. */
static int read_schema(fsh_map_file *f, fsh_error *err) {
  fsh_buffer *b = NULL;
  FSH_RETURN_NOT_OK(read_exact_at(f->in, 0, f->info.schema_length, &b, err));
  int rc = 0;
  int64_t len = get_u32(b->data + 4);
  if (XXH3_64bits(b->data, (size_t)b->size) != f->schema_hash)
    rc = malformed(f->in, err, "schema message checksum mismatch");
  else if (get_u32(b->data) != 0xFFFFFFFFu || len % 8 || 8 + len != b->size)
    rc = malformed(f->in, err, "bad schema message framing (length %" PRId64 " in %" PRId64
                   " bytes)", len, b->size);
  fsh_ipc_message_type type = FSH_IPC_NONE;
  int64_t body = 0;
  fsh_map_file_head *h = rc == 0 ? fsh_calloc(1, sizeof *h) : NULL;
  if (h) atomic_init(&h->refs, 1);
  if (rc == 0 && (!h || !(h->schema_meta = fsh_buffer_new(len, false))))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (rc == 0) {
    h->info = f->info;
    h->schema_hash = f->schema_hash;
    memcpy(h->schema_meta->data, b->data + 8, (size_t)len); /* not a slice: b may be an image */
    rc = fsh_ipc_peek_message(h->schema_meta, &type, &body, err);
  }
  if (rc == 0 && (type != FSH_IPC_SCHEMA || body != 0))
    rc = malformed(f->in, err, "the file starts with message type %d, body %" PRId64
                   ", not a schema", (int)type, body);
  if (rc == 0) rc = head_decoder(h, &f->dec, err);
  if (rc == 0) h->schema = fsh_schema_ref(fsh_ipc_decoder_schema(f->dec));
  fsh_buffer_unref(b);
  if (h) f->head = h;
  if (rc != 0 && rc != ENOMEM) rc = fsh_error_prefix(err, rc, "%s: schema: ", f->in->name);
  return rc;
}

int fsh_map_file_open(fsh_input *in, fsh_map_file **out, fsh_error *err) {
  fsh_map_file *f = fsh_calloc(1, sizeof *f);
  if (!f) {
    int rc = fsh_error_set(err, ENOMEM, "opening %s: out of memory", in->name);
    in->close(in);
    return rc;
  }
  f->in = in;
  int rc = 0;
  fsh_buffer *t = NULL, *h = NULL, *eos = NULL;
  int64_t size = f->info.file_size = in->size(in);
  if (size < 0)
    rc = fsh_error_set(err, ENOTSUP, "%s: a map-output file must be seekable", in->name);
  else if (size < 16 + 8 + FSH_MAP_FILE_HEADER_BYTES + FSH_MAP_FILE_ENTRY_BYTES +
                      FSH_MAP_FILE_TRAILER_BYTES)
    rc = malformed(in, err, "%" PRId64 " bytes is too small", size);
  if (rc == 0) rc = read_exact_at(in, size - FSH_MAP_FILE_TRAILER_BYTES,
                                  FSH_MAP_FILE_TRAILER_BYTES, &t, err);
  int64_t index_len = 0;
  if (rc == 0) {
    index_len = get_i64(t->data);
    if (memcmp(t->data + 16, FSH_MAP_FILE_MAGIC, 8) != 0)
      rc = malformed(in, err, "no " FSH_MAP_FILE_MAGIC " trailer (truncated, or not a map "
                     "output)");
    else if (index_len < FSH_MAP_FILE_HEADER_BYTES + FSH_MAP_FILE_ENTRY_BYTES ||
             index_len > size - FSH_MAP_FILE_TRAILER_BYTES - 24)
      rc = malformed(in, err, "index length %" PRId64 " in a file of %" PRId64 " bytes",
                     index_len, size);
  }
  if (rc == 0)
    rc = read_exact_at(in, size - FSH_MAP_FILE_TRAILER_BYTES - index_len,
                       FSH_MAP_FILE_HEADER_BYTES, &h, err);
  if (rc == 0 && XXH3_64bits(h->data, FSH_MAP_FILE_HEADER_BYTES) != get_u64(t->data + 8))
    rc = malformed(in, err, "index header checksum mismatch");
  if (rc == 0) rc = parse_header(f, h->data, index_len, err);
  if (rc == 0) rc = read_exact_at(in, f->info.data_end, 8, &eos, err);
  if (rc == 0 && memcmp(eos->data, k_eos, 8) != 0)
    rc = malformed(in, err, "no end-of-stream marker at offset %" PRId64, f->info.data_end);
  if (rc == 0) rc = read_schema(f, err);
  fsh_buffer_unref(t);
  fsh_buffer_unref(h);
  fsh_buffer_unref(eos);
  if (rc != 0) {
    fsh_map_file_close(f);
    return rc;
  }
  snprintf(f->what, sizeof f->what, "shuffle %" PRIu64 " map %" PRId64 " attempt %" PRId32,
           f->info.shuffle_id, f->info.map_id, f->info.attempt);
  memcpy(f->head->what, f->what, sizeof f->what); /* not shared yet */
  *out = f;
  return 0;
}

int fsh_map_file_open_path(const char *path, fsh_map_file **out, fsh_error *err) {
  fsh_input *in = NULL;
  FSH_RETURN_NOT_OK(fsh_input_open_path(path, &in, err));
  return fsh_map_file_open(in, out, err);
}

void fsh_map_file_close(fsh_map_file *f) {
  if (!f) return;
  fsh_ipc_decoder_free(f->dec);
  fsh_map_file_head_unref(f->head);
  if (f->in) f->in->close(f->in);
  fsh_buffer_unref(f->image);
  fsh_free(f);
}

fsh_map_file_head *fsh_map_file_head_of(const fsh_map_file *f) { return f->head; }

fsh_map_file_head *fsh_map_file_head_ref(fsh_map_file_head *h) {
  atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
  return h;
}

void fsh_map_file_head_unref(fsh_map_file_head *h) {
  if (!h || atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1) return;
  fsh_buffer_unref(h->schema_meta);
  fsh_schema_unref(h->schema);
  fsh_free(h);
}

int fsh_map_file_open_head(fsh_input *in, fsh_map_file_head *h, fsh_map_file **out,
                           fsh_error *err) {
  int64_t size = in->size(in);
  if (size != h->info.file_size) {
    int rc = fsh_error_set(err, EIO, "%s: shuffle %" PRIu64 " map %" PRId64 " attempt %" PRId32
                           ": the stored map output changed size (%" PRId64 " bytes, %" PRId64
                           " when it was verified)", in->name, h->info.shuffle_id,
                           h->info.map_id, h->info.attempt, size, h->info.file_size);
    in->close(in);
    return rc;
  }
  fsh_map_file *f = fsh_calloc(1, sizeof *f);
  if (!f) {
    int rc = fsh_error_set(err, ENOMEM, "opening %s: out of memory", in->name);
    in->close(in);
    return rc;
  }
  f->in = in;
  f->info = h->info;
  f->schema_hash = h->schema_hash;
  f->head = fsh_map_file_head_ref(h);
  memcpy(f->what, h->what, sizeof f->what);
  *out = f;
  return 0;
}

fsh_buffer *fsh_map_file_schema_message(const fsh_map_file *f) { return f->head->schema_meta; }
const fsh_map_file_info *fsh_map_file_get_info(const fsh_map_file *f) { return &f->info; }
fsh_schema *fsh_map_file_schema(const fsh_map_file *f) { return f->head->schema; }
fsh_input *fsh_map_file_input(const fsh_map_file *f) {
  fsh_map_file *m = (fsh_map_file *)f; /* the input is made on first use */
  if (!m->in && m->image) {
    fsh_error e;
    if (fsh_input_from_buffer_named(m->image, m->image_name, &m->in, &e) != 0) m->in = NULL;
  }
  return m->in;
}

const char *fsh_map_file_name(const fsh_map_file *f) { return fname(f); }
bool fsh_map_file_is_image(const fsh_map_file *f) { return f->image != NULL; }

int fsh_map_file_open_image(fsh_buffer *image, const char *name, fsh_map_file_head *h,
                            fsh_map_file **out, fsh_error *err) {
  if (image->size != h->info.file_size)
    return fsh_error_set(err, EIO, "%s: shuffle %" PRIu64 " map %" PRId64 " attempt %" PRId32
                         ": the stored map output changed size (%" PRId64 " bytes, %" PRId64
                         " when it was verified)", name, h->info.shuffle_id, h->info.map_id,
                         h->info.attempt, image->size, h->info.file_size);
  fsh_map_file *f = fsh_calloc(1, sizeof *f);
  if (!f) return fsh_error_set(err, ENOMEM, "opening %s: out of memory", name);
  f->image = fsh_buffer_ref(image);
  size_t n = strlen(name);
  if (n >= sizeof f->image_name) n = sizeof f->image_name - 1;
  memcpy(f->image_name, name, n);
  f->info = h->info;
  f->schema_hash = h->schema_hash;
  f->head = fsh_map_file_head_ref(h);
  memcpy(f->what, h->what, sizeof f->what);
  *out = f;
  return 0;
}

void fsh_map_file_partition_reset(fsh_map_file_partition *p) {
  fsh_free(p->blocks);
  memset(p, 0, sizeof *p);
}

/* Checks entry fields and blocks against the file. */
static int check_partition(fsh_map_file *f, const fsh_map_file_partition *p, int64_t first,
                           fsh_error *err) {
  const fsh_map_file_info *i = &f->info;
  int64_t rows = 0, bytes = 0;
  if (p->rows < 0 || p->bytes < 0 || first < 0 || p->n_blocks < 0 ||
      first > i->n_blocks - p->n_blocks)
    goto bad;
  for (int64_t k = 0; k < p->n_blocks; k++) {
    const fsh_map_file_block *b = &p->blocks[k];
    if (b->offset < i->schema_length || b->offset % 8 || b->length < 8 || b->length % 8 ||
        b->offset > i->data_end - b->length || b->rows < 0 || b->rows > INT64_MAX - rows)
      return fsh_error_set(err, EINVAL,
                           "%s: not a valid map-output file: %s partition %d block %lld: offset "
                           "%lld length %lld rows %lld outside the data [%lld, %lld)",
                           fname(f), f->what, p->partition, (long long)k, (long long)b->offset,
                           (long long)b->length, (long long)b->rows,
                           (long long)i->schema_length, (long long)i->data_end);
    rows += b->rows;
    bytes += b->length;
  }
  if (rows != p->rows || bytes != p->bytes) goto bad;
  return 0;
bad:
  return fsh_error_set(err, EINVAL,
                       "%s: not a valid map-output file: %s partition %d: entry (rows %lld, bytes "
                       "%lld, first block %lld, %lld blocks) inconsistent with its blocks",
                       fname(f), f->what, p->partition, (long long)p->rows,
                       (long long)p->bytes, (long long)first, (long long)p->n_blocks);
}

int fsh_map_file_get_partition(fsh_map_file *f, int32_t partition, fsh_map_file_partition *out,
                               fsh_error *err) {
  const fsh_map_file_info *i = &f->info;
  if (partition < 0 || partition >= i->n_partitions)
    return fsh_error_set(err, EINVAL, "%s (%s): partition %d of %d", f->what, fname(f),
                         partition, i->n_partitions);
  int64_t index_off = i->data_end + 8;
  int64_t entry_off = index_off + FSH_MAP_FILE_HEADER_BYTES +
                      (int64_t)FSH_MAP_FILE_ENTRY_BYTES * partition;
  int64_t blocks_off = index_off + FSH_MAP_FILE_HEADER_BYTES +
                       (int64_t)FSH_MAP_FILE_ENTRY_BYTES * i->n_partitions;
  /* an image's index is read in place (its bounds: checked at its first
   * open, the image's size since); a file's is read */
  fsh_buffer *eb = NULL, *bb = NULL;
  const uint8_t *e = NULL, *bl = NULL;
  if (f->image) e = f->image->data + entry_off;
  else FSH_RETURN_NOT_OK(read_exact_at(f->in, entry_off, FSH_MAP_FILE_ENTRY_BYTES, &eb, err));
  if (eb) e = eb->data;
  fsh_map_file_partition p = {.partition = partition};
  p.rows = get_i64(e);
  p.bytes = get_i64(e + 8);
  p.checksum = get_u64(e + 16);
  int64_t first = get_i64(e + 24);
  p.n_blocks = get_i64(e + 32);
  int64_t bl_len = 0;
  int rc = 0;
  if (first < 0 || p.n_blocks < 0 || first > i->n_blocks || p.n_blocks > i->n_blocks - first)
    rc = check_partition(f, &p, first, err); /* reports the bad entry */
  else
    bl_len = FSH_MAP_FILE_BLOCK_BYTES * p.n_blocks; /* in the index: no overflow */
  if (rc == 0 && p.n_blocks > 0 && f->image)
    bl = f->image->data + blocks_off + FSH_MAP_FILE_BLOCK_BYTES * first;
  else if (rc == 0 && p.n_blocks > 0)
    rc = read_exact_at(f->in, blocks_off + FSH_MAP_FILE_BLOCK_BYTES * first, bl_len, &bb, err);
  if (bb) bl = bb->data;
  if (rc == 0) {
    uint64_t h;
    if (!bl || bl_len <= 8 * FSH_MAP_FILE_BLOCK_BYTES) { /* one call over a copy */
      uint8_t tmp[40 + 8 * FSH_MAP_FILE_BLOCK_BYTES];
      memcpy(tmp, e, 40);
      if (bl) memcpy(tmp + 40, bl, (size_t)bl_len);
      h = XXH3_64bits(tmp, 40 + (bl ? (size_t)bl_len : 0));
    } else {
      XXH3_state_t s; /* on the stack: its type carries its alignment */
      XXH3_64bits_reset(&s);
      XXH3_64bits_update(&s, e, 40);
      XXH3_64bits_update(&s, bl, (size_t)bl_len);
      h = XXH3_64bits_digest(&s);
    }
    if (h != get_u64(e + 40))
      rc = fsh_error_set(err, EINVAL,
                         "%s: not a valid map-output file: %s partition %d: index entry "
                         "checksum mismatch",
                         fname(f), f->what, partition);
  }
  if (rc == 0 && p.n_blocks > 0 && !(p.blocks = fsh_malloc(sizeof *p.blocks * (size_t)p.n_blocks)))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  for (int64_t k = 0; rc == 0 && k < p.n_blocks; k++) {
    const uint8_t *b = bl + FSH_MAP_FILE_BLOCK_BYTES * k;
    p.blocks[k] = (fsh_map_file_block){get_i64(b), get_i64(b + 8), get_i64(b + 16), get_u64(b + 24)};
  }
  if (rc == 0) rc = check_partition(f, &p, first, err);
  fsh_buffer_unref(eb);
  fsh_buffer_unref(bb);
  if (rc != 0) {
    fsh_map_file_partition_reset(&p);
    return rc;
  }
  *out = p;
  return 0;
}

int fsh_map_file_get_partitions(fsh_map_file *f, fsh_map_file_partition *out,
                                fsh_map_file_block **blocks_out, fsh_error *err) {
  const fsh_map_file_info *i = &f->info;
  int64_t np = i->n_partitions;
  int64_t entries_off = i->data_end + 8 + FSH_MAP_FILE_HEADER_BYTES;
  int64_t blocks_len = FSH_MAP_FILE_BLOCK_BYTES * i->n_blocks;
  fsh_buffer *ix = NULL;
  FSH_RETURN_NOT_OK(file_read_at(f, entries_off, FSH_MAP_FILE_ENTRY_BYTES * np + blocks_len,
                                 &ix, err));
  const uint8_t *ents = ix->data, *bls = ix->data + FSH_MAP_FILE_ENTRY_BYTES * np;
  fsh_map_file_block *all = fsh_malloc(sizeof *all * (size_t)(i->n_blocks ? i->n_blocks : 1));
  int rc = all ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
  for (int64_t k = 0; rc == 0 && k < i->n_blocks; k++) {
    const uint8_t *b = bls + FSH_MAP_FILE_BLOCK_BYTES * k;
    all[k] = (fsh_map_file_block){get_i64(b), get_i64(b + 8), get_i64(b + 16), get_u64(b + 24)};
  }
  for (int64_t pi = 0; rc == 0 && pi < np; pi++) {
    const uint8_t *e = ents + FSH_MAP_FILE_ENTRY_BYTES * pi;
    fsh_map_file_partition p = {.partition = (int32_t)pi, .rows = get_i64(e),
                                .bytes = get_i64(e + 8), .checksum = get_u64(e + 16),
                                .n_blocks = get_i64(e + 32)};
    int64_t first = get_i64(e + 24);
    if (first < 0 || p.n_blocks < 0 || first > i->n_blocks || p.n_blocks > i->n_blocks - first) {
      rc = check_partition(f, &p, first, err); /* reports the bad entry */
      if (rc == 0) rc = fsh_error_set(err, EINVAL, "%s: bad index entry", f->what);
      break;
    }
    XXH3_state_t s; /* on the stack: its type carries its alignment */
    XXH3_64bits_reset(&s);
    XXH3_64bits_update(&s, e, 40);
    XXH3_64bits_update(&s, bls + FSH_MAP_FILE_BLOCK_BYTES * first,
                       (size_t)(FSH_MAP_FILE_BLOCK_BYTES * p.n_blocks));
    if (XXH3_64bits_digest(&s) != get_u64(e + 40)) {
      rc = fsh_error_set(err, EINVAL, "%s: not a valid map-output file: %s partition %d: index "
                         "entry checksum mismatch", fname(f), f->what, (int)pi);
      break;
    }
    p.blocks = all + first;
    if ((rc = check_partition(f, &p, first, err)) == 0) out[pi] = p;
  }
  fsh_buffer_unref(ix);
  if (rc != 0) {
    fsh_free(all);
    return rc;
  }
  *blocks_out = all;
  return 0;
}

int fsh_map_file_read_block(fsh_map_file *f, const fsh_map_file_partition *p, int64_t i,
                            fsh_buffer **out, fsh_error *err) {
  const fsh_map_file_block *b = &p->blocks[i];
  fsh_buffer *buf = NULL;
  int rc = file_read_at(f, b->offset, b->length, &buf, err);
  if (rc != 0)
    return fsh_error_prefix(err, rc, "%s partition %d block %lld: ", f->what, p->partition,
                            (long long)i);
  if (HASH_BYTES(buf->data, (size_t)buf->size) != b->checksum) {
    fsh_buffer_unref(buf);
    return fsh_error_set(err, EIO,
                         "%s partition %d: checksum mismatch in block %lld (offset %lld, %lld "
                         "bytes) of %s: the stored map output is corrupt",
                         f->what, p->partition, (long long)i, (long long)b->offset,
                         (long long)b->length, fname(f));
  }
  *out = buf;
  return 0;
}

int fsh_map_file_read_block_image_unchecked(fsh_map_file *f, const fsh_map_file_partition *p,
                                            int64_t i, fsh_buffer **out, fsh_error *err) {
  if (!f->image) return fsh_map_file_read_block(f, p, i, out, err);
  const fsh_map_file_block *b = &p->blocks[i];
  int rc = file_read_at(f, b->offset, b->length, out, err);
  if (rc != 0)
    return fsh_error_prefix(err, rc, "%s partition %d block %lld: ", f->what, p->partition,
                            (long long)i);
  return 0;
}

struct fsh_map_file_cursor {
  fsh_map_file *f;
  fsh_map_file_partition part;
  int64_t next_block;
  fsh_buffer *block; /* current block, verified */
  int64_t pos;       /* next message in block */
  int64_t block_rows;
  XXH3_state_t *hash; /* over the partition's blocks; NULL for a partition
                         of one block or none, whose checksum is by
                         definition its block's (or the empty input's) */
  fsh_ipc_decoder *dec; /* f's, or the caller's (borrowed) */
  bool done;
};

int fsh_map_file_decoder_new(const fsh_map_file *f, fsh_ipc_decoder **out, fsh_error *err) {
  return head_decoder(f->head, out, err);
}

bool fsh_map_file_has_dictionaries(const fsh_map_file *f) {
  const fsh_schema *sc = f->head->schema;
  for (int64_t i = 0; i < sc->n_fields; i++)
    if (has_dictionaries(&sc->fields[i], 0)) return true;
  return false;
}

int fsh_map_file_cursor_open_with(fsh_map_file *f, int32_t partition, fsh_ipc_decoder *dec,
                                  fsh_map_file_cursor **out, fsh_error *err) {
  fsh_map_file_cursor *c = fsh_calloc(1, sizeof *c);
  if (!c) return fsh_error_set(err, ENOMEM, "out of memory");
  c->f = f;
  int rc = 0;
  if (!dec && !f->dec) rc = head_decoder(f->head, &f->dec, err);
  c->dec = dec ? dec : f->dec;
  if (rc == 0) rc = fsh_map_file_get_partition(f, partition, &c->part, err);
  if (rc == 0 && c->part.n_blocks > 1 && !(c->hash = hash_state_new()))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (rc != 0) {
    fsh_map_file_cursor_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int fsh_map_file_cursor_open(fsh_map_file *f, int32_t partition, fsh_map_file_cursor **out,
                             fsh_error *err) {
  return fsh_map_file_cursor_open_with(f, partition, NULL, out, err);
}

const fsh_map_file_partition *fsh_map_file_cursor_partition(const fsh_map_file_cursor *c) {
  return &c->part;
}

static int bad_message(fsh_map_file_cursor *c, int64_t at, const char *why, fsh_error *err) {
  return fsh_error_set(err, EINVAL, "%s partition %d: block %lld of %s: message at offset %lld: %s",
                       c->f->what, c->part.partition, (long long)(c->next_block - 1),
                       fname(c->f), (long long)at, why);
}

/* Decodes the next message of the current block; *batch NULL for a
 * dictionary batch. */
static int next_message(fsh_map_file_cursor *c, fsh_batch **batch, fsh_error *err) {
  fsh_buffer *b = c->block;
  int64_t at = c->pos, left = b->size - at;
  int64_t abs = c->part.blocks[c->next_block - 1].offset + at;
  if (left < 8 || get_u32(b->data + at) != 0xFFFFFFFFu) return bad_message(c, abs, "bad framing", err);
  int64_t len = get_u32(b->data + at + 4);
  if (len <= 0 || len % 8 || len > left - 8) return bad_message(c, abs, "bad metadata length", err);
  fsh_buffer *meta = fsh_buffer_slice(b, at + 8, len), *body = NULL;
  if (!meta) return fsh_error_set(err, ENOMEM, "out of memory");
  fsh_ipc_message_type type;
  int64_t body_len = 0;
  int rc = fsh_ipc_peek_message(meta, &type, &body_len, err);
  if (rc == 0 && (type == FSH_IPC_SCHEMA || body_len > left - 8 - len))
    rc = bad_message(c, abs, type == FSH_IPC_SCHEMA ? "a schema inside a block" : "body past the block", err);
  if (rc == 0 && body_len > 0 && !(body = fsh_buffer_slice(b, at + 8 + len, body_len)))
    rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (rc == 0) rc = fsh_ipc_decode_message(c->dec, meta, body, batch, err);
  fsh_buffer_unref(meta);
  fsh_buffer_unref(body);
  if (rc != 0) return rc == ENOMEM ? rc : fsh_error_prefix(err, rc, "%s partition %d: %s: ", c->f->what, c->part.partition, fname(c->f));
  c->pos = at + 8 + len + body_len;
  return 0;
}

int fsh_map_file_cursor_next(fsh_map_file_cursor *c, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  while (!c->done) {
    if (c->block && c->pos < c->block->size) {
      fsh_batch *batch = NULL;
      FSH_RETURN_NOT_OK(next_message(c, &batch, err));
      if (batch) {
        c->block_rows += batch->length;
        *out = batch;
        return 0;
      }
      continue;
    }
    if (c->block) {
      const fsh_map_file_block *b = &c->part.blocks[c->next_block - 1];
      if (c->block_rows != b->rows)
        return fsh_error_set(err, EINVAL, "%s partition %d: block %lld of %s holds %lld rows, its "
                             "index entry says %lld", c->f->what, c->part.partition,
                             (long long)(c->next_block - 1), fname(c->f),
                             (long long)c->block_rows, (long long)b->rows);
      fsh_buffer_unref(c->block);
      c->block = NULL;
    }
    if (c->next_block == c->part.n_blocks) {
      /* one block: its bytes were checked against its checksum on read */
      uint64_t sum = c->hash ? XXH3_64bits_digest(c->hash)
                     : c->part.n_blocks == 1 ? c->part.blocks[0].checksum
                                             : XXH3_64bits(NULL, 0);
      if (sum != c->part.checksum)
        return fsh_error_set(err, EIO, "%s partition %d: the partition checksum of %s does not "
                             "match its blocks: the stored map output is corrupt",
                             c->f->what, c->part.partition, fname(c->f));
      c->done = true;
      break;
    }
    FSH_RETURN_NOT_OK(fsh_map_file_read_block(c->f, &c->part, c->next_block, &c->block, err));
    if (c->hash) (void)HASH_UPDATE(c->hash, c->block->data, (size_t)c->block->size);
    c->next_block++;
    c->pos = 0;
    c->block_rows = 0;
  }
  return 0;
}

void fsh_map_file_cursor_free(fsh_map_file_cursor *c) {
  if (!c) return;
  fsh_buffer_unref(c->block);
  fsh_map_file_partition_reset(&c->part);
  if (c->hash) fsh_aligned_free(c->hash, sizeof(XXH3_state_t));
  fsh_free(c);
}
