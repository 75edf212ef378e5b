/* merge.c -- k-way merge of sorted inputs (batches in memory, or streams of
 * batches such as spilled runs): a binary min-heap of the inputs keyed by
 * their next row (ties by input number, which makes the merge stable),
 * emitting batches of a target row count. Each output is gathered from the
 * concatenation of the pieces (slices of input batches) it draws from; an
 * output drawn from a single piece is a zero-copy slice. */
#include "kernels/sort_internal.h"

/* A slice [start, start + len) of an input batch the output draws from. */
typedef struct piece {
  fsh_batch *b; /* one reference */
  int64_t start, len;
} piece;

struct fsh_merger {
  int64_t k;
  fsh_batch_stream *src; /* k streams (moved in), or NULL for batch inputs */
  fsh_schema *schema;    /* input 0's (one reference) */
  int32_t *key_cols;     /* n_keys */
  fsh_sort_key *order;   /* n_keys, or NULL */
  int n_keys;
  fsh_batch **in;       /* per input: the current batch (a reference) or NULL */
  fsh_row_keys **rk;    /* per input: keys of the current batch */
  int64_t *cur;         /* per input: next row of the current batch */
  int64_t *start;       /* cur at the start of the output being built */
  int64_t *open;        /* per input: its piece in the output being built, or -1 */
  int64_t *heap;        /* inputs with rows left, by their next row */
  int64_t n_heap;
  int64_t target;
  int64_t *from;        /* per output row: piece */
  int64_t *idx;         /* per output row: row in the piece's batch, then in the concat */
  piece *pieces;
  int64_t n_pieces, cap_pieces;
  int64_t *base;        /* per piece: its first row in the concat, minus its start */
  fsh_batch **slices;   /* per piece: scratch for the concat */
  bool broken;          /* an error after a stream moved on: only free is valid */
};

static inline bool in_less(const fsh_merger *m, int64_t a, int64_t b) {
  int c = fsh_row_keys_compare(m->rk[a], m->cur[a], m->rk[b], m->cur[b]);
  return c != 0 ? c < 0 : a < b;
}

