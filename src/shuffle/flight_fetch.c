/* flight_fetch.c -- the flight reader's fetch side: one DoGet per (reader,
 * peer) carrying every map output wanted from that peer (and, for a range
 * reader, its whole run of partitions: a version 2 ticket, the blocks
 * split onto (map output, partition) slots by their headers); each block's
 * messages are hashed as they arrive (framed exactly as stored: FFFFFFFF,
 * metadata length, metadata, body) and checked against the block header's
 * checksum before any of them is decoded; at the end of a map output the
 * partition checksum and row count are checked too. Each byte is hashed
 * at most twice (block, then partition) and once in a partition of one
 * block, whose checksum is by definition its block's (map_file.c): there
 * the block's verified checksum must equal the partition's. Decoded batches are
 * queued on their source's slot under the reader's bytes-in-flight limit
 * (flight_reader.h), a message's (or a direct source's) at once. Jobs run
 * on the backend's fetch pool (flight_pool.c).
 *
 * A job whose worker runs on this host first locates its map outputs
 * (flight_direct.c) and reads the located ones block by block straight
 * from the worker's files -- a partition of at least DIRECT_SPAN_MIN bytes
 * (or a run's partitions of a source) as one span: the range its blocks
 * span read with one pread into a pooled span buffer, or mapped read-only
 * when larger than DIRECT_COPY_MAX (span_of; the batches decoded are
 * slices of it), a smaller one with a pread per block -- and each block
 * goes through the same checks, decoding and queueing as a bundled block
 * of a DoGet. The store never reuses a memfd that a reader holds open (its
 * write lease, store.c), so what is read is the image opened; a mapping
 * never faults: spill files and published memory images are never
 * truncated, only unlinked, which leaves a mapping whole. A VM
 * image (anonymous memory of the worker's) is copied instead, the span
 * of a source's blocks at once with process_vm_readv into a buffer of the
 * reader's (fr_direct_vm_read), whose blocks are then fed the same way. */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "shuffle/flight_reader.h"

typedef struct fetch {
  fr_reader *r;
  fr_job *job;
  int64_t k;               /* next job slot expected */
  int64_t end;             /* the slots of the current DoGet: [.., end) */
  int64_t cur_slot;        /* slot index of the map output being received, -1 none */
  fsh_block_header h;      /* its current block */
  bool in_block;
  int64_t acc;             /* framed bytes of the block received */
  int64_t next_index;      /* next block index expected */
  int64_t part_rows;
  fsh_flight_message *msgs; /* the block's messages */
  int64_t n_msgs, cap_msgs;
  XXH3_state_t block_hash, part_hash;
  fsh_ipc_decoder *dec;     /* the current one of: */
  fsh_ipc_decoder *stream_dec, *direct_dec; /* the DoGet's; the direct reads' */
  const char *via;          /* "" or " (read directly from <file>)" for messages */
  bool transport; /* the last step was the client's (connect, DoGet, receive) */
  fr_item *pend_head, *pend_tail; /* decoded, not yet delivered (flush) */
  int64_t pend_bytes;
  char prefix[512]; /* "flight shuffle S partition P: worker URI" */
} fetch;

/* In a pending item's slot field: the slot is done once this batch is
 * queued (slot indices are far below it). */
#define DONE_AFTER ((int64_t)1 << 62)

static void drop_pending(fetch *f) {
  for (fr_item *it = f->pend_head, *next; it; it = next) {
    next = it->next;
    fsh_batch_unref(it->batch);
    fsh_free(it);
  }
  f->pend_head = f->pend_tail = NULL;
  f->pend_bytes = 0;
}

static void drop_msgs(fetch *f) {
  for (int64_t i = 0; i < f->n_msgs; i++) fsh_flight_message_reset(&f->msgs[i]);
  f->n_msgs = 0;
}

static const fr_slot *slot_of(fetch *f, int64_t s) { return &f->r->slots[s]; }

/* Delivers the fetch's pending batches and "done" marks to their slots
 * in order, under one lock, waking the consumer once at the end (and
 * before waiting for room) rather than per block: at 1000 x 1000 a DoGet
 * bundle carries hundreds of one-block sources, and a wake per block was
 * a context switch each. Past the limit a batch waits, unless nothing is
 * in flight or it is for the source being consumed and that source's
 * queue is empty (the consumer may be waiting on it): the consumer always
 * makes progress, and the source being consumed is bounded like the
 * others. ECANCELED (pending dropped) when the reader is closed. */
static int flush(fetch *f, fsh_error *err) {
  fr_reader *r = f->r;
  if (!f->pend_head) return 0;
  pthread_mutex_lock(&r->mu);
  bool wake = false;
  while (f->pend_head && !r->closing) {
    fr_item *it = f->pend_head;
    int64_t slot = it->slot & ~DONE_AFTER;
    fr_slot *sl = &r->slots[slot];
    if (it->batch) {
      while (!r->closing && r->in_flight > 0 && r->in_flight + it->bytes > r->max_in_flight &&
             (slot > r->cur || sl->head != NULL)) {
        if (wake && r->waiting) pthread_cond_broadcast(&r->cv);
        wake = false;
        if (!fr_pool_waiting_for_room(fb_pool(r->st), 1)) break; /* admitted over the limit */
        pthread_cond_wait(&r->cv, &r->mu);
        fr_pool_waiting_for_room(fb_pool(r->st), -1);
      }
      if (r->closing) break;
    }
    f->pend_head = it->next;
    if (!f->pend_head) f->pend_tail = NULL;
    f->pend_bytes -= it->bytes;
    if (slot == r->cur) wake = true;
    if (it->batch) {
      if (it->slot & DONE_AFTER) sl->done = true;
      it->next = NULL;
      it->slot = slot;
      if (sl->tail) sl->tail->next = it;
      else sl->head = it;
      sl->tail = it;
      r->in_flight += it->bytes;
    } else {
      sl->done = true;
      fsh_free(it);
    }
  }
  bool closing = r->closing;
  /* only the consumer waits for batches, and only for the source being
   * consumed: a batch for a later source wakes nobody */
  if (wake && r->waiting) pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (!closing) return 0;
  drop_pending(f);
  return fsh_error_set(err, ECANCELED, "%s: the reader was closed", f->prefix);
}

