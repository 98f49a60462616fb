"""What a gate session is asked to do beyond the suite file: command-line choices, and the one
error a configuration raises when it cannot be measured."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specguard.notes import Note
from specguard.report.note_text import note_line


@dataclass(frozen=True)
class RunOptions:
    """Command-line choices that are not in the suite file."""

    server_urls: dict[str | None, str] = field(default_factory=dict)  # None = one URL for all
    server_args: dict[str, list[str]] = field(default_factory=dict)
    baseline_dir: Path = Path("baselines")
    update_baselines: bool = False
    require_baselines: bool = False
    api_key: str | None = None
    log_dir: Path = Path(".specguard/logs")
    max_failed_requests: int = 0
    requests_per_run: int | None = None
    # Attach mode: the suite's launch values that differ from the server's are errors, not notes.
    strict_server_args: bool = False
    # pytest-xdist: a file every worker of the run can lock; while it is set, a launched server
    # holds it from launch to stop, so launches on one machine are serialised across workers.
    launch_lock: Path | None = None
    # pytest-xdist: a directory unique to the run; each configuration is claimed there by the
    # first worker that starts it, and a second worker refuses (one line) instead of launching it
    # again (a guard: the plugin's scheduler keeps a configuration and its reference on one worker).
    claim_dir: Path | None = None
    worker_id: str = ""
    # Builds the "record it with" command for (configuration, levels); the plugin's version
    # carries the run's --suite, --baseline-dir, --server-url and an exact -k. None: built here.
    rerun_hint: Callable[[str, list[int]], str] | None = None
    # --speculation-must-win-up-to: overrides every configuration's speculation_must_win_up_to.
    speculation_must_win_up_to: int | None = None

    @property
    def attach_mode(self) -> bool:
        return bool(self.server_urls)


class ConfigUnavailable(Exception):
    """This configuration cannot be measured here (skip) or failed to start (error).

    `reason` says what happened as data (a `notes.Note` of the session's reason kinds), worded
    by report/ (`line`: what happened and what to do); context (command, exit code, log tail)
    follows after a newline in `str()` and is kept alone in `detail`.
    """

    def __init__(self, reason: Note, skip: bool, detail: str = "") -> None:
        super().__init__(reason, skip, detail)
        self.reason = reason
        self.skip = skip
        self.detail = detail

    @property
    def line(self) -> str:
        return note_line(self.reason)

    def __str__(self) -> str:
        return self.line + ("\n" + self.detail if self.detail else "")


def parse_server_urls(values: list[str]) -> dict[str | None, str]:
    """`--server-url [NAME=]URL` values: NAME -> URL, None -> the URL for every configuration."""
    out: dict[str | None, str] = {}
    for v in values:
        name, sep, url = v.partition("=")
        if sep and not name.startswith(("http://", "https://")):
            out[name] = url
        else:
            out[None] = v
    return out


def parse_server_args(values: list[str]) -> dict[str, list[str]]:
    """`--server-args NAME="ARGS"` values: NAME -> extra launch flags."""
    out: dict[str, list[str]] = {}
    for v in values:
        name, sep, args = v.partition("=")
        if not sep or not name:
            raise ValueError(f"--server-args takes NAME=\"ARGS\", got {v!r}")
        out.setdefault(name, []).extend(shlex.split(args))
    return out


def api_key_from(option: str | None) -> str | None:
    return option or os.environ.get("SPECGUARD_API_KEY") or None
