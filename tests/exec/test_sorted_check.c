/* test_sorted_check.c -- fsh_sorted_check (the streamed check of a sort's
 * result that `bench ops` runs instead of holding the result): a synthetic
 * table (keys with many ties) sorted by fsh_sort_batch and cut into batches
 * over three partitions passes -- its rows and row checksum equal the
 * unsorted input's (fsh_plan_batch_checksum, against plan_row_checksum
 * of the input) and it is in order. Every corruption is then fed and the
 * check's answer compared with a naive reference computed here from the
 * fed stream (the first row whose key is below the previous one, over the
 * keys of every fed batch in order; rows; checksum changed or not): two
 * rows swapped inside a batch, two batches swapped (the disorder at a
 * batch boundary), two partitions' contents swapped (at a partition
 * boundary), a row dropped, a row duplicated, a value changed. A partition
 * read again after a bad first attempt (sink NULL again) rolls back to the
 * clean state; a descending order; a float key with nulls (the general
 * comparison); argument errors. */
#include <stdlib.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/workloads.h>

#include "exec/plan_run_internal.h"
#include "kernels/kernel_helpers.h"

enum { ROWS = 6000, PARTS = 3 };

/* One fed batch: partition and rows [start, start + len) of a batch. */
typedef struct piece {
  int32_t part;
  fsh_batch *b; /* borrowed */
  int64_t start, len;
} piece;

static fsh_batch *sorted_input(fsh_batch **unsorted, bool descending) {
  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  fsh_synthetic_options o = {.seed = 11, .key_range = 300}; /* ~20 rows a key */
  fsh_batch *b = NULL, *s = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_synthetic_batch(schema, &o, 0, ROWS, &b, &err));
  int32_t key = 0;
  fsh_sort_key ord = {descending, false};
  CHECK_OK(fsh_sort_batch(b, &key, 1, &ord, &s, &err));
  fsh_schema_unref(schema);
  *unsorted = b;
  return SBH_OK(s);
}

static int64_t key_at(const fsh_batch *b, int64_t i) {
  const fsh_array *a = b->columns[0];
  return ((const int64_t *)(const void *)a->buffers[1]->data)[a->offset + i];
}

/* The naive reference over the fed stream: the first row (global index)
 * whose key is below (above when descending) the previous row's, or -1. */
static int64_t naive_disorder(const piece *ps, int n, bool descending) {
  int64_t row = 0, prev = 0;
  bool have = false;
  for (int i = 0; i < n; i++)
    for (int64_t r = 0; r < ps[i].len; r++, row++) {
      int64_t k = key_at(ps[i].b, ps[i].start + r);
      if (have && (descending ? k > prev : k < prev)) return row;
      prev = k, have = true;
    }
  return -1;
}

/* Feeds ps[0, n) (each partition begun by a NULL) to a new check. */
static void feed(const piece *ps, int n, bool descending, fsh_sorted_check_result *out) {
  fsh_sorted_check *c = NULL;
  fsh_error err = {{0}};
  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  int32_t key = 0;
  fsh_sort_key ord = {descending, false};
  CHECK_OK(fsh_sorted_check_new(schema, &key, 1, &ord, &c, &err));
  fsh_schema_unref(schema);
  int32_t part = -1;
  for (int i = 0; i < n && c; i++) {
    while (part < ps[i].part) CHECK_OK(fsh_sorted_check_sink(c, ++part, NULL, &err));
    fsh_batch *sl = SBH_OK(fsh_batch_slice(ps[i].b, ps[i].start, ps[i].len));
    CHECK_OK(fsh_sorted_check_sink(c, part, sl, &err));
    fsh_batch_unref(sl);
  }
  if (c) fsh_sorted_check_get(c, out);
  fsh_sorted_check_free(c);
}

static uint64_t checksum(const fsh_batch *b) {
  uint64_t s = 0;
  fsh_error err = {{0}};
  CHECK_OK(plan_row_checksum(b, &s, &err));
  return s;
}

/* The sorted batch cut into 9 pieces of varied sizes (one empty), 3 per
 * partition. */
static int clean_pieces(fsh_batch *s, piece *ps) {
  const int64_t cuts[] = {0, 1, 700, 2000, 2000, 3100, 4000, 4999, 5500, ROWS};
  for (int i = 0; i < 9; i++)
    ps[i] = (piece){.part = i / 3, .b = s, .start = cuts[i], .len = cuts[i + 1] - cuts[i]};
  return 9;
}

