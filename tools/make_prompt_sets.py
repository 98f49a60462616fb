"""Write the shipped prompt sets, specguard/data/prompts/<category>.jsonl (deterministic).

Every prompt is built here from small hand-written templates and slot values (combinatorially),
so the sets are ours to license with the project (no dataset is copied or downloaded). Each
category gets PER_CATEGORY distinct prompts: enough for a run of 256 concurrent requests (and
twice that many requests) without a prompt repeating inside the run. Rerunning the script
rewrites byte-identical files; tests/config/test_workload_categories.py checks that.

    python tools/make_prompt_sets.py            # write the files
    python tools/make_prompt_sets.py --check    # exit 1 if the files differ from what it would write
"""

from __future__ import annotations

import itertools
import json
import random
import string
import sys
from pathlib import Path

PER_CATEGORY = 576
SEED = 20261130
OUT_DIR = Path(__file__).resolve().parent.parent / "specguard" / "data" / "prompts"

CODE = {
    "templates": [
        "Write a {lang} function that {task}. Add {tests} unit tests and state its time complexity.",
        "Here is a bug report: a {lang} service {symptom} when it {task}. Write the fix and a regression test.",
        "Refactor this {lang} code that {task} so it {goal}; keep the public signature unchanged.",
        "Explain line by line how a {lang} implementation that {task} works, then {goal}.",
    ],
    "lang": ["Python", "Go", "Rust", "TypeScript", "Java", "C++"],
    "task": ["merges two sorted lists", "parses an ISO 8601 date", "deduplicates records by key",
             "computes a rolling median", "validates an email address", "reads a CSV file into structs",
             "retries an HTTP call with backoff", "implements an LRU cache"],
    "tests": ["two", "three", "five"],
    "symptom": ["leaks memory", "deadlocks under load", "returns stale data"],
    "goal": ["avoids global state", "uses no recursion", "streams its input", "is safe to call concurrently"],
}
MATH = {
    "templates": [
        "Solve step by step: a {thing} costs {a} dollars and its price rises by {p} percent each year. "
        "What does it cost after {n} years?",
        "Prove or disprove: for every integer n >= {a}, n^{n} - n is divisible by {p}. Show each step.",
        "A tank holds {a} litres and drains at {p} litres per minute while a pump adds {n} litres per minute. "
        "When is it empty? Explain the {method}.",
        "Find all real x with {a}x^2 - {p}x + {n} = 0 and check each root using the {method}.",
    ],
    "thing": ["bicycle", "laptop", "train ticket", "textbook", "coffee machine", "tent"],
    "a": ["3", "7", "12", "25", "40", "64"],
    "p": ["2", "3", "5", "9"],
    "n": ["2", "3", "4", "6"],
    "method": ["discriminant", "substitution", "vertex form", "factorisation"],
}
CHAT = {
    "templates": [
        "Hi! I'm planning a {length} trip to {place} in {season}. What should I pack and what should I {verb}?",
        "My friend says {claim}. I'm not sure. Can you talk it through with me {tone}?",
        "I've been feeling {mood} about my {topic} lately. Any advice for a {length} reset?",
        "What's a good way to spend a {length} afternoon in {place} if I like {topic}? Keep it {tone}.",
    ],
    "length": ["short", "week-long", "relaxed", "busy"],
    "place": ["Lisbon", "Kyoto", "the Alps", "Montreal", "Cape Town", "Oslo"],
    "season": ["spring", "winter", "the rainy season"],
    "verb": ["avoid", "eat first", "book ahead"],
    "claim": ["coffee dehydrates you", "goldfish forget everything in seconds", "we only use ten percent of our brains"],
    "tone": ["casually", "briefly", "with examples", "like a good teacher"],
    "mood": ["stuck", "tired", "restless", "unmotivated"],
    "topic": ["job", "cooking", "running", "music practice", "garden", "reading"],
}
SUMMARY = {
    "templates": [
        "Summarise in {k} bullet points: The {org} met on {day} to review {subject}. Attendance was {level}; "
        "the main concern was {issue}, and a decision was postponed until {when}.",
        "Give a one-paragraph summary for {audience}: a report from the {org} finds that {subject} "
        "improved after {issue} was addressed, though costs stayed {level} through {when}.",
        "TL;DR for {audience} in {k} sentences: On {day}, the {org} announced changes to {subject} "
        "because of {issue}; the rollout starts {when}.",
    ],
    "k": ["three", "four", "five"],
    "org": ["city council", "school board", "hospital trust", "library committee", "transit authority",
            "water utility"],
    "day": ["Monday", "Thursday", "the first of the month"],
    "subject": ["the annual budget", "bus timetables", "parking rules", "staff hiring", "energy use"],
    "level": ["high", "low", "steady"],
    "issue": ["rising costs", "late deliveries", "public complaints", "a software outage"],
    "when": ["next quarter", "the spring", "after an audit"],
    "audience": ["residents", "a busy manager", "students"],
}
CATEGORIES = {"code": CODE, "math": MATH, "chat": CHAT, "summarisation": SUMMARY}


def _expand(spec: dict) -> list[str]:
    """Every distinct filling of every template (only the slots a template names vary)."""
    out: list[str] = []
    for template in spec["templates"]:
        names = sorted({part[1] for part in string.Formatter().parse(template) if part[1]})
        for values in itertools.product(*(spec[n] for n in names)):
            out.append(template.format(**dict(zip(names, values))))
    return sorted(set(out))


def build() -> dict[str, list[str]]:
    """{category: PER_CATEGORY distinct prompts}, a seeded sample of each category's fillings."""
    sets = {}
    for i, (name, spec) in enumerate(CATEGORIES.items()):
        pool = _expand(spec)
        if len(pool) < PER_CATEGORY:
            raise SystemExit(f"{name}: only {len(pool)} distinct prompts, need {PER_CATEGORY}")
        sets[name] = random.Random(SEED + i).sample(pool, PER_CATEGORY)
    return sets


def render(prompts: list[str], category: str) -> str:
    return "".join(json.dumps({"category": category, "text": t}, ensure_ascii=False) + "\n" for t in prompts)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    differ = []
    for name, prompts in build().items():
        path = OUT_DIR / f"{name}.jsonl"
        text = render(prompts, name)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                differ.append(str(path))
        else:
            OUT_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path}: {len(prompts)} prompts, {len(text.encode())} bytes")
    if differ:
        print("out of date (rerun tools/make_prompt_sets.py): " + ", ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
