/* cmd_flight.c -- `flightshuffle flight list|get|put` (placeholder until the
 * Flight client lands; the client helper replaces this file). */
#include "cli/cli.h"

#include <string.h>

int cmd_flight(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cmd_flight_serve(argc - 1, argv + 1);
  return cli_fail(2, "flight: client commands are not built yet");
}
