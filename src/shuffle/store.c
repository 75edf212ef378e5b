/* store.c -- a worker's store of map outputs (contract in shuffle.h): each
 * map output a map-output file image, in memory under the store's budget
 * or in a spill file; writers, lookups for readers and servers, listing,
 * release (remembered: a writer opened before its shuffle's release drops
 * its output when it closes), and the removal of a crashed run's leftovers
 * at start (its spill files, and the exec layer's operator spill files,
 * exec.h).
 *
 * Memory accounting: an image is charged to the budget by its capacity as
 * it grows, and by its size once complete; a writer whose next growth the
 * budget refuses first evicts the oldest completed in-memory images to
 * spill files (evict_one), and when none is left (or its growth fails for
 * lack of memory) writes what it has to a spill file and goes on there. Spill files hold nothing that must outlive the worker (a restart
 * deletes them), so they are not fsync'd: written to "<name>.tmp", renamed
 * on close, published in the index only then -- a reader never sees a
 * partial map output.
 *
 * A spill directory that runs out of space (ENOSPC) mid-file does not fail
 * the map task while another directory has room: the writer copies what
 * its temp file holds so far into a new temp file in the next directory
 * (round-robin order, each directory tried once per writer), deletes the
 * old one and goes on there. Only when every directory has refused it does
 * the write fail, with ENOSPC naming the directories; the temp files are
 * gone by then.
 *
 * The first open of a held output verifies its trailer, header and schema
 * (fsh_map_file_open); the entry keeps that verified head, and later opens
 * (a DoGet per reducer, each naming ~every map output) check only the
 * size: the partition entries and blocks they read are verified every
 * time as before. The head holds no image reference, so eviction still
 * frees the memory.
 *
 * VM images (fsh_store_images VM; not the default, MEMFD below: on a VM
 * whose host takes freed huge pages back, the operators' sort and join
 * ran 1.6-1.8x slower with them, bench/shuffle/PROFILE_VM.md "Default"):
 * a memory image lives in an
 * anonymous private mapping of its own (vm_resize), its start 2 MiB-aligned
 * and advised MADV_HUGEPAGE once it is at least 2 MiB (THP "madvise" mode:
 * writing fresh huge pages costs ~1/6 of a memfd's tmpfs pages, and a
 * peer's process_vm_readv of them ~1/4 of reading a memfd), and
 * MADV_DONTFORK (a fork's copy-on-write sharing makes a peer's copy 10x
 * slower); written with memcpy from the writer's iovecs as a private
 * image is, grown with mremap (in place, or moved to a fresh aligned range:
 * page tables move, no byte is copied), shrunk to its pages at close, and
 * its identity trailer (shuffle_internal.h) written right after its bytes.
 * This process's readers read it in place. A same-host reader copies the
 * blocks it wants out of this process with process_vm_readv at the
 * address "locate" answers (flight_fetch.c), checking the trailer before
 * and after the copy. A released VM image goes to the same pool as memfds
 * (below), its trailer's image id cleared first (vm_image_release: the
 * reuse guard, as no lease exists for anonymous memory); so does an
 * unmapped one. FSH_STORE_IMAGES_VM_4K is the same without huge pages
 * (to measure). A refused mapping falls back to fsh_realloc (private).
 *
 * Shared images (FSH_STORE_IMAGES_MEMFD): a memory
 * image lives in the pages of a memfd (memfd_create) -- the same memory,
 * charged the same way: written with pwritev where it has no pages yet (the
 * kernel allocates and fills them: no page fault per 4 KiB, which is what
 * made writing through a shared mapping ~30% slower than fsh_malloc'd
 * memory), and with memcpy through its mapping where it has them (a
 * reused memfd: 2.5x pwrite's rate in CPU, PROFILE_64.md session 9),
 * mapped read-write once complete for this process's readers -- the
 * mapping stays with the memfd in the pool -- so that a reader in
 * another process on this host can open it (/proc/<pid>/fd/<fd>, checked
 * against the memfd's inode) and read its blocks without a DoGet
 * (fsh_store_locate; the reader is flight_direct.c). A memfd is
 * anonymous: nothing of it outlives the worker, crashed or not, so no new
 * leftovers. When memfd_create is refused the image is fsh_realloc'd as
 * before (and located as "not shareable"); so is every image past a
 * quarter of the process's file descriptor limit (RLIMIT_NOFILE, at most
 * 8192 memfds): a store holding thousands of images must not starve the
 * sockets and files of its fds.
 *
 * Reused memfds (with their mappings; and VM mappings, pooled the same
 * way, pages and all):
 * tmpfs allocating a page for every 4 KiB written was the
 * largest cost of writing an image, and freeing them again at release a
 * further one. (Not zeroing: a page pwrite fills whole is not cleared --
 * clear_page is 0.2% of a cold 64 x 64 map window, all of it the heap's
 * anonymous faults -- but each page's charge, page-cache insert and LRU
 * add under their locks. Nothing cheaper fills a fresh memfd on this
 * kernel, whose shmem THP is off: bench_memfd has fallocate first at
 * 0.95x pwrite's rate, MADV_POPULATE_WRITE on a mapping then pwrite 0.47x,
 * memcpy through a mapping 0.57x, and a reused memfd 4.9x.) So a
 * released image's memfd (its last reference gone) is kept in the store's
 * pool, pages and all, and the next image is written over it -- when it
 * is safe: its identity trailer
 * (shuffle_internal.h) is cut off first, then a write lease on it must be
 * granted, which the kernel does only while no other open file description
 * of it exists (no other process has it open through /proc/<pid>/fd, nor
 * mapped). A reader that opens it later finds no trailer, or the next
 * image's, and reads that map output with DoGet instead; one that held it
 * meanwhile made the lease fail, and the memfd is closed as before. The
 * pool is bounded (POOL_MAX memfds, a quarter of the memory limit), its
 * bytes are charged to the budget (not reported in memory_bytes: it holds
 * no map output), and a writer whose growth the budget refuses empties it
 * before anything else; images evicted under pressure are not pooled.
 * Reuse is size-aware (pool_take): an image must end its memfd (a reader
 * finds its trailer there), so writing a small image over a large memfd
 * truncates the rest, freeing pages a later large writer then allocates
 * fresh. So a writer takes the smallest pooled memfd that holds what it
 * expects to write -- a merge says (the sum of its parts,
 * fsh_store_writer_open_sized), other writers are expected to write the
 * moving average of such writers' images -- and when that one is more
 * than twice its need + 1 MiB, the largest smaller one instead (growing
 * past it keeps its pages), or none: the large one stays for a writer
 * that needs it.
 * An idle pool is emptied too: once no memfd went in or out for
 * POOL_IDLE_MS (fsh_store_set_pool_idle_ms; the worker's --pool-idle-ms,
 * where "never" keeps it until a writer's budget needs its bytes, for a
 * service whose shuffles come further apart: WORKER_MEMORY.md has the
 * trade-off), fsh_store_pool_drain_idle --
 * which the worker's keeper thread calls (worker.c) -- closes them all, so
 * that an idle worker holds no pooled pages, while back-to-back shuffles
 * still reuse them (a release fills the pool, the next shuffle's writers
 * take from it within the window). */
#define _GNU_SOURCE /* memfd_create */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <flightshuffle/kernels.h> /* the partition builders' cache */

#include "ipc/read_internal.h" /* fsh_input_from_buffer_named */
#include "shuffle/shuffle_internal.h"

#define SPILL_NAME_MAX 128

typedef struct entry {
  fsh_map_output meta; /* location NULL */
  fsh_schema *schema;
  fsh_buffer *image;  /* in memory, or NULL */
  int image_fd;       /* the image's memfd (while image is set), or -1 */
  bool image_vm;      /* the image is an anonymous VM image (see the top) */
  uint64_t image_dev, image_ino; /* its identity, for same-host readers */
  uint64_t image_id;  /* its identity trailer's id (shuffle_internal.h) */
  int64_t charged;    /* bytes of the budget it holds */
  char *path;         /* spill file, or NULL */
  int64_t file_bytes;
  uint64_t published; /* order of publication: the oldest image spills first */
  bool evicting;      /* its image is being written to a spill file */
  fsh_map_file_head *head; /* verified by the first open, or NULL: later
                              opens skip trailer, header and schema */
  char image_name[512]; /* its memory image's name in messages */
  struct entry *next; /* hash chain */
} entry;

#define RELEASED_MAX 1024
#define POOL_MAX 64
#define POOL_IDLE_MS FSH_WORKER_POOL_IDLE_MS_DEFAULT /* a pool unused that long is emptied
                                                 (the worker asks) */

/* A pooled image: a memfd (fd >= 0) of `size` bytes (its pages: `bytes`,
 * charged) with its read-write mapping of map_len bytes at addr (NULL:
 * none), or a VM image's mapping of `bytes` at addr (fd -1). */
typedef struct pooled {
  int fd;
  uint8_t *addr;
  int64_t bytes, size, map_len;
  int64_t present; /* memfd: the first bytes of addr whose writable page-table
                      entries this process installed (populate_write) */
} pooled;

/* Released memfds kept for reuse (see the top). Its own object with a
 * reference count: an image's last reference may go after its store. */
typedef struct image_pool {
  pthread_mutex_t mu;
  atomic_int refs;
  fsh_shuffle_store *s; /* whose budget it is charged to; NULL once freed */
  int n;
  pooled img[POOL_MAX];
  int64_t bytes, max_bytes; /* charged; at most */
  int64_t reused;
  int64_t last_use_ns; /* the last put or take (CLOCK_MONOTONIC) */
  int64_t idle_ms;     /* fsh_store_pool_drain_idle empties it after that long unused */
  int64_t idle_drains; /* times it did */
  int64_t left_loose;  /* takes that left a too-large memfd for a larger writer */
} image_pool;

struct fsh_shuffle_store {
  pthread_mutex_t mu;
  entry **buckets;
  int64_t n_buckets, n_entries;
  int64_t spilled_outputs, spilled_bytes;
  char **dirs;
  int n_dirs;
  int64_t memory_limit;
  bool shared_images; /* memory images in memfds (see the top) */
  bool vm_images;     /* memory images in anonymous VM mappings (see the top) */
  bool vm_huge;       /* ... advised to huge pages (not FSH_STORE_IMAGES_VM_4K) */
  atomic_llong used; /* bytes charged */
  atomic_uint next_dir;
  atomic_ullong seq;
  uint64_t tag;
  char name[320]; /* fixed: renamed once while possibly read */
  /* the last RELEASED_MAX releases (a ring, under mu): shuffle id and the
   * release's generation, so that an output whose writer opened before its
   * shuffle's release is dropped when it finishes (no orphan) */
  struct { uint64_t shuffle_id, gen; } released[RELEASED_MAX];
  int n_released, next_released;
  uint64_t release_gen; /* releases so far (under mu) */
  image_pool *pool;
  atomic_llong recent_image; /* unhinted writers' image bytes, a moving average
                                (their expected size for the pool, pool_take) */
};

/* ---- names ------------------------------------------------------------- */

static void spill_name(char *out, uint64_t tag, uint64_t shuffle_id, int64_t map_id,
                       int32_t attempt, uint64_t seq) {
  snprintf(out, SPILL_NAME_MAX,
           "fshspill-%016" PRIx64 "-s%" PRIu64 "-m%" PRId64 "-a%" PRId32 "-%" PRIu64 ".arrows", tag,
           shuffle_id, map_id, attempt, seq);
}

