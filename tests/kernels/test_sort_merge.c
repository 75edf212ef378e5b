/* test_sort_merge.c -- the k-way merge of sorted batches and range
 * boundaries from a sample, against the reference stable sort of
 * sort_ref.h: random splits into k inputs (some empty), streaming target
 * sizes, skewed keys, every order; boundaries feed fsh_partition_range. */
#include "kernels/sort_ref.h"

static const int *g_in_of;

/* By key, then input, then row: the documented merge order. */
static int merge_ref_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  int c = ref_cmp_rows((int)x, (int)y);
  if (c == 0) c = (g_in_of[x] > g_in_of[y]) - (g_in_of[x] < g_in_of[y]);
  return c != 0 ? c : (x > y) - (x < y);
}

/* Splits rows of data into k inputs at random (keeping order), sorts each
 * with the reference, merges with our merger at `target` rows a batch and
 * checks each output's size and the whole against the reference: ties by
 * input, then by row. */
static void check_merge(fsh_batch *data, int s, int o, int k, int64_t target, uint64_t seed) {
  fsh_error err;
  enum { K = 9 };
  static int64_t rows[K][ROWS], want[ROWS];
  static int in_of[ROWS];
  int64_t cnt[K] = {0};
  uint64_t st = seed;
  for (int r = 0; r < ROWS; r++) {
    int i = (int)(kh_rand(&st) % (uint64_t)k);
    if (k > 2 && i == 1) i = 0; /* input 1 stays empty */
    rows[i][cnt[i]++] = r;
    in_of[r] = i;
  }
  g_keys = REF_KEYS[s];
  g_order = REF_ORDERS[o];
  g_nkeys = REF_NKEYS[s];
  fsh_batch *inputs[K];
  for (int i = 0; i < k; i++) {
    qsort(rows[i], (size_t)cnt[i], sizeof rows[i][0], ref_qsort_cmp);
    CHECK_OK(fsh_take(data, rows[i], cnt[i], &inputs[i], &err));
  }
  /* The reference: every row, by key, then input, then row. */
  int64_t n = 0;
  for (int i = 0; i < k; i++)
    for (int64_t j = 0; j < cnt[i]; j++) want[n++] = rows[i][j];
  g_in_of = in_of;
  qsort(want, (size_t)n, sizeof want[0], merge_ref_cmp);
  fsh_merger *m = NULL;
  CHECK_OK(fsh_merger_new(inputs, k, REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[o], target, &m, &err));
  fsh_batch *outs[ROWS + 1];
  int64_t n_out = 0, total = 0;
  for (;;) {
    fsh_batch *b = NULL;
    CHECK_OK(fsh_merger_next(m, &b, &err));
    if (!b) break;
    total += b->length;
    CHECK_MSG(b->length == target || total == n, "batch %lld has %lld rows, target %lld",
              (long long)n_out, (long long)b->length, (long long)target);
    outs[n_out++] = b;
  }
  fsh_batch *none = (fsh_batch *)1;
  CHECK_OK(fsh_merger_next(m, &none, &err));
  CHECK(none == NULL);
  fsh_merger_free(m);
  CHECK_EQ_INT(total, n);
  fsh_batch *all = NULL;
  if (n_out > 0) CHECK_OK(fsh_concat(outs, n_out, &all, &err));
  if (all) kh_check_equals_take(data, want, n, all, "merged");
  fsh_batch_unref(all);
  for (int64_t i = 0; i < n_out; i++) fsh_batch_unref(outs[i]);
  /* The same inputs as streams of random pieces (empty ones included). */
  fsh_batch_stream streams[K];
  for (int i = 0; i < k; i++) {
    fsh_batch *cuts[64];
    int nc = 0;
    for (int64_t at = 0; at < inputs[i]->length || nc == 0;) {
      int64_t len = (int64_t)(kh_rand(&st) % 400);
      if (len > inputs[i]->length - at || nc == 62) len = inputs[i]->length - at;
      cuts[nc++] = SBH_OK(fsh_batch_slice(inputs[i], at, len));
      at += len;
    }
    CHECK_OK(fsh_batch_stream_from_batches(inputs[i]->schema, cuts, nc, &streams[i], &err));
    for (int c = 0; c < nc; c++) fsh_batch_unref(cuts[c]);
  }
  CHECK_OK(fsh_merger_new_streams(streams, k, REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[o], target, &m,
                                  &err));
  n_out = total = 0;
  for (;;) {
    fsh_batch *b = NULL;
    CHECK_OK(fsh_merger_next(m, &b, &err));
    if (!b) break;
    total += b->length;
    CHECK_MSG(b->length == target || total == n, "stream merge: batch of %lld rows, target %lld",
              (long long)b->length, (long long)target);
    outs[n_out++] = b;
  }
  fsh_merger_free(m);
  CHECK_EQ_INT(total, n);
  all = NULL;
  if (n_out > 0) CHECK_OK(fsh_concat(outs, n_out, &all, &err));
  if (all) kh_check_equals_take(data, want, n, all, "stream merge");
  fsh_batch_unref(all);
  for (int64_t i = 0; i < n_out; i++) fsh_batch_unref(outs[i]);
  /* The one-shot form. */
  fsh_batch *one = NULL;
  CHECK_OK(fsh_merge_sorted(inputs, k, REF_KEYS[s], REF_NKEYS[s], REF_ORDERS[o], &one, &err));
  if (one) kh_check_equals_take(data, want, n, one, "merge_sorted");
  fsh_batch_unref(one);
  for (int i = 0; i < k; i++) fsh_batch_unref(inputs[i]);
}

