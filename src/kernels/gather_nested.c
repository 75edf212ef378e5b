/* gather_nested.c -- the nested half of the row gather: lists, maps,
 * fixed-size lists, structs, sparse and dense unions. Each builds the child
 * slots the gathered rows own and gathers every child once (one index array
 * per call, never per row). */
#include "kernels/kernels_internal.h"

/* (Large) list and map: new offsets, then the children of every gathered
 * row, in order. */
static int gather_list(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx, int64_t n,
                       fsh_array *r, fsh_error *err) {
  int w = kern_offset_width(f->type);
  const uint8_t *offs = kern_buf(a, 1);
  int64_t total = 0;
  if (n == 0 || !offs) {
    if (!(r->buffers[1] = fsh_buffer_new(w, true))) return kern_oom(err);
  } else {
    FSH_RETURN_NOT_OK(fsh_kern_gather_offsets(offs, off, idx, n, w, &r->buffers[1], &total, err));
  }
  int64_t *child_idx = fsh_malloc((size_t)(total > 0 ? total : 1) * sizeof *child_idx);
  if (!child_idx) return kern_oom(err);
  int64_t at = 0;
  for (int64_t k = 0; k < n && total > 0; k++) {
    int64_t j = off + idx[k];
    int64_t s = kern_read_offset(offs, j, w), e = kern_read_offset(offs, j + 1, w);
    for (int64_t c = s; c < e; c++) child_idx[at++] = c;
  }
  int rc = fsh_kern_gather(&f->children[0], a->children[0], 0, child_idx, total, &r->children[0],
                           err);
  fsh_free(child_idx);
  return rc;
}

static int gather_fixed_list(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx,
                             int64_t n, fsh_array *r, fsh_error *err) {
  int64_t size = f->list_size, total = n * size;
  int64_t *child_idx = fsh_malloc((size_t)(total > 0 ? total : 1) * sizeof *child_idx);
  if (!child_idx) return kern_oom(err);
  for (int64_t k = 0; k < n; k++)
    for (int64_t c = 0; c < size; c++) child_idx[k * size + c] = (off + idx[k]) * size + c;
  int rc = fsh_kern_gather(&f->children[0], a->children[0], 0, child_idx, total, &r->children[0],
                           err);
  fsh_free(child_idx);
  return rc;
}

/* Struct and sparse-union children: the parent's slot is the child's slot. */
static int gather_children_aligned(const fsh_field *f, fsh_array *a, int64_t off,
                                   const int64_t *idx, int64_t n, fsh_array *r, fsh_error *err) {
  for (int64_t k = 0; k < f->n_children; k++)
    FSH_RETURN_NOT_OK(
        fsh_kern_gather(&f->children[k], a->children[k], off, idx, n, &r->children[k], err));
  return 0;
}

static int gather_type_ids(fsh_array *a, int64_t off, const int64_t *idx, int64_t n, fsh_array *r,
                           fsh_error *err) {
  if (!(r->buffers[0] = fsh_buffer_new(n, false))) return kern_oom(err);
  if (n > 0) fsh_kern_gather_fixed(kern_buf(a, 0), off, idx, n, 1, r->buffers[0]->data);
  return 0;
}

/* Dense union: each child gets the values of the gathered rows that point
 * at it, in row order (a counting sort by child); offsets are renumbered. */
static int gather_dense_union(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx,
                              int64_t n, fsh_array *r, fsh_error *err) {
  int8_t map[128];
  fsh_kern_union_map(f, map);
  FSH_RETURN_NOT_OK(gather_type_ids(a, off, idx, n, r, err));
  if (!(r->buffers[1] = fsh_buffer_new(4 * n, false))) return kern_oom(err);
  int64_t nc = f->n_children;
  int64_t *start = fsh_calloc((size_t)nc + 1, sizeof *start);
  int64_t *child_idx = fsh_malloc((size_t)(n > 0 ? n : 1) * sizeof *child_idx);
  int rc = start && child_idx ? 0 : kern_oom(err);
  const int8_t *ids = (const int8_t *)r->buffers[0]->data;
  const uint8_t *src_offs = kern_buf(a, 1);
  for (int64_t k = 0; k < n && rc == 0; k++) start[map[ids[k]] + 1]++;
  for (int64_t c = 0; c < nc && rc == 0; c++) start[c + 1] += start[c];
  for (int64_t k = 0; k < n && rc == 0; k++) { /* start[c] runs as a cursor */
    int c = map[ids[k]];
    int32_t o = (int32_t)start[c]; /* a position in child_idx for now */
    child_idx[start[c]] = kern_read_i32(src_offs, off + idx[k]);
    memcpy(r->buffers[1]->data + 4 * k, &o, 4);
    start[c]++;
  }
  /* start[c] is now the end of child c's run; runs are back to back. */
  for (int64_t c = 0; c < nc && rc == 0; c++) {
    int64_t first = c > 0 ? start[c - 1] : 0;
    rc = fsh_kern_gather(&f->children[c], a->children[c], 0, child_idx + first, start[c] - first,
                         &r->children[c], err);
  }
  /* Offsets were written as positions in child_idx: make them relative to
   * each child's run. */
  for (int64_t k = 0; k < n && rc == 0; k++) {
    int c = map[ids[k]];
    int32_t o;
    memcpy(&o, r->buffers[1]->data + 4 * k, 4);
    o -= (int32_t)(c > 0 ? start[c - 1] : 0);
    memcpy(r->buffers[1]->data + 4 * k, &o, 4);
  }
  fsh_free(start);
  fsh_free(child_idx);
  return rc;
}

int fsh_kern_gather_nested(const fsh_field *f, fsh_array *a, int64_t off, const int64_t *idx,
                           int64_t n, fsh_array *r, fsh_error *err) {
  switch (f->type) {
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      return gather_list(f, a, off, idx, n, r, err);
    case FSH_TYPE_FIXED_SIZE_LIST: return gather_fixed_list(f, a, off, idx, n, r, err);
    case FSH_TYPE_STRUCT: return gather_children_aligned(f, a, off, idx, n, r, err);
    case FSH_TYPE_SPARSE_UNION:
      FSH_RETURN_NOT_OK(gather_type_ids(a, off, idx, n, r, err));
      return gather_children_aligned(f, a, off, idx, n, r, err);
    case FSH_TYPE_DENSE_UNION: return gather_dense_union(f, a, off, idx, n, r, err);
    default: return fsh_error_set(err, ENOTSUP, "cannot gather type %s", fsh_type_name(f->type));
  }
}
