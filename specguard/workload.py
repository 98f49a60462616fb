"""Deterministic prompts, so every run of a cell does exactly the same work.

Nothing is downloaded: random ids and the repeated id are generated from a seed, the text
prompts ship with the package, and a user JSONL file is read as given.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

WORKLOAD_KINDS = ("random-ids", "repeated-id", "text", "jsonl")


class WorkloadError(ValueError):
    """A workload that cannot be built; the message names the field or file."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What to send: prompt kind, lengths and the seed that fixes it."""

    kind: str = "random-ids"
    input_len: int = 128
    output_len: int = 128
    seed: int = 0
    repeated_id: int = 23066  # the id the seed-A Qwen run repeated
    vocab_size: int = 32000
    path: str | None = None  # JSONL file for kind "jsonl"

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise WorkloadError(f"workload kind {self.kind!r} is not one of {', '.join(WORKLOAD_KINDS)}")
        if self.input_len <= 0 or self.output_len <= 0:
            raise WorkloadError("workload input_len and output_len must be positive")
        if self.kind == "jsonl" and not self.path:
            raise WorkloadError("workload kind 'jsonl' needs a path")


@dataclass(frozen=True)
class Prompt:
    """One request's input: token ids or text (never both)."""

    input_ids: tuple[int, ...] | None = None
    text: str | None = None
    category: str = ""


@dataclass(frozen=True)
class Workload:
    spec: WorkloadSpec
    prompts: tuple[Prompt, ...] = field(repr=False)

    def prompt(self, index: int) -> Prompt:
        """Request `index` of a run; the same index always gets the same prompt."""
        return self.prompts[index % len(self.prompts)]

    def digest(self) -> str:
        """A hash of everything sent, for the baseline fingerprint."""
        h = hashlib.sha256(json.dumps(self.spec.__dict__, sort_keys=True).encode())
        for p in self.prompts:
            h.update(repr((p.input_ids, p.text)).encode())
        return h.hexdigest()[:16]


def shipped_prompts() -> list[dict[str, str]]:
    """The realistic prompts written for this project (coding, reasoning, chat)."""
    text = resources.files("specguard").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _read_jsonl(path: Path) -> list[Prompt]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"cannot read workload file {path}: {exc.strerror}") from exc
    prompts: list[Prompt] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            prompts.append(Prompt(text=obj["text"], category=str(obj.get("category", ""))))
        elif isinstance(obj, dict) and isinstance(obj.get("input_ids"), list) and all(
            isinstance(i, int) for i in obj["input_ids"]
        ):
            prompts.append(Prompt(input_ids=tuple(obj["input_ids"])))
        else:
            raise WorkloadError(f"{path}:{lineno}: each line needs \"text\" (string) or \"input_ids\" (list of ints)")
    if not prompts:
        raise WorkloadError(f"workload file {path} has no prompts")
    return prompts


def build_workload(spec: WorkloadSpec, num_prompts: int = 256) -> Workload:
    """Materialise the prompts once, up front, so nothing is generated while measuring."""
    if spec.kind == "random-ids":
        rng = np.random.default_rng(spec.seed)
        ids = rng.integers(100, spec.vocab_size, size=(num_prompts, spec.input_len))
        prompts = tuple(Prompt(input_ids=tuple(int(x) for x in row)) for row in ids)
    elif spec.kind == "repeated-id":
        prompts = (Prompt(input_ids=(spec.repeated_id,) * spec.input_len),)
    elif spec.kind == "text":
        rows = shipped_prompts()
        order = np.random.default_rng(spec.seed).permutation(len(rows))
        prompts = tuple(Prompt(text=rows[i]["text"], category=rows[i]["category"]) for i in order)
    else:
        prompts = tuple(_read_jsonl(Path(spec.path or "")))
    return Workload(spec=spec, prompts=prompts)
