/* test_synthetic.c -- the synthetic table (workloads.h): valid Arrow data
 * of the documented shape (letters of lengths 1 .. 2 avg - 1, ~1% nulls,
 * zero padding bits), deterministic from the seed, rows that differ from
 * each other and from one batch and seed to the next, and a row's key,
 * value, validity and name length independent of how the table is cut
 * into batches. Both ways of making names are covered: slices of the
 * process's letter pool (batches of up to 4 MiB of names) and letters
 * written one by one (larger batches). */
#include <stdint.h>
#include <string.h>

#include <flightshuffle/workloads.h>

#include "test.h"

static fsh_batch *gen(uint64_t seed, int32_t avg, int64_t index, int64_t rows) {
  static fsh_schema *schema;
  if (!schema) schema = fsh_synthetic_schema(); /* lives for the process */
  fsh_synthetic_options o = {.seed = seed, .avg_str_len = avg, .with_nulls = true};
  fsh_batch *b = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_synthetic_batch(schema, &o, index, rows, &b, &err));
  if (b) CHECK_OK(fsh_batch_validate(b, true, &err));
  return b;
}

static bool valid_at(const fsh_array *a, int64_t i) {
  return !a->buffers[0] || fsh_bit_get(a->buffers[0]->data, a->offset + i);
}
static const int64_t *keys(const fsh_batch *b) {
  return (const int64_t *)b->columns[0]->buffers[1]->data;
}
static const double *vals(const fsh_batch *b) {
  return (const double *)b->columns[1]->buffers[1]->data;
}
static const int32_t *offs(const fsh_batch *b) {
  return (const int32_t *)b->columns[2]->buffers[1]->data;
}
static const uint8_t *chars(const fsh_batch *b) { return b->columns[2]->buffers[2]->data; }

/* Shape: lengths, letters, null counts that match the bitmaps, zero bits
 * past the last row, and the null rate of the whole (~1%). */
static void check_shape(const fsh_batch *b, int32_t avg, int64_t *nulls, int64_t *cells) {
  int64_t span = 2 * (int64_t)avg - 1;
  const int32_t *o = offs(b);
  bool letters = true, lengths = true;
  for (int64_t i = 0; i < b->length; i++) {
    lengths &= o[i + 1] - o[i] >= 1 && o[i + 1] - o[i] <= span;
    for (int32_t j = o[i]; j < o[i + 1]; j++) letters &= chars(b)[j] >= 'a' && chars(b)[j] <= 'z';
  }
  CHECK_MSG(lengths, "name lengths outside 1 .. %lld", (long long)span);
  CHECK_MSG(letters, "a name holds something other than a .. z");
  CHECK_EQ_INT(b->columns[0]->null_count, 0);
  for (int c = 1; c < 3; c++) {
    const fsh_array *a = b->columns[c];
    int64_t n = 0;
    for (int64_t i = 0; i < b->length; i++) n += !valid_at(a, i);
    CHECK_EQ_INT(a->null_count, n);
    if (a->buffers[0]) {
      const uint8_t *bits = a->buffers[0]->data;
      int64_t bytes = (b->length + 7) / 8;
      if (b->length % 8) CHECK_EQ_INT(bits[bytes - 1] >> (b->length % 8), 0);
      for (int64_t k = bytes; k < a->buffers[0]->capacity; k++) CHECK_EQ_INT(bits[k], 0);
    }
    *nulls += n;
    *cells += b->length;
  }
}

static void shape(void) {
  const int32_t avgs[] = {12, 1, 5, 40};
  for (int ai = 0; ai < 4; ai++) {
    int64_t nulls = 0, cells = 0;
    for (int64_t idx = 0; idx < 20; idx++) {
      fsh_batch *b = gen(9, avgs[ai], idx, 10007);
      if (b) check_shape(b, avgs[ai], &nulls, &cells);
      fsh_batch_unref(b);
    }
    double rate = (double)nulls / (double)cells; /* 3/256 = 1.17% expected */
    CHECK_MSG(rate > 0.009 && rate < 0.0145, "avg %d: null rate %.4f", avgs[ai], rate);
  }
}

