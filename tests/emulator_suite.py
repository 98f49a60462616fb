"""The small baseline + eagle3 emulator suite that the end-to-end tests run (one text, two sizes)."""

from __future__ import annotations

from pathlib import Path

# One launch per configuration: end-to-end tests check behaviour, and relaunching on suspicion
# would multiply their time on a noisy machine; the staged design's own tests pass RELAUNCH.
ONE_LAUNCH = 'relaunch = "off"\nread_timeout_s = 20\nrun_timeout_s = 60\n'
RELAUNCH = 'relaunch = "on-suspicion"\nread_timeout_s = 20\nrun_timeout_s = 60\n'


def emulator_suite_toml(*, concurrency: tuple[int, ...] = (1, 4), output_len: int = 64, cap: int = 64,
                        baseline_args: str = "", must_win_up_to: int | None = 4, sweep: str | None = None,
                        workload: str | None = None, tolerances: str = "", advanced: str = ONE_LAUNCH) -> str:
    """``baseline_args``: extra TOML list items for the baseline's args (e.g. a fault flag);
    ``sweep`` / ``workload`` / ``advanced``: the whole body of that table instead of the default
    one; ``tolerances``: lines added to the wide default tolerances."""
    must_win = f"speculation_must_win_up_to = {must_win_up_to}\n" if must_win_up_to is not None else ""
    if sweep is None:
        sweep = f"concurrency = [{', '.join(map(str, concurrency))}]\nrequests_per_worker = 4\nwarmup = 1\nrepeats = 3\n"
    if workload is None:
        workload = f'kind = "random-ids"\ninput_len = 32\noutput_len = {output_len}\n'
    return f"""
[sweep]
{sweep}
[workload]
{workload}
# Wide priors: these tests share two cores with whatever else runs, and they check behaviour
# (what fails, what is written), not the gate's sensitivity (docs/research/gate-study.md measures that).
[tolerances]
throughput = 0.05
prior_between_sd = 0.05
{tolerances}
[advanced]
{advanced}
[servers.baseline]
engine = "emulator"
model_path = "/models/specguard-fast"
max_running_requests = {cap}
args = ["--emulator-profile", "fast"{baseline_args}]
startup_timeout_s = 60

[servers.eagle3]
engine = "emulator"
model_path = "/models/specguard-fast"
speculative_algorithm = "EAGLE3"
draft_model_path = "/models/specguard-fast-eagle3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
max_running_requests = {cap}
reference = "baseline"
{must_win}args = ["--emulator-profile", "fast"]
startup_timeout_s = 60
"""


def write_emulator_suite(path: Path, **kwargs) -> Path:
    path.write_text(emulator_suite_toml(**kwargs))
    return path
