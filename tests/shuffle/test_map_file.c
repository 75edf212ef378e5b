/* test_map_file.c -- the map-output file format on its own (memory
 * outputs and inputs): block coalescing, self-contained blocks, raw block
 * ranges and their checksums, readability by a plain IPC stream reader,
 * write failures (disk full), and that no single flipped byte anywhere in
 * a file ever reads back as wrong data, also when opened with the head
 * of an earlier open. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <flightshuffle/kernels.h>

#include "ipc/sample_batches.h"
#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"

/* Writes plan map 0 into memory through the map-file writer. */
static fsh_buffer *write_file(const stu_plan *p, const fsh_map_file_options *o,
                              fsh_map_output *meta) {
  fsh_error err;
  fsh_buffer *bytes = NULL;
  fsh_output *out = NULL;
  fsh_map_file_writer *w = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_map_file_writer_open(out, &p->spec, p->maps[0].map_id, p->maps[0].attempt, o, &w,
                                    &err));
  if (!w) return NULL;
  for (int64_t i = 0; i < p->maps[0].n_ops; i++)
    CHECK_OK(fsh_map_file_writer_write(w, p->maps[0].ops[i].partition, p->maps[0].ops[i].batch,
                                       &err));
  CHECK_OK(fsh_map_file_writer_close(w, meta, &err));
  return bytes;
}

static fsh_map_file *open_buffer(fsh_buffer *bytes, int *rc, fsh_error *err) {
  fsh_input *in = NULL;
  fsh_map_file *f = NULL;
  *rc = fsh_input_from_buffer(bytes, &in, err);
  if (*rc == 0) *rc = fsh_map_file_open(in, &f, err);
  return f;
}

/* Reads partition q fully; returns the error code. */
static int read_partition(fsh_map_file *f, int32_t q, fsh_batch ***got, int64_t *n,
                          fsh_error *err) {
  fsh_map_file_cursor *c = NULL;
  *got = NULL;
  *n = 0;
  int rc = fsh_map_file_cursor_open(f, q, &c, err);
  int64_t cap = 0;
  while (rc == 0) {
    fsh_batch *b = NULL;
    rc = fsh_map_file_cursor_next(c, &b, err);
    if (rc != 0 || !b) break;
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      *got = STU_OK(realloc(*got, sizeof **got * (size_t)cap));
    }
    (*got)[(*n)++] = b;
  }
  fsh_map_file_cursor_free(c);
  return rc;
}

static void plan_synthetic(stu_plan *p, int32_t n_parts, int64_t rows, int64_t chunk) {
  fsh_batch *x = stu_synthetic(1, rows);
  stu_plan_init(p, 3, n_parts, x->schema, 1);
  p->maps[0].map_id = 9;
  p->maps[0].attempt = 2;
  stu_add_split(&p->maps[0], x, n_parts, chunk, false, 1);
  fsh_batch_unref(x);
}

/* Wanted batches of partition q of map 0. */
static int64_t wanted(const stu_plan *p, int32_t q, fsh_batch **out) {
  int64_t n = 0;
  for (int64_t i = 0; i < p->maps[0].n_ops; i++)
    if (p->maps[0].ops[i].partition == q) out[n++] = p->maps[0].ops[i].batch;
  return n;
}

/* Small batches coalesce into blocks of about the target size; blocks are
 * self-contained, their bytes hash to the recorded checksums, and the
 * index matches the map output record. */
