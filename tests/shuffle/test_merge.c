/* test_merge.c -- the pre-shuffle merge on a store (worker_merge.c):
 * several map outputs become one whose partitions hold the parts' rows in
 * part order. Checked against an independent reading of the parts, in
 * both of the merge's ways: blocks copied as stored (re-encoding turned
 * off by the test hook; the blocks' bytes in order, byte for byte, so the
 * stored-bytes checksum is the xxh3 of their concatenation, and bytes add
 * up) and small blocks re-encoded (the default for these 4 KiB blocks:
 * each partition of several blocks becomes one block, fewer bytes; the
 * checksum is the xxh3 of the new blocks). Either way rows add up, and
 * the decoded rows are the same rows in the same order (each row's hash,
 * fsh_task_row_checksums, in sequence) -- so their row checksums too.
 * Also: one part, empty partitions, a corrupt part (the merge fails,
 * nothing is published, the parts stay), a memory image part damaged in
 * memory (not hashed again by the merge: its reader reports it), a
 * missing part, the body. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(__x86_64__)
/* libxxhash's run-time dispatched XXH3 (xxh_x86dispatch.h; not includable
 * beside XXH_INLINE_ALL), which map_file.c checksums the blocks it writes
 * with */
XXH64_hash_t XXH3_64bits_dispatch(const void *input, size_t len);
#endif

#include "shuffle/shuffle_internal.h"
#include "shuffle/worker_internal.h"
#include "shuffle_testutil.h"

#define NP 5
#define SHUFFLE 77

/* Writes map output (map, attempt) of shuffle SHUFFLE: partition p gets
 * rows[p] synthetic rows in chunks of 97 (0: empty). */
static void write_part(fsh_shuffle_store *s, int64_t map, int32_t attempt, const int64_t *rows,
                       fsh_compression comp, fsh_map_output *out) {
  fsh_error err = {{0}};
  fsh_batch *probe = stu_synthetic(0, 1);
  fsh_shuffle_spec spec = {.shuffle_id = SHUFFLE, .n_partitions = NP, .schema = probe->schema,
                           .compression = comp, .target_block_bytes = 4 << 10};
  fsh_store_writer *w = NULL;
  CHECK_OK(fsh_store_writer_open(s, &spec, map, attempt, &w, &err));
  for (int32_t p = 0; w && p < NP; p++)
    for (int64_t at = 0; at < rows[p]; at += 97) {
      int64_t n = rows[p] - at < 97 ? rows[p] - at : 97;
      fsh_batch *b = stu_synthetic(map * 100000 + p * 10000 + at, n);
      CHECK_OK(fsh_store_writer_write(w, p, b, &err));
      fsh_batch_unref(b);
    }
  memset(out, 0, sizeof *out);
  if (w) CHECK_OK(fsh_store_writer_close(w, out, &err));
  fsh_batch_unref(probe);
}

/* What an independent reader sees of partition p of a held output: its
 * blocks' bytes concatenated (appended to *cat), rows, and the row
 * checksum of its decoded rows. */
typedef struct seen {
  uint8_t *cat;
  int64_t len, blocks, rows;
  uint64_t row_sum;
  uint64_t *row_h; /* [rows]: each row's hash, in the order read */
} seen;

static void read_partition(fsh_shuffle_store *s, int64_t map, int32_t attempt, int32_t p,
                           seen *acc) {
  fsh_error err = {{0}};
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_store_open(s, SHUFFLE, map, attempt, &f, &err));
  if (!f) return;
  fsh_map_file_partition part = {0};
  CHECK_OK(fsh_map_file_get_partition(f, p, &part, &err));
  for (int64_t k = 0; k < part.n_blocks; k++) {
    fsh_buffer *b = NULL;
    CHECK_OK(fsh_map_file_read_block(f, &part, k, &b, &err));
    if (!b) continue;
    acc->cat = STU_OK(realloc(acc->cat, (size_t)(acc->len + b->size + 1)));
    memcpy(acc->cat + acc->len, b->data, (size_t)b->size);
    acc->len += b->size;
    acc->blocks++;
    fsh_buffer_unref(b);
  }
  fsh_map_file_partition_reset(&part);
  fsh_map_file_cursor *c = NULL;
  CHECK_OK(fsh_map_file_cursor_open(f, p, &c, &err));
  for (;;) {
    fsh_batch *b = NULL;
    if (!c || fsh_map_file_cursor_next(c, &b, &err) != 0 || !b) break;
    fsh_task_row_checksums(b, NULL, &acc->row_sum);
    /* row i alone in "partition" i: its own hash */
    int32_t *ids = STU_OK(malloc(sizeof *ids * (size_t)(b->length + 1)));
    for (int64_t i = 0; i < b->length; i++) ids[i] = (int32_t)i;
    acc->row_h = STU_OK(realloc(acc->row_h, sizeof *acc->row_h * (size_t)(acc->rows + b->length + 1)));
    memset(acc->row_h + acc->rows, 0, sizeof *acc->row_h * (size_t)b->length);
    fsh_task_row_checksums(b, ids, acc->row_h + acc->rows);
    free(ids);
    acc->rows += b->length;
    fsh_batch_unref(b);
  }
  fsh_map_file_cursor_free(c);
  fsh_map_file_close(f);
}

