/* test_faults.c -- the shuffle's fault tests: a spill directory that fills
 * up (a 2 MiB tmpfs mounted by the test, root only: the map task fails
 * naming ENOSPC and the directory, nothing is published or left behind,
 * the worker goes on serving; with a second, roomy directory the writer
 * falls over to it and the output is complete and identical), a spill
 * file deleted after close (an error naming it; the worker goes on), a
 * worker process killed with SIGKILL while a reader streams from it (the
 * reader fails in time, naming the worker and every map output lost with
 * it; and under four readers of one fetch pool at once, which then goes
 * on serving the live worker), a worker process stopped with SIGSTOP
 * (the reader's deadline fires, naming the worker), and allocation
 * failures injected into the store writer and the worker's DoGet path
 * (clean errors, nothing published or half-served, no leak under LSan).
 *
 * Worker processes are `flightshuffle worker` (FSH_BUILD_DIR/flightshuffle,
 * as CTest sets it), fed with DoPut; each case kills its children and
 * unmounts its tmpfs before returning, whatever its checks found. */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"
#include "shuffle/worker_internal.h"
#include "test_tmpfs.h"

/* ---- helpers ----------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static fsh_shuffle_worker *start_worker(const char *const *dirs, int n_dirs, int64_t limit) {
  fsh_error err = {{0}};
  fsh_shuffle_worker *w = NULL;
  fsh_shuffle_worker_options o = {.listen = "127.0.0.1:0", .spill_dirs = dirs,
                                  .n_spill_dirs = n_dirs, .memory_limit = limit, .n_threads = 2};
  CHECK_OK(fsh_shuffle_worker_start(&o, &w, &err));
  return w;
}

/* no_direct: every peer read through DoGet, as from another host. */
static fsh_shuffle_backend *backend_for(fsh_shuffle_worker *w, const char **peers, int n,
                                        int64_t timeout_ms, int64_t in_flight, bool no_direct) {
  fsh_error err = {{0}};
  fsh_shuffle_backend *b = NULL;
  fsh_shuffle_flight_options o = {.local = w, .peers = peers, .n_peers = n,
                                  .max_parallel_fetches = 2, .max_bytes_in_flight = in_flight,
                                  .timeout_ms = timeout_ms, .no_direct_reads = no_direct};
  CHECK_OK(fsh_shuffle_flight_new(&o, &b, &err));
  return b;
}

/* n_maps map tasks of `rows` synthetic rows each over n_parts partitions,
 * uncompressed (the bytes on disk are about the bytes written). */
static void make_plan(stu_plan *p, uint64_t id, int32_t n_parts, int n_maps, int64_t rows,
                      int64_t chunk) {
  fsh_batch *probe = stu_synthetic(0, 1);
  stu_plan_init(p, id, n_parts, probe->schema, n_maps);
  p->spec.target_block_bytes = 256 << 10;
  p->spec.compression = FSH_COMPRESSION_NONE;
  for (int m = 0; m < n_maps; m++) {
    fsh_batch *x = stu_synthetic(300 + (int64_t)id * 16 + m, rows);
    stu_add_split(&p->maps[m], x, n_parts, chunk, true, (uint64_t)m);
    fsh_batch_unref(x);
  }
  fsh_batch_unref(probe);
}

static int count_suffix(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  size_t ls = strlen(suffix);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    n += l >= ls && strcmp(e->d_name + l - ls, suffix) == 0;
  }
  closedir(d);
  return n;
}

/* A tmpfs of size_spec ("2m") on a fresh directory; NULL when this process
 * may not mount (not root, no tmpfs): the caller skips. */
static char *mount_tmpfs(const char *tag, const char *size_spec) {
  if (geteuid() != 0) return NULL;
  char *dir = stu_mkdtemp(tag);
  if (!fsh_test_mount_tmpfs(dir, size_spec)) {
    rmdir(dir);
    free(dir);
    return NULL;
  }
  return dir;
}

static void unmount_tmpfs(char *dir) {
  if (!dir) return;
  fsh_test_unmount_tmpfs(dir);
  stu_rmdir(dir);
}

/* The FlightInfos the worker lists for shuffle `id`. */
static int64_t listed_partitions(const char *uri, uint64_t id) {
  fsh_error err = {{0}};
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
  CHECK_OK(fsh_flight_client_open(&o, &c, &err));
  if (!c) return -1;
  fsh_flight_info_list l = {0};
  int64_t n = -1;
  if (fsh_flight_list_flights(c, NULL, &l, &err) == 0) {
    n = 0;
    char want[24];
    snprintf(want, sizeof want, "%" PRIu64, id);
    for (int64_t i = 0; i < l.n; i++)
      n += l.items[i].descriptor.n_path == 4 && strcmp(l.items[i].descriptor.path[1], want) == 0;
  } else {
    fprintf(stderr, "ListFlights %s: %s\n", uri, err.message);
  }
  fsh_flight_info_list_reset(&l);
  fsh_flight_client_close(c);
  return n;
}

