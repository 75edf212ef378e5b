/* test_flight_backend.c -- the flight backend beyond the conformance
 * suite: spill under a memory limit far below the data (output identical),
 * several spill directories round-robin, release deleting files, leftovers
 * of a crashed run removed at start (and nothing else), a corrupted spill
 * file detected on read over Flight and in-process (EIO naming worker, map
 * output and partition), a damaged memory image found by the server for
 * a plain DoGet and by our reader (which the server leaves it to), a map output missing from a live worker's store
 * (local and remote readers name it as lost, and report it to their
 * worker task), an output finished after
 * its shuffle's release dropped, a peer that is gone (an error naming it), a spill
 * directory that vanished (a clean task error), a DoGet over map outputs
 * of different schemas refused, the ticket codec, and range readers (one
 * open of each source per run on every path; a damaged block and a lost
 * map output inside a run), and a shuffle released (its images' memfds
 * reused) while a bundled DoGet of it streams. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <xxhash.h>

#include <flightshuffle/flight.h>

#include "ipc/sample_batches.h"
#include "shuffle/flight_reader.h" /* a range reader's bytes in flight */
#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"
#include "shuffle/worker_internal.h" /* fsh_worker_tasks: reads run as worker tasks */

static fsh_shuffle_worker *start_worker_images(const char *const *dirs, int n_dirs,
                                               int64_t limit, fsh_store_images images) {
  fsh_error err = {{0}};
  fsh_shuffle_worker *w = NULL;
  fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .spill_dirs = dirs,
                                  .n_spill_dirs = n_dirs, .memory_limit = limit, .n_threads = 2,
                                  .images = images};
  CHECK_OK(fsh_shuffle_worker_start(&o, &w, &err));
  return w;
}

/* A worker with the default memory images (VM). */
static fsh_shuffle_worker *start_worker(const char *const *dirs, int n_dirs, int64_t limit) {
  return start_worker_images(dirs, n_dirs, limit, FSH_STORE_IMAGES_VM);
}

/* A backend writing to w (or reader-only when w is NULL) with the given
 * peers. */
static fsh_shuffle_backend *backend_for(fsh_shuffle_worker *w, const char **peers, int n) {
  fsh_error err = {{0}};
  fsh_shuffle_backend *b = NULL;
  fsh_shuffle_flight_options o = {.local = w, .peers = peers, .n_peers = n,
                                  .max_parallel_fetches = 2, .max_bytes_in_flight = 1 << 20,
                                  .timeout_ms = 30000};
  CHECK_OK(fsh_shuffle_flight_new(&o, &b, &err));
  return b;
}

/* A plan of n_maps synthetic map tasks over n_parts partitions. */
static void make_plan(stu_plan *p, uint64_t id, int32_t n_parts, int n_maps, int64_t rows) {
  fsh_batch *probe = stu_synthetic(0, 1);
  stu_plan_init(p, id, n_parts, probe->schema, n_maps);
  p->spec.target_block_bytes = 32 << 10;
  p->spec.compression = FSH_COMPRESSION_LZ4_FRAME;
  for (int m = 0; m < n_maps; m++) {
    fsh_batch *x = stu_synthetic(100 + m, rows);
    stu_add_split(&p->maps[m], x, n_parts, 7 + m, false, (uint64_t)m);
    fsh_batch_unref(x);
  }
  fsh_batch_unref(probe);
}

static void run_maps(fsh_shuffle_backend *b, stu_plan *p) {
  fsh_error err = {{0}};
  for (int m = 0; m < p->n_maps; m++) CHECK_OK(stu_run_map(b, &p->spec, &p->maps[m], &err));
}

/* Memory limit far below the data, three spill dirs: the output spills
 * round-robin, reads back identical (over Flight and in-process), and
 * release removes every file. */
static void spill_round_robin(void) {
  char *dirs[3] = {stu_mkdtemp("spill0"), stu_mkdtemp("spill1"), stu_mkdtemp("spill2")};
  fsh_shuffle_worker *w = start_worker((const char *const *)dirs, 3, 100 << 10);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1), *remote = backend_for(NULL, &uri, 1);
  stu_plan p;
  make_plan(&p, 5, 6, 6, 20000); /* ~1 MB per map output */
  run_maps(local, &p);
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
  CHECK_EQ_INT(st.map_outputs, 6);
  CHECK_MSG(st.spilled_outputs >= 5, "%lld spilled", (long long)st.spilled_outputs);
  CHECK(st.memory_bytes <= 100 << 10);
  for (int d = 0; d < 3; d++)
    CHECK_MSG(stu_count_files(dirs[d]) >= 1, "dir %d holds %d files", d, stu_count_files(dirs[d]));
  for (int32_t q = 0; q < 6; q++) {
    stu_check_partition(remote, &p, q, NULL, 0, "flight remote");
    stu_check_partition(local, &p, q, NULL, 0, "flight local");
  }
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(remote, 5, &err)); /* DoAction "release" */
  for (int d = 0; d < 3; d++) CHECK_EQ_INT(stu_count_files(dirs[d]), 0);
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
  CHECK_EQ_INT(st.map_outputs, 0);
  CHECK_EQ_INT(st.memory_bytes, 0);
  int64_t rows = 0;
  int rc = stu_read_rc(remote, &p.spec, 0, &p.maps[0].out, 1, &rows, &err);
  CHECK_MSG(rc == ENOENT && strstr(err.message, uri), "rc %d: %s", rc, err.message);
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w, 1000);
  for (int d = 0; d < 3; d++) stu_rmdir(dirs[d]);
}

/* Outputs already in memory do not hold the budget forever: a writer that
 * meets the budget first moves the oldest completed in-memory output to a
 * spill file (here map 0's) and stays in memory itself; everything reads
 * back identical, and release removes the file. */
static void oldest_output_spills_first(void) {
  char *dir = stu_mkdtemp("evict");
  const char *d = dir;
  fsh_shuffle_worker *w = start_worker(&d, 1, 3 << 19); /* 1.5 MiB */
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1), *remote = backend_for(NULL, &uri, 1);
  stu_plan p;
  make_plan(&p, 9, 4, 2, 25000);
  p.spec.compression = FSH_COMPRESSION_NONE;
  fsh_error err = {{0}};
  fsh_shuffle_store_stats st;
  CHECK_OK(stu_run_map(local, &p.spec, &p.maps[0], &err));
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
  int64_t first = st.memory_bytes;
  printf("  map 0: %lld bytes in memory\n", (long long)first);
  /* map 0 is between 512 KiB and 1 MiB: map 1's image grows to 1 MiB of
   * capacity, which fits only once map 0 is out of memory */
  CHECK_MSG(st.spilled_outputs == 0 && first > (512 << 10) && first <= (1 << 20),
            "%lld spilled, %lld bytes in memory", (long long)st.spilled_outputs,
            (long long)first);
  CHECK_OK(stu_run_map(local, &p.spec, &p.maps[1], &err));
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
  CHECK_EQ_INT(st.map_outputs, 2);
  CHECK_EQ_INT(st.spilled_outputs, 1);
  CHECK_MSG(st.memory_bytes > (512 << 10) && st.memory_bytes <= (1 << 20),
            "%lld bytes in memory", (long long)st.memory_bytes);
  CHECK_EQ_INT(st.spilled_bytes, first);
  char name[256] = "";
  DIR *dd = opendir(dir);
  struct dirent *e;
  while (dd && (e = readdir(dd)) != NULL)
    if (strncmp(e->d_name, "fshspill-", 9) == 0) snprintf(name, sizeof name, "%s", e->d_name);
  if (dd) closedir(dd);
  CHECK_MSG(strstr(name, "-s9-m0-a0-") && !strstr(name, ".tmp"), "spill file '%s'", name);
  CHECK_EQ_INT(stu_count_files(dir), 1);
  for (int32_t q = 0; q < 4; q++) {
    stu_check_partition(remote, &p, q, NULL, 0, "flight remote");
    stu_check_partition(local, &p, q, NULL, 0, "flight local");
  }
  CHECK_OK(fsh_shuffle_release(remote, 9, &err));
  CHECK_EQ_INT(stu_count_files(dir), 0);
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
  CHECK_EQ_INT(st.memory_bytes, 0);
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

static void touch(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
}

/* A new store removes its naming pattern's files, nothing else. */
static void leftovers_removed_at_start(void) {
  char *dir = stu_mkdtemp("leftovers");
  touch(dir, "fshspill-0123456789abcdef-s1-m2-a0-5.arrows");
  touch(dir, "fshspill-0123456789abcdef-s1-m3-a1-6.arrows.tmp");
  touch(dir, "fshspill-notours.arrows");
  touch(dir, "fshspill-0123456789abcdef-s1-m2-a0-5.arrows.bak");
  touch(dir, "keep.txt");
  fsh_error err = {{0}};
  fsh_shuffle_store *s = NULL;
  const char *d = dir;
  fsh_shuffle_store_options o = {.spill_dirs = &d, .n_spill_dirs = 1, .memory_limit = 0};
  CHECK_OK(fsh_shuffle_store_new(&o, &s, &err));
  CHECK_EQ_INT(stu_count_files(dir), 3);
  char path[512];
  snprintf(path, sizeof path, "%s/keep.txt", dir);
  CHECK(access(path, F_OK) == 0);
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
}

