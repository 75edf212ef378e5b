/* pack_internal.h -- what array.c, batch.c and buffer.c need of a pack
 * (pack.c): its root buffer, whose reference the pack's views borrow. */
#ifndef FSH_ARROW_PACK_INTERNAL_H
#define FSH_ARROW_PACK_INTERNAL_H

#include <flightshuffle/arrow.h>

/* The root buffer the pack holds a reference on (NULL: none). */
fsh_buffer *fsh_pack_root(const fsh_pack *p);

#endif
