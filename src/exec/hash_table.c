/* hash_table.c -- the row set of the hash operators (interning key rows as
 * dense ids with an open-addressing table) and their small shared helpers:
 * null arrays, projections, memory accounting. */
#include "exec/hashops_internal.h"

#include "kernels/kernels_internal.h"

#include <string.h>
#include <xxhash.h>

#define HS_SEED 0x5eed0f4a5bull

/* One slot, 16 bytes: the high 32 bits of the row hash (the table index
 * is their low bits, so a rehash needs nothing else), the id, and the key:
 * on the general path the offset of the id's encoded key in the arena, on
 * the fast path the key's bytes themselves. Reading a slot is thus one
 * cache line; comparing keys touches the arena only when the 32 hash bits
 * agree. */
typedef struct slot {
  uint32_t hash;
  int32_t id; /* -1: empty */
  uint64_t key;
} slot;

/* The fast path: one key column of an integer-like type of 1, 2, 4 or 8
 * bytes (integers, dates, times, timestamps, durations, month intervals)
 * or a float (its bits, every NaN made the canonical one: equal keys are
 * equal bits under fsh_row_keys_equal) keeps the value in the slot, so a
 * lookup reads no key; a null key is one id held aside. A batch's column is
 * read through its dictionary when it has one. */
typedef struct fast_col {
  const uint8_t *valid, *vals; /* of the values (the dictionary's if any) */
  int64_t off;
  int width;
  bool is_float;
  const uint8_t *ivalid, *idx; /* dictionary indices */
  int64_t ioff;
  fsh_type_id itype;
} fast_col;

static inline bool fast_value(const fast_col *c, int64_t i, uint64_t *v) {
  int64_t at = i;
  if (c->idx) {
    if (c->ivalid && !fsh_bit_get(c->ivalid, c->ioff + i)) return false;
    at = fsh_kern_read_int(c->itype, c->idx, c->ioff + i);
  }
  at += c->off;
  if (c->valid && !fsh_bit_get(c->valid, at)) return false;
  uint64_t x = 0;
  memcpy(&x, c->vals + at * c->width, (size_t)c->width); /* little-endian */
  if (c->is_float) { /* NaN: exponent all ones, mantissa not zero */
    if (c->width == 8 && (x & ~(1ull << 63)) > 0x7FF0000000000000ull) x = 0x7FF8000000000000ull;
    else if (c->width == 4 && (x & 0x7FFFFFFFu) > 0x7F800000u) x = 0x7FC00000u;
    else if (c->width == 2 && (x & 0x7FFFu) > 0x7C00u) x = 0x7E00u;
  }
  *v = x;
  return true;
}

static bool fast_type(const fsh_field *f) {
  switch (f->type) {
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32: case FSH_TYPE_UINT64:
    case FSH_TYPE_DATE32: case FSH_TYPE_DATE64: case FSH_TYPE_TIME32: case FSH_TYPE_TIME64:
    case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION: case FSH_TYPE_INTERVAL_MONTHS:
    case FSH_TYPE_FLOAT16: case FSH_TYPE_FLOAT32: case FSH_TYPE_FLOAT64:
      return !f->dictionary;
    default: return false;
  }
}

/* The general path keeps each id's key encoded (fsh_row_keys_encode) in
 * one arena: a 4-byte length, then the bytes; probes encode a batch's keys
 * column by column, hash each encoded row once (xxh3) and compare with
 * memcmp. Every id's key row is also kept as a batch (owned, for
 * hs_rowset_keys). */
struct hs_rowset {
  fsh_schema *key_schema;
  int n_keys;
  slot *slots;
  int64_t cap; /* power of two */
  int64_t n;   /* ids */
  fsh_batch **owned;
  int64_t n_owned, owned_cap;
  fsh_mem_set owned_mem; /* their buffers, each once (they share dictionaries) */
  uint8_t *arena; /* the general path's encoded keys */
  int64_t arena_len, arena_cap;
  bool fast;       /* the fast path (above) */
  int64_t null_id; /* fast path: the id of the null key, or -1 */
  bool poisoned;
};

static inline uint32_t hash32(uint64_t h) { return (uint32_t)(h >> 32); }

int hs_grow(void **p, int64_t *cap, int64_t need, size_t size, fsh_error *err) {
  if (need <= *cap) return 0;
  int64_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = fsh_realloc(*p, (size_t)c * size);
  if (!q) return hs_oom(err);
  memset((char *)q + (size_t)*cap * size, 0, (size_t)(c - *cap) * size);
  *p = q;
  *cap = c;
  return 0;
}

