#!/usr/bin/env python3
"""Print the import cycles among a package's modules, imports inside functions included.

import-linter checks the layers on module-level imports it can see; an import inside a function
(used to dodge a cycle at import time) is still a dependency both ways. This reads every `import`
and `from ... import` statement of every module with `ast`, wherever it sits, resolves relative
imports and `from pkg import module`, and prints each strongly connected group of modules (a
cycle) with one import edge per step. Exit 1 when there is a cycle, 0 otherwise.

    python tools/import_cycles.py [PACKAGE_DIR ...]     # default: specguard
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package_dir: Path) -> dict[str, Path]:
    return {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _imported(node: ast.AST, here: str, is_package: bool, known: dict[str, Path]) -> Iterable[str]:
    """The modules a statement imports: `import a.b` -> a.b; `from pkg import mod` -> pkg.mod when
    that is a module, else pkg (a name defined in pkg's __init__)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = here.split(".") if is_package else here.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def edges(known: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import} among `known` modules."""
    out: dict[str, dict[str, int]] = {m: {} for m in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py", known):
                while target and target not in known:  # a symbol of a module: the module itself
                    target = target.rpartition(".")[0]
                if target and target != name:
                    out[name].setdefault(target, getattr(node, "lineno", 0))
    return out


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(1000, 4 * len(graph)))
    for v in graph:
        if v not in index:
            visit(v)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    dirs = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or [REPO / "specguard"]
    known: dict[str, Path] = {}
    for d in dirs:
        known.update(modules(d.resolve()))
    graph = edges(known)
    found = cycles(graph)
    for group in found:
        members = set(group)
        steps = [f"{a} -> {b} ({known[a].relative_to(REPO) if known[a].is_relative_to(REPO) else known[a]}:{line})"
                 for a in group for b, line in sorted(graph[a].items()) if b in members]
        print(f"cycle of {len(group)} modules: {', '.join(group)}")
        print("\n".join(f"  {s}" for s in steps))
    print(f"{len(found)} import cycle(s) among {len(known)} modules, imports inside functions included")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
