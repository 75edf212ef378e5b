/* test_plan_checksum.c -- plan_row_checksum (the row checksum plan-fragment
 * tasks report for what they write and read) against the naive reference
 * in plan_checksum_ref.h written from its definition: the every-type
 * sample batch (nulls, dictionaries, unions, nested, wide decimals) whole
 * and sliced, synthetic batches with short and long names, with and
 * without nulls. Then what the checksum is for: the same rows in another
 * order or batching give the same sum; a changed key, value or name byte,
 * a value or name turned null, two rows exchanging one column's values, a
 * dropped row and a duplicated row each change it. */
#include <stdlib.h>

#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "exec/plan_run_internal.h"
#include "kernels/kernel_helpers.h"
#include "plan_checksum_ref.h"

static uint64_t sum_of(const fsh_batch *b) {
  uint64_t s = 0;
  fsh_error err;
  CHECK_OK(plan_row_checksum(b, &s, &err));
  return s;
}

static void check_batch(const fsh_batch *b, const char *what) {
  uint64_t got = sum_of(b), want = pcr_checksum(b);
  CHECK_MSG(got == want, "%s: %016llx, the definition gives %016llx", what,
            (unsigned long long)got, (unsigned long long)want);
}

static void matches_definition(void) {
  /* every type; concatenated copies past one chunk of rows, then sliced */
  fsh_batch *one = fsh_sample_all_types();
  check_batch(one, "every type");
  for (int64_t i = 0; i < one->length; i++) {
    fsh_batch *sl = SBH_OK(fsh_batch_slice(one, i, one->length - i));
    check_batch(sl, "every type, sliced");
    fsh_batch_unref(sl);
  }
  fsh_batch_unref(one);
  fsh_batch *big = kh_big_batch(64, 3); /* 442 rows */
  check_batch(big, "every type x 64, sliced by 3");
  fsh_batch_unref(big);

  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  const int32_t lens[] = {0, 3, 12, 40};
  for (int li = 0; li < 4; li++)
    for (int nulls = 0; nulls < 2; nulls++) {
      fsh_synthetic_options o = {.seed = 7 + (uint64_t)li, .avg_str_len = lens[li],
                                 .with_nulls = nulls != 0};
      fsh_batch *b = NULL;
      fsh_error err = {{0}};
      CHECK_OK(fsh_synthetic_batch(schema, &o, 2, 2500, &b, &err)); /* > 2 chunks */
      if (!b) continue;
      char what[96];
      snprintf(what, sizeof what, "synthetic, avg name length %d, nulls %d", lens[li], nulls);
      check_batch(b, what);
      const int64_t cuts[][2] = {{1, 1500}, {1023, 1025}, {2490, 10}, {0, 0}};
      for (int c = 0; c < 4; c++) {
        fsh_batch *sl = SBH_OK(fsh_batch_slice(b, cuts[c][0], cuts[c][1]));
        check_batch(sl, what);
        fsh_batch_unref(sl);
      }
      fsh_batch_unref(b);
    }
  fsh_schema_unref(schema);
}

/* ---- what the checksum catches ----------------------------------------- */

enum { ROWS = 1500 };

static fsh_batch *take(fsh_batch *b, const int64_t *idx, int64_t n) {
  fsh_batch *out = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_take(b, idx, n, &out, &err));
  return SBH_OK(out);
}

/* Column c from `from`, the others from `base`. */
static fsh_batch *with_column(fsh_batch *base, fsh_batch *from, int c) {
  fsh_batch *out = SBH_OK(fsh_batch_new(base->schema, base->length));
  for (int i = 0; i < base->n_columns; i++)
    out->columns[i] = fsh_array_ref((i == c ? from : base)->columns[i]);
  return out;
}

static bool valid(const fsh_array *a, int64_t i) {
  return !a->buffers[0] || fsh_bit_get(a->buffers[0]->data, a->offset + i);
}

static void expect_changed(fsh_batch *m, uint64_t want, const char *what) {
  uint64_t got = sum_of(m), ref = pcr_checksum(m);
  CHECK_MSG(got == ref, "%s: the checksum %016llx differs from the definition's %016llx", what,
            (unsigned long long)got, (unsigned long long)ref);
  CHECK_MSG(got != want, "%s: the checksum did not change", what);
}