/* A pid no process has: a child's, reaped. */
static long dead_pid(void) {
  pid_t c = fork();
  if (c == 0) _exit(0);
  CHECK(c > 0);
  int st = 0;
  CHECK(waitpid(c, &st, 0) == c);
  return (long)c;
}

/* A new store also removes the exec layer's operator spill files
 * ("fshexec-<pid>-<spill>-<seq>-<tag>.arrows", exec.h) of dead processes
 * and its own pid's (leftovers), keeps those of a live other process and
 * every near miss of the pattern. */
static void exec_leftovers_removed_at_start(void) {
  char *dir = stu_mkdtemp("execleft");
  long dead = dead_pid(), self = (long)getpid(), live = (long)getppid();
  const char *gone[] = {"fshexec-%ld-0-0-exec.arrows", "fshexec-%ld-17-3-sort.arrows",
                        "fshexec-%ld-1-2-abcdefghijklmnopqrstuvwxyz01234.arrows"};
  const char *kept[] = {"fshexec-%ld-0-0-exec.arrows.tmp", "fshexec-%ld-0-0-.arrows",
                        "fshexec-%ld-0-exec.arrows", "fshexec-%ld-00-1-exec.arrows",
                        "fshexec-%ld-0-1-exec.arrow", "xfshexec-%ld-0-0-exec.arrows",
                        "fshexec-%ld-+1-1-exec.arrows",
                        "fshexec-%ld-1-2-abcdefghijklmnopqrstuvwxyz012345.arrows"};
  char name[256];
  int n_kept = 0;
  for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
    snprintf(name, sizeof name, gone[i], i == 1 ? self : dead);
    touch(dir, name);
  }
  for (size_t i = 0; i < sizeof kept / sizeof *kept; i++, n_kept++) {
    snprintf(name, sizeof name, kept[i], dead);
    touch(dir, name);
  }
  snprintf(name, sizeof name, "fshexec-%ld-0-0-exec.arrows", live); /* a live process's */
  touch(dir, name);
  n_kept++;
  touch(dir, "fshexec-0-0-0-exec.arrows");
  touch(dir, "fshexec--5-0-0-exec.arrows");
  touch(dir, "fshexec-4294967297-0-0-exec.arrows"); /* not a pid */
  n_kept += 3;
  CHECK_EQ_INT(stu_count_files(dir), n_kept + (int)(sizeof gone / sizeof *gone));
  fsh_error err = {{0}};
  fsh_shuffle_store *s = NULL;
  const char *d = dir;
  fsh_shuffle_store_options o = {.spill_dirs = &d, .n_spill_dirs = 1, .memory_limit = 0};
  CHECK_OK(fsh_shuffle_store_new(&o, &s, &err));
  CHECK_EQ_INT(stu_count_files(dir), n_kept);
  char path[512];
  for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
    snprintf(name, sizeof name, gone[i], i == 1 ? self : dead);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_MSG(access(path, F_OK) != 0, "%s was kept", name);
  }
  snprintf(path, sizeof path, "%s/fshexec-%ld-0-0-exec.arrows", dir, live);
  CHECK_MSG(access(path, F_OK) == 0, "the live process's file was removed");
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
}

/* Flips one byte in the middle of the first data block of the only spill
 * file in dir. */
static void corrupt_spill_file(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[512] = "";
  while (d && (e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "fshspill-", 9) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
  fsh_error err = {{0}};
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_map_file_open_path(path, &f, &err));
  if (!f) return;
  fsh_map_file_partition part = {0};
  CHECK_OK(fsh_map_file_get_partition(f, 1, &part, &err));
  int64_t at = part.n_blocks ? part.blocks[0].offset + part.blocks[0].length - 16 : 0;
  fsh_map_file_partition_reset(&part);
  fsh_map_file_close(f);
  int fd = open(path, O_RDWR);
  uint8_t byte = 0;
  CHECK(fd >= 0 && pread(fd, &byte, 1, at) == 1);
  byte ^= 0x5A;
  CHECK(pwrite(fd, &byte, 1, at) == 1);
  close(fd);
}

static void corruption_detected(void) {
  char *dir = stu_mkdtemp("corrupt");
  const char *d = dir;
  fsh_shuffle_worker *w = start_worker(&d, 1, 0); /* everything spills */
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1), *remote = backend_for(NULL, &uri, 1);
  stu_plan p;
  make_plan(&p, 9, 3, 1, 5000);
  p.spec.compression = FSH_COMPRESSION_NONE;
  run_maps(local, &p);
  corrupt_spill_file(dir);
  fsh_error err = {{0}};
  int rc = stu_read_rc(remote, &p.spec, 1, &p.maps[0].out, 1, NULL, &err);
  CHECK_MSG(rc == EIO && strstr(err.message, uri) && strstr(err.message, "map 0") &&
                strstr(err.message, "partition 1") && strstr(err.message, "checksum"),
            "over Flight: rc %d: %s", rc, err.message);
  rc = stu_read_rc(local, &p.spec, 1, &p.maps[0].out, 1, NULL, &err);
  CHECK_MSG(rc == EIO && strstr(err.message, "map 0") && strstr(err.message, "partition 1") &&
                strstr(err.message, dir),
            "in-process: rc %d: %s", rc, err.message);
  /* the other partitions are intact */
  stu_check_partition(remote, &p, 0, NULL, 0, "flight remote");
  CHECK_OK(fsh_shuffle_release(remote, 9, &err));
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

/* A read of a partition run as a worker task (worker_tasks.c), keeping
 * what the reader reported lost to the task (fsh_worker_task_lost). */
typedef struct task_read {
  fsh_shuffle_backend *b;
  const fsh_shuffle_spec *spec;
  int32_t part;
  int32_t count; /* > 1: a range reader of [part, part + count) */
  const fsh_map_output *outs;
  int64_t n;
  int rc;
  fsh_error err;
  int64_t n_lost;
  fsh_lost_output lost[4];
  char uris[4][100];
} task_read;

static int task_read_run(void *arg, fsh_buffer **answer, fsh_error *err) {
  (void)answer, (void)err;
  task_read *x = arg;
  x->rc = x->count > 1
              ? stu_read_range_rc(x->b, x->spec, x->part, x->count, x->outs, x->n, NULL, &x->err)
              : stu_read_rc(x->b, x->spec, x->part, x->outs, x->n, NULL, &x->err);
  const fsh_lost_output *l = NULL;
  x->n_lost = fsh_worker_task_lost(&l);
  for (int64_t i = 0; i < x->n_lost && i < 4; i++) {
    x->lost[i] = l[i];
    snprintf(x->uris[i], sizeof x->uris[i], "%s", l[i].uri);
    x->lost[i].uri = x->uris[i];
  }
  return 0;
}

