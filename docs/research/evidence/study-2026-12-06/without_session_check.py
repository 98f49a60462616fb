"""The gate study with the session's prior check at another level: the first argument replaces
specguard.decide.prior.SESSION_CHECK_P (1e-12: the check never fires), the rest go to
`python -m research.study`. prior.checking_history reads the constant when it is called, so
setting it before the study runs is enough. Run from the repository root with PYTHONPATH=."""

import sys

import specguard.decide.prior as prior
from research.study.cli import main

prior.SESSION_CHECK_P = float(sys.argv.pop(1))
sys.exit(main())
