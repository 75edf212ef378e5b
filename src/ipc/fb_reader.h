/* fb_reader.h -- a verifying flatbuffer reader.
 *
 * Every access checks what it touches before touching it: table and vtable
 * positions, field sizes against the table's inline size, offsets to
 * sub-tables, vectors and strings, vector lengths, string termination, and
 * table nesting depth. Reads use memcpy, so no alignment is assumed. A
 * budget on the number of tables opened bounds the work a small buffer can
 * cause through shared (DAG) sub-tables. Malformed input yields EINVAL with a
 * message naming the flatbuffer offset; nothing is ever read out of bounds.
 *
 * Slots are vtable field indices as declared in the .fbs schema (a union
 * field takes two slots: its type, then its value). */
#ifndef FSH_IPC_FB_READER_H
#define FSH_IPC_FB_READER_H

#include <flightshuffle/arrow.h>

#define FSH_FB_MAX_DEPTH 64

typedef struct fsh_fb_reader {
  const uint8_t *data;
  int64_t size;
  int64_t tables_left; /* budget of table opens */
} fsh_fb_reader;

typedef struct fsh_fb_table {
  fsh_fb_reader *r;
  int64_t pos;      /* table start (its soffset to the vtable) */
  int64_t vt;       /* vtable start */
  int32_t vt_size;  /* vtable size in bytes */
  int32_t tbl_size; /* inline table size in bytes */
  int depth;
} fsh_fb_table;

typedef struct fsh_fb_vector {
  fsh_fb_reader *r;
  int64_t pos;       /* first element */
  int64_t n;         /* number of elements (0 when absent) */
  int64_t elem_size; /* bytes per element */
  bool present;
  int depth; /* depth of the table holding the vector */
} fsh_fb_vector;

/* Opens the root table of data[0..size). The reader must outlive every
 * table and vector derived from it. */
FSH_NODISCARD int fsh_fb_root(fsh_fb_reader *r, const uint8_t *data, int64_t size,
                              fsh_fb_table *root, fsh_error *err);

/* Whether slot is set in the table (present in the vtable, non-zero). */
bool fsh_fb_has(const fsh_fb_table *t, int slot);

/* Scalars: *out = the field's value, or def when absent. */
FSH_NODISCARD int fsh_fb_u8(const fsh_fb_table *t, int slot, uint8_t def, uint8_t *out,
                            fsh_error *err);
FSH_NODISCARD int fsh_fb_bool(const fsh_fb_table *t, int slot, bool def, bool *out,
                              fsh_error *err);
FSH_NODISCARD int fsh_fb_i16(const fsh_fb_table *t, int slot, int16_t def, int16_t *out,
                             fsh_error *err);
FSH_NODISCARD int fsh_fb_i32(const fsh_fb_table *t, int slot, int32_t def, int32_t *out,
                             fsh_error *err);
FSH_NODISCARD int fsh_fb_i64(const fsh_fb_table *t, int slot, int64_t def, int64_t *out,
                             fsh_error *err);

/* Sub-table: *present false (and *out untouched) when absent. */
FSH_NODISCARD int fsh_fb_table_field(const fsh_fb_table *t, int slot, fsh_fb_table *out,
                                     bool *present, fsh_error *err);
/* String: *s NULL when absent; otherwise NUL-terminated, *len bytes. */
FSH_NODISCARD int fsh_fb_string(const fsh_fb_table *t, int slot, const char **s, int64_t *len,
                                fsh_error *err);
/* Vector of elem_size-byte elements (scalars, structs, or 4-byte offsets
 * for tables/strings). An absent vector is empty with present = false. */
FSH_NODISCARD int fsh_fb_vector_field(const fsh_fb_table *t, int slot, int64_t elem_size,
                                      fsh_fb_vector *out, fsh_error *err);
/* Element i of a vector of structs/scalars (i < v->n, checked by caller). */
static inline const uint8_t *fsh_fb_vector_elem(const fsh_fb_vector *v, int64_t i) {
  return v->r->data + v->pos + i * v->elem_size;
}
FSH_NODISCARD int fsh_fb_vector_table(const fsh_fb_vector *v, int64_t i, fsh_fb_table *out,
                                      fsh_error *err);
FSH_NODISCARD int fsh_fb_vector_string(const fsh_fb_vector *v, int64_t i, const char **s,
                                       int64_t *len, fsh_error *err);
/* Union: type from slot type_slot, value table from type_slot + 1. *type is
 * 0 (NONE) when absent; a non-zero type without a value is an error. */
FSH_NODISCARD int fsh_fb_union(const fsh_fb_table *t, int type_slot, uint8_t *type,
                               fsh_fb_table *value, fsh_error *err);

/* Little-endian loads from verified memory. */
static inline int32_t fsh_fb_load_i32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}
static inline int64_t fsh_fb_load_i64(const uint8_t *p) {
  uint64_t lo = (uint32_t)fsh_fb_load_i32(p), hi = (uint32_t)fsh_fb_load_i32(p + 4);
  return (int64_t)(lo | hi << 32);
}

#endif
