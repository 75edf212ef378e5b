/* extsort.c -- external sort (contract in exec.h, "bounded memory"): input
 * held up to a memory budget, then sorted (fsh_sort_batch) into runs that
 * go to spill files; finish merges the runs and the rows still held with
 * the k-way merger over streams, after merging consecutive groups of runs
 * when there are more than max_fanin of them. Runs are kept in input
 * order and the merger breaks ties by input index, so the whole sort is
 * stable. */
#include <flightshuffle/exec.h>

#include <errno.h>
#include <string.h>

struct fsh_extsort {
  fsh_schema *schema;
  int32_t *keys;
  int n_keys;
  fsh_sort_key *order; /* NULL: defaults */
  int64_t budget, target_rows, run_rows;
  int32_t max_fanin;
  fsh_spill *spill;
  fsh_batch **held;
  int64_t n_held, cap_held, held_bytes;
  fsh_mem_set held_mem; /* the held batches' buffers, each counted once */
  fsh_spill_file **runs; /* in input order */
  int64_t n_runs, cap_runs;
  bool finished, failed;
  fsh_extsort_stats stats;
};

int fsh_extsort_new(fsh_schema *schema, const fsh_extsort_options *o, fsh_extsort **out,
                    fsh_error *err) {
  *out = NULL;
  if (!o || o->n_keys < 1 || !o->key_cols)
    return fsh_error_set(err, EINVAL, "external sort: no sort key given");
  for (int k = 0; k < o->n_keys; k++)
    if (o->key_cols[k] < 0 || o->key_cols[k] >= schema->n_fields)
      return fsh_error_set(err, EINVAL, "external sort: key %d is column %d, but the schema has "
                           "%d columns", k, (int)o->key_cols[k], (int)schema->n_fields);
  if (o->memory_budget < 0 || o->target_rows < 0 || o->run_rows < 0 ||
      (o->max_fanin != 0 && o->max_fanin < 2))
    return fsh_error_set(err, EINVAL, "external sort: negative budget or sizes, or a fan-in "
                         "below 2 (budget %lld, target_rows %lld, run_rows %lld, max_fanin %d)",
                         (long long)o->memory_budget, (long long)o->target_rows,
                         (long long)o->run_rows, (int)o->max_fanin);
  fsh_extsort *s = fsh_calloc(1, sizeof *s);
  if (s) s->keys = fsh_calloc((size_t)o->n_keys, sizeof *s->keys);
  if (s && s->keys && o->order) s->order = fsh_calloc((size_t)o->n_keys, sizeof *s->order);
  if (!s || !s->keys || (o->order && !s->order)) {
    fsh_extsort_free(s);
    return fsh_error_set(err, ENOMEM, "external sort: out of memory");
  }
  memcpy(s->keys, o->key_cols, (size_t)o->n_keys * sizeof *s->keys);
  if (o->order) memcpy(s->order, o->order, (size_t)o->n_keys * sizeof *s->order);
  s->n_keys = o->n_keys;
  s->schema = fsh_schema_ref(schema);
  s->budget = o->memory_budget;
  s->target_rows = o->target_rows ? o->target_rows : 65536;
  s->run_rows = o->run_rows ? o->run_rows : s->target_rows;
  s->max_fanin = o->max_fanin ? o->max_fanin : 64;
  s->spill = o->spill;
  *out = s;
  return 0;
}

static void drop_held(fsh_extsort *s) {
  for (int64_t i = 0; i < s->n_held; i++) fsh_batch_unref(s->held[i]);
  s->n_held = 0;
  s->held_bytes = 0;
  fsh_mem_set_clear(&s->held_mem);
}

void fsh_extsort_free(fsh_extsort *s) {
  if (!s) return;
  drop_held(s);
  fsh_mem_set_reset(&s->held_mem);
  fsh_free(s->held);
  for (int64_t i = 0; i < s->n_runs; i++) fsh_spill_file_free(s->runs[i]);
  fsh_free(s->runs);
  fsh_free(s->keys);
  fsh_free(s->order);
  fsh_schema_unref(s->schema);
  fsh_free(s);
}

