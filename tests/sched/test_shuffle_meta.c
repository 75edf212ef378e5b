/* test_shuffle_meta.c -- the driver's compact shuffle metadata (sched.h,
 * "shuffle metadata") against a naive reference model that keeps every
 * block's rows and bytes: random sequences of add / supersede / stale and
 * duplicate outputs / lose location / lose output / sources queries, with
 * incremental reducers that must end up having seen every non-empty
 * source; the ShuffleSources encoding round trip and its validation of
 * malformed messages; argument errors; allocation failures at every
 * allocation (nothing changes, nothing leaks). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <flightshuffle/sched.h>
#include <flightshuffle/shuffle.h>

#include "Sched.pb-c.h"
#include "test.h"

/* ---- a deterministic generator ------------------------------------------ */

static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int64_t rnd_below(int64_t n) { return (int64_t)(rnd() % (uint64_t)n); }

/* ---- the reference model: every block, exactly -------------------------- */

enum { M_PENDING = 0, M_COMPLETE = 1, M_LOST = 2 };
#define MAX_MAPS 64
#define MAX_PARTS 48
#define N_URIS 5

typedef struct model {
  int64_t n_maps;
  int32_t np;
  int state[MAX_MAPS];
  int32_t attempt[MAX_MAPS], out_attempt[MAX_MAPS];
  uint64_t version[MAX_MAPS];
  int loc[MAX_MAPS]; /* index into uris */
  int64_t rows[MAX_MAPS][MAX_PARTS], bytes[MAX_MAPS][MAX_PARTS];
  uint64_t ver;
} model;

static const char *uris[N_URIS] = {"grpc://w0:7000", "grpc://w1:7000", "grpc://w2:7000",
                                   "grpc://w3:7000", "grpc://w4:7000"};

static void model_init(model *md, int64_t n_maps, int32_t np) {
  memset(md, 0, sizeof *md);
  md->n_maps = n_maps;
  md->np = np;
  for (int64_t i = 0; i < n_maps; i++) md->attempt[i] = md->out_attempt[i] = -1;
}

static bool block_non_empty(const model *md, int64_t m, int32_t p) {
  return md->rows[m][p] > 0 || md->bytes[m][p] > 0;
}

/* A map output with skewed sizes: ~30% empty blocks, a few huge ones. */
static void random_output(fsh_map_output *o, int64_t *rows, int64_t *bytes, int32_t np,
                          uint64_t shuffle_id, int64_t map, int32_t attempt, int uri) {
  for (int32_t p = 0; p < np; p++) {
    int64_t r = rnd_below(100);
    if (r < 30) rows[p] = bytes[p] = 0;
    else {
      bytes[p] = 1 + rnd_below(1000);
      if (r >= 95) bytes[p] *= 1000;
      rows[p] = r == 31 ? 0 : bytes[p] / 8 + rnd_below(3);
    }
  }
  memset(o, 0, sizeof *o);
  o->shuffle_id = shuffle_id;
  o->map_id = map;
  o->attempt = attempt;
  o->location = (char *)uris[uri];
  o->n_partitions = np;
  o->rows = rows;
  o->bytes = bytes;
}

static fsh_shuffle_meta_add_result model_add(model *md, const fsh_map_output *o, int uri) {
  int64_t m = o->map_id;
  if (o->attempt < md->attempt[m]) return FSH_SHUFFLE_META_STALE;
  if (o->attempt == md->out_attempt[m]) return FSH_SHUFFLE_META_DUPLICATE;
  if (o->attempt < md->out_attempt[m]) return FSH_SHUFFLE_META_STALE;
  md->attempt[m] = md->out_attempt[m] = o->attempt;
  md->state[m] = M_COMPLETE;
  md->version[m] = ++md->ver;
  md->loc[m] = uri;
  for (int32_t p = 0; p < md->np; p++) {
    md->rows[m][p] = o->rows[p];
    md->bytes[m][p] = o->bytes[p];
  }
  return FSH_SHUFFLE_META_ACCEPTED;
}

/* ---- checks of the metadata against the model --------------------------- */

static void check_partition(const fsh_shuffle_meta *meta, const model *md, int32_t p) {
  fsh_error err;
  fsh_shuffle_partition_totals t;
  CHECK_OK(fsh_shuffle_meta_partition_totals(meta, p, &t, &err));
  int64_t rows = 0, bytes = 0, non_empty = 0, loc_bytes[N_URIS] = {0}, loc_rows[N_URIS] = {0};
  for (int64_t m = 0; m < md->n_maps; m++) {
    if (md->state[m] != M_COMPLETE) continue;
    rows += md->rows[m][p];
    bytes += md->bytes[m][p];
    non_empty += block_non_empty(md, m, p);
    loc_bytes[md->loc[m]] += md->bytes[m][p];
    loc_rows[md->loc[m]] += md->rows[m][p];
  }
  CHECK_EQ_INT(t.non_empty_maps, non_empty);
  CHECK(t.rows >= 0 && t.bytes >= 0);
  /* Cells always add up to the partition's totals. */
  int64_t sum_rows = 0, sum_bytes = 0, best = 0;
  for (uint32_t id = 0; id < fsh_shuffle_meta_n_locations(meta); id++) {
    int64_t r, b;
    CHECK_OK(fsh_shuffle_meta_location_bytes(meta, p, id, &r, &b, &err));
    CHECK(r >= 0 && b >= 0);
    sum_rows += r;
    sum_bytes += b;
    if (b > best) best = b;
  }
  CHECK_EQ_INT(sum_rows, t.rows);
  CHECK_EQ_INT(sum_bytes, t.bytes);
  CHECK_EQ_INT(t.best_location_bytes, best);
  if (!t.exact) return;
  CHECK_EQ_INT(t.rows, rows);
  CHECK_EQ_INT(t.bytes, bytes);
  int64_t model_best = 0;
  for (int u = 0; u < N_URIS; u++) {
    uint32_t id;
    int64_t r = 0, b = 0;
    if (fsh_shuffle_meta_location_id(meta, uris[u], &id))
      CHECK_OK(fsh_shuffle_meta_location_bytes(meta, p, id, &r, &b, &err));
    CHECK_EQ_INT(b, loc_bytes[u]);
    CHECK_EQ_INT(r, loc_rows[u]);
    if (loc_bytes[u] > model_best) model_best = loc_bytes[u];
  }
  CHECK_EQ_INT(t.best_location_bytes, model_best);
  if (model_best) { /* the best location is one holding the most bytes */
    const char *u = fsh_shuffle_meta_location_uri(meta, t.best_location);
    int k = 0;
    while (k < N_URIS && (!u || strcmp(u, uris[k]) != 0)) k++;
    CHECK(k < N_URIS && loc_bytes[k] == model_best);
  }
}

