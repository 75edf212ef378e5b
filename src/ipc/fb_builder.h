/* fb_builder.h -- a small flatbuffer builder for the IPC write side.
 *
 * Builds back to front like the reference builder: children (strings,
 * vectors, tables) are created first and referenced by the offsets they
 * return, then the parent table is started, its fields added, and ended.
 * One table at a time may be in progress. Output is little-endian, every
 * scalar aligned to its size, and the finished buffer's size is a multiple
 * of 8 (so that an IPC message body that follows it stays aligned).
 *
 * Errors are sticky: an allocation failure (or misuse) is remembered, later
 * calls become no-ops returning 0, and fsh_fbb_finish reports it. This keeps
 * callers free of an error check after every field. */
#ifndef FSH_IPC_FB_BUILDER_H
#define FSH_IPC_FB_BUILDER_H

#include <flightshuffle/arrow.h>

/* A reference to a built object: its distance from the end of the buffer. */
typedef uint32_t fsh_fb_ref;

#define FSH_FBB_MAX_FIELDS 16

typedef struct fsh_fbb {
  uint8_t *buf;    /* data occupies buf[cap - size, cap) */
  size_t cap;
  size_t size;
  size_t minalign; /* largest alignment seen */
  int error;       /* sticky: 0, ENOMEM or EINVAL */
  /* the table in progress */
  bool in_table;
  size_t table_start;
  int max_field;                           /* highest field id added, -1 if none */
  uint32_t field_pos[FSH_FBB_MAX_FIELDS];  /* positions (from the end), 0 = absent */
} fsh_fbb;

void fsh_fbb_init(fsh_fbb *b);
void fsh_fbb_reset(fsh_fbb *b); /* frees the scratch memory */

/* Strings (a NUL is appended) and vectors. `elems` of create_vector are
 * raw little-endian bytes: n elements of elem_size each, aligned to align. */
fsh_fb_ref fsh_fbb_create_string(fsh_fbb *b, const char *s, size_t n);
fsh_fb_ref fsh_fbb_create_vector(fsh_fbb *b, const void *elems, size_t n, size_t elem_size,
                                 size_t align);
/* A vector of offsets to tables or strings, refs[0] first. */
fsh_fb_ref fsh_fbb_create_offset_vector(fsh_fbb *b, const fsh_fb_ref *refs, size_t n);

/* Tables: field ids are the declaration order in the .fbs (union fields
 * take two ids: the _type byte, then the value offset). */
void fsh_fbb_start_table(fsh_fbb *b);
void fsh_fbb_add_u8(fsh_fbb *b, int field, uint8_t v);
void fsh_fbb_add_i16(fsh_fbb *b, int field, int16_t v);
void fsh_fbb_add_i32(fsh_fbb *b, int field, int32_t v);
void fsh_fbb_add_i64(fsh_fbb *b, int field, int64_t v);
void fsh_fbb_add_offset(fsh_fbb *b, int field, fsh_fb_ref ref); /* ref 0 = absent */
/* A struct stored inline (raw little-endian bytes). */
void fsh_fbb_add_struct(fsh_fbb *b, int field, const void *data, size_t size, size_t align);
fsh_fb_ref fsh_fbb_end_table(fsh_fbb *b);

/* Writes the root offset and copies the finished flatbuffer into a new
 * buffer whose size is a multiple of 8. The builder can then be reset or
 * reused (fsh_fbb_clear). Returns the sticky error if one occurred. */
FSH_NODISCARD int fsh_fbb_finish(fsh_fbb *b, fsh_fb_ref root, fsh_buffer **out, fsh_error *err);
/* Empties the builder, keeping its memory. */
void fsh_fbb_clear(fsh_fbb *b);

/* Little-endian stores for building struct bytes. */
static inline void fsh_store_le16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void fsh_store_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void fsh_store_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif
