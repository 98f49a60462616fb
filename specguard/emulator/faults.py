"""Fault injection: the ways real inference servers misbehave, on demand and reproducibly.

A merge gate must never pass, hang or lose data when its server misbehaves; these faults let
tests prove that. Per-request faults are drawn from a seeded generator, so a launch with the
same seed misbehaves on the same requests.
"""

from __future__ import annotations

import argparse
import enum
import random
from dataclasses import dataclass, field

from specguard.emulator.decay import DecayClock, DecaySettings

# What a generation request may be made to suffer.
ERROR, CUT, STALL, MALFORMED, BAD_COUNT, NO_COUNT = "error", "cut", "stall", "malformed", "bad_count", "no_count"
REQUEST_FAULTS = (ERROR, CUT, STALL, MALFORMED, BAD_COUNT, NO_COUNT)


class DoubleCount(enum.Enum):
    """One reading of the accept length made wrong, as engines' own metrics have been (vLLM PRs
    #56137 and #56977: accept length 6.0 reported for 3.0, inflated draft counts), so a
    cross-check of the sources can be shown to name the one that disagrees. Each changes one
    source only; the figures it doubles are in docs/emulator.md."""

    META_VERIFY_CT = "meta-verify-ct"  # per request: meta_info spec_verify_ct (and what derives from it) x 2
    VERIFY_COUNTER = "verify-counter"  # /metrics sglang:spec_verify_calls_total x 2
    ACCEPT_GAUGE = "accept-gauge"  # /metrics sglang:spec_accept_length x 2
    SERVER_INFO = "server-info"  # /server_info internal_states[i].avg_spec_accept_length x 2
    STREAM = "stream"  # the stream: after the first event, each event carries two verify steps


@dataclass(frozen=True)
class FaultSettings:
    """Rates are fractions of generation requests (0..1); durations in seconds."""

    error_rate: float = 0.0  # answered with HTTP error_status before any token
    error_status: int = 500
    cut_rate: float = 0.0  # connection dropped half-way through the stream
    stall_rate: float = 0.0  # no event for stall_s half-way through the stream
    stall_s: float = 30.0
    malformed_rate: float = 0.0  # one invalid SSE/JSON event half-way through
    bad_count_rate: float = 0.0  # final completion_tokens disagrees with the tokens streamed
    no_count_rate: float = 0.0  # meta_info / usage without completion_tokens
    never_ready: bool = False  # /health* answer 503 forever
    exit_during_startup_s: float | None = None  # the process exits (code 3) this long after start
    crash_after_requests: int | None = None  # the process dies (code 134) on request N + 1
    old_server_info: bool = False  # only /get_server_info, without the newer fields
    double_count: frozenset[DoubleCount] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        for name in ("error_rate", "cut_rate", "stall_rate", "malformed_rate", "bad_count_rate", "no_count_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--emulator-fault-{name.replace('_', '-')} must be in [0, 1], got {value}")
        if sum(getattr(self, f"{f}_rate") for f in REQUEST_FAULTS) > 1.0:
            raise ValueError("the --emulator-fault-*-rate values add up to more than 1")
        if self.error_status not in (500, 502, 503, 504):
            raise ValueError(f"--emulator-fault-error-status must be a 5xx status, got {self.error_status}")

    @property
    def any(self) -> bool:
        return self != FaultSettings()


