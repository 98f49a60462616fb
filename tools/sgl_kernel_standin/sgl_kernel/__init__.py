"""A stand-in for SGLang's CUDA-only `sgl_kernel` package, for plain decoding on a CPU.

Why it exists: the `sglang-kernel` wheel that pip installs with SGLang is the CUDA build, and
importing it fails on a machine without libcuda ("Could not load any common_ops library"). SGLang
imports `sgl_kernel` at module load in many places (mostly speculative-decoding and quantization
helpers), so the server cannot even start without *something* under that name. Plain decoding of a
dense Llama with `--device cpu --attention-backend torch_native` (and `SGLANG_USE_CPU_ENGINE=1`)
never calls any of it: RMSNorm, SiluAndMul, RoPE and the KV-cache store take their
`forward_native` paths on a CPU without AMX.

What it does, and nothing more:
- every attribute of `sgl_kernel` (and of any `sgl_kernel.<sub>` module) resolves to a
  placeholder; attributes of a placeholder resolve to placeholders too;
- every placeholder RAISES `StandInCalled` when called: this package never computes anything,
  so a result of the real job can never come from here;
- every resolved symbol and every call is appended, one line each, to the file named by the
  environment variable SPECGUARD_SGL_KERNEL_LOG (if set), so that a test can prove from the log
  that no stand-in symbol was called during the job (tests/real/test_real_sglang.py does);
- `sgl_kernel.scalar_type` is NOT provided (unless the real pure-Python file is placed next to
  this one): SGLang's own fallback then applies (sglang/srt/layers/quantization/utils.py,
  get_scalar_types(), catches the ImportError and uses mock scalar types).

CPU speculation (only with SPECGUARD_SGL_CPU_SPEC=1 in the environment, set for the speculative
servers of perf_tests/suites/sglang-cpu-spec.toml): the twelve ops SGLang 0.5.23's CPU speculation
path calls (specguard_sgl_cpu_ops.py beside this package: PyTorch implementations written from
SGLang's call sites and tests) are registered as torch.ops.sgl_kernel.<op> and handed out for
`from sgl_kernel import <op>` / `from sgl_kernel.speculative import reconstruct_indices_from_tree_mask`
instead of placeholders. Every other symbol is still a placeholder that raises when called.

Log lines: `<EVENT>\t<qualified name>\tpid=<pid>` with EVENT one of IMPORT (a submodule was
synthesised), RESOLVE (an attribute was handed out), CALL (a placeholder was called; it raised),
PROVIDE (a torch op of specguard_sgl_cpu_ops was handed out); the ops themselves add OP lines.
Installed by .ci/setup_sglang.sh into the SGLang venv's site-packages (never into specguard's).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

LOG_ENV = "SPECGUARD_SGL_KERNEL_LOG"
STANDIN = True  # lets a check tell this package from the real one: `sgl_kernel.STANDIN`
__version__ = "0.0.0+specguard-standin"
__all__: list[str] = []  # `from sgl_kernel import *` imports nothing


class StandInCalled(NotImplementedError):
    """A stand-in sgl_kernel symbol was called: the code path needs the real (CUDA) kernel."""


def _log(event: str, name: str) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = f"{event}\t{name}\tpid={os.getpid()}\n".encode()
    try:
        # O_APPEND: one short write per line, so lines from several processes do not interleave.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _Placeholder:
    """Stands for one symbol. Calling it logs CALL and raises; it computes nothing."""

    __slots__ = ("_qualname", "_children")

    def __init__(self, qualname: str) -> None:
        object.__setattr__(self, "_qualname", qualname)
        object.__setattr__(self, "_children", {})

    def __call__(self, *args, **kwargs):
        _log("CALL", self._qualname)
        raise StandInCalled(
            f"sgl_kernel stand-in: {self._qualname} was called. The stand-in never computes; "
            f"this code path needs the real CUDA sgl_kernel (not available on this CPU machine)."
        )

    def __getattr__(self, attr: str):
        if _is_dunder(attr) or attr in ("_qualname", "_children"):
            raise AttributeError(attr)
        child = self._children.get(attr)
        if child is None:
            child = _Placeholder(f"{self._qualname}.{attr}")
            self._children[attr] = child
            _log("RESOLVE", child._qualname)
        return child

    def __repr__(self) -> str:
        return f"<sgl_kernel stand-in {self._qualname}>"

    def __bool__(self) -> bool:  # truthy like a real function object
        return True


CPU_SPEC_ENV = "SPECGUARD_SGL_CPU_SPEC"
_CPU_OPS = None  # the specguard_sgl_cpu_ops module when CPU speculation is on


def _cpu_spec_ops():
    """specguard_sgl_cpu_ops, registered as torch.ops.sgl_kernel.*, if SPECGUARD_SGL_CPU_SPEC=1."""
    global _CPU_OPS
    if _CPU_OPS is None and os.environ.get(CPU_SPEC_ENV) == "1":
        import specguard_sgl_cpu_ops  # beside this package in site-packages (.ci/setup_sglang.sh)

        specguard_sgl_cpu_ops.register()
        _CPU_OPS = specguard_sgl_cpu_ops
    return _CPU_OPS


def _module_getattr(module_name: str, cache: dict):
    def __getattr__(name: str):
        if _is_dunder(name):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        ph = cache.get(name)
        ops = _cpu_spec_ops() if ph is None else None
        if ops is not None and ops.MODULE_OF.get(name) == module_name:
            ph = cache[name] = ops.python_function(name)
            _log("PROVIDE", f"{module_name}.{name}")
            return ph
        if ph is None:
            ph = _Placeholder(f"{module_name}.{name}")
            cache[name] = ph
            _log("RESOLVE", ph._qualname)
        return ph

    return __getattr__


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # default module creation

    def exec_module(self, module: types.ModuleType) -> None:
        module.__getattr__ = _module_getattr(module.__name__, {})
        module.__all__ = []
        module.STANDIN = True
        _log("IMPORT", module.__name__)


class _StandInFinder(importlib.abc.MetaPathFinder):
    """Synthesises any `sgl_kernel.<sub>` module that has no real file in this package.

    `sgl_kernel.scalar_type` is the exception: without its real file it is reported missing, so
    SGLang's own ImportError fallback (mock scalar types) applies instead of placeholders."""

    NOT_PROVIDED = {"sgl_kernel.scalar_type"}

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("sgl_kernel."):
            return None
        # A real file shipped next to this one (e.g. a copied scalar_type.py) wins.
        if importlib.machinery.PathFinder.find_spec(fullname, path) is not None:
            return None
        if fullname in self.NOT_PROVIDED:
            _log("MISSING", fullname)
            return None
        return importlib.machinery.ModuleSpec(fullname, _StandInLoader(), is_package=True)


if not any(isinstance(f, _StandInFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _StandInFinder())

__getattr__ = _module_getattr(__name__, {})
_log("IMPORT", __name__)
_cpu_spec_ops()  # torch.ops.sgl_kernel.* exist from `import sgl_kernel` on (intel_amx_backend.py)