static void test_merge_against_reference(void) {
  for (int skew = 0; skew <= 90; skew += 90) {
    fsh_batch *data = ref_make_data(21 + (uint64_t)skew, skew);
    int64_t targets[] = {1, 7, 1000, ROWS, ROWS * 2};
    int ks[] = {1, 2, 3, 9};
    int t = 0;
    for (int s = 0; s < REF_NSETS; s++)
      for (int o = 0; o < 4; o++, t++)
        check_merge(data, s, o, ks[t % 4], targets[t % 5], (uint64_t)t);
    fsh_batch_unref(data);
  }
}

static void test_merge_edges(void) {
  fsh_error err;
  fsh_batch *data = ref_make_data(3, 0);
  fsh_batch *empty = SBH_OK(fsh_batch_slice(data, 10, 0));
  fsh_batch *ins[] = {empty, empty};
  int32_t key = 0;
  fsh_batch *out = NULL;
  CHECK_OK(fsh_merge_sorted(ins, 2, &key, 1, NULL, &out, &err)); /* all inputs empty */
  CHECK(out != NULL && out->length == 0 && out->n_columns == NCOLS);
  fsh_batch_unref(out);
  fsh_merger *m = NULL;
  CHECK_OK(fsh_merger_new(ins, 2, &key, 1, NULL, 5, &m, &err));
  CHECK_OK(fsh_merger_next(m, &out, &err));
  CHECK(out == NULL);
  fsh_merger_free(m);
  /* A single sorted input is passed through as slices of itself. */
  fsh_batch *sorted = NULL;
  CHECK_OK(fsh_sort_batch(data, &key, 1, NULL, &sorted, &err));
  CHECK_OK(fsh_merger_new(&sorted, 1, &key, 1, NULL, 100, &m, &err));
  CHECK_OK(fsh_merger_next(m, &out, &err));
  CHECK(out && out->length == 100 && out->columns[0]->buffers[1] == sorted->columns[0]->buffers[1]);
  fsh_batch_unref(out);
  fsh_merger_free(m);
  /* Errors: a schema that differs, no target, an unorderable key. */
  fsh_batch *other = fsh_sample_all_types();
  fsh_batch *mixed[] = {data, other};
  CHECK_EQ_INT(fsh_merger_new(mixed, 2, &key, 1, NULL, 5, &m, &err), EINVAL);
  CHECK_MSG(m == NULL && strstr(err.message, "input 1") != NULL, "%s", err.message);
  CHECK_EQ_INT(fsh_merger_new(ins, 2, &key, 1, NULL, 0, &m, &err), EINVAL);
  int32_t list_col = 0;
  while (other->schema->fields[list_col].type != FSH_TYPE_LIST) list_col++;
  CHECK_EQ_INT(fsh_merger_new(&other, 1, &list_col, 1, NULL, 5, &m, &err), ENOTSUP);
  CHECK(m == NULL);
  fsh_batch_unref(other);
  fsh_batch_unref(sorted);
  fsh_batch_unref(empty);
  fsh_batch_unref(data);
}

