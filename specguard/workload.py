"""Deterministic prompts, so every run of a cell does exactly the same work.

Nothing is downloaded: random ids and the repeated id are generated from a seed, the text
prompts ship with the package, and a user JSONL file is read as given.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specguard import datasets
from specguard.notes import Note, NoteKind

WORKLOAD_KINDS = ("random-ids", "repeated-id", "text", "jsonl", "categories", "sharegpt")

# `random-ids` draws ids from [RANDOM_ID_LOW, vocab_size): ids below 100 are mostly special and
# control tokens in real vocabularies.
RANDOM_ID_LOW = 100
# Where neither the suite file (workload.vocab_size) nor the model or server says otherwise, ids
# stay below 32000: the smallest vocabulary of the model families SGLang serves with speculative
# decoding (Llama-2 and Mistral 32000; Llama-3 128256, Qwen2/3 151936, DeepSeek-V3 129280). A
# smaller model needs its config.json readable (launch mode: --model-path is read) or the suite
# key: SGLang 0.5.23 does not validate input ids, and one id >= the vocabulary crashes the whole
# server (IndexError in embed_tokens, then SIGQUIT).
DEFAULT_VOCAB_SIZE = 32000


class WorkloadError(ValueError):
    """A workload that cannot be built; the message names the field or file."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What to send: prompt kind, lengths and the seed that fixes it."""

    kind: str = "random-ids"
    input_len: int = 128
    output_len: int = 128
    seed: int = 0
    repeated_id: int = 23066  # the id the seed-A Qwen run repeated
    vocab_size: int = DEFAULT_VOCAB_SIZE  # random-ids stay below it (and below the model's own)
    path: str | None = None  # JSONL file for kind "jsonl", ShareGPT JSON file for kind "sharegpt"

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise WorkloadError(f"workload kind {self.kind!r} is not one of {', '.join(WORKLOAD_KINDS)}")
        if self.input_len <= 0 or self.output_len <= 0:
            raise WorkloadError("workload input_len and output_len must be positive")
        if self.kind in ("jsonl", "sharegpt") and not self.path:
            raise WorkloadError(f"workload kind {self.kind!r} needs a path")
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 2:
            raise WorkloadError(f"workload vocab_size must be an integer >= 2 (got {self.vocab_size!r})")


@dataclass(frozen=True)
class Prompt:
    """One request's input: token ids or text (never both)."""

    input_ids: tuple[int, ...] | None = None
    text: str | None = None
    category: str = ""


@dataclass(frozen=True)
class Workload:
    spec: WorkloadSpec
    prompts: tuple[Prompt, ...] = field(repr=False)

    def prompt(self, index: int) -> Prompt:
        """Request `index` of a run; the same index always gets the same prompt."""
        return self.prompts[index % len(self.prompts)]

    def digest(self) -> str:
        """A hash of everything sent, for the baseline fingerprint."""
        h = hashlib.sha256(json.dumps(self.spec.__dict__, sort_keys=True).encode())
        for p in self.prompts:
            h.update(repr((p.input_ids, p.text)).encode())
        return h.hexdigest()[:16]


def shipped_prompts() -> list[dict[str, str]]:
    """The realistic prompts written for this project (coding, reasoning, chat)."""
    text = resources.files("specguard").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _read_jsonl(path: Path) -> list[Prompt]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"cannot read workload file {path}: {exc.strerror}") from exc
    prompts: list[Prompt] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            prompts.append(Prompt(text=obj["text"], category=str(obj.get("category", ""))))
        elif isinstance(obj, dict) and isinstance(obj.get("input_ids"), list) and all(
            isinstance(i, int) for i in obj["input_ids"]
        ):
            prompts.append(Prompt(input_ids=tuple(obj["input_ids"]), category=str(obj.get("category", ""))))
        else:
            raise WorkloadError(f"{path}:{lineno}: each line needs \"text\" (string) or \"input_ids\" (list of ints)")
    if not prompts:
        raise WorkloadError(f"workload file {path} has no prompts")
    return prompts


