# specguard's pytest plugin loads through its `pytest11` entry point once the package is installed
# (`pip install -e .`), here as in any repository that uses it. Run from a bare checkout (no
# install, PYTHONPATH=.), this loads it instead.
from importlib.metadata import entry_points

if not any(ep.name == "specguard" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["specguard.plugin"]