static fsh_shuffle_store *new_store(const char *dir, int64_t limit) {
  fsh_error err = {{0}};
  fsh_shuffle_store *s = NULL;
  fsh_shuffle_store_options o = {.spill_dirs = &dir, .n_spill_dirs = 1, .memory_limit = limit,
                                 .name = "merge-test"};
  CHECK_OK(fsh_shuffle_store_new(&o, &s, &err));
  return s;
}

/* Merges n parts with the given rows per partition and checks the merged
 * output against the parts read independently. hooks: the merge's test
 * hooks (NULL: none) but for small_block, set by `reencode`. */
static void merge_and_check_with(int n, const int64_t (*rows)[NP], int64_t limit,
                                 fsh_compression comp, bool reencode,
                                 const fsh_merge_test_hooks *hooks) {
  fsh_merge_test_hooks h = {0};
  if (hooks) h = *hooks;
  h.small_block = reencode ? 0 : -1;
  fsh_merge_set_test_hooks(&h);
  char *dir = stu_mkdtemp("merge");
  fsh_shuffle_store *s = new_store(dir, limit);
  fsh_error err = {{0}};
  int64_t maps[8];
  int32_t attempts[8];
  fsh_map_output parts[8];
  for (int i = 0; i < n; i++) {
    maps[i] = 3 * i + 1;
    attempts[i] = i % 2;
    write_part(s, maps[i], attempts[i], rows[i], comp, &parts[i]);
  }
  seen want[NP];
  memset(want, 0, sizeof want);
  for (int32_t p = 0; p < NP; p++)
    for (int i = 0; i < n; i++) read_partition(s, maps[i], attempts[i], p, &want[p]);
  fsh_merge_task t = {.shuffle_id = SHUFFLE, .map_id = 0, .attempt = 5, .drop_parts = true,
                      .n_parts = n, .part_maps = maps, .part_attempts = attempts};
  fsh_map_output m = {0};
  CHECK_OK(fsh_shuffle_store_merge(s, &t, &m, &err));
  fsh_merge_set_test_hooks(NULL);
  CHECK_EQ_INT(m.n_partitions, NP);
  CHECK(m.map_id == 0 && m.attempt == 5 && m.shuffle_id == SHUFFLE);
  for (int32_t p = 0; m.rows && p < NP; p++) {
    int64_t r = 0, b = 0;
    for (int i = 0; i < n; i++) r += parts[i].rows[p], b += parts[i].bytes[p];
    CHECK_EQ_INT(m.rows[p], r);
    CHECK_EQ_INT(want[p].rows, r);
    CHECK_EQ_INT(want[p].len, b);
    if (reencode && want[p].blocks > 1) continue; /* new blocks: checked below */
    CHECK_EQ_INT(m.bytes[p], b);
    CHECK(m.checksums[p] == XXH3_64bits(want[p].cat, (size_t)want[p].len));
    if (n == 1) CHECK(m.checksums[p] == parts[0].checksums[p]);
  }
  /* the parts are gone, the merged output is held */
  for (int i = 0; i < n; i++) CHECK(!fsh_store_has(s, SHUFFLE, maps[i], attempts[i], NULL));
  CHECK(fsh_store_has(s, SHUFFLE, 0, 5, NULL));
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(s, &st);
  CHECK_EQ_INT(st.map_outputs, 1);
  /* copied: its blocks are the parts' bytes, in order. Re-encoded (a
   * partition of several small blocks): one block now (the rows are far
   * under 4 MiB), fewer bytes when uncompressed, the output's bytes and
   * checksum those of the new block. Either way its rows decode to the
   * parts' rows in part order. */
  for (int32_t p = 0; p < NP; p++) {
    seen got = {0};
    read_partition(s, 0, 5, p, &got);
    if (reencode && want[p].blocks > 1) {
      CHECK_EQ_INT(got.blocks, 1);
      if (comp == FSH_COMPRESSION_NONE)
        CHECK_MSG(got.len < want[p].len, "partition %d: %lld bytes re-encoded, %lld copied", p,
                  (long long)got.len, (long long)want[p].len);
      if (m.rows) {
        CHECK_EQ_INT(m.bytes[p], got.len);
        CHECK(m.checksums[p] == XXH3_64bits(got.cat, (size_t)got.len));
      }
    } else {
      CHECK_EQ_INT(got.len, want[p].len);
      CHECK_EQ_INT(got.blocks, want[p].blocks);
      CHECK(got.len == want[p].len && (got.len == 0 || memcmp(got.cat, want[p].cat,
                                                               (size_t)got.len) == 0));
    }
    CHECK_EQ_INT(got.rows, want[p].rows);
    CHECK(got.row_sum == want[p].row_sum);
    CHECK_MSG(got.rows == want[p].rows &&
                  (got.rows == 0 || memcmp(got.row_h, want[p].row_h,
                                           sizeof *got.row_h * (size_t)got.rows) == 0),
              "partition %d: the merged rows are not the parts' rows in order", p);
    free(got.cat);
    free(got.row_h);
    free(want[p].cat);
    free(want[p].row_h);
  }
  fsh_map_output_reset(&m);
  for (int i = 0; i < n; i++) fsh_map_output_reset(&parts[i]);
  fsh_shuffle_store_free(s);
  CHECK_EQ_INT(stu_count_files(dir), 0);
  stu_rmdir(dir);
}

