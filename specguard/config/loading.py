"""Reading a suite file: TOML to typed tables, [advanced] keys to where the code keeps them, paths
expanded; every mistake is one line naming the file, the key and the fix."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from specguard.config.suite import (
    ADVANCED_KEYS,
    REMOVED_KEYS,
    TABLES,
    AttachConfig,
    ConfigError,
    ServerConfig,
    SoakConfig,
    Suite,
    SweepConfig,
    Tolerances,
    key_name,
)
from specguard.config.validation import validate_suite
from specguard.workload import WorkloadSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _type_ok(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is None:
        if hint is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if hint is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, hint)
    args = get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_type_ok(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_type_ok(v, args[1]) for v in value.values())
    # Optional / union
    return any(_type_ok(value, a) for a in args if a is not type(None))


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _build(cls: type, table: Any, where: str, path: Path, **fixed: Any) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [{where}] must be a table")
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in fixed]
    kwargs = dict(fixed)
    for key, value in table.items():
        if key not in names:
            shown = [n for n in names if ADVANCED_KEYS.get(n) != where]
            raise ConfigError(f"{path}: unknown key {where}.{key}; known keys: {', '.join(shown)}")
        if not _type_ok(value, hints[key]):
            raise ConfigError(f"{path}: {key_name(f'{where}.{key}')} = {value!r} has the wrong type; "
                              f"expected {_type_name(hints[key])}")
        kwargs[key] = float(value) if hints[key] is float else value
    return cls(**kwargs)


def load_suite(path: str | Path) -> Suite:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"suite file {path} does not exist (set --suite)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_suite(raw, path)


def _split_advanced(raw: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The suite's tables with [advanced] keys put where the code keeps them; a key in its old
    place, or one that was removed, is an error naming where it goes now."""
    for table in ("sweep", "workload", "tolerances"):
        for key in raw.get(table) or {}:
            if f"{table}.{key}" in REMOVED_KEYS:
                raise ConfigError(f"{path}: {table}.{key} was removed: {REMOVED_KEYS[f'{table}.{key}']}")
            if ADVANCED_KEYS.get(key) == table:
                raise ConfigError(f"{path}: {table}.{key} moved to the [advanced] table; write it there "
                                  f"(advanced.{key} = {raw[table][key]!r})")
    if "attach" in raw:
        raise ConfigError(f"{path}: [attach] moved: write strict_server_args under [advanced]")
    advanced = raw.get("advanced", {})
    if not isinstance(advanced, dict):
        raise ConfigError(f"{path}: [advanced] must be a table")
    tables: dict[str, dict[str, Any]] = {t: dict(raw.get(t) or {}) for t in ("sweep", "workload", "tolerances", "attach")}
    for key, value in advanced.items():
        if key not in ADVANCED_KEYS:
            raise ConfigError(f"{path}: unknown key advanced.{key}; known keys: {', '.join(ADVANCED_KEYS)}")
        tables[ADVANCED_KEYS[key]][key] = value
    for table in ("sweep", "workload", "tolerances"):
        if raw.get(table) is not None and not isinstance(raw[table], dict):
            raise ConfigError(f"{path}: [{table}] must be a table")
    return tables


def parse_suite(raw: dict[str, Any], path: Path) -> Suite:
    for key in raw:
        if key == "attach":
            continue  # named by _split_advanced
        if key not in TABLES:
            raise ConfigError(f"{path}: unknown top-level key {key!r}; known: {', '.join(TABLES)}")
    servers_raw = raw.get("servers")
    if not isinstance(servers_raw, dict) or not servers_raw:
        raise ConfigError(f"{path}: needs at least one [servers.NAME] table")
    tables = _split_advanced(raw, path)
    if "request_rate" in tables["sweep"] and "concurrency" in tables["sweep"]:
        raise ConfigError(f"{path}: sweep.request_rate and sweep.concurrency: a suite sweeps either concurrency or "
                          f"request_rate levels; remove sweep.concurrency (advanced.max_concurrency caps requests in flight)")
    servers = {name: _expand_paths(_build(ServerConfig, t, f"servers.{name}", path, name=name), path)
               for name, t in servers_raw.items()}
    try:
        workload = _build(WorkloadSpec, tables["workload"], "workload", path)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path}: [workload]: {exc}") from exc
    suite = Suite(path=path, servers=servers, sweep=_build(SweepConfig, tables["sweep"], "sweep", path), workload=workload,
                  tolerances=_build(Tolerances, tables["tolerances"], "tolerances", path),
                  attach=_build(AttachConfig, tables["attach"], "attach", path),
                  soak=_build(SoakConfig, raw.get("soak") or {}, "soak", path))
    validate_suite(suite)
    return suite


_VAR = re.compile(r"\$(?:(\w+)|\{(\w+)\})")
PATH_KEYS = ("model_path", "draft_model_path", "python")


def expand_path(value: str, where: str, path: Path) -> str:
    """`~` and `$VAR`/`${VAR}` expanded, so one suite file serves machines whose models and
    venvs live in different places; an unset variable is an error, never a literal `$VAR` path."""
    for m in _VAR.finditer(value):
        var = m.group(1) or m.group(2)
        if var not in os.environ:
            raise ConfigError(f"{path}: {where} = {value!r} uses ${var}, which is not set; export it or write the path out")
    return os.path.expanduser(os.path.expandvars(value))


def _expand_paths(s: ServerConfig, path: Path) -> ServerConfig:
    key = f"servers.{s.name}"
    changes: dict[str, Any] = {k: expand_path(getattr(s, k), f"{key}.{k}", path) for k in PATH_KEYS if getattr(s, k)}
    spec = s.speculative_config or {}
    draft = spec.get("model")
    if isinstance(draft, str):
        changes["speculative_config"] = {**spec, "model": expand_path(draft, f"{key}.speculative_config.model", path)}
    return dataclasses.replace(s, **changes)
