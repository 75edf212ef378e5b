#!/usr/bin/env bash
# run_pipeline.sh -- issue 5's pipeline benchmark on a local cluster: many
# small map tasks (default 1000 maps x 1000 reduces, 2 GiB, 4 workers),
#  1. incremental retrieval off and on in the same invocation
#     (`bench shuffle --incremental both`): end-to-end time of each, the time
#     from the first map output to the first reduce fetch, the idle gap
#     between the phases;
#  2. the same shuffle with one worker SIGKILLed once half the maps are done
#     (`--fail-worker 0.5`): it must still verify; its time beside the
#     no-failure time of step 1 and the number of recomputed tasks.
# Usage: [RUNS=K] bench/pipeline/run_pipeline.sh [FLIGHTSHUFFLE] [MAPS] [REDUCES] [BYTES] [WORKERS]
# (medians over K runs; a --fail-worker invocation loses its worker in its
# first run only, so step 2 is K one-run invocations, the median reported)
# MERGE=off|on|auto (default off): the pre-shuffle merge, which auto turns
# on at 1000 x 1000; it holds map outputs back until a worker has merged
# a group of them, so the first fetch waits for the first merge -- the
# incremental retrieval itself is measured with it off.
# REDUCE_TASK_BYTES=B|0|auto (default auto): coalesced reduces, a reduce
# task per run of partitions of about B bytes (0: one per partition; with
# incremental on, auto is a run per reduce slot). See sched.h.
# Ends with one `result:` line.
set -euo pipefail
BIN=${1:-build/flightshuffle}
MAPS=${2:-1000}
REDUCES=${3:-1000}
BYTES=${4:-2G}
WORKERS=${5:-4}
RUNS=${RUNS:-1}
MERGE=${MERGE:-off}
RTB=${REDUCE_TASK_BYTES:-auto}
common=(--workers "$WORKERS" --maps "$MAPS" --reduces "$REDUCES" --bytes "$BYTES" --backend flight
        --merge "$MERGE" --reduce-task-bytes "$RTB")

field() { grep '^result:' <<<"$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

out1=$("$BIN" bench shuffle "${common[@]}" --runs "$RUNS" --incremental both)
echo "$out1"
fails=() recs=() v2=yes
for ((i = 0; i < RUNS; i++)); do
  out2=$("$BIN" bench shuffle "${common[@]}" --fail-worker 0.5)
  echo "$out2"
  fails+=("$(field "$out2" total_s_median)")
  recs+=("$(field "$out2" recomputed)")
  [[ $(field "$out2" verified) == yes ]] || v2=no
done
off=$(field "$out1" total_s_median_off)
on=$(field "$out1" total_s_median_on)
fail=$(printf '%s\n' "${fails[@]}" | median)
rec=$(printf '%s\n' "${recs[@]}" | median)
v1=$(field "$out1" verified)
ratio=$(awk -v a="$fail" -v b="$off" 'BEGIN { printf "%.3f", a / b }')
printf '\n%-44s %10s\n' "pipeline ($MAPS x $REDUCES, $BYTES, $WORKERS workers)" "seconds"
printf '%-44s %10s\n' "incremental off" "$off"
printf '%-44s %10s\n' "incremental on" "$on"
printf '%-44s %10s\n' "first map output -> first fetch, off / on (ms)" \
  "$(field "$out1" first_fetch_ms_median_off) / $(field "$out1" first_fetch_ms_median_on)"
printf '%-44s %10s\n' "idle gap between phases, off / on (ms)" \
  "$(field "$out1" idle_gap_ms_median_off) / $(field "$out1" idle_gap_ms_median_on)"
printf '%-44s %10s\n' "one worker killed at 0.5 (incremental off)" "$fail"
printf '%-44s %10s\n' "  vs no failure" "${ratio}x"
printf '%-44s %10s\n' "  recomputed tasks (median)" "$rec"
printf '%-44s %s\n' "  failure runs (s)" "${fails[*]}"
verified=no
[[ $v1 == yes && $v2 == yes ]] && verified=yes
echo "result: name=bench_pipeline verified=$verified maps=$MAPS reduces=$REDUCES bytes=$BYTES merge=$MERGE" \
  "reduce_task_bytes=$RTB" \
  "workers=$WORKERS total_s_off=$off total_s_on=$on speedup_on=$(field "$out1" speedup_on)" \
  "total_s_fail_worker=$fail fail_vs_no_failure=$ratio recomputed=$rec"
