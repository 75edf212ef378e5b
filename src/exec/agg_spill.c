/* agg_spill.c -- the spilling hash aggregate (contract in exec.h, "bounded
 * memory"): a PARTIAL fsh_hash_agg in memory until it goes over its
 * budget, then grace partitioning of its states and of the later input
 * into spill files, aggregated one partition at a time when the result is
 * read. Built on the public hash aggregate only. */
#include <flightshuffle/exec.h>

#include <errno.h>
#include <string.h>

struct fsh_spill_agg {
  fsh_schema *input, *partial, *out_schema;
  int32_t *keys, *partial_keys; /* partial_keys: 0 .. n_keys - 1 */
  int n_keys;
  fsh_agg_spec *aggs; /* names copied */
  int n_aggs;
  fsh_agg_mode mode;
  int64_t budget;
  int32_t n_parts;
  fsh_spill *spill;
  fsh_hash_agg *cur;
  fsh_spill_writer **in_w, **st_w; /* n_parts each, after the spill */
  bool spilled, finished, failed;
  int64_t spilled_bytes;
};

static void free_specs(fsh_agg_spec *aggs, int n) {
  if (!aggs) return;
  for (int i = 0; i < n; i++) fsh_free((char *)aggs[i].name);
  fsh_free(aggs);
}

static void abort_writers(fsh_spill_writer **w, int32_t n) {
  if (!w) return;
  for (int32_t i = 0; i < n; i++) fsh_spill_writer_abort(w[i]);
  fsh_free(w);
}

void fsh_spill_agg_free(fsh_spill_agg *a) {
  if (!a) return;
  fsh_hash_agg_free(a->cur);
  abort_writers(a->in_w, a->n_parts);
  abort_writers(a->st_w, a->n_parts);
  fsh_schema_unref(a->input);
  fsh_schema_unref(a->partial);
  fsh_schema_unref(a->out_schema);
  fsh_free(a->keys);
  fsh_free(a->partial_keys);
  free_specs(a->aggs, a->n_aggs);
  fsh_free(a);
}

bool fsh_spill_agg_spilled(const fsh_spill_agg *a) { return a->spilled; }
int64_t fsh_spill_agg_spilled_bytes(const fsh_spill_agg *a) { return a->spilled_bytes; }

static int new_agg(const fsh_spill_agg *a, fsh_agg_mode mode, int64_t budget, fsh_hash_agg **out,
                   fsh_error *err) {
  return fsh_hash_agg_new(a->input, a->keys, a->n_keys, a->aggs, a->n_aggs, mode, budget, out,
                          err);
}

int fsh_spill_agg_new(fsh_schema *input, const fsh_spill_agg_options *o, fsh_spill_agg **out,
                      fsh_error *err) {
  *out = NULL;
  if (o->mode != FSH_AGG_SINGLE && o->mode != FSH_AGG_PARTIAL)
    return fsh_error_set(err, EINVAL, "spilling hash aggregate: mode must be SINGLE or PARTIAL");
  if (o->n_keys < 0 || o->n_aggs < 0 || o->memory_budget < 0 || o->n_partitions < 0)
    return fsh_error_set(err, EINVAL, "spilling hash aggregate: negative count or budget");
  fsh_spill_agg *a = fsh_calloc(1, sizeof *a);
  bool ok = a != NULL;
  if (ok) {
    a->n_keys = o->n_keys;
    a->keys = fsh_calloc((size_t)o->n_keys + 1, sizeof *a->keys);
    a->partial_keys = fsh_calloc((size_t)o->n_keys + 1, sizeof *a->partial_keys);
    a->aggs = fsh_calloc((size_t)o->n_aggs + 1, sizeof *a->aggs);
    ok = a->keys && a->partial_keys && a->aggs;
  }
  if (ok) {
    a->n_aggs = o->n_aggs;
    for (int i = 0; i < o->n_keys; i++) a->keys[i] = o->key_cols[i], a->partial_keys[i] = i;
    for (int i = 0; ok && i < o->n_aggs; i++) {
      a->aggs[i] = o->aggs[i];
      a->aggs[i].name = NULL;
      if (o->aggs[i].name) ok = (a->aggs[i].name = fsh_strdup(o->aggs[i].name)) != NULL;
    }
  }
  if (!ok) {
    fsh_spill_agg_free(a);
    return fsh_error_set(err, ENOMEM, "spilling hash aggregate: out of memory");
  }
  a->input = fsh_schema_ref(input);
  a->mode = o->mode;
  a->budget = o->n_keys > 0 ? o->memory_budget : 0;
  a->n_parts = o->n_partitions ? o->n_partitions : 32;
  a->spill = o->spill;
  fsh_hash_agg *fin = NULL;
  int rc = new_agg(a, FSH_AGG_PARTIAL, a->budget, &a->cur, err);
  if (rc == 0 && a->mode == FSH_AGG_SINGLE) rc = new_agg(a, FSH_AGG_FINAL, 0, &fin, err);
  if (rc != 0) {
    fsh_spill_agg_free(a);
    return rc;
  }
  a->partial = fsh_schema_ref(fsh_hash_agg_output_schema(a->cur));
  a->out_schema = fsh_schema_ref(fin ? fsh_hash_agg_output_schema(fin) : a->partial);
  fsh_hash_agg_free(fin);
  *out = a;
  return 0;
}