static void read_in_task(task_read *x) {
  fsh_error err = {{0}};
  fsh_worker_tasks *t = NULL;
  CHECK_OK(fsh_worker_tasks_new(&t));
  if (!t) return;
  uint64_t id = 0;
  CHECK_OK(fsh_worker_tasks_start(t, task_read_run, x, NULL, &id, &err));
  bool done = false;
  for (int i = 0; i < 3000 && !done; i++) {
    fsh_buffer *a = NULL;
    CHECK_OK(fsh_worker_tasks_poll(t, id, &done, &a, &err));
    fsh_buffer_unref(a);
    if (!done) {
      struct timespec ts = {0, 10 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  CHECK(done);
  fsh_worker_tasks_free(t);
}

/* A raw DoGet of partition q of map 0 of shuffle id on uri with the given
 * ticket flags, drained: 0 or the stream's error (in *err). */
static int raw_get_rc(const char *uri, uint64_t id, int32_t q, uint8_t flags, fsh_error *err) {
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
  int rc = fsh_flight_client_open(&o, &c, err);
  fsh_ticket_source src = {0, 0};
  fsh_shuffle_ticket t = {.shuffle_id = id, .partition = q, .flags = flags, .n_sources = 1,
                          .sources = &src};
  fsh_buffer *tb = NULL;
  if (rc == 0) rc = fsh_shuffle_ticket_encode(&t, &tb, err);
  fsh_flight_reader *rd = NULL;
  if (rc == 0) rc = fsh_flight_do_get(c, &(fsh_bytes){tb->data, tb->size}, &rd, err);
  for (bool done = false; rc == 0 && !done;) {
    fsh_flight_message m;
    rc = fsh_flight_reader_next_raw(rd, &m, &done, err);
    if (rc == 0 && !done) fsh_flight_message_reset(&m);
  }
  fsh_flight_reader_free(rd);
  fsh_buffer_unref(tb);
  fsh_flight_client_close(c);
  return rc;
}

/* Flips one byte in the middle of the first block of `partition` of map
 * 0 attempt 0 of shuffle id in w's memory image (a memfd, shared with the
 * mapping the worker serves from; or a VM image, in this very process's
 * memory). */
static bool corrupt_image(fsh_shuffle_worker *w, uint64_t id, int32_t partition) {
  fsh_error err = {{0}};
  fsh_store_location loc;
  memset(&loc, 0, sizeof loc);
  CHECK_OK(fsh_store_locate(fsh_shuffle_worker_store(w), id, 0, 0, partition, &loc, &err));
  bool ok = (loc.kind == FSH_STORE_AT_MEMFD || loc.kind == FSH_STORE_AT_VM) &&
            loc.part.n_blocks > 0;
  CHECK_MSG(ok, "map 0 is not a memfd or VM image (kind %d, %" PRId64 " blocks)",
            (int)loc.kind, loc.part.n_blocks);
  if (ok && loc.kind == FSH_STORE_AT_VM) {
    int64_t at = loc.part.blocks[0].offset + loc.part.blocks[0].length / 2;
    ((uint8_t *)(uintptr_t)loc.addr)[at] ^= 0x5A;
  } else if (ok) {
    int64_t at = loc.part.blocks[0].offset + loc.part.blocks[0].length / 2;
    uint8_t byte = 0;
    ok = pread(loc.fd, &byte, 1, at) == 1;
    byte ^= 0x5A;
    ok = ok && pwrite(loc.fd, &byte, 1, at) == 1;
    CHECK(ok);
  }
  fsh_store_location_reset(&loc);
  return ok;
}

/* A damaged block of a memory image (not a spill file). The server hashes
 * the blocks it sends unless the ticket says the client verifies them
 * (FSH_TICKET_CLIENT_VERIFIES, our reader): a plain DoGet (any Flight
 * client) is refused by the worker, naming it, the map output and the
 * partition; one with the flag is served as stored (the server did not
 * hash it); our reader, over DoGet and over a same-host direct read,
 * finds the damage itself: EIO naming the worker, map output and
 * partition, and reports that map output lost. The other partitions, and
 * the damaged one once the byte is restored, read back whole. */
static void image_corruption_detected_of(fsh_store_images images) {
  fsh_shuffle_worker *w = start_worker_images(NULL, 0, 1 << 30, images); /* memory images */
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1);
  fsh_error err = {{0}};
  fsh_shuffle_backend *doget = NULL, *direct = NULL;
  fsh_shuffle_flight_options o = {.peers = &uri, .n_peers = 1, .timeout_ms = 30000,
                                  .no_direct_reads = true};
  CHECK_OK(fsh_shuffle_flight_new(&o, &doget, &err));
  o.no_direct_reads = false;
  o.direct_min_bytes = -1; /* always direct on the same host */
  CHECK_OK(fsh_shuffle_flight_new(&o, &direct, &err));
  stu_plan p;
  make_plan(&p, 19, 3, 1, 5000);
  p.spec.compression = FSH_COMPRESSION_NONE;
  run_maps(local, &p);
  CHECK_OK(raw_get_rc(uri, 19, 1, 0, &err)); /* intact: served either way */
  CHECK_OK(raw_get_rc(uri, 19, 1, FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES, &err));
  if (doget && direct && corrupt_image(w, 19, 1)) {
    int rc = raw_get_rc(uri, 19, 1, 0, &err);
    CHECK_MSG(rc == EIO && strstr(err.message, uri) && strstr(err.message, "map 0") &&
                  strstr(err.message, "partition 1") && strstr(err.message, "checksum"),
              "a plain DoGet: rc %d: %s", rc, err.message);
    rc = raw_get_rc(uri, 19, 1, FSH_TICKET_BUNDLE, &err);
    CHECK_MSG(rc == EIO, "a bundled DoGet without the flag: rc %d: %s", rc, err.message);
    CHECK_OK(raw_get_rc(uri, 19, 1, FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES, &err));
    fsh_shuffle_backend *readers[2] = {doget, direct};
    for (int i = 0; i < 2; i++) {
      task_read x = {.b = readers[i], .spec = &p.spec, .part = 1, .count = 1,
                     .outs = &p.maps[0].out, .n = 1};
      read_in_task(&x);
      CHECK_MSG(x.rc == EIO && strstr(x.err.message, uri) && strstr(x.err.message, "map 0") &&
                    strstr(x.err.message, "partition 1") && strstr(x.err.message, "checksum"),
                "%s: rc %d: %s", i ? "direct" : "DoGet", x.rc, x.err.message);
      CHECK_EQ_INT(x.n_lost, 1);
      if (x.n_lost == 1)
        CHECK(x.lost[0].map_id == 0 && x.lost[0].attempt == 0 && !x.lost[0].unreachable);
      printf("  damaged image, our reader (%s): %s\n", i ? "direct" : "DoGet", x.err.message);
    }
    stu_check_partition(doget, &p, 0, NULL, 0, "intact partition 0");
    stu_check_partition(doget, &p, 2, NULL, 0, "intact partition 2");
    CHECK(corrupt_image(w, 19, 1)); /* the same flip again: restored */
    stu_check_partition(doget, &p, 1, NULL, 0, "restored partition 1");
    stu_check_partition(direct, &p, 1, NULL, 0, "restored partition 1, direct");
  }
  CHECK_OK(fsh_shuffle_release(local, 19, &err));
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(doget);
  fsh_shuffle_backend_destroy(direct);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_worker_stop(w, 1000);
}

/* ... in a VM image (read directly with process_vm_readv), and in a
 * memfd (read directly through /proc/<pid>/fd). */
static void image_corruption_detected(void) {
  image_corruption_detected_of(FSH_STORE_IMAGES_VM);
  image_corruption_detected_of(FSH_STORE_IMAGES_MEMFD);
}

/* One map output dropped from a live worker's store: a reader on that very
 * worker (local read) and one elsewhere (over Flight) both fail naming the
 * worker and exactly that output in the "lost map outputs" form (for
 * humans); run in a worker task, each reports exactly that output at that
 * worker, not unreachable, to the task (what TaskDone.lost carries to the
 * scheduler); outside a task nothing is recorded; the outputs still held
 * read unharmed. */
static void local_output_missing(void) {
  fsh_shuffle_worker *w = start_worker(NULL, 0, 1 << 30);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1), *remote = backend_for(NULL, &uri, 1);
  stu_plan p;
  make_plan(&p, 23, 2, 3, 2000);
  run_maps(local, &p);
  CHECK(fsh_store_drop(fsh_shuffle_worker_store(w), 23, 1, 0));
  char want[600];
  snprintf(want, sizeof want, "worker %s: lost map outputs [map/attempt 1/0] (", uri);
  fsh_error err = {{0}};
  fsh_map_output outs[3];
  for (int m = 0; m < 3; m++) outs[m] = p.maps[m].out;
  int rc = stu_read_rc(local, &p.spec, 0, outs, 3, NULL, &err);
  CHECK_MSG(rc == ENOENT && strstr(err.message, want) && strstr(err.message, "not held here") &&
                strstr(err.message, "flight shuffle 23 partition 0"),
            "local: rc %d: %s", rc, err.message);
  rc = stu_read_rc(remote, &p.spec, 1, outs, 3, NULL, &err);
  CHECK_MSG(rc != 0 && strstr(err.message, want), "over Flight: rc %d: %s", rc, err.message);
  const fsh_lost_output *none = NULL;
  CHECK_EQ_INT(fsh_worker_task_lost(&none), 0); /* not a task's thread */
  /* the same reads as worker tasks: the structured report */
  for (int k = 0; k < 2; k++) {
    task_read x = {.b = k ? remote : local, .spec = &p.spec, .part = k, .outs = outs, .n = 3};
    read_in_task(&x);
    CHECK_MSG(x.rc != 0 && strstr(x.err.message, want), "%s: rc %d: %s", k ? "remote" : "local",
              x.rc, x.err.message);
    CHECK_EQ_INT(x.n_lost, 1);
    if (x.n_lost == 1)
      CHECK_MSG(strcmp(x.lost[0].uri, uri) == 0 && x.lost[0].shuffle_id == 23 &&
                    x.lost[0].map_id == 1 && x.lost[0].attempt == 0 && !x.lost[0].unreachable,
                "%s: reported %s shuffle %llu map %lld attempt %d%s", k ? "remote" : "local",
                x.lost[0].uri, (unsigned long long)x.lost[0].shuffle_id,
                (long long)x.lost[0].map_id, x.lost[0].attempt,
                x.lost[0].unreachable ? " unreachable" : "");
  }
  /* the outputs still held read (only map 0 and map 2, both ways) */
  fsh_map_output kept[2] = {outs[0], outs[2]};
  int64_t rows_local = 0, rows_remote = 0;
  CHECK_OK(stu_read_rc(local, &p.spec, 0, kept, 2, &rows_local, &err));
  CHECK_OK(stu_read_rc(remote, &p.spec, 0, kept, 2, &rows_remote, &err));
  CHECK(rows_local > 0 && rows_local == rows_remote &&
        rows_local == outs[0].rows[0] + outs[2].rows[0]);
  CHECK_OK(fsh_shuffle_release(remote, 23, &err));
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w, 1000);
}

