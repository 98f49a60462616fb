"""The PyTorch sgl_kernel CPU ops of tools/sgl_kernel_standin/specguard_sgl_cpu_ops.py against
independent references, and the two switches that make SGLang use them (the stand-in's op table
and the platform-override hook).

Needs torch, which the fast-test venv does not have: these tests carry the real_sglang marker (the
fast run deselects them with -m "not real_engine") and .ci/run_real_sglang.sh runs them with the
SGLang venv's python (`--noconftest`, tests/conftest.py imports specguard). There a missing torch
is a FAILURE, not a skip.

Index ops: exact integer equality against references written here a different way (explicit
parent tables and recursive walks instead of link arrays and vectorised reductions) on random
trees and chains. Attention: within float tolerance of torch's scaled_dot_product_attention
(causal, tree masks in both layouts, GQA, a paged cache with shuffled slots)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real_sglang, pytest.mark.real_engine]
STANDIN = Path(__file__).resolve().parents[2] / "tools" / "sgl_kernel_standin"
sys.path.insert(0, str(STANDIN))

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the fast-test venv: every test here is deselected there
    torch = None


@pytest.fixture(autouse=True)
def _needs_torch():
    if torch is None:
        pytest.fail("torch is not importable: run these tests with the SGLang venv's python "
                    "(.ci/run_real_sglang.sh does)")


@pytest.fixture
def ops():
    import specguard_sgl_cpu_ops

    return specguard_sgl_cpu_ops


# ------------------------------------------------------------------------ trees: references

def random_parent_table(rng: random.Random, n: int, chain: bool = False) -> list[int]:
    """parent[0] = -1, parent[i] < i: a random rooted tree in topological order (or a chain)."""
    return [-1] + [(i - 1 if chain else rng.randrange(i)) for i in range(1, n)]


def children_of(parent: list[int]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {i: [] for i in range(len(parent))}
    for i, p in enumerate(parent):
        if p >= 0:
            kids[p].append(i)
    return kids  # ascending by construction


def ancestors(parent: list[int], i: int) -> list[int]:
    out = []
    while parent[i] >= 0:
        i = parent[i]
        out.append(i)
    return out


def ref_links(parent: list[int]) -> tuple[list[int], list[int]]:
    kids = children_of(parent)
    first = [kids[i][0] if kids[i] else -1 for i in range(len(parent))]
    sib = [-1] * len(parent)
    for lst in kids.values():
        for a, b in zip(lst, lst[1:]):
            sib[a] = b
    return first, sib


def ref_greedy_path(parent: list[int], cand: list[int], target_at: list[int], max_len: int) -> list[int]:
    """Recursive descent: at each node take the first child (ascending) whose draft equals the
    target's token at the node; stop at a leaf, a mismatch or max_len nodes."""
    kids = children_of(parent)

    def walk(node: int, path: list[int]) -> list[int]:
        if len(path) == max_len:
            return path
        for c in kids[node]:
            if cand[c] == target_at[node]:
                return walk(c, path + [c])
        return path

    return walk(0, [0])


# ------------------------------------------------------------------------ verify_tree_greedy

@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_verify_tree_greedy_matches_a_recursive_walk_on_random_trees(ops, shape):
    rng = random.Random(7)
    for trial in range(200):
        bs, n = rng.randint(1, 4), rng.randint(2, 12)
        depth = rng.randint(2, n + 1)
        vocab = rng.choice([2, 3, 5])  # small: matches, mismatches and sibling hops all happen
        parents = [random_parent_table(rng, n, chain=(shape == "chain")) for _ in range(bs)]
        cand = torch.tensor([[rng.randrange(vocab) for _ in range(n)] for _ in range(bs)], dtype=torch.int64)
        target = torch.tensor([[rng.randrange(vocab) for _ in range(n)] for _ in range(bs)], dtype=torch.int64)
        links = [ref_links(p) for p in parents]
        ri = torch.arange(bs * n, dtype=torch.int64).view(bs, n)
        nt = torch.tensor([lk[0] for lk in links], dtype=torch.int64)
        ns = torch.tensor([lk[1] for lk in links], dtype=torch.int64)
        predicts = torch.full((bs * n,), -7, dtype=torch.int32)
        accept = torch.full((bs, depth), -1, dtype=torch.int32)
        num = torch.full((bs,), -7, dtype=torch.int32)
        if trial % 2:
            ops.register()  # odd trials go through torch.ops.sgl_kernel, as SGLang's calls do
        fn = ops.python_function("verify_tree_greedy_cpu") if trial % 2 else ops.verify_tree_greedy_cpu
        fn(predicts=predicts, accept_index=accept, accept_token_num=num, candidates=cand, retrive_index=ri,
           retrive_next_token=nt, retrive_next_sibling=ns, target_predict=target)
        exp_pred = [-7] * (bs * n)
        for b in range(bs):
            path = ref_greedy_path(parents[b], cand[b].tolist(), target[b].tolist(), depth)
            assert accept[b].tolist() == [b * n + i for i in path] + [-1] * (depth - len(path)), (trial, b)
            assert int(num[b]) == len(path) - 1
            for node in path:
                exp_pred[b * n + node] = int(target[b, node])
        assert predicts.tolist() == exp_pred, trial


