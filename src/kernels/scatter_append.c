/* scatter_append.c -- partition builders (kernels.h): fsh_scatter's
 * pushes (scatter_flat.c) aimed at growing per-partition columns instead
 * of a new batch per (input batch, partition); with many partitions the
 * pushes go to a cache-resident staging buffer first and each partition's
 * run is copied on in one piece (see "Staging"). A partition's buffers are
 * plain fsh_malloc'd memory that grows by doubling and is kept when the
 * partition is taken, so a writer that takes a block's worth at a time
 * reuses the same memory block after block (no page faults, no
 * allocations in the steady state). Bitmaps (validity, bool values) keep
 * every byte past their bits zero. A freed builder is kept for the next
 * one of the same shape (see the cache below), so that a worker's map
 * tasks, one after the other, reuse memory already faulted in. */
#include <pthread.h>

#include "kernels/kernels_internal.h"

#include "kernels/scatter_internal.h"

typedef struct pb_buf {
  uint8_t *p;
  int64_t size, cap; /* bytes in use (bitmaps: by their bits) and allocated */
} pb_buf;

/* One column of one partition. */
typedef struct pb_col {
  pb_buf bits;    /* validity, once a null may have come (has_bits) */
  pb_buf vals;    /* fixed-width values, bool bits, or offsets */
  pb_buf data;    /* binary bytes */
  int64_t nulls;
  bool has_bits;
} pb_col;

struct fsh_partition_builder {
  fsh_schema *schema;
  int32_t n_p;
  int64_t n_cols;
  int64_t keep_total;   /* fsh_partition_builder_set_keep_bytes */
  int64_t *rows;        /* [n_p] */
  bool *taken;          /* [n_p]: taken, its memory not reset yet */
  pb_col *cols;         /* [n_p * n_cols] */
  /* scratch of an append, kept */
  int64_t *count, *tmp; /* [n_p] each */
  uint8_t **dst, **dst2; /* [n_p] each */
  int32_t *slot;
  int64_t slot_cap;
  /* the staged pushes (see "Staging" below): a column's rows grouped by
   * partition in one batch-sized buffer, then copied to the partitions */
  int64_t *st, *st2, *pos; /* [n_p] each: staging starts, write positions */
  uint8_t **sd, **sd2;     /* [n_p] each: staging destinations */
  uint8_t *stage;
  int64_t stage_cap;
};

static bool is_binary(const fsh_field *f) {
  return f->type == FSH_TYPE_BINARY || f->type == FSH_TYPE_STRING ||
         f->type == FSH_TYPE_LARGE_BINARY || f->type == FSH_TYPE_LARGE_STRING;
}

static bool column_ok(const fsh_field *f) {
  return !f->dictionary && f->type != FSH_TYPE_NA && fsh_kern_scatter_flat_ok(f) &&
         (is_binary(f) || fsh_type_bit_width(f) == 1 || fsh_type_bit_width(f) % 8 == 0);
}

bool fsh_partition_builder_supports(const fsh_schema *schema) {
  for (int64_t c = 0; c < schema->n_fields; c++)
    if (!column_ok(&schema->fields[c])) return false;
  return true;
}

/* ---- the cache of freed builders ---------------------------------------
 * Up to CACHE_MAX builders, each holding at most CACHE_BYTES of buffers
 * (after reset_partition's trim), process-wide; new takes one of the same
 * partition count and schema. */
#define CACHE_MAX 2
#define CACHE_BYTES ((int64_t)160 << 20)

static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static fsh_partition_builder *g_cache[CACHE_MAX];
static int g_cached;

static void builder_destroy(fsh_partition_builder *pb);
static void reset_partition(fsh_partition_builder *pb, int32_t p);

static int64_t capacity(const fsh_partition_builder *pb) {
  int64_t total = 0;
  for (int64_t i = 0; i < (int64_t)pb->n_p * pb->n_cols; i++)
    total += pb->cols[i].bits.cap + pb->cols[i].vals.cap + pb->cols[i].data.cap;
  return total + pb->stage_cap;
}