#define PENDING_FLUSH_BYTES ((int64_t)256 << 10)

/* Adds batch (reference moved; NULL: slot s is done) to the pending list,
 * delivered by flush: at the end of each message, each directly read
 * source, or once PENDING_FLUSH_BYTES are pending. */
static int enqueue(fetch *f, int64_t s, fsh_batch *batch, fsh_error *err) {
  fr_item *it = fsh_malloc(sizeof *it);
  if (!it) {
    fsh_batch_unref(batch);
    return fsh_error_set(err, ENOMEM, "%s: out of memory", f->prefix);
  }
  *it = (fr_item){.batch = batch, .bytes = batch ? fsh_shuffle_batch_bytes(batch) : 0,
                  .slot = s};
  if (f->pend_tail) f->pend_tail->next = it;
  else f->pend_head = it;
  f->pend_tail = it;
  f->pend_bytes += it->bytes;
  return f->pend_bytes >= PENDING_FLUSH_BYTES ? flush(f, err) : 0;
}

/* Slot s is done: the last pending batch, when it is s's, carries the mark
 * (DONE_AFTER in its slot field) instead of an item of its own. */
static int mark_done(fetch *f, int64_t s, fsh_error *err) {
  if (f->pend_tail && f->pend_tail->batch && f->pend_tail->slot == s) {
    f->pend_tail->slot |= DONE_AFTER;
    return 0;
  }
  return enqueue(f, s, NULL, err);
}

/* Slot s got nothing from the peer: fine if its metadata says it is
 * empty (or there is none to say otherwise). */
static int finish_empty(fetch *f, int64_t s, fsh_error *err) {
  const fr_slot *sl = slot_of(f, s);
  if (sl->has_meta && sl->rows > 0)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: the worker sent no block, "
                         "but the map output holds %" PRId64 " rows of partition %d",
                         f->prefix, sl->map_id, sl->attempt, sl->rows, sl->partition);
  return mark_done(f, s, err);
}

/* A block header arrived: find its map output among the job's slots from
 * k on (those skipped sent nothing: they must be empty). */
static int start_block(fetch *f, const fsh_block_header *h, fsh_error *err) {
  fr_reader *r = f->r;
  if (f->in_block)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: block %" PRId64 " was cut "
                         "short (%" PRId64 " of %" PRId64 " bytes)", f->prefix, f->h.map_id,
                         f->h.attempt, f->h.index, f->acc, f->h.length);
  if (h->partition < r->partition || h->partition - r->partition >= r->count ||
      h->length <= 0 || h->rows < 0 || h->n_blocks <= 0 || h->index < 0 ||
      h->index >= h->n_blocks)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: a malformed block header "
                         "(partition %d, block %" PRId64 " of %" PRId64 ")", f->prefix,
                         h->map_id, h->attempt, h->partition, h->index, h->n_blocks);
  if (f->cur_slot < 0 || h->map_id != f->h.map_id || h->attempt != f->h.attempt ||
      h->partition != f->h.partition) {
    if (f->cur_slot >= 0)
      return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: only %" PRId64 " of %"
                           PRId64 " blocks arrived", f->prefix, f->h.map_id, f->h.attempt,
                           f->next_index, f->h.n_blocks);
    int64_t k = f->k;
    while (k < f->end && !(slot_of(f, f->job->slots[k])->map_id == h->map_id &&
                           slot_of(f, f->job->slots[k])->attempt == h->attempt &&
                           slot_of(f, f->job->slots[k])->partition == h->partition))
      k++;
    if (k == f->end)
      return fsh_error_set(err, EIO, "%s: sent map %" PRId64 " attempt %d partition %d, which "
                           "was not asked for (or came out of order)", f->prefix, h->map_id,
                           h->attempt, h->partition);
    for (; f->k < k; f->k++) FSH_RETURN_NOT_OK(finish_empty(f, f->job->slots[f->k], err));
    f->cur_slot = f->job->slots[f->k++];
    const fr_slot *sl = slot_of(f, f->cur_slot);
    if (sl->has_meta && (sl->rows != h->part_rows || sl->bytes != h->part_bytes ||
                         sl->checksum != h->part_checksum))
      return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d partition %d: the worker "
                           "holds %" PRId64 " rows, %" PRId64 " bytes, checksum %016" PRIx64
                           " but the map output recorded %" PRId64 ", %" PRId64 ", %016" PRIx64,
                           f->prefix, h->map_id, h->attempt, h->partition, h->part_rows,
                           h->part_bytes, h->part_checksum, sl->rows, sl->bytes, sl->checksum);
    f->next_index = 0;
    f->part_rows = 0;
    XXH3_64bits_reset(&f->part_hash);
  }
  if (h->index != f->next_index || (f->next_index > 0 && h->n_blocks != f->h.n_blocks))
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: block %" PRId64 " arrived "
                         "where block %" PRId64 " was due", f->prefix, h->map_id, h->attempt,
                         h->index, f->next_index);
  f->h = *h;
  f->in_block = true;
  f->acc = 0;
  XXH3_64bits_reset(&f->block_hash);
  return 0;
}

/* A decoded message of the current block (rc: its decoding's): validated
 * and queued on the current slot, its rows added to *rows. */
static int take_batch(fetch *f, int rc, fsh_batch *b, int64_t *rows, fsh_error *err) {
  const fsh_block_header *h = &f->h;
  if (rc == 0 && b) rc = fsh_batch_validate(b, false, err);
  if (rc != 0) {
    fsh_batch_unref(b);
    if (rc != ENOMEM)
      rc = fsh_error_prefix(err, rc, "%s: map %" PRId64 " attempt %d block %" PRId64 ": ",
                            f->prefix, h->map_id, h->attempt, h->index);
    return rc;
  }
  if (!b) return 0;
  *rows += b->length;
  if (b->length == 0) {
    fsh_batch_unref(b);
    return 0;
  }
  return enqueue(f, f->cur_slot, b, err);
}

/* The current block's messages are decoded and queued (`rows` rows):
 * check its row count, and at the end of the partition its checksum. */