/* Boundaries against the reference: sort the sample, take the rows at the
 * quantiles, drop those equal to the previous one; then they must be
 * accepted by fsh_partition_range and (for a big enough sample) give
 * partitions of the sample within a factor of the ideal size unless one key
 * holds more than that. */
static void check_boundaries(fsh_batch *data, int64_t off, int64_t n, int s, int o, int32_t np) {
  fsh_error err;
  static int64_t sorted[ROWS], pick[ROWS];
  const int32_t *keys = REF_KEYS[s];
  int nk = REF_NKEYS[s];
  const fsh_sort_key *order = REF_ORDERS[o];
  fsh_batch *sample = SBH_OK(fsh_batch_slice(data, off, n));
  ref_sort(keys, nk, order, off, n, sorted);
  int64_t nb = 0;
  for (int32_t p = 1; p < np && n > 0; p++) {
    int64_t q = (int64_t)((__int128)n * p / np);
    if (nb > 0 && ref_cmp_rows((int)(pick[nb - 1] + off), (int)(sorted[q] + off)) >= 0) continue;
    pick[nb++] = sorted[q];
  }
  fsh_batch *proj = ref_project(sample, keys, nk), *want = NULL, *got = NULL;
  CHECK_OK(fsh_take(proj, pick, nb, &want, &err));
  CHECK_OK(fsh_range_boundaries(sample, keys, nk, order, np, &got, &err));
  CHECK_MSG(got && want && fsh_batch_equals(want, got, &err), "keys %d order %d np %d: %s", s, o,
            np, got ? err.message : "no batch");
  if (got) {
    CHECK(got->length <= np - 1);
    int32_t *part = malloc((size_t)(n > 0 ? n : 1) * sizeof *part);
    CHECK_OK(fsh_partition_range(sample, keys, nk, got, order, part, &err));
    free(part);
  }
  fsh_batch_unref(got);
  fsh_batch_unref(want);
  fsh_batch_unref(proj);
  fsh_batch_unref(sample);
}

static void test_boundaries_against_reference(void) {
  int32_t nps[] = {1, 2, 5, 64, ROWS * 2};
  for (int skew = 0; skew <= 95; skew += 95) {
    fsh_batch *data = ref_make_data(31 + (uint64_t)skew, skew);
    int t = 0;
    for (int s = 0; s < REF_NSETS; s++)
      for (int o = 0; o < 4; o++, t++) {
        check_boundaries(data, 9, ROWS - 20, s, o, nps[t % 5]);
        check_boundaries(data, 100, t % 3, s, o, nps[(t + 2) % 5]); /* 0, 1, 2 rows */
      }
    fsh_batch_unref(data);
  }
}

/* Skew: 95% of rows hold one key. Boundaries stay strictly increasing,
 * that key gets one partition, and the other partitions share the rest. */
