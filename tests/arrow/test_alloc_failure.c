/* test_alloc_failure.c -- SQLite-style allocation-failure loops over the
 * core: fail the Nth allocation of an operation for N = 1, 2, ... until it
 * succeeds, once transiently and once persistently. Every failed attempt
 * must return ENOMEM (or NULL) with no block left allocated, and an
 * operation may only succeed once N is past its last allocation (no
 * failure is swallowed). A counting allocator installed through
 * fsh_allocator_set tracks live blocks; LSan double-checks at exit. */
#include <stdint.h>

#include "nested_field.h"
#include "validate_helpers.h"

/* ---- a counting allocator over the default one ------------------------- */

static fsh_allocator base;
static int64_t live_blocks;

static void *count_alloc(void *ctx, size_t size, size_t align) {
  void *p = base.alloc(base.ctx, size, align);
  if (p) live_blocks++;
  return p;
}
static void *count_realloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
  return base.realloc(base.ctx, ptr, old_size, new_size);
}
static void count_free(void *ctx, void *ptr, size_t size) {
  if (ptr) live_blocks--;
  base.free(base.ctx, ptr, size);
}

static void counting_on(void) {
  fsh_allocator_set(NULL);
  base = *fsh_allocator_get();
  fsh_allocator counting = {count_alloc, count_realloc, count_free, NULL};
  fsh_allocator_set(&counting);
  live_blocks = 0;
}
static void counting_off(void) {
  CHECK_EQ_INT(live_blocks, 0);
  fsh_allocator_set(NULL);
}

/* ---- the loop ---------------------------------------------------------- */

/* An operation under test: returns 0 and leaves its result in ctx, or an
 * error code having freed everything it allocated. `done` releases a
 * successful result. */
typedef struct op {
  const char *name;
  int (*run)(void *ctx);
  void (*done)(void *ctx);
  void *ctx;
} op;

static void failure_loop(const op *o) {
  /* how many allocations does it make when nothing fails? */
  int64_t live0 = live_blocks, before = fsh_alloc_count();
  CHECK_MSG(o->run(o->ctx) == 0, "%s: fails without injected failures", o->name);
  int64_t allocs = fsh_alloc_count() - before;
  o->done(o->ctx);
  CHECK_MSG(live_blocks == live0, "%s: leaks %lld blocks", o->name, (long long)(live_blocks - live0));
  CHECK_MSG(allocs > 0, "%s: makes no allocation", o->name);

  for (int persistent = 0; persistent < 2; persistent++) {
    int64_t n;
    for (n = 1; n <= allocs + 1; n++) {
      live0 = live_blocks;
      fsh_alloc_fail_after(n, persistent);
      int rc = o->run(o->ctx);
      fsh_alloc_fail_after(0, false);
      if (rc == 0) {
        o->done(o->ctx);
        CHECK_MSG(n == allocs + 1, "%s: succeeded although allocation %lld of %lld failed (%s)",
                  o->name, (long long)n, (long long)allocs, persistent ? "persistent" : "transient");
        CHECK_MSG(live_blocks == live0, "%s: leaks after success", o->name);
        break;
      }
      CHECK_MSG(rc == ENOMEM, "%s: allocation %lld failed -> %d, want ENOMEM", o->name,
                (long long)n, rc);
      CHECK_MSG(live_blocks == live0, "%s: allocation %lld failed (%s): %lld blocks leaked",
                o->name, (long long)n, persistent ? "persistent" : "transient",
                (long long)(live_blocks - live0));
    }
    CHECK_MSG(n == allocs + 1, "%s: never succeeded", o->name);
  }
}

/* ---- operations -------------------------------------------------------- */

static int op_build_field(void *ctx) { return nested_field_build(ctx); }
static void done_field(void *ctx) {
  nested_field_check(ctx, NULL);
  fsh_field_reset(ctx);
}

typedef struct copy_ctx {
  fsh_field src, dst;
} copy_ctx;
static int op_copy_field(void *ctx) {
  copy_ctx *c = ctx;
  return fsh_field_copy(&c->dst, &c->src);
}
static void done_copy_field(void *ctx) {
  copy_ctx *c = ctx;
  nested_field_check(&c->dst, &c->src);
  fsh_field_reset(&c->dst);
}

/* Deep copy of a schema, the way a reader or a projection makes one. */
static int schema_copy(const fsh_schema *src, fsh_schema **out) {
  fsh_schema *s = fsh_schema_new(src->n_fields);
  if (!s) return ENOMEM;
  int rc = fsh_metadata_copy(&s->metadata, &src->metadata);
  for (int64_t i = 0; rc == 0 && i < src->n_fields; i++)
    rc = fsh_field_copy(&s->fields[i], &src->fields[i]);
  if (rc != 0) {
    fsh_schema_unref(s);
    return rc;
  }
  *out = s;
  return 0;
}

