/* test_spill_memory.c -- what the bounded-memory operators charge their
 * budgets: a set of slices of one ~10 MB batch costs ~10 MB (fsh_mem_set,
 * against a naive walk of the batch's buffers), not n x 10 MB; views of a
 * parent buffer cost their own sizes, each once. The operators: an external sort
 * whose budget holds the batch once takes ten slices of it without going
 * over (and refuses two copies); a hash join's build side the same; a hash
 * aggregate whose key copies share one large dictionary charges it once. */
#include "kernels/kernel_helpers.h"

#include <flightshuffle/exec.h>

#include <errno.h>

enum { ROWS = 400000, SLICES = 10 };

/* Buffers of the batch, naively (this test builds no shared buffers). */
static int64_t naive_bytes(const fsh_batch *b) {
  int64_t n = 0;
  for (int64_t c = 0; c < b->n_columns; c++) {
    const fsh_array *a = b->columns[c];
    for (int i = 0; i < a->n_buffers; i++)
      if (a->buffers[i]) n += a->buffers[i]->size;
    if (a->dictionary)
      for (int i = 0; i < a->dictionary->n_buffers; i++)
        if (a->dictionary->buffers[i]) n += a->dictionary->buffers[i]->size;
  }
  return n;
}

/* ~10 MB: an int64 key (3.2 MB) and a utf8 payload of 12-byte values
 * (1.6 MB offsets, 4.8 MB data). */
static fsh_batch *big_batch(void) {
  int64_t *k = malloc(ROWS * 8);
  const char **s = malloc(ROWS * sizeof *s);
  char(*text)[16] = malloc((size_t)ROWS * 16);
  uint64_t st = 99;
  for (int64_t i = 0; i < ROWS; i++) {
    k[i] = (int64_t)(kh_rand(&st) % 1000000);
    snprintf(text[i], 16, "v%011lld", (long long)i);
    s[i] = text[i];
  }
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "k", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, ROWS, k, 8));
  sbh_col(&c, "s", FSH_TYPE_STRING, false);
  SBH_SET(&c, sbh_strings(NULL, ROWS, s));
  fsh_batch *b = sbh_finish(&c, ROWS);
  free(k);
  free(s);
  free(text);
  return b;
}

static void slices_of(fsh_batch *b, fsh_batch **out) {
  for (int i = 0; i < SLICES; i++)
    out[i] = SBH_OK(fsh_batch_slice(b, (int64_t)i * (ROWS / SLICES), ROWS / SLICES));
}

static void test_mem_set_counts_shared_buffers_once(void) {
  fsh_error err;
  fsh_batch *b = big_batch(), *sl[SLICES];
  int64_t want = naive_bytes(b);
  CHECK_MSG(want > 9000000 && want < 11000000, "the batch holds %lld bytes", (long long)want);
  CHECK_EQ_INT(fsh_exec_batch_memory(b), want);
  slices_of(b, sl);
  fsh_mem_set m;
  fsh_mem_set_init(&m);
  int64_t each_alone = 0;
  for (int i = 0; i < SLICES; i++) {
    int64_t added = -1;
    CHECK_OK(fsh_mem_set_add(&m, sl[i], &added, &err));
    CHECK_EQ_INT(added, i == 0 ? want : 0); /* the first slice brings every buffer */
    each_alone += fsh_exec_batch_memory(sl[i]);
  }
  CHECK_EQ_INT(m.bytes, want);
  CHECK_EQ_INT(each_alone, SLICES * want); /* one slice alone still costs its buffers */
  /* a copy has buffers of its own */
  fsh_batch *copy = NULL;
  CHECK_OK(fsh_concat(sl, 1, &copy, &err));
  int64_t added = 0;
  if (copy) CHECK_OK(fsh_mem_set_add(&m, copy, &added, &err));
  CHECK(copy && added == naive_bytes(copy) && added > 0);
  CHECK_EQ_INT(m.bytes, want + added);
  fsh_mem_set_clear(&m);
  CHECK_EQ_INT(m.bytes, 0);
  CHECK_OK(fsh_mem_set_add(&m, sl[3], &added, &err));
  CHECK_EQ_INT(added, want);
  fsh_mem_set_reset(&m);
  /* views of one parent buffer (an IPC body's columns) cost their own
   * sizes; the same view twice costs it once */
  fsh_buffer *parent = fsh_buffer_new(1 << 20, true);
  int64_t psize = parent ? parent->size : 0;
  fsh_schema *s2 = fsh_schema_new(2);
  CHECK(parent && s2 && fsh_field_init(&s2->fields[0], "a", FSH_TYPE_INT64, false) == 0 &&
        fsh_field_init(&s2->fields[1], "b", FSH_TYPE_INT64, false) == 0);
  fsh_batch *v = fsh_batch_new(s2, 1000);
  for (int c = 0; v && c < 2; c++) {
    v->columns[c] = fsh_array_new(2, 0);
    v->columns[c]->length = 1000;
    v->columns[c]->null_count = 0;
    v->columns[c]->buffers[1] = fsh_buffer_slice(parent, c * 8000, 8000);
  }
  if (v) CHECK_EQ_INT(fsh_exec_batch_memory(v), 16000);
  fsh_batch *v2 = v ? fsh_batch_slice(v, 10, 500) : NULL;
  fsh_mem_set_init(&m);
  if (v && v2) {
    CHECK_OK(fsh_mem_set_add(&m, v, NULL, &err));
    CHECK_OK(fsh_mem_set_add(&m, v2, NULL, &err));
    CHECK_EQ_INT(m.bytes, 16000);
  }
  fsh_mem_set_reset(&m);
  fsh_batch_unref(v2);
  CHECK(psize == 1 << 20);
  fsh_batch_unref(v);
  fsh_schema_unref(s2);
  fsh_buffer_unref(parent);
  fsh_batch_unref(copy);
  for (int i = 0; i < SLICES; i++) fsh_batch_unref(sl[i]);
  fsh_batch_unref(b);
}