static fsh_batch *take(fsh_batch *b, const int64_t *idx, int64_t n) {
  fsh_batch *out = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_take(b, idx, n, &out, &err));
  return SBH_OK(out);
}

static void sorted_stream_passes(void) {
  fsh_batch *in = NULL, *s = sorted_input(&in, false);
  piece ps[9];
  int n = clean_pieces(s, ps);
  CHECK_EQ_INT(naive_disorder(ps, n, false), -1);
  fsh_sorted_check_result r;
  feed(ps, n, false, &r);
  CHECK_EQ_INT(r.rows, ROWS);
  CHECK_EQ_INT(r.batches, 8); /* the empty piece is not a batch */
  CHECK(r.checksum == checksum(in));
  CHECK_EQ_INT(r.disorder_row, -1);
  CHECK_EQ_INT(r.disorder_partition, -1);
  uint64_t pub = 0;
  fsh_error err = {{0}};
  CHECK_OK(fsh_plan_batch_checksum(in, &pub, &err));
  CHECK(pub == checksum(in));
  fsh_batch_unref(in);
  fsh_batch_unref(s);
}

/* Expects the check to match the naive reference over ps, and to fail:
 * out of order, or rows / checksum unlike the input's. */
static void expect_caught(const piece *ps, int n, const fsh_batch *in, bool descending,
                          const char *what) {
  fsh_sorted_check_result r;
  feed(ps, n, descending, &r);
  int64_t want = naive_disorder(ps, n, descending), rows = 0;
  for (int i = 0; i < n; i++) rows += ps[i].len;
  CHECK_MSG(r.disorder_row == want, "%s: disorder at %lld, the reference says %lld", what,
            (long long)r.disorder_row, (long long)want);
  CHECK_MSG(r.rows == rows, "%s: %lld rows, %lld fed", what, (long long)r.rows, (long long)rows);
  bool caught = r.disorder_row >= 0 || r.rows != in->length || r.checksum != checksum(in);
  CHECK_MSG(caught, "%s: not caught", what);
}

static void corruptions_caught(void) {
  fsh_batch *in = NULL, *s = sorted_input(&in, false);
  piece ps[9];
  int n = clean_pieces(s, ps);
  { /* two rows of different keys swapped inside piece 1 (rows 1..699) */
    int64_t idx[ROWS];
    for (int64_t i = 0; i < ROWS; i++) idx[i] = i;
    int64_t a = 100, b = 600;
    CHECK(key_at(s, a) < key_at(s, b));
    idx[a] = b, idx[b] = a;
    fsh_batch *sw = take(s, idx, ROWS);
    piece q[9];
    memcpy(q, ps, sizeof q);
    for (int i = 0; i < 9; i++) q[i].b = sw;
    expect_caught(q, n, in, false, "two rows swapped");
    CHECK_EQ_INT(naive_disorder(q, n, false), 101);
    fsh_batch_unref(sw);
  }
  { /* pieces 4 and 5 (one partition) fed in the wrong order */
    piece q[9];
    memcpy(q, ps, sizeof q);
    q[4] = ps[5], q[5] = ps[4];
    q[4].part = q[5].part = 1;
    expect_caught(q, n, in, false, "two batches swapped");
    CHECK(naive_disorder(q, n, false) == ps[4].start + ps[5].len);
  }
  { /* partitions 0 and 1 swapped: in order inside each, not across */
    piece q[9];
    for (int i = 0; i < 3; i++) {
      q[i] = ps[3 + i], q[i].part = 0;
      q[3 + i] = ps[i], q[3 + i].part = 1;
      q[6 + i] = ps[6 + i];
    }
    expect_caught(q, n, in, false, "two partitions swapped");
    fsh_sorted_check_result r;
    feed(q, n, false, &r);
    CHECK_EQ_INT(r.disorder_partition, 1);
    CHECK_EQ_INT(r.disorder_row, 2000); /* partition 1's first row */
    CHECK(r.checksum == checksum(in)); /* the same rows */
  }
  { /* a row dropped (in order), a row duplicated (in order) */
    piece q[9];
    memcpy(q, ps, sizeof q);
    q[4].start++, q[4].len--;
    expect_caught(q, n, in, false, "a row dropped");
    int64_t idx[ROWS + 1];
    for (int64_t i = 0, j = 0; i < ROWS; i++) {
      idx[j++] = i;
      if (i == 2500) idx[j++] = i;
    }
    fsh_batch *dup = take(s, idx, ROWS + 1);
    memcpy(q, ps, sizeof q);
    for (int i = 0; i < 9; i++) {
      q[i].b = dup;
      if (q[i].start > 2500) q[i].start++;
      else if (q[i].start + q[i].len > 2500) q[i].len++;
    }
    expect_caught(q, n, in, false, "a row duplicated");
    CHECK_EQ_INT(naive_disorder(q, n, false), -1);
    fsh_batch_unref(dup);
  }
  { /* a value changed, keys untouched */
    int64_t idx[ROWS];
    for (int64_t i = 0; i < ROWS; i++) idx[i] = i;
    fsh_batch *ch = take(s, idx, ROWS);
    fsh_array *v = ch->columns[1];
    double *vals = (double *)(void *)v->buffers[1]->data + v->offset;
    vals[4200] += 0.5;
    piece q[9];
    memcpy(q, ps, sizeof q);
    for (int i = 0; i < 9; i++) q[i].b = ch;
    expect_caught(q, n, in, false, "a value changed");
    fsh_sorted_check_result r;
    feed(q, n, false, &r);
    CHECK_EQ_INT(r.disorder_row, -1);
    CHECK(r.checksum != checksum(in));
    fsh_batch_unref(ch);
  }
  fsh_batch_unref(in);
  fsh_batch_unref(s);
}

