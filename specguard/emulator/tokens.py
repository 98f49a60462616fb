"""The emulator's stand-in tokenizer and detokenizer: deterministic and cheap.

Prompts: a text prompt counts one token per chat-template marker (``<|user|>``), per run of word
characters and per other non-space character; a list of ids counts its length. Outputs: every
request generates the same fixed cycle of (id, word piece) pairs. Because every output is the
same sequence, its cumulative ids and JSON-escaped text are built once, as growing strings with
offsets, and any event's payload is a slice of them: no per-event ``json.dumps`` of growing lists.
"""

from __future__ import annotations

import json
import re
from typing import Any

_WORDS = (
    " the quick brown fox jumps over a lazy dog while speculative drafts race ahead of the"
    " target model and every verified token lands in one batch step"
).split(" ")[1:]
# (token id, text piece); ids are arbitrary but fixed and distinct.
OUTPUT_CYCLE: tuple[tuple[int, str], ...] = tuple((1000 + 37 * i, " " + w) for i, w in enumerate(_WORDS))
# SGLang's forced acceptance in "fixed" token mode writes token id 100 as every verify step's output
# (simulated_acceptance.py); the stand-in detokenizer shows it as its id.
FIXED_TOKEN: tuple[int, str] = (100, " <100>")

_PROMPT_TOKEN = re.compile(r"<\|\w+\|>|\w+|[^\w\s]")


def count_prompt_tokens(text: str) -> int:
    """Number of prompt tokens the emulator charges for a text prompt."""
    return len(_PROMPT_TOKEN.findall(text))


def apply_chat_template(messages: list[dict[str, Any]]) -> str:
    """A tiny fixed chat template: ``<|role|>\\ncontent\\n`` per message, then ``<|assistant|>\\n``."""
    parts = []
    for message in messages:
        content = message.get("content", "")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{message.get('role', 'user')}|>\n{content}\n")
    return "".join(parts) + "<|assistant|>\n"


class OutputText:
    """Cumulative output ids (``"1000,1037,..."``) and escaped text, grown on demand.

    ``ids(a, b)`` and ``text(a, b)`` give tokens ``a..b-1`` as JSON fragments, ready to splice
    between ``[`` ``]`` or ``"`` ``"``. With ``fixed_after_first`` every token after the first
    (the prefill's) is that one: SGLang's forced acceptance in "fixed" token mode.
    """

    def __init__(self, fixed_after_first: tuple[int, str] | None = None) -> None:
        cycle = OUTPUT_CYCLE if fixed_after_first is None else OUTPUT_CYCLE[:1] + (fixed_after_first,)
        self._id_frags = [str(i) for i, _ in cycle]
        self._text_frags = [json.dumps(t)[1:-1] for _, t in cycle]
        self._fixed = fixed_after_first is not None
        self._ids = ""
        self._text = ""
        self._ids_end = [0]  # _ids_end[n]: length of the ids string holding the first n tokens
        self._text_end = [0]

    def _ensure(self, n: int) -> None:
        have = len(self._ids_end) - 1
        if n <= have:
            return
        target = max(n, 2 * have, 256)  # doubling keeps total growth linear
        ids, text = [self._ids], [self._text]
        ids_len, text_len = len(self._ids), len(self._text)
        cycle = len(OUTPUT_CYCLE)
        for k in range(have, target):
            at = min(k, 1) if self._fixed else k % cycle
            frag = self._id_frags[at]
            if k:
                frag = "," + frag
            ids.append(frag)
            ids_len += len(frag)
            self._ids_end.append(ids_len)
            piece = self._text_frags[at]
            text.append(piece)
            text_len += len(piece)
            self._text_end.append(text_len)
        self._ids, self._text = "".join(ids), "".join(text)

    def ids(self, start: int, end: int) -> str:
        if end <= start:
            return ""
        self._ensure(end)
        begin = self._ids_end[start] + (1 if start else 0)  # skip the separating comma
        return self._ids[begin : self._ids_end[end]]

    def text(self, start: int, end: int) -> str:
        if end <= start:
            return ""
        self._ensure(end)
        return self._text[self._text_end[start] : self._text_end[end]]
