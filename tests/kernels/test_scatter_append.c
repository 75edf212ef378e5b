/* test_scatter_append.c -- partition builders (kernels.h): every flat
 * column of the every-type sample (sliced: offsets everywhere), appended
 * batch after batch with random partition ids and taken at random points,
 * against the reference: each taken batch equals take() of the input rows
 * the partition received since its last take, in order. Also: the
 * builder's memory reused across takes, byte counts, unsupported schemas,
 * bad ids, allocation failures; what a builder keeps between blocks; dense and patterned null masks, bool
 * values and short strings at the end of an exact-size source. */
#include "kernels/kernel_helpers.h"

#include <errno.h>

#include <flightshuffle/workloads.h> /* the synthetic table */

#include "shuffle/shuffle_internal.h" /* fsh_shuffle_batch_bytes */

/* The sample's columns the builders take (flat, no dictionary), as a
 * batch of their own. */
static fsh_batch *flat_sample(int times, int64_t cut) {
  fsh_batch *big = kh_big_batch(times, cut);
  int64_t keep[64], n = 0;
  for (int64_t c = 0; c < big->schema->n_fields && n < 64; c++) {
    fsh_schema one = {.n_fields = 1, .fields = &big->schema->fields[c]};
    if (fsh_partition_builder_supports(&one)) keep[n++] = c;
  }
  CHECK_MSG(n >= 8, "only %lld flat columns in the sample", (long long)n);
  fsh_schema *s = SBH_OK(fsh_schema_new(n));
  for (int64_t i = 0; i < n; i++) CHECK_EQ_INT(fsh_field_copy(&s->fields[i], &big->schema->fields[keep[i]]), 0);
  fsh_batch *b = SBH_OK(fsh_batch_new(s, big->length));
  b->length = big->length;
  for (int64_t i = 0; i < n; i++) b->columns[i] = fsh_array_ref(big->columns[keep[i]]);
  fsh_schema_unref(s);
  fsh_batch_unref(big);
  return b;
}

enum { MAX_ROWS = 8192 };

/* Rows of the input each partition received since its last take: (batch
 * index, row). */
typedef struct pending {
  int64_t n, row[MAX_ROWS];
  int32_t batch[MAX_ROWS];
} pending;

static void check_take(fsh_partition_builder *pb, int32_t p, fsh_batch **ins, pending *pend,
                       const char *what) {
  fsh_error err;
  fsh_batch *got = NULL;
  CHECK_EQ_INT(fsh_partition_builder_rows(pb, p), pend->n);
  int64_t bytes = fsh_partition_builder_bytes(pb, p);
  CHECK_OK(fsh_partition_builder_take(pb, p, &got, &err));
  CHECK_MSG((got == NULL) == (pend->n == 0), "%s: partition %d: %lld pending rows, batch %p",
            what, p, (long long)pend->n, (void *)got);
  if (got) {
    CHECK_EQ_INT(bytes, fsh_shuffle_batch_bytes(got));
    /* the reference: take() of each input batch's rows, concatenated */
    fsh_batch *parts[MAX_ROWS / 8];
    int n_parts = 0;
    for (int64_t k = 0; k < pend->n;) {
      int64_t e = k, idx[MAX_ROWS];
      while (e < pend->n && pend->batch[e] == pend->batch[k]) idx[e - k] = pend->row[e], e++;
      CHECK_OK(fsh_take(ins[pend->batch[k]], idx, e - k, &parts[n_parts++], &err));
      k = e;
    }
    fsh_batch *want = NULL;
    CHECK_OK(fsh_concat(parts, n_parts, &want, &err));
    CHECK_MSG(fsh_batch_validate(got, true, &err) == 0, "%s: invalid: %s", what, err.message);
    CHECK_MSG(want && fsh_batch_equals(want, got, &err), "%s: partition %d: %s", what, p,
              err.message);
    for (int i = 0; i < n_parts; i++) fsh_batch_unref(parts[i]);
    fsh_batch_unref(want);
    fsh_batch_unref(got);
  }
  pend->n = 0;
  CHECK_EQ_INT(fsh_partition_builder_rows(pb, p), 0);
  CHECK_EQ_INT(fsh_partition_builder_bytes(pb, p), 0);
}

/* flat_sample(64, cut) k times over, as one batch: enough rows (~448 k)
 * for the staged pushes (at least 128 rows a partition on average). */