static void test_blocks_and_ranges(void) {
  fsh_error err;
  stu_plan p;
  plan_synthetic(&p, 4, 40000, 50);
  fsh_map_file_options o = {.target_block_bytes = 32 << 10};
  fsh_map_output meta = {0};
  fsh_buffer *bytes = write_file(&p, &o, &meta);
  int rc;
  fsh_map_file *f = open_buffer(bytes, &rc, &err);
  CHECK_OK(rc);
  if (!f) return;
  const fsh_map_file_info *info = fsh_map_file_get_info(f);
  CHECK(info->shuffle_id == 3 && info->map_id == 9 && info->attempt == 2 &&
        info->n_partitions == 4 && info->file_size == bytes->size);
  fsh_batch **want = STU_OK(calloc((size_t)p.maps[0].n_ops, sizeof *want));
  for (int32_t q = 0; q < 4; q++) {
    fsh_map_file_partition part;
    CHECK_OK(fsh_map_file_get_partition(f, q, &part, &err));
    CHECK_EQ_INT(part.rows, meta.rows[q]);
    CHECK_EQ_INT(part.bytes, meta.bytes[q]);
    CHECK(part.checksum == meta.checksums[q]);
    CHECK_MSG(part.n_blocks >= 3, "partition %d: %lld blocks", q, (long long)part.n_blocks);
    /* the raw ranges: their bytes hash to the checksum, and every block
     * but the last reached the target */
    XXH3_state_t *s = XXH3_createState();
    XXH3_64bits_reset(s);
    for (int64_t k = 0; k < part.n_blocks; k++) {
      const fsh_map_file_block *bl = &part.blocks[k];
      XXH3_64bits_update(s, bytes->data + bl->offset, (size_t)bl->length);
      if (k + 1 < part.n_blocks) CHECK(bl->length >= (32 << 10) / 2);
      CHECK(XXH3_64bits(bytes->data + bl->offset, (size_t)bl->length) == bl->checksum);
    }
    CHECK(XXH3_64bits_digest(s) == meta.checksums[q]);
    XXH3_freeState(s);
    /* each block decodes on its own: a fresh decoder, the schema, then
     * the block's messages only (blocks later in the partition first) */
    int64_t n_want = wanted(&p, q, want), seen = 0;
    for (int64_t k = part.n_blocks - 1; k >= 0; k--) {
      fsh_ipc_decoder *d = NULL;
      CHECK_OK(fsh_ipc_decoder_new(&d, &err));
      fsh_buffer *sm = fsh_buffer_slice(bytes, 8, info->schema_length - 8);
      fsh_batch *none = NULL;
      CHECK_OK(fsh_ipc_decode_message(d, sm, NULL, &none, &err));
      fsh_buffer_unref(sm);
      int64_t pos = part.blocks[k].offset, end = pos + part.blocks[k].length, rows = 0;
      while (pos < end) {
        int64_t len = (int64_t)(bytes->data[pos + 4] | bytes->data[pos + 5] << 8 |
                                bytes->data[pos + 6] << 16 | (int64_t)bytes->data[pos + 7] << 24);
        fsh_buffer *md = fsh_buffer_slice(bytes, pos + 8, len);
        fsh_ipc_message_type t;
        int64_t body_len = 0;
        CHECK_OK(fsh_ipc_peek_message(md, &t, &body_len, &err));
        fsh_buffer *body = fsh_buffer_slice(bytes, pos + 8 + len, body_len);
        fsh_batch *bt = NULL;
        CHECK_OK(fsh_ipc_decode_message(d, md, body, &bt, &err));
        if (bt) rows += bt->length, seen++;
        fsh_batch_unref(bt);
        fsh_buffer_unref(md);
        fsh_buffer_unref(body);
        pos += 8 + len + body_len;
      }
      CHECK_EQ_INT(rows, part.blocks[k].rows);
      fsh_ipc_decoder_free(d);
    }
    CHECK_EQ_INT(seen, part.n_blocks); /* a block is one (coalesced) record batch */
    fsh_batch **got;
    int64_t n_got;
    CHECK_OK(read_partition(f, q, &got, &n_got, &err));
    char diff[1200];
    CHECK_MSG(stu_rows_equal(got, n_got, want, n_want, diff, sizeof diff), "%s", diff);
    stu_free_batches(got, n_got);
    fsh_map_file_partition_reset(&part);
  }
  CHECK_EQ_INT(fsh_map_file_get_partition(f, 4, &(fsh_map_file_partition){0}, &err), EINVAL);
  free(want);
  fsh_map_file_close(f);
  fsh_buffer_unref(bytes);
  fsh_map_output_reset(&meta);
  stu_plan_free(&p);
}

/* An output counting its writev calls, forwarding to a memory output. */
typedef struct counting {
  fsh_output *inner;
  int64_t calls;
} counting;

static int counting_writev(fsh_output *o, const struct iovec *iov, int n, fsh_error *err) {
  counting *c = o->ctx;
  c->calls++;
  int rc = c->inner->writev(c->inner, iov, n, err);
  if (rc == 0) o->position = c->inner->position;
  return rc;
}

static int counting_close(fsh_output *o, bool abort, fsh_error *err) {
  counting *c = o->ctx;
  int rc = c->inner->close(c->inner, abort, err);
  free(o);
  return rc;
}

/* Many partitions of a few rows each (blocks of a few hundred bytes, the
 * 1000 x 1000 shape): the blocks reach the output in a few large writes,
 * not one write per block, and every partition reads back exactly (the
 * staged blocks land at the offsets the index records). */
