"""`python -m research.study ...`: the gate study (docs/research/gate-study.md)."""

import sys

from research.study.cli import main

sys.exit(main())
