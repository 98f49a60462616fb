#!/usr/bin/env bash
# CI's real-engine job: vLLM CPU (venv outside the clone), the tiny models, then the vllm-cpu suite
# end to end through tests/real/test_real_engine.py. Exits non-zero on any failure, a skip included.
#
#   .ci/run_real_engine.sh [PYTHON]    PYTHON: the fast tests' venv python (default: python on PATH)
#
# Env: SPECGUARD_VLLM_VENV (see setup_vllm.sh); SPECGUARD_TINY_MODELS, where the models are built
# (default ~/.cache/specguard/tiny-models). Budget: ~20 min on 2 cores with a fresh vLLM install.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
PY="${1:-python}"
artifacts=$(mktemp -d "${TMPDIR:-/tmp}/specguard-real-engine.XXXXXX")
trap 'echo "== real-engine job: $(( $(date +%s) - started ))s wall; summaries, results and server logs in $artifacts"' EXIT

echo "== vLLM venv (.ci/setup_vllm.sh)"
bash .ci/setup_vllm.sh | tee "$artifacts/setup_vllm.log"
SPECGUARD_VLLM_PYTHON=$(tail -n 1 "$artifacts/setup_vllm.log" | sed -n 's/^VLLM_PYTHON=//p')
if [[ ! -x "$SPECGUARD_VLLM_PYTHON" ]]; then
  echo "real-engine job FAILED: setup_vllm.sh named no usable VLLM_PYTHON" >&2
  exit 1
fi
export SPECGUARD_VLLM_PYTHON
export SPECGUARD_TINY_MODELS="${SPECGUARD_TINY_MODELS:-$HOME/.cache/specguard/tiny-models}"
export SPECGUARD_REAL_ENGINE_ARTIFACTS="$artifacts"

echo "== tiny models in $SPECGUARD_TINY_MODELS"
"$SPECGUARD_VLLM_PYTHON" tools/build_tiny_models.py --out "$SPECGUARD_TINY_MODELS"

echo "== the vllm-cpu suite end to end (tests/real/test_real_engine.py)"
status=0
"$PY" -m pytest tests/real/test_real_engine.py -m real_engine -q -p no:cacheprovider -rA \
  --junitxml "$artifacts/junit.xml" || status=$?

for tag in update gate; do
  if [[ -f "$artifacts/$tag-summary.txt" ]]; then
    echo "== verdicts: $tag run"
    cat "$artifacts/$tag-summary.txt"
  fi
done

# Passing by skipping is failing: the job exists to run the real engine.
"$PY" .ci/no_skips.py real-engine "$artifacts/junit.xml" || status=1

echo "== vLLM venv size: $(du -sh "$(dirname "$(dirname "$SPECGUARD_VLLM_PYTHON")")" | cut -f1)"
if [[ $status -ne 0 ]]; then
  echo "real-engine job FAILED (exit $status)" >&2
fi
exit $status