static void check_map(const fsh_shuffle_meta *meta, const model *md, int64_t m) {
  fsh_error err;
  fsh_shuffle_meta_map_info mi;
  CHECK_OK(fsh_shuffle_meta_map(meta, m, &mi, &err));
  CHECK_EQ_INT(mi.state, md->state[m]);
  CHECK_EQ_INT(mi.attempt, md->attempt[m]);
  CHECK_EQ_INT(mi.output_attempt, md->out_attempt[m]);
  CHECK_EQ_INT(mi.version, md->version[m]);
  if (md->state[m] == M_PENDING) return;
  CHECK(strcmp(fsh_shuffle_meta_location_uri(meta, mi.location_id), uris[md->loc[m]]) == 0);
  int64_t rows = 0, bytes = 0, max_bytes = 0, non_empty = 0;
  for (int32_t p = 0; p < md->np; p++) {
    rows += md->rows[m][p];
    bytes += md->bytes[m][p];
    non_empty += block_non_empty(md, m, p);
    if (md->bytes[m][p] > max_bytes) max_bytes = md->bytes[m][p];
  }
  CHECK_EQ_INT(mi.rows, rows);
  CHECK_EQ_INT(mi.bytes, bytes);
  CHECK_EQ_INT(mi.non_empty, non_empty);
  if (md->state[m] != M_COMPLETE) return;
  /* Block estimates: empty blocks exactly 0; the sum within rounding of
   * the exact total; the largest block exact when it is over twice the
   * average. */
  int64_t est_sum = 0;
  for (int32_t p = 0; p < md->np; p++) {
    int64_t r, b;
    CHECK_OK(fsh_shuffle_meta_block(meta, m, p, &r, &b, &err));
    if (!block_non_empty(md, m, p)) {
      CHECK_EQ_INT(r, 0);
      CHECK_EQ_INT(b, 0);
    }
    if (md->bytes[m][p] == max_bytes && non_empty > 1 && max_bytes > bytes / non_empty * 2)
      CHECK_EQ_INT(b, max_bytes);
    est_sum += b;
  }
  CHECK_MSG(est_sum <= bytes && est_sum >= bytes - non_empty,
            "map %" PRId64 ": estimates sum to %" PRId64 ", exact %" PRId64, m, est_sum, bytes);
}

/* The sources answer for (p, since) against the model. */
static void check_sources(const fsh_shuffle_meta *meta, const model *md, int32_t p,
                          uint64_t since, fsh_shuffle_sources *s) {
  fsh_error err;
  CHECK_OK(fsh_shuffle_meta_sources(meta, p, since, s, &err));
  CHECK_EQ_INT(s->version, md->ver);
  CHECK_EQ_INT(s->partition, p);
  int64_t complete = 0;
  for (int64_t m = 0; m < md->n_maps; m++) complete += md->state[m] == M_COMPLETE;
  CHECK_EQ_INT(s->complete, complete == md->n_maps);
  /* expected: held outputs with version > since and a non-empty block,
   * by increasing version */
  int64_t want[MAX_MAPS], n = 0;
  for (uint64_t v = since + 1; v <= md->ver; v++)
    for (int64_t m = 0; m < md->n_maps; m++)
      if (md->state[m] == M_COMPLETE && md->version[m] == v && block_non_empty(md, m, p))
        want[n++] = m;
  CHECK_EQ_INT(s->n, n);
  for (int64_t i = 0; i < n && i < s->n; i++) {
    int64_t m = want[i];
    CHECK_EQ_INT(s->map_ids[i], m);
    CHECK_EQ_INT(s->attempts[i], md->out_attempt[m]);
    const char *u = fsh_shuffle_meta_location_uri(meta, s->location_ids[i]);
    CHECK(u && strcmp(u, uris[md->loc[m]]) == 0);
    int64_t r, b;
    CHECK_OK(fsh_shuffle_meta_block(meta, m, p, &r, &b, &err));
    CHECK_EQ_INT(s->bytes[i], b);
  }
}

/* The run answer for ([p, p + count), since) against the model (coalesced
 * reduces): held outputs with version > since and a non-empty block in
 * any partition of the run, by increasing version, bytes summed over the
 * run's blocks. */
