/* test_buffer.c -- refcounted buffers: owned allocation (64-byte alignment,
 * zeroed padding), copies, views, foreign wrappers, refcounts and resize. */
#include <errno.h>
#include <stdint.h>

#include <flightshuffle/arrow.h>

#include "test.h"

static bool all_zero(const uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

static void test_new_alignment_padding(void) {
  static const int64_t sizes[] = {0, 1, 7, 63, 64, 65, 100, 1000, 4096};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    for (int zeroed = 0; zeroed < 2; zeroed++) {
      fsh_buffer *b = fsh_buffer_new(sizes[k], zeroed);
      CHECK(b != NULL);
      if (!b) continue;
      CHECK_EQ_INT(b->size, sizes[k]);
      CHECK(b->capacity >= sizes[k] && b->capacity > 0);
      CHECK_EQ_INT(b->capacity % 64, 0);
      CHECK_EQ_INT((uintptr_t)b->data % 64, 0);
      CHECK_EQ_INT(atomic_load(&b->refcount), 1);
      CHECK(b->parent == NULL && b->release == NULL);
      /* padding is always zero; with zeroed the contents too */
      CHECK(all_zero(b->data + b->size, b->capacity - b->size));
      if (zeroed) CHECK(all_zero(b->data, b->size));
      memset(b->data, 0xab, (size_t)b->size); /* the whole size is writable */
      fsh_buffer_unref(b);
    }
  }
  CHECK(fsh_buffer_new(-1, false) == NULL);
  CHECK(fsh_buffer_new(INT64_MAX, false) == NULL);
}

static void test_copy(void) {
  const char text[] = "hello, buffers";
  fsh_buffer *b = fsh_buffer_copy(text, sizeof text);
  CHECK(b != NULL);
  CHECK(b->data != (const uint8_t *)text);
  CHECK(memcmp(b->data, text, sizeof text) == 0);
  CHECK(all_zero(b->data + b->size, b->capacity - b->size));
  fsh_buffer_unref(b);
  b = fsh_buffer_copy(NULL, 0);
  CHECK(b != NULL && b->size == 0);
  fsh_buffer_unref(b);
}

static void test_refcounts(void) {
  fsh_buffer *b = fsh_buffer_new(16, true);
  CHECK(fsh_buffer_ref(b) == b);
  CHECK_EQ_INT(atomic_load(&b->refcount), 2);
  fsh_buffer_unref(b);
  CHECK_EQ_INT(atomic_load(&b->refcount), 1);
  fsh_buffer_unref(b);
  fsh_buffer_unref(NULL);
  CHECK(fsh_buffer_ref(NULL) == NULL);
}

static void test_slice(void) {
  fsh_buffer *root = fsh_buffer_new(100, false);
  for (int i = 0; i < 100; i++) root->data[i] = (uint8_t)i;
  fsh_buffer *s = fsh_buffer_slice(root, 10, 50);
  CHECK(s != NULL);
  CHECK(s->data == root->data + 10); /* shares memory */
  CHECK_EQ_INT(s->size, 50);
  CHECK(s->parent == root);
  CHECK_EQ_INT(atomic_load(&root->refcount), 2);
  /* a view of a view points at the root */
  fsh_buffer *ss = fsh_buffer_slice(s, 5, 10);
  CHECK(ss != NULL);
  CHECK(ss->data == root->data + 15);
  CHECK(ss->parent == root);
  CHECK_EQ_INT(ss->data[0], 15);
  CHECK_EQ_INT(atomic_load(&root->refcount), 3);
  CHECK_EQ_INT(atomic_load(&s->refcount), 1);
  /* bounds */
  CHECK(fsh_buffer_slice(root, 0, 101) == NULL);
  CHECK(fsh_buffer_slice(root, 101, 0) == NULL);
  CHECK(fsh_buffer_slice(root, -1, 5) == NULL);
  CHECK(fsh_buffer_slice(root, 5, -1) == NULL);
  CHECK(fsh_buffer_slice(root, INT64_MAX, 1) == NULL);
  CHECK(fsh_buffer_slice(s, 0, 51) == NULL);
  CHECK(fsh_buffer_slice(NULL, 0, 0) == NULL);
  fsh_buffer *empty = fsh_buffer_slice(root, 100, 0);
  CHECK(empty != NULL && empty->size == 0);
  fsh_buffer_unref(empty);
  /* views keep the root alive after its owner lets go */
  fsh_buffer_unref(root);
  fsh_buffer_unref(s);
  CHECK_EQ_INT(ss->data[9], 24); /* ASan: still allocated */
  fsh_buffer_unref(ss);
}

typedef struct release_probe {
  int calls;
} release_probe;

static void probe_release(void *ctx) { ((release_probe *)ctx)->calls++; }

