/* shuffle_meta.c -- the driver's compact record of one shuffle's map
 * outputs (fsh_shuffle_meta of sched.h): per-map state in one array, one
 * bit per block (empty or not) in a partition-major bitmap, per map its
 * largest blocks exactly plus an average for the rest, per-(location,
 * partition) and per-partition totals aggregated as outputs arrive, and a
 * version-ordered log of accepted outputs for incremental source queries.
 * Also the ShuffleSources protobuf encoding of a query answer. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include <flightshuffle/shuffle.h>

#include "sched/sched_internal.h"

enum { MAP_PENDING = 0, MAP_COMPLETE = 1, MAP_LOST = 2, MAP_SKIPPED = 3 };

/* A block kept exactly (one of the largest of its map). */
typedef struct huge_block {
  int64_t bytes, rows;
  int32_t partition;
} huge_block;

typedef struct meta_map {
  int64_t rows, bytes;         /* exact totals of the last accepted output */
  int64_t avg_bytes, avg_rows; /* estimate of a non-huge non-empty block */
  uint64_t version;            /* of the last accepted output; 0 = none */
  huge_block *huge;            /* [n_huge] by increasing partition; owned */
  uint64_t huge_filter[4];     /* bit huge_slot(p) set for each huge p */
  int32_t attempt;             /* current attempt; -1 = none */
  int32_t output_attempt;      /* of the last accepted output; -1 = none */
  int32_t non_empty;           /* non-empty blocks of the last output */
  int32_t n_huge;
  uint32_t loc;
  uint8_t state;
} meta_map;

/* One interned location and its column of per-partition totals. */
typedef struct meta_loc {
  char *uri;
  int64_t *bytes;  /* [n_partitions] */
  int64_t *rows;   /* [n_partitions] */
  uint64_t *approx;/* [words(n_partitions)] cells holding estimates */
} meta_loc;

struct fsh_shuffle_meta {
  uint64_t shuffle_id;
  int64_t n_maps;
  int32_t n_partitions;
  int32_t max_huge;
  uint64_t version;
  int64_t n_complete;
  int64_t n_skipped; /* maps a global limit made unnecessary (MAP_SKIPPED) */
  fsh_shuffle_meta_stats stats;
  int64_t mem;

  meta_map *maps;          /* [n_maps] */
  uint64_t *bits;          /* [map_words][n_partitions]: bit map % 64 of word
                              (map / 64, p) = block (map, p) is non-empty;
                              one map's bits are one contiguous run of
                              words, one partition's bits map_words words
                              n_partitions apart */
  int64_t map_words;
  int64_t *part_rows;      /* [n_partitions] */
  int64_t *part_bytes;     /* [n_partitions] */
  int32_t *part_non_empty; /* [n_partitions] */
  int32_t *part_approx;    /* [n_partitions] approximate cells */

  meta_loc *locs;
  uint32_t n_locs, cap_locs;
  huge_block *scratch;     /* [max_huge]: the heap of fsh_shuffle_meta_add */
  uint32_t *loc_hash;      /* open addressing, id + 1; 0 = free */
  uint32_t hash_cap;       /* power of two */

  uint64_t *log_version;   /* [n_log] increasing */
  int32_t *log_map;        /* [n_log] */
  int64_t n_log, cap_log;
};

/* ---- allocation with accounting ---------------------------------------- */

static void *meta_alloc(fsh_shuffle_meta *m, size_t size, bool zero) {
  void *p = zero ? fsh_calloc(1, size ? size : 1) : fsh_malloc(size ? size : 1);
  if (p) m->mem += (int64_t)size;
  return p;
}

static void meta_release(fsh_shuffle_meta *m, void *p, size_t size) {
  if (!p) return;
  m->mem -= (int64_t)size;
  fsh_free(p);
}

/* Grows *p (of old_size bytes) to new_size; false (and *p untouched) when
 * out of memory. */
static bool meta_grow(fsh_shuffle_meta *m, void **p, size_t old_size, size_t new_size) {
  void *q = fsh_realloc(*p, new_size);
  if (!q) return false;
  *p = q;
  m->mem += (int64_t)new_size - (int64_t)old_size;
  return true;
}

static inline int64_t words_for(int64_t bits) { return (bits + 63) / 64; }

static inline bool bit_get(const fsh_shuffle_meta *m, int32_t p, int64_t map) {
  return (m->bits[map / 64 * m->n_partitions + p] >> (map % 64)) & 1;
}

/* ---- creation ---------------------------------------------------------- */

const char *fsh_shuffle_meta_add_result_name(fsh_shuffle_meta_add_result r) {
  switch (r) {
  case FSH_SHUFFLE_META_ACCEPTED: return "accepted";
  case FSH_SHUFFLE_META_STALE: return "stale";
  case FSH_SHUFFLE_META_DUPLICATE: return "duplicate";
  }
  return "unknown";
}

