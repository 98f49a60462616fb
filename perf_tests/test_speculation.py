"""This repository's gate tests: the ones specguard ships (what `specguard init` writes)."""

from specguard.plugin.gate_tests import (
    test_accept_length,
    test_soak,
    test_speculation_beats_reference,
    test_step_time,
    test_throughput,
)

__all__ = ["test_accept_length", "test_soak", "test_speculation_beats_reference", "test_step_time", "test_throughput"]