static void test_small_blocks_staged(void) {
  enum { PARTS = 1000 };
  fsh_error err = {{0}};
  stu_plan p;
  fsh_batch *x = stu_synthetic(1, 12 * PARTS);
  stu_plan_init(&p, 3, PARTS, x->schema, 1);
  stu_add_split(&p.maps[0], x, PARTS, 12, true, 0); /* 12 rows to each partition */
  fsh_batch_unref(x);
  fsh_buffer *bytes = NULL;
  fsh_output *mem = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &mem, &err));
  counting c = {.inner = mem};
  fsh_output *o = STU_OK(calloc(1, sizeof *o));
  *o = (fsh_output){.writev = counting_writev, .close = counting_close, .ctx = &c,
                    .name = "counted"};
  fsh_map_file_writer *w = NULL;
  fsh_map_output meta = {0};
  CHECK_OK(fsh_map_file_writer_open(o, &p.spec, p.maps[0].map_id, p.maps[0].attempt, NULL, &w,
                                    &err));
  int64_t schema_calls = c.calls;
  for (int64_t i = 0; w && i < p.maps[0].n_ops; i++)
    CHECK_OK(fsh_map_file_writer_write(w, p.maps[0].ops[i].partition, p.maps[0].ops[i].batch,
                                       &err));
  if (w) CHECK_OK(fsh_map_file_writer_close(w, &meta, &err));
  int rc;
  fsh_map_file *f = open_buffer(bytes, &rc, &err);
  CHECK_OK(rc);
  if (!f) return;
  const fsh_map_file_info *info = fsh_map_file_get_info(f);
  /* every partition got rows, so there are PARTS blocks; at 256 KiB a
   * write they take a handful of calls */
  CHECK_EQ_INT(info->n_blocks, PARTS);
  int64_t block_calls = c.calls - schema_calls;
  CHECK_MSG(block_calls <= 2 + bytes->size / (128 << 10),
            "%lld writes for %lld blocks in %lld bytes", (long long)block_calls,
            (long long)info->n_blocks, (long long)bytes->size);
  fsh_batch **want = STU_OK(calloc((size_t)p.maps[0].n_ops, sizeof *want));
  for (int32_t q = 0; q < PARTS; q++) {
    fsh_batch **got;
    int64_t n_got;
    CHECK_OK(read_partition(f, q, &got, &n_got, &err));
    int64_t n_want = wanted(&p, q, want);
    char diff[1200];
    CHECK_MSG(stu_rows_equal(got, n_got, want, n_want, diff, sizeof diff), "partition %d: %s", q,
              diff);
    stu_free_batches(got, n_got);
  }
  free(want);
  fsh_map_file_close(f);
  fsh_buffer_unref(bytes);
  fsh_map_output_reset(&meta);
  stu_plan_free(&p);
}

/* Past max_buffered_bytes every partition is written out, before any
 * reaches its target. */
static void test_buffer_budget(void) {
  fsh_error err;
  stu_plan p;
  plan_synthetic(&p, 8, 20000, 40);
  fsh_map_file_options o = {.target_block_bytes = 1 << 30, .max_buffered_bytes = 64 << 10};
  fsh_map_output meta = {0};
  fsh_buffer *bytes = write_file(&p, &o, &meta);
  int rc;
  fsh_map_file *f = open_buffer(bytes, &rc, &err);
  CHECK_OK(rc);
  if (f) {
    CHECK_MSG(fsh_map_file_get_info(f)->n_blocks > 16, "%lld blocks",
              (long long)fsh_map_file_get_info(f)->n_blocks);
    fsh_map_file_close(f);
  }
  fsh_buffer_unref(bytes);
  fsh_map_output_reset(&meta);
  stu_plan_free(&p);
}

/* The file is an Arrow IPC stream: a plain stream reader returns every
 * batch (all partitions, block order) and stops before the index. */
static void test_plain_stream_reader(void) {
  fsh_error err;
  fsh_batch *all = fsh_sample_all_types();
  stu_plan p;
  stu_plan_init(&p, 5, 3, all->schema, 1);
  stu_add_split(&p.maps[0], all, 3, 1, true, 0);
  stu_add(&p.maps[0], 2, all);
  fsh_map_file_options o = {.compression = FSH_COMPRESSION_ZSTD, .target_block_bytes = 1};
  fsh_map_output meta = {0};
  fsh_buffer *bytes = write_file(&p, &o, &meta);
  fsh_batch_stream s = {0};
  CHECK_OK(fsh_ipc_open_buffer(bytes, "map file", &s, &err));
  if (s.release) {
    fsh_batch **got;
    int64_t n, rows = 0;
    CHECK_OK(stu_drain(&s, &got, &n, &err));
    for (int64_t i = 0; i < n; i++) rows += got[i]->length;
    CHECK_EQ_INT(rows, 14);
    CHECK_EQ_INT(n, 8);
    stu_free_batches(got, n);
    s.release(&s);
  }
  fsh_buffer_unref(bytes);
  fsh_map_output_reset(&meta);
  stu_plan_free(&p);
  fsh_batch_unref(all);
}

/* An output that fails with ENOSPC once `limit` bytes are written, and
 * records whether it was aborted. */
typedef struct full_disk {
  int64_t limit;
  bool closed, aborted;
} full_disk;

static int full_writev(fsh_output *o, const struct iovec *iov, int n, fsh_error *err) {
  full_disk *d = o->ctx;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
  if (o->position + total > d->limit)
    return fsh_error_set(err, ENOSPC, "writing %s: No space left on device", o->name);
  o->position += total;
  return 0;
}

static int full_close(fsh_output *o, bool abort, fsh_error *err) {
  (void)err;
  full_disk *d = o->ctx;
  d->closed = true;
  d->aborted = abort;
  free(o);
  return 0;
}

