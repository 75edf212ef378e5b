/* synthetic.c -- the synthetic (key int64, value float64, name utf8) table
 * used by the demo and the benchmarks: deterministic from a seed, no I/O. */
#include <flightshuffle/workloads.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* splitmix64: a small, good, seekable generator. */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

fsh_schema *fsh_synthetic_schema(void) {
  fsh_schema *s = fsh_schema_new(3);
  if (!s) return NULL;
  if (fsh_field_init(&s->fields[0], "key", FSH_TYPE_INT64, false) ||
      fsh_field_init(&s->fields[1], "value", FSH_TYPE_FLOAT64, true) ||
      fsh_field_init(&s->fields[2], "name", FSH_TYPE_STRING, true)) {
    fsh_schema_unref(s);
    return NULL;
  }
  return s;
}

/* Word w (rows 64 w .. 64 w + 63 of the table) of the null mask drawn
 * from stream `seed`: a bit is set (null) with probability 3/256 (~1.2%),
 * the AND of six random words and the OR of two more. */
static inline uint64_t null_word(uint64_t seed, uint64_t w) {
  uint64_t x = seed ^ (w * 8);
  return mix(x) & mix(x + 1) & mix(x + 2) & mix(x + 3) & mix(x + 4) & mix(x + 5) &
         (mix(x + 6) | mix(x + 7));
}

/* A column buffer of `size` bytes: *spare (a buffer of the batch being
 * refilled, owned and referenced by nobody else; taken: *spare NULL
 * after) when its capacity holds the 64-byte padded size fsh_buffer_new
 * would give and is not much larger, its padding zeroed again as
 * fsh_buffer_new's; else a new one. NULL on ENOMEM. */
static fsh_buffer *column_buffer(fsh_buffer **spare, int64_t size) {
  fsh_buffer *b = spare ? *spare : NULL;
  if (spare) *spare = NULL;
  if (b && b->capacity >= fsh_round_up(size > 0 ? size : 1, 64) &&
      b->capacity <= 2 * size + 64) {
    b->size = size;
    memset(b->data + size, 0, (size_t)(b->capacity - size));
    return b;
  }
  fsh_buffer_unref(b);
  return fsh_buffer_new(size, false);
}

/* A validity bitmap with ~1% nulls, built 64 rows at a time from the null
 * mask of the table's rows (so a row's validity does not depend on how the
 * table is cut into batches); the bits past the last row stay zero. */
static fsh_buffer *make_validity(uint64_t seed, int64_t first_row, int64_t rows, int64_t *nulls,
                                 fsh_buffer **spare) {
  int64_t n_words = (rows + 63) / 64;
  /* (capacity: whole words, as column_buffer pads to 64 bytes) */
  fsh_buffer *v = column_buffer(spare, fsh_bytes_for_bits(rows));
  if (!v) return NULL;
  uint64_t sh = (uint64_t)first_row & 63, w0 = (uint64_t)first_row >> 6;
  int64_t valid_count = 0;
  uint64_t lo = null_word(seed, w0);
  for (int64_t j = 0; j < n_words; j++) {
    uint64_t hi = sh ? null_word(seed, w0 + (uint64_t)j + 1) : 0;
    uint64_t valid = ~(sh ? lo >> sh | hi << (64 - sh) : lo);
    if (j == n_words - 1 && (rows & 63)) valid &= ((uint64_t)1 << (rows & 63)) - 1;
    valid_count += __builtin_popcountll(valid);
    for (int k = 0; k < 8; k++) v->data[8 * j + k] = (uint8_t)(valid >> (8 * k));
    lo = sh ? hi : null_word(seed, w0 + (uint64_t)j + 1);
  }
  *nulls = rows - valid_count;
  return v;
}

/* The per-row loops of the key and value columns, in two builds: the
 * default one and one for CPUs with AVX-512 (F + DQ: 8 lanes of 64-bit
 * multiplies and int64 -> double conversions, so mix() vectorizes). Both
 * compute the same exact integers (the doubles are exact: 53-bit
 * integers scaled by a power of two), so the table does not depend on the
 * CPU. Chosen once per process. */