def build_workload(spec: WorkloadSpec, num_prompts: int = 256) -> Workload:
    """Materialise the prompts once, up front, so nothing is generated while measuring."""
    if spec.kind == "random-ids":
        rng = np.random.default_rng(spec.seed)
        low = min(RANDOM_ID_LOW, spec.vocab_size // 2)  # 100 for any real vocabulary (> 200)
        ids = rng.integers(low, spec.vocab_size, size=(num_prompts, spec.input_len))
        prompts = tuple(Prompt(input_ids=tuple(int(x) for x in row)) for row in ids)
    elif spec.kind == "repeated-id":
        prompts = (Prompt(input_ids=(spec.repeated_id,) * spec.input_len),)
    elif spec.kind == "text":
        shipped = shipped_prompts()
        order = np.random.default_rng(spec.seed).permutation(len(shipped))
        prompts = tuple(Prompt(text=shipped[i]["text"], category=shipped[i]["category"]) for i in order)
    elif spec.kind == "categories":  # the shipped per-category sets, round robin (specguard/datasets.py)
        prompts = tuple(Prompt(text=t, category=c) for c, t in datasets.interleaved_categories())
    elif spec.kind == "sharegpt":
        try:
            conversations = datasets.read_sharegpt(Path(spec.path or ""))
        except datasets.DatasetError as exc:
            raise WorkloadError(str(exc)) from None
        order = np.random.default_rng(spec.seed).permutation(len(conversations))
        prompts = tuple(Prompt(text=conversations[i][1], category=conversations[i][0]) for i in order)
    else:
        prompts = tuple(_read_jsonl(Path(spec.path or "")))
    return Workload(spec=spec, prompts=prompts)


# ------------------------------------------------------------------------- vocabulary bound
# SGLang 0.5.23 embeds input ids without checking them against the vocabulary: one id >= the
# model's vocab_size raises IndexError in embed_tokens (sglang/srt/layers/vocab_parallel_embedding.py,
# VocabParallelEmbedding._embed_local_shard) and the whole server exits. So the ids a workload sends
# are bounded by the model's vocabulary, read from wherever it can be read.


@dataclass(frozen=True)
class VocabBound:
    """The largest id + 1 a workload may send to one server, and where that number came from."""

    vocab_size: int
    source: str  # "config.json (PATH)", "server (...)", or "workload.vocab_size"
    note: Note | None = None  # said once in the summary when the bound is only the suite's value/default


def vocab_size_from_config(config: dict[str, Any]) -> int | None:
    """`vocab_size` of a Hugging Face config.json; multimodal configs nest it (text_config,
    llm_config, language_config)."""
    for key in (None, "text_config", "llm_config", "language_config"):
        section = config if key is None else config.get(key)
        if isinstance(section, dict):
            value = section.get("vocab_size")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def vocab_size_from_model_dir(model_path: str | Path | None) -> int | None:
    """The vocabulary size in a LOCAL model directory's config.json, or None (a hub id, a missing
    or unreadable file, no vocab_size). Never downloads anything."""
    if not model_path:
        return None
    path = Path(model_path).expanduser() / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return vocab_size_from_config(config) if isinstance(config, dict) else None


# What SGLang (>= 0.5.23) says when a request names a token outside the vocabulary; the request is
# refused with 400 by the tokenizer manager before it reaches the model (tokenizer_manager.py
# TokenizerManager._validate_token_ids_logprob; sampling/sampling_params.py SamplingParams.verify).
_VOCAB_MESSAGES = (
    (re.compile(r"valid range is \[0, (\d+)\)"), 0),   # token_ids_logprob: [0, vocab)
    (re.compile(r"keys in \[0, (\d+)\]"), 1),          # logit_bias: [0, vocab - 1]
)
_PROBE_ID = 2**31 - 1
_PROBE_MIN_VERSION = (0, 5, 23)  # validated (and so harmless) from this version on
# (top-level fields, sampling_params fields) of each probe, tried in order until one tells
_PROBES: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    ({"token_ids_logprob": [_PROBE_ID], "return_logprob": True}, {}),
    ({}, {"logit_bias": {str(_PROBE_ID): 0.0}}),
)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in re.split(r"[.+-]", version)[:3]:
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def vocab_size_from_server(client: Any, *, server_info: dict[str, Any] | None = None) -> tuple[int | None, str]:
    """What a running SGLang server tells about its vocabulary: (vocab_size or None, how).

    `client` is an httpx.Client with the server's base_url (and auth). In order:
    1. the model directory it serves, when it is a local directory here (`model_path` or
       `tokenizer_path` of /model_info, else /server_info): its config.json;
    2. SGLang >= 0.5.23 only: a one-token /generate naming token id 2**31-1 in
       `token_ids_logprob` (then `logit_bias`); the server refuses it with 400 "... valid range is
       [0, V)" before scheduling anything. Older servers are not probed: without that validation
       the probe itself could crash them.
    /model_info, /server_info and /v1/models carry no vocabulary size, and /tokenize only
    encodes text, so there is nothing else to read."""
    model_info, info = _model_and_server_info(client, server_info)
    for source in (model_info, info):
        served = _vocab_of_served_dir(source)
        if served:
            return served
    version = str((info or {}).get("version", ""))
    if not version or _version_tuple(version) < _PROBE_MIN_VERSION:
        return None, f"server version {version or 'unknown'} < 0.5.23: not probed"
    return _probe_vocab(client, version) or (None, f"server {version} did not tell its vocabulary")


