/* wire.c -- the flight backend's small wire formats (layouts in shuffle.h):
 * the DoGet ticket naming (shuffle, a partition or a run of them, map
 * outputs), the block
 * header carried in FlightData app_metadata, and the DoPut PutResult with
 * a map output's metadata. Fixed binary layouts with a magic and a version
 * byte; decoders check every length before reading. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "shuffle/shuffle_internal.h"

/* ---- ticket ------------------------------------------------------------ */

void fsh_shuffle_ticket_reset(fsh_shuffle_ticket *t) {
  if (!t) return;
  fsh_free(t->sources);
  memset(t, 0, sizeof *t);
}

int fsh_shuffle_ticket_encode(const fsh_shuffle_ticket *t, fsh_buffer **out, fsh_error *err) {
  if (t->n_sources < 0 || t->n_sources > FSH_TICKET_MAX_SOURCES)
    return fsh_error_set(err, EINVAL, "shuffle ticket: %" PRId64 " map outputs (at most %" PRId64
                         ")", t->n_sources, FSH_TICKET_MAX_SOURCES);
  if (t->partition < 0 || t->n_partitions_read < 0 ||
      (int64_t)t->partition + t->n_partitions_read > INT32_MAX)
    return fsh_error_set(err, EINVAL, "shuffle ticket: %d partitions from partition %d",
                         t->n_partitions_read, t->partition);
  bool run = t->n_partitions_read > 1;
  int64_t header = run ? FSH_TICKET_V2_HEADER_BYTES : FSH_TICKET_HEADER_BYTES;
  int64_t size = header + FSH_TICKET_SOURCE_BYTES * t->n_sources;
  fsh_buffer *b = fsh_buffer_new(size, true);
  if (!b) return fsh_error_set(err, ENOMEM, "shuffle ticket: out of memory");
  uint8_t *p = b->data;
  memcpy(p, FSH_TICKET_MAGIC, 4);
  p[4] = run ? 2 : 1;
  p[5] = t->flags;
  fsh_le_put64(p + 8, t->shuffle_id);
  fsh_le_put32(p + 16, (uint32_t)t->partition);
  fsh_le_put32(p + 20, (uint32_t)t->n_sources);
  if (run) fsh_le_put32(p + 24, (uint32_t)t->n_partitions_read);
  for (int64_t i = 0; i < t->n_sources; i++) {
    uint8_t *s = p + header + FSH_TICKET_SOURCE_BYTES * i;
    fsh_le_put64(s, (uint64_t)t->sources[i].map_id);
    fsh_le_put32(s + 8, (uint32_t)t->sources[i].attempt);
  }
  *out = b;
  return 0;
}

int fsh_shuffle_ticket_decode(const uint8_t *p, int64_t size, fsh_shuffle_ticket *out,
                              fsh_error *err) {
  if (size < FSH_TICKET_HEADER_BYTES || memcmp(p, FSH_TICKET_MAGIC, 4) != 0)
    return fsh_error_set(err, EINVAL, "not a shuffle ticket (%" PRId64 " bytes, no " FSH_TICKET_MAGIC
                         " header)", size);
  if ((p[4] != 1 && p[4] != 2) || (p[5] & ~(FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES)) ||
      p[6] || p[7])
    return fsh_error_set(err, EINVAL, "shuffle ticket version %u flags %#x is not supported "
                         "(version 1 or 2, flags of bits 0 and 1 only)", p[4], p[5]);
  fsh_shuffle_ticket t = {0};
  t.flags = p[5];
  t.shuffle_id = fsh_le_get64(p + 8);
  t.partition = (int32_t)fsh_le_get32(p + 16);
  t.n_partitions_read = 1;
  int64_t n = fsh_le_get32(p + 20), header = FSH_TICKET_HEADER_BYTES;
  if (p[4] == 2) {
    header = FSH_TICKET_V2_HEADER_BYTES;
    if (size < header)
      return fsh_error_set(err, EINVAL, "shuffle ticket: a version 2 header in %" PRId64 " bytes",
                           size);
    int64_t count = fsh_le_get32(p + 24);
    if (count < 1 || count > INT32_MAX || fsh_le_get32(p + 28) != 0 ||
        (int64_t)t.partition + count > INT32_MAX)
      return fsh_error_set(err, EINVAL, "shuffle ticket: a run of %" PRId64 " partitions from "
                           "partition %d: malformed", count, t.partition);
    t.n_partitions_read = (int32_t)count;
  }
  if (t.partition < 0 || n > FSH_TICKET_MAX_SOURCES ||
      size != header + FSH_TICKET_SOURCE_BYTES * n)
    return fsh_error_set(err, EINVAL, "shuffle ticket: partition %d, %" PRId64 " map outputs in %"
                         PRId64 " bytes: malformed", t.partition, n, size);
  t.sources = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *t.sources);
  if (!t.sources) return fsh_error_set(err, ENOMEM, "shuffle ticket: out of memory");
  t.n_sources = n;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *s = p + header + FSH_TICKET_SOURCE_BYTES * i;
    t.sources[i].map_id = (int64_t)fsh_le_get64(s);
    t.sources[i].attempt = (int32_t)fsh_le_get32(s + 8);
    if (t.sources[i].map_id < 0 || t.sources[i].attempt < 0 || fsh_le_get32(s + 12) != 0) {
      int rc = fsh_error_set(err, EINVAL, "shuffle ticket: map output %" PRId64 " (map %" PRId64
                             " attempt %d) is malformed", i, t.sources[i].map_id,
                             t.sources[i].attempt);
      fsh_shuffle_ticket_reset(&t);
      return rc;
    }
  }
  *out = t;
  return 0;
}