static void sift_down(fsh_merger *m, int64_t i) {
  int64_t *h = m->heap, n = m->n_heap, v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && in_less(m, h[c + 1], h[c])) c++;
    if (!in_less(m, h[c], v)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

static void heap_build(fsh_merger *m) {
  m->n_heap = 0;
  for (int64_t i = 0; i < m->k; i++)
    if (m->in[i] && m->cur[i] < m->in[i]->length) m->heap[m->n_heap++] = i;
  for (int64_t i = m->n_heap / 2; i-- > 0;) sift_down(m, i);
}

static void drop_pieces(fsh_merger *m) {
  for (int64_t p = 0; p < m->n_pieces; p++) fsh_batch_unref(m->pieces[p].b);
  m->n_pieces = 0;
}

void fsh_merger_free(fsh_merger *m) {
  if (!m) return;
  for (int64_t i = 0; i < m->k; i++) {
    if (m->in) fsh_batch_unref(m->in[i]);
    if (m->rk) fsh_row_keys_free(m->rk[i]);
    if (m->src && m->src[i].release) m->src[i].release(&m->src[i]);
  }
  if (m->pieces) drop_pieces(m);
  fsh_schema_unref(m->schema);
  fsh_free(m->src);
  fsh_free(m->key_cols);
  fsh_free(m->order);
  fsh_free(m->in);
  fsh_free(m->rk);
  fsh_free(m->cur);
  fsh_free(m->start);
  fsh_free(m->open);
  fsh_free(m->heap);
  fsh_free(m->from);
  fsh_free(m->idx);
  fsh_free(m->pieces);
  fsh_free(m->base);
  fsh_free(m->slices);
  fsh_free(m);
}

/* Makes b (a new reference, or NULL at the end of its input) input i's
 * current batch, with its keys resolved. On error b is released and input
 * i is left as it was. */
static int set_batch(fsh_merger *m, int64_t i, fsh_batch *b, fsh_error *err) {
  fsh_row_keys *rk = NULL;
  if (b) {
    fsh_error diff;
    int rc = 0;
    if (!fsh_schema_equals(m->schema, b->schema, false, &diff))
      rc = fsh_error_set(err, EINVAL, "input %lld's schema differs from input 0's: %s",
                         (long long)i, diff.message);
    if (rc == 0) {
      rc = fsh_row_keys_new(b, m->key_cols, m->n_keys, m->order, &rk, err);
      if (rc != 0) fsh_error_prefix(err, rc, "input %lld: ", (long long)i);
    }
    if (rc != 0) {
      fsh_batch_unref(b);
      return rc;
    }
  }
  fsh_batch_unref(m->in[i]);
  fsh_row_keys_free(m->rk[i]);
  m->in[i] = b;
  m->rk[i] = rk;
  m->cur[i] = m->start[i] = 0;
  return 0;
}

/* Input i's next non-empty batch from its stream (NULL at its end). */
static int next_from_stream(fsh_merger *m, int64_t i, fsh_error *err) {
  for (;;) {
    fsh_batch *b = NULL;
    int rc = m->src[i].get_next(&m->src[i], &b, err);
    if (rc != 0) return fsh_error_prefix(err, rc, "input %lld: ", (long long)i);
    if (b && b->length == 0) {
      fsh_batch_unref(b);
      continue;
    }
    return set_batch(m, i, b, err);
  }
}

/* The merger shell: argument checks, copies of the keys, per-input arrays. */
static int merger_alloc(int64_t n_inputs, const int32_t *key_cols, int n_keys,
                        const fsh_sort_key *order, int64_t target_rows, fsh_merger **out,
                        fsh_error *err) {
  *out = NULL;
  if (n_inputs < 1 || !key_cols || n_keys < 1 || target_rows < 1)
    return fsh_error_set(err, EINVAL, "merge: %lld inputs, %d keys, target rows %lld",
                         (long long)n_inputs, n_keys, (long long)target_rows);
  fsh_merger *m = fsh_calloc(1, sizeof *m);
  if (!m) return fsh_error_set(err, ENOMEM, "merge: out of memory");
  size_t k = (size_t)n_inputs;
  m->k = n_inputs;
  m->target = target_rows;
  m->n_keys = n_keys;
  m->key_cols = fsh_malloc((size_t)n_keys * sizeof *m->key_cols);
  m->order = order ? fsh_malloc((size_t)n_keys * sizeof *m->order) : NULL;
  m->in = fsh_calloc(k, sizeof *m->in);
  m->rk = fsh_calloc(k, sizeof *m->rk);
  m->cur = fsh_calloc(k, sizeof *m->cur);
  m->start = fsh_calloc(k, sizeof *m->start);
  m->open = fsh_calloc(k, sizeof *m->open);
  m->heap = fsh_calloc(k, sizeof *m->heap);
  if (!m->key_cols || (order && !m->order) || !m->in || !m->rk || !m->cur || !m->start ||
      !m->open || !m->heap) {
    fsh_merger_free(m);
    return fsh_error_set(err, ENOMEM, "merge: out of memory");
  }
  memcpy(m->key_cols, key_cols, (size_t)n_keys * sizeof *key_cols);
  if (order) memcpy(m->order, order, (size_t)n_keys * sizeof *order);
  *out = m;
  return 0;
}

int fsh_merger_new(fsh_batch *const *inputs, int64_t n_inputs, const int32_t *key_cols,
                   int n_keys, const fsh_sort_key *order, int64_t target_rows, fsh_merger **out,
                   fsh_error *err) {
  if (out) *out = NULL;
  if (!inputs || !out) return fsh_error_set(err, EINVAL, "merge: NULL argument");
  for (int64_t i = 0; i < n_inputs; i++)
    if (!inputs[i]) return fsh_error_set(err, EINVAL, "merge: input %lld is NULL", (long long)i);
  fsh_merger *m = NULL;
  int rc = merger_alloc(n_inputs, key_cols, n_keys, order, target_rows, &m, err);
  if (rc != 0) return rc;
  m->schema = fsh_schema_ref(inputs[0]->schema);
  for (int64_t i = 0; i < n_inputs && rc == 0; i++)
    rc = set_batch(m, i, fsh_batch_ref(inputs[i]), err);
  if (rc != 0) {
    fsh_merger_free(m);
    return fsh_error_prefix(err, rc, "merge: ");
  }
  heap_build(m);
  *out = m;
  return 0;
}

int fsh_merger_new_streams(fsh_batch_stream *inputs, int64_t n_inputs, const int32_t *key_cols,
                           int n_keys, const fsh_sort_key *order, int64_t target_rows,
                           fsh_merger **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!inputs || !out) return fsh_error_set(err, EINVAL, "merge: NULL argument");
  fsh_merger *m = NULL;
  int rc = merger_alloc(n_inputs, key_cols, n_keys, order, target_rows, &m, err);
  if (rc == 0) {
    m->src = fsh_calloc((size_t)n_inputs, sizeof *m->src);
    if (!m->src) rc = fsh_error_set(err, ENOMEM, "merge: out of memory");
  }
  if (rc != 0) {
    fsh_merger_free(m);
    for (int64_t i = 0; i < n_inputs; i++) {
      if (inputs[i].release) inputs[i].release(&inputs[i]);
      memset(&inputs[i], 0, sizeof inputs[i]);
    }
    return rc;
  }
  for (int64_t i = 0; i < n_inputs; i++) { /* ownership moves in */
    m->src[i] = inputs[i];
    memset(&inputs[i], 0, sizeof inputs[i]);
  }
  m->schema = fsh_schema_ref(m->src[0].schema);
  for (int64_t i = 0; i < n_inputs && rc == 0; i++) {
    fsh_error diff;
    if (!fsh_schema_equals(m->schema, m->src[i].schema, false, &diff))
      rc = fsh_error_set(err, EINVAL, "input %lld's schema differs from input 0's: %s",
                         (long long)i, diff.message);
  }
  for (int64_t i = 0; i < n_inputs && rc == 0; i++) rc = next_from_stream(m, i, err);
  if (rc != 0) {
    fsh_merger_free(m);
    return fsh_error_prefix(err, rc, "merge: ");
  }
  heap_build(m);
  *out = m;
  return 0;
}

