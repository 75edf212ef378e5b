/* test_store_pool.c -- the store's reuse of released memory images' memfds
 * (store.c, "Reused memfds"; the identity trailer, shuffle_internal.h):
 *  - a released image's memfd goes to the pool, charged to the budget (not
 *    to memory_bytes), and the next image is written into that very memfd
 *    (same inode), with a new identity; the budget accounting is exact
 *    through release, pooling, reuse and drain;
 *  - a memfd that another open file description holds (a reader's open of
 *    /proc/self/fd/N, or only its mapping) is not pooled, and the reader's
 *    mapping keeps the old bytes while the next image is written;
 *  - a stale locate answer (the image released, its memfd reused for an
 *    image of the same map output, same size) is refused by the reader's
 *    open (fr_direct_open), the fresh answer accepted, its bytes the
 *    image's;
 *  - under a small budget a pooled memfd does not stop a large output from
 *    being written (it spills), and nothing stays charged;
 *  - an idle pool is emptied (fsh_store_pool_drain_idle): not before its
 *    idle time, then every memfd closed and its charge given back (budget
 *    0); a writer arriving within the idle time still reuses a memfd; and
 *    a worker's keeper thread (worker.c) does it by itself, in time, and
 *    drops the idle partition builders' cache;
 *  - an idle time of "never" (< 0): the pool is kept however long it is
 *    unused, still emptied by a writer's budget and by an explicit drain,
 *    the budget exact throughout; a worker set so
 *    (fsh_shuffle_worker_set_idle_ms) keeps its pool and its builders'
 *    cache past the default idle time, and gives both back once set to a
 *    short window again;
 *  - size-aware reuse: a writer takes the smallest pooled memfd that holds
 *    what it expects (its opener's size, or the store's recent average),
 *    grows past a smaller one, and leaves one more than twice its need
 *    (+1 MiB) whole for a larger writer; a merge expects its parts' bytes;
 *    the pool's caps (64 memfds, a
 *    quarter of the memory limit); the budget exact after every step.
 * Every store here keeps memfd images (FSH_STORE_IMAGES_MEMFD: the default
 * is VM images, whose pool test_store_vm checks). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "shuffle/flight_reader.h"
#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"
#include "shuffle/store_fixture.h"

enum { PARTS = 4 };

/* Writes map output (shuffle, map 0, attempt 0) of `rows` synthetic rows of
 * seed `seed` (rows spread over PARTS partitions by row number), its
 * writer expecting `expect` bytes (0: unknown). */
static void write_map(fixture *f, uint64_t shuffle, int64_t map, uint64_t seed, int64_t rows,
                      int64_t expect) {
  fsh_shuffle_spec spec = {.shuffle_id = shuffle, .n_partitions = PARTS, .schema = f->schema};
  fsh_store_writer *w = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_writer_open_sized(f->s, &spec, map, 0, expect, &w, &err));
  if (!w) return;
  fsh_batch *b = stu_synthetic(seed, rows);
  int32_t *parts = STU_OK(malloc(sizeof *parts * (size_t)rows));
  for (int64_t r = 0; r < rows; r++) parts[r] = (int32_t)(r % PARTS);
  CHECK_OK(fsh_store_writer_write_rows(w, b, parts, &err));
  fsh_map_output m = {0};
  CHECK_OK(fsh_store_writer_close(w, &m, &err));
  fsh_map_output_reset(&m);
  fsh_batch_unref(b);
  free(parts);
}

static void write_sized(fixture *f, uint64_t shuffle, uint64_t seed, int64_t rows,
                        int64_t expect) {
  write_map(f, shuffle, 0, seed, rows, expect);
}

static void write_output(fixture *f, uint64_t shuffle, uint64_t seed, int64_t rows) {
  write_sized(f, shuffle, seed, rows, 0);
}

static fsh_store_location locate(fixture *f, uint64_t shuffle) {
  fsh_store_location l;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_locate(f->s, shuffle, 0, 0, 1, &l, &err));
  return l;
}

static uint64_t ino_of_fd(int fd) {
  struct stat st;
  CHECK(fstat(fd, &st) == 0);
  return (uint64_t)st.st_ino;
}

static int64_t count_map_rows(fixture *f, uint64_t shuffle, int64_t map) {
  return store_count_rows(f, shuffle, map, PARTS);
}

static int64_t count_rows(fixture *f, uint64_t shuffle) { return count_map_rows(f, shuffle, 0); }

