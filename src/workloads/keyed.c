/* keyed.c -- the keyed table (id, key, grp, amount): joins, group-bys and
 * the shuffle property tests (skewed keys, null keys); deterministic from a
 * seed, row r the same whatever the batching. */
#include <flightshuffle/workloads.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

static uint64_t kmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* A uniform double in [0, 1) from x. */
static double unit(uint64_t x) { return (double)(kmix(x) >> 11) / 9007199254740992.0; }

fsh_schema *fsh_keyed_schema(void) {
  fsh_schema *s = fsh_schema_new(4);
  if (!s) return NULL;
  if (fsh_field_init(&s->fields[0], "id", FSH_TYPE_INT64, false) ||
      fsh_field_init(&s->fields[1], "key", FSH_TYPE_INT64, true) ||
      fsh_field_init(&s->fields[2], "grp", FSH_TYPE_STRING, false) ||
      fsh_field_init(&s->fields[3], "amount", FSH_TYPE_INT64, false)) {
    fsh_schema_unref(s);
    return NULL;
  }
  return s;
}

static int build(fsh_batch *b, const fsh_keyed_options *o, int64_t first, int64_t rows) {
  int64_t range = o->key_range > 0 ? o->key_range : 1000;
  int32_t groups = o->groups > 0 ? o->groups : 16;
  fsh_array *id = b->columns[0] = fsh_array_new(2, 0);
  fsh_array *key = b->columns[1] = fsh_array_new(2, 0);
  fsh_array *grp = b->columns[2] = fsh_array_new(3, 0);
  fsh_array *amt = b->columns[3] = fsh_array_new(2, 0);
  if (!id || !key || !grp || !amt) return ENOMEM;
  id->length = key->length = grp->length = amt->length = rows;
  if (!(id->buffers[1] = fsh_buffer_new(rows * 8, false)) ||
      !(key->buffers[1] = fsh_buffer_new(rows * 8, false)) ||
      !(amt->buffers[1] = fsh_buffer_new(rows * 8, false)) ||
      !(grp->buffers[1] = fsh_buffer_new((rows + 1) * 4, false)) ||
      !(grp->buffers[2] = fsh_buffer_new(rows * 11 + 1, false)))
    return ENOMEM;
  int64_t *ids = (int64_t *)(void *)id->buffers[1]->data;
  int64_t *keys = (int64_t *)(void *)key->buffers[1]->data;
  int64_t *amts = (int64_t *)(void *)amt->buffers[1]->data;
  int32_t *offs = (int32_t *)(void *)grp->buffers[1]->data;
  char *chars = (char *)grp->buffers[2]->data;
  uint8_t *valid = NULL;
  if (o->null_fraction > 0) {
    if (!(key->buffers[0] = fsh_buffer_new(fsh_bytes_for_bits(rows), true))) return ENOMEM;
    valid = key->buffers[0]->data;
    key->null_count = 0;
  }
  offs[0] = 0;
  for (int64_t i = 0; i < rows; i++) {
    uint64_t r = (uint64_t)(first + i), s = o->seed * 0x2545F4914F6CDD1Dull;
    ids[i] = first + i;
    keys[i] = unit(s ^ (r * 4 + 1)) < o->skew ? 0 : (int64_t)(kmix(s ^ (r * 4 + 2)) % (uint64_t)range);
    if (valid) {
      bool v = unit(s ^ (r * 4 + 3)) >= o->null_fraction;
      fsh_bit_set(valid, i, v);
      if (!v) keys[i] = 0, key->null_count++;
    }
    amts[i] = (int64_t)(kmix(s ^ (r * 4 + 4)) % 2001) - 1000;
    int n = snprintf(chars + offs[i], 12, "g%d", (int)(kmix(s ^ (r * 4 + 5)) % (uint64_t)groups));
    offs[i + 1] = offs[i] + n;
  }
  grp->buffers[2]->size = offs[rows];
  return 0;
}

int fsh_keyed_batch(fsh_schema *schema, const fsh_keyed_options *o, int64_t first_row,
                    int64_t rows, fsh_batch **out, fsh_error *err) {
  if (rows < 0 || first_row < 0 || !schema || schema->n_fields != 4 || o->skew < 0 ||
      o->skew > 1 || o->null_fraction < 0 || o->null_fraction > 1 || o->groups > 1000000000)
    return fsh_error_set(err, EINVAL,
                         "keyed batch: bad arguments (first row %lld, rows %lld, skew %g, null "
                         "fraction %g, groups %d)",
                         (long long)first_row, (long long)rows, o->skew, o->null_fraction,
                         (int)o->groups);
  fsh_batch *b = fsh_batch_new(schema, rows);
  if (!b) return fsh_error_set(err, ENOMEM, "keyed batch: out of memory");
  int rc = build(b, o, first_row, rows);
  if (rc) {
    fsh_batch_unref(b);
    return fsh_error_set(err, rc, "keyed batch: out of memory for %lld rows", (long long)rows);
  }
  *out = b;
  return 0;
}