int hs_rowset_new(fsh_schema *key_schema, hs_rowset **out, fsh_error *err) {
  *out = NULL;
  hs_rowset *rs = fsh_calloc(1, sizeof *rs);
  if (!rs) return hs_oom(err);
  rs->n_keys = (int)key_schema->n_fields;
  rs->cap = 64;
  rs->slots = fsh_malloc((size_t)rs->cap * sizeof(slot));
  if (!rs->slots) {
    fsh_free(rs);
    return hs_oom(err);
  }
  rs->fast = rs->n_keys == 1 && fast_type(&key_schema->fields[0]);
  rs->null_id = -1;
  for (int64_t i = 0; i < rs->cap; i++) rs->slots[i].id = -1;
  rs->key_schema = fsh_schema_ref(key_schema);
  *out = rs;
  return 0;
}

void hs_rowset_free(hs_rowset *rs) {
  if (!rs) return;
  for (int64_t i = 0; i < rs->n_owned; i++) fsh_batch_unref(rs->owned[i]);
  fsh_free(rs->owned);
  fsh_mem_set_reset(&rs->owned_mem);
  fsh_free(rs->arena);
  fsh_free(rs->slots);
  fsh_schema_unref(rs->key_schema);
  fsh_free(rs);
}

int64_t hs_rowset_count(const hs_rowset *rs) { return rs->n; }

int64_t hs_rowset_memory(const hs_rowset *rs) {
  return rs->cap * (int64_t)sizeof(slot) + rs->owned_cap * (int64_t)sizeof(void *) +
         rs->owned_mem.bytes + rs->arena_cap;
}

/* Doubles the table, reinserting from the stored hashes. */
static int rehash(hs_rowset *rs, fsh_error *err) {
  int64_t cap = rs->cap * 2;
  slot *s = fsh_malloc((size_t)cap * sizeof(slot));
  if (!s) return hs_oom(err);
  for (int64_t i = 0; i < cap; i++) s[i].id = -1;
  for (int64_t i = 0; i < rs->cap; i++) {
    if (rs->slots[i].id < 0) continue;
    int64_t p = (int64_t)(rs->slots[i].hash & (uint64_t)(cap - 1));
    while (s[p].id >= 0) p = (p + 1) & (cap - 1);
    s[p] = rs->slots[i];
  }
  fsh_free(rs->slots);
  rs->slots = s;
  rs->cap = cap;
  return 0;
}

/* Keeps rows `rows`[0, n) of b's key columns (the new ids, in id order) as
 * a new owned batch. */
static int own_new_rows(hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols,
                        const int64_t *rows, int64_t n, fsh_error *err) {
  fsh_batch *proj = NULL, *kb = NULL;
  int rc = hs_grow((void **)&rs->owned, &rs->owned_cap, rs->n_owned + 1, sizeof(fsh_batch *), err);
  if (rc == 0) rc = hs_project_batch(b, rs->key_schema, key_cols, &proj, err);
  if (rc == 0) rc = fsh_take(proj, rows, n, &kb, err);
  if (rc == 0) rc = fsh_mem_set_add(&rs->owned_mem, kb, NULL, err);
  fsh_batch_unref(proj);
  if (rc != 0) {
    fsh_batch_unref(kb);
    return rc;
  }
  rs->owned[rs->n_owned++] = kb;
  return 0;
}

/* Slots ahead of the current row prefetched (the table is far larger than
 * the caches when there are many keys); the general path also prefetches
 * the key of the slot a row hashes to, HS_PREFETCH_KEY rows ahead (by then
 * the slot has arrived). */
#define HS_PREFETCH 16
#define HS_PREFETCH_KEY 8

/* b's key columns have the key schema's value types (dictionaries aside). */
static int check_key_types(const hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols,
                           fsh_error *err) {
  for (int k = 0; k < rs->n_keys; k++) {
    const fsh_field *f = &b->schema->fields[key_cols[k]], *kf = &rs->key_schema->fields[k];
    const fsh_field *vf = f->dictionary ? &f->dictionary->value : f;
    const fsh_field *kvf = kf->dictionary ? &kf->dictionary->value : kf;
    fsh_error diff;
    if (!fsh_field_type_equals(vf, kvf, &diff))
      return fsh_error_set(err, EINVAL, "key column '%s' differs in type: %s", f->name,
                           diff.message);
  }
  return 0;
}

static inline bool arena_equal(const uint8_t *a, const uint8_t *key, int64_t len) {
  uint32_t l;
  memcpy(&l, a, 4);
  return l == (uint64_t)len && memcmp(a + 4, key, (size_t)len) == 0;
}

