/* test_merge_splice.c -- the pre-shuffle merge re-encoding small blocks by
 * splicing their record batch messages (fsh_ipc_splicer) instead of
 * decoding, concatenating and encoding them. The reference is the same
 * merge with the splice turned off (test hook no_splice: the decode path):
 * the merged output must be byte for byte the same (blocks, bytes,
 * checksums) for every type the splicer takes (the every-type sample
 * batch without unions and dictionaries) and for the synthetic rows, in
 * memory and spilled; and its rows must equal the parts' slices
 * concatenated in part order (built independently of IPC). Also: the cap
 * on a spliced block (several blocks of one message each per partition),
 * and the fallbacks -- a schema with unions and a compressed shuffle are
 * decoded (nothing spliced), still the right rows. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kernels/kernel_helpers.h"
#include "shuffle/shuffle_internal.h"
#include "shuffle/worker_internal.h"
#include "shuffle_testutil.h"

#define NP 6
#define SHUFFLE 78
#define MAX_PARTS 6

static bool has_dict(const fsh_field *f) {
  if (f->dictionary) return true;
  for (int64_t i = 0; i < f->n_children; i++)
    if (has_dict(&f->children[i])) return true;
  return false;
}

static bool has_union(const fsh_field *f) {
  if (f->type == FSH_TYPE_SPARSE_UNION || f->type == FSH_TYPE_DENSE_UNION) return true;
  for (int64_t i = 0; i < f->n_children; i++)
    if (has_union(&f->children[i])) return true;
  return false;
}

/* b's columns without dictionaries (and without unions unless keep_unions). */
static fsh_batch *columns_of(fsh_batch *b, bool keep_unions) {
  int64_t idx[64], n = 0;
  for (int64_t c = 0; c < b->n_columns; c++) {
    const fsh_field *f = &b->schema->fields[c];
    if (!has_dict(f) && (keep_unions || !has_union(f))) idx[n++] = c;
  }
  fsh_schema *s = SBH_OK(fsh_schema_new(n));
  for (int64_t i = 0; i < n; i++) SBH_RC(fsh_field_copy(&s->fields[i], &b->schema->fields[idx[i]]));
  fsh_batch *r = SBH_OK(fsh_batch_new(s, b->length));
  for (int64_t i = 0; i < n; i++) r->columns[i] = fsh_array_ref(b->columns[idx[i]]);
  fsh_schema_unref(s);
  return r;
}

/* Part i's partition p: up to 5 slices of src (0-29 rows each, some
 * empty), the same for every run. */
typedef struct slices {
  int n;
  int64_t off[5], len[5];
} slices;

static slices slices_of(const fsh_batch *src, int i, int32_t p) {
  uint64_t rng = 1000u * (uint64_t)i + (uint64_t)p + 7;
  slices s = {.n = (int)(kh_rand(&rng) % 6)};
  if (p == 1) s.n = 0; /* an empty partition */
  for (int k = 0; k < s.n; k++) {
    s.len[k] = (int64_t)(kh_rand(&rng) % 30);
    if (s.len[k] > src->length) s.len[k] = src->length;
    s.off[k] = (int64_t)(kh_rand(&rng) % (uint64_t)(src->length - s.len[k] + 1));
  }
  return s;
}

/* What one merge made: per partition its blocks' bytes, their number,
 * the most messages in one block, its checksum, and its rows decoded and
 * concatenated. */
typedef struct merged {
  uint8_t *cat[NP];
  int64_t len[NP], blocks[NP], max_msgs[NP], rows[NP];
  uint64_t checksum[NP];
  fsh_batch *got[NP];
} merged;

static void merged_reset(merged *m) {
  for (int32_t p = 0; p < NP; p++) {
    free(m->cat[p]);
    fsh_batch_unref(m->got[p]);
  }
  memset(m, 0, sizeof *m);
}