static const int64_t k_rows[4][NP] = {
    {500, 0, 31, 1000, 7}, {0, 0, 260, 3, 1}, {1200, 0, 0, 90, 400}, {1, 0, 2, 3, 4}};

/* re-encoding (the default for these 4 KiB blocks) */
static void merge_and_check(int n, const int64_t (*rows)[NP], int64_t limit, fsh_compression comp) {
  merge_and_check_with(n, rows, limit, comp, true, NULL);
}

static void merge_adds_up_memory(void) { merge_and_check(4, k_rows, 1 << 30, FSH_COMPRESSION_NONE); }
static void merge_adds_up_spilled(void) { merge_and_check(3, k_rows, 0, FSH_COMPRESSION_LZ4_FRAME); }
static void merge_of_one_part(void) { merge_and_check(1, k_rows + 2, 1 << 30, FSH_COMPRESSION_ZSTD); }
/* blocks copied as stored, byte for byte */
static void merge_copies_memory(void) {
  merge_and_check_with(4, k_rows, 1 << 30, FSH_COMPRESSION_NONE, false, NULL);
}
static void merge_copies_spilled(void) {
  merge_and_check_with(3, k_rows, 0, FSH_COMPRESSION_LZ4_FRAME, false, NULL);
}
static void merge_copies_one_part(void) {
  merge_and_check_with(1, k_rows + 2, 1 << 30, FSH_COMPRESSION_ZSTD, false, NULL);
}
/* Parts read block by block (the fallback for parts over 64 MiB, forced
 * with a 1-byte limit): the same merged output, memory or spilled; every
 * non-empty part went that way. */
static void merge_by_block(int64_t limit, fsh_compression comp, bool reencode,
                           int64_t want_parts) {
  int64_t by_block = 0;
  fsh_merge_test_hooks h = {.whole_max = 1, .by_block = &by_block};
  merge_and_check_with(4, k_rows, limit, comp, reencode, &h);
  CHECK_EQ_INT(by_block, want_parts);
}
static void merge_by_block_memory(void) { merge_by_block(1 << 30, FSH_COMPRESSION_NONE, true, 4); }
static void merge_by_block_spilled(void) { merge_by_block(0, FSH_COMPRESSION_ZSTD, true, 4); }
static void merge_by_block_copies(void) { merge_by_block(0, FSH_COMPRESSION_NONE, false, 4); }

