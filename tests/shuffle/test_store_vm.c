/* test_store_vm.c -- the store's VM images (store.c, "VM images"; the
 * identity trailer, shuffle_internal.h), the default kind:
 *  - an image written across several growths (mremap) past 2 MiB ends in
 *    one anonymous mapping whose start is 2 MiB-aligned, advised huge pages
 *    and do-not-fork (the mapping's VmFlags "hg" and "dc" in
 *    /proc/self/smaps), its identity trailer right after its bytes; the
 *    rows read back in place are the ones written; the budget charges the
 *    image's size; located as FSH_STORE_AT_VM at that address;
 *  - vm-4k: the same without the huge-page advice;
 *  - a forked child does not have the image (MADV_DONTFORK);
 *  - release: the trailer's image id is cleared, the mapping pooled
 *    (pooled counts it, pooled_bytes its pages; the budget is images +
 *    pool), and the next image of about that size is written into that very
 *    mapping with a new id; a drain unmaps it (mincore: ENOMEM) and gives
 *    the charge back; an idle pool is drained likewise;
 *  - an image evicted to a spill file by a later writer is unmapped (no
 *    reader holds it), not pooled, and still reads back from its file;
 *  - a budget smaller than the output: it spills, nothing stays charged;
 *  - a new writer is charged for its capacity, not for the (larger) image
 *    size the store expects of it. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <flightshuffle/workloads.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"
#include "shuffle/store_fixture.h"

enum { PARTS = 4 };

/* Writes (shuffle, map, attempt 0): `rows` synthetic rows of seed `seed`
 * over PARTS partitions, uncompressed, in batches of 10000 rows (several
 * growths of the image). */
static void write_map(fixture *f, uint64_t shuffle, int64_t map, uint64_t seed, int64_t rows) {
  fsh_shuffle_spec spec = {.shuffle_id = shuffle, .n_partitions = PARTS, .schema = f->schema};
  fsh_store_writer *w = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_writer_open(f->s, &spec, map, 0, &w, &err));
  if (!w) return;
  for (int64_t at = 0; at < rows; at += 10000) {
    int64_t n = rows - at < 10000 ? rows - at : 10000;
    fsh_batch *b = stu_synthetic(seed + (uint64_t)at, n);
    int32_t *parts = STU_OK(malloc(sizeof *parts * (size_t)n));
    for (int64_t r = 0; r < n; r++) parts[r] = (int32_t)((at + r) % PARTS);
    CHECK_OK(fsh_store_writer_write_rows(w, b, parts, &err));
    fsh_batch_unref(b);
    free(parts);
  }
  fsh_map_output m = {0};
  CHECK_OK(fsh_store_writer_close(w, &m, &err));
  fsh_map_output_reset(&m);
}

static fsh_store_location locate(fixture *f, uint64_t shuffle, int64_t map) {
  fsh_store_location l;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_locate(f->s, shuffle, map, 0, 1, &l, &err));
  return l;
}

static int64_t count_rows(fixture *f, uint64_t shuffle, int64_t map) {
  return store_count_rows(f, shuffle, map, PARTS);
}

/* The mapping of /proc/self/smaps holding addr: its bounds, VmFlags line
 * and AnonHugePages (kB). False when no mapping holds it. */