static int block_done(fetch *f, int64_t rows, fsh_error *err) {
  const fsh_block_header *h = &f->h;
  if (rows != h->rows)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d block %" PRId64 ": %" PRId64
                         " rows decoded, the header says %" PRId64, f->prefix, h->map_id,
                         h->attempt, h->index, rows, h->rows);
  f->part_rows += rows;
  f->next_index++;
  if (f->next_index < h->n_blocks) return 0;
  /* a partition of one block: its checksum is the block's, verified above
   * (part_hash was not fed) */
  uint64_t part = h->n_blocks == 1 ? h->checksum : XXH3_64bits_digest(&f->part_hash);
  if (part != h->part_checksum || f->part_rows != h->part_rows)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d partition %d: the partition "
                         "checksum does not match its blocks%s: the stored map output is corrupt",
                         f->prefix, h->map_id, h->attempt, h->partition, f->via);
  int64_t done = f->cur_slot;
  f->cur_slot = -1;
  return mark_done(f, done, err);
}

/* A block that came message by message is complete: verify, decode, queue. */
static int end_block(fetch *f, fsh_error *err) {
  fsh_block_header *h = &f->h;
  f->in_block = false;
  if (XXH3_64bits_digest(&f->block_hash) != h->checksum)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d partition %d: checksum "
                         "mismatch in block %" PRId64 " (%" PRId64 " bytes)%s: the stored map "
                         "output is corrupt (or was damaged in transit)", f->prefix, h->map_id,
                         h->attempt, h->partition, h->index, h->length, f->via);
  int64_t rows = 0;
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < f->n_msgs; i++) {
    fsh_batch *b = NULL;
    rc = fsh_ipc_decode_message(f->dec, f->msgs[i].metadata, f->msgs[i].body, &b, err);
    rc = take_batch(f, rc, b, &rows, err);
  }
  drop_msgs(f);
  if (rc != 0) return rc;
  return block_done(f, rows, err);
}

static int push_msg(fetch *f, fsh_flight_message *m, fsh_error *err) {
  if (f->n_msgs == f->cap_msgs) {
    int64_t cap = f->cap_msgs ? f->cap_msgs * 2 : 8;
    fsh_flight_message *n = fsh_realloc(f->msgs, sizeof *n * (size_t)cap);
    if (!n) return fsh_error_set(err, ENOMEM, "%s: out of memory", f->prefix);
    f->msgs = n;
    f->cap_msgs = cap;
  }
  f->msgs[f->n_msgs++] = *m;
  memset(m, 0, sizeof *m);
  return 0;
}

static int bad_bundle(fetch *f, int64_t at, const char *why, fsh_error *err) {
  return fsh_error_set(err, EIO, "%s: a malformed block bundle (at byte %" PRId64 "): %s",
                       f->prefix, at, why);
}

/* One whole block (header h; its framed bytes b[at, at + h->length)):
 * checked against the header's checksum (one pass) before anything in it
 * is parsed, fed to the partition hash when its partition has more blocks
 * than one, then its framed messages decoded where they lie (the batches'
 * buffers are views of b: no buffer per message), validated and queued.
 * A bundled block of a DoGet, or one read directly. */
static int feed_block(fetch *f, const fsh_block_header *h, fsh_buffer *b, int64_t at,
                      fsh_error *err) {
  FSH_RETURN_NOT_OK(start_block(f, h, err));
  if (h->length > b->size - at || h->length % 8)
    return bad_bundle(f, at, "a block longer than the bundle", err);
  const uint8_t *blk = b->data + at;
  if (fsh_block_xxh3(blk, (size_t)h->length) != h->checksum)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d partition %d: checksum "
                         "mismatch in block %" PRId64 " (%" PRId64 " bytes)%s: the stored map "
                         "output is corrupt (or was damaged in transit)", f->prefix, h->map_id,
                         h->attempt, h->partition, h->index, h->length, f->via);
  if (h->n_blocks > 1) fsh_block_xxh3_update(&f->part_hash, blk, (size_t)h->length);
  f->in_block = false;
  f->acc = h->length;
  int64_t rows = 0;
  for (int64_t pos = 0; pos < h->length;) {
    int64_t framed = 0;
    fsh_batch *batch = NULL;
    int rc = fsh_ipc_decode_framed(f->dec, b, at + pos, h->length - pos, &framed, &batch, err);
    if (rc == 0 && framed % 8) {
      fsh_batch_unref(batch);
      return bad_bundle(f, at + pos, "a message not padded to 8 bytes", err);
    }
    FSH_RETURN_NOT_OK(take_batch(f, rc, batch, &rows, err));
    pos += framed;
  }
  return block_done(f, rows, err);
}

/* A bundle of whole blocks (layout in shuffle_internal.h), each fed to
 * feed_block. */
static int on_bundle(fetch *f, fsh_buffer *b, fsh_error *err) {
  const uint8_t *p = b->data;
  int64_t size = b->size, at = FSH_BUNDLE_HEADER_BYTES;
  if (p[4] != 1 || p[5] || p[6] || p[7] || fsh_le_get32(p + 12) != 0)
    return bad_bundle(f, 0, "unknown version or reserved bytes", err);
  int64_t n = fsh_le_get32(p + 8);
  for (int64_t i = 0; i < n; i++) {
    fsh_block_header h;
    if (size - at < FSH_BLOCK_HEADER_BYTES ||
        !fsh_block_header_decode(p + at, FSH_BLOCK_HEADER_BYTES, &h))
      return bad_bundle(f, at, "no block header where one is due", err);
    at += FSH_BLOCK_HEADER_BYTES;
    FSH_RETURN_NOT_OK(feed_block(f, &h, b, at, err));
    at += h.length;
  }
  if (at != size) return bad_bundle(f, at, "bytes after the last block", err);
  return 0;
}

