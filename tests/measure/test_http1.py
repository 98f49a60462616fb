"""The measured path's HTTP/1.1 response parser, fed byte by byte and in odd splits.

`_Protocol` is driven directly with a recording transport (no sockets): every body framing an
LLM server's streaming endpoint uses (fixed length, chunked with extensions and trailers,
close-delimited), the status and keep-alive rules, and each malformed input's one-line error.
The socket side (connect, reuse, retry) is covered end to end in tests/measure/test_client.py.
"""

from __future__ import annotations

import asyncio

import pytest

from specguard.measure import http1
from specguard.measure.http1 import ERROR_BODY_BYTES, MAX_HEAD_BYTES, ConnectionFailed, Endpoint, ReadTimeout, _header


class Transport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


def exchange(pieces: list[bytes], *, lost: bool = False, timeout_s: float = 30.0):
    """Start one exchange, feed the pieces, optionally lose the connection; returns
    (protocol, transport, sink pieces, the future's outcome)."""

    async def go():
        proto = http1._Protocol()
        tr = Transport()
        proto.connection_made(tr)
        got: list[tuple[bytes, float]] = []
        fut = proto.start(b"GET / HTTP/1.1\r\n\r\n", lambda piece, t: got.append((piece, t)), timeout_s)
        for p in pieces:
            proto.data_received(p)
        if lost:
            proto.connection_lost(None)
        await asyncio.sleep(0)
        if not fut.done():
            outcome = "pending"
        elif fut.exception() is not None:
            outcome = fut.exception()
        else:
            outcome = "done"
        return proto, tr, got, outcome

    return asyncio.run(go())


def body(got) -> bytes:
    return b"".join(p for p, _ in got)


def split_every(data: bytes, n: int) -> list[bytes]:
    return [data[i:i + n] for i in range(0, len(data), n)]


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"7\r\ndata: a\r\n"
           b"A;ext=1\r\n\n\ndata: bc\r\n"
           b"0\r\nX-Trailer: t\r\n\r\n")


# -- endpoint and request --------------------------------------------------------------------
def test_endpoint_from_url():
    assert Endpoint.from_url("http://127.0.0.1:30000") == Endpoint("127.0.0.1", 30000, False, "")
    assert Endpoint.from_url("https://example.org/base/") == Endpoint("example.org", 443, True, "/base")
    assert Endpoint.from_url("http://host") == Endpoint("host", 80, False, "")


@pytest.mark.parametrize("url", ["ftp://host", "127.0.0.1:30000", "http://", "https:///x"])
def test_endpoint_rejects_urls_it_cannot_serve(url):
    with pytest.raises(ValueError, match="server URL must be http:// or https:// with a host"):
        Endpoint.from_url(url)


def test_request_bytes():
    req = Endpoint("h", 8080, False, "/v").request_bytes("POST", "/generate", b'{"a":1}', {"Authorization": "Bearer k"})
    assert req == (b"POST /v/generate HTTP/1.1\r\nHost: h:8080\r\nContent-Length: 7\r\n"
                   b"Authorization: Bearer k\r\n\r\n{\"a\":1}")


@pytest.mark.parametrize("ep, host", [
    (Endpoint("h", 80), b"Host: h\r\n"), (Endpoint("h", 443, True), b"Host: h\r\n"),
    (Endpoint("h", 443), b"Host: h:443\r\n"), (Endpoint("::1", 8000), b"Host: [::1]:8000\r\n"),
])
def test_host_header_omits_the_default_port_and_brackets_ipv6(ep, host):
    assert host in ep.request_bytes("GET", "/", b"", {})


def test_header_lookup():
    head = b"http/1.1 200 ok\r\ncontent-length: 12 \r\nx-a: 1\r\n"
    assert _header(head, b"content-length") == b"12"
    assert _header(head, b"x-a") == b"1"
    assert _header(head, b"length") == b""  # whole names only


# -- framings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_chunked_body_in_any_split(n):
    proto, tr, got, outcome = exchange(split_every(CHUNKED, n))
    assert outcome == "done" and body(got) == b"data: a\n\ndata: bc"
    assert proto.status == 200 and proto.keep_alive and not tr.closed
    assert tr.written == b"GET / HTTP/1.1\r\n\r\n"


def test_each_piece_carries_the_time_its_read_arrived():
    proto, _, got, _ = exchange([CHUNKED[:90], CHUNKED[90:]])
    times = [t for _, t in got]
    assert times == sorted(times) and all(t > 0 for t in times)
    assert proto.last_rx_s == times[-1]


@pytest.mark.parametrize("n", [1, 5, 1000])
def test_fixed_length_body_stops_at_its_length(n):
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA"
    _, _, got, outcome = exchange(split_every(raw, n))
    assert outcome == "done" and body(got) == b"hello"


