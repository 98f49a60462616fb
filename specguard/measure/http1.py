"""A kept-alive HTTP/1.1 connection that streams one response at a time, timed where bytes arrive.

The load generator's transport. General-purpose clients (httpx, aiohttp) hand body bytes to a
reading task: each chunk costs a task wake-up, the arrival time is taken when that task runs
(late by however much other work the event loop had queued), and each request pays for URL
parsing, header merging and response objects. Here the request is pre-encoded bytes written
to the socket, and `data_received` (the moment asyncio reads the socket) takes the time, removes
the chunked framing and passes body bytes with that time straight to a sink: the SSE parser.
Only what an LLM server's streaming endpoint needs: fixed-length, chunked or close-delimited
bodies, keep-alive, plain TCP or TLS; no redirects, proxies or compression (none is asked for).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

Sink = Callable[[bytes, float], None]  # (body bytes, arrival time in perf_counter seconds)
MAX_HEAD_BYTES = 64 * 1024
ERROR_BODY_BYTES = 2000  # kept of a non-200 body, for the error message
# Parser states, in this order: the chunked body's states are those below _LENGTH.
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class ReadTimeout(Exception):
    """No bytes arrived for the read timeout."""


class ConnectionFailed(Exception):
    """The connection could not be made, or broke, or the bytes were not HTTP/1.x."""


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: host, port, TLS, and the base path that routes are appended to."""

    host: str
    port: int
    tls: bool = False
    base_path: str = ""

    @classmethod
    def from_url(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server URL must be http:// or https:// with a host, got {base_url!r}")
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))

    def request_bytes(self, method: str, route: str, body: bytes, headers: dict[str, str]) -> bytes:
        """The whole request, encoded once (before any clock starts)."""
        name = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal goes in brackets
        host = name if self.port == (443 if self.tls else 80) else f"{name}:{self.port}"
        lines = [f"{method} {self.base_path}{route} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _no_sink(piece: bytes, arrival_s: float) -> None:
    """The sink between exchanges (no body is expected then)."""


class _Protocol(asyncio.Protocol):
    """Parses responses as bytes arrive; one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Sink = _no_sink
        self._state = _DONE
        self._pending = b""
        self._left = 0  # bytes left in the current chunk or fixed-length body
        self.status = 0
        self.keep_alive = True
        self.error_body = bytearray()
        self.last_rx_s = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._read_timeout_s = 0.0

    # -- asyncio callbacks ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # create_connection() hands a stream transport (plain or TLS): both are asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _UNTIL_CLOSE and exc is None:
            self._finish()
        elif self._waiter is not None:
            reason = f"{type(exc).__name__}: {exc}" if exc else "server closed the connection"
            self._fail(ConnectionFailed(f"{reason} ({'before' if self._state == _HEAD else 'during'} the response)"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        self.last_rx_s = t
        if self._waiter is None:
            self._close_transport()  # bytes nobody asked for: the connection cannot be trusted
            return
        try:
            if self._state == _HEAD:
                body = self._head(self._pending + data if self._pending else data)
                if body is None:
                    return
                data = body
            if self._state < _LENGTH:
                self._chunked_body(data, t)
            else:
                self._delimited_body(data, t)
        except Exception as exc:  # a protocol violation, or the sink's own error (bad stream)
            self._fail(exc)
            self._close_transport()

    def _close_transport(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- an exchange ----------------------------------------------------------------------------
    def start(self, request: bytes, sink: Sink, read_timeout_s: float) -> asyncio.Future[None]:
        if self.transport is None:
            raise ConnectionFailed("not connected")
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._read_timeout_s = read_timeout_s
        self._timer = loop.call_later(read_timeout_s, self._check_idle)
        self._sink = sink
        self._state = _HEAD
        self._pending = b""
        self.status = 0
        self.keep_alive = True
        self.error_body = bytearray()
        self.last_rx_s = time.perf_counter()
        self.transport.write(request)
        return self._waiter

    def _check_idle(self) -> None:
        """Fail the exchange if nothing arrived for the read timeout; else look again later."""
        idle = time.perf_counter() - self.last_rx_s
        if idle < self._read_timeout_s:
            self._timer = asyncio.get_running_loop().call_later(self._read_timeout_s - idle, self._check_idle)
            return
        self._fail(ReadTimeout(f"no data for {self._read_timeout_s:g}s"))
        self._close_transport()

    def _finish(self) -> None:
        self._state = _DONE
        if self._timer is not None:
            self._timer.cancel()
        waiter, self._waiter, self._sink = self._waiter, None, _no_sink
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self._state = _DONE
        if self._timer is not None:
            self._timer.cancel()
        waiter, self._waiter, self._sink = self._waiter, None, _no_sink
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _head(self, data: bytes) -> bytes | None:
        """Parse the status line and headers; returns the body bytes that followed, or None."""
        while True:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > MAX_HEAD_BYTES:
                    raise ConnectionFailed("response headers too long")
                self._pending = data
                return None
            head = data[:end + 2].lower()  # header lines end with \r\n, names are case-insensitive
            data = data[end + 4:]
            if not head.startswith(b"http/1.") or not head[9:12].isdigit():
                raise ConnectionFailed(f"not an HTTP/1.x response: {head[:100]!r}")
            self.status = int(head[9:12])
            if not 100 <= self.status < 200:
                break  # else informational: the real response follows
        conn = _header(head, b"connection")
        self.keep_alive = b"close" not in conn and (head.startswith(b"http/1.1") or b"keep-alive" in conn)
        self._pending = b""
        length = _header(head, b"content-length")
        if b"chunked" in _header(head, b"transfer-encoding"):
            self._state = _CHUNK_SIZE
        elif length:
            try:
                self._left = int(length)
            except ValueError:
                raise ConnectionFailed(f"bad content-length {length[:40]!r}") from None
            self._state = _LENGTH
            if self._left == 0:
                self._finish()
        elif self.status in (204, 304):
            self._finish()
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False
        return data

    def _emit(self, piece: bytes, t: float) -> None:
        if self.status == 200:
            self._sink(piece, t)
        elif len(self.error_body) < ERROR_BODY_BYTES:
            self.error_body += piece[: ERROR_BODY_BYTES - len(self.error_body)]

    def _delimited_body(self, data: bytes, t: float) -> None:
        """A body of known length (_LENGTH), or one that the server's close ends (_UNTIL_CLOSE)."""
        state = self._state
        if state == _LENGTH:
            piece = data[: self._left] if len(data) > self._left else data
            self._left -= len(piece)
            if piece:
                self._emit(piece, t)
            if self._left == 0:
                self._finish()
        elif state == _UNTIL_CLOSE and data:
            self._emit(data, t)
        # _DONE: bytes after the response are ignored

    def _chunked_body(self, data: bytes, t: float) -> None:
        """Transfer-Encoding: chunked. One loop over the read, states inline: it runs once per
        streamed event, so no call per chunk beyond the sink."""
        state = self._state
        buf = self._pending + data if self._pending else data
        n = len(buf)
        pos = 0
        while pos < n:
            if state == _CHUNK_DATA:
                take = min(self._left, n - pos)
                self._emit(buf if take == n else buf[pos:pos + take], t)
                pos += take
                self._left -= take
                if self._left == 0:
                    state = _CHUNK_CRLF
            elif state == _CHUNK_SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                except ValueError:
                    raise ConnectionFailed(f"bad chunk size line {buf[pos:eol][:40]!r}") from None
                pos = eol + 2
                if size:
                    self._left, state = size, _CHUNK_DATA
                else:
                    state = _TRAILERS
            elif state == _CHUNK_CRLF:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ConnectionFailed("chunk not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE
            else:  # _TRAILERS
                pos = self._skip_trailers(buf, pos)
                if pos < 0:
                    return  # the body ended; the exchange is finished
                break
        self._state = state
        self._pending = buf[pos:] if pos < n else b""

    def _skip_trailers(self, buf: bytes, pos: int) -> int:
        """Trailer header lines from `pos`, then the empty line that ends the body: there the
        exchange is finished and -1 returned; else where the incomplete line starts."""
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return pos
            if eol == pos:
                self._pending = b""
                self._finish()
                return -1
            pos = eol + 2


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every connection (building one takes milliseconds)."""
    return ssl.create_default_context()


def _header(head: bytes, name: bytes) -> bytes:
    """A header's value in a lower-cased response head (b"" if absent)."""
    at = head.find(b"\r\n" + name + b":")
    if at < 0:
        return b""
    start = at + len(name) + 3
    return head[start:head.find(b"\r\n", start)].strip()


class Connection:
    """One kept-alive connection, reopened when the server closed it; one exchange at a time."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self._proto: _Protocol | None = None
        self._ssl = _tls_context() if endpoint.tls else None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(_Protocol, ep.host, ep.port, ssl=self._ssl), self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise ConnectionFailed(f"connect to {ep.host}:{ep.port} timed out after {self.connect_timeout_s:g}s") from None
        except OSError as exc:
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from None
        return proto

    async def exchange(self, request: bytes, sink: Sink, read_timeout_s: float) -> tuple[int, bytes, float]:
        """Send `request`; body bytes of a 200 go to `sink` as they arrive.

        Returns (status, start of a non-200 body, arrival time of the last bytes). Raises
        ConnectionFailed, ReadTimeout, or whatever the sink raised (the connection is then closed).
        """
        for attempt in (1, 2):
            proto = self._proto
            reused = proto is not None and not proto.closed
            if proto is None or proto.closed:
                proto = self._proto = await self._open()
            try:
                await proto.start(request, sink, read_timeout_s)
            except ConnectionFailed:
                self.close()
                # A kept-alive connection that the server closed as the request went out, before
                # any response byte (so nothing was measured): once more, on a new connection.
                if attempt == 1 and reused and not proto.status and not proto._pending:
                    continue
                raise
            except BaseException:
                self.close()  # a half-read response leaves the connection unusable
                raise
            if not proto.keep_alive:
                self.close()
            return proto.status, bytes(proto.error_body), proto.last_rx_s
        raise AssertionError("unreachable: the second attempt returns or raises")

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.closed = True
            self._proto.transport.close()
        self._proto = None

