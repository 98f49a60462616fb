"""The builds an A/B comparison or a bisect measures, as the command line and build files give them.

A build is what differs between two measurements of the same suite: another interpreter (a
virtual environment with another engine build: ``python=PATH``), extra launch flags per
configuration (``args=NAME="ARGS"``), or, in attach mode, the URLs of servers someone else
started. Every malformed value is a ``UsageError`` whose one line names the flag or the file line.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specguard.ab.schema import AbBuildDoc
from specguard.server import ServerStartError, check_url


class UsageError(ValueError):
    """A bad option or build file: one line naming the flag (exit 4)."""


@dataclass(frozen=True)
class Build:
    """One side of a comparison. ``urls``: attach mode, configuration (None: every one) -> URL."""

    name: str
    python: str | None = None
    server_args: dict[str, list[str]] = field(default_factory=dict)
    urls: dict[str | None, str] = field(default_factory=dict)

    @property
    def attach(self) -> bool:
        return bool(self.urls)

    def describe(self) -> str:
        """One line: what this build is."""
        if self.urls:
            return ", ".join(f"{name}={url}" if name else url for name, url in self.urls.items())
        parts = [f"python={self.python}"] if self.python else []
        parts += [f"{name}: {shlex.join(args)}" for name, args in self.server_args.items()]
        return "; ".join(parts) or "the suite file as written"

    def to_json(self) -> AbBuildDoc:
        return {"name": self.name, "python": self.python, "server_args": self.server_args,
                "urls": {name or "*": url for name, url in self.urls.items()}}


def _check_config(name: str, where: str, configs: Sequence[str]) -> None:
    if name not in configs:
        raise UsageError(f"{where}: no configuration {name!r} in the suite; it has {', '.join(configs)}")


def _check_python(path: str, where: str) -> str:
    if not Path(path).is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"{where}: {path!r} is not an executable file (the interpreter of a virtual environment, "
                         f"e.g. /path/to/venv/bin/python)")
    return path


def parse_server_args(values: Sequence[str], flag: str, configs: Sequence[str]) -> dict[str, list[str]]:
    """``NAME="ARGS"`` values: configuration -> extra launch flags (repeated names add up)."""
    out: dict[str, list[str]] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise UsageError(f"{flag} takes NAME=\"ARGS\" (e.g. eagle3=\"--emulator-step-scale 1.03\"), got {value!r}")
        _check_config(name, f"{flag} {value!r}", configs)
        try:
            out.setdefault(name, []).extend(shlex.split(text))
        except ValueError as exc:
            raise UsageError(f"{flag} {value!r}: {exc}") from None
    return out


def parse_urls(values: Sequence[str], flag: str, configs: Sequence[str]) -> dict[str | None, str]:
    """``[NAME=]URL`` values: configuration -> URL, None -> the URL for every configuration."""
    out: dict[str | None, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        key: str | None = name
        if not sep or name.startswith(("http://", "https://")):
            key, url = None, value
        else:
            _check_config(name, f"{flag} {value!r}", configs)
        if key in out:
            raise UsageError(f"{flag}: {'configuration ' + repr(key) if key else 'a bare URL'} is given twice")
        try:
            out[key] = check_url(url, flag)
        except ServerStartError as exc:
            raise UsageError(str(exc)) from None
    return out


@dataclass(frozen=True)
class BuildFlags:
    """One build's `specguard ab` flags as given: --X-python, --X-server-args, --X-url."""

    python: str | None = None
    server_args: Sequence[str] = ()
    urls: Sequence[str] = ()


def ab_builds(a_flags: BuildFlags, b_flags: BuildFlags, configs: Sequence[str]) -> tuple[Build, Build]:
    """Builds A and B from `specguard ab`'s flags: launch mode (python and/or server args) or
    attach mode (URLs for both), never a mix."""
    launch_given = any(f.python or f.server_args for f in (a_flags, b_flags))
    if (a_flags.urls or b_flags.urls) and launch_given:
        raise UsageError("--a-url/--b-url (attach mode) cannot be combined with --a-python/--b-python/"
                         "--a-server-args/--b-server-args (launch mode); give one mode")
    if a_flags.urls or b_flags.urls:
        return _attach_builds(a_flags.urls, b_flags.urls, configs)
    a, b = (Build(key, _check_python(f.python, f"--{key.lower()}-python") if f.python else None,
                  parse_server_args(f.server_args, f"--{key.lower()}-server-args", configs))
            for key, f in (("A", a_flags), ("B", b_flags)))
    if a.python == b.python and a.server_args == b.server_args:
        raise UsageError("builds A and B are the same: give --b-python PATH, --b-server-args NAME=\"ARGS\" "
                         "(or the --a-* ones), or --a-url/--b-url")
    return a, b


def _attach_builds(a_urls: Sequence[str], b_urls: Sequence[str], configs: Sequence[str]) -> tuple[Build, Build]:
    if not (a_urls and b_urls):
        raise UsageError(f"attach mode needs both builds' servers: add {'--b-url' if a_urls else '--a-url'} [NAME=]URL")
    return (Build("A", urls=parse_urls(a_urls, "--a-url", configs)),
            Build("B", urls=parse_urls(b_urls, "--b-url", configs)))


def parse_build(text: str, where: str, name: str, configs: Sequence[str]) -> Build:
    """One build line: ``python=PATH`` and/or ``args=NAME="ARGS"`` (repeatable), shell-quoted."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    python: str | None = None
    args: list[str] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if key == "python" and sep and value:
            if python is not None:
                raise UsageError(f"{where}: python= is given twice")
            python = _check_python(value, where)
        elif key == "args" and sep:
            args.append(value)
        else:
            raise UsageError(f"{where}: {token!r} is neither python=PATH nor args=NAME=\"ARGS\"")
    if python is None and not args:
        raise UsageError(f"{where}: an empty build; write python=PATH and/or args=NAME=\"ARGS\"")
    return Build(name, python, parse_server_args(args, f"{where}: args=", configs))


def read_builds(path: str | None, options: Sequence[str], configs: Sequence[str]) -> list[Build]:
    """The ordered builds of a bisect: the file's (one a line; blank lines and # comments
    skipped), then the --build options'."""
    lines: list[tuple[str, str]] = []
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--builds {path}: {exc.strerror or exc}") from None
        lines += [(f"{path}:{i}", line) for i, line in enumerate(text.splitlines(), 1)
                  if line.strip() and not line.lstrip().startswith("#")]
    lines += [(f"--build {value!r}", value) for value in options]
    builds = [parse_build(line, where, f"build {n}", configs) for n, (where, line) in enumerate(lines, 1)]
    if len(builds) < 3:
        raise UsageError(f"bisect needs at least 3 builds (a good one, one to test, a bad one), got {len(builds)}: "
                         f"give --builds FILE or --build SPEC per build")
    return builds


__all__ = ["Build", "BuildFlags", "UsageError", "ab_builds", "parse_build", "parse_server_args", "parse_urls", "read_builds"]