/* Whether name is exactly a spill file name (or its ".tmp"). */
static bool is_spill_name(const char *name) {
  uint64_t tag, s, seq;
  int64_t m;
  int32_t a;
  if (strncmp(name, "fshspill-", 9) != 0 ||
      sscanf(name, "fshspill-%16" SCNx64 "-s%" SCNu64 "-m%" SCNd64 "-a%" SCNd32 "-%" SCNu64, &tag,
             &s, &m, &a, &seq) != 5 || m < 0 || a < 0)
    return false;
  char expect[SPILL_NAME_MAX];
  spill_name(expect, tag, s, m, a, seq);
  size_t n = strlen(expect);
  return strncmp(name, expect, n) == 0 && (name[n] == '\0' || strcmp(name + n, ".tmp") == 0);
}

/* Whether name is exactly an operator spill file name of the exec layer,
 * "fshexec-<pid>-<spill>-<seq>-<tag>.arrows" (exec.h; decimal numbers as
 * printed, 0 < pid <= INT32_MAX, tag 1..31 bytes), and then its pid. */
static bool is_exec_spill_name(const char *name, long *pid) {
  long p = 0;
  uint64_t spill = 0, seq = 0;
  int n = 0;
  if (strncmp(name, "fshexec-", 8) != 0 ||
      sscanf(name, "fshexec-%ld-%" SCNu64 "-%" SCNu64 "-%n", &p, &spill, &seq, &n) != 3 ||
      n == 0 || p <= 0 || p > INT32_MAX) /* not a pid (kill() would take it for a group) */
    return false;
  char expect[SPILL_NAME_MAX];
  int m = snprintf(expect, sizeof expect, "fshexec-%ld-%" PRIu64 "-%" PRIu64 "-", p, spill, seq);
  size_t tag = strlen(name + n), ext = strlen(".arrows");
  if (m != n || strncmp(name, expect, (size_t)n) != 0 || tag <= ext || tag - ext > 31 ||
      strcmp(name + n + tag - ext, ".arrows") != 0)
    return false;
  *pid = p;
  return true;
}

/* Whether a file of the exec layer's must stay: its process is another
 * one that is still alive (a directory shared with a running process's
 * operators). A file of this very process's pid is a leftover: a store is
 * made when its worker starts, before any of the worker's operators run
 * (a restarted container reuses pids). */
