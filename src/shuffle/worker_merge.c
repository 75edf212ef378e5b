/* worker_merge.c -- the pre-shuffle merge on a worker's store: several map
 * outputs of one shuffle held by this worker become ONE map output whose
 * partition p holds the parts' partition p rows, in the order of the parts
 * (and within a part in stored order). Every block of a spill file is
 * verified against its own checksum as it is read; a memory image (this
 * process's own memory, hashed as it was written) is not hashed again --
 * a block copied as stored keeps its checksum, which its readers verify.
 * A partition whose blocks are large
 * (average >= 64 KiB) is the concatenation of the parts' blocks copied as
 * stored, never decoded: its rows and bytes are the sums of the parts',
 * its checksum the xxh3 of the concatenated blocks. A partition of small
 * blocks (1000 partitions of a 512 KiB map task: ~500-byte blocks, half
 * of it IPC metadata and framing) is re-encoded instead -- the same rows
 * in the same order, far fewer blocks and bytes for every later reader to
 * fetch, hash and decode; its rows are the parts' sum, bytes and checksum
 * those of the new blocks. In an uncompressed shuffle whose schema
 * fsh_ipc_splicer takes (no unions), the blocks' record batch messages
 * are spliced (ipc.h): one message built straight from their bodies,
 * written as a block whenever the bodies held reach 4 MiB -- byte for
 * byte what the decode path writes when its batches concatenate into one
 * block. Otherwise (compressed, unions) the blocks are decoded and their
 * batches written again through the writer, which concatenates them into
 * blocks of up to 4 MiB (compressed again with the shuffle's codec). Schemas
 * with dictionaries are always copied (a block carries its dictionaries).
 * The merged output is written through a store writer
 * like any map output (memory budget, spill), published under its own
 * (map id, attempt), and only then are the parts dropped (when asked) --
 * unless a part is gone by then (its shuffle released during the merge):
 * then the merged output is dropped too and the merge fails ECANCELED.
 * Each part is read at once: its whole index (one read), its data bytes
 * (a slice of a memory image, one read of a spill file; block by block
 * past 64 MiB) -- merging 1000-partition outputs copies a million tiny
 * blocks, where a read and a buffer per block cost more than the copy.
 * A part missing or unreadable is reported lost to the task
 * (fsh_worker_task_report_lost). Also the "merge-outputs" task kind the
 * worker runs (body and answer in shuffle.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL /* header-only use of Debian's libxxhash-dev */
#include <xxhash.h>

/* A spliced block is hashed right after it is written, while it is in
 * cache: by libxxhash's run-time dispatched XXH3 (fsh_block_xxh3). The
 * verify of a spill file's blocks stays inlined: it reads each part's
 * pages for the first time and is bound by memory (PROFILE_1000.md 7b). */

#include "shuffle/worker_internal.h"

#define MERGE_MAGIC "FSMG"
#define MERGE_HEADER_BYTES 40
#define MERGE_PART_BYTES 16
#define MERGE_MAX_PARTS 65536

void fsh_merge_task_reset(fsh_merge_task *t) {
  if (!t) return;
  fsh_free(t->part_maps);
  fsh_free(t->part_attempts);
  memset(t, 0, sizeof *t);
}

int fsh_merge_task_encode(const fsh_merge_task *t, fsh_buffer **out, fsh_error *err) {
  if (t->n_parts < 1 || t->n_parts > MERGE_MAX_PARTS || t->map_id < 0 || t->attempt < 0)
    return fsh_error_set(err, EINVAL, "merge-outputs: %d parts, map %" PRId64 " attempt %d",
                         t->n_parts, t->map_id, t->attempt);
  fsh_buffer *b = fsh_buffer_new(MERGE_HEADER_BYTES + MERGE_PART_BYTES * (int64_t)t->n_parts,
                                 true);
  if (!b) return fsh_error_set(err, ENOMEM, "merge-outputs: out of memory");
  uint8_t *p = b->data;
  memcpy(p, MERGE_MAGIC, 4);
  p[4] = 1;
  fsh_le_put64(p + 8, t->shuffle_id);
  fsh_le_put64(p + 16, (uint64_t)t->map_id);
  fsh_le_put32(p + 24, (uint32_t)t->attempt);
  fsh_le_put32(p + 28, t->drop_parts ? 1u : 0u);
  fsh_le_put32(p + 32, (uint32_t)t->n_parts);
  for (int32_t i = 0; i < t->n_parts; i++) {
    uint8_t *e = p + MERGE_HEADER_BYTES + MERGE_PART_BYTES * i;
    fsh_le_put64(e, (uint64_t)t->part_maps[i]);
    fsh_le_put32(e + 8, (uint32_t)t->part_attempts[i]);
  }
  *out = b;
  return 0;
}