static void reuse_happens(void) {
  fixture f = open_store_images("pool", (int64_t)64 << 20, FSH_STORE_IMAGES_MEMFD);
  write_output(&f, 1, 11, 20000);
  fsh_store_location a = locate(&f, 1);
  CHECK_EQ_INT(a.kind, FSH_STORE_AT_MEMFD);
  int64_t held = store_stats(f.s).memory_bytes;
  CHECK(held >= a.size);
  store_check_budget(&f, "held");
  store_release(&f, 1);
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_EQ_INT(p.pooled, 1);
  /* its pages: the image's size in whole pages */
  CHECK_EQ_INT(p.pooled_bytes, (a.size + 4095) / 4096 * 4096);
  CHECK_EQ_INT(store_stats(f.s).memory_bytes, 0);
  store_check_budget(&f, "pooled");
  /* the pooled memfd is still open under the same number, without the
   * trailer (a reader cannot take it for the image) */
  CHECK_EQ_INT(ino_of_fd(a.fd), a.ino);
  struct stat st;
  CHECK(fstat(a.fd, &st) == 0 && st.st_size == a.size);

  write_output(&f, 2, 12, 30000);
  fsh_store_location b = locate(&f, 2);
  p = store_pool(f.s);
  CHECK_EQ_INT(p.reused, 1);
  CHECK_EQ_INT(p.pooled, 0);
  CHECK_EQ_INT(b.kind, FSH_STORE_AT_MEMFD);
  CHECK_MSG(b.ino == a.ino && b.fd == a.fd, "not the same memfd: ino %llu fd %d, was %llu fd %d",
            (unsigned long long)b.ino, b.fd, (unsigned long long)a.ino, a.fd);
  CHECK(b.image_id != 0 && b.image_id != a.image_id);
  CHECK(fstat(b.fd, &st) == 0 && st.st_size == b.size + FSH_IMAGE_ID_BYTES);
  store_check_budget(&f, "reused");
  /* the reused image reads back right: every partition's rows */
  int64_t rows = count_rows(&f, 2);
  CHECK_EQ_INT(rows, 30000);
  store_release(&f, 2);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  fsh_store_pool_drain(f.s);
  p = store_pool(f.s);
  CHECK_MSG(p.pooled == 0 && p.pooled_bytes == 0 && p.budget_used == 0,
            "drained: %lld pooled, %lld bytes, budget %lld", (long long)p.pooled,
            (long long)p.pooled_bytes, (long long)p.budget_used);
  CHECK(fcntl(b.fd, F_GETFD) < 0); /* closed */
  fsh_store_location_reset(&a);
  fsh_store_location_reset(&b);
  close_store(&f);
}

/* A reader that has the image open (or only mapped) when it is released:
 * not pooled; the next image gets another memfd; the reader's bytes stay
 * the old ones. */
static void held_image_not_reused(void) {
  for (int only_mapped = 0; only_mapped < 2; only_mapped++) {
    fixture f = open_store_images("pool", (int64_t)64 << 20, FSH_STORE_IMAGES_MEMFD);
    write_output(&f, 1, 21, 20000);
    fsh_store_location a = locate(&f, 1);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", a.fd);
    int rfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    CHECK(rfd >= 0);
    size_t len = (size_t)a.size;
    uint8_t *m = mmap(NULL, len, PROT_READ, MAP_SHARED, rfd, 0);
    CHECK(m != MAP_FAILED);
    uint8_t *copy = STU_OK(malloc(len));
    memcpy(copy, m, len);
    if (only_mapped) {
      close(rfd);
      rfd = -1;
    }
    store_release(&f, 1);
    fsh_store_pool_stats p = store_pool(f.s);
    CHECK_MSG(p.pooled == 0, "%s: a memfd a reader holds was pooled",
              only_mapped ? "mapped" : "open");
    write_output(&f, 2, 22, 20000);
    fsh_store_location b = locate(&f, 2);
    CHECK_EQ_INT(store_pool(f.s).reused, 0);
    CHECK(b.ino != a.ino);
    CHECK_MSG(memcmp(m, copy, len) == 0, "the reader's mapping changed");
    munmap(m, len);
    if (rfd >= 0) close(rfd);
    free(copy);
    store_check_budget(&f, "after");
    fsh_store_location_reset(&a);
    fsh_store_location_reset(&b);
    close_store(&f);
  }
}

/* A direct-read answer of the store's locate action (worker_locate.c) for
 * (shuffle, map 0, attempt 0), partition 1, as the reader decodes it, with
 * what was asked filled in as fr_direct_locate does. */
static void answer_for(fixture *f, uint64_t shuffle, fr_direct *d) {
  memset(d, 0, sizeof *d);
  fsh_ticket_source src = {0, 0};
  fsh_shuffle_ticket t = {.shuffle_id = shuffle, .partition = 1, .n_sources = 1,
                          .sources = &src};
  fsh_buffer *tb = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
  if (!tb) return;
  CHECK_OK(fsh_worker_locate(f->s, tb->data, tb->size, &d->res, &err));
  fsh_buffer_unref(tb);
  CHECK_EQ_INT(d->res.n, 1);
  if (d->res.n != 1) return;
  CHECK_OK(fsh_locate_answer_decode(d->res.items[0].data, d->res.items[0].size, 1, &d->a, &err));
  d->a.sources[0].want_shuffle_id = shuffle;
  d->a.sources[0].want_map_id = 0;
  d->a.sources[0].want_attempt = 0;
}

/* The same map output written again, same bytes and size, after its
 * release, into the pooled memfd: the old answer (same fd, inode and size)
 * is refused; the new one opens the image. An answer for another map
 * output than asked is refused too. */
