import sys

from research.tune.cli import main

sys.exit(main())
