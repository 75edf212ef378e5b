/* codec.c -- the raw body compression codecs of Arrow IPC (LZ4 frame and
 * ZSTD) and the names of fsh_compression values. The Arrow framing (the
 * int64 uncompressed-length prefix) is the callers' business. */
#include "ipc/ipc_internal.h"

#include <errno.h>
#include <lz4frame.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <zstd.h>

const char *fsh_compression_name(fsh_compression c) {
  switch (c) {
    case FSH_COMPRESSION_NONE: return "none";
    case FSH_COMPRESSION_LZ4_FRAME: return "lz4";
    case FSH_COMPRESSION_ZSTD: return "zstd";
  }
  return "unknown";
}

int fsh_compression_parse(const char *s, fsh_compression *out, fsh_error *err) {
  if (s && (strcasecmp(s, "none") == 0 || strcasecmp(s, "uncompressed") == 0)) {
    *out = FSH_COMPRESSION_NONE;
  } else if (s && (strcasecmp(s, "lz4") == 0 || strcasecmp(s, "lz4_frame") == 0)) {
    *out = FSH_COMPRESSION_LZ4_FRAME;
  } else if (s && strcasecmp(s, "zstd") == 0) {
    *out = FSH_COMPRESSION_ZSTD;
  } else {
    return fsh_error_set(err, EINVAL, "unknown compression '%s' (expected none, lz4 or zstd)",
                         s ? s : "(null)");
  }
  return 0;
}

static int lz4_compress(int level, const uint8_t *src, int64_t n, fsh_buffer **out,
                        fsh_error *err) {
  LZ4F_preferences_t prefs;
  memset(&prefs, 0, sizeof prefs);
  prefs.compressionLevel = level;
  prefs.frameInfo.contentSize = (unsigned long long)n;
  size_t bound = LZ4F_compressFrameBound((size_t)n, &prefs);
  fsh_buffer *buf = fsh_buffer_new((int64_t)bound, false);
  if (!buf) return fsh_error_set(err, ENOMEM, "lz4: out of memory (%zu bytes)", bound);
  size_t got = LZ4F_compressFrame(buf->data, bound, src, (size_t)n, &prefs);
  if (LZ4F_isError(got)) {
    fsh_buffer_unref(buf);
    return fsh_error_set(err, EIO, "lz4 compression failed: %s", LZ4F_getErrorName(got));
  }
  buf->size = (int64_t)got;
  *out = buf;
  return 0;
}

static int zstd_compress(int level, const uint8_t *src, int64_t n, fsh_buffer **out,
                         fsh_error *err) {
  size_t bound = ZSTD_compressBound((size_t)n);
  fsh_buffer *buf = fsh_buffer_new((int64_t)bound, false);
  if (!buf) return fsh_error_set(err, ENOMEM, "zstd: out of memory (%zu bytes)", bound);
  size_t got = ZSTD_compress(buf->data, bound, src, (size_t)n, level ? level : ZSTD_CLEVEL_DEFAULT);
  if (ZSTD_isError(got)) {
    fsh_buffer_unref(buf);
    return fsh_error_set(err, EIO, "zstd compression failed: %s", ZSTD_getErrorName(got));
  }
  buf->size = (int64_t)got;
  *out = buf;
  return 0;
}

int fsh_codec_compress(fsh_compression c, int level, const uint8_t *src, int64_t n,
                       fsh_buffer **out, fsh_error *err) {
  if (n < 0 || (n > 0 && !src)) return fsh_error_set(err, EINVAL, "compress: bad input");
  switch (c) {
    case FSH_COMPRESSION_LZ4_FRAME: return lz4_compress(level, src, n, out, err);
    case FSH_COMPRESSION_ZSTD: return zstd_compress(level, src, n, out, err);
    case FSH_COMPRESSION_NONE:
      if (!(*out = fsh_buffer_copy(src, n))) return fsh_error_set(err, ENOMEM, "out of memory");
      return 0;
  }
  return fsh_error_set(err, EINVAL, "unknown compression codec %d", (int)c);
}

/* ---- per-thread decompression contexts ---------------------------------
 * A ZSTD DCtx is ~100 KiB and an LZ4F dctx grows buffers for its frames:
 * making one per buffer would dominate small-buffer decoding, so each
 * thread keeps one of each, freed when the thread exits. */

typedef struct dctx_cache {
  LZ4F_dctx *lz4;
  ZSTD_DCtx *zstd;
} dctx_cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static bool cache_key_ok;

static void cache_free(void *p) {
  dctx_cache *c = p;
  if (c->lz4) LZ4F_freeDecompressionContext(c->lz4);
  if (c->zstd) ZSTD_freeDCtx(c->zstd);
  fsh_free(c);
}

static void cache_key_init(void) { cache_key_ok = pthread_key_create(&cache_key, cache_free) == 0; }

