"""The gate study with the session's second prior check on tok/s only, as before 7 Dec: the step-time
gate's prior is checked by its cell's own history alone (research/study/session_decisions.py
``_session_check`` answers None for step rates). The arguments go to `python -m research.study`;
with the same --seed and --cache it decides the same trials as the run with the check. Run from
the repository root with PYTHONPATH=."""

import sys

import research.study.session_decisions as decisions
from research.study.cli import main

_checked = decisions._session_check
decisions._session_check = lambda state, index: _checked(state, index) if index == 0 else None
sys.exit(main())
