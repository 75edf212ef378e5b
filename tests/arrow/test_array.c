/* test_array.c -- arrays and batches: lifecycle, zero-copy slices (shared
 * buffers, children and dictionaries), null counts of sliced bitmaps,
 * fsh_bitmap_count against a naive count, batch slices. */
#include <stdint.h>

#include "validate_helpers.h"

/* xorshift64: deterministic pseudo-random bits. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static int64_t naive_count(const uint8_t *bits, int64_t offset, int64_t length) {
  int64_t n = 0;
  for (int64_t i = offset; i < offset + length; i++) n += (bits[i / 8] >> (i % 8)) & 1;
  return n;
}

static void test_new_unref(void) {
  fsh_array *a = fsh_array_new(3, 2);
  CHECK(a != NULL);
  CHECK_EQ_INT(a->n_buffers, 3);
  CHECK_EQ_INT(a->n_children, 2);
  CHECK(a->buffers[0] == NULL && a->children[0] == NULL && a->children[1] == NULL);
  CHECK(a->dictionary == NULL && a->length == 0 && a->offset == 0);
  CHECK_EQ_INT(atomic_load(&a->refcount), 1);
  CHECK(fsh_array_ref(a) == a);
  fsh_array_unref(a);
  fsh_array_unref(a); /* frees, with NULL slots */
  fsh_array_unref(NULL);
  CHECK(fsh_array_new(4, 0) == NULL);
  CHECK(fsh_array_new(-1, 0) == NULL);
  CHECK(fsh_array_new(0, -1) == NULL);
  a = fsh_array_new(0, 0);
  CHECK(a != NULL && a->children == NULL);
  fsh_array_unref(a);
}

static void test_slice_shares(void) {
  /* struct<x: int32> with validity, plus a dictionary on top to check it
   * is shared too (the shape need not be valid here) */
  int32_t v[] = {1, 2, 3, 4, 5, 6, 7, 8};
  fsh_array *a = tb_array(1, 1, 8, 3, tb_bits("10110110"), NULL, NULL);
  a->children[0] = tb_int32(v, 8);
  a->dictionary = tb_int32(v, 2);
  fsh_array *s = fsh_array_slice(a, 3, 4);
  CHECK(s != NULL);
  CHECK(s != a);
  CHECK(s->buffers[0] == a->buffers[0]); /* same buffer objects: no copy */
  CHECK(s->children[0] == a->children[0]);
  CHECK(s->dictionary == a->dictionary);
  CHECK_EQ_INT(atomic_load(&a->buffers[0]->refcount), 2);
  CHECK_EQ_INT(atomic_load(&a->children[0]->refcount), 2);
  CHECK_EQ_INT(atomic_load(&a->dictionary->refcount), 2);
  CHECK_EQ_INT(s->offset, 3);
  CHECK_EQ_INT(s->length, 4);
  CHECK_EQ_INT(s->children[0]->offset, 0); /* children keep their own offset */
  CHECK_EQ_INT(fsh_array_null_count(s), 1); /* bits 3..6: 1 0 1 1 */
  /* a slice of a slice accumulates offsets */
  fsh_array *ss = fsh_array_slice(s, 1, 2);
  CHECK(ss != NULL);
  CHECK_EQ_INT(ss->offset, 4);
  CHECK_EQ_INT(ss->length, 2);
  CHECK(ss->buffers[0] == a->buffers[0]);
  CHECK(!fsh_array_is_valid(ss, 0));
  CHECK(fsh_array_is_valid(ss, 1));
  CHECK_EQ_INT(fsh_array_null_count(ss), 1);
  /* bounds */
  CHECK(fsh_array_slice(s, 0, 5) == NULL);
  CHECK(fsh_array_slice(s, 5, 0) == NULL);
  CHECK(fsh_array_slice(s, -1, 1) == NULL);
  CHECK(fsh_array_slice(s, 1, -1) == NULL);
  CHECK(fsh_array_slice(s, INT64_MAX, 1) == NULL);
  fsh_array *empty = fsh_array_slice(s, 4, 0);
  CHECK(empty != NULL && empty->length == 0);
  CHECK_EQ_INT(fsh_array_null_count(empty), 0);
  fsh_array_unref(empty);
  /* the original can go first */
  fsh_array_unref(a);
  fsh_array_unref(s);
  CHECK_EQ_INT(atomic_load(&ss->buffers[0]->refcount), 1);
  CHECK_EQ_INT(ss->children[0]->length, 8); /* ASan: alive */
  fsh_array_unref(ss);
}

