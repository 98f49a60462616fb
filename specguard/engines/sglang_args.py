"""The checks of a server's effective arguments against a configuration, by SGLang 0.5.23's
argument rules (specguard/sglang_rules/: the defaults it picks, the rewrites it makes silently,
when it turns adaptive speculation off; docs/research/sglang-0.5.23-facts.md has the detail).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import Any

from specguard.config import ServerConfig
from specguard.engines.base import ArgCheck, EffectiveArgs
from specguard.notes import Note, NoteKind, RewriteCause
from specguard.sglang_rules import adaptive
from specguard.sglang_rules.speculative import (
    DEFAULT_CAP,
    EAGLE_FAMILY,
    auto_params,
    default_cap_applies,
    ngram_params,
    resolved_algorithm,
)

MODELLED_ALGORITHMS = (*EAGLE_FAMILY, "NGRAM")  # the algorithms whose argument rules specguard checks


def json_int(v: Any) -> int | None:
    """An int from JSON (never a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def flag_value(launch_command: str, flag: str) -> str | None:
    """A flag's value as typed on the server's command line (its `launch_command`)."""
    try:
        argv = shlex.split(launch_command)
    except ValueError:
        return None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def launched_algorithm(launch_command: str) -> str | None:
    """The algorithm as typed on the command line (so NEXTN is told apart from EAGLE)."""
    value = flag_value(launch_command, "--speculative-algorithm")
    return value.upper() if value else None


def has_flag(launch_command: str, flag: str) -> bool:
    """A boolean flag typed on the server's command line."""
    try:
        return flag in shlex.split(launch_command)
    except ValueError:
        return False


def adaptive_unsupported_reason(algorithm: str | None, asked_topk: int | None, eff: EffectiveArgs) -> str | None:
    """Why SGLang turns --speculative-adaptive off (sglang_rules.adaptive.unsupported_reason), as
    far as /server_info tells."""
    return adaptive.unsupported_reason(resolved_algorithm(algorithm), asked_topk, (eff.attn_dp_size or 1) > 1,
                                       multi_layer_eagle=eff.raw.get("enable_multi_layer_eagle") is True,
                                       two_batch_overlap=eff.raw.get("enable_two_batch_overlap") is True,
                                       pdmux=eff.raw.get("enable_pdmux") is True)


def _asked(cfg_value: int | None, launch_command: str, flag: str) -> int | None:
    """What was asked: the configuration's value, else what the server's command line says."""
    if cfg_value is not None:
        return cfg_value
    value = flag_value(launch_command, flag)
    return int(value) if value is not None and value.isdigit() else None


@dataclass(frozen=True)
class AskedSpeculation:
    """Steps, topk and draft tokens as asked: the configuration's value, else the server's command line."""

    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None

    @classmethod
    def of(cls, cfg: ServerConfig, launch_command: str) -> AskedSpeculation:
        return cls(_asked(cfg.num_steps, launch_command, "--speculative-num-steps"),
                   _asked(cfg.eagle_topk, launch_command, "--speculative-eagle-topk"),
                   _asked(cfg.num_draft_tokens, launch_command, "--speculative-num-draft-tokens"))


def _known(v: int | None) -> int | str:
    """A server figure for a note: "unknown" where /server_info did not say."""
    return "unknown" if v is None else v


def _rewritten(setting: str, asked: int, runs: int, cause: RewriteCause = RewriteCause.UNSAID) -> ArgCheck:
    """A value asked for that the server runs differently: a silent rewrite, blocking."""
    return ArgCheck(Note.of(NoteKind.ARG_REWRITTEN, setting=setting, asked=asked, runs=runs, cause=cause), True)


def _ngram_checks(asked: AskedSpeculation, eff: EffectiveArgs) -> list[ArgCheck]:
    """NGRAM's topk is its BFS breadth whatever topk was asked; its defaults are said, not blocked."""
    checks: list[ArgCheck] = []
    breadth = json_int(eff.raw.get("speculative_ngram_max_bfs_breadth"))
    steps, topk, draft = ngram_params(asked.num_steps, asked.num_draft_tokens, breadth)
    if asked.eagle_topk is not None and eff.eagle_topk is not None and asked.eagle_topk != eff.eagle_topk:
        checks.append(_rewritten("eagle_topk", asked.eagle_topk, eff.eagle_topk, RewriteCause.NGRAM_BREADTH))
    if asked.num_steps is None or asked.num_draft_tokens is None:
        checks.append(ArgCheck(Note.of(NoteKind.NGRAM_DEFAULTS, steps=_known(eff.num_steps), topk=_known(eff.eagle_topk),
                                       draft=_known(eff.num_draft_tokens), expected=f"{steps}/{topk}/{draft}"), False))
    return checks


def _adaptive_draft_checks(asked: AskedSpeculation, eff: EffectiveArgs) -> list[ArgCheck]:
    """Adaptive speculation runs num_steps + 1 draft tokens whatever was asked."""
    if asked.num_draft_tokens is not None and eff.num_draft_tokens is not None and asked.num_draft_tokens != eff.num_draft_tokens:
        return [_rewritten("num_draft_tokens", asked.num_draft_tokens, eff.num_draft_tokens, RewriteCause.ADAPTIVE)]
    return []


def _default_steps_note(eff: EffectiveArgs) -> ArgCheck:
    """The steps/topk/draft tokens a server chose itself, against 0.5.23's table for its architecture."""
    expected = auto_params(eff.speculative_algorithm, eff.architecture)
    chosen = (eff.num_steps, eff.eagle_topk, eff.num_draft_tokens)
    table = "" if chosen == expected or eff.architecture is None else "/".join(str(v) for v in expected)
    return ArgCheck(Note.of(NoteKind.DEFAULT_STEPS, steps=_known(chosen[0]), topk=_known(chosen[1]),
                            draft=_known(chosen[2]), architecture=eff.architecture or "", table=table), False)


def _rewrite_checks(asked: AskedSpeculation, eff: EffectiveArgs, ngram: bool) -> list[ArgCheck]:
    """Each asked value the server runs differently: a silent rewrite, blocking."""
    checks: list[ArgCheck] = []
    want_draft, draft = asked.num_draft_tokens, eff.num_draft_tokens
    if want_draft is not None and draft is not None and draft != want_draft:
        topk1 = not ngram and eff.eagle_topk == 1 and eff.num_steps is not None and draft == eff.num_steps + 1
        checks.append(_rewritten("num_draft_tokens", want_draft, draft, RewriteCause.TOPK1 if topk1 else RewriteCause.UNSAID))
    for label, want, runs in (("num_steps", asked.num_steps, eff.num_steps), ("eagle_topk", asked.eagle_topk, eff.eagle_topk)):
        if want is not None and runs is not None and want != runs:
            checks.append(_rewritten(label, want, runs))
    return checks


def _per_rank_cap_checks(eff: EffectiveArgs, asked_cap: int | None) -> list[ArgCheck]:
    """Ranks whose request caps differ, or fall below the total's share (KV capacity limits them)."""
    checks: list[ArgCheck] = []
    per_rank = eff.max_running_requests_per_rank
    if len(set(per_rank)) > 1:
        checks.append(ArgCheck(Note.of(NoteKind.RANK_CAPS_DIFFER, caps=str(list(per_rank))), False))
    if per_rank and eff.max_running_requests is not None:
        expected = max(1, eff.max_running_requests // (eff.attn_dp_size or 1))
        if min(per_rank) < expected:
            checks.append(ArgCheck(Note.of(NoteKind.RANK_CAP_LOW, cap=min(per_rank), expected=expected),
                                   asked_cap is not None))
    return checks


def _queueing_check(eff: EffectiveArgs, asked_cap: int | None, capacity: int, max_concurrency: int) -> ArgCheck:
    """A sweep beyond the requests the server runs at once: the higher levels queue."""
    default_cap = asked_cap is None and eff.max_running_requests == DEFAULT_CAP and default_cap_applies(eff.speculative_algorithm)
    dp, per_rank = eff.attn_dp_size or 1, eff.max_running_requests_per_rank
    ranks = dp if dp > 1 and per_rank else 0
    return ArgCheck(Note.of(NoteKind.SWEEP_QUEUES, capacity=capacity, max_concurrency=max_concurrency,
                            per_rank=min(per_rank) if ranks else 0, ranks=ranks,
                            default_cap=DEFAULT_CAP if default_cap else 0), asked_cap is not None)


def check_args(cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
    """Differences between the configuration and the server, each a note; `blocking` marks the
    silent rewrites that make a launched configuration not what the suite describes."""
    checks: list[ArgCheck] = []
    algo = eff.speculative_algorithm
    family = resolved_algorithm(algo)
    if algo and algo not in MODELLED_ALGORITHMS:
        checks.append(ArgCheck(Note.of(NoteKind.UNMODELLED_ALGORITHM, algorithm=algo, config=cfg.name), False))
    elif cfg.speculative_algorithm or algo:
        checks += _speculation_checks(cfg, eff, family)
    checks += _adaptive_checks(cfg, eff)
    checks += _cap_checks(cfg, eff, max_concurrency)
    return checks


def _speculation_checks(cfg: ServerConfig, eff: EffectiveArgs, family: str | None) -> list[ArgCheck]:
    """Steps, topk and draft tokens: the algorithm's own resolution first, then every other rewrite."""
    asked = AskedSpeculation.of(cfg, eff.launch_command)
    ngram = family == "NGRAM"
    checks: list[ArgCheck] = []
    if ngram:
        checks += _ngram_checks(asked, eff)
        asked = replace(asked, eagle_topk=None)  # NGRAM's topk is its BFS breadth, checked just above
    elif eff.speculative_adaptive:
        checks += _adaptive_draft_checks(asked, eff)
        asked = replace(asked, num_draft_tokens=None)  # adaptive sets draft tokens, checked just above
    elif asked.num_steps is None and family is not None:
        checks.append(_default_steps_note(eff))
    return checks + _rewrite_checks(asked, eff, ngram)


def _adaptive_checks(cfg: ServerConfig, eff: EffectiveArgs) -> list[ArgCheck]:
    """Adaptive speculation on is said; asked for and switched off by the server blocks, with the reason."""
    asked = "--speculative-adaptive" in cfg.args or has_flag(eff.launch_command, "--speculative-adaptive")
    if eff.speculative_adaptive:
        table = eff.raw.get("speculative_adaptive_config") or "the default table"
        return [ArgCheck(Note.of(NoteKind.ADAPTIVE_ON, table=str(table)), False)]
    if asked and eff.speculative_adaptive is False:
        asked_topk = _asked(cfg.eagle_topk, eff.launch_command, "--speculative-eagle-topk")
        reason = adaptive_unsupported_reason(cfg.speculative_algorithm or eff.speculative_algorithm, asked_topk, eff)
        return [ArgCheck(Note.of(NoteKind.ADAPTIVE_OFF, steps=_known(eff.num_steps), reason=reason or ""), True)]
    return []


def _cap_checks(cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
    """The running-request cap: as asked, the same on every rank, and high enough for the sweep."""
    checks: list[ArgCheck] = []
    asked_cap = _asked(cfg.max_running_requests, eff.launch_command, "--max-running-requests")
    if asked_cap is not None and eff.max_running_requests not in (None, asked_cap):
        checks.append(_rewritten("max_running_requests", asked_cap, eff.max_running_requests))
    checks += _per_rank_cap_checks(eff, asked_cap)
    capacity = eff.request_capacity
    if capacity is not None and capacity < max_concurrency:
        checks.append(_queueing_check(eff, asked_cap, capacity, max_concurrency))
    return checks


def matches(cfg: ServerConfig, eff: EffectiveArgs) -> Note | None:
    """None when an attached server can stand for `cfg`, else the reason it cannot."""
    want = (cfg.speculative_algorithm or "").upper() or None
    have = eff.speculative_algorithm
    if want == have:
        return None
    if (want and have and resolved_algorithm(want) == resolved_algorithm(have)
            and not launched_algorithm(eff.launch_command)):
        return None  # EAGLE reported, command line unknown: NEXTN and EAGLE both fit
    if want and have and have not in MODELLED_ALGORITHMS:
        return None  # FROZEN_KV_MTP, DFLASH, ...: accepted on attach, check_args warns
    return Note.of(NoteKind.ATTACH_MISMATCH, runs=have or "no speculation", needs=want or "no speculation",
                   config=cfg.name, source="")
