/* bench_memfd.c -- what filling a map output's memory image costs by the
 * way its memfd gets its pages (issue 4, section 5, item 3): the store
 * writes each image into a memfd with pwrite (store.c, spill_writev); in a
 * fresh one tmpfs allocates and zeroes every 4 KiB page
 * (shmem_alloc_and_add_folio) as it is written. Compared, in the same run, CPU time of the process per
 * image byte:
 *   fresh memfd + pwrite        what the store does without a pooled memfd
 *                               (the baseline)
 *   fallocate first + pwrite    the pages allocated up front in one call
 *   reused memfd, overwritten   a released image's memfd written again in
 *                               place (its pages kept): what the store does
 *                               when its pool has a released memfd (below)
 *   fresh memfd + pwrite + mmap the store's read-only mapping of a finished
 *                               image added (not populated)
 *   MADV_POPULATE_WRITE + pwrite the pages allocated up front through a
 *                               shared mapping in one madvise call
 *   fresh, memcpy via mapping   written through a shared mapping (a page
 *                               fault per 4 KiB) instead of pwrite
 *   reused, POPULATE_WRITE + memcpy  a pooled memfd's first reuse (its
 *                               pages kept, none mapped): the entries
 *                               installed with MADV_POPULATE_WRITE (one
 *                               write fault a page), then memcpy's
 *   reused, POPULATE_READ + memcpy   the same with MADV_POPULATE_READ
 *                               (read faults map the pages around them
 *                               too, writable on a shared shmem mapping:
 *                               what store.c's populate_write does)
 * Images of --image-bytes, written in 1 MiB pwrites, --images of them per
 * run; the fresh and fallocate'd memfds are closed after each image.
 *
 *   build/bench_memfd [--image-bytes N (16M)] [--images K (32)] [--runs R (3)]
 *
 * Verification (not timed): after each run, the last image's bytes read
 * back (pread) equal what was written. Ends with one `result:` line.
 *
 * How the store reuses memfds safely (store.c, "Reused memfds"): same-host
 * readers open an image through /proc/<pid>/fd/<fd> and a reused memfd
 * keeps its (dev, ino), so the store cuts the image's identity trailer off
 * and pools the memfd only when a write lease (F_SETLEASE) proves no other
 * open file description of it exists; readers check the trailer (map
 * output and image id) after opening (flight_direct.c). */
#define _GNU_SOURCE /* memfd_create, fallocate */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

enum {
  MODE_FRESH,
  MODE_FALLOCATE,
  MODE_REUSE,
  MODE_MMAP,
  MODE_POPULATE,
  MODE_MEMCPY,
  MODE_REUSE_POP_WRITE,
  MODE_REUSE_POP_READ,
  N_MODES
};
static const char *k_names[N_MODES] = {
    "fresh memfd + pwrite (store)",    "fallocate first + pwrite",
    "reused memfd, overwritten",       "fresh + pwrite + mmap",
    "MADV_POPULATE_WRITE + pwrite",    "fresh, memcpy via mapping",
    "reused, POPULATE_WRITE + memcpy", "reused, POPULATE_READ + memcpy"};
static const char *k_keys[N_MODES] = {"fresh",  "fallocate", "reuse",       "mmap",
                                      "populate", "memcpy",  "reuse_popw", "reuse_popr"};

