/* worker_get.c -- a worker's DoGet of a shuffle ticket: the partition's
 * (or the run of partitions') stored blocks of each named map output --
 * each opened once for the whole run -- streamed as stored (no
 * decoding): the schema message, then each block's messages sliced out of
 * the block's bytes (a memory image slice or one pread of the spill file
 * range), the first message of each block carrying the block header
 * (layout in shuffle.h) so the reader can verify the block. The server
 * verifies each block against its checksum before sending any of it: a
 * client that does not check the block headers -- pyarrow.flight, any
 * Flight client -- gets an error naming this worker, the map output, the
 * partition and the spill file, never corrupt rows. A ticket with
 * FSH_TICKET_CLIENT_VERIFIES (our reader, which checks every block against
 * its header, naming the worker, map output and partition) skips the
 * server's hash of memory images' blocks: one pass over each block less
 * (the hash's compute; the first touch of the image's pages it paid now
 * falls to the send -- bench/shuffle/PROFILE_REDUCE.md). Spill files'
 * blocks are still checked here, so that a damaged file is named.
 *
 * Nothing is copied for a memory image: the server pulls next_pieces, so
 * a block's messages go out as slices of the image and a bundle as pieces
 * (its headers in one small buffer, each block a slice of its image),
 * which the flight layer hands to gRPC as slices holding a reference on
 * the image; only runs of pieces under FSH_FLIGHT_PIECE_SLICE_MIN (tiny
 * blocks) are copied once, into one slice. A spill file's block is the one
 * pread of its range. So a shuffle released, an image evicted or its memfd
 * reused while gRPC still holds a message leaves that message's bytes
 * alone: the image is unmapped (its memfd pooled) when the last reference
 * goes. `next` (other callers) copies a bundle into one buffer. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/worker_internal.h"

typedef struct get_source {
  fsh_flight_source base;
  fsh_shuffle_store *store;
  fsh_shuffle_ticket t;
  int64_t next_src; /* the next ticket entry to open */
  fsh_schema *schema; /* the first map output's; the others must match */
  fsh_buffer *schema_msg; /* its schema message's metadata */
  bool schema_sent;
  fsh_map_file *f; /* current map output */
  int32_t q;       /* the partition of the run being sent from it */
  fsh_map_file_partition part; /* q's index entry */
  int64_t next_block;
  fsh_buffer *block; /* current block's bytes */
  int64_t pos;       /* next message in block */
  int64_t cur_src;   /* the ticket entry being sent */
  char what[160];    /* "shuffle 1 partition 2 map 3 attempt 0", by what() */
  /* bundles (FSH_TICKET_BUNDLE): the blocks gathered for the next one */
  fsh_buffer **bundle;
  fsh_block_header *bundle_h;
  int64_t n_bundle, cap_bundle;
  /* next_pieces: the last message's app_metadata pieces and the buffer of
   * their headers, held until the next call (the server has encoded them
   * by then; gRPC's slices hold their own references) */
  fsh_flight_piece *pieces;
  int64_t cap_pieces;
  fsh_buffer *headers;
  int pending_rc; /* an error met after gathering: returned next time */
  fsh_error pending_err;
} get_source;

static void close_current(get_source *g) {
  fsh_buffer_unref(g->block);
  g->block = NULL;
  fsh_map_file_partition_reset(&g->part);
  fsh_map_file_close(g->f);
  g->f = NULL;
}

/* "shuffle 1 partition 2 map 3 attempt 0" of the entry being sent, for
 * messages (formatted only when one is written). */
static const char *what(get_source *g) {
  const fsh_ticket_source *src = &g->t.sources[g->cur_src];
  snprintf(g->what, sizeof g->what, "shuffle %" PRIu64 " partition %d map %" PRId64 " attempt %d",
           g->t.shuffle_id, g->f ? g->q : g->t.partition, src->map_id, src->attempt);
  return g->what;
}