/* One received message (references moved out of *m). */
static int on_message(fetch *f, fsh_flight_message *m, fsh_error *err) {
  if (!m->metadata && m->app_metadata && m->app_metadata->size >= FSH_BUNDLE_HEADER_BYTES &&
      memcmp(m->app_metadata->data, FSH_BUNDLE_MAGIC, 4) == 0)
    return on_bundle(f, m->app_metadata, err);
  fsh_block_header h;
  if (m->app_metadata &&
      fsh_block_header_decode(m->app_metadata->data, m->app_metadata->size, &h))
    FSH_RETURN_NOT_OK(start_block(f, &h, err));
  if (!m->metadata) return 0; /* app_metadata alone: nothing of a block */
  if (!f->in_block)
    return fsh_error_set(err, EIO, "%s: a message outside any block", f->prefix);
  uint8_t prefix[8];
  fsh_le_put32(prefix, 0xFFFFFFFFu);
  fsh_le_put32(prefix + 4, (uint32_t)m->metadata->size);
  int64_t body = m->body ? m->body->size : 0;
  XXH3_64bits_update(&f->block_hash, prefix, 8);
  XXH3_64bits_update(&f->block_hash, m->metadata->data, (size_t)m->metadata->size);
  if (body) fsh_block_xxh3_update(&f->block_hash, m->body->data, (size_t)body);
  if (f->h.n_blocks > 1) { /* else the block's checksum is the partition's */
    XXH3_64bits_update(&f->part_hash, prefix, 8);
    XXH3_64bits_update(&f->part_hash, m->metadata->data, (size_t)m->metadata->size);
    if (body) fsh_block_xxh3_update(&f->part_hash, m->body->data, (size_t)body);
  }
  f->acc += 8 + m->metadata->size + body;
  if (f->acc > f->h.length)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: block %" PRId64 " overruns "
                         "its %" PRId64 " bytes", f->prefix, f->h.map_id, f->h.attempt,
                         f->h.index, f->h.length);
  FSH_RETURN_NOT_OK(push_msg(f, m, err));
  if (f->acc == f->h.length) return end_block(f, err);
  return 0;
}

/* One DoGet of the job's slots [k0, k1). */
static int fetch_stream(fetch *f, int64_t k0, int64_t k1, fsh_error *err) {
  fr_reader *r = f->r;
  fr_job *job = f->job;
  fsh_flight_client *client = NULL;
  f->transport = true;
  f->k = k0;
  f->end = k1;
  f->via = "";
  FSH_RETURN_NOT_OK(fb_client(r->st, job->uri, &client, err));
  fsh_ipc_decoder_free(f->stream_dec); /* each stream starts with its schema */
  f->stream_dec = f->dec = NULL;
  FSH_RETURN_NOT_OK(fsh_ipc_decoder_new(&f->stream_dec, err));
  f->dec = f->stream_dec;
  /* [k0, k1) holds whole sources: r->count slots each, the run's partitions */
  int64_t g = r->count, n_src = (k1 - k0) / g;
  atomic_fetch_add(&fb_stats_of(r->st)->fetched_sources, n_src);
  fsh_shuffle_ticket t = {.shuffle_id = r->shuffle_id, .partition = r->partition,
                          .n_partitions_read = r->count,
                          .flags = FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES,
                          .n_sources = n_src};
  t.sources = fsh_malloc(sizeof *t.sources * (size_t)n_src);
  if (!t.sources) return fsh_error_set(err, ENOMEM, "%s: out of memory", f->prefix);
  for (int64_t i = 0; i < n_src; i++)
    t.sources[i] = (fsh_ticket_source){slot_of(f, job->slots[k0 + i * g])->map_id,
                                       slot_of(f, job->slots[k0 + i * g])->attempt};
  fsh_buffer *tb = NULL;
  int rc = fsh_shuffle_ticket_encode(&t, &tb, err);
  fsh_shuffle_ticket_reset(&t);
  fsh_flight_reader *rd = NULL;
  if (rc == 0) {
    fsh_bytes ticket = {tb->data, tb->size};
    rc = fsh_flight_do_get(client, &ticket, &rd, err);
  }
  fsh_buffer_unref(tb);
  if (rc != 0) return rc;
  pthread_mutex_lock(&r->mu);
  job->rd = rd;
  bool closing = r->closing;
  pthread_mutex_unlock(&r->mu);
  if (closing) fsh_flight_reader_cancel(rd);
  bool first = true;
  for (;;) {
    fsh_flight_message m;
    bool done = false;
    f->transport = true;
    rc = fsh_flight_reader_next_raw(rd, &m, &done, err);
    if (rc != 0 || done) break;
    f->transport = false; /* an error from here on is about the data */
    if (first) {
      first = false;
      fsh_batch *none = NULL;
      fsh_ipc_message_type type = FSH_IPC_NONE;
      int64_t body = 0;
      if (!m.metadata || fsh_ipc_peek_message(m.metadata, &type, &body, NULL) != 0 ||
          type != FSH_IPC_SCHEMA)
        rc = fsh_error_set(err, EIO, "%s: the stream does not start with a schema", f->prefix);
      if (rc == 0) rc = fsh_ipc_decode_message(f->dec, m.metadata, NULL, &none, err);
      fsh_batch_unref(none);
      fsh_error diff = {{0}};
      if (rc == 0 && !fsh_schema_equals(fsh_ipc_decoder_schema(f->dec), r->schema, false, &diff))
        rc = fsh_error_set(err, EINVAL, "%s: the map outputs' schema differs from the "
                           "shuffle's: %s", f->prefix, diff.message);
    } else {
      rc = on_message(f, &m, err);
      if (rc == 0) rc = flush(f, err); /* what the message completed, at once */
    }
    fsh_flight_message_reset(&m);
    if (rc != 0) break;
  }
  pthread_mutex_lock(&r->mu);
  job->rd = NULL;
  pthread_mutex_unlock(&r->mu);
  fsh_flight_reader_free(rd);
  if (rc != 0) return rc;
  f->transport = false;
  if (f->in_block || f->cur_slot >= 0)
    return fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d: the stream ended inside "
                         "the map output (block %" PRId64 " of %" PRId64 ")", f->prefix,
                         f->h.map_id, f->h.attempt, f->next_index, f->h.n_blocks);
  for (; f->k < k1; f->k++) FSH_RETURN_NOT_OK(finish_empty(f, job->slots[f->k], err));
  return 0;
}