static void die(const char *what) {
  fprintf(stderr, "bench_memfd: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* "16M", "1G", "4096": bytes (K, M, G are powers of 1024). */
static int64_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  double mul = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
               : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
  return (int64_t)(v * mul);
}

static void write_image(int fd, const uint8_t *chunk, int64_t chunk_bytes, int64_t image_bytes,
                        int run) {
  for (int64_t at = 0; at < image_bytes; at += chunk_bytes) {
    int64_t n = image_bytes - at < chunk_bytes ? image_bytes - at : chunk_bytes;
    uint64_t tag = (uint64_t)at ^ (uint64_t)run << 56; /* each chunk different */
    memcpy((uint8_t *)chunk, &tag, sizeof tag);
    if (pwrite(fd, chunk, (size_t)n, at) != (ssize_t)n) die("pwrite");
  }
}

/* write_image's bytes, copied into a shared mapping of the memfd (a page
 * fault per 4 KiB). */
static void write_mapped(uint8_t *p, const uint8_t *chunk, int64_t chunk_bytes,
                         int64_t image_bytes, int run) {
  for (int64_t at = 0; at < image_bytes; at += chunk_bytes) {
    int64_t n = image_bytes - at < chunk_bytes ? image_bytes - at : chunk_bytes;
    uint64_t tag = (uint64_t)at ^ (uint64_t)run << 56;
    memcpy((uint8_t *)chunk, &tag, sizeof tag);
    memcpy(p + at, chunk, (size_t)n);
  }
}

static bool image_ok(int fd, uint8_t *chunk, int64_t chunk_bytes, int64_t image_bytes, int run) {
  uint8_t *got = malloc((size_t)chunk_bytes);
  if (!got) die("malloc");
  bool ok = true;
  for (int64_t at = 0; at < image_bytes && ok; at += chunk_bytes) {
    int64_t n = image_bytes - at < chunk_bytes ? image_bytes - at : chunk_bytes;
    uint64_t tag = (uint64_t)at ^ (uint64_t)run << 56;
    memcpy(chunk, &tag, sizeof tag);
    ok = pread(fd, got, (size_t)n, at) == (ssize_t)n && memcmp(got, chunk, (size_t)n) == 0;
  }
  free(got);
  return ok;
}

int main(int argc, char **argv) {
  int64_t image_bytes = (int64_t)16 << 20, chunk_bytes = (int64_t)1 << 20;
  int images = 32, runs = 3;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && strcmp(a, "--image-bytes") == 0) image_bytes = parse_bytes(v), i++;
    else if (v && strcmp(a, "--images") == 0) images = atoi(v), i++;
    else if (v && strcmp(a, "--runs") == 0) runs = atoi(v), i++;
    else {
      fprintf(stderr, "usage: bench_memfd [--image-bytes N] [--images K] [--runs R]\n");
      return 2;
    }
  }
  if (image_bytes < 1 || images < 1 || runs < 1 || runs > 64) {
    fprintf(stderr, "bench_memfd: bad arguments\n");
    return 2;
  }
  uint8_t *chunk = malloc((size_t)chunk_bytes);
  if (!chunk) die("malloc");
  memset(chunk, 0x5A, (size_t)chunk_bytes);
  double secs[N_MODES][64];
  bool verified = true;
  printf("bench_memfd: %d images of %.0f MiB a run, 1 MiB pwrites (process CPU time)\n", images,
         (double)image_bytes / (1 << 20));
  for (int run = 0; run < runs; run++)
    for (int mode = 0; mode < N_MODES; mode++) {
      int reuse_fd = -1, last_fd = -1;
      bool reused =
          mode == MODE_REUSE || mode == MODE_REUSE_POP_WRITE || mode == MODE_REUSE_POP_READ;
      if (reused) { /* its pages exist before the timing: a released image's */
        reuse_fd = memfd_create("bench-image", MFD_CLOEXEC);
        if (reuse_fd < 0) die("memfd_create");
        write_image(reuse_fd, chunk, chunk_bytes, image_bytes, run + 100);
      }
      double t0 = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
      for (int i = 0; i < images; i++) {
        int fd = reuse_fd >= 0 ? reuse_fd : memfd_create("bench-image", MFD_CLOEXEC);
        if (fd < 0) die("memfd_create");
        if (mode == MODE_FALLOCATE && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, image_bytes) != 0)
          die("fallocate");
        if (mode == MODE_POPULATE || mode == MODE_MEMCPY) { /* pages through a mapping */
          if (ftruncate(fd, image_bytes) != 0) die("ftruncate");
          uint8_t *p = mmap(NULL, (size_t)image_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (p == MAP_FAILED) die("mmap");
          if (mode == MODE_POPULATE && madvise(p, (size_t)image_bytes, MADV_POPULATE_WRITE) != 0)
            die("madvise(MADV_POPULATE_WRITE)");
          if (mode == MODE_MEMCPY) write_mapped(p, chunk, chunk_bytes, image_bytes, run);
          munmap(p, (size_t)image_bytes);
        }
        bool mapped = mode == MODE_REUSE_POP_WRITE || mode == MODE_REUSE_POP_READ;
        if (mapped) { /* a mapping without entries over pages the memfd has */
          uint8_t *p = mmap(NULL, (size_t)image_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (p == MAP_FAILED) die("mmap");
          int advice = mode == MODE_REUSE_POP_WRITE ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
          if (madvise(p, (size_t)image_bytes, advice) != 0) die("madvise(MADV_POPULATE_*)");
          write_mapped(p, chunk, chunk_bytes, image_bytes, run);
          munmap(p, (size_t)image_bytes);
        }
        if (mode != MODE_MEMCPY && !mapped) write_image(fd, chunk, chunk_bytes, image_bytes, run);
        if (mode == MODE_MMAP) {
          void *p = mmap(NULL, (size_t)image_bytes, PROT_READ, MAP_SHARED, fd, 0);
          if (p == MAP_FAILED) die("mmap");
          munmap(p, (size_t)image_bytes);
        }
        if (i == images - 1) last_fd = fd;
        else if (fd != reuse_fd) close(fd);
      }
      secs[mode][run] = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID) - t0;
      verified &= image_ok(last_fd, chunk, chunk_bytes, image_bytes, run);
      close(last_fd);
    }
  double bytes = (double)image_bytes * images;
  bench_stats st[N_MODES];
  for (int m = 0; m < N_MODES; m++) st[m] = bench_summarize(secs[m], runs, bytes);
  printf("  %-34s %7s %7s %7s GB/s   (median vs the store's way)\n", "image bytes / CPU s", "min",
         "median", "max");
  for (int m = 0; m < N_MODES; m++) bench_print(k_names[m], st[m], st[MODE_FRESH].med, "fresh");
  printf("result: name=bench_memfd verified=%s image_bytes=%lld images=%d runs=%d", verified ? "yes" : "no",
         (long long)image_bytes, images, runs);
  for (int m = 0; m < N_MODES; m++) printf(" %s_gbps=%.3f", k_keys[m], st[m].med);
  printf(" reuse_vs_fresh=%.2f fallocate_vs_fresh=%.2f populate_vs_fresh=%.2f "
         "memcpy_vs_fresh=%.2f popread_vs_popwrite=%.2f\n",
         st[MODE_REUSE].med / st[MODE_FRESH].med,
         st[MODE_FALLOCATE].med / st[MODE_FRESH].med, st[MODE_POPULATE].med / st[MODE_FRESH].med,
         st[MODE_MEMCPY].med / st[MODE_FRESH].med,
         st[MODE_REUSE_POP_READ].med / st[MODE_REUSE_POP_WRITE].med);
  free(chunk);
  return verified ? 0 : 1;
}
