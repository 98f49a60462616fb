"""PyTorch implementations of the sgl_kernel CPU ops that SGLang 0.5.23's CPU speculation path calls.

Why: on a CPU without AMX (these AMD EPYC machines) and without an sgl_kernel CPU wheel, SGLang's
own CPU speculation code (intel_amx attention backend, EAGLE-family and NGRAM workers) is reachable
only if someone computes what these ops compute. This module does, in plain torch, written from the
semantics of SGLang's call sites (paths under python/sglang/ of the 0.5.23 wheel) and of SGLang's
public CPU kernel tests (test/srt/cpu/test_spec_kernels.py, read as the specification). No SGLang
code is copied. Each op is checked against an independent reference in
tests/tools/test_sgl_cpu_ops.py (exact integer equality; attention within tolerance of torch SDPA).

Used only when SPECGUARD_SGL_CPU_SPEC=1 is in the server's environment: the sgl_kernel stand-in
(tools/sgl_kernel_standin/sgl_kernel) then hands these functions out for exactly the names below
and registers them as torch.ops.sgl_kernel.<name> (intel_amx_backend.py calls the attention ops
through torch.ops); every other sgl_kernel symbol stays a placeholder that raises when called.

Call log: every op appends `OP\\t<name>\\tpid=<pid>\\tn=<count>` to $SPECGUARD_SGL_KERNEL_LOG on its
1st, 10th, 100th, ... call in a process (cheap, and the log still tells which ops computed and
roughly how often).

A slower build on purpose: with SPECGUARD_SGL_VERIFY_DELAY_MS=N in the server's environment,
every verify_tree_greedy_cpu call sleeps N ms first, so speculative verification (and only it: a
non-speculative server never verifies) gets N ms slower per step. Only tests set it: `specguard ab`
on real SGLang compares the venv's python with a wrapper that sets it (tests/real).

What is not implemented raises with one line naming the feature (fp8 KV cache, sliding window,
cross attention, attention sinks): the tiny dense Llama of tools/build_tiny_models.py uses none.
"""

from __future__ import annotations

import ctypes
import os
import time

import torch

LOG_ENV = "SPECGUARD_SGL_KERNEL_LOG"
VERIFY_DELAY_ENV = "SPECGUARD_SGL_VERIFY_DELAY_MS"
_COUNTS: dict[str, int] = {}

# TreeMaskMode of sglang/srt/speculative/eagle_utils.py
FULL_MASK = 0
QLEN_ONLY = 1
QLEN_ONLY_BITPACKING = 2


def _log_call(name: str) -> None:
    n = _COUNTS.get(name, 0) + 1
    _COUNTS[name] = n
    if not _is_power_of_ten(n):
        return
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"OP\tsgl_kernel.{name}\tpid={os.getpid()}\tn={n}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _is_power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


def call_counts() -> dict[str, int]:
    """Calls per op in this process (for tests)."""
    return dict(_COUNTS)


class Unsupported(NotImplementedError):
    """A feature of the op that this torch implementation does not cover."""


def _unsupported(op: str, what: str) -> Unsupported:
    return Unsupported(f"specguard sgl_kernel CPU op {op}: {what} is not implemented (tiny dense Llama only)")


# ----------------------------------------------------------------------------- index ops