/* The decoder of the direct reads: the located schema message, checked to
 * be the shuffle's. */
static int direct_decoder(fetch *f, const fr_direct *d, fsh_error *err) {
  if (f->direct_dec) return 0;
  if (d->a.schema_len <= 0)
    return fsh_error_set(err, EIO, "%s: the locate answer has no schema", f->prefix);
  fsh_buffer *meta = fsh_buffer_copy(d->a.schema, d->a.schema_len);
  fsh_ipc_decoder *dec = NULL;
  fsh_batch *none = NULL;
  fsh_ipc_message_type type = FSH_IPC_NONE;
  int64_t body = 0;
  int rc = meta ? fsh_ipc_decoder_new(&dec, err) : fsh_error_set(err, ENOMEM, "out of memory");
  if (rc == 0 && (fsh_ipc_peek_message(meta, &type, &body, NULL) != 0 || type != FSH_IPC_SCHEMA))
    rc = fsh_error_set(err, EIO, "%s: the located schema is not a schema message", f->prefix);
  if (rc == 0) rc = fsh_ipc_decode_message(dec, meta, NULL, &none, err);
  fsh_batch_unref(none);
  fsh_buffer_unref(meta);
  fsh_error diff = {{0}};
  if (rc == 0 && !fsh_schema_equals(fsh_ipc_decoder_schema(dec), f->r->schema, false, &diff))
    rc = fsh_error_set(err, EINVAL, "%s: the map outputs' schema differs from the shuffle's: %s",
                       f->prefix, diff.message);
  if (rc != 0) {
    fsh_ipc_decoder_free(dec);
    return rc;
  }
  f->direct_dec = dec;
  return 0;
}

#define DIRECT_SPAN_MIN ((int64_t)256 << 10)

/* Spans up to this size are copied (read_range), larger ones mapped. */
#define DIRECT_COPY_MAX ((int64_t)8 << 20)

/* Block i of locate entry src (32-byte entries: offset, length, rows,
 * checksum): its offset and length in the file, false when the block does
 * not lie within the file (the per-block reads report it). */
static bool block_range(const fsh_locate_source *src, int64_t i, int64_t *off, int64_t *len) {
  const uint8_t *q = src->blocks + 32 * i;
  *off = (int64_t)fsh_le_get64(q), *len = (int64_t)fsh_le_get64(q + 8);
  return *off >= 0 && *len > 0 && *len <= src->size && *off <= src->size - *len;
}

typedef struct direct_map {
  void *p;
  size_t len;
} direct_map;

static void direct_map_release(void *ctx) {
  direct_map *m = ctx;
  munmap(m->p, m->len);
  fsh_free(m);
}

/* A read-only mapping of fd's bytes [lo, hi) as a buffer (data = the byte
 * at lo), or NULL (ENOMEM or a refused mapping: the caller preads). Its
 * pages are populated -- every byte of them is read (checksums), and
 * installing them at once costs less than a read fault per 64 KiB
 * (bench_store_images: reading a memfd mapping 5.5 GB/s faulted, 14
 * populated) -- all of [lo, hi) when srcs is NULL (a dense span), else
 * only the pages of the blocks of the n_srcs locate entries at srcs: a
 * sparse span (a partition's blocks between the other partitions' blocks,
 * as when a map output's partitions each hold several blocks) must not
 * install, nor for a spill file read from disk, every page of the file
 * between them (a 64 x 4 shuffle populated and unmapped 4x the bytes it
 * read). A block whose populate fails is faulted in as it is read. */
static fsh_buffer *map_range(int fd, int64_t lo, int64_t hi, const fsh_locate_source *srcs,
                             int64_t n_srcs) {
  int64_t page = sysconf(_SC_PAGESIZE), start = lo - lo % page;
  direct_map *m = fsh_malloc(sizeof *m);
  if (!m) return NULL;
  m->len = (size_t)(hi - start);
  m->p = mmap(NULL, m->len, PROT_READ, MAP_SHARED | (srcs ? 0 : MAP_POPULATE), fd, start);
  if (m->p == MAP_FAILED) {
    fsh_free(m);
    return NULL;
  }
#ifdef MADV_POPULATE_READ
  for (int64_t k = 0; k < n_srcs; k++)
    for (int64_t i = 0; i < srcs[k].n_blocks; i++) {
      int64_t off, len;
      if (!block_range(&srcs[k], i, &off, &len) || off < lo || off > hi - len) continue;
      int64_t a = (off - start) / page * page, b = off + len - start;
      (void)madvise((uint8_t *)m->p + a, (size_t)(b - a), MADV_POPULATE_READ);
    }
#endif
  fsh_buffer *b = fsh_buffer_wrap((uint8_t *)m->p + (lo - start), hi - lo, direct_map_release, m);
  if (!b) direct_map_release(m);
  return b;
}

/* fd's bytes [lo, hi) read with pread into a span buffer (fr_span_take:
 * pooled, so its pages are not faulted afresh for every source), or NULL
 * (out of memory, a failed or short read: the caller reads block by block,
 * which reports it). */
static fsh_buffer *read_range(int fd, int64_t lo, int64_t hi) {
  fsh_buffer *buf = fr_span_take(hi - lo);
  for (int64_t got = 0; buf && got < hi - lo;) {
    ssize_t n = pread(fd, buf->data + got, (size_t)(hi - lo - got), lo + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fsh_buffer_unref(buf);
      return NULL;
    }
    got += n;
  }
  return buf;
}

/* fd's bytes [lo, hi), which hold `bytes` bytes of blocks (those of the
 * n_srcs locate entries at srcs), as one buffer: copied (read_range) when
 * the range is at most DIRECT_COPY_MAX and not much more than the blocks,
 * else mapped (map_range; only the blocks' pages populated when the range
 * is much more than they are) when the blocks hold at least
 * DIRECT_SPAN_MIN bytes, else NULL. Copying a span of a few
 * MiB into a pooled buffer costs less than mapping it (a populated
 * mapping's setup and munmap were 9% of the workers' CPU at 64 x 64, ~1 MiB
 * spans; the copy is in cache for the checksum that follows); a large one
 * (a sort's 128 MiB partitions) is mapped: copied, it would take fresh
 * anonymous pages beside the image's (bench ops: sort flight / memory 1.13
 * -> 2.18 when every span was copied). NULL also: see both. */
