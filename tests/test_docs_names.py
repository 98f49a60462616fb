"""The names the user's guide gives exist in the code: every suite-file key it writes as
`[table] key` or `table.key`, every `--option`, every exit code, and every TOML snippet loads as
part of a suite. (A review found 5 of 7 claims wrong, among them `[sweep] relaunch`, which the
loader rejects.) The research pages (docs/research/) quote other tools' flags and are not read."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest
import tomllib

from specguard.cli import build_parser
from specguard.config import ADVANCED_KEYS, ServerConfig, SoakConfig, SweepConfig, Tolerances, load_suite
from specguard.emulator.launch_server import build_arg_parser
from specguard.labels import ExitCode
from specguard.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TABLES = {"servers": ServerConfig, "sweep": SweepConfig, "workload": WorkloadSpec, "tolerances": Tolerances,
          "soak": SoakConfig}


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _keys() -> dict[str, set[str]]:
    """The keys each table of a suite file takes, as it is written (advanced keys under [advanced])."""
    keys = {table: {f.name for f in dataclasses.fields(cls) if ADVANCED_KEYS.get(f.name) != table}
            for table, cls in TABLES.items()}
    keys["advanced"] = set(ADVANCED_KEYS)
    return keys


def _spans(text: str) -> list[str]:
    """The inline code spans of a page (fenced blocks left out)."""
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


def test_every_suite_file_key_the_guide_names_is_one_the_loader_takes():
    """A key in a code span as `[table] key` or `table.key`; a span quoting the loader's error for a
    key in its old place (".. moved to the [advanced] table ..") names the old place on purpose."""
    keys, wrong = _keys(), []
    mention = re.compile(r"^\[(servers\.[\w-]+|[a-z]+)\] ([a-z_]+)|^(sweep|workload|tolerances|soak|advanced)\.([a-z_]+)")
    for page in USER_DOCS:
        for span in _spans(_text(page)):
            m = mention.match(span)
            if m is None or "moved to the [advanced] table" in span:
                continue
            table, key = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            table = table.split(".")[0]
            if table not in keys or key not in keys[table]:
                wrong.append(f"{page.relative_to(ROOT)}: [{table}] {key}")
    assert not wrong, wrong


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found = set()
    for action in parser._actions:
        found.update(s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def _pytest_options(config: pytest.Config) -> set[str]:
    """Every long option of this pytest session's parser, aliases included (``--help`` shows one
    name each): pytest's, its plugins' and specguard's."""
    parser = config._parser
    return {name for group in [parser._anonymous, *parser._groups] for option in group.options
            for name in option.names() if name.startswith("--")}


# Options of other programs the guide names on their own (not after the program's name).
FOREIGN = {"--nodelist": "Slurm's srun and sbatch", "--no-deps": "pip install", "--speculative-config": "vLLM's serve",
           "--goodput": "SGLang's bench_serving"}
OURS = ("pytest", "specguard", "python -m pytest", "python -m sglang.launch_server")
EMULATE_ALIASES = {"--profile"}  # `specguard emulate --profile NAME` is --emulator-profile NAME (cli.cmd_emulate)


def _named_options(text: str) -> set[str]:
    """The options of inline code spans that are an option, or a command line of pytest, specguard
    or SGLang's launcher (a span starting with another program, e.g. `gh pr comment --body-file`,
    names that program's)."""
    found = set()
    for span in _spans(text):
        if span.startswith("--") or span.startswith(OURS):
            found |= set(re.findall(r"(?:^|\s)(--[a-z][\w-]*[a-z0-9])(?![\w*-])", span))
    return found - set(FOREIGN)


def _script_options() -> set[str]:
    """The options this repository's scripts and modules spell as string literals (argparse's
    add_argument, or a flag read from argv): benchmarks/, tools/, research/ and runnable modules
    of specguard/ (``python -m specguard.timeline.synthetic``), which the guide names beside
    the figures they measured."""
    found = set()
    for d in ("benchmarks", "tools", "research", "specguard"):
        for script in (ROOT / d).rglob("*.py"):
            found |= set(re.findall(r"[\"'](--[a-z][\w-]*)[\"']", script.read_text(encoding="utf-8")))
    return found


def test_every_option_the_guide_names_exists(pytestconfig):
    """pytest's and the plugin's options, every `specguard` command's, and the emulator's (SGLang's
    launch flags, which `specguard emulate` takes)."""
    known = (_pytest_options(pytestconfig) | _options(build_parser()) | _options(build_arg_parser())
             | _script_options() | EMULATE_ALIASES)
    named = {page: _named_options(_text(page)) for page in USER_DOCS}
    assert sum(map(len, named.values())) > 30, "the guide names almost no options: is the pattern still right?"
    wrong = [f"{page.relative_to(ROOT)}: {opt}" for page, opts in named.items() for opt in sorted(opts - known)]
    assert not wrong, wrong


def test_every_exit_code_the_guide_names_is_an_exit_code():
    codes = {int(c) for page in USER_DOCS for c in re.findall(r"\bexit(?:s| codes?)? (\d+)\b", _text(page))}
    assert codes and codes <= {int(c) for c in ExitCode}, codes


def _merged(base: dict, snippet: dict) -> dict:
    out = dict(base)
    for key, value in snippet.items():
        out[key] = _merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def _toml_line(key: str, value: object) -> str:
    return f"{key} = {value!r}".replace("'", '"').replace("True", "true").replace("False", "false")


def _dump(doc: dict, prefix: str = "") -> list[str]:
    lines = [_toml_line(k, v) for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            name = f"{prefix}{k}"
            lines += [f"[{name}]", *_dump(v, f"{name}.")]
    return lines


@pytest.mark.parametrize("page", [p for p in USER_DOCS if "```toml" in _text(p)], ids=lambda p: p.name)
def test_every_suite_file_snippet_in_the_guide_loads(page, tmp_path):
    """Each ```toml block, merged into the default suite (a snippet is a fragment of one), loads."""
    base = tomllib.loads(_text(ROOT / "perf_tests" / "suite.toml"))
    for i, block in enumerate(re.findall(r"```toml\n(.*?)```", _text(page), flags=re.S)):
        suite = tmp_path / f"snippet-{i}.toml"
        suite.write_text("\n".join(_dump(_merged(base, tomllib.loads(block)))) + "\n", encoding="utf-8")
        load_suite(suite)


def test_the_results_page_lists_every_note_kind_with_its_figures():
    """docs/results.md's notes table is the document's contract for `notes` and `run_notes`: a kind
    the code writes and the page does not list is a reader's guess."""
    from specguard.notes import NoteKind

    section = _text(ROOT / "docs" / "results.md").split("### Notes", 1)[1].split("\n### ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_0-9]+)` \|", section, flags=re.M))
    assert listed - {"kind"} == {k.value for k in NoteKind}  # "kind": the header row
