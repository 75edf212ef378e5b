/* memory.c -- the in-process shuffle backend: batches kept by reference
 * per (shuffle, map, attempt, partition), nothing serialized. The embedded
 * default for single-process runs and the upper-bound baseline.
 *
 * Map outputs are not serialized, so their checksums are 0 and their bytes
 * are the sizes of the buffers the batches hold (fsh_shuffle_batch_bytes).
 * One mutex guards the store: map tasks, readers and release may run on
 * any threads. A writer buffers privately and publishes on close; a reader
 * takes references to the batches at open, so a later release does not
 * pull data from under it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "shuffle/shuffle_internal.h"

typedef struct batch_list {
  fsh_batch **items;
  int64_t n, cap;
} batch_list;

/* One completed map output. */
typedef struct entry {
  uint64_t shuffle_id;
  int64_t map_id;
  int32_t attempt;
  int32_t n_partitions;
  batch_list *parts; /* [n_partitions] */
  struct entry *next; /* hash chain */
} entry;

typedef struct store {
  pthread_mutex_t mu;
  entry **buckets;
  int64_t n_buckets, n_entries;
} store;

static uint64_t key_hash(uint64_t shuffle_id, int64_t map_id, int32_t attempt) {
  uint64_t h = shuffle_id * 0x9E3779B97F4A7C15ull;
  h ^= (uint64_t)map_id + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
  h ^= (uint64_t)(uint32_t)attempt + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
  return h ^ (h >> 31);
}

static void parts_free(batch_list *parts, int32_t n) {
  if (!parts) return;
  for (int32_t p = 0; p < n; p++) {
    for (int64_t i = 0; i < parts[p].n; i++) fsh_batch_unref(parts[p].items[i]);
    fsh_free(parts[p].items);
  }
  fsh_free(parts);
}

static void entry_free(entry *e) {
  parts_free(e->parts, e->n_partitions);
  fsh_free(e);
}

/* Pointer to the chain link holding the entry for the key (or the NULL at
 * the end of its chain). Call with the lock held. */
static entry **find_link(store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt) {
  entry **l = &s->buckets[key_hash(shuffle_id, map_id, attempt) % (uint64_t)s->n_buckets];
  while (*l && !((*l)->shuffle_id == shuffle_id && (*l)->map_id == map_id &&
                 (*l)->attempt == attempt))
    l = &(*l)->next;
  return l;
}

/* Doubles the table when it is full; a failure only costs longer chains. */
static void maybe_grow(store *s) {
  if (s->n_entries < s->n_buckets) return;
  int64_t n = s->n_buckets * 2;
  entry **b = fsh_calloc((size_t)n, sizeof *b);
  if (!b) return;
  for (int64_t i = 0; i < s->n_buckets; i++) {
    entry *e = s->buckets[i];
    while (e) {
      entry *next = e->next;
      uint64_t h = key_hash(e->shuffle_id, e->map_id, e->attempt) % (uint64_t)n;
      e->next = b[h];
      b[h] = e;
      e = next;
    }
  }
  fsh_free(s->buckets);
  s->buckets = b;
  s->n_buckets = n;
}

/* ---- writer ------------------------------------------------------------ */

typedef struct mem_writer {
  fsh_shuffle_writer pub;
  store *s;
  entry *e; /* not yet published */
} mem_writer;