int64_t fsh_partition_builder_capacity(const fsh_partition_builder *pb) {
  return pb && pb->cols ? capacity(pb) : 0;
}

int64_t fsh_partition_builder_cache_bytes(void) {
  int64_t total = 0;
  pthread_mutex_lock(&g_cache_mu);
  for (int i = 0; i < g_cached; i++) total += capacity(g_cache[i]);
  pthread_mutex_unlock(&g_cache_mu);
  return total;
}

void fsh_partition_builder_cache_drop(void) {
  fsh_partition_builder *drop[CACHE_MAX];
  pthread_mutex_lock(&g_cache_mu);
  int n = g_cached;
  memcpy(drop, g_cache, sizeof *drop * (size_t)n);
  g_cached = 0;
  pthread_mutex_unlock(&g_cache_mu);
  for (int i = 0; i < n; i++) builder_destroy(drop[i]);
}

static fsh_partition_builder *cache_take(const fsh_schema *schema, int32_t n_partitions) {
  fsh_partition_builder *pb = NULL;
  pthread_mutex_lock(&g_cache_mu);
  for (int i = 0; i < g_cached && !pb; i++)
    if (g_cache[i]->n_p == n_partitions && fsh_schema_equals(g_cache[i]->schema, schema, false, NULL)) {
      pb = g_cache[i];
      g_cache[i] = g_cache[--g_cached];
    }
  pthread_mutex_unlock(&g_cache_mu);
  return pb;
}

/* Keeps pb (emptied) in the cache if there is room; else false. */
static bool cache_put(fsh_partition_builder *pb) {
  for (int32_t p = 0; p < pb->n_p; p++) reset_partition(pb, p);
  if (capacity(pb) > CACHE_BYTES) return false;
  memset(pb->rows, 0, sizeof *pb->rows * (size_t)pb->n_p);
  pthread_mutex_lock(&g_cache_mu);
  bool kept = g_cached < CACHE_MAX;
  if (kept) g_cache[g_cached++] = pb;
  pthread_mutex_unlock(&g_cache_mu);
  return kept;
}

int fsh_partition_builder_new(fsh_schema *schema, int32_t n_partitions,
                              fsh_partition_builder **out, fsh_error *err) {
  *out = NULL;
  if (n_partitions >= 1 && (*out = cache_take(schema, n_partitions))) {
    fsh_schema *old = (*out)->schema; /* equal: the caller's own from now on */
    (*out)->schema = fsh_schema_ref(schema);
    fsh_schema_unref(old);
    fsh_partition_builder_set_keep_bytes(*out, 0);
    return 0;
  }
  if (n_partitions < 1)
    return fsh_error_set(err, EINVAL, "partition builder: %d partitions", n_partitions);
  for (int64_t c = 0; c < schema->n_fields; c++)
    if (!column_ok(&schema->fields[c]))
      return fsh_error_set(err, EINVAL, "partition builder: column %lld ('%s') is not a flat "
                           "column without a dictionary", (long long)c, schema->fields[c].name);
  fsh_partition_builder *pb = fsh_calloc(1, sizeof *pb);
  size_t n_p = (size_t)n_partitions;
  if (pb) {
    pb->schema = fsh_schema_ref(schema);
    pb->n_p = n_partitions;
    pb->n_cols = schema->n_fields;
    pb->keep_total = FSH_PARTITION_BUILDER_KEEP_BYTES;
    pb->rows = fsh_calloc(n_p, sizeof *pb->rows);
    pb->taken = fsh_calloc(n_p, sizeof *pb->taken);
    pb->cols = fsh_calloc(n_p * (size_t)(pb->n_cols > 0 ? pb->n_cols : 1), sizeof *pb->cols);
    pb->count = fsh_malloc(sizeof *pb->count * n_p);
    pb->tmp = fsh_malloc(sizeof *pb->tmp * n_p);
    pb->dst = fsh_malloc(sizeof *pb->dst * n_p);
    pb->dst2 = fsh_malloc(sizeof *pb->dst2 * n_p);
    pb->st = fsh_malloc(sizeof *pb->st * n_p);
    pb->st2 = fsh_malloc(sizeof *pb->st2 * n_p);
    pb->pos = fsh_malloc(sizeof *pb->pos * n_p);
    pb->sd = fsh_malloc(sizeof *pb->sd * n_p);
    pb->sd2 = fsh_malloc(sizeof *pb->sd2 * n_p);
  }
  if (!pb || !pb->rows || !pb->taken || !pb->cols || !pb->count || !pb->tmp || !pb->dst ||
      !pb->dst2 || !pb->st || !pb->st2 || !pb->pos || !pb->sd || !pb->sd2) {
    builder_destroy(pb);
    return kern_oom(err);
  }
  *out = pb;
  return 0;
}

