/* test_direct_read.c -- same-host direct reads of the flight backend: two
 * in-process workers (one keeps its map outputs in memory images, the
 * other spills everything) read each other's map outputs without a DoGet
 * (asserted through the backend's counters, and the rows checked against
 * what was written); the same with direct reads off goes through DoGet;
 * the locate action's answer (plain spill names, declared directories); a
 * corrupted spill file read directly is EIO naming the worker, map output
 * and partition; a map output released between locate and read is a
 * clear error (through DoGet), never rows; one evicted from memory to a
 * spill file between locate and read still reads right (through DoGet);
 * one whose memfd is reused for the same map output written again between
 * locate and read is refused by its identity and read through DoGet.
 *
 * Each of those runs with memfd images (--images memfd) and again with VM
 * images (the default: read with process_vm_readv; "_vm" tests), where an
 * evicted image is unmapped (the copy faults: EFAULT) and a released one
 * has its trailer's id cleared before its mapping is pooled or reused.
 * VM only: an image released and rewritten between the reader's data copy
 * and its second trailer check is refused (DoGet serves the new rows);
 * a copy refused with EPERM (ptrace restrictions, simulated: the tests run
 * as root) sends that peer's reads to DoGet from then on, no further
 * locate; one refused with ESRCH falls back once and the next read is
 * direct again. */
#define _GNU_SOURCE /* memmem */
#include <sys/stat.h>

#include <flightshuffle/flight.h>

#include "shuffle/flight_reader.h"
#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"

/* The workers' memory images: memfds for the tests as they were written,
 * VM for their "_vm" runs. */
static fsh_store_images g_images = FSH_STORE_IMAGES_MEMFD;

static fsh_shuffle_worker *start_worker(const char *dir, int64_t limit) {
  fsh_error err = {{0}};
  fsh_shuffle_worker *w = NULL;
  fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .spill_dirs = &dir,
                                  .n_spill_dirs = dir ? 1 : 0, .memory_limit = limit,
                                  .n_threads = 2, .images = g_images};
  CHECK_OK(fsh_shuffle_worker_start(&o, &w, &err));
  return w;
}

static fsh_shuffle_backend *backend_for(fsh_shuffle_worker *w, const char **peers, int n,
                                        bool no_direct) {
  fsh_error err = {{0}};
  fsh_shuffle_backend *b = NULL;
  fsh_shuffle_flight_options o = {.local = w, .peers = peers, .n_peers = n,
                                  .max_parallel_fetches = 2, .max_bytes_in_flight = 1 << 20,
                                  .timeout_ms = 30000, .no_direct_reads = no_direct,
                                  .direct_min_bytes = -1};
  CHECK_OK(fsh_shuffle_flight_new(&o, &b, &err));
  return b;
}

static void make_plan(stu_plan *p, uint64_t id, int32_t n_parts, int n_maps, int64_t rows) {
  fsh_batch *probe = stu_synthetic(0, 1);
  stu_plan_init(p, id, n_parts, probe->schema, n_maps);
  p->spec.target_block_bytes = 16 << 10; /* several blocks a partition */
  for (int m = 0; m < n_maps; m++) {
    fsh_batch *x = stu_synthetic(300 + m, rows);
    stu_add_split(&p->maps[m], x, n_parts, 3 + m, false, (uint64_t)m);
    fsh_batch_unref(x);
  }
  fsh_batch_unref(probe);
}

typedef struct pair {
  char *dir0, *dir1;
  fsh_shuffle_worker *w[2];
  const char *uris[2];
  fsh_shuffle_backend *b[2];       /* local = w[i], direct reads on */
  fsh_shuffle_backend *doget[2];   /* local = w[i], direct reads off */
} pair;

/* Worker 0 keeps everything in memory, worker 1 spills everything. */
static bool pair_start(pair *p) {
  memset(p, 0, sizeof *p);
  p->dir0 = stu_mkdtemp("direct0");
  p->dir1 = stu_mkdtemp("direct1");
  p->w[0] = start_worker(p->dir0, (int64_t)1 << 30);
  p->w[1] = start_worker(p->dir1, 0);
  if (!p->w[0] || !p->w[1]) return false;
  for (int i = 0; i < 2; i++) p->uris[i] = fsh_shuffle_worker_uri(p->w[i]);
  for (int i = 0; i < 2; i++) {
    p->b[i] = backend_for(p->w[i], p->uris, 2, false);
    p->doget[i] = backend_for(p->w[i], p->uris, 2, true);
  }
  return true;
}

static void pair_stop(pair *p) {
  for (int i = 0; i < 2; i++) {
    fsh_shuffle_backend_destroy(p->b[i]);
    fsh_shuffle_backend_destroy(p->doget[i]);
  }
  for (int i = 0; i < 2; i++) fsh_shuffle_worker_stop(p->w[i], 1000);
  CHECK_EQ_INT(stu_count_files(p->dir0), 0);
  CHECK_EQ_INT(stu_count_files(p->dir1), 0);
  stu_rmdir(p->dir0);
  stu_rmdir(p->dir1);
}

/* Map m runs on worker m % 2. */
static void run_maps(pair *p, stu_plan *plan) {
  fsh_error err = {{0}};
  for (int m = 0; m < plan->n_maps; m++)
    CHECK_OK(stu_run_map(p->b[m % 2], &plan->spec, &plan->maps[m], &err));
}

/* Open memfds of store images in this process (/proc/self/fd links
 * "/memfd:fsh-image (deleted)"). */
static int count_image_memfds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char path[300], target[300];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(path, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = '\0';
    n += strstr(target, "memfd:fsh-image") != NULL;
  }
  if (d) closedir(d);
  return n;
}

static fsh_shuffle_flight_stats stats(fsh_shuffle_backend *b) {
  fsh_shuffle_flight_stats s;
  fsh_shuffle_flight_get_stats(b, &s);
  return s;
}

/* Every partition read by each worker's backend: the peer's map outputs
 * (memory images of worker 0, spill files of worker 1) come directly,
 * none through DoGet; with direct reads off, all through DoGet. The rows
 * are the ones written either way. */