static void test_boundaries_skew(void) {
  fsh_error err;
  fsh_batch *data = ref_make_data(77, 95);
  int32_t key = 5; /* u64 */
  fsh_batch *bounds = NULL;
  CHECK_OK(fsh_range_boundaries(data, &key, 1, NULL, 16, &bounds, &err));
  CHECK(bounds && bounds->length >= 1 && bounds->length <= 15);
  static int32_t part[ROWS];
  CHECK_OK(fsh_partition_range(data, &key, 1, bounds, NULL, part, &err));
  int64_t count[16] = {0}, biggest = 0;
  for (int r = 0; r < ROWS; r++) {
    CHECK(part[r] >= 0 && part[r] <= bounds->length);
    count[part[r]]++;
  }
  for (int p = 0; p < 16; p++) biggest = count[p] > biggest ? count[p] : biggest;
  int64_t hot = 0;
  for (int r = 0; r < ROWS; r++) hot += R.valid[5][r] && R.u[r] == 7;
  CHECK_MSG(biggest >= hot && biggest <= hot + ROWS / 8, "biggest partition %lld, hot key %lld",
            (long long)biggest, (long long)hot);
  fsh_batch_unref(bounds);
  CHECK_EQ_INT(fsh_range_boundaries(data, &key, 1, NULL, 0, &bounds, &err), EINVAL);
  CHECK(bounds == NULL);
  fsh_batch_unref(data);
}

/* Every orderable column of the every-type sample: the merge of the two
 * sorted halves equals the stable sort of the whole (the first half's rows
 * first on ties), and boundaries strictly increase (fsh_row_keys_compare,
 * tested against a reference in test_partition.c) and are accepted by
 * fsh_partition_range. */
static void test_all_types(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(8, 2);
  int64_t half = b->length / 2;
  fsh_batch *h[2] = {SBH_OK(fsh_batch_slice(b, 0, half)),
                     SBH_OK(fsh_batch_slice(b, half, b->length - half))};
  int n_ok = 0;
  int32_t *part = malloc(sizeof *part * (size_t)b->length);
  for (int32_t c = 0; c < b->n_columns; c++) {
    fsh_sort_key order = REF_ORDERS[c % 4][0];
    fsh_batch *s[2] = {NULL, NULL}, *whole = NULL, *merged = NULL, *bounds = NULL;
    int rc = fsh_sort_batch(b, &c, 1, &order, &whole, &err);
    if (rc == ENOTSUP) continue;
    n_ok++;
    CHECK_OK(rc);
    CHECK_OK(fsh_sort_batch(h[0], &c, 1, &order, &s[0], &err));
    CHECK_OK(fsh_sort_batch(h[1], &c, 1, &order, &s[1], &err));
    CHECK_OK(fsh_merge_sorted(s, 2, &c, 1, &order, &merged, &err));
    CHECK_MSG(merged && whole && fsh_batch_equals(whole, merged, &err), "column %s: %s",
              b->schema->fields[c].name, err.message);
    CHECK_OK(fsh_range_boundaries(b, &c, 1, &order, 6, &bounds, &err));
    if (bounds) {
      int32_t zero = 0;
      fsh_row_keys *rk = NULL;
      CHECK_OK(fsh_row_keys_new(bounds, &zero, 1, &order, &rk, &err));
      for (int64_t i = 1; rk && i < bounds->length; i++)
        CHECK_MSG(fsh_row_keys_compare(rk, i - 1, rk, i) < 0, "column %s: boundaries %lld, %lld",
                  b->schema->fields[c].name, (long long)i - 1, (long long)i);
      CHECK(bounds->length >= 1 && bounds->length <= 5);
      CHECK_OK(fsh_partition_range(b, &c, 1, bounds, &order, part, &err));
      fsh_row_keys_free(rk);
    }
    fsh_batch_unref(bounds);
    fsh_batch_unref(merged);
    fsh_batch_unref(whole);
    fsh_batch_unref(s[0]);
    fsh_batch_unref(s[1]);
  }
  CHECK_MSG(n_ok >= 33, "only %d orderable columns", n_ok);
  free(part);
  fsh_batch_unref(h[0]);
  fsh_batch_unref(h[1]);
  fsh_batch_unref(b);
}

