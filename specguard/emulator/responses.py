"""Response bodies in SGLang 0.5.23's exact shapes (see tests/fixtures/captures/sglang-0.5.23/).

One formatter per route family turns the scheduler's per-step progress marks into SSE events
or a final JSON body. Payloads are assembled from cached string pieces (constant prefixes built
once per request, ids and text sliced from ``OutputText``), so an event costs a few string
concatenations however long the output already is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from specguard.emulator.model import GenRequest
from specguard.emulator.tokens import OutputText

SSE_DONE = "data: [DONE]\n\n"
Mark = tuple[int, int, int]  # (completion_tokens, spec_verify_ct, accepted_drafts) after a step


def context_error_message(context_length: int, prompt_tokens: int, max_new_tokens: int) -> str:
    return (
        f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
        f"You requested a total of {prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens from "
        f"the input messages and {max_new_tokens} tokens for the completion. Please reduce the number "
        "of tokens in the input messages or the completion to fit within the limit."
    )


def native_error(message: str) -> dict:
    """The ``{"error": ...}`` object SGLang streams (HTTP 200) or returns (HTTP 400)."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}


def openai_error(message: str) -> dict:
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


def sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


@dataclass
class RequestContext:
    """Per-request facts every formatter needs."""

    rid: str
    req: GenRequest
    out: OutputText
    wall_s: Callable[[float], float]  # loop-clock ms -> wall-clock seconds
    spec_num_steps: int | None  # None without speculation
    model: str = ""
    created_s: int = 0
    include_usage: bool = False


class NativeFormat:
    """``POST /generate``: cumulative (or, with --incremental-streaming-output, delta) text and ids."""

    def __init__(self, ctx: RequestContext, incremental: bool) -> None:
        self.ctx = ctx
        self.incremental = incremental
        self._head: tuple[str, str] | None = None
        self._first = True

    def _meta_head(self) -> tuple[str, str]:
        """The constant meta_info text before and after ``finish_reason`` (built at the first event)."""
        if self._head is None:
            c, r = self.ctx, self.ctx.req
            self._head = (
                f'"meta_info":{{"id":"{c.rid}","finish_reason":',
                f',"prompt_tokens":{r.prompt_tokens},"weight_version":"default","num_retractions":0,'
                '"storage_prefetch_wait":0.0,"storage_staging_wait":0.0,'
                f'"forward_entry_time":{c.wall_s(r.admit_ms)!r},'
                f'"prefill_finished_time":{c.wall_s(r.first_token_ms)!r},'
                f'"queue_time":{(r.admit_ms - r.arrival_ms) / 1000.0!r},"reasoning_tokens":0,',
            )
        return self._head

    def _object(self, prev: int, mark: Mark, final: bool) -> str:
        c, r = self.ctx, self.ctx.req
        tokens, verify_ct, accepted = mark
        start = prev if self.incremental else 0
        finish = f'{{"type":"length","length":{tokens}}}' if final else "null"
        head = self._meta_head()
        parts = [
            '{"text":"', c.out.text(start, tokens), '","output_ids":[', c.out.ids(start, tokens), "],",
            head[0], finish, head[1], f'"completion_tokens":{tokens},"cached_tokens":{r.cached_tokens},',
        ]
        if c.spec_num_steps is not None:
            parts.append(f'"spec_verify_ct":{verify_ct},')
            if verify_ct:
                parts.append(
                    f'"spec_accept_length":{tokens / verify_ct!r},'
                    f'"spec_accept_rate":{accepted / (verify_ct * c.spec_num_steps)!r},'
                )
        if final:
            parts.append(f'"weight_versions":[{{"version":"default","start":0,"end":{tokens}}}],')
        details = f'{{"device":{r.cached_tokens},"host":0}}' if r.cached_tokens else "null"
        parts.append(f'"cached_tokens_details":{details},"dp_rank":null')
        if final:
            parts.append(self._final_timings(tokens))
        elif self._first:
            parts.append(f',"response_sent_to_client_ts":{c.wall_s(r.first_token_ms)!r}')
        self._first = False
        parts.append("}}")
        return "".join(parts)

    def _final_timings(self, tokens: int) -> str:
        c, r = self.ctx, self.ctx.req
        received, finished = c.wall_s(r.arrival_ms), c.wall_s(r.finish_ms)
        decode_s = (r.finish_ms - r.first_token_ms) / 1000.0
        decode_tput = (tokens - 1) / decode_s if decode_s > 0 else 0.0
        return (
            f',"e2e_latency":{finished - received!r},"request_received_ts":{received!r},'
            f'"first_token_latency":{(r.first_token_ms - r.arrival_ms) / 1000.0!r},'
            f'"api_server_dispatch_finish_ts":{received!r},"response_sent_to_client_ts":{finished!r},'
            f'"request_finished_ts":{finished!r},"decode_throughput":{decode_tput!r}'
        )

    def event(self, prev: int, mark: Mark, final: bool) -> str:
        return "data: " + self._object(prev, mark, final) + "\n\n"

    def closing(self, mark: Mark) -> str:
        return ""

    def body(self, mark: Mark) -> str:
        return self._object(0, mark, True)