void fsh_extsort_get_stats(const fsh_extsort *s, fsh_extsort_stats *out) { *out = s->stats; }

/* The held batches sorted into one batch (*out NULL when none is held);
 * they are released either way. */
static int sort_held(fsh_extsort *s, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (s->n_held == 0) return 0;
  fsh_batch *all = NULL;
  int rc = 0;
  if (s->n_held == 1)
    all = fsh_batch_ref(s->held[0]);
  else
    rc = fsh_concat(s->held, s->n_held, &all, err);
  drop_held(s);
  if (rc == 0) rc = fsh_sort_batch(all, s->keys, s->n_keys, s->order, out, err);
  fsh_batch_unref(all);
  return rc == 0 ? 0 : fsh_error_prefix(err, rc, "external sort: ");
}

static int add_run(fsh_spill_file ***runs, int64_t *n, int64_t *cap, fsh_spill_file *f,
                   fsh_error *err) {
  if (*n == *cap) {
    int64_t c = *cap ? *cap * 2 : 16;
    fsh_spill_file **r = fsh_realloc(*runs, (size_t)c * sizeof *r);
    if (!r) return fsh_error_set(err, ENOMEM, "external sort: out of memory");
    *runs = r;
    *cap = c;
  }
  (*runs)[(*n)++] = f;
  return 0;
}

/* Writes the sorted batch as one run in batches of run_rows rows. */
static int spill_run(fsh_extsort *s, fsh_batch *sorted, fsh_error *err) {
  fsh_spill_writer *w = NULL;
  FSH_RETURN_NOT_OK(fsh_spill_writer_open(s->spill, s->schema, &w, err));
  int rc = 0;
  for (int64_t at = 0; rc == 0 && at < sorted->length; at += s->run_rows) {
    int64_t n = sorted->length - at < s->run_rows ? sorted->length - at : s->run_rows;
    fsh_batch *piece = fsh_batch_slice(sorted, at, n);
    rc = piece ? fsh_spill_writer_write(w, piece, err)
               : fsh_error_set(err, ENOMEM, "external sort: out of memory");
    fsh_batch_unref(piece);
  }
  if (rc != 0) {
    fsh_spill_writer_abort(w);
    return rc;
  }
  fsh_spill_file *f = NULL;
  FSH_RETURN_NOT_OK(fsh_spill_writer_finish(w, &f, err));
  rc = add_run(&s->runs, &s->n_runs, &s->cap_runs, f, err);
  if (rc != 0) {
    fsh_spill_file_free(f);
    return rc;
  }
  s->stats.runs++;
  s->stats.spilled_bytes += fsh_spill_file_bytes(f);
  return 0;
}

int fsh_extsort_push(fsh_extsort *s, fsh_batch *b, fsh_error *err) {
  if (s->failed || s->finished)
    return fsh_error_set(err, EINVAL, "external sort: push %s",
                         s->failed ? "after an error" : "after finish");
  fsh_error diff = {{0}};
  if (!fsh_schema_equals(s->schema, b->schema, false, &diff))
    return fsh_error_set(err, EINVAL, "external sort: batch schema differs from the sort's: %s",
                         diff.message);
  if (b->length == 0) return 0;
  if (s->n_held == s->cap_held) {
    int64_t c = s->cap_held ? s->cap_held * 2 : 16;
    fsh_batch **h = fsh_realloc(s->held, (size_t)c * sizeof *h);
    if (!h) return fsh_error_set(err, ENOMEM, "external sort: out of memory");
    s->held = h;
    s->cap_held = c;
  }
  /* slices of one batch share buffers: each is charged once */
  if (fsh_mem_set_add(&s->held_mem, b, NULL, err) != 0)
    return fsh_error_prefix(err, ENOMEM, "external sort: ");
  s->held[s->n_held++] = fsh_batch_ref(b);
  s->held_bytes = s->held_mem.bytes;
  s->stats.rows += b->length;
  if (s->held_bytes > s->stats.peak_memory) s->stats.peak_memory = s->held_bytes;
  if (s->budget == 0 || s->held_bytes <= s->budget) return 0;
  if (!s->spill) {
    s->failed = true;
    return fsh_error_set(err, EFBIG, "external sort: holds %lld bytes of input, over its "
                         "budget of %lld bytes, and has no spill directory",
                         (long long)s->held_bytes, (long long)s->budget);
  }
  fsh_batch *sorted = NULL;
  int rc = sort_held(s, &sorted, err);
  if (rc == 0) rc = spill_run(s, sorted, err);
  fsh_batch_unref(sorted);
  if (rc != 0) s->failed = true;
  return rc;
}

