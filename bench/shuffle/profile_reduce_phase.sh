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
python3 "$HERE/profile_reduce_phase.py" "$OUT.script"