/* Partition 1 first read with its pieces out of order and one dropped, then
 * begun again and read cleanly: the result is the clean stream's. */
static void retried_partition_rolls_back(void) {
  fsh_batch *in = NULL, *s = sorted_input(&in, false);
  piece ps[9];
  clean_pieces(s, ps);
  fsh_sorted_check *c = NULL;
  fsh_error err = {{0}};
  int32_t key = 0;
  CHECK_OK(fsh_sorted_check_new(in->schema, &key, 1, NULL, &c, &err));
  if (!c) goto out;
  for (int i = 0; i < 9; i++) {
    if (i % 3 == 0) CHECK_OK(fsh_sorted_check_sink(c, ps[i].part, NULL, &err));
    if (i == 3) { /* the bad attempt */
      const int order[] = {5, 4};
      for (int k = 0; k < 2; k++) {
        fsh_batch *sl = SBH_OK(fsh_batch_slice(s, ps[order[k]].start, ps[order[k]].len));
        CHECK_OK(fsh_sorted_check_sink(c, 1, sl, &err));
        fsh_batch_unref(sl);
      }
      fsh_sorted_check_result mid;
      fsh_sorted_check_get(c, &mid);
      CHECK(mid.disorder_row >= 0);
      CHECK_OK(fsh_sorted_check_sink(c, 1, NULL, &err)); /* read again */
      fsh_sorted_check_get(c, &mid);
      CHECK_EQ_INT(mid.rows, ps[0].len + ps[1].len + ps[2].len);
      CHECK_EQ_INT(mid.disorder_row, -1);
    }
    fsh_batch *sl = SBH_OK(fsh_batch_slice(s, ps[i].start, ps[i].len));
    CHECK_OK(fsh_sorted_check_sink(c, ps[i].part, sl, &err));
    fsh_batch_unref(sl);
  }
  fsh_sorted_check_result r;
  fsh_sorted_check_get(c, &r);
  CHECK_EQ_INT(r.rows, ROWS);
  CHECK(r.checksum == checksum(in));
  CHECK_EQ_INT(r.disorder_row, -1);
  /* a partition going backwards, a batch of a partition not begun */
  CHECK(fsh_sorted_check_sink(c, 0, NULL, &err) == EINVAL);
  CHECK(fsh_sorted_check_sink(c, 5, s, &err) == EINVAL);
out:
  fsh_sorted_check_free(c);
  fsh_batch_unref(in);
  fsh_batch_unref(s);
}