static void test_disk_full(void) {
  stu_plan p;
  plan_synthetic(&p, 4, 5000, 100);
  int seen_write_failure = 0, seen_close_failure = 0;
  for (int64_t limit = 0; limit < 4000000; limit += 7919) {
    full_disk d = {.limit = limit};
    fsh_output *o = STU_OK(calloc(1, sizeof *o));
    *o = (fsh_output){.writev = full_writev, .close = full_close, .ctx = &d, .name = "disk"};
    fsh_error err = {{0}};
    fsh_map_file_options opts = {.target_block_bytes = 16 << 10};
    fsh_map_file_writer *w = NULL;
    int rc = fsh_map_file_writer_open(o, &p.spec, 0, 0, &opts, &w, &err);
    for (int64_t i = 0; rc == 0 && i < p.maps[0].n_ops; i++) {
      rc = fsh_map_file_writer_write(w, p.maps[0].ops[i].partition, p.maps[0].ops[i].batch, &err);
      if (rc != 0) {
        seen_write_failure++;
        /* the writer stays failed; close reports it and discards */
        fsh_map_output m = {0};
        CHECK_EQ_INT(fsh_map_file_writer_close(w, &m, &err), ENOSPC);
        CHECK(m.rows == NULL);
      }
    }
    fsh_map_output m = {0};
    if (rc == 0) {
      rc = fsh_map_file_writer_close(w, &m, &err);
      seen_close_failure += rc != 0;
    }
    CHECK(d.closed);
    if (rc != 0) {
      CHECK_MSG(rc == ENOSPC && strstr(err.message, "No space left") &&
                    strstr(err.message, "shuffle 3 map 0"),
                "limit %lld: rc %d: %s", (long long)limit, rc, err.message);
      CHECK(d.aborted);
    } else {
      CHECK(!d.aborted);
      fsh_map_output_reset(&m);
      break;
    }
  }
  CHECK(seen_write_failure > 0);
  CHECK(seen_close_failure > 0);
  stu_plan_free(&p);
}

/* Flipping any single byte of a file never yields wrong data: opening or
 * reading the affected partition fails (EINVAL or EIO), or, for a byte no
 * reader relies on, every partition still reads back exactly. */
