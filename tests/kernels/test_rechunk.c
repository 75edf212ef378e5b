/* test_rechunk.c -- "into batches" (fsh_rechunker) and "into partitions"
 * (fsh_plan_partitions): random input sizes (empty ones included), targets
 * and partition counts smaller and larger than the inputs; the outputs put
 * back together must equal the input rows in order, sizes as documented,
 * zero-copy where an output lies in one input; allocation failure. */
#include "kernels/kernel_helpers.h"

#include <errno.h>

/* Cuts b into random pieces (sizes 0..max_piece), re-chunks them at
 * `target` and checks sizes, order and zero-copy. */
static void check_rechunk(fsh_batch *b, int64_t target, int64_t max_piece, uint64_t seed) {
  fsh_error err;
  fsh_rechunker *r = NULL;
  CHECK_OK(fsh_rechunker_new(target, &r, &err));
  if (!r) return;
  uint64_t st = seed;
  fsh_batch **outs = malloc(sizeof *outs * (size_t)(b->length + 2));
  int64_t n_out = 0, pos = 0, total = 0;
  int64_t n_pieces = 0, sliced_ok = 0, sliced = 0;
  fsh_batch *pieces[4096];
  while (pos < b->length) {
    int64_t len = (int64_t)(kh_rand(&st) % (uint64_t)(max_piece + 1));
    if (len > b->length - pos) len = b->length - pos;
    fsh_batch *p = SBH_OK(fsh_batch_slice(b, pos, len));
    pos += len;
    CHECK_OK(fsh_rechunker_push(r, p, &err));
    if (n_pieces < 4096) pieces[n_pieces++] = p;
    else fsh_batch_unref(p);
    for (;;) {
      fsh_batch *o = NULL;
      CHECK_OK(fsh_rechunker_pop(r, &o, &err));
      if (!o) break;
      CHECK_MSG(o->length == target, "output %lld has %lld rows before finish, target %lld",
                (long long)n_out, (long long)o->length, (long long)target);
      outs[n_out++] = o;
      total += o->length;
    }
  }
  CHECK_MSG(b->length - total < target, "%lld rows held back", (long long)(b->length - total));
  fsh_rechunker_finish(r);
  CHECK_EQ_INT(fsh_rechunker_push(r, b, &err), EINVAL);
  for (;;) {
    fsh_batch *o = NULL;
    CHECK_OK(fsh_rechunker_pop(r, &o, &err));
    if (!o) break;
    CHECK(o->length <= target && o->length > 0);
    outs[n_out++] = o;
    total += o->length;
  }
  CHECK_EQ_INT(total, b->length);
  CHECK_EQ_INT(n_out, (b->length + target - 1) / target);
  /* Zero-copy: an output inside one input shares its data buffers (those
   * of a fixed-width column, column 5 of the every-type sample: i64). */
  int64_t row = 0;
  for (int64_t i = 0; i < n_out; i++) {
    int64_t start = row, end = row + outs[i]->length, at = 0;
    for (int64_t p = 0; p < n_pieces; p++) {
      int64_t ps = at, pe = at + pieces[p]->length;
      at = pe;
      if (ps <= start && end <= pe && pieces[p]->length > 0) {
        sliced++;
        sliced_ok += outs[i]->columns[5]->buffers[1] == pieces[p]->columns[5]->buffers[1];
        break;
      }
    }
    row = end;
  }
  CHECK_EQ_INT(sliced_ok, sliced);
  if (n_out > 0) {
    fsh_batch *all = NULL;
    CHECK_OK(fsh_concat(outs, n_out, &all, &err));
    int64_t *idx = malloc(sizeof *idx * (size_t)b->length);
    for (int64_t i = 0; i < b->length; i++) idx[i] = i;
    kh_check_equals_take(b, idx, b->length, all, "rechunked");
    free(idx);
    fsh_batch_unref(all);
  }
  for (int64_t i = 0; i < n_out; i++) fsh_batch_unref(outs[i]);
  for (int64_t i = 0; i < n_pieces; i++) fsh_batch_unref(pieces[i]);
  free(outs);
  fsh_rechunker_free(r);
}