static fsh_batch *flat_sample_big(int k, int64_t cut) {
  fsh_error err;
  fsh_batch *one = flat_sample(64, cut), *copies[8], *big = NULL;
  for (int i = 0; i < k; i++) copies[i] = one;
  CHECK_OK(fsh_concat(copies, k, &big, &err));
  fsh_batch_unref(one);
  return big;
}

/* big: inputs of 1300-2700 rows (staged pushes with 8 .. 16 partitions;
 * their skewed rounds stage one partition's whole batch), else of 100-450
 * rows (direct pushes). */
static void rounds_of(int32_t n_p, uint64_t seed, bool big) {
  fsh_error err;
  fsh_batch *ins[4] = {big ? flat_sample_big(4, 3) : flat_sample(40, 3),
                       big ? flat_sample_big(3, 0) : flat_sample(17, 0),
                       big ? flat_sample_big(6, 5) : flat_sample(64, 5), NULL};
  ins[3] = SBH_OK(fsh_batch_slice(ins[2], 7, 0)); /* an empty one too */
  fsh_partition_builder *pb = NULL;
  CHECK_OK(fsh_partition_builder_new(ins[0]->schema, n_p, &pb, &err));
  pending *pend = SBH_OK(fsh_calloc((size_t)n_p, sizeof *pend));
  int32_t part[MAX_ROWS];
  uint64_t st = seed;
  char what[64];
  for (int round = 0; pb && round < 24; round++) {
    int bi = (int)(kh_rand(&st) % 4);
    fsh_batch *b = ins[bi];
    bool skew = kh_rand(&st) % 4 == 0; /* every row to one partition */
    for (int64_t i = 0; i < b->length; i++)
      part[i] = skew ? n_p - 1 : (int32_t)(kh_rand(&st) % (uint64_t)n_p);
    CHECK_OK(fsh_partition_builder_append(pb, b, part, &err));
    for (int64_t i = 0; i < b->length; i++) {
      pending *q = &pend[part[i]];
      if (q->n < MAX_ROWS) q->batch[q->n] = bi, q->row[q->n] = i, q->n++;
    }
    snprintf(what, sizeof what, "%d partitions, round %d", n_p, round);
    /* prefetch hints change nothing (whole, partial, out of range) */
    fsh_partition_builder_prefetch(pb, -1, 1 << 20);
    fsh_partition_builder_prefetch(pb, n_p, 1 << 20);
    for (int32_t p = 0; p < n_p; p++) fsh_partition_builder_prefetch(pb, p, p % 2 ? 1 << 20 : 100);
    for (int32_t p = 0; p < n_p; p++)
      if (kh_rand(&st) % 3 == 0 || pend[p].n > MAX_ROWS / 2) check_take(pb, p, ins, &pend[p], what);
  }
  for (int32_t p = 0; pb && p < n_p; p++) check_take(pb, p, ins, &pend[p], "final");
  fsh_partition_builder_free(pb);
  fsh_free(pend);
  for (int i = 0; i < 4; i++) fsh_batch_unref(ins[i]);
}

static void rounds(int32_t n_p, uint64_t seed) { rounds_of(n_p, seed, false); }

static void test_builder_rounds(void) {
  rounds(1, 1);
  rounds(3, 2);
  rounds(16, 3);
  rounds(200, 4);
  rounds(1000, 9); /* many partitions: direct pushes without the prefetch */
  rounds_of(300, 10, true); /* big inputs, still direct (under 128 rows a partition) */
  rounds(16, 5); /* a cached builder of the same shape */
  rounds(16, 6);
  rounds_of(8, 7, true); /* staged */
  rounds_of(13, 8, true);
}

static void test_builder_errors(void) {
  fsh_error err;
  fsh_batch *all = kh_big_batch(1, 0);
  fsh_partition_builder *pb = NULL;
  CHECK(!fsh_partition_builder_supports(all->schema));
  CHECK_EQ_INT(fsh_partition_builder_new(all->schema, 4, &pb, &err), EINVAL);
  CHECK(pb == NULL && strstr(err.message, "column") != NULL);
  fsh_batch *b = flat_sample(1, 0);
  CHECK_EQ_INT(fsh_partition_builder_new(b->schema, 0, &pb, &err), EINVAL);
  CHECK_OK(fsh_partition_builder_new(b->schema, 4, &pb, &err));
  int32_t part[MAX_ROWS] = {0};
  part[b->length / 2] = 4;
  CHECK_EQ_INT(fsh_partition_builder_append(pb, b, part, &err), EINVAL);
  CHECK(strstr(err.message, "partition 4") != NULL);
  fsh_partition_builder_free(pb);
  fsh_batch_unref(b);
  fsh_batch_unref(all);
}