def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len, bs_upper=None) -> None:
    """req_to_token[rpi[i], start[i]:end[i]] = the next (end[i]-start[i]) entries of out_cache_loc
    (sglang/srt/mem_cache/allocation.py assign_req_to_token_pool_func; the Triton kernel
    assign_req_to_token_pool beside it). `bs_upper`: an older wrapper's extra argument, unused."""
    _log_call("assign_req_to_token_pool_cpu")
    starts, ends = start_offset.tolist(), end_offset.tolist()
    rows = req_pool_indices.tolist()
    offset = 0
    for row, s, e in zip(rows, starts, ends):
        n = e - s
        if n > 0:
            req_to_token[row, s:e] = out_cache_loc[offset:offset + n].to(req_to_token.dtype)
        offset += max(n, 0)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len) -> None:
    """out_cache_loc = concat over i of req_to_token[rpi[i], start[i]:end[i]] (the inverse gather;
    kernels/ops/speculative/cache_locs.py assign_extend_cache_locs_func and
    fill_front_out_cache_loc_func)."""
    _log_call("assign_extend_cache_locs_cpu")
    parts = [req_to_token[r, s:e] for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(),
                                                    end_offset.tolist()) if e > s]
    if parts:
        flat = torch.cat(parts)
        out_cache_loc[:flat.numel()] = flat.to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len,
                                           topk, num_steps) -> None:
    """Request i's topk*num_steps draft slots, read from req_to_token[rpi[i], seq_lens[i]:],
    laid out contiguously at out_cache_loc[i*topk*num_steps:] (cache_locs.py
    assign_draft_cache_locs_contiguous_func)."""
    _log_call("assign_draft_cache_locs_contiguous_cpu")
    width = topk * num_steps
    if out_cache_loc.numel() != seq_lens.numel() * width:
        raise RuntimeError(f"assign_draft_cache_locs_contiguous_cpu: out_cache_loc has {out_cache_loc.numel()} "
                           f"entries, expected bs * topk * num_steps = {seq_lens.numel() * width}")
    for i, (r, s) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * width:(i + 1) * width] = req_to_token[r, s:s + width].to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len):
    """A [bs*topk, pool_len] req_to_token for the draft decode steps: row b*topk+k is request b's
    committed prefix (seq_lens[b] slots) followed by candidate k's num_steps draft slots, which
    assign_draft_cache_locs_contiguous laid out at seq_lens[b] + k*num_steps
    (layers/attention/intel_amx_backend.py IntelAMXMultiStepDraftBackend.init_forward_metadata).
    Only the first seq_lens[b] + num_steps entries of a row are defined (zeros elsewhere here)."""
    _log_call("build_draft_decode_metadata_cpu")
    rows = req_pool_indices.numel()
    out = torch.zeros((rows * topk, pool_len), dtype=req_to_token.dtype, device=req_to_token.device)
    for b, (r, s) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        prefix = req_to_token[r, :s]
        for k in range(topk):
            out[b * topk + k, :s] = prefix
            out[b * topk + k, s:s + num_steps] = req_to_token[r, s + k * num_steps:s + (k + 1) * num_steps]
    return out


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc, size=None) -> None:
    """The cache slots of the accepted drafts, packed: for the j-th entry of accept_index (row major)
    that is not -1, accept_out_cache_loc[#valid before j] = out_cache_loc[accept_index[j]]
    (kernels/ops/speculative/eagle.py fill_accept_out_cache_loc_func). `size`: an older wrapper's
    extra argument, unused."""
    _log_call("fill_accept_out_cache_loc_cpu")
    flat = accept_index.reshape(-1).to(torch.int64)
    valid = flat[flat >= 0]
    if valid.numel():
        accept_out_cache_loc[:valid.numel()] = out_cache_loc[valid].to(accept_out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride) -> None:
    """bonus_tokens[i] = accept_tokens.flat[accept_stride*i + accept_lens[i] - 1], the last accepted
    token of each request (eagle.py fill_bonus_tokens_func)."""
    _log_call("fill_bonus_tokens_cpu")
    bs = accept_lens.numel()
    if bs == 0:
        return
    idx = torch.arange(bs, dtype=torch.int64) * int(accept_stride) + accept_lens.to(torch.int64) - 1
    bonus_tokens[:bs] = accept_tokens.reshape(-1)[idx].to(bonus_tokens.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """For every KV buffer i (base address data_ptrs[i], row size strides[i] bytes): row tgt_loc[j]
    = row src_loc[j], gathered before any row is written (kernels/ops/kvcache/cache_move.py
    copy_all_layer_kv_cache_func; also the start-up warm-up in mem_cache/memory_pool.py
    MHATokenToKVPool._init_kv_copy_and_warmup). Works on raw addresses, as the kernel does: the
    rows touched are 0..max(loc) of each buffer."""
    _log_call("copy_all_layer_kv_cache_cpu")
    n = min(tgt_loc.numel(), src_loc.numel())
    if n == 0:
        return
    tgt = tgt_loc[:n].to(torch.int64)
    src = src_loc[:n].to(torch.int64)
    if int(tgt.min()) < 0 or int(src.min()) < 0:
        raise RuntimeError("copy_all_layer_kv_cache_cpu: negative cache location")
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(ptr))
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        buf[tgt] = buf[src]  # advanced indexing on the right copies first: in-place safe


# ----------------------------------------------------------------------------- trees