void fsh_partition_builder_free(fsh_partition_builder *pb) {
  if (pb && (!pb->rows || !pb->taken || !pb->cols || !pb->count || !pb->tmp || !pb->dst ||
             !pb->dst2 || !pb->st || !pb->st2 || !pb->pos || !pb->sd || !pb->sd2 ||
             !cache_put(pb)))
    builder_destroy(pb);
}

static void builder_destroy(fsh_partition_builder *pb) {
  if (!pb) return;
  if (pb->cols)
    for (int64_t i = 0; i < (int64_t)pb->n_p * pb->n_cols; i++) {
      fsh_free(pb->cols[i].bits.p);
      fsh_free(pb->cols[i].vals.p);
      fsh_free(pb->cols[i].data.p);
    }
  fsh_free(pb->cols);
  fsh_free(pb->rows);
  fsh_free(pb->taken);
  fsh_free(pb->count);
  fsh_free(pb->tmp);
  fsh_free(pb->dst);
  fsh_free(pb->dst2);
  fsh_free(pb->st);
  fsh_free(pb->st2);
  fsh_free(pb->pos);
  fsh_free(pb->sd);
  fsh_free(pb->sd2);
  fsh_free(pb->stage);
  fsh_free(pb->slot);
  fsh_schema_unref(pb->schema);
  fsh_free(pb);
}

/* Room for `need` bytes (doubling, at least RESERVE_MIN_BYTES); bytes past
 * the old capacity zeroed when `zero`. The minimum is small: with 1000
 * partitions a map task of 2 MiB puts ~500 bytes in each of a partition's
 * 5 buffers, and a 4 KiB minimum made its builders 20 MiB (every row's
 * push then touched a different page: TLB and cache misses), cold ones
 * allocated and faulted in at that size. Large partitions double from
 * the first need as before (the first reserve is rounded up, not grown). */
#define RESERVE_MIN_BYTES 256

static int reserve(pb_buf *b, int64_t need, bool zero) {
  if (need <= b->cap) return 0;
  int64_t cap = b->cap ? b->cap : RESERVE_MIN_BYTES;
  while (cap < need) cap *= 2;
  uint8_t *p = fsh_realloc(b->p, (size_t)cap);
  if (!p) return ENOMEM;
  if (zero) memset(p + b->cap, 0, (size_t)(cap - b->cap));
  b->p = p;
  b->cap = cap;
  return 0;
}

/* Sets bits [from, from + n) of a bitmap. */
static void set_bits(uint8_t *bits, int64_t from, int64_t n) {
  int64_t end = from + n;
  while (from < end && (from & 7)) {
    bits[from >> 3] |= (uint8_t)(1u << (from & 7));
    from++;
  }
  if (end - from >= 8) {
    memset(bits + (from >> 3), 0xFF, (size_t)((end - from) >> 3));
    from += (end - from) & ~(int64_t)7;
  }
  for (; from < end; from++) bits[from >> 3] |= (uint8_t)(1u << (from & 7));
}

/* Partition p after a take: empty, its bitmaps zero again; buffers of
 * more than keep_bytes in all are freed: a builder keeps at most
 * pb->keep_total over its partitions between blocks (KEEP_BYTES each at
 * least), so that a partition with a block's worth of buffers (a writer's
 * 4 MiB target: ~8 MiB of capacity) reuses them block after block where
 * there are few partitions -- freed, each block's buffers were grown
 * again by doubling, faulted in, zeroed and unmapped (a 64 x 4 shuffle's
 * workers: 0.55x the CPU per GB kept, PROFILE_64.md session 11) -- and a
 * partition of a large block (a sort's 128 MiB, alone in its builder)
 * pays its allocation again. The many-partition shuffles reuse their
 * small buffers either way. */
