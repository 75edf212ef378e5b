/* test_fs.c -- the fs backend's failure cases: corrupted, truncated,
 * replaced and missing map-output files, locations that try to leave the
 * directory, unusable directories, and release of leftover temp files. */
#include <fcntl.h>
#include <sys/stat.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"

typedef struct fixture {
  char *dir;
  fsh_shuffle_backend *b;
  stu_plan p;
} fixture;

/* Shuffle 1: 3 map tasks, 4 partitions, synthetic rows, lz4, small blocks. */
static void setup(fixture *fx) {
  fsh_error err;
  fx->dir = stu_mkdtemp("fs");
  CHECK_OK(fsh_shuffle_fs_new(fx->dir, &fx->b, &err));
  fsh_batch *x = stu_synthetic(3, 4000);
  stu_plan_init(&fx->p, 1, 4, x->schema, 3);
  fx->p.spec.compression = FSH_COMPRESSION_LZ4_FRAME;
  fx->p.spec.target_block_bytes = 16 << 10;
  for (int m = 0; m < 3; m++) stu_add_split(&fx->p.maps[m], x, 4, 20, false, (uint64_t)m);
  fsh_batch_unref(x);
  for (int m = 0; m < 3; m++) CHECK_OK(stu_run_map(fx->b, &fx->p.spec, &fx->p.maps[m], &err));
}

static void teardown(fixture *fx) {
  fsh_error err;
  CHECK_OK(fsh_shuffle_release(fx->b, 1, &err));
  CHECK_EQ_INT(stu_count_files(fx->dir), 0);
  fsh_shuffle_backend_destroy(fx->b);
  stu_plan_free(&fx->p);
  stu_rmdir(fx->dir);
}

static char *path_of(const fixture *fx, int m) {
  char *p = STU_OK(malloc(strlen(fx->dir) + 100));
  sprintf(p, "%s/%s", fx->dir, fx->p.maps[m].out.location);
  return p;
}

static int read_all(fixture *fx, int32_t q, fsh_error *err) {
  fsh_map_output src[3] = {fx->p.maps[0].out, fx->p.maps[1].out, fx->p.maps[2].out};
  return stu_read_rc(fx->b, &fx->p.spec, q, src, 3, NULL, err);
}

/* Overwrites n bytes at offset (negative: from the end) of a file. */
static void poke(const char *path, int64_t offset, const void *bytes, size_t n) {
  int fd = open(path, O_WRONLY);
  CHECK(fd >= 0);
  if (offset < 0) offset += lseek(fd, 0, SEEK_END);
  CHECK(pwrite(fd, bytes, n, offset) == (ssize_t)n);
  close(fd);
}

/* One corrupted byte inside a block of map 1, partition 3: reading that
 * partition fails with EIO naming map, partition and file; the other
 * partitions still read exactly. */
static void test_corrupt_block(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  char *path = path_of(&fx, 1);
  fsh_map_file *f = NULL;
  fsh_map_file_partition part = {0};
  CHECK_OK(fsh_map_file_open_path(path, &f, &err));
  if (f) CHECK_OK(fsh_map_file_get_partition(f, 3, &part, &err));
  fsh_map_file_close(f);
  CHECK(part.n_blocks >= 2);
  if (part.n_blocks >= 2) {
    uint8_t byte = 0;
    int fd = open(path, O_RDONLY);
    int64_t at = part.blocks[1].offset + part.blocks[1].length / 2;
    CHECK(pread(fd, &byte, 1, at) == 1);
    close(fd);
    byte ^= 1;
    poke(path, at, &byte, 1);
    int rc = read_all(&fx, 3, &err);
    CHECK_MSG(rc == EIO && strstr(err.message, "map 1") && strstr(err.message, "partition 3") &&
                  strstr(err.message, fx.p.maps[1].out.location) && strstr(err.message, "checksum"),
              "rc %d: %s", rc, err.message);
    for (int32_t q = 0; q < 3; q++) stu_check_partition(fx.b, &fx.p, q, NULL, 0, "fs");
  }
  fsh_map_file_partition_reset(&part);
  free(path);
  teardown(&fx);
}

