"""Results documents of older schema versions, read as the current one (docs/results.md).

Months of nightly results files are a user's history (`specguard history`), so every version
specguard ever wrote stays readable: each step upgrades one version to the next, in memory; the
file is never rewritten. What an older version did not record is absent or null, never invented;
its decisions keep the line that specguard worded then (`legacy_message`).

- 1 -> 2 (specguard's first day): no options, configurations, summaries or session outcome.
- 2 -> 3: levels by name (`"level": "r8"`, not `"concurrency": 8` in a request-rate sweep);
  decisions as data (no `message`); relaunches as data.
- 3 -> 4: crossovers as data (no `text`): each keeps its line as `legacy_text`.
- 4 -> 5: an estimate's `between_source` as data (decide.prior.SpreadSource), not a phrase: the
  phrase stays as `legacy_text`, and only what it plainly said is read from it (whether the prior
  counted, whether a history did).
- 5 -> 6: notes as data (notes.Note: a kind and its figures): a cell's `warnings`, a run's
  `warnings`, a decision's `notes` and the `run_notes` were sentences; each is kept as a `text` note,
  worded as then. A server's `differences` lose their `message` (their fields say it).
- 6 -> 7: a server's checks as data: `{message, blocking}` becomes `{note, blocking, strict}`, the
  message kept as a `text` note; the `server` notes (an engine's check, worded in engines/) become
  `text` notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specguard.labels import Level
from specguard.report.summary import cell_summary


def upgrade(doc: dict[str, Any], version: int) -> dict[str, Any]:
    """The document as the current schema (7), from `version` (1 to 6)."""
    if version == 1:
        doc, version = _v1_to_v2(doc), 2
    if version == 2:
        doc, version = _v2_to_v3(doc), 3
    if version == 3:
        doc, version = _v3_to_v4(doc), 4
    if version == 4:
        doc, version = _v4_to_v5(doc), 5
    if version == 5:
        doc, version = _v5_to_v6(doc), 6
    if version == 6:
        doc = _v6_to_v7(doc)
    return doc


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    references = doc.get("references") or {}
    out = dict(doc)
    out["options"] = {"require_baselines": False, "update_baselines": False, "baseline_dir": "", "attached": False}
    out["configs"] = [{"name": name, "engine": server.get("engine", ""), "reference": references.get(name)}
                      for name, server in (doc.get("servers") or {}).items()]
    out["servers"] = {name: {**server, "failure_skipped": False, "mode": "", "differences": []}
                      for name, server in (doc.get("servers") or {}).items()}
    out["cells"] = [{**cell, "summary": cell_summary(cell.get("runs") or [])} for cell in doc.get("cells") or []]
    out.update(holm_failures=[], crossovers={}, baseline_updates=[],
               outcome={"status": "unknown", "exit_status": -1, "failed_tests": []})
    return out


def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    rate = bool((doc.get("sweep") or {}).get("request_rate"))

    def level(value: int | None) -> str | None:
        return None if value is None else Level(int(value), rate).name

    def moved(item: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in item.items() if k != "concurrency"}
        out["level"] = level(item.get("concurrency"))
        return out

    out = dict(doc)
    out["schema_version"] = 3
    out["cells"] = [moved(c) for c in doc.get("cells") or []]
    out["decisions"] = [_decision(moved(d)) for d in doc.get("decisions") or []]
    out["holm_failures"] = [_decision(moved(d)) for d in doc.get("holm_failures") or []]
    if "tests" in doc:
        out["tests"] = [moved(t) for t in doc["tests"]]
    if "reference_roles" in doc:
        out["reference_roles"] = [moved(r) for r in doc["reference_roles"]]
    if "relaunches" in doc:
        out["relaunches"] = {name: [{"lines": list(lines)}] for name, lines in (doc["relaunches"] or {}).items()}
    return out


def _v3_to_v4(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    out["schema_version"] = 4
    out["crossovers"] = {name: {**{k: v for k, v in x.items() if k != "text"}, "reference": None, "below_range": False,
                                "measured": [], "legacy_text": x.get("text", "")}
                         for name, x in (doc.get("crossovers") or {}).items()}
    return out


def _v4_to_v5(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    out["schema_version"] = 5
    out["decisions"] = [_sources_as_data(d) for d in doc.get("decisions") or []]
    out["holm_failures"] = [_sources_as_data(d) for d in doc.get("holm_failures") or []]
    return out


def _v5_to_v6(doc: dict[str, Any]) -> dict[str, Any]:
    def texts(sentences: Any) -> list[Any]:
        return [{"kind": "text", "text": str(t)} for t in sentences or []]

    out = _every_notes_list(doc, texts, measured_key="warnings")
    out["schema_version"] = 6
    out["servers"] = {name: {**s, "differences": [{k: v for k, v in d.items() if k != "message"}
                                                  for d in s.get("differences") or []]}
                      for name, s in (doc.get("servers") or {}).items()}
    return out


def _v6_to_v7(doc: dict[str, Any]) -> dict[str, Any]:
    def notes(items: Any) -> list[Any]:
        return [{"kind": "text", "text": n.get("text", "")} if isinstance(n, dict) and n.get("kind") == "server" else n
                for n in items or []]

    def check(c: dict[str, Any]) -> dict[str, Any]:
        return {"note": {"kind": "text", "text": str(c.get("message", ""))}, "blocking": bool(c.get("blocking")),
                "strict": False}  # a strict check's message already ends "(--strict-server-args)"

    out = _every_notes_list(doc, notes)
    out["schema_version"] = 7
    out["servers"] = {name: {**s, "checks": [check(c) for c in s.get("checks") or []]}
                      for name, s in (doc.get("servers") or {}).items()}
    return out


def _every_notes_list(doc: dict[str, Any], convert: Callable[[Any], list[Any]], measured_key: str = "notes") -> dict[str, Any]:
    """The document with every list of notes converted: a cell's and its runs' `measured_key`
    (replaced by `notes`), and the `notes` of decisions, of Holm failures and of the run."""
    def measured(x: Any) -> Any:
        if not isinstance(x, dict):
            return x
        return {**{k: v for k, v in x.items() if k != measured_key}, "notes": convert(x.get(measured_key))}

    def cell(c: dict[str, Any]) -> dict[str, Any]:
        return {**measured(c), "runs": [measured(r) for r in c.get("runs") or []],
                "warmup_runs": [measured(r) for r in c.get("warmup_runs") or []]}

    out = dict(doc)
    out["cells"] = [cell(c) for c in doc.get("cells") or []]
    out["decisions"] = [{**d, "notes": convert(d.get("notes"))} for d in doc.get("decisions") or []]
    out["holm_failures"] = [{**d, "notes": convert(d.get("notes"))} for d in doc.get("holm_failures") or []]
    if "run_notes" in doc:
        out["run_notes"] = convert(doc["run_notes"])
    return out


def _sources_as_data(d: dict[str, Any]) -> dict[str, Any]:
    """A schema-4 decision with each of its estimates' `between_source` phrase kept as worded."""
    def estimate(e: Any) -> Any:
        if not isinstance(e, dict) or not isinstance(e.get("between_source"), str):
            return e
        text = e["between_source"]
        # the phrases schema 4 wrote: "prior", "prior + history of 5 sessions", "history of 5
        # sessions (the prior 0.50% contradicted, dropped)", each perhaps with ", 2 launches"
        history = {"of": "sessions", "count": 0, "names": []} if "histor" in text else None
        return {**e, "between_source": {"prior": text.startswith("prior"), "history": history, "dropped_prior_sd": None,
                                        "widened": 1.0, "launches": [], "levels_pooled": False, "legacy_text": text}}

    out = dict(d)
    out["estimate"] = estimate(d.get("estimate"))
    if isinstance(d.get("attribution"), dict):
        a = d["attribution"]
        out["attribution"] = {**a, "step_rate": estimate(a.get("step_rate")), "accept": estimate(a.get("accept"))}
    if isinstance(d.get("positions"), list):
        out["positions"] = [{**p, "estimate": estimate(p.get("estimate"))} if isinstance(p, dict) else p
                            for p in d["positions"]]
    return out


def _decision(d: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 decision: its figures kept, its line kept as worded, what it lacked absent."""
    half = d.get("attribution")
    out = {k: v for k, v in d.items() if k not in ("message", "attribution")}
    out.update(versus=None, tolerance=None, rule="", factors=None, goodput=False, problem=None, drift=None, notes=[],
               attribution={"half": half, "step_rate": None, "accept": None} if half else None,
               legacy_message=d.get("message", ""))
    out.setdefault("enforced", True)
    out.setdefault("alpha", None)
    out.setdefault("launches", 1)
    out.setdefault("stage", 1)
    return out
