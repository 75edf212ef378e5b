/* flight_backend.c -- the flight shuffle backend (contract in shuffle.h):
 * writers write into the local worker's store (location: its URI);
 * readers yield a partition's batches in source order (range readers: a
 * run of partitions, source by source, each source opened once for the
 * run), reading the local
 * store's map outputs in-process and every other worker's through the
 * fetch jobs of flight_fetch.c (one DoGet per peer, or direct reads of a
 * same-host peer's files: flight_direct.c), run on the backend's
 * persistent fetch pool (flight_pool.c); release reaches the local store
 * and every peer. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shuffle/flight_reader.h"

typedef struct fb_client_entry {
  char *uri;
  fsh_flight_client *client;
} fb_client_entry;

typedef struct fb_host {
  char *uri;
  int same; /* 1 this host, -1 another */
} fb_host;

/* A peer whose sources of a shuffle were found small (a locate answer). */
typedef struct fb_small {
  char *uri;
  uint64_t shuffle_id;
} fb_small;
#define FB_SMALL_MAX 256

typedef struct fb_state {
  fsh_shuffle_worker *local; /* borrowed; may be NULL */
  char **peers;
  int n_peers;
  char *auth_token;
  int max_parallel;
  int64_t max_in_flight;
  int64_t timeout_ms;
  pthread_mutex_t mu; /* the client cache */
  fb_client_entry *clients;
  int n_clients, cap_clients;
  fb_host *hosts; /* what locate answers said (under mu) */
  int n_hosts, cap_hosts;
  fb_small small[FB_SMALL_MAX]; /* (peer, shuffle)s of small sources, a ring */
  int n_small, next_small;
  bool direct;    /* same-host direct reads on */
  int64_t direct_min; /* their minimum average bytes a (map output, partition) */
  fb_stats stats;
  fr_pool *pool; /* the fetch threads of every reader */
} fb_state;

fb_stats *fb_stats_of(fb_state *st) { return &st->stats; }
fr_pool *fb_pool(fb_state *st) { return st->pool; }

bool fb_small_sources(fb_state *st, const char *uri, uint64_t shuffle_id, bool set) {
  pthread_mutex_lock(&st->mu);
  bool found = false;
  for (int i = 0; i < st->n_small && !found; i++)
    found = st->small[i].shuffle_id == shuffle_id && strcmp(st->small[i].uri, uri) == 0;
  char *u = set && !found ? fsh_strdup(uri) : NULL;
  if (u) { /* (out of memory: not remembered) */
    fb_small *e = &st->small[st->next_small];
    fsh_free(e->uri);
    *e = (fb_small){u, shuffle_id};
    st->next_small = (st->next_small + 1) % FB_SMALL_MAX;
    if (st->n_small < FB_SMALL_MAX) st->n_small++;
  }
  pthread_mutex_unlock(&st->mu);
  return found || set;
}
bool fb_direct_enabled(const fb_state *st) { return st->direct; }
int64_t fb_direct_min_bytes(const fb_state *st) { return st->direct_min; }

int fb_same_host(fb_state *st, const char *uri, int set) {
  pthread_mutex_lock(&st->mu);
  int i = 0;
  while (i < st->n_hosts && strcmp(st->hosts[i].uri, uri) != 0) i++;
  int same = i < st->n_hosts ? st->hosts[i].same : 0;
  if (set && i < st->n_hosts) {
    st->hosts[i].same = set;
  } else if (set) { /* out of memory: not remembered, asked again next time */
    if (st->n_hosts == st->cap_hosts) {
      int cap = st->cap_hosts ? st->cap_hosts * 2 : 8;
      fb_host *n = fsh_realloc(st->hosts, sizeof *n * (size_t)cap);
      if (n) st->hosts = n, st->cap_hosts = cap;
    }
    char *u = st->n_hosts < st->cap_hosts ? fsh_strdup(uri) : NULL;
    if (u) st->hosts[st->n_hosts++] = (fb_host){u, set};
  }
  pthread_mutex_unlock(&st->mu);
  return set ? set : same;
}

