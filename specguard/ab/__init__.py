"""`specguard ab` and `specguard bisect`: two builds of a suite's configurations measured
interleaved (ABBA) and decided per cell as "different", "same" or "undecided"; and the first bad
build of an ordered list found by such decisions (docs/ab.md).

- ``decision``: one cell's looks and decisions (pure statistics on launches);
- ``rounds``: which configurations each round launches, the order, the stopping rules;
- ``builds``, ``plan``: the builds and the selection from the command line and the suite file;
- ``launcher``: launches on real servers (the session's ServerPool, measure_cell);
- ``report``: the table, the results document, the markdown summary;
- ``bisect``: the search; ``cli``: the two commands.

It sits beside the `specguard` command (above session and report); the gate path never imports it.
"""

from specguard.ab.cli import add_parser, run

__all__ = ["add_parser", "run"]
