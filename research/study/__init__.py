"""The gate study: the gate's false-fail rate, power and GPU cost measured on simulated sessions
(docs/research/gate-study.md, `python -m research.study`).

- ``simulate``: launches of the emulator's scheduler in virtual time, trials, injected changes;
- ``noise``, ``client_noise``: the noise presets and the real-time client's measured extra noise;
- ``plan``: the grid of gate settings and the designs compared;
- ``session_decisions``: one session decided as the pytest session decides it;
- ``run``, ``cache``, ``truth``, ``crossover_study``, ``report``, ``cli``: running, caching,
  scoring and reporting a study.

The names below are the study's interface (``from research import study``).
"""

from research.study.cache import cached_trial, trial_key
from research.study.cli import build_parser, main, run
from research.study.client_noise import Spread, measure_noise, results_logs, spreads
from research.study.crossover_study import crossover_study
from research.study.noise import (
                                            EMULATOR_BUSY,
                                            EMULATOR_QUIET,
                                            GPU_DAY_SHARE,
                                            GPU_STALL_FACTORS,
                                            GPU_STALL_RATE,
                                            GPU_WITHIN,
                                            NOISE_PRESETS,
                                            Noise,
                                            preset,
                                            rescalable,
)
from research.study.plan import (
                                            DEFAULT_DESIGN,
                                            DESIGNS,
                                            GateSettings,
                                            StudyPlan,
                                            gate_tests,
                                            max_launches,
                                            settings_grid,
                                            suite_alphas,
)
from research.study.report import HEADLINE_KEYS, headline, render_table, summary_line
from research.study.run import decide_trial, run_study, summarise, wilson
from research.study.session_decisions import decide_design, decide_session
from research.study.simulate import (
                                            Change,
                                            Launch,
                                            Trial,
                                            extend_trial,
                                            rescale_trial,
                                            scenarios,
                                            seed_of,
                                            simulate_launch,
                                            simulate_trial,
)
from research.study.truth import CROSSOVER_FACTOR, level_distance, true_crossover_c, true_crossovers, within_factor
from research.study.verdict import SessionVerdict

__all__ = ["CROSSOVER_FACTOR", "Change", "DEFAULT_DESIGN", "DESIGNS", "EMULATOR_BUSY", "EMULATOR_QUIET",
           "GPU_DAY_SHARE", "GPU_STALL_FACTORS", "GPU_STALL_RATE", "GPU_WITHIN", "GateSettings", "HEADLINE_KEYS", "Launch",
           "NOISE_PRESETS", "Noise", "SessionVerdict", "Spread", "StudyPlan", "Trial", "build_parser", "cached_trial",
           "crossover_study", "decide_design", "decide_session", "decide_trial", "extend_trial", "gate_tests", "headline",
           "level_distance", "main", "max_launches", "measure_noise", "preset", "render_table", "rescalable",
           "rescale_trial", "results_logs", "run", "run_study", "scenarios", "seed_of", "settings_grid",
           "simulate_launch", "simulate_trial", "spreads", "suite_alphas", "summarise", "summary_line", "trial_key",
           "true_crossover_c", "true_crossovers", "wilson", "within_factor"]
