"""The HTTP/1.1 streaming client against a scripted server on 127.0.0.1: framing, keep-alive,
failures as records, and timestamps taken where the bytes arrive."""

from __future__ import annotations

import asyncio
import time

import pytest

from specguard.measure.client import encode_request, send_request
from specguard.measure.http1 import Connection, ConnectionFailed, Endpoint, ReadTimeout

CLOSE, STALL = object(), object()
OK_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(*pieces: bytes) -> list[bytes]:
    """A chunked body, one HTTP chunk per piece, then the last chunk."""
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]


def native_events(totals: list[int], prompt: int = 3) -> list[bytes]:
    events = []
    for i, total in enumerate(totals):
        last = i == len(totals) - 1
        finish = b'{"type":"length","length":%d}' % total if last else b"null"
        timing = b',"e2e_latency":0.5,"first_token_latency":0.125' if last else b""
        events.append(b'data: {"text":"%s","output_ids":[%s],"meta_info":{"id":"r","finish_reason":%s,'
                      b'"prompt_tokens":%d,"completion_tokens":%d%s}}\n\n'
                      % (b"a" * total, b",".join([b"7"] * total), finish, prompt, total, timing))
    return events + [b"data: [DONE]\n\n"]


class ScriptedServer:
    """Answers the n-th request with the n-th script: byte pieces written one by one (a short pause
    between them), CLOSE to drop the connection there, STALL to go silent."""

    def __init__(self, scripts: list[list]) -> None:
        self.scripts = list(scripts)
        self.requests: list[bytes] = []
        self.connections = 0

    async def __aenter__(self) -> Endpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return Endpoint("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.scripts:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(length))
                for piece in self.scripts.pop(0):
                    if piece is CLOSE:
                        writer.close()
                        return
                    if piece is STALL:
                        await asyncio.sleep(30)
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.002)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the test is over
        writer.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_endpoint_from_url_and_request_bytes():
    ep = Endpoint.from_url("https://gpu-box:8443/sglang/")
    assert (ep.host, ep.port, ep.tls, ep.base_path) == ("gpu-box", 8443, True, "/sglang")
    assert Endpoint.from_url("http://127.0.0.1").port == 80
    with pytest.raises(ValueError):
        Endpoint.from_url("ftp://x")
    req = encode_request(ep, "/generate", b'{"a":1}', "sk-1")
    head, body = req.split(b"\r\n\r\n")
    assert head.startswith(b"POST /sglang/generate HTTP/1.1\r\nHost: gpu-box:8443\r\nContent-Length: 7\r\n")
    assert b"Authorization: Bearer sk-1" in head and body == b'{"a":1}'
    assert b"Authorization" not in encode_request(Endpoint.from_url("http://h:1"), "/g", b"{}", None)


def test_native_stream_split_anywhere_keeps_connection_and_times_each_read():
    stream = b"".join(native_events([1, 3, 4]))
    # HTTP chunks that cut events, CRLFs and chunk-size lines at awkward places
    body = b"".join(chunked(stream[:5], stream[5:140], stream[140:]))
    pieces = [OK_CHUNKED[:20], OK_CHUNKED[20:] + body[:3], body[3:9], body[9:150], body[150:-4], body[-4:-1], body[-1:]]

    async def go():
        async with ScriptedServer([pieces, [OK_CHUNKED, *chunked(stream)]]) as server_ep:
            conn = Connection(server_ep)
            request = encode_request(server_ep, "/generate", b"{}", None)
            before = time.perf_counter()
            first = await send_request(conn, request, "native", 0, read_timeout_s=5)
            second = await send_request(conn, request, "native", 1, read_timeout_s=5)
            conn.close()
            return before, first, second

    before, first, second = run(go())
    for rec in (first, second):
        assert rec.ok, rec.error
        assert list(rec.event_tokens) == [1, 2, 1] and rec.completion_tokens == 4 and rec.prompt_tokens == 3
        assert rec.event_s.typecode == "d" and rec.event_tokens.typecode == "I"
        assert rec.server_ttft_s == 0.125 and rec.server_e2e_s == 0.5
        assert rec.send_s <= rec.event_s[0] <= rec.event_s[-1] <= rec.end_s
    assert before <= first.send_s
    # written in pieces 2 ms apart: events that completed in different reads have different times
    assert first.event_s[0] < first.event_s[-1]


