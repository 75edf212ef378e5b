/* validate_helpers.h -- small builders the arrow tests share: buffers from
 * literals and bit patterns, arrays from buffers, fields in one call, and
 * EXPECT_VALID / EXPECT_INVALID checks on fsh_array_validate. */
#ifndef FSH_TEST_VALIDATE_HELPERS_H
#define FSH_TEST_VALIDATE_HELPERS_H

#include <errno.h>
#include <flightshuffle/arrow.h>

#include "test.h"

/* A new owned buffer holding a copy of p[0, n). */
static inline fsh_buffer *tb_bytes(const void *p, int64_t n) {
  fsh_buffer *b = fsh_buffer_copy(p, n);
  CHECK(b != NULL);
  return b;
}

/* A bitmap from a pattern of '1' (set) and '0' (unset), bit 0 first. */
static inline fsh_buffer *tb_bits(const char *pattern) {
  int64_t n = (int64_t)strlen(pattern);
  fsh_buffer *b = fsh_buffer_new(fsh_bytes_for_bits(n), true);
  CHECK(b != NULL);
  for (int64_t i = 0; i < n; i++) fsh_bit_set(b->data, i, pattern[i] == '1');
  return b;
}

/* An array owning the given buffers (any may be NULL). */
static inline fsh_array *tb_array(int32_t n_buffers, int64_t n_children, int64_t length,
                                  int64_t null_count, fsh_buffer *b0, fsh_buffer *b1,
                                  fsh_buffer *b2) {
  fsh_array *a = fsh_array_new(n_buffers, n_children);
  CHECK(a != NULL);
  a->length = length;
  a->null_count = null_count;
  fsh_buffer *bufs[3] = {b0, b1, b2};
  for (int i = 0; i < 3; i++) {
    if (i < n_buffers)
      a->buffers[i] = bufs[i];
    else
      fsh_buffer_unref(bufs[i]);
  }
  return a;
}

/* An int32 array of n values with no validity bitmap. */
static inline fsh_array *tb_int32(const int32_t *v, int64_t n) {
  return tb_array(2, 0, n, 0, NULL, tb_bytes(v, n * 4), NULL);
}

/* A utf8/binary array; offsets has n+1 entries. */
static inline fsh_array *tb_string(const int32_t *offsets, int64_t n, const char *data,
                                   fsh_buffer *validity, int64_t null_count) {
  return tb_array(3, 0, n, null_count, validity, tb_bytes(offsets, (n + 1) * 4),
                  tb_bytes(data, offsets[n]));
}

static inline void tb_field(fsh_field *f, const char *name, fsh_type_id t, bool nullable) {
  CHECK(fsh_field_init(f, name, t, nullable) == 0);
}

#define EXPECT_VALID(f, a, utf8)                                                         \
  do {                                                                                   \
    fsh_error e_ = {{0}};                                                                \
    int rc_ = fsh_array_validate((f), (a), (utf8), &e_);                                 \
    CHECK_MSG(rc_ == 0, "expected valid, got %d: %s", rc_, e_.message);                 \
  } while (0)

#define EXPECT_INVALID(f, a, utf8, sub)                                                  \
  do {                                                                                   \
    fsh_error e_ = {{0}};                                                                \
    int rc_ = fsh_array_validate((f), (a), (utf8), &e_);                                 \
    CHECK_MSG(rc_ == EINVAL && strstr(e_.message, (sub)) != NULL,                        \
              "expected EINVAL with \"%s\", got %d: \"%s\"", (sub), rc_, e_.message);    \
  } while (0)

#endif