/* DoGet of (shuffle id, partition q, map m attempt a) from uri, drained:
 * the error code (0: success), the message in *err. */
static int do_get_rc(const char *uri, uint64_t id, int32_t q, int64_t m, int32_t a,
                     fsh_error *err) {
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 10000};
  int rc = fsh_flight_client_open(&o, &c, err);
  if (rc != 0) return rc;
  fsh_ticket_source src = {m, a};
  fsh_shuffle_ticket t = {.shuffle_id = id, .partition = q, .n_sources = 1, .sources = &src};
  fsh_buffer *tb = NULL;
  rc = fsh_shuffle_ticket_encode(&t, &tb, err);
  fsh_flight_reader *rd = NULL;
  if (rc == 0) {
    fsh_bytes ticket = {tb->data, tb->size};
    rc = fsh_flight_do_get(c, &ticket, &rd, err);
  }
  while (rc == 0) {
    fsh_flight_message msg;
    bool done = false;
    rc = fsh_flight_reader_next_raw(rd, &msg, &done, err);
    if (rc != 0 || done) break;
    fsh_flight_message_reset(&msg);
  }
  fsh_flight_reader_free(rd);
  fsh_buffer_unref(tb);
  fsh_flight_client_close(c);
  return rc;
}

/* ---- disk full during spill -------------------------------------------- */

/* The only spill directory is a 2 MiB tmpfs and the memory budget 64 KiB:
 * a ~6 MB map output fails with ENOSPC naming the directory; nothing is
 * listed, DoGet of it is NOT_FOUND, no file is left, the budget is whole
 * again; a small map output of another shuffle is then stored and read. */
static void disk_full_one_dir(void) {
  char *full = mount_tmpfs("full", "2m");
  if (!full) {
    printf("  skipped: needs root to mount a tmpfs\n");
    return;
  }
  const char *d = full;
  fsh_shuffle_worker *w = start_worker(&d, 1, 64 << 10);
  if (w) {
    const char *uri = fsh_shuffle_worker_uri(w);
    fsh_shuffle_backend *b = backend_for(w, &uri, 1, 10000, 1 << 20, false);
    stu_plan big, small;
    make_plan(&big, 21, 3, 1, 120000, 997);
    make_plan(&small, 22, 3, 2, 2000, 97);
    fsh_error err = {{0}};
    int rc = stu_run_map(b, &big.spec, &big.maps[0], &err);
    CHECK_MSG(rc == ENOSPC && strstr(err.message, "ENOSPC") && strstr(err.message, full) &&
                  strstr(err.message, "map 0"),
              "rc %d: %s", rc, err.message);
    printf("  disk full: %s\n", err.message);
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
    CHECK_EQ_INT(st.map_outputs, 0);
    CHECK_EQ_INT(st.memory_bytes, 0);
    CHECK_EQ_INT(stu_count_files(full), 0); /* the temp file is gone */
    CHECK_EQ_INT(listed_partitions(uri, 21), 0);
    rc = do_get_rc(uri, 21, 0, 0, 0, &err);
    CHECK_MSG(rc == ENOENT && strstr(err.message, "map 0"), "DoGet: rc %d: %s", rc, err.message);
    /* the worker goes on: another shuffle, small enough for the tmpfs */
    stu_run_and_check(b, &small, "after disk full");
    CHECK_EQ_INT(listed_partitions(uri, 22), 3);
    CHECK_OK(fsh_shuffle_release(b, 22, &err));
    CHECK_EQ_INT(stu_count_files(full), 0);
    stu_plan_free(&big);
    stu_plan_free(&small);
    fsh_shuffle_backend_destroy(b);
    fsh_shuffle_worker_stop(w, 1000);
  }
  unmount_tmpfs(full);
}

/* Spill directories: a 2 MiB tmpfs and a roomy one. Every map output
 * (~1.5 MB each: the first fits the tmpfs, the next fills it mid-file)
 * completes, falling over to the roomy directory when the tmpfs is full,
 * and reads back identical, over Flight and in-process; no temp file is
 * left; release empties both. */
