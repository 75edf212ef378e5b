/* pack_internal.h -- what array.c, batch.c and buffer.c share of packs
 * (pack.c) and of releasing references: the root buffer whose reference a
 * pack's views borrow, and releases that count a pack's dead objects to
 * drop their pack references at once. */
#ifndef FSH_ARROW_PACK_INTERNAL_H
#define FSH_ARROW_PACK_INTERNAL_H

#include <flightshuffle/arrow.h>

/* The root buffer the pack holds a reference on (NULL: none). */
fsh_buffer *fsh_pack_root(const fsh_pack *p);
/* Drops n references on p (n objects of it died). */
void fsh_pack_release_n(fsh_pack *p, long n);

/* Drops one reference of the count rc; true when it was the last. A count
 * of 1 (read with acquire: every earlier release by another thread is
 * seen) is the caller's alone -- only a holder can add one -- so the last
 * reference costs no read-modify-write. */
static inline bool fsh_last_ref(atomic_long *rc) {
  return atomic_load_explicit(rc, memory_order_acquire) == 1 ||
         atomic_fetch_sub_explicit(rc, 1, memory_order_acq_rel) == 1;
}

/* fsh_array_unref / fsh_buffer_unref, except that objects of pack p (not
 * NULL) that die are counted in *n rather than each dropping its pack
 * reference: the caller drops the n at once (fsh_pack_release_n). */
void fsh_array_drop_in(fsh_array *a, fsh_pack *p, long *n);
void fsh_buffer_drop_in(fsh_buffer *b, fsh_pack *p, long *n);

#endif