/* r % 23 without a 64-bit division: 2^11 = 89 * 23 + 1, so r is congruent
 * to the sum of its 11-bit digits (< 6 * 2048), whose remainder is a
 * 32-bit one (vectorizable). The default name length's span (avg 12). */
static inline int32_t mod23(uint64_t r) {
  uint32_t t = (uint32_t)(r & 2047) + (uint32_t)((r >> 11) & 2047) + (uint32_t)((r >> 22) & 2047) +
               (uint32_t)((r >> 33) & 2047) + (uint32_t)((r >> 44) & 2047) + (uint32_t)(r >> 55);
  return (int32_t)(t % 23);
}

#define GEN_LOOPS(SUFFIX, ATTR)                                                            \
  ATTR static void keys_##SUFFIX(int64_t *restrict keys, uint64_t base, int64_t rows) {    \
    for (int64_t i = 0; i < rows; i++) keys[i] = (int64_t)mix(base + (uint64_t)i);         \
  }                                                                                        \
  ATTR static void vals_##SUFFIX(double *restrict vals, uint64_t base, int64_t rows) {     \
    for (int64_t i = 0; i < rows; i++)                                                     \
      vals[i] = (double)(int64_t)(mix(base + (uint64_t)i) >> 11) / 9007199254740992.0;    \
  }                                                                                        \
  ATTR static void lens_##SUFFIX(int32_t *restrict lens, uint64_t base, int64_t rows,      \
                                 uint64_t span) {                                          \
    if (span == 23) {                                                                      \
      for (int64_t i = 0; i < rows; i++) lens[i] = 1 + mod23(mix(base + (uint64_t)i));     \
    } else {                                                                               \
      for (int64_t i = 0; i < rows; i++) lens[i] = 1 + (int32_t)(mix(base + (uint64_t)i) % span); \
    }                                                                                      \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#define GEN_AVX512 1
GEN_LOOPS(avx512, __attribute__((target("avx512f,avx512dq"))))
#endif
GEN_LOOPS(plain, )

typedef struct gen_loops {
  void (*keys)(int64_t *restrict, uint64_t, int64_t);
  void (*vals)(double *restrict, uint64_t, int64_t);
  void (*lens)(int32_t *restrict, uint64_t, int64_t, uint64_t);
} gen_loops;

static gen_loops g_loops = {keys_plain, vals_plain, lens_plain};
static pthread_once_t g_loops_once = PTHREAD_ONCE_INIT;

static void loops_init(void) {
#ifdef GEN_AVX512
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
    g_loops = (gen_loops){keys_avx512, vals_avx512, lens_avx512};
#endif
}

/* The columns' fill functions: column a's buffers from the options and
 * rows [first, first + rows), each taken from spare[slot] when it suits
 * (column_buffer). */
static int fill_key(fsh_array *a, const fsh_synthetic_options *o, int64_t first, int64_t rows,
                    fsh_buffer **spare) {
  if (!(a->buffers[1] = column_buffer(&spare[1], rows * 8))) return ENOMEM;
  int64_t *keys = (int64_t *)a->buffers[1]->data;
  if (o->key_range <= 0) {
    pthread_once(&g_loops_once, loops_init);
    g_loops.keys(keys, o->seed * 3 + (uint64_t)first, rows);
    return 0;
  }
  for (int64_t i = 0; i < rows; i++)
    keys[i] = (int64_t)(mix(o->seed * 3 + (uint64_t)(first + i)) % (uint64_t)o->key_range);
  return 0;
}

static int fill_value(fsh_array *a, const fsh_synthetic_options *o, int64_t first, int64_t rows,
                      fsh_buffer **spare) {
  if (!(a->buffers[1] = column_buffer(&spare[1], rows * 8))) return ENOMEM;
  pthread_once(&g_loops_once, loops_init);
  g_loops.vals((double *)a->buffers[1]->data, o->seed * 5 + (uint64_t)first, rows);
  if (o->with_nulls &&
      !(a->buffers[0] = make_validity(o->seed * 7, first, rows, &a->null_count, &spare[0])))
    return ENOMEM;
  return 0;
}

/* The name characters: from r, the sequence r, A r + 1, A (A r + 1) + 1,
 * ... (an LCG), one letter (r >> 33) % 26 per step. Step j is
 * A^j r + C_j, so every letter is computed independently from r (no chain
 * of dependent multiplies), and short names (the default) are written a
 * fixed `span` letters at a time -- the next name overwrites the excess --
 * so the loop does not mispredict its random trip count on every row
 * (fill_name_letters; most batches take their names from the pool below). */
#define LCG_A 6364136223846793005ull
#define FIXED_SPAN_MAX 64

static inline uint8_t letter(uint64_t s) { return (uint8_t)('a' + (uint32_t)(s >> 33) % 26); }

/* The letter pool: POOL_BYTES random letters (the LCG above from a fixed
 * start), made once per process, read-only after. A batch's names are
 * consecutive slices of it from an offset drawn from (seed, first row):
 * its chars buffer is a view of the pool (no copy, no per-letter work),
 * only lengths and offsets are computed per row. Names are still random
 * letters of random lengths; they differ from one batch to the next (each
 * starts elsewhere in 8 MiB), rows differ by their random keys. A batch
 * needing more than POOL_WINDOW bytes of names is written letter by
 * letter (fill_name_letters). */
#define POOL_BYTES ((int64_t)8 << 20)
#define POOL_WINDOW (POOL_BYTES / 2)
static _Alignas(64) uint8_t g_pool[POOL_BYTES + 64]; /* + zeros past the end */
static pthread_once_t g_pool_once = PTHREAD_ONCE_INIT;

static void pool_init(void) {
  uint64_t r = mix(0x5EED);
  for (int64_t i = 0; i < POOL_BYTES; i++, r = r * LCG_A + 1) g_pool[i] = letter(r);
}

/* Names of the batch's rows as slices of the pool from a 64-byte aligned
 * offset drawn from seed and first row. */
static int fill_name_pool(fsh_array *a, const fsh_synthetic_options *o, int64_t first,
                          int64_t total) {
  pthread_once(&g_pool_once, pool_init);
  uint64_t room = (uint64_t)(POOL_BYTES - POOL_WINDOW); /* whatever total: a batch of the
                                                          same first row starts alike */
  uint64_t start = (mix(o->seed * 13 + (uint64_t)first) % room) & ~(uint64_t)63;
  /* a borrowed view: the pool outlives every batch (no release) */
  return (a->buffers[2] = fsh_buffer_wrap(g_pool + start, total, NULL, NULL)) ? 0 : ENOMEM;
}

static int fill_name_letters(fsh_array *a, const fsh_synthetic_options *o, int64_t first,
                             int64_t rows, uint64_t span, fsh_buffer **spare) {
  const int32_t *offsets = (const int32_t *)a->buffers[1]->data;
  int64_t total = offsets[rows];
  bool fixed = span <= FIXED_SPAN_MAX;
  fsh_buffer *chars = a->buffers[2] = column_buffer(spare, total + (fixed ? (int64_t)span : 0));
  if (!chars) return ENOMEM;
  uint8_t *data = chars->data;
  if (fixed) {
    uint64_t mul[FIXED_SPAN_MAX], add[FIXED_SPAN_MAX];
    mul[0] = 1, add[0] = 0;
    for (uint64_t j = 1; j < span; j++) mul[j] = mul[j - 1] * LCG_A, add[j] = add[j - 1] * LCG_A + 1;
    for (int64_t i = 0; i < rows; i++) {
      uint64_t r = mix(o->seed * 13 + (uint64_t)(first + i));
      uint8_t *d = data + offsets[i];
      for (uint64_t j = 0; j < span; j++) d[j] = letter(mul[j] * r + add[j]);
    }
    chars->size = total; /* the padding past the names is zero again */
    memset(data + total, 0, (size_t)(chars->capacity - total));
  } else {
    for (int64_t i = 0; i < rows; i++) {
      uint64_t r = mix(o->seed * 13 + (uint64_t)(first + i));
      for (int32_t j = offsets[i]; j < offsets[i + 1]; j++, r = r * LCG_A + 1) data[j] = letter(r);
    }
  }
  return 0;
}

static int fill_name(fsh_array *a, const fsh_synthetic_options *o, int64_t first, int64_t rows,
                     fsh_buffer **spare) {
  int32_t avg = o->avg_str_len > 0 ? o->avg_str_len : 12;
  uint64_t span = (uint64_t)(2 * avg - 1); /* lengths 1 .. span */
  if (!(a->buffers[1] = column_buffer(&spare[1], (rows + 1) * 4))) return ENOMEM;
  int32_t *offsets = (int32_t *)a->buffers[1]->data;
  offsets[0] = 0;
  pthread_once(&g_loops_once, loops_init); /* the lengths 1 .. span, then their running sum */
  g_loops.lens(offsets + 1, o->seed * 11 + (uint64_t)first, rows, span);
  int64_t at = 0;
  for (int64_t i = 0; i < rows; i++) {
    at += offsets[i + 1];
    if (at > INT32_MAX) return EOVERFLOW;
    offsets[i + 1] = (int32_t)at;
  }
  int64_t total = offsets[rows];
  int rc = total <= POOL_WINDOW ? fill_name_pool(a, o, first, total)
                                : fill_name_letters(a, o, first, rows, span, &spare[2]);
  if (rc) return rc;
  if (o->with_nulls &&
      !(a->buffers[0] = make_validity(o->seed * 17, first, rows, &a->null_count, &spare[0])))
    return ENOMEM;
  return 0;
}

/* Batch `index` into *out, each column's buffers taken from spare[c][]
 * where they suit (column_buffer; the spares not taken stay). */
static int make_batch(fsh_schema *schema, const fsh_synthetic_options *o, int64_t index,
                      int64_t rows, fsh_buffer *spare[3][3], fsh_batch **out, fsh_error *err) {
  if (rows < 0 || index < 0 || schema->n_fields != 3)
    return fsh_error_set(err, EINVAL, "synthetic batch: bad arguments (rows %lld, index %lld)",
                         (long long)rows, (long long)index);
  fsh_batch *b = fsh_batch_new(schema, rows);
  if (!b) return fsh_error_set(err, ENOMEM, "synthetic batch: out of memory");
  int64_t first = index * rows;
  int (*fill[3])(fsh_array *, const fsh_synthetic_options *, int64_t, int64_t, fsh_buffer **) = {
      fill_key, fill_value, fill_name};
  int n_buffers[3] = {2, 2, 3};
  for (int c = 0; c < 3; c++) {
    fsh_array *a = b->columns[c] = fsh_array_new(n_buffers[c], 0);
    int rc = a ? 0 : ENOMEM;
    if (a) {
      a->length = rows;
      rc = fill[c](a, o, first, rows, spare[c]);
    }
    if (rc) {
      fsh_batch_unref(b);
      return fsh_error_set(err, rc, "synthetic batch: %s building column '%s'",
                           rc == ENOMEM ? "out of memory" : "string data over 2 GiB",
                           schema->fields[c].name);
    }
  }
  *out = b;
  return 0;
}

int fsh_synthetic_batch(fsh_schema *schema, const fsh_synthetic_options *o, int64_t index,
                        int64_t rows, fsh_batch **out, fsh_error *err) {
  fsh_buffer *none[3][3] = {{NULL}};
  return make_batch(schema, o, index, rows, none, out, err);
}

/* A buffer of an array being refilled that only the array holds and that
 * owns its memory (not a view, not foreign, not in a pack). */
static bool owned_alone(const fsh_buffer *x) {
  return x && atomic_load(&x->refcount) == 1 && !x->parent && !x->release && !x->pack;
}

int fsh_synthetic_batch_refill(fsh_schema *schema, const fsh_synthetic_options *o,
                               int64_t index, int64_t rows, fsh_batch **b, fsh_error *err) {
  fsh_buffer *spare[3][3] = {{NULL}};
  fsh_batch *old = *b;
  *b = NULL;
  if (old && atomic_load(&old->refcount) == 1 && !old->pack && old->n_columns == 3)
    for (int c = 0; c < 3; c++) {
      fsh_array *a = old->columns[c];
      if (!a || atomic_load(&a->refcount) != 1 || a->pack) continue;
      for (int k = 0; k < a->n_buffers && k < 3; k++)
        if (owned_alone(a->buffers[k])) spare[c][k] = a->buffers[k], a->buffers[k] = NULL;
    }
  fsh_batch_unref(old);
  int rc = make_batch(schema, o, index, rows, spare, b, err);
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 3; k++) fsh_buffer_unref(spare[c][k]);
  return rc;
}