static bool exec_spill_live(long pid) {
  if (pid == (long)getpid()) return false;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* ---- budget ------------------------------------------------------------ */

static bool charge(fsh_shuffle_store *s, int64_t n) {
  long long cur = atomic_load(&s->used);
  do {
    if (cur + n > s->memory_limit) return false;
  } while (!atomic_compare_exchange_weak(&s->used, &cur, cur + n));
  return true;
}

static void uncharge(fsh_shuffle_store *s, int64_t n) { atomic_fetch_sub(&s->used, n); }

/* ---- the index --------------------------------------------------------- */

static uint64_t key_hash(uint64_t shuffle_id, int64_t map_id, int32_t attempt) {
  uint64_t h = shuffle_id * 0x9E3779B97F4A7C15ull;
  h ^= (uint64_t)map_id + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
  h ^= (uint64_t)(uint32_t)attempt + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
  return h ^ (h >> 31);
}

/* The chain link holding the key's entry, or the NULL ending its chain.
 * Lock held. */
static entry **find_link(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id,
                         int32_t attempt) {
  entry **l = &s->buckets[key_hash(shuffle_id, map_id, attempt) % (uint64_t)s->n_buckets];
  while (*l && !((*l)->meta.shuffle_id == shuffle_id && (*l)->meta.map_id == map_id &&
                 (*l)->meta.attempt == attempt))
    l = &(*l)->next;
  return l;
}

static void maybe_grow(fsh_shuffle_store *s) {
  if (s->n_entries < s->n_buckets) return;
  int64_t n = s->n_buckets * 2;
  entry **b = fsh_calloc((size_t)n, sizeof *b);
  if (!b) return; /* longer chains, nothing worse */
  for (int64_t i = 0; i < s->n_buckets; i++)
    for (entry *e = s->buckets[i], *next; e; e = next) {
      next = e->next;
      uint64_t h = key_hash(e->meta.shuffle_id, e->meta.map_id, e->meta.attempt) % (uint64_t)n;
      e->next = b[h];
      b[h] = e;
    }
  fsh_free(s->buckets);
  s->buckets = b;
  s->n_buckets = n;
}

/* Frees an entry taken out of the index: memory back to the budget, spill
 * file removed. */
static void entry_destroy(fsh_shuffle_store *s, entry *e) {
  if (!e) return;
  if (e->charged) uncharge(s, e->charged); /* first: a pooled memfd is charged anew */
  fsh_buffer_unref(e->image);
  if (e->path) unlink(e->path);
  fsh_free(e->path);
  fsh_schema_unref(e->schema);
  fsh_map_file_head_unref(e->head);
  fsh_map_output_reset(&e->meta);
  fsh_free(e);
}

/* ---- the spilling output ----------------------------------------------- */

/* Where a writer's image ended up (filled by a successful close). */
typedef struct spill_result {
  fsh_buffer *image;
  int image_fd; /* its memfd (owned by the image), or -1 */
  bool image_vm; /* a VM image */
  uint64_t image_dev, image_ino, image_id;
  int64_t charged;
  char *path;
  int64_t file_bytes;
} spill_result;

typedef struct spill_out {
  fsh_output pub;
  fsh_shuffle_store *s;
  char what[128]; /* "shuffle 1 map 2 attempt 0" */
  uint64_t shuffle_id; /* the map output (its image's identity trailer) */
  int64_t map_id;
  int32_t attempt;
  bool reused;     /* img_fd came from the pool: it may be longer than img_size */
  int64_t expect;  /* the image bytes its writer expects (0: unknown) */
  bool hinted;     /* expect was its opener's, not the store's average */
  char file_name[SPILL_NAME_MAX];
  uint8_t *img;    /* memory mode: the image so far (fsh_malloc'd, or when vm
                      an anonymous mapping of img_map bytes: img_cap + the
                      identity trailer, rounded up to pages), */
  int64_t img_size, img_cap; /* its bytes and capacity (charged) */
  bool vm;         /* img is a VM mapping */
  bool no_vm;      /* a VM mapping was refused: fsh_realloc from then on */
  int64_t img_map;
  int img_fd;      /* or: the memfd holding its bytes (img NULL), or -1 */
  uint8_t *wmap;   /* a pooled memfd's read-write mapping (wmap_len bytes),
                      or NULL: its bytes below wmap_ok (the memfd's size
                      when taken) are written with memcpy, the rest with
                      pwrite */
  int64_t wmap_len, wmap_ok;
  int64_t wmap_present; /* its first bytes with page-table entries (pooled.present) */
  bool no_memfd;   /* memfd refused: fsh_realloc from then on */
  int64_t charged;
  fsh_output *file; /* file mode: writes to path.tmp */
  char *path, *tmp;
  int first_dir, n_tried; /* directories tried: first_dir + [0, n_tried) */
  const char *dir;        /* the current file's directory (the store's) */
  char full[400];         /* the directories found full, for the message */
  spill_result *result;
} spill_out;

/* Opens path.tmp in spill directory d for writing (exclusive create). */
static int open_spill_file(spill_out *o, const char *dir, fsh_error *err) {
  char *path = fsh_path_join(dir, o->file_name);
  char *tmp = path ? fsh_malloc(strlen(path) + 5) : NULL;
  if (!path || !tmp) {
    fsh_free(path);
    fsh_free(tmp);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  strcpy(tmp, path);
  strcat(tmp, ".tmp");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  int rc = 0;
  if (fd < 0) {
    int e = errno;
    rc = fsh_error_set(err, e == ENOSPC || e == EACCES || e == EROFS ? e : EIO,
                       "creating spill file %s: %s", tmp, strerror(e));
  } else {
    rc = fsh_output_from_fd(fd, true, tmp, &o->file, err);
    if (rc != 0) {
      close(fd);
      unlink(tmp);
    }
  }
  if (rc != 0) {
    fsh_free(path);
    fsh_free(tmp);
    return rc;
  }
  o->path = path;
  o->tmp = tmp;
  o->dir = dir;
  return 0;
}

/* Closes and deletes the current temp file (after an error). */
static void drop_file(spill_out *o) {
  fsh_error ignored;
  if (o->file) (void)o->file->close(o->file, true, &ignored);
  if (o->tmp) unlink(o->tmp);
  o->file = NULL;
  fsh_free(o->path);
  fsh_free(o->tmp);
  o->path = o->tmp = NULL;
}

/* Opens a temp file in the next untried directory (one that cannot create
 * it is skipped). ENOSPC with err naming the directories when none is
 * left. */
static int open_next_dir(spill_out *o, fsh_error *err) {
  fsh_shuffle_store *s = o->s;
  int rc = ENOSPC;
  fsh_error e = {{0}};
  while (o->n_tried < s->n_dirs) {
    const char *dir = s->dirs[(o->first_dir + o->n_tried++) % s->n_dirs];
    rc = open_spill_file(o, dir, &e);
    if (rc == 0) return 0;
    if (rc == ENOMEM) return fsh_error_set(err, ENOMEM, "store %s: out of memory", s->name);
    if (rc == ENOSPC) {
      size_t at = strlen(o->full);
      snprintf(o->full + at, sizeof o->full - at, "%s%s", at ? ", " : "", dir);
    }
  }
  if (o->full[0])
    return fsh_error_set(err, ENOSPC, "no space left on device (ENOSPC) in spill "
                         "director%s %s, and no other spill directory could take the map "
                         "output%s%s", strchr(o->full, ',') ? "ies" : "y", o->full,
                         e.message[0] ? ": " : "", e.message);
  return fsh_error_set(err, rc, "no spill directory took the map output: %s", e.message);
}

/* Copies the first n bytes of the temp file `from` to the current file. */
static int copy_prefix(spill_out *o, const char *from, int64_t n, fsh_error *err) {
  int fd = open(from, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fsh_error_set(err, EIO, "reopening %s: %s", from, strerror(errno));
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = fsh_malloc(CHUNK);
  int rc = buf ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
  for (int64_t at = 0; rc == 0 && at < n;) {
    size_t want = n - at < CHUNK ? (size_t)(n - at) : CHUNK;
    ssize_t got = pread(fd, buf, want, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      rc = fsh_error_set(err, EIO, "reading back %s: %s", from,
                         got < 0 ? strerror(errno) : "shorter than written");
      break;
    }
    struct iovec v = {buf, (size_t)got};
    rc = o->file->writev(o->file, &v, 1, err);
    at += got;
  }
  fsh_free(buf);
  close(fd);
  return rc;
}

/* The current spill directory is full (err says so): moves what the temp
 * file holds to a temp file in the next directory with room, deleting the
 * old one. ENOSPC naming every full directory when none has room. */
static int move_to_next_dir(spill_out *o, fsh_error *err) {
  size_t at = strlen(o->full);
  snprintf(o->full + at, sizeof o->full - at, "%s%s", at ? ", " : "", o->dir);
  int64_t have = o->file->position;
  fsh_output *old = o->file;
  char *old_tmp = o->tmp, *old_path = o->path;
  o->file = NULL;
  o->tmp = o->path = NULL;
  int rc;
  for (;;) {
    rc = open_next_dir(o, err);
    if (rc != 0) break;
    fsh_error e = {{0}};
    rc = copy_prefix(o, old_tmp, have, &e);
    if (rc == 0) break;
    const char *dir = o->dir;
    drop_file(o);
    if (rc != ENOSPC) {
      rc = fsh_error_set(err, rc, "moving the map output out of the full spill directory "
                         "%s: %s", dir, e.message);
      break;
    }
    at = strlen(o->full);
    snprintf(o->full + at, sizeof o->full - at, "%s%s", at ? ", " : "", dir);
  }
  fsh_error ignored;
  (void)old->close(old, true, &ignored);
  unlink(old_tmp);
  fsh_free(old_tmp);
  fsh_free(old_path);
  return rc;
}

/* Writes to the spill file, moving to another directory when one is
 * full. Errors name the store. */
static int file_write(spill_out *o, const struct iovec *iov, int n, fsh_error *err) {
  int rc = o->file->writev(o->file, iov, n, err);
  while (rc == ENOSPC) {
    /* the failed writev may have left part of iov in the file: only
     * position bytes count, and those are what moves */
    rc = move_to_next_dir(o, err);
    if (rc != 0) break;
    rc = o->file->writev(o->file, iov, n, err);
  }
  return rc == 0 || rc == ENOMEM ? rc : fsh_error_prefix(err, rc, "store %s: ", o->s->name);
}

static void img_free(spill_out *o);
static void image_no_pool(fsh_buffer *image);

/* Moves the output to a spill file (round-robin over the directories;
 * one that cannot take the file is skipped), writing what memory held. */
static int spill_now(spill_out *o, const char *why, fsh_error *err) {
  fsh_shuffle_store *s = o->s;
  if (s->n_dirs == 0)
    return fsh_error_set(err, ENOSPC, "store %s: %s, and the store has no spill directory",
                         s->name, why);
  o->first_dir = (int)(atomic_fetch_add(&s->next_dir, 1u) % (unsigned)s->n_dirs);
  o->n_tried = 0;
  int rc = open_next_dir(o, err);
  if (rc != 0)
    return rc == ENOMEM ? rc : fsh_error_prefix(err, rc, "store %s: %s: ", s->name, why);
  void *mapped = NULL; /* a memfd's bytes, read through a temporary mapping */
  if (o->img_fd >= 0 && o->img_size > 0) {
    mapped = mmap(NULL, (size_t)o->img_size, PROT_READ, MAP_SHARED, o->img_fd, 0);
    if (mapped == MAP_FAILED) {
      mapped = NULL;
      rc = fsh_error_set(err, ENOMEM, "store %s: %s: mapping the memory image: %s", s->name,
                         why, strerror(errno));
    }
  }
  if (rc == 0 && o->img_size > 0) {
    struct iovec v = {mapped ? mapped : o->img, (size_t)o->img_size};
    rc = file_write(o, &v, 1, err);
  }
  if (mapped) munmap(mapped, (size_t)o->img_size);
  img_free(o);
  if (o->charged) uncharge(s, o->charged);
  o->charged = 0;
  return rc;
}

/* Moves the oldest completed map output still in memory to a spill file
 * (temp then rename, the directories round-robin like a writer's), so
 * that a writer meeting the budget can stay in memory: outputs held in
 * memory do not keep the budget forever. Readers that hold the image go
 * on reading it; new readers open the file. The image is written outside
 * the lock; if the output was released or replaced meanwhile the file is
 * deleted. True if memory was given back. A failure (no directory, disk
 * full, out of memory) only means nothing moved: the caller spills its
 * own output instead, and reports that error if it fails too. */
static bool evict_one(fsh_shuffle_store *s) {
  if (s->n_dirs == 0) return false;
  pthread_mutex_lock(&s->mu);
  entry *victim = NULL;
  for (int64_t i = 0; i < s->n_buckets; i++)
    for (entry *e = s->buckets[i]; e; e = e->next)
      if (e->image && !e->evicting && (!victim || e->published < victim->published)) victim = e;
  if (!victim) {
    pthread_mutex_unlock(&s->mu);
    return false;
  }
  victim->evicting = true;
  fsh_buffer *image = fsh_buffer_ref(victim->image);
  image_no_pool(image); /* what it frees is wanted now */
  uint64_t shuffle_id = victim->meta.shuffle_id;
  int64_t map_id = victim->meta.map_id;
  int32_t attempt = victim->meta.attempt;
  pthread_mutex_unlock(&s->mu);

  spill_out o = {.s = s, .img_fd = -1};
  snprintf(o.what, sizeof o.what, "shuffle %" PRIu64 " map %" PRId64 " attempt %" PRId32,
           shuffle_id, map_id, attempt);
  spill_name(o.file_name, s->tag, shuffle_id, map_id, attempt, atomic_fetch_add(&s->seq, 1u));
  o.first_dir = (int)(atomic_fetch_add(&s->next_dir, 1u) % (unsigned)s->n_dirs);
  fsh_error e = {{0}};
  int rc = open_next_dir(&o, &e);
  if (rc == 0 && image->size > 0) {
    struct iovec v = {image->data, (size_t)image->size};
    rc = file_write(&o, &v, 1, &e);
  }
  if (rc == 0) {
    rc = o.file->close(o.file, false, &e);
    o.file = NULL;
    if (rc == 0 && rename(o.tmp, o.path) != 0) rc = EIO;
  }
  if (rc != 0) drop_file(&o);

  int64_t freed = 0;
  fsh_buffer *old = NULL;
  pthread_mutex_lock(&s->mu);
  entry *e2 = *find_link(s, shuffle_id, map_id, attempt);
  bool same = e2 == victim && e2->image == image; /* not released nor replaced */
  if (same) e2->evicting = false;
  if (same && rc == 0) {
    old = e2->image;
    e2->image = NULL;
    e2->image_fd = -1;
    freed = e2->charged;
    e2->charged = 0;
    e2->path = o.path;
    e2->file_bytes = image->size;
    o.path = NULL;
    s->spilled_outputs++;
    s->spilled_bytes += image->size;
  }
  pthread_mutex_unlock(&s->mu);
  if (o.path) unlink(o.path); /* written for an output that went meanwhile */
  fsh_free(o.path);
  fsh_free(o.tmp);
  if (freed) uncharge(s, freed);
  fsh_buffer_unref(old);
  fsh_buffer_unref(image);
  return freed > 0;
}

/* The image's next capacity for `need` bytes: doubling up to 8 MiB, then
 * growing by half (fewer bytes charged beyond what the image holds). */
static int64_t image_grow(int64_t cap, int64_t need) {
  int64_t want = cap ? cap : 64 << 10;
  while (want < need) want = want < (8 << 20) ? want * 2 : want + want / 2;
  return want;
}

/* A finished shared image of `size` bytes: its read-write mapping (kept
 * with the memfd in the pool, for the next image's writes) and its memfd,
 * and the pool they go to once released. */
typedef struct shm_image {
  uint8_t *p;
  int64_t size, len; /* the image's bytes; mapped */
  int64_t present;    /* pooled.present of its mapping */
  int fd;
  image_pool *pool; /* a reference */
  atomic_bool no_pool; /* evicted: closed when released, not pooled */
} shm_image;

/* A finished VM image: its mapping (len bytes: the image's size bytes,
 * its identity trailer, the rest of the last page) and the pool it goes
 * to once released. */
typedef struct vm_image {
  uint8_t *p;
  int64_t size, len;
  image_pool *pool; /* a reference */
  atomic_bool no_pool; /* evicted: unmapped when released, not pooled */
} vm_image;

static void shm_image_release(void *ctx);
static void vm_image_release(void *ctx);

static void image_no_pool(fsh_buffer *image) {
  if (image->release == shm_image_release)
    atomic_store(&((shm_image *)image->release_ctx)->no_pool, true);
  if (image->release == vm_image_release)
    atomic_store(&((vm_image *)image->release_ctx)->no_pool, true);
}

/* ---- VM images: anonymous memory (see the top) -------------------------- */

#define VM_HUGE ((int64_t)2 << 20)
#define VM_PAGE ((int64_t)4096)

static int64_t vm_pages(int64_t n) { return (n + VM_PAGE - 1) / VM_PAGE * VM_PAGE; }

/* The mapping for a capacity of `want` image bytes and the trailer: whole
 * 2 MiB where the capacity reaches at least halfway into them, so that
 * every 2 MiB of it the writer fills is inside the mapping when first
 * touched -- the kernel gives a huge page only to an aligned 2 MiB wholly
 * mapped and not yet touched (a range first touched while the mapping
 * ended inside it stays on 4 KiB pages) -- and pages for a shorter tail:
 * a huge page faulted for a few KiB of image is 2 MiB zeroed (a 2.1 MB
 * image of a 1000 x 1000 2 GiB shuffle would fault two). */
static int64_t vm_len(int64_t want) {
  int64_t n = want + FSH_IMAGE_ID_BYTES, whole = n / VM_HUGE * VM_HUGE;
  return n - whole >= VM_HUGE / 2 ? whole + VM_HUGE : whole + vm_pages(n - whole);
}

/* Huge pages for a mapping of at least 2 MiB (THP "madvise" mode), and no
 * copy of it in a forked child: a child sharing the pages copy-on-write
 * makes a reader's process_vm_readv of them ~10x slower. */
static void vm_advise(const fsh_shuffle_store *s, uint8_t *p, int64_t len) {
  if (len >= VM_HUGE && s->vm_huge) (void)madvise(p, (size_t)len, MADV_HUGEPAGE);
  (void)madvise(p, (size_t)len, MADV_DONTFORK);
#ifdef PR_SET_VMA_ANON_NAME /* "[anon:fsh-image]" in /proc/<pid>/maps (where the kernel
                               names anonymous memory) */
  (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)p, (unsigned long)len,
              (unsigned long)"fsh-image");
#endif
}

/* An address range of len bytes (a page multiple), 2 MiB-aligned when it
 * is at least that long (a huge page needs an aligned 2 MiB of the
 * mapping), reserved without access: NULL when refused. */
static uint8_t *vm_reserve(int64_t len) {
  int64_t extra = len >= VM_HUGE ? VM_HUGE : 0;
  uint8_t *r = mmap(NULL, (size_t)(len + extra), PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return NULL;
  if (!extra) return r;
  uint8_t *a = (uint8_t *)(((uintptr_t)r + (uintptr_t)VM_HUGE - 1) & ~((uintptr_t)VM_HUGE - 1));
  size_t head = (size_t)(a - r), tail = (size_t)extra - head;
  if (head) munmap(r, head);
  if (tail) munmap(a + len, tail);
  return a;
}

/* Room for want bytes of image and its identity trailer in o's VM
 * mapping: a new one (aligned, advised) -- as long as the image its writer
 * expects, from 1 MiB on, so that it is on huge pages from its start
 * (vm_len; only the capacity asked is charged: pages past it are not
 * touched before it grows) -- or the old one when it is long enough, or
 * grown in place or moved by mremap (page tables move, no byte is copied)
 * to an aligned range. False when refused (the mapping unchanged). */
static bool vm_resize(spill_out *o, int64_t want) {
  int64_t len = vm_len(want);
  if (!o->img && o->expect >= VM_HUGE / 2 && vm_len(o->expect) > len) len = vm_len(o->expect);
  if (!o->img) {
    uint8_t *r = vm_reserve(len);
    if (!r) return false;
    void *p = mmap(r, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    if (p == MAP_FAILED) {
      munmap(r, (size_t)len);
      return false;
    }
    vm_advise(o->s, p, len);
    o->img = p;
    o->img_map = len;
    o->vm = true;
    return true;
  }
  if (len <= o->img_map) return true; /* (shrunk only when finished: image_finish) */
  void *q = MAP_FAILED;
  /* in place: a growth that keeps huge pages possible */
  if (len < VM_HUGE || (uintptr_t)o->img % (uintptr_t)VM_HUGE == 0)
    q = mremap(o->img, (size_t)o->img_map, (size_t)len, 0);
  if (q == MAP_FAILED) {
    uint8_t *r = vm_reserve(len);
    if (!r) return false;
    q = mremap(o->img, (size_t)o->img_map, (size_t)len, MREMAP_MAYMOVE | MREMAP_FIXED, r);
    if (q == MAP_FAILED) {
      munmap(r, (size_t)len);
      return false;
    }
  }
  o->img = q;
  o->img_map = len;
  if (len >= VM_HUGE) vm_advise(o->s, q, len);
  return true;
}

/* Clears the image id of the identity trailer after size bytes at p: the
 * reuse guard of a VM image (sequentially consistent: before any later
 * write to the mapping, or its unmapping, is visible). */
static void vm_clear_id(uint8_t *p, int64_t size) {
  uint8_t *id = p + size + 32;
  if ((uintptr_t)id % 8 == 0) {
    __atomic_store_n((uint64_t *)(void *)id, (uint64_t)0, __ATOMIC_SEQ_CST);
  } else {
    memset(id, 0, 8);
    atomic_thread_fence(memory_order_seq_cst);
  }
}

/* Identity trailer ids: unique in the process, never 0. */
static atomic_ullong g_image_ids;

/* Image memfds open in this process, and how many may be. */
static atomic_int g_image_fds;

static int image_fds_max(void) {
  static atomic_int max = -1;
  int m = atomic_load(&max);
  if (m < 0) {
    struct rlimit rl;
    rlim_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    m = lim == RLIM_INFINITY || lim / 4 > 8192 ? 8192 : (int)(lim / 4);
    atomic_store(&max, m);
  }
  return m;
}

static void image_fd_close(int fd) {
  close(fd);
  atomic_fetch_sub(&g_image_fds, 1);
}

/* ---- the pool of released memfds (see the top) ------------------------ */

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Frees a pooled image: a memfd unmapped and closed, a VM mapping
 * unmapped. */
static void pooled_free(const pooled *e) {
  if (e->fd >= 0) {
    if (e->addr) munmap(e->addr, (size_t)e->map_len);
    image_fd_close(e->fd);
  } else {
    munmap(e->addr, (size_t)e->bytes);
  }
}

static void pool_unref(image_pool *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  for (int i = 0; i < p->n; i++) pooled_free(&p->img[i]);
  pthread_mutex_destroy(&p->mu);
  fsh_free(p);
}

/* Whether no other open file description of memfd fd exists: nobody else
 * has it open (a same-host reader's open of /proc/<pid>/fd/<fd>) or
 * mapped. Asked by taking a write lease, which the kernel grants only
 * then, and dropping it at once. The lease is taken on a fresh read-only
 * open of the memfd: the memfd's own description does not count as a
 * writer to the kernel's lease check, so a lease on it is always refused
 * (and a kernel that counted it would refuse this one: no reuse, never a
 * wrong one). A reader opening the memfd during the lease (O_NONBLOCK,
 * flight_direct.c) gets EWOULDBLOCK and uses DoGet; the lease break's
 * signal is SIGURG, which is ignored by default (SIGIO would end the
 * process). */
static bool held_by_nobody_else(int fd) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int t = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (t < 0) return false;
  bool alone = fcntl(t, F_SETSIG, SIGURG) == 0 && fcntl(t, F_SETLEASE, F_WRLCK) == 0;
  if (alone) (void)fcntl(t, F_SETLEASE, F_UNLCK);
  close(t);
  return alone;
}

/* Keeps released image memfd fd, of `size` image bytes, and its
 * read-write mapping (map_len bytes at map) for reuse when the pool has
 * room, the budget takes its pages and nobody else holds it (true: the
 * pool owns both now); false: the caller unmaps and closes them. The
 * mapping is this process's, through the memfd's own open file
 * description: it does not stand in the lease's way. The identity
 * trailer is cut off BEFORE the lease is asked: a reader that opens the
 * memfd after the lease was granted cannot find this image's trailer any
 * more, and one that opened it before made the lease fail (on x86 the
 * truncate and the lease check, and a reader's open and its trailer read,
 * are each ordered by the locked instructions between them). */
static bool pool_put(image_pool *p, int fd, int64_t size, uint8_t *map, int64_t map_len,
                     int64_t present) {
  int64_t page = 4096, bytes = (size + page - 1) / page * page;
  pthread_mutex_lock(&p->mu);
  bool room = p->s && p->n < POOL_MAX && p->bytes + bytes <= p->max_bytes;
  pthread_mutex_unlock(&p->mu);
  if (!room || bytes == 0 || ftruncate(fd, size) != 0 || !held_by_nobody_else(fd)) return false;
  pthread_mutex_lock(&p->mu);
  bool ok = p->s && p->n < POOL_MAX && p->bytes + bytes <= p->max_bytes && charge(p->s, bytes);
  if (ok) {
    /* (the truncate left the entries below size's page) */
    int64_t below = size / page * page;
    p->img[p->n++] = (pooled){fd, map, bytes, size, map_len, present < below ? present : below};
    p->bytes += bytes;
    p->last_use_ns = mono_ns();
  }
  pthread_mutex_unlock(&p->mu);
  return ok;
}

/* Keeps a released VM image's mapping (len bytes at addr, its identity
 * trailer's id already cleared: vm_image_release) for reuse when the pool
 * has room and the budget takes it (true: the pool owns it now); false:
 * the caller unmaps it. No lease is needed: a same-host reader copies
 * with process_vm_readv and uses what it copied only while the trailer
 * still names the image it located (flight_fetch.c), and the id was
 * cleared before anything of the mapping can be reused. */
static bool pool_put_vm(image_pool *p, uint8_t *addr, int64_t len) {
  pthread_mutex_lock(&p->mu);
  bool ok = len > 0 && p->s && p->n < POOL_MAX && p->bytes + len <= p->max_bytes &&
            charge(p->s, len);
  if (ok) {
    p->img[p->n++] = (pooled){-1, addr, len, 0, 0, 0};
    p->bytes += len;
    p->last_use_ns = mono_ns();
  }
  pthread_mutex_unlock(&p->mu);
  return ok;
}

/* Whether a pooled memfd of `bytes` is too large for a writer expecting
 * `need`: taken, its pages past the image would be truncated away at the
 * image's end (a reader needs the memfd to end at its identity trailer),
 * pages a larger writer (a merge) would otherwise reuse. */
static bool pool_loose(int64_t bytes, int64_t need) {
  return bytes > 2 * need + ((int64_t)1 << 20);
}

/* Takes the pooled memfd that suits a writer expecting `need` image bytes
 * (0: unknown): the smallest that holds need (best fit), unless it is
 * loose (pool_loose) -- then the largest smaller one, which the writer
 * grows past keeping its pages, or none, so that the large one stays for a
 * writer that needs it. need 0 takes the most recently pooled. *out: the
 * image (its fd, mapping and the bytes of the budget it holds: now the
 * caller's); false when nothing suits. */
static bool pool_take(image_pool *p, int64_t need, pooled *out) {
  pthread_mutex_lock(&p->mu);
  int pick = -1;
  if (p->n > 0 && need <= 0) {
    pick = p->n - 1;
  } else if (p->n > 0) {
    int fit = -1, below = -1;
    for (int i = 0; i < p->n; i++) {
      int64_t b = p->img[i].bytes;
      if (b >= need && (fit < 0 || b < p->img[fit].bytes)) fit = i;
      if (b < need && (below < 0 || b > p->img[below].bytes)) below = i;
    }
    pick = fit >= 0 && !pool_loose(p->img[fit].bytes, need) ? fit : below;
    if (pick < 0 && fit >= 0) p->left_loose++;
  }
  if (pick >= 0) {
    *out = p->img[pick];
    memmove(&p->img[pick], &p->img[pick + 1], sizeof p->img[0] * (size_t)(p->n - pick - 1));
    p->n--;
    p->bytes -= out->bytes;
    p->reused++;
    p->last_use_ns = mono_ns();
  }
  pthread_mutex_unlock(&p->mu);
  return pick >= 0;
}

/* Closes (unmaps) every pooled image and gives its charge back: the bytes
 * freed. */
static int64_t pool_drain(image_pool *p) {
  pooled imgs[POOL_MAX];
  int n;
  pthread_mutex_lock(&p->mu);
  n = p->n;
  int64_t bytes = p->bytes;
  memcpy(imgs, p->img, sizeof imgs[0] * (size_t)n);
  p->n = 0;
  p->bytes = 0;
  if (p->s && bytes) uncharge(p->s, bytes);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < n; i++) pooled_free(&imgs[i]);
  return bytes;
}

void fsh_store_pool_drain(fsh_shuffle_store *s) { (void)pool_drain(s->pool); }

int64_t fsh_store_pool_drain_idle(fsh_shuffle_store *s, int64_t *due_ms) {
  image_pool *p = s->pool;
  pooled imgs[POOL_MAX];
  int n = 0;
  int64_t bytes = 0;
  pthread_mutex_lock(&p->mu);
  int64_t unused_ms = (mono_ns() - p->last_use_ns) / 1000000;
  bool never = p->idle_ms < 0; /* kept until needed (fsh_store_set_pool_idle_ms) */
  *due_ms = p->n == 0 || never ? -1 : unused_ms >= p->idle_ms ? 0 : p->idle_ms - unused_ms;
  if (p->n > 0 && !never && unused_ms >= p->idle_ms) { /* checked and taken under one lock:
                                                a writer's take meanwhile is not lost */
    n = p->n;
    bytes = p->bytes;
    memcpy(imgs, p->img, sizeof imgs[0] * (size_t)n);
    p->n = 0;
    p->bytes = 0;
    p->idle_drains++;
    if (p->s) uncharge(p->s, bytes);
    *due_ms = -1;
  }
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < n; i++) pooled_free(&imgs[i]); /* not under the lock */
  return bytes;
}

