"""Engine adapters, chosen by the suite file's `engine` field."""

from __future__ import annotations

from specguard.engines.base import ArgCheck, EffectiveArgs, Engine, ServerBusy, redact
from specguard.engines.emulator import EmulatorEngine
from specguard.engines.sglang import SGLangEngine
from specguard.engines.vllm import VLLMEngine

_ENGINES: dict[str, type[Engine]] = {"sglang": SGLangEngine, "emulator": EmulatorEngine, "vllm": VLLMEngine}


def get_engine(name: str) -> Engine:
    try:
        return _ENGINES[name]()
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(_ENGINES))}") from None


__all__ = ["ArgCheck", "EffectiveArgs", "Engine", "ServerBusy", "get_engine", "redact"]
