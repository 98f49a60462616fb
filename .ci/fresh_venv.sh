# Sourced by setup_vllm.sh and setup_sglang.sh (which define die()): make_fresh_venv NAME VENV
# builds a new venv at VENV with a Python >= 3.10 (SPECGUARD_PYTHON, else python3.11, else python3),
# deleting what is there only if it is recognisably a venv (guards against a mistyped path).
make_fresh_venv() {
  local name=$1 venv=$2 py="${SPECGUARD_PYTHON:-}"
  if [[ -z "$py" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
  fi
  "$py" -c 'import sys; assert sys.version_info[:2] >= (3, 10), sys.version' \
    || die "$py is not Python >= 3.10"
  echo "$name: building a fresh venv at $venv with $py ($("$py" --version 2>&1))"
  if [[ -e "$venv" ]]; then
    if [[ -f "$venv/pyvenv.cfg" ]] || [[ -d "$venv" && -z "$(ls -A "$venv")" ]]; then
      rm -rf "$venv"
    else
      die "$venv exists and is not a venv; refusing to delete it"
    fi
  fi
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv" || die "python -m venv failed"
  "$venv/bin/python" -m pip install -q --upgrade pip || die "pip upgrade failed"
}