def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """Greedy tree verification (kernels/ops/speculative/spec_tree.py verify_tree_greedy_func, called
    from speculative/eagle_utils.py for EAGLE and NGRAM). Per request: from the root, descend to
    the first child (in next-sibling order) whose draft token equals the target's argmax at the
    last accepted node; stop when no child matches or accept_index is full. Writes
    accept_index[b, :1+m] (flat node indices), accept_token_num[b] = m drafts accepted,
    predicts[node] = target token at every accepted node (the last one's is the bonus token)."""
    _log_call("verify_tree_greedy_cpu")
    _verify_delay()
    bs, _ = candidates.shape
    depth = accept_index.shape[1]
    cand = candidates.tolist()
    ridx, nxt, sib = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    pred_pos: list[int] = []
    pred_val: list[int] = []
    for b in range(bs):
        last = ridx[b][0]
        path = [last]
        node = 0
        while len(path) < depth:
            child = nxt[b][node]
            while child != -1 and cand[b][child] != target[last]:
                child = sib[b][child]
            if child == -1:
                break
            pred_pos.append(last)
            pred_val.append(target[last])
            node = child
            last = ridx[b][child]
            path.append(last)
        pred_pos.append(last)
        pred_val.append(target[last])
        accept_index[b, :len(path)] = torch.tensor(path, dtype=accept_index.dtype)
        accept_token_num[b] = len(path) - 1
    if pred_pos:
        predicts.view(-1)[torch.tensor(pred_pos, dtype=torch.int64)] = torch.tensor(pred_val, dtype=predicts.dtype)


def _verify_delay() -> None:
    """The slower build's verify step (VERIFY_DELAY_ENV, read per call: a test sets it per server)."""
    delay_ms = float(os.environ.get(VERIFY_DELAY_ENV) or 0)
    if delay_ms > 0:
        time.sleep(delay_ms / 1e3)


