"""Research around the gate: the gate study (``study``), fitting an emulator profile to a
measured sweep (``calibrate``) and racing speculation settings (``tune``).

They simulate with the emulator and call the gate's own functions; the gate path (what
`pytest perf_tests` imports) never imports this package (tests/research/test_research_boundary.py).
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol


class SubParsers(Protocol):
    """What a research command's ``add_parser`` needs of ``ArgumentParser.add_subparsers()``."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...