def test_verify_tree_greedy_chain_accepts_exactly_the_matching_prefix(ops):
    """A chain of 4 (MTP/STANDALONE topk=1 shape): force m leading matches for m = 0..3."""
    n = 4
    for m in range(n):
        target = torch.tensor([[11, 12, 13, 14]])
        cand = torch.tensor([[0] + [11, 12, 13][:m] + [99] * (n - 1 - m)])
        predicts = torch.zeros(n, dtype=torch.int32)
        accept = torch.full((1, n), -1, dtype=torch.int32)
        num = torch.empty(1, dtype=torch.int32)
        ops.verify_tree_greedy_cpu(predicts, accept, num, cand, torch.arange(n).view(1, n),
                                   torch.tensor([[1, 2, 3, -1]]), torch.full((1, n), -1), target)
        assert int(num[0]) == m and accept[0].tolist() == list(range(m + 1)) + [-1] * (n - 1 - m)
        assert predicts.tolist()[:m + 1] == [11, 12, 13, 14][:m + 1]  # the last one is the bonus token


def test_the_slower_build_switch_sleeps_before_each_verify_and_changes_nothing_else(ops, monkeypatch):
    """SPECGUARD_SGL_VERIFY_DELAY_MS (the real-SGLang A/B's build B): each verify call sleeps that
    long first (recorded, not timed) and verifies as before; unset, it never sleeps."""
    slept: list[float] = []
    monkeypatch.setattr(ops.time, "sleep", slept.append)

    def verify() -> list[int]:
        predicts, accept, num = torch.zeros(4, dtype=torch.int32), torch.full((1, 4), -1, dtype=torch.int32), \
            torch.empty(1, dtype=torch.int32)
        ops.verify_tree_greedy_cpu(predicts, accept, num, torch.tensor([[0, 11, 12, 99]]), torch.arange(4).view(1, 4),
                                   torch.tensor([[1, 2, 3, -1]]), torch.full((1, 4), -1), torch.tensor([[11, 12, 13, 14]]))
        return [int(num[0]), *accept[0].tolist()]

    monkeypatch.delenv(ops.VERIFY_DELAY_ENV, raising=False)
    plain = verify()
    assert slept == [] and plain == [2, 0, 1, 2, -1]
    monkeypatch.setenv(ops.VERIFY_DELAY_ENV, "25")
    assert verify() == plain and slept == [0.025]


# ------------------------------------------------------------------------ reconstruct (NGRAM)