static void test_extsort_budget_holds_slices_once(void) {
  fsh_error err;
  fsh_batch *b = big_batch(), *sl[SLICES];
  int64_t want = naive_bytes(b);
  slices_of(b, sl);
  int32_t key = 0;
  fsh_extsort_options o = {.key_cols = &key, .n_keys = 1, .memory_budget = want + want / 2};
  fsh_extsort *s = NULL;
  CHECK_OK(fsh_extsort_new(b->schema, &o, &s, &err));
  for (int i = 0; s && i < SLICES; i++) CHECK_OK(fsh_extsort_push(s, sl[i], &err));
  fsh_extsort_stats st;
  if (s) {
    fsh_extsort_get_stats(s, &st);
    CHECK_EQ_INT(st.peak_memory, want);
    CHECK_EQ_INT(st.runs, 0);
    fsh_batch_stream out;
    CHECK_OK(fsh_extsort_finish(s, &out, &err));
    int64_t rows = 0, prev = INT64_MIN;
    bool sorted = true;
    for (;;) {
      fsh_batch *o2 = NULL;
      if (out.get_next(&out, &o2, &err) != 0 || !o2) break;
      for (int64_t r = 0; r < o2->length; r++) {
        int64_t v;
        memcpy(&v, o2->columns[0]->buffers[1]->data + 8 * (o2->columns[0]->offset + r), 8);
        sorted = sorted && v >= prev;
        prev = v;
      }
      rows += o2->length;
      fsh_batch_unref(o2);
    }
    out.release(&out);
    CHECK_EQ_INT(rows, ROWS);
    CHECK(sorted);
  }
  fsh_extsort_free(s);
  /* two copies of the batch do go over the budget (no spill directory: EFBIG) */
  fsh_batch *c1 = NULL, *c2 = NULL;
  CHECK_OK(fsh_concat(sl, SLICES, &c1, &err));
  CHECK_OK(fsh_concat(sl, SLICES, &c2, &err));
  s = NULL;
  CHECK_OK(fsh_extsort_new(b->schema, &o, &s, &err));
  if (s && c1 && c2) {
    CHECK_OK(fsh_extsort_push(s, c1, &err));
    CHECK_EQ_INT(fsh_extsort_push(s, c2, &err), EFBIG);
  }
  fsh_extsort_free(s);
  fsh_batch_unref(c1);
  fsh_batch_unref(c2);
  for (int i = 0; i < SLICES; i++) fsh_batch_unref(sl[i]);
  fsh_batch_unref(b);
}