static void stale_answer_refused(void) {
  fixture f = open_store_images("pool", (int64_t)64 << 20, FSH_STORE_IMAGES_MEMFD);
  write_output(&f, 5, 31, 20000);
  fr_direct old;
  answer_for(&f, 5, &old);
  CHECK_EQ_INT(old.a.sources[0].kind, FSH_STORE_AT_MEMFD);
  char path[4200];
  int fd = fr_direct_open(&old, 0, path, sizeof path);
  CHECK_MSG(fd >= 0, "the fresh answer is refused");
  if (fd >= 0) close(fd);
  store_release(&f, 5);
  write_output(&f, 5, 31, 20000); /* the same map output again */
  CHECK_EQ_INT(store_pool(f.s).reused, 1);
  fr_direct now;
  answer_for(&f, 5, &now);
  const fsh_locate_source *o = &old.a.sources[0], *n = &now.a.sources[0];
  CHECK_MSG(n->dir_or_fd == o->dir_or_fd && n->ino == o->ino && n->size == o->size,
            "not the same memfd and size: fd %d ino %llu size %lld, was fd %d ino %llu size "
            "%lld", n->dir_or_fd, (unsigned long long)n->ino, (long long)n->size, o->dir_or_fd,
            (unsigned long long)o->ino, (long long)o->size);
  fd = fr_direct_open(&old, 0, path, sizeof path);
  CHECK_MSG(fd == -1, "a stale answer opened %s (fd %d)", path, fd);
  if (fd >= 0) close(fd);
  fd = fr_direct_open(&now, 0, path, sizeof path);
  CHECK_MSG(fd >= 0, "the fresh answer is refused");
  if (fd >= 0) { /* the located blocks are the image's: their checksums hold */
    for (int64_t i = 0; i < n->n_blocks; i++) {
      const uint8_t *q = n->blocks + 32 * i;
      int64_t off = (int64_t)fsh_le_get64(q), len = (int64_t)fsh_le_get64(q + 8);
      uint8_t *buf = STU_OK(malloc((size_t)len));
      CHECK(pread(fd, buf, (size_t)len, off) == len);
      CHECK(XXH3_64bits(buf, (size_t)len) == fsh_le_get64(q + 24));
      free(buf);
    }
    close(fd);
  }
  /* asked for another map output than the image holds */
  now.a.sources[0].want_map_id = 1;
  fd = fr_direct_open(&now, 0, path, sizeof path);
  CHECK_MSG(fd == -1, "an answer for map 0 opened as map 1");
  if (fd >= 0) close(fd);
  fr_direct_reset(&old);
  fr_direct_reset(&now);
  store_release(&f, 5);
  close_store(&f);
}

/* A small budget: a pooled memfd is taken by the next writer, which spills
 * when its output outgrows the budget; afterwards only the pool (or
 * nothing) is charged and the spilled output reads back whole. */
static void spill_with_pool(void) {
  fixture f = open_store_images("pool", (int64_t)4 << 20, FSH_STORE_IMAGES_MEMFD); /* pool: at most 1 MiB */
  write_output(&f, 1, 41, 3000);            /* ~150 KB image */
  store_release(&f, 1);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  store_check_budget(&f, "pooled");
  write_output(&f, 2, 42, 200000); /* ~9 MB: spills */
  fsh_shuffle_store_stats st = store_stats(f.s);
  CHECK_EQ_INT(st.spilled_outputs, 1);
  CHECK_EQ_INT(store_pool(f.s).reused, 1);
  CHECK_EQ_INT(st.memory_bytes, 0);
  store_check_budget(&f, "spilled");
  int64_t rows = count_rows(&f, 2);
  CHECK_EQ_INT(rows, 200000);
  store_release(&f, 2);
  CHECK_EQ_INT(store_pool(f.s).budget_used, store_pool(f.s).pooled_bytes);
  close_store(&f);
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0) {}
}

static int64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in ns, the store's pool clock: a window measured with it
 * bounds the store's whole-ms idle time from above. */
