"""Speculative-decoding arguments as SGLang 0.5.23 resolves them at launch
(srt/arg_groups/speculative_hook.py: ``handle_speculative_decoding``, the per-algorithm handlers
``_handle_eagle_family``, ``_handle_ngram``, ``_handle_dflash``, and
``_auto_choose_speculative_params``; flag defaults from srt/arg_groups/fields/spec.py)."""

from __future__ import annotations

# SpeculativeAlgorithm (srt/speculative/spec_info.py) plus the NEXTN alias.
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "FROZEN_KV_MTP", "UNO")
# _resolve_speculative_algorithm_alias: NEXTN (MTP heads) runs, and /server_info reports it, as EAGLE
# (with a Gemma4 assistant draft both become FROZEN_KV_MTP, which /server_info then reports).
ALIASES = {"NEXTN": "EAGLE"}
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # _handle_eagle_family: topk, trees, the topk == 1 rewrite
# Every built-in handler but _handle_uno sets max_running_requests to 48 when it is not given.
NO_DEFAULT_CAP = ("UNO",)
DEFAULT_CAP = 48
CAP_RESET_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
                     "setting --max-running-requests.")
NGRAM_DEFAULT_DRAFT_TOKENS = 12  # _handle_ngram
NGRAM_DEFAULT_BFS_BREADTH = 10  # --speculative-ngram-max-bfs-breadth
DFLASH_DEFAULT_BLOCK_SIZE = 16  # _handle_dflash
# _auto_choose_speculative_params: (num_steps, eagle_topk, num_draft_tokens) when steps are not given.
AUTO_PARAMS_WIDE = (5, 4, 8)
AUTO_PARAMS_DEFAULT = (3, 1, 4)
WIDE_TREE_ARCHITECTURES = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")


def resolved_algorithm(algorithm: str | None) -> str | None:
    """The algorithm as the server runs and reports it (upper case, NEXTN as EAGLE); None: no speculation."""
    if not algorithm:
        return None
    upper = algorithm.upper()
    return ALIASES.get(upper, upper)


def default_cap_applies(algorithm: str | None) -> bool:
    """Does the algorithm's handler set max_running_requests = 48 when it is not given?"""
    upper = (algorithm or "").upper()
    return upper in ALGORITHMS and upper not in NO_DEFAULT_CAP


def auto_params(algorithm: str | None, architecture: str | None) -> tuple[int, int, int]:
    """(steps, topk, draft tokens) SGLang picks when steps are not given: STANDALONE first, then by
    the target's architecture (``hf_config.architectures[0]``)."""
    if (algorithm or "").upper() == "STANDALONE":
        return AUTO_PARAMS_DEFAULT
    return AUTO_PARAMS_WIDE if architecture in WIDE_TREE_ARCHITECTURES else AUTO_PARAMS_DEFAULT


def ngram_params(num_steps: int | None, num_draft_tokens: int | None, max_bfs_breadth: int | None) -> tuple[int, int, int]:
    """(steps, topk, draft tokens) of an NGRAM server (_handle_ngram): topk is always
    --speculative-ngram-max-bfs-breadth, draft tokens default 12, steps draft // topk; no
    topk == 1 rewrite, and draft tokens without steps is valid."""
    topk = max_bfs_breadth or NGRAM_DEFAULT_BFS_BREADTH
    draft = num_draft_tokens if num_draft_tokens is not None else NGRAM_DEFAULT_DRAFT_TOKENS
    return (num_steps if num_steps is not None else draft // topk), topk, draft
