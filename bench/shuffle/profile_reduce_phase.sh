#!/bin/bash
# profile_reduce_phase.sh -- where the reduce phase of `bench shuffle` spends the
# workers' CPU (bench/shuffle/PROFILE_REDUCE.md): runs one bench shuffle, records
# only its 4 worker processes with perf (the bench process's socket-copy and
# file-write baselines stay out), then counts the samples of the reduce window
# (first .. last sample inside fsh_reduce_task_run) by
# profile_reduce_phase.py's rules.
#
#   bench/shuffle/profile_reduce_phase.sh BINARY BYTES OUT_PREFIX
#   e.g. bench/shuffle/profile_reduce_phase.sh build/flightshuffle 4G /tmp/reduce4g
#   other shapes: MAPS=1000 REDUCES=1000 MERGE=off bench/shuffle/profile_reduce_phase.sh ...
#   (defaults 64, 64, auto)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
exec "$HERE/profile_workers.sh" "$1" "$2" "$3" "$HERE/profile_reduce_phase.py"