def test_reconstruct_indices_from_tree_mask_on_random_trees(ops):
    rng = random.Random(11)
    sglang_links = None
    try:  # SGLang's own host-side implementation, a second reference where SGLang is installed
        from sglang.srt.speculative.ngram_worker import _derive_tree_links as sglang_links
    except Exception:  # noqa: BLE001 - only the SGLang venv has it
        pass
    for trial in range(150):
        bs, n = rng.randint(1, 4), rng.randint(1, 12)
        parents = [random_parent_table(rng, n, chain=(trial % 5 == 0)) for _ in range(bs)]
        if trial % 3 == 1:  # a forest: more roots than node 0 (the contract: a root has no next sibling)
            parents = [[-1 if i and rng.random() < 0.3 else p for i, p in enumerate(ps)] for ps in parents]
        mask = torch.zeros((bs, n, n), dtype=torch.bool)
        for b in range(bs):
            for i in range(n):
                mask[b, i, i] = True  # NGRAM's masks include self; the op must ignore it
                for a in ancestors(parents[b], i):
                    mask[b, i, a] = True
        seq = torch.tensor([rng.randint(1, 50) for _ in range(bs)], dtype=torch.int64)
        pos = torch.full((bs * n,), -5, dtype=torch.int64)
        ri, nt, ns = (torch.full((bs, n), -5, dtype=torch.int64) for _ in range(3))
        ops.reconstruct_indices_from_tree_mask(mask.reshape(-1), seq, pos, ri, nt, ns, bs, n)
        for b in range(bs):
            first, sib = ref_links(parents[b])
            assert nt[b].tolist() == first and ns[b].tolist() == sib, (trial, b, parents[b])
            assert ri[b].tolist() == list(range(b * n, (b + 1) * n))
            assert pos[b * n:(b + 1) * n].tolist() == [int(seq[b]) + len(ancestors(parents[b], i)) for i in range(n)]
        if sglang_links is not None:
            s_nt, s_ns = sglang_links(mask.numpy(), bs, n)
            assert torch.equal(s_nt, nt) and torch.equal(s_ns, ns)


# ------------------------------------------------------------------------ build_tree (EAGLE)

def eagle_draft_tree(rng: random.Random, bs: int, topk: int, steps: int, n: int):
    """The EAGLE draft loop's bookkeeping, simulated with random probabilities (each child's
    cumulative score is below its parent's, so a global top-(n-1) keeps whole ancestor chains).
    Returns parent_list, selected_index as SGLang builds them (eagle_utils.organize_draft_results)
    and, independently, the parent's flat index of every flat index."""
    parent_lists, selected, parent_flat = [], [], []
    for _ in range(bs):
        scores = [rng.random() for _ in range(topk)]
        flat_scores = list(scores)
        parent_of = {i: -1 for i in range(topk)}
        plist = [-1] + list(range(topk))
        frontier = list(range(topk))  # flat indices of the current step's kept tokens
        cum = {i: scores[i] for i in range(topk)}
        for step in range(1, steps):
            base = len(flat_scores)
            expand = []
            for a, f in enumerate(frontier):
                for c in range(topk):
                    idx = base + a * topk + c
                    cum[idx] = cum[f] * rng.uniform(0.01, 0.99)
                    parent_of[idx] = f
                    expand.append(idx)
            flat_scores += [cum[i] for i in expand]
            frontier = sorted(expand, key=lambda i: -cum[i])[:topk]
            if step < steps - 1:
                plist += frontier
        sel = sorted(sorted(range(len(flat_scores)), key=lambda i: -flat_scores[i])[:n - 1])
        parent_lists.append(plist)
        selected.append(sel)
        parent_flat.append(parent_of)
    return torch.tensor(parent_lists, dtype=torch.int64), torch.tensor(selected, dtype=torch.int64), parent_flat


@pytest.mark.parametrize("topk,steps,n", [(1, 3, 4), (1, 5, 6), (2, 2, 4), (4, 3, 8), (4, 3, 16), (3, 4, 10)])
def test_build_tree_kernel_efficient_on_random_draft_trees(ops, topk, steps, n):
    rng = random.Random(topk * 100 + steps * 10 + n)
    for trial in range(20):
        bs = rng.randint(1, 3)
        plist, sel, parent_flat = eagle_draft_tree(rng, bs, topk, steps, n)
        seq = torch.tensor([rng.randint(1, 30) for _ in range(bs)], dtype=torch.int64)
        for mode in (ops.QLEN_ONLY, ops.FULL_MASK):
            size = bs * n * n if mode == ops.QLEN_ONLY else int(seq.sum()) * n + bs * n * n
            mask = torch.full((size,), True) if mode == ops.QLEN_ONLY else torch.zeros(size, dtype=torch.bool)
            pos = torch.empty(bs * n, dtype=torch.int64)
            ri, nt, ns = torch.full((3, bs, n), -1, dtype=torch.int64)
            ops.build_tree_kernel_efficient_cpu(plist, sel, seq.to(torch.int32), mask, pos, ri, nt, ns, topk, steps, n,
                                                mode)
            off = 0
            for b in range(bs):
                node_of = {f: i + 1 for i, f in enumerate(sel[b].tolist())}
                parent = [-1] + [node_of.get(parent_flat[b][f], 0) if parent_flat[b][f] >= 0 else 0
                                 for f in sel[b].tolist()]
                first, sib = ref_links(parent)
                assert nt[b].tolist() == first and ns[b].tolist() == sib, (trial, mode, parent)
                assert ri[b].tolist() == list(range(b * n, (b + 1) * n))
                depth = [len(ancestors(parent, i)) for i in range(n)]
                assert pos[b * n:(b + 1) * n].tolist() == [int(seq[b]) + d for d in depth]
                anc = [[j == i or j in ancestors(parent, i) for j in range(n)] for i in range(n)]
                if mode == ops.QLEN_ONLY:
                    assert mask[b * n * n:(b + 1) * n * n].view(n, n).tolist() == anc
                else:
                    s = int(seq[b])
                    block = mask[off:off + n * (s + n)].view(n, s + n)
                    assert block[:, :s].all() and block[:, s:].tolist() == anc
                    off += n * (s + n)
            if topk == 1:  # a chain: causal mask, consecutive positions
                assert nt.tolist() == [[*range(1, n), -1]] * bs


