"""The spread a baseline store measured: per cell, the between-session sd of log tok/s and of
accept length that the gates read from the stored history (decide.stats.history_spread: the
sd of the sessions' means less what the runs' own spread explains, K - 1 dof), beside the raw
sd of the session means.

    .venv/bin/python tools/history_spread.py BASELINE.json [BASELINE.json ...]

Issue 14 asks for it next to the end-to-end runs: the gate's power depends on it.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from specguard.decide.stats import history_spread

METRICS = (("output_throughput", "tok/s"), ("accept_length", "accept length"))


def cell_lines(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    out = []
    for entry in doc["entries"].values():
        for cell, data in sorted(entry["cells"].items(), key=lambda kv: (len(kv[0]), kv[0])):
            sessions = data["sessions"]
            parts = []
            for field, label in METRICS:
                hist = [[r[field] for r in s["runs"] if r.get(field)] for s in sessions]
                hist = [h for h in hist if h]
                if len(hist) < 2:
                    continue
                est = history_spread(hist)
                means = [statistics.fmean(math.log(v) for v in h) for h in hist]
                gate = f"{math.sqrt(est.var):.2%} ({est.dof:.0f} dof)" if est is not None else "n/a"
                parts.append(f"{label}: gate reads {gate}, session means sd {statistics.stdev(means):.2%}")
            out.append(f"{doc['configuration']} {cell} ({len(sessions)} sessions): " + "; ".join(parts))
    return out


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: " + __doc__.strip().splitlines()[5].strip(), file=sys.stderr)
        return 2
    for p in paths:
        try:
            lines = cell_lines(Path(p))
        except (OSError, ValueError, KeyError) as exc:
            print(f"{p}: cannot read a baseline file: {exc}", file=sys.stderr)
            return 2
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