static void test_truncated_file(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  char *path = path_of(&fx, 0);
  struct stat st;
  CHECK(stat(path, &st) == 0);
  const int64_t cuts[] = {st.st_size - 1, st.st_size - 24, st.st_size / 2, 10, 0};
  for (int i = 0; i < 5; i++) {
    CHECK(truncate(path, cuts[i]) == 0);
    int rc = read_all(&fx, 0, &err);
    CHECK_MSG(rc == EINVAL && strstr(err.message, "not a valid map-output file") &&
                  strstr(err.message, fx.p.maps[0].out.location),
              "cut %lld: rc %d: %s", (long long)cuts[i], rc, err.message);
  }
  free(path);
  teardown(&fx);
}

static void test_garbage_trailer_and_index(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  char *path = path_of(&fx, 2);
  uint8_t junk[24];
  for (int i = 0; i < 24; i++) junk[i] = (uint8_t)(i * 37 + 11);
  poke(path, -24, junk, 24);
  int rc = read_all(&fx, 1, &err);
  CHECK_MSG(rc == EINVAL && strstr(err.message, "trailer"), "rc %d: %s", rc, err.message);
  /* map 1: a flipped bit in the index header, then in a partition entry */
  char *p1 = path_of(&fx, 1);
  struct stat st;
  CHECK(stat(p1, &st) == 0);
  int64_t index_len = FSH_MAP_FILE_HEADER_BYTES + FSH_MAP_FILE_ENTRY_BYTES * 4;
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_map_file_open_path(p1, &f, &err));
  if (f) index_len += FSH_MAP_FILE_BLOCK_BYTES * fsh_map_file_get_info(f)->n_blocks;
  fsh_map_file_close(f);
  int64_t entry2 = st.st_size - 24 - index_len + FSH_MAP_FILE_HEADER_BYTES +
                   2 * FSH_MAP_FILE_ENTRY_BYTES;
  uint8_t v = 0x40;
  poke(p1, entry2 + 3, &v, 1); /* rows of partition 2 */
  const fsh_map_output one = fx.p.maps[1].out;
  rc = stu_read_rc(fx.b, &fx.p.spec, 2, &one, 1, NULL, &err);
  CHECK_MSG(rc == EINVAL && strstr(err.message, "partition 2") && strstr(err.message, "entry"),
            "rc %d: %s", rc, err.message);
  CHECK_OK(stu_read_rc(fx.b, &fx.p.spec, 1, &one, 1, NULL, &err)); /* others fine */
  poke(p1, st.st_size - 24 - index_len + 8, &v, 1); /* shuffle id in the header */
  rc = stu_read_rc(fx.b, &fx.p.spec, 1, &one, 1, NULL, &err);
  CHECK_MSG(rc == EINVAL && strstr(err.message, "header checksum"), "rc %d: %s", rc, err.message);
  free(p1);
  free(path);
  teardown(&fx);
}

/* A file replaced by another complete, valid map output of the same
 * (shuffle, map, attempt): the driver's recorded checksum catches it. */
static void test_replaced_file(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  fsh_map_output first = {0};
  CHECK_OK(fsh_map_output_copy(&first, &fx.p.maps[0].out));
  fsh_batch *y = stu_synthetic(99, 1000);
  stu_map other = {.map_id = 0};
  stu_add_split(&other, y, 4, 10, true, 0);
  CHECK_OK(stu_run_map(fx.b, &fx.p.spec, &other, &err)); /* overwrites s1-m0-a0 */
  int rc = stu_read_rc(fx.b, &fx.p.spec, 0, &first, 1, NULL, &err);
  CHECK_MSG(rc == EIO && strstr(err.message, "recorded") && strstr(err.message, "map 0"),
            "rc %d: %s", rc, err.message);
  for (int64_t k = 0; k < other.n_ops; k++) fsh_batch_unref(other.ops[k].batch);
  free(other.ops);
  fsh_map_output_reset(&other.out);
  fsh_map_output_reset(&first);
  fsh_batch_unref(y);
  teardown(&fx);
}

/* Locations are plain names of this backend; anything else is refused
 * before any file is opened. */
