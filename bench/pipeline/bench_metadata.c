/* bench_metadata.c -- the driver's shuffle metadata (fsh_shuffle_meta,
 * sched.h) at scale, metadata only: a simulated 10,000 maps x 10,000
 * partitions shuffle on fake worker locations (4 and 100 by default).
 *
 * One run: map outputs complete in a random order, each on a worker
 * (round robin), with skewed random block sizes (~20% empty blocks, 1 in 8
 * blocks up to 512x larger, every 100th partition 50x hotter); every
 * reducer (one per partition) polls for new sources after a third of the
 * maps, again at two thirds and after the end; half-way the worker holding
 * location 0 dies (fsh_shuffle_meta_lose_location) and the maps it held are
 * re-run (attempt 1, on the other workers, reported after the first-run
 * maps). Timed: every fsh_shuffle_meta call (add, sources, lose) -- the
 * bookkeeping; not timed: making the random sizes.
 *
 * Baseline, in the same run: filling a naive per-block array (rows and
 * bytes as int64, 16 bytes per block, what fsh_map_output carries) with the
 * same accepted outputs -- one memcpy per output. Memory: our own accounting
 * (fsh_shuffle_meta_memory_bytes) and the RSS delta of a fresh child process
 * doing the same adds, loss and re-adds (before the naive arrays exist),
 * against the naive array's size.
 *
 * Verified (not timed): for a sample of 64 partitions, every poll's answer
 * against the naive array (which maps, attempts, locations, empty blocks
 * skipped, by version), that those reducers end up having seen every map
 * with a non-empty block, and their final totals and per-location bytes
 * (exact: only whole locations are lost here).
 *
 *   build/bench_metadata [--maps N] [--partitions P] [--locations L,L,...]
 *                        [--runs R] [--seed S]
 *
 * Ends with one machine-readable `result:` line. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>

#include "bench_util.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_metadata: %s: %s\n", what, err ? err->message : strerror(errno));
  exit(1);
}

static uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
  fclose(f);
  return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

/* Block sizes of (map, attempt): deterministic, skewed, some empty. */
static void make_sizes(uint64_t seed, int64_t map, int32_t attempt, int32_t np, int64_t *rows,
                       int64_t *bytes) {
  uint64_t s = mix(seed ^ ((uint64_t)map << 20) ^ (uint64_t)attempt);
  for (int32_t p = 0; p < np; p++) {
    uint64_t r = mix(s + (uint64_t)p);
    if (r % 5 == 0) {
      rows[p] = bytes[p] = 0;
      continue;
    }
    int64_t b = 64 + (int64_t)((r >> 8) % 4096);
    if ((r >> 20) % 8 == 0) b <<= (r >> 24) % 10;
    if (p % 100 == 0) b *= 50;
    bytes[p] = b;
    rows[p] = b / 16 + 1;
  }
}

typedef struct sim {
  int64_t n_maps;
  int32_t np, n_locs;
  uint64_t seed;
  char **uris;
  /* naive per-block arrays [map][partition], and per-map state */
  int64_t *naive_rows, *naive_bytes;
  bool *held;
  int32_t *attempt;
  int *loc;
  uint64_t *version, ver;
  /* scratch */
  int64_t *rows, *bytes;
  int64_t *order;
} sim;

typedef struct run_result {
  double add_s, query_s, lose_s, naive_s;
  double naive_poll_s;       /* the naive answers of the sampled polls */
  int64_t naive_polls;
  int64_t adds, polls, entries, lost;
  int64_t mem;
  bool verified;
} run_result;

#define SAMPLE 64

typedef struct vreducer {
  bool *seen; /* [n_maps] for sampled partitions */
} vreducer;

static bool is_sampled(const sim *s, int32_t p) {
  int32_t step = s->np / SAMPLE > 0 ? s->np / SAMPLE : 1;
  return p % step == 0;
}