/* The distributed sort in one process: sample, boundaries, range
 * partitioning, scatter, local sorts, partitions concatenated in order.
 * Equal keys land in one partition and local sorts are stable, so the
 * result must equal the reference stable sort of the whole, for skewed
 * data and partition counts below and above the sample size. */
static void test_distributed_sort_pipeline(void) {
  fsh_error err;
  static int64_t want[ROWS], sample_rows[ROWS];
  for (int skew = 0; skew <= 95; skew += 95) {
    fsh_batch *data = ref_make_data(55 + (uint64_t)skew, skew);
    int32_t nps[] = {1, 3, 16, 200};
    for (int s = 0; s < REF_NSETS; s += 2)
      for (int t = 0; t < 4; t++) {
        int o = (s + t) % 4;
        const int32_t *keys = REF_KEYS[s];
        int nk = REF_NKEYS[s];
        uint64_t st = (uint64_t)(s * 10 + t);
        int64_t ns = 100;
        for (int64_t i = 0; i < ns; i++) sample_rows[i] = (int64_t)(kh_rand(&st) % ROWS);
        fsh_batch *sample = NULL, *bounds = NULL, *all = NULL;
        CHECK_OK(fsh_take(data, sample_rows, ns, &sample, &err));
        CHECK_OK(fsh_range_boundaries(sample, keys, nk, REF_ORDERS[o], nps[t], &bounds, &err));
        fsh_batch_unref(sample);
        if (!bounds) continue;
        int32_t np = (int32_t)bounds->length + 1;
        static int32_t part[ROWS];
        fsh_batch **parts = calloc((size_t)np, sizeof *parts);
        fsh_batch **sorted = calloc((size_t)np, sizeof *sorted);
        CHECK_OK(fsh_partition_range(data, keys, nk, bounds, REF_ORDERS[o], part, &err));
        CHECK_OK(fsh_scatter(data, part, np, parts, &err));
        int64_t n_sorted = 0;
        for (int32_t p = 0; p < np; p++)
          if (parts[p])
            CHECK_OK(fsh_sort_batch(parts[p], keys, nk, REF_ORDERS[o], &sorted[n_sorted++], &err));
        CHECK_OK(fsh_concat(sorted, n_sorted, &all, &err));
        ref_sort(keys, nk, REF_ORDERS[o], 0, ROWS, want);
        if (all) kh_check_equals_take(data, want, ROWS, all, "distributed sort");
        for (int32_t p = 0; p < np; p++) fsh_batch_unref(parts[p]), fsh_batch_unref(sorted[p]);
        free(parts);
        free(sorted);
        fsh_batch_unref(all);
        fsh_batch_unref(bounds);
      }
    fsh_batch_unref(data);
  }
}

