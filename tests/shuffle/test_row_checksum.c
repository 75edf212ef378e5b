/* test_row_checksum.c -- fsh_task_row_checksums against a naive reference
 * written from its documented definition (shuffle.h): each row's 56-byte
 * record built in a buffer of its own and hashed with XXH3_64bits, summed
 * per partition; each hashing path (the AVX-512 and AVX2 ones where the
 * CPU has them, the scalar one). Synthetic batches with and without nulls, names short
 * and long (past the 32 bytes kept in the record), sliced batches (offsets,
 * a slice ending at its buffers' end), random partitions. Then what the
 * checksum is for: the same rows in another order or batching give the
 * same sum; a changed key, value or name byte, a value or name turned
 * null, two rows exchanging one column's values, a dropped row and a
 * duplicated row each change it. */
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"

/* The definition, row by row. */
static void reference(const fsh_batch *b, const int32_t *part_of_row, uint64_t *sums) {
  const fsh_array *k = b->columns[0], *v = b->columns[1], *s = b->columns[2];
  for (int64_t i = 0; i < b->length; i++) {
    int64_t kv = ((const int64_t *)k->buffers[1]->data)[k->offset + i];
    double vv = ((const double *)v->buffers[1]->data)[v->offset + i];
    bool v_ok = !v->buffers[0] || fsh_bit_get(v->buffers[0]->data, v->offset + i);
    bool s_ok = !s->buffers[0] || fsh_bit_get(s->buffers[0]->data, s->offset + i);
    const int32_t *offs = (const int32_t *)s->buffers[1]->data + s->offset;
    size_t name_len = s_ok ? (size_t)(offs[i + 1] - offs[i]) : 0;
    const uint8_t *name = s->buffers[2] ? s->buffers[2]->data + offs[i] : NULL;
    uint8_t rec[56] = {0};
    uint64_t bits = 0, flags = (uint64_t)v_ok | (uint64_t)s_ok << 1;
    memcpy(&bits, &vv, 8);
    for (int j = 0; j < 8; j++) rec[j] = (uint8_t)((uint64_t)kv >> (8 * j));
    for (int j = 0; v_ok && j < 8; j++) rec[8 + j] = (uint8_t)(bits >> (8 * j));
    if (name_len > 32) {
      uint64_t hn = XXH3_64bits(name, name_len);
      for (int j = 0; j < 8; j++) rec[16 + j] = (uint8_t)(hn >> (8 * j));
      flags |= 4;
    } else if (name_len) {
      memcpy(rec + 16, name, name_len);
    }
    uint64_t trailer = flags | (uint64_t)name_len << 8;
    for (int j = 0; j < 8; j++) rec[48 + j] = (uint8_t)(trailer >> (8 * j));
    sums[part_of_row ? part_of_row[i] : 0] += XXH3_64bits(rec, sizeof rec);
  }
}

/* Every hashing path (AVX-512, AVX2 when the CPU has them, and the scalar
 * one) against the definition, per partition and over all rows. */
static void check_batch(const fsh_batch *b, const char *what) {
  enum { PARTS = 7 };
  int32_t *parts = STU_OK(malloc(sizeof *parts * (size_t)(b->length + 1)));
  for (int64_t i = 0; i < b->length; i++) parts[i] = (int32_t)((uint64_t)rand() % PARTS);
  uint64_t want[PARTS] = {0}, want1 = 0;
  reference(b, parts, want);
  reference(b, NULL, &want1);
  static const char *names[] = {"scalar path", "AVX2 path", "AVX-512 path"};
  for (int asked = FSH_ROWSUM_SCALAR; asked <= FSH_ROWSUM_AVX512; asked++) {
    uint64_t got[PARTS] = {0}, got1 = 0;
    fsh_rowsum_path ran = fsh_task_row_checksums_path(b, parts, got, (fsh_rowsum_path)asked);
    (void)fsh_task_row_checksums_path(b, NULL, &got1, (fsh_rowsum_path)asked);
    const char *path = names[ran];
    CHECK_MSG((int)ran <= asked, "%s: the %s ran when the %s was asked for", what, path,
              names[asked]);
    static bool told[3];
    if ((int)ran != asked && !told[asked]) {
      told[asked] = true;
      printf("  (this CPU has no %s: the %s checked instead)\n", names[asked], path);
    }
    for (int p = 0; p < PARTS; p++)
      CHECK_MSG(got[p] == want[p], "%s, %s: partition %d: %016llx, the definition gives %016llx",
                what, path, p, (unsigned long long)got[p], (unsigned long long)want[p]);
    CHECK_MSG(got1 == want1, "%s, %s: all rows: %016llx, the definition gives %016llx", what,
              path, (unsigned long long)got1, (unsigned long long)want1);
  }
  uint64_t got[PARTS] = {0};
  fsh_task_row_checksums(b, parts, got); /* the dispatched path */
  for (int p = 0; p < PARTS; p++)
    CHECK_MSG(got[p] == want[p], "%s: fsh_task_row_checksums: partition %d differs", what, p);
  free(parts);
}

