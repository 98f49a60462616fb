#!/usr/bin/env bash
# The history page of docs/history.md: a 30-file synthetic history of 12 cells (baseline, eagle3, mtp
# at c1, c4, c16, c64; the gate study's day level and stalls; eagle3's engine 5 % slower from file
# 20, mtp's drafter 5 % worse from file 27), `specguard history --html`, and a headless Chromium
# screenshot (Debian's chromium; no network). Run from the repository root:
#   bash docs/evidence/history/page.sh [.venv/bin/python]
set -euo pipefail
py=${1:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m specguard.timeline.synthetic "$work/nightly" --files 30 --configs baseline,eagle3,mtp --levels 1,4,16,64 \
    --step-at 20 --drafter-at 27 --drafter-config mtp --day-sd 0.005 --stall-rate 0.02 --seed 4
repo=$PWD
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
# from the history's own directory, so the page names the files as nightly/...
(cd "$work" && "$py" -m specguard.cli history nightly --html "$repo/docs/evidence/history/page") > docs/evidence/history/page.txt || true
ls -l docs/evidence/history/page/index.html | awk '{print "index.html:", $5, "bytes"}' >> docs/evidence/history/page.txt
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --force-device-scale-factor=1 \
    --user-data-dir="$work/profile" --screenshot=docs/evidence/history-page.png --window-size=1150,2000 \
    "file://$PWD/docs/evidence/history/page/index.html" 2>/dev/null
