"""Attaching to a running server: how long each kind of answer is waited for, and the one line
each failure gives, against scripted servers on a simulated clock."""

from __future__ import annotations

import httpx
import pytest

from specguard import server
from specguard.config import ServerConfig
from specguard.engines import EffectiveArgs, Engine

URL = "http://127.0.0.1:30000"


class Clock:
    """Stands in for the time module in specguard.server: sleeping advances it, nothing waits."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s

    def sleep(self, duration_s: float) -> None:
        self.now_s += duration_s


class ReadsServerInfo(Engine):
    """An adapter whose effective arguments are /server_info's model_path."""

    def read_effective_args(self, client: httpx.Client, cfg: ServerConfig | None) -> EffectiveArgs:
        r = client.get("/server_info")
        r.raise_for_status()
        return EffectiveArgs(model_path=r.json()["model_path"])


@pytest.fixture
def scripted(monkeypatch):
    """`scripted(readiness, server_info)`: the server answers the readiness route with each item of
    `readiness` in turn (a status, or an exception to raise), the last one from then on."""
    clock = Clock()
    monkeypatch.setattr(server, "time", clock)

    def install(readiness: list, server_info: httpx.Response | None = None) -> list[float]:
        asked_at_s: list[float] = []

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/server_info":
                return server_info or httpx.Response(200, json={"model_path": "/models/served"})
            asked_at_s.append(clock.now_s - 100.0)
            item = readiness[min(len(asked_at_s) - 1, len(readiness) - 1)]
            if isinstance(item, Exception):
                raise item
            return httpx.Response(item, text="loading")

        monkeypatch.setattr(server.ServerHandle, "control_client",
                            lambda self: httpx.Client(base_url=self.base_url, transport=httpx.MockTransport(handler)))
        return asked_at_s

    return install


def test_a_loading_server_is_waited_for_and_its_arguments_read(scripted):
    asked_at_s = scripted([503, 503, 200])
    handle = server.attach("eagle3", URL + "/", ReadsServerInfo())
    assert handle.base_url == URL and handle.attached and handle.effective.model_path == "/models/served"
    assert asked_at_s == [0.0, 0.5, 1.0]


def test_a_server_still_loading_at_the_deadline_is_one_line(scripted, monkeypatch):
    scripted([503])
    monkeypatch.setattr(server, "ATTACH_READY_TIMEOUT_S", 5.0)
    with pytest.raises(server.ServerStartError) as err:
        server.attach("eagle3", URL, ReadsServerInfo())
    assert str(err.value) == f"{URL}/health_generate answered 503 (still loading?); gave up after 5s"


def test_a_refused_connection_gets_a_few_seconds_to_start_answering(scripted):
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    asked_at_s = scripted([refused] * 3 + [200])
    assert server.attach("eagle3", URL, ReadsServerInfo()).effective.model_path == "/models/served"
    assert asked_at_s == [0.0, 0.5, 1.0, 1.5]
    asked_at_s = scripted([refused])
    with pytest.raises(server.ServerStartError) as err:
        server.attach("eagle3", URL, ReadsServerInfo())
    assert str(err.value) == f"{URL}: connection refused (no server listens there); start the server or fix --server-url"
    assert asked_at_s[-1] - asked_at_s[0] == server.ATTACH_PROBE_S


def test_an_unauthorised_server_fails_at_once_naming_the_key_options(scripted):
    asked_at_s = scripted([401])
    with pytest.raises(server.ServerStartError) as err:
        server.attach("eagle3", URL, ReadsServerInfo())
    assert str(err.value) == (f"{URL}/health_generate answered 401 Unauthorized: the server wants an API key; "
                              f"pass --api-key KEY or set SPECGUARD_API_KEY")
    assert asked_at_s == [0.0]


@pytest.mark.parametrize("answer,message", [
    (httpx.Response(500, text="boom"), f"{URL}/server_info answered 500; cannot read the server's arguments"),
    (httpx.Response(200, text="<html>"), f"{URL} is not an SGLang server: its server-info route did not answer JSON"),
])
def test_arguments_that_cannot_be_read_are_one_line_naming_the_route(scripted, answer, message):
    scripted([200], server_info=answer)
    with pytest.raises(server.ServerStartError) as err:
        server.attach("eagle3", URL, ReadsServerInfo())
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("typed, guess", [("htp:/127.0.0.1:30000", "http://127.0.0.1:30000"),
                                          ("127.0.0.1:30000", "http://127.0.0.1:30000"),
                                          ("localhost:30000", "http://localhost:30000"), ("ftp://h:1", "http://h:1")])
def test_a_url_without_an_http_scheme_is_one_line_with_the_url_to_type(typed, guess):
    from specguard.server import ServerStartError, check_url
    with pytest.raises(ServerStartError) as err:
        check_url(typed)
    assert str(err.value) == f"--server-url {typed!r} is not an http(s) URL; write the scheme, e.g. {guess}"
    assert check_url("http://127.0.0.1:30000/") == "http://127.0.0.1:30000"