static void test_locations_refused(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  const char *bad[] = {"../s1-m0-a0.arrows", "/etc/passwd", "sub/s1-m0-a0.arrows", "..",
                       "s1-m0-a0.arrows/..", "s1-m1-a0.arrows", "s1-m0-a0.arrows.tmp", "",
                       "s01-m0-a0.arrows", "s1-m0-a0.arrows\n"};
  for (int i = 0; i < 10; i++) {
    fsh_map_output src = {0};
    CHECK_OK(fsh_map_output_copy(&src, &fx.p.maps[0].out));
    fsh_free(src.location);
    src.location = fsh_strdup(bad[i]);
    int rc = stu_read_rc(fx.b, &fx.p.spec, 0, &src, 1, NULL, &err);
    CHECK_MSG(rc == EINVAL && strstr(err.message, "refused"), "'%s': rc %d: %s", bad[i], rc,
              err.message);
    fsh_map_output_reset(&src);
  }
  teardown(&fx);
}

static void test_missing_file(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  char *path = path_of(&fx, 1);
  CHECK(unlink(path) == 0);
  int rc = read_all(&fx, 2, &err);
  CHECK_MSG(rc == ENOENT && strstr(err.message, fx.p.maps[1].out.location) &&
                strstr(err.message, "map 1"),
            "rc %d: %s", rc, err.message);
  free(path);
  teardown(&fx);
}

/* A directory that cannot be made, or that disappears: clear errors, and
 * no file anywhere. */
static void test_unusable_directory(void) {
  fsh_error err;
  char *dir = stu_mkdtemp("fsdir");
  char file[512], sub[600];
  snprintf(file, sizeof file, "%s/plain-file", dir);
  int fd = open(file, O_CREAT | O_WRONLY, 0644);
  close(fd);
  snprintf(sub, sizeof sub, "%s/x", file);
  fsh_shuffle_backend *b = NULL;
  CHECK_EQ_INT(fsh_shuffle_fs_new(sub, &b, &err), ENOTDIR);
  CHECK_MSG(strstr(err.message, "plain-file"), "%s", err.message);
  CHECK_EQ_INT(fsh_shuffle_fs_new(file, &b, &err), ENOTDIR);
  CHECK(b == NULL);

  snprintf(sub, sizeof sub, "%s/a/b/c", dir); /* created with its parents */
  CHECK_OK(fsh_shuffle_fs_new(sub, &b, &err));
  fsh_batch *x = stu_synthetic(1, 100);
  fsh_shuffle_spec spec = {.shuffle_id = 4, .n_partitions = 2, .schema = x->schema};
  CHECK(rmdir(sub) == 0); /* the directory goes away under the backend */
  fsh_shuffle_writer *w = NULL;
  int rc = b ? fsh_shuffle_open_writer(b, &spec, 0, 0, &w, &err) : -1;
  CHECK_MSG(rc == ENOENT && strstr(err.message, "s4-m0-a0.arrows") && strstr(err.message, "map 0"),
            "rc %d: %s", rc, err.message);
  CHECK(w == NULL);
  fsh_shuffle_backend_destroy(b);
  fsh_batch_unref(x);
  snprintf(sub, sizeof sub, "%s/a/b", dir);
  rmdir(sub);
  snprintf(sub, sizeof sub, "%s/a", dir);
  rmdir(sub);
  unlink(file);
  CHECK_EQ_INT(stu_count_files(dir), 0);
  stu_rmdir(dir);
}

/* Release removes the shuffle's files and leftover temp files (of writers
 * that died), and nothing of other shuffles or foreign files. */
static void test_release_scope(void) {
  fixture fx;
  setup(&fx);
  fsh_error err;
  const char *names[] = {"s1-m7-a3.arrows.tmp", "s12-m0-a0.arrows", "s1-m0-a0.arrowsX",
                         "notes.txt", "s1-m-a0.arrows"};
  for (int i = 0; i < 5; i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", fx.dir, names[i]);
    close(open(p, O_CREAT | O_WRONLY, 0644));
  }
  CHECK_EQ_INT(stu_count_files(fx.dir), 8);
  CHECK_OK(fsh_shuffle_release(fx.b, 1, &err));
  CHECK_EQ_INT(stu_count_files(fx.dir), 4); /* the 3 outputs and the temp file went */
  for (int i = 1; i < 5; i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", fx.dir, names[i]);
    CHECK(unlink(p) == 0);
  }
  teardown(&fx);
}

FSH_TEST_MAIN(TEST(test_corrupt_block), TEST(test_truncated_file),
              TEST(test_garbage_trailer_and_index), TEST(test_replaced_file),
              TEST(test_locations_refused), TEST(test_missing_file),
              TEST(test_unusable_directory), TEST(test_release_scope))