/* Hash-partitions b on key_cols into the writers w[0, n_parts). */
static int scatter_to(fsh_spill_agg *a, fsh_batch *b, const int32_t *key_cols,
                      fsh_spill_writer **w, fsh_error *err) {
  return fsh_spill_scatter(b, key_cols, a->n_keys, FSH_SPILL_AGG_SEED, a->n_parts, w, err);
}

/* The in-memory aggregate went over the budget: its states and all later
 * input go to the partitions' spill files. */
static int start_spill(fsh_spill_agg *a, fsh_error *err) {
  a->in_w = fsh_calloc((size_t)a->n_parts, sizeof *a->in_w);
  a->st_w = fsh_calloc((size_t)a->n_parts, sizeof *a->st_w);
  if (!a->in_w || !a->st_w)
    return fsh_error_set(err, ENOMEM, "spilling hash aggregate: out of memory");
  for (int32_t p = 0; p < a->n_parts; p++) {
    FSH_RETURN_NOT_OK(fsh_spill_writer_open(a->spill, a->input, &a->in_w[p], err));
    FSH_RETURN_NOT_OK(fsh_spill_writer_open(a->spill, a->partial, &a->st_w[p], err));
  }
  fsh_batch *states = NULL;
  int rc = fsh_hash_agg_finish(a->cur, &states, err);
  fsh_hash_agg_free(a->cur);
  a->cur = NULL;
  if (rc == 0) rc = scatter_to(a, states, a->partial_keys, a->st_w, err);
  fsh_batch_unref(states);
  a->spilled = true;
  return rc;
}

int fsh_spill_agg_push(fsh_spill_agg *a, fsh_batch *b, fsh_error *err) {
  if (a->failed || a->finished)
    return fsh_error_set(err, EINVAL, "spilling hash aggregate: push %s",
                         a->failed ? "after an error" : "after finish");
  int rc;
  if (!a->spilled) {
    rc = fsh_hash_agg_push(a->cur, b, err);
    if (rc == EFBIG) {
      if (!a->spill)
        rc = fsh_error_prefix(err, rc, "spilling hash aggregate (no spill directory): ");
      else
        rc = start_spill(a, err);
    }
  } else {
    fsh_error diff = {{0}};
    rc = fsh_schema_equals(a->input, b->schema, false, &diff)
             ? scatter_to(a, b, a->keys, a->in_w, err)
             : fsh_error_set(err, EINVAL, "spilling hash aggregate: batch schema differs from "
                             "the input's: %s", diff.message);
  }
  if (rc != 0) a->failed = true;
  return rc;
}

/* ---- the result stream ------------------------------------------------------- */

