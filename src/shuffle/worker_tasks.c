/* worker_tasks.c -- the tasks a worker runs, each on a thread of its own.
 *
 * A task (a map or a reduce) waits on the network: a reduce fetches from
 * peers. It must never run on a Flight server pool thread, whose callbacks
 * may not block (flight.h): a call queued behind a blocked pool thread --
 * say a peer's DoGet that the task itself is waiting for -- would never be
 * served, and two workers reducing from each other deadlock. So the task
 * actions only start a task and answer its id at once; "task-wait" answers
 * at once too: running, or the task's result (or its error). A tagged task
 * (the "task" action) reports its end through a hook on its own thread;
 * once delivered it is only kept until a later start (or free) joins it.
 * A task also collects the map outputs its readers found lost
 * (fsh_worker_task_report_lost, on its thread), for that hook. */
#include "shuffle/worker_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct worker_task {
  uint64_t id;
  fsh_worker_task_fn fn;
  void *arg;
  void (*free_arg)(void *arg);
  pthread_t thread;
  bool done;
  int rc;
  fsh_error err;
  fsh_buffer *answer;
  uint8_t *tag; /* owned; tagged tasks only */
  int64_t tag_size;
  fsh_worker_task_done_fn done_fn;
  void *done_ctx;
  bool delivered; /* done_fn took the outcome: nobody polls it */
  atomic_bool cancelled; /* fsh_worker_tasks_cancel asked it to stop */
  fsh_lost_output *lost; /* [n_lost] owned: what it reported lost (its thread only) */
  int64_t n_lost, cap_lost;
  struct worker_task *next;
  struct fsh_worker_tasks *owner;
} worker_task;

struct fsh_worker_tasks {
  pthread_mutex_t mu;
  uint64_t next_id;
  worker_task *head;
};

int fsh_worker_tasks_new(fsh_worker_tasks **out) {
  fsh_worker_tasks *t = fsh_calloc(1, sizeof *t);
  if (!t) return ENOMEM;
  pthread_mutex_init(&t->mu, NULL);
  t->next_id = 1;
  *out = t;
  return 0;
}

static void task_free(worker_task *k) {
  if (k->free_arg) k->free_arg(k->arg);
  for (int64_t i = 0; i < k->n_lost; i++) fsh_free(k->lost[i].uri);
  fsh_free(k->lost);
  fsh_buffer_unref(k->answer);
  fsh_free(k->tag);
  fsh_free(k);
}

void fsh_worker_tasks_free(fsh_worker_tasks *t) {
  if (!t) return;
  /* Every task ends by itself (its fetches have deadlines): join them all. */
  for (worker_task *k = t->head, *next; k; k = next) {
    next = k->next;
    pthread_join(k->thread, NULL);
    task_free(k);
  }
  pthread_mutex_destroy(&t->mu);
  fsh_free(t);
}

/* The task this thread runs (task threads only). */
static _Thread_local worker_task *current_task;

bool fsh_worker_task_cancelled(void) {
  return current_task && atomic_load(&current_task->cancelled);
}

const atomic_bool *fsh_worker_task_cancel_flag(void) {
  return current_task ? &current_task->cancelled : NULL;
}

void fsh_worker_task_report_lost(const char *uri, uint64_t shuffle_id, int64_t map_id,
                                 int32_t attempt, bool unreachable) {
  worker_task *k = current_task;
  if (!k) return;
  if (!uri) uri = "";
  for (int64_t i = 0; i < k->n_lost; i++) {
    fsh_lost_output *x = &k->lost[i];
    if (x->shuffle_id == shuffle_id && x->map_id == map_id && x->attempt == attempt &&
        strcmp(x->uri, uri) == 0) {
      x->unreachable |= unreachable;
      return;
    }
  }
  if (k->n_lost == FSH_WORKER_TASK_MAX_LOST) return;
  if (k->n_lost == k->cap_lost) {
    int64_t cap = k->cap_lost ? 2 * k->cap_lost : 8;
    fsh_lost_output *l = fsh_realloc(k->lost, (size_t)cap * sizeof *l);
    if (!l) return;
    k->lost = l;
    k->cap_lost = cap;
  }
  char *u = fsh_strdup(uri);
  if (!u) return;
  k->lost[k->n_lost++] = (fsh_lost_output){.uri = u, .shuffle_id = shuffle_id, .map_id = map_id,
                                           .attempt = attempt, .unreachable = unreachable};
}

int64_t fsh_worker_task_lost(const fsh_lost_output **out) {
  *out = current_task ? current_task->lost : NULL;
  return current_task ? current_task->n_lost : 0;
}

void fsh_worker_tasks_cancel(fsh_worker_tasks *t, const uint8_t *tag, int64_t tag_size,
                             int64_t *n) {
  *n = 0;
  if (tag_size <= 0) return;
  pthread_mutex_lock(&t->mu);
  for (worker_task *k = t->head; k; k = k->next)
    if (!k->done && k->tag_size == tag_size && memcmp(k->tag, tag, (size_t)tag_size) == 0) {
      atomic_store(&k->cancelled, true);
      (*n)++;
    }
  pthread_mutex_unlock(&t->mu);
}

