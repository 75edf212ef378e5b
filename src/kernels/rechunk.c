/* rechunk.c -- "into batches": a stream of batches re-cut into batches of
 * exactly a target row count (the last one short). Pending input is a FIFO
 * of batch references; an output inside the head batch is a slice of it,
 * one that spans batches is the concatenation of slices. */
#include "kernels/kernels_internal.h"

struct fsh_rechunker {
  int64_t target;
  fsh_batch **q; /* pending batches q[head, tail); q[head] starts at head_off */
  int64_t head, tail, cap;
  int64_t head_off;
  int64_t pending; /* rows pending */
  fsh_schema *schema; /* of the first batch (one reference) */
  bool finished;
  fsh_batch **parts; /* scratch for concat, cap entries */
};

int fsh_rechunker_new(int64_t target_rows, fsh_rechunker **out, fsh_error *err) {
  if (out) *out = NULL;
  if (target_rows < 1 || !out)
    return fsh_error_set(err, EINVAL, "into batches: target rows %lld < 1 or NULL out",
                         (long long)target_rows);
  fsh_rechunker *r = fsh_calloc(1, sizeof *r);
  if (!r) return kern_oom(err);
  r->target = target_rows;
  *out = r;
  return 0;
}

void fsh_rechunker_free(fsh_rechunker *r) {
  if (!r) return;
  for (int64_t i = r->head; i < r->tail; i++) fsh_batch_unref(r->q[i]);
  fsh_free(r->q);
  fsh_free(r->parts);
  fsh_schema_unref(r->schema);
  fsh_free(r);
}

int fsh_rechunker_push(fsh_rechunker *r, fsh_batch *b, fsh_error *err) {
  if (!r || !b) return fsh_error_set(err, EINVAL, "into batches: NULL argument");
  if (r->finished) return fsh_error_set(err, EINVAL, "into batches: push after finish");
  fsh_error diff;
  if (r->schema && !fsh_schema_equals(r->schema, b->schema, false, &diff))
    return fsh_error_set(err, EINVAL, "into batches: the schema differs from the first batch's: %s",
                         diff.message);
  if (b->length == 0) return 0;
  if (r->tail == r->cap) {
    if (r->head > 0) { /* compact */
      memmove(r->q, r->q + r->head, (size_t)(r->tail - r->head) * sizeof *r->q);
      r->tail -= r->head;
      r->head = 0;
    }
    if (r->tail == r->cap) {
      int64_t cap = r->cap ? 2 * r->cap : 8;
      fsh_batch **q = fsh_realloc(r->q, (size_t)cap * sizeof *q);
      if (!q) return fsh_error_set(err, ENOMEM, "into batches: out of memory");
      r->q = q;
      fsh_batch **parts = fsh_realloc(r->parts, (size_t)cap * sizeof *parts);
      if (!parts) return fsh_error_set(err, ENOMEM, "into batches: out of memory");
      r->parts = parts;
      r->cap = cap;
    }
  }
  if (!r->schema) r->schema = fsh_schema_ref(b->schema);
  r->q[r->tail++] = fsh_batch_ref(b);
  r->pending += b->length;
  return 0;
}

void fsh_rechunker_finish(fsh_rechunker *r) {
  if (r) r->finished = true;
}

int fsh_rechunker_pop(fsh_rechunker *r, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!r || !out) return fsh_error_set(err, EINVAL, "into batches: NULL argument");
  if (r->pending == 0 || (r->pending < r->target && !r->finished)) return 0;
  int64_t want = r->pending < r->target ? r->pending : r->target;
  /* The pieces: q[head] from head_off, then whole batches, the last one cut. */
  int64_t n = 0, got = 0, last_len = 0;
  while (got < want) {
    fsh_batch *b = r->q[r->head + n];
    int64_t off = n == 0 ? r->head_off : 0, avail = b->length - off;
    last_len = avail < want - got ? avail : want - got;
    got += last_len;
    n++;
  }
  int rc = 0;
  fsh_batch *res = NULL;
  if (n == 1) {
    fsh_batch *b = r->q[r->head];
    res = r->head_off == 0 && want == b->length ? fsh_batch_ref(b)
                                                : fsh_batch_slice(b, r->head_off, want);
    if (!res) rc = kern_oom(err);
  } else {
    int64_t made = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
      fsh_batch *b = r->q[r->head + i];
      int64_t off = i == 0 ? r->head_off : 0;
      int64_t len = i == n - 1 ? last_len : b->length - off;
      r->parts[i] = off == 0 && len == b->length ? fsh_batch_ref(b) : fsh_batch_slice(b, off, len);
      if (!r->parts[i]) rc = kern_oom(err);
      else made++;
    }
    if (rc == 0) rc = fsh_concat(r->parts, n, &res, err);
    for (int64_t i = 0; i < made; i++) fsh_batch_unref(r->parts[i]);
  }
  if (rc != 0) return fsh_error_prefix(err, rc, "into batches: ");
  /* Consume: every piece but the last entirely, the last up to last_len. */
  int64_t last_off = (n == 1 ? r->head_off : 0) + last_len;
  for (int64_t i = 0; i < n - 1; i++) fsh_batch_unref(r->q[r->head++]);
  if (last_off == r->q[r->head]->length) {
    fsh_batch_unref(r->q[r->head++]);
    r->head_off = 0;
  } else {
    r->head_off = last_off;
  }
  if (r->head == r->tail) r->head = r->tail = 0;
  r->pending -= want;
  *out = res;
  return 0;
}
