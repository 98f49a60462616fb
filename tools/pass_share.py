"""How many of a session's gate decisions and table rows read pass, fail and inconclusive
(issue 13: "the default suite on an idle machine reads pass on most cells"), and what each
session did (issue 14: which tests failed, which configurations were launched again).

    .venv/bin/python tools/pass_share.py RESULTS.json[.gz] [RESULTS.json[.gz] ...]

Per results file: the gate decisions by kind (throughput, accept length, speculation where it
must win; report-only speculation decisions are left out, they cannot fail), the table rows (a
row, one configuration at one level, reads pass when every enforced gate of it passes), the
failed tests and the relaunches. Then the totals.
"""

from __future__ import annotations

import gzip
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


def rows(doc: dict) -> Counter:
    """Table rows by verdict: fail if any enforced gate fails, pass if every one passes, else the
    worst of the rest (error, skip, inconclusive)."""
    by_row: dict[tuple[str, str], list[str]] = {}
    for d in doc.get("decisions", []):
        if d.get("enforced", True):
            by_row.setdefault((d["config"], d.get("level") or f"c{d['concurrency']}"), []).append(d["verdict"])
    out: Counter = Counter()
    for verdicts in by_row.values():
        out[next((v for v in ("fail", "error", "skip", "inconclusive") if v in verdicts), "pass")] += 1
    return out


def launches(doc: dict) -> dict[str, int]:
    """Server launches per configuration: the most any of its cells was measured on (its measured
    runs over the sweep's repeats), a reference relaunched for a speculative configuration included."""
    repeats = max(int((doc.get("sweep") or {}).get("repeats") or 1), 1)
    out: dict[str, int] = {}
    for cell in doc.get("cells", []):
        out[cell["config"]] = max(out.get(cell["config"], 1), -(-len(cell.get("runs") or []) // repeats))
    return out


def line(name: str, by_gate: dict[str, Counter], by_row: Counter) -> str:
    total = sum((c for c in by_gate.values()), Counter())
    parts = [f"{gate} {c['pass']}/{sum(c.values())} pass" for gate, c in sorted(by_gate.items())]
    n, n_rows = sum(total.values()), sum(by_row.values())
    return (f"{name}: {total['pass']}/{n} pass ({100 * total['pass'] / max(n, 1):.0f} %), {total['inconclusive']} "
            f"inconclusive, {total['fail']} fail, {total['skip'] + total['error']} skip/error; " + ", ".join(parts)
            + f"; rows {by_row['pass']}/{n_rows} pass ({100 * by_row['pass'] / max(n_rows, 1):.0f} %)")


def detail(doc: dict) -> str:
    failed = [(t["nodeid"] if isinstance(t, dict) else t).split("::")[-1] for t in doc.get("outcome", {}).get("failed_tests", [])]
    relaunched = {name: n for name, n in launches(doc).items() if n > 1}
    return (f"  exit {doc.get('outcome', {}).get('exit_status')}; failed: {', '.join(failed) or 'none'}; "
            f"relaunched: {', '.join(f'{k} ({v} launches)' for k, v in relaunched.items()) or 'none'}")


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: " + __doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    grand: dict[str, Counter] = {}
    grand_rows: Counter = Counter()
    config_launches: Counter = Counter()
    for p in paths:
        try:
            raw = Path(p).read_bytes()
            doc = json.loads(gzip.decompress(raw) if p.endswith(".gz") else raw)
        except (OSError, ValueError) as exc:
            print(f"{p}: cannot read a results document: {exc}", file=sys.stderr)
            return 2
        by_gate, by_row = shares(doc), rows(doc)
        print(line(p, by_gate, by_row))
        print(detail(doc))
        for gate, c in by_gate.items():
            grand.setdefault(gate, Counter()).update(c)
        grand_rows.update(by_row)
        for name, n in launches(doc).items():
            config_launches[name] += n
    if len(paths) > 1:
        print(line("all", grand, grand_rows))
        per = ", ".join(f"{k} {v / len(paths):.2f}" for k, v in config_launches.items())
        print(f"  launches per configuration and session: {per}; "
              f"all {sum(config_launches.values()) / max(len(paths) * len(config_launches), 1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