static void test_every_byte_flipped(void) {
  fsh_error err;
  fsh_schema *ds = fsh_sample_dict_schema();
  const char *v[] = {"a", "bb", "ccc"};
  fsh_array *dict = sbh_strings(NULL, 3, v);
  const int32_t idx[] = {2, 0, 1, 1, 0};
  fsh_batch *x = fsh_sample_dict_batch(ds, dict, 5, idx);
  stu_plan p;
  stu_plan_init(&p, 6, 3, ds, 1);
  stu_add_split(&p.maps[0], x, 3, 2, true, 0);
  stu_add(&p.maps[0], 0, x);
  fsh_map_file_options o = {.target_block_bytes = 200};
  fsh_map_output meta = {0};
  fsh_buffer *good = write_file(&p, &o, &meta);
  fsh_batch *want[8];
  int undetected = 0, wrong = 0;
  for (int64_t at = 0; good && at < good->size; at++) {
    fsh_buffer *bad = STU_OK(fsh_buffer_copy(good->data, good->size));
    bad->data[at] ^= 0x5A;
    int rc;
    fsh_map_file *f = open_buffer(bad, &rc, &err);
    int failures = rc != 0;
    for (int32_t q = 0; f && q < 3; q++) {
      fsh_batch **got;
      int64_t n;
      rc = read_partition(f, q, &got, &n, &err);
      if (rc != 0) {
        failures++;
        if (rc != EINVAL && rc != EIO) wrong++;
      } else {
        char diff[1200];
        int64_t nw = wanted(&p, q, want);
        if (!stu_rows_equal(got, n, want, nw, diff, sizeof diff)) {
          fprintf(stderr, "byte %lld flipped: partition %d reads wrong data: %s\n", (long long)at,
                  q, diff);
          wrong++;
        }
      }
      stu_free_batches(got, n);
    }
    undetected += failures == 0;
    fsh_map_file_close(f);
    fsh_buffer_unref(bad);
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(undetected, 0); /* every byte is covered by a check */
  fsh_buffer_unref(good);
  fsh_map_output_reset(&meta);
  stu_plan_free(&p);
  fsh_batch_unref(x);
  fsh_array_unref(dict);
  fsh_schema_unref(ds);
}

/* Opens with the head of an earlier open (what a store keeps per map
 * output) read the same data as full opens, and still catch every flipped
 * byte of the blocks and the index entries -- the head covers the
 * trailer, the header and the schema, which it does not read again (data
 * read through it is still never wrong); the head outlives the file and
 * bytes it came from; another size is refused. */
static void open_with_head(bool image) {
  fsh_error err;
  stu_plan p;
  plan_synthetic(&p, 3, 120, 10);
  fsh_map_file_options o = {.target_block_bytes = 1 << 10};
  fsh_map_output meta = {0};
  fsh_buffer *good = write_file(&p, &o, &meta);
  int rc;
  fsh_buffer *first = STU_OK(fsh_buffer_copy(good->data, good->size));
  fsh_map_file *f0 = open_buffer(first, &rc, &err);
  CHECK_OK(rc);
  fsh_buffer_unref(first);
  if (!f0) return;
  fsh_map_file_info info0 = *fsh_map_file_get_info(f0);
  fsh_map_file_head *h = fsh_map_file_head_ref(fsh_map_file_head_of(f0));
  fsh_map_file_close(f0); /* the head lives on without the first bytes */
  fsh_batch **want = STU_OK(calloc((size_t)p.maps[0].n_ops, sizeof *want));
  int undetected = 0, wrong = 0, tried = 0;
  for (int64_t at = -1; at < good->size; at++) {
    fsh_buffer *b = STU_OK(fsh_buffer_copy(good->data, good->size));
    if (at >= 0) b->data[at] ^= 0x5A;
    fsh_input *in = NULL;
    fsh_map_file *f = NULL;
    if (image) {
      CHECK_OK(fsh_map_file_open_image(b, "an image", h, &f, &err));
    } else {
      CHECK_OK(fsh_input_from_buffer(b, &in, &err));
      CHECK_OK(fsh_map_file_open_head(in, h, &f, &err));
    }
    if (at < 0 && f) { /* unchanged bytes: what a full open gives */
      const fsh_map_file_info *i = fsh_map_file_get_info(f);
      CHECK(i->file_size == info0.file_size && i->n_partitions == 3 && i->map_id == 9 &&
            i->attempt == 2 && i->n_blocks == info0.n_blocks && i->data_end == info0.data_end);
      fsh_error diff = {{0}};
      CHECK_MSG(fsh_schema_equals(fsh_map_file_schema(f), p.spec.schema, true, &diff), "%s",
                diff.message);
      fsh_buffer *sm = fsh_map_file_schema_message(f);
      CHECK(sm->size + 8 == info0.schema_length &&
            memcmp(sm->data, good->data + 8, (size_t)sm->size) == 0);
    }
    int failures = 0;
    for (int32_t q = 0; f && q < 3; q++) {
      fsh_batch **got;
      int64_t n;
      rc = read_partition(f, q, &got, &n, &err);
      if (rc != 0) {
        failures++;
        if (rc != EINVAL && rc != EIO) wrong++;
      } else {
        char diff[1200];
        int64_t nw = wanted(&p, q, want);
        if (!stu_rows_equal(got, n, want, nw, diff, sizeof diff)) {
          fprintf(stderr, "byte %lld flipped: partition %d reads wrong data: %s\n",
                  (long long)at, q, diff);
          wrong++;
        }
      }
      stu_free_batches(got, n);
    }
    if (at < 0) CHECK_EQ_INT(failures, 0);
    /* blocks, end-of-stream marker aside, and the index after its header */
    bool covered = (at >= info0.schema_length && at < info0.data_end) ||
                   (at >= info0.data_end + 8 + FSH_MAP_FILE_HEADER_BYTES &&
                    at < info0.file_size - FSH_MAP_FILE_TRAILER_BYTES);
    if (covered) tried++, undetected += failures == 0;
    fsh_map_file_close(f);
    fsh_buffer_unref(b);
  }
  CHECK_MSG(tried > 500 && info0.n_blocks > 3, "%d bytes, %lld blocks", tried,
            (long long)info0.n_blocks);
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(undetected, 0);
  /* a file of another size */
  fsh_buffer *longer = STU_OK(fsh_buffer_new(good->size + 8, true));
  memcpy(longer->data, good->data, (size_t)good->size);
  fsh_input *in = NULL;
  fsh_map_file *f = NULL;
  if (image) {
    rc = fsh_map_file_open_image(longer, "a longer image", h, &f, &err);
  } else {
    CHECK_OK(fsh_input_from_buffer(longer, &in, &err));
    rc = fsh_map_file_open_head(in, h, &f, &err);
  }
  CHECK_MSG(rc == EIO && !f && strstr(err.message, "changed size"), "%d %s", rc, err.message);
  fsh_buffer_unref(longer);
  fsh_map_file_head_unref(h);
  free(want);
  fsh_buffer_unref(good);
  fsh_map_output_reset(&meta);
  stu_plan_free(&p);
}

static void test_open_with_head(void) { open_with_head(false); }
/* the same through fsh_map_file_open_image (a store's memory images:
 * the index read in place, no input) */
static void test_open_image(void) { open_with_head(true); }

/* Files too small, or with a plausible trailer over garbage. */
static void test_malformed_files(void) {
  fsh_error err;
  int rc;
  uint8_t zeros[512] = {0};
  for (int64_t n = 0; n <= 512; n += 64) {
    fsh_buffer *b = STU_OK(fsh_buffer_copy(zeros, n));
    fsh_map_file *f = open_buffer(b, &rc, &err);
    CHECK_MSG(rc == EINVAL && !f && strstr(err.message, "not a valid map-output file"), "%s",
              err.message);
    fsh_buffer_unref(b);
  }
  /* a trailer that claims an index longer than the file */
  memcpy(zeros + 512 - 8, FSH_MAP_FILE_MAGIC, 8);
  zeros[512 - 24] = 0xFF, zeros[512 - 17] = 0x7F;
  fsh_buffer *b = STU_OK(fsh_buffer_copy(zeros, 512));
  fsh_map_file *f = open_buffer(b, &rc, &err);
  CHECK_MSG(rc == EINVAL && !f && strstr(err.message, "index length"), "%s", err.message);
  fsh_buffer_unref(b);
}


/* ---- write_rows: partition builders ------------------------------------ */

/* The rows of `in` (n batches) written to a map file with random
 * partition ids drawn from `seed`: through fsh_scatter + write of each
 * part (rows == false), or write_rows (true), or alternating (mixed:
 * batch k through write_rows when k is even). */
static fsh_buffer *write_rows_file(fsh_batch **in, int n, int32_t n_parts, uint64_t seed,
                                   const fsh_map_file_options *o, int how, fsh_map_output *meta) {
  fsh_error err;
  fsh_buffer *bytes = NULL;
  fsh_output *out = NULL;
  fsh_map_file_writer *w = NULL;
  fsh_shuffle_spec spec = {.shuffle_id = 4, .n_partitions = n_parts, .schema = in[0]->schema};
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_map_file_writer_open(out, &spec, 1, 0, o, &w, &err));
  fsh_batch **parts = STU_OK(calloc((size_t)n_parts, sizeof *parts));
  for (int k = 0; w && k < n; k++) {
    int32_t *part = STU_OK(malloc(sizeof *part * (size_t)(in[k]->length + 1)));
    for (int64_t i = 0; i < in[k]->length; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      part[i] = (int32_t)((seed >> 33) % (uint64_t)n_parts);
    }
    if (how == 1 || (how == 2 && k % 2 == 0)) {
      CHECK_OK(fsh_map_file_writer_write_rows(w, in[k], part, &err));
    } else {
      CHECK_OK(fsh_scatter(in[k], part, n_parts, parts, &err));
      for (int32_t q = 0; q < n_parts; q++) {
        if (parts[q]) CHECK_OK(fsh_map_file_writer_write(w, q, parts[q], &err));
        fsh_batch_unref(parts[q]);
        parts[q] = NULL;
      }
    }
    free(part);
  }
  free(parts);
  if (w) CHECK_OK(fsh_map_file_writer_close(w, meta, &err));
  return bytes;
}