/* Whether map file f's schema is g->schema: the same verified schema
 * message bytes (every map output of a shuffle, the common case) or equal
 * schemas; *diff says how they differ when not. */
static bool same_schema(get_source *g, fsh_map_file *f, fsh_error *diff) {
  const fsh_buffer *a = g->schema_msg, *b = fsh_map_file_schema_message(f);
  if (a->size == b->size && memcmp(a->data, b->data, (size_t)a->size) == 0) return true;
  return fsh_schema_equals(g->schema, fsh_map_file_schema(f), true, diff);
}

/* The ticket's number of partitions (1 for a version 1 ticket). */
static int32_t run_length(const fsh_shuffle_ticket *t) {
  return t->n_partitions_read > 1 ? t->n_partitions_read : 1;
}

/* Opens ticket entry i's map output (once for the ticket's whole run of
 * partitions) and the run's first partition entry. */
static int open_entry(get_source *g, int64_t i, fsh_error *err) {
  const fsh_ticket_source *src = &g->t.sources[i];
  g->cur_src = i;
  int rc = fsh_store_open(g->store, g->t.shuffle_id, src->map_id, src->attempt, &g->f, err);
  if (rc != 0) return rc;
  const fsh_map_file_info *info = fsh_map_file_get_info(g->f);
  fsh_error diff = {{0}};
  g->q = g->t.partition;
  if ((int64_t)g->t.partition + run_length(&g->t) > info->n_partitions)
    rc = fsh_error_set(err, EINVAL, "worker %s: %s: the map output has %d partitions (the "
                       "ticket asks for %d from partition %d)", fsh_store_name(g->store), what(g),
                       info->n_partitions, run_length(&g->t), g->t.partition);
  else if (g->schema && !same_schema(g, g->f, &diff))
    rc = fsh_error_set(err, EINVAL, "worker %s: %s: its schema differs from the first map "
                       "output's in the ticket: %s", fsh_store_name(g->store), what(g),
                       diff.message);
  if (rc == 0) rc = fsh_map_file_get_partition(g->f, g->t.partition, &g->part, err);
  if (rc == 0 && !g->schema) {
    g->schema = fsh_schema_ref(fsh_map_file_schema(g->f));
    g->schema_msg = fsh_buffer_ref(fsh_map_file_schema_message(g->f));
  }
  g->next_block = 0;
  if (rc != 0) close_current(g);
  return rc;
}

/* The schema message as a payload: its metadata bytes as stored and
 * verified when the map output was first opened. */
static int schema_payload(get_source *g, fsh_ipc_payload *out, fsh_error *err) {
  out->metadata = fsh_buffer_ref(fsh_map_file_schema_message(g->f));
  out->type = FSH_IPC_SCHEMA;
  (void)err;
  return 0;
}

/* Makes g->block the next block to send (opening map outputs as needed);
 * *done when every entry is sent. */
static int next_block(get_source *g, bool *done, fsh_error *err) {
  *done = false;
  while (!g->block) {
    if (g->f && g->next_block < g->part.n_blocks) {
      int rc = g->t.flags & FSH_TICKET_CLIENT_VERIFIES
                   ? fsh_map_file_read_block_image_unchecked(g->f, &g->part, g->next_block,
                                                             &g->block, err)
                   : fsh_map_file_read_block(g->f, &g->part, g->next_block, &g->block, err);
      if (rc != 0)
        return rc == ENOMEM ? rc : fsh_error_prefix(err, rc, "worker %s: ",
                                                    fsh_store_name(g->store));
      g->pos = 0;
      return 0;
    }
    if (g->f && g->q + 1 < g->t.partition + run_length(&g->t)) { /* the run's next partition */
      fsh_map_file_partition_reset(&g->part);
      g->q++;
      g->next_block = 0;
      int rc = fsh_map_file_get_partition(g->f, g->q, &g->part, err);
      if (rc != 0) {
        close_current(g);
        return rc;
      }
      continue;
    }
    close_current(g);
    if (g->next_src == g->t.n_sources) {
      *done = true;
      return 0;
    }
    FSH_RETURN_NOT_OK(open_entry(g, g->next_src++, err));
  }
  return 0;
}

