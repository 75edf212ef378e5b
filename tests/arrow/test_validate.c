/* test_validate.c -- fsh_array_validate / fsh_batch_validate: for each rule,
 * a valid array passes and a corrupted one fails naming the field and the
 * problem. */
#include <stdint.h>

#include "validate_helpers.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng(void) { /* xorshift64 */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void test_primitive(void) {
  fsh_field f;
  tb_field(&f, "x", FSH_TYPE_INT32, true);
  int32_t v[] = {1, 2, 3, 4, 5};
  fsh_array *a = tb_array(2, 0, 5, 1, tb_bits("11011"), tb_bytes(v, sizeof v), NULL);
  EXPECT_VALID(&f, a, true);
  a->null_count = -1; /* unknown: computed */
  EXPECT_VALID(&f, a, true);
  a->null_count = 2;
  EXPECT_INVALID(&f, a, true, "field 'x' (int32): null count 2, but the validity bitmap has 1 nulls");
  a->null_count = 6;
  EXPECT_INVALID(&f, a, true, "null count 6 is outside");
  a->null_count = -2;
  EXPECT_INVALID(&f, a, true, "null count -2 is outside");
  a->null_count = 1;

  /* offset + length beyond the values / validity */
  a->offset = 1;
  a->null_count = -1;
  EXPECT_INVALID(&f, a, true, "buffer 1 (values) has 20 bytes but offset 1 + length 5 needs 24");
  a->length = 4;
  EXPECT_VALID(&f, a, true);
  a->offset = 4;
  a->length = 4; /* validity has 8 bits: ok; values 20 bytes: not */
  EXPECT_INVALID(&f, a, true, "buffer 1 (values)");
  a->offset = 0;
  a->length = 9;
  EXPECT_INVALID(&f, a, true, "buffer 0 (validity) has 1 bytes but offset 0 + length 9 needs 2");
  a->length = -1;
  EXPECT_INVALID(&f, a, true, "negative length -1");
  a->length = 5;
  a->offset = -3;
  EXPECT_INVALID(&f, a, true, "negative offset -3");
  a->offset = INT64_MAX - 2;
  EXPECT_INVALID(&f, a, true, "overflows");
  a->offset = 0;

  /* validity NULL needs null count 0 (or unknown) */
  fsh_buffer *validity = a->buffers[0];
  a->buffers[0] = NULL;
  a->null_count = 1;
  EXPECT_INVALID(&f, a, true, "null count 1 without a validity bitmap");
  a->null_count = 0;
  EXPECT_VALID(&f, a, true);
  a->null_count = -1;
  EXPECT_VALID(&f, a, true);
  a->buffers[0] = validity;

  /* values buffer missing */
  fsh_buffer *values = a->buffers[1];
  a->buffers[1] = NULL;
  EXPECT_INVALID(&f, a, true, "buffer 1 (values) is missing but 20 bytes are needed");
  a->length = 0;
  a->null_count = 0;
  EXPECT_VALID(&f, a, true); /* empty: no buffer needed */
  a->offset = 100;
  EXPECT_VALID(&f, a, true); /* whatever the offset (validity is 1 byte) */
  a->offset = 0;
  a->buffers[1] = values;
  a->length = 5;

  /* buffer count */
  a->n_buffers = 3;
  EXPECT_INVALID(&f, a, true, "3 buffers, expected 2");
  a->n_buffers = 2;

  /* a stray dictionary or child */
  int32_t d[] = {0};
  a->dictionary = tb_int32(d, 1);
  EXPECT_INVALID(&f, a, true, "array has a dictionary but the field is not dictionary-encoded");
  fsh_array_unref(a->dictionary);
  a->dictionary = NULL;

  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static void test_slices_validate(void) {
  fsh_field f;
  tb_field(&f, "x", FSH_TYPE_INT64, true);
  int64_t v[20];
  char pattern[21];
  for (int i = 0; i < 20; i++) {
    v[i] = i;
    pattern[i] = i % 3 ? '1' : '0';
  }
  pattern[20] = '\0';
  fsh_array *a = tb_array(2, 0, 20, 7, tb_bits(pattern), tb_bytes(v, sizeof v), NULL);
  EXPECT_VALID(&f, a, false);
  for (int64_t off = 0; off <= 20; off++) {
    for (int64_t len = 0; off + len <= 20; len++) {
      fsh_array *s = fsh_array_slice(a, off, len);
      CHECK(s != NULL);
      EXPECT_VALID(&f, s, false);
      fsh_array_unref(s);
    }
  }
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

/* Fixed widths: bool in bits, decimals 16/32, intervals 4/8/16, fixed-size
 * binary byte_width, float16 2. */
static void test_fixed_widths(void) {
  static const struct {
    fsh_type_id type;
    int32_t byte_width;
    int64_t bytes; /* per value */
  } cases[] = {
      {FSH_TYPE_INT8, 0, 1},
      {FSH_TYPE_UINT16, 0, 2},
      {FSH_TYPE_FLOAT16, 0, 2},
      {FSH_TYPE_FLOAT32, 0, 4},
      {FSH_TYPE_DATE32, 0, 4},
      {FSH_TYPE_DATE64, 0, 8},
      {FSH_TYPE_TIME32, 0, 4},
      {FSH_TYPE_TIME64, 0, 8},
      {FSH_TYPE_TIMESTAMP, 0, 8},
      {FSH_TYPE_DURATION, 0, 8},
      {FSH_TYPE_DECIMAL128, 0, 16},
      {FSH_TYPE_DECIMAL256, 0, 32},
      {FSH_TYPE_INTERVAL_MONTHS, 0, 4},
      {FSH_TYPE_INTERVAL_DAY_TIME, 0, 8},
      {FSH_TYPE_INTERVAL_MONTH_DAY_NANO, 0, 16},
      {FSH_TYPE_FIXED_SIZE_BINARY, 7, 7},
      {FSH_TYPE_FIXED_SIZE_BINARY, 0, 0},
  };
  uint8_t zeros[4 * 32] = {0};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fsh_field f;
    tb_field(&f, "c", cases[k].type, true);
    f.byte_width = cases[k].byte_width;
    f.precision = 10;
    fsh_array *a = tb_array(2, 0, 4, 0, NULL, tb_bytes(zeros, 4 * cases[k].bytes), NULL);
    EXPECT_VALID(&f, a, false);
    if (cases[k].bytes > 0) {
      a->length = 5;
      char want[128];
      snprintf(want, sizeof want, "has %lld bytes but offset 0 + length 5 needs %lld",
               (long long)(4 * cases[k].bytes), (long long)(5 * cases[k].bytes));
      EXPECT_INVALID(&f, a, false, want);
      a->length = 3;
      a->offset = 2;
      snprintf(want, sizeof want, "offset 2 + length 3 needs %lld", (long long)(5 * cases[k].bytes));
      EXPECT_INVALID(&f, a, false, want);
    }
    fsh_array_unref(a);
    fsh_field_reset(&f);
  }

  fsh_field f;
  tb_field(&f, "fsb", FSH_TYPE_FIXED_SIZE_BINARY, true);
  f.byte_width = -1;
  fsh_array *a = tb_array(2, 0, 0, 0, NULL, NULL, NULL);
  EXPECT_INVALID(&f, a, false, "negative byte width -1");
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* bool: bits */
  tb_field(&f, "b", FSH_TYPE_BOOL, true);
  a = tb_array(2, 0, 16, 0, NULL, tb_bits("1010101010101010"), NULL);
  EXPECT_VALID(&f, a, false);
  a->length = 17;
  EXPECT_INVALID(&f, a, false, "field 'b' (bool): buffer 1 (values) has 2 bytes but offset 0 + length 17 needs 3");
  a->length = 15;
  a->offset = 1;
  EXPECT_VALID(&f, a, false);
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static void test_null_type(void) {
  fsh_field f;
  tb_field(&f, "n", FSH_TYPE_NA, true);
  fsh_array *a = tb_array(0, 0, 3, 3, NULL, NULL, NULL);
  EXPECT_VALID(&f, a, false);
  a->null_count = -1;
  EXPECT_VALID(&f, a, false);
  a->null_count = 0;
  EXPECT_INVALID(&f, a, false, "field 'n' (null): null count 0, but every slot of a null array is null");
  a->null_count = 3;
  fsh_array_unref(a);
  a = tb_array(1, 0, 3, 3, NULL, NULL, NULL);
  EXPECT_INVALID(&f, a, false, "1 buffers, expected 0");
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static void test_string_offsets(void) {
  fsh_field f;
  tb_field(&f, "s", FSH_TYPE_STRING, true);
  int32_t off[] = {0, 3, 3, 5, 9};
  fsh_array *a = tb_string(off, 4, "abcdefghi", tb_bits("1011"), 1);
  EXPECT_VALID(&f, a, true);
  fsh_array *s = fsh_array_slice(a, 1, 3);
  EXPECT_VALID(&f, s, true);
  fsh_array_unref(s);

  int32_t *o = (int32_t *)a->buffers[1]->data;
  o[2] = 2; /* 3, 2: decreasing */
  EXPECT_INVALID(&f, a, true, "field 's' (utf8): offset[2] = 2 < offset[1] = 3 (offsets must not decrease)");
  o[2] = 3;
  o[0] = -1;
  EXPECT_INVALID(&f, a, true, "offset[0] = -1 is negative");
  o[0] = 0;
  o[4] = 10;
  EXPECT_INVALID(&f, a, true, "offset[4] = 10 is beyond the end of the data buffer (9)");
  o[4] = 9;
  a->length = 5;
  a->null_count = -1;
  EXPECT_INVALID(&f, a, true, "buffer 1 (offsets) has 20 bytes but offset 0 + length 5 needs 24");
  a->length = 4;
  a->null_count = 1;
  EXPECT_VALID(&f, a, true);

  /* an empty array may omit offsets and data */
  fsh_array *e = tb_array(3, 0, 0, 0, NULL, NULL, NULL);
  EXPECT_VALID(&f, e, true);
  e->offset = 3;
  EXPECT_VALID(&f, e, true);
  /* but offsets it has must cover offset + 1 entries */
  int32_t zeros[2] = {0, 0};
  e->buffers[1] = tb_bytes(zeros, 8);
  EXPECT_INVALID(&f, e, true, "buffer 1 (offsets) has 8 bytes but offset 3 + length 0 needs 16");
  e->offset = 1;
  EXPECT_VALID(&f, e, true);
  e->offset = 0;
  fsh_buffer_unref(e->buffers[1]);
  e->buffers[1] = NULL;
  e->length = 1;
  EXPECT_INVALID(&f, e, true, "buffer 1 (offsets) is missing");
  fsh_array_unref(e);

  /* data buffer missing while referenced */
  fsh_buffer *data = a->buffers[2];
  a->buffers[2] = NULL;
  EXPECT_INVALID(&f, a, true, "beyond the end of the data buffer (0)");
  a->buffers[2] = data;
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* large offsets (int64), binary */
  tb_field(&f, "lb", FSH_TYPE_LARGE_BINARY, false);
  int64_t loff[] = {0, 2, 4, 4};
  a = tb_array(3, 0, 3, 0, NULL, tb_bytes(loff, sizeof loff), tb_bytes("\xff\xfe\x00\x01", 4));
  EXPECT_VALID(&f, a, true); /* binary: no UTF-8 check */
  int64_t *lo = (int64_t *)a->buffers[1]->data;
  lo[3] = 3;
  EXPECT_INVALID(&f, a, true, "field 'lb' (large_binary): offset[3] = 3 < offset[2] = 4");
  lo[3] = 5;
  EXPECT_INVALID(&f, a, true, "offset[3] = 5 is beyond the end of the data buffer (4)");
  lo[3] = 4;
  lo[1] = (int64_t)1 << 40;
  EXPECT_INVALID(&f, a, true, "offset[2] = 4 < offset[1] = 1099511627776");
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

/* One string value; returns the validation result with check_utf8. */
static int utf8_one(fsh_type_id type, const char *bytes, int32_t n, fsh_error *err) {
  fsh_field f;
  tb_field(&f, "u", type, true);
  fsh_array *a;
  if (type == FSH_TYPE_LARGE_STRING) {
    int64_t off[] = {0, 1, 1 + (int64_t)n};
    char buf[64];
    buf[0] = 'x';
    memcpy(buf + 1, bytes, (size_t)n);
    a = tb_array(3, 0, 2, 0, NULL, tb_bytes(off, sizeof off), tb_bytes(buf, 1 + n));
  } else {
    int32_t off[] = {0, 1, 1 + n};
    char buf[64];
    buf[0] = 'x';
    memcpy(buf + 1, bytes, (size_t)n);
    a = tb_string(off, 2, buf, NULL, 0);
  }
  int rc = fsh_array_validate(&f, a, true, err);
  int rc_no_check = fsh_array_validate(&f, a, false, NULL);
  CHECK(rc_no_check == 0);
  fsh_array_unref(a);
  fsh_field_reset(&f);
  return rc;
}

static void test_utf8(void) {
  static const struct {
    const char *bytes;
    int32_t n;
    const char *why; /* NULL: valid */
  } cases[] = {
      {"", 0, NULL},
      {"plain ascii, longer than eight bytes", 36, NULL},
      {"\xc3\xa9t\xc3\xa9", 5, NULL},                /* été */
      {"\xe2\x82\xac", 3, NULL},                     /* € */
      {"\xf0\x9f\x98\x80", 4, NULL},                 /* U+1F600 */
      {"\xf4\x8f\xbf\xbf", 4, NULL},                 /* U+10FFFF */
      {"\xed\x9f\xbf", 3, NULL},                     /* U+D7FF */
      {"\xee\x80\x80", 3, NULL},                     /* U+E000 */
      {"\xef\xbf\xbf", 3, NULL},                     /* U+FFFF */
      {"\x00", 1, NULL},                             /* NUL is valid */
      {"\xc0\x80", 2, "overlong encoding"},          /* overlong NUL */
      {"\xc1\xbf", 2, "overlong encoding"},
      {"\xe0\x80\x80", 3, "overlong encoding"},
      {"\xe0\x9f\xbf", 3, "overlong encoding"},
      {"\xf0\x80\x80\x80", 4, "overlong encoding"},
      {"\xf0\x8f\xbf\xbf", 4, "overlong encoding"},
      {"\xed\xa0\x80", 3, "UTF-16 surrogate"},      /* U+D800 */
      {"\xed\xbf\xbf", 3, "UTF-16 surrogate"},      /* U+DFFF */
      {"\xf4\x90\x80\x80", 4, "code point above U+10FFFF"},
      {"\xf5\x80\x80\x80", 4, "byte above U+10FFFF range"},
      {"\xff", 1, "byte above U+10FFFF range"},
      {"\x80", 1, "unexpected continuation byte"},
      {"abc\xbf", 4, "unexpected continuation byte"},
      {"\xe2\x82", 2, "truncated sequence"},
      {"\xf0\x9f\x98", 3, "truncated sequence"},
      {"\xc3", 1, "truncated sequence"},
      {"\xc3" "A", 2, "truncated sequence"},
      {"\xe2\x82" "A", 3, "truncated sequence"},
      {"abcdefgh\xe2\x82", 10, "truncated sequence"}, /* after the ASCII fast path */
  };
  fsh_type_id types[] = {FSH_TYPE_STRING, FSH_TYPE_LARGE_STRING};
  for (int t = 0; t < 2; t++) {
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      fsh_error err = {{0}};
      int rc = utf8_one(types[t], cases[k].bytes, cases[k].n, &err);
      if (!cases[k].why) {
        CHECK_MSG(rc == 0, "case %zu: %s", k, err.message);
      } else {
        CHECK_MSG(rc == EINVAL && strstr(err.message, "invalid UTF-8 at row 1") &&
                      strstr(err.message, cases[k].why),
                  "case %zu (%s): rc %d: %s", k, cases[k].why, rc, err.message);
      }
    }
  }

  /* a sequence split across two values is invalid in both */
  fsh_field f;
  tb_field(&f, "u", FSH_TYPE_STRING, true);
  int32_t off[] = {0, 1, 3};
  fsh_array *a = tb_string(off, 2, "\xe2\x82\xac", NULL, 0);
  EXPECT_INVALID(&f, a, true, "invalid UTF-8 at row 0 (truncated sequence");
  fsh_array_unref(a);

  /* bad bytes under a null slot are ignored */
  int32_t off2[] = {0, 2, 4};
  a = tb_string(off2, 2, "ok\xc0\x80", tb_bits("10"), 1);
  EXPECT_VALID(&f, a, true);
  fsh_bit_set(a->buffers[0]->data, 1, true);
  a->null_count = 0;
  EXPECT_INVALID(&f, a, true, "field 'u' (utf8): invalid UTF-8 at row 1 (overlong encoding at byte 0 of 2: 0xc0)");
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static fsh_array *list_of_int32(fsh_type_id type, const void *offsets, int64_t n,
                                const int32_t *values, int64_t n_values) {
  int64_t w = type == FSH_TYPE_LARGE_LIST ? 8 : 4;
  fsh_array *a = tb_array(2, 1, n, 0, NULL, tb_bytes(offsets, (n + 1) * w), NULL);
  a->children[0] = tb_int32(values, n_values);
  return a;
}

static void test_lists(void) {
  fsh_field f;
  tb_field(&f, "list_col", FSH_TYPE_LIST, true);
  CHECK(fsh_field_alloc_children(&f, 1) == 0);
  tb_field(&f.children[0], "item", FSH_TYPE_INT32, true);
  int32_t vals[] = {1, 2, 3, 4, 5, 6};
  int32_t off[] = {0, 2, 2, 5, 6};
  fsh_array *a = list_of_int32(FSH_TYPE_LIST, off, 4, vals, 6);
  EXPECT_VALID(&f, a, false);
  int32_t *o = (int32_t *)a->buffers[1]->data;
  o[3] = 1;
  EXPECT_INVALID(&f, a, false, "field 'list_col' (list): offset[3] = 1 < offset[2] = 2 (offsets must not decrease)");
  o[3] = 5;
  o[4] = 7;
  EXPECT_INVALID(&f, a, false, "field 'list_col' (list): offset[4] = 7 is beyond the end of the child array (6)");
  o[4] = 6;
  /* a child shorter than the offsets need */
  a->children[0]->length = 5;
  EXPECT_INVALID(&f, a, false, "beyond the end of the child array (5)");
  /* slicing the parent so the last offset is in range is fine */
  a->length = 3;
  EXPECT_VALID(&f, a, false);
  a->length = 4;
  a->children[0]->length = 6;
  /* an invalid child is reported with its path */
  a->children[0]->null_count = 3;
  EXPECT_INVALID(&f, a, false, "field 'list_col.item' (int32): null count 3 without a validity bitmap");
  a->children[0]->null_count = 0;
  /* child count */
  fsh_array *c = a->children[0];
  a->children[0] = NULL;
  EXPECT_INVALID(&f, a, false, "child array 0 is missing");
  a->children[0] = c;
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* large list */
  tb_field(&f, "ll", FSH_TYPE_LARGE_LIST, true);
  CHECK(fsh_field_alloc_children(&f, 1) == 0);
  tb_field(&f.children[0], "", FSH_TYPE_INT32, true);
  int64_t loff[] = {0, 3, 6};
  a = list_of_int32(FSH_TYPE_LARGE_LIST, loff, 2, vals, 6);
  EXPECT_VALID(&f, a, false);
  ((int64_t *)a->buffers[1]->data)[2] = 7;
  EXPECT_INVALID(&f, a, false, "field 'll' (large_list): offset[2] = 7 is beyond the end of the child array (6)");
  ((int64_t *)a->buffers[1]->data)[2] = 6;
  a->children[0]->length = -1;
  EXPECT_INVALID(&f, a, false, "field 'll[0]' (int32): negative length -1"); /* unnamed child */
  a->children[0]->length = 6;
  fsh_array_unref(a);
  /* a list field needs exactly one child */
  fsh_field_reset(&f);
  tb_field(&f, "bad", FSH_TYPE_LIST, true);
  a = tb_array(2, 0, 0, 0, NULL, NULL, NULL);
  EXPECT_INVALID(&f, a, false, "field has 0 children, expected 1");
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* fixed-size list: child length >= (offset + length) * list_size */
  tb_field(&f, "fsl", FSH_TYPE_FIXED_SIZE_LIST, true);
  f.list_size = 3;
  CHECK(fsh_field_alloc_children(&f, 1) == 0);
  tb_field(&f.children[0], "item", FSH_TYPE_INT32, true);
  a = tb_array(1, 1, 2, 0, NULL, NULL, NULL);
  a->children[0] = tb_int32(vals, 6);
  EXPECT_VALID(&f, a, false);
  a->offset = 1;
  EXPECT_INVALID(&f, a, false, "field 'fsl' (fixed_size_list): child has length 6, but offset 1 + length 2 with list size 3 needs 9");
  a->length = 1;
  EXPECT_VALID(&f, a, false);
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static void test_struct(void) {
  fsh_field f;
  tb_field(&f, "s", FSH_TYPE_STRUCT, true);
  CHECK(fsh_field_alloc_children(&f, 2) == 0);
  tb_field(&f.children[0], "f0", FSH_TYPE_INT32, true);
  tb_field(&f.children[1], "f1", FSH_TYPE_STRING, true);
  int32_t vals[] = {1, 2, 3};
  int32_t off[] = {0, 1, 2, 3};
  fsh_array *a = tb_array(1, 2, 3, 1, tb_bits("101"), NULL, NULL);
  a->children[0] = tb_int32(vals, 3);
  a->children[1] = tb_string(off, 3, "abc", NULL, 0);
  EXPECT_VALID(&f, a, true);
  a->offset = 1;
  a->length = 2;
  a->null_count = -1;
  EXPECT_VALID(&f, a, true);
  a->length = 3;
  fsh_buffer_unref(a->buffers[0]);
  a->buffers[0] = NULL;
  a->null_count = 0;
  EXPECT_INVALID(&f, a, true, "field 's' (struct): child 0 ('f0') has length 3, less than offset 1 + length 3");
  a->offset = 0;
  EXPECT_VALID(&f, a, true);
  ((uint8_t *)a->children[1]->buffers[2]->data)[1] = 0xff;
  EXPECT_INVALID(&f, a, true, "field 's.f1' (utf8): invalid UTF-8 at row 1");
  EXPECT_VALID(&f, a, false);
  /* more child arrays than fields */
  a->n_children = 1;
  EXPECT_INVALID(&f, a, true, "1 child arrays, expected 2");
  a->n_children = 2;
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

/* map<int32, int32> with the given offsets and key validity. */
static void make_map(fsh_field *f, fsh_array **out, const int32_t *off, int64_t n,
                     const char *key_validity) {
  tb_field(f, "m", FSH_TYPE_MAP, true);
  CHECK(fsh_field_alloc_children(f, 1) == 0);
  fsh_field *e = &f->children[0];
  tb_field(e, "entries", FSH_TYPE_STRUCT, false);
  CHECK(fsh_field_alloc_children(e, 2) == 0);
  tb_field(&e->children[0], "key", FSH_TYPE_INT32, false);
  tb_field(&e->children[1], "value", FSH_TYPE_INT32, true);
  int32_t keys[] = {1, 2, 3, 4, 5};
  fsh_array *a = tb_array(2, 1, n, 0, NULL, tb_bytes(off, (n + 1) * 4), NULL);
  fsh_array *entries = tb_array(1, 2, 5, 0, NULL, NULL, NULL);
  entries->children[0] = tb_int32(keys, 5);
  if (key_validity) {
    entries->children[0]->buffers[0] = tb_bits(key_validity);
    entries->children[0]->null_count = -1;
  }
  entries->children[1] = tb_int32(keys, 5);
  a->children[0] = entries;
  *out = a;
}

static void test_map(void) {
  fsh_field f;
  fsh_array *a;
  int32_t off[] = {0, 2, 2, 4};
  make_map(&f, &a, off, 3, NULL);
  EXPECT_VALID(&f, a, false);
  ((int32_t *)a->buffers[1]->data)[3] = 6;
  EXPECT_INVALID(&f, a, false, "field 'm' (map): offset[3] = 6 is beyond the end of the child array (5)");
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* a null key outside the referenced entries is fine, inside it is not */
  make_map(&f, &a, off, 3, "11110");
  EXPECT_VALID(&f, a, false);
  fsh_array_unref(a);
  fsh_field_reset(&f);
  make_map(&f, &a, off, 3, "11011");
  EXPECT_INVALID(&f, a, false, "field 'm' (map): key at entry 2 is null (map keys must not be null)");
  fsh_array *s = fsh_array_slice(a, 0, 1); /* entries [0, 2) only */
  EXPECT_VALID(&f, s, false);
  fsh_array_unref(s);
  /* the entries struct's own offset shifts its keys */
  a->children[0]->offset = 1;
  a->children[0]->length = 4;
  ((int32_t *)a->buffers[1]->data)[3] = 3;
  EXPECT_INVALID(&f, a, false, "key at entry 1 is null");
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* entries must be a struct of two fields */
  make_map(&f, &a, off, 3, NULL);
  fsh_field_reset(&f.children[0].children[1]);
  f.children[0].n_children = 1;
  EXPECT_INVALID(&f, a, false, "map entries must be a struct of exactly 2 fields");
  f.children[0].n_children = 2;
  tb_field(&f.children[0].children[1], "value", FSH_TYPE_INT32, true);
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

/* union<i: int32, l: int64> with type codes {5, 7}. */
static void union_field(fsh_field *f, fsh_type_id type) {
  tb_field(f, "u", type, true);
  CHECK(fsh_field_alloc_children(f, 2) == 0);
  tb_field(&f->children[0], "i", FSH_TYPE_INT32, true);
  tb_field(&f->children[1], "l", FSH_TYPE_INT64, true);
  f->type_codes = fsh_malloc(2 * sizeof *f->type_codes);
  CHECK(f->type_codes != NULL);
  f->type_codes[0] = 5;
  f->type_codes[1] = 7;
}

static void test_sparse_union(void) {
  fsh_field f;
  union_field(&f, FSH_TYPE_SPARSE_UNION);
  int8_t ids[] = {5, 7, 7, 5};
  int32_t iv[] = {1, 2, 3, 4};
  int64_t lv[] = {1, 2, 3, 4};
  fsh_array *a = tb_array(1, 2, 4, 0, tb_bytes(ids, 4), NULL, NULL);
  a->children[0] = tb_int32(iv, 4);
  a->children[1] = tb_array(2, 0, 4, 0, NULL, tb_bytes(lv, sizeof lv), NULL);
  EXPECT_VALID(&f, a, false);
  a->buffers[0]->data[2] = 6;
  EXPECT_INVALID(&f, a, false, "field 'u' (sparse_union): type id 6 at row 2 is not one of the union's type codes");
  a->buffers[0]->data[2] = (uint8_t)-1;
  EXPECT_INVALID(&f, a, false, "type id -1 at row 2");
  a->buffers[0]->data[2] = 7;
  a->children[1]->length = 3;
  EXPECT_INVALID(&f, a, false, "child 1 ('l') has length 3, less than offset 0 + length 4");
  a->length = 3;
  EXPECT_VALID(&f, a, false);
  a->length = 4;
  a->children[1]->length = 4;
  a->null_count = 1;
  EXPECT_INVALID(&f, a, false, "unions have no validity");
  a->null_count = -1; /* "unknown" is no excuse: a union's null count is 0 */
  EXPECT_INVALID(&f, a, false, "unions have no validity");
  a->null_count = 0;
  a->length = 5;
  EXPECT_INVALID(&f, a, false, "buffer 0 (type ids) has 4 bytes but offset 0 + length 5 needs 5");
  a->length = 4;
  f.type_codes[1] = 5;
  EXPECT_INVALID(&f, a, false, "type code 5 is used by children 0 and 1");
  f.type_codes[1] = 128;
  EXPECT_INVALID(&f, a, false, "type code 128 of child 1 is outside [0, 127]");
  f.type_codes[1] = 7;
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static void test_dense_union(void) {
  fsh_field f;
  union_field(&f, FSH_TYPE_DENSE_UNION);
  int8_t ids[] = {5, 7, 7, 5, 5};
  int32_t offs[] = {0, 0, 1, 1, 2};
  int32_t iv[] = {1, 2, 3};
  int64_t lv[] = {1, 2};
  fsh_array *a = tb_array(2, 2, 5, 0, tb_bytes(ids, 5), tb_bytes(offs, sizeof offs), NULL);
  a->children[0] = tb_int32(iv, 3);
  a->children[1] = tb_array(2, 0, 2, 0, NULL, tb_bytes(lv, sizeof lv), NULL);
  EXPECT_VALID(&f, a, false);
  int32_t *o = (int32_t *)a->buffers[1]->data;
  o[2] = 2;
  EXPECT_INVALID(&f, a, false, "field 'u' (dense_union): offset 2 at row 2 is out of range for child 1 ('l') of length 2");
  o[2] = -1;
  EXPECT_INVALID(&f, a, false, "offset -1 at row 2 is out of range");
  o[2] = 1;
  a->buffers[0]->data[4] = 0;
  EXPECT_INVALID(&f, a, false, "type id 0 at row 4 is not one of the union's type codes");
  a->buffers[0]->data[4] = 5;
  a->length = 6;
  EXPECT_INVALID(&f, a, false, "buffer 0 (type ids)");
  a->length = 4;
  a->offset = 1; /* rows 1..4: ids 7 7 5 5, offsets 0 1 1 2 */
  EXPECT_VALID(&f, a, false);
  a->offset = 0;
  a->length = 5;
  a->n_buffers = 1;
  EXPECT_INVALID(&f, a, false, "1 buffers, expected 2");
  a->n_buffers = 2;
  fsh_array_unref(a);
  fsh_field_reset(&f);
}

static void test_dictionary(void) {
  /* s: struct<f1: dictionary<int8, utf8>> */
  fsh_field f;
  tb_field(&f, "s", FSH_TYPE_STRUCT, true);
  CHECK(fsh_field_alloc_children(&f, 1) == 0);
  tb_field(&f.children[0], "f1", FSH_TYPE_STRING, true);
  CHECK(fsh_field_set_dictionary(&f.children[0], 3, FSH_TYPE_INT8, false) == 0);
  CHECK(f.children[0].type == FSH_TYPE_INT8);
  CHECK(f.children[0].dictionary->value.type == FSH_TYPE_STRING);
  int8_t idx[] = {0, 4, 2, 1, 3};
  int32_t doff[] = {0, 1, 2, 3, 4, 5};
  fsh_array *a = tb_array(1, 1, 5, 0, NULL, NULL, NULL);
  fsh_array *ind = tb_array(2, 0, 5, 0, NULL, tb_bytes(idx, 5), NULL);
  ind->dictionary = tb_string(doff, 5, "abcde", NULL, 0);
  a->children[0] = ind;
  EXPECT_VALID(&f, a, true);
  ind->buffers[1]->data[3] = 7;
  EXPECT_INVALID(&f, a, true, "field 's.f1' (dictionary<int8>): index 7 at row 3 out of range for dictionary of length 5");
  ind->buffers[1]->data[3] = (uint8_t)-2;
  EXPECT_INVALID(&f, a, true, "index -2 at row 3 out of range");
  /* a null slot may hold any index */
  ind->buffers[0] = tb_bits("11101");
  ind->null_count = 1;
  EXPECT_VALID(&f, a, true);
  /* the dictionary itself is validated, against the value field */
  ((uint8_t *)ind->dictionary->buffers[2]->data)[2] = 0xc0;
  EXPECT_INVALID(&f, a, true, "field 's.f1[dictionary]' (utf8): invalid UTF-8 at row 2");
  ((uint8_t *)ind->dictionary->buffers[2]->data)[2] = 'c';
  /* dictionary missing */
  fsh_array *dict = ind->dictionary;
  ind->dictionary = NULL;
  EXPECT_INVALID(&f, a, true, "field 's.f1' (dictionary<int8>): dictionary-encoded but the array has no dictionary");
  ind->dictionary = dict;
  /* index type must be an integer */
  f.children[0].type = FSH_TYPE_FLOAT32;
  EXPECT_INVALID(&f, a, true, "dictionary index type must be an integer type");
  f.children[0].type = FSH_TYPE_INT8;
  /* short dictionary */
  dict->length = 4;
  EXPECT_INVALID(&f, a, true, "index 4 at row 1 out of range for dictionary of length 4");
  dict->length = 5;
  EXPECT_VALID(&f, a, true);
  fsh_array_unref(a);
  fsh_field_reset(&f);

  /* every integer index type, with the largest unsigned values */
  static const fsh_type_id types[] = {FSH_TYPE_INT8,  FSH_TYPE_INT16,  FSH_TYPE_INT32,
                                      FSH_TYPE_INT64, FSH_TYPE_UINT8,  FSH_TYPE_UINT16,
                                      FSH_TYPE_UINT32, FSH_TYPE_UINT64};
  static const int widths[] = {1, 2, 4, 8, 1, 2, 4, 8};
  for (int k = 0; k < 8; k++) {
    tb_field(&f, "d", FSH_TYPE_INT32, true);
    CHECK(fsh_field_set_dictionary(&f, 0, types[k], false) == 0);
    uint8_t raw[3 * 8] = {0};
    raw[widths[k]] = 2; /* indices 0, 2, 1 (little-endian) */
    raw[2 * widths[k]] = 1;
    int32_t dv[] = {10, 20, 30};
    fsh_array *d = tb_array(2, 0, 3, 0, NULL, tb_bytes(raw, 3 * widths[k]), NULL);
    d->dictionary = tb_int32(dv, 3);
    EXPECT_VALID(&f, d, false);
    memset(d->buffers[1]->data + widths[k], 0xff, (size_t)widths[k]); /* -1 or max */
    EXPECT_INVALID(&f, d, false, "at row 1 out of range for dictionary of length 3");
    fsh_array_unref(d);
    fsh_field_reset(&f);
  }
}

static void test_batch(void) {
  fsh_schema *schema = fsh_schema_new(2);
  CHECK(schema != NULL);
  tb_field(&schema->fields[0], "a", FSH_TYPE_INT32, true);
  tb_field(&schema->fields[1], "b", FSH_TYPE_STRING, true);
  fsh_batch *b = fsh_batch_new(schema, 3);
  CHECK(b != NULL);
  int32_t v[] = {1, 2, 3};
  int32_t off[] = {0, 1, 2, 3};
  b->columns[0] = tb_int32(v, 3);
  b->columns[1] = tb_string(off, 3, "xyz", NULL, 0);
  fsh_error err = {{0}};
  CHECK_OK(fsh_batch_validate(b, true, &err));
  fsh_batch *s = fsh_batch_slice(b, 1, 2);
  CHECK(s != NULL);
  CHECK_OK(fsh_batch_validate(s, true, &err));
  fsh_batch_unref(s);

  b->length = 4;
  CHECK(fsh_batch_validate(b, true, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "column 0 ('a') has length 3, batch has 4"), "%s", err.message);
  b->length = 3;
  b->n_columns = 1;
  CHECK(fsh_batch_validate(b, true, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "1 columns but the schema has 2 fields"), "%s", err.message);
  b->n_columns = 2;
  ((uint8_t *)b->columns[1]->buffers[2]->data)[1] = 0xfe;
  CHECK(fsh_batch_validate(b, true, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "field 'b' (utf8): invalid UTF-8 at row 1"), "%s", err.message);
  CHECK_OK(fsh_batch_validate(b, false, &err));
  fsh_array *c = b->columns[0];
  b->columns[0] = NULL;
  CHECK(fsh_batch_validate(b, false, &err) == EINVAL);
  CHECK_MSG(strstr(err.message, "column 0 ('a') is missing"), "%s", err.message);
  b->columns[0] = c;
  CHECK(fsh_batch_validate(b, false, NULL) == 0); /* NULL err accepted */
  fsh_batch_unref(b);
  fsh_schema_unref(schema);
}

/* Deep nesting is refused, not recursed into without bound. */
static void test_depth_limit(void) {
  enum { DEPTH = 100 };
  fsh_field root;
  tb_field(&root, "l", FSH_TYPE_LIST, true);
  fsh_field *f = &root;
  for (int i = 0; i < DEPTH; i++) {
    CHECK(fsh_field_alloc_children(f, 1) == 0);
    tb_field(&f->children[0], "l", i + 1 < DEPTH ? FSH_TYPE_LIST : FSH_TYPE_INT32, true);
    f = &f->children[0];
  }
  fsh_array *top = tb_array(2, 1, 0, 0, NULL, NULL, NULL), *a = top;
  for (int i = 0; i < DEPTH; i++) {
    a->children[0] = i + 1 < DEPTH ? tb_array(2, 1, 0, 0, NULL, NULL, NULL)
                                   : tb_array(2, 0, 0, 0, NULL, NULL, NULL);
    a = a->children[0];
  }
  EXPECT_INVALID(&root, top, false, "nested more than");
  fsh_array_unref(top);
  fsh_field_reset(&root);
}

/* ---- random corruption ------------------------------------------------ */

/* Buffers of exactly n bytes (no padding), so ASan sees any read past them. */
static void free_ctx(void *ctx) { free(ctx); }
static fsh_buffer *exact(const void *p, int64_t n) {
  void *copy = malloc(n > 0 ? (size_t)n : 1);
  memcpy(copy, p, (size_t)n);
  fsh_buffer *b = fsh_buffer_wrap(copy, n, free_ctx, copy);
  CHECK(b != NULL);
  return b;
}

static volatile uint64_t touch_sum;

/* Reads every byte the layout of a validated array references. */
static void touch(const fsh_field *f, const fsh_array *a) {
  int64_t off = a->offset, len = a->length, end = off + len;
  uint64_t sum = 0;
  if (len > 0 && a->n_buffers > 0 && a->buffers[0] && f->type != FSH_TYPE_SPARSE_UNION &&
      f->type != FSH_TYPE_DENSE_UNION)
    for (int64_t i = off; i < end; i++) sum += fsh_bit_get(a->buffers[0]->data, i);
  switch (f->type) {
    case FSH_TYPE_BOOL:
      for (int64_t i = off; i < end; i++) sum += fsh_bit_get(a->buffers[1]->data, i);
      break;
    case FSH_TYPE_INT8: case FSH_TYPE_INT16: case FSH_TYPE_INT32:
      for (int64_t i = off * (1 << (f->type - FSH_TYPE_INT8)); len && i < end * (1 << (f->type - FSH_TYPE_INT8)); i++)
        sum += a->buffers[1]->data[i];
      break;
    case FSH_TYPE_STRING: case FSH_TYPE_LARGE_STRING: case FSH_TYPE_LIST: {
      if (len == 0) break;
      int w = f->type == FSH_TYPE_LARGE_STRING ? 8 : 4;
      int64_t first = 0, last = 0;
      memcpy(&first, a->buffers[1]->data + off * w, (size_t)w);
      memcpy(&last, a->buffers[1]->data + end * w, (size_t)w);
      if (f->type == FSH_TYPE_LIST) {
        CHECK(last <= a->children[0]->length);
      } else {
        for (int64_t i = first; i < last; i++) sum += a->buffers[2]->data[i];
      }
      break;
    }
    case FSH_TYPE_DENSE_UNION:
      for (int64_t i = off; i < end; i++) {
        int8_t id = (int8_t)a->buffers[0]->data[i];
        int32_t o;
        memcpy(&o, a->buffers[1]->data + i * 4, 4);
        int k = id == f->type_codes[0] ? 0 : 1;
        CHECK(id == f->type_codes[k]);
        CHECK(o >= 0 && o < a->children[k]->length);
      }
      break;
    default: break;
  }
  if (f->dictionary) {
    for (int64_t i = off; i < end; i++) {
      if (a->buffers[0] && !fsh_bit_get(a->buffers[0]->data, i)) continue;
      int16_t v;
      memcpy(&v, a->buffers[1]->data + i * 2, 2);
      CHECK(v >= 0 && v < a->dictionary->length);
    }
    touch(&f->dictionary->value, a->dictionary);
  }
  for (int64_t k = 0; k < a->n_children; k++) touch(&f->children[k], a->children[k]);
  touch_sum += sum;
}

/* All nodes of an array tree (children and dictionaries), depth first. */
static int collect(fsh_array *a, fsh_array **out, int n) {
  out[n++] = a;
  for (int64_t k = 0; k < a->n_children; k++) n = collect(a->children[k], out, n);
  if (a->dictionary) n = collect(a->dictionary, out, n);
  return n;
}

static void test_random_corruption(void) {
  /* root: struct<l: list<utf8>, u: dense_union<i: int32, s: utf8>{2, 5},
   *              d: dictionary<int16, large_utf8>, b: bool> */
  fsh_field f;
  tb_field(&f, "root", FSH_TYPE_STRUCT, true);
  CHECK(fsh_field_alloc_children(&f, 4) == 0);
  fsh_field *c = f.children;
  tb_field(&c[0], "l", FSH_TYPE_LIST, true);
  CHECK(fsh_field_alloc_children(&c[0], 1) == 0);
  tb_field(&c[0].children[0], "item", FSH_TYPE_STRING, true);
  tb_field(&c[1], "u", FSH_TYPE_DENSE_UNION, true);
  CHECK(fsh_field_alloc_children(&c[1], 2) == 0);
  tb_field(&c[1].children[0], "i", FSH_TYPE_INT32, true);
  tb_field(&c[1].children[1], "s", FSH_TYPE_STRING, true);
  c[1].type_codes = fsh_malloc(2 * sizeof(int32_t));
  c[1].type_codes[0] = 2;
  c[1].type_codes[1] = 5;
  tb_field(&c[2], "d", FSH_TYPE_LARGE_STRING, true);
  CHECK(fsh_field_set_dictionary(&c[2], 0, FSH_TYPE_INT16, false) == 0);
  tb_field(&c[3], "b", FSH_TYPE_BOOL, true);

  const uint8_t v1011[] = {0x0d};
  int32_t loff[] = {0, 2, 2, 3, 5};
  int32_t soff[] = {0, 1, 3, 3, 4, 7};
  int8_t ids[] = {2, 5, 5, 2};
  int32_t uoff[] = {0, 0, 1, 1};
  int32_t iv[] = {7, 8};
  int32_t s2off[] = {0, 2, 4};
  int16_t idx[] = {1, 0, 2, 1};
  int64_t doff[] = {0, 1, 3, 6};

  fsh_array *root = tb_array(1, 4, 4, 1, exact(v1011, 1), NULL, NULL);
  fsh_array *l = tb_array(2, 1, 4, 0, NULL, exact(loff, sizeof loff), NULL);
  l->children[0] = tb_array(3, 0, 5, 1, exact((uint8_t[]){0x1b}, 1), exact(soff, sizeof soff),
                            exact("a\xc3\xa9" "d\xe2\x82\xac" "ghi", 10));
  fsh_array *u = tb_array(2, 2, 4, 0, exact(ids, 4), exact(uoff, sizeof uoff), NULL);
  u->children[0] = tb_array(2, 0, 2, 0, NULL, exact(iv, sizeof iv), NULL);
  u->children[1] = tb_array(3, 0, 2, 0, NULL, exact(s2off, sizeof s2off), exact("xxyy", 4));
  fsh_array *d = tb_array(2, 0, 4, 1, exact((uint8_t[]){0x0b}, 1), exact(idx, sizeof idx), NULL);
  d->dictionary = tb_array(3, 0, 3, 0, NULL, exact(doff, sizeof doff), exact("pqqrrr", 6));
  fsh_array *b = tb_array(2, 0, 4, 0, NULL, exact((uint8_t[]){0x05}, 1), NULL);
  root->children[0] = l;
  root->children[1] = u;
  root->children[2] = d;
  root->children[3] = b;
  EXPECT_VALID(&f, root, true);
  touch(&f, root);

  fsh_array *nodes[32];
  int n_nodes = collect(root, nodes, 0);
  int invalid = 0, valid = 0;
  for (int iter = 0; iter < 20000; iter++) {
    /* up to three mutations, undone in reverse order */
    struct {
      fsh_array *a;
      int kind, buf;
      int64_t old;
      fsh_buffer *old_buf;
    } m[3];
    int n_m = 1 + (int)(rng() % 3);
    for (int k = 0; k < n_m; k++) {
      fsh_array *a = nodes[rng() % (uint64_t)n_nodes];
      m[k].a = a;
      m[k].kind = (int)(rng() % 6);
      m[k].buf = a->n_buffers ? (int)(rng() % (uint64_t)a->n_buffers) : 0;
      fsh_buffer *buf = a->n_buffers ? a->buffers[m[k].buf] : NULL;
      switch (m[k].kind) {
        case 0: m[k].old = a->length; a->length += (int64_t)(rng() % 7) - 3; break;
        case 1: m[k].old = a->offset; a->offset += (int64_t)(rng() % 6) - 2; break;
        case 2: m[k].old = a->null_count; a->null_count = (int64_t)(rng() % 8) - 2; break;
        case 3:
          if (!buf || buf->size == 0) { m[k].kind = -1; break; }
          m[k].old = (int64_t)(rng() % (uint64_t)buf->size);
          m[k].old_buf = (fsh_buffer *)(intptr_t)buf->data[m[k].old];
          buf->data[m[k].old] ^= (uint8_t)(1u << (rng() % 8));
          break;
        case 4:
          if (!buf || buf->size == 0) { m[k].kind = -1; break; }
          m[k].old = buf->size;
          buf->size -= 1 + (int64_t)(rng() % (uint64_t)buf->size);
          break;
        case 5:
          m[k].old_buf = buf;
          if (a->n_buffers) a->buffers[m[k].buf] = NULL;
          break;
      }
    }
    int rc = fsh_array_validate(&f, root, rng() % 2, NULL);
    if (rc == 0) {
      touch(&f, root);
      valid++;
    } else {
      invalid++;
    }
    for (int k = n_m - 1; k >= 0; k--) {
      fsh_array *a = m[k].a;
      fsh_buffer *buf = a->n_buffers ? a->buffers[m[k].buf] : NULL;
      switch (m[k].kind) {
        case 0: a->length = m[k].old; break;
        case 1: a->offset = m[k].old; break;
        case 2: a->null_count = m[k].old; break;
        case 3: buf->data[m[k].old] = (uint8_t)(intptr_t)m[k].old_buf; break;
        case 4: buf->size = m[k].old; break;
        case 5: if (a->n_buffers) a->buffers[m[k].buf] = m[k].old_buf; break;
        default: break;
      }
    }
  }
  EXPECT_VALID(&f, root, true); /* fully restored */
  CHECK(valid > 100 && invalid > 1000);
  fsh_array_unref(root);
  fsh_field_reset(&f);
}

FSH_TEST_MAIN(TEST(test_primitive), TEST(test_slices_validate), TEST(test_fixed_widths),
              TEST(test_null_type), TEST(test_string_offsets), TEST(test_utf8), TEST(test_lists),
              TEST(test_struct), TEST(test_map), TEST(test_sparse_union), TEST(test_dense_union),
              TEST(test_dictionary), TEST(test_batch), TEST(test_depth_limit),
              TEST(test_random_corruption))