static void test_rechunk(void) {
  fsh_batch *b = kh_big_batch(20, 3); /* every type, offsets everywhere */
  int64_t targets[] = {1, 3, 7, 50, 1000};
  int64_t pieces[] = {0, 1, 5, 20, 200};
  for (int t = 0; t < 5; t++)
    for (int p = 0; p < 5; p++)
      if (pieces[p] > 0) check_rechunk(b, targets[t], pieces[p], (uint64_t)(t * 7 + p));
  fsh_batch_unref(b);
}

static void test_rechunk_edges(void) {
  fsh_error err;
  fsh_rechunker *r = NULL;
  CHECK_EQ_INT(fsh_rechunker_new(0, &r, &err), EINVAL);
  CHECK(r == NULL);
  /* No input at all, or only empty ones: nothing comes out. */
  CHECK_OK(fsh_rechunker_new(4, &r, &err));
  fsh_batch *b = fsh_sample_all_types(), *e = SBH_OK(fsh_batch_slice(b, 2, 0)), *o = NULL;
  CHECK_OK(fsh_rechunker_push(r, e, &err));
  fsh_rechunker_finish(r);
  CHECK_OK(fsh_rechunker_pop(r, &o, &err));
  CHECK(o == NULL);
  fsh_rechunker_free(r);
  /* A whole input of exactly the target is passed on as is. */
  CHECK_OK(fsh_rechunker_new(b->length, &r, &err));
  CHECK_OK(fsh_rechunker_push(r, b, &err));
  CHECK_OK(fsh_rechunker_pop(r, &o, &err));
  CHECK(o == b);
  fsh_batch_unref(o);
  /* Another schema is refused, naming the difference. */
  fsh_schema *s = fsh_sample_dict_schema();
  const char *xs[] = {"x"};
  int32_t zero = 0;
  fsh_array *dict = sbh_strings(NULL, 1, xs);
  fsh_batch *other = fsh_sample_dict_batch(s, dict, 1, &zero);
  fsh_array_unref(dict);
  CHECK_EQ_INT(fsh_rechunker_push(r, other, &err), EINVAL);
  CHECK(strstr(err.message, "schema") != NULL);
  fsh_batch_unref(other);
  fsh_schema_unref(s);
  fsh_rechunker_free(r);
  fsh_rechunker_free(NULL);
  fsh_batch_unref(e);
  fsh_batch_unref(b);
}

static void test_rechunk_alloc_failure(void) {
  fsh_error err;
  /* Two columns (the every-type batch's concat would make this quadratic
   * loop long): i64 with nulls and utf8. */
  int64_t vals[19];
  const char *strs[19];
  for (int i = 0; i < 19; i++) vals[i] = i * 3, strs[i] = i % 2 ? "odd" : "even";
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "i", FSH_TYPE_INT64, true);
  SBH_SET(&c, sbh_fixed("1101111111011111111", 19, vals, 8));
  sbh_col(&c, "s", FSH_TYPE_STRING, false);
  SBH_SET(&c, sbh_strings(NULL, 19, strs));
  fsh_batch *b = sbh_finish(&c, 19);
  bool done = false;
  for (int64_t n = 1; n < 2000 && !done; n++) {
    fsh_rechunker *r = NULL;
    fsh_alloc_fail_after(n, false);
    int rc = fsh_rechunker_new(5, &r, &err);
    int64_t got = 0;
    for (int64_t pos = 0; rc == 0 && pos < b->length; pos += 3) {
      fsh_batch *p = fsh_batch_slice(b, pos, pos + 3 <= b->length ? 3 : b->length - pos);
      if (!p) { rc = ENOMEM; break; }
      rc = fsh_rechunker_push(r, p, &err);
      fsh_batch_unref(p);
      for (fsh_batch *o = NULL; rc == 0;) {
        rc = fsh_rechunker_pop(r, &o, &err);
        if (rc != 0) CHECK(o == NULL);
        if (!o) break;
        got += o->length;
        fsh_batch_unref(o);
      }
    }
    if (rc == 0) fsh_rechunker_finish(r);
    for (fsh_batch *o = NULL; rc == 0;) {
      rc = fsh_rechunker_pop(r, &o, &err);
      if (!o) break;
      got += o->length;
      fsh_batch_unref(o);
    }
    fsh_alloc_fail_after(0, false);
    CHECK_MSG(rc == 0 || rc == ENOMEM, "rc %d: %s", rc, err.message);
    if (rc == 0) {
      done = true;
      CHECK_EQ_INT(got, b->length);
    }
    fsh_rechunker_free(r);
  }
  CHECK(done);
  fsh_batch_unref(b);
}

