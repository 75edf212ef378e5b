/* fb_reader.c -- the verifying flatbuffer reader: every offset, vtable,
 * vector, string and union is bounds-checked before it is used. */
#include "ipc/fb_reader.h"

#include <errno.h>
#include <string.h>

static int bad(fsh_error *err, const char *what, int64_t at) {
  return fsh_error_set(err, EINVAL, "malformed flatbuffer: %s (at byte %lld)", what,
                       (long long)at);
}

/* Whether [pos, pos+n) lies inside the buffer. */
static bool in_bounds(const fsh_fb_reader *r, int64_t pos, int64_t n) {
  return pos >= 0 && n >= 0 && pos <= r->size && n <= r->size - pos;
}

static uint32_t load_u32(const fsh_fb_reader *r, int64_t pos) {
  return (uint32_t)fsh_fb_load_i32(r->data + pos);
}

static uint16_t load_u16(const fsh_fb_reader *r, int64_t pos) {
  return (uint16_t)(r->data[pos] | r->data[pos + 1] << 8);
}

/* Opens the table at pos: verifies its vtable and inline size. */
static int open_table(fsh_fb_reader *r, int64_t pos, int depth, fsh_fb_table *out,
                      fsh_error *err) {
  if (depth > FSH_FB_MAX_DEPTH) return bad(err, "tables nested too deeply", pos);
  if (r->tables_left-- <= 0) return bad(err, "too many tables for the buffer size", pos);
  if (!in_bounds(r, pos, 4)) return bad(err, "table offset out of bounds", pos);
  int64_t vt = pos - (int64_t)fsh_fb_load_i32(r->data + pos);
  if (!in_bounds(r, vt, 4)) return bad(err, "vtable offset out of bounds", pos);
  int32_t vt_size = load_u16(r, vt), tbl_size = load_u16(r, vt + 2);
  if (vt_size < 4 || (vt_size & 1) || !in_bounds(r, vt, vt_size))
    return bad(err, "invalid vtable size", vt);
  if (tbl_size < 4 || !in_bounds(r, pos, tbl_size))
    return bad(err, "invalid table size", pos);
  *out = (fsh_fb_table){r, pos, vt, vt_size, tbl_size, depth};
  return 0;
}

int fsh_fb_root(fsh_fb_reader *r, const uint8_t *data, int64_t size, fsh_fb_table *root,
                fsh_error *err) {
  r->data = data;
  r->size = size;
  r->tables_left = size + 1024;
  if (!data || size < 8) return bad(err, "buffer too small", 0);
  return open_table(r, (int64_t)load_u32(r, 0), 1, root, err);
}

/* Offset of slot's field inside the table, 0 when absent. */
static int64_t field_offset(const fsh_fb_table *t, int slot) {
  int64_t at = 4 + 2 * (int64_t)slot;
  if (slot < 0 || at + 2 > t->vt_size) return 0;
  return load_u16(t->r, t->vt + at);
}

bool fsh_fb_has(const fsh_fb_table *t, int slot) { return field_offset(t, slot) != 0; }

/* Position of slot's inline value of n bytes, or 0 when absent; EINVAL when
 * it overruns the table. */
static int field_pos(const fsh_fb_table *t, int slot, int64_t n, int64_t *pos, fsh_error *err) {
  int64_t fo = field_offset(t, slot);
  *pos = 0;
  if (fo == 0) return 0;
  if (fo + n > t->tbl_size) return bad(err, "field overruns its table", t->pos + fo);
  *pos = t->pos + fo;
  return 0;
}

#define FB_SCALAR(name, T, n, load)                                                    \
  int name(const fsh_fb_table *t, int slot, T def, T *out, fsh_error *err) {          \
    int64_t pos;                                                                      \
    FSH_RETURN_NOT_OK(field_pos(t, slot, n, &pos, err));                              \
    *out = pos ? (T)(load) : def;                                                     \
    return 0;                                                                         \
  }

FB_SCALAR(fsh_fb_u8, uint8_t, 1, t->r->data[pos])
FB_SCALAR(fsh_fb_bool, bool, 1, t->r->data[pos] != 0)
FB_SCALAR(fsh_fb_i16, int16_t, 2, (int16_t)load_u16(t->r, pos))
FB_SCALAR(fsh_fb_i32, int32_t, 4, fsh_fb_load_i32(t->r->data + pos))
FB_SCALAR(fsh_fb_i64, int64_t, 8, fsh_fb_load_i64(t->r->data + pos))

