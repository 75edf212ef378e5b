/* exec.h -- query execution: the relational operators that joins and
 * group-bys need (expressions, filter, project, hash aggregate, hash join)
 * and, later, the operator model and plans the driver's stages run.
 *
 * Operators work on record batches (arrow.h) and call the compute kernels
 * (kernels.h: hashing, take, filter, concat, sort, row comparison); no
 * operator knows which shuffle backend (shuffle.h) moves its input.
 *
 * Errors follow arrow.h: 0 or an errno-style code plus an fsh_error whose
 * message names the operator, expression or column at fault; on error
 * outputs are left NULL and nothing leaks. */
#ifndef FLIGHTSHUFFLE_EXEC_H
#define FLIGHTSHUFFLE_EXEC_H

#include <flightshuffle/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- expressions, filter, project -------------------------------------- */


/* ---- hash aggregate ------------------------------------------------------ */


/* ---- hash join ------------------------------------------------------------ */


#ifdef __cplusplus
}
#endif
#endif