/* ---- into partitions ---------------------------------------------------- */

static void check_plan(const int64_t *rows, int64_t n_in, int32_t n_out) {
  fsh_error err;
  fsh_part_slice *out = malloc(sizeof *out * (size_t)n_out);
  CHECK_OK(fsh_plan_partitions(rows, n_in, n_out, out, &err));
  int64_t total = 0, cum[300];
  for (int64_t i = 0; i < n_in; i++) cum[i] = total, total += rows[i];
  cum[n_in] = total;
  int64_t at = 0, lo = total / n_out;
  for (int32_t p = 0; p < n_out; p++) {
    int64_t sz = out[p].n_rows;
    CHECK_MSG(sz == lo || sz == lo + 1, "output %d: %lld rows, total %lld / %d", p, (long long)sz,
              (long long)total, n_out);
    CHECK(p == 0 || sz <= out[p - 1].n_rows); /* the extra rows go first */
    CHECK(out[p].first_input >= 0 && out[p].first_input <= n_in);
    if (out[p].first_input < n_in && sz > 0) {
      CHECK(out[p].first_row >= 0 && out[p].first_row < rows[out[p].first_input]);
      CHECK_EQ_INT(cum[out[p].first_input] + out[p].first_row, at); /* contiguous */
    } else {
      CHECK(sz == 0 && out[p].first_row == 0);
    }
    at += sz;
  }
  CHECK_EQ_INT(at, total);
  free(out);
}

static void test_plan_partitions(void) {
  fsh_error err;
  uint64_t st = 3;
  int64_t rows[256];
  for (int round = 0; round < 200; round++) {
    int64_t n_in = (int64_t)(kh_rand(&st) % 40);
    for (int64_t i = 0; i < n_in; i++) {
      uint64_t x = kh_rand(&st) % 10;
      rows[i] = x < 3 ? 0 : x < 6 ? (int64_t)(kh_rand(&st) % 5) : (int64_t)(kh_rand(&st) % 1000);
    }
    int32_t ns[] = {1,    2, (int32_t)(n_in > 1 ? n_in - 1 : 1), (int32_t)(n_in + 1),
                    (int32_t)(3 * n_in + 7), 1000};
    for (int k = 0; k < 6; k++) check_plan(rows, n_in, ns[k]);
  }
  /* A worked example: 3 inputs of 10, 0 and 5 rows into 4 outputs of 4,
   * 4, 4, 3 rows. */
  int64_t ex[] = {10, 0, 5};
  fsh_part_slice out[4];
  CHECK_OK(fsh_plan_partitions(ex, 3, 4, out, &err));
  CHECK(out[0].first_input == 0 && out[0].first_row == 0 && out[0].n_rows == 4);
  CHECK(out[1].first_input == 0 && out[1].first_row == 4 && out[1].n_rows == 4);
  CHECK(out[2].first_input == 0 && out[2].first_row == 8 && out[2].n_rows == 4);
  CHECK(out[3].first_input == 2 && out[3].first_row == 2 && out[3].n_rows == 3);
  CHECK_EQ_INT(fsh_plan_partitions(ex, 3, 0, out, &err), EINVAL);
  ex[1] = -1;
  CHECK_EQ_INT(fsh_plan_partitions(ex, 3, 4, out, &err), EINVAL);
  CHECK(strstr(err.message, "input 1") != NULL);
}

FSH_TEST_MAIN(TEST(test_rechunk), TEST(test_rechunk_edges), TEST(test_rechunk_alloc_failure),
              TEST(test_plan_partitions))