/* The general path: keys encoded, hashed and compared as bytes. */
static int intern(hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols, bool insert,
                  bool skip_null_keys, int64_t *ids, uint64_t *hashes, int64_t *pending,
                  fsh_error *err) {
  int64_t n = b->length;
  fsh_row_keys *rk = NULL;
  int rc = fsh_row_keys_new(b, key_cols, rs->n_keys, NULL, &rk, err);
  if (rc == 0) rc = check_key_types(rs, b, key_cols, err);
  if (rc == 0 && insert && rs->n + n > INT32_MAX)
    rc = fsh_error_set(err, EOVERFLOW, "more than 2^31 - 1 distinct keys");
  int64_t *offs = NULL, *pos = NULL;
  uint8_t *nulls = NULL, *enc = NULL;
  if (rc == 0) {
    offs = fsh_malloc((size_t)(n + 1) * sizeof *offs);
    pos = fsh_malloc((size_t)n * sizeof *pos);
    nulls = skip_null_keys ? fsh_malloc((size_t)n) : NULL;
    if (!offs || !pos || (skip_null_keys && !nulls)) rc = hs_oom(err);
  }
  if (rc == 0) {
    fsh_row_keys_encoded_sizes(rk, n, offs, nulls);
    enc = fsh_malloc((size_t)(offs[n] ? offs[n] : 1));
    if (!enc) rc = hs_oom(err);
  }
  if (rc != 0) goto done;
  fsh_row_keys_encode(rk, n, offs, pos, enc);
  for (int64_t i = 0; i < n; i++) {
    int64_t len = offs[i + 1] - offs[i];
    if (len > UINT32_MAX) {
      rc = fsh_error_set(err, EOVERFLOW, "a key row of %lld bytes: at most 2^32 - 1",
                         (long long)len);
      goto done;
    }
    hashes[i] = XXH3_64bits_withSeed(enc + offs[i], (size_t)len, HS_SEED);
  }
  int64_t n_pending = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t mask = rs->cap - 1;
    if (i + HS_PREFETCH < n)
      __builtin_prefetch(&rs->slots[hash32(hashes[i + HS_PREFETCH]) & (uint64_t)mask]);
    if (i + HS_PREFETCH_KEY < n) { /* the key of the slot a later row lands on */
      const slot *sl = &rs->slots[hash32(hashes[i + HS_PREFETCH_KEY]) & (uint64_t)mask];
      if (sl->id >= 0) __builtin_prefetch(rs->arena + sl->key);
    }
    if (nulls && nulls[i]) {
      ids[i] = -1;
      continue;
    }
    uint32_t h = hash32(hashes[i]);
    const uint8_t *key = enc + offs[i];
    int64_t len = offs[i + 1] - offs[i], p = (int64_t)(h & (uint64_t)mask), id = -1;
    for (; rs->slots[p].id >= 0; p = (p + 1) & mask) {
      const slot *sl = &rs->slots[p];
      if (sl->hash == h && arena_equal(rs->arena + sl->key, key, len)) {
        id = sl->id;
        break;
      }
    }
    if (id < 0 && insert) {
      rc = hs_grow((void **)&rs->arena, &rs->arena_cap, rs->arena_len + 4 + len, 1, err);
      if (rc != 0) break;
      uint32_t l32 = (uint32_t)len;
      memcpy(rs->arena + rs->arena_len, &l32, 4);
      memcpy(rs->arena + rs->arena_len + 4, key, (size_t)len);
      id = rs->n++;
      pending[n_pending++] = i;
      rs->slots[p] = (slot){h, (int32_t)id, (uint64_t)rs->arena_len};
      rs->arena_len += 4 + len;
      if (rs->n * 2 > rs->cap && (rc = rehash(rs, err)) != 0) break;
    }
    ids[i] = id;
  }
  if (rc == 0 && n_pending > 0) rc = own_new_rows(rs, b, key_cols, pending, n_pending, err);
done:
  fsh_row_keys_free(rk);
  fsh_free(offs);
  fsh_free(pos);
  fsh_free(nulls);
  fsh_free(enc);
  return rc;
}