int fsh_merge_task_decode(const uint8_t *data, int64_t size, fsh_merge_task *out,
                          fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!data || size < MERGE_HEADER_BYTES || memcmp(data, MERGE_MAGIC, 4) != 0 || data[4] != 1)
    return fsh_error_set(err, EINVAL, "merge-outputs: not a merge body (%" PRId64 " bytes)",
                         size);
  uint32_t flags = fsh_le_get32(data + 28);
  uint32_t n = fsh_le_get32(data + 32);
  int64_t map_id = (int64_t)fsh_le_get64(data + 16);
  int32_t attempt = (int32_t)fsh_le_get32(data + 24);
  if (flags > 1 || n < 1 || n > MERGE_MAX_PARTS || map_id < 0 || attempt < 0 ||
      size != MERGE_HEADER_BYTES + MERGE_PART_BYTES * (int64_t)n)
    return fsh_error_set(err, EINVAL, "merge-outputs: malformed body (flags %u, %u parts, map %"
                         PRId64 " attempt %d, %" PRId64 " bytes)", flags, n, map_id, attempt,
                         size);
  fsh_merge_task t = {.shuffle_id = fsh_le_get64(data + 8), .map_id = map_id,
                      .attempt = attempt, .drop_parts = flags & 1, .n_parts = (int32_t)n};
  t.part_maps = fsh_malloc(sizeof *t.part_maps * n);
  t.part_attempts = fsh_malloc(sizeof *t.part_attempts * n);
  if (!t.part_maps || !t.part_attempts) {
    fsh_merge_task_reset(&t);
    return fsh_error_set(err, ENOMEM, "merge-outputs: out of memory for %u parts", n);
  }
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = data + MERGE_HEADER_BYTES + MERGE_PART_BYTES * i;
    t.part_maps[i] = (int64_t)fsh_le_get64(e);
    t.part_attempts[i] = (int32_t)fsh_le_get32(e + 8);
    if (t.part_maps[i] < 0 || t.part_attempts[i] < 0 || fsh_le_get32(e + 12) != 0 ||
        (t.part_maps[i] == map_id && t.part_attempts[i] == attempt)) {
      int rc = fsh_error_set(err, EINVAL, "merge-outputs: part %u is map %" PRId64 " attempt %d "
                             "(the merged output is map %" PRId64 " attempt %d)", i,
                             t.part_maps[i], t.part_attempts[i], map_id, attempt);
      fsh_merge_task_reset(&t);
      return rc;
    }
  }
  *out = t;
  return 0;
}

/* worker_internal.h: the tests' hooks */
static fsh_merge_test_hooks test_hooks;

void fsh_merge_set_test_hooks(const fsh_merge_test_hooks *h) {
  if (h) test_hooks = *h;
  else memset(&test_hooks, 0, sizeof test_hooks);
}

/* One part being copied: its file, every partition's verified index
 * entry (read at once), and its data bytes [base, data_end) read at once
 * (a slice of a memory image, one read of a spill file) unless larger
 * than MERGE_WHOLE_MAX (then block by block). */
#define MERGE_WHOLE_MAX ((int64_t)64 << 20)

typedef struct part_src {
  fsh_map_file *f;
  fsh_map_file_partition *ents; /* [n_partitions]; blocks point into `blocks` */
  fsh_map_file_block *blocks;
  fsh_buffer *data;
  int64_t base;
} part_src;