static int mem_write(fsh_shuffle_writer *w, int32_t partition, fsh_batch *batch, fsh_error *err) {
  mem_writer *m = w->state;
  batch_list *l = &m->e->parts[partition];
  if (l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 4;
    fsh_batch **items = fsh_realloc(l->items, sizeof *items * (size_t)cap);
    if (!items)
      return fsh_error_set(err, ENOMEM, "memory shuffle %" PRIu64 " map %" PRId64
                           ": out of memory storing a batch", m->e->shuffle_id, m->e->map_id);
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = fsh_batch_ref(batch);
  return 0;
}

static void mem_abort(fsh_shuffle_writer *w) {
  mem_writer *m = w->state;
  entry_free(m->e);
  fsh_free(m);
}

static int mem_close(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err) {
  mem_writer *m = w->state;
  entry *e = m->e;
  fsh_map_output r;
  int rc = fsh_map_output_alloc(&r, e->shuffle_id, e->map_id, e->attempt, e->n_partitions, err);
  if (rc == 0 && !(r.location = fsh_strdup("memory"))) {
    fsh_map_output_reset(&r);
    rc = fsh_error_set(err, ENOMEM, "memory shuffle %" PRIu64 " map %" PRId64 ": out of memory",
                       e->shuffle_id, e->map_id);
  }
  if (rc != 0) {
    mem_abort(w);
    return rc;
  }
  for (int32_t p = 0; p < e->n_partitions; p++)
    for (int64_t i = 0; i < e->parts[p].n; i++) {
      r.rows[p] += e->parts[p].items[i]->length;
      r.bytes[p] += fsh_shuffle_batch_bytes(e->parts[p].items[i]);
    }
  /* Publish; an older output of the same (map, attempt) is replaced. */
  store *s = m->s;
  pthread_mutex_lock(&s->mu);
  entry **l = find_link(s, e->shuffle_id, e->map_id, e->attempt);
  entry *old = *l;
  if (old) {
    e->next = old->next;
  } else {
    e->next = NULL;
    s->n_entries++;
  }
  *l = e;
  maybe_grow(s);
  pthread_mutex_unlock(&s->mu);
  if (old) entry_free(old);
  fsh_free(m);
  *out = r;
  return 0;
}

static int mem_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                           int32_t attempt, fsh_shuffle_writer **out, fsh_error *err) {
  mem_writer *m = fsh_calloc(1, sizeof *m);
  entry *e = fsh_calloc(1, sizeof *e);
  batch_list *parts = fsh_calloc((size_t)spec->n_partitions, sizeof *parts);
  if (!m || !e || !parts) {
    fsh_free(m);
    fsh_free(e);
    fsh_free(parts);
    return fsh_error_set(err, ENOMEM, "memory shuffle %" PRIu64 " map %" PRId64
                         ": out of memory for %d partitions", spec->shuffle_id, map_id,
                         spec->n_partitions);
  }
  *e = (entry){.shuffle_id = spec->shuffle_id, .map_id = map_id, .attempt = attempt,
               .n_partitions = spec->n_partitions, .parts = parts};
  m->s = b->state;
  m->e = e;
  m->pub = (fsh_shuffle_writer){.write = mem_write, .close = mem_close, .abort = mem_abort,
                                .state = m};
  *out = &m->pub;
  return 0;
}

/* ---- reader ------------------------------------------------------------ */

/* References to the batches of partitions [first, first + count) of the
 * sources, source by source, each source's partitions in increasing order:
 * into all->items, and (when parts is not NULL) each one's partition into
 * *parts (grown with all). One lookup per source, under one lock. */
