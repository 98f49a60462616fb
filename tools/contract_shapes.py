#!/usr/bin/env python3
"""The live API contract of two SGLang-compatible servers: same requests, compare SHAPES.

    python tools/contract_shapes.py http://127.0.0.1:30000 http://127.0.0.1:30001 [--names real emulator]

Sends the same requests to both servers and compares what comes back by shape, never by value:
key sets and JSON types (int, float, str, bool, null, object, list), HTTP status codes, and the
names and label-name sets of /metrics. Prints one line per difference, naming which side has
what; exit status 1 when there is any. tests/real/test_real_sglang.py runs it between the real
SGLang 0.5.23 server and the emulator launched with the same flags.

What is compared (the parts of the API specguard depends on):
- /server_info: the top-level keys specguard reads (SERVER_INFO_KEYS) and, in the first
  `internal_states` entry, the live scheduler state (its keys that are not also top-level server
  arguments: SGLang repeats all ~550 arguments there) plus SERVER_INFO_KEYS;
- /model_info: every key;
- native POST /generate, streamed: the first, a middle and the last event (and `[DONE]`);
- /v1/completions and /v1/chat/completions, streamed with `stream_options.include_usage`:
  the first chunk, a middle one, the last one with choices, the usage chunk (and `[DONE]`);
- /flush_cache: status code and body, idle and while a request of another client runs (also
  with 0.5.23's `?timeout=1`);
- /metrics: every sample name with the set of its label names.

Why a tool and not a module of the package: it is a test instrument for the emulator's fidelity,
used by the real-engine job and by whoever changes the emulator; the package never needs it at
run time, so it stays out of `specguard/` (whose dependencies and surface stay lean). It needs only
httpx, which specguard already requires.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

# /server_info keys that specguard reads (specguard/engines/sglang.py, specguard/measure/metrics.py).
SERVER_INFO_KEYS = (
    "version", "model_path", "launch_command", "internal_states", "max_running_requests", "tp_size",
    "dp_size", "attn_dp_size", "enable_dp_attention", "speculative_algorithm",
    "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "speculative_adaptive", "speculative_adaptive_config",
    "speculative_ngram_max_bfs_breadth", "decode_log_interval",
)

# ------------------------------------------------------------------------------------ shapes


def shape(value: Any) -> Any:
    """The shape of a JSON value: dicts keep their keys, lists the union of their items' shapes,
    scalars become their type name ('int', 'float', 'str', 'bool', 'null')."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        items: list[Any] = []
        for v in value:
            s = shape(v)
            if s not in items:
                items.append(s)
        return items
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return type(value).__name__


def _describe(s: Any) -> str:
    if isinstance(s, dict):
        return "object"
    if isinstance(s, list):
        return "list"
    return str(s)


def diff_shapes(a: Any, b: Any, path: str = "", names: tuple[str, str] = ("A", "B")) -> list[str]:
    """One line per difference between two shapes (from `shape`), naming which side has what.

    Lists compare the union of their item shapes: an empty list matches any list (it says
    nothing about its items)."""
    na, nb = names
    where = path or "(top)"
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in b:
                out.append(f"{p}: only {na} has it ({_describe(a[k])})")
            elif k not in a:
                out.append(f"{p}: only {nb} has it ({_describe(b[k])})")
            else:
                out.extend(diff_shapes(a[k], b[k], p, names))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if not a or not b:
            return []
        if len(a) == 1 and len(b) == 1:
            return diff_shapes(a[0], b[0], f"{path}[]", names)
        if sorted(map(json.dumps, a)) == sorted(map(json.dumps, b)):
            return []
        return [f"{where}[]: items are {' | '.join(map(_describe, a))} on {na}, {' | '.join(map(_describe, b))} on {nb}"]
    if a != b:
        return [f"{where}: {_describe(a)} on {na}, {_describe(b)} on {nb}"]
    return []


