/* numeric.h -- conversions the arrow layer and its tools share but users
 * do not see: decimal128/256 values <-> decimal strings, float16 <-> float. */
#ifndef FSH_ARROW_NUMERIC_H
#define FSH_ARROW_NUMERIC_H

#include <flightshuffle/arrow.h>

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

#endif
