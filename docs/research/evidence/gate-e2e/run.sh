#!/usr/bin/env bash
# Issue 13 + 14 end to end on this machine, in one quiet window:
#   1. with RECORD=1 only: re-record the baselines, 5 default-suite sessions into an empty $BASE;
#   2. 10 unchanged reruns gated on $BASE (default: the shipped baselines/suite; pass share; all must pass);
#   3. 3 reruns with eagle3 5 % slower (--emulator-step-scale 1.053): which tests fail, relaunches;
#   4. eagle3's accept length forced 8 % lower (2.76 against its ~3.0) and forced to 1.0 (issue 23:
#      the verdict names the drafter; "speculation is not running").
# UNCHANGED / SLOWED: how many reruns of 2. and 3. (default 10 and 3).
# Every run writes its results JSON and terminal output to $OUT; the summary is tools/pass_share.py.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/specguard-gate-e2e}; base=${BASE:-baselines/suite}; record=${RECORD:-0}
rm -rf "$out"; mkdir -p "$out"
if [ "$record" = 1 ]; then rm -rf "$base"; mkdir -p "$base"; fi
run() {  # tag, extra pytest args...
  local tag=$1; shift
  local t0; t0=$(date +%s.%N)
  echo "$tag: start $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/python -m pytest perf_tests -q -p no:cacheprovider --baseline-dir "$base" \
    --results-json "$out/$tag.json" "$@" > "$out/$tag.txt" 2>&1
  local code=$?
  echo "$tag: exit $code, $(python3 -c "import time; print(f'{time.time() - $t0:.0f}')") s; $(tail -1 "$out/$tag.txt")"
}
if [ "$record" = 1 ]; then for i in 1 2 3 4 5; do run "record-$i" --update-baselines; done; fi
for i in $(seq 1 "${UNCHANGED:-10}"); do run "unchanged-$i" --require-baselines; done
for i in $(seq 1 "${SLOWED:-3}"); do run "slowed-$i" --require-baselines --server-args "eagle3=--emulator-step-scale 1.053"; done
run "accept-8pct" --require-baselines --server-args "eagle3=--emulator-accept-length 2.76"
run "accept-1" --require-baselines --server-args "eagle3=--emulator-accept-length 1.0"
