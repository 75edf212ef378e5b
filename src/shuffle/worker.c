/* worker.c -- a worker: a store behind a Flight server (surface and wire
 * formats in shuffle.h). ListFlights describes every (shuffle, partition)
 * held; DoGet (worker_get.c) serves tickets; DoPut (worker_put.c) writes
 * map outputs; DoAction "release" removes a shuffle, "map-synthetic" and
 * "reduce-verify" run tasks (task_map.c, task_reduce.c) -- and the task
 * kinds a layer above registers (fsh_worker_task_kind) -- through the
 * worker's own flight backend (or the fs backend over its --fs-dir), and
 * "stats" tells the store's figures. A keeper thread gives memory back
 * between shuffles (below). */
#include <errno.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/kernels.h> /* the partition builders' cache */

#include "shuffle/worker_internal.h"

struct fsh_shuffle_worker {
  fsh_shuffle_store *store;
  fsh_flight_server *server;
  fsh_shuffle_backend *flight; /* local = this worker: the tasks' backend */
  fsh_shuffle_backend *fs;     /* over opts->fs_dir, or NULL */
  fsh_worker_tasks *tasks;     /* map and reduce tasks, on threads of their own */
  fsh_worker_task_done_fn on_task_done;
  void *on_task_done_ctx;
  fsh_worker_more_sources_fn on_more_sources;
  void *on_more_sources_ctx;
  fsh_worker_task_kind *kinds; /* registered task kinds (names owned) */
  int n_kinds;
  struct incr_hub *hub; /* what the incremental reduces' polls learnt */
  struct keeper {       /* gives memory back between shuffles (below) */
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* a release, or stop */
    pthread_t thread;
    bool started, stop, trim_wanted;
    int64_t busy_ns;    /* when it last saw a task run, or a release */
    int64_t builders_idle_ms; /* < 0: the builders' cache is kept */
  } keeper;
  char uri[320];
};

/* ---- ListFlights ------------------------------------------------------- */

static int cmp_items(const void *a, const void *b) {
  const fsh_map_output *x = &((const fsh_store_item *)a)->meta;
  const fsh_map_output *y = &((const fsh_store_item *)b)->meta;
  if (x->shuffle_id != y->shuffle_id) return x->shuffle_id < y->shuffle_id ? -1 : 1;
  if (x->map_id != y->map_id) return x->map_id < y->map_id ? -1 : 1;
  return (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

/* The FlightInfo of partition p of the shuffle whose map outputs are
 * items[0, n) (same shuffle, same partition count). */
static int partition_info(fsh_shuffle_worker *w, const fsh_store_item *items, int64_t n,
                          int32_t p, fsh_flight_info *out, fsh_error *err) {
  fsh_flight_info info = {.total_records = 0, .total_bytes = 0, .ordered = true};
  fsh_shuffle_ticket t = {.shuffle_id = items[0].meta.shuffle_id, .partition = p, .n_sources = n};
  t.sources = fsh_calloc((size_t)n, sizeof *t.sources);
  char id[24], part[16];
  snprintf(id, sizeof id, "%" PRIu64, t.shuffle_id);
  snprintf(part, sizeof part, "%d", p);
  const char *path[] = {"shuffle", id, "partition", part};
  fsh_buffer *ticket = NULL;
  int rc = t.sources ? 0 : ENOMEM;
  for (int64_t i = 0; rc == 0 && i < n; i++) {
    t.sources[i] = (fsh_ticket_source){items[i].meta.map_id, items[i].meta.attempt};
    info.total_records += items[i].meta.rows[p];
    info.total_bytes += items[i].meta.bytes[p];
  }
  if (rc == 0) rc = fsh_shuffle_ticket_encode(&t, &ticket, err);
  if (rc == 0) rc = fsh_flight_descriptor_path(&info.descriptor, path, 4);
  if (rc == 0 && !(info.endpoints = fsh_calloc(1, sizeof *info.endpoints))) rc = ENOMEM;
  if (rc == 0) {
    info.n_endpoints = 1;
    fsh_flight_endpoint *e = info.endpoints;
    rc = fsh_bytes_set(&e->ticket, ticket->data, ticket->size);
    if (rc == 0 && !(e->locations = fsh_calloc(1, sizeof *e->locations))) rc = ENOMEM;
    if (rc == 0 && !(e->locations[0] = fsh_strdup(w->uri))) rc = ENOMEM;
    if (rc == 0) e->n_locations = 1;
  }
  if (rc == 0) info.schema = fsh_schema_ref(items[0].schema);
  fsh_buffer_unref(ticket);
  fsh_shuffle_ticket_reset(&t);
  if (rc != 0) {
    fsh_flight_info_reset(&info);
    return rc == ENOMEM ? fsh_error_set(err, ENOMEM, "worker %s: ListFlights: out of memory",
                                        w->uri)
                        : rc;
  }
  *out = info;
  return 0;
}

static int list_flights(void *ctx, fsh_flight_call *call, const fsh_bytes *criteria,
                        fsh_flight_info_list *out, fsh_error *err) {
  (void)call, (void)criteria;
  fsh_shuffle_worker *w = ctx;
  fsh_store_item *items = NULL;
  int64_t n = 0;
  FSH_RETURN_NOT_OK(fsh_store_list(w->store, &items, &n, err));
  qsort(items, (size_t)n, sizeof *items, cmp_items);
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < n;) {
    int64_t j = i + 1; /* items[i, j): one shuffle */
    while (j < n && items[j].meta.shuffle_id == items[i].meta.shuffle_id) j++;
    /* map outputs written with another partition count than the first
     * are not listed (a client mistake; DoGet of them still works) */
    int64_t k = i;
    for (int64_t x = i; x < j; x++)
      if (items[x].meta.n_partitions == items[i].meta.n_partitions) items[k++] = items[x];
      else fsh_map_output_reset(&items[x].meta), fsh_schema_unref(items[x].schema);
    for (int64_t x = k; x < j; x++) memset(&items[x], 0, sizeof items[x]);
    for (int32_t p = 0; rc == 0 && p < items[i].meta.n_partitions; p++) {
      fsh_flight_info info;
      rc = partition_info(w, items + i, k - i, p, &info, err);
      if (rc == 0 && fsh_flight_info_list_push(out, &info) != 0) {
        fsh_flight_info_reset(&info);
        rc = fsh_error_set(err, ENOMEM, "worker %s: ListFlights: out of memory", w->uri);
      }
    }
    i = j;
  }
  fsh_store_items_free(items, n);
  return rc;
}

/* ---- DoGet, DoPut ------------------------------------------------------ */

static int do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                  fsh_flight_source **out, fsh_error *err) {
  (void)call;
  fsh_shuffle_worker *w = ctx;
  return fsh_worker_do_get(w->store, ticket->data, ticket->size, out, err);
}

