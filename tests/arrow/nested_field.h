/* nested_field.h -- one richly nested field for the arrow tests: build it
 * (with every failure cleaned up, for allocation-failure loops) and check
 * its shape. */
#ifndef FSH_TEST_NESTED_FIELD_H
#define FSH_TEST_NESTED_FIELD_H

#include <errno.h>
#include <flightshuffle/arrow.h>

#include "test.h"

/* Builds, into root (uninitialised), the field
 * root: struct<
 *   ts: timestamp[us, tz=Europe/Paris] {"unit": "us"},
 *   l: list<item: int32 not null>,
 *   u: dense_union<a: utf8, b: fixed_size_binary[4]> codes {3, 9},
 *   d: dictionary<int16 -> decimal128(20, 4)> id 42 ordered,
 *   m: map<key: utf8, value: fixed_size_list<float64>[3]> sorted
 * > with metadata {"k1": "v1", "bin": "a\0b"}.
 * Returns 0, or an error code with root reset (nothing left allocated). */
static inline int nested_field_build(fsh_field *root) {
  int rc;
#define TRY(expr)                    \
  do {                               \
    if ((rc = (expr)) != 0) goto fail; \
  } while (0)
  TRY(fsh_field_init(root, "root", FSH_TYPE_STRUCT, true));
  TRY(fsh_metadata_add(&root->metadata, "k1", "v1", -1));
  TRY(fsh_metadata_add(&root->metadata, "bin", "a\0b", 3));
  TRY(fsh_field_alloc_children(root, 5));
  fsh_field *c = root->children;

  TRY(fsh_field_init(&c[0], "ts", FSH_TYPE_TIMESTAMP, true));
  c[0].unit = FSH_MICRO;
  TRY(fsh_field_set_timezone(&c[0], "Europe/Paris"));
  TRY(fsh_metadata_add(&c[0].metadata, "unit", "us", -1));

  TRY(fsh_field_init(&c[1], "l", FSH_TYPE_LIST, false));
  TRY(fsh_field_alloc_children(&c[1], 1));
  TRY(fsh_field_init(&c[1].children[0], "item", FSH_TYPE_INT32, false));

  TRY(fsh_field_init(&c[2], "u", FSH_TYPE_DENSE_UNION, true));
  TRY(fsh_field_alloc_children(&c[2], 2));
  TRY(fsh_field_init(&c[2].children[0], "a", FSH_TYPE_STRING, true));
  TRY(fsh_field_init(&c[2].children[1], "b", FSH_TYPE_FIXED_SIZE_BINARY, true));
  c[2].children[1].byte_width = 4;
  rc = ENOMEM;
  if (!(c[2].type_codes = fsh_malloc(2 * sizeof(int32_t)))) goto fail;
  c[2].type_codes[0] = 3;
  c[2].type_codes[1] = 9;

  TRY(fsh_field_init(&c[3], "d", FSH_TYPE_DECIMAL128, true));
  c[3].precision = 20;
  c[3].scale = 4;
  TRY(fsh_field_set_dictionary(&c[3], 42, FSH_TYPE_INT16, true));
  c[3].dictionary->value.precision = 20;
  c[3].dictionary->value.scale = 4;

  TRY(fsh_field_init(&c[4], "m", FSH_TYPE_MAP, true));
  c[4].keys_sorted = true;
  TRY(fsh_field_alloc_children(&c[4], 1));
  fsh_field *e = &c[4].children[0];
  TRY(fsh_field_init(e, "entries", FSH_TYPE_STRUCT, false));
  TRY(fsh_field_alloc_children(e, 2));
  TRY(fsh_field_init(&e->children[0], "key", FSH_TYPE_STRING, false));
  TRY(fsh_field_init(&e->children[1], "value", FSH_TYPE_FIXED_SIZE_LIST, true));
  e->children[1].list_size = 3;
  TRY(fsh_field_alloc_children(&e->children[1], 1));
  TRY(fsh_field_init(&e->children[1].children[0], "item", FSH_TYPE_FLOAT64, true));
  return 0;
fail:
  fsh_field_reset(root);
  return rc;
#undef TRY
}

/* Checks f has the shape nested_field_build() gives; `other`, when not
 * NULL, is a field that must share no memory with f. */
static inline void nested_field_check(const fsh_field *f, const fsh_field *other) {
  CHECK(strcmp(f->name, "root") == 0);
  CHECK(f->type == FSH_TYPE_STRUCT && f->nullable);
  CHECK_EQ_INT(f->metadata.n, 2);
  const fsh_kv *kv = fsh_metadata_find(&f->metadata, "bin");
  CHECK(kv != NULL && kv->value_len == 3 && memcmp(kv->value, "a\0b", 4) == 0);
  kv = fsh_metadata_find(&f->metadata, "k1");
  CHECK(kv != NULL && kv->value_len == 2 && strcmp(kv->value, "v1") == 0);
  CHECK(fsh_metadata_find(&f->metadata, "nope") == NULL);
  CHECK_EQ_INT(f->n_children, 5);
  const fsh_field *c = f->children;
  CHECK(c[0].type == FSH_TYPE_TIMESTAMP && c[0].unit == FSH_MICRO);
  CHECK(c[0].timezone && strcmp(c[0].timezone, "Europe/Paris") == 0);
  CHECK(fsh_metadata_find(&c[0].metadata, "unit") != NULL);
  CHECK(c[1].type == FSH_TYPE_LIST && !c[1].nullable && c[1].n_children == 1);
  CHECK(c[1].children[0].type == FSH_TYPE_INT32 && !c[1].children[0].nullable);
  CHECK(c[2].type == FSH_TYPE_DENSE_UNION && c[2].n_children == 2);
  CHECK(c[2].type_codes && c[2].type_codes[0] == 3 && c[2].type_codes[1] == 9);
  CHECK_EQ_INT(c[2].children[1].byte_width, 4);
  CHECK(c[3].type == FSH_TYPE_INT16 && c[3].dictionary != NULL);
  if (c[3].dictionary) {
    CHECK_EQ_INT(c[3].dictionary->id, 42);
    CHECK(c[3].dictionary->ordered);
    CHECK(c[3].dictionary->value.type == FSH_TYPE_DECIMAL128);
    CHECK_EQ_INT(c[3].dictionary->value.precision, 20);
    CHECK_EQ_INT(c[3].dictionary->value.scale, 4);
  }
  CHECK(c[4].type == FSH_TYPE_MAP && c[4].keys_sorted && c[4].n_children == 1);
  const fsh_field *v = &c[4].children[0].children[1];
  CHECK(v->type == FSH_TYPE_FIXED_SIZE_LIST && v->list_size == 3);
  CHECK(v->children[0].type == FSH_TYPE_FLOAT64);
  if (other) {
    CHECK(f->name != other->name);
    CHECK(f->children != other->children);
    CHECK(f->metadata.items != other->metadata.items);
    CHECK(f->metadata.items[1].value != other->metadata.items[1].value);
    CHECK(c[0].timezone != other->children[0].timezone);
    CHECK(c[2].type_codes != other->children[2].type_codes);
    CHECK(c[3].dictionary != other->children[3].dictionary);
    CHECK(c[4].children[0].children[1].children != other->children[4].children[0].children[1].children);
  }
}

#endif