typedef struct agg_stream {
  /* what processing a partition needs, copied from the aggregate (the
   * stream outlives it) */
  fsh_schema *input;
  int32_t *keys;
  int n_keys;
  fsh_agg_spec *aggs;
  int n_aggs;
  fsh_agg_mode mode;
  int64_t budget;
  int32_t n_parts, next;
  fsh_spill_file **in_f, **st_f;
  fsh_batch **queue; /* ready batches [head, n) */
  int64_t head, n, cap;
} agg_stream;

static void agg_stream_free(agg_stream *p) {
  for (int32_t i = 0; i < p->n_parts; i++) {
    if (p->in_f) fsh_spill_file_free(p->in_f[i]);
    if (p->st_f) fsh_spill_file_free(p->st_f[i]);
  }
  fsh_free(p->in_f);
  fsh_free(p->st_f);
  for (int64_t i = p->head; i < p->n; i++) fsh_batch_unref(p->queue[i]);
  fsh_free(p->queue);
  fsh_schema_unref(p->input);
  fsh_free(p->keys);
  free_specs(p->aggs, p->n_aggs);
  fsh_free(p);
}

static int enqueue(agg_stream *p, fsh_batch *b, fsh_error *err) {
  if (b->length == 0) {
    fsh_batch_unref(b);
    return 0;
  }
  if (p->n == p->cap) {
    int64_t c = p->cap ? p->cap * 2 : 8;
    fsh_batch **q = fsh_realloc(p->queue, (size_t)c * sizeof *q);
    if (!q) {
      fsh_batch_unref(b);
      return fsh_error_set(err, ENOMEM, "spilling hash aggregate: out of memory");
    }
    p->queue = q;
    p->cap = c;
  }
  p->queue[p->n++] = b;
  return 0;
}

/* Pushes every batch of spill file *f (consumed) into agg, or enqueues
 * them when agg is NULL. */
static int drain_file(agg_stream *p, fsh_spill_file **f, fsh_hash_agg *agg, int32_t part,
                      fsh_error *err) {
  fsh_batch_stream st;
  int rc = fsh_spill_file_open(*f, &st, err);
  *f = NULL;
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = st.get_next(&st, &b, err);
    if (rc != 0 || !b) break;
    if (agg) {
      rc = fsh_hash_agg_push(agg, b, err);
      fsh_batch_unref(b);
      if (rc == EFBIG)
        rc = fsh_error_prefix(err, rc, "spilling hash aggregate: spill partition %d of %d is "
                              "still over the budget on its own: ", (int)part, (int)p->n_parts);
    } else {
      rc = enqueue(p, b, err);
    }
  }
  if (st.release) st.release(&st);
  return rc;
}

/* Aggregates partition `part` into the queue. */
static int process_partition(agg_stream *p, int32_t part, fsh_error *err) {
  fsh_hash_agg *sub = NULL, *fin = NULL;
  fsh_batch *partial = NULL, *result = NULL;
  int rc = fsh_hash_agg_new(p->input, p->keys, p->n_keys, p->aggs, p->n_aggs, FSH_AGG_PARTIAL,
                            p->budget, &sub, err);
  if (rc == 0) rc = drain_file(p, &p->in_f[part], sub, part, err);
  if (rc == 0) rc = fsh_hash_agg_finish(sub, &partial, err);
  fsh_hash_agg_free(sub);
  if (rc == 0 && p->mode == FSH_AGG_SINGLE) {
    rc = fsh_hash_agg_new(p->input, p->keys, p->n_keys, p->aggs, p->n_aggs, FSH_AGG_FINAL,
                          p->budget, &fin, err);
    if (rc == 0) rc = drain_file(p, &p->st_f[part], fin, part, err);
    if (rc == 0) rc = fsh_hash_agg_push(fin, partial, err);
    if (rc == EFBIG)
      rc = fsh_error_prefix(err, rc, "spilling hash aggregate: spill partition %d of %d is "
                            "still over the budget on its own: ", (int)part, (int)p->n_parts);
    if (rc == 0) rc = fsh_hash_agg_finish(fin, &result, err);
    fsh_hash_agg_free(fin);
    if (rc == 0) {
      rc = enqueue(p, result, err);
      result = NULL;
    }
  } else if (rc == 0) {
    rc = drain_file(p, &p->st_f[part], NULL, part, err);
    if (rc == 0) {
      rc = enqueue(p, partial, err);
      partial = NULL;
    }
  }
  fsh_batch_unref(partial);
  return rc;
}

