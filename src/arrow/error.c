/* error.c -- the error struct: formatted messages with context prefixes. */
#include <flightshuffle/arrow.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int fsh_error_set(fsh_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

int fsh_error_prefix(fsh_error *err, int code, const char *fmt, ...) {
  if (!err) return code;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  if (n < 0) return code;
  size_t plen = strlen(prefix);
  size_t mlen = strnlen(err->message, sizeof err->message - 1);
  if (plen >= sizeof err->message - 1) plen = sizeof err->message - 1;
  size_t keep = sizeof err->message - 1 - plen;
  if (mlen > keep) mlen = keep;
  memmove(err->message + plen, err->message, mlen);
  memcpy(err->message, prefix, plen);
  err->message[plen + mlen] = '\0';
  return code;
}