static void part_src_reset(part_src *p) {
  fsh_map_file_close(p->f);
  fsh_free(p->ents);
  fsh_free(p->blocks);
  fsh_buffer_unref(p->data);
  memset(p, 0, sizeof *p);
}

/* Part i is missing from the store or unreadable (rc): reported to the
 * task (when the merge runs as one) so that the scheduler recomputes that
 * map instead of losing this worker. Returns rc. */
static int part_lost(const fsh_merge_task *t, int32_t i, int rc) {
  if (rc == ENOENT || rc == EIO)
    fsh_worker_task_report_lost(NULL, t->shuffle_id, t->part_maps[i], t->part_attempts[i], false);
  return rc;
}

/* Opens part i (checking it agrees with part 0: shuffle, partitions,
 * compression, schema) and reads its index and data. */
static int open_part(fsh_shuffle_store *s, const fsh_merge_task *t, part_src *parts, int32_t i,
                     const char *what, fsh_error *err) {
  part_src *x = &parts[i];
  int rc = fsh_store_open(s, t->shuffle_id, t->part_maps[i], t->part_attempts[i], &x->f, err);
  if (rc != 0) return part_lost(t, i, fsh_error_prefix(err, rc, "%s: part %d: ", what, i));
  const fsh_map_file_info *a = fsh_map_file_get_info(parts[0].f);
  const fsh_map_file_info *b = fsh_map_file_get_info(x->f);
  if (b->n_partitions != a->n_partitions || b->compression != a->compression)
    return fsh_error_set(err, EINVAL, "%s: map %" PRId64 " attempt %d has %d partitions, "
                         "compression %d; map %" PRId64 " attempt %d has %d, %d", what,
                         b->map_id, b->attempt, b->n_partitions, (int)b->compression,
                         a->map_id, a->attempt, a->n_partitions, (int)a->compression);
  fsh_error diff = {{0}};
  if (!fsh_schema_equals(fsh_map_file_schema(parts[0].f), fsh_map_file_schema(x->f), false,
                         &diff))
    return fsh_error_set(err, EINVAL, "%s: map %" PRId64 " attempt %d has another schema than "
                         "map %" PRId64 " attempt %d: %s", what, b->map_id, b->attempt,
                         a->map_id, a->attempt, diff.message);
  if (!(x->ents = fsh_calloc((size_t)b->n_partitions, sizeof *x->ents)))
    return fsh_error_set(err, ENOMEM, "%s: out of memory", what);
  rc = fsh_map_file_get_partitions(x->f, x->ents, &x->blocks, err);
  if (rc != 0) return part_lost(t, i, fsh_error_prefix(err, rc, "%s: part %d: ", what, i));
  x->base = b->schema_length;
  int64_t len = b->data_end - b->schema_length;
  if (len > 0 && len <= (test_hooks.whole_max > 0 ? test_hooks.whole_max : MERGE_WHOLE_MAX)) {
    fsh_input *in = fsh_map_file_input(x->f);
    rc = in ? in->read_at(in, x->base, len, &x->data, err)
            : fsh_error_set(err, ENOMEM, "out of memory");
    if (rc == 0 && x->data->size != len)
      rc = fsh_error_set(err, EIO, "%s: part %d: %s: %lld of %lld bytes read", what, i,
                         in->name, (long long)x->data->size, (long long)len);
    if (rc != 0) return part_lost(t, i, fsh_error_prefix(err, rc, "%s: part %d: ", what, i));
  } else if (len > 0 && test_hooks.by_block) {
    (*test_hooks.by_block)++;
  }
  return 0;
}

/* A partition's blocks are re-encoded when they average fewer bytes. */
#define MERGE_SMALL_BLOCK ((int64_t)64 << 10)

/* Block k of part i's partition e: a new reference (a slice of the part's
 * data, or the block read alone), verified against its checksum when the
 * part is a spill file. A part that is a memory image of this store is
 * this process's own memory, hashed as it was written: not hashed again
 * (PROFILE_1000.md, session 9: that pass was a fifth of the merge's CPU
 * at 1000 x 1000, with the page faults of its first touch). */