int fsh_shuffle_meta_new(uint64_t shuffle_id, int64_t n_maps, int32_t n_partitions,
                         fsh_shuffle_meta **out, fsh_error *err) {
  *out = NULL;
  if (n_maps < 1 || n_maps > INT32_MAX)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " metadata: n_maps %" PRId64
                         " out of range [1, %d]", shuffle_id, n_maps, INT32_MAX);
  if (n_partitions < 1)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " metadata: n_partitions %d < 1",
                         shuffle_id, (int)n_partitions);
  int64_t map_words = words_for(n_maps);
  if ((uint64_t)map_words * (uint64_t)n_partitions > (uint64_t)(SIZE_MAX / 16))
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " metadata: %" PRId64 " x %d blocks"
                         " is too large", shuffle_id, n_maps, (int)n_partitions);
  fsh_shuffle_meta *m = fsh_calloc(1, sizeof *m);
  if (!m) return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " metadata: out of memory",
                               shuffle_id);
  m->mem = sizeof *m;
  m->shuffle_id = shuffle_id;
  m->n_maps = n_maps;
  m->n_partitions = n_partitions;
  m->max_huge = n_partitions / 256 > 8 ? n_partitions / 256 : 8;
  if (m->max_huge > n_partitions) m->max_huge = n_partitions;
  m->map_words = map_words;
  size_t np = (size_t)n_partitions;
  m->maps = meta_alloc(m, (size_t)n_maps * sizeof *m->maps, true);
  m->bits = meta_alloc(m, (size_t)map_words * np * sizeof(uint64_t), true);
  m->part_rows = meta_alloc(m, np * sizeof(int64_t), true);
  m->part_bytes = meta_alloc(m, np * sizeof(int64_t), true);
  m->part_non_empty = meta_alloc(m, np * sizeof(int32_t), true);
  m->part_approx = meta_alloc(m, np * sizeof(int32_t), true);
  m->scratch = meta_alloc(m, (size_t)m->max_huge * sizeof(huge_block), false);
  if (!m->scratch || !m->maps || !m->bits || !m->part_rows || !m->part_bytes ||
      !m->part_non_empty ||
      !m->part_approx) {
    fsh_shuffle_meta_free(m);
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " metadata: out of memory for %"
                         PRId64 " maps x %d partitions", shuffle_id, n_maps, (int)n_partitions);
  }
  for (int64_t i = 0; i < n_maps; i++) {
    m->maps[i].attempt = -1;
    m->maps[i].output_attempt = -1;
  }
  *out = m;
  return 0;
}

void fsh_shuffle_meta_free(fsh_shuffle_meta *m) {
  if (!m) return;
  if (m->maps)
    for (int64_t i = 0; i < m->n_maps; i++) fsh_free(m->maps[i].huge);
  for (uint32_t i = 0; i < m->n_locs; i++) {
    fsh_free(m->locs[i].uri);
    fsh_free(m->locs[i].bytes);
    fsh_free(m->locs[i].rows);
    fsh_free(m->locs[i].approx);
  }
  fsh_free(m->locs);
  fsh_free(m->loc_hash);
  fsh_free(m->log_version);
  fsh_free(m->log_map);
  fsh_free(m->maps);
  fsh_free(m->bits);
  fsh_free(m->part_rows);
  fsh_free(m->part_bytes);
  fsh_free(m->part_non_empty);
  fsh_free(m->part_approx);
  fsh_free(m->scratch);
  fsh_free(m);
}

uint64_t fsh_shuffle_meta_shuffle_id(const fsh_shuffle_meta *m) { return m->shuffle_id; }
int64_t fsh_shuffle_meta_n_maps(const fsh_shuffle_meta *m) { return m->n_maps; }
int32_t fsh_shuffle_meta_n_partitions(const fsh_shuffle_meta *m) { return m->n_partitions; }
uint64_t fsh_shuffle_meta_version(const fsh_shuffle_meta *m) { return m->version; }
int64_t fsh_shuffle_meta_n_complete(const fsh_shuffle_meta *m) { return m->n_complete; }
int64_t fsh_shuffle_meta_n_skipped(const fsh_shuffle_meta *m) { return m->n_skipped; }
int64_t fsh_shuffle_meta_memory_bytes(const fsh_shuffle_meta *m) { return m->mem; }
void fsh_shuffle_meta_stats_get(const fsh_shuffle_meta *m, fsh_shuffle_meta_stats *out) {
  *out = m->stats;
}

static int bad_map(const fsh_shuffle_meta *m, int64_t map_id, fsh_error *err) {
  return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": map id %" PRId64
                       " out of range [0, %" PRId64 ")", m->shuffle_id, map_id, m->n_maps);
}

static int bad_partition(const fsh_shuffle_meta *m, int32_t p, fsh_error *err) {
  return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": partition %d out of range [0, %d)",
                       m->shuffle_id, (int)p, (int)m->n_partitions);
}

/* ---- locations --------------------------------------------------------- */

static uint64_t uri_hash(const char *uri) { return XXH3_64bits(uri, strlen(uri)); }

static bool loc_find(const fsh_shuffle_meta *m, const char *uri, uint32_t *id) {
  if (!m->hash_cap) return false;
  uint32_t mask = m->hash_cap - 1;
  for (uint32_t i = (uint32_t)uri_hash(uri) & mask;; i = (i + 1) & mask) {
    uint32_t e = m->loc_hash[i];
    if (!e) return false;
    if (strcmp(m->locs[e - 1].uri, uri) == 0) {
      *id = e - 1;
      return true;
    }
  }
}

static void hash_insert(uint32_t *table, uint32_t cap, const char *uri, uint32_t id) {
  uint32_t mask = cap - 1;
  uint32_t i = (uint32_t)uri_hash(uri) & mask;
  while (table[i]) i = (i + 1) & mask;
  table[i] = id + 1;
}

/* The id of uri, interning it (with a zeroed column) if new. ENOMEM leaves
 * the table as it was. */
static int loc_intern(fsh_shuffle_meta *m, const char *uri, uint32_t *id, fsh_error *err) {
  if (loc_find(m, uri, id)) return 0;
  if (m->n_locs == UINT32_MAX / 4)
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 ": too many locations", m->shuffle_id);
  if (m->n_locs == m->cap_locs) {
    uint32_t cap = m->cap_locs ? m->cap_locs * 2 : 8;
    void *p = m->locs;
    if (!meta_grow(m, &p, m->cap_locs * sizeof(meta_loc), cap * sizeof(meta_loc)))
      goto oom;
    m->locs = p;
    m->cap_locs = cap;
  }
  if ((m->n_locs + 1) * 2 > m->hash_cap) {
    uint32_t cap = m->hash_cap ? m->hash_cap * 2 : 16;
    uint32_t *t = meta_alloc(m, cap * sizeof *t, true);
    if (!t) goto oom;
    for (uint32_t i = 0; i < m->n_locs; i++) hash_insert(t, cap, m->locs[i].uri, i);
    meta_release(m, m->loc_hash, m->hash_cap * sizeof *t);
    m->loc_hash = t;
    m->hash_cap = cap;
  }
  size_t np = (size_t)m->n_partitions, ulen = strlen(uri) + 1;
  meta_loc l = {0};
  l.uri = meta_alloc(m, ulen, false);
  l.bytes = meta_alloc(m, np * sizeof(int64_t), true);
  l.rows = meta_alloc(m, np * sizeof(int64_t), true);
  l.approx = meta_alloc(m, (size_t)words_for(m->n_partitions) * sizeof(uint64_t), true);
  if (!l.uri || !l.bytes || !l.rows || !l.approx) {
    meta_release(m, l.uri, ulen);
    meta_release(m, l.bytes, np * sizeof(int64_t));
    meta_release(m, l.rows, np * sizeof(int64_t));
    meta_release(m, l.approx, (size_t)words_for(m->n_partitions) * sizeof(uint64_t));
    goto oom;
  }
  memcpy(l.uri, uri, ulen);
  *id = m->n_locs;
  m->locs[m->n_locs++] = l;
  hash_insert(m->loc_hash, m->hash_cap, uri, *id);
  return 0;