/* The shuffle is released while a merge copies its parts (the hook runs
 * once they are open): the merge fails ECANCELED naming the release, and
 * its merged output is not left behind -- the store holds nothing. */
static void release_during_merge_hook(void *ctx, const fsh_merge_task *t) {
  fsh_error err = {{0}};
  CHECK_OK(fsh_shuffle_store_release(ctx, t->shuffle_id, &err));
}
static void release_during_merge(int64_t limit) {
  char *dir = stu_mkdtemp("mergerel");
  fsh_shuffle_store *s = new_store(dir, limit);
  fsh_error err = {{0}};
  fsh_map_output a = {0}, b = {0};
  write_part(s, 1, 0, k_rows[0], FSH_COMPRESSION_NONE, &a);
  write_part(s, 2, 0, k_rows[2], FSH_COMPRESSION_NONE, &b);
  int64_t maps[2] = {1, 2};
  int32_t attempts[2] = {0, 0};
  for (int drop = 0; drop < 2; drop++) {
    fsh_merge_test_hooks h = {.parts_open = release_during_merge_hook, .ctx = s};
    fsh_merge_set_test_hooks(&h);
    fsh_merge_task t = {.shuffle_id = SHUFFLE, .map_id = 9, .attempt = 1, .drop_parts = drop,
                        .n_parts = 2, .part_maps = maps, .part_attempts = attempts};
    fsh_map_output m = {0};
    int rc = fsh_shuffle_store_merge(s, &t, &m, &err);
    fsh_merge_set_test_hooks(NULL);
    CHECK_EQ_INT(rc, ECANCELED);
    CHECK_MSG(rc && strstr(err.message, "released") && strstr(err.message, "map 1"), "%s",
              err.message);
    CHECK(m.rows == NULL);
    fsh_shuffle_store_stats st;
    fsh_shuffle_store_get_stats(s, &st);
    CHECK_EQ_INT(st.map_outputs, 0);
    CHECK_EQ_INT(stu_count_files(dir), 0);
    /* again, with the parts written anew */
    fsh_map_output_reset(&a);
    fsh_map_output_reset(&b);
    write_part(s, 1, 0, k_rows[0], FSH_COMPRESSION_NONE, &a);
    write_part(s, 2, 0, k_rows[2], FSH_COMPRESSION_NONE, &b);
  }
  CHECK_OK(fsh_shuffle_store_release(s, SHUFFLE, &err));
  fsh_map_output_reset(&a);
  fsh_map_output_reset(&b);
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
}
static void release_during_merge_memory(void) { release_during_merge(1 << 30); }
static void release_during_merge_spilled(void) { release_during_merge(0); }

static void merge_of_empty_parts(void) {
  static const int64_t empty[2][NP] = {{0}, {0}};
  merge_and_check(2, empty, 1 << 30, FSH_COMPRESSION_NONE);
}

/* Flips the byte at `at` of fd (a part's spill file or memfd). */
static void flip_byte(int fd, off_t at) {
  uint8_t x = 0;
  CHECK(pread(fd, &x, 1, at) == 1);
  x ^= 0x5a;
  CHECK(pwrite(fd, &x, 1, at) == 1);
}

/* A store in dir with a memory limit (0: everything spills) holding parts
 * 1 and 2 of SHUFFLE (k_rows[0] and [1]: *a, *b), and where partition 3 of
 * part 2 is (*loc, expected of that kind, with a block). */
static fsh_shuffle_store *two_parts(const char *dir, int64_t limit, fsh_store_at kind,
                                    fsh_map_output *a, fsh_map_output *b,
                                    fsh_store_location *loc) {
  fsh_shuffle_store *s = new_store(dir, limit);
  fsh_error err = {{0}};
  write_part(s, 1, 0, k_rows[0], FSH_COMPRESSION_NONE, a);
  write_part(s, 2, 0, k_rows[1], FSH_COMPRESSION_NONE, b);
  memset(loc, 0, sizeof *loc);
  CHECK_OK(fsh_store_locate(s, SHUFFLE, 2, 0, 3, loc, &err));
  CHECK(loc->kind == kind && loc->part.n_blocks >= 1);
  return s;
}