/* Every allocation of new + append + take failing in turn: ENOMEM, and
 * nothing leaks (LSan); with 5 partitions (direct pushes) and 11 (staged,
 * its staging buffer allocated too). */
static void alloc_failures(int32_t n_p) {
  fsh_batch *b = n_p >= 8 ? flat_sample_big(4, 1) : flat_sample(2, 1);
  int32_t part[MAX_ROWS];
  for (int64_t i = 0; i < b->length; i++) part[i] = (int32_t)(i % n_p);
  for (int64_t n = 1; n < 4000; n++) {
    fsh_error err;
    fsh_alloc_fail_after(n, false);
    fsh_partition_builder *pb = NULL;
    int rc = fsh_partition_builder_new(b->schema, n_p, &pb, &err);
    if (rc == 0) rc = fsh_partition_builder_append(pb, b, part, &err);
    fsh_batch *got = NULL;
    if (rc == 0) rc = fsh_partition_builder_take(pb, 2, &got, &err);
    fsh_alloc_fail_after(0, false);
    CHECK_MSG(rc == 0 || rc == ENOMEM, "failure %lld: rc %d", (long long)n, rc);
    fsh_batch_unref(got);
    fsh_partition_builder_free(pb);
    if (rc == 0) break;
    CHECK_MSG(n < 3999, "%d partitions: still failing after 3999 allocations", n_p);
  }
  fsh_batch_unref(b);
}

static void test_builder_alloc_failures(void) {
  alloc_failures(5);
  alloc_failures(11); /* (a count no other case leaves a cached builder of) */
}

/* A hand-made batch of n rows (int64, bool, utf8, large_binary, all
 * nullable) whose null masks change pattern every 64 rows (none null, all
 * null, every third, random), whose bool values are random, and whose
 * strings are 0..70 bytes (short ones last). The utf8 bytes sit in an
 * exact-size allocation with nothing after it (ASan: a copy reading past
 * the source's end is caught). */
static void free_exact(void *p) { fsh_free(p); }

static fsh_batch *dense_bits_batch(int64_t n, uint64_t seed) {
  fsh_schema *s = SBH_OK(fsh_schema_new(4));
  CHECK_EQ_INT(fsh_field_init(&s->fields[0], "i", FSH_TYPE_INT64, true), 0);
  CHECK_EQ_INT(fsh_field_init(&s->fields[1], "b", FSH_TYPE_BOOL, true), 0);
  CHECK_EQ_INT(fsh_field_init(&s->fields[2], "s", FSH_TYPE_STRING, true), 0);
  CHECK_EQ_INT(fsh_field_init(&s->fields[3], "lb", FSH_TYPE_LARGE_BINARY, true), 0);
  fsh_batch *b = SBH_OK(fsh_batch_new(s, n));
  fsh_schema_unref(s);
  uint64_t st = seed;
  int64_t lens[4096], total = 0;
  CHECK(n <= 4096);
  for (int64_t i = 0; i < n; i++) {
    lens[i] = i >= n - 40 ? (int64_t)(kh_rand(&st) % 9) : (int64_t)(kh_rand(&st) % 71);
    total += lens[i];
  }
  for (int c = 0; c < 4; c++) {
    fsh_array *a = b->columns[c] = SBH_OK(fsh_array_new(c >= 2 ? 3 : 2, 0));
    a->length = n;
    fsh_buffer *v = a->buffers[0] = SBH_OK(fsh_buffer_new(fsh_bytes_for_bits(n), true));
    for (int64_t i = 0; i < n; i++) {
      int pat = (int)((i / 64 + c) % 4);
      bool null = pat == 1 || (pat == 2 && i % 3 == 0) || (pat == 3 && kh_rand(&st) % 2 == 0);
      fsh_bit_set(v->data, i, !null);
      a->null_count += null;
    }
    if (c == 0) {
      a->buffers[1] = SBH_OK(fsh_buffer_new(8 * n, false));
      for (int64_t i = 0; i < n; i++) ((int64_t *)a->buffers[1]->data)[i] = (int64_t)kh_rand(&st);
    } else if (c == 1) {
      a->buffers[1] = SBH_OK(fsh_buffer_new(fsh_bytes_for_bits(n), true));
      for (int64_t i = 0; i < n; i++) fsh_bit_set(a->buffers[1]->data, i, kh_rand(&st) % 2);
    } else {
      int w = c == 2 ? 4 : 8;
      a->buffers[1] = SBH_OK(fsh_buffer_new(w * (n + 1), false));
      uint8_t *chars = SBH_OK(fsh_malloc((size_t)total));
      int64_t at = 0;
      for (int64_t i = 0; i <= n; i++) {
        if (w == 4) ((int32_t *)a->buffers[1]->data)[i] = (int32_t)at;
        else ((int64_t *)a->buffers[1]->data)[i] = at;
        for (int64_t k = 0; i < n && k < lens[i]; k++) chars[at + k] = (uint8_t)('a' + kh_rand(&st) % 26);
        if (i < n) at += lens[i];
      }
      a->buffers[2] = SBH_OK(fsh_buffer_wrap(chars, total, free_exact, chars));
    }
  }
  return b;
}