static void test_slice_null_count_propagation(void) {
  int32_t v[] = {1, 2, 3, 4};
  fsh_array *a = tb_array(2, 0, 4, 0, NULL, tb_bytes(v, sizeof v), NULL);
  fsh_array *s = fsh_array_slice(a, 1, 2);
  CHECK_EQ_INT(s->null_count, 0); /* no nulls anywhere: known */
  fsh_array_unref(s);
  fsh_array_unref(a);
  a = tb_array(2, 0, 4, 2, tb_bits("1010"), tb_bytes(v, sizeof v), NULL);
  s = fsh_array_slice(a, 0, 4);
  CHECK_EQ_INT(s->null_count, 2); /* whole range: same count */
  fsh_array_unref(s);
  s = fsh_array_slice(a, 1, 3);
  CHECK(s->null_count == -1 || s->null_count == 2);
  CHECK_EQ_INT(fsh_array_null_count(s), 2);
  CHECK_EQ_INT(s->null_count, 2); /* cached */
  fsh_array_unref(s);
  fsh_array_unref(a);
  /* the null type counts every slot */
  a = tb_array(0, 0, 5, 5, NULL, NULL, NULL);
  s = fsh_array_slice(a, 1, 3);
  CHECK_EQ_INT(fsh_array_null_count(s), 3);
  CHECK(!fsh_array_is_valid(s, 0));
  fsh_array_unref(s);
  fsh_array_unref(a);
}

/* Null counts of slices at every offset of random bitmaps match a naive
 * count (odd offsets cross byte boundaries). */
static void test_sliced_null_counts(void) {
  enum { N = 300 };
  for (int round = 0; round < 5; round++) {
    fsh_buffer *bits = fsh_buffer_new(fsh_bytes_for_bits(N), true);
    for (int i = 0; i < N; i++) fsh_bit_set(bits->data, i, (rng() % 4) != 0 || round == 4);
    if (round == 3) memset(bits->data, 0, (size_t)bits->size); /* all null */
    int64_t nulls = N - naive_count(bits->data, 0, N);
    fsh_array *a = tb_array(2, 0, N, nulls, bits, fsh_buffer_new(N * 4, true), NULL);
    int bad = 0;
    for (int64_t off = 0; off < N; off += 1 + (off > 70) * 6) {
      for (int64_t len = 0; off + len <= N; len += 1 + (len > 70) * 12) {
        fsh_array *s = fsh_array_slice(a, off, len);
        int64_t want = len - naive_count(bits->data, off, len);
        if (fsh_array_null_count(s) != want) bad++;
        if (len > 0 && fsh_array_is_valid(s, len - 1) != fsh_bit_get(bits->data, off + len - 1))
          bad++;
        fsh_array_unref(s);
      }
    }
    CHECK_EQ_INT(bad, 0);
    fsh_array_unref(a);
  }
}

static void test_bitmap_count_random(void) {
  enum { BYTES = 64 };
  uint8_t bits[BYTES];
  int bad = 0;
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < BYTES; i++) bits[i] = (uint8_t)rng();
    if (round == 0) memset(bits, 0xff, sizeof bits);
    if (round == 1) memset(bits, 0, sizeof bits);
    for (int64_t off = 0; off <= 200; off++)
      for (int64_t len = 0; off + len <= BYTES * 8; len += 1 + (len > 140) * 8)
        if (fsh_bitmap_count(bits, off, len) != naive_count(bits, off, len)) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  /* the count reads no byte past the last bit (ASan on an exact buffer) */
  uint8_t *exact = malloc(9);
  memset(exact, 0xff, 9);
  CHECK_EQ_INT(fsh_bitmap_count(exact, 3, 69), 69);
  CHECK_EQ_INT(fsh_bitmap_count(exact, 0, 72), 72);
  free(exact);
}

