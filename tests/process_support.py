"""Stopping what a test started when it has to be killed: the child's own process group and the
groups of every process it started (specguard starts each server in a group of its own, so
killing the child's group alone would orphan a running server)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process (from /proc)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(stat.parent.name)] = int(fields[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every live process started by ``pid``, directly or not."""
    parents, found, frontier = _parents(), [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s group (it was started with start_new_session=True) and the group of each
    process it started, then reap it."""
    groups = set()
    for pid in descendants(proc.pid):
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    for group in [proc.pid, *sorted(groups - {proc.pid})]:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def interruptible() -> None:
    """A child's ``preexec_fn``: SIGINT back to its default, so that a test's Ctrl-C reaches the
    child's pytest even when this test run inherited SIGINT ignored (a background job of a
    non-interactive shell does, and Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
