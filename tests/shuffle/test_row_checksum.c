/* test_row_checksum.c -- fsh_task_row_checksums against a naive reference
 * written from its documented definition (shuffle.h): each row's bytes
 * built in a buffer of their own and hashed with XXH3_64bits (or, past 96
 * bytes, the name seeded with the hash of the rest), summed per
 * partition. Synthetic batches with and without nulls, names short and
 * long (past 96 bytes and past the 32-byte fast copy), sliced batches
 * (offsets, a slice ending at its buffers' end), random partitions. */
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

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
    uint8_t *row = malloc(17 + name_len);
    size_t n = 0;
    for (int j = 0; j < 8; j++) row[n++] = (uint8_t)((uint64_t)kv >> (8 * j));
    row[n++] = (uint8_t)(v_ok | s_ok << 1);
    if (v_ok) {
      uint64_t bits;
      memcpy(&bits, &vv, 8);
      for (int j = 0; j < 8; j++) row[n++] = (uint8_t)(bits >> (8 * j));
    }
    uint64_t h;
    if (n + name_len <= 96) {
      if (name_len) memcpy(row + n, name, name_len);
      h = XXH3_64bits(row, n + name_len);
    } else {
      h = XXH3_64bits_withSeed(name, name_len, XXH3_64bits(row, n));
    }
    sums[part_of_row ? part_of_row[i] : 0] += h;
    free(row);
  }
}

static void check_batch(const fsh_batch *b, const char *what) {
  enum { PARTS = 7 };
  int32_t *parts = STU_OK(malloc(sizeof *parts * (size_t)(b->length + 1)));
  for (int64_t i = 0; i < b->length; i++) parts[i] = (int32_t)((uint64_t)rand() % PARTS);
  uint64_t want[PARTS] = {0}, got[PARTS] = {0}, want1 = 0, got1 = 0;
  reference(b, parts, want);
  fsh_task_row_checksums(b, parts, got);
  for (int p = 0; p < PARTS; p++)
    CHECK_MSG(got[p] == want[p], "%s: partition %d: %016llx, the definition gives %016llx",
              what, p, (unsigned long long)got[p], (unsigned long long)want[p]);
  reference(b, NULL, &want1);
  fsh_task_row_checksums(b, NULL, &got1);
  CHECK_MSG(got1 == want1, "%s: all rows: %016llx, the definition gives %016llx", what,
            (unsigned long long)got1, (unsigned long long)want1);
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

FSH_TEST_MAIN(TEST(matches_definition))
