"""SGLang: `python -m sglang.launch_server`, /server_info, /flush_cache, spec_verify_ct."""

from __future__ import annotations

import shlex
from typing import Any

import httpx

from specguard.config import ServerConfig
from specguard.engines.base import ArgCheck, EffectiveArgs, Engine, redact

# NEXTN (MTP heads) is an alias that SGLang resolves to EAGLE and reports as such.
ALGORITHM_FAMILY = {"NEXTN": "EAGLE", "EAGLE": "EAGLE"}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def flag_value(launch_command: str, flag: str) -> str | None:
    """A flag's value as typed on the server's command line (its `launch_command`)."""
    try:
        argv = shlex.split(launch_command)
    except ValueError:
        return None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def redact_command(launch_command: str) -> str:
    """The server's own command line with key values replaced, safe to store."""
    try:
        return shlex.join(redact(shlex.split(launch_command), []))
    except ValueError:
        return "(unparseable launch_command withheld)"


def launched_algorithm(launch_command: str) -> str | None:
    """The algorithm as typed on the command line (so NEXTN is told apart from EAGLE)."""
    value = flag_value(launch_command, "--speculative-algorithm")
    return value.upper() if value else None


def _asked(cfg_value: int | None, launch_command: str, flag: str) -> int | None:
    """What was asked: the configuration's value, else what the server's command line says."""
    if cfg_value is not None:
        return cfg_value
    value = flag_value(launch_command, flag)
    return int(value) if value is not None and value.isdigit() else None