def _model_and_server_info(client: Any, server_info: dict[str, Any] | None) -> tuple[Any, Any]:
    """The JSON of /model_info and of /server_info (unless given); {} for what cannot be read,
    and for both when either request fails."""
    try:
        r = client.get("/model_info", timeout=10.0)
        model_info = r.json() if r.status_code == 200 else {}
        if server_info is not None:
            return model_info, server_info
        r = client.get("/server_info", timeout=10.0)
        return model_info, (r.json() if r.status_code == 200 else {})
    except Exception:  # noqa: BLE001 - any transport or JSON error: nothing read
        return {}, server_info or {}


def _vocab_of_served_dir(info: Any) -> tuple[int, str] | None:
    """The vocabulary in the config.json of the model or tokenizer directory a server names, when
    that directory is local here."""
    for key in ("model_path", "tokenizer_path"):
        value = info.get(key) if isinstance(info, dict) else None
        if isinstance(value, str) and value:
            found = vocab_size_from_model_dir(value)
            if found:
                return found, f"config.json of the served model ({value})"
    return None


def _probe_vocab(client: Any, version: str) -> tuple[int, str] | None:
    """The vocabulary from SGLang's 400 to an out-of-vocabulary id; None when no probe tells."""
    for extra, sampling_extra in _PROBES:
        sampling = {"max_new_tokens": 1, "temperature": 0, **sampling_extra}
        body = {"input_ids": [0], "sampling_params": sampling, "stream": False, **extra}
        try:
            r = client.post("/generate", json=body, timeout=30.0)
        except Exception:  # noqa: BLE001
            continue
        if r.status_code != 400:
            continue
        for pattern, offset in _VOCAB_MESSAGES:
            m = pattern.search(r.text)
            if m:
                return int(m.group(1)) + offset, f"server {version} (out-of-vocabulary probe: {m.group(0)})"
    return None


def resolve_vocab_bound(spec: WorkloadSpec, *, model_path: str | None = None, client: Any = None,
                        server_info: dict[str, Any] | None = None, probe_server: bool = True) -> VocabBound:
    """The id bound for one server: min(workload.vocab_size, the model's vocabulary).

    Launch mode: pass `model_path` (the --model-path given); attach mode: pass `client` (and the
    /server_info already read, if any). The model's own size comes from its config.json, else
    from the server (vocab_size_from_server, SGLang only: pass probe_server=False for other
    engines); where neither tells, the suite's workload.vocab_size (default 32000) stands alone
    and `note` says so."""
    found = vocab_size_from_model_dir(model_path)
    how = f"config.json ({model_path})" if found else ""
    why = ""
    if found is None and client is not None and probe_server:
        found, how_or_why = vocab_size_from_server(client, server_info=server_info)
        how, why = (how_or_why, "") if found else ("", how_or_why)
    if found is None:
        return VocabBound(spec.vocab_size, "workload.vocab_size", note=Note.of(
            NoteKind.VOCAB_UNREAD, vocab_size=spec.vocab_size, why=why, default=int(spec.vocab_size == DEFAULT_VOCAB_SIZE)))
    if found < spec.vocab_size:
        return VocabBound(found, how)
    return VocabBound(spec.vocab_size, f"workload.vocab_size (the model's {found} from {how} is larger)")


def fit_to_vocab(workload: Workload, vocab_size: int) -> Workload:
    """The workload with every input id below `vocab_size`.

    random-ids: the same workload object when every id is already below (its digest, and so its
    baselines, are unchanged), else the same draw with `vocab_size` as the bound. repeated-id and
    jsonl ids are the user's: an id out of range is a WorkloadError naming it, never a request."""
    spec = workload.spec
    if spec.kind == "random-ids":
        if spec.vocab_size <= vocab_size:
            return workload
        return build_workload(replace(spec, vocab_size=vocab_size), num_prompts=len(workload.prompts))
    for i, p in enumerate(workload.prompts):
        bad = [x for x in p.input_ids or () if not 0 <= x < vocab_size]
        if bad:
            what = f"repeated_id {bad[0]}" if spec.kind == "repeated-id" else f"prompt {i + 1} has id {bad[0]}"
            raise WorkloadError(f"workload {what}, outside the model's vocabulary of {vocab_size} tokens "
                                f"(it would crash an SGLang server)")
    return workload