static void same_rows_same_sum(void) {
  fsh_batch *b = kh_big_batch(40, 0); /* every type, 280 rows */
  uint64_t want = sum_of(b);
  int64_t n = b->length, *rev = malloc(sizeof *rev * (size_t)n);
  for (int64_t i = 0; i < n; i++) rev[i] = n - 1 - i;
  fsh_batch *r = take(b, rev, n);
  CHECK_MSG(sum_of(r) == want, "every type: reversed rows change the checksum");
  fsh_batch *lo = SBH_OK(fsh_batch_slice(r, 0, 101)), *hi = SBH_OK(fsh_batch_slice(r, 101, n - 101));
  CHECK_MSG(sum_of(lo) + sum_of(hi) == want, "every type: two batches' sums do not add up");
  fsh_batch *parts[2] = {hi, lo}, *cat = NULL;
  fsh_error err;
  CHECK_OK(fsh_concat(parts, 2, &cat, &err));
  if (cat) CHECK_MSG(sum_of(cat) == want, "every type: concatenated pieces change the checksum");
  fsh_batch_unref(cat);
  fsh_batch_unref(lo);
  fsh_batch_unref(hi);
  fsh_batch_unref(r);
  fsh_batch_unref(b);
  free(rev);
}

/* plan_row_checksum_parts (a map task's rows written straight into its
 * writer): each partition's sum equals plan_row_checksum of what
 * fsh_scatter puts in that partition, and the definition's sum of that
 * part; every type (past a chunk of rows, sliced) and synthetic rows,
 * random partition ids, some partitions empty; sums add to what is in
 * them already. */
static void parts_match_scatter(void) {
  fsh_batch *big = kh_big_batch(64, 3);
  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  fsh_synthetic_options o = {.seed = 9, .avg_str_len = 20, .with_nulls = true};
  fsh_batch *syn = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_synthetic_batch(schema, &o, 2, 3000, &syn, &err));
  fsh_batch *cases[2] = {big, syn};
  enum { NP = 7 };
  srand(5);
  for (int k = 0; k < 2; k++) {
    fsh_batch *b = cases[k];
    if (!b) continue;
    int32_t *pids = malloc(sizeof *pids * (size_t)b->length);
    for (int64_t i = 0; i < b->length; i++) pids[i] = (rand() % 5) * (NP / 5 + 1) % NP;
    uint64_t sums[NP], start[NP];
    for (int p = 0; p < NP; p++) sums[p] = start[p] = 0x1234 * (uint64_t)p;
    CHECK_OK(plan_row_checksum_parts(b, pids, sums, &err));
    fsh_batch *parts[NP] = {0};
    CHECK_OK(fsh_scatter(b, pids, NP, parts, &err));
    int empty = 0;
    for (int p = 0; p < NP; p++) {
      uint64_t want = start[p] + (parts[p] ? sum_of(parts[p]) : 0);
      CHECK_MSG(sums[p] == want, "case %d partition %d: %016llx, its scatter part's %016llx", k,
                p, (unsigned long long)sums[p], (unsigned long long)want);
      if (parts[p])
        CHECK(sum_of(parts[p]) == pcr_checksum(parts[p]));
      empty += !parts[p];
      fsh_batch_unref(parts[p]);
    }
    CHECK(empty > 0 && empty < NP); /* the ids leave some partitions empty */
    free(pids);
  }
  fsh_batch_unref(syn);
  fsh_batch_unref(big);
  fsh_schema_unref(schema);
}

static void catches_changes(void) {
  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  const int32_t lens[] = {12, 60};
  for (int li = 0; li < 2; li++) {
    fsh_synthetic_options o = {.seed = 43, .avg_str_len = lens[li], .with_nulls = true};
    fsh_batch *b = NULL;
    fsh_error err = {{0}};
    CHECK_OK(fsh_synthetic_batch(schema, &o, 0, ROWS, &b, &err));
    if (!b) continue;
    const fsh_array *v = b->columns[1], *s = b->columns[2];
    uint64_t want = sum_of(b);
    int64_t idx[ROWS + 1];
    for (int64_t i = 0; i < ROWS; i++) idx[i] = i;
    /* rows to change (past the first chunk): a valid value, a non-empty name */
    int64_t rv = -1, rs = -1;
    for (int64_t i = 1100; i < ROWS && (rv < 0 || rs < 0); i++) {
      const int32_t *offs = (const int32_t *)s->buffers[1]->data + s->offset;
      if (rv < 0 && valid(v, i)) rv = i;
      if (rs < 0 && valid(s, i) && offs[i + 1] > offs[i] && i != rv) rs = i;
    }
    CHECK(rv >= 0 && rs >= 0);
    if (rv < 0 || rs < 0) goto next;
    for (int bit = 0; bit < 64; bit += 9) {
      fsh_batch *m = take(b, idx, ROWS);
      ((uint64_t *)m->columns[0]->buffers[1]->data)[rs] ^= 1ull << bit;
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
      if (a->buffers[0]) {
        fsh_bit_set(a->buffers[0]->data, c == 1 ? rv : rs, false);
        a->null_count = -1;
        expect_changed(m, want, c == 1 ? "a value turned null" : "a name turned null");
      }
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

FSH_TEST_MAIN(TEST(matches_definition), TEST(same_rows_same_sum), TEST(parts_match_scatter),
              TEST(catches_changes))
