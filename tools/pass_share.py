"""How many of a session's gate decisions read pass, fail and inconclusive (issue 13: "the
default suite on an idle machine reads pass on most cells").

    .venv/bin/python tools/pass_share.py RESULTS.json [RESULTS.json ...]

One line per results file and a total, per gate kind (throughput, accept length, speculation
where it must win); report-only speculation decisions are left out (they cannot fail).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def shares(doc: dict) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for d in doc.get("decisions", []):
        if not d.get("enforced", True):
            continue
        kind = d["gate"].split("[")[0]
        out.setdefault(kind, Counter())[d["verdict"]] += 1
    return out


def line(name: str, by_gate: dict[str, Counter]) -> str:
    total = sum((c for c in by_gate.values()), Counter())
    parts = [f"{gate} {c['pass']}/{sum(c.values())} pass" for gate, c in sorted(by_gate.items())]
    n = sum(total.values())
    return (f"{name}: {total['pass']}/{n} pass ({100 * total['pass'] / max(n, 1):.0f} %), {total['inconclusive']} "
            f"inconclusive, {total['fail']} fail, {total['skip'] + total['error']} skip/error; " + ", ".join(parts))


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    grand: dict[str, Counter] = {}
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, ValueError) as exc:
            print(f"{p}: cannot read a results document: {exc}", file=sys.stderr)
            return 2
        by_gate = shares(doc)
        print(line(p, by_gate))
        for gate, c in by_gate.items():
            grand.setdefault(gate, Counter()).update(c)
    if len(paths) > 1:
        print(line("all", grand))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
