"""The gate path's shape: every module `pytest perf_tests` imports, its size, and its functions
over the limits (docs/design.md): about 500 lines a module, 60 lines or cyclomatic complexity 15
a function. Research code and the emulator are outside the gate path and listed apart.

    python tools/code_shape.py            # table of the gate path; exit 1 when a limit is passed
    python tools/code_shape.py --top 10   # also the N most complex functions of the whole package
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from radon.complexity import cc_visit

REPO = Path(__file__).resolve().parents[1]
MODULE_LINES, FUNCTION_LINES, COMPLEXITY = 500, 60, 15


@dataclass(frozen=True)
class Function:
    module: str
    name: str
    lines: int
    complexity: int


def gate_path_modules() -> list[str]:
    """The specguard modules a `pytest perf_tests` run imports (the plugin, as pytest loads it)."""
    code = ("import sys, specguard.plugin, specguard.plugin.gate_tests; "
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('specguard'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return out.stdout.split()


def module_file(name: str) -> Path:
    path = REPO / Path(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def functions(name: str) -> list[Function]:
    source = module_file(name).read_text(encoding="utf-8")
    sizes = {(n.name, n.lineno): (n.end_lineno or n.lineno) - n.lineno + 1 for n in ast.walk(ast.parse(source))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: dict[tuple[str, int], Function] = {}
    for block in cc_visit(source):  # functions, and classes with their methods (also listed alone)
        for f in [block, *getattr(block, "methods", [])]:
            if (f.name, f.lineno) in sizes:
                label = f"{f.classname}.{f.name}" if getattr(f, "classname", None) else f.name
                found[(f.name, f.lineno)] = Function(name, label, sizes[(f.name, f.lineno)], f.complexity)
    return list(found.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=0, help="also list the N most complex functions of the package")
    args = ap.parse_args()
    over = 0
    print(f"{'gate-path module':45} {'lines':>6}  functions over {FUNCTION_LINES} lines / CC {COMPLEXITY}")
    for name in gate_path_modules():
        lines = len(module_file(name).read_text(encoding="utf-8").splitlines())
        big = [f for f in functions(name) if f.lines > FUNCTION_LINES or f.complexity > COMPLEXITY]
        over += (lines > MODULE_LINES) + len(big)
        flag = " !" if lines > MODULE_LINES else ""
        print(f"{name:45} {lines:6}{flag}  " + ", ".join(f"{f.name} ({f.lines} lines, CC {f.complexity})" for f in big))
    if args.top:
        every = [f for p in sorted((REPO / "specguard").rglob("*.py"))
                 for f in functions(".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"))]
        print(f"\nthe {args.top} most complex functions of the package:")
        for f in sorted(every, key=lambda f: -f.complexity)[: args.top]:
            print(f"  CC {f.complexity:3}  {f.lines:4} lines  {f.module}.{f.name}")
    print(f"\nFAIL: {over} limit(s) exceeded (marked ! or listed above)" if over
          else "\nevery gate-path module and function within the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
