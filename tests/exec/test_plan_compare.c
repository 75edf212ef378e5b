/* test_plan_compare.c -- fsh_plan_result_compare on plans whose result
 * depends on the partitioning (the single-process reference runs them as
 * one partition): a local limit and a local top-N (over a scan's
 * partitions and a hash repartition: each partition's row count fixed,
 * checked here against a naive count per partition; over a random
 * repartition: only bounded), a local aggregate whose groups span
 * partitions, a local sort. The in-process result passes; results made
 * wrong from it do not: a row too many in a partition, a row not in the
 * input, a duplicated row, a missing row where the count is fixed, a
 * partition out of order, a group key twice in a partition, a group
 * missing or not in the input. A partition-dependent operator before the
 * last one cannot be compared (ENOTSUP). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/exec.h>
#include <flightshuffle/kernels.h>
#include <flightshuffle/workloads.h>

#include "../test.h"

#define SCAN(rows, parts, seed)                                                           \
  "{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": " #rows ", \"batch_rows\": 1000, " \
  "\"partitions\": " #parts ", \"key_range\": 300, \"seed\": " #seed "}"

static fsh_plan *plan_of(const char *text) {
  fsh_plan *p = NULL;
  fsh_error err;
  CHECK_MSG(fsh_plan_from_json(text, -1, 0, &p, &err) == 0, "%s: %s", text, err.message);
  return p;
}

/* A result held as one batch per partition (NULL: empty partition). */
typedef struct parts {
  int32_t n;
  fsh_batch *b[16];
} parts;

static void parts_free(parts *ps) {
  for (int32_t q = 0; q < ps->n; q++) fsh_batch_unref(ps->b[q]);
  memset(ps, 0, sizeof *ps);
}

/* r's partitions, each concatenated into one batch. */
static parts parts_of(const fsh_plan_result *r) {
  parts ps = {.n = r->n_partitions};
  fsh_error err;
  int64_t at = 0;
  CHECK(r->n_partitions <= 16);
  for (int32_t q = 0; q < r->n_partitions && q < 16; q++) {
    int64_t nb = r->partition_batches[q];
    if (nb > 0) CHECK_OK(fsh_concat(r->batches + at, nb, &ps.b[q], &err));
    at += nb;
  }
  return ps;
}

static int64_t rows_of(const fsh_batch *b) { return b ? b->length : 0; }

/* Compares ps (as a result of p) with ref; 0 or the code. */
static int compare_parts(const fsh_plan *p, const parts *ps, const fsh_plan_result *ref,
                         fsh_error *err) {
  fsh_batch *batches[16];
  int64_t per[16], n = 0, rows = 0;
  for (int32_t q = 0; q < ps->n; q++) {
    per[q] = ps->b[q] && ps->b[q]->length ? 1 : 0;
    if (per[q]) batches[n++] = ps->b[q], rows += ps->b[q]->length;
  }
  fsh_plan_result r = {.schema = ref->schema, .n_batches = n, .batches = batches, .rows = rows,
                       .n_partitions = ps->n, .partition_batches = per};
  return fsh_plan_result_compare(p, &r, ref, err);
}

/* rows idx[0, n) of b (NULL b: none). */
static fsh_batch *take(fsh_batch *b, const int64_t *idx, int64_t n) {
  fsh_batch *out = NULL;
  fsh_error err;
  CHECK_OK(fsh_take(b, idx, n, &out, &err));
  return out;
}

/* Partition q of ps replaced by its rows [0, keep) followed by `extra`'s
 * row `extra_row` (extra NULL: nothing), or with rows 0 and 1 swapped. */
static void mutate(parts *ps, int32_t q, int64_t keep, fsh_batch *extra, int64_t extra_row,
                   bool swap) {
  fsh_batch *b = ps->b[q], *out = NULL;
  fsh_error err;
  int64_t *idx = calloc((size_t)rows_of(b) + 2, sizeof *idx);
  for (int64_t i = 0; i < keep; i++) idx[i] = i;
  if (swap && keep >= 2) idx[0] = 1, idx[1] = 0;
  fsh_batch *head = take(b, idx, keep);
  if (extra) {
    fsh_batch *one = fsh_batch_slice(extra, extra_row, 1);
    fsh_batch *two[2] = {head, one};
    CHECK_OK(fsh_concat(two, 2, &out, &err));
    fsh_batch_unref(one);
    fsh_batch_unref(head);
  } else {
    out = head;
  }
  free(idx);
  fsh_batch_unref(ps->b[q]);
  ps->b[q] = out;
}