/* ---- finishing ------------------------------------------------------------- */

/* Opens runs[0, n) as streams into st (the files move; on error every
 * file and stream is released). */
static int open_runs(fsh_spill_file **runs, int64_t n, fsh_batch_stream *st, fsh_error *err) {
  for (int64_t i = 0; i < n; i++) {
    int rc = fsh_spill_file_open(runs[i], &st[i], err);
    runs[i] = NULL;
    if (rc != 0) {
      for (int64_t j = 0; j < i; j++) st[j].release(&st[j]);
      for (int64_t j = i + 1; j < n; j++) {
        fsh_spill_file_free(runs[j]);
        runs[j] = NULL;
      }
      return rc;
    }
  }
  return 0;
}

/* Merges runs[0, n) (n >= 2; they move in) into one new run in *out. */
static int merge_group(fsh_extsort *s, fsh_spill_file **runs, int64_t n, fsh_spill_file **out,
                       fsh_error *err) {
  *out = NULL;
  fsh_batch_stream *st = fsh_calloc((size_t)n, sizeof *st);
  if (!st) {
    for (int64_t i = 0; i < n; i++) fsh_spill_file_free(runs[i]), runs[i] = NULL;
    return fsh_error_set(err, ENOMEM, "external sort: out of memory");
  }
  int rc = open_runs(runs, n, st, err);
  fsh_merger *m = NULL;
  if (rc == 0)
    rc = fsh_merger_new_streams(st, n, s->keys, s->n_keys, s->order, s->run_rows, &m, err);
  fsh_free(st);
  fsh_spill_writer *w = NULL;
  if (rc == 0) rc = fsh_spill_writer_open(s->spill, s->schema, &w, err);
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = fsh_merger_next(m, &b, err);
    if (rc != 0 || !b) break;
    rc = fsh_spill_writer_write(w, b, err);
    fsh_batch_unref(b);
  }
  fsh_merger_free(m);
  if (rc != 0) {
    fsh_spill_writer_abort(w);
    return fsh_error_prefix(err, rc, "external sort: merging %lld runs: ", (long long)n);
  }
  rc = fsh_spill_writer_finish(w, out, err);
  if (rc == 0) {
    s->stats.runs++;
    s->stats.spilled_bytes += fsh_spill_file_bytes(*out);
  }
  return rc;
}

/* Merges consecutive groups of runs until at most `room` remain. */
static int reduce_runs(fsh_extsort *s, int64_t room, fsh_error *err) {
  while (s->n_runs > room) {
    int64_t F = s->max_fanin;
    fsh_spill_file **next = NULL;
    int64_t n_next = 0, cap_next = 0;
    int rc = 0;
    int64_t i = 0;
    for (; rc == 0 && i < s->n_runs; i += F) {
      int64_t n = s->n_runs - i < F ? s->n_runs - i : F;
      fsh_spill_file *f = NULL;
      if (n == 1) {
        f = s->runs[i];
        s->runs[i] = NULL;
      } else {
        rc = merge_group(s, s->runs + i, n, &f, err);
      }
      if (rc == 0) {
        rc = add_run(&next, &n_next, &cap_next, f, err);
        if (rc != 0) fsh_spill_file_free(f);
      }
    }
    /* runs [0, i) moved (or were freed); free the rest and keep next */
    for (int64_t j = 0; j < s->n_runs; j++) fsh_spill_file_free(s->runs[j]);
    fsh_free(s->runs);
    s->runs = next;
    s->n_runs = n_next;
    s->cap_runs = cap_next;
    if (rc != 0) return rc;
    s->stats.merge_passes++;
  }
  return 0;
}