#define KEEP_BYTES ((int64_t)2 << 20)

static int64_t keep_bytes(const fsh_partition_builder *pb) {
  int64_t share = pb->keep_total / pb->n_p;
  return share > KEEP_BYTES ? share : KEEP_BYTES;
}

/* Frees partition p's buffers when they hold more than keep_bytes in all
 * (its rows are gone: taken or never appended). */
static void trim_partition(fsh_partition_builder *pb, int32_t p) {
  int64_t cap = 0, keep = keep_bytes(pb);
  for (int64_t c = 0; c < pb->n_cols; c++) {
    const pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    cap += col->bits.cap + col->vals.cap + col->data.cap;
  }
  for (int64_t c = 0; cap > keep && c < pb->n_cols; c++) {
    pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    pb_buf *bufs[3] = {&col->bits, &col->vals, &col->data};
    for (int k = 0; k < 3; k++) {
      fsh_free(bufs[k]->p);
      *bufs[k] = (pb_buf){0};
    }
    col->has_bits = false;
  }
}

/* A lower keep trims the empty partitions at once (a builder from the
 * cache holds what its last writer's keep allowed). */
void fsh_partition_builder_set_keep_bytes(fsh_partition_builder *pb, int64_t keep) {
  pb->keep_total = keep > 0 ? keep : FSH_PARTITION_BUILDER_KEEP_BYTES;
  for (int32_t p = 0; p < pb->n_p; p++)
    if (pb->rows[p] == 0 && !pb->taken[p]) trim_partition(pb, p);
}

static void reset_partition(fsh_partition_builder *pb, int32_t p) {
  trim_partition(pb, p);
  for (int64_t c = 0; c < pb->n_cols; c++) {
    const fsh_field *f = &pb->schema->fields[c];
    pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    if (col->has_bits) memset(col->bits.p, 0, (size_t)col->bits.size);
    if (!is_binary(f) && fsh_type_bit_width(f) == 1 && col->vals.size)
      memset(col->vals.p, 0, (size_t)col->vals.size);
    col->bits.size = col->vals.size = col->data.size = 0;
    col->nulls = 0;
    col->has_bits = false;
  }
  pb->taken[p] = false;
}

/* Validity of column c: partitions that may now hold a null get a bitmap
 * (all earlier rows valid); every partition with a bitmap marks its new
 * rows valid, then the source's null rows clear their bit. */
static int append_validity(fsh_partition_builder *pb, const scatter_plan *sp, int64_t c,
                           const fsh_array *a) {
  bool src_nulls = a->buffers[0] && a->null_count != 0;
  for (int32_t p = 0; p < pb->n_p; p++) {
    pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    if (sp->count[p] == 0 || (!src_nulls && !col->has_bits)) continue;
    int64_t old = pb->rows[p], end = old + sp->count[p];
    if (reserve(&col->bits, fsh_bytes_for_bits(end), true)) return ENOMEM;
    if (!col->has_bits) {
      col->has_bits = true;
      set_bits(col->bits.p, 0, old);
    }
    set_bits(col->bits.p, old, sp->count[p]);
    col->bits.size = fsh_bytes_for_bits(end);
  }
  if (!src_nulls) return 0;
  /* the null rows, found 64 at a time (a column with few nulls costs
   * little more than a pass over its bitmap) */
  const uint8_t *src = a->buffers[0]->data;
  for (int64_t i = 0; i < sp->n; i += 64) {
    int64_t n = sp->n - i < 64 ? sp->n - i : 64;
    for (uint64_t null_bits = fsh_kern_load_nulls(src, a->offset + i, n); null_bits;
         null_bits &= null_bits - 1) {
      int64_t r = i + __builtin_ctzll(null_bits);
      int32_t p = sp->part[r];
      pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
      int64_t k = pb->rows[p] + sp->slot[r];
      col->bits.p[k >> 3] &= (uint8_t)~(1u << (k & 7));
      col->nulls++;
    }
  }
  return 0;
}

