"""SGLang's `intel_amx` attention backend on a CPU without AMX, through SGLang's own platform override.

Why: SGLang 0.5.23's CPU speculation runs on the `intel_amx` attention backend
(layers/attention/intel_amx_backend.py: IntelAMXAttnBackend verifies with the tree mask,
IntelAMXMultiStepDraftBackend runs the draft steps). On a CPU without AMX,
arg_groups/overrides.py `_attention_backend_platform_fallbacks` rewrites `intel_amx` to
`torch_native` because `get_platform().has_amx` is false, and `torch_native` cannot verify
(speculative/draft_utils.py DraftBackendFactory has no entry for it). `get_platform().has_amx` is
read only by that fallback (and the gpt_oss overrides); model layers ask `cpu_has_amx_support()`
directly and keep their non-AMX paths.

What this does, only when SPECGUARD_SGL_CPU_SPEC=1 is in the environment: the first time
`sglang.srt.runtime_context` is imported in a process (the launcher and every process it spawns,
which inherit the environment), right after SGLang's module has run, it calls SGLang's own
`runtime_context.override_platform(has_amx=True).install()`, and logs a `PLATFORM` line to
$SPECGUARD_SGL_KERNEL_LOG. No SGLang file is changed; the command line stays
`python -m sglang.launch_server ...`. What the intel_amx backend then calls in sgl_kernel is
computed by specguard_sgl_cpu_ops.py (PyTorch), handed out by the sgl_kernel stand-in.

Installed by .ci/setup_sglang.sh as this module plus a one-line .pth file in the SGLang venv.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

ENV = "SPECGUARD_SGL_CPU_SPEC"
TARGET = "sglang.srt.runtime_context"


def _log(event: str, what: str) -> None:
    path = os.environ.get("SPECGUARD_SGL_KERNEL_LOG")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{event}\t{what}\tpid={os.getpid()}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


class _Loader(importlib.abc.Loader):
    def __init__(self, inner) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        module.override_platform(has_amx=True).install()
        _log("PLATFORM", "sglang.srt.runtime_context.override_platform(has_amx=True)")


class _Finder(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET or _Finder.done:
            return None
        _Finder.done = True
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    if os.environ.get(ENV) == "1" and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