static void test_wrap(void) {
  static const uint8_t foreign[32] = {1, 2, 3};
  release_probe probe = {0};
  fsh_buffer *w = fsh_buffer_wrap(foreign, sizeof foreign, probe_release, &probe);
  CHECK(w != NULL);
  CHECK(w->data == foreign); /* no copy */
  CHECK_EQ_INT(w->size, 32);
  fsh_buffer *v = fsh_buffer_slice(w, 1, 2);
  CHECK(v != NULL && v->data == foreign + 1);
  fsh_buffer_ref(w);
  fsh_buffer_unref(w);
  fsh_buffer_unref(w);
  CHECK_EQ_INT(probe.calls, 0); /* the view still holds it */
  fsh_buffer_unref(v);
  CHECK_EQ_INT(probe.calls, 1);
  CHECK(fsh_buffer_wrap(foreign, -1, NULL, NULL) == NULL);
}

/* A buffer wrapped without a release callback borrows its memory: the last
 * unref must not free it. */
static void test_wrap_no_release(void) {
  static const uint8_t foreign[8] = {1};
  fsh_buffer *w = fsh_buffer_wrap(foreign, 3, NULL, NULL);
  CHECK(w != NULL);
  fsh_buffer_unref(w); /* must not free `foreign` */
  CHECK_EQ_INT(foreign[0], 1);
}

static void test_resize(void) {
  fsh_error err = {{0}};
  fsh_buffer *b = fsh_buffer_new(10, false);
  for (int i = 0; i < 10; i++) b->data[i] = (uint8_t)(i + 1);
  uint8_t *before = b->data;
  /* within capacity: same memory */
  CHECK_OK(fsh_buffer_resize(b, 60, &err));
  CHECK(b->data == before);
  CHECK_EQ_INT(b->size, 60);
  /* grow beyond capacity: contents kept, new bytes and padding zero */
  CHECK_OK(fsh_buffer_resize(b, 1000, &err));
  CHECK_EQ_INT(b->size, 1000);
  CHECK(b->capacity >= 1000 && b->capacity % 64 == 0);
  CHECK_EQ_INT((uintptr_t)b->data % 64, 0);
  for (int i = 0; i < 10; i++) CHECK_EQ_INT(b->data[i], i + 1);
  CHECK(all_zero(b->data + 10, b->capacity - 10));
  /* shrink: the dropped tail becomes zeroed padding */
  memset(b->data, 0x5a, 1000);
  CHECK_OK(fsh_buffer_resize(b, 3, &err));
  CHECK_EQ_INT(b->size, 3);
  CHECK_EQ_INT(b->data[2], 0x5a);
  CHECK(all_zero(b->data + 3, b->capacity - 3));
  CHECK_OK(fsh_buffer_resize(b, 0, &err));
  CHECK_EQ_INT(b->size, 0);
  CHECK(fsh_buffer_resize(b, -1, &err) == EINVAL);
  CHECK(strstr(err.message, "negative") != NULL);
  /* views and wrappers cannot be resized */
  fsh_buffer *v = fsh_buffer_slice(b, 0, 0);
  CHECK(fsh_buffer_resize(v, 8, &err) == EINVAL);
  CHECK(fsh_buffer_resize(v, 8, NULL) == EINVAL);
  fsh_buffer_unref(v);
  static const uint8_t foreign[4];
  release_probe probe = {0};
  fsh_buffer *w = fsh_buffer_wrap(foreign, 4, probe_release, &probe);
  CHECK(fsh_buffer_resize(w, 2, &err) == EINVAL);
  fsh_buffer_unref(w);
  CHECK_EQ_INT(probe.calls, 1);
  fsh_buffer_unref(b);
}

/* Grows one byte at a time: a builder's access pattern. */
static void test_resize_many(void) {
  fsh_error err = {{0}};
  fsh_buffer *b = fsh_buffer_new(0, false);
  for (int i = 0; i < 5000; i++) {
    CHECK_OK(fsh_buffer_resize(b, i + 1, &err));
    b->data[i] = (uint8_t)(i * 7);
  }
  int bad = 0;
  for (int i = 0; i < 5000; i++) bad += b->data[i] != (uint8_t)(i * 7);
  CHECK_EQ_INT(bad, 0);
  CHECK(all_zero(b->data + b->size, b->capacity - b->size));
  fsh_buffer_unref(b);
}

/* Many threads taking and dropping references: the count ends where it
 * started (atomic refcounts). */
#include <pthread.h>
static void *ref_worker(void *arg) {
  fsh_buffer *b = arg;
  for (int i = 0; i < 100000; i++) {
    fsh_buffer_ref(b);
    fsh_buffer_unref(b);
  }
  return NULL;
}

static void test_refcount_threads(void) {
  fsh_buffer *b = fsh_buffer_new(8, true);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, ref_worker, b);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CHECK_EQ_INT(atomic_load(&b->refcount), 1);
  fsh_buffer_unref(b);
}

FSH_TEST_MAIN(TEST(test_new_alignment_padding), TEST(test_copy), TEST(test_refcounts),
              TEST(test_slice), TEST(test_wrap), TEST(test_wrap_no_release), TEST(test_resize), TEST(test_resize_many),
              TEST(test_refcount_threads))