static void check_run_sources(const fsh_shuffle_meta *meta, const model *md, int32_t p,
                              int32_t count, uint64_t since, fsh_shuffle_sources *s) {
  fsh_error err;
  CHECK_OK(fsh_shuffle_meta_run_sources(meta, p, count, since, s, &err));
  CHECK_EQ_INT(s->version, md->ver);
  int64_t want[MAX_MAPS], n = 0;
  for (uint64_t v = since + 1; v <= md->ver; v++)
    for (int64_t m = 0; m < md->n_maps; m++) {
      bool any = false;
      for (int32_t q = p; q < p + count; q++) any |= block_non_empty(md, m, q);
      if (md->state[m] == M_COMPLETE && md->version[m] == v && any) want[n++] = m;
    }
  CHECK_EQ_INT(s->n, n);
  for (int64_t i = 0; i < n && i < s->n; i++) {
    int64_t m = want[i], sum = 0;
    CHECK_EQ_INT(s->map_ids[i], m);
    CHECK_EQ_INT(s->attempts[i], md->out_attempt[m]);
    for (int32_t q = p; q < p + count; q++) {
      int64_t r, b;
      CHECK_OK(fsh_shuffle_meta_block(meta, m, q, &r, &b, &err));
      sum += b;
    }
    CHECK_EQ_INT(s->bytes[i], sum);
  }
}

/* Encodes s, decodes it, compares. */
static void check_roundtrip(const fsh_shuffle_meta *meta, const fsh_shuffle_sources *s) {
  fsh_error err;
  uint8_t *data = NULL;
  int64_t size = 0;
  CHECK_OK(fsh_shuffle_meta_sources_encode(meta, s, &data, &size, &err));
  fsh_shuffle_sources d = {0};
  CHECK_OK(fsh_shuffle_sources_decode(data, size, &d, &err));
  CHECK_EQ_INT(d.shuffle_id, s->shuffle_id);
  CHECK_EQ_INT(d.partition, s->partition);
  CHECK_EQ_INT(d.n_maps, s->n_maps);
  CHECK_EQ_INT(d.since_version, s->since_version);
  CHECK_EQ_INT(d.version, s->version);
  CHECK_EQ_INT(d.complete, s->complete);
  CHECK_EQ_INT(d.n, s->n);
  for (int64_t i = 0; i < d.n && i < s->n; i++) {
    CHECK_EQ_INT(d.map_ids[i], s->map_ids[i]);
    CHECK_EQ_INT(d.attempts[i], s->attempts[i]);
    CHECK_EQ_INT(d.location_ids[i], s->location_ids[i]);
    CHECK_EQ_INT(d.bytes[i], s->bytes[i]);
    const char *u = fsh_shuffle_sources_uri(&d, d.location_ids[i]);
    CHECK(u && strcmp(u, fsh_shuffle_meta_location_uri(meta, s->location_ids[i])) == 0);
  }
  fsh_shuffle_sources_reset(&d);
  fsh_free(data);
}

/* ---- random sequences --------------------------------------------------- */

typedef struct reducer {
  uint64_t since;
  bool seen[MAX_MAPS];
} reducer;