def _usage(prompt: int, completion: int, chat: bool) -> str:
    if chat:
        return (
            f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},"completion_tokens":{completion},'
            '"prompt_tokens_details":null,"reasoning_tokens":0,"completion_tokens_details":null}'
        )
    return (
        f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},"completion_tokens":{completion},'
        '"reasoning_tokens":0}'
    )


class CompletionFormat:
    """``POST /v1/completions``: OpenAI text_completion chunks carrying text deltas."""

    object_name = "text_completion"

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        c = ctx
        self._prefix = (
            f'data: {{"id":"{c.rid}","object":"{self.object_name}","created":{c.created_s},'
            f'"model":{json.dumps(c.model)},"choices":'
        )

    def event(self, prev: int, mark: Mark, final: bool) -> str:
        finish = '"length"' if final else "null"
        return (
            self._prefix + '[{"index":0,"text":"' + self.ctx.out.text(prev, mark[0])
            + f'","logprobs":null,"finish_reason":{finish},"matched_stop":null}}],"usage":null}}\n\n'
        )

    def closing(self, mark: Mark) -> str:
        if not self.ctx.include_usage:
            return ""
        return self._prefix + '[],"usage":' + _usage(self.ctx.req.prompt_tokens, mark[0], chat=False) + "}\n\n"

    def body(self, mark: Mark) -> str:
        c = self.ctx
        return (
            f'{{"id":"{c.rid}","object":"text_completion","created":{c.created_s},"model":{json.dumps(c.model)},'
            f'"choices":[{{"index":0,"text":"{c.out.text(0, mark[0])}","logprobs":null,"finish_reason":"length",'
            f'"matched_stop":null}}],"usage":{_usage(c.req.prompt_tokens, mark[0], chat=False)},'
            '"metadata":{"weight_version":"default"}}'
        )


class ChatFormat(CompletionFormat):
    """``POST /v1/chat/completions``: a role chunk, content deltas, a finish chunk, then usage."""

    object_name = "chat.completion.chunk"

    def _chunk(self, delta: str, finish: str) -> str:
        return (
            self._prefix + '[{"index":0,"delta":{"reasoning_content":null' + delta
            + f'}},"logprobs":null,"finish_reason":{finish},"matched_stop":null}}]}}\n\n'
        )

    def event(self, prev: int, mark: Mark, final: bool) -> str:
        head = self._chunk(',"role":"assistant","content":""', "null") if prev == 0 else ""
        text = self.ctx.out.text(prev, mark[0])
        return head + (self._chunk(f',"content":"{text}"', "null") if text else "")

    def closing(self, mark: Mark) -> str:
        out = self._chunk("", '"length"')
        if self.ctx.include_usage:
            out += self._prefix + '[],"usage":' + _usage(self.ctx.req.prompt_tokens, mark[0], chat=True) + "}\n\n"
        return out

    def body(self, mark: Mark) -> str:
        c = self.ctx
        return (
            f'{{"id":"{c.rid}","object":"chat.completion","created":{c.created_s},"model":{json.dumps(c.model)},'
            f'"choices":[{{"index":0,"message":{{"role":"assistant","content":"{c.out.text(0, mark[0])}",'
            '"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"length",'
            f'"matched_stop":null}}],"usage":{_usage(c.req.prompt_tokens, mark[0], chat=True)},'
            '"metadata":{"weight_version":"default"}}'
        )
