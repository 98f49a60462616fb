# specguard's pytest plugin loads through its `pytest11` entry point once the package is installed
# (`pip install -e .`), here as in any repository that uses it; naming it here as well keeps a bare
# checkout (no install, PYTHONPATH=.) working, and is a no-op otherwise.
pytest_plugins = ["specguard.plugin"]
