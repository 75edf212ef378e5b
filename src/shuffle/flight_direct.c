/* flight_direct.c -- the flight reader's same-host side: asks a peer
 * worker where the map outputs a fetch job wants are ("locate", format in
 * shuffle_internal.h) and, when the peer runs on this host, opens them
 * directly: a spill file by its plain name inside a spill directory the
 * worker declared, a memory image's memfd through /proc/<pid>/fd/<fd>, or
 * a VM image's bytes copied out of the worker's memory with
 * process_vm_readv (fr_direct_vm_read, below: checked by its identity
 * trailer before and after the copy).
 * Every open is checked to be the very file the worker answered (device,
 * inode and size; for a memfd also its identity trailer, shuffle_internal.h:
 * the map output asked for, and the image id answered, since the store
 * reuses released memfds): a file released, evicted or replaced meanwhile
 * (an fd number reused, a memfd reused for another image) is not read --
 * the caller fetches that map output with DoGet instead, which says what
 * became of it (a released one: "lost map outputs", flight_fetch.c). The blocks read are
 * verified like DoGet's (flight_fetch.c), so a damaged file is an error,
 * never wrong rows. */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shuffle/flight_reader.h"

void (*fr_test_after_locate)(void *ctx);
void *fr_test_after_locate_ctx;

void fr_direct_reset(fr_direct *d) {
  fsh_locate_answer_reset(&d->a);
  fsh_flight_result_list_reset(&d->res);
  memset(d, 0, sizeof *d);
}

int fr_direct_locate(fr_reader *r, const fr_job *job, fr_direct *d, bool *ok, fsh_error *err) {
  *ok = false;
  memset(d, 0, sizeof *d);
  int same = fb_same_host(r->st, job->uri, 0);
  if (same < 0) return 0; /* known to run elsewhere */
  fsh_flight_client *client = NULL;
  FSH_RETURN_NOT_OK(fb_client(r->st, job->uri, &client, err));
  /* the job's sources (r->count slots each) and the run: one entry comes
   * back per slot */
  int64_t g = r->count, n_src = job->n_slots / g;
  fsh_shuffle_ticket t = {.shuffle_id = r->shuffle_id, .partition = r->partition,
                          .n_partitions_read = r->count, .n_sources = n_src};
  t.sources = fsh_malloc(sizeof *t.sources * (size_t)(n_src > 0 ? n_src : 1));
  if (!t.sources) return fsh_error_set(err, ENOMEM, "flight shuffle: out of memory");
  for (int64_t i = 0; i < n_src; i++)
    t.sources[i] = (fsh_ticket_source){r->slots[job->slots[i * g]].map_id,
                                       r->slots[job->slots[i * g]].attempt};
  fsh_buffer *tb = NULL;
  int rc = fsh_shuffle_ticket_encode(&t, &tb, err);
  fsh_shuffle_ticket_reset(&t);
  if (rc != 0) return rc;
  fsh_flight_action a = {.type = (char *)"locate", .body = {tb->data, tb->size}};
  fsh_error e = {{0}};
  atomic_fetch_add(&fb_stats_of(r->st)->locates, 1);
  rc = fsh_flight_do_action(client, &a, &d->res, &e);
  fsh_buffer_unref(tb);
  if (rc == ENOMEM) return fsh_error_set(err, ENOMEM, "%s", e.message);
  if (rc != 0 || d->res.n != 1 ||
      fsh_locate_answer_decode(d->res.items[0].data, d->res.items[0].size, job->n_slots, &d->a,
                               &e) != 0) {
    /* a worker without the action (or one that cannot answer): DoGet
     * it all, which reports any real trouble */
    fr_direct_reset(d);
    return 0;
  }
  const char *me = fsh_host_identity();
  bool here = d->a.host_len == (int64_t)strlen(me) &&
              memcmp(d->a.host, me, (size_t)d->a.host_len) == 0;
  fb_same_host(r->st, job->uri, here ? 1 : -1);
  if (!here) {
    fr_direct_reset(d);
    return 0;
  }
  for (int64_t i = 0; i < job->n_slots; i++) {
    fsh_locate_source *src = &d->a.sources[i];
    src->want_shuffle_id = r->shuffle_id;
    src->want_map_id = r->slots[job->slots[i]].map_id;
    src->want_attempt = r->slots[job->slots[i]].attempt;
  }
  *ok = true;
  if (fr_test_after_locate) fr_test_after_locate(fr_test_after_locate_ctx);
  return 0;
}

/* Whether the memfd open as fd (a fresh open of it: the store pools a
 * memfd only while nobody else has it open, store.c) holds the very image
 * located: its identity trailer names the map output asked for and the
 * image id answered. A reused memfd's trailer (or none, while it is
 * pooled or rewritten) is not it. */