void fsh_store_set_pool_idle_ms(fsh_shuffle_store *s, int64_t ms) {
  pthread_mutex_lock(&s->pool->mu);
  s->pool->idle_ms = ms < 0 ? -1 : ms;
  pthread_mutex_unlock(&s->pool->mu);
}

void fsh_store_get_pool_stats(fsh_shuffle_store *s, fsh_store_pool_stats *out) {
  pthread_mutex_lock(&s->pool->mu);
  *out = (fsh_store_pool_stats){s->pool->n, s->pool->bytes, s->pool->reused,
                                atomic_load(&s->used), s->pool->idle_drains,
                                s->pool->left_loose};
  pthread_mutex_unlock(&s->pool->mu);
}

static void img_free(spill_out *o) {
  if (o->wmap) munmap(o->wmap, (size_t)o->wmap_len);
  o->wmap = NULL;
  o->wmap_len = o->wmap_ok = o->wmap_present = 0;
  if (o->img_fd >= 0) image_fd_close(o->img_fd);
  if (o->vm && o->img) munmap(o->img, (size_t)o->img_map);
  else fsh_free(o->img);
  o->img = NULL;
  o->vm = false;
  o->img_map = 0;
  o->img_fd = -1;
  o->img_size = o->img_cap = 0;
}