static void deterministic(void) {
  for (int64_t rows = 1; rows <= 200000; rows *= 7) {
    fsh_batch *a = gen(77, 12, 3, rows), *b = gen(77, 12, 3, rows);
    fsh_error diff = {{0}};
    CHECK_MSG(a && b && fsh_batch_equals(a, b, &diff), "rows %lld: %s", (long long)rows,
              diff.message);
    fsh_batch_unref(a);
    fsh_batch_unref(b);
  }
}

/* Fraction of rows i where names of a and b at i are equal. */
static double same_names(const fsh_batch *a, const fsh_batch *b) {
  int64_t same = 0;
  for (int64_t i = 0; i < a->length; i++) {
    int32_t la = offs(a)[i + 1] - offs(a)[i], lb = offs(b)[i + 1] - offs(b)[i];
    same += la == lb && memcmp(chars(a) + offs(a)[i], chars(b) + offs(b)[i], (size_t)la) == 0;
  }
  return (double)same / (double)a->length;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Keys all distinct over 16 batches; names differ from batch to batch
 * and from seed to seed; values differ from seed to seed. */
static void distinct(void) {
  enum { B = 16, N = 4096 };
  fsh_batch *bs[B];
  for (int i = 0; i < B; i++) bs[i] = gen(5, 12, i, N);
  fsh_batch *other = gen(6, 12, 0, N);
  if (!other) return;
  static int64_t all[B * N];
  for (int i = 0; i < B; i++)
    if (bs[i]) memcpy(all + (size_t)i * N, keys(bs[i]), sizeof(int64_t) * N);
  qsort(all, B * N, sizeof *all, cmp_i64);
  int64_t dups = 0;
  for (int64_t i = 0; i + 1 < B * N; i++) dups += all[i] == all[i + 1];
  CHECK_EQ_INT(dups, 0);
  int64_t within = 0; /* adjacent names of one batch equal */
  for (int64_t i = 0; i + 1 < N; i++) {
    int32_t l = offs(bs[0])[i + 1] - offs(bs[0])[i];
    within += l == offs(bs[0])[i + 2] - offs(bs[0])[i + 1] && l > 3 &&
              memcmp(chars(bs[0]) + offs(bs[0])[i], chars(bs[0]) + offs(bs[0])[i + 1],
                     (size_t)l) == 0;
  }
  CHECK_EQ_INT(within, 0);
  for (int i = 1; i < B; i++)
    CHECK_MSG(same_names(bs[0], bs[i]) < 0.1, "batch %d repeats batch 0's names (%.3f)", i,
              same_names(bs[0], bs[i]));
  CHECK_MSG(same_names(bs[0], other) < 0.1, "seed 6 repeats seed 5's names");
  int64_t same_vals = 0;
  for (int64_t i = 0; i < N; i++) same_vals += vals(bs[0])[i] == vals(other)[i];
  CHECK_MSG(same_vals < 10, "seed 6 repeats seed 5's values (%lld)", (long long)same_vals);
  for (int i = 0; i < B; i++) fsh_batch_unref(bs[i]);
  fsh_batch_unref(other);
}

/* Row r is the same whatever the batching: rows 3000 .. 3999 as batch 3
 * of 1000 rows and as rows 0 .. 999 of batch 1 of 3000 rows (keys,
 * values, validity, name lengths; names too when both start a batch). */
static void batching(void) {
  const int64_t cuts[][3] = {{1000, 3, 3000}, {64, 10, 640}, {100, 7, 700}, {37, 5, 185}};
  for (int c = 0; c < 4; c++) {
    int64_t rows = cuts[c][0], first = cuts[c][2];
    fsh_batch *a = gen(3, 12, cuts[c][1], rows);
    fsh_batch *b = gen(3, 12, first / (3 * rows), 3 * rows); /* holds first? */
    if (!a || !b) goto next;
    int64_t at = first - (first / (3 * rows)) * 3 * rows; /* first's row in b */
    bool k = true, v = true, nv = true, sv = true, len = true;
    for (int64_t i = 0; i < rows; i++) {
      k &= keys(a)[i] == keys(b)[at + i];
      v &= valid_at(a->columns[1], i) == valid_at(b->columns[1], at + i) &&
           (!valid_at(a->columns[1], i) || vals(a)[i] == vals(b)[at + i]);
      nv &= valid_at(a->columns[1], i) == valid_at(b->columns[1], at + i);
      sv &= valid_at(a->columns[2], i) == valid_at(b->columns[2], at + i);
      len &= offs(a)[i + 1] - offs(a)[i] == offs(b)[at + i + 1] - offs(b)[at + i];
    }
    CHECK_MSG(k && v && nv && sv && len, "cut %d: keys %d values %d validity %d/%d lengths %d",
              c, k, v, nv, sv, len);
    if (at == 0)
      CHECK_MSG(memcmp(chars(a), chars(b), (size_t)offs(a)[rows]) == 0,
                "cut %d: names differ", c);
  next:
    fsh_batch_unref(a);
    fsh_batch_unref(b);
  }
}

/* A batch with more than 4 MiB of names writes them letter by letter:
 * same shape, same determinism. */
static void large_batch(void) {
  int64_t nulls = 0, cells = 0;
  fsh_batch *a = gen(8, 12, 1, 400000), *b = gen(8, 12, 1, 400000);
  CHECK(a && b && offs(a)[400000] > (4 << 20));
  if (a) check_shape(a, 12, &nulls, &cells);
  fsh_error diff = {{0}};
  CHECK_MSG(a && b && fsh_batch_equals(a, b, &diff), "%s", diff.message);
  fsh_batch_unref(a);
  fsh_batch_unref(b);
}

/* The documented formulas, computed here independently of the generator
 * (splitmix64, a 64-bit division for the lengths): keys, values and name
 * lengths match them row for row, whichever loops (plain or AVX-512) the
 * CPU selected, for the default span (23, the generator's shortcut) and
 * others, with and without a key range. */
static uint64_t ref_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static void reference_values(void) {
  static fsh_schema *schema;
  if (!schema) schema = fsh_synthetic_schema();
  static const int32_t avgs[3] = {12, 5, 40};
  static const int64_t ranges[3] = {0, 1000, 0};
  for (int t = 0; t < 3; t++) {
    uint64_t seed = 3 + 1000003ull * (uint64_t)t;
    int64_t rows = 1000 + 77 * t, index = 5 + t; /* first row: index * rows */
    fsh_synthetic_options o = {.seed = seed, .avg_str_len = avgs[t], .key_range = ranges[t],
                               .with_nulls = true};
    fsh_batch *b = NULL;
    fsh_error err = {{0}};
    CHECK_OK(fsh_synthetic_batch(schema, &o, index, rows, &b, &err));
    if (!b) continue;
    uint64_t span = (uint64_t)(2 * avgs[t] - 1);
    for (int64_t i = 0; i < rows; i++) {
      uint64_t row = (uint64_t)(index * rows + i);
      uint64_t k = ref_mix(seed * 3 + row);
      int64_t want_key = ranges[t] ? (int64_t)(k % (uint64_t)ranges[t]) : (int64_t)k;
      double want_val = (double)(ref_mix(seed * 5 + row) >> 11) / 9007199254740992.0;
      int64_t want_len = 1 + (int64_t)(ref_mix(seed * 11 + row) % span);
      CHECK_MSG(keys(b)[i] == want_key, "case %d row %lld: key %lld, want %lld", t, (long long)i,
                (long long)keys(b)[i], (long long)want_key);
      CHECK_MSG(vals(b)[i] == want_val, "case %d row %lld: value %.17g, want %.17g", t,
                (long long)i, vals(b)[i], want_val);
      CHECK_MSG(offs(b)[i + 1] - offs(b)[i] == want_len, "case %d row %lld: length %d, want %lld",
                t, (long long)i, offs(b)[i + 1] - offs(b)[i], (long long)want_len);
    }
    fsh_batch_unref(b);
  }
}

/* Batches equal byte for byte in every buffer (lengths, null counts). */
static void check_same(const fsh_batch *a, const fsh_batch *b) {
  CHECK_EQ_INT(a->length, b->length);
  for (int c = 0; c < 3; c++) {
    const fsh_array *x = a->columns[c], *y = b->columns[c];
    CHECK_EQ_INT(x->null_count, y->null_count);
    for (int k = 0; k < x->n_buffers; k++) {
      CHECK((x->buffers[k] == NULL) == (y->buffers[k] == NULL));
      if (!x->buffers[k] || !y->buffers[k]) continue;
      CHECK_EQ_INT(x->buffers[k]->size, y->buffers[k]->size);
      CHECK(memcmp(x->buffers[k]->data, y->buffers[k]->data, (size_t)x->buffers[k]->size) == 0);
    }
  }
}

/* fsh_synthetic_batch_refill: the same batches as fsh_synthetic_batch,
 * in the same memory while the caller alone holds them (and not when a
 * smaller batch would leave most of it unused), in new memory when
 * anything else holds a buffer -- which keeps its bytes -- and for names
 * written letter by letter (an owned chars buffer) too. */
static void refill(void) {
  static fsh_schema *schema;
  if (!schema) schema = fsh_synthetic_schema();
  fsh_error err = {{0}};
  fsh_synthetic_options o = {.seed = 9, .with_nulls = true};
  fsh_batch *b = NULL;
  CHECK_OK(fsh_synthetic_batch_refill(schema, &o, 0, 4000, &b, &err));
  if (!b) return;
  const uint8_t *key_mem = b->columns[0]->buffers[1]->data;
  for (int64_t index = 1; index < 4; index++) { /* in place */
    CHECK_OK(fsh_synthetic_batch_refill(schema, &o, index, 4000, &b, &err));
    fsh_batch *want = gen(9, 12, index, 4000);
    if (!b || !want) return;
    CHECK(b->columns[0]->buffers[1]->data == key_mem);
    CHECK_OK(fsh_batch_validate(b, true, &err));
    check_same(b, want);
    fsh_batch_unref(want);
  }
  /* a buffer held elsewhere: new memory, the held bytes untouched */
  fsh_buffer *held = fsh_buffer_ref(b->columns[1]->buffers[1]);
  fsh_buffer *copy = fsh_buffer_copy(held->data, held->size);
  CHECK_OK(fsh_synthetic_batch_refill(schema, &o, 7, 4000, &b, &err));
  if (!b || !copy) return;
  CHECK(b->columns[1]->buffers[1] != held && b->columns[0]->buffers[1]->data == key_mem);
  CHECK(memcmp(held->data, copy->data, (size_t)held->size) == 0);
  fsh_buffer_unref(held);
  fsh_buffer_unref(copy);
  fsh_batch *want = gen(9, 12, 7, 4000);
  if (want) check_same(b, want);
  fsh_batch_unref(want);
  /* the whole batch held: a new one, the old one unchanged */
  fsh_batch *old = fsh_batch_ref(b);
  CHECK_OK(fsh_synthetic_batch_refill(schema, &o, 8, 4000, &b, &err));
  CHECK(b && b != old && b->columns[0]->buffers[1]->data != old->columns[0]->buffers[1]->data);
  want = gen(9, 12, 7, 4000);
  if (want) check_same(old, want);
  fsh_batch_unref(want);
  fsh_batch_unref(old);
  /* far fewer rows: fresh buffers (a spare more than twice the size is not kept) */
  key_mem = b->columns[0]->buffers[1]->data;
  CHECK_OK(fsh_synthetic_batch_refill(schema, &o, 100, 100, &b, &err));
  want = gen(9, 12, 100, 100);
  if (b && want) {
    CHECK(b->columns[0]->buffers[1]->data != key_mem);
    check_same(b, want);
  }
  fsh_batch_unref(want);
  /* names letter by letter (past the pool's window): their own buffer, refilled */
  fsh_synthetic_options big = {.seed = 4, .avg_str_len = 300, .with_nulls = true};
  int64_t rows = 20000; /* ~6 MB of names */
  CHECK_OK(fsh_synthetic_batch_refill(schema, &big, 0, rows, &b, &err));
  CHECK_OK(fsh_synthetic_batch_refill(schema, &big, 1, rows, &b, &err));
  fsh_synthetic_options o2 = big;
  fsh_batch *w2 = NULL;
  CHECK_OK(fsh_synthetic_batch(schema, &o2, 1, rows, &w2, &err));
  if (b && w2) {
    CHECK(b->columns[2]->buffers[2]->release == NULL && b->columns[2]->buffers[2]->parent == NULL);
    CHECK_OK(fsh_batch_validate(b, true, &err));
    check_same(b, w2);
  }
  fsh_batch_unref(w2);
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(shape), TEST(deterministic), TEST(distinct), TEST(batching),
              TEST(large_batch), TEST(reference_values), TEST(refill))