static int cmp_u64pair(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The answer for (p, since) against the naive arrays. */
static bool verify_answer(const sim *s, const fsh_shuffle_meta *meta, int32_t p, uint64_t since,
                          const fsh_shuffle_sources *a, uint64_t *pairs, run_result *r) {
  double t0 = bench_now();
  int64_t n = 0;
  for (int64_t m = 0; m < s->n_maps; m++)
    if (s->held[m] && s->version[m] > since &&
        (s->naive_rows[m * s->np + p] || s->naive_bytes[m * s->np + p])) {
      pairs[2 * n] = s->version[m];
      pairs[2 * n + 1] = (uint64_t)m;
      n++;
    }
  qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_u64pair);
  r->naive_poll_s += bench_now() - t0;
  r->naive_polls++;
  bool all_held = true;
  for (int64_t m = 0; m < s->n_maps; m++) all_held &= s->held[m];
  if (a->n != n || a->version != s->ver || a->complete != all_held) {
    fprintf(stderr, "verify: partition %d since %" PRIu64 ": %" PRId64 " sources, want %" PRId64
            "\n", (int)p, since, a->n, n);
    return false;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t m = (int64_t)pairs[2 * i + 1];
    const char *u = fsh_shuffle_meta_location_uri(meta, a->location_ids[i]);
    if (a->map_ids[i] != m || a->attempts[i] != s->attempt[m] || !u ||
        strcmp(u, s->uris[s->loc[m]]) != 0) {
      fprintf(stderr, "verify: partition %d entry %" PRId64 ": map %" PRId64 " attempt %d at %s,"
              " want map %" PRId64 " attempt %d at %s\n", (int)p, i, a->map_ids[i],
              (int)a->attempts[i], u ? u : "(none)", m, (int)s->attempt[m], s->uris[s->loc[m]]);
      return false;
    }
  }
  return true;
}

static bool verify_totals(const sim *s, const fsh_shuffle_meta *meta, int32_t p) {
  fsh_error err;
  fsh_shuffle_partition_totals t;
  if (fsh_shuffle_meta_partition_totals(meta, p, &t, &err)) die("totals", &err);
  int64_t rows = 0, bytes = 0, loc_bytes[1024] = {0};
  for (int64_t m = 0; m < s->n_maps; m++) {
    if (!s->held[m]) continue;
    rows += s->naive_rows[m * s->np + p];
    bytes += s->naive_bytes[m * s->np + p];
    loc_bytes[s->loc[m]] += s->naive_bytes[m * s->np + p];
  }
  bool ok = t.exact && t.rows == rows && t.bytes == bytes;
  int64_t best = 0;
  for (int l = 0; l < s->n_locs; l++) {
    uint32_t id;
    int64_t r = 0, b = 0;
    if (fsh_shuffle_meta_location_id(meta, s->uris[l], &id) &&
        fsh_shuffle_meta_location_bytes(meta, p, id, &r, &b, &err))
      die("location bytes", &err);
    ok &= b == loc_bytes[l];
    if (b > best) best = b;
  }
  ok &= t.best_location_bytes == best;
  if (!ok)
    fprintf(stderr, "verify: partition %d totals %" PRId64 " bytes, want %" PRId64 "\n", (int)p,
            t.bytes, bytes);
  return ok;
}

/* Accepts one output: meta (timed) and the naive array (timed apart). */
static void feed(sim *s, fsh_shuffle_meta *meta, int64_t m, int32_t attempt, int loc,
                 run_result *r) {
  fsh_error err;
  make_sizes(s->seed, m, attempt, s->np, s->rows, s->bytes);
  fsh_map_output o = {.shuffle_id = s->seed, .map_id = m, .attempt = attempt,
                      .location = s->uris[loc], .n_partitions = s->np,
                      .rows = s->rows, .bytes = s->bytes};
  fsh_shuffle_meta_add_result res;
  double t0 = bench_now();
  if (fsh_shuffle_meta_add(meta, &o, &res, &err)) die("add", &err);
  double t1 = bench_now();
  if (s->naive_rows) {
    memcpy(s->naive_rows + m * s->np, s->rows, (size_t)s->np * sizeof(int64_t));
    memcpy(s->naive_bytes + m * s->np, s->bytes, (size_t)s->np * sizeof(int64_t));
  }
  double t2 = bench_now();
  r->add_s += t1 - t0;
  r->naive_s += t2 - t1;
  r->adds++;
  if (res != FSH_SHUFFLE_META_ACCEPTED) {
    fprintf(stderr, "bench_metadata: map %" PRId64 " attempt %d: %s\n", m, (int)attempt,
            fsh_shuffle_meta_add_result_name(res));
    exit(1);
  }
  s->held[m] = true;
  s->attempt[m] = attempt;
  s->loc[m] = loc;
  s->version[m] = ++s->ver;
}