/* Room for `want` bytes of image: fsh_realloc of its pages (true), or
 * nothing to do for a memfd, which grows as written, or vm_resize of a VM
 * mapping; false when refused. The first growth of a shared-images store
 * makes the memfd, of a VM-images store the mapping (refused: fsh_realloc
 * from then on). */
static bool img_resize(spill_out *o, int64_t want) {
  if (o->s->shared_images && o->img_fd < 0 && !o->img && !o->no_memfd) {
    int fd = -1;
    if (atomic_fetch_add(&g_image_fds, 1) < image_fds_max())
      fd = memfd_create("fsh-image", MFD_CLOEXEC);
    if (fd >= 0) {
      o->img_fd = fd;
    } else {
      atomic_fetch_sub(&g_image_fds, 1);
      o->no_memfd = true;
    }
  }
  if (o->img_fd >= 0) return true;
  if (o->vm) return vm_resize(o, want);
  if (o->s->vm_images && !o->img && !o->no_vm) {
    if (vm_resize(o, want)) return true;
    o->no_vm = true;
  }
  uint8_t *p = fsh_realloc(o->img, (size_t)want);
  if (p) o->img = p;
  return p != NULL;
}

/* Writes all of iov to fd at offset at; 0 or an errno. */
static int pwrite_all(int fd, const struct iovec *iov, int n, int64_t at) {
  struct iovec v[64];
  for (int i = 0; i < n;) {
    int k = 0;
    for (; k < 64 && i + k < n; k++) v[k] = iov[i + k];
    int first = 0;
    while (first < k) {
      ssize_t w = pwritev(fd, v + first, k - first, at);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w < 0 ? errno : EIO;
      at += w;
      while (first < k && (size_t)w >= v[first].iov_len) w -= (ssize_t)v[first++].iov_len;
      if (first < k) {
        v[first].iov_base = (uint8_t *)v[first].iov_base + w;
        v[first].iov_len -= (size_t)w;
      }
    }
    i += k;
  }
  return 0;
}

/* Installs the writable page-table entries of a pooled memfd's mapping
 * for its bytes [from, n) (pages the memfd has) in one call, so that the
 * memcpy's into it do not fault page by page. With MADV_POPULATE_READ,
 * not _WRITE: on a shared writable mapping of shmem (no write notify) a
 * read fault maps the pages around it too (fault-around, 16 at a time)
 * and every entry it installs is writable already, where a write fault
 * maps its one page: bench_memfd's first reuse of a memfd, populate then
 * memcpy, 6.8 GB/s of CPU against 3.6 (1.88x), and run 2 of a 64 x 64
 * bench ~11% less CPU (PROFILE_64.md session 11). Best effort (a kernel
 * before 5.14 has neither: the writes fault them in). Bytes below `from`
 * have theirs already: the last image written through the same mapping
 * installed them (pooled.present) -- walking present entries again cost
 * ~4% of a warm 64 x 64 run's CPU (a page-table walk per 4 KiB page of
 * every image). Should the kernel have taken some away meanwhile
 * (reclaim, migration), or installed them read-only, the memcpy faults
 * them back: slower, never wrong. */
static void populate_write(uint8_t *map, int64_t from, int64_t n) {
#ifdef MADV_POPULATE_READ
  int64_t lo = from / 4096 * 4096, whole = n / 4096 * 4096;
  if (map && whole > lo) (void)madvise(map + lo, (size_t)(whole - lo), MADV_POPULATE_READ);
#else
  (void)map, (void)from, (void)n;
#endif
}

/* Writes iov at the image's end into its memfd: with memcpy through the
 * pooled memfd's mapping below wmap_ok (pages it has: 2.5x pwrite's rate
 * in CPU, session 9's bench in PROFILE_64.md), with pwrite past it (where
 * the memfd grows). 0 or pwrite's errno. */
static int memfd_writev(spill_out *o, const struct iovec *iov, int n) {
  int64_t at = o->img_size;
  int i = 0;
  size_t done = 0; /* of iov[i] */
  while (i < n && at < o->wmap_ok) {
    size_t k = iov[i].iov_len - done;
    if ((int64_t)k > o->wmap_ok - at) k = (size_t)(o->wmap_ok - at);
    memcpy(o->wmap + at, (const uint8_t *)iov[i].iov_base + done, k);
    at += (int64_t)k;
    done += k;
    if (done == iov[i].iov_len) i++, done = 0;
  }
  if (i == n) return 0;
  struct iovec first = {(uint8_t *)iov[i].iov_base + done, iov[i].iov_len - done};
  int e = pwrite_all(o->img_fd, &first, 1, at);
  if (e == 0 && i + 1 < n)
    e = pwrite_all(o->img_fd, iov + i + 1, n - i - 1, at + (int64_t)first.iov_len);
  return e;
}

/* Memory mode grows the image with fsh_realloc, never a fresh buffer and
 * a copy: a large image is its own mapping that the default allocator
 * grows in place (mremap), and bytes past the end are neither copied nor
 * zeroed -- the old fsh_buffer_resize growth copied and zero-filled every
 * doubling, page-faulting (huge pages past 32 MiB) more than it stored. */
static int spill_writev(fsh_output *out, const struct iovec *iov, int n, fsh_error *err) {
  spill_out *o = out->ctx;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
  if (!o->file && o->img_fd < 0 && !o->img && o->img_cap == 0 &&
      ((!o->no_memfd && o->s->shared_images) || (!o->no_vm && o->s->vm_images))) {
    /* a released image's memfd or mapping, pages and all (see the top) */
    pooled e;
    if (pool_take(o->s->pool, o->expect, &e)) {
      if (e.fd >= 0) {
        o->img_fd = e.fd;
        o->img_cap = e.bytes;
        o->wmap = e.addr;
        o->wmap_len = e.map_len;
        o->wmap_ok = e.addr ? (e.size < e.map_len ? e.size : e.map_len) : 0;
        o->wmap_present = e.present < o->wmap_ok ? e.present : o->wmap_ok;
        populate_write(o->wmap, o->wmap_present, o->wmap_ok);
        o->wmap_present = o->wmap_ok / 4096 * 4096;
      } else {
        o->img = e.addr;
        o->vm = true;
        o->img_map = e.bytes;
        o->img_cap = e.bytes - FSH_IMAGE_ID_BYTES;
      }
      o->charged = e.bytes;
      o->reused = true;
    }
  }
  if (!o->file && o->img_size + total > o->img_cap) {
    int64_t want = image_grow(o->img_cap, o->img_size + total);
    const char *why = NULL;
    bool room = charge(o->s, want - o->charged);
    if (!room && pool_drain(o->s->pool) > 0) room = charge(o->s, want - o->charged);
    if (!room && fsh_partition_builder_cache_bytes() > 0) { /* idle builders go first */
      fsh_partition_builder_cache_drop();
      room = charge(o->s, want - o->charged);
    }
    while (!room && evict_one(o->s)) room = charge(o->s, want - o->charged);
    if (!room) {
      why = "the memory budget is exhausted";
    } else {
      if (!img_resize(o, want)) {
        uncharge(o->s, want - o->charged);
        why = "out of memory";
      } else {
        o->img_cap = want;
        o->charged = want;
      }
    }
    if (why) FSH_RETURN_NOT_OK(spill_now(o, why, err));
  }
  if (!o->file && o->img_fd >= 0) {
    int e = memfd_writev(o, iov, n);
    if (e == 0) {
      o->img_size += total;
    } else { /* tmpfs refused (ENOMEM, ENOSPC): what it holds goes to a spill file */
      char why[96];
      snprintf(why, sizeof why, "writing the memory image: %s", strerror(e));
      if (ftruncate(o->img_fd, o->img_size) != 0) { /* a partial write stays unread */ }
      FSH_RETURN_NOT_OK(spill_now(o, why, err));
    }
  }
  if (o->file) {
    int rc = file_write(o, iov, n, err);
    if (rc != 0) return rc;
  } else if (o->img_fd < 0) {
    for (int i = 0; i < n; i++) {
      if (iov[i].iov_len) memcpy(o->img + o->img_size, iov[i].iov_base, iov[i].iov_len);
      o->img_size += (int64_t)iov[i].iov_len;
    }
  }
  out->position += total;
  return 0;
}

static void image_release(void *ctx) { fsh_free(ctx); }

/* A VM image's last reference: its image id cleared (the reuse guard),
 * then its mapping to the pool, or unmapped. */
static void vm_image_release(void *ctx) {
  vm_image *m = ctx;
  vm_clear_id(m->p, m->size);
  if (atomic_load(&m->no_pool) || !pool_put_vm(m->pool, m->p, m->len))
    munmap(m->p, (size_t)m->len);
  pool_unref(m->pool);
  fsh_free(m);
}

/* An image's last reference: its memfd to the pool, or closed. */
static void shm_image_release(void *ctx) {
  shm_image *m = ctx;
  if (atomic_load(&m->no_pool) ||
      !pool_put(m->pool, m->fd, m->size, m->p, m->len, m->present)) {
    munmap(m->p, (size_t)m->len);
    image_fd_close(m->fd);
  }
  pool_unref(m->pool);
  fsh_free(m);
}

/* Hands the image over as a buffer, shrunk to its size: the budget then
 * holds only that (when shrinking fails, the image keeps its capacity and
 * its charge). */