static int get_block(part_src *x, const fsh_map_file_partition *e, int64_t k, fsh_buffer **out,
                     fsh_error *err) {
  const fsh_map_file_block *b = &e->blocks[k];
  if (!x->data) return fsh_map_file_read_block_image_unchecked(x->f, e, k, out, err);
  const uint8_t *at = x->data->data + (b->offset - x->base);
  if (!fsh_map_file_is_image(x->f) && XXH3_64bits(at, (size_t)b->length) != b->checksum) {
    const fsh_map_file_info *fi = fsh_map_file_get_info(x->f);
    return fsh_error_set(err, EIO, "shuffle %" PRIu64 " map %" PRId64 " attempt %d "
                         "partition %d: checksum mismatch in block %lld (offset %lld, "
                         "%lld bytes) of %s: the stored map output is corrupt",
                         fi->shuffle_id, fi->map_id, fi->attempt, e->partition, (long long)k,
                         (long long)b->offset, (long long)b->length,
                         fsh_map_file_name(x->f));
  }
  if (!(*out = fsh_buffer_slice(x->data, b->offset - x->base, b->length)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  return 0;
}

/* The outcome of re-encoding block k of part x's partition e: rc, or EINVAL
 * when `why` says what is wrong with the message at `at`; an error other
 * than ENOMEM names the shuffle, map output, partition and block. */
static int block_outcome(part_src *x, const fsh_map_file_partition *e, int64_t k, int64_t at,
                         const char *why, int rc, fsh_error *err) {
  const fsh_map_file_info *fi = fsh_map_file_get_info(x->f);
  if (rc == 0 && why)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 " attempt %d partition "
                         "%d: block %lld of %s, message at %lld: %s", fi->shuffle_id, fi->map_id,
                         fi->attempt, e->partition, (long long)k, fsh_map_file_name(x->f),
                         (long long)at, why);
  if (rc != 0 && rc != ENOMEM)
    return fsh_error_prefix(err, rc, "shuffle %" PRIu64 " map %" PRId64 " attempt %d partition "
                            "%d: block %lld of %s: ", fi->shuffle_id, fi->map_id, fi->attempt,
                            e->partition, (long long)k, fsh_map_file_name(x->f));
  return rc;
}

/* Decodes the framed IPC messages of verified block k of part x's
 * partition e with dec (fsh_ipc_decode_framed: where they lie in blk) and
 * writes its record batches to partition e of w; the block's rows must be
 * its index entry's. */
static int reencode_block(fsh_store_writer *w, fsh_ipc_decoder *dec, part_src *x,
                          const fsh_map_file_partition *e, int64_t k, fsh_buffer *blk,
                          fsh_error *err) {
  int64_t at = 0, rows = 0;
  int rc = 0;
  const char *why = NULL;
  while (rc == 0 && !why && at < blk->size) {
    int64_t framed = 0;
    fsh_batch *batch = NULL;
    rc = fsh_ipc_decode_framed(dec, blk, at, blk->size - at, &framed, &batch, err);
    if (rc == 0 && !batch) why = "a message without rows (schema or dictionary) inside a block";
    else if (rc == 0 && framed % 8) why = "a message not padded to 8 bytes";
    if (rc == 0 && !why) {
      rows += batch->length;
      rc = fsh_store_writer_write(w, e->partition, batch, err);
    }
    fsh_batch_unref(batch);
    if (rc == 0 && !why) at += framed;
  }
  if (rc == 0 && !why && rows != e->blocks[k].rows) why = "its rows differ from its index entry's";
  return block_outcome(x, e, k, at, why, rc, err);
}

/* Writes the messages spliced so far (sp holds at least one) as one block
 * of partition p of w: its checksum the XXH3 of the spliced message (what
 * readers verify). Values of a 32-bit-offset column that would overflow
 * when spliced (EOVERFLOW) are written one message a block, as stored. */
static int flush_splice(fsh_store_writer *w, fsh_ipc_splicer *sp, const fsh_merge_task *t,
                        int32_t p, fsh_error *err) {
  const uint8_t *out = NULL;
  int64_t len = 0, rows = 0;
  int rc = fsh_ipc_splicer_finish(sp, &out, &len, &rows, err);
  if (rc == 0) {
    if (test_hooks.spliced) (*test_hooks.spliced)++;
    return fsh_store_writer_write_block(w, p, out, len, rows, fsh_block_xxh3(out, (size_t)len), err);
  }
  if (rc == EOVERFLOW) {
    rc = 0;
    for (int32_t i = 0; rc == 0 && i < fsh_ipc_splicer_count(sp); i++) {
      fsh_ipc_splicer_message(sp, i, &out, &len, &rows);
      rc = fsh_store_writer_write_block(w, p, out, len, rows, fsh_block_xxh3(out, (size_t)len), err);
    }
  } else if (rc != ENOMEM) {
    rc = fsh_error_prefix(err, rc, "shuffle %" PRIu64 " partition %d, merged into map %" PRId64
                          " attempt %d: ", t->shuffle_id, p, t->map_id, t->attempt);
  }
  fsh_ipc_splicer_clear(sp);
  return rc;
}

/* Adds the framed record batch messages of verified block k of part x's
 * partition e to sp (their rows must be the block's index entry's),
 * flushing a spliced block into partition e of w whenever the held bodies
 * reach `target` bytes. */
static int splice_block(fsh_store_writer *w, fsh_ipc_splicer *sp, int64_t target,
                        const fsh_merge_task *t, part_src *x, const fsh_map_file_partition *e,
                        int64_t k, fsh_buffer *blk, fsh_error *err) {
  int64_t at = 0, rows = 0;
  int rc = 0;
  const char *why = NULL;
  while (rc == 0 && !why && at < blk->size) {
    int64_t framed = 0, r = 0;
    rc = fsh_ipc_splicer_add(sp, blk, at, blk->size - at, &framed, &r, err);
    if (rc == 0 && framed % 8) why = "a message not padded to 8 bytes";
    if (rc == 0 && !why) {
      rows += r;
      at += framed;
      if (fsh_ipc_splicer_body_bytes(sp) >= target) rc = flush_splice(w, sp, t, e->partition, err);
    }
  }
  if (rc == 0 && !why && rows != e->blocks[k].rows) why = "its rows differ from its index entry's";
  return block_outcome(x, e, k, at, why, rc, err);
}

/* How small blocks are re-encoded: spliced (sp; blocks of up to `target`
 * body bytes) when the schema allows and nothing is compressed, else
 * decoded and written again through the writer (dec); neither: copied. */
typedef struct merge_coder {
  fsh_ipc_decoder *dec;
  fsh_ipc_splicer *sp;
  int64_t small, target;
} merge_coder;

/* Writes partition p of every part into w, block by block, each verified
 * against its checksum first: copied as stored, or (mc re-encodes and the
 * blocks average under mc->small bytes) spliced (mc->sp), or decoded and
 * written again as batches (mc->dec), the partition then finished (its
 * buffered batches written as blocks). */
static int merge_partition(fsh_store_writer *w, const merge_coder *mc, const fsh_merge_task *t,
                           part_src *parts, int32_t p, fsh_error *err) {
  int32_t n = t->n_parts;
  int64_t blocks = 0, bytes = 0;
  for (int32_t i = 0; i < n; i++) blocks += parts[i].ents[p].n_blocks, bytes += parts[i].ents[p].bytes;
  bool reencode = (mc->dec || mc->sp) && blocks > 1 && bytes < mc->small * blocks;
  bool splice = reencode && mc->sp;
  for (int32_t i = 0; i < n; i++) {
    const fsh_map_file_partition *e = &parts[i].ents[p];
    for (int64_t k = 0; k < e->n_blocks; k++) {
      fsh_buffer *blk = NULL;
      int grc = get_block(&parts[i], e, k, &blk, err);
      if (grc != 0) {
        if (mc->sp) fsh_ipc_splicer_clear(mc->sp);
        return part_lost(t, i, grc);
      }
      const fsh_map_file_block *b = &e->blocks[k];
      int rc = splice     ? splice_block(w, mc->sp, mc->target, t, &parts[i], e, k, blk, err)
               : reencode ? reencode_block(w, mc->dec, &parts[i], e, k, blk, err)
                          : fsh_store_writer_write_block(w, p, blk->data, b->length, b->rows,
                                                         b->checksum, err);
      fsh_buffer_unref(blk);
      if (rc != 0) {
        if (mc->sp) fsh_ipc_splicer_clear(mc->sp);
        return rc;
      }
    }
  }
  if (splice) return fsh_ipc_splicer_count(mc->sp) > 0 ? flush_splice(w, mc->sp, t, p, err) : 0;
  return reencode ? fsh_store_writer_finish_partition(w, p, err) : 0;
}

static bool field_has_dictionary(const fsh_field *f, int depth) {
  if (f->dictionary || depth > 64) return true;
  for (int64_t i = 0; i < f->n_children; i++)
    if (field_has_dictionary(&f->children[i], depth + 1)) return true;
  return false;
}

/* How part 0's small blocks are re-encoded (merge_coder): a splicer when
 * the shuffle is uncompressed and fsh_ipc_splicer takes the schema (the
 * tests may turn it off), else a decoder holding the schema; neither
 * (blocks always copied) when the schema has dictionaries or the tests
 * turned re-encoding off. */
static int merge_coder_open(fsh_map_file *f, merge_coder *mc, fsh_error *err) {
  fsh_schema *schema = fsh_map_file_schema(f);
  if (test_hooks.small_block < 0) return 0;
  for (int64_t i = 0; i < schema->n_fields; i++)
    if (field_has_dictionary(&schema->fields[i], 0)) return 0;
  if (fsh_map_file_get_info(f)->compression == FSH_COMPRESSION_NONE && !test_hooks.no_splice) {
    fsh_error why = {{0}};
    int rc = fsh_ipc_splicer_new(schema, &mc->sp, &why);
    if (rc == 0) return 0;
    if (rc == ENOMEM) return fsh_error_set(err, ENOMEM, "out of memory");
    /* ENOTSUP (a union): decoded and concatenated instead */
  }
  fsh_ipc_decoder *d = NULL;
  fsh_batch *none = NULL;
  int rc = fsh_ipc_decoder_new(&d, err);
  if (rc == 0) rc = fsh_ipc_decode_message(d, fsh_map_file_schema_message(f), NULL, &none, err);
  fsh_batch_unref(none);
  if (rc != 0) {
    fsh_ipc_decoder_free(d);
    return rc;
  }
  mc->dec = d;
  return 0;
}

int fsh_shuffle_store_merge(fsh_shuffle_store *s, const fsh_merge_task *t, fsh_map_output *out,
                            fsh_error *err) {
  char what[160];
  snprintf(what, sizeof what, "store %s: merging %d map outputs of shuffle %" PRIu64
           " into map %" PRId64 " attempt %d", fsh_store_name(s), t->n_parts, t->shuffle_id,
           t->map_id, t->attempt);
  if (t->n_parts < 1)
    return fsh_error_set(err, EINVAL, "%s: no parts", what);
  part_src *parts = fsh_calloc((size_t)t->n_parts, sizeof *parts);
  if (!parts) return fsh_error_set(err, ENOMEM, "%s: out of memory", what);
  int rc = 0;
  for (int32_t i = 0; rc == 0 && i < t->n_parts; i++) rc = open_part(s, t, parts, i, what, err);
  if (rc == 0 && test_hooks.parts_open) test_hooks.parts_open(test_hooks.ctx, t);
  fsh_store_writer *w = NULL;
  if (rc == 0) {
    const fsh_map_file_info *info = fsh_map_file_get_info(parts[0].f);
    fsh_shuffle_spec spec = {.shuffle_id = t->shuffle_id, .n_partitions = info->n_partitions,
                             .schema = fsh_map_file_schema(parts[0].f),
                             .compression = info->compression};
    merge_coder mc = {
        .small = test_hooks.small_block > 0 ? test_hooks.small_block : MERGE_SMALL_BLOCK,
        .target = test_hooks.splice_target > 0 ? test_hooks.splice_target
                                               : FSH_MAP_FILE_DEFAULT_BLOCK_BYTES};
    int64_t expect = 0; /* its output: about its parts' bytes (the store's pool fits it) */
    for (int32_t i = 0; i < t->n_parts; i++) expect += fsh_map_file_get_info(parts[i].f)->file_size;
    rc = fsh_store_writer_open_sized(s, &spec, t->map_id, t->attempt, expect, &w, err);
    if (rc == 0) rc = merge_coder_open(parts[0].f, &mc, err);
    const atomic_bool *cancel = fsh_worker_task_cancel_flag();
    for (int32_t p = 0; rc == 0 && p < info->n_partitions; p++) {
      if (cancel && atomic_load(cancel))
        rc = fsh_error_set(err, ECANCELED, "cancelled");
      if (rc == 0) rc = merge_partition(w, &mc, t, parts, p, err);
    }
    fsh_ipc_decoder_free(mc.dec);
    fsh_ipc_splicer_free(mc.sp);
    if (rc != 0 && rc != ENOMEM && w) rc = fsh_error_prefix(err, rc, "%s: ", what);
  }
  for (int32_t i = 0; i < t->n_parts; i++) part_src_reset(&parts[i]);
  fsh_free(parts);
  if (rc != 0) {
    fsh_store_writer_abort(w);
    return rc;
  }
  fsh_map_output m = {0};
  rc = fsh_store_writer_close(w, &m, err);
  if (rc != 0) return fsh_error_prefix(err, rc, "%s: ", what);
  /* the merged output is held now: if a part is gone, the shuffle was
   * released (a job's end) while the parts were copied, and nothing will
   * ever release the merged output -- drop it. (A release removes every
   * output of the shuffle at once, under the store's lock: one after this
   * check takes the merged output with it.) */
  for (int32_t i = 0; i < t->n_parts; i++) {
    if (fsh_store_has(s, t->shuffle_id, t->part_maps[i], t->part_attempts[i], NULL)) continue;
    (void)fsh_store_drop(s, t->shuffle_id, t->map_id, t->attempt);
    fsh_map_output_reset(&m);
    return fsh_error_set(err, ECANCELED, "%s: part map %" PRId64 " attempt %d was dropped while "
                         "merging (its shuffle released): the merged output is dropped too",
                         what, t->part_maps[i], t->part_attempts[i]);
  }
  if (t->drop_parts)
    for (int32_t i = 0; i < t->n_parts; i++)
      (void)fsh_store_drop(s, t->shuffle_id, t->part_maps[i], t->part_attempts[i]);
  *out = m;
  return 0;
}

/* ---- the "merge-outputs" task kind ------------------------------------- */

typedef struct merge_state {
  fsh_shuffle_store *store;
  fsh_merge_task t;
} merge_state;

static void merge_free(void *state) {
  merge_state *m = state;
  if (!m) return;
  fsh_merge_task_reset(&m->t);
  fsh_free(m);
}

static int merge_run(void *ctx, void *state, fsh_shuffle_backend *b, fsh_buffer **answer,
                     fsh_error *err) {
  (void)ctx;
  (void)b;
  merge_state *m = state;
  fsh_map_output out = {0};
  FSH_RETURN_NOT_OK(fsh_shuffle_store_merge(m->store, &m->t, &out, err));
  int rc = fsh_put_result_encode(&out, answer, err);
  fsh_map_output_reset(&out);
  return rc;
}

static const fsh_worker_task_kind merge_kind = {
    .name = FSH_MERGE_TASK_KIND, .run = merge_run, .free_state = merge_free};

const fsh_worker_task_kind *fsh_worker_merge_kind(void) { return &merge_kind; }

int fsh_worker_merge_decode(fsh_shuffle_store *store, const uint8_t *body, int64_t size,
                            void **state, fsh_error *err) {
  merge_state *m = fsh_calloc(1, sizeof *m);
  if (!m) return fsh_error_set(err, ENOMEM, "merge-outputs: out of memory");
  int rc = fsh_merge_task_decode(body, size, &m->t, err);
  if (rc != 0) {
    fsh_free(m);
    return rc;
  }
  m->store = store;
  *state = m;
  return 0;
}