/* The merge of parts 1 and 2 (two_parts) into map 9 attempt 1, dropping
 * them; maps and attempts: the caller's arrays of 2, filled here. */
static fsh_merge_task merge_of_two(int64_t *maps, int32_t *attempts) {
  maps[0] = 1, maps[1] = 2;
  attempts[0] = attempts[1] = 0;
  return (fsh_merge_task){.shuffle_id = SHUFFLE, .map_id = 9, .attempt = 1, .drop_parts = true,
                          .n_parts = 2, .part_maps = maps, .part_attempts = attempts};
}

/* A corrupt block in one part (its spill file damaged): the merge fails
 * naming it, nothing new is held, the parts stay. */
static void corrupt_part(int64_t whole_max) {
  fsh_merge_test_hooks h = {.whole_max = whole_max};
  fsh_merge_set_test_hooks(&h);
  char *dir = stu_mkdtemp("mergebad");
  fsh_error err = {{0}};
  fsh_map_output a = {0}, b = {0};
  fsh_store_location loc;
  fsh_shuffle_store *s = two_parts(dir, 0, FSH_STORE_AT_FILE, &a, &b, &loc);
  if (loc.kind == FSH_STORE_AT_FILE && loc.part.n_blocks >= 1) {
    char *path = fsh_path_join(dir, loc.name);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    flip_byte(fd, (off_t)(loc.part.blocks[0].offset + loc.part.blocks[0].length - 3));
    close(fd);
    fsh_free(path);
  }
  fsh_store_location_reset(&loc);
  int64_t maps[2];
  int32_t attempts[2];
  fsh_merge_task t = merge_of_two(maps, attempts);
  fsh_map_output m = {0};
  int rc = fsh_shuffle_store_merge(s, &t, &m, &err);
  CHECK_EQ_INT(rc, EIO);
  CHECK_MSG(strstr(err.message, "checksum mismatch") && strstr(err.message, "map 2") &&
                strstr(err.message, "partition 3"), "%s", err.message);
  CHECK(m.rows == NULL);
  CHECK(!fsh_store_has(s, SHUFFLE, 9, 1, NULL));
  CHECK(fsh_store_has(s, SHUFFLE, 1, 0, NULL) && fsh_store_has(s, SHUFFLE, 2, 0, NULL));
  fsh_shuffle_store_stats st;
  fsh_shuffle_store_get_stats(s, &st);
  CHECK_EQ_INT(st.map_outputs, 2);
  CHECK_EQ_INT(stu_count_files(dir), 2); /* no temp file left */
  /* a part that is not held */
  maps[1] = 4;
  rc = fsh_shuffle_store_merge(s, &t, &m, &err);
  CHECK_EQ_INT(rc, ENOENT);
  CHECK_MSG(strstr(err.message, "part 1"), "%s", err.message);
  CHECK(!fsh_store_has(s, SHUFFLE, 9, 1, NULL));
  fsh_map_output_reset(&a);
  fsh_map_output_reset(&b);
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
  fsh_merge_set_test_hooks(NULL);
}
/* A memory image part damaged in memory (a byte of its memfd flipped):
 * the merge does not hash this store's own images again, but a block it
 * copies as stored keeps the checksum it was written with, so reading the
 * merged output reports the damage -- never rows read silently wrong. */
