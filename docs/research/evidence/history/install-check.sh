#!/usr/bin/env bash
# `specguard history` after `pip install CHECKOUT` alone, and `pip install CHECKOUT` into an
# environment that already has numpy 2.4 and scipy 1.17 (SGLang 0.5.23's) changing neither.
# Run from the repository root: bash docs/evidence/history/install-check.sh (needs the package index).
set -euo pipefail
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
quiet() { grep -v '^WARNING: Location' || true; }

echo "== 1. a fresh venv, pip install CHECKOUT, then specguard history DIR"
python3 -m venv "$work/fresh"
"$work/fresh/bin/pip" install -q "$repo" 2>&1 | quiet
"$work/fresh/bin/pip" freeze | grep -iE '^(numpy|scipy|apache-otava|ruptures)==' || true
"$work/fresh/bin/python" -m specguard.timeline.synthetic "$work/nightly" --step-at 20 --stall-rate 0.02 --day-sd 0.005
set +e
(cd "$work" && "$work/fresh/bin/specguard" history nightly/ --html page)
echo "specguard history exit status: $? (0: no worse change in the newest 5 files)"
set -e
ls -l "$work/page/index.html" | awk '{print "index.html:", $5, "bytes"}'

echo "== 2. numpy 2.4 and scipy 1.17 first, then pip install CHECKOUT: pip freeze before and after"
python3 -m venv "$work/sg"
"$work/sg/bin/pip" install -q 'numpy==2.4.*' 'scipy==1.17.*' 2>&1 | quiet
"$work/sg/bin/pip" freeze | sort > "$work/before.txt"
"$work/sg/bin/pip" install -q "$repo" 2>&1 | quiet
"$work/sg/bin/pip" freeze | sort > "$work/after.txt"
echo "before:"; cat "$work/before.txt"
echo "lines of 'before' missing from 'after' (a changed or removed package): $(comm -23 "$work/before.txt" "$work/after.txt" | wc -l)"
comm -23 "$work/before.txt" "$work/after.txt"
echo "added: $(comm -13 "$work/before.txt" "$work/after.txt" | tr '\n' ' ')"