typedef struct schema_ctx {
  fsh_schema *src, *dst;
} schema_ctx;
static int op_copy_schema(void *ctx) {
  schema_ctx *c = ctx;
  return schema_copy(c->src, &c->dst);
}
static void done_copy_schema(void *ctx) {
  schema_ctx *c = ctx;
  CHECK_EQ_INT(c->dst->n_fields, 3);
  CHECK_EQ_INT(c->dst->metadata.n, 2);
  nested_field_check(&c->dst->fields[1], &c->src->fields[1]);
  fsh_schema_unref(c->dst);
  c->dst = NULL;
}

typedef struct batch_ctx {
  fsh_batch *src, *dst;
} batch_ctx;
static int op_slice_batch(void *ctx) {
  batch_ctx *c = ctx;
  c->dst = fsh_batch_slice(c->src, 1, 2);
  return c->dst ? 0 : ENOMEM;
}
static void done_slice_batch(void *ctx) {
  batch_ctx *c = ctx;
  fsh_error err = {{0}};
  CHECK_OK(fsh_batch_validate(c->dst, true, &err));
  fsh_batch_unref(c->dst);
  c->dst = NULL;
}

typedef struct array_ctx {
  fsh_array *src, *dst;
} array_ctx;
static int op_slice_array(void *ctx) {
  array_ctx *c = ctx;
  c->dst = fsh_array_slice(c->src, 1, 1);
  return c->dst ? 0 : ENOMEM;
}
static void done_slice_array(void *ctx) {
  array_ctx *c = ctx;
  fsh_array_unref(c->dst);
}

typedef struct buffer_ctx {
  fsh_buffer *root, *made;
} buffer_ctx;
static void release_noop(void *ctx) {}
static int op_buffers(void *ctx) {
  buffer_ctx *c = ctx;
  fsh_buffer *a = fsh_buffer_new(100, true);
  fsh_buffer *b = fsh_buffer_copy("abc", 3);
  fsh_buffer *v = fsh_buffer_slice(c->root, 2, 4);
  fsh_buffer *w = fsh_buffer_wrap(c->root->data, 8, release_noop, NULL);
  int rc = a && b && v && w ? 0 : ENOMEM;
  fsh_buffer_unref(a);
  fsh_buffer_unref(b);
  fsh_buffer_unref(v);
  fsh_buffer_unref(w);
  return rc;
}
static void done_nothing(void *ctx) {}

/* Growing past capacity fails cleanly: the buffer keeps size and contents. */
static int op_resize(void *ctx) {
  buffer_ctx *c = ctx;
  fsh_buffer *b = fsh_buffer_new(10, false);
  if (!b) return ENOMEM;
  memcpy(b->data, "0123456789", 10);
  fsh_error err = {{0}};
  int rc = fsh_buffer_resize(b, 5000, &err);
  if (rc != 0) {
    CHECK_EQ_INT(b->size, 10);
    CHECK(memcmp(b->data, "0123456789", 10) == 0);
    CHECK(strstr(err.message, "out of memory") != NULL);
    fsh_buffer_unref(b);
    return rc;
  }
  c->made = b;
  return 0;
}
static void done_resize(void *ctx) {
  buffer_ctx *c = ctx;
  CHECK(memcmp(c->made->data, "0123456789", 10) == 0);
  fsh_buffer_unref(c->made);
}

/* Metadata grows one entry at a time: a failed add keeps the others. */
static int op_metadata(void *ctx) {
  fsh_metadata m = {0};
  int rc = 0;
  char key[16];
  for (int i = 0; rc == 0 && i < 6; i++) {
    snprintf(key, sizeof key, "k%d", i);
    rc = fsh_metadata_add(&m, key, "value", -1);
    if (rc != 0) CHECK_EQ_INT(m.n, i);
  }
  for (int64_t i = 0; i < m.n; i++) CHECK(strcmp(m.items[i].value, "value") == 0);
  fsh_metadata_reset(&m);
  return rc;
}

/* ---- tests ------------------------------------------------------------- */

static void test_build_nested_field(void) {
  counting_on();
  fsh_field f;
  op o = {"build nested field", op_build_field, done_field, &f};
  failure_loop(&o);
  counting_off();
}

static void test_copy_nested_field(void) {
  counting_on();
  copy_ctx c;
  CHECK(nested_field_build(&c.src) == 0);
  op o = {"copy nested field", op_copy_field, done_copy_field, &c};
  failure_loop(&o);
  fsh_field_reset(&c.src);
  counting_off();
}

