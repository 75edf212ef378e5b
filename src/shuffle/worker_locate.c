/* worker_locate.c -- the same-host direct-read handshake (format in
 * shuffle_internal.h): the worker's "locate" action, which says where a
 * ticket's map outputs' blocks of one partition (or of each partition of
 * the ticket's run) are (a spill file in one
 * of its spill directories, a memory image's memfd, or a VM image's
 * address in the worker's memory) so that a reader
 * on the same host reads them without a DoGet; the answer's decoder for
 * that reader (flight_direct.c); and this host's identity, which both
 * sides compare. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shuffle/shuffle_internal.h"

/* ---- host identity ----------------------------------------------------- */

static char g_host_id[512];
static pthread_once_t g_host_once = PTHREAD_ONCE_INIT;

static void read_line(const char *path, char *out, size_t n) {
  out[0] = '\0';
  FILE *f = fopen(path, "re");
  if (!f) return;
  if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = '\0';
  fclose(f);
}

static void link_target(const char *path, char *out, size_t n) {
  ssize_t k = readlink(path, out, n - 1);
  out[k > 0 ? k : 0] = '\0';
}

static void compute_host_id(void) {
  char boot[64], host[256], pidns[64], mntns[64];
  read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  if (gethostname(host, sizeof host) != 0) host[0] = '\0';
  host[sizeof host - 1] = '\0';
  link_target("/proc/self/ns/pid", pidns, sizeof pidns);
  link_target("/proc/self/ns/mnt", mntns, sizeof mntns);
  /* without a boot id nothing says two processes share a machine: an
   * identity no other process can equal (its pid and address) */
  if (!boot[0])
    snprintf(boot, sizeof boot, "no-boot-id-%ld-%p", (long)getpid(), (void *)&g_host_id);
  snprintf(g_host_id, sizeof g_host_id, "boot=%s host=%s %s %s", boot, host, pidns, mntns);
}

const char *fsh_host_identity(void) {
  pthread_once(&g_host_once, compute_host_id);
  return g_host_id;
}

/* ---- the answer -------------------------------------------------------- */

typedef struct out_buf {
  uint8_t *p;
  int64_t n, cap;
  bool oom;
} out_buf;

static uint8_t *reserve(out_buf *b, int64_t k) {
  if (b->oom) return NULL;
  if (b->n + k > b->cap) {
    int64_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + k) cap *= 2;
    uint8_t *q = fsh_realloc(b->p, (size_t)cap);
    if (!q) {
      b->oom = true;
      return NULL;
    }
    b->p = q;
    b->cap = cap;
  }
  uint8_t *at = b->p + b->n;
  b->n += k;
  return at;
}

static void put_bytes(out_buf *b, const void *data, int64_t k) {
  uint8_t *at = reserve(b, k);
  if (at && k) memcpy(at, data, (size_t)k);
}

static void put32(out_buf *b, uint32_t v) {
  uint8_t *at = reserve(b, 4);
  if (at) fsh_le_put32(at, v);
}

static void put64(out_buf *b, uint64_t v) {
  uint8_t *at = reserve(b, 8);
  if (at) fsh_le_put64(at, v);
}