static int64_t messages_in(const fsh_buffer *b) {
  fsh_error err = {{0}};
  int64_t n = 0;
  for (int64_t at = 0; at + 8 <= b->size; n++) {
    uint32_t mlen;
    memcpy(&mlen, b->data + at + 4, 4);
    fsh_buffer *md = SBH_OK(fsh_buffer_slice((fsh_buffer *)b, at + 8, mlen));
    fsh_ipc_message_type type;
    int64_t body = 0;
    CHECK_OK(fsh_ipc_peek_message(md, &type, &body, &err));
    fsh_buffer_unref(md);
    at += 8 + mlen + body;
  }
  return n;
}

static fsh_batch *concat_all(fsh_batch **bs, int64_t n) {
  fsh_error err = {{0}};
  fsh_batch *all = NULL;
  if (n == 0) return NULL;
  CHECK_OK(fsh_concat(bs, n, &all, &err));
  return all;
}

/* Writes n_parts map outputs of src's slices (each slice its own block),
 * merges them with hooks h into one, reads the merged output into *out.
 * limit: the store's memory limit (0: everything spilled). */
static void run_merge(fsh_batch *src, int n_parts, fsh_compression comp, int64_t limit,
                      const fsh_merge_test_hooks *h, merged *out) {
  fsh_error err = {{0}};
  memset(out, 0, sizeof *out);
  char *dir = stu_mkdtemp("splice");
  const char *d = dir;
  fsh_shuffle_store_options o = {.spill_dirs = &d, .n_spill_dirs = 1, .memory_limit = limit,
                                 .name = "splice-test"};
  fsh_shuffle_store *s = NULL;
  CHECK_OK(fsh_shuffle_store_new(&o, &s, &err));
  if (!s) return;
  int64_t maps[MAX_PARTS];
  int32_t attempts[MAX_PARTS];
  fsh_shuffle_spec spec = {.shuffle_id = SHUFFLE, .n_partitions = NP, .schema = src->schema,
                           .compression = comp, .target_block_bytes = 1};
  for (int i = 0; i < n_parts; i++) {
    maps[i] = 10 + i;
    attempts[i] = 0;
    fsh_store_writer *w = NULL;
    CHECK_OK(fsh_store_writer_open(s, &spec, maps[i], 0, &w, &err));
    for (int32_t p = 0; w && p < NP; p++) {
      slices sl = slices_of(src, i, p);
      for (int k = 0; k < sl.n; k++) {
        fsh_batch *b = SBH_OK(fsh_batch_slice(src, sl.off[k], sl.len[k]));
        CHECK_OK(fsh_store_writer_write(w, p, b, &err));
        fsh_batch_unref(b);
      }
    }
    fsh_map_output mo = {0};
    if (w) CHECK_OK(fsh_store_writer_close(w, &mo, &err));
    fsh_map_output_reset(&mo);
  }
  fsh_merge_set_test_hooks(h);
  fsh_merge_task t = {.shuffle_id = SHUFFLE, .map_id = 0, .attempt = 1, .drop_parts = true,
                      .n_parts = n_parts, .part_maps = maps, .part_attempts = attempts};
  fsh_map_output m = {0};
  CHECK_OK(fsh_shuffle_store_merge(s, &t, &m, &err));
  fsh_merge_set_test_hooks(NULL);
  fsh_map_file *f = NULL;
  CHECK_OK(fsh_store_open(s, SHUFFLE, 0, 1, &f, &err));
  for (int32_t p = 0; f && m.rows && p < NP; p++) {
    out->checksum[p] = m.checksums[p];
    out->rows[p] = m.rows[p];
    fsh_map_file_partition part = {0};
    CHECK_OK(fsh_map_file_get_partition(f, p, &part, &err));
    for (int64_t k = 0; k < part.n_blocks; k++) {
      fsh_buffer *b = NULL;
      CHECK_OK(fsh_map_file_read_block(f, &part, k, &b, &err));
      if (!b) continue;
      out->cat[p] = STU_OK(realloc(out->cat[p], (size_t)(out->len[p] + b->size + 1)));
      memcpy(out->cat[p] + out->len[p], b->data, (size_t)b->size);
      out->len[p] += b->size;
      out->blocks[p]++;
      int64_t msgs = messages_in(b);
      if (msgs > out->max_msgs[p]) out->max_msgs[p] = msgs;
      fsh_buffer_unref(b);
    }
    fsh_map_file_partition_reset(&part);
    fsh_map_file_cursor *c = NULL;
    fsh_batch *bs[4096];
    int64_t nb = 0;
    CHECK_OK(fsh_map_file_cursor_open(f, p, &c, &err));
    while (c && nb < 4096) {
      fsh_batch *b = NULL;
      CHECK_OK(fsh_map_file_cursor_next(c, &b, &err));
      if (!b) break;
      CHECK_OK(fsh_batch_validate(b, true, &err));
      bs[nb++] = b;
    }
    fsh_map_file_cursor_free(c);
    out->got[p] = concat_all(bs, nb);
    for (int64_t k = 0; k < nb; k++) fsh_batch_unref(bs[k]);
  }
  fsh_map_file_close(f);
  fsh_map_output_reset(&m);
  fsh_shuffle_store_free(s);
  stu_rmdir(dir);
}

