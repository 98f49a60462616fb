"""A second tiny target whose layers' hidden states differ, an EAGLE-3 head that reads them, and the
head's mis-wired twin (seed 001): built by hand, their acceptance known before any server runs.

Why a second target: the first one (build_tiny_models.py ``target``) keeps its residual stream at
the current token's embedding in every layer, so any layer a head reads says the same thing and a
wiring bug cannot show. This one greedy-decodes the very same successor map ``succ`` (its outputs
are token-identical to the first target's, so the first target's server stays a valid reference),
but each layer moves its residual stream one token ahead:

* Embeddings are codes, not random vectors. Dimension 0 holds a constant ``c``; the token at
  position i of cycle j sits in plane j (dimensions 1 + 2j, 2 + 2j) at angle i * 108 degrees (3/10
  of a turn: neighbours on a cycle are 108 degrees apart, the nearest other code 36 degrees); each
  token on no cycle has a dimension of its own. Every row has RMS 1, so RMSNorm (weight 1) leaves it
  alone.
* With such codes the successor map is linear: a matrix ``S`` that rotates every cycle's plane by
  108 degrees, sends each off-cycle dimension to its successor's code and keeps dimension 0.
* Each layer's MLP computes ``(S - I) x``: its gate reads only the constant dimension, so
  silu(gate) is the same large positive number for every token and the MLP is linear. Attention
  and the unused MLP units do their real compute through output projections of ~1e-3, as in the
  first target. So the stream entering layer k is the code of succ^k(t): ``H_k`` below.
* lm_head row ``s`` is the code of succ^3(s): after 4 layers the stream is the code of succ^4(t),
  whose best match is s = succ(t); the nearest wrong token scores cos 36 = 0.81 of it.

The EAGLE-3 head (SGLang 0.5.23's LlamaForCausalLMEagle3, srt/models/llama_eagle3.py): at position
i it reads the target's captured hidden states at i and the embedding of x[i+1], runs ``fc`` over
the captures, one decoder layer, ``norm`` and its own lm_head, and feeds its pre-norm output back as
the hidden state of its next step. SGLang captures the stream entering layer id + 1 for every id in
the draft's ``eagle_aux_hidden_state_layer_ids`` (models/llama.py set_eagle3_layers_to_capture), so
ids [-1, 0, 1] hand it [H_0, H_1, H_2]: the embedding and the outputs of layers 0 and 1, the head
was "trained" on those. Its ``fc`` is [S/2, I/2, 0]: both slots give the code of succ(t) = x[i+1];
its decoder layer's MLP is the same linear ``(S - I) x``, so each step moves one token ahead; its
lm_head row s is the code of s. Every draft is the target's next token: accept length = steps + 1.

The mis-wired twin has the same bytes with ids [0, 1, 2], as in seed 001 (trained on [embed,
layer 3, layer 31], served [layer 3, layer 31, layer 59]): SGLang then hands it [H_1, H_2, H_3], one
layer late, ``fc`` yields the code of succ^2(t) and every first draft is one token ahead of the
target: rejected. Accept length 1, and the per-position acceptance breaks at position 1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

TARGET = "eagle3-target"
HEAD = "eagle3-head"
MISWIRED = "eagle3-miswired"
NAMES = [TARGET, HEAD, MISWIRED]
# A symlink the real-SGLang suites name as EAGLE-3's draft: eagle3-head unless a test points it
# at the twin for one run (the same path and fingerprint, the wiring changed).
UNDER_TEST = "eagle3-under-test"
HEAD_LAYER_IDS = [-1, 0, 1]  # the stream entering layers 0, 1, 2: embedding, layer 0, layer 1
MISWIRED_LAYER_IDS = [0, 1, 2]  # one layer late, as seed 001's server read its head's config
TURN_FRACTION = 3  # a step turns a cycle's plane by 3/10 of a turn (coprime with the cycle length)
LINEAR_GATE = 40.0  # silu(40) = 40 to float precision: the MLP's gate is a constant, the MLP linear


def code_matrix(vocab_size: int, hidden: int, cycles: list[list[int]]):
    """The embedding rows (vocab_size x hidden, RMS 1 each): dimension 0 constant, cycle tokens on
    their cycle's plane, each off-cycle token on a dimension of its own."""
    import torch

    cycle_len = len(cycles[0])
    on_cycle = {t for c in cycles for t in c}
    outside = [t for t in range(vocab_size) if t not in on_cycle]
    used = 1 + 2 * len(cycles) + len(outside)
    if used > hidden:
        raise SystemExit(f"{TARGET}: {used} code dimensions do not fit a hidden size of {hidden}")
    r = math.sqrt(hidden / 2)  # the constant and the code share the row's energy: RMS 1
    emb = torch.zeros(vocab_size, hidden, dtype=torch.float64)
    emb[:, 0] = r
    for j, cycle in enumerate(cycles):
        for i, t in enumerate(cycle):
            angle = 2 * math.pi * TURN_FRACTION * i / cycle_len
            emb[t, 1 + 2 * j] = r * math.cos(angle)
            emb[t, 2 + 2 * j] = r * math.sin(angle)
    for k, t in enumerate(outside):
        emb[t, 1 + 2 * len(cycles) + k] = r
    return emb, outside


