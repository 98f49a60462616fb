"""Speculative settings as SGLang 0.5.23 resolves them, and the acceptance-length arithmetic.

SGLang rewrites speculative settings at launch (``srt/arg_groups/speculative_hook.py``:
``handle_speculative_decoding``, ``_handle_eagle_family``, ``_handle_ngram``, ``_handle_dflash``,
``_auto_choose_speculative_params``, ``_maybe_disable_adaptive``,
``_init_adaptive_speculative_params``); the emulator applies the same rewrites here, in one pure
function shared by the HTTP server and the virtual-time simulator, so that both model the server
a configuration *actually* gets. The version's defaults and tables are specguard/sglang_rules/
(shared with the engine adapter's checks); facts and line numbers: docs/research/sglang-0.5.23-facts.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specguard.emulator.adaptive import AdaptiveSettings
from specguard.emulator.profile import DraftProfile, EmulatorProfile, PiecewiseLinear
from specguard.sglang_rules import SGLANG_VERSION
from specguard.sglang_rules.adaptive import (
    candidate_union,
    disabled_warning,
    initial_num_steps,
    load_adaptive_config,
    unsupported_reason,
)
from specguard.sglang_rules.speculative import (
    ALGORITHMS,
    CAP_RESET_WARNING,
    DEFAULT_CAP,
    DFLASH_DEFAULT_BLOCK_SIZE,
    EAGLE_FAMILY,
    NGRAM_DEFAULT_BFS_BREADTH,
    NGRAM_DEFAULT_DRAFT_TOKENS,
    auto_params,
    default_cap_applies,
    resolved_algorithm,
)

# Profile sections tried, in order, for each algorithm.
_DRAFT_LOOKUP = {
    "EAGLE": ("EAGLE", "NEXTN"),
    "NEXTN": ("NEXTN", "EAGLE"),
    "EAGLE3": ("EAGLE3", "EAGLE"),
}
# (num_steps, eagle_topk, num_draft_tokens) as given on the command line (None = not given) ...
GivenParams = tuple[int | None, int | None, int | None]
# ... and as a handler has resolved them.
SpecParams = tuple[int, int, int]


@dataclass(frozen=True)
class SpecRequest:
    """Speculative flags as given on the command line (None = not given)."""

    algorithm: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    adaptive: bool = False  # --speculative-adaptive
    adaptive_config: str | None = None  # --speculative-adaptive-config (a JSON file path)
    ngram_max_bfs_breadth: int = NGRAM_DEFAULT_BFS_BREADTH
    draft_model_path: str | None = None


@dataclass(frozen=True)
class SpecConfig:
    """Effective speculative decoding of one server, after SGLang's adjustments."""

    algorithm: str  # as launched, e.g. NEXTN
    num_steps: int  # at start-up (adaptive moves it at run time)
    topk: int
    num_draft_tokens: int
    accept_prob: tuple[float, ...]  # conditional acceptance per draft position (max positions entries)
    draft_ms: PiecewiseLinear
    # Draft positions a verify can accept at ``num_steps``: num_steps for the EAGLE chain,
    # num_draft_tokens - 1 for NGRAM and DFLASH (one proposal of the whole window).
    chain: bool = True
    # ((category, accept_prob), ...): per-category acceptance, same length as accept_prob
    accept_prob_by_category: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @property
    def reported_algorithm(self) -> str:
        return resolved_algorithm(self.algorithm) or self.algorithm

    def positions(self, num_steps: int) -> int:
        """Draft tokens a verify at ``num_steps`` can accept."""
        return num_steps if self.chain else self.num_draft_tokens - 1

    def draft_passes(self, num_steps: int) -> int:
        """Draft forward passes per decode step (each costs ``draft_ms``)."""
        return num_steps if self.chain else 1

    @property
    def expected_accept_length(self) -> float:
        return expected_accept_length(self.accept_prob, self.positions(self.num_steps))


@dataclass(frozen=True)
class ServingSettings:
    """What the emulated server runs with, and the warnings SGLang would log about it."""

    spec: SpecConfig | None
    max_running_requests: int  # effective cap on running requests, summed over DP ranks
    reported_max_running_requests: int | None  # top-level /server_info value (None = auto)
    warnings: tuple[str, ...] = ()
    dp_size: int = 1  # replicas
    attn_dp_size: int = 1  # attention data parallelism
    per_rank_max_running_requests: int | None = None  # effective_max_running_requests_per_dp
    adaptive: AdaptiveSettings | None = None  # None: static steps
    adaptive_requested: bool = False  # --speculative-adaptive was given

    @property
    def ranks(self) -> int:
        return self.dp_size * self.attn_dp_size

    @property
    def rank_cap(self) -> int:
        return self.per_rank_max_running_requests or self.max_running_requests