/* A reader-only backend for peers: same-host direct reads of every size
 * (direct), or none (every source with DoGet). */
static fsh_shuffle_backend *reader_limited(const char **peers, int n, bool direct,
                                           int64_t in_flight) {
  fsh_error err = {{0}};
  fsh_shuffle_backend *b = NULL;
  fsh_shuffle_flight_options o = {.peers = peers, .n_peers = n, .max_parallel_fetches = 2,
                                  .max_bytes_in_flight = in_flight, .timeout_ms = 30000,
                                  .no_direct_reads = !direct, .direct_min_bytes = -1};
  CHECK_OK(fsh_shuffle_flight_new(&o, &b, &err));
  return b;
}
static fsh_shuffle_backend *reader_for(const char **peers, int n, bool direct) {
  return reader_limited(peers, n, direct, 1 << 20);
}

/* A range reader's fetches hold to the bytes-in-flight limit: with a
 * consumer that has read nothing yet, what its jobs queued (DoGet, and
 * direct reads) stays within the limit plus one batch (the one admitted
 * for the source being consumed); then the run reads whole. */
static void range_bytes_in_flight(void) {
  fsh_shuffle_worker *w = start_worker(NULL, 0, 1 << 30);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *writer = backend_for(w, &uri, 1);
  stu_plan p;
  make_plan(&p, 50, 16, 6, 20000); /* ~6 MB, blocks of 32 KiB */
  run_maps(writer, &p);
  fsh_map_output outs[6];
  int64_t want = 0;
  for (int m = 0; m < 6; m++) {
    outs[m] = p.maps[m].out;
    for (int32_t q = 0; q < 16; q++) want += outs[m].rows[q];
  }
  const int64_t limit = 96 << 10;
  for (int direct = 0; direct < 2; direct++) {
    fsh_shuffle_backend *b = reader_limited(&uri, 1, direct, limit);
    fsh_error err = {{0}};
    fsh_range_stream s = {0};
    CHECK_OK(fsh_shuffle_open_range_reader(b, &p.spec, 0, 16, outs, 6, &s, &err));
    if (!s.get_next) {
      fsh_shuffle_backend_destroy(b);
      continue;
    }
    struct timespec ts = {0, 300 * 1000000};
    nanosleep(&ts, NULL); /* the fetch jobs fill what they may */
    fr_reader *r = s.private_data;
    pthread_mutex_lock(&r->mu);
    int64_t held = r->in_flight;
    pthread_mutex_unlock(&r->mu);
    CHECK_MSG(held > 0 && held <= limit + (64 << 10), "%s: %lld bytes in flight (limit %lld)",
              direct ? "direct" : "doget", (long long)held, (long long)limit);
    int64_t rows = 0;
    for (;;) {
      fsh_batch *x = NULL;
      int32_t q = -1;
      CHECK_OK(s.get_next(&s, &q, &x, &err));
      if (!x) break;
      rows += x->length;
      fsh_batch_unref(x);
    }
    CHECK_EQ_INT(rows, want);
    s.release(&s);
    fsh_shuffle_backend_destroy(b);
  }
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(writer, 50, &err));
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(writer);
  fsh_shuffle_worker_stop(w, 1000);
}

/* Range readers open each source once for the whole run: on the writing
 * worker one local open per map output (not one per partition), from a
 * same-host reader one locate per peer and one direct open per map
 * output, from a DoGet reader one fetched source per map output (one
 * DoGet naming the run); every path reads exactly the plan's rows of each
 * partition of the run (stu_check_range). Map outputs in memory (memfd
 * images) on one worker, spilled on the other. */
static void range_one_open_per_source(void) {
  char *dir = stu_mkdtemp("range");
  const char *d = dir;
  fsh_shuffle_worker *wm = start_worker(NULL, 0, 1 << 30), *ws = start_worker(&d, 1, 0);
  if (!wm || !ws) return;
  const char *uris[2] = {fsh_shuffle_worker_uri(wm), fsh_shuffle_worker_uri(ws)};
  fsh_shuffle_backend *on[2] = {backend_for(wm, uris, 2), backend_for(ws, uris, 2)};
  fsh_shuffle_backend *direct = reader_for(uris, 2, true), *doget = reader_for(uris, 2, false);
  for (int k = 0; k < 2; k++) {
    stu_plan p;
    make_plan(&p, 30 + (uint64_t)k, 16, 8, 3000);
    run_maps(on[k], &p);
    fsh_map_output outs[8];
    int64_t want = 0;
    for (int m = 0; m < 8; m++) {
      outs[m] = p.maps[m].out;
      for (int32_t q = 2; q < 14; q++) want += outs[m].rows[q];
    }
    fsh_shuffle_backend *readers[3] = {on[k], direct, doget};
    const char *names[3] = {"local", "direct", "doget"};
    for (int r = 0; r < 3; r++) {
      fsh_shuffle_flight_stats before, after;
      fsh_shuffle_flight_get_stats(readers[r], &before);
      fsh_error err = {{0}};
      int64_t rows = -1;
      CHECK_OK(stu_read_range_rc(readers[r], &p.spec, 2, 12, outs, 8, &rows, &err));
      fsh_shuffle_flight_get_stats(readers[r], &after);
      int64_t local = after.local_sources - before.local_sources,
              dir_ = after.direct_sources - before.direct_sources,
              fetched = after.fetched_sources - before.fetched_sources,
              locates = after.locates - before.locates;
      CHECK_MSG(rows == want, "%s %s: %lld rows, want %lld", k ? "spilled" : "memory", names[r],
                (long long)rows, (long long)want);
      CHECK_MSG(r != 0 || (local == 8 && dir_ == 0 && fetched == 0 && locates == 0),
                "%s local: %lld local, %lld direct, %lld fetched, %lld locates",
                k ? "spilled" : "memory", (long long)local, (long long)dir_, (long long)fetched,
                (long long)locates);
      CHECK_MSG(r != 1 || (local == 0 && dir_ == 8 && fetched == 0 && locates == 1),
                "%s direct: %lld local, %lld direct, %lld fetched, %lld locates",
                k ? "spilled" : "memory", (long long)local, (long long)dir_, (long long)fetched,
                (long long)locates);
      CHECK_MSG(r != 2 || (local == 0 && dir_ == 0 && fetched == 8 && locates == 0),
                "%s doget: %lld local, %lld direct, %lld fetched, %lld locates",
                k ? "spilled" : "memory", (long long)local, (long long)dir_, (long long)fetched,
                (long long)locates);
      stu_check_range(readers[r], &p, 2, 12, NULL, 0, names[r]);
      stu_check_range(readers[r], &p, 0, 16, NULL, 0, names[r]);
    }
    fsh_error err = {{0}};
    CHECK_OK(fsh_shuffle_release(doget, p.spec.shuffle_id, &err));
    stu_plan_free(&p);
  }
  CHECK_EQ_INT(stu_count_files(dir), 0);
  fsh_shuffle_backend_destroy(on[0]);
  fsh_shuffle_backend_destroy(on[1]);
  fsh_shuffle_backend_destroy(direct);
  fsh_shuffle_backend_destroy(doget);
  fsh_shuffle_worker_stop(wm, 1000);
  fsh_shuffle_worker_stop(ws, 1000);
  stu_rmdir(dir);
}

/* A damaged block inside a run (partition 1 of [0, 3) in a spill file):
 * the range read fails with EIO naming the map output, the partition and
 * "checksum" on every path (in-process, direct, DoGet); runs without that
 * partition read. A map output dropped from the worker mid-run is lost
 * like open_reader's: each path's error names it in the "lost map
 * outputs" form, and a read in a worker task reports exactly it, once
 * (not once per partition of the run). */