static void corrupt_image_part_caught_by_reader(void) {
  fsh_merge_test_hooks h = {.small_block = -1}; /* copied as stored */
  fsh_merge_set_test_hooks(&h);
  char *dir = stu_mkdtemp("mergeimg");
  fsh_error err = {{0}};
  fsh_map_output a = {0}, b = {0};
  fsh_store_location loc;
  fsh_shuffle_store *s = two_parts(dir, 1 << 30, FSH_STORE_AT_MEMFD, &a, &b, &loc);
  if (loc.kind == FSH_STORE_AT_MEMFD && loc.part.n_blocks >= 1)
    flip_byte(loc.fd, (off_t)(loc.part.blocks[0].offset + loc.part.blocks[0].length / 2));
  fsh_store_location_reset(&loc);
  int64_t maps[2];
  int32_t attempts[2];
  fsh_merge_task t = merge_of_two(maps, attempts);
  fsh_map_output m = {0};
  CHECK_OK(fsh_shuffle_store_merge(s, &t, &m, &err));
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_store_open(s, SHUFFLE, 9, 1, &f, &err));
  fsh_map_file_partition part = {0};
  if (f) CHECK_OK(fsh_map_file_get_partition(f, 3, &part, &err));
  int bad = 0;
  for (int64_t k = 0; k < part.n_blocks; k++) {
    fsh_buffer *blk = NULL;
    int rc = fsh_map_file_read_block(f, &part, k, &blk, &err);
    fsh_buffer_unref(blk);
    if (rc == 0) continue;
    bad++;
    CHECK_EQ_INT(rc, EIO);
    CHECK_MSG(strstr(err.message, "checksum mismatch") && strstr(err.message, "partition 3"),
              "%s", err.message);
  }
  CHECK_EQ_INT(bad, 1); /* the damaged block (the first of map 2's) and no other */
  fsh_map_file_partition_reset(&part);
  fsh_map_file_close(f);
  fsh_map_output_reset(&m);
  fsh_map_output_reset(&a);
  fsh_map_output_reset(&b);
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
  fsh_merge_set_test_hooks(NULL);
}

static void merge_detects_corrupt_part(void) { corrupt_part(0); }
/* the same, the part read block by block */
static void merge_detects_corrupt_part_by_block(void) { corrupt_part(1); }

/* The map side checksums its blocks with libxxhash's dispatched XXH3
 * (AVX2 / AVX-512, map_file.c); the merge (get_block) verifies them with
 * the inlined baseline (SSE2) XXH3. The two must agree at every length
 * (each of XXH3's size classes: 0-16, 17-128, 129-240, long with a partial
 * stripe and several stripes and blocks) and alignment, or a merge of good
 * parts fails with a checksum mismatch (the corrupt-part cases above say
 * that a real mismatch is caught). */
static void verify_hash_is_xxh3(void) {
#if defined(__x86_64__)
  enum { N = (1 << 20) + 64 };
  uint8_t *buf = fsh_malloc(N);
  CHECK(buf != NULL);
  if (!buf) return;
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (uint8_t)x;
  }
  int bad = 0;
  for (size_t len = 0; len <= 4200; len++)
    for (size_t off = 0; off < 3; off++)
      bad += XXH3_64bits_dispatch(buf + off * 7, len) != XXH3_64bits(buf + off * 7, len);
  const size_t big[] = {65536, 65537, 262143, 1 << 20};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
    bad += XXH3_64bits_dispatch(buf + 5, big[i]) != XXH3_64bits(buf + 5, big[i]);
  CHECK_EQ_INT(bad, 0);
  fsh_free(buf);
#endif
}

/* fsh_map_file_get_partitions (the whole index at once) gives what
 * fsh_map_file_get_partition gives partition by partition; a damaged index
 * entry is refused. */
static void whole_index_read(void) {
  char *dir = stu_mkdtemp("mergeix");
  fsh_shuffle_store *s = new_store(dir, 0); /* spilled: a file to damage */
  fsh_error err = {{0}};
  fsh_map_output a = {0};
  write_part(s, 1, 0, k_rows[0], FSH_COMPRESSION_NONE, &a);
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_store_open(s, SHUFFLE, 1, 0, &f, &err));
  fsh_map_file_partition all[NP];
  fsh_map_file_block *blocks = NULL;
  CHECK_OK(fsh_map_file_get_partitions(f, all, &blocks, &err));
  for (int32_t p = 0; f && blocks && p < NP; p++) {
    fsh_map_file_partition one = {0};
    CHECK_OK(fsh_map_file_get_partition(f, p, &one, &err));
    CHECK(one.rows == all[p].rows && one.bytes == all[p].bytes &&
          one.checksum == all[p].checksum && one.n_blocks == all[p].n_blocks);
    for (int64_t k = 0; k < one.n_blocks && k < all[p].n_blocks; k++)
      CHECK(memcmp(&one.blocks[k], &all[p].blocks[k], sizeof one.blocks[k]) == 0);
    CHECK_EQ_INT(one.rows, a.rows[p]);
    fsh_map_file_partition_reset(&one);
  }
  fsh_free(blocks);
  blocks = NULL;
  /* damage partition 3's entry (its rows) in the spill file */
  fsh_store_location loc = {0};
  CHECK_OK(fsh_store_locate(s, SHUFFLE, 1, 0, 3, &loc, &err));
  if (f && loc.kind == FSH_STORE_AT_FILE) {
    const fsh_map_file_info *fi = fsh_map_file_get_info(f);
    char *path = fsh_path_join(dir, loc.name);
    int fd = open(path, O_RDWR);
    uint8_t x = 0;
    off_t at = (off_t)(fi->data_end + 8 + FSH_MAP_FILE_HEADER_BYTES + FSH_MAP_FILE_ENTRY_BYTES * 3);
    CHECK(fd >= 0 && pread(fd, &x, 1, at) == 1);
    x ^= 1;
    CHECK(pwrite(fd, &x, 1, at) == 1);
    close(fd);
    fsh_free(path);
  }
  CHECK(loc.kind == FSH_STORE_AT_FILE);
  fsh_store_location_reset(&loc);
  fsh_map_file_close(f);
  f = NULL;
  CHECK_OK(fsh_store_open(s, SHUFFLE, 1, 0, &f, &err));
  int rc = f ? fsh_map_file_get_partitions(f, all, &blocks, &err) : EINVAL;
  CHECK_EQ_INT(rc, EINVAL);
  CHECK_MSG(strstr(err.message, "partition 3"), "%s", err.message);
  CHECK(blocks == NULL);
  fsh_map_file_close(f);
  fsh_map_output_reset(&a);
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
}

