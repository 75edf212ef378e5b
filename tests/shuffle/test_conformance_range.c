/* test_conformance_range.c -- the range-reader cases of the conformance
 * suite (test_conformance.c: fsh_shuffle_open_range_reader checked against
 * open_reader per partition and against the plan, bad runs, damaged and
 * lost sources inside a run) against every backend, the flight backend
 * with same-host direct reads on and off. */
#define CONFORMANCE_RANGE 1
#include "shuffle/test_conformance.c"