oom:
  return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 ": out of memory interning location %s",
                       m->shuffle_id, uri);
}

uint32_t fsh_shuffle_meta_n_locations(const fsh_shuffle_meta *m) { return m->n_locs; }

const char *fsh_shuffle_meta_location_uri(const fsh_shuffle_meta *m, uint32_t id) {
  return id < m->n_locs ? m->locs[id].uri : NULL;
}

bool fsh_shuffle_meta_location_id(const fsh_shuffle_meta *m, const char *uri, uint32_t *id) {
  return uri && loc_find(m, uri, id);
}

/* ---- per-block estimates ----------------------------------------------- */

/* A 256-bit filter slot of partition p (spares most lookups of huge blocks
 * for blocks that are not). */
static inline uint32_t huge_slot(int32_t p) {
  return (uint32_t)(((uint64_t)(uint32_t)p * 0x9E3779B97F4A7C15ull) >> 56);
}

/* The held output's block p of map mm (bit known set): exact for a huge
 * block (*exact = true), else the map's averages. */
static void block_estimate(const meta_map *mm, int32_t p, int64_t *rows, int64_t *bytes,
                           bool *exact) {
  uint32_t slot = huge_slot(p);
  int32_t lo = 0, hi = (mm->huge_filter[slot / 64] >> (slot % 64)) & 1 ? mm->n_huge : 0;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (mm->huge[mid].partition < p) lo = mid + 1;
    else hi = mid;
  }
  if (lo < mm->n_huge && mm->huge[lo].partition == p) {
    *rows = mm->huge[lo].rows;
    *bytes = mm->huge[lo].bytes;
    *exact = true;
    return;
  }
  *rows = mm->avg_rows;
  *bytes = mm->avg_bytes;
  /* A single small block's average is its exact size. */
  *exact = mm->non_empty - mm->n_huge == 1;
}

int fsh_shuffle_meta_block(const fsh_shuffle_meta *m, int64_t map_id, int32_t partition,
                           int64_t *rows, int64_t *bytes, fsh_error *err) {
  if (map_id < 0 || map_id >= m->n_maps) return bad_map(m, map_id, err);
  if (partition < 0 || partition >= m->n_partitions) return bad_partition(m, partition, err);
  *rows = *bytes = 0;
  const meta_map *mm = &m->maps[map_id];
  if (mm->state != MAP_COMPLETE || !bit_get(m, partition, map_id)) return 0;
  bool exact;
  block_estimate(mm, partition, rows, bytes, &exact);
  return 0;
}

static int cmp_huge_partition(const void *a, const void *b) {
  int32_t x = ((const huge_block *)a)->partition, y = ((const huge_block *)b)->partition;
  return x < y ? -1 : x > y;
}

/* Min-heap on bytes (ties: the larger partition is "smaller", so that the
 * lowest partitions win ties deterministically). */
static bool huge_less(const huge_block *a, const huge_block *b) {
  return a->bytes < b->bytes || (a->bytes == b->bytes && a->partition > b->partition);
}

static void heap_sift_down(huge_block *h, int32_t n, int32_t i) {
  for (;;) {
    int32_t l = 2 * i + 1, r = l + 1, s = i;
    if (l < n && huge_less(&h[l], &h[s])) s = l;
    if (r < n && huge_less(&h[r], &h[s])) s = r;
    if (s == i) return;
    huge_block t = h[i];
    h[i] = h[s];
    h[s] = t;
    i = s;
  }
}

static void heap_sift_up(huge_block *h, int32_t i) {
  while (i > 0) {
    int32_t parent = (i - 1) / 2;
    if (!huge_less(&h[i], &h[parent])) return;
    huge_block t = h[i];
    h[i] = h[parent];
    h[parent] = t;
    i = parent;
  }
}

/* ---- the version log --------------------------------------------------- */

static bool log_entry_live(const fsh_shuffle_meta *m, int64_t i) {
  const meta_map *mm = &m->maps[m->log_map[i]];
  return mm->state == MAP_COMPLETE && mm->version == m->log_version[i];
}

/* Room for one more log entry: drops dead entries first (no allocation),
 * grows only when at least half are live. */
static bool log_reserve(fsh_shuffle_meta *m) {
  if (m->n_log < m->cap_log) return true;
  int64_t live = 0;
  for (int64_t i = 0; i < m->n_log; i++) live += log_entry_live(m, i);
  if (live < m->cap_log / 2) {
    int64_t j = 0;
    for (int64_t i = 0; i < m->n_log; i++)
      if (log_entry_live(m, i)) {
        m->log_version[j] = m->log_version[i];
        m->log_map[j++] = m->log_map[i];
      }
    m->n_log = j;
    return true;
  }
  int64_t cap = m->cap_log ? m->cap_log * 2 : 64;
  uint64_t *v = meta_alloc(m, (size_t)cap * sizeof *v, false);
  int32_t *mp = meta_alloc(m, (size_t)cap * sizeof *mp, false);
  if (!v || !mp) {
    meta_release(m, v, (size_t)cap * sizeof *v);
    meta_release(m, mp, (size_t)cap * sizeof *mp);
    return false;
  }
  if (m->n_log) {
    memcpy(v, m->log_version, (size_t)m->n_log * sizeof *v);
    memcpy(mp, m->log_map, (size_t)m->n_log * sizeof *mp);
  }
  meta_release(m, m->log_version, (size_t)m->cap_log * sizeof *v);
  meta_release(m, m->log_map, (size_t)m->cap_log * sizeof *mp);
  m->log_version = v;
  m->log_map = mp;
  m->cap_log = cap;
  return true;
}

