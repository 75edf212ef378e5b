#!/bin/bash
# ab_small_calls.sh -- A/B of two builds' small Flight calls, interleaved
# (bench/shuffle/NOTIFY.md, "Session 8"): per pair, each build's
#   bench_flight --runs 3 --mib 64 --no-rss --only calls   (pyarrow on the 1st pair only)
#   bench_notify --notices 1000 --delay-us 5000 --runs 3 --results R
#   bench_notify --notices 1000 --delay-us 0 --runs 3 --results R
# for R in 0 and 1, which build first alternating per pair. Prints each
# run's `result:` line prefixed with "pair P main|branch load L0-L1".
#
#   bench/shuffle/ab_small_calls.sh BASE_BUILD_DIR NEW_BUILD_DIR PAIRS > ab.log
#   python3 bench/shuffle/ab_small_calls.py ab.log
set -u
base=$1 new=$2 pairs=$3
for p in $(seq 1 "$pairs"); do
  if [ $((p % 2)) = 1 ]; then order="main:$base branch:$new"; else order="branch:$new main:$base"; fi
  py=--no-pyarrow
  [ "$p" = 1 ] && py=
  for bench in "bench_flight --runs 3 --mib 64 --no-rss --only calls $py" \
               "bench_notify --notices 1000 --delay-us 5000 --runs 3 --results 0" \
               "bench_notify --notices 1000 --delay-us 0 --runs 3 --results 0" \
               "bench_notify --notices 1000 --delay-us 5000 --runs 3 --results 1" \
               "bench_notify --notices 1000 --delay-us 0 --runs 3 --results 1"; do
    for bb in $order; do
      lab=${bb%%:*} dir=${bb#*:}
      l0=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2086
      out=$(FSH_BENCH_NO_TCP=1 "$dir"/$bench 2>&1 | grep '^result:')
      l1=$(cut -d' ' -f1 /proc/loadavg)
      echo "pair $p $lab load $l0-$l1 $out"
    done
  done
done