static int64_t ns_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The number of this process's memfds named like the store's images. */
static int image_memfds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++) {
    char path[64], link[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(path, link, sizeof link - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    n += strstr(link, "memfd:fsh-image") != NULL;
  }
  return n;
}

/* An idle pool: kept while used within the idle time, emptied after it
 * (every memfd closed, the budget back to 0); a writer arriving within
 * the idle time reuses. The idle clock's checks are bounded by the time
 * measured around the step (this thread may be descheduled anywhere): a
 * drain W ms after a pool event began answers due in [IDLE - W, IDLE]. */
#define IDLE 1000
static void idle_pool_drained(void) {
  fixture f = open_store_images("pool", (int64_t)64 << 20, FSH_STORE_IMAGES_MEMFD);
  int before = image_memfds();
  int64_t due = 0;
  CHECK_EQ_INT(fsh_store_pool_drain_idle(f.s, &due), 0);
  CHECK_EQ_INT(due, -1); /* empty */
  fsh_store_set_pool_idle_ms(f.s, IDLE);
  write_output(&f, 1, 51, 20000);
  int64_t t0 = ns_now();
  store_release(&f, 1);
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_EQ_INT(p.pooled, 1);
  CHECK(p.budget_used > 0);
  /* within the idle time: kept */
  int64_t got = fsh_store_pool_drain_idle(f.s, &due);
  int64_t w = (ns_now() - t0) / 1000000;
  CHECK_MSG(w < IDLE, "descheduled: %lld ms from the release to the check, past the idle time",
            (long long)w);
  CHECK_EQ_INT(got, 0);
  CHECK_MSG(due >= IDLE - w && due <= IDLE, "due in %lld ms, %lld ms after the release began",
            (long long)due, (long long)w);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  /* a writer within the idle time takes it (only drain_idle drains) */
  sleep_ms(100);
  write_output(&f, 2, 52, 20000);
  p = store_pool(f.s);
  CHECK_EQ_INT(p.reused, 1);
  CHECK_EQ_INT(p.pooled, 0);
  t0 = ns_now();
  store_release(&f, 2);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  CHECK_EQ_INT(image_memfds(), before + 1);
  /* the put restarted the idle time: due >= IDLE - w puts the clock's
   * start at t0 or later (run from the first release, >= 100 ms before t0,
   * due would be <= IDLE - 100) */
  got = fsh_store_pool_drain_idle(f.s, &due);
  w = (ns_now() - t0) / 1000000;
  CHECK_MSG(w < IDLE, "descheduled: %lld ms from the put to the check, past the idle time",
            (long long)w);
  CHECK_EQ_INT(got, 0);
  CHECK_MSG(due >= IDLE - w && due <= IDLE, "due in %lld ms, %lld ms after the put began",
            (long long)due, (long long)w);
  sleep_ms(due + 20);
  int64_t pooled_bytes = store_pool(f.s).pooled_bytes;
  CHECK_EQ_INT(fsh_store_pool_drain_idle(f.s, &due), pooled_bytes);
  CHECK_EQ_INT(due, -1);
  p = store_pool(f.s);
  CHECK_MSG(p.pooled == 0 && p.pooled_bytes == 0 && p.budget_used == 0 && p.idle_drains == 1,
            "after idle: %lld pooled, %lld bytes, budget %lld, %lld idle drains",
            (long long)p.pooled, (long long)p.pooled_bytes, (long long)p.budget_used,
            (long long)p.idle_drains);
  CHECK_EQ_INT(image_memfds(), before); /* closed */
  /* the next writer starts a fresh memfd and nothing is wrong with it */
  write_output(&f, 3, 53, 20000);
  CHECK_EQ_INT(store_pool(f.s).reused, 1);
  CHECK_EQ_INT(count_rows(&f, 3), 20000);
  store_release(&f, 3);
  fsh_store_pool_drain(f.s);
  close_store(&f);
}
#undef IDLE

/* A worker (listening on a loopback port, memory limit 64 MiB, one
 * spill dir) and its store as a fixture; *w NULL when it did not start
 * (the dir then removed). Stop it with stop_worker. */
static fixture start_worker(fsh_shuffle_worker **w) {
  char *dir = stu_mkdtemp("poolw");
  const char *dirs[1] = {dir};
  fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .spill_dirs = dirs, .n_spill_dirs = 1,
                                  .memory_limit = (int64_t)64 << 20};
  fsh_error err = {{0}};
  *w = NULL;
  CHECK_OK(fsh_shuffle_worker_start(&o, w, &err));
  if (!*w) {
    stu_rmdir(dir);
    return (fixture){0};
  }
  return (fixture){.dir = dir, .s = fsh_shuffle_worker_store(*w),
                   .schema = STU_OK(fsh_synthetic_schema())};
}

/* Stops w (started by start_worker as f) and checks it left no file. */
static void stop_worker(fsh_shuffle_worker *w, fixture *f) {
  fsh_shuffle_worker_stop(w, 0);
  fsh_schema_unref(f->schema);
  CHECK_EQ_INT(stu_count_files(f->dir), 0);
  stu_rmdir(f->dir);
}

/* A worker empties its idle pool by itself (its keeper thread), and keeps
 * it for a writer that comes within the idle time. */
