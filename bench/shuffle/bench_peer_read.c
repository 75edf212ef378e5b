/* bench_peer_read.c -- what it costs a worker to hold a map-output image in
 * memory and a peer process on the same host to read it, per way of
 * holding it: a memfd (the store's shared images: fresh tmpfs pages, or a
 * memfd reused from the pool) read through /proc/<pid>/fd with pread or a
 * populated mapping; anonymous memory (huge pages by MADV_HUGEPAGE, or
 * 4 KiB pages) read with process_vm_readv. Everything is CPU time (the
 * writer's in the holder process, the reader's in this one), in CPU-s per
 * GiB, min / median / max over runs; the baseline is a memcpy + sum of the
 * same bytes from this process's own warm memory into the same reused
 * buffer. The reader sums every word it reads and checks the sum, so
 * verified=yes means every method read exactly the bytes written.
 *
 *   bench_peer_read [--mib N] [--runs R] [--piece-kib K]
 *
 * The holder is forked before it creates its image, so the image's pages
 * are never shared copy-on-write with the reader (process_vm_readv of
 * such pages is several times slower). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench_util.h"

enum { HOLD_MEMFD_FRESH, HOLD_MEMFD_REUSED, HOLD_ANON_THP, HOLD_ANON_4K, N_HOLD };
static const char *const HOLD_NAME[N_HOLD] = {"memfd, fresh pages", "memfd, reused (pool)",
                                              "anonymous, huge pages", "anonymous, 4 KiB pages"};
enum { READ_PREAD, READ_MAP, READ_VM, N_READ };
static const char *const READ_NAME[N_READ] = {"pread", "mmap+populate", "process_vm_readv"};

#define MAX_RUNS 32
#define MAP_SPAN ((size_t)64 << 20)

static size_t g_bytes, g_piece;

static void die(const char *what) {
  fprintf(stderr, "bench_peer_read: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double cpu_s(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return (double)r.ru_utime.tv_sec + (double)r.ru_stime.tv_sec +
         1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

/* The image: piece k is the pattern piece with its first word set to k. */
static void fill_piece(uint64_t *p, size_t words) {
  for (size_t i = 0; i < words; i++) p[i] = (i + 1) * 0x9E3779B97F4A7C15ull;
}

static uint64_t sum_words(const uint64_t *p, size_t words) {
  uint64_t s = 0;
  for (size_t i = 0; i < words; i++) s += p[i];
  return s;
}

static uint64_t expected_sum(const uint64_t *piece) {
  size_t words = g_piece / 8, pieces = g_bytes / g_piece;
  uint64_t rest = sum_words(piece + 1, words - 1), s = 0;
  for (size_t k = 0; k < pieces; k++) s += rest + k;
  return s;
}

static void write_all(int fd, const void *p, size_t n, off_t at) {
  for (size_t got = 0; got < n;) {
    ssize_t w = pwrite(fd, (const char *)p + got, n - got, at + (off_t)got);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("pwrite");
    got += (size_t)w;
  }
}

/* The holder's image: written, its write CPU measured; what the reader needs
 * to find it. */
typedef struct held {
  double write_cpu;
  int fd;
  uintptr_t addr;
} held;