/* ---- block header ------------------------------------------------------ */

void fsh_block_header_encode(const fsh_block_header *h, uint8_t out[FSH_BLOCK_HEADER_BYTES]) {
  memset(out, 0, FSH_BLOCK_HEADER_BYTES);
  memcpy(out, FSH_BLOCK_HEADER_MAGIC, 4);
  out[4] = 1;
  fsh_le_put64(out + 8, (uint64_t)h->map_id);
  fsh_le_put32(out + 16, (uint32_t)h->attempt);
  fsh_le_put32(out + 20, (uint32_t)h->partition);
  fsh_le_put64(out + 24, (uint64_t)h->index);
  fsh_le_put64(out + 32, (uint64_t)h->n_blocks);
  fsh_le_put64(out + 40, (uint64_t)h->length);
  fsh_le_put64(out + 48, (uint64_t)h->rows);
  fsh_le_put64(out + 56, h->checksum);
  fsh_le_put64(out + 64, h->part_checksum);
  fsh_le_put64(out + 72, (uint64_t)h->part_rows);
  fsh_le_put64(out + 80, (uint64_t)h->part_bytes);
}

bool fsh_block_header_decode(const uint8_t *p, int64_t size, fsh_block_header *h) {
  if (size != FSH_BLOCK_HEADER_BYTES || memcmp(p, FSH_BLOCK_HEADER_MAGIC, 4) != 0 || p[4] != 1)
    return false;
  h->map_id = (int64_t)fsh_le_get64(p + 8);
  h->attempt = (int32_t)fsh_le_get32(p + 16);
  h->partition = (int32_t)fsh_le_get32(p + 20);
  h->index = (int64_t)fsh_le_get64(p + 24);
  h->n_blocks = (int64_t)fsh_le_get64(p + 32);
  h->length = (int64_t)fsh_le_get64(p + 40);
  h->rows = (int64_t)fsh_le_get64(p + 48);
  h->checksum = fsh_le_get64(p + 56);
  h->part_checksum = fsh_le_get64(p + 64);
  h->part_rows = (int64_t)fsh_le_get64(p + 72);
  h->part_bytes = (int64_t)fsh_le_get64(p + 80);
  return true;
}

/* ---- PutResult --------------------------------------------------------- */

int fsh_put_result_encode(const fsh_map_output *m, fsh_buffer **out, fsh_error *err) {
  int64_t n = m->n_partitions;
  fsh_buffer *b = fsh_buffer_new(32 + 24 * n, true);
  if (!b) return fsh_error_set(err, ENOMEM, "PutResult: out of memory");
  uint8_t *p = b->data;
  memcpy(p, FSH_PUT_RESULT_MAGIC, 4);
  p[4] = 1;
  fsh_le_put64(p + 8, m->shuffle_id);
  fsh_le_put64(p + 16, (uint64_t)m->map_id);
  fsh_le_put32(p + 24, (uint32_t)m->attempt);
  fsh_le_put32(p + 28, (uint32_t)m->n_partitions);
  for (int64_t i = 0; i < n; i++) {
    uint8_t *e = p + 32 + 24 * i;
    fsh_le_put64(e, (uint64_t)m->rows[i]);
    fsh_le_put64(e + 8, (uint64_t)m->bytes[i]);
    fsh_le_put64(e + 16, m->checksums[i]);
  }
  *out = b;
  return 0;
}

int fsh_shuffle_put_result_decode(const void *data, int64_t size, fsh_map_output *out,
                                  fsh_error *err) {
  const uint8_t *p = data;
  if (!p || size < 32 || memcmp(p, FSH_PUT_RESULT_MAGIC, 4) != 0 || p[4] != 1)
    return fsh_error_set(err, EINVAL, "not a shuffle PutResult (%" PRId64 " bytes)", size);
  int64_t n = (int32_t)fsh_le_get32(p + 28);
  if (n < 1 || size != 32 + 24 * n)
    return fsh_error_set(err, EINVAL, "shuffle PutResult: %" PRId64 " partitions in %" PRId64
                         " bytes: malformed", n, size);
  fsh_map_output m;
  FSH_RETURN_NOT_OK(fsh_map_output_alloc(&m, fsh_le_get64(p + 8), (int64_t)fsh_le_get64(p + 16),
                                         (int32_t)fsh_le_get32(p + 24), (int32_t)n, err));
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *e = p + 32 + 24 * i;
    m.rows[i] = (int64_t)fsh_le_get64(e);
    m.bytes[i] = (int64_t)fsh_le_get64(e + 8);
    m.checksums[i] = fsh_le_get64(e + 16);
  }
  *out = m;
  return 0;
}
