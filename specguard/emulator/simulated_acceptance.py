"""SGLang's forced acceptance (``SGLANG_SIMULATE_ACC_LEN``), as a client can observe it.

SGLang's engineers measure the engine alone by forcing every verify step to accept a set length
(issue 30 item 4). What SGLang 0.5.23 does (read from its source; no code copied):

- srt/environ.py ``Envs``: ``SGLANG_SIMULATE_ACC_LEN`` (EnvFloat, default -1: off unless > 0),
  ``SGLANG_SIMULATE_ACC_METHOD`` (default "match-expected"), ``SGLANG_SIMULATE_ACC_TOKEN_MODE``
  (default "fixed"); a value that is not a float warns and falls back to the default
  (``EnvField.get``). spec_utils.py reads all three once, at import.
- srt/speculative/spec_utils.py ``sample_simulated_acc_len``: one length per call, in
  [1, max_len]. "match-expected" clamps L to [1, max_len] and draws floor(L) or floor(L) + 1
  with weights 1 - frac(L) and frac(L) (an integer L is always L); "multinomial" draws
  N(L, 1) once, clamps it to [1, max_len] and rounds it (torch's round: half to even). Any other
  method raises ``Invalid simulate_acc_method``.
- ``generate_simulated_accept_index`` (called by eagle_utils.py ``eagle_sample`` after the real
  verify, for every sampling mode) draws that length once per verify call, i.e. once per batch,
  with max_len = ``max_tree_depth``: EAGLE verify inputs (eagle_info.py, also NEXTN, EAGLE3,
  STANDALONE, UNO and FROZEN_KV_MTP through eagle_worker_common.py ``run_eagle_verify``) have
  spec_steps + 1, NGRAM (ngram_info.py, ngram_worker.py) draft_token_num. Every request of the
  batch then accepts that many tokens (the bonus included): ``num_correct_drafts`` = L - 1 each.
  In "fixed" token mode ``predict`` is filled with token id 100, so every token a verify step
  produces is id 100 (the prefill's first token is the target's own); "real-draft-token" keeps
  the drafter's chain and a target bonus, and eagle_sample refuses it unless the tree's topk is
  1 (NGRAM's irregular tree reports -1), with "SGLANG_SIMULATE_ACC_LEN with real draft tokens
  currently requires speculative_eagle_topk=1."; a token mode other than the two raises.
- DFLASH: dflash_utils.py ``apply_dflash_simulated_acceptance`` draws with the same sampler and
  max_len = the block size (num_draft_tokens), writes ``fixed_token_id`` 100 in "fixed" mode, and
  dflash_worker_v2.py checks the token mode at start-up (``check_simulate_acc_token_mode``).
- DSPARK (dspark_components/) has rules of its own (a length other than 1.0 needs a verify-all
  schedule); the emulator does not model them and refuses the combination.

In the emulator the per-request counters, the gauges and the server info then follow from the
grants as for any verify step. Where SGLang would raise at its first verify (the launch's warm-up
request), the emulator refuses to start (exit code 2) with that message.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

LENGTH_ENV = "SGLANG_SIMULATE_ACC_LEN"
METHOD_ENV = "SGLANG_SIMULATE_ACC_METHOD"
TOKEN_MODE_ENV = "SGLANG_SIMULATE_ACC_TOKEN_MODE"
LENGTH_OFF = -1.0  # environ.py's default; forcing is on only for a value > 0
NOT_MODELLED = ("DSPARK",)

log = logging.getLogger("specguard.emulator")


class AccMethod(enum.Enum):
    MATCH_EXPECTED = "match-expected"
    MULTINOMIAL = "multinomial"


class TokenMode(enum.Enum):
    FIXED = "fixed"  # every verify step's tokens are id 100
    REAL_DRAFT_TOKEN = "real-draft-token"  # the drafter's tokens and a target bonus


@dataclass(frozen=True)
class SimulatedAcceptance:
    """Forced acceptance as SGLang reads it from its environment."""

    length: float
    method: AccMethod = AccMethod.MATCH_EXPECTED
    token_mode: TokenMode = TokenMode.FIXED

    def draw(self, rng: np.random.Generator, max_len: int, length: float | None = None) -> int:
        """One verify call's accept length (bonus included), in [1, max_len]
        (spec_utils.py ``sample_simulated_acc_len``). ``length`` overrides the set value (decay)."""
        target = self.length if length is None else length
        if self.method is AccMethod.MULTINOMIAL:
            value = min(max(rng.normal(target, 1.0), 1.0), float(max_len))
            return int(np.rint(value))  # half to even, as torch.round
        target = min(max(target, 1.0), float(max_len))
        lower = int(target // 1)
        if lower >= max_len:
            return lower
        return lower + 1 if rng.random() < target - lower else lower

    def expected_length(self, max_len: int) -> float:
        """The mean of ``draw`` at this max_len."""
        target = min(max(self.length, 1.0), float(max_len))
        if self.method is AccMethod.MATCH_EXPECTED:
            return target
        # round(clamp(N(L, 1))) = k with the normal's mass on [k - 1/2, k + 1/2), the ends taking the tails
        total = 0.0
        for k in range(1, max_len + 1):
            low = -math.inf if k == 1 else k - 0.5
            high = math.inf if k == max_len else k + 0.5
            total += k * (_normal_cdf(high - self.length) - _normal_cdf(low - self.length))
        return total

    def describe(self) -> dict[str, object]:
        """For /server_info's specguard_emulator section."""
        return {"length": self.length, "method": self.method.value, "token_mode": self.token_mode.value}