class SGLangEngine(Engine):
    name = "sglang"
    module = "sglang.launch_server"
    counter_names = ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total", "sglang:num_requests_total")
    generated_tokens_counter = "sglang:generation_tokens_total"

    def launch_command(self, cfg: ServerConfig, host: str, port: int, api_key: str | None) -> list[str]:
        cmd = [self.python(cfg), "-m", self.module, "--model-path", cfg.model_path,
               "--host", host, "--port", str(port), "--tp-size", str(cfg.tp_size), "--enable-metrics"]
        if cfg.speculative_algorithm:
            cmd += ["--speculative-algorithm", cfg.speculative_algorithm]
            if cfg.draft_model_path:
                cmd += ["--speculative-draft-model-path", cfg.draft_model_path]
            for flag, value in (("--speculative-num-steps", cfg.num_steps),
                                ("--speculative-eagle-topk", cfg.eagle_topk),
                                ("--speculative-num-draft-tokens", cfg.num_draft_tokens)):
                if value is not None:
                    cmd += [flag, str(value)]
        if cfg.max_running_requests is not None:
            cmd += ["--max-running-requests", str(cfg.max_running_requests)]
        cmd += list(cfg.args)
        if api_key:
            cmd += ["--api-key", api_key]
        return cmd

    def read_effective_args(self, client: httpx.Client, cfg: ServerConfig | None) -> EffectiveArgs:
        r = client.get("/server_info", timeout=30.0)
        if r.status_code == 404:
            r = client.get("/get_server_info", timeout=30.0)  # older SGLang
        r.raise_for_status()
        info = r.json()
        states = info.get("internal_states") or [{}]
        state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
        launch = redact_command(str(info.get("launch_command") or ""))
        algo = info.get("speculative_algorithm")
        typed = launched_algorithm(launch)
        if algo and typed and ALGORITHM_FAMILY.get(typed) == algo:
            algo = typed  # server reports EAGLE for NEXTN; keep what was asked
        cap = _int(state.get("effective_max_running_requests_per_dp")) or _int(info.get("max_running_requests"))
        raw = {k: v for k, v in info.items() if k not in ("internal_states", "api_key", "admin_api_key", "ssl_keyfile_password")}
        raw["launch_command"] = launch
        return EffectiveArgs(
            engine_version=str(info.get("version", "")),
            model_path=str(info.get("model_path", "")),
            speculative_algorithm=algo.upper() if isinstance(algo, str) else None,
            draft_model_path=info.get("speculative_draft_model_path"),
            num_steps=_int(info.get("speculative_num_steps")),
            eagle_topk=_int(info.get("speculative_eagle_topk")),
            num_draft_tokens=_int(info.get("speculative_num_draft_tokens")),
            max_running_requests=cap,
            tp_size=_int(info.get("tp_size")),
            launch_command=launch,
            raw=raw,
        )

    def flush_cache(self, client: httpx.Client) -> None:
        r = client.post("/flush_cache", timeout=60.0)
        if r.status_code != 200:
            raise RuntimeError(f"/flush_cache answered {r.status_code}: {r.text[:200]}")

    def server_accept_lengths(self, client, before, after) -> dict[str, float]:
        out: dict[str, float] = {}
        if before and after:
            tokens = after.get("sglang:generation_tokens_total", 0) - before.get("sglang:generation_tokens_total", 0)
            verify = after.get("sglang:spec_verify_calls_total", 0) - before.get("sglang:spec_verify_calls_total", 0)
            if verify > 0:
                out["metrics"] = tokens / verify
        try:
            info = client.get("/server_info", timeout=30.0).json()
            states = info.get("internal_states") or []
            value = states[0].get("avg_spec_accept_length") if states else None
            if isinstance(value, (int, float)) and value > 0:
                out["server_info"] = float(value)
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        return out

    def check_args(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        checks: list[ArgCheck] = []
        cmd = eff.launch_command
        if cfg.speculative_algorithm or eff.speculative_algorithm:
            asked_draft = _asked(cfg.num_draft_tokens, cmd, "--speculative-num-draft-tokens")
            if asked_draft is not None and eff.num_draft_tokens is not None and eff.num_draft_tokens != asked_draft:
                why = ""
                if eff.eagle_topk == 1 and eff.num_steps is not None and eff.num_draft_tokens == eff.num_steps + 1:
                    why = ": topk=1 forces num_steps+1"
                checks.append(ArgCheck(f"asked for {asked_draft} draft tokens, server runs {eff.num_draft_tokens}{why}", True))
            for label, asked, got in (("num_steps", _asked(cfg.num_steps, cmd, "--speculative-num-steps"), eff.num_steps),
                                      ("eagle_topk", _asked(cfg.eagle_topk, cmd, "--speculative-eagle-topk"), eff.eagle_topk)):
                if asked is not None and got is not None and asked != got:
                    checks.append(ArgCheck(f"asked for {label}={asked}, server runs {got}", True))
        asked_cap = _asked(cfg.max_running_requests, cmd, "--max-running-requests")
        if asked_cap is not None and eff.max_running_requests not in (None, asked_cap):
            checks.append(ArgCheck(f"asked for max_running_requests={asked_cap}, server runs {eff.max_running_requests}", True))
        if eff.max_running_requests is not None and eff.max_running_requests < max_concurrency:
            default = " (SGLang's default cap under speculation)" if asked_cap is None and eff.speculative_algorithm else ""
            checks.append(ArgCheck(
                f"max_running_requests is {eff.max_running_requests}{default} but the sweep goes to {max_concurrency}: "
                f"higher concurrency queues; set max_running_requests on every configuration for a fair sweep",
                asked_cap is not None,
            ))
        return checks

    def matches(self, cfg: ServerConfig, eff: EffectiveArgs) -> str | None:
        want = (cfg.speculative_algorithm or "").upper() or None
        have = eff.speculative_algorithm
        if want == have:
            return None
        if want and have and ALGORITHM_FAMILY.get(want) == ALGORITHM_FAMILY.get(have) and not launched_algorithm(eff.launch_command):
            return None  # EAGLE reported, command line unknown: NEXTN and EAGLE both fit
        return f"server runs {have or 'no speculation'}; config {cfg.name} needs {want or 'no speculation'}"
