"""Research stays out of the gate: what `pytest perf_tests` imports never loads specguard.research
or the emulator package (specguard.engines.emulator, the engine adapter, is part of the gate);
the research commands still run, and trials cached by earlier versions of the study still load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATE_PATH = ("specguard.plugin", "specguard.session", "specguard.config", "specguard.engines", "specguard.server",
             "specguard.measure", "specguard.decide", "specguard.report", "specguard.workload")
# Imports every module of the gate path (each package walked), then lists specguard's loaded modules.
IMPORT_ALL = """
import importlib, pkgutil, sys
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        importlib.import_module(info.name)
print("\\n".join(sorted(m for m in sys.modules if m.startswith("specguard"))))
"""


def _python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_the_gate_path_never_imports_research_or_the_emulator():
    done = _python("-c", IMPORT_ALL, *GATE_PATH)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    seen = {"specguard.plugin", "specguard.decide.gates", "specguard.report.recommend", "specguard.engines.emulator"}
    assert seen <= set(loaded)
    assert [m for m in loaded if m.startswith(("specguard.research", "specguard.emulator"))] == []


def test_the_research_commands_run_as_modules_and_through_specguard():
    for module in ("specguard.research.study", "specguard.research.calibrate"):
        done = _python("-m", module, "--help")
        assert done.returncode == 0 and "usage:" in done.stdout, (module, done.stderr)
    from specguard.cli import main

    for command in ("study", "calibrate", "tune"):
        try:
            main([command, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, command