/* Every reducer polls once; sampled ones are verified. */
static void poll_round(sim *s, fsh_shuffle_meta *meta, uint64_t *since, vreducer *vr,
                       fsh_shuffle_sources *a, uint64_t *pairs, run_result *r) {
  fsh_error err;
  for (int32_t p = 0; p < s->np; p++) {
    double t0 = bench_now();
    if (fsh_shuffle_meta_sources(meta, p, since[p], a, &err)) die("sources", &err);
    r->query_s += bench_now() - t0;
    r->polls++;
    r->entries += a->n;
    if (is_sampled(s, p)) {
      r->verified &= verify_answer(s, meta, p, since[p], a, pairs, r);
      for (int64_t i = 0; i < a->n; i++) vr[p].seen[a->map_ids[i]] = true;
    }
    since[p] = a->version;
  }
}

/* Round robin over the workers but the dead one (location 0). */
static int live_loc(const sim *s, int64_t i) {
  return s->n_locs > 1 ? 1 + (int)(i % (s->n_locs - 1)) : 0;
}

static run_result run_once(sim *s, int run) {
  fsh_error err;
  run_result r = {0};
  r.verified = true;
  int64_t N = s->n_maps;
  int32_t P = s->np;
  memset(s->held, 0, (size_t)N * sizeof *s->held);
  s->ver = 0;
  /* completion order */
  for (int64_t i = 0; i < N; i++) s->order[i] = i;
  for (int64_t i = N - 1; i > 0; i--) {
    int64_t j = (int64_t)(mix(s->seed * 31 + (uint64_t)run * 7919 + (uint64_t)i) %
                          (uint64_t)(i + 1));
    int64_t t = s->order[i];
    s->order[i] = s->order[j];
    s->order[j] = t;
  }
  uint64_t *since = calloc((size_t)P, sizeof *since);
  uint64_t *pairs = malloc((size_t)N * 2 * sizeof *pairs);
  vreducer *vr = calloc((size_t)P, sizeof *vr);
  if (!since || !pairs || !vr) die("out of memory", NULL);
  for (int32_t p = 0; p < P; p++)
    if (is_sampled(s, p) && !(vr[p].seen = calloc((size_t)N, 1))) die("out of memory", NULL);
  fsh_shuffle_sources a = {0};

  fsh_shuffle_meta *meta = NULL;
  double t0 = bench_now();
  if (fsh_shuffle_meta_new(s->seed, N, P, &meta, &err)) die("new", &err);
  r.add_s += bench_now() - t0;

  int64_t i = 0;
  for (; i < N / 3; i++) feed(s, meta, s->order[i], 0, (int)(i % s->n_locs), &r);
  poll_round(s, meta, since, vr, &a, pairs, &r);
  for (; i < N / 2; i++) feed(s, meta, s->order[i], 0, (int)(i % s->n_locs), &r);
  /* the worker at location 0 dies */
  int64_t *lost = NULL, n_lost = 0;
  t0 = bench_now();
  if (fsh_shuffle_meta_lose_location(meta, s->uris[0], &lost, &n_lost, &err))
    die("lose location", &err);
  r.lose_s += bench_now() - t0;
  r.lost = n_lost;
  for (int64_t k = 0; k < n_lost; k++) s->held[lost[k]] = false;
  /* the dead worker gets no new tasks */
  for (; i < 2 * N / 3; i++) feed(s, meta, s->order[i], 0, live_loc(s, i), &r);
  poll_round(s, meta, since, vr, &a, pairs, &r);
  for (; i < N; i++) feed(s, meta, s->order[i], 0, live_loc(s, i), &r);
  for (int64_t k = 0; k < n_lost; k++) /* the recomputed maps */
    feed(s, meta, lost[k], 1, live_loc(s, k), &r);
  fsh_free(lost);
  poll_round(s, meta, since, vr, &a, pairs, &r);
  r.mem = fsh_shuffle_meta_memory_bytes(meta);

  /* every sampled reducer saw every non-empty source; totals exact */
  if (fsh_shuffle_meta_n_complete(meta) != N) r.verified = false;
  for (int32_t p = 0; p < P; p++) {
    if (!is_sampled(s, p)) continue;
    for (int64_t m = 0; m < N; m++)
      if ((s->naive_rows[m * P + p] || s->naive_bytes[m * P + p]) && !vr[p].seen[m]) {
        fprintf(stderr, "verify: reducer %d never saw map %" PRId64 "\n", (int)p, m);
        r.verified = false;
        break;
      }
    r.verified &= verify_totals(s, meta, p);
    free(vr[p].seen);
  }
  fsh_shuffle_sources_reset(&a);
  fsh_shuffle_meta_free(meta);
  free(vr);
  free(since);
  free(pairs);
  return r;
}