static void same_host_reads_directly(void) {
  pair p;
  if (!pair_start(&p)) return;
  stu_plan plan;
  make_plan(&plan, 70, 4, 4, 6000);
  run_maps(&p, &plan);
  fsh_shuffle_store_stats ss;
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(p.w[1]), &ss);
  CHECK_EQ_INT(ss.spilled_outputs, 2);
  for (int32_t q = 0; q < 4; q++)
    for (int i = 0; i < 2; i++) {
      stu_check_partition(p.b[i], &plan, q, NULL, 0, i ? "direct from w1" : "direct from w0");
      stu_check_partition(p.doget[i], &plan, q, NULL, 0, "doget");
    }
  for (int i = 0; i < 2; i++) {
    fsh_shuffle_flight_stats d = stats(p.b[i]), g = stats(p.doget[i]);
    /* 4 partitions x 2 map outputs of the peer, 2 of its own */
    CHECK_MSG(d.direct_sources == 8 && d.fetched_sources == 0 && d.local_sources == 8 &&
                  d.direct_fallbacks == 0 && d.locates == 4,
              "backend %d direct on: direct %lld fetched %lld local %lld fallbacks %lld locates "
              "%lld", i, (long long)d.direct_sources, (long long)d.fetched_sources,
              (long long)d.local_sources, (long long)d.direct_fallbacks, (long long)d.locates);
    CHECK(d.direct_bytes > 0);
    CHECK_MSG(g.direct_sources == 0 && g.fetched_sources == 8 && g.locates == 0,
              "backend %d direct off: direct %lld fetched %lld locates %lld", i,
              (long long)g.direct_sources, (long long)g.fetched_sources, (long long)g.locates);
  }
  /* worker 0's two images are memfds (VM: none); the release pools them
   * for reuse (no reader holds them any more), and emptying the pool
   * closes them */
  bool vm = g_images == FSH_STORE_IMAGES_VM;
  CHECK_EQ_INT(count_image_memfds(), vm ? 0 : 2);
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(p.b[0], 70, &err));
  fsh_store_pool_stats ps;
  fsh_store_get_pool_stats(fsh_shuffle_worker_store(p.w[0]), &ps);
  CHECK_EQ_INT(ps.pooled, 2);
  CHECK_EQ_INT(count_image_memfds(), vm ? 0 : 2);
  fsh_store_pool_drain(fsh_shuffle_worker_store(p.w[0]));
  CHECK_EQ_INT(count_image_memfds(), 0);
  fsh_store_get_pool_stats(fsh_shuffle_worker_store(p.w[0]), &ps);
  CHECK(ps.pooled == 0 && ps.pooled_bytes == 0);
  stu_plan_free(&plan);
  pair_stop(&p);
}

/* The locate answer of a worker holding one spilled and one in-memory map
 * output (and one it does not hold): a plain spill file name in its
 * declared directory, a memfd, and nothing for the unknown one; the
 * blocks it lists are the map file's own index. */