/* Partition q of a map file, all its rows as one batch (NULL: none). */
static fsh_batch *partition_rows(fsh_buffer *file, int32_t q) {
  fsh_error err;
  int rc;
  fsh_map_file *f = open_buffer(file, &rc, &err);
  CHECK_OK(rc);
  fsh_batch **got = NULL, *all = NULL;
  int64_t n = 0;
  if (f) CHECK_OK(read_partition(f, q, &got, &n, &err));
  if (n > 0) CHECK_OK(fsh_concat(got, n, &all, &err));
  for (int64_t i = 0; i < n; i++) fsh_batch_unref(got[i]);
  free(got);
  fsh_map_file_close(f);
  return all;
}

/* write_rows stores exactly the bytes fsh_scatter + write stores (blocks,
 * checksums, index), whatever the block target, partition count and input
 * slicing; under a buffer budget (which cuts write()'s parts mid-batch,
 * write_rows after the batch) and mixed with write, the partitions read
 * back the same rows in the same order. */
static void test_write_rows_same_bytes(void) {
  fsh_batch *src = stu_synthetic(3, 9000);
  fsh_batch *in[6];
  const int64_t cuts[6][2] = {{0, 1000}, {1000, 1}, {1001, 2999}, {4000, 0}, {4000, 64}, {4067, 4933}};
  for (int k = 0; k < 6; k++) in[k] = STU_OK(fsh_batch_slice(src, cuts[k][0], cuts[k][1]));
  const struct { int32_t parts; int64_t target, budget; } cfg[] = {
      {1, 0, 0}, {7, 0, 0}, {7, 4 << 10, 0}, {64, 0, 32 << 10}, {300, 1, 0}};
  for (int c = 0; c < 5; c++) {
    fsh_map_file_options o = {.target_block_bytes = cfg[c].target,
                              .max_buffered_bytes = cfg[c].budget};
    fsh_map_output ma = {0}, mb = {0}, mc = {0};
    fsh_buffer *a = write_rows_file(in, 6, cfg[c].parts, 77 + (uint64_t)c, &o, 0, &ma);
    fsh_buffer *b = write_rows_file(in, 6, cfg[c].parts, 77 + (uint64_t)c, &o, 1, &mb);
    fsh_buffer *m = write_rows_file(in, 6, cfg[c].parts, 77 + (uint64_t)c, &o, 2, &mc);
    if (!a || !b || !m) continue;
    bool same_blocks = cfg[c].budget == 0; /* the budget cuts write() mid-batch */
    CHECK_MSG(!same_blocks || (a->size == b->size && memcmp(a->data, b->data, (size_t)a->size) == 0),
              "config %d: write_rows stored %lld bytes, scatter + write %lld (or they differ)", c,
              (long long)b->size, (long long)a->size);
    for (int32_t q = 0; q < cfg[c].parts; q++) {
      CHECK(!same_blocks || ma.checksums[q] == mb.checksums[q]);
      CHECK_EQ_INT(mb.rows[q], ma.rows[q]);
      CHECK_EQ_INT(mc.rows[q], ma.rows[q]);
      fsh_batch *x = partition_rows(a, q), *y = partition_rows(b, q), *z = partition_rows(m, q);
      fsh_error diff = {{0}};
      CHECK_MSG((!x && !y) || (x && y && fsh_batch_equals(x, y, &diff)),
                "config %d partition %d: write_rows reads back differently: %s", c, q,
                diff.message);
      CHECK_MSG((!x && !z) || (x && z && fsh_batch_equals(x, z, &diff)),
                "config %d partition %d: mixed writes read back differently: %s", c, q,
                diff.message);
      fsh_batch_unref(x);
      fsh_batch_unref(y);
      fsh_batch_unref(z);
    }
    fsh_map_output_reset(&ma);
    fsh_map_output_reset(&mb);
    fsh_map_output_reset(&mc);
    fsh_buffer_unref(a);
    fsh_buffer_unref(b);
    fsh_buffer_unref(m);
  }
  for (int k = 0; k < 6; k++) fsh_batch_unref(in[k]);
  fsh_batch_unref(src);
}