static void *task_main(void *p) {
  worker_task *k = p;
  fsh_error err = {{0}};
  fsh_buffer *answer = NULL;
  current_task = k;
  int rc = k->fn(k->arg, &answer, &err);
  bool delivered = false;
  if (k->done_fn)
    delivered = k->done_fn(k->done_ctx, k->tag, k->tag_size, rc, rc ? err.message : NULL,
                           rc == 0 && answer ? answer->data : NULL,
                           rc == 0 && answer ? answer->size : 0);
  pthread_mutex_lock(&k->owner->mu);
  k->delivered = delivered;
  k->rc = rc;
  k->err = err;
  k->answer = rc == 0 && !delivered ? answer : NULL;
  k->done = true;
  pthread_mutex_unlock(&k->owner->mu);
  if (rc != 0 || delivered) fsh_buffer_unref(answer);
  return NULL;
}

int64_t fsh_worker_tasks_running(fsh_worker_tasks *t) {
  int64_t n = 0;
  pthread_mutex_lock(&t->mu);
  for (worker_task *k = t->head; k; k = k->next) n += !k->done;
  pthread_mutex_unlock(&t->mu);
  return n;
}

/* Unlinks the finished, delivered tasks; mu held. Returns them as a list. */
static worker_task *take_delivered(fsh_worker_tasks *t) {
  worker_task *gone = NULL;
  for (worker_task **at = &t->head; *at;) {
    worker_task *k = *at;
    if (k->done && k->delivered) {
      *at = k->next;
      k->next = gone;
      gone = k;
    } else {
      at = &k->next;
    }
  }
  return gone;
}

int fsh_worker_tasks_start(fsh_worker_tasks *t, fsh_worker_task_fn fn, void *arg,
                           void (*free_arg)(void *arg), uint64_t *id, fsh_error *err) {
  return fsh_worker_tasks_start_tagged(t, fn, arg, free_arg, NULL, 0, NULL, NULL, id, err);
}

int fsh_worker_tasks_start_tagged(fsh_worker_tasks *t, fsh_worker_task_fn fn, void *arg,
                                  void (*free_arg)(void *arg), const uint8_t *tag,
                                  int64_t tag_size, fsh_worker_task_done_fn done_fn,
                                  void *done_ctx, uint64_t *id, fsh_error *err) {
  worker_task *k = fsh_calloc(1, sizeof *k);
  if (k && tag_size > 0 && (k->tag = fsh_malloc((size_t)tag_size)) == NULL) {
    fsh_free(k);
    k = NULL;
  }
  if (!k) {
    if (free_arg) free_arg(arg);
    return fsh_error_set(err, ENOMEM, "out of memory starting a task");
  }
  if (tag_size > 0) memcpy(k->tag, tag, (size_t)tag_size);
  k->tag_size = tag_size;
  k->done_fn = done_fn;
  k->done_ctx = done_ctx;
  k->fn = fn;
  k->arg = arg;
  k->free_arg = free_arg;
  k->owner = t;
  pthread_mutex_lock(&t->mu);
  worker_task *gone = take_delivered(t);
  k->id = t->next_id++;
  int e = pthread_create(&k->thread, NULL, task_main, k);
  if (e == 0) {
    k->next = t->head;
    t->head = k;
    *id = k->id;
  }
  pthread_mutex_unlock(&t->mu);
  for (worker_task *g = gone, *next; g; g = next) {
    next = g->next;
    pthread_join(g->thread, NULL);
    task_free(g);
  }
  if (e != 0) {
    task_free(k);
    return fsh_error_set(err, EAGAIN, "cannot start a task thread: %s", strerror(e));
  }
  return 0;
}

#define FAILURE_MAGIC "FSTF"
#define FAILURE_MAX_MESSAGE 4096

/* A failed task's error and lost outputs as the "task-wait" failure body
 * (shuffle.h); NULL out of memory. */
static fsh_buffer *failure_encode(int rc, const fsh_error *e, const fsh_lost_output *lost,
                                  int64_t n) {
  const char *msg = e->message;
  size_t ml = strnlen(msg, sizeof e->message < FAILURE_MAX_MESSAGE ? sizeof e->message
                                                                   : FAILURE_MAX_MESSAGE);
  int64_t size = 16 + (int64_t)ml + 4;
  for (int64_t i = 0; i < n; i++) size += 28 + (int64_t)strlen(lost[i].uri);
  fsh_buffer *b = fsh_buffer_new(size, true);
  if (!b) return NULL;
  uint8_t *p = b->data;
  memcpy(p, FAILURE_MAGIC, 4);
  p[4] = 1;
  fsh_le_put32(p + 8, (uint32_t)rc);
  fsh_le_put32(p + 12, (uint32_t)ml);
  memcpy(p + 16, msg, ml);
  p += 16 + ml;
  fsh_le_put32(p, (uint32_t)n);
  p += 4;
  for (int64_t i = 0; i < n; i++) {
    uint32_t ul = (uint32_t)strlen(lost[i].uri);
    fsh_le_put64(p, lost[i].shuffle_id);
    fsh_le_put64(p + 8, (uint64_t)lost[i].map_id);
    fsh_le_put32(p + 16, (uint32_t)lost[i].attempt);
    p[20] = lost[i].unreachable ? 1 : 0;
    fsh_le_put32(p + 24, ul);
    memcpy(p + 28, lost[i].uri, ul);
    p += 28 + ul;
  }
  return b;
}

