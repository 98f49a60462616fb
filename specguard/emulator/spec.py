"""Speculative settings as SGLang resolves them, and the acceptance-length arithmetic.

SGLang silently rewrites some speculative settings at launch (see
``/work/shared/reference/sglang-api.md``); the emulator applies the same rewrites here, in one
pure function shared by the HTTP server and the virtual-time simulator, so that both model the
server a configuration *actually* gets.
"""

from __future__ import annotations

from dataclasses import dataclass

from specguard.emulator.profile import DraftProfile, EmulatorProfile, PiecewiseLinear

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# /server_info reports the resolved algorithm: NEXTN (MTP heads) runs as EAGLE.
REPORTED_ALGORITHM = {"NEXTN": "EAGLE"}
# Profile sections tried, in order, for each algorithm.
_DRAFT_LOOKUP = {
    "EAGLE": ("EAGLE", "NEXTN"),
    "NEXTN": ("NEXTN", "EAGLE"),
    "EAGLE3": ("EAGLE3", "EAGLE"),
    "STANDALONE": ("STANDALONE",),
    "NGRAM": ("NGRAM",),
}
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48


@dataclass(frozen=True)
class SpecRequest:
    """Speculative flags as given on the command line (None = not given)."""

    algorithm: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None


@dataclass(frozen=True)
class SpecConfig:
    """Effective speculative decoding of one server, after SGLang's adjustments."""

    algorithm: str  # as launched, e.g. NEXTN
    num_steps: int
    topk: int
    num_draft_tokens: int
    accept_prob: tuple[float, ...]  # conditional acceptance per draft position, num_steps entries
    draft_ms: PiecewiseLinear

    @property
    def reported_algorithm(self) -> str:
        return REPORTED_ALGORITHM.get(self.algorithm, self.algorithm)

    @property
    def expected_accept_length(self) -> float:
        return expected_accept_length(self.accept_prob, self.num_steps)


@dataclass(frozen=True)
class ServingSettings:
    """What the emulated server runs with, and the warnings SGLang would log about it."""

    spec: SpecConfig | None
    max_running_requests: int  # effective cap on running requests
    reported_max_running_requests: int | None  # top-level /server_info value (None = auto)
    warnings: tuple[str, ...] = ()


def positional_probs(accept_prob: tuple[float, ...] | list[float], num_steps: int) -> tuple[float, ...]:
    """Per-position probabilities for ``num_steps`` positions; a short list repeats its last value."""
    probs = list(accept_prob[:num_steps])
    probs += [probs[-1]] * (num_steps - len(probs))
    return tuple(probs)


def expected_accept_length(accept_prob: tuple[float, ...] | list[float], num_steps: int) -> float:
    """Mean tokens per verify step: 1 bonus token plus the expected run of accepted drafts.

    Position j is reached only if positions 1..j-1 were accepted, so
    E = 1 + sum_j prod_{i<=j} p_i.
    """
    total, survive = 1.0, 1.0
    for p in positional_probs(accept_prob, num_steps):
        survive *= p
        total += survive
    return total


def uniform_accept_prob(accept_length: float, num_steps: int) -> float:
    """The per-position probability p with 1 + p + p^2 + ... + p^num_steps = accept_length.

    Used to force a mean accept length (``--emulator-accept-length``, ``SGLANG_SIMULATE_ACC_LEN``).
    Values outside [1, num_steps + 1] are clamped to the nearest reachable length.
    """
    if accept_length <= 1.0:
        return 0.0
    if accept_length >= num_steps + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: the left side is increasing in p
        mid = (lo + hi) / 2
        if expected_accept_length((mid,), num_steps) < accept_length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def resolve_settings(
    profile: EmulatorProfile,
    requested: SpecRequest | None = None,
    max_running_requests: int | None = None,
    accept_length: float | None = None,
) -> ServingSettings:
    """Apply SGLang 0.5.23's launch-time rewrites of speculative settings.

    - any speculative algorithm without ``--max-running-requests`` caps running requests at 48;
    - num_steps unset: topk and draft tokens must be unset too, and the defaults are used
      (the profile's ``default_params``, normally SGLang's (3, 1, 4));
    - topk == 1 forces num_draft_tokens = num_steps + 1.
    ``accept_length`` replaces the profile's acceptance model by a uniform one with that mean.
    Raises ValueError where SGLang refuses to start.
    """
    warnings: list[str] = []
    if requested is None or requested.algorithm is None:
        cap = max_running_requests or profile.max_running_requests
        return ServingSettings(None, cap, max_running_requests)

    algorithm = requested.algorithm.upper()
    if algorithm not in SPEC_ALGORITHMS:
        raise ValueError(f"unknown speculative algorithm {requested.algorithm!r}")
    draft = _find_draft(profile, algorithm)

    if max_running_requests is None:
        max_running_requests = SPEC_DEFAULT_MAX_RUNNING_REQUESTS
        warnings.append(
            f"Max running requests is reset to {SPEC_DEFAULT_MAX_RUNNING_REQUESTS} for speculative "
            "decoding. You can override this by explicitly setting --max-running-requests."
        )

    steps, topk, draft_tokens = requested.num_steps, requested.topk, requested.num_draft_tokens
    if steps is None:
        if topk is not None or draft_tokens is not None:
            raise ValueError(
                "--speculative-eagle-topk and --speculative-num-draft-tokens need "
                "--speculative-num-steps (SGLang asserts this at startup)"
            )
        steps, topk, draft_tokens = draft.default_params
        warnings.append(
            "Auto choose speculative_num_steps, speculative_eagle_topk, "
            f"speculative_num_draft_tokens = ({steps}, {topk}, {draft_tokens})"
        )
    topk = 1 if topk is None else topk
    if topk == 1 and draft_tokens != steps + 1:
        if draft_tokens is not None:
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                f"speculative_eagle_topk == 1 (asked for {draft_tokens}, using {steps + 1})"
            )
        draft_tokens = steps + 1
    if draft_tokens is None:
        raise ValueError("--speculative-num-draft-tokens is required when --speculative-eagle-topk > 1")
    if min(steps, topk, draft_tokens) < 1:
        raise ValueError("speculative num_steps, topk and num_draft_tokens must be >= 1")

    if accept_length is not None:
        reachable = min(max(accept_length, 1.0), steps + 1.0)
        if reachable != accept_length:
            warnings.append(f"accept length {accept_length} clamped to {reachable} (num_steps {steps})")
        probs = (uniform_accept_prob(reachable, steps),) * steps
    else:
        probs = positional_probs(draft.accept_prob, steps)

    spec = SpecConfig(algorithm, steps, topk, draft_tokens, probs, draft.draft_ms)
    return ServingSettings(spec, max_running_requests, max_running_requests, tuple(warnings))


def _find_draft(profile: EmulatorProfile, algorithm: str) -> DraftProfile:
    for key in _DRAFT_LOOKUP[algorithm]:
        if key in profile.drafts:
            return profile.drafts[key]
    raise ValueError(
        f"profile {profile.name!r} has no [draft.{algorithm}] section "
        f"(it has: {', '.join(sorted(profile.drafts)) or 'none'})"
    )
