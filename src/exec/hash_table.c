/* hash_table.c -- the row set of the hash operators (interning key rows as
 * dense ids with an open-addressing table) and their small shared helpers:
 * null arrays, projections, memory accounting. */
#include "exec/hashops_internal.h"

#include "kernels/kernels_internal.h"

#include <string.h>

#define HS_SEED 0x5eed0f4a5bull

/* One slot, 16 bytes: the high 32 bits of the row hash (the table index
 * is their low bits, so a rehash needs nothing else), the id, and where
 * the id's key row lives: owned batch `batch` (-1: the batch being
 * interned), row `row`. Reading a slot is thus one cache line; comparing
 * keys touches the key row only when the 32 hash bits agree. */
typedef struct slot {
  uint32_t hash;
  int32_t id; /* -1: empty */
  union {
    struct {
      int32_t batch;
      int32_t row;
    } loc;
    uint64_t key; /* the fast path: the key's bytes themselves */
  };
} slot;

/* The fast path: one key column of an integer-like type of 1, 2, 4 or 8
 * bytes (integers, dates, times, timestamps, durations, month intervals;
 * not floats, whose NaN and -0.0 need the comparison) keeps the value in
 * the slot, so a lookup reads no key row; a null key is one id held aside.
 * A batch's column is read through its dictionary when it has one. */
typedef struct fast_col {
  const uint8_t *valid, *vals; /* of the values (the dictionary's if any) */
  int64_t off;
  int width;
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
  *v = x;
  return true;
}

static bool fast_type(const fsh_field *f) {
  switch (f->type) {
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32: case FSH_TYPE_INT64:
    case FSH_TYPE_UINT8: case FSH_TYPE_UINT16: case FSH_TYPE_UINT32: case FSH_TYPE_UINT64:
    case FSH_TYPE_DATE32: case FSH_TYPE_DATE64: case FSH_TYPE_TIME32: case FSH_TYPE_TIME64:
    case FSH_TYPE_TIMESTAMP: case FSH_TYPE_DURATION: case FSH_TYPE_INTERVAL_MONTHS:
      return !f->dictionary;
    default: return false;
  }
}

struct hs_rowset {
  fsh_schema *key_schema;
  int n_keys;
  int32_t *identity; /* 0, 1, ..., n_keys - 1: the key columns of an owned batch */
  slot *slots;
  int64_t cap; /* power of two */
  int64_t n;   /* ids */
  fsh_batch **owned;
  fsh_row_keys **owned_keys;
  int64_t n_owned, owned_cap;
  int64_t owned_bytes;
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
  rs->identity = fsh_malloc((size_t)(rs->n_keys ? rs->n_keys : 1) * sizeof(int32_t));
  rs->cap = 64;
  rs->slots = fsh_malloc((size_t)rs->cap * sizeof(slot));
  if (!rs->identity || !rs->slots) {
    fsh_free(rs->identity);
    fsh_free(rs->slots);
    fsh_free(rs);
    return hs_oom(err);
  }
  for (int i = 0; i < rs->n_keys; i++) rs->identity[i] = i;
  rs->fast = rs->n_keys == 1 && fast_type(&key_schema->fields[0]);
  rs->null_id = -1;
  for (int64_t i = 0; i < rs->cap; i++) rs->slots[i].id = -1;
  rs->key_schema = fsh_schema_ref(key_schema);
  *out = rs;
  return 0;
}

void hs_rowset_free(hs_rowset *rs) {
  if (!rs) return;
  for (int64_t i = 0; i < rs->n_owned; i++) {
    if (rs->owned_keys) fsh_row_keys_free(rs->owned_keys[i]);
    fsh_batch_unref(rs->owned[i]);
  }
  fsh_free(rs->owned);
  fsh_free(rs->owned_keys);
  fsh_free(rs->slots);
  fsh_free(rs->identity);
  fsh_schema_unref(rs->key_schema);
  fsh_free(rs);
}

int64_t hs_rowset_count(const hs_rowset *rs) { return rs->n; }