static void matches_definition(void) {
  fsh_schema *schema = STU_OK(fsh_synthetic_schema());
  const int32_t lens[] = {1, 4, 12, 20, 40, 90};
  for (int li = 0; li < 6; li++)
    for (int nulls = 0; nulls < 2; nulls++) {
      fsh_synthetic_options o = {.seed = 5 + (uint64_t)li, .avg_str_len = lens[li],
                                 .with_nulls = nulls != 0};
      fsh_batch *b = NULL;
      fsh_error err = {{0}};
      CHECK_OK(fsh_synthetic_batch(schema, &o, 3, 2000, &b, &err));
      if (!b) continue;
      char what[96];
      snprintf(what, sizeof what, "avg name length %d, nulls %d", lens[li], nulls);
      check_batch(b, what);
      /* slices: inside, and ending where the buffers end */
      const int64_t cuts[][2] = {{1, 500}, {777, 3}, {1990, 10}, {0, 0}};
      for (int c = 0; c < 4; c++) {
        fsh_batch *sl = STU_OK(fsh_batch_slice(b, cuts[c][0], cuts[c][1]));
        char w2[160];
        snprintf(w2, sizeof w2, "%s, slice [%lld, +%lld)", what, (long long)cuts[c][0],
                 (long long)cuts[c][1]);
        check_batch(sl, w2);
        fsh_batch_unref(sl);
      }
      fsh_batch_unref(b);
    }
  fsh_schema_unref(schema);
}

/* ---- what the checksum catches ----------------------------------------- */

enum { ROWS = 1000 };

static uint64_t sum_of(const fsh_batch *b) {
  uint64_t s = 0;
  fsh_task_row_checksums(b, NULL, &s);
  return s;
}

/* Rows idx[0, n) of b as a batch of its own (fresh buffers, to mutate). */
static fsh_batch *take(fsh_batch *b, const int64_t *idx, int64_t n) {
  fsh_batch *out = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_take(b, idx, n, &out, &err));
  return STU_OK(out);
}

/* Column c from `from`, the others from `base`. */
static fsh_batch *with_column(fsh_batch *base, fsh_batch *from, int c) {
  fsh_batch *out = STU_OK(fsh_batch_new(base->schema, base->length));
  for (int i = 0; i < 3; i++) out->columns[i] = fsh_array_ref((i == c ? from : base)->columns[i]);
  return out;
}

static bool valid(const fsh_array *a, int64_t i) {
  return !a->buffers[0] || fsh_bit_get(a->buffers[0]->data, a->offset + i);
}

static int32_t name_len(const fsh_array *s, int64_t i) {
  const int32_t *o = (const int32_t *)s->buffers[1]->data + s->offset;
  return o[i + 1] - o[i];
}

static void expect_changed(fsh_batch *m, uint64_t want, const char *what) {
  uint64_t got = sum_of(m), ref = 0;
  reference(m, NULL, &ref);
  CHECK_MSG(got == ref, "%s: the checksum %016llx differs from the definition's %016llx", what,
            (unsigned long long)got, (unsigned long long)ref);
  CHECK_MSG(got != want, "%s: the checksum did not change", what);
}