def _links_from_parents(parent: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """First child and next sibling (both by smallest index > self) from a [bs, n] parent table
    (-1 = no parent); vectorised over the batch."""
    idx = torch.arange(n)
    later = idx.view(1, n, 1) > idx.view(1, 1, n)                       # [1, k, i]: k > i
    is_child = (parent.unsqueeze(2) == idx.view(1, 1, n)) & later        # [bs, k, i]: parent[k] == i
    big = torch.full_like(is_child, n, dtype=torch.int64)
    first_child = torch.where(is_child, idx.view(1, n, 1).expand_as(is_child), big).min(dim=1).values
    first_child = torch.where(first_child < n, first_child, torch.full_like(first_child, -1))
    same = (parent.unsqueeze(2) == parent.unsqueeze(1)) & later & (parent.unsqueeze(1) >= 0)  # [bs, k, i]
    nxt = torch.where(same, idx.view(1, n, 1).expand_as(same), big).min(dim=1).values
    nxt = torch.where(nxt < n, nxt, torch.full_like(nxt, -1))
    return first_child, nxt


def reconstruct_indices_from_tree_mask(tree_mask, verified_seq_len, positions, retrive_index, retrive_next_token,
                                       retrive_next_sibling, batch_size, draft_token_num) -> None:
    """NGRAM verify metadata from its n x n ancestor masks (the contract in SGLang's
    kernels/ops/speculative/reconstruct_tree.py docstring; called from speculative/ngram_worker.py
    through reconstruct_indices_from_tree_mask_func): per request b and node i, with
    anc[i, j] = mask[b, i, j] and j < i: positions = #anc + verified_seq_len[b];
    retrive_index = b*n + i; parent = largest ancestor (or -1); next_token = smallest k > i whose
    ancestors include i; next_sibling = smallest k > i with the same parent (-1 for a root)."""
    _log_call("reconstruct_indices_from_tree_mask")
    bs, n = int(batch_size), int(draft_token_num)
    if bs == 0:
        return
    m = tree_mask.reshape(-1)[:bs * n * n].reshape(bs, n, n).bool()
    idx = torch.arange(n)
    anc = m & (idx.view(1, 1, n) < idx.view(1, n, 1))                   # [bs, i, j]: j < i
    depth = anc.sum(dim=2)
    parent = torch.where(anc, idx.view(1, 1, n).expand_as(anc), torch.full_like(anc, -1, dtype=torch.int64)).max(dim=2).values
    # first child of i: smallest k > i with anc[k, i] (an ancestor, not only the parent, as the contract says)
    big = torch.full((bs, n, n), n, dtype=torch.int64)
    fc = torch.where(anc, idx.view(1, n, 1).expand(bs, n, n), big).min(dim=1).values
    first_child = torch.where(fc < n, fc, torch.full_like(fc, -1))
    _, next_sibling = _links_from_parents(parent, n)
    pos = depth.to(torch.int64) + verified_seq_len.reshape(-1)[:bs].to(torch.int64).view(bs, 1)
    ri = torch.arange(bs * n, dtype=torch.int64).view(bs, n)
    for out, val in ((positions, pos), (retrive_index, ri), (retrive_next_token, first_child),
                     (retrive_next_sibling, next_sibling)):
        out.view(-1)[:bs * n] = val.reshape(-1).to(out.dtype)


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                    retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
                                    draft_token_num, tree_mask_mode) -> None:
    """The EAGLE draft tree (kernels/ops/speculative/spec_tree.py build_tree_kernel_efficient_func,
    from speculative/eagle_utils.py build_tree_kernel_efficient). Node 0 is the verified token;
    node i >= 1 is draft selected_index[b, i-1], whose parent is the root when
    selected_index // topk == 0, else the node holding parent_list[b, selected_index // topk].
    Writes retrive_index = b*n + i, first-child / next-sibling links (children in increasing
    node order), positions = verified_seq_len[b] + depth, and the ancestor-or-self mask: QLEN_ONLY
    as [bs, n, n]; FULL_MASK as per request an [n, seq_len + n] block whose prefix columns are
    true."""
    _log_call("build_tree_kernel_efficient_cpu")
    mode = int(tree_mask_mode)
    if mode not in (FULL_MASK, QLEN_ONLY):
        raise _unsupported("build_tree_kernel_efficient_cpu", f"tree_mask_mode {mode} (bit-packed masks)")
    n = int(draft_token_num)
    bs = selected_index.shape[0]
    sel = selected_index.tolist()
    parents = parent_list.tolist()
    seq = verified_seq_len.tolist()
    parent_tab = torch.full((bs, n), -1, dtype=torch.int64)
    for b in range(bs):
        node_of = {tok: i + 1 for i, tok in enumerate(sel[b])}
        for i in range(1, n):
            group = sel[b][i - 1] // topk
            if group == 0:
                parent_tab[b, i] = 0
            else:
                p = node_of.get(parents[b][group])
                if p is None:
                    raise RuntimeError(f"build_tree_kernel_efficient_cpu: parent of draft {sel[b][i - 1]} "
                                       f"(token {parents[b][group]}) is not among the selected drafts")
                parent_tab[b, i] = p
    # ancestor-or-self: walk parents (depth <= n)
    anc = torch.eye(n, dtype=torch.bool).expand(bs, n, n).clone()
    cur = parent_tab.clone()
    rows = torch.arange(bs).view(bs, 1).expand(bs, n)
    cols = torch.arange(n).view(1, n).expand(bs, n)
    for _ in range(n):
        ok = cur >= 0
        if not bool(ok.any()):
            break
        anc[rows[ok], cols[ok], cur[ok]] = True
        cur = torch.where(ok, parent_tab.gather(1, cur.clamp(min=0)), cur)
    depth_of = anc.sum(dim=2) - 1
    first_child, next_sibling = _links_from_parents(parent_tab, n)
    pos = depth_of + torch.tensor(seq, dtype=torch.int64).view(bs, 1)
    for out, val in ((positions, pos), (retrive_index, torch.arange(bs * n).view(bs, n)),
                     (retrive_next_token, first_child), (retrive_next_sibling, next_sibling)):
        out.view(-1)[:bs * n] = val.reshape(-1).to(out.dtype)
    flat = tree_mask.view(-1)
    if mode == QLEN_ONLY:
        flat[:bs * n * n] = anc.reshape(-1).to(flat.dtype)
    else:
        off = 0
        for b in range(bs):
            s = int(seq[b])
            block = torch.ones((n, s + n), dtype=torch.bool)
            block[:, s:] = anc[b]
            flat[off:off + n * (s + n)] = block.reshape(-1).to(flat.dtype)
            off += n * (s + n)


# ----------------------------------------------------------------------------- attention

