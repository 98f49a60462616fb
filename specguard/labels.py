"""Small typed names every layer shares: a sweep level, a gate label and the exit codes.

They sit below everything else (no specguard import), so config, measure, decide, report and
the pytest plugin all spell a level, a gate and an outcome the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

THROUGHPUT, ACCEPT_LENGTH, STEP_TIME, SPECULATION = "throughput", "accept_length", "step_time", "speculation"
GATES = (THROUGHPUT, ACCEPT_LENGTH, STEP_TIME, SPECULATION)
SOAK = "soak"  # test_soak: outside the family (its own [soak] alpha per metric), decided on its windows
# Gated against the stored baseline history (a run that records baselines does not gate them).
HISTORY_GATES = (THROUGHPUT, ACCEPT_LENGTH, STEP_TIME)


@dataclass(frozen=True, order=True)
class GateLabel:
    """A gate as decisions, reports and test ids name it: `accept_length`, or `accept_length[code]`
    for the accept-length test of one prompt category (`test_accept_length[eagle3-c16-code]`)."""

    gate: str
    category: str = ""

    @classmethod
    def parse(cls, text: str) -> GateLabel:
        gate, _, rest = text.partition("[")
        return cls(gate, rest[:-1] if rest.endswith("]") else rest)

    def __str__(self) -> str:
        return f"{self.gate}[{self.category}]" if self.category else self.gate

    @property
    def is_history(self) -> bool:
        return self.gate in HISTORY_GATES


def gate_label(gate: str, category: str = "") -> str:
    """The label text of a gate (and prompt category): `GateLabel(gate, category)` as a string."""
    return str(GateLabel(gate, category))


def is_history_gate(label: str) -> bool:
    """Throughput and accept-length gates, per category too."""
    return GateLabel.parse(label).is_history


def level_prefix(rate: bool) -> str:
    """The letter before a level's number: r (requests per second) or c (clients)."""
    return "r" if rate else "c"


@dataclass(frozen=True, order=True)
class Level:
    """One level of a sweep: `value` clients (closed loop), or with `rate` requests per second
    (open loop, `[sweep] request_rate`). Ids and messages name it `c16` or `r8`."""

    value: int
    rate: bool = False

    @property
    def name(self) -> str:
        return f"{level_prefix(self.rate)}{self.value}"

    @property
    def store_key(self) -> int | str:
        """How baseline files key the level: 16 (concurrency), "r8" (request rate)."""
        return self.name if self.rate else self.value

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, name: str) -> Level:
        """A level from its name: "c16" (16 clients) or "r8" (8 requests/s)."""
        kind, digits = name[:1], name[1:]
        if kind not in ("c", "r") or not digits.isdigit():
            raise ValueError(f"level {name!r}: expected c<clients> or r<requests per second>, e.g. c16 or r8")
        return cls(int(digits), kind == "r")


class TextEnum(str, Enum):
    """An enum of words: ``str(v)`` and f-strings give the value on every Python (3.11 changed
    ``format`` of mixed-in enums to the member's name), and JSON stores the value."""

    def __str__(self) -> str:
        return str(self.value)


class Verdict(TextEnum):
    """A gate test's decision."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    SKIP = "skip"  # not decided: nothing to compare with (a first run), or the server cannot serve it
    ERROR = "error"  # not measured, or a gate that could not be decided (exit 3, never a regression)


class ExitCode(IntEnum):
    """Exit codes of `pytest perf_tests` and of every `specguard` command (docs/ci.md)."""

    OK = 0  # no regression
    REGRESSION = 1  # a gate (or the session-level Holm test) found a regression
    INTERRUPTED = 2
    NOT_MEASURED = 3  # a server did not start, a cell failed, a baseline was missing or could not be written
    USAGE = 4  # a bad option or suite file
    NO_TESTS = 5

    @property
    def status(self) -> str:
        """The word the results document and the summary use for it."""
        return _STATUS[self]


def status_of(code: int) -> str:
    """The status word of a process exit code (`exit-N` for a code specguard does not define)."""
    try:
        return ExitCode(code).status
    except ValueError:
        return f"exit-{code}"


_STATUS = {ExitCode.OK: "ok", ExitCode.REGRESSION: "regression", ExitCode.INTERRUPTED: "interrupted",
           ExitCode.NOT_MEASURED: "not-measured", ExitCode.USAGE: "usage-error", ExitCode.NO_TESTS: "no-tests"}
STATUS_OK, STATUS_REGRESSION, STATUS_NOT_MEASURED = (ExitCode.OK.status, ExitCode.REGRESSION.status,
                                                     ExitCode.NOT_MEASURED.status)