static void catches_changes(void) {
  fsh_schema *schema = STU_OK(fsh_synthetic_schema());
  const int32_t lens[] = {12, 60};
  for (int li = 0; li < 2; li++) {
    fsh_synthetic_options o = {.seed = 41, .avg_str_len = lens[li], .with_nulls = true};
    fsh_batch *b = NULL;
    fsh_error err = {{0}};
    CHECK_OK(fsh_synthetic_batch(schema, &o, 0, ROWS, &b, &err));
    if (!b) continue;
    const fsh_array *v = b->columns[1], *s = b->columns[2];
    uint64_t want = sum_of(b);
    int64_t idx[ROWS + 1];
    for (int64_t i = 0; i < ROWS; i++) idx[i] = i;

    /* the same rows reversed, and split in two batches: the same sum */
    int64_t rev[ROWS];
    for (int64_t i = 0; i < ROWS; i++) rev[i] = ROWS - 1 - i;
    fsh_batch *r = take(b, rev, ROWS);
    CHECK_MSG(sum_of(r) == want, "avg %d: reversed rows change the checksum", lens[li]);
    fsh_batch *lo = STU_OK(fsh_batch_slice(r, 0, 377)), *hi = STU_OK(fsh_batch_slice(r, 377, ROWS - 377));
    CHECK_MSG(sum_of(lo) + sum_of(hi) == want, "avg %d: two batches' sums do not add up", lens[li]);
    fsh_batch_unref(lo);
    fsh_batch_unref(hi);
    fsh_batch_unref(r);

    /* rows to change: a valid value, a valid name (non-empty; with avg 60
     * one past the 32 bytes kept in the record) */
    int64_t rv = -1, rs = -1;
    for (int64_t i = 0; i < ROWS && (rv < 0 || rs < 0); i++) {
      if (rv < 0 && valid(v, i)) rv = i;
      if (rs < 0 && valid(s, i) && name_len(s, i) > (lens[li] > 32 ? 32 : 0) && i != rv) rs = i;
    }
    CHECK(rv >= 0 && rs >= 0);
    if (rv < 0 || rs < 0) goto next;
    for (int bit = 0; bit < 64; bit += 21) {
      fsh_batch *m = take(b, idx, ROWS);
      ((uint64_t *)m->columns[0]->buffers[1]->data)[500] ^= 1ull << bit;
      expect_changed(m, want, "a key bit flipped");
      fsh_batch_unref(m);
      m = take(b, idx, ROWS);
      ((uint64_t *)m->columns[1]->buffers[1]->data)[rv] ^= 1ull << bit;
      expect_changed(m, want, "a value bit flipped");
      fsh_batch_unref(m);
    }
    {
      fsh_batch *m = take(b, idx, ROWS);
      const int32_t *offs = (const int32_t *)m->columns[2]->buffers[1]->data;
      m->columns[2]->buffers[2]->data[offs[rs + 1] - 1] ^= 0x20; /* its last byte */
      expect_changed(m, want, "a name byte changed");
      fsh_batch_unref(m);
    }
    for (int c = 1; c < 3; c++) { /* a valid value / name turned null */
      fsh_batch *m = take(b, idx, ROWS);
      fsh_array *a = m->columns[c];
      CHECK(a->buffers[0] != NULL);
      if (!a->buffers[0]) {
        fsh_batch_unref(m);
        continue;
      }
      fsh_bit_set(a->buffers[0]->data, c == 1 ? rv : rs, false);
      a->null_count++;
      expect_changed(m, want, c == 1 ? "a value turned null" : "a name turned null");
      fsh_batch_unref(m);
    }
    for (int c = 0; c < 3; c++) { /* rows rv and rs exchange column c's values */
      int64_t sw[ROWS];
      memcpy(sw, idx, sizeof sw);
      sw[rv] = rs, sw[rs] = rv;
      fsh_batch *same = take(b, idx, ROWS), *swapped = take(b, sw, ROWS);
      fsh_batch *m = with_column(same, swapped, c);
      char what[64];
      snprintf(what, sizeof what, "two rows exchanged column %d", c);
      expect_changed(m, want, what);
      fsh_batch_unref(m);
      fsh_batch_unref(same);
      fsh_batch_unref(swapped);
    }
    { /* a row dropped, a row duplicated */
      int64_t d[ROWS + 1];
      for (int64_t i = 0, j = 0; i < ROWS; i++)
        if (i != rs) d[j++] = i;
      fsh_batch *m = take(b, d, ROWS - 1);
      expect_changed(m, want, "a row dropped");
      fsh_batch_unref(m);
      memcpy(d, idx, sizeof(int64_t) * ROWS);
      d[ROWS] = rv;
      m = take(b, d, ROWS + 1);
      expect_changed(m, want, "a row duplicated");
      fsh_batch_unref(m);
    }
  next:
    fsh_batch_unref(b);
  }
  fsh_schema_unref(schema);
}

FSH_TEST_MAIN(TEST(matches_definition), TEST(catches_changes))
