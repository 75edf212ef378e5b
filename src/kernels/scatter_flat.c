/* scatter_flat.c -- push-style scatter of one flat column (fixed width,
 * bool, (large) binary/utf8, dictionary indices) into its partitions: the
 * partitions' arrays are allocated from the row counts, then ONE sequential
 * pass over the source rows writes each value to its slot in its
 * partition (validity: a pass over the null rows only). Reading
 * the source once, in order, is what makes this faster than gathering each
 * partition's scattered rows (which re-reads the source's cache lines once
 * per partition). Nested columns are gathered instead (scatter.c). */
#include "kernels/kernels_internal.h"

#include "kernels/scatter_internal.h"

bool fsh_kern_scatter_flat_ok(const fsh_field *f) {
  if (f->dictionary) return true;
  switch (f->type) {
    case FSH_TYPE_NA: case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_FIXED_SIZE_LIST:
    case FSH_TYPE_STRUCT: case FSH_TYPE_MAP: case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION:
      return false;
    default: return true;
  }
}

static bool is_binary(const fsh_field *f) {
  return !f->dictionary && (f->type == FSH_TYPE_BINARY || f->type == FSH_TYPE_STRING ||
                            f->type == FSH_TYPE_LARGE_BINARY || f->type == FSH_TYPE_LARGE_STRING);
}

/* Writes value i (bytes of width W) to its slot in its partition, for
 * each row: independent stores (no per-partition cursor to update). */
#define PUSH_LOOP(W)                                                                  \
  for (int64_t i = 0; i < n; i++)                                                     \
    memcpy(dst[part[i]] + (W) * (int64_t)slot[i], src + (W) * (off + i), (W));

void fsh_kern_push_fixed(const scatter_plan *sp, const uint8_t *src, int64_t off, int64_t w,
                         uint8_t **dst) {
  const int32_t *part = sp->part, *slot = sp->slot;
  int64_t n = sp->n;
  switch (w) {
    case 1: PUSH_LOOP(1); break;
    case 2: PUSH_LOOP(2); break;
    case 4: PUSH_LOOP(4); break;
    case 8: PUSH_LOOP(8); break;
    case 16: PUSH_LOOP(16); break;
    default: PUSH_LOOP(w);
  }
}

/* Bool values into zeroed destination bitmaps: the set bits. */
static void push_bits(const scatter_plan *sp, const uint8_t *src, int64_t off, uint8_t **dst) {
  for (int64_t i = 0; i < sp->n; i++) {
    int32_t k = sp->slot[i];
    if ((src[(off + i) >> 3] >> ((off + i) & 7)) & 1u) dst[sp->part[i]][k >> 3] |= (uint8_t)(1u << (k & 7));
  }
}

/* Validity: destination bitmaps start all valid (padding bits zero), then
 * the null rows -- found 64 at a time, so a column with few nulls costs
 * little more than a pass over its bitmap -- clear their bit; exact null
 * counts; a bitmap is dropped where its partition has no null. */
static int scatter_validity(const scatter_plan *sp, fsh_array *a, fsh_array **arr, uint8_t **dst,
                            int64_t *nulls, fsh_error *err) {
  if (!a->buffers[0] || a->null_count == 0) return 0;
  for (int32_t p = 0; p < sp->n_p; p++) {
    dst[p] = NULL;
    nulls[p] = 0;
    if (!arr[p]) continue;
    int64_t bytes = fsh_bytes_for_bits(sp->count[p]);
    if (!(arr[p]->buffers[0] = fsh_buffer_new(bytes, false))) return kern_oom(err);
    dst[p] = arr[p]->buffers[0]->data;
    memset(dst[p], 0xFF, (size_t)bytes);
    if (sp->count[p] & 7) dst[p][bytes - 1] = (uint8_t)((1u << (sp->count[p] & 7)) - 1);
  }
  const uint8_t *src = a->buffers[0]->data;
  for (int64_t i = 0; i < sp->n; i += 64) {
    int64_t k = sp->n - i < 64 ? sp->n - i : 64;
    for (uint64_t null_bits = fsh_kern_load_nulls(src, a->offset + i, k); null_bits;
         null_bits &= null_bits - 1) {
      int64_t r = i + __builtin_ctzll(null_bits);
      int32_t p = sp->part[r], s = sp->slot[r];
      dst[p][s >> 3] &= (uint8_t)~(1u << (s & 7));
      nulls[p]++;
    }
  }
  for (int32_t p = 0; p < sp->n_p; p++) {
    if (!arr[p]) continue;
    arr[p]->null_count = nulls[p];
    if (nulls[p] == 0) {
      fsh_buffer_unref(arr[p]->buffers[0]);
      arr[p]->buffers[0] = NULL;
    }
  }
  return 0;
}