static bool mapping_of(uint64_t addr, uint64_t *lo, uint64_t *hi, char *flags, size_t n,
                       long *huge_kb) {
  FILE *fp = fopen("/proc/self/smaps", "r");
  if (!fp) return false;
  char line[512];
  bool in = false, found = false;
  flags[0] = '\0';
  *huge_kb = -1;
  while (fgets(line, sizeof line, fp)) {
    unsigned long long a, b;
    if (sscanf(line, "%llx-%llx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (found) break;
      in = addr >= a && addr < b;
      if (in) *lo = a, *hi = b, found = true;
      continue;
    }
    if (!in) continue;
    if (strncmp(line, "VmFlags:", 8) == 0) {
      size_t k = strlen(line + 8) < n ? strlen(line + 8) : n - 1;
      memcpy(flags, line + 8, k);
      flags[k] = '\0';
    }
    if (strncmp(line, "AnonHugePages:", 14) == 0) *huge_kb = atol(line + 14);
  }
  fclose(fp);
  return found;
}

static bool has_flag(const char *flags, const char *f) {
  char want[8];
  snprintf(want, sizeof want, " %s", f);
  const char *p = strstr(flags, want);
  return p && (p[3] == ' ' || p[3] == '\n' || p[3] == '\0');
}

static bool is_mapped(uint64_t addr) {
  unsigned char v;
  return mincore((void *)(uintptr_t)(addr & ~(uint64_t)4095), 4096, &v) == 0;
}

static bool trailer_is(const fsh_store_location *l, uint64_t shuffle, int64_t map) {
  uint8_t want[FSH_IMAGE_ID_BYTES];
  fsh_image_id_encode(want, shuffle, map, 0, l->image_id, l->size);
  return memcmp((const uint8_t *)(uintptr_t)l->addr + l->size, want, sizeof want) == 0;
}

static void written_grown_and_located_of(fsh_store_images images) {
  bool huge = images == FSH_STORE_IMAGES_VM;
  fixture f = open_store_images("vm", (int64_t)256 << 20, images);
  write_map(&f, 1, 0, 11, 200000);
  CHECK_EQ_INT(count_rows(&f, 1, 0), 200000);
  fsh_store_location l = locate(&f, 1, 0);
  CHECK_EQ_INT(l.kind, FSH_STORE_AT_VM);
  CHECK_MSG(l.size > (4 << 20), "image of %lld bytes (want > 4 MiB: growths past 2 MiB)",
            (long long)l.size);
  CHECK_MSG(l.addr % (2u << 20) == 0, "image at %llx: not 2 MiB-aligned",
            (unsigned long long)l.addr);
  CHECK(l.image_id != 0 && trailer_is(&l, 1, 0));
  /* located blocks lie inside the image */
  for (int64_t k = 0; k < l.part.n_blocks; k++)
    CHECK(l.part.blocks[k].offset + l.part.blocks[k].length <= l.size);
  uint64_t lo = 0, hi = 0;
  char flags[256] = "";
  long huge_kb = -1;
  CHECK(mapping_of(l.addr, &lo, &hi, flags, sizeof flags, &huge_kb));
  CHECK_MSG(lo <= l.addr && hi >= l.addr + (uint64_t)l.size + FSH_IMAGE_ID_BYTES &&
                hi - l.addr < (uint64_t)l.size + FSH_IMAGE_ID_BYTES + 4096,
            "mapping [%llx, %llx) for an image of %lld bytes at %llx", (unsigned long long)lo,
            (unsigned long long)hi, (long long)l.size, (unsigned long long)l.addr);
  CHECK_MSG(has_flag(flags, "dc") && has_flag(flags, "hg") == huge, "%s VmFlags:%s",
            huge ? "vm" : "vm-4k", flags);
  printf("  %s: image %lld bytes at %llx, AnonHugePages %ld kB, VmFlags:%s",
         huge ? "vm" : "vm-4k", (long long)l.size, (unsigned long long)l.addr, huge_kb, flags);
  fsh_shuffle_store_stats st = store_stats(f.s);
  CHECK_EQ_INT(st.memory_bytes, l.size);
  store_check_budget(&f, "written");
  fsh_store_location_reset(&l);
  store_release(&f, 1);
  close_store(&f);
}

static void written_grown_and_located(void) {
  written_grown_and_located_of(FSH_STORE_IMAGES_VM);
  written_grown_and_located_of(FSH_STORE_IMAGES_VM_4K);
}

/* A forked child has no copy of the image (MADV_DONTFORK): its address is
 * not mapped there. */
static void not_inherited_by_fork(void) {
  fixture f = open_store("vm", (int64_t)256 << 20);
  write_map(&f, 2, 0, 12, 60000);
  fsh_store_location l = locate(&f, 2, 0);
  CHECK_EQ_INT(l.kind, FSH_STORE_AT_VM);
  CHECK(is_mapped(l.addr));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(is_mapped(l.addr) ? 1 : 0);
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child has the image mapped");
  fsh_store_location_reset(&l);
  store_release(&f, 2);
  close_store(&f);
}

static void pooled_reused_and_drained(void) {
  fixture f = open_store("vm", (int64_t)256 << 20);
  write_map(&f, 3, 0, 13, 80000);
  fsh_store_location a = locate(&f, 3, 0);
  CHECK_EQ_INT(a.kind, FSH_STORE_AT_VM);
  store_release(&f, 3);
  fsh_store_pool_stats p = store_pool(f.s);
  int64_t pages = (a.size + FSH_IMAGE_ID_BYTES + 4095) / 4096 * 4096;
  CHECK_EQ_INT(p.pooled, 1);
  CHECK_EQ_INT(p.pooled_bytes, pages);
  CHECK_EQ_INT(store_stats(f.s).memory_bytes, 0);
  store_check_budget(&f, "pooled");
  /* the id is cleared, the rest of the trailer still there (still mapped:
   * the pool's) */
  CHECK(is_mapped(a.addr));
  const uint8_t *t = (const uint8_t *)(uintptr_t)a.addr + a.size;
  CHECK(memcmp(t, FSH_IMAGE_ID_MAGIC, 8) == 0 && fsh_le_get64(t + 32) == 0 &&
        (int64_t)fsh_le_get64(t + 40) == a.size);
  CHECK(!trailer_is(&a, 3, 0));
  /* the same map output again: into that very mapping, a new id */
  write_map(&f, 4, 0, 13, 80000);
  fsh_store_location b = locate(&f, 4, 0);
  p = store_pool(f.s);
  CHECK_EQ_INT(p.reused, 1);
  CHECK_EQ_INT(p.pooled, 0);
  CHECK_MSG(b.addr == a.addr && b.size == a.size && b.image_id != a.image_id,
            "addr %llx size %lld id %llu, was %llx %lld %llu", (unsigned long long)b.addr,
            (long long)b.size, (unsigned long long)b.image_id, (unsigned long long)a.addr,
            (long long)a.size, (unsigned long long)a.image_id);
  CHECK(trailer_is(&b, 4, 0));
  CHECK_EQ_INT(count_rows(&f, 4, 0), 80000);
  store_check_budget(&f, "reused");
  store_release(&f, 4);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  fsh_store_pool_drain(f.s);
  p = store_pool(f.s);
  CHECK(p.pooled == 0 && p.pooled_bytes == 0 && p.budget_used == 0);
  CHECK_MSG(!is_mapped(b.addr), "a drained image is still mapped");
  /* an idle pool: drained once idle (0 ms here), unmapped */
  write_map(&f, 5, 0, 14, 30000);
  fsh_store_location c = locate(&f, 5, 0);
  store_release(&f, 5);
  CHECK_EQ_INT(store_pool(f.s).pooled, 1);
  fsh_store_set_pool_idle_ms(f.s, 0);
  int64_t due = 0;
  CHECK(fsh_store_pool_drain_idle(f.s, &due) > 0);
  p = store_pool(f.s);
  CHECK(p.pooled == 0 && p.budget_used == 0 && p.idle_drains == 1 && due == -1);
  CHECK(!is_mapped(c.addr));
  fsh_store_location_reset(&a);
  fsh_store_location_reset(&b);
  fsh_store_location_reset(&c);
  close_store(&f);
}

/* A budget that holds one image: the second writer evicts the first to a
 * spill file; its mapping is unmapped (not pooled: its memory was
 * wanted), and it reads back from the file. */
static void evicted_unmapped(void) {
  fixture f = open_store("vm", (int64_t)10 << 20);
  write_map(&f, 6, 0, 15, 120000);
  fsh_store_location a = locate(&f, 6, 0);
  CHECK_EQ_INT(a.kind, FSH_STORE_AT_VM);
  CHECK_MSG(a.size > (2 << 20) && a.size < (4 << 20), "image of %lld bytes", (long long)a.size);
  write_map(&f, 6, 1, 16, 120000);
  fsh_shuffle_store_stats st = store_stats(f.s);
  CHECK_MSG(st.spilled_outputs == 1, "%lld spilled", (long long)st.spilled_outputs);
  fsh_store_location e = locate(&f, 6, 0);
  CHECK_EQ_INT(e.kind, FSH_STORE_AT_FILE);
  CHECK_EQ_INT(store_pool(f.s).pooled, 0);
  fsh_store_location b = locate(&f, 6, 1); /* (its mapping may have taken the address) */
  CHECK_MSG(!is_mapped(a.addr) || (a.addr >= b.addr && a.addr < b.addr + (uint64_t)b.size),
            "the evicted image is still mapped");
  fsh_store_location_reset(&b);
  CHECK_EQ_INT(count_rows(&f, 6, 0), 120000);
  CHECK_EQ_INT(count_rows(&f, 6, 1), 120000);
  store_check_budget(&f, "evicted");
  fsh_store_location_reset(&a);
  fsh_store_location_reset(&e);
  store_release(&f, 6);
  fsh_store_pool_drain(f.s);
  CHECK_EQ_INT(store_pool(f.s).budget_used, 0);
  close_store(&f);
}

/* An output larger than the budget spills; nothing stays charged. */
static void small_budget_spills(void) {
  fixture f = open_store("vm", (int64_t)1 << 20);
  write_map(&f, 7, 0, 17, 60000);
  fsh_shuffle_store_stats st = store_stats(f.s);
  CHECK_EQ_INT(st.spilled_outputs, 1);
  CHECK_EQ_INT(st.memory_bytes, 0);
  CHECK_EQ_INT(count_rows(&f, 7, 0), 60000);
  store_release(&f, 7);
  CHECK_EQ_INT(store_pool(f.s).budget_used, 0);
  close_store(&f);
}

/* A new VM image is mapped as long as its writer expects (huge pages from
 * its start) but charged only for what it holds: a writer just opened
 * after a 6 MB image (the store's expectation now) holds its first
 * growth's 64 KiB of the budget, not 6 MB -- concurrent writers (a task's
 * attempts) must not exhaust a small budget up front. Its image then
 * reads back whole. */
static void charged_by_capacity_not_expectation(void) {
  fixture f = open_store("vm", (int64_t)256 << 20);
  write_map(&f, 8, 0, 18, 200000); /* ~6.4 MB: the expectation */
  int64_t before = store_pool(f.s).budget_used;
  fsh_shuffle_spec spec = {.shuffle_id = 8, .n_partitions = PARTS, .schema = f.schema};
  fsh_store_writer *w = NULL;
  fsh_error err = {{0}};
  CHECK_OK(fsh_store_writer_open(f.s, &spec, 1, 0, &w, &err)); /* writes the schema */
  int64_t held = store_pool(f.s).budget_used - before;
  CHECK_MSG(held > 0 && held <= (64 << 10), "a new writer holds %lld bytes of the budget",
            (long long)held);
  fsh_batch *b = stu_synthetic(19, 20000);
  CHECK_OK(fsh_store_writer_write(w, 0, b, &err));
  fsh_batch_unref(b);
  fsh_map_output m = {0};
  CHECK_OK(fsh_store_writer_close(w, &m, &err));
  CHECK_EQ_INT(m.rows ? m.rows[0] : -1, 20000);
  fsh_map_output_reset(&m);
  CHECK_EQ_INT(count_rows(&f, 8, 1), 20000);
  store_check_budget(&f, "after");
  store_release(&f, 8);
  close_store(&f);
}

FSH_TEST_MAIN(TEST(written_grown_and_located), TEST(not_inherited_by_fork),
              TEST(pooled_reused_and_drained), TEST(evicted_unmapped),
              TEST(small_budget_spills), TEST(charged_by_capacity_not_expectation))