static int image_finish(spill_out *o, fsh_error *err) {
  int64_t size = o->img_size, keep = size > 0 ? size : 1;
  fsh_buffer *b = NULL;
  struct stat st;
  if ((o->img_fd >= 0 || o->vm) && size == 0) img_free(o); /* nothing to share: as a
                                                               private one */
  if (o->img_fd < 0) o->no_memfd = true;
  if (!o->vm) o->no_vm = true;
  uint64_t image_id = 0;
  if (o->vm) { /* shrunk to its pages, its identity trailer after it
                  (shuffle_internal.h); read in place by this process */
    if (o->img_map > vm_pages(size + FSH_IMAGE_ID_BYTES)) { /* shrunk to its pages */
      void *q = mremap(o->img, (size_t)o->img_map, (size_t)vm_pages(size + FSH_IMAGE_ID_BYTES), 0);
      if (q != MAP_FAILED) o->img_map = vm_pages(size + FSH_IMAGE_ID_BYTES);
    }
    image_id = atomic_fetch_add(&g_image_ids, 1u) + 1;
    fsh_image_id_encode(o->img + size, o->shuffle_id, o->map_id, o->attempt, image_id, size);
    vm_image *m = fsh_malloc(sizeof *m);
    if (m) {
      *m = (vm_image){o->img, size, o->img_map, o->s->pool, false};
      atomic_fetch_add(&o->s->pool->refs, 1);
    }
    if (m && !(b = fsh_buffer_wrap(o->img, size, vm_image_release, m))) {
      pool_unref(m->pool);
      fsh_free(m);
    }
    if (!b) return fsh_error_set(err, ENOMEM, "store %s: out of memory", o->s->name);
    o->img_cap = size;
    if (o->charged > size) {
      uncharge(o->s, o->charged - size);
      o->charged = size;
    }
  } else if (o->img_fd >= 0) { /* mapped for this process's readers (not
                          populated: most partitions are read by other
                          processes; bench_store_images measured write +
                          read back faster so) and, once pooled, the next
                          image's writes; its identity trailer after it
                          (shuffle_internal.h) */
    uint8_t id[FSH_IMAGE_ID_BYTES];
    image_id = atomic_fetch_add(&g_image_ids, 1u) + 1;
    fsh_image_id_encode(id, o->shuffle_id, o->map_id, o->attempt, image_id, size);
    if (o->reused && ftruncate(o->img_fd, size) != 0) /* the old image's rest */
      return fsh_error_set(err, EIO, "store %s: truncating a reused memory image: %s",
                           o->s->name, strerror(errno));
    struct iovec v = {id, sizeof id};
    int e = pwrite_all(o->img_fd, &v, 1, size);
    if (e != 0)
      return fsh_error_set(err, e == ENOSPC ? ENOSPC : ENOMEM, "store %s: writing the memory "
                           "image's identity: %s", o->s->name, strerror(e));
    if (fstat(o->img_fd, &st) != 0 || st.st_size != size + FSH_IMAGE_ID_BYTES)
      return fsh_error_set(err, EIO, "store %s: the memory image holds %lld bytes, %lld were "
                           "written", o->s->name, (long long)st.st_size,
                           (long long)(size + FSH_IMAGE_ID_BYTES));
    /* the pooled memfd's mapping when it covers the image (grown with
     * mremap when not), else a new one; read-write, for the next image */
    int64_t len = (size + 4095) / 4096 * 4096;
    uint8_t *p = NULL;
    int64_t present = 0; /* (a new mapping has no page-table entries yet) */
    if (o->wmap && o->wmap_len >= len) {
      p = o->wmap, len = o->wmap_len, present = o->wmap_present;
    } else if (o->wmap) { /* (mremap moves the entries along) */
      void *q = mremap(o->wmap, (size_t)o->wmap_len, (size_t)len, MREMAP_MAYMOVE);
      if (q != MAP_FAILED) p = q, present = o->wmap_present;
      else munmap(o->wmap, (size_t)o->wmap_len);
    }
    o->wmap = NULL;
    o->wmap_len = o->wmap_ok = o->wmap_present = 0;
    if (!p) {
      void *q = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, o->img_fd, 0);
      if (q == MAP_FAILED)
        return fsh_error_set(err, ENOMEM, "store %s: mapping a memory image of %lld bytes: %s",
                             o->s->name, (long long)size, strerror(errno));
      p = q;
    }
    shm_image *m = fsh_malloc(sizeof *m);
    if (m) {
      *m = (shm_image){p, size, len, present, o->img_fd, o->s->pool, false};
      atomic_fetch_add(&o->s->pool->refs, 1);
    }
    if (m && !(b = fsh_buffer_wrap(p, size, shm_image_release, m))) {
      pool_unref(m->pool);
      fsh_free(m);
    }
    if (!b) {
      munmap(p, (size_t)len);
      return fsh_error_set(err, ENOMEM, "store %s: out of memory", o->s->name);
    }
    o->img_cap = size;
    if (o->charged > size) {
      uncharge(o->s, o->charged - size);
      o->charged = size;
    }
  } else {
    if (!o->img || keep < o->img_cap) {
      bool shrunk = img_resize(o, keep);
      if (!shrunk && !o->img)
        return fsh_error_set(err, ENOMEM, "store %s: out of memory", o->s->name);
      if (shrunk) {
        o->img_cap = keep;
        if (o->charged > keep) { /* (an empty image was never charged) */
          uncharge(o->s, o->charged - keep);
          o->charged = keep;
        }
      }
    }
    b = fsh_buffer_wrap(o->img, size, image_release, o->img);
    if (!b) return fsh_error_set(err, ENOMEM, "store %s: out of memory", o->s->name);
  }
  o->result->image_fd = o->img_fd;
  o->result->image_vm = o->vm;
  if (o->img_fd >= 0) {
    o->result->image_dev = (uint64_t)st.st_dev, o->result->image_ino = (uint64_t)st.st_ino;
    o->result->image_id = image_id;
  }
  if (o->vm) o->result->image_id = image_id;
  o->img = NULL;
  o->vm = false;
  o->img_map = 0;
  o->img_fd = -1; /* the buffer owns it now */
  o->img_size = o->img_cap = 0;
  o->result->image = b;
  o->result->charged = o->charged;
  o->charged = 0;
  return 0;
}

static void spill_out_free(spill_out *o) {
  img_free(o);
  if (o->charged) uncharge(o->s, o->charged);
  fsh_free(o->path);
  fsh_free(o->tmp);
  fsh_free(o);
}

static int spill_close(fsh_output *out, bool abort, fsh_error *err) {
  spill_out *o = out->ctx;
  int rc = 0;
  if (o->file) {
    rc = o->file->close(o->file, abort, err);
    o->file = NULL;
    if (rc == 0 && !abort && rename(o->tmp, o->path) != 0)
      rc = fsh_error_set(err, EIO, "store %s: renaming %s: %s", o->s->name, o->tmp,
                         strerror(errno));
    if (rc != 0 || abort) unlink(o->tmp);
    if (rc == 0 && !abort) {
      o->result->path = o->path;
      o->result->file_bytes = out->position;
      o->path = NULL;
    }
  } else if (!abort) {
    rc = image_finish(o, err);
  }
  if (rc == 0 && !abort && !o->hinted) { /* the next unhinted writer's expected size */
    int64_t was = atomic_load(&o->s->recent_image), size = out->position;
    atomic_store(&o->s->recent_image, was > 0 ? (3 * was + size) / 4 : size);
  }
  spill_out_free(o);
  return rc;
}

/* ---- writer ------------------------------------------------------------ */

struct fsh_store_writer {
  fsh_shuffle_store *s;
  fsh_map_file_writer *mw;
  spill_result res;
  entry *e; /* allocated up front: publishing cannot fail */
  uint64_t gen; /* the store's release_gen when it opened */
  int64_t builders_charged; /* the map-file writer's partition builders */
  char what[128];
};

static void result_discard(fsh_shuffle_store *s, spill_result *r) {
  fsh_buffer_unref(r->image);
  if (r->charged) uncharge(s, r->charged);
  if (r->path) unlink(r->path);
  fsh_free(r->path);
  memset(r, 0, sizeof *r);
  r->image_fd = -1;
}

int fsh_store_writer_open(fsh_shuffle_store *s, const fsh_shuffle_spec *spec, int64_t map_id,
                          int32_t attempt, fsh_store_writer **out, fsh_error *err) {
  return fsh_store_writer_open_sized(s, spec, map_id, attempt, 0, out, err);
}

int fsh_store_writer_open_sized(fsh_shuffle_store *s, const fsh_shuffle_spec *spec,
                                int64_t map_id, int32_t attempt, int64_t expect_bytes,
                                fsh_store_writer **out, fsh_error *err) {
  fsh_store_writer *w = fsh_calloc(1, sizeof *w);
  spill_out *o = fsh_calloc(1, sizeof *o);
  entry *e = fsh_calloc(1, sizeof *e);
  if (!w || !o || !e) {
    fsh_free(w);
    fsh_free(o);
    fsh_free(e);
    return fsh_error_set(err, ENOMEM, "store %s: shuffle %" PRIu64 " map %" PRId64
                         ": out of memory", s->name, spec->shuffle_id, map_id);
  }
  w->s = s;
  w->e = e;
  pthread_mutex_lock(&s->mu);
  w->gen = s->release_gen;
  pthread_mutex_unlock(&s->mu);
  snprintf(w->what, sizeof w->what, "shuffle %" PRIu64 " map %" PRId64 " attempt %" PRId32,
           spec->shuffle_id, map_id, attempt);
  o->s = s;
  o->img_fd = -1;
  o->shuffle_id = spec->shuffle_id;
  o->map_id = map_id;
  o->attempt = attempt;
  o->hinted = expect_bytes > 0;
  o->expect = o->hinted ? expect_bytes : atomic_load(&s->recent_image);
  w->res.image_fd = -1;
  memcpy(o->what, w->what, sizeof o->what);
  spill_name(o->file_name, s->tag, spec->shuffle_id, map_id, attempt,
             atomic_fetch_add(&s->seq, 1u));
  o->result = &w->res;
  o->pub = (fsh_output){.writev = spill_writev, .close = spill_close, .ctx = o, .name = o->what};
  /* builders keep at most an eighth of the budget between blocks (they
   * are charged to it: charge_builders; what a block needs they hold
   * while it fills either way, so the keep costs the budget only between
   * blocks; a zero budget: the 2 MiB a partition always may keep) */
  int64_t keep = s->memory_limit / 8 > 0 ? s->memory_limit / 8 : 1;
  fsh_map_file_options opts = {
      .compression = spec->compression,
      .target_block_bytes = spec->target_block_bytes,
      .builder_keep_bytes = keep < FSH_PARTITION_BUILDER_KEEP_BYTES ? keep : 0};
  int rc = fsh_map_file_writer_open(&o->pub, spec, map_id, attempt, &opts, &w->mw, err);
  if (rc != 0) {
    fsh_free(e);
    fsh_free(w);
    return rc;
  }
  e->schema = fsh_schema_ref(spec->schema);
  *out = w;
  return 0;
}

int fsh_store_writer_write(fsh_store_writer *w, int32_t partition, fsh_batch *batch,
                           fsh_error *err) {
  return fsh_map_file_writer_write(w->mw, partition, batch, err);
}

int fsh_store_writer_finish_partition(fsh_store_writer *w, int32_t partition, fsh_error *err) {
  return fsh_map_file_writer_finish_partition(w->mw, partition, err);
}

int fsh_store_writer_write_block(fsh_store_writer *w, int32_t partition, const uint8_t *data,
                                 int64_t len, int64_t rows, uint64_t checksum, fsh_error *err) {
  return fsh_map_file_writer_write_block(w->mw, partition, data, len, rows, checksum, err);
}

/* Brings the budget's charge for the writer's partition builders to what
 * they hold now (w->mw NULL: nothing). Growth the budget refuses first
 * drops the idle builders' cache, then evicts older images; memory the
 * builders already hold is charged even past the limit (later images then
 * spill). When the store is then at its limit, idle builders are dropped
 * too: they are not charged. */
static void charge_builders(fsh_store_writer *w) {
  fsh_shuffle_store *s = w->s;
  int64_t now = w->mw ? fsh_map_file_writer_builder_bytes(w->mw) : 0, d = now - w->builders_charged;
  if (d > 0) {
    bool room = charge(s, d);
    if (!room && pool_drain(s->pool) > 0) room = charge(s, d);
    if (!room && fsh_partition_builder_cache_bytes() > 0) {
      fsh_partition_builder_cache_drop();
      room = charge(s, d);
    }
    while (!room && evict_one(s)) room = charge(s, d);
    if (!room) atomic_fetch_add(&s->used, d);
  } else if (d < 0) {
    uncharge(s, -d);
  }
  w->builders_charged = now;
}

/* After a writer's builders went back to the cache: idle builders that do
 * not fit in what the budget has left are dropped. */
static void trim_idle_builders(fsh_shuffle_store *s) {
  int64_t idle = fsh_partition_builder_cache_bytes();
  if (idle > 0 && atomic_load(&s->used) + idle > s->memory_limit) fsh_partition_builder_cache_drop();
}

int fsh_store_writer_write_rows(fsh_store_writer *w, fsh_batch *batch,
                                const int32_t *partition_of_row, fsh_error *err) {
  int rc = fsh_map_file_writer_write_rows(w->mw, batch, partition_of_row, err);
  charge_builders(w);
  return rc;
}