# ------------------------------------------------------------------------ index ops

def test_cache_location_ops_against_loops(ops):
    rng = random.Random(3)
    for _ in range(50):
        reqs, pool_len, bs = 6, 64, rng.randint(1, 5)
        rpi = torch.tensor(rng.sample(range(reqs), bs), dtype=torch.int64)
        table = torch.randint(0, 100000, (reqs, pool_len), dtype=torch.int32)
        start = torch.tensor([rng.randint(0, 20) for _ in range(bs)], dtype=torch.int64)
        end = start + torch.tensor([rng.randint(0, 12) for _ in range(bs)], dtype=torch.int64)
        total = int((end - start).sum())

        out = torch.full((total,), -1, dtype=torch.int64)
        ops.assign_extend_cache_locs_cpu(rpi, table, start, end, out, pool_len)
        exp = [int(table[int(r), j]) for r, s, e in zip(rpi, start, end) for j in range(int(s), int(e))]
        assert out.tolist() == exp

        locs = torch.randperm(100000)[:total].to(torch.int64)
        t2 = table.clone()
        ops.assign_req_to_token_pool_cpu(rpi.to(torch.int32), t2, start.to(torch.int32), end.to(torch.int32), locs,
                                         pool_len)
        exp_t = table.clone()
        k = 0
        for r, s, e in zip(rpi.tolist(), start.tolist(), end.tolist()):
            for j in range(s, e):
                exp_t[r, j] = int(locs[k])
                k += 1
        assert torch.equal(t2, exp_t)

        topk, steps = rng.randint(1, 3), rng.randint(1, 4)
        seq = torch.tensor([rng.randint(0, 30) for _ in range(bs)], dtype=torch.int64)
        out = torch.empty(bs * topk * steps, dtype=torch.int64)
        ops.assign_draft_cache_locs_contiguous_cpu(rpi, table, seq, out, pool_len, topk, steps)
        w = topk * steps
        assert out.tolist() == [int(table[int(r), int(s) + j]) for r, s in zip(rpi, seq) for j in range(w)]

        draft = ops.build_draft_decode_metadata_cpu(table, rpi, seq, topk, steps, pool_len)
        assert draft.shape == (bs * topk, pool_len) and draft.dtype == torch.int32
        for b, (r, s) in enumerate(zip(rpi.tolist(), seq.tolist())):
            for k in range(topk):
                row = draft[b * topk + k, :s + steps].tolist()
                assert row == table[r, :s].tolist() + [int(table[r, s + k * steps + j]) for j in range(steps)]


def test_assign_draft_cache_locs_refuses_a_wrong_output_size(ops):
    with pytest.raises(RuntimeError, match="expected bs \\* topk \\* num_steps = 6"):
        ops.assign_draft_cache_locs_contiguous_cpu(torch.tensor([0]), torch.zeros((1, 16), dtype=torch.int32),
                                                   torch.tensor([2]), torch.empty(5, dtype=torch.int64), 16, 2, 3)