static void worker_drains_idle_pool(void) {
  fsh_shuffle_worker *w = NULL;
  fixture f = start_worker(&w);
  if (!w) return;
  fsh_shuffle_worker_set_idle_ms(w, 1500, 3000); /* the builders' default is 30 s */
  fsh_store_set_pool_idle_ms(f.s, 1500);          /* now, not at the keeper's next tick */
  write_output(&f, 1, 61, 20000);
  store_release(&f, 1);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  sleep_ms(300); /* within the idle time: the next writer reuses */
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  write_output(&f, 2, 62, 20000);
  CHECK_EQ_INT(store_pool(f.s).reused, 1);
  CHECK(fsh_partition_builder_cache_bytes() > 0); /* the writer's builder, cached */
  store_release(&f, 2);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  /* then idle: gone within the idle time plus the keeper's tick (1 s) */
  int64_t t0 = ms_now();
  fsh_store_pool_stats p = store_pool(f.s);
  while (p.pooled > 0 && ms_now() - t0 < 6000) {
    sleep_ms(50);
    p = store_pool(f.s);
  }
  int64_t took = ms_now() - t0;
  CHECK_MSG(p.pooled == 0 && p.pooled_bytes == 0 && p.budget_used == 0 && p.idle_drains == 1,
            "after %lld ms: %lld pooled, %lld bytes, budget %lld, %lld idle drains",
            (long long)took, (long long)p.pooled, (long long)p.pooled_bytes,
            (long long)p.budget_used, (long long)p.idle_drains);
  CHECK_MSG(took >= 1400, "drained after %lld ms, before its idle time", (long long)took);
  /* the map writers' idle partition builders (kernels.h) go too, once no
   * task ran and nothing was released for 3 s */
  t0 = ms_now();
  while (fsh_partition_builder_cache_bytes() > 0 && ms_now() - t0 < 6000) sleep_ms(50);
  CHECK_MSG(fsh_partition_builder_cache_bytes() == 0, "the builders' cache holds %lld bytes",
            (long long)fsh_partition_builder_cache_bytes());
  stop_worker(w, &f);
}

/* Idle time "never": kept past any idle time, yet emptied by a writer
 * whose budget needs the bytes (and by an explicit drain). */
static void idle_never_kept(void) {
  fixture f = open_store_images("pool", (int64_t)4 << 20, FSH_STORE_IMAGES_MEMFD); /* pool: at most 1 MiB */
  fsh_store_set_pool_idle_ms(f.s, -1);
  write_output(&f, 1, 71, 3000); /* ~150 KB image */
  store_release(&f, 1);
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_EQ_INT(p.pooled, 1);
  int64_t pooled_bytes = p.pooled_bytes;
  CHECK(pooled_bytes > 0);
  store_check_budget(&f, "pooled");
  sleep_ms(300);
  int64_t due = 0;
  CHECK_EQ_INT(fsh_store_pool_drain_idle(f.s, &due), 0);
  CHECK_EQ_INT(due, -1); /* never due */
  p = store_pool(f.s);
  CHECK_MSG(p.pooled == 1 && p.pooled_bytes == pooled_bytes && p.idle_drains == 0,
            "never: %lld pooled, %lld bytes, %lld idle drains", (long long)p.pooled,
            (long long)p.pooled_bytes, (long long)p.idle_drains);
  /* back to a window: the time since the last use counts at once */
  fsh_store_set_pool_idle_ms(f.s, 100);
  CHECK_EQ_INT(fsh_store_pool_drain_idle(f.s, &due), pooled_bytes);
  CHECK_EQ_INT(store_pool(f.s).budget_used, 0);
  /* never again: a writer whose budget has no room empties it (it reuses
   * the one memfd, then needs more than the budget: spills) */
  fsh_store_set_pool_idle_ms(f.s, -1);
  write_output(&f, 2, 72, 3000);
  store_release(&f, 2);
  write_output(&f, 3, 73, 3000);
  store_release(&f, 3);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  CHECK_EQ_INT(store_pool(f.s).reused, 1);
  write_output(&f, 4, 74, 200000); /* ~9 MB: reuses, then spills */
  fsh_shuffle_store_stats st = store_stats(f.s);
  CHECK_EQ_INT(st.spilled_outputs, 1);
  CHECK_EQ_INT(store_pool(f.s).reused, 2);
  CHECK_EQ_INT(store_pool(f.s).pooled, 0);
  store_check_budget(&f, "spilled");
  CHECK_EQ_INT(count_rows(&f, 4), 200000);
  store_release(&f, 4);
  write_output(&f, 5, 75, 3000);
  store_release(&f, 5);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  fsh_store_pool_drain(f.s); /* explicit: still empties it */
  p = store_pool(f.s);
  CHECK_MSG(p.pooled == 0 && p.budget_used == 0, "drained: %lld pooled, budget %lld",
            (long long)p.pooled, (long long)p.budget_used);
  close_store(&f);
}

/* A worker whose idle times are "never" keeps its pool and its builders'
 * cache through the keeper's ticks (1 s each); set to a short window, it
 * gives both back within it. */
