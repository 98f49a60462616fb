"""The suite file (TOML): server configurations, sweep, workload and tolerances.

Every key is checked before any server starts; a mistake gets an error naming the file, the
key and the fix, because a typo in a merge gate's configuration must never be silently ignored.
"""

from specguard.config.loading import expand_path, load_suite, parse_suite
from specguard.config.suite import (
                                    ADVANCED_KEYS,
                                    APIS,
                                    ENGINES,
                                    FAIL_RULES,
                                    PRIOR_BETWEEN_DOF,
                                    REMOVED_KEYS,
                                    SGLANG_ALGORITHMS,
                                    SOAK_LOAD,
                                    SOAK_PASSIVE,
                                    AttachConfig,
                                    ConfigError,
                                    ServerConfig,
                                    SoakConfig,
                                    Suite,
                                    SweepConfig,
                                    Tolerances,
                                    key_name,
)
from specguard.config.validation import Origin, statistical_caveats, validate_suite

__all__ = [
    "ADVANCED_KEYS", "APIS", "ENGINES", "FAIL_RULES", "PRIOR_BETWEEN_DOF", "REMOVED_KEYS", "SGLANG_ALGORITHMS",
    "SOAK_LOAD", "SOAK_PASSIVE", "AttachConfig", "ConfigError", "Origin", "ServerConfig", "SoakConfig", "Suite",
    "SweepConfig", "Tolerances", "expand_path", "key_name", "load_suite", "parse_suite", "statistical_caveats",
    "validate_suite",
]
