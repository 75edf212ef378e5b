/* sorted_check.c -- checking a sort's result as it streams
 * (fsh_sorted_check, exec.h): rows, the order-independent row checksum
 * (fsh_plan_batch_checksum) and that the keys never decrease from one
 * row to the next across batches and partitions, holding only the last
 * batch seen (for the comparison with the next batch's first row). A
 * partition given again (b NULL for a partition already begun: its read
 * was retried) rolls everything back to the state when it first began. */
#include "exec/plan_run_internal.h"

/* What the check has seen up to some point of the stream. */
typedef struct check_state {
  int64_t rows, batches;
  uint64_t checksum;
  int64_t disorder_row;
  int32_t disorder_partition;
  fsh_batch *last; /* the last batch seen (a reference), or NULL */
} check_state;

struct fsh_sorted_check {
  int32_t *key_cols;
  int n_keys;
  fsh_sort_key *order;  /* n_keys */
  int32_t partition;    /* the partition being read, -1 before the first */
  check_state now, at_part; /* at_part: when `partition` began */
};

static void state_reset(check_state *s) {
  fsh_batch_unref(s->last);
  s->last = NULL;
}

static void state_copy(check_state *to, const check_state *from) {
  state_reset(to);
  *to = *from;
  if (to->last) fsh_batch_ref(to->last);
}

int fsh_sorted_check_new(const fsh_schema *schema, const int32_t *key_cols, int n_keys,
                         const fsh_sort_key *order, fsh_sorted_check **out, fsh_error *err) {
  *out = NULL;
  if (!schema || !key_cols || n_keys < 1)
    return fsh_error_set(err, EINVAL, "sorted check: NULL argument or no key column");
  for (int i = 0; i < n_keys; i++)
    if (key_cols[i] < 0 || key_cols[i] >= schema->n_fields)
      return fsh_error_set(err, EINVAL, "sorted check: key %d is column %d, the schema has %lld",
                           i, (int)key_cols[i], (long long)schema->n_fields);
  fsh_sorted_check *c = fsh_calloc(1, sizeof *c);
  if (c) {
    c->key_cols = fsh_malloc((size_t)n_keys * sizeof *c->key_cols);
    c->order = fsh_malloc((size_t)n_keys * sizeof *c->order);
  }
  if (!c || !c->key_cols || !c->order) {
    fsh_sorted_check_free(c);
    return fsh_error_set(err, ENOMEM, "sorted check: out of memory");
  }
  c->n_keys = n_keys;
  for (int i = 0; i < n_keys; i++) {
    c->key_cols[i] = key_cols[i];
    c->order[i] = order ? order[i] : (fsh_sort_key){false, false};
  }
  c->partition = -1;
  c->now.disorder_row = c->at_part.disorder_row = -1;
  c->now.disorder_partition = c->at_part.disorder_partition = -1;
  *out = c;
  return 0;
}

void fsh_sorted_check_free(fsh_sorted_check *c) {
  if (!c) return;
  state_reset(&c->now);
  state_reset(&c->at_part);
  fsh_free(c->key_cols);
  fsh_free(c->order);
  fsh_free(c);
}

/* The first row of b whose keys sort before the previous row's (row i - 1
 * of b, or for row 0 prev's last row when prev has rows), or -1. */
static int first_disorder(const fsh_sorted_check *c, const fsh_batch *prev, const fsh_batch *b,
                          int64_t *row, fsh_error *err) {
  *row = -1;
  fsh_row_keys *rk = NULL, *pk = NULL;
  FSH_RETURN_NOT_OK(fsh_row_keys_new(b, c->key_cols, c->n_keys, c->order, &rk, err));
  int rc = 0;
  if (prev && prev->length > 0) {
    if ((rc = fsh_row_keys_new(prev, c->key_cols, c->n_keys, c->order, &pk, err)) == 0 &&
        (rc = fsh_row_keys_check_compatible(pk, rk, err)) == 0 &&
        fsh_row_keys_compare(pk, prev->length - 1, rk, 0) > 0)
      *row = 0;
  }
  const fsh_field *f = &b->schema->fields[c->key_cols[0]];
  const fsh_array *a = b->columns[c->key_cols[0]];
  if (rc == 0 && *row < 0 && c->n_keys == 1 && f->type == FSH_TYPE_INT64 && !f->dictionary &&
      (!a->buffers[0] || a->null_count == 0)) {
    /* one plain int64 key without nulls (a sort's usual case): the values
     * directly */
    const int64_t *v = (const int64_t *)(const void *)a->buffers[1]->data + a->offset;
    bool desc = c->order[0].descending;
    for (int64_t i = 1; *row < 0 && i < b->length; i++)
      if (desc ? v[i - 1] < v[i] : v[i - 1] > v[i]) *row = i;
  } else {
    for (int64_t i = 1; rc == 0 && *row < 0 && i < b->length; i++)
      if (fsh_row_keys_compare(rk, i - 1, rk, i) > 0) *row = i;
  }
  fsh_row_keys_free(rk);
  fsh_row_keys_free(pk);
  return rc;
}

int fsh_sorted_check_sink(void *check, int32_t partition, fsh_batch *b, fsh_error *err) {
  fsh_sorted_check *c = check;
  if (!b) {
    if (partition == c->partition) state_copy(&c->now, &c->at_part); /* read again */
    else if (partition < c->partition)
      return fsh_error_set(err, EINVAL, "sorted check: partition %d after partition %d",
                           (int)partition, (int)c->partition);
    else state_copy(&c->at_part, &c->now), c->partition = partition;
    return 0;
  }
  if (partition != c->partition)
    return fsh_error_set(err, EINVAL, "sorted check: a batch of partition %d, which did not "
                         "begin (partition %d is being read)", (int)partition, (int)c->partition);
  if (b->length == 0) return 0;
  uint64_t sum = c->now.checksum;
  FSH_RETURN_NOT_OK(fsh_plan_batch_checksum(b, &sum, err));
  if (c->now.disorder_row < 0) {
    int64_t row = -1;
    int rc = first_disorder(c, c->now.last, b, &row, err);
    if (rc) return fsh_error_prefix(err, rc, "sorted check: ");
    if (row >= 0) c->now.disorder_row = c->now.rows + row, c->now.disorder_partition = partition;
  }
  c->now.checksum = sum;
  c->now.rows += b->length;
  c->now.batches++;
  fsh_batch_unref(c->now.last);
  c->now.last = fsh_batch_ref(b);
  return 0;
}

void fsh_sorted_check_get(const fsh_sorted_check *c, fsh_sorted_check_result *out) {
  *out = (fsh_sorted_check_result){.rows = c->now.rows, .checksum = c->now.checksum,
                                   .batches = c->now.batches,
                                   .disorder_row = c->now.disorder_row,
                                   .disorder_partition = c->now.disorder_partition};
}