/* ---- Staging -------------------------------------------------------------
 * With many partitions, pushing each row straight to its partition's
 * builder memory is a store to one of (partitions x buffers) write streams
 * in memory that is not in cache (a map task's builders hold its whole
 * output: 64 partitions x ~1 MiB each, written once, read once at close),
 * more streams than the hardware prefetcher follows: most stores wait for
 * their line from DRAM. Staged, a column's rows are first pushed into one
 * batch-sized buffer grouped by partition (it stays in cache from batch to
 * batch), then each partition's run is copied to its builder in one
 * sequential memcpy (prefetched, whole lines). Below STAGE_MIN_PARTITIONS
 * the direct push has few enough streams; below STAGE_MIN_ROWS rows a
 * partition in the append (many partitions, small batches: the runs are a
 * few lines, and the builders of such shuffles are small enough to stay in
 * cache) the staging's per-partition work is not paid back. */
#define STAGE_MIN_PARTITIONS 8
#define STAGE_MIN_ROWS 128

#define DIRECT_PREFETCH_MAX_PARTITIONS 256

static bool staged(const fsh_partition_builder *pb, const scatter_plan *sp) {
  return pb->n_p >= STAGE_MIN_PARTITIONS && sp->n >= STAGE_MIN_ROWS * (int64_t)pb->n_p;
}

/* Copies a partition's staged run to its builder: n bytes to dst, whole
 * aligned 64-byte lines with non-temporal stores where the target has them
 * (the builder's memory is not in cache and is read only at the block's
 * close: the lines are written without being read from DRAM first), the
 * partial lines at both ends with memcpy. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define STREAM_MIN_BYTES 512
static void copy_out(uint8_t *dst, const uint8_t *src, int64_t n) {
  if (n < STREAM_MIN_BYTES) {
    memcpy(dst, src, (size_t)n);
    return;
  }
  int64_t head = (int64_t)((64 - ((uintptr_t)dst & 63)) & 63);
  memcpy(dst, src, (size_t)head);
  int64_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 48));
    _mm_stream_si128((__m128i *)(void *)(dst + i), a);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 16), b);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 32), c);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 48), d);
  }
  memcpy(dst + i, src + i, (size_t)(n - i));
}
/* After an append's streaming stores: ordered before anything later. */
static void copy_out_done(void) { _mm_sfence(); }
#else
static void copy_out(uint8_t *dst, const uint8_t *src, int64_t n) { memcpy(dst, src, (size_t)n); }
static void copy_out_done(void) {}
#endif

/* Room for n bytes of staging (its old bytes are not kept). */
static int stage_reserve(fsh_partition_builder *pb, int64_t n) {
  if (n <= pb->stage_cap) return 0;
  int64_t cap = pb->stage_cap ? pb->stage_cap : 64 << 10;
  while (cap < n) cap *= 2;
  uint8_t *p = fsh_malloc((size_t)cap);
  if (!p) return ENOMEM;
  fsh_free(pb->stage);
  pb->stage = p;
  pb->stage_cap = cap;
  return 0;
}