static int collect(store *s, const fsh_shuffle_spec *spec, int32_t first, int32_t count,
                   const fsh_map_output *sources, int64_t n_sources, batch_list *all,
                   int32_t **parts, fsh_error *err) {
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  for (int64_t i = 0; rc == 0 && i < n_sources; i++) {
    const fsh_map_output *src = &sources[i];
    entry *e = *find_link(s, spec->shuffle_id, src->map_id, src->attempt);
    if (!e) {
      rc = fsh_error_set(err, ENOENT, "memory shuffle %" PRIu64 ": map %" PRId64 " attempt %d "
                         "(location %s) is not held here (released, or never written)",
                         spec->shuffle_id, src->map_id, src->attempt, src->location);
      break;
    }
    if (e->n_partitions != spec->n_partitions) {
      rc = fsh_error_set(err, EINVAL, "memory shuffle %" PRIu64 ": map %" PRId64 " attempt %d "
                         "was written with %d partitions, read with %d", spec->shuffle_id,
                         src->map_id, src->attempt, e->n_partitions, spec->n_partitions);
      break;
    }
    for (int32_t q = first; rc == 0 && q < first + count; q++) {
      const batch_list *l = &e->parts[q];
      if (all->n + l->n > all->cap) {
        int64_t cap = all->cap ? all->cap : 16;
        while (cap < all->n + l->n) cap *= 2;
        fsh_batch **items = fsh_realloc(all->items, sizeof *items * (size_t)cap);
        if (items) all->items = items;
        int32_t *ps = items && parts ? fsh_realloc(*parts, sizeof *ps * (size_t)cap) : NULL;
        if (ps) *parts = ps;
        if (!items || (parts && !ps)) {
          rc = fsh_error_set(err, ENOMEM, "memory shuffle %" PRIu64 " partition %d: out of "
                             "memory", spec->shuffle_id, q);
          break;
        }
        all->cap = cap;
      }
      for (int64_t k = 0; k < l->n; k++) {
        if (parts) (*parts)[all->n] = q;
        all->items[all->n++] = fsh_batch_ref(l->items[k]);
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static int mem_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t partition,
                           const fsh_map_output *sources, int64_t n_sources, fsh_batch_stream *out,
                           fsh_error *err) {
  batch_list all = {0};
  int rc = collect(b->state, spec, partition, 1, sources, n_sources, &all, NULL, err);
  if (rc == 0) rc = fsh_batch_stream_from_batches(spec->schema, all.items, all.n, out, err);
  for (int64_t i = 0; i < all.n; i++) fsh_batch_unref(all.items[i]);
  fsh_free(all.items);
  return rc;
}

static int mem_open_range_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                 int32_t first, int32_t count, const fsh_map_output *sources,
                                 int64_t n_sources, fsh_range_stream *out, fsh_error *err) {
  batch_list all = {0};
  int32_t *parts = NULL;
  int rc = collect(b->state, spec, first, count, sources, n_sources, &all, &parts, err);
  if (rc != 0) {
    for (int64_t i = 0; i < all.n; i++) fsh_batch_unref(all.items[i]);
    fsh_free(all.items);
    fsh_free(parts);
    return rc;
  }
  return fsh_range_stream_from_pairs(spec->schema, parts, all.items, all.n, out, err);
}

/* ---- release and lifecycle --------------------------------------------- */

static int mem_release(fsh_shuffle_backend *b, uint64_t shuffle_id, fsh_error *err) {
  (void)err;
  store *s = b->state;
  entry *dead = NULL;
  pthread_mutex_lock(&s->mu);
  for (int64_t i = 0; i < s->n_buckets; i++) {
    entry **l = &s->buckets[i];
    while (*l) {
      entry *e = *l;
      if (e->shuffle_id == shuffle_id) {
        *l = e->next;
        e->next = dead;
        dead = e;
        s->n_entries--;
      } else {
        l = &e->next;
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  while (dead) { /* batches are freed outside the lock */
    entry *next = dead->next;
    entry_free(dead);
    dead = next;
  }
  return 0;
}

static void mem_destroy(fsh_shuffle_backend *b) {
  store *s = b->state;
  for (int64_t i = 0; i < s->n_buckets; i++) {
    entry *e = s->buckets[i];
    while (e) {
      entry *next = e->next;
      entry_free(e);
      e = next;
    }
  }
  pthread_mutex_destroy(&s->mu);
  fsh_free(s->buckets);
  fsh_free(s);
  fsh_free(b);
}

static const fsh_shuffle_backend_ops k_memory_ops = {
    .name = "memory",
    .open_writer = mem_open_writer,
    .open_reader = mem_open_reader,
    .release = mem_release,
    .destroy = mem_destroy,
    .open_range_reader = mem_open_range_reader,
};

int fsh_shuffle_memory_new(fsh_shuffle_backend **out, fsh_error *err) {
  fsh_shuffle_backend *b = fsh_calloc(1, sizeof *b);
  store *s = fsh_calloc(1, sizeof *s);
  entry **buckets = fsh_calloc(64, sizeof *buckets);
  if (!b || !s || !buckets || pthread_mutex_init(&s->mu, NULL) != 0) {
    fsh_free(b);
    fsh_free(s);
    fsh_free(buckets);
    return fsh_error_set(err, ENOMEM, "memory shuffle backend: out of memory");
  }
  s->buckets = buckets;
  s->n_buckets = 64;
  b->ops = &k_memory_ops;
  b->state = s;
  *out = b;
  return 0;
}