static void locate_answer(void) {
  pair p;
  if (!pair_start(&p)) return;
  stu_plan plan;
  make_plan(&plan, 71, 2, 2, 3000);
  run_maps(&p, &plan); /* map 0 on w0 (memory), map 1 on w1 (spilled) */
  fsh_error err = {{0}};
  for (int i = 0; i < 2; i++) {
    fsh_ticket_source srcs[2] = {{i, 0}, {99, 0}};
    fsh_shuffle_ticket t = {.shuffle_id = 71, .partition = 1, .n_sources = 2, .sources = srcs};
    fsh_buffer *tb = NULL;
    CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
    if (!tb) break;
    fsh_flight_result_list res = {0};
    CHECK_OK(fsh_worker_locate(fsh_shuffle_worker_store(p.w[i]), tb->data, tb->size, &res, &err));
    fsh_buffer_unref(tb);
    fsh_locate_answer a = {0};
    CHECK_EQ_INT(res.n, 1);
    if (res.n == 1)
      CHECK_OK(fsh_locate_answer_decode(res.items[0].data, res.items[0].size, 2, &a, &err));
    if (a.sources) {
      CHECK(a.pid == (uint32_t)getpid());
      CHECK(a.host_len == (int64_t)strlen(fsh_host_identity()) &&
            memcmp(a.host, fsh_host_identity(), (size_t)a.host_len) == 0);
      const fsh_locate_source *s = &a.sources[0];
      bool vm = g_images == FSH_STORE_IMAGES_VM;
      CHECK_EQ_INT(s->kind, i == 1 ? FSH_STORE_AT_FILE
                            : vm   ? FSH_STORE_AT_VM
                                   : FSH_STORE_AT_MEMFD);
      if (i == 0 && vm) { /* its address in this process: the trailer is there */
        CHECK(s->addr != 0 && s->image_id != 0 && s->dir_or_fd == 0);
        uint8_t want[FSH_IMAGE_ID_BYTES];
        fsh_image_id_encode(want, 71, 0, 0, s->image_id, s->size);
        if (s->addr)
          CHECK(memcmp((const uint8_t *)(uintptr_t)s->addr + s->size, want, sizeof want) == 0);
        fsh_map_file *f = NULL; /* the blocks are the image's own index entries */
        CHECK_OK(fsh_store_open(fsh_shuffle_worker_store(p.w[0]), 71, 0, 0, &f, &err));
        fsh_map_file_partition part = {0};
        if (f) CHECK_OK(fsh_map_file_get_partition(f, 1, &part, &err));
        CHECK_EQ_INT(part.n_blocks, s->n_blocks);
        for (int64_t k = 0; k < part.n_blocks && k < s->n_blocks; k++)
          CHECK(part.blocks[k].offset == (int64_t)fsh_le_get64(s->blocks + 32 * k) &&
                part.blocks[k].checksum == fsh_le_get64(s->blocks + 32 * k + 24));
        fsh_map_file_partition_reset(&part);
        fsh_map_file_close(f);
      }
      CHECK_EQ_INT(a.sources[1].kind, FSH_STORE_AT_NONE);
      CHECK_EQ_INT(a.n_dirs, 1);
      CHECK_EQ_INT(s->rows, plan.maps[i].out.rows[1]);
      CHECK_EQ_INT(s->bytes, plan.maps[i].out.bytes[1]);
      CHECK(s->checksum == plan.maps[i].out.checksums[1]);
      CHECK(s->n_blocks >= 2);
      char *real = realpath(i ? p.dir1 : p.dir0, NULL);
      CHECK(real && strcmp(a.dirs[0], real) == 0);
      free(real);
      if (i == 1) { /* the blocks are the file's own index entries */
        CHECK(strncmp(s->name, "fshspill-", 9) == 0 && !strchr(s->name, '/'));
        char path[600];
        snprintf(path, sizeof path, "%s/%s", a.dirs[0], s->name);
        fsh_map_file *f = NULL;
        CHECK_OK(fsh_map_file_open_path(path, &f, &err));
        fsh_map_file_partition part = {0};
        if (f) CHECK_OK(fsh_map_file_get_partition(f, 1, &part, &err));
        CHECK_EQ_INT(part.n_blocks, s->n_blocks);
        for (int64_t k = 0; k < part.n_blocks && k < s->n_blocks; k++) {
          const uint8_t *q = s->blocks + 32 * k;
          CHECK(part.blocks[k].offset == (int64_t)fsh_le_get64(q) &&
                part.blocks[k].length == (int64_t)fsh_le_get64(q + 8) &&
                part.blocks[k].rows == (int64_t)fsh_le_get64(q + 16) &&
                part.blocks[k].checksum == fsh_le_get64(q + 24));
        }
        fsh_map_file_partition_reset(&part);
        fsh_map_file_close(f);
      }
    }
    fsh_locate_answer_reset(&a);
    fsh_flight_result_list_reset(&res);
  }
  /* a name that leaves the directory is refused by the decoder */
  {
    fsh_ticket_source srcs[1] = {{1, 0}};
    fsh_shuffle_ticket t = {.shuffle_id = 71, .partition = 0, .n_sources = 1, .sources = srcs};
    fsh_buffer *tb = NULL;
    CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
    fsh_flight_result_list res = {0};
    if (tb)
      CHECK_OK(fsh_worker_locate(fsh_shuffle_worker_store(p.w[1]), tb->data, tb->size, &res,
                                 &err));
    fsh_buffer_unref(tb);
    if (res.n == 1) {
      uint8_t *raw = res.items[0].data;
      int64_t n = res.items[0].size;
      uint8_t *at = memmem(raw, (size_t)n, "fshspill-", 9);
      CHECK(at != NULL);
      if (at) at[3] = '/';
      fsh_locate_answer a = {0};
      int rc = fsh_locate_answer_decode(raw, n, 1, &a, &err);
      CHECK_MSG(rc == EIO && strstr(err.message, "spill file"), "rc %d: %s", rc, err.message);
      fsh_locate_answer_reset(&a);
    }
    fsh_flight_result_list_reset(&res);
  }
  CHECK_OK(fsh_shuffle_release(p.b[0], 71, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

/* Flips a byte inside the first block of partition q of the spill file
 * in dir. */
static void corrupt(const char *dir, int32_t q) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[600] = "";
  while (d && (e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "fshspill-", 9) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
  fsh_error err = {{0}};
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_map_file_open_path(path, &f, &err));
  if (!f) return;
  fsh_map_file_partition part = {0};
  CHECK_OK(fsh_map_file_get_partition(f, q, &part, &err));
  int64_t at = part.n_blocks ? part.blocks[0].offset + part.blocks[0].length - 16 : 0;
  fsh_map_file_partition_reset(&part);
  fsh_map_file_close(f);
  int fd = open(path, O_RDWR);
  uint8_t byte = 0;
  CHECK(fd >= 0 && pread(fd, &byte, 1, at) == 1);
  byte ^= 0x5A;
  CHECK(pwrite(fd, &byte, 1, at) == 1);
  if (fd >= 0) close(fd);
}

/* A corrupted spill file of worker 1, read directly by worker 0's reader:
 * EIO naming worker 1, the map output, the partition and the file; no
 * DoGet was made; the other partitions still read. */
static void corrupted_file_read_directly(void) {
  pair p;
  if (!pair_start(&p)) return;
  stu_plan plan;
  make_plan(&plan, 72, 3, 2, 4000);
  plan.spec.compression = FSH_COMPRESSION_NONE;
  run_maps(&p, &plan);
  corrupt(p.dir1, 1);
  fsh_error err = {{0}};
  int only1[] = {1};
  fsh_map_output src = plan.maps[1].out;
  int rc = stu_read_rc(p.b[0], &plan.spec, 1, &src, 1, NULL, &err);
  CHECK_MSG(rc == EIO && strstr(err.message, p.uris[1]) && strstr(err.message, "map 1") &&
                strstr(err.message, "partition 1") && strstr(err.message, "checksum") &&
                strstr(err.message, "read directly") && strstr(err.message, "fshspill-"),
            "rc %d: %s", rc, err.message);
  printf("  corrupt, read directly: %s\n", err.message);
  fsh_shuffle_flight_stats s = stats(p.b[0]);
  CHECK_MSG(s.fetched_sources == 0 && s.locates == 1, "fetched %lld locates %lld",
            (long long)s.fetched_sources, (long long)s.locates);
  stu_check_partition(p.b[0], &plan, 0, only1, 1, "intact partition");
  stu_check_partition(p.b[0], &plan, 2, only1, 1, "intact partition");
  CHECK_OK(fsh_shuffle_release(p.b[0], 72, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

/* Partitions of ~1 MB (read through a mapping of the file, not pread):
 * the same rows, directly, from a memory image and from a spill file; a
 * corrupted mapped block is EIO naming the file. */
static void large_partitions_mapped(void) {
  pair p;
  if (!pair_start(&p)) return;
  stu_plan plan;
  make_plan(&plan, 76, 2, 2, 40000);
  plan.spec.target_block_bytes = 256 << 10;
  plan.spec.compression = FSH_COMPRESSION_NONE;
  run_maps(&p, &plan);
  CHECK_MSG(plan.maps[0].out.bytes[0] >= (512 << 10) && plan.maps[1].out.bytes[1] >= (512 << 10),
            "partitions of %lld and %lld bytes", (long long)plan.maps[0].out.bytes[0],
            (long long)plan.maps[1].out.bytes[1]);
  for (int32_t q = 0; q < 2; q++)
    for (int i = 0; i < 2; i++) stu_check_partition(p.b[i], &plan, q, NULL, 0, "mapped");
  for (int i = 0; i < 2; i++) {
    fsh_shuffle_flight_stats d = stats(p.b[i]);
    CHECK_MSG(d.direct_sources == 2 && d.fetched_sources == 0, "direct %lld fetched %lld",
              (long long)d.direct_sources, (long long)d.fetched_sources);
  }
  corrupt(p.dir1, 0);
  fsh_error err = {{0}};
  fsh_map_output src = plan.maps[1].out;
  int rc = stu_read_rc(p.b[0], &plan.spec, 0, &src, 1, NULL, &err);
  CHECK_MSG(rc == EIO && strstr(err.message, p.uris[1]) && strstr(err.message, "map 1") &&
                strstr(err.message, "partition 0") && strstr(err.message, "read directly"),
            "rc %d: %s", rc, err.message);
  CHECK_OK(fsh_shuffle_release(p.b[0], 76, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

/* With the default minimum (16 KiB a partition on average), a peer's tiny
 * sources come through one DoGet, without a locate; large ones directly. */
static void small_sources_use_doget(void) {
  pair p;
  if (!pair_start(&p)) return;
  fsh_error err = {{0}};
  fsh_shuffle_backend *b = NULL;
  fsh_shuffle_flight_options o = {.local = p.w[0], .peers = p.uris, .n_peers = 2,
                                  .timeout_ms = 30000};
  CHECK_OK(fsh_shuffle_flight_new(&o, &b, &err));
  stu_plan tiny, big;
  make_plan(&tiny, 77, 8, 2, 2000); /* ~10 KB a source */
  make_plan(&big, 78, 2, 2, 20000); /* ~400 KB a source */
  run_maps(&p, &tiny);
  run_maps(&p, &big);
  for (int32_t q = 0; q < 8; q++) stu_check_partition(b, &tiny, q, NULL, 0, "tiny");
  fsh_shuffle_flight_stats s = stats(b);
  CHECK_MSG(s.locates == 0 && s.fetched_sources == 8 && s.direct_sources == 0,
            "tiny: locates %lld fetched %lld direct %lld", (long long)s.locates,
            (long long)s.fetched_sources, (long long)s.direct_sources);
  for (int32_t q = 0; q < 2; q++) stu_check_partition(b, &big, q, NULL, 0, "big");
  s = stats(b);
  CHECK_MSG(s.locates == 2 && s.fetched_sources == 8 && s.direct_sources == 2,
            "big: locates %lld fetched %lld direct %lld", (long long)s.locates,
            (long long)s.fetched_sources, (long long)s.direct_sources);
  /* without sizes (a scheduler's compact metadata): one locate tells the
   * sources of that peer in that shuffle are small; later readers DoGet
   * them without asking */
  fsh_shuffle_backend *b2 = NULL;
  CHECK_OK(fsh_shuffle_flight_new(&o, &b2, &err));
  for (int32_t q = 0; q < 8 && b2; q++) {
    fsh_map_output src[2] = {tiny.maps[0].out, tiny.maps[1].out};
    for (int m = 0; m < 2; m++) src[m].rows = src[m].bytes = NULL, src[m].checksums = NULL;
    int64_t rows = 0, want = 0;
    CHECK_OK(stu_read_rc(b2, &tiny.spec, q, src, 2, &rows, &err));
    for (int m = 0; m < 2; m++) want += tiny.maps[m].out.rows[q];
    CHECK_EQ_INT(rows, want);
  }
  s = stats(b2);
  CHECK_MSG(s.locates == 1 && s.fetched_sources == 8 && s.direct_sources == 0,
            "no sizes: locates %lld fetched %lld direct %lld", (long long)s.locates,
            (long long)s.fetched_sources, (long long)s.direct_sources);
  fsh_shuffle_backend_destroy(b2);
  CHECK_OK(fsh_shuffle_release(p.b[0], 77, &err));
  CHECK_OK(fsh_shuffle_release(p.b[0], 78, &err));
  stu_plan_free(&tiny);
  stu_plan_free(&big);
  fsh_shuffle_backend_destroy(b);
  pair_stop(&p);
}

/* A range reader's run of small partitions: each of the peer's
 * (map output, partition)s is under the default minimum, but the run of
 * all of them is hundreds of KB a source. Counted per partition (the
 * block size it bounds), the peer's source comes through one DoGet
 * without a locate; a run of large partitions is read directly. The rows
 * are the plan's either way. */
static void small_partition_runs_use_doget(void) {
  pair p;
  if (!pair_start(&p)) return;
  fsh_error err = {{0}};
  fsh_shuffle_backend *b = NULL;
  fsh_shuffle_flight_options o = {.local = p.w[0], .peers = p.uris, .n_peers = 2,
                                  .timeout_ms = 30000};
  CHECK_OK(fsh_shuffle_flight_new(&o, &b, &err));
  stu_plan small, big;
  make_plan(&small, 79, 64, 2, 20000);
  make_plan(&big, 80, 4, 2, 20000);
  run_maps(&p, &small);
  run_maps(&p, &big);
  /* the shapes this is about, from what the maps wrote: map 1 (worker 1,
   * the peer) has every partition of `small` under 16 KiB and more than
   * 64 KiB over the run; every partition of `big` over 16 KiB */
  int64_t run_bytes = 0, max_part = 0, min_big = INT64_MAX;
  for (int32_t q = 0; q < 64; q++) {
    int64_t n = small.maps[1].out.bytes[q];
    run_bytes += n;
    if (n > max_part) max_part = n;
  }
  for (int32_t q = 0; q < 4; q++)
    if (big.maps[1].out.bytes[q] < min_big) min_big = big.maps[1].out.bytes[q];
  CHECK_MSG(max_part < (16 << 10) && run_bytes > (64 << 10) && min_big > (16 << 10),
            "plan shapes: largest small partition %lld, run %lld, smallest big partition %lld",
            (long long)max_part, (long long)run_bytes, (long long)min_big);
  /* first reads of this backend: nothing learnt yet about the peer */
  int64_t rows = 0, want = 0;
  fsh_map_output src[2] = {small.maps[0].out, small.maps[1].out};
  for (int m = 0; m < 2; m++)
    for (int32_t q = 0; q < 64; q++) want += small.maps[m].out.rows[q];
  fsh_shuffle_flight_stats s0 = stats(b);
  CHECK_OK(stu_read_range_rc(b, &small.spec, 0, 64, src, 2, &rows, &err));
  CHECK_EQ_INT(rows, want);
  fsh_shuffle_flight_stats s1 = stats(b);
  CHECK_MSG(s1.locates == s0.locates && s1.fetched_sources == s0.fetched_sources + 1 &&
                s1.direct_sources == s0.direct_sources,
            "small run: locates +%lld fetched +%lld direct +%lld",
            (long long)(s1.locates - s0.locates),
            (long long)(s1.fetched_sources - s0.fetched_sources),
            (long long)(s1.direct_sources - s0.direct_sources));
  fsh_map_output bsrc[2] = {big.maps[0].out, big.maps[1].out};
  want = 0;
  for (int m = 0; m < 2; m++)
    for (int32_t q = 0; q < 4; q++) want += big.maps[m].out.rows[q];
  CHECK_OK(stu_read_range_rc(b, &big.spec, 0, 4, bsrc, 2, &rows, &err));
  CHECK_EQ_INT(rows, want);
  fsh_shuffle_flight_stats s2 = stats(b);
  CHECK_MSG(s2.locates == s1.locates + 1 && s2.fetched_sources == s1.fetched_sources &&
                s2.direct_sources == s1.direct_sources + 1,
            "big run: locates +%lld fetched +%lld direct +%lld",
            (long long)(s2.locates - s1.locates),
            (long long)(s2.fetched_sources - s1.fetched_sources),
            (long long)(s2.direct_sources - s1.direct_sources));
  CHECK(stu_check_range(b, &small, 0, 64, NULL, 0, "small run"));
  CHECK(stu_check_range(b, &big, 0, 4, NULL, 0, "big run"));
  fsh_shuffle_backend_destroy(b);
  CHECK_OK(fsh_shuffle_release(p.b[0], 79, &err));
  CHECK_OK(fsh_shuffle_release(p.b[0], 80, &err));
  stu_plan_free(&small);
  stu_plan_free(&big);
  pair_stop(&p);
}

typedef struct race {
  fsh_shuffle_store *store;
  uint64_t shuffle_id;
  fsh_shuffle_backend *writer; /* evict: writes this map there */
  stu_plan *plan;
  int map;
  int calls;
} race;

static void release_after_locate(void *ctx) {
  race *r = ctx;
  r->calls++;
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_store_release(r->store, r->shuffle_id, &err));
}

/* Released between locate and read, on either worker (a memory image, a
 * spill file): the read fails with ENOENT saying the map output is not
 * held (released) -- through DoGet, after the direct open found it gone --
 * and yields no row. */
static void released_between_locate_and_read(void) {
  pair p;
  if (!pair_start(&p)) return;
  for (int i = 0; i < 2; i++) {
    stu_plan plan;
    uint64_t id = 73 + (uint64_t)i;
    make_plan(&plan, id, 2, 2, 3000);
    run_maps(&p, &plan);
    int peer = i; /* map i is on worker i; read it from the other one */
    fsh_shuffle_backend *reader = p.b[1 - peer];
    fsh_shuffle_flight_stats before = stats(reader);
    race r = {.store = fsh_shuffle_worker_store(p.w[peer]), .shuffle_id = id};
    fr_test_after_locate_ctx = &r;
    fr_test_after_locate = release_after_locate;
    fsh_error err = {{0}};
    fsh_map_output src = plan.maps[peer].out;
    int64_t rows = -1;
    int rc = stu_read_rc(reader, &plan.spec, 0, &src, 1, &rows, &err);
    fr_test_after_locate = NULL;
    fr_test_after_locate_ctx = NULL;
    CHECK_EQ_INT(r.calls, 1);
    CHECK_MSG(rc == ENOENT && strstr(err.message, "released") && strstr(err.message, p.uris[peer]),
              "%s: rc %d: %s", peer ? "spill file" : "memory image", rc, err.message);
    CHECK_MSG(rows <= 0, "%lld rows", (long long)rows);
    printf("  released meanwhile (%s): %s\n", peer ? "spill file" : "memory image", err.message);
    fsh_shuffle_flight_stats after = stats(reader);
    CHECK_EQ_INT(after.direct_fallbacks - before.direct_fallbacks, 1);
    CHECK_EQ_INT(after.direct_sources - before.direct_sources, 0);
    CHECK_OK(fsh_shuffle_release(p.b[0], id, &err));
    stu_plan_free(&plan);
  }
  pair_stop(&p);
}

static void reuse_after_locate(void *ctx) {
  race *r = ctx;
  r->calls++;
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_store_release(r->store, r->shuffle_id, &err));
  /* the same map output written again: into the released image's memfd
   * (its metadata into a copy: the reader holds the plan's) */
  stu_map again = r->plan->maps[r->map];
  memset(&again.out, 0, sizeof again.out);
  CHECK_OK(stu_run_map(r->writer, &r->plan->spec, &again, &err));
  fsh_map_output_reset(&again.out);
}

/* A memory image released between locate and read, and its memfd reused
 * at once for the same map output written again (same fd, inode and
 * size): the reader's open refuses it by its identity trailer, and the
 * read goes through DoGet, which serves the new image's rows -- the rows
 * written, nothing else. */
static void reused_between_locate_and_read(void) {
  pair p;
  if (!pair_start(&p)) return;
  stu_plan plan;
  make_plan(&plan, 76, 2, 2, 3000);
  run_maps(&p, &plan);
  fsh_shuffle_store *store = fsh_shuffle_worker_store(p.w[0]);
  fsh_store_pool_stats before_pool;
  fsh_store_get_pool_stats(store, &before_pool);
  fsh_shuffle_flight_stats before = stats(p.b[1]);
  race r = {.store = store, .shuffle_id = 76, .writer = p.b[0], .plan = &plan, .map = 0};
  fr_test_after_locate_ctx = &r;
  fr_test_after_locate = reuse_after_locate;
  int only0[] = {0};
  stu_check_partition(p.b[1], &plan, 1, only0, 1, "reused meanwhile");
  fr_test_after_locate = NULL;
  fr_test_after_locate_ctx = NULL;
  CHECK_EQ_INT(r.calls, 1);
  fsh_store_pool_stats after_pool;
  fsh_store_get_pool_stats(store, &after_pool);
  CHECK_MSG(after_pool.reused - before_pool.reused == 1, "%lld memfds reused",
            (long long)(after_pool.reused - before_pool.reused));
  fsh_shuffle_flight_stats after = stats(p.b[1]);
  CHECK_MSG(after.direct_fallbacks - before.direct_fallbacks == 1 &&
                after.direct_sources == before.direct_sources,
            "fallbacks %lld direct %lld", (long long)(after.direct_fallbacks - before.direct_fallbacks),
            (long long)(after.direct_sources - before.direct_sources));
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(p.b[0], 76, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

static void evict_after_locate(void *ctx) {
  race *r = ctx;
  r->calls++;
  fsh_error err = {{0}};
  CHECK_OK(stu_run_map(r->writer, &r->plan->spec, &r->plan->maps[r->map], &err));
}

/* A memory image evicted to a spill file between locate and read (another
 * map output written under a budget that holds one): the memfd is gone,
 * the read goes through DoGet and yields exactly the rows written. */
static void evicted_between_locate_and_read(void) {
  char *dir = stu_mkdtemp("evict");
  fsh_shuffle_worker *w = start_worker(dir, 600 << 10), *reader_w = start_worker(NULL, 1 << 30);
  if (!w || !reader_w) return;
  const char *uris[2] = {fsh_shuffle_worker_uri(w), fsh_shuffle_worker_uri(reader_w)};
  fsh_shuffle_backend *bw = backend_for(w, uris, 2, false);
  fsh_shuffle_backend *br = backend_for(reader_w, uris, 2, false);
  stu_plan plan;
  make_plan(&plan, 75, 2, 2, 8000); /* ~400 KB a map output: one fits the budget */
  fsh_error err = {{0}};
  CHECK_OK(stu_run_map(bw, &plan.spec, &plan.maps[0], &err));
  fsh_shuffle_store_stats ss;
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &ss);
  CHECK_EQ_INT(ss.spilled_outputs, 0);
  race r = {.writer = bw, .plan = &plan, .map = 1};
  fr_test_after_locate_ctx = &r;
  fr_test_after_locate = evict_after_locate;
  int only0[] = {0};
  stu_check_partition(br, &plan, 1, only0, 1, "evicted meanwhile");
  fr_test_after_locate = NULL;
  fr_test_after_locate_ctx = NULL;
  CHECK_EQ_INT(r.calls, 1);
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &ss);
  CHECK_MSG(ss.spilled_outputs >= 1, "%lld spilled", (long long)ss.spilled_outputs);
  fsh_shuffle_flight_stats s = stats(br);
  CHECK_MSG(s.direct_fallbacks == 1 && s.fetched_sources == 1 && s.direct_sources == 0,
            "fallbacks %lld fetched %lld direct %lld", (long long)s.direct_fallbacks,
            (long long)s.fetched_sources, (long long)s.direct_sources);
  /* and now both read directly (the evicted one from its spill file) */
  stu_check_partition(br, &plan, 0, NULL, 0, "after eviction");
  s = stats(br);
  CHECK_EQ_INT(s.direct_sources, 2);
  CHECK_OK(fsh_shuffle_release(br, 75, &err));
  stu_plan_free(&plan);
  fsh_shuffle_backend_destroy(bw);
  fsh_shuffle_backend_destroy(br);
  fsh_shuffle_worker_stop(w, 1000);
  fsh_shuffle_worker_stop(reader_w, 1000);
  CHECK_EQ_INT(stu_count_files(dir), 0);
  stu_rmdir(dir);
}

/* ---- VM images ---------------------------------------------------------- */

static void with_vm(void (*test)(void)) {
  g_images = FSH_STORE_IMAGES_VM;
  test();
  g_images = FSH_STORE_IMAGES_MEMFD;
}

static void same_host_reads_directly_vm(void) { with_vm(same_host_reads_directly); }
static void locate_answer_vm(void) { with_vm(locate_answer); }
static void released_between_locate_and_read_vm(void) {
  with_vm(released_between_locate_and_read);
}
static void reused_between_locate_and_read_vm(void) { with_vm(reused_between_locate_and_read); }
static void evicted_between_locate_and_read_vm(void) {
  with_vm(evicted_between_locate_and_read);
}

/* pair_start with VM images (the tests' default stays memfd). */
static bool pair_start_vm(pair *p) {
  g_images = FSH_STORE_IMAGES_VM;
  bool ok = pair_start(p);
  g_images = FSH_STORE_IMAGES_MEMFD;
  return ok;
}

/* A VM image released and its mapping reused at once for the same map
 * output written again (same address, same size, same bytes but for the
 * trailer's image id) after the reader copied the blocks and before it
 * checked the trailer again: the copy is not used (its trailer names
 * another image), the read goes through DoGet and yields the rows written. */
static void reused_between_copy_and_check_vm(void) {
  pair p;
  if (!pair_start_vm(&p)) return;
  stu_plan plan;
  make_plan(&plan, 77, 2, 2, 3000);
  run_maps(&p, &plan);
  fsh_shuffle_store *store = fsh_shuffle_worker_store(p.w[0]);
  fsh_store_location before_loc;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_locate(store, 77, 0, 0, 1, &before_loc, &err));
  CHECK_EQ_INT(before_loc.kind, FSH_STORE_AT_VM);
  fsh_store_pool_stats before_pool;
  fsh_store_get_pool_stats(store, &before_pool);
  fsh_shuffle_flight_stats before = stats(p.b[1]);
  race r = {.store = store, .shuffle_id = 77, .writer = p.b[0], .plan = &plan, .map = 0};
  fr_test_after_vm_data_ctx = &r;
  fr_test_after_vm_data = reuse_after_locate;
  int only0[] = {0};
  stu_check_partition(p.b[1], &plan, 1, only0, 1, "reused after the copy");
  fr_test_after_vm_data = NULL;
  fr_test_after_vm_data_ctx = NULL;
  CHECK_EQ_INT(r.calls, 1);
  fsh_store_pool_stats after_pool;
  fsh_store_get_pool_stats(store, &after_pool);
  CHECK_MSG(after_pool.reused - before_pool.reused == 1, "%lld images reused",
            (long long)(after_pool.reused - before_pool.reused));
  fsh_store_location after_loc; /* the very mapping, rewritten */
  CHECK_OK(fsh_store_locate(store, 77, 0, 0, 1, &after_loc, &err));
  CHECK_MSG(after_loc.addr == before_loc.addr && after_loc.size == before_loc.size &&
                after_loc.image_id != before_loc.image_id,
            "addr %llx size %lld id %llu, was %llx %lld %llu", (unsigned long long)after_loc.addr,
            (long long)after_loc.size, (unsigned long long)after_loc.image_id,
            (unsigned long long)before_loc.addr, (long long)before_loc.size,
            (unsigned long long)before_loc.image_id);
  fsh_store_location_reset(&before_loc);
  fsh_store_location_reset(&after_loc);
  fsh_shuffle_flight_stats after = stats(p.b[1]);
  CHECK_MSG(after.direct_fallbacks - before.direct_fallbacks == 1 &&
                after.direct_sources == before.direct_sources &&
                after.fetched_sources - before.fetched_sources == 1,
            "fallbacks %lld direct %lld fetched %lld",
            (long long)(after.direct_fallbacks - before.direct_fallbacks),
            (long long)(after.direct_sources - before.direct_sources),
            (long long)(after.fetched_sources - before.fetched_sources));
  /* and the next read of it is direct again */
  stu_check_partition(p.b[1], &plan, 0, only0, 1, "after the reuse");
  CHECK_EQ_INT(stats(p.b[1]).direct_sources - after.direct_sources, 1);
  CHECK_OK(fsh_shuffle_release(p.b[0], 77, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

static int g_vm_errno, g_vm_errno_calls, g_vm_errno_times;

static int vm_errno_hook(void) {
  if (g_vm_errno_times == 0) return 0;
  g_vm_errno_times--;
  g_vm_errno_calls++;
  return g_vm_errno;
}

/* process_vm_readv refused. EPERM (a host's ptrace restrictions; set by a
 * hook: these tests run as root): that source comes through DoGet, and
 * every later read of that peer too, without a locate; the rows are the
 * ones written. ESRCH (the process gone; here simulated once): a DoGet
 * for that source only, the next read direct again. */
static void copy_refused_vm(void) {
  pair p;
  if (!pair_start_vm(&p)) return;
  stu_plan plan;
  make_plan(&plan, 78, 3, 2, 3000);
  run_maps(&p, &plan);
  int only0[] = {0};
  fr_test_vm_errno = vm_errno_hook;
  /* ESRCH once */
  g_vm_errno = ESRCH, g_vm_errno_times = 1, g_vm_errno_calls = 0;
  fsh_shuffle_flight_stats s0 = stats(p.b[1]);
  stu_check_partition(p.b[1], &plan, 0, only0, 1, "ESRCH");
  fsh_shuffle_flight_stats s1 = stats(p.b[1]);
  CHECK_EQ_INT(g_vm_errno_calls, 1);
  CHECK_MSG(s1.direct_fallbacks - s0.direct_fallbacks == 1 &&
                s1.fetched_sources - s0.fetched_sources == 1 && s1.direct_sources == s0.direct_sources,
            "ESRCH: fallbacks %lld fetched %lld direct %lld",
            (long long)(s1.direct_fallbacks - s0.direct_fallbacks),
            (long long)(s1.fetched_sources - s0.fetched_sources),
            (long long)(s1.direct_sources - s0.direct_sources));
  stu_check_partition(p.b[1], &plan, 1, only0, 1, "after ESRCH");
  fsh_shuffle_flight_stats s2 = stats(p.b[1]);
  CHECK_EQ_INT(s2.direct_sources - s1.direct_sources, 1);
  /* EPERM: from now on DoGet for that peer */
  g_vm_errno = EPERM, g_vm_errno_times = 1000, g_vm_errno_calls = 0;
  stu_check_partition(p.b[1], &plan, 2, only0, 1, "EPERM");
  fsh_shuffle_flight_stats s3 = stats(p.b[1]);
  CHECK_EQ_INT(g_vm_errno_calls, 1);
  CHECK_MSG(s3.direct_fallbacks - s2.direct_fallbacks == 1 &&
                s3.fetched_sources - s2.fetched_sources == 1 && s3.direct_sources == s2.direct_sources &&
                s3.locates - s2.locates == 1,
            "EPERM: fallbacks %lld fetched %lld direct %lld locates %lld",
            (long long)(s3.direct_fallbacks - s2.direct_fallbacks),
            (long long)(s3.fetched_sources - s2.fetched_sources),
            (long long)(s3.direct_sources - s2.direct_sources),
            (long long)(s3.locates - s2.locates));
  stu_check_partition(p.b[1], &plan, 0, only0, 1, "after EPERM");
  stu_check_partition(p.b[1], &plan, 1, NULL, 0, "after EPERM, both maps");
  fsh_shuffle_flight_stats s4 = stats(p.b[1]);
  CHECK_EQ_INT(g_vm_errno_calls, 1); /* never asked again */
  CHECK_MSG(s4.locates == s3.locates && s4.direct_fallbacks == s3.direct_fallbacks &&
                s4.fetched_sources - s3.fetched_sources == 2,
            "after EPERM: locates %lld fallbacks %lld fetched %lld",
            (long long)(s4.locates - s3.locates),
            (long long)(s4.direct_fallbacks - s3.direct_fallbacks),
            (long long)(s4.fetched_sources - s3.fetched_sources));
  fr_test_vm_errno = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(p.b[0], 78, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

/* Large VM reads copy each source's span into a buffer from the reader's
 * span pool: after the first read's batches are consumed, the next read
 * of the same span reuses its mapping instead of faulting a new one; the
 * rows are the
 * ones written; fr_spans_drop empties the pool. */
static void large_spans_pooled_vm(void) {
  pair p;
  if (!pair_start_vm(&p)) return;
  stu_plan plan;
  make_plan(&plan, 79, 2, 2, 60000);
  plan.spec.compression = FSH_COMPRESSION_NONE; /* partitions of ~1 MB */
  run_maps(&p, &plan);
  CHECK(plan.maps[0].out.bytes[0] >= (256 << 10));
  int only0[] = {0};
  fr_spans_drop();
  int64_t maps0, reused0, pooled0;
  fr_spans_stats(&maps0, &reused0, &pooled0);
  CHECK_EQ_INT(pooled0, 0);
  fsh_shuffle_flight_stats s0 = stats(p.b[1]);
  stu_check_partition(p.b[1], &plan, 0, only0, 1, "large span");
  stu_check_partition(p.b[1], &plan, 0, only0, 1, "large span again"); /* the same size */
  fsh_shuffle_flight_stats s1 = stats(p.b[1]);
  CHECK_EQ_INT(s1.direct_sources - s0.direct_sources, 2);
  int64_t maps1, reused1, pooled1;
  fr_spans_stats(&maps1, &reused1, &pooled1);
  CHECK_MSG(maps1 - maps0 == 1 && reused1 - reused0 == 1 && pooled1 > 0,
            "span mappings made %lld, reused %lld, pooled %lld", (long long)(maps1 - maps0),
            (long long)(reused1 - reused0), (long long)pooled1);
  fr_spans_drop();
  fr_spans_stats(&maps1, &reused1, &pooled1);
  CHECK_EQ_INT(pooled1, 0);
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(p.b[0], 79, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

/* A locate entry of a kind this reader does not know (a later version's)
 * is read as not directly readable (NONE), the rest of the answer as
 * usual. */
static void unknown_kind_not_direct(void) {
  pair p;
  if (!pair_start_vm(&p)) return;
  stu_plan plan;
  make_plan(&plan, 80, 2, 2, 3000);
  run_maps(&p, &plan);
  fsh_error err = {{0}};
  fsh_ticket_source srcs[1] = {{0, 0}};
  fsh_shuffle_ticket t = {.shuffle_id = 80, .partition = 1, .n_sources = 1, .sources = srcs};
  fsh_buffer *tb = NULL;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
  fsh_flight_result_list res = {0};
  if (tb)
    CHECK_OK(fsh_worker_locate(fsh_shuffle_worker_store(p.w[0]), tb->data, tb->size, &res, &err));
  fsh_buffer_unref(tb);
  if (res.n == 1) {
    uint8_t *raw = res.items[0].data;
    int64_t n = res.items[0].size;
    fsh_locate_answer a = {0};
    CHECK_OK(fsh_locate_answer_decode(raw, n, 1, &a, &err));
    CHECK_EQ_INT(a.sources ? (int)a.sources[0].kind : -1, FSH_STORE_AT_VM);
    int64_t entry = a.sources ? (a.sources[0].blocks - raw) - FSH_LOCATE_SOURCE_BYTES : -1;
    int64_t n_blocks = a.sources ? a.sources[0].n_blocks : 0;
    fsh_locate_answer_reset(&a);
    CHECK(entry > 0 && n_blocks > 0 && fsh_le_get32(raw + entry) == FSH_STORE_AT_VM);
    if (entry > 0) {
      fsh_le_put32(raw + entry, 9);
      CHECK_OK(fsh_locate_answer_decode(raw, n, 1, &a, &err));
      CHECK_EQ_INT(a.sources ? (int)a.sources[0].kind : -1, FSH_STORE_AT_NONE);
      CHECK_EQ_INT(a.sources ? a.sources[0].n_blocks : -1, n_blocks);
      fsh_locate_answer_reset(&a);
    }
  }
  fsh_flight_result_list_reset(&res);
  CHECK_OK(fsh_shuffle_release(p.b[0], 80, &err));
  stu_plan_free(&plan);
  pair_stop(&p);
}

FSH_TEST_MAIN(TEST(same_host_reads_directly), TEST(locate_answer),
              TEST(corrupted_file_read_directly), TEST(large_partitions_mapped),
              TEST(small_sources_use_doget),
              TEST(small_partition_runs_use_doget),
              TEST(released_between_locate_and_read),
              TEST(evicted_between_locate_and_read), TEST(reused_between_locate_and_read),
              TEST(same_host_reads_directly_vm), TEST(locate_answer_vm),
              TEST(released_between_locate_and_read_vm),
              TEST(evicted_between_locate_and_read_vm), TEST(reused_between_locate_and_read_vm),
              TEST(reused_between_copy_and_check_vm), TEST(copy_refused_vm),
              TEST(large_spans_pooled_vm), TEST(unknown_kind_not_direct))