static int append_fixed(fsh_partition_builder *pb, const scatter_plan *sp, int64_t c,
                        const fsh_field *f, const fsh_array *a) {
  int64_t bits = fsh_type_bit_width(f);
  for (int32_t p = 0; p < pb->n_p; p++) {
    pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    pb->dst[p] = NULL;
    if (sp->count[p] == 0) continue;
    int64_t end = pb->rows[p] + sp->count[p];
    int64_t need = bits == 1 ? fsh_bytes_for_bits(end) : end * (bits / 8);
    if (reserve(&col->vals, need, bits == 1)) return ENOMEM;
    col->vals.size = need;
    pb->dst[p] = col->vals.p + (bits == 1 ? 0 : pb->rows[p] * (bits / 8));
  }
  const uint8_t *src = kern_buf(a, 1);
  if (bits != 1 && staged(pb, sp)) { /* partition p's rows at stage + w * st[p] */
    int64_t w = bits / 8, at = 0;
    if (stage_reserve(pb, sp->n * w)) return ENOMEM;
    for (int32_t p = 0; p < pb->n_p; p++) {
      pb->sd[p] = pb->stage + w * at;
      at += sp->count[p];
    }
    fsh_kern_push_fixed(sp, src, a->offset, w, pb->sd);
    for (int32_t p = 0; p < pb->n_p; p++)
      if (sp->count[p]) copy_out(pb->dst[p], pb->sd[p], w * sp->count[p]);
    copy_out_done();
    return 0;
  }
  if (bits != 1) {
    fsh_kern_push_fixed(sp, src, a->offset, bits / 8, pb->dst);
    return 0;
  }
  for (int64_t i = 0; i < sp->n; i += 64) { /* bool values: the set bits, 64 rows at a time */
    int64_t n = sp->n - i < 64 ? sp->n - i : 64;
    for (uint64_t set = fsh_kern_load_bits(src, a->offset + i, n); set; set &= set - 1) {
      int64_t r = i + __builtin_ctzll(set);
      int64_t k = pb->rows[sp->part[r]] + sp->slot[r];
      pb->dst[sp->part[r]][k >> 3] |= (uint8_t)(1u << (k & 7));
    }
  }
  return 0;
}

static int append_binary(fsh_partition_builder *pb, const scatter_plan *sp, int64_t c,
                         const fsh_field *f, const fsh_array *a) {
  int w = kern_offset_width(f->type);
  const uint8_t *offs = kern_buf(a, 1);
  int64_t *bytes = pb->tmp;
  memset(bytes, 0, sizeof *bytes * (size_t)pb->n_p);
  { /* the bytes of each partition's rows: the plan's fields in locals (the
     * stores to bytes[] could alias them, and the compiler would reload
     * them every row), each row's start its predecessor's end */
    const int32_t *part = sp->part;
    const int64_t n = sp->n, off = a->offset;
    int64_t s = kern_read_offset(offs, off, w);
    for (int64_t i = 0; i < n; i++) {
      int64_t e = kern_read_offset(offs, off + i + 1, w);
      bytes[part[i]] += e - s;
      s = e;
    }
  }
  for (int32_t p = 0; p < pb->n_p; p++) {
    pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    pb->dst[p] = pb->dst2[p] = NULL;
    if (sp->count[p] == 0) continue;
    int64_t end = pb->rows[p] + sp->count[p];
    if (reserve(&col->vals, (end + 1) * w, false) ||
        reserve(&col->data, col->data.size + bytes[p] + 32, false))
      return ENOMEM;
    if (pb->rows[p] == 0) memset(col->vals.p, 0, (size_t)w); /* the first offset */
    if (w == 4 && col->data.size + bytes[p] > INT32_MAX) return EOVERFLOW;
    col->vals.size = (end + 1) * w;
    pb->dst[p] = col->vals.p + pb->rows[p] * w;
    pb->dst2[p] = col->data.p;
    if (!staged(pb, sp)) bytes[p] = col->data.size; /* from here on: the write position */
  }
  if (!staged(pb, sp)) {
    /* the destinations' prefetch (scatter_flat.c): not with many
     * partitions, whose few rows each go to lines touched a few rows
     * before (1000 partitions: no gain in a cluster, a cost alone) */
    fsh_kern_push_binary(sp, a, w, pb->dst, pb->dst2, bytes,
                         pb->n_p < DIRECT_PREFETCH_MAX_PARTITIONS);
    for (int32_t p = 0; p < pb->n_p; p++)
      if (sp->count[p]) pb->cols[(int64_t)p * pb->n_cols + c].data.size = bytes[p];
    return 0;
  }
  /* Staged: partition p's end offsets, counted from 0, at stage + w * (st[p]
   * + 1 + slot) (one unused entry before them), its bytes at data stage +
   * st2[p] with the push's 32 spare bytes after them (its last row's
   * over-copy must not reach the next partition's bytes); then offsets
   * copied with the partition's data size added, bytes copied as they are. */
  int64_t n_offs = 0, n_bytes = 0;
  for (int32_t p = 0; p < pb->n_p; p++) {
    pb->st[p] = n_offs, pb->st2[p] = n_bytes;
    n_offs += sp->count[p] + 1;
    n_bytes += bytes[p] + 32;
  }
  int64_t data_at = (n_offs * w + 63) / 64 * 64;
  if (stage_reserve(pb, data_at + n_bytes)) return ENOMEM;
  for (int32_t p = 0; p < pb->n_p; p++) {
    pb->sd[p] = pb->stage + w * pb->st[p];
    pb->sd2[p] = pb->stage + data_at + pb->st2[p];
    pb->pos[p] = 0;
  }
  fsh_kern_push_binary(sp, a, w, pb->sd, pb->sd2, pb->pos, false);
  for (int32_t p = 0; p < pb->n_p; p++) {
    if (!sp->count[p]) continue;
    pb_col *col = &pb->cols[(int64_t)p * pb->n_cols + c];
    int64_t base = col->data.size, n = sp->count[p];
    uint8_t *o = pb->sd[p] + w;
    /* rebased in the stage (in cache), then copied out like the values:
     * the builder's lines written without being read first */
    if (w == 4) { /* (the sum fits: checked above) */
      for (int64_t k = 0; k < n; k++) {
        int32_t v;
        memcpy(&v, o + 4 * k, 4);
        v += (int32_t)base;
        memcpy(o + 4 * k, &v, 4);
      }
    } else {
      for (int64_t k = 0; k < n; k++) {
        int64_t v;
        memcpy(&v, o + 8 * k, 8);
        v += base;
        memcpy(o + 8 * k, &v, 8);
      }
    }
    copy_out(pb->dst[p] + w, o, n * w);
    if (pb->pos[p]) copy_out(col->data.p + base, pb->sd2[p], pb->pos[p]);
    col->data.size = base + pb->pos[p];
  }
  copy_out_done();
  return 0;
}