/* One pass over the rows: the source offsets read once each (a row's start
 * is the previous row's end), the plan's arrays and the loop bound held in
 * locals (the byte stores could alias them otherwise, and the compiler
 * would reload them every row), a row's bytes copied 32 at a time
 * unconditionally while its 32 bytes stay inside the source buffer (no
 * branch on the random length; rows past that limit -- only the last few
 * -- take the exact copy), and, when `prefetch`, the destination's next
 * line prefetched a few rows ahead: for destinations not in cache (new
 * buffers: fsh_scatter). The partition builders' destinations are a
 * cache-resident staging buffer or (many partitions, few rows each)
 * builder lines touched a few rows earlier: there the prefetch's three
 * loads a row cost more than it saves (a 1000-partition push 2.13 -> 1.87
 * ns a row, a 64-partition one 1.93 -> 1.55, warm destinations, one
 * thread; no change in a loaded cluster's map phase). */
#define PREFETCH_ROWS 16

static inline __attribute__((always_inline)) void push_binary_w(
    const scatter_plan *sp, const fsh_array *a, int w, uint8_t **offs_dst, uint8_t **data_dst,
    int64_t *pos, bool prefetch) {
  const int32_t *restrict part = sp->part, *restrict slot = sp->slot;
  const int64_t n = sp->n;
  const uint8_t *offs = kern_buf(a, 1) + (int64_t)w * a->offset, *data = kern_buf(a, 2);
  int64_t data_size = a->buffers[2] ? a->buffers[2]->size : 0;
  int64_t fast_end = data_size - 32; /* rows starting at or before this copy 32 bytes */
  int64_t s = kern_read_offset(offs, 0, w);
  for (int64_t i = 0; i < n; i++) {
    int64_t e = kern_read_offset(offs, i + 1, w), len = e - s;
    int32_t p = part[i];
    if (prefetch && i + PREFETCH_ROWS < n) { /* the line after the write position of a row's
                                              * partition PREFETCH_ROWS rows ahead: more
                                              * destinations than the hardware prefetcher
                                              * follows */
      int32_t q = part[i + PREFETCH_ROWS];
      __builtin_prefetch((const void *)((uintptr_t)data_dst[q] + (uintptr_t)pos[q] + 64), 1);
    }
    int64_t at = pos[p];
    uint8_t *d = data_dst[p] + at;
    if (len <= 32 && s <= fast_end) { /* 32 spare bytes at the end of each destination */
      memcpy(d, data + s, 32);
    } else if (len > 0) {
      memcpy(d, data + s, (size_t)len);
    }
    at += len;
    pos[p] = at;
    int64_t k = (int64_t)slot[i] + 1;
    if (w == 4) {
      int32_t o = (int32_t)at;
      memcpy(offs_dst[p] + 4 * k, &o, 4);
    } else {
      memcpy(offs_dst[p] + 8 * k, &at, 8);
    }
    s = e;
  }
}

void fsh_kern_push_binary(const scatter_plan *sp, const fsh_array *a, int w, uint8_t **offs_dst,
                          uint8_t **data_dst, int64_t *pos, bool prefetch) {
  if (w == 4 && prefetch)
    push_binary_w(sp, a, 4, offs_dst, data_dst, pos, true);
  else if (w == 4)
    push_binary_w(sp, a, 4, offs_dst, data_dst, pos, false);
  else
    push_binary_w(sp, a, 8, offs_dst, data_dst, pos, prefetch);
}

