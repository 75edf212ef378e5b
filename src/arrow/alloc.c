/* alloc.c -- the one hookable allocator every allocation goes through, with
 * a failure-injection hook for allocation-failure tests. */
#include <flightshuffle/arrow.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Plain allocations carry a header with their size so that fsh_free can
 * pass it to the hook and fsh_realloc can copy; 16 bytes keep alignment. */
#define HEADER 16

/* Aligned blocks this large are always their own mmap in glibc (its
 * dynamic mmap threshold stops at 32 MiB on 64-bit). They are asked for
 * transparent huge pages: first-touch page faults on a fresh 64 MiB batch
 * buffer otherwise cost more than the copy that fills it (bench_flight,
 * 64 MiB DoGet/DoPut batches). Only a hint: without THP nothing changes. */
#define HUGE_HINT_BYTES ((size_t)32 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

static void *default_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  void *p = NULL;
  if (align <= 16) return malloc(size ? size : 1);
  if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  if (size >= HUGE_HINT_BYTES) {
    uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + size) & ~(HUGE_PAGE - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
  }
#endif
  return p;
}

static void *default_realloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
  (void)ctx;
  (void)old_size;
  return realloc(ptr, new_size ? new_size : 1);
}

static void default_free(void *ctx, void *ptr, size_t size) {
  (void)ctx;
  (void)size;
  free(ptr);
}

static const fsh_allocator default_allocator = {default_alloc, default_realloc, default_free, NULL};
static fsh_allocator current = {default_alloc, default_realloc, default_free, NULL};

/* Allocations are counted only once a test has asked for the count or
 * armed a failure (counting): in a service nothing ever does, and the
 * global atomic increment it would otherwise pay on every allocation is
 * contended between threads (~15-20 ns per alloc + free). */
static _Atomic bool counting;
static _Atomic int64_t alloc_count;
static _Atomic int64_t fail_at; /* 0 = never */
static _Atomic bool fail_persistent;

void fsh_allocator_set(const fsh_allocator *a) { current = a ? *a : default_allocator; }
const fsh_allocator *fsh_allocator_get(void) { return &current; }

void fsh_alloc_fail_after(int64_t n, bool persistent) {
  counting = true;
  fail_persistent = persistent;
  fail_at = n > 0 ? alloc_count + n : 0;
}

int64_t fsh_alloc_count(void) {
  counting = true;
  return alloc_count;
}

/* Counts an allocation attempt; true if the failure hook says it fails. */
static bool injected_failure(void) {
  if (!atomic_load_explicit(&counting, memory_order_relaxed)) return false;
  int64_t n = ++alloc_count;
  int64_t at = fail_at;
  if (at == 0) return false;
  if (n == at) return true;
  return n > at && fail_persistent;
}

void *fsh_malloc(size_t size) {
  if (size > SIZE_MAX - HEADER || injected_failure()) return NULL;
  uint8_t *p = current.alloc(current.ctx, size + HEADER, 16);
  if (!p) return NULL;
  memcpy(p, &size, sizeof size);
  return p + HEADER;
}

void *fsh_calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  void *p = fsh_malloc(n * size);
  if (p) memset(p, 0, n * size);
  return p;
}

void *fsh_realloc(void *ptr, size_t size) {
  if (!ptr) return fsh_malloc(size);
  if (size > SIZE_MAX - HEADER || injected_failure()) return NULL;
  uint8_t *base = (uint8_t *)ptr - HEADER;
  size_t old;
  memcpy(&old, base, sizeof old);
  uint8_t *p = current.realloc(current.ctx, base, old + HEADER, size + HEADER);
  if (!p) return NULL;
  memcpy(p, &size, sizeof size);
  return p + HEADER;
}

void fsh_free(void *ptr) {
  if (!ptr) return;
  uint8_t *base = (uint8_t *)ptr - HEADER;
  size_t size;
  memcpy(&size, base, sizeof size);
  current.free(current.ctx, base, size + HEADER);
}

char *fsh_strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *p = fsh_malloc(len + 1);
  if (!p) return NULL;
  memcpy(p, s, len);
  p[len] = '\0';
  return p;
}

char *fsh_strdup(const char *s) { return fsh_strndup(s, strlen(s)); }

/* Aligned blocks up to this size are carved out of a plain (16-aligned)
 * allocation 64 bytes larger, the byte before the block holding its
 * offset in it: glibc's posix_memalign splits the chunk and frees the
 * remainders, which is slow and fragments the heap when a shuffle of
 * tiny blocks makes millions of small buffers. fsh_aligned_free tells the
 * two kinds apart by the size, which must be the one allocated. */
#define SMALL_ALIGNED ((size_t)4096)
#define ALIGN 64

void *fsh_aligned_alloc(size_t size) {
  if (injected_failure()) return NULL;
  if (size == 0) size = ALIGN;
  if (size > SMALL_ALIGNED) return current.alloc(current.ctx, size, ALIGN);
  uint8_t *base = current.alloc(current.ctx, size + ALIGN, 16);
  if (!base) return NULL;
  uint8_t *p = (uint8_t *)(((uintptr_t)base + ALIGN) & ~(uintptr_t)(ALIGN - 1));
  p[-1] = (uint8_t)(p - base); /* 16, 32, 48 or 64 */
  return p;
}

void fsh_aligned_free(void *ptr, size_t size) {
  if (!ptr) return;
  if (size == 0) size = ALIGN;
  if (size > SMALL_ALIGNED) {
    current.free(current.ctx, ptr, size);
    return;
  }
  uint8_t *p = ptr;
  current.free(current.ctx, p - p[-1], size + ALIGN);
}
