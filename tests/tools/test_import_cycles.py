"""tools/import_cycles.py: cycles among a package's modules, imports inside functions included."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("import_cycles", REPO / "tools" / "import_cycles.py")
assert spec is not None and spec.loader is not None
import_cycles = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_cycles)


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path, capsys):
    pkg = _package(tmp_path, {"a.py": "from pkg import b\n", "b.py": "def f():\n    from pkg.a import x\n",
                              "c.py": "from . import a\n"})
    assert import_cycles.main([str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "cycle of 2 modules: pkg.a, pkg.b" in out and "pkg.b -> pkg.a" in out
    assert "pkg.c" not in out.split("\n")[0]


def test_no_cycle_exits_0(tmp_path, capsys):
    pkg = _package(tmp_path, {"a.py": "import pkg.b\n", "b.py": "import json\n", "sub/__init__.py": "from .. import a\n"})
    assert import_cycles.main([str(pkg)]) == 0
    assert capsys.readouterr().out.strip().startswith("0 import cycle(s) among 4 modules")


def test_specguard_has_no_import_cycle(capsys):
    assert import_cycles.main([str(REPO / "specguard")]) == 0, capsys.readouterr().out