/* ---- removing an output ------------------------------------------------ */

/* Clears map's bits (and the per-partition counts of non-empty blocks). If
 * subtract, also subtracts its per-block estimates from its location's
 * column and the partition totals (never below 0), marking the cells that
 * got an estimate approximate. Frees its huge blocks. */
static void remove_output(fsh_shuffle_meta *m, int64_t map, bool subtract) {
  meta_map *mm = &m->maps[map];
  meta_loc *l = &m->locs[mm->loc];
  uint64_t mask = (uint64_t)1 << (map % 64);
  uint64_t *word = m->bits + map / 64 * m->n_partitions;
  for (int32_t p = 0; p < m->n_partitions; p++, word++) {
    if (!(*word & mask)) continue;
    *word &= ~mask;
    m->part_non_empty[p]--;
    if (!subtract) continue;
    int64_t rows, bytes;
    bool exact;
    block_estimate(mm, p, &rows, &bytes, &exact);
    if (rows > l->rows[p]) rows = l->rows[p], exact = false;
    if (bytes > l->bytes[p]) bytes = l->bytes[p], exact = false;
    l->rows[p] -= rows;
    l->bytes[p] -= bytes;
    m->part_rows[p] -= rows;
    m->part_bytes[p] -= bytes;
    uint64_t *a = &l->approx[p / 64], b = (uint64_t)1 << (p % 64);
    if (!exact && !(*a & b)) {
      *a |= b;
      m->part_approx[p]++;
    }
  }
  meta_release(m, mm->huge, (size_t)mm->n_huge * sizeof(huge_block));
  mm->huge = NULL;
  mm->n_huge = 0;
  memset(mm->huge_filter, 0, sizeof mm->huge_filter);
  m->n_complete--;
}

/* ---- adding an output -------------------------------------------------- */

int fsh_shuffle_meta_begin_attempt(fsh_shuffle_meta *m, int64_t map_id, int32_t attempt,
                                   fsh_error *err) {
  if (map_id < 0 || map_id >= m->n_maps) return bad_map(m, map_id, err);
  if (attempt < 0)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 ": attempt %d < 0",
                         m->shuffle_id, map_id, (int)attempt);
  if (attempt > m->maps[map_id].attempt) m->maps[map_id].attempt = attempt;
  return 0;
}

static int validate_output(const fsh_shuffle_meta *m, const fsh_map_output *o, fsh_error *err) {
  if (!o) return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": no map output", m->shuffle_id);
  if (o->shuffle_id != m->shuffle_id)
    return fsh_error_set(err, EINVAL, "map output of shuffle %" PRIu64 " given to shuffle %"
                         PRIu64 " (map %" PRId64 ")", o->shuffle_id, m->shuffle_id, o->map_id);
  if (o->map_id < 0 || o->map_id >= m->n_maps) return bad_map(m, o->map_id, err);
  const char *what = NULL;
  if (o->attempt < 0) what = "attempt is negative";
  else if (!o->location || !o->location[0]) what = "no location";
  else if (!o->rows || !o->bytes) what = "no per-partition rows/bytes";
  if (what)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 " attempt %d: %s",
                         m->shuffle_id, o->map_id, (int)o->attempt, what);
  if (o->n_partitions != m->n_partitions)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 " attempt %d: %d"
                         " partitions, the shuffle has %d", m->shuffle_id, o->map_id,
                         (int)o->attempt, (int)o->n_partitions, (int)m->n_partitions);
  int64_t rsum = 0, bsum = 0;
  for (int32_t p = 0; p < o->n_partitions; p++) {
    if (o->rows[p] < 0 || o->bytes[p] < 0)
      return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 " attempt %d:"
                           " partition %d has negative rows (%" PRId64 ") or bytes (%" PRId64
                           ")", m->shuffle_id, o->map_id, (int)o->attempt, (int)p, o->rows[p],
                           o->bytes[p]);
    if (__builtin_add_overflow(rsum, o->rows[p], &rsum) ||
        __builtin_add_overflow(bsum, o->bytes[p], &bsum))
      return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 " attempt %d:"
                           " rows or bytes overflow 64 bits at partition %d", m->shuffle_id,
                           o->map_id, (int)o->attempt, (int)p);
  }
  /* so that no sum over the held outputs can overflow */
  int64_t limit = INT64_MAX / m->n_maps;
  if (rsum > limit || bsum > limit)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 " attempt %d: %"
                         PRId64 " rows / %" PRId64 " bytes exceed the per-map limit %" PRId64
                         " (INT64_MAX / n_maps)", m->shuffle_id, o->map_id, (int)o->attempt,
                         rsum, bsum, limit);
  return 0;
}