int fb_client(fb_state *st, const char *uri, fsh_flight_client **out, fsh_error *err) {
  pthread_mutex_lock(&st->mu);
  int rc = 0;
  for (int i = 0; i < st->n_clients; i++)
    if (strcmp(st->clients[i].uri, uri) == 0) {
      *out = st->clients[i].client;
      pthread_mutex_unlock(&st->mu);
      return 0;
    }
  if (st->n_clients == st->cap_clients) {
    int cap = st->cap_clients ? st->cap_clients * 2 : 8;
    fb_client_entry *n = fsh_realloc(st->clients, sizeof *n * (size_t)cap);
    if (!n) rc = fsh_error_set(err, ENOMEM, "flight shuffle: out of memory");
    else st->clients = n, st->cap_clients = cap;
  }
  fsh_flight_client *c = NULL;
  char *u = rc == 0 ? fsh_strdup(uri) : NULL;
  if (rc == 0 && !u) rc = fsh_error_set(err, ENOMEM, "flight shuffle: out of memory");
  if (rc == 0) {
    fsh_flight_client_options o = {.uri = uri, .auth_token = st->auth_token,
                                   .timeout_ms = st->timeout_ms};
    rc = fsh_flight_client_open(&o, &c, err);
  }
  if (rc == 0) {
    st->clients[st->n_clients++] = (fb_client_entry){u, c};
    *out = c;
  } else {
    fsh_free(u);
  }
  pthread_mutex_unlock(&st->mu);
  return rc;
}

static const char *local_uri(const fb_state *st) {
  return st->local ? fsh_shuffle_worker_uri(st->local) : NULL;
}

/* ---- writer ------------------------------------------------------------ */

typedef struct fb_writer {
  fsh_shuffle_writer pub;
  fsh_store_writer *w;
  const char *uri;
} fb_writer;

static int fb_write(fsh_shuffle_writer *w, int32_t partition, fsh_batch *batch, fsh_error *err) {
  fb_writer *f = w->state;
  return fsh_store_writer_write(f->w, partition, batch, err);
}

static int fb_write_rows(fsh_shuffle_writer *w, fsh_batch *batch, const int32_t *partition_of_row,
                         fsh_error *err) {
  fb_writer *f = w->state;
  return fsh_store_writer_write_rows(f->w, batch, partition_of_row, err);
}

static void fb_abort(fsh_shuffle_writer *w) {
  fb_writer *f = w->state;
  fsh_store_writer_abort(f->w);
  fsh_free(f);
}

static int fb_close(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err) {
  fb_writer *f = w->state;
  char *location = fsh_strdup(f->uri);
  if (!location) {
    fb_abort(w);
    return fsh_error_set(err, ENOMEM, "flight shuffle: closing a map output: out of memory");
  }
  fsh_map_output m;
  int rc = fsh_store_writer_close(f->w, &m, err);
  fsh_free(f);
  if (rc != 0) {
    fsh_free(location);
    return rc;
  }
  m.location = location;
  *out = m;
  return 0;
}

static int fb_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                          int32_t attempt, fsh_shuffle_writer **out, fsh_error *err) {
  fb_state *st = b->state;
  if (!st->local)
    return fsh_error_set(err, EINVAL, "flight shuffle %" PRIu64 " map %" PRId64 ": this backend "
                         "has no local worker to write to (reader-only)", spec->shuffle_id, map_id);
  fb_writer *f = fsh_calloc(1, sizeof *f);
  if (!f)
    return fsh_error_set(err, ENOMEM, "flight shuffle %" PRIu64 " map %" PRId64 ": out of memory",
                         spec->shuffle_id, map_id);
  int rc = fsh_store_writer_open(fsh_shuffle_worker_store(st->local), spec, map_id, attempt, &f->w,
                                 err);
  if (rc != 0) {
    fsh_free(f);
    return rc;
  }
  f->uri = local_uri(st);
  f->pub = (fsh_shuffle_writer){.write = fb_write, .close = fb_close, .abort = fb_abort,
                                .state = f, .write_rows = fb_write_rows};
  *out = &f->pub;
  return 0;
}

/* ---- reader: the consumer ---------------------------------------------- */

static void close_local(fr_reader *r) {
  fsh_map_file_cursor_free(r->cursor);
  fsh_map_file_close(r->file);
  r->cursor = NULL;
  r->file = NULL;
}