static fsh_buffer *span_of(int fd, int64_t lo, int64_t hi, int64_t bytes,
                           const fsh_locate_source *srcs, int64_t n_srcs) {
  bool dense = hi - lo <= 2 * bytes + ((int64_t)64 << 10);
  if (dense && hi - lo <= DIRECT_COPY_MAX) return read_range(fd, lo, hi);
  if (bytes < DIRECT_SPAN_MIN) return NULL;
  return dense ? map_range(fd, lo, hi, NULL, 0) : map_range(fd, lo, hi, srcs, n_srcs);
}

/* Reads job slot k's blocks from fd (entry src of the locate answer, the
 * file at path) and feeds them like a DoGet's: from span (the file's bytes
 * [span_lo, span_lo + span->size), read once for all the source's
 * partitions of a run) where it holds them, else read here (the span, or
 * block by block).
 * What it queued is delivered (flush) after the source's last slot. */
static int direct_slot(fetch *f, int64_t k, const fsh_locate_source *src, int fd,
                       const char *path, fsh_buffer *span, int64_t span_lo, fsh_error *err) {
  fr_reader *r = f->r;
  char via[4300];
  snprintf(via, sizeof via, " (read directly from %s)", path);
  f->via = via;
  f->dec = f->direct_dec;
  f->k = k;
  f->end = k + 1;
  f->transport = false;
  int64_t s = f->job->slots[k];
  const fr_slot *sl = slot_of(f, s);
  int rc = 0;
  if (src->n_blocks == 0) {
    rc = finish_empty(f, s, err);
    f->k++;
  }
  /* the span of the blocks, to map it when large enough */
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t i = 0; i < src->n_blocks; i++) {
    int64_t off, len;
    if (!block_range(src, i, &off, &len)) break; /* reported below */
    if (off < lo) lo = off;
    if (off + len > hi) hi = off + len;
  }
  if (span && (lo < span_lo || hi > span_lo + span->size)) span = NULL; /* (not from the answer) */
  fsh_buffer *map = span ? fsh_buffer_ref(span)
                    : src->bytes >= DIRECT_SPAN_MIN && hi > lo
                        ? span_of(fd, lo, hi, src->bytes, src, 1)
                        : NULL;
  if (span) lo = span_lo;
  for (int64_t i = 0; rc == 0 && i < src->n_blocks; i++) {
    const uint8_t *q = src->blocks + 32 * i;
    fsh_block_header h = {.map_id = sl->map_id, .attempt = sl->attempt,
                          .partition = sl->partition, .index = i, .n_blocks = src->n_blocks,
                          .length = (int64_t)fsh_le_get64(q + 8),
                          .rows = (int64_t)fsh_le_get64(q + 16), .checksum = fsh_le_get64(q + 24),
                          .part_checksum = src->checksum, .part_rows = src->rows,
                          .part_bytes = src->bytes};
    int64_t off = (int64_t)fsh_le_get64(q);
    if (off < 0 || h.length <= 0 || h.length > src->size || off > src->size - h.length) {
      rc = fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d partition %d: block %" PRId64
                         " at [%" PRId64 ", +%" PRId64 ") lies outside %s (%" PRId64 " bytes)",
                         f->prefix, sl->map_id, sl->attempt, sl->partition, i, off, h.length,
                         path, src->size);
      break;
    }
    if (map) { /* within [lo, hi): checked above */
      rc = feed_block(f, &h, map, off - lo, err);
      continue;
    }
    fsh_buffer *b = fsh_buffer_new(h.length, false);
    if (!b) {
      rc = fsh_error_set(err, ENOMEM, "%s: out of memory", f->prefix);
      break;
    }
    for (int64_t got = 0; rc == 0 && got < h.length;) {
      ssize_t n = pread(fd, b->data + got, (size_t)(h.length - got), off + got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        rc = fsh_error_set(err, EIO, "%s: map %" PRId64 " attempt %d partition %d: reading "
                           "block %" PRId64 " of %s: %s", f->prefix, sl->map_id, sl->attempt,
                           sl->partition, i, path, n < 0 ? strerror(errno) : "end of file");
      else got += n;
    }
    if (rc == 0) rc = feed_block(f, &h, b, 0, err);
    fsh_buffer_unref(b);
  }
  fsh_buffer_unref(map);
  if (rc == 0 && (s + 1) % r->count == 0) rc = flush(f, err); /* once per source */
  f->via = "";
  if (rc == 0) {
    if (s % r->count == 0) atomic_fetch_add(&fb_stats_of(r->st)->direct_sources, 1);
    atomic_fetch_add(&fb_stats_of(r->st)->direct_bytes, src->bytes);
  }
  return rc;
}

/* The bytes of fd that the blocks of locate entries [k, k + g) (one
 * source's partitions of a run) span, *lo their first offset, read at
 * once (span_of: copied when the span is not much more than the blocks --
 * a map output's partitions lie in order, so a run's blocks are mostly
 * contiguous -- or mapped when they hold at least DIRECT_SPAN_MIN bytes).
 * NULL: none
 * (each partition reads its own; also on ENOMEM or a failed read, which
 * the per-partition reads then report). */
static fsh_buffer *read_span(int fd, const fr_direct *d, int64_t k, int64_t g, int64_t *lo) {
  int64_t a = INT64_MAX, b = 0, sum = 0;
  for (int64_t i = k; i < k + g; i++) {
    const fsh_locate_source *src = &d->a.sources[i];
    for (int64_t j = 0; j < src->n_blocks; j++) {
      int64_t off, len;
      if (!block_range(src, j, &off, &len)) return NULL;
      if (off < a) a = off;
      if (off + len > b) b = off + len;
      sum += len;
    }
  }
  if (b <= a) return NULL;
  *lo = a;
  return span_of(fd, a, b, sum, &d->a.sources[k], g);
}

/* Whether locate entries [k, k + g) (one source's partitions of the run)
 * all name the same file: they must, coming from one open of it. */
