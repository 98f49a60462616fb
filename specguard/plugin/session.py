"""The run's GateSession, built once from the suite and the command line."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import pytest

from specguard.plugin import state
from specguard.plugin.hints import record_command
from specguard.plugin.options import baseline_dir, check_run_options, get_suite
from specguard.plugin.scheduling import worker_options
from specguard.session import GateSession, RunOptions, api_key_from, parse_server_args, parse_server_urls


def get_session(config: pytest.Config) -> GateSession:
    if state.SESSION not in config.stash:
        suite = get_suite(config)
        check_run_options(config, suite)
        opt = config.getoption
        options = RunOptions(
            server_urls=parse_server_urls(opt("--server-url")),
            server_args=parse_server_args(opt("--server-args")),
            baseline_dir=baseline_dir(config, suite),
            update_baselines=opt("--update-baselines"),
            require_baselines=opt("--require-baselines"),
            api_key=api_key_from(opt("--api-key")),
            log_dir=Path(opt("--server-log-dir")),
            max_failed_requests=opt("--max-failed-requests"),
            requests_per_run=opt("--requests"),
            strict_server_args=bool(opt("--strict-server-args")),
            speculation_must_win_up_to=opt("--speculation-must-win-up-to"),
            rerun_hint=lambda name, levels: record_command(config, [(name, c) for c in levels]),
            **worker_options(config, suite),
        )
        config.stash[state.SESSION] = GateSession(suite, options)
        _stop_servers_on_sigterm(config)
    return config.stash[state.SESSION]


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


def _stop_servers_on_sigterm(config: pytest.Config) -> None:
    """A CI timeout or `timeout` sends SIGTERM, which would end pytest without its teardown and
    orphan the servers it launched (each in its own process group). Treated as Ctrl-C instead:
    the session stops its servers and writes no baseline. Installed only once a session exists,
    so a project's own test runs keep their SIGTERM behaviour."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return  # someone else (a runner, a test) handles it: leave theirs
    signal.signal(signal.SIGTERM, _on_sigterm)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    config.add_cleanup(restore)