static void run_random(uint64_t seed, int64_t n_maps, int32_t np, int steps) {
  fsh_error err;
  rng_state = seed;
  static model md;
  model_init(&md, n_maps, np);
  fsh_shuffle_meta *meta = NULL;
  CHECK_OK(fsh_shuffle_meta_new(seed, n_maps, np, &meta, &err));
  if (!meta) return;
  static reducer red[MAX_PARTS];
  memset(red, 0, sizeof red);
  fsh_shuffle_sources s = {0};
  int64_t rows[MAX_PARTS], bytes[MAX_PARTS];
  int64_t lost_total = 0, accepted = 0, stale = 0, dup = 0, replaced = 0;
  for (int step = 0; step < steps; step++) {
    int64_t op = rnd_below(100);
    int64_t m = rnd_below(n_maps);
    if (op < 45) { /* add */
      int32_t base = md.attempt[m] > md.out_attempt[m] ? md.attempt[m] : md.out_attempt[m];
      int32_t a = base + (int32_t)rnd_below(4) - 1;
      if (a < 0) a = 0;
      int uri = (int)rnd_below(N_URIS);
      fsh_map_output o;
      random_output(&o, rows, bytes, np, seed, m, a, uri);
      bool was_complete = md.state[m] == M_COMPLETE;
      fsh_shuffle_meta_add_result want = model_add(&md, &o, uri), got = 99;
      CHECK_OK(fsh_shuffle_meta_add(meta, &o, &got, &err));
      CHECK_EQ_INT(got, want);
      accepted += want == FSH_SHUFFLE_META_ACCEPTED;
      stale += want == FSH_SHUFFLE_META_STALE;
      dup += want == FSH_SHUFFLE_META_DUPLICATE;
      replaced += want == FSH_SHUFFLE_META_ACCEPTED && was_complete;
    } else if (op < 50) { /* a new attempt launched */
      int32_t a = md.attempt[m] + 1;
      CHECK_OK(fsh_shuffle_meta_begin_attempt(meta, m, a, &err));
      if (a > md.attempt[m]) md.attempt[m] = a;
    } else if (op < 53) { /* a worker dies */
      int u = (int)rnd_below(N_URIS);
      int64_t *ids = NULL, n = -1;
      CHECK_OK(fsh_shuffle_meta_lose_location(meta, uris[u], &ids, &n, &err));
      int64_t k = 0;
      for (int64_t i = 0; i < n_maps; i++) {
        if (md.state[i] != M_COMPLETE || md.loc[i] != u) continue;
        CHECK(k < n && ids[k] == i);
        k++;
        md.state[i] = M_LOST;
      }
      CHECK_EQ_INT(n, k);
      lost_total += k;
      fsh_free(ids);
    } else if (op < 57) { /* a fetch failed */
      int32_t a = md.out_attempt[m] - (int32_t)rnd_below(2);
      bool lost = false, want = md.state[m] == M_COMPLETE && a == md.out_attempt[m];
      CHECK_OK(fsh_shuffle_meta_lose_output(meta, m, a, &lost, &err));
      CHECK_EQ_INT(lost, want);
      if (want) md.state[m] = M_LOST, lost_total++;
    } else if (op < 80) { /* an arbitrary query */
      int32_t p = (int32_t)rnd_below(np);
      uint64_t since = md.ver ? (uint64_t)rnd_below((int64_t)md.ver + 1) : 0;
      check_sources(meta, &md, p, since, &s);
      if (op < 62) check_roundtrip(meta, &s);
      check_run_sources(meta, &md, p, 1 + (int32_t)rnd_below(np - p), since, &s);
    } else { /* an incremental reducer polls */
      int32_t p = (int32_t)rnd_below(np);
      check_sources(meta, &md, p, red[p].since, &s);
      for (int64_t i = 0; i < s.n; i++) red[p].seen[s.map_ids[i]] = true;
      red[p].since = s.version;
    }
    CHECK_EQ_INT(fsh_shuffle_meta_version(meta), md.ver);
    check_partition(meta, &md, (int32_t)rnd_below(np));
    check_map(meta, &md, rnd_below(n_maps));
  }
  /* Recompute what is missing, then every reducer polls once more and must
   * have seen every map with a non-empty block for it. */
  for (int64_t m = 0; m < n_maps; m++) {
    if (md.state[m] == M_COMPLETE) continue;
    int32_t a = (md.attempt[m] > md.out_attempt[m] ? md.attempt[m] : md.out_attempt[m]) + 1;
    int uri = (int)rnd_below(N_URIS);
    fsh_map_output o;
    random_output(&o, rows, bytes, np, seed, m, a, uri);
    fsh_shuffle_meta_add_result got = 99;
    CHECK_OK(fsh_shuffle_meta_add(meta, &o, &got, &err));
    CHECK_EQ_INT(got, model_add(&md, &o, uri));
    accepted++;
  }
  CHECK_EQ_INT(fsh_shuffle_meta_n_complete(meta), n_maps);
  for (int32_t p = 0; p < np; p++) {
    check_sources(meta, &md, p, red[p].since, &s);
    CHECK(s.complete);
    for (int64_t i = 0; i < s.n; i++) red[p].seen[s.map_ids[i]] = true;
    for (int64_t m = 0; m < n_maps; m++)
      if (block_non_empty(&md, m, p)) CHECK_MSG(red[p].seen[m], "reducer %d never saw map %"
                                                PRId64, (int)p, m);
    check_partition(meta, &md, p);
  }
  for (int64_t m = 0; m < n_maps; m++) check_map(meta, &md, m);
  fsh_shuffle_meta_stats st;
  fsh_shuffle_meta_stats_get(meta, &st);
  CHECK_EQ_INT(st.accepted, accepted);
  CHECK_EQ_INT(st.stale, stale);
  CHECK_EQ_INT(st.duplicates, dup);
  CHECK_EQ_INT(st.replaced, replaced);
  CHECK_EQ_INT(st.lost, lost_total);
  CHECK(fsh_shuffle_meta_memory_bytes(meta) > 0);
  fsh_shuffle_sources_reset(&s);
  fsh_shuffle_meta_free(meta);
}

static void test_random_small(void) {
  for (uint64_t seed = 1; seed <= 6; seed++) run_random(seed, 8, 5, 1500);
}

static void test_random(void) {
  run_random(11, 40, 24, 4000);
  run_random(12, 64, 48, 3000);
  run_random(13, 1, 1, 300);
  run_random(14, 30, 1, 1000);
}

/* After only whole-location losses every total is exact; a single lost
 * output makes its cells approximate until its location goes. */
static void test_exactness(void) {
  fsh_error err;
  rng_state = 99;
  static model md;
  model_init(&md, 20, 16);
  fsh_shuffle_meta *meta = NULL;
  CHECK_OK(fsh_shuffle_meta_new(7, 20, 16, &meta, &err));
  int64_t rows[MAX_PARTS], bytes[MAX_PARTS];
  for (int64_t m = 0; m < 20; m++) {
    fsh_map_output o;
    random_output(&o, rows, bytes, 16, 7, m, 0, (int)(m % 3));
    fsh_shuffle_meta_add_result r;
    CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err));
    model_add(&md, &o, (int)(m % 3));
  }
  fsh_shuffle_partition_totals t;
  for (int32_t p = 0; p < 16; p++) {
    CHECK_OK(fsh_shuffle_meta_partition_totals(meta, p, &t, &err));
    CHECK(t.exact);
    check_partition(meta, &md, p);
  }
  bool lost;
  CHECK_OK(fsh_shuffle_meta_lose_output(meta, 4, 0, &lost, &err)); /* at uris[1] */
  CHECK(lost);
  md.state[4] = M_LOST;
  int approx = 0;
  for (int32_t p = 0; p < 16; p++) {
    CHECK_OK(fsh_shuffle_meta_partition_totals(meta, p, &t, &err));
    approx += !t.exact;
    check_partition(meta, &md, p);
  }
  CHECK(approx > 0);
  int64_t *ids, n;
  CHECK_OK(fsh_shuffle_meta_lose_location(meta, uris[1], &ids, &n, &err));
  CHECK_EQ_INT(n, 6); /* maps 1, 7, 10, 13, 16, 19 (4 was lost already) */
  for (int64_t i = 0; i < n; i++) md.state[ids[i]] = M_LOST;
  fsh_free(ids);
  for (int32_t p = 0; p < 16; p++) {
    CHECK_OK(fsh_shuffle_meta_partition_totals(meta, p, &t, &err));
    CHECK(t.exact);
    check_partition(meta, &md, p);
  }
  /* unknown location: nothing lost */
  CHECK_OK(fsh_shuffle_meta_lose_location(meta, "grpc://nowhere:1", &ids, &n, &err));
  CHECK_EQ_INT(n, 0);
  CHECK(ids == NULL);
  fsh_shuffle_meta_free(meta);
}