static bool same_file(const fr_direct *d, int64_t k, int64_t g) {
  const fsh_locate_source *a = &d->a.sources[k];
  for (int64_t i = k + 1; i < k + g; i++) {
    const fsh_locate_source *b = &d->a.sources[i];
    if (b->kind != a->kind || b->dir_or_fd != a->dir_or_fd || b->dev != a->dev ||
        b->ino != a->ino || b->size != a->size || b->image_id != a->image_id ||
        strcmp(b->name, a->name) != 0)
      return false;
  }
  return true;
}

/* The job's slots in ascending order, a source's slots together: located
 * sources read directly (one open each), runs of
 * the others with one DoGet each (all of them, in one DoGet, when the
 * worker is on another host, direct reads are off, or its (map output,
 * partition)s hold fewer bytes on average than the backend's minimum).
 *
 * The rule counts bytes per (map output, partition) that has any, not per
 * source: a partition of a map output is at least one block, so its bytes
 * bound its blocks' size, and the block is what both paths pay for
 * (verify, decode, queue); what a direct read saves is per byte (no
 * server-side read, hash and copy, no socket), and what it adds is per
 * source (an open, fstat, trailer check) done by the one fetch thread of
 * the job, where DoGet splits the work between the peer's server and the
 * fetch thread. bench_range (same host, load 11-17, 5 runs each, medians
 * direct / DoGet; bench/shuffle/DIRECT_RUNS.md): 2 KiB blocks (1000
 * partitions, runs of 7-250 partitions, 14-524 KiB a source) CPU 0.74-1.23x,
 * wall 0.8-3.8x; 4 KiB blocks CPU 1.15x, wall 2.8x; 8 KiB CPU 0.68x, wall
 * 0.73x; 32-256 KiB CPU 0.35-0.58x, wall 0.3-1.5x. Counted per source,
 * a run of 26 partitions of 2 KiB blocks (1000 x 1000 2 GiB, coalesced
 * reduces) was read directly and made the reduce phase 2-3x slower. */
static int run_slots(fetch *f, fsh_error *err) {
  fr_reader *r = f->r;
  fr_job *job = f->job;
  fr_direct d;
  memset(&d, 0, sizeof d);
  bool direct = false;
  int rc = 0;
  /* small partitions (by the metadata) come cheaper in one bundled DoGet */
  int64_t bytes = 0, parts = 0, min = fb_direct_min_bytes(r->st);
  bool small = min > 0;
  for (int64_t k = 0; small && k < job->n_slots; k++) {
    const fr_slot *sl = slot_of(f, job->slots[k]);
    small = sl->has_meta;
    bytes += sl->bytes;
    parts += sl->bytes > 0;
  }
  /* (all empty: a DoGet that sends nothing, no locate) */
  if (small && parts > 0 && bytes >= min * parts) small = false;
  if (!small && min > 0) small = fb_small_sources(r->st, job->uri, r->shuffle_id, false);
  if (fb_direct_enabled(r->st) && !small) {
    f->transport = true;
    rc = fr_direct_locate(r, job, &d, &direct, err);
    if (rc != 0) return rc;
  }
  if (direct && min > 0) { /* no sizes beforehand: the answer's */
    bytes = parts = 0;
    for (int64_t k = 0; k < job->n_slots; k++)
      if (d.a.sources[k].kind != FSH_STORE_AT_NONE && d.a.sources[k].bytes > 0)
        parts++, bytes += d.a.sources[k].bytes;
    if (parts > 0 && bytes < min * parts) {
      fb_small_sources(r->st, job->uri, r->shuffle_id, true);
      fr_direct_reset(&d);
      direct = false;
    }
  }
  int64_t g = r->count; /* a source's slots: its partitions of the run */
  for (int64_t k = 0; rc == 0 && k < job->n_slots;) {
    if (direct && d.a.sources[k].kind == FSH_STORE_AT_VM) {
      char path[200];
      fsh_buffer *span = NULL;
      int64_t lo = 0;
      int vr = fr_direct_vm_read(&d, k, g, &span, &lo, path, sizeof path);
      if (vr == 0) { /* every block of the source's partitions is in span */
        rc = direct_decoder(f, &d, err);
        for (int64_t kk = k; rc == 0 && kk < k + g; kk++)
          rc = direct_slot(f, kk, &d.a.sources[kk], -1, path, span, lo, err);
        fsh_buffer_unref(span);
        k += g;
        continue;
      }
      for (int64_t kk = k; kk < k + g; kk++) d.a.sources[kk].kind = FSH_STORE_AT_NONE;
      atomic_fetch_add(&fb_stats_of(r->st)->direct_fallbacks, 1);
      if (vr == -2) { /* may not read its memory: this peer's all fetched, from now on too */
        if (fb_same_host(r->st, job->uri, 0) > 0)
          fprintf(stderr, "flightshuffle: flight shuffle: worker %s: reading its memory "
                  "images with process_vm_readv is not permitted here (EPERM: ptrace "
                  "restrictions, e.g. kernel.yama.ptrace_scope >= 1, or a container "
                  "without CAP_SYS_PTRACE): its map outputs are fetched with DoGet from now "
                  "on; set kernel.yama.ptrace_scope=0, or run the workers with "
                  "--images memfd, to read them directly\n", job->uri);
        fb_same_host(r->st, job->uri, -1);
        for (int64_t j = k + g; j < job->n_slots; j++) d.a.sources[j].kind = FSH_STORE_AT_NONE;
      }
    } else if (direct && d.a.sources[k].kind != FSH_STORE_AT_NONE) {
      char path[4200];
      int fd = same_file(&d, k, g) ? fr_direct_open(&d, k, path, sizeof path) : -1;
      if (fd >= 0) { /* one open for all the source's partitions of the run */
        rc = direct_decoder(f, &d, err);
        int64_t lo = 0;
        fsh_buffer *span = g > 1 ? read_span(fd, &d, k, g, &lo) : NULL;
        for (int64_t kk = k; rc == 0 && kk < k + g; kk++)
          rc = direct_slot(f, kk, &d.a.sources[kk], fd, path, span, lo, err);
        fsh_buffer_unref(span);
        close(fd);
        k += g;
        continue;
      }
      /* gone or changed: DoGet says what became of it */
      for (int64_t kk = k; kk < k + g; kk++) d.a.sources[kk].kind = FSH_STORE_AT_NONE;
      atomic_fetch_add(&fb_stats_of(r->st)->direct_fallbacks, 1);
      if (fd == -2) { /* not ours to open: this peer's are all fetched, from now on too */
        fb_same_host(r->st, job->uri, -1);
        for (int64_t j = k + g; j < job->n_slots; j++) d.a.sources[j].kind = FSH_STORE_AT_NONE;
      }
    }
    int64_t e = k + g;
    while (e < job->n_slots && !(direct && d.a.sources[e].kind != FSH_STORE_AT_NONE)) e += g;
    rc = fetch_stream(f, k, e, err);
    k = e;
  }
  if (direct) fr_direct_reset(&d);
  return rc;
}