static void range_damage_and_loss(void) {
  char *dir = stu_mkdtemp("rangedmg");
  const char *d = dir;
  fsh_shuffle_worker *w = start_worker(&d, 1, 0); /* everything spills */
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *readers[3] = {backend_for(w, &uri, 1), reader_for(&uri, 1, true),
                                     reader_for(&uri, 1, false)};
  const char *names[3] = {"local", "direct", "doget"};
  stu_plan p;
  make_plan(&p, 40, 3, 1, 5000);
  p.spec.compression = FSH_COMPRESSION_NONE;
  run_maps(readers[0], &p);
  corrupt_spill_file(dir);
  fsh_error err = {{0}};
  for (int r = 0; r < 3; r++) {
    int rc = stu_read_range_rc(readers[r], &p.spec, 0, 3, &p.maps[0].out, 1, NULL, &err);
    CHECK_MSG(rc == EIO && strstr(err.message, "map 0") && strstr(err.message, "partition 1") &&
                  strstr(err.message, "checksum"),
              "%s: rc %d: %s", names[r], rc, err.message);
    CHECK_OK(stu_read_range_rc(readers[r], &p.spec, 2, 1, &p.maps[0].out, 1, NULL, &err));
  }
  CHECK_OK(fsh_shuffle_release(readers[2], 40, &err));
  stu_plan_free(&p);
  /* loss */
  make_plan(&p, 41, 6, 3, 2000);
  run_maps(readers[0], &p);
  CHECK(fsh_store_drop(fsh_shuffle_worker_store(w), 41, 1, 0));
  char want[600];
  snprintf(want, sizeof want, "worker %s: lost map outputs [map/attempt 1/0] (", uri);
  fsh_map_output outs[3] = {p.maps[0].out, p.maps[1].out, p.maps[2].out};
  for (int r = 0; r < 3; r++) {
    task_read x = {.b = readers[r], .spec = &p.spec, .part = 1, .count = 4, .outs = outs,
                   .n = 3};
    read_in_task(&x);
    CHECK_MSG(x.rc != 0 && strstr(x.err.message, want) &&
                  strstr(x.err.message, "flight shuffle 41 partitions [1, 5)"),
              "%s: rc %d: %s", names[r], x.rc, x.err.message);
    CHECK_MSG(x.n_lost == 1 && x.lost[0].map_id == 1 && x.lost[0].attempt == 0 &&
                  strcmp(x.lost[0].uri, uri) == 0 && !x.lost[0].unreachable,
              "%s: %lld reported lost", names[r], (long long)x.n_lost);
  }
  fsh_map_output kept[2] = {outs[0], outs[2]};
  for (int r = 0; r < 3; r++) {
    int64_t rows = 0, want_rows = 0;
    for (int32_t q = 1; q < 5; q++) want_rows += outs[0].rows[q] + outs[2].rows[q];
    CHECK_OK(stu_read_range_rc(readers[r], &p.spec, 1, 4, kept, 2, &rows, &err));
    CHECK_MSG(rows == want_rows, "%s: %lld rows, want %lld", names[r], (long long)rows,
              (long long)want_rows);
  }
  CHECK_OK(fsh_shuffle_release(readers[2], 41, &err));
  stu_plan_free(&p);
  for (int r = 0; r < 3; r++) fsh_shuffle_backend_destroy(readers[r]);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

/* A map output whose writer opened before its shuffle's release and
 * finishes after it is dropped (no orphan held until the worker stops),
 * with an error saying so, in memory and spilled; a writer opened after
 * the release (a released stage brought back under the same id) and other
 * shuffles' writers are unaffected. */
static void released_while_writing(void) {
  char *dir = stu_mkdtemp("relw");
  const char *d = dir;
  stu_plan p, q;
  make_plan(&p, 61, 3, 2, 3000);
  make_plan(&q, 62, 3, 1, 3000);
  for (int mode = 0; mode < 2; mode++) { /* in memory; everything spilled */
    fsh_error err = {{0}};
    fsh_shuffle_store *s = NULL;
    fsh_shuffle_store_options o = {.spill_dirs = &d, .n_spill_dirs = 1,
                                   .memory_limit = mode ? 0 : 1 << 30, .name = "relw"};
    CHECK_OK(fsh_shuffle_store_new(&o, &s, &err));
    if (!s) break;
    stu_map *m = &p.maps[0], *other = &q.maps[0];
    fsh_store_writer *w = NULL, *wo = NULL;
    CHECK_OK(fsh_store_writer_open(s, &p.spec, m->map_id, m->attempt, &w, &err));
    CHECK_OK(fsh_store_writer_open(s, &q.spec, other->map_id, other->attempt, &wo, &err));
    for (int64_t i = 0; w && i < m->n_ops; i++)
      CHECK_OK(fsh_store_writer_write(w, m->ops[i].partition, m->ops[i].batch, &err));
    for (int64_t i = 0; wo && i < other->n_ops; i++)
      CHECK_OK(fsh_store_writer_write(wo, other->ops[i].partition, other->ops[i].batch, &err));
    CHECK_OK(fsh_shuffle_store_release(s, 61, &err));
    fsh_map_output out = {0};
    int rc = w ? fsh_store_writer_close(w, &out, &err) : -1;
    CHECK_MSG(rc == ECANCELED && strstr(err.message, "shuffle 61 map 0 attempt 0") &&
                  strstr(err.message, "released"), "mode %d: rc %d: %s", mode, rc, err.message);
    CHECK(!fsh_store_has(s, 61, m->map_id, m->attempt, NULL));
    /* the other shuffle's output is kept */
    fsh_map_output kept = {0};
    CHECK_OK(wo ? fsh_store_writer_close(wo, &kept, &err) : EINVAL);
    CHECK(fsh_store_has(s, 62, other->map_id, other->attempt, NULL));
    fsh_map_output_reset(&kept);
    /* opened after the release (a brought-back stage): published */
    stu_map *m1 = &p.maps[1];
    w = NULL;
    CHECK_OK(fsh_store_writer_open(s, &p.spec, m1->map_id, m1->attempt, &w, &err));
    for (int64_t i = 0; w && i < m1->n_ops; i++)
      CHECK_OK(fsh_store_writer_write(w, m1->ops[i].partition, m1->ops[i].batch, &err));
    CHECK_OK(w ? fsh_store_writer_close(w, &out, &err) : EINVAL);
    CHECK(fsh_store_has(s, 61, m1->map_id, m1->attempt, NULL));
    fsh_map_output_reset(&out);
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(s, &st);
    CHECK_EQ_INT(st.map_outputs, 2);
    CHECK_OK(fsh_shuffle_store_release(s, 61, &err));
    CHECK_OK(fsh_shuffle_store_release(s, 62, &err));
    fsh_shuffle_store_get_stats(s, &st);
    CHECK_EQ_INT(st.map_outputs, 0);
    CHECK_EQ_INT(st.memory_bytes, 0);
    CHECK_EQ_INT(stu_count_files(dir), 0);
    fsh_shuffle_store_free(s);
  }
  stu_plan_free(&p);
  stu_plan_free(&q);
  stu_rmdir(dir);
}

/* Two workers; one stops: reading from it fails naming it (in a worker
 * task: its output reported lost, the worker unreachable); the other's
 * map outputs still read. */
static void peer_gone(void) {
  fsh_shuffle_worker *w0 = start_worker(NULL, 0, 1 << 30), *w1 = start_worker(NULL, 0, 1 << 30);
  if (!w0 || !w1) return;
  const char *uris[2] = {fsh_shuffle_worker_uri(w0), fsh_shuffle_worker_uri(w1)};
  char gone[320];
  snprintf(gone, sizeof gone, "%s", uris[1]);
  fsh_shuffle_backend *b0 = backend_for(w0, uris, 2), *b1 = backend_for(w1, uris, 2);
  fsh_shuffle_backend *remote = backend_for(NULL, uris, 1);
  stu_plan p;
  make_plan(&p, 12, 2, 2, 3000);
  fsh_error err = {{0}};
  CHECK_OK(stu_run_map(b0, &p.spec, &p.maps[0], &err));
  CHECK_OK(stu_run_map(b1, &p.spec, &p.maps[1], &err));
  fsh_shuffle_backend_destroy(b1);
  fsh_shuffle_worker_stop(w1, 100);
  fsh_map_output src[2] = {p.maps[0].out, p.maps[1].out};
  int rc = stu_read_rc(remote, &p.spec, 0, src, 2, NULL, &err);
  CHECK_MSG(rc != 0 && strstr(err.message, gone), "rc %d: %s", rc, err.message);
  /* run as a worker task: the gone peer's output reported, unreachable */
  task_read x = {.b = remote, .spec = &p.spec, .part = 0, .outs = src, .n = 2};
  read_in_task(&x);
  CHECK(x.rc != 0);
  CHECK_EQ_INT(x.n_lost, 1);
  if (x.n_lost == 1)
    CHECK_MSG(strcmp(x.lost[0].uri, gone) == 0 && x.lost[0].map_id == 1 &&
                  x.lost[0].attempt == p.maps[1].out.attempt && x.lost[0].unreachable,
              "reported %s map %lld attempt %d%s", x.lost[0].uri, (long long)x.lost[0].map_id,
              x.lost[0].attempt, x.lost[0].unreachable ? " unreachable" : "");
  int only0[] = {0};
  stu_check_partition(remote, &p, 1, only0, 1, "flight remote");
  CHECK_OK(fsh_shuffle_release(remote, 12, &err)); /* w0 only among the peers given */
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(b0);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w0, 1000);
}

