/* numeric.h -- conversions the arrow layer and its tools share but users
 * do not see: decimal128/256 values <-> decimal strings, float16 <-> float,
 * a float slot of any width as a double. */
#ifndef FSH_ARROW_NUMERIC_H
#define FSH_ARROW_NUMERIC_H

#include <flightshuffle/arrow.h>

#include <string.h>

/* Writes the unscaled integer held in `n_bytes` (16 or 32) little-endian
 * two's-complement bytes as a decimal string ("-12345"). `out_size` >= 80
 * always suffices. Returns the string length. */
int fsh_decimal_format(const uint8_t *le, int n_bytes, char *out, size_t out_size);

/* Parses an optionally signed decimal integer s[0..len) into n_bytes (16 or
 * 32) little-endian two's-complement bytes. Returns 0, EINVAL on a syntax
 * error, ERANGE if the value does not fit. `le` is untouched on error. */
int fsh_decimal_parse(const char *s, size_t len, uint8_t *le, int n_bytes);

/* IEEE 754 binary16 <-> binary32; float -> half rounds to nearest even. */
float fsh_half_to_float(uint16_t h);
uint16_t fsh_float_to_half(float f);

/* Slot i of a float16 / float32 / float64 values buffer as a double
 * (any other type reads as float16: callers pass float types only). */
static inline double fsh_float_value(fsh_type_id t, const uint8_t *values, int64_t i) {
  if (t == FSH_TYPE_FLOAT64) {
    double d;
    memcpy(&d, values + 8 * i, 8);
    return d;
  }
  if (t == FSH_TYPE_FLOAT32) {
    float f;
    memcpy(&f, values + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, values + 2 * i, 2);
  return fsh_half_to_float(h);
}

#endif