static void disk_full_fall_over(void) {
  char *full = mount_tmpfs("fullfo", "2m");
  if (!full) {
    printf("  skipped: needs root to mount a tmpfs\n");
    return;
  }
  char *roomy = stu_mkdtemp("roomy");
  const char *dirs[2] = {full, roomy};
  fsh_shuffle_worker *w = start_worker(dirs, 2, 64 << 10);
  if (w) {
    const char *uri = fsh_shuffle_worker_uri(w);
    fsh_shuffle_backend *local = backend_for(w, &uri, 1, 10000, 1 << 20, false);
    fsh_shuffle_backend *remote = backend_for(NULL, &uri, 1, 10000, 1 << 20, false);
    stu_plan p;
    make_plan(&p, 23, 4, 6, 30000, 331);
    fsh_error err = {{0}};
    for (int m = 0; m < p.n_maps; m++) {
      CHECK_OK(stu_run_map(local, &p.spec, &p.maps[m], &err));
      stu_check_meta(&p, &p.maps[m], "fall-over");
    }
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(fsh_shuffle_worker_store(w), &st);
    CHECK_EQ_INT(st.map_outputs, 6);
    CHECK_EQ_INT(st.spilled_outputs, 6);
    CHECK_EQ_INT(count_suffix(full, ".tmp") + count_suffix(roomy, ".tmp"), 0);
    CHECK_MSG(stu_count_files(full) >= 1 && stu_count_files(roomy) >= 4,
              "tmpfs holds %d, roomy %d", stu_count_files(full), stu_count_files(roomy));
    for (int32_t q = 0; q < 4; q++) {
      stu_check_partition(remote, &p, q, NULL, 0, "fall-over remote");
      stu_check_partition(local, &p, q, NULL, 0, "fall-over local");
    }
    CHECK_OK(fsh_shuffle_release(remote, 23, &err));
    CHECK_EQ_INT(stu_count_files(full) + stu_count_files(roomy), 0);
    stu_plan_free(&p);
    fsh_shuffle_backend_destroy(local);
    fsh_shuffle_backend_destroy(remote);
    fsh_shuffle_worker_stop(w, 1000);
  }
  stu_rmdir(roomy);
  unmount_tmpfs(full);
}

/* ---- a spill file deleted after close ---------------------------------- */