static void worker_idle_never_keeps(void) {
  fsh_shuffle_worker *w = NULL;
  fixture f = start_worker(&w);
  if (!w) return;
  fsh_shuffle_worker_set_idle_ms(w, -1, -1);
  write_output(&f, 1, 81, 20000);
  CHECK(fsh_partition_builder_cache_bytes() > 0); /* the writer's builder, cached */
  store_release(&f, 1);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  sleep_ms(2500); /* two ticks of the keeper */
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_MSG(p.pooled == 1 && p.idle_drains == 0, "never: %lld pooled, %lld idle drains",
            (long long)p.pooled, (long long)p.idle_drains);
  CHECK_MSG(fsh_partition_builder_cache_bytes() > 0, "never: the builders' cache was dropped");
  /* the next writer reuses the kept memfd */
  write_output(&f, 2, 82, 20000);
  CHECK_EQ_INT(store_pool(f.s).reused, 1);
  CHECK_EQ_INT(count_rows(&f, 2), 20000);
  store_release(&f, 2);
  /* a short window again: both go within it plus the keeper's tick */
  fsh_shuffle_worker_set_idle_ms(w, 200, 200);
  int64_t t0 = ms_now();
  while ((store_pool(f.s).pooled > 0 || fsh_partition_builder_cache_bytes() > 0) &&
         ms_now() - t0 < 5000)
    sleep_ms(50);
  p = store_pool(f.s);
  CHECK_MSG(p.pooled == 0 && p.budget_used == 0 && p.idle_drains == 1,
            "after %lld ms: %lld pooled, budget %lld, %lld idle drains",
            (long long)(ms_now() - t0), (long long)p.pooled, (long long)p.budget_used,
            (long long)p.idle_drains);
  CHECK_MSG(fsh_partition_builder_cache_bytes() == 0, "the builders' cache holds %lld bytes",
            (long long)fsh_partition_builder_cache_bytes());
  stop_worker(w, &f);
}

static int64_t pages_of(int64_t n) { return (n + 4095) / 4096 * 4096; }

/* The pooled memfd open as fd is still whole: its size is the image's it
 * held (the pool cuts only the identity trailer). */
static void check_whole(int fd, int64_t size, const char *when) {
  struct stat st;
  CHECK_MSG(fstat(fd, &st) == 0 && st.st_size == size, "%s: the pooled memfd holds %lld "
            "bytes, its image had %lld", when, (long long)st.st_size, (long long)size);
}

/* The pool's counters a test expects after a step. */
typedef struct pool_counts {
  int64_t reused, pooled, left_loose, pooled_bytes;
} pool_counts;

/* A writer of `shuffle` expecting `expect` bytes (0: unhinted) writes
 * `rows` rows of seed `seed`; then the pool's counters are `want`, the
 * budget is exact and the output reads back whole. Its location (a memfd)
 * for the caller's checks of which memfd it took. */
static fsh_store_location pooled_write(fixture *f, uint64_t shuffle, uint64_t seed, int64_t rows,
                                       int64_t expect, pool_counts want, const char *step) {
  write_sized(f, shuffle, seed, rows, expect);
  fsh_store_location l = locate(f, shuffle);
  CHECK_MSG(l.kind == FSH_STORE_AT_MEMFD, "%s: shuffle %llu not in a memfd", step,
            (unsigned long long)shuffle);
  fsh_store_pool_stats p = store_pool(f->s);
  CHECK_MSG(p.reused == want.reused && p.pooled == want.pooled &&
                p.left_loose == want.left_loose && p.pooled_bytes == want.pooled_bytes,
            "%s: reused %lld, pooled %lld, left loose %lld, pooled bytes %lld; expected %lld, "
            "%lld, %lld, %lld",
            step, (long long)p.reused, (long long)p.pooled, (long long)p.left_loose,
            (long long)p.pooled_bytes, (long long)want.reused, (long long)want.pooled,
            (long long)want.left_loose, (long long)want.pooled_bytes);
  store_check_budget(f, step);
  CHECK_MSG(count_rows(f, shuffle) == rows, "%s: shuffle %llu does not read back %lld rows", step,
            (unsigned long long)shuffle, (long long)rows);
  return l;
}

/* Size-aware reuse (store.c, pool_take). Three released images' memfds
 * in the pool, small (~150 KB), medium (~1 MB) and large (~9 MB):
 *  - a writer expecting the medium's size takes the medium (the smallest
 *    that holds it), the others stay whole;
 *  - with the medium gone, a writer expecting as much takes the small one
 *    and grows past it (the large one is more than twice its need plus
 *    1 MiB: left whole for a larger writer);
 *  - a writer expecting the small size, with only the large pooled, takes
 *    nothing (a fresh memfd; counted in left_loose), the large stays;
 *  - a writer expecting the large size takes it;
 * every image reads back whole, and the budget is exact after each step. */
