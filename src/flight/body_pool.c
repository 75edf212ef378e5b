/* body_pool.c -- recycled memory for the large FlightData bodies the
 * decoder copies out of gRPC's slices. A received body is copied once
 * into a 64-byte-aligned block; fresh blocks of many MiB cost first-touch
 * page faults (and, above glibc's mmap threshold, a new mapping every
 * time) that bench_flight measured to cost more than the copy itself.
 * Released blocks of 1 MiB and more are kept, a few and up to a bound, and
 * handed to the next body of the same size class.
 * 4 MiB bodies (the 64K-row batches of bench_flight) are pooled too: as
 * plain buffers they came from glibc's per-thread arenas, which trim and
 * re-grow their top, so about 1 in 5 such bodies was first-touched again
 * (perf record -e page-faults: 72% of the client's ~200,000 faults per
 * 3 GB of DoGet 4x4 MiB, in the decoder's copy). Pooled: ~100,000 faults
 * in all, none in the copy, ~15% less CPU for the whole run
 * (bench/flight/OFFCPU.md). 16 blocks hold 4 streams' bodies in flight;
 * POOL_MAX_BYTES still bounds what is kept. */
#include "flight/wire.h"

#include <pthread.h>
#include <string.h>

#define POOL_MIN_BYTES ((size_t)1 << 20) /* smaller bodies: plain buffers */
#define POOL_MAX_BLOCKS 16 /* several streams' bodies */
#define POOL_MAX_BYTES ((size_t)160 << 20) /* capacity kept, all blocks */

typedef struct block {
  uint8_t *data;
  size_t capacity; /* its size class */
} block;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static block pool[POOL_MAX_BLOCKS];
static int pool_n;
static size_t pool_bytes;

/* The size class of n bytes (n >= POOL_MIN_BYTES): n rounded up to an
 * eighth of the power of two at or above it (at most 1/8 more). */
static size_t size_class(size_t n) {
  size_t p2 = POOL_MIN_BYTES;
  while (p2 < n) p2 <<= 1;
  size_t step = p2 / 8;
  return (n + 64 + step - 1) / step * step; /* room for the zeroed padding */
}

static void block_release(void *ctx) {
  block *b = ctx;
  pthread_mutex_lock(&pool_mu);
  if (pool_n < POOL_MAX_BLOCKS && pool_bytes + b->capacity <= POOL_MAX_BYTES) {
    pool[pool_n++] = *b;
    pool_bytes += b->capacity;
    b->data = NULL;
  }
  pthread_mutex_unlock(&pool_mu);
  if (b->data) fsh_aligned_free(b->data, b->capacity);
  fsh_free(b);
}

fsh_buffer *fsh_flight_body_buffer_new(int64_t size) {
  if (size < 0) return NULL;
  if ((size_t)size < POOL_MIN_BYTES) return fsh_buffer_new(size, false);
  size_t cls = size_class((size_t)size);
  block *b = fsh_malloc(sizeof *b);
  if (!b) return NULL;
  b->data = NULL;
  b->capacity = cls;
  pthread_mutex_lock(&pool_mu);
  for (int i = 0; i < pool_n; i++) {
    if (pool[i].capacity == cls) {
      b->data = pool[i].data;
      pool_bytes -= cls;
      pool[i] = pool[--pool_n];
      break;
    }
  }
  pthread_mutex_unlock(&pool_mu);
  if (!b->data) b->data = fsh_aligned_alloc(cls);
  if (!b->data) {
    fsh_free(b);
    return NULL;
  }
  /* Zero padding to the next multiple of 64, as owned buffers have. */
  size_t padded = ((size_t)size + 63) & ~(size_t)63;
  memset(b->data + size, 0, padded - (size_t)size);
  fsh_buffer *buf = fsh_buffer_wrap(b->data, size, block_release, b);
  if (!buf) block_release(b);
  return buf;
}