def positional_probs(accept_prob: tuple[float, ...] | list[float], num_steps: int) -> tuple[float, ...]:
    """Per-position probabilities for ``num_steps`` positions; a short list repeats its last value."""
    if num_steps <= 0:
        return ()
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
    if accept_length <= 1.0 or num_steps <= 0:
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
    *,
    dp_size: int = 1,
    attn_dp_size: int = 1,
) -> ServingSettings:
    """Apply SGLang 0.5.23's launch-time rewrites of speculative and DP settings.

    Raises ValueError where SGLang refuses to start (the message says which flag).
    ``accept_length`` replaces the profile's acceptance model by a uniform one with that mean.
    """
    _check_parallelism(dp_size, attn_dp_size)
    warnings: list[str] = []
    adaptive_requested = bool(requested and requested.adaptive)
    if requested is None or requested.algorithm is None:
        if adaptive_requested:
            warnings.append(disabled_warning(unsupported_reason(None, None, attn_dp_size > 1) or ""))
        return _with_ranks(ServingSettings(None, 0, max_running_requests, tuple(warnings), dp_size, attn_dp_size,
                                           adaptive_requested=adaptive_requested), profile)

    launched = requested.algorithm.upper()
    if launched not in ALGORITHMS:
        raise ValueError(f"Unknown speculative algorithm name: {requested.algorithm}")
    algorithm = resolved_algorithm(launched) or launched
    given = (requested.num_steps, requested.topk, requested.num_draft_tokens)

    # handle_speculative_decoding: adaptive is checked, then initialised, before the per-algorithm handler.
    adaptive, given = _init_adaptive(requested, algorithm, given, attn_dp_size > 1, warnings)

    if default_cap_applies(launched) and max_running_requests is None:
        max_running_requests = DEFAULT_CAP
        warnings.append(CAP_RESET_WARNING)

    draft, (steps, topk, draft_tokens), chain = _handle_algorithm(
        profile, requested, given, attn_dp_size, adaptive is not None, warnings)

    positions = steps if chain else draft_tokens - 1
    max_positions = max(adaptive.candidates) if adaptive is not None else positions
    probs, by_category = _acceptance(draft, positions, max_positions, accept_length, warnings)
    spec = SpecConfig(launched, steps, topk, draft_tokens, probs, draft.draft_ms, chain, by_category)
    return _with_ranks(ServingSettings(spec, 0, max_running_requests, tuple(warnings), dp_size, attn_dp_size,
                                       adaptive=adaptive, adaptive_requested=adaptive_requested), profile)


def _check_parallelism(dp_size: int, attn_dp_size: int) -> None:
    """Sizes SGLang refuses: below 1, or replicas combined with attention DP (parallel_hook.py:287)."""
    if dp_size < 1:
        raise ValueError(f"--dp-size must be positive (got {dp_size}).")
    if attn_dp_size < 1:
        raise ValueError(f"--attn-dp-size must be positive (got {attn_dp_size}).")
    if dp_size > 1 and attn_dp_size > 1:
        raise ValueError(
            f"--dp-size {dp_size} with --attn-dp-size {attn_dp_size}: data-parallel replicas combined with "
            "attention data parallelism are not supported."
        )


def _init_adaptive(
    requested: SpecRequest, algorithm: str, given: GivenParams, attn_dp: bool, warnings: list[str],
) -> tuple[AdaptiveSettings | None, GivenParams]:
    """``_maybe_disable_adaptive``, then ``_init_adaptive_speculative_params``: adaptive settings (None:
    static steps, with SGLang's warning when it was asked for) and the params they fix: topk unset
    becomes 1, steps the middle candidate unless given, draft tokens steps + 1."""
    if not requested.adaptive:
        return None, given
    steps, topk, _ = given
    reason = unsupported_reason(algorithm, topk, attn_dp)
    if reason is not None:
        warnings.append(disabled_warning(reason))
        return None, given
    config, entries = load_adaptive_config(requested.adaptive_config)
    candidates = candidate_union(entries)
    topk = 1 if topk is None else topk
    steps = initial_num_steps(candidates, steps)
    adaptive = AdaptiveSettings(requested.adaptive_config, config, entries, candidates, steps)
    return adaptive, (steps, topk, steps + 1)