int fsh_partition_builder_append(fsh_partition_builder *pb, const fsh_batch *b,
                                 const int32_t *partition_of_row, fsh_error *err) {
  if (b->n_columns != pb->n_cols)
    return fsh_error_set(err, EINVAL, "partition builder: a batch of %lld columns for %lld",
                         (long long)b->n_columns, (long long)pb->n_cols);
  if (b->length == 0) return 0;
  if (b->length > INT32_MAX)
    return fsh_error_set(err, EINVAL, "partition builder: a batch of %lld rows (at most %d)",
                         (long long)b->length, INT32_MAX);
  if (b->length > pb->slot_cap) {
    int32_t *s = fsh_malloc(sizeof *s * (size_t)b->length);
    if (!s) return kern_oom(err);
    fsh_free(pb->slot);
    pb->slot = s;
    pb->slot_cap = b->length;
  }
  memset(pb->count, 0, sizeof *pb->count * (size_t)pb->n_p);
  FSH_RETURN_NOT_OK(fsh_kern_count_slots(partition_of_row, b->length, pb->n_p, pb->count,
                                         pb->slot, err));
  scatter_plan sp = {partition_of_row, pb->slot, b->length, pb->n_p, pb->count};
  for (int32_t p = 0; p < pb->n_p; p++)
    if (pb->taken[p] && pb->count[p]) reset_partition(pb, p);
  for (int64_t c = 0; c < pb->n_cols; c++) {
    const fsh_field *f = &pb->schema->fields[c];
    const fsh_array *a = b->columns[c];
    int rc = append_validity(pb, &sp, c, a);
    if (rc == 0) rc = is_binary(f) ? append_binary(pb, &sp, c, f, a) : append_fixed(pb, &sp, c, f, a);
    if (rc != 0)
      return fsh_error_set(err, rc, "partition builder: column %lld ('%s'): %s", (long long)c,
                           f->name, rc == ENOMEM ? "out of memory" : "over 2 GiB of data");
  }
  for (int32_t p = 0; p < pb->n_p; p++) pb->rows[p] += pb->count[p];
  return 0;
}