/* Slices of one sorted batch, target_rows rows each. */
typedef struct slice_stream {
  fsh_batch *b; /* NULL: no rows */
  int64_t at, rows;
} slice_stream;

static int slice_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  slice_stream *p = st->private_data;
  *out = NULL;
  if (!p->b || p->at >= p->b->length) return 0;
  int64_t n = p->b->length - p->at < p->rows ? p->b->length - p->at : p->rows;
  fsh_batch *piece = fsh_batch_slice(p->b, p->at, n);
  if (!piece) return fsh_error_set(err, ENOMEM, "external sort: out of memory");
  p->at += n;
  *out = piece;
  return 0;
}

static void slice_release(fsh_batch_stream *st) {
  slice_stream *p = st->private_data;
  if (p) fsh_batch_unref(p->b);
  fsh_free(p);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

static int merge_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  int rc = fsh_merger_next(st->private_data, out, err);
  return rc == 0 ? 0 : fsh_error_prefix(err, rc, "external sort: merging runs: ");
}

static void merge_release(fsh_batch_stream *st) {
  fsh_merger_free(st->private_data);
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

int fsh_extsort_finish(fsh_extsort *s, fsh_batch_stream *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (s->failed || s->finished)
    return fsh_error_set(err, EINVAL, "external sort: finish %s",
                         s->failed ? "after an error" : "twice");
  s->finished = true;
  fsh_batch *mem = NULL;
  int rc = sort_held(s, &mem, err);
  if (rc == 0 && s->n_runs == 0) {
    slice_stream *p = fsh_calloc(1, sizeof *p);
    if (!p) {
      fsh_batch_unref(mem);
      s->failed = true;
      return fsh_error_set(err, ENOMEM, "external sort: out of memory");
    }
    p->b = mem;
    p->rows = s->target_rows;
    out->get_next = slice_next;
    out->release = slice_release;
    out->schema = fsh_schema_ref(s->schema);
    out->private_data = p;
    return 0;
  }
  if (rc == 0) rc = reduce_runs(s, mem ? s->max_fanin - 1 : s->max_fanin, err);
  int64_t n = s->n_runs + (mem ? 1 : 0);
  fsh_batch_stream *st = rc == 0 ? fsh_calloc((size_t)n, sizeof *st) : NULL;
  if (rc == 0 && !st) rc = fsh_error_set(err, ENOMEM, "external sort: out of memory");
  if (rc == 0) {
    rc = open_runs(s->runs, s->n_runs, st, err);
    s->n_runs = 0;
    if (rc == 0 && mem) {
      rc = fsh_batch_stream_from_batches(s->schema, &mem, 1, &st[n - 1], err);
      if (rc != 0)
        for (int64_t j = 0; j < n - 1; j++) st[j].release(&st[j]);
    }
  }
  fsh_batch_unref(mem);
  fsh_merger *m = NULL;
  if (rc == 0) {
    rc = fsh_merger_new_streams(st, n, s->keys, s->n_keys, s->order, s->target_rows, &m, err);
    if (rc != 0) rc = fsh_error_prefix(err, rc, "external sort: merging %lld runs: ", (long long)n);
  }
  fsh_free(st);
  if (rc != 0) {
    s->failed = true;
    return rc;
  }
  out->get_next = merge_next;
  out->release = merge_release;
  out->schema = fsh_schema_ref(s->schema);
  out->private_data = m;
  return 0;
}
