"""The gate study's attribution at the earlier level 0.95 (docs/gate-study.md, "Which half"):
the study's own CLI with ``session_decisions.ATTRIBUTION_CONFIDENCE`` set to 0.95 first.

    python docs/evidence/attribution/run_level_0.95.py --sessions 200 --noise gpu --history 5 \
        --prior-sd 0.01,0.005 --design on-suspicion --acceptance per-request,per-run \
        --headline defaults --jobs 1 --cache CACHE --crossover-suite none \
        --json docs/evidence/attribution/study-level-0.95.json
"""

import sys

import research.study.session_decisions as decisions

decisions.ATTRIBUTION_CONFIDENCE = 0.95
from research.study.cli import main  # noqa: E402  (after the level is set)

sys.exit(main(sys.argv[1:]))