int fsh_worker_locate(fsh_shuffle_store *store, const uint8_t *body, int64_t size,
                      fsh_flight_result_list *out, fsh_error *err) {
  fsh_shuffle_ticket t;
  int rc = fsh_shuffle_ticket_decode(body, size, &t, err);
  if (rc != 0)
    return fsh_error_prefix(err, rc, "worker %s: locate: ", fsh_store_name(store));
  /* one entry per (map output, partition of the run), map output-major */
  int32_t count = t.n_partitions_read > 1 ? t.n_partitions_read : 1;
  int64_t n_entries = t.n_sources * count;
  if (n_entries > FSH_TICKET_MAX_SOURCES) {
    rc = fsh_error_set(err, EINVAL, "worker %s: locate: %" PRId64 " map outputs x %d "
                       "partitions (at most %" PRId64 " entries)", fsh_store_name(store),
                       t.n_sources, count, FSH_TICKET_MAX_SOURCES);
    fsh_shuffle_ticket_reset(&t);
    return rc;
  }
  fsh_store_location *locs = fsh_calloc(n_entries > 0 ? (size_t)n_entries : 1, sizeof *locs);
  if (!locs) rc = fsh_error_set(err, ENOMEM, "worker %s: locate: out of memory",
                                fsh_store_name(store));
  const fsh_buffer *schema = NULL;
  for (int64_t i = 0; rc == 0 && i < t.n_sources; i++) {
    fsh_error e = {{0}};
    fsh_store_location *l = &locs[i * count];
    int lrc = fsh_store_locate_run(store, t.shuffle_id, t.sources[i].map_id,
                                   t.sources[i].attempt, t.partition, count, l, &e);
    if (lrc == ENOMEM) rc = fsh_error_set(err, ENOMEM, "%s", e.message);
    /* anything else (not held, damaged index...): DoGet says so */
    if (lrc == 0 && l->kind != FSH_STORE_AT_NONE && !schema) schema = l->schema_msg;
  }
  out_buf b = {0};
  if (rc == 0) {
    const char *const *dirs = NULL;
    int n_dirs = fsh_store_spill_dirs(store, &dirs);
    const char *host = fsh_host_identity();
    put_bytes(&b, FSH_LOCATE_MAGIC, 4);
    put32(&b, 2);
    put32(&b, (uint32_t)getpid());
    put32(&b, (uint32_t)n_entries);
    put32(&b, (uint32_t)strlen(host));
    put32(&b, (uint32_t)n_dirs);
    put32(&b, schema ? (uint32_t)schema->size : 0);
    put32(&b, 0);
    put_bytes(&b, host, (int64_t)strlen(host));
    for (int i = 0; i < n_dirs; i++) { /* absolute: the reader's cwd is not ours */
      char *real = realpath(dirs[i], NULL);
      const char *d = real ? real : dirs[i];
      put32(&b, (uint32_t)strlen(d));
      put_bytes(&b, d, (int64_t)strlen(d));
      free(real); /* realpath's malloc */
    }
    if (schema) put_bytes(&b, schema->data, schema->size);
    for (int64_t i = 0; i < n_entries; i++) {
      const fsh_store_location *l = &locs[i];
      size_t name_len = l->kind == FSH_STORE_AT_FILE ? strlen(l->name) : 0;
      bool ok = l->kind != FSH_STORE_AT_NONE && name_len < 256;
      put32(&b, ok ? (uint32_t)l->kind : 0);
      bool vm = ok && l->kind == FSH_STORE_AT_VM;
      put32(&b, ok && !vm ? (uint32_t)(l->kind == FSH_STORE_AT_FILE ? l->dir : l->fd) : 0);
      put64(&b, vm ? l->addr : ok ? l->dev : 0);
      put64(&b, ok && !vm ? l->ino : 0);
      put64(&b, ok ? (uint64_t)l->size : 0);
      put64(&b, ok ? (uint64_t)l->part.rows : 0);
      put64(&b, ok ? (uint64_t)l->part.bytes : 0);
      put64(&b, ok ? l->part.checksum : 0);
      put64(&b, ok ? (uint64_t)l->part.n_blocks : 0);
      put64(&b, ok && (l->kind == FSH_STORE_AT_MEMFD || vm) ? l->image_id : 0);
      put32(&b, ok ? (uint32_t)name_len : 0);
      if (!ok) continue;
      put_bytes(&b, l->name, (int64_t)name_len);
      for (int64_t k = 0; k < l->part.n_blocks; k++) {
        const fsh_map_file_block *blk = &l->part.blocks[k];
        put64(&b, (uint64_t)blk->offset);
        put64(&b, (uint64_t)blk->length);
        put64(&b, (uint64_t)blk->rows);
        put64(&b, blk->checksum);
      }
    }
    if (b.oom || fsh_flight_result_list_push(out, b.p, b.n) != 0)
      rc = fsh_error_set(err, ENOMEM, "worker %s: locate: out of memory", fsh_store_name(store));
  }
  fsh_free(b.p);
  for (int64_t i = 0; locs && i < n_entries; i++) fsh_store_location_reset(&locs[i]);
  fsh_free(locs);
  fsh_shuffle_ticket_reset(&t);
  return rc;
}

/* ---- decoding it (the reader) ------------------------------------------ */

void fsh_locate_answer_reset(fsh_locate_answer *a) {
  for (int i = 0; a->dirs && i < a->n_dirs; i++) fsh_free(a->dirs[i]);
  fsh_free(a->dirs);
  fsh_free(a->sources);
  memset(a, 0, sizeof *a);
}

static int bad_answer(int64_t at, const char *why, fsh_error *err) {
  return fsh_error_set(err, EIO, "a malformed locate answer (at byte %" PRId64 "): %s", at, why);
}