/* A new piece of input i's current batch from row cur[i]; its id. */
static int64_t add_piece(fsh_merger *m, int64_t i, fsh_error *err) {
  if (m->n_pieces == m->cap_pieces) {
    int64_t cap = m->cap_pieces ? 2 * m->cap_pieces : m->k + 4;
    piece *p = fsh_realloc(m->pieces, (size_t)cap * sizeof *p);
    if (p) m->pieces = p;
    int64_t *base = p ? fsh_realloc(m->base, (size_t)cap * sizeof *base) : NULL;
    if (base) m->base = base;
    fsh_batch **sl = base ? fsh_realloc(m->slices, (size_t)cap * sizeof *sl) : NULL;
    if (!sl) return -fsh_error_set(err, ENOMEM, "out of memory");
    m->slices = sl;
    m->cap_pieces = cap;
  }
  m->pieces[m->n_pieces] = (piece){fsh_batch_ref(m->in[i]), m->cur[i], 0};
  return m->n_pieces++;
}

/* Builds the output from the rows recorded in from/idx[0, n): the pieces
 * concatenated in order, then gathered. */
static int emit(fsh_merger *m, int64_t n, fsh_batch **out, fsh_error *err) {
  if (m->n_pieces == 1) { /* one piece: its rows are contiguous and in order */
    piece *p = &m->pieces[0];
    *out = fsh_batch_slice(p->b, p->start, p->len);
    return *out ? 0 : kern_oom(err);
  }
  int64_t made = 0, acc = 0;
  int rc = 0;
  for (int64_t p = 0; p < m->n_pieces && rc == 0; p++) {
    piece *pc = &m->pieces[p];
    m->base[p] = acc - pc->start; /* (piece p, row r) -> r + base[p] in the concat */
    acc += pc->len;
    m->slices[p] = fsh_batch_slice(pc->b, pc->start, pc->len);
    if (!m->slices[p]) rc = kern_oom(err);
    else made++;
  }
  if (rc == 0) {
    for (int64_t j = 0; j < n; j++) m->idx[j] += m->base[m->from[j]];
    fsh_batch *cat = NULL;
    rc = fsh_concat(m->slices, m->n_pieces, &cat, err);
    if (rc == 0) rc = fsh_take(cat, m->idx, n, out, err);
    fsh_batch_unref(cat);
  }
  for (int64_t p = 0; p < made; p++) fsh_batch_unref(m->slices[p]);
  return rc;
}

