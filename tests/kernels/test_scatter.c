/* test_scatter.c -- scatter of every type into partitions: each partition
 * equals take() of its rows (so all partitions together are a permutation
 * of the input), for random ids, one partition, 4096 partitions, all rows
 * to one partition, empty batches; errors; allocation failures. */
#include "kernels/kernel_helpers.h"

#include <errno.h>

/* Scatters b by part[] into n_p partitions and checks every partition
 * against take() of the rows the reference assigns it. */
static void check_scatter(fsh_batch *b, const int32_t *part, int32_t n_p, const char *what) {
  fsh_error err;
  fsh_batch **out = SBH_OK(fsh_calloc((size_t)n_p, sizeof *out));
  int64_t *idx = SBH_OK(fsh_malloc(sizeof *idx * (size_t)(b->length + 1)));
  CHECK_OK(fsh_scatter(b, part, n_p, out, &err));
  int64_t total = 0;
  for (int32_t p = 0; p < n_p; p++) {
    int64_t n = 0;
    for (int64_t i = 0; i < b->length; i++)
      if (part[i] == p) idx[n++] = i;
    total += out[p] ? out[p]->length : 0;
    CHECK_MSG((n == 0) == (out[p] == NULL), "%s: partition %d has %lld rows, batch %p", what, p,
              (long long)n, (void *)out[p]);
    if (n > 0) kh_check_equals_take(b, idx, n, out[p], what);
    fsh_batch_unref(out[p]);
  }
  CHECK_EQ_INT(total, b->length);
  fsh_free(idx);
  fsh_free(out);
}

static void test_scatter_all_types(void) {
  fsh_batch *b = kh_big_batch(40, 3); /* 274 rows, sliced */
  int32_t part[512];
  uint64_t st = 5;
  int32_t ns[] = {1, 2, 3, 8, 64, 4096};
  for (int k = 0; k < 6; k++) {
    for (int64_t i = 0; i < b->length; i++) part[i] = (int32_t)(kh_rand(&st) % (uint64_t)ns[k]);
    check_scatter(b, part, ns[k], "random ids");
  }
  /* All rows to one partition: out[5] is the batch itself. */
  for (int64_t i = 0; i < b->length; i++) part[i] = 5;
  fsh_error err;
  fsh_batch *out[8];
  CHECK_OK(fsh_scatter(b, part, 8, out, &err));
  for (int p = 0; p < 8; p++) CHECK(p == 5 ? out[p] == b : out[p] == NULL);
  fsh_batch_unref(out[5]);
  check_scatter(b, part, 8, "all to one");
  /* Runs, the last partition only, alternate rows. */
  for (int64_t i = 0; i < b->length; i++) part[i] = (int32_t)(i / 50);
  check_scatter(b, part, 6, "runs");
  for (int64_t i = 0; i < b->length; i++) part[i] = (int32_t)(i % 2) * 4095;
  check_scatter(b, part, 4096, "two of 4096");
  fsh_batch_unref(b);
}

static void test_scatter_empty_and_small(void) {
  fsh_error err;
  fsh_batch *one = fsh_sample_all_types();
  fsh_batch *empty = SBH_OK(fsh_batch_slice(one, 7, 0));
  fsh_batch *out[4] = {(fsh_batch *)1, (fsh_batch *)1, (fsh_batch *)1, (fsh_batch *)1};
  CHECK_OK(fsh_scatter(empty, NULL, 4, out, &err));
  for (int p = 0; p < 4; p++) CHECK(out[p] == NULL);
  int32_t part[7] = {3, 0, 3, 1, 0, 3, 1};
  check_scatter(one, part, 4, "sample");
  fsh_batch *row = SBH_OK(fsh_batch_slice(one, 4, 1));
  int32_t p0 = 0;
  check_scatter(row, &p0, 1, "one row");
  fsh_batch_unref(row);
  fsh_batch_unref(empty);
  fsh_batch_unref(one);
}

static void test_scatter_errors(void) {
  fsh_error err;
  fsh_batch *b = fsh_sample_all_types();
  int32_t part[7] = {0, 1, 2, 3, 4, 1, 0};
  fsh_batch *out[4] = {(fsh_batch *)1, (fsh_batch *)1, (fsh_batch *)1, (fsh_batch *)1};
  CHECK_EQ_INT(fsh_scatter(b, part, 4, out, &err), EINVAL);
  CHECK_MSG(strstr(err.message, "row 4 has partition 4") != NULL, "%s", err.message);
  for (int p = 0; p < 4; p++) CHECK(out[p] == NULL);
  part[4] = -1;
  CHECK_EQ_INT(fsh_scatter(b, part, 4, out, &err), EINVAL);
  CHECK_EQ_INT(fsh_scatter(b, part, 0, out, &err), EINVAL);
  fsh_batch_unref(b);
}

/* Fail the Nth allocation until scatter succeeds, transient and
 * persistent: ENOMEM, every slot NULL, no leak (LSan). */
static void test_scatter_alloc_failures(void) {
  fsh_error err;
  fsh_batch *b = kh_big_batch(3, 1);
  int32_t part[32];
  for (int64_t i = 0; i < b->length; i++) part[i] = (int32_t)((i * 7) % 5);
  for (int persistent = 0; persistent < 2; persistent++) {
    int rc = -1;
    int64_t k;
    for (k = 1; k < 100000 && rc != 0; k++) {
      fsh_batch *out[5];
      fsh_alloc_fail_after(k, persistent);
      rc = fsh_scatter(b, part, 5, out, &err);
      fsh_alloc_fail_after(0, false);
      if (rc != 0) {
        CHECK_MSG(rc == ENOMEM, "k %lld: rc %d: %s", (long long)k, rc, err.message);
        for (int p = 0; p < 5; p++) CHECK(out[p] == NULL);
      } else {
        for (int p = 0; p < 5; p++) {
          CHECK(out[p] && fsh_batch_validate(out[p], true, &err) == 0);
          fsh_batch_unref(out[p]);
        }
      }
    }
    CHECK_MSG(rc == 0 && k > 50, "succeeded after %lld allocations", (long long)k);
  }
  check_scatter(b, part, 5, "after failures");
  fsh_batch_unref(b);
}

FSH_TEST_MAIN(TEST(test_scatter_all_types), TEST(test_scatter_empty_and_small),
              TEST(test_scatter_errors), TEST(test_scatter_alloc_failures))