/* This thread's cache (NULL on ENOMEM). */
static dctx_cache *cache_get(void) {
  pthread_once(&cache_once, cache_key_init);
  if (!cache_key_ok) return NULL;
  dctx_cache *c = pthread_getspecific(cache_key);
  if (!c && (c = fsh_calloc(1, sizeof *c)) && pthread_setspecific(cache_key, c) != 0) {
    fsh_free(c);
    c = NULL;
  }
  return c;
}

static LZ4F_dctx *lz4_dctx(void) {
  dctx_cache *c = cache_get();
  if (c && !c->lz4 && LZ4F_isError(LZ4F_createDecompressionContext(&c->lz4, LZ4F_VERSION)))
    c->lz4 = NULL;
  return c ? c->lz4 : NULL;
}

static ZSTD_DCtx *zstd_dctx(void) {
  dctx_cache *c = cache_get();
  if (c && !c->zstd) c->zstd = ZSTD_createDCtx();
  return c ? c->zstd : NULL;
}

/* Decodes one or more concatenated LZ4 frames; output must fill dst exactly. */
static int lz4_decompress(const uint8_t *src, int64_t n, uint8_t *dst, int64_t dst_len,
                          fsh_error *err) {
  LZ4F_dctx *dctx = lz4_dctx();
  if (!dctx) return fsh_error_set(err, ENOMEM, "lz4: cannot create a decompression context");
  LZ4F_resetDecompressionContext(dctx);
  int rc = 0;
  int64_t in_pos = 0, out_pos = 0;
  size_t hint = 1;
  while (in_pos < n) {
    size_t in_size = (size_t)(n - in_pos), out_size = (size_t)(dst_len - out_pos);
    hint = LZ4F_decompress(dctx, dst + out_pos, &out_size, src + in_pos, &in_size, NULL);
    if (LZ4F_isError(hint)) {
      rc = fsh_error_set(err, EINVAL, "lz4 decompression failed: %s", LZ4F_getErrorName(hint));
      break;
    }
    in_pos += (int64_t)in_size;
    out_pos += (int64_t)out_size;
    if (in_size == 0 && out_size == 0) {
      rc = fsh_error_set(err, EINVAL, "lz4: data decompresses to more than the %lld bytes declared",
                         (long long)dst_len);
      break;
    }
  }
  if (rc) return rc;
  if (hint != 0) return fsh_error_set(err, EINVAL, "lz4: truncated frame");
  if (out_pos != dst_len)
    return fsh_error_set(err, EINVAL, "lz4: decompressed %lld bytes, expected %lld",
                         (long long)out_pos, (long long)dst_len);
  return 0;
}

static int zstd_decompress(const uint8_t *src, int64_t n, uint8_t *dst, int64_t dst_len,
                           fsh_error *err) {
  unsigned long long declared = ZSTD_getFrameContentSize(src, (size_t)n);
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return fsh_error_set(err, EINVAL, "zstd: not a zstd frame");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != (unsigned long long)dst_len)
    return fsh_error_set(err, EINVAL, "zstd: frame holds %llu bytes, expected %lld", declared,
                         (long long)dst_len);
  ZSTD_DCtx *dctx = zstd_dctx();
  if (!dctx) return fsh_error_set(err, ENOMEM, "zstd: cannot create a decompression context");
  size_t got = ZSTD_decompressDCtx(dctx, dst, (size_t)dst_len, src, (size_t)n);
  if (ZSTD_isError(got))
    return fsh_error_set(err, EINVAL, "zstd decompression failed: %s", ZSTD_getErrorName(got));
  if ((int64_t)got != dst_len)
    return fsh_error_set(err, EINVAL, "zstd: decompressed %zu bytes, expected %lld", got,
                         (long long)dst_len);
  return 0;
}

int fsh_codec_decompress(fsh_compression c, const uint8_t *src, int64_t n, uint8_t *dst,
                         int64_t dst_len, fsh_error *err) {
  if (n < 0 || dst_len < 0 || (n > 0 && !src) || (dst_len > 0 && !dst))
    return fsh_error_set(err, EINVAL, "decompress: bad arguments");
  if (dst_len == 0 && n == 0) return 0;
  switch (c) {
    case FSH_COMPRESSION_LZ4_FRAME: return lz4_decompress(src, n, dst, dst_len, err);
    case FSH_COMPRESSION_ZSTD: return zstd_decompress(src, n, dst, dst_len, err);
    case FSH_COMPRESSION_NONE:
      if (n != dst_len)
        return fsh_error_set(err, EINVAL, "uncompressed size %lld, expected %lld", (long long)n,
                             (long long)dst_len);
      memcpy(dst, src, (size_t)n);
      return 0;
  }
  return fsh_error_set(err, EINVAL, "unknown compression codec %d", (int)c);
}