/* Whether two verified schema messages are the same bytes (a, the
 * reader's remembered one, may be NULL: not yet known). */
static bool same_schema_bytes(const fsh_buffer *a, const fsh_buffer *b) {
  return a && a->size == b->size && memcmp(a->data, b->data, (size_t)a->size) == 0;
}

/* A local source's trouble: reported lost to the task this reader runs in
 * (this live worker does not hold it as recorded: a scheduler recomputes
 * that map rather than retrying the task here), in the same words as a
 * remote fetch's loss (flight_fetch.c describe_loss). */
static int local_loss(fr_reader *r, const fr_slot *s, int rc, fsh_error *err) {
  if (rc == 0 || rc == ENOMEM) return rc;
  fsh_worker_task_report_lost(local_uri(r->st), r->shuffle_id, s->map_id, s->attempt, false);
  if (err) {
    char cause[sizeof err->message];
    snprintf(cause, sizeof cause, "%s", err->message);
    fsh_error_set(err, rc, "flight shuffle %" PRIu64 " %s: worker %s: lost map outputs "
                  "[map/attempt %" PRId64 "/%d] (not held or unreadable in the reader's own "
                  "store): %s", r->shuffle_id, r->what, local_uri(r->st), s->map_id, s->attempt,
                  cause);
  }
  return rc;
}

/* Opens slot s's map output in the local store (once for all the run's
 * slots of that source), checking it is the one the driver recorded
 * (partitions; schema: the stored schema message's bytes against the
 * first local source found equal to the shuffle's, else field by field). */
static int open_local(fr_reader *r, const fr_slot *s, fsh_error *err) {
  fsh_shuffle_store *store = fsh_shuffle_worker_store(r->st->local);
  int rc = fsh_store_open(store, r->shuffle_id, s->map_id, s->attempt, &r->file, err);
  const fsh_map_file_info *i = rc == 0 ? fsh_map_file_get_info(r->file) : NULL;
  fsh_error diff = {{0}};
  if (rc == 0 && i->n_partitions != r->n_partitions)
    rc = fsh_error_set(err, EINVAL, "flight shuffle %" PRIu64 ": map %" PRId64 " attempt %d has "
                       "%d partitions, the shuffle %d", r->shuffle_id, s->map_id, s->attempt,
                       i->n_partitions, r->n_partitions);
  bool same = rc == 0 && same_schema_bytes(r->schema_msg, fsh_map_file_schema_message(r->file));
  if (rc == 0 && !same) {
    if (!fsh_schema_equals(fsh_map_file_schema(r->file), r->schema, false, &diff)) {
      rc = fsh_error_set(err, EINVAL, "flight shuffle %" PRIu64 ": map %" PRId64 " attempt %d: "
                         "schema differs from the shuffle's: %s", r->shuffle_id, s->map_id,
                         s->attempt, diff.message);
    } else if (!r->schema_msg) { /* the bytes every later source will likely have */
      r->schema_msg = fsh_buffer_ref(fsh_map_file_schema_message(r->file));
      same = true;
      if (!fsh_map_file_has_dictionaries(r->file))
        rc = fsh_map_file_decoder_new(r->file, &r->dec, err);
    }
  }
  r->file_same = same;
  if (rc != 0) close_local(r);
  else atomic_fetch_add(&r->st->stats.local_sources, 1);
  return local_loss(r, s, rc, err);
}

/* Opens the cursor of slot s (a partition of the open local file),
 * checking its index entry against the map output's record of it. */
static int open_local_cursor(fr_reader *r, const fr_slot *s, fsh_error *err) {
  int rc = fsh_map_file_cursor_open_with(r->file, s->partition, r->file_same ? r->dec : NULL,
                                         &r->cursor, err);
  if (rc == 0 && s->has_meta) {
    const fsh_map_file_partition *p = fsh_map_file_cursor_partition(r->cursor);
    if (p->rows != s->rows || p->bytes != s->bytes || p->checksum != s->checksum)
      rc = fsh_error_set(err, EIO, "flight shuffle %" PRIu64 " map %" PRId64 " attempt %d "
                         "partition %d: worker %s holds %" PRId64 " rows, %" PRId64 " bytes, "
                         "checksum %016" PRIx64 " but the map output recorded %" PRId64 ", %"
                         PRId64 ", %016" PRIx64, r->shuffle_id, s->map_id, s->attempt,
                         s->partition, local_uri(r->st), p->rows, p->bytes, p->checksum,
                         s->rows, s->bytes, s->checksum);
  }
  if (rc != 0) close_local(r);
  return local_loss(r, s, rc, err);
}