static void test_batch_slice(void) {
  fsh_schema *schema = fsh_schema_new(2);
  CHECK(fsh_field_init(&schema->fields[0], "a", FSH_TYPE_INT32, true) == 0);
  CHECK(fsh_field_init(&schema->fields[1], "b", FSH_TYPE_INT32, true) == 0);
  CHECK_EQ_INT(atomic_load(&schema->refcount), 1);
  fsh_batch *b = fsh_batch_new(schema, 4);
  CHECK(b != NULL);
  CHECK(b->schema == schema);
  CHECK_EQ_INT(atomic_load(&schema->refcount), 2);
  CHECK_EQ_INT(b->n_columns, 2);
  CHECK(b->columns[0] == NULL && b->columns[1] == NULL);
  int32_t v[] = {1, 2, 3, 4};
  b->columns[0] = tb_int32(v, 4);
  b->columns[1] = tb_array(2, 0, 4, 1, tb_bits("1101"), tb_bytes(v, sizeof v), NULL);
  fsh_batch *s = fsh_batch_slice(b, 1, 3);
  CHECK(s != NULL);
  CHECK(s->schema == schema);
  CHECK_EQ_INT(s->length, 3);
  CHECK_EQ_INT(s->columns[1]->offset, 1);
  CHECK(s->columns[1]->buffers[1] == b->columns[1]->buffers[1]);
  CHECK_EQ_INT(fsh_array_null_count(s->columns[1]), 1);
  CHECK(fsh_batch_slice(b, 2, 3) == NULL);
  CHECK(fsh_batch_slice(b, -1, 1) == NULL);
  fsh_schema_unref(schema); /* the batches keep it */
  fsh_batch_unref(b);
  CHECK_EQ_INT(atomic_load(&s->schema->refcount), 1);
  CHECK(strcmp(s->schema->fields[1].name, "b") == 0);
  CHECK(fsh_batch_ref(s) == s);
  fsh_batch_unref(s);
  fsh_batch_unref(s);
  fsh_batch_unref(NULL);
  CHECK(fsh_batch_new(NULL, 0) == NULL);

  /* an empty schema */
  schema = fsh_schema_new(0);
  b = fsh_batch_new(schema, 10);
  CHECK(b != NULL && b->n_columns == 0);
  s = fsh_batch_slice(b, 5, 5);
  CHECK(s != NULL && s->length == 5);
  fsh_batch_unref(s);
  fsh_batch_unref(b);
  fsh_schema_unref(schema);
  CHECK(fsh_schema_new(-1) == NULL);
}

static void test_union_null_count(void) {
  /* Unions have no validity bitmap: they are built with null_count 0 (the
   * contract in arrow.h), and slices at any offset keep it 0 instead of
   * counting bits of the type-id buffer. */
  int8_t ids[] = {0, 0, 0, 0};
  fsh_array *u = tb_array(1, 0, 4, 0, tb_bytes(ids, 4), NULL, NULL);
  for (int64_t off = 0; off < 4; off++) {
    fsh_array *s = fsh_array_slice(u, off, 4 - off);
    CHECK_EQ_INT(fsh_array_null_count(s), 0);
    fsh_array_unref(s);
  }
  fsh_array_unref(u);
}

FSH_TEST_MAIN(TEST(test_new_unref), TEST(test_slice_shares), TEST(test_slice_null_count_propagation),
              TEST(test_sliced_null_counts), TEST(test_bitmap_count_random),
              TEST(test_batch_slice), TEST(test_union_null_count))