static int do_put(void *ctx, fsh_flight_call *call, const fsh_flight_message *first,
                  fsh_flight_sink **out, fsh_error *err) {
  (void)call;
  fsh_shuffle_worker *w = ctx;
  if (!first->has_descriptor)
    return fsh_error_set(err, EINVAL, "worker %s: DoPut without a descriptor", w->uri);
  return fsh_worker_put_sink(w->store, &first->descriptor, out, err);
}

/* ---- the keeper: memory given back between shuffles ---------------------
 *
 * A worker that ran a large shuffle kept its memory after the release: the
 * heap its tasks freed stays in glibc's arenas (fragmented: the top is
 * rarely free, so free() does not shrink them), the store's pool keeps the
 * released images' memfds (store.c; shmem: not in the worker's RSS, but
 * the machine's memory all the same), and the partition builders' cache
 * (kernels.h) up to 2 x 160 MiB. Measured after a 4 GiB 64 x 64 job on 4
 * workers: ~0.25 GB RSS and ~1 GB of pooled memfds per worker, kept idle.
 *
 * So one thread per worker: after a release, once no task runs on the
 * worker, it calls malloc_trim(0) (glibc; at most once per TRIM_MIN_MS in
 * the process: it walks every arena); every KEEPER_TICK_MS it asks the
 * store to empty a pool that went unused for its idle time
 * (fsh_store_pool_drain_idle, 30 s), and once no task ran and nothing was
 * released for its builders' idle time (30 s) it drops the builders' cache
 * (the same back-to-back reuse gone stale; also on a worker whose pool
 * stays empty: everything spilled, or private images), trimming again
 * after either. Back-to-back shuffles keep both caches (their writers take
 * from the pool within the idle time); an idle worker holds neither. Both
 * idle times are the worker's options (fsh_shuffle_worker_set_idle_ms:
 * `worker --pool-idle-ms / --builders-idle-ms`, "never" included): a
 * long-lived service whose shuffles come further apart can keep its pages
 * for the next one, at the price of the memory held idle
 * (bench/shuffle/WORKER_MEMORY.md, "The idle window"). Never under the
 * store's lock: the store is only asked through its thread-safe calls. */
#define KEEPER_TICK_MS 1000 /* nothing pending */
#define KEEPER_RETRY_MS 250 /* a trim waits for the tasks to end */
#define TRIM_MIN_MS 1000

static atomic_llong g_last_trim_ns; /* process-wide: malloc_trim is */

static int64_t keeper_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* malloc_trim(0) unless another worker of this process trimmed within
 * TRIM_MIN_MS: whether it ran. */
static bool heap_trim(void) {
  int64_t now = keeper_now_ns();
  long long last = atomic_load(&g_last_trim_ns);
  if (last && now - last < (int64_t)TRIM_MIN_MS * 1000000) return false;
  if (!atomic_compare_exchange_strong(&g_last_trim_ns, &last, now)) return false;
#ifdef __GLIBC__
  (void)malloc_trim(0);
#endif
  return true;
}