/* Skipped maps (a global limit's, fsh_shuffle_meta_skip): a map without
 * an output (pending or lost) can be skipped, one holding an output
 * cannot (EINVAL naming it); a skipped map is SKIPPED, not LOST, counts
 * toward `complete` and gives no source; its late output is STALE (not
 * accepted); un-skipped it is pending again and its next output is
 * accepted. */
static void test_skipped_maps(void) {
  fsh_error err;
  fsh_shuffle_meta *meta = NULL;
  CHECK_OK(fsh_shuffle_meta_new(5, 4, 1, &meta, &err));
  if (!meta) return;
  int64_t rows[1] = {7}, bytes[1] = {70};
  fsh_map_output o = {.shuffle_id = 5, .attempt = 0, .location = "grpc://a:1",
                      .n_partitions = 1, .rows = rows, .bytes = bytes};
  fsh_shuffle_meta_add_result r;
  for (int64_t m = 0; m < 2; m++) { /* maps 0 and 1 done */
    o.map_id = m;
    CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err));
    CHECK_EQ_INT(r, FSH_SHUFFLE_META_ACCEPTED);
  }
  bool lost = false;
  CHECK_OK(fsh_shuffle_meta_lose_output(meta, 1, 0, &lost, &err)); /* map 1 lost */
  CHECK(lost);
  CHECK_EQ_INT(fsh_shuffle_meta_skip(meta, 0, true, &err), EINVAL); /* holds its output */
  CHECK(strstr(err.message, "map 0") && strstr(err.message, "holds an output"));
  CHECK_EQ_INT(fsh_shuffle_meta_skip(meta, 4, true, &err), EINVAL);
  CHECK_OK(fsh_shuffle_meta_skip(meta, 1, true, &err)); /* lost -> skipped */
  CHECK_OK(fsh_shuffle_meta_skip(meta, 2, true, &err)); /* pending -> skipped */
  CHECK_OK(fsh_shuffle_meta_skip(meta, 2, true, &err)); /* again: no change */
  CHECK_EQ_INT(fsh_shuffle_meta_n_skipped(meta), 2);
  CHECK_EQ_INT(fsh_shuffle_meta_n_complete(meta), 1);
  fsh_shuffle_meta_map_info info;
  CHECK_OK(fsh_shuffle_meta_map(meta, 1, &info, &err));
  CHECK_EQ_INT(info.state, FSH_SHUFFLE_META_MAP_SKIPPED); /* not LOST */
  CHECK_OK(fsh_shuffle_meta_map(meta, 3, &info, &err));
  CHECK_EQ_INT(info.state, FSH_SHUFFLE_META_MAP_PENDING);
  fsh_shuffle_sources src = {0};
  CHECK_OK(fsh_shuffle_meta_sources(meta, 0, 0, &src, &err));
  CHECK(!src.complete); /* map 3 is pending */
  CHECK_EQ_INT(src.n, 1);
  if (src.n == 1) CHECK_EQ_INT(src.map_ids[0], 0);
  /* a skipped map's output arriving late: not accepted */
  o.map_id = 2;
  CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err));
  CHECK_EQ_INT(r, FSH_SHUFFLE_META_STALE);
  CHECK_OK(fsh_shuffle_meta_skip(meta, 3, true, &err));
  CHECK_OK(fsh_shuffle_meta_sources(meta, 0, 0, &src, &err));
  CHECK(src.complete); /* every map's output held or the map skipped */
  CHECK_EQ_INT(src.n, 1);
  /* un-skipped: pending, not complete, its next output accepted */
  CHECK_OK(fsh_shuffle_meta_skip(meta, 2, false, &err));
  CHECK_OK(fsh_shuffle_meta_skip(meta, 0, false, &err)); /* not skipped: no change */
  CHECK_OK(fsh_shuffle_meta_map(meta, 2, &info, &err));
  CHECK_EQ_INT(info.state, FSH_SHUFFLE_META_MAP_PENDING);
  CHECK_EQ_INT(fsh_shuffle_meta_n_skipped(meta), 2);
  CHECK_OK(fsh_shuffle_meta_sources(meta, 0, 0, &src, &err));
  CHECK(!src.complete);
  o.attempt = 1;
  CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err));
  CHECK_EQ_INT(r, FSH_SHUFFLE_META_ACCEPTED);
  CHECK_OK(fsh_shuffle_meta_sources(meta, 0, 0, &src, &err));
  CHECK(src.complete);
  CHECK_EQ_INT(src.n, 2);
  fsh_shuffle_meta_stats st;
  fsh_shuffle_meta_stats_get(meta, &st);
  CHECK_EQ_INT(st.skipped, 3);
  CHECK_EQ_INT(st.unskipped, 1);
  CHECK_EQ_INT(st.lost, 1);
  fsh_shuffle_sources_reset(&src);
  fsh_shuffle_meta_free(meta);
}

