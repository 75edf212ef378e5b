/* task_fragment.c -- the "plan-fragment" task body and answer (contract
 * and wire formats in shuffle.h, "plan-fragment"): a stage's fragment (opaque
 * here: exec builds and runs it), the task's place in its stage, the map
 * outputs of every exchange it reads (reduce-verify bodies) and where its
 * output goes. The shuffle layer only carries it: the driver (sched)
 * encodes it, a worker decodes it for the task kind exec registers. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "shuffle/shuffle_internal.h"

#define PT_MAGIC "FSPT"
#define PT_HEADER 48
#define PT_MAX_COUNT ((int64_t)1 << 24)
#define PT_MAX_FRAGMENT ((int64_t)1 << 26)

static int64_t pad8(int64_t n) { return (n + 7) & ~(int64_t)7; }

void fsh_fragment_task_reset(fsh_fragment_task *t) {
  if (!t) return;
  fsh_buffer_unref(t->fragment);
  for (int32_t i = 0; t->inputs && i < t->n_inputs; i++) fsh_reduce_task_reset(&t->inputs[i].read);
  fsh_free(t->inputs);
  fsh_reduce_task_reset(&t->side);
  fsh_free(t->counts);
  memset(t, 0, sizeof *t);
}

static int check_fragment_task(const fsh_fragment_task *t, fsh_error *err) {
  if (!t->fragment || t->fragment->size < 1 || t->fragment->size > PT_MAX_FRAGMENT)
    return fsh_error_set(err, EINVAL, "plan-fragment: a fragment of 1 .. %" PRId64 " bytes is "
                         "needed", PT_MAX_FRAGMENT);
  if (t->n_tasks < 1 || t->n_tasks > PT_MAX_COUNT || t->task < 0 || t->task >= t->n_tasks)
    return fsh_error_set(err, EINVAL, "plan-fragment: task %d of %d", t->task, t->n_tasks);
  if (t->map_id < 0 || t->attempt < 0)
    return fsh_error_set(err, EINVAL, "plan-fragment: map id %" PRId64 " attempt %d",
                         t->map_id, t->attempt);
  if ((unsigned)t->compression > FSH_COMPRESSION_ZSTD || (unsigned)t->backend > 2)
    return fsh_error_set(err, EINVAL, "plan-fragment: compression %d, backend %d",
                         (int)t->compression, (int)t->backend);
  if (t->n_inputs < 0 || t->n_inputs > 64 || (t->n_inputs && !t->inputs))
    return fsh_error_set(err, EINVAL, "plan-fragment: %d inputs (0 .. 64)", t->n_inputs);
  if (t->n_counts < 0 || t->n_counts > PT_MAX_COUNT || (t->n_counts && !t->counts))
    return fsh_error_set(err, EINVAL, "plan-fragment: %d counts", t->n_counts);
  for (int32_t i = 0; i < t->n_counts; i++)
    if (t->counts[i] < 0)
      return fsh_error_set(err, EINVAL, "plan-fragment: counts[%d] = %" PRId64 " < 0", i,
                           t->counts[i]);
  return 0;
}

int fsh_fragment_task_encode(const fsh_fragment_task *t, fsh_buffer **out, fsh_error *err) {
  *out = NULL;
  FSH_RETURN_NOT_OK(check_fragment_task(t, err));
  fsh_buffer **bodies = fsh_calloc((size_t)(t->n_inputs ? t->n_inputs : 1), sizeof *bodies);
  if (!bodies) return fsh_error_set(err, ENOMEM, "plan-fragment: out of memory");
  int rc = 0;
  int64_t size = PT_HEADER + pad8(t->fragment->size) + 8 + 8 * (int64_t)t->n_counts;
  for (int32_t i = 0; !rc && i < t->n_inputs; i++) {
    if ((rc = fsh_reduce_task_encode(&t->inputs[i].read, &bodies[i], err)) != 0)
      rc = fsh_error_prefix(err, rc, "plan-fragment input %d: ", i);
    else
      size += 8 + pad8(bodies[i]->size);
  }
  fsh_buffer *side = NULL;
  if (!rc && t->has_side) {
    if ((rc = fsh_reduce_task_encode(&t->side, &side, err)) != 0)
      rc = fsh_error_prefix(err, rc, "plan-fragment side input: ");
    else
      size += 8 + pad8(side->size);
  }
  fsh_buffer *b = rc ? NULL : fsh_buffer_new(size, true);
  if (!rc && !b) rc = fsh_error_set(err, ENOMEM, "plan-fragment: out of memory");
  if (!rc) {
    uint8_t *p = b->data;
    memcpy(p, PT_MAGIC, 4);
    p[4] = 1;
    fsh_le_put64(p + 8, t->shuffle_id);
    fsh_le_put64(p + 16, (uint64_t)t->map_id);
    fsh_le_put32(p + 24, (uint32_t)t->attempt);
    fsh_le_put32(p + 28, (uint32_t)t->task);
    fsh_le_put32(p + 32, (uint32_t)t->n_tasks);
    p[36] = (uint8_t)t->compression;
    p[37] = (uint8_t)t->backend;
    fsh_le_put32(p + 40, (uint32_t)t->n_inputs);
    fsh_le_put32(p + 44, (uint32_t)t->fragment->size);
    uint8_t *q = p + PT_HEADER;
    memcpy(q, t->fragment->data, (size_t)t->fragment->size);
    q += pad8(t->fragment->size);
    for (int32_t i = 0; i < t->n_inputs; i++) {
      fsh_le_put32(q, (uint32_t)t->inputs[i].node);
      fsh_le_put32(q + 4, (uint32_t)bodies[i]->size);
      memcpy(q + 8, bodies[i]->data, (size_t)bodies[i]->size);
      q += 8 + pad8(bodies[i]->size);
    }
    fsh_le_put32(q, t->has_side ? 1 : 0);
    fsh_le_put32(q + 4, (uint32_t)t->n_counts);
    q += 8;
    if (side) {
      fsh_le_put32(q, (uint32_t)side->size);
      memcpy(q + 8, side->data, (size_t)side->size);
      q += 8 + pad8(side->size);
    }
    for (int32_t i = 0; i < t->n_counts; i++, q += 8) fsh_le_put64(q, (uint64_t)t->counts[i]);
    *out = b;
  }
  fsh_buffer_unref(side);
  for (int32_t i = 0; i < t->n_inputs; i++) fsh_buffer_unref(bodies[i]);
  fsh_free(bodies);
  return rc;
}

int fsh_fragment_task_decode(const uint8_t *p, int64_t size, fsh_fragment_task *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (!p || size < PT_HEADER || memcmp(p, PT_MAGIC, 4) != 0)
    return fsh_error_set(err, EINVAL, "plan-fragment: the body must start with " PT_MAGIC
                         " and a %d-byte header (got %" PRId64 " bytes)", PT_HEADER, size);
  if (p[4] != 1 || p[5] || p[6] || p[7] || p[38] || p[39])
    return fsh_error_set(err, EINVAL, "plan-fragment: version %u or reserved bytes not "
                         "supported (version 1, zeros)", p[4]);
  fsh_fragment_task t = {.shuffle_id = fsh_le_get64(p + 8), .map_id = (int64_t)fsh_le_get64(p + 16),
                     .attempt = (int32_t)fsh_le_get32(p + 24),
                     .task = (int32_t)fsh_le_get32(p + 28),
                     .n_tasks = (int32_t)fsh_le_get32(p + 32),
                     .compression = (fsh_compression)p[36], .backend = (fsh_task_backend)p[37]};
  int64_t n_in = fsh_le_get32(p + 40), flen = fsh_le_get32(p + 44);
  if (n_in > 64 || flen < 1 || flen > PT_MAX_FRAGMENT || pad8(flen) > size - PT_HEADER)
    return fsh_error_set(err, EINVAL, "plan-fragment: %" PRId64 " inputs (0 .. 64) and a "
                         "fragment of %" PRId64 " bytes do not fit in %" PRId64 " bytes",
                         n_in, flen, size);
  int rc = 0;
  if (!(t.fragment = fsh_buffer_copy(p + PT_HEADER, flen)) ||
      !(t.inputs = fsh_calloc((size_t)(n_in ? n_in : 1), sizeof *t.inputs)))
    rc = fsh_error_set(err, ENOMEM, "plan-fragment: out of memory");
  const uint8_t *q = p + PT_HEADER + pad8(flen), *end = p + size;
  for (int64_t i = 0; !rc && i < n_in; i++) {
    int64_t len = end - q >= 8 ? (int64_t)fsh_le_get32(q + 4) : -1;
    if (len < 0 || pad8(len) > end - q - 8) {
      rc = fsh_error_set(err, EINVAL, "plan-fragment: input %" PRId64 " is malformed (length "
                         "%" PRId64 ", %td bytes left)", i, len, end - q);
      break;
    }
    t.inputs[i].node = (int32_t)fsh_le_get32(q);
    if ((rc = fsh_reduce_task_decode(q + 8, len, &t.inputs[i].read, err)) != 0) {
      rc = fsh_error_prefix(err, rc, "plan-fragment input %" PRId64 ": ", i);
      break;
    }
    t.n_inputs = (int32_t)(i + 1);
    q += 8 + pad8(len);
  }
  /* the tail: u32 flags (bit 0: a side input), u32 n_counts, the side
   * input (u32 length, u32 0, its body padded), the counts */
  uint32_t flags = 0;
  int64_t n_counts = 0;
  if (!rc) {
    if (end - q < 8) {
      rc = fsh_error_set(err, EINVAL, "plan-fragment: no tail after the inputs (%td bytes)",
                         end - q);
    } else {
      flags = fsh_le_get32(q);
      n_counts = fsh_le_get32(q + 4);
      q += 8;
      if ((flags & ~1u) || n_counts > PT_MAX_COUNT)
        rc = fsh_error_set(err, EINVAL, "plan-fragment: tail flags %u, %" PRId64 " counts",
                           flags, n_counts);
    }
  }
  if (!rc && (flags & 1)) {
    int64_t len = end - q >= 8 ? (int64_t)fsh_le_get32(q) : -1;
    if (len < 0 || fsh_le_get32(q + 4) || pad8(len) > end - q - 8)
      rc = fsh_error_set(err, EINVAL, "plan-fragment: the side input is malformed (length %"
                         PRId64 ", %td bytes left)", len, end - q);
    else if ((rc = fsh_reduce_task_decode(q + 8, len, &t.side, err)) != 0)
      rc = fsh_error_prefix(err, rc, "plan-fragment side input: ");
    else
      t.has_side = true, q += 8 + pad8(len);
  }
  if (!rc && n_counts) {
    if ((end - q) / 8 < n_counts)
      rc = fsh_error_set(err, EINVAL, "plan-fragment: %" PRId64 " counts do not fit in %td "
                         "bytes", n_counts, end - q);
    else if (!(t.counts = fsh_malloc((size_t)n_counts * sizeof *t.counts)))
      rc = fsh_error_set(err, ENOMEM, "plan-fragment: out of memory");
    for (int64_t i = 0; !rc && i < n_counts; i++, q += 8)
      t.counts[i] = (int64_t)fsh_le_get64(q);
    if (!rc) t.n_counts = (int32_t)n_counts;
  }
  if (!rc && q != end)
    rc = fsh_error_set(err, EINVAL, "plan-fragment: %td bytes after the end", end - q);
  if (!rc) rc = check_fragment_task(&t, err);
  if (rc) {
    fsh_fragment_task_reset(&t);
    return rc;
  }
  *out = t;
  return 0;
}

