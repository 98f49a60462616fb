"""`specguard tune` in the emulator's virtual time (``python -m research.tune``): the same search,
choice, adaptive config and verify session as the shipped command, each run the emulator's
scheduler instead of a launch; ``--seeds N`` checks racing against the full grid over N seeds
(docs/tuning.md)."""
