"""`specguard history`: change points across a series of results files, e.g. a nightly job's
artefacts (docs/history.md).

Named `timeline` so it is not confused with `specguard.session.history`, which reads the stored
baseline sessions a gate compares against; this package reads only results documents
(`--results-json` files) and sits at the commands layer beside `specguard.cli`.
"""