/* A schema the builders do not take: ENOTSUP and the writer goes on with
 * write; a bad partition id: EINVAL naming it, the writer goes on. */
/* The same for the other column kinds the builders take (bool values and
 * validity, large strings, binary, 1- and 4-byte values, a column without
 * nulls): write_rows writes a block straight from the builder's buffers
 * (map_file.c, write_built), byte-identical to the encoder's block of the
 * same rows. */
static void test_write_rows_same_bytes_kinds(void) {
  enum { N = 40 };
  char valid[N + 1], bits[N + 1];
  const char *strs[N];
  static const char *const words[] = {"", "a", "bc", "def", "ghij",
                                      "klmnopqrstuvwxyz0123456789ABCDEFG"};
  int8_t i8[N];
  float f32[N];
  for (int i = 0; i < N; i++) {
    valid[i] = i % 7 == 3 ? '0' : '1';
    bits[i] = (i * 5) % 3 == 1 ? '1' : '0';
    strs[i] = words[(i * 7) % 6];
    i8[i] = (int8_t)(i * 13 - 100);
    f32[i] = (float)i * 0.25f;
  }
  valid[N] = bits[N] = '\0';
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "b", FSH_TYPE_BOOL, true);
  SBH_SET(&c, sbh_bool(valid, bits));
  sbh_col(&c, "ls", FSH_TYPE_LARGE_STRING, true);
  SBH_SET(&c, sbh_binary(valid, N, strs, true));
  sbh_col(&c, "bin", FSH_TYPE_BINARY, false);
  SBH_SET(&c, sbh_binary(NULL, N, strs, false));
  sbh_col(&c, "i8", FSH_TYPE_INT8, true);
  SBH_SET(&c, sbh_fixed(valid, N, i8, 1));
  sbh_col(&c, "f32", FSH_TYPE_FLOAT32, false);
  SBH_SET(&c, sbh_fixed(NULL, N, f32, 4));
  fsh_batch *src = sbh_finish(&c, N);
  CHECK(fsh_partition_builder_supports(src->schema));
  fsh_batch *in[3] = {STU_OK(fsh_batch_slice(src, 0, 17)), STU_OK(fsh_batch_slice(src, 17, 0)),
                      STU_OK(fsh_batch_slice(src, 17, 23))};
  for (int32_t parts = 1; parts <= 9; parts += 4) {
    fsh_map_output ma = {0}, mb = {0};
    fsh_buffer *a = write_rows_file(in, 3, parts, 5 + (uint64_t)parts, NULL, 0, &ma);
    fsh_buffer *b = write_rows_file(in, 3, parts, 5 + (uint64_t)parts, NULL, 1, &mb);
    CHECK(a && b);
    CHECK_MSG(a->size == b->size && memcmp(a->data, b->data, (size_t)a->size) == 0,
              "%d partitions: write_rows stored %lld bytes, scatter + write %lld (or they "
              "differ)", parts, (long long)b->size, (long long)a->size);
    for (int32_t q = 0; q < parts; q++) {
      fsh_batch *x = partition_rows(a, q), *y = partition_rows(b, q);
      CHECK((!x && !y) || (x && y && fsh_batch_equals(x, y, NULL)));
      fsh_batch_unref(x);
      fsh_batch_unref(y);
    }
    fsh_map_output_reset(&ma);
    fsh_map_output_reset(&mb);
    fsh_buffer_unref(a);
    fsh_buffer_unref(b);
  }
  for (int k = 0; k < 3; k++) fsh_batch_unref(in[k]);
  fsh_batch_unref(src);
}