static void descending_order(void) {
  fsh_batch *in = NULL, *s = sorted_input(&in, true);
  piece ps[9];
  int n = clean_pieces(s, ps);
  fsh_sorted_check_result r;
  feed(ps, n, true, &r); /* descending, checked descending: passes */
  CHECK_EQ_INT(r.disorder_row, -1);
  CHECK(r.checksum == checksum(in));
  feed(ps, n, false, &r); /* checked ascending: the reference's first rise */
  CHECK(r.disorder_row > 0);
  CHECK_EQ_INT(r.disorder_row, naive_disorder(ps, n, false));
  fsh_batch_unref(in);
  fsh_batch_unref(s);
}

/* A float64 key with nulls (sorted ascending, nulls last: the general
 * comparison path) against a naive null-aware reference: in order, then
 * a valid value moved behind the nulls and two values swapped. */
static double val_at(const fsh_batch *b, int64_t i, bool *valid) {
  const fsh_array *a = b->columns[1];
  *valid = !a->buffers[0] || fsh_bit_get(a->buffers[0]->data, a->offset + i);
  return ((const double *)(const void *)a->buffers[1]->data)[a->offset + i];
}

static int64_t naive_float_disorder(const fsh_batch *b) {
  for (int64_t i = 1; i < b->length; i++) {
    bool vp, vi;
    double p = val_at(b, i - 1, &vp), x = val_at(b, i, &vi);
    if ((!vp && vi) || (vp && vi && p > x)) return i;
  }
  return -1;
}

static void float_key_with_nulls(void) {
  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  fsh_synthetic_options o = {.seed = 5, .with_nulls = true};
  fsh_batch *b = NULL, *s = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_synthetic_batch(schema, &o, 0, ROWS, &b, &err));
  int32_t col = 1;
  fsh_sort_key ord = {false, false};
  CHECK_OK(fsh_sort_batch(b, &col, 1, &ord, &s, &err));
  CHECK(s->columns[1]->null_count != 0);
  int64_t idx[ROWS];
  for (int pass = 0; pass < 3 && s; pass++) {
    for (int64_t i = 0; i < ROWS; i++) idx[i] = i;
    if (pass == 1) idx[10] = ROWS - 1, idx[ROWS - 1] = 10; /* a null early, a value last */
    if (pass == 2) idx[3000] = 3100, idx[3100] = 3000;
    fsh_batch *t = take(s, idx, ROWS);
    fsh_sorted_check *c = NULL;
    CHECK_OK(fsh_sorted_check_new(schema, &col, 1, &ord, &c, &err));
    CHECK_OK(fsh_sorted_check_sink(c, 0, NULL, &err));
    const int64_t cuts[] = {0, 999, 3050, ROWS};
    for (int k = 0; k < 3; k++) {
      fsh_batch *sl = SBH_OK(fsh_batch_slice(t, cuts[k], cuts[k + 1] - cuts[k]));
      CHECK_OK(fsh_sorted_check_sink(c, 0, sl, &err));
      fsh_batch_unref(sl);
    }
    fsh_sorted_check_result r;
    fsh_sorted_check_get(c, &r);
    int64_t want = naive_float_disorder(t);
    CHECK_MSG(r.disorder_row == want, "pass %d: %lld, the reference %lld", pass,
              (long long)r.disorder_row, (long long)want);
    CHECK(pass == 0 ? want == -1 : want > 0);
    CHECK(r.checksum == checksum(b));
    fsh_sorted_check_free(c);
    fsh_batch_unref(t);
  }
  fsh_batch_unref(b);
  fsh_batch_unref(s);
  fsh_schema_unref(schema);
}

static void bad_arguments(void) {
  fsh_schema *schema = SBH_OK(fsh_synthetic_schema());
  fsh_sorted_check *c = NULL;
  fsh_error err = {{0}};
  int32_t bad = 7;
  CHECK(fsh_sorted_check_new(schema, &bad, 1, NULL, &c, &err) == EINVAL);
  CHECK(c == NULL);
  CHECK(strstr(err.message, "column 7") != NULL);
  int32_t key = 0;
  CHECK(fsh_sorted_check_new(schema, &key, 0, NULL, &c, &err) == EINVAL);
  fsh_sorted_check_free(NULL);
  fsh_schema_unref(schema);
}

FSH_TEST_MAIN(TEST(sorted_stream_passes), TEST(corruptions_caught),
              TEST(retried_partition_rolls_back), TEST(descending_order),
              TEST(float_key_with_nulls), TEST(bad_arguments))