def test_fill_ops_against_loops(ops):
    rng = random.Random(5)
    for _ in range(50):
        bs, width, n = rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 8)
        accept = torch.full((bs, width), -1, dtype=torch.int32)
        for b in range(bs):
            m = rng.randint(1, width)
            accept[b, :m] = torch.tensor(sorted(rng.sample(range(b * n, (b + 1) * n), min(m, n))) + [-1] * (m - min(m, n)))
        out_cache = torch.randperm(5000)[:bs * n].to(torch.int64)
        packed = torch.full((bs * width,), -3, dtype=torch.int64)
        ops.fill_accept_out_cache_loc_cpu(accept, out_cache, packed)
        valid = [int(out_cache[i]) for i in accept.reshape(-1).tolist() if i >= 0]
        assert packed.tolist() == valid + [-3] * (bs * width - len(valid))

        tokens = torch.randint(0, 1000, (bs, width), dtype=torch.int32)
        lens = torch.tensor([rng.randint(1, width) for _ in range(bs)], dtype=torch.int32)
        bonus = torch.empty(bs, dtype=torch.int32)
        ops.fill_bonus_tokens_cpu(tokens, lens, bonus, width)
        assert bonus.tolist() == [int(tokens[b, int(lens[b]) - 1]) for b in range(bs)]


def test_copy_all_layer_kv_cache_moves_rows_of_every_buffer_by_address(ops):
    gen = torch.Generator().manual_seed(0)
    bufs = [torch.randn((40, 2, 8), generator=gen), torch.randn((40, 4, 4), generator=gen).to(torch.bfloat16),
            torch.randn((40, 3), generator=gen)]
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs])
    before = [b.clone() for b in bufs]
    src = torch.tensor([3, 4, 5, 6, 20], dtype=torch.int64)
    tgt = torch.tensor([4, 5, 6, 7, 0], dtype=torch.int64)  # overlapping: a shift by one
    ops.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
    for b, old in zip(bufs, before):
        exp = old.clone()
        exp[tgt] = old[src]
        assert torch.equal(b, exp)
    # the start-up warm-up: row 0 onto itself, nothing changes
    after = [b.clone() for b in bufs]
    ops.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
    assert all(torch.equal(a, b) for a, b in zip(after, bufs))


# ------------------------------------------------------------------------ attention vs SDPA

def paged_cache(gen, total_slots: int, hkv: int, d: int, dtype):
    k = torch.randn((total_slots, hkv, d), generator=gen).to(dtype)
    v = torch.randn((total_slots, hkv, d), generator=gen).to(dtype)
    return k, v


def sdpa(q, k, v, visible, scale):
    """q [Lq, Hq, D], k/v [Lk, Hkv, D], visible [Lq, Lk] bool -> [Lq, Hq, D] float32."""
    out = F.scaled_dot_product_attention(q.float().movedim(0, 1).unsqueeze(0), k.float().movedim(0, 1).unsqueeze(0),
                                         v.float().movedim(0, 1).unsqueeze(0), attn_mask=visible, scale=scale,
                                         enable_gqa=True)
    return out.squeeze(0).movedim(0, 1)