int64_t hs_rowset_memory(const hs_rowset *rs) {
  return rs->cap * (int64_t)sizeof(slot) +
         rs->owned_cap * (int64_t)(2 * sizeof(void *)) + rs->owned_bytes;
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

/* Copies the rows `rows` (ids first_id, first_id + 1, ...) of b's key
 * columns into a new owned batch and points their slots at it. */
static int own_new_rows(hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols,
                        const int64_t *rows, int64_t n, int64_t first_id, const uint64_t *hashes,
                        fsh_error *err) {
  fsh_batch *proj = NULL, *kb = NULL;
  fsh_row_keys *kk = NULL;
  int rc = hs_grow((void **)&rs->owned, &rs->owned_cap, rs->n_owned + 1, sizeof(fsh_batch *), err);
  if (rc == 0) { /* owned_keys keeps owned's capacity */
    void *q = fsh_realloc(rs->owned_keys, (size_t)rs->owned_cap * sizeof(fsh_row_keys *));
    if (!q) rc = hs_oom(err);
    else rs->owned_keys = q;
  }
  if (rc == 0) rc = hs_project_batch(b, rs->key_schema, key_cols, &proj, err);
  if (rc == 0) rc = fsh_take(proj, rows, n, &kb, err);
  if (rc == 0) rc = fsh_row_keys_new(kb, rs->identity, rs->n_keys, NULL, &kk, err);
  fsh_batch_unref(proj);
  if (rc != 0) {
    fsh_batch_unref(kb);
    return rc;
  }
  int32_t bi = (int32_t)rs->n_owned++;
  rs->owned[bi] = kb;
  rs->owned_keys[bi] = kk;
  rs->owned_bytes += hs_batch_bytes(kb);
  int64_t mask = rs->cap - 1;
  for (int64_t k = 0; k < n; k++) { /* find each new id's slot again */
    int64_t p = (int64_t)(hash32(hashes[rows[k]]) & (uint64_t)mask);
    while (rs->slots[p].id != first_id + k) p = (p + 1) & mask;
    rs->slots[p].loc.batch = bi;
    rs->slots[p].loc.row = (int32_t)k;
  }
  return 0;
}

/* Slots ahead of the current row prefetched (the table is far larger than
 * the caches when there are many keys). */
#define HS_PREFETCH 8

static int intern(hs_rowset *rs, const fsh_batch *b, const int32_t *key_cols, bool insert,
                  bool skip_null_keys, int64_t *ids, uint64_t *hashes, int64_t *pending,
                  fsh_error *err) {
  fsh_row_keys *rk = NULL;
  int rc = fsh_hash_columns(b, key_cols, rs->n_keys, HS_SEED, hashes, err);
  if (rc == 0) rc = fsh_row_keys_new(b, key_cols, rs->n_keys, NULL, &rk, err);
  if (rc == 0 && rs->n_owned > 0) rc = fsh_row_keys_check_compatible(rs->owned_keys[0], rk, err);
  if (rc == 0 && insert && rs->n + b->length > INT32_MAX)
    rc = fsh_error_set(err, EOVERFLOW, "more than 2^31 - 1 distinct keys");
  if (rc != 0) {
    fsh_row_keys_free(rk);
    return rc;
  }
  int64_t first_id = rs->n, n_pending = 0;
  for (int64_t i = 0; i < b->length; i++) {
    if (i + HS_PREFETCH < b->length)
      __builtin_prefetch(&rs->slots[hash32(hashes[i + HS_PREFETCH]) & (uint64_t)(rs->cap - 1)]);
    if (skip_null_keys && fsh_row_keys_any_null(rk, i)) {
      ids[i] = -1;
      continue;
    }
    uint32_t h = hash32(hashes[i]);
    int64_t mask = rs->cap - 1, p = (int64_t)(h & (uint64_t)mask), id = -1;
    for (; rs->slots[p].id >= 0; p = (p + 1) & mask) {
      const slot *sl = &rs->slots[p];
      if (sl->hash != h) continue;
      bool eq = sl->loc.batch < 0
                    ? fsh_row_keys_equal(rk, i, rk, sl->loc.row)
                    : fsh_row_keys_equal(rk, i, rs->owned_keys[sl->loc.batch], sl->loc.row);
      if (eq) {
        id = sl->id;
        break;
      }
    }
    if (id < 0 && insert) {
      id = rs->n++;
      pending[n_pending++] = i;
      rs->slots[p] = (slot){h, (int32_t)id, .loc = {-1, (int32_t)i}};
      if (rs->n * 2 > rs->cap && (rc = rehash(rs, err)) != 0) break;
    }
    ids[i] = id;
  }
  fsh_row_keys_free(rk);
  if (rc == 0 && n_pending > 0)
    rc = own_new_rows(rs, b, key_cols, pending, n_pending, first_id, hashes, err);
  return rc;
}

/* intern() on the fast path: hashes, then values compared in the slots. */
static int intern_fast(hs_rowset *rs, const fsh_batch *b, int32_t col, bool insert,
                       bool skip_null_keys, int64_t *ids, uint64_t *hashes, int64_t *pending,
                       fsh_error *err) {
  const fsh_field *f = &b->schema->fields[col];
  const fsh_field *vf = f->dictionary ? &f->dictionary->value : f;
  fsh_error diff;
  if (!fsh_field_type_equals(vf, &rs->key_schema->fields[0], &diff))
    return fsh_error_set(err, EINVAL, "key column '%s' differs in type: %s", f->name,
                         diff.message);
  const fsh_array *a = b->columns[col], *va = f->dictionary ? a->dictionary : a;
  fast_col c = {kern_buf(va, 0), kern_buf(va, 1), va->offset, (int)(fsh_type_bit_width(vf) / 8),
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
  int64_t n_pending = 0, first_id = rs->n;
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
      rs->slots[p] = (slot){h, (int32_t)id, .key = v};
      if (rs->n * 2 > rs->cap && (rc = rehash(rs, err)) != 0) return rc;
    }
    ids[i] = id;
  }
  (void)first_id;
  if (n_pending == 0) return 0;
  /* the new keys' rows, copied in id order (hs_rowset_keys) */
  fsh_batch *proj = NULL, *kb = NULL;
  rc = hs_grow((void **)&rs->owned, &rs->owned_cap, rs->n_owned + 1, sizeof(fsh_batch *), err);
  if (rc == 0) rc = hs_project_batch(b, rs->key_schema, &col, &proj, err);
  if (rc == 0) rc = fsh_take(proj, pending, n_pending, &kb, err);
  fsh_batch_unref(proj);
  if (rc != 0) return rc;
  rs->owned[rs->n_owned++] = kb;
  rs->owned_bytes += hs_batch_bytes(kb);
  return 0;
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

int64_t hs_array_bytes(const fsh_array *a) {
  if (!a) return 0;
  int64_t t = 0;
  for (int i = 0; i < a->n_buffers; i++)
    if (a->buffers[i]) t += a->buffers[i]->size;
  for (int64_t c = 0; c < a->n_children; c++) t += hs_array_bytes(a->children[c]);
  return t + hs_array_bytes(a->dictionary);
}

int64_t hs_batch_bytes(const fsh_batch *b) {
  int64_t t = 0;
  for (int64_t c = 0; c < b->n_columns; c++) t += hs_array_bytes(b->columns[c]);
  return t;
}
