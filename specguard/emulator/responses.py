"""Response bodies in SGLang 0.5.23's exact shapes (see tests/fixtures/captures/sglang-0.5.23/).

One formatter per route family turns the scheduler's per-step progress marks into SSE events
or a final JSON body. Payloads are assembled from cached string pieces (constant prefixes built
once per request, ids and text sliced from ``OutputText``), so an event costs a few string
concatenations however long the output already is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from specguard.emulator.model import GenRequest, known_ms
from specguard.emulator.tokens import OutputText

SSE_DONE = "data: [DONE]\n\n"
Mark = tuple[int, int, int]  # (completion_tokens, spec_verify_ct, accepted_drafts) after a step
JsonObject = dict[str, object]  # a JSON body or event, as json.dumps takes it


class SpecMeta(TypedDict, total=False):
    """The spec fields of a final event's meta_info (in this key order on the wire)."""

    spec_accept_rate: float
    spec_accept_length: float
    spec_num_correct_drafts: int
    spec_num_proposed_drafts: int
    spec_verify_ct: int
    spec_correct_drafts_histogram: list[int]


def context_error_message(context_length: int, prompt_tokens: int, max_new_tokens: int) -> str:
    return (
        f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
        f"You requested a total of {prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens from "
        f"the input messages and {max_new_tokens} tokens for the completion. Please reduce the number "
        "of tokens in the input messages or the completion to fit within the limit."
    )


def native_error(message: str) -> JsonObject:
    """The ``{"error": ...}`` event a native /generate stream carries (HTTP 200, then [DONE])."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}


def native_error_body(message: str) -> JsonObject:
    """A non-streamed /generate error (HTTP 400): ``_create_error_response`` in http_server.py."""
    return {"error": {"message": message}}


def openai_error(message: str, err_type: str = "BadRequestError") -> JsonObject:
    """``ErrorResponse`` (serving_base.create_error_response): generation errors are
    "BadRequestError"; request-body validation errors are "Bad Request" (http_server.py)."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": 400}


def spec_meta(req: GenRequest, static_draft_tokens: int, verify_count_factor: int = 1) -> SpecMeta | None:
    """The final event's spec fields (TokenizerManager._calculate_spec_decoding_metrics).

    Present only with verify steps and proposed drafts; proposed drafts use the draft-token count
    the server started with (under adaptive, the start-up steps + 1, not the live ones).
    ``verify_count_factor`` 2 counts every verify step twice (--emulator-fault-double-count
    meta-verify-ct): spec_verify_ct, the histogram and what derives from them.
    """
    verify_ct = req.verify_ct * verify_count_factor
    proposed = verify_ct * (static_draft_tokens - 1)
    if verify_ct <= 0:
        return None
    meta: SpecMeta = {}
    if proposed > 0:
        meta = {
            "spec_accept_rate": req.accepted_drafts / proposed,
            "spec_accept_length": req.completion_tokens / verify_ct,
            "spec_num_correct_drafts": req.accepted_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": verify_ct,
        }
    if req.correct_hist:
        meta["spec_correct_drafts_histogram"] = [n * verify_count_factor for n in req.correct_hist]
    return meta or None


def spec_tokens_details(meta: SpecMeta | None) -> str | None:
    """``SpecTokensDetails`` as JSON (openai/utils.py spec_tokens_details_from_meta_info); None: no sglext."""
    if not meta:
        return None
    return json.dumps({
        "spec_accept_rate": meta.get("spec_accept_rate") or 0.0,
        "spec_accept_length": meta.get("spec_accept_length") or 0.0,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": meta.get("spec_num_correct_drafts") or 0,
        "spec_num_proposed_drafts": meta.get("spec_num_proposed_drafts") or 0,
        "spec_verify_ct": meta.get("spec_verify_ct") or 0,
        "spec_correct_drafts_histogram": meta.get("spec_correct_drafts_histogram") or [],
        "spec_cap_lens_histogram": [],
    }, separators=(",", ":"))


def sse(obj: Mapping[str, object]) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


@dataclass
class RequestContext:
    """Per-request facts every formatter needs."""

    rid: str
    req: GenRequest
    out: OutputText
    wall_s: Callable[[float], float]  # loop-clock ms -> wall-clock seconds
    spec_draft_tokens: int | None  # num_draft_tokens at start-up; None without speculation
    model: str = ""
    created_s: int = 0
    include_usage: bool = False
    enable_metrics: bool = False  # timing fields in meta_info (--enable-metrics)
    return_spec_tokens_details: bool = False  # OpenAI routes: send sglext.spec_tokens_details
    dp_rank: int | None = None  # reported when the server has several DP ranks
    verify_count_factor: int = 1  # 2: meta_info counts every verify step twice (a double-count fault)

    def spec_meta(self) -> SpecMeta | None:
        if self.spec_draft_tokens is None:
            return None
        return spec_meta(self.req, self.spec_draft_tokens, self.verify_count_factor)