@pytest.mark.parametrize("mode", ["causal", "qlen-tree", "full-tree", "no-k-extend", "bidirectional"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_extend_attention_matches_sdpa(ops, mode, dtype):
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1)
    rng = random.Random(2)
    hq, hkv, d, bs = 4, 2, 16, 3
    prefix = [rng.randint(0, 20) for _ in range(bs)]
    ext = [8] * bs if "tree" in mode else [rng.randint(1, 9) for _ in range(bs)]
    seq = [p + e for p, e in zip(prefix, ext)]
    slots = torch.randperm(200, generator=gen)  # shuffled: the cache is paged, not contiguous
    table = torch.zeros((bs + 2, 64), dtype=torch.int32)
    rows = [bs + 1, 0, 2][:bs]
    k_buf, v_buf = paged_cache(gen, 200, hkv, d, dt)
    used = 0
    for b in range(bs):
        table[rows[b], :seq[b]] = slots[used:used + seq[b]].to(torch.int32)
        used += seq[b]
    q = torch.randn((sum(ext), hq, d), generator=gen).to(dt)
    starts = [sum(ext[:b]) for b in range(bs)]
    k_ext = torch.cat([k_buf[table[rows[b], prefix[b]:seq[b]].long()] for b in range(bs)])
    v_ext = torch.cat([v_buf[table[rows[b], prefix[b]:seq[b]].long()] for b in range(bs)])
    trees = [random_parent_table(rng, ext[b]) for b in range(bs)]
    tree_vis = [torch.tensor([[j == i or j in ancestors(t, i) for j in range(len(t))] for i in range(len(t))])
                for t in trees]
    tree_mask = None
    if mode == "qlen-tree":
        tree_mask = torch.cat([m.reshape(-1) for m in tree_vis])
    elif mode == "full-tree":
        tree_mask = torch.cat([torch.cat([torch.ones((ext[b], prefix[b]), dtype=torch.bool), tree_vis[b]], 1).reshape(-1)
                               for b in range(bs)])
    o = torch.full_like(q, float("nan"))
    scale = d ** -0.5
    ops.register()
    torch.ops.sgl_kernel.extend_attention_cpu(
        q, None if mode == "no-k-extend" else k_ext, None if mode == "no-k-extend" else v_ext, o, k_buf, v_buf, 1.0, 1.0,
        table, torch.tensor(rows, dtype=torch.int64), torch.tensor(seq, dtype=torch.int64),
        torch.tensor(ext, dtype=torch.int32), torch.tensor(starts, dtype=torch.int32), max(ext), scale, 0.0, False, 0,
        None, None, tree_mask, mode != "bidirectional")
    tol = 1e-5 if dt == torch.float32 else 2e-2
    for b in range(bs):
        kv = table[rows[b], :seq[b]].long()
        vis = torch.ones((ext[b], seq[b]), dtype=torch.bool)
        if "tree" in mode:
            vis[:, prefix[b]:] = tree_vis[b]
        elif mode != "bidirectional":
            vis[:, prefix[b]:] = torch.ones((ext[b], ext[b]), dtype=torch.bool).tril()
        ref = sdpa(q[starts[b]:starts[b] + ext[b]], k_buf[kv], v_buf[kv], vis, scale)
        torch.testing.assert_close(o[starts[b]:starts[b] + ext[b]].float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_attention_writes_the_new_kv_and_matches_sdpa(ops, dtype):
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(4)
    hq, hkv, d, bs = 8, 2, 16, 4
    k_buf, v_buf = paged_cache(gen, 300, hkv, d, dt)
    lens = [5, 1, 17, 30]
    table = torch.zeros((bs, 64), dtype=torch.int32)
    slots = torch.randperm(300, generator=gen)
    used = 0
    for b in range(bs):
        table[b, :lens[b]] = slots[used:used + lens[b]].to(torch.int32)
        used += lens[b]
    loc = torch.tensor([int(table[b, lens[b] - 1]) for b in range(bs)], dtype=torch.int64)  # the new token's slot
    q = torch.randn((bs, hq, d), generator=gen).to(dt)
    key = torch.randn((bs, hkv, d), generator=gen).to(dt)
    value = torch.randn((bs, hkv, d), generator=gen).to(dt)
    o = torch.full_like(q, float("nan"))
    logits = torch.empty((bs, hq, 8, d + 1))
    scale = d ** -0.5
    ops.register()
    torch.ops.sgl_kernel.decode_attention_cpu(q, k_buf, v_buf, 1.0, 1.0, o, key, value, loc, logits, table,
                                              torch.arange(bs), torch.tensor(lens), scale, 0.0, False, 0, None, None)
    assert torch.equal(k_buf[loc], key) and torch.equal(v_buf[loc], value)
    tol = 1e-5 if dt == torch.float32 else 2e-2
    for b in range(bs):
        kv = table[b, :lens[b]].long()
        ref = sdpa(q[b:b + 1], k_buf[kv], v_buf[kv], None, scale)
        torch.testing.assert_close(o[b:b + 1].float(), ref, atol=tol, rtol=tol)


def test_logit_cap_and_unsupported_features(ops):
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn((1, 2, 8), generator=gen) * 4 for _ in range(3))
    capped = ops._attend(q, k, v, None, 1.0, 2.0)
    raw = torch.einsum("qhd,khd->hqk", q, k)
    ref = torch.einsum("hqk,khd->qhd", torch.softmax(2.0 * torch.tanh(raw / 2.0), -1), v)
    torch.testing.assert_close(capped, ref)
    table = torch.zeros((1, 4), dtype=torch.int32)
    args = dict(key_scale=1.0, value_scale=1.0, is_cross_attn=False, sliding_window_size=0, sinks=None)
    for change, what in ((dict(sliding_window_size=5), "sliding-window"), (dict(is_cross_attn=True), "cross attention"),
                         (dict(key_scale=0.5), "scaled"), (dict(sinks=torch.zeros(2)), "sinks")):
        with pytest.raises(ops.Unsupported, match=what):
            ops.decode_attention_cpu(q, k, v, args["key_scale"] if "key_scale" not in change else change["key_scale"],
                                     1.0, q.clone(), None, None, torch.tensor([0]), None, table, torch.tensor([0]),
                                     torch.tensor([1]), 1.0, 0.0, change.get("is_cross_attn", False),
                                     change.get("sliding_window_size", 0), None, change.get("sinks"))


# ------------------------------------------------------------------------ the switches

def _run(code: str, tmp_path, spec: bool) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    log = tmp_path / f"log-{spec}.txt"
    env = {**os.environ, "SPECGUARD_SGL_KERNEL_LOG": str(log), "PYTHONPATH": str(STANDIN)}
    env.pop("SPECGUARD_SGL_CPU_SPEC", None)
    if spec:
        env["SPECGUARD_SGL_CPU_SPEC"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    events = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


def test_standin_hands_out_the_torch_ops_only_when_cpu_speculation_is_on(tmp_path):
    code = """
import torch, sgl_kernel
from sgl_kernel import verify_tree_greedy_cpu, fill_bonus_tokens_cpu
from sgl_kernel.speculative import reconstruct_indices_from_tree_mask
b = torch.empty(2, dtype=torch.int32)
fill_bonus_tokens_cpu(torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32), b, 2)
assert b.tolist() == [2, 3], b
assert hasattr(torch.ops.sgl_kernel, "decode_attention_cpu") and hasattr(torch.ops.sgl_kernel, "extend_attention_cpu")
try:
    sgl_kernel.rmsnorm_cpu(1)
except sgl_kernel.StandInCalled:
    print("placeholder raised")
"""
    proc, events = _run(code, tmp_path, spec=True)
    assert proc.returncode == 0 and "placeholder raised" in proc.stdout, proc.stderr[-2000:]
    assert ["PROVIDE", "sgl_kernel.speculative.reconstruct_indices_from_tree_mask"] in [e[:2] for e in events]
    assert ["OP", "sgl_kernel.fill_bonus_tokens_cpu"] in [e[:2] for e in events]
    assert ["CALL", "sgl_kernel.rmsnorm_cpu"] in [e[:2] for e in events]  # the placeholder's call is logged
    off = "import sgl_kernel\ntry:\n    sgl_kernel.fill_bonus_tokens_cpu(1)\nexcept sgl_kernel.StandInCalled:\n    print('raised')\n"
    proc, events = _run(off, tmp_path, spec=False)
    assert proc.returncode == 0 and "raised" in proc.stdout, proc.stderr[-2000:]
    assert not [e for e in events if e[0] in ("PROVIDE", "OP")]


def test_platform_hook_overrides_has_amx_only_when_asked(tmp_path):
    """Without the hook SGLang's own probe says no AMX here (utils/common.py cpu_has_amx_support:
    the CPU's AMX tile flag AND torch.ops.sgl_kernel.convert_weight_packed, which no sgl_kernel CPU
    build provides on these machines, Intel with AMX tiles or AMD without), so
    arg_groups/overrides.py _attention_backend_platform_fallbacks would rewrite intel_amx to
    torch_native; with SPECGUARD_SGL_CPU_SPEC=1 the override says yes, once per process."""
    try:
        import sglang  # noqa: F401
    except ImportError:
        pytest.fail("sglang is not importable: run with the SGLang venv's python")
    code = ("import specguard_sgl_cpu_spec as h; h.install()\n"
            "from sglang.srt.runtime_context import get_platform\n"
            "from sglang.srt.utils.common import cpu_has_amx_support\n"
            "print('has_amx', get_platform().has_amx, 'probe', cpu_has_amx_support())\n")
    proc, events = _run(code, tmp_path, spec=True)
    assert proc.returncode == 0 and "has_amx True probe False" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert [e[0] for e in events if e[0] == "PLATFORM"] == ["PLATFORM"]
    proc, events = _run(code, tmp_path, spec=False)
    assert proc.returncode == 0 and "has_amx False probe False" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert not [e for e in events if e[0] == "PLATFORM"]
