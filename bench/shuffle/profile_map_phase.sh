#!/bin/bash
# profile_map_phase.sh -- where the map phase of `bench shuffle` spends the
# workers' CPU (bench/shuffle/PROFILE_64.md): runs one bench shuffle, records
# only its 4 worker processes with perf (the bench process's socket-copy and
# file-write baselines stay out), then counts the samples of the map window
# (first sample inside fsh_map_task_run .. first inside fsh_reduce_task_run)
# by profile_map_phase.py's rules.
#
#   bench/shuffle/profile_map_phase.sh BINARY BYTES OUT_PREFIX
#   e.g. bench/shuffle/profile_map_phase.sh build/flightshuffle 4G /tmp/map4g
#   other shapes: MAPS=1000 REDUCES=1000 MERGE=off bench/shuffle/profile_map_phase.sh ...
#   (defaults 64, 64, auto; merge off keeps the pre-shuffle merge out of the window)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
exec "$HERE/profile_workers.sh" "$1" "$2" "$3" "$HERE/profile_map_phase.py"