/* The spill directory disappears under a worker with no memory budget:
 * the map task fails with an error saying so; nothing is published. */
static void spill_dir_gone(void) {
  char *dir = stu_mkdtemp("gone");
  const char *d = dir;
  fsh_shuffle_worker *w = start_worker(&d, 1, 0);
  if (!w) return;
  rmdir(dir);
  fsh_shuffle_backend *b = backend_for(w, NULL, 0);
  stu_plan p;
  make_plan(&p, 13, 2, 1, 100);
  fsh_error err = {{0}};
  int rc = stu_run_map(b, &p.spec, &p.maps[0], &err);
  CHECK_MSG(rc != 0 && strstr(err.message, "spill") && strstr(err.message, dir),
            "rc %d: %s", rc, err.message);
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
  CHECK_EQ_INT(st.map_outputs, 0);
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(b);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

/* A raw DoGet of one partition of several map outputs, drained: the
 * messages with an IPC message (record batches, dictionaries) and those
 * with app_metadata only, and the block headers seen (per block, in a
 * bundle or on a block's first message). */
typedef struct raw_get {
  int64_t ipc_messages, bundles, blocks, block_bytes;
} raw_get;

static raw_get raw_do_get(const char *uri, uint64_t id, int32_t q, int n_maps, uint8_t flags) {
  raw_get g = {0};
  fsh_error err = {{0}};
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
  CHECK_OK(fsh_flight_client_open(&o, &c, &err));
  fsh_ticket_source srcs[8];
  for (int m = 0; m < n_maps; m++) srcs[m] = (fsh_ticket_source){m, 0};
  fsh_shuffle_ticket t = {.shuffle_id = id, .partition = q, .flags = flags,
                          .n_sources = n_maps, .sources = srcs};
  fsh_buffer *tb = NULL;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
  fsh_flight_reader *rd = NULL;
  if (c && tb) CHECK_OK(fsh_flight_do_get(c, &(fsh_bytes){tb->data, tb->size}, &rd, &err));
  for (bool done = false; rd && !done;) {
    fsh_flight_message m;
    if (fsh_flight_reader_next_raw(rd, &m, &done, &err) != 0) {
      CHECK_MSG(false, "DoGet: %s", err.message);
      break;
    }
    if (done) break;
    fsh_block_header h;
    if (m.metadata) {
      g.ipc_messages++;
      if (m.app_metadata &&
          fsh_block_header_decode(m.app_metadata->data, m.app_metadata->size, &h))
        g.blocks++, g.block_bytes += h.length;
    } else if (m.app_metadata && m.app_metadata->size >= FSH_BUNDLE_HEADER_BYTES &&
               memcmp(m.app_metadata->data, FSH_BUNDLE_MAGIC, 4) == 0) {
      g.bundles++;
      const uint8_t *p = m.app_metadata->data;
      int64_t n = fsh_le_get32(p + 8), at = FSH_BUNDLE_HEADER_BYTES;
      for (int64_t i = 0; i < n && at + FSH_BLOCK_HEADER_BYTES <= m.app_metadata->size; i++) {
        CHECK(fsh_block_header_decode(p + at, FSH_BLOCK_HEADER_BYTES, &h));
        at += FSH_BLOCK_HEADER_BYTES + h.length;
        g.blocks++, g.block_bytes += h.length;
      }
      CHECK_EQ_INT(at, m.app_metadata->size);
    }
    fsh_flight_message_reset(&m);
  }
  fsh_flight_reader_free(rd);
  fsh_buffer_unref(tb);
  fsh_flight_client_close(c);
  return g;
}

/* The worker side of a run (version 2 tickets): a raw DoGet of partitions
 * [2, 7) of 3 map outputs, plain and bundled, sends each map output's
 * blocks in ticket order, its partitions in increasing order, each block
 * header naming its partition with that partition's recorded rows, rows
 * and checksum, and every non-empty (map output, partition) of the run
 * exactly; a locate of the run answers one entry per (map output,
 * partition), the same recorded metadata; a run past the shuffle's
 * partitions is refused naming it. */
static void range_do_get_raw(void) {
  fsh_shuffle_worker *w = start_worker(NULL, 0, 1 << 30);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *b = backend_for(w, &uri, 1);
  stu_plan p;
  make_plan(&p, 70, 8, 3, 4000);
  run_maps(b, &p);
  fsh_error err = {{0}};
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
  CHECK_OK(fsh_flight_client_open(&o, &c, &err));
  if (!c) return;
  fsh_ticket_source srcs[3] = {{0, 0}, {1, 0}, {2, 0}};
  for (int bundle = 0; bundle < 2; bundle++) {
    fsh_shuffle_ticket t = {.shuffle_id = 70, .partition = 2, .n_partitions_read = 5,
                            .flags = bundle ? FSH_TICKET_BUNDLE : 0, .n_sources = 3,
                            .sources = srcs};
    fsh_buffer *tb = NULL;
    CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
    fsh_flight_reader *rd = NULL;
    if (tb) CHECK_OK(fsh_flight_do_get(c, &(fsh_bytes){tb->data, tb->size}, &rd, &err));
    int64_t last_map = -1, last_q = -1, seen = 0, bad = 0;
    for (bool done = false; rd && !done;) {
      fsh_flight_message m;
      if (fsh_flight_reader_next_raw(rd, &m, &done, &err) != 0) {
        CHECK_MSG(false, "DoGet: %s", err.message);
        break;
      }
      if (done) break;
      fsh_block_header hs[512];
      int nh = 0;
      if (m.app_metadata && m.app_metadata->size >= FSH_BUNDLE_HEADER_BYTES &&
          memcmp(m.app_metadata->data, FSH_BUNDLE_MAGIC, 4) == 0) {
        const uint8_t *q = m.app_metadata->data;
        int64_t n = fsh_le_get32(q + 8), at = FSH_BUNDLE_HEADER_BYTES;
        for (int64_t i = 0; i < n && nh < 512 && at + FSH_BLOCK_HEADER_BYTES <= m.app_metadata->size;
             i++) {
          CHECK(fsh_block_header_decode(q + at, FSH_BLOCK_HEADER_BYTES, &hs[nh]));
          at += FSH_BLOCK_HEADER_BYTES + hs[nh++].length;
        }
      } else if (m.app_metadata &&
                 fsh_block_header_decode(m.app_metadata->data, m.app_metadata->size, &hs[0])) {
        nh = 1;
      }
      for (int i = 0; i < nh; i++) {
        const fsh_block_header *h = &hs[i];
        const fsh_map_output *mo = h->map_id >= 0 && h->map_id < 3 ? &p.maps[h->map_id].out : NULL;
        if (!mo || h->partition < 2 || h->partition >= 7 || h->map_id < last_map ||
            (h->map_id == last_map && h->partition < last_q) ||
            h->part_rows != mo->rows[h->partition] ||
            h->part_checksum != mo->checksums[h->partition]) {
          bad++;
          continue;
        }
        if (h->index == 0) seen++;
        last_map = h->map_id;
        last_q = h->partition;
      }
      fsh_flight_message_reset(&m);
    }
    int64_t want = 0;
    for (int mm = 0; mm < 3; mm++)
      for (int32_t q = 2; q < 7; q++) want += p.maps[mm].out.rows[q] > 0;
    CHECK_MSG(bad == 0 && seen == want, "bundle %d: %lld bad headers, %lld of %lld "
              "(map output, partition)s", bundle, (long long)bad, (long long)seen,
              (long long)want);
    fsh_flight_reader_free(rd);
    fsh_buffer_unref(tb);
  }
  /* locate of the run */
  fsh_shuffle_ticket t = {.shuffle_id = 70, .partition = 2, .n_partitions_read = 5,
                          .n_sources = 3, .sources = srcs};
  fsh_buffer *tb = NULL;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
  fsh_flight_result_list res = {0};
  if (tb) CHECK_OK(fsh_worker_locate(fsh_shuffle_worker_store(w), tb->data, tb->size, &res, &err));
  fsh_locate_answer a = {0};
  if (res.n == 1)
    CHECK_OK(fsh_locate_answer_decode(res.items[0].data, res.items[0].size, 15, &a, &err));
  for (int64_t i = 0; a.sources && i < 15; i++) {
    const fsh_map_output *mo = &p.maps[i / 5].out;
    int32_t q = 2 + (int32_t)(i % 5);
    CHECK_MSG(a.sources[i].rows == mo->rows[q] && a.sources[i].checksum == mo->checksums[q] &&
                  a.sources[i].kind == a.sources[i - i % 5].kind &&
                  a.sources[i].ino == a.sources[i - i % 5].ino,
              "locate entry %lld", (long long)i);
  }
  fsh_locate_answer_reset(&a);
  fsh_flight_result_list_reset(&res);
  fsh_buffer_unref(tb);
  /* past the shuffle's partitions */
  t.partition = 6;
  t.n_partitions_read = 3;
  tb = NULL;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
  fsh_flight_reader *rd = NULL;
  int rc = tb ? fsh_flight_do_get(c, &(fsh_bytes){tb->data, tb->size}, &rd, &err) : -1;
  for (bool done = false; rc == 0 && rd && !done;) {
    fsh_flight_message m;
    rc = fsh_flight_reader_next_raw(rd, &m, &done, &err);
    if (rc == 0) fsh_flight_message_reset(&m);
  }
  CHECK_MSG(rc == EINVAL && strstr(err.message, "partitions [6, 9) of 8"), "rc %d: %s", rc,
            err.message);
  fsh_flight_reader_free(rd);
  fsh_buffer_unref(tb);
  fsh_flight_client_close(c);
  CHECK_OK(fsh_shuffle_release(b, 70, &err));
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(b);
  fsh_shuffle_worker_stop(w, 1000);
}

/* Small blocks: with the bundle flag they come gathered (fewer messages,
 * every block exactly once, the stored bytes); without it (what any
 * Flight client gets) one record batch message per block. Our reader,
 * which asks for bundles, reads the rows back exactly. */
static void small_blocks_bundled(void) {
  fsh_shuffle_worker *w = start_worker(NULL, 0, 1 << 30);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1), *remote = backend_for(NULL, &uri, 1);
  stu_plan p;
  make_plan(&p, 12, 3, 4, 6000);
  p.spec.target_block_bytes = 8 << 10; /* several blocks per partition */
  run_maps(local, &p);
  for (int32_t q = 0; q < 3; q++) {
    int64_t want_blocks = 0, want_bytes = 0;
    for (int m = 0; m < 4; m++) want_bytes += p.maps[m].out.bytes[q];
    raw_get plain = raw_do_get(uri, 12, q, 4, 0), bundled = raw_do_get(uri, 12, q, 4, FSH_TICKET_BUNDLE);
    want_blocks = plain.blocks;
    printf("  partition %d: %lld blocks; plain: %lld messages, bundled: %lld bundles, %lld "
           "messages\n", q, (long long)want_blocks, (long long)plain.ipc_messages,
           (long long)bundled.bundles, (long long)bundled.ipc_messages);
    CHECK(want_blocks > 4);
    CHECK_EQ_INT(plain.bundles, 0);
    CHECK_EQ_INT(plain.block_bytes, want_bytes);
    CHECK_EQ_INT(plain.ipc_messages, 1 + want_blocks); /* the schema, a batch per block */
    CHECK_EQ_INT(bundled.ipc_messages, 1);              /* the schema only */
    CHECK(bundled.bundles >= 1 && bundled.bundles < want_blocks);
    CHECK_EQ_INT(bundled.blocks, want_blocks);
    CHECK_EQ_INT(bundled.block_bytes, want_bytes);
    stu_check_partition(remote, &p, q, NULL, 0, "flight remote, bundled");
  }
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_release(remote, 12, &err));
  stu_plan_free(&p);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w, 1000);
}