/* The RSS a shuffle's metadata costs, measured in a fresh child process
 * (before the naive arrays exist): the same adds, loss and re-adds as a
 * run, polls left out. Returns the RSS delta in bytes (-1 on failure). */
static int64_t rss_probe(sim *s) {
  int fd[2];
  if (pipe(fd)) return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fd[0]);
    fsh_error err;
    run_result r = {0};
    int64_t rss0 = rss_bytes();
    fsh_shuffle_meta *meta = NULL;
    if (fsh_shuffle_meta_new(s->seed, s->n_maps, s->np, &meta, &err)) die("new", &err);
    for (int64_t i = 0; i < s->n_maps; i++)
      feed(s, meta, i, 0, i < s->n_maps / 2 ? (int)(i % s->n_locs) : live_loc(s, i), &r);
    int64_t *lost = NULL, n = 0;
    if (fsh_shuffle_meta_lose_location(meta, s->uris[0], &lost, &n, &err)) die("lose", &err);
    for (int64_t k = 0; k < n; k++) feed(s, meta, lost[k], 1, live_loc(s, k), &r);
    fsh_free(lost);
    int64_t delta = rss_bytes() - rss0;
    if (write(fd[1], &delta, sizeof delta) != (ssize_t)sizeof delta) _exit(1);
    _exit(0);
  }
  close(fd[1]);
  int64_t delta = -1;
  if (read(fd[0], &delta, sizeof delta) != (ssize_t)sizeof delta) delta = -1;
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  return delta;
}

static void stats3(double *v, int n, double *mn, double *md, double *mx) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  *mn = v[0];
  *md = v[n / 2];
  *mx = v[n - 1];
}

