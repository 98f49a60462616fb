"""SGLang 0.5.23's version-specific rules, in one place: how it resolves speculative arguments at
launch (``speculative``), its adaptive-speculation config with the start-up checks and the batch
routing (``adaptive``), the one builder of such a config (``adaptive_table``), and the decode
CUDA-graph batch sizes it captures (``cuda_graph``).

Paths cited are relative to python/sglang/ of the 0.5.23 wheel (docs/research/sglang-0.5.23-facts.md has
the detail); the code is written from those functions' behaviour, not copied. This package
imports nothing else of specguard (an import-linter contract), so that the engine adapters,
report/, `specguard tune` and the emulator all read the same rules; a new SGLang version changes
them here.
"""

SGLANG_VERSION = "0.5.23"  # the version these rules were read from