#define FA_MAGIC "FSRD"
#define FA_MAGIC2 "FSR2"
#define FA_READ 24
#define FA_STATS 32
#define FA_MAX_READS 65

int fsh_fragment_answer_encode_stats(const fsh_map_task_result *r, const fsh_fragment_read *reads,
                                     int32_t n_reads, const fsh_fragment_stats *st,
                                     fsh_buffer **out, fsh_error *err) {
  *out = NULL;
  if (n_reads < 0 || n_reads > FA_MAX_READS || (n_reads && !reads))
    return fsh_error_set(err, EINVAL, "plan-fragment answer: %d reads (0 .. %d)", n_reads,
                         FA_MAX_READS);
  if (st && (st->spill_files < 0 || st->spilled_bytes < 0 || st->operators_spilled < 0))
    return fsh_error_set(err, EINVAL, "plan-fragment answer: negative spill stats");
  fsh_buffer *head = NULL;
  FSH_RETURN_NOT_OK(fsh_map_task_result_encode(r, &head, err));
  fsh_buffer *b = fsh_buffer_new(head->size + FA_READ * n_reads + (st ? FA_STATS : 0) + 8, true);
  if (!b) {
    fsh_buffer_unref(head);
    return fsh_error_set(err, ENOMEM, "plan-fragment answer: out of memory");
  }
  memcpy(b->data, head->data, (size_t)head->size);
  uint8_t *q = b->data + head->size;
  fsh_buffer_unref(head);
  for (int32_t i = 0; i < n_reads; i++, q += FA_READ) {
    fsh_le_put32(q, (uint32_t)reads[i].node);
    q[4] = reads[i].complete ? 1 : 0;
    fsh_le_put64(q + 8, (uint64_t)reads[i].rows);
    fsh_le_put64(q + 16, reads[i].checksum);
  }
  if (st) {
    fsh_le_put64(q, (uint64_t)st->spill_files);
    fsh_le_put64(q + 8, (uint64_t)st->spilled_bytes);
    fsh_le_put64(q + 16, (uint64_t)st->operators_spilled);
    fsh_le_put64(q + 24, 0);
    q += FA_STATS;
  }
  fsh_le_put32(q, (uint32_t)n_reads);
  memcpy(q + 4, st ? FA_MAGIC2 : FA_MAGIC, 4);
  *out = b;
  return 0;
}

