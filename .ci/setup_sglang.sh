#!/usr/bin/env bash
# Create (or reuse) a Python venv holding SGLang 0.5.23 for plain (non-speculative) decoding on
# the CPU, OUTSIDE the repo, with the CPU build of torch and no CUDA package.
#
# How (docs/research/sglang-cpu.md; ../shared/reference/sglang-cpu.md has the first bring-up):
# - torch==2.13.0: pip takes this machine's CPU wheel from disk (never a CUDA torch);
# - sglang==0.5.23 with --no-deps: its own requirements pin torch==2.14.1 (a CUDA build) and a
#   dozen CUDA-only packages (flashinfer, sglang-kernel, cutlass, deep-ep, ...). Instead the
#   pure-Python runtime dependencies that `python -m sglang.launch_server` imports for a dense
#   Llama are listed below, at the versions sglang 0.5.23 pins where it pins;
# - the `sgl_kernel` stand-in (tools/sgl_kernel_standin/sgl_kernel, this repo): SGLang imports
#   sgl_kernel at module load; the stand-in resolves every symbol to a placeholder that raises
#   when called and logs every resolution and call to $SPECGUARD_SGL_KERNEL_LOG. The real
#   sglang-kernel wheel (373 MB, CUDA) is not installed; `sgl_kernel.scalar_type` is left out
#   on purpose (SGLang falls back to mock scalar types, sglang/srt/layers/quantization/utils.py);
# - torchvision 0.28.0 (PyPI, a CUDA build whose C extension cannot load beside the CPU torch):
#   SGLang imports torchvision.transforms at module load; tools/sgl_kernel_standin/
#   specguard_torchvision_schemas.py declares the two operator schemas torchvision's Python side
#   needs (no kernel, nothing computed) so that the import succeeds.
# The stand-in files are copied into site-packages on every run (cheap), so a changed stand-in in
# the repo always takes effect, even when the venv itself is reused.
#
# Reuse rule: the venv is reused only if the completion marker (written as the very last step)
# is present and names the same pins; otherwise it is rebuilt from scratch.
#
# Env:
#   SPECGUARD_SGLANG_VENV   venv directory (default: $HOME/.cache/specguard/sglang-venv)
#   SPECGUARD_PYTHON        interpreter used to create the venv (default: python3.11 or python3)
#
# On success prints the venv's python path on the last line of stdout
# ("SGLANG_PYTHON=/path/bin/python"). Any failure exits non-zero with a loud message.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"

SGLANG_SPEC="sglang==0.5.23"
TORCH_SPEC="torch==2.13.0"
# What launch_server, the scheduler, the detokenizer and the Llama model import (found by
# importing them one by one in a bare venv); pins are sglang 0.5.23's own where it has one.
DEPS=(
  "transformers==5.19.0" "tokenizers==0.23.2" "openai==2.8.0" "sentencepiece==0.2.1"
  "apache-tvm-ffi==0.1.11" "compressed-tensors==0.18.0" "xgrammar==0.2.7" "soundfile==0.13.1"
  "torchvision==0.28.0" "triton==3.9.0"
  aiohttp fastapi "uvicorn>=0.51" uvloop orjson "pyzmq>=25.1.2" psutil setproctitle
  "prometheus-client>=0.20.0" pybase64 msgspec python-multipart requests numpy pydantic
  partial_json_parser einops tiktoken interegular tqdm packaging pillow scipy xxhash zstandard
  watchfiles "python-dateutil<3" distro regex safetensors huggingface_hub IPython dill gguf
  jsonschema pyyaml
  # NGRAM speculation: SGLang's JIT loader (sglang/jit_kernel/utils.py load_jit, via tvm_ffi.cpp)
  # compiles the n-gram corpus (C++) at first use with host c++ -std=c++20 and ninja; tvm-ffi is
  # pinned above.
  "ninja==1.13.2"
  # tests/tools/test_sgl_cpu_ops.py (the torch ops' own tests) run with this venv's python
  "pytest>=8"
)
VENV="${SPECGUARD_SGLANG_VENV:-$HOME/.cache/specguard/sglang-venv}"
MARKER="$VENV/.specguard-complete"
STAMP="$SGLANG_SPEC $TORCH_SPEC ${DEPS[*]} v3"

