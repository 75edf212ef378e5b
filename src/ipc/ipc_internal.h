/* ipc_internal.h -- what the IPC layer's files share and nobody else sees:
 * framing constants and the body compression codec. */
#ifndef FSH_IPC_INTERNAL_H
#define FSH_IPC_INTERNAL_H

#include <flightshuffle/ipc.h>

/* Encapsulated message framing: 0xFFFFFFFF, int32 metadata length (padded
 * so that metadata ends on an 8-byte boundary), metadata, body. */
#define FSH_IPC_CONTINUATION 0xFFFFFFFFu
/* File format: "ARROW1" + 2 padding bytes at the start, "ARROW1" at the end. */
#define FSH_IPC_MAGIC "ARROW1"
#define FSH_IPC_MAGIC_LEN 6
/* Bodies and metadata are padded to this alignment. */
#define FSH_IPC_ALIGN 8

/* Raw codec (no Arrow length prefix): compresses src[0..n) into a new
 * buffer *out. */
FSH_NODISCARD int fsh_codec_compress(fsh_compression c, int level, const uint8_t *src, int64_t n,
                                     fsh_buffer **out, fsh_error *err);
/* Decompresses src[0..n) into exactly dst_len bytes at dst; a different
 * decompressed size is an error (EINVAL). */
FSH_NODISCARD int fsh_codec_decompress(fsh_compression c, const uint8_t *src, int64_t n,
                                       uint8_t *dst, int64_t dst_len, fsh_error *err);

#endif
