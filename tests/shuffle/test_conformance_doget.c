/* test_conformance_doget.c -- the conformance suite (test_conformance.c)
 * against the flight backend with same-host direct reads off: every
 * source of another worker through DoGet, although all the workers run
 * in this process (test_conformance.c runs it with direct reads on). */
#define CONFORMANCE_ONLY "flight-doget"
#include "shuffle/test_conformance.c"