/* Per-partition byte totals of a binary column, then its buffers. */
static int alloc_binary(const scatter_plan *sp, const fsh_array *a, int w, fsh_array **arr,
                        int64_t *bytes, fsh_error *err) {
  const uint8_t *offs = kern_buf(a, 1);
  memset(bytes, 0, sizeof *bytes * (size_t)sp->n_p);
  for (int64_t i = 0; i < sp->n; i++)
    bytes[sp->part[i]] += kern_read_offset(offs, a->offset + i + 1, w) -
                          kern_read_offset(offs, a->offset + i, w);
  for (int32_t p = 0; p < sp->n_p; p++) {
    if (!arr[p]) continue;
    arr[p]->buffers[1] = fsh_buffer_new((sp->count[p] + 1) * w, false);
    arr[p]->buffers[2] = fsh_buffer_new(bytes[p] + 32, false);
    if (!arr[p]->buffers[1] || !arr[p]->buffers[2]) return kern_oom(err);
    memset(arr[p]->buffers[1]->data, 0, (size_t)w); /* the first offset; push_binary_w the rest */
  }
  return 0;
}

static int scatter_values(const scatter_plan *sp, const fsh_field *f, fsh_array *a,
                          fsh_array **arr, uint8_t **dst, fsh_error *err) {
  int64_t bits = fsh_type_bit_width(f);
  for (int32_t p = 0; p < sp->n_p; p++) {
    dst[p] = NULL;
    if (!arr[p]) continue;
    int64_t size = bits == 1 ? fsh_bytes_for_bits(sp->count[p]) : sp->count[p] * (bits / 8);
    if (!(arr[p]->buffers[1] = fsh_buffer_new(size, bits == 1))) return kern_oom(err);
    dst[p] = arr[p]->buffers[1]->data;
  }
  if (bits == 1)
    push_bits(sp, kern_buf(a, 1), a->offset, dst);
  else if (bits >= 8)
    fsh_kern_push_fixed(sp, kern_buf(a, 1), a->offset, bits / 8, dst);
  return 0;
}

static int scatter_binary(const scatter_plan *sp, const fsh_field *f, fsh_array *a,
                          fsh_array **arr, uint8_t **dst, int64_t *cur, fsh_error *err) {
  int w = kern_offset_width(f->type);
  int64_t *pos = cur + sp->n_p;
  FSH_RETURN_NOT_OK(alloc_binary(sp, a, w, arr, pos, err));
  uint8_t **data_dst = dst + sp->n_p;
  for (int32_t p = 0; p < sp->n_p; p++) {
    dst[p] = arr[p] ? arr[p]->buffers[1]->data : NULL;
    data_dst[p] = arr[p] ? arr[p]->buffers[2]->data : NULL;
  }
  memset(pos, 0, sizeof *pos * (size_t)sp->n_p);
  fsh_kern_push_binary(sp, a, w, dst, data_dst, pos, true);
  for (int32_t p = 0; p < sp->n_p; p++) { /* zero the spare bytes, set the real size */
    if (!arr[p]) continue;
    memset(data_dst[p] + pos[p], 0, 32);
    arr[p]->buffers[2]->size = pos[p];
  }
  return 0;
}

int fsh_kern_scatter_flat(const scatter_plan *sp, const fsh_field *f, fsh_array *a,
                          fsh_array **arr, fsh_error *err) {
  /* Scratch: 2 destination pointers and 2 counters per partition. */
  uint8_t **dst = fsh_malloc(sizeof *dst * 2 * (size_t)sp->n_p);
  int64_t *cur = fsh_malloc(sizeof *cur * 2 * (size_t)sp->n_p);
  int rc = dst && cur ? 0 : kern_oom(err);
  for (int32_t p = 0; p < sp->n_p && rc == 0; p++) {
    if (sp->count[p] == 0) continue;
    if (!(arr[p] = fsh_array_new(fsh_type_n_buffers(f->type), 0))) rc = kern_oom(err);
    if (rc == 0) arr[p]->length = sp->count[p];
    if (rc == 0 && f->dictionary) arr[p]->dictionary = fsh_array_ref(a->dictionary);
  }
  if (rc == 0) rc = scatter_validity(sp, a, arr, dst, cur, err);
  if (rc == 0)
    rc = is_binary(f) ? scatter_binary(sp, f, a, arr, dst, cur, err)
                      : scatter_values(sp, f, a, arr, dst, err);
  fsh_free(dst);
  fsh_free(cur);
  return rc;
}
