#!/bin/bash
# arg_sweep.sh -- interleaved runs of bench_flight under several sets of gRPC
# channel arguments (bench/flight/OFFCPU.md, session 8).
#
#   bench/flight/arg_sweep.sh ROUNDS ROWSETS VARIANTS > sweep.log
#   python3 bench/flight/arg_summary.py sweep.log              # per variant
#   python3 bench/flight/arg_summary.py --paired VAR sweep.log # VAR against base, per round
#
# VARIANTS is a file of lines "label args", args being the value of
# FSH_GRPC_ARGS ("key=int,c:key=int,s:key=int": both ends, client only,
# server only) or "-" for none; call the unchanged one "base". FSH_GRPC_ARGS
# is read by an experiment hook in src/flight/transport.c that is NOT in the
# tree: apply it first with
#   git show b642d92 -- src/flight/transport.c | git apply   (OFFCPU.md, session 8)
# ROWSETS: comma-separated --only values (get, put, get4S, ...). Each round
# runs every rowset under every variant once, `--runs 3 --mib 1024 --no-rss`
# with pyarrow, the variants' order rotated by one per round. BENCH names the
# binary (build/bench_flight), EXTRA adds options (--no-pyarrow).
set -u
rounds=$1 rowsets=$2 vf=$3
mapfile -t V < "$vf"
nv=${#V[@]}
for r in $(seq 1 "$rounds"); do
  for rows in ${rowsets//,/ }; do
    for k in $(seq 0 $((nv - 1))); do
      i=$(((k + r - 1) % nv))
      lab=${V[$i]%% *} val=${V[$i]#* }
      [ "$val" = "-" ] && val=""
      l0=$(cut -d' ' -f1 /proc/loadavg)
      out=$(FSH_GRPC_ARGS="$val" FSH_BENCH_NO_TCP=1 ${BENCH:-build/bench_flight} --runs 3 --mib 1024 \
            --no-rss ${EXTRA:-} --only "$rows" 2>&1)
      l1=$(cut -d' ' -f1 /proc/loadavg)
      echo "=== round $r rows $rows variant $lab load $l0-$l1 args $val"
      echo "$out" | grep -v FSH_GRPC_ARGS
    done
  done
done
