"""specguard/sglang_rules/ is a leaf: its import-linter contract forbids every other top-level
module of specguard (so a new one cannot be imported unnoticed), and importing it loads nothing
else of specguard."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import specguard

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_the_leaf_contract_forbids_every_other_top_level_module():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (leaf,) = [c for c in contracts if c.get("source_modules") == ["specguard.sglang_rules"]]
    top = {f"specguard.{m.name}" for m in pkgutil.iter_modules(specguard.__path__)} - {"specguard.sglang_rules"}
    assert top - set(leaf["forbidden_modules"]) == set()
    assert "research" in leaf["forbidden_modules"]


@pytest.mark.e2e
def test_importing_the_rules_loads_nothing_else_of_specguard():
    code = ("import sys, specguard.sglang_rules.adaptive_table, specguard.sglang_rules.speculative, "
            "specguard.sglang_rules.cuda_graph; print(sorted(m for m in sys.modules if m.startswith('specguard')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert all(m == "specguard" or m.startswith("specguard.sglang_rules") for m in ast.literal_eval(out)), out