void fsh_lost_outputs_free(fsh_lost_output *lost, int64_t n) {
  for (int64_t i = 0; lost && i < n; i++) fsh_free(lost[i].uri);
  fsh_free(lost);
}

int fsh_task_failure_decode(const uint8_t *data, int64_t size, const char *self_uri,
                            int *rc, fsh_error *message, fsh_lost_output **lost,
                            int64_t *n_lost, fsh_error *err) {
  *lost = NULL;
  *n_lost = 0;
  const uint8_t *p = data, *end = data + size;
  if (size < 20 || memcmp(p, FAILURE_MAGIC, 4) != 0 || p[4] != 1)
    return fsh_error_set(err, EINVAL, "task failure: not a failure body (%lld bytes)",
                         (long long)size);
  uint32_t ml = fsh_le_get32(p + 12);
  if (ml > FAILURE_MAX_MESSAGE || (int64_t)ml > size - 20)
    return fsh_error_set(err, EINVAL, "task failure: a message of %u bytes in %lld", ml,
                         (long long)size);
  *rc = (int)fsh_le_get32(p + 8);
  fsh_error_set(message, *rc, "%.*s", (int)ml, (const char *)p + 16);
  p += 16 + ml;
  uint32_t n = fsh_le_get32(p);
  p += 4;
  if (n > FSH_WORKER_TASK_MAX_LOST || (int64_t)n * 28 > end - p)
    return fsh_error_set(err, EINVAL, "task failure: %u lost outputs in %lld bytes", n,
                         (long long)(end - p));
  fsh_lost_output *l = n ? fsh_calloc(n, sizeof *l) : NULL;
  if (n && !l) return fsh_error_set(err, ENOMEM, "task failure: out of memory");
  int r = 0;
  for (uint32_t i = 0; r == 0 && i < n; i++) {
    uint32_t ul = end - p >= 28 ? fsh_le_get32(p + 24) : 0;
    if (end - p < 28 || (int64_t)ul > end - p - 28 || ul > 4096) {
      r = fsh_error_set(err, EINVAL, "task failure: lost output %u is cut off", i);
      break;
    }
    const char *u = ul ? (const char *)p + 28 : self_uri ? self_uri : "";
    size_t len = ul ? ul : strlen(u);
    if (!(l[i].uri = fsh_malloc(len + 1))) {
      r = fsh_error_set(err, ENOMEM, "task failure: out of memory");
      break;
    }
    memcpy(l[i].uri, u, len);
    l[i].uri[len] = '\0';
    l[i].shuffle_id = fsh_le_get64(p);
    l[i].map_id = (int64_t)fsh_le_get64(p + 8);
    l[i].attempt = (int32_t)fsh_le_get32(p + 16);
    l[i].unreachable = p[20] != 0;
    p += 28 + ul;
  }
  if (r == 0 && p != end) r = fsh_error_set(err, EINVAL, "task failure: %lld bytes left over",
                                            (long long)(end - p));
  if (r != 0) {
    fsh_lost_outputs_free(l, n);
    return r;
  }
  *lost = l;
  *n_lost = n;
  return 0;
}

int fsh_worker_tasks_poll(fsh_worker_tasks *t, uint64_t id, bool *done, fsh_buffer **answer,
                          fsh_error *err) {
  return fsh_worker_tasks_poll_failure(t, id, done, answer, NULL, err);
}

int fsh_worker_tasks_poll_failure(fsh_worker_tasks *t, uint64_t id, bool *done,
                                  fsh_buffer **answer, fsh_buffer **failure, fsh_error *err) {
  *done = false;
  *answer = NULL;
  if (failure) *failure = NULL;
  pthread_mutex_lock(&t->mu);
  worker_task **at = &t->head;
  while (*at && ((*at)->id != id || (*at)->delivered)) at = &(*at)->next;
  worker_task *k = *at;
  if (!k) {
    pthread_mutex_unlock(&t->mu);
    return fsh_error_set(err, ENOENT, "no task %llu (unknown, or its result was taken already)",
                         (unsigned long long)id);
  }
  if (!k->done) {
    pthread_mutex_unlock(&t->mu);
    return 0;
  }
  *at = k->next; /* a finished task is answered once, then forgotten */
  pthread_mutex_unlock(&t->mu);
  pthread_join(k->thread, NULL);
  *done = true;
  int rc = k->rc;
  if (rc == 0) {
    *answer = k->answer;
    k->answer = NULL;
  } else if (failure && k->n_lost > 0 &&
             (*failure = failure_encode(rc, &k->err, k->lost, k->n_lost)) != NULL) {
    rc = 0; /* the failure is the answer (out of memory: the plain error) */
  } else if (err) {
    *err = k->err;
  }
  task_free(k);
  return rc;
}