/* The consumer moves past slot r->cur (waking fetch jobs waiting for
 * room); the local file closes at the end of its source's slots. */
static void advance(fr_reader *r) {
  fsh_map_file_cursor_free(r->cursor);
  r->cursor = NULL;
  pthread_mutex_lock(&r->mu);
  r->cur++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (r->cur % r->count == 0) close_local(r);
}

/* The next (partition, batch) in slot order. */
static int fr_next(fr_reader *r, int32_t *partition, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  *partition = -1;
  if (r->failed)
    return fsh_error_set(err, r->failed, "flight shuffle %" PRIu64 " %s: the reader "
                         "failed earlier", r->shuffle_id, r->what);
  int rc = 0;
  for (;;) {
    if (r->cursor) {
      rc = fsh_map_file_cursor_next(r->cursor, out, err);
      if (rc != 0) break;
      if (*out) {
        *partition = r->slots[r->cur].partition;
        break;
      }
      advance(r);
      continue;
    }
    if (r->cur == r->n_slots) break;
    fr_slot *s = &r->slots[r->cur];
    if (s->job < 0) {
      if (s->has_meta && s->rows == 0 && s->bytes == 0) {
        advance(r);
        continue;
      }
      if (!r->file && (rc = open_local(r, s, err)) != 0) break;
      if ((rc = open_local_cursor(r, s, err)) != 0) break;
      continue;
    }
    pthread_mutex_lock(&r->mu);
    fr_job *job = &r->jobs[s->job];
    while (!s->head && !s->done && !(job->finished && job->rc != 0)) {
      if (!job->hurried) {
        job->hurried = true;
        fr_pool_hurry(r->st->pool, job);
      }
      r->waiting = true;
      pthread_cond_wait(&r->cv, &r->mu);
      r->waiting = false;
    }
    if (s->head) {
      fr_item *it = s->head;
      s->head = it->next;
      if (!s->head) s->tail = NULL;
      r->in_flight -= it->bytes;
      *out = it->batch;
      *partition = s->partition;
      fsh_free(it);
      /* its last batch: past it now, not on one more lock round next
       * call (1000 x 1000: a slot is one batch, ~20k slots a run) */
      if (!s->head && s->done) r->cur++;
    } else if (s->done) {
      r->cur++;
    } else {
      rc = job->rc;
      if (err) *err = job->err;
      /* what describe_loss counted lost, to the task this reader runs in
       * (a source once, whichever of its slots were lost) */
      for (int64_t i = 0; i < job->n_slots; i++) {
        const fr_slot *x = &r->slots[job->slots[i]];
        const fr_slot *prev = i > 0 ? &r->slots[job->slots[i - 1]] : NULL;
        if (x->lost && !(prev && prev->lost && prev->map_id == x->map_id &&
                         prev->attempt == x->attempt))
          fsh_worker_task_report_lost(job->uri, r->shuffle_id, x->map_id, x->attempt, job->gone);
      }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (rc != 0 || *out) break;
  }
  if (rc != 0) {
    close_local(r);
    r->failed = rc;
  }
  return rc;
}

static int fr_get_next(fsh_batch_stream *stream, fsh_batch **out, fsh_error *err) {
  int32_t q;
  return fr_next(stream->private_data, &q, out, err);
}

static int fr_range_get_next(fsh_range_stream *stream, int32_t *partition, fsh_batch **out,
                             fsh_error *err) {
  return fr_next(stream->private_data, partition, out, err);
}

static void fr_free(fr_reader *r) {
  pthread_mutex_lock(&r->mu);
  r->closing = true;
  for (int j = 0; j < r->n_jobs; j++)
    if (r->jobs[j].rd) fsh_flight_reader_cancel(r->jobs[j].rd);
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (r->n_jobs > 0) fr_pool_forget(r->st->pool, r);
  close_local(r);
  for (int64_t i = 0; r->slots && i < r->n_slots; i++)
    for (fr_item *it = r->slots[i].head, *next; it; it = next) {
      next = it->next;
      fsh_batch_unref(it->batch);
      fsh_free(it);
    }
  for (int j = 0; r->jobs && j < r->n_jobs; j++) {
    fsh_free(r->jobs[j].uri);
    fsh_free(r->jobs[j].slots);
  }
  fsh_free(r->jobs);
  fsh_free(r->slots);
  fsh_buffer_unref(r->schema_msg);
  fsh_ipc_decoder_free(r->dec);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  fsh_free(r);
}

static void fr_release(fsh_batch_stream *s) {
  if (s->private_data) fr_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

static void fr_range_release(fsh_range_stream *s) {
  if (s->private_data) fr_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

/* Builds the slots (count per source) and groups remote sources into one
 * job per location; a remote source whose run is all empty (by its
 * metadata) is not fetched. */
static int plan(fr_reader *r, const fsh_map_output *sources, int64_t n, fsh_error *err) {
  const char *local = local_uri(r->st);
  int64_t g = r->count, n_slots = n * g;
  r->slots = fsh_calloc(n_slots > 0 ? (size_t)n_slots : 1, sizeof *r->slots);
  r->jobs = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *r->jobs);
  int64_t *count = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *count);
  int rc = r->slots && r->jobs && count ? 0 : ENOMEM;
  for (int64_t i = 0; rc == 0 && i < n; i++) {
    const fsh_map_output *m = &sources[i];
    bool empty = true;
    for (int64_t k = 0; k < g; k++) {
      fr_slot *s = &r->slots[i * g + k];
      s->map_id = m->map_id;
      s->attempt = m->attempt;
      s->partition = r->partition + (int32_t)k;
      s->has_meta = m->rows && m->bytes && m->checksums;
      if (s->has_meta) {
        s->rows = m->rows[s->partition];
        s->bytes = m->bytes[s->partition];
        s->checksum = m->checksums[s->partition];
      }
      s->job = -1;
      empty = empty && s->has_meta && s->rows == 0 && s->bytes == 0;
    }
    if (local && strcmp(m->location, local) == 0) continue;
    if (empty) {
      for (int64_t k = 0; k < g; k++) r->slots[i * g + k].done = true; /* nothing to fetch */
      continue; /* (job -1: the consumer skips them, as local ones) */
    }
    int j = 0;
    while (j < r->n_jobs && strcmp(r->jobs[j].uri, m->location) != 0) j++;
    if (j == r->n_jobs) {
      if (!(r->jobs[j].uri = fsh_strdup(m->location))) {
        rc = ENOMEM;
        break;
      }
      r->n_jobs++;
    }
    for (int64_t k = 0; k < g; k++) r->slots[i * g + k].job = j;
    count[j] += g;
  }
  for (int j = 0; rc == 0 && j < r->n_jobs; j++)
    if (!(r->jobs[j].slots = fsh_malloc(sizeof(int64_t) * (size_t)count[j]))) rc = ENOMEM;
  for (int64_t i = 0; rc == 0 && i < n_slots; i++) {
    fr_slot *s = &r->slots[i];
    if (s->job >= 0) r->jobs[s->job].slots[r->jobs[s->job].n_slots++] = i;
  }
  fsh_free(count);
  if (rc != 0)
    return fsh_error_set(err, ENOMEM, "flight shuffle %" PRIu64 " %s: out of memory",
                         r->shuffle_id, r->what);
  return 0;
}

/* The reader of [first, first + count) (arguments checked by the
 * dispatcher; locations checked here), its fetch jobs submitted. */
static int fr_open(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t first,
                   int32_t count, const fsh_map_output *sources, int64_t n, fr_reader **out,
                   fsh_error *err) {
  fb_state *st = b->state;
  char what[48];
  if (count == 1)
    snprintf(what, sizeof what, "partition %d", first);
  else
    snprintf(what, sizeof what, "partitions [%d, %d)", first, first + count);
  for (int64_t i = 0; i < n; i++) {
    fsh_flight_location loc;
    if ((!st->local || strcmp(sources[i].location, local_uri(st)) != 0) &&
        fsh_flight_location_parse(sources[i].location, &loc, NULL) != 0)
      return fsh_error_set(err, EINVAL, "flight shuffle %" PRIu64 " %s: source %" PRId64
                           " (map %" PRId64 " attempt %d): location '%s' is not a worker URI",
                           spec->shuffle_id, what, i, sources[i].map_id,
                           sources[i].attempt, sources[i].location);
  }
  fr_reader *r = fsh_calloc(1, sizeof *r);
  if (!r)
    return fsh_error_set(err, ENOMEM, "flight shuffle %" PRIu64 " %s: out of memory",
                         spec->shuffle_id, what);
  if (pthread_mutex_init(&r->mu, NULL) != 0) {
    fsh_free(r);
    return fsh_error_set(err, EAGAIN, "flight shuffle: cannot create a mutex");
  }
  if (pthread_cond_init(&r->cv, NULL) != 0) {
    pthread_mutex_destroy(&r->mu);
    fsh_free(r);
    return fsh_error_set(err, EAGAIN, "flight shuffle: cannot create a condition variable");
  }
  r->st = st;
  r->shuffle_id = spec->shuffle_id;
  r->partition = first;
  r->count = count;
  memcpy(r->what, what, sizeof what);
  r->n_partitions = spec->n_partitions;
  r->schema = spec->schema; /* the stream holds the reference */
  r->n_slots = n * count;
  r->max_in_flight = st->max_in_flight;
  int rc = plan(r, sources, n, err);
  if (rc == 0 && r->n_jobs > 0) rc = fr_pool_submit(st->pool, r, err);
  if (rc != 0) { /* (nothing queued: fr_free's forget finds nothing) */
    fr_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

static int fb_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t partition,
                          const fsh_map_output *sources, int64_t n, fsh_batch_stream *out,
                          fsh_error *err) {
  fr_reader *r = NULL;
  FSH_RETURN_NOT_OK(fr_open(b, spec, partition, 1, sources, n, &r, err));
  *out = (fsh_batch_stream){.get_next = fr_get_next, .release = fr_release,
                            .schema = fsh_schema_ref(spec->schema), .private_data = r};
  return 0;
}

static int fb_open_range_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                int32_t first, int32_t count, const fsh_map_output *sources,
                                int64_t n, fsh_range_stream *out, fsh_error *err) {
  fr_reader *r = NULL;
  FSH_RETURN_NOT_OK(fr_open(b, spec, first, count, sources, n, &r, err));
  *out = (fsh_range_stream){.get_next = fr_range_get_next, .release = fr_range_release,
                            .schema = fsh_schema_ref(spec->schema), .private_data = r};
  return 0;
}

/* ---- release and lifecycle --------------------------------------------- */

static int fb_release(fsh_shuffle_backend *b, uint64_t shuffle_id, fsh_error *err) {
  fb_state *st = b->state;
  int rc = 0;
  if (st->local) rc = fsh_shuffle_store_release(fsh_shuffle_worker_store(st->local), shuffle_id, err);
  char body[24];
  int len = snprintf(body, sizeof body, "%" PRIu64, shuffle_id);
  for (int i = 0; i < st->n_peers; i++) {
    if (st->local && strcmp(st->peers[i], local_uri(st)) == 0) continue;
    fsh_flight_client *c = NULL;
    fsh_error e = {{0}};
    int prc = fb_client(st, st->peers[i], &c, &e);
    fsh_flight_action a = {.type = (char *)"release", .body = {(uint8_t *)body, len}};
    fsh_flight_result_list results = {0};
    if (prc == 0) prc = fsh_flight_do_action(c, &a, &results, &e);
    fsh_flight_result_list_reset(&results);
    if (prc != 0 && rc == 0)
      rc = fsh_error_set(err, prc, "flight shuffle %" PRIu64 ": release on worker %s: %s",
                         shuffle_id, st->peers[i], e.message);
  }
  return rc;
}

static void fb_destroy(fsh_shuffle_backend *b) {
  fb_state *st = b->state;
  for (int i = 0; i < st->n_clients; i++) {
    fsh_flight_client_close(st->clients[i].client);
    fsh_free(st->clients[i].uri);
  }
  fsh_free(st->clients);
  for (int i = 0; i < st->n_hosts; i++) fsh_free(st->hosts[i].uri);
  for (int i = 0; i < st->n_small; i++) fsh_free(st->small[i].uri);
  fsh_free(st->hosts);
  for (int i = 0; i < st->n_peers; i++) fsh_free(st->peers[i]);
  fsh_free(st->peers);
  fsh_free(st->auth_token);
  fr_pool_free(st->pool);
  pthread_mutex_destroy(&st->mu);
  fsh_free(st);
  fsh_free(b);
}

static const fsh_shuffle_backend_ops k_flight_ops = {
    .name = "flight",
    .open_writer = fb_open_writer,
    .open_reader = fb_open_reader,
    .release = fb_release,
    .destroy = fb_destroy,
    .open_range_reader = fb_open_range_reader,
};

int fsh_shuffle_flight_new(const fsh_shuffle_flight_options *opts, fsh_shuffle_backend **out,
                           fsh_error *err) {
  if (!opts || !out || opts->n_peers < 0 || (opts->n_peers > 0 && !opts->peers) ||
      opts->max_parallel_fetches < 0 || opts->max_bytes_in_flight < 0 || opts->timeout_ms < 0)
    return fsh_error_set(err, EINVAL, "flight shuffle backend: bad options");
  fsh_shuffle_backend *b = fsh_calloc(1, sizeof *b);
  fb_state *st = fsh_calloc(1, sizeof *st);
  if (!b || !st || pthread_mutex_init(&st->mu, NULL) != 0) {
    fsh_free(b);
    fsh_free(st);
    return fsh_error_set(err, ENOMEM, "flight shuffle backend: out of memory");
  }
  b->ops = &k_flight_ops;
  b->state = st;
  st->local = opts->local;
  st->max_parallel = opts->max_parallel_fetches ? opts->max_parallel_fetches : 4;
  st->max_in_flight = opts->max_bytes_in_flight ? opts->max_bytes_in_flight : (int64_t)64 << 20;
  st->timeout_ms = opts->timeout_ms;
  st->direct = !opts->no_direct_reads;
  st->direct_min = opts->direct_min_bytes ? opts->direct_min_bytes : (int64_t)16 << 10;
  /* base: the fetches a reader ran at once before the pool, for two
   * readers (a worker's task slots); cap: twice that */
  fsh_error pe = {{0}};
  bool ok = fr_pool_new(2 * st->max_parallel, 4 * st->max_parallel, &st->pool, &pe) == 0;
  if (ok && opts->auth_token) ok = (st->auth_token = fsh_strdup(opts->auth_token)) != NULL;
  if (ok && opts->n_peers > 0) ok = (st->peers = fsh_calloc((size_t)opts->n_peers, sizeof(char *)));
  for (int i = 0; ok && i < opts->n_peers; i++) {
    ok = opts->peers[i] && (st->peers[i] = fsh_strdup(opts->peers[i]));
    if (ok) st->n_peers++;
  }
  if (!ok) {
    fb_destroy(b);
    return fsh_error_set(err, ENOMEM, "flight shuffle backend: out of memory (or a NULL peer)");
  }
  *out = b;
  return 0;
}

void fsh_shuffle_flight_get_stats(fsh_shuffle_backend *b, fsh_shuffle_flight_stats *out) {
  memset(out, 0, sizeof *out);
  if (!b || b->ops != &k_flight_ops) return;
  fb_stats *s = &((fb_state *)b->state)->stats;
  out->local_sources = atomic_load(&s->local_sources);
  out->direct_sources = atomic_load(&s->direct_sources);
  out->direct_bytes = atomic_load(&s->direct_bytes);
  out->fetched_sources = atomic_load(&s->fetched_sources);
  out->direct_fallbacks = atomic_load(&s->direct_fallbacks);
  out->locates = atomic_load(&s->locates);
}
