"""Let torchvision's Python side import next to the CPU build of torch (SGLang venv only).

Why: SGLang 0.5.23 imports `torchvision.transforms` at module load, whatever the model
(sglang/srt/configs/__init__.py -> nano_nemotron_vl.py -> sglang/srt/multimodal/internvl_utils.py).
PyPI's torchvision wheels are CUDA builds: their C extension (`torchvision/_C.so`) links
libtorch_cuda.so and does not load beside torch 2.13.0+cpu. torchvision tolerates that
(`torchvision.extension._has_ops()` is then False) except for two unconditional
`torch.library.register_fake("torchvision::nms" / "::qnms")` calls in
torchvision/_meta_registrations.py, which need the operators' schemas to exist, and
`import torchvision` fails with "operator torchvision::nms does not exist".

What this does: the first time `torchvision` is imported, and only if torch does not already know
`torchvision::nms`, it declares the two schemas (exactly as torchvision's C++ declares them) and
nothing else. No kernel is registered: calling torchvision.ops.nms raises torch's "no kernel"
error; nothing is computed here. Plain text decoding never calls it. Each declaration is logged
(`SCHEMA` lines) to SPECGUARD_SGL_KERNEL_LOG like the sgl_kernel stand-in's events.

Installed by .ci/setup_sglang.sh as a module plus a one-line .pth file in the SGLang venv's
site-packages; importing this module is cheap (torch is imported only when torchvision is).
"""

from __future__ import annotations

import glob
import importlib.abc
import importlib.machinery
import os
import sys

SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBS: list = []  # keep the Library objects alive (dropping one removes its definitions)


def _log(event: str, name: str) -> None:
    path = os.environ.get("SPECGUARD_SGL_KERNEL_LOG")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{event}\t{name}\tpid={os.getpid()}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def declare_schemas(extension_path: str | None = None) -> list[str]:
    """Declare the torchvision operator schemas torch does not know; returns the ones declared.

    torchvision's own C extension is tried first (from `extension_path`): where it loads, it
    declares the operators itself and nothing is done here."""
    import torch

    if extension_path:
        try:
            torch.ops.load_library(extension_path)
        except (ImportError, OSError):
            pass
    missing = [name for name in SCHEMAS if not _op_exists(torch, name)]
    declared = []
    if missing:
        lib = torch.library.Library("torchvision", "FRAGMENT")
        for name in missing:
            lib.define(SCHEMAS[name])
            declared.append(f"torchvision::{name}")
            _log("SCHEMA", f"torchvision::{name}")
        _LIBS.append(lib)
    return declared


def _op_exists(torch, name: str) -> bool:
    try:
        return bool(torch._C._jit_get_schemas_for_operator(f"torchvision::{name}"))  # noqa: SLF001
    except RuntimeError:
        return False


class _Hook(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" and not _Hook.done:
            _Hook.done = True
            spec = importlib.machinery.PathFinder.find_spec("torchvision")
            if spec is not None and spec.submodule_search_locations:
                ext = next(iter(glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "_C.*so"))), None)
                declare_schemas(ext)
        return None  # the ordinary finders import torchvision itself


def install() -> None:
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