/* A DoGet naming map outputs of one shuffle whose schemas differ fails
 * naming the second one (the schema check past the byte-equal fast path);
 * each alone reads. */
static void mixed_schemas_refused(void) {
  fsh_shuffle_worker *w = start_worker(NULL, 0, 1 << 30);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1);
  fsh_error err = {{0}};
  stu_plan p, p2;
  make_plan(&p, 14, 3, 1, 500);
  run_maps(local, &p);
  fsh_schema *ds = fsh_sample_dict_schema();
  const char *v[] = {"a", "bb", "ccc"};
  fsh_array *dict = sbh_strings(NULL, 3, v);
  const int32_t idx[] = {2, 0, 1, 1, 0};
  fsh_batch *x = fsh_sample_dict_batch(ds, dict, 5, idx);
  stu_plan_init(&p2, 14, 3, ds, 1);
  p2.maps[0].map_id = 1;
  stu_add_split(&p2.maps[0], x, 3, 2, true, 0);
  CHECK_OK(stu_run_map(local, &p2.spec, &p2.maps[0], &err));
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
  CHECK_OK(fsh_flight_client_open(&o, &c, &err));
  for (int n = 1; c && n <= 2; n++) {
    fsh_ticket_source srcs[2] = {{0, 0}, {1, 0}};
    fsh_shuffle_ticket t = {.shuffle_id = 14, .partition = 0, .flags = FSH_TICKET_BUNDLE,
                            .n_sources = n, .sources = srcs};
    fsh_buffer *tb = NULL;
    CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
    fsh_flight_reader *rd = NULL;
    int rc = tb ? fsh_flight_do_get(c, &(fsh_bytes){tb->data, tb->size}, &rd, &err) : EINVAL;
    for (bool done = false; rc == 0 && !done;) {
      fsh_flight_message m;
      rc = fsh_flight_reader_next_raw(rd, &m, &done, &err);
      if (rc == 0 && !done) fsh_flight_message_reset(&m);
    }
    if (n == 1) CHECK_MSG(rc == 0, "map 0 alone: %s", err.message);
    else CHECK_MSG(rc != 0 && strstr(err.message, "map 1 attempt 0") &&
                       strstr(err.message, "schema differs"), "rc %d: %s", rc, err.message);
    fsh_flight_reader_free(rd);
    fsh_buffer_unref(tb);
  }
  fsh_flight_client_close(c);
  CHECK_OK(fsh_shuffle_release(local, 14, &err));
  stu_plan_free(&p);
  stu_plan_free(&p2);
  fsh_batch_unref(x);
  fsh_array_unref(dict);
  fsh_schema_unref(ds);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_worker_stop(w, 1000);
}

static void ticket_codec(void) {
  fsh_error err = {{0}};
  fsh_ticket_source srcs[3] = {{0, 0}, {7, 2}, {INT64_MAX, 5}};
  fsh_shuffle_ticket t = {.shuffle_id = UINT64_MAX - 1, .partition = 42, .n_sources = 3,
                          .sources = srcs};
  fsh_buffer *b = NULL;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &b, &err));
  if (!b) return;
  CHECK_EQ_INT(b->size, FSH_TICKET_HEADER_BYTES + 3 * FSH_TICKET_SOURCE_BYTES);
  fsh_shuffle_ticket d = {0};
  CHECK_OK(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err));
  CHECK(d.shuffle_id == t.shuffle_id && d.partition == 42 && d.n_sources == 3 &&
        d.sources[1].map_id == 7 && d.sources[1].attempt == 2 &&
        d.sources[2].map_id == INT64_MAX);
  fsh_shuffle_ticket_reset(&d);
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size - 1, &d, &err), EINVAL);
  CHECK_EQ_INT(fsh_shuffle_ticket_decode((const uint8_t *)"../../etc/passwd", 16, &d, &err),
               EINVAL);
  CHECK_EQ_INT(d.flags, 0);
  b->data[5] = FSH_TICKET_BUNDLE;
  CHECK_OK(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err));
  CHECK_EQ_INT(d.flags, FSH_TICKET_BUNDLE);
  fsh_shuffle_ticket_reset(&d);
  b->data[5] = FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES;
  CHECK_OK(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err));
  CHECK_EQ_INT(d.flags, FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES);
  fsh_shuffle_ticket_reset(&d);
  for (int bit = 2; bit < 8; bit++) { /* unknown flags */
    b->data[5] = (uint8_t)(1u << bit);
    CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err), EINVAL);
  }
  b->data[5] = 0;
  b->data[4] = 3;
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "version 3"), "%s", err.message);
  b->data[4] = 2; /* a version 1 body read as version 2: its run count is a map id's bytes */
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err), EINVAL);
  fsh_buffer_unref(b);
  /* a run of partitions: version 2; a run of one is still version 1 */
  t.n_partitions_read = 1;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &b, &err));
  CHECK(b && b->size == FSH_TICKET_HEADER_BYTES + 3 * FSH_TICKET_SOURCE_BYTES && b->data[4] == 1);
  fsh_buffer_unref(b);
  t.n_partitions_read = 63;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &b, &err));
  if (!b) return;
  CHECK_EQ_INT(b->size, FSH_TICKET_V2_HEADER_BYTES + 3 * FSH_TICKET_SOURCE_BYTES);
  CHECK_EQ_INT(b->data[4], 2);
  CHECK_OK(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err));
  CHECK(d.partition == 42 && d.n_partitions_read == 63 && d.n_sources == 3 &&
        d.sources[2].map_id == INT64_MAX && d.sources[2].attempt == 5);
  fsh_shuffle_ticket_reset(&d);
  fsh_le_put32(b->data + 24, 0); /* a run of none */
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err), EINVAL);
  fsh_le_put32(b->data + 24, (uint32_t)INT32_MAX); /* past INT32_MAX */
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err), EINVAL);
  fsh_le_put32(b->data + 24, 63);
  fsh_le_put32(b->data + 28, 1); /* reserved */
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size, &d, &err), EINVAL);
  fsh_le_put32(b->data + 28, 0);
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, FSH_TICKET_HEADER_BYTES + 4, &d, &err), EINVAL);
  CHECK_EQ_INT(fsh_shuffle_ticket_decode(b->data, b->size - 16, &d, &err), EINVAL);
  fsh_buffer_unref(b);
  t.partition = INT32_MAX - 10;
  t.n_partitions_read = 12;
  b = NULL;
  CHECK_EQ_INT(fsh_shuffle_ticket_encode(&t, &b, &err), EINVAL);
  CHECK(b == NULL);
  fsh_block_header h = {.map_id = 3, .attempt = 1, .partition = 9, .index = 2, .n_blocks = 4,
                        .length = 4096, .rows = 100, .checksum = 0xdeadbeef,
                        .part_checksum = 1, .part_rows = 400, .part_bytes = 16384}, g;
  uint8_t raw[FSH_BLOCK_HEADER_BYTES];
  fsh_block_header_encode(&h, raw);
  CHECK(fsh_block_header_decode(raw, sizeof raw, &g) && memcmp(&h, &g, sizeof h) == 0);
  CHECK(!fsh_block_header_decode(raw, sizeof raw - 1, &g));
}

