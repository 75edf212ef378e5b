/* filter.c -- rows selected by a bitmap: the selected row numbers, then a
 * gather (or the input itself when every row is selected). */
#include "kernels/kernels_internal.h"

/* Selected row numbers of [0, length) into a new array; *n its count. */
static int selected_rows(const uint8_t *sel, int64_t length, int64_t **rows, int64_t *n,
                         fsh_error *err) {
  *n = fsh_bitmap_count(sel, 0, length);
  *rows = fsh_malloc(sizeof **rows * (size_t)(*n > 0 ? *n : 1));
  if (!*rows) return fsh_error_set(err, ENOMEM, "filter: out of memory");
  int64_t at = 0;
  for (int64_t i = 0; i < length; i += 64) {
    uint64_t word = 0;
    int64_t m = length - i < 64 ? length - i : 64;
    memcpy(&word, sel + i / 8, (size_t)fsh_bytes_for_bits(m));
    if (m < 64) word &= (1ull << m) - 1;
    while (word) {
      (*rows)[at++] = i + __builtin_ctzll(word);
      word &= word - 1;
    }
  }
  return 0;
}

int fsh_array_filter(const fsh_field *f, fsh_array *a, const uint8_t *selection, fsh_array **out,
                     fsh_error *err) {
  *out = NULL;
  if (!f || !a || (a->length > 0 && !selection))
    return fsh_error_set(err, EINVAL, "filter: NULL field, array or selection");
  int64_t *rows, n;
  FSH_RETURN_NOT_OK(selected_rows(selection, a->length, &rows, &n, err));
  int rc = 0;
  if (n == a->length)
    *out = fsh_array_ref(a);
  else
    rc = fsh_kern_gather(f, a, 0, rows, n, out, err);
  fsh_free(rows);
  if (rc != 0) fsh_error_prefix(err, rc, "filter of column '%s': ", f->name);
  return rc;
}

int fsh_filter(fsh_batch *b, const uint8_t *selection, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (!b || (b->length > 0 && !selection))
    return fsh_error_set(err, EINVAL, "filter: NULL batch or selection");
  int64_t *rows, n;
  FSH_RETURN_NOT_OK(selected_rows(selection, b->length, &rows, &n, err));
  int rc = 0;
  if (n == b->length)
    *out = fsh_batch_ref(b);
  else
    rc = fsh_kern_gather_batch(b, rows, n, out, err);
  fsh_free(rows);
  if (rc != 0) fsh_error_prefix(err, rc, "filter: ");
  return rc;
}
