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
BIN=$1 BYTES=$2 OUT=$3
MAPS=${MAPS:-64} REDUCES=${REDUCES:-64} MERGE=${MERGE:-auto}
HERE=$(cd "$(dirname "$0")" && pwd)
"$BIN" bench shuffle --workers 4 --maps "$MAPS" --reduces "$REDUCES" --bytes "$BYTES" \
  --backend flight --merge "$MERGE" --runs 1 > "$OUT.log" 2>&1 &
BP=$!
for _ in $(seq 1 300); do
  [ "$(grep -c 'worker .: pid' "$OUT.log" 2>/dev/null || true)" = 4 ] && break
  sleep 0.05
done
PIDS=$(grep -o "pid [0-9]*" "$OUT.log" | awk '{print $2}' | paste -sd,)
perf record -q -F 999 --call-graph dwarf,8192 -p "$PIDS" -o "$OUT.data" 2> "$OUT.perf.err" &
PP=$!
wait $BP
kill -INT $PP 2>/dev/null || true
wait $PP || true
grep "^result:" "$OUT.log"
perf script -i "$OUT.data" -F time,ip,sym 2>/dev/null > "$OUT.script"
python3 "$HERE/profile_map_phase.py" "$OUT.script"
