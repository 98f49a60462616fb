"""The embedded emulator: SGLang's adapter, launching the drop-in module instead."""

from __future__ import annotations

from specguard.engines.sglang import SGLangEngine


class EmulatorEngine(SGLangEngine):
    name = "emulator"
    module = "specguard.emulator.launch_server"