def successor_matrix(emb, succ: dict[int, int], cycles: list[list[int]], outside: list[int]):
    """S with S @ emb[t] = emb[succ[t]] for every token t (checked)."""
    import torch

    hidden = emb.shape[1]
    cycle_len = len(cycles[0])
    s = torch.eye(hidden, dtype=torch.float64)
    turn = 2 * math.pi * TURN_FRACTION / cycle_len
    rot = torch.tensor([[math.cos(turn), -math.sin(turn)], [math.sin(turn), math.cos(turn)]], dtype=torch.float64)
    for j in range(len(cycles)):
        s[1 + 2 * j:3 + 2 * j, 1 + 2 * j:3 + 2 * j] = rot
    r = emb[0, 0]
    for k, t in enumerate(outside):
        d = 1 + 2 * len(cycles) + k
        s[:, d] = (emb[succ[t]] - emb[succ[t], 0] * torch.eye(hidden, dtype=torch.float64)[0]) / r
    moved = emb @ s.T
    want = emb[[succ[t] for t in range(emb.shape[0])]]
    if (moved - want).abs().max() > 1e-9:
        raise SystemExit(f"{TARGET}: the successor matrix does not map every code to its successor's")
    return s


def linear_mlp(s, hidden: int, intermediate: int, gen, in_std: float, out_std: float) -> dict:
    """gate/up/down weights computing (S - I) x for an input whose dimension 0 is the constant r:
    the first `hidden` units carry it, the others get gate 0 (silu(0) = 0) and random up/down."""
    import torch

    r = math.sqrt(hidden / 2)
    gate = torch.zeros(intermediate, hidden, dtype=torch.float64)
    gate[:hidden, 0] = LINEAR_GATE / r
    up = torch.randn(intermediate, hidden, generator=gen, dtype=torch.float64) * in_std
    up[:hidden] = (s - torch.eye(hidden, dtype=torch.float64)) / LINEAR_GATE
    down = torch.randn(hidden, intermediate, generator=gen, dtype=torch.float64) * out_std
    down[:, :hidden] = torch.eye(hidden, dtype=torch.float64)
    return {"gate_proj.weight": gate, "up_proj.weight": up, "down_proj.weight": down}


def build_target(d: Path, config, emb, s, succ: dict[int, int], gen, alpha: float, in_std: float,
                 out_std: float):
    """The second target as a LlamaForCausalLM; returns the model (its greedy map is checked by the
    caller like the first target's)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)  # module init draws from the global RNG; everything is overwritten below
    model = LlamaForCausalLM(config).to(torch.float32)
    hidden, inter = config.hidden_size, config.intermediate_size
    r2 = hidden / 2
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(emb)
        for layer in model.model.layers:
            for name, p in sorted(layer.named_parameters()):
                if name.endswith("layernorm.weight"):
                    p.fill_(1.0)
                elif name.endswith("o_proj.weight"):
                    p.copy_(torch.randn(p.shape, generator=gen) * out_std)
                elif name.startswith("self_attn."):
                    p.copy_(torch.randn(p.shape, generator=gen) * in_std)
            for name, w in linear_mlp(s, hidden, inter, gen, in_std, out_std).items():
                layer.mlp.get_parameter(name).copy_(w)
        model.model.norm.weight.fill_(1.0)
        s3 = torch.linalg.matrix_power(s, 3)
        codes = emb.clone()
        codes[:, 0] = 0
        head = (codes @ s3.T) * (alpha / r2)  # row s: the code of succ^3(s)
        successors = set(succ.values())
        for t in range(config.vocab_size):
            if t not in successors:
                head[t] = 0  # never a successor, never predicted
        model.lm_head.weight.copy_(head)
    model.eval()
    return model


def head_weights(emb, s, vocab_size: int, hidden: int, intermediate: int, gen, alpha: float, in_std: float,
                 out_std: float) -> dict:
    """The EAGLE-3 head's tensors, named as SGLang's loader reads them (midlayer.* -> layers.0.*)."""
    import torch

    def rnd(std, *shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std

    eye = torch.eye(hidden, dtype=torch.float64)
    codes = emb.clone()
    codes[:, 0] = 0
    weights = {
        "fc.weight": torch.cat([s / 2, eye / 2, torch.zeros(hidden, hidden, dtype=torch.float64)], dim=1),
        "midlayer.self_attn.q_proj.weight": rnd(in_std, hidden, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rnd(in_std, hidden, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rnd(in_std, hidden, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rnd(out_std, hidden, hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden), "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden), "norm.weight": torch.ones(hidden),
        "lm_head.weight": codes * (alpha / (hidden / 2)),  # row s: the code of s
        "embed_tokens.weight": emb,  # SGLang shares the target's (set_embed); the same values here
    }
    weights.update({f"midlayer.mlp.{k}": v for k, v in linear_mlp(s, hidden, intermediate, gen, in_std,
                                                                    out_std).items()})
    return {k: v.to(torch.float32).contiguous() for k, v in sorted(weights.items())}


def draft_chains(model, weights: dict, layer_ids: list[int], tokens: list[int], steps: int) -> list[list[int]]:
    """The head's drafts for each token t = x[i] as SGLang's main path computes them (the 1e-3
    attention additions left out): captures from the HF target's hidden states (hidden_states[k] is
    the stream entering layer k), fc, then per step the linear MLP, norm and lm_head."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor([[t] for t in tokens]), output_hidden_states=True)
        aux = torch.cat([out.hidden_states[i + 1][:, -1] for i in layer_ids], dim=-1)
        stream = aux @ weights["fc.weight"].T
        chains: list[list[int]] = [[] for _ in tokens]
        for _ in range(steps):
            normed = stream / stream.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
            mlp = weights["midlayer.mlp.down_proj.weight"] @ (
                torch.nn.functional.silu(normed @ weights["midlayer.mlp.gate_proj.weight"].T)
                * (normed @ weights["midlayer.mlp.up_proj.weight"].T)).T
            stream = stream + mlp.T
            normed = stream / stream.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
            for chain, t in zip(chains, (normed @ weights["lm_head.weight"].T).argmax(-1).tolist()):
                chain.append(t)
    return chains