/* Checks every block of a bundled DoGet message against its header: the
 * block's XXH3 (computed here) equals the header's checksum. Counts the
 * blocks (and bytes) checked; a mismatch counts in *bad. */
static void check_bundle(const fsh_flight_message *m, int64_t *blocks, int64_t *bytes,
                         int64_t *bad) {
  if (!m->app_metadata || m->app_metadata->size < FSH_BUNDLE_HEADER_BYTES ||
      memcmp(m->app_metadata->data, FSH_BUNDLE_MAGIC, 4) != 0)
    return;
  const uint8_t *q = m->app_metadata->data;
  int64_t n = fsh_le_get32(q + 8), at = FSH_BUNDLE_HEADER_BYTES, size = m->app_metadata->size;
  for (int64_t i = 0; i < n; i++) {
    fsh_block_header h;
    if (at + FSH_BLOCK_HEADER_BYTES > size ||
        !fsh_block_header_decode(q + at, FSH_BLOCK_HEADER_BYTES, &h) ||
        h.length > size - at - FSH_BLOCK_HEADER_BYTES) {
      (*bad)++;
      return;
    }
    at += FSH_BLOCK_HEADER_BYTES;
    if (XXH3_64bits(q + at, (size_t)h.length) != h.checksum) (*bad)++;
    at += h.length;
    (*blocks)++;
    *bytes += h.length;
  }
  if (at != size) (*bad)++;
}

/* The lifetime of the bundles' bytes: the server sends a bundle as gRPC
 * slices pointing into the memory images, without copying. A shuffle
 * released while its DoGet streams -- and its images' memfds (VM
 * mappings) then
 * reused by the next shuffle's map outputs, written over -- leaves what
 * was already handed to gRPC intact: every block received matches the
 * checksum in its header (computed here), the map output being sent
 * goes out whole, and the stream then completes or ends with NOT_FOUND
 * naming the next map output. A reader that goes away right
 * after the release (the call cancelled while gRPC may still hold slices)
 * leaks nothing and touches nothing freed (ASan). The store ends empty.
 * With VM images (their mappings pooled and reused the same way) and
 * with memfds. */
static void released_mid_stream_of(fsh_store_images images) {
  fsh_shuffle_worker *w = start_worker_images(NULL, 0, (int64_t)1 << 30, images);
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1);
  fsh_shuffle_store *store = fsh_shuffle_worker_store(w);
  fsh_error err = {{0}};
  for (int mode = 0; mode < 2; mode++) { /* 0: read on after the release; 1: go away */
    uint64_t id = 80 + 2 * (uint64_t)mode;
    /* mode 0: more bytes than gRPC's windows and the socket buffers take,
     * so that part of the stream is still the server's at the release */
    int64_t rows = mode == 0 ? 240000 : 40000;
    stu_plan p;
    make_plan(&p, id, 2, 4, rows);
    p.spec.target_block_bytes = 8 << 10;
    p.spec.compression = FSH_COMPRESSION_NONE; /* more bytes: several bundles */
    run_maps(local, &p);
    int64_t want_bytes = 0;
    for (int m = 0; m < 4; m++) want_bytes += p.maps[m].out.bytes[0];
    fsh_flight_client *c = NULL;
    fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
    CHECK_OK(fsh_flight_client_open(&o, &c, &err));
    fsh_ticket_source srcs[4] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}};
    fsh_shuffle_ticket t = {.shuffle_id = id, .partition = 0,
                            .flags = FSH_TICKET_BUNDLE | FSH_TICKET_CLIENT_VERIFIES,
                            .n_sources = 4, .sources = srcs};
    fsh_buffer *tb = NULL;
    CHECK_OK(fsh_shuffle_ticket_encode(&t, &tb, &err));
    fsh_flight_reader *rd = NULL;
    if (c && tb) CHECK_OK(fsh_flight_do_get(c, &(fsh_bytes){tb->data, tb->size}, &rd, &err));
    int64_t messages = 0, blocks = 0, bytes = 0, bad = 0;
    int rc = 0;
    bool released = false;
    for (bool done = false; rd && !done;) {
      fsh_flight_message m;
      rc = fsh_flight_reader_next_raw(rd, &m, &done, &err);
      if (rc != 0 || done) break;
      messages++;
      check_bundle(&m, &blocks, &bytes, &bad);
      fsh_flight_message_reset(&m);
      if (messages == 2) { /* the schema and the first bundle are in */
        CHECK(blocks > 0);
        fsh_store_pool_stats before, after;
        fsh_store_get_pool_stats(store, &before);
        CHECK_OK(fsh_shuffle_store_release(store, id, &err));
        fsh_store_get_pool_stats(store, &after);
        printf("  mode %d: released; the memfd pool grew by %lld (the shuffle had 4 images; "
               "one the stream holds is pooled later)\n", mode,
               (long long)(after.pooled - before.pooled));
        released = true;
        /* the next shuffle's outputs take the released images' memfds
         * as soon as they are free */
        stu_plan next;
        make_plan(&next, id + 1, 2, 4, rows);
        next.spec.target_block_bytes = 8 << 10;
        next.spec.compression = FSH_COMPRESSION_NONE;
        run_maps(local, &next);
        stu_plan_free(&next);
        if (mode == 1) break;
      }
    }
    printf("  mode %d: %lld messages, %lld blocks (%lld of %lld bytes) checked, rc %d%s%s\n",
           mode, (long long)messages, (long long)blocks, (long long)bytes,
           (long long)want_bytes, rc, rc ? ": " : "", rc ? err.message : "");
    CHECK(released);
    CHECK_EQ_INT(bad, 0);
    if (mode == 0) {
      CHECK(messages > 3); /* several bundles: some sent after the release */
      /* the map output being sent goes on (the stream holds its image);
       * the next one is gone */
      char gone[64];
      snprintf(gone, sizeof gone, "shuffle %llu map ", (unsigned long long)id);
      CHECK_MSG(rc == 0 ? bytes == want_bytes
                        : rc == ENOENT && strstr(err.message, gone) &&
                              strstr(err.message, "not held here"),
                "rc %d: %s", rc, err.message);
      CHECK(bytes >= p.maps[0].out.bytes[0]);
    }
    fsh_flight_reader_free(rd);
    fsh_buffer_unref(tb);
    fsh_flight_client_close(c);
    CHECK_OK(fsh_shuffle_store_release(store, id + 1, &err));
    stu_plan_free(&p);
  }
  fsh_shuffle_store_stats st;
  for (int i = 0; i < 200; i++) { /* the cancelled call's source goes on the server's thread */
    fsh_shuffle_store_get_stats(store, &st);
    if (st.map_outputs == 0) break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  CHECK_EQ_INT(st.map_outputs, 0);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_worker_stop(w, 1000);
}

static void released_mid_stream(void) {
  released_mid_stream_of(FSH_STORE_IMAGES_VM);
  released_mid_stream_of(FSH_STORE_IMAGES_MEMFD);
}

FSH_TEST_MAIN(TEST(spill_round_robin), TEST(oldest_output_spills_first),
              TEST(leftovers_removed_at_start), TEST(exec_leftovers_removed_at_start),
              TEST(corruption_detected), TEST(image_corruption_detected),
              TEST(local_output_missing),
              TEST(released_while_writing), TEST(peer_gone), TEST(spill_dir_gone),
              TEST(small_blocks_bundled), TEST(mixed_schemas_refused), TEST(ticket_codec),
              TEST(range_one_open_per_source), TEST(range_damage_and_loss),
              TEST(range_bytes_in_flight), TEST(range_do_get_raw), TEST(released_mid_stream))
