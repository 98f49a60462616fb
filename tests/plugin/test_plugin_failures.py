"""How the plugin classifies a failed test (issue 17): an `assert` written in a test file is a
regression; an exception raised inside specguard (an internal `assert` included) means nothing was
measured, never a regression. The kind is a report property, so it reaches JUnit and xdist.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

TESTS = '''
from pathlib import Path

import pytest

from specguard.config import ServerConfig
from specguard.engines import get_engine
from specguard.server import launch


pytestmark = pytest.mark.specguard  # a user's own specguard tests opt in with the marker


def test_user_assert():
    tok_s = 90.0
    assert tok_s > 100.0, "slower than the floor"


def test_internal_assert(tmp_path):
    # launch() with no attempts trips specguard's own `assert last_error is not None`
    launch(ServerConfig(name="x", engine="emulator", model_path="/m"), get_engine("emulator"),
           log_dir=tmp_path, attempts=0)


def test_internal_error():
    raise RuntimeError("boom")  # raised in the test file: not specguard's code, not an assert
'''


@pytest.mark.e2e
def test_assert_in_a_test_is_a_regression_and_inside_specguard_is_not_measured(tmp_path):
    (tmp_path / "test_kinds.py").write_text(TESTS)
    junit = tmp_path / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_kinds.py"), "--junitxml", str(junit)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    kinds = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}.get("specguard_failure")
             for case in ET.parse(junit).getroot().iter("testcase")}
    assert kinds == {"test_user_assert": "regression", "test_internal_assert": "not-measured",
                     "test_internal_error": "not-measured"}, kinds


@pytest.mark.e2e
def test_debug_option_is_registered(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path).stdout
    for flag in ("--specguard-debug", "--strict-server-args", "--specguard-benchmark"):
        assert flag in out


@pytest.mark.e2e
def test_a_projects_own_tests_are_left_alone(tmp_path):
    """Installed, the plugin is loaded in every pytest run of the environment (entry point): a
    project's failing test without specguard's fixtures or marker keeps pytest's own report."""
    (tmp_path / "test_own.py").write_text(TESTS.replace("pytestmark = pytest.mark.specguard", ""))
    junit = tmp_path / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_own.py"), "--junitxml", str(junit)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "specguard summary" not in proc.stdout, proc.stdout + proc.stderr
    assert not [p for p in ET.parse(junit).getroot().iter("property") if p.get("name") == "specguard_failure"]
    assert "AssertionError" in proc.stdout  # pytest's own traceback, not cut to one line
