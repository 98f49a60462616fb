"""The decode CUDA-graph batch sizes SGLang 0.5.23 captures (srt/arg_groups/cuda_graph_hook.py
``generate_decode_cuda_graph_batch_sizes``): a decode batch runs padded to the smallest of them
at or above its size, which is where an adaptive config's keys take effect (adaptive.slot_key)."""

from __future__ import annotations


def decode_graph_batch_sizes(max_bs: int, *, speculative: bool, padding: bool = True) -> list[int]:
    """The sizes up to ``max_bs`` (``--cuda-graph-max-bs-decode``; a real server derives it from GPU
    memory): every size without padding (``--disable-cuda-graph-padding``), a finer list under
    speculation than without, and ``max_bs`` itself always."""
    if not padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    sizes = [b for b in sizes if b <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes
