/* merge.c -- k-way merge of sorted batches: a binary min-heap of the
 * inputs keyed by their next row (ties by input number, which makes the
 * merge stable), emitting batches of a target row count. Each output is
 * gathered from the concatenation of the slices of the inputs it draws
 * from; an output drawn from a single input is a zero-copy slice. */
#include "kernels/sort_internal.h"

struct fsh_merger {
  int64_t k;
  fsh_batch **in;     /* k references */
  fsh_row_keys **rk;  /* per input */
  int64_t *cur;       /* next row per input */
  int64_t *start;     /* cur at the start of the batch being built */
  int64_t *base;      /* scratch, k */
  int64_t *heap;      /* inputs with rows left, by their next row */
  int64_t n_heap;
  int64_t target;
  int64_t *from;      /* per output row: input */
  int64_t *idx;       /* per output row: row in the input, then in the concat */
  fsh_batch **slices; /* scratch, k */
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
    if (m->cur[i] < m->in[i]->length) m->heap[m->n_heap++] = i;
  for (int64_t i = m->n_heap / 2; i-- > 0;) sift_down(m, i);
}

void fsh_merger_free(fsh_merger *m) {
  if (!m) return;
  for (int64_t i = 0; i < m->k; i++) {
    if (m->in) fsh_batch_unref(m->in[i]);
    if (m->rk) fsh_row_keys_free(m->rk[i]);
  }
  fsh_free(m->in);
  fsh_free(m->rk);
  fsh_free(m->cur);
  fsh_free(m->start);
  fsh_free(m->base);
  fsh_free(m->heap);
  fsh_free(m->from);
  fsh_free(m->idx);
  fsh_free(m->slices);
  fsh_free(m);
}

int fsh_merger_new(fsh_batch *const *inputs, int64_t n_inputs, const int32_t *key_cols,
                   int n_keys, const fsh_sort_key *order, int64_t target_rows, fsh_merger **out,
                   fsh_error *err) {
  if (out) *out = NULL;
  if (!inputs || n_inputs < 1 || !key_cols || n_keys < 1 || target_rows < 1 || !out)
    return fsh_error_set(err, EINVAL,
                         "merge: NULL argument, no input, no key or target rows %lld < 1",
                         (long long)target_rows);
  for (int64_t i = 0; i < n_inputs; i++) {
    fsh_error diff;
    if (!inputs[i]) return fsh_error_set(err, EINVAL, "merge: input %lld is NULL", (long long)i);
    if (i > 0 && !fsh_schema_equals(inputs[0]->schema, inputs[i]->schema, false, &diff))
      return fsh_error_set(err, EINVAL, "merge: input %lld's schema differs from input 0's: %s",
                           (long long)i, diff.message);
  }
  fsh_merger *m = fsh_calloc(1, sizeof *m);
  if (!m) return kern_oom(err);
  size_t k = (size_t)n_inputs;
  m->k = n_inputs;
  m->target = target_rows;
  m->in = fsh_calloc(k, sizeof *m->in);
  m->rk = fsh_calloc(k, sizeof *m->rk);
  m->cur = fsh_calloc(k, sizeof *m->cur);
  m->start = fsh_calloc(k, sizeof *m->start);
  m->base = fsh_calloc(k, sizeof *m->base);
  m->heap = fsh_calloc(k, sizeof *m->heap);
  m->slices = fsh_calloc(k, sizeof *m->slices);
  if (!m->in || !m->rk || !m->cur || !m->start || !m->base || !m->heap || !m->slices) {
    fsh_merger_free(m);
    return fsh_error_set(err, ENOMEM, "merge: out of memory");
  }
  for (int64_t i = 0; i < n_inputs; i++) {
    int rc = fsh_row_keys_new(inputs[i], key_cols, n_keys, order, &m->rk[i], err);
    if (rc != 0) {
      fsh_merger_free(m);
      return fsh_error_prefix(err, rc, "merge: input %lld: ", (long long)i);
    }
    m->in[i] = fsh_batch_ref(inputs[i]);
  }
  heap_build(m);
  *out = m;
  return 0;
}

/* Builds the output from the rows recorded in from/idx[0, n): the inputs'
 * slices [start, cur) concatenated in input order, then gathered. */
static int emit(fsh_merger *m, int64_t n, fsh_batch **out, fsh_error *err) {
  int64_t n_slices = 0, only = -1;
  for (int64_t i = 0; i < m->k; i++)
    if (m->cur[i] > m->start[i]) only = n_slices++ == 0 ? i : -1;
  if (only >= 0) { /* one input: its rows are contiguous and in order */
    *out = fsh_batch_slice(m->in[only], m->start[only], n);
    return *out ? 0 : kern_oom(err);
  }
  int64_t nb = 0, acc = 0;
  int rc = 0;
  for (int64_t i = 0; i < m->k; i++) {
    int64_t len = m->cur[i] - m->start[i];
    m->base[i] = acc - m->start[i]; /* (input i, row r) -> r + base[i] in the concat */
    acc += len;
    if (len == 0 || rc != 0) continue;
    m->slices[nb] = fsh_batch_slice(m->in[i], m->start[i], len);
    if (!m->slices[nb]) rc = kern_oom(err);
    else nb++;
  }
  if (rc == 0) {
    for (int64_t j = 0; j < n; j++) m->idx[j] += m->base[m->from[j]];
    fsh_batch *cat = NULL;
    rc = fsh_concat(m->slices, nb, &cat, err);
    if (rc == 0) rc = fsh_take(cat, m->idx, n, out, err);
    fsh_batch_unref(cat);
  }
  for (int64_t i = 0; i < nb; i++) {
    fsh_batch_unref(m->slices[i]);
    m->slices[i] = NULL;
  }
  return rc;
}

int fsh_merger_next(fsh_merger *m, fsh_batch **out, fsh_error *err) {
  if (out) *out = NULL;
  if (!m || !out) return fsh_error_set(err, EINVAL, "merge: NULL argument");
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
  memcpy(m->start, m->cur, (size_t)m->k * sizeof *m->cur);
  int64_t n = 0;
  while (n < m->target && m->n_heap > 0) {
    int64_t i = m->heap[0];
    m->from[n] = i;
    m->idx[n] = m->cur[i]++;
    n++;
    if (m->cur[i] == m->in[i]->length) m->heap[0] = m->heap[--m->n_heap];
    if (m->n_heap > 0) sift_down(m, 0);
  }
  int rc = emit(m, n, out, err);
  if (rc != 0) { /* leave the merger as before the call */
    memcpy(m->cur, m->start, (size_t)m->k * sizeof *m->cur);
    heap_build(m);
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