/* ---- argument errors ---------------------------------------------------- */

static void test_bad_arguments(void) {
  fsh_error err;
  fsh_shuffle_meta *meta = NULL;
  CHECK_EQ_INT(fsh_shuffle_meta_new(1, 0, 4, &meta, &err), EINVAL);
  CHECK(strstr(err.message, "n_maps"));
  CHECK_EQ_INT(fsh_shuffle_meta_new(1, 4, 0, &meta, &err), EINVAL);
  CHECK(strstr(err.message, "n_partitions"));
  CHECK(meta == NULL);
  CHECK_OK(fsh_shuffle_meta_new(1, 4, 3, &meta, &err));
  int64_t rows[3] = {1, 2, 3}, bytes[3] = {10, 20, 30};
  fsh_map_output o = {.shuffle_id = 1, .map_id = 2, .attempt = 0, .location = "grpc://a:1",
                      .n_partitions = 3, .rows = rows, .bytes = bytes};
  fsh_shuffle_meta_add_result r;
  fsh_map_output b = o;
  b.shuffle_id = 2;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "shuffle 2"));
  b = o;
  b.map_id = 4;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "map id 4"));
  b = o;
  b.n_partitions = 2;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "partitions"));
  b = o;
  b.location = "";
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "location"));
  b = o;
  b.attempt = -1;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "attempt"));
  int64_t neg[3] = {10, -1, 30};
  b = o;
  b.bytes = neg;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "partition 1"));
  int64_t big[3] = {INT64_MAX, 1, 0};
  b = o;
  b.bytes = big;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "overflow"));
  int64_t over[3] = {INT64_MAX / 4 + 1, 0, 0};
  b = o;
  b.bytes = over;
  CHECK_EQ_INT(fsh_shuffle_meta_add(meta, &b, &r, &err), EINVAL);
  CHECK(strstr(err.message, "per-map limit"));
  over[0] = INT64_MAX / 4; /* at the limit: accepted, and 4 of them do not overflow */
  for (int64_t k = 0; k < 4; k++) {
    fsh_map_output c = b;
    c.map_id = k;
    c.attempt = 7;
    CHECK_OK(fsh_shuffle_meta_add(meta, &c, &r, &err));
  }
  fsh_shuffle_partition_totals t0;
  CHECK_OK(fsh_shuffle_meta_partition_totals(meta, 0, &t0, &err));
  CHECK_EQ_INT(t0.bytes, INT64_MAX / 4 * 4);
  fsh_shuffle_meta_free(meta);
  meta = NULL;
  CHECK_OK(fsh_shuffle_meta_new(1, 4, 3, &meta, &err));
  CHECK_EQ_INT(fsh_shuffle_meta_version(meta), 0);
  CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err));
  CHECK_EQ_INT(r, FSH_SHUFFLE_META_ACCEPTED);
  CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err));
  CHECK_EQ_INT(r, FSH_SHUFFLE_META_DUPLICATE);
  CHECK(strcmp(fsh_shuffle_meta_add_result_name(r), "duplicate") == 0);
  fsh_shuffle_sources s = {0};
  CHECK_EQ_INT(fsh_shuffle_meta_sources(meta, 3, 0, &s, &err), EINVAL);
  CHECK(strstr(err.message, "partition 3"));
  CHECK_EQ_INT(fsh_shuffle_meta_run_sources(meta, 1, 3, 0, &s, &err), EINVAL); /* past the end */
  CHECK(strstr(err.message, "a run of 3 partitions from partition 1"));
  CHECK_EQ_INT(fsh_shuffle_meta_run_sources(meta, 0, 0, 0, &s, &err), EINVAL);
  CHECK_EQ_INT(fsh_shuffle_meta_sources(meta, 0, 2, &s, &err), EINVAL);
  CHECK(strstr(err.message, "since_version 2 is ahead"));
  CHECK_OK(fsh_shuffle_meta_sources(meta, 0, 1, &s, &err));
  CHECK_EQ_INT(s.n, 0);
  CHECK_OK(fsh_shuffle_meta_sources(meta, 0, 0, &s, &err));
  CHECK_EQ_INT(s.n, 1);
  CHECK_EQ_INT(s.map_ids[0], 2);
  CHECK(!s.complete);
  CHECK_EQ_INT(fsh_shuffle_meta_begin_attempt(meta, -1, 0, &err), EINVAL);
  CHECK_EQ_INT(fsh_shuffle_meta_begin_attempt(meta, 0, -2, &err), EINVAL);
  bool lost;
  CHECK_EQ_INT(fsh_shuffle_meta_lose_output(meta, 9, 0, &lost, &err), EINVAL);
  fsh_shuffle_partition_totals t;
  CHECK_EQ_INT(fsh_shuffle_meta_partition_totals(meta, -1, &t, &err), EINVAL);
  int64_t rr, bb;
  CHECK_EQ_INT(fsh_shuffle_meta_block(meta, 0, 5, &rr, &bb, &err), EINVAL);
  CHECK(fsh_shuffle_meta_location_uri(meta, 1) == NULL);
  CHECK(strcmp(fsh_shuffle_meta_location_uri(meta, 0), "grpc://a:1") == 0);
  fsh_shuffle_meta_free(meta);
  fsh_shuffle_meta_free(NULL);
  fsh_shuffle_sources_reset(&s);
}