int main(int argc, char **argv) {
  int64_t n_maps = 10000;
  int32_t np = 10000;
  int runs = 3;
  uint64_t seed = 42;
  int loc_list[16] = {4, 100}, n_loc_list = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (strcmp(a, "--maps") == 0) n_maps = atoll(v);
    else if (strcmp(a, "--partitions") == 0) np = atoi(v);
    else if (strcmp(a, "--runs") == 0) runs = atoi(v);
    else if (strcmp(a, "--seed") == 0) seed = strtoull(v, NULL, 10);
    else if (strcmp(a, "--locations") == 0) {
      n_loc_list = 0;
      for (char *t = strtok((char *)v, ","); t && n_loc_list < 16; t = strtok(NULL, ","))
        loc_list[n_loc_list++] = atoi(t);
    } else goto usage;
    i++;
  }
  if (n_maps < 1 || np < 1 || runs < 1 || runs > 64 || n_loc_list < 1) goto usage;
  for (int k = 0; k < n_loc_list; k++)
    if (loc_list[k] < 1 || loc_list[k] > 1024) goto usage;

  sim s = {.n_maps = n_maps, .np = np, .seed = seed};
  size_t blocks = (size_t)n_maps * (size_t)np;
  s.held = calloc((size_t)n_maps, sizeof *s.held);
  s.attempt = calloc((size_t)n_maps, sizeof *s.attempt);
  s.loc = calloc((size_t)n_maps, sizeof *s.loc);
  s.version = calloc((size_t)n_maps, sizeof *s.version);
  s.order = calloc((size_t)n_maps, sizeof *s.order);
  s.rows = calloc((size_t)np, sizeof *s.rows);
  s.bytes = calloc((size_t)np, sizeof *s.bytes);
  s.uris = calloc(1024, sizeof *s.uris);
  if (!s.held || !s.attempt || !s.loc || !s.version ||
      !s.order || !s.rows || !s.bytes || !s.uris)
    die("out of memory for the naive per-block arrays", NULL);
  for (int l = 0; l < 1024; l++) {
    char u[64];
    snprintf(u, sizeof u, "grpc://worker-%04d.cluster.local:7000", l);
    if (!(s.uris[l] = strdup(u))) die("out of memory", NULL);
  }
  int64_t rss_delta[16];
  for (int k = 0; k < n_loc_list; k++) {
    s.n_locs = loc_list[k];
    rss_delta[k] = rss_probe(&s);
  }
  /* the naive arrays, resident (not zero: that could stay unmapped) before
   * any measurement */
  s.naive_rows = malloc(blocks * sizeof(int64_t));
  s.naive_bytes = malloc(blocks * sizeof(int64_t));
  if (!s.naive_rows || !s.naive_bytes) die("out of memory for the naive per-block arrays", NULL);
  memset(s.naive_rows, 0xff, blocks * sizeof(int64_t));
  memset(s.naive_bytes, 0xff, blocks * sizeof(int64_t));
  double naive_mib = (double)blocks * 16 / 1048576.0;
  printf("bench_metadata: %" PRId64 " maps x %d partitions (%.3g blocks), %d runs; per run:"
         " outputs fed, every reducer polls 3 times, location 0 lost half-way and its maps"
         " re-run\n", n_maps, (int)np, (double)blocks, runs);
  printf("  baseline: a naive per-block array (rows + bytes int64 = 16 B/block, %.0f MiB),"
         " filled with the same outputs; its poll answers computed for the verified sample\n",
         naive_mib);

  bool all_verified = true;
  double worst_mem_mib = 0, worst_book_med = 0;
  char result[1024];
  int rlen = 0;
  for (int k = 0; k < n_loc_list; k++) {
    s.n_locs = loc_list[k];
    double add[64], query[64], lose[64], naive[64], book[64], ratio[64];
    run_result last = {0};
    bool ok = true;
    for (int r = 0; r < runs; r++) {
      run_result rr = run_once(&s, r);
      ok &= rr.verified;
      last = rr;
      all_verified &= rr.verified;
      add[r] = rr.add_s;
      query[r] = rr.query_s;
      lose[r] = rr.lose_s;
      naive[r] = rr.naive_s;
      book[r] = rr.add_s + rr.query_s + rr.lose_s;
      ratio[r] = book[r] / rr.naive_s;
    }
    double mem_mib = (double)last.mem / 1048576.0;
    printf("\n%d locations (%" PRId64 " map outputs lost and re-added per run, %" PRId64
           " adds, %" PRId64 " polls answering %" PRId64 " sources):\n", s.n_locs, last.lost,
           last.adds, last.polls, last.entries);
    printf("  driver memory, accounted        %8.1f MiB  = %.0f B per map output, %.3f B per"
           " block  (%.1fx less than naive)\n", mem_mib, (double)last.mem / (double)n_maps,
           (double)last.mem / (double)blocks, naive_mib / mem_mib);
    printf("  driver memory, RSS delta         %7.1f MiB  (in a fresh process: new + all adds +"
           " loss + re-adds)\n", (double)rss_delta[k] / 1048576.0);
    double mn, md, mx, amd, qmd, nmd, rmn, rmd, rmx;
    printf("  %-34s %8s %8s %8s\n", "seconds (min / median / max)", "min", "median", "max");
    stats3(add, runs, &mn, &amd, &mx);
    printf("  %-34s %8.3f %8.3f %8.3f   %.0f adds/s\n", "add outputs", mn, amd, mx,
           (double)last.adds / amd);
    stats3(query, runs, &mn, &qmd, &mx);
    printf("  %-34s %8.3f %8.3f %8.3f   %.0f polls/s, %.0f sources/s\n", "reducer polls", mn,
           qmd, mx, (double)last.polls / qmd, (double)last.entries / qmd);
    stats3(lose, runs, &mn, &md, &mx);
    printf("  %-34s %8.3f %8.3f %8.3f\n", "lose a location", mn, md, mx);
    stats3(book, runs, &mn, &md, &mx);
    printf("  %-34s %8.3f %8.3f %8.3f\n", "total bookkeeping", mn, md, mx);
    stats3(naive, runs, &mn, &nmd, &mx);
    printf("  %-34s %8.3f %8.3f %8.3f\n", "baseline: fill naive array", mn, nmd, mx);
    stats3(ratio, runs, &rmn, &rmd, &rmx);
    printf("  bookkeeping / naive fill          %8.2fx %8.2fx %8.2fx\n", rmn, rmd, rmx);
    printf("  add / naive fill (medians)        %8.2fx\n", amd / nmd);
    double ours_poll = qmd / (double)last.polls * 1e6,
           naive_poll = last.naive_poll_s / (double)last.naive_polls * 1e6;
    printf("  one poll: %.1f us; the naive array's answer (sampled polls): %.1f us (%.1fx)\n",
           ours_poll, naive_poll, naive_poll / ours_poll);
    printf("  verified (64 sampled partitions): %s\n", ok ? "yes"
                                                                                       : "no");
    if (mem_mib > worst_mem_mib) worst_mem_mib = mem_mib;
    if (md > worst_book_med) worst_book_med = md;
    rlen += snprintf(result + rlen, sizeof result - (size_t)rlen,
                     " mem_mib_%dloc=%.1f rss_mib_%dloc=%.1f bytes_per_block_%dloc=%.3f"
                     " bookkeeping_s_%dloc=%.3f vs_naive_%dloc=%.2f", s.n_locs, mem_mib,
                     s.n_locs, (double)rss_delta[k] / 1048576.0, s.n_locs,
                     (double)last.mem / (double)blocks, s.n_locs, md, s.n_locs, rmd);
    if (rlen >= (int)sizeof result) rlen = (int)sizeof result - 1;
  }
  printf("\nresult: maps=%" PRId64 " partitions=%d%s max_mem_mib=%.1f within_64mib=%s"
         " verified=%s\n", n_maps, (int)np, result, worst_mem_mib,
         worst_mem_mib <= 64 ? "yes" : "no", all_verified ? "yes" : "no");
  for (int l = 0; l < 1024; l++) free(s.uris[l]);
  free(s.uris);
  free(s.naive_rows);
  free(s.naive_bytes);
  free(s.held);
  free(s.attempt);
  free(s.loc);
  free(s.version);
  free(s.order);
  free(s.rows);
  free(s.bytes);
  return all_verified ? 0 : 1;
usage:
  fprintf(stderr, "usage: bench_metadata [--maps N] [--partitions P] [--locations L,L,...]"
                  " [--runs R] [--seed S]\n");
  return 2;
}
