"""Sessions built by hand for the unit tests of the decisions: a suite, fake servers and cells
(no process, no HTTP), used by tests/session/ and tests/session/test_engine_and_drafter.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from emulator_suite import RELAUNCH, write_emulator_suite

from specguard.config import load_suite
from specguard.engines import EffectiveArgs, get_engine
from specguard.measure.metrics import RunMetrics
from specguard.measure.sweep import CellMeasurement
from specguard.server import ServerHandle
from specguard.session import GateSession, RunOptions
from specguard.session.servers import ServerState
from specguard.store.baseline_file import RunSample, StoredSession


def make_suite(tmp_path: Path, **kwargs):
    """The e2e suite with the library's default design (relaunch on suspicion), which the unit
    tests of the decisions assume."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return load_suite(write_emulator_suite(tmp_path / "suite.toml", **{"advanced": RELAUNCH, **kwargs}))


def make_session(tmp_path: Path, **options) -> GateSession:
    opts = RunOptions(baseline_dir=tmp_path / "baselines", log_dir=tmp_path / "logs", **options)
    return GateSession(make_suite(tmp_path), opts)


def run(tok_s: float, accept: float | None = 3.0) -> RunMetrics:
    return RunMetrics(concurrency=1, num_requests=4, completed=4, failed=0, duration_s=1.0, total_input_tokens=128,
                      total_output_tokens=int(tok_s), output_throughput=tok_s, request_throughput=4.0,
                      accept_length=accept, total_verify_ct=int(tok_s / 3))


def fake_server(sg: GateSession, name: str, **effective) -> None:
    """A server state as after a launch, without a process (unit tests of the decisions)."""
    cfg = sg.suite.servers[name]
    eff = EffectiveArgs(engine_version="0.5.23", model_path=cfg.model_path, tp_size=1,
                        max_running_requests=cfg.max_running_requests,
                        speculative_algorithm=cfg.speculative_algorithm, num_steps=cfg.num_steps,
                        eagle_topk=cfg.eagle_topk, num_draft_tokens=cfg.num_draft_tokens,
                        draft_model_path=cfg.draft_model_path)
    eff = replace(eff, **effective)
    handle = ServerHandle(name=name, base_url="http://127.0.0.1:9", engine=get_engine(cfg.engine), effective=eff)
    sg.pool.states[name] = ServerState(handle=handle, mode="launched", launch_id="L1")


def fake_cell(sg: GateSession, name: str, c: int, tok: list[float], error: str | None = None) -> None:
    sg.cells.cells[(name, c)] = CellMeasurement(config=name, concurrency=c, runs=[run(t) for t in tok], error=error)


def stored_session(sid: str, tok: list[float]) -> StoredSession:
    return StoredSession(session_id=sid, date="2026-11-29T00:00:00+00:00", provenance={},
                   runs=[RunSample(i, "L0", t, 100, 1.0, 4, 0, None, 0) for i, t in enumerate(tok)])
