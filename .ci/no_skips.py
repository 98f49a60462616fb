"""A real-engine CI job passes only if its tests ran: `python .ci/no_skips.py JOB junit.xml` exits
non-zero, with one line, when the JUnit report is missing, holds no test, or any test skipped."""

import sys
import xml.etree.ElementTree as ET


def main(job: str, path: str) -> None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        sys.exit(f"{job} job FAILED: no junit report ({exc})")
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = sum(int(s.get("tests", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    if tests == 0 or skipped:
        sys.exit(f"{job} job FAILED: {tests} test(s) ran, {skipped} skipped; a skip is a failure here")


if __name__ == "__main__":
    main(*sys.argv[1:3])