/* The reference rows of a plan (one batch). */
static fsh_batch *reference_rows(const char *text) {
  fsh_plan *p = plan_of(text);
  fsh_plan_run_options ro = {.reference = true};
  fsh_plan_result r;
  fsh_error err;
  fsh_batch *out = NULL;
  memset(&r, 0, sizeof r);
  if (p) CHECK_OK(fsh_plan_run(p, &ro, &r, &err));
  if (r.n_batches) CHECK_OK(fsh_concat(r.batches, r.n_batches, &out, &err));
  fsh_plan_result_reset(&r);
  fsh_plan_free(p);
  return out;
}

/* Runs p in process (memory backend) and as the reference. */
static void run_both(const fsh_plan *p, fsh_plan_result *got, fsh_plan_result *ref) {
  fsh_error err;
  fsh_plan_run_options ro = {.reference = true}, o = {0};
  memset(got, 0, sizeof *got);
  memset(ref, 0, sizeof *ref);
  CHECK_OK(fsh_plan_run(p, &o, got, &err));
  CHECK_OK(fsh_plan_run(p, &ro, ref, &err));
}

#define EXPECT_PASS(what, rc, err)                                                   \
  CHECK_MSG((rc) == 0, "%s: should pass: %d %s", what, rc, (rc) ? (err).message : "")
#define EXPECT_FAIL(what, rc, err) \
  CHECK_MSG((rc) == EINVAL, "%s: should fail with EINVAL: %d %s", what, rc, (err).message)

/* Runs p in process and as the reference (run_both) and expects the
 * in-process result to compare equal (`what` names it); err keeps the
 * comparison's message. */
static void run_passing(const fsh_plan *p, const char *what, fsh_plan_result *got,
                        fsh_plan_result *ref, fsh_error *err) {
  run_both(p, got, ref);
  int rc = fsh_plan_result_compare(p, got, ref, err);
  EXPECT_PASS(what, rc, *err);
}

static void reset_both(fsh_plan_result *got, fsh_plan_result *ref) {
  fsh_plan_result_reset(got);
  fsh_plan_result_reset(ref);
}

/* Compares ps (as a result of p) with ref, expects it to pass (ok) or
 * fail with EINVAL, named `what`, and frees ps. err keeps the message. */
static void expect_parts(const fsh_plan *p, parts *ps, const fsh_plan_result *ref, bool ok,
                         const char *what, fsh_error *err) {
  int rc = compare_parts(p, ps, ref, err);
  if (ok) EXPECT_PASS(what, rc, *err);
  else EXPECT_FAIL(what, rc, *err);
  parts_free(ps);
}

/* A change made to a result's partitions (mutate's arguments): partition
 * q cut to its rows [0, keep), followed by row extra_row of `extra` or,
 * with dup, of the result's own partition dup_part; swap: rows 0 and 1
 * swapped. ok: whether the changed result should still pass. */
typedef struct change {
  const char *name;
  int32_t q;
  int64_t keep;
  fsh_batch *extra;
  bool dup;
  int32_t dup_part;
  int64_t extra_row;
  bool swap, ok;
} change;

/* got's partitions with change c, compared with ref as expect_parts. */
static void expect_change(const fsh_plan *p, const fsh_plan_result *got,
                          const fsh_plan_result *ref, change c) {
  fsh_error err;
  parts m = parts_of(got);
  mutate(&m, c.q, c.keep, c.dup ? m.b[c.dup_part] : c.extra, c.extra_row, c.swap);
  expect_parts(p, &m, ref, c.ok, c.name, &err);
}

/* ps's partition `from` loses its last row, which goes first into
 * partition `to` (sorted again by keys[0, n_keys) when n_keys > 0). Both
 * partitions need rows. */
static void move_last_row(parts *ps, int32_t from, int32_t to, const int32_t *keys,
                          int32_t n_keys) {
  fsh_error err;
  int64_t n = rows_of(ps->b[from]);
  fsh_batch *last = fsh_batch_slice(ps->b[from], n - 1, 1),
            *head = fsh_batch_slice(ps->b[from], 0, n - 1);
  fsh_batch *two[2] = {last, ps->b[to]}, *joined = NULL, *sorted = NULL;
  CHECK_OK(fsh_concat(two, 2, &joined, &err));
  if (n_keys > 0 && joined) {
    CHECK_OK(fsh_sort_batch(joined, keys, n_keys, NULL, &sorted, &err));
    fsh_batch_unref(joined);
    joined = sorted;
  }
  fsh_batch_unref(last);
  fsh_batch_unref(ps->b[from]);
  fsh_batch_unref(ps->b[to]);
  ps->b[from] = head, ps->b[to] = joined;
}