static void writer_free(fsh_store_writer *w) {
  if (w->e) {
    fsh_schema_unref(w->e->schema);
    fsh_free(w->e);
  }
  fsh_free(w);
}

void fsh_store_writer_abort(fsh_store_writer *w) {
  if (!w) return;
  fsh_shuffle_store *s = w->s;
  fsh_map_file_writer_abort(w->mw);
  w->mw = NULL;
  charge_builders(w); /* back to 0 */
  result_discard(s, &w->res);
  writer_free(w);
  trim_idle_builders(s);
}

/* Whether shuffle_id was released after generation gen (among the last
 * RELEASED_MAX releases). mu held. */
static bool released_since(const fsh_shuffle_store *s, uint64_t shuffle_id, uint64_t gen) {
  for (int i = 0; i < s->n_released; i++)
    if (s->released[i].shuffle_id == shuffle_id && s->released[i].gen > gen) return true;
  return false;
}

int fsh_store_writer_close(fsh_store_writer *w, fsh_map_output *out, fsh_error *err) {
  fsh_shuffle_store *s = w->s;
  fsh_map_output m;
  int rc = fsh_map_file_writer_close(w->mw, &m, err);
  w->mw = NULL;
  charge_builders(w); /* back to 0 */
  trim_idle_builders(s);
  if (rc == 0 && fsh_map_output_copy(&w->e->meta, &m) != 0) {
    fsh_map_output_reset(&m);
    rc = fsh_error_set(err, ENOMEM, "store %s: %s: out of memory", s->name, w->what);
  }
  if (rc != 0) {
    result_discard(s, &w->res);
    writer_free(w);
    return rc;
  }
  entry *e = w->e;
  w->e = NULL;
  e->image = w->res.image;
  e->image_fd = w->res.image_fd;
  e->image_vm = w->res.image_vm;
  e->image_dev = w->res.image_dev;
  e->image_ino = w->res.image_ino;
  e->image_id = w->res.image_id;
  e->charged = w->res.charged;
  e->path = w->res.path;
  e->file_bytes = w->res.file_bytes;
  e->published = atomic_fetch_add(&s->seq, 1u);
  snprintf(e->image_name, sizeof e->image_name, "%s memory image of shuffle %" PRIu64 " map %"
           PRId64 " attempt %" PRId32, s->name, e->meta.shuffle_id, e->meta.map_id,
           e->meta.attempt);
  memset(&w->res, 0, sizeof w->res);
  w->res.image_fd = -1;
  pthread_mutex_lock(&s->mu);
  if (released_since(s, e->meta.shuffle_id, w->gen)) { /* nobody will read or release it */
    pthread_mutex_unlock(&s->mu);
    entry_destroy(s, e);
    fsh_map_output_reset(&m);
    rc = fsh_error_set(err, ECANCELED, "store %s: %s: the shuffle was released while the map "
                       "output was being written: output dropped", s->name, w->what);
    writer_free(w);
    return rc;
  }
  entry **l = find_link(s, e->meta.shuffle_id, e->meta.map_id, e->meta.attempt);
  entry *old = *l;
  e->next = old ? old->next : NULL;
  *l = e;
  if (!old) s->n_entries++;
  if (old && old->path) s->spilled_outputs--, s->spilled_bytes -= old->file_bytes;
  if (e->path) s->spilled_outputs++, s->spilled_bytes += e->file_bytes;
  maybe_grow(s);
  pthread_mutex_unlock(&s->mu);
  entry_destroy(s, old);
  writer_free(w);
  *out = m;
  return 0;
}

/* ---- lookups ----------------------------------------------------------- */

/* Where an opened map output's bytes are, for same-host readers. */
typedef struct held_where {
  int image_fd; /* a memory image's memfd (-1: not shareable, or a file) */
  uint64_t image_dev, image_ino, image_id;
  uint64_t vm_addr; /* a VM image's address (0: not one) */
  char *path;   /* a spill file (owned), or NULL */
} held_where;

/* fsh_store_open, also saying (where != NULL) where the bytes opened are. */
static int open_held(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt,
                     fsh_map_file **out, held_where *where, fsh_error *err) {
  fsh_buffer *image = NULL;
  char *path = NULL;
  fsh_map_file_head *head = NULL;
  uint64_t published = 0;
  char name[sizeof ((entry *)0)->image_name];
  bool found = false, oom = false;
  pthread_mutex_lock(&s->mu);
  entry *e = *find_link(s, shuffle_id, map_id, attempt);
  if (e) {
    found = true;
    published = e->published;
    if (e->head) head = fsh_map_file_head_ref(e->head);
    if (e->image) {
      image = fsh_buffer_ref(e->image);
      memcpy(name, e->image_name, sizeof name);
      if (where)
        *where = (held_where){e->image_fd, e->image_dev, e->image_ino, e->image_id,
                              e->image_vm ? (uint64_t)(uintptr_t)e->image->data : 0, NULL};
    } else if (!(path = fsh_strdup(e->path))) {
      oom = true;
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (oom) {
    fsh_map_file_head_unref(head);
    return fsh_error_set(err, ENOMEM, "store %s: out of memory", s->name);
  }
  if (!found)
    return fsh_error_set(err, ENOENT, "store %s: shuffle %" PRIu64 " map %" PRId64 " attempt %"
                         PRId32 " is not held here (released, lost, or never written)", s->name,
                         shuffle_id, map_id, attempt);
  int rc;
  fsh_input *in = NULL;
  if (image && head) { /* verified before: the image itself, no input */
    rc = fsh_map_file_open_image(image, name, head, out, err);
    fsh_buffer_unref(image);
    fsh_map_file_head_unref(head);
    return rc;
  }
  if (image) {
    rc = fsh_input_from_buffer_named(image, name, &in, err);
  } else {
    rc = fsh_input_open_path(path, &in, err);
    if (rc == ENOENT)
      rc = fsh_error_set(err, ENOENT, "store %s: shuffle %" PRIu64 " map %" PRId64 " attempt %"
                         PRId32 ": spill file %s is missing from disk (deleted, or released "
                         "meanwhile): the map output is lost", s->name,
                         shuffle_id, map_id, attempt, path);
    if (rc == 0 && where) *where = (held_where){-1, 0, 0, 0, 0, path};
    else fsh_free(path);
  }
  if (rc == 0)
    rc = head ? fsh_map_file_open_head(in, head, out, err) : fsh_map_file_open(in, out, err);
  fsh_map_file_head_unref(head);
  if (rc == 0 && !head) { /* keep what was verified, if the output is still this one */
    pthread_mutex_lock(&s->mu);
    e = *find_link(s, shuffle_id, map_id, attempt);
    if (e && e->published == published && !e->head)
      e->head = fsh_map_file_head_ref(fsh_map_file_head_of(*out));
    pthread_mutex_unlock(&s->mu);
  }
  if (rc == 0 && image) { /* verified through an input: now the image itself, as later opens */
    fsh_map_file *verified = *out;
    *out = NULL;
    rc = fsh_map_file_open_image(image, name, fsh_map_file_head_of(verified), out, err);
    fsh_map_file_close(verified);
  }
  fsh_buffer_unref(image);
  if (rc != 0 && where) {
    fsh_free(where->path);
    where->path = NULL;
  }
  return rc;
}

int fsh_store_open(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt,
                   fsh_map_file **out, fsh_error *err) {
  return open_held(s, shuffle_id, map_id, attempt, out, NULL, err);
}

void fsh_store_location_reset(fsh_store_location *l) {
  fsh_free(l->name);
  fsh_map_file_partition_reset(&l->part);
  fsh_buffer_unref(l->schema_msg);
  memset(l, 0, sizeof *l);
}

int fsh_store_locate(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt,
                     int32_t partition, fsh_store_location *out, fsh_error *err) {
  return fsh_store_locate_run(s, shuffle_id, map_id, attempt, partition, 1, out, err);
}

int fsh_store_locate_run(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id,
                         int32_t attempt, int32_t first, int32_t count, fsh_store_location *out,
                         fsh_error *err) {
  memset(out, 0, sizeof *out * (size_t)(count > 0 ? count : 0));
  fsh_map_file *f = NULL;
  held_where w = {-1, 0, 0, 0, 0, NULL};
  int rc = open_held(s, shuffle_id, map_id, attempt, &f, &w, err);
  if (rc != 0) return rc;
  const fsh_map_file_info *info = fsh_map_file_get_info(f);
  if (first < 0 || count < 1 || (int64_t)first + count > info->n_partitions)
    rc = fsh_error_set(err, EINVAL, "store %s: shuffle %" PRIu64 " map %" PRId64 " attempt %"
                       PRId32 " has %d partitions, not %" PRId64, s->name, shuffle_id, map_id,
                       attempt, info->n_partitions, (int64_t)first + count);
  /* where the file is: once for the run */
  fsh_store_location where = {.kind = FSH_STORE_AT_NONE};
  if (rc == 0 && w.path) {
    struct stat st;
    for (int i = 0; i < s->n_dirs && where.kind == FSH_STORE_AT_NONE; i++) {
      size_t n = strlen(s->dirs[i]);
      const char *name = w.path + n + 1;
      if (strncmp(w.path, s->dirs[i], n) != 0 || w.path[n] != '/' || strchr(name, '/'))
        continue;
      if (stat(w.path, &st) != 0) break; /* gone meanwhile: DoGet tells */
      where.kind = FSH_STORE_AT_FILE;
      where.dir = i;
      where.name = (char *)name; /* copied per entry below */
      where.dev = (uint64_t)st.st_dev;
      where.ino = (uint64_t)st.st_ino;
    }
  } else if (rc == 0 && w.vm_addr) {
    where.kind = FSH_STORE_AT_VM;
    where.addr = w.vm_addr;
    where.image_id = w.image_id;
  } else if (rc == 0 && w.image_fd >= 0) {
    where.kind = FSH_STORE_AT_MEMFD;
    where.fd = w.image_fd;
    where.dev = w.image_dev;
    where.ino = w.image_ino;
    where.image_id = w.image_id;
  }
  for (int32_t k = 0; rc == 0 && k < count; k++) {
    fsh_store_location *o = &out[k];
    rc = fsh_map_file_get_partition(f, first + k, &o->part, err);
    if (rc != 0) break;
    o->size = info->file_size;
    o->schema_msg = fsh_buffer_ref(fsh_map_file_schema_message(f));
    o->kind = where.kind;
    o->dir = where.dir;
    o->fd = where.fd;
    o->dev = where.dev;
    o->ino = where.ino;
    o->image_id = where.image_id;
    o->addr = where.addr;
    if (where.kind == FSH_STORE_AT_FILE && !(o->name = fsh_strdup(where.name)))
      rc = fsh_error_set(err, ENOMEM, "store %s: out of memory", s->name);
  }
  fsh_free(w.path);
  fsh_map_file_close(f);
  if (rc != 0)
    for (int32_t k = 0; k < count; k++) fsh_store_location_reset(&out[k]);
  return rc;
}

int fsh_store_spill_dirs(const fsh_shuffle_store *s, const char *const **dirs) {
  *dirs = (const char *const *)s->dirs;
  return s->n_dirs;
}

bool fsh_store_has(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt,
                   int32_t *n_partitions) {
  pthread_mutex_lock(&s->mu);
  entry *e = *find_link(s, shuffle_id, map_id, attempt);
  if (e && n_partitions) *n_partitions = e->meta.n_partitions;
  pthread_mutex_unlock(&s->mu);
  return e != NULL;
}

void fsh_store_items_free(fsh_store_item *items, int64_t n) {
  for (int64_t i = 0; items && i < n; i++) {
    fsh_map_output_reset(&items[i].meta);
    fsh_schema_unref(items[i].schema);
  }
  fsh_free(items);
}

/* A spilled map output whose file is gone from disk (deleted behind the
 * store's back) is lost: it is not listed (a DoGet of it still says which
 * file is missing). The files are checked outside the lock. */
int fsh_store_list(fsh_shuffle_store *s, fsh_store_item **out, int64_t *n_out, fsh_error *err) {
  pthread_mutex_lock(&s->mu);
  int64_t n = s->n_entries, k = 0;
  fsh_store_item *items = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *items);
  char **paths = fsh_calloc(n > 0 ? (size_t)n : 1, sizeof *paths);
  int rc = items && paths ? 0 : ENOMEM;
  for (int64_t i = 0; rc == 0 && i < s->n_buckets; i++)
    for (entry *e = s->buckets[i]; rc == 0 && e; e = e->next) {
      rc = fsh_map_output_copy(&items[k].meta, &e->meta);
      if (rc == 0 && e->path && !(paths[k] = fsh_strdup(e->path))) {
        fsh_map_output_reset(&items[k].meta);
        rc = ENOMEM;
      }
      if (rc == 0) items[k++].schema = fsh_schema_ref(e->schema);
    }
  pthread_mutex_unlock(&s->mu);
  int64_t kept = 0;
  for (int64_t i = 0; rc == 0 && i < k; i++) {
    struct stat st;
    if (paths[i] && stat(paths[i], &st) != 0 && errno == ENOENT) {
      fsh_map_output_reset(&items[i].meta);
      fsh_schema_unref(items[i].schema);
      continue;
    }
    items[kept++] = items[i];
  }
  if (rc == 0) k = kept;
  for (int64_t i = 0; paths && i < n; i++) fsh_free(paths[i]);
  fsh_free(paths);
  if (rc != 0) {
    fsh_store_items_free(items, k);
    return fsh_error_set(err, ENOMEM, "store %s: out of memory listing %" PRId64 " map outputs",
                         s->name, n);
  }
  *out = items;
  *n_out = k;
  return 0;
}

void fsh_shuffle_store_get_stats(fsh_shuffle_store *s, fsh_shuffle_store_stats *out) {
  pthread_mutex_lock(&s->mu);
  out->map_outputs = s->n_entries;
  out->spilled_outputs = s->spilled_outputs;
  out->spilled_bytes = s->spilled_bytes;
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&s->pool->mu);
  out->memory_bytes = atomic_load(&s->used) - s->pool->bytes; /* the pool holds no output */
  pthread_mutex_unlock(&s->pool->mu);
}