/* intern() on the fast path: hashes, then values compared in the slots. */
static int intern_fast(hs_rowset *rs, const fsh_batch *b, int32_t col, bool insert,
                       bool skip_null_keys, int64_t *ids, uint64_t *hashes, int64_t *pending,
                       fsh_error *err) {
  const fsh_field *f = &b->schema->fields[col];
  const fsh_field *vf = f->dictionary ? &f->dictionary->value : f;
  FSH_RETURN_NOT_OK(check_key_types(rs, b, &col, err));
  const fsh_array *a = b->columns[col], *va = f->dictionary ? a->dictionary : a;
  fast_col c = {kern_buf(va, 0), kern_buf(va, 1), va->offset, (int)(fsh_type_bit_width(vf) / 8),
                vf->type == FSH_TYPE_FLOAT16 || vf->type == FSH_TYPE_FLOAT32 ||
                    vf->type == FSH_TYPE_FLOAT64,
                NULL, NULL, 0, f->type};
  if (f->dictionary) {
    c.ivalid = kern_buf(a, 0);
    c.idx = kern_buf(a, 1);
    c.ioff = a->offset;
    c.off = va->offset;
  } else {
    c.off = a->offset;
  }
  int rc = fsh_hash_columns(b, &col, 1, HS_SEED, hashes, err);
  if (rc != 0) return rc;
  int64_t n_pending = 0;
  for (int64_t i = 0; i < b->length; i++) {
    if (i + HS_PREFETCH < b->length)
      __builtin_prefetch(&rs->slots[hash32(hashes[i + HS_PREFETCH]) & (uint64_t)(rs->cap - 1)]);
    uint64_t v;
    if (!fast_value(&c, i, &v)) {
      if (skip_null_keys) {
        ids[i] = -1;
      } else {
        if (rs->null_id < 0 && insert) {
          rs->null_id = rs->n++;
          pending[n_pending++] = i;
        }
        ids[i] = rs->null_id;
      }
      continue;
    }
    uint32_t h = hash32(hashes[i]);
    int64_t mask = rs->cap - 1, p = (int64_t)(h & (uint64_t)mask), id = -1;
    for (; rs->slots[p].id >= 0; p = (p + 1) & mask)
      if (rs->slots[p].key == v && rs->slots[p].hash == h) {
        id = rs->slots[p].id;
        break;
      }
    if (id < 0 && insert) {
      id = rs->n++;
      pending[n_pending++] = i;
      rs->slots[p] = (slot){h, (int32_t)id, v};
      if (rs->n * 2 > rs->cap && (rc = rehash(rs, err)) != 0) return rc;
    }
    ids[i] = id;
  }
  /* the new keys' rows, copied in id order (hs_rowset_keys) */
  return n_pending > 0 ? own_new_rows(rs, b, &col, pending, n_pending, err) : 0;
}

int hs_rowset_intern(hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols, bool insert,
                     bool skip_null_keys, int64_t *ids, fsh_error *err) {
  if (rs->poisoned) return fsh_error_set(err, EINVAL, "the hash table failed earlier");
  if (b->length == 0) return 0;
  if (b->length > INT32_MAX)
    return fsh_error_set(err, EINVAL, "a batch of %lld rows: at most 2^31 - 1",
                         (long long)b->length);
  uint64_t *hashes = fsh_malloc((size_t)b->length * sizeof(uint64_t));
  int64_t *pending = insert ? fsh_malloc((size_t)b->length * sizeof(int64_t)) : NULL;
  int rc;
  if (!hashes || (insert && !pending)) rc = hs_oom(err);
  else if (rs->fast)
    rc = intern_fast(rs, b, key_cols[0], insert, skip_null_keys, ids, hashes, pending, err);
  else rc = intern(rs, b, key_cols, insert, skip_null_keys, ids, hashes, pending, err);
  fsh_free(hashes);
  fsh_free(pending);
  if (rc != 0) rs->poisoned = true;
  return rc;
}

int hs_rowset_keys(hs_rowset *rs, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (rs->n_owned == 0) return hs_null_batch(rs->key_schema, 0, out, err);
  if (rs->n_owned == 1) {
    *out = fsh_batch_ref(rs->owned[0]);
    return 0;
  }
  return fsh_concat(rs->owned, rs->n_owned, out, err);
}

/* ---- helpers -------------------------------------------------------------- */

static fsh_buffer *zeroed(int64_t size) { return fsh_buffer_new(size, true); }

static int null_children(const fsh_field *f, fsh_array *a, int64_t n_each, int64_t n_first,
                         fsh_error *err) {
  for (int64_t c = 0; c < f->n_children; c++) {
    int rc = hs_null_array(&f->children[c], c == 0 ? n_first : n_each, &a->children[c], err);
    if (rc != 0) return rc;
  }
  return 0;
}

