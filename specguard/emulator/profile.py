"""Emulator profiles: the numbers that make one emulated server fast or slow.

A profile is a TOML file (``specguard/emulator/profiles/<name>.toml`` or any path). Its fields
are documented in ``docs/emulator.md``. Loading validates everything up front so that a typo in
a profile fails at launch, not in the middle of a benchmark.
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PROFILES_DIR = Path(__file__).parent / "profiles"


@dataclass(frozen=True)
class PiecewiseLinear:
    """A cost table ``[[x, ms], ...]``: linear between points, linear extrapolation beyond the ends.

    Costs never go below zero, so extrapolating a table towards ``x = 0`` stays meaningful.
    """

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @classmethod
    def from_pairs(cls, pairs: list[list[float]], what: str) -> PiecewiseLinear:
        if not isinstance(pairs, list) or not pairs:
            raise ValueError(f"{what}: expected a non-empty list of [x, ms] pairs")
        points = []
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError(f"{what}: each entry must be a [x, ms] pair, got {pair!r}")
            x, y = float(pair[0]), float(pair[1])
            if y < 0:
                raise ValueError(f"{what}: negative time {y} at x={x}")
            points.append((x, y))
        points.sort()
        xs = tuple(p[0] for p in points)
        if len(set(xs)) != len(xs):
            raise ValueError(f"{what}: duplicate x values")
        return cls(xs, tuple(p[1] for p in points))

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            return ys[0]
        i = bisect.bisect_right(xs, x)
        i = min(max(i, 1), len(xs) - 1)  # segment [i-1, i]; the end segments extrapolate
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))


@dataclass(frozen=True)
class DraftProfile:
    """Cost and quality of one speculative algorithm's drafter on this model."""

    draft_ms: PiecewiseLinear  # one draft step, by number of running requests
    accept_prob: tuple[float, ...]  # conditional acceptance probability per draft position
    # (steps, topk, draft tokens) when --speculative-num-steps is not given. None (the default, and
    # every shipped profile): SGLang's own choice by architecture. Set: an emulator-only override,
    # e.g. a calibrated profile reproducing a measured server's resolved values.
    default_params: tuple[int, int, int] | None = None
    # Per prompt category (code, math, chat, summarisation, ...): its own conditional acceptance
    # per position; a category not listed uses accept_prob. How the emulator tells a request's
    # category: specguard/emulator/categories.py.
    accept_prob_by_category: dict[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class EmulatorProfile:
    """Everything the performance model needs to know about one (model, hardware) pair."""

    name: str
    description: str
    model_path: str
    context_length: int
    max_running_requests: int  # effective cap without speculation and without --max-running-requests
    forward_ms: PiecewiseLinear  # one target forward pass, by tokens in the batch
    attention_ms_per_ktok: float  # extra per step per 1000 context tokens summed over the batch
    prefill_ms_per_ktok: float  # prefill cost per 1000 uncached prompt tokens
    drafts: dict[str, DraftProfile] = field(default_factory=dict)
    jitter_pct: float = 0.0  # per-step lognormal noise, sd in percent
    drift_pct: float = 0.0  # per-launch lognormal speed offset, sd in percent
    model_type: str = "llama"
    architectures: tuple[str, ...] = ("LlamaForCausalLM",)
    # the model's config.json vocab_size; /generate refuses ids outside it (emulator/vocab.py), and
    # --model-path's own config.json wins when it exists. 32000: a Llama-2-family vocabulary.
    vocab_size: int = 32000
    source: str = ""  # file the profile was loaded from

    @property
    def architecture(self) -> str:
        """``hf_config.architectures[0]``: what SGLang's default speculative parameters depend on."""
        return self.architectures[0]


_TOP_KEYS = {
    "name", "description", "model_path", "context_length", "max_running_requests", "forward_ms",
    "attention_ms_per_ktok", "prefill_ms_per_ktok", "draft", "jitter_pct", "drift_pct",
    "model_type", "architectures", "vocab_size",
}
_DRAFT_KEYS = {"draft_ms", "accept_prob", "default_params", "accept_prob_by_category"}


def available_profiles() -> list[str]:
    """Names of the profiles shipped with specguard."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path) -> EmulatorProfile:
    """Load a shipped profile by name, or a profile file by path, and validate it."""
    path = Path(name_or_path)
    if path.suffix != ".toml" or not path.exists():
        shipped = PROFILES_DIR / f"{name_or_path}.toml"
        if not shipped.exists():
            raise ValueError(
                f"unknown emulator profile {str(name_or_path)!r}: not a file and not one of "
                f"{', '.join(available_profiles())}"
            )
        path = shipped
    with open(path, "rb") as f:
        data = tomllib.load(f)
    try:
        return _profile_from_dict(data, default_name=path.stem, source=str(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _profile_from_dict(data: dict[str, Any], default_name: str, source: str) -> EmulatorProfile:
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    for required in ("model_path", "forward_ms"):
        if required not in data:
            raise ValueError(f"missing required key {required!r}")
    drafts = {}
    for algorithm, section in data.get("draft", {}).items():
        drafts[algorithm.upper()] = _draft_from_dict(section, f"draft.{algorithm}")
    profile = EmulatorProfile(
        name=str(data.get("name", default_name)),
        description=str(data.get("description", "")),
        model_path=str(data["model_path"]),
        context_length=int(data.get("context_length", 32768)),
        max_running_requests=int(data.get("max_running_requests", 1024)),
        forward_ms=PiecewiseLinear.from_pairs(data["forward_ms"], "forward_ms"),
        attention_ms_per_ktok=float(data.get("attention_ms_per_ktok", 0.0)),
        prefill_ms_per_ktok=float(data.get("prefill_ms_per_ktok", 0.0)),
        drafts=drafts,
        jitter_pct=float(data.get("jitter_pct", 0.0)),
        drift_pct=float(data.get("drift_pct", 0.0)),
        model_type=str(data.get("model_type", "llama")),
        architectures=tuple(data.get("architectures", ["LlamaForCausalLM"])),
        vocab_size=int(data.get("vocab_size", 32000)),
        source=source,
    )
    for name in ("attention_ms_per_ktok", "prefill_ms_per_ktok", "jitter_pct", "drift_pct"):
        if getattr(profile, name) < 0:
            raise ValueError(f"{name} must be >= 0")
    if not profile.architectures or not all(isinstance(a, str) and a for a in profile.architectures):
        raise ValueError("architectures must be a non-empty list of names, e.g. [\"LlamaForCausalLM\"]")
    if profile.vocab_size < 2:
        raise ValueError("vocab_size must be >= 2 (the model's config.json vocab_size)")
    if profile.context_length < 2 or profile.max_running_requests < 1:
        raise ValueError("context_length must be >= 2 and max_running_requests >= 1")
    return profile


def _draft_from_dict(section: dict[str, Any], what: str) -> DraftProfile:
    unknown = set(section) - _DRAFT_KEYS
    if unknown:
        raise ValueError(f"{what}: unknown keys {sorted(unknown)}")
    if "draft_ms" not in section or "accept_prob" not in section:
        raise ValueError(f"{what}: needs draft_ms and accept_prob")
    accept_prob = _probabilities(tuple(float(p) for p in section["accept_prob"]), f"{what}.accept_prob")
    by_category = _category_probabilities(section.get("accept_prob_by_category", {}), what)
    params = _default_params(section["default_params"], what) if "default_params" in section else None
    return DraftProfile(
        draft_ms=PiecewiseLinear.from_pairs(section["draft_ms"], f"{what}.draft_ms"),
        accept_prob=accept_prob,
        default_params=params,
        accept_prob_by_category=by_category,
    )


def _probabilities(values: tuple[float, ...], what: str) -> tuple[float, ...]:
    """``values`` when it is one or more probabilities in [0, 1]."""
    if not values or any(not 0.0 <= p <= 1.0 for p in values):
        raise ValueError(f"{what}: need one or more probabilities in [0, 1]")
    return values


def _category_probabilities(table: object, what: str) -> dict[str, tuple[float, ...]]:
    """``accept_prob_by_category``: category -> its conditional acceptance per draft position."""
    if not isinstance(table, dict):
        raise ValueError(f"{what}.accept_prob_by_category: a table of category = [probabilities]")
    by_category = {}
    for category, probs in table.items():
        values = tuple(float(p) for p in probs) if isinstance(probs, list) else ()
        by_category[str(category)] = _probabilities(values, f"{what}.accept_prob_by_category.{category}")
    return by_category


def _default_params(value: Any, what: str) -> tuple[int, int, int]:
    """``default_params``: [num_steps, topk, num_draft_tokens], each >= 1."""
    params = tuple(int(v) for v in value)
    if len(params) != 3 or min(params) < 1:
        raise ValueError(f"{what}.default_params: need [num_steps, topk, num_draft_tokens] >= 1")
    return params