static void *keeper_main(void *arg) {
  fsh_shuffle_worker *w = arg;
  struct keeper *k = &w->keeper;
  pthread_mutex_lock(&k->mu);
  while (!k->stop) {
    pthread_mutex_unlock(&k->mu);
    int64_t due = -1;
    bool drained = fsh_store_pool_drain_idle(w->store, &due) > 0;
    bool idle = fsh_worker_tasks_running(w->tasks) == 0;
    int64_t now = keeper_now_ns();
    pthread_mutex_lock(&k->mu);
    if (!idle) k->busy_ns = now;
    bool stale = idle && k->builders_idle_ms >= 0 &&
                 now - k->busy_ns >= k->builders_idle_ms * 1000000;
    pthread_mutex_unlock(&k->mu);
    bool dropped = stale && fsh_partition_builder_cache_bytes() > 0;
    if (dropped) fsh_partition_builder_cache_drop();
    if (stale) fr_spans_drop(); /* the reader's VM read buffers (munmap: no trim) */
    pthread_mutex_lock(&k->mu);
    if (drained || dropped) k->trim_wanted = true;
    if (k->trim_wanted && idle) {
      pthread_mutex_unlock(&k->mu);
      bool done = heap_trim();
      pthread_mutex_lock(&k->mu);
      if (done) k->trim_wanted = false;
    }
    int64_t ms = k->trim_wanted ? KEEPER_RETRY_MS : KEEPER_TICK_MS;
    if (due >= 0 && due + 5 < ms) ms = due + 5;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    if (!k->stop) pthread_cond_timedwait(&k->cv, &k->mu, &ts);
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

/* 0 or ENOMEM (no thread). */
static int keeper_start(fsh_shuffle_worker *w) {
  struct keeper *k = &w->keeper;
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0) return ENOMEM;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&k->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (rc != 0) return ENOMEM;
  if (pthread_mutex_init(&k->mu, NULL) != 0) {
    pthread_cond_destroy(&k->cv);
    return ENOMEM;
  }
  k->busy_ns = keeper_now_ns();
  k->builders_idle_ms = FSH_WORKER_BUILDERS_IDLE_MS_DEFAULT;
  if (pthread_create(&k->thread, NULL, keeper_main, w) != 0) {
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    return ENOMEM;
  }
  k->started = true;
  return 0;
}

static void keeper_stop(fsh_shuffle_worker *w) {
  struct keeper *k = &w->keeper;
  if (!k->started) return;
  pthread_mutex_lock(&k->mu);
  k->stop = true;
  pthread_cond_signal(&k->cv);
  pthread_mutex_unlock(&k->mu);
  pthread_join(k->thread, NULL);
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
  k->started = false;
}

void fsh_shuffle_worker_set_idle_ms(fsh_shuffle_worker *w, int64_t pool_ms,
                                    int64_t builders_ms) {
  struct keeper *k = &w->keeper;
  fsh_store_set_pool_idle_ms(w->store, pool_ms);
  if (!k->started) return;
  pthread_mutex_lock(&k->mu);
  k->builders_idle_ms = builders_ms < 0 ? -1 : builders_ms;
  pthread_cond_signal(&k->cv); /* a shorter time applies now */
  pthread_mutex_unlock(&k->mu);
}

/* A shuffle went: the heap it freed is to be given back. */
static void keeper_released(fsh_shuffle_worker *w) {
  struct keeper *k = &w->keeper;
  if (!k->started) return;
  pthread_mutex_lock(&k->mu);
  k->trim_wanted = true;
  k->busy_ns = keeper_now_ns();
  pthread_cond_signal(&k->cv);
  pthread_mutex_unlock(&k->mu);
}

/* ---- actions ----------------------------------------------------------- */

static int action_release(fsh_shuffle_worker *w, const fsh_flight_action *a,
                          fsh_flight_result_list *out, fsh_error *err) {
  char digits[24];
  uint64_t id = 0;
  bool ok = a->body.size > 0 && a->body.size < (int64_t)sizeof digits;
  if (ok) {
    memcpy(digits, a->body.data, (size_t)a->body.size);
    digits[a->body.size] = '\0';
    for (int64_t i = 0; ok && i < a->body.size; i++) ok = digits[i] >= '0' && digits[i] <= '9';
    if (ok) {
      errno = 0;
      id = strtoull(digits, NULL, 10);
      ok = errno == 0;
    }
  }
  if (!ok)
    return fsh_error_set(err, EINVAL, "worker %s: release: the body must be a shuffle id in "
                         "ASCII decimal", w->uri);
  int64_t n = 0, bytes = 0;
  FSH_RETURN_NOT_OK(fsh_store_release(w->store, id, &n, &bytes, err));
  if (w->fs) FSH_RETURN_NOT_OK(fsh_shuffle_release(w->fs, id, err));
  keeper_released(w);
  char msg[160];
  int len = snprintf(msg, sizeof msg, "released shuffle %" PRIu64 ": %" PRId64 " map outputs, %"
                     PRId64 " bytes", id, n, bytes);
  if (fsh_flight_result_list_push(out, msg, len) != 0)
    return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  return 0;
}

/* The backend a task names, or EINVAL saying why this worker has none. */
static int task_backend(fsh_shuffle_worker *w, fsh_task_backend kind, const char *action,
                        fsh_shuffle_backend **out, fsh_error *err) {
  if (kind == FSH_TASK_BACKEND_FLIGHT) *out = w->flight;
  else if (kind == FSH_TASK_BACKEND_FS && w->fs) *out = w->fs;
  else if (kind == FSH_TASK_BACKEND_FS)
    return fsh_error_set(err, EINVAL, "worker %s: %s: an fs task, but this worker was started "
                         "without --fs-dir", w->uri, action);
  else
    return fsh_error_set(err, EINVAL, "worker %s: %s: the %s backend runs in-process only",
                         w->uri, action, fsh_task_backend_name(kind));
  return 0;
}


/* A task the worker runs (worker_tasks.c): decoded and checked before it
 * starts, so a bad body is answered INVALID_ARGUMENT at once. */
typedef struct task_job {
  fsh_shuffle_worker *w;
  fsh_shuffle_backend *backend;
  bool is_map;
  bool is_reduce_map; /* reduce-then-map (is_map false) */
  fsh_map_task map;
  fsh_reduce_task reduce;
  fsh_reduce_map_task reduce_map;
  const fsh_worker_task_kind *kind; /* a registered kind: state is its task */
  void *state;
  uint8_t *tag; /* owned; incremental reduces (asked for more sources) */
  int64_t tag_size;
} task_job;

static void task_job_free(void *p) {
  task_job *j = p;
  if (j->kind && j->kind->free_state) j->kind->free_state(j->state);
  if (!j->is_map) fsh_reduce_task_reset(&j->reduce);
  fsh_reduce_map_task_reset(&j->reduce_map);
  fsh_free(j->tag);
  fsh_free(j);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- incremental reduces ----------------------------------------------
 *
 * An incremental reduce ("task" action, reduce-verify body with the
 * incremental flag) reads the sources it came with, then asks the
 * scheduler (on_more_sources) for the map outputs that appeared since and
 * reads them, until the scheduler says complete; it sums the results (the
 * row checksum is a sum too). A worker may hold many of them (the
 * driver's slots per worker while the maps run; every partition in the
 * experiment of bench/pipeline/INCREMENTAL.md), and what they cost while
 * they wait decides whether the overlap pays.
 *
 * So they share one hub per worker: for each shuffle, the driver's latest
 * version (one per accepted map output) and whether it is complete, as any
 * of them last heard. One of them at a time (the "poller") asks the driver
 * every INCR_POLL_MS for its own partition, and so keeps the hub fresh; the
 * others sleep on the hub's condition variable and ask for their own
 * sources only when the hub's version is a whole round ahead of theirs (or
 * the shuffle is complete): a worker makes ~1 poll per INCR_POLL_MS plus
 * ~1 per reduce and round, instead of 1 per reduce every INCR_POLL_MS.
 * The hub wakes its sleepers only when the version passes a multiple of
 * INCR_WAKE_VERSIONS or the shuffle completes.
 *
 * New sources are read in rounds, one fetch per peer for many map outputs
 * (bundled blocks) -- and, for a coalesced reduce (sched.h), for its whole
 * run of partitions: the range reader asks each peer once per round
 * however many partitions the run has, so rounds stay cheap while every
 * partition overlaps the maps (the driver starts one run per reduce
 * slot). A round starts once `want` sources wait, the oldest
 * has waited round_ns, or no more will come. Both grow with the number of
 * incremental reduces running here (64 sources / 200 ms for up to 7, up
 * to 256 / 800 ms): many reduces reading small rounds cost more fetches
 * than the overlap saves. At most one per CPU (at least 2) reads at once:
 * the others' rounds wait for a turn rather than all fetching together.
 * (History: a reader and a DoGet per peer for every map that ended cost
 * more CPU than the maps at 1000 x 1000 on 2 cores; asking the driver
 * again the moment each answer came was thousands of round trips a
 * second; rounds of 256 / 500 ms instead of 64 / 200 ms measured the same
 * with 2 reduces per worker.)
 * The first INCR_EAGER reduces of a shuffle on a worker read their first
 * round at once, so that reduce fetching starts right after the first map
 * output (the target is 100 ms). */
#define INCR_ROUND_SOURCES 64
#define INCR_ROUND_MS 200
#define INCR_POLL_MS 50
#define INCR_WAKE_VERSIONS 16
#define INCR_EAGER 2
#define INCR_HUB_SHUFFLES 8

typedef struct incr_shuffle {
  uint64_t shuffle_id; /* 0: a free entry */
  int users;           /* reduces using the entry */
  int eager;           /* reduces that read their first round at once */
  uint64_t version;    /* the newest any poll answered */
  uint64_t woke_at;    /* the version at the last broadcast */
  bool complete;
  bool poller;         /* one reduce keeps the entry fresh */
  int64_t last_poll_ns;
} incr_shuffle;

typedef struct incr_hub {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_cond_t read_cv; /* a reading turn is free */
  int running; /* incremental reduces running on this worker */
  int reading; /* of them reading a round (at most readers) */
  int readers; /* the CPUs online, at least 2 */
  incr_shuffle sh[INCR_HUB_SHUFFLES];
} incr_hub;

static incr_hub *incr_hub_new(void) {
  incr_hub *h = fsh_calloc(1, sizeof *h);
  if (!h) return NULL;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  h->readers = cpus > 2 ? (int)(cpus < 1024 ? cpus : 1024) : 2;
  pthread_mutex_init(&h->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->cv, &ca);
  pthread_cond_init(&h->read_cv, &ca);
  pthread_condattr_destroy(&ca);
  return h;
}

static void incr_hub_free(incr_hub *h) {
  if (!h) return;
  pthread_cond_destroy(&h->cv);
  pthread_cond_destroy(&h->read_cv);
  pthread_mutex_destroy(&h->mu);
  fsh_free(h);
}

/* The entry of shuffle id, made if needed; NULL if every entry is in use
 * (the reduce then polls on its own, as if it were the poller). mu held. */
static incr_shuffle *hub_enter(incr_hub *h, uint64_t id) {
  incr_shuffle *free_one = NULL;
  for (int i = 0; i < INCR_HUB_SHUFFLES; i++) {
    if (h->sh[i].shuffle_id == id && h->sh[i].users > 0) {
      h->sh[i].users++;
      return &h->sh[i];
    }
    if (!free_one && h->sh[i].users == 0) free_one = &h->sh[i];
  }
  if (free_one) *free_one = (incr_shuffle){.shuffle_id = id, .users = 1};
  return free_one;
}

/* What a poll answered (version, complete) goes into e; its sleepers are
 * woken when the version passed a multiple of INCR_WAKE_VERSIONS or the
 * shuffle completed. mu held. */
static void hub_learn(incr_hub *h, incr_shuffle *e, uint64_t version, bool complete) {
  bool wake = false;
  if (version > e->version) {
    e->version = version;
    if (version / INCR_WAKE_VERSIONS != e->woke_at / INCR_WAKE_VERSIONS) wake = true;
  }
  /* the newest answer tells whether it is complete (a lost output makes
   * a complete shuffle incomplete again until its map is re-run) */
  if (version >= e->version && complete != e->complete) {
    e->complete = complete;
    if (complete) wake = true;
  }
  if (wake) {
    e->woke_at = e->version;
    pthread_cond_broadcast(&h->cv);
  }
}

/* Gives up the poller's duty: another sleeper takes it over. mu held. */
static void hub_resign(incr_hub *h, incr_shuffle *e, bool *poller) {
  if (!*poller) return;
  *poller = false;
  e->poller = false;
  pthread_cond_broadcast(&h->cv); /* any one of them takes it */
}

static void cond_wait_until(incr_hub *h, int64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
  pthread_cond_timedwait(&h->cv, &h->mu, &ts);
}

/* Moves more's sources onto the end of acc (locations merged by URI, the
 * sources' indexes remapped); more is left empty. ENOMEM leaves acc as it
 * was plus whatever was moved (still consistent). */
static int append_sources(fsh_reduce_task *acc, fsh_reduce_task *more, fsh_error *err) {
  if (more->parts) /* a run's per-partition numbers: the driver never sends them here */
    return fsh_error_set(err, EINVAL, "more map outputs for a run of partitions must come "
                         "with sizes unknown");
  int64_t n = acc->n_sources + more->n_sources;
  fsh_reduce_source *s = fsh_realloc(acc->sources, (size_t)(n ? n : 1) * sizeof *s);
  if (!s) return fsh_error_set(err, ENOMEM, "out of memory");
  acc->sources = s;
  for (int64_t i = 0; i < more->n_sources; i++) {
    const char *uri = more->locations[more->sources[i].location];
    int32_t at = 0;
    while (at < acc->n_locations && strcmp(acc->locations[at], uri) != 0) at++;
    if (at == acc->n_locations) {
      char **l = fsh_realloc(acc->locations, (size_t)(at + 1) * sizeof *l);
      if (!l) return fsh_error_set(err, ENOMEM, "out of memory");
      acc->locations = l;
      if (!(l[at] = fsh_strdup(uri))) return fsh_error_set(err, ENOMEM, "out of memory");
      acc->n_locations = at + 1;
    }
    acc->sources[acc->n_sources] = more->sources[i];
    acc->sources[acc->n_sources++].location = at;
  }
  fsh_reduce_task_reset(more);
  return 0;
}

/* Reads round (then emptied) and adds its result to total. */
static int read_round(task_job *j, fsh_reduce_task *round, fsh_reduce_task_result *total,
                      fsh_error *err) {
  round->shuffle_id = j->reduce.shuffle_id;
  round->partition = j->reduce.partition;
  round->count = j->reduce.count;
  round->n_partitions = j->reduce.n_partitions;
  round->backend = j->reduce.backend;
  fsh_reduce_task_result r;
  int rc = fsh_reduce_task_run(j->backend, round, &r, err);
  if (rc == 0) {
    rc = fsh_reduce_task_result_add(total, &r, err);
    fsh_reduce_task_result_reset(&r);
  }
  fsh_reduce_task_reset(round);
  return rc;
}

static int run_incremental(task_job *j, fsh_reduce_task_result *out, fsh_error *err) {
  fsh_shuffle_worker *w = j->w;
  incr_hub *h = w->hub;
  fsh_reduce_task_result total = {0};
  int rc = 0;
  if (j->reduce.n_sources) {
    rc = fsh_reduce_task_run(j->backend, &j->reduce, &total, err);
    total.nanos = 0;
  }
  pthread_mutex_lock(&h->mu);
  h->running++;
  incr_shuffle *e = hub_enter(h, j->reduce.shuffle_id);
  bool eager = e && e->eager < INCR_EAGER;
  if (eager) e->eager++;
  pthread_mutex_unlock(&h->mu);
  uint64_t version = 0;
  bool complete = false, poller = false, asked = false;
  int64_t last_ask = 0;
  fsh_reduce_task round = {0}; /* sources waiting to be read */
  int64_t round_since = 0;     /* when the oldest of them came */
  int64_t rounds = 0;          /* rounds read */
  int64_t t0 = now_ns();
  while (rc == 0) {
    if (fsh_worker_task_cancelled()) {
      rc = fsh_error_set(err, ECANCELED, "worker %s: reduce of partition %d cancelled", w->uri,
                         j->reduce.partition);
      break;
    }
    pthread_mutex_lock(&h->mu);
    int scale = h->running / 4 < 1 ? 1 : h->running / 4 > 4 ? 4 : h->running / 4;
    int64_t want = INCR_ROUND_SOURCES * scale, round_ns = INCR_ROUND_MS * scale * 1000000LL;
    int64_t now = now_ns();
    bool due = round.n_sources > 0 &&
               (round.n_sources >= want || complete || (rounds == 0 && eager) ||
                now - round_since >= round_ns);
    bool ask = false;
    if (!due && !complete) {
      /* ask the driver: at once for an eager reduce's first round; when
       * the hub knows of a round's worth (or the end); or every
       * INCR_POLL_MS to keep the hub fresh (or without a hub entry) */
      if ((eager && !asked) || (e && e->complete) ||
          (e && e->version >= version + (uint64_t)(want - round.n_sources))) {
        ask = true;
      } else if (!e) {
        ask = now - last_ask >= INCR_POLL_MS * 1000000LL;
        if (!ask) cond_wait_until(h, last_ask + INCR_POLL_MS * 1000000LL);
      } else if (poller || !e->poller) {
        if (!poller) {
          poller = true;
          e->poller = true;
        }
        ask = now - e->last_poll_ns >= INCR_POLL_MS * 1000000LL;
        if (ask) e->last_poll_ns = now;
      }
      if (!ask && e) {
        int64_t until = now + 1000000000LL; /* a sleeper checks for a cancel each second */
        if (poller) until = e->last_poll_ns + INCR_POLL_MS * 1000000LL;
        if (round.n_sources > 0 && round_since + round_ns < until) until = round_since + round_ns;
        cond_wait_until(h, until);
      }
    }
    if (due || complete) {
      if (e) hub_resign(h, e, &poller); /* busy reading or done */
    }
    pthread_mutex_unlock(&h->mu);
    if (due) {
      pthread_mutex_lock(&h->mu);
      while (h->reading >= h->readers) pthread_cond_wait(&h->read_cv, &h->mu);
      h->reading++;
      pthread_mutex_unlock(&h->mu);
      rc = read_round(j, &round, &total, err);
      pthread_mutex_lock(&h->mu);
      h->reading--;
      pthread_cond_signal(&h->read_cv);
      pthread_mutex_unlock(&h->mu);
      rounds++;
      continue;
    }
    if (complete) break;
    if (!ask) continue;
    fsh_reduce_task more = {0};
    asked = true;
    last_ask = now_ns();
    rc = w->on_more_sources(w->on_more_sources_ctx, j->tag, j->tag_size, &version, &more,
                            &complete, err);
    if (rc == 0 && more.n_sources > 0) {
      if (round.n_sources == 0) round_since = now_ns();
      round.sizes_unknown |= more.sizes_unknown; /* as the hook says */
      rc = append_sources(&round, &more, err);
    }
    fsh_reduce_task_reset(&more);
    if (rc == 0 && e) {
      pthread_mutex_lock(&h->mu);
      hub_learn(h, e, version, complete);
      pthread_mutex_unlock(&h->mu);
    }
  }
  pthread_mutex_lock(&h->mu);
  if (e) {
    hub_resign(h, e, &poller);
    e->users--;
  }
  h->running--;
  pthread_mutex_unlock(&h->mu);
  fsh_reduce_task_reset(&round);
  total.nanos = now_ns() - t0;
  /* a run none of whose rounds had sources still answers per partition */
  int32_t c = fsh_reduce_task_count(&j->reduce);
  if (rc == 0 && c > 1 && total.count == 0) {
    total.part_rows = fsh_calloc((size_t)c, sizeof *total.part_rows);
    total.part_checksums = fsh_calloc((size_t)c, sizeof *total.part_checksums);
    total.count = c;
    if (!total.part_rows || !total.part_checksums)
      rc = fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  }
  if (rc == 0) *out = total;
  else fsh_reduce_task_result_reset(&total);
  return rc;
}

static int task_job_run(void *p, fsh_buffer **answer, fsh_error *err) {
  task_job *j = p;
  int rc;
  if (j->kind) {
    rc = j->kind->run(j->kind->ctx, j->state, j->backend, answer, err);
  } else if (j->is_map) {
    fsh_map_task_result r;
    rc = fsh_map_task_run(j->backend, &j->map, &r, err);
    /* If the answer is lost the map output stays: the caller retries with
     * another attempt or releases the shuffle. */
    if (rc == 0) {
      rc = fsh_map_task_result_encode(&r, answer, err);
      fsh_map_task_result_reset(&r);
    }
  } else if (j->is_reduce_map) {
    fsh_map_task_result r;
    rc = fsh_reduce_map_task_run(j->backend, &j->reduce_map, &r, err);
    if (rc == 0) {
      rc = fsh_map_task_result_encode(&r, answer, err);
      fsh_map_task_result_reset(&r);
    }
  } else {
    fsh_reduce_task_result r;
    rc = j->reduce.incremental ? run_incremental(j, &r, err)
                               : fsh_reduce_task_run(j->backend, &j->reduce, &r, err);
    if (rc == 0) {
      rc = fsh_reduce_task_result_encode(&r, answer, err);
      fsh_reduce_task_result_reset(&r);
    }
  }
  return rc == 0 ? 0 : fsh_error_prefix(err, rc, "worker %s: ", j->w->uri);
}

/* Decodes a task of kind `kind` (body data[0, size)) into a new task_job. */
static int decode_task(fsh_shuffle_worker *w, const char *kind, const uint8_t *data,
                       int64_t size, task_job **out, fsh_error *err) {
  static const uint8_t empty[1];
  if (!data) data = empty;
  for (int i = 0; i < w->n_kinds; i++) {
    const fsh_worker_task_kind *k = &w->kinds[i];
    if (strcmp(kind, k->name) != 0) continue;
    task_job *j = fsh_calloc(1, sizeof *j);
    if (!j) return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
    j->w = w;
    j->is_map = true; /* no synthetic reduce to reset */
    fsh_task_backend kb = FSH_TASK_BACKEND_FLIGHT;
    int rc = k->decode(k->ctx, data, size, &j->state, &kb, err);
    if (rc != 0) {
      fsh_free(j);
      return fsh_error_prefix(err, rc, "worker %s: %s: ", w->uri, kind);
    }
    j->kind = k;
    if ((rc = task_backend(w, kb, kind, &j->backend, err)) != 0) {
      task_job_free(j);
      return rc;
    }
    *out = j;
    return 0;
  }
  if (strcmp(kind, FSH_MERGE_TASK_KIND) == 0) { /* the pre-shuffle merge (worker_merge.c) */
    task_job *j = fsh_calloc(1, sizeof *j);
    if (!j) return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
    j->w = w;
    j->is_map = true; /* no synthetic reduce to reset */
    j->kind = fsh_worker_merge_kind();
    j->backend = w->flight;
    int rc = fsh_worker_merge_decode(w->store, data, size, &j->state, err);
    if (rc != 0) {
      fsh_free(j);
      return fsh_error_prefix(err, rc, "worker %s: ", w->uri);
    }
    *out = j;
    return 0;
  }
  bool is_map = strcmp(kind, "map-synthetic") == 0;
  bool is_rm = strcmp(kind, "reduce-then-map") == 0;
  if (!is_map && !is_rm && strcmp(kind, "reduce-verify") != 0)
    return fsh_error_set(err, EINVAL, "worker %s: task: unknown task type '%s' (map-synthetic, "
                         "reduce-verify, reduce-then-map%s%s)", w->uri, kind,
                         w->n_kinds ? ", " : "", w->n_kinds ? w->kinds[0].name : "");
  task_job *j = fsh_calloc(1, sizeof *j);
  if (!j) return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  j->w = w;
  j->is_map = is_map;
  j->is_reduce_map = is_rm;
  int rc = is_map ? fsh_map_task_decode(data, size, &j->map, err)
           : is_rm ? fsh_reduce_map_task_decode(data, size, &j->reduce_map, err)
                   : fsh_reduce_task_decode(data, size, &j->reduce, err);
  if (rc != 0) {
    fsh_free(j); /* nothing decoded to free */
    return fsh_error_prefix(err, rc, "worker %s: ", w->uri);
  }
  fsh_task_backend kb = is_map ? j->map.backend : is_rm ? j->reduce_map.in.backend
                                                       : j->reduce.backend;
  rc = task_backend(w, kb, kind, &j->backend, err);
  if (rc != 0) {
    task_job_free(j);
    return rc;
  }
  *out = j;
  return 0;
}

static int answer_task_id(fsh_shuffle_worker *w, uint64_t id, fsh_flight_result_list *out,
                          fsh_error *err) {
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(id >> (8 * i));
  if (fsh_flight_result_list_push(out, le, 8) != 0)
    return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  return 0;
}

/* "map-synthetic" / "reduce-verify": starts the task, answers its id (u64
 * little-endian); "task-wait" tells when it is done. */
static int action_start_task(fsh_shuffle_worker *w, const fsh_flight_action *a,
                             fsh_flight_result_list *out, fsh_error *err) {
  task_job *j = NULL;
  FSH_RETURN_NOT_OK(decode_task(w, a->type, a->body.data, a->body.size, &j, err));
  if (!j->is_map && j->reduce.incremental) {
    task_job_free(j);
    return fsh_error_set(err, EINVAL, "worker %s: %s: an incremental reduce needs a scheduler: "
                         "send it in a \"task\" envelope", w->uri, a->type);
  }
  uint64_t id;
  FSH_RETURN_NOT_OK(fsh_worker_tasks_start(w->tasks, task_job_run, j, task_job_free, &id, err));
  return answer_task_id(w, id, out, err);
}

#define TASK_ENVELOPE_HEADER 16
#define TASK_MAX_KIND 64
#define TASK_MAX_TAG 4096

/* "task": the envelope (shuffle.h) around a map-synthetic / reduce-verify
 * body, with the scheduler's tag; on_task_done reports its end. */
static int action_task(fsh_shuffle_worker *w, const fsh_flight_action *a,
                       fsh_flight_result_list *out, fsh_error *err) {
  const uint8_t *p = a->body.data;
  int64_t size = a->body.size;
  if (size < TASK_ENVELOPE_HEADER || memcmp(p, "FSTE", 4) != 0 || p[4] != 1 || p[5] || p[6] ||
      p[7])
    return fsh_error_set(err, EINVAL, "worker %s: task: the body must start with FSTE, version 1 "
                         "(a %d-byte header; got %lld bytes)", w->uri, TASK_ENVELOPE_HEADER,
                         (long long)size);
  uint32_t kl = fsh_le_get32(p + 8), tl = fsh_le_get32(p + 12);
  if (kl < 1 || kl > TASK_MAX_KIND || tl > TASK_MAX_TAG ||
      (int64_t)kl + tl > size - TASK_ENVELOPE_HEADER)
    return fsh_error_set(err, EINVAL, "worker %s: task: kind of %u bytes (1 .. %d) and tag of %u "
                         "bytes (0 .. %d) do not fit in %lld bytes", w->uri, kl, TASK_MAX_KIND,
                         tl, TASK_MAX_TAG, (long long)size);
  char kind[TASK_MAX_KIND + 1];
  memcpy(kind, p + TASK_ENVELOPE_HEADER, kl);
  kind[kl] = '\0';
  if (strlen(kind) != kl)
    return fsh_error_set(err, EINVAL, "worker %s: task: the kind holds a NUL byte", w->uri);
  const uint8_t *tag = p + TASK_ENVELOPE_HEADER + kl, *body = tag + tl;
  task_job *j = NULL;
  FSH_RETURN_NOT_OK(decode_task(w, kind, body, size - (body - p), &j, err));
  if (!j->is_map && j->reduce.incremental) {
    if (!w->on_more_sources) {
      task_job_free(j);
      return fsh_error_set(err, EINVAL, "worker %s: task: an incremental reduce, but this worker "
                           "has no scheduler to ask for map outputs (no --driver)", w->uri);
    }
    if (tl && !(j->tag = fsh_malloc(tl))) {
      task_job_free(j);
      return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
    }
    if (tl) memcpy(j->tag, tag, tl);
    j->tag_size = tl;
  }
  uint64_t id;
  FSH_RETURN_NOT_OK(fsh_worker_tasks_start_tagged(w->tasks, task_job_run, j, task_job_free, tag,
                                                  tl, w->on_task_done, w->on_task_done_ctx, &id,
                                                  err));
  return answer_task_id(w, id, out, err);
}

/* "task-wait" body: the task id (u64 LE). Answers at once, one result: a
 * status byte 0 (still running) or 1 (done) followed, when done, by the
 * task's answer; a failed task's error is the action's error, or (it
 * reported outputs lost) status 2 and its failure (shuffle.h). */
static int action_task_wait(fsh_shuffle_worker *w, const fsh_flight_action *a,
                            fsh_flight_result_list *out, fsh_error *err) {
  if (a->body.size != 8)
    return fsh_error_set(err, EINVAL, "worker %s: task-wait: the body must be an 8-byte task id, "
                         "not %lld bytes", w->uri, (long long)a->body.size);
  uint64_t id = 0;
  for (int i = 0; i < 8; i++) id |= (uint64_t)a->body.data[i] << (8 * i);
  bool done;
  fsh_buffer *answer = NULL, *failure = NULL;
  FSH_RETURN_NOT_OK(fsh_worker_tasks_poll_failure(w->tasks, id, &done, &answer, &failure, err));
  if (failure) answer = failure; /* status 2: failed, with the outputs it found lost */
  int64_t n = done && answer ? answer->size : 0;
  uint8_t *msg = fsh_malloc((size_t)n + 1);
  int rc = msg ? 0 : fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  if (msg) {
    msg[0] = failure ? 2 : done ? 1 : 0;
    if (n) memcpy(msg + 1, answer->data, (size_t)n);
    if (fsh_flight_result_list_push(out, msg, n + 1) != 0)
      rc = fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  }
  fsh_free(msg);
  fsh_buffer_unref(answer);
  return rc;
}

/* "cancel", body: the tag of a "task" (the scheduler's TaskRef): asks the
 * running tasks with that tag to stop (they end with ECANCELED at their
 * next batch and report it like any failure). Answers one result, the
 * number of tasks asked, in decimal ("0": none runs with that tag -- not
 * an error: it may have just ended). */
static int action_cancel(fsh_shuffle_worker *w, const fsh_flight_action *a,
                         fsh_flight_result_list *out, fsh_error *err) {
  if (a->body.size < 1 || a->body.size > TASK_MAX_TAG)
    return fsh_error_set(err, EINVAL, "worker %s: cancel: the body must be a task's tag (1 .. %d "
                         "bytes), not %lld bytes", w->uri, TASK_MAX_TAG, (long long)a->body.size);
  int64_t n = 0;
  fsh_worker_tasks_cancel(w->tasks, a->body.data, a->body.size, &n);
  char msg[24];
  int len = snprintf(msg, sizeof msg, "%" PRId64, n);
  if (fsh_flight_result_list_push(out, msg, len) != 0)
    return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  return 0;
}

/* pooled_memfds (the key kept for its readers: bench shuffle, the python
 * tests) counts the pooled images of either kind, memfds and VM mappings. */
static int action_stats(fsh_shuffle_worker *w, fsh_flight_result_list *out, fsh_error *err) {
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(w->store, &st);
  fsh_store_pool_stats ps;
  fsh_store_get_pool_stats(w->store, &ps);
  char msg[256];
  int len = snprintf(msg, sizeof msg, "map_outputs=%" PRId64 " memory_bytes=%" PRId64
                     " spilled_outputs=%" PRId64 " spilled_bytes=%" PRId64 " pooled_memfds=%"
                     PRId64 " pooled_bytes=%" PRId64, st.map_outputs, st.memory_bytes,
                     st.spilled_outputs, st.spilled_bytes, ps.pooled, ps.pooled_bytes);
  if (fsh_flight_result_list_push(out, msg, len) != 0)
    return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  return 0;
}

static int do_action(void *ctx, fsh_flight_call *call, const fsh_flight_action *a,
                     fsh_flight_result_list *out, fsh_error *err) {
  (void)call;
  fsh_shuffle_worker *w = ctx;
  if (strcmp(a->type, "release") == 0) return action_release(w, a, out, err);
  if (strcmp(a->type, "map-synthetic") == 0) return action_start_task(w, a, out, err);
  if (strcmp(a->type, "reduce-verify") == 0) return action_start_task(w, a, out, err);
  if (strcmp(a->type, "reduce-then-map") == 0) return action_start_task(w, a, out, err);
  if (strcmp(a->type, FSH_MERGE_TASK_KIND) == 0) return action_start_task(w, a, out, err);
  if (strcmp(a->type, "task") == 0) return action_task(w, a, out, err);
  if (strcmp(a->type, "task-wait") == 0) return action_task_wait(w, a, out, err);
  if (strcmp(a->type, "stats") == 0) return action_stats(w, out, err);
  if (strcmp(a->type, "cancel") == 0) return action_cancel(w, a, out, err);
  for (int i = 0; i < w->n_kinds; i++)
    if (strcmp(a->type, w->kinds[i].name) == 0) return action_start_task(w, a, out, err);
  if (strcmp(a->type, "locate") == 0) /* same-host direct reads (worker_locate.c) */
    return fsh_worker_locate(w->store, a->body.data, a->body.size, out, err);
  return fsh_error_set(err, ENOTSUP, "worker %s: unknown action '%s' (known: release, "
                       "map-synthetic, reduce-verify, reduce-then-map, task, task-wait, stats, "
                       "cancel, locate, and the registered task kinds)", w->uri, a->type);
}

static int list_actions(void *ctx, fsh_flight_call *call, fsh_flight_action_type_list *out,
                        fsh_error *err) {
  (void)call;
  fsh_shuffle_worker *w = ctx;
  if (fsh_flight_action_type_list_push(out, "release",
                                       "remove a shuffle's map outputs (body: its id, decimal)") ||
      fsh_flight_action_type_list_push(out, "map-synthetic",
                                       "run a map task of the synthetic shuffle (shuffle.h)") ||
      fsh_flight_action_type_list_push(out, "reduce-verify",
                                       "run a reduce task of the synthetic shuffle (shuffle.h)") ||
      fsh_flight_action_type_list_push(out, "reduce-then-map",
                                       "read a partition and shuffle it again (shuffle.h)") ||
      fsh_flight_action_type_list_push(out, "task",
                                       "a tagged map-synthetic / reduce-verify task (shuffle.h)") ||
      fsh_flight_action_type_list_push(out, "task-wait",
                                       "whether a task is done (body: its id), and its answer") ||
      fsh_flight_action_type_list_push(out, "cancel",
                                       "stop the running tasks with that tag (body: the tag)") ||
      fsh_flight_action_type_list_push(out, "stats", "the store's figures, one line of text") ||
      fsh_flight_action_type_list_push(out, "locate",
                                       "where a ticket's blocks are, for same-host direct reads"))
    return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  for (int i = 0; i < w->n_kinds; i++)
    if (fsh_flight_action_type_list_push(out, w->kinds[i].name,
                                         "run a task of this registered kind (also in \"task\")"))
      return fsh_error_set(err, ENOMEM, "worker %s: out of memory", w->uri);
  return 0;
}

/* ---- lifecycle --------------------------------------------------------- */

/* grpc://host:port for the listen address; a wildcard host becomes this
 * machine's name (what peers can reach). */
static void make_uri(char *out, size_t size, const char *listen, int port) {
  char host[256] = "127.0.0.1";
  const char *colon = strrchr(listen, ':');
  size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
  if (n > 0 && n < sizeof host) {
    memcpy(host, listen, n);
    host[n] = '\0';
  }
  if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0 || strcmp(host, "") == 0) {
    if (gethostname(host, sizeof host) != 0) strcpy(host, "127.0.0.1");
    host[sizeof host - 1] = '\0';
  }
  snprintf(out, size, "grpc://%s:%d", host, port);
}