def _handle_algorithm(
    profile: EmulatorProfile, requested: SpecRequest, given: GivenParams, attn_dp_size: int, adaptive: bool,
    warnings: list[str],
) -> tuple[DraftProfile, SpecParams, bool]:
    """The per-algorithm handler of ``handle_speculative_decoding``, then the emulator's own checks:
    (the drafter's profile section, (steps, topk, draft tokens), whether drafts chain).

    Drafts chain (a verify accepts up to ``num_steps``) for the EAGLE family and the explicit-only
    algorithms; NGRAM and DFLASH propose one window (up to ``num_draft_tokens - 1``).
    """
    launched = (requested.algorithm or "").upper()
    algorithm = resolved_algorithm(launched) or launched
    if algorithm in EAGLE_FAMILY:
        draft, params = _handle_eagle_family(profile, launched, given, attn_dp_size, warnings)
        _check_params(params, min_steps=0 if adaptive else 1)
        return draft, params, True
    if algorithm == "NGRAM":
        params, chain = _handle_ngram(given, requested.ngram_max_bfs_breadth, attn_dp_size, warnings), False
    elif algorithm == "DFLASH":
        params, chain = _handle_dflash(given, requested.draft_model_path, warnings), False
    else:  # DSPARK, FROZEN_KV_MTP, UNO: modelled as given, without SGLang's per-algorithm defaults
        params, chain = _explicit_params(algorithm, given), True
    _check_params(params, min_steps=0 if adaptive or not chain else 1)
    return _find_draft(profile, launched), params, chain


def _handle_eagle_family(
    profile: EmulatorProfile, launched: str, given: GivenParams, attn_dp_size: int, warnings: list[str],
) -> tuple[DraftProfile, SpecParams]:
    """``_handle_eagle_family`` (EAGLE, EAGLE3, NEXTN, STANDALONE): the drafter's section, and the
    params: ``_auto_choose_speculative_params`` when steps are not given, the topk == 1 rewrite."""
    algorithm = resolved_algorithm(launched) or launched
    if algorithm == "STANDALONE" and attn_dp_size > 1:
        raise ValueError("Currently standalone speculative decoding does not support dp attention.")
    draft = _find_draft(profile, launched)
    steps, topk, draft_tokens = given
    if steps is None:  # never under adaptive, which has set steps (_init_adaptive)
        if topk is not None or draft_tokens is not None:
            # A bare `assert` in _handle_eagle_family: SGLang exits with an empty AssertionError.
            raise ValueError(
                "--speculative-eagle-topk and --speculative-num-draft-tokens need --speculative-num-steps "
                f"(SGLang {SGLANG_VERSION} fails an assert in _handle_eagle_family)"
            )
        steps, topk, draft_tokens = draft.default_params or auto_params(algorithm, profile.architecture)
        warnings.append(
            "Auto choose speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens = "
            f"({steps}, {topk}, {draft_tokens}) for {profile.architecture}"
        )
    if topk is None:
        raise ValueError(
            f"--speculative-num-steps without --speculative-eagle-topk: SGLang {SGLANG_VERSION} crashes at start-up "
            "(TypeError comparing speculative_eagle_topk None > 1 in _handle_eagle_family); pass "
            "--speculative-eagle-topk"
        )
    if topk == 1 and draft_tokens != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        draft_tokens = steps + 1
    if draft_tokens is None:
        raise ValueError("--speculative-num-draft-tokens is required when --speculative-eagle-topk > 1")
    return draft, (steps, topk, draft_tokens)


def _handle_ngram(given: GivenParams, max_bfs_breadth: int, attn_dp_size: int, warnings: list[str]) -> SpecParams:
    """``_handle_ngram``: topk is the BFS breadth, draft tokens default to 12, steps to draft // topk."""
    if attn_dp_size > 1:
        raise ValueError("Currently ngram speculative decoding does not support dp attention.")
    steps, _, draft_tokens = given
    topk = max_bfs_breadth  # always: a given --speculative-eagle-topk is ignored
    if draft_tokens is None:
        draft_tokens = NGRAM_DEFAULT_DRAFT_TOKENS
        warnings.append(
            "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. You can "
            "override this by explicitly setting --speculative-num-draft-tokens."
        )
    if steps is None:
        if topk < 1:
            raise ValueError(f"--speculative-ngram-max-bfs-breadth must be >= 1, got {topk}")
        steps = draft_tokens // topk
    warnings.append("The mixed chunked prefill are disabled because of using ngram speculative decoding.")
    return steps, topk, draft_tokens