static void best_fit_chosen(void) {
  fixture f = open_store_images("pool", (int64_t)256 << 20, FSH_STORE_IMAGES_MEMFD); /* pool: at most 64 MiB */
  const int64_t rows[3] = {3000, 30000, 200000};
  fsh_store_location l[3];
  for (int i = 0; i < 3; i++) {
    write_output(&f, 10 + (uint64_t)i, 60 + (uint64_t)i, rows[i]);
    l[i] = locate(&f, 10 + (uint64_t)i);
    CHECK_EQ_INT(l[i].kind, FSH_STORE_AT_MEMFD);
  }
  CHECK_MSG(pages_of(l[0].size) < l[1].size && l[2].size > 2 * l[1].size + (1 << 20),
            "sizes %lld, %lld, %lld: not the small, medium, large this test needs",
            (long long)l[0].size, (long long)l[1].size, (long long)l[2].size);
  for (int i = 0; i < 3; i++) store_release(&f, 10 + (uint64_t)i);
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_EQ_INT(p.pooled, 3);
  CHECK_EQ_INT(p.pooled_bytes, pages_of(l[0].size) + pages_of(l[1].size) + pages_of(l[2].size));
  store_check_budget(&f, "three pooled");

  /* best fit */
  fsh_store_location a = pooled_write(
      &f, 20, 70, rows[1], l[1].size,
      (pool_counts){.reused = 1, .pooled = 2, .pooled_bytes = pages_of(l[0].size) + pages_of(l[2].size)},
      "best fit");
  CHECK_MSG(a.ino == l[1].ino, "expecting %lld bytes took inode %llu, not the medium %llu",
            (long long)l[1].size, (unsigned long long)a.ino, (unsigned long long)l[1].ino);
  check_whole(l[0].fd, l[0].size, "best fit");
  check_whole(l[2].fd, l[2].size, "best fit");

  /* only a loose one holds the need: the smaller one, grown past */
  fsh_store_location b =
      pooled_write(&f, 21, 71, rows[1], l[1].size,
                   (pool_counts){.reused = 2, .pooled = 1, .pooled_bytes = pages_of(l[2].size)},
                   "grown past the small");
  CHECK_MSG(b.ino == l[0].ino, "expecting %lld bytes took inode %llu, not the small %llu",
            (long long)l[1].size, (unsigned long long)b.ino, (unsigned long long)l[0].ino);
  CHECK(b.size > pages_of(l[0].size));
  check_whole(l[2].fd, l[2].size, "grown past the small");

  /* nothing that fits without truncating a larger writer's pages */
  fsh_store_location c = pooled_write(
      &f, 22, 72, rows[0], l[0].size,
      (pool_counts){.reused = 2, .pooled = 1, .left_loose = 1, .pooled_bytes = pages_of(l[2].size)},
      "left loose");
  CHECK(c.ino != l[2].ino);
  check_whole(l[2].fd, l[2].size, "left loose");

  /* the large one for a large writer */
  fsh_store_location d = pooled_write(
      &f, 23, 73, rows[2], l[2].size, (pool_counts){.reused = 3, .pooled = 0, .left_loose = 1}, "large");
  CHECK(d.ino == l[2].ino);

  for (uint64_t sh = 20; sh <= 23; sh++) {
    store_release(&f, sh);
    store_check_budget(&f, "released");
  }
  CHECK_EQ_INT(store_pool(f.s).pooled, 4);
  fsh_store_pool_drain(f.s);
  CHECK_EQ_INT(store_pool(f.s).budget_used, 0);
  for (int i = 0; i < 3; i++) fsh_store_location_reset(&l[i]);
  fsh_store_location_reset(&a);
  fsh_store_location_reset(&b);
  fsh_store_location_reset(&c);
  fsh_store_location_reset(&d);
  close_store(&f);
}

/* A writer that does not say what it expects (a map task's) is expected
 * to write about what such writers wrote lately: after three ~1 MB
 * outputs, with a small and a large memfd pooled (written by writers that
 * said their size, which does not move that average), it takes the small
 * one and leaves the large one whole. */
static void unhinted_expect_recent(void) {
  fixture f = open_store_images("pool", (int64_t)256 << 20, FSH_STORE_IMAGES_MEMFD);
  for (uint64_t sh = 1; sh <= 3; sh++) write_output(&f, sh, 80 + sh, 30000);
  fsh_store_location m = locate(&f, 1);
  write_sized(&f, 4, 84, 3000, 1);
  write_sized(&f, 5, 85, 200000, 1);
  fsh_store_location small = locate(&f, 4), large = locate(&f, 5);
  CHECK(large.size > 2 * m.size + (1 << 20));
  store_release(&f, 4);
  store_release(&f, 5);
  CHECK_EQ_INT(store_pool(f.s).pooled, 2);
  store_check_budget(&f, "pooled");
  fsh_store_location n = pooled_write(
      &f, 6, 86, 30000, 0,
      (pool_counts){.reused = 1, .pooled = 1, .pooled_bytes = pages_of(large.size)}, "unhinted");
  CHECK_MSG(n.ino == small.ino, "an unhinted ~%lld-byte writer took inode %llu, not the small "
            "%llu (large %llu)", (long long)m.size, (unsigned long long)n.ino,
            (unsigned long long)small.ino, (unsigned long long)large.ino);
  check_whole(large.fd, large.size, "unhinted");
  fsh_store_location_reset(&m);
  fsh_store_location_reset(&small);
  fsh_store_location_reset(&large);
  fsh_store_location_reset(&n);
  close_store(&f);
}

/* The pool's caps: at most 64 memfds (POOL_MAX) however much budget is
 * left, and at most a quarter of the memory limit in bytes; what does not
 * fit is closed, and the budget stays exact. */