static void test_write_rows_refused(void) {
  fsh_error err;
  fsh_batch *all = fsh_sample_all_types();
  fsh_shuffle_spec spec = {.shuffle_id = 4, .n_partitions = 2, .schema = all->schema};
  fsh_buffer *bytes = NULL;
  fsh_output *out = NULL;
  fsh_map_file_writer *w = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_map_file_writer_open(out, &spec, 1, 0, NULL, &w, &err));
  int32_t part[64] = {0};
  if (w) {
    CHECK_EQ_INT(fsh_map_file_writer_write_rows(w, all, part, &err), ENOTSUP);
    CHECK_OK(fsh_map_file_writer_write(w, 1, all, &err));
    fsh_map_output meta = {0};
    CHECK_OK(fsh_map_file_writer_close(w, &meta, &err));
    CHECK_EQ_INT(meta.rows[1], all->length);
    fsh_map_output_reset(&meta);
  }
  fsh_buffer_unref(bytes);
  fsh_batch *syn = stu_synthetic(0, 50);
  spec.schema = syn->schema;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_map_file_writer_open(out, &spec, 1, 0, NULL, &w, &err));
  if (w) {
    part[10] = 2;
    CHECK_EQ_INT(fsh_map_file_writer_write_rows(w, syn, part, &err), EINVAL);
    CHECK_MSG(strstr(err.message, "partition 2") != NULL, "%s", err.message);
    part[10] = 1;
    CHECK_OK(fsh_map_file_writer_write_rows(w, syn, part, &err));
    fsh_map_output meta = {0};
    CHECK_OK(fsh_map_file_writer_close(w, &meta, &err));
    CHECK_EQ_INT(meta.rows[0], 49);
    CHECK_EQ_INT(meta.rows[1], 1);
    fsh_map_output_reset(&meta);
  }
  fsh_buffer_unref(bytes);
  fsh_batch_unref(syn);
  fsh_batch_unref(all);
}

/* finish_partition writes a partition's buffered batches as its last
 * block (one block here: its checksum is the partition's), before close;
 * later writes to it, and write_rows after any finish, are EINVAL; the
 * other partitions go on; the file reads back the rows written. */
static void test_finish_partition(void) {
  fsh_error err = {{0}};
  fsh_batch *a = stu_synthetic(0, 40), *b = stu_synthetic(40, 30);
  fsh_shuffle_spec spec = {.shuffle_id = 4, .n_partitions = 3, .schema = a->schema};
  fsh_buffer *bytes = NULL;
  fsh_output *out = NULL;
  fsh_map_file_writer *w = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &bytes, &out, &err));
  CHECK_OK(fsh_map_file_writer_open(out, &spec, 1, 0, NULL, &w, &err));
  if (!w) return;
  CHECK_OK(fsh_map_file_writer_write(w, 1, a, &err));
  CHECK_OK(fsh_map_file_writer_write(w, 1, b, &err));
  CHECK_OK(fsh_map_file_writer_finish_partition(w, 1, &err));
  CHECK_EQ_INT(fsh_map_file_writer_write(w, 1, a, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "partition 1"), "%s", err.message);
  int32_t part[40] = {0};
  CHECK_EQ_INT(fsh_map_file_writer_write_rows(w, a, part, &err), EINVAL);
  CHECK_EQ_INT(fsh_map_file_writer_finish_partition(w, 3, &err), EINVAL);
  CHECK_OK(fsh_map_file_writer_write(w, 2, b, &err));
  fsh_map_output meta = {0};
  CHECK_OK(fsh_map_file_writer_close(w, &meta, &err));
  int rc = 0;
  fsh_map_file *f = open_buffer(bytes, &rc, &err);
  CHECK_OK(rc);
  for (int32_t q = 0; f && q < 3; q++) {
    fsh_map_file_partition e = {0};
    CHECK_OK(fsh_map_file_get_partition(f, q, &e, &err));
    CHECK_EQ_INT(e.rows, q == 0 ? 0 : q == 1 ? 70 : 30);
    CHECK_EQ_INT(meta.rows[q], e.rows);
    CHECK_EQ_INT(e.n_blocks, q == 0 ? 0 : 1);
    if (e.n_blocks == 1) {
      CHECK(e.checksum == e.blocks[0].checksum && meta.checksums[q] == e.checksum);
      CHECK(XXH3_64bits(bytes->data + e.blocks[0].offset, (size_t)e.blocks[0].length) ==
            e.checksum);
    }
    fsh_map_file_partition_reset(&e);
    fsh_batch **got = NULL;
    int64_t n = 0;
    CHECK_OK(read_partition(f, q, &got, &n, &err));
    fsh_batch *want[2] = {a, b};
    fsh_batch *cat = NULL, *cat_got = NULL;
    if (q == 1) CHECK_OK(fsh_concat(want, 2, &cat, &err));
    if (n > 0) CHECK_OK(fsh_concat(got, n, &cat_got, &err));
    if (q == 1) CHECK(cat && cat_got && fsh_batch_equals(cat, cat_got, NULL));
    if (q == 2) CHECK(cat_got && fsh_batch_equals(b, cat_got, NULL));
    if (q == 0) CHECK_EQ_INT(n, 0);
    fsh_batch_unref(cat);
    fsh_batch_unref(cat_got);
    for (int64_t i = 0; i < n; i++) fsh_batch_unref(got[i]);
    free(got);
  }
  fsh_map_file_close(f);
  fsh_map_output_reset(&meta);
  fsh_buffer_unref(bytes);
  fsh_batch_unref(a);
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_finish_partition), TEST(test_write_rows_same_bytes), TEST(test_write_rows_same_bytes_kinds), TEST(test_write_rows_refused),
              TEST(test_blocks_and_ranges), TEST(test_small_blocks_staged), TEST(test_buffer_budget),
              TEST(test_plain_stream_reader), TEST(test_disk_full),
              TEST(test_every_byte_flipped), TEST(test_open_with_head), TEST(test_open_image),
              TEST(test_malformed_files))
