#!/usr/bin/env bash
# CI's real-SGLang job: SGLang 0.5.23 on the CPU (venv outside the clone, no speculation), the tiny
# local Llama, then tests/test_real_sglang.py: the sglang-cpu suite launched, gated (update,
# unchanged, slowed), attached to a server started by hand, /flush_cache's 400 while busy,
# teardown, a server that dies at start-up, the live contract check against the emulator, and
# the sgl_kernel stand-in's call log (must hold no call). Exits non-zero on any failure, a skip
# included.
#
#   .ci/run_real_sglang.sh [PYTHON]    PYTHON: the fast tests' venv python (default: python on PATH)
#
# Env: SPECGUARD_SGLANG_VENV (see setup_sglang.sh); SPECGUARD_SGLANG_MODELS, where the tiny model
# is built (default ~/.cache/specguard/tiny-models-sglang). Budget: ~15 min on 2 cores with a
# fresh SGLang install (docs/sglang-cpu.md has the costs).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
PY="${1:-python}"
artifacts=$(mktemp -d "${TMPDIR:-/tmp}/specguard-real-sglang.XXXXXX")
trap 'echo "== real-SGLang job: $(( $(date +%s) - started ))s wall; summaries, results and server logs in $artifacts"' EXIT

echo "== SGLang venv (.ci/setup_sglang.sh)"
setup_started=$(date +%s)
bash .ci/setup_sglang.sh | tee "$artifacts/setup_sglang.log"
SPECGUARD_SGLANG_PYTHON=$(tail -n 1 "$artifacts/setup_sglang.log" | sed -n 's/^SGLANG_PYTHON=//p')
if [[ ! -x "$SPECGUARD_SGLANG_PYTHON" ]]; then
  echo "real-SGLang job FAILED: setup_sglang.sh named no usable SGLANG_PYTHON" >&2
  exit 1
fi
echo "== SGLang venv ready in $(( $(date +%s) - setup_started ))s"
export SPECGUARD_SGLANG_PYTHON
export SPECGUARD_SGLANG_MODELS="${SPECGUARD_SGLANG_MODELS:-$HOME/.cache/specguard/tiny-models-sglang}"
export SPECGUARD_REAL_SGLANG_ARTIFACTS="$artifacts"
export SPECGUARD_SGL_KERNEL_LOG="$artifacts/sgl_kernel_standin.log"
: > "$SPECGUARD_SGL_KERNEL_LOG"

echo "== tiny model in $SPECGUARD_SGLANG_MODELS"
"$SPECGUARD_SGLANG_PYTHON" tools/build_tiny_models.py --out "$SPECGUARD_SGLANG_MODELS"

echo "== real SGLang through the suite (tests/test_real_sglang.py)"
status=0
"$PY" -m pytest tests/test_real_sglang.py -m real_sglang -q -p no:cacheprovider -rA \
  --junitxml "$artifacts/junit.xml" || status=$?

for tag in update unchanged slowed attach badflag; do
  if [[ -f "$artifacts/$tag-summary.txt" ]]; then
    echo "== verdicts: $tag run"
    cat "$artifacts/$tag-summary.txt"
  fi
done
for f in figures.txt contract-diff.txt; do
  if [[ -f "$artifacts/$f" ]]; then echo "== $f"; cat "$artifacts/$f"; fi
done
echo "== sgl_kernel stand-in: symbols resolved / CALLED during the job"
echo "resolved: $(grep -c $'^RESOLVE\t' "$SPECGUARD_SGL_KERNEL_LOG" || true), called: $(grep -c $'^CALL\t' "$SPECGUARD_SGL_KERNEL_LOG" || true)"
grep $'^CALL\t' "$SPECGUARD_SGL_KERNEL_LOG" | sort | uniq -c || echo "(no call)"

# Passing by skipping is failing: the job exists to run the real server.
"$PY" .ci/no_skips.py real-SGLang "$artifacts/junit.xml" || status=1

echo "== SGLang venv size: $(du -sh "$(dirname "$(dirname "$SPECGUARD_SGLANG_PYTHON")")" | cut -f1)"
if [[ $status -ne 0 ]]; then
  echo "real-SGLang job FAILED (exit $status)" >&2
fi
exit $status
