"""`specguard tune`: per-concurrency speculation settings, measured, raced, emitted and verified."""