int fsh_locate_answer_decode(const uint8_t *p, int64_t size, int64_t n_sources,
                             fsh_locate_answer *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  if (size < FSH_LOCATE_HEADER_BYTES || memcmp(p, FSH_LOCATE_MAGIC, 4) != 0 ||
      fsh_le_get32(p + 4) != 2 || fsh_le_get32(p + 28) != 0)
    return bad_answer(0, "not a version 2 " FSH_LOCATE_MAGIC " header", err);
  fsh_locate_answer a = {0};
  a.pid = fsh_le_get32(p + 8);
  a.n_sources = fsh_le_get32(p + 12);
  a.host_len = fsh_le_get32(p + 16);
  int64_t n_dirs = fsh_le_get32(p + 20);
  a.schema_len = fsh_le_get32(p + 24);
  if (a.n_sources != n_sources) return bad_answer(12, "not one entry per map output asked", err);
  if (n_dirs > 4096) return bad_answer(20, "too many spill directories", err);
  int64_t at = FSH_LOCATE_HEADER_BYTES;
  if (a.host_len > size - at) return bad_answer(at, "the host identity overruns it", err);
  a.host = p + at;
  at += a.host_len;
  a.dirs = fsh_calloc(n_dirs > 0 ? (size_t)n_dirs : 1, sizeof *a.dirs);
  a.sources = fsh_calloc(n_sources > 0 ? (size_t)n_sources : 1, sizeof *a.sources);
  int rc = a.dirs && a.sources ? 0 : fsh_error_set(err, ENOMEM, "locate answer: out of memory");
  for (int64_t i = 0; rc == 0 && i < n_dirs; i++) {
    int64_t len = size - at >= 4 ? (int64_t)fsh_le_get32(p + at) : -1;
    if (len <= 0 || len > size - at - 4) {
      rc = bad_answer(at, "a spill directory overruns it", err);
      break;
    }
    if (!(a.dirs[i] = fsh_malloc((size_t)len + 1))) {
      rc = fsh_error_set(err, ENOMEM, "locate answer: out of memory");
      break;
    }
    memcpy(a.dirs[i], p + at + 4, (size_t)len);
    a.dirs[i][len] = '\0';
    a.n_dirs++;
    if (memchr(a.dirs[i], '\0', (size_t)len) || a.dirs[i][0] != '/')
      rc = bad_answer(at, "a spill directory that is not an absolute path", err);
    at += 4 + len;
  }
  if (rc == 0 && a.schema_len > size - at) rc = bad_answer(at, "the schema overruns it", err);
  if (rc == 0) {
    a.schema = p + at;
    at += a.schema_len;
  }
  for (int64_t i = 0; rc == 0 && i < n_sources; i++) {
    fsh_locate_source *s = &a.sources[i];
    if (size - at < FSH_LOCATE_SOURCE_BYTES) {
      rc = bad_answer(at, "an entry overruns it", err);
      break;
    }
    const uint8_t *q = p + at;
    uint32_t kind = fsh_le_get32(q);
    s->dir_or_fd = (int32_t)fsh_le_get32(q + 4);
    s->dev = fsh_le_get64(q + 8);
    s->ino = fsh_le_get64(q + 16);
    s->size = (int64_t)fsh_le_get64(q + 24);
    s->rows = (int64_t)fsh_le_get64(q + 32);
    s->bytes = (int64_t)fsh_le_get64(q + 40);
    s->checksum = fsh_le_get64(q + 48);
    s->n_blocks = (int64_t)fsh_le_get64(q + 56);
    s->image_id = fsh_le_get64(q + 64);
    int64_t name_len = fsh_le_get32(q + 72);
    at += FSH_LOCATE_SOURCE_BYTES;
    if (s->n_blocks < 0 || s->size < 0 || s->rows < 0 ||
        s->bytes < 0 || s->dir_or_fd < 0 || name_len > 255 ||
        (kind <= FSH_STORE_AT_VM && (kind == FSH_STORE_AT_FILE) != (name_len > 0)) ||
        (kind == FSH_STORE_AT_FILE && s->dir_or_fd >= a.n_dirs)) {
      rc = bad_answer(at - FSH_LOCATE_SOURCE_BYTES, "a malformed entry", err);
      break;
    }
    /* a kind of a later version: not readable directly (name and blocks
     * skipped below) */
    s->kind = kind > FSH_STORE_AT_VM ? FSH_STORE_AT_NONE : (fsh_store_at)kind;
    if (s->kind == FSH_STORE_AT_VM) {
      s->addr = s->dev;
      s->dev = 0;
      if (s->addr == 0 || s->image_id == 0) {
        rc = bad_answer(at - FSH_LOCATE_SOURCE_BYTES, "a VM image without address or id", err);
        break;
      }
    }
    if (name_len > size - at || s->n_blocks > (size - at - name_len) / 32) {
      rc = bad_answer(at, "an entry's name or blocks overrun it", err);
      break;
    }
    memcpy(s->name, p + at, (size_t)name_len);
    s->name[name_len] = '\0';
    at += name_len;
    s->blocks = p + at;
    at += 32 * s->n_blocks;
    /* a plain spill file name, nothing that leaves the directory */
    if (kind == FSH_STORE_AT_FILE &&
        (strlen(s->name) != (size_t)name_len || strchr(s->name, '/') ||
         strncmp(s->name, "fshspill-", 9) != 0))
      rc = bad_answer(at, "a file name that is not a spill file's", err);
  }
  if (rc == 0 && at != size) rc = bad_answer(at, "bytes after the last entry", err);
  if (rc != 0) {
    fsh_locate_answer_reset(&a);
    return rc;
  }
  *out = a;
  return 0;
}
