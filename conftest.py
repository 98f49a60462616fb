# Loads the specguard pytest plugin for every test under this directory (perf_tests/ and tests/).
pytest_plugins = ["specguard.plugin"]
