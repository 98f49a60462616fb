"""The fast tier starts no process: tests/conftest.py's guard fails an unmarked test at the first
one it starts, so a new slow test cannot slip into `pytest tests -m "not e2e and not real_sglang
and not real_engine"` unmarked (issue 29)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest


def test_an_unmarked_test_that_starts_a_process_fails_naming_the_marker():
    with pytest.raises(pytest.fail.Exception, match=r"test_tiers.py::.* starts a process \(\['true'\]\) but is not marked e2e"):
        subprocess.run(["true"], check=False)
    with pytest.raises(pytest.fail.Exception, match="os.fork"):
        os.fork()


def test_asyncio_subprocesses_are_refused_too():
    async def start() -> None:
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")

    with pytest.raises(pytest.fail.Exception, match="not marked e2e"):
        asyncio.run(start())


@pytest.mark.e2e
def test_a_marked_test_starts_processes():
    assert subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True, text=True).stdout == "7\n"
