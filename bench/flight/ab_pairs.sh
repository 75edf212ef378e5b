#!/bin/bash
# ab_pairs.sh -- A/B of two bench_flight binaries, interleaved (bench/flight/OFFCPU.md, section 6).
#
#   bench/flight/ab_pairs.sh BASE_BENCH NEW_BENCH PAIRS ROW... > ab.log
#   python3 bench/flight/ab_summary.py ab.log
#
# For each pair and ROW (get1S, get4S, put4S, ...): one
# `FSH_BENCH_NO_TCP=1 <bench> --runs 3 --mib 1024 --no-rss --only ROW` (with
# pyarrow) of each binary, which one first alternating per pair. A binary
# finds bench/flight/bench_flight_pyarrow.py and .venv one level above its
# own folder: for a copied base binary make that layout (FSH_PYTHON may name
# the python). One line per run: medians of ours / pyarrow, ratio, CPU s/GB
# of both (both ends), load average before-after.
set -u
base=$1 new=$2 pairs=$3
shift 3
for p in $(seq 1 "$pairs"); do
  for row in "$@"; do
    if [ $((p % 2)) = 1 ]; then order="main:$base branch:$new"; else order="branch:$new main:$base"; fi
    for bb in $order; do
      lab=${bb%%:*} bin=${bb#*:}
      l0=$(cut -d' ' -f1 /proc/loadavg)
      out=$(FSH_BENCH_NO_TCP=1 "$bin" --runs 3 --mib 1024 --no-rss --only "$row" 2>&1)
      l1=$(cut -d' ' -f1 /proc/loadavg)
      g=$(echo "$out" | grep -m1 "DoGet\|DoPut" |
          awk '{print "ours", $9"/"$10"/"$11, "pa", $12"/"$13"/"$14, "ratio", $NF}')
      c=$(echo "$out" | grep "ours 0" | awk '{print "cpu ours", $(NF-4), "pa", $(NF-2)}')
      echo "pair $p $row $lab load $l0-$l1 $g $c"
    done
  done
done