int fsh_merger_next(fsh_merger *m, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!m || !out) return fsh_error_set(err, EINVAL, "merge: NULL argument");
  if (m->broken)
    return fsh_error_set(err, EINVAL, "merge: an earlier error left the merger unusable");
  if (m->n_heap == 0) return 0;
  if (!m->from) {
    m->from = fsh_malloc((size_t)m->target * sizeof *m->from);
    m->idx = fsh_malloc((size_t)m->target * sizeof *m->idx);
    if (!m->from || !m->idx) {
      fsh_free(m->from);
      fsh_free(m->idx);
      m->from = m->idx = NULL;
      return fsh_error_set(err, ENOMEM, "merge: out of memory");
    }
  }
  for (int64_t i = 0; i < m->k; i++) m->start[i] = m->cur[i], m->open[i] = -1;
  int64_t n = 0;
  int rc = 0;
  bool moved = false; /* a stream moved on: the call cannot be undone */
  while (n < m->target && m->n_heap > 0 && rc == 0) {
    int64_t i = m->heap[0];
    if (m->open[i] < 0) {
      int64_t id = add_piece(m, i, err);
      if (id < 0) {
        rc = (int)-id;
        break;
      }
      m->open[i] = id;
    }
    m->from[n] = m->open[i];
    m->idx[n] = m->cur[i]++;
    m->pieces[m->open[i]].len++;
    n++;
    if (m->cur[i] == m->in[i]->length) {
      m->open[i] = -1;
      if (m->src) {
        moved = true;
        rc = next_from_stream(m, i, err);
        if (rc != 0) break;
      }
      if (!m->src || !m->in[i]) m->heap[0] = m->heap[--m->n_heap];
    }
    if (m->n_heap > 0) sift_down(m, 0);
  }
  if (rc == 0) rc = emit(m, n, out, err);
  drop_pieces(m);
  if (rc != 0) {
    if (moved) {
      m->broken = true;
    } else { /* leave the merger as before the call */
      for (int64_t i = 0; i < m->k; i++) m->cur[i] = m->start[i];
      heap_build(m);
    }
    fsh_error_prefix(err, rc, "merge: ");
  }
  return rc;
}

int fsh_merge_sorted(fsh_batch *const *inputs, int64_t n_inputs, const int32_t *key_cols,
                     int n_keys, const fsh_sort_key *order, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!inputs || n_inputs < 1 || !out)
    return fsh_error_set(err, EINVAL, "merge: NULL argument or no input");
  int64_t total = 0;
  for (int64_t i = 0; i < n_inputs; i++) total += inputs[i] ? inputs[i]->length : 0;
  fsh_merger *m = NULL;
  int64_t target = total > 0 ? total : 1;
  int rc = fsh_merger_new(inputs, n_inputs, key_cols, n_keys, order, target, &m, err);
  if (rc == 0) rc = fsh_merger_next(m, out, err);
  if (rc == 0 && !*out) { /* no row: an empty batch of the schema */
    *out = fsh_batch_slice(inputs[0], 0, 0);
    if (!*out) rc = fsh_error_set(err, ENOMEM, "merge: out of memory");
  }
  fsh_merger_free(m);
  return rc;
}