def test_zero_length_body_finishes_at_the_head():
    _, _, got, outcome = exchange([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    assert outcome == "done" and got == []


@pytest.mark.parametrize("status", [204, 304])
def test_bodiless_statuses_finish_at_the_head(status):
    proto, _, _, outcome = exchange([f"HTTP/1.1 {status} X\r\n\r\n".encode()])
    assert outcome == "done" and proto.status == status


def test_close_delimited_body_ends_with_the_connection():
    proto, _, got, outcome = exchange([b"HTTP/1.1 200 OK\r\n\r\nab", b"cd"], lost=True)
    assert outcome == "done" and body(got) == b"abcd" and not proto.keep_alive


def test_informational_responses_are_skipped():
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    proto, _, got, outcome = exchange([raw])
    assert outcome == "done" and proto.status == 200 and body(got) == b"ok"


@pytest.mark.parametrize("head, keep", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nCONNECTION: Close\r\nContent-Length: 0\r\n\r\n", False),  # names and values any case
])
def test_keep_alive_rules(head, keep):
    proto, _, _, _ = exchange([head])
    assert proto.keep_alive is keep


# -- non-200 ----------------------------------------------------------------------------------
def test_error_body_is_kept_not_streamed_and_capped():
    big = b"x" * (ERROR_BODY_BYTES + 500)
    raw = b"HTTP/1.1 500 Internal\r\nContent-Length: %d\r\n\r\n" % len(big) + big
    proto, _, got, outcome = exchange(split_every(raw, 700))
    assert outcome == "done" and got == [] and proto.status == 500
    assert bytes(proto.error_body) == b"x" * ERROR_BODY_BYTES


# -- malformed input: one clear error, the connection closed ------------------------------------
@pytest.mark.parametrize("raw, message", [
    (b"SPDY/3 200 OK\r\n\r\n", "not an HTTP/1.x response"),
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "not an HTTP/1.x response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: twelve\r\n\r\n", "bad content-length b'twelve'"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size line b'zz'"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", "chunk not followed by CRLF"),
])
def test_malformed_responses_fail_the_exchange(raw, message):
    _, tr, _, outcome = exchange([raw])
    assert isinstance(outcome, ConnectionFailed) and message in str(outcome)
    assert tr.closed


def test_headers_too_long():
    _, tr, _, outcome = exchange([b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD_BYTES])
    assert isinstance(outcome, ConnectionFailed) and "response headers too long" in str(outcome)


def test_head_split_across_reads_is_kept_until_complete():
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
    _, _, got, outcome = exchange([raw[:10], raw[10:30], raw[30:]])
    assert outcome == "done" and body(got) == b"abc"


def test_a_sink_error_fails_the_exchange_and_closes():
    async def go():
        proto, tr = http1._Protocol(), Transport()
        proto.connection_made(tr)

        def sink(piece, t):
            raise ValueError("bad stream")

        fut = proto.start(b"GET", sink, 30.0)
        proto.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab")
        return fut.exception(), tr.closed, proto.closed

    exc, tr_closed, closed = asyncio.run(go())
    assert isinstance(exc, ValueError) and tr_closed and closed


@pytest.mark.parametrize("pieces, where", [([], "before"), ([b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc"], "during")])
def test_connection_lost_mid_exchange(pieces, where):
    _, _, _, outcome = exchange(pieces, lost=True)
    assert isinstance(outcome, ConnectionFailed)
    assert str(outcome) == f"server closed the connection ({where} the response)"


def test_bytes_nobody_asked_for_poison_the_connection():
    proto, tr = http1._Protocol(), Transport()
    proto.connection_made(tr)
    proto.data_received(b"HTTP/1.1 200 OK\r\n\r\n")
    assert proto.closed and tr.closed


def test_read_timeout_fires_only_after_silence():
    async def go():
        proto, tr = http1._Protocol(), Transport()
        proto.connection_made(tr)
        fut = proto.start(b"GET", lambda p, t: None, 0.05)
        try:
            await asyncio.wait_for(asyncio.shield(fut), 2.0)
        except ReadTimeout as exc:
            return str(exc), tr.closed
        return "no timeout", tr.closed

    message, closed = asyncio.run(go())
    assert message == "no data for 0.05s" and closed


# -- Connection bookkeeping (no socket needed) ---------------------------------------------------
def test_tls_endpoints_get_a_verifying_context_and_plain_ones_none():
    import ssl

    tls = http1.Connection(Endpoint("h", 443, True))
    assert isinstance(tls._ssl, ssl.SSLContext) and tls._ssl.verify_mode == ssl.CERT_REQUIRED
    assert http1.Connection(Endpoint("h", 80))._ssl is None


def test_close_marks_the_protocol_closed_and_forgets_it():
    conn = http1.Connection(Endpoint("h", 80))
    proto, tr = http1._Protocol(), Transport()
    proto.connection_made(tr)
    conn._proto = proto
    conn.close()
    assert proto.closed and tr.closed and conn._proto is None
    conn.close()  # twice is harmless
