/* test_numeric.c -- decimal128/256 <-> string at the edges (zero, +-1,
 * the extreme values, overflow, bad syntax) and float16 <-> float (exact
 * values, subnormals, rounding to even, overflow to infinity, NaN). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "arrow/numeric.h"
#include "test.h"

static void roundtrip(const char *s, int bytes) {
  uint8_t le[32];
  char out[96];
  int rc = fsh_decimal_parse(s, strlen(s), le, bytes);
  CHECK_MSG(rc == 0, "parse %s: %d", s, rc);
  fsh_decimal_format(le, bytes, out, sizeof out);
  const char *want = s[0] == '+' ? s + 1 : s;
  CHECK_MSG(strcmp(out, want) == 0, "%s -> %s", s, out);
}

static void test_decimal(void) {
  const char *ok128[] = {"0", "1", "-1", "999999999", "1000000000", "-1000000000000000000",
                         "170141183460469231731687303715884105727",
                         "-170141183460469231731687303715884105728", "12345678901234567890123"};
  for (size_t i = 0; i < sizeof ok128 / sizeof ok128[0]; i++) roundtrip(ok128[i], 16);
  roundtrip("57896044618658097711785492504343953926634992332820282019728792003956564819967", 32);
  roundtrip("-57896044618658097711785492504343953926634992332820282019728792003956564819968", 32);
  roundtrip("-9223372036854775808", 32);
  uint8_t le[32], before[32];
  memset(le, 0xAB, sizeof le);
  memcpy(before, le, sizeof le);
  CHECK_EQ_INT(fsh_decimal_parse("170141183460469231731687303715884105728", 39, le, 16), ERANGE);
  CHECK_EQ_INT(fsh_decimal_parse("-170141183460469231731687303715884105729", 40, le, 16), ERANGE);
  CHECK_EQ_INT(fsh_decimal_parse("99999999999999999999999999999999999999999", 41, le, 16), ERANGE);
  CHECK_EQ_INT(fsh_decimal_parse("", 0, le, 16), EINVAL);
  CHECK_EQ_INT(fsh_decimal_parse("-", 1, le, 16), EINVAL);
  CHECK_EQ_INT(fsh_decimal_parse("12a", 3, le, 16), EINVAL);
  CHECK_EQ_INT(fsh_decimal_parse("1.5", 3, le, 16), EINVAL);
  CHECK(memcmp(le, before, sizeof le) == 0); /* untouched on error */
  /* -1 is all ones. */
  CHECK_EQ_INT(fsh_decimal_parse("-1", 2, le, 16), 0);
  for (int i = 0; i < 16; i++) CHECK_EQ_INT(le[i], 0xFF);
  roundtrip("+42", 16);
}

static void test_half(void) {
  CHECK_EQ_INT(fsh_float_to_half(0.0f), 0x0000);
  CHECK_EQ_INT(fsh_float_to_half(-0.0f), 0x8000);
  CHECK_EQ_INT(fsh_float_to_half(1.0f), 0x3C00);
  CHECK_EQ_INT(fsh_float_to_half(-2.0f), 0xC000);
  CHECK_EQ_INT(fsh_float_to_half(65504.0f), 0x7BFF);
  CHECK_EQ_INT(fsh_float_to_half(65519.0f), 0x7BFF); /* rounds down */
  CHECK_EQ_INT(fsh_float_to_half(65520.0f), 0x7C00); /* ties to even: infinity */
  CHECK_EQ_INT(fsh_float_to_half(1e10f), 0x7C00);
  CHECK_EQ_INT(fsh_float_to_half(INFINITY), 0x7C00);
  CHECK_EQ_INT(fsh_float_to_half(-INFINITY), 0xFC00);
  uint16_t nan = fsh_float_to_half(NAN);
  CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x3FF) != 0);
  CHECK_EQ_INT(fsh_float_to_half(ldexpf(1.0f, -14)), 0x0400); /* smallest normal */
  CHECK_EQ_INT(fsh_float_to_half(ldexpf(1.0f, -24)), 0x0001); /* smallest subnormal */
  CHECK_EQ_INT(fsh_float_to_half(ldexpf(1.0f, -25)), 0x0000); /* tie to even: zero */
  CHECK_EQ_INT(fsh_float_to_half(ldexpf(3.0f, -25)), 0x0002); /* 1.5 ulp: to even 2 */
  CHECK_EQ_INT(fsh_float_to_half(1.0f + ldexpf(1.0f, -11)), 0x3C00); /* tie: even */
  CHECK_EQ_INT(fsh_float_to_half(1.0f + ldexpf(3.0f, -11)), 0x3C02); /* tie: up to even */
  /* Every finite half survives half -> float -> half. */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue; /* NaNs */
    if (fsh_float_to_half(fsh_half_to_float((uint16_t)h)) != h) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(fsh_half_to_float(0x3555) > 0.333f && fsh_half_to_float(0x3555) < 0.334f);
  CHECK(isnan(fsh_half_to_float(0x7E00)));
}

FSH_TEST_MAIN(TEST(test_decimal), TEST(test_half))