/* The merged rows of partition p equal the parts' slices of src in part
 * order, concatenated without any IPC. */
static void check_rows(fsh_batch *src, int n_parts, const merged *m, const char *what) {
  fsh_error err = {{0}};
  for (int32_t p = 0; p < NP; p++) {
    fsh_batch *bs[MAX_PARTS * 5];
    int64_t nb = 0, rows = 0;
    for (int i = 0; i < n_parts; i++) {
      slices sl = slices_of(src, i, p);
      for (int k = 0; k < sl.n; k++) {
        bs[nb++] = SBH_OK(fsh_batch_slice(src, sl.off[k], sl.len[k]));
        rows += sl.len[k];
      }
    }
    CHECK_EQ_INT(m->rows[p], rows);
    fsh_batch *want = concat_all(bs, nb);
    if (want && want->length > 0) {
      CHECK_MSG(m->got[p] != NULL, "%s: partition %d: no rows", what, p);
      if (m->got[p])
        CHECK_MSG(fsh_batch_equals(m->got[p], want, &err), "%s: partition %d: %s", what, p,
                  err.message);
    } else {
      CHECK_MSG(!m->got[p] || m->got[p]->length == 0, "%s: partition %d: rows", what, p);
    }
    fsh_batch_unref(want);
    for (int64_t k = 0; k < nb; k++) fsh_batch_unref(bs[k]);
  }
}

/* The merged output spliced (b) is byte for byte the decode path's (a). */
static void check_same(const merged *a, const merged *b, const char *what) {
  for (int32_t p = 0; p < NP; p++) {
    CHECK_EQ_INT(a->blocks[p], b->blocks[p]);
    CHECK_EQ_INT(a->rows[p], b->rows[p]);
    CHECK_MSG(a->len[p] == b->len[p] &&
                  (a->len[p] == 0 || memcmp(a->cat[p], b->cat[p], (size_t)a->len[p]) == 0),
              "%s: partition %d: the spliced blocks (%lld bytes) are not the decoded ones "
              "(%lld bytes)", what, p, (long long)b->len[p], (long long)a->len[p]);
    CHECK(a->checksum[p] == b->checksum[p]);
    CHECK(b->checksum[p] == XXH3_64bits(b->cat[p], (size_t)b->len[p]));
  }
}

/* Merges src's slices twice, decoding and splicing, and compares. */
static void splice_equals_decode(fsh_batch *src, int n_parts, int64_t limit, const char *what) {
  int64_t spliced_a = 0, spliced_b = 0;
  fsh_merge_test_hooks ha = {.small_block = 1 << 20, .no_splice = true, .spliced = &spliced_a};
  fsh_merge_test_hooks hb = {.small_block = 1 << 20, .spliced = &spliced_b};
  merged a, b;
  run_merge(src, n_parts, FSH_COMPRESSION_NONE, limit, &ha, &a);
  run_merge(src, n_parts, FSH_COMPRESSION_NONE, limit, &hb, &b);
  CHECK_EQ_INT(spliced_a, 0);
  CHECK_MSG(spliced_b >= 3 && spliced_b <= NP, "%s: %lld blocks spliced", what,
            (long long)spliced_b);
  for (int32_t p = 0; p < NP; p++) {
    CHECK(b.blocks[p] <= 1);
    CHECK(b.max_msgs[p] <= 1);
  }
  check_same(&a, &b, what);
  check_rows(src, n_parts, &b, what);
  merged_reset(&a);
  merged_reset(&b);
}