/* Rewrites a failed job's error as "<prefix>: lost map outputs [map/attempt
 * ...] (why): <cause>" for humans, and marks those slots lost (and the job
 * gone) for the consumer to report to the task (fsh_worker_task_report_lost),
 * so that a scheduler learns which map outputs to recompute: when the worker cannot be reached, hangs (deadline) or breaks
 * the stream off, every map output this reader wanted from it (the worker
 * is presumably gone, and with it what was already read); otherwise (the
 * worker answered with an error, or its data failed verification) the one
 * the error names (ENOENT, EIO: not held, missing, corrupt), or else the
 * ones not fully read. */
static void describe_loss(fetch *f, int rc, fsh_error *err) {
  fr_reader *r = f->r;
  fr_job *job = f->job;
  bool gone = f->transport && (rc == EAGAIN || rc == ETIMEDOUT || rc == EPIPE ||
                               rc == ECONNREFUSED || rc == ECONNRESET);
  char list[400];
  size_t at = 0;
  int64_t listed = 0, lost = 0;
  /* the worker answered naming one map output ("... map M attempt A ...":
   * not held, its spill file missing, its data corrupt): that one alone is
   * lost; the others not read yet are still there for a retry */
  int64_t named = -1;
  pthread_mutex_lock(&r->mu);
  for (int64_t i = 0; !gone && (rc == ENOENT || rc == EIO) && i < job->n_slots; i++) {
    const fr_slot *sl = slot_of(f, job->slots[i]);
    char needle[64];
    snprintf(needle, sizeof needle, "map %" PRId64 " attempt %d", sl->map_id, sl->attempt);
    const char *hit = strstr(err->message, needle);
    size_t nl = strlen(needle);
    if (!sl->done && hit && !(hit[nl] >= '0' && hit[nl] <= '9')) {
      const fr_slot *was = named >= 0 ? slot_of(f, job->slots[named]) : NULL;
      if (was && (was->map_id != sl->map_id || was->attempt != sl->attempt)) {
        named = -1; /* two named: not that simple */
        break;
      }
      if (!was) named = i; /* (another partition of the same source: the same one) */
    }
  }
  const fr_slot *named_sl = named >= 0 ? slot_of(f, job->slots[named]) : NULL;
  const fr_slot *last = NULL; /* the last listed: a source is listed once */
  for (int64_t i = 0; i < job->n_slots; i++) {
    const fr_slot *sl = slot_of(f, job->slots[i]);
    if (!gone && sl->done) continue;
    if (named_sl && (sl->map_id != named_sl->map_id || sl->attempt != named_sl->attempt))
      continue;
    r->slots[job->slots[i]].lost = true;
    if (last && last->map_id == sl->map_id && last->attempt == sl->attempt) continue;
    last = sl;
    lost++;
    if (at + 48 < sizeof list) {
      at += (size_t)snprintf(list + at, sizeof list - at, "%s%" PRId64 "/%d", listed ? " " : "",
                             sl->map_id, sl->attempt);
      listed++;
    }
  }
  job->gone = gone;
  pthread_mutex_unlock(&r->mu);
  if (listed < lost)
    snprintf(list + at, sizeof list - at, " and %" PRId64 " more", lost - listed);
  char cause[sizeof err->message];
  size_t np = strlen(f->prefix);
  const char *m = err->message;
  if (strncmp(m, f->prefix, np) == 0 && m[np] == ':' && m[np + 1] == ' ') m += np + 2;
  snprintf(cause, sizeof cause, "%s", m);
  const fr_slot *first = slot_of(f, job->slots[0]);
  if (f->transport)
    fsh_error_set(err, rc, "%s: lost map outputs [map/attempt %s] (%s): fetching %" PRId64
                  " map output(s) (map %" PRId64 " attempt %d first): %s", f->prefix, list,
                  gone ? "the worker is unreachable, hung or broke off the stream: every map "
                         "output read from it" : "not fully read", job->n_slots / r->count,
                  first->map_id,
                  first->attempt, cause);
  else
    fsh_error_set(err, rc, "%s: lost map outputs [map/attempt %s] (not fully read): %s",
                  f->prefix, list, cause);
}

void fr_run_job(fr_reader *r, int j) {
  fr_job *job = &r->jobs[j];
  fetch f = {.r = r, .job = job, .cur_slot = -1, .via = ""};
  fsh_error err = {{0}};
  snprintf(f.prefix, sizeof f.prefix, "flight shuffle %" PRIu64 " %s: worker %s",
           r->shuffle_id, r->what, job->uri);
  int rc = run_slots(&f, &err);
  if (rc == 0) {
    rc = flush(&f, &err);
  } else { /* what was verified is delivered: describe_loss counts its sources done */
    fsh_error ignored = {{0}};
    (void)flush(&f, &ignored);
  }
  if (rc != 0 && rc != ENOMEM) describe_loss(&f, rc, &err);
  drop_pending(&f);
  drop_msgs(&f);
  fsh_free(f.msgs);
  fsh_ipc_decoder_free(f.stream_dec);
  fsh_ipc_decoder_free(f.direct_dec);
  pthread_mutex_lock(&r->mu);
  job->finished = true;
  job->rc = rc;
  if (rc != 0) job->err = err;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}