/* The header of the current block (g->block). */
static fsh_block_header current_header(const get_source *g) {
  const fsh_map_file_block *bl = &g->part.blocks[g->next_block];
  return (fsh_block_header){
      .map_id = g->t.sources[g->next_src - 1].map_id,
      .attempt = g->t.sources[g->next_src - 1].attempt,
      .partition = g->q, .index = g->next_block, .n_blocks = g->part.n_blocks,
      .length = bl->length, .rows = bl->rows, .checksum = bl->checksum,
      .part_checksum = g->part.checksum, .part_rows = g->part.rows,
      .part_bytes = g->part.bytes};
}

static void drop_bundle(get_source *g) {
  for (int64_t i = 0; i < g->n_bundle; i++) fsh_buffer_unref(g->bundle[i]);
  g->n_bundle = 0;
}

/* Gathers whole small blocks, from g->block on (at its start), across the
 * ticket's map outputs, into g->bundle (their headers in g->bundle_h), for
 * one bundle of about FSH_BUNDLE_TARGET bytes (layout in
 * shuffle_internal.h): one FlightData instead of one per block -- the
 * per-message cost is what stalls a shuffle of many tiny blocks. The blocks
 * were verified as they were read (or are left to the client:
 * FSH_TICKET_CLIENT_VERIFIES). An error met after some blocks were
 * gathered is kept for the next call (those go out first). *total: the
 * bundle's bytes. */
static int gather_bundle(get_source *g, int64_t *total, fsh_error *err) {
  *total = FSH_BUNDLE_HEADER_BYTES;
  bool end = false;
  while (!end) {
    if (g->n_bundle == g->cap_bundle) {
      int64_t cap = g->cap_bundle ? 2 * g->cap_bundle : 64;
      fsh_buffer **nb = fsh_realloc(g->bundle, sizeof *nb * (size_t)cap);
      if (nb) g->bundle = nb;
      fsh_block_header *nh = nb ? fsh_realloc(g->bundle_h, sizeof *nh * (size_t)cap) : NULL;
      if (nh) g->bundle_h = nh;
      if (!nb || !nh) {
        drop_bundle(g);
        return fsh_error_set(err, ENOMEM, "worker %s: %s: out of memory",
                             fsh_store_name(g->store), what(g));
      }
      g->cap_bundle = cap;
    }
    g->bundle_h[g->n_bundle] = current_header(g);
    g->bundle[g->n_bundle++] = g->block;
    *total += FSH_BLOCK_HEADER_BYTES + g->block->size;
    g->block = NULL;
    g->next_block++;
    if (*total >= FSH_BUNDLE_TARGET) break;
    int rc = next_block(g, &end, err);
    if (rc != 0) {
      g->pending_rc = rc;
      if (err) g->pending_err = *err;
      break;
    }
    if (!end && (g->block->size > FSH_BUNDLE_MAX_BLOCK ||
                 *total + FSH_BLOCK_HEADER_BYTES + g->block->size > FSH_BUNDLE_TARGET))
      break; /* goes out next time */
  }
  return 0;
}

/* The bundle header (FSH_BUNDLE_HEADER_BYTES) of n blocks at p. */
static void bundle_header_encode(int64_t n, uint8_t *p) {
  memset(p, 0, FSH_BUNDLE_HEADER_BYTES);
  memcpy(p, FSH_BUNDLE_MAGIC, 4);
  p[4] = 1;
  fsh_le_put32(p + 8, (uint32_t)n);
}

/* The gathered bundle copied into one buffer (for callers of `next`; the
 * server calls next_pieces, which copies nothing). */