static int agg_stream_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  agg_stream *p = st->private_data;
  *out = NULL;
  while (p->head == p->n && p->next < p->n_parts) {
    p->head = p->n = 0;
    FSH_RETURN_NOT_OK(process_partition(p, p->next++, err));
  }
  if (p->head < p->n) *out = p->queue[p->head++];
  return 0;
}

static void agg_stream_release(fsh_batch_stream *st) {
  if (st->private_data) agg_stream_free(st->private_data);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

int fsh_spill_agg_finish(fsh_spill_agg *a, fsh_batch_stream *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (a->failed || a->finished)
    return fsh_error_set(err, EINVAL, "spilling hash aggregate: finish %s",
                         a->failed ? "after an error" : "twice");
  a->finished = true;
  int rc = 0;
  if (!a->spilled) {
    fsh_batch *partial = NULL, *result = NULL;
    rc = fsh_hash_agg_finish(a->cur, &partial, err);
    if (rc == 0 && a->mode == FSH_AGG_SINGLE) {
      fsh_hash_agg *fin = NULL;
      rc = new_agg(a, FSH_AGG_FINAL, 0, &fin, err);
      if (rc == 0) rc = fsh_hash_agg_push(fin, partial, err);
      if (rc == 0) rc = fsh_hash_agg_finish(fin, &result, err);
      fsh_hash_agg_free(fin);
    } else if (rc == 0) {
      result = fsh_batch_ref(partial);
    }
    if (rc == 0) rc = fsh_batch_stream_from_batches(a->out_schema, &result, 1, out, err);
    fsh_batch_unref(partial);
    fsh_batch_unref(result);
    if (rc != 0) a->failed = true;
    return rc;
  }
  agg_stream *p = fsh_calloc(1, sizeof *p);
  if (!p) {
    a->failed = true;
    return fsh_error_set(err, ENOMEM, "spilling hash aggregate: out of memory");
  }
  p->n_parts = a->n_parts;
  p->in_f = fsh_calloc((size_t)a->n_parts, sizeof *p->in_f);
  p->st_f = fsh_calloc((size_t)a->n_parts, sizeof *p->st_f);
  if (!p->in_f || !p->st_f) rc = fsh_error_set(err, ENOMEM, "spilling hash aggregate: out of "
                                               "memory");
  for (int32_t i = 0; rc == 0 && i < a->n_parts; i++) {
    fsh_spill_writer *w = a->in_w[i];
    a->in_w[i] = NULL;
    rc = fsh_spill_writer_finish(w, &p->in_f[i], err);
    if (rc == 0) {
      w = a->st_w[i];
      a->st_w[i] = NULL;
      rc = fsh_spill_writer_finish(w, &p->st_f[i], err);
    }
    if (rc == 0)
      a->spilled_bytes += fsh_spill_file_bytes(p->in_f[i]) + fsh_spill_file_bytes(p->st_f[i]);
  }
  /* move what a partition needs into the stream */
  if (rc == 0) {
    p->input = fsh_schema_ref(a->input);
    p->keys = a->keys;
    a->keys = NULL;
    p->n_keys = a->n_keys;
    p->aggs = a->aggs;
    p->n_aggs = a->n_aggs;
    a->aggs = NULL;
    a->n_aggs = 0;
    p->mode = a->mode;
    p->budget = a->budget;
  }
  if (rc != 0) {
    agg_stream_free(p);
    a->failed = true;
    return rc;
  }
  out->get_next = agg_stream_next;
  out->release = agg_stream_release;
  out->schema = fsh_schema_ref(a->out_schema);
  out->private_data = p;
  return 0;
}