static void test_copy_schema(void) {
  counting_on();
  schema_ctx c = {fsh_schema_new(3), NULL};
  CHECK(fsh_field_init(&c.src->fields[0], "id", FSH_TYPE_INT64, false) == 0);
  CHECK(nested_field_build(&c.src->fields[1]) == 0);
  CHECK(fsh_field_init(&c.src->fields[2], "name", FSH_TYPE_STRING, true) == 0);
  CHECK(fsh_metadata_add(&c.src->metadata, "origin", "test", -1) == 0);
  CHECK(fsh_metadata_add(&c.src->metadata, "empty", "", 0) == 0);
  op o = {"copy schema", op_copy_schema, done_copy_schema, &c};
  failure_loop(&o);
  fsh_schema_unref(c.src);
  counting_off();
}

static void test_slice_batch(void) {
  counting_on();
  fsh_schema *schema = fsh_schema_new(3);
  CHECK(fsh_field_init(&schema->fields[0], "a", FSH_TYPE_INT32, true) == 0);
  CHECK(fsh_field_init(&schema->fields[1], "s", FSH_TYPE_STRING, true) == 0);
  fsh_field *st = &schema->fields[2];
  CHECK(fsh_field_init(st, "st", FSH_TYPE_STRUCT, true) == 0);
  CHECK(fsh_field_alloc_children(st, 1) == 0);
  CHECK(fsh_field_init(&st->children[0], "d", FSH_TYPE_STRING, true) == 0);
  CHECK(fsh_field_set_dictionary(&st->children[0], 1, FSH_TYPE_INT8, false) == 0);
  batch_ctx c = {fsh_batch_new(schema, 4), NULL};
  int32_t v[] = {1, 2, 3, 4};
  int32_t off[] = {0, 1, 2, 3, 4};
  int8_t idx[] = {0, 1, 1, 0};
  c.src->columns[0] = tb_int32(v, 4);
  c.src->columns[1] = tb_string(off, 4, "wxyz", tb_bits("1101"), 1);
  fsh_array *sa = tb_array(1, 1, 4, 0, NULL, NULL, NULL);
  sa->children[0] = tb_array(2, 0, 4, 0, NULL, tb_bytes(idx, 4), NULL);
  sa->children[0]->dictionary = tb_string(off, 2, "wx", NULL, 0);
  c.src->columns[2] = sa;
  fsh_error err = {{0}};
  CHECK_OK(fsh_batch_validate(c.src, true, &err));
  op o = {"slice batch", op_slice_batch, done_slice_batch, &c};
  failure_loop(&o);
  fsh_batch_unref(c.src);
  fsh_schema_unref(schema);
  counting_off();
}

static void test_slice_array(void) {
  counting_on();
  int32_t v[] = {1, 2, 3};
  array_ctx c = {tb_array(2, 2, 3, 1, tb_bits("101"), tb_bytes(v, sizeof v), NULL), NULL};
  c.src->children[0] = tb_int32(v, 3);
  c.src->children[1] = tb_int32(v, 3);
  op o = {"slice array", op_slice_array, done_slice_array, &c};
  failure_loop(&o);
  fsh_array_unref(c.src);
  counting_off();
}

static void test_buffers(void) {
  counting_on();
  buffer_ctx c = {fsh_buffer_new(16, true), NULL};
  op o = {"buffer new/copy/slice/wrap", op_buffers, done_nothing, &c};
  failure_loop(&o);
  op r = {"buffer resize", op_resize, done_resize, &c};
  failure_loop(&r);
  fsh_buffer_unref(c.root);
  counting_off();
}

static void test_metadata(void) {
  counting_on();
  op o = {"metadata add", op_metadata, done_nothing, NULL};
  failure_loop(&o);
  counting_off();
}

/* Validation allocates nothing, so it cannot fail for lack of memory. */
static void test_validate_allocates_nothing(void) {
  fsh_field f;
  CHECK(nested_field_build(&f) == 0);
  fsh_field *list = &f.children[1];
  int32_t off[] = {0, 2, 3};
  int32_t v[] = {1, 2, 3};
  fsh_array *a = tb_array(2, 1, 2, 0, NULL, tb_bytes(off, sizeof off), NULL);
  a->children[0] = tb_int32(v, 3);
  int64_t before = fsh_alloc_count();
  fsh_alloc_fail_after(1, true);
  fsh_error err = {{0}};
  CHECK_OK(fsh_array_validate(list, a, true, &err));
  a->length = 3;
  CHECK(fsh_array_validate(list, a, true, &err) == EINVAL);
  fsh_alloc_fail_after(0, false);
  CHECK_EQ_INT(fsh_alloc_count(), before);
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

FSH_TEST_MAIN(TEST(test_build_nested_field), TEST(test_copy_nested_field), TEST(test_copy_schema),
              TEST(test_slice_batch), TEST(test_slice_array), TEST(test_buffers),
              TEST(test_metadata), TEST(test_validate_allocates_nothing))