/* ---- malformed ShuffleSources ------------------------------------------- */

typedef struct good_msg {
  Flightshuffle__Sched__ShuffleSources msg;
  int64_t map_ids[3];
  int32_t attempts[3];
  uint32_t location_ids[3];
  int64_t bytes[3];
  Flightshuffle__Sched__ShuffleLocation locs[2], *plocs[2];
} good_msg;

static void good_init(good_msg *g) {
  flightshuffle__sched__shuffle_sources__init(&g->msg);
  g->msg.shuffle_id = 5;
  g->msg.partition = 2;
  g->msg.n_maps = 10;
  g->msg.since_version = 3;
  g->msg.version = 9;
  int64_t ids[3] = {4, 1, 7};
  for (int i = 0; i < 3; i++) {
    g->map_ids[i] = ids[i];
    g->attempts[i] = i;
    g->location_ids[i] = i == 1 ? 6 : 2;
    g->bytes[i] = 100 * i;
  }
  g->msg.n_map_ids = g->msg.n_attempts = g->msg.n_location_ids = g->msg.n_bytes = 3;
  g->msg.map_ids = g->map_ids;
  g->msg.attempts = g->attempts;
  g->msg.location_ids = g->location_ids;
  g->msg.bytes = g->bytes;
  for (int i = 0; i < 2; i++) {
    flightshuffle__sched__shuffle_location__init(&g->locs[i]);
    g->plocs[i] = &g->locs[i];
  }
  g->locs[0].id = 6;
  g->locs[0].uri = "grpc://six:1";
  g->locs[1].id = 2;
  g->locs[1].uri = "grpc://two:1";
  g->msg.n_locations = 2;
  g->msg.locations = g->plocs;
}

/* Packs g, decodes it: expect rc and (if EINVAL) `what` in the message. */
static void expect_decode(good_msg *g, int rc, const char *what) {
  uint8_t buf[1024];
  size_t n = flightshuffle__sched__shuffle_sources__pack(&g->msg, buf);
  fsh_error err = {{0}};
  fsh_shuffle_sources d = {0};
  int got = fsh_shuffle_sources_decode(buf, (int64_t)n, &d, &err);
  CHECK_EQ_INT(got, rc);
  if (rc) {
    CHECK_MSG(strstr(err.message, what), "wanted '%s' in '%s'", what, err.message);
    CHECK(d.n == 0 && d.map_ids == NULL && d.n_locations == 0);
  }
  fsh_shuffle_sources_reset(&d);
}

static void test_decode_malformed(void) {
  good_msg g;
  good_init(&g);
  expect_decode(&g, 0, NULL);
  { /* and the good one's content */
    uint8_t buf[1024];
    size_t n = flightshuffle__sched__shuffle_sources__pack(&g.msg, buf);
    fsh_error err;
    fsh_shuffle_sources d = {0};
    CHECK_OK(fsh_shuffle_sources_decode(buf, (int64_t)n, &d, &err));
    CHECK_EQ_INT(d.n, 3);
    CHECK_EQ_INT(d.map_ids[2], 7);
    CHECK(strcmp(fsh_shuffle_sources_uri(&d, 6), "grpc://six:1") == 0);
    CHECK(strcmp(fsh_shuffle_sources_uri(&d, 2), "grpc://two:1") == 0);
    CHECK(fsh_shuffle_sources_uri(&d, 3) == NULL);
    /* every truncation: decodes or EINVAL, never a crash */
    for (size_t k = 0; k < n; k++) {
      int rc = fsh_shuffle_sources_decode(buf, (int64_t)k, &d, &err);
      CHECK(rc == 0 || rc == EINVAL);
    }
    fsh_shuffle_sources_reset(&d);
  }
  good_init(&g);
  g.msg.partition = -1;
  expect_decode(&g, EINVAL, "partition -1");
  good_init(&g);
  g.msg.n_maps = 0;
  expect_decode(&g, EINVAL, "n_maps 0");
  good_init(&g);
  g.msg.version = 2;
  expect_decode(&g, EINVAL, "since_version");
  good_init(&g);
  g.msg.n_attempts = 2;
  expect_decode(&g, EINVAL, "differ in length");
  good_init(&g);
  g.msg.n_bytes = 0;
  expect_decode(&g, EINVAL, "differ in length");
  good_init(&g);
  g.map_ids[1] = 10;
  expect_decode(&g, EINVAL, "map id 10 out of range");
  good_init(&g);
  g.map_ids[1] = -3;
  expect_decode(&g, EINVAL, "map id -3");
  good_init(&g);
  g.map_ids[2] = 4;
  expect_decode(&g, EINVAL, "map 4 listed twice");
  good_init(&g);
  g.attempts[0] = -1;
  expect_decode(&g, EINVAL, "attempt -1");
  good_init(&g);
  g.bytes[2] = -5;
  expect_decode(&g, EINVAL, "bytes -5");
  good_init(&g);
  g.location_ids[0] = 3;
  expect_decode(&g, EINVAL, "location 3 has no uri");
  good_init(&g);
  g.locs[1].id = 6;
  expect_decode(&g, EINVAL, "location 6 listed twice");
  good_init(&g);
  g.locs[0].uri = "";
  expect_decode(&g, EINVAL, "location 6 has no uri");
  good_init(&g);
  g.msg.n_maps = 2;
  expect_decode(&g, EINVAL, "3 entries for 2 maps");
  fsh_error err;
  fsh_shuffle_sources d = {0};
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
  CHECK_EQ_INT(fsh_shuffle_sources_decode(junk, sizeof junk, &d, &err), EINVAL);
  CHECK(strstr(err.message, "not a valid message"));
  CHECK_EQ_INT(fsh_shuffle_sources_decode(NULL, 4, &d, &err), EINVAL);
  /* an empty message is a valid (if odd) answer only with n_maps set */
  CHECK_EQ_INT(fsh_shuffle_sources_decode(junk, 0, &d, &err), EINVAL);
  CHECK(strstr(err.message, "n_maps"));
  fsh_shuffle_sources_reset(&d);
}

