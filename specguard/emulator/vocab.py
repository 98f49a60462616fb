"""The emulated model's vocabulary size, and the request checks SGLang 0.5.23 makes against it.

Why: specguard reads a served model's vocabulary in attach mode by sending an out-of-vocabulary
id and parsing the 400 (specguard/workload.py vocab_size_from_server), so the emulator must refuse
the same requests with the same text. Sources (SGLang 0.5.23):
- token_ids_logprob: tokenizer_manager.py TokenizerManager._validate_token_ids_logprob;
- logit_bias keys: sampling/sampling_params.py SamplingParams.verify;
- both run after the context-length check (TokenizerManager._validate_one_request).
Input ids are NOT checked by SGLang: one id >= vocab_size crashes the real server (IndexError in
embed_tokens; capture sglang-0.5.23-cpu-2/out-of-vocab-crash.log). The emulator refuses such a
request with a clear error instead, on purpose (crashing a test target helps nobody).
"""

from __future__ import annotations

from typing import Any

from specguard.sglang_rules import SGLANG_VERSION
from specguard.workload import vocab_size_from_model_dir  # the same reader the load generator uses


def resolve_vocab_size(model_path: str | None, profile_vocab_size: int) -> int:
    """The vocabulary the emulator checks against: the model directory's config.json when it
    exists here (what SGLang's model_config.vocab_size reads), else the profile's value."""
    return vocab_size_from_model_dir(model_path) or profile_vocab_size


def token_ids_logprob_error(value: Any, vocab_size: int) -> str | None:
    """SGLang's message for a bad `token_ids_logprob`, or None when it is fine (empty counts as absent)."""
    if not value:
        return None
    if not isinstance(value, list):
        return "token_ids_logprob must be a flat list of integers."
    for token_id in value:
        if not isinstance(token_id, int):
            return "token_ids_logprob must be a flat list of integers."
        if token_id < 0 or token_id >= vocab_size:
            return (f"token_ids_logprob contains out-of-vocabulary token id {token_id}; "
                    f"valid range is [0, {vocab_size}).")
    return None


def logit_bias_error(value: Any, vocab_size: int) -> str | None:
    """SGLang's message for a `logit_bias` key outside the vocabulary, or None."""
    if not isinstance(value, dict):
        return None
    for token_id in value:
        try:
            ok = 0 <= int(token_id) < vocab_size
        except (TypeError, ValueError):
            return f"invalid literal for int() with base 10: {token_id!r}"
        if not ok:
            return f"logit_bias must has keys in [0, {vocab_size - 1}], got {token_id}."
    return None


def input_ids_error(ids: list[int], vocab_size: int) -> str | None:
    """Emulator-only (a real 0.5.23 server crashes instead): the first input id outside the vocabulary."""
    for token_id in ids:
        if token_id < 0 or token_id >= vocab_size:
            return (f"input_ids contains out-of-vocabulary token id {token_id}; the model's vocabulary is "
                    f"[0, {vocab_size}). (SGLang {SGLANG_VERSION} does not check input ids and its server crashes on "
                    f"this request; the specguard emulator refuses it instead.)")
    return None
