"""How the emulator tells a request's prompt category from what SGLang itself receives.

A real server's acceptance depends on the text; the emulator's profiles give acceptance per
category, so it must know a request's category without any field SGLang does not have. It ships
the same prompt sets as the client (specguard/datasets.py) and looks the prompt text up: the
/generate "text", the /v1/completions "prompt", or the content of the last user message of a
chat request. Any other prompt (token ids, a user's own text) has no category and gets the
profile's default acceptance.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from specguard import datasets


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    return datasets.category_by_text()


def category_of_text(text: str) -> str:
    """The shipped category whose prompt this is exactly, else ""."""
    return _index().get(text, "")


def category_of_messages(messages: list[dict[str, Any]]) -> str:
    """The category of a chat request: that of its last user message's content."""
    for message in reversed(messages):
        if message.get("role", "user") == "user" and isinstance(message.get("content"), str):
            return category_of_text(message["content"])
    return ""


def parse_category_factors(items: list[str]) -> dict[str, float]:
    """--emulator-category-accept values (`code=0.85`, repeatable or comma-separated) -> {category:
    factor}; raises ValueError naming the flag for anything else."""
    out: dict[str, float] = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            name, sep, value = part.partition("=")
            try:
                factor = float(value) if sep and name else -1.0
            except ValueError:
                factor = -1.0
            if not factor > 0:
                raise ValueError(f"--emulator-category-accept {part!r}: write CATEGORY=FACTOR with FACTOR > 0, "
                                 f"e.g. code=0.85 (categories: {', '.join(datasets.SHIPPED_CATEGORIES)})")
            out[name.strip()] = factor
    return out


def warm() -> int:
    """Build the text index at launch (not in the first request's path); returns its size."""
    return len(_index())