def _check_attention(op: str, key_scale, value_scale, k_buffer, is_cross_attn, sliding_window_size, sinks) -> None:
    if k_buffer.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise _unsupported(op, f"KV cache dtype {k_buffer.dtype}")
    if float(key_scale) != 1.0 or float(value_scale) != 1.0:
        raise _unsupported(op, "scaled (quantised) KV cache")
    if is_cross_attn:
        raise _unsupported(op, "cross attention")
    if int(sliding_window_size) > 0:
        raise _unsupported(op, "sliding-window attention")
    if sinks is not None:
        raise _unsupported(op, "attention sinks")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor | None, sm_scale: float,
            logit_cap: float) -> torch.Tensor:
    """q [Lq, Hq, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv], visible [Lq, Lk] -> [Lq, Hq, Dv] (float32)."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * sm_scale
    if logit_cap and logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if visible is not None:
        scores = scores.masked_fill(~visible.unsqueeze(0), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v.float())


def extend_attention_cpu(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale,
                         req_to_token, req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend,
                         sm_scale, logit_cap, is_cross_attn, sliding_window_size, encoder_lens, sinks, tree_mask,
                         is_causal) -> None:
    """Prefill / verify attention over a paged KV cache (layers/attention/intel_amx_backend.py
    IntelAMXAttnBackend.forward_extend; the argument order is that call's). Request i's queries are
    rows extend_start_loc[i] .. + extend_seq_lens[i]; they see the request's prefix (the first
    seq_lens[i] - extend_seq_lens[i] slots of req_to_token[req_pool_indices[i]], fully) and its
    extend tokens (k_extend/v_extend rows, or the cache when they are None): causally, or through
    tree_mask when given (speculative verify: QLEN_ONLY [bs, n, n] ancestor masks, or FULL_MASK
    blocks [n, prefix + n]), or all of them when is_causal is false. GQA by head groups."""
    _log_call("extend_attention_cpu")
    _check_attention("extend_attention_cpu", key_scale, value_scale, k_buffer, is_cross_attn, sliding_window_size,
                     sinks)
    bs = seq_lens.numel()
    lens, ext, starts = seq_lens.tolist(), extend_seq_lens.tolist(), extend_start_loc.tolist()
    rows = req_pool_indices.tolist()
    tmask = tree_mask.reshape(-1).bool() if tree_mask is not None and tree_mask.numel() > 0 else None
    qlen_layout = tmask is not None and tmask.numel() == sum(e * e for e in ext)
    mask_off = 0
    for i in range(bs):
        total, n, s = int(lens[i]), int(ext[i]), int(starts[i])
        if n == 0:
            continue
        prefix = total - n
        slots = req_to_token[rows[i], :total].to(torch.int64)
        if k_extend is not None and v_extend is not None:
            keys = torch.cat([k_buffer[slots[:prefix]], k_extend[s:s + n].to(k_buffer.dtype)])
            values = torch.cat([v_buffer[slots[:prefix]], v_extend[s:s + n].to(v_buffer.dtype)])
        else:
            keys, values = k_buffer[slots], v_buffer[slots]
        visible = torch.ones((n, total), dtype=torch.bool)
        if tmask is not None:
            if qlen_layout:
                visible[:, prefix:] = tmask[mask_off:mask_off + n * n].view(n, n)
                mask_off += n * n
            else:
                visible = tmask[mask_off:mask_off + n * total].view(n, total).clone()
                mask_off += n * total
        elif is_causal:
            visible[:, prefix:] = torch.ones((n, n), dtype=torch.bool).tril()
        out = _attend(q_extend[s:s + n], keys, values, visible, float(sm_scale), float(logit_cap))
        o_extend[s:s + n] = out.to(o_extend.dtype)


def decode_attention_cpu(query, k_cache, v_cache, key_scale, value_scale, output, key, value, loc, attn_logits,
                         req_to_token, req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn,
                         sliding_window_size, encoder_lens, sinks) -> None:
    """One query token per row (intel_amx_backend.py IntelAMXAttnBackend.forward_decode, argument order
    of that call; also the draft decode steps with IntelAMXMultiStepDraftBackend's expanded table).
    When key/value are given, this op itself writes them into the cache at loc (forward_decode
    does not call set_kv_buffer for a non-fp8 cache); then row b attends to the first seq_lens[b]
    slots of req_to_token[req_pool_indices[b]]. attn_logits is the kernel's scratch space: unused."""
    _log_call("decode_attention_cpu")
    _check_attention("decode_attention_cpu", key_scale, value_scale, k_cache, is_cross_attn, sliding_window_size,
                     sinks)
    loc64 = loc.to(torch.int64)
    if key is not None and value is not None:
        k_cache[loc64] = key.reshape(key.shape[0], *k_cache.shape[1:]).to(k_cache.dtype)
        v_cache[loc64] = value.reshape(value.shape[0], *v_cache.shape[1:]).to(v_cache.dtype)
    rows, lens = req_pool_indices.tolist(), seq_lens.tolist()
    for b in range(query.shape[0]):
        slots = req_to_token[rows[b], :int(lens[b])].to(torch.int64)
        out = _attend(query[b:b + 1], k_cache[slots], v_cache[slots], None, float(sm_scale), float(logit_cap))
        output[b:b + 1] = out.to(output.dtype)


# ----------------------------------------------------------------------------- registration

# name -> (schema without the name, function). The schemas follow 0.5.23's call sites (argument
# order and the outputs each call mutates).
SCHEMAS = {
    "assign_req_to_token_pool_cpu": (
        "(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor out_cache_loc, int pool_len, int? bs_upper=None) -> ()", assign_req_to_token_pool_cpu),
    "assign_extend_cache_locs_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor(a!) out_cache_loc, int pool_len) -> ()", assign_extend_cache_locs_cpu),
    "assign_draft_cache_locs_contiguous_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, Tensor(a!) out_cache_loc, int pool_len, "
        "int topk, int num_steps) -> ()", assign_draft_cache_locs_contiguous_cpu),
    "build_draft_decode_metadata_cpu": (
        "(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, int topk, int num_steps, int pool_len) "
        "-> Tensor", build_draft_decode_metadata_cpu),
    "fill_accept_out_cache_loc_cpu": (
        "(Tensor accept_index, Tensor out_cache_loc, Tensor(a!) accept_out_cache_loc, int? size=None) -> ()",
        fill_accept_out_cache_loc_cpu),
    "fill_bonus_tokens_cpu": (
        "(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, int accept_stride) -> ()",
        fill_bonus_tokens_cpu),
    "copy_all_layer_kv_cache_cpu": (
        "(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()", copy_all_layer_kv_cache_cpu),
    "verify_tree_greedy_cpu": (
        "(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, Tensor candidates, "
        "Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor target_predict) -> ()",
        verify_tree_greedy_cpu),
    "reconstruct_indices_from_tree_mask": (
        "(Tensor tree_mask, Tensor verified_seq_len, Tensor(a!) positions, Tensor(b!) retrive_index, "
        "Tensor(c!) retrive_next_token, Tensor(d!) retrive_next_sibling, int batch_size, int draft_token_num) -> ()",
        reconstruct_indices_from_tree_mask),
    "build_tree_kernel_efficient_cpu": (
        "(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, Tensor(a!) tree_mask, "
        "Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()",
        build_tree_kernel_efficient_cpu),
    "extend_attention_cpu": (
        "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, Tensor k_buffer, "
        "Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, int? max_len_extend, float sm_scale, "
        "float logit_cap, bool is_cross_attn, int sliding_window_size, Tensor? encoder_lens, Tensor? sinks, "
        "Tensor? tree_mask, bool is_causal) -> ()", extend_attention_cpu),
    "decode_attention_cpu": (
        "(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float key_scale, float value_scale, "
        "Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor(d!) attn_logits, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attn, "
        "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()", decode_attention_cpu),
}
# Where SGLang 0.5.23 imports each Python-level function from (the rest it calls via torch.ops).
MODULE_OF = {name: "sgl_kernel" for name in SCHEMAS}
MODULE_OF["reconstruct_indices_from_tree_mask"] = "sgl_kernel.speculative"

_LIB = None


def register() -> list[str]:
    """Define torch.ops.sgl_kernel.<name> for every op above (once per process; an op torch already
    knows is left alone). Returns the names defined now."""
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("sgl_kernel", "FRAGMENT")
    defined = []
    for name, (schema, fn) in SCHEMAS.items():
        if _op_exists(name):
            continue
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        defined.append(name)
    return defined


def _op_exists(name: str) -> bool:
    try:
        return bool(torch._C._jit_get_schemas_for_operator(f"sgl_kernel::{name}"))  # noqa: SLF001
    except RuntimeError:
        return False


def python_function(name: str):
    """The function SGLang gets for `from sgl_kernel[.speculative] import <name>`: calls the
    registered torch op, as the real sgl_kernel's Python wrappers do (keyword names of the call
    sites, e.g. verify_tree_greedy_cpu's retrive_*, are the schema's)."""
    op = getattr(torch.ops.sgl_kernel, name)

    def wrapper(*args, **kwargs):
        return op(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = SCHEMAS[name][1].__doc__
    return wrapper