static void missing_spill_file(void) {
  char *dir = stu_mkdtemp("missing");
  const char *d = dir;
  fsh_shuffle_worker *w = start_worker(&d, 1, 0); /* everything spills */
  if (!w) return;
  const char *uri = fsh_shuffle_worker_uri(w);
  fsh_shuffle_backend *local = backend_for(w, &uri, 1, 10000, 1 << 20, false);
  fsh_shuffle_backend *remote = backend_for(NULL, &uri, 1, 10000, 1 << 20, false);
  stu_plan p, other;
  make_plan(&p, 31, 2, 1, 3000, 101);
  make_plan(&other, 32, 2, 1, 3000, 101);
  fsh_error err = {{0}};
  CHECK_OK(stu_run_map(local, &p.spec, &p.maps[0], &err));
  CHECK_EQ_INT(listed_partitions(uri, 31), 2);
  /* delete the one spill file there is */
  char path[600] = "";
  DIR *dd = opendir(dir);
  struct dirent *e;
  while (dd && (e = readdir(dd)) != NULL)
    if (strncmp(e->d_name, "fshspill-", 9) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
  if (dd) closedir(dd);
  CHECK(path[0] && unlink(path) == 0);
  int rc = stu_read_rc(remote, &p.spec, 0, &p.maps[0].out, 1, NULL, &err);
  CHECK_MSG(rc == ENOENT && strstr(err.message, uri) && strstr(err.message, "map 0") &&
                strstr(err.message, path) && strstr(err.message, "lost map outputs [map/attempt 0/0]"),
            "over Flight: rc %d: %s", rc, err.message);
  printf("  missing, over Flight: %s\n", err.message);
  /* a lost map output is no longer listed (nothing else of shuffle 31 is held) */
  CHECK_EQ_INT(listed_partitions(uri, 31), 0);
  rc = stu_read_rc(local, &p.spec, 0, &p.maps[0].out, 1, NULL, &err);
  CHECK_MSG(rc == ENOENT && strstr(err.message, path), "in-process: rc %d: %s", rc, err.message);
  /* the worker goes on serving */
  CHECK_OK(stu_run_map(local, &other.spec, &other.maps[0], &err));
  stu_check_partition(remote, &other, 0, NULL, 0, "after a missing file");
  stu_check_partition(remote, &other, 1, NULL, 0, "after a missing file");
  CHECK_OK(fsh_shuffle_release(remote, 31, &err));
  CHECK_OK(fsh_shuffle_release(remote, 32, &err));
  CHECK_EQ_INT(stu_count_files(dir), 0);
  stu_plan_free(&p);
  stu_plan_free(&other);
  fsh_shuffle_backend_destroy(local);
  fsh_shuffle_backend_destroy(remote);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

/* ---- worker processes -------------------------------------------------- */

typedef struct child {
  pid_t pid;
  char uri[128];
  bool stopped;
} child;

/* Starts `flightshuffle worker` (FSH_BUILD_DIR/flightshuffle) on a free
 * port and reads its "listening on" line. */
static bool child_start(child *c) {
  memset(c, 0, sizeof *c);
  const char *bd = getenv("FSH_BUILD_DIR");
  char cli[512];
  snprintf(cli, sizeof cli, "%s/flightshuffle", bd ? bd : ".");
  if (access(cli, X_OK) != 0) {
    fprintf(stderr, "no CLI at %s (FSH_BUILD_DIR)\n", cli);
    return false;
  }
  int fds[2];
  if (pipe(fds) != 0) return false;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execl(cli, cli, "worker", "--listen", "127.0.0.1:0", "--memory-limit", "1G", "--threads",
          "2", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  c->pid = pid;
  char line[256];
  size_t n = 0;
  while (n + 1 < sizeof line) {
    ssize_t r = read(fds[0], line + n, 1);
    if (r <= 0 || line[n] == '\n') break;
    n++;
  }
  line[n] = '\0';
  close(fds[0]);
  if (sscanf(line, "listening on %127s", c->uri) != 1) {
    fprintf(stderr, "worker said: '%s'\n", line);
    return false;
  }
  return true;
}

/* Kills (SIGKILL) and reaps the child, if alive. */
static void child_kill(child *c) {
  if (c->pid <= 0) return;
  kill(c->pid, SIGKILL);
  if (c->stopped) kill(c->pid, SIGCONT);
  waitpid(c->pid, NULL, 0);
  c->pid = 0;
}

/* Writes map task m into the worker at uri with DoPut (each record batch's
 * app_metadata its partition); fills m->out from the PutResult. */
static int put_map(const char *uri, const fsh_shuffle_spec *spec, stu_map *m, fsh_error *err) {
  fsh_flight_client *c = NULL;
  fsh_flight_client_options o = {.uri = uri, .timeout_ms = 60000};
  FSH_RETURN_NOT_OK(fsh_flight_client_open(&o, &c, err));
  char id[24], map[24], att[16], parts[16];
  snprintf(id, sizeof id, "%" PRIu64, spec->shuffle_id);
  snprintf(map, sizeof map, "%" PRId64, m->map_id);
  snprintf(att, sizeof att, "%d", m->attempt);
  snprintf(parts, sizeof parts, "%d", spec->n_partitions);
  const char *path[] = {"shuffle", id, "map", map, "attempt", att, "partitions", parts,
                        "compression", "none"};
  fsh_flight_descriptor d = {0};
  fsh_flight_writer *w = NULL;
  fsh_ipc_encoder *enc = NULL;
  int rc = fsh_flight_descriptor_path(&d, path, 10);
  if (rc == 0) rc = fsh_flight_do_put(c, &d, spec->schema, NULL, &w, err);
  if (rc == 0) rc = fsh_ipc_encoder_new(spec->schema, NULL, &enc, err);
  for (int64_t i = 0; rc == 0 && i < m->n_ops; i++) {
    fsh_ipc_payload *ps = NULL;
    int32_t np = 0;
    rc = fsh_ipc_encode_batch(enc, m->ops[i].batch, &ps, &np, err);
    for (int32_t k = 0; k < np; k++) {
      fsh_buffer *md = STU_OK(fsh_buffer_new(4, false));
      fsh_le_put32(md->data, (uint32_t)m->ops[i].partition);
      if (rc == 0) rc = fsh_flight_writer_write_raw(w, &ps[k], md, err);
      fsh_buffer_unref(md);
      fsh_ipc_payload_reset(&ps[k]);
    }
    fsh_free(ps);
  }
  fsh_buffer *result = NULL;
  if (w && rc == 0) {
    rc = fsh_flight_writer_close(w, &result, err);
  } else if (w) {
    fsh_flight_writer_cancel(w);
  }
  fsh_map_output_reset(&m->out);
  if (rc == 0) rc = fsh_shuffle_put_result_decode(result->data, result->size, &m->out, err);
  if (rc == 0) m->out.location = STU_OK(fsh_strdup(uri));
  fsh_buffer_unref(result);
  fsh_ipc_encoder_free(enc);
  fsh_flight_descriptor_reset(&d);
  fsh_flight_client_close(c);
  return rc;
}

/* Two worker processes, four map outputs each of ~8 MB in partition 0;
 * a reader of partition 0 (worker 0's map outputs first) with 1 MiB in
 * flight takes one batch, then worker 1 is killed with SIGKILL: the read
 * fails well before its deadline, and the error names worker 1 and lists
 * all four of its map outputs as lost. */
static void worker_killed_mid_stream(void) {
  child c[2] = {{0}, {0}};
  if (!child_start(&c[0]) || !child_start(&c[1])) {
    CHECK_MSG(false, "cannot start worker processes");
    child_kill(&c[0]);
    child_kill(&c[1]);
    return;
  }
  stu_plan p;
  make_plan(&p, 41, 2, 8, 400000, 4093); /* ~16 MB a map output, ~8 MB a partition */
  fsh_error err = {{0}};
  for (int m = 0; m < 8; m++) {
    p.maps[m].map_id = m; /* even maps on worker 0, odd on worker 1 */
    CHECK_OK(put_map(c[m % 2].uri, &p.spec, &p.maps[m], &err));
  }
  fsh_map_output src[8];
  for (int i = 0; i < 8; i++) src[i] = p.maps[i < 4 ? 2 * i : 2 * (i - 4) + 1].out;
  const char *peers[2] = {c[0].uri, c[1].uri};
  fsh_shuffle_backend *r = backend_for(NULL, peers, 2, 20000, 1 << 20, false);
  fsh_batch_stream s = {0};
  CHECK_OK(fsh_shuffle_open_reader(r, &p.spec, 0, src, 8, &s, &err));
  double t0 = now_s();
  int rc = 0;
  int64_t rows = 0;
  if (s.release) {
    fsh_batch *b = NULL;
    CHECK_OK(rc = s.get_next(&s, &b, &err));
    if (b) rows += b->length;
    fsh_batch_unref(b);
    child_kill(&c[1]);
    for (;;) {
      b = NULL;
      rc = s.get_next(&s, &b, &err);
      if (rc != 0 || !b) break;
      rows += b->length;
      fsh_batch_unref(b);
    }
    s.release(&s);
  }
  double took = now_s() - t0;
  char lost[128];
  snprintf(lost, sizeof lost, "lost map outputs [map/attempt 1/0 3/0 5/0 7/0]");
  CHECK_MSG(rc != 0 && strstr(err.message, c[1].uri) && strstr(err.message, lost),
            "rc %d after %lld rows: %s", rc, (long long)rows, err.message);
  CHECK_MSG(took < 15, "the read took %.1f s", took);
  printf("  killed (%.2f s, %lld rows read): %s\n", took, (long long)rows, err.message);
  fsh_shuffle_backend_destroy(r);
  stu_plan_free(&p);
  child_kill(&c[0]);
  child_kill(&c[1]);
}

typedef struct killed_reader {
  fsh_batch_stream s;
  int rc;
  int64_t rows;
  fsh_error err;
  pthread_barrier_t *killed; /* waited on after the first batch */
} killed_reader;

static void *drain_after_kill(void *arg) {
  killed_reader *k = arg;
  fsh_batch *b = NULL;
  k->rc = k->s.get_next(&k->s, &b, &k->err);
  if (b) k->rows += b->length;
  fsh_batch_unref(b);
  pthread_barrier_wait(k->killed); /* (the main thread kills worker 1 here) */
  pthread_barrier_wait(k->killed);
  while (k->rc == 0) {
    b = NULL;
    k->rc = k->s.get_next(&k->s, &b, &k->err);
    if (!b) break;
    k->rows += b->length;
    fsh_batch_unref(b);
  }
  k->s.release(&k->s);
  return NULL;
}

/* The fetch pool with a peer dying under several readers: two worker
 * processes, eight map outputs (even maps on worker 0, odd on worker 1),
 * four readers of one backend (DoGet only, 1 MiB in flight each: the jobs
 * of worker 1 wait for room or stream when it dies) each take a batch,
 * then worker 1 is killed with SIGKILL: every reader fails in time,
 * naming worker 1 and all four of its map outputs as lost, and the same
 * backend's pool then reads worker 0's outputs of every partition whole. */
static void worker_killed_many_readers(void) {
  child c[2] = {{0}, {0}};
  if (!child_start(&c[0]) || !child_start(&c[1])) {
    CHECK_MSG(false, "cannot start worker processes");
    child_kill(&c[0]);
    child_kill(&c[1]);
    return;
  }
  stu_plan p;
make_plan(&p, 43, 4, 8, 200000, 4093); /* ~2 MB a (map output, partition) */
  fsh_error err = {{0}};
  for (int m = 0; m < 8; m++) CHECK_OK(put_map(c[m % 2].uri, &p.spec, &p.maps[m], &err));
  /* The victim is frozen before the reads start and killed once every
   * reader has its first batch (from worker 0: sources 0-3 are its): its
   * DoGets are open and unanswered when it dies. Killing a running victim
   * raced the readers: a connection's socket buffers and HTTP/2 windows
   * hold ~20 MB, and under load two readers had received every row of the
   * victim before the kill and rightly ended with rc 0. */
  kill(c[1].pid, SIGSTOP);
  c[1].stopped = true;
  fsh_map_output src[8];
  for (int i = 0; i < 8; i++) src[i] = p.maps[i < 4 ? 2 * i : 2 * (i - 4) + 1].out;
  const char *peers[2] = {c[0].uri, c[1].uri};
  fsh_shuffle_backend *r = backend_for(NULL, peers, 2, 20000, 1 << 20, true);
  pthread_barrier_t killed;
  pthread_barrier_init(&killed, NULL, 5);
  killed_reader k[4];
  pthread_t t[4];
  for (int q = 0; q < 4; q++) {
    k[q] = (killed_reader){.killed = &killed};
    CHECK_OK(fsh_shuffle_open_reader(r, &p.spec, q, src, 8, &k[q].s, &err));
    CHECK(pthread_create(&t[q], NULL, drain_after_kill, &k[q]) == 0);
  }
  pthread_barrier_wait(&killed);
  double t0 = now_s();
  child_kill(&c[1]);
  pthread_barrier_wait(&killed);
  for (int q = 0; q < 4; q++) pthread_join(t[q], NULL);
  double took = now_s() - t0;
  pthread_barrier_destroy(&killed);
  for (int q = 0; q < 4; q++) {
    CHECK_MSG(k[q].rc != 0 && strstr(k[q].err.message, c[1].uri) &&
                  strstr(k[q].err.message, "lost map outputs [map/attempt 1/0 3/0 5/0 7/0]"),
              "partition %d: rc %d after %lld rows: %s", q, k[q].rc, (long long)k[q].rows,
              k[q].err.message);
  }
  CHECK_MSG(took < 15, "the reads took %.1f s", took);
  printf("  4 readers failed in %.2f s: %s\n", took, k[0].err.message);
  int even[4] = {0, 2, 4, 6};
  for (int q = 0; q < 4; q++) stu_check_partition(r, &p, q, even, 4, "after the kill");
  fsh_shuffle_backend_destroy(r);
  stu_plan_free(&p);
  child_kill(&c[0]);
}

/* Worker 1 is stopped (SIGSTOP) before the read: the reader's 2 s deadline
 * fires with ETIMEDOUT naming worker 1 and its map output. The reader is
 * one from another host (DoGet only): a same-host reader may read a
 * stopped worker's files and memory images directly, and rightly succeed
 * (tests/python/test_runtime.py covers that side). */
static void worker_stopped(void) {
  child c[2] = {{0}, {0}};
  if (!child_start(&c[0]) || !child_start(&c[1])) {
    CHECK_MSG(false, "cannot start worker processes");
    child_kill(&c[0]);
    child_kill(&c[1]);
    return;
  }
  stu_plan p;
  make_plan(&p, 42, 2, 2, 20000, 211);
  fsh_error err = {{0}};
  for (int m = 0; m < 2; m++) CHECK_OK(put_map(c[m].uri, &p.spec, &p.maps[m], &err));
  kill(c[1].pid, SIGSTOP);
  c[1].stopped = true;
  const char *peers[2] = {c[0].uri, c[1].uri};
  fsh_shuffle_backend *r = backend_for(NULL, peers, 2, 2000, 1 << 20, true);
  fsh_map_output src[2] = {p.maps[0].out, p.maps[1].out};
  double t0 = now_s();
  int rc = stu_read_rc(r, &p.spec, 1, src, 2, NULL, &err);
  double took = now_s() - t0;
  CHECK_MSG(rc == ETIMEDOUT && strstr(err.message, c[1].uri) &&
                strstr(err.message, "lost map outputs [map/attempt 1/0]"),
            "rc %d: %s", rc, err.message);
  CHECK_MSG(took >= 1.5 && took < 10, "the read took %.1f s", took);
  printf("  stopped (%.2f s): %s\n", took, err.message);
  /* worker 0 still serves */
  int only0[] = {0};
  stu_check_partition(r, &p, 1, only0, 1, "worker 0 beside a stopped one");
  fsh_shuffle_backend_destroy(r);
  stu_plan_free(&p);
  child_kill(&c[0]);
  child_kill(&c[1]);
}

/* ---- allocation failures ----------------------------------------------- */

/* For k = 1, 2, ...: the k-th allocation from the store writer's open on
 * fails (alternately once and from then on): the writer reports an error
 * (or succeeds, the failure having hit nothing essential), a failed one
 * publishes nothing, leaves no file and gives the budget back; a
 * successful one reads back identical. Memory mode and spill mode. */
static void alloc_failures_store_writer(void) {
  char *dir = stu_mkdtemp("oomw");
  const char *d = dir;
  stu_plan p;
  make_plan(&p, 51, 3, 1, 3000, 113);
  p.spec.target_block_bytes = 8 << 10;
  const int64_t limits[2] = {1 << 30, 16 << 10}; /* all in memory; spills past 16 KiB */
  for (int mode = 0; mode < 2; mode++) {
    fsh_error err = {{0}};
    fsh_shuffle_store *s = NULL;
    fsh_shuffle_store_options o = {.spill_dirs = &d, .n_spill_dirs = 1,
                                   .memory_limit = limits[mode], .name = "oom"};
    CHECK_OK(fsh_shuffle_store_new(&o, &s, &err));
    if (!s) break;
    int successes = 0, failures = 0;
    for (int64_t k = 1; k < 20000 && successes < 2; k++) {
      stu_map *m = &p.maps[0];
      fsh_store_writer *w = NULL;
      fsh_map_output out = {0};
      fsh_alloc_fail_after(k, k % 2 == 0);
      int rc = fsh_store_writer_open(s, &p.spec, m->map_id, m->attempt, &w, &err);
      for (int64_t i = 0; rc == 0 && i < m->n_ops; i++)
        rc = fsh_store_writer_write(w, m->ops[i].partition, m->ops[i].batch, &err);
      if (rc == 0) rc = fsh_store_writer_close(w, &out, &err);
      else fsh_store_writer_abort(w);
      fsh_alloc_fail_after(0, false);
      fsh_shuffle_store_stats st;
      fsh_shuffle_store_get_stats(s, &st);
      if (rc != 0) {
        failures++;
        CHECK_MSG(rc == ENOMEM && strstr(err.message, "memory"), "k %lld: rc %d: %s",
                  (long long)k, rc, err.message);
        CHECK_MSG(st.map_outputs == 0 && st.memory_bytes == 0 && stu_count_files(dir) == 0,
                  "k %lld: %lld outputs, %lld bytes, %d files after a failure", (long long)k,
                  (long long)st.map_outputs, (long long)st.memory_bytes, stu_count_files(dir));
        if (fsh_test_failures_ > 20) break;
        continue;
      }
      successes++;
      CHECK(st.map_outputs == 1 && out.rows && out.n_partitions == 3);
      /* read every partition back in-process */
      fsh_map_file *f = NULL;
      CHECK_OK(fsh_store_open(s, 51, m->map_id, m->attempt, &f, &err));
      for (int32_t q = 0; f && q < 3; q++) {
        fsh_map_file_cursor *c = NULL;
        CHECK_OK(fsh_map_file_cursor_open(f, q, &c, &err));
        int64_t rows = 0;
        for (fsh_batch *b = NULL; c && fsh_map_file_cursor_next(c, &b, &err) == 0 && b;
             b = NULL) {
          rows += b->length;
          fsh_batch_unref(b);
        }
        CHECK_EQ_INT(rows, out.rows[q]);
        fsh_map_file_cursor_free(c);
      }
      fsh_map_file_close(f);
      fsh_map_output_reset(&out);
      CHECK_OK(fsh_store_release(s, 51, NULL, NULL, &err));
    }
    CHECK_MSG(failures > 10 && successes == 2, "mode %d: %d failures, %d successes", mode,
              failures, successes);
    fsh_shuffle_store_free(s);
    CHECK_EQ_INT(stu_count_files(dir), 0);
  }
  stu_plan_free(&p);
  stu_rmdir(dir);
}

/* The messages a DoGet source sends, concatenated (metadata, body,
 * app_metadata of each), into *out (malloc'd); the error code. */
static int serve_all(fsh_shuffle_store *s, const fsh_buffer *ticket, uint8_t **out, size_t *n,
                     int64_t *n_msgs, fsh_error *err) {
  *out = NULL;
  *n = 0;
  *n_msgs = 0;
  fsh_flight_source *src = NULL;
  int rc = fsh_worker_do_get(s, ticket->data, ticket->size, &src, err);
  if (rc != 0) return rc;
  for (;;) {
    fsh_ipc_payload pl = {0};
    fsh_buffer *app = NULL;
    bool done = false;
    rc = src->next(src, &pl, &app, &done, err);
    if (rc != 0 || done) {
      fsh_ipc_payload_reset(&pl);
      fsh_buffer_unref(app);
      break;
    }
    (*n_msgs)++;
    fsh_buffer *parts[3] = {pl.metadata, pl.n_body ? pl.body[0] : NULL, app};
    for (int i = 0; i < 3; i++) {
      if (!parts[i]) continue;
      *out = STU_OK(realloc(*out, *n + (size_t)parts[i]->size + 1));
      memcpy(*out + *n, parts[i]->data, (size_t)parts[i]->size);
      *n += (size_t)parts[i]->size;
    }
    fsh_ipc_payload_reset(&pl);
    fsh_buffer_unref(app);
  }
  src->release(src);
  return rc;
}

/* The worker's DoGet source (in-process, no gRPC) with the k-th
 * allocation failing: either an error (ENOMEM) or exactly the messages of
 * a clean run -- never a shorter stream that ends as if complete. Spilled
 * and in-memory map outputs in one ticket. */
static void alloc_failures_do_get(void) {
  char *dir = stu_mkdtemp("oomg");
  const char *d = dir;
  stu_plan p;
  make_plan(&p, 52, 2, 2, 4000, 127);
  p.spec.target_block_bytes = 8 << 10;
  fsh_error err = {{0}};
  fsh_shuffle_worker *w = start_worker(&d, 1, 80 << 10);
  if (!w) return;
  fsh_shuffle_backend *b = backend_for(w, NULL, 0, 10000, 1 << 20, false);
  for (int m = 0; m < 2; m++) CHECK_OK(stu_run_map(b, &p.spec, &p.maps[m], &err));
  fsh_shuffle_store *s = fsh_shuffle_worker_store(w);
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(s, &st);
  CHECK_MSG(st.spilled_outputs >= 1, "%lld spilled", (long long)st.spilled_outputs);
  fsh_ticket_source srcs[2] = {{0, 0}, {1, 0}};
  fsh_shuffle_ticket t = {.shuffle_id = 52, .partition = 1, .n_sources = 2, .sources = srcs};
  fsh_buffer *ticket = NULL;
  CHECK_OK(fsh_shuffle_ticket_encode(&t, &ticket, &err));
  uint8_t *ref = NULL;
  size_t n_ref = 0;
  int64_t msgs_ref = 0;
  CHECK_OK(serve_all(s, ticket, &ref, &n_ref, &msgs_ref, &err));
  CHECK(msgs_ref > 4);
  int failures = 0, successes = 0;
  for (int64_t k = 1; k < 20000 && successes < 2 && ticket; k++) {
    uint8_t *got = NULL;
    size_t n_got = 0;
    int64_t msgs = 0;
    fsh_alloc_fail_after(k, k % 2 == 1);
    int rc = serve_all(s, ticket, &got, &n_got, &msgs, &err);
    fsh_alloc_fail_after(0, false);
    if (rc != 0) {
      failures++;
      CHECK_MSG(rc == ENOMEM, "k %lld: rc %d: %s", (long long)k, rc, err.message);
    } else {
      successes++;
      CHECK_MSG(msgs == msgs_ref && n_got == n_ref && memcmp(got, ref, n_ref) == 0,
                "k %lld: a stream of %lld messages, %zu bytes ended as complete (want %lld, %zu)",
                (long long)k, (long long)msgs, n_got, (long long)msgs_ref, n_ref);
    }
    free(got);
    if (fsh_test_failures_ > 20) break;
  }
  CHECK_MSG(failures > 10 && successes == 2, "%d failures, %d successes", failures, successes);
  /* the store is intact afterwards */
  stu_check_partition(b, &p, 0, NULL, 0, "after DoGet allocation failures");
  free(ref);
  fsh_buffer_unref(ticket);
  fsh_shuffle_backend_destroy(b);
  stu_plan_free(&p);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

FSH_TEST_MAIN(TEST(disk_full_one_dir), TEST(disk_full_fall_over), TEST(missing_spill_file),
              TEST(worker_killed_mid_stream), TEST(worker_killed_many_readers),
              TEST(worker_stopped),
              TEST(alloc_failures_store_writer), TEST(alloc_failures_do_get))
