#!/usr/bin/env bash
# Re-record the shipped baselines (5 sessions, empty dir), then 3 unchanged reruns; pass share.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/specguard-rerecord}; rm -rf $out /tmp/newbase; mkdir -p $out /tmp/newbase
for i in 1 2 3 4 5; do
  echo "record $i: load $(cut -d' ' -f1 /proc/loadavg)"
  .venv/bin/python -m pytest perf_tests -q -p no:cacheprovider --update-baselines --baseline-dir /tmp/newbase \
    --benchmark-disable --results-json $out/record-$i.json > $out/record-$i.txt 2>&1 || echo "record $i exit $?"
  tail -2 $out/record-$i.txt
done
for i in 1 2 3; do
  echo "rerun $i: load $(cut -d' ' -f1 /proc/loadavg)"
  .venv/bin/python -m pytest perf_tests -q -p no:cacheprovider --require-baselines --baseline-dir /tmp/newbase \
    --benchmark-disable --results-json $out/rerun-$i.json > $out/rerun-$i.txt 2>&1 || echo "rerun $i exit $?"
  tail -2 $out/rerun-$i.txt
done