def _handle_dflash(given: GivenParams, draft_model_path: str | None, warnings: list[str]) -> SpecParams:
    """``_handle_dflash``: needs a draft model; steps and topk forced to 1; the block defaults to 16."""
    if draft_model_path is None:
        raise ValueError("DFLASH speculative decoding requires setting --speculative-draft-model-path.")
    steps, topk, draft_tokens = given
    if steps is not None and steps != 1:
        warnings.append(
            f"DFLASH only supports speculative_num_steps == 1; overriding speculative_num_steps={steps} to 1."
        )
    if topk is not None and topk != 1:
        warnings.append(
            f"DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk={topk} to 1."
        )
    if draft_tokens is None:
        draft_tokens = DFLASH_DEFAULT_BLOCK_SIZE
        warnings.append("speculative_num_draft_tokens is not set; defaulting to 16 for DFLASH.")
    return 1, 1, draft_tokens


def _explicit_params(algorithm: str, given: GivenParams) -> SpecParams:
    """DSPARK, FROZEN_KV_MTP, UNO: modelled only with all three values given (no SGLang defaults)."""
    steps, topk, draft_tokens = given
    if steps is None or topk is None or draft_tokens is None:
        raise ValueError(
            f"the emulator models {algorithm} only with --speculative-num-steps, --speculative-eagle-topk and "
            "--speculative-num-draft-tokens given"
        )
    return steps, topk, draft_tokens


def _check_params(params: SpecParams, min_steps: int) -> None:
    """The emulator's floor: steps >= min_steps (0 under adaptive or for a window drafter), topk and
    draft tokens >= 1."""
    steps, topk, draft_tokens = params
    if steps < min_steps or min(topk, draft_tokens) < 1:
        raise ValueError("speculative num_steps, topk and num_draft_tokens must be >= 1")


def _acceptance(
    draft: DraftProfile, positions: int, max_positions: int, accept_length: float | None, warnings: list[str],
) -> tuple[tuple[float, ...], tuple[tuple[str, tuple[float, ...]], ...]]:
    """Conditional acceptance per draft position (``max_positions`` of them) and per category: the
    profile's, or one uniform p giving the forced mean ``accept_length`` over ``positions``."""
    if accept_length is not None:
        reachable = min(max(accept_length, 1.0), positions + 1.0)
        if reachable != accept_length:
            warnings.append(f"accept length {accept_length} clamped to {reachable} ({positions} draft positions)")
        return (uniform_accept_prob(reachable, positions),) * max_positions, ()
    probs = positional_probs(draft.accept_prob, max_positions)
    # Per category: the profile's own table (ignored when a mean accept length is forced).
    by_category = tuple((c, positional_probs(p, max_positions)) for c, p in sorted(draft.accept_prob_by_category.items()))
    return probs, by_category


def _with_ranks(settings: ServingSettings, profile: EmulatorProfile) -> ServingSettings:
    """``settings`` with its effective caps. Per-rank cap as ``KVCacheConfigurator.resolve_max_num_reqs``:
    an explicit (or 48) cap (``reported_max_running_requests``) is split over attention-DP ranks,
    max(1, cap // attn_dp_size); replicas each get the whole value."""
    cap = settings.reported_max_running_requests
    per_rank = max(1, cap // settings.attn_dp_size) if cap is not None else profile.max_running_requests
    return replace(settings, max_running_requests=per_rank * settings.ranks, per_rank_max_running_requests=per_rank)


def _find_draft(profile: EmulatorProfile, algorithm: str) -> DraftProfile:
    for key in _DRAFT_LOOKUP.get(algorithm, (algorithm,)):
        if key in profile.drafts:
            return profile.drafts[key]
    raise ValueError(
        f"profile {profile.name!r} has no [draft.{algorithm}] section "
        f"(it has: {', '.join(sorted(profile.drafts)) or 'none'}); SGLang accepts {algorithm} but the emulator "
        "needs the drafter's cost and acceptance to model it"
    )
