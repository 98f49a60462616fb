"""Server lifecycle: launch in its own process group, wait until it can generate, stop it whole.

Or attach to a running server. Either way the effective arguments are read back from the server,
because SGLang silently rewrites some of what it is asked (draft tokens, running-request cap).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from specguard.config import ServerConfig
from specguard.engines import EffectiveArgs, Engine, redact

LOG_TAIL_LINES = 30
HOST = "127.0.0.1"


class ServerStartError(RuntimeError):
    """The server did not become ready; the message has the command, exit code and log tail."""


@dataclass
class ServerHandle:
    name: str
    base_url: str
    engine: Engine
    effective: EffectiveArgs
    process: subprocess.Popen[bytes] | None = None  # None when attached
    log_path: Path | None = None
    command: list[str] = field(default_factory=list)  # redacted
    api_key: str | None = None

    @property
    def attached(self) -> bool:
        return self.process is None

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def alive_after(self, grace_s: float) -> bool:
        """Still running ``grace_s`` after a sign that it may have died (refused connections): a
        crashing server closes its socket before its process is reaped, so one poll can miss it."""
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return True
        return False

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def control_client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0)


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    if path is None or not path.exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    """A port that is free now; launch retries with another if the server loses the race."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _port_in_use_failure(log_path: Path) -> bool:
    text = log_tail(log_path, 50).lower()
    return "address already in use" in text or "errno 98" in text


def launch(cfg: ServerConfig, engine: Engine, *, log_dir: Path, api_key: str | None = None,
           port: int | None = None, attempts: int = 3) -> ServerHandle:
    """Start the server and return once it answers its readiness probe within the configuration's
    `startup_timeout_s`; raise ServerStartError otherwise."""
    last_error: ServerStartError | None = None
    for attempt in range(attempts):
        try:
            return _launch_once(cfg, engine, log_dir=log_dir, api_key=api_key,
                                ready_timeout_s=cfg.startup_timeout_s,
                                port=port if (port and attempt == 0) else free_port())
        except _PortTaken as exc:
            last_error = ServerStartError(str(exc))
    assert last_error is not None
    raise last_error


class _PortTaken(ServerStartError):
    pass


def _launch_once(cfg: ServerConfig, engine: Engine, *, log_dir: Path, api_key: str | None,
                 ready_timeout_s: float, port: int) -> ServerHandle:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"server-{cfg.name}-{port}.log"
    argv = engine.launch_command(cfg, HOST, port, api_key)
    shown = redact(argv, [api_key] if api_key else [])
    env = dict(os.environ)
    env.update(cfg.launch_env)
    env.pop("SPECGUARD_API_KEY", None)  # the server gets its key as a flag only
    if cfg.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = cfg.gpus
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(shown) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    base_url = f"http://{HOST}:{port}"
    handle = ServerHandle(name=cfg.name, base_url=base_url, engine=engine, effective=EffectiveArgs(),
                          process=proc, log_path=log_path, command=shown, api_key=api_key)
    try:
        wait_ready(handle, ready_timeout_s)
        with handle.control_client() as client:
            handle.effective = engine.read_effective_args(client, cfg)
    except ServerStartError as exc:
        stop(handle)
        if proc.returncode not in (None, 0) and _port_in_use_failure(log_path):
            raise _PortTaken(str(exc)) from None
        raise
    except (httpx.HTTPError, ValueError) as exc:
        stop(handle)
        raise ServerStartError(_start_failure(handle, f"could not read its arguments back: {exc}")) from None
    except BaseException:
        stop(handle)  # Ctrl-C while starting: nothing left running
        raise
    return handle


def _start_failure(handle: ServerHandle, what: str) -> str:
    code = handle.process.returncode if handle.process else None
    return (f"server {handle.name!r} {what}\n  command: {' '.join(handle.command)}\n  exit code: {code}\n"
            f"  log: {handle.log_path}\n  last lines:\n{handle.log_tail()}")


def wait_ready(handle: ServerHandle, timeout_s: float, poll_s: float = 0.5) -> None:
    """Poll the readiness route until 200; fail fast if the process exits; bounded by timeout_s."""
    deadline = time.monotonic() + timeout_s
    path = handle.engine.readiness_path
    with handle.control_client() as client:
        while True:
            if handle.process is not None and handle.process.poll() is not None:  # a launched server that exited
                handle.process.wait()
                raise ServerStartError(_start_failure(handle, "exited during start-up"))
            try:
                if client.get(path, timeout=min(10.0, timeout_s)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() >= deadline:
                raise ServerStartError(_start_failure(handle, f"was not ready ({path} != 200) after {timeout_s:g}s"))
            time.sleep(poll_s)


def stop(handle: ServerHandle, grace_s: float = 15.0) -> None:
    """SIGTERM the whole process group, wait, then SIGKILL. Only the group we started."""
    proc = handle.process
    if proc is None or proc.returncode is not None and not _group_alive(proc.pid):
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    if _group_alive(proc.pid):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace_s)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


ATTACH_PROBE_S = 3.0  # how long a refused connection may take to start answering when attaching


def shorten_text(text: str, width: int) -> str:
    """Cut at a word boundary with an ellipsis, never mid-word."""
    return text if len(text) <= width else textwrap.shorten(text, width=width, placeholder=" ...")