# ---------------------------------------------------------------------------------- /metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+\S+")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def metric_label_sets(text: str) -> dict[str, list[list[str]]]:
    """Prometheus text -> {sample name: sorted distinct sorted label-name lists}."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        out.setdefault(m.group(1), set()).add(labels)
    return {k: sorted(list(v) for v in vs) for k, vs in out.items()}


def diff_metrics(a: dict[str, list[list[str]]], b: dict[str, list[list[str]]], names=("A", "B")) -> list[str]:
    na, nb = names
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            out.append(f"/metrics {k}: only {na} has it (labels {a[k]})")
        elif k not in a:
            out.append(f"/metrics {k}: only {nb} has it (labels {b[k]})")
        elif a[k] != b[k]:
            out.append(f"/metrics {k}: labels {a[k]} on {na}, {b[k]} on {nb}")
    return out


# ------------------------------------------------------------------------------------ probes


def _sse_events(client: httpx.Client, path: str, body: dict) -> tuple[int, list[Any]]:
    """POST a streamed request; the decoded `data:` events (the final [DONE] kept as a string)."""
    events: list[Any] = []
    with client.stream("POST", path, json=body, timeout=120.0) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [r.text[:200]]
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            events.append("[DONE]" if data == "[DONE]" else json.loads(data))
    return 200, events


def _pick(events: list[Any]) -> dict[str, Any]:
    """first / middle / last of a stream's JSON events, and whether [DONE] closed it."""
    js = [e for e in events if e != "[DONE]"]
    out: dict[str, Any] = {"done_marker": bool(events) and events[-1] == "[DONE]", "n_events>=3": len(js) >= 3}
    if js:
        out.update(first=js[0], middle=js[len(js) // 2], last=js[-1])
    return out


def _openai_pick(events: list[Any]) -> dict[str, Any]:
    js = [e for e in events if isinstance(e, dict)]
    with_choices = [e for e in js if e.get("choices")]
    usage = [e for e in js if not e.get("choices") and e.get("usage")]
    out: dict[str, Any] = {"done_marker": bool(events) and events[-1] == "[DONE]",
                           "usage_chunks": len(usage), "n_chunks>=3": len(with_choices) >= 3}
    if with_choices:
        out.update(first=with_choices[0], middle=with_choices[len(with_choices) // 2], last=with_choices[-1])
    if usage:
        out["usage_chunk"] = usage[-1]
    return out


def _flush(client: httpx.Client) -> dict[str, Any]:
    r = client.post("/flush_cache", timeout=30.0)
    return {"status": r.status_code, "body_first_line": r.text.splitlines()[0] if r.text else ""}


def _flush_when_idle(client: httpx.Client, wait_s: float = 60.0) -> dict[str, Any]:
    """The idle flush: a request of an earlier client may still be finishing (an aborted stream
    takes a moment to leave the scheduler), so a 400 is retried for up to wait_s seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        got = _flush(client)
        if got["status"] != 400 or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@contextlib.contextmanager
def foreign_stream(base_url: str, headers: dict[str, str], input_ids: list[int]) -> Iterator[bool]:
    """A long streaming /generate from another client while the block runs (yields whether it
    started streaming within 60 s); closing its connection at the end aborts it."""
    started = threading.Event()
    stop = threading.Event()

    def foreign() -> None:
        body = {"input_ids": input_ids, "stream": True,
                "sampling_params": {"max_new_tokens": 3000, "temperature": 0, "ignore_eos": True}}
        with httpx.Client(base_url=base_url, headers=headers) as c, \
                c.stream("POST", "/generate", json=body, timeout=180.0) as r:
            for _ in r.iter_lines():
                started.set()
                if stop.is_set():
                    break  # closing the connection aborts the request

    t = threading.Thread(target=foreign, daemon=True)
    t.start()
    try:
        yield started.wait(60.0)
    finally:
        stop.set()
        t.join(120.0)


def _flush_while_busy(base_url: str, headers: dict[str, str], input_ids: list[int]) -> dict[str, Any]:
    """/flush_cache while a request of another client is streaming (it must be refused)."""
    with foreign_stream(base_url, headers, input_ids) as streaming:
        if not streaming:
            return {"status": "foreign request never streamed"}
        time.sleep(0.2)
        with httpx.Client(base_url=base_url, headers=headers) as c:
            out = _flush(c)
            # 0.5.23's ?timeout=S: waits up to S s for idle, then 400 (flush_wrapper.py)
            r = c.post("/flush_cache", params={"timeout": "1"}, timeout=30.0)
            out["timeout=1 status"] = r.status_code
            out["timeout=1 body_first_line"] = r.text.splitlines()[0] if r.text else ""
            return out


def probe(base_url: str, input_ids: list[int], *, api_key: str | None = None, output_len: int = 16) -> dict[str, Any]:
    """Everything compared, from one server, as raw JSON values (shape() is applied later)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60.0) as c:
        info = c.get("/server_info").json()
        out["/server_info"] = {k: info[k] for k in SERVER_INFO_KEYS if k in info}
        if isinstance(info.get("internal_states"), list):
            out["/server_info"]["internal_states"] = f"list of {len(info['internal_states'])}"
        state = (info.get("internal_states") or [None])[0]
        if isinstance(state, dict):
            # SGLang repeats every server argument (~550) in each entry; compared here: the live
            # scheduler state (keys that are not top-level server arguments) and the keys
            # specguard reads.
            state = {k: v for k, v in state.items() if k not in info or k in SERVER_INFO_KEYS}
        out["/server_info internal_states[0]"] = state
        out["/model_info"] = c.get("/model_info").json()
        model = info.get("served_model_name") or info.get("model_path") or "default"
        out["/flush_cache idle"] = _flush_when_idle(c)  # also empties the prefix cache: no cached tokens below
        sp = {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}
        status, ev = _sse_events(c, "/generate", {"input_ids": input_ids, "sampling_params": sp, "stream": True})
        out["/generate stream"] = {"status": status, **_pick(ev)}
        status, ev = _sse_events(c, "/v1/completions", {
            "model": model, "prompt": input_ids, "max_tokens": output_len, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}})
        out["/v1/completions stream"] = {"status": status, **_openai_pick(ev)}
        status, ev = _sse_events(c, "/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": "Say something."}], "max_tokens": output_len,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        out["/v1/chat/completions stream"] = {"status": status, **_openai_pick(ev)}
        out["/metrics"] = c.get("/metrics").text
    out["/flush_cache busy"] = _flush_while_busy(base_url, headers, input_ids)
    return out


# Values that are part of the contract (compared exactly, not by shape).
EXACT = ("status", "body_first_line", "timeout=1 status", "timeout=1 body_first_line", "done_marker", "usage_chunks",
         "n_events>=3", "n_chunks>=3")


def compare(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str] = ("A", "B")) -> list[str]:
    """One line per difference between two probes."""
    na, nb = names
    out: list[str] = []
    for section in sorted(set(a) | set(b)):
        if section not in a or section not in b:
            out.append(f"{section}: only {na if section in a else nb} was probed")
            continue
        va, vb = a[section], b[section]
        if section == "/metrics":
            out.extend(diff_metrics(metric_label_sets(va), metric_label_sets(vb), names))
            continue
        if isinstance(va, dict) and isinstance(vb, dict):
            for k in EXACT:
                if k in va or k in vb:
                    if va.get(k) != vb.get(k):
                        out.append(f"{section} {k}: {va.get(k)!r} on {na}, {vb.get(k)!r} on {nb}")
            va = {k: v for k, v in va.items() if k not in EXACT}
            vb = {k: v for k, v in vb.items() if k not in EXACT}
        out.extend(f"{section} {line}" for line in diff_shapes(shape(va), shape(vb), "", names))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url_a")
    ap.add_argument("url_b")
    ap.add_argument("--names", nargs=2, default=["A", "B"], metavar=("NAME_A", "NAME_B"))
    ap.add_argument("--input-ids", default="10,11,12,13,14,15,16,17",
                    help="comma-separated prompt ids, valid for both servers' models (default %(default)s)")
    ap.add_argument("--dump", help="write both probes as JSON to this file")
    args = ap.parse_args(argv)
    ids = [int(x) for x in args.input_ids.split(",")]
    a, b = probe(args.url_a, ids), probe(args.url_b, ids)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump({args.names[0]: a, args.names[1]: b}, f, indent=1, default=str)
    diffs = compare(a, b, tuple(args.names))
    for line in diffs:
        print(line)
    print(f"{len(diffs)} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