int fsh_shuffle_meta_add(fsh_shuffle_meta *m, const fsh_map_output *o,
                         fsh_shuffle_meta_add_result *result, fsh_error *err) {
  FSH_RETURN_NOT_OK(validate_output(m, o, err));
  meta_map *mm = &m->maps[o->map_id];
  if (o->attempt < mm->attempt || mm->state == MAP_SKIPPED) { /* a skipped map's: unwanted */
    *result = FSH_SHUFFLE_META_STALE;
    m->stats.stale++;
    return 0;
  }
  if (o->attempt <= mm->output_attempt) {
    *result = o->attempt == mm->output_attempt ? FSH_SHUFFLE_META_DUPLICATE
                                               : FSH_SHUFFLE_META_STALE;
    if (*result == FSH_SHUFFLE_META_DUPLICATE) m->stats.duplicates++;
    else m->stats.stale++;
    return 0;
  }
  int32_t np = m->n_partitions;
  /* Totals and the largest blocks over twice the average (a bounded heap). */
  int64_t rows = 0, bytes = 0;
  int32_t non_empty = 0;
  for (int32_t p = 0; p < np; p++) {
    rows += o->rows[p];
    bytes += o->bytes[p];
    non_empty += o->rows[p] > 0 || o->bytes[p] > 0;
  }
  huge_block *heap = m->scratch;
  int32_t n_huge = 0;
  if (non_empty > 1) {
    int64_t threshold = bytes / non_empty * 2;
    for (int32_t p = 0; p < np; p++) {
      if (o->bytes[p] <= threshold) continue;
      huge_block h = {o->bytes[p], o->rows[p], p};
      if (n_huge < m->max_huge) {
        heap[n_huge] = h;
        heap_sift_up(heap, n_huge++);
      } else if (huge_less(&heap[0], &h)) {
        heap[0] = h;
        heap_sift_down(heap, n_huge, 0);
      }
    }
  }
  size_t huge_size = (size_t)n_huge * sizeof(huge_block);
  huge_block *huge = NULL;
  if (n_huge && !(huge = meta_alloc(m, huge_size, false)))
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " map %" PRId64 ": out of memory",
                         m->shuffle_id, o->map_id);
  if (!log_reserve(m)) {
    meta_release(m, huge, huge_size);
    return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " map %" PRId64 ": out of memory",
                         m->shuffle_id, o->map_id);
  }
  uint32_t loc = 0;
  int rc = loc_intern(m, o->location, &loc, err);
  if (rc) {
    meta_release(m, huge, huge_size);
    return fsh_error_prefix(err, rc, "map %" PRId64 ": ", o->map_id);
  }
  /* Nothing fails from here on. */
  if (mm->state == MAP_COMPLETE) {
    remove_output(m, o->map_id, true);
    m->stats.replaced++;
  }
  if (n_huge) {
    memcpy(huge, heap, huge_size);
    qsort(huge, (size_t)n_huge, sizeof *huge, cmp_huge_partition);
  }
  int64_t hrows = 0, hbytes = 0;
  memset(mm->huge_filter, 0, sizeof mm->huge_filter);
  for (int32_t i = 0; i < n_huge; i++) {
    hrows += huge[i].rows, hbytes += huge[i].bytes;
    uint32_t slot = huge_slot(huge[i].partition);
    mm->huge_filter[slot / 64] |= (uint64_t)1 << (slot % 64);
  }
  int32_t small = non_empty - n_huge;
  mm->huge = huge;
  mm->n_huge = n_huge;
  mm->avg_rows = small ? (rows - hrows) / small : 0;
  mm->avg_bytes = small ? (bytes - hbytes) / small : 0;
  mm->rows = rows;
  mm->bytes = bytes;
  mm->non_empty = non_empty;
  mm->loc = loc;
  mm->attempt = o->attempt;
  mm->output_attempt = o->attempt;
  mm->state = MAP_COMPLETE;
  mm->version = ++m->version;
  m->n_complete++;
  m->stats.accepted++;
  meta_loc *l = &m->locs[loc];
  uint64_t mask = (uint64_t)1 << (o->map_id % 64);
  uint64_t *word = m->bits + o->map_id / 64 * np;
  for (int32_t p = 0; p < np; p++, word++) {
    int64_t r = o->rows[p], b = o->bytes[p];
    if (!r && !b) continue;
    *word |= mask;
    m->part_non_empty[p]++;
    l->rows[p] += r;
    l->bytes[p] += b;
    m->part_rows[p] += r;
    m->part_bytes[p] += b;
  }
  m->log_version[m->n_log] = mm->version;
  m->log_map[m->n_log++] = (int32_t)o->map_id;
  *result = FSH_SHUFFLE_META_ACCEPTED;
  return 0;
}

/* ---- queries ----------------------------------------------------------- */

int fsh_shuffle_meta_map(const fsh_shuffle_meta *m, int64_t map_id,
                         fsh_shuffle_meta_map_info *out, fsh_error *err) {
  if (map_id < 0 || map_id >= m->n_maps) return bad_map(m, map_id, err);
  const meta_map *mm = &m->maps[map_id];
  out->state = (fsh_shuffle_meta_map_state)mm->state;
  out->attempt = mm->attempt;
  out->output_attempt = mm->output_attempt;
  out->location_id = mm->loc;
  out->version = mm->version;
  out->rows = mm->rows;
  out->bytes = mm->bytes;
  out->non_empty = mm->non_empty;
  return 0;
}

int fsh_shuffle_meta_partition_totals(const fsh_shuffle_meta *m, int32_t p,
                                      fsh_shuffle_partition_totals *out, fsh_error *err) {
  if (p < 0 || p >= m->n_partitions) return bad_partition(m, p, err);
  memset(out, 0, sizeof *out);
  out->rows = m->part_rows[p];
  out->bytes = m->part_bytes[p];
  out->non_empty_maps = m->part_non_empty[p];
  out->exact = m->part_approx[p] == 0;
  for (uint32_t i = 0; i < m->n_locs; i++)
    if (m->locs[i].bytes[p] > out->best_location_bytes) {
      out->best_location_bytes = m->locs[i].bytes[p];
      out->best_location = i;
    }
  return 0;
}

int fsh_shuffle_meta_location_bytes(const fsh_shuffle_meta *m, int32_t p, uint32_t location_id,
                                    int64_t *rows, int64_t *bytes, fsh_error *err) {
  if (p < 0 || p >= m->n_partitions) return bad_partition(m, p, err);
  *rows = location_id < m->n_locs ? m->locs[location_id].rows[p] : 0;
  *bytes = location_id < m->n_locs ? m->locs[location_id].bytes[p] : 0;
  return 0;
}