die() {
  echo "" >&2
  echo "############################################################" >&2
  echo "## setup_sglang.sh FAILED: $*" >&2
  echo "## The SGLang venv at $VENV is NOT usable." >&2
  echo "############################################################" >&2
  exit 1
}

case "$VENV" in
  "$REPO"/*) die "SPECGUARD_SGLANG_VENV must be outside the repo (got $VENV)";;
esac

install_standin() {
  local sp
  sp=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
  rm -rf "$sp/sgl_kernel"
  cp -r "$REPO/tools/sgl_kernel_standin/sgl_kernel" "$sp/sgl_kernel"
  cp "$REPO/tools/sgl_kernel_standin/specguard_torchvision_schemas.py" "$REPO/tools/sgl_kernel_standin/specguard_torchvision_schemas.pth" "$sp/"
  # CPU speculation (SPECGUARD_SGL_CPU_SPEC=1 only): the platform override hook and the torch ops
  cp "$REPO/tools/sgl_kernel_standin/specguard_sgl_cpu_spec.py" "$REPO/tools/sgl_kernel_standin/specguard_sgl_cpu_spec.pth" \
     "$REPO/tools/sgl_kernel_standin/specguard_sgl_cpu_ops.py" "$sp/"
}

check_imports() {
  # The modules the server's three processes import, with the stand-in in place.
  SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import sgl_kernel
assert getattr(sgl_kernel, "STANDIN", False), "sgl_kernel is not the specguard stand-in"
import torch
assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.managers.detokenizer_manager  # noqa: E401
import sglang.srt.entrypoints.http_server, sglang.srt.models.llama  # noqa: E401
print("sglang", md.version("sglang"), "| torch", torch.__version__, "| transformers", md.version("transformers"),
      "| tokenizers", md.version("tokenizers"), "| sgl_kernel stand-in")
EOF
}

if [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$STAMP" ]]; then
  echo "setup_sglang: reusing $VENV (marker present)"
  install_standin || die "could not copy the sgl_kernel stand-in into $VENV"
  check_imports 2>&1 | grep -v -i "warn" || die "marker present but imports fail; delete $VENV and rerun"
  echo "setup_sglang: venv size $(du -sh "$VENV" | cut -f1)"
  echo "SGLANG_PYTHON=$VENV/bin/python"
  exit 0
fi

start=$(date +%s)
# shellcheck source=fresh_venv.sh
source "$(dirname "$0")/fresh_venv.sh"
make_fresh_venv setup_sglang "$VENV"

constraints="$VENV/specguard-constraints.txt"
echo "$TORCH_SPEC" > "$constraints"   # nothing below may replace the CPU torch
echo "setup_sglang: pip install $TORCH_SPEC (the CPU wheel on this machine's disk)"
"$VENV/bin/python" -m pip install -q --progress-bar off "$TORCH_SPEC" || die "pip install $TORCH_SPEC failed"
"$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.__version__.endswith("+cpu") else f"got torch {torch.__version__}, not the CPU build")' \
  || die "torch is not the CPU build"
echo "setup_sglang: pip install --no-deps $SGLANG_SPEC"
"$VENV/bin/python" -m pip install -q --progress-bar off --no-deps "$SGLANG_SPEC" || die "pip install $SGLANG_SPEC failed"
echo "setup_sglang: pip install ${#DEPS[@]} runtime dependencies (torch held at 2.13.0)"
"$VENV/bin/python" -m pip install -q --progress-bar off -c "$constraints" "${DEPS[@]}" \
  || die "pip install of sglang's runtime dependencies failed (see pip output above)"
"$VENV/bin/python" -m pip uninstall -y -q sglang-kernel sgl-kernel 2>/dev/null || true  # never the CUDA wheel

install_standin || die "could not copy the sgl_kernel stand-in into $VENV"
check_imports 2>&1 | grep -v -i "warn" || die "SGLang's server modules do not import in the new venv"

echo "$STAMP" > "$MARKER"   # last step: marks the venv complete
end=$(date +%s)
echo "setup_sglang: done in $((end - start)) s; venv size $(du -sh "$VENV" | cut -f1)"
echo "SGLANG_PYTHON=$VENV/bin/python"
