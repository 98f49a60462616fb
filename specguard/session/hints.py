"""The one builder of the commands printed as hints ("create one with: pytest ..."): they must
work as printed. The plugin fills in the run's own test paths and options; a session used
outside pytest (tools, tests) gives its suite's directory and options."""

from __future__ import annotations

import shlex


def exact_k(cells: list[tuple[str, int]], all_cells: list[tuple[str, int]], prefix: str = "c") -> str:
    """A -k expression that selects exactly these cells' tests among all_cells (substring matching:
    "c1" also matches "c16", "eagle3" also matches "eagle3x", so those are excluded by name).
    `prefix`: "c" for concurrency levels, "r" for request-rate levels (ids `eagle3-r8`)."""
    p = prefix
    parts = []
    for name, c in cells:
        terms = [name, f"{p}{c}"]
        for other, oc in all_cells:
            if (other, oc) == (name, c):
                continue
            oid = f"{other}-{p}{oc}"
            if name in oid and f"{p}{c}" in f"{p}{oc}" and f"-{p}{c}" in oid:
                excl = f"{p}{oc}" if other == name else other
                if excl not in f"{name}-{p}{c}":
                    terms.append(f"not {excl}")
            elif name in other and other != name and f"{p}{c}" in f"{p}{oc}":
                terms.append(f"not {other}")
        parts.append(" and ".join(dict.fromkeys(terms)))
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def record_command_line(paths: list[str], options: list[str], keyword: str | None = None,
                        markexpr: str | None = None) -> str:
    """`pytest PATHS OPTIONS --update-baselines [-k KEYWORD] [-m MARKEXPR]`, quoted for a shell."""
    cmd = ["pytest", *paths, *options, "--update-baselines"]
    if keyword:
        cmd += ["-k", keyword]
    if markexpr:
        cmd += ["-m", markexpr]
    return shlex.join(cmd)
