/* fb_builder.c -- back-to-front flatbuffer builder (see fb_builder.h).
 *
 * Positions are distances from the end of the buffer: an object created
 * earlier sits at a higher address in the final buffer, so the unsigned
 * offsets flatbuffers uses always point forward. */
#include "ipc/fb_builder.h"

#include <errno.h>
#include <string.h>

void fsh_fbb_init(fsh_fbb *b) {
  memset(b, 0, sizeof *b);
  b->minalign = 1;
  b->max_field = -1;
}

void fsh_fbb_reset(fsh_fbb *b) {
  fsh_free(b->buf);
  fsh_fbb_init(b);
}

void fsh_fbb_clear(fsh_fbb *b) {
  b->size = 0;
  b->minalign = 1;
  b->error = 0;
  b->in_table = false;
  b->max_field = -1;
}

/* Makes room for `need` more bytes in front of the data. */
static bool reserve(fsh_fbb *b, size_t need) {
  if (b->error) return false;
  if (b->cap - b->size >= need) return true;
  size_t cap = b->cap ? b->cap * 2 : 256;
  while (cap - b->size < need) cap *= 2;
  if (cap > (size_t)INT32_MAX) {
    b->error = EINVAL; /* flatbuffers are limited to 2 GiB */
    return false;
  }
  uint8_t *nb = fsh_malloc(cap);
  if (!nb) {
    b->error = ENOMEM;
    return false;
  }
  if (b->size) memcpy(nb + cap - b->size, b->buf + b->cap - b->size, b->size);
  fsh_free(b->buf);
  b->buf = nb;
  b->cap = cap;
  return true;
}

static void push(fsh_fbb *b, const void *data, size_t n) {
  if (!reserve(b, n)) return;
  b->size += n;
  memcpy(b->buf + b->cap - b->size, data, n);
}

static void pad(fsh_fbb *b, size_t n) {
  if (!reserve(b, n)) return;
  b->size += n;
  memset(b->buf + b->cap - b->size, 0, n);
}

/* Pads so that after `len` more bytes the position is a multiple of align. */
static void prealign(fsh_fbb *b, size_t len, size_t align) {
  if (align > b->minalign) b->minalign = align;
  size_t p = (b->size + len) % align;
  if (p) pad(b, align - p);
}

static void push_u32(fsh_fbb *b, uint32_t v) {
  uint8_t t[4];
  fsh_store_le32(t, v);
  push(b, t, 4);
}

fsh_fb_ref fsh_fbb_create_string(fsh_fbb *b, const char *s, size_t n) {
  if (b->in_table) b->error = EINVAL;
  if (n > (size_t)INT32_MAX) b->error = EINVAL;
  prealign(b, n + 1, 4);
  pad(b, 1); /* the NUL */
  if (n) push(b, s, n);
  push_u32(b, (uint32_t)n);
  return b->error ? 0 : (fsh_fb_ref)b->size;
}

fsh_fb_ref fsh_fbb_create_vector(fsh_fbb *b, const void *elems, size_t n, size_t elem_size,
                                 size_t align) {
  if (b->in_table) b->error = EINVAL;
  if (elem_size && n > (size_t)INT32_MAX / elem_size) b->error = EINVAL;
  if (b->error) return 0;
  prealign(b, n * elem_size, 4);
  prealign(b, n * elem_size, align);
  if (n) push(b, elems, n * elem_size);
  push_u32(b, (uint32_t)n);
  return b->error ? 0 : (fsh_fb_ref)b->size;
}

fsh_fb_ref fsh_fbb_create_offset_vector(fsh_fbb *b, const fsh_fb_ref *refs, size_t n) {
  if (b->in_table) b->error = EINVAL;
  if (n > (size_t)INT32_MAX / 4) b->error = EINVAL;
  if (b->error) return 0;
  prealign(b, n * 4, 4);
  for (size_t i = n; i-- > 0;) {
    /* the offset is stored at position size + 4 and points to refs[i] */
    if (refs[i] == 0 || refs[i] > b->size + 4) {
      b->error = EINVAL;
      return 0;
    }
    push_u32(b, (uint32_t)(b->size + 4 - refs[i]));
  }
  push_u32(b, (uint32_t)n);
  return b->error ? 0 : (fsh_fb_ref)b->size;
}

void fsh_fbb_start_table(fsh_fbb *b) {
  if (b->in_table) b->error = EINVAL;
  b->in_table = true;
  b->table_start = b->size;
  b->max_field = -1;
  memset(b->field_pos, 0, sizeof b->field_pos);
}

