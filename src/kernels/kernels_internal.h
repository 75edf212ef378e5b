/* kernels_internal.h -- what the kernels' files share: reading offsets and
 * integers without alignment assumptions, the row gather every copy kernel
 * is built on, and error helpers. */
#ifndef FSH_KERNELS_INTERNAL_H
#define FSH_KERNELS_INTERNAL_H

#include <flightshuffle/kernels.h>

#include <errno.h>
#include <string.h>

static inline int64_t kern_read_i32(const uint8_t *p, int64_t i) {
  int32_t v;
  memcpy(&v, p + 4 * i, 4);
  return v;
}

static inline int64_t kern_read_i64(const uint8_t *p, int64_t i) {
  int64_t v;
  memcpy(&v, p + 8 * i, 8);
  return v;
}

/* Entry i of an offsets buffer of 4- or 8-byte offsets. */
static inline int64_t kern_read_offset(const uint8_t *p, int64_t i, int width) {
  return width == 4 ? kern_read_i32(p, i) : kern_read_i64(p, i);
}

/* Integer value of entry i of an integer-typed buffer (dictionary indices;
 * validated arrays only, so uint64 indices fit int64). */
int64_t fsh_kern_read_int(fsh_type_id t, const uint8_t *p, int64_t i);

/* Width in bytes of one offset of a variable-size layout (4 or 8). */
static inline int kern_offset_width(fsh_type_id t) {
  return t == FSH_TYPE_LARGE_BINARY || t == FSH_TYPE_LARGE_STRING || t == FSH_TYPE_LARGE_LIST ? 8
                                                                                              : 4;
}

static inline const uint8_t *kern_buf(const fsh_array *a, int i) {
  return i < a->n_buffers && a->buffers[i] ? a->buffers[i]->data : NULL;
}

/* Slot i of a valid array of field f holds a value (unions: always). */
static inline bool kern_slot_valid(const fsh_field *f, const fsh_array *a, int64_t abs_slot) {
  if (f->type == FSH_TYPE_NA) return false;
  if (fsh_type_is_union(f->type) && !f->dictionary) return true;
  const uint8_t *v = kern_buf(a, 0);
  return !v || fsh_bit_get(v, abs_slot);
}

/* Maps union type codes to child indices (-1: none). */
void fsh_kern_union_map(const fsh_field *f, int8_t map[128]);

static inline int kern_oom(fsh_error *err) {
  return fsh_error_set(err, ENOMEM, "out of memory");
}

/* Gathers the slots base + idx[k] (k < n; relative to a->offset, trusted in
 * range) of a valid array `a` of field f into a new array with offset 0 and
 * n rows. The core of take, filter and scatter. */
FSH_NODISCARD int fsh_kern_gather(const fsh_field *f, fsh_array *a, int64_t base,
                                  const int64_t *idx, int64_t n, fsh_array **out, fsh_error *err);

/* Pieces of the gather the other files reuse. */
void fsh_kern_gather_fixed(const uint8_t *src, int64_t off, const int64_t *idx, int64_t n,
                           int64_t width, uint8_t *dst);
/* New offsets (width w) for the variable-size slots off + idx[k]; the sum
 * of their lengths in *total (EOVERFLOW past 32-bit offsets). */
FSH_NODISCARD int fsh_kern_gather_offsets(const uint8_t *src, int64_t off, const int64_t *idx,
                                          int64_t n, int w, fsh_buffer **out, int64_t *total,
                                          fsh_error *err);
FSH_NODISCARD int fsh_kern_gather_nested(const fsh_field *f, fsh_array *a, int64_t off,
                                         const int64_t *idx, int64_t n, fsh_array *r,
                                         fsh_error *err);
/* Every column of b at rows idx (trusted) into a new batch of b's schema. */
FSH_NODISCARD int fsh_kern_gather_batch(fsh_batch *b, const int64_t *idx, int64_t n,
                                        fsh_batch **out, fsh_error *err);

#endif