static bool image_is(int fd, const fsh_locate_source *s) {
  uint8_t want[FSH_IMAGE_ID_BYTES], got[FSH_IMAGE_ID_BYTES];
  fsh_image_id_encode(want, s->want_shuffle_id, s->want_map_id, s->want_attempt, s->image_id,
                      s->size);
  ssize_t n;
  do n = pread(fd, got, sizeof got, s->size);
  while (n < 0 && errno == EINTR);
  return s->image_id != 0 && n == (ssize_t)sizeof got && memcmp(got, want, sizeof got) == 0;
}

int fr_direct_open(const fr_direct *d, int64_t i, char *path, size_t path_size) {
  const fsh_locate_source *s = &d->a.sources[i];
  if (s->kind == FSH_STORE_AT_FILE) {
    snprintf(path, path_size, "%s/%s", d->a.dirs[s->dir_or_fd], s->name);
  } else if (s->kind == FSH_STORE_AT_MEMFD) {
    snprintf(path, path_size, "/proc/%" PRIu32 "/fd/%" PRId32, d->a.pid, s->dir_or_fd);
  } else {
    return -1;
  }
  /* O_NONBLOCK|O_NOCTTY: an fd number reused for a pipe or a terminal
   * must not block or become ours; O_NOFOLLOW: a spill file is never a
   * symbolic link (a /proc fd link is one, by nature) */
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (s->kind == FSH_STORE_AT_FILE) flags |= O_NOFOLLOW;
  int fd = open(path, flags);
  if (fd < 0) return errno == EACCES || errno == EPERM ? -2 : -1;
  struct stat st;
  int64_t want = s->size + (s->kind == FSH_STORE_AT_MEMFD ? FSH_IMAGE_ID_BYTES : 0);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != s->dev ||
      (uint64_t)st.st_ino != s->ino || (int64_t)st.st_size != want ||
      (s->kind == FSH_STORE_AT_MEMFD && !image_is(fd, s))) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- VM images: process_vm_readv ---------------------------------------
 *
 * The spans read are copies the reader owns, and the batches decoded are
 * slices of them (no further copy), so a span lives until its batches are
 * consumed: a reducer holds up to its bytes-in-flight bound of them (64
 * MiB by default; ~64 spans of a 64 x 64 4 GiB shuffle). Large spans come
 * from a process-wide pool of mappings (4 KiB pages: fresh huge pages cost
 * 3x more than fresh small ones on a host that takes freed memory back,
 * PROFILE_VM.md; not inherited by a fork) large enough for that working
 * set, so that they are not page-faulted afresh for every source -- a
 * fresh anonymous mapping per span pays the kernel's zeroing of every
 * page, more CPU than the copy itself. A mapping goes back to the pool
 * when its last slice is released; fr_spans_drop empties it (the worker's
 * keeper, when it drops its other idle caches). */

int (*fr_test_vm_errno)(void);
void (*fr_test_after_vm_data)(void *ctx);
void *fr_test_after_vm_data_ctx;

#define SPAN_POOL_MIN ((int64_t)256 << 10) /* smaller spans: fsh_buffer_new */
#define SPAN_POOL_MAX 256
#define SPAN_POOL_BYTES ((int64_t)512 << 20)
#define SPAN_GRAIN ((int64_t)64 << 10) /* mappings are whole 64 KiB */

typedef struct span_map {
  void *p;
  size_t len;
} span_map;

static struct {
  pthread_mutex_t mu;
  int n;
  int64_t bytes;
  span_map m[SPAN_POOL_MAX];
  atomic_llong maps, reused; /* made, taken from the pool */
} g_spans = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void span_release(void *ctx) {
  span_map *s = ctx;
  pthread_mutex_lock(&g_spans.mu);
  bool kept = g_spans.n < SPAN_POOL_MAX && g_spans.bytes + (int64_t)s->len <= SPAN_POOL_BYTES;
  if (kept) {
    g_spans.m[g_spans.n++] = *s;
    g_spans.bytes += (int64_t)s->len;
  }
  pthread_mutex_unlock(&g_spans.mu);
  if (!kept) munmap(s->p, s->len);
  fsh_free(s);
}

void fr_spans_drop(void) {
  span_map m[SPAN_POOL_MAX];
  pthread_mutex_lock(&g_spans.mu);
  int n = g_spans.n;
  memcpy(m, g_spans.m, sizeof m[0] * (size_t)n);
  g_spans.n = 0;
  g_spans.bytes = 0;
  pthread_mutex_unlock(&g_spans.mu);
  for (int i = 0; i < n; i++) munmap(m[i].p, m[i].len);
}

void fr_spans_stats(int64_t *maps, int64_t *reused, int64_t *pooled_bytes) {
  pthread_mutex_lock(&g_spans.mu);
  *pooled_bytes = g_spans.bytes;
  pthread_mutex_unlock(&g_spans.mu);
  *maps = atomic_load(&g_spans.maps);
  *reused = atomic_load(&g_spans.reused);
}

