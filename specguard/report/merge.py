"""One results document from pytest-xdist workers' documents (each measured different cells)."""

from __future__ import annotations

from specguard.decide.gates import holm_failures
from specguard.report.crossovers import crossovers
from specguard.report.results import decision_dict, holm_decisions
from specguard.report.schema import NoteDoc, ResultsDoc, ServerDoc


def merge_documents(docs: list[ResultsDoc]) -> ResultsDoc:
    """One document from pytest-xdist workers' documents (each measured different cells).

    Holm is re-applied over all workers' decisions, since the family is the whole session.
    """
    if len(docs) == 1:
        return docs[0]
    merged = _union(docs)
    merged["crossovers"] = crossovers(merged)
    extra = holm_failures(holm_decisions(merged), merged["tolerances"]["family_alpha"])
    merged["holm_failures"] = [decision_dict(r) for r in extra]
    merged["merged_from"] = sum(d.get("merged_from", 1) for d in docs)
    return merged


def _union(docs: list[ResultsDoc]) -> ResultsDoc:
    """The first document with what every worker measured and recorded: servers, cells, decisions,
    baseline writes, reference roles, relaunches and run notes (what is derived from them is not
    redone here)."""
    merged = docs[0].copy()
    merged["servers"] = merged_servers(docs)
    merged["cells"] = [x for d in docs for x in d["cells"]]
    merged["decisions"] = [x for d in docs for x in d["decisions"]]
    merged["baseline_updates"] = [x for d in docs for x in d["baseline_updates"]]
    merged["reference_roles"] = [x for d in docs for x in d.get("reference_roles", [])]
    merged["relaunches"] = {k: v for d in docs for k, v in (d.get("relaunches") or {}).items()}
    merged["run_notes"] = _run_notes(docs)
    return merged


def _run_notes(docs: list[ResultsDoc]) -> list[NoteDoc]:
    """Every worker's run notes, each once (every worker says the suite's design notes)."""
    notes: list[NoteDoc] = []
    for d in docs:
        notes += [n for n in d.get("run_notes") or [] if n not in notes]
    return notes


def merged_servers(docs: list[ResultsDoc]) -> dict[str, ServerDoc]:
    """Each configuration's server record from the workers' documents: the first one, replaced by
    any that read the server's effective arguments (a worker that only skipped a configuration
    knows less than one that ran it)."""
    servers: dict[str, ServerDoc] = {}
    for d in docs:
        for name, server in d["servers"].items():
            if name not in servers or server.get("effective_args"):
                servers[name] = server
    return servers