void fsh_shuffle_sources_reset(fsh_shuffle_sources *s) {
  if (!s) return;
  fsh_free(s->map_ids);
  fsh_free(s->attempts);
  fsh_free(s->location_ids);
  fsh_free(s->bytes);
  for (int32_t i = 0; i < s->n_locations; i++) fsh_free(s->location_uris[i]);
  fsh_free(s->location_uris);
  fsh_free(s->location_table_ids);
  memset(s, 0, sizeof *s);
}

/* Room for n entries in s's four arrays. */
static bool sources_reserve(fsh_shuffle_sources *s, int64_t n) {
  if (n <= s->capacity) return true;
  int64_t cap = s->capacity ? s->capacity : 16;
  while (cap < n) cap *= 2;
  void *p;
  if (!(p = fsh_realloc(s->map_ids, (size_t)cap * sizeof(int64_t)))) return false;
  s->map_ids = p;
  if (!(p = fsh_realloc(s->attempts, (size_t)cap * sizeof(int32_t)))) return false;
  s->attempts = p;
  if (!(p = fsh_realloc(s->location_ids, (size_t)cap * sizeof(uint32_t)))) return false;
  s->location_ids = p;
  if (!(p = fsh_realloc(s->bytes, (size_t)cap * sizeof(int64_t)))) return false;
  s->bytes = p;
  s->capacity = cap;
  return true;
}

static void sources_clear_table(fsh_shuffle_sources *s) {
  for (int32_t i = 0; i < s->n_locations; i++) fsh_free(s->location_uris[i]);
  fsh_free(s->location_uris);
  fsh_free(s->location_table_ids);
  s->location_uris = NULL;
  s->location_table_ids = NULL;
  s->n_locations = 0;
}

int fsh_shuffle_meta_sources(const fsh_shuffle_meta *m, int32_t p, uint64_t since,
                             fsh_shuffle_sources *out, fsh_error *err) {
  return fsh_shuffle_meta_run_sources(m, p, 1, since, out, err);
}

int fsh_shuffle_meta_run_sources(const fsh_shuffle_meta *m, int32_t p, int32_t count,
                                 uint64_t since, fsh_shuffle_sources *out, fsh_error *err) {
  if (p < 0 || p >= m->n_partitions) return bad_partition(m, p, err);
  if (count < 1 || count > m->n_partitions - p)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 ": a run of %d partitions from "
                         "partition %d (%d partitions)", m->shuffle_id, count, (int)p,
                         m->n_partitions);
  if (since > m->version)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " partition %d: since_version %" PRIu64
                         " is ahead of the shuffle's version %" PRIu64, m->shuffle_id, (int)p,
                         since, m->version);
  sources_clear_table(out);
  out->shuffle_id = m->shuffle_id;
  out->partition = p;
  out->n_maps = m->n_maps;
  out->since_version = since;
  out->version = m->version;
  out->complete = m->n_complete + m->n_skipped == m->n_maps;
  out->n = 0;
  /* first log entry with version > since */
  int64_t lo = 0, hi = m->n_log;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (m->log_version[mid] <= since) lo = mid + 1;
    else hi = mid;
  }
  for (int64_t i = lo; i < m->n_log; i++) {
    int32_t map = m->log_map[i];
    if (!log_entry_live(m, i)) continue;
    const uint64_t *col = m->bits + (int64_t)(map / 64) * m->n_partitions;
    int64_t bytes = 0;
    bool any = false;
    for (int32_t q = p; q < p + count; q++) {
      if (!((col[q] >> (map % 64)) & 1)) continue;
      int64_t r, b;
      bool exact;
      block_estimate(&m->maps[map], q, &r, &b, &exact);
      bytes += b;
      any = true;
    }
    if (!any) continue;
    if (out->n == out->capacity && !sources_reserve(out, out->n + 1))
      return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 " partition %d: out of memory for"
                           " the sources", m->shuffle_id, (int)p);
    const meta_map *mm = &m->maps[map];
    out->map_ids[out->n] = map;
    out->attempts[out->n] = mm->output_attempt;
    out->location_ids[out->n] = mm->loc;
    out->bytes[out->n++] = bytes;
  }
  return 0;
}