/* Bitmaps of a taken batch: no bit set past its length (the builder keeps
 * the bytes past a bitmap's bits zero; the map file stores them). */
static void check_bitmap_tails(const fsh_batch *got) {
  for (int64_t c = 0; c < got->n_columns; c++) {
    const fsh_array *a = got->columns[c];
    for (int k = 0; k < 2; k++) {
      bool bitmap = k == 0 || got->schema->fields[c].type == FSH_TYPE_BOOL;
      const fsh_buffer *buf = a->buffers[k];
      if (!bitmap || !buf) continue;
      for (int64_t i = a->length; i < 8 * buf->size; i++)
        CHECK_MSG(!fsh_bit_get(buf->data, i), "column %lld buffer %d: bit %lld set past %lld rows",
                  (long long)c, k, (long long)i, (long long)a->length);
    }
  }
}

/* The 64-rows-at-a-time null and bool passes and the binary copies near
 * the source's end: slices at offsets 0, 5 and 63 of the dense batch,
 * appended in uneven pieces into 1, 7 and 64 partitions, each partition
 * compared with take() of its rows. */
static void test_builder_dense_bits(void) {
  fsh_error err;
  static const int64_t offs[3] = {0, 5, 63};
  static const int32_t n_ps[3] = {1, 7, 64};
  for (int t = 0; t < 9; t++) {
    fsh_batch *whole = dense_bits_batch(1500, 100 + (uint64_t)t);
    fsh_batch *b = SBH_OK(fsh_batch_slice(whole, offs[t % 3], 1500 - offs[t % 3] - 3));
    int32_t n_p = n_ps[t / 3];
    fsh_partition_builder *pb = NULL;
    CHECK_OK(fsh_partition_builder_new(b->schema, n_p, &pb, &err));
    int32_t part[1500];
    int64_t *idx = SBH_OK(fsh_malloc(sizeof *idx * 1500));
    uint64_t st = 7 + (uint64_t)t;
    for (int64_t i = 0; i < b->length; i++) part[i] = (int32_t)(kh_rand(&st) % (uint64_t)n_p);
    int64_t cuts[4] = {0, 1, 130, b->length}; /* pieces of 1, 129 and the rest */
    for (int k = 0; k < 3 && pb; k++) {
      fsh_batch *piece = SBH_OK(fsh_batch_slice(b, cuts[k], cuts[k + 1] - cuts[k]));
      CHECK_OK(fsh_partition_builder_append(pb, piece, part + cuts[k], &err));
      fsh_batch_unref(piece);
    }
    for (int32_t p = 0; pb && p < n_p; p++) {
      int64_t n = 0;
      for (int64_t i = 0; i < b->length; i++)
        if (part[i] == p) idx[n++] = i;
      fsh_batch *got = NULL;
      CHECK_OK(fsh_partition_builder_take(pb, p, &got, &err));
      char what[64];
      snprintf(what, sizeof what, "dense bits %d, partition %d", t, p);
      kh_check_equals_take(b, idx, n, got, what);
      if (got) check_bitmap_tails(got);
      fsh_batch_unref(got);
    }
    fsh_partition_builder_free(pb);
    fsh_free(idx);
    fsh_batch_unref(b);
    fsh_batch_unref(whole);
  }
}