int hs_null_array(const fsh_field *f, int64_t n, fsh_array **out, fsh_error *err) {
  *out = NULL;
  fsh_type_id t = f->type;
  int nb = fsh_type_n_buffers(t);
  fsh_array *a = fsh_array_new(nb, f->n_children);
  if (!a) return hs_oom(err);
  a->length = n;
  a->null_count = fsh_type_is_union(t) && !f->dictionary ? 0 : n;
  int rc = 0;
  bool oom = false;
  if (f->dictionary) {
    oom = !(a->buffers[0] = zeroed(fsh_bytes_for_bits(n))) ||
          !(a->buffers[1] = zeroed(n * fsh_type_bit_width(f) / 8));
    if (!oom) rc = hs_null_array(&f->dictionary->value, 1, &a->dictionary, err);
  } else {
    switch (t) {
      case FSH_TYPE_NA: break;
      case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
      case FSH_TYPE_LARGE_STRING: {
        int w = t == FSH_TYPE_LARGE_BINARY || t == FSH_TYPE_LARGE_STRING ? 8 : 4;
        oom = !(a->buffers[0] = zeroed(fsh_bytes_for_bits(n))) ||
              !(a->buffers[1] = zeroed((n + 1) * w)) || !(a->buffers[2] = zeroed(0));
        break;
      }
      case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
        oom = !(a->buffers[0] = zeroed(fsh_bytes_for_bits(n))) ||
              !(a->buffers[1] = zeroed((n + 1) * (t == FSH_TYPE_LARGE_LIST ? 8 : 4)));
        if (!oom) rc = null_children(f, a, 0, 0, err);
        break;
      case FSH_TYPE_FIXED_SIZE_LIST:
        oom = !(a->buffers[0] = zeroed(fsh_bytes_for_bits(n)));
        if (!oom) rc = null_children(f, a, n * f->list_size, n * f->list_size, err);
        break;
      case FSH_TYPE_STRUCT:
        oom = !(a->buffers[0] = zeroed(fsh_bytes_for_bits(n)));
        if (!oom) rc = null_children(f, a, n, n, err);
        break;
      case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION: {
        bool dense = t == FSH_TYPE_DENSE_UNION;
        if (f->n_children < 1) {
          rc = fsh_error_set(err, ENOTSUP, "column '%s': a union without children has no null",
                             f->name);
          break;
        }
        oom = !(a->buffers[0] = fsh_buffer_new(n, false)) ||
              (dense && !(a->buffers[1] = fsh_buffer_new(n * 4, false)));
        if (oom) break;
        memset(a->buffers[0]->data, (int8_t)f->type_codes[0], (size_t)n);
        for (int64_t i = 0; dense && i < n; i++) {
          int32_t v = (int32_t)i;
          memcpy(a->buffers[1]->data + 4 * i, &v, 4);
        }
        rc = null_children(f, a, dense ? 0 : n, n, err);
        break;
      }
      default: /* fixed width and bool */
        oom = !(a->buffers[0] = zeroed(fsh_bytes_for_bits(n))) ||
              !(a->buffers[1] = zeroed(t == FSH_TYPE_BOOL ? fsh_bytes_for_bits(n)
                                                          : n * fsh_type_bit_width(f) / 8));
        break;
    }
  }
  if (oom) rc = hs_oom(err);
  if (rc != 0) {
    fsh_array_unref(a);
    return rc;
  }
  *out = a;
  return 0;
}

int hs_null_batch(fsh_schema *s, int64_t n, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  fsh_batch *b = fsh_batch_new(s, n);
  if (!b) return hs_oom(err);
  for (int64_t c = 0; c < s->n_fields; c++) {
    int rc = hs_null_array(&s->fields[c], n, &b->columns[c], err);
    if (rc != 0) {
      fsh_batch_unref(b);
      return rc;
    }
  }
  *out = b;
  return 0;
}

int hs_project_schema(const fsh_schema *s, const int32_t *cols, int n, fsh_schema **out,
                      fsh_error *err) {
  *out = NULL;
  fsh_schema *p = fsh_schema_new(n);
  if (!p) return hs_oom(err);
  for (int i = 0; i < n; i++)
    if (fsh_field_copy(&p->fields[i], &s->fields[cols[i]]) != 0) {
      fsh_schema_unref(p);
      return hs_oom(err);
    }
  *out = p;
  return 0;
}

int hs_project_batch(const fsh_batch *b, fsh_schema *ps, const int32_t *cols, fsh_batch **out,
                     fsh_error *err) {
  *out = NULL;
  fsh_batch *p = fsh_batch_new(ps, b->length);
  if (!p) return hs_oom(err);
  for (int64_t i = 0; i < ps->n_fields; i++) p->columns[i] = fsh_array_ref(b->columns[cols[i]]);
  *out = p;
  return 0;
}
