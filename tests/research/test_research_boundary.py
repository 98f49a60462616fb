"""Research stays out of the wheel and the gate: what `pytest perf_tests` imports never loads the
emulator package (specguard.engines.emulator, the engine adapter, is part of the gate), nothing of
specguard imports research/, the wheel holds no research code, and the research commands run as
modules of this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GATE_PATH = ("specguard.plugin", "specguard.session", "specguard.config", "specguard.engines", "specguard.server",
             "specguard.measure", "specguard.decide", "specguard.report", "specguard.workload")
# Imports every module of the named packages (each package walked), then lists the loaded modules
# of specguard and research.
IMPORT_ALL = """
import importlib, pkgutil, sys
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        importlib.import_module(info.name)
print("\\n".join(sorted(m for m in sys.modules if m.startswith(("specguard", "research")))))
"""


def _python(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.e2e
def test_the_gate_path_never_imports_research_or_the_emulator():
    done = _python("-c", IMPORT_ALL, *GATE_PATH)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    seen = {"specguard.plugin", "specguard.decide.gates", "specguard.report.recommend", "specguard.engines.emulator"}
    assert seen <= set(loaded)
    assert [m for m in loaded if m.startswith(("research", "specguard.emulator"))] == []


@pytest.mark.e2e
def test_a_gate_run_loads_neither_the_policy_nor_the_report_page():
    """What `pytest perf_tests` imports (the plugin, as tools/code_shape.py measures the gate path):
    the crossover every results file stores, not `specguard recommend`'s policy and SGLang's
    adaptive table, nor the HTML page and plots `--report-dir` loads when asked."""
    done = _python("-c", "import sys, specguard.plugin, specguard.plugin.gate_tests; print('\\n'.join(sys.modules))")
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert {"specguard.report.crossovers", "specguard.report.terminal"} <= loaded
    assert loaded.isdisjoint({"specguard.report.recommend", "specguard.report.publish", "specguard.report.plots",
                              "specguard.report.html_page", "specguard.sglang_rules.adaptive_table"}), loaded


@pytest.mark.e2e
def test_no_module_of_specguard_loads_research():
    done = _python("-c", IMPORT_ALL, "specguard")
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "specguard.tune.cli" in loaded and "specguard.emulator.server" in loaded
    assert [m for m in loaded if m.startswith("research")] == []


@pytest.mark.e2e
def test_the_research_commands_run_as_modules_of_the_checkout():
    for module in ("research.study", "research.calibrate", "research.tune", "research.study.cell_rates",
                   "research.study.ab_power"):
        done = _python("-m", module, "--help")
        assert done.returncode == 0 and f"usage: python -m {module}" in done.stdout, (module, done.stderr)


def test_specguard_has_tune_and_no_research_commands(capsys):
    from specguard.cli import main

    for command, code in (("tune", 0), ("study", 4), ("calibrate", 4)):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == code, command
    assert "invalid choice: 'calibrate'" in capsys.readouterr().err


@pytest.mark.e2e  # builds the wheel (pip in a subprocess, ~30 s)
def test_the_wheel_holds_the_plugin_and_no_research_code(tmp_path):
    # A copy of the checkout (research/ included), so that no build/ directory of an earlier build
    # in the checkout can bring stale files into the wheel.
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in ("specguard", "research"):
        shutil.copytree(ROOT / part, src / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(tmp_path), "--no-deps", "-q"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("specguard-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "specguard/pytest_entry.py" in names and "specguard/tune/cli.py" in names
    assert [n for n in names if n.startswith("research/") or "/research/" in n] == []