/* ---- allocation failures ------------------------------------------------ */

typedef struct snapshot {
  uint64_t version;
  int64_t complete, mem;
  fsh_shuffle_meta_stats st;
} snapshot;

static snapshot snap(const fsh_shuffle_meta *m) {
  snapshot s = {fsh_shuffle_meta_version(m), fsh_shuffle_meta_n_complete(m),
                fsh_shuffle_meta_memory_bytes(m), {0}};
  fsh_shuffle_meta_stats_get(m, &s.st);
  return s;
}

/* One scenario, each step checked for "ENOMEM leaves things unchanged".
 * Returns true when it ran to the end without an injected failure. */
static bool alloc_scenario(int64_t fail_at, bool persistent) {
  fsh_error err;
  fsh_shuffle_meta *meta = NULL;
  fsh_alloc_fail_after(fail_at, persistent);
  int rc = fsh_shuffle_meta_new(3, 90, 600, &meta, &err);
  if (rc) {
    fsh_alloc_fail_after(0, false);
    CHECK_EQ_INT(rc, ENOMEM);
    CHECK(meta == NULL);
    return false;
  }
  bool failed = false;
  static int64_t rows[600], bytes[600];
  fsh_shuffle_sources s = {0}, d = {0};
  rng_state = 5;
  for (int64_t m = 0; m < 90 && !failed; m++) {
    char uri[32];
    snprintf(uri, sizeof uri, "grpc://w%d:1", (int)(m % 13));
    for (int p = 0; p < 600; p++) {
      bytes[p] = (p + m) % 3 ? 0 : 1 + rnd_below(100) * (p % 50 ? 1 : 1000);
      rows[p] = bytes[p] / 2;
    }
    fsh_map_output o = {.shuffle_id = 3, .map_id = m, .attempt = 0, .location = uri,
                        .n_partitions = 600, .rows = rows, .bytes = bytes};
    snapshot before = snap(meta);
    fsh_shuffle_meta_add_result r;
    rc = fsh_shuffle_meta_add(meta, &o, &r, &err);
    if (rc) {
      failed = true;
      CHECK_EQ_INT(rc, ENOMEM);
      snapshot after = snap(meta);
      CHECK_EQ_INT(after.version, before.version);
      CHECK_EQ_INT(after.complete, before.complete);
      CHECK_EQ_INT(after.st.accepted, before.st.accepted);
      fsh_alloc_fail_after(0, false);
      CHECK_OK(fsh_shuffle_meta_add(meta, &o, &r, &err)); /* a retry works */
      CHECK_EQ_INT(r, FSH_SHUFFLE_META_ACCEPTED);
    }
  }
  if (!failed) {
    rc = fsh_shuffle_meta_sources(meta, 3, 0, &s, &err);
    if (rc) {
      failed = true;
      CHECK_EQ_INT(rc, ENOMEM);
    }
  }
  uint8_t *data = NULL;
  int64_t size = 0;
  if (!failed) {
    rc = fsh_shuffle_meta_sources_encode(meta, &s, &data, &size, &err);
    if (rc) {
      failed = true;
      CHECK_EQ_INT(rc, ENOMEM);
      CHECK(data == NULL);
    }
  }
  if (!failed) {
    rc = fsh_shuffle_sources_decode(data, size, &d, &err);
    if (rc) {
      failed = true;
      CHECK_EQ_INT(rc, ENOMEM);
      CHECK(d.n == 0 && d.map_ids == NULL);
    }
  }
  if (!failed) {
    snapshot before = snap(meta);
    int64_t *ids = NULL, n = 0;
    rc = fsh_shuffle_meta_lose_location(meta, "grpc://w4:1", &ids, &n, &err);
    if (rc) {
      failed = true;
      CHECK_EQ_INT(rc, ENOMEM);
      CHECK_EQ_INT(snap(meta).complete, before.complete);
      CHECK(ids == NULL);
    } else {
      CHECK_EQ_INT(n, 7); /* maps 4, 17, 30, 43, 56, 69, 82 */
    }
    fsh_free(ids);
  }
  fsh_alloc_fail_after(0, false);
  fsh_free(data);
  fsh_shuffle_sources_reset(&s);
  fsh_shuffle_sources_reset(&d);
  fsh_shuffle_meta_free(meta);
  return !failed;
}

/* The Nth allocation fails, once (transient) or from then on (persistent),
 * for N = 1, 2, ... until the scenario runs through. */
static void test_alloc_failure(void) {
  for (int persistent = 0; persistent < 2; persistent++) {
    int64_t k = 1;
    while (!alloc_scenario(k, persistent) && k < 100000) k++;
    CHECK(k > 10 && k < 100000);
  }
}

FSH_TEST_MAIN(TEST(test_random_small), TEST(test_random), TEST(test_exactness),
              TEST(test_skipped_maps),
              TEST(test_bad_arguments), TEST(test_decode_malformed), TEST(test_alloc_failure))