/* The body round-trips; malformed ones are refused naming what is wrong. */
static void merge_body(void) {
  fsh_error err = {{0}};
  int64_t maps[3] = {4, 9, 2};
  int32_t attempts[3] = {0, 3, 1};
  fsh_merge_task t = {.shuffle_id = 12, .map_id = 2, .attempt = 7, .drop_parts = true,
                      .n_parts = 3, .part_maps = maps, .part_attempts = attempts};
  fsh_buffer *b = NULL;
  CHECK_OK(fsh_merge_task_encode(&t, &b, &err));
  fsh_merge_task d = {0};
  CHECK_OK(fsh_merge_task_decode(b->data, b->size, &d, &err));
  CHECK(d.shuffle_id == 12 && d.map_id == 2 && d.attempt == 7 && d.drop_parts && d.n_parts == 3);
  for (int i = 0; d.part_maps && i < 3; i++)
    CHECK(d.part_maps[i] == maps[i] && d.part_attempts[i] == attempts[i]);
  fsh_merge_task_reset(&d);
  CHECK_EQ_INT(fsh_merge_task_decode(b->data, b->size - 1, &d, &err), EINVAL);
  b->data[32] = 0; /* no parts */
  CHECK_EQ_INT(fsh_merge_task_decode(b->data, b->size, &d, &err), EINVAL);
  fsh_buffer_unref(b);
  attempts[2] = 7; /* a part is the merged output itself */
  CHECK_OK(fsh_merge_task_encode(&t, &b, &err));
  CHECK_EQ_INT(fsh_merge_task_decode(b->data, b->size, &d, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "part 2"), "%s", err.message);
  fsh_buffer_unref(b);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"merge_adds_up_memory", merge_adds_up_memory},
      {"merge_adds_up_spilled", merge_adds_up_spilled},
      {"merge_of_one_part", merge_of_one_part},
      {"merge_copies_memory", merge_copies_memory},
      {"merge_copies_spilled", merge_copies_spilled},
      {"merge_copies_one_part", merge_copies_one_part},
      {"merge_by_block_copies", merge_by_block_copies},
      {"merge_of_empty_parts", merge_of_empty_parts},
      {"merge_detects_corrupt_part", merge_detects_corrupt_part},
      {"merge_detects_corrupt_part_by_block", merge_detects_corrupt_part_by_block},
      {"corrupt_image_part_caught_by_reader", corrupt_image_part_caught_by_reader},
      {"verify_hash_is_xxh3", verify_hash_is_xxh3},
      {"merge_by_block_memory", merge_by_block_memory},
      {"merge_by_block_spilled", merge_by_block_spilled},
      {"release_during_merge_memory", release_during_merge_memory},
      {"release_during_merge_spilled", release_during_merge_spilled},
      {"whole_index_read", whole_index_read},
      {"merge_body", merge_body},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
