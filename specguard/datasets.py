"""Prompt sources with categories: the shipped per-category sets and ShareGPT-format files.

Speculation's acceptance depends on the text (code and math accept more than open chat), so a
workload can carry a category per prompt and the suite reports per category. Nothing is
downloaded: the shipped sets are generated in this repository (tools/make_prompt_sets.py) and a
ShareGPT file is read from a local path.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path

SHIPPED_CATEGORIES = ("code", "math", "chat", "summarisation")
SHAREGPT_CATEGORY = "sharegpt"  # the category of ShareGPT prompts whose entry names none


class DatasetError(ValueError):
    """A prompt file that cannot be used; the message names the file and the entry."""


@cache
def category_prompts(category: str) -> tuple[str, ...]:
    """The shipped prompts of one category, in file order."""
    if category not in SHIPPED_CATEGORIES:
        raise DatasetError(f"no shipped prompt set {category!r} (have: {', '.join(SHIPPED_CATEGORIES)})")
    text = resources.files("specguard").joinpath(f"data/prompts/{category}.jsonl").read_text(encoding="utf-8")
    return tuple(json.loads(line)["text"] for line in text.splitlines() if line.strip())


def interleaved_categories(categories: tuple[str, ...] = SHIPPED_CATEGORIES) -> list[tuple[str, str]]:
    """(category, text) pairs, round robin over the categories, so any window of requests (a run of
    N requests uses prompts 0..N-1) holds every category in equal shares and repeats none until
    len(categories) x the smallest set."""
    sets = [category_prompts(c) for c in categories]
    n = min(len(s) for s in sets)
    return [(c, s[i]) for i in range(n) for c, s in zip(categories, sets)]


def category_by_text() -> dict[str, str]:
    """Every shipped prompt's text -> its category (how the emulator tells a request's category
    from the text SGLang receives, with no extra field in the request)."""
    return {text: c for c in SHIPPED_CATEGORIES for text in category_prompts(c)}


def read_sharegpt(path: Path) -> list[tuple[str, str]]:
    """(category, first human turn) of each conversation with at least two turns, in file order.

    The layout is sglang.benchmark's ShareGPT file (benchmark/datasets/sharegpt.py,
    sample_sharegpt_requests): a JSON list of {"conversations" (or "conversation"): [{"from",
    "value"}, ...]}, of which the first turn is the prompt and conversations with fewer than two
    turns are skipped. bench_serving shuffles with an unseeded RNG; here order is the file's and
    the workload's seed permutes it, so runs stay reproducible. An optional "category" key per
    entry is ours; without it the prompt's category is "sharegpt".
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"cannot read ShareGPT file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}); a ShareGPT file is one JSON list") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: a ShareGPT file is a JSON list of {{\"conversations\": [...]}} entries")
    out: list[tuple[str, str]] = []
    for i, entry in enumerate(data):
        turns = entry.get("conversations", entry.get("conversation")) if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f"{path}: entry {i} has no \"conversations\" list")
        if len(turns) < 2:
            continue
        first = turns[0]
        if not (isinstance(first, dict) and isinstance(first.get("value"), str)):
            raise DatasetError(f"{path}: entry {i}: conversations[0] needs a string \"value\"")
        out.append((str(entry.get("category") or SHAREGPT_CATEGORY), first["value"]))
    if not out:
        raise DatasetError(f"{path}: no conversation with at least two turns")
    return out