static void pool_caps(void) {
  fixture f = open_store_images("pool", (int64_t)1 << 30, FSH_STORE_IMAGES_MEMFD);
  int before = image_memfds();
  for (uint64_t sh = 100; sh < 165; sh++) write_output(&f, sh, sh, 200);
  CHECK_EQ_INT(image_memfds(), before + 65);
  for (uint64_t sh = 100; sh < 165; sh++) store_release(&f, sh);
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_EQ_INT(p.pooled, 64);
  CHECK_EQ_INT(image_memfds(), before + 64);
  store_check_budget(&f, "64 pooled");
  fsh_store_pool_drain(f.s);
  CHECK_EQ_INT(store_pool(f.s).budget_used, 0);
  close_store(&f);

  f = open_store_images("pool", (int64_t)8 << 20, FSH_STORE_IMAGES_MEMFD); /* pool: at most 2 MiB */
  write_output(&f, 1, 91, 45000); /* ~1.5 MB each */
  write_output(&f, 2, 92, 45000);
  fsh_store_location a = locate(&f, 1), b = locate(&f, 2);
  CHECK(pages_of(a.size) <= (2 << 20) && pages_of(a.size) + pages_of(b.size) > (2 << 20));
  store_release(&f, 1);
  store_release(&f, 2);
  p = store_pool(f.s);
  CHECK_EQ_INT(p.pooled, 1);
  CHECK_EQ_INT(p.pooled_bytes, pages_of(a.size));
  CHECK_EQ_INT(store_stats(f.s).memory_bytes, 0);
  store_check_budget(&f, "quarter");
  fsh_store_location_reset(&a);
  fsh_store_location_reset(&b);
  close_store(&f);
}

/* A merge says what it will write (its parts' bytes): with a small and a
 * large memfd pooled, merging three ~1.5 MB outputs takes the large one,
 * which a writer expecting one output's size would leave whole (more
 * than twice its need + 1 MiB) -- so the large one's pages are reused by
 * the writer that needs them; the merged output reads back whole. */
static void merge_takes_its_size(void) {
  fixture f = open_store_images("pool", (int64_t)256 << 20, FSH_STORE_IMAGES_MEMFD);
  int64_t maps[3] = {0, 1, 2};
  int32_t attempts[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) write_map(&f, 1, maps[i], 100 + (uint64_t)i, 45000, 0);
  fsh_store_location part = locate(&f, 1);
  write_sized(&f, 4, 104, 3000, 1);
  write_sized(&f, 5, 105, 200000, 1);
  fsh_store_location small = locate(&f, 4), large = locate(&f, 5);
  int64_t sum = 0;
  for (int i = 0; i < 3; i++) {
    fsh_store_location l;
    fsh_error err = {{0}};
    CHECK_OK(fsh_store_locate(f.s, 1, maps[i], 0, 0, &l, &err));
    sum += l.size;
    fsh_store_location_reset(&l);
  }
  CHECK_MSG(pages_of(large.size) >= sum && large.size <= 2 * sum + (1 << 20) &&
            large.size > 2 * part.size + (1 << 20),
            "sizes: large %lld, parts %lld (one %lld): not what this test needs",
            (long long)large.size, (long long)sum, (long long)part.size);
  store_release(&f, 4);
  store_release(&f, 5);
  CHECK_EQ_INT(store_pool(f.s).pooled, 2);
  fsh_merge_task t = {.shuffle_id = 1, .map_id = 100, .attempt = 0, .drop_parts = false,
                      .n_parts = 3, .part_maps = maps, .part_attempts = attempts};
  fsh_map_output m = {0};
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_store_merge(f.s, &t, &m, &err));
  fsh_map_output_reset(&m);
  fsh_store_location merged;
  CHECK_OK(fsh_store_locate(f.s, 1, 100, 0, 0, &merged, &err));
  CHECK_MSG(merged.ino == large.ino, "the merge (%lld bytes expected) took inode %llu, not the "
            "large %llu (small %llu)", (long long)sum, (unsigned long long)merged.ino,
            (unsigned long long)large.ino, (unsigned long long)small.ino);
  fsh_store_pool_stats p = store_pool(f.s);
  CHECK_EQ_INT(p.reused, 1);
  CHECK_EQ_INT(p.pooled_bytes, pages_of(small.size));
  check_whole(small.fd, small.size, "merged");
  store_check_budget(&f, "merged");
  CHECK_EQ_INT(count_map_rows(&f, 1, 100), 3 * 45000);
  store_release(&f, 1);
  store_check_budget(&f, "released");
  fsh_store_location_reset(&part);
  fsh_store_location_reset(&small);
  fsh_store_location_reset(&large);
  fsh_store_location_reset(&merged);
  close_store(&f);
}

FSH_TEST_MAIN(TEST(reuse_happens), TEST(held_image_not_reused), TEST(stale_answer_refused),
              TEST(spill_with_pool), TEST(idle_pool_drained), TEST(worker_drains_idle_pool),
              TEST(idle_never_kept), TEST(worker_idle_never_keeps), TEST(best_fit_chosen),
              TEST(unhinted_expect_recent), TEST(pool_caps), TEST(merge_takes_its_size))