const char *fsh_shuffle_sources_uri(const fsh_shuffle_sources *s, uint32_t id) {
  int32_t lo = 0, hi = s->n_locations;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (s->location_table_ids[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < s->n_locations && s->location_table_ids[lo] == id ? s->location_uris[lo] : NULL;
}

/* ---- losing outputs ---------------------------------------------------- */

int fsh_shuffle_meta_lose_location(fsh_shuffle_meta *m, const char *uri, int64_t **map_ids,
                                   int64_t *n, fsh_error *err) {
  *map_ids = NULL;
  *n = 0;
  uint32_t loc;
  if (!uri || !loc_find(m, uri, &loc)) return 0;
  int64_t count = 0;
  for (int64_t i = 0; i < m->n_maps; i++)
    count += m->maps[i].state == MAP_COMPLETE && m->maps[i].loc == loc;
  int64_t *ids = NULL;
  if (count) {
    ids = fsh_malloc((size_t)count * sizeof *ids);
    if (!ids)
      return fsh_error_set(err, ENOMEM, "shuffle %" PRIu64 ": out of memory losing location %s",
                           m->shuffle_id, uri);
  }
  int64_t k = 0;
  for (int64_t i = 0; i < m->n_maps; i++) {
    meta_map *mm = &m->maps[i];
    if (mm->state != MAP_COMPLETE || mm->loc != loc) continue;
    remove_output(m, i, false);
    mm->state = MAP_LOST;
    ids[k++] = i;
  }
  /* The whole column goes: exact again, whatever estimates it held. */
  meta_loc *l = &m->locs[loc];
  for (int32_t p = 0; p < m->n_partitions; p++) {
    m->part_rows[p] -= l->rows[p];
    m->part_bytes[p] -= l->bytes[p];
    l->rows[p] = l->bytes[p] = 0;
    if ((l->approx[p / 64] >> (p % 64)) & 1) m->part_approx[p]--;
  }
  memset(l->approx, 0, (size_t)words_for(m->n_partitions) * sizeof(uint64_t));
  m->stats.lost += count;
  *map_ids = ids;
  *n = count;
  return 0;
}

int fsh_shuffle_meta_lose_output(fsh_shuffle_meta *m, int64_t map_id, int32_t attempt,
                                 bool *lost, fsh_error *err) {
  *lost = false;
  if (map_id < 0 || map_id >= m->n_maps) return bad_map(m, map_id, err);
  meta_map *mm = &m->maps[map_id];
  if (mm->state != MAP_COMPLETE || mm->output_attempt != attempt) return 0;
  remove_output(m, map_id, true);
  mm->state = MAP_LOST;
  m->stats.lost++;
  *lost = true;
  return 0;
}

int fsh_shuffle_meta_skip(fsh_shuffle_meta *m, int64_t map_id, bool skipped, fsh_error *err) {
  if (map_id < 0 || map_id >= m->n_maps) return bad_map(m, map_id, err);
  meta_map *mm = &m->maps[map_id];
  if (!skipped) {
    if (mm->state != MAP_SKIPPED) return 0;
    mm->state = MAP_PENDING;
    m->n_skipped--;
    m->stats.unskipped++;
    return 0;
  }
  if (mm->state == MAP_SKIPPED) return 0;
  if (mm->state == MAP_COMPLETE)
    return fsh_error_set(err, EINVAL, "shuffle %" PRIu64 " map %" PRId64 ": holds an output "
                         "(attempt %d); only a map without one can be skipped", m->shuffle_id,
                         map_id, (int)mm->output_attempt);
  mm->state = MAP_SKIPPED;
  m->n_skipped++;
  m->stats.skipped++;
  return 0;
}

/* ---- ShuffleSources encoding ------------------------------------------- */

int fsh_shuffle_meta_sources_encode(const fsh_shuffle_meta *m, const fsh_shuffle_sources *s,
                                    uint8_t **data, int64_t *size, fsh_error *err) {
  *data = NULL;
  *size = 0;
  for (int64_t i = 0; i < s->n; i++)
    if (s->location_ids[i] >= m->n_locs)
      return fsh_error_set(err, EINVAL, "ShuffleSources of shuffle %" PRIu64 ": entry %" PRId64
                           " names location %u, the shuffle has %u", m->shuffle_id, i,
                           s->location_ids[i], m->n_locs);
  uint8_t *seen = m->n_locs ? fsh_calloc(m->n_locs, 1) : NULL;
  int32_t n_named = 0;
  Flightshuffle__Sched__ShuffleLocation *locs = NULL, **plocs = NULL;
  if (m->n_locs && !seen) goto oom;
  for (int64_t i = 0; i < s->n; i++)
    if (!seen[s->location_ids[i]]) seen[s->location_ids[i]] = 1, n_named++;
  if (n_named) {
    locs = fsh_calloc((size_t)n_named, sizeof *locs);
    plocs = fsh_calloc((size_t)n_named, sizeof *plocs);
    if (!locs || !plocs) goto oom;
    int32_t k = 0;
    for (uint32_t id = 0; id < m->n_locs; id++) {
      if (!seen[id]) continue;
      flightshuffle__sched__shuffle_location__init(&locs[k]);
      locs[k].id = id;
      locs[k].uri = m->locs[id].uri;
      plocs[k] = &locs[k];
      k++;
    }
  }
  Flightshuffle__Sched__ShuffleSources msg;
  flightshuffle__sched__shuffle_sources__init(&msg);
  msg.shuffle_id = s->shuffle_id;
  msg.partition = s->partition;
  msg.n_maps = s->n_maps;
  msg.since_version = s->since_version;
  msg.version = s->version;
  msg.complete = s->complete;
  msg.n_map_ids = msg.n_attempts = msg.n_location_ids = msg.n_bytes = (size_t)s->n;
  msg.map_ids = s->map_ids;
  msg.attempts = s->attempts;
  msg.location_ids = s->location_ids;
  msg.bytes = s->bytes;
  msg.n_locations = (size_t)n_named;
  msg.locations = plocs;
  size_t len = flightshuffle__sched__shuffle_sources__get_packed_size(&msg);
  uint8_t *buf = fsh_malloc(len ? len : 1);
  if (!buf) goto oom;
  flightshuffle__sched__shuffle_sources__pack(&msg, buf);
  fsh_free(seen);
  fsh_free(locs);
  fsh_free(plocs);
  *data = buf;
  *size = (int64_t)len;
  return 0;
oom:
  fsh_free(seen);
  fsh_free(locs);
  fsh_free(plocs);
  return fsh_error_set(err, ENOMEM, "ShuffleSources of shuffle %" PRIu64 " partition %d: out of"
                       " memory", m->shuffle_id, (int)s->partition);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct loc_ref {
  uint32_t id;
  const char *uri;
} loc_ref;

static int cmp_loc_ref(const void *a, const void *b) {
  uint32_t x = ((const loc_ref *)a)->id, y = ((const loc_ref *)b)->id;
  return x < y ? -1 : x > y;
}

/* protobuf-c allocations through fsh_malloc that note a failure in *ctx
 * (unpack answers NULL both for bad input and for a lack of memory). */
static void *pb_alloc_noting(void *ctx, size_t size) {
  void *p = fsh_malloc(size ? size : 1);
  if (!p) *(bool *)ctx = true;
  return p;
}
static void pb_free(void *ctx, void *p) {
  (void)ctx;
  fsh_free(p);
}

#define DECODE_FAIL(...)                                        \
  do {                                                          \
    rc = fsh_error_set(err, EINVAL, "ShuffleSources: " __VA_ARGS__); \
    goto done;                                                  \
  } while (0)

int fsh_shuffle_sources_decode(const void *data, int64_t size, fsh_shuffle_sources *out,
                               fsh_error *err) {
  fsh_shuffle_sources_reset(out);
  if (size < 0 || (size > 0 && !data))
    return fsh_error_set(err, EINVAL, "ShuffleSources: no data (size %" PRId64 ")", size);
  bool oom = false;
  ProtobufCAllocator alloc = {.alloc = pb_alloc_noting, .free = pb_free, .allocator_data = &oom};
  Flightshuffle__Sched__ShuffleSources *msg = flightshuffle__sched__shuffle_sources__unpack(
      &alloc, (size_t)size, data);
  if (!msg && oom)
    return fsh_error_set(err, ENOMEM, "ShuffleSources: out of memory decoding %" PRId64
                         " bytes", size);
  if (!msg)
    return fsh_error_set(err, EINVAL, "ShuffleSources: not a valid message (%" PRId64
                         " bytes)", size);
  int rc = 0;
  int64_t *sorted = NULL;
  loc_ref *refs = NULL;
  size_t n = msg->n_map_ids;
  if (msg->partition < 0) DECODE_FAIL("partition %d < 0", (int)msg->partition);
  if (msg->n_maps < 1 || msg->n_maps > INT32_MAX)
    DECODE_FAIL("n_maps %" PRId64 " out of range [1, %d]", msg->n_maps, INT32_MAX);
  if (msg->version < msg->since_version)
    DECODE_FAIL("version %" PRIu64 " < since_version %" PRIu64, msg->version,
                msg->since_version);
  if (msg->n_attempts != n || msg->n_location_ids != n || msg->n_bytes != n)
    DECODE_FAIL("parallel arrays differ in length: map_ids %zu, attempts %zu, location_ids %zu,"
                " bytes %zu", n, msg->n_attempts, msg->n_location_ids, msg->n_bytes);
  if (n > (size_t)msg->n_maps)
    DECODE_FAIL("%zu entries for %" PRId64 " maps", n, msg->n_maps);
  for (size_t i = 0; i < n; i++) {
    if (msg->map_ids[i] < 0 || msg->map_ids[i] >= msg->n_maps)
      DECODE_FAIL("entry %zu: map id %" PRId64 " out of range [0, %" PRId64 ")", i,
                  msg->map_ids[i], msg->n_maps);
    if (msg->attempts[i] < 0)
      DECODE_FAIL("entry %zu (map %" PRId64 "): attempt %d < 0", i, msg->map_ids[i],
                  (int)msg->attempts[i]);
    if (msg->bytes[i] < 0)
      DECODE_FAIL("entry %zu (map %" PRId64 "): bytes %" PRId64 " < 0", i, msg->map_ids[i],
                  msg->bytes[i]);
  }
  size_t nl = msg->n_locations;
  if (nl > (size_t)INT32_MAX) DECODE_FAIL("%zu locations", nl);
  if (n || nl) {
    sorted = fsh_malloc((n ? n : 1) * sizeof *sorted);
    refs = fsh_malloc((nl ? nl : 1) * sizeof *refs);
    if (!sorted || !refs) {
      rc = fsh_error_set(err, ENOMEM, "ShuffleSources: out of memory for %zu entries", n);
      goto done;
    }
  }
  for (size_t i = 0; i < n; i++) sorted[i] = msg->map_ids[i];
  if (n) qsort(sorted, n, sizeof *sorted, cmp_i64);
  for (size_t i = 1; i < n; i++)
    if (sorted[i] == sorted[i - 1]) DECODE_FAIL("map %" PRId64 " listed twice", sorted[i]);
  for (size_t i = 0; i < nl; i++) {
    const Flightshuffle__Sched__ShuffleLocation *l = msg->locations[i];
    if (!l->uri || !l->uri[0]) DECODE_FAIL("location %u has no uri", l->id);
    refs[i] = (loc_ref){l->id, l->uri};
  }
  if (nl) qsort(refs, nl, sizeof *refs, cmp_loc_ref);
  for (size_t i = 1; i < nl; i++)
    if (refs[i].id == refs[i - 1].id) DECODE_FAIL("location %u listed twice", refs[i].id);
  for (size_t i = 0; i < n; i++) {
    loc_ref key = {msg->location_ids[i], NULL};
    if (!bsearch(&key, refs, nl, sizeof *refs, cmp_loc_ref))
      DECODE_FAIL("entry %zu (map %" PRId64 "): location %u has no uri", i, msg->map_ids[i],
                  msg->location_ids[i]);
  }
  if (!sources_reserve(out, (int64_t)(n ? n : 1))) goto oom;
  if (nl) {
    out->location_table_ids = fsh_calloc(nl, sizeof(uint32_t));
    out->location_uris = fsh_calloc(nl, sizeof(char *));
    if (!out->location_table_ids || !out->location_uris) goto oom;
    for (size_t i = 0; i < nl; i++) {
      out->location_table_ids[i] = refs[i].id;
      if (!(out->location_uris[i] = fsh_strdup(refs[i].uri))) goto oom;
      out->n_locations = (int32_t)i + 1;
    }
  }
  out->shuffle_id = msg->shuffle_id;
  out->partition = msg->partition;
  out->n_maps = msg->n_maps;
  out->since_version = msg->since_version;
  out->version = msg->version;
  out->complete = msg->complete;
  out->n = (int64_t)n;
  if (n) {
    memcpy(out->map_ids, msg->map_ids, n * sizeof(int64_t));
    memcpy(out->attempts, msg->attempts, n * sizeof(int32_t));
    memcpy(out->location_ids, msg->location_ids, n * sizeof(uint32_t));
    memcpy(out->bytes, msg->bytes, n * sizeof(int64_t));
  }
  goto done;
oom:
  rc = fsh_error_set(err, ENOMEM, "ShuffleSources: out of memory for %zu entries", n);
done:
  if (rc) fsh_shuffle_sources_reset(out);
  fsh_free(sorted);
  fsh_free(refs);
  flightshuffle__sched__shuffle_sources__free_unpacked(msg, &alloc);
  return rc;
}