def accept_length(chains: list[list[int]], tokens: list[int], succ: dict[int, int]) -> float:
    """Greedy verification of each chain from x[i] (the chain drafts x[i+2], x[i+3], ...: x[i+1] is
    the token the target just produced): 1 + the leading drafts that match, averaged."""
    total = 0
    for chain, t in zip(chains, tokens):
        want, accepted = succ[succ[t]], 0
        for got in chain:
            if got != want:
                break
            accepted += 1
            want = succ[want]
        total += 1 + accepted
    return total / len(tokens)


def build(out: Path, vocab_size: int, specials: tuple[int, int, int], hf_tok, succ: dict[int, int],
          cycles: list[list[int]], llama_config, check_greedy, knobs: dict) -> dict:
    """Writes eagle3-target, eagle3-head and eagle3-miswired under ``out``; returns their report
    entries. ``knobs``: hidden, draft_intermediate, alpha, in_std, out_std, seed, steps."""
    import torch
    from safetensors.torch import save_file

    bos, eos, pad = specials
    hidden = knobs["hidden"]
    emb, outside = code_matrix(vocab_size, hidden, cycles)
    s = successor_matrix(emb, succ, cycles, outside)
    cfg = llama_config(vocab_size, 4, knobs["target_intermediate"], bos, eos, pad)
    gen = torch.Generator().manual_seed(knobs["seed"])
    model = build_target(out / TARGET, cfg, emb.to(torch.float32), s.to(torch.float32), succ, gen, knobs["alpha"],
                         knobs["in_std"], knobs["out_std"])
    check_greedy(model, succ)
    model.save_pretrained(out / TARGET, safe_serialization=True)
    hf_tok.save_pretrained(out / TARGET)

    weights = head_weights(emb, s, vocab_size, hidden, knobs["draft_intermediate"], gen, knobs["alpha"],
                           knobs["in_std"], knobs["out_std"])
    on_cycle = [t for c in cycles for t in c]
    report = {TARGET: {"path": str(out / TARGET), "layers": 4, "hidden": hidden,
                       "intermediate": knobs["target_intermediate"],
                       "params": sum(p.numel() for p in model.parameters()), "agreement_with_target": 1.0}}
    for name, ids, expected in ((HEAD, HEAD_LAYER_IDS, knobs["steps"] + 1.0), (MISWIRED, MISWIRED_LAYER_IDS, 1.0)):
        chains = draft_chains(model, weights, ids, on_cycle, knobs["steps"])
        got = accept_length(chains, on_cycle, succ)
        if abs(got - expected) > 1e-9:
            raise SystemExit(f"{name}: replayed accept length {got:.3f} with {knobs['steps']} steps, built for {expected:g}")
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
        config = {
            "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": knobs["draft_intermediate"], "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads, "num_hidden_layers": 1, "vocab_size": vocab_size,
            "draft_vocab_size": vocab_size, "max_position_embeddings": cfg.max_position_embeddings,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
            "torch_dtype": "float32", "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
        }
        (d / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        hf_tok.save_pretrained(d)
        report[name] = {"path": str(d), "layers": 1, "hidden": hidden, "intermediate": knobs["draft_intermediate"],
                        "params": sum(v.numel() for v in weights.values()),
                        "agreement_with_target": sum(c[0] == succ[succ[t]] for c, t in zip(chains, on_cycle))
                        / len(on_cycle),
                        "aux_layer_ids": ids,
                        f"expected_accept_length_{knobs['steps']}_steps": got}
    return report