static void hold(int how, int to_reader, int from_reader) {
  uint64_t *piece = aligned_alloc(4096, g_piece);
  if (!piece) die("aligned_alloc");
  fill_piece(piece, g_piece / 8);
  held h = {.fd = -1};
  size_t pieces = g_bytes / g_piece;
  if (how == HOLD_MEMFD_FRESH || how == HOLD_MEMFD_REUSED) {
    h.fd = memfd_create("bench-peer-read", MFD_CLOEXEC);
    if (h.fd < 0) die("memfd_create");
    if (how == HOLD_MEMFD_REUSED)
      for (size_t k = 0; k < pieces; k++) write_all(h.fd, piece, g_piece, (off_t)(k * g_piece));
    double c0 = cpu_s();
    for (size_t k = 0; k < pieces; k++) {
      piece[0] = k;
      write_all(h.fd, piece, g_piece, (off_t)(k * g_piece));
    }
    h.write_cpu = cpu_s() - c0;
  } else {
    size_t huge = (size_t)2 << 20;
    double c0 = cpu_s();
    char *m = mmap(NULL, g_bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) die("mmap");
    char *img = (char *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(img, g_bytes, how == HOLD_ANON_THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t k = 0; k < pieces; k++) {
      piece[0] = k;
      memcpy(img + k * g_piece, piece, g_piece);
    }
    h.write_cpu = cpu_s() - c0;
    h.addr = (uintptr_t)img;
  }
  if (write(to_reader, &h, sizeof h) != (ssize_t)sizeof h) die("write to reader");
  char done;
  if (read(from_reader, &done, 1) < 0) die("read from reader");
  _exit(0);
}

/* Reads the holder's image one way into buf (g_piece bytes, reused) and
 * returns the sum of its words; *cpu: the reader's CPU. -1 sum on failure. */
static uint64_t read_image(pid_t holder, const held *h, int way, uint64_t *buf, double *cpu) {
  uint64_t s = 0;
  double c0 = cpu_s();
  if (way == READ_VM) {
    for (size_t o = 0; o < g_bytes; o += g_piece) {
      struct iovec local = {buf, g_piece}, remote = {(void *)(h->addr + o), g_piece};
      if (process_vm_readv(holder, &local, 1, &remote, 1, 0) != (ssize_t)g_piece)
        die("process_vm_readv");
      s += sum_words(buf, g_piece / 8);
    }
  } else {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)holder, h->fd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die(path);
    if (way == READ_PREAD) {
      for (size_t o = 0; o < g_bytes; o += g_piece) {
        if (pread(fd, buf, g_piece, (off_t)o) != (ssize_t)g_piece) die("pread");
        s += sum_words(buf, g_piece / 8);
      }
    } else {
      for (size_t o = 0; o < g_bytes; o += MAP_SPAN) {
        size_t span = g_bytes - o < MAP_SPAN ? g_bytes - o : MAP_SPAN;
        uint64_t *m = mmap(NULL, span, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)o);
        if (m == MAP_FAILED) die("mmap of the peer's memfd");
        s += sum_words(m, span / 8);
        munmap(m, span);
      }
    }
    close(fd);
  }
  *cpu = cpu_s() - c0;
  return s;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_peer_read [--mib N (64..65536, default 1024)] [--runs R (1..%d,"
          " default 3)] [--piece-kib K (4..65536, power of 2, default 1024)]\n", MAX_RUNS);
  return 2;
}

