"""pytest's entry point for specguard (`pytest11`): it loads the plugin under its own module name,
so that `-p specguard.plugin` or a conftest's `pytest_plugins = ["specguard.plugin"]` find it
loaded instead of registering it twice; `-p no:specguard` turns it off."""

pytest_plugins = ["specguard.plugin"]
