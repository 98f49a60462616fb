"""Every JSON file specguard writes, written atomically: a temp file beside the target, fsync,
then a rename over it. Several files written together (`commit_json`) are renamed in one block
with SIGINT/SIGTERM deferred, so an interrupt leaves every file as it was or every file new.
New files get the mode the user's umask gives any new file.

One home for every writer (results, reports' JSON, tune, history, ab, the baseline store): the
baseline store's multi-file commit and a single file's write are the same mechanism.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any


def umask_mode() -> int:
    """The mode a new file gets here: 0o666 less the process umask (read without changing it for long)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def dump_json(doc: Any) -> str:
    """A document as specguard writes it: sorted keys, indent 1, a final newline, no NaN (ValueError)."""
    return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n"


def _write_temp(path: Path, text: str, mode: int) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then deliver them (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, FrameType | None]] = []
    old: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}  # getsignal's answers
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda signum, frame: pending.append((signum, frame)))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        for signum, frame in pending[:1]:
            handler = old[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def commit_json(docs: dict[Path, Any]) -> None:
    """Write several JSON files together: every document serialised and written to a temp file
    first (an error there leaves every file untouched), then every rename, uninterrupted."""
    mode = umask_mode()
    temps: list[tuple[str, Path]] = []
    try:
        for path, doc in docs.items():
            text = dump_json(doc)
            path.parent.mkdir(parents=True, exist_ok=True)
            temps.append((_write_temp(path, text, mode), path))
        with signals_deferred():
            for tmp, path in temps:
                os.replace(tmp, path)
            temps = []
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def atomic_write_json(path: Path, doc: Any) -> None:
    """Write one file: temp file in the same directory, fsync, rename over the target."""
    commit_json({path: doc})
