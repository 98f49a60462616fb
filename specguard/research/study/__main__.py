"""`python -m specguard.research.study ...` runs `specguard study ...`."""

import sys

from specguard.research.study.cli import main

sys.exit(main())
