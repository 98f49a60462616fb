#!/usr/bin/env bash
# The audit's "before" (../shared/reference/gate-audit.md section 3): its scripts hist.py and
# hist_median.py run against `specguard history` as it was at 65e213e (otava, the per-file mean),
# in a temporary worktree. Run from the repository root with a venv that has apache-otava 0.8.0
# (pip install --no-deps apache-otava==0.8.0): bash docs/evidence/history/audit-before.sh [PYTHON]
set -euo pipefail
py=${1:-.venv/bin/python}
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")  # absolute, the venv's own (not its symlink's target)
audit=${AUDIT:-../shared/reference/gate-audit}
audit=$(realpath "$audit")
old=$(mktemp -d)/before
git worktree add -q --detach "$old" 65e213e
trap 'git worktree remove --force "$old"' EXIT
cd "$old"
export PYTHONPATH=$old
"$py" -c "import specguard, otava.analysis; print('specguard from', specguard.__file__)"
for H in 300 1000; do
    "$py" "$audit/hist.py" "$H" -0.05 0.02
    "$py" "$audit/hist_median.py" "$H" -0.05 0.02
done