int64_t fsh_partition_builder_rows(const fsh_partition_builder *pb, int32_t partition) {
  return pb->rows[partition];
}

int64_t fsh_partition_builder_bytes(const fsh_partition_builder *pb, int32_t partition) {
  int64_t total = 0;
  if (pb->rows[partition] == 0) return 0;
  for (int64_t c = 0; c < pb->n_cols; c++) {
    const pb_col *col = &pb->cols[(int64_t)partition * pb->n_cols + c];
    total += (col->nulls ? col->bits.size : 0) + col->vals.size + col->data.size;
  }
  return total;
}

void fsh_partition_builder_view_column(const fsh_partition_builder *pb, int32_t partition,
                                       int64_t column, fsh_partition_builder_view *out) {
  const pb_col *col = &pb->cols[(int64_t)partition * pb->n_cols + column];
  bool bin = is_binary(&pb->schema->fields[column]);
  *out = (fsh_partition_builder_view){
      .validity = col->nulls ? col->bits.p : NULL,
      .validity_bytes = col->nulls ? col->bits.size : 0,
      .values = col->vals.p,
      .values_bytes = col->vals.size,
      .data = bin ? col->data.p : NULL,
      .data_bytes = bin ? col->data.size : 0,
      .null_count = col->nulls};
}

static void prefetch_range(const uint8_t *p, int64_t n, int64_t *budget) {
  if (!p) return;
  if (n > *budget) n = *budget;
  for (int64_t at = 0; at < n; at += 64) __builtin_prefetch((const void *)(p + at), 0);
  *budget -= n;
}

void fsh_partition_builder_prefetch(const fsh_partition_builder *pb, int32_t partition,
                                    int64_t max_bytes) {
  if (partition < 0 || partition >= pb->n_p || pb->rows[partition] == 0) return;
  for (int64_t c = 0; c < pb->n_cols && max_bytes > 0; c++) {
    const pb_col *col = &pb->cols[(int64_t)partition * pb->n_cols + c];
    if (col->nulls) prefetch_range(col->bits.p, col->bits.size, &max_bytes);
    prefetch_range(col->vals.p, col->vals.size, &max_bytes);
    prefetch_range(col->data.p, col->data.size, &max_bytes);
  }
}

void fsh_partition_builder_drop_rows(fsh_partition_builder *pb, int32_t partition) {
  if (pb->rows[partition] == 0) return;
  pb->taken[partition] = true; /* emptied by the next append to it (views may be alive) */
  pb->rows[partition] = 0;
}

/* A borrowed view of n bytes of builder memory (never freed by the view). */
static fsh_buffer *view(const uint8_t *p, int64_t n) {
  return fsh_buffer_wrap(p ? p : (const uint8_t *)"", n, NULL, NULL);
}

int fsh_partition_builder_take(fsh_partition_builder *pb, int32_t partition, fsh_batch **out,
                               fsh_error *err) {
  *out = NULL;
  int64_t rows = pb->rows[partition];
  if (rows == 0) return 0;
  fsh_batch *b = fsh_batch_new(pb->schema, rows);
  bool ok = b != NULL;
  for (int64_t c = 0; ok && c < pb->n_cols; c++) {
    const fsh_field *f = &pb->schema->fields[c];
    pb_col *col = &pb->cols[(int64_t)partition * pb->n_cols + c];
    fsh_array *a = b->columns[c] = fsh_array_new(fsh_type_n_buffers(f->type), 0);
    if (!(ok = a != NULL)) break;
    a->length = rows;
    a->null_count = col->nulls;
    if (col->nulls && !(a->buffers[0] = view(col->bits.p, col->bits.size))) ok = false;
    if (ok && !(a->buffers[1] = view(col->vals.p, col->vals.size))) ok = false;
    if (ok && is_binary(f) && !(a->buffers[2] = view(col->data.p, col->data.size))) ok = false;
  }
  if (!ok) {
    fsh_batch_unref(b);
    return kern_oom(err);
  }
  pb->taken[partition] = true; /* emptied by the next append to it (the batch views it) */
  pb->rows[partition] = 0;
  *out = b;
  return 0;
}
