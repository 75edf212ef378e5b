/* cmd_flight_serve.c -- `flightshuffle flight serve` (placeholder until the
 * Flight server lands; the server helper replaces this file). */
#include "cli/cli.h"

int cmd_flight_serve(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail(2, "flight serve: not built yet");
}