static int bundle_copy(get_source *g, int64_t total, fsh_buffer **app_metadata, fsh_error *err) {
  fsh_buffer *b = fsh_buffer_new(total, false);
  if (!b) {
    drop_bundle(g);
    return fsh_error_set(err, ENOMEM, "worker %s: %s: out of memory", fsh_store_name(g->store),
                         what(g));
  }
  uint8_t *p = b->data;
  bundle_header_encode(g->n_bundle, p);
  int64_t at = FSH_BUNDLE_HEADER_BYTES;
  for (int64_t i = 0; i < g->n_bundle; i++) {
    fsh_block_header_encode(&g->bundle_h[i], p + at);
    at += FSH_BLOCK_HEADER_BYTES;
    memcpy(p + at, g->bundle[i]->data, (size_t)g->bundle[i]->size);
    at += g->bundle[i]->size;
  }
  drop_bundle(g);
  *app_metadata = b;
  return 0;
}

/* The gathered bundle as pieces: the bundle header and the block headers
 * in one small buffer (g->headers), each block's bytes a piece of its own
 * buffer -- a slice of the memory image (kept alive by the slice's
 * reference on the image, then by gRPC's, however the store releases,
 * evicts or reuses the image meanwhile) or the one pread of a spill file's
 * range. g->pieces and the references stay until the next call. */
static int bundle_pieces(get_source *g, const fsh_flight_piece **pieces, int64_t *n_pieces,
                         fsh_error *err) {
  int64_t n = 2 * g->n_bundle;
  if (n > g->cap_pieces) {
    fsh_flight_piece *np = fsh_realloc(g->pieces, sizeof *np * (size_t)n);
    if (np) g->pieces = np, g->cap_pieces = n;
  }
  g->headers = n <= g->cap_pieces
                   ? fsh_buffer_new(FSH_BUNDLE_HEADER_BYTES + FSH_BLOCK_HEADER_BYTES * g->n_bundle,
                                    false)
                   : NULL;
  if (!g->headers) {
    drop_bundle(g);
    return fsh_error_set(err, ENOMEM, "worker %s: %s: out of memory", fsh_store_name(g->store),
                         what(g));
  }
  uint8_t *h = g->headers->data;
  bundle_header_encode(g->n_bundle, h);
  for (int64_t i = 0; i < g->n_bundle; i++) {
    int64_t at = FSH_BUNDLE_HEADER_BYTES + FSH_BLOCK_HEADER_BYTES * i;
    fsh_block_header_encode(&g->bundle_h[i], h + at);
    int64_t from = i == 0 ? 0 : at; /* the first piece carries the bundle header too */
    g->pieces[2 * i] = (fsh_flight_piece){g->headers, from, at + FSH_BLOCK_HEADER_BYTES - from};
    g->pieces[2 * i + 1] = (fsh_flight_piece){g->bundle[i], 0, g->bundle[i]->size};
  }
  *pieces = g->pieces;
  *n_pieces = n;
  return 0;
}

/* The references the last next_pieces answer held. */
static void drop_pieces(get_source *g) {
  drop_bundle(g);
  fsh_buffer_unref(g->headers);
  g->headers = NULL;
}

/* The next message: a schema, one framed message of a block (its first
 * with the block's header as *app_metadata), or -- *bundle_bytes > 0 -- a
 * bundle gathered in g->bundle, *bundle_bytes long, for the caller to
 * send. */