static void add_scalar(fsh_fbb *b, int field, const void *le_bytes, size_t size) {
  if (!b->in_table || field < 0 || field >= FSH_FBB_MAX_FIELDS) b->error = EINVAL;
  if (b->error) return;
  prealign(b, size, size);
  push(b, le_bytes, size);
  if (b->error) return;
  b->field_pos[field] = (uint32_t)b->size;
  if (field > b->max_field) b->max_field = field;
}

void fsh_fbb_add_u8(fsh_fbb *b, int field, uint8_t v) { add_scalar(b, field, &v, 1); }

void fsh_fbb_add_i16(fsh_fbb *b, int field, int16_t v) {
  uint8_t t[2];
  fsh_store_le16(t, (uint16_t)v);
  add_scalar(b, field, t, 2);
}

void fsh_fbb_add_i32(fsh_fbb *b, int field, int32_t v) {
  uint8_t t[4];
  fsh_store_le32(t, (uint32_t)v);
  add_scalar(b, field, t, 4);
}

void fsh_fbb_add_i64(fsh_fbb *b, int field, int64_t v) {
  uint8_t t[8];
  fsh_store_le64(t, (uint64_t)v);
  add_scalar(b, field, t, 8);
}

void fsh_fbb_add_offset(fsh_fbb *b, int field, fsh_fb_ref ref) {
  if (ref == 0) return;
  prealign(b, 4, 4);
  if (ref > b->size + 4) b->error = EINVAL;
  if (b->error) return;
  uint8_t t[4];
  fsh_store_le32(t, (uint32_t)(b->size + 4 - ref));
  add_scalar(b, field, t, 4);
}

void fsh_fbb_add_struct(fsh_fbb *b, int field, const void *data, size_t size, size_t align) {
  if (!b->in_table || field < 0 || field >= FSH_FBB_MAX_FIELDS) b->error = EINVAL;
  if (b->error) return;
  prealign(b, size, align);
  push(b, data, size);
  if (b->error) return;
  b->field_pos[field] = (uint32_t)b->size;
  if (field > b->max_field) b->max_field = field;
}

fsh_fb_ref fsh_fbb_end_table(fsh_fbb *b) {
  if (!b->in_table) b->error = EINVAL;
  b->in_table = false;
  if (b->error) return 0;
  /* the soffset to the vtable, patched below */
  prealign(b, 4, 4);
  pad(b, 4);
  if (b->error) return 0;
  size_t table_pos = b->size;
  size_t inline_size = table_pos - b->table_start;
  int n = b->max_field + 1;
  if (inline_size > UINT16_MAX) {
    b->error = EINVAL;
    return 0;
  }
  /* the vtable: [vtable size, table size, field offsets...] as uint16 */
  uint8_t vt[4 + 2 * FSH_FBB_MAX_FIELDS];
  fsh_store_le16(vt, (uint16_t)(4 + 2 * n));
  fsh_store_le16(vt + 2, (uint16_t)inline_size);
  for (int i = 0; i < n; i++) {
    uint16_t off = b->field_pos[i] ? (uint16_t)(table_pos - b->field_pos[i]) : 0;
    fsh_store_le16(vt + 4 + 2 * i, off);
  }
  push(b, vt, (size_t)(4 + 2 * n));
  if (b->error) return 0;
  size_t vt_pos = b->size;
  /* table address - vtable address, with addresses = total - position */
  fsh_store_le32(b->buf + b->cap - table_pos, (uint32_t)(int32_t)(vt_pos - table_pos));
  return (fsh_fb_ref)table_pos;
}

int fsh_fbb_finish(fsh_fbb *b, fsh_fb_ref root, fsh_buffer **out, fsh_error *err) {
  if (b->in_table || root == 0) b->error = b->error ? b->error : EINVAL;
  if (b->minalign < 8) b->minalign = 8;
  prealign(b, 4, b->minalign);
  if (!b->error) push_u32(b, (uint32_t)(b->size + 4 - root));
  if (b->error == ENOMEM)
    return fsh_error_set(err, ENOMEM, "flatbuffer builder: out of memory");
  if (b->error)
    return fsh_error_set(err, b->error, "flatbuffer builder: invalid use or message over 2 GiB");
  fsh_buffer *res = fsh_buffer_new((int64_t)b->size, false);
  if (!res) return fsh_error_set(err, ENOMEM, "flatbuffer builder: out of memory");
  memcpy(res->data, b->buf + b->cap - b->size, b->size);
  *out = res;
  return 0;
}
