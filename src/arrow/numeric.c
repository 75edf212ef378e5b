/* numeric.c -- decimal128/256 <-> decimal strings on 32-bit limbs, and
 * float16 <-> float32 by bit manipulation. */
#include "arrow/numeric.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define MAX_LIMBS 8 /* 256 bits */

static void limbs_from_bytes(const uint8_t *le, int n_limbs, uint32_t *limbs) {
  for (int i = 0; i < n_limbs; i++)
    limbs[i] = (uint32_t)le[4 * i] | (uint32_t)le[4 * i + 1] << 8 |
               (uint32_t)le[4 * i + 2] << 16 | (uint32_t)le[4 * i + 3] << 24;
}

static void limbs_to_bytes(const uint32_t *limbs, int n_limbs, uint8_t *le) {
  for (int i = 0; i < n_limbs; i++)
    for (int k = 0; k < 4; k++) le[4 * i + k] = (uint8_t)(limbs[i] >> (8 * k));
}

/* Two's-complement negation in place. */
static void limbs_negate(uint32_t *limbs, int n_limbs) {
  uint64_t carry = 1;
  for (int i = 0; i < n_limbs; i++) {
    uint64_t v = (uint64_t)(uint32_t)~limbs[i] + carry;
    limbs[i] = (uint32_t)v;
    carry = v >> 32;
  }
}

static bool limbs_zero(const uint32_t *limbs, int n_limbs) {
  for (int i = 0; i < n_limbs; i++)
    if (limbs[i]) return false;
  return true;
}

/* Divides by d in place; returns the remainder. */
static uint32_t limbs_divmod(uint32_t *limbs, int n_limbs, uint32_t d) {
  uint64_t rem = 0;
  for (int i = n_limbs - 1; i >= 0; i--) {
    uint64_t cur = rem << 32 | limbs[i];
    limbs[i] = (uint32_t)(cur / d);
    rem = cur % d;
  }
  return (uint32_t)rem;
}

int fsh_decimal_format(const uint8_t *le, int n_bytes, char *out, size_t out_size) {
  uint32_t limbs[MAX_LIMBS] = {0};
  int n_limbs = n_bytes / 4;
  if (n_limbs > MAX_LIMBS) n_limbs = MAX_LIMBS;
  limbs_from_bytes(le, n_limbs, limbs);
  bool negative = limbs[n_limbs - 1] >> 31;
  if (negative) limbs_negate(limbs, n_limbs);
  char digits[96];
  int n = 0;
  do {
    uint32_t chunk = limbs_divmod(limbs, n_limbs, 1000000000u);
    bool last = limbs_zero(limbs, n_limbs);
    for (int k = 0; k < 9 && (!last || chunk); k++) {
      digits[n++] = (char)('0' + chunk % 10);
      chunk /= 10;
    }
  } while (!limbs_zero(limbs, n_limbs));
  if (n == 0) digits[n++] = '0';
  if (negative) digits[n++] = '-';
  size_t w = 0;
  for (int i = n - 1; i >= 0 && w + 1 < out_size; i--) out[w++] = digits[i];
  if (out_size) out[w] = '\0';
  return n;
}

int fsh_decimal_parse(const char *s, size_t len, uint8_t *le, int n_bytes) {
  uint32_t limbs[MAX_LIMBS] = {0};
  int n_limbs = n_bytes / 4;
  if (n_limbs > MAX_LIMBS || n_limbs < 1) return EINVAL;
  size_t i = 0;
  bool negative = false;
  if (i < len && (s[i] == '-' || s[i] == '+')) negative = s[i++] == '-';
  if (i == len) return EINVAL;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return EINVAL;
    uint64_t carry = (uint64_t)(s[i] - '0');
    for (int k = 0; k < n_limbs; k++) {
      uint64_t v = (uint64_t)limbs[k] * 10 + carry;
      limbs[k] = (uint32_t)v;
      carry = v >> 32;
    }
    if (carry) return ERANGE;
  }
  /* The magnitude must fit: < 2^(bits-1), or == 2^(bits-1) when negative. */
  if (limbs[n_limbs - 1] >> 31) {
    bool is_min = negative && limbs[n_limbs - 1] == 0x80000000u;
    for (int k = 0; is_min && k < n_limbs - 1; k++) is_min = limbs[k] == 0;
    if (!is_min) return ERANGE;
  }
  if (negative) limbs_negate(limbs, n_limbs);
  limbs_to_bytes(limbs, n_limbs, le);
  return 0;
}

float fsh_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    float v = ldexpf((float)mant, -24); /* zero or subnormal: exact */
    return sign ? -v : v;
  }
  if (exp == 31)
    bits = sign | 0x7f800000u | mant << 13; /* inf or NaN (payload kept) */
  else
    bits = sign | (exp + 112) << 23 | mant << 13;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t fsh_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) /* inf or NaN (quiet, top payload bits kept) */
    return (uint16_t)(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 | ((x >> 13) & 0x3ff) : 0));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds past 65504 */
  if (x < 0x38800000u) {                                   /* below 2^-14: subnormal */
    float a;
    memcpy(&a, &x, sizeof a);
    return (uint16_t)(sign | (uint16_t)nearbyintf(a * 16777216.0f));
  }
  x -= 0x38000000u; /* rebias the exponent from 127 to 15 */
  x += 0x0fffu + ((x >> 13) & 1); /* round to nearest, ties to even */
  return (uint16_t)(sign | (x >> 13));
}
