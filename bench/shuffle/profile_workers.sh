#!/bin/bash
# profile_workers.sh -- records the 4 worker processes of one `bench shuffle`
# run with perf (the bench process's socket-copy and file-write baselines
# stay out) and gives the samples (perf script: time, ip, sym) to an
# analyser, which counts the window it is about. Shared by
# profile_map_phase.sh and profile_reduce_phase.sh.
#
#   bench/shuffle/profile_workers.sh BINARY BYTES OUT_PREFIX ANALYSER.py
#   MAPS, REDUCES, MERGE: the shape (defaults 64, 64, auto)
set -eu
BIN=$1 BYTES=$2 OUT=$3 ANALYSER=$4
MAPS=${MAPS:-64} REDUCES=${REDUCES:-64} MERGE=${MERGE:-auto}
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
python3 "$ANALYSER" "$OUT.script"