static int produce(get_source *g, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                   int64_t *bundle_bytes, bool *done, fsh_error *err) {
  memset(out, 0, sizeof *out);
  *done = false;
  *bundle_bytes = 0;
  if (!g->schema_sent) {
    FSH_RETURN_NOT_OK(open_entry(g, g->next_src++, err));
    FSH_RETURN_NOT_OK(schema_payload(g, out, err));
    g->schema_sent = true;
    return 0;
  }
  if (g->pending_rc) {
    if (err) *err = g->pending_err;
    return g->pending_rc;
  }
  FSH_RETURN_NOT_OK(next_block(g, done, err));
  if (*done) return 0;
  if ((g->t.flags & FSH_TICKET_BUNDLE) && g->pos == 0 && g->block->size <= FSH_BUNDLE_MAX_BLOCK)
    return gather_bundle(g, bundle_bytes, err); /* a message of app_metadata only */
  /* One framed message of the block: FFFFFFFF, length, metadata, body. */
  fsh_buffer *b = g->block;
  int64_t at = g->pos, left = b->size - at;
  int64_t len = left >= 8 ? (int64_t)fsh_le_get32(b->data + at + 4) : -1;
  if (left < 8 || fsh_le_get32(b->data + at) != 0xFFFFFFFFu || len <= 0 || len % 8 ||
      len > left - 8)
    return fsh_error_set(err, EIO, "worker %s: %s: block %" PRId64 " is malformed at byte %" PRId64,
                         fsh_store_name(g->store), what(g), g->next_block, at);
  int rc = 0;
  if (!(out->metadata = fsh_buffer_slice(b, at + 8, len))) rc = ENOMEM;
  int64_t body_len = 0;
  if (rc == 0) rc = fsh_ipc_peek_message(out->metadata, &out->type, &body_len, err);
  if (rc == 0 && (body_len < 0 || body_len % 8 || body_len > left - 8 - len))
    rc = fsh_error_set(err, EIO, "worker %s: %s: block %" PRId64 ": a body past the block",
                       fsh_store_name(g->store), what(g), g->next_block);
  if (rc == 0 && body_len > 0) {
    out->body = fsh_malloc(sizeof *out->body);
    if (!out->body || !(out->body[0] = fsh_buffer_slice(b, at + 8 + len, body_len))) {
      rc = ENOMEM;
    } else {
      out->n_body = 1;
      out->body_length = body_len;
    }
  }
  if (rc == 0 && at == 0) {
    fsh_block_header h = current_header(g);
    fsh_buffer *hb = fsh_buffer_new(FSH_BLOCK_HEADER_BYTES, false);
    if (!hb) rc = ENOMEM;
    else fsh_block_header_encode(&h, hb->data), *app_metadata = hb;
  }
  if (rc != 0) {
    fsh_ipc_payload_reset(out);
    return rc == ENOMEM ? fsh_error_set(err, ENOMEM, "worker %s: %s: out of memory",
                                        fsh_store_name(g->store), what(g))
                        : rc;
  }
  g->pos = at + 8 + len + body_len;
  if (g->pos == b->size) {
    fsh_buffer_unref(g->block);
    g->block = NULL;
    g->next_block++;
  }
  return 0;
}

static int get_next(fsh_flight_source *base, fsh_ipc_payload *out, fsh_buffer **app_metadata,
                    bool *done, fsh_error *err) {
  get_source *g = base->ctx;
  drop_pieces(g);
  int64_t bundle_bytes = 0;
  FSH_RETURN_NOT_OK(produce(g, out, app_metadata, &bundle_bytes, done, err));
  return bundle_bytes > 0 ? bundle_copy(g, bundle_bytes, app_metadata, err) : 0;
}

/* What the server calls: a bundle goes out as pieces of the stored
 * blocks, a block's header (with its first message) as a piece of its
 * own buffer. */
