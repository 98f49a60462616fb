"""The settings `specguard tune` tries, and what one measured setting predicts about the others.

A setting is one way to launch the speculative configuration: fixed steps (topk 1, steps + 1
draft tokens), a tree (topk > 1) where the algorithm has one, the non-speculative reference, or
SGLang's adaptive mode with a config. Prediction: the per-position acceptance of the longest
chain measured (spec_correct_drafts_histogram) gives the accept length of every shorter chain
exactly; the time per verify step between two measured step counts is interpolated linearly,
which over-estimates tok/s where cost is concave in draft tokens, so "hopeless even so" is safe.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from specguard.config import ServerConfig
from specguard.measure.metrics import acceptance_by_position
from specguard.sglang_rules.adaptive import ADAPTIVE_ALGORITHMS
from specguard.sglang_rules.speculative import EAGLE_FAMILY, resolved_algorithm

DEFAULT_STEPS = (1, 2, 3, 4, 5, 6, 7)  # SGLang's default adaptive table reaches 7
DEFAULT_TREE_TOPK = (4,)  # one tree per topk, at the configuration's steps (SGLang's Llama default is topk 4)

REFERENCE, FIXED, ADAPTIVE, LAUNCHED = "reference", "fixed", "adaptive", "launched"


class TuneError(ValueError):
    """A tuning request that cannot run; the message names the flag or suite key."""


class SettingJson(TypedDict):
    """A setting as tune.json records it."""

    name: str
    kind: str
    num_steps: int
    eagle_topk: int | None
    num_draft_tokens: int


@dataclass(frozen=True)
class Setting:
    """One launch variant of the speculative configuration."""

    kind: str  # REFERENCE, FIXED, ADAPTIVE or LAUNCHED
    num_steps: int = 0
    eagle_topk: int | None = 1
    num_draft_tokens: int = 1
    chain: bool = True  # topk 1 chain: acceptance predicts it (NGRAM and trees are not chains)
    adaptive_config: str | None = None  # ADAPTIVE: "default" (SGLang's table) or "tuned"

    @property
    def name(self) -> str:
        if self.kind == REFERENCE:
            return "reference"
        if self.kind == ADAPTIVE:
            return f"adaptive-{self.adaptive_config}"
        if self.kind == LAUNCHED:
            return "launched"
        if self.chain and self.eagle_topk == 1:
            return f"steps{self.num_steps}"
        return f"steps{self.num_steps}-topk{self.eagle_topk}-draft{self.num_draft_tokens}"

    @property
    def adaptive_key(self) -> str:
        """ADAPTIVE: the config it runs, "default" or "tuned" (a key of the runners' adaptive_paths)."""
        if self.adaptive_config is None:
            raise TuneError(f"setting {self.name}: an adaptive setting names its config (default or tuned)")
        return self.adaptive_config

    @property
    def weight(self) -> tuple[int, int]:
        """Lighter first: fewer tokens verified per request, then fewer draft passes."""
        return (self.num_draft_tokens, self.num_steps)

    @property
    def adaptive_expressible(self) -> bool:
        """Can a slot of SGLang's adaptive table run it? (steps 0 = the reference; topk 1 chains)."""
        return self.kind == REFERENCE or (self.kind == FIXED and self.chain and self.eagle_topk == 1)

    def to_json(self) -> SettingJson:
        return {"name": self.name, "kind": self.kind, "num_steps": self.num_steps, "eagle_topk": self.eagle_topk,
                "num_draft_tokens": self.num_draft_tokens}


def algorithm_of(cfg: ServerConfig) -> str:
    if cfg.speculative_algorithm:
        return cfg.speculative_algorithm.upper()
    if cfg.speculative_config:
        return str(cfg.speculative_config.get("method", "")).upper()
    return ""


def adaptive_capable(cfg: ServerConfig) -> bool:
    """Can SGLang run `cfg` in adaptive mode (EAGLE/EAGLE3, NEXTN as EAGLE; vLLM has no such mode)?"""
    return cfg.engine != "vllm" and resolved_algorithm(algorithm_of(cfg)) in ADAPTIVE_ALGORITHMS


def build_grid(cfg: ServerConfig, steps: Sequence[int] = DEFAULT_STEPS,
               tree_topk: Sequence[int] = DEFAULT_TREE_TOPK) -> list[Setting]:
    """Fixed settings of `cfg` to try: every step count, plus trees where the algorithm has them."""
    if not cfg.speculative:
        raise TuneError(f"configuration {cfg.name!r} is not speculative; pass --config with a speculative one")
    if not steps or any(s < 1 for s in steps):
        raise TuneError(f"--steps {list(steps)}: need positive step counts, e.g. 1,2,3,5,7")
    algo = algorithm_of(cfg)
    steps = sorted(set(steps))
    if cfg.engine == "vllm":  # num_speculative_tokens; vLLM has no tree here
        return [Setting(FIXED, s, 1, s + 1) for s in steps]
    if algo == "NGRAM":  # one proposal of num_draft_tokens - 1 positions: not a chain
        return [Setting(FIXED, s, None, s + 1, chain=False) for s in steps]
    grid = [Setting(FIXED, s, 1, s + 1) for s in steps]
    if algo in EAGLE_FAMILY:  # topk and a tree are allowed
        tree_steps = cfg.num_steps if cfg.eagle_topk and cfg.eagle_topk > 1 and cfg.num_steps else 3
        for k in sorted(set(tree_topk)):
            if k <= 1:
                continue
            own = cfg.num_draft_tokens if cfg.eagle_topk == k else None  # the configuration's own tree
            draft = own if own else min(tree_steps * k, 2 * (tree_steps + 1))
            grid.append(Setting(FIXED, tree_steps, k, draft, chain=False))
    return grid


def server_config_for(cfg: ServerConfig, setting: Setting, *, cap: int | None, extra_args: Sequence[str] = ()) -> ServerConfig:
    """The suite configuration rewritten to launch `setting` (the reference is its own configuration)."""
    name = f"{cfg.name}-{setting.name}"
    if setting.kind == LAUNCHED:
        return dataclasses.replace(cfg, name=name)
    if cfg.engine == "vllm":
        spec = {**(cfg.speculative_config or {}), "num_speculative_tokens": setting.num_steps}
        return dataclasses.replace(cfg, name=name, speculative_config=spec, max_running_requests=cap)
    args = [*cfg.args, *extra_args]
    if setting.kind == ADAPTIVE:
        return dataclasses.replace(cfg, name=name, num_steps=setting.num_steps or None,
                                   eagle_topk=1 if setting.num_steps else None,
                                   num_draft_tokens=setting.num_steps + 1 if setting.num_steps else None,
                                   max_running_requests=cap, args=args)
    return dataclasses.replace(cfg, name=name, num_steps=setting.num_steps, eagle_topk=setting.eagle_topk,
                               num_draft_tokens=setting.num_draft_tokens, max_running_requests=cap, args=args)


# -- prediction ------------------------------------------------------------------------------------
def predicted_accept_length(at_least: Sequence[float], steps: int) -> float | None:
    """1 + P(>=1) + ... + P(>=steps); None when the histogram does not reach `steps` positions."""
    if steps > len(at_least):
        return None
    return 1.0 + float(sum(at_least[:steps]))


def acceptance_from_histogram(histogram: Sequence[int]) -> list[float]:
    return acceptance_by_position(histogram)


def predict_tok_s(measured: dict[int, tuple[float, float]], steps: int, accept_length: float) -> float | None:
    """tok/s at `steps` from measured {steps: (tok/s, accept length)} at one concurrency.

    tok/s = accept length / u, u = time per verify step and per stream (up to a constant); u is
    interpolated linearly in steps between the nearest measured step counts (a chord: cost is
    concave in draft tokens, so this errs towards more tok/s). None outside the measured range.
    """
    pts = sorted((s, a / t) for s, (t, a) in measured.items() if t > 0 and a > 0)
    below = [p for p in pts if p[0] <= steps]
    above = [p for p in pts if p[0] >= steps]
    if not below or not above:
        return None
    (s0, u0), (s1, u1) = below[-1], above[0]
    u = u0 if s1 == s0 else u0 + (u1 - u0) * (steps - s0) / (s1 - s0)
    return accept_length / u if u > 0 else None


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))
