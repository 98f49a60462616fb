"""CPU per event of the SSE parser's byte search against a full JSON decode of the same event.

    .venv/bin/python tools/bench_parse_cost.py [--tokens 256] [--repeat 7]

Builds SGLang 0.5.23 native /generate events (cumulative `text` and `output_ids`, the default
output mode) at a given output position and times, per event: `StreamParser.feed` (the client's
hot path: find the line end, read `completion_tokens` by searching back), `json.loads` of the
payload, and `orjson.loads` when orjson is importable (it is not a dependency: run with it on
PYTHONPATH to include it). Also the once-per-request decode of the last event's `meta_info`.
Best of `--repeat` timeit rounds (the least disturbed by other processes), in microseconds.
Single-threaded micro-benchmark: on a loaded machine the figures rise, their ratios hold better.
"""

from __future__ import annotations

import argparse
import json
import timeit

from specguard.measure.sse import StreamParser


def native_event(position: int, final: bool = False) -> bytes:
    """One cumulative native event at output position `position` (tokens so far)."""
    meta = {"id": "0123456789abcdef", "finish_reason": {"type": "length", "length": position} if final else None,
            "prompt_tokens": 128, "weight_version": "default", "completion_tokens": position, "cached_tokens": 0}
    if final:
        meta.update(e2e_latency=1.25, spec_verify_ct=position // 3, spec_accept_length=3.0,
                    spec_num_correct_drafts=position - position // 3, spec_num_proposed_drafts=3 * (position // 3))
    event = {"text": "word " * position, "output_ids": list(range(1000, 1000 + position)), "meta_info": meta}
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def best_us(stmt, number: int, repeat: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="1,64,256,512", help="output positions to time, comma-separated")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--number", type=int, default=2000)
    args = p.parse_args(argv)
    try:
        import orjson  # type: ignore[import-not-found]
    except ImportError:
        orjson = None
    print(f"orjson: {'version ' + orjson.__version__ if orjson else 'not installed (column omitted)'}")
    print("| tokens so far | event bytes | StreamParser.feed us | json.loads us | orjson.loads us |")
    print("|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.tokens.split(",")):
        ev = native_event(n)
        payload = ev[6:-2]
        parser = StreamParser("native")
        parser.feed(native_event(max(n - 1, 0)), 0.0)  # the parser's state just before this event

        def feed(parser=parser, ev=ev, n=n):
            parser.streamed_tokens = n - 1  # every call is the same event arriving after its predecessor
            parser.feed(ev, 1.0)

        t_feed = best_us(feed, args.number, args.repeat)
        t_json = best_us(lambda payload=payload: json.loads(payload), args.number, args.repeat)
        t_or = f"{best_us(lambda payload=payload: orjson.loads(payload), args.number, args.repeat):.1f}" if orjson else "-"
        print(f"| {n} | {len(ev)} | {t_feed:.1f} | {t_json:.1f} | {t_or} |")
    last = native_event(512, final=True)
    meta = last[last.rfind(b'"meta_info":') + 12:-3]
    t_meta = best_us(lambda: json.loads(meta), args.number, args.repeat)
    t_meta_or = f"{best_us(lambda: orjson.loads(meta), args.number, args.repeat):.1f}" if orjson else "-"
    t_close = best_us(lambda: _close(last), args.number // 4, args.repeat)
    print(f"\nlast event's meta_info ({len(meta)} bytes): json.loads {t_meta:.1f} us, orjson.loads {t_meta_or} us; "
          f"a whole final event through feed + close (the parser's once-per-request work): {t_close:.1f} us")
    return 0


def _close(last: bytes) -> None:
    parser = StreamParser("native")
    parser.streamed_tokens = 511
    parser.feed(last, 1.0)
    parser.close()


if __name__ == "__main__":
    raise SystemExit(main())