static int get_next_pieces(fsh_flight_source *base, fsh_ipc_payload *out,
                           const fsh_flight_piece **pieces, int64_t *n_pieces, bool *done,
                           fsh_error *err) {
  get_source *g = base->ctx;
  drop_pieces(g);
  *pieces = NULL;
  *n_pieces = 0;
  int64_t bundle_bytes = 0;
  fsh_buffer *hb = NULL;
  FSH_RETURN_NOT_OK(produce(g, out, &hb, &bundle_bytes, done, err));
  if (bundle_bytes > 0) return bundle_pieces(g, pieces, n_pieces, err);
  if (hb) {
    if (g->cap_pieces < 1) {
      fsh_flight_piece *np = fsh_realloc(g->pieces, sizeof *np);
      if (!np) {
        fsh_buffer_unref(hb);
        fsh_ipc_payload_reset(out);
        return fsh_error_set(err, ENOMEM, "worker %s: %s: out of memory",
                             fsh_store_name(g->store), what(g));
      }
      g->pieces = np;
      g->cap_pieces = 1;
    }
    g->headers = hb;
    g->pieces[0] = (fsh_flight_piece){hb, 0, hb->size};
    *pieces = g->pieces;
    *n_pieces = 1;
  }
  return 0;
}

static void get_release(fsh_flight_source *base) {
  get_source *g = base->ctx;
  drop_pieces(g);
  fsh_free(g->pieces);
  fsh_free(g->bundle);
  fsh_free(g->bundle_h);
  close_current(g);
  fsh_schema_unref(g->schema);
  fsh_buffer_unref(g->schema_msg);
  fsh_shuffle_ticket_reset(&g->t);
  fsh_free(g);
}

int fsh_worker_do_get(fsh_shuffle_store *store, const uint8_t *ticket, int64_t size,
                      fsh_flight_source **out, fsh_error *err) {
  fsh_shuffle_ticket t;
  int rc = fsh_shuffle_ticket_decode(ticket, size, &t, err);
  if (rc != 0) return fsh_error_prefix(err, rc, "worker %s: DoGet: ", fsh_store_name(store));
  if (t.n_sources == 0)
    rc = fsh_error_set(err, EINVAL, "worker %s: DoGet: the ticket for shuffle %" PRIu64
                       " partition %d names no map output", fsh_store_name(store), t.shuffle_id,
                       t.partition);
  /* Everything named must be here now (a later release still fails the
   * stream, when it gets there). */
  for (int64_t i = 0; rc == 0 && i < t.n_sources; i++) {
    int32_t np = 0;
    if (!fsh_store_has(store, t.shuffle_id, t.sources[i].map_id, t.sources[i].attempt, &np))
      rc = fsh_error_set(err, ENOENT, "worker %s: shuffle %" PRIu64 " map %" PRId64 " attempt %d"
                         " is not held here (released, lost, or never written)",
                         fsh_store_name(store), t.shuffle_id, t.sources[i].map_id,
                         t.sources[i].attempt);
    else if (t.partition >= np && run_length(&t) == 1)
      rc = fsh_error_set(err, EINVAL, "worker %s: shuffle %" PRIu64 " map %" PRId64 " attempt %d:"
                         " partition %d of %d", fsh_store_name(store), t.shuffle_id,
                         t.sources[i].map_id, t.sources[i].attempt, t.partition, np);
    else if ((int64_t)t.partition + run_length(&t) > np)
      rc = fsh_error_set(err, EINVAL, "worker %s: shuffle %" PRIu64 " map %" PRId64 " attempt %d:"
                         " partitions [%d, %d) of %d", fsh_store_name(store), t.shuffle_id,
                         t.sources[i].map_id, t.sources[i].attempt, t.partition,
                         t.partition + run_length(&t), np);
  }
  get_source *g = rc == 0 ? fsh_calloc(1, sizeof *g) : NULL;
  if (rc == 0 && !g) rc = fsh_error_set(err, ENOMEM, "worker %s: DoGet: out of memory",
                                        fsh_store_name(store));
  if (rc != 0) {
    fsh_shuffle_ticket_reset(&t);
    return rc;
  }
  g->store = store;
  g->t = t;
  g->base = (fsh_flight_source){
      .next = get_next, .next_pieces = get_next_pieces, .release = get_release, .ctx = g};
  *out = &g->base;
  return 0;
}
