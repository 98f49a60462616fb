"""SGLang-compatible emulator: profiles, a performance model and an HTTP server.

The model and the simulator are importable without the HTTP stack:

    from specguard.emulator import ClosedLoop, load_profile, simulate_closed_loop, SpecRequest
    result = simulate_closed_loop(load_profile("fast"), SpecRequest("EAGLE3"), ClosedLoop(4, 32, 128, 256))

The server is ``specguard.emulator.launch_server.main(argv)`` (SGLang's flags plus ``--emulator-*``).
SGLang's own rules the emulator follows (argument resolution, the adaptive config and its
start-up checks) are specguard/sglang_rules/.
"""

from specguard.emulator.model import (
    BatchScheduler,
    ClosedLoop,
    GenRequest,
    SchedulerConfig,
    SimLaunch,
    SimulationResult,
    run_closed_loop,
    simulate_closed_loop,
)
from specguard.emulator.profile import EmulatorProfile, available_profiles, load_profile
from specguard.emulator.spec import (
    ServingSettings,
    SpecConfig,
    SpecRequest,
    expected_accept_length,
    resolve_settings,
    uniform_accept_prob,
)

__all__ = [
    "BatchScheduler",
    "ClosedLoop",
    "EmulatorProfile",
    "GenRequest",
    "SchedulerConfig",
    "ServingSettings",
    "SimLaunch",
    "SimulationResult",
    "SpecConfig",
    "SpecRequest",
    "available_profiles",
    "expected_accept_length",
    "load_profile",
    "resolve_settings",
    "run_closed_loop",
    "simulate_closed_loop",
    "uniform_accept_prob",
]
