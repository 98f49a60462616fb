"""The yardstick: a single-process aiohttp client written the way sglang.bench_serving reads streams.

Line iteration over the response, `data: ` prefix removed, `json.loads` of every event, ITL split
per token from the cumulative `completion_tokens` (native) or one gap per chunk (OpenAI), all
requests created up front behind an `asyncio.Semaphore(C)`. One session for the whole run with
SGLang's 10 MiB read buffer (bench_serving opens a session per request, which only costs it more).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp


@dataclass
class ReferenceResult:
    events: int = 0  # token-bearing events
    tokens: int = 0  # server-reported completion tokens
    failed: int = 0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)


async def _native(response: aiohttp.ClientResponse, st: float, out: ReferenceResult) -> None:
    ttft = 0.0
    last_len = 0
    most_recent = st
    async for chunk_bytes in response.content:
        chunk_bytes = chunk_bytes.strip()
        if not chunk_bytes:
            continue
        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
        if chunk == "[DONE]":
            continue
        data = json.loads(chunk)
        if data.get("text"):
            timestamp = time.perf_counter()
            output_len = data["meta_info"]["completion_tokens"]
            if ttft == 0.0:
                ttft = timestamp - st
                out.ttft_s.append(ttft)
            else:
                n = output_len - last_len
                if n == 0:
                    continue
                out.itl_s.extend([(timestamp - most_recent) / n] * n)
            most_recent = timestamp
            last_len = output_len
            out.events += 1
    out.tokens += last_len


async def _openai(response: aiohttp.ClientResponse, st: float, out: ReferenceResult) -> None:
    ttft = 0.0
    most_recent = st
    output_len = 0
    async for chunk_bytes in response.content:
        chunk_bytes = chunk_bytes.strip()
        if not chunk_bytes:
            continue
        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
        if chunk == "[DONE]":
            continue
        data = json.loads(chunk)
        if data["choices"] and data["choices"][0]["text"]:
            timestamp = time.perf_counter()
            if ttft == 0.0:
                ttft = timestamp - st
                out.ttft_s.append(ttft)
            else:
                out.itl_s.append(timestamp - most_recent)
            most_recent = timestamp
            out.events += 1
        output_len = (data.get("usage") or {}).get("completion_tokens", output_len)
    out.tokens += output_len


async def run_reference(base_url: str, route: str, bodies: list[bytes], concurrency: int, api: str) -> ReferenceResult:
    """Send every body once, at most `concurrency` at a time."""
    out = ReferenceResult()
    sem = asyncio.Semaphore(concurrency)
    read = _native if api == "native" else _openai
    headers = {"Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=10 * 1024**2) as session:

        async def one(body: bytes) -> None:
            async with sem:
                st = time.perf_counter()
                try:
                    async with session.post(base_url + route, data=body, headers=headers) as response:
                        if response.status != 200:
                            out.failed += 1
                            return
                        await read(response, st, out)
                except aiohttp.ClientError:
                    out.failed += 1

        await asyncio.gather(*(one(b) for b in bodies))
    return out