/* What a builder keeps between blocks (fsh_partition_builder_set_keep_bytes),
 * with one partition of 3 receiving every row of a 131072-row synthetic
 * batch (~4 MiB: over the 2 MiB a partition always may keep): by default
 * its buffers are reused by the next block; a lower keep leaves a taken
 * partition's memory alone while its batch borrows it and frees it at
 * the next append; a builder freed into the cache keeps what its keep
 * allowed, and the next owner's lower keep trims it at once. */
static void test_builder_keep(void) {
  fsh_error err;
  fsh_partition_builder_cache_drop(); /* room in the cache for this shape */
  fsh_schema *s = SBH_OK(fsh_synthetic_schema());
  fsh_synthetic_options so = {.seed = 3, .with_nulls = true};
  fsh_batch *big = NULL, *small = NULL, *got = NULL;
  CHECK_OK(fsh_synthetic_batch(s, &so, 0, 131072, &big, &err));
  CHECK_OK(fsh_synthetic_batch(s, &so, 1, 100, &small, &err));
  int32_t *part = fsh_calloc((size_t)big->length, sizeof *part); /* all to partition 0 */
  CHECK(part != NULL);
  const int64_t two_mib = (int64_t)2 << 20;
  fsh_partition_builder *pb = NULL;
  CHECK_OK(fsh_partition_builder_new(s, 3, &pb, &err));
  CHECK_OK(fsh_partition_builder_append(pb, big, part, &err));
  int64_t cap = fsh_partition_builder_capacity(pb);
  CHECK_MSG(cap > two_mib, "capacity %lld", (long long)cap);
  /* default: the next block reuses the buffers */
  CHECK_OK(fsh_partition_builder_take(pb, 0, &got, &err));
  fsh_batch_unref(got);
  CHECK_OK(fsh_partition_builder_append(pb, big, part, &err));
  CHECK_EQ_INT(fsh_partition_builder_capacity(pb), cap);
  /* a lower keep: not while the taken batch borrows the memory */
  CHECK_OK(fsh_partition_builder_take(pb, 0, &got, &err));
  fsh_partition_builder_set_keep_bytes(pb, (int64_t)1 << 20);
  CHECK_EQ_INT(fsh_partition_builder_capacity(pb), cap);
  fsh_error diff;
  CHECK_MSG(fsh_batch_equals(got, big, &diff), "the taken batch: %s", diff.message); /* (ASan) */
  fsh_batch_unref(got);
  CHECK_OK(fsh_partition_builder_append(pb, small, part, &err));
  CHECK_MSG(fsh_partition_builder_capacity(pb) < two_mib, "capacity %lld after the trim",
            (long long)fsh_partition_builder_capacity(pb));
  /* the cache keeps what the keep allowed; a lower keep trims it at once */
  fsh_partition_builder_set_keep_bytes(pb, 0);
  CHECK_OK(fsh_partition_builder_append(pb, big, part, &err));
  int64_t grown = fsh_partition_builder_capacity(pb);
  CHECK(grown > two_mib);
  fsh_partition_builder_free(pb);
  CHECK_EQ_INT(fsh_partition_builder_cache_bytes(), grown);
  CHECK_OK(fsh_partition_builder_new(s, 3, &pb, &err));
  CHECK_EQ_INT(fsh_partition_builder_capacity(pb), grown); /* from the cache */
  fsh_partition_builder_set_keep_bytes(pb, (int64_t)1 << 20);
  CHECK(fsh_partition_builder_capacity(pb) < two_mib);
  CHECK_OK(fsh_partition_builder_append(pb, small, part, &err));
  CHECK_EQ_INT(fsh_partition_builder_rows(pb, 0), small->length);
  fsh_partition_builder_free(pb);
  fsh_partition_builder_cache_drop();
  fsh_free(part);
  fsh_batch_unref(small);
  fsh_batch_unref(big);
  fsh_schema_unref(s);
}

FSH_TEST_MAIN(TEST(test_builder_rounds), TEST(test_builder_errors),
              TEST(test_builder_alloc_failures), TEST(test_builder_dense_bits),
              TEST(test_builder_keep))
