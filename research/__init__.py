"""Research around the gate, run from this checkout (never installed with the plugin): the gate
study (``python -m research.study``), fitting an emulator profile to a measured sweep
(``python -m research.calibrate``) and `specguard tune` in the emulator's virtual time
(``python -m research.tune``). research/README.md says what each is for.

They simulate with the emulator and call the gate's own functions; nothing in ``specguard``
imports this package (the import-linter contract "The wheel is the plugin", pyproject.toml).
"""