class NativeFormat:
    """``POST /generate``: cumulative (or, with --incremental-streaming-output, delta) text and ids.

    meta_info follows ``TokenizerManager._handle_batch_output``: scheduler timings only with
    --enable-metrics; spec fields and ``e2e_latency`` only on the final event; the first streamed
    event (or a lone final one) carries ``response_sent_to_client_ts``.
    """

    def __init__(self, ctx: RequestContext, incremental: bool) -> None:
        self.ctx = ctx
        self.incremental = incremental
        self._head: tuple[str, str] | None = None
        self._first = True

    def _meta_head(self) -> tuple[str, str]:
        """The constant meta_info text before and after ``finish_reason`` (built at the first event)."""
        if self._head is None:
            c, r = self.ctx, self.ctx.req
            timings = ""
            if c.enable_metrics:
                admit_ms = known_ms(r.admit_ms, "admission")
                timings = (
                    '"storage_prefetch_wait":0.0,"storage_staging_wait":0.0,'
                    f'"forward_entry_time":{c.wall_s(admit_ms)!r},'
                    f'"prefill_finished_time":{c.wall_s(known_ms(r.first_token_ms, "first token"))!r},'
                    f'"queue_time":{(admit_ms - r.arrival_ms) / 1000.0!r},'
                )
            self._head = (
                f'"meta_info":{{"id":"{c.rid}","finish_reason":',
                f',"prompt_tokens":{r.prompt_tokens},"weight_version":"default","num_retractions":0,'
                + timings + '"reasoning_tokens":0,',
            )
        return self._head

    def _object(self, prev: int, mark: Mark, final: bool) -> str:
        c, r = self.ctx, self.ctx.req
        tokens = mark[0]
        start = prev if self.incremental else 0
        finish = f'{{"type":"length","length":{tokens}}}' if final else "null"
        head = self._meta_head()
        parts = [
            '{"text":"', c.out.text(start, tokens), '","output_ids":[', c.out.ids(start, tokens), "],",
            head[0], finish, head[1], f'"completion_tokens":{tokens},"cached_tokens":{r.cached_tokens},',
        ]
        if final:
            parts.append(f'"weight_versions":[{{"version":"default","start":0,"end":{tokens}}}],')
        details = f'{{"device":{r.cached_tokens},"host":0}}' if r.cached_tokens else "null"
        rank = "null" if c.dp_rank is None else str(c.dp_rank)
        parts.append(f'"cached_tokens_details":{details},"dp_rank":{rank}')
        if final:
            parts.append(self._final_fields(tokens))
        elif self._first:
            parts.append(f',"response_sent_to_client_ts":{c.wall_s(known_ms(r.first_token_ms, "first token"))!r}')
        self._first = False
        parts.append("}}")
        return "".join(parts)

    def _final_fields(self, tokens: int) -> str:
        c, r = self.ctx, self.ctx.req
        finish_ms = known_ms(r.finish_ms, "finish")
        received, finished = c.wall_s(r.arrival_ms), c.wall_s(finish_ms)
        out = [f',"e2e_latency":{finished - received!r}']
        meta = c.spec_meta()
        if meta:
            out.append("," + json.dumps(meta, separators=(",", ":"))[1:-1])
        sent_first = not self._first
        if c.enable_metrics:
            out.append(f',"request_received_ts":{received!r}')
            first_ms = known_ms(r.first_token_ms, "first token")
            if first_ms > r.arrival_ms:
                out.append(f',"first_token_latency":{(first_ms - r.arrival_ms) / 1000.0!r}')
            out.append(f',"api_server_dispatch_finish_ts":{received!r}')
            if sent_first:
                out.append(f',"response_sent_to_client_ts":{c.wall_s(first_ms)!r}')
            out.append(f',"request_finished_ts":{finished!r}')
            decode_s = (finish_ms - first_ms) / 1000.0
            if decode_s > 0 and tokens > 1:
                out.append(f',"decode_throughput":{(tokens - 1) / decode_s!r}')
        if not sent_first:
            out.append(f',"response_sent_to_client_ts":{finished!r}')
        return "".join(out)

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

    def _sglext(self) -> str:
        """The sglext chunk: after the content chunks, before the usage chunk (choices [], usage null)."""
        c = self.ctx
        details = spec_tokens_details(c.spec_meta()) if c.return_spec_tokens_details else None
        if details is None:
            return ""
        return self._prefix + '[],"usage":null,"sglext":{"spec_tokens_details":' + details + "}}\n\n"

    def _sglext_field(self) -> str:
        c = self.ctx
        details = spec_tokens_details(c.spec_meta()) if c.return_spec_tokens_details else None
        return "" if details is None else ',"sglext":{"spec_tokens_details":' + details + "}"

    def closing(self, mark: Mark) -> str:
        out = self._sglext()
        if self.ctx.include_usage:
            out += self._prefix + '[],"usage":' + _usage(self.ctx.req.prompt_tokens, mark[0], chat=False) + "}\n\n"
        return out

    def body(self, mark: Mark) -> str:
        c = self.ctx
        return (
            f'{{"id":"{c.rid}","object":"text_completion","created":{c.created_s},"model":{json.dumps(c.model)},'
            f'"choices":[{{"index":0,"text":"{c.out.text(0, mark[0])}","logprobs":null,"finish_reason":"length",'
            f'"matched_stop":null}}],"usage":{_usage(c.req.prompt_tokens, mark[0], chat=False)},'
            '"metadata":{"weight_version":"default"}' + self._sglext_field() + "}"
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
        out = self._chunk("", '"length"') + self._sglext()
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
            '"metadata":{"weight_version":"default"}' + self._sglext_field() + "}"
        )