fsh_buffer *fr_span_take(int64_t n) {
  if (n < SPAN_POOL_MIN) return fsh_buffer_new(n, false);
  span_map *s = fsh_malloc(sizeof *s);
  if (!s) return NULL;
  int pick = -1;
  pthread_mutex_lock(&g_spans.mu);
  for (int i = 0; i < g_spans.n; i++)
    if ((int64_t)g_spans.m[i].len >= n && (int64_t)g_spans.m[i].len <= 2 * n + SPAN_GRAIN &&
        (pick < 0 || g_spans.m[i].len < g_spans.m[pick].len))
      pick = i;
  if (pick >= 0) {
    *s = g_spans.m[pick];
    g_spans.m[pick] = g_spans.m[--g_spans.n];
    g_spans.bytes -= (int64_t)s->len;
  }
  pthread_mutex_unlock(&g_spans.mu);
  if (pick >= 0) {
    atomic_fetch_add(&g_spans.reused, 1);
  } else {
    int64_t len = (n + SPAN_GRAIN - 1) / SPAN_GRAIN * SPAN_GRAIN;
    void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      fsh_free(s);
      return NULL;
    }
    (void)madvise(p, (size_t)len, MADV_DONTFORK);
    *s = (span_map){p, (size_t)len};
    atomic_fetch_add(&g_spans.maps, 1);
  }
  fsh_buffer *b = fsh_buffer_wrap(s->p, n, span_release, s);
  if (!b) span_release(s);
  return b;
}

/* Copies n bytes at addr of process pid into buf: 0, or an errno (a
 * short copy -- the image unmapped meanwhile -- is EFAULT). */
static int vm_copy(uint32_t pid, uint64_t addr, void *buf, int64_t n) {
  if (fr_test_vm_errno) {
    int e = fr_test_vm_errno();
    if (e) return e;
  }
  int64_t done = 0;
  while (done < n) {
    struct iovec l = {(uint8_t *)buf + done, (size_t)(n - done)};
    struct iovec r = {(void *)(uintptr_t)(addr + (uint64_t)done), (size_t)(n - done)};
    ssize_t k = process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return EFAULT;
    done += k;
  }
  return 0;
}

/* Whether the identity trailer of VM entry s, copied now, names the
 * image located (0), or an errno of the copy, or -1 (another one). */
static int vm_trailer_is(uint32_t pid, const fsh_locate_source *s) {
  uint8_t want[FSH_IMAGE_ID_BYTES], got[FSH_IMAGE_ID_BYTES];
  fsh_image_id_encode(want, s->want_shuffle_id, s->want_map_id, s->want_attempt, s->image_id,
                      s->size);
  int e = vm_copy(pid, s->addr + (uint64_t)s->size, got, sizeof got);
  if (e) return e;
  return memcmp(got, want, sizeof got) == 0 ? 0 : -1;
}

int fr_direct_vm_read(const fr_direct *d, int64_t k, int64_t g, fsh_buffer **span,
                      int64_t *span_lo, char *path, size_t path_size) {
  *span = NULL;
  *span_lo = 0;
  const fsh_locate_source *s0 = &d->a.sources[k];
  snprintf(path, path_size, "the memory image at 0x%" PRIx64 " of process %" PRIu32, s0->addr,
           d->a.pid);
  int64_t a = INT64_MAX, b = 0;
  for (int64_t i = k; i < k + g; i++) {
    const fsh_locate_source *s = &d->a.sources[i];
    if (s->kind != FSH_STORE_AT_VM || s->addr != s0->addr || s->size != s0->size ||
        s->image_id != s0->image_id || s->image_id == 0)
      return -1;
    for (int64_t j = 0; j < s->n_blocks; j++) {
      const uint8_t *q = s->blocks + 32 * j;
      int64_t off = (int64_t)fsh_le_get64(q), len = (int64_t)fsh_le_get64(q + 8);
      if (off < 0 || len <= 0 || len > s->size || off > s->size - len) return -1;
      if (off < a) a = off;
      if (off + len > b) b = off + len;
    }
  }
  int e = vm_trailer_is(d->a.pid, s0);
  if (e == EPERM) return -2;
  if (e) return -1;
  fsh_buffer *buf = NULL;
  if (b > a) { /* (no blocks: only the trailer says the entries hold) */
    if (!(buf = fr_span_take(b - a))) return -1;
    e = vm_copy(d->a.pid, s0->addr + (uint64_t)a, buf->data, b - a);
    if (e == 0 && fr_test_after_vm_data) fr_test_after_vm_data(fr_test_after_vm_data_ctx);
    /* the trailer again: the bytes copied are the image's only if it still
     * names it (the store clears the id before reusing or unmapping) */
    if (e == 0) e = vm_trailer_is(d->a.pid, s0);
  }
  if (e) {
    fsh_buffer_unref(buf);
    return e == EPERM ? -2 : -1;
  }
  *span = buf;
  *span_lo = b > a ? a : 0;
  return 0;
}