static void test_alloc_failure(void) {
  fsh_error err;
  fsh_batch *data = ref_make_data(8, 0);
  int32_t keys[] = {3, 1};
  fsh_batch *a = NULL, *b = NULL;
  fsh_batch *la = SBH_OK(fsh_batch_slice(data, 0, 200));
  fsh_batch *lb = SBH_OK(fsh_batch_slice(data, 200, 150));
  CHECK_OK(fsh_sort_batch(la, keys, 2, NULL, &a, &err));
  CHECK_OK(fsh_sort_batch(lb, keys, 2, NULL, &b, &err));
  fsh_batch *ins[] = {a, b};
  for (int which = 0; which < 4; which++) {
    bool done = false;
    for (int64_t n = 1; n < 1000 && !done; n++) {
      fsh_batch *out = NULL;
      fsh_alloc_fail_after(n, which == 2);
      int rc;
      if (which == 0) {
        rc = fsh_merge_sorted(ins, 2, keys, 2, NULL, &out, &err);
      } else if (which == 1) { /* streaming: a failed next leaves the merger as it was */
        fsh_merger *m = NULL;
        fsh_alloc_fail_after(0, false);
        CHECK_OK(fsh_merger_new(ins, 2, keys, 2, NULL, 64, &m, &err));
        fsh_batch *parts[8] = {NULL};
        int np = 0;
        fsh_alloc_fail_after(n, false);
        rc = 0;
        while (np < 8) {
          int r = fsh_merger_next(m, &parts[np], &err);
          if (r != 0) {
            rc = r;
            CHECK(parts[np] == NULL);
            continue; /* retry: the one-shot failure has passed */
          }
          if (!parts[np]) break;
          np++;
        }
        fsh_alloc_fail_after(0, false);
        fsh_merger_free(m);
        fsh_batch *all = NULL;
        CHECK_OK(fsh_concat(parts, np, &all, &err));
        fsh_batch *want = NULL;
        CHECK_OK(fsh_merge_sorted(ins, 2, keys, 2, NULL, &want, &err));
        CHECK_MSG(all && want && fsh_batch_equals(want, all, &err), "after a failed next: %s",
                  err.message);
        fsh_batch_unref(all);
        fsh_batch_unref(want);
        for (int i = 0; i < np; i++) fsh_batch_unref(parts[i]);
        done = rc == 0;
        continue;
      } else if (which == 3) { /* streams: a failure leaves a merger that can be freed */
        fsh_alloc_fail_after(0, false);
        fsh_batch_stream st[2];
        for (int i = 0; i < 2; i++) {
          fsh_batch *cuts[3];
          int64_t third = ins[i]->length / 3;
          for (int c = 0; c < 3; c++)
            cuts[c] = SBH_OK(fsh_batch_slice(ins[i], c * third,
                                             c == 2 ? ins[i]->length - 2 * third : third));
          CHECK_OK(fsh_batch_stream_from_batches(ins[i]->schema, cuts, 3, &st[i], &err));
          for (int c = 0; c < 3; c++) fsh_batch_unref(cuts[c]);
        }
        fsh_merger *m = NULL;
        fsh_alloc_fail_after(n, false);
        rc = fsh_merger_new_streams(st, 2, keys, 2, NULL, 50, &m, &err);
        CHECK(rc == 0 || (m == NULL && st[0].release == NULL && st[1].release == NULL));
        fsh_batch *parts[16] = {NULL};
        int np = 0;
        while (rc == 0 && np < 16) {
          rc = fsh_merger_next(m, &parts[np], &err);
          if (rc != 0 || !parts[np]) break;
          np++;
        }
        fsh_alloc_fail_after(0, false);
        if (rc == 0) {
          CHECK_OK(fsh_concat(parts, np, &out, &err));
          fsh_batch *want = NULL;
          CHECK_OK(fsh_merge_sorted(ins, 2, keys, 2, NULL, &want, &err));
          CHECK_MSG(out && want && fsh_batch_equals(want, out, &err), "stream merge: %s",
                    err.message);
          fsh_batch_unref(want);
        } else if (m) {
          fsh_batch *again = NULL;
          int rc2 = fsh_merger_next(m, &again, &err); /* broken, or as before the call */
          CHECK(rc2 == 0 || rc2 == EINVAL);
          fsh_batch_unref(again);
        }
        for (int i = 0; i < np; i++) fsh_batch_unref(parts[i]);
        fsh_merger_free(m);
      } else {
        rc = fsh_range_boundaries(data, keys, 2, NULL, 10, &out, &err);
      }
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        done = true;
        CHECK(out != NULL);
      } else {
        CHECK_MSG(rc == ENOMEM && out == NULL, "fail at %lld: rc %d %s", (long long)n, rc,
                  err.message);
      }
      fsh_batch_unref(out);
    }
    CHECK(done);
  }
  fsh_batch_unref(a);
  fsh_batch_unref(b);
  fsh_batch_unref(la);
  fsh_batch_unref(lb);
  fsh_batch_unref(data);
}

FSH_TEST_MAIN(TEST(test_merge_against_reference), TEST(test_merge_edges),
              TEST(test_boundaries_against_reference), TEST(test_boundaries_skew),
              TEST(test_all_types), TEST(test_distributed_sort_pipeline),
              TEST(test_alloc_failure))