def test_content_length_and_close_delimited_bodies():
    stream = b"".join(native_events([2, 5]))
    fixed = [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(stream), stream]
    until_close = [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", stream, CLOSE]

    async def go():
        async with ScriptedServer([fixed, until_close]) as ep:
            conn = Connection(ep)
            req = encode_request(ep, "/generate", b"{}", None)
            return [await send_request(conn, req, "native", i, read_timeout_s=5) for i in range(2)]

    for rec in run(go()):
        assert rec.ok, rec.error
        assert list(rec.event_tokens) == [2, 3]


def test_error_status_keeps_the_body_and_the_connection():
    error = [b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 13\r\n\r\n", b"try again pls"]
    ok = [OK_CHUNKED, *chunked(b"".join(native_events([1])))]

    async def go():
        server = ScriptedServer([error, ok])
        async with server as ep:
            conn = Connection(ep)
            req = encode_request(ep, "/generate", b"{}", None)
            recs = [await send_request(conn, req, "native", i, read_timeout_s=5) for i in range(2)]
            return recs, server.connections

    (bad, good), connections = run(go())
    assert bad.error == "HTTP 503: try again pls" and bad.http_status == 503
    assert good.ok and connections == 1


def test_failures_become_records_with_the_messages_the_gates_show():
    half = b"".join(native_events([1, 2, 3]))[:150]
    scripts = [
        [OK_CHUNKED, *chunked(half)[:1], CLOSE],  # cut mid-stream
        [OK_CHUNKED, b"5\r\ndata:", STALL],  # silent
        [OK_CHUNKED, *chunked(b'data: {"text":"x"}\n\n')],  # no completion_tokens
        [OK_CHUNKED, *chunked(b"data: " + native_events([1])[0][6:-2] + b"\n\n")],  # no [DONE]
    ]

    async def go():
        async with ScriptedServer(scripts) as ep:
            conn = Connection(ep)
            req = encode_request(ep, "/generate", b"{}", None)
            cut = await send_request(conn, req, "native", 0, read_timeout_s=5)
            started = time.perf_counter()
            stalled = await send_request(conn, req, "native", 1, read_timeout_s=0.3)
            stall_s = time.perf_counter() - started
            bad = await send_request(conn, req, "native", 2, read_timeout_s=5)
            undone = await send_request(conn, req, "native", 3, read_timeout_s=5)
            return cut, stalled, stall_s, bad, undone

    cut, stalled, stall_s, bad, undone = run(go())
    assert cut.error.startswith("connection error:") and "during the response" in cut.error
    assert stalled.error.startswith("timeout: no data") and stall_s < 5
    assert bad.error.startswith("bad stream:") and "completion_tokens" in bad.error
    assert undone.error == "stream cut: ended without [DONE]"


def test_connect_failure_and_stale_kept_alive_connection():
    ok = [OK_CHUNKED, *chunked(b"".join(native_events([1])))]

    async def go():
        server = ScriptedServer([ok, ok])
        async with server as ep:
            conn = Connection(ep)
            req = encode_request(ep, "/generate", b"{}", None)
            first = await send_request(conn, req, "native", 0, read_timeout_s=5)
            conn._proto.transport.abort()  # as if the server had dropped the idle connection
            conn._proto.closed = False  # ... and we had not noticed yet
            second = await send_request(conn, req, "native", 1, read_timeout_s=5)
        refused = Connection(ep)
        with pytest.raises(ConnectionFailed):
            await refused.exchange(req, lambda b, t: None, 1.0)
        return first, second

    first, second = run(go())
    assert first.ok and second.ok, second.error


def test_read_timeout_is_an_exception_of_its_own():
    async def go():
        async with ScriptedServer([[STALL]]) as ep:
            with pytest.raises(ReadTimeout):
                await Connection(ep).exchange(encode_request(ep, "/g", b"{}", None), lambda b, t: None, 0.2)

    run(go())


def test_openai_route_record_gets_the_verify_count_and_histogram_from_sglext():
    # SGLang 0.5.23 serving_completions.py: content chunks, then the sglext chunk (choices [],
    # usage null), then the usage chunk, then [DONE]; the request asked return_spec_tokens_details
    head = b'{"id":"c","object":"text_completion","created":1,"model":"m",'
    stream = b"".join([
        b"data: " + head + b'"choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":null,"matched_stop":null}],'
        b'"usage":null}\n\n',
        b"data: " + head + b'"choices":[{"index":0,"text":"cde","logprobs":null,"finish_reason":"length","matched_stop":null}],'
        b'"usage":null}\n\n',
        b"data: " + head + b'"choices":[],"usage":null,"sglext":{"spec_tokens_details":{"spec_accept_rate":0.5,'
        b'"spec_accept_length":2.5,"spec_cap_length":0.0,"spec_block_accept_length":0.0,"spec_num_correct_drafts":3,'
        b'"spec_num_proposed_drafts":6,"spec_verify_ct":2,"spec_correct_drafts_histogram":[0,1,1],'
        b'"spec_cap_lens_histogram":[]}}}\n\n',
        b"data: " + head + b'"choices":[],"usage":{"prompt_tokens":4,"total_tokens":9,"completion_tokens":5,'
        b'"reasoning_tokens":0}}\n\n',
        b"data: [DONE]\n\n"])

    async def go():
        server = ScriptedServer([[OK_CHUNKED, *chunked(stream)]])
        async with server as ep:
            rec = await send_request(Connection(ep), encode_request(ep, "/v1/completions", b"{}", None), "openai", 0, 5)
            return rec

    rec = run(go())
    assert rec.ok, rec.error
    assert (rec.completion_tokens, rec.prompt_tokens, rec.spec_verify_ct) == (5, 4, 2)
    assert (rec.spec_num_correct_drafts, rec.spec_num_proposed_drafts, rec.spec_correct_drafts_histogram) == (3, 6, [0, 1, 1])


def test_route_fields_reach_the_request_body():
    import json

    from specguard.measure.client import RequestOptions, build_body
    from specguard.workload import Prompt

    options = RequestOptions(api="openai", extra_body={"return_spec_tokens_details": True})
    body = json.loads(build_body(Prompt(input_ids=[1, 2]), options))
    assert body["return_spec_tokens_details"] is True and body["stream_options"] == {"include_usage": True}