/* Follows the uoffset stored at pos (already verified readable). */
static int follow(const fsh_fb_reader *r, int64_t pos, int64_t *target, fsh_error *err) {
  int64_t to = pos + (int64_t)load_u32(r, pos);
  if (!in_bounds(r, to, 4)) return bad(err, "offset out of bounds", pos);
  *target = to;
  return 0;
}

int fsh_fb_table_field(const fsh_fb_table *t, int slot, fsh_fb_table *out, bool *present,
                       fsh_error *err) {
  int64_t pos = 0, to = 0;
  *present = false;
  FSH_RETURN_NOT_OK(field_pos(t, slot, 4, &pos, err));
  if (!pos) return 0;
  FSH_RETURN_NOT_OK(follow(t->r, pos, &to, err));
  FSH_RETURN_NOT_OK(open_table(t->r, to, t->depth + 1, out, err));
  *present = true;
  return 0;
}

/* Verifies the vector header at pos and its n * elem_size bytes. */
static int open_vector(fsh_fb_reader *r, int64_t pos, int64_t elem_size, int depth,
                       fsh_fb_vector *out, fsh_error *err) {
  int64_t n = (int64_t)load_u32(r, pos);
  if (n > (r->size - pos - 4) / elem_size) return bad(err, "vector overruns the buffer", pos);
  *out = (fsh_fb_vector){r, pos + 4, n, elem_size, true, depth};
  return 0;
}

/* Verifies the string at pos: in bounds and NUL-terminated. */
static int open_string(const fsh_fb_reader *r, int64_t pos, const char **s, int64_t *len,
                       fsh_error *err) {
  int64_t n = (int64_t)load_u32(r, pos);
  if (n >= r->size - pos - 4) return bad(err, "string overruns the buffer", pos);
  if (r->data[pos + 4 + n] != 0) return bad(err, "string is not NUL-terminated", pos);
  *s = (const char *)r->data + pos + 4;
  *len = n;
  return 0;
}

int fsh_fb_string(const fsh_fb_table *t, int slot, const char **s, int64_t *len,
                  fsh_error *err) {
  int64_t pos = 0, to = 0;
  *s = NULL;
  *len = 0;
  FSH_RETURN_NOT_OK(field_pos(t, slot, 4, &pos, err));
  if (!pos) return 0;
  FSH_RETURN_NOT_OK(follow(t->r, pos, &to, err));
  return open_string(t->r, to, s, len, err);
}

int fsh_fb_vector_field(const fsh_fb_table *t, int slot, int64_t elem_size, fsh_fb_vector *out,
                        fsh_error *err) {
  int64_t pos = 0, to = 0;
  *out = (fsh_fb_vector){t->r, 0, 0, elem_size, false, t->depth};
  if (elem_size <= 0) return fsh_error_set(err, EINVAL, "flatbuffer: bad element size");
  FSH_RETURN_NOT_OK(field_pos(t, slot, 4, &pos, err));
  if (!pos) return 0;
  FSH_RETURN_NOT_OK(follow(t->r, pos, &to, err));
  return open_vector(t->r, to, elem_size, t->depth, out, err);
}

/* Element i of a vector of offsets: checks i and follows the offset. */
static int vector_target(const fsh_fb_vector *v, int64_t i, int64_t *to, fsh_error *err) {
  if (v->elem_size != 4 || i < 0 || i >= v->n)
    return fsh_error_set(err, EINVAL, "flatbuffer: vector index %lld out of range",
                         (long long)i);
  return follow(v->r, v->pos + 4 * i, to, err);
}

int fsh_fb_vector_table(const fsh_fb_vector *v, int64_t i, fsh_fb_table *out, fsh_error *err) {
  int64_t to = 0;
  FSH_RETURN_NOT_OK(vector_target(v, i, &to, err));
  return open_table(v->r, to, v->depth + 1, out, err);
}

int fsh_fb_vector_string(const fsh_fb_vector *v, int64_t i, const char **s, int64_t *len,
                         fsh_error *err) {
  int64_t to = 0;
  FSH_RETURN_NOT_OK(vector_target(v, i, &to, err));
  return open_string(v->r, to, s, len, err);
}

int fsh_fb_union(const fsh_fb_table *t, int type_slot, uint8_t *type, fsh_fb_table *value,
                 fsh_error *err) {
  bool present;
  FSH_RETURN_NOT_OK(fsh_fb_u8(t, type_slot, 0, type, err));
  if (*type == 0) return 0;
  FSH_RETURN_NOT_OK(fsh_fb_table_field(t, type_slot + 1, value, &present, err));
  if (!present) return bad(err, "union has a type but no value", t->pos);
  return 0;
}