/* ---- release ----------------------------------------------------------- */

int fsh_store_release(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t *n_outputs,
                      int64_t *n_bytes, fsh_error *err) {
  (void)err;
  entry *dead = NULL;
  int64_t count = 0, bytes = 0;
  pthread_mutex_lock(&s->mu);
  s->released[s->next_released].shuffle_id = shuffle_id;
  s->released[s->next_released].gen = ++s->release_gen;
  s->next_released = (s->next_released + 1) % RELEASED_MAX;
  if (s->n_released < RELEASED_MAX) s->n_released++;
  for (int64_t i = 0; i < s->n_buckets; i++) {
    entry **l = &s->buckets[i];
    while (*l) {
      entry *e = *l;
      if (e->meta.shuffle_id != shuffle_id) {
        l = &e->next;
        continue;
      }
      *l = e->next;
      e->next = dead;
      dead = e;
      s->n_entries--;
      if (e->path) s->spilled_outputs--, s->spilled_bytes -= e->file_bytes;
      count++;
      bytes += e->image ? e->image->size : e->file_bytes;
    }
  }
  pthread_mutex_unlock(&s->mu);
  while (dead) { /* memory and files go outside the lock */
    entry *next = dead->next;
    entry_destroy(s, dead);
    dead = next;
  }
  if (n_outputs) *n_outputs = count;
  if (n_bytes) *n_bytes = bytes;
  return 0;
}

bool fsh_store_drop(fsh_shuffle_store *s, uint64_t shuffle_id, int64_t map_id, int32_t attempt) {
  pthread_mutex_lock(&s->mu);
  entry **l = find_link(s, shuffle_id, map_id, attempt);
  entry *e = *l;
  if (e) {
    *l = e->next;
    s->n_entries--;
    if (e->path) s->spilled_outputs--, s->spilled_bytes -= e->file_bytes;
  }
  pthread_mutex_unlock(&s->mu);
  entry_destroy(s, e); /* memory and file outside the lock */
  return e != NULL;
}

int fsh_shuffle_store_release(fsh_shuffle_store *s, uint64_t shuffle_id, fsh_error *err) {
  if (!s) return fsh_error_set(err, EINVAL, "release: NULL store");
  return fsh_store_release(s, shuffle_id, NULL, NULL, err);
}

/* ---- lifecycle --------------------------------------------------------- */

int fsh_store_set_name(fsh_shuffle_store *s, const char *name) {
  snprintf(s->name, sizeof s->name, "%s", name);
  return 0;
}

const char *fsh_store_name(const fsh_shuffle_store *s) { return s->name; }

/* mkdir -p dir, then removes the spill files (and temp files) a crashed
 * earlier run left in it, and the exec layer's operator spill files of
 * processes that are gone (or of this one); nothing else is touched. */
static int prepare_dir(const char *dir, fsh_error *err) {
  char *p = fsh_strdup(dir);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory");
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char saved = *c;
    *c = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      int e = errno;
      int rc = fsh_error_set(err, e == EACCES || e == ENOTDIR || e == EROFS ? e : EIO,
                             "spill directory %s: cannot create %s: %s", dir, p, strerror(e));
      fsh_free(p);
      return rc;
    }
    *c = saved;
    if (saved == '\0') break;
  }
  fsh_free(p);
  DIR *d = opendir(dir);
  if (!d) {
    int e = errno;
    return fsh_error_set(err, e == ENOTDIR || e == EACCES ? e : EIO,
                         "spill directory %s: cannot list it: %s", dir, strerror(e));
  }
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    long pid = 0;
    if (!is_spill_name(de->d_name) &&
        !(is_exec_spill_name(de->d_name, &pid) && !exec_spill_live(pid)))
      continue;
    if (unlinkat(dirfd(d), de->d_name, 0) != 0 && errno != ENOENT && rc == 0)
      rc = fsh_error_set(err, EIO, "spill directory %s: cannot remove the leftover %s: %s", dir,
                         de->d_name, strerror(errno));
  }
  closedir(d);
  if (rc == 0 && access(dir, W_OK | X_OK) != 0)
    rc = fsh_error_set(err, EACCES, "spill directory %s is not writable: %s", dir,
                       strerror(errno));
  return rc;
}

void fsh_shuffle_store_free(fsh_shuffle_store *s) {
  if (!s) return;
  if (s->pool) { /* images released later close their memfds */
    (void)pool_drain(s->pool);
    pthread_mutex_lock(&s->pool->mu);
    s->pool->s = NULL;
    pthread_mutex_unlock(&s->pool->mu);
  }
  if (s->buckets)
    for (int64_t i = 0; i < s->n_buckets; i++)
      for (entry *e = s->buckets[i], *next; e; e = next) {
        next = e->next;
        entry_destroy(s, e);
      }
  fsh_free(s->buckets);
  for (int i = 0; i < s->n_dirs; i++) fsh_free(s->dirs[i]);
  fsh_free(s->dirs);
  pool_unref(s->pool);
  pthread_mutex_destroy(&s->mu);
  fsh_free(s);
}

bool fsh_store_images_parse(const char *name, fsh_store_images *out) {
  static const struct { const char *name; fsh_store_images v; } kinds[] = {
      {"vm", FSH_STORE_IMAGES_VM}, {"memfd", FSH_STORE_IMAGES_MEMFD},
      {"private", FSH_STORE_IMAGES_PRIVATE}, {"vm-4k", FSH_STORE_IMAGES_VM_4K}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(name, kinds[i].name) == 0) {
      *out = kinds[i].v;
      return true;
    }
  return false;
}

int fsh_shuffle_store_new(const fsh_shuffle_store_options *opts, fsh_shuffle_store **out,
                          fsh_error *err) {
  if (!opts || !out || opts->n_spill_dirs < 0 || (opts->n_spill_dirs > 0 && !opts->spill_dirs) ||
      opts->memory_limit < 0 || (unsigned)opts->images > FSH_STORE_IMAGES_VM_4K)
    return fsh_error_set(err, EINVAL, "store: bad options (spill directories or memory limit)");
  fsh_shuffle_store *s = fsh_calloc(1, sizeof *s);
  if (!s) return fsh_error_set(err, ENOMEM, "store: out of memory");
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    fsh_free(s);
    return fsh_error_set(err, ENOMEM, "store: cannot create a mutex");
  }
  s->pool = fsh_calloc(1, sizeof *s->pool);
  if (!s->pool || pthread_mutex_init(&s->pool->mu, NULL) != 0) {
    fsh_free(s->pool);
    pthread_mutex_destroy(&s->mu);
    fsh_free(s);
    return fsh_error_set(err, ENOMEM, "store: out of memory");
  }
  atomic_init(&s->pool->refs, 1);
  s->pool->s = s;
  s->pool->max_bytes = opts->memory_limit / 4;
  s->pool->idle_ms = POOL_IDLE_MS;
  s->n_buckets = 64;
  s->buckets = fsh_calloc((size_t)s->n_buckets, sizeof *s->buckets);
  snprintf(s->name, sizeof s->name, "%s", opts->name ? opts->name : "store");
  s->dirs = fsh_calloc(opts->n_spill_dirs > 0 ? (size_t)opts->n_spill_dirs : 1, sizeof *s->dirs);
  int rc = s->buckets && s->dirs ? 0 : fsh_error_set(err, ENOMEM, "store: out of memory");
  for (int i = 0; rc == 0 && i < opts->n_spill_dirs; i++) {
    const char *d = opts->spill_dirs[i];
    if (!d || !d[0]) {
      rc = fsh_error_set(err, EINVAL, "store: spill directory %d is empty", i);
      break;
    }
    if (!(s->dirs[i] = fsh_strdup(d))) {
      rc = fsh_error_set(err, ENOMEM, "store: out of memory");
      break;
    }
    s->n_dirs++;
    for (size_t n = strlen(s->dirs[i]); n > 1 && s->dirs[i][n - 1] == '/'; n--)
      s->dirs[i][n - 1] = '\0';
    rc = prepare_dir(s->dirs[i], err);
  }
  if (rc != 0) {
    fsh_shuffle_store_free(s);
    return rc;
  }
  s->memory_limit = opts->memory_limit;
  fsh_store_images im = opts->private_images ? FSH_STORE_IMAGES_PRIVATE : opts->images;
  s->shared_images = im == FSH_STORE_IMAGES_MEMFD;
  s->vm_images = im == FSH_STORE_IMAGES_VM || im == FSH_STORE_IMAGES_VM_4K;
  s->vm_huge = im == FSH_STORE_IMAGES_VM;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  s->tag = key_hash((uint64_t)getpid(), ts.tv_nsec, (int32_t)ts.tv_sec) ^ (uint64_t)(uintptr_t)s;
  *out = s;
  return 0;
}