int fsh_fragment_answer_encode(const fsh_map_task_result *r, const fsh_fragment_read *reads,
                               int32_t n_reads, fsh_buffer **out, fsh_error *err) {
  return fsh_fragment_answer_encode_stats(r, reads, n_reads, NULL, out, err);
}

int fsh_fragment_answer_decode_stats(const uint8_t *p, int64_t size, fsh_map_task_result *r,
                                     fsh_fragment_read **reads, int32_t *n_reads,
                                     fsh_fragment_stats *st, fsh_error *err) {
  *reads = NULL;
  *n_reads = 0;
  if (st) memset(st, 0, sizeof *st);
  bool v2 = p && size >= 8 && memcmp(p + size - 4, FA_MAGIC2, 4) == 0;
  if (!p || size < 8 || (!v2 && memcmp(p + size - 4, FA_MAGIC, 4) != 0))
    return fsh_error_set(err, EINVAL, "plan-fragment answer: no " FA_MAGIC " or " FA_MAGIC2
                         " trailer (%" PRId64 " bytes)", size);
  int64_t n = fsh_le_get32(p + size - 8), extra = v2 ? FA_STATS : 0;
  if (n > FA_MAX_READS || size - 8 - extra < FA_READ * n)
    return fsh_error_set(err, EINVAL, "plan-fragment answer: %" PRId64 " reads in %" PRId64
                         " bytes", n, size);
  const uint8_t *q = p + size - 8 - extra - FA_READ * n;
  for (int64_t i = 0; i < n; i++)
    if (q[FA_READ * i + 4] > 1 || q[FA_READ * i + 5] || q[FA_READ * i + 6] || q[FA_READ * i + 7])
      return fsh_error_set(err, EINVAL, "plan-fragment answer: read %" PRId64 " is malformed",
                           i);
  fsh_fragment_stats got = {0};
  if (v2) {
    const uint8_t *x = q + FA_READ * n;
    got = (fsh_fragment_stats){.spill_files = (int64_t)fsh_le_get64(x),
                               .spilled_bytes = (int64_t)fsh_le_get64(x + 8),
                               .operators_spilled = (int64_t)fsh_le_get64(x + 16)};
    if (got.spill_files < 0 || got.spilled_bytes < 0 || got.operators_spilled < 0 ||
        fsh_le_get64(x + 24) != 0)
      return fsh_error_set(err, EINVAL, "plan-fragment answer: malformed stats");
  }
  FSH_RETURN_NOT_OK(fsh_map_task_result_decode(p, q - p, r, err));
  fsh_fragment_read *v = n ? fsh_calloc((size_t)n, sizeof *v) : NULL;
  if (n && !v) {
    fsh_map_task_result_reset(r);
    return fsh_error_set(err, ENOMEM, "plan-fragment answer: out of memory");
  }
  for (int64_t i = 0; i < n; i++, q += FA_READ)
    v[i] = (fsh_fragment_read){.node = (int32_t)fsh_le_get32(q), .complete = q[4] == 1,
                               .rows = (int64_t)fsh_le_get64(q + 8),
                               .checksum = fsh_le_get64(q + 16)};
  *reads = v;
  *n_reads = (int32_t)n;
  if (st) *st = got;
  return 0;
}

int fsh_fragment_answer_decode(const uint8_t *p, int64_t size, fsh_map_task_result *r,
                               fsh_fragment_read **reads, int32_t *n_reads, fsh_error *err) {
  return fsh_fragment_answer_decode_stats(p, size, r, reads, n_reads, NULL, err);
}