def _normal_cdf(x: float) -> float:
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def length_from_environ(env: Mapping[str, str]) -> float | None:
    """``SGLANG_SIMULATE_ACC_LEN`` as SGLang reads it: None when off (unset, <= 0, or not a float,
    which SGLang warns about and replaces by its default -1)."""
    raw = env.get(LENGTH_ENV)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning('Invalid value for %s: "%s" is not a valid float value, using default "%s"',
                    LENGTH_ENV, raw, LENGTH_OFF)
        return None
    return value if value > 0 else None


def from_environ(env: Mapping[str, str], length: float, algorithm: str, topk: int) -> SimulatedAcceptance:
    """The forced acceptance of a speculative server launched with ``length`` (from
    ``length_from_environ``) and this environment's method and token mode. Raises ValueError where
    SGLang would fail at its first verify step (or at start-up), with SGLang's message."""
    method_raw = env.get(METHOD_ENV, AccMethod.MATCH_EXPECTED.value)
    mode_raw = env.get(TOKEN_MODE_ENV, TokenMode.FIXED.value)
    try:
        method = AccMethod(method_raw)
    except ValueError:
        raise ValueError(f"{METHOD_ENV}={method_raw!r}: SGLang 0.5.23 raises 'Invalid simulate_acc_method: "
                         f"{method_raw}' at its first verify step (spec_utils.py sample_simulated_acc_len); use "
                         f"{' or '.join(m.value for m in AccMethod)}") from None
    try:
        mode = TokenMode(mode_raw)
    except ValueError:
        raise ValueError(f"Invalid {TOKEN_MODE_ENV} {mode_raw!r}; expected 'fixed' or 'real-draft-token'.") from None
    if algorithm in NOT_MODELLED:
        raise ValueError(f"{LENGTH_ENV} with {algorithm} is not modelled by the emulator (SGLang's dspark worker "
                         "applies it its own way); unset it or use another algorithm")
    if mode is TokenMode.REAL_DRAFT_TOKEN and algorithm != "DFLASH" and (algorithm == "NGRAM" or topk != 1):
        raise ValueError("SGLANG_SIMULATE_ACC_LEN with real draft tokens currently requires speculative_eagle_topk=1.")
    return SimulatedAcceptance(length, method, mode)