int main(int argc, char **argv) {
  long mib = 1024, runs = 3, piece_kib = 1024;
  for (int i = 1; i < argc; i++) {
    long *v = !strcmp(argv[i], "--mib") ? &mib : !strcmp(argv[i], "--runs") ? &runs
              : !strcmp(argv[i], "--piece-kib") ? &piece_kib : NULL;
    if (!v || i + 1 >= argc) return usage();
    char *end;
    *v = strtol(argv[++i], &end, 10);
    if (*end) return usage();
  }
  if (mib < 64 || mib > 65536 || runs < 1 || runs > MAX_RUNS || piece_kib < 4 ||
      piece_kib > 65536 || (piece_kib & (piece_kib - 1)))
    return usage();
  g_bytes = (size_t)mib << 20;
  g_piece = (size_t)piece_kib << 10;
  uint64_t *buf = aligned_alloc(4096, g_piece), *piece = aligned_alloc(4096, g_piece);
  if (!buf || !piece) die("aligned_alloc");
  memset(buf, 0, g_piece);
  fill_piece(piece, g_piece / 8);
  uint64_t want = expected_sum(piece);
  bool verified = true;

  /* the baseline: this process's own warm image, copied and summed */
  char *own = aligned_alloc((size_t)2 << 20, g_bytes);
  if (!own) die("aligned_alloc");
  madvise(own, g_bytes, MADV_HUGEPAGE);
  for (size_t k = 0; k < g_bytes / g_piece; k++) {
    piece[0] = k;
    memcpy(own + k * g_piece, piece, g_piece);
  }
  double base[MAX_RUNS], wr[N_HOLD][MAX_RUNS], rd[N_HOLD][N_READ][MAX_RUNS];
  double gib = (double)g_bytes / (double)(1 << 30);
  for (int r = 0; r < runs; r++) {
    double c0 = cpu_s();
    uint64_t s = 0;
    for (size_t o = 0; o < g_bytes; o += g_piece) {
      memcpy(buf, own + o, g_piece);
      s += sum_words(buf, g_piece / 8);
    }
    base[r] = (cpu_s() - c0) / gib;
    verified &= s == want;
    for (int how = 0; how < N_HOLD; how++) {
      for (int way = 0; way < N_READ; way++) {
        bool memfd = how == HOLD_MEMFD_FRESH || how == HOLD_MEMFD_REUSED;
        if (memfd == (way == READ_VM)) continue;
        int up[2], down[2];
        if (pipe(up) || pipe(down)) die("pipe");
        fflush(stdout);
        pid_t holder = fork();
        if (holder < 0) die("fork");
        if (holder == 0) {
          close(up[0]);
          close(down[1]);
          hold(how, up[1], down[0]);
        }
        close(up[1]);
        close(down[0]);
        held h;
        if (read(up[0], &h, sizeof h) != (ssize_t)sizeof h) die("read from holder");
        double cpu;
        uint64_t got = read_image(holder, &h, way, buf, &cpu);
        verified &= got == want;
        if (got != want)
          fprintf(stderr, "bench_peer_read: %s read with %s: sum %llx, want %llx\n",
                  HOLD_NAME[how], READ_NAME[way], (unsigned long long)got,
                  (unsigned long long)want);
        wr[how][r] = h.write_cpu / gib;
        rd[how][way][r] = cpu / gib;
        if (write(down[1], "x", 1) != 1) die("write to holder");
        close(up[0]);
        close(down[1]);
        waitpid(holder, NULL, 0);
      }
    }
  }
  qsort(base, (size_t)runs, sizeof *base, bench_cmp_double);
  printf("bench_peer_read: %ld MiB image, %ld KiB pieces, %ld runs; CPU-s per GiB, "
         "min / median / max\n", mib, piece_kib, runs);
  printf("  %-26s %-18s %20s %20s %8s\n", "image held as", "peer reads with", "holder writes",
         "peer reads", "total");
  printf("  %-26s %-18s %20s %6.3f %6.3f %6.3f %8.3f\n", "baseline: own memory", "memcpy", "-",
         base[0], base[runs / 2], base[runs - 1], base[runs / 2]);
  double total[N_HOLD][N_READ] = {{0}};
  for (int how = 0; how < N_HOLD; how++) {
    qsort(wr[how], (size_t)runs, sizeof(double), bench_cmp_double);
    for (int way = 0; way < N_READ; way++) {
      bool memfd = how == HOLD_MEMFD_FRESH || how == HOLD_MEMFD_REUSED;
      if (memfd == (way == READ_VM)) continue;
      double *x = rd[how][way];
      qsort(x, (size_t)runs, sizeof(double), bench_cmp_double);
      total[how][way] = wr[how][runs / 2] + x[runs / 2];
      printf("  %-26s %-18s %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f %8.3f\n", HOLD_NAME[how],
             READ_NAME[way], wr[how][0], wr[how][runs / 2], wr[how][runs - 1], x[0],
             x[runs / 2], x[runs - 1], total[how][way]);
    }
  }
  double vm = total[HOLD_ANON_THP][READ_VM];
  printf("result: name=bench_peer_read verified=%s mib=%ld runs=%ld memcpy_cpu_s_per_gib=%.3f "
         "thp_vm_total=%.3f memfd_fresh_map_total=%.3f memfd_reused_map_total=%.3f "
         "memfd_reused_pread_total=%.3f thp_vm_read_vs_memcpy=%.2f "
         "memfd_fresh_map_vs_thp_vm=%.2f memfd_reused_map_vs_thp_vm=%.2f\n",
         verified ? "yes" : "no", mib, runs, base[runs / 2], vm,
         total[HOLD_MEMFD_FRESH][READ_MAP], total[HOLD_MEMFD_REUSED][READ_MAP],
         total[HOLD_MEMFD_REUSED][READ_PREAD], rd[HOLD_ANON_THP][READ_VM][runs / 2] / base[runs / 2],
         total[HOLD_MEMFD_FRESH][READ_MAP] / vm, total[HOLD_MEMFD_REUSED][READ_MAP] / vm);
  free(own);
  free(buf);
  free(piece);
  return verified ? 0 : 1;
}