class FaultPlan:
    """Decides, per generation request, which fault (if any) it gets."""

    def __init__(self, settings: FaultSettings, seed: int) -> None:
        self.settings = settings
        self._rng = random.Random(seed ^ 0x5EED)
        self.requests_seen = 0

    def next_request(self) -> str | None:
        self.requests_seen += 1
        draw = self._rng.random()
        for fault in REQUEST_FAULTS:
            rate = getattr(self.settings, f"{fault}_rate")
            if draw < rate:
                return fault
            draw -= rate
        return None

    def should_crash(self) -> bool:
        n = self.settings.crash_after_requests
        return n is not None and self.requests_seen > n


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """The --emulator-fault-* flags (launch_server) and their help."""
    g = parser.add_argument_group("emulator fault injection")
    g.add_argument("--emulator-fault-error-rate", type=float, default=0.0, help="fraction answered 5xx")
    g.add_argument("--emulator-fault-error-status", type=int, default=500)
    g.add_argument("--emulator-fault-cut-rate", type=float, default=0.0, help="fraction of streams cut mid-way")
    g.add_argument("--emulator-fault-stall-rate", type=float, default=0.0, help="fraction of streams that stall")
    g.add_argument("--emulator-fault-stall-s", type=float, default=30.0)
    g.add_argument("--emulator-fault-malformed-rate", type=float, default=0.0, help="fraction with an invalid event")
    g.add_argument("--emulator-fault-bad-count-rate", type=float, default=0.0, help="fraction with a wrong final count")
    g.add_argument("--emulator-fault-no-count-rate", type=float, default=0.0, help="fraction without token counts")
    g.add_argument("--emulator-fault-never-ready", action="store_true")
    g.add_argument("--emulator-fault-exit-during-startup-s", type=float, default=None)
    g.add_argument("--emulator-fault-crash-after-requests", type=int, default=None)
    g.add_argument("--emulator-fault-old-server-info", action="store_true")
    g.add_argument("--emulator-fault-double-count", action="append", default=[], metavar="SOURCE",
                   choices=[d.value for d in DoubleCount],
                   help="one accept-length reading wrong (repeatable): meta-verify-ct (meta_info spec_verify_ct x2), "
                        "verify-counter (spec_verify_calls_total x2), accept-gauge (spec_accept_length x2), "
                        "server-info (avg_spec_accept_length x2), stream (two verify steps per streamed event)")
    _add_decay_arguments(g)


def _add_decay_arguments(g: argparse._ArgumentGroup) -> None:
    """The ageing server (decay.py): what decays, and its ramp in seconds or in tokens."""
    g.add_argument("--emulator-fault-accept-decay", type=float, default=0.0, metavar="F",
                   help="the accept length falls by this fraction (0.10: 3.0 -> 2.7) along the decay ramp")
    g.add_argument("--emulator-fault-step-slowdown", type=float, default=0.0, metavar="F",
                   help="every step lengthens by this fraction (0.05: 5%% slower; negative: faster) along the decay ramp")
    g.add_argument("--emulator-fault-decay-start-s", type=float, default=None, metavar="S",
                   help="ramp start, seconds after the first generation request (default 0)")
    g.add_argument("--emulator-fault-decay-over-s", type=float, default=None, metavar="S",
                   help="ramp length in seconds, then held (default 0: a step change)")
    g.add_argument("--emulator-fault-decay-start-tokens", type=float, default=None, metavar="N",
                   help="ramp start in generated tokens served instead of seconds")
    g.add_argument("--emulator-fault-decay-over-tokens", type=float, default=None, metavar="N",
                   help="ramp length in generated tokens served")


def fault_settings_from_args(args: argparse.Namespace) -> FaultSettings:
    return FaultSettings(
        error_rate=args.emulator_fault_error_rate, error_status=args.emulator_fault_error_status,
        cut_rate=args.emulator_fault_cut_rate, stall_rate=args.emulator_fault_stall_rate,
        stall_s=args.emulator_fault_stall_s, malformed_rate=args.emulator_fault_malformed_rate,
        bad_count_rate=args.emulator_fault_bad_count_rate, no_count_rate=args.emulator_fault_no_count_rate,
        never_ready=args.emulator_fault_never_ready,
        exit_during_startup_s=args.emulator_fault_exit_during_startup_s,
        crash_after_requests=args.emulator_fault_crash_after_requests,
        old_server_info=args.emulator_fault_old_server_info,
        double_count=frozenset(DoubleCount(v) for v in args.emulator_fault_double_count),
    )


def decay_settings_from_args(args: argparse.Namespace) -> DecaySettings | None:
    """The decay flags (None: no decay). Raises ValueError naming the flag for a bad combination."""
    seconds = (args.emulator_fault_decay_start_s, args.emulator_fault_decay_over_s)
    tokens = (args.emulator_fault_decay_start_tokens, args.emulator_fault_decay_over_tokens)
    given_s, given_tokens = any(v is not None for v in seconds), any(v is not None for v in tokens)
    if given_s and given_tokens:
        raise ValueError("--emulator-fault-decay-*-s and --emulator-fault-decay-*-tokens exclude each other: "
                         "give the ramp in seconds or in tokens")
    accept, slowdown = args.emulator_fault_accept_decay, args.emulator_fault_step_slowdown
    if not (accept or slowdown):
        if given_s or given_tokens:
            raise ValueError("--emulator-fault-decay-start/over-* need --emulator-fault-accept-decay or "
                             "--emulator-fault-step-slowdown")
        return None
    clock = DecayClock.TOKENS if given_tokens else DecayClock.SECONDS
    start, over = tokens if given_tokens else seconds
    return DecaySettings(accept, slowdown, start or 0.0, over or 0.0, clock)