static void test_join_build_budget_holds_slices_once(void) {
  fsh_error err;
  fsh_batch *b = big_batch(), *sl[SLICES];
  int64_t want = naive_bytes(b);
  slices_of(b, sl);
  int32_t key = 0;
  /* the build side before the table: its buffers + 40 bytes a row (exec.h) */
  int64_t budget = want + (int64_t)ROWS * 40 + want / 4;
  fsh_hash_join *j = NULL;
  CHECK_OK(fsh_hash_join_new(b->schema, b->schema, &key, &key, 1, FSH_JOIN_INNER, false, budget,
                             &j, &err));
  for (int i = 0; j && i < SLICES; i++) CHECK_OK(fsh_hash_join_build(j, sl[i], &err));
  if (j) CHECK(fsh_hash_join_memory(j) < want + (int64_t)ROWS * 40 + 100000);
  fsh_hash_join_free(j);
  fsh_batch *c1 = NULL, *c2 = NULL;
  CHECK_OK(fsh_concat(sl, SLICES, &c1, &err));
  CHECK_OK(fsh_concat(sl, SLICES, &c2, &err));
  j = NULL;
  CHECK_OK(fsh_hash_join_new(b->schema, b->schema, &key, &key, 1, FSH_JOIN_INNER, false, budget,
                             &j, &err));
  if (j && c1 && c2) {
    CHECK_OK(fsh_hash_join_build(j, c1, &err));
    CHECK_EQ_INT(fsh_hash_join_build(j, c2, &err), EFBIG);
  }
  fsh_hash_join_free(j);
  fsh_batch_unref(c1);
  fsh_batch_unref(c2);
  for (int i = 0; i < SLICES; i++) fsh_batch_unref(sl[i]);
  fsh_batch_unref(b);
}

/* Key copies of a dictionary column share its dictionary: charged once. */
static void test_agg_key_copies_share_the_dictionary(void) {
  fsh_error err;
  enum { DICT = 20000, PUSHES = 40, PER = 100 };
  static char text[DICT][48];
  static const char *vals[DICT];
  for (int i = 0; i < DICT; i++) {
    snprintf(text[i], sizeof text[i], "dictionary value number %020d", i);
    vals[i] = text[i];
  }
  sbh_cols c;
  c.n = 0;
  fsh_field *f = sbh_col(&c, "k", FSH_TYPE_STRING, false);
  sbh_dict(f, 0, FSH_TYPE_INT32, false);
  int32_t *idx = malloc(PUSHES * PER * 4);
  for (int i = 0; i < PUSHES * PER; i++) idx[i] = i; /* every row a new key */
  fsh_array *a = sbh_fixed(NULL, PUSHES * PER, idx, 4);
  a->dictionary = sbh_strings(NULL, DICT, vals);
  SBH_SET(&c, a);
  fsh_batch *b = sbh_finish(&c, PUSHES * PER);
  int64_t dict_bytes = 0;
  for (int i = 0; i < a->dictionary->n_buffers; i++)
    if (a->dictionary->buffers[i]) dict_bytes += a->dictionary->buffers[i]->size;
  int32_t kc = 0;
  fsh_agg_spec cnt = {FSH_AGG_COUNT_STAR, -1, NULL};
  fsh_hash_agg *g = NULL;
  CHECK_OK(fsh_hash_agg_new(b->schema, &kc, 1, &cnt, 1, FSH_AGG_SINGLE, 0, &g, &err));
  for (int p = 0; g && p < PUSHES; p++) {
    fsh_batch *part = SBH_OK(fsh_batch_slice(b, (int64_t)p * PER, PER));
    CHECK_OK(fsh_hash_agg_push(g, part, &err));
    fsh_batch_unref(part);
  }
  if (g) {
    CHECK_EQ_INT(fsh_hash_agg_groups(g), PUSHES * PER);
    int64_t m = fsh_hash_agg_memory(g);
    CHECK_MSG(m > dict_bytes && m < 2 * dict_bytes, "memory %lld, dictionary %lld bytes",
              (long long)m, (long long)dict_bytes);
  }
  fsh_hash_agg_free(g);
  fsh_batch_unref(b);
  free(idx);
}

FSH_TEST_MAIN(TEST(test_mem_set_counts_shared_buffers_once),
              TEST(test_extsort_budget_holds_slices_once),
              TEST(test_join_build_budget_holds_slices_once),
              TEST(test_agg_key_copies_share_the_dictionary))
