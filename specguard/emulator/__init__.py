"""SGLang-compatible emulator: profiles, a performance model and an HTTP server.

The model and the simulator are importable without the HTTP stack:

    from specguard.emulator import load_profile, simulate_closed_loop, SpecRequest
    result = simulate_closed_loop(load_profile("fast"), SpecRequest("EAGLE3"), 4, 32, 128, 256)

The server is ``specguard.emulator.launch_server.main(argv)`` (SGLang's flags plus ``--emulator-*``).
``check_adaptive_config(config, num_steps)`` applies SGLang 0.5.23's start-up checks to an
adaptive-speculation config (``--speculative-adaptive-config``).
"""

from specguard.emulator.adaptive import DEFAULT_ADAPTIVE_CONFIG, AdaptiveConfigError, check_adaptive_config
from specguard.emulator.model import (
    BatchScheduler,
    GenRequest,
    SchedulerConfig,
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
    "DEFAULT_ADAPTIVE_CONFIG",
    "AdaptiveConfigError",
    "BatchScheduler",
    "EmulatorProfile",
    "GenRequest",
    "SchedulerConfig",
    "ServingSettings",
    "SimulationResult",
    "SpecConfig",
    "SpecRequest",
    "available_profiles",
    "check_adaptive_config",
    "expected_accept_length",
    "load_profile",
    "resolve_settings",
    "run_closed_loop",
    "simulate_closed_loop",
    "uniform_accept_prob",
]