/* Naive per-partition rows of a generated scan (rows, batch_rows 1000,
 * np partitions: contiguous runs of batches, README "Plans"). */
static int64_t scan_part_rows(int64_t rows, int32_t np, int32_t q) {
  int64_t nb = (rows + 999) / 1000, lo = nb * q / np * 1000, hi = nb * (q + 1) / np * 1000;
  if (hi > rows) hi = rows;
  return hi > lo ? hi - lo : 0;
}

/* A local limit of 3500 over a scan of 20500 rows in 6 partitions (3000,
 * 4000, 3000, 4000, 3000, 3500 rows... as the batches fall): each
 * partition has min(3500, its rows). */
static void local_limit_scan(void) {
  const char *text = "{\"nodes\": [" SCAN(20500, 6, 3) ", {\"op\": \"limit\", \"n\": 3500, "
                     "\"local\": true}]}";
  fsh_plan *p = plan_of(text);
  fsh_batch *input = reference_rows("{\"nodes\": [" SCAN(20500, 6, 3) "]}");
  fsh_batch *alien = reference_rows("{\"nodes\": [" SCAN(20500, 6, 4) "]}");
  if (!p || !input || !alien) goto out;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  CHECK(strstr(err.message, "compared as the plan allows") != NULL);
  parts ps = parts_of(&got);
  CHECK_EQ_INT(ps.n, 6);
  int64_t total = 0;
  for (int32_t q = 0; q < ps.n; q++) {
    int64_t want = scan_part_rows(20500, 6, q);
    want = want < 3500 ? want : 3500;
    CHECK_MSG(rows_of(ps.b[q]) == want, "partition %d: %lld rows, naive %lld", (int)q,
              (long long)rows_of(ps.b[q]), (long long)want);
    total += want;
  }
  CHECK_EQ_INT(got.rows, total);
  /* partition 1 (4000 input rows, 3500 kept); partition 0 (3000: all) */
  int64_t n1 = rows_of(ps.b[1]), n0 = rows_of(ps.b[0]);
  /* partition 1: input rows 3000..6999, the first 3500 kept; partition 0:
   * input rows 0..2999, all kept */
  const change cases[] = {
      {"unchanged", .q = 1, .keep = n1, .ok = true},
      {"a row too many in a partition (n + 1)", .q = 1, .keep = n1, .extra = input,
       .extra_row = 6999},
      {"a row too many in a partition (its input has n - 500)", .q = 0, .keep = n0,
       .extra = input, .extra_row = 6999},
      {"a row not in the input", .q = 1, .keep = n1 - 1, .extra = alien, .extra_row = 5},
      {"a duplicated row", .q = 1, .keep = n1 - 1, .dup = true, .dup_part = 1},
      {"a missing row", .q = 1, .keep = n1 - 1},
      {"a missing row (a partition its input fills)", .q = 0, .keep = n0 - 1},
      {"another row of the partition's input (not its first rows)", .q = 1, .keep = n1 - 1,
       .extra = input, .extra_row = 6999},
      {"a row of another partition's input", .q = 1, .keep = n1 - 1, .extra = input,
       .extra_row = 100},
      {"rows 0 and 1 swapped (a limit of rows in order keeps them in order)", .q = 1,
       .keep = n1, .swap = true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_change(p, &got, &ref, cases[i]);
  parts_free(&ps);
  reset_both(&got, &ref);
out:
  fsh_batch_unref(input);
  fsh_batch_unref(alien);
  fsh_plan_free(p);
}

/* A local limit after a hash repartition on key into 5: each partition's
 * count is min(n, the rows whose key hashes there), the partition of a
 * row computed here from its key (fsh_hash_columns, fsh_partition_hash). */
static void local_limit_hash(void) {
  const char *text = "{\"nodes\": [" SCAN(12000, 4, 5) ", {\"op\": \"repartition\", \"by\": "
                     "\"hash\", \"keys\": [\"key\"], \"partitions\": 5}, {\"op\": \"limit\", "
                     "\"n\": 2300, \"local\": true}]}";
  fsh_plan *p = plan_of(text);
  fsh_batch *input = reference_rows("{\"nodes\": [" SCAN(12000, 4, 5) "]}");
  if (!p || !input) goto out;
  fsh_error err;
  int64_t per[5] = {0};
  uint64_t *h = calloc((size_t)input->length, sizeof *h);
  int32_t *pid = calloc((size_t)input->length, sizeof *pid);
  int32_t key = 1;
  CHECK_OK(fsh_hash_columns(input, &key, 1, 0, h, &err));
  CHECK_OK(fsh_partition_hash(h, input->length, 5, pid, &err));
  for (int64_t i = 0; i < input->length; i++) per[pid[i]]++;
  free(h);
  free(pid);
  fsh_plan_result got, ref;
  run_passing(p, "the in-process result", &got, &ref, &err);
  parts ps = parts_of(&got);
  bool some_short = false, some_full = false;
  for (int32_t q = 0; q < 5 && q < ps.n; q++) {
    int64_t want = per[q] < 2300 ? per[q] : 2300;
    some_short |= per[q] < 2300, some_full |= per[q] > 2300;
    CHECK_MSG(rows_of(ps.b[q]) == want, "partition %d: %lld rows, naive %lld", (int)q,
              (long long)rows_of(ps.b[q]), (long long)want);
  }
  CHECK_MSG(some_short && some_full, "the case needs partitions below and above n");
  for (int32_t q = 0; q < 5 && q < ps.n; q++) {
    if (!ps.b[q] || ps.b[q]->length < 2) continue;
    expect_change(p, &got, &ref,
                  (change){"a missing row (hash partitioning: the count is fixed)", .q = q,
                           .keep = ps.b[q]->length - 1});
    expect_change(p, &got, &ref,
                  (change){"a duplicated row", .q = q, .keep = ps.b[q]->length - 1, .dup = true,
                           .dup_part = q});
  }
  parts_free(&ps);
  reset_both(&got, &ref);
out:
  fsh_batch_unref(input);
  fsh_plan_free(p);
}

/* A local limit after a random repartition: the partitions' counts are
 * not fixed, only at most n each and min(n, rows) .. min(rows, n * parts)
 * in all: a missing row passes, a partition over n or a total below the
 * bound does not. */
static void local_limit_random(void) {
  const char *text = "{\"nodes\": [" SCAN(8000, 3, 6) ", {\"op\": \"repartition\", \"by\": "
                     "\"random\", \"partitions\": 4, \"seed\": 9}, {\"op\": \"limit\", \"n\": 100, "
                     "\"local\": true}]}";
  fsh_plan *p = plan_of(text);
  fsh_batch *input = reference_rows("{\"nodes\": [" SCAN(8000, 3, 6) "]}");
  if (!p || !input) goto out;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  CHECK(strstr(err.message, "not fixed") != NULL);
  CHECK_EQ_INT(got.rows, 400);
  expect_change(p, &got, &ref,
                (change){"a missing row (the count is not fixed)", .q = 2, .keep = 99, .ok = true});
  expect_change(p, &got, &ref,
                (change){"a row too many in a partition", .q = 2, .keep = 100, .dup = true,
                         .dup_part = 0});
  /* a row moved from partition 0 to partition 2: 99 and 101 rows, the
   * total and every row's membership unchanged -- only the bound of n
   * rows per partition catches it */
  parts m = parts_of(&got);
  move_last_row(&m, 0, 2, NULL, 0);
  CHECK_EQ_INT(rows_of(m.b[2]), 101);
  expect_parts(p, &m, &ref, false, "a row moved into a full partition (101 rows, n = 100)",
               &err);
  m = parts_of(&got);
  for (int32_t q = 0; q < 4; q++) mutate(&m, q, q ? 0 : 99, NULL, 0, false);
  expect_parts(p, &m, &ref, false, "99 rows in all, below min(n, rows)", &err);
  reset_both(&got, &ref);
out:
  fsh_batch_unref(input);
  fsh_plan_free(p);
}

/* A local top-N (amount descending) over a scan's 5 partitions: as a
 * limit, each partition sorted and its input partition's top n; rows
 * swapped, or the 41st row for the 40th, fail. */
static void local_top_n(void) {
  const char *text = "{\"nodes\": [" SCAN(9000, 5, 7) ", {\"op\": \"top_n\", \"n\": 40, "
                     "\"local\": true, \"keys\": [{\"column\": \"amount\", \"descending\": "
                     "true}, \"id\"]}]}";
  fsh_plan *p = plan_of(text);
  fsh_batch *alien = reference_rows("{\"nodes\": [" SCAN(9000, 5, 8) "]}");
  if (!p || !alien) goto out;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  CHECK_EQ_INT(got.rows, 200);
  const change cases[] = {
      {"a partition out of order", .q = 3, .keep = 40, .swap = true},
      {"a row not in the input", .q = 3, .keep = 39, .extra = alien},
      {"a missing row", .q = 3, .keep = 39},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_change(p, &got, &ref, cases[i]);
  /* the 41st of partition 3 for its 40th: sorted, a row of its input
   * partition, 40 rows -- but not its top 40 */
  fsh_plan *p41 = plan_of("{\"nodes\": [" SCAN(9000, 5, 7) ", {\"op\": \"top_n\", \"n\": 41, "
                          "\"local\": true, \"keys\": [{\"column\": \"amount\", \"descending\": "
                          "true}, \"id\"]}]}");
  if (p41) {
    fsh_plan_result g41, r41;
    run_both(p41, &g41, &r41);
    parts m41 = parts_of(&g41);
    CHECK(rows_of(m41.b[3]) == 41);
    if (rows_of(m41.b[3]) == 41)
      expect_change(p, &got, &ref,
                    (change){"the 41st row for the 40th (not the partition's top 40)", .q = 3,
                             .keep = 39, .extra = m41.b[3], .extra_row = 40});
    parts_free(&m41);
    reset_both(&g41, &r41);
    fsh_plan_free(p41);
  }
  reset_both(&got, &ref);
out:
  fsh_batch_unref(alien);
  fsh_plan_free(p);
}

/* A local limit of a local sort (over a scan's 4 partitions): each
 * partition's first n rows by the sort's keys; the (n+1)-th row of a
 * partition for its n-th (sorted, a row of the partition, the count
 * right) fails. */
static void sorted_local_limit(void) {
  static const char fmt[] = "{\"nodes\": [" SCAN(6000, 4, 3) ", {\"op\": \"sort\", \"local\": "
                            "true, \"keys\": [\"amount\", \"id\"]}, {\"op\": \"limit\", \"n\": "
                            "%d, \"local\": true}]}";
  char text[2][512];
  snprintf(text[0], sizeof text[0], fmt, 30);
  snprintf(text[1], sizeof text[1], fmt, 31);
  fsh_plan *p = plan_of(text[0]), *p31 = plan_of(text[1]);
  if (!p || !p31) goto out;
  fsh_plan_result got, ref, g31, r31;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  CHECK(strstr(err.message, "sorted input partition's first n") != NULL);
  run_both(p31, &g31, &r31);
  parts m = parts_of(&got), m31 = parts_of(&g31);
  CHECK(rows_of(m.b[2]) == 30 && rows_of(m31.b[2]) == 31);
  if (rows_of(m.b[2]) == 30 && rows_of(m31.b[2]) == 31)
    expect_change(p, &got, &ref,
                  (change){"the 31st row for the 30th (not the partition's first 30)", .q = 2,
                           .keep = 29, .extra = m31.b[2], .extra_row = 30});
  parts_free(&m);
  parts_free(&m31);
  reset_both(&got, &ref);
  reset_both(&g31, &r31);
out:
  fsh_plan_free(p);
  fsh_plan_free(p31);
}

/* A local sort over 4 partitions: the multiset is the reference's, each
 * partition sorted (not the whole output) and holding its input
 * partition's rows; rows swapped, or a row moved to another partition
 * (kept sorted), fail. */
static void local_sort(void) {
  const char *text = "{\"nodes\": [" SCAN(6000, 4, 1) ", {\"op\": \"sort\", \"local\": true, "
                     "\"keys\": [\"key\", \"id\"]}]}";
  fsh_plan *p = plan_of(text);
  if (!p) return;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  parts m = parts_of(&got);
  int64_t n2 = rows_of(m.b[2]);
  expect_change(p, &got, &ref,
                (change){"a partition out of order", .q = 2, .keep = n2, .swap = true});
  /* partition 1's last row (its largest) moved into partition 2, sorted
   * again: both partitions sorted, the rows together the reference's --
   * but not each partition's own */
  if (rows_of(m.b[1]) > 1 && rows_of(m.b[2]) > 1) {
    const int32_t keys[2] = {1, 0};
    move_last_row(&m, 1, 2, keys, 2);
    expect_parts(p, &m, &ref, false, "a row moved to another partition (both sorted)", &err);
  }
  parts_free(&m);
  reset_both(&got, &ref);
  fsh_plan_free(p);
}

/* Column 1 ("n", int64) of a local aggregate's row i. */
static int64_t col_n(const fsh_batch *b, int64_t i) {
  const fsh_array *a = b->columns[1];
  return ((const int64_t *)(const void *)a->buffers[1]->data)[a->offset + i];
}

/* A local aggregate by key (300 keys over 4 partitions: groups span
 * them) against the reference's global groups: a key twice in a
 * partition, a group missing, or a key not in the input fail. After a
 * hash repartition on the key it is compared exactly. */
static void local_aggregate(void) {
  const char *text = "{\"nodes\": [" SCAN(6000, 4, 2) ", {\"op\": \"aggregate\", \"local\": "
                     "true, \"keys\": [\"key\"], \"aggs\": [{\"fn\": \"count_star\", \"name\": "
                     "\"n\"}]}]}";
  fsh_plan *p = plan_of(text);
  if (!p) return;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  CHECK(got.rows > ref.rows); /* groups span partitions */
  parts m = parts_of(&got);
  int64_t n1 = rows_of(m.b[1]);
  parts_free(&m);
  expect_change(p, &got, &ref,
                (change){"a group key twice in a partition", .q = 1, .keep = n1, .dup = true,
                         .dup_part = 1, .extra_row = 3});
  /* a group's count wrong: partition 1's "n" of two groups of different
   * counts swapped (the keys stay right) */
  m = parts_of(&got);
  if (m.b[1] && m.b[1]->length >= 2) {
    fsh_batch *b = m.b[1];
    int64_t j = 1;
    while (j < b->length && col_n(b, j) == col_n(b, 0)) j++;
    CHECK(j < b->length);
    if (j < b->length) {
      int64_t *idx = calloc((size_t)b->length, sizeof *idx);
      for (int64_t i = 0; i < b->length; i++) idx[i] = i;
      idx[0] = j, idx[j] = 0;
      fsh_batch *sw = take(b, idx, b->length), *mixed = fsh_batch_new(b->schema, b->length);
      free(idx);
      CHECK(sw && mixed);
      if (sw && mixed) {
        mixed->columns[0] = fsh_array_ref(b->columns[0]);
        mixed->columns[1] = fsh_array_ref(sw->columns[1]);
        fsh_batch_unref(m.b[1]);
        m.b[1] = mixed;
        mixed = NULL;
        expect_parts(p, &m, &ref, false, "two groups' counts swapped in a partition", &err);
      }
      fsh_batch_unref(sw);
      fsh_batch_unref(mixed);
    }
  }
  parts_free(&m);
  /* a group missing: the reference's first key dropped everywhere */
  m = parts_of(&got);
  for (int32_t q = 0; q < m.n; q++) {
    if (!m.b[q]) continue;
    int64_t *idx = calloc((size_t)m.b[q]->length + 1, sizeof *idx), k = 0;
    const fsh_array *kc = m.b[q]->columns[0], *rc0 = ref.batches[0]->columns[0];
    for (int64_t i = 0; i < m.b[q]->length; i++) {
      bool same = fsh_array_is_valid(kc, i) == fsh_array_is_valid(rc0, 0) &&
                  (!fsh_array_is_valid(kc, i) ||
                   ((const int64_t *)(const void *)kc->buffers[1]->data)[kc->offset + i] ==
                       ((const int64_t *)(const void *)rc0->buffers[1]->data)[rc0->offset]);
      if (!same) idx[k++] = i;
    }
    fsh_batch *t = take(m.b[q], idx, k);
    free(idx);
    fsh_batch_unref(m.b[q]);
    m.b[q] = t;
  }
  expect_parts(p, &m, &ref, false, "a group missing", &err);
  reset_both(&got, &ref);
  fsh_plan_free(p);
  /* a key not of the input: the aggregate of another key range */
  p = plan_of("{\"nodes\": [" SCAN(6000, 4, 2) ", {\"op\": \"aggregate\", \"local\": true, "
              "\"keys\": [\"key\"], \"aggs\": [{\"fn\": \"count_star\", \"name\": \"n\"}]}]}");
  fsh_plan *other = plan_of("{\"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": "
                            "6000, \"batch_rows\": 1000, \"partitions\": 4, \"key_range\": 600, "
                            "\"seed\": 2}, {\"op\": \"aggregate\", \"local\": true, \"keys\": "
                            "[\"key\"], \"aggs\": [{\"fn\": \"count_star\", \"name\": \"n\"}]}]}");
  if (p && other) {
    fsh_plan_result o2, oref;
    run_both(p, &got, &ref);
    run_both(other, &o2, &oref);
    int rc = fsh_plan_result_compare(p, &o2, &ref, &err);
    EXPECT_FAIL("keys not of the input", rc, err);
    reset_both(&o2, &oref);
    reset_both(&got, &ref);
  }
  fsh_plan_free(p);
  fsh_plan_free(other);
  /* grouped by a hash repartition on the key: exact */
  p = plan_of("{\"nodes\": [" SCAN(6000, 4, 2) ", {\"op\": \"repartition\", \"by\": \"hash\", "
              "\"keys\": [\"key\"], \"partitions\": 3}, {\"op\": \"aggregate\", \"local\": true, "
              "\"keys\": [\"key\"], \"aggs\": [{\"fn\": \"sum\", \"column\": \"amount\", "
              "\"name\": \"s\"}]}]}");
  if (p) {
    run_passing(p, "a local aggregate after a hash repartition on its key", &got, &ref, &err);
    CHECK_MSG(err.message[0] == 0, "compared exactly, not '%s'", err.message);
    CHECK_EQ_INT(got.rows, ref.rows);
    reset_both(&got, &ref);
  }
  fsh_plan_free(p);
}

/* Column c (int64) of row i, or INT64_MIN when null. */
static int64_t i64_or_null(const fsh_batch *b, int c, int64_t i) {
  const fsh_array *a = b->columns[c];
  if (!fsh_array_is_valid(a, i)) return INT64_MIN;
  return ((const int64_t *)(const void *)a->buffers[1]->data)[a->offset + i];
}

/* The first row of b with key (column 1) k whose id (column 0) is not
 * among ids[0, n), or -1. */
static int64_t row_with_key(const fsh_batch *b, int64_t k, const int64_t *ids, int64_t n) {
  for (int64_t i = 0; b && i < b->length; i++) {
    if (i64_or_null(b, 1, i) != k) continue;
    bool taken = false;
    for (int64_t j = 0; j < n && !taken; j++) taken = ids[j] == i64_or_null(b, 0, i);
    if (!taken) return i;
  }
  return -1;
}

/* A global top-N by a key with ties over a hash repartition (its rows not
 * determined): the last row replaced by another input row of the same
 * key passes (any of the tied rows will do); by a row of the same key
 * that is not in the input, it fails (the membership check). */
static void global_top_n_ties(void) {
  const char *text = "{\"nodes\": [" SCAN(8000, 4, 5) ", {\"op\": \"repartition\", \"by\": "
                     "\"hash\", \"keys\": [\"id\"], \"partitions\": 4}, {\"op\": \"top_n\", "
                     "\"n\": 100, \"keys\": [\"key\"]}]}";
  fsh_plan *p = plan_of(text);
  fsh_batch *input = reference_rows("{\"nodes\": [" SCAN(8000, 4, 5) "]}");
  fsh_batch *alien = reference_rows("{\"nodes\": [" SCAN(8000, 4, 6) "]}");
  if (!p || !input || !alien) goto out;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  parts m = parts_of(&got);
  CHECK(m.n == 1 && rows_of(m.b[0]) == 100);
  if (m.n == 1 && rows_of(m.b[0]) == 100) {
    int64_t ids[100], last = 99, k = i64_or_null(m.b[0], 1, last);
    for (int64_t i = 0; i < 100; i++) ids[i] = i64_or_null(m.b[0], 0, i);
    int64_t other = row_with_key(input, k, ids, 100), foreign = row_with_key(alien, k, NULL, 0);
    CHECK_MSG(other >= 0 && foreign >= 0, "rows of key %lld: %lld %lld", (long long)k,
              (long long)other, (long long)foreign);
    if (other >= 0 && foreign >= 0) {
      expect_change(p, &got, &ref,
                    (change){"another input row of the last key (a tie)", .q = 0, .keep = last,
                             .extra = input, .extra_row = other, .ok = true});
      expect_change(p, &got, &ref,
                    (change){"a row of the last key not in the input", .q = 0, .keep = last,
                             .extra = alien, .extra_row = foreign});
    }
  }
  parts_free(&m);
  reset_both(&got, &ref);
out:
  fsh_batch_unref(input);
  fsh_batch_unref(alien);
  fsh_plan_free(p);
}

/* into_partitions as the last operator: exactly n partitions whose sizes
 * differ by at most one row -- a row moved to the next partition (the
 * rows and their order unchanged) or two partitions merged fail. */
static void into_partitions_sizes(void) {
  fsh_plan *p = plan_of("{\"nodes\": [" SCAN(5003, 3, 1) ", {\"op\": \"into_partitions\", "
                        "\"partitions\": 4}]}");
  if (!p) return;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  parts m = parts_of(&got);
  CHECK_EQ_INT(m.n, 4);
  if (m.n == 4 && rows_of(m.b[0]) > 1 && m.b[1]) {
    move_last_row(&m, 0, 1, NULL, 0);
    expect_parts(p, &m, &ref, false, "a row moved to the next partition", &err);
  }
  parts_free(&m);
  m = parts_of(&got);
  if (m.n == 4 && m.b[2] && m.b[3]) {
    fsh_batch *two[2] = {m.b[2], m.b[3]}, *j = NULL;
    CHECK_OK(fsh_concat(two, 2, &j, &err));
    fsh_batch_unref(m.b[2]);
    fsh_batch_unref(m.b[3]);
    m.b[2] = j, m.b[3] = NULL, m.n = 3;
    expect_parts(p, &m, &ref, false, "3 partitions for 4", &err);
  }
  parts_free(&m);
  reset_both(&got, &ref);
  fsh_plan_free(p);
}

/* into_batches last: the in-process result passes; the same rows with
 * each partition as one batch (what a shuffle's coalesced blocks give)
 * fail, naming the batch; a partition's short batch anywhere but last
 * fails. */
static void into_batches_sizes(void) {
  fsh_plan *p = plan_of("{\"nodes\": [" SCAN(5003, 3, 1) ", {\"op\": \"into_batches\", "
                        "\"rows\": 700}]}");
  if (!p) return;
  fsh_plan_result got, ref;
  fsh_error err;
  run_passing(p, "the in-process result", &got, &ref, &err);
  CHECK(got.n_batches > got.n_partitions);
  parts m = parts_of(&got);
  expect_parts(p, &m, &ref, false, "each partition one batch", &err);
  CHECK(strstr(err.message, "into_batches") != NULL);
  /* partition 0's first two batches swapped: a short one first */
  if (got.partition_batches[0] >= 2) {
    int64_t last = got.partition_batches[0] - 1;
    fsh_batch *t = got.batches[0];
    got.batches[0] = got.batches[last], got.batches[last] = t;
    int rc = fsh_plan_result_compare(p, &got, &ref, &err);
    CHECK_MSG(rc != 0, "a short batch first in its partition passed");
  }
  reset_both(&got, &ref);
  fsh_plan_free(p);
}

/* A partition-dependent operator followed by others: ENOTSUP, naming it. */
static void not_last(void) {
  fsh_plan *p = plan_of("{\"nodes\": [" SCAN(3000, 3, 1) ", {\"op\": \"limit\", \"n\": 10, "
                        "\"local\": true}, {\"op\": \"project\", \"columns\": [{\"name\": "
                        "\"id\", \"expr\": {\"col\": \"id\"}}]}]}");
  if (!p) return;
  fsh_plan_result got, ref;
  fsh_error err;
  run_both(p, &got, &ref);
  int rc = fsh_plan_result_compare(p, &got, &ref, &err);
  CHECK_MSG(rc == ENOTSUP && strstr(err.message, "limit") != NULL, "%d %s", rc, err.message);
  reset_both(&got, &ref);
  fsh_plan_free(p);
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"local_limit_scan", local_limit_scan},
      {"local_limit_hash", local_limit_hash},
      {"local_limit_random", local_limit_random},
      {"local_top_n", local_top_n},
      {"local_sort", local_sort},
      {"sorted_local_limit", sorted_local_limit},
      {"local_aggregate", local_aggregate},
      {"global_top_n_ties", global_top_n_ties},
      {"into_partitions_sizes", into_partitions_sizes},
      {"into_batches_sizes", into_batches_sizes},
      {"not_last", not_last},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