def check_url(url: str, flag: str = "--server-url") -> str:
    """The URL without a trailing slash, or ServerStartError when it cannot be a server URL."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        guess = "http://" + re.sub(r"^[A-Za-z][\w+.-]*:/+", "", url)  # a mistyped scheme ("htp:/h") replaced
        raise ServerStartError(f"{flag} {url!r} is not an http(s) URL; write the scheme, e.g. {guess}")
    return url.rstrip("/")


def _refusal(exc: httpx.HTTPError, url: str, flag: str = "--server-url") -> str | None:
    """One line for a transport error: refused, unresolved name, timeout; None if not a transport error."""
    host = urlsplit(url).hostname or url
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        low = text.lower()
        if "name or service not known" in low or "nodename nor servname" in low or "name resolution" in low \
                or "no address associated" in low or "getaddrinfo" in low:
            return f"{url}: host name {host!r} could not be resolved; check {flag}"
        if "refused" in low or "errno 111" in low:
            return f"{url}: connection refused (no server listens there); start the server or fix {flag}"
        return f"{url}: could not connect ({text}); check {flag}"
    if isinstance(exc, httpx.TimeoutException):
        return f"{url}: no answer within the timeout ({type(exc).__name__}); the server is overloaded or the address is wrong"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.LocalProtocolError)):
        return f"{url}: does not speak HTTP as expected ({text}); is it an SGLang server (http, not https)?"
    if isinstance(exc, httpx.TransportError):
        return f"{url}: transport error {type(exc).__name__}: {text}"
    return None


def http_status_problem(status: int, url: str, path: str, body: str = "", flag: str = "--server-url") -> str | None:
    """One line for a status a user can act on (401/403/404); None for others."""
    if status in (401, 403):
        return (f"{url}{path} answered {status} {'Unauthorized' if status == 401 else 'Forbidden'}: the server "
                f"wants an API key; pass --api-key KEY or set SPECGUARD_API_KEY")
    if status in (404, 405):
        snippet = " ".join(body.split())
        snippet = "" if snippet.startswith("<") else shorten_text(snippet, 80)  # an HTML page says nothing useful
        return (f"{url} is not an SGLang server: GET {path} answered {status}"
                f"{' (' + snippet + ')' if snippet else ''}; point {flag} at SGLang's HTTP port")
    return None


# How long an attached server that answers but is still loading (503) is waited for: a model
# that loads for minutes is the user's to wait out before attaching, not the gate's.
ATTACH_READY_TIMEOUT_S = 30.0


def attach(name: str, url: str, engine: Engine, *, api_key: str | None = None,
           cfg: ServerConfig | None = None, flag: str = "--server-url") -> ServerHandle:
    """Use a running server. Unreachable, unauthorised or non-SGLang addresses fail within
    seconds with one line; a server that answers but is still loading gets ATTACH_READY_TIMEOUT_S."""
    handle = ServerHandle(name=name, base_url=check_url(url, flag), engine=engine, effective=EffectiveArgs(), api_key=api_key)
    with handle.control_client() as client:
        _wait_attachable(client, handle.base_url, engine.readiness_path, ATTACH_READY_TIMEOUT_S, flag)
        handle.effective = _read_attached_args(client, engine, cfg, handle.base_url, flag)
    return handle


def _wait_attachable(client: httpx.Client, base: str, path: str, ready_timeout_s: float, flag: str) -> None:
    """Poll `path` until 200. A refused connection gets ATTACH_PROBE_S to start answering, a
    server that answers (still loading) ready_timeout_s; anything else fails at once."""
    refused_until = time.monotonic() + ATTACH_PROBE_S
    deadline = time.monotonic() + ready_timeout_s
    last = ""
    while True:
        try:
            r = client.get(path, timeout=min(10.0, ready_timeout_s))
        except httpx.HTTPError as exc:
            problem = _refusal(exc, base, flag) or f"{base}: {type(exc).__name__}: {exc}"
            if not isinstance(exc, httpx.ConnectError) or "resolved" in problem or time.monotonic() >= refused_until:
                raise ServerStartError(problem) from None
            last = problem
        else:
            if r.status_code == 200:
                return
            status_problem = http_status_problem(r.status_code, base, path, r.text, flag)
            if status_problem:
                raise ServerStartError(status_problem)
            last = f"{base}{path} answered {r.status_code} (still loading?)"
        if time.monotonic() >= deadline:
            raise ServerStartError(f"{last or base + ' not ready'}; gave up after {ready_timeout_s:g}s")
        time.sleep(0.5)


def _read_attached_args(client: httpx.Client, engine: Engine, cfg: ServerConfig | None, base: str,
                        flag: str) -> EffectiveArgs:
    """The attached server's effective arguments; a route that fails is one line naming it."""
    try:
        return engine.read_effective_args(client, cfg)
    except httpx.HTTPStatusError as exc:
        resp = exc.response
        problem = http_status_problem(resp.status_code, base, resp.request.url.path, resp.text, flag)
        raise ServerStartError(problem or f"{base}{resp.request.url.path} answered {resp.status_code}; "
                                          f"cannot read the server's arguments") from None
    except httpx.HTTPError as exc:
        raise ServerStartError(_refusal(exc, base, flag) or f"{base}: {type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise ServerStartError(f"{base} is not an SGLang server: its server-info route did not answer JSON ({exc})") from None
