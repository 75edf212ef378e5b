#!/usr/bin/env bash
# fuzz.sh -- runs every libFuzzer binary of a FSH_FUZZ build for a bounded
# time and merges what it found into the committed corpus.
#
#   scripts/fuzz.sh BUILD_DIR        (make fuzz: BUILD_DIR=build-fuzz)
#   FUZZ_SECONDS=60                  time per target
#   JOBS=2                           parallel fuzzing processes per target
#
# Per target fuzz_<x>: libFuzzer reads fuzz/corpus/fuzz_<x>/ (and
# fuzz/fuzz_<x>.dict when present) and writes new inputs to
# BUILD_DIR/fuzz-new/fuzz_<x>/; then `-merge=1` copies into the committed
# corpus only the inputs that add coverage. Crashes land in
# BUILD_DIR/fuzz-artifacts/fuzz_<x>/; the script goes on with the other
# targets and exits 1 at the end if any target crashed. Copy a crash input
# into the corpus once fixed: the CTest test fuzz/fuzz_<x> replays it forever.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:?usage: fuzz.sh BUILD_DIR}
seconds=${FUZZ_SECONDS:-60}
jobs=${JOBS:-1}

shopt -s nullglob
targets=()
for src in fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz/fuzz_*.c targets"
  exit 0
fi

failed=()
for t in "${targets[@]}"; do
  bin="$build/$t"
  [ -x "$bin" ] || { echo "fuzz: $bin was not built" >&2; failed+=("$t"); continue; }
  corpus="fuzz/corpus/$t"
  new="$build/fuzz-new/$t"
  art="$build/fuzz-artifacts/$t"
  mkdir -p "$corpus" "$new" "$art"
  opts=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$art/" -print_final_stats=1)
  [ -f "fuzz/$t.dict" ] && opts+=(-dict="fuzz/$t.dict")
  before=$(find "$corpus" -type f | wc -l)
  echo "== fuzz: $t for ${seconds}s ($before corpus inputs)"
  rc=0
  if [ "$jobs" -gt 1 ]; then
    # -fork keeps going in parallel workers; it stops at the first crash.
    "$bin" "${opts[@]}" -fork="$jobs" "$new" "$corpus" >"$build/fuzz-$t.log" 2>&1 || rc=$?
  else
    "$bin" "${opts[@]}" "$new" "$corpus" >"$build/fuzz-$t.log" 2>&1 || rc=$?
  fi
  if [ $rc -eq 0 ]; then
    tail -n 8 "$build/fuzz-$t.log"
  else
    grep -m1 -A40 -E "ERROR: |runtime error:|deadly signal|timeout after|out-of-memory" "$build/fuzz-$t.log" \
      || tail -n 40 "$build/fuzz-$t.log"
    echo "fuzz: $t FAILED (exit $rc); log $build/fuzz-$t.log, inputs in $art/" >&2
    failed+=("$t")
  fi
  # Keep what adds coverage, whether or not the run crashed.
  "$bin" -merge=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$art/" "$corpus" "$new" \
    >"$build/fuzz-$t-merge.log" 2>&1 || echo "fuzz: merge of $t failed, see $build/fuzz-$t-merge.log" >&2
  after=$(find "$corpus" -type f | wc -l)
  echo "fuzz: $t corpus $before -> $after inputs"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a crash"
