"""`specguard init [DIR]`: a starter for a repository of its own (a suite file, the gate tests and
a CI workflow), from the embedded emulator or from a running server's /server_info."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from specguard.config import ConfigError, parse_suite
from specguard.engines import EffectiveArgs, get_engine
from specguard.server import ServerStartError, check_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STARTER = Path(__file__).parent / "data" / "starter"
CONFIG_NAMES = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "STANDALONE": "standalone", "NGRAM": "ngram"}
LEVELS = (1, 4, 16, 64)


class InitError(Exception):
    """What init could not do, in one line; `code` is the exit code (4 usage, 3 unreachable server)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Starter:
    """The files init writes: path -> text."""

    files: dict[Path, str]


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def _server_table(name: str, keys: Mapping[str, object]) -> str:
    lines = [f"[servers.{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in keys.items() if v is not None]
    return "\n".join(lines) + "\n"


def suite_from_server(url: str, eff: EffectiveArgs) -> str:
    """A suite describing the attached server: its own configuration, and where it speculates a
    reference without speculation on the same model (which needs its own server or a launch)."""
    cap = eff.max_running_requests
    levels = [c for c in LEVELS if cap is None or c <= cap] or [1]
    base = {"engine": "sglang", "model_path": eff.model_path, "max_running_requests": cap}
    head = (f"# specguard suite written by `specguard init --server-url {url}` from the server's /server_info\n"
            f"# (SGLang {eff.engine_version or 'unknown version'}). Every key: docs/suite-file.md.\n")
    body = (f"\n[sweep]\nconcurrency = {levels}\nrequests_per_worker = 4\nwarmup = 1\nrepeats = 3\n\n"
            f"[workload]\nkind = \"random-ids\"\ninput_len = 128\noutput_len = 64\n\n"
            f"[tolerances]\nthroughput = 0.03\naccept_length = 0.03\nfamily_alpha = 0.01\n\n")
    algo = eff.speculative_algorithm
    if not algo:
        return head + f"# Gate it: pytest perf_tests --server-url {url}\n" + body + _server_table("baseline", base)
    name = CONFIG_NAMES.get(algo.upper(), algo.lower())
    spec = {**base, "speculative_algorithm": algo.upper(), "draft_model_path": eff.draft_model_path,
            "num_steps": eff.num_steps, "eagle_topk": eff.eagle_topk if algo.upper() != "NGRAM" else None,
            "num_draft_tokens": eff.num_draft_tokens, "reference": "baseline"}
    return (head + f"# Gate it: pytest perf_tests --server-url {name}={url} --server-url baseline=URL\n"
            f"# where URL serves the same model without speculation (or drop that flag and let specguard\n"
            f"# launch `baseline` with python -m sglang.launch_server: add its launch flags to `args`).\n"
            + body + _server_table("baseline", base) + "\n" + _server_table(name, spec))


def read_server(url: str, api_key: str | None = None) -> EffectiveArgs:
    try:
        check_url(url)
    except ServerStartError as exc:
        raise InitError(str(exc), 4) from None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            return get_engine("sglang").read_effective_args(client, None)
    except (httpx.HTTPError, ValueError) as exc:
        raise InitError(f"--server-url {url}: could not read /server_info ({type(exc).__name__}: {exc}); "
                        f"is an SGLang server running there?", 3) from None


def starter(directory: Path, suite_text: str, workflow_root: Path) -> Starter:
    """The files for `directory` (perf_tests/) and the workflow under `workflow_root`."""
    tests_dir = os.path.relpath(directory, workflow_root)
    workflow = (STARTER / "workflow.yml").read_text(encoding="utf-8").replace("{tests_dir}", tests_dir)
    return Starter({directory / "suite.toml": suite_text,
                    directory / "test_speculation.py": (STARTER / "test_speculation.py").read_text(encoding="utf-8"),
                    workflow_root / ".github" / "workflows" / "specguard.yml": workflow})


def write(files: Starter, force: bool) -> list[Path]:
    """Every file, or none when one exists already (unless `force`)."""
    existing = [p for p in files.files if p.exists()]
    if existing and not force:
        raise InitError(f"{existing[0]} exists; keep it, or pass --force to overwrite "
                        f"({len(existing)} of the {len(files.files)} files exist)", 4)
    for path, text in files.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files.files)


def init(directory: Path, server_url: str | None = None, force: bool = False, api_key: str | None = None,
         workflow_root: Path | None = None) -> list[Path]:
    """Write the starter; the suite is checked by specguard's own reader before anything is written."""
    text = suite_from_server(server_url, read_server(server_url, api_key)) if server_url \
        else (STARTER / "suite.toml").read_text(encoding="utf-8")
    try:
        parse_suite(tomllib.loads(text), directory / "suite.toml")
    except (ConfigError, tomllib.TOMLDecodeError) as exc:
        raise InitError(f"the server's settings make no valid suite ({exc}); write suite.toml by hand "
                        f"(docs/suite-file.md)", 4) from None
    return write(starter(directory, text, workflow_root or Path.cwd()), force)