static void every_type_memory(void) {
  fsh_batch *big = kh_big_batch(8, 3);
  fsh_batch *src = columns_of(big, false);
  CHECK(src->n_columns >= 30);
  splice_equals_decode(src, MAX_PARTS, (int64_t)1 << 30, "every type, memory");
  fsh_batch_unref(src);
  fsh_batch_unref(big);
}

static void every_type_spilled(void) {
  fsh_batch *big = kh_big_batch(8, 3);
  fsh_batch *src = columns_of(big, false);
  splice_equals_decode(src, 4, 0, "every type, spilled");
  fsh_batch_unref(src);
  fsh_batch_unref(big);
}

static void synthetic_rows(void) {
  fsh_batch *src = stu_synthetic(0, 300);
  splice_equals_decode(src, MAX_PARTS, (int64_t)1 << 30, "synthetic");
  fsh_batch_unref(src);
}

/* A 1 KiB cap: a partition becomes several spliced blocks, each one
 * message, the same rows in order. */
static void spliced_blocks_capped(void) {
  fsh_batch *src = stu_synthetic(0, 300);
  int64_t spliced = 0;
  fsh_merge_test_hooks h = {.small_block = 1 << 20, .splice_target = 1024, .spliced = &spliced};
  merged m;
  run_merge(src, MAX_PARTS, FSH_COMPRESSION_NONE, (int64_t)1 << 30, &h, &m);
  int64_t most = 0, blocks = 0;
  for (int32_t p = 0; p < NP; p++) {
    if (m.blocks[p] > most) most = m.blocks[p];
    blocks += m.blocks[p];
    CHECK(m.max_msgs[p] <= 1);
  }
  CHECK_MSG(most >= 3, "at most %lld blocks in a partition", (long long)most);
  CHECK_EQ_INT(spliced, blocks);
  check_rows(src, MAX_PARTS, &m, "capped");
  merged_reset(&m);
  fsh_batch_unref(src);
}

/* Unions (not spliced) and a compressed shuffle: decoded, nothing
 * spliced, the same rows. */
static void fallbacks_decode(void) {
  fsh_batch *big = kh_big_batch(8, 3);
  fsh_batch *unions = columns_of(big, true);
  fsh_batch *plain = columns_of(big, false);
  CHECK_EQ_INT(unions->n_columns, plain->n_columns + 2);
  int64_t spliced = 0;
  fsh_merge_test_hooks h = {.small_block = 1 << 20, .spliced = &spliced};
  merged m;
  run_merge(unions, 4, FSH_COMPRESSION_NONE, (int64_t)1 << 30, &h, &m);
  CHECK_EQ_INT(spliced, 0);
  for (int32_t p = 0; p < NP; p++) CHECK(m.blocks[p] <= 1);
  check_rows(unions, 4, &m, "unions");
  merged_reset(&m);
  run_merge(plain, 4, FSH_COMPRESSION_ZSTD, (int64_t)1 << 30, &h, &m);
  CHECK_EQ_INT(spliced, 0);
  check_rows(plain, 4, &m, "zstd");
  merged_reset(&m);
  fsh_batch_unref(plain);
  fsh_batch_unref(unions);
  fsh_batch_unref(big);
}

FSH_TEST_MAIN(TEST(every_type_memory), TEST(every_type_spilled), TEST(synthetic_rows),
              TEST(spliced_blocks_capped), TEST(fallbacks_decode))
