import sys
import specguard.decide.prior as prior
prior.SESSION_CHECK_P = float(sys.argv.pop(1))
from research.study.cli import main
sys.exit(main())