static void free_kinds(fsh_shuffle_worker *w) {
  for (int i = 0; i < w->n_kinds; i++) fsh_free((char *)w->kinds[i].name);
  fsh_free(w->kinds);
  w->kinds = NULL;
  w->n_kinds = 0;
}

int fsh_shuffle_worker_start(const fsh_shuffle_worker_options *opts, fsh_shuffle_worker **out,
                             fsh_error *err) {
  if (!opts || !opts->listen || !out)
    return fsh_error_set(err, EINVAL, "worker: no listen address");
  fsh_shuffle_worker *w = fsh_calloc(1, sizeof *w);
  if (!w) return fsh_error_set(err, ENOMEM, "worker: out of memory");
  w->on_task_done = opts->on_task_done;
  w->on_task_done_ctx = opts->on_task_done_ctx;
  w->on_more_sources = opts->on_more_sources;
  w->on_more_sources_ctx = opts->on_more_sources_ctx;
  if (!(w->hub = incr_hub_new())) {
    fsh_free(w);
    return fsh_error_set(err, ENOMEM, "worker: out of memory");
  }
  if (opts->n_task_kinds < 0 || (opts->n_task_kinds > 0 && !opts->task_kinds)) {
    incr_hub_free(w->hub);
    fsh_free(w);
    return fsh_error_set(err, EINVAL, "worker: %d task kinds", opts->n_task_kinds);
  }
  for (int i = 0; i < opts->n_task_kinds; i++) {
    const fsh_worker_task_kind *k = &opts->task_kinds[i];
    size_t len = k->name ? strlen(k->name) : 0;
    if (len < 1 || len > TASK_MAX_KIND || !k->decode || !k->run) {
      incr_hub_free(w->hub);
      fsh_free(w);
      return fsh_error_set(err, EINVAL, "worker: task kind %d needs a name of 1 .. %d bytes, "
                           "decode and run", i, TASK_MAX_KIND);
    }
  }
  if (opts->n_task_kinds > 0) {
    w->kinds = fsh_calloc((size_t)opts->n_task_kinds, sizeof *w->kinds);
    for (int i = 0; w->kinds && i < opts->n_task_kinds; i++) {
      w->kinds[i] = opts->task_kinds[i];
      if (!(w->kinds[i].name = fsh_strdup(opts->task_kinds[i].name))) {
        for (int k = 0; k < i; k++) fsh_free((char *)w->kinds[k].name);
        fsh_free(w->kinds);
        w->kinds = NULL;
      }
    }
    if (!w->kinds) {
      incr_hub_free(w->hub);
      fsh_free(w);
      return fsh_error_set(err, ENOMEM, "worker: out of memory");
    }
    w->n_kinds = opts->n_task_kinds;
  }
  if (fsh_worker_tasks_new(&w->tasks) != 0) {
    free_kinds(w);
    incr_hub_free(w->hub);
    fsh_free(w);
    return fsh_error_set(err, ENOMEM, "worker: out of memory");
  }
  fsh_shuffle_store_options so = {.spill_dirs = opts->spill_dirs,
                                  .n_spill_dirs = opts->n_spill_dirs,
                                  .memory_limit = opts->memory_limit,
                                  .name = opts->listen, .images = opts->images};
  int rc = fsh_shuffle_store_new(&so, &w->store, err);
  if (rc != 0) {
    fsh_worker_tasks_free(w->tasks);
    free_kinds(w);
    incr_hub_free(w->hub);
    fsh_free(w);
    return fsh_error_prefix(err, rc, "worker %s: ", opts->listen);
  }
  fsh_flight_handlers h = {.ctx = w, .list_flights = list_flights, .do_get = do_get,
                           .do_put = do_put, .do_action = do_action,
                           .list_actions = list_actions};
  fsh_flight_server_options fo = {.listen = opts->listen, .n_threads = opts->n_threads,
                                  .auth_token = opts->auth_token};
  rc = fsh_flight_server_start(&fo, &h, &w->server, err);
  if (rc == 0) {
    make_uri(w->uri, sizeof w->uri, opts->listen, fsh_flight_server_port(w->server));
    /* Nothing is stored yet: the store's name can still change. */
    if (fsh_store_set_name(w->store, w->uri) != 0)
      rc = fsh_error_set(err, ENOMEM, "worker: out of memory");
  }
  /* The tasks' backends: calls are already being served, but no task
   * runs before the "listening" line tells callers the URI. */
  fsh_shuffle_flight_options fl = {.local = w, .auth_token = opts->auth_token,
                                   .no_direct_reads = opts->no_direct_reads};
  if (rc == 0) rc = fsh_shuffle_flight_new(&fl, &w->flight, err);
  if (rc == 0 && keeper_start(w) != 0)
    rc = fsh_error_set(err, ENOMEM, "worker %s: starting its keeper thread: out of resources",
                       w->uri);
  if (rc == 0 && opts->fs_dir && (rc = fsh_shuffle_fs_new(opts->fs_dir, &w->fs, err)) != 0)
    rc = fsh_error_prefix(err, rc, "worker %s: --fs-dir: ", w->uri);
  if (rc != 0) {
    fsh_shuffle_worker_stop(w, 0);
    return rc;
  }
  *out = w;
  return 0;
}

const char *fsh_shuffle_worker_uri(const fsh_shuffle_worker *w) { return w->uri; }
fsh_shuffle_store *fsh_shuffle_worker_store(fsh_shuffle_worker *w) { return w->store; }

void fsh_shuffle_worker_stop(fsh_shuffle_worker *w, int64_t deadline_ms) {
  if (!w) return;
  if (w->server) fsh_flight_server_stop(w->server, deadline_ms);
  keeper_stop(w); /* before the store and the tasks it asks */
  fsh_worker_tasks_free(w->tasks); /* before the backends the tasks use */
  fsh_shuffle_backend_destroy(w->flight);
  fsh_shuffle_backend_destroy(w->fs);
  fsh_shuffle_store_free(w->store);
  free_kinds(w);
  incr_hub_free(w->hub); /* after the tasks that used it */
  fsh_free(w);
}
